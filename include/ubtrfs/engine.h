/* SPDX-License-Identifier: MIT */
/*
 * Library API: a filesystem opened for writing. A user holds struct
 * ub_engine and struct ub_txn as handles (their structures are the
 * library's, lib/txn/txn.h): open, start a transaction, change files through
 * ubtrfs/fswrite.h, commit or abort, close.
 *
 * Threads: one transaction at a time per engine (ub_txn_start fails with
 * -EBUSY while one runs); every call on an engine and its transaction is made
 * by one thread at a time (the caller serialises). Other threads may read the
 * filesystem of ub_engine_fs through ubtrfs/fs.h: they see the last commit.
 *
 * After a failed commit or a write error the engine is broken (-EROFS for
 * every further transaction): what is on disk is the last commit.
 */
#ifndef UBTRFS_ENGINE_H
#define UBTRFS_ENGINE_H

#include "ubtrfs/dev.h"
#include "ubtrfs/fs.h"
#include "ubtrfs/log.h"

struct ub_engine;
struct ub_txn;

/*
 * Open a filesystem for writing. Refuses (-EOPNOTSUPP, naming the feature)
 * what the engine does not keep up to date: quotas, the block group tree, the
 * raid-stripe tree, extent-tree-v2, mixed block groups, metadata without
 * skinny extents, any unknown incompat or compat_ro bit. A pending fsync log
 * is replayed into the trees and committed before the open returns, as the
 * kernel's mount does (lib/fs/log_commit.c; an info line says what it did);
 * a log that cannot be replayed fails the open (-EUCLEAN) with nothing written.
 */
int ub_engine_open(const char *const *paths, int npaths, const struct ub_log *log, struct ub_engine **out);
/* The same over devices already open (taken over, closed with the engine or on failure). */
int ub_engine_open_devs(struct ub_dev *const *devs, int ndevs, const struct ub_log *log, struct ub_engine **out);
/* Aborts a running transaction (nothing of it reaches the disk) and closes everything. */
void ub_engine_close(struct ub_engine *e);

int ub_txn_start(struct ub_engine *e, struct ub_txn **out);
/* Commit and end the transaction (freed whatever the result). */
int ub_txn_commit(struct ub_txn *t);
/* Forget every change of the transaction: the disk keeps the last commit. */
void ub_txn_abort(struct ub_txn *t);
/* Commit the running transaction if there is one (the one ub_fsw_begin hands out). */
int ub_engine_commit(struct ub_engine *e);

/* The filesystem the engine writes, for the read calls of ubtrfs/fs.h (valid until ub_engine_close). */
struct ub_fs *ub_engine_fs(struct ub_engine *e);

#endif
