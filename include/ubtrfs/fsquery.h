/* SPDX-License-Identifier: MIT */
/*
 * Library API: what the btrfs ioctls of a mounted filesystem answer, asked
 * of an open filesystem instead (any handle: the filesystem, a pinned view,
 * an engine's live view). The commands `subvolume` and `filesystem` ask the
 * same questions of a mount through the ioctls and of devices through these
 * calls, and the FUSE mount answers the ioctls with them, so all three give
 * the same answers.
 */
#ifndef UBTRFS_FSQUERY_H
#define UBTRFS_FSQUERY_H

#include <stdbool.h>
#include <stdint.h>
#include "ubtrfs/fs.h"
#include "ubtrfs/api.h"

UB_API_BEGIN

/*
 * BTRFS_IOC_TREE_SEARCH's question: the items of tree `tree` whose keys lie
 * in [min, max] (in key order, the 136-bit number objectid.type.offset) and
 * whose leaf was written in a transaction within [min_transid, max_transid].
 */
struct ub_search_key {
	uint64_t tree;
	struct ub_key min, max;
	uint64_t min_transid, max_transid;
};
/*
 * Called for each item found, in key order, with the generation of the leaf
 * holding it (the search header's transid): 0 goes on, anything else stops
 * the search and is returned by ub_fs_search. Runs under the read call's
 * locks: it must not write.
 */
typedef int (*ub_search_fn)(void *arg, const struct ub_key *key, uint64_t transid, const uint8_t *data,
			    uint32_t len);
/* 0 when the range is done, -ENOENT for a tree that does not exist, fn's value, or a read error. */
int ub_fs_search(struct ub_fs *fs, const struct ub_search_key *sk, ub_search_fn fn, void *arg);

/*
 * The default subvolume (the one a mount without subvol= shows): the
 * location of the "default" entry of the root tree's directory, or
 * BTRFS_FS_TREE_OBJECTID when there is none (as the kernel's mount).
 */
int ub_default_subvol(struct ub_fs *fs, uint64_t *id);

/*
 * BTRFS_IOC_SPACE_INFO: one entry per block group type and profile present
 * (flags: type | profile bits; total: the block groups' logical bytes; used:
 * their used bytes), in the kernel's order (data, system, metadata, mixed;
 * each by the kernel's raid index), then the global reserve
 * (UB_SPACE_GLOBAL_RSV) sized as the kernel sizes it at mount, with nothing
 * used from it. At most `max` entries into out[]; *n is the number there are
 * (more than max: only max were written).
 */
#define UB_SPACE_GLOBAL_RSV BTRFS_SPACE_INFO_GLOBAL_RSV
struct ub_space_entry {
	uint64_t flags, total_bytes, used_bytes;
};
int ub_fs_space_info(struct ub_fs *fs, struct ub_space_entry *out, int max, int *n);

/*
 * FS_IOC_FIEMAP as the kernel's btrfs answers it: the extents of file `ino`
 * of `subvol` that reach past file offset `start`, in order, holes left out,
 * with FIEMAP_EXTENT_* flags: DATA_INLINE | NOT_ALIGNED for an inline extent,
 * ENCODED (compressed: physical is the compressed extent's start), UNWRITTEN
 * (preallocated), SHARED (something else reaches the data: another file or
 * subvolume, a clone, a snapshot sharing the tree blocks), LAST on the last.
 * fn returns 0 to go on; anything else stops and is returned.
 */
struct ub_fiemap_extent {
	uint64_t logical, physical, length;
	uint32_t flags;
};
typedef int (*ub_fiemap_fn)(void *arg, const struct ub_fiemap_extent *x);
int ub_file_fiemap(struct ub_fs *fs, uint64_t subvol, uint64_t ino, uint64_t start, ub_fiemap_fn fn, void *arg);

UB_API_END

#endif
