/* SPDX-License-Identifier: MIT */
/*
 * The tree layer: verified tree blocks, a block cache, search and iteration.
 *
 * Library API: read-only tree calls on the context ub_fs_trees gives; a
 * block is read through the ub_eb_* accessors, a position is a ub_path from
 * ub_path_new. The structures are the library's (lib/tree/tree_priv.h).
 */
#ifndef UBTRFS_TREE_H
#define UBTRFS_TREE_H

#include <stdbool.h>
#include <stdint.h>
#include "ubtrfs/format.h"
#include "ubtrfs/volume.h"
#include "ubtrfs/api.h"

UB_API_BEGIN

/*
 * The library's structures (lib/tree/tree_priv.h): a user holds pointers.
 * A context is what ub_fs_trees gives; a block (ub_tree_read_block, or the
 * callback of ub_tree_walk) is read through the ub_eb_* accessors below.
 */
struct ub_tree_ctx;
struct ub_eb;
struct ub_path;

/* Where a tree starts. */
struct ub_root {
	uint64_t objectid; /* tree id, e.g. BTRFS_FS_TREE_OBJECTID */
	uint64_t bytenr;
	uint64_t generation;
	uint8_t level;
	/* ---- shared blocks of the running transaction ---- */
	/* blocks the writer made up to this count (ub_eb.born) may be shared with a snapshot of this
	 * transaction: they are copied before they change (the kernel's BTRFS_ROOT_FORCE_COW) */
	uint64_t shared_upto;
};

/*
 * What the parent (or superblock, or root item) says a block must be; 0/-1 =
 * unknown. Checked on every access, cached or not: a block is shared only
 * where the format allows it (subvolume trees and snapshots), so a pointer
 * that finds a block which does not fit is corruption of the pointer.
 */
struct ub_expect {
	uint64_t owner;      /* 0: do not check; a subvolume id accepts any subvolume's block */
	int level;           /* -1: do not check */
	uint64_t generation; /* 0: do not check (must match exactly when set) */
	const struct ub_key *first_key; /* NULL: do not check (set: the block must not be empty either) */
	const struct ub_key *end_key;   /* NULL: no bound; else every key in the block is below it */
	uint64_t parent;     /* for messages: the node holding the pointer, 0 for a root pointer */
	int slot;            /* for messages: the slot in `parent` */
	/* a tree's root block always carries the tree's own id, snapshots included (each has its own root copy) */
	bool exact_owner;
};

/* A set of block addresses, each with a tag naming who entered it first (a tree id, a subvolume id...). */
struct ub_block_set {
	uint64_t *addr, *tag;
	size_t n, cap; /* cap is 0 or a power of two */
};

/* 1 if `bytenr` was already in the set (its tag in *first_tag), 0 if added now, -ENOMEM. */
int ub_block_set_add(struct ub_block_set *s, uint64_t bytenr, uint64_t tag, uint64_t *first_tag);
void ub_block_set_free(struct ub_block_set *s);

/* "FS_TREE", "EXTENT_TREE", or the number, for messages. */
const char *ub_tree_name(uint64_t id, char *buf, size_t len);

/*
 * Read and verify the block at `bytenr`, trying every copy until one passes
 * checksum, header and tree-checker validation. On failure of every copy the
 * error (naming tree, level, address and what failed) is logged and -EIO /
 * -EUCLEAN returned.
 */
int ub_tree_read_block(struct ub_tree_ctx *tc, uint64_t bytenr, const struct ub_expect *exp,
		       struct ub_eb **out);
void ub_eb_put(struct ub_tree_ctx *tc, struct ub_eb *eb);
/* ub_eb_put of each non-NULL block of `ebs` under one taking of the cache's lock. */
void ub_eb_put_many(struct ub_tree_ctx *tc, struct ub_eb *const *ebs, int n);

/*
 * Every copy of the block at `bytenr` read from the device and verified as
 * ub_tree_read_block verifies one; `bad` is called for each copy that fails,
 * with the copy's place on disk and what failed. The copy a clean cached
 * block fitting `exp` was read from (and verified, when it was cached) is not
 * read again, and a copy with the same bytes as that block is good. Copies on
 * missing devices are skipped. The number of bad copies, or -ENOMEM. For a
 * checker: a read succeeds on any good copy and says nothing of the others.
 */
int ub_tree_check_copies(struct ub_tree_ctx *tc, uint64_t bytenr, const struct ub_expect *exp,
			 void (*bad)(void *arg, int mirror, const char *where, const char *why), void *arg);

/*
 * The cache's size bound in bytes (default UB_TREE_CACHE_DEFAULT); unreferenced
 * blocks beyond it are evicted now, leaves before interior nodes.
 */
void ub_tree_set_cache_limit(struct ub_tree_ctx *tc, uint64_t bytes);
/* Three quarters of the default memory budget of a read command (ub_fs_opts.cache_bytes). */
#define UB_TREE_CACHE_DEFAULT (192ULL << 20)
struct ub_tree_cache_stats {
	uint64_t hits, misses; /* since ub_tree_ctx_init */
	uint64_t bytes;        /* held now, dirty and referenced blocks included */
	uint64_t limit;
	size_t dirty;          /* blocks of the running transaction (pinned) */
};
void ub_tree_cache_stats(struct ub_tree_ctx *tc, struct ub_tree_cache_stats *out);

/* Header and item accessors for a verified block. */
const uint8_t *ub_eb_data(const struct ub_eb *eb);
uint32_t ub_eb_len(const struct ub_eb *eb);
uint64_t ub_eb_start(const struct ub_eb *eb);
uint8_t ub_eb_level(const struct ub_eb *eb);
uint32_t ub_eb_nritems(const struct ub_eb *eb);
uint64_t ub_eb_owner(const struct ub_eb *eb);
uint64_t ub_eb_generation(const struct ub_eb *eb);
void ub_eb_item_key(const struct ub_eb *eb, int slot, struct ub_key *key);
/* Item data pointer and size (leaf); bounds were verified when the block was read. */
const uint8_t *ub_eb_item_data(const struct ub_eb *eb, int slot, uint32_t *size);
/* Child pointer of a node slot. */
uint64_t ub_eb_node_blockptr(const struct ub_eb *eb, int slot);
uint64_t ub_eb_node_gen(const struct ub_eb *eb, int slot);

/*
 * A position in a tree (lib/tree/tree_priv.h), allocated here: ub_path_new
 * gives an empty one (-ENOMEM), ub_path_free releases what it holds and frees
 * it (NULL is fine). ub_path_release drops the blocks it holds, for reuse.
 */
int ub_path_new(struct ub_path **out);
void ub_path_free(struct ub_path *p);
void ub_path_release(struct ub_path *p);

/*
 * Position `p` at the first item >= key. Returns 0 if an item with exactly
 * `key` is found, 1 if positioned at the next greater item, 2 if no item is
 * >= key (then positioned at the last item, if the tree has any), or a
 * negative errno.
 */
int ub_tree_search(struct ub_tree_ctx *tc, const struct ub_root *root, const struct ub_key *key,
		   struct ub_path *p);
/* Position at the last item <= key: 0 found, 1 there is none, <0 error. */
int ub_tree_search_le(struct ub_tree_ctx *tc, const struct ub_root *root, const struct ub_key *key,
		      struct ub_path *p);
/* Step to the next / previous item: 0 ok, 1 at the end, <0 error. */
int ub_tree_next(struct ub_path *p);
int ub_tree_prev(struct ub_path *p);
/*
 * The key ub_tree_next would move to, without reading a block: from the leaf,
 * or from the node that points to the next leaf (a leaf starts with the key
 * its parent gives it). 0 and *key, 1 at the end of the tree.
 */
int ub_tree_next_key(const struct ub_path *p, struct ub_key *key);
/* The item at the current position. */
void ub_path_key(const struct ub_path *p, struct ub_key *key);
const uint8_t *ub_path_data(const struct ub_path *p, uint32_t *size);

/*
 * Exact lookup: copies nothing, returns 0 and the item's data (valid until
 * ub_path_release) or -ENOENT.
 */
int ub_tree_lookup(struct ub_tree_ctx *tc, const struct ub_root *root, const struct ub_key *key,
		   struct ub_path *p, const uint8_t **data, uint32_t *size);

/*
 * Enter every block of the tree under `root` once, parents before children,
 * calling `fn` (if set) on each; a nonzero return from `fn` stops the walk
 * with that value. Every block is recorded in `seen` with `tag`: a block
 * already there (in this tree, or in another tree walked with the same set)
 * is corruption, reported with both tags and -EUCLEAN returned. A block that
 * cannot be read stops the walk with its error.
 */
int ub_tree_walk(struct ub_tree_ctx *tc, const struct ub_root *root, struct ub_block_set *seen, uint64_t tag,
		 int (*fn)(void *arg, const struct ub_eb *eb), void *arg);

/*
 * ---- leaf readahead ---- a forward walk is about to need the children of
 * `parent` from `slot` on: the device is told to fetch up to `n` of them
 * (WILLNEED advice, merged into runs; nothing waits, nothing is verified or
 * kept here: each block is still read and checked when the walk gets there).
 * Only blocks not already cached are asked for.
 */
#define UB_TREE_READAHEAD_LEAVES 32
void ub_tree_readahead(struct ub_tree_ctx *tc, const struct ub_eb *parent, int slot, int n);
/* The same for every mirrored copy (DUP, RAID1*, RAID10), for a reader that verifies each: a checker. */
void ub_tree_readahead_copies(struct ub_tree_ctx *tc, const struct ub_eb *parent, int slot, int n);

UB_API_END

#endif
