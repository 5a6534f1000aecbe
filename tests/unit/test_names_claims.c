/* SPDX-License-Identifier: MIT */
/*
 * Names that cannot be path components (ub_name_valid / ub_name_problem /
 * ub_name_escape), and superblock claims that contradict what the filesystem
 * can hold (ub_super_validate on a real mkfs superblock with one field changed
 * and its checksum recomputed).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ubtrfs/fs.h"

static void test_names(void **state)
{
	char long_name[300];

	(void)state;
	memset(long_name, 'a', sizeof(long_name));
	assert_true(ub_name_valid("a", 1));
	assert_true(ub_name_valid("...", 3));
	assert_true(ub_name_valid(".hidden", 7));
	assert_true(ub_name_valid("\xff\xfe", 2)); /* bytes that are not UTF-8 are a valid name */
	assert_true(ub_name_valid(long_name, 255));
	assert_false(ub_name_valid(long_name, 256));
	assert_false(ub_name_valid("", 0));
	assert_false(ub_name_valid(".", 1));
	assert_false(ub_name_valid("..", 2));
	assert_false(ub_name_valid("a/b", 3));
	assert_false(ub_name_valid("/", 1));
	assert_false(ub_name_valid("a\0b", 3));
	assert_string_equal(ub_name_problem("a/b", 3), "name contains '/'");
	assert_string_equal(ub_name_problem("a\0b", 3), "name contains a NUL byte");
	assert_string_equal(ub_name_problem("", 0), "empty name");
	assert_null(ub_name_problem("ok", 2));
}

static void test_escape(void **state)
{
	char out[64];

	(void)state;
	ub_name_escape("a\0b\n\"\\\xff", 7, out, sizeof(out));
	assert_string_equal(out, "a\\x00b\\x0a\\x22\\x5c\\xff");
	ub_name_escape("abcdefghijklmnopqrstuvwxyz", 26, out, 12);
	/* cut short, and saying so */
	assert_true(strlen(out) < 12 && strlen(out) > 3);
	assert_string_equal(out + strlen(out) - 3, "...");
	assert_memory_equal(out, "abcdefghijklmnopqrstuvwxyz", strlen(out) - 3);
}

#define SUPER_OFF 65536

static int load_super(uint8_t *sb)
{
	const char *path = "tests/fuzz/corpus_super/mkfs_crc32c";
	FILE *f = fopen(path, "rb");
	size_t n;

	if (!f)
		return -1;
	n = fread(sb, 1, UB_SUPER_INFO_SIZE, f);
	fclose(f);
	return n == UB_SUPER_INFO_SIZE ? 0 : -1;
}

static void fix_csum(uint8_t *sb)
{
	uint8_t csum[UB_CSUM_SIZE_MAX];

	assert_int_equal(ub_csum(UB_GET(ub_disk_super, csum_type, sb), sb + UB_CSUM_SIZE_MAX,
				 UB_SUPER_INFO_SIZE - UB_CSUM_SIZE_MAX, csum), 0);
	memcpy(sb, csum, UB_CSUM_SIZE_MAX);
}

static void put_le(uint8_t *p, uint64_t v, int n)
{
	for (int i = 0; i < n; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void test_super_claims(void **state)
{
	uint8_t sb[UB_SUPER_INFO_SIZE], bad[UB_SUPER_INFO_SIZE];
	char why[200];
	const size_t num_devices = offsetof(struct ub_disk_super, num_devices);
	const size_t sys_size = offsetof(struct ub_disk_super, sys_chunk_array_size);
	const size_t dev_total = offsetof(struct ub_disk_super, dev_item) +
				 offsetof(struct btrfs_dev_item, total_bytes);

	(void)state;
	if (load_super(sb))
		skip();
	/* the corpus file is the superblock as read from 64 KiB, bytenr included */
	assert_int_equal(ub_super_validate(sb, UB_GET(ub_disk_super, bytenr, sb), why, sizeof(why)), 0);

	memcpy(bad, sb, sizeof(bad));
	put_le(bad + num_devices, 1ULL << 40, 8);
	fix_csum(bad);
	assert_int_equal(ub_super_validate(bad, UB_GET(ub_disk_super, bytenr, bad), why, sizeof(why)), -EUCLEAN);
	assert_non_null(strstr(why, "num_devices 1099511627776"));

	memcpy(bad, sb, sizeof(bad));
	put_le(bad + sys_size, 20, 4);
	fix_csum(bad);
	assert_int_equal(ub_super_validate(bad, UB_GET(ub_disk_super, bytenr, bad), why, sizeof(why)), -EUCLEAN);
	assert_non_null(strstr(why, "system chunk array"));

	memcpy(bad, sb, sizeof(bad));
	put_le(bad + dev_total, UB_GET(ub_disk_super, total_bytes, sb) + 4096, 8);
	fix_csum(bad);
	assert_int_equal(ub_super_validate(bad, UB_GET(ub_disk_super, bytenr, bad), why, sizeof(why)), -EUCLEAN);
	assert_non_null(strstr(why, "total_bytes"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_escape),
		cmocka_unit_test(test_super_claims),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
