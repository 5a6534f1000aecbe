/* SPDX-License-Identifier: MIT */
/*
 * Repair of generations from the future: an inode item's generation or transid
 * (an extent item's generation is extents.c's, with its other field). The kernel's tree checker refuses such an inode
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
