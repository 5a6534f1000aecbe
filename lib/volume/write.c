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
	return __atomic_load_n(&vol->write_error, __ATOMIC_ACQUIRE);
}

/* A device refused a write or flush: from now on nothing more may reach the disks (the committer and a writer may both see one). */
static int sticky(struct ub_volume *vol, int err)
{
	int none = 0;

	__atomic_compare_exchange_n(&vol->write_error, &none, err, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
	return err;
}

static int write_gate(const struct ub_volume *vol)
{
	return ub_volume_write_error(vol) || !vol->writable ? -EROFS : 0;
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
int ub_vol_phys_check(struct ub_volume *vol, const struct ub_chunk *c, int stripe, uint64_t phys, uint64_t len)
{
	const struct ub_stripe *s = &c->stripes[stripe];
	uint64_t end = phys + len, limit = s->dev->dev->size;
	uint64_t total = __atomic_load_n(&s->dev->total_bytes, __ATOMIC_RELAXED);

	if (total && total < limit)
		limit = total;
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

int ub_vol_dev_write(struct ub_volume *vol, const struct ub_chunk *c, int stripe, const void *buf, uint64_t len,
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

int ub_vol_dev_writev(struct ub_volume *vol, const struct ub_chunk *c, int stripe, const struct iovec *iov, int iovcnt,
		      uint64_t phys)
{
	const struct ub_stripe *s = &c->stripes[stripe];
	int ret = ub_dev_writev(s->dev->dev, iov, iovcnt, phys);

	if (ret) {
		uint64_t len = 0;

		for (int i = 0; i < iovcnt; i++)
			len += iov[i].iov_len;
		ub_err(&vol->log, "write of %llu bytes at physical %llu on devid %llu (%s) failed: %s; no more writes",
		       (unsigned long long)len, (unsigned long long)phys, (unsigned long long)s->devid, vdev_path(s),
		       strerror(-ret));
		return sticky(vol, ret);
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
	return c->profile->layout->write(vol, c, logical, len, buf);
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

/* One device's superblock as a commit leaves it (its own dev item), mirrors not filled in yet. */
struct ub_super_image {
	struct ub_vdev *v;
	uint64_t limit;
	uint8_t sb[UB_SUPER_INFO_SIZE];
};

struct ub_super_images {
	int n;
	struct ub_super_image im[];
};

int ub_volume_super_images(struct ub_volume *vol, const uint8_t *sb, struct ub_super_images **out)
{
	unsigned csum_type = (unsigned)UB_GET(ub_disk_super, csum_type, sb);
	struct ub_super_images *ims;

	if (!ub_csum_size(csum_type)) {
		ub_err(&vol->log, "superblock to write has unknown checksum type %u", csum_type);
		return -EINVAL;
	}
	ims = calloc(1, sizeof(*ims) + (size_t)vol->nvdevs * sizeof(ims->im[0]));
	if (!ims)
		return -ENOMEM;
	for (int i = 0; i < vol->nvdevs; i++) {
		struct ub_vdev *v = &vol->vdevs[i];
		struct ub_super_image *im = &ims->im[ims->n];
		uint8_t *di = im->sb + offsetof(struct ub_disk_super, dev_item);

		if (!v->dev)
			continue;
		im->v = v;
		im->limit = v->dev->size;
		if (v->total_bytes && v->total_bytes < im->limit)
			im->limit = v->total_bytes;
		memcpy(im->sb, sb, UB_SUPER_INFO_SIZE);
		memcpy(di, v->item, sizeof(v->item));
		UB_SET(btrfs_dev_item, devid, di, v->devid);
		memcpy(di + offsetof(struct btrfs_dev_item, uuid), v->uuid, UB_UUID_SIZE);
		UB_SET(btrfs_dev_item, generation, di, 0);
		memcpy(di + offsetof(struct btrfs_dev_item, fsid), vol->metadata_uuid, UB_FSID_SIZE);
		UB_SET(ub_disk_super, flags, im->sb, UB_GET(ub_disk_super, flags, im->sb) | BTRFS_HEADER_FLAG_WRITTEN);
		ims->n++;
	}
	*out = ims;
	return 0;
}

void ub_super_images_free(struct ub_super_images *ims)
{
	free(ims);
}

/* Which copies a writing of superblock images covers: all up to `mirrors`, or those `want` picks. */
struct super_pick {
	int mirrors;
	bool (*want)(void *arg, uint64_t devid, int mirror);
	void *arg;
	int *written;
};

static int write_super_images(struct ub_volume *vol, struct ub_super_images *ims, const struct super_pick *pick)
{
	int ret, written = 0;

	/* what the superblock points at must be on disk before the superblock is */
	ret = ub_volume_flush(vol);
	if (ret)
		return ret;
	for (int i = 0; i < ims->n; i++) {
		struct ub_super_image *im = &ims->im[i];
		unsigned csum_type = (unsigned)UB_GET(ub_disk_super, csum_type, im->sb);

		for (int m = 0; m < pick->mirrors; m++) {
			uint64_t off = ub_super_offset(m);
			uint8_t csum[UB_CSUM_SIZE_MAX];

			if (off + UB_SUPER_INFO_SIZE > im->limit)
				break;
			if (pick->want && !pick->want(pick->arg, im->v->devid, m))
				continue;
			UB_SET(ub_disk_super, bytenr, im->sb, off);
			ret = ub_csum(csum_type, im->sb + UB_CSUM_SIZE_MAX, UB_SUPER_INFO_SIZE - UB_CSUM_SIZE_MAX, csum);
			if (ret)
				return ret;
			memcpy(im->sb, csum, UB_CSUM_SIZE_MAX);
			ret = ub_dev_write(im->v->dev, im->sb, UB_SUPER_INFO_SIZE, off);
			if (ret) {
				ub_err(&vol->log, "superblock mirror %d of devid %llu (%s) failed to write: %s",
				       m, (unsigned long long)im->v->devid, im->v->dev->path, strerror(-ret));
				return sticky(vol, ret);
			}
			written++;
		}
	}
	if (pick->written)
		*pick->written = written;
	if (!written && !pick->want) {
		ub_err(&vol->log, "no device to write the superblock to");
		return -EIO;
	}
	ret = ub_volume_flush(vol);
	if (!ret && ims->n && !pick->want)
		__atomic_store_n(&vol->generation, UB_GET(ub_disk_super, generation, ims->im[0].sb), __ATOMIC_RELEASE);
	return ret;
}

int ub_volume_write_super_images(struct ub_volume *vol, struct ub_super_images *ims)
{
	const struct super_pick all = { .mirrors = UB_SUPER_MIRROR_MAX };

	return write_super_images(vol, ims, &all);
}

int ub_volume_write_super_images_primary(struct ub_volume *vol, struct ub_super_images *ims)
{
	const struct super_pick primary = { .mirrors = 1 };

	return write_super_images(vol, ims, &primary);
}

int ub_volume_write_super_copies(struct ub_volume *vol, const uint8_t *sb,
				 bool (*want)(void *arg, uint64_t devid, int mirror), void *arg, int *written)
{
	const struct super_pick pick = { UB_SUPER_MIRROR_MAX, want, arg, written };
	struct ub_super_images *ims = NULL;
	int ret;

	if (!want)
		return -EINVAL;
	ret = ub_volume_super_images(vol, sb, &ims);
	if (!ret)
		ret = write_super_images(vol, ims, &pick);
	ub_super_images_free(ims);
	return ret;
}

int ub_volume_write_supers(struct ub_volume *vol, const uint8_t *sb)
{
	struct ub_super_images *ims = NULL;
	int ret = ub_volume_super_images(vol, sb, &ims);

	if (!ret)
		ret = ub_volume_write_super_images(vol, ims);
	ub_super_images_free(ims);
	if (!ret)
		memcpy(vol->super, sb, UB_SUPER_INFO_SIZE);
	return ret;
}
