/* SPDX-License-Identifier: MIT */
/*
 * Repair of generations from the future: an inode item's generation or transid,
 * an extent item's generation. The kernel's tree checker refuses such an inode
 * item (and with it its leaf) and its writes trust these numbers, so they are
 * set to values the filesystem can have: an inode's both to the repair's
 * transaction (btrfs check --repair sets the same), an extent item's to what
 * the checker says (a tree block's header generation; for data the last
 * commit's, as no item records the transaction that wrote it).
 */
#include <errno.h>
#include <string.h>
#include "fsw/fsw.h"
#include "repair/repair_priv.h"

int rp_fix_inode_gen(struct rp_ctx *c, const struct rp_note *n)
{
	uint8_t ii[UB_II_SIZE];
	uint64_t gen, transid;
	struct fsw w;
	int ret = fsw_init_ro(&w, c->t, n->tree);

	if (!ret)
		ret = fsw_inode_get(&w, n->inode, ii);
	if (ret) {
		ub_err(c->log, "repair: inode %llu of tree %llu cannot be read for its generation: %s",
		       (unsigned long long)n->inode, (unsigned long long)n->tree, strerror(-ret));
		return ret;
	}
	gen = UB_GET(btrfs_inode_item, generation, ii);
	transid = UB_GET(btrfs_inode_item, transid, ii);
	/* the check's limit is the next transaction's: this one */
	if (gen <= c->t->transid && transid <= c->t->transid)
		return 0;
	UB_SET(btrfs_inode_item, generation, ii, c->t->transid);
	UB_SET(btrfs_inode_item, transid, ii, c->t->transid);
	ret = fsw_inode_put(&w, n->inode, ii);
	if (ret)
		return ret;
	rp_say(c, n, gen, "inode %llu of tree %llu: generation %llu -> %llu, transid %llu -> %llu",
	       (unsigned long long)n->inode, (unsigned long long)n->tree, (unsigned long long)gen,
	       (unsigned long long)c->t->transid, (unsigned long long)transid, (unsigned long long)c->t->transid);
	return 0;
}

int rp_fix_extent_gen(struct rp_ctx *c, const struct rp_note *n)
{
	struct ub_root *root = &c->e->fs.extent_tree->root;
	struct ub_path p;
	uint64_t was = 0;
	uint32_t size;
	int ret;

	if (!n->want)
		return -EINVAL;
	ub_path_init(&p);
	ret = ub_tree_search_slot(&c->e->fs.tc, ub_txn_ta(c->t), root, &n->key, &p, 0, true);
	if (ret > 0)
		ret = -ENOENT;
	if (ret == 0) {
		uint8_t *d = ub_path_data_mut(&p, &size);

		if (!d || size < sizeof(struct btrfs_extent_item)) {
			ret = -EUCLEAN;
		} else {
			was = UB_GET(btrfs_extent_item, generation, d);
			UB_SET(btrfs_extent_item, generation, d, n->want);
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
		rp_say(c, n, was, "extent %llu: generation %llu -> %llu", (unsigned long long)n->key.objectid,
		       (unsigned long long)was, (unsigned long long)n->want);
	return 0;
}
