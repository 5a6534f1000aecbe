/* SPDX-License-Identifier: MIT */
/*
 * The FUSE low-level operations of the read-only mount: each hands its request
 * to the FUSE-free operation of mount_core.c and puts the answer in a reply.
 */
#define FUSE_USE_VERSION 35
#include <errno.h>
#include <fuse_lowlevel.h>
#include <stdlib.h>
#include <string.h>
#include "mount.h"

/* Nothing changes under a read-only mount: the kernel may keep names and attributes as long as it likes. */
#define MOUNT_TIMEOUT 86400.0

static struct mount_ctx *ctx_of(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

static void reply_err(fuse_req_t req, int ret)
{
	fuse_reply_err(req, -ret);
}

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
	fuse_reply_entry(req, &e);
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
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
	return false;
}

/* One buffer of entries from `off` on. */
static void dir_reply(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, bool plus)
{
	struct dir_fill df = { .req = req, .plus = plus, .size = size };
	int ret;

	df.buf = malloc(size);
	if (!df.buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	ret = mount_readdir(ctx_of(req), ino, off, plus, dir_add, &df);
	/* an error after some entries went in still gives the caller those */
	if (ret && !df.used)
		reply_err(req, ret);
	else
		fuse_reply_buf(req, df.buf, df.used);
	free(df.buf);
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
	if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
		fuse_reply_err(req, EROFS);
		return;
	}
	/* the file cannot change under us: keep the page cache across opens */
	fi->keep_cache = 1;
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
	ret = mount_read(ctx_of(req), ino, (uint64_t)off, size, buf, &got);
	if (ret)
		reply_err(req, ret);
	else
		fuse_reply_buf(req, buf, got);
	free(buf);
}

static void op_readlink(fuse_req_t req, fuse_ino_t ino)
{
	char buf[4096];
	int ret = mount_readlink(ctx_of(req), ino, buf, sizeof(buf));

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

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
	/* let the kernel check POSIX ACLs too, as on its own mount (default_permissions checks the mode) */
	if (conn->capable & FUSE_CAP_POSIX_ACL)
		conn->want |= FUSE_CAP_POSIX_ACL;
	/*
	 * readdirplus for every listing call, not only the first: a walk that lists a
	 * directory and then stats its entries (find, ls -l, du) then needs no lookup per
	 * entry, and attributes never go stale on a read-only mount.
	 */
	conn->want &= ~FUSE_CAP_READDIRPLUS_AUTO;
}

const struct fuse_lowlevel_ops mount_ops = {
	.init = op_init,
	.lookup = op_lookup,
	.forget = op_forget,
	.getattr = op_getattr,
	.readdir = op_readdir,
	.readdirplus = op_readdirplus,
	.open = op_open,
	.read = op_read,
	.readlink = op_readlink,
	.getxattr = op_getxattr,
	.listxattr = op_listxattr,
	.statfs = op_statfs,
};
