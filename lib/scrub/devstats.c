/* SPDX-License-Identifier: MIT */
/*
 * Device error counters as the kernel keeps them: one item per device in the
 * device tree, key (DEV_STATS_OBJECTID, PERSISTENT_ITEM, devid), holding the
 * counters as little-endian 64-bit values in the order of enum
 * btrfs_dev_stat_values (write, read, flush, corruption, generation). An item
 * written by an older kernel may hold fewer values (the rest count as 0) and
 * a newer one more (kept as they are). They change in a transaction and
 * reach the disk with its commit, as the kernel writes them at a commit.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "scrub/scrub_priv.h"
#include "txn/txn.h"
#include "ubtrfs/fsinfo.h"
#include "ubtrfs/fswrite.h"

#define ITEM_BYTES ((uint32_t)(UB_DEV_STAT_COUNT * sizeof(uint64_t)))

static const char *const stat_names[UB_DEV_STAT_COUNT] = {
	[BTRFS_DEV_STAT_WRITE_ERRS] = "write_io_errs",     [BTRFS_DEV_STAT_READ_ERRS] = "read_io_errs",
	[BTRFS_DEV_STAT_FLUSH_ERRS] = "flush_io_errs",     [BTRFS_DEV_STAT_CORRUPTION_ERRS] = "corruption_errs",
	[BTRFS_DEV_STAT_GENERATION_ERRS] = "generation_errs",
};

const char *ub_dev_stat_name(int i)
{
	return i >= 0 && i < UB_DEV_STAT_COUNT ? stat_names[i] : NULL;
}

static void stats_from(const uint8_t *d, uint32_t size, uint64_t values[UB_DEV_STAT_COUNT])
{
	for (int i = 0; i < UB_DEV_STAT_COUNT; i++)
		values[i] = (uint32_t)(i + 1) * 8 <= size ? ub_le64(d + i * 8) : 0;
}

int ub_dev_stats_read(struct ub_fs *fs, uint64_t devid, uint64_t values[UB_DEV_STAT_COUNT])
{
	struct ub_key key = { BTRFS_DEV_STATS_OBJECTID, BTRFS_PERSISTENT_ITEM_KEY, devid };
	struct ub_root root;
	struct ub_path *p;
	const uint8_t *d;
	uint32_t size;
	int ret, entered;

	memset(values, 0, UB_DEV_STAT_COUNT * sizeof(*values));
	ret = ub_path_new(&p);
	if (ret)
		return ret;
	/* through a live view the running transaction's blocks are read: under its lock, as every read call */
	entered = ub_view_enter(fs);
	ret = ub_fs_tree_root(fs, BTRFS_DEV_TREE_OBJECTID, &root);
	if (!ret)
		ret = ub_tree_lookup(ub_fs_trees(fs), &root, &key, p, &d, &size);
	if (ret == 0)
		stats_from(d, size, values);
	ub_path_free(p);
	ub_view_exit(fs, entered);
	return ret == -ENOENT ? 0 : ret;
}

int ub_dev_stats_update(struct ub_engine *e, uint64_t devid, const uint64_t add[UB_DEV_STAT_COUNT], bool reset)
{
	struct ub_key key = { BTRFS_DEV_STATS_OBJECTID, BTRFS_PERSISTENT_ITEM_KEY, devid };
	uint64_t v[UB_DEV_STAT_COUNT] = { 0 };
	uint8_t item[ITEM_BYTES];
	struct ub_txn *t;
	struct ub_path p;
	uint32_t size = 0;
	bool present = false;
	uint8_t *d;
	int ret;

	if (!e->fs.dev_tree)
		return -EUCLEAN;
	ret = ub_fsw_begin(e, UB_FSW_OP_SETATTR, 0, &t);
	if (ret)
		return ret;
	ub_path_init(&p);
	ret = ub_tree_search_slot(&e->fs.tc, ub_txn_ta(t), &e->fs.dev_tree->root, &key, &p, 0, true);
	if (ret < 0)
		goto out;
	if (ret == 0) {
		present = true;
		d = ub_path_data_mut(&p, &size);
		if (!d) {
			ret = -EUCLEAN;
			goto out;
		}
		if (!reset)
			stats_from(d, size, v);
	}
	for (int i = 0; add && i < UB_DEV_STAT_COUNT; i++)
		v[i] += add[i];
	if (present && size >= ITEM_BYTES) {
		/* in place: a longer item keeps the values it has beyond ours */
		for (int i = 0; i < UB_DEV_STAT_COUNT; i++)
			ub_put_le(d + i * 8, 8, v[i]);
		ub_path_mark_dirty(&p);
		ret = 0;
		goto out;
	}
	if (present) {
		/* an older, shorter item: replaced by a whole one */
		ub_path_release(&p);
		ret = ub_tree_search_slot(&e->fs.tc, ub_txn_ta(t), &e->fs.dev_tree->root, &key, &p, -1, true);
		if (ret == 0)
			ret = ub_tree_del_items(&e->fs.tc, ub_txn_ta(t), &e->fs.dev_tree->root, &p, p.slots[0], 1);
		else if (ret > 0)
			ret = -EUCLEAN;
		if (ret)
			goto out;
	}
	ub_path_release(&p);
	for (int i = 0; i < UB_DEV_STAT_COUNT; i++)
		ub_put_le(item + i * 8, 8, v[i]);
	ret = ub_tree_insert_item(&e->fs.tc, ub_txn_ta(t), &e->fs.dev_tree->root, &key, item, ITEM_BYTES);
out:
	ub_path_release(&p);
	ub_fsw_end(e);
	return ret;
}

void sx_stat_add(struct ub_scrub *s, struct sx_dev *d, int stat, uint64_t n)
{
	(void)s; /* the caller holds s->lock */
	if (stat >= 0 && stat < UB_DEV_STAT_COUNT)
		d->stats[stat] += n;
}

int ub_scrub_dev_stats(struct ub_scrub *s, uint64_t devid, uint64_t values[UB_DEV_STAT_COUNT])
{
	struct sx_dev *d = sx_dev_of(s, devid);

	if (!d)
		return -ENOENT;
	pthread_mutex_lock(&s->lock);
	memcpy(values, d->stats, sizeof(d->stats));
	pthread_mutex_unlock(&s->lock);
	return 0;
}
