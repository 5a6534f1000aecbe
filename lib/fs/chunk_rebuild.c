/* SPDX-License-Identifier: MIT */
/*
 * When not one leaf of the chunk tree survives, the chunks are rebuilt from
 * what other trees record about them: each block group item (extent tree or
 * block group tree: a chunk's logical start, length and profile) and the
 * device extents (device tree: where each stripe of a chunk lies), taken from
 * leaves a raw scan of every device finds, newest copy of each first. The
 * stripes of a mirrored profile (single, DUP, RAID1, RAID1C3/4) may come in
 * any order; a striped one (RAID0/10/5/6) needs the order, which only the
 * chunk item held, so those chunks stay unmapped. Read-only opens that ask
 * for it (restore) only.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "fs_priv.h"
#include "alloc/chunk_alloc.h"
#include "tree/tree_check.h"

#define HD(f, h) UB_GET(ub_disk_header, f, h)

struct found_bg {
	uint64_t logical, length, flags, generation;
};

struct found_dx {
	uint64_t devid, physical, chunk_offset, length, generation;
};

struct rebuild {
	struct ub_fs *fs;
	struct ub_check_ctx cctx;
	uint64_t newest; /* the superblock's generation: anything newer was never committed */
	struct found_bg *bg;
	size_t nbg, bg_cap;
	struct found_dx *dx;
	size_t ndx, dx_cap;
	size_t leaves;
};

static bool want_leaf(void *arg, const uint8_t *h)
{
	struct rebuild *rb = arg;
	uint64_t owner = HD(owner, h);

	return HD(level, h) == 0 && HD(generation, h) <= rb->newest &&
	       (owner == BTRFS_DEV_TREE_OBJECTID || owner == BTRFS_EXTENT_TREE_OBJECTID ||
		owner == BTRFS_BLOCK_GROUP_TREE_OBJECTID);
}

static void *grow(void *v, size_t *cap, size_t n, size_t elem)
{
	size_t c;
	void *nv;

	if (n < *cap)
		return v;
	c = *cap ? *cap * 2 : 64;
	nv = realloc(v, c * elem);
	if (nv)
		*cap = c;
	return nv;
}

static int found_leaf(void *arg, uint64_t devid, uint64_t physical, const uint8_t *h)
{
	struct rebuild *rb = arg;
	uint32_t n = (uint32_t)HD(nritems, h);
	uint64_t gen = HD(generation, h);
	char why[160];

	(void)devid;
	(void)physical;
	rb->cctx.owner = HD(owner, h);
	/* item bounds and sizes as any read checks them: only then are the items walked */
	if (ub_tree_check_block(h, &rb->cctx, why, sizeof(why)))
		return 0;
	rb->leaves++;
	for (uint32_t i = 0; i < n; i++) {
		const uint8_t *it = h + UB_HEADER_SIZE + (size_t)i * UB_ITEM_SIZE;
		const uint8_t *d = h + UB_HEADER_SIZE + UB_GET(ub_disk_item, offset, it);
		struct ub_key k;

		ub_key_read(&k, it);
		if (k.type == BTRFS_BLOCK_GROUP_ITEM_KEY) {
			struct found_bg *v = grow(rb->bg, &rb->bg_cap, rb->nbg, sizeof(*v));

			if (!v)
				return -ENOMEM;
			rb->bg = v;
			v[rb->nbg++] = (struct found_bg){ k.objectid, k.offset,
							  UB_GET(btrfs_block_group_item, flags, d), gen };
		} else if (k.type == BTRFS_DEV_EXTENT_KEY) {
			struct found_dx *v = grow(rb->dx, &rb->dx_cap, rb->ndx, sizeof(*v));

			if (!v)
				return -ENOMEM;
			rb->dx = v;
			v[rb->ndx++] = (struct found_dx){ k.objectid, k.offset, UB_GET(btrfs_dev_extent, chunk_offset, d),
							  UB_GET(btrfs_dev_extent, length, d), gen };
		}
	}
	return 0;
}

/* Block groups by address, newest copy first. */
static int bg_cmp(const void *a, const void *b)
{
	const struct found_bg *x = a, *y = b;

	if (x->logical != y->logical)
		return x->logical < y->logical ? -1 : 1;
	return x->generation > y->generation ? -1 : x->generation < y->generation;
}

/* Device extents by chunk, then by where they lie, newest copy first. */
static int dx_cmp(const void *a, const void *b)
{
	const struct found_dx *x = a, *y = b;

	if (x->chunk_offset != y->chunk_offset)
		return x->chunk_offset < y->chunk_offset ? -1 : 1;
	if (x->devid != y->devid)
		return x->devid < y->devid ? -1 : 1;
	if (x->physical != y->physical)
		return x->physical < y->physical ? -1 : 1;
	return x->generation > y->generation ? -1 : x->generation < y->generation;
}

/* How many stripes a mirrored profile has (0: striped, not rebuilt). */
static int mirror_stripes(uint64_t flags)
{
	switch (flags & BTRFS_BLOCK_GROUP_PROFILE_MASK) {
	case 0: return 1;
	case BTRFS_BLOCK_GROUP_DUP:
	case BTRFS_BLOCK_GROUP_RAID1: return 2;
	case BTRFS_BLOCK_GROUP_RAID1C3: return 3;
	case BTRFS_BLOCK_GROUP_RAID1C4: return 4;
	default: return 0;
	}
}

/* One chunk item from block group `g` and its device extents dx[0..n). 0, or why not. */
static int add_chunk(struct rebuild *rb, const struct found_bg *g, const struct found_dx *dx, int n)
{
	struct ub_volume *vol = rb->fs->vol;
	uint8_t item[sizeof(struct btrfs_chunk) + 3 * sizeof(struct btrfs_stripe)];
	uint8_t uuids[4 * UB_UUID_SIZE];
	struct ub_chunk_plan plan = { 0 };
	int want = mirror_stripes(g->flags);

	if (!want)
		return -EOPNOTSUPP;
	if (n != want)
		return -ENOENT;
	if (want == 2 && !!(g->flags & BTRFS_BLOCK_GROUP_DUP) != (dx[0].devid == dx[1].devid))
		return -EUCLEAN;
	plan.type = g->flags;
	plan.length = g->length;
	plan.stripe_size = g->length;
	plan.num_stripes = n;
	for (int i = 0; i < n; i++) {
		const struct ub_vdev *vd = ub_volume_vdev(vol, dx[i].devid);

		if (!vd || dx[i].length != g->length)
			return -EUCLEAN;
		plan.stripes[i].devid = dx[i].devid;
		plan.stripes[i].physical = dx[i].physical;
		memcpy(uuids + (size_t)i * UB_UUID_SIZE, vd->uuid, UB_UUID_SIZE);
	}
	ub_chunk_encode(&plan, vol->sectorsize, uuids, item);
	return ub_volume_add_chunk(vol, g->logical, item, ub_chunk_item_size(n));
}

int ub_fs_rebuild_chunks(struct ub_fs *fs)
{
	struct ub_volume *vol = fs->vol;
	struct rebuild rb = { .fs = fs, .newest = UB_GET(ub_disk_super, generation, vol->super) };
	struct ub_raw_scan_ops ops = { .want = want_leaf, .found = found_leaf, .arg = &rb,
				       .progress = fs->opts.rescue_progress, .progress_arg = fs->opts.rescue_arg };
	int added = 0, skipped = 0, ret;

	rb.cctx = (struct ub_check_ctx){ .nodesize = vol->nodesize, .sectorsize = vol->sectorsize,
					 .csum_size = vol->csum_size,
					 .incompat_flags = UB_GET(ub_disk_super, incompat_flags, vol->super) };
	ub_warn(&fs->log, "chunk rebuild: no chunk tree leaf survives; scanning every device for block group "
		"items and device extents");
	ret = ub_volume_scan_raw(vol, &ops);
	if (ret)
		goto out;
	if (rb.nbg)
		qsort(rb.bg, rb.nbg, sizeof(*rb.bg), bg_cmp);
	if (rb.ndx)
		qsort(rb.dx, rb.ndx, sizeof(*rb.dx), dx_cmp);
	for (size_t i = 0, j = 0; i < rb.nbg; i++) {
		const struct found_bg *g = &rb.bg[i];
		struct found_dx mine[4];
		int n = 0, why;

		if (i && rb.bg[i - 1].logical == g->logical)
			continue; /* an older copy */
		if (ub_volume_find_chunk(vol, g->logical))
			continue; /* mapped already (the system chunks) */
		while (j < rb.ndx && rb.dx[j].chunk_offset < g->logical)
			j++;
		/* the stripes of this chunk: one per place, the newest copy of each */
		for (size_t k = j; k < rb.ndx && rb.dx[k].chunk_offset == g->logical; k++) {
			if (k > j && rb.dx[k - 1].devid == rb.dx[k].devid && rb.dx[k - 1].physical == rb.dx[k].physical)
				continue;
			if (n == 4) {
				n = 5;
				break;
			}
			mine[n++] = rb.dx[k];
		}
		why = n > 4 ? -EUCLEAN : add_chunk(&rb, g, mine, n);
		if (why == -ENOMEM) {
			ret = why;
			goto out;
		}
		if (why) {
			skipped++;
			ub_warn(&fs->log, "chunk rebuild: block group at logical %llu (%llu bytes, flags 0x%llx, generation %llu): not mapped: %s",
				(unsigned long long)g->logical, (unsigned long long)g->length,
				(unsigned long long)g->flags, (unsigned long long)g->generation,
				why == -EOPNOTSUPP ? "a striped profile's stripe order is only in its chunk item" :
				why == -ENOENT ? "its device extents are not all found" :
				why == -EUCLEAN ? "its device extents do not match it" : strerror(-why));
		} else {
			added++;
		}
	}
	ub_warn(&fs->log, "chunk rebuild: %zu leaves gave %d chunks (%d block groups left unmapped); what they map "
		"is the newest the disk holds, not a committed state", rb.leaves, added, skipped);
	if (!added)
		ret = -ENOENT;
out:
	free(rb.bg);
	free(rb.dx);
	return ret;
}
