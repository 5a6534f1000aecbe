/* SPDX-License-Identifier: MIT */
/*
 * rescue chunk-recover: a chunk tree that cannot be read is written again
 * from the chunk map the files layer rebuilds for reading (older copies of
 * its leaves, then the block group items and device extents a scan finds:
 * lib/fs/chunk_rescue.c, chunk_rebuild.c). The new tree is one leaf, written
 * in place of the old root (whose extent item, level 0, then stays right), to
 * every copy of the system chunk that holds it. A chunk tree of more levels,
 * or one that does not fit a leaf, is refused: its other blocks' extent
 * items would have to change too.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "ubtrfs/devinfo.h"
#include "ubtrfs/fsinfo.h"
#include "ubtrfs/rescue.h"
#include "ubtrfs/tree.h"
#include "fs/fs_priv.h"
#include "tree/tree_write.h"
#include "volume/volume_priv.h"

#define SB(f, p) UB_GET(ub_disk_super, f, p)

/* One leaf's items, packed as btrfs packs them: headers after the block header, data from the end. */
struct leaf {
	uint8_t *b;
	uint32_t size, nritems, data_end;
};

static int leaf_add(struct leaf *l, const struct ub_key *k, const void *data, uint32_t len)
{
	uint32_t hdr = (uint32_t)sizeof(struct ub_disk_header);
	uint8_t *it = l->b + hdr + l->nritems * sizeof(struct ub_disk_item);

	if (hdr + (l->nritems + 1) * sizeof(struct ub_disk_item) + (l->size - l->data_end) + len > l->size)
		return -EFBIG;
	l->data_end -= len;
	memcpy(l->b + l->data_end, data, len);
	UB_SET(btrfs_disk_key, objectid, it, k->objectid);
	UB_SET(btrfs_disk_key, type, it, k->type);
	UB_SET(btrfs_disk_key, offset, it, k->offset);
	UB_SET(ub_disk_item, offset, it, l->data_end - hdr);
	UB_SET(ub_disk_item, size, it, len);
	l->nritems++;
	return 0;
}

/* The chunk tree uuid every tree block carries, from the root tree's root block (checksum verified). */
static int chunk_tree_uuid(struct ub_fs *fs, uint8_t *uuid)
{
	struct ub_volume *vol = fs->vol;
	uint8_t *b = malloc(vol->nodesize), csum[UB_CSUM_SIZE_MAX];
	int ret;

	if (!b)
		return -ENOMEM;
	ret = ub_volume_read(vol, SB(root, vol->super), vol->nodesize, 0, b);
	if (!ret && (ub_csum(vol->csum_type, b + UB_CSUM_SIZE_MAX, vol->nodesize - UB_CSUM_SIZE_MAX, csum) ||
		     memcmp(csum, b, vol->csum_size)))
		ret = -EUCLEAN;
	if (!ret)
		memcpy(uuid, UB_PTR(ub_disk_header, chunk_tree_uuid, b), UB_UUID_SIZE);
	free(b);
	return ret;
}

/* Is there an item with exactly `key` in tree `tree` (whose root is `root`)? 1, 0, or <0 when it cannot be read. */
static int has_item(struct ub_fs *fs, const struct ub_root *root, const struct ub_key *key, uint64_t dx_chunk)
{
	struct ub_path *p = NULL;
	const uint8_t *d;
	uint32_t size;
	int ret = ub_path_new(&p);

	if (ret)
		return ret;
	ret = ub_tree_lookup(ub_fs_trees(fs), root, key, p, &d, &size);
	if (ret == 0)
		/* a device extent must name this chunk */
		ret = !dx_chunk || (size >= sizeof(struct btrfs_dev_extent) &&
				    UB_GET(btrfs_dev_extent, chunk_offset, d) == dx_chunk);
	else if (ret == -ENOENT)
		ret = 0;
	ub_path_free(p);
	return ret;
}

/*
 * A rebuilt map may hold chunks an older chunk tree leaf still names that are
 * gone (mkfs's first chunks, a removed block group): only chunks the block
 * group items or the device extents still describe go into the new tree.
 */
static bool confirmed(struct ub_fs *fs, const struct ub_chunk *c)
{
	struct ub_root bgr, devr;
	bool bg_tree = UB_GET(ub_disk_super, compat_ro_flags, fs->vol->super) & BTRFS_FEATURE_COMPAT_RO_BLOCK_GROUP_TREE;
	struct ub_key k = { c->logical, BTRFS_BLOCK_GROUP_ITEM_KEY, c->length };
	int have = 0, dx = 0;

	if (ub_fs_tree_root(fs, bg_tree ? BTRFS_BLOCK_GROUP_TREE_OBJECTID : BTRFS_EXTENT_TREE_OBJECTID, &bgr) == 0)
		have = has_item(fs, &bgr, &k, 0);
	if (have == 1)
		return true;
	if (ub_fs_tree_root(fs, BTRFS_DEV_TREE_OBJECTID, &devr) != 0)
		return have < 0; /* neither tree reads: nothing to judge by, keep it */
	for (int s = 0; s < c->num_stripes; s++) {
		struct ub_key dk = { c->stripes[s].devid, BTRFS_DEV_EXTENT_KEY, c->stripes[s].physical };
		int r = has_item(fs, &devr, &dk, c->logical);

		if (r < 0)
			return have < 0;
		dx += r;
	}
	return dx == c->num_stripes;
}

/* The new chunk tree leaf from the rebuilt map and the devices' own items. */
static int build_leaf(struct ub_fs *fs, uint8_t *block, int *nchunks)
{
	struct ub_volume *vol = fs->vol;
	const uint8_t *sb = vol->super;
	struct leaf l = { block, vol->nodesize, 0, vol->nodesize };
	uint8_t uuid[UB_UUID_SIZE], csum[UB_CSUM_SIZE_MAX];
	uint8_t *item = malloc(ub_chunk_item_bytes(UB_CHUNK_MAX_STRIPES));
	bool *keep = NULL;
	int ret = chunk_tree_uuid(fs, uuid);

	if (!item)
		return -ENOMEM;
	if (ret) {
		ub_err(&fs->log, "the root tree's root block at logical %" PRIu64 " does not read: its chunk tree uuid is "
		       "unknown", SB(root, sb));
		goto out;
	}
	keep = calloc((size_t)vol->nchunks + 1, sizeof(*keep));
	if (!keep) {
		ret = -ENOMEM;
		goto out;
	}
	for (int c = 0; c < vol->nchunks; c++) {
		keep[c] = confirmed(fs, vol->chunks[c]);
		if (keep[c])
			(*nchunks)++;
		else
			ub_warn(&fs->log, "chunk at logical %" PRIu64 " (%" PRIu64 " bytes) has neither a block group item "
				"nor device extents: left out (an older chunk tree leaf named it)", vol->chunks[c]->logical,
				vol->chunks[c]->length);
	}
	memset(block, 0, vol->nodesize);
	for (int i = 0; !ret && i < vol->nvdevs; i++) {
		const struct ub_vdev *v = &vol->vdevs[i];
		struct ub_key k = { BTRFS_DEV_ITEMS_OBJECTID, BTRFS_DEV_ITEM_KEY, v->devid };
		uint8_t di[sizeof(struct btrfs_dev_item)];
		uint64_t used = 0;

		if (!UB_GET(btrfs_dev_item, devid, v->item)) {
			ub_err(&fs->log, "devid %" PRIu64 " is missing: its device item is unknown", v->devid);
			ret = -ENODEV;
			break;
		}
		for (int c = 0; c < vol->nchunks; c++)
			for (int s = 0; keep[c] && s < vol->chunks[c]->num_stripes; s++)
				if (vol->chunks[c]->stripes[s].devid == v->devid)
					used += ub_chunk_stripe_size(vol->chunks[c]);
		memcpy(di, v->item, sizeof(di));
		UB_SET(btrfs_dev_item, bytes_used, di, used);
		UB_SET(btrfs_dev_item, generation, di, 0);
		ret = leaf_add(&l, &k, di, sizeof(di));
	}
	for (int c = 0; !ret && c < vol->nchunks; c++) {
		const struct ub_chunk *ch = vol->chunks[c];
		struct ub_key k = { BTRFS_FIRST_CHUNK_TREE_OBJECTID, BTRFS_CHUNK_ITEM_KEY, ch->logical };
		uint64_t devid[UB_CHUNK_MAX_STRIPES], phys[UB_CHUNK_MAX_STRIPES];
		uint8_t uuids[UB_CHUNK_MAX_STRIPES * UB_UUID_SIZE];

		if (!keep[c])
			continue;

		if (ch->num_stripes > UB_CHUNK_MAX_STRIPES) {
			ret = -EFBIG;
			break;
		}
		for (int s = 0; s < ch->num_stripes; s++) {
			devid[s] = ch->stripes[s].devid;
			phys[s] = ch->stripes[s].physical;
			memcpy(uuids + s * UB_UUID_SIZE, ch->stripes[s].dev_uuid, UB_UUID_SIZE);
		}
		ub_chunk_item_encode(ch->length, ch->type, vol->sectorsize, ch->num_stripes, ch->sub_stripes, devid, phys,
				     uuids, item);
		ret = leaf_add(&l, &k, item, ub_chunk_item_bytes(ch->num_stripes));
	}
	if (!ret && !*nchunks) {
		ub_err(&fs->log, "no chunk of the rebuilt map is described by a block group item or device extents");
		ret = -ENOENT;
	}
	if (ret == -EFBIG)
		ub_err(&fs->log, "%d chunks and %d devices do not fit one chunk tree leaf: not rebuilt", vol->nchunks,
		       vol->nvdevs);
	if (ret)
		goto out;
	memcpy(block + offsetof(struct ub_disk_header, fsid), vol->metadata_uuid, UB_FSID_SIZE);
	UB_SET(ub_disk_header, bytenr, block, SB(chunk_root, sb));
	UB_SET(ub_disk_header, flags, block,
	       BTRFS_HEADER_FLAG_WRITTEN | ((uint64_t)UB_MIXED_BACKREF_REV << UB_BACKREF_REV_SHIFT));
	memcpy(block + offsetof(struct ub_disk_header, chunk_tree_uuid), uuid, UB_UUID_SIZE);
	UB_SET(ub_disk_header, generation, block, SB(chunk_root_generation, sb));
	UB_SET(ub_disk_header, owner, block, BTRFS_CHUNK_TREE_OBJECTID);
	UB_SET(ub_disk_header, nritems, block, l.nritems);
	UB_SET(ub_disk_header, level, block, 0);
	ret = ub_csum(vol->csum_type, block + UB_CSUM_SIZE_MAX, vol->nodesize - UB_CSUM_SIZE_MAX, csum);
	if (!ret)
		memcpy(block, csum, UB_CSUM_SIZE_MAX);
out:
	free(keep);
	free(item);
	return ret;
}

int ub_rescue_chunk_recover(const char *const *paths, int npaths, struct ub_dev *const *devs, int ndevs,
			    const struct ub_log *log, int *nchunks)
{
	struct ub_fs_opts plain = { .super_mirror = -1, .no_log = true };
	struct ub_fs_opts rescue = { .super_mirror = -1, .no_log = true, .rescue_chunks = true };
	struct ub_volume_opts vo = { .writable = true, .super_mirror = -1 };
	struct ub_log silent = { .verbosity = -1 }, shown;
	struct ub_volume *vol = NULL;
	struct ub_fs *fs = NULL;
	uint8_t *block = NULL;
	uint64_t chunk_root;
	int ret;

	*nchunks = 0;
	/* a chunk tree that reads whole needs nothing: the first open says so */
	ret = ub_fs_open(paths, npaths, &plain, &silent, &fs);
	if (!ret) {
		ub_fs_close(fs);
		for (int i = 0; i < ndevs; i++)
			ub_dev_close(devs[i]);
		return 0;
	}
	/* the chunk tree's own read errors are what is being repaired: said, not counted as the run's */
	shown = log ? *log : (struct ub_log){ .verbosity = UB_LOG_WARN };
	shown.errors = NULL;
	ret = ub_fs_open(paths, npaths, &rescue, &shown, &fs);
	if (ret) {
		ub_err(log, "the chunk map cannot be rebuilt from what the devices hold: %s", strerror(-ret));
		goto close_devs;
	}
	if (SB(chunk_root_level, fs->vol->super) != 0) {
		ub_err(log, "the chunk tree has %" PRIu64 " levels: only a one-leaf chunk tree is rebuilt",
		       SB(chunk_root_level, fs->vol->super) + 1);
		ret = -EOPNOTSUPP;
		goto close_devs;
	}
	block = malloc(fs->vol->nodesize);
	ret = block ? build_leaf(fs, block, nchunks) : -ENOMEM;
	if (ret)
		*nchunks = 0;
	chunk_root = SB(chunk_root, fs->vol->super);
	ub_fs_close(fs);
	fs = NULL;
	if (ret)
		goto close_devs;
	/* the writing volume maps the system chunks from the superblock's array, all it needs here */
	ret = ub_volume_open_devs(devs, ndevs, &vo, log, &vol);
	if (!ret)
		ret = ub_volume_write(vol, chunk_root, vol->nodesize, block);
	if (!ret)
		ret = ub_volume_flush(vol);
	if (ret)
		ub_err(log, "the new chunk tree leaf at logical %" PRIu64 " could not be written: %s", chunk_root,
		       strerror(-ret));
	ub_volume_close(vol);
	free(block);
	if (ret)
		*nchunks = 0;
	return ret;
close_devs:
	ub_fs_close(fs);
	free(block);
	for (int i = 0; i < ndevs; i++)
		ub_dev_close(devs[i]);
	return ret;
}
