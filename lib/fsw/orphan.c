// SPDX-License-Identifier: MIT
/*
 * Orphans: inodes without a name that must still exist (files open after
 * their last unlink, O_TMPFILE files), kept as the kernel keeps them: nlink
 * 0 and an item (ORPHAN_OBJECTID, ORPHAN_ITEM, ino) of no data in their
 * subvolume's tree, so that whoever opens the filesystem next (this engine,
 * the kernel's mount) removes them if the last user never could. An orphan
 * item on an inode that still has names marks a truncate that did not
 * finish (the kernel's): the cleanup finishes it.
 */
#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "fsw/fsw.h"

#define II_GET(f, p) UB_GET(btrfs_inode_item, f, p)

int fsw_orphan_add(struct fsw *w, uint64_t ino)
{
	struct ub_key key = { BTRFS_ORPHAN_OBJECTID, BTRFS_ORPHAN_ITEM_KEY, ino };
	int ret = ub_tree_insert_item(w->tc, w->ta, &w->fs->root, &key, NULL, 0);

	return ret == -EEXIST ? 0 : ret;
}

int fsw_orphan_del(struct fsw *w, uint64_t ino)
{
	struct ub_key key = { BTRFS_ORPHAN_OBJECTID, BTRFS_ORPHAN_ITEM_KEY, ino };

	return fsw_del_key(w, &w->fs->root, &key);
}

void ub_engine_keep_orphans(struct ub_engine *e, bool keep)
{
	e->keep_orphans = keep;
}

void ub_engine_set_max_inline(struct ub_engine *e, uint32_t bytes)
{
	/* the kernel's ceiling: a sector less one (and what a leaf holds, which max_inline() checks too) */
	e->max_inline = bytes;
}

int ub_fsw_tmpfile(struct ub_txn *t, uint64_t subvol, uint64_t dir, uint32_t mode, uint32_t uid, uint32_t gid,
		   uint64_t *ino)
{
	uint8_t dii[UB_II_SIZE];
	struct fsw w;
	int ret;

	if ((mode & S_IFMT) && (mode & S_IFMT) != S_IFREG)
		return -EINVAL;
	ret = fsw_init(&w, t, subvol);
	if (!ret)
		ret = fsw_get_dir(&w, dir, dii);
	if (!ret)
		ret = fsw_alloc_inode(&w, dii, S_IFREG | (mode & 07777), uid, gid, 0, 0, ino);
	return ret ? ret : fsw_orphan_add(&w, *ino);
}

int ub_fsw_evict(struct ub_txn *t, uint64_t subvol, uint64_t ino)
{
	uint8_t ii[UB_II_SIZE];
	struct fsw w;
	int ret = fsw_init(&w, t, subvol);

	if (!ret)
		ret = fsw_inode_get(&w, ino, ii);
	if (ret)
		return ret;
	if (II_GET(nlink, ii))
		return 0; /* named again meanwhile (a link of a tmpfile): it lives */
	ret = fsw_evict(&w, ino, ii);
	if (!ret) {
		ret = fsw_orphan_del(&w, ino);
		if (ret == -ENOENT)
			ret = 0;
	}
	return ret;
}

/* The orphans of one subvolume, in batches: each evicted, or (names left) its truncate finished. */
static int clean_subvol(struct ub_txn *t, uint64_t subvol, uint64_t *done)
{
	struct ub_key min = { BTRFS_ORPHAN_OBJECTID, BTRFS_ORPHAN_ITEM_KEY, 0 };
	struct ub_key max = { BTRFS_ORPHAN_OBJECTID, BTRFS_ORPHAN_ITEM_KEY, UINT64_MAX };
	uint64_t inos[64];
	struct fsw w;
	int n, ret;

	do {
		struct ub_tree_iter it;
		struct ub_key k;
		const uint8_t *d;
		uint32_t size;

		ret = fsw_init(&w, t, subvol);
		if (ret)
			return ret == -EROFS ? 0 : ret; /* a read-only snapshot keeps what it holds */
		n = 0;
		ret = ub_tree_iter_start(&it, w.tc, &w.fs->root, &min, &max);
		while (ret == 0 && n < 64 && (ret = ub_tree_iter_next(&it, &k, &d, &size)) == 0)
			inos[n++] = k.offset;
		ub_tree_iter_end(&it);
		if (ret < 0)
			return ret;
		for (int i = 0; i < n; i++) {
			uint8_t ii[UB_II_SIZE];

			ret = fsw_init(&w, t, subvol);
			if (!ret)
				ret = fsw_inode_get(&w, inos[i], ii);
			if (ret == -ENOENT) {
				ret = fsw_orphan_del(&w, inos[i]); /* the inode went already */
			} else if (!ret && II_GET(nlink, ii) == 0) {
				ret = fsw_evict(&w, inos[i], ii);
				if (!ret)
					ret = fsw_orphan_del(&w, inos[i]);
			} else if (!ret) {
				/* a truncate the crash cut short: what lies past the size goes */
				if ((II_GET(mode, ii) & S_IFMT) == S_IFREG)
					ret = fsw_truncate_locked(&w, inos[i], ii, II_GET(size, ii));
				if (!ret)
					ret = fsw_orphan_del(&w, inos[i]);
			}
			if (ret)
				return ret;
			(*done)++;
		}
	} while (n == 64);
	return 0;
}

int ub_fsw_orphan_cleanup(struct ub_engine *e, uint64_t *cleaned)
{
	struct ub_key min = { BTRFS_FS_TREE_OBJECTID, BTRFS_ROOT_ITEM_KEY, 0 };
	struct ub_key max = { BTRFS_LAST_FREE_OBJECTID, BTRFS_ROOT_ITEM_KEY, UINT64_MAX };
	uint64_t *ids = NULL, done = 0;
	size_t n = 0, cap = 0;
	struct ub_tree_iter it;
	struct ub_txn *t;
	struct ub_key k;
	const uint8_t *d;
	uint32_t size;
	int ret;

	/* the subvolumes first (loading a root reads the root tree the iterator holds) */
	ret = ub_tree_iter_start(&it, &e->fs.tc, &e->fs.root_tree->committed, &min, &max);
	while (ret == 0 && (ret = ub_tree_iter_next(&it, &k, &d, &size)) == 0) {
		if (k.type != BTRFS_ROOT_ITEM_KEY ||
		    (k.objectid != BTRFS_FS_TREE_OBJECTID && k.objectid < BTRFS_FIRST_FREE_OBJECTID))
			continue;
		if (n && ids[n - 1] == k.objectid)
			continue; /* a snapshot's item at a later offset */
		if (n == cap) {
			size_t nc = cap ? 2 * cap : 64;
			uint64_t *ni = realloc(ids, nc * sizeof(*ids));

			if (!ni) {
				ret = -ENOMEM;
				break;
			}
			ids = ni;
			cap = nc;
		}
		ids[n++] = k.objectid;
	}
	ub_tree_iter_end(&it);
	if (ret < 0)
		goto out;
	ret = 0;
	for (size_t i = 0; i < n && !ret; i++) {
		ret = ub_fsw_begin(e, UB_FSW_OP_UNLINK, 0, &t);
		if (ret)
			break;
		ret = clean_subvol(t, ids[i], &done);
		if (ret == -ENOENT)
			ret = 0; /* a dead root, the cleaner's */
		ub_fsw_end(e);
	}
	if (!ret && done)
		ret = ub_engine_commit(e);
	if (!ret && done)
		ub_info(&e->fs.log, "removed %llu orphan inode%s left by the last session", (unsigned long long)done,
			done > 1 ? "s" : "");
out:
	free(ids);
	if (cleaned)
		*cleaned = done;
	return ret;
}
