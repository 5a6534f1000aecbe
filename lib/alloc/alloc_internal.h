/* SPDX-License-Identifier: MIT */
/* The allocator's private structures, shared by alloc.c and block_group.c. */
#ifndef UBTRFS_ALLOC_INTERNAL_H
#define UBTRFS_ALLOC_INTERNAL_H

#include "alloc/alloc.h"

/*
 * One block group. Invariants (checked by ub_alloc_verify):
 *   avail, reserved_set, pinned ranges of the group and super_set are
 *   pairwise disjoint; avail is inside free minus super_set; reserved_set is
 *   inside free; became_free and became_used are disjoint.
 */
struct ub_bg {
	uint64_t start, length, flags;
	uint64_t used, old_used;
	uint64_t super;    /* bytes of superblock stripes in the group */
	uint64_t pinned;   /* bytes pinned in the group */
	uint64_t full_stripe; /* RAID5/6: logical bytes per full stripe, else 0 */
	bool dirty, is_new, fst_bitmaps;
	bool fst_rebuild;  /* a repair: the commit rewrites the group's free space tree items whole */
	bool ro;           /* being relocated (ub_alloc_set_ro): nothing new goes in */
	struct ub_range_set free;        /* committed free (free space tree view) */
	struct ub_range_set avail;       /* may be handed out now */
	struct ub_range_set reserved;    /* reserved, not accounted */
	struct ub_range_set super_set;   /* superblock mirror stripes (never handed out) */
	struct ub_range_set open;        /* RAID5/6 stripes opened by the running transaction */
	struct ub_range_set became_free, became_used;
};

struct ub_alloc {
	struct ub_log log;
	struct ub_volume *vol;
	uint32_t sectorsize, nodesize;
	struct ub_bg **bgs; /* sorted by start, disjoint */
	int nbgs, cap;
	/*
	 * Pinned space: `pinned` is all of it (what avail leaves out); `pin_cur`
	 * the running transaction's part; `waiting` the parts of transactions
	 * already committed that a reader of an older commit may still read
	 * (reader epochs), each tagged with the generation that freed it.
	 */
	struct ub_range_set pinned;
	struct ub_range_set pin_cur;
	struct ub_pin_batch {
		uint64_t gen;
		struct ub_range_set set;
	} *waiting;
	int nwaiting, capwaiting;
	uint64_t last[3]; /* next-fit hints: data, metadata, system */
	uint64_t target[3]; /* a balance's convert: the profile new space of each type takes (0: none) */
	/* chunk_alloc.c: what the running transaction's new chunks changed outside the trees */
	struct ub_chunk_undo *undo;
	uint64_t chunks_added[3]; /* data, metadata, system (statistics) */
};

/* chunk_alloc.c: abort puts back what ub_chunk_alloc changed; a commit keeps it */
void ub_chunk_undo_abort(struct ub_alloc *a);
void ub_chunk_undo_forget(struct ub_alloc *a);
/* Take a block group added in the running transaction back out (abort): 0 or -ENOENT. */
int ub_alloc_remove_bg(struct ub_alloc *a, uint64_t start);

/*
 * A block group from its geometry: all of [start, start+length) free but the
 * superblock stripes. Used by ub_alloc_add_block_group, the loader and tests.
 * Not marked dirty or new (callers decide). -EEXIST if it overlaps a group.
 */
int ub_alloc_insert_bg(struct ub_alloc *a, uint64_t flags, uint64_t start, uint64_t length, uint64_t full_stripe,
		       const struct ub_range *super, int nsuper, struct ub_bg **out);
/* The same for a chunk of the volume: its superblock stripes and full stripe size from the chunk. */
int ub_alloc_insert_chunk_bg(struct ub_alloc *a, const struct ub_chunk *c, uint64_t flags, struct ub_bg **out);
/* Logical bytes per full stripe for a RAID5/6 chunk, 0 otherwise. */
uint64_t ub_alloc_chunk_full_stripe(const struct ub_chunk *c);
struct ub_bg *ub_alloc_find_bg(const struct ub_alloc *a, uint64_t logical);
/* Every invariant above, for tests: 0 or -EUCLEAN (with a message). */
int ub_alloc_verify(const struct ub_alloc *a);

/* ---- chunk removal (chunk_alloc.c for chunk_remove.c) ---- */
struct ub_chunk_ctx;
struct ub_chunk_plan;
/* Save the sys chunk array and dev items an abort puts back (once per transaction). */
int ub_chunk_undo_begin(struct ub_alloc *a);
/* DEV_ITEM bytes_used (tree and volume copy) shrink by the plan's stripes. */
int ub_chunk_dev_items_shrink(struct ub_chunk_ctx *cc, const struct ub_chunk_plan *plan);

#endif
