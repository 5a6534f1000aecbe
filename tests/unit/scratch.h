/* SPDX-License-Identifier: MIT */
/*
 * What the unit tests that work on real images share: a shell command, a
 * scratch folder under /tmp, and skipping when mkfs.btrfs is not installed.
 */
#ifndef UBTRFS_TESTS_SCRATCH_H
#define UBTRFS_TESTS_SCRATCH_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

/* Run a shell command built like printf; its exit status as system() gives it. */
static int __attribute__((format(printf, 1, 2), unused)) sh(const char *fmt, ...)
{
	char cmd[2048];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	return system(cmd);
}

/* A new folder /tmp/ub-TAG-XXXXXX into dir (size bytes): 0, -1. The tag tells which test left a leftover. */
static int __attribute__((unused)) scratch_dir(const char *tag, char *dir, size_t size)
{
	snprintf(dir, size, "/tmp/ub-%s-XXXXXX", tag);
	return mkdtemp(dir) ? 0 : -1;
}

static bool __attribute__((unused)) have_mkfs_btrfs(void)
{
	return sh("command -v mkfs.btrfs >/dev/null 2>&1") == 0;
}

/* Skip the current cmocka test when `have` (whether mkfs.btrfs made the images) is false. */
#define SKIP_WITHOUT_MKFS(have)                                             \
	do {                                                                \
		if (!(have)) {                                              \
			fprintf(stderr, "mkfs.btrfs not installed: skipped\n"); \
			skip();                                             \
		}                                                           \
	} while (0)

#endif
