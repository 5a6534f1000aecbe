/* SPDX-License-Identifier: MIT */
/* The FUSE mount: what its files (options, inode map, operations, command) share. */
#ifndef UBTRFS_CMD_MOUNT_H
#define UBTRFS_CMD_MOUNT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include "ubtrfs/fs.h"

struct mount_opts {
	const char *subvol;  /* -o subvol=PATH */
	uint64_t subvolid;   /* -o subvolid=N, 0 if not given */
	bool nologreplay;
	bool degraded;
	uint64_t cache_bytes; /* -o cache=SIZE, 0 if not given */
	uint64_t generation;  /* -o generation=N: the older root of a backup slot (as --generation), 0 if not given */
	bool usebackuproot;   /* -o usebackuproot (or rescue=usebackuproot): as --backup */
	uint64_t root_bytenr; /* -o root=BYTENR: as --root, 0 if not given */
	uint64_t readahead_bytes; /* -o readahead=SIZE; 0 leaves FUSE's own; MOUNT_READAHEAD_DEFAULT if not given */
};

/* what the kernel's btrfs gives its own mounts at least (4 MiB), so that large reads come in large requests */
#define MOUNT_READAHEAD_DEFAULT (4ULL << 20)

/* Parse one -o list into `mo`; prints what is wrong and returns -EINVAL. */
int mount_opts_parse(struct mount_opts *mo, const char *list);

/*
 * FUSE node ids. btrfs inode numbers repeat across subvolumes, the kernel's
 * st_dev tells them apart; one FUSE mount has one st_dev, so every (subvolume,
 * inode) pair met gets its own node id, handed out in order of first lookup and
 * shown as st_ino. Hard links are one pair, hence one id. Ids are never reused
 * (a read-only mount meets each pair at most once per id): forget is a no-op.
 * Thread rule: every call takes the map's mutex; a node never moves once made.
 */
struct mount_node {
	uint64_t subvol, ino;
	uint64_t dir_ino;  /* the directory holding a placeholder (ino 2), else 0 */
	uint64_t parent;   /* node id of the directory it was first found in */
	uint64_t name;     /* the name hash it was first found under */
};

struct mount_map;
int mount_map_new(struct mount_map **out);
void mount_map_free(struct mount_map *m);
/*
 * The id of (subvol, ino), made on first sight with `dir_ino`, `parent` and
 * `name` (the hash of the name it was met under). 0 on out of memory. If
 * `first` is not NULL, it says whether (parent, name) is where the node was
 * first met: a directory is served under that one name only.
 */
uint64_t mount_map_get(struct mount_map *m, uint64_t subvol, uint64_t ino, uint64_t dir_ino, uint64_t parent,
		       uint64_t name, bool *first);
/* The node of `id`: 0, or -ENOENT if no such id was handed out. */
int mount_map_node(struct mount_map *m, uint64_t id, struct mount_node *out);

struct mount_ctx {
	struct ub_fs *fs;
	struct mount_map *map;
	uint32_t sectorsize;
	uint64_t total_bytes, bytes_used;
};


/*
 * The operations, without FUSE (mount_core.c): each returns 0 or a negative
 * errno as FUSE replies it (a damaged filesystem is -EIO, said in the log).
 * Node ids are those of the map; 1 is the mount's root.
 */
int mount_lookup(struct mount_ctx *mc, uint64_t parent, const char *name, uint64_t *id, struct stat *st);
int mount_getattr(struct mount_ctx *mc, uint64_t id, struct stat *st);
/*
 * One directory entry for readdir: `st` holds at least st_ino and the type in
 * st_mode; `node` is its node id with full attributes in `st`, or 0 where the
 * entry goes out without attributes ("." and "..", an inode that cannot be
 * read, a plain readdir). `off` is the offset to resume after it. Returns true
 * when the caller's buffer is full (the entry did not go in).
 */
typedef bool (*mount_dir_fn)(void *arg, const char *name, const struct stat *st, uint64_t node, off_t off);
/* The entries of directory `id` after offset `off`, with their attributes if `plus`; an entry that cannot be shown is skipped (said in the log). */
int mount_readdir(struct mount_ctx *mc, uint64_t id, off_t off, bool plus, mount_dir_fn fn, void *arg);
int mount_read(struct mount_ctx *mc, uint64_t id, uint64_t off, size_t size, void *buf, uint64_t *got);
/* The target, NUL-terminated, into buf[size]. */
int mount_readlink(struct mount_ctx *mc, uint64_t id, char *buf, size_t size);
/* size 0: only *len, the bytes needed; -ERANGE if they do not fit; -ENODATA if there is no such attribute. */
int mount_getxattr(struct mount_ctx *mc, uint64_t id, const char *name, char *buf, size_t size, size_t *len);
int mount_listxattr(struct mount_ctx *mc, uint64_t id, char *buf, size_t size, size_t *len);
void mount_statfs(struct mount_ctx *mc, struct statvfs *sv);

/* The low-level operations table (mount_ops.c). */
struct fuse_lowlevel_ops;
extern const struct fuse_lowlevel_ops mount_ops;

#endif
