/* SPDX-License-Identifier: MIT */
/*
 * Repair of the quota tree's counts: a qgroup's referenced and exclusive bytes
 * set to what its subvolumes reach, as the check counted them (the checker
 * judges them only when every tree was read whole, quotas are on, consistent,
 * not being rescanned, and no deleted subvolume is half dropped).
 *
 * The write engine keeps no qgroup counts, so it writes to a filesystem with
 * quotas only for this: a repair whose every cure is a qgroup's count
 * (UB_ENGINE_OPEN_QUOTA_COUNTS, repair.c). Such a transaction changes no
 * subvolume tree, so the counts set stay true after its commit; the status
 * item then takes the commit's generation, as the kernel writes it at every
 * commit (a status of another generation makes the kernel's mount call the
 * counts inconsistent). Each changed QGROUP_INFO item takes the generation too.
 */
#include <errno.h>
#include <string.h>
#include "repair/repair_priv.h"

static struct ub_root *quota_root(struct rp_ctx *c)
{
	struct ub_eroot *er;

	return ub_engine_root(c->e, BTRFS_QUOTA_TREE_OBJECTID, &er) ? NULL : &er->root;
}

/* the item at `key` of the quota tree, copied for change: 0, -ENOENT, or <0 */
static int quota_item(struct rp_ctx *c, const struct ub_key *key, uint32_t min, struct ub_path *p, uint8_t **d)
{
	struct ub_root *root = quota_root(c);
	uint32_t size;
	int ret;

	if (!root)
		return -ENOENT;
	ret = ub_tree_search_slot(&c->e->fs.tc, ub_txn_ta(c->t), root, key, p, 0, true);
	if (ret > 0)
		return -ENOENT;
	if (ret)
		return ret;
	*d = ub_path_data_mut(p, &size);
	return !*d || size < min ? -EUCLEAN : 0;
}

int rp_fix_qgroup(struct rp_ctx *c, const struct rp_note *n)
{
	uint64_t transid = c->t->transid, rfer = 0, excl = 0;
	struct ub_path p;
	uint8_t *d;
	int ret;

	ub_path_init(&p);
	ret = quota_item(c, &n->key, sizeof(struct btrfs_qgroup_info_item), &p, &d);
	if (!ret) {
		rfer = UB_GET(btrfs_qgroup_info_item, rfer, d);
		excl = UB_GET(btrfs_qgroup_info_item, excl, d);
		/* compression is not counted apart (the kernel writes the same numbers twice) */
		UB_SET(btrfs_qgroup_info_item, generation, d, transid);
		UB_SET(btrfs_qgroup_info_item, rfer, d, n->want);
		UB_SET(btrfs_qgroup_info_item, rfer_cmpr, d, n->want);
		UB_SET(btrfs_qgroup_info_item, excl, d, n->want2);
		UB_SET(btrfs_qgroup_info_item, excl_cmpr, d, n->want2);
		ub_path_mark_dirty(&p);
	}
	ub_path_release(&p);
	if (ret) {
		ub_err(c->log, "repair: the QGROUP_INFO item of qgroup %llu/%llu cannot be changed: %s",
		       (unsigned long long)(n->key.offset >> 48), (unsigned long long)(n->key.offset & ((1ULL << 48) - 1)),
		       strerror(-ret));
		return ret;
	}
	if (rfer != n->want || excl != n->want2)
		rp_say(c, n, rfer, "qgroup %llu/%llu: referenced %llu -> %llu, exclusive %llu -> %llu bytes",
		       (unsigned long long)(n->key.offset >> 48), (unsigned long long)(n->key.offset & ((1ULL << 48) - 1)),
		       (unsigned long long)rfer, (unsigned long long)n->want, (unsigned long long)excl,
		       (unsigned long long)n->want2);
	return 0;
}

int rp_qgroup_status(struct rp_ctx *c)
{
	const struct ub_key key = { 0, BTRFS_QGROUP_STATUS_KEY, 0 };
	struct ub_path p;
	uint8_t *d;
	int ret;

	ub_path_init(&p);
	ret = quota_item(c, &key, sizeof(struct btrfs_qgroup_status_item), &p, &d);
	if (!ret) {
		UB_SET(btrfs_qgroup_status_item, generation, d, c->t->transid);
		ub_path_mark_dirty(&p);
	}
	ub_path_release(&p);
	if (ret)
		ub_err(c->log, "repair: the quota tree's QGROUP_STATUS item cannot be changed: %s", strerror(-ret));
	return ret;
}
