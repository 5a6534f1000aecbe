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

int chk_csum_begin(struct cstate *s, bool with_extents)
{
	s->ext_path = NULL;
	s->ext_done = false;
	s->ext_at_item = false;
	s->ext_start = s->ext_end = 0;
	return with_extents ? ub_path_new(&s->ext_path) : 0;
}

void chk_csum_end(struct cstate *s)
{
	ub_path_free(s->ext_path);
	s->ext_path = NULL;
}

/*
 * Move the extent cursor to its next data extent: true when there is one.
 * The extent tree was read whole before: an error now only stops the
 * comparison (the block's own problem was reported by the extent pass).
 */
static bool next_data_extent(struct cstate *s)
{
	int ret;

	if (s->ext_done)
		return false;
	chk_capture(s->c);
	for (;;) {
		struct ub_key k;
		const uint8_t *d;
		uint32_t size;

		if (!s->ext_at_item) {
			struct ub_key from = { 0, 0, 0 };

			/* the path refers to its root: it lives as long as the path */
			ret = ub_fs_tree_root(s->fs, BTRFS_EXTENT_TREE_OBJECTID, &s->ext_root);
			if (!ret)
				ret = ub_tree_search(ub_fs_trees(s->fs), &s->ext_root, &from, s->ext_path);
			/* 1 from the search: at the first item after `from`; 2: there is none */
			if (ret >= 0)
				ret = ret == 2 || !s->ext_path->nodes[0] ? 1 : 0;
			s->ext_at_item = true;
		} else {
			ret = ub_tree_next(s->ext_path);
		}
		if (ret < 0 || ret == 1)
			break;
		ub_path_key(s->ext_path, &k);
		d = ub_path_data(s->ext_path, &size);
		if (k.type == BTRFS_EXTENT_ITEM_KEY && size >= sizeof(struct btrfs_extent_item) &&
		    (UB_GET(btrfs_extent_item, flags, d) & BTRFS_EXTENT_FLAG_DATA) && k.objectid + k.offset > k.objectid) {
			s->ext_start = k.objectid;
			s->ext_end = k.objectid + k.offset;
			chk_captured(s->c);
			return true;
		}
	}
	chk_captured(s->c);
	s->ext_done = true;
	return false;
}

/* The first byte of [a, e) that no data extent holds, or e. */
static uint64_t first_uncovered(struct cstate *s, uint64_t a, uint64_t e)
{
	while (a < e) {
		while (s->ext_end <= a)
			if (!next_data_extent(s))
				return a;
		if (s->ext_start > a)
			return a;
		a = s->ext_end;
	}
	return e;
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
	if (s->ext_path) {
		uint64_t at = first_uncovered(s, k->offset, end);

		if (at < end)
			chk_report(s->c, &p, "checksums of [%llu, +%llu) cover %llu, which no data extent holds",
				   (unsigned long long)k->offset, (unsigned long long)len, (unsigned long long)at);
	}
	return 0;
}
