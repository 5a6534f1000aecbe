/* SPDX-License-Identifier: MIT */
/*
 * Device assembly by superblock generation (lib/volume/volume.c): a device
 * one commit behind the others, which a crash between the superblock writes
 * of a commit leaves, is used; one further behind is stale and left out; of
 * two copies of one devid the current one wins. Images: mkfs.btrfs, three
 * devices, RAID1; the generations are patched into every superblock copy.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ubtrfs/format.h"
#include "ubtrfs/volume.h"
#include "volume/volume_priv.h"
#include "scratch.h"

static char g_dir[64];
static bool g_have;
static char g_img3[3][160], g_old[160];
static uint64_t g_gen;
static const struct ub_log quiet = { .verbosity = -1 };

static int teardown_all(void **state)
{
	(void)state;
	sh("rm -rf %s", g_dir);
	return 0;
}

static int setup_all(void **state)
{
	(void)state;
	if (scratch_dir("assembly", g_dir, sizeof(g_dir)))
		return -1;
	for (int d = 0; d < 3; d++)
		snprintf(g_img3[d], sizeof(g_img3[d]), "%s/d%d", g_dir, d);
	snprintf(g_old, sizeof(g_old), "%s/old", g_dir);
	g_have = have_mkfs_btrfs() &&
		 sh("truncate -s 256M %s %s %s && mkfs.btrfs -q -f -m raid1 -d raid1 %s %s %s >/dev/null 2>&1",
		    g_img3[0], g_img3[1], g_img3[2], g_img3[0], g_img3[1], g_img3[2]) == 0;
	return 0;
}

/* Set the generation of every superblock copy of `path` to gen (checksum recomputed); the old one. */
static uint64_t patch_generation(const char *path, uint64_t gen)
{
	uint8_t sb[UB_SUPER_INFO_SIZE], csum[UB_CSUM_SIZE_MAX];
	uint64_t old = 0;
	FILE *f = fopen(path, "r+b");

	assert_non_null(f);
	for (int m = 0; m < 2; m++) {
		assert_int_equal(fseeko(f, (off_t)ub_super_offset(m), SEEK_SET), 0);
		assert_int_equal(fread(sb, 1, sizeof(sb), f), sizeof(sb));
		old = UB_GET(ub_disk_super, generation, sb);
		UB_SET(ub_disk_super, generation, sb, gen);
		memset(csum, 0, sizeof(csum));
		assert_int_equal(ub_csum(BTRFS_CSUM_TYPE_CRC32, sb + UB_CSUM_SIZE_MAX, sizeof(sb) - UB_CSUM_SIZE_MAX, csum), 0);
		memcpy(sb, csum, UB_CSUM_SIZE_MAX);
		assert_int_equal(fseeko(f, (off_t)ub_super_offset(m), SEEK_SET), 0);
		assert_int_equal(fwrite(sb, 1, sizeof(sb), f), sizeof(sb));
	}
	assert_int_equal(fclose(f), 0);
	return old;
}

static const struct ub_vdev *vdev_of(const struct ub_volume *vol, uint64_t devid)
{
	for (int i = 0; i < vol->nvdevs; i++)
		if (vol->vdevs[i].devid == devid && !vol->vdevs[i].missing && vol->vdevs[i].dev)
			return &vol->vdevs[i];
	return NULL;
}

/* devid 2 (the second image) `behind` commits behind; optionally a copy of it given first. */
static struct ub_volume *open_with(uint64_t behind, bool old_copy_first)
{
	const char *paths[4];
	struct ub_volume *vol = NULL;
	int n = 0;

	g_gen = patch_generation(g_img3[0], 0);
	patch_generation(g_img3[0], g_gen);
	if (old_copy_first) {
		assert_int_equal(sh("cp --sparse=always %s %s", g_img3[1], g_old), 0);
		patch_generation(g_old, g_gen - behind);
		paths[n++] = g_old;
	} else {
		patch_generation(g_img3[1], g_gen - behind);
	}
	for (int d = 0; d < 3; d++)
		paths[n++] = g_img3[d];
	assert_int_equal(ub_volume_open(paths, n, NULL, &quiet, &vol), 0);
	if (!old_copy_first)
		patch_generation(g_img3[1], g_gen);
	return vol;
}

static void test_one_commit_behind_is_used(void **state)
{
	(void)state;
	if (!g_have)
		skip();
	struct ub_volume *vol = open_with(1, false);
	assert_true(vol->generation == g_gen);
	for (uint64_t devid = 1; devid <= 3; devid++)
		assert_non_null(vdev_of(vol, devid));
	assert_true(vdev_of(vol, 2)->generation == g_gen - 1);
	ub_volume_close(vol);
}

static void test_two_commits_behind_is_stale(void **state)
{
	(void)state;
	if (!g_have)
		skip();
	struct ub_volume *vol = open_with(2, false);
	assert_true(vol->generation == g_gen);
	assert_non_null(vdev_of(vol, 1));
	assert_null(vdev_of(vol, 2));
	assert_non_null(vdev_of(vol, 3));
	ub_volume_close(vol);
}

static void test_current_copy_wins(void **state)
{
	(void)state;
	if (!g_have)
		skip();
	/* the copy one commit behind comes first in the list: the current device of that devid is used */
	struct ub_volume *vol = open_with(1, true);
	assert_non_null(vdev_of(vol, 2));
	assert_true(vdev_of(vol, 2)->generation == g_gen);
	assert_string_equal(vdev_of(vol, 2)->dev->path, g_img3[1]);
	ub_volume_close(vol);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_one_commit_behind_is_used),
		cmocka_unit_test(test_two_commits_behind_is_stale),
		cmocka_unit_test(test_current_copy_wins),
	};
	return cmocka_run_group_tests(tests, setup_all, teardown_all);
}
