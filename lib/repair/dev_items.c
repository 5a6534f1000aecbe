/* SPDX-License-Identifier: MIT */
/* Repair of the device items: a device's bytes_used, the sum of its device extents. */
#include <errno.h>
#include <string.h>
#include "fsw/fsw.h"
#include "repair/repair_priv.h"

struct dev_used {
	uint64_t want, was;
};

static void set_used(uint8_t *item, uint64_t arg)
{
	struct dev_used *u = (struct dev_used *)(uintptr_t)arg;

	u->was = UB_GET(btrfs_dev_item, bytes_used, item);
	UB_SET(btrfs_dev_item, bytes_used, item, u->want);
}

int rp_fix_dev_used(struct rp_ctx *c, const struct rp_note *n)
{
	struct dev_used u = { n->want, 0 };
	/* the chunk tree's item and the volume's copy (what the superblocks' dev_item say at the commit) */
	int ret = fsw_update_dev_item(c->t, n->devid, set_used, (uint64_t)(uintptr_t)&u);

	if (ret) {
		ub_err(c->log, "repair: the DEV_ITEM of devid %llu cannot be changed: %s", (unsigned long long)n->devid,
		       ret == -ENOENT ? "the chunk tree has none" : strerror(-ret));
		return ret;
	}
	if (u.was != n->want)
		rp_say(c, n, u.was, "devid %llu: bytes_used %llu -> %llu (its device extents)",
		       (unsigned long long)n->devid, (unsigned long long)u.was, (unsigned long long)n->want);
	return 0;
}

int rp_fix_num_devices(struct rp_ctx *c, const struct rp_note *n)
{
	struct ub_volume *vol = c->e->fs.vol;
	uint64_t was = UB_GET(ub_disk_super, num_devices, vol->super);

	if (!n->want || n->want != (uint64_t)vol->nvdevs) {
		ub_err(c->log, "repair: num_devices %llu is not the %d devices the volume holds: left",
		       (unsigned long long)n->want, vol->nvdevs);
		return 0;
	}
	/* the commit writes every device's superblock from this one */
	vol->num_devices = n->want;
	UB_SET(ub_disk_super, num_devices, vol->super, n->want);
	/*
	 * A commit that changed no tree writes nothing (the last commit stays the
	 * truth): the root tree's path is copied, so the superblocks are written.
	 */
	{
		struct ub_key key = { 0, 0, 0 };
		struct ub_path p;
		int ret;

		ub_path_init(&p);
		ret = ub_tree_search_slot(&c->e->fs.tc, ub_txn_ta(c->t), &c->e->fs.root_tree->root, &key, &p, 0, true);
		ub_path_release(&p);
		if (ret < 0)
			return ret;
	}
	if (was != n->want)
		rp_say(c, n, was, "the superblocks' num_devices %llu -> %llu (the chunk tree's device items)",
		       (unsigned long long)was, (unsigned long long)n->want);
	return 0;
}
