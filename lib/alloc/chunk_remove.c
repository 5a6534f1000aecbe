// SPDX-License-Identifier: MIT
/*
 * Which block group the cleaner may remove, and its removal (ub_chunk_remove).
 *
 * The kernel's btrfs_delete_unused_bgs rule: nothing used, reserved or pinned
 * in the group (superblock mirror stripes do not count: they are not extents),
 * and it is not the last group of its type and profile, so a filesystem never
 * loses the chunk every write of that kind would otherwise have to re-add.
 */
#include "alloc_internal.h"
#include "chunk_alloc.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

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

#define SYS_ARRAY_OFF offsetof(struct ub_disk_super, sys_chunk_array)

/* Delete every item of `root` with min <= key <= max, one at a time (a handful per group). */
static int del_items(struct ub_chunk_ctx *cc, struct ub_root *root, const struct ub_key *min,
		     const struct ub_key *max, bool must_exist)
{
	for (int n = 0;; n++) {
		struct ub_tree_iter it;
		struct ub_key k;
		struct ub_path p;
		const uint8_t *d;
		uint32_t size;
		int ret;

		ret = ub_tree_iter_start(&it, cc->tc, root, min, max);
		if (!ret)
			ret = ub_tree_iter_next(&it, &k, &d, &size);
		ub_tree_iter_end(&it);
		if (ret == 1 && must_exist && n == 0) {
			ub_err(&cc->vol->log, "tree %" PRIu64 ": no item (%" PRIu64 " %u %" PRIu64 ") for the block group "
			       "being removed", root->objectid, min->objectid, min->type, min->offset);
			return -EUCLEAN;
		}
		if (ret)
			return ret == 1 ? 0 : ret;
		ub_path_init(&p);
		ret = ub_tree_search_slot(cc->tc, cc->ta, root, &k, &p, -1, true);
		if (ret == 0)
			ret = ub_tree_del_items(cc->tc, cc->ta, root, &p, p.slots[0], 1);
		ub_path_release(&p);
		if (ret)
			return ret > 0 ? -EUCLEAN : ret;
	}
}

static int del_key(struct ub_chunk_ctx *cc, struct ub_root *root, const struct ub_key *key)
{
	return del_items(cc, root, key, key, true);
}

/* The superblock copy's sys_chunk_array loses the chunk at `logical`. */
static int sys_array_remove(struct ub_chunk_ctx *cc, uint64_t logical)
{
	uint8_t *arr = cc->vol->super + SYS_ARRAY_OFF;
	uint64_t size = UB_GET(ub_disk_super, sys_chunk_array_size, cc->vol->super), off = 0;

	while (size <= UB_SYSTEM_CHUNK_ARRAY_SIZE && off + UB_DISK_KEY_SIZE + offsetof(struct btrfs_chunk, stripe) <= size) {
		const uint8_t *c = arr + off + UB_DISK_KEY_SIZE;
		uint64_t len = UB_DISK_KEY_SIZE + ub_chunk_item_size((int)UB_GET(btrfs_chunk, num_stripes, c));
		struct ub_key k;

		ub_key_read(&k, arr + off);
		if (off + len > size)
			break;
		if (k.type == BTRFS_CHUNK_ITEM_KEY && k.offset == logical) {
			memmove(arr + off, arr + off + len, size - off - len);
			memset(arr + size - len, 0, len);
			UB_SET(ub_disk_super, sys_chunk_array_size, cc->vol->super, size - len);
			return 0;
		}
		off += len;
	}
	ub_err(&cc->vol->log, "superblock: system chunk %" PRIu64 " is not in the sys_chunk_array", logical);
	return -EUCLEAN;
}

/* Every item of the group, as the kernel's btrfs_remove_chunk / btrfs_remove_block_group delete them. */
static int remove_items(struct ub_chunk_ctx *cc, const struct ub_chunk *c, uint64_t flags)
{
	struct ub_chunk_plan plan = { .type = flags, .length = c->length, .num_stripes = c->num_stripes };
	struct ub_key key = { c->logical, BTRFS_BLOCK_GROUP_ITEM_KEY, c->length }, max;
	const uint8_t *d;
	uint32_t size;
	struct ub_path p;
	int ret;

	if (c->num_stripes > UB_MAX_STRIPES)
		return -EUCLEAN;
	for (int i = 0; i < c->num_stripes; i++) {
		plan.stripes[i].devid = c->stripes[i].devid;
		plan.stripes[i].physical = c->stripes[i].physical;
	}
	/* each stripe's length is its DEV_EXTENT's */
	key = (struct ub_key){ c->stripes[0].devid, BTRFS_DEV_EXTENT_KEY, c->stripes[0].physical };
	ub_path_init(&p);
	ret = ub_tree_lookup(cc->tc, cc->dev_root, &key, &p, &d, &size);
	if (ret == 0 && (size < sizeof(struct btrfs_dev_extent) || UB_GET(btrfs_dev_extent, chunk_offset, d) != c->logical))
		ret = -EUCLEAN;
	if (ret == 0)
		plan.stripe_size = UB_GET(btrfs_dev_extent, length, d);
	ub_path_release(&p);
	if (ret) {
		ub_err(&cc->vol->log, "dev tree: no DEV_EXTENT of chunk %" PRIu64 " at device %" PRIu64 " offset %" PRIu64,
		       c->logical, c->stripes[0].devid, c->stripes[0].physical);
		return ret == -ENOENT ? -EUCLEAN : ret;
	}
	key = (struct ub_key){ c->logical, BTRFS_BLOCK_GROUP_ITEM_KEY, c->length };
	ret = del_key(cc, cc->extent_root, &key);
	if (!ret && cc->fst_root) {
		key = (struct ub_key){ c->logical, 0, 0 };
		max = (struct ub_key){ c->logical + c->length - 1, UINT8_MAX, UINT64_MAX };
		ret = del_items(cc, cc->fst_root, &key, &max, false);
	}
	for (int i = 0; i < c->num_stripes && !ret; i++) {
		key = (struct ub_key){ c->stripes[i].devid, BTRFS_DEV_EXTENT_KEY, c->stripes[i].physical };
		ret = del_key(cc, cc->dev_root, &key);
	}
	if (!ret)
		ret = ub_chunk_dev_items_shrink(cc, &plan);
	if (!ret) {
		key = (struct ub_key){ BTRFS_FIRST_CHUNK_TREE_OBJECTID, BTRFS_CHUNK_ITEM_KEY, c->logical };
		ret = del_key(cc, cc->chunk_root, &key);
	}
	if (!ret && (flags & BTRFS_BLOCK_GROUP_SYSTEM))
		ret = sys_array_remove(cc, c->logical);
	return ret;
}

int ub_chunk_remove(struct ub_chunk_ctx *cc, uint64_t start)
{
	struct ub_alloc *a = cc->alloc;
	struct ub_bg *bg = ub_alloc_find_bg(a, start);
	const struct ub_chunk *c = ub_volume_find_chunk(cc->vol, start);
	uint64_t flags;
	bool bitmaps;
	int ret;

	/* untouched since the last commit: nothing of this transaction lives there */
	if (!bg || bg->start != start || bg->used || bg->pinned || bg->reserved.count || bg->dirty || !c ||
	    c->logical != start || c->length != bg->length)
		return -EBUSY;
	flags = bg->flags;
	bitmaps = bg->fst_bitmaps;
	ret = ub_chunk_undo_begin(a);
	if (ret)
		return ret;
	/* first out of the allocator, so the copies the deletions make cannot land there */
	ret = ub_alloc_remove_bg(a, start);
	if (!ret)
		ret = remove_items(cc, c, flags);
	if (ret) {
		struct ub_bg *back;

		/* it was empty: the group as its geometry makes it is what it was */
		if (ub_alloc_insert_chunk_bg(a, c, flags, &back) == 0)
			back->fst_bitmaps = bitmaps;
	}
	return ret;
}
