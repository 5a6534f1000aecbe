/* SPDX-License-Identifier: MIT */
/* The fsync log replayed into the trees and committed, at a read-write open (log_commit.c). */
#ifndef UBTRFS_FSW_LOG_COMMIT_H
#define UBTRFS_FSW_LOG_COMMIT_H

struct ub_engine;

/*
 * Replay the superblock's pending fsync log into the subvolume, extent and
 * csum trees in one transaction and commit it (log_root becomes 0), with the
 * decisions of the in-memory replay (log_replay.c). The engine must have no
 * transaction running. A log that cannot be read or breaks the format is
 * refused (-EUCLEAN, named) before anything is written. 0 when there is no log.
 */
int ub_log_commit(struct ub_engine *e);

#endif
