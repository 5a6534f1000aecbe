/* SPDX-License-Identifier: MIT */
/*
 * Keys and little-endian access: key order, the 17-byte disk key, ub_get_le /
 * ub_put_le, UB_GET against hand-placed bytes of an inode item, and the names
 * used when printing keys and block groups.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ubtrfs/format.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* ---- key order --------------------------------------------------------- */

static int sign(int v)
{
	return (v > 0) - (v < 0);
}

static void test_key_cmp_fields(void **state)
{
	struct ub_key a = { 256, BTRFS_INODE_ITEM_KEY, 0 };
	struct ub_key b = a;

	assert_int_equal(ub_key_cmp(&a, &b), 0);

	/* The objectid decides even when type and offset point the other way. */
	b = (struct ub_key){ 257, 0, 0 };
	a = (struct ub_key){ 256, 255, UINT64_MAX };
	assert_int_equal(ub_key_cmp(&a, &b), -1);
	assert_int_equal(ub_key_cmp(&b, &a), 1);

	/* Then the type, even against a larger offset. */
	a = (struct ub_key){ 256, BTRFS_INODE_REF_KEY, UINT64_MAX };
	b = (struct ub_key){ 256, BTRFS_DIR_ITEM_KEY, 0 };
	assert_int_equal(ub_key_cmp(&a, &b), -1);
	assert_int_equal(ub_key_cmp(&b, &a), 1);

	/* Then the offset. */
	a = (struct ub_key){ 256, BTRFS_DIR_ITEM_KEY, 1 };
	b = (struct ub_key){ 256, BTRFS_DIR_ITEM_KEY, 2 };
	assert_int_equal(ub_key_cmp(&a, &b), -1);
	assert_int_equal(ub_key_cmp(&b, &a), 1);
}

static void test_key_cmp_extremes(void **state)
{
	/* Unsigned throughout: "negative" objectids like TREE_RELOC sort last, bit 63 is not a sign. */
	const struct ub_key ordered[] = {
		{ 0, 0, 0 },
		{ 0, 0, 1 },
		{ 0, 0, UINT64_MAX },
		{ 0, 1, 0 },
		{ 0, 255, UINT64_MAX },
		{ 1, 0, 0 },
		{ 0x7fffffffffffffffULL, 255, UINT64_MAX },
		{ 0x8000000000000000ULL, 0, 0 },
		{ BTRFS_TREE_RELOC_OBJECTID, BTRFS_ROOT_ITEM_KEY, 5 },
		{ BTRFS_TREE_LOG_OBJECTID, BTRFS_ROOT_ITEM_KEY, 5 },
		{ UINT64_MAX, 0, 0 },
		{ UINT64_MAX, 255, UINT64_MAX - 1 },
		{ UINT64_MAX, 255, UINT64_MAX },
	};

	for (size_t i = 0; i < ARRAY_LEN(ordered); i++) {
		for (size_t j = 0; j < ARRAY_LEN(ordered); j++) {
			int want = (i > j) - (i < j);

			assert_int_equal(sign(ub_key_cmp(&ordered[i], &ordered[j])), want);
		}
	}
}

static int qsort_key_cmp(const void *a, const void *b)
{
	return ub_key_cmp(a, b);
}

static void test_key_cmp_sorts(void **state)
{
	/* A shuffled fs-tree leaf's worth of keys sorts into the order btrfs keeps them. */
	struct ub_key keys[] = {
		{ 257, BTRFS_EXTENT_DATA_KEY, 0 },
		{ 256, BTRFS_DIR_INDEX_KEY, 2 },
		{ 256, BTRFS_INODE_ITEM_KEY, 0 },
		{ 257, BTRFS_INODE_REF_KEY, 256 },
		{ 256, BTRFS_DIR_ITEM_KEY, 1096805209 },
		{ 257, BTRFS_INODE_ITEM_KEY, 0 },
		{ 256, BTRFS_INODE_REF_KEY, 256 },
		{ 257, BTRFS_EXTENT_DATA_KEY, 4096 },
	};
	const struct ub_key want[] = {
		{ 256, BTRFS_INODE_ITEM_KEY, 0 },
		{ 256, BTRFS_INODE_REF_KEY, 256 },
		{ 256, BTRFS_DIR_ITEM_KEY, 1096805209 },
		{ 256, BTRFS_DIR_INDEX_KEY, 2 },
		{ 257, BTRFS_INODE_ITEM_KEY, 0 },
		{ 257, BTRFS_INODE_REF_KEY, 256 },
		{ 257, BTRFS_EXTENT_DATA_KEY, 0 },
		{ 257, BTRFS_EXTENT_DATA_KEY, 4096 },
	};

	qsort(keys, ARRAY_LEN(keys), sizeof(keys[0]), qsort_key_cmp);
	for (size_t i = 0; i < ARRAY_LEN(keys); i++)
		assert_int_equal(ub_key_cmp(&keys[i], &want[i]), 0);
}

/* ---- the 17-byte disk key ---------------------------------------------- */

static void test_disk_key_layout(void **state)
{
	/* objectid le64, type u8, offset le64; packed, no padding. */
	static const uint8_t disk[UB_DISK_KEY_SIZE] = {
		0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x81, /* objectid */
		0xa8,                                           /* type */
		0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0xf0, /* offset */
	};
	struct ub_key k;

	assert_int_equal(UB_DISK_KEY_SIZE, 17);
	ub_key_read(&k, disk);
	assert_int_equal(k.objectid, 0x8102030405060708ULL);
	assert_int_equal(k.type, 0xa8);
	assert_int_equal(k.offset, 0xf070605040302010ULL);
}

static void test_disk_key_round_trip(void **state)
{
	const struct ub_key keys[] = {
		{ 0, 0, 0 },
		{ 256, BTRFS_INODE_ITEM_KEY, 0 },
		{ BTRFS_FREE_SPACE_OBJECTID, 0, 12345 },
		{ 13631488, BTRFS_EXTENT_DATA_REF_KEY, 1002667597946646827ULL },
		{ UINT64_MAX, 255, UINT64_MAX },
		{ 0x0123456789abcdefULL, 0x5a, 0xfedcba9876543210ULL },
	};

	for (size_t i = 0; i < ARRAY_LEN(keys); i++) {
		/* Guard bytes on both sides catch a write outside the 17 bytes. */
		uint8_t buf[1 + UB_DISK_KEY_SIZE + 1];
		struct ub_key back;

		memset(buf, 0xcc, sizeof(buf));
		ub_key_write(buf + 1, &keys[i]);
		assert_int_equal(buf[0], 0xcc);
		assert_int_equal(buf[sizeof(buf) - 1], 0xcc);
		assert_int_equal(ub_le64(buf + 1), keys[i].objectid);
		assert_int_equal(buf[1 + 8], keys[i].type);
		assert_int_equal(ub_le64(buf + 1 + 9), keys[i].offset);

		memset(&back, 0xee, sizeof(back));
		ub_key_read(&back, buf + 1);
		assert_int_equal(back.objectid, keys[i].objectid);
		assert_int_equal(back.type, keys[i].type);
		assert_int_equal(back.offset, keys[i].offset);
		assert_int_equal(ub_key_cmp(&back, &keys[i]), 0);
	}
}

/* ---- little-endian access ---------------------------------------------- */

static void test_get_le(void **state)
{
	static const uint8_t b[8] = { 0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01 };

	assert_int_equal(ub_get_le(b, 1), 0xef);
	assert_int_equal(ub_get_le(b, 2), 0xcdef);
	assert_int_equal(ub_get_le(b, 4), 0x89abcdef);
	assert_int_equal(ub_get_le(b, 8), 0x0123456789abcdefULL);
	assert_int_equal(ub_le16(b), 0xcdef);
	assert_int_equal(ub_le32(b), 0x89abcdefU);
	assert_int_equal(ub_le64(b), 0x0123456789abcdefULL);
	/* Top bits set: no sign extension anywhere. */
	static const uint8_t ff[8] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff };

	assert_int_equal(ub_get_le(ff, 1), 0xff);
	assert_int_equal(ub_get_le(ff, 2), 0xffff);
	assert_int_equal(ub_get_le(ff, 4), 0xffffffffULL);
	assert_int_equal(ub_get_le(ff, 8), UINT64_MAX);
	/* Unaligned source. */
	static const uint8_t u[9] = { 0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88 };

	assert_int_equal(ub_le32(u + 1), 0x44332211U);
	assert_int_equal(ub_le64(u + 1), 0x8877665544332211ULL);
}

static void test_put_le(void **state)
{
	static const size_t widths[] = { 1, 2, 4, 8 };
	const uint64_t v = 0x0123456789abcdefULL;

	for (size_t w = 0; w < ARRAY_LEN(widths); w++) {
		size_t n = widths[w];
		uint8_t buf[1 + 8 + 1];

		memset(buf, 0xcc, sizeof(buf));
		ub_put_le(buf + 1, n, v);
		/* Lowest byte first; only n bytes written; the value is truncated, not saturated. */
		for (size_t i = 0; i < n; i++)
			assert_int_equal(buf[1 + i], (uint8_t)(v >> (8 * i)));
		for (size_t i = 1 + n; i < sizeof(buf); i++)
			assert_int_equal(buf[i], 0xcc);
		assert_int_equal(buf[0], 0xcc);

		uint64_t mask = n == 8 ? UINT64_MAX : ((1ULL << (8 * n)) - 1);

		assert_int_equal(ub_get_le(buf + 1, n), v & mask);
	}

	uint8_t z[8];

	memset(z, 0xaa, sizeof(z));
	ub_put_le(z, 8, 0);
	assert_int_equal(ub_le64(z), 0);
	ub_put_le(z, 8, UINT64_MAX);
	assert_int_equal(ub_le64(z), UINT64_MAX);
}

/* ---- UB_GET / UB_SET on an inode item ------------------------------------ */

static void test_inode_item_fields(void **state)
{
	uint8_t ii[sizeof(struct btrfs_inode_item)];

	assert_int_equal(sizeof(ii), 160);
	memset(ii, 0, sizeof(ii));
	/* Place values at the on-disk byte offsets, independently of the struct. */
	ub_put_le(ii + 0, 8, 7);                 /* generation */
	ub_put_le(ii + 8, 8, 9);                 /* transid */
	ub_put_le(ii + 16, 8, 0x1122334455ULL);  /* size */
	ub_put_le(ii + 24, 8, 0x2000);           /* nbytes */
	ub_put_le(ii + 32, 8, 0);                /* block_group */
	ub_put_le(ii + 40, 4, 3);                /* nlink */
	ub_put_le(ii + 44, 4, 1000);             /* uid */
	ub_put_le(ii + 48, 4, 0xfffffffeU);      /* gid */
	ub_put_le(ii + 52, 4, 0100644);          /* mode */
	ub_put_le(ii + 56, 8, 0x0803);           /* rdev */
	ub_put_le(ii + 64, 8, 0x8000000000000009ULL); /* flags, incl. bit 63 */
	ub_put_le(ii + 72, 8, 42);               /* sequence */
	ub_put_le(ii + 112, 8, 1700000000);      /* atime.sec */
	ub_put_le(ii + 120, 4, 999999999);       /* atime.nsec */
	ub_put_le(ii + 124, 8, 1700000001);      /* ctime.sec */
	ub_put_le(ii + 132, 4, 1);               /* ctime.nsec */
	ub_put_le(ii + 136, 8, 1700000002);      /* mtime.sec */
	ub_put_le(ii + 144, 4, 2);               /* mtime.nsec */
	ub_put_le(ii + 148, 8, UINT64_MAX);      /* otime.sec */
	ub_put_le(ii + 156, 4, 0x89abcdefU);     /* otime.nsec, the last 4 bytes */

	assert_int_equal(UB_GET(btrfs_inode_item, generation, ii), 7);
	assert_int_equal(UB_GET(btrfs_inode_item, transid, ii), 9);
	assert_int_equal(UB_GET(btrfs_inode_item, size, ii), 0x1122334455ULL);
	assert_int_equal(UB_GET(btrfs_inode_item, nbytes, ii), 0x2000);
	assert_int_equal(UB_GET(btrfs_inode_item, block_group, ii), 0);
	assert_int_equal(UB_GET(btrfs_inode_item, nlink, ii), 3);
	assert_int_equal(UB_GET(btrfs_inode_item, uid, ii), 1000);
	assert_int_equal(UB_GET(btrfs_inode_item, gid, ii), 0xfffffffeU);
	assert_int_equal(UB_GET(btrfs_inode_item, mode, ii), 0100644);
	assert_int_equal(UB_GET(btrfs_inode_item, rdev, ii), 0x0803);
	assert_int_equal(UB_GET(btrfs_inode_item, flags, ii), 0x8000000000000009ULL);
	assert_int_equal(UB_GET(btrfs_inode_item, sequence, ii), 42);
	assert_int_equal(UB_GET(btrfs_inode_item, atime.sec, ii), 1700000000);
	assert_int_equal(UB_GET(btrfs_inode_item, atime.nsec, ii), 999999999);
	assert_int_equal(UB_GET(btrfs_inode_item, ctime.sec, ii), 1700000001);
	assert_int_equal(UB_GET(btrfs_inode_item, ctime.nsec, ii), 1);
	assert_int_equal(UB_GET(btrfs_inode_item, mtime.sec, ii), 1700000002);
	assert_int_equal(UB_GET(btrfs_inode_item, mtime.nsec, ii), 2);
	assert_int_equal(UB_GET(btrfs_inode_item, otime.sec, ii), UINT64_MAX);
	assert_int_equal(UB_GET(btrfs_inode_item, otime.nsec, ii), 0x89abcdefU);

	/* UB_SET touches exactly its field. */
	uint8_t before[sizeof(ii)];

	memcpy(before, ii, sizeof(ii));
	UB_SET(btrfs_inode_item, nlink, ii, 0xdeadbeefU);
	assert_int_equal(ub_le32(ii + 40), 0xdeadbeefU);
	assert_memory_equal(ii, before, 40);
	assert_memory_equal(ii + 44, before + 44, sizeof(ii) - 44);
}

/* ---- names ------------------------------------------------------------- */

static void test_key_type_names(void **state)
{
	static const struct {
		uint8_t type;
		const char *name;
	} v[] = {
		{ BTRFS_INODE_ITEM_KEY, "INODE_ITEM" },
		{ BTRFS_INODE_REF_KEY, "INODE_REF" },
		{ BTRFS_INODE_EXTREF_KEY, "INODE_EXTREF" },
		{ BTRFS_XATTR_ITEM_KEY, "XATTR_ITEM" },
		{ BTRFS_VERITY_DESC_ITEM_KEY, "VERITY_DESC_ITEM" },
		{ BTRFS_VERITY_MERKLE_ITEM_KEY, "VERITY_MERKLE_ITEM" },
		{ BTRFS_ORPHAN_ITEM_KEY, "ORPHAN_ITEM" },
		{ BTRFS_DIR_LOG_ITEM_KEY, "DIR_LOG_ITEM" },
		{ BTRFS_DIR_LOG_INDEX_KEY, "DIR_LOG_INDEX" },
		{ BTRFS_DIR_ITEM_KEY, "DIR_ITEM" },
		{ BTRFS_DIR_INDEX_KEY, "DIR_INDEX" },
		{ BTRFS_EXTENT_DATA_KEY, "EXTENT_DATA" },
		{ 120, "CSUM_ITEM" },
		{ BTRFS_EXTENT_CSUM_KEY, "EXTENT_CSUM" },
		{ BTRFS_ROOT_ITEM_KEY, "ROOT_ITEM" },
		{ BTRFS_ROOT_BACKREF_KEY, "ROOT_BACKREF" },
		{ BTRFS_ROOT_REF_KEY, "ROOT_REF" },
		{ BTRFS_EXTENT_ITEM_KEY, "EXTENT_ITEM" },
		{ BTRFS_METADATA_ITEM_KEY, "METADATA_ITEM" },
		{ BTRFS_EXTENT_OWNER_REF_KEY, "EXTENT_OWNER_REF" },
		{ BTRFS_TREE_BLOCK_REF_KEY, "TREE_BLOCK_REF" },
		{ BTRFS_EXTENT_DATA_REF_KEY, "EXTENT_DATA_REF" },
		{ BTRFS_EXTENT_REF_V0_KEY, "EXTENT_REF_V0" },
		{ BTRFS_SHARED_BLOCK_REF_KEY, "SHARED_BLOCK_REF" },
		{ BTRFS_SHARED_DATA_REF_KEY, "SHARED_DATA_REF" },
		{ BTRFS_BLOCK_GROUP_ITEM_KEY, "BLOCK_GROUP_ITEM" },
		{ BTRFS_FREE_SPACE_INFO_KEY, "FREE_SPACE_INFO" },
		{ BTRFS_FREE_SPACE_EXTENT_KEY, "FREE_SPACE_EXTENT" },
		{ BTRFS_FREE_SPACE_BITMAP_KEY, "FREE_SPACE_BITMAP" },
		{ BTRFS_DEV_EXTENT_KEY, "DEV_EXTENT" },
		{ BTRFS_DEV_ITEM_KEY, "DEV_ITEM" },
		{ BTRFS_CHUNK_ITEM_KEY, "CHUNK_ITEM" },
		{ BTRFS_RAID_STRIPE_KEY, "RAID_STRIPE" },
		{ BTRFS_QGROUP_STATUS_KEY, "QGROUP_STATUS" },
		{ BTRFS_QGROUP_INFO_KEY, "QGROUP_INFO" },
		{ BTRFS_QGROUP_LIMIT_KEY, "QGROUP_LIMIT" },
		{ BTRFS_QGROUP_RELATION_KEY, "QGROUP_RELATION" },
		{ BTRFS_TEMPORARY_ITEM_KEY, "TEMPORARY_ITEM" },   /* also BALANCE_ITEM */
		{ BTRFS_PERSISTENT_ITEM_KEY, "PERSISTENT_ITEM" }, /* also DEV_STATS */
		{ BTRFS_DEV_REPLACE_KEY, "DEV_REPLACE" },
		{ BTRFS_UUID_KEY_SUBVOL, "UUID_KEY_SUBVOL" },
		{ BTRFS_UUID_KEY_RECEIVED_SUBVOL, "UUID_KEY_RECEIVED_SUBVOL" },
		{ BTRFS_STRING_ITEM_KEY, "STRING_ITEM" },
	};
	int named = 0;

	for (size_t i = 0; i < ARRAY_LEN(v); i++) {
		const char *got = ub_key_type_name(v[i].type);

		assert_non_null(got);
		assert_string_equal(got, v[i].name);
	}
	/* Every other byte value is unnamed (the printer shows UNKNOWN.N), and no name repeats. */
	for (int t = 0; t < 256; t++) {
		const char *a = ub_key_type_name((uint8_t)t);

		if (!a)
			continue;
		named++;
		for (int u = t + 1; u < 256; u++) {
			const char *b = ub_key_type_name((uint8_t)u);

			assert_true(!b || strcmp(a, b) != 0);
		}
	}
	assert_int_equal(named, ARRAY_LEN(v));
	assert_null(ub_key_type_name(0));
	assert_null(ub_key_type_name(255));
}

static void test_objectid_names(void **state)
{
	static const struct {
		uint64_t id;
		const char *name;
	} v[] = {
		{ 1, "ROOT_TREE" },
		{ 2, "EXTENT_TREE" },
		{ 3, "CHUNK_TREE" },
		{ 4, "DEV_TREE" },
		{ 5, "FS_TREE" },
		{ 6, "ROOT_TREE_DIR" },
		{ 7, "CSUM_TREE" },
		{ 8, "QUOTA_TREE" },
		{ 9, "UUID_TREE" },
		{ 10, "FREE_SPACE_TREE" },
		{ 11, "BLOCK_GROUP_TREE" },
		{ 12, "RAID_STRIPE_TREE" },
		{ -4ULL, "BALANCE" },
		{ -5ULL, "ORPHAN" },
		{ -6ULL, "TREE_LOG" },
		{ -7ULL, "TREE_LOG_FIXUP" },
		{ -8ULL, "TREE_RELOC" },
		{ -9ULL, "DATA_RELOC_TREE" },
		{ -10ULL, "EXTENT_CSUM" },
		{ -11ULL, "FREE_SPACE" },
		{ -12ULL, "FREE_INO" },
		{ -13ULL, "CSUM_CHANGE" },
		{ -255ULL, "MULTIPLE" },
	};
	/* Ordinary numbers: inode numbers, subvolume ids, bytenrs, and objectids whose name depends on the key type. */
	static const uint64_t plain[] = {
		0, 13, 255, 256, 257, 1000, 13631488, -1ULL, -2ULL, -3ULL, -14ULL, -254ULL, -256ULL, 1ULL << 63,
	};

	for (size_t i = 0; i < ARRAY_LEN(v); i++) {
		const char *got = ub_objectid_name(v[i].id);

		assert_non_null(got);
		assert_string_equal(got, v[i].name);
	}
	for (size_t i = 0; i < ARRAY_LEN(plain); i++)
		assert_null(ub_objectid_name(plain[i]));
}

static void test_profile_names(void **state)
{
	static const struct {
		uint64_t flags;
		const char *name;
	} v[] = {
		{ 0, "single" },
		{ BTRFS_BLOCK_GROUP_DATA, "single" },
		{ BTRFS_BLOCK_GROUP_METADATA | BTRFS_BLOCK_GROUP_DUP, "DUP" },
		{ BTRFS_BLOCK_GROUP_SYSTEM | BTRFS_BLOCK_GROUP_DUP, "DUP" },
		{ BTRFS_BLOCK_GROUP_DATA | BTRFS_BLOCK_GROUP_RAID0, "RAID0" },
		{ BTRFS_BLOCK_GROUP_DATA | BTRFS_BLOCK_GROUP_RAID1, "RAID1" },
		{ BTRFS_BLOCK_GROUP_METADATA | BTRFS_BLOCK_GROUP_RAID1C3, "RAID1C3" },
		{ BTRFS_BLOCK_GROUP_METADATA | BTRFS_BLOCK_GROUP_RAID1C4, "RAID1C4" },
		{ BTRFS_BLOCK_GROUP_DATA | BTRFS_BLOCK_GROUP_RAID10, "RAID10" },
		{ BTRFS_BLOCK_GROUP_DATA | BTRFS_BLOCK_GROUP_RAID5, "RAID5" },
		{ BTRFS_BLOCK_GROUP_DATA | BTRFS_BLOCK_GROUP_RAID6, "RAID6" },
		{ BTRFS_BLOCK_GROUP_DATA | BTRFS_BLOCK_GROUP_METADATA, "single" }, /* mixed */
		/* The in-memory "single" marker bit is not a profile bit. */
		{ BTRFS_AVAIL_ALLOC_BIT_SINGLE | BTRFS_BLOCK_GROUP_DATA, "single" },
		{ BTRFS_BLOCK_GROUP_RAID1 | BTRFS_BLOCK_GROUP_RAID0, "UNKNOWN" },
		{ BTRFS_BLOCK_GROUP_PROFILE_MASK, "UNKNOWN" },
	};

	for (size_t i = 0; i < ARRAY_LEN(v); i++) {
		const char *got = ub_profile_name(v[i].flags);

		assert_non_null(got);
		assert_string_equal(got, v[i].name);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_key_cmp_fields),
		cmocka_unit_test(test_key_cmp_extremes),
		cmocka_unit_test(test_key_cmp_sorts),
		cmocka_unit_test(test_disk_key_layout),
		cmocka_unit_test(test_disk_key_round_trip),
		cmocka_unit_test(test_get_le),
		cmocka_unit_test(test_put_le),
		cmocka_unit_test(test_inode_item_fields),
		cmocka_unit_test(test_key_type_names),
		cmocka_unit_test(test_objectid_names),
		cmocka_unit_test(test_profile_names),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
