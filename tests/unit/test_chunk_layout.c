/* SPDX-License-Identifier: MIT */
/*
 * Chunk placement (lib/alloc/chunk_layout.c). Expected placements are worked
 * out by hand from the kernel's allocator rules (volumes.c), not from the code:
 *   - caps: data chunk 10 GiB, metadata 256 MiB (1 GiB above 50 GiB of
 *     devices), system 32 MiB; stripe at most min(cap, 1 GiB); chunk at most
 *     10% of the devices' total;
 *   - per device: the first hole of at least stripe_max * dev_stripes bytes
 *     (then it offers exactly that), else its largest hole;
 *   - devices sorted by that offer, then by all their free bytes; count capped
 *     (RAID1 2, RAID1C3 3, RAID1C4 4, DUP/single 1) and rounded down to the
 *     profile's increment (RAID10 2);
 *   - stripe = smallest chosen offer / dev_stripes; if stripe * data stripes
 *     passes the chunk cap: min(that, roundup(cap / data stripes, 16 MiB));
 *     then at most 1 GiB, rounded down to 64 KiB.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "alloc/chunk_layout.h"
#include "ubtrfs/format.h"

#define KiB 1024ULL
#define MiB (1024ULL * KiB)
#define GiB (1024ULL * MiB)

#define T_DATA BTRFS_BLOCK_GROUP_DATA
#define T_META BTRFS_BLOCK_GROUP_METADATA
#define T_SYS BTRFS_BLOCK_GROUP_SYSTEM

/* up to 8 devices with up to 8 holes each; a fresh device is one hole past the reserved MiB */
struct rig {
	struct ub_dev_space d[8];
	uint64_t hs[8][8], hl[8][8];
	int n;
};

static void rig_dev(struct rig *r, uint64_t size)
{
	int i = r->n++;

	r->d[i] = (struct ub_dev_space){ (uint64_t)i + 1, size, r->hs[i], r->hl[i], 1 };
	r->hs[i][0] = 1 * MiB;
	r->hl[i][0] = size - 1 * MiB;
}

static void assert_stripe(const struct ub_chunk_plan *p, int k, uint64_t devid, uint64_t physical)
{
	assert_int_equal(p->stripes[k].devid, devid);
	assert_int_equal(p->stripes[k].physical, physical);
}

static void dup_metadata_one_device(void **state)
{
	struct rig r = { .n = 0 };
	struct ub_chunk_plan p;

	(void)state;
	rig_dev(&r, 1 * GiB);
	/* cap 256M; 10% of 1 GiB = 107374182; offer 512M -> stripe 256M; 256M > cap:
	 * roundup(107374182, 16M) = 112M */
	assert_int_equal(ub_chunk_layout(r.d, 1, T_META | BTRFS_BLOCK_GROUP_DUP, 0, &p), 0);
	assert_int_equal(p.num_stripes, 2);
	assert_int_equal(p.sub_stripes, 1);
	assert_int_equal(p.stripe_size, 112 * MiB);
	assert_int_equal(p.length, 112 * MiB);
	assert_stripe(&p, 0, 1, 1 * MiB);
	assert_stripe(&p, 1, 1, 113 * MiB);
}

static void system_hint_and_apply(void **state)
{
	struct rig r = { .n = 0 };
	struct ub_chunk_plan p, q;

	(void)state;
	rig_dev(&r, 1 * GiB);
	assert_int_equal(ub_chunk_layout(r.d, 1, T_SYS | BTRFS_BLOCK_GROUP_DUP, 8 * MiB, &p), 0);
	assert_int_equal(p.stripe_size, 8 * MiB);
	assert_int_equal(p.length, 8 * MiB);
	assert_stripe(&p, 1, 1, 9 * MiB);
	assert_int_equal(ub_chunk_plan_apply(r.d, 1, &p), 0);
	assert_int_equal(r.d[0].nholes, 1);
	assert_int_equal(r.hs[0][0], 17 * MiB);
	assert_int_equal(r.hl[0][0], 1 * GiB - 17 * MiB);
	/* the next chunk starts where the first ended; applying twice is refused */
	assert_int_equal(ub_chunk_layout(r.d, 1, T_DATA, 0, &q), 0);
	assert_stripe(&q, 0, 1, 17 * MiB);
	assert_int_equal(ub_chunk_plan_apply(r.d, 1, &p), -EINVAL);
}

static void raid1_picks_the_roomiest(void **state)
{
	struct rig r = { .n = 0 };
	struct ub_chunk_plan p;

	(void)state;
	rig_dev(&r, 10 * GiB);
	rig_dev(&r, 30 * GiB);
	rig_dev(&r, 20 * GiB);
	/* 60 GiB > 50 GiB: metadata cap 1 GiB, everyone offers 1 GiB, ties broken by free bytes */
	assert_int_equal(ub_chunk_layout(r.d, 3, T_META | BTRFS_BLOCK_GROUP_RAID1, 0, &p), 0);
	assert_int_equal(p.num_stripes, 2);
	assert_int_equal(p.stripe_size, 1 * GiB);
	assert_int_equal(p.length, 1 * GiB);
	assert_stripe(&p, 0, 2, 1 * MiB);
	assert_stripe(&p, 1, 3, 1 * MiB);
}

static void raid10_rounds_to_pairs(void **state)
{
	struct rig r = { .n = 0 };
	struct ub_chunk_plan p;

	(void)state;
	for (int i = 0; i < 5; i++)
		rig_dev(&r, 2 * GiB);
	/* 10 GiB total: cap min(10G, 1G) = 1G data; offer 1G each (holes 2047M);
	 * 5 devices -> 4; data stripes 2: 2G > 1G -> roundup(512M, 16M) = 512M */
	assert_int_equal(ub_chunk_layout(r.d, 5, T_DATA | BTRFS_BLOCK_GROUP_RAID10, 0, &p), 0);
	assert_int_equal(p.num_stripes, 4);
	assert_int_equal(p.sub_stripes, 2);
	assert_int_equal(p.stripe_size, 512 * MiB);
	assert_int_equal(p.length, 1 * GiB);
	for (int k = 0; k < 4; k++)
		assert_stripe(&p, k, (uint64_t)k + 1, 1 * MiB);
}

static void raid5_raid6_data(void **state)
{
	struct rig r = { .n = 0 };
	struct ub_chunk_plan p;

	(void)state;
	for (int i = 0; i < 3; i++)
		rig_dev(&r, 1 * GiB);
	/* offers: hole 1023M < want 1G -> 1023M; RAID5 over 3: 2 data stripes;
	 * cap 10% of 3G = 322122547; roundup(161061273, 16M) = 160M */
	assert_int_equal(ub_chunk_layout(r.d, 3, T_DATA | BTRFS_BLOCK_GROUP_RAID5, 0, &p), 0);
	assert_int_equal(p.num_stripes, 3);
	assert_int_equal(p.stripe_size, 160 * MiB);
	assert_int_equal(p.length, 320 * MiB);
	/* RAID6 over 3: one data stripe; roundup(322122547, 16M) = 320M */
	assert_int_equal(ub_chunk_layout(r.d, 3, T_DATA | BTRFS_BLOCK_GROUP_RAID6, 0, &p), 0);
	assert_int_equal(p.num_stripes, 3);
	assert_int_equal(p.stripe_size, 320 * MiB);
	assert_int_equal(p.length, 320 * MiB);
	/* too few devices */
	assert_int_equal(ub_chunk_layout(r.d, 2, T_DATA | BTRFS_BLOCK_GROUP_RAID6, 0, &p), -ENOSPC);
	assert_int_equal(ub_chunk_layout(r.d, 1, T_DATA | BTRFS_BLOCK_GROUP_RAID5, 0, &p), -ENOSPC);
	assert_int_equal(ub_chunk_layout(r.d, 2, T_DATA | BTRFS_BLOCK_GROUP_RAID1C3, 0, &p), -ENOSPC);
	assert_int_equal(ub_chunk_layout(r.d, 3, T_DATA | BTRFS_BLOCK_GROUP_RAID1C4, 0, &p), -ENOSPC);
	assert_int_equal(ub_chunk_layout(r.d, 1, T_DATA | BTRFS_BLOCK_GROUP_RAID10, 0, &p), -ENOSPC);
}

static void holes_first_fit_then_largest(void **state)
{
	struct rig r = { .n = 0 };
	struct ub_chunk_plan p;

	(void)state;
	rig_dev(&r, 100 * GiB);
	/* holes: [1M,2M) small, [10M, 40M) 30M, [50M, 60M), [1G, 100G) */
	r.d[0].nholes = 4;
	r.hs[0][0] = 1 * MiB, r.hl[0][0] = 1 * MiB;
	r.hs[0][1] = 10 * MiB, r.hl[0][1] = 30 * MiB;
	r.hs[0][2] = 50 * MiB, r.hl[0][2] = 10 * MiB;
	r.hs[0][3] = 1 * GiB, r.hl[0][3] = 99 * GiB;
	/* system single wants 32M: first fit is the big hole at 1G */
	assert_int_equal(ub_chunk_layout(r.d, 1, T_SYS, 0, &p), 0);
	assert_stripe(&p, 0, 1, 1 * GiB);
	assert_int_equal(p.stripe_size, 32 * MiB);
	/* with only the three small holes, the largest (30M at 10M) serves */
	r.d[0].nholes = 3;
	assert_int_equal(ub_chunk_layout(r.d, 1, T_SYS, 0, &p), 0);
	assert_stripe(&p, 0, 1, 10 * MiB);
	/* a 10% cap: 100 GiB total does not bite; stripe 30M rounded to 64K */
	assert_int_equal(p.stripe_size, 30 * MiB);
	/* a hole inside the reserved MiB is not used */
	r.d[0].nholes = 1;
	r.hs[0][0] = 0, r.hl[0][0] = 1 * MiB;
	assert_int_equal(ub_chunk_layout(r.d, 1, T_SYS, 0, &p), -ENOSPC);
}

static void single_goes_to_the_emptiest(void **state)
{
	struct rig r = { .n = 0 };
	struct ub_chunk_plan p;

	(void)state;
	rig_dev(&r, 1 * GiB);
	rig_dev(&r, 1 * GiB);
	/* equal offers and equal free bytes: the caller's order decides */
	assert_int_equal(ub_chunk_layout(r.d, 2, T_DATA, 0, &p), 0);
	assert_int_equal(p.num_stripes, 1);
	assert_stripe(&p, 0, 1, 1 * MiB);
	/* take 600M from device 1: device 2 now offers more */
	r.hs[0][0] = 601 * MiB, r.hl[0][0] = 423 * MiB;
	assert_int_equal(ub_chunk_layout(r.d, 2, T_DATA, 0, &p), 0);
	assert_stripe(&p, 0, 2, 1 * MiB);
	/* cap: 10% of 2 GiB = 214748364 -> roundup to 16M = 208M */
	assert_int_equal(p.stripe_size, 208 * MiB);
	/* RAID0 spreads over both: offers 423M and 1023M, smallest decides: 423M;
	 * 2 data stripes: 846M > cap -> roundup(107374182, 16M) = 112M */
	assert_int_equal(ub_chunk_layout(r.d, 2, T_DATA | BTRFS_BLOCK_GROUP_RAID0, 0, &p), 0);
	assert_int_equal(p.num_stripes, 2);
	assert_stripe(&p, 0, 2, 1 * MiB);
	assert_stripe(&p, 1, 1, 601 * MiB);
	assert_int_equal(p.stripe_size, 112 * MiB);
	assert_int_equal(p.length, 224 * MiB);
}

static void tiny_devices(void **state)
{
	struct rig r = { .n = 0 };
	struct ub_chunk_plan p;

	(void)state;
	rig_dev(&r, 1 * MiB + 64 * KiB);
	/* 64K free: enough for a single stripe, not for DUP's two */
	assert_int_equal(ub_chunk_layout(r.d, 1, T_META, 0, &p), 0);
	assert_int_equal(p.stripe_size, 64 * KiB);
	assert_int_equal(ub_chunk_layout(r.d, 1, T_META | BTRFS_BLOCK_GROUP_DUP, 0, &p), -ENOSPC);
}

static void bad_input(void **state)
{
	struct rig r = { .n = 0 };
	struct ub_chunk_plan p;

	(void)state;
	rig_dev(&r, 1 * GiB);
	assert_int_equal(ub_chunk_layout(r.d, 1, T_DATA | BTRFS_BLOCK_GROUP_RAID1 | BTRFS_BLOCK_GROUP_DUP, 0, &p),
			 -EINVAL);
	assert_int_equal(ub_chunk_layout(r.d, 1, BTRFS_BLOCK_GROUP_DUP, 0, &p), -EINVAL);
	/* overlapping holes, and a hole past the device's end */
	r.d[0].nholes = 2;
	r.hs[0][1] = 2 * MiB, r.hl[0][1] = 1 * MiB;
	assert_int_equal(ub_chunk_layout(r.d, 1, T_DATA, 0, &p), -EINVAL);
	r.d[0].nholes = 1;
	r.hl[0][0] = 1 * GiB;
	assert_int_equal(ub_chunk_layout(r.d, 1, T_DATA, 0, &p), -EINVAL);
	/* no devices */
	assert_int_equal(ub_chunk_layout(r.d, 0, T_DATA, 0, &p), -ENOSPC);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(dup_metadata_one_device),
		cmocka_unit_test(system_hint_and_apply),
		cmocka_unit_test(raid1_picks_the_roomiest),
		cmocka_unit_test(raid10_rounds_to_pairs),
		cmocka_unit_test(raid5_raid6_data),
		cmocka_unit_test(holes_first_fit_then_largest),
		cmocka_unit_test(single_goes_to_the_emptiest),
		cmocka_unit_test(tiny_devices),
		cmocka_unit_test(bad_input),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
