// SPDX-License-Identifier: MIT
/*
 * Relocation: every extent of one block group moved elsewhere, so that the
 * group can be removed (a balance, a convert, a device removal).
 *
 * The group is made read-only in the allocator first (nothing new goes in),
 * then each extent it holds is moved in its own operation:
 *
 *  - A tree block of a subvolume tree (snapshots may share it) is copied
 *    once, to space outside the group, and every parent that points at it
 *    is re-pointed at the copy, its back references moving with the
 *    pointers; a parent older than the transaction is copied the same way,
 *    up to the roots (see "tree blocks kept shared" below). So what several
 *    snapshots shared before stays shared: one copy, as the kernel's
 *    relocation makes. A block of a tree no snapshot shares (extent,
 *    checksum, root trees...) is copied by the trees' own copy-on-write: a
 *    search with copy-on-write for its first key copies the path.
 *  - A data extent is read through the checked data path (every copy,
 *    parity, checksums), written whole to a new extent, its checksums put
 *    for the new range, and every file extent item that points at it changed
 *    to point at the copy, leaf by leaf: the back references of the old
 *    extent name the leaf (by tree, inode and offset, found by a search; or
 *    by the leaf's address). A leaf older than the transaction is changed in
 *    a copy put in its place in every tree, as a tree block is moved, so
 *    leaves snapshots share stay shared. The file extent items keep
 *    everything else (compression, offsets, sharing: every reflink and
 *    snapshot ends up on the one copy).
 *
 * References are read from the extent tree of the running transaction with
 * the queued changes of the transaction folded in (ub_dref_find), so that a
 * move done earlier in the same transaction counts. The old extents' space is
 * freed by the reference bookkeeping when their last reference goes, and the
 * group, empty after the commit, is removed as the cleaner removes unused
 * groups (ub_chunk_remove).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "fsw/fsw.h"
#include "txn/backref.h"
#include "ubtrfs/balance.h"

#define FE_GET(f, p) UB_GET(btrfs_file_extent_item, f, p)
#define FE_SET(f, p, v) UB_SET(btrfs_file_extent_item, f, p, v)

/* one live back reference of an extent and its count */
struct lref {
	struct ub_ref r;
	int64_t count;
};

struct refs {
	struct lref *a;
	size_t n, cap;
	bool found, is_data;
	uint64_t num_bytes; /* data: the extent's length; tree blocks: nodesize */
	int level;
	uint64_t flags;
};

static void refs_free(struct refs *rs)
{
	free(rs->a);
	memset(rs, 0, sizeof(*rs));
}

static int refs_add(struct refs *rs, const struct ub_ref *r, int64_t count)
{
	for (size_t i = 0; i < rs->n; i++) {
		if (ub_ref_same(&rs->a[i].r, r)) {
			rs->a[i].count += count;
			return 0;
		}
	}
	if (rs->n == rs->cap) {
		size_t cap = rs->cap ? rs->cap * 2 : 8;
		struct lref *a = realloc(rs->a, cap * sizeof(*a));

		if (!a)
			return -ENOMEM;
		rs->a = a;
		rs->cap = cap;
	}
	rs->a[rs->n++] = (struct lref){ *r, count };
	return 0;
}

/* A digest of the live references: a pass that leaves it unchanged made no progress. */
static uint64_t refs_digest(const struct refs *rs)
{
	uint64_t h = 1469598103934665603ULL;

	for (size_t i = 0; i < rs->n; i++) {
		const struct lref *l = &rs->a[i];
		uint64_t v[6] = { l->r.type, l->r.root, l->r.parent, l->r.owner, l->r.offset, (uint64_t)l->count };

		if (l->count <= 0)
			continue;
		for (int j = 0; j < 6; j++)
			h = (h ^ v[j]) * 1099511628211ULL + (uint64_t)i;
	}
	return h;
}

static int64_t refs_total(const struct refs *rs)
{
	int64_t t = 0;

	for (size_t i = 0; i < rs->n; i++)
		t += rs->a[i].count > 0 ? rs->a[i].count : 0;
	return t;
}

/*
 * The live back references of the extent at `bytenr`: its extent item's
 * inline refs and keyed ref items in the running transaction's extent tree,
 * with the transaction's queued changes added.
 */
static int extent_refs(struct ub_txn *t, uint64_t bytenr, struct refs *rs)
{
	struct ub_engine *e = t->e;
	struct ub_key min = { bytenr, 0, 0 }, max = { bytenr, UINT8_MAX, UINT64_MAX }, k;
	const struct ub_dref_head *h;
	struct ub_tree_iter it;
	const uint8_t *d;
	uint32_t size;
	int ret;

	memset(rs, 0, sizeof(*rs));
	ret = ub_tree_iter_start(&it, &e->fs.tc, &e->fs.extent_tree->root, &min, &max);
	while (ret == 0 && (ret = ub_tree_iter_next(&it, &k, &d, &size)) == 0) {
		struct ub_ref r;
		uint32_t count, pos;

		if (k.type == BTRFS_EXTENT_ITEM_KEY || k.type == BTRFS_METADATA_ITEM_KEY) {
			if (size < UB_EXTENT_ITEM_SIZE) {
				ret = -EUCLEAN;
				break;
			}
			rs->found = true;
			rs->flags = UB_GET(btrfs_extent_item, flags, d);
			rs->is_data = (rs->flags & BTRFS_EXTENT_FLAG_DATA) != 0;
			pos = UB_EXTENT_ITEM_SIZE;
			if (k.type == BTRFS_METADATA_ITEM_KEY) {
				rs->level = (int)k.offset;
				rs->num_bytes = e->fs.vol->nodesize;
			} else if (!rs->is_data) {
				/* a tree block in the old form: a tree_block_info (first key, level) first */
				if (size < UB_EXTENT_ITEM_SIZE + sizeof(struct btrfs_tree_block_info)) {
					ret = -EUCLEAN;
					break;
				}
				rs->level = UB_GET(btrfs_tree_block_info, level, d + UB_EXTENT_ITEM_SIZE);
				rs->num_bytes = k.offset;
				pos += (uint32_t)sizeof(struct btrfs_tree_block_info);
			} else {
				rs->num_bytes = k.offset;
			}
			while ((ret = ub_inline_ref_next(d, size, &pos, &r, &count)) == 0) {
				ret = refs_add(rs, &r, count);
				if (ret)
					break;
			}
			if (ret < 0)
				break;
			ret = 0;
			continue;
		}
		if (k.type != BTRFS_TREE_BLOCK_REF_KEY && k.type != BTRFS_SHARED_BLOCK_REF_KEY &&
		    k.type != BTRFS_EXTENT_DATA_REF_KEY && k.type != BTRFS_SHARED_DATA_REF_KEY)
			continue;
		ret = ub_keyed_ref_read(&k, d, size, &r, &count);
		if (!ret)
			ret = refs_add(rs, &r, count);
		if (ret)
			break;
	}
	ub_tree_iter_end(&it);
	if (ret < 0) {
		if (ret == -EUCLEAN)
			ub_err(&e->fs.log, "relocation: the back references of extent %" PRIu64
			       " in the extent tree do not parse", bytenr);
		refs_free(rs);
		return ret;
	}
	h = ub_dref_find(t->refs, bytenr);
	if (h)
		rs->flags |= h->set_flags;
	for (int i = 0; h && i < h->nrefs; i++) {
		const struct ub_dref *q = &h->refs[i];
		struct ub_ref r = { .type = q->type, .root = q->root, .parent = q->parent, .owner = q->objectid,
				    .offset = q->offset };

		if (h->new_extent)
			rs->found = true;
		ret = refs_add(rs, &r, q->delta);
		if (ret) {
			refs_free(rs);
			return ret;
		}
	}
	return 0;
}

/* The tree object for root id `id`, as the engine has it. */
static int tree_of(struct ub_engine *e, uint64_t id, struct ub_root **root)
{
	struct ub_eroot *er = ub_roots_find(e->fs.roots, id);
	int ret = 0;

	if (!er || !er->root.bytenr)
		ret = ub_engine_root(e, id, &er);
	if (ret) {
		ub_err(&e->fs.log, "relocation: tree %" PRIu64 " is referenced but cannot be loaded (%s)", id,
		       strerror(-ret));
		return ret;
	}
	*root = &er->root;
	return 0;
}

/* A tree that reaches the tree block at `bytenr` (of `level`): by its own reference or a parent's. */
static int reaching_tree(struct ub_txn *t, uint64_t bytenr, int depth, uint64_t *tree)
{
	struct refs rs;
	int ret;

	if (depth > UB_MAX_LEVEL)
		return -EUCLEAN;
	ret = extent_refs(t, bytenr, &rs);
	if (ret)
		return ret;
	ret = -ENOENT;
	for (size_t i = 0; i < rs.n && ret; i++) {
		if (rs.a[i].count > 0 && rs.a[i].r.type == BTRFS_TREE_BLOCK_REF_KEY) {
			*tree = rs.a[i].r.root;
			ret = 0;
		}
	}
	for (size_t i = 0; i < rs.n && ret == -ENOENT; i++)
		if (rs.a[i].count > 0 && rs.a[i].r.type == BTRFS_SHARED_BLOCK_REF_KEY)
			ret = reaching_tree(t, rs.a[i].r.parent, depth + 1, tree);
	refs_free(&rs);
	return ret;
}

/* The first key of the tree block at `bytenr`, read as any reader reads it. */
static int block_first_key(struct ub_engine *e, uint64_t bytenr, int level, struct ub_key *key)
{
	struct ub_expect exp = { .level = level, .slot = -1 };
	struct ub_eb *eb;
	int ret = ub_tree_read_block(&e->fs.tc, bytenr, &exp, &eb);

	if (ret)
		return ret;
	/* an empty block is an empty tree's root: any key reaches it */
	if (ub_eb_nritems(eb) == 0)
		*key = (struct ub_key){ 0, 0, 0 };
	else
		ub_eb_item_key(eb, 0, key);
	ub_eb_put(&e->fs.tc, eb);
	return ret;
}

/*
 * Copy-on-write down `tree` to `key`: every block of the path older than the
 * running transaction is copied (the tree layer places copies through the
 * allocator, which hands out nothing in a read-only group).
 */
static int cow_path(struct ub_txn *t, uint64_t tree, const struct ub_key *key)
{
	struct ub_root *root;
	struct ub_path p;
	int ret = tree_of(t->e, tree, &root);

	if (ret)
		return ret;
	ub_path_init(&p);
	ret = ub_tree_search_slot(&t->e->fs.tc, ub_txn_ta(t), root, key, &p, 0, true);
	ub_path_release(&p);
	return ret < 0 ? ret : 0;
}

/*
 * A block only one tree reaches, in a tree no snapshot shares (the extent,
 * checksum, root trees...): copy-on-write through that tree, until no
 * reference is left. A pass that changes nothing means the back references
 * and the trees disagree: -EUCLEAN, named.
 */
static int cow_tree_block(struct ub_txn *t, uint64_t bytenr, int level)
{
	uint64_t before = 0;

	for (int pass = 0;; pass++) {
		struct ub_key key;
		uint64_t tree, digest;
		struct refs rs;
		int64_t now;
		int ret = extent_refs(t, bytenr, &rs);

		if (ret)
			return ret;
		now = refs_total(&rs);
		digest = refs_digest(&rs);
		refs_free(&rs);
		if (now <= 0)
			return 0;
		if ((pass && digest == before) || pass > 4096) {
			ub_err(&t->e->fs.log, "relocation: tree block %" PRIu64 " (level %d) keeps %" PRId64
			       " references that no copy-on-write through its trees takes away", bytenr, level, now);
			return -EUCLEAN;
		}
		before = digest;
		ret = reaching_tree(t, bytenr, 0, &tree);
		if (ret == -ENOENT) {
			ub_err(&t->e->fs.log, "relocation: tree block %" PRIu64 " is referenced, but no tree reaches it",
			       bytenr);
			return -EUCLEAN;
		}
		if (!ret)
			ret = block_first_key(t->e, bytenr, level, &key);
		if (!ret)
			ret = cow_path(t, tree, &key);
		if (ret)
			return ret;
	}
}

/*
 * ---- tree blocks kept shared ----
 *
 * A block of a subvolume tree may be reached by several trees (snapshots),
 * through several parents. Copy-on-write through each tree would give each
 * its own copy; instead the block is copied once, to a new address, and every
 * parent is re-pointed at the copy, as the kernel's relocation does:
 *
 *  - The copy keeps everything of the block: items, owner, header flags and
 *    generation. Keeping the generation keeps what readers derive from it:
 *    a block not newer than its tree's last snapshot may be shared (the
 *    kernel's and ours look its references up before changing it), and a
 *    block of an older generation is never changed in place, not even in
 *    this transaction (the tree layer copies it first). Its extent item says
 *    the same generation (ub_dref_set_generation). A tree's root is never
 *    shared: its copy is of this transaction, as its root item then says.
 *  - Its children's references stay valid: by its owner tree (they stand for
 *    whichever block the trees reach them through), or, for a block with
 *    full back references, by parent address: those move to the copy.
 *  - Each back reference of the block names one parent: by tree (a node of
 *    that tree, found by a search for the block's first key, or the tree's
 *    root pointer) or by address (a node with full back references). The
 *    parent is changed in place when it is a block of this transaction not
 *    yet written, or else copied the same way, its slot pointing at the
 *    copy, and put in place of the old one in turn (up to the roots). So a
 *    parent shared by snapshots stays shared too, and the work per block is
 *    its parents once: each copy is a block of the transaction afterwards.
 *  - The references move with the pointers, one by one: the old block loses
 *    its last one when its last parent is re-pointed, and is freed.
 */

/* The extent flags of tree block `bytenr` as they stand (item and queued changes). */
static int block_flags(struct ub_txn *t, uint64_t bytenr, uint64_t *flags)
{
	struct refs rs;
	int ret = extent_refs(t, bytenr, &rs);

	if (ret)
		return ret;
	*flags = rs.flags;
	refs_free(&rs);
	return 0;
}

/* A pointer of node `eb` at `slot` is set to the block at `bytenr` of generation `gen` (the key stays). */
static void set_child(struct ub_eb *eb, int slot, uint64_t bytenr, uint64_t gen)
{
	uint8_t *p = eb->data + UB_HEADER_SIZE + (uint32_t)slot * UB_KEY_PTR_SIZE;

	UB_SET(ub_disk_key_ptr, blockptr, p, bytenr);
	UB_SET(ub_disk_key_ptr, generation, p, gen);
}

/*
 * A copy of `old` at a new address outside the group (the allocator skips
 * it), the same in every byte that matters; a node's pointer at `slot` (>= 0)
 * then points at (`child`, `gen`). The copy's extent is new in this
 * transaction: a reference by its owner holds it until release_copy, so that
 * the references the parents move to it find a new extent. With full back
 * references the children's references by the old address move to the copy.
 */
static int copy_block(struct ub_txn *t, const struct ub_eb *old, bool full, int slot, uint64_t child,
		      uint64_t child_gen, struct ub_eb **out)
{
	struct ub_engine *e = t->e;
	uint32_t ns = e->fs.vol->nodesize;
	uint64_t start, flags, gen;
	struct ub_eroot *er;
	struct ub_eb *copy;
	int level = ub_eb_level(old);
	int ret = ub_alloc_reserve(e->alloc, BTRFS_BLOCK_GROUP_METADATA, ns, 0, &start);

	if (ret) {
		if (ret == -ENOSPC)
			ub_err(&e->fs.log, "relocation: no metadata space left outside the group for a copy of tree block %"
			       PRIu64, old->start);
		return ret;
	}
	ret = ub_dref_add_tree(t->refs, start, ns, level, ub_eb_owner(old), 0, 1, UB_DREF_NEW_EXTENT);
	if (ret) {
		ub_alloc_unreserve(e->alloc, start, ns);
		return ret;
	}
	/*
	 * A tree's root is never shared: its copy is of this transaction, as the
	 * tree's root item and the extent item say (btrfs check compares them).
	 */
	er = ub_roots_find(e->fs.roots, ub_eb_owner(old));
	gen = er && er->root.bytenr == old->start ? t->transid : ub_eb_generation(old);
	ret = ub_tree_new_block(&e->fs.tc, start, ub_eb_owner(old), level, gen, &copy);
	if (ret)
		return ret; /* the reference queued owns the space: the failed operation takes the transaction down */
	if (gen != t->transid)
		ret = ub_dref_set_generation(t->refs, start, ns, level, gen);
	if (ret) {
		ub_eb_put(&e->fs.tc, copy);
		return ret;
	}
	memcpy(copy->data + UB_CSUM_SIZE_MAX, old->data + UB_CSUM_SIZE_MAX, copy->len - UB_CSUM_SIZE_MAX);
	UB_SET(ub_disk_header, bytenr, copy->data, start);
	UB_SET(ub_disk_header, generation, copy->data, gen);
	flags = UB_GET(ub_disk_header, flags, old->data) & ~(uint64_t)BTRFS_HEADER_FLAG_WRITTEN;
	UB_SET(ub_disk_header, flags, copy->data, flags);
	if (slot >= 0)
		set_child(copy, slot, child, child_gen);
	if (full) {
		ret = ub_txn_child_refs(t, copy, 0, true, 1);
		if (!ret)
			ret = ub_txn_child_refs(t, old, 0, true, -1);
		if (!ret)
			ret = ub_dref_set_flags(t->refs, start, ns, level, BTRFS_BLOCK_FLAG_FULL_BACKREF);
	}
	if (ret) {
		ub_eb_put(&e->fs.tc, copy);
		return ret;
	}
	t->blocks_allocated++;
	*out = copy;
	return 0;
}

/* The holding reference of copy_block goes: the parents' references hold the copy now. */
static int release_copy(struct ub_txn *t, const struct ub_eb *copy)
{
	return ub_dref_add_tree(t->refs, copy->start, t->e->fs.vol->nodesize, ub_eb_level(copy), ub_eb_owner(copy), 0, -1,
				0);
}

static int replace_block(struct ub_txn *t, const struct ub_eb *old, const struct ub_eb *nw, int depth);

/*
 * Node `p`'s pointer at `slot` to `old` goes to `nw`:
 * in place in a block of this transaction not yet written, else in a copy of
 * `p` that then takes p's place. The reference through `p` moves with it.
 */
static int repoint(struct ub_txn *t, struct ub_eb *p, int slot, const struct ub_eb *old, const struct ub_eb *nw,
		   int depth)
{
	uint32_t ns = t->e->fs.vol->nodesize;
	int level = ub_eb_level(old);
	uint64_t pflags, gen = ub_eb_generation(nw);
	struct ub_eb *pn;
	bool full;
	int ret = block_flags(t, p->start, &pflags);

	if (ret)
		return ret;
	full = (pflags & BTRFS_BLOCK_FLAG_FULL_BACKREF) != 0;
	if (p->dirty && !(UB_GET(ub_disk_header, flags, p->data) & BTRFS_HEADER_FLAG_WRITTEN)) {
		set_child(p, slot, nw->start, gen);
		ret = ub_dref_add_tree(t->refs, old->start, ns, level, full ? 0 : ub_eb_owner(p), full ? p->start : 0, -1,
				       UB_DREF_LAST_REF);
		if (!ret)
			ret = ub_dref_add_tree(t->refs, nw->start, ns, level, full ? 0 : ub_eb_owner(p),
					       full ? p->start : 0, 1, 0);
		return ret;
	}
	ret = copy_block(t, p, full, slot, nw->start, gen, &pn);
	if (ret)
		return ret;
	/* by tree: the other children's references stand for the copy; this one's moves to the new child */
	if (!full) {
		ret = ub_dref_add_tree(t->refs, old->start, ns, level, ub_eb_owner(p), 0, -1, UB_DREF_LAST_REF);
		if (!ret)
			ret = ub_dref_add_tree(t->refs, nw->start, ns, level, ub_eb_owner(p), 0, 1, 0);
	}
	if (!ret)
		ret = replace_block(t, p, pn, depth + 1);
	if (!ret)
		ret = release_copy(t, pn);
	ub_eb_put(&t->e->fs.tc, pn);
	return ret;
}

/* The block of `root` at `level` on the path to `key`, and the slot the path takes in it. */
static int block_on_path(struct ub_txn *t, const struct ub_root *root, const struct ub_key *key, int level,
			 struct ub_eb **out, int *slot_out)
{
	struct ub_tree_ctx *tc = &t->e->fs.tc;
	struct ub_expect exp = { .level = root->level, .generation = root->generation, .slot = -1 };
	struct ub_eb *eb, *next;
	int ret;

	if (root->level < level)
		return -ENOENT;
	ret = ub_tree_read_block(tc, root->bytenr, &exp, &eb);
	while (!ret) {
		uint32_t n = ub_eb_nritems(eb);
		int slot = 0;

		for (uint32_t i = 1; i < n; i++) {
			struct ub_key k;

			ub_eb_item_key(eb, (int)i, &k);
			if (ub_key_cmp(&k, key) > 0)
				break;
			slot = (int)i;
		}
		if (ub_eb_level(eb) == level) {
			*out = eb;
			*slot_out = slot;
			return 0;
		}
		if (!n) {
			ub_eb_put(tc, eb);
			return -ENOENT;
		}
		exp = (struct ub_expect){ .level = ub_eb_level(eb) - 1, .generation = ub_eb_node_gen(eb, slot),
					  .parent = eb->start, .slot = slot };
		ret = ub_tree_read_block(tc, ub_eb_node_blockptr(eb, slot), &exp, &next);
		ub_eb_put(tc, eb);
		eb = next;
	}
	return ret;
}

/* The node of `root` at `level` + 1 that points at `child` (of `level`, first key `key`), and the slot. */
static int parent_in_tree(struct ub_txn *t, const struct ub_root *root, const struct ub_key *key, int level,
			  uint64_t child, struct ub_eb **out, int *slot_out)
{
	int ret = block_on_path(t, root, key, level + 1, out, slot_out);

	if (ret)
		return ret;
	if (ub_eb_nritems(*out) && ub_eb_node_blockptr(*out, *slot_out) == child)
		return 0;
	ub_eb_put(&t->e->fs.tc, *out);
	*out = NULL;
	return -ENOENT;
}

/*
 * `nw` (a copy of `old`) takes old's place in every tree: each back reference
 * of `old` names a parent (or a root pointer), re-pointed at `nw`.
 */
static int replace_block(struct ub_txn *t, const struct ub_eb *old, const struct ub_eb *nw, int depth)
{
	struct ub_engine *e = t->e;
	uint32_t ns = e->fs.vol->nodesize;
	int level = ub_eb_level(old);
	struct ub_key key = { 0, 0, 0 };
	struct refs rs;
	int ret;

	if (depth >= UB_MAX_LEVEL)
		return -EUCLEAN;
	if (ub_eb_nritems(old))
		ub_eb_item_key(old, 0, &key);
	ret = extent_refs(t, old->start, &rs);
	for (size_t i = 0; i < rs.n && !ret; i++) {
		const struct lref *l = &rs.a[i];
		struct ub_eb *p = NULL;
		int slot = -1;

		if (l->count <= 0)
			continue;
		if (l->count != 1 || (l->r.type != BTRFS_TREE_BLOCK_REF_KEY && l->r.type != BTRFS_SHARED_BLOCK_REF_KEY)) {
			ub_err(&e->fs.log, "relocation: tree block %" PRIu64 " has a back reference of type %u counted %"
			       PRId64 ", which no tree block holds", old->start, l->r.type, l->count);
			ret = -EUCLEAN;
			break;
		}
		if (l->r.type == BTRFS_TREE_BLOCK_REF_KEY) {
			struct ub_root *root;

			ret = tree_of(e, l->r.root, &root);
			if (ret)
				break;
			if (root->bytenr == old->start) {
				/* the tree's root: the pointer is the tree's own (the root item follows at commit) */
				root->bytenr = nw->start;
				root->generation = ub_eb_generation(nw);
				ret = ub_dref_add_tree(t->refs, old->start, ns, level, l->r.root, 0, -1, UB_DREF_LAST_REF);
				if (!ret)
					ret = ub_dref_add_tree(t->refs, nw->start, ns, level, l->r.root, 0, 1, 0);
				continue;
			}
			ret = parent_in_tree(t, root, &key, level, old->start, &p, &slot);
			if (ret == -ENOENT)
				ub_err(&e->fs.log, "relocation: tree block %" PRIu64 " (level %d) is referenced by tree %"
				       PRIu64 ", which does not reach it", old->start, level, l->r.root);
		} else {
			struct ub_expect exp = { .level = level + 1, .slot = -1 };

			ret = ub_tree_read_block(&e->fs.tc, l->r.parent, &exp, &p);
			for (uint32_t j = 0; !ret && j < ub_eb_nritems(p) && slot < 0; j++)
				if (ub_eb_node_blockptr(p, (int)j) == old->start)
					slot = (int)j;
			if (!ret && slot < 0) {
				ub_err(&e->fs.log, "relocation: tree block %" PRIu64 " names node %" PRIu64
				       " as its parent, which does not point at it", old->start, l->r.parent);
				ret = -ENOENT;
			}
		}
		if (ret == -ENOENT)
			ret = -EUCLEAN;
		if (!ret)
			ret = repoint(t, p, slot, old, nw, depth);
		if (p)
			ub_eb_put(&e->fs.tc, p);
	}
	refs_free(&rs);
	return ret;
}

/* Whether the block's references let one copy-on-write through its one tree move it (no snapshot may share it). */
static int only_one_tree(struct ub_txn *t, uint64_t bytenr, bool *one, int64_t *total)
{
	struct ub_eroot *er;
	struct ub_root *root;
	struct refs rs;
	const struct lref *live = NULL;
	int n = 0, ret = extent_refs(t, bytenr, &rs);

	if (ret)
		return ret;
	*total = refs_total(&rs);
	for (size_t i = 0; i < rs.n; i++) {
		if (rs.a[i].count > 0) {
			live = &rs.a[i];
			n++;
		}
	}
	*one = false;
	if (n == 1 && live->count == 1 && live->r.type == BTRFS_TREE_BLOCK_REF_KEY) {
		ret = tree_of(t->e, live->r.root, &root);
		er = ret ? NULL : ub_roots_find(t->e->fs.roots, live->r.root);
		*one = er && !er->shareable;
	}
	refs_free(&rs);
	return ret;
}

/* Move the tree block at `bytenr` out of its group: every tree that reached it reaches its copy. */
static int move_tree_block(struct ub_txn *t, uint64_t bytenr, int level)
{
	struct ub_tree_ctx *tc = &t->e->fs.tc;
	struct ub_expect exp = { .level = level, .slot = -1 };
	struct ub_eb *old, *nw;
	uint64_t flags;
	int64_t total;
	bool one;
	int ret = only_one_tree(t, bytenr, &one, &total);

	if (ret || total <= 0)
		return ret;
	if (one)
		return cow_tree_block(t, bytenr, level);
	ret = block_flags(t, bytenr, &flags);
	if (!ret)
		ret = ub_tree_read_block(tc, bytenr, &exp, &old);
	if (ret)
		return ret;
	ret = copy_block(t, old, (flags & BTRFS_BLOCK_FLAG_FULL_BACKREF) != 0, -1, 0, 0, &nw);
	if (!ret) {
		ret = replace_block(t, old, nw, 0);
		if (!ret)
			ret = release_copy(t, nw);
		ub_eb_put(tc, nw);
	}
	ub_eb_put(tc, old);
	return ret;
}

/* ---- data ---- */

struct data_move {
	struct ub_txn *t;
	struct fsw w;
	uint64_t old, len, new;
	bool first_ref; /* no reference of the new extent queued yet: the next one says it is new */
	bool changed;   /* a tree of the transaction was changed */
	uint64_t moved;  /* references moved */
};

/*
 * Every file extent item of `leaf` that points at the old extent points at
 * the copy: in place in a leaf of this transaction not yet written, else in a
 * copy of the leaf that takes its place in every tree that reaches it (so a
 * leaf snapshots share stays shared, as its tree blocks do). Each item's
 * reference moves from the old extent to the new, by the leaf's owner or,
 * with full back references, by the leaf's address.
 */
static int move_leaf_refs(struct data_move *m, struct ub_eb *leaf)
{
	struct ub_txn *t = m->t;
	struct ub_eb *target = leaf, *copy = NULL;
	uint64_t flags;
	bool full;
	int ret = block_flags(t, leaf->start, &flags);

	if (ret)
		return ret;
	if (ub_eb_level(leaf) != 0)
		return -EUCLEAN;
	full = (flags & BTRFS_BLOCK_FLAG_FULL_BACKREF) != 0;
	m->changed = true;
	if (!leaf->dirty || (UB_GET(ub_disk_header, flags, leaf->data) & BTRFS_HEADER_FLAG_WRITTEN)) {
		ret = copy_block(t, leaf, full, -1, 0, 0, &copy);
		if (ret)
			return ret;
		target = copy;
	}
	for (uint32_t i = 0; i < ub_eb_nritems(target) && !ret; i++) {
		uint64_t root = full ? 0 : ub_eb_owner(target), parent = full ? target->start : 0, off;
		const uint8_t *d;
		uint8_t *fe;
		uint32_t size;
		struct ub_key k;

		ub_eb_item_key(target, (int)i, &k);
		if (k.type != BTRFS_EXTENT_DATA_KEY)
			continue;
		d = ub_eb_item_data(target, (int)i, &size);
		if (size < UB_FE_SIZE || FE_GET(disk_bytenr, d) != m->old ||
		    (FE_GET(type, d) != BTRFS_FILE_EXTENT_REG && FE_GET(type, d) != BTRFS_FILE_EXTENT_PREALLOC))
			continue;
		fe = target->data + (d - target->data);
		FE_SET(disk_bytenr, fe, m->new);
		off = k.offset - FE_GET(offset, fe);
		ret = ub_dref_add_data(t->refs, m->new, m->len, root, k.objectid, off, parent, 1, UB_DREF_NEW_EXTENT);
		if (!ret) {
			m->first_ref = false;
			ret = ub_dref_add_data(t->refs, m->old, m->len, root, k.objectid, off, parent, -1, 0);
		}
		if (!ret)
			m->moved++;
	}
	if (copy) {
		if (!ret)
			ret = replace_block(t, leaf, copy, 0);
		if (!ret)
			ret = release_copy(t, copy);
		ub_eb_put(&t->e->fs.tc, copy);
	}
	return ret;
}

/*
 * A reference by tree: the leaf of `tree` holding the first file extent item
 * of inode `ino` that points at the old extent with reference offset `off`
 * has its items moved. 0 with nothing done when no item is left (the caller's
 * pass then sees no progress and says so).
 */
static int move_data_ref(struct data_move *m, uint64_t tree, uint64_t ino, uint64_t off)
{
	struct ub_engine *e = m->t->e;
	struct ub_key min = { ino, BTRFS_EXTENT_DATA_KEY, off }, max = { ino, BTRFS_EXTENT_DATA_KEY, UINT64_MAX }, k;
	struct ub_root *root;
	struct ub_tree_iter it;
	struct ub_eb *leaf;
	const uint8_t *d;
	uint32_t size;
	bool found = false;
	int slot, ret = tree_of(e, tree, &root);

	if (ret)
		return ret;
	/* the item first (the change below copies leaves the iterator would be walking) */
	ret = ub_tree_iter_start(&it, &e->fs.tc, root, &min, &max);
	while (ret == 0 && !found && (ret = ub_tree_iter_next(&it, &k, &d, &size)) == 0) {
		uint8_t type;

		if (size < UB_FE_SIZE)
			continue;
		type = (uint8_t)FE_GET(type, d);
		found = (type == BTRFS_FILE_EXTENT_REG || type == BTRFS_FILE_EXTENT_PREALLOC) &&
			FE_GET(disk_bytenr, d) == m->old && k.offset - FE_GET(offset, d) == off;
	}
	ub_tree_iter_end(&it);
	if (ret < 0)
		return ret;
	if (!found)
		return 0;
	ret = block_on_path(m->t, root, &k, 0, &leaf, &slot);
	if (ret == -ENOENT)
		ret = -EUCLEAN;
	if (ret)
		return ret;
	ret = move_leaf_refs(m, leaf);
	ub_eb_put(&e->fs.tc, leaf);
	return ret;
}

/* Read the old extent checked, write it at the new place, checksums for the sectors that had them. */
static int copy_data(struct data_move *m)
{
	struct ub_engine *e = m->t->e;
	uint32_t ss = e->fs.vol->sectorsize, cs = e->fs.vol->csum_size;
	uint64_t nsec = m->len / ss;
	uint8_t *buf = malloc(m->len), *bad = malloc(nsec ? nsec : 1), *sums = NULL;
	int ret;

	if (!buf || !bad) {
		ret = -ENOMEM;
		goto out;
	}
	ret = ub_data_read(&e->fs, m->old, m->len, buf, true, bad, NULL);
	for (uint64_t i = 0; !ret && i < nsec; i++) {
		if (bad[i] == 1) {
			ub_err(&e->fs.log, "relocation: data at logical %" PRIu64 " has no good copy left: the extent at %"
			       PRIu64 " cannot be moved", m->old + i * ss, m->old);
			ret = -EIO;
		}
	}
	if (!ret)
		ret = ub_volume_write(e->fs.vol, m->new, m->len, buf);
	if (ret)
		goto out;
	/* from here the transaction's trees change: a failure must take the transaction down */
	m->changed = true;
	/* checksums for each run of sectors that had them (nodatasum data has none) */
	sums = malloc(nsec * cs + 1);
	if (!sums) {
		ret = -ENOMEM;
		goto out;
	}
	for (uint64_t i = 0; i < nsec && !ret;) {
		uint64_t j = i;

		if (bad[i]) {
			i++;
			continue;
		}
		while (j < nsec && !bad[j]) {
			uint8_t c[UB_CSUM_SIZE_MAX];

			ret = ub_csum(e->fs.vol->csum_type, buf + j * ss, ss, c);
			if (ret)
				break;
			memcpy(sums + (j - i) * cs, c, cs);
			j++;
		}
		if (!ret)
			ret = fsw_csum_put(&m->w, m->new + i * ss, sums, j - i);
		i = j;
	}
out:
	free(sums);
	free(bad);
	free(buf);
	return ret;
}

static int move_data_extent(struct ub_txn *t, uint64_t bytenr, uint64_t len, bool *changed)
{
	struct data_move m = { .t = t, .old = bytenr, .len = len, .first_ref = true };
	uint64_t before = 0;
	int ret = fsw_init_ro(&m.w, t, BTRFS_FS_TREE_OBJECTID);

	if (ret)
		return ret;
	for (int pass = 0;; pass++) {
		struct refs rs;
		int64_t now;

		ret = extent_refs(t, bytenr, &rs);
		if (ret)
			break;
		now = refs_total(&rs);
		if (now <= 0) {
			refs_free(&rs);
			break;
		}
		if ((pass && refs_digest(&rs) == before) || pass > 4096) {
			ub_err(&t->e->fs.log, "relocation: data extent %" PRIu64 " keeps %" PRId64
			       " references that point at no file extent item", bytenr, now);
			refs_free(&rs);
			ret = -EUCLEAN;
			break;
		}
		before = refs_digest(&rs);
		if (!m.new) {
			/* the copy, once: space outside the group (the allocator skips it), the bytes, the checksums;
			 * a convert's target profile gets a chunk first if it has no room (else any group does) */
			if (ub_alloc_target(t->e->alloc, BTRFS_BLOCK_GROUP_DATA)) {
				struct ub_chunk_ctx cc;

				ret = ub_txn_chunk_ctx(t, &cc);
				if (!ret)
					ret = ub_chunk_ensure_data(&cc, len);
				if (ret == -ENOSPC)
					ret = 0;
			}
			if (!ret)
				ret = ub_txn_reserve_data(t, len, 0, &m.new);
			if (!ret) {
				ret = copy_data(&m);
				if (ret) {
					ub_alloc_unreserve(t->e->alloc, m.new, len);
					m.new = 0;
				}
			}
		}
		/* each reference names a leaf (by tree and item, or by address): its items move together */
		for (size_t i = 0; i < rs.n && !ret; i++) {
			const struct lref *l = &rs.a[i];
			struct ub_expect exp = { .level = 0, .slot = -1 };
			struct ub_eb *leaf;

			if (l->count <= 0)
				continue;
			if (l->r.type == BTRFS_EXTENT_DATA_REF_KEY) {
				ret = move_data_ref(&m, l->r.root, l->r.owner, l->r.offset);
			} else if (l->r.type == BTRFS_SHARED_DATA_REF_KEY) {
				ret = ub_tree_read_block(&t->e->fs.tc, l->r.parent, &exp, &leaf);
				if (!ret) {
					ret = move_leaf_refs(&m, leaf);
					ub_eb_put(&t->e->fs.tc, leaf);
				}
			}
		}
		refs_free(&rs);
		if (ret)
			break;
	}
	if (m.new && m.first_ref) {
		/* nothing came to point at the copy: its space goes back (no reference queued owns it) */
		ub_alloc_unreserve(t->e->alloc, m.new, len);
	}
	*changed = m.changed || m.moved;
	return ret;
}

/* ---- a group ---- */

struct extent_ref_list {
	struct { uint64_t bytenr, len; int level; bool data; } *a;
	size_t n, cap;
};

/* Every extent item in [start, start + len) of the running transaction's extent tree. */
static int group_extents(struct ub_engine *e, uint64_t start, uint64_t len, struct extent_ref_list *out)
{
	struct ub_key min = { start, 0, 0 }, max = { start + len - 1, UINT8_MAX, UINT64_MAX }, k;
	struct ub_tree_iter it;
	const uint8_t *d;
	uint32_t size;
	int ret;

	out->n = 0;
	ret = ub_tree_iter_start(&it, &e->fs.tc, &e->fs.extent_tree->root, &min, &max);
	while (ret == 0 && (ret = ub_tree_iter_next(&it, &k, &d, &size)) == 0) {
		bool data;

		if (k.type != BTRFS_EXTENT_ITEM_KEY && k.type != BTRFS_METADATA_ITEM_KEY)
			continue;
		if (size < UB_EXTENT_ITEM_SIZE) {
			ret = -EUCLEAN;
			break;
		}
		data = (UB_GET(btrfs_extent_item, flags, d) & BTRFS_EXTENT_FLAG_DATA) != 0;
		if (out->n == out->cap) {
			size_t c = out->cap ? out->cap * 2 : 64;
			void *a = realloc(out->a, c * sizeof(*out->a));

			if (!a) {
				ret = -ENOMEM;
				break;
			}
			out->a = a;
			out->cap = c;
		}
		out->a[out->n].bytenr = k.objectid;
		out->a[out->n].data = data;
		out->a[out->n].len = k.type == BTRFS_METADATA_ITEM_KEY ? e->fs.vol->nodesize : k.offset;
		out->a[out->n].level = k.type == BTRFS_METADATA_ITEM_KEY ? (int)k.offset
			: (!data && size >= UB_EXTENT_ITEM_SIZE + sizeof(struct btrfs_tree_block_info))
			? (int)UB_GET(btrfs_tree_block_info, level, d + UB_EXTENT_ITEM_SIZE) : 0;
		out->n++;
	}
	ub_tree_iter_end(&it);
	return ret < 0 ? ret : 0;
}

static int set_ro(struct ub_engine *e, uint64_t start, bool ro)
{
	struct ub_txn *t;
	int ret = ub_engine_begin_op(e, 0, UB_CHUNK_OP_FREE, &t);

	if (ret)
		return ret;
	ret = ub_alloc_set_ro(e->alloc, start, ro);
	ub_engine_end_op(e);
	return ret;
}

/* Give the group's pinned space back: commits until the allocator holds none of it (readers may hold it). */
static int group_settled(struct ub_engine *e, uint64_t start, struct ub_bg_info *bi)
{
	int ret = 0;

	for (int i = 0; i < 3 && !ret; i++) {
		ret = ub_engine_commit(e);
		if (ret)
			break;
		ret = ub_fs_live_write_lock(&e->fs);
		if (ret)
			break;
		ret = ub_alloc_bg_info(e->alloc, start, bi);
		ub_fs_live_write_unlock(&e->fs);
		if (!ret && !bi->pinned && !bi->reserved)
			break;
	}
	return ret;
}

int ub_engine_relocate_group(struct ub_engine *e, uint64_t start, struct ub_reloc_stats *st)
{
	struct extent_ref_list list = { 0 };
	struct ub_bg_info bi;
	struct ub_txn *t;
	int ret;

	if (!e || !st)
		return -EINVAL;
	memset(st, 0, sizeof(*st));
	/* what the running transaction put in the group is committed first: it is old from then on */
	ret = ub_engine_commit(e);
	if (ret)
		return ret;
	ret = set_ro(e, start, true);
	if (ret)
		return ret == -ENOENT ? -ENOENT : ret;
	for (int pass = 0; pass < 4 && !ret; pass++) {
		ret = ub_fs_live_write_lock(&e->fs);
		if (ret)
			break;
		ret = ub_alloc_bg_info(e->alloc, start, &bi);
		if (!ret)
			ret = group_extents(e, start, bi.length, &list);
		ub_fs_live_write_unlock(&e->fs);
		if (ret || list.n == 0)
			break;
		for (size_t i = 0; i < list.n && !ret; i++) {
			bool data = list.a[i].data;

			/* a move copies a path and queues references: one item change of the largest tree, twice */
			ret = ub_engine_begin_op(e, 2 * ub_chunk_op_blocks(UB_MAX_LEVEL - 1) * e->fs.vol->nodesize,
						 UB_CHUNK_OP_ADD, &t);
			if (ret)
				break;
			bool changed = true;

			ret = data ? move_data_extent(t, list.a[i].bytenr, list.a[i].len, &changed)
				   : move_tree_block(t, list.a[i].bytenr, list.a[i].level);
			if (ret && changed) {
				int none = 0;

				/*
				 * Half a move is in the trees: as after a failed commit, the disk keeps
				 * the last commit and the engine is read-only from now on (a live
				 * mount's other changes since that commit are lost as in a crash,
				 * and every later change is refused rather than silently dropped).
				 */
				ub_err(&e->fs.log, "relocation of block group %" PRIu64 " failed (%s) moving the extent at %"
				       PRIu64 ": the filesystem stays at generation %" PRIu64 " and is read-only from now on",
				       start, strerror(-ret), list.a[i].bytenr, ub_engine_generation(e));
				__atomic_compare_exchange_n(&e->broken, &none, ret, false, __ATOMIC_ACQ_REL,
							    __ATOMIC_ACQUIRE);
			}
			ub_engine_end_op(e);
			if (!ret) {
				st->extents++;
				if (data)
					st->data_bytes += list.a[i].len;
				else
					st->tree_blocks++;
			}
		}
		if (!ret)
			ret = group_settled(e, start, &bi);
		if (!ret && bi.used == 0)
			break;
	}
	free(list.a);
	if (!ret && bi.used) {
		ub_err(&e->fs.log, "relocation: block group %" PRIu64 " still holds %" PRIu64 " bytes after four passes",
		       start, bi.used);
		ret = -EAGAIN;
	}
	if (!ret) {
		struct ub_chunk_ctx cc;

		ret = ub_engine_begin_op(e, 0, UB_CHUNK_OP_FREE, &t);
		if (!ret) {
			ret = ub_txn_chunk_ctx(t, &cc);
			if (!ret)
				ret = ub_chunk_remove(&cc, start);
			ub_engine_end_op(e);
		}
		if (!ret)
			ret = ub_engine_commit(e);
		if (!ret)
			return 0;
	}
	if (!ub_engine_broken(e))
		set_ro(e, start, false);
	return ret;
}
