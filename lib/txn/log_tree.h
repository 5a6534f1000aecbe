/* SPDX-License-Identifier: MIT */
/*
 * The fsync log trees of the running transaction (library-internal), as the
 * kernel keeps them: a log root tree whose ROOT_ITEMs (key TREE_LOG,
 * ROOT_ITEM, subvolume id) point at one log tree per subvolume, every block
 * owned by TREE_LOG, of the running transaction's generation (one more than
 * the last commit's), allocated from metadata space without extent items or
 * back references. A log sync writes the log's dirty blocks, flushes, and
 * points the primary superblock (of the last commit, unchanged otherwise) at
 * the log root; the next commit forgets the logs (its superblock has no
 * log_root) and gives their space back once it is durable.
 *
 * Space: a log block is reserved from the allocator when made; one replaced
 * before it reached the disk goes back at once; one replaced after a sync
 * waits for the next sync (the durable log may still point at it); at the
 * commit every log block left is pinned, so nothing reuses it before the
 * superblock that forgets the log is durable.
 *
 * Threads: every call with the writer lock held.
 */
#ifndef UBTRFS_TXN_LOG_TREE_H
#define UBTRFS_TXN_LOG_TREE_H

#include <stdbool.h>
#include <stdint.h>
#include "tree/tree_write.h"

struct ub_engine;
struct ub_txn;

/*
 * The log tree of `subvol` in the running transaction, made on first use,
 * and the allocation callbacks its changes take: the tree layer's write
 * calls work on it as on any tree (*root changes as they copy).
 */
int ub_log_tree(struct ub_txn *t, uint64_t subvol, struct ub_root **root, struct ub_tree_alloc **ta);

/*
 * Make the logs durable: their dirty blocks sealed and written, the log
 * root tree's items brought up to date first, every device flushed, the
 * primary superblock of the last commit written with log_root, flushed.
 * Waits for a commit still being written (the log follows the newest
 * commit). A failure leaves the log unusable for this transaction (*the
 * caller commits instead*): -EIO and the like.
 */
int ub_log_sync(struct ub_txn *t);

/* Wait until every sealed commit is on disk (0, or -EROFS when one failed): what they hold is durable. */
int ub_log_wait_commits(struct ub_engine *e);

/* Whether the running transaction has a log (made, synced or not). */
bool ub_log_active(const struct ub_engine *e);

/*
 * At a commit, before anything is sealed: every log block leaves the dirty
 * list and its space is pinned (free on disk after this commit, reusable
 * once its superblock is durable); the logs are forgotten. *synced: the
 * superblock on disk points at one of them (the commit must be written).
 */
int ub_log_discard(struct ub_engine *e, bool *synced);

/* An aborted transaction: the logs are forgotten, their reservations given back. */
void ub_log_abort(struct ub_engine *e);

void ub_log_free(struct ub_engine *e);

/*
 * What changed in each file since the transaction began or since it was last
 * logged: the writers note every file range whose file extent items change
 * (UINT64_MAX as the end: to the end of the file and past it), so an fsync
 * logs only those ranges. Kept per transaction (a commit or an abort forgets
 * them); out of memory, every file is logged whole from then on.
 */
void ub_log_note(struct ub_txn *t, uint64_t subvol, uint64_t ino, uint64_t start, uint64_t end);

/* One file's changes: ranges [s, e) sorted and merged. */
struct ub_log_changes {
	bool logged;   /* logged before in this transaction */
	bool whole;    /* every range changed (or the notes were lost): log the whole file */
	size_t n;
	struct { uint64_t s, e; } *r;
};
/* The changes of (subvol, ino), taken (its notes are cleared, it counts as logged from now on): free with ub_log_changes_free. */
int ub_log_take(struct ub_txn *t, uint64_t subvol, uint64_t ino, struct ub_log_changes *out);
void ub_log_changes_free(struct ub_log_changes *c);

/*
 * A name of (subvol, ino) was added or removed: if the inode is in the log,
 * its names there are stale and the next fsync (of anything) must log them
 * again before the log is synced, as the kernel logs the new names of every
 * logged inode (else the replay would bring back an old name, and could take
 * it from the file that holds it now).
 */
void ub_log_note_names(struct ub_txn *t, uint64_t subvol, uint64_t ino);
struct ub_log_inode {
	uint64_t subvol, ino;
};
/* The inodes to log again (a malloc'd list, cleared here); -ENOMEM when one was lost: commit instead. */
int ub_log_take_relog(struct ub_txn *t, struct ub_log_inode **list, size_t *n);

#endif
