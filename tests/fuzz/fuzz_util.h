/* SPDX-License-Identifier: MIT */
/* What the superblock fuzzers share: a printer sink that only counts, and a quiet log. */
#ifndef UBTRFS_FUZZ_UTIL_H
#define UBTRFS_FUZZ_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ubtrfs/log.h"
#include "print.h"

/* Far more than any superblock can print; more means a runaway loop in the printer. */
#define FUZZ_PRINT_LIMIT (4U << 20)

static ssize_t fuzz_count_write(void *cookie, const char *buf, size_t len)
{
	size_t *total = cookie;

	(void)buf;
	*total += len;
	if (*total > FUZZ_PRINT_LIMIT)
		abort();
	return (ssize_t)len;
}

/* Log sink: the message must be a terminated string; strlen lets ASan check that. */
static inline void fuzz_quiet(void *arg, enum ub_log_level lvl, const char *msg)
{
	(void)lvl;
	*(size_t *)arg += strlen(msg);
}

/* Print a superblock into a sink that counts bytes, so the printer runs on every input. */
static inline void fuzz_print_super(const uint8_t *sb)
{
	cookie_io_functions_t io = { .write = fuzz_count_write };
	size_t total = 0;
	FILE *f = fopencookie(&total, "w", io);

	if (!f)
		return;
	ub_print_super(f, sb, true);
	fclose(f);
}

#endif
