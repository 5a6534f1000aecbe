/* SPDX-License-Identifier: MIT */
/* An ub_fs inside another object: the write engine is built on one (library-internal). */
#ifndef UBTRFS_FS_FS_EMBED_H
#define UBTRFS_FS_FS_EMBED_H

#include "fs/fs_priv.h"

/*
 * ub_fs_open's work on a struct the caller provides (zeroed): from paths, or
 * from devices already open when `devs` is set (taken over whatever happens).
 * On failure what was set up is released again.
 */
int ub_fs_open_at(struct ub_fs *fs, const char *const *paths, struct ub_dev *const *devs, int n,
		  const struct ub_fs_opts *opts, const struct ub_log *log);
/*
 * ub_fs_open_at in two steps, for a caller that must look at the superblock
 * before any tree is read (the engine refuses features first): the volume and
 * the tree context, then the chunk tree, the root table's global trees and the
 * fsync log. Both release everything on failure.
 */
int ub_fs_open_volume(struct ub_fs *fs, const char *const *paths, struct ub_dev *const *devs, int n,
		      const struct ub_fs_opts *opts, const struct ub_log *log);
int ub_fs_load_trees(struct ub_fs *fs);
/* Release what ub_fs_open_at set up (the struct itself stays the caller's). */
void ub_fs_fini(struct ub_fs *fs);

#endif
