/* SPDX-License-Identifier: MIT */
/*
 * The volume layer: superblocks, device assembly, the chunk map and
 * logical -> physical translation for every profile.
 *
 * Library API: a user holds struct ub_volume as a handle (ub_fs_volume) and
 * reads it through ubtrfs/devinfo.h. Its structure and the chunk map's are
 * the library's (lib/volume/volume_priv.h).
 */
#ifndef UBTRFS_VOLUME_H
#define UBTRFS_VOLUME_H

#include <stdbool.h>
#include <stdint.h>
#include "ubtrfs/dev.h"
#include "ubtrfs/format.h"
#include "ubtrfs/log.h"

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

/* ---- profiles (lib/volume/profile.c) ---- */

/* How a family of profiles maps, reads, writes and counts copies (internal: lib/volume). */
struct ub_layout;

struct ub_profile {
	uint64_t flag;         /* BTRFS_BLOCK_GROUP_* profile bit, 0 for single */
	const char *name;      /* "single", "DUP", "RAID1", ... */
	int ncopies;           /* full copies of each block (1 for RAID0/5/6) */
	int nparity;           /* 0, 1 (RAID5) or 2 (RAID6) */
	int sub_stripes;       /* 2 for RAID10, else 1 */
	int devs_min;          /* fewest devices the profile is allowed on */
	int tolerated_failures;
	const struct ub_layout *layout;
};
/* Profile of a chunk/block group type (only the profile bits are looked at). */
const struct ub_profile *ub_profile_of(uint64_t type);
/* raid: whether a chunk of `type` may have `num` stripes (`sub` sub_stripes); the one rule the volume and tree_check share */
bool ub_profile_stripes_valid(uint64_t type, unsigned num, unsigned sub);

/* ---- open, close, map (lib/volume/volume.c, chunk_map.c) ---- */

/* The assembled volume: the library's (lib/volume/volume_priv.h); a user holds a pointer. */
struct ub_volume;
/* A chunk of the chunk map (lib/volume/volume_priv.h). */
struct ub_chunk;

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

/*
 * Add a chunk from a chunk item (`item` of `size` bytes, key offset = logical).
 * Validates the item (stripe count, sizes, profile). Duplicates are ignored.
 */
int ub_volume_add_chunk(struct ub_volume *vol, uint64_t logical, const uint8_t *item, uint32_t size);
/* Record a device item from the chunk tree (so missing devices are known). */
int ub_volume_add_dev_item(struct ub_volume *vol, const uint8_t *item, uint32_t size);

/*
 * After the chunk tree is loaded: report each missing device (by devid) and
 * whether every chunk's profile still covers it. -ENXIO if some chunk lost
 * more devices than its redundancy allows (reads there will fail).
 */
int ub_volume_check_devices(struct ub_volume *vol);

/* Number of distinct ways `logical` can be read (copies; RAID5: 2; RAID6: num_stripes, see raid56.c). 0 if unmapped. */
int ub_volume_num_copies(const struct ub_volume *vol, uint64_t logical);
/*
 * Read `len` bytes at `logical` (must not cross a chunk). mirror 0: first copy
 * that reads without an I/O error; 1..n: exactly that copy. -ENOENT when
 * unmapped, -EIO when the copy cannot be read.
 */
int ub_volume_read(struct ub_volume *vol, uint64_t logical, uint64_t len, int mirror, void *buf);

/*
 * Write `len` bytes at `logical` to every copy (must not cross a chunk:
 * -EINVAL; unmapped: -ENOENT). RAID5/6: P and Q are recomputed for every full
 * stripe the write touches; the parts of those full stripes the write does not
 * cover are read from disk (rebuilt from parity when their device is missing).
 * Copies on missing devices are skipped and counted in writes_skipped as long
 * as the chunk keeps every byte (-EIO otherwise, before anything is written).
 * A physical range outside the device, inside its first MiB or over a
 * superblock mirror is refused with -EUCLEAN. A failing device write makes the
 * error sticky (see write_error): -EROFS from then on.
 */
int ub_volume_write(struct ub_volume *vol, uint64_t logical, uint64_t len, const void *buf);
/* Flush every present device (sticky on failure, like writes). */
int ub_volume_flush(struct ub_volume *vol);
/*
 * Superblock `sb` (UB_SUPER_INFO_SIZE bytes, already holding the new roots and
 * backup roots) to every present device at every mirror offset that fits the
 * device (and its dev item's total_bytes): per device the dev_item is that
 * device's (vdev->item, generation 0, fsid = metadata_uuid), bytenr is the
 * mirror's offset, the WRITTEN flag is set and the checksum recomputed with the
 * superblock's algorithm. The devices are flushed before (the blocks the
 * superblock points at must be durable first) and after. On success the
 * volume's own copy (vol->super, generation) becomes `sb`.
 */
int ub_volume_write_supers(struct ub_volume *vol, const uint8_t *sb);
/*
 * mkfs: a writable volume over blank devices (devs[i] gets devid i+1, total
 * bytes = its size, until ub_volume_add_dev_item says otherwise) from a
 * superblock template holding magic, fsid, sector and node sizes, csum type
 * and the system chunk array (loaded as on open; the template needs no roots
 * and no checksum yet). Call ub_volume_add_dev_item for every device before
 * ub_volume_write_supers: its item is what that device's superblock carries.
 * Nothing is read from the devices. The caller adds the other chunks and dev
 * items with ub_volume_add_chunk / ub_volume_add_dev_item (a dev item also
 * gives its device its uuid here). Takes every device over, as
 * ub_volume_open_devs does (closed on failure too).
 */
int ub_volume_create(struct ub_dev *const *devs, int ndevs, const uint8_t *sb, const struct ub_log *log,
		     struct ub_volume **out);
/* The sticky write error: the first failed device write or flush; 0 if none. */
int ub_volume_write_error(const struct ub_volume *vol);

/* Where copy `mirror` (1..) of `logical` lives; for messages and tests. */
int ub_volume_map(const struct ub_volume *vol, uint64_t logical, int mirror, uint64_t *devid,
		  uint64_t *physical, const char **path);

/* "copy M (devid D PATH physical P)" for messages; PATH is "missing" for an absent device. */
void ub_volume_describe_copy(const struct ub_volume *vol, uint64_t logical, int mirror, char *out, size_t len);

#endif
