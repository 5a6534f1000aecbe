/* SPDX-License-Identifier: MIT */
/*
 * The fsync log replay, shared by the read-only overlay (the sets are read
 * through struct ub_icur) and the read-write replay (log_commit.c writes the
 * same sets into the subvolume trees): one set of decisions, two consumers.
 */
#ifndef UBTRFS_FS_LOG_REPLAY_H
#define UBTRFS_FS_LOG_REPLAY_H

#include "items.h"

/* The replayed inodes, sorted by (subvolume, inode): each set is the inode's every item after the replay. */
size_t ub_replay_nsets(const struct ub_fs *fs);
const struct ub_itemset *ub_replay_set(const struct ub_fs *fs, size_t i);
/* Each run of logged data checksums (start: logical address of its first sector), in log order. */
int ub_replay_for_each_csum(const struct ub_fs *fs,
			    int (*fn)(void *arg, uint64_t start, const uint8_t *csums, uint32_t bytes), void *arg);

/*
 * The write engine's read-write replay (fs.c): the log replayed in memory over
 * the last commit of an fs opened without it, any log problem an error, and
 * every block of the log trees into *blocks (which the caller frees). The
 * overlay stays until ub_fs_drop_replay.
 */
int ub_fs_replay_log_strict(struct ub_fs *fs, struct ub_block_set *blocks);
void ub_fs_drop_replay(struct ub_fs *fs);

#endif
