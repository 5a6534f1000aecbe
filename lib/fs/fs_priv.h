/* SPDX-License-Identifier: MIT */
/*
 * What an open filesystem holds (library-internal: the engine embeds one, the
 * layers above the tree layer read its fields). Library users get the opaque
 * struct ub_fs of ubtrfs/fs.h and the accessors of ubtrfs/fsinfo.h.
 */
#ifndef UBTRFS_FS_FS_PRIV_H
#define UBTRFS_FS_FS_PRIV_H

#include "ubtrfs/fs.h"
#include "tree/tree_priv.h"

struct ub_roots;
struct ub_eroot;
struct ub_dc_pool;
struct ub_loose_csums;

/*
 * Trees are root objects (lib/tree/roots.h) in one table by objectid, shared
 * with the write engine built on this fs. Readers use each tree's committed
 * root (the last commit), copied through ub_fs_committed()/ub_fs_tree_root(),
 * so they may run in another thread while a transaction is being built.
 */
struct ub_fs {
	struct ub_log log;
	struct ub_volume *vol;
	struct ub_tree_ctx tc;
	struct ub_fs_opts opts;
	struct ub_roots *roots;
	struct ub_eroot *root_tree, *chunk_tree;
	/* global trees, NULL when absent */
	struct ub_eroot *extent_tree, *dev_tree, *csum_tree, *uuid_tree, *fst_tree, *bgt_tree, *quota_tree, *rst_tree;
	uint64_t incompat, compat_ro;
	struct ub_replay *replay; /* the fsync log applied in memory, or NULL */
	struct ub_loose *loose;   /* inodes from leaves no tree reaches (loose.c), or NULL */
	struct ub_loose_csums *loose_csums; /* checksums of deleted extents, from old leaves (loose_csum.c), or NULL */
	/* ---- decompression workers ---- */
	struct ub_dc_pool *dc_pool; /* lib/fs/decomp_pool.h: started by the first compressed read, NULL before */
};

/*
 * chunk_rescue.c: the chunk and device items of every chunk tree leaf a scan
 * of the system block groups finds, newest copy of each, added where the
 * volume has no chunk yet. 0 when it added chunks, -ENOENT when it found
 * nothing to add, <0 on errors.
 */
int ub_fs_rescue_chunks(struct ub_fs *fs);
/*
 * No chunk tree leaf at all (or, after_rescue, the leaves found lack chunks):
 * chunks from block group items and device extents a raw device scan finds
 * (chunk_rebuild.c). 0 when it added chunks, -ENOENT when none, <0.
 */
int ub_fs_rebuild_chunks(struct ub_fs *fs, bool after_rescue);
/*
 * After a chunk rescue: the chunks the leaves found lack (added since their
 * newest copy), from the device tree's extents and the block group items the
 * rescued map reaches, else from the raw scan (chunk_rebuild.c). 0 or <0.
 */
int ub_fs_complete_chunks(struct ub_fs *fs);
void ub_loose_free(struct ub_loose *l);
void ub_loose_csums_free(struct ub_loose_csums *l);

#endif
