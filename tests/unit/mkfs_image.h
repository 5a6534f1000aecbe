/* SPDX-License-Identifier: MIT */
/*
 * One scratch image made by mkfs.btrfs (4 KiB nodes, 256 MiB) for a unit test
 * group, in its own /tmp folder removed at the end; g_have is false without
 * mkfs.btrfs, and the tests then skip.
 */
#ifndef UBTRFS_TESTS_MKFS_IMAGE_H
#define UBTRFS_TESTS_MKFS_IMAGE_H

#include "scratch.h"

static char g_dir[64], g_img[128];
static bool g_have;

/* `tag` names the folder (/tmp/ub-TAG-XXXXXX) so a leftover tells which test left it. */
static int mkfs_image_setup(const char *tag)
{
	if (scratch_dir(tag, g_dir, sizeof(g_dir)))
		return -1;
	snprintf(g_img, sizeof(g_img), "%s/img", g_dir);
	g_have = have_mkfs_btrfs() &&
		 sh("truncate -s 256M %s && mkfs.btrfs -q -f -n 4096 %s >/dev/null 2>&1", g_img, g_img) == 0;
	return 0;
}

static int teardown_all(void **state)
{
	(void)state;
	if (!getenv("UBTRFS_KEEP_IMAGES"))
		sh("rm -rf %s", g_dir);
	return 0;
}

/* btrfs check's verdict on another image: 0 when it finds no error. */
static int __attribute__((unused)) mkfs_image_check_path(const char *img)
{
	if (sh("btrfs check --readonly %s >%s/check.log 2>&1", img, g_dir) ||
	    sh("grep -q 'no error found' %s/check.log", g_dir)) {
		sh("tail -n 40 %s/check.log >&2", g_dir);
		return -1;
	}
	return 0;
}

/* btrfs check's verdict on the image: 0 when it finds no error. */
static int mkfs_image_check(void)
{
	if (sh("btrfs check --readonly %s >%s/check.log 2>&1", g_img, g_dir) ||
	    sh("grep -q 'no error found' %s/check.log", g_dir)) {
		sh("tail -n 40 %s/check.log >&2", g_dir); /* what btrfs check found, for the failure's log */
		return -1;
	}
	return 0;
}

#endif
