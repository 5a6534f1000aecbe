/* SPDX-License-Identifier: MIT */
/*
 * What the parts of a scavenging session share: the candidates the scan
 * found, the inodes kept for the leaves, the held files.
 */
#ifndef UBTRFS_RECOVER_PRIV_H
#define UBTRFS_RECOVER_PRIV_H

#include "ubtrfs/recover.h"

struct rc_cand {
	uint64_t subvol, ino;
};

struct rc_candv {
	struct rc_cand *v;
	size_t n, cap;
};

struct rc_held {
	uint64_t subvol, ino, gen; /* gen: of the root the caller read it from */
	uint64_t inode_gen;        /* the inode's own generation: a later version must be the same file */
	uint64_t tag;
	size_t order;              /* when it was held: equal inodes keep that order */
	bool fresh;
	bool bad_csums;            /* some of its newer data's checksums could not be looked for */
};

struct ub_recover {
	struct ub_fs *fs;
	struct ub_recover_opts o;
	struct rc_candv cands;     /* inode items of inodes not reached */
	struct rc_candv lost;      /* no tree gives them: from the leaves */
	struct rc_candv gone;      /* deleted, no older root has them (undelete): from the leaves */
	uint8_t *gone_bad;         /* per gone inode: its data cannot be checked */
	uint8_t *placed;           /* per lost inode: put back at a name */
	struct rc_held *held;
	size_t nheld, held_cap;
	size_t nfresh;
	uint8_t *buf;              /* the newer check's reads */
};

int rc_cand_add(struct rc_candv *cv, uint64_t subvol, uint64_t ino);
int rc_cand_cmp(const void *a, const void *b);
/* The index of (subvol, ino) in the sorted cv, or -1. */
long rc_cand_index(const struct rc_candv *cv, uint64_t subvol, uint64_t ino);
/* The first held file (once sorted) of `subvol` with an inode >= `ino` (rc->nheld: none). */
size_t rc_held_lower(const struct ub_recover *rc, uint64_t subvol, uint64_t ino);
void rc_held_sort(struct ub_recover *rc);
/* Leaves of subvolume trees: the only ones scavenging reads. */
bool rc_want_fs_leaf(void *arg, uint64_t owner, uint64_t generation, int level);
/* A scan's progress (its arg is the session) to the caller's. */
void rc_progress(void *arg, uint64_t done, uint64_t total);
#define RC_PROGRESS(rc) ((rc)->o.progress ? rc_progress : NULL)

#endif
