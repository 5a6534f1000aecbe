/* SPDX-License-Identifier: MIT */
/*
 * Opening a filesystem for writing: the volume (writable), the chunk tree,
 * one root object per tree from the superblock and the root tree's
 * ROOT_ITEMs, and the allocator. Everything that the engine would leave
 * stale on disk is refused here, before anything is written.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include "txn.h"
#include "fs/log_commit.h" /* logrw */

#define SB(field, sb) UB_GET(ub_disk_super, field, sb)
#define RI(field, p) UB_GET(btrfs_root_item, field, p)

static bool is_subvol_id(uint64_t id)
{
	return id == BTRFS_FS_TREE_OBJECTID || (id >= BTRFS_FIRST_FREE_OBJECTID && id <= BTRFS_LAST_FREE_OBJECTID) ||
	       id == BTRFS_DATA_RELOC_TREE_OBJECTID;
}

static struct ub_eroot *eroot_new(struct ub_engine *e, const struct ub_root *r, bool has_item)
{
	struct ub_eroot *er = calloc(1, sizeof(*er)), **pp = &e->roots;

	if (!er)
		return NULL;
	er->root = *r;
	er->has_item = has_item;
	er->shareable = is_subvol_id(r->objectid);
	er->item_bytenr = r->bytenr;
	er->item_generation = r->generation;
	er->item_level = r->level;
	er->committed = *r;
	while (*pp)
		pp = &(*pp)->next;
	*pp = er;
	return er;
}

static struct ub_eroot *eroot_find(struct ub_engine *e, uint64_t objectid)
{
	for (struct ub_eroot *er = e->roots; er; er = er->next)
		if (er->root.objectid == objectid)
			return er;
	return NULL;
}

int ub_engine_root(struct ub_engine *e, uint64_t objectid, struct ub_eroot **out)
{
	struct ub_key key = { objectid, BTRFS_ROOT_ITEM_KEY, UINT64_MAX };
	struct ub_path p;
	const uint8_t *d;
	uint32_t size;
	struct ub_root r;
	struct ub_eroot *er = eroot_find(e, objectid);
	char t[64];
	int ret;

	if (er) {
		*out = er;
		return 0;
	}
	ub_path_init(&p);
	ret = ub_tree_search_le(&e->tc, &e->root_tree->root, &key, &p);
	if (ret)
		goto out;
	ub_path_key(&p, &key);
	if (key.objectid != objectid || key.type != BTRFS_ROOT_ITEM_KEY) {
		ret = 1;
		goto out;
	}
	d = ub_path_data(&p, &size);
	if (size < offsetof(struct btrfs_root_item, generation_v2) || RI(level, d) >= UB_MAX_LEVEL || !RI(bytenr, d)) {
		ub_err(&e->log, "root tree: ROOT_ITEM of tree %s (leaf at logical %llu slot %d): size %u, bytenr %llu, "
		       "level %u: not a usable root", ub_tree_name(objectid, t, sizeof(t)),
		       (unsigned long long)p.nodes[0]->start, p.slots[0], size, (unsigned long long)RI(bytenr, d),
		       (unsigned)RI(level, d));
		ret = -EUCLEAN;
		goto out;
	}
	r = (struct ub_root){ objectid, RI(bytenr, d), RI(generation, d), (uint8_t)RI(level, d) };
	er = eroot_new(e, &r, true);
	if (!er) {
		ret = -ENOMEM;
		goto out;
	}
	er->item_offset = key.offset;
	er->last_snapshot = er->item_last_snapshot = RI(last_snapshot, d);
	*out = er;
out:
	ub_path_release(&p);
	return ret > 0 ? -ENOENT : ret;
}

int ub_engine_add_root(struct ub_engine *e, const struct ub_root *r, uint64_t item_offset, uint64_t last_snapshot,
		       struct ub_eroot **out)
{
	struct ub_eroot *er;

	if (eroot_find(e, r->objectid))
		return -EEXIST;
	er = eroot_new(e, r, true);
	if (!er)
		return -ENOMEM;
	/* not in the last commit: an abort takes it back to nothing */
	er->committed = (struct ub_root){ r->objectid, 0, 0, 0 };
	er->item_offset = item_offset;
	er->last_snapshot = er->item_last_snapshot = last_snapshot;
	*out = er;
	return 0;
}

/* Chunks and devices into the volume (the same walk lib/fs does for readers). */
static int load_chunk_tree(struct ub_engine *e)
{
	struct ub_key key = { 0, 0, 0 };
	struct ub_path p;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_search(&e->tc, &e->chunk_tree->root, &key, &p);
	if (ret == 2)
		ret = ub_eb_nritems(p.nodes[0]) ? 0 : 1;
	else if (ret == 1)
		ret = 0;
	while (ret == 0) {
		const uint8_t *data;
		uint32_t size;

		ub_path_key(&p, &key);
		data = ub_path_data(&p, &size);
		if (key.type == BTRFS_DEV_ITEM_KEY)
			ret = ub_volume_add_dev_item(e->vol, data, size);
		else if (key.type == BTRFS_CHUNK_ITEM_KEY)
			ret = ub_volume_add_chunk(e->vol, key.offset, data, size);
		if (ret)
			break;
		ret = ub_tree_next(&p);
	}
	ub_path_release(&p);
	return ret < 0 ? ret : 0;
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
	ret = ub_tree_search_le(&e->tc, &e->root_tree->root, &key, &p);
	if (ret == 0) {
		ub_path_key(&p, &key);
		ret = key.objectid == BTRFS_TREE_RELOC_OBJECTID && key.type == BTRFS_ROOT_ITEM_KEY ? 2 : 0;
	} else if (ret == 1) {
		ret = 0;
	}
	ub_path_release(&p);
	if (ret == 2) {
		ub_err(&e->log, "cannot open for writing: a balance was interrupted (relocation tree of subvolume %llu "
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
	ret = ub_tree_lookup(&e->tc, &dev->root, &key, &p, &d, &size);
	if (ret == 0 && size >= sizeof(struct btrfs_dev_replace_item)) {
		uint64_t st = UB_GET(btrfs_dev_replace_item, replace_state, d);
		if (st == BTRFS_IOCTL_DEV_REPLACE_STATE_STARTED || st == BTRFS_IOCTL_DEV_REPLACE_STATE_SUSPENDED) {
			ub_err(&e->log, "cannot open for writing: a device replace of devid %llu is %s; let the kernel "
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

static int engine_open(const char *const *paths, struct ub_dev *const *devs, int n, const struct ub_log *log,
		       unsigned flags, struct ub_engine **out)
{
	struct ub_volume_opts vopts = { .writable = true, .super_mirror = -1 };
	struct ub_engine *e = calloc(1, sizeof(*e));
	struct ub_eroot *quota;
	struct ub_root r;
	const uint8_t *sb;
	char why[256];
	int ret;

	if (!e) {
		for (int i = 0; devs && i < n; i++)
			ub_dev_close(devs[i]);
		return -ENOMEM;
	}
	if (log)
		e->log = *log;
	else
		e->log.verbosity = UB_LOG_WARN;
	ret = devs ? ub_volume_open_devs(devs, n, &vopts, &e->log, &e->vol)
		   : ub_volume_open(paths, n, &vopts, &e->log, &e->vol);
	if (ret)
		goto fail;
	sb = e->vol->super;
	ret = ub_engine_check_features(sb, why, sizeof(why));
	if (ret) {
		ub_err(&e->log, "cannot open for writing: %s", why);
		goto fail;
	}
	ret = ub_tree_ctx_init(&e->tc, e->vol, &e->log);
	if (ret)
		goto fail;
	e->tc_ready = true;
	e->incompat = SB(incompat_flags, sb);
	e->compat_ro = SB(compat_ro_flags, sb);
	e->generation = SB(generation, sb);
	e->bytes_used = SB(bytes_used, sb);
	r = (struct ub_root){ BTRFS_ROOT_TREE_OBJECTID, SB(root, sb), SB(generation, sb), (uint8_t)SB(root_level, sb) };
	e->root_tree = eroot_new(e, &r, false);
	r = (struct ub_root){ BTRFS_CHUNK_TREE_OBJECTID, SB(chunk_root, sb), SB(chunk_root_generation, sb),
			      (uint8_t)SB(chunk_root_level, sb) };
	e->chunk_tree = eroot_new(e, &r, false);
	if (!e->root_tree || !e->chunk_tree) {
		ret = -ENOMEM;
		goto fail;
	}
	ret = load_chunk_tree(e);
	if (ret) {
		ub_err(&e->log, "cannot read the chunk tree: %s", strerror(-ret));
		goto fail;
	}
	ub_volume_check_devices(e->vol);
	for (int i = 0; i < e->vol->nvdevs; i++) {
		if (e->vol->vdevs[i].missing || !e->vol->vdevs[i].dev) {
			ub_err(&e->log, "cannot open for writing: device %llu is missing (degraded writes are not "
			       "supported)", (unsigned long long)e->vol->vdevs[i].devid);
			ret = -EOPNOTSUPP;
			goto fail;
		}
	}
	ret = ub_engine_root(e, BTRFS_QUOTA_TREE_OBJECTID, &quota);
	if (ret == 0) {
		ub_err(&e->log, "cannot open for writing: quotas (qgroups) are enabled, and the write engine does not "
				"keep the quota tree up to date; disable them with `btrfs quota disable` first");
		ret = -EOPNOTSUPP;
		goto fail;
	}
	if (ret != -ENOENT)
		goto fail;
	ret = check_pending_work(e);
	if (ret)
		goto fail;
	ret = ub_engine_root(e, BTRFS_EXTENT_TREE_OBJECTID, &e->extent_tree);
	if (ret) {
		ub_err(&e->log, "cannot open for writing: no usable extent tree: %s", strerror(-ret));
		goto fail;
	}
	if (e->compat_ro & BTRFS_FEATURE_COMPAT_RO_FREE_SPACE_TREE) {
		ret = ub_engine_root(e, BTRFS_FREE_SPACE_TREE_OBJECTID, &e->fst_tree);
		if (ret) {
			ub_err(&e->log, "cannot open for writing: the free space tree is flagged but unusable: %s",
			       strerror(-ret));
			goto fail;
		}
	}
	ret = ub_alloc_load(&e->tc, e->vol, &e->extent_tree->root, e->fst_tree ? &e->fst_tree->root : NULL,
			    &e->alloc);
	if (ret) {
		ub_err(&e->log, "cannot open for writing: cannot load the block groups and free space: %s",
		       strerror(-ret));
		goto fail;
	}
	/* what the superblock says and what the block groups add up to must agree (btrfs check's rule) */
	if (e->bytes_used != ub_alloc_bytes_used(e->alloc)) {
		ub_warn(&e->log, "superblock bytes_used %llu differs from the block groups' used bytes %llu: the next "
			"commit writes the latter", (unsigned long long)e->bytes_used,
			(unsigned long long)ub_alloc_bytes_used(e->alloc));
		e->bytes_used = ub_alloc_bytes_used(e->alloc);
	}
	/* logrw: a pending fsync log is replayed into the trees and committed, as the kernel's mount does */
	if (SB(log_root, sb) && (flags & UB_ENGINE_OPEN_NO_LOG_REPLAY)) {
		ub_err(&e->log, "cannot open for writing: the filesystem has a pending fsync log (log root at logical "
		       "%llu) and its replay was not asked for", (unsigned long long)SB(log_root, sb));
		ret = -EOPNOTSUPP;
		goto fail;
	}
	ret = ub_log_commit(e);
	if (ret)
		goto fail;
	*out = e;
	return 0;
fail:
	ub_engine_close(e);
	return ret;
}

int ub_engine_open(const char *const *paths, int npaths, const struct ub_log *log, struct ub_engine **out)
{
	return engine_open(paths, NULL, npaths, log, 0, out);
}

/* logrw */
int ub_engine_open_ex(const char *const *paths, int npaths, const struct ub_log *log, unsigned flags,
		      struct ub_engine **out)
{
	return engine_open(paths, NULL, npaths, log, flags, out);
}

int ub_engine_open_devs(struct ub_dev *const *devs, int ndevs, const struct ub_log *log, struct ub_engine **out)
{
	return engine_open(NULL, devs, ndevs, log, 0, out);
}

void ub_engine_close(struct ub_engine *e)
{
	if (!e)
		return;
	if (e->running)
		ub_txn_abort(e->running);
	ub_alloc_free(e->alloc);
	if (e->tc_ready)
		ub_tree_ctx_destroy(&e->tc);
	ub_volume_close(e->vol);
	while (e->roots) {
		struct ub_eroot *next = e->roots->next;
		free(e->roots);
		e->roots = next;
	}
	free(e);
}
