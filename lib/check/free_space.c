/* SPDX-License-Identifier: MIT */
/*
 * The free space tree against the block groups: each block group's recorded
 * free space (extents, or the set bits of bitmaps) must be its length minus
 * the extents the extent tree holds in it. Streamed in key order after the
 * extent tree, into the chunk pass's per-chunk sums.
 */
#include <string.h>

#include "check/chunks.h"

static void where_free(struct ub_chk_problem *p, const struct ub_key *k)
{
	chk_where(p, BTRFS_FREE_SPACE_TREE_OBJECTID, k, k ? k->objectid : 0);
	p->cls = UB_CHK_FREE_SPACE;
	/* every free space tree problem is cured the same way: the tree rewritten from the extent tree */
	p->fix = UB_CHK_FIX_SPACE;
}

/* Free bytes of a bitmap item: one bit per sector, set = free. */
static uint64_t bitmap_free(const uint8_t *d, uint32_t nbits, uint32_t sectorsize)
{
	uint64_t n = 0;

	for (uint32_t i = 0; i < nbits; i++)
		n += (d[i / 8] >> (i % 8)) & 1;
	return n * sectorsize;
}

int chk_free_space_item(struct cstate *s, const struct ub_key *k, const uint8_t *d, uint32_t size)
{
	struct ub_chk_problem p;
	long i = chk_find_chunk(s, k->objectid);

	where_free(&p, k);
	/*
	 * Items below the first chunk are left over, not wrong: mkfs.btrfs leaves
	 * those of its temporary chunks there (btrfs check passes them too).
	 */
	if (!s->nch || k->objectid + k->offset <= s->ch[0].logical)
		return 0;
	if (k->type == BTRFS_FREE_SPACE_INFO_KEY) {
		if (i < 0 || s->ch[i].logical != k->objectid || !s->ch[i].bg || s->ch[i].length != k->offset) {
			chk_report(s->c, &p, "free space info for [%llu, +%llu), which is no block group",
				   (unsigned long long)k->objectid, (unsigned long long)k->offset);
			return 0;
		}
		if (size < sizeof(struct btrfs_free_space_info))
			return 0;
		s->ch[i].free_info = true;
		s->ch[i].free_count = (uint32_t)UB_GET(btrfs_free_space_info, extent_count, d);
		s->ch[i].free_flags = (uint32_t)UB_GET(btrfs_free_space_info, flags, d);
		return 0;
	}
	if (k->type != BTRFS_FREE_SPACE_EXTENT_KEY && k->type != BTRFS_FREE_SPACE_BITMAP_KEY)
		return 0;
	if (k->objectid < s->prev_free_end)
		chk_report(s->c, &p, "free space [%llu, +%llu) overlaps the free space before it (ending at %llu)",
			   (unsigned long long)k->objectid, (unsigned long long)k->offset,
			   (unsigned long long)s->prev_free_end);
	if (k->objectid + k->offset > s->prev_free_end)
		s->prev_free_end = k->objectid + k->offset;
	if (i < 0 || !s->ch[i].bg || k->objectid + k->offset > s->ch[i].logical + s->ch[i].length) {
		chk_report(s->c, &p, "free space [%llu, +%llu) is not inside one block group",
			   (unsigned long long)k->objectid, (unsigned long long)k->offset);
		return 0;
	}
	/*
	 * A block group's free space is kept one way, as its info says: the
	 * kernel loads a group "using bitmaps" by bitmaps only and stops at an
	 * extent item (and the other way round).
	 */
	if (s->ch[i].free_info && !s->ch[i].free_format_told &&
	    !(s->ch[i].free_flags & BTRFS_FREE_SPACE_USING_BITMAPS) != (k->type == BTRFS_FREE_SPACE_EXTENT_KEY)) {
		s->ch[i].free_format_told = true;
		chk_report(s->c, &p, "a free space %s item in block group %llu, whose free space info says it uses %s",
			   k->type == BTRFS_FREE_SPACE_EXTENT_KEY ? "extent" : "bitmap",
			   (unsigned long long)s->ch[i].logical,
			   s->ch[i].free_flags & BTRFS_FREE_SPACE_USING_BITMAPS ? "bitmaps" : "extents");
	}
	if (k->type == BTRFS_FREE_SPACE_EXTENT_KEY) {
		s->ch[i].free_sum += k->offset;
		s->ch[i].free_extents++;
	} else {
		uint64_t nbits = k->offset / s->sectorsize;

		if (nbits > (uint64_t)size * 8) {
			chk_report(s->c, &p, "free space bitmap of %u bytes cannot cover %llu sectors", size,
				   (unsigned long long)nbits);
			return 0;
		}
		s->ch[i].free_sum += bitmap_free(d, (uint32_t)nbits, s->sectorsize);
	}
	return 0;
}

void chk_free_space_check(struct cstate *s)
{
	struct ub_chk_problem p;

	for (size_t i = 0; i < s->nch; i++) {
		struct cinfo *ci = &s->ch[i];
		struct ub_key k = { ci->logical, BTRFS_FREE_SPACE_INFO_KEY, ci->length };

		if (!ci->bg)
			continue;
		where_free(&p, &k);
		if (!ci->free_info) {
			chk_report(s->c, &p, "block group %llu has no free space info", (unsigned long long)ci->logical);
			continue;
		}
		if (ci->free_sum != ci->length - ci->extents_sum)
			chk_report(s->c, &p, "block group %llu: the free space tree records %llu free bytes, its extents leave %llu",
				   (unsigned long long)ci->logical, (unsigned long long)ci->free_sum,
				   (unsigned long long)(ci->length - ci->extents_sum));
		if (!(ci->free_flags & BTRFS_FREE_SPACE_USING_BITMAPS) && ci->free_count != ci->free_extents)
			chk_report(s->c, &p, "block group %llu: free space info counts %u extents, the tree holds %u",
				   (unsigned long long)ci->logical, ci->free_count, ci->free_extents);
	}
}
