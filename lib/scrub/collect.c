/* SPDX-License-Identifier: MIT */
/*
 * What the pinned commit says lies in a logical range: the extent items that
 * overlap it (tree blocks with their generation and level, data extents) and
 * the checksums of its sectors. Scrub reads nothing else: a range no extent
 * item covers is free space, whatever bytes it holds.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "scrub/scrub_priv.h"

int sx_reserve(void **v, size_t *cap, size_t n, size_t size)
{
	size_t want = *cap ? *cap : 64;
	void *nv;

	if (n <= *cap)
		return 0;
	while (want < n)
		want *= 2;
	nv = realloc(*v, want * size);
	if (!nv)
		return -ENOMEM;
	*v = nv;
	*cap = want;
	return 0;
}

static int aligned_reserve(uint8_t **p, size_t *cap, size_t n)
{
	uint8_t *b;

	if (n <= *cap)
		return 0;
	n = (n + 4095) & ~(size_t)4095;
	b = aligned_alloc(64, n);
	if (!b)
		return -ENOMEM;
	free(*p);
	*p = b;
	*cap = n;
	return 0;
}

int sx_buf(struct sx_thread *t, size_t n)
{
	return aligned_reserve(&t->buf, &t->buf_cap, n);
}

int sx_tmp(struct sx_thread *t, size_t n)
{
	return aligned_reserve(&t->tmp, &t->tmp_cap, n);
}

/* The inline refs after an extent item's header (and tree block info): the first TREE_BLOCK_REF's root. */
static uint64_t first_tree_ref(const uint8_t *d, uint32_t size, uint32_t at)
{
	while (at < size) {
		uint8_t type = d[at];

		if (type == BTRFS_TREE_BLOCK_REF_KEY)
			return at + 9 <= size ? ub_le64(d + at + 1) : 0;
		if (type == BTRFS_SHARED_BLOCK_REF_KEY || type == BTRFS_EXTENT_OWNER_REF_KEY)
			at += 9;
		else
			return 0; /* data refs or something unknown: no tree to name */
	}
	return 0;
}

/* An EXTENT_ITEM or METADATA_ITEM into x; false when the item is too short to say anything. */
static bool parse_extent(const struct ub_scrub *s, const struct ub_key *k, const uint8_t *d, uint32_t size,
			 struct sx_extent *x)
{
	uint64_t flags;
	uint32_t at = (uint32_t)sizeof(struct btrfs_extent_item);

	if (size < sizeof(struct btrfs_extent_item))
		return false;
	memset(x, 0, sizeof(*x));
	flags = UB_GET(btrfs_extent_item, flags, d);
	x->bytenr = k->objectid;
	x->gen = UB_GET(btrfs_extent_item, generation, d);
	x->key_type = k->type;
	x->key_offset = k->offset;
	x->level = -1;
	if (k->type == BTRFS_METADATA_ITEM_KEY) {
		x->meta = true;
		x->len = s->ns;
		x->level = k->offset < UB_MAX_LEVEL ? (int)k->offset : -1;
	} else {
		x->len = k->offset;
		x->meta = (flags & BTRFS_EXTENT_FLAG_TREE_BLOCK) != 0;
		if (x->meta) {
			/* the old form: a tree block info (first key, level) after the item */
			if (size >= at + sizeof(struct btrfs_tree_block_info)) {
				uint8_t lvl = (uint8_t)UB_GET(btrfs_tree_block_info, level, d + at);
				x->level = lvl < UB_MAX_LEVEL ? lvl : -1;
				at += (uint32_t)sizeof(struct btrfs_tree_block_info);
			}
			x->len = s->ns;
		}
	}
	if (x->meta)
		x->tree = first_tree_ref(d, size, at);
	return x->len > 0;
}

static bool is_extent_key(uint8_t type)
{
	return type == BTRFS_EXTENT_ITEM_KEY || type == BTRFS_METADATA_ITEM_KEY;
}

static int collect_extents(struct sx_thread *t, uint64_t lo, uint64_t hi);

/*
 * An extent tree leaf no copy of which reads (said by the tree layer) leaves the
 * range unknown: said once more with the range, and the range skipped (0, no
 * extents) rather than the whole scrub stopped.
 */
int sx_collect_extents(struct sx_thread *t, uint64_t lo, uint64_t hi)
{
	int ret = collect_extents(t, lo, hi);

	if (ret == -EIO || ret == -EUCLEAN) {
		ub_err(&t->s->log, "scrub: devid %llu: the extent items of logical [%llu, %llu) cannot be read: not scrubbed",
		       (unsigned long long)t->d->devid, (unsigned long long)lo, (unsigned long long)hi);
		t->next = 0;
		return 0;
	}
	return ret;
}

static int collect_extents(struct sx_thread *t, uint64_t lo, uint64_t hi)
{
	struct ub_scrub *s = t->s;
	struct ub_key key = { lo, 0xff, UINT64_MAX };
	int ret;

	t->next = 0;
	ub_path_release(&t->path);
	/* the extent that starts last at or before lo may reach into the range: find it first */
	ret = ub_tree_search_le(s->tc, &s->extent_root, &key, &t->path);
	if (ret < 0)
		goto out;
	if (ret == 1) {
		struct ub_key first = { 0, 0, 0 };

		ret = ub_tree_search(s->tc, &s->extent_root, &first, &t->path);
		if (ret < 0)
			goto out;
		ret = ret == 2 ? 1 : 0;
	} else {
		/* back over the keyed references of that extent to its item */
		for (;;) {
			ub_path_key(&t->path, &key);
			if (is_extent_key(key.type) || key.objectid + 2ULL * 128 * 1024 * 1024 < lo)
				break;
			ret = ub_tree_prev(&t->path);
			if (ret < 0)
				goto out;
			if (ret == 1) {
				ret = 0;
				break;
			}
		}
	}
	while (ret == 0) {
		const uint8_t *d;
		uint32_t size;
		struct sx_extent x;

		ub_path_key(&t->path, &key);
		if (key.objectid >= hi)
			break;
		if (is_extent_key(key.type)) {
			d = ub_path_data(&t->path, &size);
			if (parse_extent(s, &key, d, size, &x) && x.bytenr + x.len > lo && x.bytenr < hi) {
				ret = sx_reserve((void **)&t->ext, &t->ext_cap, t->next + 1, sizeof(*t->ext));
				if (ret)
					goto out;
				t->ext[t->next++] = x;
			}
		}
		ret = ub_tree_next(&t->path);
	}
	ret = ret < 0 ? ret : 0;
out:
	ub_path_release(&t->path);
	return ret;
}

static int collect_csums(struct sx_thread *t, uint64_t lo, uint64_t hi);

/* Checksums that cannot be read leave the data to be compared across its copies, as data without them. */
int sx_collect_csums(struct sx_thread *t, uint64_t lo, uint64_t hi)
{
	int ret = collect_csums(t, lo, hi);

	if (ret == -EIO || ret == -EUCLEAN) {
		ub_err(&t->s->log, "scrub: devid %llu: the checksums of logical [%llu, %llu) cannot be read: its data is "
		       "compared across its copies only", (unsigned long long)t->d->devid, (unsigned long long)lo,
		       (unsigned long long)hi);
		memset(t->have, 0, t->csum_n);
		return 0;
	}
	return ret;
}

static int collect_csums(struct sx_thread *t, uint64_t lo, uint64_t hi)
{
	struct ub_scrub *s = t->s;
	const size_t n = (size_t)((hi - lo) / s->ss);
	struct ub_key key = { BTRFS_EXTENT_CSUM_OBJECTID, BTRFS_EXTENT_CSUM_KEY, lo };
	int ret;

	if (n > t->csum_cap) {
		uint8_t *c = realloc(t->csum, n * s->csum_size), *h;

		if (!c)
			return -ENOMEM;
		t->csum = c;
		h = realloc(t->have, n);
		if (!h)
			return -ENOMEM;
		t->have = h;
		t->csum_cap = n;
	}
	memset(t->have, 0, n);
	t->csum_lo = lo;
	t->csum_n = n;
	if (!s->have_csum_root || !n)
		return 0;
	ub_path_release(&t->path);
	ret = ub_tree_search_le(s->tc, &s->csum_root, &key, &t->path);
	if (ret == 1) {
		key = (struct ub_key){ BTRFS_EXTENT_CSUM_OBJECTID, BTRFS_EXTENT_CSUM_KEY, 0 };
		ret = ub_tree_search(s->tc, &s->csum_root, &key, &t->path);
		ret = ret == 2 ? 1 : ret < 0 ? ret : 0;
	}
	while (ret == 0) {
		const uint8_t *d;
		uint32_t size;
		uint64_t start, end, a, b;

		ub_path_key(&t->path, &key);
		if (key.objectid > BTRFS_EXTENT_CSUM_OBJECTID ||
		    (key.objectid == BTRFS_EXTENT_CSUM_OBJECTID && key.type > BTRFS_EXTENT_CSUM_KEY) ||
		    (key.objectid == BTRFS_EXTENT_CSUM_OBJECTID && key.type == BTRFS_EXTENT_CSUM_KEY && key.offset >= hi))
			break;
		if (key.objectid == BTRFS_EXTENT_CSUM_OBJECTID && key.type == BTRFS_EXTENT_CSUM_KEY &&
		    key.offset % s->ss == 0) {
			d = ub_path_data(&t->path, &size);
			start = key.offset;
			end = start + (uint64_t)(size / s->csum_size) * s->ss;
			a = start > lo ? start : lo;
			b = end < hi ? end : hi;
			for (uint64_t l = a; l < b; l += s->ss) {
				size_t i = (size_t)((l - lo) / s->ss);

				memcpy(t->csum + i * s->csum_size, d + (size_t)((l - start) / s->ss) * s->csum_size,
				       s->csum_size);
				t->have[i] = 1;
			}
		}
		ret = ub_tree_next(&t->path);
	}
	ub_path_release(&t->path);
	return ret < 0 ? ret : 0;
}

int sx_units_of(struct sx_thread *t, uint64_t lo, uint64_t hi, size_t base_off)
{
	struct ub_scrub *s = t->s;

	for (size_t i = 0; i < t->next; i++) {
		const struct sx_extent *x = &t->ext[i];
		uint64_t a, b;

		if (x->bytenr >= hi || x->bytenr + x->len <= lo)
			continue;
		if (x->meta) {
			if (x->bytenr < lo)
				continue; /* the piece it starts in has it */
			if (sx_reserve((void **)&t->units, &t->units_cap, t->nunits + 1, sizeof(*t->units)))
				return -ENOMEM;
			t->units[t->nunits++] = (struct sx_unit){
				.logical = x->bytenr, .len = s->ns, .kind = SX_META, .ext = (int)i,
				.off = base_off + (size_t)(x->bytenr - lo), .crosses = x->bytenr + s->ns > hi,
			};
			continue;
		}
		a = x->bytenr > lo ? x->bytenr : lo;
		a -= a % s->ss;
		if (a < lo)
			a += s->ss;
		b = x->bytenr + x->len < hi ? x->bytenr + x->len : hi;
		if (a >= b)
			continue;
		if (sx_reserve((void **)&t->units, &t->units_cap, t->nunits + (size_t)((b - a + s->ss - 1) / s->ss),
			       sizeof(*t->units)))
			return -ENOMEM;
		for (uint64_t l = a; l < b; l += s->ss) {
			size_t ci = (size_t)((l - t->csum_lo) / s->ss);
			bool have = l >= t->csum_lo && ci < t->csum_n && t->have[ci];

			t->units[t->nunits++] = (struct sx_unit){
				.logical = l, .len = s->ss, .kind = have ? SX_DATA : SX_NOCSUM, .ext = (int)i,
				.csum = (uint32_t)ci, .off = base_off + (size_t)(l - lo),
			};
		}
	}
	return 0;
}
