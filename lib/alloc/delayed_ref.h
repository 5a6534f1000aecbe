/* SPDX-License-Identifier: MIT */
/*
 * Delayed references: the running transaction's reference changes, folded
 * per extent and applied to the extent tree at commit (by lib/txn).
 *
 * Every change names one back reference of one extent (a "head", keyed by
 * bytenr), in the extent tree's own terms:
 *   tree block, by root:      TREE_BLOCK_REF   (root)
 *   tree block, full backref: SHARED_BLOCK_REF (parent)
 *   data, by root:            EXTENT_DATA_REF  (root, objectid = inode, offset = file offset - extent offset)
 *   data, full backref:       SHARED_DATA_REF  (parent)
 * with a signed count change (tree refs: +1 / -1; data refs: any count).
 *
 * Folding: changes to the same back reference of the same extent add up; a
 * reference whose net change is 0 disappears (an add and a drop cancel). A
 * head remembers:
 *   - new_extent: the extent was allocated in this transaction (the first
 *     change carried UB_DREF_NEW_EXTENT): its extent item does not exist and
 *     must be inserted with the net (all positive) references. If every
 *     reference cancelled, nothing is written and the space goes back with
 *     ub_alloc_unreserve (it was never accounted).
 *   - free_hint: a drop said UB_DREF_LAST_REF (the caller believes it drops
 *     the last reference): the applier still decides from the extent item's
 *     count and may use the hint as a cross-check.
 *   - set_flags: extent flags to OR into the item (BTRFS_BLOCK_FLAG_FULL_BACKREF).
 * The applier computes refs = old count + total_delta; 0 -> delete the item
 * (ub_alloc_account(free) + ub_alloc_pin), < 0 -> corruption (-EUCLEAN).
 *
 * Heads leave the queue in bytenr order (ub_dref_pop_head). Applying a head
 * changes the extent tree, whose copy-on-write queues new changes (for the
 * extent tree's own blocks) into the same queue, possibly below the last
 * popped bytenr: pop until the queue is empty.
 *
 * Only skinny metadata is written, so tree block heads carry the level (the
 * METADATA_ITEM key offset) and no first key.
 *
 * Not thread-safe: one queue per transaction, used under its lock.
 */
#ifndef UBTRFS_ALLOC_DELAYED_REF_H
#define UBTRFS_ALLOC_DELAYED_REF_H

#include <stdbool.h>
#include <stdint.h>

/* flags for ub_dref_add_* */
#define UB_DREF_NEW_EXTENT (1U << 0) /* the extent was reserved in this transaction; this is its first ref */
#define UB_DREF_LAST_REF   (1U << 1) /* hint with a drop: the caller drops what it believes is the last ref */

struct ub_dref {
	uint8_t type;      /* BTRFS_TREE_BLOCK_REF_KEY, BTRFS_SHARED_BLOCK_REF_KEY, BTRFS_EXTENT_DATA_REF_KEY, BTRFS_SHARED_DATA_REF_KEY */
	uint64_t root;     /* TREE_BLOCK_REF, EXTENT_DATA_REF */
	uint64_t parent;   /* SHARED_* */
	uint64_t objectid; /* EXTENT_DATA_REF: inode */
	uint64_t offset;   /* EXTENT_DATA_REF: file offset - extent offset */
	int64_t delta;     /* net count change, never 0 in a popped head */
};

struct ub_dref_head {
	uint64_t bytenr, num_bytes;
	bool is_data;
	int level;              /* tree blocks */
	bool new_extent;        /* no extent item yet: insert one (if total_delta > 0) */
	bool free_hint;
	uint64_t set_flags;     /* OR into the extent item's flags */
	uint64_t generation;    /* a new extent item's generation; 0: the transaction's */
	int64_t total_delta;    /* sum of refs[].delta */
	struct ub_dref *refs;   /* sorted by (type, root, parent, objectid, offset) */
	int nrefs;
	/* internal */
	int cap;
};

struct ub_dref_queue;

int ub_dref_queue_new(struct ub_dref_queue **out);
void ub_dref_queue_free(struct ub_dref_queue *q); /* drops whatever is left */

/*
 * A tree block reference change: root != 0 for TREE_BLOCK_REF, else parent
 * for SHARED_BLOCK_REF. delta +1 / -1 (any nonzero is accepted).
 * -EINVAL if the head exists with another size, kind or level, or both / neither of
 * root and parent are given; -ENOMEM.
 */
int ub_dref_add_tree(struct ub_dref_queue *q, uint64_t bytenr, uint64_t num_bytes, int level, uint64_t root,
		     uint64_t parent, int delta, unsigned flags);
/* A data reference change: parent == 0 -> EXTENT_DATA_REF(root, objectid, offset); else SHARED_DATA_REF(parent). */
int ub_dref_add_data(struct ub_dref_queue *q, uint64_t bytenr, uint64_t num_bytes, uint64_t root,
		     uint64_t objectid, uint64_t offset, uint64_t parent, int64_t delta, unsigned flags);
/* Extent flags to set at commit (BTRFS_BLOCK_FLAG_FULL_BACKREF), on a tree block head. */
int ub_dref_set_flags(struct ub_dref_queue *q, uint64_t bytenr, uint64_t num_bytes, int level, uint64_t flags);

/*
 * A new tree block's extent item takes `generation` instead of the
 * transaction's: a block the relocation copied keeps its generation, and its
 * extent item must say the same (btrfs check compares them).
 */
int ub_dref_set_generation(struct ub_dref_queue *q, uint64_t bytenr, uint64_t num_bytes, int level,
			   uint64_t generation);

/* Number of heads queued (including heads whose refs all cancelled). */
uint64_t ub_dref_count(const struct ub_dref_queue *q);
/* The head for bytenr (read-only, valid until the queue changes) or NULL. */
const struct ub_dref_head *ub_dref_find(const struct ub_dref_queue *q, uint64_t bytenr);
/*
 * Take the head with the lowest bytenr out of the queue: 0 and *out (the
 * caller frees it with ub_dref_head_free), 1 when the queue is empty.
 * A head may have nrefs == 0 (everything cancelled): for a new extent that
 * means "unreserve"; for an existing one, only set_flags (if any) to apply.
 */
int ub_dref_pop_head(struct ub_dref_queue *q, struct ub_dref_head **out);
void ub_dref_head_free(struct ub_dref_head *h);

#endif
