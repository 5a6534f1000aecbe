/* SPDX-License-Identifier: MIT */
/* Shared between the volume layer's files only. */
#ifndef UBTRFS_VOLUME_INTERNAL_H
#define UBTRFS_VOLUME_INTERNAL_H

#include "volume/volume_priv.h"

struct ub_map {
	int stripe;           /* index into chunk->stripes */
	uint64_t physical;    /* on that stripe's device */
	uint64_t contig;      /* bytes contiguous from there */
	int data_index;       /* RAID5/6: data stripe number inside the full stripe */
	uint64_t full_stripe; /* RAID5/6: full stripe number inside the chunk */
};

/*
 * A family of profiles: everything that differs between profiles, so that the
 * rest of the volume layer never asks which profile a chunk has. Offsets are
 * inside the chunk; mirrors are 1-based stored copies (rebuilds are the
 * layout's own business inside read).
 */
struct ub_layout {
	/* the stripe counts a chunk item of profile `p` may have */
	bool (*stripes_valid)(const struct ub_profile *p, unsigned num, unsigned sub);
	/* distinct ways a byte can be read (ub_volume_num_copies) */
	int (*num_copies)(const struct ub_chunk *c);
	/* where stored copy `mirror` (>= 1) of chunk offset `off` lives, and how far it runs contiguously */
	int (*map)(const struct ub_chunk *c, uint64_t off, int mirror, struct ub_map *m);
	/* ub_volume_read inside one chunk (range already checked) */
	int (*read)(struct ub_volume *vol, const struct ub_chunk *c, uint64_t logical, uint64_t len, int mirror,
		    uint8_t *buf);
	/* ub_volume_write inside one chunk (range and sticky state already checked) */
	int (*write)(struct ub_volume *vol, const struct ub_chunk *c, uint64_t logical, uint64_t len,
		     const uint8_t *buf);
	/* every byte still readable with the chunk's missing devices */
	bool (*readable)(const struct ub_chunk *c);
};

extern const struct ub_layout ub_layout_mirror; /* single, DUP, RAID1, RAID1C3, RAID1C4 (copies.c) */
extern const struct ub_layout ub_layout_raid0;  /* copies.c */
extern const struct ub_layout ub_layout_raid10; /* copies.c */
extern const struct ub_layout ub_layout_parity; /* RAID5, RAID6 (raid56.c) */

/*
 * A chunk item's own rules (size against num_stripes, type, length, stripe
 * length, the profile's stripe counts): 0, or -EUCLEAN with the reason in `why`.
 */
int ub_chunk_item_check(uint64_t logical, const uint8_t *item, uint32_t size, uint32_t sectorsize, char *why,
			size_t whylen);
int ub_chunk_map_copy(const struct ub_chunk *c, uint64_t logical, int mirror, struct ub_map *m);
int ub_chunk_num_copies(const struct ub_chunk *c);
void ub_chunk_bind(struct ub_volume *vol, struct ub_chunk *c);
void ub_chunks_free(struct ub_volume *vol);

/* write.c: what every layout's write goes through */
/* -EUCLEAN (named) when stripe `stripe`'s physical range may not be written: outside the device, its first MiB, a superblock mirror */
int ub_vol_phys_check(struct ub_volume *vol, const struct ub_chunk *c, int stripe, uint64_t phys, uint64_t len);
/* one device write; a failure is named and becomes the volume's sticky error */
int ub_vol_dev_write(struct ub_volume *vol, const struct ub_chunk *c, int stripe, const void *buf, uint64_t len,
		     uint64_t phys);
/* the same, the iovcnt buffers back to back from phys in one device write */
int ub_vol_dev_writev(struct ub_volume *vol, const struct ub_chunk *c, int stripe, const struct iovec *iov, int iovcnt,
		      uint64_t phys);

/* par_io.c: a write's device pieces side by side */
/* whether pieces of a `bytes` write to chunk `c` are worth a second thread (every present device a plain file, a second CPU) */
bool ub_vol_par_worth(const struct ub_chunk *c, uint64_t bytes);
/* fn(arg, i) for every i < n, on two threads when side_by_side; the first error, after which no piece starts */
int ub_vol_par_run(int n, bool side_by_side, int (*fn)(void *arg, int i), void *arg);

/* raid_math.c: ub_raid_gen_parity, ub_raid_recover (volume_priv.h: scrub uses them too) */

/* ---- gathered reads and writes (span_io.c) ---- */
/*
 * Copy `mirror` (a place on disk: layout->map must map it) of [logical,
 * logical+len) of chunk `c` with one gathered read per run of units that
 * follow each other on a device, every device advised first. -ENXIO before any
 * I/O when a unit is on a missing device.
 */
int ub_span_read(const struct ub_chunk *c, uint64_t logical, uint64_t len, int mirror, uint8_t *buf);
/* A present device's read, its first failure logged (volume.c): 0 or <0 as ub_dev_read / ub_dev_readv. */
int ub_vdev_read(struct ub_vdev *vd, void *buf, size_t len, uint64_t phys);
int ub_vdev_readv(struct ub_vdev *vd, const struct iovec *iov, int iovcnt, uint64_t phys);
/*
 * Copy `copy` of [logical, logical+len) written with one gathered write per
 * run of units on a device; units on missing devices are left out (the caller
 * checked that each has a copy elsewhere and that every place is in bounds).
 */
int ub_span_write(struct ub_volume *vol, const struct ub_chunk *c, uint64_t logical, uint64_t len, int copy,
		  const uint8_t *buf);
/*
 * From this length on a read is taken as part of a stream: twice its length
 * after it is advised too (measured: once is slower, four times no faster).
 */
#define UB_STREAM_MIN (1ULL << 20)
#define UB_STREAM_AHEAD 2

/*
 * volume.c: a device's superblock, checked as every open checks it: the newest
 * valid copy (want_mirror -1) or exactly copy `want_mirror`, into `super`
 * (UB_SUPER_INFO_SIZE bytes). What is wrong is said through `log`.
 */
int ub_volume_read_super(struct ub_dev *dev, int want_mirror, const struct ub_log *log, uint8_t *super, int *mirror);

#endif
