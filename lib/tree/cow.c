/* SPDX-License-Identifier: MIT */
/*
 * Copy-on-write B-tree changes: search with copying, inserting, deleting,
 * growing and shrinking items, leaf and node splits, pushing items into
 * siblings and merging underfull blocks, as the kernel's ctree does.
 * The rules (one writer, which blocks change in place) are in tree_write.h.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include "ubtrfs/tree.h"
#include "tree/tree_write.h"

#define HDR(field, p) UB_GET(ub_disk_header, field, p)

struct wctx {
	struct ub_tree_ctx *tc;
	struct ub_tree_alloc *ta;
	struct ub_root *root;
};

/* ---- raw block layout ---- */

static uint32_t leaf_data_size(const struct ub_tree_ctx *tc) { return tc->vol->nodesize - UB_HEADER_SIZE; }
static uint32_t node_max(const struct ub_tree_ctx *tc) { return (tc->vol->nodesize - UB_HEADER_SIZE) / UB_KEY_PTR_SIZE; }
static uint32_t nritems(const struct ub_eb *eb) { return (uint32_t)HDR(nritems, eb->data); }
static void set_nritems(struct ub_eb *eb, uint32_t n) { UB_SET(ub_disk_header, nritems, eb->data, n); }
static int level_of(const struct ub_eb *eb) { return (int)HDR(level, eb->data); }

static uint8_t *item_at(const struct ub_eb *eb, uint32_t slot) { return eb->data + UB_HEADER_SIZE + slot * UB_ITEM_SIZE; }
static uint32_t it_off(const struct ub_eb *eb, uint32_t slot) { return (uint32_t)UB_GET(ub_disk_item, offset, item_at(eb, slot)); }
static uint32_t it_size(const struct ub_eb *eb, uint32_t slot) { return (uint32_t)UB_GET(ub_disk_item, size, item_at(eb, slot)); }
static uint32_t it_end(const struct ub_eb *eb, uint32_t slot) { return it_off(eb, slot) + it_size(eb, slot); }
static void set_it_off(struct ub_eb *eb, uint32_t slot, uint32_t v) { UB_SET(ub_disk_item, offset, item_at(eb, slot), v); }
static void set_it_size(struct ub_eb *eb, uint32_t slot, uint32_t v) { UB_SET(ub_disk_item, size, item_at(eb, slot), v); }
static uint8_t *leaf_data(const struct ub_eb *eb) { return eb->data + UB_HEADER_SIZE; }

static uint8_t *kp_at(const struct ub_eb *eb, uint32_t slot) { return eb->data + UB_HEADER_SIZE + slot * UB_KEY_PTR_SIZE; }

static void set_key(struct ub_eb *eb, uint32_t slot, const struct ub_key *k)
{
	ub_key_write(level_of(eb) ? kp_at(eb, slot) : item_at(eb, slot), k);
}

static void first_key(const struct ub_eb *eb, struct ub_key *k)
{
	ub_eb_item_key(eb, 0, k);
}

static void set_ptr(struct ub_eb *node, uint32_t slot, const struct ub_key *k, uint64_t bytenr, uint64_t gen)
{
	uint8_t *p = kp_at(node, slot);

	ub_key_write(p, k);
	UB_SET(ub_disk_key_ptr, blockptr, p, bytenr);
	UB_SET(ub_disk_key_ptr, generation, p, gen);
}

/* lowest data offset in use (the leaf's data grows down from its end) */
static uint32_t data_end(const struct ub_tree_ctx *tc, const struct ub_eb *l)
{
	uint32_t n = nritems(l);
	return n ? it_off(l, n - 1) : leaf_data_size(tc);
}

/* bytes items [start, start+nr) take: headers and data */
static uint32_t leaf_used(const struct ub_eb *l, uint32_t start, uint32_t nr)
{
	if (!nr)
		return 0;
	return it_end(l, start) - it_off(l, start + nr - 1) + nr * UB_ITEM_SIZE;
}

static uint32_t leaf_free(const struct ub_tree_ctx *tc, const struct ub_eb *l)
{
	return leaf_data_size(tc) - leaf_used(l, 0, nritems(l));
}

/*
 * Open k items at `slot` of a leaf with room for them: headers shift right,
 * data of the items after shifts down. Sizes come from `sizes` or, when NULL,
 * from items [sslot, sslot+k) of `src`. Keys are the caller's to set.
 */
static void leaf_open(const struct ub_tree_ctx *tc, struct ub_eb *l, uint32_t slot, uint32_t k, const uint32_t *sizes,
		      const struct ub_eb *src, uint32_t sslot)
{
	uint32_t n = nritems(l), total = 0, top, end;
	uint8_t *d = leaf_data(l);

	for (uint32_t i = 0; i < k; i++)
		total += sizes ? sizes[i] : it_size(src, sslot + i);
	top = slot ? it_off(l, slot - 1) : leaf_data_size(tc);
	if (slot < n) {
		end = data_end(tc, l);
		memmove(d + end - total, d + end, top - end);
		for (uint32_t i = slot; i < n; i++)
			set_it_off(l, i, it_off(l, i) - total);
		memmove(item_at(l, slot + k), item_at(l, slot), (n - slot) * UB_ITEM_SIZE);
	}
	for (uint32_t i = 0; i < k; i++) {
		uint32_t sz = sizes ? sizes[i] : it_size(src, sslot + i);
		top -= sz;
		set_it_off(l, slot + i, top);
		set_it_size(l, slot + i, sz);
	}
	set_nritems(l, n + k);
}

/* Remove items [slot, slot+nr): the data below theirs moves up, headers left. */
static void leaf_close(const struct ub_tree_ctx *tc, struct ub_eb *l, uint32_t slot, uint32_t nr)
{
	uint32_t n = nritems(l), dsize, end;
	uint8_t *d = leaf_data(l);

	if (!nr)
		return;
	dsize = it_end(l, slot) - it_off(l, slot + nr - 1);
	if (slot + nr < n) {
		end = data_end(tc, l);
		memmove(d + end + dsize, d + end, it_off(l, slot + nr - 1) - end);
		for (uint32_t i = slot + nr; i < n; i++)
			set_it_off(l, i, it_off(l, i) + dsize);
		memmove(item_at(l, slot), item_at(l, slot + nr), (n - slot - nr) * UB_ITEM_SIZE);
	}
	set_nritems(l, n - nr);
}

/* Move items [sslot, sslot+nr) of src to dslot of dst (which has room). */
static void leaf_move(const struct ub_tree_ctx *tc, struct ub_eb *dst, uint32_t dslot, struct ub_eb *src, uint32_t sslot,
		      uint32_t nr)
{
	if (!nr)
		return;
	leaf_open(tc, dst, dslot, nr, NULL, src, sslot);
	for (uint32_t i = 0; i < nr; i++) {
		memcpy(item_at(dst, dslot + i), item_at(src, sslot + i), UB_DISK_KEY_SIZE);
		memcpy(leaf_data(dst) + it_off(dst, dslot + i), leaf_data(src) + it_off(src, sslot + i),
		       it_size(src, sslot + i));
	}
	leaf_close(tc, src, sslot, nr);
}

static void node_open(struct ub_eb *n, uint32_t slot, uint32_t k)
{
	uint32_t cnt = nritems(n);

	memmove(kp_at(n, slot + k), kp_at(n, slot), (cnt - slot) * UB_KEY_PTR_SIZE);
	set_nritems(n, cnt + k);
}

static void node_close(struct ub_eb *n, uint32_t slot, uint32_t nr)
{
	uint32_t cnt = nritems(n);

	memmove(kp_at(n, slot), kp_at(n, slot + nr), (cnt - slot - nr) * UB_KEY_PTR_SIZE);
	set_nritems(n, cnt - nr);
}

static void node_move(struct ub_eb *dst, uint32_t dslot, struct ub_eb *src, uint32_t sslot, uint32_t nr)
{
	if (!nr)
		return;
	node_open(dst, dslot, nr);
	memcpy(kp_at(dst, dslot), kp_at(src, sslot), nr * UB_KEY_PTR_SIZE);
	node_close(src, sslot, nr);
}

/* ---- copy on write ---- */

/* A block the writer made up to root->shared_upto may be shared with a snapshot of this transaction. */
static bool maybe_shared(const struct ub_root *root, const struct ub_eb *eb)
{
	return root && eb->born <= root->shared_upto;
}

/*
 * Blocks of the running transaction change in place, except those a snapshot
 * taken in this transaction may share: they are copied like committed ones
 * (the kernel's FORCE_COW, decided per block: what the tree made after its
 * last snapshot is its own).
 */
static bool must_cow(const struct wctx *w, const struct ub_eb *eb)
{
	return !eb->dirty || ub_eb_generation(eb) != w->ta->transid ||
	       (HDR(flags, eb->data) & BTRFS_HEADER_FLAG_WRITTEN) || maybe_shared(w->root, eb);
}

static int new_block(struct wctx *w, int level, struct ub_eb **out)
{
	uint64_t bytenr = 0;
	int ret = w->ta->alloc_block(w->ta->arg, w->root->objectid, level, &bytenr);

	if (ret)
		return ret;
	return ub_tree_new_block(w->tc, bytenr, w->root->objectid, level, w->ta->transid, out);
}

/*
 * Make `*ebp` (at `pslot` of `parent`, or the root when parent is NULL) a block
 * of this transaction: a copy replaces it, the reference in *ebp moves to the
 * copy.
 */
static int cow_eb(struct wctx *w, struct ub_eb **ebp, struct ub_eb *parent, uint32_t pslot)
{
	struct ub_eb *eb = *ebp, *copy;
	uint64_t flags;
	bool keep;
	int ret;

	if (!must_cow(w, eb))
		return 0;
	ret = new_block(w, level_of(eb), &copy);
	if (ret)
		return ret;
	memcpy(copy->data + UB_CSUM_SIZE_MAX, eb->data + UB_CSUM_SIZE_MAX, copy->len - UB_CSUM_SIZE_MAX);
	UB_SET(ub_disk_header, bytenr, copy->data, copy->start);
	UB_SET(ub_disk_header, generation, copy->data, w->ta->transid);
	UB_SET(ub_disk_header, owner, copy->data, w->root->objectid);
	flags = HDR(flags, eb->data) & ~(BTRFS_HEADER_FLAG_WRITTEN | BTRFS_HEADER_FLAG_RELOC);
	flags &= ~(0xffULL << UB_BACKREF_REV_SHIFT);
	flags |= UB_MIXED_BACKREF_REV << UB_BACKREF_REV_SHIFT;
	UB_SET(ub_disk_header, flags, copy->data, flags);
	memcpy(copy->data + offsetof(struct ub_disk_header, fsid), w->tc->metadata_uuid, UB_FSID_SIZE);
	memcpy(copy->data + offsetof(struct ub_disk_header, chunk_tree_uuid), w->tc->chunk_tree_uuid, UB_UUID_SIZE);
	ret = w->ta->cow_block(w->ta->arg, w->root->objectid, eb, copy, parent ? parent->start : 0);
	if (ret < 0) {
		ub_tree_forget_block(w->tc, copy);
		ub_eb_put(w->tc, copy);
		return ret;
	}
	keep = ret > 0;
	if (parent) {
		struct ub_key k;
		ub_eb_item_key(parent, (int)pslot, &k);
		set_ptr(parent, pslot, &k, copy->start, w->ta->transid);
	} else {
		w->root->bytenr = copy->start;
		w->root->generation = w->ta->transid;
		w->root->level = (uint8_t)level_of(copy);
	}
	/* a transaction block replaced again (written mid-commit) is no longer wanted, unless another tree holds it */
	if (!keep && w->root->objectid == BTRFS_TREE_LOG_OBJECTID)
		ub_tree_forget_unread_block(w->tc, eb);
	else if (eb->dirty && !keep)
		ub_tree_forget_block(w->tc, eb);
	ub_eb_put(w->tc, eb);
	*ebp = copy;
	return 0;
}

static int cow_path(struct wctx *w, struct ub_path *p, int level)
{
	struct ub_eb *parent = level + 1 < UB_MAX_LEVEL ? p->nodes[level + 1] : NULL;

	return cow_eb(w, &p->nodes[level], parent, parent ? (uint32_t)p->slots[level + 1] : 0);
}

/* A child of a path node that is not on the path (a sibling), copied for change. */
static int read_sibling(struct wctx *w, struct ub_path *p, int level, uint32_t slot, struct ub_eb **out)
{
	struct ub_eb *parent = p->nodes[level + 1];
	struct ub_key first;
	struct ub_expect exp = {
		.owner = w->root->objectid,
		.level = level,
		.generation = ub_eb_node_gen(parent, (int)slot),
		.first_key = &first,
		.parent = parent->start,
		.slot = (int)slot,
	};
	int ret;

	ub_eb_item_key(parent, (int)slot, &first);
	ret = ub_tree_read_block(w->tc, ub_eb_node_blockptr(parent, (int)slot), &exp, out);
	if (ret)
		return ret;
	ret = cow_eb(w, out, parent, slot);
	if (ret) {
		ub_eb_put(w->tc, *out);
		*out = NULL;
	}
	return ret;
}

/* `eb` left the tree (its pointer is gone): the allocator drops its reference. */
static int drop_block(struct wctx *w, struct ub_eb *eb, struct ub_eb *parent)
{
	int ret = w->ta->free_block(w->ta->arg, w->root->objectid, eb, parent ? parent->start : 0);

	if (w->root->objectid == BTRFS_TREE_LOG_OBJECTID)
		ub_tree_forget_unread_block(w->tc, eb);
	else
		ub_tree_forget_block(w->tc, eb);
	return ret;
}

/* The first key of the block at `level` changed: so do the keys pointing at it. */
static void fixup_low_keys(struct ub_path *p, const struct ub_key *key, int level)
{
	for (int i = level; i < UB_MAX_LEVEL && p->nodes[i]; i++) {
		set_key(p->nodes[i], (uint32_t)p->slots[i], key);
		if (p->slots[i] != 0)
			break;
	}
}

/* A new root above the current one (at level-1), so it can split. */
static int grow_root(struct wctx *w, struct ub_path *p, int level)
{
	struct ub_eb *lower = p->nodes[level - 1], *nr;
	struct ub_key k;
	int ret;

	if (level >= UB_MAX_LEVEL) {
		ub_err(&w->tc->log, "tree %llu: cannot grow past level %d", (unsigned long long)w->root->objectid,
		       UB_MAX_LEVEL - 1);
		return -EOVERFLOW;
	}
	ret = new_block(w, level, &nr);
	if (ret)
		return ret;
	if (nritems(lower))
		first_key(lower, &k);
	else
		memset(&k, 0, sizeof(k));
	set_ptr(nr, 0, &k, lower->start, ub_eb_generation(lower));
	set_nritems(nr, 1);
	w->root->bytenr = nr->start;
	w->root->generation = w->ta->transid;
	w->root->level = (uint8_t)level;
	p->nodes[level] = nr;
	p->slots[level] = 0;
	return 0;
}

/* Insert a pointer at `slot` of the path node at `level` (which has room). */
static void insert_ptr(struct ub_path *p, int level, uint32_t slot, const struct ub_key *k, const struct ub_eb *child)
{
	struct ub_eb *node = p->nodes[level];

	node_open(node, slot, 1);
	set_ptr(node, slot, k, child->start, ub_eb_generation(child));
}

/* Remove the pointer at `slot` of the path node at `level`; a node left empty goes too. */
static int del_ptr(struct wctx *w, struct ub_path *p, int level, uint32_t slot)
{
	struct ub_eb *node = p->nodes[level];

	node_close(node, slot, 1);
	if (nritems(node) == 0) {
		struct ub_eb *parent = level + 1 < UB_MAX_LEVEL ? p->nodes[level + 1] : NULL;
		int ret;

		if (!parent) {
			/* the root lost its last child: the tree is one empty leaf */
			UB_SET(ub_disk_header, level, node->data, 0);
			w->root->level = 0;
			return 0;
		}
		/* told before the parent's pointer goes, while the parent is still there to name */
		ret = drop_block(w, node, parent);
		if (!ret)
			ret = del_ptr(w, p, level + 1, (uint32_t)p->slots[level + 1]);
		p->nodes[level] = NULL;
		ub_eb_put(w->tc, node);
		return ret;
	}
	if (slot == 0) {
		struct ub_key k;
		first_key(node, &k);
		fixup_low_keys(p, &k, level + 1);
	}
	return 0;
}

/* ---- nodes ---- */

/* Split the full node at `level` of the path in two; the path follows its slot. */
static int split_node(struct wctx *w, struct ub_path *p, int level)
{
	struct ub_eb *c = p->nodes[level], *split;
	uint32_t n = nritems(c), mid = (n + 1) / 2;
	struct ub_key k;
	int ret;

	if (level + 1 >= UB_MAX_LEVEL || !p->nodes[level + 1]) {
		ret = grow_root(w, p, level + 1);
		if (ret)
			return ret;
	}
	ret = new_block(w, level, &split);
	if (ret)
		return ret;
	node_move(split, 0, c, mid, n - mid);
	first_key(split, &k);
	insert_ptr(p, level + 1, (uint32_t)p->slots[level + 1] + 1, &k, split);
	if ((uint32_t)p->slots[level] >= mid) {
		p->slots[level] -= (int)mid;
		p->slots[level + 1]++;
		p->nodes[level] = split;
		ub_eb_put(w->tc, c);
	} else {
		ub_eb_put(w->tc, split);
	}
	return 0;
}

/*
 * Inserting into a nearly full node: before splitting it, move pointers into a
 * sibling with room (the kernel's push_nodes_for_insert), so that keys coming
 * in order leave full nodes behind. 0: the node has room now, 1: it has not.
 */
static int push_nodes_for_insert(struct wctx *w, struct ub_path *p, int level)
{
	struct ub_eb *mid = p->nodes[level], *parent = p->nodes[level + 1], *s;
	uint32_t max = node_max(w->tc), n = nritems(mid), pslot = (uint32_t)p->slots[level + 1];
	uint32_t slot = (uint32_t)p->slots[level], sn, k;
	struct ub_key key;
	int ret;

	if (pslot > 0) {
		ret = read_sibling(w, p, level, pslot - 1, &s);
		if (ret)
			return ret;
		sn = nritems(s);
		/* fill the left one up, keeping a few here */
		k = sn + 1 < max && n > 8 ? max - sn : 0;
		if (k > n - 8)
			k = n - 8;
		if (k) {
			node_move(s, sn, mid, 0, k);
			first_key(mid, &key);
			set_key(parent, pslot, &key);
			if (slot < k) {
				p->nodes[level] = s;
				p->slots[level] = (int)(sn + slot);
				p->slots[level + 1] = (int)pslot - 1;
				ub_eb_put(w->tc, mid);
			} else {
				p->slots[level] = (int)(slot - k);
				ub_eb_put(w->tc, s);
			}
			if (nritems(p->nodes[level]) < max - 3)
				return 0;
			mid = p->nodes[level];
			n = nritems(mid);
			slot = (uint32_t)p->slots[level];
			pslot = (uint32_t)p->slots[level + 1];
		} else {
			ub_eb_put(w->tc, s);
		}
	}
	if (pslot + 1 < nritems(parent)) {
		ret = read_sibling(w, p, level, pslot + 1, &s);
		if (ret)
			return ret;
		sn = nritems(s);
		/* at most half of ours goes right */
		k = sn + 1 < max ? max - sn : 0;
		if (k > n / 2)
			k = n / 2;
		if (k && n >= 4) {
			node_move(s, 0, mid, n - k, k);
			first_key(s, &key);
			set_key(parent, pslot + 1, &key);
			if (slot >= n - k) {
				p->nodes[level] = s;
				p->slots[level] = (int)(slot - (n - k));
				p->slots[level + 1] = (int)pslot + 1;
				ub_eb_put(w->tc, mid);
			} else {
				ub_eb_put(w->tc, s);
			}
			if (nritems(p->nodes[level]) < max - 3)
				return 0;
		} else {
			ub_eb_put(w->tc, s);
		}
	}
	return 1;
}

/*
 * Deleting: keep the node at `level` from getting small. A root with one child
 * gives way to the child; a node under a quarter full merges with a sibling or
 * takes pointers from one. 1: the tree changed (search again), 0: nothing done.
 */
static int balance_node(struct wctx *w, struct ub_path *p, int level)
{
	struct ub_eb *mid = p->nodes[level], *parent = level + 1 < UB_MAX_LEVEL ? p->nodes[level + 1] : NULL;
	struct ub_eb *left = NULL, *right = NULL;
	uint32_t max = node_max(w->tc), n = nritems(mid), pslot;
	struct ub_key k;
	int ret;

	if (!parent) {
		struct ub_eb *child;

		if (n != 1)
			return 0;
		ret = ub_path_read_child(p, level, 0, &child);
		if (ret)
			return ret;
		ret = cow_eb(w, &child, mid, 0);
		if (ret) {
			ub_eb_put(w->tc, child);
			return ret;
		}
		w->root->bytenr = child->start;
		w->root->generation = ub_eb_generation(child);
		w->root->level = (uint8_t)level_of(child);
		ub_eb_put(w->tc, child);
		ret = drop_block(w, mid, NULL);
		return ret ? ret : 1;
	}
	if (n > max / 4)
		return 0;
	pslot = (uint32_t)p->slots[level + 1];
	if (pslot > 0) {
		ret = read_sibling(w, p, level, pslot - 1, &left);
		if (ret)
			return ret;
	}
	if (pslot + 1 < nritems(parent)) {
		ret = read_sibling(w, p, level, pslot + 1, &right);
		if (ret)
			goto out;
	}
	if (left && nritems(left) + n <= max) {
		/* everything into the left sibling; mid goes */
		node_move(left, nritems(left), mid, 0, n);
		ret = drop_block(w, mid, parent);
		if (!ret)
			ret = del_ptr(w, p, level + 1, pslot);
	} else if (right && n + nritems(right) <= max) {
		node_move(mid, n, right, 0, nritems(right));
		ret = drop_block(w, right, parent);
		if (!ret)
			ret = del_ptr(w, p, level + 1, pslot + 1);
	} else if (left) {
		/* both too full to merge: even out with the left one */
		uint32_t k_move = (nritems(left) - n) / 2;
		node_move(mid, 0, left, nritems(left) - k_move, k_move);
		first_key(mid, &k);
		set_key(parent, pslot, &k);
		ret = 0;
	} else if (right) {
		uint32_t k_move = (nritems(right) - n) / 2;
		node_move(mid, n, right, 0, k_move);
		first_key(right, &k);
		set_key(parent, pslot + 1, &k);
		ret = 0;
	} else {
		ret = 0;
		goto out; /* an only child below a non-root node: nothing to balance with */
	}
	if (!ret)
		ret = 1;
out:
	ub_eb_put(w->tc, left);
	ub_eb_put(w->tc, right);
	return ret;
}

/* ---- leaves ---- */

/*
 * Try to make room for `need` bytes at the path's slot by moving items into the
 * right sibling. extend: the room is for growing the item at the slot (which
 * may move along); else for a new item there. 0: room made, 1: not possible.
 */
static int push_right(struct wctx *w, struct ub_path *p, uint32_t need, bool extend)
{
	struct ub_tree_ctx *tc = w->tc;
	struct ub_eb *l = p->nodes[0], *parent = p->nodes[1], *r = NULL;
	uint32_t n = nritems(l), slot = (uint32_t)p->slots[0], pslot = (uint32_t)p->slots[1], rfree, lim, k;
	struct ub_key key;
	int ret;

	if (pslot + 1 >= nritems(parent) || n < 2)
		return 1;
	/* items after the slot (and, extending, not the item itself) can go; one stays */
	lim = n - slot - (extend ? 1 : 0);
	if (slot >= n)
		lim = 0;
	if (lim > n - 1)
		lim = n - 1;
	ret = read_sibling(w, p, 0, pslot + 1, &r);
	if (ret)
		return ret;
	rfree = leaf_free(tc, r);
	/* the item stays here: move as many as fit over there */
	for (k = lim; k > 0 && leaf_used(l, n - k, k) > rfree; k--)
		;
	if (k > 0 && leaf_free(tc, l) + leaf_used(l, n - k, k) >= need) {
		leaf_move(tc, r, 0, l, n - k, k);
	} else {
		/* the item goes over with everything after it */
		k = slot < n ? n - slot : 0;
		/* extending, the item moves along; inserting at the end, it may start r alone */
		if (slot == 0 || (extend && k == 0) || leaf_used(l, slot, k) + need > rfree) {
			ub_eb_put(tc, r);
			return 1;
		}
		leaf_move(tc, r, 0, l, slot, k);
		ub_eb_put(tc, p->nodes[0]);
		p->nodes[0] = r;
		p->slots[0] = 0;
		p->slots[1] = (int)pslot + 1;
		r = NULL;
	}
	{
		struct ub_eb *rr = r ? r : p->nodes[0];
		if (nritems(rr)) {
			first_key(rr, &key);
			set_key(parent, pslot + 1, &key);
		}
	}
	ub_eb_put(tc, r);
	return 0;
}

/* The same with the left sibling: items before the slot move there. */
static int push_left(struct wctx *w, struct ub_path *p, uint32_t need, bool extend)
{
	struct ub_tree_ctx *tc = w->tc;
	struct ub_eb *l = p->nodes[0], *parent = p->nodes[1], *lf = NULL;
	uint32_t n = nritems(l), slot = (uint32_t)p->slots[0], pslot = (uint32_t)p->slots[1], lfree, lim, k, ln;
	struct ub_key key;
	int ret;

	if (pslot == 0 || n < 2)
		return 1;
	lim = slot < n - 1 ? slot : n - 1;
	ret = read_sibling(w, p, 0, pslot - 1, &lf);
	if (ret)
		return ret;
	lfree = leaf_free(tc, lf);
	ln = nritems(lf);
	for (k = lim; k > 0 && leaf_used(l, 0, k) > lfree; k--)
		;
	if (k > 0 && leaf_free(tc, l) + leaf_used(l, 0, k) >= need) {
		leaf_move(tc, lf, ln, l, 0, k);
		p->slots[0] -= (int)k;
		ub_eb_put(tc, lf);
	} else {
		/* the item goes over with everything before it (extending: the item itself too) */
		k = extend ? slot + 1 : slot;
		if (k == 0 || k > n - 1 || leaf_used(l, 0, k) + need > lfree) {
			ub_eb_put(tc, lf);
			return 1;
		}
		leaf_move(tc, lf, ln, l, 0, k);
		/* the path moves left; the path's reference to l becomes ours */
		p->nodes[0] = lf;
		p->slots[0] = (int)(ln + slot);
		p->slots[1] = (int)pslot - 1;
		first_key(l, &key);
		set_key(parent, pslot, &key);
		ub_eb_put(tc, l);
		return 0;
	}
	/* the leaf right of the pair starts elsewhere now */
	first_key(l, &key);
	set_key(parent, pslot, &key);
	return 0;
}

/*
 * Split the path's leaf: items [m, n) go to a new leaf right of it. The insert
 * position follows to the side `item_left` says; a side left without items
 * (the new item alone) gets `key` as its key in the parent.
 */
static int split_at(struct wctx *w, struct ub_path *p, uint32_t m, bool item_left, const struct ub_key *key)
{
	struct ub_eb *l = p->nodes[0], *r;
	uint32_t n = nritems(l), slot = (uint32_t)p->slots[0], pslot;
	struct ub_key rk;
	int ret;

	if (!p->nodes[1]) {
		ret = grow_root(w, p, 1);
		if (ret)
			return ret;
	}
	pslot = (uint32_t)p->slots[1];
	ret = new_block(w, 0, &r);
	if (ret)
		return ret;
	leaf_move(w->tc, r, 0, l, m, n - m);
	if (nritems(r))
		first_key(r, &rk);
	else
		rk = *key;
	insert_ptr(p, 1, pslot + 1, &rk, r);
	if (nritems(l) == 0) {
		/* everything moved right; this leaf keeps only the new item's place */
		p->slots[1] = (int)pslot;
		fixup_low_keys(p, key, 1);
	}
	if (item_left) {
		ub_eb_put(w->tc, r);
	} else {
		ub_eb_put(w->tc, l);
		p->nodes[0] = r;
		p->slots[0] = (int)(slot - m);
		p->slots[1] = (int)pslot + 1;
	}
	return 0;
}

/*
 * Room for `need` bytes at the path's slot of a full leaf: push into the
 * siblings first, else split where both halves fit, else split twice (the
 * new item alone in the middle leaf).
 */
static int split_leaf(struct wctx *w, struct ub_path *p, const struct ub_key *key, uint32_t need, bool extend)
{
	struct ub_tree_ctx *tc = w->tc;
	struct ub_eb *l = p->nodes[0];
	uint32_t n = nritems(l), slot = (uint32_t)p->slots[0], data = leaf_data_size(tc);
	uint32_t best_m = 0, best_score = UINT32_MAX;
	bool best_left = false, found = false;
	int ret;

	if (extend ? leaf_used(l, slot, 1) + need > data : need > data)
		return -EOVERFLOW;
	if (p->nodes[1]) {
		ret = push_right(w, p, need, extend);
		if (ret < 0)
			return ret;
		if (ret == 0 && leaf_free(tc, p->nodes[0]) >= need)
			return 0;
		ret = push_left(w, p, need, extend);
		if (ret < 0)
			return ret;
		if (ret == 0 && leaf_free(tc, p->nodes[0]) >= need)
			return 0;
		l = p->nodes[0];
		n = nritems(l);
		slot = (uint32_t)p->slots[0];
	}
	for (uint32_t m = 0; m <= n; m++) {
		for (int side = 0; side < 2; side++) {
			bool left = side == 0;
			uint32_t lu = leaf_used(l, 0, m), ru = leaf_used(l, m, n - m), score;

			if (extend) {
				/* the item stays whole on one side; neither side may be empty */
				if (m == 0 || m == n || left != (slot < m))
					continue;
			} else {
				if (left ? slot > m : slot < m)
					continue;
				/* an empty side only to hold the new item alone */
				if ((m == 0 && !left) || (m == n && left))
					continue;
			}
			if (left)
				lu += need;
			else
				ru += need;
			if (lu > data || ru > data)
				continue;
			score = lu > ru ? lu : ru;
			if (score < best_score) {
				best_score = score;
				best_m = m;
				best_left = left;
				found = true;
			}
		}
	}
	if (found)
		return split_at(w, p, best_m, best_left, key);
	if (extend) {
		/* big neighbours on both sides: the item gets a leaf of its own */
		if (slot > 0) {
			ret = split_at(w, p, slot, false, key);
			if (ret)
				return ret;
		}
		if (nritems(p->nodes[0]) > 1)
			return split_at(w, p, 1, true, key);
		return 0;
	}
	/* [0, slot) | new item | [slot, n) */
	ret = split_at(w, p, slot, false, key);
	if (ret)
		return ret;
	return split_at(w, p, 0, true, key);
}

/*
 * Deleting made the leaf small (the kernel's third): its items go into the
 * siblings as far as they take them, the left one from our start, the right
 * one from our end; a leaf left empty goes. The path is not to be used after.
 */
static int merge_leaf(struct wctx *w, struct ub_path *p)
{
	struct ub_tree_ctx *tc = w->tc;
	struct ub_eb *l = p->nodes[0], *parent = p->nodes[1], *s = NULL;
	uint32_t n = nritems(l), pslot = (uint32_t)p->slots[1], k, sfree;
	struct ub_key key;
	int ret;

	if (pslot > 0) {
		ret = read_sibling(w, p, 0, pslot - 1, &s);
		if (ret)
			return ret;
		sfree = leaf_free(tc, s);
		for (k = n; k > 0 && leaf_used(l, 0, k) > sfree; k--)
			;
		if (k)
			leaf_move(tc, s, nritems(s), l, 0, k);
		ub_eb_put(tc, s);
		n = nritems(l);
		if (n && k) {
			first_key(l, &key);
			set_key(parent, pslot, &key);
		}
	}
	if (n && pslot + 1 < nritems(parent)) {
		ret = read_sibling(w, p, 0, pslot + 1, &s);
		if (ret)
			return ret;
		sfree = leaf_free(tc, s);
		for (k = n; k > 0 && leaf_used(l, n - k, k) > sfree; k--)
			;
		if (k) {
			leaf_move(tc, s, 0, l, n - k, k);
			first_key(s, &key);
			set_key(parent, pslot + 1, &key);
		}
		ub_eb_put(tc, s);
		n = nritems(l);
	}
	if (n)
		return 0;
	ret = drop_block(w, l, parent);
	if (!ret)
		ret = del_ptr(w, p, 1, pslot);
	p->nodes[0] = NULL;
	ub_eb_put(tc, l);
	return ret;
}

/* ---- the API ---- */

static int check_ta(struct ub_tree_ctx *tc, struct ub_tree_alloc *ta)
{
	if (!ta || !ta->alloc_block || !ta->cow_block || !ta->free_block || !ta->transid) {
		ub_err(&tc->log, "tree change without a transaction's allocator");
		return -EINVAL;
	}
	return 0;
}

int ub_tree_search_slot(struct ub_tree_ctx *tc, struct ub_tree_alloc *ta, struct ub_root *root,
			const struct ub_key *key, struct ub_path *p, int ins_len, bool cow)
{
	struct wctx w = { tc, ta, root };
	int restarts = 0, ret;

	if (!cow && !ins_len) {
		ret = ub_tree_search(tc, root, key, p);
		if (ret == 2) {
			/* the insert position: after the last item of the last leaf */
			if (p->nodes[0] && ub_eb_nritems(p->nodes[0]))
				p->slots[0] = (int)ub_eb_nritems(p->nodes[0]);
			ret = 1;
		}
		return ret;
	}
	if (!cow)
		return -EINVAL; /* changing a tree means copying its blocks */
	ret = check_ta(tc, ta);
	if (ret)
		return ret;
	if (ins_len > 0 && (uint32_t)ins_len > leaf_data_size(tc))
		return -EOVERFLOW;
again:
	ub_path_release(p);
	p->tc = tc;
	p->root = root;
	{
		struct ub_expect exp = ub_root_expect(root);
		struct ub_eb *eb;
		int level;

		if (root->level >= UB_MAX_LEVEL)
			return -EUCLEAN;
		ret = ub_tree_read_block(tc, root->bytenr, &exp, &eb);
		if (ret)
			return ret;
		level = level_of(eb);
		p->nodes[level] = eb;
		for (;;) {
			bool exact;
			int slot;

			ret = cow_path(&w, p, level);
			if (ret)
				goto fail;
			eb = p->nodes[level];
			slot = ub_eb_lower_bound(eb, key, &exact);
			if (level == 0) {
				p->slots[0] = slot;
				if (ins_len > 0 && leaf_free(tc, eb) < (uint32_t)ins_len) {
					ret = split_leaf(&w, p, key, (uint32_t)ins_len, exact);
					/* an item that cannot grow that much: found all the same, ub_tree_extend_item says no */
					if (ret == -EOVERFLOW && exact)
						ret = 0;
					if (ret)
						goto fail;
				}
				return exact ? 0 : 1;
			}
			if (!exact && slot > 0)
				slot--;
			p->slots[level] = slot;
			if (ins_len > 0 && nritems(eb) >= node_max(tc) - 3) {
				ret = 1;
				if (level + 1 < UB_MAX_LEVEL && p->nodes[level + 1])
					ret = push_nodes_for_insert(&w, p, level);
				if (ret < 0)
					goto fail;
				if (ret > 0)
					ret = split_node(&w, p, level);
				if (ret)
					goto fail;
			} else if (ins_len < 0 && restarts < 64 &&
				   (nritems(eb) < node_max(tc) / 2 || (level + 1 >= UB_MAX_LEVEL || !p->nodes[level + 1]))) {
				ret = balance_node(&w, p, level);
				if (ret < 0)
					goto fail;
				if (ret > 0) {
					restarts++;
					goto again;
				}
			}
			ret = ub_path_read_child(p, level, p->slots[level], &eb);
			if (ret)
				goto fail;
			level--;
			p->nodes[level] = eb;
		}
	}
fail:
	ub_path_release(p);
	return ret;
}

/* The key right after the path's leaf: the next slot's key in the first node above that has one. */
static bool key_after_leaf(const struct ub_path *p, struct ub_key *k)
{
	for (int l = 1; l < UB_MAX_LEVEL && p->nodes[l]; l++) {
		if ((uint32_t)p->slots[l] + 1 < nritems(p->nodes[l])) {
			ub_eb_item_key(p->nodes[l], p->slots[l] + 1, k);
			return true;
		}
	}
	return false;
}

/* An insert given up after its search split off an empty leaf for it: the leaf goes again. */
static int discard_empty_leaf(struct wctx *w, struct ub_path *p)
{
	struct ub_eb *l = p->nodes[0];
	int ret;

	if (!l || nritems(l) || !p->nodes[1])
		return 0;
	ret = drop_block(w, l, p->nodes[1]);
	if (!ret)
		ret = del_ptr(w, p, 1, (uint32_t)p->slots[1]);
	p->nodes[0] = NULL;
	ub_eb_put(w->tc, l);
	return ret;
}

int ub_tree_insert_empty_items(struct ub_tree_ctx *tc, struct ub_tree_alloc *ta, struct ub_root *root,
			       struct ub_path *p, const struct ub_key *keys, const uint32_t *sizes, int n)
{
	uint64_t total = 0;
	struct ub_eb *l;
	uint32_t slot;
	int ret;

	if (n <= 0)
		return -EINVAL;
	for (int i = 0; i < n; i++) {
		total += (uint64_t)sizes[i] + UB_ITEM_SIZE;
		if (i && ub_key_cmp(&keys[i - 1], &keys[i]) >= 0)
			return -EINVAL;
	}
	if (total > leaf_data_size(tc))
		return -EOVERFLOW;
	ret = ub_tree_search_slot(tc, ta, root, &keys[0], p, (int)total, true);
	if (ret < 0)
		return ret;
	if (ret == 0) {
		ub_path_release(p);
		return -EEXIST;
	}
	l = p->nodes[0];
	slot = (uint32_t)p->slots[0];
	{
		/* the last new key must stay below the item that follows, in this leaf or the next */
		struct ub_key next;
		bool have = slot < nritems(l) ? (ub_eb_item_key(l, (int)slot, &next), true) : key_after_leaf(p, &next);
		if (have && ub_key_cmp(&keys[n - 1], &next) >= 0) {
			struct wctx w = { tc, ta, root };
			ret = discard_empty_leaf(&w, p);
			ub_path_release(p);
			return ret ? ret : -EEXIST;
		}
	}
	if (leaf_free(tc, l) < total) {
		/* search_slot made the room; not having it is a bug here, not the caller's */
		ub_err(&tc->log, "tree %llu: leaf at logical %llu has %u bytes free, %llu needed after the split",
		       (unsigned long long)root->objectid, (unsigned long long)l->start, leaf_free(tc, l),
		       (unsigned long long)total);
		ub_path_release(p);
		return -EUCLEAN;
	}
	leaf_open(tc, l, slot, (uint32_t)n, sizes, NULL, 0);
	for (int i = 0; i < n; i++) {
		set_key(l, slot + (uint32_t)i, &keys[i]);
		memset(leaf_data(l) + it_off(l, slot + (uint32_t)i), 0, sizes[i]);
	}
	if (slot == 0)
		fixup_low_keys(p, &keys[0], 1);
	return 0;
}

int ub_tree_insert_item(struct ub_tree_ctx *tc, struct ub_tree_alloc *ta, struct ub_root *root,
			const struct ub_key *key, const void *data, uint32_t size)
{
	struct ub_path p;
	uint8_t *dst;
	uint32_t got;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_insert_empty_items(tc, ta, root, &p, key, &size, 1);
	if (ret == 0) {
		dst = ub_path_data_mut(&p, &got);
		if (size)
			memcpy(dst, data, size);
	}
	ub_path_release(&p);
	return ret;
}

int ub_tree_del_items(struct ub_tree_ctx *tc, struct ub_tree_alloc *ta, struct ub_root *root, struct ub_path *p,
		      int slot, int n)
{
	struct wctx w = { tc, ta, root };
	struct ub_eb *l = p->nodes[0];
	int ret;

	ret = check_ta(tc, ta);
	if (ret)
		return ret;
	if (!l || !l->dirty || slot < 0 || n <= 0 || (uint64_t)slot + (uint64_t)n > nritems(l))
		return -EINVAL;
	leaf_close(tc, l, (uint32_t)slot, (uint32_t)n);
	if (nritems(l) == 0) {
		if (!p->nodes[1])
			return 0; /* the root leaf may be empty */
		ret = drop_block(&w, l, p->nodes[1]);
		if (!ret)
			ret = del_ptr(&w, p, 1, (uint32_t)p->slots[1]);
		p->nodes[0] = NULL;
		ub_eb_put(tc, l);
		return ret;
	}
	if (slot == 0 && p->nodes[1]) {
		struct ub_key k;
		first_key(l, &k);
		fixup_low_keys(p, &k, 1);
	}
	if (p->nodes[1] && leaf_used(l, 0, nritems(l)) < leaf_data_size(tc) / 3)
		return merge_leaf(&w, p);
	return 0;
}

int ub_tree_extend_item(struct ub_tree_ctx *tc, struct ub_tree_alloc *ta, struct ub_root *root, struct ub_path *p,
			uint32_t extra)
{
	struct ub_eb *l = p->nodes[0];
	uint32_t slot, n, end, top;
	uint8_t *d;

	(void)ta;
	(void)root;
	if (!l || !l->dirty || (uint32_t)p->slots[0] >= nritems(l))
		return -EINVAL;
	slot = (uint32_t)p->slots[0];
	if ((uint64_t)it_size(l, slot) + extra + UB_ITEM_SIZE > leaf_data_size(tc))
		return -EOVERFLOW;
	if (leaf_free(tc, l) < extra)
		return -ENOSPC;
	n = nritems(l);
	d = leaf_data(l);
	end = data_end(tc, l);
	top = it_end(l, slot);
	memmove(d + end - extra, d + end, top - end);
	for (uint32_t i = slot; i < n; i++)
		set_it_off(l, i, it_off(l, i) - extra);
	set_it_size(l, slot, it_size(l, slot) + extra);
	memset(d + top - extra, 0, extra);
	return 0;
}

void ub_tree_truncate_item(struct ub_tree_ctx *tc, struct ub_path *p, uint32_t new_size, bool from_end)
{
	struct ub_eb *l = p->nodes[0];
	uint32_t slot, n, old, diff, end, off, upto;
	uint8_t *d;

	if (!l || !l->dirty || (uint32_t)p->slots[0] >= nritems(l))
		return;
	slot = (uint32_t)p->slots[0];
	old = it_size(l, slot);
	if (new_size >= old)
		return;
	n = nritems(l);
	d = leaf_data(l);
	diff = old - new_size;
	end = data_end(tc, l);
	off = it_off(l, slot);
	/* the data below what stays moves up by diff */
	upto = from_end ? off + new_size : off;
	memmove(d + end + diff, d + end, upto - end);
	for (uint32_t i = slot; i < n; i++)
		set_it_off(l, i, it_off(l, i) + diff);
	set_it_size(l, slot, new_size);
}

uint8_t *ub_path_data_mut(struct ub_path *p, uint32_t *size)
{
	struct ub_eb *l = p->nodes[0];

	if (!l || !l->dirty || maybe_shared(p->root, l) || (uint32_t)p->slots[0] >= nritems(l))
		return NULL;
	return (uint8_t *)ub_eb_item_data(l, p->slots[0], size);
}

void ub_path_mark_dirty(struct ub_path *p)
{
	struct ub_eb *l = p->nodes[0];

	/* blocks become dirty when copied or made; a clean one here was changed against the rules */
	if (l && !l->dirty)
		ub_err(&p->tc->log, "tree block at logical %llu marked dirty but not copied in this transaction",
		       (unsigned long long)l->start);
}

int ub_tree_create_root(struct ub_tree_ctx *tc, struct ub_tree_alloc *ta, uint64_t root_id, struct ub_root *out)
{
	struct ub_root r = { .objectid = root_id };
	struct wctx w = { tc, ta, &r };
	struct ub_eb *eb;
	int ret = check_ta(tc, ta);

	if (ret)
		return ret;
	ret = new_block(&w, 0, &eb);
	if (ret)
		return ret;
	r.bytenr = eb->start;
	r.generation = ta->transid;
	r.level = 0;
	ub_eb_put(tc, eb);
	*out = r;
	return 0;
}

int ub_tree_copy_root(struct ub_tree_ctx *tc, struct ub_tree_alloc *ta, struct ub_root *src,
		      uint64_t new_root_id, struct ub_root *out)
{
	struct ub_root r = { .objectid = new_root_id };
	struct wctx w = { tc, ta, &r };
	struct ub_expect exp = ub_root_expect(src);
	struct ub_eb *old, *copy;
	uint64_t flags, made = tc->births; /* every block made so far may now be in both trees */
	int ret = check_ta(tc, ta);

	if (ret)
		return ret;
	if (!ta->copy_root)
		return -EINVAL;
	ret = ub_tree_read_block(tc, src->bytenr, &exp, &old);
	if (ret)
		return ret;
	ret = new_block(&w, level_of(old), &copy);
	if (ret)
		goto out;
	memcpy(copy->data + UB_CSUM_SIZE_MAX, old->data + UB_CSUM_SIZE_MAX, copy->len - UB_CSUM_SIZE_MAX);
	UB_SET(ub_disk_header, bytenr, copy->data, copy->start);
	UB_SET(ub_disk_header, generation, copy->data, ta->transid);
	UB_SET(ub_disk_header, owner, copy->data, new_root_id);
	flags = HDR(flags, old->data) & ~(BTRFS_HEADER_FLAG_WRITTEN | BTRFS_HEADER_FLAG_RELOC | (0xffULL << UB_BACKREF_REV_SHIFT));
	UB_SET(ub_disk_header, flags, copy->data, flags | (UB_MIXED_BACKREF_REV << UB_BACKREF_REV_SHIFT));
	memcpy(copy->data + offsetof(struct ub_disk_header, fsid), tc->metadata_uuid, UB_FSID_SIZE);
	memcpy(copy->data + offsetof(struct ub_disk_header, chunk_tree_uuid), tc->chunk_tree_uuid, UB_UUID_SIZE);
	ret = ta->copy_root(ta->arg, new_root_id, old, copy);
	if (ret) {
		ub_tree_forget_block(tc, copy);
		ub_eb_put(tc, copy);
		goto out;
	}
	r.bytenr = copy->start;
	r.generation = ta->transid;
	r.level = (uint8_t)level_of(copy);
	r.shared_upto = made;
	src->shared_upto = made;
	ub_eb_put(tc, copy);
	*out = r;
out:
	ub_eb_put(tc, old);
	return ret;
}
