/* SPDX-License-Identifier: MIT */
/*
 * Recovery: what a damaged filesystem still holds beyond what its trees
 * reach, found once for every caller (restore copies it out, a repair names
 * the files a lost block held). Nothing here prints or writes: each finding
 * goes to the caller's callback, and the caller decides where it goes.
 *
 * Older roots (ub_older_roots_*): the backup roots and the root trees a scan
 * of the metadata finds, newest first, each opened as a filesystem of its
 * own: the second chance for a directory, an inode or a file's extents the
 * root in use cannot give.
 *
 * Scavenging (ub_recover_*): inode items in leaves of subvolume trees (live
 * or old copies a scan of the metadata block groups finds) whose inode no
 * name the caller followed reached; each is looked up in the live tree, then
 * in the older roots, and one no tree gives is rebuilt from the leaves
 * themselves (loose inodes, rootscan.h). Files the caller read from a root
 * older than the last commit can be held: the scan tells whether intact
 * leaves of a later commit give them newer, whole and verified.
 */
#ifndef UBTRFS_RECOVER_H
#define UBTRFS_RECOVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "ubtrfs/fs.h"
#include "ubtrfs/rootscan.h"
#include "ubtrfs/api.h"

UB_API_BEGIN

/* ---- older roots ---- */

struct ub_older_roots;

/*
 * Open the filesystem again at the root tree at `root_bytenr`, read-only,
 * with a tree block cache of `cache_bytes`, saying nothing of its damage:
 * the caller knows how it opened `fs` (its devices, its options).
 */
typedef int (*ub_older_open_fn)(void *arg, uint64_t root_bytenr, uint64_t cache_bytes, struct ub_fs **out);

/*
 * The older roots of `fs`, whose root in use is of `generation`: only roots
 * older than that, whose root block reads, at most a few, opened on the first
 * ub_older_roots_get (an undamaged filesystem never pays for the scan).
 */
int ub_older_roots_new(struct ub_fs *fs, uint64_t generation, ub_older_open_fn open, void *arg,
		       struct ub_older_roots **out);
/*
 * Older root i (0: the newest): 0 and its filesystem and generation, -ENOENT
 * past the last (or with `o` NULL: no older roots). Thread-safe.
 */
int ub_older_roots_get(struct ub_older_roots *o, int i, struct ub_fs **fs, uint64_t *generation);
/*
 * The inode entry `de` leads to, from the newest older root that gives it:
 * 0 and *in, *fs, *generation; -ENOENT when none does.
 */
int ub_older_roots_dirent_inode(struct ub_older_roots *o, const struct ub_dirent *de, struct ub_inode *in,
				struct ub_fs **fs, uint64_t *generation);
/*
 * From older root *i on, the next one other than `skip` that holds the same
 * file as `in` (same inode generation, same size): 0, *old as that root has
 * it, *fs, *generation, and *i past it for the next call; -ENOENT when no
 * root is left. For data the root in use cannot find: never for data that
 * fails its checksum (an older root would give older bytes there).
 */
int ub_older_roots_same_file(struct ub_older_roots *o, int *i, const struct ub_inode *in, const struct ub_fs *skip,
			     struct ub_inode *old, struct ub_fs **fs, uint64_t *generation);
/* Closes every root opened (NULL: nothing). */
void ub_older_roots_free(struct ub_older_roots *o);

/* ---- scavenging ---- */

struct ub_recover;

struct ub_recover_opts {
	uint64_t last_commit;          /* the superblock's generation: a leaf newer was never committed */
	struct ub_older_roots *older;  /* second chances (NULL: none) */
	bool undelete;                 /* deleted inodes: looked for in the older roots, then the leaves */
	/* a subvolume the caller went into: inodes of others are not candidates */
	bool (*subvol_wanted)(void *arg, uint64_t subvol);
	/* an inode the caller reached by its names already: not a candidate */
	bool (*reached)(void *arg, uint64_t subvol, uint64_t ino);
	ub_scan_progress_fn progress;  /* of each scan of the metadata */
	void *arg;
};

int ub_recover_new(struct ub_fs *fs, const struct ub_recover_opts *opts, struct ub_recover **out);
void ub_recover_free(struct ub_recover *rc);

/*
 * Hold a file read from a root of `root_generation` (its inode `in`): 1 held,
 * 0 not needed (that root is the last commit's), -ENOMEM. `tag` is the
 * caller's, handed back by ub_recover_held_get.
 */
int ub_recover_hold(struct ub_recover *rc, const struct ub_inode *in, uint64_t root_generation, uint64_t tag);

struct ub_recover_held {
	uint64_t subvol, ino, root_generation, tag;
	bool fresh; /* a leaf of a later commit (up to the last) holds its inode item */
};
/* After ub_recover_scan the held files are in (subvolume, inode) order. */
size_t ub_recover_held_count(const struct ub_recover *rc);
int ub_recover_held_get(const struct ub_recover *rc, size_t i, struct ub_recover_held *out);
/*
 * After ub_recover_gather: held file i as the later leaves give it, when it is
 * the same file changed later and every byte of it reads and verifies: 0 and
 * *out (read it through the fs of ub_recover_new). -ESTALE: not so, the
 * version the caller read stands.
 */
int ub_recover_held_newer(struct ub_recover *rc, size_t i, struct ub_inode *out);

/*
 * Scan the metadata for inode items of subvolume trees: the candidates
 * (inodes neither reached nor of a subvolume left out), and the held files a
 * later leaf has. A failed scan leaves what it found so far, and says why.
 */
int ub_recover_scan(struct ub_recover *rc);
/* How many held files the scan marked fresh. */
size_t ub_recover_nfresh(const struct ub_recover *rc);

enum ub_recover_kind {
	UB_RECOVER_FOUND,      /* a tree has it: `in` from `fs` (generation: the older root's, 0 the live one) */
	UB_RECOVER_DELETED,    /* the live tree says it is gone or unlinked; `undeleted`: `in` from `fs` */
	UB_RECOVER_LOST,       /* no readable tree has it: ub_recover_gather gathers its items */
	UB_RECOVER_UNREADABLE, /* err says why */
};

struct ub_recover_inode {
	uint64_t subvol, ino;
	enum ub_recover_kind kind;
	int err;
	bool undeleted;     /* DELETED: a copy was found (in, fs, generation) */
	bool loose;         /* `in` is from the leaves the scan found, not from a tree */
	bool unchecked;     /* its data's checksums cannot all be looked for: not to be trusted */
	struct ub_inode in;
	struct ub_fs *fs;
	uint64_t generation;
};
/* A non-zero return stops the calls and is returned. */
typedef int (*ub_recover_inode_fn)(void *arg, const struct ub_recover_inode *ri);

/*
 * Each candidate once, in (subvolume, inode) order: FOUND, DELETED (with
 * undelete, from the newest older root that still has it linked, when one
 * does; a directory gives nothing), LOST (kept for the leaves), UNREADABLE.
 */
int ub_recover_classify(struct ub_recover *rc, ub_recover_inode_fn fn, void *arg);

/* Is there anything for ub_recover_gather: lost or deleted inodes kept, held files a later leaf has? */
bool ub_recover_pending(const struct ub_recover *rc);
/*
 * Scan again for the leaves holding those inodes' items and publish them as
 * loose inodes of the fs. Only while no other thread reads the fs.
 */
int ub_recover_gather(struct ub_recover *rc);
/*
 * Then (when deleted or newer held files were gathered) the checksum-tree
 * leaves their data is checked against; a failure leaves sectors without a
 * checksum, which read as lost, never as good.
 */
int ub_recover_gather_csums(struct ub_recover *rc);

/*
 * Put a lost inode `in` back at `name` in directory `dir`: 0 placed, -EAGAIN
 * the directory is not known yet (a later pass may know it), any other error:
 * not placed there (the name is taken).
 */
typedef int (*ub_recover_place_fn)(void *arg, const struct ub_inode *in, uint64_t dir, const char *name);
/*
 * The lost inodes at their names, parents before children (a directory put
 * back makes its own entries' names placeable), each name tried once; a
 * directory takes one name.
 */
int ub_recover_place(struct ub_recover *rc, ub_recover_place_fn fn, void *arg);
/*
 * Every lost inode not placed: FOUND (from the leaves), DELETED (unlinked) or
 * UNREADABLE; with `err` (a failed gather) every one is UNREADABLE so.
 */
int ub_recover_unplaced(struct ub_recover *rc, int err, ub_recover_inode_fn fn, void *arg);
/*
 * Deleted inodes no older root had, from the leaves (undelete): each that
 * reads, linked and not a directory, DELETED and undeleted (`unchecked` when
 * its data cannot be verified).
 */
int ub_recover_deleted(struct ub_recover *rc, ub_recover_inode_fn fn, void *arg);

UB_API_END

#endif
