/* SPDX-License-Identifier: MIT */
/*
 * rescue fix-device-size: device items' total_bytes made what the kernel
 * accepts (a multiple of the sector size, not past the device's end) and the
 * superblock's total_bytes their sum, as btrfs rescue fix-device-size does;
 * one transaction of the write engine, so the change is copy-on-write and
 * committed like any other.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "ubtrfs/rescue.h"
#include "alloc/chunk_alloc.h"
#include "fsw/fsw.h"
#include "volume/volume_priv.h"

void ub_devsize_result_free(struct ub_devsize_result *r)
{
	if (!r)
		return;
	free(r->dev);
	memset(r, 0, sizeof(*r));
}

/* Where the last stripe the chunk map places on `devid` ends (the device extents, as the chunk tree says them). */
static uint64_t extents_end(const struct ub_volume *vol, uint64_t devid)
{
	uint64_t end = 0;

	for (int i = 0; i < vol->nchunks; i++) {
		const struct ub_chunk *c = vol->chunks[i];
		uint64_t len = ub_chunk_stripe_size(c);

		for (int j = 0; j < c->num_stripes; j++)
			if (c->stripes[j].devid == devid && c->stripes[j].physical + len > end)
				end = c->stripes[j].physical + len;
	}
	return end;
}

static void set_total(uint8_t *item, uint64_t total)
{
	UB_SET(btrfs_dev_item, total_bytes, item, total);
}

/* What each device's size should be; r->changed when any differs, or the sum from the superblock's total. */
static int plan(struct ub_engine *e, struct ub_devsize_result *r)
{
	struct ub_volume *vol = e->fs.vol;
	const uint64_t ss = vol->sectorsize;
	uint64_t sum = 0;

	r->dev = calloc((size_t)vol->nvdevs + 1, sizeof(*r->dev));
	if (!r->dev)
		return -ENOMEM;
	for (int i = 0; i < vol->nvdevs; i++) {
		const struct ub_vdev *v = &vol->vdevs[i];
		struct ub_devsize_fix *f = &r->dev[r->ndevs++];

		f->devid = v->devid;
		f->old_bytes = UB_GET(btrfs_dev_item, total_bytes, v->item);
		f->new_bytes = f->old_bytes / ss * ss;
		f->extents_end = extents_end(vol, v->devid);
		if (v->dev && !v->missing) {
			uint64_t real = ub_dev_size(v->dev) / ss * ss;

			f->dev_bytes = ub_dev_size(v->dev);
			if (f->new_bytes > real) {
				/* shrinking below a device extent would leave data outside the device: leave it to a repair */
				if (f->extents_end <= real)
					f->new_bytes = real;
				else
					f->held = true;
			}
		}
		r->changed |= f->new_bytes != f->old_bytes;
		sum += f->new_bytes;
	}
	r->old_total = UB_GET(ub_disk_super, total_bytes, vol->super);
	r->new_total = sum;
	r->changed |= r->old_total != sum;
	return 0;
}

static int apply(struct ub_engine *e, const struct ub_devsize_result *r)
{
	struct ub_volume *vol = e->fs.vol;
	struct ub_txn *t;
	int ret;

	ret = ub_engine_begin_op(e, (uint64_t)r->ndevs * ub_chunk_op_blocks(UB_MAX_LEVEL - 1) * vol->nodesize,
				 UB_CHUNK_OP_ADD, &t);
	if (ret)
		return ret;
	for (int i = 0; !ret && i < r->ndevs; i++) {
		const struct ub_devsize_fix *f = &r->dev[i];

		if (f->new_bytes == f->old_bytes)
			continue;
		ret = fsw_update_dev_item(t, f->devid, set_total, f->new_bytes);
		if (ret)
			ub_err(&e->fs.log, "devid %" PRIu64 ": its device item cannot be changed: %s", f->devid,
			       strerror(-ret));
	}
	if (!ret)
		UB_SET(ub_disk_super, total_bytes, vol->super, r->new_total);
	else
		ub_txn_abort(t);
	ub_engine_end_op(e);
	if (!ret)
		ret = ub_engine_commit(e);
	return ret;
}

int ub_rescue_fix_device_size(struct ub_dev *const *devs, int ndevs, const struct ub_log *log,
			      struct ub_devsize_result *out)
{
	struct ub_devsize_result r;
	struct ub_engine *e = NULL;
	int ret;

	memset(&r, 0, sizeof(r));
	/* a pending log would be replayed and committed by a plain open: that is a mount's decision, not ours */
	ret = ub_engine_open_raw(NULL, devs, ndevs, log, UB_ENGINE_OPEN_NO_LOG_REPLAY, &e);
	if (ret)
		goto out;
	ret = ub_engine_ready(e);
	if (!ret)
		ret = plan(e, &r);
	if (!ret && r.changed)
		ret = apply(e, &r);
	ub_engine_close(e);
out:
	if (out)
		*out = r;
	else
		ub_devsize_result_free(&r);
	return ret;
}
