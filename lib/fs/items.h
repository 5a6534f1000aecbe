/* SPDX-License-Identifier: MIT */
/*
 * The items of one inode, whichever way they come: straight from the
 * subvolume tree, or from an in-memory set that the fsync log replay built
 * (the on-disk items with the log applied). The rest of lib/fs reads inode
 * items only through this cursor, so replayed inodes look like any other.
 */
#ifndef UBTRFS_FS_ITEMS_H
#define UBTRFS_FS_ITEMS_H

#include "fs/fs_priv.h"

struct ub_item {
	struct ub_key key;
	uint32_t size;
	uint8_t *data;
};

/* One inode's items, sorted by key, owned by the set. */
struct ub_itemset {
	uint64_t subvol, ino;
	struct ub_item *items;
	size_t n, cap;
};

struct ub_icur {
	struct ub_fs *fs;
	uint64_t subvol, ino;
	struct ub_root root; /* the view's root at open: the cursor reads one state throughout */
	struct ub_path path;
	const struct ub_itemset *set; /* non-NULL: replayed inode */
	size_t idx;
	bool valid;
};

/* Open a cursor over inode `ino` of `subvol` (not positioned yet). */
int ub_icur_open(struct ub_fs *fs, uint64_t subvol, uint64_t ino, struct ub_icur *cur);
/* Same, but always the on-disk items, ignoring any replay (used by the replay itself). */
int ub_icur_open_disk(struct ub_fs *fs, uint64_t subvol, uint64_t ino, struct ub_icur *cur);
void ub_icur_close(struct ub_icur *cur);
/* First item of this inode >= (type, offset): 0 positioned, 1 none, <0 error. */
int ub_icur_seek(struct ub_icur *cur, uint8_t type, uint64_t offset);
/* Last item of this inode <= (type, offset): 0 positioned, 1 none, <0 error. */
int ub_icur_seek_le(struct ub_icur *cur, uint8_t type, uint64_t offset);
/*
 * The file extent item that covers `off` (the last one starting at or before
 * it), else the first after it; an item of another type may be where it
 * stops (the caller checks the key): 0 positioned, 1 none, <0 error.
 */
int ub_icur_seek_extent(struct ub_icur *cur, uint64_t off);
/* Next item of this inode: 0 positioned, 1 no more, <0 error. */
int ub_icur_next(struct ub_icur *cur);
/* ub_icur_next without reading a block: 2 (cursor left as it was) when the next item is in another leaf. */
int ub_icur_next_here(struct ub_icur *cur);
void ub_icur_key(const struct ub_icur *cur, struct ub_key *key);
const uint8_t *ub_icur_data(const struct ub_icur *cur, uint32_t *size);

/* Item sets (itemset.c) */
struct ub_itemset *ub_itemset_new(uint64_t subvol, uint64_t ino);
void ub_itemset_free(struct ub_itemset *set);
/* Index of the first item >= key. */
size_t ub_itemset_lower(const struct ub_itemset *set, const struct ub_key *key);
/* Insert or replace the item with this key (data copied). */
int ub_itemset_put(struct ub_itemset *set, const struct ub_key *key, const uint8_t *data, uint32_t size);
void ub_itemset_del(struct ub_itemset *set, size_t idx);
struct ub_item *ub_itemset_find(const struct ub_itemset *set, const struct ub_key *key);

/* Replay the fsync log into memory (at open); 0 when there is no log. */
int ub_replay_log(struct ub_fs *fs);
void ub_replay_free(struct ub_replay *rp);
/* Overlay the log's data checksums on csums/have for sectors [logical, +nsec). */
void ub_replay_csums(const struct ub_fs *fs, uint64_t logical, uint64_t nsec, uint8_t *csums, uint8_t *have);
/*
 * Checksums of deleted extents restore registered (loose_csum.c), for the
 * sectors the trees gave none: have[i] 1 with one, UB_CSUM_UNKNOWN for a
 * sector of such an extent that has none (it must not pass as verified).
 */
#define UB_CSUM_UNKNOWN 2
void ub_loose_csums(const struct ub_fs *fs, uint64_t logical, uint64_t nsec, uint8_t *csums, uint8_t *have);

/* The replay's sets for this fs (log_replay.c); NULL when the inode was not touched by the log. */
const struct ub_itemset *ub_replay_lookup(const struct ub_fs *fs, uint64_t subvol, uint64_t ino);
/* The published loose set of an inode (loose.c), or NULL. */
const struct ub_itemset *ub_loose_lookup(const struct ub_fs *fs, uint64_t subvol, uint64_t ino);

/*
 * The names packed in one INODE_REF or INODE_EXTREF item (key: its key):
 * fn(arg, parent, index, name, len) for each whole one, until fn returns
 * non-zero, which is returned (0 at the item's end; a name running past the
 * item ends it).
 */
typedef int (*ub_ref_fn)(void *arg, uint64_t parent, uint64_t index, const char *name, uint32_t len);
int ub_ref_item_each(const struct ub_key *key, const uint8_t *d, uint32_t size, ub_ref_fn fn, void *arg);

#endif
