/* SPDX-License-Identifier: MIT */
/*
 * The FUSE low-level operations of the mount: each hands its request to the
 * FUSE-free operation of mount_core.c (reads) or mount_write.c (changes) and
 * puts the answer in a reply. Every reply that hands a node to the kernel
 * counts one lookup on it (mount_map_ref); forget gives them back.
 */
#define FUSE_USE_VERSION 35
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "mount.h"
#include "mount_ioctl.h"
#include "ubtrfs/balance.h"
#include "ubtrfs/format.h"
#include "ubtrfs/fswrite.h"

/*
 * Nothing changes under the mount but through it, and the kernel updates or
 * drops what it caches for every change it sends: it may keep names and
 * attributes as long as it likes.
 */
#define MOUNT_TIMEOUT 86400.0

static struct mount_ctx *ctx_of(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

static void reply_err(fuse_req_t req, int ret)
{
	fuse_reply_err(req, -ret);
}

static void caller_of(fuse_req_t req, struct mount_caller *c);

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fuse_entry_param e;
	uint64_t id;
	int ret;

	memset(&e, 0, sizeof(e));
	ret = mount_lookup(ctx_of(req), parent, name, &id, &e.attr);
	if (ret) {
		reply_err(req, ret);
		return;
	}
	e.ino = id;
	e.attr_timeout = e.entry_timeout = MOUNT_TIMEOUT;
	mount_map_ref(ctx_of(req)->map, id);
	fuse_reply_entry(req, &e);
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	struct mount_ctx *mc = ctx_of(req);

	/* answered first: the kernel waits for nothing, and an orphan's eviction may take a while */
	fuse_reply_none(req);
	mount_forget(mc, ino, nlookup);
}

static void op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
	struct mount_ctx *mc = ctx_of(req);

	for (size_t i = 0; i < count; i++)
		mount_forget(mc, forgets[i].ino, forgets[i].nlookup);
	fuse_reply_none(req);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct stat st;
	int ret = mount_getattr(ctx_of(req), ino, &st);

	if (ret)
		reply_err(req, ret);
	else
		fuse_reply_attr(req, &st, MOUNT_TIMEOUT);
}

struct dir_fill {
	fuse_req_t req;
	bool plus;      /* readdirplus: each entry with its attributes, counted as a lookup */
	char *buf;
	size_t size, used;
};

static bool dir_add(void *arg, const char *name, const struct stat *st, uint64_t node, off_t off)
{
	struct dir_fill *df = arg;
	struct fuse_entry_param e;
	size_t need;

	if (df->plus) {
		/* node 0: the kernel takes the name without attributes, and counts no lookup */
		memset(&e, 0, sizeof(e));
		e.ino = node;
		e.attr = *st;
		if (node)
			e.attr_timeout = e.entry_timeout = MOUNT_TIMEOUT;
		need = fuse_add_direntry_plus(df->req, df->buf + df->used, df->size - df->used, name, &e, off);
	} else {
		need = fuse_add_direntry(df->req, df->buf + df->used, df->size - df->used, name, st, off);
	}
	if (need > df->size - df->used)
		return true;
	df->used += need;
	/* an entry with attributes is a lookup the kernel now holds */
	if (df->plus && node)
		mount_map_ref(ctx_of(df->req)->map, node);
	return false;
}

/*
 * An open directory of a read-write mount: as the kernel's btrfs, a listing
 * shows the entries there were at opendir (or at the last rewinddir), none
 * made while it is read.
 */
struct mount_dir_handle {
	uint64_t last;  /* the highest index to show */
	bool started;   /* read from already: a read from offset 0 is a rewinddir */
	bool pending;   /* `last` not known yet: opened while a device replace held the writer lock */
	struct mount_dir_handle *prev, *next; /* mount_ctx.dirs */
};

static void dir_handle_link(struct mount_ctx *mc, struct mount_dir_handle *h)
{
	pthread_mutex_lock(&mc->dirs_lock);
	h->next = mc->dirs;
	if (h->next)
		h->next->prev = h;
	mc->dirs = h;
	pthread_mutex_unlock(&mc->dirs_lock);
}

static void dir_handle_free(struct mount_ctx *mc, struct mount_dir_handle *h)
{
	if (!h)
		return;
	pthread_mutex_lock(&mc->dirs_lock);
	if (h->prev)
		h->prev->next = h->next;
	else
		mc->dirs = h->next;
	if (h->next)
		h->next->prev = h->prev;
	pthread_mutex_unlock(&mc->dirs_lock);
	free(h);
}

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct mount_ctx *mc = ctx_of(req);
	struct mount_dir_handle *h;
	int ret;

	fi->fh = 0;
	if (!mc->e) {
		fuse_reply_open(req, fi);
		return;
	}
	h = calloc(1, sizeof(*h));
	if (!h) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	/*
	 * The kernel's btrfs notes the highest index at opendir. An online replace
	 * holds the writer lock for its whole copy, and `replace status|cancel`
	 * reach it through a directory opened on the mount: then the index is
	 * noted at the first read instead, so the open does not wait for the copy.
	 */
	{
		uint64_t done, total;

		ub_engine_device_replace_progress(mc->e, &done, &total);
		h->pending = total != 0;
	}
	ret = h->pending ? 0 : mount_dir_last_index(mc, ino, &h->last);
	if (ret) {
		free(h);
		reply_err(req, ret);
		return;
	}
	fi->fh = (uintptr_t)h;
	dir_handle_link(mc, h);
	if (fuse_reply_open(req, fi))
		dir_handle_free(mc, h);
}

static void op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	dir_handle_free(ctx_of(req), (struct mount_dir_handle *)(uintptr_t)fi->fh);
	fuse_reply_err(req, 0);
}

/* One buffer of entries from `off` on. */
static void dir_reply(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, bool plus, struct fuse_file_info *fi)
{
	struct mount_dir_handle *h = (struct mount_dir_handle *)(uintptr_t)fi->fh;
	struct mount_ctx *mc = ctx_of(req); /* the reply frees req */
	struct dir_fill df = { .req = req, .plus = plus, .size = size };
	int ret = 0;

	/* the kernel reads a directory on one file serially: the handle is this call's alone */
	if (h && ((off == 0 && h->started) || h->pending))
		ret = mount_dir_last_index(mc, ino, &h->last);
	if (h && !ret)
		h->pending = false;
	if (h)
		h->started = true;
	df.buf = ret ? NULL : malloc(size);
	if (!ret && !df.buf)
		ret = -ENOMEM;
	if (!ret)
		ret = mount_readdir(mc, ino, off, plus, h ? h->last : UINT64_MAX, dir_add, &df);
	/* reading a directory moves its atime, as the kernel's iterate_dir does (before the reply, as for read) */
	if (!ret)
		mount_read_atime(mc, ino);
	/* an error after some entries went in still gives the caller those */
	if (ret && !df.used)
		reply_err(req, ret);
	else
		fuse_reply_buf(req, df.buf, df.used);
	free(df.buf);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	dir_reply(req, ino, size, off, false, fi);
}

static void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	dir_reply(req, ino, size, off, true, fi);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct mount_ctx *mc = ctx_of(req);

	if (!mc->e && ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC))) {
		fuse_reply_err(req, EROFS);
		return;
	}
	if (fi->flags & O_TRUNC) {
		struct mount_caller c;
		int ret;

		caller_of(req, &c);
		ret = mount_open_trunc(mc, &c, ino);
		if (ret) {
			reply_err(req, ret);
			return;
		}
	}
	/*
	 * The file changes only through this kernel's page cache: keep it across
	 * opens, unless the next read must reach us to move the atime.
	 */
	fi->keep_cache = mount_open_keep_cache(mc, ino);
	fuse_reply_open(req, fi);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	uint64_t got = 0;
	void *buf = malloc(size ? size : 1);
	int ret;

	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	struct mount_ctx *mc = ctx_of(req); /* the reply frees req */

	ret = mount_read(mc, ino, (uint64_t)off, size, buf, &got);
	/* the atime moves before the reply: the kernel drops its atime then, and may stat us at once */
	if (!ret)
		mount_read_atime(mc, ino);
	if (ret)
		reply_err(req, ret);
	else
		fuse_reply_buf(req, buf, got);
	free(buf);
}

static void op_readlink(fuse_req_t req, fuse_ino_t ino)
{
	struct mount_ctx *mc = ctx_of(req); /* the reply frees req */
	char buf[4096];
	int ret = mount_readlink(mc, ino, buf, sizeof(buf));

	/* following or reading a symlink moves its atime (the kernel's touch_atime in pick_link / readlink) */
	if (!ret)
		mount_read_atime(mc, ino);
	if (ret)
		reply_err(req, ret);
	else
		fuse_reply_readlink(req, buf);
}

static void xattr_reply(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	char *out = size ? malloc(size) : NULL;
	size_t len = 0;
	int ret;

	if (size && !out) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	ret = name ? mount_getxattr(ctx_of(req), ino, name, out, size, &len)
		   : mount_listxattr(ctx_of(req), ino, out, size, &len);
	if (ret)
		reply_err(req, ret);
	else if (!size)
		fuse_reply_xattr(req, len);
	else
		fuse_reply_buf(req, out, len);
	free(out);
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	xattr_reply(req, ino, name, size);
}

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	xattr_reply(req, ino, NULL, size);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct statvfs sv;

	mount_statfs(ctx_of(req), &sv);
	fuse_reply_statfs(req, &sv);
}

/* ---- changes ---- */

static int caller_groups(void *arg, uint32_t *list, int max)
{
	/* gid_t is 32 bits on Linux: the list is the kernel's as it is */
	return fuse_req_getgroups(arg, max, (gid_t *)list);
}

static void caller_of(fuse_req_t req, struct mount_caller *c)
{
	const struct fuse_ctx *fc = fuse_req_ctx(req);

	c->uid = fc->uid;
	c->gid = fc->gid;
	c->umask = fc->umask;
	c->groups = caller_groups;
	c->arg = req;
	c->kill_setid = mount_request_kills_setid();
}

static void reply_new(fuse_req_t req, int ret, uint64_t id, const struct stat *st)
{
	struct mount_ctx *mc = ctx_of(req); /* the reply frees req */
	struct fuse_entry_param e;

	if (ret) {
		reply_err(req, ret);
		return;
	}
	memset(&e, 0, sizeof(e));
	e.ino = id;
	e.attr = *st;
	e.attr_timeout = e.entry_timeout = MOUNT_TIMEOUT;
	/* the lookup the kernel now holds was counted by the operation */
	if (fuse_reply_entry(req, &e))
		mount_forget(mc, id, 1);
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
	struct mount_caller c;
	struct stat st;
	uint64_t id = 0;
	int ret;

	caller_of(req, &c);
	ret = mount_mknod(ctx_of(req), &c, parent, name, mode, rdev, &id, &st);
	reply_new(req, ret, id, &st);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	op_mknod(req, parent, name, S_IFDIR | (mode & 07777), 0);
}

static void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	struct mount_caller c;
	struct stat st;
	uint64_t id = 0;
	int ret;

	caller_of(req, &c);
	ret = mount_symlink(ctx_of(req), &c, parent, name, link, &id, &st);
	reply_new(req, ret, id, &st);
}

static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
	struct stat st;
	int ret = mount_link(ctx_of(req), ino, newparent, newname, &st);

	reply_new(req, ret, ino, &st);
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	fuse_reply_err(req, -mount_remove(ctx_of(req), parent, name, false));
}

static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	fuse_reply_err(req, -mount_remove(ctx_of(req), parent, name, true));
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent, const char *newname,
		      unsigned int flags)
{
	struct mount_caller c;

	caller_of(req, &c);
	/* renameat2's RENAME_NOREPLACE, EXCHANGE and WHITEOUT have the file API's values */
	if (flags & ~(UB_FSW_RENAME_NOREPLACE | UB_FSW_RENAME_EXCHANGE | UB_FSW_RENAME_WHITEOUT)) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	fuse_reply_err(req, -mount_rename(ctx_of(req), &c, parent, name, newparent, newname, flags));
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set, struct fuse_file_info *fi)
{
	struct mount_caller c;
	struct stat st;
	int ret;

	caller_of(req, &c);
	/* a change through an open file (ftruncate) comes with its handle: it always moves the times */
	ret = mount_setattr(ctx_of(req), &c, ino, attr, (unsigned)to_set | (fi ? MOUNT_SET_THROUGH_FILE : 0), &st);

	if (ret)
		reply_err(req, ret);
	else
		fuse_reply_attr(req, &st, MOUNT_TIMEOUT);
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, struct fuse_file_info *fi)
{
	struct mount_ctx *mc = ctx_of(req); /* the reply frees req */
	struct fuse_entry_param e;
	struct mount_caller c;
	uint64_t id = 0;
	int ret;

	caller_of(req, &c);
	memset(&e, 0, sizeof(e));
	ret = mount_mknod(ctx_of(req), &c, parent, name, S_IFREG | (mode & 07777), 0, &id, &e.attr);
	if (ret) {
		reply_err(req, ret);
		return;
	}
	e.ino = id;
	e.attr_timeout = e.entry_timeout = MOUNT_TIMEOUT;
	fi->keep_cache = 1;
	if (fuse_reply_create(req, &e, fi))
		mount_forget(mc, id, 1);
}

static void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
		     struct fuse_file_info *fi)
{
	struct mount_caller c;
	int ret;

	caller_of(req, &c);
	ret = off < 0 ? -EINVAL : mount_write(ctx_of(req), &c, ino, (uint64_t)off, buf, size);

	if (ret)
		reply_err(req, ret);
	else
		fuse_reply_write(req, size);
}

static void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	fuse_reply_err(req, 0);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	fuse_reply_err(req, 0);
}

/* fsync, fdatasync: through the fsync log (a commit where the log cannot say it) */
static void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	fuse_reply_err(req, -mount_fsync(ctx_of(req), ino, datasync != 0));
}

/* fsyncdir: through the fsync log too (its entries changed since the last commit, and what they name) */
static void op_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	fuse_reply_err(req, -mount_fsync(ctx_of(req), ino, datasync != 0));
}

static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value, size_t size, int flags)
{
	struct mount_caller c;

	caller_of(req, &c);
	fuse_reply_err(req, -mount_setxattr(ctx_of(req), &c, ino, name, value, size, flags));
}

static void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	fuse_reply_err(req, -mount_removexattr(ctx_of(req), ino, name));
}

static void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length,
			 struct fuse_file_info *fi)
{
	/* the modes btrfs has; the others (collapse, insert, unshare) are not, as on its own mount */
	if (offset < 0 || length <= 0) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	if (mode & ~(FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE)) {
		fuse_reply_err(req, EOPNOTSUPP);
		return;
	}
	struct mount_caller c;

	caller_of(req, &c);
	fuse_reply_err(req, -mount_fallocate(ctx_of(req), &c, ino, mode, (uint64_t)offset, (uint64_t)length));
}

static void op_copy_file_range(fuse_req_t req, fuse_ino_t ino_in, off_t off_in, struct fuse_file_info *fi_in,
			       fuse_ino_t ino_out, off_t off_out, struct fuse_file_info *fi_out, size_t len, int flags)
{
	struct mount_caller c;
	int ret;

	caller_of(req, &c);
	ret = flags || off_in < 0 || off_out < 0 ? -EINVAL
	      : mount_copy_range(ctx_of(req), &c, ino_in, (uint64_t)off_in, ino_out, (uint64_t)off_out, len);

	if (ret)
		reply_err(req, ret);
	else
		fuse_reply_write(req, len);
}

static void op_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence, struct fuse_file_info *fi)
{
	uint64_t out = 0;
	int ret = off < 0 ? -ENXIO : mount_lseek(ctx_of(req), ino, (uint64_t)off, whence, &out);

	if (ret)
		reply_err(req, ret);
	else
		fuse_reply_lseek(req, (off_t)out);
}

static void op_destroy(void *userdata)
{
	struct mount_ctx *mc = userdata;

	/* the unmount: what was written is committed, as the kernel's unmount commits */
	mount_sync(mc);
	while (mc->dirs)
		dir_handle_free(mc, mc->dirs);
}

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
	struct mount_ctx *mc = userdata;

	/* the kernel clears set-id bits itself and sends the new mode with the change (btrfs's rules) */
	conn->want &= ~FUSE_CAP_HANDLE_KILLPRIV;
	if (mc->e) {
		/* large writes in one request: fewer, larger extents */
		if (conn->max_write < (1U << 20))
			conn->max_write = 1U << 20;
		/* the kernel keeps the page cache: the file changes only through it */
		conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA;
	}
	/*
	 * O_TRUNC comes with the open (mount_open_trunc): as a setattr of its own
	 * it would look like a truncate(2), which leaves a file of that size as it
	 * is, where O_TRUNC always moves mtime and ctime.
	 */
	conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
	/*
	 * POSIX ACLs (unless noacl): the kernel checks them, as on its own mount
	 * (default_permissions checks the mode); inheritance, the umask where no
	 * default ACL applies (so the mode comes unmasked) and the mode following
	 * an ACL are ours (mount_acl.c).
	 */
	if (!mc->mo->noacl && (conn->capable & FUSE_CAP_POSIX_ACL) && (conn->capable & FUSE_CAP_DONT_MASK)) {
		conn->want |= FUSE_CAP_POSIX_ACL | FUSE_CAP_DONT_MASK;
		mc->acl = true;
	}
	/*
	 * readdirplus for every listing call, not only the first: a walk that lists a
	 * directory and then stats its entries (find, ls -l, du) then needs no lookup per
	 * entry, and attributes never go stale on a read-only mount.
	 */
	conn->want &= ~FUSE_CAP_READDIRPLUS_AUTO;
	/* requests come through mount_io_read (O_TMPFILE): a splice from the device would go around it */
	conn->want &= ~FUSE_CAP_SPLICE_READ;
}

const struct fuse_lowlevel_ops mount_ops = {
	.init = op_init,
	.destroy = op_destroy,
	.lookup = op_lookup,
	.forget = op_forget,
	.forget_multi = op_forget_multi,
	.mknod = op_mknod,
	.mkdir = op_mkdir,
	.symlink = op_symlink,
	.link = op_link,
	.unlink = op_unlink,
	.rmdir = op_rmdir,
	.rename = op_rename,
	.setattr = op_setattr,
	.create = op_create,
	.write = op_write,
	.flush = op_flush,
	.release = op_release,
	.fsync = op_fsync,
	.fsyncdir = op_fsyncdir,
	.setxattr = op_setxattr,
	.removexattr = op_removexattr,
	.fallocate = op_fallocate,
	.copy_file_range = op_copy_file_range,
	.lseek = op_lseek,
	.ioctl = mount_op_ioctl,
	.getattr = op_getattr,
	.opendir = op_opendir,
	.releasedir = op_releasedir,
	.readdir = op_readdir,
	.readdirplus = op_readdirplus,
	.open = op_open,
	.read = op_read,
	.readlink = op_readlink,
	.getxattr = op_getxattr,
	.listxattr = op_listxattr,
	.statfs = op_statfs,
};
