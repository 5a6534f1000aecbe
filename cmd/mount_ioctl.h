/* SPDX-License-Identifier: MIT */
/* The mount's ioctl operation (mount_ioctl.c), for the FUSE operations table of mount_ops.c. */
#ifndef UBTRFS_CMD_MOUNT_IOCTL_H
#define UBTRFS_CMD_MOUNT_IOCTL_H

#include <fuse_lowlevel.h>

void mount_op_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void *arg, struct fuse_file_info *fi,
		    unsigned flags, const void *in_buf, size_t in_bufsz, size_t out_bufsz);

#endif
