/* SPDX-License-Identifier: MIT */
/* Library API: what a tool reaches from an open filesystem, instead of reading struct ub_fs's fields. */
#ifndef UBTRFS_FSINFO_H
#define UBTRFS_FSINFO_H

#include "ubtrfs/fs.h"
#include "ubtrfs/api.h"

UB_API_BEGIN

/* The volume under an open filesystem (for ubtrfs/devinfo.h); valid until ub_fs_close. */
struct ub_volume *ub_fs_volume(const struct ub_fs *fs);
/* The tree context every tree call (ub_tree_search, ub_tree_read_block...) on this filesystem takes. */
struct ub_tree_ctx *ub_fs_trees(struct ub_fs *fs);
/* The diagnostics sink the filesystem reports through, for a tool's own messages about it. */
const struct ub_log *ub_fs_log(const struct ub_fs *fs);

struct statvfs;
/*
 * The figures `df` shows on the kernel's read-only mount of this filesystem
 * (its btrfs_statfs: space counted per profile from the block groups, new
 * chunks from each present device's unallocated space): 0, or <0 (logged).
 */
int ub_fs_statfs(struct ub_fs *fs, struct statvfs *out);

UB_API_END

#endif
