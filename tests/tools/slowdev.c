/* SPDX-License-Identifier: MIT */
/*
 * A FUSE filesystem with one file, "img", passing reads and writes through to
 * an image file, except that a read touching bytes [START, END) waits while
 * the file STALL exists: a device that hangs on one range, on demand (device
 * mapper is not available everywhere the tests run).
 *
 * usage: slowdev IMAGE START END STALL MOUNTPOINT   (stays in the foreground)
 */
#define FUSE_USE_VERSION 35
#include <errno.h>
#include <fcntl.h>
#include <fuse.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int backing = -1;
static off_t stall_start, stall_end;
static const char *stall_flag;

static int sd_getattr(const char *path, struct stat *st, struct fuse_file_info *fi)
{
	memset(st, 0, sizeof(*st));
	if (!strcmp(path, "/")) {
		st->st_mode = S_IFDIR | 0755;
		st->st_nlink = 2;
		return 0;
	}
	if (strcmp(path, "/img"))
		return -ENOENT;
	if (fstat(backing, st))
		return -errno;
	st->st_mode = S_IFREG | 0644;
	return 0;
}

static int sd_readdir(const char *path, void *buf, fuse_fill_dir_t fill, off_t off, struct fuse_file_info *fi,
		      enum fuse_readdir_flags flags)
{
	fill(buf, ".", NULL, 0, 0);
	fill(buf, "..", NULL, 0, 0);
	fill(buf, "img", NULL, 0, 0);
	return 0;
}

static int sd_open(const char *path, struct fuse_file_info *fi)
{
	if (strcmp(path, "/img"))
		return -ENOENT;
	/* no page cache and no readahead: every read the client makes arrives here, as it asked */
	fi->direct_io = 1;
	return 0;
}

static int sd_read(const char *path, char *buf, size_t size, off_t off, struct fuse_file_info *fi)
{
	const struct timespec tick = { 0, 10 * 1000 * 1000 };
	ssize_t got;

	if (off < stall_end && off + (off_t)size > stall_start)
		while (access(stall_flag, F_OK) == 0)
			nanosleep(&tick, NULL);
	got = pread(backing, buf, size, off);
	return got < 0 ? -errno : (int)got;
}

static int sd_write(const char *path, const char *buf, size_t size, off_t off, struct fuse_file_info *fi)
{
	ssize_t put = pwrite(backing, buf, size, off);

	return put < 0 ? -errno : (int)put;
}

static int sd_fsync(const char *path, int datasync, struct fuse_file_info *fi)
{
	return fdatasync(backing) < 0 ? -errno : 0;
}

static const struct fuse_operations sd_ops = {
	.getattr = sd_getattr,
	.readdir = sd_readdir,
	.open = sd_open,
	.read = sd_read,
	.write = sd_write,
	.fsync = sd_fsync,
};

int main(int argc, char **argv)
{
	if (argc != 6) {
		fprintf(stderr, "usage: slowdev IMAGE START END STALL MOUNTPOINT\n");
		return 2;
	}
	backing = open(argv[1], O_RDWR);
	if (backing < 0) {
		perror(argv[1]);
		return 2;
	}
	stall_start = strtoll(argv[2], NULL, 0);
	stall_end = strtoll(argv[3], NULL, 0);
	stall_flag = argv[4];
	char *fargv[] = { argv[0], "-f", argv[5], NULL };
	return fuse_main(3, fargv, &sd_ops, NULL);
}
