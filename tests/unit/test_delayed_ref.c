/* SPDX-License-Identifier: MIT */
/*
 * Delayed reference folding (lib/alloc/delayed_ref.c) against a model: a
 * plain list of every change made, summed per (extent, reference) when the
 * queue is drained, so the model knows nothing of the queue's structure.
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
#include <linux/btrfs_tree.h>

#include "alloc/delayed_ref.h"

static uint64_t rng_state;
static uint64_t rnd(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545F4914F6CDD1DULL;
}
static uint64_t rnd_below(uint64_t n) { return rnd() % n; }

static void test_cancel(void **state)
{
	struct ub_dref_queue *q;
	struct ub_dref_head *h;
	assert_int_equal(ub_dref_queue_new(&q), 0);
	/* a new tree block referenced, then dropped: nothing left but "new, unreserve" */
	assert_int_equal(ub_dref_add_tree(q, 1 << 20, 16384, 0, 5, 0, +1, UB_DREF_NEW_EXTENT), 0);
	assert_int_equal(ub_dref_add_tree(q, 1 << 20, 16384, 0, 5, 0, -1, 0), 0);
	/* an existing data extent: +2 then -2 for the same inode/offset, +1 shared */
	assert_int_equal(ub_dref_add_data(q, 8 << 20, 4096, 5, 257, 0, 0, 2, 0), 0);
	assert_int_equal(ub_dref_add_data(q, 8 << 20, 4096, 5, 257, 0, 0, -2, UB_DREF_LAST_REF), 0);
	assert_int_equal(ub_dref_add_data(q, 8 << 20, 4096, 0, 0, 0, 30 << 20, 1, 0), 0);
	/* flags on a tree block, and mismatches */
	assert_int_equal(ub_dref_set_flags(q, 4 << 20, 16384, 1, BTRFS_BLOCK_FLAG_FULL_BACKREF), 0);
	assert_int_equal(ub_dref_add_tree(q, 4 << 20, 16384, 2, 5, 0, 1, 0), -EINVAL);      /* other level */
	assert_int_equal(ub_dref_add_tree(q, 4 << 20, 4096, 1, 5, 0, 1, 0), -EINVAL);       /* other size */
	assert_int_equal(ub_dref_add_data(q, 4 << 20, 16384, 5, 257, 0, 0, 1, 0), -EINVAL); /* other kind */
	assert_int_equal(ub_dref_add_tree(q, 4 << 20, 16384, 1, 5, 7, 1, 0), -EINVAL);      /* root and parent */
	assert_int_equal(ub_dref_add_tree(q, 4 << 20, 16384, 1, 0, 0, 1, 0), -EINVAL);      /* neither */
	assert_int_equal(ub_dref_add_tree(q, 4 << 20, 16384, 1, 5, 0, 0, 0), -EINVAL);      /* no change */
	assert_int_equal(ub_dref_set_flags(q, 4 << 20, 16384, 1, 1ULL << 40), -EINVAL);
	assert_int_equal(ub_dref_count(q), 3);

	assert_int_equal(ub_dref_pop_head(q, &h), 0);
	assert_int_equal(h->bytenr, 1 << 20);
	assert_true(h->new_extent);
	assert_int_equal(h->nrefs, 0);
	assert_int_equal(h->total_delta, 0);
	ub_dref_head_free(h);

	assert_int_equal(ub_dref_pop_head(q, &h), 0);
	assert_int_equal(h->bytenr, 4 << 20);
	assert_int_equal(h->level, 1);
	assert_int_equal(h->set_flags, BTRFS_BLOCK_FLAG_FULL_BACKREF);
	assert_int_equal(h->nrefs, 0);
	ub_dref_head_free(h);

	assert_int_equal(ub_dref_pop_head(q, &h), 0);
	assert_int_equal(h->bytenr, 8 << 20);
	assert_true(h->is_data);
	assert_false(h->new_extent);
	assert_true(h->free_hint);
	assert_int_equal(h->nrefs, 1);
	assert_int_equal(h->refs[0].type, BTRFS_SHARED_DATA_REF_KEY);
	assert_int_equal(h->refs[0].parent, 30 << 20);
	assert_int_equal(h->refs[0].delta, 1);
	assert_int_equal(h->total_delta, 1);
	ub_dref_head_free(h);
	assert_int_equal(ub_dref_pop_head(q, &h), 1);
	ub_dref_queue_free(q);
}

/* Changes queued while draining, below the last popped bytenr, come out next. */
static void test_queue_while_draining(void **state)
{
	struct ub_dref_queue *q;
	struct ub_dref_head *h;
	assert_int_equal(ub_dref_queue_new(&q), 0);
	assert_int_equal(ub_dref_add_tree(q, 100 << 20, 16384, 0, 2, 0, 1, UB_DREF_NEW_EXTENT), 0);
	assert_int_equal(ub_dref_add_tree(q, 200 << 20, 16384, 0, 2, 0, 1, UB_DREF_NEW_EXTENT), 0);
	assert_int_equal(ub_dref_pop_head(q, &h), 0);
	assert_int_equal(h->bytenr, 100 << 20);
	ub_dref_head_free(h);
	assert_int_equal(ub_dref_add_tree(q, 50 << 20, 16384, 0, 2, 0, -1, 0), 0);
	assert_int_equal(ub_dref_pop_head(q, &h), 0);
	assert_int_equal(h->bytenr, 50 << 20);
	assert_int_equal(h->total_delta, -1);
	ub_dref_head_free(h);
	assert_int_equal(ub_dref_pop_head(q, &h), 0);
	assert_int_equal(h->bytenr, 200 << 20);
	ub_dref_head_free(h);
	assert_int_equal(ub_dref_count(q), 0);
	/* freeing a queue with heads left is clean */
	assert_int_equal(ub_dref_add_data(q, 1 << 30, 4096, 5, 300, 4096, 0, 3, UB_DREF_NEW_EXTENT), 0);
	ub_dref_queue_free(q);
}

/* ---- random changes against the model ---- */

struct change {
	uint64_t bytenr;
	bool data;
	struct ub_dref r;
};

#define NEXT 64

/* strictly increasing in (type, root, parent, objectid, offset) */
static bool lex_less(const struct ub_dref *a, const struct ub_dref *b)
{
	uint64_t x[5] = { a->type, a->root, a->parent, a->objectid, a->offset };
	uint64_t y[5] = { b->type, b->root, b->parent, b->objectid, b->offset };
	for (int i = 0; i < 5; i++)
		if (x[i] != y[i])
			return x[i] < y[i];
	return false;
}

static uint64_t ext_bytenr(int i) { return (1ULL << 30) + (uint64_t)(i * 7919 % NEXT) * 65536; }

static void run_random(uint64_t seed, int n)
{
	struct ub_dref_queue *q;
	struct change *log = calloc((size_t)n, sizeof(*log));
	assert_non_null(log);
	rng_state = seed;
	assert_int_equal(ub_dref_queue_new(&q), 0);
	bool newext[NEXT] = { 0 };
	for (int k = 0; k < n; k++) {
		int e = (int)rnd_below(NEXT);
		bool data = e % 2; /* each extent keeps one kind */
		struct change *c = &log[k];
		c->bytenr = ext_bytenr(e);
		c->data = data;
		/* few distinct references so that folds and cancels happen */
		int which = (int)rnd_below(4);
		int64_t delta = (rnd() & 1) ? 1 : -1;
		if (data && (rnd() & 3) == 0)
			delta *= 1 + (int64_t)rnd_below(3);
		unsigned flags = 0;
		if (delta > 0 && (rnd() % 16) == 0) {
			flags = UB_DREF_NEW_EXTENT;
			newext[e] = true;
		}
		c->r.delta = delta;
		if (!data) {
			if (which < 3) {
				c->r.type = BTRFS_TREE_BLOCK_REF_KEY;
				c->r.root = 5 + (uint64_t)which;
			} else {
				c->r.type = BTRFS_SHARED_BLOCK_REF_KEY;
				c->r.parent = 77 << 20;
			}
			assert_int_equal(ub_dref_add_tree(q, c->bytenr, 16384, e % 3 == 0 ? 1 : 0, c->r.root,
							  c->r.parent, (int)delta, flags),
					 0);
		} else {
			if (which < 3) {
				c->r.type = BTRFS_EXTENT_DATA_REF_KEY;
				c->r.root = 5;
				c->r.objectid = 257 + (uint64_t)(which & 1);
				c->r.offset = (uint64_t)(which >> 1) * 4096;
			} else {
				c->r.type = BTRFS_SHARED_DATA_REF_KEY;
				c->r.parent = 88 << 20;
			}
			assert_int_equal(ub_dref_add_data(q, c->bytenr, 8192, c->r.root, c->r.objectid, c->r.offset,
							  c->r.parent, delta, flags),
					 0);
		}
	}
	/* drain: heads in increasing bytenr, each equal to the model's sums */
	struct ub_dref_head *h;
	uint64_t prev = 0;
	int heads = 0;
	while (ub_dref_pop_head(q, &h) == 0) {
		assert_true(heads == 0 || h->bytenr > prev);
		prev = h->bytenr;
		heads++;
		int e = -1;
		for (int i = 0; i < NEXT; i++)
			if (ext_bytenr(i) == h->bytenr)
				e = i;
		assert_true(e >= 0);
		assert_int_equal(h->is_data, e % 2 == 1);
		assert_int_equal(h->num_bytes, h->is_data ? 8192 : 16384);
		if (!h->is_data)
			assert_int_equal(h->level, e % 3 == 0 ? 1 : 0);
		assert_int_equal(h->new_extent, newext[e]);
		/* the model's distinct references of this extent with their sums */
		int64_t total = 0;
		int nonzero = 0;
		for (int k = 0; k < n; k++) {
			if (log[k].bytenr != h->bytenr)
				continue;
			total += log[k].r.delta;
			bool first = true;
			for (int j = 0; j < k; j++)
				if (log[j].bytenr == h->bytenr && log[j].r.type == log[k].r.type &&
				    log[j].r.root == log[k].r.root && log[j].r.parent == log[k].r.parent &&
				    log[j].r.objectid == log[k].r.objectid && log[j].r.offset == log[k].r.offset)
					first = false;
			if (!first)
				continue;
			int64_t sum = 0;
			for (int j = k; j < n; j++)
				if (log[j].bytenr == h->bytenr && log[j].r.type == log[k].r.type &&
				    log[j].r.root == log[k].r.root && log[j].r.parent == log[k].r.parent &&
				    log[j].r.objectid == log[k].r.objectid && log[j].r.offset == log[k].r.offset)
					sum += log[j].r.delta;
			if (sum == 0)
				continue;
			nonzero++;
			bool found = false;
			for (int i = 0; i < h->nrefs; i++) {
				const struct ub_dref *r = &h->refs[i];
				if (r->type == log[k].r.type && r->root == log[k].r.root && r->parent == log[k].r.parent &&
				    r->objectid == log[k].r.objectid && r->offset == log[k].r.offset) {
					assert_int_equal(r->delta, sum);
					found = true;
				}
			}
			assert_true(found);
		}
		assert_int_equal(h->nrefs, nonzero);
		assert_int_equal(h->total_delta, total);
		for (int i = 1; i < h->nrefs; i++)
			assert_true(lex_less(&h->refs[i - 1], &h->refs[i]));
		ub_dref_head_free(h);
	}
	int distinct = 0;
	for (int i = 0; i < NEXT; i++)
		for (int k = 0; k < n; k++)
			if (log[k].bytenr == ext_bytenr(i)) {
				distinct++;
				break;
			}
	assert_int_equal(heads, distinct);
	ub_dref_queue_free(q);
	free(log);
}

/* A relocated tree block's extent keeps the block's generation; other heads keep 0 (the transaction's). */
static void test_generation(void **state)
{
	struct ub_dref_queue *q;
	struct ub_dref_head *h;

	assert_int_equal(ub_dref_queue_new(&q), 0);
	assert_int_equal(ub_dref_add_tree(q, 1 << 20, 16384, 0, 256, 0, +1, UB_DREF_NEW_EXTENT), 0);
	assert_int_equal(ub_dref_set_generation(q, 1 << 20, 16384, 0, 7), 0);
	assert_int_equal(ub_dref_set_generation(q, 1 << 20, 16384, 1, 7), -EINVAL); /* other level */
	assert_int_equal(ub_dref_add_tree(q, 2 << 20, 16384, 0, 256, 0, +1, UB_DREF_NEW_EXTENT), 0);
	assert_int_equal(ub_dref_pop_head(q, &h), 0);
	assert_int_equal(h->generation, 7);
	assert_true(h->new_extent);
	ub_dref_head_free(h);
	assert_int_equal(ub_dref_pop_head(q, &h), 0);
	assert_int_equal(h->generation, 0);
	ub_dref_head_free(h);
	assert_int_equal(ub_dref_pop_head(q, &h), 1);
	ub_dref_queue_free(q);
}

static void test_random1(void **state) { run_random(3, 3000); }
static void test_random2(void **state) { run_random(0xabcdefULL, 3000); }

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cancel),
		cmocka_unit_test(test_queue_while_draining),
		cmocka_unit_test(test_generation),
		cmocka_unit_test(test_random1),
		cmocka_unit_test(test_random2),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
