/* SPDX-License-Identifier: MIT */
/* Between the files of the repair (lib/repair/). */
#ifndef UBTRFS_REPAIR_PRIV_H
#define UBTRFS_REPAIR_PRIV_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include "ubtrfs/repair.h"
#include "txn/txn.h"

/* One cure noted from the check (a problem's fix, where and to what). */
struct rp_note {
	enum ub_chk_fix fix;
	uint64_t tree, inode, devid, want, want2;
	struct ub_key key; /* UB_CHK_FIX_EXTENT_*: the extent item (DATA_ADD, EXTENT_ADD: its address) */
	/* DATA_ADD, found by rp_data_scan in the file trees: the extent's length, generation, its references */
	uint64_t data_len, data_gen, data_found;
	struct rp_dref {
		uint8_t type;          /* EXTENT_DATA_REF or SHARED_DATA_REF */
		uint64_t root, ino, offset, parent;
		uint32_t count;
	} *drefs;
	size_t ndrefs;
};

struct ub_repair {
	struct rp_note *notes;
	size_t nnotes, cap;
	uint64_t noted;
};

/* One run: the notes, the engine and its transaction, where changes are said. */
struct rp_ctx {
	struct ub_repair *r;
	const struct ub_repair_opts *opts;
	const struct ub_log *log;
	struct ub_repair_result *res;
	struct ub_undo *undo;
	struct ub_engine *e;
	struct ub_txn *t;
	/* inodes whose names the repair changed: counted again at the end (rp_touch) */
	struct rp_touched {
		uint64_t tree, ino;
		bool dir_size;
	} *touched;
	size_t ntouched, captouched;
	/* the devices (a dry run's --init-csum-tree opens them read-only itself) */
	const char *const *paths;
	int npaths;
	/* --init-extent-tree: what the walk of the trees found (init_extent.c), until the rebuild */
	struct rp_ie *ie;
	/* blocks no copy of which passed the tree checks, cured (salvage.c); NULL: none */
	struct rp_salvage *salvage;
};

/* rp_ctx.c, what every cure uses. A change made (or that would be): counted and handed to the caller's sink. */
/* Room for element n of *v (`elem` bytes each; `first` the first capacity, doubling after): 0 or -ENOMEM. */
int rp_grow(void **v, size_t *cap, size_t n, size_t elem, size_t first);
void rp_say(struct rp_ctx *c, const struct rp_note *n, uint64_t was, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* names.c: the names of n->inode in directory n->want made whole; an inode with no name into /lost+found */
int rp_fix_names(struct rp_ctx *c, const struct rp_note *n);
int rp_fix_lost(struct rp_ctx *c, const struct rp_note *n);
/* names.c: a subvolume's root directory given its inode item back (its size counted at the end) */
int rp_fix_root_dir(struct rp_ctx *c, const struct rp_note *n);
/* Set ino's nlink (dir_size: its size) to what its items say now. */
int rp_recount(struct rp_ctx *c, uint64_t tree, uint64_t ino, bool dir_size);
/* An inode whose names changed: its nlink (dir_size: its size) counted again at the end. -ENOMEM only. */
int rp_touch(struct rp_ctx *c, uint64_t tree, uint64_t ino, bool dir_size);
bool rp_is_touched(const struct rp_ctx *c, uint64_t tree, uint64_t ino, bool dir_size);
/* holes.c: hole file extent items in the gaps of n->inode's extents (a filesystem without NO_HOLES) */
int rp_fix_holes(struct rp_ctx *c, const struct rp_note *n);
/*
 * overlaps.c: every file extent item of n->inode that runs past n->want (the
 * next item's start) cut to end there; its nbytes counted again after.
 */
int rp_fix_overlap(struct rp_ctx *c, const struct rp_note *n);
/* roots.c: the uuid tree's entries and a deleted subvolume's orphan item */
int rp_fix_roots(struct rp_ctx *c, const struct rp_note *n);
/*
 * roots.c: the root item of tree n->tree points at its newer root, tree
 * block n->inode (generation n->want, level n->want2), read again first;
 * the commit writes bytenr, generation, level and generation_v2.
 */
int rp_fix_root_newer(struct rp_ctx *c, const struct rp_note *n);
/* scrub.c: every bad copy rewritten from a good one (lib/scrub), before the transaction */
int rp_scrub(struct rp_ctx *c, const struct rp_note *n);
/* extents.c: the refs count of the extent item at n->key becomes n->want */
int rp_fix_extent_refs(struct rp_ctx *c, const struct rp_note *n);
/*
 * Tree block n->key.objectid's extent item made again (owner n->want, pointed
 * at from node n->want2, 0: a root item), or a stray one (n->key) removed; the
 * allocator follows. rp_extent_claim: before anything is allocated, the
 * space of the blocks that get their item back is taken out of the free
 * space the repair's open found (the extent tree said it was free).
 */
int rp_fix_extent_add(struct rp_ctx *c, const struct rp_note *n);
int rp_fix_extent_del(struct rp_ctx *c, const struct rp_note *n);
int rp_extent_claim(struct rp_ctx *c, struct rp_note *n);
/*
 * Every file extent item of every subvolume (each leaf once) that points at
 * the data of a DATA_ADD note: its references, grouped as the kernel keeps
 * them. Before rp_extent_claim; -ESTALE when what is found is not what the
 * check counted.
 */
int rp_data_scan(struct rp_ctx *c);
/* Data at n->key.objectid gets its extent item back, from the file extent items in leaf n->want2. */
int rp_fix_data_add(struct rp_ctx *c, const struct rp_note *n);
/* block_refs.c: the flags of the extent item of the tree block at `parent` (FULL_BACKREF decides how its children are referenced) */
int rp_parent_flags(struct rp_ctx *c, uint64_t parent, uint64_t *flags);
/*
 * block_refs.c: a reference of tree block n->key.objectid, for the pointer
 * from node n->want2 (0: the root item of tree n->want), added in the form
 * the kernel gives it; the reference (type n->want, value n->want2) at n->key
 * (inline in the extent item, or a keyed item) removed. The count is not
 * touched: it is the EXTENT_REFS cure's, run first.
 */
int rp_fix_block_ref_add(struct rp_ctx *c, const struct rp_note *n);
int rp_fix_block_ref_del(struct rp_ctx *c, const struct rp_note *n);
/*
 * Whether tree block eb, which lost its extent item, had full back
 * references: a child of it (a tree block, or the data a file extent item of
 * it points at) has a SHARED reference naming it, the kernel's mark of one.
 */
int rp_block_full_backref(struct rp_ctx *c, const struct ub_eb *eb, bool *full);
/* devid's DEV_ITEM bytes_used (the chunk tree's and the superblocks' copies) becomes n->want. */
int rp_fix_dev_used(struct rp_ctx *c, const struct rp_note *n);
/* extents.c: a data reference's surplus over the file extent items that make it dropped (the commit's queue) */
int rp_fix_data_ref_drop(struct rp_ctx *c, const struct rp_note *n);
/* the superblocks' num_devices set to n->want, the device items' count */
int rp_fix_num_devices(struct rp_ctx *c, const struct rp_note *n);
/* qgroups.c: a qgroup's counts set (the QGROUP_INFO item at n->key); the status item's generation the transaction's */
int rp_fix_qgroup(struct rp_ctx *c, const struct rp_note *n);
int rp_qgroup_status(struct rp_ctx *c);
/* gens.c: an inode's generation and transid from the future set to the transaction's; extents.c: an extent item's to n->want */
int rp_fix_inode_gen(struct rp_ctx *c, const struct rp_note *n);
int rp_fix_extent_gen(struct rp_ctx *c, const struct rp_note *n);
/*
 * --init-csum-tree (csum.c): the checksum tree rebuilt from every copy of the
 * data the file trees reference, in c->t (c->e NULL: a dry run, said only).
 */
int rp_init_csum_tree(struct rp_ctx *c);
/*
 * --init-extent-tree (init_extent.c). rp_init_extent_scan: every tree of the
 * last commit walked; with c->e (opened UB_ENGINE_OPEN_REPAIR_EXTENTS) what
 * it found is taken out of the allocator's free space, before anything is
 * allocated; without (a dry run) it opens the devices read-only and says
 * what the rebuild would hold. rp_init_extent_tree, first in c->t: the new
 * tree. rp_init_extent_free: what the scan kept, dropped (safe twice).
 */
int rp_init_extent_scan(struct rp_ctx *c);
int rp_init_extent_tree(struct rp_ctx *c);
void rp_init_extent_free(struct rp_ctx *c);

/*
 * salvage.c: every UB_CHK_FIX_SALVAGE note's block (n->inode, of tree
 * n->tree) read leniently from c->paths, before the engine opens: a copy
 * whose items the salvage's cures mend is handed to the tree layer
 * (ub_tree_salvage_put), a note whose block has none is dropped (said).
 * rp_salvage_cow copies the block on write in its tree (in c->t);
 * rp_salvage_names makes the names a dropped entry held whole again;
 * rp_salvage_space: a block group's used bytes must be recounted;
 * rp_salvage_done empties the tree layer's list (always, after the run).
 */
int rp_salvage_prepare(struct rp_ctx *c);
bool rp_salvage_space(const struct rp_ctx *c);
int rp_salvage_cow(struct rp_ctx *c, const struct rp_note *n);
int rp_salvage_names(struct rp_ctx *c);
void rp_salvage_done(struct rp_ctx *c);
/*
 * After the commit that let salvaged blocks in: what they hold was never
 * checked (the check could not read them). rp_salvaged: some were;
 * rp_salvage_recheck runs the checker on the engine's committed filesystem,
 * its problems noted into r2, for a second round of cures.
 */
bool rp_salvaged(const struct rp_ctx *c);
int rp_salvage_recheck(struct rp_ctx *c, struct ub_repair *r2);

#endif
