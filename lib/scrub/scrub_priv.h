/* SPDX-License-Identifier: MIT */
/*
 * Scrub's insides (lib/scrub), shared by its files only.
 *
 * The work is split by device, as the kernel's scrub splits it: one thread
 * per device walks that device's device extents (the chunks' stripes on it)
 * in physical order, so a resume point is one physical offset per device.
 *  - copies.c: mirrored, RAID0 and RAID10 stripes, window by window: the
 *    copy on this device of every allocated tree block and data sector in
 *    the window, read in runs, verified; a bad one is looked at again with
 *    the other copies (repair.c decides and writes).
 *  - parity.c: RAID5/6 full stripes, each one by a single device's thread
 *    (the first of P, Q, data 0, data 1... that is scrubbed): every strip of
 *    the rows holding live data, data verified and rebuilt, P and Q
 *    compared and recomputed.
 *  - collect.c: what the pinned commit says lies in a logical range (extent
 *    items, checksums), verify.c: one copy of one block or sector judged,
 *    owners.c: the files of a data sector, super.c: superblock copies,
 *    devstats.c: DEV_STATS items.
 */
#ifndef UBTRFS_SCRUB_PRIV_H
#define UBTRFS_SCRUB_PRIV_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "fs/fs_priv.h"
#include "tree/tree_priv.h"
#include "volume/volume_priv.h"
#include "ubtrfs/scrub.h"

struct ub_engine;

/* An allocated extent as the pinned commit's extent tree has it. */
struct sx_extent {
	uint64_t bytenr, len;
	uint64_t gen;       /* the extent item's generation */
	uint64_t tree;      /* tree blocks: the first TREE_BLOCK_REF's root (0 unknown or shared) */
	int level;          /* tree blocks: -1 unknown */
	uint8_t key_type;   /* EXTENT_ITEM or METADATA_ITEM */
	uint64_t key_offset;
	bool meta;
};

/* What is to be verified: one tree block or one data sector, and what became of its copy here. */
enum sx_kind { SX_META = 0, SX_DATA, SX_NOCSUM };
enum sx_state { SX_UNREAD = 0, SX_GOOD, SX_BAD, SX_REPAIRED, SX_UNREPAIRABLE, SX_UNKNOWN };
struct sx_unit {
	uint64_t logical;
	uint32_t len;
	uint8_t kind;       /* enum sx_kind */
	uint8_t state;      /* enum sx_state */
	uint8_t bad_kind;   /* enum ub_scrub_kind, when SX_BAD */
	int ext;            /* index into the thread's extents */
	uint32_t csum;      /* SX_DATA: index of its sector in the csum table */
	size_t off;         /* where its bytes are in the caller's buffer */
	int slot, row;      /* RAID5/6: data slot and first sector row */
	bool crosses;       /* a tree block this device's piece does not hold whole */
	char why[120];      /* SX_BAD: what the verification said (parity.c) */
};

/* One device being scrubbed. */
struct sx_dev {
	struct ub_scrub *s;
	uint64_t devid;
	struct ub_vdev *vd;
	const char *path;
	uint64_t start;            /* resume: physical to start at */
	pthread_t thread;
	bool started;
	int error;                 /* a fatal error of its thread */
	struct ub_scrub_dev_progress prog; /* under the scrub's lock */
	uint64_t stats[UB_DEV_STAT_COUNT]; /* counted device errors (under the lock) */
};

struct ub_scrub {
	struct ub_fs *fs;        /* the filesystem (its base) */
	struct ub_fs *view;      /* a pinned view (engine) or fs itself */
	bool own_view;
	struct ub_engine *e;
	struct ub_volume *vol;
	struct ub_tree_ctx *tc;
	struct ub_log log;
	struct ub_scrub_opts opts;
	struct ub_scrub_sink sink;
	uint32_t ss, ns;         /* sector size, node size */
	unsigned csum_type, csum_size;
	struct ub_root extent_root, csum_root, root_root;
	bool have_csum_root;
	struct sx_dev *devs;
	int ndevs;
	/* the chunks (copied at start; the volume frees none before close) */
	const struct ub_chunk **chunks;
	int nchunks;
	atomic_bool cancel;
	int fatal;               /* first fatal error (under lock) */
	pthread_mutex_t lock;    /* progress, counters (never held while calling out) */
	pthread_mutex_t sink_lock; /* one problem at a time to the sink */
	/* subvolume ids of the pinned commit (owners.c), loaded on first use under lock */
	uint64_t *subvols;
	int nsubvols;
	bool subvols_loaded;
	bool supers_bad;         /* a superblock copy to write again (the closing commit) */
	bool wrote;              /* some repair was written: flush at the end */
};

/* A device thread's working memory. */
struct sx_thread {
	struct ub_scrub *s;
	struct sx_dev *d;
	struct ub_path path;
	struct sx_extent *ext;
	size_t next, ext_cap;
	uint8_t *csum, *have;    /* the checksum table of the range collected: csum_size bytes and a flag per sector */
	uint64_t csum_lo;        /* its first sector's logical */
	size_t csum_n, csum_cap; /* sectors in it, room for */
	struct sx_unit *units;
	size_t nunits, units_cap;
	uint8_t *buf;            /* the window's bytes (64-byte aligned) */
	size_t buf_cap;
	uint8_t *tmp;            /* another copy, a rebuild (aligned) */
	size_t tmp_cap;
	/* --limit: when this thread started reading, and what it has read */
	struct timespec t0;
	uint64_t bytes_read;
	struct ub_scrub_dev_progress acc; /* counts not yet in d->prog */
};

/* ---- collect.c ---- */
/* Every extent item overlapping [lo, hi) into t->ext (sorted). 0 or <0. */
int sx_collect_extents(struct sx_thread *t, uint64_t lo, uint64_t hi);
/* The checksums of [lo, hi) (sector aligned) into t->csum / t->have, sector i at lo + i * ss. */
int sx_collect_csums(struct sx_thread *t, uint64_t lo, uint64_t hi);
/*
 * The units of [lo, hi) from t->ext and the csum table (which must cover the
 * range), appended to t->units with off = base_off + (logical - lo); a tree
 * block starting in the range but reaching past `hi` is marked crosses.
 */
int sx_units_of(struct sx_thread *t, uint64_t lo, uint64_t hi, size_t base_off);
int sx_reserve(void **v, size_t *cap, size_t n, size_t size);
/* t->buf / t->tmp of at least n bytes. */
int sx_buf(struct sx_thread *t, size_t n);
int sx_tmp(struct sx_thread *t, size_t n);

/* ---- verify.c ---- */
/*
 * One copy of unit u (`len` bytes at `buf`): 0 good, else the kind of
 * problem (enum ub_scrub_kind + 1) with a description in why.
 */
int sx_verify(struct sx_thread *t, const struct sx_unit *u, const uint8_t *buf, char *why, size_t whylen);

/* ---- scrub.c ---- */
/* Read `len` bytes at `phys` of device vd: 0, or <0 (a failing read is retried sector by sector by the caller). */
int sx_dev_read(struct sx_thread *t, struct ub_vdev *vd, void *buf, size_t len, uint64_t phys);
/* A problem to the sink and the device's counts. */
void sx_report(struct sx_thread *t, struct sx_dev *d, struct ub_scrub_problem *p, const struct sx_unit *u);
/* The scrub's device entry for devid, or NULL when that device is not scrubbed. */
struct sx_dev *sx_dev_of(struct ub_scrub *s, uint64_t devid);
bool sx_cancelled(const struct ub_scrub *s);
/* counts of this thread's device, added to its progress by sx_progress_at */
#define SX_COUNT(t, field, n) ((t)->acc.field += (n))
/* The counts so far into the device's progress, done up to `physical`. */
void sx_progress_at(struct sx_thread *t, uint64_t physical);
/* --limit: sleep as long as this thread is ahead of the rate */
void sx_throttle(struct sx_thread *t);
/* Where a repair may write: the writer lock held (engine), the extent still allocated as read. */
int sx_repair_lock(struct ub_scrub *s);
void sx_repair_unlock(struct ub_scrub *s);
bool sx_extent_unchanged(struct sx_thread *t, const struct sx_extent *x);
/* Rewrite after checks; counts a failure as fatal. 0 or <0. */
int sx_rewrite(struct sx_thread *t, const struct ub_chunk *c, int stripe, uint64_t phys, uint64_t len, const void *buf);

/* ---- copies.c, parity.c: one device extent ---- */
int sx_scrub_copies(struct sx_thread *t, const struct ub_chunk *c, int stripe);
int sx_scrub_parity(struct sx_thread *t, const struct ub_chunk *c, int stripe);

/* ---- owners.c ---- */
/* The files of the data sector at `logical` (extent x): an array (caller frees with sx_owners_free). */
int sx_owners(struct sx_thread *t, const struct sx_extent *x, uint64_t logical, struct ub_scrub_owner **out,
	      int *n, bool *more);
void sx_owners_free(struct ub_scrub_owner *o, int n);

/* ---- super.c ---- */
int sx_scrub_supers(struct sx_thread *t);

/* ---- devstats.c ---- */
void sx_stat_add(struct ub_scrub *s, struct sx_dev *d, int stat, uint64_t n);

#endif
