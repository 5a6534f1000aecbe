/* SPDX-License-Identifier: MIT */
/*
 * The FUSE ceiling for bench/mount: a read-only filesystem that serves zeros from
 * memory, with the shape of the benchmark's btrfs image (one big file, DIRS
 * directories of FILES empty files each), mounted as the ubtrfs mount is (low-level
 * API, the same options, a multithreaded session). Whatever it cannot do faster
 * is FUSE's own cost on this machine.
 *
 * Given a SOURCE file, the big file's bytes are read from it instead (a pread into
 * a buffer per request, then the reply): a pass-through, what any FUSE filesystem
 * that must fetch its bytes from a device pays at least, with no checks at all.
 *
 *   bench_zerofs SIZE_BYTES DIRS FILES MOUNTPOINT [SOURCE]    (stays in the foreground)
 *
 * Node ids: 1 root, 2 "zero", 3 "tree", 4 + d the directory "tree/dD",
 * 4 + DIRS + d * FILES + f the file "tree/dD/fF".
 */
#define FUSE_USE_VERSION 35
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

static uint64_t zero_size, ndirs, nfiles;
static const char zeros[1 << 20];
static int source_fd = -1; /* the pass-through's file, -1 for zeros */

#define ROOT_ID 1
#define ZERO_ID 2
#define TREE_ID 3
#define DIR_ID(d) (4 + (d))
#define FILE_ID(d, f) (4 + ndirs + (d) * nfiles + (f))

static bool id_stat(fuse_ino_t id, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = id;
	st->st_nlink = 1;
	if (id == ROOT_ID || id == TREE_ID || (id >= DIR_ID(0) && id < DIR_ID(ndirs))) {
		st->st_mode = S_IFDIR | 0755;
		st->st_nlink = 2;
	} else if (id == ZERO_ID) {
		st->st_mode = S_IFREG | 0644;
		st->st_size = (off_t)zero_size;
		st->st_blocks = (blkcnt_t)(zero_size / 512);
	} else if (id >= FILE_ID(0, 0) && id < FILE_ID(ndirs, 0)) {
		st->st_mode = S_IFREG | 0644;
	} else {
		return false;
	}
	st->st_blksize = 4096;
	return true;
}

static bool parse_index(const char *s, char prefix, uint64_t limit, uint64_t *out)
{
	char *end;

	if (s[0] != prefix || !s[1])
		return false;
	*out = strtoull(s + 1, &end, 10);
	return !*end && *out < limit;
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fuse_entry_param e;
	uint64_t i;
	fuse_ino_t id = 0;

	if (parent == ROOT_ID && !strcmp(name, "zero"))
		id = ZERO_ID;
	else if (parent == ROOT_ID && !strcmp(name, "tree"))
		id = TREE_ID;
	else if (parent == TREE_ID && parse_index(name, 'd', ndirs, &i))
		id = DIR_ID(i);
	else if (parent >= DIR_ID(0) && parent < DIR_ID(ndirs) && parse_index(name, 'f', nfiles, &i))
		id = FILE_ID(parent - DIR_ID(0), i);
	memset(&e, 0, sizeof(e));
	if (!id || !id_stat(id, &e.attr)) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	e.ino = id;
	e.attr_timeout = e.entry_timeout = 86400.0;
	fuse_reply_entry(req, &e);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct stat st;

	if (!id_stat(ino, &st))
		fuse_reply_err(req, ENOENT);
	else
		fuse_reply_attr(req, &st, 86400.0);
}

/* Entry `i` of directory `ino` (0 ".", 1 "..", then the children): false past the end. */
static bool dir_entry(fuse_ino_t ino, uint64_t i, char *name, size_t len, fuse_ino_t *id)
{
	if (i < 2) {
		snprintf(name, len, "%s", i ? ".." : ".");
		*id = ino;
		return true;
	}
	i -= 2;
	if (ino == ROOT_ID && i < 2) {
		snprintf(name, len, "%s", i ? "tree" : "zero");
		*id = i ? TREE_ID : ZERO_ID;
		return true;
	}
	if (ino == TREE_ID && i < ndirs) {
		snprintf(name, len, "d%llu", (unsigned long long)i);
		*id = DIR_ID(i);
		return true;
	}
	if (ino >= DIR_ID(0) && ino < DIR_ID(ndirs) && i < nfiles) {
		snprintf(name, len, "f%llu", (unsigned long long)i);
		*id = FILE_ID(ino - DIR_ID(0), i);
		return true;
	}
	return false;
}

static void dir_reply(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, bool plus)
{
	char *buf = malloc(size);
	size_t used = 0;
	char name[32];
	fuse_ino_t id;

	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	for (uint64_t i = (uint64_t)off; dir_entry(ino, i, name, sizeof(name), &id); i++) {
		struct fuse_entry_param e;
		size_t need;

		memset(&e, 0, sizeof(e));
		id_stat(id, &e.attr);
		if (plus) {
			e.ino = i < 2 ? 0 : id;
			e.attr_timeout = e.entry_timeout = 86400.0;
			need = fuse_add_direntry_plus(req, buf + used, size - used, name, &e, (off_t)i + 1);
		} else {
			need = fuse_add_direntry(req, buf + used, size - used, name, &e.attr, (off_t)i + 1);
		}
		if (need > size - used)
			break;
		used += need;
	}
	fuse_reply_buf(req, buf, used);
	free(buf);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	dir_reply(req, ino, size, off, false);
}

static void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	dir_reply(req, ino, size, off, true);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	fi->keep_cache = 1;
	fuse_reply_open(req, fi);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	uint64_t end = ino == ZERO_ID ? zero_size : 0;

	if ((uint64_t)off >= end)
		size = 0;
	else if (size > end - (uint64_t)off)
		size = end - (uint64_t)off;
	if (source_fd >= 0) {
		char *buf = malloc(size ? size : 1);
		ssize_t n = buf ? pread(source_fd, buf, size, off) : -1;

		if (n < 0)
			fuse_reply_err(req, buf ? errno : ENOMEM);
		else
			fuse_reply_buf(req, buf, (size_t)n);
		free(buf);
		return;
	}
	if (size > sizeof(zeros))
		size = sizeof(zeros);
	fuse_reply_buf(req, zeros, size);
}

/* as the ubtrfs mount: readdirplus for every listing call */
static void op_init(void *userdata, struct fuse_conn_info *conn)
{
	conn->want &= ~FUSE_CAP_READDIRPLUS_AUTO;
}

static const struct fuse_lowlevel_ops ops = {
	.init = op_init,
	.lookup = op_lookup,
	.getattr = op_getattr,
	.readdir = op_readdir,
	.readdirplus = op_readdirplus,
	.open = op_open,
	.read = op_read,
};

int main(int argc, char **argv)
{
	char *fargv[] = { argv[0], "-o", "ro,default_permissions,subtype=zerofs,fsname=zerofs,allow_other", NULL };
	struct fuse_args args = FUSE_ARGS_INIT(3, fargv);
	struct fuse_loop_config cfg = { .clone_fd = 0, .max_idle_threads = 10 };
	struct fuse_session *se;
	int ret = 1;

	if (argc != 5 && argc != 6) {
		fprintf(stderr, "usage: bench_zerofs SIZE_BYTES DIRS FILES MOUNTPOINT [SOURCE]\n");
		return 2;
	}
	if (argc == 6) {
		source_fd = open(argv[5], O_RDONLY | O_CLOEXEC);
		if (source_fd < 0) {
			perror(argv[5]);
			return 2;
		}
	}
	zero_size = strtoull(argv[1], NULL, 0);
	ndirs = strtoull(argv[2], NULL, 0);
	nfiles = strtoull(argv[3], NULL, 0);
	se = fuse_session_new(&args, &ops, sizeof(ops), NULL);
	if (!se)
		return 1;
	if (fuse_session_mount(se, argv[4]))
		goto out;
	if (!fuse_set_signal_handlers(se)) {
		ret = fuse_session_loop_mt(se, &cfg) ? 1 : 0;
		fuse_remove_signal_handlers(se);
	}
	fuse_session_unmount(se);
out:
	fuse_session_destroy(se);
	return ret;
}
