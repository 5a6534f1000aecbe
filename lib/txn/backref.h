/* SPDX-License-Identifier: MIT */
/*
 * Back references inside extent items, as bytes: no tree access here, so the
 * layout rules (which the kernel's tree checker enforces) are unit-testable.
 *
 * An extent item is struct btrfs_extent_item (refs, generation, flags)
 * followed by inline refs. The engine writes skinny metadata only
 * (METADATA_ITEM, no btrfs_tree_block_info), so inline refs start right after
 * the extent item for tree blocks and data alike. Inline refs are sorted by
 * type ascending and, within a type, by "sequence" descending: the offset
 * (root or parent) for block refs and shared data refs, the data ref hash for
 * EXTENT_DATA_REF.
 */
#ifndef UBTRFS_TXN_BACKREF_H
#define UBTRFS_TXN_BACKREF_H

#include <stdbool.h>
#include <stdint.h>
#include "ubtrfs/format.h"

/* One back reference, whichever form (inline or keyed) carries it. */
struct ub_ref {
	uint8_t type;    /* BTRFS_{TREE_BLOCK,SHARED_BLOCK,EXTENT_DATA,SHARED_DATA}_REF_KEY */
	uint64_t root;   /* TREE_BLOCK_REF, EXTENT_DATA_REF: the tree */
	uint64_t parent; /* SHARED_*: the tree block holding the pointer */
	uint64_t owner, offset; /* EXTENT_DATA_REF: inode and file offset minus extent offset */
};

#define UB_EXTENT_ITEM_SIZE ((uint32_t)sizeof(struct btrfs_extent_item))

/* Bytes of an inline ref of `type` (0 for a type the engine does not write). */
uint32_t ub_ref_inline_size(uint8_t type);
/* The ordering value within a type (see above). */
uint64_t ub_ref_seq(const struct ub_ref *r);
/* Same reference (type and identity; counts are not compared). */
bool ub_ref_same(const struct ub_ref *a, const struct ub_ref *b);
/* Key of the keyed form of `r` for the extent at `bytenr` (EXTENT_DATA_REF: the hash; collisions are the caller's). */
void ub_ref_key(const struct ub_ref *r, uint64_t bytenr, struct ub_key *key);
/* Item body size of the keyed form. */
uint32_t ub_ref_keyed_size(uint8_t type);

/*
 * The kernel's limit on an extent item's size: an inline ref that would make
 * the item this big or bigger goes into a keyed item instead.
 */
static inline uint32_t ub_max_extent_item_size(uint32_t nodesize)
{
	return ((nodesize - UB_HEADER_SIZE) >> 4) - UB_ITEM_SIZE;
}

/*
 * Find `r` among the inline refs of extent item `item` (`size` bytes), which
 * start at byte `first` (UB_EXTENT_ITEM_SIZE, or past a tree_block_info: see
 * ub_extent_refs_start). 0: found at byte *pos, its count in *count; 1:
 * absent, *pos is where it goes to keep the order; -EUCLEAN: the refs do not
 * parse (a ref crossing the end, an unknown type).
 */
int ub_inline_ref_find(const uint8_t *item, uint32_t size, uint32_t first, const struct ub_ref *r, uint32_t *pos,
		       uint32_t *count);
/*
 * Where the inline refs of an extent item with key type `type` start: a tree
 * block's EXTENT_ITEM (the form before skinny-metadata) holds a
 * tree_block_info (first key, level) before them.
 */
static inline uint32_t ub_extent_refs_start(uint8_t type, bool is_data)
{
	return type == BTRFS_EXTENT_ITEM_KEY && !is_data
		       ? UB_EXTENT_ITEM_SIZE + (uint32_t)sizeof(struct btrfs_tree_block_info)
		       : UB_EXTENT_ITEM_SIZE;
}
/*
 * The inline refs one by one: *pos starts at `first` (UB_EXTENT_ITEM_SIZE, or
 * past a tree_block_info); 0 with the ref at *pos (its count in *count) and
 * *pos moved past it, 1 at the end, -EUCLEAN when a ref does not parse.
 */
int ub_inline_ref_next(const uint8_t *item, uint32_t size, uint32_t *pos, struct ub_ref *r, uint32_t *count);
/* The reference a keyed ref item (key, body) describes, and its count: 0, or -EUCLEAN. */
int ub_keyed_ref_read(const struct ub_key *key, const uint8_t *data, uint32_t size, struct ub_ref *r,
		      uint32_t *count);
/* Write inline ref `r` with `count` at `dst` (ub_ref_inline_size(r->type) bytes). */
void ub_inline_ref_write(uint8_t *dst, const struct ub_ref *r, uint32_t count);
/* Set the count of the inline ref at `p` (data refs only; block refs always count 1). */
void ub_inline_ref_set_count(uint8_t *p, uint8_t type, uint32_t count);
/* Parse a keyed ref item: its count (1 for block refs). */
uint32_t ub_keyed_ref_count(const struct ub_key *key, const uint8_t *data, uint32_t size);
/* Keyed EXTENT_DATA_REF body matches `r`. */
bool ub_keyed_data_ref_match(const uint8_t *data, uint32_t size, const struct ub_ref *r);
/* Fill a keyed ref body for `r` with `count`. */
void ub_keyed_ref_write(uint8_t *dst, const struct ub_ref *r, uint32_t count);

#endif
