/* SPDX-License-Identifier: MIT */
/*
 * Writes by logical address: every copy of the mirrored and striped profiles,
 * read-modify-write of RAID5/6 full stripes with P and Q recomputed, device
 * flushes, superblocks on every device, and the sticky write error that keeps
 * the last commit intact once a device has failed a write.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "volume_internal.h"

/* btrfs keeps the first MiB of every device for the boot area and superblock 0 */
#define DEVICE_RESERVED (1024ULL * 1024)

int ub_volume_write_error(const struct ub_volume *vol)
{
	return vol->write_error;
}

/* A device refused a write or flush: from now on nothing more may reach the disks. */
static int sticky(struct ub_volume *vol, int err)
{
	if (!vol->write_error)
		vol->write_error = err;
	return err;
}

static int write_gate(const struct ub_volume *vol)
{
	return vol->write_error || !vol->writable ? -EROFS : 0;
}

static const char *vdev_path(const struct ub_stripe *s)
{
	return s->dev && s->dev->dev ? s->dev->dev->path : "missing";
}

/*
 * The chunk map comes from the disk too: a stripe that points into a device's
 * reserved first MiB, over a superblock mirror or past the device's end must
 * not turn a data write into damage the superblocks cannot survive.
 */
static int phys_check(struct ub_volume *vol, const struct ub_chunk *c, int stripe, uint64_t phys, uint64_t len)
{
	const struct ub_stripe *s = &c->stripes[stripe];
	uint64_t end = phys + len, limit = s->dev->dev->size;

	if (s->dev->total_bytes && s->dev->total_bytes < limit)
		limit = s->dev->total_bytes;
	if (end < phys || phys < DEVICE_RESERVED || end > limit) {
		ub_err(&vol->log,
		       "chunk at logical %llu: stripe %d maps a write to physical [%llu, %llu) on devid %llu (%s), "
		       "outside the writable range [1 MiB, %llu)",
		       (unsigned long long)c->logical, stripe, (unsigned long long)phys, (unsigned long long)end,
		       (unsigned long long)s->devid, vdev_path(s), (unsigned long long)limit);
		return -EUCLEAN;
	}
	for (int m = 1; m < UB_SUPER_MIRROR_MAX; m++) {
		uint64_t so = ub_super_offset(m);
		if (phys < so + UB_SUPER_INFO_SIZE && so < end) {
			ub_err(&vol->log,
			       "chunk at logical %llu: stripe %d maps a write to physical [%llu, %llu) on devid %llu (%s), "
			       "over superblock mirror %d at %llu",
			       (unsigned long long)c->logical, stripe, (unsigned long long)phys,
			       (unsigned long long)end, (unsigned long long)s->devid, vdev_path(s), m,
			       (unsigned long long)so);
			return -EUCLEAN;
		}
	}
	return 0;
}

static int dev_write(struct ub_volume *vol, const struct ub_chunk *c, int stripe, const void *buf, uint64_t len,
		     uint64_t phys)
{
	const struct ub_stripe *s = &c->stripes[stripe];
	int ret = ub_dev_write(s->dev->dev, buf, len, phys);

	if (ret) {
		ub_err(&vol->log, "write of %llu bytes at physical %llu on devid %llu (%s) failed: %s; no more writes",
		       (unsigned long long)len, (unsigned long long)phys, (unsigned long long)s->devid, vdev_path(s),
		       strerror(-ret));
		return sticky(vol, ret);
	}
	return 0;
}

/*
 * Mirrored and striped profiles without parity: each copy segment by segment.
 * The first pass only maps and checks, so a refused write changes nothing.
 */
static int write_copies(struct ub_volume *vol, const struct ub_chunk *c, uint64_t logical, uint64_t len,
			const uint8_t *buf)
{
	const int copies = ub_chunk_num_copies(c);

	for (int pass = 0; pass < 2; pass++) {
		uint64_t lg = logical, left = len;
		const uint8_t *p = buf;

		while (left > 0) {
			uint64_t n = left;
			int present = 0, ret;

			for (int k = 1; k <= copies; k++) {
				struct ub_map m;
				ret = ub_chunk_map_copy(c, lg, k, &m);
				if (ret)
					return ret;
				if (m.contig < n)
					n = m.contig;
			}
			for (int k = 1; k <= copies; k++) {
				struct ub_map m;
				ret = ub_chunk_map_copy(c, lg, k, &m);
				if (ret)
					return ret;
				if (!c->stripes[m.stripe].dev) {
					vol->writes_skipped += pass;
					continue;
				}
				present++;
				ret = pass ? dev_write(vol, c, m.stripe, p, n, m.physical)
					   : phys_check(vol, c, m.stripe, m.physical, n);
				if (ret)
					return ret;
			}
			if (!present) {
				ub_err(&vol->log, "write at logical %llu (%s chunk at %llu): every copy is on a missing device",
				       (unsigned long long)lg, c->profile->name, (unsigned long long)c->logical);
				return -EIO;
			}
			p += n;
			lg += n;
			left -= n;
		}
	}
	return 0;
}

/* ---- RAID5/6 ---- */

/* Physical stripe holding slot `i` (data 0..n-1, P, Q) of full stripe `full`: as raid56.c reads it. */
static int slot_stripe(const struct ub_chunk *c, uint64_t full, int i)
{
	return (int)((full + (uint64_t)i) % c->num_stripes);
}

/* One full stripe's share of a write: which columns of each data strip it covers. */
struct full_write {
	uint64_t full;
	uint64_t a[UB_RAID_MAX_STRIPES], b[UB_RAID_MAX_STRIPES]; /* data strip i covers [a, b); a == b: not at all */
	uint64_t lo, hi;  /* the columns whose parity changes */
};

static void full_write_plan(const struct ub_chunk *c, uint64_t full, uint64_t off, uint64_t end,
			    struct full_write *fw)
{
	const int nd = c->num_stripes - c->profile->nparity;
	const uint64_t slen = c->stripe_len;

	fw->full = full;
	fw->lo = slen;
	fw->hi = 0;
	for (int i = 0; i < nd; i++) {
		uint64_t s0 = (full * (uint64_t)nd + (uint64_t)i) * slen, s1 = s0 + slen;
		uint64_t x0 = off > s0 ? off : s0, x1 = end < s1 ? end : s1;

		if (x0 >= x1) {
			fw->a[i] = fw->b[i] = 0;
			continue;
		}
		fw->a[i] = x0 - s0;
		fw->b[i] = x1 - s0;
		if (fw->a[i] < fw->lo)
			fw->lo = fw->a[i];
		if (fw->b[i] > fw->hi)
			fw->hi = fw->b[i];
	}
}

static uint64_t slot_phys(const struct ub_chunk *c, uint64_t full, int slot)
{
	return c->stripes[slot_stripe(c, full, slot)].physical + full * c->stripe_len;
}

static int full_write_check(struct ub_volume *vol, const struct ub_chunk *c, const struct full_write *fw)
{
	const int total = c->num_stripes, nd = total - c->profile->nparity;

	for (int i = 0; i < total; i++) {
		int st = slot_stripe(c, fw->full, i);
		uint64_t a = i < nd ? fw->a[i] : fw->lo, b = i < nd ? fw->b[i] : fw->hi;
		int ret;

		if (a == b || !c->stripes[st].dev)
			continue;
		ret = phys_check(vol, c, st, slot_phys(c, fw->full, i) + a, b - a);
		if (ret)
			return ret;
	}
	return 0;
}

static int slot_read(const struct ub_chunk *c, const struct full_write *fw, int slot, uint8_t *out)
{
	const struct ub_stripe *s = &c->stripes[slot_stripe(c, fw->full, slot)];

	return ub_dev_read(s->dev->dev, out, fw->hi - fw->lo, slot_phys(c, fw->full, slot) + fw->lo);
}

/*
 * Read-modify-write of one full stripe over the columns [lo, hi) the write
 * changes: the old contents of data strips the write covers only in part come
 * from disk (rebuilt from parity when their device is missing or fails the
 * read), the new data goes over them, P (and Q) are computed from the result,
 * then the changed data and the parity are written.
 */
static int full_write_do(struct ub_volume *vol, const struct ub_chunk *c, const struct full_write *fw,
			 const uint8_t *src /* the write's bytes for chunk offset 0 */)
{
	const int total = c->num_stripes, np = c->profile->nparity, nd = total - np;
	const uint64_t width = fw->hi - fw->lo, stride = (width + 63) & ~63ULL;
	bool lost[UB_RAID_MAX_STRIPES] = { false }, have[UB_RAID_MAX_STRIPES] = { false };
	bool rebuild = false;
	uint8_t *bufs, *strips[UB_RAID_MAX_STRIPES];
	int ret = 0, nlost = 0;

	/* ISA-L's vector code wants its buffers 32-byte aligned */
	bufs = aligned_alloc(64, (size_t)stride * (size_t)total);
	if (!bufs)
		return -ENOMEM;
	for (int i = 0; i < total; i++) {
		strips[i] = bufs + (size_t)i * stride;
		lost[i] = !c->stripes[slot_stripe(c, fw->full, i)].dev;
	}
	for (int i = 0; i < nd; i++) {
		if (fw->a[i] <= fw->lo && fw->b[i] >= fw->hi)
			continue; /* fully overwritten: its old bytes do not matter */
		if (!lost[i] && slot_read(c, fw, i, strips[i]) == 0)
			have[i] = true;
		else
			lost[i] = true;
		rebuild |= lost[i];
	}
	if (rebuild) {
		for (int i = 0; i < total; i++) {
			if (lost[i] || have[i])
				continue;
			if (slot_read(c, fw, i, strips[i]) == 0)
				have[i] = true;
			else
				lost[i] = true;
		}
		for (int i = 0; i < total; i++)
			nlost += lost[i];
		if (nlost > np) {
			ub_err(&vol->log,
			       "%s chunk at logical %llu, full stripe %llu: %d of %d strips unreadable, the old data the "
			       "write does not cover cannot be rebuilt",
			       c->profile->name, (unsigned long long)c->logical, (unsigned long long)fw->full, nlost,
			       total);
			ret = -EIO;
			goto out;
		}
		ret = ub_raid_recover(nd, np, strips, lost, width);
		if (ret)
			goto out;
	}
	for (int i = 0; i < nd; i++) {
		uint64_t loff = (fw->full * (uint64_t)nd + (uint64_t)i) * c->stripe_len + fw->a[i];
		if (fw->a[i] < fw->b[i])
			memcpy(strips[i] + (fw->a[i] - fw->lo), src + loff, fw->b[i] - fw->a[i]);
	}
	ret = ub_raid_gen_parity(nd, np, strips, width);
	if (ret)
		goto out;
	for (int i = 0; i < total; i++) {
		int st = slot_stripe(c, fw->full, i);
		uint64_t a = i < nd ? fw->a[i] : fw->lo, b = i < nd ? fw->b[i] : fw->hi;

		if (a == b)
			continue;
		if (!c->stripes[st].dev) {
			vol->writes_skipped++;
			continue;
		}
		ret = dev_write(vol, c, st, strips[i] + (a - fw->lo), b - a, slot_phys(c, fw->full, i) + a);
		if (ret)
			goto out;
	}
out:
	free(bufs);
	return ret;
}

static int write_raid56(struct ub_volume *vol, const struct ub_chunk *c, uint64_t logical, uint64_t len,
			const uint8_t *buf)
{
	const int total = c->num_stripes, np = c->profile->nparity, nd = total - np;
	const uint64_t fsz = (uint64_t)nd * c->stripe_len;
	const uint64_t off = logical - c->logical, end = off + len;
	struct full_write fw;
	int missing = 0, ret;

	if (total > UB_RAID_MAX_STRIPES)
		return -EUCLEAN;
	for (int i = 0; i < total; i++)
		missing += !c->stripes[i].dev;
	if (missing > np) {
		ub_err(&vol->log, "write at logical %llu: %s chunk at %llu has %d of %d devices missing",
		       (unsigned long long)logical, c->profile->name, (unsigned long long)c->logical, missing, total);
		return -EIO;
	}
	for (uint64_t f = off / fsz; f * fsz < end; f++) {
		full_write_plan(c, f, off, end, &fw);
		ret = full_write_check(vol, c, &fw);
		if (ret)
			return ret;
	}
	for (uint64_t f = off / fsz; f * fsz < end; f++) {
		full_write_plan(c, f, off, end, &fw);
		ret = full_write_do(vol, c, &fw, buf - off);
		if (ret)
			return ret;
	}
	return 0;
}

int ub_volume_write(struct ub_volume *vol, uint64_t logical, uint64_t len, const void *buf)
{
	const struct ub_chunk *c;
	int ret = write_gate(vol);

	if (ret)
		return ret;
	if (len == 0)
		return 0;
	c = ub_volume_find_chunk(vol, logical);
	if (!c) {
		ub_err(&vol->log, "write at logical %llu: no chunk maps it", (unsigned long long)logical);
		return -ENOENT;
	}
	if (len > c->length - (logical - c->logical)) {
		ub_err(&vol->log, "write of %llu bytes at logical %llu crosses the end of the chunk at %llu (%llu bytes)",
		       (unsigned long long)len, (unsigned long long)logical, (unsigned long long)c->logical,
		       (unsigned long long)c->length);
		return -EINVAL;
	}
	if (c->profile->nparity)
		return write_raid56(vol, c, logical, len, buf);
	return write_copies(vol, c, logical, len, buf);
}

int ub_volume_flush(struct ub_volume *vol)
{
	int ret = write_gate(vol), first = 0;

	if (ret)
		return ret;
	for (int i = 0; i < vol->nvdevs; i++) {
		struct ub_vdev *v = &vol->vdevs[i];
		if (!v->dev)
			continue;
		ret = ub_dev_flush(v->dev);
		if (ret) {
			ub_err(&vol->log, "flush of devid %llu (%s) failed: %s; no more writes",
			       (unsigned long long)v->devid, v->dev->path, strerror(-ret));
			sticky(vol, ret);
			if (!first)
				first = ret;
		}
	}
	return first;
}

int ub_volume_write_supers(struct ub_volume *vol, const uint8_t *sb)
{
	uint8_t copy[UB_SUPER_INFO_SIZE];
	unsigned csum_type = (unsigned)UB_GET(ub_disk_super, csum_type, sb);
	int ret, written = 0;

	if (!ub_csum_size(csum_type)) {
		ub_err(&vol->log, "superblock to write has unknown checksum type %u", csum_type);
		return -EINVAL;
	}
	/* what the superblock points at must be on disk before the superblock is */
	ret = ub_volume_flush(vol);
	if (ret)
		return ret;
	for (int i = 0; i < vol->nvdevs; i++) {
		struct ub_vdev *v = &vol->vdevs[i];
		uint8_t *di = copy + offsetof(struct ub_disk_super, dev_item);
		uint64_t limit;

		if (!v->dev)
			continue;
		limit = v->dev->size;
		if (v->total_bytes && v->total_bytes < limit)
			limit = v->total_bytes;
		memcpy(copy, sb, sizeof(copy));
		memcpy(di, v->item, sizeof(v->item));
		UB_SET(btrfs_dev_item, devid, di, v->devid);
		memcpy(di + offsetof(struct btrfs_dev_item, uuid), v->uuid, UB_UUID_SIZE);
		UB_SET(btrfs_dev_item, generation, di, 0);
		memcpy(di + offsetof(struct btrfs_dev_item, fsid), vol->metadata_uuid, UB_FSID_SIZE);
		UB_SET(ub_disk_super, flags, copy, UB_GET(ub_disk_super, flags, copy) | BTRFS_HEADER_FLAG_WRITTEN);
		for (int m = 0; m < UB_SUPER_MIRROR_MAX; m++) {
			uint64_t off = ub_super_offset(m);
			uint8_t csum[UB_CSUM_SIZE_MAX];

			if (off + UB_SUPER_INFO_SIZE > limit)
				break;
			UB_SET(ub_disk_super, bytenr, copy, off);
			ret = ub_csum(csum_type, copy + UB_CSUM_SIZE_MAX, UB_SUPER_INFO_SIZE - UB_CSUM_SIZE_MAX, csum);
			if (ret)
				return ret;
			memcpy(copy, csum, UB_CSUM_SIZE_MAX);
			ret = ub_dev_write(v->dev, copy, UB_SUPER_INFO_SIZE, off);
			if (ret) {
				ub_err(&vol->log, "superblock mirror %d of devid %llu (%s) failed to write: %s",
				       m, (unsigned long long)v->devid, v->dev->path, strerror(-ret));
				return sticky(vol, ret);
			}
			written++;
		}
	}
	if (!written) {
		ub_err(&vol->log, "no device to write the superblock to");
		return -EIO;
	}
	ret = ub_volume_flush(vol);
	if (ret)
		return ret;
	memcpy(vol->super, sb, UB_SUPER_INFO_SIZE);
	vol->generation = UB_GET(ub_disk_super, generation, sb);
	return 0;
}
