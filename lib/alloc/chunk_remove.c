// SPDX-License-Identifier: MIT
/*
 * Which block group the cleaner may remove (the removal
 * itself, ub_chunk_remove, is not written yet).
 *
 * The kernel's btrfs_delete_unused_bgs rule: nothing used, reserved or pinned
 * in the group (superblock mirror stripes do not count: they are not extents),
 * and it is not the last group of its type and profile, so a filesystem never
 * loses the chunk every write of that kind would otherwise have to re-add.
 */
#include "alloc_internal.h"
#include "chunk_alloc.h"

#include <errno.h>

#define TYPE_BITS \
	(BTRFS_BLOCK_GROUP_DATA | BTRFS_BLOCK_GROUP_METADATA | BTRFS_BLOCK_GROUP_SYSTEM | BTRFS_BLOCK_GROUP_PROFILE_MASK)

static int same_type_count(const struct ub_alloc *a, uint64_t flags)
{
	struct ub_bg_info bi;
	uint64_t pos = 0;
	int n = 0;

	while (ub_alloc_next_bg(a, pos, &bi) == 0) {
		pos = bi.start + bi.length;
		n += (bi.flags & TYPE_BITS) == (flags & TYPE_BITS);
	}
	return n;
}

int ub_chunk_next_removable(const struct ub_alloc *a, uint64_t pos, uint64_t *start)
{
	struct ub_bg_info bi;

	if (!a || !start)
		return -EINVAL;
	while (ub_alloc_next_bg(a, pos, &bi) == 0) {
		pos = bi.start + bi.length;
		if (bi.used || bi.reserved || bi.pinned)
			continue;
		if (same_type_count(a, bi.flags) < 2)
			continue;
		*start = bi.start;
		return 0;
	}
	return 1;
}
