/* SPDX-License-Identifier: MIT */
/*
 * The checksum tree's layout: each EXTENT_CSUM item holds whole checksums of
 * whole sectors, lies inside data chunks and overlaps no other item.
 * Streamed in key order after the chunk tree, against the chunk pass's map.
 */
#include "check/chunks.h"

static void where_csum(struct ub_chk_problem *p, const struct ub_key *k)
{
	chk_where(p, BTRFS_CSUM_TREE_OBJECTID, k, k->offset);
	p->cls = UB_CHK_CSUM;
}

int chk_csum_item(struct cstate *s, const struct ub_key *k, const uint8_t *d, uint32_t size)
{
	struct ub_chk_problem p;
	uint64_t len, end;
	long i;

	(void)d;
	if (k->objectid != BTRFS_EXTENT_CSUM_OBJECTID || k->type != BTRFS_EXTENT_CSUM_KEY || !s->csum_size)
		return 0;
	where_csum(&p, k);
	s->c->sum.csum_items++;
	if (!size || size % s->csum_size) {
		chk_report(s->c, &p, "checksum item at %llu holds %u bytes, not a whole number of %u-byte checksums",
			   (unsigned long long)k->offset, size, s->csum_size);
		return 0;
	}
	if (k->offset % s->sectorsize)
		chk_report(s->c, &p, "checksum item at %llu does not start on a sector", (unsigned long long)k->offset);
	len = (uint64_t)(size / s->csum_size) * s->sectorsize;
	end = k->offset + len;
	if (end < k->offset) {
		chk_report(s->c, &p, "checksums at %llu run past the end of the address space",
			   (unsigned long long)k->offset);
		return 0;
	}
	s->c->sum.csum_bytes += len;
	if (k->offset < s->prev_csum_end)
		chk_report(s->c, &p, "checksums of [%llu, +%llu) overlap the item before them (ending at %llu)",
			   (unsigned long long)k->offset, (unsigned long long)len,
			   (unsigned long long)s->prev_csum_end);
	if (end > s->prev_csum_end)
		s->prev_csum_end = end;
	/* one item may run on into the next chunk when both hold data (mkfs.btrfs --rootdir does so) */
	for (uint64_t at = k->offset; at < end;) {
		i = chk_find_chunk(s, at);
		if (i >= 0 && (s->ch[i].type & BTRFS_BLOCK_GROUP_DATA) && s->ch[i].logical + s->ch[i].length > at) {
			at = s->ch[i].logical + s->ch[i].length;
		} else {
			chk_report(s->c, &p, "checksums of [%llu, +%llu) cover %llu, which no data chunk holds",
				   (unsigned long long)k->offset, (unsigned long long)len, (unsigned long long)at);
			break;
		}
	}
	return 0;
}
