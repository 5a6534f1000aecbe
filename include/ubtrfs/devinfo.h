/* SPDX-License-Identifier: MIT */
/*
 * What a volume says about itself and its devices, for tools: copies, so a
 * caller never reads struct ub_volume's fields.
 */
#ifndef UBTRFS_DEVINFO_H
#define UBTRFS_DEVINFO_H

#include <stdbool.h>
#include <stdint.h>
#include "ubtrfs/volume.h"
#include "ubtrfs/api.h"

UB_API_BEGIN

struct ub_volume_info {
	char label[UB_LABEL_SIZE + 1]; /* as stored, NUL-terminated; may hold any other byte */
	uint8_t fsid[UB_FSID_SIZE];
	uint64_t generation;  /* of the superblock in use */
	uint64_t num_devices; /* what the superblock says the filesystem has */
	uint64_t bytes_used;
	int ndevices;         /* devices the volume knows (present or missing) */
	int nmissing;
	/* ---- geometry: what printing a tree block needs ---- */
	uint32_t sectorsize, nodesize;
	unsigned csum_type, csum_size;
};

struct ub_device_info {
	uint64_t devid;
	uint8_t uuid[UB_UUID_SIZE];
	uint64_t total_bytes; /* from the dev item */
	bool missing;
	const char *path;     /* NULL when missing; valid while the volume is open */
};

int ub_volume_get_info(const struct ub_volume *vol, struct ub_volume_info *out);
/* The superblock in use (UB_SUPER_INFO_SIZE bytes, validated; read with ub_disk_super accessors); valid while open. */
const uint8_t *ub_volume_super(const struct ub_volume *vol);
/* Every known device in devid order: *out is malloc'd (the caller frees it), *n its length. */
int ub_volume_list_devices(const struct ub_volume *vol, struct ub_device_info **out, int *n);

UB_API_END

#endif
