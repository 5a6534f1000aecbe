/* SPDX-License-Identifier: MIT */
/* Adding chunks in a transaction when space runs out: the rules are in chunk_alloc.h. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include "alloc/alloc_internal.h"
#include "alloc/chunk_alloc.h"
#include "tree/roots.h"

#define KIND_BITS (BTRFS_BLOCK_GROUP_DATA | BTRFS_BLOCK_GROUP_METADATA | BTRFS_BLOCK_GROUP_SYSTEM)
#define MiB (1024ULL * 1024)
#define SYS_ARRAY_OFF offsetof(struct ub_disk_super, sys_chunk_array)

/*
 * What the running transaction's chunks changed outside the trees (the trees'
 * changes go with its dirty blocks on abort): the superblock's sys chunk
 * array, the volume's dev items, the allocator's new groups.
 */
struct ub_chunk_undo {
	uint8_t sys_array[UB_SYSTEM_CHUNK_ARRAY_SIZE];
	uint64_t sys_size;
	int nitems;
	uint8_t (*items)[sizeof(struct btrfs_dev_item)];
	uint64_t *bgs;
	int nbgs;
};

static int kind_index(uint64_t kind)
{
	return kind & BTRFS_BLOCK_GROUP_DATA ? 0 : kind & BTRFS_BLOCK_GROUP_SYSTEM ? 2 : 1;
}

void ub_chunk_undo_forget(struct ub_alloc *a)
{
	if (!a->undo)
		return;
	free(a->undo->items);
	free(a->undo->bgs);
	free(a->undo);
	a->undo = NULL;
}

void ub_chunk_undo_abort(struct ub_alloc *a)
{
	struct ub_chunk_undo *u = a->undo;

	if (!u)
		return;
	for (int i = 0; i < u->nbgs; i++)
		ub_alloc_remove_bg(a, u->bgs[i]);
	if (a->vol) {
		memcpy(a->vol->super + SYS_ARRAY_OFF, u->sys_array, sizeof(u->sys_array));
		UB_SET(ub_disk_super, sys_chunk_array_size, a->vol->super, u->sys_size);
		for (int i = 0; i < u->nitems; i++)
			ub_volume_add_dev_item(a->vol, u->items[i], sizeof(u->items[i]));
	}
	ub_chunk_undo_forget(a);
}

/* The state to go back to, saved before the transaction's first chunk changes anything. */
static int undo_begin(struct ub_alloc *a)
{
	struct ub_chunk_undo *u;
	struct ub_volume *vol = a->vol;

	if (a->undo)
		return 0;
	u = calloc(1, sizeof(*u));
	if (!u)
		return -ENOMEM;
	u->items = calloc((size_t)vol->nvdevs + 1, sizeof(*u->items));
	u->bgs = calloc(1, sizeof(*u->bgs));
	if (!u->items || !u->bgs) {
		free(u->items);
		free(u->bgs);
		free(u);
		return -ENOMEM;
	}
	memcpy(u->sys_array, vol->super + SYS_ARRAY_OFF, sizeof(u->sys_array));
	u->sys_size = UB_GET(ub_disk_super, sys_chunk_array_size, vol->super);
	for (int i = 0; i < vol->nvdevs; i++) {
		memcpy(u->items[i], vol->vdevs[i].item, sizeof(u->items[i]));
		/* the item may never have been loaded (a device known from its superblock only) */
		UB_SET(btrfs_dev_item, devid, u->items[i], vol->vdevs[i].devid);
	}
	u->nitems = vol->nvdevs;
	a->undo = u;
	return 0;
}

static int undo_add_bg(struct ub_alloc *a, uint64_t start)
{
	struct ub_chunk_undo *u = a->undo;
	uint64_t *n = realloc(u->bgs, (size_t)(u->nbgs + 1) * sizeof(*n));

	if (!n)
		return -ENOMEM;
	u->bgs = n;
	u->bgs[u->nbgs++] = start;
	return 0;
}

/* ---- profile ---- */

uint64_t ub_chunk_profile_for(const struct ub_alloc *a, const struct ub_volume *vol, uint64_t kind)
{
	/* the kernel's btrfs_reduce_alloc_profile order: the most redundant profile present wins */
	static const uint64_t order[] = {
		BTRFS_BLOCK_GROUP_RAID1C4, BTRFS_BLOCK_GROUP_RAID6, BTRFS_BLOCK_GROUP_RAID1C3,
		BTRFS_BLOCK_GROUP_RAID5,   BTRFS_BLOCK_GROUP_RAID10, BTRFS_BLOCK_GROUP_RAID1,
		BTRFS_BLOCK_GROUP_DUP,     BTRFS_BLOCK_GROUP_RAID0,
	};
	struct ub_bg_info bi;
	uint64_t seen = 0, pos = 0;
	bool any = false;

	kind &= KIND_BITS;
	if (ub_alloc_target(a, kind))
		return ub_alloc_target(a, kind) == BTRFS_AVAIL_ALLOC_BIT_SINGLE ? 0 : ub_alloc_target(a, kind);
	while (ub_alloc_next_bg(a, pos, &bi) == 0) {
		pos = bi.start + bi.length;
		if ((bi.flags & KIND_BITS) == kind) {
			seen |= bi.flags & BTRFS_BLOCK_GROUP_PROFILE_MASK;
			any = true;
		}
	}
	if (!any) {
		int present = 0;
		for (int i = 0; vol && i < vol->nvdevs; i++)
			present += vol->vdevs[i].dev != NULL;
		return kind != BTRFS_BLOCK_GROUP_DATA && present == 1 ? BTRFS_BLOCK_GROUP_DUP : 0;
	}
	for (size_t i = 0; i < sizeof(order) / sizeof(order[0]); i++)
		if (seen & order[i])
			return order[i];
	return 0;
}

/* ---- device holes ---- */

void ub_chunk_free_space(struct ub_dev_space *devs, int ndevs)
{
	if (!devs)
		return;
	for (int i = 0; i < ndevs; i++) {
		free(devs[i].hole_start);
		free(devs[i].hole_len);
	}
	free(devs);
}

static int add_hole(struct ub_dev_space *d, int *cap, uint64_t s, uint64_t e)
{
	if (e <= s)
		return 0;
	if (d->nholes == *cap) {
		int ncap = *cap ? *cap * 2 : 8;
		uint64_t *ns = realloc(d->hole_start, (size_t)ncap * sizeof(*ns));
		if (!ns)
			return -ENOMEM;
		d->hole_start = ns;
		uint64_t *nl = realloc(d->hole_len, (size_t)ncap * sizeof(*nl));
		if (!nl)
			return -ENOMEM;
		d->hole_len = nl;
		*cap = ncap;
	}
	d->hole_start[d->nholes] = s;
	d->hole_len[d->nholes] = e - s;
	d->nholes++;
	return 0;
}

static int one_dev_space(struct ub_chunk_ctx *cc, const struct ub_vdev *v, struct ub_dev_space *d)
{
	struct ub_key min = { v->devid, BTRFS_DEV_EXTENT_KEY, 0 }, max = { v->devid, BTRFS_DEV_EXTENT_KEY, UINT64_MAX };
	struct ub_tree_iter it;
	struct ub_key k;
	const uint8_t *data;
	uint32_t size;
	uint64_t pos = UB_DEV_RESERVED, total = v->total_bytes;
	int cap = 0, ret;

	uint64_t item_total = UB_GET(btrfs_dev_item, total_bytes, v->item);

	if (item_total < v->total_bytes)
		item_total = v->total_bytes;
	/* a device is never used beyond its dev item's size nor beyond what it really holds */
	if (v->dev && v->dev->size < total)
		total = v->dev->size;
	d->devid = v->devid;
	d->total_bytes = v->total_bytes;
	ret = ub_tree_iter_start(&it, cc->tc, cc->dev_root, &min, &max);
	if (ret)
		return ret;
	while ((ret = ub_tree_iter_next(&it, &k, &data, &size)) == 0) {
		uint64_t len;

		if (size < sizeof(struct btrfs_dev_extent)) {
			ub_err(&cc->vol->log, "dev tree: DEV_EXTENT (%" PRIu64 ", %" PRIu64 ") is %u bytes, too short",
			       k.objectid, k.offset, size);
			ret = -EUCLEAN;
			break;
		}
		len = UB_GET(btrfs_dev_extent, length, data);
		/* against the dev item's size: a shrink lowers total_bytes first, its extents past the end are moving */
		if (k.offset < pos || len == 0 || k.offset + len < k.offset || k.offset + len > item_total) {
			ub_err(&cc->vol->log,
			       "dev tree: device %" PRIu64 ": DEV_EXTENT at physical %" PRIu64 " length %" PRIu64
			       " %s",
			       v->devid, k.offset, len,
			       k.offset < UB_DEV_RESERVED ? "lies in the reserved first MiB"
			       : k.offset < pos	  ? "overlaps the previous extent"
			       : len == 0	  ? "is empty"
						  : "ends beyond the device's total_bytes");
			ret = -EUCLEAN;
			break;
		}
		if (pos < total)
			ret = add_hole(d, &cap, pos, k.offset < total ? k.offset : total);
		if (ret)
			break;
		pos = k.offset + len;
	}
	ub_tree_iter_end(&it);
	if (ret < 0)
		return ret;
	return pos < total ? add_hole(d, &cap, pos, total) : 0;
}

int ub_chunk_dev_space(struct ub_chunk_ctx *cc, struct ub_dev_space **out, int *ndevs)
{
	struct ub_volume *vol = cc->vol;
	struct ub_dev_space *devs = calloc((size_t)vol->nvdevs + 1, sizeof(*devs));
	int n = 0, ret = 0;

	if (!devs)
		return -ENOMEM;
	for (int i = 0; i < vol->nvdevs && !ret; i++) {
		/* only devices we can write take new stripes (the kernel's rw device list) */
		if (!vol->vdevs[i].dev || vol->vdevs[i].missing || vol->vdevs[i].no_alloc)
			continue;
		ret = one_dev_space(cc, &vol->vdevs[i], &devs[n]);
		n++;
	}
	if (ret) {
		ub_chunk_free_space(devs, n);
		return ret;
	}
	*out = devs;
	*ndevs = n;
	return 0;
}

/* ---- items ---- */

uint32_t ub_chunk_item_size(int num_stripes)
{
	return ub_chunk_item_bytes(num_stripes);
}

void ub_chunk_encode(const struct ub_chunk_plan *plan, uint32_t sectorsize, const uint8_t *uuids, uint8_t *item)
{
	uint64_t devid[UB_MAX_STRIPES], phys[UB_MAX_STRIPES];

	for (int i = 0; i < plan->num_stripes; i++) {
		devid[i] = plan->stripes[i].devid;
		phys[i] = plan->stripes[i].physical;
	}
	ub_chunk_item_encode(plan->length, plan->type, sectorsize, plan->num_stripes, plan->sub_stripes, devid, phys,
			     uuids, item);
}

void ub_dev_extent_encode(uint64_t chunk_offset, uint64_t length, const uint8_t *chunk_tree_uuid, uint8_t *item)
{
	memset(item, 0, sizeof(struct btrfs_dev_extent));
	UB_SET(btrfs_dev_extent, chunk_tree, item, BTRFS_CHUNK_TREE_OBJECTID);
	UB_SET(btrfs_dev_extent, chunk_objectid, item, BTRFS_FIRST_CHUNK_TREE_OBJECTID);
	UB_SET(btrfs_dev_extent, chunk_offset, item, chunk_offset);
	UB_SET(btrfs_dev_extent, length, item, length);
	memcpy(item + offsetof(struct btrfs_dev_extent, chunk_tree_uuid), chunk_tree_uuid, UB_UUID_SIZE);
}

static const struct ub_vdev *vdev_of(const struct ub_volume *vol, uint64_t devid)
{
	for (int i = 0; i < vol->nvdevs; i++)
		if (vol->vdevs[i].devid == devid)
			return &vol->vdevs[i];
	return NULL;
}

/* After every chunk the volume maps or the chunk tree holds (the kernel's find_next_chunk). */
static int next_logical(struct ub_chunk_ctx *cc, uint64_t *out)
{
	struct ub_key key = { BTRFS_FIRST_CHUNK_TREE_OBJECTID, BTRFS_CHUNK_ITEM_KEY, UINT64_MAX }, k;
	uint64_t end = 0;
	struct ub_path p;
	int ret;

	for (int i = 0; i < cc->vol->nchunks; i++) {
		const struct ub_chunk *c = cc->vol->chunks[i];
		if (c->logical + c->length > end)
			end = c->logical + c->length;
	}
	ub_path_init(&p);
	ret = ub_tree_search_le(cc->tc, cc->chunk_root, &key, &p);
	if (ret == 0) {
		const uint8_t *d;
		uint32_t size;
		ub_path_key(&p, &k);
		d = ub_path_data(&p, &size);
		if (k.objectid == BTRFS_FIRST_CHUNK_TREE_OBJECTID && k.type == BTRFS_CHUNK_ITEM_KEY &&
		    size >= offsetof(struct btrfs_chunk, stripe) && k.offset + UB_GET(btrfs_chunk, length, d) > end)
			end = k.offset + UB_GET(btrfs_chunk, length, d);
		ret = 0;
	} else if (ret > 0) {
		ret = 0;
	}
	ub_path_release(&p);
	*out = end;
	return ret;
}

/* bytes_used of each device of the plan grows (shrinks) by its stripes: chunk tree DEV_ITEM and the volume's copy. */
static int dev_items_grow(struct ub_chunk_ctx *cc, const struct ub_chunk_plan *plan, bool shrink)
{
	for (int i = 0; i < plan->num_stripes; i++) {
		uint64_t devid = plan->stripes[i].devid, add = 0;
		struct ub_key key = { BTRFS_DEV_ITEMS_OBJECTID, BTRFS_DEV_ITEM_KEY, devid };
		struct ub_path p;
		uint8_t *d;
		uint32_t size;
		int ret, j;

		for (j = 0; j < i; j++)
			if (plan->stripes[j].devid == devid)
				break;
		if (j < i)
			continue; /* done with its first stripe */
		for (j = i; j < plan->num_stripes; j++)
			if (plan->stripes[j].devid == devid)
				add += plan->stripe_size;
		ub_path_init(&p);
		ret = ub_tree_search_slot(cc->tc, cc->ta, cc->chunk_root, &key, &p, 0, true);
		if (ret > 0) {
			ub_err(&cc->vol->log, "chunk tree: no DEV_ITEM for device %" PRIu64, devid);
			ret = -EUCLEAN;
		}
		if (ret == 0) {
			d = ub_path_data_mut(&p, &size);
			if (size < sizeof(struct btrfs_dev_item)) {
				ub_err(&cc->vol->log, "chunk tree: DEV_ITEM of device %" PRIu64 " is %u bytes, too short",
				       devid, size);
				ret = -EUCLEAN;
			} else {
				UB_SET(btrfs_dev_item, bytes_used, d,
				       shrink ? UB_GET(btrfs_dev_item, bytes_used, d) - add : UB_GET(btrfs_dev_item, bytes_used, d) + add);
				ub_path_mark_dirty(&p);
				ret = ub_volume_add_dev_item(cc->vol, d, size);
			}
		}
		ub_path_release(&p);
		if (ret)
			return ret;
	}
	return 0;
}

static int sys_array_append(struct ub_chunk_ctx *cc, uint64_t logical, const uint8_t *item, uint32_t isz)
{
	uint8_t *sb = cc->vol->super;
	uint64_t size = UB_GET(ub_disk_super, sys_chunk_array_size, sb);
	struct ub_key k = { BTRFS_FIRST_CHUNK_TREE_OBJECTID, BTRFS_CHUNK_ITEM_KEY, logical };

	if (size > UB_SYSTEM_CHUNK_ARRAY_SIZE || size + UB_DISK_KEY_SIZE + isz > UB_SYSTEM_CHUNK_ARRAY_SIZE) {
		ub_err(&cc->vol->log, "superblock: no room in the sys_chunk_array (%" PRIu64 " of %u bytes used) "
		       "for a system chunk of %u bytes", size, UB_SYSTEM_CHUNK_ARRAY_SIZE, UB_DISK_KEY_SIZE + isz);
		return -ENOSPC;
	}
	ub_key_write(sb + SYS_ARRAY_OFF + size, &k);
	memcpy(sb + SYS_ARRAY_OFF + size + UB_DISK_KEY_SIZE, item, isz);
	UB_SET(ub_disk_super, sys_chunk_array_size, sb, size + UB_DISK_KEY_SIZE + isz);
	return 0;
}

static int new_group_items(struct ub_chunk_ctx *cc, uint64_t type, uint64_t logical, uint64_t length)
{
	uint8_t bgi[sizeof(struct btrfs_block_group_item)] = { 0 };
	struct ub_key k = { logical, BTRFS_BLOCK_GROUP_ITEM_KEY, length };
	struct ub_bg *bg;
	int ret;

	UB_SET(btrfs_block_group_item, used, bgi, 0);
	UB_SET(btrfs_block_group_item, chunk_objectid, bgi, BTRFS_FIRST_CHUNK_TREE_OBJECTID);
	UB_SET(btrfs_block_group_item, flags, bgi, type);
	ret = ub_tree_insert_item(cc->tc, cc->ta, cc->extent_root, &k, bgi, sizeof(bgi));
	if (ret)
		return ret;
	if (cc->fst_root) {
		uint8_t info[sizeof(struct btrfs_free_space_info)] = { 0 };
		struct ub_key ik = { logical, BTRFS_FREE_SPACE_INFO_KEY, length };
		struct ub_key ek = { logical, BTRFS_FREE_SPACE_EXTENT_KEY, length };

		UB_SET(btrfs_free_space_info, extent_count, info, 1);
		UB_SET(btrfs_free_space_info, flags, info, 0);
		ret = ub_tree_insert_item(cc->tc, cc->ta, cc->fst_root, &ik, info, sizeof(info));
		if (!ret)
			ret = ub_tree_insert_item(cc->tc, cc->ta, cc->fst_root, &ek, NULL, 0);
		if (ret)
			return ret;
	}
	/*
	 * The items exist now: the commit treats the group like any other
	 * (used bytes and free space deltas from the whole-free state).
	 */
	bg = ub_alloc_find_bg(cc->alloc, logical);
	if (bg)
		bg->is_new = false;
	return 0;
}

static int chunk_alloc(struct ub_chunk_ctx *cc, uint64_t type, uint64_t *logical_out, bool *changed)
{
	struct ub_volume *vol = cc->vol;
	struct ub_dev_space *devs = NULL;
	struct ub_chunk_plan plan;
	uint8_t *item = NULL, *uuids = NULL;
	uint64_t logical;
	uint32_t isz;
	int ndevs = 0, ret;

	if (!(type & KIND_BITS) || !cc->ta || !cc->dev_root || !cc->chunk_root || !cc->extent_root)
		return -EINVAL;
	ret = ub_chunk_dev_space(cc, &devs, &ndevs);
	if (ret)
		return ret;
	ret = ub_chunk_layout(devs, ndevs, type, 0, &plan);
	ub_chunk_free_space(devs, ndevs);
	if (ret)
		return ret;
	if (!cc->tc->have_chunk_tree_uuid) {
		ub_err(&vol->log, "adding a chunk: the chunk tree's uuid is not known yet");
		return -EINVAL;
	}
	ret = next_logical(cc, &logical);
	if (ret)
		return ret;
	isz = ub_chunk_item_size(plan.num_stripes);
	item = calloc(1, isz);
	uuids = calloc((size_t)plan.num_stripes, UB_UUID_SIZE);
	if (!item || !uuids) {
		ret = -ENOMEM;
		goto out;
	}
	for (int i = 0; i < plan.num_stripes; i++) {
		const struct ub_vdev *v = vdev_of(vol, plan.stripes[i].devid);
		if (!v) {
			ret = -EINVAL;
			goto out;
		}
		memcpy(uuids + (size_t)i * UB_UUID_SIZE, v->uuid, UB_UUID_SIZE);
	}
	ub_chunk_encode(&plan, vol->sectorsize, uuids, item);
	ret = undo_begin(cc->alloc);
	if (ret)
		goto out;
	*changed = true;
	if (type & BTRFS_BLOCK_GROUP_SYSTEM) {
		/* first, since it is the one step that can refuse for lack of room */
		ret = sys_array_append(cc, logical, item, isz);
		if (ret)
			goto out;
	}
	ret = ub_volume_add_chunk(vol, logical, item, isz);
	if (ret)
		goto out;
	ret = ub_alloc_add_block_group(cc->alloc, type, logical, plan.length);
	if (ret)
		goto out;
	ret = undo_add_bg(cc->alloc, logical);
	if (ret) {
		ub_alloc_remove_bg(cc->alloc, logical);
		goto out;
	}
	/*
	 * From here a failure leaves the transaction half changed: the error
	 * goes back to the caller, who must abort (which undoes the rest).
	 */
	{
		struct ub_key ck = { BTRFS_FIRST_CHUNK_TREE_OBJECTID, BTRFS_CHUNK_ITEM_KEY, logical };
		ret = ub_tree_insert_item(cc->tc, cc->ta, cc->chunk_root, &ck, item, isz);
	}
	for (int i = 0; i < plan.num_stripes && !ret; i++) {
		uint8_t de[sizeof(struct btrfs_dev_extent)];
		struct ub_key dk = { plan.stripes[i].devid, BTRFS_DEV_EXTENT_KEY, plan.stripes[i].physical };

		ub_dev_extent_encode(logical, plan.stripe_size, cc->tc->chunk_tree_uuid, de);
		ret = ub_tree_insert_item(cc->tc, cc->ta, cc->dev_root, &dk, de, sizeof(de));
	}
	if (!ret)
		ret = dev_items_grow(cc, &plan, false);
	if (!ret)
		ret = new_group_items(cc, type, logical, plan.length);
	if (!ret) {
		cc->alloc->chunks_added[kind_index(type)]++;
		if (logical_out)
			*logical_out = logical;
	}
out:
	free(item);
	free(uuids);
	return ret;
}

int ub_chunk_alloc(struct ub_chunk_ctx *cc, uint64_t type, uint64_t *logical)
{
	bool changed = false;
	int ret = chunk_alloc(cc, type, logical, &changed);

	/* -ENOSPC means "no room on the devices, nothing changed"; running out while inserting the items is not that */
	if (ret == -ENOSPC && changed) {
		ub_err(&cc->vol->log, "adding a chunk of type 0x%" PRIx64 ": no tree block left for its items; "
		       "the transaction must be aborted", type);
		return -EIO;
	}
	return ret;
}

void ub_chunk_stats(const struct ub_alloc *a, uint64_t added[3])
{
	memcpy(added, a->chunks_added, sizeof(a->chunks_added));
}

/* ---- when ---- */

uint64_t ub_chunk_op_blocks(int level)
{
	/* the path copied, plus a split at every level and a new root */
	return 2 * ((uint64_t)level + 1) + 1;
}

uint64_t ub_chunk_commit_reserve(const struct ub_chunk_ctx *cc)
{
	uint64_t levels = 0, whole, ns = cc->vol->nodesize;
	struct ub_space_info si;

	if (cc->roots) {
		for (const struct ub_eroot *er = ub_roots_first(cc->roots); er; er = ub_roots_next(er))
			if (&er->root != cc->chunk_root && er->root.bytenr)
				levels += (uint64_t)er->root.level + 1;
	} else {
		levels += (uint64_t)cc->dev_root->level + 1 + (uint64_t)cc->extent_root->level + 1;
		if (cc->fst_root)
			levels += (uint64_t)cc->fst_root->level + 1;
	}
	ub_alloc_space_info(cc->alloc, BTRFS_BLOCK_GROUP_METADATA, &si);
	/*
	 * Applying the references copies extent and free space tree leaves:
	 * one of each per block this transaction added at most (si.reserved),
	 * and for what it freed (not known before the commit) at most every
	 * leaf of the extent tree: ~64 bytes per metadata extent item.
	 */
	whole = si.used / ns * 64;
	if (whole > 512 * MiB)
		whole = 512 * MiB; /* the kernel's global reserve cap */
	return ns * (2 * levels + 16) + 2 * si.reserved + whole;
}

static uint64_t avail_of(const struct ub_alloc *a, uint64_t kind)
{
	return ub_alloc_usable(a, kind);
}

static uint64_t pinned_of(const struct ub_alloc *a, uint64_t kind)
{
	struct ub_space_info si;

	ub_alloc_space_info(a, kind, &si);
	return si.pinned;
}

/* 0 added, 1 no room on the devices (nothing changed), <0 error (the transaction must be aborted) */
static int add_kind(struct ub_chunk_ctx *cc, uint64_t kind)
{
	int ret = ub_chunk_alloc(cc, kind | ub_chunk_profile_for(cc->alloc, cc->vol, kind), NULL);

	return ret == -ENOSPC ? 1 : ret;
}

int ub_chunk_prepare(struct ub_chunk_ctx *cc, uint64_t op_bytes, int op)
{
	uint64_t ns = cc->vol->nodesize;
	uint64_t sys_need = ns * (2 * ((uint64_t)cc->chunk_root->level + 2) + ub_chunk_op_blocks(cc->chunk_root->level));
	uint64_t meta_need = ub_chunk_commit_reserve(cc);
	int ret;

	if (op == UB_CHUNK_OP_FREE)
		meta_need /= 2;
	meta_need += op_bytes;
	/* system first: adding a metadata chunk changes the chunk tree */
	if (ub_alloc_need_chunk(cc->alloc, BTRFS_BLOCK_GROUP_SYSTEM) ||
	    avail_of(cc->alloc, BTRFS_BLOCK_GROUP_SYSTEM) < sys_need) {
		ret = add_kind(cc, BTRFS_BLOCK_GROUP_SYSTEM);
		if (ret < 0)
			return ret;
	}
	if (ub_alloc_need_chunk(cc->alloc, BTRFS_BLOCK_GROUP_METADATA) ||
	    avail_of(cc->alloc, BTRFS_BLOCK_GROUP_METADATA) < meta_need) {
		/* the new chunk's own items must fit what is left: only with room for them */
		if (avail_of(cc->alloc, BTRFS_BLOCK_GROUP_SYSTEM) >= sys_need) {
			ret = add_kind(cc, BTRFS_BLOCK_GROUP_METADATA);
			if (ret < 0)
				return ret;
		}
	}
	if (avail_of(cc->alloc, BTRFS_BLOCK_GROUP_SYSTEM) < sys_need / 2)
		return pinned_of(cc->alloc, BTRFS_BLOCK_GROUP_SYSTEM) ? -EAGAIN : -ENOSPC;
	if (avail_of(cc->alloc, BTRFS_BLOCK_GROUP_METADATA) < meta_need) {
		struct ub_space_info si;
		uint64_t fresh;

		/*
		 * What a fresh transaction would need: the reserve without this
		 * transaction's share (2 * reserved). If that fits, committing
		 * first is the answer, not ENOSPC; so it is if what this
		 * transaction freed (pinned at its commit) would make it fit.
		 */
		ub_alloc_space_info(cc->alloc, BTRFS_BLOCK_GROUP_METADATA, &si);
		fresh = meta_need - 2 * si.reserved / (op == UB_CHUNK_OP_FREE ? 2 : 1);
		if (si.reserved && avail_of(cc->alloc, BTRFS_BLOCK_GROUP_METADATA) >= fresh)
			return -EAGAIN;
		return si.pinned && avail_of(cc->alloc, BTRFS_BLOCK_GROUP_METADATA) + si.pinned >= meta_need ? -EAGAIN
										       : -ENOSPC;
	}
	return 0;
}

int ub_chunk_reserve_data(struct ub_chunk_ctx *cc, uint64_t len, uint64_t hint, uint64_t *start)
{
	int ret = ub_alloc_reserve(cc->alloc, BTRFS_BLOCK_GROUP_DATA, len, hint, start);

	if (ret != -ENOSPC)
		return ret;
	ret = add_kind(cc, BTRFS_BLOCK_GROUP_DATA);
	if (ret)
		return ret > 0 ? -ENOSPC : ret;
	return ub_alloc_reserve(cc->alloc, BTRFS_BLOCK_GROUP_DATA, len, hint, start);
}

int ub_chunk_ensure_data(struct ub_chunk_ctx *cc, uint64_t len)
{
	/* a handful of chunks at most: each one is up to 10% of the devices */
	for (int i = 0; i < 64 && ub_alloc_usable(cc->alloc, BTRFS_BLOCK_GROUP_DATA) < len; i++) {
		int ret = add_kind(cc, BTRFS_BLOCK_GROUP_DATA);
		if (ret)
			return ret > 0 ? -ENOSPC : ret;
	}
	return ub_alloc_usable(cc->alloc, BTRFS_BLOCK_GROUP_DATA) < len ? -ENOSPC : 0;
}

/* ---- chunk removal (chunk_remove.c) ---- */

int ub_chunk_undo_begin(struct ub_alloc *a)
{
	return undo_begin(a);
}

int ub_chunk_dev_items_shrink(struct ub_chunk_ctx *cc, const struct ub_chunk_plan *plan)
{
	return dev_items_grow(cc, plan, true);
}
