/* SPDX-License-Identifier: MIT */
/*
 * The block cache on real blocks of a filesystem mkfs.btrfs makes at setup
 * (4 KiB nodes, a few hundred fs tree blocks):
 *
 *  - a second read of a block is a hit, the first a miss; the counters say so;
 *  - a small limit evicts unreferenced blocks, never referenced or dirty ones,
 *    and leaves before interior nodes; readahead advice reads nothing in;
 *  - one copy per address, also when several threads miss the same block at
 *    once;
 *  - a repair's salvaged block is taken, cached as made in memory, only when it
 *    passes the checks;
 *  - readers in four threads and the writer creating and dropping blocks of a
 *    transaction share one cache (run under ASan by make SAN=1; the locking
 *    was also run once under -fsanitize=thread).
 *
 * Needs mkfs.btrfs (skipped without it). About 3 s with SAN=1 on a loaded machine.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ubtrfs/fs.h"
#include "fs/fs_priv.h"
#include "tree/tree_write.h"
#include "tree/cache.h"
#include "scratch.h"

#define MAX_BLOCKS 4096

struct blk {
	uint64_t bytenr, owner;
	int level;
};

static struct {
	char dir[64], img[96];
	bool have_mkfs;
	struct ub_fs *fs;
	struct blk blocks[MAX_BLOCKS];
	size_t nblocks;
	uint32_t nodesize;
} E;

static int collect(void *arg, const struct ub_eb *eb)
{
	(void)arg;
	if (E.nblocks == MAX_BLOCKS)
		return 0;
	E.blocks[E.nblocks].bytenr = eb->start;
	E.blocks[E.nblocks].owner = ub_eb_owner(eb);
	E.blocks[E.nblocks].level = ub_eb_level(eb);
	E.nblocks++;
	return 0;
}

static int group_setup(void **state)
{
	const char *paths[1] = { E.img };
	struct ub_fs_opts opts = { .writable = false, .super_mirror = -1, .no_log = true };
	struct ub_block_set seen = { 0 };
	struct ub_root root;

	(void)state;
	if (scratch_dir("cache", E.dir, sizeof(E.dir)))
		return -1;
	snprintf(E.img, sizeof(E.img), "%s/cache.img", E.dir);
	E.have_mkfs = have_mkfs_btrfs();
	if (!E.have_mkfs)
		return 0;
	if (sh("mkdir %s/src && cd %s/src && for i in $(seq 1500); do printf %%s $i > file-$i; done", E.dir, E.dir) ||
	    sh("truncate -s 128M %s && mkfs.btrfs -q -f -n 4096 -s 4096 --rootdir %s/src %s >/dev/null", E.img, E.dir,
	       E.img))
		return -1;
	if (ub_fs_open(paths, 1, &opts, NULL, &E.fs) || ub_fs_tree_root(E.fs, BTRFS_FS_TREE_OBJECTID, &root) ||
	    ub_tree_walk(&E.fs->tc, &root, &seen, BTRFS_FS_TREE_OBJECTID, collect, NULL))
		return -1;
	ub_block_set_free(&seen);
	E.nodesize = E.fs->vol->nodesize;
	return E.nblocks > 50 ? 0 : -1;
}

static int group_teardown(void **state)
{
	(void)state;
	if (E.fs)
		ub_fs_close(E.fs);
	sh("rm -rf %s", E.dir);
	return 0;
}

#define NEED_MKFS() SKIP_WITHOUT_MKFS(E.have_mkfs)

static struct ub_expect expect_of(const struct blk *b)
{
	struct ub_expect e = { b->owner, b->level, 0, NULL, NULL, 0, -1 };
	return e;
}

static int read_blk(struct ub_tree_ctx *tc, const struct blk *b, struct ub_eb **out)
{
	struct ub_expect e = expect_of(b);
	return ub_tree_read_block(tc, b->bytenr, &e, out);
}

/* How many cached copies of `bytenr` the table holds. */
static unsigned copies_of(struct ub_tree_ctx *tc, uint64_t bytenr)
{
	unsigned n = 0;

	for (size_t i = 0; i < hash_buckets(tc->cache); i++)
		for (struct ub_eb *eb = tc->cache->hash[i]; eb; eb = eb->hnext)
			n += eb->start == bytenr;
	return n;
}

static void test_hit_miss(void **state)
{
	struct ub_tree_ctx tc;
	struct ub_tree_cache_stats st;
	struct ub_eb *a, *b;

	(void)state;
	NEED_MKFS();
	assert_int_equal(ub_tree_ctx_init(&tc, E.fs->vol, NULL), 0);
	assert_int_equal(read_blk(&tc, &E.blocks[0], &a), 0);
	assert_int_equal(read_blk(&tc, &E.blocks[0], &b), 0);
	assert_ptr_equal(a, b);
	ub_tree_cache_stats(&tc, &st);
	assert_int_equal(st.misses, 1);
	assert_int_equal(st.hits, 1);
	assert_int_equal(st.bytes, E.nodesize);
	assert_int_equal(st.limit, UB_TREE_CACHE_DEFAULT);
	ub_eb_put(&tc, a);
	ub_eb_put(&tc, b);
	/* unreferenced, still cached */
	assert_int_equal(read_blk(&tc, &E.blocks[0], &a), 0);
	ub_eb_put(&tc, a);
	ub_tree_cache_stats(&tc, &st);
	assert_int_equal(st.hits, 2);
	assert_int_equal(copies_of(&tc, E.blocks[0].bytenr), 1);
	ub_tree_ctx_destroy(&tc);
}

static void test_eviction_under_limit(void **state)
{
	struct ub_tree_ctx tc;
	struct ub_tree_cache_stats st;
	struct ub_eb *held, *eb;

	(void)state;
	NEED_MKFS();
	assert_int_equal(ub_tree_ctx_init(&tc, E.fs->vol, NULL), 0);
	ub_tree_set_cache_limit(&tc, 8ULL * E.nodesize);
	assert_int_equal(read_blk(&tc, &E.blocks[0], &held), 0);
	for (size_t i = 1; i < E.nblocks; i++) {
		assert_int_equal(read_blk(&tc, &E.blocks[i], &eb), 0);
		ub_eb_put(&tc, eb);
		ub_tree_cache_stats(&tc, &st);
		assert_true(st.bytes <= 8ULL * E.nodesize);
	}
	/* the referenced block stayed: a hit, the same memory */
	assert_int_equal(read_blk(&tc, &E.blocks[0], &eb), 0);
	assert_ptr_equal(eb, held);
	ub_eb_put(&tc, eb);
	/* the most recently used survive: the last block read is a hit */
	ub_tree_cache_stats(&tc, &st);
	assert_int_equal(read_blk(&tc, &E.blocks[E.nblocks - 1], &eb), 0);
	ub_eb_put(&tc, eb);
	{
		struct ub_tree_cache_stats st2;
		ub_tree_cache_stats(&tc, &st2);
		assert_int_equal(st2.hits, st.hits + 1);
	}
	/* a limit of 0 keeps only what is referenced */
	ub_tree_set_cache_limit(&tc, 0);
	ub_tree_cache_stats(&tc, &st);
	assert_int_equal(st.bytes, E.nodesize);
	ub_eb_put(&tc, held);
	ub_tree_cache_stats(&tc, &st);
	assert_int_equal(st.bytes, 0);
	ub_tree_ctx_destroy(&tc);
}

/* ---- keep interior nodes, read leaves ahead ---- */

static void test_interior_kept_over_leaves(void **state)
{
	struct ub_tree_ctx tc;
	struct ub_tree_cache_stats st;
	struct ub_eb *eb;
	size_t ninterior = 0, nleaves = 0;

	(void)state;
	NEED_MKFS();
	assert_int_equal(ub_tree_ctx_init(&tc, E.fs->vol, NULL), 0);
	ub_tree_cache_stats(&tc, &st);
	assert_int_equal(st.limit, UB_TREE_CACHE_DEFAULT);
	for (size_t i = 0; i < E.nblocks; i++)
		ninterior += E.blocks[i].level > 0;
	assert_true(ninterior > 0);
	/* room for the interior nodes and two leaves */
	ub_tree_set_cache_limit(&tc, (ninterior + 2) * E.nodesize);
	for (size_t i = 0; i < E.nblocks; i++) {
		if (E.blocks[i].level == 0)
			continue;
		assert_int_equal(read_blk(&tc, &E.blocks[i], &eb), 0);
		ub_eb_put(&tc, eb);
	}
	/* every leaf read after them, more recent as each is, goes before any of them */
	for (size_t i = 0; i < E.nblocks; i++) {
		if (E.blocks[i].level > 0)
			continue;
		assert_int_equal(read_blk(&tc, &E.blocks[i], &eb), 0);
		ub_eb_put(&tc, eb);
		nleaves++;
		ub_tree_cache_stats(&tc, &st);
		assert_true(st.bytes <= (ninterior + 2) * E.nodesize);
	}
	assert_true(nleaves > 2);
	for (size_t i = 0; i < E.nblocks; i++)
		if (E.blocks[i].level > 0)
			assert_int_equal(copies_of(&tc, E.blocks[i].bytenr), 1);
	/* with no leaf left to drop, interior nodes go too */
	ub_tree_set_cache_limit(&tc, E.nodesize);
	ub_tree_cache_stats(&tc, &st);
	assert_true(st.bytes <= E.nodesize);
	ub_tree_set_cache_limit(&tc, 0);
	ub_tree_cache_stats(&tc, &st);
	assert_int_equal(st.bytes, 0);
	ub_tree_ctx_destroy(&tc);
}

static void test_readahead_reads_nothing_in(void **state)
{
	struct ub_tree_ctx tc;
	struct ub_tree_cache_stats before, after;
	struct ub_eb *node = NULL;

	(void)state;
	NEED_MKFS();
	assert_int_equal(ub_tree_ctx_init(&tc, E.fs->vol, NULL), 0);
	for (size_t i = 0; i < E.nblocks && !node; i++)
		if (E.blocks[i].level == 1)
			assert_int_equal(read_blk(&tc, &E.blocks[i], &node), 0);
	assert_non_null(node);
	ub_tree_cache_stats(&tc, &before);
	/* advice only: no block enters the cache, nothing is counted; slots past the end are ignored */
	ub_tree_readahead(&tc, node, 0, UB_TREE_READAHEAD_LEAVES);
	ub_tree_readahead(&tc, node, (int)ub_eb_nritems(node) - 1, UB_TREE_READAHEAD_LEAVES);
	ub_tree_readahead(&tc, node, (int)ub_eb_nritems(node) + 5, UB_TREE_READAHEAD_LEAVES);
	ub_tree_readahead(&tc, node, -3, 2);
	ub_tree_cache_stats(&tc, &after);
	assert_int_equal(after.bytes, before.bytes);
	assert_int_equal(after.misses, before.misses);
	assert_int_equal(after.hits, before.hits);
	ub_eb_put(&tc, node);
	ub_tree_ctx_destroy(&tc);
}

/* Addresses no reader asks for: beyond every chunk of the image (ub_tree_new_block does not map them). */
static uint64_t writer_addr(unsigned i)
{
	return (1ULL << 40) + (uint64_t)i * E.nodesize;
}

static void test_dirty_never_evicted(void **state)
{
	struct ub_tree_ctx tc;
	struct ub_tree_cache_stats st;
	struct ub_eb *eb, *src;

	(void)state;
	NEED_MKFS();
	assert_int_equal(ub_tree_ctx_init(&tc, E.fs->vol, NULL), 0);
	ub_tree_set_cache_limit(&tc, 0);
	for (unsigned i = 0; i < 16; i++) {
		assert_int_equal(read_blk(&tc, &E.blocks[i], &src), 0);
		assert_int_equal(ub_tree_new_block(&tc, writer_addr(i), ub_eb_owner(src), ub_eb_level(src),
						   E.fs->vol->generation + 1, &eb),
				 0);
		memcpy(eb->data + UB_HEADER_SIZE, src->data + UB_HEADER_SIZE, E.nodesize - UB_HEADER_SIZE);
		ub_eb_put(&tc, src);
		ub_eb_put(&tc, eb);
	}
	ub_tree_cache_stats(&tc, &st);
	assert_int_equal(st.dirty, 16);
	assert_int_equal(st.bytes, 16ULL * E.nodesize);
	for (unsigned i = 0; i < 16; i++)
		assert_int_equal(copies_of(&tc, writer_addr(i)), 1);
	/* the same address again in the same transaction is refused */
	assert_int_equal(ub_tree_new_block(&tc, writer_addr(3), 5, 0, E.fs->vol->generation + 1, &eb), -EEXIST);
	ub_tree_drop_dirty(&tc);
	ub_tree_cache_stats(&tc, &st);
	assert_int_equal(st.dirty, 0);
	assert_int_equal(st.bytes, 0);
	ub_tree_ctx_destroy(&tc);
}

/* ---- threads ---- */

struct shared {
	struct ub_tree_ctx tc;
	pthread_barrier_t start;
	bool same_order; /* every reader reads the blocks in the same order (they miss together) */
	int errors;
	pthread_mutex_t lock;
};

struct reader {
	struct shared *sh;
	unsigned seed;
};

static void *reader_fn(void *arg)
{
	struct reader *r = arg;
	struct shared *s = r->sh;
	unsigned seed = r->seed;
	int bad = 0;

	pthread_barrier_wait(&s->start);
	for (unsigned i = 0; i < 3000; i++) {
		size_t k = s->same_order ? i % E.nblocks : (size_t)rand_r(&seed) % E.nblocks;
		struct ub_eb *eb;

		if (read_blk(&s->tc, &E.blocks[k], &eb)) {
			bad++;
			continue;
		}
		/* what the reader sees is the block it asked for, whatever the others do meanwhile */
		if (eb->start != E.blocks[k].bytenr || ub_eb_owner(eb) != E.blocks[k].owner ||
		    ub_eb_level(eb) != E.blocks[k].level)
			bad++;
		ub_eb_put(&s->tc, eb);
	}
	pthread_mutex_lock(&s->lock);
	s->errors += bad;
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

/* The writer: COW copies of blocks it reads, at its own addresses; a few transactions, each dropped. */
static void *writer_fn(void *arg)
{
	struct shared *s = arg;
	unsigned seed = 7;
	int bad = 0;

	pthread_barrier_wait(&s->start);
	for (unsigned round = 0; round < 20; round++) {
		for (unsigned i = 0; i < 32; i++) {
			size_t k = (size_t)rand_r(&seed) % E.nblocks;
			struct ub_eb *src, *eb;

			if (read_blk(&s->tc, &E.blocks[k], &src)) {
				bad++;
				continue;
			}
			if (ub_tree_new_block(&s->tc, writer_addr(i), ub_eb_owner(src), ub_eb_level(src),
					      E.fs->vol->generation + 1, &eb)) {
				bad++;
			} else {
				memcpy(eb->data + UB_HEADER_SIZE, src->data + UB_HEADER_SIZE, E.nodesize - UB_HEADER_SIZE);
				ub_eb_put(&s->tc, eb);
			}
			ub_eb_put(&s->tc, src);
		}
		ub_tree_drop_dirty(&s->tc);
	}
	pthread_mutex_lock(&s->lock);
	s->errors += bad;
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

static void run_threads(bool same_order, bool with_writer, uint64_t limit)
{
	struct shared s;
	struct reader r[4];
	pthread_t th[5];
	int n = with_writer ? 5 : 4;

	memset(&s, 0, sizeof(s));
	assert_int_equal(ub_tree_ctx_init(&s.tc, E.fs->vol, NULL), 0);
	ub_tree_set_cache_limit(&s.tc, limit);
	s.same_order = same_order;
	pthread_mutex_init(&s.lock, NULL);
	pthread_barrier_init(&s.start, NULL, (unsigned)n);
	for (int i = 0; i < 4; i++) {
		r[i].sh = &s;
		r[i].seed = 1000u + (unsigned)i;
		assert_int_equal(pthread_create(&th[i], NULL, reader_fn, &r[i]), 0);
	}
	if (with_writer)
		assert_int_equal(pthread_create(&th[4], NULL, writer_fn, &s), 0);
	for (int i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	assert_int_equal(s.errors, 0);
	for (size_t i = 0; i < E.nblocks; i++)
		assert_true(copies_of(&s.tc, E.blocks[i].bytenr) <= 1);
	{
		struct ub_tree_cache_stats st;
		ub_tree_cache_stats(&s.tc, &st);
		assert_int_equal(st.dirty, 0);
		assert_true(st.bytes <= limit);
		assert_true(st.hits + st.misses >= 4 * 3000);
	}
	pthread_barrier_destroy(&s.start);
	pthread_mutex_destroy(&s.lock);
	ub_tree_ctx_destroy(&s.tc);
}

/* Four readers missing the same blocks at once end with one copy of each. */
/*
 * A repair's salvaged block (ub_tree_salvage_put): taken instead of the
 * devices' copies when its bytes pass every check but the generation's bound,
 * cached as made in memory (mirror 0); bytes that fail a check (a bad
 * checksum) are not, and the devices' copy is read; after
 * ub_tree_salvage_clear the devices' copy again.
 */
static void test_salvaged_block(void **state)
{
	const struct blk *b = &E.blocks[E.nblocks / 2];
	struct ub_volume *vol = E.fs->vol;
	uint8_t *buf = malloc(E.nodesize), csum[UB_CSUM_SIZE_MAX];
	uint64_t future = vol->generation + 100;
	struct ub_tree_ctx tc;
	struct ub_eb *eb;

	(void)state;
	NEED_MKFS();
	assert_non_null(buf);
	assert_int_equal(ub_volume_read(vol, b->bytenr, E.nodesize, 1, buf), 0);
	UB_SET(ub_disk_header, generation, buf, future);
	ub_csum(vol->csum_type, buf + UB_CSUM_SIZE_MAX, E.nodesize - UB_CSUM_SIZE_MAX, csum);
	memcpy(buf, csum, vol->csum_size);
	assert_int_equal(ub_tree_salvage_put(vol->metadata_uuid, b->bytenr, buf, E.nodesize), 0);
	assert_int_equal(ub_tree_ctx_init(&tc, vol, NULL), 0);
	assert_int_equal(read_blk(&tc, b, &eb), 0);
	assert_int_equal(eb->mirror, 0);
	assert_int_equal(ub_eb_generation(eb), future);
	ub_eb_put(&tc, eb);
	ub_tree_ctx_destroy(&tc);
	ub_tree_salvage_clear();
	/* a checksum that does not match: not taken */
	buf[40] ^= 1;
	assert_int_equal(ub_tree_salvage_put(vol->metadata_uuid, b->bytenr, buf, E.nodesize), 0);
	assert_int_equal(ub_tree_ctx_init(&tc, vol, NULL), 0);
	assert_int_equal(read_blk(&tc, b, &eb), 0);
	assert_true(eb->mirror >= 1);
	assert_true(ub_eb_generation(eb) <= vol->generation);
	ub_eb_put(&tc, eb);
	ub_tree_ctx_destroy(&tc);
	ub_tree_salvage_clear();
	free(buf);
}

static void test_threads_one_copy(void **state)
{
	(void)state;
	NEED_MKFS();
	run_threads(true, false, 64ULL << 20);
}

/* Four readers at random blocks under a small limit while the writer dirties and drops others. */
static void test_threads_readers_and_writer(void **state)
{
	(void)state;
	NEED_MKFS();
	run_threads(false, true, 32ULL * E.nodesize);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hit_miss),
		cmocka_unit_test(test_eviction_under_limit),
		cmocka_unit_test(test_dirty_never_evicted),
		cmocka_unit_test(test_interior_kept_over_leaves),
		cmocka_unit_test(test_readahead_reads_nothing_in),
		cmocka_unit_test(test_salvaged_block),
		cmocka_unit_test(test_threads_one_copy),
		cmocka_unit_test(test_threads_readers_and_writer),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
