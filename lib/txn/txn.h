/* SPDX-License-Identifier: MIT */
/*
 * The writable filesystem handle and its transactions (library-internal).
 *
 * Ownership: a struct ub_engine is built on a struct ub_fs (e->fs: the
 * volume opened writable, the tree context, the table of root objects,
 * lib/tree/roots.h) and adds the allocator and the transaction. Root objects
 * live as long as the engine and never move, so paths and callers hold
 * pointers to their `root` member (the tree layer's copy-on-write updates it
 * in place); an aborted transaction puts every `root` back to `committed`,
 * and a tree born in it stays in the table, empty.
 *
 * Threads and failed commits: as include/ubtrfs/engine.h says. Readers in
 * other threads see the committed root of every tree, which the commit
 * publishes under the root table's mutex (roots.h states the rule).
 */
#ifndef UBTRFS_TXN_TXN_H
#define UBTRFS_TXN_TXN_H

#include <stdbool.h>
#include <stdint.h>
#include "tree/tree_priv.h"
#include "ubtrfs/volume.h"
#include "tree/tree_write.h"
#include "alloc/alloc.h"
#include "alloc/delayed_ref.h"
#include "alloc/chunk_alloc.h"
#include "txn/commit.h"
#include "tree/roots.h"
#include "fs/fs_priv.h"
#include "ubtrfs/engine.h" /* open, transactions, commit, close: the public part */

struct ub_engine {
	struct ub_fs fs;         /* volume (writable), tree context, root table: shared with the readers */
	struct ub_alloc *alloc;
	uint64_t incompat, compat_ro;
	/*
	 * Commits: the writer seals a transaction (its blocks and superblocks
	 * made final) under the writer lock, then writes it, mostly without the
	 * lock, while the next transaction goes on (txn.c). `sealed` is the
	 * newest transaction sealed (the writer's; the next one is sealed + 1);
	 * `generation` the newest whose superblocks are durable, what readers
	 * see (atomics: the committer sets it). Commits reach the disk in
	 * transaction order: commit_lock and commit_cond hand the turn on.
	 */
	uint64_t generation;
	uint64_t sealed;
	pthread_mutex_t commit_lock;
	pthread_cond_t commit_cond;
	uint64_t bytes_used;     /* the superblock's, kept as extents are accounted */
	struct ub_txn *running;
	int broken;              /* 0, or the error that made the engine read-only (atomics) */
	/* ---- a device replace under way (lib/fsw/device.c; atomics: cancel and progress come from other threads) ---- */
	int replace_cancel;      /* set by ub_engine_device_replace_cancel: the copy stops at its next step */
	uint64_t replace_done, replace_total; /* bytes of stripes copied, and to copy */
	/* ---- dirty budget (reserve.c) ---- */
	uint64_t dirty_budget;   /* 0: the default (UB_ENGINE_DIRTY_BUDGET, at most RAM / 8) */
	uint64_t ram_budget;     /* that default for this machine, found once at open (sysconf is a syscall) */
	uint64_t auto_commits;   /* commits ub_engine_begin_op made because the budget was passed */
	/* ---- cleaning after commits (cleaner.c) ---- */
	uint64_t clean_step;     /* tree blocks ub_engine_commit lets the cleaner drop after a commit; 0: off */
	bool dead_roots;         /* a deleted subvolume may still wait for its drop */
	bool cleaning;           /* inside ub_engine_clean: its own commits do not recurse */
	/* an inode that loses its last name stays, nlink 0 with an ORPHAN item, until ub_fsw_evict (fswrite.h) */
	bool keep_orphans;
	/* the largest file kept inline (the mount's max_inline; UB_FSW_MAX_INLINE_DEFAULT) */
	uint32_t max_inline;
	/*
	 * The next subvolume id at least (lib/fsw/subvol.c): above every subvolume
	 * deleted while the engine is open, as the kernel's in-memory counter, so
	 * a dropped subvolume's id is not handed out again during the session.
	 */
	uint64_t next_root_id;
	/* the fsync log trees of the running transaction (log_tree.h); NULL when it has none */
	struct ub_log_trees *log;
	/* what changed in each file during the running transaction (log_tree.h, ub_log_note) */
	struct ub_log_marks *marks;
	/* a repair (lib/repair): the next commit first drops free space tree items no block group owns */
	bool fst_strays;
	int repair_fixed_groups; /* UB_ENGINE_OPEN_REPAIR_SPACE: block groups whose used bytes were recounted */
	/* the next index of each directory an entry was added to (dir_index.c) */
	struct ub_dir_indexes *dir_indexes;
};

struct ub_txn {
	struct ub_engine *e;
	uint64_t transid;
	struct ub_tree_alloc ta;
	struct ub_dref_queue *refs;
	int error;               /* the first callback failure; the commit refuses then */
	uint64_t blocks_cowed, blocks_allocated, blocks_freed; /* statistics */
	bool log_replay; /* replaying an fsync log: root times stay (the kernel's LOG_RECOVERING) */
	bool owned;      /* made by ub_txn_start: its commit or abort gives back the writer lock that took */
};

/*
 * The root object of tree `objectid` in the table (loaded on first use from
 * its ROOT_ITEM in the live root tree): 0, -ENOENT (also for an empty tree), <0.
 */
int ub_engine_root(struct ub_engine *e, uint64_t objectid, struct ub_eroot **out);

/*
 * A tree created in the running transaction whose ROOT_ITEM (key offset
 * item_offset) the caller has just inserted with r's values: from now on the
 * commit keeps that item up to date. -EEXIST if the table has the tree (not empty).
 */
int ub_engine_add_root(struct ub_engine *e, const struct ub_root *r, uint64_t item_offset, uint64_t last_snapshot,
		       struct ub_eroot **out);

/*
 * Commit t, then go on with the same handle as the next transaction (the
 * cleaner's share of a commit runs in between, cleaner.h): for a call that
 * must commit in the middle of its caller's transaction (a snapshot,
 * lib/fsw/subvol.c). 0, or the commit's or the cleaner's error; then t
 * is still a handle to abort (a broken engine's refuses every commit).
 */
int ub_txn_commit_keep(struct ub_txn *t);

/* Start the running transaction for an operation that holds the writer lock already (not owned). */
int ub_txn_start_joined(struct ub_engine *e, struct ub_txn **out);
/* The end of an operation ub_engine_begin_op began: the writer lock it took goes back. */
void ub_engine_end_op(struct ub_engine *e);

/* The newest durable generation, and the error that broke the engine (0: none): any thread. */
static inline uint64_t ub_engine_generation(const struct ub_engine *e)
{
	return __atomic_load_n(&e->generation, __ATOMIC_ACQUIRE);
}
static inline int ub_engine_broken(const struct ub_engine *e)
{
	return __atomic_load_n(&e->broken, __ATOMIC_ACQUIRE);
}

/*
 * The index of a new entry of directory (subvol, dir): at least `floor` (what
 * the trees say is free), and never one this engine handed out before
 * (dir_index.c). Out of memory, `floor`.
 */
uint64_t ub_engine_dir_index(struct ub_engine *e, uint64_t subvol, uint64_t dir, uint64_t floor);
void ub_engine_dir_indexes_free(struct ub_engine *e);

/* What the tree layer's write calls take for this transaction. */
static inline struct ub_tree_alloc *ub_txn_ta(struct ub_txn *t) { return &t->ta; }

/* ---- space for operations (reserve.c): chunks added as the kernel would ---- */

/* The chunk allocator's view of the running transaction (valid until the next call or the commit). */
int ub_txn_chunk_ctx(struct ub_txn *t, struct ub_chunk_ctx *cc);
/* Data space of len bytes, adding a data chunk when the existing ones are full (ub_chunk_reserve_data). */
int ub_txn_reserve_data(struct ub_txn *t, uint64_t len, uint64_t hint, uint64_t *start);
/* Before an operation needing about op_bytes of new metadata: ub_chunk_prepare (0, -EAGAIN, -ENOSPC). */
int ub_txn_prepare(struct ub_txn *t, uint64_t op_bytes, int op);

/* ---- commit pieces (extent_tree.c, space.c, commit_super.c) ---- */

/* Apply every queued reference change to the extent tree, until the queue is empty. */
int ub_txn_run_refs(struct ub_txn *t);
/* BLOCK_GROUP_ITEMs and the free space tree for every changed block group. */
int ub_txn_write_space(struct ub_txn *t);

/* ---- operations that prepare and commit by themselves (reserve.c) ---- */

/*
 * Take the writer lock, join the running transaction (committed first when
 * its dirty memory has reached the budget, below) or start one, then
 * ub_txn_prepare(op_bytes, op); when that refuses while the transaction
 * holds changes, commit and ask once more from a fresh one. 0: *out is
 * e->running and the lock is held until ub_engine_end_op; -ENOSPC (fs
 * consistent, last commit on disk or the joined transaction untouched) or
 * another error, the lock given back.
 */
int ub_engine_begin_op(struct ub_engine *e, uint64_t op_bytes, int op, struct ub_txn **out);

/* ---- open flags: ubtrfs/engine.h (ub_engine_open_ex) ---- */
/*
 * The engine's half of an open (paths, or devs when paths is NULL): volume,
 * trees, features, allocator; a pending fsync log is left for the caller
 * (the writers' layer replays it, lib/fsw/open.c) unless flags refuse it.
 * Then ub_engine_ready: what the first commit needs (dead roots to clean).
 */
int ub_engine_open_raw(const char *const *paths, struct ub_dev *const *devs, int n, const struct ub_log *log,
		       unsigned flags, struct ub_engine **out);
/*
 * A repair's open (lib/repair): the free space from the extent tree, block
 * group used bytes recounted, the free space tree rewritten at the first
 * commit (ub_alloc_load_repair); *fixed counts the groups whose used bytes
 * were wrong. Not in ubtrfs/engine.h: only the library repairs.
 */
#define UB_ENGINE_OPEN_REPAIR_SPACE (1U << 16)
/*
 * A repair may write a btrfs-image metadata dump (its metadata whole, its data
 * zeros), as btrfs check --repair does; nothing else may. The flag stays set.
 */
#define UB_ENGINE_OPEN_METADUMP (1U << 17)
/*
 * A repair that changes only the quota tree's counts may open a filesystem with
 * quotas on (the engine keeps no qgroup counts, so every other writer is
 * refused): it sets what the trees reach and the status item's generation.
 */
#define UB_ENGINE_OPEN_QUOTA_COUNTS (1U << 18)
/*
 * A repair that rebuilds the extent tree (--init-extent-tree): the allocator
 * from the chunk map alone, every block group empty (ub_alloc_load_chunks),
 * nothing read from the old extent tree but its root item; bytes_used 0. The
 * repair takes out every extent its walk of the trees found in use before
 * anything is allocated, and replaces the extent tree in its transaction.
 */
#define UB_ENGINE_OPEN_REPAIR_EXTENTS (1U << 19)
int ub_engine_repair_fixed_groups(const struct ub_engine *e);
int ub_engine_ready(struct ub_engine *e);
/*
 * A filesystem without a free space tree (v1 space cache or none) gets one in
 * a transaction of its own, committed; the v1 cache goes (space_convert.c).
 * 0 at once when it has one. Under no lock: called once, right after open.
 */
bool ub_engine_needs_fst(const struct ub_engine *e);
int ub_engine_create_fst(struct ub_engine *e);

/*
 * ---- dirty budget ----
 * A transaction keeps every block it changed in memory until its commit; data
 * goes to disk as it is written (lib/fsw/data.c) and is not held. So
 * ub_engine_begin_op commits the running transaction before handing it out
 * again once its dirty memory reaches the engine's budget: a long run of
 * operations commits by itself, each commit a consistent state. Callers must
 * hold nothing of a transaction (paths, snapshot sources) across begin_op.
 */
#define UB_ENGINE_DIRTY_BUDGET (64ULL << 20)
/* Memory the transaction holds until its commit: dirty tree blocks and queued reference changes. */
uint64_t ub_txn_dirty_bytes(const struct ub_txn *t);
/* The budget in bytes (0: back to the default); the next ub_engine_begin_op applies it. */
void ub_engine_set_dirty_budget(struct ub_engine *e, uint64_t bytes);
/* The budget in force. */
uint64_t ub_engine_dirty_budget(const struct ub_engine *e);
/* The default dirty budget on this machine (UB_ENGINE_DIRTY_BUDGET, at most RAM / 8). */
uint64_t ub_engine_ram_budget(void);

/* ---- dropping trees (cleaner.c) ---- */
/* change_child_refs for the drop walk: eb's references to its children (by root_id, or by eb when full) change by delta. */
int ub_txn_child_refs(struct ub_txn *t, const struct ub_eb *eb, uint64_t root_id, bool full, int delta);
/* Tree block eb's reference count and extent flags as the extent tree and the queued changes make them. */
int ub_txn_block_refs(struct ub_txn *t, const struct ub_eb *eb, uint64_t *refs, uint64_t *flags);

#endif
