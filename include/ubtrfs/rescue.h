/* SPDX-License-Identifier: MIT */
/*
 * Library API: the rescue operations (`ubtrfs rescue`, btrfs rescue's
 * names): superblock copies rewritten from the newest good one, the fsync
 * log dropped, device sizes fixed. Each writes through the devices it is
 * given, so a caller that wraps them in undo devices (ubtrfs/undo.h) can
 * put everything back. docs/rescue.md says what each changes.
 */
#ifndef UBTRFS_RESCUE_H
#define UBTRFS_RESCUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "ubtrfs/dev.h"
#include "ubtrfs/format.h"
#include "ubtrfs/log.h"
#include "ubtrfs/api.h"

UB_API_BEGIN

/*
 * 0 when no mount holds any of the paths: the kernel's (also through a loop
 * device over an image file, or as a member of a mounted multi-device btrfs)
 * or a ubtrfs (FUSE) mount. -EBUSY with the reason in `why`.
 */
int ub_rescue_check_unmounted(const char *const *paths, int npaths, char *why, size_t whylen);

/* ---- superblock copies (lib/rescue/super.c) ---- */

enum ub_sb_state {
	UB_SB_GOOD,   /* valid, at the newest generation */
	UB_SB_STALE,  /* valid, older */
	UB_SB_BAD,    /* not a valid superblock (why says what failed) */
	UB_SB_ABSENT, /* past the device's end: btrfs keeps no copy there */
};

struct ub_sb_copy {
	enum ub_sb_state state;
	uint64_t bytenr, generation; /* generation: of a valid copy */
	char why[160];
};

struct ub_sb_dev {
	char *path;
	uint64_t devid;              /* from its newest valid copy; 0 when it has none */
	bool foreign;                /* its valid copies belong to another filesystem */
	struct ub_sb_copy copy[UB_SUPER_MIRROR_MAX];
};

struct ub_sb_survey {
	int ndevs;
	struct ub_sb_dev *dev;
	uint64_t generation;         /* the newest valid copy's, 0 when none is valid */
	int best_dev, best_mirror;   /* where it is */
	uint8_t fsid[UB_FSID_SIZE];
	int to_rewrite;              /* BAD or STALE copies of devices that have a valid one */
	int unrecoverable;           /* devices with no valid copy, or of another filesystem */
	uint8_t best[UB_SUPER_INFO_SIZE];
};

/* Every superblock copy of every device, read raw (nothing written; the devices stay the caller's). */
int ub_rescue_super_survey(struct ub_dev *const *devs, int ndevs, const struct ub_log *log, struct ub_sb_survey *out);
void ub_sb_survey_free(struct ub_sb_survey *s);
/*
 * Survey, then rewrite every BAD or STALE copy from the newest valid one
 * (each device's own dev item, its bytenr, the checksum recomputed), flushed.
 * The devices are taken over (closed before return). *rewritten counts the
 * copies written; `out` (may be NULL) gets the survey made before writing.
 * -ENOENT when no copy is valid anywhere.
 */
int ub_rescue_super_recover(struct ub_dev *const *devs, int ndevs, const struct ub_log *log, struct ub_sb_survey *out,
			    int *rewritten);

/* ---- the fsync log (lib/rescue/zero_log.c) ---- */

struct ub_log_inode {
	uint64_t subvol, ino;
};

struct ub_log_survey {
	uint64_t generation;         /* the superblock's (the last commit) */
	uint64_t log_root;           /* 0: no log */
	unsigned log_level;
	uint64_t log_generation;     /* the log root block's, 0 when it cannot be read */
	bool replayable;             /* the log reads and replays */
	size_t ninodes;              /* the inodes it logged, by (subvolume, inode) */
	struct ub_log_inode *inodes;
};

/* What the log holds, read-only (the devices are opened read-only by path). */
int ub_rescue_log_survey(const char *const *paths, int npaths, const struct ub_log *log, struct ub_log_survey *out);
void ub_log_survey_free(struct ub_log_survey *s);
/*
 * log_root, log_root_level (and the unused log_root_transid) cleared in every
 * superblock copy of every device, flushed; the devices are taken over.
 * *old_root (may be NULL) gets the log root it dropped; 0 with nothing
 * written when there was none.
 */
int ub_rescue_zero_log(struct ub_dev *const *devs, int ndevs, const struct ub_log *log, uint64_t *old_root);

/* ---- device sizes (lib/rescue/device_size.c) ---- */

struct ub_devsize_fix {
	uint64_t devid;
	uint64_t old_bytes, new_bytes; /* the dev item's total_bytes before and after */
	uint64_t dev_bytes;            /* the device's real size (0: missing) */
	uint64_t extents_end;          /* where its last device extent ends */
	bool held;                     /* above the real size, but device extents lie past it: left */
};

struct ub_devsize_result {
	int ndevs;
	struct ub_devsize_fix *dev;
	uint64_t old_total, new_total; /* the superblock's total_bytes */
	bool changed;
};

/*
 * Each device item's total_bytes rounded down to the sector size and, where
 * no device extent lies past it, to the device's real size; the superblock's
 * total_bytes the sum. One transaction through the write engine (a pending
 * fsync log is refused: -EOPNOTSUPP), committed when anything changed. The
 * devices are taken over.
 */
int ub_rescue_fix_device_size(struct ub_dev *const *devs, int ndevs, const struct ub_log *log,
			      struct ub_devsize_result *out);
void ub_devsize_result_free(struct ub_devsize_result *r);

/* ---- the chunk tree (lib/rescue/chunk_recover.c) ---- */

/*
 * When the chunk tree cannot be read: the chunk map rebuilt as a read-only
 * open with rescue_chunks rebuilds it (from `paths`, opened read-only), then
 * written as a new one-leaf chunk tree in place of the old root through
 * `devs` (the same devices, taken over). *nchunks: the chunk items written,
 * 0 when the chunk tree reads and nothing was written. -EOPNOTSUPP for a
 * chunk tree of several levels, -EFBIG when the items do not fit a leaf.
 */
int ub_rescue_chunk_recover(const char *const *paths, int npaths, struct ub_dev *const *devs, int ndevs,
			    const struct ub_log *log, int *nchunks);

UB_API_END

#endif
