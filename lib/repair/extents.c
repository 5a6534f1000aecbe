/* SPDX-License-Identifier: MIT */
/*
 * Repair of the extent tree's counts: an extent item's refs set to the number
 * of references the check counted (the pointers that reach a tree block, the
 * file extent items that point at data). Fewer than the truth would let a
 * later drop free a block still in use; the check's count is the truth once
 * every tree was walked, which is when the checker offers this cure.
 */
#include <errno.h>
#include <string.h>
#include "repair/repair_priv.h"
#include "txn/backref.h"

int rp_fix_extent_refs(struct rp_ctx *c, const struct rp_note *n)
{
	struct ub_root *root = &c->e->fs.extent_tree->root;
	struct ub_path p;
	uint64_t was = 0;
	uint32_t size;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_search_slot(&c->e->fs.tc, ub_txn_ta(c->t), root, &n->key, &p, 0, true);
	if (ret > 0)
		ret = -ENOENT;
	if (ret == 0) {
		uint8_t *d = ub_path_data_mut(&p, &size);

		if (!d || size < sizeof(struct btrfs_extent_item)) {
			ret = -EUCLEAN;
		} else {
			was = UB_GET(btrfs_extent_item, refs, d);
			UB_SET(btrfs_extent_item, refs, d, n->want);
			ub_path_mark_dirty(&p);
		}
	}
	ub_path_release(&p);
	if (ret) {
		ub_err(c->log, "repair: the extent item (%llu %u %llu) cannot be changed: %s",
		       (unsigned long long)n->key.objectid, n->key.type, (unsigned long long)n->key.offset, strerror(-ret));
		return ret;
	}
	if (was != n->want)
		rp_say(c, n, was, "extent %llu (%s): references %llu -> %llu", (unsigned long long)n->key.objectid,
		       n->key.type == BTRFS_METADATA_ITEM_KEY ? "tree block" : "extent item", (unsigned long long)was,
		       (unsigned long long)n->want);
	return 0;
}

/* ---- a tree block's extent item made again, a stray one removed ---- */

/*
 * The file extent items of n->inode in leaf n->want2 that point at the data:
 * the extent's length, the data reference's offset (file offset minus the
 * offset into the extent) and the generation, the same in all of them, and
 * as many as the check counted. -ESTALE when the leaf says otherwise now.
 */
static int data_from_leaf(struct rp_ctx *c, struct rp_note *n)
{
	struct ub_expect exp = { .owner = 0, .level = 0 };
	struct ub_eb *eb = NULL;
	uint64_t count = 0;
	int ret = ub_tree_read_block(&c->e->fs.tc, n->want2, &exp, &eb);

	if (ret)
		return ret;
	for (uint32_t i = 0; i < ub_eb_nritems(eb) && !ret; i++) {
		struct ub_key k;
		const uint8_t *d;
		uint32_t size;
		uint8_t type;

		ub_eb_item_key(eb, (int)i, &k);
		if (k.objectid != n->inode || k.type != BTRFS_EXTENT_DATA_KEY)
			continue;
		d = ub_eb_item_data(eb, (int)i, &size);
		if (!d || size < sizeof(struct btrfs_file_extent_item))
			continue;
		type = (uint8_t)UB_GET(btrfs_file_extent_item, type, d);
		if ((type != BTRFS_FILE_EXTENT_REG && type != BTRFS_FILE_EXTENT_PREALLOC) ||
		    UB_GET(btrfs_file_extent_item, disk_bytenr, d) != n->key.objectid)
			continue;
		if (count && (n->data_len != UB_GET(btrfs_file_extent_item, disk_num_bytes, d) ||
			      n->data_offset != k.offset - UB_GET(btrfs_file_extent_item, offset, d)))
			ret = -ESTALE;
		n->data_len = UB_GET(btrfs_file_extent_item, disk_num_bytes, d);
		n->data_offset = k.offset - UB_GET(btrfs_file_extent_item, offset, d);
		if (!count || UB_GET(btrfs_file_extent_item, generation, d) < n->data_gen)
			n->data_gen = UB_GET(btrfs_file_extent_item, generation, d);
		count++;
	}
	ub_eb_put(&c->e->fs.tc, eb);
	if (!ret && (count != n->want || !n->data_len || n->data_len % c->e->fs.vol->sectorsize))
		ret = -ESTALE;
	return ret;
}

int rp_extent_claim(struct rp_ctx *c, struct rp_note *n)
{
	uint64_t at = n->key.objectid, len = c->e->fs.vol->nodesize;
	int ret = 0;

	if (n->fix == UB_CHK_FIX_DATA_ADD) {
		ret = data_from_leaf(c, n);
		if (ret) {
			ub_err(c->log, "repair: the data at %llu: its file extent items in leaf %llu cannot be read as the "
			       "check saw them: %s", (unsigned long long)at, (unsigned long long)n->want2, strerror(-ret));
			return ret;
		}
		len = n->data_len;
	}
	ret = ub_alloc_reserve_at(c->e->alloc, at, len);

	/* the extent tree said free, the repair's open took it so: now it is the block's again */
	if (!ret)
		ret = ub_alloc_account(c->e->alloc, at, len, true);
	if (ret) {
		ub_err(c->log, "repair: the extent at %llu: its space cannot be taken back from the free space: %s",
		       (unsigned long long)at, strerror(-ret));
		return ret;
	}
	c->e->bytes_used += len;
	return 0;
}

/* The extent item of the node at `parent`: its flags (FULL_BACKREF decides how its children are referenced). */
static int parent_flags(struct rp_ctx *c, uint64_t parent, uint64_t *flags)
{
	struct ub_key k = { parent, BTRFS_METADATA_ITEM_KEY, 0 };
	struct ub_path p;
	const uint8_t *d;
	uint32_t size;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_search(&c->e->fs.tc, &c->e->fs.extent_tree->root, &k, &p);
	if (ret == 0 || ret == 1) {
		ub_path_key(&p, &k);
		d = ub_path_data(&p, &size);
		if (k.objectid != parent || (k.type != BTRFS_METADATA_ITEM_KEY && k.type != BTRFS_EXTENT_ITEM_KEY))
			ret = -ENOENT;
		else if (size < sizeof(struct btrfs_extent_item))
			ret = -EUCLEAN;
		else
			*flags = UB_GET(btrfs_extent_item, flags, d), ret = 0;
	} else if (ret == 2) {
		ret = -ENOENT;
	}
	ub_path_release(&p);
	return ret;
}

int rp_fix_extent_add(struct rp_ctx *c, const struct rp_note *n)
{
	struct ub_expect exp = { .owner = 0, .level = -1 };
	uint8_t item[sizeof(struct btrfs_extent_item) + 32];
	struct ub_ref ref = { .type = BTRFS_TREE_BLOCK_REF_KEY, .root = n->want };
	uint64_t at = n->key.objectid, pflags = 0;
	struct ub_eb *eb = NULL;
	struct ub_key k;
	uint32_t size;
	int ret = ub_tree_read_block(&c->e->fs.tc, at, &exp, &eb);

	if (ret) {
		ub_err(c->log, "repair: tree block %llu cannot be read to make its extent item: %s",
		       (unsigned long long)at, strerror(-ret));
		return ret;
	}
	if (ub_eb_owner(eb) != n->want) {
		ub_eb_put(&c->e->fs.tc, eb);
		ub_err(c->log, "repair: tree block %llu: its owner is %llu now, the check saw %llu", (unsigned long long)at,
		       (unsigned long long)ub_eb_owner(eb), (unsigned long long)n->want);
		return -ESTALE;
	}
	k = (struct ub_key){ at, BTRFS_METADATA_ITEM_KEY, ub_eb_level(eb) };
	memset(item, 0, sizeof(item));
	UB_SET(btrfs_extent_item, refs, item, 1);
	UB_SET(btrfs_extent_item, generation, item, ub_eb_generation(eb));
	UB_SET(btrfs_extent_item, flags, item, BTRFS_EXTENT_FLAG_TREE_BLOCK);
	ub_eb_put(&c->e->fs.tc, eb);
	/* below a node with full back references, the reference names that node (the kernel's rule) */
	if (n->want2) {
		ret = parent_flags(c, n->want2, &pflags);
		if (ret) {
			ub_err(c->log, "repair: tree block %llu: the extent item of its parent %llu cannot be read: %s",
			       (unsigned long long)at, (unsigned long long)n->want2, strerror(-ret));
			return ret;
		}
		if (pflags & BTRFS_BLOCK_FLAG_FULL_BACKREF)
			ref = (struct ub_ref){ .type = BTRFS_SHARED_BLOCK_REF_KEY, .parent = n->want2 };
	}
	ub_inline_ref_write(item + sizeof(struct btrfs_extent_item), &ref, 1);
	size = (uint32_t)sizeof(struct btrfs_extent_item) + ub_ref_inline_size(ref.type);
	ret = ub_tree_insert_item(&c->e->fs.tc, ub_txn_ta(c->t), &c->e->fs.extent_tree->root, &k, item, size);
	if (ret) {
		ub_err(c->log, "repair: tree block %llu: its extent item cannot be inserted: %s", (unsigned long long)at,
		       strerror(-ret));
		return ret;
	}
	rp_say(c, n, 0, "tree block %llu (tree %llu, level %llu): its extent item made again (%s %llu)",
	       (unsigned long long)at, (unsigned long long)n->want, (unsigned long long)k.offset,
	       ref.type == BTRFS_TREE_BLOCK_REF_KEY ? "TREE_BLOCK_REF root" : "SHARED_BLOCK_REF parent",
	       (unsigned long long)(ref.type == BTRFS_TREE_BLOCK_REF_KEY ? ref.root : ref.parent));
	return 0;
}

int rp_fix_extent_del(struct rp_ctx *c, const struct rp_note *n)
{
	struct ub_root *root = &c->e->fs.extent_tree->root;
	uint64_t at = n->key.objectid;
	uint64_t len = n->key.type == BTRFS_METADATA_ITEM_KEY ? c->e->fs.vol->nodesize : n->key.offset;
	int ret = 0;

	/* the item, then every keyed reference of the same block (their keys follow it) */
	for (;;) {
		struct ub_key k = { at, 0, 0 };
		struct ub_path p;

		ub_path_init(&p);
		ret = ub_tree_search_slot(&c->e->fs.tc, ub_txn_ta(c->t), root, &k, &p, -1, true);
		if (ret >= 0) {
			if (p.slots[0] >= (int)ub_eb_nritems(p.nodes[0])) {
				ret = 1;
			} else {
				ub_path_key(&p, &k);
				ret = k.objectid == at && (k.type == BTRFS_METADATA_ITEM_KEY || k.type == BTRFS_EXTENT_ITEM_KEY ||
							  k.type == BTRFS_TREE_BLOCK_REF_KEY || k.type == BTRFS_SHARED_BLOCK_REF_KEY)
					      ? ub_tree_del_items(&c->e->fs.tc, ub_txn_ta(c->t), root, &p, p.slots[0], 1)
					      : 1;
			}
		}
		ub_path_release(&p);
		if (ret)
			break;
	}
	if (ret < 0) {
		ub_err(c->log, "repair: the extent item of %llu cannot be removed: %s", (unsigned long long)at,
		       strerror(-ret));
		return ret;
	}
	/* nothing reaches the block: its space is free once the commit is durable */
	ret = ub_alloc_account(c->e->alloc, at, len, false);
	if (!ret)
		ret = ub_alloc_pin(c->e->alloc, at, len);
	if (ret)
		return ret;
	c->e->bytes_used -= len;
	rp_say(c, n, 0, "the extent item of tree block %llu, which no tree reaches, removed (%llu bytes free)",
	       (unsigned long long)at, (unsigned long long)len);
	return 0;
}

int rp_fix_data_add(struct rp_ctx *c, const struct rp_note *n)
{
	uint8_t item[sizeof(struct btrfs_extent_item) + 64];
	struct ub_ref ref = { .type = BTRFS_EXTENT_DATA_REF_KEY, .root = n->tree, .owner = n->inode,
			      .offset = n->data_offset };
	struct ub_key k = { n->key.objectid, BTRFS_EXTENT_ITEM_KEY, n->data_len };
	uint64_t pflags = 0;
	uint32_t size;
	int ret = parent_flags(c, n->want2, &pflags);

	if (ret) {
		ub_err(c->log, "repair: the data at %llu: the extent item of leaf %llu cannot be read: %s",
		       (unsigned long long)k.objectid, (unsigned long long)n->want2, strerror(-ret));
		return ret;
	}
	/* from a leaf with full back references, the reference names the leaf (the kernel's rule) */
	if (pflags & BTRFS_BLOCK_FLAG_FULL_BACKREF)
		ref = (struct ub_ref){ .type = BTRFS_SHARED_DATA_REF_KEY, .parent = n->want2 };
	memset(item, 0, sizeof(item));
	UB_SET(btrfs_extent_item, refs, item, n->want);
	UB_SET(btrfs_extent_item, generation, item, n->data_gen);
	UB_SET(btrfs_extent_item, flags, item, BTRFS_EXTENT_FLAG_DATA);
	ub_inline_ref_write(item + sizeof(struct btrfs_extent_item), &ref, (uint32_t)n->want);
	size = (uint32_t)sizeof(struct btrfs_extent_item) + ub_ref_inline_size(ref.type);
	ret = ub_tree_insert_item(&c->e->fs.tc, ub_txn_ta(c->t), &c->e->fs.extent_tree->root, &k, item, size);
	if (ret) {
		ub_err(c->log, "repair: the data at %llu: its extent item cannot be inserted: %s",
		       (unsigned long long)k.objectid, strerror(-ret));
		return ret;
	}
	rp_say(c, n, 0, "data at %llu (%llu bytes): its extent item made again (%llu references of inode %llu, tree %llu)",
	       (unsigned long long)k.objectid, (unsigned long long)n->data_len, (unsigned long long)n->want,
	       (unsigned long long)n->inode, (unsigned long long)n->tree);
	return 0;
}
