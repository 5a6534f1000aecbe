/* SPDX-License-Identifier: MIT */
/* Dropping dead roots (the rules are in cleaner.h). */
#include <errno.h>
#include <stddef.h>
#include "txn.h"
#include "cleaner.h"

#define RI(field, p) UB_GET(btrfs_root_item, field, p)
#define RI_DROP_END (offsetof(struct btrfs_root_item, drop_level) + 1)

struct drop {
	struct ub_txn *t;
	struct ub_engine *e;
	struct ub_eroot *er;
	uint64_t id;
	uint64_t born; /* the ROOT_ITEM key offset: blocks not newer than it came from the snapshot's source */
	struct ub_eb *nodes[UB_MAX_LEVEL];
	int slots[UB_MAX_LEVEL];
	uint64_t refs[UB_MAX_LEVEL], flags[UB_MAX_LEVEL];
	int top, level;
};

/* What the ROOT_ITEM of a dead root says. */
struct dead {
	uint64_t id, offset;
	struct ub_key progress;
	int drop_level;
};

static const char *tname(const struct drop *d, char *buf, size_t len)
{
	return ub_tree_name(d->id, buf, len);
}

/* The dead root `id` names, if its ROOT_ITEM (newest) has refs 0: 0, 1 if it is not dead, <0. */
static int read_dead(struct ub_engine *e, uint64_t id, struct dead *out)
{
	struct ub_eroot *er;
	struct ub_key key;
	struct ub_path p;
	const uint8_t *d;
	uint32_t size;
	int ret;

	ret = ub_engine_root(e, id, &er);
	if (ret)
		return ret == -ENOENT ? 1 : ret;
	key = (struct ub_key){ id, BTRFS_ROOT_ITEM_KEY, er->item_offset };
	ub_path_init(&p);
	ret = ub_tree_lookup(&e->fs.tc, &e->fs.root_tree->root, &key, &p, &d, &size);
	if (ret == 0 && size < RI_DROP_END) {
		ub_err(&e->fs.log, "root tree: ROOT_ITEM (%llu ROOT_ITEM %llu) of %u bytes is too short for its drop progress",
		       (unsigned long long)id, (unsigned long long)er->item_offset, size);
		ret = -EUCLEAN;
	} else if (ret == 0 && RI(refs, d)) {
		ret = 1;
	} else if (ret == 0) {
		*out = (struct dead){ .id = id, .offset = er->item_offset, .drop_level = RI(drop_level, d) };
		ub_key_read(&out->progress, d + offsetof(struct btrfs_root_item, drop_progress));
	}
	ub_path_release(&p);
	return ret == -ENOENT ? 1 : ret;
}

/* The first dead root in the root tree's ORPHAN items: 0, 1 if none, <0. */
static int find_dead(struct ub_engine *e, struct dead *out)
{
	struct ub_key min = { BTRFS_ORPHAN_OBJECTID, BTRFS_ORPHAN_ITEM_KEY, 0 };
	struct ub_key max = { BTRFS_ORPHAN_OBJECTID, BTRFS_ORPHAN_ITEM_KEY, UINT64_MAX };
	uint64_t ids[64];
	struct ub_tree_iter it;
	struct ub_key k;
	const uint8_t *d;
	uint32_t size;
	int n, ret;

	/* in batches, ids first: loading a root object reads the root tree the iterator holds */
	do {
		n = 0;
		ret = ub_tree_iter_start(&it, &e->fs.tc, &e->fs.root_tree->root, &min, &max);
		while (ret == 0 && n < 64 && (ret = ub_tree_iter_next(&it, &k, &d, &size)) == 0)
			ids[n++] = k.offset;
		ub_tree_iter_end(&it);
		if (ret < 0)
			return ret;
		for (int i = 0; i < n; i++) {
			/* an orphan item that names no subvolume (a free space cache inode) is not ours */
			if (ids[i] != BTRFS_FS_TREE_OBJECTID &&
			    (ids[i] < BTRFS_FIRST_FREE_OBJECTID || ids[i] > BTRFS_LAST_FREE_OBJECTID))
				continue;
			ret = read_dead(e, ids[i], out);
			if (ret <= 0)
				return ret;
		}
		if (n == 64)
			min.offset = ids[63] + 1;
	} while (n == 64 && ids[63] != UINT64_MAX);
	return 1;
}

void ub_engine_set_clean_step(struct ub_engine *e, uint64_t blocks)
{
	e->clean_step = blocks;
}

int ub_engine_has_dead_roots(struct ub_engine *e)
{
	struct dead dd;
	int ret = find_dead(e, &dd);

	return ret < 0 ? ret : ret == 0;
}

static int read_child(struct drop *d, const struct ub_eb *parent, int slot, struct ub_eb **out)
{
	struct ub_key first;
	struct ub_expect exp = {
		.owner = d->id,
		.level = ub_eb_level(parent) - 1,
		.generation = ub_eb_node_gen(parent, slot),
		.first_key = &first,
		.parent = parent->start,
		.slot = slot,
	};

	ub_eb_item_key(parent, slot, &first);
	return ub_tree_read_block(&d->e->fs.tc, ub_eb_node_blockptr(parent, slot), &exp, out);
}

/*
 * The kernel's UPDATE_BACKREF stage on a shared block that may hold blocks
 * of the dead tree: every block below that the dead tree owns turns its
 * children's references into full back references (from the block itself).
 */
static int to_full_backrefs(struct drop *d, const struct ub_eb *eb)
{
	uint64_t refs, flags;
	int ret;

	if (ub_eb_owner(eb) != d->id)
		return 0;
	ret = ub_txn_block_refs(d->t, eb, &refs, &flags);
	if (ret)
		return ret;
	if (!(flags & BTRFS_BLOCK_FLAG_FULL_BACKREF)) {
		ret = ub_txn_child_refs(d->t, eb, d->id, true, 1);
		if (!ret)
			ret = ub_txn_child_refs(d->t, eb, d->id, false, -1);
		if (!ret)
			ret = ub_dref_set_flags(d->t->refs, eb->start, d->e->fs.vol->nodesize, ub_eb_level(eb),
						BTRFS_BLOCK_FLAG_FULL_BACKREF);
		if (ret)
			return ret;
	}
	for (uint32_t i = 0; ub_eb_level(eb) && i < ub_eb_nritems(eb) && !ret; i++) {
		struct ub_eb *child;

		/* older than the dead tree: made by its snapshot source, never owned by it */
		if (ub_eb_node_gen(eb, (int)i) <= d->born)
			continue;
		ret = read_child(d, eb, (int)i, &child);
		if (ret)
			break;
		ret = to_full_backrefs(d, child);
		ub_eb_put(&d->e->fs.tc, child);
	}
	return ret;
}

/* Drop the reference the block at `bytenr` (level) gets from nodes[plevel] (or from the ROOT_ITEM). */
static int drop_ref(struct drop *d, uint64_t bytenr, int level, int plevel, bool last)
{
	uint64_t parent = 0;

	if (plevel > d->top) {
		if (d->flags[level] & BTRFS_BLOCK_FLAG_FULL_BACKREF)
			parent = bytenr;
	} else if (d->flags[plevel] & BTRFS_BLOCK_FLAG_FULL_BACKREF) {
		parent = d->nodes[plevel]->start;
	}
	return ub_dref_add_tree(d->t->refs, bytenr, d->e->fs.vol->nodesize, level, parent ? 0 : d->id, parent, -1,
				last ? UB_DREF_LAST_REF : 0);
}

/* nodes[lv] points at the child in slots[lv]: descend into it if it is ours, else unreference it. */
static int visit_child(struct drop *d, int lv, bool *freed)
{
	struct ub_eb *child;
	uint64_t refs, flags;
	int ret;

	*freed = false;
	ret = read_child(d, d->nodes[lv], d->slots[lv], &child);
	if (ret)
		return ret;
	ret = ub_txn_block_refs(d->t, child, &refs, &flags);
	if (!ret && refs == 1) {
		d->nodes[lv - 1] = child;
		d->slots[lv - 1] = 0;
		d->refs[lv - 1] = refs;
		d->flags[lv - 1] = flags;
		d->level = lv - 1;
		return 0;
	}
	if (!ret && ub_eb_node_gen(d->nodes[lv], d->slots[lv]) > d->born)
		ret = to_full_backrefs(d, child);
	if (!ret)
		ret = drop_ref(d, child->start, lv - 1, lv, false);
	ub_eb_put(&d->e->fs.tc, child);
	if (!ret) {
		d->slots[lv]++;
		*freed = true;
	}
	return ret;
}

/* Every child of nodes[lv] is handled: a leaf of ours lets go of its data, then the block goes. */
static int finish_block(struct drop *d, int lv)
{
	struct ub_eb *eb = d->nodes[lv];
	int ret = 0;

	if (lv == 0 && d->refs[0] == 1)
		ret = ub_txn_child_refs(d->t, eb, d->id, d->flags[0] & BTRFS_BLOCK_FLAG_FULL_BACKREF, -1);
	if (!ret)
		ret = drop_ref(d, eb->start, lv, lv + 1, d->refs[lv] == 1);
	ub_eb_put(&d->e->fs.tc, eb);
	d->nodes[lv] = NULL;
	return ret;
}

/* First slot of node eb whose key is >= key (nritems if none); *exact when equal. */
static int slot_for(const struct ub_eb *eb, const struct ub_key *key, bool *exact)
{
	uint32_t n = ub_eb_nritems(eb);

	*exact = false;
	for (uint32_t i = 0; i < n; i++) {
		struct ub_key k;
		int c;

		ub_eb_item_key(eb, (int)i, &k);
		c = ub_key_cmp(&k, key);
		if (c >= 0) {
			*exact = c == 0;
			return (int)i;
		}
	}
	return (int)n;
}

/* The walk's path from the root block to where the ROOT_ITEM says the drop stands. */
static int walk_start(struct drop *d, const struct dead *dd)
{
	struct ub_expect exp = ub_root_expect(&d->er->root);
	char n[64];
	int ret, lv;

	ret = ub_tree_read_block(&d->e->fs.tc, d->er->root.bytenr, &exp, &d->nodes[d->er->root.level]);
	if (ret)
		return ret;
	d->top = lv = d->er->root.level;
	d->level = d->top;
	ret = ub_txn_block_refs(d->t, d->nodes[lv], &d->refs[lv], &d->flags[lv]);
	if (ret || dd->progress.objectid == 0)
		return ret;
	if (dd->drop_level > d->top) {
		ub_err(&d->e->fs.log, "root tree: dead tree %s has drop level %d above its root's level %d",
		       tname(d, n, sizeof(n)), dd->drop_level, d->top);
		return -EUCLEAN;
	}
	for (; lv > dd->drop_level; lv--) {
		bool exact;
		int slot = slot_for(d->nodes[lv], &dd->progress, &exact);

		if (!exact && slot > 0)
			slot--;
		d->slots[lv] = slot;
		/* above the drop level the path is the walk's own: blocks only this tree holds */
		if (d->refs[lv] != 1 || slot >= (int)ub_eb_nritems(d->nodes[lv])) {
			ub_err(&d->e->fs.log, "dead tree %s: block %llu (level %d) on the path to drop progress "
			       "(%llu %u %llu) is %s", tname(d, n, sizeof(n)), (unsigned long long)d->nodes[lv]->start, lv,
			       (unsigned long long)dd->progress.objectid, dd->progress.type,
			       (unsigned long long)dd->progress.offset, d->refs[lv] != 1 ? "shared" : "empty");
			return -EUCLEAN;
		}
		ret = read_child(d, d->nodes[lv], slot, &d->nodes[lv - 1]);
		if (!ret)
			ret = ub_txn_block_refs(d->t, d->nodes[lv - 1], &d->refs[lv - 1], &d->flags[lv - 1]);
		if (ret)
			return ret;
	}
	if (lv > 0) {
		bool exact;

		d->slots[lv] = slot_for(d->nodes[lv], &dd->progress, &exact);
	}
	d->level = lv;
	return 0;
}

/*
 * Walk until the tree is gone (*done) or `budget` blocks were let go of and
 * the walk stands at a point the ROOT_ITEM can record.
 */
static int walk(struct drop *d, uint64_t budget, bool *done)
{
	uint64_t used = 0;
	int ret;

	*done = false;
	/* a root block someone else holds too: only our reference goes (the kernel's walk does the same) */
	if (d->refs[d->top] > 1) {
		while (d->level < d->top) {
			ub_eb_put(&d->e->fs.tc, d->nodes[d->level]);
			d->nodes[d->level++] = NULL;
		}
		ret = finish_block(d, d->top);
		*done = !ret;
		return ret;
	}
	for (;;) {
		int lv = d->level;
		bool freed;

		if (lv > 0 && d->slots[lv] < (int)ub_eb_nritems(d->nodes[lv])) {
			if (budget && used >= budget)
				return 0;
			ret = visit_child(d, lv, &freed);
			if (ret)
				return ret;
			used += freed;
			continue;
		}
		ret = finish_block(d, lv);
		if (ret)
			return ret;
		used++;
		d->t->blocks_freed++;
		if (lv == d->top) {
			*done = true;
			return 0;
		}
		d->level = lv + 1;
		d->slots[lv + 1]++;
	}
}

static int root_item_path(struct drop *d, struct ub_path *p, int ins_len, const struct ub_key *key)
{
	int ret;

	ub_path_init(p);
	ret = ub_tree_search_slot(&d->e->fs.tc, ub_txn_ta(d->t), &d->e->fs.root_tree->root, key, p, ins_len, true);
	if (ret > 0) {
		ub_err(&d->e->fs.log, "root tree: item (%llu %u %llu) of a dead tree vanished",
		       (unsigned long long)key->objectid, key->type, (unsigned long long)key->offset);
		ret = -EUCLEAN;
	}
	return ret;
}

/* The ROOT_ITEM records where the walk stands: the next child of nodes[level]. */
static int save_progress(struct drop *d, const struct dead *dd)
{
	struct ub_key key = { d->id, BTRFS_ROOT_ITEM_KEY, dd->offset }, next;
	struct ub_path p;
	uint32_t size;
	uint8_t *m;
	int ret;

	ub_eb_item_key(d->nodes[d->level], d->slots[d->level], &next);
	ret = root_item_path(d, &p, 0, &key);
	if (!ret) {
		m = ub_path_data_mut(&p, &size);
		if (!m || size < RI_DROP_END) {
			ret = -EUCLEAN;
		} else {
			ub_key_write(m + offsetof(struct btrfs_root_item, drop_progress), &next);
			UB_SET(btrfs_root_item, drop_level, m, (uint8_t)d->level);
			ub_path_mark_dirty(&p);
		}
	}
	ub_path_release(&p);
	return ret;
}

static int del_item(struct drop *d, const struct ub_key *key)
{
	struct ub_path p;
	int ret = root_item_path(d, &p, -1, key);

	if (!ret)
		ret = ub_tree_del_items(&d->e->fs.tc, ub_txn_ta(d->t), &d->e->fs.root_tree->root, &p, p.slots[0], 1);
	ub_path_release(&p);
	return ret;
}

/* The tree is gone: its items go, its object stays, empty (roots.h). */
static int forget_tree(struct drop *d, const struct dead *dd)
{
	struct ub_key key = { d->id, BTRFS_ROOT_ITEM_KEY, dd->offset };
	int ret = del_item(d, &key);

	if (!ret) {
		key = (struct ub_key){ BTRFS_ORPHAN_OBJECTID, BTRFS_ORPHAN_ITEM_KEY, d->id };
		ret = del_item(d, &key);
	}
	if (ret)
		return ret;
	/* the commit publishes it (committed = root); an abort brings the tree back */
	d->er->root = (struct ub_root){ .objectid = d->id };
	d->er->item_bytenr = 0;
	d->er->item_generation = 0;
	d->er->item_level = 0;
	return 0;
}

static int drop_some(struct ub_engine *e, const struct dead *dd, uint64_t budget, bool *done)
{
	struct drop d = { .e = e, .id = dd->id, .born = dd->offset };
	uint64_t op_bytes;
	int ret;

	ret = ub_engine_root(e, dd->id, &d.er);
	if (ret)
		return ret;
	/* a drop frees more than it adds, but the extent tree's copies need room first */
	op_bytes = (uint64_t)e->fs.vol->nodesize * ub_chunk_op_blocks(e->fs.extent_tree->root.level) * 4;
	ret = ub_engine_begin_op(e, op_bytes, UB_CHUNK_OP_FREE, &d.t);
	if (ret)
		return ret;
	ret = walk_start(&d, dd);
	if (!ret)
		ret = walk(&d, budget, done);
	if (!ret)
		ret = *done ? forget_tree(&d, dd) : save_progress(&d, dd);
	for (int i = 0; i < UB_MAX_LEVEL; i++)
		if (d.nodes[i])
			ub_eb_put(&e->fs.tc, d.nodes[i]);
	if (ret) {
		char n[64];

		ub_err(&e->fs.log, "cleaner: dropping dead tree %s failed: %d", tname(&d, n, sizeof(n)), ret);
		ub_txn_abort(d.t);
		ub_engine_end_op(e);
		return ret;
	}
	ret = ub_engine_commit(e);
	ub_engine_end_op(e);
	return ret;
}

/*
 * Every empty block group the kernel's rule lets go, one transaction each,
 * committed at once (an abort then has only that group to put back).
 */
static int remove_empty_groups(struct ub_engine *e)
{
	uint64_t cand[64], pos = 0, start, op_bytes;
	int n, removed = 0, ret = 0;

	op_bytes = (uint64_t)e->fs.vol->nodesize * ub_chunk_op_blocks(e->fs.extent_tree->root.level) * 8;
	/* in batches of candidates, until none is left past the last batch */
	do {
		/*
		 * Only groups that are empty now: a chunk the preparation of a removal
		 * adds is empty too, and taking it away would only make the next
		 * preparation add another.
		 */
		n = 0;
		while (n < 64 && ub_chunk_next_removable(e->alloc, pos, &start) == 0) {
			cand[n++] = start;
			pos = start + 1;
		}
		for (int i = 0; i < n && !ret; i++) {
			struct ub_chunk_ctx cc;
			struct ub_txn *t;

			/* the rule again: an earlier removal may have made this one the last of its kind */
			if (ub_chunk_next_removable(e->alloc, cand[i], &start) || start != cand[i])
				continue;
			ret = ub_engine_begin_op(e, op_bytes, UB_CHUNK_OP_FREE, &t);
			if (ret) {
				ub_err(&e->fs.log, "cleaner: no room to remove the empty block group at %llu: %d",
				       (unsigned long long)start, ret);
				return ret;
			}
			ret = ub_txn_chunk_ctx(t, &cc);
			if (!ret)
				ret = ub_chunk_remove(&cc, start);
			if (ret == -EBUSY) {
				ret = 0; /* touched by this transaction's preparation: not now */
			} else if (ret) {
				ub_err(&e->fs.log, "cleaner: removing the empty block group at %llu failed: %d",
				       (unsigned long long)start, ret);
				if (e->running)
					ub_txn_abort(e->running);
				ub_engine_end_op(e);
				return ret;
			} else {
				removed++;
			}
			/* at once: the freed device ranges must not be reused before this commit is durable */
			if (!ret)
				ret = ub_engine_commit(e);
			ub_engine_end_op(e);
		}
	} while (!ret && n == 64);
	if (removed)
		ub_info(&e->fs.log, "cleaner: removed %d empty block group%s", removed, removed > 1 ? "s" : "");
	return ret;
}

static int clean(struct ub_engine *e, uint64_t budget_blocks, bool *more)
{
	struct dead dd;
	bool done = false;
	int ret;

	if (!e || !more)
		return -EINVAL;
	*more = false;
	if (ub_engine_broken(e))
		return -EROFS;
	/* the walk reads the dead tree as committed: none of its blocks may be of the running transaction */
	ret = ub_engine_commit(e);
	if (ret)
		return ret;
	ret = find_dead(e, &dd);
	if (ret == 0) {
		ret = drop_some(e, &dd, budget_blocks, &done);
		if (ret)
			return ret;
		if (!done) {
			*more = true;
			return 0;
		}
		ret = find_dead(e, &dd);
		if (ret == 0) {
			*more = true;
			return 0;
		}
	}
	if (ret < 0)
		return ret;
	/* no dead root left: what they freed is free now (unpinned by the commits above) */
	return remove_empty_groups(e);
}

int ub_engine_clean(struct ub_engine *e, uint64_t budget_blocks, bool *more)
{
	bool was = e ? e->cleaning : false;
	int ret;

	if (!e || !more)
		return -EINVAL;
	ret = ub_fs_live_write_lock(&e->fs);
	if (ret)
		return ret;
	/* the commits made here must not start another cleaning step (ub_engine_commit) */
	was = e->cleaning;
	e->cleaning = true;
	ret = clean(e, budget_blocks, more);
	e->cleaning = was;
	if (!ret && !*more)
		e->dead_roots = false;
	ub_fs_live_write_unlock(&e->fs);
	return ret;
}
