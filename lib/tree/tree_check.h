/* SPDX-License-Identifier: MIT */
/*
 * Structural validation of one tree block's contents, as the kernel's
 * tree-checker does on read: item bounds, key order and the per-item-type size
 * and value rules. Checksum, fsid, bytenr, level and generation are checked by
 * the reader (lib/tree/block.c) before this runs.
 *
 * Library-internal: called by the library, the unit tests and the fuzzers.
 */
#ifndef UBTRFS_TREE_TREE_CHECK_H
#define UBTRFS_TREE_TREE_CHECK_H

#include <stddef.h>
#include <stdint.h>
#include "ubtrfs/format.h"

struct ub_check_ctx {
	uint32_t nodesize;
	uint32_t sectorsize;
	unsigned csum_size;
	uint64_t incompat_flags;
	uint64_t owner; /* header owner (tree objectid) */
};

/*
 * Check a whole block of ctx->nodesize bytes. Returns 0 when valid, -EUCLEAN
 * otherwise with a one-line reason in `why` naming the slot and key, e.g.
 * "slot 3 key (256 INODE_ITEM 0): invalid item size 150, expect 160".
 */
int ub_tree_check_block(const uint8_t *buf, const struct ub_check_ctx *ctx, char *why, size_t whylen);

/*
 * Check one leaf item by type (`data`,`size` inside a block that already
 * passed the bounds checks). Used by ub_tree_check_block and by fuzzers.
 */
int ub_tree_check_item(const struct ub_key *key, const uint8_t *data, uint32_t size,
		       const struct ub_check_ctx *ctx, char *why, size_t whylen);

#endif
