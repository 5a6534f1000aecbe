/* SPDX-License-Identifier: MIT */
/*
 * The tree layer: verified tree blocks, a block cache, search and iteration.
 */
#ifndef UBTRFS_TREE_H
#define UBTRFS_TREE_H

#include <stdbool.h>
#include <stdint.h>
#include "ubtrfs/format.h"
#include "ubtrfs/volume.h"

/* One verified tree block in memory (refcounted, owned by the cache). */
struct ub_eb {
	uint64_t start;
	uint32_t len;
	int refs;
	struct ub_eb *hnext, *lru_prev, *lru_next;
	uint8_t *data;
};

/* Where a tree starts. */
struct ub_root {
	uint64_t objectid; /* tree id, e.g. BTRFS_FS_TREE_OBJECTID */
	uint64_t bytenr;
	uint64_t generation;
	uint8_t level;
};

/* What the parent (or superblock) says a child block must be; 0/-1 = unknown. */
struct ub_expect {
	uint64_t owner;      /* 0: do not check */
	int level;           /* -1: do not check */
	uint64_t generation; /* 0: do not check (must match exactly when set) */
	const struct ub_key *first_key; /* NULL: do not check */
};

struct ub_tree_ctx {
	struct ub_volume *vol;
	struct ub_log log;
	struct ub_eb **hash;
	unsigned hash_size;
	struct ub_eb *lru_head, *lru_tail; /* unreferenced blocks, most recent first */
	uint64_t cached_bytes, cache_limit;
	bool quiet; /* no messages for blocks that fail (callers probing) */
	/* blocks already found bad on every copy, so a walk reports each once */
	uint64_t bad[64];
	int bad_err[64];
	unsigned bad_next;
};

int ub_tree_ctx_init(struct ub_tree_ctx *tc, struct ub_volume *vol, const struct ub_log *log);
void ub_tree_ctx_destroy(struct ub_tree_ctx *tc);

/*
 * Read and verify the block at `bytenr`, trying every copy until one passes
 * checksum, header and tree-checker validation. On failure of every copy the
 * error (naming tree, level, address and what failed) is logged and -EIO /
 * -EUCLEAN returned.
 */
int ub_tree_read_block(struct ub_tree_ctx *tc, uint64_t bytenr, const struct ub_expect *exp,
		       struct ub_eb **out);
void ub_eb_put(struct ub_tree_ctx *tc, struct ub_eb *eb);

/* Header and item accessors for a verified block. */
static inline uint8_t ub_eb_level(const struct ub_eb *eb) { return (uint8_t)UB_GET(ub_disk_header, level, eb->data); }
static inline uint32_t ub_eb_nritems(const struct ub_eb *eb) { return (uint32_t)UB_GET(ub_disk_header, nritems, eb->data); }
static inline uint64_t ub_eb_owner(const struct ub_eb *eb) { return UB_GET(ub_disk_header, owner, eb->data); }
static inline uint64_t ub_eb_generation(const struct ub_eb *eb) { return UB_GET(ub_disk_header, generation, eb->data); }
void ub_eb_item_key(const struct ub_eb *eb, int slot, struct ub_key *key);
/* Item data pointer and size (leaf); bounds were verified when the block was read. */
const uint8_t *ub_eb_item_data(const struct ub_eb *eb, int slot, uint32_t *size);
/* Child pointer of a node slot. */
uint64_t ub_eb_node_blockptr(const struct ub_eb *eb, int slot);
uint64_t ub_eb_node_gen(const struct ub_eb *eb, int slot);

/* A position in a tree: nodes[0] is the leaf. */
struct ub_path {
	struct ub_eb *nodes[UB_MAX_LEVEL];
	int slots[UB_MAX_LEVEL];
	struct ub_tree_ctx *tc;
	const struct ub_root *root;
};

void ub_path_init(struct ub_path *p);
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
/* The item at the current position. */
void ub_path_key(const struct ub_path *p, struct ub_key *key);
const uint8_t *ub_path_data(const struct ub_path *p, uint32_t *size);

/*
 * Exact lookup: copies nothing, returns 0 and the item's data (valid until
 * ub_path_release) or -ENOENT.
 */
int ub_tree_lookup(struct ub_tree_ctx *tc, const struct ub_root *root, const struct ub_key *key,
		   struct ub_path *p, const uint8_t **data, uint32_t *size);

#endif
