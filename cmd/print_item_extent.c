/* SPDX-License-Identifier: MIT */
/*
 * Decoders for extent-tree items (extent and metadata items with their inline
 * back references, keyed back references, block groups) and for the
 * free-space and raid-stripe trees.
 */
#include <stdio.h>
#include <string.h>

#include "print_priv.h"

#define EXTENT_ITEM_SIZE ((uint32_t)sizeof(struct btrfs_extent_item))
#define TREE_BLOCK_INFO_SIZE ((uint32_t)sizeof(struct btrfs_tree_block_info))
#define INLINE_REF_SIZE ((uint32_t)sizeof(struct btrfs_extent_inline_ref))
/* The data ref replaces the inline ref's offset field, so only the type byte precedes it. */
#define INLINE_DATA_REF_SIZE ((uint32_t)(1 + sizeof(struct btrfs_extent_data_ref)))
#define INLINE_SHARED_DATA_REF_SIZE ((uint32_t)(INLINE_REF_SIZE + sizeof(struct btrfs_shared_data_ref)))

static void extent_flags_str(char *out, size_t n, uint64_t flags)
{
	/* Same spelling as btrfs-progs, including the bare "|FULL_BACKREF". */
	snprintf(out, n, "%s%s%s%s", (flags & BTRFS_EXTENT_FLAG_DATA) ? "DATA" : "",
		 (flags & BTRFS_EXTENT_FLAG_DATA) && (flags & BTRFS_EXTENT_FLAG_TREE_BLOCK) ? "|" : "",
		 (flags & BTRFS_EXTENT_FLAG_TREE_BLOCK) ? "TREE_BLOCK" : "",
		 (flags & BTRFS_BLOCK_FLAG_FULL_BACKREF) ? "|FULL_BACKREF" : "");
}

/* Size of an inline reference of `type`, or 0 for a type that cannot be inline. */
static uint32_t inline_ref_size(unsigned type)
{
	switch (type) {
	case BTRFS_TREE_BLOCK_REF_KEY:
	case BTRFS_SHARED_BLOCK_REF_KEY:
	case BTRFS_EXTENT_OWNER_REF_KEY:
		return INLINE_REF_SIZE;
	case BTRFS_EXTENT_DATA_REF_KEY:
		return INLINE_DATA_REF_SIZE;
	case BTRFS_SHARED_DATA_REF_KEY:
		return INLINE_SHARED_DATA_REF_SIZE;
	default:
		return 0;
	}
}

static void print_data_ref(FILE *f, const uint8_t *dref)
{
	fputs("\t\textent data backref root ", f);
	pr_objectid(f, UB_GET(btrfs_extent_data_ref, root, dref), 0);
	fprintf(f, " objectid %llu offset %llu count %u\n",
		(unsigned long long)UB_GET(btrfs_extent_data_ref, objectid, dref),
		(unsigned long long)UB_GET(btrfs_extent_data_ref, offset, dref),
		(unsigned)UB_GET(btrfs_extent_data_ref, count, dref));
}

static void print_inline_ref(FILE *f, unsigned type, const uint8_t *iref)
{
	uint64_t offset = UB_GET(btrfs_extent_inline_ref, offset, iref);

	switch (type) {
	case BTRFS_TREE_BLOCK_REF_KEY:
		fputs("\t\ttree block backref root ", f);
		pr_objectid(f, offset, 0);
		fputc('\n', f);
		break;
	case BTRFS_SHARED_BLOCK_REF_KEY:
		fprintf(f, "\t\tshared block backref parent %llu\n", (unsigned long long)offset);
		break;
	case BTRFS_EXTENT_DATA_REF_KEY:
		print_data_ref(f, UB_PTR(btrfs_extent_inline_ref, offset, iref));
		break;
	case BTRFS_SHARED_DATA_REF_KEY:
		fprintf(f, "\t\tshared data backref parent %llu count %u\n", (unsigned long long)offset,
			(unsigned)UB_GET(btrfs_shared_data_ref, count, iref + INLINE_REF_SIZE));
		break;
	case BTRFS_EXTENT_OWNER_REF_KEY:
		fprintf(f, "\t\textent owner root %llu\n", (unsigned long long)offset);
		break;
	default:
		break;
	}
}

void pr_extent_item(FILE *f, const struct ub_key *key, const uint8_t *p, uint32_t size)
{
	char flags_str[48];
	uint64_t flags;
	uint32_t cur;

	/* Also catches the pre-2.6.31 v0 items (4 bytes, refs only). */
	if (size < EXTENT_ITEM_SIZE)
		goto short_item;
	flags = UB_GET(btrfs_extent_item, flags, p);
	extent_flags_str(flags_str, sizeof(flags_str), flags);
	fprintf(f, "\t\trefs %llu gen %llu flags %s\n", (unsigned long long)UB_GET(btrfs_extent_item, refs, p),
		(unsigned long long)UB_GET(btrfs_extent_item, generation, p), flags_str);
	cur = EXTENT_ITEM_SIZE;

	if (key->type == BTRFS_METADATA_ITEM_KEY) {
		/* Skinny items keep the level in the key; btrfs-progs shows it as an int. */
		fprintf(f, "\t\ttree block skinny level %d\n", (int)key->offset);
	} else if (flags & BTRFS_EXTENT_FLAG_TREE_BLOCK) {
		const uint8_t *info = p + cur;

		if (size - cur < TREE_BLOCK_INFO_SIZE)
			goto short_item;
		fputs("\t\ttree block ", f);
		pr_disk_key(f, UB_PTR(btrfs_tree_block_info, key, info));
		fprintf(f, " level %u\n", (unsigned)UB_GET(btrfs_tree_block_info, level, info));
		cur += TREE_BLOCK_INFO_SIZE;
	}

	while (cur < size) {
		unsigned type = p[cur];
		uint32_t len = inline_ref_size(type);

		if (len == 0) {
			fprintf(f, "\t\t(unknown inline ref type %u at offset %u)\n", type, cur);
			return;
		}
		if (size - cur < len)
			goto short_item;
		print_inline_ref(f, type, p + cur);
		cur += len;
	}
	return;
short_item:
	pr_short(f, size);
}

void pr_extent_data_ref(FILE *f, const uint8_t *p, uint32_t size)
{
	if (size < sizeof(struct btrfs_extent_data_ref)) {
		pr_short(f, size);
		return;
	}
	print_data_ref(f, p);
}

void pr_shared_data_ref(FILE *f, const uint8_t *p, uint32_t size)
{
	if (size < sizeof(struct btrfs_shared_data_ref)) {
		pr_short(f, size);
		return;
	}
	fprintf(f, "\t\tshared data backref count %u\n", (unsigned)UB_GET(btrfs_shared_data_ref, count, p));
}

void pr_block_group(FILE *f, const uint8_t *p, uint32_t size)
{
	char flags_str[PR_FLAGS_STR_LEN];

	if (size < sizeof(struct btrfs_block_group_item)) {
		pr_short(f, size);
		return;
	}
	pr_bg_flags_str(flags_str, sizeof(flags_str), UB_GET(btrfs_block_group_item, flags, p));
	fprintf(f, "\t\tblock group used %llu chunk_objectid %llu flags %s\n",
		(unsigned long long)UB_GET(btrfs_block_group_item, used, p),
		(unsigned long long)UB_GET(btrfs_block_group_item, chunk_objectid, p), flags_str);
}

void pr_free_space_info(FILE *f, const uint8_t *p, uint32_t size)
{
	if (size < sizeof(struct btrfs_free_space_info)) {
		pr_short(f, size);
		return;
	}
	fprintf(f, "\t\tfree space info extent count %u flags %u\n",
		(unsigned)UB_GET(btrfs_free_space_info, extent_count, p),
		(unsigned)UB_GET(btrfs_free_space_info, flags, p));
}

void pr_raid_stripe(FILE *f, const uint8_t *p, uint32_t size)
{
	const uint32_t stride = (uint32_t)sizeof(struct ub_disk_raid_stride);
	uint32_t n = size / stride;

	for (uint32_t i = 0; i < n; i++) {
		const uint8_t *s = p + (size_t)i * stride;

		fprintf(f, "\t\t\tstride %u devid %llu physical %llu\n", i,
			(unsigned long long)UB_GET(ub_disk_raid_stride, devid, s),
			(unsigned long long)UB_GET(ub_disk_raid_stride, physical, s));
	}
	if (size % stride)
		pr_short(f, size);
}
