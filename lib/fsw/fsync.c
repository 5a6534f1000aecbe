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
 * Names: an inode's names now go in with its INODE_REF items (up to
 * NAMES_MAX of them: hard links too), a name it lost through its old
 * directory's logged index range, and an inode that held one of its new
 * names at the last commit is logged as well. A directory logs the index
 * ranges that changed since it was last logged, and what their entries name.
 *
 * A directory made in this transaction is logged whole when fsynced (or
 * named by a logged range), and as a parent only (its inode and names) when
 * a logged name is in it.
 *
 * What a log cannot say yet (a directory moved below a directory moved in
 * this transaction, extended references, a subvolume the last commit does not have, RAID5/6
 * whose stripes a transaction writes whole) makes the fsync a full commit
 * instead, as the kernel's fallbacks do; the reason is said at debug level.
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

/* One name of an inode: its directory, the name, its index there. */
struct name {
	uint64_t dir, index;
	uint32_t len;
	char name[UB_NAME_LEN];
};

/*
 * The names of ino in `root` (INODE_REF items only): up to `max` of them in
 * out, their count in *n. -EOPNOTSUPP for an extended reference (the log
 * leaves those to a commit).
 */
static int names_of(struct fsw *w, const struct ub_root *root, uint64_t ino, struct name *out, int max, int *n)
{
	struct ub_key from = { ino, BTRFS_INODE_REF_KEY, 0 }, to = { ino, BTRFS_INODE_EXTREF_KEY, UINT64_MAX }, k;
	struct ub_tree_iter it;
	const uint8_t *d;
	uint32_t size;
	int ret;

	*n = 0;
	if (!root->bytenr)
		return 0;
	ret = ub_tree_iter_start(&it, w->tc, root, &from, &to);
	while (!ret && (ret = ub_tree_iter_next(&it, &k, &d, &size)) == 0) {
		if (k.type != BTRFS_INODE_REF_KEY) {
			ret = -EOPNOTSUPP;
			break;
		}
		for (uint32_t pos = 0; pos + sizeof(struct btrfs_inode_ref) <= size;) {
			uint32_t nl = (uint32_t)UB_GET(btrfs_inode_ref, name_len, d + pos);

			if (pos + sizeof(struct btrfs_inode_ref) + nl > size || nl > UB_NAME_LEN) {
				ret = -EUCLEAN;
				break;
			}
			if (*n < max) {
				out[*n].dir = k.offset;
				out[*n].index = UB_GET(btrfs_inode_ref, index, d + pos);
				out[*n].len = nl;
				memcpy(out[*n].name, d + pos + sizeof(struct btrfs_inode_ref), nl);
			}
			(*n)++;
			pos += (uint32_t)sizeof(struct btrfs_inode_ref) + nl;
		}
	}
	ub_tree_iter_end(&it);
	return ret < 0 ? ret : 0;
}

static bool same_name(const struct name *a, const struct name *b)
{
	return a->dir == b->dir && a->index == b->index && a->len == b->len && !memcmp(a->name, b->name, a->len);
}

/* The names an inode has: at most NAMES_MAX of them are followed, more leave it to a commit. */
#define NAMES_MAX 16
struct names {
	int n;
	struct name v[NAMES_MAX];
};

static bool names_have(const struct names *s, const struct name *x)
{
	for (int i = 0; i < s->n && i < NAMES_MAX; i++)
		if (same_name(&s->v[i], x))
			return true;
	return false;
}

static bool names_equal(const struct names *a, const struct names *b)
{
	if (a->n != b->n)
		return false;
	for (int i = 0; i < a->n && i < NAMES_MAX; i++)
		if (!names_have(b, &a->v[i]))
			return false;
	return true;
}

/* The names of ino now (the running transaction) and at the last commit, on the heap (they are large). */
static int names_now_old(struct fsw *w, uint64_t ino, struct names **now, struct names **old)
{
	int ret;

	*now = malloc(sizeof(**now));
	*old = malloc(sizeof(**old));
	if (!*now || !*old)
		return -ENOMEM;
	ret = names_of(w, &w->fs->root, ino, (*now)->v, NAMES_MAX, &(*now)->n);
	if (!ret)
		ret = names_of(w, &w->fs->committed, ino, (*old)->v, NAMES_MAX, &(*old)->n);
	return ret;
}

/*
 * The inode the last commit had under (dir, name): 0 and its number, 1 when
 * the name was not there or named a subvolume, <0.
 */
static int committed_lookup(struct fsw *w, uint64_t dir, const char *name, uint32_t len, uint64_t *ino)
{
	struct ub_key key = { dir, BTRFS_DIR_ITEM_KEY, ub_name_hash(name, len) }, loc;
	struct ub_path p;
	const uint8_t *d;
	uint32_t size, pos, es;
	int ret;

	if (!w->fs->committed.bytenr)
		return 1;
	ub_path_init(&p);
	ret = ub_tree_lookup(w->tc, &w->fs->committed, &key, &p, &d, &size);
	if (ret == 0)
		ret = fsw_dir_item_find(d, size, name, len, &pos, &es);
	if (ret == 0) {
		ub_key_read(&loc, d + pos + offsetof(struct btrfs_dir_item, location));
		if (loc.type == BTRFS_INODE_ITEM_KEY)
			*ino = loc.objectid;
		else
			ret = 1;
	}
	ub_path_release(&p);
	return ret == -ENOENT ? 1 : ret;
}

/* What one fsync logs: the log tree, the inodes done so far, and why a commit is needed instead. */
struct fsync_ctx {
	struct logw l;
	uint64_t *done;
	size_t ndone, capdone;
	const char *why;
	int depth;
};

static int fs_exists_committed(struct fsw *w, uint64_t ino, uint8_t *ii)
{
	struct ub_key k = { ino, BTRFS_INODE_ITEM_KEY, 0 };
	uint32_t sz;

	return committed_has(w, &k, ii, ii ? UB_II_SIZE : 0, &sz);
}

/*
 * A directory's inode item in the log when the log has none: generation 0,
 * "it exists" only (the replay keeps the committed item and applies the
 * logged entries and index ranges to it), as the kernel's LOG_INODE_EXISTS.
 */
static int log_dir_exists(struct logw *l, uint64_t dir)
{
	struct ub_key k = { dir, BTRFS_INODE_ITEM_KEY, 0 };
	uint8_t ii[UB_II_SIZE];
	struct ub_path p;
	const uint8_t *d;
	uint32_t size;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_lookup(l->w->tc, l->root, &k, &p, &d, &size);
	ub_path_release(&p);
	if (ret != -ENOENT)
		return ret;
	ret = fsw_inode_get(l->w, dir, ii);
	if (ret)
		return ret;
	UB_SET(btrfs_inode_item, generation, ii, 0);
	UB_SET(btrfs_inode_item, size, ii, 0);
	return log_put(l, &k, ii, sizeof(ii));
}

/*
 * The entries of dir with index in [a, b) as the running transaction has
 * them, and an index range item saying so: the replay deletes what the last
 * commit has there and the log does not. Widened over the log's ranges it
 * overlaps, whose entries it replaces.
 */
static int log_dir_range(struct logw *l, uint64_t dir, uint64_t *pa, uint64_t *pb)
{
	uint64_t a = *pa, b = *pb;
	struct fsw *w = l->w;
	struct ub_key from, to, k;
	struct ub_tree_iter it;
	const uint8_t *d;
	uint32_t size;
	uint8_t end[sizeof(struct btrfs_dir_log_item)];
	int ret;

	/* the log's ranges that meet [a, b): one range of them all */
	for (bool again = true; again;) {
		struct ub_path p;

		again = false;
		ub_path_init(&p);
		k = (struct ub_key){ dir, BTRFS_DIR_LOG_INDEX_KEY, b ? b - 1 : 0 };
		ret = ub_tree_search_le(w->tc, l->root, &k, &p);
		while (ret == 0) {
			uint64_t lo, hi;

			ub_path_key(&p, &k);
			if (k.objectid != dir || k.type != BTRFS_DIR_LOG_INDEX_KEY)
				break;
			d = ub_path_data(&p, &size);
			if (size < sizeof(end)) {
				ret = -EUCLEAN;
				break;
			}
			lo = k.offset;
			hi = UB_GET(btrfs_dir_log_item, end, d);
			/* ranges that only touch [a, b) stay apart: merging would rewrite their entries */
			if (hi < a && hi != UINT64_MAX)
				break;
			if (lo < a || (hi != UINT64_MAX && hi + 1 > b) || hi == UINT64_MAX) {
				if (lo < a)
					a = lo;
				if (hi == UINT64_MAX)
					b = UINT64_MAX;
				else if (hi + 1 > b)
					b = hi + 1;
				again = true;
			}
			ret = ub_tree_prev(&p);
		}
		ub_path_release(&p);
		if (ret < 0)
			return ret;
	}
	from = (struct ub_key){ dir, BTRFS_DIR_LOG_INDEX_KEY, a };
	to = (struct ub_key){ dir, BTRFS_DIR_LOG_INDEX_KEY, b - 1 };
	ret = log_del_range(l, &from, &to);
	from.type = to.type = BTRFS_DIR_INDEX_KEY;
	if (!ret)
		ret = log_del_range(l, &from, &to);
	if (ret)
		return ret;
	ret = ub_tree_iter_start(&it, w->tc, &w->fs->root, &from, &to);
	while (!ret && (ret = ub_tree_iter_next(&it, &k, &d, &size)) == 0)
		ret = log_put(l, &k, d, size);
	ub_tree_iter_end(&it);
	if (ret < 0)
		return ret;
	UB_SET(btrfs_dir_log_item, end, end, b - 1);
	k = (struct ub_key){ dir, BTRFS_DIR_LOG_INDEX_KEY, a };
	*pa = a;
	*pb = b;
	return log_put(l, &k, end, sizeof(end));
}

/*
 * The index `name` has in dir now: 0 and *index, 1 when dir has no such name
 * now (or it names a subvolume).
 */
static int index_now(struct fsw *w, uint64_t dir, const char *name, uint32_t len, uint64_t *index)
{
	struct ub_key loc;
	struct names *v;
	uint8_t type;
	int ret;

	ret = fsw_lookup(w, dir, name, len, &loc, &type);
	if (ret == -ENOENT || (!ret && loc.type != BTRFS_INODE_ITEM_KEY))
		return 1;
	if (ret)
		return ret;
	v = malloc(sizeof(*v));
	if (!v)
		return -ENOMEM;
	ret = names_of(w, &w->fs->root, loc.objectid, v->v, NAMES_MAX, &v->n);
	if (!ret) {
		ret = -EUCLEAN; /* an entry without its back reference */
		for (int i = 0; i < v->n && i < NAMES_MAX; i++)
			if (v->v[i].dir == dir && v->v[i].len == len && !memcmp(v->v[i].name, name, len)) {
				*index = v->v[i].index;
				ret = 0;
			}
		if (ret && v->n > NAMES_MAX)
			ret = -EOPNOTSUPP;
	}
	free(v);
	return ret;
}

static int log_entry_inode(struct fsync_ctx *c, uint64_t ino);
static int entry_target(const uint8_t *d, uint32_t size, uint64_t *ino);

/*
 * A logged index range [a, b) of dir (log_dir_range, which widens it): every
 * inode an entry there names now or named at the last commit must come out of
 * the replay with the names it has now (log_entry_inode), or a commit is due.
 */
static int log_range_checked(struct fsync_ctx *c, uint64_t dir, uint64_t a, uint64_t b)
{
	struct fsw *w = c->l.w;
	int ret = log_dir_range(&c->l, dir, &a, &b);

	for (int side = 0; side < 2 && !ret && !c->why; side++) {
		const struct ub_root *root = side ? &w->fs->committed : &w->fs->root;
		struct ub_key from = { dir, BTRFS_DIR_INDEX_KEY, a };
		struct ub_key to = { dir, BTRFS_DIR_INDEX_KEY, b ? b - 1 : 0 }, k;
		struct ub_tree_iter it;
		const uint8_t *d;
		uint32_t size;

		if (!root->bytenr)
			continue;
		ret = ub_tree_iter_start(&it, w->tc, root, &from, &to);
		while (!ret && !c->why && (ret = ub_tree_iter_next(&it, &k, &d, &size)) == 0) {
			uint64_t ino;
			int r = entry_target(d, size, &ino);

			if (r < 0)
				ret = r;
			else if (r > 0)
				c->why = "a subvolume's entry";
			else
				ret = log_entry_inode(c, ino);
		}
		ub_tree_iter_end(&it);
		if (ret > 0)
			ret = 0;
	}
	return ret;
}

static int log_one(struct fsync_ctx *c, uint64_t ino);
static int log_new_parent(struct fsync_ctx *c, uint64_t dir);

/*
 * A name an inode lost (nm: its directory, name and index there, at the
 * last commit or in the log): its directory's range of that index, so the
 * replay drops it; and when the directory has the name again at another
 * index (a rename over it), that entry too, or the replay would give the name
 * to neither inode (rename(2) replaces it atomically).
 */
static int log_lost_name(struct fsync_ctx *c, const struct name *nm)
{
	uint64_t idx;
	int ret = log_dir_exists(&c->l, nm->dir);

	if (!ret)
		ret = log_range_checked(c, nm->dir, nm->index, nm->index + 1);
	if (ret || c->why)
		return ret;
	ret = index_now(c->l.w, nm->dir, nm->name, nm->len, &idx);
	if (ret == -EOPNOTSUPP) {
		c->why = "a replaced name whose inode has more names than the log follows";
		return 0;
	}
	if (ret || idx == nm->index)
		return ret > 0 ? 0 : ret;
	return log_range_checked(c, nm->dir, idx, idx + 1);
}


static int mark_done(struct fsync_ctx *c, uint64_t ino, bool *was)
{
	*was = false;
	for (size_t i = 0; i < c->ndone; i++)
		if (c->done[i] == ino) {
			*was = true;
			return 0;
		}
	if (c->ndone == c->capdone) {
		size_t cap = c->capdone ? c->capdone * 2 : 16;
		uint64_t *v = realloc(c->done, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		c->done = v;
		c->capdone = cap;
	}
	c->done[c->ndone++] = ino;
	return 0;
}

/*
 * Names of ino the log holds from an earlier fsync of this transaction and
 * that are not in `keep` (NULL: none is kept): their directories' index
 * ranges are logged again, now without them, so the replay adds no stale
 * entry.
 */
static int forget_logged_names(struct fsync_ctx *c, uint64_t ino, const struct names *keep)
{
	struct names *v = malloc(sizeof(*v));
	int ret;

	if (!v)
		return -ENOMEM;
	ret = names_of(c->l.w, c->l.root, ino, v->v, NAMES_MAX, &v->n);
	if (ret == -EOPNOTSUPP || (!ret && v->n > NAMES_MAX)) {
		c->why = "names in the log that cannot be followed";
		ret = 0;
		v->n = 0;
	}
	for (int i = 0; !ret && !c->why && i < v->n; i++) {
		if (keep && names_have(keep, &v->v[i]))
			continue;
		ret = log_lost_name(c, &v->v[i]);
	}
	free(v);
	return ret;
}

/*
 * The names of ino, as the replay must make them. Its names now go in with
 * its INODE_REF items (log_meta): the replay adds each entry the directory
 * lacks, unlinking what held the name at the last commit, so such an inode is
 * logged too, with the names it has now (the kernel's "conflicting inodes":
 * else a file renamed away from the name would lose its last link). A name
 * the last commit had and the inode lost (a rename, an unlink of one of its
 * links) is dropped through its old directory's index range.
 */
/*
 * Whether dir and every directory above it have the names the last commit
 * gave them (or were made in this transaction below such directories): a
 * directory given a name in dir can then be logged without the replay building
 * a cycle (an ancestor moved in this transaction and not logged may have been
 * the moved directory's own child at the last commit). 1 yes, 0 no, <0.
 */
static int stable_ancestors(struct fsw *w, uint64_t dir)
{
	for (int depth = 0; depth < 256; depth++) {
		struct names *now = NULL, *old = NULL;
		bool same = false, fresh = false;
		uint64_t up = 0;
		int ret;

		if (dir == BTRFS_FIRST_FREE_OBJECTID)
			return 1;
		ret = names_now_old(w, dir, &now, &old);
		if (!ret && now->n == 1) {
			same = names_equal(now, old);
			fresh = old->n == 0;
			up = now->v[0].dir;
		}
		free(now);
		free(old);
		if (ret)
			return ret == -EOPNOTSUPP ? 0 : ret;
		if (!same && !fresh)
			return 0;
		dir = up;
	}
	return 0;
}

static int log_names(struct fsync_ctx *c, uint64_t ino, bool isdir)
{
	struct fsw *w = c->l.w;
	struct names *now = NULL, *old = NULL;
	int ret;

	if (ino == BTRFS_FIRST_FREE_OBJECTID)
		return 0; /* a subvolume's top directory: its name is the subvolume's link */
	ret = names_now_old(w, ino, &now, &old);
	if (ret == -EOPNOTSUPP) {
		c->why = "a name in an extended reference";
		ret = 0;
		goto out;
	}
	if (ret)
		goto out;
	if (now->n == 0 || now->n > NAMES_MAX || old->n > NAMES_MAX) {
		c->why = now->n ? "a file of more names than the log follows" : "a file without a name";
		goto out;
	}
	ret = forget_logged_names(c, ino, now);
	for (int i = 0; !ret && !c->why && i < now->n; i++) {
		const struct name *nm = &now->v[i];
		uint64_t other;

		if (names_have(old, nm))
			continue;
		if (isdir && old->n) {
			/* (a directory new in this transaction was nobody's ancestor at the last commit) */
			ret = stable_ancestors(w, nm->dir);
			if (ret == 0)
				c->why = "a directory moved below a directory moved in this transaction";
			if (ret <= 0)
				break;
		}
		/*
		 * a new name: the replay adds the entry to its directory, which a
		 * directory made in this transaction must get from the log too
		 */
		ret = fs_exists_committed(w, nm->dir, NULL);
		if (ret > 0) {
			ret = log_new_parent(c, nm->dir);
			continue;
		}
		if (!ret)
			ret = committed_lookup(w, nm->dir, nm->name, nm->len, &other);
		if (ret == 0 && other != ino)
			ret = log_entry_inode(c, other);
		else if (ret > 0)
			ret = 0;
	}
	for (int i = 0; !ret && !c->why && i < old->n; i++) {
		if (names_have(now, &old->v[i]))
			continue;
		ret = log_lost_name(c, &old->v[i]);
	}
out:
	free(now);
	free(old);
	return ret;
}

/* A file, symlink or special file: its items, and the data ranges changed since it was last logged. */
static int log_nondir(struct fsync_ctx *c, uint64_t ino, const uint8_t *ii)
{
	struct logw *l = &c->l;
	struct fsw *w = l->w;
	struct ub_log_changes ch = { 0 };
	int ret, old;

	if (II(nlink, ii) == 0) {
		c->why = "an unlinked file";
		return 0;
	}
	ret = log_names(c, ino, false);
	if (ret || c->why)
		return ret;
	ret = ub_log_take(w->t, w->subvol, ino, &ch);
	if (!ret)
		ret = log_meta(l, ino);
	old = ret ? 0 : fs_exists_committed(w, ino, NULL);
	if (old < 0)
		ret = old;
	if (!ret) {
		/*
		 * changes not noted range by range, or an inode new in this transaction
		 * logged for the first time: all of it; else the ranges changed since it
		 * was last logged (or since the transaction began)
		 */
		bool all = ch.whole || (old == 1 && !ch.logged) || !S_ISREG(II(mode, ii));

		if (all)
			ret = log_range(l, ino, ii, 0, UINT64_MAX);
		for (size_t i = 0; !ret && !all && i < ch.n; i++)
			ret = log_range(l, ino, ii, ch.r[i].s, ch.r[i].e);
	}
	ub_log_changes_free(&ch);
	return ret;
}

/* Whether the entry `d` of a directory (a dir item) names an inode (not a subvolume): its number. */
static int entry_target(const uint8_t *d, uint32_t size, uint64_t *ino)
{
	struct ub_key loc;

	if (size < UB_DI_SIZE)
		return -EUCLEAN;
	ub_key_read(&loc, d + offsetof(struct btrfs_dir_item, location));
	if (loc.type != BTRFS_INODE_ITEM_KEY)
		return 1;
	*ino = loc.objectid;
	return 0;
}

/*
 * An inode an entry of a logged directory range names (or named): it must
 * exist after the replay with the names it has now. One the last commit has
 * with the same one name needs nothing; another is logged too (a new or
 * renamed file), and a new or moved directory is left to a commit.
 */
/* Whether the log holds ino's inode item, whole (not "it exists"), as ii is now. */
static bool logged_item_is(struct fsync_ctx *c, uint64_t ino, const uint8_t *ii)
{
	struct ub_key k = { ino, BTRFS_INODE_ITEM_KEY, 0 };
	struct ub_path p;
	const uint8_t *d;
	uint32_t size;
	bool same;

	ub_path_init(&p);
	same = ub_tree_lookup(c->l.w->tc, c->l.root, &k, &p, &d, &size) == 0 && size == UB_II_SIZE &&
	       UB_GET(btrfs_inode_item, generation, d) != 0 && !memcmp(d, ii, UB_II_SIZE);
	ub_path_release(&p);
	return same;
}

static int log_entry_inode(struct fsync_ctx *c, uint64_t ino)
{
	struct fsw *w = c->l.w;
	uint8_t ii[UB_II_SIZE];
	struct names *now = NULL, *old = NULL;
	bool same;
	int ret;

	ret = fsw_inode_get(w, ino, ii);
	if (ret == -ENOENT)
		return 0; /* gone: the replay drops its entry, and the inode with its last name */
	if (ret)
		return ret;
	if (II(nlink, ii) == 0)
		return 0;
	ret = names_now_old(w, ino, &now, &old);
	same = !ret && now->n <= NAMES_MAX && names_equal(now, old);
	if (!ret && !same && now->n <= NAMES_MAX) {
		/* logged before with these names and this inode item: the log says it already */
		ret = names_of(w, c->l.root, ino, old->v, NAMES_MAX, &old->n);
		same = !ret && names_equal(now, old) && logged_item_is(c, ino, ii);
	}
	free(now);
	free(old);
	if (ret == -EOPNOTSUPP) {
		c->why = "an entry's inode has an extended reference";
		return 0;
	}
	if (ret || same)
		return ret;
	/* a new directory is logged whole, a moved one with its new names (log_dir, log_names) */
	return log_one(c, ino);
}

/* The directory counts as logged from now on: a later change of its names logs it again (relog_names). */
static int mark_logged(struct fsw *w, uint64_t ino)
{
	struct ub_log_changes ch;
	int ret = ub_log_take(w->t, w->subvol, ino, &ch);

	ub_log_changes_free(&ch);
	return ret;
}

/*
 * A directory made in this transaction that holds a logged name: its inode
 * item and its own names (a new parent of it with them), as the kernel logs
 * the new ancestors of an fsynced inode. Its other entries stay out: the
 * replay makes it with the entries the log's names give it.
 */
static int log_new_parent(struct fsync_ctx *c, uint64_t dir)
{
	bool was;
	int ret = mark_done(c, dir, &was);

	if (ret || was)
		return ret;
	if (++c->depth > 64) {
		c->why = "too many inodes to log";
		return 0;
	}
	ret = log_names(c, dir, true);
	if (!ret && !c->why)
		ret = mark_logged(c->l.w, dir);
	if (!ret && !c->why)
		ret = log_meta(&c->l, dir);
	c->depth--;
	return ret;
}

/* A directory: its entries in the index ranges changed since it was last logged, and what they name. */
static int log_dir(struct fsync_ctx *c, uint64_t dir, const uint8_t *ii)
{
	struct logw *l = &c->l;
	struct fsw *w = l->w;
	struct ub_log_changes ch = { 0 };
	int ret;

	ret = fs_exists_committed(w, dir, NULL);
	if (ret < 0)
		return ret;
	if (ret) {
		/*
		 * made in this transaction: logged whole, as the kernel logs a new
		 * directory (every entry, one index range over all of them, and
		 * what they name: new files whole, new directories the same way)
		 */
		ret = log_names(c, dir, true);
		if (!ret && !c->why)
			ret = mark_logged(w, dir);
		if (!ret && !c->why)
			ret = log_range_checked(c, dir, 0, UINT64_MAX);
		if (!ret && !c->why)
			ret = log_meta(l, dir);
		return ret;
	}
	ret = log_names(c, dir, true);
	if (ret || c->why)
		return ret;
	ret = ub_log_take(w->t, w->subvol, dir, &ch);
	if (!ret && ch.whole)
		c->why = "a directory whose changes were not noted";
	for (size_t i = 0; !ret && !c->why && i < ch.n; i++)
		ret = log_range_checked(c, dir, ch.r[i].s, ch.r[i].e);
	ub_log_changes_free(&ch);
	if (!ret && !c->why)
		ret = log_meta(l, dir);
	return ret;
}

/* One inode into the log, once per fsync; c->why set when only a commit can make it durable. */
static int log_one(struct fsync_ctx *c, uint64_t ino)
{
	struct fsw *w = c->l.w;
	uint8_t ii[UB_II_SIZE];
	bool was;
	int ret;

	ret = mark_done(c, ino, &was);
	if (ret || was)
		return ret;
	if (++c->depth > 64) {
		c->why = "too many inodes to log";
		return 0;
	}
	ret = fsw_inode_get(w, ino, ii);
	if (!ret)
		ret = S_ISDIR(II(mode, ii)) ? log_dir(c, ino, ii) : log_nondir(c, ino, ii);
	c->depth--;
	return ret;
}

/*
 * An fsynced file without a name that the last commit has: the names it had
 * there are dropped (their directories' ranges), its items leave the log, as
 * the kernel logs the parents of an inode unlinked in the transaction; the
 * replay then deletes it, and the directories lose the names the fsync saw gone.
 */
static int log_unlinked(struct fsync_ctx *c, uint64_t ino)
{
	struct ub_key from = { ino, 0, 0 }, to = { ino, UINT8_MAX, UINT64_MAX };
	struct names *old = malloc(sizeof(*old));
	bool was;
	int ret;

	if (!old)
		return -ENOMEM;
	ret = mark_done(c, ino, &was);
	if (!ret)
		ret = names_of(c->l.w, &c->l.w->fs->committed, ino, old->v, NAMES_MAX, &old->n);
	if (ret == -EOPNOTSUPP || (!ret && old->n > NAMES_MAX)) {
		c->why = "an unlinked file of more names than the log follows";
		ret = 0;
		old->n = 0;
	}
	for (int i = 0; !ret && !c->why && i < old->n; i++)
		ret = log_lost_name(c, &old->v[i]);
	free(old);
	if (!ret && !c->why)
		ret = forget_logged_names(c, ino, NULL);
	if (!ret && !c->why)
		ret = log_del_range(&c->l, &from, &to);
	return ret;
}

/*
 * Logged inodes whose names changed since: logged again (their names now, and
 * the old ones' ranges), or, gone or without a name, out of the log.
 */
static int relog_names(struct fsync_ctx *c, uint64_t subvol)
{
	struct fsw *w = c->l.w;
	struct ub_log_inode *v;
	size_t n;
	int ret = ub_log_take_relog(w->t, &v, &n);

	if (ret == -ENOMEM) {
		c->why = "the names of logged inodes could not be tracked";
		return 0;
	}
	for (size_t i = 0; !ret && !c->why && i < n; i++) {
		uint8_t ii[UB_II_SIZE];

		if (v[i].subvol != subvol) {
			c->why = "a logged inode of another subvolume was renamed";
			break;
		}
		ret = fsw_inode_get(w, v[i].ino, ii);
		if (ret == -ENOENT || (!ret && II(nlink, ii) == 0)) {
			/*
			 * unlinked: what the log holds of it goes, and so do the entries
			 * logged ranges hold of it (the last commit's name, if any, stays)
			 */
			struct ub_key from = { v[i].ino, 0, 0 }, to = { v[i].ino, UINT8_MAX, UINT64_MAX };
			bool was;

			ret = mark_done(c, v[i].ino, &was);
			if (!ret)
				ret = forget_logged_names(c, v[i].ino, NULL);
			if (!ret && !c->why)
				ret = log_del_range(&c->l, &from, &to);
			continue;
		}
		if (!ret)
			ret = log_one(c, v[i].ino);
	}
	free(v);
	return ret;
}

/*
 * Whether metadata lives in RAID5/6 block groups: the log's blocks would share
 * parity stripes with tree blocks the commit writes later. Data on RAID5/6 is
 * written when the write is made, and the log sync closes its stripes
 * (ub_alloc_close_stripes), so it takes the log.
 */
static bool meta_parity(struct ub_engine *e)
{
	struct ub_bg_info bg;

	for (uint64_t pos = 0; ub_alloc_next_bg(e->alloc, pos, &bg) == 0; pos = bg.start + bg.length)
		if ((bg.flags & BTRFS_BLOCK_GROUP_METADATA) && (bg.flags & BTRFS_BLOCK_GROUP_RAID56_MASK))
			return true;
	return false;
}

int ub_fsw_fsync(struct ub_txn *t, uint64_t subvol, uint64_t ino, bool datasync)
{
	struct fsync_ctx c = { 0 };
	struct fsw w;
	uint8_t ii[UB_II_SIZE];
	int ret;

	/*
	 * A commit being written (it gave the writer lock back) first: the log
	 * follows it, what it holds is "the last commit" below, and its roots
	 * are published by then (read here without the roots lock: no other
	 * commit can be sealed while this thread holds the writer lock).
	 */
	ret = ub_log_wait_commits(t->e);
	if (!ret)
		ret = fsw_init_ro(&w, t, subvol);
	if (!ret)
		ret = fsw_inode_get(&w, ino, ii);
	if (ret)
		return ret;
	(void)datasync; /* what fdatasync may skip is small here: the same log */
	/* not changed since the last commit: durable, as that commit is */
	if (II(transid, ii) < t->transid)
		return 0;
	/*
	 * No name left (unlinked while open, an O_TMPFILE not linked yet) and
	 * none at the last commit: a crash takes it whatever is written, there is
	 * nothing to make durable (a later link gets its own fsync).
	 */
	if (II(nlink, ii) == 0) {
		ret = fs_exists_committed(&w, ino, NULL);
		if (ret)
			return ret > 0 ? 0 : ret;
	}
	if ((w.e->incompat & BTRFS_FEATURE_INCOMPAT_RAID56) && meta_parity(w.e))
		c.why = "RAID5/6 metadata (the commit writes this transaction's tree blocks into stripes a log "
			"block may share: a write hole under the durable log)";
	else if (!w.fs->committed.bytenr || w.fs->committed.generation >= t->transid)
		c.why = "a subvolume the last commit does not have";
	c.l.w = &w;
	if (!c.why)
		ret = ub_log_tree(t, subvol, &c.l.root, &c.l.ta);
	if (!ret && !c.why)
		ret = relog_names(&c, subvol);
	if (!ret && !c.why)
		ret = II(nlink, ii) ? log_one(&c, ino) : log_unlinked(&c, ino);
	free(c.done);
	if (!ret && c.why) {
		ub_logf(&t->e->fs.log, UB_LOG_DEBUG, "fsync of subvol %llu inode %llu: %s: a full commit instead of the log",
			(unsigned long long)subvol, (unsigned long long)ino, c.why);
		return ub_txn_commit_keep(t);
	}
	if (!ret)
		ret = ub_log_sync(t);
	/* a device that failed a write fails the commit too: the caller makes the mount read-only */
	if (ret == -EIO || ret == -EROFS || ret == -ENOMEM)
		return ret;
	if (ret) {
		/* the log could not be made or written: the commit makes it durable instead (its reason said) */
		return ub_txn_commit_keep(t);
	}
	return 0;
}
