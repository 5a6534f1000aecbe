/* SPDX-License-Identifier: MIT */
/*
 * RAID5/6 parity algebra (lib/volume/raid_math.c): the parity it generates is
 * compared with a slow byte-at-a-time reference written here from the
 * definition (P = XOR of the data, Q = sum of 2^i * D_i in GF(2^8) modulo
 * x^8+x^4+x^3+x^2+1), so that a wrong Q convention cannot pass; then every
 * loss the profile tolerates is rebuilt byte for byte from poisoned buffers,
 * and one loss more must fail.
 *
 * Lengths cover the vectorised path (multiples of 32) and the table path
 * (anything else), buffers with 64- and 16-byte alignment.
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

#include "volume/volume_internal.h"

/* ---- test-only reference ------------------------------------------------ */

/* Carry-less multiply reduced by 0x11d, one bit at a time: slow but obviously right. */
static uint8_t ref_gf_mul(uint8_t a, uint8_t b)
{
	unsigned acc = 0, x = a;

	for (int bit = 0; bit < 8; bit++) {
		if (b & (1u << bit))
			acc ^= x;
		x <<= 1;
		if (x & 0x100)
			x ^= 0x11d;
	}
	return (uint8_t)acc;
}

static void ref_parity(int ndata, int nparity, uint8_t *const *data, size_t len, uint8_t *p, uint8_t *q)
{
	for (size_t b = 0; b < len; b++) {
		uint8_t pv = 0, qv = 0, g = 1;

		for (int i = 0; i < ndata; i++) {
			pv ^= data[i][b];
			qv ^= ref_gf_mul(g, data[i][b]);
			g = ref_gf_mul(g, 2);
		}
		p[b] = pv;
		if (nparity == 2)
			q[b] = qv;
	}
}

/* ---- helpers ------------------------------------------------------------ */

static uint64_t rng_next(uint64_t *s)
{
	/* xorshift64*: reproducible across libcs, unlike rand() */
	uint64_t x = *s;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545F4914F6CDD1DULL;
}

static void fill_random(uint8_t *buf, size_t len, uint64_t *s)
{
	for (size_t i = 0; i < len; i++)
		buf[i] = (uint8_t)(rng_next(s) >> 56);
}

/* One full stripe in memory: `total` stripes of `len` bytes, plus a pristine copy. */
struct set {
	int ndata, nparity, total;
	size_t len, pitch;
	uint8_t *block, *orig_block;
	uint8_t *s[UB_RAID_MAX_STRIPES];
	uint8_t *orig[UB_RAID_MAX_STRIPES];
};

/*
 * Stripes start at `misalign` bytes past a 64-byte boundary (16: what malloc
 * guarantees, which the vectorised path must cope with).
 */
static void set_init(struct set *st, int ndata, int nparity, size_t len, size_t misalign, uint64_t *seed)
{
	memset(st, 0, sizeof(*st));
	st->ndata = ndata;
	st->nparity = nparity;
	st->total = ndata + nparity;
	st->len = len;
	st->pitch = ((len + 63) / 64) * 64 + 64;
	st->block = aligned_alloc(64, st->pitch * (size_t)st->total);
	st->orig_block = malloc(st->pitch * (size_t)st->total);
	assert_non_null(st->block);
	assert_non_null(st->orig_block);
	for (int i = 0; i < st->total; i++) {
		st->s[i] = st->block + (size_t)i * st->pitch + misalign;
		st->orig[i] = st->orig_block + (size_t)i * st->pitch;
	}
	for (int i = 0; i < ndata; i++)
		fill_random(st->s[i], len, seed);
	/* parity buffers start as garbage: the generator must overwrite every byte */
	for (int i = ndata; i < st->total; i++)
		memset(st->s[i], 0xEE, len);
}

static void set_free(struct set *st)
{
	free(st->block);
	free(st->orig_block);
}

static void set_snapshot(struct set *st)
{
	for (int i = 0; i < st->total; i++)
		memcpy(st->orig[i], st->s[i], st->len);
}

static void assert_set_intact(const struct set *st, const char *what)
{
	for (int i = 0; i < st->total; i++) {
		if (memcmp(st->s[i], st->orig[i], st->len) != 0) {
			size_t b = 0;
			while (st->s[i][b] == st->orig[i][b])
				b++;
			fail_msg("%s: ndata %d nparity %d len %zu: stripe %d differs at byte %zu (got 0x%02x, want 0x%02x)",
				 what, st->ndata, st->nparity, st->len, i, b, st->s[i][b], st->orig[i][b]);
		}
	}
}

/* Every byte made to differ from the original, so a recovery that skips a byte cannot pass. */
static void poison(uint8_t *buf, const uint8_t *orig, size_t len, uint64_t *seed)
{
	for (size_t b = 0; b < len; b++)
		buf[b] = (uint8_t)(orig[b] ^ ((rng_next(seed) >> 56) | 1));
}

/* Generate parity, check it against the reference, keep a pristine copy. */
static void gen_and_check(struct set *st)
{
	uint8_t *p = malloc(st->len), *q = malloc(st->len);

	assert_non_null(p);
	assert_non_null(q);
	assert_int_equal(ub_raid_gen_parity(st->ndata, st->nparity, st->s, st->len), 0);
	ref_parity(st->ndata, st->nparity, st->s, st->len, p, q);
	if (memcmp(st->s[st->ndata], p, st->len) != 0)
		fail_msg("P wrong: ndata %d nparity %d len %zu", st->ndata, st->nparity, st->len);
	if (st->nparity == 2 && memcmp(st->s[st->ndata + 1], q, st->len) != 0)
		fail_msg("Q wrong (convention?): ndata %d len %zu", st->ndata, st->len);
	free(p);
	free(q);
	set_snapshot(st);
}

/* Lose the stripes in `which` (count `n`), poison them, recover, compare everything. */
static void lose_and_recover(struct set *st, const int *which, int n, uint64_t *seed)
{
	bool lost[UB_RAID_MAX_STRIPES] = { false };
	char what[96];
	int ret;

	for (int k = 0; k < n; k++) {
		lost[which[k]] = true;
		poison(st->s[which[k]], st->orig[which[k]], st->len, seed);
	}
	ret = ub_raid_recover(st->ndata, st->nparity, st->s, lost, st->len);
	if (n > 1)
		snprintf(what, sizeof(what), "recover lost {%d,%d}", which[0], which[1]);
	else
		snprintf(what, sizeof(what), "recover lost {%d}", which[0]);
	if (ret != 0)
		fail_msg("%s: ndata %d nparity %d len %zu: returned %d", what, st->ndata, st->nparity, st->len, ret);
	assert_set_intact(st, what);
}

static const size_t lengths[] = { 4096, 65536, 1000, 4100, 32, 1 };
#define NLENGTHS (sizeof(lengths) / sizeof(lengths[0]))

static void run_profile(int nparity, int ndata_min, int ndata_max, size_t misalign)
{
	uint64_t seed = 0x9E3779B97F4A7C15ULL ^ (uint64_t)(nparity * 1000 + (int)misalign);

	for (int ndata = ndata_min; ndata <= ndata_max; ndata++) {
		for (size_t li = 0; li < NLENGTHS; li++) {
			struct set st;
			int total = ndata + nparity;

			set_init(&st, ndata, nparity, lengths[li], misalign, &seed);
			gen_and_check(&st);
			for (int a = 0; a < total; a++) {
				int one[1] = { a };
				lose_and_recover(&st, one, 1, &seed);
			}
			if (nparity == 2) {
				for (int a = 0; a < total; a++) {
					for (int b = a + 1; b < total; b++) {
						int two[2] = { a, b };
						lose_and_recover(&st, two, 2, &seed);
					}
				}
			}
			set_free(&st);
		}
	}
}

/* ---- tests -------------------------------------------------------------- */

static void test_raid5_parity_and_single_losses(void **state)
{
	run_profile(1, 2, 6, 0);
}

static void test_raid6_parity_and_all_pairs(void **state)
{
	run_profile(2, 2, 8, 0);
}

/* malloc only promises 16 bytes: the vectorised generator must still be right */
static void test_misaligned_buffers(void **state)
{
	run_profile(1, 2, 4, 16);
	run_profile(2, 2, 4, 16);
	run_profile(2, 3, 3, 8);
}

/* btrfs allows RAID5 on 2 devices and RAID6 on 3: one data stripe per full stripe */
static void test_one_data_stripe(void **state)
{
	run_profile(1, 1, 1, 0);
	run_profile(2, 1, 1, 0);
}

/* Fixed bytes worked out by hand: 2*0x80 = 0x1d, 4*0x80 = 0x3a, 8*0x80 = 0x74. */
static void test_hand_computed_q(void **state)
{
	static const size_t lens[] = { 1, 32, 64, 100 };

	for (size_t li = 0; li < sizeof(lens) / sizeof(lens[0]); li++) {
		size_t len = lens[li];
		uint8_t *buf = calloc(6, len);
		uint8_t *s[6];

		assert_non_null(buf);
		for (int i = 0; i < 6; i++)
			s[i] = buf + (size_t)i * len;
		memset(s[0], 0x01, len);
		memset(s[1], 0x80, len);
		memset(s[2], 0x80, len);
		memset(s[3], 0x80, len);
		assert_int_equal(ub_raid_gen_parity(4, 2, s, len), 0);
		for (size_t b = 0; b < len; b++) {
			/* P = 01^80^80^80 = 81; Q = 01 ^ 1d ^ 3a ^ 74 = 52 */
			assert_int_equal(s[4][b], 0x81);
			assert_int_equal(s[5][b], 0x52);
		}
		free(buf);
	}
}

static void test_too_many_losses(void **state)
{
	uint64_t seed = 42;
	static const size_t lens[] = { 4096, 1000 };

	for (size_t li = 0; li < 2; li++) {
		/* RAID5: any two lost */
		for (int ndata = 2; ndata <= 4; ndata++) {
			struct set st;
			set_init(&st, ndata, 1, lens[li], 0, &seed);
			gen_and_check(&st);
			for (int a = 0; a < st.total; a++) {
				for (int b = a + 1; b < st.total; b++) {
					bool lost[UB_RAID_MAX_STRIPES] = { false };
					lost[a] = lost[b] = true;
					assert_int_equal(ub_raid_recover(ndata, 1, st.s, lost, st.len), -EIO);
				}
			}
			set_free(&st);
		}
		/* RAID6: any three lost, and all lost */
		for (int ndata = 2; ndata <= 5; ndata++) {
			struct set st;
			bool all[UB_RAID_MAX_STRIPES] = { false };
			set_init(&st, ndata, 2, lens[li], 0, &seed);
			gen_and_check(&st);
			for (int a = 0; a < st.total; a++) {
				all[a] = true;
				for (int b = a + 1; b < st.total; b++) {
					for (int c = b + 1; c < st.total; c++) {
						bool lost[UB_RAID_MAX_STRIPES] = { false };
						lost[a] = lost[b] = lost[c] = true;
						assert_int_equal(ub_raid_recover(ndata, 2, st.s, lost, st.len), -EIO);
					}
				}
			}
			assert_int_equal(ub_raid_recover(ndata, 2, st.s, all, st.len), -EIO);
			set_free(&st);
		}
	}
}

/* Nothing lost: recovery is a no-op that leaves every byte alone. */
static void test_nothing_lost(void **state)
{
	uint64_t seed = 7;
	struct set st;
	bool lost[UB_RAID_MAX_STRIPES] = { false };

	set_init(&st, 5, 2, 4100, 0, &seed);
	gen_and_check(&st);
	assert_int_equal(ub_raid_recover(5, 2, st.s, lost, st.len), 0);
	assert_set_intact(&st, "nothing lost");
	set_free(&st);
}

static void test_bad_arguments(void **state)
{
	uint8_t buf[4][64] = { { 0 } };
	uint8_t *s[4] = { buf[0], buf[1], buf[2], buf[3] };
	bool lost[UB_RAID_MAX_STRIPES] = { false };

	assert_int_equal(ub_raid_gen_parity(0, 1, s, 64), -EINVAL);
	assert_int_equal(ub_raid_gen_parity(2, 0, s, 64), -EINVAL);
	assert_int_equal(ub_raid_gen_parity(1, 3, s, 64), -EINVAL);
	assert_int_equal(ub_raid_gen_parity(UB_RAID_MAX_STRIPES - 1, 2, s, 64), -EINVAL);
	assert_int_equal(ub_raid_recover(0, 1, s, lost, 64), -EINVAL);
	assert_int_equal(ub_raid_recover(2, 0, s, lost, 64), -EINVAL);
	assert_int_equal(ub_raid_recover(1, 3, s, lost, 64), -EINVAL);
	assert_int_equal(ub_raid_recover(UB_RAID_MAX_STRIPES, 1, s, lost, 64), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hand_computed_q),
		cmocka_unit_test(test_raid5_parity_and_single_losses),
		cmocka_unit_test(test_raid6_parity_and_all_pairs),
		cmocka_unit_test(test_misaligned_buffers),
		cmocka_unit_test(test_one_data_stripe),
		cmocka_unit_test(test_too_many_losses),
		cmocka_unit_test(test_nothing_lost),
		cmocka_unit_test(test_bad_arguments),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
