/* SPDX-License-Identifier: MIT */
/*
 * What a transaction may hold: an abort gives every reservation back (data
 * and metadata) so the next transaction can use that space, and
 * ub_engine_begin_op commits by itself once the running transaction's dirty
 * memory reaches the engine's budget. On an image made by mkfs.btrfs
 * (skipped without it); `btrfs check` judges the image at the end.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "ubtrfs/format.h"
#include "ubtrfs/fswrite.h"
#include "txn/txn.h"
#include "mkfs_image.h"

#define FS BTRFS_FS_TREE_OBJECTID
#define TOP BTRFS_FIRST_FREE_OBJECTID
#define PIECE (1ULL << 20)

static int setup_all(void **state)
{
	(void)state;
	return mkfs_image_setup("dirty-budget");
}

static struct ub_engine *open_engine(void)
{
	const char *paths[1] = { g_img };
	struct ub_engine *e = NULL;

	assert_int_equal(ub_engine_open(paths, 1, NULL, &e), 0);
	return e;
}

/* Data reserved in 1 MiB pieces (adding data chunks) until the devices are full: the bytes got. */
static uint64_t reserve_all_data(struct ub_txn *t)
{
	uint64_t got = 0, start;
	int ret;

	while ((ret = ub_txn_reserve_data(t, PIECE, 0, &start)) == 0)
		got += PIECE;
	assert_int_equal(ret, -ENOSPC);
	return got;
}

static void fill_pattern(uint8_t *buf, size_t len, unsigned seed)
{
	uint32_t x = seed * 2654435761u + 1;

	for (size_t i = 0; i < len; i++) {
		x = x * 1103515245u + 12345u;
		buf[i] = (uint8_t)(x >> 16);
	}
}

/* reserve a lot, abort: the next transaction gets the same space, and a committed write still works */
static void test_abort_gives_space_back(void **state)
{
	struct ub_space_info d0, m0, d1, m1;
	struct ub_engine *e;
	struct ub_txn *t;
	uint64_t first, second, gen, ino;
	static uint8_t buf[256 << 10];

	(void)state;
	if (!g_have)
		skip();
	e = open_engine();
	gen = e->generation;
	ub_alloc_space_info(e->alloc, BTRFS_BLOCK_GROUP_DATA, &d0);
	ub_alloc_space_info(e->alloc, BTRFS_BLOCK_GROUP_METADATA, &m0);

	/* metadata too: many files make new tree blocks, whose reservations the abort must return */
	assert_int_equal(ub_txn_start(e, &t), 0);
	for (int i = 0; i < 400; i++) {
		char name[32];

		snprintf(name, sizeof(name), "gone-%04d", i);
		assert_int_equal(ub_fsw_create(t, FS, TOP, name, strlen(name), S_IFREG | 0644, 0, 0, 0, &ino), 0);
	}
	ub_alloc_space_info(e->alloc, BTRFS_BLOCK_GROUP_METADATA, &m1);
	assert_true(m1.reserved > m0.reserved);
	first = reserve_all_data(t);
	assert_true(first > d0.avail); /* data chunks were added on the way */
	ub_txn_abort(t);

	/* back to what the last commit left: nothing reserved, as much available as before */
	ub_alloc_space_info(e->alloc, BTRFS_BLOCK_GROUP_DATA, &d1);
	ub_alloc_space_info(e->alloc, BTRFS_BLOCK_GROUP_METADATA, &m1);
	assert_int_equal(d1.reserved, d0.reserved);
	assert_int_equal(d1.avail, d0.avail);
	assert_int_equal(d1.total, d0.total);
	assert_int_equal(m1.reserved, m0.reserved);
	assert_int_equal(m1.avail, m0.avail);
	assert_int_equal(e->generation, gen);

	/* the next transaction can use all of it again */
	assert_int_equal(ub_txn_start(e, &t), 0);
	second = reserve_all_data(t);
	assert_int_equal(second, first);
	ub_txn_abort(t);

	/* and a real write after two aborts commits cleanly and reads back */
	assert_int_equal(ub_fsw_begin(e, UB_FSW_OP_CREATE, 0, &t), 0);
	assert_int_equal(ub_fsw_create(t, FS, TOP, "kept", 4, S_IFREG | 0644, 0, 0, 0, &ino), 0);
	fill_pattern(buf, sizeof(buf), 7);
	assert_int_equal(ub_fsw_begin(e, UB_FSW_OP_WRITE, sizeof(buf), &t), 0);
	assert_int_equal(ub_fsw_write(t, FS, ino, 0, buf, sizeof(buf)), 0);
	assert_int_equal(ub_engine_commit(e), 0);
	assert_int_equal(e->generation, gen + 1);
	ub_engine_close(e);
	assert_int_equal(mkfs_image_check(), 0);
}

/*
 * An operation that runs out of metadata inside (no prepare asked first) leaves
 * a half-done transaction: its abort gives the space back and the same
 * engine goes on, no reopen needed.
 */
static void test_enospc_inside_then_abort(void **state)
{
	struct ub_space_info m0, m1;
	struct ub_engine *e;
	struct ub_txn *t;
	uint64_t gen, ino, start, held = 0;
	int ret = 0, made = 0;

	(void)state;
	if (!g_have)
		skip();
	e = open_engine();
	gen = e->generation;
	ub_alloc_space_info(e->alloc, BTRFS_BLOCK_GROUP_METADATA, &m0);
	assert_int_equal(ub_txn_start(e, &t), 0);
	for (; made < 200; made++) {
		char name[32];

		snprintf(name, sizeof(name), "full-%06d", made);
		assert_int_equal(ub_fsw_create(t, FS, TOP, name, strlen(name), S_IFREG | 0644, 0, 0, 0, &ino), 0);
	}
	/* every free metadata block taken straight from the allocator: no chunk is added */
	while (ub_alloc_reserve(e->alloc, BTRFS_BLOCK_GROUP_METADATA, e->fs.vol->nodesize, 0, &start) == 0)
		held += e->fs.vol->nodesize;
	assert_true(held > 0);
	for (int i = made; i < 100000 && !ret; i++) {
		char name[32];

		snprintf(name, sizeof(name), "full-%06d", i);
		ret = ub_fsw_create(t, FS, TOP, name, strlen(name), S_IFREG | 0644, 0, 0, 0, &ino);
		made += !ret;
	}
	assert_int_equal(ret, -ENOSPC);
	assert_int_not_equal(t->error, 0); /* failed inside: only an abort may follow */
	ub_txn_abort(t);
	ub_alloc_space_info(e->alloc, BTRFS_BLOCK_GROUP_METADATA, &m1);
	assert_int_equal(m1.reserved, m0.reserved);
	assert_int_equal(m1.avail, m0.avail);
	/* the same engine: as many files as the full transaction held fit again, committed */
	for (int i = 0; i < made; i++) {
		char name[32];

		snprintf(name, sizeof(name), "back-%06d", i);
		assert_int_equal(ub_fsw_begin(e, UB_FSW_OP_CREATE, 0, &t), 0);
		assert_int_equal(ub_fsw_create(t, FS, TOP, name, strlen(name), S_IFREG | 0644, 0, 0, 0, &ino), 0);
	}
	assert_int_equal(ub_engine_commit(e), 0);
	assert_true(e->generation > gen);
	assert_int_equal(ub_txn_start(e, &t), 0);
	assert_int_equal(ub_fsw_lookup(t, FS, TOP, "full-000000", 11, &ino, NULL), -ENOENT);
	assert_int_equal(ub_fsw_lookup(t, FS, TOP, "back-000000", 11, &ino, NULL), 0);
	ub_txn_abort(t);
	ub_engine_close(e);
	assert_int_equal(mkfs_image_check(), 0);
}

/* a long run of operations with a small budget commits by itself, every commit complete */
static void test_budget_commits(void **state)
{
	const uint64_t budget = 64 << 10;
	struct ub_engine *e;
	struct ub_txn *t;
	uint64_t gen, ino, peak = 0;
	size_t got;
	static uint8_t buf[64 << 10], back[64 << 10];
	int nfiles = 300;

	(void)state;
	if (!g_have)
		skip();
	e = open_engine();
	assert_true(ub_engine_dirty_budget(e) > 0 && ub_engine_dirty_budget(e) <= UB_ENGINE_DIRTY_BUDGET);
	ub_engine_set_dirty_budget(e, budget);
	assert_int_equal(ub_engine_dirty_budget(e), budget);
	gen = e->generation;
	for (int i = 0; i < nfiles; i++) {
		char name[32];

		snprintf(name, sizeof(name), "b-%04d", i);
		assert_int_equal(ub_fsw_begin(e, UB_FSW_OP_CREATE, 0, &t), 0);
		assert_int_equal(ub_fsw_create(t, FS, TOP, name, strlen(name), S_IFREG | 0644, 0, 0, 0, &ino), 0);
		fill_pattern(buf, sizeof(buf), (unsigned)i);
		assert_int_equal(ub_fsw_begin(e, UB_FSW_OP_WRITE, sizeof(buf), &t), 0);
		assert_int_equal(ub_fsw_write(t, FS, ino, 0, buf, sizeof(buf)), 0);
		if (ub_txn_dirty_bytes(t) > peak)
			peak = ub_txn_dirty_bytes(t);
	}
	print_message("auto-commits %llu, peak dirty %llu\n", (unsigned long long)e->auto_commits, (unsigned long long)peak);
	/* every auto-commit is a generation; the dirty memory never ran far past the budget */
	assert_true(e->auto_commits >= 3);
	assert_int_equal(e->generation, gen + e->auto_commits);
	assert_true(peak < 2 * budget);
	assert_int_equal(ub_engine_commit(e), 0);
	ub_engine_close(e);

	/* reopened: every file whole */
	e = open_engine();
	assert_int_equal(e->auto_commits, 0);
	assert_int_equal(ub_txn_start(e, &t), 0);
	for (int i = 0; i < nfiles; i += 37) {
		char name[32];

		snprintf(name, sizeof(name), "b-%04d", i);
		assert_int_equal(ub_fsw_lookup(t, FS, TOP, name, strlen(name), &ino, NULL), 0);
		fill_pattern(buf, sizeof(buf), (unsigned)i);
		assert_int_equal(ub_fsw_read(t, FS, ino, 0, back, sizeof(back), &got), 0);
		assert_int_equal(got, sizeof(back));
		assert_memory_equal(back, buf, sizeof(buf));
	}
	ub_txn_abort(t);
	ub_engine_close(e);
	assert_int_equal(mkfs_image_check(), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_abort_gives_space_back),
		cmocka_unit_test(test_enospc_inside_then_abort),
		cmocka_unit_test(test_budget_commits),
	};
	return cmocka_run_group_tests(tests, setup_all, teardown_all);
}
