/* SPDX-License-Identifier: MIT */
/*
 * The mount's ioctls: chattr's flags (FS_IOC_GETFLAGS/SETFLAGS and the xfs
 * form FS_IOC_FSGETXATTR/FSSETXATTR) and the btrfs ioctls FUSE passes (those
 * whose argument is a fixed-size struct: FUSE's restricted ioctls cannot follow
 * pointers), each handed to mount_core.c, mount_write.c or mount_subvol.c.
 * Here: who the caller is (uid, groups, capabilities, its descriptor of a
 * snapshot's source), and telling the kernel what a change behind its back
 * made stale in its caches.
 */
#define FUSE_USE_VERSION 35
#include <errno.h>
#include <fuse_lowlevel.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include "mount.h"
#include "mount_ioctl.h"
#include "mount_scrub.h"
#include "mount_subvol.h"
#include "ubtrfs_ioctl.h"
#include "ubtrfs/engine.h"
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

/* ---- the caller ---- */

#define CAP_DAC_OVERRIDE_BIT 1
#define CAP_FOWNER_BIT 3
#define CAP_SYS_ADMIN_BIT 21

/* the effective capabilities of the calling thread (none when it cannot be read: it is gone) */
static uint64_t caller_caps(pid_t pid)
{
	char path[64], line[256];
	unsigned long long caps = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "CapEff: %llx", &caps) == 1)
			break;
	fclose(f);
	return caps;
}

struct caller {
	struct mount_ioctl_caller c;
	uint32_t groups[64];
	pid_t pid;
};

static void caller_of(fuse_req_t req, struct caller *k)
{
	const struct fuse_ctx *fc = fuse_req_ctx(req);
	gid_t g[64];
	int n = fuse_req_getgroups(req, 64, g);
	uint64_t caps = caller_caps(fc->pid);

	memset(k, 0, sizeof(*k));
	k->pid = fc->pid;
	k->c.uid = fc->uid;
	k->c.gid = fc->gid;
	if (n > 64)
		n = 64;
	for (int i = 0; i < n; i++)
		k->groups[i] = g[i];
	k->c.groups = k->groups;
	k->c.ngroups = n > 0 ? n : 0;
	k->c.sys_admin = caps >> CAP_SYS_ADMIN_BIT & 1;
	k->c.dac_override = caps >> CAP_DAC_OVERRIDE_BIT & 1;
	k->c.fowner = caps >> CAP_FOWNER_BIT & 1;
}

/*
 * The snapshot source: the caller's descriptor `fd`, which must be a file of
 * this mount (the kernel's EXDEV otherwise); stat through /proc finds which
 * (subvolume, inode) it is.
 */
static int source_of(struct mount_ctx *mc, pid_t pid, int64_t fd, uint64_t *subvol, uint64_t *ino)
{
	char path[64];
	struct stat st, ours;

	if (fd < 0 || fd > INT32_MAX)
		return -EBADF;
	snprintf(path, sizeof(path), "/proc/%d/fd/%lld", (int)pid, (long long)fd);
	if (stat(path, &st) < 0)
		return errno == ENOENT ? -EBADF : -errno;
	if (!mc->mountpoint || stat(mc->mountpoint, &ours) < 0)
		return -EXDEV;
	if (st.st_dev != ours.st_dev)
		return -EXDEV;
	mount_ino_of(mc, st.st_ino, subvol, ino);
	return 0;
}

/* The kernel cached the directory's attributes (size, times) and its names: what changed behind it goes. */
static void dir_changed(struct mount_ctx *mc, uint64_t dir, const char *name)
{
	if (!mc->se || !dir)
		return;
	if (name)
		fuse_lowlevel_notify_inval_entry(mc->se, dir, name, strlen(name));
	fuse_lowlevel_notify_inval_inode(mc->se, dir, -1, 0);
}

/* a name from the caller's struct: NUL-terminated within its field, as the kernel makes it */
static void name_from(char *out, size_t outsz, const char *in, size_t insz)
{
	size_t n = strnlen(in, insz - 1);

	if (n >= outsz)
		n = outsz - 1;
	memcpy(out, in, n);
	out[n] = '\0';
}

static int subvol_ioctl(fuse_req_t req, struct mount_ctx *mc, fuse_ino_t ino, unsigned int cmd, const void *in_buf,
			size_t in_bufsz, size_t out_bufsz);

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
		ret = subvol_ioctl(req, mc, ino, cmd, in_buf, in_bufsz, out_bufsz);
		if (ret)
			reply_err(req, ret);
	}
}

/* The btrfs ioctls of subvolumes and of the filesystem as a whole: 0 when replied, else the error to reply. */
static int subvol_ioctl(fuse_req_t req, struct mount_ctx *mc, fuse_ino_t ino, unsigned int cmd, const void *in_buf,
			size_t in_bufsz, size_t out_bufsz)
{
	struct caller k;
	char name[UB_NAME_LEN + 2];
	uint64_t id, subvol, sino;
	int ret;

	switch (cmd) {
	case BTRFS_IOC_SUBVOL_CREATE:
	case BTRFS_IOC_SUBVOL_CREATE_V2: {
		const bool v2 = cmd == BTRFS_IOC_SUBVOL_CREATE_V2;

		if (in_bufsz < (v2 ? sizeof(struct btrfs_ioctl_vol_args_v2) : sizeof(struct btrfs_ioctl_vol_args)))
			return -EINVAL;
		if (v2) {
			const struct btrfs_ioctl_vol_args_v2 *a = in_buf;

			/* quota groups to inherit: no quotas here (the write engine refuses them) */
			if (a->flags & ~(uint64_t)(BTRFS_SUBVOL_RDONLY | BTRFS_SUBVOL_QGROUP_INHERIT))
				return -EOPNOTSUPP;
			if (a->flags & BTRFS_SUBVOL_QGROUP_INHERIT)
				return -EOPNOTSUPP;
			name_from(name, sizeof(name), a->name, sizeof(a->name));
		} else {
			const struct btrfs_ioctl_vol_args *a = in_buf;

			name_from(name, sizeof(name), a->name, sizeof(a->name));
		}
		caller_of(req, &k);
		ret = mount_subvol_create(mc, &k.c, ino, name, &id);
		if (ret)
			return ret;
		dir_changed(mc, ino, NULL);
		fuse_reply_ioctl(req, 0, NULL, 0);
		return 0;
	}
	case BTRFS_IOC_SNAP_CREATE:
	case BTRFS_IOC_SNAP_CREATE_V2: {
		const bool v2 = cmd == BTRFS_IOC_SNAP_CREATE_V2;
		bool ro = false;
		int64_t fd;

		if (in_bufsz < (v2 ? sizeof(struct btrfs_ioctl_vol_args_v2) : sizeof(struct btrfs_ioctl_vol_args)))
			return -EINVAL;
		if (v2) {
			const struct btrfs_ioctl_vol_args_v2 *a = in_buf;

			if (a->flags & ~(uint64_t)(BTRFS_SUBVOL_RDONLY | BTRFS_SUBVOL_QGROUP_INHERIT |
						   BTRFS_SUBVOL_CREATE_ASYNC))
				return -EOPNOTSUPP;
			if (a->flags & (BTRFS_SUBVOL_QGROUP_INHERIT | BTRFS_SUBVOL_CREATE_ASYNC))
				return -EOPNOTSUPP;
			ro = a->flags & BTRFS_SUBVOL_RDONLY;
			fd = a->fd;
			name_from(name, sizeof(name), a->name, sizeof(a->name));
		} else {
			const struct btrfs_ioctl_vol_args *a = in_buf;

			fd = a->fd;
			name_from(name, sizeof(name), a->name, sizeof(a->name));
		}
		caller_of(req, &k);
		ret = source_of(mc, k.pid, fd, &subvol, &sino);
		if (!ret)
			ret = mount_snapshot(mc, &k.c, subvol, sino, ino, name, ro, &id);
		if (ret)
			return ret;
		dir_changed(mc, ino, NULL);
		fuse_reply_ioctl(req, 0, NULL, 0);
		return 0;
	}
	case BTRFS_IOC_SNAP_DESTROY:
	case BTRFS_IOC_SNAP_DESTROY_V2: {
		uint64_t parent = 0, dirid = 0, gone = 0;

		if (in_bufsz < (cmd == BTRFS_IOC_SNAP_DESTROY_V2 ? sizeof(struct btrfs_ioctl_vol_args_v2)
								 : sizeof(struct btrfs_ioctl_vol_args)))
			return -EINVAL;
		caller_of(req, &k);
		if (cmd == BTRFS_IOC_SNAP_DESTROY_V2 &&
		    (((const struct btrfs_ioctl_vol_args_v2 *)in_buf)->flags & BTRFS_SUBVOL_SPEC_BY_ID)) {
			const struct btrfs_ioctl_vol_args_v2 *a = in_buf;

			if (a->flags & ~(uint64_t)BTRFS_SUBVOL_SPEC_BY_ID)
				return -EOPNOTSUPP;
			ret = mount_subvol_destroy_id(mc, &k.c, a->subvolid, &parent, &dirid, name);
			if (ret)
				return ret;
			dir_changed(mc, mount_map_find(mc->map, parent, dirid), name);
		} else {
			if (cmd == BTRFS_IOC_SNAP_DESTROY_V2) {
				const struct btrfs_ioctl_vol_args_v2 *a = in_buf;

				if (a->flags)
					return -EOPNOTSUPP;
				name_from(name, sizeof(name), a->name, sizeof(a->name));
			} else {
				const struct btrfs_ioctl_vol_args *a = in_buf;

				name_from(name, sizeof(name), a->name, sizeof(a->name));
			}
			ret = mount_subvol_destroy(mc, &k.c, ino, name, &gone);
			if (ret)
				return ret;
			dir_changed(mc, ino, name);
		}
		if (mc->wake_cleaner)
			mc->wake_cleaner(mc);
		fuse_reply_ioctl(req, 0, NULL, 0);
		return 0;
	}
	case BTRFS_IOC_DEFAULT_SUBVOL:
		if (in_bufsz < sizeof(uint64_t))
			return -EINVAL;
		memcpy(&id, in_buf, sizeof(id));
		caller_of(req, &k);
		ret = mount_set_default_subvol(mc, &k.c, id);
		if (ret)
			return ret;
		fuse_reply_ioctl(req, 0, NULL, 0);
		return 0;
	case BTRFS_IOC_SUBVOL_SETFLAGS:
		if (in_bufsz < sizeof(uint64_t))
			return -EINVAL;
		memcpy(&id, in_buf, sizeof(id));
		caller_of(req, &k);
		ret = mount_subvol_setflags(mc, &k.c, ino, id);
		if (ret)
			return ret;
		fuse_reply_ioctl(req, 0, NULL, 0);
		return 0;
	case BTRFS_IOC_INO_LOOKUP: {
		struct btrfs_ioctl_ino_lookup_args *a;

		if (in_bufsz < sizeof(*a) || out_bufsz < sizeof(*a))
			return -EINVAL;
		a = malloc(sizeof(*a));
		if (!a)
			return -ENOMEM;
		memcpy(a, in_buf, sizeof(*a));
		caller_of(req, &k);
		id = a->treeid;
		ret = mount_ino_lookup(mc, &k.c, ino, &id, a->objectid, a->name, sizeof(a->name));
		a->treeid = id;
		if (!ret)
			fuse_reply_ioctl(req, 0, a, sizeof(*a));
		free(a);
		return ret;
	}
	case BTRFS_IOC_TREE_SEARCH: {
		struct btrfs_ioctl_search_args *a;

		if (in_bufsz < sizeof(*a) || out_bufsz < sizeof(*a))
			return -EINVAL;
		a = malloc(sizeof(*a));
		if (!a)
			return -ENOMEM;
		memcpy(a, in_buf, sizeof(*a));
		caller_of(req, &k);
		ret = mount_tree_search(mc, &k.c, ino, a);
		if (!ret)
			fuse_reply_ioctl(req, 0, a, sizeof(*a));
		free(a);
		return ret;
	}
	case BTRFS_IOC_GET_SUBVOL_INFO: {
		struct btrfs_ioctl_get_subvol_info_args a;

		if (out_bufsz < sizeof(a))
			return -EINVAL;
		ret = mount_get_subvol_info(mc, ino, &a);
		if (!ret)
			fuse_reply_ioctl(req, 0, &a, sizeof(a));
		return ret;
	}
	case BTRFS_IOC_FS_INFO: {
		struct btrfs_ioctl_fs_info_args a;

		if (out_bufsz < sizeof(a))
			return -EINVAL;
		/* an _IOR ioctl: FUSE brings none of the caller's flags, so every field is filled and flagged */
		memset(&a, 0, sizeof(a));
		a.flags = BTRFS_FS_INFO_FLAG_CSUM_INFO | BTRFS_FS_INFO_FLAG_GENERATION | BTRFS_FS_INFO_FLAG_METADATA_UUID;
		ret = mount_fs_info(mc, &a);
		if (!ret)
			fuse_reply_ioctl(req, 0, &a, sizeof(a));
		return ret;
	}
	case BTRFS_IOC_DEV_INFO: {
		struct btrfs_ioctl_dev_info_args *a;

		if (in_bufsz < sizeof(*a) || out_bufsz < sizeof(*a))
			return -EINVAL;
		a = malloc(sizeof(*a));
		if (!a)
			return -ENOMEM;
		memcpy(a, in_buf, sizeof(*a));
		ret = mount_dev_info(mc, a);
		if (!ret)
			fuse_reply_ioctl(req, 0, a, sizeof(*a));
		free(a);
		return ret;
	}
	case BTRFS_IOC_GET_FSLABEL: {
		char label[BTRFS_LABEL_SIZE];

		if (out_bufsz < sizeof(label))
			return -EINVAL;
		ret = mount_get_label(mc, label, sizeof(label));
		if (!ret)
			fuse_reply_ioctl(req, 0, label, sizeof(label));
		return ret;
	}
	case BTRFS_IOC_SET_FSLABEL:
		if (in_bufsz < BTRFS_LABEL_SIZE)
			return -EINVAL;
		caller_of(req, &k);
		ret = mount_set_label(mc, &k.c, in_buf, BTRFS_LABEL_SIZE);
		if (ret)
			return ret;
		fuse_reply_ioctl(req, 0, NULL, 0);
		return 0;
	case BTRFS_IOC_SPACE_INFO: {
		/*
		 * FUSE carries the 16-byte head only: the count for a caller that
		 * asks how many (space_slots 0); the entries themselves cannot
		 * reach it (UBTRFS_IOC_SPACE_INFO carries them).
		 */
		struct btrfs_ioctl_space_args a;
		struct btrfs_ioctl_space_info none[1];
		int n;

		if (in_bufsz < sizeof(a) || out_bufsz < sizeof(a))
			return -EINVAL;
		memcpy(&a, in_buf, sizeof(a));
		if (a.space_slots)
			return -EOPNOTSUPP;
		ret = mount_space_info(mc, none, 0, &n);
		if (ret)
			return ret;
		a.total_spaces = (uint64_t)n;
		fuse_reply_ioctl(req, 0, &a, sizeof(a));
		return 0;
	}
	case UBTRFS_IOC_SPACE_INFO: {
		struct ubtrfs_ioctl_space_args a;
		int n;

		if (out_bufsz < sizeof(a))
			return -EINVAL;
		memset(&a, 0, sizeof(a));
		ret = mount_space_info(mc, a.spaces, UBTRFS_SPACE_SLOTS, &n);
		if (ret)
			return ret;
		a.total_spaces = (uint64_t)n;
		fuse_reply_ioctl(req, 0, &a, sizeof(a));
		return 0;
	}
	case UBTRFS_IOC_FIEMAP: {
		struct ubtrfs_ioctl_fiemap_args *a;
		uint32_t n = 0;

		if (in_bufsz < sizeof(*a) || out_bufsz < sizeof(*a))
			return -EINVAL;
		a = calloc(1, sizeof(*a));
		if (!a)
			return -ENOMEM;
		memcpy(&a->start, in_buf, sizeof(a->start));
		ret = mount_fiemap(mc, ino, a->start, a->extents, UBTRFS_FIEMAP_EXTENTS, &n);
		a->count = n;
		if (!ret)
			fuse_reply_ioctl(req, 0, a, sizeof(*a));
		free(a);
		return ret;
	}
	case BTRFS_IOC_START_SYNC: {
		/* the kernel starts a commit and says its transaction; ours is done when this returns */
		uint64_t transid;

		if (out_bufsz < sizeof(transid))
			return -EINVAL;
		ret = mount_sync(mc);
		if (ret)
			return ret;
		transid = ub_fs_view_generation(mc->fs);
		fuse_reply_ioctl(req, 0, &transid, sizeof(transid));
		return 0;
	}
	case BTRFS_IOC_WAIT_SYNC:
		fuse_reply_ioctl(req, 0, NULL, 0);
		return 0;
	case BTRFS_IOC_SCRUB:
	case BTRFS_IOC_SCRUB_PROGRESS: {
		struct btrfs_ioctl_scrub_args *a;

		if (in_bufsz < sizeof(*a) || out_bufsz < sizeof(*a))
			return -EINVAL;
		caller_of(req, &k);
		if (cmd == BTRFS_IOC_SCRUB && !k.c.sys_admin)
			return -EPERM;
		a = malloc(sizeof(*a));
		if (!a)
			return -ENOMEM;
		memcpy(a, in_buf, sizeof(*a));
		/* a scrub blocks this thread until its device is done, as the kernel's ioctl */
		ret = cmd == BTRFS_IOC_SCRUB ? mount_scrub_start(mc, a) : mount_scrub_progress(mc, a);
		/* the kernel copies the counts back for a cancelled scrub too */
		if (!ret || ret == -ECANCELED)
			fuse_reply_ioctl(req, ret, a, sizeof(*a));
		free(a);
		return ret == -ECANCELED ? 0 : ret;
	}
	case BTRFS_IOC_SCRUB_CANCEL:
		caller_of(req, &k);
		if (!k.c.sys_admin)
			return -EPERM;
		ret = mount_scrub_cancel(mc);
		if (ret)
			return ret;
		fuse_reply_ioctl(req, 0, NULL, 0);
		return 0;
	case BTRFS_IOC_GET_DEV_STATS: {
		struct btrfs_ioctl_get_dev_stats *a;

		if (in_bufsz < sizeof(*a) || out_bufsz < sizeof(*a))
			return -EINVAL;
		a = malloc(sizeof(*a));
		if (!a)
			return -ENOMEM;
		memcpy(a, in_buf, sizeof(*a));
		caller_of(req, &k);
		ret = (a->flags & BTRFS_DEV_STATS_RESET) && !k.c.sys_admin ? -EPERM : mount_dev_stats(mc, a);
		if (!ret)
			fuse_reply_ioctl(req, 0, a, sizeof(*a));
		free(a);
		return ret;
	}
	case UBTRFS_IOC_SCRUB_LINES: {
		struct ubtrfs_ioctl_scrub_lines *a;

		if (in_bufsz < sizeof(*a) || out_bufsz < sizeof(*a))
			return -EINVAL;
		a = malloc(sizeof(*a));
		if (!a)
			return -ENOMEM;
		memcpy(a, in_buf, sizeof(*a));
		ret = mount_scrub_lines(mc, a);
		if (!ret)
			fuse_reply_ioctl(req, 0, a, sizeof(*a));
		free(a);
		return ret;
	}
	case UBTRFS_IOC_SCRUB_COUNTS: {
		struct ubtrfs_ioctl_scrub_counts a;

		if (in_bufsz < sizeof(a) || out_bufsz < sizeof(a))
			return -EINVAL;
		memcpy(&a, in_buf, sizeof(a));
		ret = mount_scrub_counts(mc, &a);
		if (!ret)
			fuse_reply_ioctl(req, 0, &a, sizeof(a));
		return ret;
	}
	case BTRFS_IOC_BALANCE_V2: {
		struct btrfs_ioctl_balance_args a;

		if (in_bufsz < sizeof(a) || out_bufsz < sizeof(a))
			return -EINVAL;
		memcpy(&a, in_buf, sizeof(a));
		caller_of(req, &k);
		ret = mount_balance(mc, &k.c, &a);
		if (ret)
			return ret;
		fuse_reply_ioctl(req, 0, &a, sizeof(a));
		return 0;
	}
	case BTRFS_IOC_DEV_REPLACE: {
		struct btrfs_ioctl_dev_replace_args *a;

		if (in_bufsz < sizeof(*a) || out_bufsz < sizeof(*a))
			return -EINVAL;
		a = malloc(sizeof(*a));
		if (!a)
			return -ENOMEM;
		memcpy(a, in_buf, sizeof(*a));
		caller_of(req, &k);
		ret = mount_dev_replace(mc, &k.c, a);
		if (!ret)
			fuse_reply_ioctl(req, 0, a, sizeof(*a));
		free(a);
		return ret;
	}
	case BTRFS_IOC_BALANCE_PROGRESS: {
		struct btrfs_ioctl_balance_args *a;

		if (out_bufsz < sizeof(*a))
			return -EINVAL;
		a = malloc(sizeof(*a));
		if (!a)
			return -ENOMEM;
		ret = mount_balance_progress(mc, a);
		if (!ret)
			fuse_reply_ioctl(req, 0, a, sizeof(*a));
		free(a);
		return ret;
	}
	case BTRFS_IOC_BALANCE_CTL: {
		/* the kernel's takes the int as the argument itself; through FUSE it comes by address */
		int ctl;

		if (in_bufsz < sizeof(ctl))
			return -EINVAL;
		memcpy(&ctl, in_buf, sizeof(ctl));
		caller_of(req, &k);
		ret = mount_balance_ctl(mc, &k.c, ctl);
		if (ret)
			return ret;
		fuse_reply_ioctl(req, 0, NULL, 0);
		return 0;
	}
	case BTRFS_IOC_ADD_DEV:
	case BTRFS_IOC_RM_DEV: {
		struct btrfs_ioctl_vol_args va;

		if (in_bufsz < sizeof(va))
			return -EINVAL;
		memcpy(&va, in_buf, sizeof(va));
		va.name[sizeof(va.name) - 1] = 0;
		caller_of(req, &k);
		ret = cmd == BTRFS_IOC_ADD_DEV ? mount_device_add(mc, &k.c, va.name)
					       : mount_device_remove(mc, &k.c, 0, va.name);
		if (ret)
			return ret;
		fuse_reply_ioctl(req, 0, NULL, 0);
		return 0;
	}
	case BTRFS_IOC_RM_DEV_V2: {
		struct btrfs_ioctl_vol_args_v2 va;

		if (in_bufsz < sizeof(va))
			return -EINVAL;
		memcpy(&va, in_buf, sizeof(va));
		va.name[sizeof(va.name) - 1] = 0;
		caller_of(req, &k);
		if (va.flags & BTRFS_DEVICE_SPEC_BY_ID)
			ret = va.devid ? mount_device_remove(mc, &k.c, va.devid, NULL) : -EINVAL;
		else
			ret = mount_device_remove(mc, &k.c, 0, va.name);
		if (ret)
			return ret;
		fuse_reply_ioctl(req, 0, NULL, 0);
		return 0;
	}
	case BTRFS_IOC_RESIZE: {
		struct btrfs_ioctl_vol_args va;

		if (in_bufsz < sizeof(va))
			return -EINVAL;
		memcpy(&va, in_buf, sizeof(va));
		va.name[sizeof(va.name) - 1] = 0;
		caller_of(req, &k);
		ret = mount_resize(mc, &k.c, va.name);
		if (ret)
			return ret;
		fuse_reply_ioctl(req, 0, NULL, 0);
		return 0;
	}
	default:
		return -ENOTTY;
	}
}
