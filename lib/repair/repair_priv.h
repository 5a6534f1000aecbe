/* SPDX-License-Identifier: MIT */
/* Between the files of the repair (lib/repair/). */
#ifndef UBTRFS_REPAIR_PRIV_H
#define UBTRFS_REPAIR_PRIV_H

#include <stdarg.h>
#include <stdint.h>
#include "ubtrfs/repair.h"
#include "txn/txn.h"

/* One cure noted from the check (a problem's fix, where and to what). */
struct rp_note {
	enum ub_chk_fix fix;
	uint64_t tree, inode, devid, want;
};

struct ub_repair {
	struct rp_note *notes;
	size_t nnotes, cap;
	uint64_t noted;
};

/* One run: the notes, the engine and its transaction, where changes are said. */
struct rp_ctx {
	struct ub_repair *r;
	const struct ub_repair_opts *opts;
	const struct ub_log *log;
	struct ub_repair_result *res;
	struct ub_undo *undo;
	struct ub_engine *e;
	struct ub_txn *t;
	/* the devices (a dry run's --init-csum-tree opens them read-only itself) */
	const char *const *paths;
	int npaths;
};

/* A change made (or that would be): counted and handed to the caller's sink. */
void rp_say(struct rp_ctx *c, const struct rp_note *n, uint64_t was, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* devid's DEV_ITEM bytes_used (the chunk tree's and the superblocks' copies) becomes n->want. */
int rp_fix_dev_used(struct rp_ctx *c, const struct rp_note *n);
/*
 * --init-csum-tree (csum.c): the checksum tree rebuilt from every copy of the
 * data the file trees reference, in c->t (c->e NULL: a dry run, said only).
 */
int rp_init_csum_tree(struct rp_ctx *c);

#endif
