/* SPDX-License-Identifier: MIT */
/*
 * ub_chunk_next_removable (lib/alloc/chunk_remove.c) on block groups built in
 * memory: the kernel's btrfs_delete_unused_bgs rule (nothing used, reserved
 * or pinned; never the last group of a type and profile).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "alloc/chunk_alloc.h"

#define MiB (1024ULL * 1024ULL)
#define GiB (1024ULL * MiB)
#define META (BTRFS_BLOCK_GROUP_METADATA | BTRFS_BLOCK_GROUP_DUP)
#define DATA BTRFS_BLOCK_GROUP_DATA

static void test_removable_rule(void **state)
{
	struct ub_alloc *a = NULL;
	struct ub_log quiet = { 0 };
	uint64_t at;
	(void)state;
	quiet.verbosity = -1;
	assert_int_equal(ub_alloc_create(NULL, &quiet, &a), 0);
	assert_int_equal(ub_chunk_next_removable(a, 0, &at), 1);
	/* one group of a type is never removed, however empty */
	assert_int_equal(ub_alloc_add_block_group(a, META, 1 * GiB, 32 * MiB), 0);
	assert_int_equal(ub_alloc_add_block_group(a, DATA, 2 * GiB, 64 * MiB), 0);
	assert_int_equal(ub_chunk_next_removable(a, 0, &at), 1);
	/* a second empty metadata group: either may go; the first found is the lower */
	assert_int_equal(ub_alloc_add_block_group(a, META, 3 * GiB, 32 * MiB), 0);
	assert_int_equal(ub_chunk_next_removable(a, 0, &at), 0);
	assert_int_equal(at, 1 * GiB);
	assert_int_equal(ub_chunk_next_removable(a, 1 * GiB + 1, &at), 0);
	assert_int_equal(at, 3 * GiB);
	/* reserved, then used, keeps a group */
	assert_int_equal(ub_alloc_reserve_at(a, 1 * GiB, 16384), 0);
	assert_int_equal(ub_chunk_next_removable(a, 0, &at), 0);
	assert_int_equal(at, 3 * GiB);
	assert_int_equal(ub_alloc_account(a, 1 * GiB, 16384, true), 0);
	assert_int_equal(ub_chunk_next_removable(a, 0, &at), 0);
	assert_int_equal(at, 3 * GiB);
	/* freed in this transaction: pinned, still kept until the commit unpins it */
	assert_int_equal(ub_alloc_account(a, 1 * GiB, 16384, false), 0);
	assert_int_equal(ub_alloc_pin(a, 1 * GiB, 16384), 0);
	assert_int_equal(ub_chunk_next_removable(a, 0, &at), 0);
	assert_int_equal(at, 3 * GiB);
	/* another profile is another type: a lone DUP data group stays */
	assert_int_equal(ub_alloc_add_block_group(a, DATA | BTRFS_BLOCK_GROUP_DUP, 4 * GiB, 64 * MiB), 0);
	assert_int_equal(ub_chunk_next_removable(a, 3 * GiB + 1, &at), 1);
	ub_alloc_free(a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_removable_rule),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
