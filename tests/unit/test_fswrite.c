/* SPDX-License-Identifier: MIT */
/*
 * The file API's rules, call by call, on an image made by mkfs.btrfs (skipped
 * without it): argument checks and errno answers, what an abort leaves, the
 * inline / regular extent choice, directory sizes, xattr flags, snapshots of
 * trees changed in the same transaction, data read back after commit and
 * reopen; `btrfs check` judges the image at the end. End-to-end comparisons with the kernel live in
 * tests/integration/test_file_api.py.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "ubtrfs/dev.h"
#include "ubtrfs/format.h"
#include "ubtrfs/fswrite.h"
#include "txn/txn.h"
#include "alloc/chunk_alloc.h"
#include "tree/roots.h"
#include "mkfs_image.h"

#define FS BTRFS_FS_TREE_OBJECTID
#define TOP BTRFS_FIRST_FREE_OBJECTID

static int setup_all(void **state)
{
	(void)state;
	return mkfs_image_setup("fswrite");
}

static struct ub_engine *open_engine(void)
{
	const char *paths[1] = { g_img };
	struct ub_engine *e = NULL;

	assert_int_equal(ub_engine_open(paths, 1, NULL, &e), 0);
	return e;
}

static uint64_t mk(struct ub_txn *t, uint64_t dir, const char *name, uint32_t mode)
{
	uint64_t ino = 0;

	assert_int_equal(ub_fsw_create(t, FS, dir, name, strlen(name), mode, 0, 0, 0, &ino), 0);
	return ino;
}

/* a copy of the inode item, through the running transaction */
static void inode_item(struct ub_txn *t, uint64_t ino, uint8_t ii[sizeof(struct btrfs_inode_item)])
{
	struct ub_key k = { ino, BTRFS_INODE_ITEM_KEY, 0 };
	struct ub_eroot *er;
	struct ub_path p;
	const uint8_t *d;
	uint32_t size;

	assert_int_equal(ub_engine_root(t->e, FS, &er), 0);
	ub_path_init(&p);
	assert_int_equal(ub_tree_lookup(&t->e->fs.tc, &er->root, &k, &p, &d, &size), 0);
	assert_true(size >= sizeof(struct btrfs_inode_item));
	memcpy(ii, d, sizeof(struct btrfs_inode_item));
	ub_path_release(&p);
}

static uint64_t isize(struct ub_txn *t, uint64_t ino)
{
	uint8_t ii[sizeof(struct btrfs_inode_item)];

	inode_item(t, ino, ii);
	return UB_GET(btrfs_inode_item, size, ii);
}

/* the file extent type at offset 0 (inline / regular), -1 none */
static int extent_type(struct ub_txn *t, uint64_t ino)
{
	struct ub_key k = { ino, BTRFS_EXTENT_DATA_KEY, 0 };
	struct ub_eroot *er;
	struct ub_path p;
	const uint8_t *d;
	uint32_t size;
	int v = -1;

	assert_int_equal(ub_engine_root(t->e, FS, &er), 0);
	ub_path_init(&p);
	if (ub_tree_lookup(&t->e->fs.tc, &er->root, &k, &p, &d, &size) == 0)
		v = (int)UB_GET(btrfs_file_extent_item, type, d);
	ub_path_release(&p);
	return v;
}

static void test_names_and_errors(void **state)
{
	struct ub_engine *e;
	struct ub_txn *t;
	static char longname[4100];
	uint64_t d, f, ino;

	(void)state;
	if (!g_have)
		skip();
	e = open_engine();
	assert_int_equal(ub_txn_start(e, &t), 0);
	assert_int_equal(ub_fsw_create(t, FS, TOP, "", 0, S_IFREG | 0644, 0, 0, 0, &ino), -EINVAL);
	assert_int_equal(ub_fsw_create(t, FS, TOP, ".", 1, S_IFREG | 0644, 0, 0, 0, &ino), -EINVAL);
	assert_int_equal(ub_fsw_create(t, FS, TOP, "..", 2, S_IFREG | 0644, 0, 0, 0, &ino), -EINVAL);
	assert_int_equal(ub_fsw_create(t, FS, TOP, "a/b", 3, S_IFREG | 0644, 0, 0, 0, &ino), -EINVAL);
	memset(longname, 'n', sizeof(longname));
	assert_int_equal(ub_fsw_create(t, FS, TOP, longname, 256, S_IFREG | 0644, 0, 0, 0, &ino), -ENAMETOOLONG);
	d = 0;
	assert_int_equal(ub_fsw_mkdir(t, FS, TOP, "d", 1, 0755, 0, 0, &d), 0);
	f = mk(t, d, "f", S_IFREG | 0600);
	assert_int_equal(f, d + 1); /* highest inode number + 1 */
	assert_int_equal(ub_fsw_create(t, FS, d, "f", 1, S_IFREG | 0644, 0, 0, 0, &ino), -EEXIST);
	assert_int_equal(ub_fsw_create(t, FS, f, "x", 1, S_IFREG | 0644, 0, 0, 0, &ino), -ENOTDIR);
	assert_int_equal(isize(t, d), 2);
	assert_int_equal(ub_fsw_rmdir(t, FS, TOP, "d", 1), -ENOTEMPTY);
	assert_int_equal(ub_fsw_unlink(t, FS, TOP, "d", 1), -EISDIR);
	assert_int_equal(ub_fsw_rmdir(t, FS, d, "f", 1), -ENOTDIR);
	assert_int_equal(ub_fsw_unlink(t, FS, d, "nope", 4), -ENOENT);
	assert_int_equal(ub_fsw_link(t, FS, d, TOP, "dl", 2), -EPERM);
	assert_int_equal(ub_fsw_link(t, FS, f, TOP, "fl", 2), 0);
	assert_int_equal(ub_fsw_rename(t, FS, TOP, "d", 1, d, "x", 1, 0), -EINVAL); /* into itself */
	assert_int_equal(ub_fsw_rename(t, FS, TOP, "fl", 2, d, "f", 1, 0), 0);      /* two names of one inode */
	assert_int_equal(ub_fsw_rename(t, FS, TOP, "fl", 2, d, "f", 1, UB_FSW_RENAME_NOREPLACE), -EEXIST);
	assert_int_equal(ub_fsw_rename(t, FS, TOP, "zz", 2, d, "f", 1, UB_FSW_RENAME_EXCHANGE), -ENOENT);
	assert_int_equal(ub_fsw_rename(t, FS, TOP, "fl", 2, TOP, "d", 1, 0), -EISDIR);
	assert_int_equal(ub_fsw_rename(t, FS, TOP, "d", 1, TOP, "fl", 2, 0), -ENOTDIR);
	assert_int_equal(ub_fsw_rename(t, FS, TOP, "d", 1, TOP, "fl", 2, 3), -EINVAL);
	assert_int_equal(ub_fsw_symlink(t, FS, TOP, "s", 1, longname, 4000, 0, 0, &ino), -ENAMETOOLONG);
	assert_int_equal(ub_txn_commit(t), 0);
	/* an aborted transaction leaves nothing */
	assert_int_equal(ub_txn_start(e, &t), 0);
	mk(t, TOP, "gone", S_IFREG | 0644);
	ub_txn_abort(t);
	assert_int_equal(ub_txn_start(e, &t), 0);
	assert_int_equal(ub_fsw_lookup(t, FS, TOP, "gone", 4, &ino, NULL), -ENOENT);
	assert_int_equal(ub_fsw_lookup(t, FS, d, "f", 1, &ino, NULL), 0);
	assert_int_equal(ino, f);
	ub_txn_abort(t);
	ub_engine_close(e);
}

static void test_xattrs(void **state)
{
	struct ub_engine *e;
	struct ub_txn *t;
	char list[64], v[16];
	size_t n;
	uint64_t f;

	(void)state;
	if (!g_have)
		skip();
	e = open_engine();
	assert_int_equal(ub_txn_start(e, &t), 0);
	f = mk(t, TOP, "xf", S_IFREG | 0644);
	assert_int_equal(ub_fsw_setxattr(t, FS, f, "user.a", 6, "1", 1, UB_FSW_XATTR_REPLACE), -ENODATA);
	assert_int_equal(ub_fsw_setxattr(t, FS, f, "user.a", 6, "1", 1, UB_FSW_XATTR_CREATE), 0);
	assert_int_equal(ub_fsw_setxattr(t, FS, f, "user.a", 6, "2", 1, UB_FSW_XATTR_CREATE), -EEXIST);
	assert_int_equal(ub_fsw_setxattr(t, FS, f, "user.a", 6, "22", 2, UB_FSW_XATTR_REPLACE), 0);
	assert_int_equal(ub_fsw_setxattr(t, FS, f, "user.bb", 7, "", 0, 0), 0);
	assert_int_equal(ub_fsw_listxattr(t, FS, f, list, 0, &n), 0);
	assert_int_equal(n, 7 + 8);
	assert_int_equal(ub_fsw_listxattr(t, FS, f, list, 5, &n), -ERANGE);
	assert_int_equal(ub_fsw_getxattr(t, FS, f, "user.a", 6, v, sizeof(v), &n), 0);
	assert_int_equal(n, 2);
	assert_memory_equal(v, "22", 2);
	assert_int_equal(ub_fsw_getxattr(t, FS, f, "user.a", 6, v, 1, &n), -ERANGE);
	assert_int_equal(ub_fsw_removexattr(t, FS, f, "user.zz", 7), -ENODATA);
	assert_int_equal(ub_fsw_removexattr(t, FS, f, "user.a", 6), 0);
	assert_int_equal(ub_fsw_getxattr(t, FS, f, "user.a", 6, v, sizeof(v), &n), -ENODATA);
	assert_int_equal(ub_txn_commit(t), 0);
	ub_engine_close(e);
}

static void test_data_layout(void **state)
{
	static uint8_t buf[300000], back[300000];
	struct ub_engine *e;
	struct ub_txn *t;
	uint64_t a, b, c;
	size_t got;

	(void)state;
	if (!g_have)
		skip();
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)(i * 7 + i / 4096);
	e = open_engine();
	assert_int_equal(ub_txn_start(e, &t), 0);
	a = mk(t, TOP, "inl", S_IFREG | 0644);
	b = mk(t, TOP, "reg", S_IFREG | 0644);
	c = mk(t, TOP, "cmp", S_IFREG | 0644);
	assert_int_equal(ub_fsw_write(t, FS, a, 0, buf, 2048), 0);
	assert_int_equal(extent_type(t, a), BTRFS_FILE_EXTENT_INLINE);
	assert_int_equal(ub_fsw_write(t, FS, a, 2048, buf, 1), 0); /* past max_inline: regular */
	assert_int_equal(extent_type(t, a), BTRFS_FILE_EXTENT_REG);
	assert_int_equal(ub_fsw_write(t, FS, b, 100, buf, sizeof(buf) - 100), 0);
	assert_int_equal(ub_fsw_write(t, FS, b, 5000, buf, 10), 0);
	assert_int_equal(ub_fsw_write_ex(t, FS, c, 0, buf, sizeof(buf), UB_COMPRESS_ZSTD, 0), 0);
	assert_int_equal(ub_fsw_truncate(t, FS, c, 70001), 0);
	assert_int_equal(ub_fsw_write(t, FS, c, 0, buf, 0), 0);
	assert_int_equal(ub_fsw_write(t, FS, TOP, 0, buf, 1), -EISDIR);
	assert_int_equal(ub_txn_commit(t), 0);
	ub_engine_close(e);
	/* reopened: what was committed */
	e = open_engine();
	assert_int_equal(ub_txn_start(e, &t), 0);
	assert_int_equal(ub_fsw_read(t, FS, a, 0, back, sizeof(back), &got), 0);
	assert_int_equal(got, 2049);
	assert_memory_equal(back, buf, 2048);
	assert_int_equal(back[2048], buf[0]);
	assert_int_equal(ub_fsw_read(t, FS, b, 0, back, sizeof(back), &got), 0);
	assert_int_equal(got, sizeof(buf));
	for (size_t i = 0; i < 100; i++)
		assert_int_equal(back[i], 0);
	assert_memory_equal(back + 100, buf, 4900);
	assert_memory_equal(back + 5000, buf, 10);
	assert_memory_equal(back + 5010, buf + 4910, sizeof(buf) - 5010);
	assert_int_equal(ub_fsw_read(t, FS, c, 0, back, sizeof(back), &got), 0);
	assert_int_equal(got, 70001);
	assert_memory_equal(back, buf, 70001);
	/* truncated down: the sector past EOF is zero when the file grows again */
	assert_int_equal(ub_fsw_truncate(t, FS, c, 80000), 0);
	assert_int_equal(ub_fsw_read(t, FS, c, 70000, back, 10000, &got), 0);
	assert_int_equal(back[0], buf[70000]);
	for (size_t i = 1; i < 10000; i++)
		assert_int_equal(back[i], 0);
	assert_int_equal(ub_txn_commit(t), 0);
	ub_engine_close(e);
}

/* file i of a subvolume holds "<tag><i>", padded to `len` bytes */
static void put_tagged(struct ub_txn *t, uint64_t subvol, uint64_t ino, char tag, int i, size_t len)
{
	static char buf[8192];

	memset(buf, tag, sizeof(buf));
	snprintf(buf, 16, "%c%03d", tag, i);
	assert_int_equal(ub_fsw_write(t, subvol, ino, 0, buf, len), 0);
}

static void expect_tagged(struct ub_txn *t, uint64_t subvol, const char *name, char tag, int i)
{
	char want[16], got[16];
	uint64_t ino;
	size_t n;

	assert_int_equal(ub_fsw_lookup(t, subvol, TOP, name, strlen(name), &ino, NULL), 0);
	assert_int_equal(ub_fsw_read(t, subvol, ino, 0, got, 4, &n), 0);
	snprintf(want, sizeof(want), "%c%03d", tag, i);
	assert_int_equal(n, 4);
	assert_memory_equal(got, want, 4);
}

/* snapshots of trees the running transaction changed: each keeps its source as it was at the call */
#define SNAP_FILES 200
static void test_snapshot_in_transaction(void **state)
{
	uint64_t ino[SNAP_FILES], s1, s2, s3, x, tid;
	struct ub_engine *e;
	struct ub_txn *t;
	char name[16];

	(void)state;
	if (!g_have)
		skip();
	e = open_engine();
	assert_int_equal(ub_txn_start(e, &t), 0);
	/* enough files for a tree of several levels, every block of this transaction */
	for (int i = 0; i < SNAP_FILES; i++) {
		snprintf(name, sizeof(name), "f%03d", i);
		ino[i] = mk(t, TOP, name, S_IFREG | 0644);
		put_tagged(t, FS, ino[i], 'A', i, i % 20 ? 100 : 8192);
	}
	assert_int_equal(ub_fsw_snapshot(t, FS, FS, TOP, "s1", 2, false, &s1), 0);
	for (int i = 0; i < SNAP_FILES; i++)
		put_tagged(t, FS, ino[i], 'B', i, i % 20 ? 100 : 8192);
	mk(t, TOP, "after", S_IFREG | 0644);
	assert_int_equal(ub_fsw_unlink(t, FS, TOP, "f000", 4), 0);
	assert_int_equal(ub_fsw_lookup(t, s1, TOP, "after", 5, &x, NULL), -ENOENT);
	assert_int_equal(ub_fsw_lookup(t, s1, TOP, "s1", 2, &x, NULL), -ENOENT);
	expect_tagged(t, s1, "f000", 'A', 0);
	expect_tagged(t, s1, "f005", 'A', 5);
	for (int i = 10; i < 30; i++)
		put_tagged(t, s1, ino[i], 'C', i, i % 20 ? 100 : 8192);
	/* a snapshot of the snapshot, then a second one of the source, with no commit of the caller's */
	assert_int_equal(ub_fsw_snapshot(t, s1, FS, TOP, "s2", 2, true, &s2), 0);
	put_tagged(t, s1, ino[10], 'D', 10, 100);
	put_tagged(t, s1, ino[20], 'D', 20, 8192);
	assert_int_equal(ub_fsw_create(t, s2, TOP, "x", 1, S_IFREG | 0644, 0, 0, 0, &x), -EROFS);
	expect_tagged(t, s2, "f010", 'C', 10);
	assert_int_equal(ub_fsw_snapshot(t, FS, FS, TOP, "s3", 2, false, &s3), 0);
	put_tagged(t, FS, ino[100], 'E', 100, 8192);
	put_tagged(t, s3, ino[101], 'F', 101, 100);
	expect_tagged(t, s3, "f100", 'B', 100);
	expect_tagged(t, FS, "f101", 'B', 101);
	assert_int_equal(ub_fsw_subvol_delete(t, FS, TOP, "s3", 2), 0);
	assert_int_equal(ub_txn_commit(t), 0);
	ub_engine_close(e);
	/* reopened: what each tree held */
	e = open_engine();
	assert_int_equal(ub_txn_start(e, &t), 0);
	assert_int_equal(ub_fsw_lookup(t, FS, TOP, "f000", 4, &x, NULL), -ENOENT);
	expect_tagged(t, FS, "f005", 'B', 5);
	expect_tagged(t, FS, "f100", 'E', 100);
	expect_tagged(t, FS, "f101", 'B', 101);
	expect_tagged(t, s1, "f000", 'A', 0);
	expect_tagged(t, s1, "f009", 'A', 9);
	expect_tagged(t, s1, "f010", 'D', 10);
	expect_tagged(t, s1, "f011", 'C', 11);
	expect_tagged(t, s1, "f020", 'D', 20);
	expect_tagged(t, s1, "f100", 'A', 100);
	expect_tagged(t, s2, "f010", 'C', 10);
	expect_tagged(t, s2, "f020", 'C', 20);
	expect_tagged(t, s2, "f030", 'A', 30);
	assert_int_equal(ub_fsw_lookup(t, FS, TOP, "s3", 2, &x, NULL), -ENOENT);
	/* changed again in the next transaction: copies as for any committed snapshot */
	put_tagged(t, FS, ino[5], 'G', 5, 100);
	assert_int_equal(ub_txn_commit(t), 0);
	ub_engine_close(e);
	assert_int_equal(sh("btrfs check --readonly --check-data-csum %s >%s/check.log 2>&1 || "
			    "{ cat %s/check.log; false; }", g_img, g_dir, g_dir), 0);
	e = open_engine();
	/*
	 * A snapshot commits (nothing may write into a tree in the transaction
	 * that made it): an abort after it keeps the snapshot and what came
	 * before it, and loses only what came after.
	 */
	assert_int_equal(ub_txn_start(e, &t), 0);
	put_tagged(t, FS, ino[6], 'H', 6, 100);
	tid = t->transid;
	assert_int_equal(ub_fsw_snapshot(t, FS, FS, TOP, "s9", 2, false, &s3), 0);
	assert_int_equal(t->transid, tid + 1);
	put_tagged(t, FS, ino[6], 'I', 6, 100);
	put_tagged(t, s3, ino[7], 'J', 7, 100);
	ub_txn_abort(t);
	assert_int_equal(ub_txn_start(e, &t), 0);
	expect_tagged(t, FS, "f006", 'H', 6);
	expect_tagged(t, s3, "f006", 'H', 6);
	expect_tagged(t, s3, "f007", 'B', 7);
	expect_tagged(t, FS, "f005", 'G', 5);
	expect_tagged(t, s1, "f005", 'A', 5);
	assert_int_equal(ub_fsw_snapshot(t, FS, FS, TOP, "s9", 2, false, &x), -EEXIST);
	put_tagged(t, FS, ino[6], 'I', 6, 100);
	put_tagged(t, s3, ino[7], 'J', 7, 100);
	assert_int_equal(ub_fsw_subvol_delete(t, FS, TOP, "s1", 2), 0);
	assert_int_equal(ub_fsw_subvol_delete(t, FS, TOP, "s2", 2), 0);
	assert_int_equal(ub_txn_commit(t), 0);
	ub_engine_close(e);
	e = open_engine();
	assert_int_equal(ub_txn_start(e, &t), 0);
	expect_tagged(t, FS, "f006", 'I', 6);
	expect_tagged(t, FS, "f007", 'B', 7);
	expect_tagged(t, s3, "f006", 'H', 6);
	expect_tagged(t, s3, "f007", 'J', 7);
	assert_int_equal(ub_fsw_subvol_delete(t, FS, TOP, "s9", 2), 0);
	assert_int_equal(ub_txn_commit(t), 0);
	ub_engine_close(e);
}

/* extents prepared outside the transaction read back as ub_fsw_write_ex's; chattr's rules */
static uint64_t iflags(struct ub_txn *t, uint64_t ino)
{
	uint8_t ii[sizeof(struct btrfs_inode_item)];

	inode_item(t, ino, ii);
	return UB_GET(btrfs_inode_item, flags, ii);
}

static void test_encoded_and_flags(void **state)
{
	static uint8_t buf[300000 + 4096], back[300000], out[300000 + 4096], sums[(300000 / 4096 + 1) * 32];
	struct ub_fsw_extent x[4];
	const size_t len = 300000, step = UB_FSW_COMPRESSED_MAX;
	struct ub_engine *e;
	struct ub_txn *t;
	uint64_t a, b, c;
	size_t got, n = 0;
	unsigned ct;

	(void)state;
	if (!g_have)
		skip();
	for (size_t i = 0; i < len; i++)
		buf[i] = (uint8_t)(i % 251 < 120 ? 'a' + i % 7 : i * 2654435761U >> 13);
	memset(buf + len, 0, sizeof(buf) - len);
	e = open_engine();
	ct = e->fs.vol->csum_type;
	assert_int_equal(ub_txn_start(e, &t), 0);
	a = mk(t, TOP, "enc_a", S_IFREG | 0644);
	b = mk(t, TOP, "enc_b", S_IFREG | 0644);
	assert_int_equal(ub_fsw_write_ex(t, FS, a, 0, buf, len, UB_COMPRESS_ZSTD, 0), 0);
	for (size_t o = 0; o < len; o += step, n++) {
		size_t piece = len - o < step ? (len - o + 4095) / 4096 * 4096 : step;

		assert_int_equal(ub_fsw_compress_extent(UB_COMPRESS_ZSTD, 0, 4096, (int)ct, buf + o, piece, out + o,
							sums + o / 4096 * ub_csum_size(ct), &x[n]), 0);
	}
	assert_int_equal(ub_fsw_write_encoded(t, FS, b, 4096 + 1, len, x, n), -EINVAL); /* unaligned */
	assert_int_equal(ub_fsw_write_encoded(t, FS, b, 0, len + 8192, x, n), -EINVAL); /* extents too short */
	assert_int_equal(ub_fsw_write_encoded(t, FS, b, 0, len, x, n), 0);
	assert_int_equal(isize(t, b), len);
	assert_int_equal(ub_fsw_read(t, FS, b, 0, back, len, &got), 0);
	assert_int_equal(got, len);
	assert_memory_equal(back, buf, len);
	/* a file ub_fsw_write keeps inline is not for write_encoded */
	c = mk(t, TOP, "enc_c", S_IFREG | 0644);
	assert_int_equal(ub_fsw_compress_extent(0, 0, 4096, (int)ct, buf, 4096, out, sums, &x[0]), 0);
	assert_int_equal(ub_fsw_write_encoded(t, FS, c, 0, 100, x, 1), -EINVAL);
	/* chattr +C: only while the file is empty (then nodatasum too), ignored after */
	assert_int_equal(ub_fsw_set_flags(t, FS, c, UB_INODE_IMMUTABLE, 0), -EOPNOTSUPP);
	assert_int_equal(ub_fsw_set_flags(t, FS, c, UB_INODE_NODATACOW, 0), 0);
	assert_int_equal(iflags(t, c) & (UB_INODE_NODATACOW | UB_INODE_NODATASUM),
			 UB_INODE_NODATACOW | UB_INODE_NODATASUM);
	assert_int_equal(ub_fsw_set_flags(t, FS, a, UB_INODE_NODATACOW, 0), 0);
	assert_int_equal(iflags(t, a) & UB_INODE_NODATACOW, 0);
	assert_int_equal(ub_txn_commit(t), 0);
	assert_int_equal(ub_txn_start(e, &t), 0);
	assert_int_equal(ub_fsw_read(t, FS, a, 0, back, len, &got), 0);
	assert_memory_equal(back, buf, len);
	ub_txn_abort(t);
	ub_engine_close(e);
}

/* ub_engine_begin_op joins the running transaction, ub_engine_commit ends it */
static void test_begin_op(void **state)
{
	struct ub_engine *e;
	struct ub_txn *t, *t2;
	uint64_t gen, ino;

	(void)state;
	if (!g_have)
		skip();
	e = open_engine();
	gen = e->generation;
	assert_int_equal(ub_engine_commit(e), 0); /* nothing running: nothing to do */
	assert_int_equal(e->generation, gen);
	assert_int_equal(ub_engine_begin_op(e, 64 * 1024, UB_CHUNK_OP_ADD, &t), 0);
	mk(t, TOP, "op1", S_IFREG | 0644);
	assert_int_equal(ub_engine_begin_op(e, 64 * 1024, UB_CHUNK_OP_ADD, &t2), 0);
	assert_ptr_equal(t, t2);
	mk(t2, TOP, "op2", S_IFREG | 0644);
	assert_int_equal(ub_engine_commit(e), 0);
	assert_null(e->running);
	assert_int_equal(e->generation, gen + 1);
	assert_int_equal(ub_engine_begin_op(e, 64 * 1024, UB_CHUNK_OP_FREE, &t), 0);
	assert_int_equal(t->transid, gen + 2);
	assert_int_equal(ub_fsw_lookup(t, FS, TOP, "op2", 3, &ino, NULL), 0);
	assert_int_equal(ub_engine_commit(e), 0);
	/* the file API's per-kind entry point */
	assert_true(ub_fsw_op_bytes(e, UB_FSW_OP_WRITE, 1 << 20) > ub_fsw_op_bytes(e, UB_FSW_OP_WRITE, 4096));
	assert_int_equal(ub_fsw_begin(e, 0, 0, &t), -EINVAL);
	assert_int_equal(ub_fsw_begin(e, UB_FSW_OP_CREATE, 0, &t), 0);
	mk(t, TOP, "op3", S_IFREG | 0644);
	assert_int_equal(ub_fsw_begin(e, UB_FSW_OP_UNLINK, 0, &t2), 0);
	assert_ptr_equal(t, t2);
	assert_int_equal(ub_engine_commit(e), 0);
	ub_engine_close(e);
}

/* A snapshot whose commit fails: the error comes back, the handle only aborts, the disk keeps the last commit. */
static void test_snapshot_commit_fails(void **state)
{
	struct ub_fault_plan *plan;
	struct ub_dev *dev = NULL;
	struct ub_engine *e;
	struct ub_txn *t;
	uint64_t id, ino;

	(void)state;
	if (!g_have)
		skip();
	assert_int_equal(ub_fault_plan_new(&plan), 0);
	assert_int_equal(ub_dev_open(g_img, true, &dev), 0);
	assert_int_equal(ub_dev_open_faulty(dev, plan, &dev), 0);
	assert_int_equal(ub_engine_open_devs(&dev, 1, NULL, &e), 0);
	assert_int_equal(ub_txn_start(e, &t), 0);
	mk(t, TOP, "lost", S_IFREG | 0644);
	ub_fault_plan_arm(plan, UB_FAULT_WRITE | UB_FAULT_FLUSH, 1, true);
	assert_int_equal(ub_fsw_snapshot(t, FS, FS, TOP, "sfail", 5, false, &id), -EIO);
	assert_true(ub_fault_plan_injected(plan) > 0);
	assert_int_equal(ub_txn_commit(t), -EIO); /* refused: the engine turned read-only */
	assert_int_equal(ub_txn_start(e, &t), -EROFS);
	ub_engine_close(e);
	ub_fault_plan_put(plan);
	e = open_engine();
	assert_int_equal(ub_txn_start(e, &t), 0);
	assert_int_equal(ub_fsw_lookup(t, FS, TOP, "sfail", 5, &ino, NULL), -ENOENT);
	assert_int_equal(ub_fsw_lookup(t, FS, TOP, "lost", 4, &ino, NULL), -ENOENT);
	ub_txn_abort(t);
	ub_engine_close(e);
}
/* an engine on a fresh image of its own (mkfs.btrfs), in g_dir */
static struct ub_engine *open_fresh(const char *name)
{
	char path[256];
	const char *paths[1] = { path };
	struct ub_engine *e = NULL;

	snprintf(path, sizeof(path), "%s/%s", g_dir, name);
	assert_int_equal(sh("truncate -s 256M %s && mkfs.btrfs -q -f -n 4096 %s >/dev/null 2>&1", path, path), 0);
	assert_int_equal(ub_engine_open(paths, 1, NULL, &e), 0);
	return e;
}

/*
 * Inode numbers are counted per subvolume for as long as the filesystem is
 * open, as the kernel counts them during a mount: never a number handed out
 * twice, however many subvolumes are in use (a process-wide table of 256
 * counters forgot the oldest and counted again from the tree, handing out
 * the number of an unlinked inode once more), and a new open of another
 * filesystem starts from its own tree.
 */
static void test_inode_numbers(void **state)
{
	struct ub_engine *e;
	struct ub_txn *t;
	uint64_t a, b, c, id, x;
	char name[32];

	(void)state;
	if (!g_have)
		skip();
	e = open_fresh("ino1.img");
	assert_int_equal(ub_txn_start(e, &t), 0);
	a = mk(t, TOP, "a", S_IFREG | 0644);
	b = mk(t, TOP, "b", S_IFREG | 0644);
	assert_int_equal(a, TOP + 1);
	assert_int_equal(b, TOP + 2);
	assert_int_equal(ub_fsw_unlink(t, FS, TOP, "b", 1), 0);
	/* more subvolumes in use than the old table had counters */
	for (int i = 0; i < 300; i++) {
		snprintf(name, sizeof(name), "s%d", i);
		assert_int_equal(ub_fsw_subvol_create(t, FS, TOP, name, strlen(name), &id), 0);
		assert_int_equal(ub_fsw_create(t, id, TOP, "x", 1, S_IFREG | 0644, 0, 0, 0, &x), 0);
		assert_int_equal(x, TOP + 1);
	}
	c = mk(t, TOP, "c", S_IFREG | 0644);
	assert_int_equal(c, TOP + 3); /* not b's number again */
	assert_int_equal(ub_txn_commit(t), 0);
	ub_engine_close(e);

	/* another filesystem: its own count, whatever address its engine got */
	e = open_fresh("ino2.img");
	assert_int_equal(ub_txn_start(e, &t), 0);
	assert_int_equal(mk(t, TOP, "a", S_IFREG | 0644), TOP + 1);
	assert_int_equal(ub_txn_commit(t), 0);
	ub_engine_close(e);
}

/*
 * The commit's reserve counts every tree the commit may copy a path of, at
 * its height: with 200 subvolumes in use, at least two blocks per level of
 * each (a fixed list of 64 trees left most of them out).
 */
static void test_commit_reserve_every_tree(void **state)
{
	struct ub_engine *e;
	struct ub_txn *t;
	struct ub_chunk_ctx cc;
	uint64_t id, levels = 0, ntrees = 0;
	char name[32];

	(void)state;
	if (!g_have)
		skip();
	e = open_fresh("reserve.img");
	assert_int_equal(ub_txn_start(e, &t), 0);
	for (int i = 0; i < 200; i++) {
		snprintf(name, sizeof(name), "s%d", i);
		assert_int_equal(ub_fsw_subvol_create(t, FS, TOP, name, strlen(name), &id), 0);
	}
	assert_int_equal(ub_txn_commit(t), 0);
	assert_int_equal(ub_txn_start(e, &t), 0);
	assert_int_equal(ub_txn_chunk_ctx(t, &cc), 0);
	for (struct ub_eroot *er = ub_roots_first(e->fs.roots); er; er = ub_roots_next(er))
		if (er != e->fs.chunk_tree && er->root.bytenr) {
			levels += er->root.level + 1u;
			ntrees++;
		}
	assert_true(ntrees > 200);
	assert_true(ub_chunk_commit_reserve(&cc) >= 2 * levels * e->fs.vol->nodesize);
	ub_txn_abort(t);
	ub_engine_close(e);
}

/* Whether the subvolume tree of the committed image holds (ORPHAN, ORPHAN_ITEM, ino), by btrfs's own dump. */
static bool has_orphan_item(const char *img, uint64_t ino)
{
	return sh("btrfs inspect-internal dump-tree -t 5 %s 2>/dev/null | grep -q 'key (ORPHAN ORPHAN_ITEM %llu)'", img,
		  (unsigned long long)ino) == 0;
}

static bool has_inode_item(const char *img, uint64_t ino)
{
	return sh("btrfs inspect-internal dump-tree -t 5 %s 2>/dev/null | grep -q 'key (%llu INODE_ITEM 0)'", img,
		  (unsigned long long)ino) == 0;
}

/*
 * Orphans as the kernel keeps them: with keep_orphans on, the last unlink
 * leaves the inode (nlink 0) and an ORPHAN item until ub_fsw_evict; an
 * O_TMPFILE inode is an orphan until a link names it; what a session leaves
 * is removed at the next open by ub_fsw_orphan_cleanup. btrfs check passes
 * every committed state (it knows orphans).
 */
static void test_orphans(void **state)
{
	static uint8_t buf[20000], back[20000];
	char path[256];
	struct ub_engine *e;
	struct ub_txn *t;
	uint64_t f, g, tmp, ino;
	size_t got;

	(void)state;
	if (!g_have)
		skip();
	e = open_fresh("orphan.img");
	snprintf(path, sizeof(path), "%s/orphan.img", g_dir);
	ub_engine_keep_orphans(e, true);
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)(i * 7 + 3);
	assert_int_equal(ub_fsw_begin(e, UB_FSW_OP_WRITE, sizeof(buf), &t), 0);
	f = mk(t, TOP, "f", S_IFREG | 0644);
	g = mk(t, TOP, "g", S_IFREG | 0644);
	assert_int_equal(ub_fsw_write(t, FS, f, 0, buf, sizeof(buf)), 0);
	assert_int_equal(ub_fsw_write(t, FS, g, 0, buf, sizeof(buf)), 0);
	assert_int_equal(ub_fsw_tmpfile(t, FS, TOP, 0600, 0, 0, &tmp), 0);
	assert_int_equal(ub_fsw_write(t, FS, tmp, 0, buf, sizeof(buf)), 0);
	ub_fsw_end(e);
	assert_int_equal(ub_engine_commit(e), 0);
	assert_true(has_orphan_item(path, tmp));

	/* unlinked: still readable, an orphan on disk */
	assert_int_equal(ub_fsw_begin(e, UB_FSW_OP_UNLINK, 0, &t), 0);
	assert_int_equal(ub_fsw_unlink(t, FS, TOP, "f", 1), 0);
	assert_int_equal(ub_fsw_unlink(t, FS, TOP, "g", 1), 0);
	assert_int_equal(ub_fsw_read(t, FS, f, 0, back, sizeof(back), &got), 0);
	assert_int_equal(got, sizeof(back));
	assert_memory_equal(back, buf, sizeof(buf));
	/* the tmpfile gets a name and stops being an orphan */
	assert_int_equal(ub_fsw_link(t, FS, tmp, TOP, "named", 5), 0);
	ub_fsw_end(e);
	assert_int_equal(ub_engine_commit(e), 0);
	assert_true(has_orphan_item(path, f) && has_inode_item(path, f));
	assert_false(has_orphan_item(path, tmp));
	assert_int_equal(mkfs_image_check_path(path), 0);

	/* f's last user goes: evicted; g is left for the next open */
	assert_int_equal(ub_fsw_begin(e, UB_FSW_OP_UNLINK, 0, &t), 0);
	assert_int_equal(ub_fsw_evict(t, FS, f), 0);
	assert_int_equal(ub_fsw_evict(t, FS, tmp), 0); /* named: nothing happens */
	ub_fsw_end(e);
	assert_int_equal(ub_engine_commit(e), 0);
	assert_false(has_orphan_item(path, f) || has_inode_item(path, f));
	assert_true(has_inode_item(path, tmp));
	ub_engine_close(e);
	assert_int_equal(mkfs_image_check_path(path), 0);

	/* the next session removes what the last one left */
	{
		const char *paths[1] = { path };
		uint64_t n = 0;

		assert_int_equal(ub_engine_open(paths, 1, NULL, &e), 0);
		assert_int_equal(ub_fsw_orphan_cleanup(e, &n), 0);
		assert_int_equal(n, 1);
		assert_int_equal(ub_txn_start(e, &t), 0);
		assert_int_equal(ub_fsw_lookup(t, FS, TOP, "named", 5, &ino, NULL), 0);
		assert_int_equal(ino, tmp);
		ub_txn_abort(t);
		ub_engine_close(e);
	}
	assert_false(has_orphan_item(path, g) || has_inode_item(path, g));
	assert_int_equal(mkfs_image_check_path(path), 0);
}

/*
 * A clone shares extents: the destination reads the source's bytes, its
 * items point at the same disk extents, the source stays as it was, and
 * btrfs check agrees with every reference (and the kernel, in
 * test_engine_threads.py's recipes, reads both). Rewriting the clone's
 * shared part leaves the source alone.
 */
static void test_clone_range(void **state)
{
	static uint8_t buf[5 * 4096 + 100], back[9 * 4096], want[9 * 4096];
	char path[256];
	struct ub_engine *e;
	struct ub_txn *t;
	uint64_t src, dst, small;
	size_t got;

	(void)state;
	if (!g_have)
		skip();
	e = open_fresh("clone.img");
	snprintf(path, sizeof(path), "%s/clone.img", g_dir);
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)(i * 13 + 1);
	assert_int_equal(ub_fsw_begin(e, UB_FSW_OP_WRITE, sizeof(buf), &t), 0);
	src = mk(t, TOP, "src", S_IFREG | 0644);
	dst = mk(t, TOP, "dst", S_IFREG | 0644);
	small = mk(t, TOP, "small", S_IFREG | 0644);
	assert_int_equal(ub_fsw_write(t, FS, src, 0, buf, sizeof(buf)), 0);
	assert_int_equal(ub_fsw_write(t, FS, small, 0, "tiny", 4), 0);
	ub_fsw_end(e);
	assert_int_equal(ub_engine_commit(e), 0);

	assert_int_equal(ub_fsw_begin(e, UB_FSW_OP_WRITE, sizeof(buf), &t), 0);
	/* the rules */
	assert_int_equal(ub_fsw_clone_range(t, FS, src, 1, FS, dst, 0, 4096), -EINVAL);
	assert_int_equal(ub_fsw_clone_range(t, FS, src, 0, FS, src, 4096, 8192), -EINVAL);
	assert_int_equal(ub_fsw_clone_range(t, FS, src, 0, FS, small, 4096, 4096), -EOPNOTSUPP);
	/* two sectors into the middle, then the tail (to the source's end, partial) after them */
	assert_int_equal(ub_fsw_clone_range(t, FS, src, 4096, FS, dst, 3 * 4096, 2 * 4096), 0);
	assert_int_equal(ub_fsw_clone_range(t, FS, src, 4 * 4096, FS, dst, 5 * 4096, 0), 0);
	memset(want, 0, sizeof(want));
	memcpy(want + 3 * 4096, buf + 4096, 2 * 4096);
	memcpy(want + 5 * 4096, buf + 4 * 4096, 4096 + 100);
	assert_int_equal(ub_fsw_read(t, FS, dst, 0, back, sizeof(back), &got), 0);
	assert_int_equal(got, 6 * 4096 + 100); /* the tail's partial sector ends the clone as it ends the source */
	assert_int_equal(isize(t, dst), 6 * 4096 + 100);
	assert_memory_equal(back, want, got);
	/* the shared part rewritten in the clone: the source keeps its bytes */
	assert_int_equal(ub_fsw_write(t, FS, dst, 3 * 4096 + 10, "changed", 7), 0);
	assert_int_equal(ub_fsw_read(t, FS, src, 0, back, sizeof(back), &got), 0);
	assert_int_equal(got, sizeof(buf));
	assert_memory_equal(back, buf, sizeof(buf));
	memcpy(want + 3 * 4096 + 10, "changed", 7);
	assert_int_equal(ub_fsw_read(t, FS, dst, 0, back, sizeof(back), &got), 0);
	assert_memory_equal(back, want, got);
	ub_fsw_end(e);
	assert_int_equal(ub_engine_commit(e), 0);
	ub_engine_close(e);
	assert_int_equal(mkfs_image_check_path(path), 0);
	/* the clone's extents are the source's: both files' items name the same disk extent */
	assert_int_equal(sh("test $(btrfs inspect-internal dump-tree -t 5 %s | grep -o 'disk byte [0-9]*' | sort | uniq -d | wc -l) -ge 1",
			    path), 0);
}

static void test_check_clean(void **state)
{
	(void)state;
	if (!g_have)
		skip();
	assert_int_equal(mkfs_image_check(), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_names_and_errors),
		cmocka_unit_test(test_xattrs),
		cmocka_unit_test(test_data_layout),
		cmocka_unit_test(test_snapshot_in_transaction),
		cmocka_unit_test(test_encoded_and_flags),
		cmocka_unit_test(test_begin_op),
		cmocka_unit_test(test_snapshot_commit_fails),
		cmocka_unit_test(test_inode_numbers),
		cmocka_unit_test(test_commit_reserve_every_tree),
		cmocka_unit_test(test_orphans),
		cmocka_unit_test(test_clone_range),
		cmocka_unit_test(test_check_clean),
	};
	return cmocka_run_group_tests(tests, setup_all, teardown_all);
}
