/* SPDX-License-Identifier: MIT */
/*
 * The file API of the write engine: every call changes one subvolume's tree
 * (and the csum / root / uuid trees it needs) inside the caller's running
 * transaction, leaving the items exactly as the kernel lays them out: inode
 * items (nlink, size, nbytes, transid, sequence, times), dir items + dir
 * index (dir size = 2 * sum of name lengths), inode refs (extrefs when a ref
 * item would not fit a leaf), file extents, data back references (through
 * the transaction's delayed-ref queue) and data checksums.
 *
 * Inodes are named by (subvolume id, inode number), never by path: the
 * read-write FUSE mount and mkfs --rootdir call exactly this.
 *
 * Return 0 or -errno (the POSIX meaning: -ENOENT, -EEXIST, -ENOTDIR,
 * -EISDIR, -ENOTEMPTY, -EINVAL, -ENAMETOOLONG, -EMLINK, -ENODATA, -ERANGE,
 * -ENOSPC). After a failure other than one of those argument checks (which
 * change nothing) the transaction may hold part of the change: abort it.
 *
 * Threads: ubtrfs/engine.h. A call is made by a thread that holds the
 * engine's writer lock (between ub_fsw_begin and ub_fsw_end, or inside an
 * owned transaction of ub_txn_start).
 *
 * Library API: the engine and its transactions come from ubtrfs/engine.h
 * (ub_engine_open, ub_txn_start or ub_fsw_begin, ub_txn_commit / ub_txn_abort
 * or ub_engine_commit, ub_engine_close).
 */
#ifndef UBTRFS_FSWRITE_H
#define UBTRFS_FSWRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "ubtrfs/engine.h"
#include "ubtrfs/api.h"

UB_API_BEGIN


/* rdev as the kernel stores it in the inode item (its internal dev_t): major << 20 | minor */
#define UB_FSW_MKDEV(major, minor) (((uint64_t)(major) << 20) | ((uint64_t)(minor) & 0xfffff))

#define UB_FSW_MAX_INLINE_DEFAULT 2048

/*
 * Create an inode named `name` in directory `dir`: regular file, directory,
 * char / block device (rdev, see UB_FSW_MKDEV), fifo or socket, from the type
 * bits of `mode`. Symlinks go through ub_fsw_symlink. *ino: the new inode
 * number (highest inode number of the subvolume + 1, as the kernel).
 */
int ub_fsw_create(struct ub_txn *t, uint64_t subvol, uint64_t dir, const char *name, size_t len, uint32_t mode,
		  uint32_t uid, uint32_t gid, uint64_t rdev, uint64_t *ino);
/* an xattr a new inode is born with (ub_fsw_create_ex) */
struct ub_fsw_xattr {
	const char *name;
	size_t nlen;
	const void *value;
	size_t vlen;
};
/*
 * ub_fsw_create with xattrs that come with the inode (the ACLs and properties
 * it inherits from its directory): set as part of its creation, so its times
 * are all those of its birth, as the kernel's.
 */
int ub_fsw_create_ex(struct ub_txn *t, uint64_t subvol, uint64_t dir, const char *name, size_t len, uint32_t mode,
		     uint32_t uid, uint32_t gid, uint64_t rdev, const struct ub_fsw_xattr *xa, size_t nxa, uint64_t *ino);
int ub_fsw_mkdir(struct ub_txn *t, uint64_t subvol, uint64_t dir, const char *name, size_t len, uint32_t mode,
		 uint32_t uid, uint32_t gid, uint64_t *ino);
/* a symlink whose target is kept as an inline extent (the kernel's limit: it must fit one) */
int ub_fsw_symlink(struct ub_txn *t, uint64_t subvol, uint64_t dir, const char *name, size_t len,
		   const char *target, size_t tlen, uint32_t uid, uint32_t gid, uint64_t *ino);
/* a new name for a non-directory inode */
int ub_fsw_link(struct ub_txn *t, uint64_t subvol, uint64_t ino, uint64_t dir, const char *name, size_t len);
/* remove a non-directory name; the inode and its data go with its last name */
int ub_fsw_unlink(struct ub_txn *t, uint64_t subvol, uint64_t dir, const char *name, size_t len);
/* remove an empty directory (-ENOTEMPTY otherwise) */
int ub_fsw_rmdir(struct ub_txn *t, uint64_t subvol, uint64_t dir, const char *name, size_t len);

#define UB_FSW_RENAME_NOREPLACE (1U << 0) /* the values of RENAME_NOREPLACE / RENAME_EXCHANGE / RENAME_WHITEOUT */
#define UB_FSW_RENAME_EXCHANGE  (1U << 1)
#define UB_FSW_RENAME_WHITEOUT  (1U << 2)
/* rename(2)/renameat2(2) within one subvolume; a subvolume's name moves to a free name (its ROOT_REF
 * follows); replacing or exchanging with a subvolume: -EXDEV for now */
int ub_fsw_rename(struct ub_txn *t, uint64_t subvol, uint64_t olddir, const char *oldname, size_t oldlen,
		  uint64_t newdir, const char *newname, size_t newlen, unsigned flags);
/* The same; with RENAME_WHITEOUT the old name becomes a whiteout (char device 0:0, mode 0) owned by uid:gid. */
int ub_fsw_rename2(struct ub_txn *t, uint64_t subvol, uint64_t olddir, const char *oldname, size_t oldlen,
		   uint64_t newdir, const char *newname, size_t newlen, unsigned flags, uint32_t uid, uint32_t gid);

/* what ub_fsw_setattr changes: the bits of `valid` */
#define UB_FSW_ATTR_MODE  (1U << 0) /* permission bits only (07777); the type stays */
#define UB_FSW_ATTR_UID   (1U << 1)
#define UB_FSW_ATTR_GID   (1U << 2)
#define UB_FSW_ATTR_SIZE  (1U << 3) /* truncate (regular files) */
#define UB_FSW_ATTR_ATIME (1U << 4)
#define UB_FSW_ATTR_MTIME (1U << 5)
#define UB_FSW_ATTR_CTIME (1U << 6) /* explicit ctime; without it ctime becomes now */
struct ub_fsw_attr {
	unsigned valid;
	uint32_t mode, uid, gid;
	uint64_t size;
	int64_t atime_sec, mtime_sec, ctime_sec;
	uint32_t atime_nsec, mtime_nsec, ctime_nsec;
};
int ub_fsw_setattr(struct ub_txn *t, uint64_t subvol, uint64_t ino, const struct ub_fsw_attr *a);

#define UB_FSW_XATTR_CREATE  1 /* the values of XATTR_CREATE / XATTR_REPLACE */
#define UB_FSW_XATTR_REPLACE 2
/*
 * "btrfs.compression" is the kernel's property: "zlib", "lzo", "zstd" (any
 * value they begin, "zstd:3"), "no" / "none", or empty (removes it); -EINVAL
 * for another value or an inode without checksums; ignored (0) on inodes but
 * files and directories; the inode's COMPRESS / NOCOMPRESS flags follow it.
 */
int ub_fsw_setxattr(struct ub_txn *t, uint64_t subvol, uint64_t ino, const char *name, size_t nlen,
		    const void *value, size_t vlen, int flags);
int ub_fsw_removexattr(struct ub_txn *t, uint64_t subvol, uint64_t ino, const char *name, size_t nlen);
/* listxattr(2): NUL-terminated names into buf (size 0: only *needed); -ERANGE if buf is too small */
int ub_fsw_listxattr(struct ub_txn *t, uint64_t subvol, uint64_t ino, char *buf, size_t size, size_t *needed);
/* getxattr(2) through the running transaction: *vlen the value's size; -ERANGE if size is too small */
int ub_fsw_getxattr(struct ub_txn *t, uint64_t subvol, uint64_t ino, const char *name, size_t nlen, void *buf,
		    size_t size, size_t *vlen);

/*
 * Data. write: COW (in place only where the kernel writes in place: into
 * unshared PREALLOC extents, and a NODATACOW file's unshared extents; never
 * on RAID5/6), as the kernel's writeback would leave it: a file that
 * stays within max_inline bytes (UB_FSW_MAX_INLINE_DEFAULT, and below
 * sectorsize) from offset 0 is one inline extent; anything else regular
 * extents in data block groups (checksummed unless the inode is NODATASUM),
 * replacing the old ranges (split / trimmed; a data extent no item uses any
 * more is freed with its checksums). Partial sectors are read-modify-written.
 */
int ub_fsw_write(struct ub_txn *t, uint64_t subvol, uint64_t ino, uint64_t off, const void *buf, size_t len);
/*
 * The same with compression: `compress` UB_COMPRESS_ZLIB / LZO / ZSTD (0:
 * none), level 0 for the default. Each compressed extent holds at most
 * 128 KiB of file data; data that does not shrink by a sector is written
 * plain, as the kernel does. ub_fsw_write compresses when the inode has the
 * "btrfs.compression" property (xattr: "zlib", "lzo", "zstd", "zstd:LEVEL").
 * Small files stay inline uncompressed.
 */
int ub_fsw_write_ex(struct ub_txn *t, uint64_t subvol, uint64_t ino, uint64_t off, const void *buf, size_t len,
		    int compress, int level);
/* fallocate(2) mode 0 / KEEP_SIZE: PREALLOC extents in the holes of the sector-aligned range */
#define UB_FSW_FALLOC_KEEP_SIZE 1     /* the values of FALLOC_FL_KEEP_SIZE, PUNCH_HOLE, ZERO_RANGE */
#define UB_FSW_FALLOC_PUNCH_HOLE 2    /* only with KEEP_SIZE (-EINVAL otherwise), as fallocate(2) */
#define UB_FSW_FALLOC_ZERO_RANGE 0x10 /* reads as zeros, space kept, size grown unless KEEP_SIZE */
int ub_fsw_fallocate(struct ub_txn *t, uint64_t subvol, uint64_t ino, uint64_t off, uint64_t len, int mode);
/* fallocate(PUNCH_HOLE | KEEP_SIZE): whole sectors lose their extents, partial ones are zeroed */
int ub_fsw_punch_hole(struct ub_txn *t, uint64_t subvol, uint64_t ino, uint64_t off, uint64_t len);
/* truncate(2) both ways (no-holes: growing adds no hole items) */
int ub_fsw_truncate(struct ub_txn *t, uint64_t subvol, uint64_t ino, uint64_t size);
/* read through the running transaction (what the next commit will hold); past EOF: *got short */
int ub_fsw_read(struct ub_txn *t, uint64_t subvol, uint64_t ino, uint64_t off, void *buf, size_t len, size_t *got);

/* inode lookup through the running transaction: name in dir -> ino (0, -ENOENT) */
int ub_fsw_lookup(struct ub_txn *t, uint64_t subvol, uint64_t dir, const char *name, size_t len, uint64_t *ino,
		  uint8_t *type);

/*
 * Subvolumes. The new tree's id is the root tree's highest objectid + 1 (as
 * the kernel's free objectid there); its ROOT_ITEM, ROOT_REF / ROOT_BACKREF,
 * the name in `dir` of `subvol` (location: the tree's ROOT_ITEM key) and, when
 * the filesystem has a UUID tree, its UUID entry are added as the kernel does.
 * A snapshot shares the source's tree (ub_tree_copy_root) and holds the
 * source as it is at the call, changes of the running transaction included;
 * readonly sets BTRFS_ROOT_SUBVOL_RDONLY.
 * ub_fsw_snapshot COMMITS: the snapshot is made in the caller's transaction,
 * which is then committed, and `t` goes on as the next transaction (as the
 * kernel's ioctl, whose snapshot is made by a commit). Nothing may change a
 * snapshot in the transaction that made it: every drop of snapshots (ours
 * and the kernel's) takes its blocks that are not newer than it for its
 * source's. So an abort after a snapshot loses only what came after it; the
 * snapshot and everything before it are on disk. When the call fails after
 * the snapshot was made, abort `t` (the commit may have failed: the engine
 * is then read-only). A new subvolume stays in the caller's transaction: its
 * ROOT_ITEM offset is 0, so every block of it is its own to any drop. A
 * deleted source is -ENOENT.
 */
int ub_fsw_subvol_create(struct ub_txn *t, uint64_t subvol, uint64_t dir, const char *name, size_t len,
			 uint64_t *new_id);
int ub_fsw_snapshot(struct ub_txn *t, uint64_t src, uint64_t subvol, uint64_t dir, const char *name, size_t len,
		    bool readonly, uint64_t *new_id);
/*
 * Delete the subvolume named `name` in dir of subvol, as the kernel's
 * btrfs_delete_subvolume: the name, ROOT_REF / ROOT_BACKREF and UUID entries
 * go, the ROOT_ITEM's refs become 0 and an ORPHAN item (ORPHAN_OBJECTID,
 * ORPHAN_ITEM, id) marks the tree dead. Its blocks are freed by whoever drops
 * dead roots: the engine's commits (lib/txn/cleaner.h), or the kernel's
 * cleaner on its next read-write mount. -ENOTEMPTY if it holds other
 * subvolumes, -ENOTDIR if the name is not a subvolume.
 */
int ub_fsw_subvol_delete(struct ub_txn *t, uint64_t subvol, uint64_t dir, const char *name, size_t len);
/*
 * The same, by the subvolume's id (BTRFS_IOC_SNAP_DESTROY_V2 with
 * BTRFS_SUBVOL_SPEC_BY_ID): its name is the one its ROOT_BACKREF gives.
 * -EINVAL for the top level (5), -ENOENT for no such (live) subvolume. Both
 * refuse the default subvolume with -EPERM, as the kernel does.
 */
int ub_fsw_subvol_delete_id(struct ub_txn *t, uint64_t id);
/*
 * BTRFS_IOC_DEFAULT_SUBVOL: the subvolume a mount without subvol= shows
 * (the root tree's "default" entry, and the DEFAULT_SUBVOL incompat bit).
 * -ENOENT for no such (live) subvolume, or a filesystem without the entry
 * (mkfs makes it).
 */
int ub_fsw_set_default_subvol(struct ub_txn *t, uint64_t id);
/* BTRFS_IOC_SUBVOL_SETFLAGS: the ROOT_ITEM's read-only flag (-ENOENT for no such subvolume). */
int ub_fsw_subvol_set_readonly(struct ub_txn *t, uint64_t id, bool readonly);
/*
 * The label (at most 255 bytes, no NUL: -EINVAL), in every device's
 * superblock from the next commit on (commit at once for the kernel's
 * SET_FSLABEL behaviour); readers of the engine's filesystem see it at once.
 */
int ub_fsw_set_label(struct ub_txn *t, const char *label, size_t len);
/* like ub_fsw_lookup, crossing into a subvolume: *sub_out is the tree the name's inode lives in */
int ub_fsw_lookup_at(struct ub_txn *t, uint64_t subvol, uint64_t dir, const char *name, size_t len, uint64_t *sub_out,
		     uint64_t *ino, uint8_t *type);

/* ---- reserving before each call (lib/fsw/ops.c) ---- */

enum {
	UB_FSW_OP_CREATE = 1, /* create, mkdir, mknod, symlink */
	UB_FSW_OP_LINK,
	UB_FSW_OP_UNLINK,     /* unlink, rmdir */
	UB_FSW_OP_RENAME,
	UB_FSW_OP_SETATTR,
	UB_FSW_OP_XATTR,
	UB_FSW_OP_WRITE,      /* len: the bytes written */
	UB_FSW_OP_TRUNCATE,   /* truncate, punch hole; len: the bytes dropped */
	UB_FSW_OP_SUBVOL,     /* subvolume create, snapshot, delete */
};
/* The new metadata an operation of `kind` over len bytes may need (the kernel's per-item rule). */
uint64_t ub_fsw_op_bytes(const struct ub_engine *e, int kind, uint64_t len);
/*
 * The start of an operation: the engine's writer lock taken, the running
 * transaction joined (or started; committed first when its dirty memory
 * reached the budget) and room reserved for an operation of `kind` over len
 * bytes: 0 and the transaction to make the calls in, held until ub_fsw_end;
 * -ENOSPC (nothing changed), -EINVAL for a bad kind, the lock given back.
 */
int ub_fsw_begin(struct ub_engine *e, int kind, uint64_t len, struct ub_txn **out);
/* The end of the operation: the lock goes back (the transaction goes on until a commit). */
void ub_fsw_end(struct ub_engine *e);
/*
 * FICLONERANGE (lib/fsw/clone.c): [src_off, src_off + len) of one regular
 * file shared into another at dst_off (same filesystem, any subvolumes): the
 * destination's items point at the source's extents, nothing is copied. Offsets
 * and len whole sectors, but for a last partial sector that ends the source
 * and reaches the destination's end (len 0: to the source's end); the size
 * grows to cover it. -EINVAL for such rules or overlapping ranges of one
 * file, or checksummed with unchecksummed data; -EOPNOTSUPP where an inline
 * extent is involved (copy the bytes instead).
 */
int ub_fsw_clone_range(struct ub_txn *t, uint64_t src_subvol, uint64_t src_ino, uint64_t src_off,
		       uint64_t dst_subvol, uint64_t dst_ino, uint64_t dst_off, uint64_t len);

/* ---- fsync (lib/fsw/fsync.c) ---- */
/*
 * Make inode `ino` of `subvol` durable as it is in t, without a full commit
 * where the fsync log can say it (a regular file with its one name: its items
 * and this transaction's checksums into the log tree, then one flush and the
 * primary superblock pointing at the log; the kernel's mount and ubtrfs
 * replay it). Otherwise (directories, renamed or linked files, ...) t is
 * committed and goes on as the next transaction, as ub_txn_commit_keep. An
 * inode unchanged since the last commit only waits for that commit to be
 * durable. `datasync`: fdatasync (the same here).
 */
int ub_fsw_fsync(struct ub_txn *t, uint64_t subvol, uint64_t ino, bool datasync);

/* ---- orphans (lib/fsw/orphan.c) ---- */
/*
 * Keep orphans: from now on an inode that loses its last name (unlink,
 * rmdir, rename over it) stays with nlink 0 and an ORPHAN item, as the
 * kernel keeps it while a file is open, until ub_fsw_evict. Off by default
 * (the inode goes at once); the FUSE mount turns it on.
 */
void ub_engine_keep_orphans(struct ub_engine *e, bool keep);
/* The largest file content kept inline from now on (max_inline=; 0: none; default UB_FSW_MAX_INLINE_DEFAULT). */
void ub_engine_set_max_inline(struct ub_engine *e, uint32_t bytes);
/* An inode with no name (O_TMPFILE): a regular file, nlink 0, an orphan; dir gives the flags it inherits. */
int ub_fsw_tmpfile(struct ub_txn *t, uint64_t subvol, uint64_t dir, uint32_t mode, uint32_t uid, uint32_t gid,
		   uint64_t *ino);
/* The same, born with xattrs (the ACLs it inherits), as ub_fsw_create_ex. */
int ub_fsw_tmpfile_ex(struct ub_txn *t, uint64_t subvol, uint64_t dir, uint32_t mode, uint32_t uid, uint32_t gid,
		      const struct ub_fsw_xattr *xa, size_t nxa, uint64_t *ino);
/* An orphan's last user is gone: its items and data go (nothing happens to an inode that has a name). */
int ub_fsw_evict(struct ub_txn *t, uint64_t subvol, uint64_t ino);
/*
 * What the last session left: every subvolume's orphans evicted (or, for an
 * inode that still has names, its interrupted truncate finished), in
 * operations of their own, then a commit; *cleaned counts them (may be NULL).
 */
int ub_fsw_orphan_cleanup(struct ub_engine *e, uint64_t *cleaned);

/* ---- data prepared outside the transaction ---- */
/*
 * One data extent as it goes to disk, made by ub_fsw_compress_extent on any
 * thread (no engine, no transaction) and handed to ub_fsw_write_encoded, so
 * that reading, checksumming and compressing run beside the single writer.
 */
/* the file bytes one extent of ub_fsw_write_ex holds at most: plain, compressed */
#define UB_FSW_EXTENT_MAX (1U << 20)
#define UB_FSW_COMPRESSED_MAX (128U << 10)
struct ub_fsw_extent {
	uint64_t ram_bytes;   /* file bytes it holds: a multiple of the sectorsize */
	uint64_t disk_bytes;  /* bytes of data: a multiple of the sectorsize */
	int compression;      /* UB_COMPRESS_* of data (0: data is the file bytes) */
	const void *data;
	const uint8_t *csums; /* disk_bytes / sectorsize sums of data in the filesystem's algorithm, or NULL */
};
/*
 * The worker step of ub_fsw_write_ex: `len` file bytes at `in` (a multiple
 * of the sectorsize, zero past EOF; at most 128 KiB when `compress`) become
 * one extent: compressed into `out` (room for len bytes) when that saves a
 * sector, else x->data = in, as the kernel decides. csum_type >= 0: the sums
 * of what goes to disk into `sums` (len / sectorsize * the algorithm's size).
 */
int ub_fsw_compress_extent(int compress, int level, uint32_t sectorsize, int csum_type, const void *in, size_t len,
			   void *out, uint8_t *sums, struct ub_fsw_extent *x);
/*
 * ub_fsw_write of [off, off + len) from n extents laid one after the other
 * (off sector aligned; the ram_bytes add up to len rounded up to a sector,
 * bytes past len zero): the same items as ub_fsw_write_ex with the same
 * compression and extent sizes. Sums missing (csums NULL) are computed here.
 * -EINVAL for a write ub_fsw_write would keep inline (use that for it).
 */
int ub_fsw_write_encoded(struct ub_txn *t, uint64_t subvol, uint64_t ino, uint64_t off, uint64_t len,
			 const struct ub_fsw_extent *x, size_t n);
/*
 * chattr(1)'s btrfs flags, with the kernel's rules: `set` and `clear` hold
 * UB_INODE_NODATACOW / NOCOMPRESS / NODUMP / NOATIME / SYNC (others:
 * -EOPNOTSUPP). NODATACOW on a regular file changes only while it is empty
 * (then NODATASUM follows it), elsewhere it is kept as it is, as the kernel.
 * A NODATACOW file's writes go in place where the kernel's would (ub_fsw_write).
 */
int ub_fsw_set_flags(struct ub_txn *t, uint64_t subvol, uint64_t ino, uint64_t set, uint64_t clear);
/* ---- end of the data prepared outside the transaction ---- */

UB_API_END

#endif
