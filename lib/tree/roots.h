/* SPDX-License-Identifier: MIT */
/*
 * One root object per tree, shared by the readers (lib/fs) and the writer
 * (lib/txn): a table by objectid, filled from the superblock and the root
 * tree's ROOT_ITEMs.
 *
 * Lifetime: an object is created on the first lookup of its tree (or when the
 * writer adds a new tree) and lives, at the same address, until the table is
 * destroyed with the filesystem. A tree that stops existing (an aborted
 * creation, a tree the cleaner dropped) keeps its object, marked empty: root
 * and committed have bytenr 0. Callers therefore hold plain pointers.
 *
 * Two roots per object: `root` is the writer's (moved in place by
 * copy-on-write during a transaction), `committed` is what the last commit
 * left on disk. Readers use only `committed`, so a reader outside the
 * transaction sees the last commit while the next one is being built.
 *
 * Threads: the table's mutex guards additions to the list and every object's
 * `committed`.
 * Readers take a copy of `committed` through ub_roots_committed() (never
 * read the field directly); lookups and additions take the mutex themselves.
 * The writer (one thread, the one running the transaction) owns `root` and
 * the ROOT_ITEM bookkeeping without locking, and publishes a commit or an
 * abort with ub_roots_lock()/ub_roots_unlock() around its updates of
 * `committed` (and of `root` on abort). Block reads are the tree context's
 * business, not the table's.
 *
 * Readers load objects from the committed root tree, the writer from its live
 * one; both agree because the writer changes a tree's root or ROOT_ITEM
 * bookkeeping only through the tree's object (ub_engine_root first), and adds
 * the object of a tree it creates right after inserting its ROOT_ITEM.
 */
#ifndef UBTRFS_TREE_ROOTS_H
#define UBTRFS_TREE_ROOTS_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include "tree/tree_priv.h"

struct ub_eroot {
	uint64_t objectid;       /* set when the object is made, never changed: lookups read it without the writer */
	struct ub_root root;     /* live: moved by copy-on-write (the writer's) */
	uint64_t item_offset;    /* key offset of its ROOT_ITEM (0, or the snapshot's transid) */
	uint64_t last_snapshot;  /* from the ROOT_ITEM: blocks not newer than this may be shared */
	bool shareable;          /* a subvolume tree (snapshots may share its blocks) */
	bool has_item;           /* has a ROOT_ITEM in the root tree (not the root and chunk trees) */
	/* what is in the ROOT_ITEM (or the superblock) now, to tell whether it must be rewritten */
	uint64_t item_bytenr, item_generation, item_last_snapshot;
	uint8_t item_level;
	struct ub_root committed; /* as the last commit left it (abort goes back there); under the mutex */
	struct ub_eroot *next;
	/*
	 * A file operation changed an inode of this subvolume in the running
	 * transaction: the commit sets the ROOT_ITEM's ctransid and ctime (at
	 * touch_sec/nsec), as the kernel does on every inode update, so that send
	 * and `subvolume show` see the change. The writer's; an abort clears it.
	 */
	bool touched;
	int64_t touch_sec;
	uint32_t touch_nsec;
	/*
	 * The next inode number the writer hands out in this subvolume, 0 until
	 * its first use counts it from the tree (lib/fsw/inode.c). Kept
	 * with the object, so it lives exactly as long as the open filesystem
	 * and never goes back: a number names one inode while the filesystem is
	 * open, whatever was freed or aborted meanwhile. Changed with atomics.
	 */
	uint64_t next_ino;
};

/*
 * Reader epochs: every reader of a commit is counted here, under the
 * mutex, with that commit's generation, for as long as it reads it; space
 * a later commit frees is handed out again only once no reader of an older
 * commit is left (lib/alloc/alloc.h, ub_alloc_commit_pins).
 */
struct ub_reader_gen {
	uint64_t gen;
	uint64_t count;
};

struct ub_roots {
	pthread_mutex_t lock;
	struct ub_eroot *list;   /* root and chunk trees first, then in load order */
	struct ub_reader_gen *readers; /* generations being read, oldest first */
	int nreaders, capreaders;
};

void ub_roots_init(struct ub_roots *rs);
/* Frees every object: no pointer to one may outlive this. */
void ub_roots_destroy(struct ub_roots *rs);

/* The object of tree `objectid` if the table has one (empty or not), else NULL. */
struct ub_eroot *ub_roots_find(struct ub_roots *rs, uint64_t objectid);

/*
 * A tree from the superblock (has_item false) or one the writer has just
 * created with its ROOT_ITEM (has_item true): root = r, committed = r for the
 * former, empty for the latter (an abort takes it back to nothing). An empty
 * object of the same tree is reused; -EEXIST if the tree has a live one.
 */
int ub_roots_add(struct ub_roots *rs, const struct ub_root *r, bool has_item, struct ub_eroot **out);

/*
 * The object of tree `objectid`, loaded on first use from its ROOT_ITEM
 * (newest key offset) in the root tree whose root is `root_tree`: readers pass
 * the committed root tree, the writer its live one. An object already in the
 * table is returned as it is, empty or not (readers see emptiness through
 * ub_roots_committed, the writer in root.bytenr). 0; -ENOENT if there is no
 * such ROOT_ITEM; -EUCLEAN (named in the log) for an unusable item; <0 from
 * the reads.
 */
int ub_roots_load(struct ub_roots *rs, struct ub_tree_ctx *tc, const struct ub_root *root_tree, uint64_t objectid,
		  struct ub_eroot **out);

/*
 * The root of tree `objectid` as the ROOT_ITEM (newest key offset) in the
 * root tree `root_tree` gives it, and the item's key offset and last
 * snapshot (either may be NULL), without touching the table: 0, -ENOENT,
 * -EUCLEAN (named in the log), <0 from the reads.
 */
int ub_roots_read_item(struct ub_tree_ctx *tc, const struct ub_root *root_tree, uint64_t objectid,
		       struct ub_root *out, uint64_t *item_offset, uint64_t *last_snapshot);

/* A copy of er's committed root: 0, or -ENOENT when er is NULL or empty. */
int ub_roots_committed(struct ub_roots *rs, const struct ub_eroot *er, struct ub_root *out);

/*
 * Iteration: the list only grows, at its end, and an object's link is set
 * once (with release order), so walking it needs no lock; an object added
 * meanwhile may or may not be seen.
 */
static inline struct ub_eroot *ub_roots_first(struct ub_roots *rs)
{
	return __atomic_load_n(&rs->list, __ATOMIC_ACQUIRE);
}

static inline struct ub_eroot *ub_roots_next(const struct ub_eroot *er)
{
	return __atomic_load_n(&er->next, __ATOMIC_ACQUIRE);
}

/*
 * A reader starts on the last commit: *gen is its generation (the committed
 * root tree's), counted until ub_roots_reader_exit, and *rt, *ct that
 * commit's root and chunk tree roots. Taken under the mutex, so a commit
 * published meanwhile is either wholly seen or not at all.
 */
int ub_roots_reader_enter(struct ub_roots *rs, const struct ub_eroot *root_tree, const struct ub_eroot *chunk_tree,
			  uint64_t *gen, struct ub_root *rt, struct ub_root *ct);
void ub_roots_reader_exit(struct ub_roots *rs, uint64_t gen);
/* The oldest generation a reader still reads, UINT64_MAX with none (_locked: the mutex held). */
uint64_t ub_roots_oldest_reader(struct ub_roots *rs);
uint64_t ub_roots_oldest_reader_locked(const struct ub_roots *rs);

/* The writer's publication of a commit or an abort (see Threads above). */
void ub_roots_lock(struct ub_roots *rs);
void ub_roots_unlock(struct ub_roots *rs);

#endif
