/* SPDX-License-Identifier: MIT */
/* What the checker's passes share: the checker's state and how a problem is reported. */
#ifndef UBTRFS_CHECK_PRIV_H
#define UBTRFS_CHECK_PRIV_H

#include <pthread.h>

#include "tree/tree_priv.h"
#include "volume/volume_priv.h"
#include "ubtrfs/check.h"
#include "ubtrfs/devinfo.h"
#include "ubtrfs/fsinfo.h"

/* A tree block the walk reached. */
struct chk_block {
	uint64_t addr;
	uint64_t owner; /* its header's */
	uint64_t gen;   /* its header's (0: not read) */
	uint32_t ptrs;  /* pointers (and root items) that reached it */
	uint32_t tag;   /* the walk's tag of the first tree that reached it (1-based) */
	bool owner_reached; /* the tree its header names reached it */
	bool reloc;         /* its header has the RELOC flag */
	bool missing;       /* the extent tree's stream skipped it: told when the stream ends */
};

struct chk_block_map {
	struct chk_block *v;
	size_t n, cap;
};

/* 1 (*out: the entry) if `addr` is there already, 0 if added now with ptrs 0, <0 on error. */
int chk_block_map_add(struct chk_block_map *m, uint64_t addr, uint32_t tag, struct chk_block **out);
/* Compact and sort by address: v[0..n) from then on, no more adds. */
void chk_block_map_sort(struct chk_block_map *m);
void chk_block_map_free(struct chk_block_map *m);

/*
 * A file extent item with data on disk and the reference it makes: an
 * EXTENT_DATA_REF (root: the leaf's owner, inode, file offset minus the
 * extent offset) or, from a leaf with full back references, a
 * SHARED_DATA_REF naming the leaf.
 */
struct chk_fext {
	uint64_t bytenr;
	uint64_t root, ino, offset;
	uint64_t leaf;
	bool used; /* matched with a reference (by the extent tree's stream) */
};

struct ub_checker {
	struct ub_chk_opts opts;
	struct ub_chk_sink sink;
	struct ub_chk_summary sum;
	/*
	 * While a pass reads (chk_capture), errors the library logs on that
	 * thread are kept (per thread, check.c) instead of becoming problems of
	 * their own: the pass reports them with the place it knows.
	 *
	 * Two threads: the tree and chunk passes on the caller's, the file tree
	 * and root item passes (which need nothing of theirs) beside them. The
	 * second thread's problems wait in `deferred` and reach the sink after
	 * the first thread's, so the output keeps the order of the classes.
	 */
	pthread_mutex_t lock; /* the sink, problem counts, deferred */
	struct ub_chk_problem *deferred;
	size_t ndeferred, deferred_cap;
	bool deferred_nomem;
	uint64_t super_generation; /* of the superblock in use, for the tree pass */
	/*
	 * What the tree pass hands the extent checks: every block reached, sorted,
	 * without the log trees' (they have no extent items); whether every tree
	 * was walked whole (else no "unreached" verdicts and no reference counts),
	 * and whether a partly dropped subvolume was left out (then blocks of
	 * subvolume trees may have more references than pointers were seen).
	 */
	struct chk_block_map blocks;
	bool walk_complete;
	bool dropped_roots;
	uint64_t *tag_tree; /* tree objectid of each tag */
	uint64_t *tag_gen;  /* the generation of the root each tag was walked from (its root item's) */
	size_t ntags;
	/*
	 * Trees whose root item may be behind their tree (extent_refs.c): the
	 * extent tree has items for blocks of the tree, newer than its root item,
	 * that no tree reaches (a root item update lost). Neither their items
	 * nor the blocks the older root reaches have a cure then.
	 */
	struct chk_behind {
		uint64_t tree;
		uint64_t newer; /* the newer root the cure points the root item at (0: none found) */
	} *behind;
	size_t nbehind, behind_cap;
	/* the items of those newer blocks (they have extent items, no tree reaches them) */
	struct chk_newer {
		uint64_t addr, tree, gen;
		uint8_t level;
	} *newer;
	size_t nnewer, newer_cap;
	/* each device's own superblock's dev item, for the chunk tree's to be compared with */
	struct chk_dev_super {
		uint64_t devid, total_bytes;
		uint8_t uuid[UB_UUID_SIZE];
		const char *path; /* valid while the filesystem is open */
	} *dev_supers;
	size_t ndev_supers;
	/* ROOT_REF / ROOT_BACKREF items and live subvolumes, from the root tree's leaves */
	struct chk_root_ref *root_refs;
	size_t nroot_refs, root_refs_cap;
	uint64_t *live_subvols;
	size_t nlive, live_cap;
	/* deleted subvolumes (refs 0) the tree pass walked: their drop has not started */
	uint64_t *dead_subvols;
	size_t ndead, dead_cap;
	/*
	 * ---- data references ----
	 * Every file extent item with data on disk, one per item of each leaf the
	 * tree pass walked (a leaf snapshots share is walked once, as the extent
	 * tree counts it once), sorted after the walk by what it references.
	 */
	struct chk_fext *fext;
	size_t nfext, fext_cap;
	/*
	 * Every pointer the walk followed (child, the node holding it, the tree
	 * walked), and every root item's pointer (parent 0), sorted by child
	 * after the walk: what a tree block's individual references must name.
	 */
	struct chk_edge {
		uint64_t child, parent, tree;
	} *edges;
	size_t nedges, edges_cap;
	/*
	 * The tree block whose extent item the extent tree's stream is in, and
	 * its references so far (inline, then keyed): when the stream leaves it,
	 * every pointer that reaches it must be accounted for by one of them.
	 */
	struct chk_open_block {
		struct ub_key key; /* its extent item's */
		uint64_t flags;
		bool open;
		struct chk_block_ref {
			uint8_t type;
			uint64_t value;
		} *refs;
		size_t nrefs, refs_cap;
	} ob;
	/*
	 * ---- subvolume links ---- directory entries that name a subvolume, and
	 * the subvolume trees the file tree pass read whole (the second thread
	 * fills both; chk_subvol_links_check reads them after it has finished)
	 */
	struct chk_subvol_link {
		uint64_t tree, dir, child, index; /* index: DIR_INDEX's key offset, 0 for a DIR_ITEM */
		bool is_index;
		uint16_t name_len;
		char name[UB_NAME_LEN];
	} *links;
	size_t nlinks, links_cap;
	uint64_t *whole_trees;
	size_t nwhole, whole_cap;
	/* ---- quota counts (qgroup.c), NULL when not verified ---- */
	struct chk_qgroups *qg;
	/* ---- paths ---- */
	struct ub_fs *fs; /* the filesystem being checked: problems about an inode get its path */
};

/*
 * Room for one more element in a doubling array: `arrayp` is the address of
 * the array's pointer (any element type), *cap its capacity, n used, `first`
 * the capacity of a new one. 0 or -ENOMEM.
 */
int chk_reserve(void *arrayp, size_t *cap, size_t n, size_t elem, size_t first);

/* Report a problem; `fmt` makes its message. */
void chk_report(struct ub_checker *c, const struct ub_chk_problem *where, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Something normal worth saying at -v (stderr, "ubtrfs: note: ..."): no problem, not counted. */
void chk_note(const struct ub_checker *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Start keeping logged errors (clears what was kept). */
void chk_capture(struct ub_checker *c);
/* Stop keeping them; the last one kept (or "" if none). */
const char *chk_captured(struct ub_checker *c);
void chk_progress(struct ub_checker *c, const char *phase, uint64_t done, uint64_t total);

/* One item of the extent tree's stream (any type; metadata items are looked at). */
void chk_extent_refs_item(struct ub_checker *c, const struct ub_key *k, const uint8_t *d, uint32_t size,
			  uint32_t nodesize, size_t *cursor);
/* A keyed TREE_BLOCK_REF or SHARED_BLOCK_REF item of the extent tree's stream. */
void chk_block_ref_keyed(struct ub_checker *c, const struct ub_key *k);
/* The stream reached its end: blocks left have no extent item; every block without one told. */
void chk_extent_refs_end(struct ub_checker *c, size_t *cursor);
/* The blocks the stream skipped so far told (the end does it; a stream that stopped early calls it). */
void chk_extent_refs_missing(struct ub_checker *c);

/* The pointers the walk followed to `child` (root items' with parent 0): *n of them from the result. */
const struct chk_edge *chk_edges_of(const struct ub_checker *c, uint64_t child, size_t *n);
/* The block the walk reached at `addr` (after the tree pass), or NULL. */
const struct chk_block *chk_block_at(const struct ub_checker *c, uint64_t addr);

/* Order of file extent records: address, then root, inode, offset, leaf. */
int chk_fext_cmp(const struct chk_fext *a, const struct chk_fext *b);

/* A root tree item: its references are kept for chk_root_refs_check. 0 or -ENOMEM. */
int chk_root_refs_add(struct ub_checker *c, const struct ub_key *k, const uint8_t *d, uint32_t size);
/* Every ROOT_REF against its ROOT_BACKREF, every live subvolume linked. */
void chk_root_refs_check(struct ub_checker *c);
/* Every ROOT_REF against the directory entries that make its link (after both passes). */
void chk_subvol_links_check(struct ub_checker *c);

int chk_trees(struct ub_checker *c, struct ub_fs *fs);
/*
 * qgroup.c: chk_qgroup_begin after the tree pass reads the quota tree and
 * decides whether its counts can be verified; the extent tree's stream hands
 * each data extent to chk_qgroup_data and says when it saw them all
 * (chk_qgroup_data_done); chk_qgroup_end compares the counts.
 */
int chk_qgroup_begin(struct ub_checker *c, struct ub_fs *fs);
void chk_qgroup_data(struct ub_checker *c, uint64_t bytenr, uint64_t len, const struct chk_fext *f, size_t n);
void chk_qgroup_data_done(struct ub_checker *c);
void chk_qgroup_end(struct ub_checker *c);
void chk_qgroup_free(struct ub_checker *c);
int chk_chunks(struct ub_checker *c, struct ub_fs *fs);
/* File trees: inodes, names and directory entries, file extents (fs_tree.c). */
int chk_fs_trees(struct ub_checker *c, struct ub_fs *fs);
/* Root items' generations, deleted subvolumes' orphan items, the uuid tree (root_items.c). */
int chk_root_items(struct ub_checker *c, struct ub_fs *fs);

#endif
