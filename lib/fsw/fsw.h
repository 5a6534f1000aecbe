/* SPDX-License-Identifier: MIT */
/* Between the files of the file API (lib/fsw/), the writers above the engine. */
#ifndef UBTRFS_FSW_FSW_H
#define UBTRFS_FSW_FSW_H

#include <stdbool.h>
#include <stdint.h>
#include "ubtrfs/format.h"
#include "fs/fs_priv.h"
#include "ubtrfs/fswrite.h"
#include "txn/txn.h"

#define UB_II_SIZE ((uint32_t)sizeof(struct btrfs_inode_item))
#define UB_DI_SIZE ((uint32_t)sizeof(struct btrfs_dir_item))
#define UB_FE_SIZE ((uint32_t)sizeof(struct btrfs_file_extent_item))

/* One call's view: the transaction and the subvolume tree it changes. */
/* the largest file: the kernel's MAX_LFS_FILESIZE (s_maxbytes of btrfs, and of FUSE) */
#define FSW_MAX_FILE_SIZE ((uint64_t)INT64_MAX)

struct fsw {
	struct ub_txn *t;
	struct ub_engine *e;
	struct ub_tree_ctx *tc;
	struct ub_tree_alloc *ta;
	struct ub_eroot *fs;
	uint64_t subvol;
	struct ub_timespec now;
	int compress, level; /* for new data extents (UB_COMPRESS_*; 0 none) */
};

/* fsw_init: for a change (-EROFS in a read-only subvolume); fsw_init_ro: for a look */
int fsw_init(struct fsw *w, struct ub_txn *t, uint64_t subvol);
int fsw_init_ro(struct fsw *w, struct ub_txn *t, uint64_t subvol);

/* inode item copies: get (-ENOENT), put (the item exists) */
int fsw_inode_get(struct fsw *w, uint64_t ino, uint8_t ii[UB_II_SIZE]);
int fsw_inode_put(struct fsw *w, uint64_t ino, const uint8_t ii[UB_II_SIZE]);
/* transid and sequence bumped, the given times set to now */
void fsw_inode_touch(struct fsw *w, uint8_t *ii, bool mtime, bool ctime);
void fsw_set_time(uint8_t *ii, size_t off, const struct ub_timespec *ts);

/* delete the item with exactly this key in `root` (-ENOENT) */
int fsw_del_key(struct fsw *w, struct ub_root *root, const struct ub_key *key);
/* every item of objectid `ino` with type in [tmin, tmax] */
int fsw_del_all(struct fsw *w, uint64_t ino, uint8_t tmin, uint8_t tmax);
/* the item is a sequence of dir_item records (DIR_ITEM, XATTR_ITEM): find `name`: 0 and its position */
int fsw_dir_item_find(const uint8_t *d, uint32_t size, const char *name, size_t len, uint32_t *pos, uint32_t *esize);
/*
 * insert one record into the item at key (the item is created, or the record
 * appended: a hash collision, another ref); -EOVERFLOW when the item cannot grow
 */
int fsw_dir_item_add(struct fsw *w, const struct ub_key *key, const uint8_t *rec, uint32_t rsize);
/* remove `name`'s record from the item at key (the item goes with its last record) */
int fsw_dir_item_del(struct fsw *w, const struct ub_key *key, const char *name, size_t len);

/* inode.c: a new inode item (no name) inheriting dii's flags: its number in *out */
int fsw_alloc_inode(struct fsw *w, const uint8_t *dii, uint32_t mode, uint32_t uid, uint32_t gid, uint64_t rdev,
		    uint32_t nlink, uint64_t *out);
/* every item of an inode that lost its last name, with its data */
int fsw_evict(struct fsw *w, uint64_t ino, uint8_t *ii);
/* one xattr set, the inode's times untouched (its creation, or ub_fsw_setxattr before its touch) */
int fsw_xattr_set(struct fsw *w, uint64_t ino, const char *name, size_t nlen, const void *value, size_t vlen,
		  int flags);
/* orphan.c: the subvolume's ORPHAN item for ino, added / deleted (-ENOENT when there is none) */
int fsw_orphan_add(struct fsw *w, uint64_t ino);
int fsw_orphan_del(struct fsw *w, uint64_t ino);

/* the next inode number of w's subvolume; take: hand it out, else start counting afresh from the tree as it is */
int fsw_next_ino(struct fsw *w, bool take, uint64_t *ino);

/* names (write_inode.c) */
int fsw_check_name(const char *name, size_t len);
int fsw_get_dir(struct fsw *w, uint64_t dir, uint8_t ii[UB_II_SIZE]);
int fsw_next_index(struct fsw *w, uint64_t dir, uint64_t *index);
/* name in dir: 0 and the dir item's location key (INODE_ITEM, or ROOT_ITEM for a subvolume) and type */
int fsw_lookup(struct fsw *w, uint64_t dir, const char *name, size_t len, struct ub_key *loc, uint8_t *type);
/* the same from outside: the name checked, dir a directory of subvol (for a look, no change) */
int fsw_lookup_name(struct ub_txn *t, uint64_t subvol, uint64_t dir, const char *name, size_t len,
		    struct ub_key *loc, uint8_t *type);
/* a name's back reference in ino (INODE_REF, or INODE_EXTREF when the ref item is full) added / removed */
int fsw_add_ref(struct fsw *w, uint64_t ino, uint64_t parent, const char *name, size_t len, uint64_t index);
int fsw_del_ref(struct fsw *w, uint64_t ino, uint64_t parent, const char *name, size_t len, uint64_t *index);
/* DIR_ITEM + DIR_INDEX of a name, the directory's size and times */
int fsw_add_entry(struct fsw *w, uint64_t dir, const char *name, size_t len, const struct ub_key *loc, uint8_t type,
		  uint64_t index);
int fsw_del_entry(struct fsw *w, uint64_t dir, const char *name, size_t len, uint64_t index);

/* subvol.c: subvolume `id` added to / removed from the uuid tree's item of `uuid` (type UUID_KEY_SUBVOL or
 * UUID_KEY_RECEIVED_SUBVOL); nothing when the filesystem has no uuid tree */
int fsw_uuid_tree_change(struct fsw *w, const uint8_t *uuid, uint8_t type, uint64_t id, bool add);
/* write_subvol.c: a subvolume's name moves (dir entry, ROOT_REF / ROOT_BACKREF) */
int fsw_subvol_move(struct fsw *w, uint64_t olddir, const char *oldname, size_t oldlen, uint64_t newdir,
		    const char *newname, size_t newlen, uint64_t id);

/*
 * data.c: the file extent items of [start, end) of ino are about to change
 * (end UINT64_MAX: to the end of the file): noted for the fsync log
 * (ub_log_note), widened to whole sectors and, for a small file whose data
 * may be or become inline, to the file's start. ii: the inode item as it is.
 */
void fsw_note_change(struct fsw *w, uint64_t ino, const uint8_t *ii, uint64_t start, uint64_t end);
/* data.c: the file extent item whose range holds `pos`, or the first one after it: 0 (key, copy of the item), 1 none */
int fsw_extent_at(struct fsw *w, uint64_t ino, uint64_t pos, struct ub_key *key, uint8_t *fe, uint32_t *fsize);
/* a change to the data of regular file ino (no-holes filesystems): w set up, its inode item in ii */
int fsw_regular_inode(struct fsw *w, struct ub_txn *t, uint64_t subvol, uint64_t ino, uint8_t *ii);
/* data (data.c): drop every file extent item and reference of ino at or past `from` */
int fsw_drop_extents(struct fsw *w, uint64_t ino, uint8_t *ii, uint64_t start, uint64_t end);
/* write_compress.c: -E2BIG when it does not save a sector */
int fsw_compress(int type, int level, const uint8_t *in, size_t len, uint32_t sectorsize, uint8_t *out, size_t *olen);
int fsw_truncate_locked(struct fsw *w, uint64_t ino, uint8_t *ii, uint64_t size);
/*
 * The bytes of the sector holding `size` past it become zeros on disk (a
 * regular extent's sector rewritten): before a file grows past `size`, as the
 * kernel's btrfs_cont_expand, since old bytes may lie there (data.c).
 */
int fsw_zero_past(struct fsw *w, uint64_t ino, uint8_t *ii, uint64_t size);

/* checksums as given (n sectors from bytenr) into the csum tree; every checksum of a range out of it */
int fsw_csum_put(struct fsw *w, uint64_t bytenr, const uint8_t *sums, uint64_t n);
int fsw_csum_delete(struct fsw *w, uint64_t start, uint64_t len);
/* The dev item of `devid` in the running transaction's chunk tree, changed by `fn`, then the volume's copy (device.c). */
int fsw_update_dev_item(struct ub_txn *t, uint64_t devid, void (*fn)(uint8_t *item, uint64_t arg), uint64_t arg);

/*
 * A balance as ub_engine_balance runs it but without the balance item: a
 * device remove or shrink moves groups the way a balance does, and the kernel
 * records no balance for those (balance.c).
 */
struct ub_balance;
struct ub_balance_progress;
int fsw_balance_no_item(struct ub_engine *e, const struct ub_balance *req,
			int (*progress)(void *arg, const struct ub_balance_progress *p), void *arg,
			struct ub_balance_progress *out);

#endif
