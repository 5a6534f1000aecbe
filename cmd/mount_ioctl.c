/* SPDX-License-Identifier: MIT */
/*
 * The mount's ioctls: chattr's flags (FS_IOC_GETFLAGS/SETFLAGS and the xfs
 * form FS_IOC_FSGETXATTR/FSSETXATTR) and the btrfs ioctls FUSE passes (those
 * whose argument is a fixed-size struct: FUSE's restricted ioctls cannot follow
 * pointers), each handed to mount_core.c or mount_write.c.
 */
#define FUSE_USE_VERSION 35
#include <errno.h>
#include <fuse_lowlevel.h>
#include <linux/fs.h>
#include <string.h>
#include <sys/ioctl.h>
#include "mount.h"
#include "mount_ioctl.h"
#include "ubtrfs/format.h"

static void reply_err(fuse_req_t req, int ret)
{
	fuse_reply_err(req, -ret);
}

/* FS_IOC_GETFLAGS / SETFLAGS: chattr's flags as btrfs maps them onto its inode flags */
static const struct {
	uint32_t fs;
	uint64_t ub;
} flag_map[] = {
	{ FS_NOCOW_FL, UB_INODE_NODATACOW }, { FS_COMPR_FL, UB_INODE_COMPRESS }, { FS_NOCOMP_FL, UB_INODE_NOCOMPRESS },
	{ FS_NOATIME_FL, UB_INODE_NOATIME }, { FS_SYNC_FL, UB_INODE_SYNC },      { FS_NODUMP_FL, UB_INODE_NODUMP },
	{ FS_APPEND_FL, UB_INODE_APPEND },   { FS_IMMUTABLE_FL, UB_INODE_IMMUTABLE }, { FS_DIRSYNC_FL, UB_INODE_DIRSYNC },
};

/* FS_IOC_FSGETXATTR's flags btrfs has (the kernel's btrfs_fileattr_get) */
static const struct {
	uint32_t fs;
	uint64_t ub;
} xflag_map[] = {
	{ FS_XFLAG_IMMUTABLE, UB_INODE_IMMUTABLE }, { FS_XFLAG_APPEND, UB_INODE_APPEND }, { FS_XFLAG_SYNC, UB_INODE_SYNC },
	{ FS_XFLAG_NOATIME, UB_INODE_NOATIME },     { FS_XFLAG_NODUMP, UB_INODE_NODUMP },
};

#define BTRFS_IOC_SYNC_NR _IO(0x94, 8)
#define BTRFS_IOC_SUBVOL_GETFLAGS_NR _IOR(0x94, 25, uint64_t)
#define BTRFS_SUBVOL_RDONLY_FL (1ULL << 1)

void mount_op_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void *arg, struct fuse_file_info *fi,
		     unsigned flags, const void *in_buf, size_t in_bufsz, size_t out_bufsz)
{
	struct mount_ctx *mc = fuse_req_userdata(req);
	uint64_t iflags = 0;
	int ret;

	if (flags & FUSE_IOCTL_COMPAT) {
		fuse_reply_err(req, ENOSYS);
		return;
	}
	switch (cmd) {
	case FS_IOC_GETFLAGS: {
		unsigned int out = 0;

		if (out_bufsz < sizeof(out)) {
			fuse_reply_err(req, EINVAL);
			return;
		}
		ret = mount_get_flags(mc, ino, &iflags);
		if (ret) {
			reply_err(req, ret);
			return;
		}
		for (size_t i = 0; i < sizeof(flag_map) / sizeof(flag_map[0]); i++)
			if (iflags & flag_map[i].ub)
				out |= flag_map[i].fs;
		fuse_reply_ioctl(req, 0, &out, sizeof(out));
		return;
	}
	case FS_IOC_SETFLAGS: {
		unsigned int want;
		uint64_t set = 0, clear = 0;

		if (in_bufsz < sizeof(want)) {
			fuse_reply_err(req, EINVAL);
			return;
		}
		memcpy(&want, in_buf, sizeof(want));
		ret = mount_get_flags(mc, ino, &iflags);
		for (size_t i = 0; !ret && i < sizeof(flag_map) / sizeof(flag_map[0]); i++) {
			if (want & flag_map[i].fs)
				set |= flag_map[i].ub;
			else
				clear |= flag_map[i].ub;
			want &= ~flag_map[i].fs;
		}
		/* only what changes: a flag the file API cannot change is refused only when asked to change */
		set &= ~iflags;
		clear &= iflags;
		if (!ret)
			ret = want ? -EOPNOTSUPP : set || clear ? mount_set_flags(mc, ino, set, clear) : 0;
		if (ret)
			reply_err(req, ret);
		else
			fuse_reply_ioctl(req, 0, NULL, 0);
		return;
	}
	case FS_IOC_FSGETXATTR: {
		/* the same flags in the xfs form, which chattr's path through the kernel asks for too */
		struct fsxattr fx;

		if (out_bufsz < sizeof(fx)) {
			fuse_reply_err(req, EINVAL);
			return;
		}
		ret = mount_get_flags(mc, ino, &iflags);
		if (ret) {
			reply_err(req, ret);
			return;
		}
		memset(&fx, 0, sizeof(fx));
		for (size_t i = 0; i < sizeof(xflag_map) / sizeof(xflag_map[0]); i++)
			if (iflags & xflag_map[i].ub)
				fx.fsx_xflags |= xflag_map[i].fs;
		fuse_reply_ioctl(req, 0, &fx, sizeof(fx));
		return;
	}
	case FS_IOC_FSSETXATTR: {
		struct fsxattr fx;
		uint64_t set = 0, clear = 0;
		uint32_t want;

		if (in_bufsz < sizeof(fx)) {
			fuse_reply_err(req, EINVAL);
			return;
		}
		memcpy(&fx, in_buf, sizeof(fx));
		want = fx.fsx_xflags;
		ret = mount_get_flags(mc, ino, &iflags);
		for (size_t i = 0; !ret && i < sizeof(xflag_map) / sizeof(xflag_map[0]); i++) {
			if (want & xflag_map[i].fs)
				set |= xflag_map[i].ub;
			else
				clear |= xflag_map[i].ub;
			want &= ~xflag_map[i].fs;
		}
		set &= ~iflags;
		clear &= iflags;
		/* the xfs form leaves NOCOW and compression alone */
		if (!ret)
			ret = want || fx.fsx_extsize || fx.fsx_projid || fx.fsx_cowextsize ? -EOPNOTSUPP
			      : set || clear ? mount_set_flags(mc, ino, set, clear) : 0;
		if (ret)
			reply_err(req, ret);
		else
			fuse_reply_ioctl(req, 0, NULL, 0);
		return;
	}
	case BTRFS_IOC_SUBVOL_GETFLAGS_NR: {
		uint64_t out;

		if (out_bufsz < sizeof(out)) {
			fuse_reply_err(req, EINVAL);
			return;
		}
		ret = mount_subvol_flags(mc, ino, &out);
		if (ret)
			reply_err(req, ret);
		else
			fuse_reply_ioctl(req, 0, &out, sizeof(out));
		return;
	}
	case BTRFS_IOC_SYNC_NR:
		ret = mount_sync(mc);
		if (ret)
			reply_err(req, ret);
		else
			fuse_reply_ioctl(req, 0, NULL, 0);
		return;
	default:
		fuse_reply_err(req, ENOTTY);
	}
}
