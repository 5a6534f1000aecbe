/* SPDX-License-Identifier: MIT */
/* The items of a new filesystem, encoded field by field with the endian-safe setters. */
#include <string.h>
#include <sys/stat.h>

#include "mkfs/mkfs_internal.h"

#define SET(st, f, p, v) UB_SET(st, f, p, v)

void ub_put_dev_item(uint8_t *p, uint64_t devid, uint64_t total_bytes, uint64_t bytes_used, uint32_t sectorsize,
		     const uint8_t *dev_uuid, const uint8_t *fsid)
{
	SET(btrfs_dev_item, devid, p, devid);
	SET(btrfs_dev_item, total_bytes, p, total_bytes);
	SET(btrfs_dev_item, bytes_used, p, bytes_used);
	SET(btrfs_dev_item, io_align, p, sectorsize);
	SET(btrfs_dev_item, io_width, p, sectorsize);
	SET(btrfs_dev_item, sector_size, p, sectorsize);
	memcpy(p + offsetof(struct btrfs_dev_item, uuid), dev_uuid, UB_UUID_SIZE);
	memcpy(p + offsetof(struct btrfs_dev_item, fsid), fsid, UB_FSID_SIZE);
}

void ub_put_chunk_head(uint8_t *p, uint64_t length, uint64_t type, uint32_t sectorsize, int num_stripes,
		       int sub_stripes)
{
	SET(btrfs_chunk, length, p, length);
	SET(btrfs_chunk, owner, p, BTRFS_EXTENT_TREE_OBJECTID);
	SET(btrfs_chunk, stripe_len, p, UB_STRIPE_LEN);
	SET(btrfs_chunk, type, p, type);
	SET(btrfs_chunk, io_align, p, UB_STRIPE_LEN);
	SET(btrfs_chunk, io_width, p, UB_STRIPE_LEN);
	SET(btrfs_chunk, sector_size, p, sectorsize);
	SET(btrfs_chunk, num_stripes, p, (uint64_t)num_stripes);
	SET(btrfs_chunk, sub_stripes, p, (uint64_t)sub_stripes);
}

void ub_put_chunk_stripe(uint8_t *p, int i, uint64_t devid, uint64_t physical, const uint8_t *dev_uuid)
{
	uint8_t *s = p + offsetof(struct btrfs_chunk, stripe) + (size_t)i * sizeof(struct btrfs_stripe);

	SET(btrfs_stripe, devid, s, devid);
	SET(btrfs_stripe, offset, s, physical);
	memcpy(s + offsetof(struct btrfs_stripe, dev_uuid), dev_uuid, UB_UUID_SIZE);
}

void ub_put_dev_extent(uint8_t *p, uint64_t chunk_offset, uint64_t length, const uint8_t *chunk_tree_uuid)
{
	SET(btrfs_dev_extent, chunk_tree, p, BTRFS_CHUNK_TREE_OBJECTID);
	SET(btrfs_dev_extent, chunk_objectid, p, BTRFS_FIRST_CHUNK_TREE_OBJECTID);
	SET(btrfs_dev_extent, chunk_offset, p, chunk_offset);
	SET(btrfs_dev_extent, length, p, length);
	memcpy(p + offsetof(struct btrfs_dev_extent, chunk_tree_uuid), chunk_tree_uuid, UB_UUID_SIZE);
}

void ub_put_block_group(uint8_t *p, uint64_t used, uint64_t flags)
{
	SET(btrfs_block_group_item, used, p, used);
	SET(btrfs_block_group_item, chunk_objectid, p, BTRFS_FIRST_CHUNK_TREE_OBJECTID);
	SET(btrfs_block_group_item, flags, p, flags);
}

void ub_put_tree_block_ref(uint8_t *p, bool skinny, uint64_t generation, uint64_t root,
			   const struct ub_key *first_key, int level)
{
	uint8_t *ref = p + sizeof(struct btrfs_extent_item);

	SET(btrfs_extent_item, refs, p, 1);
	SET(btrfs_extent_item, generation, p, generation);
	SET(btrfs_extent_item, flags, p, BTRFS_EXTENT_FLAG_TREE_BLOCK);
	if (!skinny) {
		ub_key_write(ref + offsetof(struct btrfs_tree_block_info, key), first_key);
		SET(btrfs_tree_block_info, level, ref, (uint64_t)level);
		ref += sizeof(struct btrfs_tree_block_info);
	}
	SET(btrfs_extent_inline_ref, type, ref, BTRFS_TREE_BLOCK_REF_KEY);
	SET(btrfs_extent_inline_ref, offset, ref, root);
}

static void put_time(uint8_t *inode, size_t off, int64_t sec)
{
	ub_put_le(inode + off + offsetof(struct btrfs_timespec, sec), 8, (uint64_t)sec);
	ub_put_le(inode + off + offsetof(struct btrfs_timespec, nsec), 4, 0);
}

void ub_put_dir_inode(uint8_t *p, uint64_t generation, uint64_t nbytes, int64_t now, bool with_otime)
{
	SET(btrfs_inode_item, generation, p, generation);
	SET(btrfs_inode_item, nbytes, p, nbytes);
	SET(btrfs_inode_item, nlink, p, 1);
	SET(btrfs_inode_item, mode, p, S_IFDIR | 0755);
	put_time(p, offsetof(struct btrfs_inode_item, atime), now);
	put_time(p, offsetof(struct btrfs_inode_item, ctime), now);
	put_time(p, offsetof(struct btrfs_inode_item, mtime), now);
	if (with_otime)
		put_time(p, offsetof(struct btrfs_inode_item, otime), now);
}

void ub_put_inode_ref(uint8_t *p, uint64_t index, const char *name, uint16_t len)
{
	SET(btrfs_inode_ref, index, p, index);
	SET(btrfs_inode_ref, name_len, p, len);
	memcpy(p + sizeof(struct btrfs_inode_ref), name, len);
}

void ub_put_dir_item(uint8_t *p, const struct ub_key *location, uint8_t type, const char *name, uint16_t len)
{
	ub_key_write(p + offsetof(struct btrfs_dir_item, location), location);
	SET(btrfs_dir_item, transid, p, 0);
	SET(btrfs_dir_item, data_len, p, 0);
	SET(btrfs_dir_item, name_len, p, len);
	SET(btrfs_dir_item, type, p, type);
	memcpy(p + sizeof(struct btrfs_dir_item), name, len);
}

void ub_put_root_item(uint8_t *p, uint64_t bytenr, uint64_t generation, uint64_t root_dirid, uint32_t nodesize,
		      const uint8_t *uuid, int64_t now)
{
	/* the embedded inode is what the kernel gives every new root: a directory stub */
	SET(btrfs_root_item, inode.generation, p, 1);
	SET(btrfs_root_item, inode.size, p, 3);
	SET(btrfs_root_item, inode.nlink, p, 1);
	SET(btrfs_root_item, inode.nbytes, p, nodesize);
	SET(btrfs_root_item, inode.mode, p, S_IFDIR | 0755);
	SET(btrfs_root_item, generation, p, generation);
	SET(btrfs_root_item, root_dirid, p, root_dirid);
	SET(btrfs_root_item, bytenr, p, bytenr);
	SET(btrfs_root_item, bytes_used, p, nodesize);
	SET(btrfs_root_item, refs, p, 1);
	SET(btrfs_root_item, level, p, 0);
	/* generation_v2 == generation: the fields after it (uuids, times) are valid */
	SET(btrfs_root_item, generation_v2, p, generation);
	if (uuid) {
		memcpy(p + offsetof(struct btrfs_root_item, uuid), uuid, UB_UUID_SIZE);
		put_time(p, offsetof(struct btrfs_root_item, ctime), now);
		put_time(p, offsetof(struct btrfs_root_item, otime), now);
	}
}

void ub_put_free_space_info(uint8_t *p, uint32_t extent_count)
{
	SET(btrfs_free_space_info, extent_count, p, extent_count);
	SET(btrfs_free_space_info, flags, p, 0);
}
