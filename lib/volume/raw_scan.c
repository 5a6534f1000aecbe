/* SPDX-License-Identifier: MIT */
/*
 * Tree blocks found on the devices themselves, without the chunk map: the last
 * resort when no leaf of the chunk tree survives, so no logical address can be
 * mapped. A block is recognised by its header (this filesystem's metadata
 * uuid), then kept only if its checksum over the whole node matches; what it
 * says is the caller's to check. Blocks never cross a stripe, so each is
 * contiguous on one device.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "volume_internal.h"

#define WINDOW (8U << 20)
#define FIRST_CHUNK_BYTE (1ULL << 20) /* the first MiB of a device holds no chunk */

static int scan_dev(struct ub_volume *vol, const struct ub_vdev *vd, const struct ub_raw_scan_ops *ops, uint8_t *buf,
		    uint64_t *done, uint64_t total)
{
	uint64_t size = ub_dev_size(vd->dev);
	uint32_t ns = vol->nodesize;

	for (uint64_t pos = FIRST_CHUNK_BYTE; pos + ns <= size; pos += WINDOW) {
		size_t len = size - pos < WINDOW + ns ? (size_t)(size - pos) : WINDOW + ns;
		int ret = ub_dev_read(vd->dev, buf, len, pos);

		*done += len < WINDOW ? len : WINDOW;
		if (ops->progress)
			ops->progress(ops->progress_arg, *done, total);
		if (ret) {
			ub_warn(&vol->log, "raw scan: devid %llu: read of %zu bytes at physical %llu failed: %s; skipped",
				(unsigned long long)vd->devid, len, (unsigned long long)pos, strerror(-ret));
			continue;
		}
		/* blocks starting in this window; the next window reads the ns bytes after it again */
		for (size_t off = 0; off + ns <= len && off < WINDOW; off += vol->sectorsize) {
			const uint8_t *h = buf + off;
			uint8_t csum[UB_CSUM_SIZE_MAX];

			if (memcmp(UB_PTR(ub_disk_header, fsid, h), vol->metadata_uuid, UB_FSID_SIZE))
				continue;
			if (ops->want && !ops->want(ops->arg, h))
				continue;
			if (ub_csum(vol->csum_type, h + UB_CSUM_SIZE_MAX, ns - UB_CSUM_SIZE_MAX, csum) < 0 ||
			    memcmp(csum, h, vol->csum_size))
				continue;
			ret = ops->found(ops->arg, vd->devid, pos + off, h);
			if (ret)
				return ret;
		}
	}
	return 0;
}

int ub_volume_scan_raw(struct ub_volume *vol, const struct ub_raw_scan_ops *ops)
{
	uint8_t *buf = malloc(WINDOW + vol->nodesize);
	uint64_t done = 0, total = 0;
	int ret = 0;

	if (!buf)
		return -ENOMEM;
	for (int i = 0; i < vol->nvdevs; i++)
		if (vol->vdevs[i].dev)
			total += ub_dev_size(vol->vdevs[i].dev);
	for (int i = 0; i < vol->nvdevs && !ret; i++)
		if (vol->vdevs[i].dev)
			ret = scan_dev(vol, &vol->vdevs[i], ops, buf, &done, total);
	if (ops->progress)
		ops->progress(ops->progress_arg, total, total);
	free(buf);
	return ret;
}

int ub_volume_read_raw(struct ub_volume *vol, uint64_t devid, void *buf, size_t len, uint64_t physical)
{
	struct ub_vdev *vd = ub_volume_vdev(vol, devid);

	if (!vd || !vd->dev)
		return -ENXIO;
	return ub_vdev_read(vd, buf, len, physical);
}
