/* SPDX-License-Identifier: MIT */
/*
 * Repair of the extent tree's counts: an extent item's refs set to the number
 * of references the check counted (the pointers that reach a tree block, the
 * file extent items that point at data). Fewer than the truth would let a
 * later drop free a block still in use; the check's count is the truth once
 * every tree was walked, which is when the checker offers this cure.
 */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "repair/repair_priv.h"
#include "txn/backref.h"
#include "alloc/delayed_ref.h"

/* The extent item at `key` copied for change; one field (refs or generation) set to `want`, its old value in *was. */
static int extent_item_set(struct rp_ctx *c, const struct ub_key *key, bool generation, uint64_t want, uint64_t *was)
{
	struct ub_root *root = &c->e->fs.extent_tree->root;
	struct ub_path p;
	uint32_t size;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_search_slot(&c->e->fs.tc, ub_txn_ta(c->t), root, key, &p, 0, true);
	if (ret > 0)
		ret = -ENOENT;
	if (ret == 0) {
		uint8_t *d = ub_path_data_mut(&p, &size);

		if (!d || size < sizeof(struct btrfs_extent_item)) {
			ret = -EUCLEAN;
		} else if (generation) {
			*was = UB_GET(btrfs_extent_item, generation, d);
			UB_SET(btrfs_extent_item, generation, d, want);
			ub_path_mark_dirty(&p);
		} else {
			*was = UB_GET(btrfs_extent_item, refs, d);
			UB_SET(btrfs_extent_item, refs, d, want);
			ub_path_mark_dirty(&p);
		}
	}
	ub_path_release(&p);
	if (ret)
		ub_err(c->log, "repair: the extent item (%llu %u %llu) cannot be changed: %s",
		       (unsigned long long)key->objectid, key->type, (unsigned long long)key->offset, strerror(-ret));
	return ret;
}

int rp_fix_extent_refs(struct rp_ctx *c, const struct rp_note *n)
{
	uint64_t was = 0;
	int ret = extent_item_set(c, &n->key, false, n->want, &was);

	if (ret)
		return ret;
	if (was != n->want)
		rp_say(c, n, was, "extent %llu (%s): references %llu -> %llu", (unsigned long long)n->key.objectid,
		       n->key.type == BTRFS_METADATA_ITEM_KEY ? "tree block" : "extent item", (unsigned long long)was,
		       (unsigned long long)n->want);
	return 0;
}

int rp_fix_extent_gen(struct rp_ctx *c, const struct rp_note *n)
{
	uint64_t was = 0;
	int ret = n->want ? extent_item_set(c, &n->key, true, n->want, &was) : -EINVAL;

	if (ret)
		return ret;
	if (was != n->want)
		rp_say(c, n, was, "extent %llu: generation %llu -> %llu", (unsigned long long)n->key.objectid,
		       (unsigned long long)was, (unsigned long long)n->want);
	return 0;
}

/* ---- a tree block's extent item made again, a stray one removed ---- */

int rp_extent_claim(struct rp_ctx *c, struct rp_note *n)
{
	uint64_t at = n->key.objectid, len = c->e->fs.vol->nodesize;
	int ret = 0;

	if (n->fix == UB_CHK_FIX_DATA_ADD)
		len = n->data_len;
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

int rp_fix_extent_add(struct rp_ctx *c, const struct rp_note *n)
{
	struct ub_expect exp = { .owner = 0, .level = -1 };
	uint8_t item[sizeof(struct btrfs_extent_item) + sizeof(struct btrfs_tree_block_info) + 32];
	uint32_t refs_at;
	struct ub_ref ref = { .type = BTRFS_TREE_BLOCK_REF_KEY, .root = n->want };
	uint64_t at = n->key.objectid, pflags = 0, others = 0;
	struct ub_eb *eb = NULL;
	bool full = false;
	struct ub_key k;
	uint32_t size;
	int level;
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
	/*
	 * Reached by more pointers (a BLOCK_REF_ADD note each, applied after
	 * this): the count is all of them, and the block's own FULL_BACKREF flag,
	 * which decides how the kernel treats its children when it copies it,
	 * is what its children's references say it was.
	 */
	for (size_t i = 0; i < c->r->nnotes; i++)
		others += c->r->notes[i].fix == UB_CHK_FIX_BLOCK_REF_ADD && c->r->notes[i].inode == at;
	if (others)
		ret = rp_block_full_backref(c, eb, &full);
	level = ub_eb_level(eb);
	/* the item in the filesystem's form: skinny, or with a tree_block_info (first key, level) before the refs */
	if (c->e->incompat & BTRFS_FEATURE_INCOMPAT_SKINNY_METADATA)
		k = (struct ub_key){ at, BTRFS_METADATA_ITEM_KEY, ub_eb_level(eb) };
	else
		k = (struct ub_key){ at, BTRFS_EXTENT_ITEM_KEY, c->e->fs.vol->nodesize };
	refs_at = ub_extent_refs_start(k.type, false);
	memset(item, 0, sizeof(item));
	UB_SET(btrfs_extent_item, refs, item, 1 + others);
	UB_SET(btrfs_extent_item, generation, item, ub_eb_generation(eb));
	UB_SET(btrfs_extent_item, flags, item,
	       BTRFS_EXTENT_FLAG_TREE_BLOCK | (full ? BTRFS_BLOCK_FLAG_FULL_BACKREF : 0));
	if (refs_at > UB_EXTENT_ITEM_SIZE) {
		struct ub_key first = { 0, 0, 0 };

		if (ub_eb_nritems(eb))
			ub_eb_item_key(eb, 0, &first);
		ub_key_write(item + UB_EXTENT_ITEM_SIZE + offsetof(struct btrfs_tree_block_info, key), &first);
		UB_SET(btrfs_tree_block_info, level, item + UB_EXTENT_ITEM_SIZE, (uint8_t)ub_eb_level(eb));
	}
	ub_eb_put(&c->e->fs.tc, eb);
	if (ret) {
		ub_err(c->log, "repair: tree block %llu: the references of its children cannot be read: %s",
		       (unsigned long long)at, strerror(-ret));
		return ret;
	}
	/* below a node with full back references, the reference names that node (the kernel's rule) */
	if (n->want2) {
		ret = rp_parent_flags(c, n->want2, &pflags);
		if (ret) {
			ub_err(c->log, "repair: tree block %llu: the extent item of its parent %llu cannot be read: %s",
			       (unsigned long long)at, (unsigned long long)n->want2, strerror(-ret));
			return ret;
		}
		if (pflags & BTRFS_BLOCK_FLAG_FULL_BACKREF)
			ref = (struct ub_ref){ .type = BTRFS_SHARED_BLOCK_REF_KEY, .parent = n->want2 };
	}
	ub_inline_ref_write(item + refs_at, &ref, 1);
	size = refs_at + ub_ref_inline_size(ref.type);
	ret = ub_tree_insert_item(&c->e->fs.tc, ub_txn_ta(c->t), &c->e->fs.extent_tree->root, &k, item, size);
	if (ret) {
		ub_err(c->log, "repair: tree block %llu: its extent item cannot be inserted: %s", (unsigned long long)at,
		       strerror(-ret));
		return ret;
	}
	rp_say(c, n, 0, "tree block %llu (tree %llu, level %d): its extent item made again (%s %llu%s%s)",
	       (unsigned long long)at, (unsigned long long)n->want, level,
	       ref.type == BTRFS_TREE_BLOCK_REF_KEY ? "TREE_BLOCK_REF root" : "SHARED_BLOCK_REF parent",
	       (unsigned long long)(ref.type == BTRFS_TREE_BLOCK_REF_KEY ? ref.root : ref.parent),
	       others ? ", the other pointers' references follow" : "", full ? ", FULL_BACKREF" : "");
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
	uint32_t max = ub_max_extent_item_size(c->e->fs.vol->nodesize), size = sizeof(struct btrfs_extent_item);
	struct ub_key k = { n->key.objectid, BTRFS_EXTENT_ITEM_KEY, n->data_len };
	uint8_t *item;
	int ret;

	for (size_t i = 0; i < n->ndrefs; i++)
		size += ub_ref_inline_size(n->drefs[i].type);
	/* the kernel keeps references inline while the item stays below its limit; more take keyed items */
	if (size >= max) {
		ub_err(c->log, "repair: the data at %llu has %zu references, more than one extent item holds: left",
		       (unsigned long long)k.objectid, n->ndrefs);
		return -EOPNOTSUPP;
	}
	item = calloc(1, size);
	if (!item)
		return -ENOMEM;
	UB_SET(btrfs_extent_item, refs, item, n->want);
	UB_SET(btrfs_extent_item, generation, item, n->data_gen);
	UB_SET(btrfs_extent_item, flags, item, BTRFS_EXTENT_FLAG_DATA);
	size = sizeof(struct btrfs_extent_item);
	for (size_t i = 0; i < n->ndrefs; i++) {
		const struct rp_dref *d = &n->drefs[i];
		struct ub_ref r = { .type = d->type, .root = d->root, .owner = d->ino, .offset = d->offset,
				    .parent = d->parent };

		ub_inline_ref_write(item + size, &r, d->count);
		size += ub_ref_inline_size(d->type);
	}
	ret = ub_tree_insert_item(&c->e->fs.tc, ub_txn_ta(c->t), &c->e->fs.extent_tree->root, &k, item, size);
	free(item);
	if (ret) {
		ub_err(c->log, "repair: the data at %llu: its extent item cannot be inserted: %s",
		       (unsigned long long)k.objectid, strerror(-ret));
		return ret;
	}
	rp_say(c, n, 0, "data at %llu (%llu bytes): its extent item made again (%llu references in %zu back references)",
	       (unsigned long long)k.objectid, (unsigned long long)n->data_len, (unsigned long long)n->want, n->ndrefs);
	return 0;
}

/* ---- the references of data that lost its extent item, from the file trees ---- */

static int u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static struct rp_note *note_at(struct rp_ctx *c, uint64_t at)
{
	for (size_t i = 0; i < c->r->nnotes; i++)
		if (c->r->notes[i].fix == UB_CHK_FIX_DATA_ADD && c->r->notes[i].key.objectid == at)
			return &c->r->notes[i];
	return NULL;
}

/* One file extent item's reference, into its note's list (same reference: its count grows). */
static int add_dref(struct rp_note *n, const struct rp_dref *d)
{
	for (size_t i = 0; i < n->ndrefs; i++) {
		struct rp_dref *e = &n->drefs[i];

		if (e->type == d->type && e->root == d->root && e->ino == d->ino && e->offset == d->offset &&
		    e->parent == d->parent) {
			e->count++;
			return 0;
		}
	}
	{
		struct rp_dref *m = realloc(n->drefs, (n->ndrefs + 1) * sizeof(*m));

		if (!m)
			return -ENOMEM;
		n->drefs = m;
		n->drefs[n->ndrefs++] = *d;
	}
	return 0;
}

/* The kernel's order of inline references: by type, then by its sequence value within the type. */
static int dref_cmp(const void *a, const void *b)
{
	const struct rp_dref *x = a, *y = b;
	struct ub_ref rx = { .type = x->type, .root = x->root, .owner = x->ino, .offset = x->offset, .parent = x->parent };
	struct ub_ref ry = { .type = y->type, .root = y->root, .owner = y->ino, .offset = y->offset, .parent = y->parent };
	uint64_t sx, sy;

	if (x->type != y->type)
		return x->type < y->type ? -1 : 1;
	sx = ub_ref_seq(&rx);
	sy = ub_ref_seq(&ry);
	return sx < sy ? -1 : sx > sy;
}

struct scan {
	uint64_t *leaves;    /* leaves of the trees walked before: a shared leaf counts once */
	size_t nleaves, cap;
	uint64_t *done;      /* this tree's leaves, added to `leaves` after it */
	size_t ndone, capdone;
};

static bool seen_leaf(const struct scan *s, uint64_t leaf)
{
	return s->nleaves && bsearch(&leaf, s->leaves, s->nleaves, sizeof(uint64_t), u64_cmp);
}

static int push(uint64_t **v, size_t *n, size_t *cap, uint64_t x)
{
	if (*n == *cap) {
		size_t nc = *cap ? *cap * 2 : 256;
		uint64_t *m = realloc(*v, nc * sizeof(*m));

		if (!m)
			return -ENOMEM;
		*v = m;
		*cap = nc;
	}
	(*v)[(*n)++] = x;
	return 0;
}

/* One file extent item at slot of leaf eb: its reference, when it points at a noted extent. */
static int scan_item(struct rp_ctx *c, const struct ub_eb *eb, const struct ub_key *k, const uint8_t *d, uint32_t size)
{
	uint64_t at, pflags = 0, leaf = ub_eb_start(eb);
	struct rp_note *n;
	struct rp_dref r = { 0 };
	uint8_t type;
	int ret;

	if (size < sizeof(struct btrfs_file_extent_item))
		return 0;
	type = (uint8_t)UB_GET(btrfs_file_extent_item, type, d);
	if (type != BTRFS_FILE_EXTENT_REG && type != BTRFS_FILE_EXTENT_PREALLOC)
		return 0;
	at = UB_GET(btrfs_file_extent_item, disk_bytenr, d);
	if (!at || !(n = note_at(c, at)))
		return 0;
	if (n->data_found && n->data_len != UB_GET(btrfs_file_extent_item, disk_num_bytes, d))
		return -ESTALE;
	n->data_len = UB_GET(btrfs_file_extent_item, disk_num_bytes, d);
	if (!n->data_found || UB_GET(btrfs_file_extent_item, generation, d) < n->data_gen)
		n->data_gen = UB_GET(btrfs_file_extent_item, generation, d);
	n->data_found++;
	/* from a leaf with full back references, the reference names the leaf; else the leaf's tree */
	ret = rp_parent_flags(c, leaf, &pflags);
	if (ret)
		return ret;
	if (pflags & BTRFS_BLOCK_FLAG_FULL_BACKREF) {
		r.type = BTRFS_SHARED_DATA_REF_KEY;
		r.parent = leaf;
	} else {
		r.type = BTRFS_EXTENT_DATA_REF_KEY;
		r.root = ub_eb_owner(eb);
		r.ino = k->objectid;
		r.offset = k->offset - UB_GET(btrfs_file_extent_item, offset, d);
	}
	r.count = 1;
	return add_dref(n, &r);
}

static int scan_tree(struct rp_ctx *c, struct scan *s, const struct ub_root *root)
{
	struct ub_key k = { 0, 0, 0 };
	struct ub_path p;
	uint64_t cur = 0;
	bool skip = false;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_search(&c->e->fs.tc, root, &k, &p);
	ret = ret == 2 ? 1 : ret < 0 ? ret : 0;
	while (ret == 0) {
		const struct ub_eb *eb = p.nodes[0];
		const uint8_t *d;
		uint32_t size;

		if (ub_eb_start(eb) != cur) {
			cur = ub_eb_start(eb);
			skip = seen_leaf(s, cur);
			if (!skip && (ret = push(&s->done, &s->ndone, &s->capdone, cur)))
				break;
		}
		ub_path_key(&p, &k);
		if (!skip && k.type == BTRFS_EXTENT_DATA_KEY) {
			d = ub_path_data(&p, &size);
			ret = scan_item(c, eb, &k, d, size);
			if (ret)
				break;
		}
		ret = ub_tree_next(&p);
	}
	ub_path_release(&p);
	return ret == 1 ? 0 : ret;
}

int rp_data_scan(struct rp_ctx *c)
{
	struct scan s = { 0 };
	struct ub_key k = { BTRFS_FS_TREE_OBJECTID, BTRFS_ROOT_ITEM_KEY, 0 };
	uint64_t *ids = NULL;
	size_t nids = 0, capids = 0;
	struct ub_path p;
	bool any = false;
	int ret = 0;

	for (size_t i = 0; i < c->r->nnotes; i++)
		any |= c->r->notes[i].fix == UB_CHK_FIX_DATA_ADD;
	if (!any)
		return 0;
	/* the live subvolumes (refs > 0): a dropped one's leaves are the cleaner's, the check left them out too */
	ub_path_init(&p);
	ret = ub_tree_search(&c->e->fs.tc, &c->e->fs.root_tree->root, &k, &p);
	ret = ret == 2 ? 1 : ret < 0 ? ret : 0;
	while (ret == 0) {
		const uint8_t *d;
		uint32_t size;

		ub_path_key(&p, &k);
		if (k.objectid > BTRFS_LAST_FREE_OBJECTID) {
			ret = 1;
			break;
		}
		d = ub_path_data(&p, &size);
		if (k.type == BTRFS_ROOT_ITEM_KEY &&
		    (k.objectid == BTRFS_FS_TREE_OBJECTID || k.objectid >= BTRFS_FIRST_FREE_OBJECTID) &&
		    size >= offsetof(struct btrfs_root_item, refs) + 4 && UB_GET(btrfs_root_item, refs, d) &&
		    (ret = push(&ids, &nids, &capids, k.objectid)))
			break;
		ret = ub_tree_next(&p);
	}
	ub_path_release(&p);
	if (ret == 1)
		ret = 0;
	for (size_t i = 0; !ret && i < nids; i++) {
		struct ub_eroot *er;

		ret = ub_engine_root(c->e, ids[i], &er);
		if (!ret)
			ret = scan_tree(c, &s, &er->root);
		for (size_t j = 0; !ret && j < s.ndone; j++)
			ret = push(&s.leaves, &s.nleaves, &s.cap, s.done[j]);
		s.ndone = 0;
		if (!ret && s.nleaves)
			qsort(s.leaves, s.nleaves, sizeof(uint64_t), u64_cmp);
	}
	free(ids);
	free(s.leaves);
	free(s.done);
	for (size_t i = 0; !ret && i < c->r->nnotes; i++) {
		struct rp_note *n = &c->r->notes[i];

		if (n->fix != UB_CHK_FIX_DATA_ADD)
			continue;
		if (n->data_found != n->want || !n->data_len || n->data_len % c->e->fs.vol->sectorsize) {
			ub_err(c->log, "repair: the data at %llu: %llu file extent items point at it now, the check counted "
			       "%llu", (unsigned long long)n->key.objectid, (unsigned long long)n->data_found,
			       (unsigned long long)n->want);
			ret = -ESTALE;
			break;
		}
		qsort(n->drefs, n->ndrefs, sizeof(*n->drefs), dref_cmp);
	}
	return ret;
}

/* ---- a data reference counting more than the file extent items that make it ---- */

int rp_fix_data_ref_drop(struct rp_ctx *c, const struct rp_note *n)
{
	int ret;

	if (!n->want2 || n->want2 > INT64_MAX)
		return -EINVAL;
	/* the commit's reference queue lowers the count, removes the reference at zero, frees the extent with its last */
	ret = ub_dref_add_data(c->t->refs, n->key.objectid, n->key.offset, n->tree, n->inode, n->want, 0,
			       -(int64_t)n->want2, 0);
	if (ret) {
		ub_err(c->log, "repair: the data reference of extent %llu cannot be lowered: %s",
		       (unsigned long long)n->key.objectid, strerror(-ret));
		return ret;
	}
	rp_say(c, n, n->want2, "extent %llu: EXTENT_DATA_REF (root %llu inode %llu offset %llu) lowered by %llu, "
	       "which no file extent item makes", (unsigned long long)n->key.objectid, (unsigned long long)n->tree,
	       (unsigned long long)n->inode, (unsigned long long)n->want, (unsigned long long)n->want2);
	return 0;
}
