/* SPDX-License-Identifier: MIT */
/*
 * Finding the devices of btrfs filesystems among the system's block devices
 * (libblkid names the candidates; each superblock is then checked as an open
 * checks it, so blkid's word alone never makes a device part of a filesystem).
 */
#ifndef UBTRFS_SCAN_H
#define UBTRFS_SCAN_H

#include <stdint.h>
#include "ubtrfs/format.h"
#include "ubtrfs/log.h"
#include "ubtrfs/api.h"

UB_API_BEGIN

struct ub_scan_dev {
	char *path;
	uint64_t devid;
	uint64_t generation;  /* of its superblock */
	uint64_t total_bytes; /* its own dev item */
};

struct ub_scan_fs {
	uint8_t fsid[UB_FSID_SIZE];
	char label[UB_LABEL_SIZE + 1];
	uint64_t generation;  /* the newest superblock's */
	uint64_t num_devices; /* the newest superblock's */
	uint64_t bytes_used;  /* the newest superblock's */
	struct ub_scan_dev *devs; /* one per devid (the newest generation wins), by devid */
	int ndevs;
};

struct ub_scan {
	struct ub_scan_fs *fs;
	int nfs;
};

/*
 * Every btrfs filesystem on the block devices, opened read-only. With `fsid`
 * set, only devices whose primary superblock names that fsid are read. A
 * device blkid calls btrfs whose superblock fails the checks, or a stale copy
 * of a devid already found at a newer generation, is left out with a warning.
 */
int ub_scan_block_devices(const uint8_t *fsid, const struct ub_log *log, struct ub_scan **out);
void ub_scan_free(struct ub_scan *scan);

/* One device's filesystem: fsid, its own devid and how many devices the filesystem has (0 or -errno). */
int ub_scan_identify(const char *path, const struct ub_log *log, uint8_t *fsid, uint64_t *devid, uint64_t *num_devices);

UB_API_END

#endif
