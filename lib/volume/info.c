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
	out->ndevices = vol->nvdevs;
	for (int i = 0; i < vol->nvdevs; i++)
		out->nmissing += vol->vdevs[i].missing || !vol->vdevs[i].dev;
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
	struct ub_device_info *d = calloc((size_t)(vol->nvdevs ? vol->nvdevs : 1), sizeof(*d));

	if (!d)
		return -ENOMEM;
	for (int i = 0; i < vol->nvdevs; i++) {
		const struct ub_vdev *v = &vol->vdevs[i];
		d[i].devid = v->devid;
		memcpy(d[i].uuid, v->uuid, UB_UUID_SIZE);
		d[i].total_bytes = v->total_bytes;
		d[i].missing = v->missing || !v->dev;
		d[i].path = v->dev && !v->missing ? v->dev->path : NULL;
	}
	/* the volume keeps them in the order they were found */
	qsort(d, (size_t)vol->nvdevs, sizeof(*d), by_devid);
	*out = d;
	*n = vol->nvdevs;
	return 0;
}
