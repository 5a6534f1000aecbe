/* SPDX-License-Identifier: MIT */
/*
 * The tree layer's write side (library-internal): copy-on-write B-trees as the
 * kernel keeps them.
 *
 * Rules:
 *  - One writer per ub_tree_ctx at a time (the running transaction); nothing
 *    here locks. The writer changes in place only blocks of its transaction
 *    (generation == ta->transid and not yet written) that no snapshot of the
 *    transaction may share (ub_root.shared_upto); any other block is
 *    copied first (ta->alloc_block + ta->cow_block), its parent's pointer and
 *    generation updated up to the root, and the caller's struct ub_root
 *    updated in place when the root block moves.
 *  - Readers that hold committed root values (and the same ctx, on the same
 *    thread) keep seeing the committed state: a committed block is never
 *    changed in memory, and transaction blocks hang only below the roots the
 *    writer updated.
 *  - Dirty blocks hold a cache reference and sit on tc's dirty list until
 *    ub_tree_write_dirty (commit) or ub_tree_drop_dirty (abort).
 *  - A path from a cow search holds only transaction blocks on its way down;
 *    after ub_tree_del_items or a failed call it must be released, not reused.
 */
#ifndef UBTRFS_TREE_WRITE_H
#define UBTRFS_TREE_WRITE_H

#include <stdbool.h>
#include <stdint.h>
#include "tree/tree_priv.h"

/* The header flags' top byte: the back reference revision (the kernel's BTRFS_BACKREF_REV_SHIFT). */
#define UB_BACKREF_REV_SHIFT 56
#define UB_MIXED_BACKREF_REV 1ULL

/* What a transaction lends the tree layer so it can place copied and new blocks. */
struct ub_tree_alloc {
	void *arg;
	uint64_t transid;   /* blocks whose generation is older are copied before they change */
	/* address for a new block of tree `root_id` at `level`; the callee queues its reference */
	int (*alloc_block)(void *arg, uint64_t root_id, int level, uint64_t *bytenr);
	/* `old` is replaced by `copy` (already filled, same items) in tree `root_id`; `parent` is the
	 * node pointing at it (0 for a root). The callee does the reference bookkeeping of a COW
	 * (shared blocks, full back references, as the kernel's update_ref_for_cow) and drops
	 * `old`'s reference from this tree (pinned until commit). 0, or 1 when `old` is a block
	 * of this transaction that other trees still hold (it stays dirty, to be written). */
	int (*cow_block)(void *arg, uint64_t root_id, const struct ub_eb *old, const struct ub_eb *copy, uint64_t parent);
	/* `eb` left tree `root_id` (merged away, root shrunk): drop its reference */
	int (*free_block)(void *arg, uint64_t root_id, const struct ub_eb *eb, uint64_t parent);
	/* snapshot: `copy` is a new root for `new_root_id` holding src's items: add a reference
	 * from new_root_id to every child (the kernel's btrfs_inc_ref) */
	int (*copy_root)(void *arg, uint64_t new_root_id, const struct ub_eb *src, const struct ub_eb *copy);
};

/* 0: found, p at key; 1: not found, p->slots[0] is the insert position (may be nritems);
 * <0 errno. ins_len > 0: make room for ins_len bytes (item header + data) in the leaf, splitting
 * on the way down; ins_len < 0: deleting (may merge/rebalance); cow: copy every block on the
 * path that is not of ta->transid (needs ta). ta == NULL and !cow: plain read-only search.
 * With ins_len > 0 and the key found, the room is for extending that item (ub_tree_extend_item).
 * A leaf split for an insert may leave the insert position in a new empty leaf: the caller
 * inserts right after (ub_tree_insert_empty_items does). */
int ub_tree_search_slot(struct ub_tree_ctx *tc, struct ub_tree_alloc *ta, struct ub_root *root,
			const struct ub_key *key, struct ub_path *p, int ins_len, bool cow);
/* Insert n items with sorted keys and sizes (data uninitialised, zeroed) where keys[0] goes;
 * p (released first) is left at the first new item. -EEXIST if keys[0] is present,
 * -EOVERFLOW if the items cannot fit one leaf. */
int ub_tree_insert_empty_items(struct ub_tree_ctx *tc, struct ub_tree_alloc *ta, struct ub_root *root,
			       struct ub_path *p, const struct ub_key *keys, const uint32_t *sizes, int n);
/* -EEXIST if the key is present */
int ub_tree_insert_item(struct ub_tree_ctx *tc, struct ub_tree_alloc *ta, struct ub_root *root,
			const struct ub_key *key, const void *data, uint32_t size);
/* delete n items from slot of p->nodes[0] (p from a cow search with ins_len < 0); release p after */
int ub_tree_del_items(struct ub_tree_ctx *tc, struct ub_tree_alloc *ta, struct ub_root *root,
		      struct ub_path *p, int slot, int n);
/* grow the item at p by `extra` zeroed bytes at its end; p from a cow search with ins_len >= extra
 * (-ENOSPC if its leaf has no room; -EOVERFLOW if the item would not fit any leaf) */
int ub_tree_extend_item(struct ub_tree_ctx *tc, struct ub_tree_alloc *ta, struct ub_root *root,
			struct ub_path *p, uint32_t extra);
/* shrink the item at p (from a cow search) to new_size: from_end keeps its first new_size bytes,
 * else its last ones */
void ub_tree_truncate_item(struct ub_tree_ctx *tc, struct ub_path *p, uint32_t new_size, bool from_end);
/* writable item data at p (its leaf is dirty in this transaction); NULL if the leaf is not, or if a
 * snapshot of this transaction may share it (search with cow first) */
uint8_t *ub_path_data_mut(struct ub_path *p, uint32_t *size);
/* The leaf at p was changed through ub_path_data_mut: it must be one of the transaction's. */
void ub_path_mark_dirty(struct ub_path *p);
/* a new tree: one empty leaf, owner root_id, level 0 */
int ub_tree_create_root(struct ub_tree_ctx *tc, struct ub_tree_alloc *ta, uint64_t root_id, struct ub_root *out);
/* snapshot: a copy of src's root block owned by new_root_id (calls ta->copy_root). src may be
 * changed in this transaction: both roots' shared_upto then make every block made so far copied
 * before it changes in either tree, so the snapshot keeps src as it is at the call. */
int ub_tree_copy_root(struct ub_tree_ctx *tc, struct ub_tree_alloc *ta, struct ub_root *src,
		      uint64_t new_root_id, struct ub_root *out);

/*
 * One key-range iterator for every "walk items from key A to key B" loop: the
 * items with min <= key <= max in key order. The root value is copied at start:
 * iterate a committed root, or the current one while nothing changes it (the
 * iterator holds blocks the writer may change in place).
 */
struct ub_tree_iter {
	struct ub_tree_ctx *tc;
	struct ub_root root;
	struct ub_path path;
	struct ub_key min, max;
	bool started, done;
};
int ub_tree_iter_start(struct ub_tree_iter *it, struct ub_tree_ctx *tc, const struct ub_root *root,
		       const struct ub_key *min, const struct ub_key *max);
/* 0 item (data valid until the next call), 1 done, <0 error */
int ub_tree_iter_next(struct ub_tree_iter *it, struct ub_key *key, const uint8_t **data, uint32_t *size);
void ub_tree_iter_end(struct ub_tree_iter *it);

/* commit step: write every dirty block (header: bytenr, generation, fsid (metadata_uuid),
 * chunk_tree_uuid, owner, level, flags; checksum with the fs's algorithm) via ub_volume_write;
 * blocks stay cached, clean. Unused bytes are zeroed first; a block the tree checker
 * (lib/tree/tree_check.c) would refuse on read is not written: -EUCLEAN, naming it and why
 * (item contents included, e.g. a bad INODE_ITEM, and empty leaves of trees never empty). */
int ub_tree_write_dirty(struct ub_tree_ctx *tc);
/*
 * ub_tree_write_dirty in three steps, so that the writing can run without
 * the writer lock while the next transaction goes on: seal (with the lock)
 * makes every dirty block final (header, checks, checksum) and moves it to
 * *list, clean and WRITTEN, so the next transaction copies it before any
 * change and nothing changes its bytes again; write_sealed writes the list;
 * release_sealed drops the list's references (forget: the blocks never
 * reached the disk, so they leave the cache's table too).
 */
int ub_tree_seal_dirty(struct ub_tree_ctx *tc, struct ub_eb **list);
int ub_tree_write_sealed(struct ub_tree_ctx *tc, struct ub_eb *list);
void ub_tree_release_sealed(struct ub_tree_ctx *tc, struct ub_eb *list, bool forget);
/*
 * The same for the dirty blocks of one owner only (the fsync log's, written
 * between commits while the transaction's other blocks stay dirty), and
 * forgetting them: the rest of the dirty list is left as it is.
 */
int ub_tree_seal_dirty_owner(struct ub_tree_ctx *tc, uint64_t owner, struct ub_eb **list);
void ub_tree_drop_dirty_owner(struct ub_tree_ctx *tc, uint64_t owner);
/* abort: forget every dirty block (their addresses are the allocator's to give back) */
void ub_tree_drop_dirty(struct ub_tree_ctx *tc);

/* ---- between the files of lib/tree ---- */

/* A new zeroed block at `bytenr` in the cache, dirty, header filled (WRITTEN clear); one reference for the caller. */
int ub_tree_new_block(struct ub_tree_ctx *tc, uint64_t bytenr, uint64_t owner, int level, uint64_t transid,
		      struct ub_eb **out);
/* `eb` left its tree: a dirty one is forgotten (not written); a clean one stays cached (committed readers). */
void ub_tree_forget_block(struct ub_tree_ctx *tc, struct ub_eb *eb);
/*
 * `eb` left a tree nobody reads through the cache again (a log tree: read only at a
 * replay, from the disk): forgotten whether dirty or clean, so the blocks a log
 * sync wrote and the next fsync copied do not wait in the cache for eviction
 * while every new block takes fresh memory. The caller holds a reference.
 */
void ub_tree_forget_unread_block(struct ub_tree_ctx *tc, struct ub_eb *eb);
/* first slot whose key is >= key (nritems if none); *exact if equal */
int ub_eb_lower_bound(const struct ub_eb *eb, const struct ub_key *key, bool *exact);
/* the child at `slot` of p->nodes[level], checked against what the path says of it */
int ub_path_read_child(struct ub_path *p, int level, int slot, struct ub_eb **out);
/* what a root pointer promises about its block */
struct ub_expect ub_root_expect(const struct ub_root *root);

#endif
