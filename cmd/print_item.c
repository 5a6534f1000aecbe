/* SPDX-License-Identifier: MIT */
/*
 * Tree block printing in the layout of `btrfs inspect-internal dump-tree`: the
 * block header lines, node pointers, and the per-item dispatcher that hands
 * each item body to the decoder of its key type.
 */
#include <stdio.h>
#include <string.h>

#include "print_priv.h"

/* Header flag bits below the backref revision byte. */
#define PR_HDR_FLAGS_MASK ((1ULL << PR_BACKREF_REV_SHIFT) - 1)

/* Bytes of an unknown item shown as hex. */
#define PR_UNKNOWN_DUMP_MAX 64U

static void header_flags_str(char *out, size_t n, uint64_t flags)
{
	const char *sep = "";
	size_t len = 0;

	out[0] = '\0';
	if (flags & BTRFS_HEADER_FLAG_WRITTEN) {
		len += (size_t)snprintf(out + len, n - len, "WRITTEN");
		sep = "|";
	}
	if ((flags & BTRFS_HEADER_FLAG_RELOC) && len < n)
		snprintf(out + len, n - len, "%sRELOC", sep);
}

/*
 * Free bytes of a leaf as btrfs-progs computes them: the data area minus what
 * the items claim. Returns false when the item array itself overflows the block.
 */
static bool leaf_free_space(const uint8_t *buf, uint32_t nodesize, uint32_t nritems, long long *out)
{
	const long long data_size = (long long)nodesize - UB_HEADER_SIZE;
	const uint8_t *first, *last;
	long long used;

	if (nritems == 0) {
		*out = data_size;
		return true;
	}
	if ((uint64_t)nritems * UB_ITEM_SIZE > (uint64_t)data_size)
		return false;
	first = buf + UB_HEADER_SIZE;
	last = first + (size_t)(nritems - 1) * UB_ITEM_SIZE;
	used = (long long)UB_GET(ub_disk_item, offset, first) + (long long)UB_GET(ub_disk_item, size, first) -
	       (long long)UB_GET(ub_disk_item, offset, last) + (long long)nritems * UB_ITEM_SIZE;
	*out = data_size - used;
	return true;
}

void ub_print_block_header(FILE *f, const uint8_t *buf, uint32_t nodesize)
{
	char fsid[PR_UUID_STR_LEN], chunk_uuid[PR_UUID_STR_LEN], flags_str[32];
	uint64_t bytenr, flags, generation, owner;
	uint32_t nritems;
	unsigned level;
	const char *kind;

	if (nodesize < UB_HEADER_SIZE) {
		fprintf(f, "block too small for a header: %u bytes\n", nodesize);
		return;
	}
	bytenr = UB_GET(ub_disk_header, bytenr, buf);
	flags = UB_GET(ub_disk_header, flags, buf);
	generation = UB_GET(ub_disk_header, generation, buf);
	owner = UB_GET(ub_disk_header, owner, buf);
	nritems = (uint32_t)UB_GET(ub_disk_header, nritems, buf);
	level = (unsigned)UB_GET(ub_disk_header, level, buf);
	kind = level ? "node" : "leaf";

	if (level) {
		uint32_t ptrs = (nodesize - UB_HEADER_SIZE) / UB_KEY_PTR_SIZE;

		/* Unsigned like btrfs-progs: an overfull node shows a wrapped count. */
		fprintf(f, "node %llu level %u items %u free space %u generation %llu owner ",
			(unsigned long long)bytenr, level, nritems, ptrs - nritems,
			(unsigned long long)generation);
	} else {
		long long free_space;

		fprintf(f, "leaf %llu items %u ", (unsigned long long)bytenr, nritems);
		if (leaf_free_space(buf, nodesize, nritems, &free_space))
			fprintf(f, "free space %lld", free_space);
		else
			fputs("free space (item array overflows block)", f);
		fprintf(f, " generation %llu owner ", (unsigned long long)generation);
	}
	pr_objectid(f, owner, 0);
	fputc('\n', f);

	header_flags_str(flags_str, sizeof(flags_str), flags & PR_HDR_FLAGS_MASK);
	fprintf(f, "%s %llu flags 0x%llx(%s) backref revision %u\n", kind, (unsigned long long)bytenr,
		(unsigned long long)(flags & PR_HDR_FLAGS_MASK), flags_str,
		(unsigned)(flags >> PR_BACKREF_REV_SHIFT));

	pr_uuid_str(fsid, UB_PTR(ub_disk_header, fsid, buf));
	pr_uuid_str(chunk_uuid, UB_PTR(ub_disk_header, chunk_tree_uuid, buf));
	fprintf(f, "fs uuid %s\nchunk uuid %s\n", fsid, chunk_uuid);
}

void ub_print_key_ptr(FILE *f, const struct ub_key *key, uint64_t blockptr, uint64_t gen)
{
	fputs("\tkey ", f);
	ub_print_key(f, key);
	fprintf(f, " block %llu gen %llu\n", (unsigned long long)blockptr, (unsigned long long)gen);
}

static void print_string_item(FILE *f, const uint8_t *p, uint32_t size)
{
	fputs("\t\titem data ", f);
	pr_name(f, p, size);
	fputc('\n', f);
}

static void print_unknown(FILE *f, const struct ub_key *key, const uint8_t *p, uint32_t size)
{
	fprintf(f, "\t\tunknown item type %u, %u bytes\n", key->type, size);
	pr_hexdump(f, p, size, PR_UNKNOWN_DUMP_MAX);
}

void ub_print_item(FILE *f, int slot, const struct ub_key *key, uint32_t itemoff, const uint8_t *data,
		   uint32_t size, const struct ub_print_ctx *ctx)
{
	fprintf(f, "\titem %d key ", slot);
	ub_print_key(f, key);
	fprintf(f, " itemoff %u itemsize %u\n", itemoff, size);

	if (!data)
		size = 0;

	switch (key->type) {
	case 0:
		if (key->objectid == BTRFS_FREE_SPACE_OBJECTID)
			pr_free_space_header(f, data, size);
		else
			print_unknown(f, key, data, size);
		break;
	case BTRFS_INODE_ITEM_KEY:
		pr_inode_item(f, data, size);
		break;
	case BTRFS_INODE_REF_KEY:
		pr_inode_ref(f, data, size);
		break;
	case BTRFS_INODE_EXTREF_KEY:
		pr_inode_extref(f, data, size);
		break;
	case BTRFS_DIR_ITEM_KEY:
	case BTRFS_DIR_INDEX_KEY:
	case BTRFS_XATTR_ITEM_KEY:
		pr_dir_item(f, data, size);
		break;
	case BTRFS_DIR_LOG_ITEM_KEY:
	case BTRFS_DIR_LOG_INDEX_KEY:
		pr_dir_log(f, data, size);
		break;
	case BTRFS_VERITY_DESC_ITEM_KEY:
	case BTRFS_VERITY_MERKLE_ITEM_KEY:
		pr_verity(f, key, data, size);
		break;
	case BTRFS_ORPHAN_ITEM_KEY:
		fputs("\t\torphan item\n", f);
		break;
	case BTRFS_EXTENT_DATA_KEY:
		pr_file_extent(f, data, size);
		break;
	case PR_OLD_CSUM_ITEM_KEY:
		fputs("\t\tcsum item\n", f);
		break;
	case BTRFS_EXTENT_CSUM_KEY:
		pr_extent_csum(f, key, data, size, ctx);
		break;
	case BTRFS_ROOT_ITEM_KEY:
		pr_root_item(f, data, size);
		break;
	case BTRFS_ROOT_REF_KEY:
		pr_root_ref(f, data, size, "ref");
		break;
	case BTRFS_ROOT_BACKREF_KEY:
		pr_root_ref(f, data, size, "backref");
		break;
	case BTRFS_EXTENT_ITEM_KEY:
	case BTRFS_METADATA_ITEM_KEY:
		pr_extent_item(f, key, data, size);
		break;
	case BTRFS_TREE_BLOCK_REF_KEY:
		fputs("\t\ttree block backref\n", f);
		break;
	case BTRFS_SHARED_BLOCK_REF_KEY:
		fputs("\t\tshared block backref\n", f);
		break;
	case BTRFS_EXTENT_DATA_REF_KEY:
		pr_extent_data_ref(f, data, size);
		break;
	case BTRFS_SHARED_DATA_REF_KEY:
		pr_shared_data_ref(f, data, size);
		break;
	case BTRFS_EXTENT_REF_V0_KEY:
		fputs("\t\textent ref v0 (deprecated)\n", f);
		break;
	case BTRFS_BLOCK_GROUP_ITEM_KEY:
		pr_block_group(f, data, size);
		break;
	case BTRFS_FREE_SPACE_INFO_KEY:
		pr_free_space_info(f, data, size);
		break;
	case BTRFS_FREE_SPACE_EXTENT_KEY:
		fputs("\t\tfree space extent\n", f);
		break;
	case BTRFS_FREE_SPACE_BITMAP_KEY:
		fputs("\t\tfree space bitmap\n", f);
		break;
	case BTRFS_DEV_EXTENT_KEY:
		pr_dev_extent(f, data, size);
		break;
	case BTRFS_DEV_ITEM_KEY:
		pr_dev_item(f, data, size);
		break;
	case BTRFS_CHUNK_ITEM_KEY:
		pr_chunk(f, data, size);
		break;
	case BTRFS_RAID_STRIPE_KEY:
		pr_raid_stripe(f, data, size);
		break;
	case BTRFS_QGROUP_STATUS_KEY:
		pr_qgroup_status(f, data, size);
		break;
	case BTRFS_QGROUP_INFO_KEY:
		pr_qgroup_info(f, data, size);
		break;
	case BTRFS_QGROUP_LIMIT_KEY:
		pr_qgroup_limit(f, data, size);
		break;
	case BTRFS_QGROUP_RELATION_KEY:
		break; /* the key says it all */
	case BTRFS_TEMPORARY_ITEM_KEY:
		pr_temporary_item(f, key, data, size);
		break;
	case BTRFS_PERSISTENT_ITEM_KEY:
		pr_persistent_item(f, key, data, size);
		break;
	case BTRFS_DEV_REPLACE_KEY:
		pr_dev_replace(f, data, size);
		break;
	case BTRFS_UUID_KEY_SUBVOL:
	case BTRFS_UUID_KEY_RECEIVED_SUBVOL:
		pr_uuid_item(f, data, size);
		break;
	case BTRFS_STRING_ITEM_KEY:
		print_string_item(f, data, size);
		break;
	default:
		print_unknown(f, key, data, size);
		break;
	}
}
