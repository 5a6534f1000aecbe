/* SPDX-License-Identifier: MIT */
/*
 * The checker's map of tree blocks reached: pointers counted per address,
 * the first tree's tag kept, growth past many rehashes, and the sorted array
 * the extent checks merge against.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "check/check_priv.h"

static void test_add_counts_and_keeps_first_tag(void **state)
{
	struct chk_block_map m = { 0 };
	struct chk_block *b;

	(void)state;
	assert_int_equal(chk_block_map_add(&m, 16384, 1, &b), 0);
	b->ptrs++;
	assert_int_equal(chk_block_map_add(&m, 16384, 2, &b), 1);
	b->ptrs++;
	assert_int_equal(b->tag, 1);
	assert_int_equal(b->ptrs, 2);
	/* address 0 is the empty slot: never a block */
	assert_int_equal(chk_block_map_add(&m, 0, 1, &b), -EINVAL);
	assert_int_equal(m.n, 1);
	chk_block_map_free(&m);
}

static void test_grows_and_sorts(void **state)
{
	struct chk_block_map m = { 0 };
	struct chk_block *b;
	const uint64_t n = 50000;

	(void)state;
	/* a scattered order, multiples of the node size as real addresses are */
	for (uint64_t i = 0; i < n; i++) {
		uint64_t addr = ((i * 7919) % n + 1) * 16384;

		assert_int_equal(chk_block_map_add(&m, addr, (uint32_t)(i % 5 + 1), &b), 0);
		b->ptrs = 1;
	}
	for (uint64_t i = 0; i < n; i += 97) {
		assert_int_equal(chk_block_map_add(&m, (i + 1) * 16384, 9, &b), 1);
		b->ptrs++;
	}
	assert_int_equal(m.n, n);
	chk_block_map_sort(&m);
	assert_int_equal(m.n, n);
	for (uint64_t i = 0; i < n; i++) {
		assert_int_equal(m.v[i].addr, (i + 1) * 16384);
		assert_int_equal(m.v[i].ptrs, i % 97 == 0 ? 2 : 1);
	}
	chk_block_map_free(&m);
	assert_null(m.v);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_add_counts_and_keeps_first_tag),
		cmocka_unit_test(test_grows_and_sorts),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
