/* SPDX-License-Identifier: MIT */
/*
 * The btrfs ioctls of the mount without FUSE (mount_subvol.c): each returns
 * 0 or the errno the kernel's btrfs gives for the same call. Node ids are the
 * mount map's; `dir` is the directory node the ioctl was made on.
 */
#ifndef UBTRFS_CMD_MOUNT_SUBVOL_H
#define UBTRFS_CMD_MOUNT_SUBVOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <linux/btrfs.h>
#include "mount.h"

/* Who makes an ioctl, for the kernel's permission rules (capabilities as the caller's process has them). */
struct mount_ioctl_caller {
	uint32_t uid, gid;
	const uint32_t *groups; /* supplementary groups */
	int ngroups;
	bool sys_admin, dac_override, fowner;
};

/* BTRFS_IOC_SUBVOL_CREATE(_V2): *new_id the subvolume made in `dir` under `name`. */
int mount_subvol_create(struct mount_ctx *mc, const struct mount_ioctl_caller *c, uint64_t dir, const char *name,
			uint64_t *new_id);
/* BTRFS_IOC_SNAP_CREATE(_V2): a snapshot of the subvolume whose top is (src_subvol, src_ino). */
int mount_snapshot(struct mount_ctx *mc, const struct mount_ioctl_caller *c, uint64_t src_subvol, uint64_t src_ino,
		   uint64_t dir, const char *name, bool readonly, uint64_t *new_id);
/* The (subvolume, inode) of a file of this mount from its st_ino (mount_st_ino's inverse). */
void mount_ino_of(const struct mount_ctx *mc, uint64_t st_ino, uint64_t *subvol, uint64_t *ino);
/*
 * BTRFS_IOC_SNAP_DESTROY(_V2) by name in `dir`: *gone the subvolume deleted.
 * The mount's own subvolume is -EBUSY (the kernel keeps a deleted mounted
 * subvolume until the unmount; this mount cannot).
 */
int mount_subvol_destroy(struct mount_ctx *mc, const struct mount_ioctl_caller *c, uint64_t dir, const char *name,
			 uint64_t *gone);
/* The same by id: where its name was (parent subvolume, directory, name[UB_NAME_LEN + 1]). */
int mount_subvol_destroy_id(struct mount_ctx *mc, const struct mount_ioctl_caller *c, uint64_t id,
			    uint64_t *parent, uint64_t *dirid, char *name);
/* BTRFS_IOC_DEFAULT_SUBVOL */
int mount_set_default_subvol(struct mount_ctx *mc, const struct mount_ioctl_caller *c, uint64_t id);
/* BTRFS_IOC_SUBVOL_SETFLAGS on node (BTRFS_SUBVOL_RDONLY) */
int mount_subvol_setflags(struct mount_ctx *mc, const struct mount_ioctl_caller *c, uint64_t node, uint64_t flags);
/*
 * BTRFS_IOC_BALANCE_V2: the balance asked (or, with BTRFS_BALANCE_RESUME, the
 * paused one), done before the reply (its counts in a->stat); paused or
 * cancelled meanwhile: 0 with BTRFS_BALANCE_STATE_PAUSE_REQ/CANCEL_REQ in a->state
 */
struct btrfs_ioctl_balance_args;
int mount_balance(struct mount_ctx *mc, const struct mount_ioctl_caller *c, struct btrfs_ioctl_balance_args *a);
/*
 * BTRFS_IOC_DEV_REPLACE: start (the whole copy before the reply, as the
 * kernel's ioctl), status (this mount's last replace), cancel (none running:
 * NOT_STARTED; a running copy cannot be stopped: EBUSY)
 */
struct btrfs_ioctl_dev_replace_args;
int mount_dev_replace(struct mount_ctx *mc, const struct mount_ioctl_caller *c, struct btrfs_ioctl_dev_replace_args *a);
/*
 * At mount: a paused balance (its item on the disk) resumed by a thread of
 * its own; at the unmount that balance is paused and the thread joined. Both
 * do nothing when there is no such balance.
 */
void mount_balance_resume_start(struct mount_ctx *mc);
void mount_balance_resume_stop(struct mount_ctx *mc);
/* BTRFS_IOC_BALANCE_CTL: pause or cancel the running balance (waits for it to stop), or cancel a paused one */
int mount_balance_ctl(struct mount_ctx *mc, const struct mount_ioctl_caller *c, int cmd);
/* BTRFS_IOC_BALANCE_PROGRESS: the running balance's state and counts, a paused one's; -ENOTCONN none */
int mount_balance_progress(struct mount_ctx *mc, struct btrfs_ioctl_balance_args *a);
/* BTRFS_IOC_RESIZE: "[devid:][+|-]size[kmgtpe]|[devid:]max" */
int mount_resize(struct mount_ctx *mc, const struct mount_ioctl_caller *c, const char *spec);
/* BTRFS_IOC_ADD_DEV: the device at `path` added */
int mount_device_add(struct mount_ctx *mc, const struct mount_ioctl_caller *c, const char *path);
/* BTRFS_IOC_RM_DEV(_V2): by devid, or by `name` (a device path, or "missing") when name is not NULL */
int mount_device_remove(struct mount_ctx *mc, const struct mount_ioctl_caller *c, uint64_t devid, const char *name);
/* BTRFS_IOC_SET_FSLABEL / GET_FSLABEL (label[size], NUL-terminated) */
int mount_set_label(struct mount_ctx *mc, const struct mount_ioctl_caller *c, const char *label, size_t size);
int mount_get_label(struct mount_ctx *mc, char *label, size_t size);
/* The subvolume and inode of node */
int mount_subvol_of(struct mount_ctx *mc, uint64_t node, uint64_t *subvol, uint64_t *ino);
/* BTRFS_IOC_INO_LOOKUP: *treeid 0 becomes node's subvolume; out: "a/b/" */
int mount_ino_lookup(struct mount_ctx *mc, const struct mount_ioctl_caller *c, uint64_t node, uint64_t *treeid,
		     uint64_t objectid, char *out, size_t size);
/* BTRFS_IOC_TREE_SEARCH, in place */
int mount_tree_search(struct mount_ctx *mc, const struct mount_ioctl_caller *c, uint64_t node,
		      struct btrfs_ioctl_search_args *a);
int mount_get_subvol_info(struct mount_ctx *mc, uint64_t node, struct btrfs_ioctl_get_subvol_info_args *a);
int mount_fs_info(struct mount_ctx *mc, struct btrfs_ioctl_fs_info_args *a);
int mount_dev_info(struct mount_ctx *mc, struct btrfs_ioctl_dev_info_args *a);
/* BTRFS_IOC_SPACE_INFO: up to max entries into out, *n how many there are */
int mount_space_info(struct mount_ctx *mc, struct btrfs_ioctl_space_info *out, int max, int *n);

/* UBTRFS_IOC_FIEMAP: the extents of file node from `start` on, at most max (ub_file_fiemap) */
struct ubtrfs_fiemap_extent;
int mount_fiemap(struct mount_ctx *mc, uint64_t node, uint64_t start, struct ubtrfs_fiemap_extent *out, uint32_t max,
		 uint32_t *count);

#endif
