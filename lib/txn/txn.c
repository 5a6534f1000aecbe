/* SPDX-License-Identifier: MIT */
/*
 * Transactions: start, the tree layer's allocation callbacks, commit, abort.
 *
 * The rules that keep every commit crash-safe:
 *  1. Nothing reachable from the last committed superblock is ever
 *     overwritten. A tree block of an older generation is copied to a newly
 *     reserved address before it changes (the tree layer asks cow_block), and
 *     the allocator hands out only space that no committed tree uses.
 *  2. Space freed in transaction N (an old copy, a block merged away, an
 *     extent whose last reference went) is pinned: unusable until N's
 *     superblocks are durable on every device, since until then the last
 *     committed trees may still point there. ub_alloc_unpin() runs only after
 *     ub_volume_write_supers() returned success.
 *  3. Superblocks are written only after every block they reach is written
 *     and flushed (ub_volume_write_supers flushes before and after).
 *  4. A failure anywhere in the commit breaks the engine (read-only from then
 *     on): the disk holds the previous commit, whole, since no superblock
 *     pointing at the half-written one was written.
 *
 * Commit order (DESIGN.md "The write path"):
 *  1. Until nothing changes any more: apply the queued reference changes to
 *     the extent tree (which copies extent tree blocks and so queues more
 *     references: run until the queue is empty); write the block group items'
 *     used bytes and the free space tree for every block group whose space
 *     changed (more copies, more references); write the ROOT_ITEM of every
 *     tree whose root moved into the root tree (more copies...). Each block
 *     is copied once per transaction, so this settles in a few rounds.
 *  2. Write every dirty tree block (ub_tree_write_dirty: checksummed, to
 *     every copy).
 *  3. The superblock: generation + 1, root tree and chunk tree roots and
 *     levels, bytes_used, the next backup root slot (commit_super.c); written
 *     to every device and mirror, with flushes before and after.
 *  4. Unpin what this transaction freed.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include "txn.h"
#include "cleaner.h"
#include "txn/log_tree.h"

#define RI(field, p) UB_GET(btrfs_root_item, field, p)
#define FE(field, p) UB_GET(btrfs_file_extent_item, field, p)

/* The root object the tree layer is changing (it only ever works on ours). */
static struct ub_eroot *txn_root(struct ub_txn *t, uint64_t root_id)
{
	return ub_roots_find(t->e->fs.roots, root_id);
}

static int fail(struct ub_txn *t, int ret)
{
	if (ret && !t->error)
		t->error = ret;
	return ret;
}

static int alloc_block(void *arg, uint64_t root_id, int level, uint64_t *bytenr)
{
	struct ub_txn *t = arg;
	struct ub_engine *e = t->e;
	uint64_t type = root_id == BTRFS_CHUNK_TREE_OBJECTID ? BTRFS_BLOCK_GROUP_SYSTEM : BTRFS_BLOCK_GROUP_METADATA;
	uint64_t start;
	char n[64];
	int ret;

	ret = ub_alloc_reserve(e->alloc, type, e->fs.vol->nodesize, 0, &start);
	if (ret) {
		if (ret == -ENOSPC)
			ub_err(&e->fs.log, "transaction %llu: no %s space left for a tree block of tree %s",
			       (unsigned long long)t->transid, root_id == BTRFS_CHUNK_TREE_OBJECTID ? "system" : "metadata",
			       ub_tree_name(root_id, n, sizeof(n)));
		return fail(t, ret);
	}
	ret = ub_dref_add_tree(t->refs, start, e->fs.vol->nodesize, level, root_id, 0, 1, UB_DREF_NEW_EXTENT);
	if (ret) {
		ub_alloc_unreserve(e->alloc, start, e->fs.vol->nodesize);
		return fail(t, ret);
	}
	t->blocks_allocated++;
	*bytenr = start;
	return 0;
}

/*
 * Add (delta +1) or drop (-1) the references block `eb` holds on its children:
 * by tree `root_id`, or (full) by `eb` itself as their parent. A leaf's
 * children are the data extents its file extent items point at.
 */
static int change_child_refs(struct ub_txn *t, const struct ub_eb *eb, uint64_t root_id, bool full, int delta)
{
	uint32_t n = ub_eb_nritems(eb);
	int level = ub_eb_level(eb);
	uint64_t parent = full ? eb->start : 0, root = full ? 0 : root_id;
	int ret = 0;

	for (uint32_t i = 0; i < n && !ret; i++) {
		struct ub_key k;
		const uint8_t *d;
		uint32_t size;

		if (level) {
			ret = ub_dref_add_tree(t->refs, ub_eb_node_blockptr(eb, (int)i), t->e->fs.vol->nodesize, level - 1,
					       root, parent, delta, 0);
			continue;
		}
		ub_eb_item_key(eb, (int)i, &k);
		if (k.type != BTRFS_EXTENT_DATA_KEY)
			continue;
		d = ub_eb_item_data(eb, (int)i, &size);
		if (size < sizeof(struct btrfs_file_extent_item) || FE(type, d) == BTRFS_FILE_EXTENT_INLINE ||
		    !FE(disk_bytenr, d))
			continue;
		ret = ub_dref_add_data(t->refs, FE(disk_bytenr, d), FE(disk_num_bytes, d), root, k.objectid,
				       k.offset - FE(offset, d), parent, delta, 0);
	}
	return ret;
}

/*
 * The extent item's reference count and flags of tree block `eb` as they
 * stand now: what the extent tree says plus what this transaction queued.
 */
static int block_ref_info(struct ub_txn *t, const struct ub_eb *eb, uint64_t *refs, uint64_t *flags)
{
	struct ub_engine *e = t->e;
	struct ub_key key = { eb->start, BTRFS_METADATA_ITEM_KEY, ub_eb_level(eb) };
	const struct ub_dref_head *h = ub_dref_find(t->refs, eb->start);
	const uint8_t *d;
	uint32_t size;
	struct ub_path p;
	int ret;

	*refs = *flags = 0;
	ub_path_init(&p);
	ret = ub_tree_lookup(&e->fs.tc, &e->fs.extent_tree->root, &key, &p, &d, &size);
	if (ret == -ENOENT) {
		/* the form before skinny-metadata: an EXTENT_ITEM of the block's length (extent_tree.c) */
		ub_path_release(&p);
		ub_path_init(&p);
		key = (struct ub_key){ eb->start, BTRFS_EXTENT_ITEM_KEY, e->fs.vol->nodesize };
		ret = ub_tree_lookup(&e->fs.tc, &e->fs.extent_tree->root, &key, &p, &d, &size);
	}
	if (ret == -ENOENT && h && h->new_extent) {
		ret = 0; /* made in this transaction (shared by a snapshot of it): only queued references */
	} else if (ret == 0 && size >= sizeof(struct btrfs_extent_item)) {
		*refs = UB_GET(btrfs_extent_item, refs, d);
		*flags = UB_GET(btrfs_extent_item, flags, d);
	} else if (ret == 0 || ret == -ENOENT) {
		ub_err(&e->fs.log, "extent tree: tree block at logical %llu (level %u, owner %llu) has %s", 
		       (unsigned long long)eb->start, ub_eb_level(eb), (unsigned long long)ub_eb_owner(eb),
		       ret ? "no extent item" : "an extent item too short for its counts");
		ret = -EUCLEAN;
	}
	ub_path_release(&p);
	if (ret)
		return ret;
	if (h) {
		if ((int64_t)*refs + h->total_delta < 0)
			return -EUCLEAN;
		*refs = (uint64_t)((int64_t)*refs + h->total_delta);
		*flags |= h->set_flags;
	}
	if (*refs == 0) {
		ub_err(&e->fs.log, "extent tree: tree block at logical %llu is still in a tree but has no references",
		       (unsigned long long)eb->start);
		return -EUCLEAN;
	}
	return 0;
}

/*
 * A subvolume tree's block not newer than its last snapshot, except its root
 * (a snapshot copies the root, so roots are never shared). The ROOT_ITEM's
 * block stands for the root only while it is older than this transaction:
 * a tree made in this transaction keeps its first block as a child.
 */
static bool may_be_shared(const struct ub_txn *t, const struct ub_eroot *er, const struct ub_eb *old)
{
	/*
	 * A block the kernel's relocation wrote (header flag RELOC) may be
	 * shared, or carry full back references, whatever its generation: the
	 * kernel's btrfs_block_can_be_shared looks such a block up too.
	 */
	bool reloc = (UB_GET(ub_disk_header, flags, ub_eb_data(old)) & BTRFS_HEADER_FLAG_RELOC) != 0;

	if (!er->shareable || (ub_eb_generation(old) > er->last_snapshot && !reloc) || old->start == er->root.bytenr)
		return false;
	return old->start != er->item_bytenr || ub_eb_generation(old) == t->transid;
}

/*
 * `old` is replaced by `copy` in tree root_id: the kernel's update_ref_for_cow.
 * A block that snapshots may share (a subvolume tree's block not newer than
 * its last snapshot) keeps its other owners: if this tree owns it and it has
 * no full back references yet, its children get references from the old
 * block itself (full back refs) and keep this tree's, which now stand for the
 * copy; else the copy adds this tree's references to the children. A block
 * only this tree holds but with full back references hands them over to the
 * copy. Then this tree's reference to `old` goes.
 */
static int cow_block(void *arg, uint64_t root_id, const struct ub_eb *old, const struct ub_eb *copy, uint64_t parent)
{
	struct ub_txn *t = arg;
	struct ub_eroot *er = txn_root(t, root_id);
	uint64_t refs = 1, flags = 0;
	unsigned last = 0;
	int level = ub_eb_level(old);
	int ret;

	if (!er)
		return fail(t, -EINVAL);
	if (may_be_shared(t, er, old)) {
		ret = block_ref_info(t, old, &refs, &flags);
		if (ret)
			return fail(t, ret);
	}
	if (refs > 1) {
		if (ub_eb_owner(old) == root_id && !(flags & BTRFS_BLOCK_FLAG_FULL_BACKREF)) {
			ret = change_child_refs(t, old, root_id, true, 1);
			if (!ret)
				ret = ub_dref_set_flags(t->refs, old->start, t->e->fs.vol->nodesize, level,
							BTRFS_BLOCK_FLAG_FULL_BACKREF);
		} else {
			ret = change_child_refs(t, copy, root_id, false, 1);
		}
	} else {
		ret = 0;
		if (flags & BTRFS_BLOCK_FLAG_FULL_BACKREF) {
			ret = change_child_refs(t, copy, root_id, false, 1);
			if (!ret)
				ret = change_child_refs(t, old, root_id, true, -1);
		}
		last = UB_DREF_LAST_REF;
	}
	if (!ret)
		ret = ub_dref_add_tree(t->refs, old->start, t->e->fs.vol->nodesize, level, root_id, 0, -1, last);
	if (ret)
		return fail(t, ret);
	(void)parent;
	t->blocks_cowed++;
	/*
	 * A block of this transaction another tree still holds must still be
	 * written: one the tree layer made (of this generation), or a copy the
	 * relocation made (dirty, keeping the generation of the block it moved).
	 */
	return refs > 1 && (ub_eb_generation(old) == t->transid || old->dirty);
}

static int free_block(void *arg, uint64_t root_id, const struct ub_eb *eb, uint64_t parent)
{
	struct ub_txn *t = arg;
	int ret;

	(void)parent;
	ret = ub_dref_add_tree(t->refs, eb->start, t->e->fs.vol->nodesize, ub_eb_level(eb), root_id, 0, -1,
			       UB_DREF_LAST_REF);
	if (ret)
		return fail(t, ret);
	t->blocks_freed++;
	return 0;
}

/* Snapshot: the copy of src's root, owned by new_root_id, references every child too. */
static int copy_root(void *arg, uint64_t new_root_id, const struct ub_eb *src, const struct ub_eb *copy)
{
	struct ub_txn *t = arg;
	struct ub_eroot *er = txn_root(t, ub_eb_owner(src));
	int ret;

	/*
	 * From now on the source's blocks may be shared, this transaction's
	 * too (the tree layer copies those before they change): the first
	 * change to each must check its references.
	 */
	if (er)
		er->last_snapshot = t->transid;
	ret = change_child_refs(t, copy, new_root_id, false, 1);
	return ret ? fail(t, ret) : 0;
}

/* Space older commits freed comes back once they are durable and their last readers are gone (writer lock held). */
static void release_pins(struct ub_engine *e)
{
	uint64_t upto = ub_roots_oldest_reader(e->fs.roots), durable = ub_engine_generation(e);

	ub_alloc_release_pins(e->alloc, upto < durable ? upto : durable);
}

/* t (zeroed or ended) becomes the running transaction after the last commit, its queue `refs`. */
static void txn_init(struct ub_engine *e, struct ub_txn *t, struct ub_dref_queue *refs)
{
	*t = (struct ub_txn){ .e = e, .refs = refs, .transid = e->sealed + 1 };
	t->ta = (struct ub_tree_alloc){
		.arg = t,
		.transid = t->transid,
		.alloc_block = alloc_block,
		.cow_block = cow_block,
		.free_block = free_block,
		.copy_root = copy_root,
	};
	e->running = t;
	release_pins(e);
}

static int txn_start_locked(struct ub_engine *e, bool owned, struct ub_txn **out)
{
	struct ub_dref_queue *refs;
	struct ub_txn *t;
	int ret;

	if (ub_engine_broken(e))
		return -EROFS;
	if (e->running)
		return -EBUSY;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	ret = ub_dref_queue_new(&refs);
	if (ret) {
		free(t);
		return ret;
	}
	txn_init(e, t, refs);
	t->owned = owned;
	*out = t;
	return 0;
}

int ub_txn_start(struct ub_engine *e, struct ub_txn **out)
{
	int ret = ub_fs_live_write_lock(&e->fs);

	if (ret)
		return ret;
	ret = txn_start_locked(e, true, out);
	if (ret)
		ub_fs_live_write_unlock(&e->fs);
	return ret;
}

int ub_txn_start_joined(struct ub_engine *e, struct ub_txn **out)
{
	return txn_start_locked(e, false, out);
}

/* The transaction is over: the engine may start another (t's memory stays the caller's to free or reuse). */
static void txn_end(struct ub_txn *t)
{
	if (t->e->running == t)
		t->e->running = NULL;
	ub_dref_queue_free(t->refs);
	t->refs = NULL;
}

static void txn_free(struct ub_txn *t)
{
	txn_end(t);
	free(t);
}

/* Every root object back to what the last commit says (published like a commit, roots.h). */
static void roots_back(struct ub_engine *e)
{
	/* trees born in the aborted transaction stay in the table, empty (committed is bytenr 0) */
	ub_roots_lock(e->fs.roots);
	for (struct ub_eroot *er = ub_roots_first(e->fs.roots); er; er = ub_roots_next(er)) {
		er->root = er->committed;
		er->item_bytenr = er->committed.bytenr;
		er->item_generation = er->committed.generation;
		er->item_level = er->committed.level;
		er->last_snapshot = er->item_last_snapshot;
		er->touched = false;
	}
	ub_roots_unlock(e->fs.roots);
}

void ub_txn_abort(struct ub_txn *t)
{
	struct ub_engine *e = t->e;
	bool owned = t->owned;

	if (e->running == t) {
		ub_log_abort(e);
		ub_tree_drop_dirty(&e->fs.tc);
		ub_alloc_abort(e->alloc);
		roots_back(e);
	}
	txn_free(t);
	if (owned)
		ub_fs_live_write_unlock(&e->fs);
}

/* ROOT_ITEMs of every tree whose root moved (or whose last snapshot changed): *changed counts them. */
static int write_root_items(struct ub_txn *t, int *changed)
{
	struct ub_engine *e = t->e;
	struct ub_tree_alloc *ta = &t->ta;
	int ret = 0;

	*changed = 0;
	for (struct ub_eroot *er = ub_roots_first(e->fs.roots); er && !ret; er = ub_roots_next(er)) {
		struct ub_key key = { er->root.objectid, BTRFS_ROOT_ITEM_KEY, er->item_offset };
		struct ub_path p;
		uint8_t *d;
		uint32_t size;
		char n[64];

		if (!er->has_item)
			continue;
		if (er->root.bytenr == er->item_bytenr && er->root.generation == er->item_generation &&
		    er->root.level == er->item_level && er->last_snapshot == er->item_last_snapshot && !er->touched)
			continue;
		ub_path_init(&p);
		ret = ub_tree_search_slot(&e->fs.tc, ta, &e->fs.root_tree->root, &key, &p, 0, true);
		if (ret > 0) {
			ub_err(&e->fs.log, "root tree: the ROOT_ITEM of tree %s (offset %llu) vanished",
			       ub_tree_name(er->root.objectid, n, sizeof(n)), (unsigned long long)er->item_offset);
			ret = -EUCLEAN;
		}
		if (ret == 0) {
			d = ub_path_data_mut(&p, &size);
			if (size < offsetof(struct btrfs_root_item, generation_v2)) {
				ret = -EUCLEAN;
			} else {
				UB_SET(btrfs_root_item, bytenr, d, er->root.bytenr);
				UB_SET(btrfs_root_item, generation, d, er->root.generation);
				UB_SET(btrfs_root_item, level, d, er->root.level);
				UB_SET(btrfs_root_item, last_snapshot, d,
				       er->last_snapshot > RI(last_snapshot, d) ? er->last_snapshot : RI(last_snapshot, d));
				/* generation_v2 == generation tells readers the v2 fields are current */
				if (size >= offsetof(struct btrfs_root_item, generation_v2) + 8)
					UB_SET(btrfs_root_item, generation_v2, d, er->root.generation);
				if (er->touched && size >= offsetof(struct btrfs_root_item, otime)) {
					UB_SET(btrfs_root_item, ctransid, d, t->transid);
					UB_SET(btrfs_timespec, sec, d + offsetof(struct btrfs_root_item, ctime),
					       (uint64_t)er->touch_sec);
					UB_SET(btrfs_timespec, nsec, d + offsetof(struct btrfs_root_item, ctime),
					       er->touch_nsec);
				}
				er->touched = false;
				ub_path_mark_dirty(&p);
				er->item_bytenr = er->root.bytenr;
				er->item_generation = er->root.generation;
				er->item_level = er->root.level;
				er->item_last_snapshot = er->last_snapshot;
				(*changed)++;
			}
		}
		ub_path_release(&p);
	}
	return ret;
}

static void root_of(struct ub_engine *e, uint64_t id, struct ub_root *out)
{
	struct ub_eroot *er;

	memset(out, 0, sizeof(*out));
	if (ub_engine_root(e, id, &er) == 0)
		*out = er->root;
}

/* Copy the path to a tree's first leaf into the running transaction. */
static int touch_tree(struct ub_txn *t, struct ub_eroot *er)
{
	struct ub_key key = { 0, 0, 0 };
	struct ub_path p;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_search_slot(&t->e->fs.tc, &t->ta, &er->root, &key, &p, 0, true);
	ub_path_release(&p);
	return ret < 0 ? ret : 0;
}

/* One commit between its sealing (with the writer lock) and its publication (txn.c's top comment). */
struct sealed {
	uint64_t transid;
	struct ub_eb *blocks;            /* final, clean, WRITTEN: nothing changes their bytes again */
	struct ub_super_images *supers;  /* every device's superblock */
	struct sealed_root {
		struct ub_eroot *er;
		struct ub_root root;
	} *roots;                        /* every tree's root as the commit has it */
	size_t nroots;
};

static void sealed_free(struct sealed *s)
{
	if (!s)
		return;
	ub_super_images_free(s->supers);
	free(s->roots);
	free(s);
}

/*
 * Step 1, with the writer lock: settle the transaction's trees, then seal it:
 * every dirty block made final and taken off the dirty list, every device's
 * superblock made, every tree's root noted, its pins tagged. *out NULL when
 * nothing changed (no new generation: the last commit stays the truth).
 */
static int txn_seal(struct ub_txn *t, struct sealed **out)
{
	struct ub_engine *e = t->e;
	uint8_t sb[UB_SUPER_INFO_SIZE];
	struct ub_commit_roots c = { 0 };
	int ret = t->error, rounds = 0;
	bool had_log = false;
	struct sealed *s;
	size_t n = 0;

	*out = NULL;
	if (!ret && ub_engine_broken(e))
		ret = -EROFS; /* an earlier commit failed on its way to the disk */
	if (!ret)
		ret = ub_log_discard(e, &had_log);
	if (ret < 0)
		return ret;
	for (;;) {
		int roots_changed;
		uint64_t before = t->blocks_allocated;

		ret = ub_txn_run_refs(t);
		if (!ret)
			ret = ub_txn_write_space(t);
		if (!ret)
			ret = write_root_items(t, &roots_changed);
		if (!ret)
			ret = t->error;
		if (ret)
			return ret;
		/* settled: nothing new was copied, no root moved, nothing left queued */
		if (!roots_changed && before == t->blocks_allocated && ub_dref_count(t->refs) == 0) {
			/*
			 * nothing changed at all: no new generation, the last commit stays the
			 * truth (unless a log is on disk: a commit must say the log is gone
			 * before its space is used again)
			 */
			if (e->fs.tc.ndirty == 0 && !had_log) {
				ub_alloc_seal_pins(e->alloc, t->transid); /* ends the allocator's transaction (open stripes) */
				release_pins(e);
				return 0;
			}
			/*
			 * The superblock's generation must be its root tree root's (btrfs check
			 * and the kernel compare them); a transaction that changed only trees
			 * without a ROOT_ITEM (the chunk tree) leaves the root tree as it was,
			 * so copy its path once and settle again.
			 */
			if (e->fs.root_tree->root.generation == t->transid)
				break;
			ret = touch_tree(t, e->fs.root_tree);
			if (ret)
				return ret;
		}
		if (++rounds > 64) {
			ub_err(&e->fs.log, "transaction %llu: the commit does not settle after %d rounds",
			       (unsigned long long)t->transid, rounds);
			return -ELOOP;
		}
	}
	/* two ledgers of the same bytes: ours from the extent items, the allocator's per block group */
	if (e->bytes_used != ub_alloc_bytes_used(e->alloc)) {
		ub_err(&e->fs.log, "transaction %llu: bytes used %llu by the extent items but %llu by the block groups",
		       (unsigned long long)t->transid, (unsigned long long)e->bytes_used,
		       (unsigned long long)ub_alloc_bytes_used(e->alloc));
		return -EUCLEAN;
	}
	s = calloc(1, sizeof(*s));
	for (struct ub_eroot *er = ub_roots_first(e->fs.roots); er; er = ub_roots_next(er))
		n++;
	if (s)
		s->roots = calloc(n ? n : 1, sizeof(*s->roots));
	if (!s || !s->roots) {
		sealed_free(s);
		return -ENOMEM;
	}
	s->transid = t->transid;
	c.generation = t->transid;
	c.root = e->fs.root_tree->root;
	c.chunk = e->fs.chunk_tree->root;
	c.extent = e->fs.extent_tree->root;
	root_of(e, BTRFS_FS_TREE_OBJECTID, &c.fs);
	root_of(e, BTRFS_DEV_TREE_OBJECTID, &c.dev);
	root_of(e, BTRFS_CSUM_TREE_OBJECTID, &c.csum);
	c.bytes_used = e->bytes_used;
	memcpy(sb, e->fs.vol->super, sizeof(sb));
	ub_super_set_commit(sb, &c);
	ret = ub_volume_super_images(e->fs.vol, sb, &s->supers);
	if (!ret)
		ret = ub_tree_seal_dirty(&e->fs.tc, &s->blocks);
	if (ret) {
		sealed_free(s);
		return ret;
	}
	/* the next commit's superblock starts from this one (its backup slot, its roots) */
	memcpy(e->fs.vol->super, sb, sizeof(sb));
	for (struct ub_eroot *er = ub_roots_first(e->fs.roots); er && s->nroots < n; er = ub_roots_next(er)) {
		s->roots[s->nroots++] = (struct sealed_root){ er, er->root };
		er->item_bytenr = er->root.bytenr;
		er->item_generation = er->root.generation;
		er->item_level = er->root.level;
		er->item_last_snapshot = er->last_snapshot;
	}
	ub_alloc_seal_pins(e->alloc, t->transid);
	e->sealed = t->transid;
	*out = s;
	return 0;
}

/*
 * Steps 2 and 3, with or without the writer lock: in transaction order, the
 * sealed blocks written, flushed, every superblock written, flushed; then the
 * commit published: readers move to it all at once. A failure breaks the
 * engine: the disk keeps the last commit, whole (nothing of this one is
 * pointed at), and the running transaction can only be aborted.
 */
static int sealed_finish(struct ub_engine *e, struct sealed *s)
{
	int ret;

	pthread_mutex_lock(&e->commit_lock);
	while (ub_engine_generation(e) + 1 < s->transid && !ub_engine_broken(e))
		pthread_cond_wait(&e->commit_cond, &e->commit_lock);
	ret = ub_engine_broken(e) ? -EROFS : 0;
	if (!ret)
		ret = ub_tree_write_sealed(&e->fs.tc, s->blocks);
	if (!ret)
		ret = ub_volume_write_super_images(e->fs.vol, s->supers);
	if (!ret) {
		/* the superblock is on disk: readers move to the new commit all at once */
		ub_roots_lock(e->fs.roots);
		for (size_t i = 0; i < s->nroots; i++)
			s->roots[i].er->committed = s->roots[i].root;
		__atomic_store_n(&e->generation, s->transid, __ATOMIC_RELEASE);
		ub_roots_unlock(e->fs.roots);
	} else {
		int none = 0;

		ub_err(&e->fs.log, "transaction %llu failed (%s): the filesystem stays at generation %llu and is "
		       "read-only from now on", (unsigned long long)s->transid, strerror(-ret),
		       (unsigned long long)ub_engine_generation(e));
		__atomic_compare_exchange_n(&e->broken, &none, ret, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
	}
	ub_tree_release_sealed(&e->fs.tc, s->blocks, ret != 0);
	s->blocks = NULL;
	pthread_cond_broadcast(&e->commit_cond);
	pthread_mutex_unlock(&e->commit_lock);
	return ret;
}

/*
 * Commit (or, failed, forget) t and end it; then the cleaner's share
 * (cleaner.h). Called with the writer lock; when the caller took it once
 * only and `may_release` (a commit for its own sake, not one in the middle of
 * an operation that goes on after it), it is given back while the commit is
 * written, so the next transaction's operations and live readers go on, and
 * taken again before the return.
 */
static int commit_end(struct ub_txn *t, bool may_release)
{
	struct ub_engine *e = t->e;
	struct sealed *s = NULL;
	int ret = txn_seal(t, &s);

	if (ret) {
		if (!ub_engine_broken(e)) {
			int none = 0;

			ub_err(&e->fs.log, "transaction %llu failed (%s): the filesystem stays at generation %llu and is "
			       "read-only from now on", (unsigned long long)t->transid, strerror(-ret),
			       (unsigned long long)ub_engine_generation(e));
			__atomic_compare_exchange_n(&e->broken, &none, ret, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
		}
		ub_tree_drop_dirty(&e->fs.tc);
		ub_alloc_abort(e->alloc);
		roots_back(e);
	}
	txn_end(t);
	if (s) {
		bool release = may_release && ub_fs_live_write_depth(&e->fs) == 1;

		if (release)
			ub_fs_live_write_unlock(&e->fs);
		ret = sealed_finish(e, s);
		if (release)
			ub_fs_live_write_lock(&e->fs);
		sealed_free(s);
		if (ret) {
			/* what followed the failed commit is forgotten: the disk keeps the last commit */
			if (e->running) {
				ub_tree_drop_dirty(&e->fs.tc);
				ub_alloc_abort(e->alloc);
			}
			roots_back(e);
		} else {
			release_pins(e);
		}
	}
	/*
	 * cleaner.h says when the cleaner follows a commit; its failure is
	 * returned (the disk keeps this commit, the engine may be read-only).
	 */
	if (!ret && e->dead_roots && e->clean_step && !e->cleaning) {
		bool more = true;

		for (int i = 0; i < UB_ENGINE_CLEAN_CALLS && more && !ret; i++)
			ret = ub_engine_clean(e, e->clean_step, &more);
	}
	return ret;
}

int ub_txn_commit(struct ub_txn *t)
{
	struct ub_engine *e = t->e;
	bool owned = t->owned;
	int ret = commit_end(t, true);

	free(t);
	if (owned)
		ub_fs_live_write_unlock(&e->fs);
	return ret;
}

int ub_txn_commit_keep(struct ub_txn *t)
{
	struct ub_engine *e = t->e;
	struct ub_dref_queue *refs;
	bool owned = t->owned;
	int ret;

	/* the next queue first: once committed, only a broken engine keeps t from going on */
	ret = ub_dref_queue_new(&refs);
	if (ret)
		return fail(t, ret);
	/*
	 * The writer lock stays held while the commit is written: the caller is in
	 * the middle of an operation and goes on in the next transaction, which
	 * no other operation may have started meanwhile.
	 */
	ret = commit_end(t, false);
	if (e->running) {
		/* the cleaner cannot leave one running; were it so, t is a shell the caller frees by aborting */
		ub_dref_queue_free(refs);
		*t = (struct ub_txn){ .e = e, .error = -EBUSY, .transid = e->sealed, .owned = owned };
		return ret ? ret : -EBUSY;
	}
	txn_init(e, t, refs);
	t->owned = owned;
	if (ub_engine_broken(e)) {
		t->error = ub_engine_broken(e); /* its commit refuses: the disk keeps the last commit */
		return ret ? ret : -EROFS;
	}
	return ret;
}

/* ---- dropping trees ---- */

int ub_txn_child_refs(struct ub_txn *t, const struct ub_eb *eb, uint64_t root_id, bool full, int delta)
{
	return fail(t, change_child_refs(t, eb, root_id, full, delta));
}

int ub_txn_block_refs(struct ub_txn *t, const struct ub_eb *eb, uint64_t *refs, uint64_t *flags)
{
	return block_ref_info(t, eb, refs, flags);
}
