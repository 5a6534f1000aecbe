/* SPDX-License-Identifier: MIT */
/*
 * Library API: repair (lib/repair/, docs/check.md "Repair").
 *
 * A repair cures the problems a check found, only through copy-on-write
 * transactions of the write engine: everything the superblocks of before the
 * repair reach stays on disk until the repair's one commit, so an interruption
 * leaves the old filesystem or the repaired one. With an undo file
 * (include/ubtrfs/undo.h) every byte the repair writes is saved first, so
 * `ubtrfs rescue undo` puts the devices back as they were.
 *
 * Use: ub_repair_new; run the checker (include/ubtrfs/check.h) on the
 * filesystem and hand each problem it reports to ub_repair_note (its `fix`
 * field says what the cure is); close that filesystem; ub_repair_run on the
 * device paths; then check again: what is left is what this repair cannot
 * cure.
 *
 * Threads: one repair at a time on a filesystem, with nothing else open on it.
 */
#ifndef UBTRFS_REPAIR_H
#define UBTRFS_REPAIR_H

#include <stdbool.h>
#include <stdint.h>
#include "ubtrfs/check.h"
#include "ubtrfs/dev.h"
#include "ubtrfs/log.h"
#include "ubtrfs/api.h"

UB_API_BEGIN

struct ub_repair;

/* One change the repair makes (or, dry run, would make). Valid during the callback only. */
struct ub_repair_change {
	enum ub_chk_fix fix; /* UB_CHK_FIX_NONE: a line of init_csum_tree's (a summary, or data it could not vouch for) */
	uint64_t tree;     /* the tree changed (a subvolume, the extent tree, the chunk tree...) */
	uint64_t inode;    /* fix on an inode: its number */
	uint64_t devid;    /* UB_CHK_FIX_DEV_USED: the device */
	uint64_t was;      /* the value before (0 when not one number) */
	uint64_t want;     /* the value after */
	const char *msg;   /* what it does, in words */
};

struct ub_repair_sink {
	void (*change)(void *arg, const struct ub_repair_change *c);
	void *arg;
};

struct ub_repair_opts {
	bool dry_run;          /* say each change, write nothing (the devices are opened read-only) */
	const char *undo_file; /* save every byte overwritten there first; NULL: no undo file */
	const struct ub_repair_sink *sink; /* may be NULL */
	/*
	 * Rebuild the checksum tree from the data (after the other cures, in the
	 * same transaction), also when nothing was noted: every copy of every
	 * sector a checksummed file extent references is read; an old checksum a
	 * copy verifies is kept, one no copy verifies is kept too (the sector
	 * stays unreadable rather than blessed); a sector without one gets one
	 * computed only when every readable copy agrees (docs/check.md, Repair).
	 */
	bool init_csum_tree;
	/*
	 * Rebuild the extent tree from the trees that exist (before the other
	 * cures, in the same transaction), also when nothing was noted: every
	 * tree block reachable from the root and chunk trees gets its metadata
	 * item and back references, every data extent its references counted
	 * from the file extent items, every block group its used bytes, the free
	 * space tree rewritten; the cures of the old extent tree's problems are
	 * left out (docs/check.md, Repair).
	 */
	bool init_extent_tree;
};

struct ub_repair_result {
	uint64_t noted;      /* problems handed to ub_repair_note */
	uint64_t curable;    /* of them, with a cure this repair has */
	uint64_t changes;    /* changes made (dry run: that would be made) */
	uint64_t generation; /* the repair's commit (0: nothing committed) */
	/*
	 * init_csum_tree: data sectors left unreadable or unverified (an old
	 * checksum no copy matches, or none given because copies differ or none
	 * reads), each stretch named through the sink
	 */
	uint64_t unverified;
};

int ub_repair_new(struct ub_repair **out);
void ub_repair_free(struct ub_repair *r);
/* A problem of the check before: kept when it has a cure (p->fix). -ENOMEM only. */
int ub_repair_note(struct ub_repair *r, const struct ub_chk_problem *p);
/*
 * Cure what was noted on the filesystem of `paths` (every device): one
 * transaction, committed. -EOPNOTSUPP (said through `log`) when the
 * filesystem cannot be opened for writing (a pending fsync log: mount it once
 * or `ubtrfs rescue zero-log`; a feature the engine does not write); -errno
 * on failure, with nothing of the repair committed.
 */
int ub_repair_run(struct ub_repair *r, const char *const *paths, int npaths, const struct ub_repair_opts *opts,
		  const struct ub_log *log, struct ub_repair_result *res);
/*
 * ub_repair_run on devices the caller opened for writing (every device of the
 * filesystem; taken over: closed before the return, also on failure), e.g.
 * wrapped in the caller's own undo devices or a crash test's recorders.
 * opts->undo_file must be NULL (-EINVAL): the caller wraps the devices in
 * ub_dev_open_undo and finishes the undo file after this returns.
 */
int ub_repair_run_devs(struct ub_repair *r, struct ub_dev *const *devs, int ndevs, const struct ub_repair_opts *opts,
		       const struct ub_log *log, struct ub_repair_result *res);

UB_API_END

#endif
