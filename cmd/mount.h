/* SPDX-License-Identifier: MIT */
/* The FUSE mount: what its files (options, inode map, operations, command) share. */
#ifndef UBTRFS_CMD_MOUNT_H
#define UBTRFS_CMD_MOUNT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
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
};

struct mount_map;
int mount_map_new(struct mount_map **out);
void mount_map_free(struct mount_map *m);
/* The id of (subvol, ino), made on first sight with `dir_ino` and `parent`. 0 on out of memory. */
uint64_t mount_map_get(struct mount_map *m, uint64_t subvol, uint64_t ino, uint64_t dir_ino, uint64_t parent);
/* The node of `id`: 0, or -ENOENT if no such id was handed out. */
int mount_map_node(struct mount_map *m, uint64_t id, struct mount_node *out);

struct mount_ctx {
	struct ub_fs *fs;
	struct mount_map *map;
	uint32_t sectorsize;
	uint64_t total_bytes, bytes_used;
};


/* The low-level operations table (mount_ops.c). */
struct fuse_lowlevel_ops;
extern const struct fuse_lowlevel_ops mount_ops;

#endif
