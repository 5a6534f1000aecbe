/* SPDX-License-Identifier: MIT */
/*
 * When not one leaf of the chunk tree survives, the chunks are rebuilt from
 * what other trees record about them: each block group item (extent tree or
 * block group tree: a chunk's logical start, length and profile) and the
 * device extents (device tree: where each stripe of a chunk lies), taken from
 * leaves a raw scan of every device finds, newest copy of each first. The
 * stripes of a mirrored profile (single, DUP, RAID1, RAID1C3/4) may come in
 * any order; a striped one (RAID0/10/5/6) needs the order, which only the
 * chunk item held: the same scan gathers where each tree block lies and
 * checksums of data sectors, and chunk_order.c works the order out from
 * them, or leaves the chunk unmapped. Read-only opens that ask for it
 * (restore) only.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fs_priv.h"
#include "chunk_order.h"
#include "tree/tree_check.h"
#include "tree/tree_write.h"

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
	struct ub_clues clues; /* for the stripe order of striped chunks */
};

/* Every block: where each lies is a clue to the stripe order; the items of a few leaves are read too. */
static bool want_leaf(void *arg, const uint8_t *h)
{
	struct rebuild *rb = arg;

	return HD(generation, h) <= rb->newest;
}

static bool items_wanted(const uint8_t *h)
{
	uint64_t owner = HD(owner, h);

	return HD(level, h) == 0 &&
	       (owner == BTRFS_DEV_TREE_OBJECTID || owner == BTRFS_EXTENT_TREE_OBJECTID ||
		owner == BTRFS_BLOCK_GROUP_TREE_OBJECTID || owner == BTRFS_CSUM_TREE_OBJECTID);
}

/* Checksums of data sectors, one per 64 KiB stripe unit the item reaches: enough to tell stripes apart. */
static int csum_clues(struct rebuild *rb, const struct ub_key *k, const uint8_t *d, uint32_t size, uint64_t gen)
{
	const struct ub_volume *vol = rb->fs->vol;
	uint32_t cs = vol->csum_size, ss = vol->sectorsize;

	for (uint32_t i = 0; cs && i < size / cs; i++) {
		struct ub_clue cl = { .logical = k->offset + (uint64_t)i * ss, .generation = gen, .data = true };
		int ret;

		if (cl.logical < k->offset)
			break; /* wrapped: no such sector */
		if (i && cl.logical % UB_STRIPE_LEN)
			continue;
		memcpy(cl.csum, d + (size_t)i * cs, cs);
		ret = ub_clues_add(&rb->clues, &cl);
		if (ret)
			return ret;
	}
	return 0;
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

	struct ub_clue where = { .logical = HD(bytenr, h), .generation = gen, .devid = devid, .physical = physical };
	int ret = ub_clues_add(&rb->clues, &where);

	if (ret || !items_wanted(h))
		return ret;
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
		if (k.type == BTRFS_EXTENT_CSUM_KEY && k.objectid == BTRFS_EXTENT_CSUM_OBJECTID) {
			ret = csum_clues(rb, &k, d, (uint32_t)UB_GET(ub_disk_item, size, it), gen);
			if (ret)
				return ret;
		} else if (k.type == BTRFS_BLOCK_GROUP_ITEM_KEY) {
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

/* How many stripes a mirrored profile has (0: striped, its order to be found; -1: no profile). */
static int mirror_stripes(uint64_t flags)
{
	const struct ub_profile *p = ub_profile_of(flags);

	return !p ? -1 : p->striped ? 0 : p->ncopies;
}

/* One chunk item from block group `g` and its device extents dx[0..n). 0, or -errno and why not. */
static int add_chunk(struct rebuild *rb, const struct found_bg *g, const struct found_dx *dx, int n, char *why,
		     size_t whylen)
{
	struct ub_volume *vol = rb->fs->vol;
	const struct ub_profile *p = ub_profile_of(g->flags);
	struct ub_stripe_place st[UB_CHUNK_MAX_STRIPES];
	uint64_t devid[UB_CHUNK_MAX_STRIPES], phys[UB_CHUNK_MAX_STRIPES];
	int want = mirror_stripes(g->flags), ret;

	if (want < 0 || n < 1 || n > UB_CHUNK_MAX_STRIPES) {
		snprintf(why, whylen, "its profile bits 0x%llx name no profile, or %d device extents",
			 (unsigned long long)(g->flags & BTRFS_BLOCK_GROUP_PROFILE_MASK), n);
		return -EUCLEAN;
	}
	for (int i = 0; i < n; i++)
		st[i] = (struct ub_stripe_place){ dx[i].devid, dx[i].physical, dx[i].length };
	if (!want) {
		/* striped: the order, from where the chunk's tree blocks and data sectors are found */
		ret = ub_chunk_order(vol, &rb->clues, g->logical, g->length, g->flags, st, n, why, whylen);
		if (ret)
			return ret;
	} else if (n != want) {
		snprintf(why, whylen, "%d of its %d device extents are found", n, want);
		return -ENOENT;
	} else if (want == 2 && (p->dev_stripes == 2) != (dx[0].devid == dx[1].devid)) {
		/* DUP keeps both copies on one device, RAID1 on two */
		snprintf(why, whylen, "its device extents %s one device", dx[0].devid == dx[1].devid ? "share" : "are not on");
		return -EUCLEAN;
	}
	for (int i = 0; i < n; i++) {
		const struct ub_vdev *vd = ub_volume_vdev(vol, st[i].devid);

		if (!vd || (want && st[i].length != g->length)) {
			snprintf(why, whylen, "the device extent on devid %llu at physical %llu does not match it%s",
				 (unsigned long long)st[i].devid, (unsigned long long)st[i].physical,
				 vd ? "" : " (no such device)");
			return -EUCLEAN;
		}
		devid[i] = st[i].devid;
		phys[i] = st[i].physical;
	}
	ret = ub_volume_add_chunk_stripes(vol, g->logical, g->length, g->flags, n, devid, phys);
	if (ret)
		snprintf(why, whylen, "%s", strerror(-ret));
	return ret;
}

/*
 * Every block group of rb->bg (sorted) the volume does not map yet, from its
 * device extents rb->dx (sorted): *added mapped, *skipped not (each said, as
 * a warning when `say`), 0 or -ENOMEM.
 */
static int map_block_groups(struct rebuild *rb, bool say, int *added, int *skipped)
{
	struct ub_fs *fs = rb->fs;

	for (size_t i = 0, j = 0; i < rb->nbg; i++) {
		const struct found_bg *g = &rb->bg[i];
		struct found_dx mine[UB_CHUNK_MAX_STRIPES];
		char why[256] = "";
		int n = 0, err;

		if (i && rb->bg[i - 1].logical == g->logical)
			continue; /* an older copy */
		if (ub_volume_find_chunk(fs->vol, g->logical))
			continue; /* mapped already (the system chunks) */
		while (j < rb->ndx && rb->dx[j].chunk_offset < g->logical)
			j++;
		/* the stripes of this chunk: one per place, the newest copy of each */
		for (size_t k = j; k < rb->ndx && rb->dx[k].chunk_offset == g->logical; k++) {
			if (k > j && rb->dx[k - 1].devid == rb->dx[k].devid && rb->dx[k - 1].physical == rb->dx[k].physical)
				continue;
			if (n == UB_CHUNK_MAX_STRIPES) {
				n++;
				break;
			}
			mine[n++] = rb->dx[k];
		}
		if (n > UB_CHUNK_MAX_STRIPES) {
			err = -EUCLEAN;
			snprintf(why, sizeof(why), "more device extents than a chunk has stripes name it");
		} else {
			err = add_chunk(rb, g, mine, n, why, sizeof(why));
		}
		if (err == -ENOMEM)
			return err;
		if (err) {
			(*skipped)++;
			ub_logf(&fs->log, say ? UB_LOG_WARN : UB_LOG_INFO,
				"chunk rebuild: block group at logical %llu (%llu bytes, flags 0x%llx, generation %llu): "
				"not mapped: %s", (unsigned long long)g->logical, (unsigned long long)g->length,
				(unsigned long long)g->flags, (unsigned long long)g->generation, why);
		} else {
			(*added)++;
		}
	}
	return 0;
}

static void rebuild_init(struct rebuild *rb, struct ub_fs *fs)
{
	struct ub_volume *vol = fs->vol;

	*rb = (struct rebuild){ .fs = fs, .newest = UB_GET(ub_disk_super, generation, vol->super) };
	rb->cctx = (struct ub_check_ctx){ .nodesize = vol->nodesize, .sectorsize = vol->sectorsize,
					  .csum_size = vol->csum_size,
					  .incompat_flags = UB_GET(ub_disk_super, incompat_flags, vol->super) };
}

static void rebuild_free(struct rebuild *rb)
{
	free(rb->bg);
	free(rb->dx);
	ub_clues_free(&rb->clues);
}

/*
 * The device tree's extents of chunks the volume does not map, and the block
 * group item of each, read through the trees (the map the chunk rescue gave
 * reaches them): 0, 1 when a tree or an item cannot be read, -ENOMEM.
 */
static int from_trees(struct rebuild *rb)
{
	struct ub_fs *fs = rb->fs;
	const struct ub_key lo = { 0, 0, 0 }, hi = { UINT64_MAX, UINT8_MAX, UINT64_MAX };
	bool bgt = fs->compat_ro & BTRFS_FEATURE_COMPAT_RO_BLOCK_GROUP_TREE;
	struct ub_root dev, bgs;
	struct ub_tree_iter it;
	struct ub_key k;
	const uint8_t *d;
	uint32_t size;
	int ret;

	if (ub_fs_tree_root(fs, BTRFS_DEV_TREE_OBJECTID, &dev) ||
	    ub_fs_tree_root(fs, bgt ? BTRFS_BLOCK_GROUP_TREE_OBJECTID : BTRFS_EXTENT_TREE_OBJECTID, &bgs))
		return 1;
	ub_tree_iter_start(&it, &fs->tc, &dev, &lo, &hi);
	while ((ret = ub_tree_iter_next(&it, &k, &d, &size)) == 0) {
		struct found_dx *v;

		if (k.type != BTRFS_DEV_EXTENT_KEY || size < sizeof(struct btrfs_dev_extent) ||
		    ub_volume_find_chunk(fs->vol, UB_GET(btrfs_dev_extent, chunk_offset, d)))
			continue;
		v = grow(rb->dx, &rb->dx_cap, rb->ndx, sizeof(*v));
		if (!v) {
			ret = -ENOMEM;
			break;
		}
		rb->dx = v;
		v[rb->ndx++] = (struct found_dx){ k.objectid, k.offset, UB_GET(btrfs_dev_extent, chunk_offset, d),
						  UB_GET(btrfs_dev_extent, length, d), dev.generation };
	}
	ub_tree_iter_end(&it);
	if (ret < 0)
		return ret == -ENOMEM ? ret : 1;
	if (rb->ndx)
		qsort(rb->dx, rb->ndx, sizeof(*rb->dx), dx_cmp);
	for (size_t i = 0; i < rb->ndx; i++) {
		uint64_t at = rb->dx[i].chunk_offset;
		const struct ub_key blo = { at, BTRFS_BLOCK_GROUP_ITEM_KEY, 0 }, bhi = { at, BTRFS_BLOCK_GROUP_ITEM_KEY, UINT64_MAX };
		struct found_bg *v;

		if (i && rb->dx[i - 1].chunk_offset == at)
			continue;
		ub_tree_iter_start(&it, &fs->tc, &bgs, &blo, &bhi);
		ret = ub_tree_iter_next(&it, &k, &d, &size);
		ub_tree_iter_end(&it);
		if (ret || size < sizeof(struct btrfs_block_group_item))
			return ret == -ENOMEM ? ret : 1;
		v = grow(rb->bg, &rb->bg_cap, rb->nbg, sizeof(*v));
		if (!v)
			return -ENOMEM;
		rb->bg = v;
		v[rb->nbg++] = (struct found_bg){ k.objectid, k.offset, UB_GET(btrfs_block_group_item, flags, d),
						  bgs.generation };
	}
	return 0;
}

int ub_fs_complete_chunks(struct ub_fs *fs)
{
	struct rebuild rb;
	int added = 0, skipped = 0, ret;

	rebuild_init(&rb, fs);
	/* probes of blocks that may lie in chunks not mapped yet: neither said nor remembered as bad */
	ub_tree_quiet(true);
	ret = from_trees(&rb);
	ub_tree_quiet(false);
	if (ret == 0 && !rb.nbg)
		goto out; /* the device tree names no chunk the rescue left out */
	if (ret == 0)
		ret = map_block_groups(&rb, false, &added, &skipped);
	if (ret < 0)
		goto out;
	if (added)
		ub_warn(&fs->log, "chunk rebuild: the device tree and the block group items gave %d chunks the chunk "
			"tree leaves found lacked", added);
	/* a striped chunk needs its stripe order, a tree that could not be read its items: the scan gives them */
	if (ret || skipped)
		ret = ub_fs_rebuild_chunks(fs, true);
	/* whatever the scan could not add, the rescue's chunks stand: what they do not map is reported by its readers */
	if (ret && ret != -ENOMEM) {
		if (ret != -ENOENT)
			ub_warn(&fs->log, "chunk rebuild: the scan of the devices failed: %s", strerror(-ret));
		ret = 0;
	}
out:
	rebuild_free(&rb);
	return ret;
}

int ub_fs_rebuild_chunks(struct ub_fs *fs, bool after_rescue)
{
	struct ub_volume *vol = fs->vol;
	struct rebuild rb;
	struct ub_raw_scan_ops ops = { .want = want_leaf, .found = found_leaf, .arg = &rb,
				       .progress = fs->opts.rescue_progress, .progress_arg = fs->opts.rescue_arg };
	int added = 0, skipped = 0, ret;

	rebuild_init(&rb, fs);
	ub_warn(&fs->log, "chunk rebuild: %s; scanning every device for block group items and device extents",
		after_rescue ? "the chunk tree leaves found lack some chunks" : "no chunk tree leaf survives");
	ret = ub_volume_scan_raw(vol, &ops);
	if (ret)
		goto out;
	if (rb.nbg)
		qsort(rb.bg, rb.nbg, sizeof(*rb.bg), bg_cmp);
	if (rb.ndx)
		qsort(rb.dx, rb.ndx, sizeof(*rb.dx), dx_cmp);
	ret = map_block_groups(&rb, true, &added, &skipped);
	if (ret)
		goto out;
	ub_warn(&fs->log, "chunk rebuild: %zu leaves gave %d chunks (%d block groups left unmapped); what they map "
		"is the newest the disk holds, not a committed state", rb.leaves, added, skipped);
	if (!added)
		ret = -ENOENT;
out:
	rebuild_free(&rb);
	return ret;
}
