/* SPDX-License-Identifier: MIT */
/*
 * The root object table (lib/tree/roots.c) on images made by mkfs.btrfs
 * (skipped without it): every root the readers load against btrfs-progs'
 * `dump-tree -r`, one object per tree shared by the readers and the engine,
 * committed vs live roots while a transaction is built, what an abort leaves,
 * lookups of trees that do not exist, and the table under a reader thread
 * while another thread adds objects and publishes commits. `btrfs check`
 * judges the image the engine wrote. About 2 s with SAN=1 on a loaded machine.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "ubtrfs/format.h"
#include "ubtrfs/fs.h"
#include "ubtrfs/fswrite.h"
#include "tree/roots.h"
#include "txn/txn.h"
#include "mkfs_image.h"

#define FS BTRFS_FS_TREE_OBJECTID
#define TOP BTRFS_FIRST_FREE_OBJECTID

static struct ub_log g_log = { .verbosity = UB_LOG_ERROR };

static int setup_all(void **state)
{
	(void)state;
	return mkfs_image_setup("roots");
}

static struct ub_fs *open_fs(void)
{
	const char *paths[1] = { g_img };
	struct ub_fs *fs = NULL;

	assert_int_equal(ub_fs_open(paths, 1, NULL, &g_log, &fs), 0);
	return fs;
}

static struct ub_engine *open_engine(void)
{
	const char *paths[1] = { g_img };
	struct ub_engine *e = NULL;

	assert_int_equal(ub_engine_open(paths, 1, &g_log, &e), 0);
	return e;
}

static uint64_t tree_id(const char *name)
{
	static const struct { const char *name; uint64_t id; } ids[] = {
		{ "EXTENT_TREE", BTRFS_EXTENT_TREE_OBJECTID }, { "DEV_TREE", BTRFS_DEV_TREE_OBJECTID },
		{ "FS_TREE", BTRFS_FS_TREE_OBJECTID }, { "CSUM_TREE", BTRFS_CSUM_TREE_OBJECTID },
		{ "UUID_TREE", BTRFS_UUID_TREE_OBJECTID }, { "FREE_SPACE_TREE", BTRFS_FREE_SPACE_TREE_OBJECTID },
		{ "DATA_RELOC_TREE", BTRFS_DATA_RELOC_TREE_OBJECTID },
	};

	for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++)
		if (strcmp(name, ids[i].name) == 0)
			return ids[i].id;
	fail_msg("dump-tree -r names a tree the test does not know: %s", name);
	return 0;
}

/* Every root btrfs-progs lists must be the committed root of the same object the table hands out twice. */
static void test_load_against_progs(void **state)
{
	struct ub_fs *fs;
	char cmd[256], line[512], name[64];
	unsigned long long bytenr;
	unsigned level;
	int seen = 0;
	FILE *f;

	(void)state;
	if (!g_have)
		skip();
	fs = open_fs();
	snprintf(cmd, sizeof(cmd), "btrfs inspect-internal dump-tree -r %s 2>/dev/null", g_img);
	f = popen(cmd, "r");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f)) {
		const char *k = strstr(line, "key (");
		struct ub_eroot *er, *again;
		struct ub_root r;
		uint64_t id;

		if (sscanf(line, "root tree: %llu level %u", &bytenr, &level) == 2)
			id = BTRFS_ROOT_TREE_OBJECTID;
		else if (sscanf(line, "chunk tree: %llu level %u", &bytenr, &level) == 2)
			id = BTRFS_CHUNK_TREE_OBJECTID;
		else if (k && sscanf(k, "key (%63s ROOT_ITEM %*u) %llu level %u", name, &bytenr, &level) == 3)
			id = tree_id(name);
		else
			continue;
		assert_int_equal(ub_fs_root(fs, id, &er), 0);
		assert_int_equal(ub_fs_root(fs, id, &again), 0);
		assert_ptr_equal(er, again);
		assert_int_equal(ub_fs_committed(fs, er, &r), 0);
		assert_int_equal(r.objectid, id);
		assert_int_equal(r.bytenr, bytenr);
		assert_int_equal(r.level, level);
		assert_int_equal(ub_fs_tree_root(fs, id, &r), 0);
		assert_int_equal(r.bytenr, bytenr);
		seen++;
	}
	assert_int_equal(pclose(f), 0);
	assert_int_equal(seen, 9);
	/* the global trees are the table's objects, not copies */
	{
		struct ub_eroot *er;

		assert_int_equal(ub_fs_root(fs, BTRFS_ROOT_TREE_OBJECTID, &er), 0);
		assert_ptr_equal(er, fs->root_tree);
		assert_int_equal(ub_fs_root(fs, BTRFS_EXTENT_TREE_OBJECTID, &er), 0);
		assert_ptr_equal(er, fs->extent_tree);
		assert_int_equal(ub_fs_root(fs, BTRFS_CSUM_TREE_OBJECTID, &er), 0);
		assert_ptr_equal(er, fs->csum_tree);
		assert_null(fs->quota_tree);
	}
	ub_fs_close(fs);
}

static void test_missing_tree(void **state)
{
	struct ub_fs *fs;
	struct ub_eroot *er = NULL;
	struct ub_root r;

	(void)state;
	if (!g_have)
		skip();
	fs = open_fs();
	assert_int_equal(ub_fs_root(fs, TOP + 1000, &er), -ENOENT);
	assert_int_equal(ub_fs_tree_root(fs, TOP + 1000, &r), -ENOENT);
	assert_int_equal(ub_fs_tree_root(fs, BTRFS_QUOTA_TREE_OBJECTID, &r), -ENOENT);
	assert_int_equal(ub_fs_committed(fs, NULL, &r), -ENOENT);
	/* a failed lookup adds nothing */
	assert_null(ub_roots_find(fs->roots, TOP + 1000));
	ub_fs_close(fs);
}

static uint64_t mk(struct ub_txn *t, uint64_t subvol, const char *name)
{
	uint64_t ino = 0;

	assert_int_equal(ub_fsw_create(t, subvol, TOP, name, strlen(name), S_IFREG | 0644, 0, 0, 0, &ino), 0);
	return ino;
}

static int lookup(struct ub_fs *fs, uint64_t subvol, const char *name)
{
	struct ub_dirent de;

	return ub_dir_lookup(fs, subvol, TOP, name, strlen(name), &de);
}

/* A reader on the engine's fs sees the last commit while the transaction moves the live root. */
static void test_committed_vs_live(void **state)
{
	struct ub_engine *e;
	struct ub_eroot *er, *rer;
	struct ub_root before, r;
	struct ub_txn *t;

	(void)state;
	if (!g_have)
		skip();
	e = open_engine();
	assert_int_equal(ub_engine_root(e, FS, &er), 0);
	assert_int_equal(ub_fs_root(&e->fs, FS, &rer), 0);
	assert_ptr_equal(er, rer); /* one object for the writer and the readers */
	before = er->root;
	assert_int_equal(ub_txn_start(e, &t), 0);
	mk(t, FS, "live");
	assert_int_not_equal(er->root.bytenr, before.bytenr);
	assert_int_equal(ub_fs_committed(&e->fs, er, &r), 0);
	assert_memory_equal(&r, &before, sizeof(r));
	assert_int_equal(lookup(&e->fs, FS, "live"), -ENOENT);
	assert_int_equal(ub_txn_commit(t), 0);
	assert_int_equal(ub_fs_committed(&e->fs, er, &r), 0);
	assert_memory_equal(&r, &er->root, sizeof(r));
	assert_int_equal(r.generation, e->generation);
	assert_int_equal(lookup(&e->fs, FS, "live"), 0);
	/* the root tree's object too: the superblock the commit wrote points where it says */
	assert_int_equal(ub_fs_committed(&e->fs, e->fs.root_tree, &r), 0);
	assert_int_equal(r.bytenr, UB_GET(ub_disk_super, root, e->fs.vol->super));
	ub_engine_close(e);
}

/* Abort: every root back to the last commit; a tree born in the transaction keeps an empty object. */
static void test_abort_restores(void **state)
{
	struct ub_engine *e;
	struct ub_eroot *er, *born, *again;
	struct ub_root before, r;
	struct ub_txn *t;
	uint64_t id = 0, id2 = 0;

	(void)state;
	if (!g_have)
		skip();
	e = open_engine();
	assert_int_equal(ub_engine_root(e, FS, &er), 0);
	before = er->root;
	assert_int_equal(ub_txn_start(e, &t), 0);
	mk(t, FS, "aborted");
	assert_int_equal(ub_fsw_subvol_create(t, FS, TOP, "sub", 3, &id), 0);
	born = ub_roots_find(e->fs.roots, id);
	assert_non_null(born);
	assert_int_not_equal(born->root.bytenr, 0);
	assert_int_equal(ub_fs_committed(&e->fs, born, &r), -ENOENT); /* not in the last commit */
	assert_int_equal(ub_fs_tree_root(&e->fs, id, &r), -ENOENT);
	ub_txn_abort(t);
	assert_memory_equal(&er->root, &before, sizeof(before));
	assert_ptr_equal(ub_roots_find(e->fs.roots, id), born); /* never freed, never moved */
	assert_int_equal(born->root.bytenr, 0);
	assert_int_equal(ub_engine_root(e, id, &again), -ENOENT);
	assert_int_equal(lookup(&e->fs, FS, "aborted"), -ENOENT);
	/* the same tree created again reuses its object */
	assert_int_equal(ub_txn_start(e, &t), 0);
	assert_int_equal(ub_fsw_subvol_create(t, FS, TOP, "sub", 3, &id2), 0);
	assert_int_equal(id2, id);
	assert_ptr_equal(ub_roots_find(e->fs.roots, id2), born);
	mk(t, id2, "inside");
	assert_int_equal(ub_txn_commit(t), 0);
	assert_int_equal(ub_fs_tree_root(&e->fs, id2, &r), 0);
	assert_int_equal(r.bytenr, born->root.bytenr);
	assert_int_equal(lookup(&e->fs, id2, "inside"), 0);
	ub_engine_close(e);
	/* a reader opened afresh finds what the engine committed */
	{
		struct ub_fs *fs = open_fs();

		assert_int_equal(lookup(fs, id2, "inside"), 0);
		assert_int_equal(lookup(fs, FS, "aborted"), -ENOENT);
		ub_fs_close(fs);
	}
	assert_int_equal(mkfs_image_check(), 0);
}

/*
 * The table's own thread rule: a reader looking up, copying committed roots
 * and walking the list while a writer adds objects and publishes commits
 * never sees a torn root (each published root has bytenr = generation * 4096).
 */
#define NADD 2000
struct race {
	struct ub_roots rs;
	int done;
	long lookups;
};

static void *reader(void *arg)
{
	struct race *rc = arg;

	while (!__atomic_load_n(&rc->done, __ATOMIC_ACQUIRE)) {
		for (struct ub_eroot *er = ub_roots_first(&rc->rs); er; er = ub_roots_next(er)) {
			struct ub_root r;
			/* `root` is the writer's: the reader goes through committed copies only */
			int ret = ub_roots_committed(&rc->rs, er, &r);

			if (ub_roots_find(&rc->rs, r.objectid) != er)
				return (void *)1;
			if (ret == 0 && r.bytenr != r.generation * 4096)
				return (void *)2;
			rc->lookups++;
		}
	}
	return NULL;
}

static void test_table_threads(void **state)
{
	static struct race rc;
	pthread_t th;
	void *res;

	(void)state;
	memset(&rc, 0, sizeof(rc));
	ub_roots_init(&rc.rs);
	assert_int_equal(pthread_create(&th, NULL, reader, &rc), 0);
	for (uint64_t i = 0; i < NADD; i++) {
		struct ub_root r = { TOP + i, (i + 1) * 4096, i + 1, 0 };
		struct ub_eroot *er;

		assert_int_equal(ub_roots_add(&rc.rs, &r, i % 2 == 0, &er), 0);
		assert_int_equal(ub_roots_add(&rc.rs, &r, true, &er), -EEXIST);
		/* a commit: every live root moves, then is published at once */
		if (i % 64 == 63) {
			for (struct ub_eroot *x = ub_roots_first(&rc.rs); x; x = ub_roots_next(x))
				x->root = (struct ub_root){ x->root.objectid, (x->root.generation + 1) * 4096,
							    x->root.generation + 1, 0 };
			ub_roots_lock(&rc.rs);
			for (struct ub_eroot *x = ub_roots_first(&rc.rs); x; x = ub_roots_next(x))
				x->committed = x->root;
			ub_roots_unlock(&rc.rs);
		}
	}
	__atomic_store_n(&rc.done, 1, __ATOMIC_RELEASE);
	assert_int_equal(pthread_join(th, &res), 0);
	assert_null(res);
	assert_true(rc.lookups > 0);
	assert_null(ub_roots_find(&rc.rs, TOP + NADD));
	ub_roots_destroy(&rc.rs);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_load_against_progs),
		cmocka_unit_test(test_missing_tree),
		cmocka_unit_test(test_committed_vs_live),
		cmocka_unit_test(test_abort_restores),
		cmocka_unit_test(test_table_threads),
	};
	return cmocka_run_group_tests(tests, setup_all, teardown_all);
}
