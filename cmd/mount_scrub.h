/* SPDX-License-Identifier: MIT */
/* Scrub on a ubtrfs mount (mount_scrub.c): the daemon's side of the scrub ioctls. */
#ifndef UBTRFS_CMD_MOUNT_SCRUB_H
#define UBTRFS_CMD_MOUNT_SCRUB_H

#include <linux/btrfs.h>
#include "ubtrfs_ioctl.h"

struct mount_ctx;

/* Before the FUSE session serves (mc->scrubs), and after it ended (every scrub cancelled and joined). */
int mount_scrub_init(struct mount_ctx *mc);
void mount_scrub_stop(struct mount_ctx *mc);
/* BTRFS_IOC_SCRUB: blocks until device a->devid is scrubbed; a->progress filled. 0, -ECANCELED, -EINPROGRESS... */
int mount_scrub_start(struct mount_ctx *mc, struct btrfs_ioctl_scrub_args *a);
/* BTRFS_IOC_SCRUB_PROGRESS: -ENOTCONN when that device is not being scrubbed */
int mount_scrub_progress(struct mount_ctx *mc, struct btrfs_ioctl_scrub_args *a);
/* BTRFS_IOC_SCRUB_CANCEL: every running scrub; -ENOTCONN when none runs */
int mount_scrub_cancel(struct mount_ctx *mc);
int mount_scrub_lines(struct mount_ctx *mc, struct ubtrfs_ioctl_scrub_lines *a);
int mount_scrub_counts(struct mount_ctx *mc, struct ubtrfs_ioctl_scrub_counts *a);
/* BTRFS_IOC_GET_DEV_STATS (with BTRFS_DEV_STATS_RESET) */
int mount_dev_stats(struct mount_ctx *mc, struct btrfs_ioctl_get_dev_stats *a);

#endif
