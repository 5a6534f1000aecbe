/* SPDX-License-Identifier: MIT */
/*
 * The stripe order of a striped chunk rebuilt without its chunk item
 * (chunk_order.c), from clues the raw scan of the devices gathers: where a
 * tree block of a logical address lies, and the checksum a data sector at a
 * logical address had.
 */
#ifndef UBTRFS_FS_CHUNK_ORDER_H
#define UBTRFS_FS_CHUNK_ORDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "ubtrfs/format.h"

struct ub_volume;

struct ub_clue {
	uint64_t logical, generation;
	uint64_t devid, physical; /* a tree block: where it was found */
	bool data;                /* a data sector: csum is its checksum */
	uint8_t csum[UB_CSUM_SIZE_MAX];
};

/*
 * Bounded: past UB_CLUES_MAX, every other 64 KiB unit of the address space
 * (by a hash of its number, so no stripe is favoured) is dropped, again as
 * often as needed.
 */
struct ub_clues {
	struct ub_clue *v;
	size_t n, cap;
	unsigned thin; /* a unit is kept when the low `thin` bits of its hash are 0 */
	bool sorted;
};

int ub_clues_add(struct ub_clues *c, const struct ub_clue *clue);
void ub_clues_free(struct ub_clues *c);

struct ub_stripe_place {
	uint64_t devid, physical, length;
};

/*
 * Put the n device extents st[] of the chunk at `logical` (`length` bytes,
 * block group `flags`: RAID0, RAID10, RAID5 or RAID6) in the order of the
 * chunk item's stripes. 0; -ENODATA when the clues do not settle it;
 * -EUCLEAN when they contradict each other or the extents; -ENOMEM. `why`
 * gets the reason on failure.
 */
int ub_chunk_order(struct ub_volume *vol, struct ub_clues *c, uint64_t logical, uint64_t length, uint64_t flags,
		   struct ub_stripe_place *st, int n, char *why, size_t whylen);

#endif
