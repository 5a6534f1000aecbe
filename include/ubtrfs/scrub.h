/* SPDX-License-Identifier: MIT */
/*
 * Scrub: every stored copy of every allocated tree block and data sector read
 * from the devices and verified (tree blocks against their checksum and
 * header, data against the checksum tree, data without checksums compared
 * across its copies), RAID5/6 parity compared with the data of every row
 * that holds live data, and what is bad rewritten in place from what is
 * proven good. Device error counters (the device tree's DEV_STATS items,
 * as the kernel keeps them) are read and updated here too.
 *
 * Use: open the filesystem (ub_fs_open for a read-only scrub, the write
 * engine for one that repairs), ub_scrub_new, ub_scrub_run (blocks; one
 * thread per device inside), from any other thread ub_scrub_progress and
 * ub_scrub_cancel, then ub_scrub_free. docs/scrub.md says what is checked,
 * what is repaired and when.
 */
#ifndef UBTRFS_SCRUB_H
#define UBTRFS_SCRUB_H

#include <stdbool.h>
#include <stdint.h>
#include "ubtrfs/fs.h"
#include "ubtrfs/api.h"

UB_API_BEGIN

struct ub_engine;
struct ub_scrub;

/* What was wrong with a copy. */
enum ub_scrub_kind {
	UB_SCRUB_READ_ERROR = 0, /* the device failed the read */
	UB_SCRUB_CSUM,           /* a data sector does not match its checksum */
	UB_SCRUB_META_CSUM,      /* a tree block does not match its checksum */
	UB_SCRUB_META_HEADER,    /* a tree block's header names another block (bytenr, fsid, chunk tree, level) */
	UB_SCRUB_META_GENERATION, /* a tree block's generation is not its extent item's */
	UB_SCRUB_NOCSUM_MISMATCH, /* the copies of data without checksums differ: which one is right is unknown */
	UB_SCRUB_PARITY,         /* RAID5/6: P or Q does not match the row's data */
	UB_SCRUB_SUPER,          /* a superblock copy is invalid or of another generation */
	UB_SCRUB_NKINDS
};
/* "read error", "checksum", "tree block checksum", "tree block header", ... */
const char *ub_scrub_kind_name(enum ub_scrub_kind k);

/* What became of it. */
enum ub_scrub_outcome {
	UB_SCRUB_REPAIRED = 0,   /* rewritten in place from a proven good copy (or recomputed parity) */
	UB_SCRUB_UNREPAIRABLE,   /* nothing good is certain: left as it is */
	UB_SCRUB_NOT_REPAIRED,   /* a read-only scrub: repairable, left as it is */
	UB_SCRUB_SKIPPED,        /* changed since it was read (a live filesystem): left to the writer */
};
/* "repaired", "unrepairable", "not repaired (read-only)", "skipped (changed since read)" */
const char *ub_scrub_outcome_name(enum ub_scrub_outcome o);

/* A file that references a bad data sector. */
struct ub_scrub_owner {
	uint64_t subvol, ino;
	uint64_t offset;       /* file offset of the sector (of the extent's file range when compressed) */
	uint64_t length;       /* bytes of the file the bad sector stands for (a whole compressed range) */
	bool compressed;
	const char *path;      /* inside its subvolume, "/" first; NULL if no name leads there */
};

/* One problem. Valid during the callback only. */
struct ub_scrub_problem {
	enum ub_scrub_kind kind;
	enum ub_scrub_outcome outcome;
	bool metadata;           /* a tree block (else data, parity or a superblock) */
	uint64_t devid;
	const char *dev_path;    /* NULL when unknown */
	uint64_t physical;       /* on that device */
	uint64_t logical;        /* 0 for a superblock */
	uint64_t length;         /* bytes of the copy the line is about */
	int mirror;              /* the copy (1..): 0 for parity and superblocks */
	int parity;              /* UB_SCRUB_PARITY: 0 P, 1 Q */
	uint64_t tree;           /* tree blocks: the tree that references it (0 unknown) */
	int level;               /* tree blocks: the extent item's level (-1 unknown) */
	const char *detail;      /* what exactly was wrong ("checksum ... expected ...") */
	/* ---- data: every file that references the sector, up to the scrub's max_owners ---- */
	const struct ub_scrub_owner *owners;
	int nowners;
	bool more_owners;        /* there are more than max_owners */
};

struct ub_scrub_sink {
	/* every problem, one call each, from the device threads (serialized) */
	void (*problem)(void *arg, const struct ub_scrub_problem *p);
	void *arg;
};

struct ub_scrub_opts {
	bool readonly;           /* report only (also when opened with an engine) */
	uint64_t limit;          /* bytes per second each device is read at, at most; 0: no limit */
	/* the devices to scrub (present ones; a missing one is said and left out); NULL: every present device */
	const uint64_t *devids;
	int ndevids;
	/* per entry of devids (or per devid - 1 without devids, ndevids entries): physical to start at (resume) */
	const uint64_t *start;
	int max_owners;          /* files named per data problem; 0: 32 */
};

/* A device's counts so far (the kernel's struct btrfs_scrub_progress, and parity). */
struct ub_scrub_dev_progress {
	uint64_t devid;
	bool running, finished, canceled;
	uint64_t bytes_to_scrub;       /* the device's allocated bytes (its device extents) */
	uint64_t last_physical;        /* done up to here: a resume starts here */
	uint64_t data_extents_scrubbed, tree_extents_scrubbed;
	uint64_t data_bytes_scrubbed, tree_bytes_scrubbed;
	uint64_t read_errors, csum_errors, verify_errors, super_errors;
	uint64_t no_csum;              /* data sectors without checksums */
	uint64_t generation_errors;    /* tree blocks of another generation */
	uint64_t corrected_errors, uncorrectable_errors, unverified_errors;
	uint64_t parity_rows_checked, parity_errors, parity_fixed;
	uint64_t malloc_errors;
};

/*
 * A scrub of `fs` (opened read-only, or the write engine's filesystem with
 * `e` set: then repairs go through e's writer lock and reads are pinned to
 * one commit, so it runs beside writers). Without `e` and without
 * opts->readonly the filesystem's volume must be writable (ub_fs_opts.writable).
 * 0, -EINVAL, -ENODEV (none of the devids present), -ENOMEM.
 */
int ub_scrub_new(struct ub_fs *fs, struct ub_engine *e, const struct ub_scrub_opts *opts,
		 const struct ub_scrub_sink *sink, struct ub_scrub **out);
/*
 * Scrub: returns when every device is done or the scrub was cancelled. 0
 * (problems or not: see the progress), -ECANCELED, or <0 when it could not run
 * (the filesystem's trees unreadable; a failed repair write: -EROFS from then on).
 */
int ub_scrub_run(struct ub_scrub *s);
/* Any thread: the run stops soon, every device at a point ub_scrub_progress's last_physical names. */
void ub_scrub_cancel(struct ub_scrub *s);
/* Any thread: the counts of device `devid` (0, or -ENOENT when it is not scrubbed). */
int ub_scrub_progress(struct ub_scrub *s, uint64_t devid, struct ub_scrub_dev_progress *out);
/* The devids being scrubbed, in order (up to max; the count is returned). */
int ub_scrub_devids(struct ub_scrub *s, uint64_t *devids, int max);
void ub_scrub_free(struct ub_scrub *s);

/* ---- device error counters (the device tree's DEV_STATS items) ---- */

/* The kernel's order: BTRFS_DEV_STAT_WRITE_ERRS, READ_ERRS, FLUSH_ERRS, CORRUPTION_ERRS, GENERATION_ERRS. */
#define UB_DEV_STAT_COUNT 5
/* "write_io_errs", "read_io_errs", "flush_io_errs", "corruption_errs", "generation_errs" */
const char *ub_dev_stat_name(int i);
/* The counters of device `devid` as the last commit holds them (no item: zeros). 0 or <0. */
int ub_dev_stats_read(struct ub_fs *fs, uint64_t devid, uint64_t values[UB_DEV_STAT_COUNT]);
/*
 * In the engine's running transaction (written by the next commit, as the
 * kernel writes them at a commit): device devid's counters set to zero when
 * `reset`, then `add` added (NULL: nothing). 0 or <0.
 */
int ub_dev_stats_update(struct ub_engine *e, uint64_t devid, const uint64_t add[UB_DEV_STAT_COUNT], bool reset);
/* What a scrub counted for device devid, in the counters' order (read, corruption, generation errors). */
int ub_scrub_dev_stats(struct ub_scrub *s, uint64_t devid, uint64_t values[UB_DEV_STAT_COUNT]);

UB_API_END

#endif
