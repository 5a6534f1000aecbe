/* SPDX-License-Identifier: MIT */
/* Shared between the volume layer's files only. */
#ifndef UBTRFS_VOLUME_INTERNAL_H
#define UBTRFS_VOLUME_INTERNAL_H

#include "ubtrfs/volume.h"

struct ub_map {
	int stripe;           /* index into chunk->stripes */
	uint64_t physical;    /* on that stripe's device */
	uint64_t contig;      /* bytes contiguous from there */
	int data_index;       /* RAID5/6: data stripe number inside the full stripe */
	uint64_t full_stripe; /* RAID5/6: full stripe number inside the chunk */
};

int ub_chunk_map_copy(const struct ub_chunk *c, uint64_t logical, int mirror, struct ub_map *m);
int ub_chunk_num_copies(const struct ub_chunk *c);
void ub_chunk_bind(struct ub_volume *vol, struct ub_chunk *c);
void ub_chunks_free(struct ub_volume *vol);

/* raid_math.c: parity over in-memory stripes (data 0..ndata-1, then P, then Q) */
#define UB_RAID_MAX_STRIPES 64
int ub_raid_gen_parity(int ndata, int nparity, uint8_t **stripes, size_t len);
/* Recompute every stripe flagged in `lost` (at most nparity of them) from the others. */
int ub_raid_recover(int ndata, int nparity, uint8_t **stripes, const bool *lost, size_t len);

/* raid56.c */
int ub_raid56_num_copies(const struct ub_chunk *c);
int ub_raid56_read(struct ub_volume *vol, const struct ub_chunk *c, uint64_t logical, uint64_t len, int mirror,
		   uint8_t *buf);

#endif
