/* SPDX-License-Identifier: MIT */
/* mkfs's building blocks: a leaf built from items in key order, and the item encoders. */
#ifndef UBTRFS_MKFS_INTERNAL_H
#define UBTRFS_MKFS_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include "ubtrfs/format.h"

/* One leaf being filled: items must come in ascending key order (mkfs knows them all up front). */
struct ub_leaf_builder {
	uint8_t *buf; /* nodesize bytes, owned by the caller */
	uint32_t nodesize;
	uint32_t nritems;
	uint32_t data_end; /* offset (from the end of the header) of the lowest item data so far */
	struct ub_key last;
};

struct ub_leaf_header {
	uint64_t bytenr, generation, owner;
	const uint8_t *fsid;            /* metadata_uuid */
	const uint8_t *chunk_tree_uuid;
};

void ub_leaf_init(struct ub_leaf_builder *lb, uint8_t *buf, uint32_t nodesize, const struct ub_leaf_header *h);
/* Room for `size` more bytes of item data (plus its item header) returned zeroed; -E2BIG when
 * full, -EINVAL when `key` is not above the previous one. */
int ub_leaf_add(struct ub_leaf_builder *lb, const struct ub_key *key, uint32_t size, uint8_t **data);
/* The header's nritems and the checksum (over everything after the csum field). */
int ub_leaf_finish(struct ub_leaf_builder *lb, unsigned csum_type);

/* ---- items (lib/mkfs/items.c); each writes its on-disk bytes into a zeroed buffer ---- */
#define UB_SKINNY_TREE_REF_SIZE \
	((uint32_t)(sizeof(struct btrfs_extent_item) + sizeof(struct btrfs_extent_inline_ref)))
#define UB_FAT_TREE_REF_SIZE                                                                             \
	((uint32_t)(sizeof(struct btrfs_extent_item) + sizeof(struct btrfs_tree_block_info) + \
		    sizeof(struct btrfs_extent_inline_ref)))
#define UB_CHUNK_ITEM_SIZE(n) \
	((uint32_t)(sizeof(struct btrfs_chunk) + ((n) - 1) * sizeof(struct btrfs_stripe)))

void ub_put_dev_item(uint8_t *p, uint64_t devid, uint64_t total_bytes, uint64_t bytes_used, uint32_t sectorsize,
		     const uint8_t *dev_uuid, const uint8_t *fsid);
void ub_put_chunk_head(uint8_t *p, uint64_t length, uint64_t type, uint32_t sectorsize, int num_stripes,
		       int sub_stripes);
void ub_put_chunk_stripe(uint8_t *p, int i, uint64_t devid, uint64_t physical, const uint8_t *dev_uuid);
void ub_put_dev_extent(uint8_t *p, uint64_t chunk_offset, uint64_t length, const uint8_t *chunk_tree_uuid);
void ub_put_block_group(uint8_t *p, uint64_t used, uint64_t flags);
/* a tree block's extent item with its one inline TREE_BLOCK_REF to `root`; `first_key` only for the
 * non-skinny form (tree_block_info) */
void ub_put_tree_block_ref(uint8_t *p, bool skinny, uint64_t generation, uint64_t root,
			   const struct ub_key *first_key, int level);
/* a directory inode as mkfs writes the root directories */
void ub_put_dir_inode(uint8_t *p, uint64_t generation, uint64_t nbytes, int64_t now, bool with_otime);
void ub_put_inode_ref(uint8_t *p, uint64_t index, const char *name, uint16_t len);
void ub_put_dir_item(uint8_t *p, const struct ub_key *location, uint8_t type, const char *name, uint16_t len);
/* a root item for a tree whose single leaf is at `bytenr` */
void ub_put_root_item(uint8_t *p, uint64_t bytenr, uint64_t generation, uint64_t root_dirid, uint32_t nodesize,
		      const uint8_t *uuid, int64_t now);
void ub_put_free_space_info(uint8_t *p, uint32_t extent_count);

#endif
