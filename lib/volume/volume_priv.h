/* SPDX-License-Identifier: MIT */
/*
 * The volume's structures, private to the library: include/ubtrfs/volume.h
 * declares them opaque for users, who read a volume through
 * ubtrfs/devinfo.h. Library code that reads the fields includes this.
 */
#ifndef UBTRFS_VOLUME_PRIV_H
#define UBTRFS_VOLUME_PRIV_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "dev/dev_priv.h"
#include "ubtrfs/volume.h"

struct ub_vdev;

struct ub_stripe {
	uint64_t devid;
	uint64_t physical;
	uint8_t dev_uuid[UB_UUID_SIZE];
	struct ub_vdev *dev; /* NULL when the device is missing */
};

struct ub_chunk {
	uint64_t logical;
	uint64_t length;
	uint64_t type;        /* BTRFS_BLOCK_GROUP_* */
	uint64_t stripe_len;
	uint16_t num_stripes;
	uint16_t sub_stripes;
	const struct ub_profile *profile;
	struct ub_stripe stripes[];
};

#define UB_VOLUME_DEVS_ROOM 64

/* A device of the assembled volume. */
struct ub_vdev {
	uint64_t devid;
	uint8_t uuid[UB_UUID_SIZE];
	uint64_t total_bytes;  /* from the dev item */
	uint64_t generation;   /* of the superblock read from it */
	struct ub_dev *dev;    /* NULL when missing */
	bool missing;
	/*
	 * The device's dev item as last known (its own superblock at open, then
	 * the chunk tree's through ub_volume_add_dev_item): what
	 * ub_volume_write_supers puts into this device's superblock.
	 */
	uint8_t item[sizeof(struct btrfs_dev_item)];
	/* being removed: no new chunk is placed on it (a device removal relocates what it holds) */
	bool no_alloc;
	/* ---- read failures ---- the volume's log; set once the device's first failed read was said */
	const struct ub_log *log;
	atomic_bool read_failed;
};

struct ub_volume {
	struct ub_log log;
	uint8_t super[UB_SUPER_INFO_SIZE]; /* the superblock in use (validated) */
	int super_mirror_used;
	uint8_t fsid[UB_FSID_SIZE];
	uint8_t metadata_uuid[UB_FSID_SIZE]; /* what tree block headers carry */
	unsigned csum_type, csum_size;
	uint32_t sectorsize, nodesize;
	uint64_t generation;
	uint64_t num_devices;
	uint64_t generation_hint; /* newest generation among the given devices */
	/*
	 * The devices. The array never moves once readers may exist: it is made
	 * with room for UB_VOLUME_DEVS_ROOM devices (a device add beyond that is
	 * refused), and a removed device stays as a tombstone (devid 0, no
	 * handle, missing), because chunk stripes point into it and live readers
	 * follow those pointers without a lock.
	 */
	struct ub_vdev *vdevs;
	int nvdevs, vdevs_cap;
	struct ub_chunk **chunks; /* sorted by logical */
	int nchunks, chunks_cap;
	bool writable;
	bool creating;        /* ub_volume_create: dev items name the blank devices */
	/*
	 * Sticky: the first failed device write or flush. Once set, every write,
	 * flush and superblock write fails with -EROFS, so the last commit on disk
	 * is never followed by a superblock that points at half-written blocks.
	 */
	int write_error;
	/* device writes left out because the device is missing (degraded writes) */
	uint64_t writes_skipped;
	/*
	 * ---- api: readers map through `chunks` from any thread while the writer
	 * adds chunks (realloc, insertion). chunk_lock (set up by the first
	 * ub_volume_add_chunk, before any reader can exist) is held for reading
	 * across a lookup and for writing across a change; chunks themselves are
	 * freed only at close, so a found chunk stays valid. The writer thread
	 * alone changes the array, so its own loops over it need no lock. ----
	 */
	pthread_rwlock_t chunk_lock;
	bool chunk_lock_ready;
	/* ---- end api ---- */
};

const struct ub_chunk *ub_volume_find_chunk(const struct ub_volume *vol, uint64_t logical);
/* The assembled device with this devid (missing ones included), or NULL. */
struct ub_vdev *ub_volume_vdev(const struct ub_volume *vol, uint64_t devid);
/* Stripes of chunk `c` that carry data (a RAID5/6 row's data strips, RAID10's pairs, ...). */
int ub_chunk_data_stripes(const struct ub_chunk *c);
/*
 * What stripe `stripe` of chunk `c` holds (rebuild.c), for a device replace:
 * the copies of logical data it keeps, read through the volume (another copy
 * or a parity rebuild where its own device is missing or fails; not checked
 * against data checksums), and on RAID5/6 the P or Q of each row computed
 * from the row's data. init maps the stripe once; read gives [off, off + len)
 * from the stripe's start.
 */
struct ub_stripe_src {
	struct ub_volume *vol;
	const struct ub_chunk *c;
	int stripe;
	uint64_t size, units;
	uint64_t *table; /* per unit: the logical offset in the chunk it copies, UINT64_MAX for parity */
};
int ub_stripe_src_init(struct ub_stripe_src *src, struct ub_volume *vol, const struct ub_chunk *c, int stripe);
int ub_stripe_src_read(struct ub_stripe_src *src, uint64_t off, uint64_t len, uint8_t *buf);
void ub_stripe_src_free(struct ub_stripe_src *src);
/*
 * The logical ranges of chunk `c` that hold superblock mirrors (the kernel's
 * exclude_super_stripes): [start[i], +len[i]) for i < *n, at most `max`
 * (1 + UB_SUPER_MIRROR_MAX per stripe is always enough). 0, -EINVAL, -ENOSPC.
 */
int ub_chunk_super_ranges(const struct ub_chunk *c, uint64_t *start, uint64_t *len, int max, int *n);
/*
 * RAID5/6: read every strip of full stripe `full` of chunk `c` as stored and
 * compare P (and Q) with what the data strips give, in the rows `rows` names
 * (bit r: bytes [r * row_bytes, +row_bytes) of each strip; at most 64 rows).
 * 0 consistent; 1 a strip cannot be read (*unreadable: its slot, data 0..n-1
 * then P, Q); 2 parity differs (*bad_parity: 0 P, 1 Q; *bad_row: the first
 * row that differs); <0 -errno.
 */
int ub_volume_parity_check(const struct ub_chunk *c, uint64_t full, uint64_t rows, uint32_t row_bytes,
			   int *bad_parity, int *unreadable, int *bad_row);
/* The index into c->stripes of slot `slot` (data 0..n-1, P, Q) of full stripe `full`. */
int ub_volume_parity_slot(const struct ub_chunk *c, uint64_t full, int slot);
/* Bytes each stripe of chunk `c` occupies on its device (its device extent's length). */
uint64_t ub_chunk_stripe_size(const struct ub_chunk *c);
/*
 * Scrub's repair (rewrite.c): `len` bytes of `buf` written at `physical` on
 * the device of stripe `stripe` of chunk `c`, and nothing else: no other copy,
 * no parity. The range must lie inside that stripe's device extent (-EINVAL)
 * and pass the checks every write passes (ub_vol_phys_check: -EUCLEAN); a
 * missing device is -ENXIO, a read-only or failed volume -EROFS. A failed
 * device write is sticky as any other. The caller flushes.
 */
int ub_volume_rewrite(struct ub_volume *vol, const struct ub_chunk *c, int stripe, uint64_t physical, uint64_t len,
		      const void *buf);

/* raid_math.c: parity over in-memory stripes (data 0..ndata-1, then P, then Q), ISA-L's */
#define UB_RAID_MAX_STRIPES 64
int ub_raid_gen_parity(int ndata, int nparity, uint8_t **stripes, size_t len);
/* Recompute every stripe flagged in `lost` (at most nparity of them) from the others. */
int ub_raid_recover(int ndata, int nparity, uint8_t **stripes, const bool *lost, size_t len);

/* ---- what only the library calls: chunk feeding, the write side ---- */

/* ---- profiles (lib/volume/profile.c) ---- */

/* How a family of profiles maps, reads, writes and counts copies (internal: lib/volume). */
struct ub_layout;

struct ub_profile {
	uint64_t flag;         /* BTRFS_BLOCK_GROUP_* profile bit, 0 for single */
	const char *name;      /* "single", "DUP", "RAID1", ... (messages) */
	const char *opt;       /* "single", "dup", "raid1", ... (mkfs -d / -m, as btrfs-progs spells them) */
	int ncopies;           /* full copies of each block (1 for RAID0/5/6) */
	int nparity;           /* 0, 1 (RAID5) or 2 (RAID6) */
	int sub_stripes;       /* 2 for RAID10, else 1 */
	int devs_min;          /* fewest devices the profile is allowed on */
	int tolerated_failures;
	/* ---- placing a chunk (the kernel's btrfs_raid_array) ---- */
	int dev_stripes;       /* stripes per device (DUP: 2) */
	int devs_max;          /* stripes a chunk spreads over: 0 as many devices as there are */
	int devs_increment;    /* the device count is rounded down to a multiple of it */
	bool striped;          /* the data is spread over the stripes (RAID0/10/5/6), not copied whole onto each */
	uint64_t incompat;     /* the incompat feature a filesystem using it must carry, or 0 */
	int raid_index;        /* the kernel's enum btrfs_raid_types (its order of profiles) */
	int statfs_stripes;    /* the kernel's statfs counts chunks of this many stripes (0: one per device) */
	int mkfs_devs_min;     /* fewest devices mkfs makes it on (RAID10: two mirrored pairs) */
	const struct ub_layout *layout;
};
/*
 * A chunk item (its stripes' devid, physical offset and device uuid in
 * devid[], phys[], uuids[]: num entries, uuids UB_UUID_SIZE each), as the
 * kernel writes one: owner the extent tree, 64 KiB stripes. item holds
 * ub_chunk_item_bytes(num) bytes.
 */
uint32_t ub_chunk_item_bytes(int num_stripes);
/* most stripes one chunk may have here (the kernel's limit is the item size; 64 is every layout we place) */
#define UB_CHUNK_MAX_STRIPES 64
void ub_chunk_item_encode(uint64_t length, uint64_t type, uint32_t sectorsize, int num, int sub_stripes,
			  const uint64_t *devid, const uint64_t *phys, const uint8_t *uuids, uint8_t *item);
/*
 * A chunk of profile `type` at `logical` from its stripes (devid[i],
 * phys[i]), each device's uuid the volume's: encoded and added as
 * ub_volume_add_chunk adds one read from the disk.
 */
int ub_volume_add_chunk_stripes(struct ub_volume *vol, uint64_t logical, uint64_t length, uint64_t type, int num,
				const uint64_t *devid, const uint64_t *phys);
/* Every profile, in the kernel's order of preference for new data chunks (most redundant first). */
const struct ub_profile *ub_profile_at(int i);
int ub_profile_count(void);
/* The profile `opt` names (mkfs's -d / -m, case-insensitive), or NULL. */
const struct ub_profile *ub_profile_named(const char *opt);
/* How many stripes of a chunk of profile p, num stripes, hold data side by side (the rest mirror or parity). */
int ub_profile_data_stripes(const struct ub_profile *p, int num_stripes, int sub_stripes);
/* Profile of a chunk/block group type (only the profile bits are looked at). */
const struct ub_profile *ub_profile_of(uint64_t type);
/* raid: whether a chunk of `type` may have `num` stripes (`sub` sub_stripes); the one rule the volume and tree_check share */
bool ub_profile_stripes_valid(uint64_t type, unsigned num, unsigned sub);

/*
 * Add a chunk from a chunk item (`item` of `size` bytes, key offset = logical).
 * Validates the item (stripe count, sizes, profile). Duplicates are ignored.
 */
int ub_volume_add_chunk(struct ub_volume *vol, uint64_t logical, const uint8_t *item, uint32_t size);
/*
 * Every tree block of this filesystem on every present device, read raw (no
 * chunk map): want (optional) sees the header first, found gets each block
 * whose checksum matches (nodesize bytes, with the device and physical offset
 * it lies at). A non-zero return of found ends the scan with it.
 */
struct ub_raw_scan_ops {
	bool (*want)(void *arg, const uint8_t *header);
	int (*found)(void *arg, uint64_t devid, uint64_t physical, const uint8_t *block);
	void *arg;
	/* optional: bytes read so far of the present devices' total, after each window */
	void (*progress)(void *arg, uint64_t done, uint64_t total);
	void *progress_arg;
};
int ub_volume_scan_raw(struct ub_volume *vol, const struct ub_raw_scan_ops *ops);
/* `len` bytes at `physical` on device `devid`, no chunk map involved (-ENXIO: no such device here). */
int ub_volume_read_raw(struct ub_volume *vol, uint64_t devid, void *buf, size_t len, uint64_t physical);
/* Record a device item from the chunk tree (so missing devices are known). */
int ub_volume_add_dev_item(struct ub_volume *vol, const uint8_t *item, uint32_t size);
/*
 * A device added to an open writable volume (a device add): `dev` taken
 * over, its dev item `item` (devid, uuid, total_bytes...). Every chunk's
 * stripes are bound again (the device array moves). 0, -EEXIST (the devid is
 * taken), -ENOMEM.
 */
int ub_volume_add_device(struct ub_volume *vol, struct ub_dev *dev, const uint8_t *item);
/*
 * A device taken out of the volume (a device removal, once no chunk has a
 * stripe on it): the next superblocks are not written to it; its handle is
 * handed to the caller (*dev, NULL for a missing device) to wipe and close.
 * 0 or -ENOENT. The caller checks that no live chunk has a stripe there (the
 * map also keeps removed chunks, whose stripes then name no device).
 */
int ub_volume_detach_device(struct ub_volume *vol, uint64_t devid, struct ub_dev **dev);
/*
 * A replace: device `devid` is `dev` from now on (taken over), present; the
 * handle it had (NULL when missing) goes to *old for the caller to wipe and
 * close. Its chunk stripes are bound to it again. 0 or -ENOENT.
 */
int ub_volume_swap_device(struct ub_volume *vol, uint64_t devid, struct ub_dev *dev, struct ub_dev **old);

/*
 * After the chunk tree is loaded: report each missing device (by devid) and
 * whether every chunk's profile still covers it. -ENXIO if some chunk lost
 * more devices than its redundancy allows (reads there will fail).
 */
int ub_volume_check_devices(struct ub_volume *vol);

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
 * The same in two steps, for a commit that writes without the writer lock:
 * the images (each device's superblock with its own dev item as it is now,
 * taken with the lock), then their writing (flush, every mirror, flush) on
 * any thread. vol->super is the caller's to update.
 */
struct ub_super_images;
int ub_volume_super_images(struct ub_volume *vol, const uint8_t *sb, struct ub_super_images **out);
int ub_volume_write_super_images(struct ub_volume *vol, struct ub_super_images *ims);
/*
 * The same, the primary copy of each device only: a log sync's superblock (the
 * last commit's, pointing at the fsync log), as the kernel writes it. The
 * volume's generation is unchanged (it is the same commit's).
 */
int ub_volume_write_super_images_primary(struct ub_volume *vol, struct ub_super_images *ims);
void ub_super_images_free(struct ub_super_images *ims);
/*
 * Only the copies `want` picks (devid, mirror 0..2) among those that fit,
 * written as ub_volume_write_supers writes each (the device's own dev item,
 * bytenr, checksum), flushed before and after: a superblock rewritten where a
 * copy is bad or stale (rescue super-recover). The volume's own copy and
 * generation stay. *written (may be NULL) counts the copies written.
 */
int ub_volume_write_super_copies(struct ub_volume *vol, const uint8_t *sb,
				 bool (*want)(void *arg, uint64_t devid, int mirror), void *arg, int *written);
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

#endif
