/* SPDX-License-Identifier: MIT */
/*
 * Where a new chunk goes, decided as the kernel's chunk allocator decides it
 * (btrfs_create_chunk: gather the devices' free holes, sort them, pick the
 * stripe count and size per profile). Pure: no I/O, no allocation, so mkfs
 * and the write engine (adding a chunk when space runs out) share one answer
 * and a unit test can check it against the rules.
 */
#ifndef UBTRFS_ALLOC_CHUNK_LAYOUT_H
#define UBTRFS_ALLOC_CHUNK_LAYOUT_H

#include <stdint.h>

/* the chunk item's stripe array lives in the 2 KiB sys chunk array or a leaf; 64 matches the volume layer */
#define UB_MAX_STRIPES 64
/* the first MiB of every device is never handed out (boot loaders, the primary superblock) */
#define UB_DEV_RESERVED (1024ULL * 1024)
/* most stripes a SYSTEM chunk may have so that its item fits the superblock's sys chunk array */
#define UB_MAX_DEVS_SYS_CHUNK 61

struct ub_dev_space {
	uint64_t devid;
	uint64_t total_bytes;
	/* free holes, sorted by start, not overlapping; nholes entries */
	uint64_t *hole_start, *hole_len;
	int nholes;
};

struct ub_chunk_plan {
	uint64_t type;        /* BTRFS_BLOCK_GROUP_* (kind | profile) */
	uint64_t length;      /* logical */
	uint64_t stripe_size; /* per stripe, physical */
	int num_stripes, sub_stripes;
	struct {
		uint64_t devid, physical;
	} stripes[UB_MAX_STRIPES];
};

/* The per-profile rules the allocator follows (the kernel's btrfs_raid_array). */
struct ub_chunk_rules {
	int dev_stripes;    /* stripes per device (DUP: 2) */
	int devs_min;       /* fewest devices that can hold one chunk */
	int devs_max;       /* 0: as many as there are */
	int devs_increment; /* device count is rounded down to a multiple */
	int ncopies, nparity, sub_stripes;
};
/* Rules of the profile in `type`; -EINVAL for several profile bits at once. */
int ub_chunk_rules_of(uint64_t type, struct ub_chunk_rules *out);

/*
 * Place a chunk of `type` on the devices' free holes. `max_logical_hint`
 * (0: none) caps the logical length below what the kernel would choose
 * (mkfs's small first system chunk). total_rw_bytes is the sum of the
 * devices' total_bytes. -ENOSPC if the profile cannot be placed; -EINVAL for a
 * bad type or inconsistent holes.
 */
int ub_chunk_layout(const struct ub_dev_space *devs, int ndevs, uint64_t type, uint64_t max_logical_hint,
		    struct ub_chunk_plan *out);

/*
 * Take the plan's device extents out of the holes (each must start or end a
 * hole, as ub_chunk_layout places them). -EINVAL if one is not free.
 */
int ub_chunk_plan_apply(struct ub_dev_space *devs, int ndevs, const struct ub_chunk_plan *plan);

#endif
