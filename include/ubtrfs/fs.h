/* SPDX-License-Identifier: MIT */
/*
 * The filesystem layer: opening a filesystem (volume + trees), subvolumes,
 * inodes, directories, file data, symlinks and xattrs.
 *
 * Library API: struct ub_fs is an opaque handle; the value structs below
 * (ub_inode, ub_dirent, ub_xattr, ub_read_report) are the caller's.
 */
#ifndef UBTRFS_FS_H
#define UBTRFS_FS_H

#include <stdbool.h>
#include <stdint.h>
#include "ubtrfs/tree.h"
#include "ubtrfs/volume.h"
#include "ubtrfs/api.h"

UB_API_BEGIN

struct ub_replay;

struct ub_fs_opts {
	bool writable;
	int super_mirror;      /* -1: newest valid superblock copy */
	bool no_log;           /* ignore the fsync log tree */
	/* ---- older roots ---- */
	uint64_t root_generation; /* 0: the superblock's root; else the backup root of that generation */
	bool backup;              /* the current root unreadable: try the backup roots, newest first */
	uint64_t root_bytenr;     /* 0, or the root tree at this logical address (its generation from its header) */
	/*
	 * Read-only: when the chunk tree cannot be read whole, rebuild the chunk
	 * map from the chunk tree leaves a scan of the system block groups finds
	 * (the newest copy of each chunk item), with a warning, instead of failing;
	 * when none survives, from a raw scan of every device (chunk_rebuild.c),
	 * which hears of its progress through rescue_progress (optional: bytes of
	 * the devices read so far, of their total).
	 */
	bool rescue_chunks;
	void (*rescue_progress)(void *arg, uint64_t done, uint64_t total);
	void *rescue_arg;
	/*
	 * ---- memory budget ---- the peak memory the open filesystem aims at, in
	 * bytes; 0: 256 MiB. Three quarters go to the tree block cache, the rest
	 * is left for the caller's tables and buffers.
	 */
	uint64_t cache_bytes;
};

/*
 * An open filesystem: an opaque handle (its fields are the library's,
 * lib/fs/fs_priv.h); tools reach its volume, tree context and log through
 * ubtrfs/fsinfo.h.
 */
struct ub_fs;
struct ub_eroot;

int ub_fs_open(const char *const *paths, int npaths, const struct ub_fs_opts *opts, const struct ub_log *log,
	       struct ub_fs **out);
void ub_fs_close(struct ub_fs *fs);
/* The same from devices already open (any backend); they are taken over as by ub_volume_open_devs. */
int ub_fs_open_devs(struct ub_dev *const *devs, int ndevs, const struct ub_fs_opts *opts, const struct ub_log *log,
		    struct ub_fs **out);

/*
 * ---- views ---- Which state a read sees. The handle ub_fs_open returns
 * reads the last commit, looked up at each access (fine while nothing
 * writes). A view is another struct ub_fs handle, taken by every read call
 * of this header in place of the filesystem's:
 *  - ub_fs_view_open: the commit that is the last now, the same for every
 *    call until the view is closed, however many commits follow; what later
 *    commits free is not reused while it is open (reader epochs), so a walk
 *    of minutes never meets a block that changed under it;
 *  - ub_engine_view (ubtrfs/engine.h): the engine's running transaction,
 *    what the next commit will hold (read-your-writes); each call waits for
 *    a write in progress, and a read's callbacks must not write.
 * Every view verifies each block and sector as the filesystem's handle does.
 * A view is closed with ub_fs_close, before its filesystem; any number of
 * threads may read through one view at once.
 */
int ub_fs_view_open(struct ub_fs *fs, struct ub_fs **out);
/* The generation a handle reads (a live view: that of its running transaction). */
uint64_t ub_fs_view_generation(struct ub_fs *fs);

/*
 * The root object of tree `objectid` (root and chunk trees from the
 * superblock, others loaded on first use from the committed root tree):
 * 0, -ENOENT, <0. The object lives until ub_fs_close.
 */
int ub_fs_root(struct ub_fs *fs, uint64_t objectid, struct ub_eroot **out);
/* A copy of er's committed root: 0, or -ENOENT when er is NULL or its tree is empty (dropped, not committed). */
int ub_fs_committed(struct ub_fs *fs, const struct ub_eroot *er, struct ub_root *out);
/* The committed root of tree `objectid` (ub_fs_root + ub_fs_committed): 0, -ENOENT, <0. */
int ub_fs_tree_root(struct ub_fs *fs, uint64_t objectid, struct ub_root *out);

struct ub_timespec {
	int64_t sec;
	uint32_t nsec;
};

struct ub_inode {
	uint64_t subvol, ino;
	uint64_t generation, transid, size, nbytes, nlink, rdev, flags;
	uint32_t uid, gid, mode;
	struct ub_timespec atime, ctime, mtime, otime;
	/*
	 * Known to have no extended attributes: ub_inode_read saw the items after
	 * the inode's back references, in the leaf it read anyway, and no
	 * XATTR_ITEM among them. False: some, or not known (ub_xattr_iterate tells).
	 */
	bool no_xattrs;
};

int ub_inode_read(struct ub_fs *fs, uint64_t subvol, uint64_t ino, struct ub_inode *out);
/*
 * The empty directory the kernel shows where a snapshot holds a subvolume it
 * did not take along (ino 2): mode 0755, one link, owner, group and atime of
 * the directory `dir_ino` holding it (root and 0 if dir_ino is 0), and mtime,
 * ctime and otime "now", as the kernel makes them up at lookup.
 */
int ub_placeholder_inode(struct ub_fs *fs, uint64_t subvol, uint64_t dir_ino, struct ub_inode *out);

/*
 * Can `name` be a path component: 1..255 bytes, no '/' or NUL, not "." or "..".
 * Directory iteration and lookup never hand out any other name.
 */
bool ub_name_valid(const char *name, size_t len);
/* Why `name` cannot be a path component ("name contains '/'"...), NULL if it can. */
const char *ub_name_problem(const char *name, size_t len);
/* `name` for messages: printable ASCII as is, other bytes, '"' and '\' as \xHH; always NUL-terminated. */
void ub_name_escape(const char *name, size_t len, char *out, size_t outsz);

struct ub_dirent {
	const char *name; /* not NUL-terminated */
	uint32_t name_len;
	uint64_t index;   /* DIR_INDEX sequence; 0 from ub_dir_lookup (DIR_ITEMs carry none) */
	uint8_t type;     /* BTRFS_FT_* */
	/* where the entry leads; a subvolume entry leads to (subvol id, 256), a placeholder to (dir_subvol, 2) */
	uint64_t subvol, ino;
	/* the directory holding the entry */
	uint64_t dir_subvol, dir_ino;
};

/* The inode an entry leads to, placeholders included (see ub_placeholder_inode). */
int ub_dirent_inode(struct ub_fs *fs, const struct ub_dirent *de, struct ub_inode *out);

/*
 * Is `de`, an entry that leads to a directory, that directory's real name?
 * btrfs has no directory hard links: the real one is the name its INODE_REF
 * (or INODE_EXTREF) gives, parent, name and index, or for a subvolume the
 * name its ROOT_BACKREF gives. Any other entry naming the directory is
 * corruption, and a walk must not enter the directory through it (walks that
 * do are exponential, or endless). 1 real, 0 not, -ENOENT if the directory
 * has no back reference at all (then nothing tells which name is real), other
 * <0 on errors.
 */
int ub_dir_entry_is_link(struct ub_fs *fs, const struct ub_dirent *de);

/*
 * Calls `cb` for each entry in index order; a non-zero return from cb stops and is returned.
 * Entries that cannot be (a name that is not a valid path component, a location that is
 * neither an inode nor a subvolume) are reported as errors through the fs log and skipped.
 */
int ub_dir_iterate(struct ub_fs *fs, uint64_t subvol, uint64_t dir_ino,
		   int (*cb)(void *arg, const struct ub_dirent *de), void *arg);
/* The same from the first entry whose index is at least `from_index` (one tree search, no walk from the start). */
int ub_dir_iterate_from(struct ub_fs *fs, uint64_t subvol, uint64_t dir_ino, uint64_t from_index,
			int (*cb)(void *arg, const struct ub_dirent *de), void *arg);
/*
 * Look up one name in a directory (via its DIR_ITEM hash). -ENOENT if absent,
 * -EINVAL if `name` is not a valid path component (ub_name_valid).
 */
int ub_dir_lookup(struct ub_fs *fs, uint64_t subvol, uint64_t dir_ino, const char *name, size_t len,
		  struct ub_dirent *out);
/*
 * Resolve an absolute path from the top-level subvolume, crossing into
 * subvolumes. "." and ".." are taken as path syntax (".." goes up the path as
 * written), never matched against entries; any component longer than 255
 * bytes is -ENAMETOOLONG.
 */
int ub_path_lookup(struct ub_fs *fs, const char *path, uint64_t *subvol, uint64_t *ino);
/* ub_path_lookup, then the inode it leads to (placeholders take after the directory holding them). */
int ub_path_lookup_inode(struct ub_fs *fs, const char *path, struct ub_inode *out);
/*
 * The path of inode `ino` inside subvolume `subvol` ("/a/b", "/" for its root
 * directory), following each inode's first name back to the root directory,
 * as the committed items say (no log replay). NUL-terminated in buf[bufsz];
 * the names' bytes as they are. -ENOENT (an inode with no name), -ELOOP (a
 * loop or deeper than 256), -ENAMETOOLONG, -EUCLEAN, or a read error.
 */
int ub_inode_path(struct ub_fs *fs, uint64_t subvol, uint64_t ino, char *buf, size_t bufsz);
/*
 * The first name of inode `ino` as reads see it (a replayed fsync log and
 * loose inodes included): the directory it is in and the name's bytes, copied
 * into name[UB_NAME_LEN] (not NUL-terminated), *len of them. -ENOENT with no
 * name, -EUCLEAN for an empty or overlong one, or a read error.
 */
int ub_inode_first_name(struct ub_fs *fs, uint64_t subvol, uint64_t ino, uint64_t *dir, char *name, size_t *len);
/*
 * Every name of inode `ino` as reads see it (INODE_REF items, then
 * INODE_EXTREF): fn(arg, dir, name, len) for each (name not NUL-terminated,
 * 1..UB_NAME_LEN bytes), until fn returns non-zero, which is returned; 0 at
 * the end, or a read error.
 */
typedef int (*ub_name_fn)(void *arg, uint64_t dir, const char *name, size_t len);
int ub_inode_names(struct ub_fs *fs, uint64_t subvol, uint64_t ino, ub_name_fn fn, void *arg);

/* What a data read could not deliver (the caller got zeros there). */
struct ub_read_report {
	uint64_t bad_bytes;
	uint64_t first_bad_offset;
	/* the last error printed, so that its repeats are counted instead (file.c's) */
	bool seen;
	uint64_t last_subvol, last_ino, last_key, last_end, repeats;
	uint32_t last_why;
	/* optional: told every range that could not be read (file offset, length, why), repeats too */
	void (*bad_range)(void *arg, uint64_t off, uint64_t len, const char *why);
	void *bad_arg;
	/*
	 * Bytes delivered as read although nothing could verify them: data of a
	 * file that requires checksums (no NODATASUM flag) for which the checksum
	 * tree (and the fsync log) has none. The kernel reads such a "checksum
	 * hole" as an I/O error; the library delivers the bytes, names the first
	 * range of each extent as an error, and counts them here.
	 */
	uint64_t unverified_bytes;
	uint64_t first_unverified_offset;
	/* the extent the last such message named, so that the rest of it is only counted */
	bool unverified_seen;
	uint64_t unverified_subvol, unverified_ino, unverified_key;
};
/* Print "... and N more like this" for errors held back as repeats; call when done reading. */
void ub_read_report_flush(struct ub_fs *fs, struct ub_read_report *rep);

/*
 * Read file bytes [off, off+len) (clamped to i_size) into buf; *got receives the
 * byte count. Every data sector is verified against the csum tree and other
 * copies are tried on a mismatch. Ranges that cannot be read correctly from
 * any copy are zero-filled, logged with file offset and logical address,
 * counted in `rep` (optional), and make the call return -EIO after filling
 * everything else. A file extent item that contradicts the format (sizes out
 * of bounds, sums that overflow, an extent larger than its chunk) is named
 * and ends the read with -EUCLEAN; *got then counts the bytes before it.
 */
int ub_file_read(struct ub_fs *fs, uint64_t subvol, uint64_t ino, uint64_t off, uint64_t len, void *buf,
		 uint64_t *got, struct ub_read_report *rep);
/* The same for an inode the caller read from this fs already (ub_inode_read): no second search for it. */
int ub_file_read_inode(struct ub_fs *fs, const struct ub_inode *inode, uint64_t off, uint64_t len, void *buf,
		       uint64_t *got, struct ub_read_report *rep);
/* Symlink target into buf (NUL-terminated, truncated to bufsz-1); *len gets the full length. */
int ub_readlink(struct ub_fs *fs, uint64_t subvol, uint64_t ino, char *buf, size_t bufsz, size_t *len);

struct ub_xattr {
	const char *name;
	uint32_t name_len;
	const uint8_t *value;
	uint32_t value_len;
};
int ub_xattr_iterate(struct ub_fs *fs, uint64_t subvol, uint64_t ino,
		     int (*cb)(void *arg, const struct ub_xattr *xa), void *arg);

/* Whose bytes a data read is for, so that its messages about bad copies name the file too. */
struct ub_data_owner {
	uint64_t subvol, ino;
	uint64_t foff;   /* file offset of the extent's first byte at `logical`, or of the compressed extent */
	uint64_t logical;
	bool compressed; /* the bytes are a compressed extent: file offsets do not follow logical ones */
};
/*
 * Verified read of data extent bytes (logical, len sector-aligned); bad sectors flagged in `bad`
 * (1 byte per sector: 1 unreadable, zeros in buf; 2 with `verify`, read but not verified since
 * no checksum exists for it; 0 good). `who` (may be NULL) is named in the messages about bad copies.
 */
int ub_data_read(struct ub_fs *fs, uint64_t logical, uint64_t len, uint8_t *buf, bool verify, uint8_t *bad,
		 const struct ub_data_owner *who);

/* ---- copies that keep holes, subvolumes ---- */
/*
 * The first run of file offsets at or after `off` that extent items give
 * data to (holes and preallocated space excluded; consecutive extents
 * merged), clamped to the file's size: 0 and [*start, *end), 1 when only
 * holes follow, <0 on errors. The bytes themselves come from ub_file_read,
 * which verifies them.
 */
int ub_file_next_data(struct ub_fs *fs, uint64_t subvol, uint64_t ino, uint64_t off, uint64_t *start,
		      uint64_t *end);
/* The same for an inode the caller read already. */
int ub_file_next_data_inode(struct ub_fs *fs, const struct ub_inode *inode, uint64_t off, uint64_t *start,
			    uint64_t *end);

/*
 * Whether inode `ino` has any file extent item: 1, 0, or <0 on a read error.
 * For an inode that should have none (a directory, a device node, a fifo, a
 * socket) one is corruption: data a walk by its mode would drop unsaid.
 */
int ub_inode_has_extents(struct ub_fs *fs, uint64_t subvol, uint64_t ino);

struct ub_subvol_info {
	uint64_t id, generation, flags;
	uint8_t uuid[16], parent_uuid[16];
	bool readonly;
	bool snapshot; /* it has a parent uuid: made as a snapshot of another subvolume */
};
/* The ROOT_ITEM of subvolume `id`: 0, -ENOENT, -EUCLEAN (an item too short), <0. */
int ub_subvol_info(struct ub_fs *fs, uint64_t id, struct ub_subvol_info *out);

UB_API_END

#endif
