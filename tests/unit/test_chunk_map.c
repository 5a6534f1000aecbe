/* SPDX-License-Identifier: MIT */
/*
 * The chunk map (lib/volume/chunk_map.c): logical -> (stripe, physical) for
 * every profile, copy counts, chunk item validation and lookup.
 *
 * Expected placements come from a reference model written here from the
 * btrfs layout rules, not from the code under test:
 *   - SINGLE/DUP/RAID1*: copy k is stripe k-1 at stripe.physical + offset.
 *   - RAID0 over N: stripe unit u = offset / 64 KiB goes to stripe u % N, at
 *     row u / N of that device.
 *   - RAID10 over N (pairs): unit u goes to pair u % (N/2), row u / (N/2);
 *     copy k is the k-th stripe of the pair.
 *   - RAID5/6 over N with n = N - parity data stripes: unit u belongs to full
 *     stripe f = u / n as data stripe j = u % n; in full stripe f slot s
 *     (0..n-1 data, n = P, n+1 = Q) sits on stripe (f + s) % N, at row f.
 * plus a few placements worked out by hand as literals.
 */
#include <errno.h>
#include <pthread.h>
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

#define KiB 1024ULL
#define MiB (1024ULL * KiB)
#define GiB (1024ULL * MiB)
#define SL (64 * KiB)

#define T_DATA BTRFS_BLOCK_GROUP_DATA
#define T_META BTRFS_BLOCK_GROUP_METADATA

/* ---- hand-built chunks ---------------------------------------------------- */

/* Chunk at 3 GiB; stripe i on devid i+1 at (i+1) GiB + i*192 KiB, so every physical base is distinct. */
static struct ub_chunk *make_chunk(uint64_t profile_bits, int num, int sub, uint64_t length)
{
	struct ub_chunk *c = calloc(1, sizeof(*c) + (size_t)num * sizeof(c->stripes[0]));

	assert_non_null(c);
	c->logical = 3 * GiB;
	c->length = length;
	c->type = T_DATA | profile_bits;
	c->stripe_len = SL;
	c->num_stripes = (uint16_t)num;
	c->sub_stripes = (uint16_t)sub;
	c->profile = ub_profile_of(c->type);
	assert_non_null(c->profile);
	for (int i = 0; i < num; i++) {
		c->stripes[i].devid = (uint64_t)i + 1;
		c->stripes[i].physical = ((uint64_t)i + 1) * GiB + (uint64_t)i * 192 * KiB;
	}
	return c;
}

static void check_map(const struct ub_chunk *c, uint64_t off, int mirror, int want_stripe, uint64_t want_phys,
		      uint64_t want_contig, int want_data_index, uint64_t want_full)
{
	struct ub_map m;
	int ret;

	memset(&m, 0xA5, sizeof(m));
	ret = ub_chunk_map_copy(c, c->logical + off, mirror, &m);
	if (ret)
		fail_msg("%s/%u off %llu mirror %d: returned %d", c->profile->name, c->num_stripes,
			 (unsigned long long)off, mirror, ret);
	if (m.stripe != want_stripe || m.physical != want_phys || m.contig != want_contig)
		fail_msg("%s/%u off %llu mirror %d: got stripe %d phys %llu contig %llu, want stripe %d phys %llu contig %llu",
			 c->profile->name, c->num_stripes, (unsigned long long)off, mirror, m.stripe,
			 (unsigned long long)m.physical, (unsigned long long)m.contig, want_stripe,
			 (unsigned long long)want_phys, (unsigned long long)want_contig);
	if (want_data_index >= 0 && (m.data_index != want_data_index || m.full_stripe != want_full))
		fail_msg("%s/%u off %llu: got data_index %d full_stripe %llu, want %d %llu", c->profile->name,
			 c->num_stripes, (unsigned long long)off, m.data_index, (unsigned long long)m.full_stripe,
			 want_data_index, (unsigned long long)want_full);
}

/* Offsets probed in every chunk: unit starts, ends, middles, across several rows. */
static const uint64_t probe_offsets[] = {
	0, 1, 4095, 4096, SL - 1, SL, SL + 512, 2 * SL - 4096, 2 * SL, 3 * SL + 7, 4 * SL,
	5 * SL + 12345, 7 * SL, 11 * SL + SL / 2, 12 * SL, 13 * SL - 1, 29 * SL + 100, 60 * SL + 4096,
};
#define NPROBES (sizeof(probe_offsets) / sizeof(probe_offsets[0]))

/* ---- reference model ------------------------------------------------------ */

static void model_mirrored(const struct ub_chunk *c)
{
	for (size_t i = 0; i < NPROBES; i++) {
		uint64_t off = probe_offsets[i];
		for (int k = 1; k <= c->num_stripes; k++)
			check_map(c, off, k, k - 1, c->stripes[k - 1].physical + off, c->length - off, -1, 0);
	}
}

static void model_raid0(const struct ub_chunk *c)
{
	const uint64_t n = c->num_stripes;

	for (size_t i = 0; i < NPROBES; i++) {
		uint64_t off = probe_offsets[i], unit = off / SL, in = off % SL;
		int s = (int)(unit % n);
		check_map(c, off, 1, s, c->stripes[s].physical + (unit / n) * SL + in, SL - in, -1, 0);
	}
}

static void model_raid10(const struct ub_chunk *c)
{
	const uint64_t pairs = c->num_stripes / 2;

	for (size_t i = 0; i < NPROBES; i++) {
		uint64_t off = probe_offsets[i], unit = off / SL, in = off % SL;
		for (int k = 1; k <= 2; k++) {
			int s = (int)((unit % pairs) * 2 + (uint64_t)(k - 1));
			check_map(c, off, k, s, c->stripes[s].physical + (unit / pairs) * SL + in, SL - in, -1, 0);
		}
	}
}

/* Which stripe holds slot `slot` (data 0..n-1, then P, then Q) of full stripe `f`. */
static int model_raid56_slot_stripe(const struct ub_chunk *c, uint64_t f, int slot)
{
	return (int)((f + (uint64_t)slot) % c->num_stripes);
}

static void model_raid56(const struct ub_chunk *c, int nparity)
{
	const uint64_t N = c->num_stripes, n = N - (uint64_t)nparity;

	for (size_t i = 0; i < NPROBES; i++) {
		uint64_t off = probe_offsets[i], unit = off / SL, in = off % SL;
		uint64_t f = unit / n;
		int j = (int)(unit % n);
		int s = model_raid56_slot_stripe(c, f, j);
		check_map(c, off, 1, s, c->stripes[s].physical + f * SL + in, SL - in, j, f);
	}
	/* every full stripe's data lands on the stripes not holding its parity, each used once */
	for (uint64_t f = 0; f < 3 * N; f++) {
		bool used[UB_RAID_MAX_STRIPES] = { false };
		used[model_raid56_slot_stripe(c, f, (int)n)] = true;
		if (nparity == 2)
			used[model_raid56_slot_stripe(c, f, (int)n + 1)] = true;
		for (uint64_t j = 0; j < n; j++) {
			struct ub_map m;
			assert_int_equal(ub_chunk_map_copy(c, c->logical + (f * n + j) * SL, 1, &m), 0);
			assert_false(used[m.stripe]);
			used[m.stripe] = true;
			assert_int_equal(m.physical, c->stripes[m.stripe].physical + f * SL);
		}
	}
}

/* ---- placements --------------------------------------------------------- */

static void test_single_dup_raid1(void **state)
{
	struct ub_chunk *c;

	c = make_chunk(0, 1, 1, 1 * GiB);
	model_mirrored(c);
	free(c);

	c = make_chunk(BTRFS_BLOCK_GROUP_DUP, 2, 1, 1 * GiB);
	c->stripes[1].devid = 1; /* both copies on one device */
	model_mirrored(c);
	/* literal: DUP copy 2 at 5 MiB + 3 = stripe 1 at 2 GiB + 192 KiB + 5 MiB + 3 */
	check_map(c, 5 * MiB + 3, 2, 1, 2 * GiB + 192 * KiB + 5 * MiB + 3, 1 * GiB - 5 * MiB - 3, -1, 0);
	free(c);

	c = make_chunk(BTRFS_BLOCK_GROUP_RAID1, 2, 1, 1 * GiB);
	model_mirrored(c);
	free(c);
	c = make_chunk(BTRFS_BLOCK_GROUP_RAID1C3, 3, 1, 1 * GiB);
	model_mirrored(c);
	free(c);
	c = make_chunk(BTRFS_BLOCK_GROUP_RAID1C4, 4, 1, 1 * GiB);
	model_mirrored(c);
	/* literal: copy 4 of offset 0 is stripe 3 at 4 GiB + 576 KiB */
	check_map(c, 0, 4, 3, 4 * GiB + 576 * KiB, 1 * GiB, -1, 0);
	free(c);
}

static void test_raid0(void **state)
{
	for (int n = 2; n <= 4; n++) {
		struct ub_chunk *c = make_chunk(BTRFS_BLOCK_GROUP_RAID0, n, 1, 4 * GiB);
		model_raid0(c);
		free(c);
	}
	{
		/* literal, 3 stripes: unit 7 (offset 7*64K + 100) -> stripe 1, row 2 */
		struct ub_chunk *c = make_chunk(BTRFS_BLOCK_GROUP_RAID0, 3, 1, 4 * GiB);
		check_map(c, 7 * SL + 100, 1, 1, 2 * GiB + 192 * KiB + 2 * SL + 100, SL - 100, -1, 0);
		free(c);
	}
}

static void test_raid10(void **state)
{
	struct ub_chunk *c = make_chunk(BTRFS_BLOCK_GROUP_RAID10, 4, 2, 2 * GiB);

	model_raid10(c);
	/* literal, 4 stripes: unit 3 -> pair 1 (stripes 2,3), row 1 */
	check_map(c, 3 * SL + 10, 1, 2, 3 * GiB + 384 * KiB + SL + 10, SL - 10, -1, 0);
	check_map(c, 3 * SL + 10, 2, 3, 4 * GiB + 576 * KiB + SL + 10, SL - 10, -1, 0);
	free(c);

	c = make_chunk(BTRFS_BLOCK_GROUP_RAID10, 6, 2, 3 * GiB);
	model_raid10(c);
	/* literal, 6 stripes: unit 5 -> pair 2 (stripes 4,5), row 1 */
	check_map(c, 5 * SL, 2, 5, 6 * GiB + 960 * KiB + SL, SL, -1, 0);
	free(c);
}

static void test_raid5(void **state)
{
	struct ub_chunk *c = make_chunk(BTRFS_BLOCK_GROUP_RAID5, 3, 1, 2 * GiB);

	model_raid56(c, 1);
	/*
	 * Literals, 3 stripes (2 data): unit 5 is full stripe 2, data 1, on
	 * stripe (2+1)%3 = 0, row 2; unit 2 is full stripe 1, data 0, on stripe 1.
	 */
	check_map(c, 5 * SL + 8, 1, 0, 1 * GiB + 2 * SL + 8, SL - 8, 1, 2);
	check_map(c, 2 * SL, 1, 1, 2 * GiB + 192 * KiB + SL, SL, 0, 1);
	free(c);

	c = make_chunk(BTRFS_BLOCK_GROUP_RAID5, 4, 1, 3 * GiB);
	model_raid56(c, 1);
	/* 4 stripes (3 data): unit 10 is full stripe 3, data 1, on stripe 0, row 3 */
	check_map(c, 10 * SL + 1, 1, 0, 1 * GiB + 3 * SL + 1, SL - 1, 1, 3);
	free(c);
}

static void test_raid6(void **state)
{
	for (int n = 4; n <= 6; n++) {
		struct ub_chunk *c = make_chunk(BTRFS_BLOCK_GROUP_RAID6, n, 1, 4 * GiB);
		model_raid56(c, 2);
		free(c);
	}
	{
		/* 6 stripes (4 data): unit 9 is full stripe 2, data 1, on stripe 3, row 2 */
		struct ub_chunk *c = make_chunk(BTRFS_BLOCK_GROUP_RAID6, 6, 1, 4 * GiB);
		check_map(c, 9 * SL + 4096, 1, 3, 4 * GiB + 576 * KiB + 2 * SL + 4096, SL - 4096, 1, 2);
		/* unit 23 is full stripe 5, data 3, on stripe (5+3)%6 = 2, row 5 */
		check_map(c, 23 * SL, 1, 2, 3 * GiB + 384 * KiB + 5 * SL, SL, 3, 5);
		free(c);
	}
	{
		/* 4 stripes (2 data): unit 7 is full stripe 3, data 1, on stripe 0, row 3 */
		struct ub_chunk *c = make_chunk(BTRFS_BLOCK_GROUP_RAID6, 4, 1, 4 * GiB);
		check_map(c, 7 * SL, 1, 0, 1 * GiB + 3 * SL, SL, 1, 3);
		free(c);
	}
}

/* ---- copies and mirror numbers ------------------------------------------- */

static void test_num_copies(void **state)
{
	static const struct {
		uint64_t bits;
		int num, sub, copies;
	} cases[] = {
		{ 0, 1, 1, 1 },
		{ BTRFS_BLOCK_GROUP_DUP, 2, 1, 2 },
		{ BTRFS_BLOCK_GROUP_RAID0, 3, 1, 1 },
		{ BTRFS_BLOCK_GROUP_RAID1, 2, 1, 2 },
		{ BTRFS_BLOCK_GROUP_RAID1C3, 3, 1, 3 },
		{ BTRFS_BLOCK_GROUP_RAID1C4, 4, 1, 4 },
		{ BTRFS_BLOCK_GROUP_RAID10, 4, 2, 2 },
		{ BTRFS_BLOCK_GROUP_RAID10, 6, 2, 2 },
		{ BTRFS_BLOCK_GROUP_RAID5, 3, 1, 2 },
		{ BTRFS_BLOCK_GROUP_RAID5, 5, 1, 2 },
		{ BTRFS_BLOCK_GROUP_RAID6, 4, 1, 4 },
		{ BTRFS_BLOCK_GROUP_RAID6, 6, 1, 6 },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct ub_chunk *c = make_chunk(cases[i].bits, cases[i].num, cases[i].sub, 1 * GiB);
		if (ub_chunk_num_copies(c) != cases[i].copies)
			fail_msg("%s/%d: %d copies, want %d", c->profile->name, cases[i].num, ub_chunk_num_copies(c),
				 cases[i].copies);
		free(c);
	}
}

static void expect_map_error(const struct ub_chunk *c, int mirror, int want)
{
	struct ub_map m;
	int ret = ub_chunk_map_copy(c, c->logical + 3 * SL, mirror, &m);

	if (ret != want)
		fail_msg("%s/%u mirror %d: returned %d, want %d", c->profile->name, c->num_stripes, mirror, ret, want);
}

static void test_bad_mirrors(void **state)
{
	struct ub_chunk *c;

	c = make_chunk(0, 1, 1, GiB);
	expect_map_error(c, 0, -EINVAL);
	expect_map_error(c, -1, -EINVAL);
	expect_map_error(c, 2, -EINVAL);
	free(c);
	c = make_chunk(BTRFS_BLOCK_GROUP_DUP, 2, 1, GiB);
	expect_map_error(c, 0, -EINVAL);
	expect_map_error(c, 3, -EINVAL);
	free(c);
	c = make_chunk(BTRFS_BLOCK_GROUP_RAID0, 3, 1, GiB);
	expect_map_error(c, 0, -EINVAL);
	expect_map_error(c, 2, -EINVAL);
	free(c);
	c = make_chunk(BTRFS_BLOCK_GROUP_RAID1, 2, 1, GiB);
	expect_map_error(c, 3, -EINVAL);
	free(c);
	c = make_chunk(BTRFS_BLOCK_GROUP_RAID1C3, 3, 1, GiB);
	expect_map_error(c, 4, -EINVAL);
	free(c);
	c = make_chunk(BTRFS_BLOCK_GROUP_RAID1C4, 4, 1, GiB);
	expect_map_error(c, 5, -EINVAL);
	expect_map_error(c, 1000, -EINVAL);
	free(c);
	c = make_chunk(BTRFS_BLOCK_GROUP_RAID10, 4, 2, GiB);
	expect_map_error(c, 0, -EINVAL);
	expect_map_error(c, 3, -EINVAL);
	free(c);
	/* RAID5/6: only the stored data is a plain copy; rebuilds are raid56.c's */
	c = make_chunk(BTRFS_BLOCK_GROUP_RAID5, 3, 1, GiB);
	expect_map_error(c, 0, -EINVAL);
	expect_map_error(c, 2, -EOPNOTSUPP);
	free(c);
	c = make_chunk(BTRFS_BLOCK_GROUP_RAID6, 5, 1, GiB);
	expect_map_error(c, 0, -EINVAL);
	expect_map_error(c, 2, -EOPNOTSUPP);
	expect_map_error(c, 3, -EOPNOTSUPP);
	expect_map_error(c, 5, -EOPNOTSUPP);
	free(c);
}

/* ---- chunk items through a device-less volume ----------------------------- */

struct log_count {
	int errors;
};

static void count_sink(void *arg, enum ub_log_level lvl, const char *msg)
{
	struct log_count *lc = arg;

	if (lvl == UB_LOG_ERROR)
		lc->errors++;
}

static struct ub_volume *new_volume(struct log_count *lc)
{
	struct ub_volume *vol = calloc(1, sizeof(*vol));

	assert_non_null(vol);
	vol->sectorsize = 4096;
	vol->nodesize = 16384;
	vol->log.verbosity = 0;
	vol->log.fn = count_sink;
	vol->log.arg = lc;
	return vol;
}

static void free_volume(struct ub_volume *vol)
{
	ub_chunks_free(vol);
	free(vol);
}

#define ITEM_HDR offsetof(struct btrfs_chunk, stripe)
#define ITEM_MAX (ITEM_HDR + 16 * sizeof(struct btrfs_stripe))

struct item {
	uint8_t b[ITEM_MAX];
	uint32_t size;
};

/* A chunk item as the kernel writes it; stripe i on devid i+1 at 1 MiB + i*256 MiB. */
static struct item encode(uint64_t length, uint64_t type, uint64_t stripe_len, int num, int sub)
{
	struct item it;

	memset(&it, 0, sizeof(it));
	assert_true(num >= 0 && num <= 16);
	UB_SET(btrfs_chunk, length, it.b, length);
	UB_SET(btrfs_chunk, owner, it.b, BTRFS_EXTENT_TREE_OBJECTID);
	UB_SET(btrfs_chunk, stripe_len, it.b, stripe_len);
	UB_SET(btrfs_chunk, type, it.b, type);
	UB_SET(btrfs_chunk, io_align, it.b, 65536);
	UB_SET(btrfs_chunk, io_width, it.b, 65536);
	UB_SET(btrfs_chunk, sector_size, it.b, 4096);
	UB_SET(btrfs_chunk, num_stripes, it.b, (uint64_t)num);
	UB_SET(btrfs_chunk, sub_stripes, it.b, (uint64_t)sub);
	for (int i = 0; i < num; i++) {
		uint8_t *s = it.b + ITEM_HDR + (size_t)i * sizeof(struct btrfs_stripe);
		UB_SET(btrfs_stripe, devid, s, (uint64_t)i + 1);
		UB_SET(btrfs_stripe, offset, s, 1 * MiB + (uint64_t)i * 256 * MiB);
		memset(s + offsetof(struct btrfs_stripe, dev_uuid), 0x10 + i, UB_UUID_SIZE);
	}
	it.size = (uint32_t)(ITEM_HDR + (size_t)(num > 0 ? num : 1) * sizeof(struct btrfs_stripe));
	return it;
}

static int add(struct ub_volume *vol, uint64_t logical, const struct item *it)
{
	return ub_volume_add_chunk(vol, logical, it->b, it->size);
}

static void expect_rejected(uint64_t logical, const struct item *it, const char *why)
{
	struct log_count lc = { 0 };
	struct ub_volume *vol = new_volume(&lc);
	int ret = add(vol, logical, it);

	if (ret != -EUCLEAN)
		fail_msg("%s: returned %d, want -EUCLEAN", why, ret);
	assert_int_equal(vol->nchunks, 0);
	assert_true(lc.errors >= 1);
	free_volume(vol);
}

static void expect_accepted(uint64_t logical, const struct item *it, const char *why)
{
	struct log_count lc = { 0 };
	struct ub_volume *vol = new_volume(&lc);
	int ret = add(vol, logical, it);

	if (ret != 0)
		fail_msg("%s: returned %d, want 0", why, ret);
	assert_int_equal(vol->nchunks, 1);
	assert_int_equal(lc.errors, 0);
	free_volume(vol);
}

static void test_add_chunk_decodes_item(void **state)
{
	struct log_count lc = { 0 };
	struct ub_volume *vol = new_volume(&lc);
	struct item it = encode(1 * GiB, T_DATA | BTRFS_BLOCK_GROUP_RAID10, SL, 4, 2);
	const struct ub_chunk *c;

	assert_int_equal(add(vol, 5 * GiB, &it), 0);
	c = ub_volume_find_chunk(vol, 5 * GiB);
	assert_non_null(c);
	assert_int_equal(c->logical, 5 * GiB);
	assert_int_equal(c->length, 1 * GiB);
	assert_int_equal(c->type, T_DATA | BTRFS_BLOCK_GROUP_RAID10);
	assert_int_equal(c->stripe_len, SL);
	assert_int_equal(c->num_stripes, 4);
	assert_int_equal(c->sub_stripes, 2);
	assert_ptr_equal(c->profile, ub_profile_of(BTRFS_BLOCK_GROUP_RAID10));
	for (int i = 0; i < 4; i++) {
		assert_int_equal(c->stripes[i].devid, (uint64_t)i + 1);
		assert_int_equal(c->stripes[i].physical, 1 * MiB + (uint64_t)i * 256 * MiB);
		assert_int_equal(c->stripes[i].dev_uuid[0], 0x10 + i);
		assert_int_equal(c->stripes[i].dev_uuid[15], 0x10 + i);
		assert_null(c->stripes[i].dev); /* no devices assembled */
	}
	assert_int_equal(ub_volume_num_copies(vol, 5 * GiB + 100), 2);
	assert_int_equal(ub_volume_num_copies(vol, 4 * GiB), 0);
	assert_int_equal(lc.errors, 0);
	free_volume(vol);
}

static void test_add_chunk_valid_profiles(void **state)
{
	struct item it;

	it = encode(8 * MiB, T_DATA, SL, 1, 0);
	expect_accepted(1 * MiB, &it, "single");
	it = encode(8 * MiB, BTRFS_BLOCK_GROUP_SYSTEM | BTRFS_BLOCK_GROUP_DUP, SL, 2, 0);
	expect_accepted(1 * MiB, &it, "DUP system");
	it = encode(8 * MiB, T_META | BTRFS_BLOCK_GROUP_DUP, SL, 2, 1);
	expect_accepted(1 * MiB, &it, "DUP metadata");
	it = encode(8 * MiB, T_DATA | T_META, SL, 1, 1);
	expect_accepted(1 * MiB, &it, "mixed single");
	for (int n = 1; n <= 4; n++) {
		it = encode(8 * MiB, T_DATA | BTRFS_BLOCK_GROUP_RAID0, SL, n, 1);
		expect_accepted(1 * MiB, &it, "RAID0");
	}
	it = encode(8 * MiB, T_META | BTRFS_BLOCK_GROUP_RAID1, SL, 2, 1);
	expect_accepted(1 * MiB, &it, "RAID1");
	it = encode(8 * MiB, T_META | BTRFS_BLOCK_GROUP_RAID1C3, SL, 3, 1);
	expect_accepted(1 * MiB, &it, "RAID1C3");
	it = encode(8 * MiB, T_META | BTRFS_BLOCK_GROUP_RAID1C4, SL, 4, 1);
	expect_accepted(1 * MiB, &it, "RAID1C4");
	it = encode(8 * MiB, T_DATA | BTRFS_BLOCK_GROUP_RAID10, SL, 4, 2);
	expect_accepted(1 * MiB, &it, "RAID10/4");
	it = encode(8 * MiB, T_DATA | BTRFS_BLOCK_GROUP_RAID10, SL, 6, 2);
	expect_accepted(1 * MiB, &it, "RAID10/6");
	it = encode(8 * MiB, T_DATA | BTRFS_BLOCK_GROUP_RAID5, SL, 2, 1);
	expect_accepted(1 * MiB, &it, "RAID5/2");
	it = encode(8 * MiB, T_DATA | BTRFS_BLOCK_GROUP_RAID5, SL, 5, 1);
	expect_accepted(1 * MiB, &it, "RAID5/5");
	it = encode(8 * MiB, T_DATA | BTRFS_BLOCK_GROUP_RAID6, SL, 3, 1);
	expect_accepted(1 * MiB, &it, "RAID6/3");
	it = encode(8 * MiB, T_DATA | BTRFS_BLOCK_GROUP_RAID6, SL, 6, 1);
	expect_accepted(1 * MiB, &it, "RAID6/6");
}

static void test_add_chunk_bad_items(void **state)
{
	struct item it;

	/* stripe counts */
	it = encode(8 * MiB, T_DATA, SL, 0, 0);
	expect_rejected(1 * MiB, &it, "zero stripes");
	it = encode(8 * MiB, T_META | BTRFS_BLOCK_GROUP_DUP, SL, 1, 1);
	expect_rejected(1 * MiB, &it, "DUP with 1 stripe");
	it = encode(8 * MiB, T_META | BTRFS_BLOCK_GROUP_DUP, SL, 3, 1);
	expect_rejected(1 * MiB, &it, "DUP with 3 stripes");
	it = encode(8 * MiB, T_META | BTRFS_BLOCK_GROUP_RAID1, SL, 1, 1);
	expect_rejected(1 * MiB, &it, "RAID1 with 1 stripe");
	it = encode(8 * MiB, T_META | BTRFS_BLOCK_GROUP_RAID1, SL, 3, 1);
	expect_rejected(1 * MiB, &it, "RAID1 with 3 stripes");
	it = encode(8 * MiB, T_META | BTRFS_BLOCK_GROUP_RAID1C3, SL, 2, 1);
	expect_rejected(1 * MiB, &it, "RAID1C3 with 2 stripes");
	it = encode(8 * MiB, T_META | BTRFS_BLOCK_GROUP_RAID1C4, SL, 3, 1);
	expect_rejected(1 * MiB, &it, "RAID1C4 with 3 stripes");
	it = encode(8 * MiB, T_DATA | BTRFS_BLOCK_GROUP_RAID10, SL, 3, 2);
	expect_rejected(1 * MiB, &it, "RAID10 with 3 stripes");
	it = encode(8 * MiB, T_DATA | BTRFS_BLOCK_GROUP_RAID10, SL, 4, 1);
	expect_rejected(1 * MiB, &it, "RAID10 with sub_stripes 1");
	it = encode(8 * MiB, T_DATA | BTRFS_BLOCK_GROUP_RAID10, SL, 4, 0);
	expect_rejected(1 * MiB, &it, "RAID10 with sub_stripes 0");
	it = encode(8 * MiB, T_DATA | BTRFS_BLOCK_GROUP_RAID5, SL, 1, 1);
	expect_rejected(1 * MiB, &it, "RAID5 with 1 stripe");
	it = encode(8 * MiB, T_DATA | BTRFS_BLOCK_GROUP_RAID6, SL, 2, 1);
	expect_rejected(1 * MiB, &it, "RAID6 with 2 stripes");

	/* item size vs stripe count */
	it = encode(8 * MiB, T_META | BTRFS_BLOCK_GROUP_RAID1, SL, 2, 1);
	it.size -= 1;
	expect_rejected(1 * MiB, &it, "item one byte short");
	it = encode(8 * MiB, T_META | BTRFS_BLOCK_GROUP_RAID1, SL, 2, 1);
	it.size += (uint32_t)sizeof(struct btrfs_stripe);
	expect_rejected(1 * MiB, &it, "item one stripe too long");
	it = encode(8 * MiB, T_DATA, SL, 1, 1);
	it.size = (uint32_t)ITEM_HDR;
	expect_rejected(1 * MiB, &it, "item without a stripe");
	it.size = 0;
	expect_rejected(1 * MiB, &it, "empty item");
	it = encode(8 * MiB, T_DATA, SL, 1, 1);
	UB_SET(btrfs_chunk, num_stripes, it.b, 0xffff);
	expect_rejected(1 * MiB, &it, "65535 stripes in a 1-stripe item");

	/* stripe length */
	it = encode(8 * MiB, T_DATA, 32 * KiB, 1, 1);
	expect_rejected(1 * MiB, &it, "stripe_len 32 KiB");
	it = encode(8 * MiB, T_DATA, 0, 1, 1);
	expect_rejected(1 * MiB, &it, "stripe_len 0");
	it = encode(8 * MiB, T_DATA, 128 * KiB, 1, 1);
	expect_rejected(1 * MiB, &it, "stripe_len 128 KiB");

	/* type */
	it = encode(8 * MiB, T_DATA | BTRFS_BLOCK_GROUP_RAID0 | BTRFS_BLOCK_GROUP_RAID1, SL, 2, 1);
	expect_rejected(1 * MiB, &it, "RAID0|RAID1");
	it = encode(8 * MiB, T_DATA | BTRFS_BLOCK_GROUP_DUP | BTRFS_BLOCK_GROUP_RAID6, SL, 4, 1);
	expect_rejected(1 * MiB, &it, "DUP|RAID6");
	it = encode(8 * MiB, BTRFS_BLOCK_GROUP_RAID1, SL, 2, 1);
	expect_rejected(1 * MiB, &it, "no data/metadata/system bit");

	/* length and alignment */
	it = encode(0, T_DATA, SL, 1, 1);
	expect_rejected(1 * MiB, &it, "zero length");
	it = encode(8 * MiB + 512, T_DATA, SL, 1, 1);
	expect_rejected(1 * MiB, &it, "length not sector aligned");
	it = encode(8 * MiB, T_DATA, SL, 1, 1);
	expect_rejected(1 * MiB + 512, &it, "logical not sector aligned");
	it = encode(UINT64_MAX - 4095, T_DATA, SL, 1, 1);
	expect_rejected(1 * MiB, &it, "logical + length wraps");
}

/* The kernel insists on exactly one stripe for the single profile. */
static void test_add_chunk_single_needs_one_stripe(void **state)
{
	struct item it = encode(8 * MiB, T_DATA, SL, 2, 1);

	expect_rejected(1 * MiB, &it, "single with 2 stripes");
}

static void test_add_chunk_order_dup_overlap(void **state)
{
	struct log_count lc = { 0 };
	struct ub_volume *vol = new_volume(&lc);
	struct item a = encode(16 * MiB, T_DATA, SL, 1, 1);
	struct item b = encode(8 * MiB, T_META | BTRFS_BLOCK_GROUP_DUP, SL, 2, 1);
	struct item sys = encode(4 * MiB, BTRFS_BLOCK_GROUP_SYSTEM | BTRFS_BLOCK_GROUP_RAID1, SL, 2, 1);
	/* logical layout built out of order: [1M,5M) sys, [8M,16M) b, [16M,32M) a, [64M,80M) a */
	assert_int_equal(add(vol, 16 * MiB, &a), 0);
	assert_int_equal(add(vol, 64 * MiB, &a), 0);
	assert_int_equal(add(vol, 1 * MiB, &sys), 0);
	assert_int_equal(add(vol, 8 * MiB, &b), 0); /* ends exactly where the next starts */
	assert_int_equal(vol->nchunks, 4);
	assert_int_equal(lc.errors, 0);
	for (int i = 1; i < vol->nchunks; i++)
		assert_true(vol->chunks[i - 1]->logical + vol->chunks[i - 1]->length <= vol->chunks[i]->logical);
	assert_int_equal(vol->chunks[0]->logical, 1 * MiB);
	assert_int_equal(vol->chunks[1]->logical, 8 * MiB);
	assert_int_equal(vol->chunks[2]->logical, 16 * MiB);
	assert_int_equal(vol->chunks[3]->logical, 64 * MiB);

	/* the sys array and the chunk tree both carry system chunks: a repeat is ignored */
	assert_int_equal(add(vol, 1 * MiB, &sys), 0);
	assert_int_equal(add(vol, 16 * MiB, &a), 0);
	assert_int_equal(vol->nchunks, 4);
	assert_int_equal(lc.errors, 0);

	/* overlaps, from either side */
	assert_int_equal(add(vol, 20 * MiB, &b), -EUCLEAN);   /* starts inside [16M,32M) */
	assert_int_equal(add(vol, 60 * MiB, &b), -EUCLEAN);   /* ends inside [64M,80M) */
	assert_int_equal(add(vol, 4 * MiB, &sys), -EUCLEAN);  /* starts inside [1M,5M) */
	assert_int_equal(add(vol, 0, &a), -EUCLEAN);          /* covers several */
	assert_int_equal(add(vol, 79 * MiB, &sys), -EUCLEAN); /* starts on the last chunk's last MiB */
	assert_int_equal(vol->nchunks, 4);
	assert_int_equal(lc.errors, 5);

	/* gaps that fit exactly are fine */
	assert_int_equal(add(vol, 32 * MiB, &a), 0); /* [32M,48M) */
	assert_int_equal(add(vol, 48 * MiB, &a), 0); /* [48M,64M) */
	assert_int_equal(add(vol, 5 * MiB, &sys), -EUCLEAN); /* [5M,9M) would overlap [8M,...) */
	assert_int_equal(vol->nchunks, 6);
	free_volume(vol);
}

static void test_find_chunk(void **state)
{
	struct log_count lc = { 0 };
	struct ub_volume *vol = new_volume(&lc);
	struct item a = encode(16 * MiB, T_DATA, SL, 1, 1);
	struct item b = encode(8 * MiB, T_META | BTRFS_BLOCK_GROUP_RAID1, SL, 2, 1);
	const struct ub_chunk *c;

	assert_null(ub_volume_find_chunk(vol, 0));
	assert_null(ub_volume_find_chunk(vol, 1 * MiB));
	assert_int_equal(ub_volume_num_copies(vol, 1 * MiB), 0);

	/* [1M,17M) a, [17M,25M) b adjacent, gap, [100M,108M) b */
	assert_int_equal(add(vol, 100 * MiB, &b), 0);
	assert_int_equal(add(vol, 1 * MiB, &a), 0);
	assert_int_equal(add(vol, 17 * MiB, &b), 0);

	assert_null(ub_volume_find_chunk(vol, 0));
	assert_null(ub_volume_find_chunk(vol, 1 * MiB - 1));
	c = ub_volume_find_chunk(vol, 1 * MiB);
	assert_non_null(c);
	assert_int_equal(c->logical, 1 * MiB);
	c = ub_volume_find_chunk(vol, 9 * MiB + 77);
	assert_non_null(c);
	assert_int_equal(c->logical, 1 * MiB);
	c = ub_volume_find_chunk(vol, 17 * MiB - 1);
	assert_non_null(c);
	assert_int_equal(c->logical, 1 * MiB);
	c = ub_volume_find_chunk(vol, 17 * MiB); /* end of a is the start of b */
	assert_non_null(c);
	assert_int_equal(c->logical, 17 * MiB);
	c = ub_volume_find_chunk(vol, 25 * MiB - 1);
	assert_non_null(c);
	assert_int_equal(c->logical, 17 * MiB);
	assert_null(ub_volume_find_chunk(vol, 25 * MiB)); /* end boundary before a gap */
	assert_null(ub_volume_find_chunk(vol, 50 * MiB));
	assert_null(ub_volume_find_chunk(vol, 100 * MiB - 1));
	c = ub_volume_find_chunk(vol, 100 * MiB);
	assert_non_null(c);
	assert_int_equal(c->logical, 100 * MiB);
	c = ub_volume_find_chunk(vol, 108 * MiB - 1);
	assert_non_null(c);
	assert_null(ub_volume_find_chunk(vol, 108 * MiB));
	assert_null(ub_volume_find_chunk(vol, UINT64_MAX));

	assert_int_equal(ub_volume_num_copies(vol, 2 * MiB), 1);
	assert_int_equal(ub_volume_num_copies(vol, 18 * MiB), 2);
	assert_int_equal(ub_volume_num_copies(vol, 30 * MiB), 0);
	free_volume(vol);
}

/* Many chunks inserted in a scrambled order stay sorted and findable (the array grows). */
static void test_many_chunks(void **state)
{
	struct log_count lc = { 0 };
	struct ub_volume *vol = new_volume(&lc);
	struct item it = encode(1 * MiB, T_DATA, SL, 1, 1);
	const int n = 300;

	for (int i = 0; i < n; i++) {
		/* 7 is coprime to 300: visits every slot once */
		uint64_t slot = ((uint64_t)i * 7) % (uint64_t)n;
		assert_int_equal(add(vol, (2 * slot + 1) * MiB, &it), 0);
	}
	assert_int_equal(vol->nchunks, n);
	for (int i = 0; i < n; i++) {
		const struct ub_chunk *c;
		assert_int_equal(vol->chunks[i]->logical, (2 * (uint64_t)i + 1) * MiB);
		c = ub_volume_find_chunk(vol, (2 * (uint64_t)i + 1) * MiB + 4096);
		assert_ptr_equal(c, vol->chunks[i]);
		assert_null(ub_volume_find_chunk(vol, (2 * (uint64_t)i + 2) * MiB));
	}
	free_volume(vol);
}

/* ---- api: readers map through the chunk map while the writer adds chunks ---- */

struct map_race {
	struct ub_volume *vol;
	volatile int stop;
	int errors;
};

/* The chunks added before the readers start sit above everything the writer adds: always found, always the same. */
#define RACE_HIGH (16ULL << 30)

static void *map_reader(void *arg)
{
	struct map_race *r = arg;
	int bad = 0;

	while (!__atomic_load_n(&r->stop, __ATOMIC_ACQUIRE)) {
		for (uint64_t i = 0; i < 8; i++) {
			const struct ub_chunk *c = ub_volume_find_chunk(r->vol, RACE_HIGH + i * 2 * MiB + 4096);
			if (!c || c->logical != RACE_HIGH + i * 2 * MiB)
				bad++;
		}
	}
	__atomic_add_fetch(&r->errors, bad, __ATOMIC_RELAXED);
	return NULL;
}

static void test_find_while_adding(void **state)
{
	struct log_count lc = { 0 };
	struct map_race r = { new_volume(&lc), 0, 0 };
	struct item it = encode(1 * MiB, T_DATA, SL, 1, 1);
	pthread_t th[4];
	const int n = 1500;

	for (uint64_t i = 0; i < 8; i++)
		assert_int_equal(add(r.vol, RACE_HIGH + i * 2 * MiB, &it), 0);
	for (int i = 0; i < 4; i++)
		assert_int_equal(pthread_create(&th[i], NULL, map_reader, &r), 0);
	/* downwards: every insertion moves the whole array, and it grows (realloc) several times */
	for (int i = n; i > 0; i--)
		assert_int_equal(add(r.vol, (uint64_t)i * 2 * MiB, &it), 0);
	__atomic_store_n(&r.stop, 1, __ATOMIC_RELEASE);
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	assert_int_equal(r.errors, 0);
	assert_int_equal(r.vol->nchunks, n + 8);
	free_volume(r.vol);
}
/* ---- end api ---- */

/* Stripes point at their device only when it is present. */
static void test_bind_devices(void **state)
{
	struct log_count lc = { 0 };
	struct ub_volume *vol = new_volume(&lc);
	struct ub_vdev vdevs[3];
	struct item it = encode(8 * MiB, T_DATA | BTRFS_BLOCK_GROUP_RAID6, SL, 4, 1);
	const struct ub_chunk *c;

	memset(vdevs, 0, sizeof(vdevs));
	vdevs[0].devid = 1;
	vdevs[1].devid = 2;
	vdevs[1].missing = true;
	vdevs[2].devid = 4;
	vol->vdevs = vdevs;
	vol->nvdevs = 3;
	assert_int_equal(add(vol, 1 * MiB, &it), 0);
	c = ub_volume_find_chunk(vol, 1 * MiB);
	assert_non_null(c);
	assert_ptr_equal(c->stripes[0].dev, &vdevs[0]);
	assert_null(c->stripes[1].dev); /* missing */
	assert_null(c->stripes[2].dev); /* devid 3 unknown */
	assert_ptr_equal(c->stripes[3].dev, &vdevs[2]);
	vol->vdevs = NULL;
	vol->nvdevs = 0;
	free_volume(vol);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_single_dup_raid1),
		cmocka_unit_test(test_raid0),
		cmocka_unit_test(test_raid10),
		cmocka_unit_test(test_raid5),
		cmocka_unit_test(test_raid6),
		cmocka_unit_test(test_num_copies),
		cmocka_unit_test(test_bad_mirrors),
		cmocka_unit_test(test_add_chunk_decodes_item),
		cmocka_unit_test(test_add_chunk_valid_profiles),
		cmocka_unit_test(test_add_chunk_bad_items),
		cmocka_unit_test(test_add_chunk_single_needs_one_stripe),
		cmocka_unit_test(test_add_chunk_order_dup_overlap),
		cmocka_unit_test(test_find_chunk),
		cmocka_unit_test(test_many_chunks),
		cmocka_unit_test(test_bind_devices),
		cmocka_unit_test(test_find_while_adding), /* api */
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
