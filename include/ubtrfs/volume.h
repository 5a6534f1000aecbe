/* SPDX-License-Identifier: MIT */
/*
 * The volume layer: superblocks, device assembly, the chunk map and
 * logical -> physical translation for every profile.
 *
 * Library API: a user holds struct ub_volume as a handle (ub_fs_volume, or
 * opened here), reads it through ubtrfs/devinfo.h and reads logical bytes
 * and their copies here. Its structure, the chunk map, the profiles and the
 * write side are the library's (lib/volume/volume_priv.h).
 */
#ifndef UBTRFS_VOLUME_H
#define UBTRFS_VOLUME_H

#include <stdbool.h>
#include <stdint.h>
#include "ubtrfs/dev.h"
#include "ubtrfs/format.h"
#include "ubtrfs/log.h"
#include "ubtrfs/api.h"

UB_API_BEGIN

/* ---- superblock (lib/volume/super.c) ---- */

/* Byte offset of superblock mirror `i` (0..2). */
uint64_t ub_super_offset(int mirror);
/*
 * Validate a 4096-byte superblock copy read from byte offset `bytenr`:
 * magic, checksum, bytenr, sector/node sizes, sys chunk array bounds, levels.
 * On failure writes a reason into `why` and returns -EUCLEAN (bad checksum
 * or content) or -ENOENT (no magic: not a superblock at all).
 */
int ub_super_validate(const uint8_t *sb, uint64_t bytenr, char *why, size_t whylen);

/* ---- open, close, map (lib/volume/volume.c, chunk_map.c) ---- */

/* The assembled volume: the library's (lib/volume/volume_priv.h); a user holds a pointer. */
struct ub_volume;

struct ub_volume_opts {
	bool writable;
	int super_mirror; /* -1: newest valid copy; 0..2: use exactly that copy */
};

/*
 * Open devices (any order), read and validate their superblocks, group them by
 * fsid and devid, and load the system chunk array. The chunk tree is the tree
 * layer's to read; its items are fed back through ub_volume_add_chunk().
 */
int ub_volume_open(const char *const *paths, int npaths, const struct ub_volume_opts *opts,
		   const struct ub_log *log, struct ub_volume **out);
void ub_volume_close(struct ub_volume *vol);
/*
 * The same from devices already open (any backend). The volume takes every
 * device over: those it uses are closed with it, the others (and all of them
 * on failure) before this returns.
 */
int ub_volume_open_devs(struct ub_dev *const *devs, int ndevs, const struct ub_volume_opts *opts,
			const struct ub_log *log, struct ub_volume **out);
/*
 * A volume with no devices, from a superblock buffer alone (validated, system
 * chunk array loaded): for tools and fuzzers that look at a superblock only.
 */
int ub_volume_open_super(const uint8_t *sb, const struct ub_log *log, struct ub_volume **out);

/* Number of distinct ways `logical` can be read (copies; RAID5: 2; RAID6: num_stripes, see raid56.c). 0 if unmapped. */
int ub_volume_num_copies(const struct ub_volume *vol, uint64_t logical);
/*
 * Read `len` bytes at `logical` (must not cross a chunk). mirror 0: first copy
 * that reads without an I/O error; 1..n: exactly that copy. -ENOENT when
 * unmapped, -EIO when the copy cannot be read.
 */
int ub_volume_read(struct ub_volume *vol, uint64_t logical, uint64_t len, int mirror, void *buf);

/* Where copy `mirror` (1..) of `logical` lives; for messages and tests. */
int ub_volume_map(const struct ub_volume *vol, uint64_t logical, int mirror, uint64_t *devid,
		  uint64_t *physical, const char **path);

/* "copy M (devid D PATH physical P)" for messages; PATH is "missing" for an absent device. */
void ub_volume_describe_copy(const struct ub_volume *vol, uint64_t logical, int mirror, char *out, size_t len);

UB_API_END

#endif
