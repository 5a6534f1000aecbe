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
/* No chunk tree leaf at all: chunks from block group items and device extents a raw device scan finds (chunk_rebuild.c). */
int ub_fs_rebuild_chunks(struct ub_fs *fs);
void ub_loose_free(struct ub_loose *l);
void ub_loose_csums_free(struct ub_loose_csums *l);

/*
 * Which state a read sees. UB_VIEW_COMMITTED: the last commit, with a
 * pending fsync log (and restore's loose inodes) laid over it, what every
 * read-only command reads. UB_VIEW_LIVE: the writer's running transaction
 * (each tree's live root), what the next commit will hold; only the writer's
 * own thread may read it (docs/design.md, "Views"). Both views verify every
 * block and data sector the same way.
 */
enum ub_view { UB_VIEW_COMMITTED = 0, UB_VIEW_LIVE = 1 };
/* er's root as view v sees it: 0, or -ENOENT when er is NULL or its tree empty in that view. */
int ub_fs_view_of(struct ub_fs *fs, enum ub_view v, const struct ub_eroot *er, struct ub_root *out);
/* The root of tree `objectid` as view v sees it: 0, -ENOENT, <0. */
int ub_fs_view_root(struct ub_fs *fs, enum ub_view v, uint64_t objectid, struct ub_root *out);
/* ub_data_read (ubtrfs/fs.h) through view v: the checksums come from v's csum tree. */
int ub_data_read_view(struct ub_fs *fs, enum ub_view v, uint64_t logical, uint64_t len, uint8_t *buf, bool verify,
		      uint8_t *bad, const struct ub_data_owner *who);
/* ub_file_read_inode (ubtrfs/fs.h) through view v: the extent items from v's subvolume tree. */
int ub_file_read_view(struct ub_fs *fs, enum ub_view v, const struct ub_inode *inode, uint64_t off, uint64_t len,
		      void *buf, uint64_t *got, struct ub_read_report *rep);

#endif
