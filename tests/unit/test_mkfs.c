/* SPDX-License-Identifier: MIT */
/*
 * lib/mkfs on memory devices: the leaf builder's rules, the option parsers,
 * refusals that leave the devices untouched, and a made filesystem opened
 * again by the library's own (verifying) reader. The kernel and btrfs check
 * referee the real images in tests/integration/test_mkfs.py.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "mkfs/mkfs_internal.h"
#include "ubtrfs/devinfo.h"
#include "ubtrfs/fs.h"
#include "ubtrfs/fsinfo.h"
#include "ubtrfs/mkfs.h"
#include "ubtrfs/volume.h"

#define MiB (1024ULL * 1024)

static const struct ub_log quiet = { .fn = NULL, .arg = NULL, .verbosity = -1, .errors = NULL };

static bool all_zero(const uint8_t *p, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}

static void open_mem(uint8_t **bufs, int n, uint64_t size, struct ub_dev **devs)
{
	for (int i = 0; i < n; i++) {
		char name[16];

		snprintf(name, sizeof(name), "mem%d", i);
		assert_int_equal(ub_dev_open_mem(name, bufs[i], size, true, &devs[i]), 0);
	}
}

static void leaf_builder_rules(void **state)
{
	uint8_t buf[4096], id[16] = { 1 }, *p;
	struct ub_leaf_builder lb;
	struct ub_leaf_header h = { .bytenr = 1 * MiB, .generation = 1, .owner = 5, .fsid = id, .chunk_tree_uuid = id };
	struct ub_key a = { 256, BTRFS_INODE_ITEM_KEY, 0 }, b = { 256, BTRFS_INODE_REF_KEY, 256 };
	uint8_t expect[UB_CSUM_SIZE_MAX];
	int n = 0;

	(void)state;
	ub_leaf_init(&lb, buf, sizeof(buf), &h);
	assert_int_equal(ub_leaf_add(&lb, &b, 12, &p), 0);
	/* keys must rise */
	assert_int_equal(ub_leaf_add(&lb, &a, 160, &p), -EINVAL);
	assert_int_equal(ub_leaf_add(&lb, &b, 12, &p), -EINVAL);
	/* item data packs down from the end: the first item's data ends the block */
	assert_int_equal(UB_GET(ub_disk_item, offset, buf + UB_HEADER_SIZE), 4096 - UB_HEADER_SIZE - 12);
	/* fill up: each item takes 25 + 100 bytes of the 3995 after the header */
	for (uint64_t off = 257;; off++) {
		struct ub_key k = { 256, BTRFS_INODE_REF_KEY, off };
		int ret = ub_leaf_add(&lb, &k, 100, &p);

		if (ret) {
			assert_int_equal(ret, -E2BIG);
			break;
		}
		n++;
	}
	assert_int_equal(1 + n, (4096 - UB_HEADER_SIZE - 12 - UB_ITEM_SIZE) / (UB_ITEM_SIZE + 100) + 1);
	assert_int_equal(ub_leaf_finish(&lb, BTRFS_CSUM_TYPE_CRC32), 0);
	assert_int_equal(UB_GET(ub_disk_header, nritems, buf), (uint64_t)(1 + n));
	assert_int_equal(UB_GET(ub_disk_header, bytenr, buf), 1 * MiB);
	assert_int_equal(ub_csum(BTRFS_CSUM_TYPE_CRC32, buf + UB_CSUM_SIZE_MAX, sizeof(buf) - UB_CSUM_SIZE_MAX, expect), 0);
	assert_memory_equal(buf, expect, 4);
}

static void option_names(void **state)
{
	unsigned f = UB_MKFS_F_DEFAULT, c;
	uint64_t p;
	char why[200];

	(void)state;
	assert_int_equal(ub_mkfs_parse_profile("RAID1C3", &p), 0);
	assert_int_equal(p, BTRFS_BLOCK_GROUP_RAID1C3);
	assert_int_equal(ub_mkfs_parse_profile("single", &p), 0);
	assert_int_equal(p, 0);
	assert_int_equal(ub_mkfs_parse_profile("raid7", &p), -EINVAL);
	assert_int_equal(ub_mkfs_parse_csum("xxhash", &c), 0);
	assert_int_equal(c, BTRFS_CSUM_TYPE_XXHASH);
	assert_int_equal(ub_mkfs_parse_csum("blake2", &c), 0);
	assert_int_equal(c, BTRFS_CSUM_TYPE_BLAKE2);
	assert_int_equal(ub_mkfs_parse_csum("md5", &c), -EINVAL);
	assert_int_equal(ub_mkfs_parse_features("^no-holes,^free-space-tree", &f, why, sizeof(why)), 0);
	assert_int_equal(f, UB_MKFS_F_SKINNY_METADATA | UB_MKFS_F_EXTREF);
	assert_int_equal(ub_mkfs_parse_features("no-holes,^quota", &f, why, sizeof(why)), 0);
	assert_true(f & UB_MKFS_F_NO_HOLES);
	assert_int_equal(ub_mkfs_parse_features("quota", &f, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "not supported"));
	assert_int_equal(ub_mkfs_parse_features("raid56", &f, why, sizeof(why)), -EINVAL);
	assert_int_equal(ub_mkfs_parse_features("nonsense", &f, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "unknown feature 'nonsense'"));
}

/* the figures mkfs.btrfs 6.2 prints as "minimum size for each btrfs device" */
static void compress_names(void **state)
{
	int c, l;

	(void)state;
	assert_int_equal(ub_mkfs_parse_compress("zstd", &c, &l), 0);
	assert_int_equal(c, UB_COMPRESS_ZSTD);
	assert_int_equal(l, 0);
	assert_int_equal(ub_mkfs_parse_compress("ZLIB:9", &c, &l), 0);
	assert_int_equal(c, UB_COMPRESS_ZLIB);
	assert_int_equal(l, 9);
	assert_int_equal(ub_mkfs_parse_compress("zstd:15", &c, &l), 0);
	assert_int_equal(l, 15);
	assert_int_equal(ub_mkfs_parse_compress("lzo", &c, &l), 0);
	assert_int_equal(c, UB_COMPRESS_LZO);
	/* out of the kernel's ranges, lzo has no levels, junk */
	const char *bad[] = { "zstd:16", "zlib:0", "zlib:10", "lzo:1", "zstd:", "zstd:3x", "zst", "zstdd", "", ":3" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(ub_mkfs_parse_compress(bad[i], &c, &l), -EINVAL);
}

static void min_sizes(void **state)
{
	(void)state;
	assert_int_equal(ub_mkfs_min_dev_size(BTRFS_BLOCK_GROUP_DUP, 0), 114294784);
	assert_int_equal(ub_mkfs_min_dev_size(0, 0), 47185920);
	assert_int_equal(ub_mkfs_min_dev_size(BTRFS_BLOCK_GROUP_RAID1, 0), 72351744);
	assert_int_equal(ub_mkfs_min_dev_size(BTRFS_BLOCK_GROUP_RAID1, BTRFS_BLOCK_GROUP_RAID1), 131072000);
	assert_int_equal(ub_mkfs_min_dev_size(BTRFS_BLOCK_GROUP_DUP, BTRFS_BLOCK_GROUP_DUP), 240123904);
	assert_int_equal(ub_mkfs_min_dev_size(BTRFS_BLOCK_GROUP_RAID10, BTRFS_BLOCK_GROUP_RAID6), 131072000);
}

static void refusals_write_nothing(void **state)
{
	const uint64_t size = 160 * MiB;
	uint8_t *bufs[2];
	struct ub_dev *devs[2];
	struct ub_mkfs_opts o;

	(void)state;
	for (int i = 0; i < 2; i++)
		assert_non_null(bufs[i] = calloc(1, size));

	ub_mkfs_opts_init(&o);
	o.meta_profile = BTRFS_BLOCK_GROUP_RAID1C3;
	open_mem(bufs, 2, size, devs);
	assert_int_equal(ub_mkfs(devs, 2, &o, &quiet, NULL), -EINVAL);
	ub_mkfs_opts_init(&o);
	o.nodesize = 12288;
	open_mem(bufs, 2, size, devs);
	assert_int_equal(ub_mkfs(devs, 2, &o, &quiet, NULL), -EINVAL);
	/* 100 MiB: below the 109 MiB DUP metadata needs */
	ub_mkfs_opts_init(&o);
	open_mem(bufs, 1, 100 * MiB, devs);
	assert_int_equal(ub_mkfs(devs, 1, &o, &quiet, NULL), -ENOSPC);
	for (int i = 0; i < 2; i++) {
		assert_true(all_zero(bufs[i], size));
		free(bufs[i]);
	}
}

static void made_and_read_back(void **state)
{
	const uint64_t size = 160 * MiB;
	uint8_t *bufs[3];
	struct ub_dev *devs[3];
	struct ub_mkfs_opts o;
	struct ub_mkfs_result res;
	struct ub_fs_opts fo = { .writable = false, .super_mirror = -1, .no_log = false };
	struct ub_fs *fs = NULL;
	struct ub_inode in;
	uint64_t subvol, ino;
	static const uint64_t trees[] = { BTRFS_EXTENT_TREE_OBJECTID, BTRFS_DEV_TREE_OBJECTID, BTRFS_FS_TREE_OBJECTID,
					  BTRFS_CSUM_TREE_OBJECTID, BTRFS_UUID_TREE_OBJECTID,
					  BTRFS_FREE_SPACE_TREE_OBJECTID, BTRFS_DATA_RELOC_TREE_OBJECTID };

	(void)state;
	for (int i = 0; i < 3; i++)
		assert_non_null(bufs[i] = calloc(1, size));
	ub_mkfs_opts_init(&o);
	o.data_profile = BTRFS_BLOCK_GROUP_RAID5;
	o.meta_profile = BTRFS_BLOCK_GROUP_RAID1C3;
	o.nodesize = 4096;
	o.csum_type = BTRFS_CSUM_TYPE_SHA256;
	strcpy(o.label, "unit");
	o.now = 1700000000;
	open_mem(bufs, 3, size, devs);
	assert_int_equal(ub_mkfs(devs, 3, &o, &quiet, &res), 0);
	assert_int_equal(res.meta_profile, BTRFS_BLOCK_GROUP_RAID1C3);
	assert_int_equal(res.total_bytes, 3 * size);

	for (int i = 0; i < 3; i++) {
		const uint8_t *sb = bufs[i] + UB_SUPER_INFO_OFFSET;

		assert_int_equal(UB_GET(ub_disk_super, magic, sb), UB_MAGIC);
		assert_int_equal(UB_GET(ub_disk_super, dev_item.devid, sb), (uint64_t)i + 1);
		assert_int_equal(UB_GET(ub_disk_super, num_devices, sb), 3);
		assert_int_equal(UB_GET(ub_disk_super, nodesize, sb), 4096);
		assert_true(UB_GET(ub_disk_super, incompat_flags, sb) & BTRFS_FEATURE_INCOMPAT_RAID56);
		assert_true(UB_GET(ub_disk_super, incompat_flags, sb) & BTRFS_FEATURE_INCOMPAT_RAID1C34);
		assert_string_equal((const char *)sb + offsetof(struct ub_disk_super, label), "unit");
		/* the second mirror at 64 MiB too */
		assert_int_equal(UB_GET(ub_disk_super, magic, bufs[i] + 64 * MiB), UB_MAGIC);
	}

	open_mem(bufs, 3, size, devs);
	assert_int_equal(ub_fs_open_devs(devs, 3, &fo, &quiet, &fs), 0);
	for (size_t t = 0; t < sizeof(trees) / sizeof(trees[0]); t++) {
		struct ub_root r;

		assert_int_equal(ub_fs_tree_root(fs, trees[t], &r), 0);
		assert_int_equal(r.level, 0);
		assert_int_equal(r.generation, 1);
	}
	assert_int_equal(ub_path_lookup(fs, "/", &subvol, &ino), 0);
	assert_int_equal(subvol, BTRFS_FS_TREE_OBJECTID);
	assert_int_equal(ino, BTRFS_FIRST_FREE_OBJECTID);
	assert_int_equal(ub_inode_read(fs, subvol, ino, &in), 0);
	assert_true(S_ISDIR(in.mode));
	assert_int_equal(in.nlink, 1);
	assert_int_equal(in.mtime.sec, 1700000000);
	ub_fs_close(fs);
	for (int i = 0; i < 3; i++)
		free(bufs[i]);
}

/* Whether an open of the devices finds a filesystem with this fsid. */
static bool opens_as(uint8_t *buf, uint64_t size, const uint8_t *fsid)
{
	struct ub_fs_opts fo = { .writable = false, .super_mirror = -1, .no_log = true };
	struct ub_fs *fs = NULL;
	struct ub_dev *dev;
	bool same;

	assert_int_equal(ub_dev_open_mem("crash", buf, size, false, &dev), 0);
	if (ub_fs_open_devs(&dev, 1, &fo, &quiet, &fs))
		return false;
	same = !memcmp(UB_PTR(ub_disk_super, fsid, ub_volume_super(ub_fs_volume(fs))), fsid, UB_FSID_SIZE);
	ub_fs_close(fs);
	return same;
}

/*
 * mkfs over an old btrfs, stopped just before its first superblock write (the
 * writes before it on disk; of those not flushed yet, none or all): the old
 * filesystem must not be readable any more, through its primary or its
 * mirror at 64 MiB, since the new trees have begun to overwrite its blocks.
 */
static void remade_over_old_stopped_before_supers(void **state)
{
	const uint64_t size = 120 * MiB;
	uint8_t *buf = calloc(1, size), *old = malloc(size), *crash = malloc(size), first[UB_FSID_SIZE];
	struct ub_rec_log *log;
	struct ub_dev *dev, *rec, *target;
	struct ub_mkfs_opts o;
	struct ub_rec_entry e;
	uint64_t k, n;

	(void)state;
	assert_non_null(buf);
	assert_non_null(old);
	assert_non_null(crash);
	/* laid out otherwise than the new one, so that its trees survive the new one's first writes */
	ub_mkfs_opts_init(&o);
	o.meta_profile = 0; /* single */
	o.data_profile = 0;
	o.nodesize = 4096;
	o.fsid_given = true;
	memset(o.fsid, 0x11, sizeof(o.fsid));
	memcpy(first, o.fsid, sizeof(first));
	open_mem(&buf, 1, size, &dev);
	assert_int_equal(ub_mkfs(&dev, 1, &o, &quiet, NULL), 0);
	assert_int_equal(UB_GET(ub_disk_super, magic, buf + 64 * MiB), UB_MAGIC);
	assert_true(opens_as(buf, size, first));
	memcpy(old, buf, size);

	ub_mkfs_opts_init(&o);
	o.fsid_given = true;
	memset(o.fsid, 0x22, sizeof(o.fsid));
	assert_int_equal(ub_rec_log_new(&log), 0);
	open_mem(&buf, 1, size, &dev);
	assert_int_equal(ub_dev_open_recorder(dev, log, 0, &rec), 0);
	assert_int_equal(ub_mkfs(&rec, 1, &o, &quiet, NULL), 0);
	n = ub_rec_log_count(log);
	for (k = 0; k < n; k++) {
		assert_int_equal(ub_rec_log_entry(log, k, &e), 0);
		if (e.kind == UB_REC_WRITE && e.len >= UB_SUPER_INFO_SIZE && UB_GET(ub_disk_super, magic, e.data) == UB_MAGIC)
			break;
	}
	assert_true(k < n);
	for (uint64_t seed = 0; seed < 2; seed++) {
		memcpy(crash, old, size);
		assert_int_equal(ub_dev_open_mem("crash", crash, size, true, &target), 0);
		if (seed == 0)
			assert_int_equal(ub_rec_log_apply_variant(log, k, 0, &target, 1), 0);
		else
			assert_int_equal(ub_rec_log_apply(log, k, &target, 1), 0);
		ub_dev_close(target);
		assert_false(opens_as(crash, size, first));
		/* nor does any copy name it: probers and btrfs rescue super-recover look at each */
		for (int c = 0; c < UB_SUPER_MIRROR_MAX; c++)
			if (ub_super_offset(c) + UB_SUPER_INFO_SIZE <= size)
				assert_false(UB_GET(ub_disk_super, magic, crash + ub_super_offset(c)) == UB_MAGIC &&
					     !memcmp(crash + ub_super_offset(c) + offsetof(struct ub_disk_super, fsid), first,
						     UB_FSID_SIZE));
	}
	ub_rec_log_put(log);
	free(buf);
	free(old);
	free(crash);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(leaf_builder_rules),
		cmocka_unit_test(option_names),
		cmocka_unit_test(compress_names),
		cmocka_unit_test(min_sizes),
		cmocka_unit_test(refusals_write_nothing),
		cmocka_unit_test(made_and_read_back),
		cmocka_unit_test(remade_over_old_stopped_before_supers),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
