/* SPDX-License-Identifier: MIT */
/*
 * What `subvolume` and `filesystem` work on: a mounted btrfs (the kernel's or
 * a ubtrfs mount), asked and changed through btrfs's ioctls, or devices that
 * nothing has mounted, through the library (the write engine for changes).
 * Every question has one answer shape for both, so each command prints from
 * one code path.
 */
#ifndef UBTRFS_CMD_FS_TARGET_H
#define UBTRFS_CMD_FS_TARGET_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/statvfs.h>
#include "cmd.h"
#include "ubtrfs/fsquery.h"

struct ub_engine;

struct target {
	bool online;
	/* ---- a mount: the path given, open ---- */
	int fd;
	bool fuse;          /* a ubtrfs mount: its own ioctls where btrfs's cannot pass FUSE */
	const char *path;
	/* ---- devices ---- */
	struct open_args *oa;
	struct ub_fs *fs;       /* what reads see (the engine's filesystem when opened for writing) */
	struct ub_engine *e;    /* opened for writing, else NULL */
	uint64_t subvol, ino;   /* where --path leads (the top level by default) */
};

/*
 * Are these positional arguments one mounted path (a directory or a file of
 * a mounted filesystem) rather than devices? A directory is never a device.
 */
bool target_args_mounted(char **args, int n);
/*
 * A path on a mounted btrfs or ubtrfs: opened; -ENOTTY (said) when it is
 * neither. `what` names the command for messages.
 */
int target_open_path(struct target *t, const char *path, const char *what);
/* Devices (DEV... as every command takes them), for reading, or for writing (the write engine). */
int target_open_devs(struct target *t, struct open_args *oa, char **devs, int n, bool write);
void target_close(struct target *t);
/* Offline: point t at `path` inside the filesystem (a directory or file): -ENOENT and the like. */
int target_set_path(struct target *t, const char *path);

/* ---- questions ---- */
/* TREE_SEARCH: every item in the key range, through fn (see ub_fs_search; fn's data is valid during the call) */
int target_search(struct target *t, const struct ub_search_key *sk, ub_search_fn fn, void *arg);
/*
 * INO_LOOKUP: the path of directory `ino` inside subvolume `tree` as the
 * kernel gives it ("a/b/", "" for the subvolume's own top directory).
 */
int target_ino_lookup(struct target *t, uint64_t tree, uint64_t ino, char *buf, size_t size);
/* The subvolume the opened path (online) or --path (offline) is in, and whether it is that subvolume's top. */
int target_subvol_of(struct target *t, uint64_t *id, bool *is_top);
/* SPACE_INFO: malloc'd entries (the global reserve last), *n of them */
int target_space_info(struct target *t, struct ub_space_entry **out, int *n);

struct target_fsinfo {
	uint8_t fsid[16];
	uint64_t num_devices, max_id, generation;
	uint32_t nodesize, sectorsize;
	char label[257];
};
int target_fs_info(struct target *t, struct target_fsinfo *out);
struct target_devinfo {
	uint64_t devid, total_bytes, bytes_used;
	uint8_t uuid[16];
	char path[1025];
	bool missing;
};
/* Every device, in devid order (a missing one marked): malloc'd, *n of them. */
int target_devices(struct target *t, struct target_devinfo **out, int *n);
/* What statfs(2) gives on the mount (offline: what the kernel's mount of it would give). */
int target_statfs(struct target *t, struct statvfs *out);

/* ---- changes (each committed before it returns offline; the kernel's rules and errno) ---- */
/* A name inside the filesystem: online the directory opened and the name in it, offline where --path leads. */
struct tloc {
	int dirfd;                 /* online */
	uint64_t subvol, dir;      /* offline */
	char name[256];
	char *shown;               /* the path as given, for messages (malloc'd) */
};
int target_parent_of(struct target *t, const char *path, struct tloc *loc);
void tloc_free(struct tloc *loc);
int target_subvol_create(struct target *t, const struct tloc *loc);
/* src: online a path (opened here), offline a path inside the filesystem */
int target_snapshot(struct target *t, const char *src, const struct tloc *loc, bool readonly);
int target_subvol_delete(struct target *t, const struct tloc *loc);
int target_subvol_delete_id(struct target *t, uint64_t id);
int target_set_default(struct target *t, uint64_t id);
int target_set_label(struct target *t, const char *label);
/* BTRFS_IOC_SYNC online; offline a commit (what a pending fsync log holds goes into the trees) */
int target_sync(struct target *t);

/* ---- sizes as btrfs-progs prints them ---- */
struct units {
	enum { UNITS_HUMAN, UNITS_RAW, UNITS_KBYTES, UNITS_MBYTES, UNITS_GBYTES, UNITS_TBYTES } mode;
	bool si; /* base 1000 (kB, MB...) instead of 1024 (KiB, MiB...) */
};
/* the unit options of btrfs-progs (-b --raw -h --human-readable -H --iec --si -k -m -g -t): 1 if `opt` was one */
int units_option(int opt, struct units *u);
#define UNITS_LONGOPTS                                                                         \
	{ "raw", no_argument, NULL, 'b' }, { "human-readable", no_argument, NULL, 0x300 },       \
	{ "iec", no_argument, NULL, 0x301 }, { "si", no_argument, NULL, 0x302 },                   \
	{ "kbytes", no_argument, NULL, 'k' }, { "mbytes", no_argument, NULL, 'm' },                \
	{ "gbytes", no_argument, NULL, 'g' }, { "tbytes", no_argument, NULL, 't' }
#define UNITS_SHORTOPTS "bHkmgt"
#define UNITS_HELP                                                                              \
	"  -b, --raw          raw numbers in bytes\n"                                               \
	"      --human-readable  human friendly numbers, base 1024 (the default)\n"                \
	"  -H                 human friendly numbers, base 1000\n"                                 \
	"      --iec          base 1024 units (KiB, MiB...)\n"                                      \
	"      --si           base 1000 units (kB, MB...)\n"                                        \
	"  -k, --kbytes       in KiB (kB with --si)\n"                                              \
	"  -m, --mbytes       in MiB\n"                                                             \
	"  -g, --gbytes       in GiB\n"                                                             \
	"  -t, --tbytes       in TiB\n"
/* size as btrfs-progs' pretty_size_mode prints it: "8.00MiB", "8388608" (raw), "8192.00KiB" */
const char *pretty_size(uint64_t size, const struct units *u, char *buf, size_t len);
/* what btrfs-progs prints for block group flags: "single", "DUP", "RAID1"...; "Data", "Metadata"... */
const char *profile_name(uint64_t flags);
const char *type_name(uint64_t flags);

#endif
