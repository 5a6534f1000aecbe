/* SPDX-License-Identifier: MIT */
/* The file tree pass's state, shared by fs_tree.c (the inode stream) and fs_names.c (names across inodes). */
#ifndef UBTRFS_CHECK_FS_TREE_H
#define UBTRFS_CHECK_FS_TREE_H

#include "check/chunks.h"

/* The kinds of record that make one name of an inode, in the order they sort. */
enum { NAME_REF, NAME_ITEM, NAME_INDEX };

/*
 * One record of a name: an INODE_REF/EXTREF entry (in the child's items), a
 * DIR_ITEM or a DIR_INDEX entry (in the directory's). The three of one link
 * share directory, child, name hash and length, so sorting brings them together.
 */
struct chk_name {
	uint64_t dir, child;
	uint64_t index;  /* the directory index (refs and DIR_INDEX), 0 for DIR_ITEM */
	uint32_t hash;   /* the name's hash */
	uint32_t hash2;  /* another hash of the name: two names of one hash and length are two links */
	uint16_t len;
	uint8_t type;    /* BTRFS_FT_*: the entry's, or the child's own mode for a ref (0: unknown) */
	uint8_t kind;
	uint32_t seq;    /* the order the stream met it in: the last tiebreak of the sort */
};

/* What one inode's items have said so far. */
struct finode {
	uint64_t ino;
	bool item; /* its INODE_ITEM was seen */
	uint32_t mode;
	uint64_t nlink, size, nbytes, flags;
	uint64_t names;       /* entries of its INODE_REF and INODE_EXTREF items */
	uint64_t dir_bytes;   /* name bytes of its DIR_ITEM and DIR_INDEX entries */
	uint64_t dir_entries;
	uint64_t extents;
	uint64_t ext_start, ext_end; /* first file offset an extent covers, end of the last one */
	uint64_t gap;         /* start of the first range no extent covers (UINT64_MAX: none) */
	uint64_t found;       /* bytes its extents account for: what nbytes must say */
	size_t first_name;    /* f->names[first_name..] were added while the stream was in this inode */
};

/* Data a file extent needs checksums for: [start, +len) of the address space. */
struct chk_csum_need {
	uint64_t start, len;
	uint64_t tree, ino, offset; /* the file extent item's place */
};

struct fstate {
	struct cstate s; /* first: chk_scan_tree hands it back to the item callback */
	uint64_t tree, root_dirid;
	bool no_holes;
	uint64_t gen_limit; /* no inode generation or transid above this */
	struct finode cur;
	bool saw_root_dir;
	/*
	 * Names (fs_names.c): the records of the inode being streamed; those
	 * whose other inode comes later in the stream, in a heap by the inode
	 * that completes their link; and the links found wrong, kept for the
	 * report at the end of the subvolume.
	 */
	struct chk_name *names;
	size_t nnames, names_cap;
	struct chk_name *pending;
	size_t npending, pending_cap;
	struct chk_name *kept;
	size_t nkept, kept_cap;
	struct chk_name *cand;
	size_t ncand, cand_cap;
	uint32_t name_seq;
	uint64_t *unlinked; /* inodes with nlink 0: each needs an orphan item */
	size_t nunlinked, unlinked_cap;
	uint64_t *orphans;
	size_t norphans, orphans_cap;
	bool nomem;
	/* the fsync log's trees are streamed (chk_log_items): the item rules only, said as the log's */
	bool log;
	uint64_t log_subvol;
	/* every subvolume's, until the checksum tree is read once at the end */
	struct chk_csum_need *needs;
	size_t nneeds, needs_cap;
	uint32_t csum_size;
};

void chk_fs_where(struct ub_chk_problem *p, const struct fstate *f, uint64_t ino, uint64_t type, uint64_t offset);
/* The second hash of a name (chk_name.hash2). */
uint32_t chk_name_hash2(const uint8_t *name, uint32_t len);
/* One record of a name, of the inode being streamed; 0 or -ENOMEM. */
int chk_name_add(struct fstate *f, const struct chk_name *n);
/*
 * The stream leaves inode `ino`: its records join the links they belong to;
 * a link whose two inodes have both been streamed is complete, and is
 * dropped when its records agree or kept for the report when they do not.
 */
void chk_names_flush(struct fstate *f, uint64_t ino);
/* The end of a subvolume: the kept links and those never completed, reported (the state is reset). */
void chk_names_check(struct fstate *f);
void chk_names_free(struct fstate *f);
/* fs_csums.c: a file extent's data needs checksums; then all of them against the checksum tree. */
void chk_csum_need(struct fstate *f, const struct ub_key *k, uint64_t start, uint64_t len);
int chk_csum_needs_check(struct fstate *f);
/* Every inode with nlink 0 against the orphan items. */
void chk_orphans_check(struct fstate *f);
/*
 * fs_items.c: the rules of one item that need no other (an inode item, a
 * file extent item, a name of `kind` for inode `ino`), for the subvolume
 * trees and the fsync log alike; then every item of the fsync log's trees
 * (0 or -ENOMEM).
 */
void chk_inode_rules(struct fstate *f, const struct ub_key *k, const uint8_t *d, uint32_t size);
void chk_extent_rules(struct fstate *f, const struct ub_key *k, const uint8_t *d, uint32_t size);
void chk_name_rules(struct fstate *f, const struct ub_key *k, uint64_t ino, const char *kind, const uint8_t *name,
		    uint32_t len);
int chk_log_items(struct fstate *f);

#endif
