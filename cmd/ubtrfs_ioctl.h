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

/*
 * Scrub on a ubtrfs mount: BTRFS_IOC_SCRUB, _PROGRESS and _CANCEL are
 * answered as the kernel answers them; these two give what btrfs's cannot
 * carry. SCRUB_LINES: the problem lines of the mount's scrubs (each as `ubtrfs
 * scrub` prints it, text or JSON) from number `seq` on, as many as fit; the
 * daemon keeps the last UBTRFS_SCRUB_KEEP. SCRUB_COUNTS: a device's counts of
 * the running or last scrub, parity included, in the order of
 * struct ub_scrub_dev_progress's counters (cmd/scrub.c packs and unpacks them).
 */
#define UBTRFS_SCRUB_KEEP 4096
#define UBTRFS_SCRUB_LINES_BYTES (16384 - 64)
struct ubtrfs_ioctl_scrub_lines {
	__u64 seq;      /* in: the first line wanted; out: the next to ask for */
	__u64 dropped;  /* out: lines no longer kept before the first returned */
	__u32 json;     /* in: JSON lines rather than text */
	__u32 len;      /* out: bytes of whole lines in buf */
	__u64 unused[2];
	char buf[UBTRFS_SCRUB_LINES_BYTES];
};
#define UBTRFS_IOC_SCRUB_LINES _IOWR(BTRFS_IOCTL_MAGIC, 0xe2, struct ubtrfs_ioctl_scrub_lines)

#define UBTRFS_SCRUB_COUNTS 32
#define UBTRFS_SCRUB_RUNNING (1ULL << 0)
#define UBTRFS_SCRUB_FINISHED (1ULL << 1)
#define UBTRFS_SCRUB_CANCELED (1ULL << 2)
struct ubtrfs_ioctl_scrub_counts {
	__u64 devid;    /* in */
	__u64 flags;    /* out: UBTRFS_SCRUB_* */
	__u64 v[UBTRFS_SCRUB_COUNTS];
};
#define UBTRFS_IOC_SCRUB_COUNTS _IOWR(BTRFS_IOCTL_MAGIC, 0xe3, struct ubtrfs_ioctl_scrub_counts)

#endif
