/* SPDX-License-Identifier: MIT */
/*
 * fsync through the log tree (ub_fsw_fsync): a regular file changed in the
 * running transaction is copied into its subvolume's log tree (every item of
 * the inode: the inode item, its names, xattrs, file extent items, explicit
 * holes where the filesystem has none, and the checksums of the data this
 * transaction wrote), then the log is synced (lib/txn/log_tree.h): its blocks,
 * one flush, the primary superblock. The data itself was written where it
 * stays when the write was made: nothing is written twice.
 *
 * What a log cannot say yet (a directory, names changed in this
 * transaction, hard links, a parent directory or subvolume the last commit
 * does not have, RAID5/6 whose stripes a transaction writes whole) makes
 * the fsync a full commit instead, as the kernel's fallbacks do; the reason
 * is said at debug level.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "fsw/fsw.h"
#include "txn/log_tree.h"

#define FE(field, p) UB_GET(btrfs_file_extent_item, field, p)
#define II(field, p) UB_GET(btrfs_inode_item, field, p)

/* The log tree being filled and what it takes. */
struct logw {
	struct fsw *w;
	struct ub_root *root;
	struct ub_tree_alloc *ta;
};

/* Every item of the log tree in [from, to]. */
static int log_del_range(struct logw *l, const struct ub_key *from, const struct ub_key *to)
{
	for (;;) {
		struct ub_path p;
		struct ub_key k;
		int ret, slot, n = 0, nr;

		ub_path_init(&p);
		ret = ub_tree_search(l->w->tc, l->root, from, &p);
		if (ret == 0 || ret == 1)
			ub_path_key(&p, &k);
		ub_path_release(&p);
		if (ret < 0)
			return ret;
		if (ret == 2 || ub_key_cmp(&k, to) > 0)
			return 0;
		ub_path_init(&p);
		ret = ub_tree_search_slot(l->w->tc, l->ta, l->root, &k, &p, -1, true);
		if (ret == 0) {
			slot = p.slots[0];
			nr = (int)ub_eb_nritems(p.nodes[0]);
			while (slot + n < nr) {
				struct ub_key kk;

				ub_eb_item_key(p.nodes[0], slot + n, &kk);
				if (ub_key_cmp(&kk, to) > 0)
					break;
				n++;
			}
			ret = ub_tree_del_items(l->w->tc, l->ta, l->root, &p, slot, n);
		}
		ub_path_release(&p);
		if (ret)
			return ret > 0 ? -EUCLEAN : ret;
	}
}

static int log_put(struct logw *l, const struct ub_key *k, const void *d, uint32_t size)
{
	return ub_tree_insert_item(l->w->tc, l->ta, l->root, k, d, size);
}

static uint32_t csum_item_max(const struct fsw *w)
{
	/* as the csum tree's items: two item headers' room kept in the leaf */
	return (w->e->fs.vol->nodesize - UB_HEADER_SIZE - 2 * UB_ITEM_SIZE) / w->e->fs.vol->csum_size - 1;
}

/*
 * The checksums of [start, start+len) (whole sectors) from the csum tree into
 * the log: the log's items overlapping the range go first (a stale run of an
 * extent freed and reused in this transaction), then runs of what the csum
 * tree holds, as items of at most a leaf's worth.
 */
static int log_csums(struct logw *l, uint64_t start, uint64_t len)
{
	struct fsw *w = l->w;
	uint32_t cs = w->e->fs.vol->csum_size, ss = w->e->fs.vol->sectorsize, max = csum_item_max(w);
	uint64_t end = start + len, n = len / ss;
	struct ub_key from = { BTRFS_EXTENT_CSUM_OBJECTID, BTRFS_EXTENT_CSUM_KEY, 0 };
	struct ub_key to = { BTRFS_EXTENT_CSUM_OBJECTID, BTRFS_EXTENT_CSUM_KEY, end - 1 };
	struct ub_eroot *cr;
	uint8_t *sums, *have;
	struct ub_path p;
	int ret;

	/* the log's items that reach into the range: from the one at or before its start */
	ub_path_init(&p);
	{
		struct ub_key k = { BTRFS_EXTENT_CSUM_OBJECTID, BTRFS_EXTENT_CSUM_KEY, start };
		uint32_t size;

		ret = ub_tree_search_le(w->tc, l->root, &k, &p);
		from.offset = start;
		if (ret == 0) {
			ub_path_key(&p, &k);
			ub_path_data(&p, &size);
			if (k.objectid == BTRFS_EXTENT_CSUM_OBJECTID && k.type == BTRFS_EXTENT_CSUM_KEY &&
			    k.offset + (uint64_t)(size / cs) * ss > start)
				from.offset = k.offset;
		}
	}
	ub_path_release(&p);
	if (ret < 0)
		return ret;
	ret = log_del_range(l, &from, &to);
	if (ret)
		return ret;
	ret = ub_engine_root(w->e, BTRFS_CSUM_TREE_OBJECTID, &cr);
	if (ret)
		return ret == -ENOENT ? 0 : ret;
	sums = calloc(n ? n : 1, cs);
	have = calloc(n ? n : 1, 1);
	if (!sums || !have) {
		free(sums);
		free(have);
		return -ENOMEM;
	}
	/* gather: the item at or before start, then every one after it below end */
	ub_path_init(&p);
	{
		struct ub_key k = { BTRFS_EXTENT_CSUM_OBJECTID, BTRFS_EXTENT_CSUM_KEY, start };

		ret = ub_tree_search_le(w->tc, &cr->root, &k, &p);
		if (ret == 1) {
			ub_path_release(&p);
			ub_path_init(&p);
			ret = ub_tree_search(w->tc, &cr->root, &k, &p);
			ret = ret == 2 ? 1 : ret < 0 ? ret : 0;
		}
		while (ret == 0) {
			const uint8_t *d;
			uint32_t size;
			uint64_t s, e;

			ub_path_key(&p, &k);
			if (k.objectid != BTRFS_EXTENT_CSUM_OBJECTID || k.type != BTRFS_EXTENT_CSUM_KEY || k.offset >= end)
				break;
			d = ub_path_data(&p, &size);
			s = k.offset;
			e = s + (uint64_t)(size / cs) * ss;
			for (uint64_t a = s > start ? s : start; a < e && a < end; a += ss) {
				memcpy(sums + (a - start) / ss * cs, d + (a - s) / ss * cs, cs);
				have[(a - start) / ss] = 1;
			}
			ret = ub_tree_next(&p);
		}
	}
	ub_path_release(&p);
	if (ret < 0)
		goto out;
	ret = 0;
	/* runs of sectors that have checksums, each as items of at most `max` */
	for (uint64_t i = 0; i < n && !ret;) {
		uint64_t j = i;

		if (!have[i]) {
			i++;
			continue;
		}
		while (j < n && have[j] && j - i < max)
			j++;
		{
			struct ub_key k = { BTRFS_EXTENT_CSUM_OBJECTID, BTRFS_EXTENT_CSUM_KEY, start + i * ss };

			ret = log_put(l, &k, sums + i * cs, (uint32_t)((j - i) * cs));
		}
		i = j;
	}
out:
	free(sums);
	free(have);
	return ret;
}

/* An explicit hole [off, off+len) in the log: a no-holes filesystem has none in the tree, the replay needs one. */
static int log_hole(struct logw *l, uint64_t ino, uint64_t off, uint64_t len)
{
	uint8_t fe[UB_FE_SIZE];
	struct ub_key k = { ino, BTRFS_EXTENT_DATA_KEY, off };

	memset(fe, 0, sizeof(fe));
	UB_SET(btrfs_file_extent_item, generation, fe, l->w->t->transid);
	UB_SET(btrfs_file_extent_item, ram_bytes, fe, len);
	UB_SET(btrfs_file_extent_item, type, fe, BTRFS_FILE_EXTENT_REG);
	UB_SET(btrfs_file_extent_item, num_bytes, fe, len);
	return log_put(l, &k, fe, sizeof(fe));
}

/* Where a file extent item's range ends (an inline one's: its bytes, to the sector). */
static int fe_end(const struct ub_key *k, const uint8_t *d, uint32_t size, uint32_t ss, uint64_t *end)
{
	if (size < UB_FILE_EXTENT_INLINE_DATA_START)
		return -EUCLEAN;
	if (FE(type, d) == BTRFS_FILE_EXTENT_INLINE) {
		*end = (k->offset + FE(ram_bytes, d) + ss - 1) / ss * ss;
		return 0;
	}
	if (size < UB_FE_SIZE)
		return -EUCLEAN;
	*end = k->offset + FE(num_bytes, d);
	return 0;
}

/*
 * Widen [*s, *e) to every file extent item of ino in `root` that reaches
 * into it, so that what is logged of the range is whole items.
 */
static int widen(struct fsw *w, const struct ub_root *root, uint64_t ino, uint64_t *s, uint64_t *e)
{
	uint32_t ss = w->e->fs.vol->sectorsize;
	struct ub_key k = { ino, BTRFS_EXTENT_DATA_KEY, *s };
	struct ub_path p;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_search_le(w->tc, root, &k, &p);
	if (ret == 1) {
		ub_path_release(&p);
		ub_path_init(&p);
		ret = ub_tree_search(w->tc, root, &k, &p);
		ret = ret == 2 ? 1 : ret < 0 ? ret : 0;
	}
	while (ret == 0) {
		const uint8_t *d;
		uint32_t size;
		uint64_t end;

		ub_path_key(&p, &k);
		if (k.objectid > ino || (k.objectid == ino && k.type > BTRFS_EXTENT_DATA_KEY) ||
		    (k.objectid == ino && k.type == BTRFS_EXTENT_DATA_KEY && k.offset >= *e))
			break;
		if (k.objectid == ino && k.type == BTRFS_EXTENT_DATA_KEY) {
			d = ub_path_data(&p, &size);
			ret = fe_end(&k, d, size, ss, &end);
			if (ret)
				break;
			if (end > *s) {
				if (k.offset < *s)
					*s = k.offset;
				if (end > *e)
					*e = end;
			}
		}
		ret = ub_tree_next(&p);
	}
	ub_path_release(&p);
	return ret < 0 ? ret : 0;
}

/*
 * The file extent items of [s, e) as the running transaction has them, into
 * the log: the range first widened (in both trees) to whole items, the log's
 * items there replaced by the tree's, explicit holes between them up to the
 * end of the file (no-holes filesystems), and this transaction's checksums.
 */
static int log_range(struct logw *l, uint64_t ino, const uint8_t *ii, uint64_t s, uint64_t e)
{
	struct fsw *w = l->w;
	uint32_t ss = w->e->fs.vol->sectorsize;
	bool no_holes = w->e->incompat & BTRFS_FEATURE_INCOMPAT_NO_HOLES;
	bool sums = !(II(flags, ii) & (UB_INODE_NODATASUM | UB_INODE_NODATACOW));
	uint64_t isize = II(size, ii), eof = (isize + ss - 1) / ss * ss, covered;
	struct ub_key from, to, k;
	struct ub_tree_iter it;
	const uint8_t *d;
	uint32_t size;
	int ret;

	for (int round = 0; round < 64; round++) {
		uint64_t s0 = s, e0 = e;

		ret = widen(w, &w->fs->root, ino, &s, &e);
		if (!ret)
			ret = widen(w, l->root, ino, &s, &e);
		if (ret)
			return ret;
		if (s == s0 && e == e0)
			break;
	}
	from = (struct ub_key){ ino, BTRFS_EXTENT_DATA_KEY, s };
	to = (struct ub_key){ ino, BTRFS_EXTENT_DATA_KEY, e == UINT64_MAX ? UINT64_MAX : e - 1 };
	ret = log_del_range(l, &from, &to);
	if (ret)
		return ret;
	covered = s;
	ret = ub_tree_iter_start(&it, w->tc, &w->fs->root, &from, &to);
	while (!ret && (ret = ub_tree_iter_next(&it, &k, &d, &size)) == 0) {
		uint64_t end;

		ret = fe_end(&k, d, size, ss, &end);
		if (!ret && no_holes && k.offset > covered)
			ret = log_hole(l, ino, covered, k.offset - covered);
		if (!ret)
			ret = log_put(l, &k, d, size);
		/* this transaction's data: its checksums too (older ones are committed already) */
		if (!ret && sums && FE(type, d) == BTRFS_FILE_EXTENT_REG && FE(disk_bytenr, d) &&
		    FE(generation, d) == w->t->transid) {
			uint64_t ds = FE(disk_bytenr, d), dl = FE(disk_num_bytes, d);

			if (!FE(compression, d)) {
				ds += FE(offset, d);
				dl = FE(num_bytes, d);
			}
			ret = log_csums(l, ds, dl);
		}
		if (!ret && end > covered)
			covered = end;
	}
	ub_tree_iter_end(&it);
	if (ret < 0)
		return ret;
	if (no_holes && covered < eof && covered < e)
		return log_hole(l, ino, covered, (e < eof ? e : eof) - covered);
	return 0;
}

/* The inode item, its names and its xattrs, as the running transaction has them, into the log. */
static int log_meta(struct logw *l, uint64_t ino)
{
	struct fsw *w = l->w;
	struct ub_key from = { ino, BTRFS_INODE_ITEM_KEY, 0 }, to = { ino, BTRFS_XATTR_ITEM_KEY, UINT64_MAX }, k;
	struct ub_tree_iter it;
	const uint8_t *d;
	uint32_t size;
	int ret;

	ret = log_del_range(l, &from, &to);
	if (ret)
		return ret;
	ret = ub_tree_iter_start(&it, w->tc, &w->fs->root, &from, &to);
	while (!ret && (ret = ub_tree_iter_next(&it, &k, &d, &size)) == 0)
		if (k.type == BTRFS_INODE_ITEM_KEY || k.type == BTRFS_INODE_REF_KEY || k.type == BTRFS_INODE_EXTREF_KEY ||
		    k.type == BTRFS_XATTR_ITEM_KEY)
			ret = log_put(l, &k, d, size);
	ub_tree_iter_end(&it);
	return ret < 0 ? ret : 0;
}

/* The item of `key` in the last commit's tree of the subvolume: 0 found, 1 not, <0. */
static int committed_has(struct fsw *w, const struct ub_key *key, uint8_t *buf, uint32_t bufsize, uint32_t *size)
{
	struct ub_path p;
	const uint8_t *d;
	uint32_t sz;
	int ret;

	if (!w->fs->committed.bytenr)
		return 1;
	ub_path_init(&p);
	ret = ub_tree_lookup(w->tc, &w->fs->committed, key, &p, &d, &sz);
	if (ret == 0 && buf) {
		if (sz > bufsize)
			sz = bufsize;
		memcpy(buf, d, sz);
		*size = sz;
	}
	ub_path_release(&p);
	return ret == -ENOENT ? 1 : ret;
}

/*
 * Why this inode cannot be logged (NULL: it can): the log holds what the
 * replay can apply to the last commit's tree without other inodes' help.
 */
static const char *no_log_reason(struct fsw *w, uint64_t ino, const uint8_t *ii, int *err)
{
	struct ub_key from = { ino, BTRFS_INODE_REF_KEY, 0 }, to = { ino, BTRFS_INODE_EXTREF_KEY, UINT64_MAX }, k;
	struct ub_tree_iter it;
	const uint8_t *d;
	uint32_t size;
	int ret, names = 0;
	const char *why = NULL;

	*err = 0;
	if (!S_ISREG(II(mode, ii)))
		return "not a regular file";
	if (II(nlink, ii) != 1)
		return II(nlink, ii) ? "a file of several names" : "an unlinked file";
	if (w->e->incompat & BTRFS_FEATURE_INCOMPAT_RAID56)
		return "RAID5/6 (stripes are written whole at the commit)";
	if (!w->fs->committed.bytenr || w->fs->committed.generation >= w->t->transid)
		return "a subvolume the last commit does not have";
	/* its one name: as the last commit has it, or new in a directory the last commit has */
	ret = ub_tree_iter_start(&it, w->tc, &w->fs->root, &from, &to);
	while (!ret && !why && (ret = ub_tree_iter_next(&it, &k, &d, &size)) == 0) {
		uint8_t old[512];
		uint32_t osize = 0;
		int r;

		names++;
		if (k.type != BTRFS_INODE_REF_KEY) {
			why = "a name in an extended reference";
			break;
		}
		r = committed_has(w, &k, old, sizeof(old), &osize);
		if (r < 0) {
			ret = r;
			break;
		}
		if (r == 0) {
			if (osize != size || memcmp(old, d, size))
				why = "a name changed in this transaction";
			continue;
		}
		/* a new name: its directory must be the last commit's, the name free there */
		{
			struct ub_key dk = { k.offset, BTRFS_INODE_ITEM_KEY, 0 };
			uint8_t dii[UB_II_SIZE];
			uint32_t dsz;

			r = committed_has(w, &dk, dii, sizeof(dii), &dsz);
			if (r < 0) {
				ret = r;
				break;
			}
			if (r > 0) {
				why = "a new name in a directory the last commit does not have";
				break;
			}
			/* the inode itself must be new: an old inode with a new name was renamed or linked */
			dk = (struct ub_key){ ino, BTRFS_INODE_ITEM_KEY, 0 };
			r = committed_has(w, &dk, NULL, 0, NULL);
			if (r < 0) {
				ret = r;
				break;
			}
			if (r == 0) {
				why = "a name changed in this transaction";
				break;
			}
			/* the name was free in the last commit (a replaced name needs the other inode's unlink) */
			if (size >= sizeof(struct btrfs_inode_ref)) {
				uint32_t nl = (uint32_t)UB_GET(btrfs_inode_ref, name_len, d);
				const char *name = (const char *)d + sizeof(struct btrfs_inode_ref);
				uint64_t hash;
				struct ub_key nk;

				if (sizeof(struct btrfs_inode_ref) + nl > size) {
					ret = -EUCLEAN;
					break;
				}
				hash = ub_name_hash(name, nl);
				nk = (struct ub_key){ k.offset, BTRFS_DIR_ITEM_KEY, hash };
				r = committed_has(w, &nk, NULL, 0, NULL);
				if (r < 0) {
					ret = r;
					break;
				}
				if (r == 0)
					why = "a name the last commit gave another inode";
			}
		}
	}
	ub_tree_iter_end(&it);
	if (ret < 0) {
		*err = ret;
		return NULL;
	}
	if (!why && names != 1)
		why = names ? "a file of several names" : "a file without a name";
	return why;
}

/* Wait until the last sealed commit is durable (nothing of this transaction needs logging). */
int ub_fsw_fsync(struct ub_txn *t, uint64_t subvol, uint64_t ino, bool datasync)
{
	struct fsw w;
	uint8_t ii[UB_II_SIZE];
	struct ub_log_changes ch = { 0 };
	const char *why;
	struct logw l;
	int ret, err;

	ret = fsw_init_ro(&w, t, subvol);
	if (!ret)
		ret = fsw_inode_get(&w, ino, ii);
	if (ret)
		return ret;
	(void)datasync; /* what fdatasync may skip is small here: the same log */
	/* not changed since the last commit: durable once that commit is */
	if (II(transid, ii) < t->transid)
		return ub_log_wait_commits(t->e);
	why = no_log_reason(&w, ino, ii, &err);
	if (err)
		return err;
	if (why) {
		ub_logf(&t->e->fs.log, UB_LOG_DEBUG, "fsync of subvol %llu inode %llu: %s: a full commit instead of the log",
			(unsigned long long)subvol, (unsigned long long)ino, why);
		return ub_txn_commit_keep(t);
	}
	l.w = &w;
	ret = ub_log_tree(t, subvol, &l.root, &l.ta);
	if (!ret)
		ret = ub_log_take(t, subvol, ino, &ch);
	if (!ret)
		ret = log_meta(&l, ino);
	if (!ret) {
		struct ub_key k = { ino, BTRFS_INODE_ITEM_KEY, 0 };
		int old = committed_has(&w, &k, NULL, 0, NULL);

		/*
		 * changes not noted range by range, or a file new in this transaction
		 * logged for the first time: all of it; else the ranges changed since it
		 * was last logged (or since the transaction began)
		 */
		bool all = old < 0 ? false : ch.whole || (old == 1 && !ch.logged);

		if (old < 0)
			ret = old;
		else if (all)
			ret = log_range(&l, ino, ii, 0, UINT64_MAX);
		for (size_t i = 0; !ret && !all && i < ch.n; i++)
			ret = log_range(&l, ino, ii, ch.r[i].s, ch.r[i].e);
	}
	ub_log_changes_free(&ch);
	if (!ret)
		ret = ub_log_sync(t);
	if (ret == -EROFS || ret == -ENOMEM)
		return ret;
	if (ret) {
		/* the log could not be made or written: the commit makes it durable instead (its reason said) */
		return ub_txn_commit_keep(t);
	}
	return 0;
}
