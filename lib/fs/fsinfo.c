/* SPDX-License-Identifier: MIT */
/* Accessors tools use instead of reading struct ub_fs's fields. */
#include "ubtrfs/fsinfo.h"
#include "fs/fs_priv.h"

struct ub_volume *ub_fs_volume(const struct ub_fs *fs)
{
	return fs->vol;
}

struct ub_tree_ctx *ub_fs_trees(struct ub_fs *fs)
{
	return &fs->tc;
}

const struct ub_log *ub_fs_log(const struct ub_fs *fs)
{
	return &fs->log;
}
