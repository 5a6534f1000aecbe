/* SPDX-License-Identifier: MIT */
/*
 * The ioctls the ubtrfs mount answers besides btrfs's own: the same
 * questions where btrfs's ioctl has a variable-size argument, which a FUSE
 * filesystem cannot answer (FUSE copies exactly the size the ioctl number
 * encodes, and follows no pointer). Sent only to a ubtrfs mount (a FUSE
 * filesystem that answered BTRFS_IOC_FS_INFO); numbers far above btrfs's.
 */
#ifndef UBTRFS_CMD_UBTRFS_IOCTL_H
#define UBTRFS_CMD_UBTRFS_IOCTL_H

#include <linux/btrfs.h>
#include <linux/types.h>
#include <sys/ioctl.h>

/* BTRFS_IOC_SPACE_INFO with room for every type and profile (4 types x 9 profiles + the global reserve) */
#define UBTRFS_SPACE_SLOTS 40
struct ubtrfs_ioctl_space_args {
	__u64 total_spaces; /* out: entries there are (more than UBTRFS_SPACE_SLOTS: only that many filled) */
	__u64 unused;
	struct btrfs_ioctl_space_info spaces[UBTRFS_SPACE_SLOTS];
};
#define UBTRFS_IOC_SPACE_INFO _IOR(BTRFS_IOCTL_MAGIC, 0xe0, struct ubtrfs_ioctl_space_args)

/*
 * FS_IOC_FIEMAP (which FUSE does not pass) for `btrfs filesystem du`: the
 * file's extents from file offset `start` on, at most UBTRFS_FIEMAP_EXTENTS,
 * as the kernel's btrfs reports them (struct fiemap_extent, flags LAST,
 * ENCODED, UNWRITTEN, DATA_INLINE, SHARED).
 */
#define UBTRFS_FIEMAP_EXTENTS 64
struct ubtrfs_fiemap_extent {
	__u64 logical, physical, length;
	__u32 flags;
	__u32 unused;
};
struct ubtrfs_ioctl_fiemap_args {
	__u64 start;         /* in */
	__u32 count;         /* out */
	__u32 unused;
	struct ubtrfs_fiemap_extent extents[UBTRFS_FIEMAP_EXTENTS];
};
#define UBTRFS_IOC_FIEMAP _IOWR(BTRFS_IOCTL_MAGIC, 0xe1, struct ubtrfs_ioctl_fiemap_args)

#endif
