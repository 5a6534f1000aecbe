/* SPDX-License-Identifier: MIT */
/*
 * Superblock printing in the layout of `btrfs inspect-internal dump-super`:
 * the fields with readable flag names, the checksum verdict, and with `full`
 * the system chunk array and the backup roots.
 */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "print_priv.h"

/* Newer than the installed UAPI header. */
#define PR_SUPER_FLAG_CHANGING_BG_TREE (1ULL << 38)
#define PR_SUPER_FLAG_CHANGING_DATA_CSUM (1ULL << 39)
#define PR_SUPER_FLAG_CHANGING_META_CSUM (1ULL << 40)

#define DISK_KEY_SIZE UB_DISK_KEY_SIZE
#define CHUNK_HDR ((uint32_t)offsetof(struct btrfs_chunk, stripe))

struct flag_name {
	uint64_t bit;
	const char *name;
};

/* In btrfs-progs' order, which is not quite bit order. */
static const struct flag_name super_flags[] = {
	{ BTRFS_HEADER_FLAG_WRITTEN, "WRITTEN" },
	{ BTRFS_HEADER_FLAG_RELOC, "RELOC" },
	{ BTRFS_SUPER_FLAG_ERROR, "ERROR" },
	{ BTRFS_SUPER_FLAG_CHANGING_FSID, "CHANGING_FSID" },
	{ BTRFS_SUPER_FLAG_SEEDING, "SEEDING" },
	{ BTRFS_SUPER_FLAG_METADUMP, "METADUMP" },
	{ BTRFS_SUPER_FLAG_METADUMP_V2, "METADUMP_V2" },
	{ BTRFS_SUPER_FLAG_CHANGING_FSID_V2, "CHANGING_FSID_V2" },
	{ PR_SUPER_FLAG_CHANGING_BG_TREE, "CHANGING_BG_TREE" },
	{ PR_SUPER_FLAG_CHANGING_DATA_CSUM, "CHANGING_DATA_CSUM" },
	{ PR_SUPER_FLAG_CHANGING_META_CSUM, "CHANGING_META_CSUM" },
};

static const struct flag_name compat_ro_flags[] = {
	{ BTRFS_FEATURE_COMPAT_RO_FREE_SPACE_TREE, "FREE_SPACE_TREE" },
	{ BTRFS_FEATURE_COMPAT_RO_FREE_SPACE_TREE_VALID, "FREE_SPACE_TREE_VALID" },
	{ BTRFS_FEATURE_COMPAT_RO_VERITY, "VERITY" },
	{ BTRFS_FEATURE_COMPAT_RO_BLOCK_GROUP_TREE, "BLOCK_GROUP_TREE" },
};

static const struct flag_name incompat_flags[] = {
	{ BTRFS_FEATURE_INCOMPAT_MIXED_BACKREF, "MIXED_BACKREF" },
	{ BTRFS_FEATURE_INCOMPAT_DEFAULT_SUBVOL, "DEFAULT_SUBVOL" },
	{ BTRFS_FEATURE_INCOMPAT_MIXED_GROUPS, "MIXED_GROUPS" },
	{ BTRFS_FEATURE_INCOMPAT_COMPRESS_LZO, "COMPRESS_LZO" },
	{ BTRFS_FEATURE_INCOMPAT_COMPRESS_ZSTD, "COMPRESS_ZSTD" },
	{ BTRFS_FEATURE_INCOMPAT_BIG_METADATA, "BIG_METADATA" },
	{ BTRFS_FEATURE_INCOMPAT_EXTENDED_IREF, "EXTENDED_IREF" },
	{ BTRFS_FEATURE_INCOMPAT_RAID56, "RAID56" },
	{ BTRFS_FEATURE_INCOMPAT_SKINNY_METADATA, "SKINNY_METADATA" },
	{ BTRFS_FEATURE_INCOMPAT_NO_HOLES, "NO_HOLES" },
	{ BTRFS_FEATURE_INCOMPAT_METADATA_UUID, "METADATA_UUID" },
	{ BTRFS_FEATURE_INCOMPAT_RAID1C34, "RAID1C34" },
	{ BTRFS_FEATURE_INCOMPAT_ZONED, "ZONED" },
	{ BTRFS_FEATURE_INCOMPAT_EXTENT_TREE_V2, "EXTENT_TREE_V2" },
	{ BTRFS_FEATURE_INCOMPAT_RAID_STRIPE_TREE, "RAID_STRIPE_TREE" },
	{ BTRFS_FEATURE_INCOMPAT_SIMPLE_QUOTA, "SIMPLE_QUOTA" },
};

/* The "( A |\n  B )" block under a flags field; nothing for 0. */
static void print_flag_names(FILE *f, uint64_t flags, const struct flag_name *names, size_t n)
{
	uint64_t rest = flags;
	bool first = true;

	if (!flags)
		return;
	fputs("\t\t\t( ", f);
	for (size_t i = 0; i < n; i++) {
		if (!(flags & names[i].bit))
			continue;
		fprintf(f, "%s%s ", first ? "" : "|\n\t\t\t  ", names[i].name);
		rest &= ~names[i].bit;
		first = false;
	}
	if (rest)
		fprintf(f, "%sunknown flag: 0x%llx ", first ? "" : "|\n\t\t\t  ", (unsigned long long)rest);
	fputs(")\n", f);
}

/* btrfs-progs' spelling of the checksum names, which differs from the kernel's for blake2. */
static const char *csum_type_name(unsigned type)
{
	static const char *const names[] = {
		[BTRFS_CSUM_TYPE_CRC32] = "crc32c",
		[BTRFS_CSUM_TYPE_XXHASH] = "xxhash64",
		[BTRFS_CSUM_TYPE_SHA256] = "sha256",
		[BTRFS_CSUM_TYPE_BLAKE2] = "blake2",
	};

	return type < sizeof(names) / sizeof(names[0]) ? names[type] : NULL;
}

static void print_csum(FILE *f, const uint8_t *sb, unsigned csum_type)
{
	unsigned csum_size = csum_type_name(csum_type) ? ub_csum_size(csum_type) : 0;
	uint8_t calc[UB_CSUM_SIZE_MAX];
	const char *verdict;

	if (csum_size == 0 || csum_size > UB_CSUM_SIZE_MAX) {
		csum_size = UB_CSUM_SIZE_MAX;
		verdict = " [UNKNOWN CSUM TYPE OR SIZE]";
	} else if (ub_csum(csum_type, sb + UB_CSUM_SIZE_MAX, UB_SUPER_INFO_SIZE - UB_CSUM_SIZE_MAX, calc) != 0) {
		verdict = " [UNKNOWN CSUM TYPE OR SIZE]";
	} else {
		verdict = memcmp(calc, sb, csum_size) == 0 ? " [match]" : " [DON'T MATCH]";
	}
	fprintf(f, "csum_type\t\t%u (%s)\n", csum_type, csum_type_name(csum_type) ? csum_type_name(csum_type) : "INVALID");
	fprintf(f, "csum_size\t\t%u\n", csum_size);
	fputs("csum\t\t\t0x", f);
	for (unsigned i = 0; i < csum_size; i++)
		fprintf(f, "%02x", sb[i]);
	fprintf(f, "%s\n", verdict);
}

/* Text fields: printable bytes as they are, anything else as '.', as btrfs-progs does. */
static void print_dotted(FILE *f, const uint8_t *p, size_t max)
{
	for (size_t i = 0; i < max && p[i]; i++)
		fputc(isprint(p[i]) ? p[i] : '.', f);
}

static void print_dev_item_fields(FILE *f, const uint8_t *sb, bool metadata_uuid)
{
	const uint8_t *di = UB_PTR(ub_disk_super, dev_item, sb);
	const uint8_t *want = metadata_uuid ? UB_PTR(ub_disk_super, metadata_uuid, sb) : UB_PTR(ub_disk_super, fsid, sb);
	char uuid[PR_UUID_STR_LEN];

	pr_uuid_str(uuid, UB_PTR(btrfs_dev_item, uuid, di));
	fprintf(f, "dev_item.uuid\t\t%s\n", uuid);
	pr_uuid_str(uuid, UB_PTR(btrfs_dev_item, fsid, di));
	fprintf(f, "dev_item.fsid\t\t%s %s\n", uuid,
		memcmp(UB_PTR(btrfs_dev_item, fsid, di), want, UB_FSID_SIZE) == 0 ? "[match]" : "[DON'T MATCH]");
	fprintf(f, "dev_item.type\t\t%llu\n", (unsigned long long)UB_GET(btrfs_dev_item, type, di));
	fprintf(f, "dev_item.total_bytes\t%llu\n", (unsigned long long)UB_GET(btrfs_dev_item, total_bytes, di));
	fprintf(f, "dev_item.bytes_used\t%llu\n", (unsigned long long)UB_GET(btrfs_dev_item, bytes_used, di));
	fprintf(f, "dev_item.io_align\t%u\n", (unsigned)UB_GET(btrfs_dev_item, io_align, di));
	fprintf(f, "dev_item.io_width\t%u\n", (unsigned)UB_GET(btrfs_dev_item, io_width, di));
	fprintf(f, "dev_item.sector_size\t%u\n", (unsigned)UB_GET(btrfs_dev_item, sector_size, di));
	fprintf(f, "dev_item.devid\t\t%llu\n", (unsigned long long)UB_GET(btrfs_dev_item, devid, di));
	fprintf(f, "dev_item.dev_group\t%u\n", (unsigned)UB_GET(btrfs_dev_item, dev_group, di));
	fprintf(f, "dev_item.seek_speed\t%u\n", (unsigned)UB_GET(btrfs_dev_item, seek_speed, di));
	fprintf(f, "dev_item.bandwidth\t%u\n", (unsigned)UB_GET(btrfs_dev_item, bandwidth, di));
	fprintf(f, "dev_item.generation\t%llu\n", (unsigned long long)UB_GET(btrfs_dev_item, generation, di));
}

static void print_sys_chunk_array(FILE *f, const uint8_t *sb)
{
	const uint8_t *array = UB_PTR(ub_disk_super, sys_chunk_array, sb);
	uint32_t array_size = (uint32_t)UB_GET(ub_disk_super, sys_chunk_array_size, sb);
	uint32_t cur = 0;

	fprintf(f, "sys_chunk_array[%u]:\n", UB_SYSTEM_CHUNK_ARRAY_SIZE);
	if (array_size > UB_SYSTEM_CHUNK_ARRAY_SIZE) {
		fprintf(f, "\tsys_array_size %u exceeds %u bytes\n", array_size, UB_SYSTEM_CHUNK_ARRAY_SIZE);
		return;
	}
	for (int item = 0; cur < array_size; item++) {
		struct ub_key key;
		uint32_t len;

		if (array_size - cur < DISK_KEY_SIZE)
			goto short_array;
		ub_key_read(&key, array + cur);
		fprintf(f, "\titem %d key ", item);
		ub_print_key(f, &key);
		fputc('\n', f);
		cur += DISK_KEY_SIZE;
		if (key.type != BTRFS_CHUNK_ITEM_KEY) {
			fprintf(f, "\tunexpected item type %u in sys_array at offset %u\n", key.type, cur);
			return;
		}
		if (array_size - cur < CHUNK_HDR)
			goto short_array;
		len = CHUNK_HDR + (uint32_t)UB_GET(btrfs_chunk, num_stripes, array + cur) *
					  (uint32_t)sizeof(struct btrfs_stripe);
		if (len == CHUNK_HDR) {
			fprintf(f, "\tinvalid number of stripes 0 in sys_array at offset %u\n", cur);
			return;
		}
		if (array_size - cur < len)
			goto short_array;
		pr_chunk(f, array + cur, len);
		cur += len;
	}
	return;
short_array:
	fprintf(f, "\tsys_array too short at offset %u (size %u)\n", cur, array_size);
}

static void print_backup_root(FILE *f, const uint8_t *b, bool extent_tree_v2)
{
	fprintf(f, "\t\tbackup_tree_root:\t%llu\tgen: %llu\tlevel: %u\n",
		(unsigned long long)UB_GET(ub_disk_root_backup, tree_root, b),
		(unsigned long long)UB_GET(ub_disk_root_backup, tree_root_gen, b),
		(unsigned)UB_GET(ub_disk_root_backup, tree_root_level, b));
	fprintf(f, "\t\tbackup_chunk_root:\t%llu\tgen: %llu\tlevel: %u\n",
		(unsigned long long)UB_GET(ub_disk_root_backup, chunk_root, b),
		(unsigned long long)UB_GET(ub_disk_root_backup, chunk_root_gen, b),
		(unsigned)UB_GET(ub_disk_root_backup, chunk_root_level, b));
	/* Extent tree v2 reuses the extent root slot for the block group root. */
	fprintf(f, "\t\t%s:\t%llu\tgen: %llu\tlevel: %u\n",
		extent_tree_v2 ? "backup_block_group_root" : "backup_extent_root",
		(unsigned long long)UB_GET(ub_disk_root_backup, extent_root, b),
		(unsigned long long)UB_GET(ub_disk_root_backup, extent_root_gen, b),
		(unsigned)UB_GET(ub_disk_root_backup, extent_root_level, b));
	fprintf(f, "\t\tbackup_fs_root:\t\t%llu\tgen: %llu\tlevel: %u\n",
		(unsigned long long)UB_GET(ub_disk_root_backup, fs_root, b),
		(unsigned long long)UB_GET(ub_disk_root_backup, fs_root_gen, b),
		(unsigned)UB_GET(ub_disk_root_backup, fs_root_level, b));
	fprintf(f, "\t\tbackup_dev_root:\t%llu\tgen: %llu\tlevel: %u\n",
		(unsigned long long)UB_GET(ub_disk_root_backup, dev_root, b),
		(unsigned long long)UB_GET(ub_disk_root_backup, dev_root_gen, b),
		(unsigned)UB_GET(ub_disk_root_backup, dev_root_level, b));
	fprintf(f, "\t\tcsum_root:\t%llu\tgen: %llu\tlevel: %u\n",
		(unsigned long long)UB_GET(ub_disk_root_backup, csum_root, b),
		(unsigned long long)UB_GET(ub_disk_root_backup, csum_root_gen, b),
		(unsigned)UB_GET(ub_disk_root_backup, csum_root_level, b));
	fprintf(f, "\t\tbackup_total_bytes:\t%llu\n", (unsigned long long)UB_GET(ub_disk_root_backup, total_bytes, b));
	fprintf(f, "\t\tbackup_bytes_used:\t%llu\n", (unsigned long long)UB_GET(ub_disk_root_backup, bytes_used, b));
	fprintf(f, "\t\tbackup_num_devices:\t%llu\n\n",
		(unsigned long long)UB_GET(ub_disk_root_backup, num_devices, b));
}

static void print_backup_roots(FILE *f, const uint8_t *sb, bool extent_tree_v2)
{
	fprintf(f, "backup_roots[%u]:\n", UB_NUM_BACKUP_ROOTS);
	for (unsigned i = 0; i < UB_NUM_BACKUP_ROOTS; i++) {
		const uint8_t *b = UB_PTR(ub_disk_super, super_roots, sb) + i * sizeof(struct ub_disk_root_backup);

		/* Slots never written are all zero; btrfs-progs skips them. */
		if (UB_GET(ub_disk_root_backup, tree_root, b) == 0 && UB_GET(ub_disk_root_backup, tree_root_gen, b) == 0)
			continue;
		fprintf(f, "\tbackup %u:\n", i);
		print_backup_root(f, b, extent_tree_v2);
	}
}

#define PR_U64(name, tabs, field) \
	fprintf(f, name tabs "%llu\n", (unsigned long long)UB_GET(ub_disk_super, field, sb))

void ub_print_super(FILE *f, const uint8_t *sb, bool full)
{
	uint64_t incompat = UB_GET(ub_disk_super, incompat_flags, sb);
	uint64_t flags = UB_GET(ub_disk_super, flags, sb);
	uint64_t compat_ro = UB_GET(ub_disk_super, compat_ro_flags, sb);
	bool metadata_uuid = incompat & BTRFS_FEATURE_INCOMPAT_METADATA_UUID;
	char uuid[PR_UUID_STR_LEN];

	print_csum(f, sb, (unsigned)UB_GET(ub_disk_super, csum_type, sb));
	PR_U64("bytenr", "\t\t\t", bytenr);
	fprintf(f, "flags\t\t\t0x%llx\n", (unsigned long long)flags);
	print_flag_names(f, flags, super_flags, sizeof(super_flags) / sizeof(super_flags[0]));
	fputs("magic\t\t\t", f);
	for (size_t i = 0; i < 8; i++) {
		uint8_t c = UB_PTR(ub_disk_super, magic, sb)[i];

		fputc(isprint(c) ? c : '.', f);
	}
	fputs(UB_GET(ub_disk_super, magic, sb) == UB_MAGIC ? " [match]\n" : " [DON'T MATCH]\n", f);
	pr_uuid_str(uuid, UB_PTR(ub_disk_super, fsid, sb));
	fprintf(f, "fsid\t\t\t%s\n", uuid);
	/* Without the feature the metadata uuid is the fsid. */
	if (metadata_uuid)
		pr_uuid_str(uuid, UB_PTR(ub_disk_super, metadata_uuid, sb));
	fprintf(f, "metadata_uuid\t\t%s\n", uuid);
	fputs("label\t\t\t", f);
	print_dotted(f, UB_PTR(ub_disk_super, label, sb), UB_LABEL_SIZE);
	fputc('\n', f);
	PR_U64("generation", "\t\t", generation);
	PR_U64("root", "\t\t\t", root);
	PR_U64("sys_array_size", "\t\t", sys_chunk_array_size);
	PR_U64("chunk_root_generation", "\t", chunk_root_generation);
	PR_U64("root_level", "\t\t", root_level);
	PR_U64("chunk_root", "\t\t", chunk_root);
	PR_U64("chunk_root_level", "\t", chunk_root_level);
	PR_U64("log_root", "\t\t", log_root);
	PR_U64("log_root_transid (deprecated)", "\t", unused_log_root_transid);
	PR_U64("log_root_level", "\t\t", log_root_level);
	PR_U64("total_bytes", "\t\t", total_bytes);
	PR_U64("bytes_used", "\t\t", bytes_used);
	PR_U64("sectorsize", "\t\t", sectorsize);
	PR_U64("nodesize", "\t\t", nodesize);
	PR_U64("leafsize (deprecated)", "\t", unused_leafsize);
	PR_U64("stripesize", "\t\t", stripesize);
	PR_U64("root_dir", "\t\t", root_dir_objectid);
	PR_U64("num_devices", "\t\t", num_devices);
	fprintf(f, "compat_flags\t\t0x%llx\n", (unsigned long long)UB_GET(ub_disk_super, compat_flags, sb));
	fprintf(f, "compat_ro_flags\t\t0x%llx\n", (unsigned long long)compat_ro);
	print_flag_names(f, compat_ro, compat_ro_flags, sizeof(compat_ro_flags) / sizeof(compat_ro_flags[0]));
	fprintf(f, "incompat_flags\t\t0x%llx\n", (unsigned long long)incompat);
	print_flag_names(f, incompat, incompat_flags, sizeof(incompat_flags) / sizeof(incompat_flags[0]));
	PR_U64("cache_generation", "\t", cache_generation);
	PR_U64("uuid_tree_generation", "\t", uuid_tree_generation);
	if (incompat & BTRFS_FEATURE_INCOMPAT_EXTENT_TREE_V2)
		PR_U64("nr_global_roots", "\t", nr_global_roots);
	/* btrfs-progs shows the device item in the short form too. */
	print_dev_item_fields(f, sb, metadata_uuid);
	if (!full)
		return;
	print_sys_chunk_array(f, sb);
	print_backup_roots(f, sb, incompat & BTRFS_FEATURE_INCOMPAT_EXTENT_TREE_V2);
}
