/* SPDX-License-Identifier: MIT */
/*
 * Commit: the block group items' used bytes and the free space tree, from
 * the allocator's per block group deltas.
 *
 * Free space tree layout (per block group [start, start+length)):
 *   (start, FREE_SPACE_INFO, length)  { extent_count, flags }
 *   (s, FREE_SPACE_EXTENT, len)       one per maximal free extent, or
 *   (s, FREE_SPACE_BITMAP, len)       bitmaps (flags & USING_BITMAPS).
 * Extents are updated in place of the changed ranges (a range that became
 * used splits the free extent holding it; one that became free merges with
 * its neighbours). A block group still in bitmaps is rewritten as extents
 * (the kernel converts between the two forms whenever it likes; both are
 * valid), and FREE_SPACE_INFO's extent_count is checked against the
 * allocator's own count of free extents, which catches any drift.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include "txn.h"

struct space_ctx {
	struct ub_txn *t;
	int nbgs;
};

static struct ub_root *fst(struct ub_txn *t)
{
	return &t->e->fs.fst_tree->root;
}

static int del_key(struct ub_txn *t, struct ub_root *root, const struct ub_key *key)
{
	struct ub_path p;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_search_slot(&t->e->fs.tc, &t->ta, root, key, &p, -1, true);
	if (ret == 0)
		ret = ub_tree_del_items(&t->e->fs.tc, &t->ta, root, &p, p.slots[0], 1);
	else if (ret > 0)
		ret = -ENOENT;
	ub_path_release(&p);
	return ret;
}

static int ins_extent(struct ub_txn *t, uint64_t start, uint64_t len)
{
	struct ub_key k = { start, BTRFS_FREE_SPACE_EXTENT_KEY, len };
	return ub_tree_insert_item(&t->e->fs.tc, &t->ta, fst(t), &k, NULL, 0);
}

/* The free space extent item holding byte `pos` of block group d: 0 and *out, 1 if none. */
static int extent_at(struct ub_txn *t, const struct ub_bg_delta *d, uint64_t pos, struct ub_key *out)
{
	struct ub_key key = { pos, BTRFS_FREE_SPACE_EXTENT_KEY, UINT64_MAX };
	struct ub_path p;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_search_le(&t->e->fs.tc, fst(t), &key, &p);
	if (ret == 0) {
		ub_path_key(&p, out);
		ret = out->type == BTRFS_FREE_SPACE_EXTENT_KEY && out->objectid >= d->start &&
				      out->objectid <= pos && pos - out->objectid < out->offset
			      ? 0
			      : 1;
	}
	ub_path_release(&p);
	return ret;
}

/* The free space extent starting exactly at `pos` (inside d): 0 and *out, 1 if none. */
static int extent_starting(struct ub_txn *t, const struct ub_bg_delta *d, uint64_t pos, struct ub_key *out)
{
	struct ub_key key = { pos, BTRFS_FREE_SPACE_EXTENT_KEY, 0 };
	struct ub_path p;
	int ret;

	if (pos >= d->start + d->length)
		return 1;
	ub_path_init(&p);
	ret = ub_tree_search(&t->e->fs.tc, fst(t), &key, &p);
	if (ret == 0 || ret == 1) {
		ub_path_key(&p, out);
		ret = out->objectid == pos && out->type == BTRFS_FREE_SPACE_EXTENT_KEY ? 0 : 1;
	} else if (ret == 2) {
		ret = 1;
	}
	ub_path_release(&p);
	return ret;
}

static int bg_error(struct ub_txn *t, const struct ub_bg_delta *d, const char *what, uint64_t s, uint64_t l)
{
	ub_err(&t->e->fs.log, "free space tree: block group %llu (length %llu): %s [%llu, +%llu)",
	       (unsigned long long)d->start, (unsigned long long)d->length, what, (unsigned long long)s,
	       (unsigned long long)l);
	return -EUCLEAN;
}

/* [s, s+l) is allocated now: cut it out of the free extent holding it. *count changes with the pieces. */
static int fst_remove(struct ub_txn *t, const struct ub_bg_delta *d, uint64_t s, uint64_t l, int64_t *count)
{
	struct ub_key k;
	uint64_t a, b;
	int ret = extent_at(t, d, s, &k);

	if (ret < 0)
		return ret;
	if (ret || s + l > k.objectid + k.offset)
		return bg_error(t, d, "no free space extent covers the range that became used", s, l);
	a = k.objectid;
	b = k.objectid + k.offset;
	ret = del_key(t, fst(t), &k);
	(*count)--;
	if (!ret && a < s) {
		ret = ins_extent(t, a, s - a);
		(*count)++;
	}
	if (!ret && s + l < b) {
		ret = ins_extent(t, s + l, b - (s + l));
		(*count)++;
	}
	return ret;
}

/* [s, s+l) is free now: one extent with whatever free extents touch it. */
static int fst_add(struct ub_txn *t, const struct ub_bg_delta *d, uint64_t s, uint64_t l, int64_t *count)
{
	struct ub_key left, right;
	uint64_t a = s, b = s + l;
	int ret;

	if (extent_at(t, d, s, &left) == 0 || (l > 1 && extent_at(t, d, s + l - 1, &left) == 0))
		return bg_error(t, d, "a free space extent already covers part of the range that became free", s, l);
	if (s > d->start) {
		ret = extent_at(t, d, s - 1, &left);
		if (ret < 0)
			return ret;
		if (ret == 0) {
			a = left.objectid;
			ret = del_key(t, fst(t), &left);
			if (ret)
				return ret;
			(*count)--;
		}
	}
	ret = extent_starting(t, d, b, &right);
	if (ret < 0)
		return ret;
	if (ret == 0) {
		b = right.objectid + right.offset;
		ret = del_key(t, fst(t), &right);
		if (ret)
			return ret;
		(*count)--;
	}
	(*count)++;
	return ins_extent(t, a, b - a);
}

/* A block group in bitmaps: every bitmap and extent item out, its free set in as extents. */
static int fst_rewrite(struct ub_txn *t, const struct ub_bg_delta *d, int64_t *count)
{
	struct ub_range r;
	uint64_t pos;
	int ret = 0;

	for (;;) {
		struct ub_key key = { d->start, BTRFS_FREE_SPACE_EXTENT_KEY, 0 }, k;
		struct ub_path p;

		ub_path_init(&p);
		ret = ub_tree_search(&t->e->fs.tc, fst(t), &key, &p);
		if (ret == 0 || ret == 1) {
			ub_path_key(&p, &k);
			ret = k.objectid < d->start + d->length &&
			      (k.type == BTRFS_FREE_SPACE_EXTENT_KEY || k.type == BTRFS_FREE_SPACE_BITMAP_KEY);
		} else if (ret == 2) {
			ret = 0;
		}
		ub_path_release(&p);
		if (ret <= 0)
			break;
		ret = del_key(t, fst(t), &k);
		if (ret)
			return ret;
	}
	if (ret)
		return ret;
	*count = 0;
	for (pos = d->start; ub_rs_next(d->free, pos, &r) == 0 && r.start < d->start + d->length;
	     pos = r.start + r.len) {
		ret = ins_extent(t, r.start, r.len);
		if (ret)
			return ret;
		(*count)++;
	}
	return 0;
}

/*
 * A repair (d->fst_rebuild): the group's items rewritten whole from the
 * allocator's free set, its FREE_SPACE_INFO inserted when it has none.
 */
static int rebuild_fst(struct ub_txn *t, const struct ub_bg_delta *d)
{
	struct ub_key key = { d->start, BTRFS_FREE_SPACE_INFO_KEY, d->length };
	struct ub_path p;
	int64_t count;
	uint32_t size;
	int ret = fst_rewrite(t, d, &count);

	if (ret)
		return ret;
	ub_path_init(&p);
	ret = ub_tree_search_slot(&t->e->fs.tc, &t->ta, fst(t), &key, &p, 0, true);
	if (ret > 0) {
		ub_path_release(&p);
		uint8_t zero[sizeof(struct btrfs_free_space_info)] = { 0 };

		ret = ub_tree_insert_item(&t->e->fs.tc, &t->ta, fst(t), &key, zero, sizeof(zero));
		if (ret)
			return ret;
		ub_path_init(&p);
		ret = ub_tree_search_slot(&t->e->fs.tc, &t->ta, fst(t), &key, &p, 0, true);
	}
	if (ret == 0) {
		uint8_t *info = ub_path_data_mut(&p, &size);

		if (size < sizeof(struct btrfs_free_space_info)) {
			ret = -EUCLEAN;
		} else {
			UB_SET(btrfs_free_space_info, extent_count, info, (uint64_t)count);
			UB_SET(btrfs_free_space_info, flags, info, 0);
			ub_path_mark_dirty(&p);
		}
	}
	ub_path_release(&p);
	return ret > 0 ? -EUCLEAN : ret;
}

/* Whether free space tree item k belongs where it is: an info of a group, an extent or bitmap inside one. */
static bool fst_item_fits(struct ub_txn *t, const struct ub_key *k)
{
	struct ub_bg_info bi;

	if (ub_alloc_bg_info(t->e->alloc, k->objectid, &bi))
		return false;
	if (k->type == BTRFS_FREE_SPACE_INFO_KEY)
		return bi.start == k->objectid && bi.length == k->offset;
	if (k->type == BTRFS_FREE_SPACE_EXTENT_KEY || k->type == BTRFS_FREE_SPACE_BITMAP_KEY)
		return k->offset && k->objectid + k->offset <= bi.start + bi.length;
	return false;
}

/* A repair: every free space tree item that is no group's (stray infos, items across groups) goes first. */
static int fst_drop_strays(struct ub_txn *t)
{
	struct ub_key *strays = NULL, k = { 0, 0, 0 };
	size_t n = 0, cap = 0;
	struct ub_path p;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_search(&t->e->fs.tc, fst(t), &k, &p);
	/* 0 or 1: at the first item; 2: the tree is empty */
	ret = ret == 2 ? 1 : ret < 0 ? ret : 0;
	while (ret == 0) {
		ub_path_key(&p, &k);
		if (!fst_item_fits(t, &k)) {
			if (n == cap) {
				struct ub_key *m = realloc(strays, (cap = cap ? cap * 2 : 16) * sizeof(*m));

				if (!m) {
					ret = -ENOMEM;
					break;
				}
				strays = m;
			}
			strays[n++] = k;
		}
		ret = ub_tree_next(&p);
	}
	ub_path_release(&p);
	if (ret == 1)
		ret = 0;
	for (size_t i = 0; !ret && i < n; i++) {
		ub_info(&t->e->fs.log, "free space tree: item (%llu %u %llu) belongs to no block group: removed",
			(unsigned long long)strays[i].objectid, strays[i].type, (unsigned long long)strays[i].offset);
		ret = del_key(t, fst(t), &strays[i]);
	}
	free(strays);
	return ret;
}

static int update_fst(struct ub_txn *t, const struct ub_bg_delta *d)
{
	struct ub_key key = { d->start, BTRFS_FREE_SPACE_INFO_KEY, d->length };
	struct ub_range r;
	struct ub_path p;
	int64_t count;
	uint32_t size, flags;
	uint8_t *info;
	int ret;

	const uint8_t *di;

	ub_path_init(&p);
	ret = ub_tree_lookup(&t->e->fs.tc, fst(t), &key, &p, &di, &size);
	if (ret == 0 && size < sizeof(struct btrfs_free_space_info))
		ret = -EUCLEAN;
	if (ret == 0) {
		count = UB_GET(btrfs_free_space_info, extent_count, di);
		flags = (uint32_t)UB_GET(btrfs_free_space_info, flags, di);
	}
	ub_path_release(&p);
	if (ret == -ENOENT)
		return bg_error(t, d, "no FREE_SPACE_INFO for the block group", d->start, d->length);
	if (ret)
		return ret;
	if (flags & BTRFS_FREE_SPACE_USING_BITMAPS) {
		ret = fst_rewrite(t, d, &count);
	} else {
		for (uint64_t pos = d->start; !ret && ub_rs_next(d->became_used, pos, &r) == 0; pos = r.start + r.len)
			ret = fst_remove(t, d, r.start, r.len, &count);
		for (uint64_t pos = d->start; !ret && ub_rs_next(d->became_free, pos, &r) == 0; pos = r.start + r.len)
			ret = fst_add(t, d, r.start, r.len, &count);
	}
	if (ret)
		return ret;
	if (count < 0 || (uint64_t)count != d->free->count)
		return bg_error(t, d, "free extent count disagrees with the allocator after the update; block group",
				d->start, d->length);
	ub_path_init(&p);
	ret = ub_tree_search_slot(&t->e->fs.tc, &t->ta, fst(t), &key, &p, 0, true);
	if (ret == 0) {
		info = ub_path_data_mut(&p, &size);
		UB_SET(btrfs_free_space_info, extent_count, info, (uint64_t)count);
		UB_SET(btrfs_free_space_info, flags, info, flags & ~(uint32_t)BTRFS_FREE_SPACE_USING_BITMAPS);
		ub_path_mark_dirty(&p);
	}
	ub_path_release(&p);
	return ret > 0 ? -EUCLEAN : ret;
}

static int update_bg_item(struct ub_txn *t, const struct ub_bg_delta *d)
{
	struct ub_key key = { d->start, BTRFS_BLOCK_GROUP_ITEM_KEY, d->length };
	struct ub_path p;
	uint32_t size;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_search_slot(&t->e->fs.tc, &t->ta, &t->e->fs.extent_tree->root, &key, &p, 0, true);
	if (ret == 0) {
		uint8_t *bi = ub_path_data_mut(&p, &size);
		if (size < sizeof(struct btrfs_block_group_item)) {
			ret = -EUCLEAN;
		} else {
			UB_SET(btrfs_block_group_item, used, bi, d->used);
			ub_path_mark_dirty(&p);
		}
	} else if (ret > 0) {
		ret = bg_error(t, d, "no BLOCK_GROUP_ITEM in the extent tree for", d->start, d->length);
	}
	ub_path_release(&p);
	return ret;
}

static int one_bg(void *arg, const struct ub_bg_delta *d)
{
	struct space_ctx *sc = arg;
	struct ub_txn *t = sc->t;
	int ret;

	sc->nbgs++;
	if (d->is_new) {
		ub_err(&t->e->fs.log, "block group %llu is new: adding block groups is not supported by this round of "
		       "the engine", (unsigned long long)d->start);
		return -EOPNOTSUPP;
	}
	ret = update_bg_item(t, d);
	if (!ret && t->e->fs.fst_tree)
		ret = d->fst_rebuild ? rebuild_fst(t, d) : update_fst(t, d);
	return ret;
}

int ub_txn_write_space(struct ub_txn *t)
{
	struct space_ctx sc = { t, 0 };
	int ret = 0;

	if (t->e->fst_strays && t->e->fs.fst_tree) {
		ret = fst_drop_strays(t);
		if (!ret)
			t->e->fst_strays = false;
	}
	if (!ret)
		ret = ub_alloc_for_each_dirty_bg(t->e->alloc, one_bg, &sc);

	if (!ret)
		ub_alloc_clear_dirty(t->e->alloc);
	return ret;
}
