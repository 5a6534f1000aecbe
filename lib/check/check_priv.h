/* SPDX-License-Identifier: MIT */
/* What the checker's passes share: the checker's state and how a problem is reported. */
#ifndef UBTRFS_CHECK_PRIV_H
#define UBTRFS_CHECK_PRIV_H

#include "ubtrfs/check.h"
#include "ubtrfs/devinfo.h"
#include "ubtrfs/fsinfo.h"

struct ub_checker {
	struct ub_chk_opts opts;
	struct ub_chk_sink sink;
	struct ub_chk_summary sum;
	/*
	 * While a pass reads (capturing), errors the library logs are kept here
	 * instead of becoming problems of their own: the pass reports them with
	 * the place it knows. Passes run on one thread.
	 */
	bool capturing;
	char last[512];
	unsigned nlogged;
	uint64_t super_generation; /* of the superblock in use, for the tree pass */
};

/* Report a problem; `fmt` makes its message. */
void chk_report(struct ub_checker *c, const struct ub_chk_problem *where, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Start keeping logged errors (clears what was kept). */
void chk_capture(struct ub_checker *c);
/* Stop keeping them; the last one kept (or "" if none). */
const char *chk_captured(struct ub_checker *c);
void chk_progress(struct ub_checker *c, const char *phase, uint64_t done, uint64_t total);

int chk_trees(struct ub_checker *c, struct ub_fs *fs);
int chk_chunks(struct ub_checker *c, struct ub_fs *fs);

#endif
