/* SPDX-License-Identifier: MIT */
/*
 * rec_fuse: a FUSE filesystem that serves image files and records, in one log and in the
 * order they arrive, every write to any of them and every fsync, so that a test can build
 * the images a crash after any prefix of that order could have left on SEVERAL devices at
 * once (bench/write-hole: the kernel's RAID5/6 write hole beside ubtrfs').
 *
 *   rec_fuse LOG MOUNTPOINT IMAGE...
 *
 * shows IMAGE number i as MOUNTPOINT/devI (read-write, the image's size) and a control file
 * MOUNTPOINT/mark: each write to it appends a MARK record holding the written bytes (a
 * workload writes "round 3" there once `btrfs filesystem sync` has returned). The program
 * stays in the foreground until the mount is taken away (umount MOUNTPOINT), then prints
 * its counts on stderr.
 *
 * Why one order exists: the session is served by one thread (fuse_session_loop), so the
 * requests reach the images one at a time, and a write is answered only once it is in the
 * image. A kernel filesystem reaches the images through loop devices set up on the devI
 * files (`losetup -f --show`, buffered, the default): the loop driver writes a bio into the
 * file's page cache, and FUSE without writeback caching (never asked for here) sends that
 * write to us at once and waits for the answer, so the bio completes only after its bytes
 * are in the image and logged; a REQ_PREFLUSH (and a FUA write, which the loop device
 * announces no support for, so the block layer adds the flush) becomes vfs_fsync of the
 * file, our FSYNC. So a write the filesystem waited for before issuing another one is
 * logged before it, and writes in flight together are logged in one of their possible
 * orders: every prefix of the log is a state some crash could have left. (bench/write-hole
 * checks this on each run: a dd of known blocks with oflag=direct,sync through a loop
 * device must show up as writes followed by a flush.) A FUSE FLUSH (sent at close) says
 * nothing about durability and is not recorded.
 *
 * A record: magic "UBRW", kind (u32: 1 write, 2 fsync, 4 mark), device index (u32), zero
 * (u32), offset (u64), length (u64), then for writes and marks the bytes; little-endian
 * as the machines the tests run on. The log's own writes are not synced: a crash of the
 * machine is not what it records.
 */
#define FUSE_USE_VERSION 35
#include <fuse_lowlevel.h>

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

enum { REC_WRITE = 1, REC_FSYNC = 2, REC_MARK = 4 };
enum { MAX_IMAGES = 16 };

struct rec_header {
	char magic[4];
	uint32_t kind, dev, zero;
	uint64_t off, len;
};

/* inode numbers: 1 the root, 2 + i image i, 2 + count the control file */
struct rec_state {
	int log_fd;
	int count;
	int fds[MAX_IMAGES];
	char names[MAX_IMAGES][16];
	uint64_t writes, bytes, fsyncs, marks;
	int log_error;
};

static struct rec_state st;

static fuse_ino_t mark_ino(void)
{
	return 2 + (fuse_ino_t)st.count;
}

static int image_of(fuse_ino_t ino)
{
	return ino >= 2 && ino < mark_ino() ? (int)(ino - 2) : -1;
}

/* a lost record would make every later crash image wrong: the run is stopped instead */
static int log_record(uint32_t kind, uint32_t dev, uint64_t off, const void *buf, uint64_t len)
{
	struct rec_header h = { .magic = { 'U', 'B', 'R', 'W' }, .kind = kind, .dev = dev, .off = off,
				.len = len };
	struct iovec iov[2] = { { &h, sizeof(h) }, { (void *)buf, buf ? len : 0 } };
	size_t want = sizeof(h) + (buf ? len : 0);
	ssize_t n = writev(st.log_fd, iov, buf ? 2 : 1);

	if (n != (ssize_t)want) {
		fprintf(stderr, "rec_fuse: the log could not be written (%s): stopping\n",
			n < 0 ? strerror(errno) : "short write");
		st.log_error = 1;
		return -EIO;
	}
	return 0;
}

static int fill_attr(fuse_ino_t ino, struct stat *sb)
{
	memset(sb, 0, sizeof(*sb));
	sb->st_ino = ino;
	sb->st_nlink = 1;
	if (ino == FUSE_ROOT_ID) {
		sb->st_mode = S_IFDIR | 0755;
		sb->st_nlink = 2;
		return 0;
	}
	if (ino == mark_ino()) {
		sb->st_mode = S_IFREG | 0644;
		return 0;
	}
	int i = image_of(ino);
	struct stat img;

	if (i < 0)
		return -ENOENT;
	if (fstat(st.fds[i], &img) < 0)
		return -errno;
	sb->st_mode = S_IFREG | 0644;
	sb->st_size = img.st_size;
	sb->st_blocks = img.st_blocks;
	sb->st_blksize = 4096;
	return 0;
}

static void rec_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fuse_entry_param e = { 0 };
	fuse_ino_t ino = 0;

	if (parent != FUSE_ROOT_ID)
		return (void)fuse_reply_err(req, ENOENT);
	if (!strcmp(name, "mark"))
		ino = mark_ino();
	for (int i = 0; i < st.count && !ino; i++)
		if (!strcmp(name, st.names[i]))
			ino = 2 + (fuse_ino_t)i;
	if (!ino || fill_attr(ino, &e.attr))
		return (void)fuse_reply_err(req, ENOENT);
	e.ino = ino;
	/* the sizes never change under the kernel: it may keep them */
	e.attr_timeout = e.entry_timeout = 3600;
	fuse_reply_entry(req, &e);
}

static void rec_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct stat sb;
	int ret = fill_attr(ino, &sb);

	(void)fi;
	if (ret)
		return (void)fuse_reply_err(req, -ret);
	fuse_reply_attr(req, &sb, 3600);
}

/* a truncate (the control file opened with O_TRUNC) changes nothing: the sizes are fixed */
static void rec_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
			struct fuse_file_info *fi)
{
	(void)attr;
	(void)fi;
	if ((to_set & FUSE_SET_ATTR_SIZE) && ino != mark_ino())
		return (void)fuse_reply_err(req, EPERM);
	rec_getattr(req, ino, NULL);
}

static void rec_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	char *buf;
	size_t used = 0;

	(void)fi;
	if (ino != FUSE_ROOT_ID)
		return (void)fuse_reply_err(req, ENOTDIR);
	buf = malloc(size ? size : 1);
	if (!buf)
		return (void)fuse_reply_err(req, ENOMEM);
	/* entries: ".", "..", the images, "mark"; off is the index of the next one */
	for (off_t k = off; k < 3 + st.count; k++) {
		struct stat sb = { 0 };
		const char *name = k == 0 ? "." : k == 1 ? ".." : k - 2 < st.count ? st.names[k - 2] : "mark";
		size_t n;

		sb.st_ino = k < 2 ? FUSE_ROOT_ID : (fuse_ino_t)k;
		sb.st_mode = k < 2 ? S_IFDIR : S_IFREG;
		n = fuse_add_direntry(req, buf + used, size - used, name, &sb, k + 1);
		if (n > size - used)
			break;
		used += n;
	}
	fuse_reply_buf(req, buf, used);
	free(buf);
}

static void rec_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	if (ino != mark_ino() && image_of(ino) < 0)
		return (void)fuse_reply_err(req, EISDIR);
	/* the control file is never cached: each write must reach us as it is made */
	fi->direct_io = ino == mark_ino();
	fi->keep_cache = ino != mark_ino();
	fuse_reply_open(req, fi);
}

static void rec_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	int i = image_of(ino);
	char *buf;
	ssize_t n;

	(void)fi;
	if (i < 0)
		return (void)fuse_reply_buf(req, NULL, 0);
	buf = malloc(size ? size : 1);
	if (!buf)
		return (void)fuse_reply_err(req, ENOMEM);
	n = pread(st.fds[i], buf, size, off);
	if (n < 0)
		fuse_reply_err(req, errno);
	else
		fuse_reply_buf(req, buf, (size_t)n);
	free(buf);
}

static void rec_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
		      struct fuse_file_info *fi)
{
	int i = image_of(ino);
	size_t done = 0;

	(void)fi;
	if (st.log_error)
		return (void)fuse_reply_err(req, EIO);
	if (ino == mark_ino()) {
		if (log_record(REC_MARK, 0, st.marks, buf, size))
			return (void)fuse_reply_err(req, EIO);
		st.marks++;
		return (void)fuse_reply_write(req, size);
	}
	if (i < 0)
		return (void)fuse_reply_err(req, EBADF);
	while (done < size) {
		ssize_t n = pwrite(st.fds[i], buf + done, size - done, off + (off_t)done);

		if (n <= 0)
			return (void)fuse_reply_err(req, n < 0 ? errno : ENOSPC);
		done += (size_t)n;
	}
	/* logged only once it is in the image, and answered only once logged */
	if (log_record(REC_WRITE, (uint32_t)i, (uint64_t)off, buf, size))
		return (void)fuse_reply_err(req, EIO);
	st.writes++;
	st.bytes += size;
	fuse_reply_write(req, size);
}

static void rec_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	int i = image_of(ino);

	(void)datasync;
	(void)fi;
	if (i >= 0) {
		if (log_record(REC_FSYNC, (uint32_t)i, 0, NULL, 0))
			return (void)fuse_reply_err(req, EIO);
		st.fsyncs++;
	}
	fuse_reply_err(req, 0);
}

static void rec_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	(void)fi;
	fuse_reply_err(req, 0);
}

/* a discard (a punched hole) would change the images unrecorded: refused, the loop device
 * then reports no discard support (mount the kernel with nodiscard all the same) */
static void rec_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
			  struct fuse_file_info *fi)
{
	(void)ino;
	(void)mode;
	(void)off;
	(void)len;
	(void)fi;
	fuse_reply_err(req, EOPNOTSUPP);
}

static const struct fuse_lowlevel_ops rec_ops = {
	.lookup = rec_lookup,
	.getattr = rec_getattr,
	.setattr = rec_setattr,
	.readdir = rec_readdir,
	.open = rec_open,
	.read = rec_read,
	.write = rec_write,
	.fsync = rec_fsync,
	.flush = rec_flush,
	.fallocate = rec_fallocate,
};

int main(int argc, char **argv)
{
	/* allow_other: the loop driver's workers and other users reach the images too */
	char *fargv[] = { argv[0], "-o", "allow_other,fsname=rec_fuse,subtype=rec_fuse", NULL };
	struct fuse_args args = FUSE_ARGS_INIT(3, fargv);
	struct fuse_session *se;
	int ret = 1;

	if (argc < 4 || argc - 3 > MAX_IMAGES) {
		fprintf(stderr, "usage: rec_fuse LOG MOUNTPOINT IMAGE... (at most %d images)\n", MAX_IMAGES);
		return 2;
	}
	st.count = argc - 3;
	for (int i = 0; i < st.count; i++) {
		st.fds[i] = open(argv[3 + i], O_RDWR | O_CLOEXEC);
		if (st.fds[i] < 0) {
			fprintf(stderr, "rec_fuse: %s: %s\n", argv[3 + i], strerror(errno));
			return 2;
		}
		snprintf(st.names[i], sizeof(st.names[i]), "dev%d", i);
	}
	st.log_fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
	if (st.log_fd < 0) {
		fprintf(stderr, "rec_fuse: %s: %s\n", argv[1], strerror(errno));
		return 2;
	}
	se = fuse_session_new(&args, &rec_ops, sizeof(rec_ops), NULL);
	if (!se)
		return 2;
	if (fuse_set_signal_handlers(se) == 0) {
		if (fuse_session_mount(se, argv[2]) == 0) {
			/* one thread: one request at a time, the order of the log */
			ret = fuse_session_loop(se) ? 1 : 0;
			fuse_session_unmount(se);
		}
		fuse_remove_signal_handlers(se);
	}
	fuse_session_destroy(se);
	fuse_opt_free_args(&args);
	fprintf(stderr, "rec_fuse: %llu writes (%llu bytes), %llu fsyncs, %llu marks%s\n",
		(unsigned long long)st.writes, (unsigned long long)st.bytes, (unsigned long long)st.fsyncs,
		(unsigned long long)st.marks, st.log_error ? ", the log failed" : "");
	return st.log_error ? 1 : ret;
}
