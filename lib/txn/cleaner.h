/* SPDX-License-Identifier: MIT */
/*
 * The cleaner: drops the trees of deleted subvolumes (dead roots: ROOT_ITEM
 * refs 0 and an ORPHAN item in the root tree), as the kernel's cleaner
 * thread does with btrfs_drop_snapshot.
 *
 * The drop walks the dead tree down from its root. A block only this tree
 * references (count 1) is ours: its children are handled, then it is freed
 * (a leaf's data extents lose this tree's reference first). A shared block
 * only loses this tree's reference and is not descended; when it is newer
 * than the dead tree itself, the blocks below it that the dead tree owns
 * first hand their children over to full back references (they would
 * otherwise name a tree that no longer exists), as the kernel's
 * UPDATE_BACKREF stage does.
 *
 * Resumable: a transaction that ends before the tree is gone records in the
 * ROOT_ITEM where the walk stands, as the kernel does: drop_level L >= 1 and
 * drop_progress = the key of the next child to handle in the level-L node on
 * the walk's path (everything left of it is dropped; the nodes above L on the
 * path are ours and still whole). Either side resumes the other's work.
 * When the tree is gone, its ROOT_ITEM and ORPHAN item are deleted and its
 * root object is left empty.
 *
 * Once no dead root is left, the empty block groups the kernel's rule lets
 * go (ub_chunk_next_removable) are removed, each in a transaction of its
 * own (ub_chunk_remove), committed at once.
 */
#ifndef UBTRFS_TXN_CLEANER_H
#define UBTRFS_TXN_CLEANER_H

#include <stdbool.h>
#include <stdint.h>

struct ub_engine;

/*
 * Commit the running transaction if there is one, then drop dead roots in
 * one transaction of its own, committed before return: at most
 * budget_blocks tree blocks freed or unreferenced (0: no limit), stopping
 * at a point the ROOT_ITEM can record; when no dead root is left, empty
 * block groups go instead. *more: dead-root work is left.
 * 0 or -errno (the transaction is aborted then: the disk keeps the last commit).
 */
int ub_engine_clean(struct ub_engine *e, uint64_t budget_blocks, bool *more);

/*
 * Deleted subvolumes go away without anyone asking, as under the kernel's
 * cleaner thread, but without a thread of ours: while a dead root may be left
 * (found at open, or a subvolume deleted through this engine),
 * every commit (ub_txn_commit) is followed by up to UB_ENGINE_CLEAN_CALLS
 * ub_engine_clean calls (one per dead root, or a part of one) of `blocks`
 * tree blocks each (UB_ENGINE_CLEAN_STEP by default; 0 turns it off for a
 * caller that paces the cleaner itself). A close does not wait for the rest:
 * the next open resumes it, as the kernel's next mount does.
 */
#define UB_ENGINE_CLEAN_STEP 4096
#define UB_ENGINE_CLEAN_CALLS 8
/* On by default: a caller that wants dead roots left (for the kernel, or to drop them in its own steps) sets 0. */
#define UB_ENGINE_CLEAN_DEFAULT UB_ENGINE_CLEAN_STEP
void ub_engine_set_clean_step(struct ub_engine *e, uint64_t blocks);
/* Whether the root tree names a dead root: 1, 0, <0 (at open: whether commits must clean). */
int ub_engine_has_dead_roots(struct ub_engine *e);

#endif
