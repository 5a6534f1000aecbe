/* SPDX-License-Identifier: MIT */
/*
 * What the read-only mount answers, without FUSE: every FUSE operation of
 * mount_ops.c is one call here (so the fuzzer and the tests reach the same
 * decisions without a kernel). Each may run on any of the session's threads at
 * once: they share only the inode map (its own lock) and the library's read
 * calls, which take no per-call state from the caller.
 *
 * The mount serves a tree, as ls -R and restore walk one: a directory is shown
 * under one name only, its real one (the name its back reference gives), and
 * where nothing tells which name is real, the first one it was met under. A
 * second name of a directory is corruption; serving it would let a walk enter
 * the directory again, through a loop without end.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include "mount.h"
#include "ubtrfs/fsinfo.h"
#include "ubtrfs/log.h"

/* an escaped name: up to four bytes out per byte in, and room to say it was cut */
#define ESC_SIZE (UB_NAME_LEN * 4 + 8)

uint64_t mount_st_ino(const struct mount_ctx *mc, uint64_t subvol, uint64_t ino)
{
	/*
	 * The mounted subvolume's inodes show their btrfs numbers, as on the
	 * kernel's mount; one FUSE mount has one st_dev, so the others' numbers
	 * are made unique by their subvolume id in the high bits.
	 */
	if (subvol == mc->root_subvol)
		return ino;
	return subvol << 40 | (ino & ((1ULL << 40) - 1));
}

static void fill_stat(const struct mount_ctx *mc, uint64_t id, const struct ub_inode *in, struct stat *st)
{
	uint64_t bs = mc->sectorsize;

	(void)id;
	memset(st, 0, sizeof(*st));
	st->st_ino = mount_st_ino(mc, in->subvol, in->ino);
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

/* Library errors that mean "the filesystem is damaged here" reach the caller as EIO. */
static int fuse_errno(int ret)
{
	return ret == -ENOENT || ret == -ENOMEM || ret == -ENAMETOOLONG || ret == -EINVAL ? ret : -EIO;
}

static int node_inode(struct mount_ctx *mc, uint64_t id, struct mount_node *n, struct ub_inode *in)
{
	int ret = mount_map_node(mc->map, id, n);

	if (ret)
		return ret;
	if (n->ino == BTRFS_EMPTY_SUBVOL_DIR_OBJECTID) /* a placeholder for a subvolume a snapshot left out */
		return ub_placeholder_inode(mc->fs, n->subvol, n->dir_ino, in);
	return ub_inode_read(mc->fs, n->subvol, n->ino, in);
}

static void entry_name(const struct ub_dirent *de, char *esc)
{
	ub_name_escape(de->name, de->name_len, esc, ESC_SIZE);
}

/*
 * The node of the entry `de` of directory node `dir`. For an entry that leads
 * to a directory (`is_dir`), only through the directory's one name: 0 and
 * *id 0 for any other (said in the log), 0 and the node's id otherwise.
 */
static int entry_node(struct mount_ctx *mc, uint64_t dir, const struct ub_dirent *de, bool is_dir, uint64_t *id)
{
	const struct ub_log *log = ub_fs_log(mc->fs);
	char esc[ESC_SIZE];
	bool first = true;
	int ret = 1;

	*id = 0;
	/* every placeholder of a snapshot is inode 2, empty: one node serves them all, nothing to enter */
	if (is_dir && de->ino != BTRFS_EMPTY_SUBVOL_DIR_OBJECTID) {
		ret = ub_dir_entry_is_link(mc->fs, de);
		if (ret == 0) {
			entry_name(de, esc);
			ub_err(log, "subvol %llu dir %llu: entry \"%s\" (index %llu) names directory ino %llu of subvol "
			       "%llu, whose back reference gives it another name; a second name for a directory is "
			       "corruption: not served", (unsigned long long)de->dir_subvol, (unsigned long long)de->dir_ino,
			       esc, (unsigned long long)de->index, (unsigned long long)de->ino,
			       (unsigned long long)de->subvol);
			return 0;
		}
		if (ret < 0 && ret != -ENOENT) {
			entry_name(de, esc);
			ub_err(log, "subvol %llu dir %llu: entry \"%s\": cannot read the back reference of directory ino "
			       "%llu of subvol %llu: %s", (unsigned long long)de->dir_subvol, (unsigned long long)de->dir_ino,
			       esc, (unsigned long long)de->ino, (unsigned long long)de->subvol, strerror(-ret));
			return fuse_errno(ret);
		}
	}
	*id = mount_map_get(mc->map, de->subvol, de->ino, de->ino == BTRFS_EMPTY_SUBVOL_DIR_OBJECTID ? de->dir_ino : 0,
			    dir, ub_name_hash(de->name, de->name_len), is_dir ? &first : NULL);
	if (!*id)
		return -ENOMEM;
	if (!first) {
		/* no back reference tells (ret -ENOENT), or several do: the first name met stands */
		entry_name(de, esc);
		ub_err(log, "subvol %llu dir %llu: entry \"%s\" (index %llu) names directory ino %llu of subvol %llu, "
		       "which the mount serves under another name already; a second name for a directory is "
		       "corruption: not served", (unsigned long long)de->dir_subvol, (unsigned long long)de->dir_ino, esc,
		       (unsigned long long)de->index, (unsigned long long)de->ino, (unsigned long long)de->subvol);
		*id = 0;
	}
	return 0;
}

int mount_lookup(struct mount_ctx *mc, uint64_t parent, const char *name, uint64_t *id, struct stat *st)
{
	struct mount_node pn;
	struct ub_dirent de;
	struct ub_inode in;
	size_t len = strlen(name);
	int ret = mount_map_node(mc->map, parent, &pn);

	/* FUSE passes names up to 1024 bytes: longer than btrfs's are the kernel's ENAMETOOLONG */
	if (!ret && len > UB_NAME_LEN)
		ret = -ENAMETOOLONG;
	if (!ret)
		ret = ub_dir_lookup(mc->fs, pn.subvol, pn.ino, name, len, &de);
	if (ret)
		return ret == -EINVAL ? -ENOENT : fuse_errno(ret);
	de.name = name; /* the lookup leaves the block's copy behind */
	ret = ub_dirent_inode(mc->fs, &de, &in);
	if (ret)
		return fuse_errno(ret);
	ret = entry_node(mc, parent, &de, S_ISDIR(in.mode), id);
	if (ret)
		return ret;
	/* a refused second name is damage where it stands, as for an unreadable inode */
	if (!*id)
		return -EIO;
	fill_stat(mc, *id, &in, st);
	return 0;
}

int mount_getattr(struct mount_ctx *mc, uint64_t id, struct stat *st)
{
	struct mount_node n;
	struct ub_inode in;
	int ret = node_inode(mc, id, &n, &in);

	if (ret)
		return fuse_errno(ret);
	fill_stat(mc, id, &in, st);
	return 0;
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

struct dir_walk {
	struct mount_ctx *mc;
	uint64_t dir;
	off_t from;   /* entries at offsets up to this were handed out already */
	uint64_t last; /* entries of a higher index came after the directory was opened: not shown */
	bool plus;
	mount_dir_fn fn;
	void *arg;
};

static int dir_entry_cb(void *arg, const struct ub_dirent *de)
{
	struct dir_walk *w = arg;
	const struct ub_log *log = ub_fs_log(w->mc->fs);
	off_t off;
	char name[UB_NAME_LEN + 1], esc[ESC_SIZE];
	struct ub_inode in;
	struct stat st;
	uint64_t id;
	bool attrs = false;
	int ret;

	/*
	 * An entry's offset is its index + 1, which must stay a positive off_t
	 * above those of "." and "..": an index outside [2, 2^63 - 2] would give
	 * an offset that is not past the one before, and the kernel would list the
	 * directory again from there, without end.
	 */
	if (de->index < 2 || de->index >= (uint64_t)INT64_MAX) {
		entry_name(de, esc);
		ub_err(log, "subvol %llu dir %llu: entry \"%s\" has index %llu, outside what a directory offset can "
		       "hold: not served", (unsigned long long)de->dir_subvol, (unsigned long long)de->dir_ino, esc,
		       (unsigned long long)de->index);
		return 0;
	}
	if (de->index > w->last)
		return 1;
	off = (off_t)de->index + 1;
	if (off <= w->from)
		return 0;
	if (w->plus) {
		ret = ub_dirent_inode(w->mc->fs, de, &in);
		if (ret == -ENOMEM)
			return ret;
		/* one bad inode must not hide its siblings: its name goes out without attributes */
		if (ret) {
			entry_name(de, esc);
			ub_err(log, "subvol %llu dir %llu: entry \"%s\" (index %llu): inode %llu of subvol %llu cannot be "
			       "read: %s; listed without its attributes", (unsigned long long)de->dir_subvol,
			       (unsigned long long)de->dir_ino, esc, (unsigned long long)de->index,
			       (unsigned long long)de->ino, (unsigned long long)de->subvol, strerror(-ret));
		}
		attrs = ret == 0;
	}
	/* an inode not read is no directory to check here: a lookup of it reads it again */
	ret = entry_node(w->mc, w->dir, de, attrs ? S_ISDIR(in.mode) : !w->plus && de->type == BTRFS_FT_DIR, &id);
	if (ret == -ENOMEM)
		return ret;
	if (ret || !id)
		return 0; /* refused (and said): the other entries still go out */
	memcpy(name, de->name, de->name_len);
	name[de->name_len] = '\0';
	if (attrs) {
		fill_stat(w->mc, id, &in, &st);
	} else {
		memset(&st, 0, sizeof(st));
		st.st_ino = mount_st_ino(w->mc, de->subvol, de->ino);
		st.st_mode = ft_mode(de->type);
	}
	/* without attributes, no node is handed out with the entry: a stat of it is a lookup of its own */
	return w->fn(w->arg, name, &st, attrs ? id : 0, off) ? 1 : 0;
}

static int any_entry_cb(void *arg, const struct ub_dirent *de)
{
	*(uint64_t *)arg = de->index;
	return 1;
}

/* 1 and the index of the first entry at or above `from`, 0 when there is none */
static int entry_from(struct mount_ctx *mc, const struct mount_node *n, uint64_t from, uint64_t *index)
{
	int ret = ub_dir_iterate_from(mc->fs, n->subvol, n->ino, from, any_entry_cb, index);

	return ret < 0 ? fuse_errno(ret) : ret;
}

int mount_dir_last_index(struct mount_ctx *mc, uint64_t id, uint64_t *last)
{
	struct mount_node n;
	uint64_t lo = 2, hi, idx = 0;
	int ret = mount_map_node(mc->map, id, &n);

	*last = 1;
	if (!ret)
		ret = entry_from(mc, &n, lo, &idx);
	if (ret <= 0)
		return ret;
	/*
	 * Indexes only grow (a new name takes the highest + 1), so the highest is
	 * found by probing "any entry at or above x?": doubling past it, then
	 * halving the gap. A few tree searches, however large the directory.
	 */
	lo = idx;
	for (hi = lo < (1ULL << 62) ? lo * 2 : UINT64_MAX;; hi = hi < (1ULL << 62) ? hi * 2 : UINT64_MAX) {
		ret = entry_from(mc, &n, hi, &idx);
		if (ret < 0)
			return ret;
		if (!ret || hi == UINT64_MAX)
			break;
		lo = idx;
	}
	if (ret)
		lo = idx;
	/* an entry at lo, none at hi or above */
	while (hi - lo > 1) {
		uint64_t mid = lo + (hi - lo) / 2;

		ret = entry_from(mc, &n, mid, &idx);
		if (ret < 0)
			return ret;
		if (ret)
			lo = idx;
		else
			hi = mid;
	}
	*last = lo;
	return 0;
}

int mount_readdir(struct mount_ctx *mc, uint64_t id, off_t off, bool plus, uint64_t last, mount_dir_fn fn, void *arg)
{
	struct dir_walk w = { .mc = mc, .dir = id, .from = off, .last = last, .plus = plus, .fn = fn, .arg = arg };
	struct mount_node n;
	struct stat st;
	int ret = mount_map_node(mc->map, id, &n);

	if (ret)
		return fuse_errno(ret);
	/* offsets: 1 ".", 2 "..", then DIR_INDEX + 1 (indexes start at 2, so they never collide) */
	memset(&st, 0, sizeof(st));
	st.st_mode = S_IFDIR;
	st.st_ino = mount_st_ino(mc, n.subvol, n.ino);
	if (off < 1 && fn(arg, ".", &st, 0, 1))
		return 0;
	{
		struct mount_node pn;

		st.st_ino = mount_map_node(mc->map, n.parent, &pn) == 0 ? mount_st_ino(mc, pn.subvol, pn.ino) : 0;
	}
	if (off < 2 && fn(arg, "..", &st, 0, 2))
		return 0;
	/* offset o was DIR_INDEX o - 1: the next entry has an index of at least o */
	ret = ub_dir_iterate_from(mc->fs, n.subvol, n.ino, off > 2 ? (uint64_t)off : 0, dir_entry_cb, &w);
	return ret == 1 ? 0 : ret ? fuse_errno(ret) : 0;
}

int mount_read(struct mount_ctx *mc, uint64_t id, uint64_t off, size_t size, void *buf, uint64_t *got)
{
	struct mount_node n;
	struct ub_read_report rep = { 0 };
	int ret = mount_map_node(mc->map, id, &n);

	*got = 0;
	if (ret)
		return fuse_errno(ret);
	ret = ub_file_read(mc->fs, n.subvol, n.ino, off, size, buf, got, &rep);
	ub_read_report_flush(mc->fs, &rep);
	/* unreadable sectors fail the read as on the kernel's mount; the log has named them */
	return ret ? fuse_errno(ret) : 0;
}

int mount_readlink(struct mount_ctx *mc, uint64_t id, char *buf, size_t size)
{
	struct mount_node n;
	size_t len;
	int ret = mount_map_node(mc->map, id, &n);

	if (!ret)
		ret = ub_readlink(mc->fs, n.subvol, n.ino, buf, size, &len);
	return ret ? fuse_errno(ret) : 0;
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

static int xattr_walk(struct mount_ctx *mc, uint64_t id, struct xattr_find *xf,
		      int (*cb)(void *, const struct ub_xattr *), size_t *len)
{
	struct mount_node n;
	int ret = mount_map_node(mc->map, id, &n);

	if (!ret)
		ret = ub_xattr_iterate(mc->fs, n.subvol, n.ino, cb, xf);
	if (ret < 0)
		return fuse_errno(ret);
	if (xf->name && !xf->found)
		return -ENODATA;
	*len = xf->len;
	return xf->cap && xf->len > xf->cap ? -ERANGE : 0;
}

static bool prefixed(const char *name, const char *prefix, bool *alone)
{
	size_t n = strlen(prefix);

	if (strncmp(name, prefix, n))
		return false;
	*alone = name[n] == '\0';
	return true;
}

int mount_xattr_kind(const struct mount_ctx *mc, const char *name)
{
	bool alone = false;

	/* the kernel's xattr_resolve_name: a handler's prefix with nothing after it is EINVAL */
	if (prefixed(name, "user.", &alone) || prefixed(name, "trusted.", &alone) || prefixed(name, "security.", &alone))
		return alone ? -EINVAL : MOUNT_XA_PLAIN;
	if (!strcmp(name, MOUNT_ACL_ACCESS) || !strcmp(name, MOUNT_ACL_DEFAULT)) {
		/* without ACLs (noacl), btrfs has no handler for them */
		if (!mc->acl)
			return -EOPNOTSUPP;
		return !strcmp(name, MOUNT_ACL_ACCESS) ? MOUNT_XA_ACL_ACCESS : MOUNT_XA_ACL_DEFAULT;
	}
	if (prefixed(name, "btrfs.", &alone))
		return alone ? -EINVAL : !strcmp(name, "btrfs.compression") ? MOUNT_XA_PROP : MOUNT_XA_PROP_OTHER;
	return -EOPNOTSUPP;
}

int mount_getxattr(struct mount_ctx *mc, uint64_t id, const char *name, char *buf, size_t size, size_t *len)
{
	struct xattr_find xf = { .name = name, .name_len = strlen(name), .out = buf, .cap = size };
	int kind = mount_xattr_kind(mc, name);

	return kind < 0 ? kind : xattr_walk(mc, id, &xf, xattr_get_cb, len);
}

int mount_listxattr(struct mount_ctx *mc, uint64_t id, char *buf, size_t size, size_t *len)
{
	struct xattr_find xf = { .out = buf, .cap = size };

	return xattr_walk(mc, id, &xf, xattr_list_cb, len);
}

void mount_statfs(struct mount_ctx *mc, struct statvfs *sv)
{
	/* a damaged block group or dev item (logged) leaves the superblock's figures */
	if (ub_fs_statfs(mc->fs, sv)) {
		memset(sv, 0, sizeof(*sv));
		sv->f_bsize = sv->f_frsize = mc->sectorsize;
		sv->f_blocks = mc->total_bytes / mc->sectorsize;
		sv->f_bfree = sv->f_bavail = (mc->total_bytes - mc->bytes_used) / mc->sectorsize;
		sv->f_namemax = 255;
	}
}

int mount_lseek(struct mount_ctx *mc, uint64_t id, uint64_t off, int whence, uint64_t *out)
{
	struct mount_node n;
	struct ub_inode in;
	uint64_t start, end;
	int ret = node_inode(mc, id, &n, &in);

	if (ret)
		return fuse_errno(ret);
	if (whence != SEEK_DATA && whence != SEEK_HOLE)
		return -EINVAL;
	if (off >= in.size)
		return -ENXIO;
	if (!S_ISREG(in.mode)) {
		/* no extents to speak of: all data, as the kernel's generic answer */
		*out = whence == SEEK_DATA ? off : in.size;
		return 0;
	}
	ret = ub_file_next_data_inode(mc->fs, &in, off, &start, &end);
	if (ret < 0)
		return fuse_errno(ret);
	if (whence == SEEK_DATA) {
		if (ret == 1)
			return -ENXIO; /* only holes from off on */
		*out = start > off ? start : off;
		return 0;
	}
	/* SEEK_HOLE: off itself when it is in a hole, else where its run of data ends (the size at the latest) */
	*out = ret == 1 || start > off ? off : (end < in.size ? end : in.size);
	return 0;
}

int mount_get_flags(struct mount_ctx *mc, uint64_t id, uint64_t *flags)
{
	struct mount_node n;
	struct ub_inode in;
	int ret = node_inode(mc, id, &n, &in);

	if (ret)
		return fuse_errno(ret);
	*flags = in.flags;
	return 0;
}

int mount_subvol_flags(struct mount_ctx *mc, uint64_t id, uint64_t *flags)
{
	struct ub_subvol_info si;
	struct mount_node n;
	int ret = mount_map_node(mc->map, id, &n);

	if (!ret)
		ret = ub_subvol_info(mc->fs, n.subvol, &si);
	if (ret)
		return fuse_errno(ret);
	*flags = si.readonly ? 1ULL << 1 : 0; /* BTRFS_SUBVOL_RDONLY */
	return 0;
}
