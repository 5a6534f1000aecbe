/* SPDX-License-Identifier: MIT */
/*
 * What an open filesystem holds (library-internal: the engine embeds one, the
 * layers above the tree layer read its fields). Library users get the opaque
 * struct ub_fs of ubtrfs/fs.h and the accessors of ubtrfs/fsinfo.h.
 */
#ifndef UBTRFS_FS_FS_PRIV_H
#define UBTRFS_FS_FS_PRIV_H

#include <pthread.h>
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
	/*
	 * ---- views (view.c, docs/design.md "Views") ---- A view is a struct
	 * ub_fs of its own, a copy of the filesystem's handle that shares its
	 * volume, block cache, root table and overlays (base) and differs in
	 * which roots its reads take. The filesystem itself reads the last
	 * commit at each access (UB_VIEW_LATEST).
	 */
	struct ub_fs *base;  /* a view: the filesystem it reads; NULL: this is the filesystem */
	enum ub_view {
		UB_VIEW_LATEST = 0, /* each tree's root as the last commit left it, looked up at each access */
		UB_VIEW_PINNED,     /* one commit throughout, counted among the readers (reader epochs) */
		UB_VIEW_LIVE,       /* the engine's running transaction: what the next commit will hold */
	} view;
	uint64_t view_gen;                   /* PINNED: the generation it reads */
	struct ub_root view_root_tree, view_chunk_root; /* PINNED: that commit's */
	struct ub_view_roots *view_roots;    /* PINNED: the roots found so far in view_root_tree */
	/*
	 * The filesystem's (base NULL) writer lock: the engine holds it for
	 * writing while it changes trees; every read call through a live view
	 * holds it for reading (view.c).
	 */
	pthread_rwlock_t live_lock;
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

/* ---- views (view.c) ---- */
/* v becomes a live view of base (the engine's, for its own reads): no reader count, nothing to free. */
void ub_fs_view_init_live(struct ub_fs *v, struct ub_fs *base);
/* The filesystem a handle reads (itself, or a view's base). */
static inline struct ub_fs *ub_fs_base(struct ub_fs *fs)
{
	return fs->base ? fs->base : fs;
}
/*
 * Around every public read call: a live view takes its filesystem's writer
 * lock for reading, once per thread (nested calls, and the writer's own
 * thread, which holds it for writing, take nothing); a call through the
 * handle of a filesystem an engine writes is pinned to the last commit for
 * its duration (ub_view_call_root). The value to hand back to exit.
 */
int ub_view_enter(struct ub_fs *fs);
void ub_view_exit(struct ub_fs *fs, int entered);
/* Inside a pinned call on fs: the root of tree `objectid` in its commit (0, -ENOENT, <0); 1: no pinned call. */
int ub_view_call_root(struct ub_fs *fs, uint64_t objectid, struct ub_root *out);
/*
 * The engine's side: the writer lock, counted per thread (taken again by
 * its holder, it only counts; -EDEADLK past 4 filesystems held by one
 * thread). unlock gives one taking back; release all of this thread's.
 */
int ub_fs_live_write_lock(struct ub_fs *base);
void ub_fs_live_write_unlock(struct ub_fs *base);
void ub_fs_live_write_release(struct ub_fs *base);
bool ub_fs_live_write_held(const struct ub_fs *base);
/* How often this thread took it (0: not held). */
unsigned ub_fs_live_write_depth(const struct ub_fs *base);
/* A pinned view's root of tree `objectid`: from its commit's root tree (cached), or the superblock's two. */
int ub_fs_view_lookup(struct ub_fs *fs, uint64_t objectid, struct ub_root *out);
/* A live view of fs's filesystem (ub_engine_view). */
int ub_fs_live_view(struct ub_fs *fs, struct ub_fs **out);
/* Close a view (ub_fs_close calls it for one). */
void ub_fs_view_free(struct ub_fs *v);

#endif
