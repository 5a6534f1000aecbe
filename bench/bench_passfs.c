/* SPDX-License-Identifier: MIT */
/*
 * The FUSE ceiling for bench/mount's writing figures: a read-write filesystem
 * that passes every call through to a directory (on tmpfs in the benchmark),
 * mounted as the ubtrfs mount is (low-level API, default_permissions, the same
 * write size, no writeback cache, a multithreaded session). It keeps no
 * metadata of its own and checks nothing: what it cannot do faster is the cost
 * of FUSE plus the underlying filesystem on this machine.
 *
 *   bench_passfs SOURCE_DIR MOUNTPOINT    (stays in the foreground)
 *
 * Node ids are pointers to a node holding an O_PATH descriptor of the inode;
 * nodes are found again by (st_dev, st_ino) and live until the kernel forgets
 * their last lookup.
 */
#define _GNU_SOURCE
#define FUSE_USE_VERSION 35
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

struct node {
	int fd; /* O_PATH */
	dev_t dev;
	ino_t ino;
	uint64_t nlookup;
	struct node *next; /* hash chain */
};

#define NBUCKETS (1 << 16)
static struct node *buckets[NBUCKETS];
static struct node root;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static struct node *node_of(fuse_ino_t id)
{
	return id == FUSE_ROOT_ID ? &root : (struct node *)(uintptr_t)id;
}

static fuse_ino_t id_of(struct node *n)
{
	return n == &root ? FUSE_ROOT_ID : (fuse_ino_t)(uintptr_t)n;
}

static unsigned bucket(dev_t dev, ino_t ino)
{
	return (unsigned)((ino * 0x9e3779b97f4a7c15ULL) >> 48) ^ (unsigned)dev;
}

/* A lookup of `name` in `dir` (or of `dir`'s own child fd when fd >= 0): the entry, one more lookup held. */
static int lookup_at(struct node *dir, const char *name, struct fuse_entry_param *e)
{
	struct node *n;
	int fd;
	unsigned b;

	memset(e, 0, sizeof(*e));
	fd = openat(dir->fd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return errno;
	if (fstatat(fd, "", &e->attr, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0) {
		int err = errno;
		close(fd);
		return err;
	}
	b = bucket(e->attr.st_dev, e->attr.st_ino) % NBUCKETS;
	pthread_mutex_lock(&lock);
	for (n = buckets[b]; n; n = n->next)
		if (n->dev == e->attr.st_dev && n->ino == e->attr.st_ino)
			break;
	if (n) {
		n->nlookup++;
		close(fd);
	} else {
		n = calloc(1, sizeof(*n));
		if (!n) {
			pthread_mutex_unlock(&lock);
			close(fd);
			return ENOMEM;
		}
		n->fd = fd;
		n->dev = e->attr.st_dev;
		n->ino = e->attr.st_ino;
		n->nlookup = 1;
		n->next = buckets[b];
		buckets[b] = n;
	}
	pthread_mutex_unlock(&lock);
	e->ino = id_of(n);
	e->attr_timeout = e->entry_timeout = 86400.0;
	return 0;
}

static void forget_one(fuse_ino_t id, uint64_t count)
{
	struct node *n = node_of(id), **pp;

	if (n == &root)
		return;
	pthread_mutex_lock(&lock);
	n->nlookup -= count < n->nlookup ? count : n->nlookup;
	if (n->nlookup == 0) {
		for (pp = &buckets[bucket(n->dev, n->ino) % NBUCKETS]; *pp; pp = &(*pp)->next)
			if (*pp == n) {
				*pp = n->next;
				break;
			}
		close(n->fd);
		free(n);
	}
	pthread_mutex_unlock(&lock);
}

/* /proc/self/fd/N of a node: how an O_PATH descriptor is reopened or changed */
static void proc_path(const struct node *n, char *buf, size_t size)
{
	snprintf(buf, size, "/proc/self/fd/%d", n->fd);
}

static void reply_entry_or_err(fuse_req_t req, struct node *dir, const char *name, int err)
{
	struct fuse_entry_param e;

	if (!err)
		err = lookup_at(dir, name, &e);
	if (err)
		fuse_reply_err(req, err);
	else
		fuse_reply_entry(req, &e);
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	reply_entry_or_err(req, node_of(parent), name, 0);
}

static void op_forget(fuse_req_t req, fuse_ino_t id, uint64_t nlookup)
{
	forget_one(id, nlookup);
	fuse_reply_none(req);
}

static void op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *f)
{
	for (size_t i = 0; i < count; i++)
		forget_one(f[i].ino, f[i].nlookup);
	fuse_reply_none(req);
}

static void op_getattr(fuse_req_t req, fuse_ino_t id, struct fuse_file_info *fi)
{
	struct stat st;

	if (fstatat(node_of(id)->fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0)
		fuse_reply_err(req, errno);
	else
		fuse_reply_attr(req, &st, 86400.0);
}

static void op_setattr(fuse_req_t req, fuse_ino_t id, struct stat *attr, int to_set, struct fuse_file_info *fi)
{
	struct node *n = node_of(id);
	char path[64];
	int ret = 0;

	proc_path(n, path, sizeof(path));
	if (to_set & FUSE_SET_ATTR_MODE)
		ret = fi ? fchmod((int)fi->fh, attr->st_mode) : chmod(path, attr->st_mode);
	if (!ret && (to_set & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)))
		ret = fchownat(n->fd, "", to_set & FUSE_SET_ATTR_UID ? attr->st_uid : (uid_t)-1,
			       to_set & FUSE_SET_ATTR_GID ? attr->st_gid : (gid_t)-1, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW);
	if (!ret && (to_set & FUSE_SET_ATTR_SIZE))
		ret = fi ? ftruncate((int)fi->fh, attr->st_size) : truncate(path, attr->st_size);
	if (!ret && (to_set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME))) {
		struct timespec tv[2] = { { .tv_nsec = UTIME_OMIT }, { .tv_nsec = UTIME_OMIT } };

		if (to_set & FUSE_SET_ATTR_ATIME_NOW)
			tv[0].tv_nsec = UTIME_NOW;
		else if (to_set & FUSE_SET_ATTR_ATIME)
			tv[0] = attr->st_atim;
		if (to_set & FUSE_SET_ATTR_MTIME_NOW)
			tv[1].tv_nsec = UTIME_NOW;
		else if (to_set & FUSE_SET_ATTR_MTIME)
			tv[1] = attr->st_mtim;
		ret = fi ? futimens((int)fi->fh, tv) : utimensat(AT_FDCWD, path, tv, 0);
	}
	if (ret)
		fuse_reply_err(req, errno);
	else
		op_getattr(req, id, fi);
}

static void op_readlink(fuse_req_t req, fuse_ino_t id)
{
	char buf[4097];
	ssize_t n = readlinkat(node_of(id)->fd, "", buf, sizeof(buf) - 1);

	if (n < 0) {
		fuse_reply_err(req, errno);
		return;
	}
	buf[n] = 0;
	fuse_reply_readlink(req, buf);
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
	struct node *dir = node_of(parent);

	reply_entry_or_err(req, dir, name, mknodat(dir->fd, name, mode, rdev) < 0 ? errno : 0);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	struct node *dir = node_of(parent);

	reply_entry_or_err(req, dir, name, mkdirat(dir->fd, name, mode) < 0 ? errno : 0);
}

static void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	struct node *dir = node_of(parent);

	reply_entry_or_err(req, dir, name, symlinkat(link, dir->fd, name) < 0 ? errno : 0);
}

static void op_link(fuse_req_t req, fuse_ino_t id, fuse_ino_t newparent, const char *newname)
{
	struct node *dir = node_of(newparent);
	char path[64];

	proc_path(node_of(id), path, sizeof(path));
	reply_entry_or_err(req, dir, newname, linkat(AT_FDCWD, path, dir->fd, newname, AT_SYMLINK_FOLLOW) < 0 ? errno : 0);
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	fuse_reply_err(req, unlinkat(node_of(parent)->fd, name, 0) < 0 ? errno : 0);
}

static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	fuse_reply_err(req, unlinkat(node_of(parent)->fd, name, AT_REMOVEDIR) < 0 ? errno : 0);
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent, const char *newname,
		      unsigned int flags)
{
	int ret = renameat2(node_of(parent)->fd, name, node_of(newparent)->fd, newname, flags);

	fuse_reply_err(req, ret < 0 ? errno : 0);
}

static void op_open(fuse_req_t req, fuse_ino_t id, struct fuse_file_info *fi)
{
	char path[64];
	int fd;

	proc_path(node_of(id), path, sizeof(path));
	fd = open(path, (fi->flags & ~O_NOFOLLOW) | O_CLOEXEC);
	if (fd < 0) {
		fuse_reply_err(req, errno);
		return;
	}
	fi->fh = (uint64_t)fd;
	fuse_reply_open(req, fi);
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, struct fuse_file_info *fi)
{
	struct node *dir = node_of(parent);
	struct fuse_entry_param e;
	int fd = openat(dir->fd, name, (fi->flags | O_CREAT) & ~O_NOFOLLOW, mode), err;

	if (fd < 0) {
		fuse_reply_err(req, errno);
		return;
	}
	err = lookup_at(dir, name, &e);
	if (err) {
		close(fd);
		fuse_reply_err(req, err);
		return;
	}
	fi->fh = (uint64_t)fd;
	fuse_reply_create(req, &e, fi);
}

static void op_read(fuse_req_t req, fuse_ino_t id, size_t size, off_t off, struct fuse_file_info *fi)
{
	struct fuse_bufvec buf = FUSE_BUFVEC_INIT(size);

	buf.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
	buf.buf[0].fd = (int)fi->fh;
	buf.buf[0].pos = off;
	fuse_reply_data(req, &buf, FUSE_BUF_SPLICE_MOVE);
}

static void op_write(fuse_req_t req, fuse_ino_t id, const char *data, size_t size, off_t off,
		     struct fuse_file_info *fi)
{
	ssize_t n = pwrite((int)fi->fh, data, size, off);

	if (n < 0)
		fuse_reply_err(req, errno);
	else
		fuse_reply_write(req, (size_t)n);
}

static void op_flush(fuse_req_t req, fuse_ino_t id, struct fuse_file_info *fi)
{
	fuse_reply_err(req, 0);
}

static void op_release(fuse_req_t req, fuse_ino_t id, struct fuse_file_info *fi)
{
	close((int)fi->fh);
	fuse_reply_err(req, 0);
}

static void op_fsync(fuse_req_t req, fuse_ino_t id, int datasync, struct fuse_file_info *fi)
{
	int ret = datasync ? fdatasync((int)fi->fh) : fsync((int)fi->fh);

	fuse_reply_err(req, ret < 0 ? errno : 0);
}

struct dir_handle {
	DIR *dp;
	off_t pos;
	struct dirent *pending; /* read but not yet replied */
};

static void op_opendir(fuse_req_t req, fuse_ino_t id, struct fuse_file_info *fi)
{
	struct dir_handle *d = calloc(1, sizeof(*d));
	int fd = openat(node_of(id)->fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (!d || fd < 0 || !(d->dp = fdopendir(fd))) {
		int err = d ? errno : ENOMEM;
		if (fd >= 0)
			close(fd);
		free(d);
		fuse_reply_err(req, err);
		return;
	}
	fi->fh = (uint64_t)(uintptr_t)d;
	fuse_reply_open(req, fi);
}

static void op_readdir(fuse_req_t req, fuse_ino_t id, size_t size, off_t off, struct fuse_file_info *fi)
{
	struct dir_handle *d = (struct dir_handle *)(uintptr_t)fi->fh;
	char *buf = malloc(size);
	size_t used = 0;

	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	if (off != d->pos) {
		seekdir(d->dp, off);
		d->pending = NULL;
		d->pos = off;
	}
	for (;;) {
		struct dirent *de = d->pending ? d->pending : readdir(d->dp);
		struct stat st = { 0 };
		size_t n;

		d->pending = NULL;
		if (!de)
			break;
		st.st_ino = de->d_ino;
		st.st_mode = (mode_t)(de->d_type << 12);
		n = fuse_add_direntry(req, buf + used, size - used, de->d_name, &st, de->d_off);
		if (n > size - used) {
			d->pending = de;
			break;
		}
		used += n;
		d->pos = de->d_off;
	}
	fuse_reply_buf(req, buf, used);
	free(buf);
}

static void op_releasedir(fuse_req_t req, fuse_ino_t id, struct fuse_file_info *fi)
{
	struct dir_handle *d = (struct dir_handle *)(uintptr_t)fi->fh;

	closedir(d->dp);
	free(d);
	fuse_reply_err(req, 0);
}

static void op_statfs(fuse_req_t req, fuse_ino_t id)
{
	struct statvfs sv;

	if (fstatvfs(node_of(id)->fd, &sv) < 0)
		fuse_reply_err(req, errno);
	else
		fuse_reply_statfs(req, &sv);
}

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
	/* as the ubtrfs mount asks: 1 MiB writes, the page cache kept, no writeback cache */
	if (conn->max_write < (1U << 20))
		conn->max_write = 1U << 20;
	conn->want &= ~(FUSE_CAP_AUTO_INVAL_DATA | FUSE_CAP_WRITEBACK_CACHE | FUSE_CAP_HANDLE_KILLPRIV);
}

static const struct fuse_lowlevel_ops ops = {
	.init = op_init,
	.lookup = op_lookup,
	.forget = op_forget,
	.forget_multi = op_forget_multi,
	.getattr = op_getattr,
	.setattr = op_setattr,
	.readlink = op_readlink,
	.mknod = op_mknod,
	.mkdir = op_mkdir,
	.symlink = op_symlink,
	.link = op_link,
	.unlink = op_unlink,
	.rmdir = op_rmdir,
	.rename = op_rename,
	.open = op_open,
	.create = op_create,
	.read = op_read,
	.write = op_write,
	.flush = op_flush,
	.release = op_release,
	.fsync = op_fsync,
	.opendir = op_opendir,
	.readdir = op_readdir,
	.releasedir = op_releasedir,
	.statfs = op_statfs,
};

int main(int argc, char **argv)
{
	char *fargv[] = { argv[0], "-o", "rw,default_permissions,subtype=passfs,fsname=passfs,allow_other", NULL };
	struct fuse_args args = FUSE_ARGS_INIT(3, fargv);
	struct fuse_loop_config cfg = { .clone_fd = 0, .max_idle_threads = 10 };
	struct fuse_session *se;
	struct stat st;
	int ret = 1;

	if (argc != 3) {
		fprintf(stderr, "usage: bench_passfs SOURCE_DIR MOUNTPOINT\n");
		return 2;
	}
	root.fd = open(argv[1], O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (root.fd < 0 || fstat(root.fd, &st) < 0) {
		perror(argv[1]);
		return 2;
	}
	root.dev = st.st_dev;
	root.ino = st.st_ino;
	root.nlookup = 1;
	umask(0);
	se = fuse_session_new(&args, &ops, sizeof(ops), NULL);
	if (!se)
		return 1;
	if (fuse_session_mount(se, argv[2]))
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
