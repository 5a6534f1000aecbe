/* SPDX-License-Identifier: MIT */
/*
 * The fsync log replayed for real, as the kernel does at a read-write mount.
 * The in-memory replay (log_replay.c) decides what every touched inode looks
 * like afterwards (one item set per inode); here each set replaces the
 * inode's items in its subvolume tree, data back references follow the file
 * extent items (an extent written after the last commit has no extent item
 * yet: it gets one, as the kernel's replay inserts it), the logged checksums
 * of the data those items reference replace the csum tree's (the kernel's
 * replay takes each replayed extent's, no others), and the commit clears
 * log_root.
 *
 * The log trees' blocks were never in the extent tree (the kernel allocates
 * them without back references and gives them back after the replay's
 * commit): they are only held out of the allocator until the superblock no
 * longer points at them, so a crash during the commit still finds the log.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "fsw/log_commit.h"
#include "fs/log_replay.h"
#include "fsw/fsw.h"

#define FE(field, p) UB_GET(btrfs_file_extent_item, field, p)
#define SB(field, sb) UB_GET(ub_disk_super, field, sb)

/* A file extent item with data on disk: its extent and the back reference's offset. */
static bool fe_on_disk(const struct ub_key *k, const uint8_t *d, uint32_t size, uint64_t *bytenr, uint64_t *len,
		       uint64_t *refoff)
{
	if (k->type != BTRFS_EXTENT_DATA_KEY || size < UB_FE_SIZE || FE(type, d) == BTRFS_FILE_EXTENT_INLINE ||
	    !FE(disk_bytenr, d))
		return false;
	*bytenr = FE(disk_bytenr, d);
	*len = FE(disk_num_bytes, d);
	*refoff = k->offset - FE(offset, d);
	return true;
}

/* Whether the extent tree (or this transaction) knows the extent at bytenr. */
static int extent_known(struct fsw *w, uint64_t bytenr, uint64_t len, bool *known)
{
	struct ub_key k = { bytenr, BTRFS_EXTENT_ITEM_KEY, len };
	struct ub_path p;
	const uint8_t *d;
	uint32_t size;
	int ret;

	if (ub_dref_find(w->t->refs, bytenr)) {
		*known = true;
		return 0;
	}
	ub_path_init(&p);
	ret = ub_tree_lookup(w->tc, &w->e->fs.extent_tree->root, &k, &p, &d, &size);
	ub_path_release(&p);
	*known = ret == 0;
	return ret == -ENOENT ? 0 : ret;
}

/* The old file extents of ino give up their data references. */
static int drop_old_refs(struct fsw *w, uint64_t ino)
{
	struct ub_key min = { ino, BTRFS_EXTENT_DATA_KEY, 0 }, max = { ino, BTRFS_EXTENT_DATA_KEY, UINT64_MAX }, k;
	struct ub_tree_iter it;
	const uint8_t *d;
	uint32_t size;
	int ret = ub_tree_iter_start(&it, w->tc, &w->fs->root, &min, &max);

	while (ret == 0 && (ret = ub_tree_iter_next(&it, &k, &d, &size)) == 0) {
		uint64_t b, len, off;
		if (fe_on_disk(&k, d, size, &b, &len, &off))
			ret = ub_dref_add_data(w->t->refs, b, len, w->subvol, ino, off, 0, -1, 0);
	}
	ub_tree_iter_end(&it);
	return ret < 0 ? ret : 0;
}

/* nbytes as the items say: data extents' num_bytes, inline extents' ram_bytes (btrfs check's sum). */
static uint64_t set_nbytes(const struct ub_itemset *s)
{
	uint64_t n = 0;

	for (size_t i = 0; i < s->n; i++) {
		const struct ub_item *it = &s->items[i];
		if (it->key.type != BTRFS_EXTENT_DATA_KEY || it->size < UB_FILE_EXTENT_INLINE_DATA_START)
			continue;
		if (FE(type, it->data) == BTRFS_FILE_EXTENT_INLINE)
			n += FE(ram_bytes, it->data);
		else if (it->size >= UB_FE_SIZE && FE(disk_bytenr, it->data))
			n += FE(num_bytes, it->data);
	}
	return n;
}

/* dir_nbytes: a directory's committed nbytes (UINT64_MAX: the directory is new) */
static int put_item(struct fsw *w, const struct ub_itemset *s, const struct ub_item *it, uint64_t dir_nbytes)
{
	uint8_t ii[UB_II_SIZE];
	const uint8_t *d = it->data;
	uint64_t b, len, off;
	int ret;

	if (it->key.type == BTRFS_INODE_ITEM_KEY && it->size == UB_II_SIZE) {
		bool dir = S_ISDIR(UB_GET(btrfs_inode_item, mode, it->data));
		memcpy(ii, it->data, UB_II_SIZE);
		/* a logged directory's nbytes is not kept up to date: the kernel's replay keeps the committed one */
		if (!dir || dir_nbytes != UINT64_MAX)
			UB_SET(btrfs_inode_item, nbytes, ii, dir ? dir_nbytes : set_nbytes(s));
		d = ii;
	}
	if (fe_on_disk(&it->key, it->data, it->size, &b, &len, &off)) {
		unsigned flags = 0;
		bool known;

		ret = extent_known(w, b, len, &known);
		if (ret)
			return ret;
		if (!known) {
			/* written after the last commit: its space is free on disk until this commit */
			ret = ub_alloc_reserve_at(w->e->alloc, b, len);
			if (ret) {
				ub_err(&w->e->fs.log, "fsync log of subvol %llu: inode %llu extent at file offset %llu: data "
				       "[%llu, +%llu) is neither an extent nor free space: %s",
				       (unsigned long long)w->subvol, (unsigned long long)s->ino,
				       (unsigned long long)it->key.offset, (unsigned long long)b, (unsigned long long)len,
				       strerror(-ret));
				return -EUCLEAN;
			}
			flags = UB_DREF_NEW_EXTENT;
		}
		ret = ub_dref_add_data(w->t->refs, b, len, w->subvol, s->ino, off, 0, 1, flags);
		if (ret)
			return ret;
	}
	return ub_tree_insert_item(w->tc, w->ta, &w->fs->root, &it->key, d, it->size);
}

/* One replayed inode: its items in the tree become the set's. */
static int apply_set(struct ub_txn *t, const struct ub_itemset *s)
{
	struct ub_key k = { s->ino, BTRFS_INODE_ITEM_KEY, 0 };
	const struct ub_item *ii = ub_itemset_find(s, &k);
	uint8_t old[UB_II_SIZE];
	uint64_t dir_nbytes = UINT64_MAX;
	struct fsw w;
	bool gone;
	int ret = fsw_init(&w, t, s->subvol);

	if (ret)
		return ret;
	/*
	 * An inode whose last name the log dropped: the kernel's orphan cleanup
	 * removes it at the same mount (a directory's entries were unlinked by
	 * the replay already, as the kernel's replay_dir_deletes does).
	 */
	gone = ii && ii->size == UB_II_SIZE && !UB_GET(btrfs_inode_item, nlink, ii->data);
	ret = fsw_inode_get(&w, s->ino, old);
	if (ret == 0)
		dir_nbytes = UB_GET(btrfs_inode_item, nbytes, old);
	else if (ret != -ENOENT)
		return ret;
	ret = drop_old_refs(&w, s->ino);
	if (!ret)
		ret = fsw_del_all(&w, s->ino, 0, 255);
	for (size_t i = 0; i < s->n && !ret && !gone; i++)
		ret = put_item(&w, s, &s->items[i], dir_nbytes);
	return ret;
}

struct csum_ctx {
	struct fsw w;
	uint64_t runs;
	/* the data the replayed file extent items reference, sorted and merged: [s, e) */
	struct { uint64_t s, e; } *r;
	size_t n;
};

static int range_cmp(const void *a, const void *b)
{
	const uint64_t *x = a, *y = b;

	return x[0] < y[0] ? -1 : x[0] > y[0];
}

/*
 * What the replayed inodes' regular file extent items reference (the
 * compressed extent whole, else the part the item uses), as the kernel's
 * replay takes the logged checksums of each extent it replays, and no other:
 * a log may hold the checksums of an extent it no longer points at (written,
 * logged, then replaced before the crash).
 */
static int collect_ranges(struct ub_fs *fs, struct csum_ctx *c)
{
	size_t nsets = ub_replay_nsets(fs), cap = 0, m = 0;

	for (size_t i = 0; i < nsets; i++) {
		const struct ub_itemset *set = ub_replay_set(fs, i);

		for (size_t j = 0; j < set->n; j++) {
			const struct ub_item *it = &set->items[j];
			const uint8_t *d = it->data;
			uint64_t ds, dl;

			if (it->key.type != BTRFS_EXTENT_DATA_KEY || it->size < UB_FE_SIZE ||
			    FE(type, d) != BTRFS_FILE_EXTENT_REG || !FE(disk_bytenr, d))
				continue;
			ds = FE(disk_bytenr, d);
			dl = FE(disk_num_bytes, d);
			if (!FE(compression, d)) {
				ds += FE(offset, d);
				dl = FE(num_bytes, d);
			}
			if (c->n == cap) {
				void *v = realloc(c->r, (cap = cap ? cap * 2 : 64) * sizeof(c->r[0]));

				if (!v)
					return -ENOMEM;
				c->r = v;
			}
			c->r[c->n].s = ds;
			c->r[c->n].e = ds + dl;
			c->n++;
		}
	}
	if (c->n) /* a log of metadata only has none (and qsort may not be given NULL) */
		qsort(c->r, c->n, sizeof(c->r[0]), range_cmp);
	for (size_t i = 0; i < c->n; i++) {
		if (m && c->r[i].s <= c->r[m - 1].e) {
			if (c->r[i].e > c->r[m - 1].e)
				c->r[m - 1].e = c->r[i].e;
			continue;
		}
		c->r[m++] = c->r[i];
	}
	c->n = m;
	return 0;
}

/* A logged checksum run: the parts inside data the replayed items reference replace the csum tree's. */
static int put_csums(void *arg, uint64_t start, const uint8_t *csums, uint32_t bytes)
{
	struct csum_ctx *c = arg;
	uint32_t cs = c->w.e->fs.vol->csum_size, ss = c->w.e->fs.vol->sectorsize;
	uint64_t end = start + (uint64_t)(bytes / cs) * ss;
	int ret = 0;

	c->runs++;
	for (size_t i = 0; i < c->n && !ret; i++) {
		uint64_t a = c->r[i].s > start ? c->r[i].s : start, b = c->r[i].e < end ? c->r[i].e : end;

		if (a >= b)
			continue;
		ret = fsw_csum_delete(&c->w, a, b - a);
		if (!ret)
			ret = fsw_csum_put(&c->w, a, csums + (a - start) / ss * cs, (b - a) / ss);
	}
	return ret;
}

/* Each log tree block in or out of the allocator's reservations. */
static int hold_log_blocks(struct ub_engine *e, const struct ub_block_set *bs, bool hold)
{
	for (size_t i = 0; i < bs->cap; i++) {
		int ret;
		if (!bs->addr[i])
			continue;
		if (!hold) {
			ub_alloc_unreserve(e->alloc, bs->addr[i], e->fs.vol->nodesize);
			continue;
		}
		ret = ub_alloc_reserve_at(e->alloc, bs->addr[i], e->fs.vol->nodesize);
		if (ret) {
			ub_err(&e->fs.log, "fsync log: tree block at logical %llu is not free space in the extent tree's "
			       "view: %s", (unsigned long long)bs->addr[i], strerror(-ret));
			/* give back what was held so far */
			for (size_t j = 0; j < i; j++)
				if (bs->addr[j])
					ub_alloc_unreserve(e->alloc, bs->addr[j], e->fs.vol->nodesize);
			return -EUCLEAN;
		}
	}
	return 0;
}

int ub_log_commit(struct ub_engine *e)
{
	uint64_t log_root = SB(log_root, e->fs.vol->super), transid = 0;
	struct csum_ctx cc = { 0 };
	struct ub_fs *fs = &e->fs;
	struct ub_block_set blocks;
	struct ub_txn *t = NULL;
	size_t nsets;
	int ret;

	if (!log_root)
		return 0;
	if (e->running)
		return -EBUSY;
	ret = ub_fs_replay_log_strict(fs, &blocks);
	if (ret) {
		ub_err(&e->fs.log, "the fsync log (root at logical %llu) cannot be replayed: %s; nothing written",
		       (unsigned long long)log_root, strerror(-ret));
		return ret == -ENOMEM || ret == -EIO ? ret : -EUCLEAN;
	}
	ret = hold_log_blocks(e, &blocks, true);
	if (ret)
		goto out;
	ret = ub_txn_start(e, &t);
	if (!ret)
		t->log_replay = true;
	nsets = ub_replay_nsets(fs);
	for (size_t i = 0; i < nsets && !ret; i++)
		ret = apply_set(t, ub_replay_set(fs, i));
	if (!ret)
		ret = fsw_init_ro(&cc.w, t, BTRFS_FS_TREE_OBJECTID);
	if (!ret)
		ret = collect_ranges(fs, &cc);
	if (!ret)
		ret = ub_replay_for_each_csum(fs, put_csums, &cc);
	if (t) {
		transid = t->transid;
		if (ret)
			ub_txn_abort(t);
		else
			ret = ub_txn_commit(t); /* the new superblock's log_root is 0 */
	}
	if (ret) {
		ub_err(&e->fs.log, "the fsync log (root at logical %llu) could not be replayed into the trees: %s",
		       (unsigned long long)log_root, strerror(-ret));
		goto out;
	}
	hold_log_blocks(e, &blocks, false);
	ub_info(&e->fs.log, "replayed the fsync log into the trees: %zu inodes, %llu checksum runs, committed as "
		"transaction %llu", nsets, (unsigned long long)cc.runs, (unsigned long long)transid);
out:
	free(cc.r);
	ub_fs_drop_replay(fs);
	ub_block_set_free(&blocks);
	return ret;
}
