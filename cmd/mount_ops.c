/* SPDX-License-Identifier: MIT */
/*
 * The FUSE low-level operations of the read-only mount. Each may run on any of
 * the session's threads at once: they share only the inode map (its own lock)
 * and the library's read calls, which take no per-call state from the caller.
 */
#define FUSE_USE_VERSION 35
#include <errno.h>
#include <fuse_lowlevel.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/statvfs.h>
#include "mount.h"
#include "ubtrfs/fsinfo.h"

/* Nothing changes under a read-only mount: the kernel may keep names and attributes as long as it likes. */
#define MOUNT_TIMEOUT 86400.0

static struct mount_ctx *ctx_of(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

static void fill_stat(const struct mount_ctx *mc, uint64_t id, const struct ub_inode *in, struct stat *st)
{
	uint64_t bs = mc->sectorsize;

	memset(st, 0, sizeof(*st));
	st->st_ino = id;
	st->st_mode = in->mode;
	st->st_nlink = in->nlink;
	st->st_uid = in->uid;
	st->st_gid = in->gid;
	/* btrfs keeps the kernel's internal dev_t (major << 20 | minor) */
	st->st_rdev = makedev(in->rdev >> 20, in->rdev & 0xfffff);
	st->st_size = in->size;
	st->st_blksize = bs;
	/* as the kernel's getattr: bytes used rounded up to a sector, in 512-byte units */
	st->st_blocks = (in->nbytes + bs - 1) / bs * bs / 512;
	st->st_atim.tv_sec = in->atime.sec;
	st->st_atim.tv_nsec = in->atime.nsec;
	st->st_mtim.tv_sec = in->mtime.sec;
	st->st_mtim.tv_nsec = in->mtime.nsec;
	st->st_ctim.tv_sec = in->ctime.sec;
	st->st_ctim.tv_nsec = in->ctime.nsec;
}

static int node_inode(struct mount_ctx *mc, fuse_ino_t id, struct mount_node *n, struct ub_inode *in)
{
	int ret = mount_map_node(mc->map, id, n);

	if (ret)
		return ret;
	if (n->ino == 2) /* a placeholder for a subvolume a snapshot left out */
		return ub_placeholder_inode(mc->fs, n->subvol, n->dir_ino, in);
	return ub_inode_read(mc->fs, n->subvol, n->ino, in);
}

/* Library errors that mean "the filesystem is damaged here" reach the caller as EIO. */
static int fuse_err(int ret)
{
	return ret == -ENOENT || ret == -ENOMEM || ret == -ENAMETOOLONG || ret == -EINVAL ? -ret : EIO;
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct mount_ctx *mc = ctx_of(req);
	struct mount_node pn;
	struct ub_dirent de;
	struct ub_inode in;
	struct fuse_entry_param e;
	int ret = mount_map_node(mc->map, parent, &pn);

	if (!ret)
		ret = ub_dir_lookup(mc->fs, pn.subvol, pn.ino, name, strlen(name), &de);
	if (!ret)
		ret = ub_dirent_inode(mc->fs, &de, &in);
	if (ret) {
		fuse_reply_err(req, ret == -EINVAL ? ENOENT : fuse_err(ret));
		return;
	}
	memset(&e, 0, sizeof(e));
	e.ino = mount_map_get(mc->map, de.subvol, de.ino, de.ino == 2 ? de.dir_ino : 0, parent);
	if (!e.ino) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	e.attr_timeout = e.entry_timeout = MOUNT_TIMEOUT;
	fill_stat(mc, e.ino, &in, &e.attr);
	fuse_reply_entry(req, &e);
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	fuse_reply_none(req);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct mount_ctx *mc = ctx_of(req);
	struct mount_node n;
	struct ub_inode in;
	struct stat st;
	int ret = node_inode(mc, ino, &n, &in);

	if (ret) {
		fuse_reply_err(req, fuse_err(ret));
		return;
	}
	fill_stat(mc, ino, &in, &st);
	fuse_reply_attr(req, &st, MOUNT_TIMEOUT);
}

struct dir_fill {
	struct mount_ctx *mc;
	fuse_req_t req;
	fuse_ino_t dir;
	off_t from;     /* entries at offsets up to this were sent already */
	bool plus;      /* readdirplus: each entry with its attributes, counted as a lookup */
	char *buf;
	size_t size, used;
};

/*
 * Offsets: 1 ".", 2 "..", then DIR_INDEX + 1 (indexes start at 2, so they never collide).
 * `e` holds the entry's attributes for readdirplus (its ino 0 for "." and "..", which the
 * kernel does not count as lookups).
 */
static bool dir_add(struct dir_fill *df, const char *name, struct fuse_entry_param *e, off_t off)
{
	size_t need;

	if (off <= df->from)
		return true;
	if (df->plus)
		need = fuse_add_direntry_plus(df->req, df->buf + df->used, df->size - df->used, name, e, off);
	else
		need = fuse_add_direntry(df->req, df->buf + df->used, df->size - df->used, name, &e->attr, off);
	if (need > df->size - df->used)
		return false;
	df->used += need;
	return true;
}

static bool dir_add_dot(struct dir_fill *df, const char *name, uint64_t id, off_t off)
{
	struct fuse_entry_param e;

	memset(&e, 0, sizeof(e));
	e.attr.st_ino = id;
	e.attr.st_mode = S_IFDIR;
	return dir_add(df, name, &e, off);
}

static mode_t ft_mode(uint8_t ft)
{
	switch (ft) {
	case BTRFS_FT_REG_FILE: return S_IFREG;
	case BTRFS_FT_DIR: return S_IFDIR;
	case BTRFS_FT_CHRDEV: return S_IFCHR;
	case BTRFS_FT_BLKDEV: return S_IFBLK;
	case BTRFS_FT_FIFO: return S_IFIFO;
	case BTRFS_FT_SOCK: return S_IFSOCK;
	case BTRFS_FT_SYMLINK: return S_IFLNK;
	}
	return 0;
}

static int dir_entry_cb(void *arg, const struct ub_dirent *de)
{
	struct dir_fill *df = arg;
	struct fuse_entry_param e;
	char name[256];
	uint64_t id;

	if ((off_t)de->index + 1 <= df->from)
		return 0;
	memcpy(name, de->name, de->name_len);
	name[de->name_len] = '\0';
	id = mount_map_get(df->mc->map, de->subvol, de->ino, de->ino == 2 ? de->dir_ino : 0, df->dir);
	if (!id)
		return -ENOMEM;
	memset(&e, 0, sizeof(e));
	if (df->plus) {
		struct ub_inode in;
		int ret = ub_dirent_inode(df->mc->fs, de, &in);

		if (ret)
			return ret;
		e.ino = id;
		e.attr_timeout = e.entry_timeout = MOUNT_TIMEOUT;
		fill_stat(df->mc, id, &in, &e.attr);
	} else {
		e.attr.st_ino = id;
		e.attr.st_mode = ft_mode(de->type);
	}
	return dir_add(df, name, &e, (off_t)de->index + 1) ? 0 : 1;
}

/*
 * One buffer of entries from `off` on. The walk starts at the first DIR_INDEX the
 * offset leaves out (one tree search), so listing a directory is linear in its size.
 */
static void dir_reply(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, bool plus)
{
	struct mount_ctx *mc = ctx_of(req);
	struct dir_fill df = { .mc = mc, .req = req, .dir = ino, .from = off, .plus = plus, .size = size };
	struct mount_node n;
	int ret = mount_map_node(mc->map, ino, &n);

	df.buf = malloc(size);
	if (!df.buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	if (!ret && dir_add_dot(&df, ".", ino, 1) && dir_add_dot(&df, "..", n.parent, 2)) {
		/* offset o was DIR_INDEX o - 1: the next entry has an index of at least o */
		ret = ub_dir_iterate_from(mc->fs, n.subvol, n.ino, off > 2 ? (uint64_t)off : 0, dir_entry_cb, &df);
		if (ret == 1)
			ret = 0;
	}
	/* an error after some entries went in still gives the caller those */
	if (ret && !df.used)
		fuse_reply_err(req, fuse_err(ret));
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
	struct mount_ctx *mc = ctx_of(req);
	struct mount_node n;
	struct ub_read_report rep = { 0 };
	uint64_t got = 0;
	void *buf;
	int ret = mount_map_node(mc->map, ino, &n);

	if (ret) {
		fuse_reply_err(req, fuse_err(ret));
		return;
	}
	buf = malloc(size ? size : 1);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	ret = ub_file_read(mc->fs, n.subvol, n.ino, (uint64_t)off, size, buf, &got, &rep);
	ub_read_report_flush(mc->fs, &rep);
	/* unreadable sectors fail the read as on the kernel's mount; the log has named them */
	if (ret)
		fuse_reply_err(req, fuse_err(ret));
	else
		fuse_reply_buf(req, buf, got);
	free(buf);
}

static void op_readlink(fuse_req_t req, fuse_ino_t ino)
{
	struct mount_ctx *mc = ctx_of(req);
	struct mount_node n;
	char buf[4096];
	size_t len;
	int ret = mount_map_node(mc->map, ino, &n);

	if (!ret)
		ret = ub_readlink(mc->fs, n.subvol, n.ino, buf, sizeof(buf), &len);
	if (ret)
		fuse_reply_err(req, fuse_err(ret));
	else
		fuse_reply_readlink(req, buf);
}

struct xattr_find {
	const char *name;
	size_t name_len;
	char *out;   /* getxattr: the value; listxattr: the names */
	size_t cap, len;
	bool found;
};

static int xattr_get_cb(void *arg, const struct ub_xattr *xa)
{
	struct xattr_find *xf = arg;

	if (xa->name_len != xf->name_len || memcmp(xa->name, xf->name, xf->name_len))
		return 0;
	xf->found = true;
	xf->len = xa->value_len;
	if (xf->cap && xa->value_len <= xf->cap)
		memcpy(xf->out, xa->value, xa->value_len);
	return 1;
}

static int xattr_list_cb(void *arg, const struct ub_xattr *xa)
{
	struct xattr_find *xf = arg;

	if (xf->cap && xf->len + xa->name_len + 1 <= xf->cap) {
		memcpy(xf->out + xf->len, xa->name, xa->name_len);
		xf->out[xf->len + xa->name_len] = '\0';
	}
	xf->len += xa->name_len + 1;
	return 0;
}

static void xattr_reply(fuse_req_t req, fuse_ino_t ino, size_t size, struct xattr_find *xf,
			int (*cb)(void *, const struct ub_xattr *))
{
	struct mount_ctx *mc = ctx_of(req);
	struct mount_node n;
	int ret = mount_map_node(mc->map, ino, &n);

	xf->cap = size;
	xf->out = size ? malloc(size) : NULL;
	if (size && !xf->out) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	if (!ret)
		ret = ub_xattr_iterate(mc->fs, n.subvol, n.ino, cb, xf);
	if (ret < 0)
		fuse_reply_err(req, fuse_err(ret));
	else if (xf->name && !xf->found)
		fuse_reply_err(req, ENODATA);
	else if (!size)
		fuse_reply_xattr(req, xf->len);
	else if (xf->len > size)
		fuse_reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, xf->out, xf->len);
	free(xf->out);
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	struct xattr_find xf = { .name = name, .name_len = strlen(name) };

	xattr_reply(req, ino, size, &xf, xattr_get_cb);
}

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	struct xattr_find xf = { 0 };

	xattr_reply(req, ino, size, &xf, xattr_list_cb);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct mount_ctx *mc = ctx_of(req);
	struct statvfs sv;

	/* a damaged block group or dev item (logged) leaves the superblock's figures */
	if (ub_fs_statfs(mc->fs, &sv)) {
		memset(&sv, 0, sizeof(sv));
		sv.f_bsize = sv.f_frsize = mc->sectorsize;
		sv.f_blocks = mc->total_bytes / mc->sectorsize;
		sv.f_bfree = sv.f_bavail = (mc->total_bytes - mc->bytes_used) / mc->sectorsize;
		sv.f_namemax = 255;
	}
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
