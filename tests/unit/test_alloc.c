/* SPDX-License-Identifier: MIT */
/*
 * The allocator (lib/alloc/alloc.c) on block groups built in memory:
 * alignment, reservation/unreservation, accounting and its per-commit
 * deltas, pinning, chunk decisions, and the RAID5/6 whole-stripe rule
 * against a per-sector model of several transactions (fixed seeds).
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

#include "alloc/alloc_internal.h"

#define KiB 1024ULL
#define MiB (1024ULL * KiB)
#define GiB (1024ULL * MiB)
#define SECT 4096ULL
#define NODE 16384ULL

#define T_DATA BTRFS_BLOCK_GROUP_DATA
#define T_META BTRFS_BLOCK_GROUP_METADATA
#define T_SYS BTRFS_BLOCK_GROUP_SYSTEM

static uint64_t rng_state;
static uint64_t rnd(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545F4914F6CDD1DULL;
}
static uint64_t rnd_below(uint64_t n) { return rnd() % n; }

static struct ub_alloc *new_alloc(void)
{
	struct ub_alloc *a = NULL;
	struct ub_log quiet = { 0 };
	quiet.verbosity = -1; /* the error paths below are expected */
	assert_int_equal(ub_alloc_create(NULL, &quiet, &a), 0);
	return a;
}

static void test_metadata_alignment(void **state)
{
	struct ub_alloc *a = new_alloc();
	/* a group that starts off a 64 KiB boundary: blocks must still be nodesize aligned */
	uint64_t start = 1 * GiB + 4 * KiB, len = 4 * MiB;
	struct ub_range sup = { 1 * GiB + 1 * MiB, 64 * KiB };
	assert_int_equal(ub_alloc_insert_bg(a, T_META | BTRFS_BLOCK_GROUP_DUP, start, len, 0, &sup, 1, NULL), 0);
	uint64_t n = 0, s, prev_end = 0;
	while (ub_alloc_reserve(a, T_META, NODE, 0, &s) == 0) {
		assert_int_equal(s % NODE, 0);
		assert_true(s >= start && s + NODE <= start + len);
		assert_int_equal(s / (64 * KiB), (s + NODE - 1) / (64 * KiB));
		assert_false(s < sup.start + sup.len && s + NODE > sup.start);
		assert_true(s >= prev_end); /* next fit walks forward in a fresh group */
		prev_end = s + NODE;
		n++;
	}
	/* every aligned block but the unaligned head, the tail and the superblock stripe */
	uint64_t first = (start + NODE - 1) / NODE * NODE, last = (start + len) / NODE * NODE;
	assert_int_equal(n, (last - first) / NODE - (64 * KiB) / NODE);
	assert_int_equal(ub_alloc_reserve(a, T_META, NODE, 0, &s), -ENOSPC);
	assert_int_equal(ub_alloc_reserve(a, T_DATA, SECT, 0, &s), -ENOSPC); /* no data group */
	assert_int_equal(ub_alloc_reserve(a, T_META, NODE + SECT, 0, &s), -EINVAL);
	assert_int_equal(ub_alloc_reserve(a, 0, NODE, 0, &s), -EINVAL);
	assert_int_equal(ub_alloc_verify(a), 0);
	ub_alloc_free(a);
}

static void test_type_matching(void **state)
{
	struct ub_alloc *a = new_alloc();
	uint64_t s;
	assert_int_equal(ub_alloc_insert_bg(a, T_DATA, 1 * GiB, 8 * MiB, 0, NULL, 0, NULL), 0);
	assert_int_equal(ub_alloc_insert_bg(a, T_SYS | BTRFS_BLOCK_GROUP_DUP, 2 * GiB, 8 * MiB, 0, NULL, 0, NULL), 0);
	assert_int_equal(ub_alloc_insert_bg(a, T_DATA | T_META, 3 * GiB, 8 * MiB, 0, NULL, 0, NULL), 0);
	assert_int_equal(ub_alloc_insert_bg(a, T_DATA, 1 * GiB + 4 * MiB, 8 * MiB, 0, NULL, 0, NULL), -EEXIST);
	assert_int_equal(ub_alloc_reserve(a, T_SYS, NODE, 0, &s), 0);
	assert_true(s >= 2 * GiB && s < 2 * GiB + 8 * MiB);
	assert_int_equal(ub_alloc_reserve(a, T_META, NODE, 0, &s), 0); /* only the mixed group serves it */
	assert_true(s >= 3 * GiB && s < 3 * GiB + 8 * MiB);
	assert_int_equal(ub_alloc_reserve(a, T_DATA, 3 * SECT, 1 * GiB + 100 * SECT, &s), 0);
	assert_int_equal(s, 1 * GiB + 100 * SECT); /* hint honoured */
	assert_int_equal(ub_alloc_reserve(a, T_DATA, SECT + 1, 0, &s), -EINVAL);
	struct ub_space_info si;
	ub_alloc_space_info(a, T_DATA, &si);
	assert_int_equal(si.nr_groups, 2);
	assert_int_equal(si.total, 16 * MiB);
	assert_int_equal(si.reserved, 3 * SECT + NODE); /* the mixed group counts for data too */
	ub_alloc_free(a);
}

/* reserve -> account -> commit -> free + pin -> unusable -> unpin -> usable */
static void test_pin_cycle(void **state)
{
	struct ub_alloc *a = new_alloc();
	uint64_t s, s2;
	assert_int_equal(ub_alloc_insert_bg(a, T_META, 1 * GiB, 4 * NODE, 0, NULL, 0, NULL), 0);
	uint64_t blk[4];
	for (int i = 0; i < 4; i++)
		assert_int_equal(ub_alloc_reserve(a, T_META, NODE, 0, &blk[i]), 0);
	assert_int_equal(ub_alloc_reserve(a, T_META, NODE, 0, &s), -ENOSPC);
	/* a reservation given back is usable at once */
	ub_alloc_unreserve(a, blk[3], NODE);
	assert_int_equal(ub_alloc_reserve(a, T_META, NODE, 0, &s), 0);
	assert_int_equal(s, blk[3]);
	for (int i = 0; i < 4; i++)
		assert_int_equal(ub_alloc_account(a, blk[i], NODE, true), 0);
	assert_int_equal(ub_alloc_account(a, blk[0], NODE, true), -EUCLEAN); /* twice */
	ub_alloc_clear_dirty(a);
	ub_alloc_unpin(a);
	/* the next transaction frees blk[1] */
	assert_int_equal(ub_alloc_account(a, blk[1], NODE, false), 0);
	assert_int_equal(ub_alloc_account(a, blk[1], NODE, false), -EUCLEAN); /* twice */
	assert_int_equal(ub_alloc_pin(a, blk[1], NODE), 0);
	assert_int_equal(ub_alloc_reserve(a, T_META, NODE, 0, &s), -ENOSPC);
	assert_int_equal(ub_alloc_reserve_at(a, blk[1], NODE), -ENOSPC);
	struct ub_bg_info bi;
	assert_int_equal(ub_alloc_bg_info(a, blk[1], &bi), 0);
	assert_int_equal(bi.pinned, NODE);
	assert_int_equal(bi.used, 3 * NODE);
	assert_int_equal(ub_alloc_verify(a), 0);
	ub_alloc_unpin(a);
	assert_int_equal(ub_alloc_reserve(a, T_META, NODE, 0, &s2), 0);
	assert_int_equal(s2, blk[1]);
	/* a pin of a still allocated extent must not make it allocatable */
	ub_alloc_unreserve(a, s2, NODE);
	assert_int_equal(ub_alloc_pin(a, blk[2], NODE), 0);
	ub_alloc_unpin(a);
	assert_int_equal(ub_alloc_reserve(a, T_META, NODE, 0, &s), 0);
	assert_int_equal(s, blk[1]);
	assert_int_equal(ub_alloc_reserve(a, T_META, NODE, 0, &s), -ENOSPC);
	assert_int_equal(ub_alloc_account(a, 5 * GiB, NODE, true), -ENOENT);
	assert_int_equal(ub_alloc_pin(a, 5 * GiB, NODE), -ENOENT);
	assert_int_equal(ub_alloc_verify(a), 0);
	ub_alloc_free(a);
}

struct delta_seen {
	int calls;
	struct ub_bg_delta d;
	uint64_t free_ranges[8][2], used_ranges[8][2];
	int nfree, nused;
};

static int collect(void *arg, const struct ub_bg_delta *d)
{
	struct delta_seen *ds = arg;
	struct ub_range r;
	uint64_t pos = 0;
	ds->calls++;
	ds->d = *d;
	ds->nfree = ds->nused = 0;
	while (ub_rs_next(d->became_free, pos, &r) == 0 && ds->nfree < 8) {
		ds->free_ranges[ds->nfree][0] = r.start;
		ds->free_ranges[ds->nfree++][1] = r.len;
		pos = r.start + r.len;
	}
	pos = 0;
	while (ub_rs_next(d->became_used, pos, &r) == 0 && ds->nused < 8) {
		ds->used_ranges[ds->nused][0] = r.start;
		ds->used_ranges[ds->nused++][1] = r.len;
		pos = r.start + r.len;
	}
	return 0;
}

static void test_deltas(void **state)
{
	struct ub_alloc *a = new_alloc();
	struct delta_seen ds;
	uint64_t g = 1 * GiB;
	assert_int_equal(ub_alloc_insert_bg(a, T_DATA, g, 1 * MiB, 0, NULL, 0, NULL), 0);
	assert_int_equal(ub_alloc_insert_bg(a, T_DATA, 2 * GiB, 1 * MiB, 0, NULL, 0, NULL), 0);
	memset(&ds, 0, sizeof(ds));
	assert_int_equal(ub_alloc_for_each_dirty_bg(a, collect, &ds), 0);
	assert_int_equal(ds.calls, 0);
	assert_int_equal(ub_alloc_reserve_at(a, g, 64 * KiB), 0);
	assert_int_equal(ub_alloc_account(a, g, 16 * KiB, true), 0);
	assert_int_equal(ub_alloc_account(a, g + 16 * KiB, 16 * KiB, true), 0);
	assert_int_equal(ub_alloc_account(a, g + 32 * KiB, 32 * KiB, true), 0);
	/* freed again in the same transaction: nets out of the delta */
	assert_int_equal(ub_alloc_account(a, g + 16 * KiB, 16 * KiB, false), 0);
	assert_int_equal(ub_alloc_pin(a, g + 16 * KiB, 16 * KiB), 0);
	memset(&ds, 0, sizeof(ds));
	assert_int_equal(ub_alloc_for_each_dirty_bg(a, collect, &ds), 0);
	assert_int_equal(ds.calls, 1);
	assert_int_equal(ds.d.start, g);
	assert_int_equal(ds.d.used, 48 * KiB);
	assert_int_equal(ds.d.old_used, 0);
	assert_int_equal(ds.nfree, 0);
	assert_int_equal(ds.nused, 2);
	assert_int_equal(ds.used_ranges[0][0], g);
	assert_int_equal(ds.used_ranges[0][1], 16 * KiB);
	assert_int_equal(ds.used_ranges[1][0], g + 32 * KiB);
	assert_int_equal(ds.used_ranges[1][1], 32 * KiB);
	assert_int_equal(ds.d.free->bytes, 1 * MiB - 48 * KiB);
	assert_int_equal(ds.d.free->count, 2);
	/* a failed commit walks again and sees the same */
	memset(&ds, 0, sizeof(ds));
	assert_int_equal(ub_alloc_for_each_dirty_bg(a, collect, &ds), 0);
	assert_int_equal(ds.calls, 1);
	ub_alloc_clear_dirty(a);
	ub_alloc_unpin(a);
	/* next transaction: free what was committed, then allocate part of it back */
	assert_int_equal(ub_alloc_account(a, g + 32 * KiB, 32 * KiB, false), 0);
	assert_int_equal(ub_alloc_pin(a, g + 32 * KiB, 32 * KiB), 0);
	assert_int_equal(ub_alloc_reserve_at(a, g + 16 * KiB, 16 * KiB), 0);
	assert_int_equal(ub_alloc_account(a, g + 16 * KiB, 16 * KiB, true), 0);
	memset(&ds, 0, sizeof(ds));
	assert_int_equal(ub_alloc_for_each_dirty_bg(a, collect, &ds), 0);
	assert_int_equal(ds.d.old_used, 48 * KiB);
	assert_int_equal(ds.d.used, 32 * KiB);
	assert_int_equal(ds.nfree, 1);
	assert_int_equal(ds.free_ranges[0][0], g + 32 * KiB);
	assert_int_equal(ds.free_ranges[0][1], 32 * KiB);
	assert_int_equal(ds.nused, 1);
	assert_int_equal(ds.used_ranges[0][0], g + 16 * KiB);
	assert_int_equal(ub_alloc_verify(a), 0);
	ub_alloc_free(a);
}

static void test_new_group_and_chunk_rule(void **state)
{
	struct ub_alloc *a = new_alloc();
	assert_true(ub_alloc_need_chunk(a, T_META)); /* none yet */
	assert_int_equal(ub_alloc_add_block_group(a, T_META | BTRFS_BLOCK_GROUP_DUP, 1 * GiB, 32 * MiB), 0);
	assert_false(ub_alloc_need_chunk(a, T_META));
	struct delta_seen ds;
	memset(&ds, 0, sizeof(ds));
	assert_int_equal(ub_alloc_for_each_dirty_bg(a, collect, &ds), 0);
	assert_int_equal(ds.calls, 1);
	assert_true(ds.d.is_new);
	assert_int_equal(ds.d.free->bytes, 32 * MiB);
	ub_alloc_clear_dirty(a);
	/* used + 2 MiB >= 80% of 32 MiB: 23.6 MiB used needs a chunk, 23 MiB does not */
	uint64_t s, n = 0;
	while (n * NODE < 23 * MiB) {
		assert_int_equal(ub_alloc_reserve(a, T_META, NODE, 0, &s), 0);
		assert_int_equal(ub_alloc_account(a, s, NODE, true), 0);
		n++;
	}
	assert_false(ub_alloc_need_chunk(a, T_META));
	for (int i = 0; i < 40; i++) {
		assert_int_equal(ub_alloc_reserve(a, T_META, NODE, 0, &s), 0);
		n++;
	}
	assert_true(ub_alloc_need_chunk(a, T_META));
	assert_true(ub_alloc_need_chunk(a, T_DATA)); /* no data group at all */
	ub_alloc_free(a);
}

/* ---- RAID5/6 whole-stripe rule against a per-sector model ---- */

enum { S_FREE, S_SUPER, S_RES, S_CUR, S_OLD, S_PIN };

#define NSECT 2048 /* 8 MiB group */

struct rext {
	uint64_t start, len;
	int state; /* S_RES, S_CUR, S_OLD */
};

struct r56 {
	struct ub_alloc *a;
	uint64_t g, fs;
	bool meta;
	uint8_t sect[NSECT];
	struct rext ext[4096];
	int next;
	bool was_alloc[NSECT]; /* allocated on disk at the last commit */
};

struct delta_check {
	const struct r56 *m;
	int calls;
};

/* The delta handed to the commit is exactly the model's change since the last commit. */
static int check_delta(void *arg, const struct ub_bg_delta *d)
{
	struct delta_check *dc = arg;
	const struct r56 *m = dc->m;
	uint64_t used = 0;
	dc->calls++;
	assert_int_equal(d->start, m->g);
	for (int i = 0; i < NSECT; i++) {
		uint64_t at = m->g + (uint64_t)i * SECT;
		bool now = m->sect[i] == S_CUR || m->sect[i] == S_OLD;
		used += now ? SECT : 0;
		assert_int_equal(ub_rs_contains(d->became_used, at, SECT), now && !m->was_alloc[i]);
		assert_int_equal(ub_rs_contains(d->became_free, at, SECT), !now && m->was_alloc[i]);
		assert_int_equal(ub_rs_contains(d->free, at, SECT), !now);
	}
	assert_int_equal(d->used, used);
	return 0;
}

static bool stripe_clean(const struct r56 *m, uint64_t stripe_idx)
{
	uint64_t per = m->fs / SECT;
	for (uint64_t i = stripe_idx * per; i < (stripe_idx + 1) * per && i < NSECT; i++)
		if (m->sect[i] == S_SUPER || m->sect[i] == S_OLD || m->sect[i] == S_PIN)
			return false;
	return true;
}

/* May [s, s+len) be given to the running transaction? */
static bool placement_ok(const struct r56 *m, uint64_t s, uint64_t len)
{
	uint64_t u = (s - m->g) / SECT, n = len / SECT;
	for (uint64_t i = u; i < u + n; i++)
		if (m->sect[i] != S_FREE)
			return false;
	if (!m->fs)
		return true;
	for (uint64_t st = (s - m->g) / m->fs; st <= (s + len - 1 - m->g) / m->fs; st++)
		if (!stripe_clean(m, st))
			return false;
	return true;
}

static void set_range(struct r56 *m, uint64_t s, uint64_t len, int st)
{
	for (uint64_t i = (s - m->g) / SECT; i < (s - m->g + len) / SECT; i++)
		m->sect[i] = (uint8_t)st;
}

static void r56_reserve(struct r56 *m)
{
	uint64_t len = m->meta ? NODE : SECT * (1 + rnd_below(rnd() & 1 ? 4 : 40));
	uint64_t align = m->meta ? NODE : SECT, s = 0;
	int ret = ub_alloc_reserve(m->a, m->meta ? T_META : T_DATA, len, 0, &s);
	if (ret == -ENOSPC) {
		/* complete: no allowed placement exists */
		for (uint64_t c = m->g; c + len <= m->g + NSECT * SECT; c += align)
			assert_false(placement_ok(m, c, len));
		return;
	}
	assert_int_equal(ret, 0);
	assert_int_equal(s % align, 0);
	assert_true(placement_ok(m, s, len));
	set_range(m, s, len, S_RES);
	if (m->next < 4096)
		m->ext[m->next++] = (struct rext){ s, len, S_RES };
	else
		ub_alloc_unreserve(m->a, s, len), set_range(m, s, len, S_FREE);
}

static void r56_commit(struct r56 *m)
{
	/* every reservation gets its extent item, then the transaction ends */
	for (int i = 0; i < m->next; i++) {
		if (m->ext[i].state == S_RES) {
			assert_int_equal(ub_alloc_account(m->a, m->ext[i].start, m->ext[i].len, true), 0);
			m->ext[i].state = S_CUR;
		}
		if (m->ext[i].state == S_CUR) {
			m->ext[i].state = S_OLD;
			set_range(m, m->ext[i].start, m->ext[i].len, S_OLD);
		}
	}
	struct delta_check dc = { m, 0 };
	assert_int_equal(ub_alloc_for_each_dirty_bg(m->a, check_delta, &dc), 0);
	assert_true(dc.calls <= 1);
	for (int i = 0; i < NSECT; i++) {
		bool now = m->sect[i] == S_CUR || m->sect[i] == S_OLD;
		/* a group that did not change is not visited */
		if (dc.calls == 0)
			assert_int_equal(now, m->was_alloc[i]);
		m->was_alloc[i] = now;
	}
	for (int i = 0; i < NSECT; i++)
		if (m->sect[i] == S_PIN)
			m->sect[i] = S_FREE;
	ub_alloc_clear_dirty(m->a);
	ub_alloc_unpin(m->a);
}

static void run_raid56(uint64_t seed, bool meta, uint64_t nparity)
{
	struct r56 *m = calloc(1, sizeof(*m));
	assert_non_null(m);
	rng_state = seed;
	m->a = new_alloc();
	m->g = 1 * GiB;
	m->meta = meta;
	/* 3-device RAID5, 5-device RAID6, or (nparity 0) DUP: no stripe rule */
	m->fs = nparity == 0 ? 0 : (nparity == 1 ? 2 : 3) * 64 * KiB;
	uint64_t prof = nparity == 0 ? BTRFS_BLOCK_GROUP_DUP
				     : nparity == 1 ? BTRFS_BLOCK_GROUP_RAID5 : BTRFS_BLOCK_GROUP_RAID6;
	/* a superblock full stripe in the middle */
	struct ub_range sup = m->fs ? (struct ub_range){ m->g + 5 * m->fs, m->fs } : (struct ub_range){ m->g + 960 * KiB, 64 * KiB };
	assert_int_equal(ub_alloc_insert_bg(m->a, (meta ? T_META : T_DATA) | prof, m->g, NSECT * SECT, m->fs, &sup, 1,
					    NULL),
			 0);
	set_range(m, sup.start, sup.len, S_SUPER);
	for (int step = 0; step < 3000; step++) {
		int op = (int)rnd_below(20);
		if (op < 9) {
			r56_reserve(m);
		} else if (op < 11 && m->next) { /* unreserve a reservation */
			int i = (int)rnd_below((uint64_t)m->next);
			if (m->ext[i].state == S_RES) {
				ub_alloc_unreserve(m->a, m->ext[i].start, m->ext[i].len);
				set_range(m, m->ext[i].start, m->ext[i].len, S_FREE);
				m->ext[i] = m->ext[--m->next];
			}
		} else if (op < 14 && m->next) { /* its extent item goes in */
			int i = (int)rnd_below((uint64_t)m->next);
			if (m->ext[i].state == S_RES) {
				assert_int_equal(ub_alloc_account(m->a, m->ext[i].start, m->ext[i].len, true), 0);
				m->ext[i].state = S_CUR;
				set_range(m, m->ext[i].start, m->ext[i].len, S_CUR);
			}
		} else if (op < 18 && m->next) { /* a committed extent is freed */
			int i = (int)rnd_below((uint64_t)m->next);
			/* plain groups: also an extent accounted in this very transaction (nets out of the delta) */
			if (m->ext[i].state == S_OLD || (m->ext[i].state == S_CUR && !m->fs)) {
				assert_int_equal(ub_alloc_account(m->a, m->ext[i].start, m->ext[i].len, false), 0);
				assert_int_equal(ub_alloc_pin(m->a, m->ext[i].start, m->ext[i].len), 0);
				set_range(m, m->ext[i].start, m->ext[i].len, S_PIN);
				m->ext[i] = m->ext[--m->next];
			}
		} else {
			r56_commit(m);
		}
		if (step % 64 == 0)
			assert_int_equal(ub_alloc_verify(m->a), 0);
	}
	r56_commit(m);
	assert_int_equal(ub_alloc_verify(m->a), 0);
	ub_alloc_free(m->a);
	free(m);
}

static void test_raid5_data_seed1(void **state) { run_raid56(7, false, 1); }
static void test_raid5_data_seed2(void **state) { run_raid56(0x1234567ULL, false, 1); }
static void test_raid6_data(void **state) { run_raid56(99, false, 2); }
static void test_raid6_metadata(void **state) { run_raid56(5, true, 2); }
/* the same model without the stripe rule: placement, pins and deltas of a plain group */
static void test_plain_data(void **state) { run_raid56(11, false, 0); }
static void test_plain_metadata(void **state) { run_raid56(12, true, 0); }

/* The rule by hand: the tail of a stripe opened by this transaction, not by the previous one. */
static void test_raid5_tail(void **state)
{
	struct ub_alloc *a = new_alloc();
	uint64_t g = 1 * GiB, fs = 128 * KiB, s;
	assert_int_equal(ub_alloc_insert_bg(a, T_DATA | BTRFS_BLOCK_GROUP_RAID5, g, 4 * fs, fs, NULL, 0, NULL), 0);
	assert_int_equal(ub_alloc_reserve(a, T_DATA, SECT, 0, &s), 0);
	assert_int_equal(s, g);
	assert_int_equal(ub_alloc_reserve(a, T_DATA, SECT, 0, &s), 0);
	assert_int_equal(s, g + SECT); /* same transaction: the open stripe's tail */
	assert_int_equal(ub_alloc_account(a, g, 2 * SECT, true), 0);
	ub_alloc_clear_dirty(a);
	ub_alloc_unpin(a);
	assert_int_equal(ub_alloc_reserve(a, T_DATA, SECT, g, &s), 0);
	assert_int_equal(s, g + fs); /* next transaction: the partial stripe is skipped */
	/* a request larger than a stripe spans whole free stripes */
	assert_int_equal(ub_alloc_reserve(a, T_DATA, fs + SECT, 0, &s), 0);
	assert_int_equal(s, g + fs + SECT); /* continues in the stripe it opened */
	assert_int_equal(ub_alloc_reserve(a, T_DATA, fs, 0, &s), 0);
	assert_int_equal(s, g + 2 * fs + 2 * SECT);
	/* stripe 0 again, once everything in it is freed and unpinned */
	assert_int_equal(ub_alloc_account(a, g, 2 * SECT, false), 0);
	assert_int_equal(ub_alloc_pin(a, g, 2 * SECT), 0);
	assert_int_equal(ub_alloc_reserve(a, T_DATA, SECT, g, &s), 0);
	assert_true(s != g);
	ub_alloc_unreserve(a, s, SECT);
	ub_alloc_unpin(a);
	assert_int_equal(ub_alloc_reserve(a, T_DATA, SECT, g, &s), 0);
	assert_int_equal(s, g);
	ub_alloc_free(a);
}

/*
 * A RAID0 chunk over 40 devices whose 64 MiB mirror falls in every stripe,
 * stripe j at row j: 40 excluded units, unit j * 40 + j of the chunk (RAID0
 * puts unit u on stripe u % n at row u / n), and loading such a wide chunk
 * must not run out of room for them.
 */
static void test_wide_chunk_super(void **state)
{
	const int n = 40;
	struct ub_chunk *c = calloc(1, sizeof(*c) + (size_t)n * sizeof(struct ub_stripe));
	assert_non_null(c);
	c->logical = 10 * GiB;
	c->length = (uint64_t)n * 64 * MiB;
	c->type = T_DATA | BTRFS_BLOCK_GROUP_RAID0;
	c->stripe_len = 64 * KiB;
	c->num_stripes = (uint16_t)n;
	c->sub_stripes = 1;
	for (int j = 0; j < n; j++)
		c->stripes[j].physical = 64 * MiB - (uint64_t)j * 64 * KiB;
	struct ub_alloc *a = new_alloc();
	struct ub_bg *bg;
	assert_int_equal(ub_alloc_insert_chunk_bg(a, c, c->type, &bg), 0);
	assert_int_equal(bg->super, (uint64_t)n * 64 * KiB);
	for (int j = 0; j < n; j++) {
		uint64_t lg = c->logical + ((uint64_t)j * n + j) * 64 * KiB;
		assert_true(ub_rs_contains(&bg->super_set, lg, 64 * KiB));
		assert_false(ub_rs_overlaps(&bg->avail, lg, 64 * KiB));
	}
	assert_int_equal(ub_alloc_verify(a), 0);
	ub_alloc_free(a);
	free(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_metadata_alignment),
		cmocka_unit_test(test_type_matching),
		cmocka_unit_test(test_pin_cycle),
		cmocka_unit_test(test_deltas),
		cmocka_unit_test(test_new_group_and_chunk_rule),
		cmocka_unit_test(test_raid5_tail),
		cmocka_unit_test(test_raid5_data_seed1),
		cmocka_unit_test(test_raid5_data_seed2),
		cmocka_unit_test(test_raid6_data),
		cmocka_unit_test(test_raid6_metadata),
		cmocka_unit_test(test_plain_data),
		cmocka_unit_test(test_plain_metadata),
		cmocka_unit_test(test_wide_chunk_super),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
