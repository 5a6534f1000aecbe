/* SPDX-License-Identifier: MIT */
/* The profile table: every rule that differs between profiles lives here, not in if-chains. */
#include <strings.h>
#include "volume_internal.h"

/*
 * One row per profile. The layout is the family's code (lib/volume/copies.c:
 * whole copies, RAID0 and RAID10 striping; raid56.c: parity); a new profile of
 * an existing family is one more row. The rows are in the order the kernel
 * prefers a profile for new data chunks when several are present (the most
 * redundant first).
 */
#define R56 BTRFS_FEATURE_INCOMPAT_RAID56
#define C34 BTRFS_FEATURE_INCOMPAT_RAID1C34
static const struct ub_profile profiles[] = {
	/*
	 * flag, name, opt, ncopies, nparity, sub_stripes, devs_min, tolerated_failures,
	 * dev_stripes, devs_max, devs_increment, striped, incompat, raid_index, statfs_stripes, mkfs_devs_min, layout
	 */
	{ BTRFS_BLOCK_GROUP_RAID1C4, "RAID1C4", "raid1c4", 4, 0, 1, 4, 3, 1, 4, 4, false, C34, 8, 4, 4, &ub_layout_mirror },
	{ BTRFS_BLOCK_GROUP_RAID6, "RAID6", "raid6", 1, 2, 1, 3, 2, 1, 0, 1, true, R56, 6, 1, 3, &ub_layout_parity },
	{ BTRFS_BLOCK_GROUP_RAID1C3, "RAID1C3", "raid1c3", 3, 0, 1, 3, 2, 1, 3, 3, false, C34, 7, 3, 3, &ub_layout_mirror },
	{ BTRFS_BLOCK_GROUP_RAID5, "RAID5", "raid5", 1, 1, 1, 2, 1, 1, 0, 1, true, R56, 5, 1, 2, &ub_layout_parity },
	{ BTRFS_BLOCK_GROUP_RAID10, "RAID10", "raid10", 2, 0, 2, 2, 1, 1, 0, 2, true, 0, 0, 4, 4, &ub_layout_raid10 },
	{ BTRFS_BLOCK_GROUP_RAID1, "RAID1", "raid1", 2, 0, 1, 2, 1, 1, 2, 2, false, 0, 1, 2, 2, &ub_layout_mirror },
	{ BTRFS_BLOCK_GROUP_DUP, "DUP", "dup", 2, 0, 1, 1, 0, 2, 1, 1, false, 0, 2, 1, 1, &ub_layout_mirror },
	{ BTRFS_BLOCK_GROUP_RAID0, "RAID0", "raid0", 1, 0, 1, 1, 0, 1, 0, 1, true, 0, 3, 0, 1, &ub_layout_raid0 },
	{ 0, "single", "single", 1, 0, 1, 1, 0, 1, 1, 1, false, 0, 4, 1, 1, &ub_layout_mirror },
};

const struct ub_profile *ub_profile_at(int i)
{
	return i >= 0 && i < (int)(sizeof(profiles) / sizeof(profiles[0])) ? &profiles[i] : NULL;
}

int ub_profile_count(void)
{
	return (int)(sizeof(profiles) / sizeof(profiles[0]));
}

const struct ub_profile *ub_profile_named(const char *opt)
{
	for (size_t i = 0; i < sizeof(profiles) / sizeof(profiles[0]); i++)
		if (!strcasecmp(profiles[i].opt, opt))
			return &profiles[i];
	return NULL;
}

int ub_profile_data_stripes(const struct ub_profile *p, int num_stripes, int sub_stripes)
{
	if (!p || !p->striped)
		return 1;
	if (p->nparity)
		return num_stripes - p->nparity;
	return sub_stripes > 0 ? num_stripes / sub_stripes : 0;
}

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
