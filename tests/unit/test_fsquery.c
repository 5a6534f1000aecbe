/* SPDX-License-Identifier: MIT */
/*
 * What the btrfs ioctls answer, asked of the library (ubtrfs/fsquery.h), and
 * the writers behind the subvolume and filesystem commands: TREE_SEARCH's key
 * range, the default subvolume (set, read back, its delete refused), the
 * label, the space per type with the global reserve, and fiemap's SHARED flag
 * for each way an extent is shared or not (a clone in one file, a split
 * extent, another file, a snapshot, a write after it), on an image made by
 * mkfs.btrfs (skipped without it); btrfs check judges the image at the end.
 * The same answers against the kernel's: tests/integration/test_filesystem_cmd.py
 * and test_subvolume_cmd.py.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/fiemap.h>
#include <cmocka.h>

#include "ubtrfs/devinfo.h"
#include "ubtrfs/fsinfo.h"
#include "ubtrfs/fsquery.h"
#include "ubtrfs/fswrite.h"
#include "txn/txn.h"
#include "mkfs_image.h"

#define FS BTRFS_FS_TREE_OBJECTID
#define TOP BTRFS_FIRST_FREE_OBJECTID

static int setup_all(void **state)
{
	(void)state;
	return mkfs_image_setup("fsquery");
}

static struct ub_engine *open_engine(void)
{
	const char *paths[1] = { g_img };
	struct ub_engine *e = NULL;

	assert_int_equal(ub_engine_open(paths, 1, NULL, &e), 0);
	return e;
}

/* One operation, committed. */
#define OP(e, call)                                                            \
	do {                                                                   \
		struct ub_txn *t_;                                             \
		assert_int_equal(ub_fsw_begin((e), UB_FSW_OP_SUBVOL, 0, &t_), 0); \
		assert_int_equal((call), 0);                                   \
		ub_fsw_end(e);                                                 \
		assert_int_equal(ub_engine_commit(e), 0);                      \
	} while (0)

struct keys {
	struct ub_key k[64];
	int n;
};

static int keep_key(void *arg, const struct ub_key *key, uint64_t transid, const uint8_t *d, uint32_t len)
{
	struct keys *ks = arg;

	(void)transid;
	(void)d;
	(void)len;
	if (ks->n < 64)
		ks->k[ks->n++] = *key;
	return 0;
}

static void test_search_range(void **state)
{
	struct ub_engine *e;
	struct ub_txn *t;
	uint64_t a, b, c;
	struct keys ks = { .n = 0 };
	struct ub_search_key sk = { .tree = BTRFS_ROOT_TREE_OBJECTID, .max_transid = UINT64_MAX };

	(void)state;
	SKIP_WITHOUT_MKFS(g_have);
	e = open_engine();
	assert_int_equal(ub_fsw_begin(e, UB_FSW_OP_SUBVOL, 0, &t), 0);
	assert_int_equal(ub_fsw_subvol_create(t, FS, TOP, "a", 1, &a), 0);
	assert_int_equal(ub_fsw_subvol_create(t, FS, TOP, "b", 1, &b), 0);
	assert_int_equal(ub_fsw_subvol_create(t, FS, TOP, "c", 1, &c), 0);
	ub_fsw_end(e);
	assert_int_equal(ub_engine_commit(e), 0);
	/* the range is the 136-bit key order: a's back reference lies between a's and b's items */
	sk.min = (struct ub_key){ a, BTRFS_ROOT_ITEM_KEY, 0 };
	sk.max = (struct ub_key){ b, BTRFS_ROOT_ITEM_KEY, UINT64_MAX };
	assert_int_equal(ub_fs_search(ub_engine_fs(e), &sk, keep_key, &ks), 0);
	assert_int_equal(ks.n, 3);
	assert_true(ks.k[0].objectid == a && ks.k[0].type == BTRFS_ROOT_ITEM_KEY);
	assert_true(ks.k[1].objectid == a && ks.k[1].type == BTRFS_ROOT_BACKREF_KEY && ks.k[1].offset == FS);
	assert_true(ks.k[2].objectid == b && ks.k[2].type == BTRFS_ROOT_ITEM_KEY);
	/* an empty range, a leaf generation filter that passes nothing, a tree that is not there */
	ks.n = 0;
	sk.min = (struct ub_key){ c, 0, 0 };
	sk.max = (struct ub_key){ a, 0, 0 };
	assert_int_equal(ub_fs_search(ub_engine_fs(e), &sk, keep_key, &ks), 0);
	sk.min = (struct ub_key){ 0, 0, 0 };
	sk.max = (struct ub_key){ UINT64_MAX, UINT8_MAX, UINT64_MAX };
	sk.min_transid = UINT64_MAX - 1;
	assert_int_equal(ub_fs_search(ub_engine_fs(e), &sk, keep_key, &ks), 0);
	assert_int_equal(ks.n, 0);
	sk.tree = 4242;
	assert_int_equal(ub_fs_search(ub_engine_fs(e), &sk, keep_key, &ks), -ENOENT);
	ub_engine_close(e);
}

static int set_default(struct ub_txn *t, uint64_t id)
{
	return ub_fsw_set_default_subvol(t, id);
}

static void test_default_and_label(void **state)
{
	struct ub_engine *e;
	struct ub_txn *t;
	struct ub_volume_info vi;
	struct ub_fs *fs;
	const char *paths[1] = { g_img };
	struct ub_fs_opts fo = { .super_mirror = -1 };
	uint64_t id = 0, def = 0;
	char big[300];

	(void)state;
	SKIP_WITHOUT_MKFS(g_have);
	e = open_engine();
	assert_int_equal(ub_default_subvol(ub_engine_fs(e), &def), 0);
	assert_int_equal(def, FS);
	OP(e, ub_fsw_subvol_create(t_, FS, TOP, "dflt", 4, &id));
	OP(e, set_default(t_, id));
	assert_int_equal(ub_default_subvol(ub_engine_fs(e), &def), 0);
	assert_int_equal(def, id);
	assert_true(UB_GET(ub_disk_super, incompat_flags, ub_volume_super(ub_fs_volume(ub_engine_fs(e)))) &
		    BTRFS_FEATURE_INCOMPAT_DEFAULT_SUBVOL);
	/* the default cannot go, by name or id; no such subvolume cannot become it */
	assert_int_equal(ub_fsw_begin(e, UB_FSW_OP_SUBVOL, 0, &t), 0);
	assert_int_equal(ub_fsw_subvol_delete(t, FS, TOP, "dflt", 4), -EPERM);
	assert_int_equal(ub_fsw_subvol_delete_id(t, id), -EPERM);
	assert_int_equal(ub_fsw_subvol_delete_id(t, FS), -EINVAL);
	assert_int_equal(ub_fsw_subvol_delete_id(t, 99999), -ENOENT);
	assert_int_equal(ub_fsw_set_default_subvol(t, 99999), -ENOENT);
	assert_int_equal(ub_fsw_set_default_subvol(t, BTRFS_ROOT_TREE_OBJECTID), -ENOENT);
	/* the label: 255 bytes at most, no NUL inside */
	memset(big, 'x', sizeof(big));
	assert_int_equal(ub_fsw_set_label(t, big, 256), -EINVAL);
	assert_int_equal(ub_fsw_set_label(t, "a\0b", 3), -EINVAL);
	assert_int_equal(ub_fsw_set_label(t, big, 255), 0);
	ub_fsw_end(e);
	assert_int_equal(ub_engine_commit(e), 0);
	OP(e, set_default(t_, FS));
	OP(e, ub_fsw_subvol_delete_id(t_, id));
	OP(e, ub_fsw_set_label(t_, "fsquery", 7));
	/* a subvolume made after the delete does not get its id back, even once it is dropped */
	{
		bool more = true;
		uint64_t id2 = 0;

		while (more)
			assert_int_equal(ub_engine_clean(e, 0, &more), 0);
		OP(e, ub_fsw_subvol_create(t_, FS, TOP, "next", 4, &id2));
		assert_true(id2 > id);
	}
	ub_engine_close(e);
	/* what the commits wrote, as a reader opening the image afresh sees it */
	assert_int_equal(ub_fs_open(paths, 1, &fo, NULL, &fs), 0);
	assert_int_equal(ub_volume_get_info(ub_fs_volume(fs), &vi), 0);
	assert_string_equal(vi.label, "fsquery");
	assert_int_equal(ub_default_subvol(fs, &def), 0);
	assert_int_equal(def, FS);
	ub_fs_close(fs);
}

static void test_space_info(void **state)
{
	struct ub_engine *e;
	struct ub_space_entry v[16], one[1];
	uint64_t types = 0;
	int n = 0, n1 = 0;

	(void)state;
	SKIP_WITHOUT_MKFS(g_have);
	e = open_engine();
	assert_int_equal(ub_fs_space_info(ub_engine_fs(e), v, 16, &n), 0);
	assert_true(n >= 4 && n <= 16);
	/* data first, then system and metadata; the global reserve last */
	assert_true(v[0].flags & BTRFS_BLOCK_GROUP_DATA);
	assert_int_equal(v[n - 1].flags, UB_SPACE_GLOBAL_RSV);
	/* 4 KiB nodes, nothing yet: the minimum, 10 items and twice 6 for an unlink (free space tree) */
	assert_int_equal(v[n - 1].total_bytes, 4096ULL * 8 * 2 * (10 + 12));
	for (int i = 0; i < n - 1; i++) {
		assert_true(v[i].used_bytes <= v[i].total_bytes);
		types |= v[i].flags;
	}
	assert_true((types & (BTRFS_BLOCK_GROUP_DATA | BTRFS_BLOCK_GROUP_METADATA | BTRFS_BLOCK_GROUP_SYSTEM)) ==
		    (BTRFS_BLOCK_GROUP_DATA | BTRFS_BLOCK_GROUP_METADATA | BTRFS_BLOCK_GROUP_SYSTEM));
	/* too small a buffer: the count all the same, only what fits written */
	assert_int_equal(ub_fs_space_info(ub_engine_fs(e), one, 1, &n1), 0);
	assert_int_equal(n1, n);
	assert_memory_equal(&one[0], &v[0], sizeof(one[0]));
	ub_engine_close(e);
}

struct extents {
	struct ub_fiemap_extent x[16];
	int n;
};

static int keep_extent(void *arg, const struct ub_fiemap_extent *x)
{
	struct extents *xs = arg;

	if (xs->n < 16)
		xs->x[xs->n++] = *x;
	return 0;
}

static struct extents extents_of(struct ub_engine *e, uint64_t subvol, uint64_t ino)
{
	struct extents xs = { .n = 0 };

	assert_int_equal(ub_file_fiemap(ub_engine_fs(e), subvol, ino, 0, keep_extent, &xs), 0);
	assert_true(xs.n > 0);
	assert_true(xs.x[xs.n - 1].flags & FIEMAP_EXTENT_LAST);
	return xs;
}

static uint64_t new_file(struct ub_engine *e, const char *name, size_t len)
{
	static uint8_t buf[262144];
	struct ub_txn *t;
	uint64_t ino = 0;

	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)(i * 7 + len);
	assert_int_equal(ub_fsw_begin(e, UB_FSW_OP_WRITE, len, &t), 0);
	assert_int_equal(ub_fsw_create(t, FS, TOP, name, strlen(name), 0100644, 0, 0, 0, &ino), 0);
	assert_int_equal(ub_fsw_write(t, FS, ino, 0, buf, len), 0);
	ub_fsw_end(e);
	assert_int_equal(ub_engine_commit(e), 0);
	return ino;
}

static void test_fiemap_shared(void **state)
{
	struct ub_engine *e;
	struct extents xs;
	struct ub_txn *t;
	uint64_t self, split, a, b, inl, snap, pre = 0;
	static const uint8_t four[4096];

	(void)state;
	SKIP_WITHOUT_MKFS(g_have);
	e = open_engine();
	/* one file, one extent: its own */
	a = new_file(e, "fa", 131072);
	xs = extents_of(e, FS, a);
	assert_int_equal(xs.n, 1);
	assert_int_equal(xs.x[0].length, 131072);
	assert_false(xs.x[0].flags & FIEMAP_EXTENT_SHARED);
	/* a write into the middle splits it: the pieces keep one reference, not shared */
	split = new_file(e, "fsplit", 131072);
	OP(e, ub_fsw_write(t_, FS, split, 32768, four, sizeof(four)));
	xs = extents_of(e, FS, split);
	assert_int_equal(xs.n, 3);
	for (int i = 0; i < 3; i++)
		assert_false(xs.x[i].flags & FIEMAP_EXTENT_SHARED);
	/* a clone inside one file: the same extent at two offsets, shared */
	self = new_file(e, "fself", 131072);
	OP(e, ub_fsw_clone_range(t_, FS, self, 0, FS, self, 65536, 65536));
	xs = extents_of(e, FS, self);
	assert_int_equal(xs.n, 2);
	assert_true(xs.x[0].flags & xs.x[1].flags & FIEMAP_EXTENT_SHARED);
	assert_int_equal(xs.x[0].physical, xs.x[1].physical);
	/* another file's: both shared */
	b = new_file(e, "fb", 4096);
	OP(e, ub_fsw_clone_range(t_, FS, a, 0, FS, b, 0, 131072));
	assert_true(extents_of(e, FS, a).x[0].flags & FIEMAP_EXTENT_SHARED);
	assert_true(extents_of(e, FS, b).x[0].flags & FIEMAP_EXTENT_SHARED);
	/* inline data, a preallocated range */
	inl = new_file(e, "finline", 100);
	xs = extents_of(e, FS, inl);
	assert_int_equal(xs.x[0].flags, FIEMAP_EXTENT_DATA_INLINE | FIEMAP_EXTENT_NOT_ALIGNED | FIEMAP_EXTENT_LAST);
	assert_int_equal(ub_fsw_begin(e, UB_FSW_OP_CREATE, 0, &t), 0);
	assert_int_equal(ub_fsw_create(t, FS, TOP, "fpre", 4, 0100644, 0, 0, 0, &pre), 0);
	assert_int_equal(ub_fsw_fallocate(t, FS, pre, 0, 65536, 0), 0);
	ub_fsw_end(e);
	assert_int_equal(ub_engine_commit(e), 0);
	xs = extents_of(e, FS, pre);
	assert_true(xs.x[0].flags & FIEMAP_EXTENT_UNWRITTEN);
	assert_false(xs.x[0].flags & FIEMAP_EXTENT_SHARED);
	/* a snapshot shares every leaf: the split file's extents too, from both sides */
	OP(e, ub_fsw_snapshot(t_, FS, FS, TOP, "snap", 4, true, &snap));
	xs = extents_of(e, FS, split);
	assert_true(xs.x[0].flags & FIEMAP_EXTENT_SHARED);
	xs = extents_of(e, snap, split);
	assert_true(xs.x[2].flags & FIEMAP_EXTENT_SHARED);
	/* a write after it: the new extent is the source's own, the old ones still shared */
	OP(e, ub_fsw_write(t_, FS, split, 65536, four, sizeof(four)));
	xs = extents_of(e, FS, split);
	for (int i = 0; i < xs.n; i++)
		if (xs.x[i].logical == 65536)
			assert_false(xs.x[i].flags & FIEMAP_EXTENT_SHARED);
		else
			assert_true(xs.x[i].flags & FIEMAP_EXTENT_SHARED);
	/* from an offset on: the extent holding it first */
	{
		struct extents from = { .n = 0 };

		assert_int_equal(ub_file_fiemap(ub_engine_fs(e), FS, split, 70000, keep_extent, &from), 0);
		assert_int_equal(from.x[0].logical, 69632);
	}
	ub_engine_close(e);
}

static void test_check_clean(void **state)
{
	(void)state;
	SKIP_WITHOUT_MKFS(g_have);
	assert_int_equal(mkfs_image_check(), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_search_range),
		cmocka_unit_test(test_default_and_label),
		cmocka_unit_test(test_space_info),
		cmocka_unit_test(test_fiemap_shared),
		cmocka_unit_test(test_check_clean),
	};
	return cmocka_run_group_tests(tests, setup_all, teardown_all);
}
