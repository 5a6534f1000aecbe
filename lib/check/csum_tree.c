/* SPDX-License-Identifier: MIT */
/*
 * The checksum tree's layout: each EXTENT_CSUM item holds whole checksums of
 * whole sectors, lies inside data chunks and overlaps no other item.
 * Streamed in key order after the chunk tree, against the chunk pass's map.
 */
#include <stdlib.h>
#include <string.h>

#include "check/chunks.h"
#include "ubtrfs/volume.h"

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
	free(s->data_buf);
	s->data_buf = NULL;
}

/* Bytes one read takes at most: large sequential reads, whole sectors. */
#define DATA_READ_MAX (4u << 20)

/* Copy `mirror` of [at, +n) (one chunk) against the sums `sums` (one per sector). */
static void verify_copy(struct cstate *s, const struct ub_key *k, uint64_t at, uint64_t n, int mirror,
			const uint8_t *sums)
{
	struct ub_volume *vol = ub_fs_volume(s->fs);
	struct ub_chk_problem p;
	uint8_t out[UB_CSUM_SIZE_MAX];
	uint64_t bad = 0, first = 0;
	char where[256];
	const char *why;
	int ret;

	chk_capture(s->c);
	ret = ub_volume_read(vol, at, n, mirror, s->data_buf);
	why = chk_captured(s->c);
	where_csum(&p, k);
	if (ret) {
		ub_volume_describe_copy(vol, at, mirror, where, sizeof(where));
		p.logical = at;
		ub_volume_map(vol, at, mirror, &p.devid, &p.physical, &p.path);
		/* a scrub rewrites it when another copy is good */
		p.fix = UB_CHK_FIX_COPY;
		chk_report(s->c, &p, "data [%llu, +%llu): %s cannot be read: %s", (unsigned long long)at,
			   (unsigned long long)n, where, *why ? why : strerror(-ret));
		return;
	}
	for (uint64_t off = 0; off < n; off += s->sectorsize) {
		if (ub_csum(s->csum_type, s->data_buf + off, s->sectorsize, out) ||
		    !memcmp(out, sums + off / s->sectorsize * s->csum_size, s->csum_size))
			continue;
		if (!bad++)
			first = at + off;
	}
	if (!bad)
		return;
	p.logical = first;
	ub_volume_map(vol, first, mirror, &p.devid, &p.physical, &p.path);
	ub_volume_describe_copy(vol, first, mirror, where, sizeof(where));
	p.fix = UB_CHK_FIX_COPY;
	chk_report(s->c, &p, "data checksum mismatch at %llu on %s (%llu of the sectors in [%llu, +%llu))",
		   (unsigned long long)first, where, (unsigned long long)bad, (unsigned long long)at,
		   (unsigned long long)n);
}

/* Every copy of the data an item's checksums cover ([start, end), inside data chunks). */
static void verify_data(struct cstate *s, const struct ub_key *k, const uint8_t *d, uint64_t start, uint64_t end)
{
	struct ub_volume *vol = ub_fs_volume(s->fs);

	if (!s->data_buf && !(s->data_buf = malloc(DATA_READ_MAX)))
		return;
	for (uint64_t at = start; at < end;) {
		long i = chk_find_chunk(s, at);
		uint64_t n = end - at, cend;
		int copies;

		if (i < 0)
			return;
		cend = s->ch[i].logical + s->ch[i].length;
		if (n > cend - at)
			n = cend - at;
		if (n > DATA_READ_MAX)
			n = DATA_READ_MAX;
		copies = ub_volume_num_copies(vol, at);
		for (int m = 1; m <= copies; m++)
			verify_copy(s, k, at, n, m, d + (at - start) / s->sectorsize * s->csum_size);
		at += n;
		s->data_done += n;
		chk_progress(s->c, "data", s->data_done, 0);
	}
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
	if (s->c->opts.check_data_csum && !(k->offset % s->sectorsize)) {
		bool in_data = true;

		for (uint64_t at = k->offset; at < end && in_data;) {
			i = chk_find_chunk(s, at);
			in_data = i >= 0 && (s->ch[i].type & BTRFS_BLOCK_GROUP_DATA) && s->ch[i].logical + s->ch[i].length > at;
			if (in_data)
				at = s->ch[i].logical + s->ch[i].length;
		}
		if (in_data)
			verify_data(s, k, d, k->offset, end);
	}
	if (s->ext_path) {
		uint64_t at = first_uncovered(s, k->offset, end);

		if (at < end)
			chk_report(s->c, &p, "checksums of [%llu, +%llu) cover %llu, which no data extent holds",
				   (unsigned long long)k->offset, (unsigned long long)len, (unsigned long long)at);
	}
	return 0;
}
