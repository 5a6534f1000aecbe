/* SPDX-License-Identifier: MIT */
/*
 * A tree block's individual back references made to agree with the pointers
 * that reach it: a reference no pointer stands for removed, a pointer without
 * one given its own. The checker decides which (lib/check/extent_refs.c, once
 * every tree was walked); the count of the item is the EXTENT_REFS cure's, run
 * before these, so a reference is added or removed here without touching it.
 * The new reference takes the form the kernel gives it (a SHARED_BLOCK_REF
 * below a node with full back references, else a TREE_BLOCK_REF), inline in
 * the item while the item stays below the kernel's limit, keyed after.
 */
#include <errno.h>
#include <string.h>
#include "repair/repair_priv.h"
#include "txn/backref.h"

/* A tree block's inline references: 9 bytes each (type, value), after the item and, unskinny, its block info. */
#define BLOCK_REF_SIZE ((uint32_t)sizeof(struct btrfs_extent_inline_ref))

static uint32_t refs_start(const struct ub_key *k)
{
	return UB_EXTENT_ITEM_SIZE + (k->type == BTRFS_EXTENT_ITEM_KEY ? (uint32_t)sizeof(struct btrfs_tree_block_info) : 0);
}

static const char *ref_name(uint8_t type)
{
	return type == BTRFS_SHARED_BLOCK_REF_KEY ? "SHARED_BLOCK_REF parent" : "TREE_BLOCK_REF root";
}

/* The offset of the inline reference (type, value) in the item d of size bytes; 0 when it has none. */
static uint32_t find_inline(const struct ub_key *k, const uint8_t *d, uint32_t size, uint8_t type, uint64_t value)
{
	for (uint32_t at = refs_start(k); at + BLOCK_REF_SIZE <= size; at += BLOCK_REF_SIZE)
		if ((uint8_t)UB_GET(btrfs_extent_inline_ref, type, d + at) == type &&
		    UB_GET(btrfs_extent_inline_ref, offset, d + at) == value)
			return at;
	return 0;
}

/* The extent item of the node at `parent`: its flags (FULL_BACKREF decides how its children are referenced). */
int rp_parent_flags(struct rp_ctx *c, uint64_t parent, uint64_t *flags)
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

/* Whether every inline record of the item is a tree block reference (the only kind moved here). */
static bool block_refs_only(const struct ub_key *k, const uint8_t *d, uint32_t size)
{
	uint32_t at = refs_start(k);

	if (size < at || (size - at) % BLOCK_REF_SIZE)
		return false;
	for (; at < size; at += BLOCK_REF_SIZE) {
		uint8_t t = (uint8_t)UB_GET(btrfs_extent_inline_ref, type, d + at);

		if (t != BTRFS_TREE_BLOCK_REF_KEY && t != BTRFS_SHARED_BLOCK_REF_KEY)
			return false;
	}
	return true;
}

static int del_keyed(struct rp_ctx *c, const struct rp_note *n)
{
	struct ub_root *root = &c->e->fs.extent_tree->root;
	struct ub_path p;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_search_slot(&c->e->fs.tc, ub_txn_ta(c->t), root, &n->key, &p, -1, true);
	if (ret > 0)
		ret = -ESTALE;
	if (!ret)
		ret = ub_tree_del_items(&c->e->fs.tc, ub_txn_ta(c->t), root, &p, p.slots[0], 1);
	ub_path_release(&p);
	return ret;
}

static int del_inline(struct rp_ctx *c, const struct rp_note *n)
{
	struct ub_path p;
	uint32_t size, at;
	uint8_t *d;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_search_slot(&c->e->fs.tc, ub_txn_ta(c->t), &c->e->fs.extent_tree->root, &n->key, &p, 0, true);
	if (ret > 0)
		ret = -ESTALE;
	if (!ret) {
		d = ub_path_data_mut(&p, &size);
		if (!d || !block_refs_only(&n->key, d, size))
			ret = -EUCLEAN;
		else if (!(at = find_inline(&n->key, d, size, (uint8_t)n->want, n->want2)))
			ret = -ESTALE; /* not what the check saw */
		else {
			memmove(d + at, d + at + BLOCK_REF_SIZE, size - at - BLOCK_REF_SIZE);
			ub_tree_truncate_item(&c->e->fs.tc, &p, size - BLOCK_REF_SIZE, true);
			ub_path_mark_dirty(&p);
		}
	}
	ub_path_release(&p);
	return ret;
}

int rp_fix_block_ref_del(struct rp_ctx *c, const struct rp_note *n)
{
	bool keyed = n->key.type == BTRFS_TREE_BLOCK_REF_KEY || n->key.type == BTRFS_SHARED_BLOCK_REF_KEY;
	int ret;

	if (keyed && (n->key.type != n->want || n->key.offset != n->want2))
		return -EINVAL;
	ret = keyed ? del_keyed(c, n) : del_inline(c, n);
	if (ret) {
		ub_err(c->log, "repair: tree block %llu: its %s %llu cannot be removed: %s",
		       (unsigned long long)n->key.objectid, ref_name((uint8_t)n->want), (unsigned long long)n->want2,
		       strerror(-ret));
		return ret;
	}
	rp_say(c, n, 0, "tree block %llu: its %s%s %llu removed, no pointer it names reaches the block",
	       (unsigned long long)n->key.objectid, keyed ? "keyed " : "", ref_name((uint8_t)n->want),
	       (unsigned long long)n->want2);
	return 0;
}

/* Whether the keyed form of r is there already. */
static int keyed_exists(struct rp_ctx *c, const struct ub_ref *r, uint64_t bytenr)
{
	struct ub_key k;
	struct ub_path p;
	int ret;

	ub_ref_key(r, bytenr, &k);
	ub_path_init(&p);
	ret = ub_tree_search(&c->e->fs.tc, &c->e->fs.extent_tree->root, &k, &p);
	ub_path_release(&p);
	return ret < 0 ? ret : ret == 0;
}

/* The key of tree block at's extent item (skinny or not), as it is in this transaction. */
static int item_key(struct rp_ctx *c, uint64_t at, struct ub_key *k)
{
	struct ub_path p;
	int ret;

	*k = (struct ub_key){ at, BTRFS_EXTENT_ITEM_KEY, 0 };
	ub_path_init(&p);
	ret = ub_tree_search(&c->e->fs.tc, &c->e->fs.extent_tree->root, k, &p);
	if (ret == 0 || ret == 1) {
		ub_path_key(&p, k);
		ret = k->objectid == at && (k->type == BTRFS_EXTENT_ITEM_KEY || k->type == BTRFS_METADATA_ITEM_KEY)
			      ? 0
			      : -ESTALE;
	} else if (ret > 0) {
		ret = -ESTALE;
	}
	ub_path_release(&p);
	return ret;
}

/*
 * Inline, where the kernel puts it: after the references of a lower type,
 * before the first of its own type with a smaller value (the kernel's walk
 * stops there when it looks a reference up, so it inserts there too).
 */
static int add_inline(struct rp_ctx *c, const struct ub_key *key, const struct ub_ref *r, uint64_t value)
{
	struct ub_root *root = &c->e->fs.extent_tree->root;
	struct ub_path p;
	uint32_t size, at;
	uint8_t *d;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_search_slot(&c->e->fs.tc, ub_txn_ta(c->t), root, key, &p, (int)BLOCK_REF_SIZE, true);
	if (ret > 0)
		ret = -ESTALE;
	if (!ret)
		ret = ub_tree_extend_item(&c->e->fs.tc, ub_txn_ta(c->t), root, &p, BLOCK_REF_SIZE);
	if (!ret) {
		d = ub_path_data_mut(&p, &size);
		if (!d || size < refs_start(key) + BLOCK_REF_SIZE) {
			ret = -EUCLEAN;
		} else {
			for (at = refs_start(key); at + BLOCK_REF_SIZE < size; at += BLOCK_REF_SIZE) {
				uint8_t t = (uint8_t)UB_GET(btrfs_extent_inline_ref, type, d + at);

				if (t > r->type ||
				    (t == r->type && UB_GET(btrfs_extent_inline_ref, offset, d + at) < value))
					break;
			}
			memmove(d + at + BLOCK_REF_SIZE, d + at, size - BLOCK_REF_SIZE - at);
			ub_inline_ref_write(d + at, r, 1);
			ub_path_mark_dirty(&p);
		}
	}
	ub_path_release(&p);
	return ret;
}

int rp_fix_block_ref_add(struct rp_ctx *c, const struct rp_note *n)
{
	struct ub_ref r = { .type = BTRFS_TREE_BLOCK_REF_KEY, .root = n->want };
	uint64_t at = n->key.objectid, pflags = 0, value = n->want;
	uint32_t size = 0, max = ub_max_extent_item_size(c->e->fs.vol->nodesize);
	struct ub_key key;
	struct ub_path p;
	const uint8_t *d;
	bool keyed = false, there = false;
	int ret = 0;

	/* below a node with full back references the reference names that node (the kernel's rule) */
	if (n->want2) {
		ret = rp_parent_flags(c, n->want2, &pflags);
		if (ret) {
			ub_err(c->log, "repair: tree block %llu: the extent item of its parent %llu cannot be read: %s",
			       (unsigned long long)at, (unsigned long long)n->want2, strerror(-ret));
			return ret;
		}
		if (pflags & BTRFS_BLOCK_FLAG_FULL_BACKREF) {
			r = (struct ub_ref){ .type = BTRFS_SHARED_BLOCK_REF_KEY, .parent = n->want2 };
			value = n->want2;
		}
	}
	/*
	 * The item as it is in this transaction (made by EXTENT_ADD just before,
	 * when the block had lost it): is the reference there already (two
	 * pointers, one reference)?
	 */
	ret = item_key(c, at, &key);
	ub_path_init(&p);
	if (!ret)
		ret = ub_tree_search(&c->e->fs.tc, &c->e->fs.extent_tree->root, &key, &p);
	if (ret == 0) {
		d = ub_path_data(&p, &size);
		if (!d || !block_refs_only(&key, d, size))
			ret = -EUCLEAN;
		else
			there = find_inline(&key, d, size, r.type, value) != 0;
	} else if (ret > 0) {
		ret = -ESTALE;
	}
	ub_path_release(&p);
	if (!ret && !there) {
		ret = keyed_exists(c, &r, at);
		there = ret > 0;
		ret = ret > 0 ? 0 : ret;
	}
	if (!ret && !there) {
		keyed = size + BLOCK_REF_SIZE >= max;
		if (!keyed) {
			ret = add_inline(c, &key, &r, value);
			/* no room in its leaf for a longer item: the keyed form, as the kernel would fall back to */
			keyed = ret == -ENOSPC || ret == -EOVERFLOW;
		}
		if (keyed) {
			struct ub_key k;

			ub_ref_key(&r, at, &k);
			ret = ub_tree_insert_item(&c->e->fs.tc, ub_txn_ta(c->t), &c->e->fs.extent_tree->root, &k, NULL,
						  ub_ref_keyed_size(r.type));
		}
	}
	if (ret) {
		ub_err(c->log, "repair: tree block %llu: a %s %llu cannot be added: %s", (unsigned long long)at,
		       ref_name(r.type), (unsigned long long)value, strerror(-ret));
		return ret;
	}
	if (there)
		return 0;
	rp_say(c, n, 0, "tree block %llu: %s%s %llu added for the pointer from %s %llu", (unsigned long long)at,
	       keyed ? "keyed " : "", ref_name(r.type), (unsigned long long)value, n->want2 ? "node" : "the root item of tree",
	       (unsigned long long)(n->want2 ? n->want2 : n->want));
	return 0;
}

/*
 * Whether the extent at bytenr has a reference of `type` (SHARED_BLOCK_REF,
 * SHARED_DATA_REF) naming parent, inline or keyed.
 */
static int names_parent(struct rp_ctx *c, uint64_t bytenr, uint8_t type, uint64_t parent)
{
	struct ub_root *root = &c->e->fs.extent_tree->root;
	struct ub_key k = { bytenr, type, parent };
	struct ub_path p;
	const uint8_t *d;
	uint32_t size, at;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_search(&c->e->fs.tc, root, &k, &p);
	ub_path_release(&p);
	if (ret <= 0)
		return ret < 0 ? ret : 1;
	k = (struct ub_key){ bytenr, BTRFS_EXTENT_ITEM_KEY, 0 };
	ub_path_init(&p);
	ret = ub_tree_search(&c->e->fs.tc, root, &k, &p);
	if (ret == 0 || ret == 1) {
		ub_path_key(&p, &k);
		d = ub_path_data(&p, &size);
		ret = 0;
		if (k.objectid == bytenr && (k.type == BTRFS_EXTENT_ITEM_KEY || k.type == BTRFS_METADATA_ITEM_KEY) && d &&
		    size >= UB_EXTENT_ITEM_SIZE) {
			at = UB_EXTENT_ITEM_SIZE;
			if (k.type == BTRFS_EXTENT_ITEM_KEY &&
			    (UB_GET(btrfs_extent_item, flags, d) & BTRFS_EXTENT_FLAG_TREE_BLOCK))
				at += sizeof(struct btrfs_tree_block_info);
			while (!ret && at + sizeof(struct btrfs_extent_inline_ref) <= size) {
				uint8_t t = (uint8_t)UB_GET(btrfs_extent_inline_ref, type, d + at);
				uint32_t step = ub_ref_inline_size(t);

				if (!step || at + step > size)
					break;
				ret = t == type && UB_GET(btrfs_extent_inline_ref, offset, d + at) == parent;
				at += step;
			}
		}
	} else if (ret > 0) {
		ret = 0;
	}
	ub_path_release(&p);
	return ret;
}

int rp_block_full_backref(struct rp_ctx *c, const struct ub_eb *eb, bool *full)
{
	uint64_t at = ub_eb_start(eb);
	int ret = 0;

	*full = false;
	for (int i = 0; !ret && !*full && i < (int)ub_eb_nritems(eb); i++) {
		if (ub_eb_level(eb)) {
			ret = names_parent(c, ub_eb_node_blockptr(eb, i), BTRFS_SHARED_BLOCK_REF_KEY, at);
		} else {
			struct ub_key k;
			uint32_t size;
			const uint8_t *d = ub_eb_item_data(eb, i, &size);
			uint8_t type;

			ub_eb_item_key(eb, i, &k);
			if (k.type != BTRFS_EXTENT_DATA_KEY || !d || size < sizeof(struct btrfs_file_extent_item))
				continue;
			type = (uint8_t)UB_GET(btrfs_file_extent_item, type, d);
			if ((type != BTRFS_FILE_EXTENT_REG && type != BTRFS_FILE_EXTENT_PREALLOC) ||
			    !UB_GET(btrfs_file_extent_item, disk_bytenr, d))
				continue;
			ret = names_parent(c, UB_GET(btrfs_file_extent_item, disk_bytenr, d), BTRFS_SHARED_DATA_REF_KEY, at);
		}
		if (ret > 0)
			*full = true, ret = 0;
	}
	return ret;
}
