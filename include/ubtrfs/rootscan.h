/* SPDX-License-Identifier: MIT */
/*
 * Older roots: how intact a root tree is, and the root trees still on disk
 * (the superblock's backup slots and a scan of the metadata block groups),
 * for `--backup`, `ubtrfs find-root` and restore.
 */
#ifndef UBTRFS_ROOTSCAN_H
#define UBTRFS_ROOTSCAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "ubtrfs/fs.h"
#include "ubtrfs/api.h"

UB_API_BEGIN

/* The trees a usable root tree must name, in this order in ub_root_probe.trees. */
enum { UB_PROBE_EXTENT, UB_PROBE_CSUM, UB_PROBE_FS, UB_PROBE_DEV, UB_PROBE_NTREES };
extern const uint64_t ub_probe_tree_ids[UB_PROBE_NTREES];

struct ub_root_probe {
	struct ub_root tree; /* the root tree probed */
	int tree_err;        /* 0: its root block reads and verifies, else the error */
	struct {
		struct ub_root root; /* from its ROOT_ITEM (bytenr 0 when there is none) */
		int err;             /* 0: the root block reads and verifies; -ENOENT: no ROOT_ITEM */
	} trees[UB_PROBE_NTREES];
};

/*
 * Read the root block of `root_tree` and of each tree of ub_probe_tree_ids it
 * names, without messages (each failure is in the result). 0 when all are
 * readable, else the first error.
 */
int ub_root_tree_probe(struct ub_tree_ctx *tc, const struct ub_root *root_tree, struct ub_root_probe *out);

struct ub_root_candidate {
	uint64_t bytenr, generation;
	uint8_t level;
	bool current;        /* the superblock's root */
	int backup_slot;     /* the superblock's backup slot naming it, -1 if none */
	bool scanned;        /* found by the scan of the metadata block groups */
	struct ub_root_probe probe;
};

/* Called every so often during the scan: bytes of metadata chunks scanned so far, of total. */
typedef void (*ub_scan_progress_fn)(void *arg, uint64_t done, uint64_t total);

/*
 * Every block of the metadata block groups (first readable copy, 1 MiB at a
 * time) whose header names this filesystem's fsid and its own address, and
 * that `want` (if set) accepts by owner, generation and level, is verified on
 * any copy (checksum, header, tree checker; failures are silent) and handed to
 * `found`. A non-zero return of `found` stops the scan and is returned.
 * `progress` (if set) hears of each megabyte.
 */
struct ub_meta_scan_ops {
	bool (*want)(void *arg, uint64_t owner, uint64_t generation, int level);
	int (*found)(void *arg, const struct ub_eb *eb);
	ub_scan_progress_fn progress;
	void *arg;
	bool system; /* scan the system block groups (the chunk tree's) instead */
};
int ub_scan_metadata(struct ub_fs *fs, const struct ub_meta_scan_ops *ops);

/*
 * Loose inodes, the last resort for inodes no readable tree gives: add the
 * items of such an inode from every leaf a scan found (item `slot` of `leaf`,
 * a leaf of subvolume `subvol`), then publish once; from then on the inode is
 * read from the newest copy of each of its keys, its data still verified
 * against the checksum tree. Only while no other thread reads this fs.
 */
int ub_fs_loose_add(struct ub_fs *fs, uint64_t subvol, const struct ub_eb *leaf, int slot);
/*
 * Optionally, before publishing: a leaf of `generation` spans the keys
 * [first, last] of one inode (same objectid), so it held every item of that
 * inode in that span that existed then. A copy of an item that only older
 * leaves hold in a span a newer leaf covers was deleted since: publishing
 * drops it, instead of mixing versions of the inode.
 */
int ub_fs_loose_cover(struct ub_fs *fs, uint64_t subvol, uint64_t generation, const struct ub_key *first,
		      const struct ub_key *last);
int ub_fs_loose_publish(struct ub_fs *fs);
/*
 * Once published: the bytes the file extents of a loose inode account for,
 * as its inode item's nbytes counts them (inline: their length; a disk
 * extent: its file range; a hole: none). A count that differs from the inode
 * item's says the items gathered are not one version of the file.
 * -ENOENT: no such loose inode.
 */
int ub_fs_loose_extent_bytes(const struct ub_fs *fs, uint64_t subvol, uint64_t ino, uint64_t *bytes);

/*
 * Undelete's checksums: register each extent of a deleted file (disk range,
 * and the generations between which the file held it), then feed every leaf
 * a scan finds (only checksum-tree leaves are used): reads of those ranges
 * are then checked against the newest checksum inside each window, and a
 * sector none was found for reads as bad. -E2BIG past the bound (16 GiB of
 * sectors over every range). Only while no other thread reads this fs.
 */
int ub_fs_loose_csum_range(struct ub_fs *fs, uint64_t logical, uint64_t len, uint64_t min_gen, uint64_t max_gen);
int ub_fs_loose_csum_leaf(struct ub_fs *fs, const struct ub_eb *leaf);

/*
 * Every root tree candidate of an open filesystem: the superblock's root,
 * its backup roots, and (when `scan`) every block of the metadata block
 * groups that verifies as a ROOT_TREE block (owner, checksum, fsid,
 * bytenr), newest generation first, each probed. The caller frees *out.
 */
int ub_find_roots(struct ub_fs *fs, bool scan, ub_scan_progress_fn progress, void *arg,
		  struct ub_root_candidate **out, size_t *n);

UB_API_END

#endif
