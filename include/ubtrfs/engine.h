/* SPDX-License-Identifier: MIT */
/*
 * Library API: a filesystem opened for writing. A user holds struct
 * ub_engine and struct ub_txn as handles (their structures are the
 * library's, lib/txn/txn.h): open, start a transaction, change files through
 * ubtrfs/fswrite.h, commit or abort, close.
 *
 * Threads: any number of threads may call the library at once; it takes
 * its own locks. Changes are made under the engine's writer lock, which
 * each way of changing takes and gives back:
 *  - an operation: ub_fsw_begin (ubtrfs/fswrite.h) joins the running
 *    transaction (or starts one) and takes the lock; the thread makes its
 *    calls; ub_fsw_end gives the lock back. The transaction goes on for the
 *    next operation, of any thread, until a commit;
 *  - an owned transaction: ub_txn_start takes the lock and starts a
 *    transaction (-EBUSY while one runs), ub_txn_commit or ub_txn_abort ends
 *    it and gives the lock back (one writer that keeps the engine to itself:
 *    mkfs);
 *  - ub_engine_commit commits the running transaction from any thread,
 *    after the operation in progress; a thread inside an operation may call
 *    it too (it then goes on in the next transaction).
 * A thread that holds the lock may take it again (it counts). Reads through
 * the filesystem's handle or a pinned view (ub_fs_view_open) see commits and
 * never wait for the lock; reads through ub_engine_view see the running
 * transaction and wait for the operation in progress, or a commit.
 *
 * After a failed commit or a write error the engine is broken (-EROFS for
 * every further transaction): what is on disk is the last commit.
 */
#ifndef UBTRFS_ENGINE_H
#define UBTRFS_ENGINE_H

#include "ubtrfs/dev.h"
#include "ubtrfs/fs.h"
#include "ubtrfs/log.h"
#include "ubtrfs/api.h"

UB_API_BEGIN

struct ub_engine;
struct ub_txn;

/*
 * Open a filesystem for writing. Refuses (-EOPNOTSUPP, naming the feature)
 * what the engine does not keep up to date: quotas, the block group tree, the
 * raid-stripe tree, extent-tree-v2, mixed block groups, metadata without
 * skinny extents, any unknown incompat or compat_ro bit. A pending fsync log
 * is replayed into the trees and committed before the open returns, as the
 * kernel's mount does (lib/fsw/log_commit.c; an info line says what it did);
 * a log that cannot be replayed fails the open (-EUCLEAN) with nothing written.
 */
int ub_engine_open(const char *const *paths, int npaths, const struct ub_log *log, struct ub_engine **out);
/*
 * The same with flags: UB_ENGINE_OPEN_NO_LOG_REPLAY refuses (-EOPNOTSUPP) a
 * pending fsync log instead of replaying it; UB_ENGINE_OPEN_DEGRADED opens
 * with devices missing when every chunk still has its data (writes leave the
 * missing devices out: what removes or replaces a lost device needs it).
 */
#define UB_ENGINE_OPEN_NO_LOG_REPLAY (1U << 0)
#define UB_ENGINE_OPEN_DEGRADED (1U << 1)
int ub_engine_open_ex(const char *const *paths, int npaths, const struct ub_log *log, unsigned flags,
		      struct ub_engine **out);
/* The same over devices already open (taken over, closed with the engine or on failure). */
int ub_engine_open_devs(struct ub_dev *const *devs, int ndevs, const struct ub_log *log, struct ub_engine **out);
/* Aborts a running transaction (nothing of it reaches the disk) and closes everything. */
void ub_engine_close(struct ub_engine *e);

int ub_txn_start(struct ub_engine *e, struct ub_txn **out);
/* Commit and end the transaction (freed whatever the result). */
int ub_txn_commit(struct ub_txn *t);
/* Forget every change of the transaction: the disk keeps the last commit. */
void ub_txn_abort(struct ub_txn *t);
/*
 * Commit the running transaction if there is one (the one ub_fsw_begin hands
 * out). -EROFS on a broken engine, also with nothing running: the changes
 * since the last commit are lost.
 */
int ub_engine_commit(struct ub_engine *e);

/*
 * The dirty memory a transaction may hold before an operation's start commits
 * it (0: the default, 64 MiB and at most RAM / 8).
 */
void ub_engine_set_dirty_budget(struct ub_engine *e, uint64_t bytes);

/*
 * Deleted subvolumes (lib/txn/cleaner.h): by default a few steps of their
 * drop follow each commit; a caller that paces the cleaner itself (the
 * mount's commit thread) sets the step to 0 and calls ub_engine_clean: one
 * committed transaction dropping at most budget_blocks tree blocks, *more
 * when work is left. ub_engine_has_dead_roots: 1, 0 or <0.
 */
void ub_engine_set_clean_step(struct ub_engine *e, uint64_t blocks);
int ub_engine_clean(struct ub_engine *e, uint64_t budget_blocks, bool *more);
int ub_engine_has_dead_roots(struct ub_engine *e);

/*
 * The error that broke the engine (a failed write or commit), 0 while it is
 * whole: tells an -EROFS of a broken engine from a refusal (a read-only
 * subvolume's). Any thread.
 */
int ub_engine_error(struct ub_engine *e);

/* The filesystem the engine writes, for the read calls of ubtrfs/fs.h (valid until ub_engine_close). */
struct ub_fs *ub_engine_fs(struct ub_engine *e);
/*
 * A live view (ubtrfs/fs.h "views"): reads see the running transaction,
 * what the next commit will hold, as the file API's own reads do. Closed
 * with ub_fs_close before the engine.
 */
int ub_engine_view(struct ub_engine *e, struct ub_fs **out);

UB_API_END

#endif
