/* SPDX-License-Identifier: MIT */
/*
 * Views (include/ubtrfs/fs.h): a pinned view reads one commit for as long as
 * it is open, whatever the writers do meanwhile, because what later commits
 * free is not handed out again while it reads (reader epochs); a live view
 * reads the running transaction; the filesystem's handle reads the last
 * commit. On an image made by mkfs.btrfs (skipped without it); btrfs check
 * judges it at the end.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "ubtrfs/format.h"
#include "ubtrfs/fswrite.h"
#include "txn/txn.h"
#include "alloc/alloc.h"
#include "mkfs_image.h"

#define FS BTRFS_FS_TREE_OBJECTID
#define TOP BTRFS_FIRST_FREE_OBJECTID
#define NFILES 24
#define FSIZE (1024 * 1024)

static int setup_all(void **state)
{
	(void)state;
	return mkfs_image_setup("views");
}

static void fill(uint8_t *buf, size_t n, unsigned seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ULL + 1;

	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		buf[i] = (uint8_t)(x >> 32);
	}
}

struct listing {
	int n;
	char names[NFILES + 8][32];
};

static int collect(void *arg, const struct ub_dirent *de)
{
	struct listing *l = arg;

	/* the files of this test (the image is shared with the other test) */
	if (de->name_len < 3 || memcmp(de->name, "old", 3))
		return 0;
	if (l->n < NFILES + 8 && de->name_len < 32) {
		memcpy(l->names[l->n], de->name, de->name_len);
		l->names[l->n][de->name_len] = 0;
	}
	l->n++;
	return 0;
}

/* a new file of `size` bytes of pattern `seed`, in an operation of its own */
static int write_file(struct ub_engine *e, const char *name, unsigned seed, size_t size)
{
	static uint8_t buf[FSIZE];
	struct ub_txn *t;
	uint64_t ino;
	int ret;

	ret = ub_fsw_begin(e, UB_FSW_OP_CREATE, 0, &t);
	if (ret)
		return ret;
	ret = ub_fsw_create(t, FS, TOP, name, strlen(name), S_IFREG | 0644, 0, 0, 0, &ino);
	ub_fsw_end(e);
	if (ret)
		return ret;
	fill(buf, size, seed);
	ret = ub_fsw_begin(e, UB_FSW_OP_WRITE, size, &t);
	if (ret)
		return ret;
	ret = ub_fsw_write(t, FS, ino, 0, buf, size);
	ub_fsw_end(e);
	return ret;
}

/* files of 1 MiB until the filesystem is full: how many fit */
static int fill_up(struct ub_engine *e, const char *prefix)
{
	char name[32];
	int n = 0, ret;

	for (;;) {
		snprintf(name, sizeof(name), "%s%04d", prefix, n);
		ret = write_file(e, name, 1000 + (unsigned)n, FSIZE);
		if (ret)
			break;
		n++;
	}
	assert_int_equal(ret, -ENOSPC);
	assert_int_equal(ub_engine_commit(e), 0);
	return n;
}

/*
 * A pinned view keeps its commit while writers delete everything it holds
 * and fill the filesystem to the brim: it lists and reads every file as it
 * was. Without reader epochs, the fill reuses the deleted files' space and
 * the view reads other bytes (checksum mismatches) or other blocks.
 */
static void test_pinned_view_survives_reuse(void **state)
{
	const char *paths[1] = { g_img };
	static uint8_t want[FSIZE], got[FSIZE];
	struct ub_engine *e = NULL;
	struct ub_fs *v = NULL;
	struct ub_txn *t;
	struct listing l = { 0 };
	uint64_t gen;
	char name[32];
	int n1, n2;

	(void)state;
	if (!g_have)
		skip();
	assert_int_equal(ub_engine_open(paths, 1, NULL, &e), 0);
	for (int i = 0; i < NFILES; i++) {
		snprintf(name, sizeof(name), "old%02d", i);
		assert_int_equal(write_file(e, name, (unsigned)i, FSIZE), 0);
	}
	assert_int_equal(ub_engine_commit(e), 0);
	gen = e->generation;

	assert_int_equal(ub_fs_view_open(ub_engine_fs(e), &v), 0);
	assert_int_equal(ub_fs_view_generation(v), gen);

	/* every file of the view goes, and the space is filled with others */
	for (int i = 0; i < NFILES; i++) {
		snprintf(name, sizeof(name), "old%02d", i);
		assert_int_equal(ub_fsw_begin(e, UB_FSW_OP_UNLINK, 0, &t), 0);
		assert_int_equal(ub_fsw_unlink(t, FS, TOP, name, strlen(name)), 0);
		ub_fsw_end(e);
	}
	assert_int_equal(ub_engine_commit(e), 0);
	assert_true(ub_alloc_pins_waiting(e->alloc) >= (uint64_t)NFILES * FSIZE);
	n1 = fill_up(e, "a");
	assert_true(e->generation > gen + 1);

	/* the view: the old names, the old bytes */
	assert_int_equal(ub_dir_iterate(v, FS, TOP, collect, &l), 0);
	assert_int_equal(l.n, NFILES);
	for (int i = 0; i < NFILES; i++) {
		struct ub_dirent de;
		struct ub_inode in;
		uint64_t len = 0;

		snprintf(name, sizeof(name), "old%02d", i);
		assert_string_equal(l.names[i], name);
		assert_int_equal(ub_dir_lookup(v, FS, TOP, name, strlen(name), &de), 0);
		assert_int_equal(ub_inode_read(v, FS, de.ino, &in), 0);
		assert_int_equal(in.size, FSIZE);
		assert_int_equal(ub_file_read_inode(v, &in, 0, FSIZE, got, &len, NULL), 0);
		assert_int_equal(len, FSIZE);
		fill(want, FSIZE, (unsigned)i);
		assert_memory_equal(got, want, FSIZE);
	}
	/* the filesystem's own handle reads the last commit: no old file there */
	{
		struct ub_dirent de;

		assert_int_equal(ub_dir_lookup(ub_engine_fs(e), FS, TOP, "old00", 5, &de), -ENOENT);
	}

	/* closed, the view's space comes back to the next transaction */
	ub_fs_close(v);
	n2 = fill_up(e, "b");
	assert_true((uint64_t)n2 * FSIZE >= (uint64_t)(NFILES - 4) * FSIZE);
	assert_int_equal(ub_alloc_pins_waiting(e->alloc), 0);
	print_message("filled %d MiB with the view open, %d MiB more after it closed\n", n1, n2);
	ub_engine_close(e);
	assert_int_equal(mkfs_image_check(), 0);
}

/* A live view sees the running transaction; a pinned view and the filesystem's handle do not. */
static void test_live_view(void **state)
{
	const char *paths[1] = { g_img };
	static uint8_t want[8192], got[8192];
	struct ub_engine *e = NULL;
	struct ub_fs *live = NULL, *pinned = NULL;
	struct ub_txn *t;
	struct ub_dirent de;
	struct ub_inode in;
	uint64_t ino, len;

	(void)state;
	if (!g_have)
		skip();
	assert_int_equal(ub_engine_open(paths, 1, NULL, &e), 0);
	assert_int_equal(ub_engine_view(e, &live), 0);
	assert_int_equal(ub_fs_view_open(ub_engine_fs(e), &pinned), 0);
	assert_int_equal(ub_fsw_begin(e, UB_FSW_OP_CREATE, 0, &t), 0);
	assert_int_equal(ub_fsw_create(t, FS, TOP, "fresh", 5, S_IFREG | 0600, 0, 0, 0, &ino), 0);
	fill(want, sizeof(want), 77);
	assert_int_equal(ub_fsw_write(t, FS, ino, 0, want, sizeof(want)), 0);
	/* the writer's own thread reads its writes through the live view too */
	assert_int_equal(ub_dir_lookup(live, FS, TOP, "fresh", 5, &de), 0);
	ub_fsw_end(e);

	assert_int_equal(ub_dir_lookup(live, FS, TOP, "fresh", 5, &de), 0);
	assert_int_equal(de.ino, ino);
	assert_int_equal(ub_inode_read(live, FS, ino, &in), 0);
	assert_int_equal(in.size, sizeof(want));
	assert_int_equal(in.mode, S_IFREG | 0600);
	assert_int_equal(ub_file_read_inode(live, &in, 0, sizeof(got), got, &len, NULL), 0);
	assert_memory_equal(got, want, sizeof(want));
	assert_int_equal(ub_dir_lookup(pinned, FS, TOP, "fresh", 5, &de), -ENOENT);
	assert_int_equal(ub_dir_lookup(ub_engine_fs(e), FS, TOP, "fresh", 5, &de), -ENOENT);
	assert_true(ub_fs_view_generation(live) > ub_fs_view_generation(pinned));

	assert_int_equal(ub_engine_commit(e), 0);
	assert_int_equal(ub_dir_lookup(ub_engine_fs(e), FS, TOP, "fresh", 5, &de), 0);
	assert_int_equal(ub_dir_lookup(pinned, FS, TOP, "fresh", 5, &de), -ENOENT);
	ub_fs_close(pinned);
	ub_fs_close(live);
	ub_engine_close(e);
	assert_int_equal(mkfs_image_check(), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_live_view),
		cmocka_unit_test(test_pinned_view_survives_reuse),
	};
	return cmocka_run_group_tests(tests, setup_all, teardown_all);
}
