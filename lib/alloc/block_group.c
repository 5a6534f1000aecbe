/* SPDX-License-Identifier: MIT */
/*
 * Loading block groups and their free space from disk (ub_alloc_load).
 *
 * Block group items sit in the extent tree between the extent items, keyed
 * (start, BLOCK_GROUP_ITEM, length). Each must match a chunk of the same
 * start, length and flags, and every chunk must have its group, as the
 * kernel checks at mount. Free space comes from the free space tree
 * (one FREE_SPACE_INFO per group, then either FREE_SPACE_EXTENT items or
 * FREE_SPACE_BITMAP items over the group) or, without one, is the group
 * minus its EXTENT_ITEM / METADATA_ITEM ranges. Either way the result must
 * agree with the group's `used`: free + used == length.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include "alloc/alloc_internal.h"

#define SB_GET(field, sb) UB_GET(ub_disk_super, field, sb)

static const char *bg_type_name(uint64_t flags)
{
	if ((flags & BTRFS_BLOCK_GROUP_DATA) && (flags & BTRFS_BLOCK_GROUP_METADATA))
		return "DATA|METADATA";
	if (flags & BTRFS_BLOCK_GROUP_DATA)
		return "DATA";
	if (flags & BTRFS_BLOCK_GROUP_METADATA)
		return "METADATA";
	if (flags & BTRFS_BLOCK_GROUP_SYSTEM)
		return "SYSTEM";
	return "?";
}

/* Find the next BLOCK_GROUP_ITEM at or after key objectid `pos`: 0 (key, data), 1 none, <0. */
static int next_bg_item(struct ub_tree_ctx *tc, const struct ub_root *root, uint64_t pos, struct ub_key *key,
			uint8_t *item, uint32_t *isize)
{
	struct ub_path p;
	struct ub_key k = { pos, BTRFS_BLOCK_GROUP_ITEM_KEY, 0 };
	int ret;
	ub_path_init(&p);
	ret = ub_tree_search(tc, root, &k, &p);
	if (ret < 0)
		goto out;
	if (ret == 2) {
		ret = 1;
		goto out;
	}
	/* extent items of the next group may come first (same objectid, smaller type) or lie between groups */
	for (;;) {
		ub_path_key(&p, key);
		if (key->type == BTRFS_BLOCK_GROUP_ITEM_KEY && key->objectid >= pos) {
			uint32_t size;
			const uint8_t *d = ub_path_data(&p, &size);
			*isize = size;
			memcpy(item, d, size < sizeof(struct btrfs_block_group_item) ? size
										: sizeof(struct btrfs_block_group_item));
			ret = 0;
			goto out;
		}
		ret = ub_tree_next(&p);
		if (ret)
			goto out;
	}
out:
	ub_path_release(&p);
	return ret;
}

static int load_groups(struct ub_alloc *a, struct ub_tree_ctx *tc, const struct ub_root *extent_root)
{
	uint64_t pos = 0;
	int ret;
	for (;;) {
		struct ub_key key;
		uint8_t item[sizeof(struct btrfs_block_group_item)];
		uint32_t isize = 0;
		ret = next_bg_item(tc, extent_root, pos, &key, item, &isize);
		if (ret == 1)
			break;
		if (ret < 0) {
			ub_err(&a->log, "cannot read the extent tree (block group items from logical %" PRIu64 "): %s", pos,
			       strerror(-ret));
			return ret;
		}
		uint64_t start = key.objectid, length = key.offset;
		if (isize != sizeof(struct btrfs_block_group_item)) {
			ub_err(&a->log, "block group %" PRIu64 ": item size %u, expected %zu", start, isize,
			       sizeof(struct btrfs_block_group_item));
			return -EUCLEAN;
		}
		uint64_t used = UB_GET(btrfs_block_group_item, used, item);
		uint64_t chunk_oid = UB_GET(btrfs_block_group_item, chunk_objectid, item);
		uint64_t flags = UB_GET(btrfs_block_group_item, flags, item);
		if (length == 0 || start + length < start || start % a->sectorsize || length % a->sectorsize) {
			ub_err(&a->log, "block group %" PRIu64 ": bad length %" PRIu64 " or unaligned start", start,
			       length);
			return -EUCLEAN;
		}
		if (used > length || used % a->sectorsize) {
			ub_err(&a->log, "block group %" PRIu64 " (length %" PRIu64 "): used %" PRIu64 " %s", start, length,
			       used, used > length ? "exceeds its length" : "is not sector aligned");
			return -EUCLEAN;
		}
		if (chunk_oid != BTRFS_FIRST_CHUNK_TREE_OBJECTID) {
			ub_err(&a->log, "block group %" PRIu64 ": chunk_objectid %" PRIu64 ", expected %llu", start,
			       chunk_oid, BTRFS_FIRST_CHUNK_TREE_OBJECTID);
			return -EUCLEAN;
		}
		const struct ub_chunk *c = ub_volume_find_chunk(a->vol, start);
		if (!c || c->logical != start || c->length != length) {
			ub_err(&a->log, "block group %" PRIu64 " length %" PRIu64 " has no chunk of that start and length",
			       start, length);
			return -EUCLEAN;
		}
		uint64_t mask = BTRFS_BLOCK_GROUP_TYPE_MASK | BTRFS_BLOCK_GROUP_PROFILE_MASK;
		if ((flags & mask) != (c->type & mask) || !(flags & BTRFS_BLOCK_GROUP_TYPE_MASK)) {
			ub_err(&a->log,
			       "block group %" PRIu64 ": flags 0x%" PRIx64 " (%s %s) differ from its chunk's 0x%" PRIx64,
			       start, flags, bg_type_name(flags), ub_profile_name(flags), c->type);
			return -EUCLEAN;
		}
		struct ub_bg *bg;
		ret = ub_alloc_insert_chunk_bg(a, c, flags, &bg);
		if (ret == -EINVAL) {
			ub_err(&a->log, "block group %" PRIu64 ": cannot map its superblock mirrors through its chunk", start);
			return -EUCLEAN;
		}
		if (ret == -EEXIST) {
			ub_err(&a->log, "block group %" PRIu64 " length %" PRIu64 " overlaps another block group", start,
			       length);
			return -EUCLEAN;
		}
		if (ret)
			return ret;
		bg->used = bg->old_used = used;
		pos = start + length;
	}
	/* the kernel refuses a chunk without its block group too */
	for (int i = 0; i < a->vol->nchunks; i++) {
		const struct ub_chunk *c = a->vol->chunks[i];
		struct ub_bg *bg = ub_alloc_find_bg(a, c->logical);
		if (!bg || bg->start != c->logical) {
			ub_err(&a->log, "chunk %" PRIu64 " length %" PRIu64 " has no block group item", c->logical,
			       c->length);
			return -EUCLEAN;
		}
	}
	return 0;
}

/* Move bytes from the "all free" initial state: the range is allocated. */
static int carve(struct ub_alloc *a, struct ub_bg *bg, uint64_t s, uint64_t len, const char *what)
{
	if (len == 0 || s < bg->start || s + len < s || s + len > bg->start + bg->length) {
		ub_err(&a->log, "block group %" PRIu64 ": %s [%" PRIu64 ", +%" PRIu64 ") outside the group", bg->start,
		       what, s, len);
		return -EUCLEAN;
	}
	int ret = ub_rs_remove(&bg->free, s, len);
	if (ret == -ENOENT) {
		ub_err(&a->log, "block group %" PRIu64 ": %s [%" PRIu64 ", +%" PRIu64 ") overlaps another", bg->start,
		       what, s, len);
		return -EUCLEAN;
	}
	return ret;
}

/* Free space from the extent tree: every group minus its extents. */
static int load_from_extents(struct ub_alloc *a, struct ub_tree_ctx *tc, const struct ub_root *extent_root)
{
	struct ub_path p;
	struct ub_key k = { 0, 0, 0 };
	int ret;
	ub_path_init(&p);
	ret = ub_tree_search(tc, extent_root, &k, &p);
	if (ret < 0)
		goto out;
	if (ret == 2) {
		ret = 0;
		goto out;
	}
	for (;;) {
		struct ub_key key;
		ub_path_key(&p, &key);
		if (key.type == BTRFS_EXTENT_ITEM_KEY || key.type == BTRFS_METADATA_ITEM_KEY) {
			uint64_t len = key.type == BTRFS_EXTENT_ITEM_KEY ? key.offset : a->nodesize;
			struct ub_bg *bg = ub_alloc_find_bg(a, key.objectid);
			if (!bg) {
				ub_err(&a->log, "extent tree: extent %" PRIu64 " length %" PRIu64 " is in no block group",
				       key.objectid, len);
				ret = -EUCLEAN;
				goto out;
			}
			if (key.objectid % a->sectorsize || len % a->sectorsize) {
				ub_err(&a->log, "block group %" PRIu64 ": extent %" PRIu64 " length %" PRIu64 " unaligned",
				       bg->start, key.objectid, len);
				ret = -EUCLEAN;
				goto out;
			}
			ret = carve(a, bg, key.objectid, len, "extent");
			if (ret)
				goto out;
		}
		ret = ub_tree_next(&p);
		if (ret == 1) {
			ret = 0;
			break;
		}
		if (ret)
			goto out;
	}
out:
	ub_path_release(&p);
	if (ret < 0 && ret != -EUCLEAN)
		ub_err(&a->log, "cannot read the extent tree for free space: %s", strerror(-ret));
	return ret;
}

/* One group's free space tree items. */
static int load_fst_group(struct ub_alloc *a, struct ub_tree_ctx *tc, const struct ub_root *fst, struct ub_bg *bg)
{
	struct ub_path p;
	struct ub_key k = { bg->start, BTRFS_FREE_SPACE_INFO_KEY, bg->length };
	const uint8_t *d;
	uint32_t size;
	uint64_t end = bg->start + bg->length;
	uint32_t extent_count, flags;
	uint64_t items = 0, prev_end = 0;
	int ret;
	ub_path_init(&p);
	ret = ub_tree_lookup(tc, fst, &k, &p, &d, &size);
	if (ret == -ENOENT) {
		ub_err(&a->log, "free space tree: block group %" PRIu64 " length %" PRIu64 " has no FREE_SPACE_INFO",
		       bg->start, bg->length);
		ret = -EUCLEAN;
		goto out;
	}
	if (ret)
		goto out;
	if (size != sizeof(struct btrfs_free_space_info)) {
		ub_err(&a->log, "free space tree: block group %" PRIu64 ": FREE_SPACE_INFO size %u, expected %zu",
		       bg->start, size, sizeof(struct btrfs_free_space_info));
		ret = -EUCLEAN;
		goto out;
	}
	extent_count = (uint32_t)UB_GET(btrfs_free_space_info, extent_count, d);
	flags = (uint32_t)UB_GET(btrfs_free_space_info, flags, d);
	if (flags & ~(uint32_t)BTRFS_FREE_SPACE_USING_BITMAPS) {
		ub_err(&a->log, "free space tree: block group %" PRIu64 ": unknown FREE_SPACE_INFO flags 0x%x", bg->start,
		       flags);
		ret = -EUCLEAN;
		goto out;
	}
	bg->fst_bitmaps = flags & BTRFS_FREE_SPACE_USING_BITMAPS;
	uint8_t want = bg->fst_bitmaps ? BTRFS_FREE_SPACE_BITMAP_KEY : BTRFS_FREE_SPACE_EXTENT_KEY;
	/* the loader starts from "all allocated" and adds what the tree says is free */
	ub_rs_clear(&bg->free);
	for (;;) {
		ret = ub_tree_next(&p);
		if (ret == 1)
			break;
		if (ret)
			goto out;
		struct ub_key key;
		ub_path_key(&p, &key);
		if (key.objectid >= end)
			break;
		if (key.type != want) {
			ub_err(&a->log,
			       "free space tree: block group %" PRIu64 ": item (%" PRIu64 ", %u, %" PRIu64
			       ") where only %s items belong",
			       bg->start, key.objectid, key.type, key.offset, bg->fst_bitmaps ? "bitmap" : "extent");
			ret = -EUCLEAN;
			goto out;
		}
		uint64_t s = key.objectid, len = key.offset;
		if (len == 0 || s < bg->start || s + len < s || s + len > end || s % a->sectorsize ||
		    len % a->sectorsize) {
			ub_err(&a->log,
			       "free space tree: block group %" PRIu64 " length %" PRIu64 ": %s [%" PRIu64 ", +%" PRIu64
			       ") is outside the group or unaligned",
			       bg->start, bg->length, bg->fst_bitmaps ? "bitmap" : "extent", s, len);
			ret = -EUCLEAN;
			goto out;
		}
		if (s < prev_end) {
			ub_err(&a->log, "free space tree: block group %" PRIu64 ": %s [%" PRIu64 ", +%" PRIu64
			       ") overlaps the previous item", bg->start, bg->fst_bitmaps ? "bitmap" : "extent", s, len);
			ret = -EUCLEAN;
			goto out;
		}
		prev_end = s + len;
		d = ub_path_data(&p, &size);
		if (!bg->fst_bitmaps) {
			if (size != 0) {
				ub_err(&a->log, "free space tree: extent [%" PRIu64 ", +%" PRIu64 ") has %u data bytes", s,
				       len, size);
				ret = -EUCLEAN;
				goto out;
			}
			ret = ub_rs_add(&bg->free, s, len);
			if (ret == -EEXIST) {
				ub_err(&a->log, "free space tree: block group %" PRIu64 ": extent [%" PRIu64 ", +%" PRIu64
				       ") overlaps another", bg->start, s, len);
				ret = -EUCLEAN;
			}
			if (ret)
				goto out;
			items++;
			continue;
		}
		uint64_t nbits = len / a->sectorsize;
		if (size != (nbits + 7) / 8) {
			ub_err(&a->log, "free space tree: bitmap [%" PRIu64 ", +%" PRIu64 ") has %u bytes, expected %" PRIu64,
			       s, len, size, (nbits + 7) / 8);
			ret = -EUCLEAN;
			goto out;
		}
		/* runs of set bits (bit i of byte i/8, least significant first) */
		uint64_t i = 0;
		while (i < nbits) {
			if (!(d[i / 8] >> (i % 8) & 1)) {
				i++;
				continue;
			}
			uint64_t j = i;
			while (j < nbits && (d[j / 8] >> (j % 8) & 1))
				j++;
			ret = ub_rs_add(&bg->free, s + i * a->sectorsize, (j - i) * a->sectorsize);
			if (ret)
				goto out;
			i = j;
		}
	}
	ret = 0;
	/*
	 * extent_count counts free extents: items in extent form, maximal
	 * runs (across bitmap items) in bitmap form.
	 */
	uint64_t counted = bg->fst_bitmaps ? bg->free.count : items;
	if (counted != extent_count) {
		ub_err(&a->log, "free space tree: block group %" PRIu64 ": %" PRIu64 " free extents, FREE_SPACE_INFO says %u",
		       bg->start, counted, extent_count);
		ret = -EUCLEAN;
	}
out:
	ub_path_release(&p);
	if (ret < 0 && ret != -EUCLEAN)
		ub_err(&a->log, "cannot read the free space tree for block group %" PRIu64 ": %s", bg->start,
		       strerror(-ret));
	return ret;
}

/* avail = free minus superblock stripes (nothing is reserved or pinned at load). */
static int rebuild_avail(struct ub_bg *bg)
{
	struct ub_range r;
	uint64_t pos = 0;
	int ret;
	ub_rs_clear(&bg->avail);
	while (ub_rs_next(&bg->free, pos, &r) == 0) {
		ret = ub_rs_add(&bg->avail, r.start, r.len);
		if (ret)
			return ret;
		pos = r.start + r.len;
	}
	pos = 0;
	while (ub_rs_next(&bg->super_set, pos, &r) == 0) {
		ret = ub_rs_remove_any(&bg->avail, r.start, r.len, NULL);
		if (ret)
			return ret;
		pos = r.start + r.len;
	}
	return 0;
}

/* The block groups can be read from the extent tree: 0, or -EOPNOTSUPP / -EUCLEAN said. */
static int loadable(struct ub_volume *vol, const struct ub_root *extent_root)
{
	if (SB_GET(compat_ro_flags, vol->super) & BTRFS_FEATURE_COMPAT_RO_BLOCK_GROUP_TREE) {
		ub_err(&vol->log, "the allocator does not support the block-group-tree feature "
				  "(block group items outside the extent tree)");
		return -EOPNOTSUPP;
	}
	if (!extent_root || !extent_root->bytenr) {
		ub_err(&vol->log, "the allocator needs the extent tree, and this filesystem has no extent tree root");
		return -EUCLEAN;
	}
	return 0;
}

int ub_alloc_load_repair(struct ub_tree_ctx *tc, struct ub_volume *vol, const struct ub_root *extent_root,
			 uint64_t *fixed, struct ub_alloc **out)
{
	struct ub_alloc *a = NULL;
	int ret;

	*fixed = 0;
	ret = loadable(vol, extent_root);
	if (!ret)
		ret = ub_alloc_create(vol, &vol->log, &a);
	if (ret)
		return ret;
	ret = load_groups(a, tc, extent_root);
	if (!ret)
		ret = load_from_extents(a, tc, extent_root);
	if (ret)
		goto fail;
	for (int i = 0; i < a->nbgs; i++) {
		struct ub_bg *bg = a->bgs[i];
		/* what the extents leave free is the truth; the item's old count stays old_used */
		uint64_t used = bg->length - bg->free.bytes;

		if (used != bg->used) {
			ub_info(&a->log, "block group %" PRIu64 ": used %" PRIu64 " becomes %" PRIu64 " (its extents)",
				bg->start, bg->used, used);
			bg->used = used;
			(*fixed)++;
		}
		bg->dirty = true;
		bg->fst_rebuild = true;
		ret = rebuild_avail(bg);
		if (ret)
			goto fail;
	}
	*out = a;
	return 0;
fail:
	ub_alloc_free(a);
	return ret;
}

int ub_alloc_load_chunks(struct ub_volume *vol, struct ub_alloc **out)
{
	struct ub_alloc *a = NULL;
	int ret;

	if (SB_GET(compat_ro_flags, vol->super) & BTRFS_FEATURE_COMPAT_RO_BLOCK_GROUP_TREE) {
		ub_err(&vol->log, "the allocator does not support the block-group-tree feature "
				  "(block group items outside the extent tree)");
		return -EOPNOTSUPP;
	}
	ret = ub_alloc_create(vol, &vol->log, &a);
	if (ret)
		return ret;
	for (int i = 0; i < vol->nchunks; i++) {
		const struct ub_chunk *c = vol->chunks[i];
		struct ub_bg *bg;

		ret = ub_alloc_insert_chunk_bg(a, c, c->type, &bg);
		if (ret == -EINVAL || ret == -EEXIST) {
			ub_err(&a->log, "chunk %" PRIu64 " length %" PRIu64 ": %s", c->logical, c->length,
			       ret == -EEXIST ? "overlaps another chunk" : "cannot map its superblock mirrors");
			ret = -EUCLEAN;
		}
		if (!ret) {
			bg->used = bg->old_used = 0;
			ret = rebuild_avail(bg);
		}
		if (ret)
			goto fail;
	}
	ub_alloc_rebuild_fst_all(a);
	*out = a;
	return 0;
fail:
	ub_alloc_free(a);
	return ret;
}

int ub_alloc_load(struct ub_tree_ctx *tc, struct ub_volume *vol, const struct ub_root *extent_root,
		  const struct ub_root *fst_root, struct ub_alloc **out)
{
	struct ub_alloc *a = NULL;
	int ret;
	uint64_t compat_ro = SB_GET(compat_ro_flags, vol->super);

	ret = loadable(vol, extent_root);
	if (!ret)
		ret = ub_alloc_create(vol, &vol->log, &a);
	if (ret)
		return ret;
	ret = load_groups(a, tc, extent_root);
	if (ret)
		goto fail;
	if (fst_root && fst_root->bytenr && !(compat_ro & BTRFS_FEATURE_COMPAT_RO_FREE_SPACE_TREE_VALID)) {
		ub_warn(&a->log, "free space tree not marked valid: free space taken from the extent tree");
		fst_root = NULL;
	}
	if (fst_root && fst_root->bytenr) {
		for (int i = 0; i < a->nbgs; i++) {
			ret = load_fst_group(a, tc, fst_root, a->bgs[i]);
			if (ret)
				goto fail;
		}
	} else {
		ret = load_from_extents(a, tc, extent_root);
		if (ret)
			goto fail;
	}
	for (int i = 0; i < a->nbgs; i++) {
		struct ub_bg *bg = a->bgs[i];
		if (bg->free.bytes + bg->used != bg->length) {
			ub_err(&a->log,
			       "block group %" PRIu64 " (%s %s, length %" PRIu64 "): used %" PRIu64 " + free %" PRIu64
			       " (from the %s) != length",
			       bg->start, bg_type_name(bg->flags), ub_profile_name(bg->flags), bg->length, bg->used,
			       bg->free.bytes, fst_root && fst_root->bytenr ? "free space tree" : "extent tree");
			ret = -EUCLEAN;
			goto fail;
		}
		ret = rebuild_avail(bg);
		if (ret)
			goto fail;
	}
	*out = a;
	return 0;
fail:
	ub_alloc_free(a);
	return ret;
}
