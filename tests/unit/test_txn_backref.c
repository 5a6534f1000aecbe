/* SPDX-License-Identifier: MIT */
/*
 * The transaction's byte-level pieces: inline back references in extent
 * items (order, sizes, counts), the superblock's backup root rotation, and
 * which filesystems a read-write open refuses.
 *
 * Oracle for the ref layout: the tree checker (lib/tree/tree_check.c, written
 * from the kernel's rules independently of lib/txn), which must accept every
 * extent item built here, and the format's struct sizes.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tree/tree_check.h"
#include "txn/backref.h"
#include "txn/commit.h"

static const struct ub_check_ctx ctx = {
	.nodesize = 16384,
	.sectorsize = 4096,
	.csum_size = 4,
	.incompat_flags = BTRFS_FEATURE_INCOMPAT_SKINNY_METADATA,
	.owner = BTRFS_EXTENT_TREE_OBJECTID,
};

/* Add `r` with count to the item in buf (size in/out) the way the engine does: find, then insert or bump. */
static void add_ref(uint8_t *buf, uint32_t *size, const struct ub_ref *r, uint32_t count)
{
	uint32_t pos, have, isz = ub_ref_inline_size(r->type);
	int ret = ub_inline_ref_find(buf, *size, UB_EXTENT_ITEM_SIZE, r, &pos, &have);

	assert_true(ret >= 0);
	if (ret == 0) {
		ub_inline_ref_set_count(buf + pos, r->type, have + count);
	} else {
		memmove(buf + pos + isz, buf + pos, *size - pos);
		ub_inline_ref_write(buf + pos, r, count);
		*size += isz;
	}
	UB_SET(btrfs_extent_item, refs, buf, UB_GET(btrfs_extent_item, refs, buf) + count);
}

static void drop_ref(uint8_t *buf, uint32_t *size, const struct ub_ref *r)
{
	uint32_t pos, have, isz = ub_ref_inline_size(r->type);

	assert_int_equal(ub_inline_ref_find(buf, *size, UB_EXTENT_ITEM_SIZE, r, &pos, &have), 0);
	if (have > 1) {
		ub_inline_ref_set_count(buf + pos, r->type, have - 1);
	} else {
		memmove(buf + pos, buf + pos + isz, *size - pos - isz);
		*size -= isz;
	}
	UB_SET(btrfs_extent_item, refs, buf, UB_GET(btrfs_extent_item, refs, buf) - 1);
}

static void check_item(const uint8_t *buf, uint32_t size, bool data, uint64_t bytenr)
{
	struct ub_key key = { bytenr, data ? BTRFS_EXTENT_ITEM_KEY : BTRFS_METADATA_ITEM_KEY, data ? 1 << 20 : 1 };
	char why[256] = "";
	int ret = ub_tree_check_item(&key, buf, size, &ctx, why, sizeof(why));

	if (ret)
		fail_msg("tree checker refused the item: %s", why);
}

static void new_item(uint8_t *buf, uint32_t *size, uint64_t flags)
{
	memset(buf, 0, 4096);
	UB_SET(btrfs_extent_item, generation, buf, 7);
	UB_SET(btrfs_extent_item, flags, buf, flags);
	*size = UB_EXTENT_ITEM_SIZE;
}

static void test_sizes(void **state)
{
	(void)state;
	assert_int_equal(ub_ref_inline_size(BTRFS_TREE_BLOCK_REF_KEY), 9);
	assert_int_equal(ub_ref_inline_size(BTRFS_SHARED_BLOCK_REF_KEY), 9);
	assert_int_equal(ub_ref_inline_size(BTRFS_EXTENT_DATA_REF_KEY), 29);
	assert_int_equal(ub_ref_inline_size(BTRFS_SHARED_DATA_REF_KEY), 13);
	assert_int_equal(ub_ref_inline_size(BTRFS_EXTENT_OWNER_REF_KEY), 0);
	assert_int_equal(ub_ref_keyed_size(BTRFS_EXTENT_DATA_REF_KEY), 28);
	assert_int_equal(ub_ref_keyed_size(BTRFS_SHARED_DATA_REF_KEY), 4);
	assert_int_equal(ub_ref_keyed_size(BTRFS_TREE_BLOCK_REF_KEY), 0);
	/* the kernel's BTRFS_MAX_EXTENT_ITEM_SIZE: (leaf data size / 16) - item header */
	assert_int_equal(ub_max_extent_item_size(4096), (4096 - 101) / 16 - 25);
	assert_int_equal(ub_max_extent_item_size(16384), (16384 - 101) / 16 - 25);
}

/* Tree block refs added in a scrambled order come out sorted as the checker wants. */
static void test_tree_refs_order(void **state)
{
	static const uint64_t roots[] = { 5, 300, 257, 1000, 256, 7 };
	static const uint64_t parents[] = { 30408704, 1 << 22, 30425088 };
	uint8_t buf[4096];
	uint32_t size;
	(void)state;

	new_item(buf, &size, BTRFS_EXTENT_FLAG_TREE_BLOCK | BTRFS_BLOCK_FLAG_FULL_BACKREF);
	for (size_t i = 0; i < 3; i++) {
		struct ub_ref r = { .type = BTRFS_SHARED_BLOCK_REF_KEY, .parent = parents[i] };
		add_ref(buf, &size, &r, 1);
		struct ub_ref t = { .type = BTRFS_TREE_BLOCK_REF_KEY, .root = roots[i] };
		add_ref(buf, &size, &t, 1);
		check_item(buf, size, false, 1 << 30);
	}
	for (size_t i = 3; i < 6; i++) {
		struct ub_ref t = { .type = BTRFS_TREE_BLOCK_REF_KEY, .root = roots[i] };
		add_ref(buf, &size, &t, 1);
		check_item(buf, size, false, 1 << 30);
	}
	assert_int_equal(size, UB_EXTENT_ITEM_SIZE + 9 * 9);
	assert_int_equal(UB_GET(btrfs_extent_item, refs, buf), 9);
	/* TREE_BLOCK_REF (176) before SHARED_BLOCK_REF (182); within a type the largest offset first */
	assert_int_equal(buf[UB_EXTENT_ITEM_SIZE], BTRFS_TREE_BLOCK_REF_KEY);
	assert_int_equal(ub_le64(buf + UB_EXTENT_ITEM_SIZE + 1), 1000);
	assert_int_equal(buf[UB_EXTENT_ITEM_SIZE + 6 * 9], BTRFS_SHARED_BLOCK_REF_KEY);
	assert_int_equal(ub_le64(buf + UB_EXTENT_ITEM_SIZE + 6 * 9 + 1), 30425088);

	/* drop some: still sorted, and the found positions move with the removals */
	struct ub_ref d1 = { .type = BTRFS_TREE_BLOCK_REF_KEY, .root = 257 };
	struct ub_ref d2 = { .type = BTRFS_SHARED_BLOCK_REF_KEY, .parent = 1 << 22 };
	drop_ref(buf, &size, &d1);
	drop_ref(buf, &size, &d2);
	check_item(buf, size, false, 1 << 30);
	uint32_t pos, count;
	assert_int_equal(ub_inline_ref_find(buf, size, UB_EXTENT_ITEM_SIZE, &d1, &pos, &count), 1);
	assert_int_equal(ub_inline_ref_find(buf, size, UB_EXTENT_ITEM_SIZE, &d2, &pos, &count), 1);
	assert_int_equal(UB_GET(btrfs_extent_item, refs, buf), 7);
}

/* Data refs: EXTENT_DATA_REF ordered by hash (descending), counts kept, SHARED_DATA_REF after them. */
static void test_data_refs(void **state)
{
	uint8_t buf[4096];
	uint32_t size, pos, count;
	(void)state;

	new_item(buf, &size, BTRFS_EXTENT_FLAG_DATA);
	for (uint64_t ino = 257; ino < 265; ino++) {
		struct ub_ref r = { .type = BTRFS_EXTENT_DATA_REF_KEY, .root = 5, .owner = ino, .offset = 4096 * ino };
		add_ref(buf, &size, &r, 1);
		check_item(buf, size, true, 1 << 30);
	}
	struct ub_ref s = { .type = BTRFS_SHARED_DATA_REF_KEY, .parent = 1 << 24 };
	add_ref(buf, &size, &s, 3);
	check_item(buf, size, true, 1 << 30);
	struct ub_ref again = { .type = BTRFS_EXTENT_DATA_REF_KEY, .root = 5, .owner = 260, .offset = 4096 * 260 };
	add_ref(buf, &size, &again, 2);
	check_item(buf, size, true, 1 << 30);
	assert_int_equal(ub_inline_ref_find(buf, size, UB_EXTENT_ITEM_SIZE, &again, &pos, &count), 0);
	assert_int_equal(count, 3);
	assert_int_equal(ub_inline_ref_find(buf, size, UB_EXTENT_ITEM_SIZE, &s, &pos, &count), 0);
	assert_int_equal(count, 3);
	assert_int_equal(pos, size - 13);
	assert_int_equal(UB_GET(btrfs_extent_item, refs, buf), 8 + 3 + 2);
	/* the hash order is strictly the checker's: drop to one ref per type and re-add */
	for (uint64_t ino = 257; ino < 264; ino++) {
		struct ub_ref r = { .type = BTRFS_EXTENT_DATA_REF_KEY, .root = 5, .owner = ino, .offset = 4096 * ino };
		while (ub_inline_ref_find(buf, size, UB_EXTENT_ITEM_SIZE, &r, &pos, &count) == 0)
			drop_ref(buf, &size, &r);
		check_item(buf, size, true, 1 << 30);
	}
}

static void test_parse_errors(void **state)
{
	uint8_t buf[64] = { 0 };
	uint32_t pos, count;
	struct ub_ref r = { .type = BTRFS_TREE_BLOCK_REF_KEY, .root = 5 };
	(void)state;

	assert_int_equal(ub_inline_ref_find(buf, 10, UB_EXTENT_ITEM_SIZE, &r, &pos, &count), -EUCLEAN);
	/* an unknown ref type, and a ref cut by the item end */
	buf[UB_EXTENT_ITEM_SIZE] = 99;
	assert_int_equal(ub_inline_ref_find(buf, UB_EXTENT_ITEM_SIZE + 9, UB_EXTENT_ITEM_SIZE, &r, &pos, &count), -EUCLEAN);
	buf[UB_EXTENT_ITEM_SIZE] = BTRFS_EXTENT_DATA_REF_KEY;
	assert_int_equal(ub_inline_ref_find(buf, UB_EXTENT_ITEM_SIZE + 9, UB_EXTENT_ITEM_SIZE, &r, &pos, &count), -EUCLEAN);
	/* empty item: insert at its end */
	assert_int_equal(ub_inline_ref_find(buf, UB_EXTENT_ITEM_SIZE, UB_EXTENT_ITEM_SIZE, &r, &pos, &count), 1);
	assert_int_equal(pos, UB_EXTENT_ITEM_SIZE);
}

static void test_keyed(void **state)
{
	uint8_t body[28];
	struct ub_key k;
	struct ub_ref r = { .type = BTRFS_EXTENT_DATA_REF_KEY, .root = 5, .owner = 300, .offset = 8192 };
	(void)state;

	ub_ref_key(&r, 1 << 20, &k);
	assert_int_equal(k.objectid, 1 << 20);
	assert_int_equal(k.type, BTRFS_EXTENT_DATA_REF_KEY);
	assert_true(k.offset == ub_extent_data_ref_hash(5, 300, 8192));
	ub_keyed_ref_write(body, &r, 4);
	assert_true(ub_keyed_data_ref_match(body, sizeof(body), &r));
	assert_int_equal(ub_keyed_ref_count(&k, body, sizeof(body)), 4);
	r.offset = 0;
	assert_false(ub_keyed_data_ref_match(body, sizeof(body), &r));
	struct ub_ref t = { .type = BTRFS_SHARED_BLOCK_REF_KEY, .parent = 1 << 22 };
	ub_ref_key(&t, 1 << 20, &k);
	assert_int_equal(k.offset, 1 << 22);
	assert_int_equal(ub_keyed_ref_count(&k, NULL, 0), 1);
	char why[256];
	struct ub_ref sd = { .type = BTRFS_SHARED_DATA_REF_KEY, .parent = 1 << 22 };
	ub_ref_key(&sd, 1 << 20, &k);
	ub_keyed_ref_write(body, &sd, 9);
	assert_int_equal(ub_keyed_ref_count(&k, body, 4), 9);
	assert_int_equal(ub_tree_check_item(&k, body, 4, &ctx, why, sizeof(why)), 0);
}

/* ---- superblock backup roots ---- */

static uint8_t *slot(uint8_t *sb, int i)
{
	return sb + offsetof(struct ub_disk_super, super_roots) + (size_t)i * sizeof(struct ub_disk_root_backup);
}

static void test_backup_rotation(void **state)
{
	static uint8_t sb[UB_SUPER_INFO_SIZE];
	(void)state;

	memset(sb, 0, sizeof(sb));
	UB_SET(ub_disk_super, generation, sb, 6);
	UB_SET(ub_disk_super, total_bytes, sb, 1 << 30);
	UB_SET(ub_disk_super, num_devices, sb, 2);
	UB_SET(ub_disk_super, log_root, sb, 12345);
	/* no slot holds generation 6 (mkfs leaves them empty): start at 0 */
	assert_int_equal(ub_backup_next_slot(sb), 0);
	UB_SET(ub_disk_root_backup, tree_root_gen, slot(sb, 2), 6);
	assert_int_equal(ub_backup_next_slot(sb), 3);

	for (uint64_t gen = 7; gen < 7 + 9; gen++) {
		int expect = ub_backup_next_slot(sb);
		struct ub_commit_roots c = {
			.generation = gen,
			.root = { 1, gen * 16384, gen, 1 },
			.chunk = { 3, 22020096, 5, 0 },
			.extent = { 2, gen * 16384 + 4096, gen, 2 },
			.fs = { 5, gen * 16384 + 8192, gen - 1, 1 },
			.dev = { 4, 30000000, 3, 0 },
			.csum = { 7, 30004096, 4, 0 },
			.bytes_used = gen * 1000,
		};
		ub_super_set_commit(sb, &c);
		uint8_t *b = slot(sb, expect);
		assert_int_equal(expect, (int)((gen - 7 + 3) % 4));
		assert_int_equal(UB_GET(ub_disk_super, generation, sb), gen);
		assert_int_equal(UB_GET(ub_disk_super, root, sb), gen * 16384);
		assert_int_equal(UB_GET(ub_disk_super, root_level, sb), 1);
		assert_int_equal(UB_GET(ub_disk_super, chunk_root_generation, sb), 5);
		assert_int_equal(UB_GET(ub_disk_super, bytes_used, sb), gen * 1000);
		assert_int_equal(UB_GET(ub_disk_super, log_root, sb), 0);
		assert_int_equal(UB_GET(ub_disk_root_backup, tree_root_gen, b), gen);
		assert_int_equal(UB_GET(ub_disk_root_backup, extent_root_level, b), 2);
		assert_int_equal(UB_GET(ub_disk_root_backup, fs_root_gen, b), gen - 1);
		assert_int_equal(UB_GET(ub_disk_root_backup, csum_root, b), 30004096);
		assert_int_equal(UB_GET(ub_disk_root_backup, total_bytes, b), 1 << 30);
		assert_int_equal(UB_GET(ub_disk_root_backup, num_devices, b), 2);
		/* the slot the next commit takes is the one after */
		assert_int_equal(ub_backup_next_slot(sb), (expect + 1) % 4);
	}
}

/* ---- read-write open refusals ---- */

static void features_case_md(uint64_t incompat, uint64_t compat_ro, uint64_t flags, uint64_t log_root, bool metadump_ok,
			     int expect, const char *needle)
{
	static uint8_t sb[UB_SUPER_INFO_SIZE];
	char why[256] = "";

	memset(sb, 0, sizeof(sb));
	UB_SET(ub_disk_super, incompat_flags, sb, incompat);
	UB_SET(ub_disk_super, compat_ro_flags, sb, compat_ro);
	UB_SET(ub_disk_super, flags, sb, flags);
	UB_SET(ub_disk_super, log_root, sb, log_root);
	assert_int_equal(ub_engine_check_features(sb, metadump_ok, why, sizeof(why)), expect);
	if (needle && !strstr(why, needle))
		fail_msg("reason \"%s\" does not name \"%s\"", why, needle);
}

static void features_case(uint64_t incompat, uint64_t compat_ro, uint64_t flags, uint64_t log_root, int expect,
			  const char *needle)
{
	features_case_md(incompat, compat_ro, flags, log_root, false, expect, needle);
}

static void test_features(void **state)
{
	const uint64_t def = BTRFS_FEATURE_INCOMPAT_MIXED_BACKREF | BTRFS_FEATURE_INCOMPAT_BIG_METADATA |
			     BTRFS_FEATURE_INCOMPAT_EXTENDED_IREF | BTRFS_FEATURE_INCOMPAT_SKINNY_METADATA |
			     BTRFS_FEATURE_INCOMPAT_NO_HOLES;
	const uint64_t fst = BTRFS_FEATURE_COMPAT_RO_FREE_SPACE_TREE | BTRFS_FEATURE_COMPAT_RO_FREE_SPACE_TREE_VALID;
	(void)state;

	features_case(def, fst, 0, 0, 0, NULL);
	features_case(def | BTRFS_FEATURE_INCOMPAT_RAID56 | BTRFS_FEATURE_INCOMPAT_RAID1C34, fst, 0, 0, 0, NULL);
	features_case(def | BTRFS_FEATURE_INCOMPAT_MIXED_GROUPS, fst, 0, 0, -EOPNOTSUPP, "mixed");
	features_case(def | BTRFS_FEATURE_INCOMPAT_RAID_STRIPE_TREE, fst, 0, 0, -EOPNOTSUPP, "raid-stripe");
	features_case(def | BTRFS_FEATURE_INCOMPAT_SIMPLE_QUOTA, fst, 0, 0, -EOPNOTSUPP, "quota");
	features_case(def | BTRFS_FEATURE_INCOMPAT_EXTENT_TREE_V2, fst, 0, 0, -EOPNOTSUPP, "extent-tree-v2");
	features_case(def | BTRFS_FEATURE_INCOMPAT_ZONED, fst, 0, 0, -EOPNOTSUPP, "zoned");
	features_case(def | (1ULL << 40), fst, 0, 0, -EOPNOTSUPP, "0x10000000000");
	features_case(def, fst | BTRFS_FEATURE_COMPAT_RO_BLOCK_GROUP_TREE, 0, 0, -EOPNOTSUPP, "block group tree");
	features_case(def, fst | (1ULL << 20), 0, 0, -EOPNOTSUPP, "0x100000");
	features_case(def, BTRFS_FEATURE_COMPAT_RO_FREE_SPACE_TREE, 0, 0, -EOPNOTSUPP, "VALID");
	/* without skinny-metadata, tree blocks' items take the older form (extent_tree.c) */
	features_case(def & ~BTRFS_FEATURE_INCOMPAT_SKINNY_METADATA, fst, 0, 0, 0, NULL);
	features_case(def, fst, BTRFS_SUPER_FLAG_SEEDING, 0, -EOPNOTSUPP, "seed");
	features_case(def, fst, BTRFS_SUPER_FLAG_METADUMP_V2, 0, -EOPNOTSUPP, "metadata dump");
	/* a repair writes a metadata dump, as btrfs check --repair does */
	features_case_md(def, fst, BTRFS_SUPER_FLAG_METADUMP_V2, 0, true, 0, NULL);
	features_case(def, fst, 0, 30408704, 0, NULL); /* a pending log is replayed at open (log_commit.c) */
	/* no free space tree (the v1 space cache, or none): the open makes one (space_convert.c) */
	features_case(def, 0, 0, 0, 0, NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sizes),
		cmocka_unit_test(test_tree_refs_order),
		cmocka_unit_test(test_data_refs),
		cmocka_unit_test(test_parse_errors),
		cmocka_unit_test(test_keyed),
		cmocka_unit_test(test_backup_rotation),
		cmocka_unit_test(test_features),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
