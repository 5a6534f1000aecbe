/* SPDX-License-Identifier: MIT */
/*
 * The volume's structures, private to the library: include/ubtrfs/volume.h
 * declares them opaque for users, who read a volume through
 * ubtrfs/devinfo.h. Library code that reads the fields includes this.
 */
#ifndef UBTRFS_VOLUME_PRIV_H
#define UBTRFS_VOLUME_PRIV_H

#include <pthread.h>
#include <stdbool.h>
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
	struct ub_vdev *vdevs;
	int nvdevs;
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

#endif
