/* SPDX-License-Identifier: MIT */
/*
 * Opening a filesystem for writing: the ub_fs underneath (volume opened
 * writable, chunk tree, the table of root objects, lib/tree/roots.h), then
 * the allocator. Everything that the engine would leave stale on disk is
 * refused here, before anything is written.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include "txn.h"
#include "txn/log_tree.h"
#include "cleaner.h"
#include "fs/fs_embed.h"

#define SB(field, sb) UB_GET(ub_disk_super, field, sb)

int ub_engine_root(struct ub_engine *e, uint64_t objectid, struct ub_eroot **out)
{
	struct ub_eroot *er;
	int ret = ub_roots_load(e->fs.roots, &e->fs.tc, &e->fs.root_tree->root, objectid, &er);

	if (ret)
		return ret;
	if (!er->root.bytenr)
		return -ENOENT;
	*out = er;
	return 0;
}

int ub_engine_add_root(struct ub_engine *e, const struct ub_root *r, uint64_t item_offset, uint64_t last_snapshot,
		       struct ub_eroot **out)
{
	struct ub_eroot *er;
	int ret = ub_roots_add(e->fs.roots, r, true, &er);

	if (ret)
		return ret;
	er->item_offset = item_offset;
	er->last_snapshot = er->item_last_snapshot = last_snapshot;
	*out = er;
	return 0;
}

/*
 * States the engine would leave half-done work behind in: relocation trees
 * of an interrupted balance (they share blocks the engine's reference
 * bookkeeping does not follow), a device replace that has started (its
 * target would miss what the engine writes). 0, or -EOPNOTSUPP named.
 */
static int check_pending_work(struct ub_engine *e)
{
	struct ub_key key = { BTRFS_TREE_RELOC_OBJECTID, BTRFS_ROOT_ITEM_KEY, UINT64_MAX };
	struct ub_eroot *dev;
	struct ub_path p;
	const uint8_t *d;
	uint32_t size;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_search_le(&e->fs.tc, &e->fs.root_tree->root, &key, &p);
	if (ret == 0) {
		ub_path_key(&p, &key);
		ret = key.objectid == BTRFS_TREE_RELOC_OBJECTID && key.type == BTRFS_ROOT_ITEM_KEY ? 2 : 0;
	} else if (ret == 1) {
		ret = 0;
	}
	ub_path_release(&p);
	if (ret == 2) {
		ub_err(&e->fs.log, "cannot open for writing: a balance was interrupted (relocation tree of subvolume %llu "
		       "present); let the kernel finish or cancel it first", (unsigned long long)key.offset);
		return -EOPNOTSUPP;
	}
	if (ret)
		return ret;
	ret = ub_engine_root(e, BTRFS_DEV_TREE_OBJECTID, &dev);
	if (ret)
		return ret == -ENOENT ? 0 : ret;
	key = (struct ub_key){ 0, BTRFS_DEV_REPLACE_KEY, 0 };
	ub_path_init(&p);
	ret = ub_tree_lookup(&e->fs.tc, &dev->root, &key, &p, &d, &size);
	if (ret == 0 && size >= sizeof(struct btrfs_dev_replace_item)) {
		uint64_t st = UB_GET(btrfs_dev_replace_item, replace_state, d);
		if (st == BTRFS_IOCTL_DEV_REPLACE_STATE_STARTED || st == BTRFS_IOCTL_DEV_REPLACE_STATE_SUSPENDED) {
			ub_err(&e->fs.log, "cannot open for writing: a device replace of devid %llu is %s; let the kernel "
			       "finish or cancel it first", (unsigned long long)UB_GET(btrfs_dev_replace_item, src_devid, d),
			       st == BTRFS_IOCTL_DEV_REPLACE_STATE_STARTED ? "running" : "suspended");
			ret = -EOPNOTSUPP;
		}
	} else if (ret == -ENOENT) {
		ret = 0;
	}
	ub_path_release(&p);
	return ret;
}

int ub_engine_open_raw(const char *const *paths, struct ub_dev *const *devs, int n, const struct ub_log *log,
		       unsigned flags, struct ub_engine **out)
{
	/* the engine refuses a pending log itself (ub_engine_check_features), so it is not replayed for reading */
	struct ub_fs_opts opts = { .writable = true, .super_mirror = -1, .no_log = true };
	struct ub_engine *e = calloc(1, sizeof(*e));
	struct ub_eroot *quota;
	const uint8_t *sb;
	char why[256];
	int ret;

	if (!e) {
		for (int i = 0; devs && i < n; i++)
			ub_dev_close(devs[i]);
		return -ENOMEM;
	}
	e->ram_budget = ub_engine_ram_budget();
	e->max_inline = 2048; /* UB_FSW_MAX_INLINE_DEFAULT, the kernel's */
	pthread_mutex_init(&e->commit_lock, NULL);
	pthread_cond_init(&e->commit_cond, NULL);
	ret = ub_fs_open_volume(&e->fs, paths, devs, n, &opts, log);
	if (ret) {
		pthread_cond_destroy(&e->commit_cond);
		pthread_mutex_destroy(&e->commit_lock);
		free(e);
		return ret;
	}
	/* refused before any tree is read: the reader's warnings about the same features would only confuse */
	sb = e->fs.vol->super;
	ret = ub_engine_check_features(sb, (flags & UB_ENGINE_OPEN_METADUMP) != 0, why, sizeof(why));
	if (ret) {
		ub_err(&e->fs.log, "cannot open for writing: %s", why);
		goto fail;
	}
	ret = ub_fs_load_trees(&e->fs);
	if (ret)
		goto fail; /* ub_fs_fini is safe twice */
	e->incompat = SB(incompat_flags, sb);
	e->compat_ro = SB(compat_ro_flags, sb);
	e->generation = SB(generation, sb);
	e->sealed = e->generation;
	e->bytes_used = SB(bytes_used, sb);
	if ((flags & UB_ENGINE_OPEN_DEGRADED) && ub_volume_check_devices(e->fs.vol) == -ENXIO) {
		ub_err(&e->fs.log, "cannot open for writing: with the missing devices some chunks lost more than "
		       "their profile can rebuild");
		ret = -EOPNOTSUPP;
		goto fail;
	}
	for (int i = 0; i < e->fs.vol->nvdevs && !(flags & UB_ENGINE_OPEN_DEGRADED); i++) {
		if (e->fs.vol->vdevs[i].missing || !e->fs.vol->vdevs[i].dev) {
			ub_err(&e->fs.log, "cannot open for writing: device %llu is missing (degraded writes are not "
			       "supported)", (unsigned long long)e->fs.vol->vdevs[i].devid);
			ret = -EOPNOTSUPP;
			goto fail;
		}
	}
	ret = ub_engine_root(e, BTRFS_QUOTA_TREE_OBJECTID, &quota);
	if (ret == 0 && (flags & UB_ENGINE_OPEN_QUOTA_COUNTS))
		ret = -ENOENT;
	if (ret == 0) {
		ub_err(&e->fs.log, "cannot open for writing: quotas (qgroups) are enabled, and the write engine does "
				   "not keep the quota tree up to date; disable them with `btrfs quota disable` first");
		ret = -EOPNOTSUPP;
		goto fail;
	}
	if (ret != -ENOENT)
		goto fail;
	ret = check_pending_work(e);
	if (ret)
		goto fail;
	if (!e->fs.extent_tree) {
		ub_err(&e->fs.log, "cannot open for writing: no usable extent tree");
		ret = -EUCLEAN;
		goto fail;
	}
	if ((e->compat_ro & BTRFS_FEATURE_COMPAT_RO_FREE_SPACE_TREE) && !e->fs.fst_tree) {
		ub_err(&e->fs.log, "cannot open for writing: the free space tree is flagged but unusable");
		ret = -EUCLEAN;
		goto fail;
	}
	/* a free space tree the superblock does not flag is stale: the engine neither trusts nor updates it */
	if (!(e->compat_ro & BTRFS_FEATURE_COMPAT_RO_FREE_SPACE_TREE))
		e->fs.fst_tree = NULL;
	if (flags & UB_ENGINE_OPEN_REPAIR_EXTENTS) {
		ret = ub_alloc_load_chunks(e->fs.vol, &e->alloc);
		e->fst_strays = true;
		e->bytes_used = 0;
	} else if (flags & UB_ENGINE_OPEN_REPAIR_SPACE) {
		uint64_t fixed;

		ret = ub_alloc_load_repair(&e->fs.tc, e->fs.vol, &e->fs.extent_tree->root, &fixed, &e->alloc);
		e->repair_fixed_groups = (int)(fixed > INT32_MAX ? INT32_MAX : fixed);
		e->fst_strays = true;
	} else {
		ret = ub_alloc_load(&e->fs.tc, e->fs.vol, &e->fs.extent_tree->root,
				    e->fs.fst_tree ? &e->fs.fst_tree->root : NULL, &e->alloc);
	}
	if (ret) {
		ub_err(&e->fs.log, "cannot open for writing: cannot load the block groups and free space: %s",
		       strerror(-ret));
		goto fail;
	}
	/* what the superblock says and what the block groups add up to must agree (btrfs check's rule) */
	if (e->bytes_used != ub_alloc_bytes_used(e->alloc)) {
		ub_warn(&e->fs.log, "superblock bytes_used %llu differs from the block groups' used bytes %llu: the "
			"next commit writes the latter", (unsigned long long)e->bytes_used,
			(unsigned long long)ub_alloc_bytes_used(e->alloc));
		e->bytes_used = ub_alloc_bytes_used(e->alloc);
	}
	/* a pending fsync log: replayed by the caller above (lib/fsw/open.c), or refused here */
	if (SB(log_root, sb) && (flags & UB_ENGINE_OPEN_NO_LOG_REPLAY)) {
		ub_err(&e->fs.log, "cannot open for writing: the filesystem has a pending fsync log (log root at logical "
		       "%llu) and its replay was not asked for", (unsigned long long)SB(log_root, sb));
		ret = -EOPNOTSUPP;
		goto fail;
	}
	*out = e;
	return 0;
fail:
	ub_engine_close(e);
	return ret;
}

int ub_engine_repair_fixed_groups(const struct ub_engine *e)
{
	return e->repair_fixed_groups;
}

int ub_engine_ready(struct ub_engine *e)
{
	int ret;

	e->clean_step = UB_ENGINE_CLEAN_DEFAULT;
	ret = ub_engine_has_dead_roots(e);
	if (ret < 0)
		return ret;
	e->dead_roots = ret;
	return 0;
}

int ub_engine_view(struct ub_engine *e, struct ub_fs **out)
{
	return ub_fs_live_view(&e->fs, out);
}

void ub_engine_close(struct ub_engine *e)
{
	if (!e)
		return;
	/* after every other thread's last call: what this one still holds goes with the engine */
	if (ub_fs_live_write_lock(&e->fs) == 0) {
		if (e->running)
			ub_txn_abort(e->running);
		ub_fs_live_write_release(&e->fs);
	}
	ub_log_free(e);
	ub_engine_dir_indexes_free(e);
	ub_alloc_free(e->alloc);
	ub_fs_fini(&e->fs);
	pthread_cond_destroy(&e->commit_cond);
	pthread_mutex_destroy(&e->commit_lock);
	free(e);
}
