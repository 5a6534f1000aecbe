/* SPDX-License-Identifier: MIT */
/*
 * The tree layer's rules for blocks reached through pointers, on real blocks
 * of filesystems mkfs.btrfs makes at setup:
 *
 *  - every expectation (owner, level, generation, first key, key range) holds
 *    on every access, also when the block comes from the cache;
 *  - a block that fails one pointer's expectation stays readable through its
 *    real parent, and the failure is remembered (reported once) only for the
 *    expectation that failed;
 *  - a walk enters a block once; search and iteration across a multi-level
 *    tree stay in key order.
 *
 * Needs mkfs.btrfs (skipped without it).
 */
#include <errno.h>
#include <inttypes.h>
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
#include "scratch.h"

struct env {
	char dir[64];
	char small[96], big[96]; /* a fresh mkfs image; one whose fs tree has two levels of nodes (4 KiB) */
	bool have_mkfs;
};

static struct env E;

/* The sink: messages are kept so tests can check what was said, and how often. */
struct sink {
	char text[16384];
	size_t len;
	unsigned errors;
};

static void sink_fn(void *arg, enum ub_log_level lvl, const char *msg)
{
	struct sink *s = arg;
	int n;

	if (lvl > UB_LOG_WARN)
		return;
	n = snprintf(s->text + s->len, sizeof(s->text) - s->len, "%s\n", msg);
	if (n > 0 && (size_t)n < sizeof(s->text) - s->len)
		s->len += (size_t)n;
}

static struct ub_fs *open_image(const char *path, struct sink *s)
{
	const char *paths[1] = { path };
	struct ub_fs_opts opts = { .writable = false, .super_mirror = -1, .no_log = true };
	struct ub_log log = { sink_fn, s, UB_LOG_WARN, &s->errors };
	struct ub_fs *fs = NULL;

	memset(s, 0, sizeof(*s));
	assert_int_equal(ub_fs_open(paths, 1, &opts, &log, &fs), 0);
	return fs;
}

static int group_setup(void **state)
{
	(void)state;
	if (scratch_dir("walk", E.dir, sizeof(E.dir)))
		return -1;
	snprintf(E.small, sizeof(E.small), "%s/small.img", E.dir);
	snprintf(E.big, sizeof(E.big), "%s/big.img", E.dir);
	E.have_mkfs = have_mkfs_btrfs();
	if (!E.have_mkfs)
		return 0;
	/* 1800 files at 4 KiB nodes: a few hundred leaves, so the fs tree has level-1 nodes below its root */
	if (sh("truncate -s 128M %s && mkfs.btrfs -q -f %s >/dev/null", E.small, E.small) ||
	    sh("mkdir %s/src && cd %s/src && for i in $(seq 1800); do printf %%s $i > file-$i; done", E.dir, E.dir) ||
	    sh("truncate -s 128M %s && mkfs.btrfs -q -f -n 4096 -s 4096 --rootdir %s/src %s >/dev/null", E.big, E.dir,
	       E.big))
		return -1;
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	sh("rm -rf %s", E.dir);
	return 0;
}

#define NEED_MKFS() SKIP_WITHOUT_MKFS(E.have_mkfs)

static struct ub_expect root_expect(struct ub_root r)
{
	struct ub_expect e = { r.objectid, r.level, r.generation, NULL, NULL, 0, -1 };
	return e;
}

/* The committed root of a tree the test image must have. */
static struct ub_root root_of(struct ub_fs *fs, uint64_t id)
{
	struct ub_root r = { 0 };

	assert_int_equal(ub_fs_tree_root(fs, id, &r), 0);
	return r;
}

static int read_with(struct ub_fs *fs, uint64_t bytenr, const struct ub_expect *e)
{
	struct ub_eb *eb = NULL;
	int ret = ub_tree_read_block(&fs->tc, bytenr, e, &eb);

	if (ret == 0)
		ub_eb_put(&fs->tc, eb);
	return ret;
}

/* A cached block of one tree, asked for as another tree's: refused every time, and said once. */
static void test_cached_block_other_owner(void **state)
{
	struct sink s;
	struct ub_fs *fs;
	struct ub_expect good, wrong;
	char addr[32];
	unsigned errs;

	(void)state;
	NEED_MKFS();
	fs = open_image(E.small, &s);
	good = root_expect(root_of(fs, BTRFS_ROOT_TREE_OBJECTID));
	assert_int_equal(read_with(fs, root_of(fs, BTRFS_ROOT_TREE_OBJECTID).bytenr, &good), 0); /* now cached */
	wrong = good;
	wrong.owner = BTRFS_FS_TREE_OBJECTID;
	s.len = 0;
	s.text[0] = 0;
	errs = s.errors;
	assert_int_equal(read_with(fs, root_of(fs, BTRFS_ROOT_TREE_OBJECTID).bytenr, &wrong), -EUCLEAN);
	snprintf(addr, sizeof(addr), "%" PRIu64, root_of(fs, BTRFS_ROOT_TREE_OBJECTID).bytenr);
	assert_non_null(strstr(s.text, addr));
	assert_non_null(strstr(s.text, "owner ROOT_TREE"));
	assert_int_equal(s.errors, errs + 1);
	/* asked again the same wrong way: the same answer, not said again */
	assert_int_equal(read_with(fs, root_of(fs, BTRFS_ROOT_TREE_OBJECTID).bytenr, &wrong), -EUCLEAN);
	assert_int_equal(s.errors, errs + 1);
	/* a global tree accepts only its own blocks */
	wrong.owner = BTRFS_EXTENT_TREE_OBJECTID;
	assert_int_equal(read_with(fs, root_of(fs, BTRFS_ROOT_TREE_OBJECTID).bytenr, &wrong), -EUCLEAN);
	/* and the block is as good as ever for its real pointer */
	assert_int_equal(read_with(fs, root_of(fs, BTRFS_ROOT_TREE_OBJECTID).bytenr, &good), 0);
	ub_fs_close(fs);
}

/* Level, generation, first key and key range are checked on cached blocks too. */
static void test_cached_block_other_expectations(void **state)
{
	struct sink s;
	struct ub_fs *fs;
	struct ub_expect good, e;
	struct ub_eb *eb;
	struct ub_key first, last, other = { 1, 2, 3 };

	(void)state;
	NEED_MKFS();
	fs = open_image(E.small, &s);
	good = root_expect(root_of(fs, BTRFS_ROOT_TREE_OBJECTID));
	assert_int_equal(ub_tree_read_block(&fs->tc, root_of(fs, BTRFS_ROOT_TREE_OBJECTID).bytenr, &good, &eb), 0);
	assert_true(ub_eb_nritems(eb) > 1);
	ub_eb_item_key(eb, 0, &first);
	ub_eb_item_key(eb, (int)ub_eb_nritems(eb) - 1, &last);
	ub_eb_put(&fs->tc, eb);

	e = good;
	e.level = good.level + 1;
	assert_int_equal(read_with(fs, root_of(fs, BTRFS_ROOT_TREE_OBJECTID).bytenr, &e), -EUCLEAN);
	e = good;
	e.generation = good.generation + 1;
	assert_int_equal(read_with(fs, root_of(fs, BTRFS_ROOT_TREE_OBJECTID).bytenr, &e), -EUCLEAN);
	e = good;
	e.first_key = &other;
	s.len = 0;
	s.text[0] = 0;
	assert_int_equal(read_with(fs, root_of(fs, BTRFS_ROOT_TREE_OBJECTID).bytenr, &e), -EUCLEAN);
	assert_non_null(strstr(s.text, "first key"));
	e.first_key = &first;
	assert_int_equal(read_with(fs, root_of(fs, BTRFS_ROOT_TREE_OBJECTID).bytenr, &e), 0);
	/* the range ends at the next child's key: the block's last key must be below it */
	e.end_key = &last;
	assert_int_equal(read_with(fs, root_of(fs, BTRFS_ROOT_TREE_OBJECTID).bytenr, &e), -EUCLEAN);
	last.offset++;
	assert_int_equal(read_with(fs, root_of(fs, BTRFS_ROOT_TREE_OBJECTID).bytenr, &e), 0);
	ub_fs_close(fs);
}

/* A block first met through a wrong pointer (read from disk, not cached) stays readable through its parent. */
static void test_wrong_parent_first(void **state)
{
	struct sink s;
	struct ub_fs *fs;
	struct ub_expect good, wrong;
	uint64_t bytenr;

	(void)state;
	NEED_MKFS();
	fs = open_image(E.small, &s);
	assert_non_null(root_of(fs, BTRFS_EXTENT_TREE_OBJECTID).bytenr);
	bytenr = root_of(fs, BTRFS_EXTENT_TREE_OBJECTID).bytenr;
	good = root_expect(root_of(fs, BTRFS_EXTENT_TREE_OBJECTID));
	wrong = good;
	wrong.owner = BTRFS_CSUM_TREE_OBJECTID;
	assert_int_equal(read_with(fs, bytenr, &wrong), -EUCLEAN);
	wrong = good;
	wrong.generation = good.generation + 5;
	assert_int_equal(read_with(fs, bytenr, &wrong), -EUCLEAN);
	/* neither failure poisons the address */
	assert_int_equal(read_with(fs, bytenr, &good), 0);
	assert_int_equal(read_with(fs, bytenr, &wrong), -EUCLEAN);
	assert_int_equal(read_with(fs, bytenr, &good), 0);
	ub_fs_close(fs);
}

/* A block bad in itself is bad whoever asks: remembered by address, said once. */
static void test_bad_block_remembered(void **state)
{
	struct sink s;
	struct ub_fs *fs;
	struct ub_expect e;
	unsigned errs;
	uint64_t bytenr;

	(void)state;
	NEED_MKFS();
	fs = open_image(E.small, &s);
	/* mkfs puts the chunk tree's only block first in the system chunk; what follows it is never written */
	bytenr = root_of(fs, BTRFS_CHUNK_TREE_OBJECTID).bytenr + fs->vol->nodesize;
	e = (struct ub_expect){ BTRFS_CHUNK_TREE_OBJECTID, 0, 0, NULL, NULL, root_of(fs, BTRFS_CHUNK_TREE_OBJECTID).bytenr, 1 };
	errs = s.errors;
	if (read_with(fs, bytenr, &e) == 0) {
		fprintf(stderr, "logical %" PRIu64 " holds a valid block in this mkfs version: skipped\n", bytenr);
		ub_fs_close(fs);
		skip();
	}
	assert_int_equal(s.errors, errs + 1);
	e.owner = BTRFS_ROOT_TREE_OBJECTID;
	e.level = 1;
	assert_int_not_equal(read_with(fs, bytenr, &e), 0);
	assert_int_not_equal(read_with(fs, bytenr, NULL), 0);
	assert_int_equal(s.errors, errs + 1);
	ub_fs_close(fs);
}

static void test_block_set(void **state)
{
	struct ub_block_set set = { 0 };
	uint64_t tag = 0;

	(void)state;
	for (uint64_t i = 1; i <= 20000; i++)
		assert_int_equal(ub_block_set_add(&set, i * 4096, i % 7, NULL), 0);
	for (uint64_t i = 1; i <= 20000; i += 97) {
		assert_int_equal(ub_block_set_add(&set, i * 4096, 99, &tag), 1);
		assert_int_equal(tag, i % 7);
	}
	assert_int_equal(set.n, 20000);
	assert_int_equal(ub_block_set_add(&set, 0, 1, NULL), -EINVAL);
	ub_block_set_free(&set);
	assert_int_equal(ub_block_set_add(&set, 4096, 1, NULL), 0);
	ub_block_set_free(&set);
}

struct count {
	unsigned blocks, leaves, items, nodes_above_1;
};

static int count_block(void *arg, const struct ub_eb *eb)
{
	struct count *c = arg;

	c->blocks++;
	if (ub_eb_level(eb) == 0) {
		c->leaves++;
		c->items += ub_eb_nritems(eb);
	} else if (ub_eb_level(eb) > 1) {
		c->nodes_above_1++;
	}
	return 0;
}

/*
 * A multi-level tree: the walk enters each block once and sees every item;
 * iteration forward and backward yields exactly as many items in strict key
 * order; every key found on the way is found again by search.
 */
static void test_multilevel_walk_and_iteration(void **state)
{
	struct sink s;
	struct ub_fs *fs;
	struct ub_root fst;
	struct ub_block_set set = { 0 };
	struct count c = { 0 };
	struct ub_path p;
	struct ub_key k = { 0, 0, 0 }, prev;
	static uint64_t inodes[4096];
	unsigned n = 0, ninodes = 0;
	int ret;

	(void)state;
	NEED_MKFS();
	fs = open_image(E.big, &s);
	assert_int_equal(ub_fs_tree_root(fs, BTRFS_FS_TREE_OBJECTID, &fst), 0);
	assert_true(fst.level >= 2); /* the setup must reach nodes below the root */
	assert_int_equal(ub_tree_walk(&fs->tc, &fst, &set, BTRFS_FS_TREE_OBJECTID, count_block, &c), 0);
	assert_int_equal(set.n, c.blocks);
	assert_true(c.leaves > 100);
	assert_true(c.nodes_above_1 >= 1);
	/* the same blocks again with the same set: the first one is already entered */
	s.len = 0;
	s.text[0] = 0;
	assert_int_equal(ub_tree_walk(&fs->tc, &fst, &set, 256, NULL, NULL), -EUCLEAN);
	assert_non_null(strstr(s.text, "already entered"));
	ub_block_set_free(&set);

	ub_path_init(&p);
	ret = ub_tree_search(&fs->tc, &fst, &k, &p);
	assert_true(ret == 0 || ret == 1);
	ub_path_key(&p, &prev);
	n = 1;
	while ((ret = ub_tree_next(&p)) == 0) {
		ub_path_key(&p, &k);
		assert_true(ub_key_cmp(&prev, &k) < 0);
		if (k.type == BTRFS_INODE_ITEM_KEY && ninodes < sizeof(inodes) / sizeof(inodes[0]))
			inodes[ninodes++] = k.objectid;
		prev = k;
		n++;
	}
	assert_int_equal(ret, 1);
	assert_int_equal(n, c.items);
	/* and back */
	n = 1;
	while ((ret = ub_tree_prev(&p)) == 0) {
		ub_path_key(&p, &k);
		assert_true(ub_key_cmp(&k, &prev) < 0);
		prev = k;
		n++;
	}
	assert_int_equal(ret, 1);
	assert_int_equal(n, c.items);
	ub_path_release(&p);

	/* every INODE_ITEM met on the way is found by exact lookup, across all leaves */
	assert_true(ninodes >= 1800);
	for (unsigned i = 0; i < ninodes; i += 7) {
		const uint8_t *data;
		uint32_t size;
		struct ub_key ik = { inodes[i], BTRFS_INODE_ITEM_KEY, 0 };
		ub_path_init(&p);
		assert_int_equal(ub_tree_lookup(&fs->tc, &fst, &ik, &p, &data, &size), 0);
		assert_int_equal(size, sizeof(struct btrfs_inode_item));
		ub_path_release(&p);
	}
	assert_int_equal(s.errors, 1); /* only the deliberate second walk */
	ub_fs_close(fs);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cached_block_other_owner),
		cmocka_unit_test(test_cached_block_other_expectations),
		cmocka_unit_test(test_wrong_parent_first),
		cmocka_unit_test(test_bad_block_remembered),
		cmocka_unit_test(test_block_set),
		cmocka_unit_test(test_multilevel_walk_and_iteration),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
