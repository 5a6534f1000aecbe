/* SPDX-License-Identifier: MIT */
/*
 * What the read-write mount does, without FUSE: every changing FUSE
 * operation is one call here, each one operation of the write engine
 * (ub_fsw_begin, the file API's calls, ub_fsw_end), so it either happens
 * whole or returns an errno having changed nothing the next commit would
 * keep. Reads of the mount go through the engine's live view, so they see
 * these changes at once; commits come from the commit thread (commit=), from
 * fsync and from the unmount (mount.c).
 *
 * Inodes that lose their last name stay until the kernel forgets them (the
 * engine keeps orphans); mount_forget evicts them.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>
#include "mount.h"
#include "ubtrfs/engine.h"
#include "ubtrfs/format.h"
#include "ubtrfs/fsinfo.h"
#include "ubtrfs/fswrite.h"
#include "ubtrfs/log.h"

/* The errno a change answers with: damage is EIO, a broken engine EROFS. */
static int wr_errno(struct mount_ctx *mc, int ret)
{
	switch (ret) {
	case -ENOENT: case -EEXIST: case -ENOTDIR: case -EISDIR: case -ENOTEMPTY: case -EINVAL:
	case -ENAMETOOLONG: case -EMLINK: case -ENODATA: case -ERANGE: case -ENOSPC: case -EPERM:
	case -EXDEV: case -EFBIG: case -EOPNOTSUPP: case -ENOMEM: case -EROFS: case -ELOOP: case -EACCES:
		return ret;
	default:
		return -EIO;
	}
}

static int writable(struct mount_ctx *mc)
{
	if (!mc->e)
		return -EROFS;
	return __atomic_load_n(&mc->broken, __ATOMIC_ACQUIRE) ? -EROFS : 0;
}

/* A failure that broke the engine (a device refused a write): said once, the mount read-only from now on. */
static int op_failed(struct mount_ctx *mc, int ret)
{
	/* EROFS from a whole engine is a refusal (a read-only subvolume), not a failure */
	if (ret == -EIO || (ret == -EROFS && mc->e && ub_engine_error(mc->e))) {
		int none = 0;

		if (__atomic_compare_exchange_n(&mc->broken, &none, ret, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
			ub_err(ub_fs_log(mc->fs), "a change failed (%s): the filesystem keeps its last commit and the "
			       "mount answers EROFS to every change from now on", strerror(-ret));
	}
	return wr_errno(mc, ret);
}

static int begin(struct mount_ctx *mc, int kind, uint64_t len, struct ub_txn **t)
{
	int ret = writable(mc);

	if (!ret)
		ret = ub_fsw_begin(mc->e, kind, len, t);
	return ret == -ENOSPC || ret == -EROFS ? ret : ret ? op_failed(mc, ret) : 0;
}

static void end(struct mount_ctx *mc)
{
	ub_fsw_end(mc->e);
}

/* The node of `id`, which must be a directory of this mount. */
static int dir_node(struct mount_ctx *mc, uint64_t id, struct mount_node *n, struct ub_inode *in)
{
	int ret = mount_map_node(mc->map, id, n);

	if (!ret)
		ret = ub_inode_read(mc->fs, n->subvol, n->ino, in);
	if (ret)
		return wr_errno(mc, ret);
	return S_ISDIR(in->mode) ? 0 : -ENOTDIR;
}

/* The kernel's inode_init_owner: a set-group-ID directory gives its group, and a subdirectory its bit. */
static void owner_of_new(const struct ub_inode *dir, const struct mount_caller *c, uint32_t *mode, uint32_t *gid)
{
	*gid = c->gid;
	if (dir->mode & S_ISGID) {
		*gid = dir->gid;
		if (S_ISDIR(*mode))
			*mode |= S_ISGID;
	}
}

/* The node of a new name (one more lookup for the kernel: the reply hands it out) and its attributes. */
static int entry_out(struct mount_ctx *mc, uint64_t subvol, uint64_t ino, uint64_t parent, const char *name,
		     uint64_t *id, struct stat *st)
{
	int ret;

	*id = mount_map_get(mc->map, subvol, ino, 0, parent, ub_name_hash(name, strlen(name)), NULL);
	if (!*id)
		return -ENOMEM;
	ret = mount_getattr(mc, *id, st);
	if (!ret)
		mount_map_ref(mc->map, *id);
	return ret;
}

/* The inode flags a new file gets from the mount's options (as the kernel's nodatacow / nodatasum). */
static int new_file_flags(struct mount_ctx *mc, struct ub_txn *t, uint64_t subvol, uint64_t ino, uint32_t mode)
{
	uint64_t set = 0;

	if (!S_ISREG(mode) && !S_ISDIR(mode))
		return 0;
	if (mc->mo->nodatacow)
		set |= UB_INODE_NODATACOW;
	if (!set)
		return 0;
	return ub_fsw_set_flags(t, subvol, ino, set, 0);
}

int mount_mknod(struct mount_ctx *mc, const struct mount_caller *c, uint64_t parent, const char *name, uint32_t mode,
		dev_t rdev, uint64_t *id, struct stat *st)
{
	struct mount_node pn;
	struct ub_inode dir;
	struct ub_txn *t;
	uint32_t gid;
	uint64_t ino;
	int ret;

	ret = writable(mc);
	if (!ret)
		ret = dir_node(mc, parent, &pn, &dir);
	if (ret)
		return ret;
	owner_of_new(&dir, c, &mode, &gid);
	ret = begin(mc, UB_FSW_OP_CREATE, 0, &t);
	if (ret)
		return ret;
	ret = ub_fsw_create(t, pn.subvol, pn.ino, name, strlen(name), mode, c->uid, gid,
			    UB_FSW_MKDEV(major(rdev), minor(rdev)), &ino);
	if (!ret)
		ret = new_file_flags(mc, t, pn.subvol, ino, mode);
	end(mc);
	if (ret)
		return ret == -EEXIST || ret == -ENOSPC ? ret : op_failed(mc, ret);
	return entry_out(mc, pn.subvol, ino, parent, name, id, st);
}

int mount_symlink(struct mount_ctx *mc, const struct mount_caller *c, uint64_t parent, const char *name,
		  const char *target, uint64_t *id, struct stat *st)
{
	struct mount_node pn;
	struct ub_inode dir;
	struct ub_txn *t;
	uint32_t mode = S_IFLNK | 0777, gid;
	uint64_t ino;
	int ret;

	ret = writable(mc);
	if (!ret)
		ret = dir_node(mc, parent, &pn, &dir);
	if (ret)
		return ret;
	owner_of_new(&dir, c, &mode, &gid);
	ret = begin(mc, UB_FSW_OP_CREATE, 0, &t);
	if (ret)
		return ret;
	ret = ub_fsw_symlink(t, pn.subvol, pn.ino, name, strlen(name), target, strlen(target), c->uid, gid, &ino);
	end(mc);
	if (ret)
		return op_failed(mc, ret);
	return entry_out(mc, pn.subvol, ino, parent, name, id, st);
}

int mount_link(struct mount_ctx *mc, uint64_t id, uint64_t newparent, const char *newname, struct stat *st)
{
	struct mount_node n, pn;
	struct ub_inode dir;
	struct ub_txn *t;
	uint64_t got;
	int ret;

	ret = writable(mc);
	if (!ret)
		ret = mount_map_node(mc->map, id, &n);
	if (!ret)
		ret = dir_node(mc, newparent, &pn, &dir);
	if (ret)
		return ret;
	if (n.subvol != pn.subvol)
		return -EXDEV;
	ret = begin(mc, UB_FSW_OP_LINK, 0, &t);
	if (ret)
		return ret;
	ret = ub_fsw_link(t, pn.subvol, n.ino, pn.ino, newname, strlen(newname));
	end(mc);
	if (ret)
		return op_failed(mc, ret);
	return entry_out(mc, n.subvol, n.ino, newparent, newname, &got, st);
}

int mount_remove(struct mount_ctx *mc, uint64_t parent, const char *name, bool dir)
{
	struct mount_node pn;
	struct ub_inode din;
	struct ub_txn *t;
	int ret;

	ret = writable(mc);
	if (!ret)
		ret = dir_node(mc, parent, &pn, &din);
	if (ret)
		return ret;
	ret = begin(mc, UB_FSW_OP_UNLINK, 0, &t);
	if (ret)
		return ret;
	ret = dir ? ub_fsw_rmdir(t, pn.subvol, pn.ino, name, strlen(name))
		  : ub_fsw_unlink(t, pn.subvol, pn.ino, name, strlen(name));
	end(mc);
	return ret ? op_failed(mc, ret) : 0;
}

int mount_rename(struct mount_ctx *mc, const struct mount_caller *c, uint64_t parent, const char *name,
		 uint64_t newparent, const char *newname, unsigned flags)
{
	struct mount_node pn, npn;
	struct ub_inode din, ndin;
	struct ub_dirent src, dst;
	bool have_dst = false;
	struct ub_txn *t;
	int ret;

	ret = writable(mc);
	if (!ret)
		ret = dir_node(mc, parent, &pn, &din);
	if (!ret)
		ret = dir_node(mc, newparent, &npn, &ndin);
	if (ret)
		return ret;
	if (pn.subvol != npn.subvol)
		return -EXDEV;
	ret = begin(mc, UB_FSW_OP_RENAME, 0, &t);
	if (ret)
		return ret;
	/* who moves where, for the inode map (read inside the operation: nothing changes meanwhile) */
	ret = ub_dir_lookup(mc->fs, pn.subvol, pn.ino, name, strlen(name), &src);
	if (!ret && (flags & UB_FSW_RENAME_EXCHANGE))
		have_dst = ub_dir_lookup(mc->fs, npn.subvol, npn.ino, newname, strlen(newname), &dst) == 0;
	if (!ret)
		ret = ub_fsw_rename2(t, pn.subvol, pn.ino, name, strlen(name), npn.ino, newname, strlen(newname), flags,
				     c->uid, c->gid);
	end(mc);
	if (ret)
		return ret == -ENOENT || ret == -EEXIST || ret == -ENOTEMPTY ? ret : op_failed(mc, ret);
	mount_map_moved(mc->map, src.subvol, src.ino, newparent, ub_name_hash(newname, strlen(newname)));
	if (have_dst)
		mount_map_moved(mc->map, dst.subvol, dst.ino, parent, ub_name_hash(name, strlen(name)));
	return 0;
}

static void now_ts(int64_t *sec, uint32_t *nsec)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	*sec = ts.tv_sec;
	*nsec = (uint32_t)ts.tv_nsec;
}

int mount_setattr(struct mount_ctx *mc, uint64_t id, const struct stat *attr, unsigned to_set, struct stat *st)
{
	struct ub_fsw_attr a = { 0 };
	struct mount_node n;
	struct ub_txn *t;
	int ret;

	ret = writable(mc);
	if (!ret)
		ret = mount_map_node(mc->map, id, &n);
	if (ret)
		return ret;
	if (to_set & MOUNT_SET_MODE) {
		a.valid |= UB_FSW_ATTR_MODE;
		a.mode = attr->st_mode & 07777;
	}
	if (to_set & MOUNT_SET_UID) {
		a.valid |= UB_FSW_ATTR_UID;
		a.uid = attr->st_uid;
	}
	if (to_set & MOUNT_SET_GID) {
		a.valid |= UB_FSW_ATTR_GID;
		a.gid = attr->st_gid;
	}
	if (to_set & MOUNT_SET_SIZE) {
		a.valid |= UB_FSW_ATTR_SIZE;
		a.size = (uint64_t)attr->st_size;
	}
	if (to_set & (MOUNT_SET_ATIME | MOUNT_SET_ATIME_NOW)) {
		a.valid |= UB_FSW_ATTR_ATIME;
		if (to_set & MOUNT_SET_ATIME_NOW) {
			now_ts(&a.atime_sec, &a.atime_nsec);
		} else {
			a.atime_sec = attr->st_atim.tv_sec;
			a.atime_nsec = (uint32_t)attr->st_atim.tv_nsec;
		}
	}
	if (to_set & (MOUNT_SET_MTIME | MOUNT_SET_MTIME_NOW)) {
		a.valid |= UB_FSW_ATTR_MTIME;
		if (to_set & MOUNT_SET_MTIME_NOW) {
			now_ts(&a.mtime_sec, &a.mtime_nsec);
		} else {
			a.mtime_sec = attr->st_mtim.tv_sec;
			a.mtime_nsec = (uint32_t)attr->st_mtim.tv_nsec;
		}
	}
	if (to_set & MOUNT_SET_CTIME) {
		a.valid |= UB_FSW_ATTR_CTIME;
		a.ctime_sec = attr->st_ctim.tv_sec;
		a.ctime_nsec = (uint32_t)attr->st_ctim.tv_nsec;
	}
	ret = begin(mc, (to_set & MOUNT_SET_SIZE) ? UB_FSW_OP_TRUNCATE : UB_FSW_OP_SETATTR, 0, &t);
	if (ret)
		return ret;
	ret = a.valid ? ub_fsw_setattr(t, n.subvol, n.ino, &a) : 0;
	end(mc);
	if (ret)
		return op_failed(mc, ret);
	return mount_getattr(mc, id, st);
}

int mount_write(struct mount_ctx *mc, uint64_t id, uint64_t off, const void *buf, size_t size)
{
	struct mount_node n;
	struct ub_txn *t;
	int compress = -1, ret;

	ret = writable(mc);
	if (!ret)
		ret = mount_map_node(mc->map, id, &n);
	if (ret)
		return ret;
	if (size == 0)
		return 0;
	/* the mount's compress= applies where the file has no property of its own (-1: the file API reads it) */
	if (mc->mo->compress) {
		char v[32];
		size_t vlen = 0;

		compress = mc->mo->compress;
		ret = begin(mc, UB_FSW_OP_WRITE, size, &t);
		if (ret)
			return ret;
		if (ub_fsw_getxattr(t, n.subvol, n.ino, "btrfs.compression", 17, v, sizeof(v), &vlen) == 0)
			compress = -1;
	} else {
		ret = begin(mc, UB_FSW_OP_WRITE, size, &t);
		if (ret)
			return ret;
	}
	ret = ub_fsw_write_ex(t, n.subvol, n.ino, off, buf, size, compress,
			      compress > 0 ? mc->mo->compress_level : 0);
	end(mc);
	return ret ? op_failed(mc, ret) : 0;
}

int mount_fallocate(struct mount_ctx *mc, uint64_t id, int mode, uint64_t off, uint64_t len)
{
	struct mount_node n;
	struct ub_txn *t;
	int ret;

	ret = writable(mc);
	if (!ret)
		ret = mount_map_node(mc->map, id, &n);
	if (ret)
		return ret;
	ret = begin(mc, (mode & UB_FSW_FALLOC_PUNCH_HOLE) ? UB_FSW_OP_TRUNCATE : UB_FSW_OP_WRITE, len, &t);
	if (ret)
		return ret;
	ret = ub_fsw_fallocate(t, n.subvol, n.ino, off, len, mode);
	end(mc);
	return ret ? op_failed(mc, ret) : 0;
}

int mount_setxattr(struct mount_ctx *mc, uint64_t id, const char *name, const void *value, size_t size, int flags)
{
	struct mount_node n;
	struct ub_txn *t;
	int ret;

	ret = writable(mc);
	if (!ret)
		ret = mount_map_node(mc->map, id, &n);
	if (ret)
		return ret;
	ret = begin(mc, UB_FSW_OP_XATTR, 0, &t);
	if (ret)
		return ret;
	ret = ub_fsw_setxattr(t, n.subvol, n.ino, name, strlen(name), value, size, flags);
	end(mc);
	return ret ? op_failed(mc, ret) : 0;
}

int mount_removexattr(struct mount_ctx *mc, uint64_t id, const char *name)
{
	struct mount_node n;
	struct ub_txn *t;
	int ret;

	ret = writable(mc);
	if (!ret)
		ret = mount_map_node(mc->map, id, &n);
	if (ret)
		return ret;
	ret = begin(mc, UB_FSW_OP_XATTR, 0, &t);
	if (ret)
		return ret;
	ret = ub_fsw_removexattr(t, n.subvol, n.ino, name, strlen(name));
	end(mc);
	return ret ? op_failed(mc, ret) : 0;
}

int mount_fsync(struct mount_ctx *mc, uint64_t id, bool datasync)
{
	struct mount_node n;
	struct ub_txn *t;
	int ret;

	if (!mc->e)
		return 0;
	ret = writable(mc);
	if (!ret)
		ret = mount_map_node(mc->map, id, &n);
	if (ret)
		return ret;
	/* the room of a small change: the log's blocks, or the commit it falls back to */
	ret = begin(mc, UB_FSW_OP_SETATTR, 0, &t);
	if (ret)
		return ret;
	ret = ub_fsw_fsync(t, n.subvol, n.ino, datasync);
	end(mc);
	return ret ? op_failed(mc, ret) : 0;
}

int mount_sync(struct mount_ctx *mc)
{
	int ret;

	if (!mc->e)
		return 0;
	ret = ub_engine_commit(mc->e);
	return ret ? op_failed(mc, ret) : 0;
}

void mount_forget(struct mount_ctx *mc, uint64_t id, uint64_t nlookup)
{
	struct mount_node gone;
	struct ub_inode in;
	struct ub_txn *t;

	if (!mount_map_forget(mc->map, id, nlookup, &gone) || !mc->e)
		return;
	/* the kernel's last reference to an inode without names: its orphan goes now */
	if (ub_inode_read(mc->fs, gone.subvol, gone.ino, &in) || in.nlink)
		return;
	if (begin(mc, UB_FSW_OP_UNLINK, 0, &t))
		return; /* the next mount's orphan cleanup takes it */
	if (ub_fsw_evict(t, gone.subvol, gone.ino))
		ub_warn(ub_fs_log(mc->fs), "subvol %llu inode %llu: could not remove the unlinked inode now; the next "
			"mount removes it", (unsigned long long)gone.subvol, (unsigned long long)gone.ino);
	end(mc);
}

int mount_copy_range(struct mount_ctx *mc, uint64_t in_id, uint64_t off_in, uint64_t out_id, uint64_t off_out,
		     uint64_t len)
{
	struct mount_node a, b;
	struct ub_txn *t;
	int ret;

	ret = writable(mc);
	if (!ret)
		ret = mount_map_node(mc->map, in_id, &a);
	if (!ret)
		ret = mount_map_node(mc->map, out_id, &b);
	if (ret)
		return ret;
	ret = begin(mc, UB_FSW_OP_WRITE, len, &t);
	if (ret)
		return ret;
	ret = ub_fsw_clone_range(t, a.subvol, a.ino, off_in, b.subvol, b.ino, off_out, len);
	end(mc);
	/* a range clone cannot share (unaligned, inline): the kernel copies the bytes itself */
	if (ret == -EINVAL || ret == -EOPNOTSUPP)
		return -EOPNOTSUPP;
	return ret ? op_failed(mc, ret) : 0;
}

int mount_set_flags(struct mount_ctx *mc, uint64_t id, uint64_t set, uint64_t clear)
{
	struct mount_node n;
	struct ub_txn *t;
	int ret;

	ret = writable(mc);
	if (!ret)
		ret = mount_map_node(mc->map, id, &n);
	if (ret)
		return ret;
	ret = begin(mc, UB_FSW_OP_SETATTR, 0, &t);
	if (ret)
		return ret;
	ret = ub_fsw_set_flags(t, n.subvol, n.ino, set, clear);
	end(mc);
	return ret ? op_failed(mc, ret) : 0;
}

void mount_read_atime(struct mount_ctx *mc, uint64_t id)
{
	struct ub_fsw_attr a = { .valid = UB_FSW_ATTR_ATIME | UB_FSW_ATTR_CTIME };
	struct mount_node n;
	struct ub_inode in;
	struct ub_txn *t;
	int64_t now;
	uint32_t nsec;

	if (writable(mc) || mc->mo->atime == MOUNT_NOATIME || mount_map_node(mc->map, id, &n) ||
	    ub_inode_read(mc->fs, n.subvol, n.ino, &in))
		return;
	now_ts(&now, &nsec);
	/* relatime: only an atime older than the last change, or a day old, moves (the kernel's rule) */
	if (mc->mo->atime == MOUNT_RELATIME &&
	    !(in.atime.sec < in.mtime.sec || (in.atime.sec == in.mtime.sec && in.atime.nsec <= in.mtime.nsec) ||
	      in.atime.sec < in.ctime.sec || (in.atime.sec == in.ctime.sec && in.atime.nsec <= in.ctime.nsec) ||
	      now - in.atime.sec >= 24 * 3600))
		return;
	if (begin(mc, UB_FSW_OP_SETATTR, 0, &t))
		return;
	/* an atime update leaves ctime as it is */
	a.atime_sec = now;
	a.atime_nsec = nsec;
	a.ctime_sec = in.ctime.sec;
	a.ctime_nsec = in.ctime.nsec;
	ub_fsw_setattr(t, n.subvol, n.ino, &a);
	end(mc);
}
