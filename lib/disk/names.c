/* SPDX-License-Identifier: MIT */
/*
 * Printable names for key types, well-known objectids and block group
 * profiles, spelled the way `btrfs inspect-internal dump-tree` spells them so
 * that our dumps can be diffed against btrfs-progs output.
 */
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "ubtrfs/format.h"

/* Obsolete type (pre-2008 csum items); btrfs-progs still names it. */
#define UB_OLD_CSUM_ITEM_KEY 120

#ifndef BTRFS_CSUM_CHANGE_OBJECTID
#define BTRFS_CSUM_CHANGE_OBJECTID -13ULL
#endif

const char *ub_key_type_name(uint8_t type)
{
	switch (type) {
	case BTRFS_INODE_ITEM_KEY: return "INODE_ITEM";
	case BTRFS_INODE_REF_KEY: return "INODE_REF";
	case BTRFS_INODE_EXTREF_KEY: return "INODE_EXTREF";
	case BTRFS_XATTR_ITEM_KEY: return "XATTR_ITEM";
	case BTRFS_VERITY_DESC_ITEM_KEY: return "VERITY_DESC_ITEM";
	case BTRFS_VERITY_MERKLE_ITEM_KEY: return "VERITY_MERKLE_ITEM";
	case BTRFS_ORPHAN_ITEM_KEY: return "ORPHAN_ITEM";
	case BTRFS_DIR_LOG_ITEM_KEY: return "DIR_LOG_ITEM";
	case BTRFS_DIR_LOG_INDEX_KEY: return "DIR_LOG_INDEX";
	case BTRFS_DIR_ITEM_KEY: return "DIR_ITEM";
	case BTRFS_DIR_INDEX_KEY: return "DIR_INDEX";
	case BTRFS_EXTENT_DATA_KEY: return "EXTENT_DATA";
	case UB_OLD_CSUM_ITEM_KEY: return "CSUM_ITEM";
	case BTRFS_EXTENT_CSUM_KEY: return "EXTENT_CSUM";
	case BTRFS_ROOT_ITEM_KEY: return "ROOT_ITEM";
	case BTRFS_ROOT_BACKREF_KEY: return "ROOT_BACKREF";
	case BTRFS_ROOT_REF_KEY: return "ROOT_REF";
	case BTRFS_EXTENT_ITEM_KEY: return "EXTENT_ITEM";
	case BTRFS_METADATA_ITEM_KEY: return "METADATA_ITEM";
	case BTRFS_EXTENT_OWNER_REF_KEY: return "EXTENT_OWNER_REF";
	case BTRFS_TREE_BLOCK_REF_KEY: return "TREE_BLOCK_REF";
	case BTRFS_EXTENT_DATA_REF_KEY: return "EXTENT_DATA_REF";
	case BTRFS_EXTENT_REF_V0_KEY: return "EXTENT_REF_V0";
	case BTRFS_SHARED_BLOCK_REF_KEY: return "SHARED_BLOCK_REF";
	case BTRFS_SHARED_DATA_REF_KEY: return "SHARED_DATA_REF";
	case BTRFS_BLOCK_GROUP_ITEM_KEY: return "BLOCK_GROUP_ITEM";
	case BTRFS_FREE_SPACE_INFO_KEY: return "FREE_SPACE_INFO";
	case BTRFS_FREE_SPACE_EXTENT_KEY: return "FREE_SPACE_EXTENT";
	case BTRFS_FREE_SPACE_BITMAP_KEY: return "FREE_SPACE_BITMAP";
	case BTRFS_DEV_EXTENT_KEY: return "DEV_EXTENT";
	case BTRFS_DEV_ITEM_KEY: return "DEV_ITEM";
	case BTRFS_CHUNK_ITEM_KEY: return "CHUNK_ITEM";
	case BTRFS_RAID_STRIPE_KEY: return "RAID_STRIPE";
	case BTRFS_QGROUP_STATUS_KEY: return "QGROUP_STATUS";
	case BTRFS_QGROUP_INFO_KEY: return "QGROUP_INFO";
	case BTRFS_QGROUP_LIMIT_KEY: return "QGROUP_LIMIT";
	case BTRFS_QGROUP_RELATION_KEY: return "QGROUP_RELATION";
	/* 248 and 249 are shared by several items; btrfs-progs prints the generic names. */
	case BTRFS_TEMPORARY_ITEM_KEY: return "TEMPORARY_ITEM";
	case BTRFS_PERSISTENT_ITEM_KEY: return "PERSISTENT_ITEM";
	case BTRFS_DEV_REPLACE_KEY: return "DEV_REPLACE";
	case BTRFS_UUID_KEY_SUBVOL: return "UUID_KEY_SUBVOL";
	case BTRFS_UUID_KEY_RECEIVED_SUBVOL: return "UUID_KEY_RECEIVED_SUBVOL";
	case BTRFS_STRING_ITEM_KEY: return "STRING_ITEM";
	default: return NULL;
	}
}

const char *ub_objectid_name(uint64_t objectid)
{
	switch (objectid) {
	/* 1 is also DEV_ITEMS in the chunk tree; the printer picks by key type. */
	case BTRFS_ROOT_TREE_OBJECTID: return "ROOT_TREE";
	case BTRFS_EXTENT_TREE_OBJECTID: return "EXTENT_TREE";
	case BTRFS_CHUNK_TREE_OBJECTID: return "CHUNK_TREE";
	case BTRFS_DEV_TREE_OBJECTID: return "DEV_TREE";
	case BTRFS_FS_TREE_OBJECTID: return "FS_TREE";
	case BTRFS_ROOT_TREE_DIR_OBJECTID: return "ROOT_TREE_DIR";
	case BTRFS_CSUM_TREE_OBJECTID: return "CSUM_TREE";
	case BTRFS_QUOTA_TREE_OBJECTID: return "QUOTA_TREE";
	case BTRFS_UUID_TREE_OBJECTID: return "UUID_TREE";
	case BTRFS_FREE_SPACE_TREE_OBJECTID: return "FREE_SPACE_TREE";
	case BTRFS_BLOCK_GROUP_TREE_OBJECTID: return "BLOCK_GROUP_TREE";
	case BTRFS_RAID_STRIPE_TREE_OBJECTID: return "RAID_STRIPE_TREE";
	case BTRFS_BALANCE_OBJECTID: return "BALANCE";
	case BTRFS_ORPHAN_OBJECTID: return "ORPHAN";
	case BTRFS_TREE_LOG_OBJECTID: return "TREE_LOG";
	case BTRFS_TREE_LOG_FIXUP_OBJECTID: return "TREE_LOG_FIXUP";
	case BTRFS_TREE_RELOC_OBJECTID: return "TREE_RELOC";
	case BTRFS_DATA_RELOC_TREE_OBJECTID: return "DATA_RELOC_TREE";
	case BTRFS_EXTENT_CSUM_OBJECTID: return "EXTENT_CSUM";
	case BTRFS_FREE_SPACE_OBJECTID: return "FREE_SPACE";
	case BTRFS_FREE_INO_OBJECTID: return "FREE_INO";
	case BTRFS_CSUM_CHANGE_OBJECTID: return "CSUM_CHANGE";
	case BTRFS_MULTIPLE_OBJECTIDS: return "MULTIPLE";
	default: return NULL;
	}
}

const char *ub_profile_name(uint64_t bg_flags)
{
	/* One profile bit is valid; anything else is reported as such, not guessed. */
	switch (bg_flags & BTRFS_BLOCK_GROUP_PROFILE_MASK) {
	case 0: return "single";
	case BTRFS_BLOCK_GROUP_DUP: return "DUP";
	case BTRFS_BLOCK_GROUP_RAID0: return "RAID0";
	case BTRFS_BLOCK_GROUP_RAID1: return "RAID1";
	case BTRFS_BLOCK_GROUP_RAID1C3: return "RAID1C3";
	case BTRFS_BLOCK_GROUP_RAID1C4: return "RAID1C4";
	case BTRFS_BLOCK_GROUP_RAID10: return "RAID10";
	case BTRFS_BLOCK_GROUP_RAID5: return "RAID5";
	case BTRFS_BLOCK_GROUP_RAID6: return "RAID6";
	default: return "UNKNOWN";
	}
}

void ub_uuid_str(const uint8_t *uuid, char out[UB_UUID_STR_LEN])
{
	static const char hex[] = "0123456789abcdef";
	size_t o = 0;

	for (int i = 0; i < 16; i++) {
		if (i == 4 || i == 6 || i == 8 || i == 10)
			out[o++] = '-';
		out[o++] = hex[uuid[i] >> 4];
		out[o++] = hex[uuid[i] & 15];
	}
	out[o] = '\0';
}

uint8_t ub_mode_ftype(uint32_t mode)
{
	switch (mode & S_IFMT) {
	case S_IFREG: return BTRFS_FT_REG_FILE;
	case S_IFDIR: return BTRFS_FT_DIR;
	case S_IFCHR: return BTRFS_FT_CHRDEV;
	case S_IFBLK: return BTRFS_FT_BLKDEV;
	case S_IFIFO: return BTRFS_FT_FIFO;
	case S_IFSOCK: return BTRFS_FT_SOCK;
	case S_IFLNK: return BTRFS_FT_SYMLINK;
	default: return BTRFS_FT_UNKNOWN;
	}
}
