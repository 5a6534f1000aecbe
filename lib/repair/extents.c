/* SPDX-License-Identifier: MIT */
/*
 * Repair of the extent tree's counts: an extent item's refs set to the number
 * of references the check counted (the pointers that reach a tree block, the
 * file extent items that point at data). Fewer than the truth would let a
 * later drop free a block still in use; the check's count is the truth once
 * every tree was walked, which is when the checker offers this cure.
 */
#include <errno.h>
#include <string.h>
#include "repair/repair_priv.h"

int rp_fix_extent_refs(struct rp_ctx *c, const struct rp_note *n)
{
	struct ub_root *root = &c->e->fs.extent_tree->root;
	struct ub_path p;
	uint64_t was = 0;
	uint32_t size;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_search_slot(&c->e->fs.tc, ub_txn_ta(c->t), root, &n->key, &p, 0, true);
	if (ret > 0)
		ret = -ENOENT;
	if (ret == 0) {
		uint8_t *d = ub_path_data_mut(&p, &size);

		if (!d || size < sizeof(struct btrfs_extent_item)) {
			ret = -EUCLEAN;
		} else {
			was = UB_GET(btrfs_extent_item, refs, d);
			UB_SET(btrfs_extent_item, refs, d, n->want);
			ub_path_mark_dirty(&p);
		}
	}
	ub_path_release(&p);
	if (ret) {
		ub_err(c->log, "repair: the extent item (%llu %u %llu) cannot be changed: %s",
		       (unsigned long long)n->key.objectid, n->key.type, (unsigned long long)n->key.offset, strerror(-ret));
		return ret;
	}
	if (was != n->want)
		rp_say(c, n, was, "extent %llu (%s): references %llu -> %llu", (unsigned long long)n->key.objectid,
		       n->key.type == BTRFS_METADATA_ITEM_KEY ? "tree block" : "extent item", (unsigned long long)was,
		       (unsigned long long)n->want);
	return 0;
}
