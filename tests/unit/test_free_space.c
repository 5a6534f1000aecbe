/* SPDX-License-Identifier: MIT */
/*
 * Range sets (lib/alloc/free_space.c) against a bitmap model: every operation
 * is applied to both, its result predicted from the bitmap, and the whole set
 * compared extent by extent after each step. Fixed seeds, bounded sizes.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "alloc/free_space.h"

#define UNIT 4096ULL
#define NUNITS 2048
#define BASE (3ULL << 30) /* an address with high bits, like a real chunk */

static uint64_t rng_state;
static uint64_t rnd(void)
{
	/* xorshift64*: deterministic per seed */
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545F4914F6CDD1DULL;
}
static uint64_t rnd_below(uint64_t n) { return rnd() % n; }

static bool model[NUNITS];

static bool model_all(uint64_t u, uint64_t n)
{
	for (uint64_t i = u; i < u + n; i++)
		if (!model[i])
			return false;
	return true;
}

static bool model_any(uint64_t u, uint64_t n)
{
	for (uint64_t i = u; i < u + n; i++)
		if (model[i])
			return true;
	return false;
}

/* The set must hold exactly the model's maximal runs. */
static void compare(const struct ub_range_set *s)
{
	assert_int_equal(ub_rs_verify(s), 0);
	uint64_t pos = 0, count = 0, bytes = 0;
	struct ub_range r;
	int i = 0;
	while (i < NUNITS) {
		if (!model[i]) {
			i++;
			continue;
		}
		int j = i;
		while (j < NUNITS && model[j])
			j++;
		assert_int_equal(ub_rs_next(s, pos, &r), 0);
		assert_int_equal(r.start, BASE + (uint64_t)i * UNIT);
		assert_int_equal(r.len, (uint64_t)(j - i) * UNIT);
		pos = r.start + r.len;
		count++;
		bytes += r.len;
		i = j;
	}
	assert_int_equal(ub_rs_next(s, pos, &r), 1);
	assert_int_equal(s->count, count);
	assert_int_equal(s->bytes, bytes);
}

/* First aligned s >= from with [s, s+len) all in the model; UINT64_MAX if none. */
static uint64_t model_first_fit(uint64_t from, uint64_t len, uint64_t align)
{
	uint64_t s = from < BASE ? BASE : from;
	s = (s + align - 1) / align * align;
	for (; s + len <= BASE + NUNITS * UNIT; s += align) {
		uint64_t u = (s - BASE) / UNIT;
		if (model_all(u, len / UNIT))
			return s;
	}
	return UINT64_MAX;
}

static void run_random(uint64_t seed, int steps)
{
	struct ub_range_set s;
	ub_rs_init(&s);
	memset(model, 0, sizeof(model));
	rng_state = seed;
	for (int step = 0; step < steps; step++) {
		uint64_t u = rnd_below(NUNITS);
		uint64_t maxn = NUNITS - u;
		uint64_t n = 1 + rnd_below(maxn < 64 ? maxn : (rnd() & 7) ? 8 : 64);
		uint64_t st = BASE + u * UNIT, len = n * UNIT;
		int op = (int)rnd_below(9);
		int ret;
		switch (op) {
		case 0:
		case 1:
		case 2: /* add */
			ret = ub_rs_add(&s, st, len);
			if (model_any(u, n)) {
				assert_int_equal(ret, -EEXIST);
			} else {
				assert_int_equal(ret, 0);
				for (uint64_t i = u; i < u + n; i++)
					model[i] = true;
			}
			break;
		case 3:
		case 4: /* remove (exact) */
			ret = ub_rs_remove(&s, st, len);
			if (model_all(u, n)) {
				assert_int_equal(ret, 0);
				for (uint64_t i = u; i < u + n; i++)
					model[i] = false;
			} else {
				assert_int_equal(ret, -ENOENT);
			}
			break;
		case 5: { /* remove_any */
			uint64_t removed = 0, expect = 0;
			for (uint64_t i = u; i < u + n; i++)
				expect += model[i];
			assert_int_equal(ub_rs_remove_any(&s, st, len, &removed), 0);
			assert_int_equal(removed, expect * UNIT);
			for (uint64_t i = u; i < u + n; i++)
				model[i] = false;
			break;
		}
		case 6: /* union */
			assert_int_equal(ub_rs_add_union(&s, st, len), 0);
			for (uint64_t i = u; i < u + n; i++)
				model[i] = true;
			break;
		case 7: { /* queries */
			uint64_t expect = 0;
			for (uint64_t i = u; i < u + n; i++)
				expect += model[i];
			assert_int_equal(ub_rs_contains(&s, st, len), model_all(u, n));
			assert_int_equal(ub_rs_overlaps(&s, st, len), model_any(u, n));
			assert_int_equal(ub_rs_bytes_in(&s, st, len), expect * UNIT);
			break;
		}
		case 8: { /* first fit */
			uint64_t align = UNIT << rnd_below(4);
			uint64_t flen = (1 + rnd_below(16)) * UNIT;
			uint64_t from = (rnd() & 1) ? 0 : st + rnd_below(UNIT);
			uint64_t got = 0;
			uint64_t want = model_first_fit(from, flen, align);
			int r = ub_rs_find(&s, from, flen, ub_rs_fit_aligned, &align, &got);
			if (want == UINT64_MAX) {
				assert_int_equal(r, 1);
			} else {
				assert_int_equal(r, 0);
				assert_int_equal(got, want);
			}
			break;
		}
		}
		compare(&s);
	}
	ub_rs_clear(&s);
}

static void test_random_seed1(void **state) { run_random(1, 6000); }
static void test_random_seed2(void **state) { run_random(0xdeadbeefULL, 6000); }
static void test_random_seed3(void **state) { run_random(42, 6000); }

static void test_merge_and_errors(void **state)
{
	struct ub_range_set s;
	struct ub_range r;
	ub_rs_init(&s);
	assert_int_equal(ub_rs_add(&s, 0, 0), -EINVAL);
	assert_int_equal(ub_rs_add(&s, UINT64_MAX - 10, 100), -EINVAL);
	assert_int_equal(ub_rs_add(&s, 100, 10), 0);
	assert_int_equal(ub_rs_add(&s, 120, 10), 0);
	assert_int_equal(s.count, 2);
	assert_int_equal(ub_rs_add(&s, 110, 10), 0); /* bridges both */
	assert_int_equal(s.count, 1);
	assert_int_equal(ub_rs_next(&s, 0, &r), 0);
	assert_int_equal(r.start, 100);
	assert_int_equal(r.len, 30);
	assert_int_equal(ub_rs_add(&s, 129, 5), -EEXIST);
	assert_int_equal(ub_rs_add(&s, 95, 6), -EEXIST);
	assert_int_equal(ub_rs_remove(&s, 99, 2), -ENOENT);
	assert_int_equal(ub_rs_remove(&s, 105, 5), 0); /* split */
	assert_int_equal(s.count, 2);
	assert_int_equal(s.bytes, 25);
	/* next from inside an extent returns that extent */
	assert_int_equal(ub_rs_next(&s, 101, &r), 0);
	assert_int_equal(r.start, 100);
	assert_int_equal(ub_rs_next(&s, 105, &r), 0);
	assert_int_equal(r.start, 110);
	assert_int_equal(ub_rs_verify(&s), 0);
	ub_rs_clear(&s);
	assert_int_equal(s.count, 0);
}

/*
 * 200k fragments: building, searching for what does not exist (the
 * longest-extent pruning must make this a tree descent, not a scan of 200k
 * extents per call) and tearing down stay fast.
 */
static void test_many_extents(void **state)
{
	struct ub_range_set s;
	ub_rs_init(&s);
	const uint64_t n = 200000;
	for (uint64_t i = 0; i < n; i++)
		assert_int_equal(ub_rs_add(&s, BASE + i * 2 * UNIT, UNIT), 0);
	assert_int_equal(s.count, n);
	/* one long extent at the very end */
	uint64_t tail = BASE + 2 * n * UNIT + 64 * UNIT;
	assert_int_equal(ub_rs_add(&s, tail, 32 * UNIT), 0);
	uint64_t align = UNIT, got = 0;
	for (int k = 0; k < 20000; k++) {
		assert_int_equal(ub_rs_find(&s, 0, 16 * UNIT, ub_rs_fit_aligned, &align, &got), 0);
		assert_int_equal(got, tail);
		assert_int_equal(ub_rs_find(&s, 0, 64 * UNIT, ub_rs_fit_aligned, &align, &got), 1);
	}
	/* fill every hole: one extent remains */
	for (uint64_t i = 0; i < n; i++)
		assert_int_equal(ub_rs_add(&s, BASE + (i * 2 + 1) * UNIT, UNIT), 0);
	assert_int_equal(ub_rs_verify(&s), 0);
	assert_int_equal(s.count, 2);
	ub_rs_clear(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_merge_and_errors),
		cmocka_unit_test(test_random_seed1),
		cmocka_unit_test(test_random_seed2),
		cmocka_unit_test(test_random_seed3),
		cmocka_unit_test(test_many_extents),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
