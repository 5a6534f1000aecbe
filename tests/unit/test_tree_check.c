/* SPDX-License-Identifier: MIT */
/*
 * Tree-checker tests: valid leaves and nodes built in memory must pass, and
 * each rule, broken on its own, must be refused with -EUCLEAN and a reason
 * that names it.
 *
 * Set UB_TREE_CHECK_IMAGES to a colon-separated list of btrfs image files to
 * also scan them for tree blocks (every sector whose header carries the
 * image's fsid and a valid checksum) and require the checker to accept every
 * one: the "no false positives" oracle against mkfs.btrfs and the kernel.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "tree/tree_check.h"

#define NS_MAX 65536

/* ---- builders --------------------------------------------------------------- */

struct blk {
	uint8_t buf[NS_MAX];
	struct ub_check_ctx ctx;
	uint32_t data_end; /* lowest item data offset so far, relative to the end of the header */
	char why[512];
};

static void ctx_init(struct ub_check_ctx *ctx, uint32_t nodesize)
{
	memset(ctx, 0, sizeof(*ctx));
	ctx->nodesize = nodesize;
	ctx->sectorsize = 4096;
	ctx->csum_size = 4;
	ctx->incompat_flags = BTRFS_FEATURE_INCOMPAT_MIXED_BACKREF | BTRFS_FEATURE_INCOMPAT_SKINNY_METADATA |
			      BTRFS_FEATURE_INCOMPAT_EXTENDED_IREF | BTRFS_FEATURE_INCOMPAT_NO_HOLES;
}

static void blk_init(struct blk *b, uint32_t nodesize, uint64_t owner, uint8_t level)
{
	memset(b, 0, sizeof(*b));
	ctx_init(&b->ctx, nodesize);
	b->ctx.owner = owner;
	b->data_end = nodesize - UB_HEADER_SIZE;
	UB_SET(ub_disk_header, bytenr, b->buf, 30408704);
	UB_SET(ub_disk_header, flags, b->buf, BTRFS_HEADER_FLAG_WRITTEN | (1ULL << 56) /* mixed backref rev */);
	UB_SET(ub_disk_header, generation, b->buf, 7);
	UB_SET(ub_disk_header, owner, b->buf, owner);
	UB_SET(ub_disk_header, level, b->buf, level);
}

static uint32_t nritems(const struct blk *b)
{
	return (uint32_t)UB_GET(ub_disk_header, nritems, b->buf);
}

static uint8_t *item_hdr(struct blk *b, uint32_t slot)
{
	return b->buf + UB_HEADER_SIZE + slot * UB_ITEM_SIZE;
}

/* Append an item (keys must come in order) with `size` bytes of data; returns the data to fill. */
static uint8_t *add(struct blk *b, uint64_t objectid, uint8_t type, uint64_t offset, uint32_t size)
{
	uint32_t n = nritems(b);
	struct ub_key k = { objectid, type, offset };
	uint8_t *it = item_hdr(b, n);

	assert_true(b->data_end >= size);
	b->data_end -= size;
	assert_true(b->data_end >= (n + 1) * UB_ITEM_SIZE);
	ub_key_write(it, &k);
	UB_SET(ub_disk_item, offset, it, b->data_end);
	UB_SET(ub_disk_item, size, it, size);
	UB_SET(ub_disk_header, nritems, b->buf, n + 1);
	return b->buf + UB_HEADER_SIZE + b->data_end;
}

static uint8_t *item_data(struct blk *b, uint32_t slot, uint32_t *size)
{
	uint8_t *it = item_hdr(b, slot);
	if (size)
		*size = (uint32_t)UB_GET(ub_disk_item, size, it);
	return b->buf + UB_HEADER_SIZE + UB_GET(ub_disk_item, offset, it);
}

static void set_item_key(struct blk *b, uint32_t slot, uint64_t objectid, uint8_t type, uint64_t offset)
{
	struct ub_key k = { objectid, type, offset };
	ub_key_write(item_hdr(b, slot), &k);
}

static void add_ptr(struct blk *b, uint64_t objectid, uint8_t type, uint64_t offset, uint64_t blockptr, uint64_t gen)
{
	uint32_t n = nritems(b);
	uint8_t *p = b->buf + UB_HEADER_SIZE + n * UB_KEY_PTR_SIZE;
	struct ub_key k = { objectid, type, offset };

	ub_key_write(p, &k);
	UB_SET(ub_disk_key_ptr, blockptr, p, blockptr);
	UB_SET(ub_disk_key_ptr, generation, p, gen);
	UB_SET(ub_disk_header, nritems, b->buf, n + 1);
}

static int check(struct blk *b)
{
	b->why[0] = 0;
	return ub_tree_check_block(b->buf, &b->ctx, b->why, sizeof(b->why));
}

static void expect_ok(struct blk *b)
{
	int ret = check(b);
	if (ret)
		print_error("unexpected failure: %s\n", b->why);
	assert_int_equal(ret, 0);
}

static void expect_bad(struct blk *b, const char *substr)
{
	int ret = check(b);
	if (ret != -EUCLEAN || !strstr(b->why, substr))
		print_error("ret %d, message \"%s\", wanted \"%s\"\n", ret, b->why, substr);
	assert_int_equal(ret, -EUCLEAN);
	assert_non_null(strstr(b->why, substr));
}

static uint8_t *add_inode(struct blk *b, uint64_t ino, uint32_t mode, uint32_t nlink)
{
	uint8_t *d = add(b, ino, BTRFS_INODE_ITEM_KEY, 0, sizeof(struct btrfs_inode_item));
	UB_SET(btrfs_inode_item, generation, d, 5);
	UB_SET(btrfs_inode_item, transid, d, 6);
	UB_SET(btrfs_inode_item, mode, d, mode);
	UB_SET(btrfs_inode_item, nlink, d, nlink);
	return d;
}

static uint8_t *add_inode_ref(struct blk *b, uint64_t ino, uint64_t parent, uint64_t index, const char *name)
{
	uint32_t len = (uint32_t)strlen(name);
	uint8_t *d = add(b, ino, BTRFS_INODE_REF_KEY, parent, (uint32_t)sizeof(struct btrfs_inode_ref) + len);
	UB_SET(btrfs_inode_ref, index, d, index);
	UB_SET(btrfs_inode_ref, name_len, d, len);
	memcpy(d + sizeof(struct btrfs_inode_ref), name, len);
	return d;
}

/* One dir entry (header + name + data) at `d`; returns its length. */
static uint32_t put_dir_entry(uint8_t *d, const struct ub_key *loc, uint8_t type, const char *name, const char *data)
{
	uint32_t nl = (uint32_t)strlen(name), dl = data ? (uint32_t)strlen(data) : 0;

	ub_key_write(d + offsetof(struct btrfs_dir_item, location), loc);
	UB_SET(btrfs_dir_item, transid, d, 6);
	UB_SET(btrfs_dir_item, data_len, d, dl);
	UB_SET(btrfs_dir_item, name_len, d, nl);
	UB_SET(btrfs_dir_item, type, d, type);
	memcpy(d + sizeof(struct btrfs_dir_item), name, nl);
	if (dl)
		memcpy(d + sizeof(struct btrfs_dir_item) + nl, data, dl);
	return (uint32_t)sizeof(struct btrfs_dir_item) + nl + dl;
}

static uint32_t entry_len(const char *name, const char *data)
{
	return (uint32_t)(sizeof(struct btrfs_dir_item) + strlen(name) + (data ? strlen(data) : 0));
}

static uint8_t *add_dir(struct blk *b, uint64_t dir, uint8_t ktype, uint64_t index, uint64_t target, uint8_t ftype,
			const char *name)
{
	struct ub_key loc = { target, BTRFS_INODE_ITEM_KEY, 0 };
	uint64_t off = ktype == BTRFS_DIR_INDEX_KEY ? index : ub_name_hash(name, strlen(name));
	uint8_t *d = add(b, dir, ktype, off, entry_len(name, NULL));
	put_dir_entry(d, &loc, ftype, name, NULL);
	return d;
}

static uint8_t *add_xattr(struct blk *b, uint64_t ino, const char *name, const char *value)
{
	struct ub_key loc = { 0, 0, 0 };
	uint8_t *d = add(b, ino, BTRFS_XATTR_ITEM_KEY, ub_name_hash(name, strlen(name)), entry_len(name, value));
	put_dir_entry(d, &loc, BTRFS_FT_XATTR, name, value);
	return d;
}

static uint8_t *add_inline_extent(struct blk *b, uint64_t ino, const char *text)
{
	uint32_t len = (uint32_t)strlen(text);
	uint8_t *d = add(b, ino, BTRFS_EXTENT_DATA_KEY, 0, UB_FILE_EXTENT_INLINE_DATA_START + len);
	UB_SET(btrfs_file_extent_item, generation, d, 6);
	UB_SET(btrfs_file_extent_item, ram_bytes, d, len);
	UB_SET(btrfs_file_extent_item, type, d, BTRFS_FILE_EXTENT_INLINE);
	memcpy(d + UB_FILE_EXTENT_INLINE_DATA_START, text, len);
	return d;
}

static uint8_t *add_reg_extent(struct blk *b, uint64_t ino, uint64_t foff, uint64_t disk, uint64_t len)
{
	uint8_t *d = add(b, ino, BTRFS_EXTENT_DATA_KEY, foff, sizeof(struct btrfs_file_extent_item));
	UB_SET(btrfs_file_extent_item, generation, d, 6);
	UB_SET(btrfs_file_extent_item, ram_bytes, d, len);
	UB_SET(btrfs_file_extent_item, type, d, BTRFS_FILE_EXTENT_REG);
	UB_SET(btrfs_file_extent_item, disk_bytenr, d, disk);
	UB_SET(btrfs_file_extent_item, disk_num_bytes, d, disk ? len : 0);
	UB_SET(btrfs_file_extent_item, num_bytes, d, len);
	return d;
}

/* A subvolume leaf with one of everything a file tree holds. */
static void build_fs_leaf(struct blk *b, uint32_t nodesize)
{
	blk_init(b, nodesize, BTRFS_FS_TREE_OBJECTID, 0);
	add_inode(b, 256, S_IFDIR | 0755, 1);
	add_inode_ref(b, 256, 256, 0, "..");
	add_dir(b, 256, BTRFS_DIR_ITEM_KEY, 0, 257, BTRFS_FT_REG_FILE, "hello.txt");
	add_dir(b, 256, BTRFS_DIR_INDEX_KEY, 2, 257, BTRFS_FT_REG_FILE, "hello.txt");
	add_dir(b, 256, BTRFS_DIR_INDEX_KEY, 3, 258, BTRFS_FT_REG_FILE, "big");
	add_inode(b, 257, S_IFREG | 0644, 1);
	add_inode_ref(b, 257, 256, 2, "hello.txt");
	add_xattr(b, 257, "user.color", "blue");
	add_inline_extent(b, 257, "hello world\n");
	add_inode(b, 258, S_IFREG | 0600, 1);
	add_inode_ref(b, 258, 256, 3, "big");
	add_reg_extent(b, 258, 0, 13631488, 8192);
	add_reg_extent(b, 258, 8192, 0, 4096); /* a hole */
	add_reg_extent(b, 258, 12288, 13639680, 4096);
}

static uint8_t *add_extent(struct blk *b, uint64_t bytenr, uint64_t len, uint64_t refs, uint64_t flags,
			   uint32_t extra)
{
	uint8_t *d = add(b, bytenr, BTRFS_EXTENT_ITEM_KEY, len, (uint32_t)sizeof(struct btrfs_extent_item) + extra);
	UB_SET(btrfs_extent_item, refs, d, refs);
	UB_SET(btrfs_extent_item, generation, d, 6);
	UB_SET(btrfs_extent_item, flags, d, flags);
	return d + sizeof(struct btrfs_extent_item);
}

/* Inline EXTENT_DATA_REF at `p`; returns its size. */
static uint32_t put_data_ref(uint8_t *p, uint64_t root, uint64_t oid, uint64_t off, uint32_t count)
{
	uint8_t *dr = p + offsetof(struct btrfs_extent_inline_ref, offset);
	p[0] = BTRFS_EXTENT_DATA_REF_KEY;
	UB_SET(btrfs_extent_data_ref, root, dr, root);
	UB_SET(btrfs_extent_data_ref, objectid, dr, oid);
	UB_SET(btrfs_extent_data_ref, offset, dr, off);
	UB_SET(btrfs_extent_data_ref, count, dr, count);
	return 29;
}

static uint32_t put_simple_ref(uint8_t *p, uint8_t type, uint64_t off)
{
	UB_SET(btrfs_extent_inline_ref, type, p, type);
	UB_SET(btrfs_extent_inline_ref, offset, p, off);
	return 9;
}

static void build_extent_leaf(struct blk *b)
{
	uint8_t *p;

	blk_init(b, 16384, BTRFS_EXTENT_TREE_OBJECTID, 0);
	/* data extent referenced by two files and one shared parent */
	p = add_extent(b, 13631488, 8192, 3, BTRFS_EXTENT_FLAG_DATA, 29 + 13);
	p += put_data_ref(p, 5, 258, 0, 2);
	p += put_simple_ref(p, BTRFS_SHARED_DATA_REF_KEY, 30425088);
	UB_SET(btrfs_shared_data_ref, count, p, 1);
	p = add(b, 13631488, BTRFS_EXTENT_DATA_REF_KEY, ub_extent_data_ref_hash(5, 259, 0),
		sizeof(struct btrfs_extent_data_ref));
	UB_SET(btrfs_extent_data_ref, root, p, 5);
	UB_SET(btrfs_extent_data_ref, objectid, p, 259);
	UB_SET(btrfs_extent_data_ref, count, p, 1);
	add(b, 13631488, BTRFS_SHARED_DATA_REF_KEY, 30441472, 4);
	p = add(b, 22020096, BTRFS_BLOCK_GROUP_ITEM_KEY, 8388608, sizeof(struct btrfs_block_group_item));
	UB_SET(btrfs_block_group_item, used, p, 65536);
	UB_SET(btrfs_block_group_item, chunk_objectid, p, BTRFS_FIRST_CHUNK_TREE_OBJECTID);
	UB_SET(btrfs_block_group_item, flags, p, BTRFS_BLOCK_GROUP_METADATA | BTRFS_BLOCK_GROUP_DUP);
	/* skinny tree block with two inline refs in type order */
	p = add(b, 30408704, BTRFS_METADATA_ITEM_KEY, 0, (uint32_t)sizeof(struct btrfs_extent_item) + 18);
	UB_SET(btrfs_extent_item, refs, p, 2);
	UB_SET(btrfs_extent_item, flags, p, BTRFS_EXTENT_FLAG_TREE_BLOCK);
	p += sizeof(struct btrfs_extent_item);
	p += put_simple_ref(p, BTRFS_TREE_BLOCK_REF_KEY, 5);
	put_simple_ref(p, BTRFS_SHARED_BLOCK_REF_KEY, 30474240);
	add(b, 30408704, BTRFS_TREE_BLOCK_REF_KEY, 7, 0);
	add(b, 30408704, BTRFS_SHARED_BLOCK_REF_KEY, 30490624, 0);
	/* a non-skinny tree block: extent item + tree_block_info + ref */
	p = add_extent(b, 30425088, 16384, 1, BTRFS_EXTENT_FLAG_TREE_BLOCK, 18 + 9);
	UB_SET(btrfs_tree_block_info, level, p, 1);
	put_simple_ref(p + 18, BTRFS_TREE_BLOCK_REF_KEY, 2);
}

static uint8_t *add_chunk(struct blk *b, uint64_t logical, uint64_t type, uint16_t stripes, uint16_t sub)
{
	uint32_t size = 48 + 32U * stripes;
	uint8_t *d = add(b, BTRFS_FIRST_CHUNK_TREE_OBJECTID, BTRFS_CHUNK_ITEM_KEY, logical, size);
	UB_SET(btrfs_chunk, length, d, 8388608);
	UB_SET(btrfs_chunk, owner, d, BTRFS_EXTENT_TREE_OBJECTID);
	UB_SET(btrfs_chunk, stripe_len, d, UB_STRIPE_LEN);
	UB_SET(btrfs_chunk, type, d, type);
	UB_SET(btrfs_chunk, io_align, d, 65536);
	UB_SET(btrfs_chunk, io_width, d, 65536);
	UB_SET(btrfs_chunk, sector_size, d, 4096);
	UB_SET(btrfs_chunk, num_stripes, d, stripes);
	UB_SET(btrfs_chunk, sub_stripes, d, sub);
	for (uint16_t i = 0; i < stripes; i++) {
		uint8_t *s = d + 48 + 32U * i;
		UB_SET(btrfs_stripe, devid, s, 1 + i);
		UB_SET(btrfs_stripe, offset, s, 1048576ULL * (i + 1));
	}
	return d;
}

static void build_chunk_leaf(struct blk *b)
{
	uint8_t *d;

	blk_init(b, 16384, BTRFS_CHUNK_TREE_OBJECTID, 0);
	d = add(b, BTRFS_DEV_ITEMS_OBJECTID, BTRFS_DEV_ITEM_KEY, 1, sizeof(struct btrfs_dev_item));
	UB_SET(btrfs_dev_item, devid, d, 1);
	UB_SET(btrfs_dev_item, total_bytes, d, 1ULL << 30);
	UB_SET(btrfs_dev_item, bytes_used, d, 1ULL << 28);
	UB_SET(btrfs_dev_item, sector_size, d, 4096);
	add_chunk(b, 1ULL << 24, BTRFS_BLOCK_GROUP_SYSTEM, 1, 0);
	add_chunk(b, 2ULL << 24, BTRFS_BLOCK_GROUP_METADATA | BTRFS_BLOCK_GROUP_DUP, 2, 0);
	add_chunk(b, 3ULL << 24, BTRFS_BLOCK_GROUP_DATA | BTRFS_BLOCK_GROUP_RAID0, 3, 0);
	add_chunk(b, 4ULL << 24, BTRFS_BLOCK_GROUP_DATA | BTRFS_BLOCK_GROUP_RAID1, 2, 0);
	add_chunk(b, 5ULL << 24, BTRFS_BLOCK_GROUP_DATA | BTRFS_BLOCK_GROUP_RAID10, 4, 2);
	add_chunk(b, 6ULL << 24, BTRFS_BLOCK_GROUP_DATA | BTRFS_BLOCK_GROUP_RAID5, 3, 0);
	add_chunk(b, 7ULL << 24, BTRFS_BLOCK_GROUP_DATA | BTRFS_BLOCK_GROUP_RAID6, 4, 0);
	add_chunk(b, 8ULL << 24, BTRFS_BLOCK_GROUP_DATA | BTRFS_BLOCK_GROUP_RAID1C3, 3, 0);
	add_chunk(b, 9ULL << 24, BTRFS_BLOCK_GROUP_DATA | BTRFS_BLOCK_GROUP_RAID1C4, 4, 0);
}

static uint8_t *add_root(struct blk *b, uint64_t id, uint64_t offset, uint32_t size)
{
	uint8_t *d = add(b, id, BTRFS_ROOT_ITEM_KEY, offset, size);
	UB_SET(btrfs_inode_item, mode, d, S_IFDIR | 0755);
	UB_SET(btrfs_inode_item, nlink, d, 1);
	UB_SET(btrfs_root_item, generation, d, 6);
	UB_SET(btrfs_root_item, root_dirid, d, 256);
	UB_SET(btrfs_root_item, bytenr, d, 30408704);
	UB_SET(btrfs_root_item, refs, d, 1);
	UB_SET(btrfs_root_item, level, d, 0);
	return d;
}

static uint8_t *add_root_ref(struct blk *b, uint64_t id, uint8_t type, uint64_t other, const char *name)
{
	uint32_t nl = (uint32_t)strlen(name);
	uint8_t *d = add(b, id, type, other, (uint32_t)sizeof(struct btrfs_root_ref) + nl);
	UB_SET(btrfs_root_ref, dirid, d, 256);
	UB_SET(btrfs_root_ref, sequence, d, 2);
	UB_SET(btrfs_root_ref, name_len, d, nl);
	memcpy(d + sizeof(struct btrfs_root_ref), name, nl);
	return d;
}

static void build_root_leaf(struct blk *b)
{
	struct ub_key loc = { BTRFS_FS_TREE_OBJECTID, BTRFS_ROOT_ITEM_KEY, UINT64_MAX };
	uint8_t *d;

	blk_init(b, 16384, BTRFS_ROOT_TREE_OBJECTID, 0);
	add_root(b, BTRFS_EXTENT_TREE_OBJECTID, 0, sizeof(struct btrfs_root_item));
	add_root(b, BTRFS_DEV_TREE_OBJECTID, 0, sizeof(struct btrfs_root_item));
	add_root(b, BTRFS_FS_TREE_OBJECTID, 0, sizeof(struct btrfs_root_item));
	add_root_ref(b, BTRFS_FS_TREE_OBJECTID, BTRFS_ROOT_REF_KEY, 256, "subvol");
	add_inode(b, BTRFS_ROOT_TREE_DIR_OBJECTID, S_IFDIR | 0755, 1);
	d = add(b, BTRFS_ROOT_TREE_DIR_OBJECTID, BTRFS_DIR_ITEM_KEY, ub_name_hash("default", 7), entry_len("default", NULL));
	put_dir_entry(d, &loc, BTRFS_FT_DIR, "default", NULL);
	add_root(b, BTRFS_CSUM_TREE_OBJECTID, 0, 239); /* written by a pre-3.6 kernel */
	add_root(b, 256, 0, sizeof(struct btrfs_root_item));
	add_root_ref(b, 256, BTRFS_ROOT_BACKREF_KEY, BTRFS_FS_TREE_OBJECTID, "subvol");
	add_root(b, BTRFS_TREE_RELOC_OBJECTID, 256, sizeof(struct btrfs_root_item));
}

static void build_misc_leaf(struct blk *b)
{
	uint8_t *d;

	blk_init(b, 16384, BTRFS_FREE_SPACE_TREE_OBJECTID, 0);
	d = add(b, 13631488, BTRFS_FREE_SPACE_INFO_KEY, 8388608, 8);
	UB_SET(btrfs_free_space_info, extent_count, d, 1);
	add(b, 13631488, BTRFS_FREE_SPACE_EXTENT_KEY, 4096, 0);
	add(b, 13639680, BTRFS_FREE_SPACE_BITMAP_KEY, 4096 * 100, 13); /* 100 bits -> 13 bytes */
	d = add(b, 22020096, BTRFS_FREE_SPACE_INFO_KEY, 8388608, 8);
	UB_SET(btrfs_free_space_info, flags, d, BTRFS_FREE_SPACE_USING_BITMAPS);
}

/* ---- valid blocks pass ----------------------------------------------------- */

static void test_valid_fs_leaf(void **state)
{
	static struct blk b;
	const uint32_t sizes[] = { 4096, 16384, 65536 };

	for (size_t i = 0; i < 3; i++) {
		build_fs_leaf(&b, sizes[i]);
		expect_ok(&b);
	}
	/* outside subvolume trees (here a log tree) an inode's items need not follow its INODE_ITEM */
	blk_init(&b, 4096, BTRFS_TREE_LOG_OBJECTID, 0);
	add_inode(&b, 257, S_IFREG | 0644, 1);
	add_inline_extent(&b, 258, "abc");
	expect_ok(&b);
	(void)state;
}

static void test_valid_other_leaves(void **state)
{
	static struct blk b;

	build_extent_leaf(&b);
	expect_ok(&b);
	build_chunk_leaf(&b);
	expect_ok(&b);
	build_root_leaf(&b);
	expect_ok(&b);
	build_misc_leaf(&b);
	expect_ok(&b);
	(void)state;
}

static void test_valid_misc_items(void **state)
{
	static struct blk b;
	uint8_t *d;

	/* csum tree with back-to-back ranges */
	blk_init(&b, 4096, BTRFS_CSUM_TREE_OBJECTID, 0);
	add(&b, BTRFS_EXTENT_CSUM_OBJECTID, BTRFS_EXTENT_CSUM_KEY, 13631488, 8);
	add(&b, BTRFS_EXTENT_CSUM_OBJECTID, BTRFS_EXTENT_CSUM_KEY, 13631488 + 8192, 4);
	expect_ok(&b);

	/* dev tree */
	blk_init(&b, 16384, BTRFS_DEV_TREE_OBJECTID, 0);
	add(&b, BTRFS_DEV_STATS_OBJECTID, BTRFS_PERSISTENT_ITEM_KEY, 1, 40);
	for (int i = 0; i < 2; i++) {
		d = add(&b, 1, BTRFS_DEV_EXTENT_KEY, 1048576ULL + 8388608ULL * i, sizeof(struct btrfs_dev_extent));
		UB_SET(btrfs_dev_extent, chunk_tree, d, BTRFS_CHUNK_TREE_OBJECTID);
		UB_SET(btrfs_dev_extent, chunk_objectid, d, BTRFS_FIRST_CHUNK_TREE_OBJECTID);
		UB_SET(btrfs_dev_extent, chunk_offset, d, 22020096);
		UB_SET(btrfs_dev_extent, length, d, 8388608);
	}
	expect_ok(&b);

	/* uuid and quota trees */
	blk_init(&b, 16384, BTRFS_UUID_TREE_OBJECTID, 0);
	add(&b, 0x1234, BTRFS_UUID_KEY_SUBVOL, 0x5678, 16);
	add(&b, 0x1234, BTRFS_UUID_KEY_RECEIVED_SUBVOL, 0x5678, 8);
	expect_ok(&b);
	blk_init(&b, 16384, BTRFS_QUOTA_TREE_OBJECTID, 0);
	add(&b, 0, BTRFS_QGROUP_STATUS_KEY, 0, 40);
	add(&b, 0, BTRFS_QGROUP_INFO_KEY, 5, 40);
	add(&b, 0, BTRFS_QGROUP_LIMIT_KEY, 5, 40);
	add(&b, 5, BTRFS_QGROUP_RELATION_KEY, 1ULL << 48, 0);
	expect_ok(&b);

	/* orphan items, unknown types (accepted), raid stripe with the feature */
	blk_init(&b, 16384, BTRFS_ROOT_TREE_OBJECTID, 0);
	add(&b, BTRFS_ORPHAN_OBJECTID, BTRFS_ORPHAN_ITEM_KEY, 257, 0);
	add(&b, BTRFS_ORPHAN_OBJECTID, 250, 1, 77);
	expect_ok(&b);
	blk_init(&b, 16384, BTRFS_RAID_STRIPE_TREE_OBJECTID, 0);
	b.ctx.incompat_flags |= BTRFS_FEATURE_INCOMPAT_RAID_STRIPE_TREE;
	add(&b, 13631488, BTRFS_RAID_STRIPE_KEY, 65536, 32);
	expect_ok(&b);

	/* compressed inline extent: item size is not tied to ram_bytes */
	blk_init(&b, 4096, 256, 0);
	add_inode(&b, 257, S_IFREG | 0644, 1);
	d = add_inline_extent(&b, 257, "xxxxxxxxxx");
	UB_SET(btrfs_file_extent_item, compression, d, UB_COMPRESS_ZSTD);
	UB_SET(btrfs_file_extent_item, ram_bytes, d, 3000);
	expect_ok(&b);
	(void)state;
}

static void test_empty_leaves(void **state)
{
	static struct blk b;
	const uint64_t ok_owners[] = { BTRFS_CSUM_TREE_OBJECTID, BTRFS_UUID_TREE_OBJECTID, BTRFS_QUOTA_TREE_OBJECTID,
				       BTRFS_FREE_SPACE_TREE_OBJECTID, BTRFS_TREE_LOG_OBJECTID, 256 };
	const uint64_t bad_owners[] = { BTRFS_ROOT_TREE_OBJECTID, BTRFS_CHUNK_TREE_OBJECTID, BTRFS_DEV_TREE_OBJECTID,
					BTRFS_FS_TREE_OBJECTID, BTRFS_DATA_RELOC_TREE_OBJECTID,
					BTRFS_EXTENT_TREE_OBJECTID };

	for (size_t i = 0; i < sizeof(ok_owners) / sizeof(ok_owners[0]); i++) {
		blk_init(&b, 16384, ok_owners[i], 0);
		expect_ok(&b);
	}
	for (size_t i = 0; i < sizeof(bad_owners) / sizeof(bad_owners[0]); i++) {
		blk_init(&b, 16384, bad_owners[i], 0);
		expect_bad(&b, "which is never empty");
	}
	blk_init(&b, 16384, BTRFS_CHUNK_TREE_OBJECTID, 0);
	check(&b);
	assert_string_equal(b.why, "empty leaf in tree 3 (CHUNK_TREE), which is never empty");
	blk_init(&b, 16384, 0, 0);
	expect_bad(&b, "owner 0");
	/* extent-tree-v2 allows empty extent trees; relocation blocks may be empty */
	blk_init(&b, 16384, BTRFS_EXTENT_TREE_OBJECTID, 0);
	b.ctx.incompat_flags |= BTRFS_FEATURE_INCOMPAT_EXTENT_TREE_V2;
	expect_ok(&b);
	blk_init(&b, 16384, BTRFS_FS_TREE_OBJECTID, 0);
	UB_SET(ub_disk_header, flags, b.buf, BTRFS_HEADER_FLAG_WRITTEN | BTRFS_HEADER_FLAG_RELOC);
	expect_ok(&b);
	(void)state;
}

static void test_valid_node(void **state)
{
	static struct blk b;

	blk_init(&b, 16384, BTRFS_FS_TREE_OBJECTID, 1);
	add_ptr(&b, 256, BTRFS_INODE_ITEM_KEY, 0, 30408704, 6);
	add_ptr(&b, 300, BTRFS_INODE_ITEM_KEY, 0, 30425088, 7);
	add_ptr(&b, 300, BTRFS_EXTENT_DATA_KEY, 4096, 30441472, 7);
	expect_ok(&b);
	/* a full node */
	blk_init(&b, 4096, BTRFS_FS_TREE_OBJECTID, 7);
	for (uint32_t i = 0; i < (4096 - UB_HEADER_SIZE) / UB_KEY_PTR_SIZE; i++)
		add_ptr(&b, 256 + i, BTRFS_INODE_ITEM_KEY, 0, 30408704 + 4096ULL * i, 6);
	expect_ok(&b);
	(void)state;
}

/* ---- block-level rules ------------------------------------------------------ */

static void test_header_rules(void **state)
{
	static struct blk b;
	struct ub_check_ctx bad;

	build_fs_leaf(&b, 4096);
	UB_SET(ub_disk_header, level, b.buf, 8);
	expect_bad(&b, "invalid level 8, expect [0, 7]");
	build_fs_leaf(&b, 4096);
	UB_SET(ub_disk_header, flags, b.buf, 0);
	expect_bad(&b, "leaf without the WRITTEN header flag");

	/* bad parameters are the caller's bug, not corruption */
	build_fs_leaf(&b, 4096);
	bad = b.ctx;
	bad.nodesize = 5000;
	assert_int_equal(ub_tree_check_block(b.buf, &bad, b.why, sizeof(b.why)), -EINVAL);
	bad = b.ctx;
	bad.csum_size = 0;
	assert_int_equal(ub_tree_check_block(b.buf, &bad, b.why, sizeof(b.why)), -EINVAL);
	assert_int_equal(ub_tree_check_block(NULL, &b.ctx, b.why, sizeof(b.why)), -EINVAL);
	assert_int_equal(ub_tree_check_block(b.buf, NULL, b.why, sizeof(b.why)), -EINVAL);
	(void)state;
}

static void test_leaf_layout(void **state)
{
	static struct blk b;
	uint8_t *it;
	uint32_t n;

	/* nritems larger than what fits */
	build_fs_leaf(&b, 4096);
	UB_SET(ub_disk_header, nritems, b.buf, (4096 - UB_HEADER_SIZE) / UB_ITEM_SIZE + 1);
	expect_bad(&b, "leaf has 160 items, at most 159 fit in nodesize 4096");

	/* first item's data past the end of the leaf */
	build_fs_leaf(&b, 4096);
	it = item_hdr(&b, 0);
	UB_SET(ub_disk_item, offset, it, UB_GET(ub_disk_item, offset, it) + 1);
	expect_bad(&b, "slot 0 key (256 INODE_ITEM 0): item data [3836, 3996) must end at the end of the leaf, 3995");

	/* overlapping items: slot 2 grows into slot 1 */
	build_fs_leaf(&b, 4096);
	it = item_hdr(&b, 2);
	UB_SET(ub_disk_item, size, it, UB_GET(ub_disk_item, size, it) + 4);
	expect_bad(&b, "slot 2 key (256 DIR_ITEM");
	expect_bad(&b, "must end where slot 1's data starts");

	/* a gap between items */
	build_fs_leaf(&b, 4096);
	it = item_hdr(&b, 3);
	UB_SET(ub_disk_item, offset, it, UB_GET(ub_disk_item, offset, it) - 1);
	expect_bad(&b, "slot 3 key (256 DIR_INDEX 2)");

	/* size so large the end wraps in 32 bits: must not pass */
	build_fs_leaf(&b, 4096);
	it = item_hdr(&b, 0);
	UB_SET(ub_disk_item, size, it, 0xffffff00U);
	expect_bad(&b, "must end at the end of the leaf");

	/* item data reaching into the item header array (items of a type without rules of its own) */
	blk_init(&b, 4096, BTRFS_CSUM_TREE_OBJECTID, 0);
	add(&b, 1, 77, 0, 4096 - UB_HEADER_SIZE - 80);
	add(&b, 2, 77, 0, 20);
	expect_ok(&b);
	/* grow slot 0 down to the header end (fine), which pushes slot 1's data to 30, inside the headers */
	it = item_hdr(&b, 1);
	UB_SET(ub_disk_item, offset, it, 30);
	it = item_hdr(&b, 0);
	UB_SET(ub_disk_item, offset, it, 50);
	UB_SET(ub_disk_item, size, it, 4096 - UB_HEADER_SIZE - 50);
	expect_bad(&b, "slot 1 key (2 UNKNOWN.77 0): item data at offset 30 overlaps the item headers, which end at 50");

	/* unsorted and duplicate keys */
	build_fs_leaf(&b, 4096);
	set_item_key(&b, 3, 256, BTRFS_DIR_INDEX_KEY, 3);
	set_item_key(&b, 4, 256, BTRFS_DIR_INDEX_KEY, 2);
	expect_bad(&b, "slot 4 key (256 DIR_INDEX 2): bad key order, previous key (256 DIR_INDEX 3) is not smaller");
	build_fs_leaf(&b, 4096);
	n = nritems(&b);
	set_item_key(&b, n - 1, 258, BTRFS_EXTENT_DATA_KEY, 8192);
	expect_bad(&b, "previous key (258 EXTENT_DATA 8192) is not smaller");
	blk_init(&b, 4096, BTRFS_CSUM_TREE_OBJECTID, 0);
	add(&b, 0, 0, 0, 0);
	expect_bad(&b, "the first key must be greater than (0 UNKNOWN.0 0)");
	(void)state;
}

static void test_node_rules(void **state)
{
	static struct blk b;

	blk_init(&b, 16384, BTRFS_FS_TREE_OBJECTID, 1);
	expect_bad(&b, "node at level 1 has no pointers");
	blk_init(&b, 4096, BTRFS_FS_TREE_OBJECTID, 2);
	add_ptr(&b, 256, 1, 0, 4096, 1);
	UB_SET(ub_disk_header, nritems, b.buf, (4096 - UB_HEADER_SIZE) / UB_KEY_PTR_SIZE + 1);
	expect_bad(&b, "node has 122 pointers, at most 121 fit in nodesize 4096");

	blk_init(&b, 16384, BTRFS_FS_TREE_OBJECTID, 1);
	add_ptr(&b, 256, 1, 0, 30408704, 6);
	add_ptr(&b, 256, 1, 0, 30425088, 6);
	expect_bad(&b, "slot 1 key (256 INODE_ITEM 0): bad key order, previous key (256 INODE_ITEM 0) is not smaller");

	blk_init(&b, 16384, BTRFS_FS_TREE_OBJECTID, 1);
	add_ptr(&b, 256, 1, 0, 30408704, 6);
	add_ptr(&b, 257, 1, 0, 0, 6);
	expect_bad(&b, "slot 1 key (257 INODE_ITEM 0): child pointer is 0");

	blk_init(&b, 16384, BTRFS_FS_TREE_OBJECTID, 1);
	add_ptr(&b, 256, 1, 0, 30408705, 6);
	expect_bad(&b, "child pointer 30408705 is not aligned to sectorsize 4096");

	blk_init(&b, 16384, BTRFS_FS_TREE_OBJECTID, 1);
	add_ptr(&b, 256, 1, 0, 30408704, 0);
	expect_bad(&b, "child pointer 30408704 has generation 0");
	(void)state;
}

/* ---- item rules ------------------------------------------------------------ */

static void test_inode_rules(void **state)
{
	static struct blk b;
	uint8_t *d;

	/* the example from the header */
	blk_init(&b, 4096, BTRFS_FS_TREE_OBJECTID, 0);
	add(&b, 256, BTRFS_INODE_ITEM_KEY, 0, 150);
	check(&b);
	assert_string_equal(b.why, "slot 0 key (256 INODE_ITEM 0): invalid item size 150, expect 160");

	build_fs_leaf(&b, 4096);
	d = item_data(&b, 5, NULL);
	UB_SET(btrfs_inode_item, mode, d, 0170644);
	expect_bad(&b, "slot 5 key (257 INODE_ITEM 0): invalid file type in mode 0170644");
	UB_SET(btrfs_inode_item, mode, d, 0644);
	expect_bad(&b, "invalid file type in mode 0644");
	UB_SET(btrfs_inode_item, mode, d, 0200644 | S_IFREG);
	expect_bad(&b, "unknown mode bits");
	UB_SET(btrfs_inode_item, mode, d, S_IFREG | 0644);
	UB_SET(btrfs_inode_item, flags, d, 1ULL << 20);
	expect_bad(&b, "unknown inode flags 0x100000");
	/* read-only-compatible flags (verity) are not our business when reading */
	UB_SET(btrfs_inode_item, flags, d, 1ULL << 32);
	expect_ok(&b);

	build_fs_leaf(&b, 4096);
	d = item_data(&b, 0, NULL);
	UB_SET(btrfs_inode_item, nlink, d, 2);
	expect_bad(&b, "directory with nlink 2, expect at most 1");

	blk_init(&b, 4096, BTRFS_FS_TREE_OBJECTID, 0);
	add_inode(&b, 7, S_IFREG | 0644, 1);
	expect_bad(&b, "invalid inode number");
	blk_init(&b, 4096, BTRFS_FS_TREE_OBJECTID, 0);
	d = add(&b, 256, BTRFS_INODE_ITEM_KEY, 1, sizeof(struct btrfs_inode_item));
	UB_SET(btrfs_inode_item, mode, d, S_IFDIR);
	expect_bad(&b, "invalid key offset 1, expect 0");
	(void)state;
}

static void test_prev_inode_rule(void **state)
{
	static struct blk b;

	/* an EXTENT_DATA whose inode item is not right before it, in a subvolume tree */
	blk_init(&b, 4096, 256, 0);
	add_inode(&b, 257, S_IFREG | 0644, 1);
	add_inline_extent(&b, 258, "abc");
	expect_bad(&b, "slot 1 key (258 EXTENT_DATA 0): previous key (257 INODE_ITEM 0) belongs to another inode");
	/* the first item of a leaf has no predecessor to compare with */
	blk_init(&b, 4096, 256, 0);
	add_inline_extent(&b, 258, "abc");
	expect_ok(&b);
	(void)state;
}

static void test_dir_rules(void **state)
{
	static struct blk b;
	uint8_t *d;
	uint32_t size;

	/* name_len reaching past the item */
	build_fs_leaf(&b, 4096);
	d = item_data(&b, 2, &size);
	UB_SET(btrfs_dir_item, name_len, d, 10);
	expect_bad(&b, "slot 2 key (256 DIR_ITEM");
	expect_bad(&b, "entry 0: name/data at offset 0 length 40 cross the item end 39");

	/* header does not fit */
	blk_init(&b, 4096, BTRFS_FS_TREE_OBJECTID, 0);
	add(&b, 256, BTRFS_DIR_INDEX_KEY, 2, 20);
	expect_bad(&b, "entry 0: header at offset 0 crosses the item end 20");

	/* wrong hash */
	build_fs_leaf(&b, 4096);
	set_item_key(&b, 2, 256, BTRFS_DIR_ITEM_KEY, ub_name_hash("hello.txt", 9) + 1);
	expect_bad(&b, "does not match the key offset");

	/* bad type, xattr type in a dir, dir type in an xattr */
	build_fs_leaf(&b, 4096);
	d = item_data(&b, 3, NULL);
	UB_SET(btrfs_dir_item, type, d, 9);
	expect_bad(&b, "entry 0: invalid file type 9, expect [0, 8]");
	UB_SET(btrfs_dir_item, type, d, BTRFS_FT_XATTR);
	expect_bad(&b, "entry 0: xattr file type in a directory entry");
	UB_SET(btrfs_dir_item, type, d, 0x80 | BTRFS_FT_REG_FILE); /* the encryption flag bit is not the type */
	expect_ok(&b);
	build_fs_leaf(&b, 4096);
	d = item_data(&b, 7, NULL);
	UB_SET(btrfs_dir_item, type, d, BTRFS_FT_REG_FILE);
	expect_bad(&b, "slot 7 key (257 XATTR_ITEM");
	expect_bad(&b, "file type 1 in an xattr item, expect 8 (xattr)");

	/* data in a directory entry; name too long */
	build_fs_leaf(&b, 4096);
	d = item_data(&b, 3, NULL);
	UB_SET(btrfs_dir_item, data_len, d, 1);
	expect_bad(&b, "entry 0: data length 1 in a directory entry, expect 0");
	UB_SET(btrfs_dir_item, data_len, d, 0);
	UB_SET(btrfs_dir_item, name_len, d, 256);
	expect_bad(&b, "entry 0: name length 256 exceeds 255");

	/* xattr name+value bounded by what fits one leaf */
	blk_init(&b, 4096, BTRFS_FS_TREE_OBJECTID, 0);
	d = add(&b, 256, BTRFS_XATTR_ITEM_KEY, 0, 4096 - UB_HEADER_SIZE - UB_ITEM_SIZE);
	UB_SET(btrfs_dir_item, type, d, BTRFS_FT_XATTR);
	UB_SET(btrfs_dir_item, name_len, d, 4);
	UB_SET(btrfs_dir_item, data_len, d, 4096 - 101 - 25 - 30 - 4 + 1);
	expect_bad(&b, "entry 0: name and data length 3941 exceed 3940 for nodesize 4096");

	/* DIR_INDEX with two entries; a DIR_ITEM may hold several (hash collisions) */
	blk_init(&b, 4096, BTRFS_FS_TREE_OBJECTID, 0);
	{
		struct ub_key loc = { 257, BTRFS_INODE_ITEM_KEY, 0 };
		d = add(&b, 256, BTRFS_DIR_INDEX_KEY, 2, entry_len("a", NULL) + entry_len("b", NULL));
		put_dir_entry(d + put_dir_entry(d, &loc, BTRFS_FT_REG_FILE, "a", NULL), &loc, BTRFS_FT_REG_FILE, "b",
			      NULL);
	}
	expect_bad(&b, "DIR_INDEX holds 2 entries, expect exactly 1");
	blk_init(&b, 4096, BTRFS_FS_TREE_OBJECTID, 0);
	{
		struct ub_key loc = { 257, BTRFS_INODE_ITEM_KEY, 0 };
		d = add(&b, 256, BTRFS_DIR_ITEM_KEY, ub_name_hash("a", 1), 2 * entry_len("a", NULL));
		put_dir_entry(d + put_dir_entry(d, &loc, BTRFS_FT_REG_FILE, "a", NULL), &loc, BTRFS_FT_REG_FILE, "a",
			      NULL);
	}
	expect_ok(&b);
	/* the second entry's hash is checked too */
	d[30 + 1 + 30] = 'b';
	expect_bad(&b, "entry 1: name hash");

	/* location keys */
	build_fs_leaf(&b, 4096);
	d = item_data(&b, 3, NULL);
	{
		struct ub_key loc = { 257, BTRFS_EXTENT_DATA_KEY, 0 };
		ub_key_write(d, &loc);
		expect_bad(&b, "entry 0: invalid location key type in (257 EXTENT_DATA 0)");
		loc = (struct ub_key){ 100, BTRFS_INODE_ITEM_KEY, 0 };
		ub_key_write(d, &loc);
		expect_bad(&b, "entry 0: location key (100 INODE_ITEM 0) has an invalid inode number");
		loc = (struct ub_key){ BTRFS_EXTENT_TREE_OBJECTID, BTRFS_ROOT_ITEM_KEY, UINT64_MAX };
		ub_key_write(d, &loc);
		expect_bad(&b, "does not name a subvolume tree");
		loc = (struct ub_key){ 260, BTRFS_ROOT_ITEM_KEY, UINT64_MAX };
		ub_key_write(d, &loc);
		expect_ok(&b);
	}
	build_fs_leaf(&b, 4096);
	d = item_data(&b, 7, NULL);
	{
		struct ub_key loc = { 257, BTRFS_INODE_ITEM_KEY, 0 };
		ub_key_write(d, &loc);
		expect_bad(&b, "xattr location key (257 INODE_ITEM 0), expect (0 0 0)");
	}
	(void)state;
}

static void test_inode_ref_rules(void **state)
{
	static struct blk b;
	uint8_t *d;

	build_fs_leaf(&b, 4096);
	d = item_data(&b, 6, NULL);
	UB_SET(btrfs_inode_ref, name_len, d, 10);
	expect_bad(&b, "slot 6 key (257 INODE_REF 256): ref 0: name at offset 10 length 10 crosses the item end 19");

	blk_init(&b, 4096, BTRFS_FS_TREE_OBJECTID, 0);
	add(&b, 256, BTRFS_INODE_REF_KEY, 256, 10);
	expect_bad(&b, "invalid item size 10, expect more than 10");

	/* two refs, the second header truncated */
	blk_init(&b, 4096, BTRFS_FS_TREE_OBJECTID, 0);
	d = add(&b, 256, BTRFS_INODE_REF_KEY, 256, 10 + 1 + 5);
	UB_SET(btrfs_inode_ref, name_len, d, 1);
	expect_bad(&b, "ref 1: header at offset 11 crosses the item end 16");

	/* extrefs */
	blk_init(&b, 4096, BTRFS_FS_TREE_OBJECTID, 0);
	d = add(&b, 257, BTRFS_INODE_EXTREF_KEY, 12345, 18 + 3 + 18 + 2);
	UB_SET(btrfs_inode_extref, parent_objectid, d, 256);
	UB_SET(btrfs_inode_extref, name_len, d, 3);
	UB_SET(btrfs_inode_extref, name_len, d + 21, 2);
	expect_ok(&b);
	UB_SET(btrfs_inode_extref, name_len, d + 21, 3);
	expect_bad(&b, "slot 0 key (257 INODE_EXTREF 12345): ref 1: name at offset 39 length 3 crosses the item end 41");
	UB_SET(btrfs_inode_extref, name_len, d + 21, 300);
	expect_bad(&b, "ref 1: name length 300 exceeds 255");
	(void)state;
}

static void test_file_extent_rules(void **state)
{
	static struct blk b;
	uint8_t *d;
	uint32_t n;

	build_fs_leaf(&b, 4096);
	d = item_data(&b, 8, NULL);
	UB_SET(btrfs_file_extent_item, ram_bytes, d, 13);
	expect_bad(&b, "slot 8 key (257 EXTENT_DATA 0): uncompressed inline extent has ram_bytes 13 but item size 33 "
		       "holds 12 bytes");
	UB_SET(btrfs_file_extent_item, ram_bytes, d, 12);
	UB_SET(btrfs_file_extent_item, type, d, 3);
	expect_bad(&b, "invalid file extent type 3");
	UB_SET(btrfs_file_extent_item, type, d, 0);
	UB_SET(btrfs_file_extent_item, compression, d, 4);
	expect_bad(&b, "invalid compression 4, expect [0, 3]");
	UB_SET(btrfs_file_extent_item, compression, d, 0);
	UB_SET(btrfs_file_extent_item, encryption, d, 1);
	expect_bad(&b, "invalid encryption 1, expect 0");

	blk_init(&b, 4096, 256, 0);
	add_inode(&b, 257, S_IFREG | 0644, 1);
	add(&b, 257, BTRFS_EXTENT_DATA_KEY, 0, 20);
	expect_bad(&b, "invalid item size 20, expect at least 21");

	/* inline extent not at offset 0 */
	blk_init(&b, 4096, 256, 0);
	add_inode(&b, 257, S_IFREG | 0644, 1);
	d = add(&b, 257, BTRFS_EXTENT_DATA_KEY, 4096, 22);
	UB_SET(btrfs_file_extent_item, ram_bytes, d, 1);
	expect_bad(&b, "inline extent at file offset 4096, expect 0");

	/* regular extents: size, alignment, overlap, overflow */
	blk_init(&b, 4096, 256, 0);
	add_inode(&b, 257, S_IFREG | 0644, 1);
	d = add(&b, 257, BTRFS_EXTENT_DATA_KEY, 0, 54);
	UB_SET(btrfs_file_extent_item, type, d, BTRFS_FILE_EXTENT_PREALLOC);
	expect_bad(&b, "invalid item size 54 for prealloc extent, expect 53");

	const char *fields[] = { "ram_bytes", "disk_bytenr", "disk_num_bytes", "offset", "num_bytes" };
	const size_t offs[] = { offsetof(struct btrfs_file_extent_item, ram_bytes),
				offsetof(struct btrfs_file_extent_item, disk_bytenr),
				offsetof(struct btrfs_file_extent_item, disk_num_bytes),
				offsetof(struct btrfs_file_extent_item, offset),
				offsetof(struct btrfs_file_extent_item, num_bytes) };
	for (size_t i = 0; i < 5; i++) {
		char msg[96];

		build_fs_leaf(&b, 4096);
		d = item_data(&b, 11, NULL);
		ub_put_le(d + offs[i], 8, ub_le64(d + offs[i]) + 512);
		snprintf(msg, sizeof(msg), "slot 11 key (258 EXTENT_DATA 0): %s", fields[i]);
		expect_bad(&b, msg);
		expect_bad(&b, "is not aligned to sectorsize 4096");
	}
	build_fs_leaf(&b, 4096);
	n = nritems(&b);
	set_item_key(&b, n - 1, 258, BTRFS_EXTENT_DATA_KEY, 12288 + 1);
	expect_bad(&b, "file offset 12289 is not aligned to sectorsize 4096");
	build_fs_leaf(&b, 4096);
	set_item_key(&b, 12, 258, BTRFS_EXTENT_DATA_KEY, 4096);
	expect_bad(&b, "slot 12 key (258 EXTENT_DATA 4096): file extent starts at 4096 but the previous one "
		       "(258 EXTENT_DATA 0) ends at 8192");
	build_fs_leaf(&b, 4096);
	d = item_data(&b, 13, NULL);
	UB_SET(btrfs_file_extent_item, num_bytes, d, UINT64_MAX - 4095);
	expect_bad(&b, "extent end overflows");
	build_fs_leaf(&b, 4096);
	d = item_data(&b, 13, NULL);
	UB_SET(btrfs_file_extent_item, disk_num_bytes, d, 0);
	expect_bad(&b, "has disk_num_bytes 0");
	/* an inline extent covers its whole sector: a following extent inside that sector overlaps */
	blk_init(&b, 4096, 256, 0);
	add_inode(&b, 257, S_IFREG | 0644, 1);
	add_inline_extent(&b, 257, "abc");
	add_reg_extent(&b, 257, 4096, 0, 4096);
	expect_ok(&b);
	(void)state;
}

static void test_csum_rules(void **state)
{
	static struct blk b;

	blk_init(&b, 4096, BTRFS_CSUM_TREE_OBJECTID, 0);
	add(&b, BTRFS_EXTENT_CSUM_OBJECTID, BTRFS_EXTENT_CSUM_KEY, 13631488, 6);
	check(&b);
	assert_string_equal(b.why, "slot 0 key (EXTENT_CSUM EXTENT_CSUM 13631488): invalid item size 6, expect a "
				   "multiple of the checksum size 4");
	b.ctx.csum_size = 32;
	expect_bad(&b, "multiple of the checksum size 32");
	blk_init(&b, 4096, BTRFS_CSUM_TREE_OBJECTID, 0);
	add(&b, 256, BTRFS_EXTENT_CSUM_KEY, 13631488, 4);
	expect_bad(&b, "invalid objectid for a csum item");
	blk_init(&b, 4096, BTRFS_CSUM_TREE_OBJECTID, 0);
	add(&b, (uint64_t)-100, BTRFS_EXTENT_CSUM_KEY, 13631488, 4);
	expect_bad(&b, "slot 0 key (-100 EXTENT_CSUM 13631488): invalid objectid for a csum item");
	blk_init(&b, 4096, BTRFS_CSUM_TREE_OBJECTID, 0);
	add(&b, BTRFS_EXTENT_CSUM_OBJECTID, BTRFS_EXTENT_CSUM_KEY, 13631489, 4);
	expect_bad(&b, "csum range start 13631489 is not aligned");
	blk_init(&b, 4096, BTRFS_CSUM_TREE_OBJECTID, 0);
	add(&b, BTRFS_EXTENT_CSUM_OBJECTID, BTRFS_EXTENT_CSUM_KEY, 13631488, 12);
	add(&b, BTRFS_EXTENT_CSUM_OBJECTID, BTRFS_EXTENT_CSUM_KEY, 13631488 + 8192, 4);
	expect_bad(&b, "csum range starts at 13639680 but the previous one");
	expect_bad(&b, "ends at 13643776");
	(void)state;
}

static void test_root_rules(void **state)
{
	static struct blk b;
	uint8_t *d;

	build_root_leaf(&b);
	d = item_data(&b, 0, NULL);
	UB_SET(btrfs_root_item, level, d, 8);
	expect_bad(&b, "slot 0 key (2 ROOT_ITEM 0): invalid root level 8, expect [0, 7]");
	UB_SET(btrfs_root_item, level, d, 0);
	UB_SET(btrfs_root_item, drop_level, d, 9);
	expect_bad(&b, "invalid drop level 9");
	UB_SET(btrfs_root_item, drop_level, d, 0);
	UB_SET(btrfs_root_item, bytenr, d, 30408704 + 100);
	expect_bad(&b, "root bytenr 30408804 is not aligned");
	UB_SET(btrfs_root_item, bytenr, d, 30408704);
	UB_SET(btrfs_root_item, flags, d, BTRFS_ROOT_SUBVOL_RDONLY | 2);
	expect_bad(&b, "unknown root flags 0x2");
	UB_SET(btrfs_root_item, flags, d, BTRFS_ROOT_SUBVOL_RDONLY);
	expect_ok(&b);

	blk_init(&b, 16384, BTRFS_ROOT_TREE_OBJECTID, 0);
	add_root(&b, 256, 0, 300);
	expect_bad(&b, "invalid root item size 300, expect 439 or 239 (legacy)");
	blk_init(&b, 16384, BTRFS_ROOT_TREE_OBJECTID, 0);
	add_root(&b, BTRFS_TREE_RELOC_OBJECTID, BTRFS_EXTENT_TREE_OBJECTID, sizeof(struct btrfs_root_item));
	expect_bad(&b, "relocation tree for 2, which is not a subvolume tree");
	/* older kernels gave the data relocation tree one too (corpus tree_reloc_for_data_reloc) */
	blk_init(&b, 16384, BTRFS_ROOT_TREE_OBJECTID, 0);
	add_root(&b, BTRFS_TREE_RELOC_OBJECTID, BTRFS_DATA_RELOC_TREE_OBJECTID, sizeof(struct btrfs_root_item));
	expect_ok(&b);

	/* root refs */
	build_root_leaf(&b);
	d = item_data(&b, 3, NULL);
	UB_SET(btrfs_root_ref, name_len, d, 7);
	expect_bad(&b, "slot 3 key (5 ROOT_REF 256): invalid item size 24, expect 25 (header + name length 7)");
	UB_SET(btrfs_root_ref, name_len, d, 0);
	expect_bad(&b, "invalid name length 0, expect [1, 255]");
	blk_init(&b, 16384, BTRFS_ROOT_TREE_OBJECTID, 0);
	add(&b, 5, BTRFS_ROOT_BACKREF_KEY, 256, 17);
	expect_bad(&b, "invalid item size 17, expect at least 18");
	(void)state;
}

static void test_chunk_rules(void **state)
{
	static struct blk b;
	uint8_t *d;

	/* stripe counts per profile */
	const struct {
		uint64_t profile;
		uint16_t stripes, sub;
		const char *name;
	} bad[] = {
		{ 0, 2, 0, "single" },
		{ BTRFS_BLOCK_GROUP_DUP, 1, 0, "DUP" },
		{ BTRFS_BLOCK_GROUP_DUP, 3, 0, "DUP" },
		{ BTRFS_BLOCK_GROUP_RAID1, 3, 0, "RAID1" },
		{ BTRFS_BLOCK_GROUP_RAID1C3, 2, 0, "RAID1C3" },
		{ BTRFS_BLOCK_GROUP_RAID1C4, 3, 0, "RAID1C4" },
		{ BTRFS_BLOCK_GROUP_RAID10, 4, 1, "RAID10" },
		{ BTRFS_BLOCK_GROUP_RAID10, 1, 2, "RAID10" },
		{ BTRFS_BLOCK_GROUP_RAID5, 1, 0, "RAID5" },
		{ BTRFS_BLOCK_GROUP_RAID6, 2, 0, "RAID6" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char msg[96];

		blk_init(&b, 16384, BTRFS_CHUNK_TREE_OBJECTID, 0);
		add_chunk(&b, 1ULL << 24, BTRFS_BLOCK_GROUP_DATA | bad[i].profile, bad[i].stripes, bad[i].sub);
		snprintf(msg, sizeof(msg), "invalid stripe count %u (sub_stripes %u) for profile %s", bad[i].stripes,
			 bad[i].sub, bad[i].name);
		expect_bad(&b, msg);
	}

	blk_init(&b, 16384, BTRFS_CHUNK_TREE_OBJECTID, 0);
	d = add_chunk(&b, 1ULL << 24, BTRFS_BLOCK_GROUP_DATA, 1, 0);
	UB_SET(btrfs_chunk, num_stripes, d, 0);
	expect_bad(&b, "slot 0 key (256 CHUNK_ITEM 16777216): chunk has 0 stripes");
	UB_SET(btrfs_chunk, num_stripes, d, 2);
	expect_bad(&b, "invalid chunk item size 80, expect 112 for 2 stripes");
	UB_SET(btrfs_chunk, num_stripes, d, 1);
	UB_SET(btrfs_chunk, stripe_len, d, 4096);
	expect_bad(&b, "invalid stripe length 4096, expect 65536");
	UB_SET(btrfs_chunk, stripe_len, d, UB_STRIPE_LEN);
	UB_SET(btrfs_chunk, length, d, 8388608 + 512);
	expect_bad(&b, "invalid chunk length 8389120");
	UB_SET(btrfs_chunk, length, d, 0);
	expect_bad(&b, "invalid chunk length 0");
	UB_SET(btrfs_chunk, length, d, 8388608);
	UB_SET(btrfs_chunk, sector_size, d, 512);
	expect_bad(&b, "chunk sector size 512, expect 4096");
	UB_SET(btrfs_chunk, sector_size, d, 4096);
	UB_SET(btrfs_chunk, type, d, BTRFS_BLOCK_GROUP_DATA | BTRFS_BLOCK_GROUP_RAID0 | BTRFS_BLOCK_GROUP_RAID1);
	expect_bad(&b, "has several profile bits");
	UB_SET(btrfs_chunk, type, d, BTRFS_BLOCK_GROUP_RAID0);
	expect_bad(&b, "has no DATA, METADATA or SYSTEM bit");
	UB_SET(btrfs_chunk, type, d, BTRFS_BLOCK_GROUP_SYSTEM | BTRFS_BLOCK_GROUP_DATA);
	expect_bad(&b, "system chunk also marked data or metadata");
	UB_SET(btrfs_chunk, type, d, BTRFS_BLOCK_GROUP_METADATA | BTRFS_BLOCK_GROUP_DATA);
	expect_bad(&b, "mixed data+metadata chunk without the mixed-groups feature");
	b.ctx.incompat_flags |= BTRFS_FEATURE_INCOMPAT_MIXED_GROUPS;
	expect_ok(&b);
	UB_SET(btrfs_chunk, type, d, BTRFS_BLOCK_GROUP_DATA | (1ULL << 20));
	expect_bad(&b, "unknown chunk type bits 0x100000");
	UB_SET(btrfs_chunk, type, d, BTRFS_BLOCK_GROUP_DATA);
	set_item_key(&b, 0, 256, BTRFS_CHUNK_ITEM_KEY, (1ULL << 24) + 100);
	expect_bad(&b, "chunk start 16777316 is not aligned");
	set_item_key(&b, 0, 256, BTRFS_CHUNK_ITEM_KEY, UINT64_MAX - 4095);
	expect_bad(&b, "overflows");

	blk_init(&b, 16384, BTRFS_CHUNK_TREE_OBJECTID, 0);
	add(&b, 256, BTRFS_CHUNK_ITEM_KEY, 1ULL << 24, 79);
	expect_bad(&b, "invalid chunk item size 79, expect at least 80");
	(void)state;
}

static void test_device_rules(void **state)
{
	static struct blk b;
	uint8_t *d;

	build_chunk_leaf(&b);
	d = item_data(&b, 0, NULL);
	UB_SET(btrfs_dev_item, devid, d, 2);
	expect_bad(&b, "slot 0 key (1 DEV_ITEM 1): device id 2 does not match the key offset");
	UB_SET(btrfs_dev_item, devid, d, 1);
	UB_SET(btrfs_dev_item, bytes_used, d, (1ULL << 30) + 1);
	expect_bad(&b, "bytes_used 1073741825 exceeds total_bytes 1073741824");
	blk_init(&b, 16384, BTRFS_CHUNK_TREE_OBJECTID, 0);
	add(&b, 1, BTRFS_DEV_ITEM_KEY, 1, 97);
	expect_bad(&b, "invalid item size 97, expect 98");
	blk_init(&b, 16384, BTRFS_CHUNK_TREE_OBJECTID, 0);
	add(&b, 2, BTRFS_DEV_ITEM_KEY, 1, 98);
	expect_bad(&b, "invalid objectid for a device item");

	/* dev extents */
	blk_init(&b, 16384, BTRFS_DEV_TREE_OBJECTID, 0);
	add(&b, 1, BTRFS_DEV_EXTENT_KEY, 1048576, 47);
	expect_bad(&b, "invalid item size 47, expect 48");
	blk_init(&b, 16384, BTRFS_DEV_TREE_OBJECTID, 0);
	for (int i = 0; i < 2; i++) {
		d = add(&b, 1, BTRFS_DEV_EXTENT_KEY, 1048576ULL + 4194304ULL * i, sizeof(struct btrfs_dev_extent));
		UB_SET(btrfs_dev_extent, chunk_tree, d, BTRFS_CHUNK_TREE_OBJECTID);
		UB_SET(btrfs_dev_extent, chunk_objectid, d, BTRFS_FIRST_CHUNK_TREE_OBJECTID);
		UB_SET(btrfs_dev_extent, chunk_offset, d, 22020096);
		UB_SET(btrfs_dev_extent, length, d, 8388608);
	}
	expect_bad(&b, "slot 1 key (1 DEV_EXTENT 5242880): device extent starts at 5242880 but the previous one "
		       "(1 DEV_EXTENT 1048576) ends at 9437184");
	UB_SET(btrfs_dev_extent, length, item_data(&b, 0, NULL), 4194304);
	expect_ok(&b);
	UB_SET(btrfs_dev_extent, chunk_tree, d, 4);
	expect_bad(&b, "chunk tree id 4, expect 3");
	UB_SET(btrfs_dev_extent, chunk_tree, d, 3);
	UB_SET(btrfs_dev_extent, chunk_objectid, d, 257);
	expect_bad(&b, "chunk objectid 257, expect 256");
	UB_SET(btrfs_dev_extent, chunk_objectid, d, 256);
	UB_SET(btrfs_dev_extent, length, d, 1000);
	expect_bad(&b, "length 1000 is not aligned");
	(void)state;
}

static void test_block_group_rules(void **state)
{
	static struct blk b;
	uint8_t *d;

	build_extent_leaf(&b);
	d = item_data(&b, 3, NULL);
	UB_SET(btrfs_block_group_item, used, d, 8388609);
	expect_bad(&b, "slot 3 key (22020096 BLOCK_GROUP_ITEM 8388608): used 8388609 exceeds the block group length "
		       "8388608");
	UB_SET(btrfs_block_group_item, used, d, 0);
	UB_SET(btrfs_block_group_item, flags, d, BTRFS_BLOCK_GROUP_METADATA | BTRFS_BLOCK_GROUP_DUP |
							 BTRFS_BLOCK_GROUP_RAID1);
	expect_bad(&b, "have several profile bits");
	UB_SET(btrfs_block_group_item, flags, d, BTRFS_BLOCK_GROUP_METADATA | BTRFS_BLOCK_GROUP_SYSTEM);
	expect_bad(&b, "invalid type in flags 0x6");
	UB_SET(btrfs_block_group_item, flags, d, BTRFS_BLOCK_GROUP_DATA | BTRFS_BLOCK_GROUP_METADATA);
	expect_ok(&b);
	UB_SET(btrfs_block_group_item, chunk_objectid, d, 5);
	expect_bad(&b, "chunk objectid 5, expect 256");
	b.ctx.incompat_flags |= BTRFS_FEATURE_INCOMPAT_EXTENT_TREE_V2;
	expect_ok(&b);

	blk_init(&b, 16384, BTRFS_EXTENT_TREE_OBJECTID, 0);
	add(&b, 22020096, BTRFS_BLOCK_GROUP_ITEM_KEY, 8388608, 23);
	expect_bad(&b, "invalid item size 23, expect 24");
	blk_init(&b, 16384, BTRFS_EXTENT_TREE_OBJECTID, 0);
	add(&b, 22020096, BTRFS_BLOCK_GROUP_ITEM_KEY, 0, 24);
	expect_bad(&b, "block group of length 0");
	(void)state;
}

static void test_extent_item_rules(void **state)
{
	static struct blk b;
	uint8_t *d, *p;

	/* the v0 format of the oldest kernels */
	blk_init(&b, 16384, BTRFS_EXTENT_TREE_OBJECTID, 0);
	add(&b, 13631488, BTRFS_EXTENT_ITEM_KEY, 4096, 4);
	expect_bad(&b, "pre-2.6.31 v0 format");
	expect_bad(&b, "recreate the filesystem");

	/* skinny item without the feature; bad level */
	build_extent_leaf(&b);
	b.ctx.incompat_flags &= ~(uint64_t)BTRFS_FEATURE_INCOMPAT_SKINNY_METADATA;
	expect_bad(&b, "slot 4 key (30408704 METADATA_ITEM 0): METADATA_ITEM without the skinny-metadata feature");
	build_extent_leaf(&b);
	set_item_key(&b, 4, 30408704, BTRFS_METADATA_ITEM_KEY, 8);
	expect_bad(&b, "invalid tree level 8, expect [0, 7]");

	/* flags */
	build_extent_leaf(&b);
	d = item_data(&b, 0, NULL);
	UB_SET(btrfs_extent_item, flags, d, BTRFS_EXTENT_FLAG_DATA | BTRFS_EXTENT_FLAG_TREE_BLOCK);
	expect_bad(&b, "must have exactly one of DATA (0x1) and TREE_BLOCK (0x2)");
	UB_SET(btrfs_extent_item, flags, d, BTRFS_EXTENT_FLAG_DATA | BTRFS_BLOCK_FLAG_FULL_BACKREF);
	expect_bad(&b, "data extent with the FULL_BACKREF flag");

	/* refs count fewer than inline refs */
	build_extent_leaf(&b);
	d = item_data(&b, 0, NULL);
	UB_SET(btrfs_extent_item, refs, d, 2);
	expect_bad(&b, "extent has 2 refs but its inline refs count 3");

	/* inline ref list must exactly fill the item */
	blk_init(&b, 16384, BTRFS_EXTENT_TREE_OBJECTID, 0);
	p = add_extent(&b, 13631488, 4096, 1, BTRFS_EXTENT_FLAG_DATA, 29 + 5);
	put_data_ref(p, 5, 257, 0, 1);
	expect_bad(&b, "inline ref 1 at offset 53: header crosses the item end 58");
	blk_init(&b, 16384, BTRFS_EXTENT_TREE_OBJECTID, 0);
	p = add_extent(&b, 13631488, 4096, 1, BTRFS_EXTENT_FLAG_DATA, 20);
	put_data_ref(p, 5, 257, 0, 1);
	expect_bad(&b, "inline ref 0 at offset 24: 29 bytes cross the item end 44");
	blk_init(&b, 16384, BTRFS_EXTENT_TREE_OBJECTID, 0);
	p = add_extent(&b, 13631488, 4096, 1, BTRFS_EXTENT_FLAG_DATA, 9);
	put_simple_ref(p, 99, 0);
	expect_bad(&b, "inline ref 0 at offset 24: unknown type 99");

	/* ordering: types ascending, offsets descending within a type */
	blk_init(&b, 16384, BTRFS_EXTENT_TREE_OBJECTID, 0);
	p = add(&b, 30408704, BTRFS_METADATA_ITEM_KEY, 0, 24 + 18);
	UB_SET(btrfs_extent_item, refs, p, 2);
	UB_SET(btrfs_extent_item, flags, p, BTRFS_EXTENT_FLAG_TREE_BLOCK);
	put_simple_ref(p + 24, BTRFS_SHARED_BLOCK_REF_KEY, 30474240);
	put_simple_ref(p + 33, BTRFS_TREE_BLOCK_REF_KEY, 5);
	expect_bad(&b, "inline ref 1: type 176 after type 182, expect ascending types");
	put_simple_ref(p + 24, BTRFS_TREE_BLOCK_REF_KEY, 5);
	put_simple_ref(p + 33, BTRFS_TREE_BLOCK_REF_KEY, 7);
	expect_bad(&b, "expect descending order within a type");
	put_simple_ref(p + 24, BTRFS_TREE_BLOCK_REF_KEY, 7);
	put_simple_ref(p + 33, BTRFS_TREE_BLOCK_REF_KEY, 5);
	expect_ok(&b);
	put_simple_ref(p + 24, BTRFS_SHARED_BLOCK_REF_KEY, 30474240 + 1);
	expect_bad(&b, "inline ref 0: parent 30474241 is not aligned");

	/* two data refs must be in descending hash order */
	blk_init(&b, 16384, BTRFS_EXTENT_TREE_OBJECTID, 0);
	p = add_extent(&b, 13631488, 4096, 2, BTRFS_EXTENT_FLAG_DATA, 58);
	{
		uint64_t h1 = ub_extent_data_ref_hash(5, 257, 0), h2 = ub_extent_data_ref_hash(5, 258, 0);
		uint64_t first = h1 > h2 ? 257 : 258, second = h1 > h2 ? 258 : 257;
		put_data_ref(p, 5, first, 0, 1);
		put_data_ref(p + 29, 5, second, 0, 1);
		expect_ok(&b);
		put_data_ref(p, 5, second, 0, 1);
		put_data_ref(p + 29, 5, first, 0, 1);
		expect_bad(&b, "inline ref 1: type 178 sequence");
	}
	put_data_ref(p, 5, 257, 100, 1);
	expect_bad(&b, "inline ref 0: data ref offset 100 is not aligned");

	/* tree block extents: length must be nodesize, tree_block_info present */
	build_extent_leaf(&b);
	set_item_key(&b, nritems(&b) - 1, 30425088, BTRFS_EXTENT_ITEM_KEY, 4096);
	expect_bad(&b, "tree block extent length 4096, expect nodesize 16384");
	blk_init(&b, 16384, BTRFS_EXTENT_TREE_OBJECTID, 0);
	add_extent(&b, 30425088, 16384, 1, BTRFS_EXTENT_FLAG_TREE_BLOCK, 10);
	expect_bad(&b, "a non-skinny tree block extent needs at least 42");
	blk_init(&b, 16384, BTRFS_EXTENT_TREE_OBJECTID, 0);
	p = add_extent(&b, 30425088, 16384, 0, BTRFS_EXTENT_FLAG_TREE_BLOCK, 18);
	UB_SET(btrfs_tree_block_info, level, p, 8);
	expect_bad(&b, "invalid tree block info level 8");
	blk_init(&b, 16384, BTRFS_EXTENT_TREE_OBJECTID, 0);
	add_extent(&b, 30425088 + 512, 4096, 0, BTRFS_EXTENT_FLAG_DATA, 0);
	expect_bad(&b, "extent start 30425600 is not aligned");
	blk_init(&b, 16384, BTRFS_EXTENT_TREE_OBJECTID, 0);
	add_extent(&b, 30425088, 4096 + 512, 0, BTRFS_EXTENT_FLAG_DATA, 0);
	expect_bad(&b, "data extent length 4608 is not aligned");
	blk_init(&b, 16384, BTRFS_EXTENT_TREE_OBJECTID, 0);
	p = add(&b, 30425088, BTRFS_METADATA_ITEM_KEY, 0, 24);
	UB_SET(btrfs_extent_item, flags, p, BTRFS_EXTENT_FLAG_DATA);
	expect_bad(&b, "data extent recorded as a METADATA_ITEM");

	/* overlapping extents */
	blk_init(&b, 16384, BTRFS_EXTENT_TREE_OBJECTID, 0);
	add_extent(&b, 13631488, 8192, 0, BTRFS_EXTENT_FLAG_DATA, 0);
	add_extent(&b, 13631488 + 4096, 4096, 0, BTRFS_EXTENT_FLAG_DATA, 0);
	expect_bad(&b, "slot 1 key (13635584 EXTENT_ITEM 4096): extent starts at 13635584 but the previous extent "
		       "(13631488 EXTENT_ITEM 8192) ends at 13639680");
	blk_init(&b, 16384, BTRFS_EXTENT_TREE_OBJECTID, 0);
	p = add(&b, 30408704, BTRFS_METADATA_ITEM_KEY, 0, 24);
	UB_SET(btrfs_extent_item, flags, p, BTRFS_EXTENT_FLAG_TREE_BLOCK);
	p = add(&b, 30408704 + 4096, BTRFS_METADATA_ITEM_KEY, 0, 24);
	UB_SET(btrfs_extent_item, flags, p, BTRFS_EXTENT_FLAG_TREE_BLOCK);
	expect_bad(&b, "ends at 30425088");
	(void)state;
}

static void test_keyed_ref_rules(void **state)
{
	static struct blk b;
	uint8_t *p;

	blk_init(&b, 16384, BTRFS_EXTENT_TREE_OBJECTID, 0);
	add(&b, 30408704, BTRFS_TREE_BLOCK_REF_KEY, 5, 8);
	expect_bad(&b, "slot 0 key (30408704 TREE_BLOCK_REF 5): invalid item size 8, expect 0");
	blk_init(&b, 16384, BTRFS_EXTENT_TREE_OBJECTID, 0);
	add(&b, 30408704, BTRFS_SHARED_DATA_REF_KEY, 30408704, 8);
	expect_bad(&b, "invalid item size 8, expect 4");
	blk_init(&b, 16384, BTRFS_EXTENT_TREE_OBJECTID, 0);
	add(&b, 30408704, BTRFS_SHARED_BLOCK_REF_KEY, 30408705, 0);
	expect_bad(&b, "parent 30408705 is not aligned");
	blk_init(&b, 16384, BTRFS_EXTENT_TREE_OBJECTID, 0);
	add(&b, 30408705, BTRFS_TREE_BLOCK_REF_KEY, 5, 0);
	expect_bad(&b, "extent start 30408705 is not aligned");

	blk_init(&b, 16384, BTRFS_EXTENT_TREE_OBJECTID, 0);
	add(&b, 13631488, BTRFS_EXTENT_DATA_REF_KEY, 1, 30);
	expect_bad(&b, "invalid item size 30, expect a multiple of 28");
	blk_init(&b, 16384, BTRFS_EXTENT_TREE_OBJECTID, 0);
	p = add(&b, 13631488, BTRFS_EXTENT_DATA_REF_KEY, 1, 56);
	UB_SET(btrfs_extent_data_ref, offset, p + 28, 4097);
	expect_bad(&b, "data ref 1: offset 4097 is not aligned");
	(void)state;
}

static void test_small_item_rules(void **state)
{
	static struct blk b;
	const struct {
		uint64_t objectid;
		uint8_t type;
		uint64_t offset;
		uint32_t size;
		const char *msg;
	} cases[] = {
		{ 0x1234, BTRFS_UUID_KEY_SUBVOL, 1, 12, "invalid item size 12, expect a multiple of 8" },
		{ 13631488, BTRFS_FREE_SPACE_INFO_KEY, 8388608, 4, "invalid item size 4, expect 8" },
		{ 13631488, BTRFS_FREE_SPACE_EXTENT_KEY, 4096, 1, "invalid item size 1, expect 0" },
		{ 13631488, BTRFS_FREE_SPACE_BITMAP_KEY, 4096 * 100, 12,
		  "invalid item size 12, expect 13 for a bitmap of 100 sectors" },
		{ 13631488, BTRFS_FREE_SPACE_BITMAP_KEY, 4096 * 100 + 1, 13, "bitmap range must be non-empty and aligned" },
		{ 13631488, BTRFS_FREE_SPACE_BITMAP_KEY, 0, 0, "bitmap range must be non-empty and aligned" },
		{ BTRFS_ORPHAN_OBJECTID, BTRFS_ORPHAN_ITEM_KEY, 257, 8, "invalid item size 8, expect 0" },
		{ 0, BTRFS_QGROUP_STATUS_KEY, 0, 36, "invalid item size 36, expect 32 or 40" },
		{ 0, BTRFS_QGROUP_INFO_KEY, 5, 32, "invalid item size 32, expect 40" },
		{ 0, BTRFS_QGROUP_LIMIT_KEY, 5, 48, "invalid item size 48, expect 40" },
		{ 5, BTRFS_QGROUP_RELATION_KEY, 1ULL << 48, 8, "invalid item size 8, expect 0" },
		{ BTRFS_DEV_STATS_OBJECTID, BTRFS_PERSISTENT_ITEM_KEY, 1, 41, "invalid item size 41, expect a multiple of 8" },
		{ 256, BTRFS_DIR_LOG_INDEX_KEY, 2, 16, "invalid item size 16, expect 8" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		blk_init(&b, 16384, BTRFS_CSUM_TREE_OBJECTID, 0);
		add(&b, cases[i].objectid, cases[i].type, cases[i].offset, cases[i].size);
		expect_bad(&b, cases[i].msg);
	}

	/* raid stripe items need the feature and whole strides */
	blk_init(&b, 16384, BTRFS_RAID_STRIPE_TREE_OBJECTID, 0);
	add(&b, 13631488, BTRFS_RAID_STRIPE_KEY, 65536, 32);
	expect_bad(&b, "RAID stripe item without the raid-stripe-tree feature");
	b.ctx.incompat_flags |= BTRFS_FEATURE_INCOMPAT_RAID_STRIPE_TREE;
	UB_SET(ub_disk_item, size, item_hdr(&b, 0), 24);
	UB_SET(ub_disk_item, offset, item_hdr(&b, 0), 16384 - UB_HEADER_SIZE - 24);
	expect_bad(&b, "invalid item size 24, expect a non-zero multiple of 16");
	UB_SET(ub_disk_item, size, item_hdr(&b, 0), 0);
	UB_SET(ub_disk_item, offset, item_hdr(&b, 0), 16384 - UB_HEADER_SIZE);
	expect_bad(&b, "invalid item size 0, expect a non-zero multiple of 16");
	(void)state;
}

static void test_item_alone_and_messages(void **state)
{
	struct ub_check_ctx ctx;
	struct ub_key k = { 256, BTRFS_INODE_ITEM_KEY, 0 };
	uint8_t item[160] = { 0 };
	char why[256], tiny[8];

	ctx_init(&ctx, 16384);
	UB_SET(btrfs_inode_item, mode, item, S_IFDIR | 0755);
	assert_int_equal(ub_tree_check_item(&k, item, sizeof(item), &ctx, why, sizeof(why)), 0);
	assert_int_equal(ub_tree_check_item(&k, item, 100, &ctx, why, sizeof(why)), -EUCLEAN);
	assert_string_equal(why, "key (256 INODE_ITEM 0): invalid item size 100, expect 160");
	/* a truncated or absent message buffer is fine */
	assert_int_equal(ub_tree_check_item(&k, item, 100, &ctx, tiny, sizeof(tiny)), -EUCLEAN);
	assert_int_equal(strlen(tiny), sizeof(tiny) - 1);
	assert_int_equal(ub_tree_check_item(&k, item, 100, &ctx, NULL, 0), -EUCLEAN);
	assert_int_equal(ub_tree_check_item(&k, NULL, 10, &ctx, why, sizeof(why)), -EINVAL);
	/* unknown types are accepted */
	k.type = 77;
	assert_int_equal(ub_tree_check_item(&k, item, 3, &ctx, why, sizeof(why)), 0);
	(void)state;
}

/* ---- real images (optional) ------------------------------------------------- */

static bool is_super_offset(uint64_t off)
{
	for (int i = 0; i < UB_SUPER_MIRROR_MAX; i++)
		if (off == (i ? (16384ULL << (UB_SUPER_MIRROR_SHIFT * i)) : UB_SUPER_INFO_OFFSET))
			return true;
	return false;
}

struct range {
	uint64_t start, len;
};

struct ranges {
	struct range r[4096];
	unsigned n;
};

static void add_range(struct ranges *rs, uint64_t start, uint64_t len)
{
	for (unsigned i = 0; i < rs->n; i++)
		if (rs->r[i].start == start)
			return;
	if (rs->n < sizeof(rs->r) / sizeof(rs->r[0]))
		rs->r[rs->n++] = (struct range){ start, len };
}

static bool in_ranges(const struct ranges *rs, uint64_t v, uint64_t len)
{
	for (unsigned i = 0; i < rs->n; i++)
		if (v >= rs->r[i].start && v - rs->r[i].start + len <= rs->r[i].len)
			return true;
	return false;
}

/* Is `blk` a tree block of this filesystem with a good checksum? */
static bool is_tree_block(const uint8_t *blk, uint64_t off, const uint8_t *fsid, unsigned csum_type,
			  const struct ub_check_ctx *ctx)
{
	uint8_t csum[UB_CSUM_SIZE_MAX];

	if (memcmp(blk + offsetof(struct ub_disk_header, fsid), fsid, UB_FSID_SIZE) || is_super_offset(off))
		return false;
	return !ub_csum(csum_type, blk + UB_CSUM_SIZE_MAX, ctx->nodesize - UB_CSUM_SIZE_MAX, csum) &&
	       !memcmp(csum, blk, ctx->csum_size);
}

struct image {
	const char *path;
	const uint8_t *map;
	uint64_t size;
	struct ub_check_ctx ctx;
	unsigned csum_type;
	uint8_t fsid[UB_FSID_SIZE];
	uint64_t chunk_root, chunk_gen;
	struct ranges *chunks; /* shared by the devices of one filesystem */
};

static bool open_image(struct image *im, const char *path)
{
	struct stat st;
	int fd = open(path, O_RDONLY);
	const uint8_t *sb;

	memset(im, 0, sizeof(*im));
	im->path = path;
	if (fd < 0 || fstat(fd, &st) || st.st_size < (off_t)(UB_SUPER_INFO_OFFSET + UB_SUPER_INFO_SIZE)) {
		print_error("%s: cannot open\n", path);
		if (fd >= 0)
			close(fd);
		return false;
	}
	im->size = (uint64_t)st.st_size;
	im->map = mmap(NULL, im->size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	assert_true(im->map != MAP_FAILED);
	sb = im->map + UB_SUPER_INFO_OFFSET;
	assert_true(UB_GET(ub_disk_super, magic, sb) == UB_MAGIC);
	im->ctx.nodesize = (uint32_t)UB_GET(ub_disk_super, nodesize, sb);
	im->ctx.sectorsize = (uint32_t)UB_GET(ub_disk_super, sectorsize, sb);
	im->csum_type = (unsigned)UB_GET(ub_disk_super, csum_type, sb);
	im->ctx.csum_size = ub_csum_size(im->csum_type);
	im->ctx.incompat_flags = UB_GET(ub_disk_super, incompat_flags, sb);
	/* Tree blocks carry the metadata uuid when the fsid was changed without rewriting them. */
	if (im->ctx.incompat_flags & BTRFS_FEATURE_INCOMPAT_METADATA_UUID)
		memcpy(im->fsid, UB_PTR(ub_disk_super, metadata_uuid, sb), UB_FSID_SIZE);
	else
		memcpy(im->fsid, UB_PTR(ub_disk_super, fsid, sb), UB_FSID_SIZE);
	im->chunk_root = UB_GET(ub_disk_super, chunk_root, sb);
	im->chunk_gen = UB_GET(ub_disk_super, chunk_root_generation, sb);
	return true;
}

/* A copy of tree block (bytenr, gen) on any device of the filesystem, found by scanning. */
static const uint8_t *find_block(struct image *ims, unsigned n, const struct image *like, uint64_t bytenr,
				 uint64_t gen)
{
	for (unsigned i = 0; i < n; i++) {
		const struct image *im = &ims[i];

		if (memcmp(im->fsid, like->fsid, UB_FSID_SIZE))
			continue;
		for (uint64_t off = 0; off + im->ctx.nodesize <= im->size; off += im->ctx.sectorsize) {
			const uint8_t *blk = im->map + off;
			if (UB_GET(ub_disk_header, bytenr, blk) == bytenr &&
			    UB_GET(ub_disk_header, generation, blk) == gen &&
			    is_tree_block(blk, off, im->fsid, im->csum_type, &im->ctx))
				return blk;
		}
	}
	return NULL;
}

/* Walk the live chunk tree from its root, noting every chunk's logical range. */
static bool collect_chunks(struct image *ims, unsigned n, const struct image *like, uint64_t bytenr, uint64_t gen,
			   struct ranges *rs, int depth)
{
	const uint32_t ns = like->ctx.nodesize;
	const uint8_t *blk = find_block(ims, n, like, bytenr, gen);
	uint32_t nr;

	if (!blk || depth > UB_MAX_LEVEL)
		return false;
	nr = (uint32_t)UB_GET(ub_disk_header, nritems, blk);
	for (uint32_t i = 0; i < nr; i++) {
		if (UB_GET(ub_disk_header, level, blk)) {
			const uint8_t *p = blk + UB_HEADER_SIZE + i * UB_KEY_PTR_SIZE;
			if (UB_HEADER_SIZE + (i + 1) * UB_KEY_PTR_SIZE > ns ||
			    !collect_chunks(ims, n, like, UB_GET(ub_disk_key_ptr, blockptr, p),
					    UB_GET(ub_disk_key_ptr, generation, p), rs, depth + 1))
				return false;
		} else {
			const uint8_t *it = blk + UB_HEADER_SIZE + i * UB_ITEM_SIZE;
			uint32_t ioff = (uint32_t)UB_GET(ub_disk_item, offset, it);
			struct ub_key k;

			if (UB_HEADER_SIZE + (i + 1) * UB_ITEM_SIZE > ns)
				return false;
			ub_key_read(&k, it);
			if (k.type == BTRFS_CHUNK_ITEM_KEY && ioff + 8ULL <= ns - UB_HEADER_SIZE)
				add_range(rs, k.offset, ub_le64(blk + UB_HEADER_SIZE + ioff));
		}
	}
	return true;
}

/*
 * Check every tree block of one device image that a reader could meet: blocks
 * whose address lies in no chunk (mkfs's temporary area, later dropped) and
 * blocks never finished (see below) are counted apart. Stale copies inside
 * live chunks are checked: whoever wrote them, wrote them as valid blocks.
 */
static unsigned scan_image(const struct image *im, unsigned *blocks, unsigned *stale, unsigned *unwritten)
{
	struct ub_check_ctx ctx = im->ctx;
	unsigned bad = 0;

	*blocks = *stale = *unwritten = 0;
	for (uint64_t off = 0; off + ctx.nodesize <= im->size; off += ctx.sectorsize) {
		const uint8_t *blk = im->map + off;
		char why[256];

		if (!is_tree_block(blk, off, im->fsid, im->csum_type, &ctx))
			continue;
		if (!in_ranges(im->chunks, UB_GET(ub_disk_header, bytenr, blk), ctx.nodesize)) {
			(*stale)++;
			continue;
		}
		/*
		 * mkfs.btrfs writes its bootstrap trees (an empty FS tree among them)
		 * without the WRITTEN flag, then builds the real ones elsewhere: such
		 * leftovers are never referenced and the kernel would refuse them.
		 */
		if (!(UB_GET(ub_disk_header, flags, blk) & BTRFS_HEADER_FLAG_WRITTEN)) {
			(*unwritten)++;
			continue;
		}
		ctx.owner = UB_GET(ub_disk_header, owner, blk);
		(*blocks)++;
		if (ub_tree_check_block(blk, &ctx, why, sizeof(why))) {
			print_error("%s: physical %" PRIu64 " bytenr %" PRIu64 " owner %" PRIu64 " level %u: %s\n",
				    im->path, off, (uint64_t)UB_GET(ub_disk_header, bytenr, blk), ctx.owner,
				    (unsigned)UB_GET(ub_disk_header, level, blk), why);
			bad++;
		}
	}
	return bad;
}

static void test_real_images(void **state)
{
	static struct image ims[256];
	static struct ranges chunks[256];
	const char *env = getenv("UB_TREE_CHECK_IMAGES");
	char *list, *save = NULL;
	unsigned bad = 0, total = 0, n = 0;

	if (!env || !*env) {
		skip();
		return;
	}
	list = strdup(env);
	assert_non_null(list);
	for (char *p = strtok_r(list, ":", &save); p && n < 256; p = strtok_r(NULL, ":", &save))
		if (open_image(&ims[n], p))
			n++;
		else
			bad++;
	for (unsigned i = 0; i < n; i++) {
		for (unsigned j = 0; j < i && !ims[i].chunks; j++)
			if (!memcmp(ims[j].fsid, ims[i].fsid, UB_FSID_SIZE))
				ims[i].chunks = ims[j].chunks;
		if (ims[i].chunks)
			continue;
		ims[i].chunks = &chunks[i];
		if (!collect_chunks(ims, n, &ims[i], ims[i].chunk_root, ims[i].chunk_gen, ims[i].chunks, 0)) {
			print_error("%s: cannot walk the chunk tree\n", ims[i].path);
			bad++;
		}
	}
	for (unsigned i = 0; i < n; i++) {
		unsigned blocks, stale, unwritten;
		unsigned b = scan_image(&ims[i], &blocks, &stale, &unwritten);

		print_message("%s: %u tree blocks, %u refused (skipped: %u unfinished, %u outside any chunk)\n",
			      ims[i].path, blocks, b, unwritten, stale);
		bad += b;
		total += blocks;
		munmap((void *)(uintptr_t)ims[i].map, ims[i].size);
	}
	free(list);
	print_message("%u tree blocks checked\n", total);
	assert_int_equal(bad, 0);
	assert_true(total > 0);
	(void)state;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_valid_fs_leaf),
		cmocka_unit_test(test_valid_other_leaves),
		cmocka_unit_test(test_valid_misc_items),
		cmocka_unit_test(test_empty_leaves),
		cmocka_unit_test(test_valid_node),
		cmocka_unit_test(test_header_rules),
		cmocka_unit_test(test_leaf_layout),
		cmocka_unit_test(test_node_rules),
		cmocka_unit_test(test_inode_rules),
		cmocka_unit_test(test_prev_inode_rule),
		cmocka_unit_test(test_dir_rules),
		cmocka_unit_test(test_inode_ref_rules),
		cmocka_unit_test(test_file_extent_rules),
		cmocka_unit_test(test_csum_rules),
		cmocka_unit_test(test_root_rules),
		cmocka_unit_test(test_chunk_rules),
		cmocka_unit_test(test_device_rules),
		cmocka_unit_test(test_block_group_rules),
		cmocka_unit_test(test_extent_item_rules),
		cmocka_unit_test(test_keyed_ref_rules),
		cmocka_unit_test(test_small_item_rules),
		cmocka_unit_test(test_item_alone_and_messages),
		cmocka_unit_test(test_real_images),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
