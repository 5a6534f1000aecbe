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
		/* what a call has no errno of its own for: damage or a bug, said here, EIO to the caller */
		ub_err(ub_fs_log(mc->fs), "a change failed: %s (EIO to the caller)", strerror(-ret));
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

bool mount_caller_in_group(const struct mount_caller *c, uint32_t gid)
{
	uint32_t small[64], *list = small;
	bool found = false;
	int n;

	if (c->uid == 0 || c->gid == gid)
		return true;
	if (!c->groups)
		return false;
	n = c->groups(c->arg, list, 64);
	if (n > 64) {
		list = malloc((size_t)n * sizeof(*list));
		n = list ? c->groups(c->arg, list, n) : -ENOMEM;
	}
	for (int i = 0; i < n && !found; i++)
		found = list[i] == gid;
	if (list != small)
		free(list);
	return found;
}

/*
 * Whether a change of a regular file's data (write, truncate, fallocate) by
 * `c` drops its set-group-ID bit where FUSE does not: the kernel's VFS drops it
 * for a caller outside the file's group (setattr_should_drop_sgid) also when
 * the group cannot execute, FUSE's own rule only when it can (then it sends
 * the new mode itself). Root keeps it (CAP_FSETID).
 */
static bool drops_sgid(const struct ub_inode *in, const struct mount_caller *c)
{
	return S_ISREG(in->mode) && (in->mode & (S_ISGID | S_IXGRP)) == S_ISGID && c->uid != 0 &&
	       !mount_caller_in_group(c, in->gid);
}

/*
 * The mode after a change to a regular file's data or size by a caller
 * without CAP_FSETID, as the VFS leaves it (setattr_should_drop_suidgid): no
 * set-user-ID bit, and no set-group-ID bit where the group may execute or
 * the caller is outside the group.
 */
static uint32_t setid_dropped(const struct ub_inode *in, const struct mount_caller *c)
{
	uint32_t mode = in->mode & 07777;

	if (!S_ISREG(in->mode))
		return mode;
	mode &= ~(uint32_t)S_ISUID;
	if ((in->mode & S_IXGRP) || !mount_caller_in_group(c, in->gid))
		mode &= ~(uint32_t)S_ISGID;
	return mode;
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

#define PROP_COMPRESSION "btrfs.compression"
#define ACL_BYTES (4 + 8 * MOUNT_ACL_MAX)

/* What a new inode takes from its directory besides its owner: ACLs, the compression property. */
struct inherit {
	struct ub_fsw_xattr xa[3];
	size_t n;
	struct mount_acl acl;
	uint8_t dflt[ACL_BYTES], access[ACL_BYTES];
	char prop[64];
};

/*
 * The kernel's posix_acl_create and btrfs_inherit_props for a new inode of
 * *mode in directory (subvol, dir): with a default ACL there, the mode is
 * masked by it and the inode gets it as its access ACL (unless the mode says
 * it all) and, a directory, as its default ACL; without one, the umask applies.
 * Read inside the operation that makes the inode.
 */
static int inherit(struct mount_ctx *mc, struct ub_txn *t, uint64_t subvol, uint64_t dir, const struct mount_caller *c,
		   uint32_t *mode, struct inherit *ih)
{
	size_t vlen = 0;
	int ret = mc->acl ? ub_fsw_getxattr(t, subvol, dir, MOUNT_ACL_DEFAULT, strlen(MOUNT_ACL_DEFAULT), ih->dflt,
					   sizeof(ih->dflt), &vlen)
			  : -ENODATA;

	ih->n = 0;
	if (ret == 0)
		ret = mount_acl_parse(ih->dflt, vlen, &ih->acl);
	if (ret == 0 && ih->acl.count) {
		ret = mount_acl_create_masq(&ih->acl, mode);
		if (ret < 0)
			return -EIO;
		if (ret == 1)
			ih->xa[ih->n++] = (struct ub_fsw_xattr){ MOUNT_ACL_ACCESS, strlen(MOUNT_ACL_ACCESS), ih->access,
								 mount_acl_encode(&ih->acl, ih->access) };
		if (S_ISDIR(*mode))
			ih->xa[ih->n++] = (struct ub_fsw_xattr){ MOUNT_ACL_DEFAULT, strlen(MOUNT_ACL_DEFAULT), ih->dflt, vlen };
	} else if (ret == 0 || ret == -ENODATA) {
		*mode &= ~(c->umask & 0777);
	} else if (ret == -EINVAL || ret == -E2BIG) {
		ub_err(ub_fs_log(mc->fs), "subvol %llu dir %llu: its default ACL is not a valid one: new inodes cannot "
		       "inherit it", (unsigned long long)subvol, (unsigned long long)dir);
		return -EIO;
	} else {
		return ret;
	}
	/* the compression property goes to new files and directories (the kernel's btrfs_inherit_props) */
	if (S_ISREG(*mode) || S_ISDIR(*mode)) {
		ret = ub_fsw_getxattr(t, subvol, dir, PROP_COMPRESSION, strlen(PROP_COMPRESSION), ih->prop,
				      sizeof(ih->prop), &vlen);
		if (ret == 0 && vlen)
			ih->xa[ih->n++] = (struct ub_fsw_xattr){ PROP_COMPRESSION, strlen(PROP_COMPRESSION), ih->prop, vlen };
		else if (ret && ret != -ENODATA && ret != -ERANGE)
			return ret;
	}
	return 0;
}

int mount_mknod(struct mount_ctx *mc, const struct mount_caller *c, uint64_t parent, const char *name, uint32_t mode,
		dev_t rdev, uint64_t *id, struct stat *st)
{
	struct inherit *ih = NULL;
	struct mount_node pn;
	struct ub_inode dir;
	struct ub_txn *t;
	uint32_t gid;
	uint64_t ino;
	int ret;

	ret = writable(mc);
	if (!ret)
		ret = dir_node(mc, parent, &pn, &dir);
	if (!ret && !(ih = malloc(sizeof(*ih))))
		ret = -ENOMEM;
	if (ret)
		goto out;
	owner_of_new(&dir, c, &mode, &gid);
	ret = begin(mc, UB_FSW_OP_CREATE, 0, &t);
	if (ret)
		goto out;
	ret = inherit(mc, t, pn.subvol, pn.ino, c, &mode, ih);
	if (!ret)
		ret = ub_fsw_create_ex(t, pn.subvol, pn.ino, name, strlen(name), mode, c->uid, gid,
				       UB_FSW_MKDEV(major(rdev), minor(rdev)), ih->xa, ih->n, &ino);
	if (!ret)
		ret = new_file_flags(mc, t, pn.subvol, ino, mode);
	end(mc);
	if (ret) {
		ret = ret == -EEXIST || ret == -ENOSPC ? ret : op_failed(mc, ret);
		goto out;
	}
	ret = entry_out(mc, pn.subvol, ino, parent, name, id, st);
out:
	free(ih);
	return ret;
}

int mount_tmpfile(struct mount_ctx *mc, const struct mount_caller *c, uint64_t parent, uint32_t mode, uint64_t *id,
		  struct stat *st)
{
	struct inherit *ih = NULL;
	struct mount_node pn;
	struct ub_inode dir;
	struct ub_txn *t;
	uint32_t gid;
	uint64_t ino;
	int ret;

	mode = S_IFREG | (mode & 07777);
	ret = writable(mc);
	if (!ret)
		ret = dir_node(mc, parent, &pn, &dir);
	if (!ret && !(ih = malloc(sizeof(*ih))))
		ret = -ENOMEM;
	if (ret)
		goto out;
	owner_of_new(&dir, c, &mode, &gid);
	ret = begin(mc, UB_FSW_OP_CREATE, 0, &t);
	if (ret)
		goto out;
	ret = inherit(mc, t, pn.subvol, pn.ino, c, &mode, ih);
	if (!ret)
		ret = ub_fsw_tmpfile_ex(t, pn.subvol, pn.ino, mode, c->uid, gid, ih->xa, ih->n, &ino);
	if (!ret)
		ret = new_file_flags(mc, t, pn.subvol, ino, mode);
	end(mc);
	if (ret) {
		ret = ret == -ENOSPC ? ret : op_failed(mc, ret);
		goto out;
	}
	/* a node without a name: the kernel's lookup on it is all that keeps it (mount_forget evicts it) */
	*id = mount_map_get(mc->map, pn.subvol, ino, 0, parent, 0, NULL);
	ret = *id ? mount_getattr(mc, *id, st) : -ENOMEM;
	if (!ret)
		mount_map_ref(mc->map, *id);
out:
	free(ih);
	return ret;
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
	ret = begin(mc, dir ? UB_FSW_OP_SUBVOL : UB_FSW_OP_UNLINK, 0, &t);
	if (ret)
		return ret;
	if (dir) {
		uint64_t sub = 0, ino;

		/* rmdir of an empty subvolume deletes it, as the kernel's btrfs_rmdir does */
		if (ub_fsw_lookup_at(t, pn.subvol, pn.ino, name, strlen(name), &sub, &ino, NULL) == 0 && sub != pn.subvol) {
			struct ub_inode root;

			ret = ub_inode_read(mc->fs, sub, ino, &root);
			if (!ret)
				ret = root.size ? -ENOTEMPTY : ub_fsw_subvol_delete(t, pn.subvol, pn.ino, name, strlen(name));
		} else {
			ret = ub_fsw_rmdir(t, pn.subvol, pn.ino, name, strlen(name));
		}
	} else {
		ret = ub_fsw_unlink(t, pn.subvol, pn.ino, name, strlen(name));
	}
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

/* chmod with an access ACL: the ACL follows the new bits (the kernel's posix_acl_chmod), inside the operation */
static int acl_follow_chmod(struct mount_ctx *mc, struct ub_txn *t, const struct mount_node *n, uint32_t mode)
{
	struct mount_acl *acl = malloc(sizeof(*acl));
	uint8_t *buf = malloc(ACL_BYTES);
	size_t vlen = 0;
	int ret = acl && buf ? 0 : -ENOMEM;

	if (!ret)
		ret = ub_fsw_getxattr(t, n->subvol, n->ino, MOUNT_ACL_ACCESS, strlen(MOUNT_ACL_ACCESS), buf, ACL_BYTES,
				      &vlen);
	if (ret == -ENODATA) {
		ret = 0;
	} else if (!ret) {
		ret = mount_acl_parse(buf, vlen, acl);
		if (!ret && acl->count)
			ret = mount_acl_chmod(acl, mode);
		if (!ret && acl->count)
			ret = ub_fsw_setxattr(t, n->subvol, n->ino, MOUNT_ACL_ACCESS, strlen(MOUNT_ACL_ACCESS), buf,
					      mount_acl_encode(acl, buf), 0);
		else if (ret == -EINVAL || ret == -E2BIG)
			ret = -EIO;
	}
	free(acl);
	free(buf);
	return ret;
}

int mount_setattr(struct mount_ctx *mc, const struct mount_caller *c, uint64_t id, const struct stat *attr,
		  unsigned to_set, struct stat *st)
{
	struct ub_fsw_attr a = { 0 };
	struct mount_node n;
	struct ub_inode in;
	struct ub_txn *t;
	uint32_t mode;
	int64_t now;
	uint32_t nsec;
	int ret;

	ret = writable(mc);
	if (!ret)
		ret = mount_map_node(mc->map, id, &n);
	if (ret)
		return ret;
	ret = begin(mc, (to_set & MOUNT_SET_SIZE) ? UB_FSW_OP_TRUNCATE : UB_FSW_OP_SETATTR, 0, &t);
	if (ret)
		return ret;
	/* what the change starts from is read inside the operation: nothing changes it meanwhile */
	ret = ub_inode_read(mc->fs, n.subvol, n.ino, &in);
	if (ret) {
		end(mc);
		return wr_errno(mc, ret);
	}
	/*
	 * truncate(2) to the size the file has changes nothing, not even ctime
	 * (btrfs_setattr); ftruncate(2) moves mtime and ctime whatever the size
	 * (FUSE sends neither as times to set).
	 */
	if (to_set == MOUNT_SET_SIZE && S_ISREG(in.mode) && (uint64_t)attr->st_size == in.size) {
		end(mc);
		return mount_getattr(mc, id, st);
	}
	if ((to_set & (MOUNT_SET_SIZE | MOUNT_SET_THROUGH_FILE)) == (MOUNT_SET_SIZE | MOUNT_SET_THROUGH_FILE) &&
	    !(to_set & MOUNT_SET_MTIME))
		to_set |= MOUNT_SET_MTIME_NOW;
	to_set &= ~MOUNT_SET_THROUGH_FILE;
	/* one clock reading: times an operation sets "now" are equal, as the kernel's */
	now_ts(&now, &nsec);
	mode = in.mode & 07777;
	if (to_set & MOUNT_SET_MODE)
		mode = attr->st_mode & 07777;
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
		/* a size that changes moves mtime with ctime */
		if (a.size != in.size && !(to_set & (MOUNT_SET_MTIME | MOUNT_SET_MTIME_NOW)))
			to_set |= MOUNT_SET_MTIME_NOW;
		if (drops_sgid(&in, c))
			mode &= ~(uint32_t)S_ISGID;
		/* KILLPRIV_V2: a truncate by a caller without CAP_FSETID says so, with no mode of its own */
		if (mc->killpriv && c->kill_setid)
			mode = setid_dropped(&in, c) & mode;
	}
	/* KILLPRIV_V2: a chown of a file drops set-user-ID, and set-group-ID where the group may execute */
	if (mc->killpriv && !S_ISDIR(in.mode) && c->kill_setid &&
	    (to_set & (MOUNT_SET_UID | MOUNT_SET_GID))) {
		mode &= ~(uint32_t)S_ISUID;
		if (mode & S_IXGRP)
			mode &= ~(uint32_t)S_ISGID;
	}
	/*
	 * chown (and chown(-1, -1), which FUSE sends as a setattr of nothing; so
	 * does the kernel before a write that has set-id bits to drop): FUSE's rule
	 * keeps a set-group-ID bit without group execute that the VFS drops for a
	 * caller outside the group.
	 */
	if ((to_set & (MOUNT_SET_UID | MOUNT_SET_GID) || !to_set) && !S_ISDIR(in.mode) &&
	    (mode & (S_ISGID | S_IXGRP)) == S_ISGID && !mount_caller_in_group(c, in.gid))
		mode &= ~(uint32_t)S_ISGID;
	if (mode != (in.mode & 07777) || (to_set & MOUNT_SET_MODE)) {
		a.valid |= UB_FSW_ATTR_MODE;
		a.mode = mode;
	}
	if (to_set & (MOUNT_SET_ATIME | MOUNT_SET_ATIME_NOW)) {
		a.valid |= UB_FSW_ATTR_ATIME;
		a.atime_sec = to_set & MOUNT_SET_ATIME_NOW ? now : attr->st_atim.tv_sec;
		a.atime_nsec = to_set & MOUNT_SET_ATIME_NOW ? nsec : (uint32_t)attr->st_atim.tv_nsec;
	}
	if (to_set & (MOUNT_SET_MTIME | MOUNT_SET_MTIME_NOW)) {
		a.valid |= UB_FSW_ATTR_MTIME;
		a.mtime_sec = to_set & MOUNT_SET_MTIME_NOW ? now : attr->st_mtim.tv_sec;
		a.mtime_nsec = to_set & MOUNT_SET_MTIME_NOW ? nsec : (uint32_t)attr->st_mtim.tv_nsec;
	}
	a.valid |= UB_FSW_ATTR_CTIME;
	a.ctime_sec = to_set & MOUNT_SET_CTIME ? attr->st_ctim.tv_sec : now;
	a.ctime_nsec = to_set & MOUNT_SET_CTIME ? (uint32_t)attr->st_ctim.tv_nsec : nsec;
	ret = mc->acl && (to_set & MOUNT_SET_MODE) && !S_ISLNK(in.mode) ? acl_follow_chmod(mc, t, &n, mode) : 0;
	if (!ret)
		ret = ub_fsw_setattr(t, n.subvol, n.ino, &a);
	end(mc);
	if (ret)
		return op_failed(mc, ret);
	return mount_getattr(mc, id, st);
}

/*
 * Inside an operation on a regular file's data by `c`: the set-group-ID bit
 * the kernel drops and FUSE did not (drops_sgid), dropped with the change.
 */
static int drop_sgid_for(struct mount_ctx *mc, struct ub_txn *t, const struct mount_node *n,
			 const struct mount_caller *c)
{
	struct ub_fsw_attr a = { .valid = UB_FSW_ATTR_MODE };
	struct ub_inode in;
	int ret;

	if (c->uid == 0)
		return 0;
	ret = ub_inode_read(mc->fs, n->subvol, n->ino, &in);
	if (ret || !drops_sgid(&in, c))
		return ret;
	a.mode = in.mode & 07777 & ~(uint32_t)S_ISGID;
	return ub_fsw_setattr(t, n->subvol, n->ino, &a);
}

/*
 * Inside an operation on a regular file's data by `c`: the set-id bits it
 * drops. With KILLPRIV_V2 (mc->killpriv) the kernel sent no mode of its own:
 * `kill` says whether the caller lacks CAP_FSETID (the request's flag, or,
 * where the kernel sends none, not root). Without it the kernel sent the
 * mode and only drop_sgid_for's case is left.
 */
static int drop_setid_for(struct mount_ctx *mc, struct ub_txn *t, const struct mount_node *n,
			  const struct mount_caller *c, bool kill, bool *changed)
{
	struct ub_fsw_attr a = { .valid = UB_FSW_ATTR_MODE };
	struct ub_inode in;
	int ret;

	*changed = false;
	if (!mc->killpriv)
		return drop_sgid_for(mc, t, n, c);
	if (!kill)
		return 0;
	ret = ub_inode_read(mc->fs, n->subvol, n->ino, &in);
	if (ret)
		return ret;
	a.mode = setid_dropped(&in, c);
	if (a.mode == (in.mode & 07777))
		return 0;
	ret = ub_fsw_setattr(t, n->subvol, n->ino, &a);
	/* the kernel learns of it from us: no reply to these calls carries a mode */
	*changed = ret == 0;
	return ret;
}

int mount_open_trunc(struct mount_ctx *mc, const struct mount_caller *c, uint64_t id)
{
	struct ub_fsw_attr a = { .valid = UB_FSW_ATTR_SIZE | UB_FSW_ATTR_MTIME | UB_FSW_ATTR_CTIME };
	struct mount_node n;
	struct ub_inode in;
	struct ub_txn *t;
	int ret;

	ret = writable(mc);
	if (!ret)
		ret = mount_map_node(mc->map, id, &n);
	if (ret)
		return ret;
	ret = begin(mc, UB_FSW_OP_TRUNCATE, 0, &t);
	if (ret)
		return ret;
	ret = ub_inode_read(mc->fs, n.subvol, n.ino, &in);
	/* only a regular file is truncated by its open (the VFS's rule) */
	if (ret || !S_ISREG(in.mode)) {
		end(mc);
		return ret ? wr_errno(mc, ret) : 0;
	}
	/*
	 * The VFS's handle_truncate: the set-user-ID bit goes, and the set-group-ID
	 * bit with group execute or for a caller outside the group; not for root
	 * (setattr_should_drop_suidgid).
	 */
	if ((mc->killpriv ? c->kill_setid : c->uid != 0) &&
	    ((in.mode & S_ISUID) || (in.mode & (S_ISGID | S_IXGRP)) == (S_ISGID | S_IXGRP) || drops_sgid(&in, c))) {
		a.valid |= UB_FSW_ATTR_MODE;
		a.mode = in.mode & 07777 & ~(uint32_t)S_ISUID;
		if ((in.mode & (S_ISGID | S_IXGRP)) == (S_ISGID | S_IXGRP) || drops_sgid(&in, c))
			a.mode &= ~(uint32_t)S_ISGID;
	}
	now_ts(&a.mtime_sec, &a.mtime_nsec);
	a.ctime_sec = a.mtime_sec;
	a.ctime_nsec = a.mtime_nsec;
	ret = ub_fsw_setattr(t, n.subvol, n.ino, &a);
	end(mc);
	return ret ? op_failed(mc, ret) : 0;
}

int mount_write(struct mount_ctx *mc, const struct mount_caller *c, uint64_t id, uint64_t off, const void *buf,
		size_t size)
{
	struct mount_node n;
	struct ub_txn *t;
	bool changed = false;
	int compress = -1, ret;

	ret = writable(mc);
	if (!ret)
		ret = mount_map_node(mc->map, id, &n);
	if (ret)
		return ret;
	if (size == 0)
		return 0;
	ret = begin(mc, UB_FSW_OP_WRITE, size, &t);
	if (ret)
		return ret;
	/* the mount's compress= applies where the file has no property of its own (-1: the file API reads it) */
	if (mc->mo->compress) {
		char v[32];
		size_t vlen = 0;

		compress = mc->mo->compress;
		if (ub_fsw_getxattr(t, n.subvol, n.ino, PROP_COMPRESSION, strlen(PROP_COMPRESSION), v, sizeof(v), &vlen) == 0)
			compress = -1;
	}
	/* the bit goes with a change that happened: a write refused (ENOSPC) changes nothing */
	ret = ub_fsw_write_ex(t, n.subvol, n.ino, off, buf, size, compress, compress > 0 ? mc->mo->compress_level : 0);
	if (!ret)
		ret = drop_setid_for(mc, t, &n, c, c->kill_setid, &changed);
	end(mc);
	if (changed && mc->notify_attrs)
		mc->notify_attrs(mc, id);
	return ret ? op_failed(mc, ret) : 0;
}

int mount_fallocate(struct mount_ctx *mc, const struct mount_caller *c, uint64_t id, int mode, uint64_t off,
		    uint64_t len)
{
	/* btrfs_fallocate moves mtime and ctime together, whatever it allocates (KEEP_SIZE too) */
	struct ub_fsw_attr a = { .valid = UB_FSW_ATTR_MTIME | UB_FSW_ATTR_CTIME };
	struct mount_node n;
	struct ub_txn *t;
	bool changed = false;
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
	/* the kernel's fallocate drops set-id bits too (file_modified), and sends no flag for it */
	if (!ret)
		ret = drop_setid_for(mc, t, &n, c, c->uid != 0, &changed);
	if (!ret) {
		now_ts(&a.mtime_sec, &a.mtime_nsec);
		a.ctime_sec = a.mtime_sec;
		a.ctime_nsec = a.mtime_nsec;
		ret = ub_fsw_setattr(t, n.subvol, n.ino, &a);
	}
	end(mc);
	if (changed && mc->notify_attrs)
		mc->notify_attrs(mc, id);
	return ret ? op_failed(mc, ret) : 0;
}

/*
 * system.posix_acl_access / _default, as the kernel's btrfs_set_acl: an access
 * ACL sets the permission bits (and is not kept when they say it all), and
 * drops the set-group-ID bit of a caller outside the group; a value without
 * entries removes the ACL; a default ACL is for directories.
 */
static int set_acl(struct mount_ctx *mc, const struct mount_caller *c, const struct mount_node *n, bool access,
		   const void *value, size_t size)
{
	const char *name = access ? MOUNT_ACL_ACCESS : MOUNT_ACL_DEFAULT;
	struct ub_fsw_attr a = { .valid = UB_FSW_ATTR_CTIME };
	struct mount_acl *acl = malloc(sizeof(*acl));
	uint8_t *buf = malloc(ACL_BYTES);
	bool keep = true;
	struct ub_inode in;
	struct ub_txn *t;
	int ret = acl && buf ? 0 : -ENOMEM;

	if (!ret)
		ret = mount_acl_parse(value, size, acl);
	if (ret)
		goto out;
	ret = begin(mc, UB_FSW_OP_XATTR, 0, &t);
	if (ret)
		goto out;
	/* the mode the ACL changes is read inside the operation: nothing changes it meanwhile */
	ret = ub_inode_read(mc->fs, n->subvol, n->ino, &in);
	if (ret) {
		end(mc);
		ret = wr_errno(mc, ret);
		goto out;
	}
	if (!access && !S_ISDIR(in.mode)) {
		end(mc);
		ret = acl->count ? -EACCES : 0;
		goto out;
	}
	if (access && acl->count) {
		uint32_t mode = in.mode & 07777;

		keep = !mount_acl_equiv_mode(acl, &mode);
		if (!mount_caller_in_group(c, in.gid))
			mode &= ~(uint32_t)S_ISGID;
		a.valid |= UB_FSW_ATTR_MODE;
		a.mode = mode;
	}
	if (acl->count && keep) {
		/* the VFS takes no flags for an ACL (setxattr's are not passed on) */
		ret = ub_fsw_setxattr(t, n->subvol, n->ino, name, strlen(name), buf, mount_acl_encode(acl, buf), 0);
	} else {
		ret = ub_fsw_removexattr(t, n->subvol, n->ino, name, strlen(name));
		if (ret == -ENODATA)
			ret = 0;
	}
	if (!ret) {
		now_ts(&a.ctime_sec, &a.ctime_nsec);
		ret = ub_fsw_setattr(t, n->subvol, n->ino, &a);
	}
	end(mc);
	if (ret)
		ret = ret == -EEXIST || ret == -ENODATA || ret == -ENOSPC ? ret : op_failed(mc, ret);
out:
	free(acl);
	free(buf);
	return ret;
}

int mount_setxattr(struct mount_ctx *mc, const struct mount_caller *c, uint64_t id, const char *name,
		   const void *value, size_t size, int flags)
{
	int kind = mount_xattr_kind(mc, name);
	struct mount_node n;
	struct ub_txn *t;
	int ret;

	/* btrfs has no property but compression (its handler refuses the name, EINVAL) */
	if (kind == MOUNT_XA_PROP_OTHER)
		kind = -EINVAL;
	ret = kind < 0 ? kind : writable(mc);
	if (!ret)
		ret = mount_map_node(mc->map, id, &n);
	if (ret)
		return ret;
	if (kind == MOUNT_XA_ACL_ACCESS || kind == MOUNT_XA_ACL_DEFAULT)
		return set_acl(mc, c, &n, kind == MOUNT_XA_ACL_ACCESS, value, size);
	ret = begin(mc, UB_FSW_OP_XATTR, 0, &t);
	if (ret)
		return ret;
	ret = ub_fsw_setxattr(t, n.subvol, n.ino, name, strlen(name), value, size, flags);
	end(mc);
	return ret ? op_failed(mc, ret) : 0;
}

int mount_removexattr(struct mount_ctx *mc, uint64_t id, const char *name)
{
	int kind = mount_xattr_kind(mc, name);
	struct mount_node n;
	struct ub_txn *t;
	int ret;

	if (kind == MOUNT_XA_PROP_OTHER)
		kind = -EINVAL;
	ret = kind < 0 ? kind : writable(mc);
	if (!ret)
		ret = mount_map_node(mc->map, id, &n);
	if (ret)
		return ret;
	ret = begin(mc, UB_FSW_OP_XATTR, 0, &t);
	if (ret)
		return ret;
	ret = ub_fsw_removexattr(t, n.subvol, n.ino, name, strlen(name));
	/* no ACL to remove is no error (btrfs_set_acl of none), and still a change of the inode */
	if (ret == -ENODATA && (kind == MOUNT_XA_ACL_ACCESS || kind == MOUNT_XA_ACL_DEFAULT)) {
		struct ub_fsw_attr a = { .valid = UB_FSW_ATTR_CTIME };

		now_ts(&a.ctime_sec, &a.ctime_nsec);
		ret = ub_fsw_setattr(t, n.subvol, n.ino, &a);
	}
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
	if (mc->mo->notreelog)
		return mount_sync(mc);
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

int mount_copy_range(struct mount_ctx *mc, const struct mount_caller *c, uint64_t in_id, uint64_t off_in,
		     uint64_t out_id, uint64_t off_out, uint64_t len)
{
	struct mount_node a, b;
	struct ub_txn *t;
	bool changed = false;
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
	/* the kernel's copy_file_range drops the target's set-id bits (file_modified), flagless as fallocate */
	if (!ret && mc->killpriv)
		ret = drop_setid_for(mc, t, &b, c, c->uid != 0, &changed);
	end(mc);
	if (changed && mc->notify_attrs)
		mc->notify_attrs(mc, out_id);
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

/* Whether an access now moves the atime: the mount's rule (relatime: the kernel's relatime_need_update), chattr +A. */
static bool atime_due(const struct mount_ctx *mc, const struct ub_inode *in, int64_t now)
{
	if (mc->mo->atime == MOUNT_NOATIME || (in->flags & UB_INODE_NOATIME))
		return false;
	if (mc->mo->atime == MOUNT_STRICTATIME)
		return true;
	/* relatime: an atime not newer than the last change, or a day old, moves */
	return in->atime.sec < in->mtime.sec || (in->atime.sec == in->mtime.sec && in->atime.nsec <= in->mtime.nsec) ||
	       in->atime.sec < in->ctime.sec || (in->atime.sec == in->ctime.sec && in->atime.nsec <= in->ctime.nsec) ||
	       now - in->atime.sec >= 24 * 3600;
}

bool mount_open_keep_cache(struct mount_ctx *mc, uint64_t id)
{
	struct mount_node n;
	struct ub_inode in;
	int64_t now;
	uint32_t nsec;

	if (writable(mc) || mount_map_node(mc->map, id, &n) || ub_inode_read(mc->fs, n.subvol, n.ino, &in))
		return true;
	now_ts(&now, &nsec);
	/*
	 * A read the atime rule counts must reach us: the cached pages go, so the
	 * first read of this open is a request (once the atime moved, relatime
	 * lets the cache serve until the file changes again).
	 */
	return !atime_due(mc, &in, now);
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
	if (!atime_due(mc, &in, now))
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
