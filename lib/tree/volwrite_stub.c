/* SPDX-License-Identifier: MIT */
/*
 * THROWAWAY: ub_volume_write until wt-volwrite's lib/volume has it (weak, so
 * the real one wins). Mirrored profiles only (single, DUP, RAID1*, RAID10,
 * RAID0); parity profiles are refused. Delete this file once merged.
 */
#include <errno.h>
#include "ubtrfs/volume.h"
#include "tree/tree_write.h"

__attribute__((weak)) int ub_volume_write(struct ub_volume *vol, uint64_t logical, uint64_t len, const void *buf)
{
	const struct ub_chunk *c = ub_volume_find_chunk(vol, logical);
	int copies;

	if (!c || logical + len > c->logical + c->length)
		return -ENOENT;
	if (c->profile->nparity)
		return -EOPNOTSUPP;
	copies = ub_volume_num_copies(vol, logical);
	for (int m = 1; m <= copies; m++) {
		uint64_t devid, physical;
		const char *path;
		int ret = ub_volume_map(vol, logical, m, &devid, &physical, &path);
		struct ub_dev *dev = NULL;

		if (ret)
			return ret;
		for (int i = 0; i < vol->nvdevs; i++)
			if (vol->vdevs[i].devid == devid)
				dev = vol->vdevs[i].dev;
		if (!dev)
			return -ENXIO;
		ret = ub_dev_write(dev, buf, (size_t)len, physical);
		if (ret)
			return ret;
	}
	return 0;
}
