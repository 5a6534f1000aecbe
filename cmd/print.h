/* SPDX-License-Identifier: MIT */
/*
 * Human-readable decoding of superblocks, tree block headers and items, in the
 * style of `btrfs inspect-internal dump-super` / `dump-tree`.
 */
#ifndef UBTRFS_CMD_PRINT_H
#define UBTRFS_CMD_PRINT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include "ubtrfs/format.h"

/* Print a 4096-byte superblock (with its dev item); `full` adds the system chunk array and backup roots. */
void ub_print_super(FILE *f, const uint8_t *sb, bool full);

/* Print a key as "(256 INODE_ITEM 0)" (names for well-known objectids and types). */
void ub_print_key(FILE *f, const struct ub_key *key);

struct ub_print_ctx {
	unsigned csum_size;  /* for csum items */
	uint32_t sectorsize;
	uint64_t owner;      /* tree the item is in (changes how some items decode) */
};

/* Print the header line(s) of a tree block (`buf` holds a verified block of `nodesize` bytes). */
void ub_print_block_header(FILE *f, const uint8_t *buf, uint32_t nodesize);
/*
 * Print one leaf item: the "item N key (...) itemoff O itemsize S" line and the
 * decoded body. Bodies are decoded defensively: a short or malformed body
 * prints what fits and a note, never reads past `size`.
 */
void ub_print_item(FILE *f, int slot, const struct ub_key *key, uint32_t itemoff, const uint8_t *data,
		   uint32_t size, const struct ub_print_ctx *ctx);
/* Print one node pointer line: "key (...) block B gen G". */
void ub_print_key_ptr(FILE *f, const struct ub_key *key, uint64_t blockptr, uint64_t gen);

#endif
