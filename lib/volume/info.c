/* SPDX-License-Identifier: MIT */
/* Copies of what a volume knows about itself and its devices, for tools. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "ubtrfs/devinfo.h"
#include "volume/volume_priv.h"

int ub_volume_get_info(const struct ub_volume *vol, struct ub_volume_info *out)
{
	memset(out, 0, sizeof(*out));
	memcpy(out->label, UB_PTR(ub_disk_super, label, vol->super), UB_LABEL_SIZE);
	memcpy(out->fsid, vol->fsid, UB_FSID_SIZE);
	out->generation = vol->generation;
	out->num_devices = vol->num_devices;
	out->bytes_used = UB_GET(ub_disk_super, bytes_used, vol->super);
	int nv = __atomic_load_n(&vol->nvdevs, __ATOMIC_ACQUIRE);

	out->ndevices = 0;
	for (int i = 0; i < nv; i++) {
		if (!vol->vdevs[i].devid)
			continue; /* a removed device's tombstone */
		out->ndevices++;
		out->nmissing += vol->vdevs[i].missing || !vol->vdevs[i].dev;
	}
	out->sectorsize = vol->sectorsize;
	out->nodesize = vol->nodesize;
	out->csum_type = vol->csum_type;
	out->csum_size = vol->csum_size;
	return 0;
}

const uint8_t *ub_volume_super(const struct ub_volume *vol)
{
	return vol->super;
}

static int by_devid(const void *a, const void *b)
{
	const struct ub_device_info *x = a, *y = b;

	return x->devid < y->devid ? -1 : x->devid > y->devid;
}

int ub_volume_list_devices(const struct ub_volume *vol, struct ub_device_info **out, int *n)
{
	/* a hostile chunk tree may name many devices: the count comes from the volume, not a constant */
	int nv = __atomic_load_n(&vol->nvdevs, __ATOMIC_ACQUIRE), k = 0;
	struct ub_device_info *d = calloc((size_t)(nv ? nv : 1), sizeof(*d));

	if (!d)
		return -ENOMEM;
	for (int i = 0; i < nv; i++) {
		const struct ub_vdev *v = &vol->vdevs[i];
		struct ub_dev *dev = __atomic_load_n(&v->dev, __ATOMIC_ACQUIRE);

		if (!v->devid)
			continue; /* a removed device's tombstone */
		d[k].devid = v->devid;
		memcpy(d[k].uuid, v->uuid, UB_UUID_SIZE);
		d[k].total_bytes = v->total_bytes;
		d[k].missing = v->missing || !dev;
		d[k].path = dev && !v->missing ? dev->path : NULL;
		k++;
	}
	/* the volume keeps them in the order they were found */
	qsort(d, (size_t)k, sizeof(*d), by_devid);
	*out = d;
	*n = k;
	return 0;
}
