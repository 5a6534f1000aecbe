/* SPDX-License-Identifier: MIT */
/*
 * Making a new filesystem (lib/mkfs): the layout mkfs.btrfs writes, built in
 * one step (every tree a single leaf, generation 1) and written through the
 * volume layer.
 */
#ifndef UBTRFS_MKFS_H
#define UBTRFS_MKFS_H

#include <stdbool.h>
#include <stdint.h>
#include "ubtrfs/dev.h"
#include "ubtrfs/format.h"
#include "ubtrfs/log.h"
#include "ubtrfs/api.h"

UB_API_BEGIN

/* a profile option left unset: the default for the number of devices */
#define UB_MKFS_PROFILE_DEFAULT (~0ULL)

/* -O names we know; the bit says which of these features the filesystem gets */
enum {
	UB_MKFS_F_NO_HOLES = 1 << 0,
	UB_MKFS_F_FREE_SPACE_TREE = 1 << 1,
	UB_MKFS_F_SKINNY_METADATA = 1 << 2,
	UB_MKFS_F_EXTREF = 1 << 3,
	UB_MKFS_F_DEFAULT = UB_MKFS_F_NO_HOLES | UB_MKFS_F_FREE_SPACE_TREE | UB_MKFS_F_SKINNY_METADATA |
			    UB_MKFS_F_EXTREF,
};

struct ub_mkfs_opts {
	uint64_t data_profile; /* BTRFS_BLOCK_GROUP_* profile bit (0: single) or UB_MKFS_PROFILE_DEFAULT */
	uint64_t meta_profile; /* the same for metadata (system chunks follow metadata) */
	uint32_t nodesize;     /* 0: 16 KiB */
	unsigned csum_type;    /* BTRFS_CSUM_TYPE_* */
	unsigned features;     /* UB_MKFS_F_* */
	char label[UB_LABEL_SIZE]; /* NUL-terminated, at most UB_LABEL_SIZE - 1 bytes */
	bool fsid_given;
	uint8_t fsid[UB_FSID_SIZE];
	int64_t now;           /* seconds for the root directories' times; 0: the clock */
	int compress;          /* UB_COMPRESS_*: the data --rootdir will write (sets LZO / ZSTD incompat) */
};

void ub_mkfs_opts_init(struct ub_mkfs_opts *o);

/* What was made, for the command's summary. */
struct ub_mkfs_result {
	uint8_t fsid[UB_FSID_SIZE];
	uint64_t total_bytes;
	uint64_t data_profile, meta_profile; /* resolved */
	uint64_t sys_len, meta_len, data_len;   /* logical lengths of the first chunks */
};

/* Parse a profile name ("single", "dup", "raid0", ... any case) into its BTRFS_BLOCK_GROUP_* bit. */
int ub_mkfs_parse_profile(const char *s, uint64_t *out);
/* Parse a checksum name (crc32c, xxhash/xxhash64, sha256, blake2/blake2b). */
int ub_mkfs_parse_csum(const char *s, unsigned *out);
/*
 * Apply a -O list ("no-holes,^free-space-tree") to *features. Unknown or
 * unsupported names: -EINVAL with the reason in why.
 */
int ub_mkfs_parse_features(const char *list, unsigned *features, char *why, size_t whylen);

/*
 * Fewest bytes each device needs for these profiles (mkfs.btrfs's own figure,
 * so that what it refuses we refuse too).
 */
uint64_t ub_mkfs_min_dev_size(uint64_t meta_profile, uint64_t data_profile);

/*
 * Refusals that need the paths, before anything is written: duplicates (a
 * loop device and the file behind it too), a device holding a mounted filesystem (also through a loop device backed by
 * the file, or as a member of a mounted multi-device btrfs), an existing
 * filesystem or partition table unless `force`. The reason goes to `why`.
 * 0, or -EBUSY (mounted), -EEXIST (existing signature), -EINVAL (duplicate),
 * or another -errno from probing.
 */
int ub_mkfs_check_paths(const char *const *paths, int npaths, bool force, char *why, size_t whylen);

/*
 * Write a new filesystem over `devs` (device i gets devid i + 1). Takes the
 * devices over: they are closed before this returns, also on failure.
 * Profile and size refusals come back as -EINVAL / -ENOSPC with a message
 * through `log`; nothing has been written then.
 */
int ub_mkfs(struct ub_dev *const *devs, int ndevs, const struct ub_mkfs_opts *opts, const struct ub_log *log,
	    struct ub_mkfs_result *res);

/* What mkfs --rootdir copied. */
struct ub_rootdir_stats {
	uint64_t inodes, links, xattrs, data_bytes, commits;
	/*
	 * What the last commit holds, which is what a failed copy leaves on disk:
	 * the counts above as they were at that commit (all 0 before the first:
	 * the filesystem is then as mkfs made it, empty), and the path of the
	 * entry the copy was at then. Every entry before it in the copy's order
	 * (depth first, each directory's entries in readdir order) is whole; that
	 * entry may be missing or partial, and a directory still open may lack its
	 * times, owner and mode.
	 */
	uint64_t kept_inodes, kept_links, kept_xattrs, kept_data_bytes;
	char kept_at[8192];
};

/*
 * Fill the filesystem just made on `paths` (closed: ub_mkfs returned) from
 * the folder `dir` through the write engine (lib/mkfs/rootdir.c says what is
 * copied and how). Problems with the source name the path through `log`.
 * 0 or -errno; on failure the filesystem holds the last commit of the copy.
 */
int ub_mkfs_rootdir(const char *const *paths, int npaths, const char *dir, int compress, int level,
		    const struct ub_log *log, struct ub_rootdir_stats *stats);

/* "zlib", "lzo", "zstd", optionally ":LEVEL" (zlib 1-9, zstd 1-15, lzo none): UB_COMPRESS_*, level (0: default) */
int ub_mkfs_parse_compress(const char *s, int *compress, int *level);

UB_API_END

#endif
