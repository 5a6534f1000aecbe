/* SPDX-License-Identifier: MIT */
/*
 * The block cache's structures, private to lib/tree (block.c). The rules are
 * at struct ub_eb in lib/tree/tree_priv.h: one lock for everything below,
 * never held across device I/O or checksum verification; one in-memory block
 * per address (the first verified copy published wins); dirty blocks hold a
 * reference for the dirty list, so eviction never sees them.
 */
#ifndef UBTRFS_TREE_CACHE_H
#define UBTRFS_TREE_CACHE_H

#include <pthread.h>
#include "tree/tree_priv.h"

/* A block found bad, and under which expectation (`any`: bad whatever the parent says). */
struct ub_bad_block {
	uint64_t bytenr;
	int err; /* 0: unused entry */
	bool any, has_first, has_end, exact_owner;
	int level;
	uint64_t owner, generation;
	struct ub_key first, end;
	char what[384]; /* what the failed read said after the block's place (ub_tree_repeat_bad) */
};

struct ub_block_cache {
	pthread_mutex_t lock;
	struct ub_eb **hash;
	unsigned hash_bits;            /* the table has 1 << hash_bits buckets */
	size_t nhashed;                /* blocks in the table */
	struct ub_eb *lru_head, *lru_tail; /* unreferenced blocks, most recent first */
	uint64_t cached_bytes, cache_limit;
	uint64_t hits, misses; /* lookups served from the table / that read the device */
	/*
	 * Blocks already found bad, so a walk reports each once. A failure that
	 * depends on what the parent expected is remembered with that
	 * expectation: the block may be healthy for its real parent.
	 */
	struct ub_bad_block bad[64];
	unsigned bad_next;
	/* write side: blocks changed in the running transaction (each holds a reference) */
	struct ub_eb *dirty_head;
	/*
	 * ---- keep interior nodes ---- unreferenced nodes (level > 0) wait on
	 * their own list, evicted only when no unreferenced leaf is left: a walk
	 * comes back through the upper levels for every leaf, and they are few.
	 * lru_head/lru_tail above hold the leaves.
	 */
	struct ub_eb *node_head, *node_tail;
	/*
	 * ---- spare block buffers ---- buffers of freed blocks kept for the next
	 * block read or made (at most UB_SPARE_BUFS): a transaction copies
	 * blocks all the time, and memory handed back to malloc and taken again
	 * costs a page fault per page (a fifth of an fsync's time). Each buffer's
	 * first 8 bytes link it to the next.
	 */
	void *spare;
	unsigned nspare;
};

#define UB_SPARE_BUFS 256

static inline size_t hash_buckets(const struct ub_block_cache *c)
{
	return (size_t)1 << c->hash_bits;
}

#endif
