/* SPDX-License-Identifier: MIT */
/*
 * THROWAWAY: ub_volume_write_supers until wt-volwrite's lib/volume has it
 * (weak, so the real one wins at link time). Delete this file once merged.
 * Every present device gets the superblock at every mirror offset that fits
 * it, with its own dev item (from its current primary superblock), its
 * bytenr, the WRITTEN flag and a fresh checksum; flushes before and after.
 */
#include <errno.h>
#include <stdlib.h>
#include "txn/txn.h"

static int flush_all(struct ub_volume *vol)
{
	for (int i = 0; i < vol->nvdevs; i++) {
		if (vol->vdevs[i].dev) {
			int ret = ub_dev_flush(vol->vdevs[i].dev);
			if (ret)
				return ret;
		}
	}
	return 0;
}

__attribute__((weak)) int ub_volume_write_supers(struct ub_volume *vol, const uint8_t *sb)
{
	uint8_t *buf = malloc(UB_SUPER_INFO_SIZE), *own = malloc(UB_SUPER_INFO_SIZE);
	const size_t di = offsetof(struct ub_disk_super, dev_item);
	int ret = buf && own ? flush_all(vol) : -ENOMEM;

	for (int i = 0; i < vol->nvdevs && !ret; i++) {
		struct ub_dev *dev = vol->vdevs[i].dev;

		if (!dev)
			continue;
		ret = ub_dev_read(dev, own, UB_SUPER_INFO_SIZE, ub_super_offset(0));
		if (ret)
			break;
		memcpy(buf, sb, UB_SUPER_INFO_SIZE);
		memcpy(buf + di, own + di, sizeof(struct btrfs_dev_item));
		UB_SET(ub_disk_super, flags, buf, UB_GET(ub_disk_super, flags, buf) | 1ULL);
		for (int m = 0; m < UB_SUPER_MIRROR_MAX && !ret; m++) {
			uint64_t off = ub_super_offset(m);
			uint8_t csum[UB_CSUM_SIZE_MAX];

			if (off + UB_SUPER_INFO_SIZE > dev->size)
				break;
			UB_SET(ub_disk_super, bytenr, buf, off);
			ret = ub_csum(vol->csum_type, buf + UB_CSUM_SIZE_MAX, UB_SUPER_INFO_SIZE - UB_CSUM_SIZE_MAX, csum);
			if (!ret) {
				memcpy(buf, csum, UB_CSUM_SIZE_MAX);
				ret = ub_dev_write(dev, buf, UB_SUPER_INFO_SIZE, off);
			}
		}
	}
	if (!ret)
		ret = flush_all(vol);
	if (!ret) {
		memcpy(vol->super, sb, UB_SUPER_INFO_SIZE);
		vol->generation = UB_GET(ub_disk_super, generation, sb);
	}
	free(buf);
	free(own);
	return ret;
}
