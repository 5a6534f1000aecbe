// SPDX-License-Identifier: MIT
/*
 * Devices of a filesystem opened for writing (ubtrfs/balance.h): add one,
 * remove one (its block groups relocated first, lib/fsw/relocate.c), resize
 * one. Each ends with a commit; a removal relocates group by group, so an
 * interruption leaves a consistent filesystem with the device still in it.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <uuid/uuid.h>

#include "fsw/fsw.h"
#include "volume/volume_priv.h"
#include "ubtrfs/balance.h"

#define DI_GET(f, p) UB_GET(btrfs_dev_item, f, p)
#define DI_SET(f, p, v) UB_SET(btrfs_dev_item, f, p, v)
#define SB_GET(f) UB_GET(ub_disk_super, f, e->fs.vol->super)
#define SB_SET(f, v) UB_SET(ub_disk_super, f, e->fs.vol->super, v)

static const char *dev_name(const struct ub_vdev *v)
{
	return v->dev ? ub_dev_path(v->dev) : "(missing)";
}

int fsw_update_dev_item(struct ub_txn *t, uint64_t devid, void (*fn)(uint8_t *item, uint64_t arg), uint64_t arg)
{
	struct ub_engine *e = t->e;
	struct ub_key key = { BTRFS_DEV_ITEMS_OBJECTID, BTRFS_DEV_ITEM_KEY, devid };
	uint8_t copy[sizeof(struct btrfs_dev_item)];
	struct ub_path p;
	uint32_t size;
	uint8_t *d;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_search_slot(&e->fs.tc, ub_txn_ta(t), &e->fs.chunk_tree->root, &key, &p, 0, true);
	if (ret > 0)
		ret = -ENOENT;
	if (!ret) {
		d = ub_path_data_mut(&p, &size);
		if (!d || size < sizeof(copy)) {
			ret = -EUCLEAN;
		} else {
			fn(d, arg);
			memcpy(copy, d, sizeof(copy));
			ub_path_mark_dirty(&p);
		}
	}
	ub_path_release(&p);
	if (!ret)
		ret = ub_volume_add_dev_item(e->fs.vol, copy, sizeof(copy));
	return ret;
}

/* ---- add ---- */

int ub_engine_device_add(struct ub_engine *e, const char *path, bool force, uint64_t *devid_out)
{
	uint8_t item[sizeof(struct btrfs_dev_item)], sb[UB_SUPER_INFO_SIZE];
	struct ub_volume *vol = e->fs.vol;
	struct ub_dev *dev = NULL;
	struct ub_txn *t;
	uint64_t devid = 0, size;
	uuid_t uuid;
	int ret;

	ret = ub_dev_open(path, true, &dev);
	if (ret) {
		ub_err(&e->fs.log, "device add: cannot open %s: %s", path, strerror(-ret));
		return ret;
	}
	size = ub_dev_size(dev) / vol->sectorsize * vol->sectorsize;
	if (size < 256ULL << 20) {
		ub_err(&e->fs.log, "device add: %s is %" PRIu64 " bytes, a device needs at least 256 MiB", path, size);
		ub_dev_close(dev);
		return -ENOSPC;
	}
	if (!force && ub_dev_read(dev, sb, sizeof(sb), ub_super_offset(0)) == 0 &&
	    UB_GET(ub_disk_super, magic, sb) == UB_MAGIC) {
		ub_err(&e->fs.log, "device add: %s holds a btrfs filesystem; use --force to overwrite it", path);
		ub_dev_close(dev);
		return -EEXIST;
	}
	ret = ub_fs_live_write_lock(&e->fs);
	if (ret) {
		ub_dev_close(dev);
		return ret;
	}
	for (int i = 0; i < vol->nvdevs; i++)
		if (vol->vdevs[i].devid > devid)
			devid = vol->vdevs[i].devid;
	devid++;
	ub_fs_live_write_unlock(&e->fs);
	/* what the device held before: its first MiB and every superblock place */
	{
		static const uint8_t zero[64 << 10];

		for (uint64_t off = 0; off < (1ULL << 20) && !ret; off += sizeof(zero))
			ret = ub_dev_write(dev, zero, sizeof(zero), off);
		for (int m = 1; m < UB_SUPER_MIRROR_MAX && !ret; m++)
			if (ub_super_offset(m) + UB_SUPER_INFO_SIZE <= size)
				ret = ub_dev_write(dev, zero, UB_SUPER_INFO_SIZE, ub_super_offset(m));
		if (!ret)
			ret = ub_dev_flush(dev);
		if (ret) {
			ub_err(&e->fs.log, "device add: cannot write %s: %s", path, strerror(-ret));
			ub_dev_close(dev);
			return ret;
		}
	}
	uuid_generate(uuid);
	memset(item, 0, sizeof(item));
	DI_SET(devid, item, devid);
	DI_SET(total_bytes, item, size);
	DI_SET(bytes_used, item, 0);
	DI_SET(io_align, item, vol->sectorsize);
	DI_SET(io_width, item, vol->sectorsize);
	DI_SET(sector_size, item, vol->sectorsize);
	memcpy(item + offsetof(struct btrfs_dev_item, uuid), uuid, UB_UUID_SIZE);
	memcpy(item + offsetof(struct btrfs_dev_item, fsid), vol->metadata_uuid, UB_FSID_SIZE);

	ret = ub_engine_begin_op(e, ub_chunk_op_blocks(UB_MAX_LEVEL - 1) * vol->nodesize, UB_CHUNK_OP_ADD, &t);
	if (ret) {
		ub_dev_close(dev);
		return ret;
	}
	{
		struct ub_key key = { BTRFS_DEV_ITEMS_OBJECTID, BTRFS_DEV_ITEM_KEY, devid };

		ret = ub_tree_insert_item(&e->fs.tc, ub_txn_ta(t), &e->fs.chunk_tree->root, &key, item, sizeof(item));
	}
	if (!ret) {
		ret = ub_volume_add_device(vol, dev, item);
		if (!ret)
			dev = NULL; /* the volume's now */
	}
	if (!ret) {
		vol->num_devices++;
		e->fs.vol->num_devices = vol->num_devices;
		SB_SET(num_devices, SB_GET(num_devices) + 1);
		SB_SET(total_bytes, SB_GET(total_bytes) + size);
	} else {
		ub_txn_abort(t);
	}
	ub_engine_end_op(e);
	if (dev)
		ub_dev_close(dev);
	if (!ret)
		ret = ub_engine_commit(e);
	if (!ret) {
		ub_logf(&e->fs.log, UB_LOG_INFO, "device add: %s is device %" PRIu64 " (%" PRIu64 " bytes)", path, devid,
			size);
		if (devid_out)
			*devid_out = devid;
	}
	return ret;
}

/* ---- remove ---- */

/* Does a live block group have a stripe on `devid`? */
static bool groups_on(struct ub_engine *e, uint64_t devid)
{
	struct ub_bg_info bi;
	uint64_t pos = 0;

	while (ub_alloc_next_bg(e->alloc, pos, &bi) == 0) {
		const struct ub_chunk *c = ub_volume_find_chunk(e->fs.vol, bi.start);

		pos = bi.start + bi.length;
		for (unsigned i = 0; c && i < c->num_stripes; i++)
			if (c->stripes[i].devid == devid)
				return true;
	}
	return false;
}

/*
 * The kernel's minimum device counts: every profile in use must still have
 * its devices once this one is gone. The message names the profile and the
 * conversion that would allow the removal.
 */
static int check_min_devices(struct ub_engine *e, const struct ub_vdev *gone)
{
	struct ub_bg_info bi;
	uint64_t pos = 0;
	int left = 0;

	for (int i = 0; i < e->fs.vol->nvdevs; i++) {
		const struct ub_vdev *v = &e->fs.vol->vdevs[i];

		left += v != gone && v->dev && !v->missing;
	}
	while (ub_alloc_next_bg(e->alloc, pos, &bi) == 0) {
		const struct ub_profile *p = ub_profile_of(bi.flags);

		pos = bi.start + bi.length;
		if (p && left < p->devs_min) {
			const char *kind = (bi.flags & BTRFS_BLOCK_GROUP_DATA) ? "data"
				: (bi.flags & BTRFS_BLOCK_GROUP_SYSTEM) ? "system" : "metadata";

			ub_err(&e->fs.log, "cannot remove device %" PRIu64 " (%s): %s %s needs at least %d devices and %d "
			       "would be left; convert it first (ubtrfs balance start -%cconvert=%s)", gone->devid,
			       dev_name(gone), kind, p->name, p->devs_min, left,
			       (bi.flags & BTRFS_BLOCK_GROUP_DATA) ? 'd' : 'm',
			       left >= 2 ? "raid1" : (bi.flags & BTRFS_BLOCK_GROUP_DATA) ? "single" : "dup");
			return -EINVAL;
		}
	}
	if (left == 0) {
		ub_err(&e->fs.log, "cannot remove device %" PRIu64 ": it is the last one", gone->devid);
		return -EINVAL;
	}
	return 0;
}

/*
 * Room elsewhere for what the device holds, roughly as the kernel counts it
 * before a removal: the bytes used in the groups with a stripe there against
 * what the other devices have unallocated plus free in the groups they hold
 * alone. -ENOSPC with the figures.
 */
static int check_room(struct ub_engine *e, const struct ub_vdev *gone)
{
	struct ub_chunk_ctx cc;
	struct ub_dev_space *ds = NULL;
	struct ub_bg_info bi;
	uint64_t pos = 0, need = 0, have = 0;
	int nds = 0, ret;

	while (ub_alloc_next_bg(e->alloc, pos, &bi) == 0) {
		const struct ub_chunk *c = ub_volume_find_chunk(e->fs.vol, bi.start);
		bool on = false;
		int copies;

		pos = bi.start + bi.length;
		for (unsigned i = 0; c && i < c->num_stripes; i++)
			on |= c->stripes[i].devid == gone->devid;
		copies = c && c->profile ? c->profile->ncopies : 1;
		if (on)
			need += bi.used * (uint64_t)copies;
		else
			have += (bi.length - bi.used) * (uint64_t)copies;
	}
	if (!e->running)
		return 0; /* only asked inside an operation */
	ret = ub_txn_chunk_ctx(e->running, &cc);
	if (!ret)
		ret = ub_chunk_dev_space(&cc, &ds, &nds);
	if (ret)
		return ret;
	for (int i = 0; i < nds; i++)
		for (int h = 0; ds[i].devid != gone->devid && h < ds[i].nholes; h++)
			have += ds[i].hole_len[h];
	ub_chunk_free_space(ds, nds);
	if (need > have) {
		ub_err(&e->fs.log, "cannot remove device %" PRIu64 " (%s): its block groups hold %" PRIu64
		       " bytes (all copies), the other devices have room for %" PRIu64, gone->devid, dev_name(gone),
		       need, have);
		return -ENOSPC;
	}
	return 0;
}

int ub_engine_device_remove(struct ub_engine *e, uint64_t devid,
			    int (*progress)(void *arg, const struct ub_balance_progress *p), void *arg,
			    struct ub_balance_progress *out)
{
	struct ub_volume *vol = e->fs.vol;
	struct ub_vdev *v = NULL;
	struct ub_dev *dev = NULL;
	struct ub_balance b;
	struct ub_txn *t;
	uint64_t total;
	bool missing;
	int ret;

	ret = ub_engine_begin_op(e, 0, UB_CHUNK_OP_FREE, &t);
	if (ret)
		return ret;
	for (int i = 0; i < vol->nvdevs; i++)
		if (vol->vdevs[i].devid && /* 0: a removed device's tombstone */
		    (devid ? vol->vdevs[i].devid == devid : (vol->vdevs[i].missing || !vol->vdevs[i].dev)))
			v = &vol->vdevs[i];
	if (!v) {
		if (devid)
			ub_err(&e->fs.log, "device remove: the filesystem has no device %" PRIu64, devid);
		else
			ub_err(&e->fs.log, "device remove: no device is missing");
		ub_engine_end_op(e);
		return -ENOENT;
	}
	devid = v->devid;
	ret = check_min_devices(e, v);
	if (!ret)
		ret = check_room(e, v);
	if (!ret)
		v->no_alloc = true;
	ub_engine_end_op(e);
	if (ret)
		return ret;

	/* every group with a stripe there, whatever its type, moved */
	memset(&b, 0, sizeof(b));
	b.flags = BTRFS_BALANCE_DATA | BTRFS_BALANCE_METADATA | BTRFS_BALANCE_SYSTEM | BTRFS_BALANCE_FORCE;
	b.data.flags = b.meta.flags = b.sys.flags = BTRFS_BALANCE_ARGS_DEVID;
	b.data.devid = b.meta.devid = b.sys.devid = devid;
	ret = fsw_balance_no_item(e, &b, progress, arg, out);

	if (!ret)
		ret = ub_engine_begin_op(e, ub_chunk_op_blocks(UB_MAX_LEVEL - 1) * vol->nodesize, UB_CHUNK_OP_FREE, &t);
	else
		goto undo;
	if (ret)
		goto undo;
	v = ub_volume_vdev(vol, devid);
	if (!v) {
		ret = -ENOENT;
	} else if (groups_on(e, devid)) {
		ub_err(&e->fs.log, "device remove: block groups are still on device %" PRIu64 " after the relocation",
		       devid);
		ret = -EAGAIN;
	}
	if (!ret) {
		struct ub_key key = { BTRFS_DEV_ITEMS_OBJECTID, BTRFS_DEV_ITEM_KEY, devid };
		struct ub_path p;

		total = v->total_bytes;
		missing = v->missing || !v->dev;
		ub_path_init(&p);
		ret = ub_tree_search_slot(&e->fs.tc, ub_txn_ta(t), &e->fs.chunk_tree->root, &key, &p, -1, true);
		if (ret > 0)
			ret = -EUCLEAN;
		if (!ret)
			ret = ub_tree_del_items(&e->fs.tc, ub_txn_ta(t), &e->fs.chunk_tree->root, &p, p.slots[0], 1);
		ub_path_release(&p);
		if (!ret)
			ret = ub_volume_detach_device(vol, devid, &dev);
		if (!ret) {
			vol->num_devices--;
			SB_SET(num_devices, SB_GET(num_devices) - 1);
			SB_SET(total_bytes, SB_GET(total_bytes) > total ? SB_GET(total_bytes) - total : 0);
		} else {
			ub_txn_abort(t);
		}
		(void)missing;
	}
	ub_engine_end_op(e);
	if (!ret)
		ret = ub_engine_commit(e);
	if (ret) {
		if (dev)
			ub_dev_close(dev); /* the engine is broken or the removal was dropped; the disk decides */
		return ret;
	}
	if (dev) {
		/* what the kernel does: the device's superblocks wiped, so no scan takes it for ours */
		static const uint8_t zero[UB_SUPER_INFO_SIZE];
		uint64_t size = ub_dev_size(dev);
		int wret = 0;

		for (int m = 0; m < UB_SUPER_MIRROR_MAX && !wret; m++)
			if (ub_super_offset(m) + UB_SUPER_INFO_SIZE <= size)
				wret = ub_dev_write(dev, zero, sizeof(zero), ub_super_offset(m));
		if (!wret)
			wret = ub_dev_flush(dev);
		if (wret)
			ub_warn(&e->fs.log, "device remove: the superblocks of %s could not be wiped (%s)", ub_dev_path(dev),
				strerror(-wret));
		ub_dev_close(dev);
	}
	ub_logf(&e->fs.log, UB_LOG_INFO, "device remove: device %" PRIu64 " removed", devid);
	return 0;
undo:
	if (ub_fs_live_write_lock(&e->fs) == 0) {
		v = ub_volume_vdev(vol, devid);
		if (v)
			v->no_alloc = false;
		ub_fs_live_write_unlock(&e->fs);
	}
	return ret;
}

/* ---- resize ---- */

static void set_total(uint8_t *item, uint64_t total)
{
	DI_SET(total_bytes, item, total);
}

int ub_engine_device_resize(struct ub_engine *e, uint64_t devid, uint64_t size)
{
	struct ub_volume *vol = e->fs.vol;
	struct ub_vdev *v;
	struct ub_txn *t;
	uint64_t old, used;
	int ret;

	ret = ub_engine_begin_op(e, 0, UB_CHUNK_OP_FREE, &t);
	if (ret)
		return ret;
	v = ub_volume_vdev(vol, devid);
	if (!v || !v->dev || v->missing) {
		ub_err(&e->fs.log, "resize: no device %" PRIu64 " present", devid);
		ub_engine_end_op(e);
		return -ENOENT;
	}
	if (size == UINT64_MAX)
		size = ub_dev_size(v->dev);
	size = size / vol->sectorsize * vol->sectorsize;
	old = v->total_bytes;
	used = DI_GET(bytes_used, v->item);
	if (size > ub_dev_size(v->dev)) {
		ub_err(&e->fs.log, "resize: device %" PRIu64 " (%s) is %" PRIu64 " bytes, cannot grow to %" PRIu64, devid,
		       dev_name(v), ub_dev_size(v->dev), size);
		ret = -EINVAL;
	} else if (size < 256ULL << 20) {
		ub_err(&e->fs.log, "resize: %" PRIu64 " bytes is too small for a device (256 MiB at least)", size);
		ret = -EINVAL;
	}
	/* a shrink: no new chunk past the new end meanwhile */
	if (!ret && size < old)
		__atomic_store_n(&v->total_bytes, size, __ATOMIC_RELAXED);
	ub_engine_end_op(e);
	if (ret)
		return ret;
	if (size < old) {
		struct ub_balance b;

		memset(&b, 0, sizeof(b));
		b.flags = BTRFS_BALANCE_DATA | BTRFS_BALANCE_METADATA | BTRFS_BALANCE_SYSTEM | BTRFS_BALANCE_FORCE;
		b.data.flags = b.meta.flags = b.sys.flags = BTRFS_BALANCE_ARGS_DEVID | BTRFS_BALANCE_ARGS_DRANGE;
		b.data.devid = b.meta.devid = b.sys.devid = devid;
		b.data.pstart = b.meta.pstart = b.sys.pstart = size;
		b.data.pend = b.meta.pend = b.sys.pend = UINT64_MAX;
		ret = fsw_balance_no_item(e, &b, NULL, NULL, NULL);
		if (ret) {
			ub_err(&e->fs.log, "resize: the block groups past %" PRIu64 " on device %" PRIu64
			       " could not be moved (%s); the size stays %" PRIu64, size, devid, strerror(-ret), old);
			if (ub_fs_live_write_lock(&e->fs) == 0) {
				__atomic_store_n(&v->total_bytes, old, __ATOMIC_RELAXED);
				ub_fs_live_write_unlock(&e->fs);
			}
			return ret;
		}
	}
	(void)used;
	ret = ub_engine_begin_op(e, ub_chunk_op_blocks(UB_MAX_LEVEL - 1) * vol->nodesize, UB_CHUNK_OP_ADD, &t);
	if (ret)
		return ret;
	ret = fsw_update_dev_item(t, devid, set_total, size);
	if (!ret) {
		uint64_t total = SB_GET(total_bytes);

		SB_SET(total_bytes, total - old + size);
	} else {
		ub_txn_abort(t);
	}
	ub_engine_end_op(e);
	if (!ret)
		ret = ub_engine_commit(e);
	if (!ret)
		ub_logf(&e->fs.log, UB_LOG_INFO, "resize: device %" PRIu64 " from %" PRIu64 " to %" PRIu64 " bytes", devid,
			old, size);
	return ret;
}

/* ---- replace ---- */

/* Does unit `u` of the stripe hold anything: data in use, or the parity of a row with data in use? */
static bool unit_used(struct ub_engine *e, const struct ub_chunk *c, const struct ub_stripe_src *src, uint64_t u)
{
	const struct ub_range_set *free = ub_alloc_bg_free(e->alloc, c->logical);
	uint64_t start, len;

	if (!free || u >= src->units)
		return true;
	if (src->table[u] != UINT64_MAX) {
		start = c->logical + src->table[u];
		len = c->stripe_len;
	} else {
		uint64_t ndata = (uint64_t)ub_chunk_data_stripes(c);

		start = c->logical + u * ndata * c->stripe_len;
		len = ndata * c->stripe_len;
	}
	if (start >= c->logical + c->length)
		return false;
	if (start + len > c->logical + c->length)
		len = c->logical + c->length - start;
	return !ub_rs_contains(free, start, len);
}

/* The bytes of stripes device `devid` holds, as copy_stripes will walk them (for the progress). */
static uint64_t stripes_total(struct ub_engine *e, uint64_t devid)
{
	struct ub_bg_info bi;
	uint64_t pos = 0, total = 0;

	while (ub_alloc_next_bg(e->alloc, pos, &bi) == 0) {
		const struct ub_chunk *c = ub_volume_find_chunk(e->fs.vol, bi.start);

		pos = bi.start + bi.length;
		for (int s = 0; c && s < c->num_stripes; s++)
			if (c->stripes[s].devid == devid)
				total += ub_chunk_stripe_size(c);
	}
	return total;
}

/* Every stripe the device holds, written onto `to` at the same place from what the chunk holds. */
static int copy_stripes(struct ub_engine *e, uint64_t devid, struct ub_dev *to, uint64_t *copied)
{
	const uint64_t step = 4ULL << 20;
	uint8_t *buf = malloc(step);
	struct ub_bg_info bi;
	uint64_t pos = 0, base = 0;
	int ret = buf ? 0 : -ENOMEM;

	__atomic_store_n(&e->replace_total, stripes_total(e, devid), __ATOMIC_RELAXED);
	while (!ret && ub_alloc_next_bg(e->alloc, pos, &bi) == 0) {
		const struct ub_chunk *c = ub_volume_find_chunk(e->fs.vol, bi.start);

		pos = bi.start + bi.length;
		for (int s = 0; c && !ret && s < c->num_stripes; s++) {
			struct ub_stripe_src src;
			uint64_t size = ub_chunk_stripe_size(c);

			if (c->stripes[s].devid != devid)
				continue;
			ret = ub_stripe_src_init(&src, e->fs.vol, c, s);
			for (uint64_t off = 0; off < size && !ret;) {
				uint64_t n = 0;

				/* a cancel is seen between steps: nothing the filesystem uses has changed yet */
				if (__atomic_load_n(&e->replace_cancel, __ATOMIC_ACQUIRE)) {
					ret = -ECANCELED;
					break;
				}
				/* what holds nothing (free space, a parity row over free space) is not copied */
				while (off < size && !unit_used(e, c, &src, off / c->stripe_len))
					off += c->stripe_len;
				while (off + n < size && n < step && unit_used(e, c, &src, (off + n) / c->stripe_len))
					n += c->stripe_len;
				if (off + n > size)
					n = size - off;
				if (!n)
					break;
				ret = ub_stripe_src_read(&src, off, n, buf);
				if (ret)
					ub_err(&e->fs.log, "replace: chunk %" PRIu64 " stripe %d at physical %" PRIu64
					       ": cannot be read or rebuilt (%s)", c->logical, s, c->stripes[s].physical + off,
					       strerror(-ret));
				else
					ret = ub_dev_write(to, buf, n, c->stripes[s].physical + off);
				if (!ret)
					*copied += n;
				off += n;
				__atomic_store_n(&e->replace_done, base + (off > size ? size : off), __ATOMIC_RELAXED);
			}
			ub_stripe_src_free(&src);
			base += size;
		}
	}
	free(buf);
	return ret;
}

int ub_engine_device_replace_cancel(struct ub_engine *e)
{
	if (!__atomic_load_n(&e->replace_total, __ATOMIC_ACQUIRE))
		return -ENOENT;
	__atomic_store_n(&e->replace_cancel, 1, __ATOMIC_RELEASE);
	return 0;
}

void ub_engine_device_replace_progress(struct ub_engine *e, uint64_t *done, uint64_t *total)
{
	*done = __atomic_load_n(&e->replace_done, __ATOMIC_RELAXED);
	*total = __atomic_load_n(&e->replace_total, __ATOMIC_ACQUIRE);
}

int ub_engine_device_replace(struct ub_engine *e, uint64_t devid, const char *path, bool force)
{
	struct ub_volume *vol = e->fs.vol;
	uint8_t sb[UB_SUPER_INFO_SIZE];
	static const uint8_t zero[64 << 10];
	struct ub_dev *to = NULL, *old = NULL;
	struct ub_vdev *v;
	uint64_t copied = 0;
	int ret, none = 0;

	ret = ub_dev_open(path, true, &to);
	if (ret) {
		ub_err(&e->fs.log, "replace: cannot open %s: %s", path, strerror(-ret));
		return ret;
	}
	if (!force && ub_dev_read(to, sb, sizeof(sb), ub_super_offset(0)) == 0 &&
	    UB_GET(ub_disk_super, magic, sb) == UB_MAGIC) {
		ub_err(&e->fs.log, "replace: %s holds a btrfs filesystem; use --force to overwrite it", path);
		ub_dev_close(to);
		return -EEXIST;
	}
	/* what is on disk first: the copy is of the last commit, and nothing changes while it is made */
	ret = ub_engine_commit(e);
	if (!ret)
		ret = ub_fs_live_write_lock(&e->fs);
	if (ret) {
		ub_dev_close(to);
		return ret;
	}
	v = devid ? ub_volume_vdev(vol, devid) : NULL;
	for (int i = 0; !devid && i < vol->nvdevs; i++)
		if (vol->vdevs[i].devid && (vol->vdevs[i].missing || !vol->vdevs[i].dev))
			v = &vol->vdevs[i];
	if (!v) {
		ub_err(&e->fs.log, devid ? "replace: the filesystem has no device %" PRIu64 : "replace: no device is missing",
		       devid);
		ret = -ENOENT;
	} else if (ub_dev_size(to) < v->total_bytes) {
		ub_err(&e->fs.log, "replace: %s (%" PRIu64 " bytes) is smaller than device %" PRIu64 " (%" PRIu64 " bytes)",
		       path, ub_dev_size(to), v->devid, v->total_bytes);
		ret = -ENOSPC;
	}
	/* the target's old contents: its first MiB and every superblock place */
	for (uint64_t off = 0; !ret && off < (1ULL << 20); off += sizeof(zero))
		ret = ub_dev_write(to, zero, sizeof(zero), off);
	for (int m = 1; !ret && m < UB_SUPER_MIRROR_MAX; m++)
		if (ub_super_offset(m) + UB_SUPER_INFO_SIZE <= ub_dev_size(to))
			ret = ub_dev_write(to, zero, UB_SUPER_INFO_SIZE, ub_super_offset(m));
	__atomic_store_n(&e->replace_cancel, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&e->replace_done, 0, __ATOMIC_RELAXED);
	if (!ret)
		ret = copy_stripes(e, v->devid, to, &copied);
	/* no replace under way from here: a cancel now finds none */
	__atomic_store_n(&e->replace_total, 0, __ATOMIC_RELEASE);
	if (ret == -ECANCELED)
		ub_logf(&e->fs.log, UB_LOG_INFO, "replace: canceled after %" PRIu64 " bytes copied; device %" PRIu64
			" stays as it was", copied, v->devid);
	if (!ret)
		ret = ub_dev_flush(to);
	if (!ret) {
		/*
		 * The new device takes the old one's place: its devid and uuid (as the
		 * kernel's replace leaves them: the chunk items name both), its dev
		 * item; the next superblocks are written to it, not to the old one.
		 */
		devid = v->devid;
		ret = ub_volume_swap_device(vol, devid, to, &old);
		if (!ret)
			to = NULL;
	}
	ub_fs_live_write_unlock(&e->fs);
	if (to)
		ub_dev_close(to);
	if (ret)
		return ret;
	/*
	 * A commit writes every superblock, the new device's among them. An empty
	 * transaction makes no commit, so the dev item is written again (as it
	 * is): the superblock must reach the new device now.
	 */
	{
		struct ub_txn *t;

		ret = ub_engine_begin_op(e, ub_chunk_op_blocks(UB_MAX_LEVEL - 1) * vol->nodesize, UB_CHUNK_OP_ADD, &t);
		if (!ret) {
			v = ub_volume_vdev(vol, devid);
			ret = v ? fsw_update_dev_item(t, devid, set_total, DI_GET(total_bytes, v->item)) : -ENOENT;
			ub_engine_end_op(e);
		}
		if (!ret)
			ret = ub_engine_commit(e);
	}
	if (ret) {
		__atomic_compare_exchange_n(&e->broken, &none, ret, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
		if (old)
			ub_dev_close(old);
		return ret;
	}
	if (old) {
		static const uint8_t zsb[UB_SUPER_INFO_SIZE];
		uint64_t size = ub_dev_size(old);
		int wret = 0;

		for (int m = 0; m < UB_SUPER_MIRROR_MAX && !wret; m++)
			if (ub_super_offset(m) + UB_SUPER_INFO_SIZE <= size)
				wret = ub_dev_write(old, zsb, sizeof(zsb), ub_super_offset(m));
		if (!wret)
			wret = ub_dev_flush(old);
		if (wret)
			ub_warn(&e->fs.log, "replace: the superblocks of %s could not be wiped (%s)", ub_dev_path(old),
				strerror(-wret));
		ub_dev_close(old);
	}
	ub_logf(&e->fs.log, UB_LOG_INFO, "replace: device %" PRIu64 " is now %s (%" PRIu64 " bytes copied)", devid, path,
		copied);
	return 0;
}
