/* SPDX-License-Identifier: MIT */
/* The profile table: every rule that differs between profiles lives here, not in if-chains. */
#include "volume_internal.h"

/*
 * One row per profile. The layout is the family's code (lib/volume/copies.c:
 * whole copies, RAID0 and RAID10 striping; raid56.c: parity); a new profile of
 * an existing family is one more row.
 */
static const struct ub_profile profiles[] = {
	/* flag, name, ncopies, nparity, sub_stripes, devs_min, tolerated_failures, layout */
	{ 0, "single", 1, 0, 1, 1, 0, &ub_layout_mirror },
	{ BTRFS_BLOCK_GROUP_DUP, "DUP", 2, 0, 1, 1, 0, &ub_layout_mirror },
	{ BTRFS_BLOCK_GROUP_RAID0, "RAID0", 1, 0, 1, 1, 0, &ub_layout_raid0 },
	{ BTRFS_BLOCK_GROUP_RAID1, "RAID1", 2, 0, 1, 2, 1, &ub_layout_mirror },
	{ BTRFS_BLOCK_GROUP_RAID1C3, "RAID1C3", 3, 0, 1, 3, 2, &ub_layout_mirror },
	{ BTRFS_BLOCK_GROUP_RAID1C4, "RAID1C4", 4, 0, 1, 4, 3, &ub_layout_mirror },
	{ BTRFS_BLOCK_GROUP_RAID10, "RAID10", 2, 0, 2, 2, 1, &ub_layout_raid10 },
	{ BTRFS_BLOCK_GROUP_RAID5, "RAID5", 1, 1, 1, 2, 1, &ub_layout_parity },
	{ BTRFS_BLOCK_GROUP_RAID6, "RAID6", 1, 2, 1, 3, 2, &ub_layout_parity },
};

const struct ub_profile *ub_profile_of(uint64_t type)
{
	uint64_t bits = type & BTRFS_BLOCK_GROUP_PROFILE_MASK;

	for (size_t i = 0; i < sizeof(profiles) / sizeof(profiles[0]); i++)
		if (profiles[i].flag == bits)
			return &profiles[i];
	return NULL; /* several profile bits at once: corrupt */
}

bool ub_profile_stripes_valid(uint64_t type, unsigned num, unsigned sub)
{
	const struct ub_profile *p = ub_profile_of(type);

	return p && num > 0 && p->layout->stripes_valid(p, num, sub);
}
