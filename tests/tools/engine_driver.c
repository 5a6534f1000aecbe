/* SPDX-License-Identifier: MIT */
/*
 * Test driver for the write engine (tests/integration/test_engine.py):
 * creates and deletes empty files in the top directory of the FS tree
 * through transactions, committing every M operations.
 *
 *   engine_driver [--check-writes] open DEV...
 *   engine_driver [--check-writes] create PREFIX N EVERY DEV...
 *   engine_driver [--check-writes] delete PREFIX FROM TO STEP EVERY DEV...
 *   engine_driver [--check-writes] snapshot NAME DEV...
 *   engine_driver [--check-writes] snapcycle PREFIX COUNT FILES DEV...
 *   engine_driver [--check-writes] subvols-create PREFIX FIRST LAST FILES DEV...
 *
 * snapcycle: COUNT times, a snapshot PREFIX<k> of the FS tree (committed),
 * then FILES new files PREFIX<k>_NNNNNN in the FS tree (committed): each
 * round copies blocks the snapshots share. subvols-create: FILES new files
 * PREFIXNNNNNN in each subvolume FIRST..LAST, one commit per subvolume.
 *
 * --abort-every K: every K-th transaction of create/delete is aborted instead
 * of committed (its changes never reach the disk; the next one starts from
 * the last commit).
 *
 * create and delete work in the top directory of subvolume --subvol ID
 * (default 5, the FS tree). snapshot makes a snapshot of the FS tree named
 * NAME in its top directory (ub_tree_copy_root, ROOT_ITEM, ROOT_REF and
 * ROOT_BACKREF, DIR_ITEM and DIR_INDEX, the UUID tree entry) and commits.
 *
 * Names are PREFIX followed by the number in six digits. --check-writes
 * wraps every device in a recorder and, for every commit, checks that no
 * write landed on a block the previous superblock reaches (every tree walked
 * from it, every copy) outside the superblock mirrors.
 *
 * --crash-dir DIR --crash-cuts K: the devices are recorded (lib/dev's
 * recorder) from the start; afterwards DIR/base_devD.img hold the images as
 * they were, and for K cut points spread over the recorded writes and
 * flushes DIR/cutC_devD.img hold what a crash after that many entries could
 * have left (every write before the device's last flush, and a seeded
 * choice of the pending ones, kept or dropped, reordered). One line per cut:
 * "cut C entries N of M".
 *
 * --fault N --fault-kinds rwf: after the open, the Nth I/O of the listed
 * kinds (read, write, flush; counted across every device) fails with -EIO,
 * once (lib/dev's faulty device). N = 0 only counts: "io R W F" is printed.
 *
 * Exit: 0 done, 1 a check failed or an operation failed, 2 the engine refused
 * to open the filesystem (the message says why).
 */
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <uuid/uuid.h>
#include "ubtrfs/fs.h"
#include "txn/txn.h"
#include "crash_cuts.h"

#define TOP_DIR BTRFS_FIRST_FREE_OBJECTID

/* ---- write recorder ---- */

struct wr {
	const char *path;
	uint64_t off, len;
};

struct recorder {
	struct wr *w;
	size_t n, cap;
};

struct rec_dev {
	struct ub_dev *inner;
	struct recorder *rec;
	const char *path;
};

static int rec_read(struct ub_dev *dev, void *buf, size_t len, uint64_t off)
{
	struct rec_dev *r = dev->priv;
	return ub_dev_read(r->inner, buf, len, off);
}

static int rec_write(struct ub_dev *dev, const void *buf, size_t len, uint64_t off)
{
	struct rec_dev *r = dev->priv;
	struct recorder *rec = r->rec;

	if (rec->n == rec->cap) {
		size_t cap = rec->cap ? rec->cap * 2 : 1024;
		struct wr *w = realloc(rec->w, cap * sizeof(*w));
		if (!w)
			return -ENOMEM;
		rec->w = w;
		rec->cap = cap;
	}
	rec->w[rec->n++] = (struct wr){ r->path, off, len };
	return ub_dev_write(r->inner, buf, len, off);
}

static int rec_flush(struct ub_dev *dev)
{
	struct rec_dev *r = dev->priv;
	return ub_dev_flush(r->inner);
}

static void rec_release(struct ub_dev *dev)
{
	struct rec_dev *r = dev->priv;
	ub_dev_close(r->inner);
	free(r);
}

static const struct ub_dev_ops rec_ops = { "recorder", rec_read, rec_write, rec_flush, rec_release };

/* ---- what the committed superblock reaches ---- */

struct phys {
	const char *path;
	uint64_t off, len;
	uint64_t logical;
};

struct reach {
	struct ub_engine *e;
	struct phys *p;
	size_t n, cap;
};

static int reach_block(void *arg, const struct ub_eb *eb)
{
	struct reach *rc = arg;
	int copies = ub_volume_num_copies(rc->e->fs.vol, eb->start);
	const struct ub_chunk *c = ub_volume_find_chunk(rc->e->fs.vol, eb->start);

	/* parity profiles: the copies past the first are rebuilt, not stored */
	if (c && c->profile && c->profile->nparity)
		copies = 1;
	for (int m = 1; m <= copies; m++) {
		uint64_t devid, phys;
		const char *path;

		if (ub_volume_map(rc->e->fs.vol, eb->start, m, &devid, &phys, &path) || !path)
			continue;
		if (rc->n == rc->cap) {
			size_t cap = rc->cap ? rc->cap * 2 : 4096;
			struct phys *p = realloc(rc->p, cap * sizeof(*p));
			if (!p)
				return -ENOMEM;
			rc->p = p;
			rc->cap = cap;
		}
		rc->p[rc->n++] = (struct phys){ path, phys, eb->len, eb->start };
	}
	return 0;
}

static int walk_committed(struct ub_engine *e, struct reach *rc)
{
	struct ub_block_set seen = { 0 };
	struct ub_root rt = e->fs.root_tree->committed, ct = e->fs.chunk_tree->committed;
	struct ub_key key = { 0, 0, 0 };
	struct ub_path p;
	int ret;

	rc->e = e;
	rc->n = 0;
	ret = ub_tree_walk(&e->fs.tc, &rt, &seen, 1, reach_block, rc);
	if (!ret)
		ret = ub_tree_walk(&e->fs.tc, &ct, &seen, 3, reach_block, rc);
	ub_path_init(&p);
	if (!ret) {
		ret = ub_tree_search(&e->fs.tc, &rt, &key, &p);
		ret = ret == 2 ? (ub_eb_nritems(p.nodes[0]) ? 0 : 1) : ret == 1 ? 0 : ret;
	}
	while (ret == 0) {
		const uint8_t *d;
		uint32_t size;

		ub_path_key(&p, &key);
		d = ub_path_data(&p, &size);
		if (key.type == BTRFS_ROOT_ITEM_KEY && size >= offsetof(struct btrfs_root_item, generation_v2)) {
			struct ub_root r = { key.objectid, UB_GET(btrfs_root_item, bytenr, d),
					     UB_GET(btrfs_root_item, generation, d),
					     (uint8_t)UB_GET(btrfs_root_item, level, d) };
			/* snapshots share blocks: one set per tree */
			struct ub_block_set own = { 0 };
			ret = ub_tree_walk(&e->fs.tc, &r, &own, key.objectid, reach_block, rc);
			ub_block_set_free(&own);
			if (ret)
				break;
		}
		ret = ub_tree_next(&p);
	}
	ub_path_release(&p);
	ub_block_set_free(&seen);
	return ret < 0 ? ret : 0;
}

static struct recorder g_rec;
static struct reach g_reach;
static bool g_check;
static long g_abort_every;
static bool g_missing_ok;
static unsigned long long g_txns, g_aborts;
static unsigned long long g_writes_checked, g_violations, g_commits;

/* After a commit: none of its writes may have touched what the previous superblock reached. */
static int check_writes(void)
{
	for (size_t i = 0; i < g_rec.n; i++) {
		const struct wr *w = &g_rec.w[i];

		if (crash_is_super(w->off, w->len))
			continue;
		g_writes_checked++;
		for (size_t j = 0; j < g_reach.n; j++) {
			const struct phys *p = &g_reach.p[j];
			if (strcmp(p->path, w->path) == 0 && w->off < p->off + p->len && p->off < w->off + w->len) {
				fprintf(stderr, "engine_driver: commit %llu wrote %s [%llu, +%llu), over the committed tree "
						"block at logical %llu (physical %llu)\n",
					g_commits, w->path, (unsigned long long)w->off, (unsigned long long)w->len,
					(unsigned long long)p->logical, (unsigned long long)p->off);
				g_violations++;
				break;
			}
		}
	}
	g_rec.n = 0;
	return 0;
}

/* ---- items ---- */

static void now(struct ub_timespec *ts)
{
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	ts->sec = t.tv_sec;
	ts->nsec = (uint32_t)t.tv_nsec;
}

#define II_SET(field, p, v) UB_SET(btrfs_inode_item, field, p, v)

static void set_time(uint8_t *ii, size_t off, const struct ub_timespec *ts)
{
	UB_SET(btrfs_timespec, sec, ii + off, (uint64_t)ts->sec);
	UB_SET(btrfs_timespec, nsec, ii + off, ts->nsec);
}

struct fsctx {
	struct ub_engine *e;
	struct ub_eroot *fs;
	struct ub_txn *t;
	uint64_t next_ino, next_index;
};

static int max_key(struct fsctx *c, uint64_t objectid, uint8_t type, uint64_t *out)
{
	struct ub_key key = { objectid, type, UINT64_MAX };
	struct ub_path p;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_search_le(&c->e->fs.tc, &c->fs->root, &key, &p);
	if (ret == 0) {
		ub_path_key(&p, &key);
		*out = key.objectid == objectid && key.type == type ? key.offset : 0;
	} else if (ret == 1) {
		*out = 0;
		ret = 0;
	}
	ub_path_release(&p);
	return ret;
}

static int init_counters(struct fsctx *c)
{
	struct ub_key key = { BTRFS_LAST_FREE_OBJECTID, 255, UINT64_MAX };
	struct ub_path p;
	uint64_t idx;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_search_le(&c->e->fs.tc, &c->fs->root, &key, &p);
	if (ret < 0) {
		ub_path_release(&p);
		return ret;
	}
	ub_path_key(&p, &key);
	ub_path_release(&p);
	c->next_ino = key.objectid >= TOP_DIR ? key.objectid + 1 : TOP_DIR + 1;
	ret = max_key(c, TOP_DIR, BTRFS_DIR_INDEX_KEY, &idx);
	if (ret)
		return ret;
	c->next_index = idx >= 2 ? idx + 1 : 2;
	return 0;
}

/* The top directory's inode: size changes by `dsize`, times and transid now. */
static int touch_dir(struct fsctx *c, int64_t dsize, const struct ub_timespec *ts)
{
	struct ub_key key = { TOP_DIR, BTRFS_INODE_ITEM_KEY, 0 };
	struct ub_path p;
	uint32_t size;
	uint8_t *ii;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_search_slot(&c->e->fs.tc, ub_txn_ta(c->t), &c->fs->root, &key, &p, 0, true);
	if (ret == 0) {
		ii = ub_path_data_mut(&p, &size);
		II_SET(size, ii, (uint64_t)((int64_t)UB_GET(btrfs_inode_item, size, ii) + dsize));
		II_SET(transid, ii, c->t->transid);
		II_SET(sequence, ii, UB_GET(btrfs_inode_item, sequence, ii) + 1);
		set_time(ii, offsetof(struct btrfs_inode_item, mtime), ts);
		set_time(ii, offsetof(struct btrfs_inode_item, ctime), ts);
		ub_path_mark_dirty(&p);
	}
	ub_path_release(&p);
	return ret > 0 ? -ENOENT : ret;
}

static void dir_item(uint8_t *d, uint64_t ino, uint64_t transid, const char *name, uint16_t len)
{
	struct ub_key loc = { ino, BTRFS_INODE_ITEM_KEY, 0 };

	ub_key_write(d + offsetof(struct btrfs_dir_item, location), &loc);
	UB_SET(btrfs_dir_item, transid, d, transid);
	UB_SET(btrfs_dir_item, data_len, d, 0);
	UB_SET(btrfs_dir_item, name_len, d, len);
	UB_SET(btrfs_dir_item, type, d, BTRFS_FT_REG_FILE);
	memcpy(d + sizeof(struct btrfs_dir_item), name, len);
}

static int create_file(struct fsctx *c, const char *name)
{
	struct ub_tree_ctx *tc = &c->e->fs.tc;
	struct ub_tree_alloc *ta = ub_txn_ta(c->t);
	uint16_t len = (uint16_t)strlen(name);
	uint32_t dsize = (uint32_t)sizeof(struct btrfs_dir_item) + len;
	uint64_t ino = c->next_ino++, index = c->next_index++;
	uint8_t ii[sizeof(struct btrfs_inode_item)] = { 0 }, ref[sizeof(struct btrfs_inode_ref) + 255], di[300];
	struct ub_key key;
	struct ub_timespec ts;
	int ret;

	now(&ts);
	II_SET(generation, ii, c->t->transid);
	II_SET(transid, ii, c->t->transid);
	II_SET(nlink, ii, 1);
	II_SET(mode, ii, S_IFREG | 0644);
	set_time(ii, offsetof(struct btrfs_inode_item, atime), &ts);
	set_time(ii, offsetof(struct btrfs_inode_item, ctime), &ts);
	set_time(ii, offsetof(struct btrfs_inode_item, mtime), &ts);
	set_time(ii, offsetof(struct btrfs_inode_item, otime), &ts);
	key = (struct ub_key){ ino, BTRFS_INODE_ITEM_KEY, 0 };
	ret = ub_tree_insert_item(tc, ta, &c->fs->root, &key, ii, sizeof(ii));
	if (ret)
		return ret;
	UB_SET(btrfs_inode_ref, index, ref, index);
	UB_SET(btrfs_inode_ref, name_len, ref, len);
	memcpy(ref + sizeof(struct btrfs_inode_ref), name, len);
	key = (struct ub_key){ ino, BTRFS_INODE_REF_KEY, TOP_DIR };
	ret = ub_tree_insert_item(tc, ta, &c->fs->root, &key, ref, (uint32_t)sizeof(struct btrfs_inode_ref) + len);
	if (ret)
		return ret;
	dir_item(di, ino, c->t->transid, name, len);
	key = (struct ub_key){ TOP_DIR, BTRFS_DIR_ITEM_KEY, ub_name_hash(name, len) };
	ret = ub_tree_insert_item(tc, ta, &c->fs->root, &key, di, dsize);
	if (ret == -EEXIST) {
		/* a hash collision: the names share one DIR_ITEM, one after the other */
		struct ub_path p;
		uint32_t size;
		uint8_t *d;

		ub_path_init(&p);
		ret = ub_tree_search_slot(tc, ta, &c->fs->root, &key, &p, (int)dsize, true);
		if (ret == 0)
			ret = ub_tree_extend_item(tc, ta, &c->fs->root, &p, dsize);
		if (ret == 0) {
			d = ub_path_data_mut(&p, &size);
			memcpy(d + size - dsize, di, dsize);
			ub_path_mark_dirty(&p);
		}
		ub_path_release(&p);
		ret = ret > 0 ? -EUCLEAN : ret;
	}
	if (ret)
		return ret;
	key = (struct ub_key){ TOP_DIR, BTRFS_DIR_INDEX_KEY, index };
	ret = ub_tree_insert_item(tc, ta, &c->fs->root, &key, di, dsize);
	if (ret)
		return ret;
	return touch_dir(c, 2 * (int64_t)len, &ts);
}

static int del_key(struct fsctx *c, const struct ub_key *key)
{
	struct ub_path p;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_search_slot(&c->e->fs.tc, ub_txn_ta(c->t), &c->fs->root, key, &p, -1, true);
	if (ret == 0)
		ret = ub_tree_del_items(&c->e->fs.tc, ub_txn_ta(c->t), &c->fs->root, &p, p.slots[0], 1);
	ub_path_release(&p);
	return ret > 0 ? -ENOENT : ret;
}

/* Every item of inode `ino` goes (its last link went); file extents drop their data references. */
static int drop_inode_items(struct fsctx *c, uint64_t ino)
{
	for (;;) {
		struct ub_key key = { ino, 0, 0 }, k;
		struct ub_path p;
		const uint8_t *d;
		uint32_t size;
		int ret;

		ub_path_init(&p);
		ret = ub_tree_search(&c->e->fs.tc, &c->fs->root, &key, &p);
		if (ret == 0 || ret == 1) {
			ub_path_key(&p, &k);
			d = ub_path_data(&p, &size);
			ret = k.objectid == ino ? 0 : 1;
			if (!ret && k.type == BTRFS_EXTENT_DATA_KEY && size >= sizeof(struct btrfs_file_extent_item) &&
			    UB_GET(btrfs_file_extent_item, type, d) != BTRFS_FILE_EXTENT_INLINE &&
			    UB_GET(btrfs_file_extent_item, disk_bytenr, d))
				ret = ub_dref_add_data(c->t->refs, UB_GET(btrfs_file_extent_item, disk_bytenr, d),
						       UB_GET(btrfs_file_extent_item, disk_num_bytes, d),
						       c->fs->root.objectid, ino,
						       k.offset - UB_GET(btrfs_file_extent_item, offset, d), 0, -1, 0);
		} else if (ret == 2) {
			ret = 1;
		}
		ub_path_release(&p);
		if (ret)
			return ret > 0 ? 0 : ret;
		ret = del_key(c, &k);
		if (ret)
			return ret;
	}
}

static int delete_file(struct fsctx *c, const char *name)
{
	struct ub_tree_ctx *tc = &c->e->fs.tc;
	struct ub_tree_alloc *ta = ub_txn_ta(c->t);
	uint16_t len = (uint16_t)strlen(name);
	struct ub_key key = { TOP_DIR, BTRFS_DIR_ITEM_KEY, ub_name_hash(name, len) }, loc;
	struct ub_timespec ts;
	struct ub_path p;
	uint32_t size, pos = 0, esize = 0;
	uint64_t index = 0, ino = 0;
	const uint8_t *d;
	int ret;

	/* the DIR_ITEM: drop our entry (the whole item when it is the only one) */
	ub_path_init(&p);
	ret = ub_tree_search_slot(tc, ta, &c->fs->root, &key, &p, -1, true);
	if (ret > 0)
		ret = -ENOENT;
	if (ret == 0) {
		d = ub_path_data(&p, &size);
		ret = -ENOENT;
		while (pos + sizeof(struct btrfs_dir_item) <= size) {
			uint32_t nl = (uint32_t)UB_GET(btrfs_dir_item, name_len, d + pos);
			esize = (uint32_t)sizeof(struct btrfs_dir_item) + nl +
				(uint32_t)UB_GET(btrfs_dir_item, data_len, d + pos);
			if (nl == len && pos + esize <= size &&
			    memcmp(d + pos + sizeof(struct btrfs_dir_item), name, len) == 0) {
				ub_key_read(&loc, d + pos + offsetof(struct btrfs_dir_item, location));
				ino = loc.objectid;
				ret = 0;
				break;
			}
			pos += esize;
		}
	}
	if (ret == 0) {
		if (esize == size) {
			ret = ub_tree_del_items(tc, ta, &c->fs->root, &p, p.slots[0], 1);
		} else {
			uint8_t *m = ub_path_data_mut(&p, &size);
			memmove(m + pos, m + pos + esize, size - pos - esize);
			ub_tree_truncate_item(tc, &p, size - esize, true);
			ub_path_mark_dirty(&p);
		}
	}
	ub_path_release(&p);
	if (ret)
		return ret;
	key = (struct ub_key){ ino, BTRFS_INODE_REF_KEY, TOP_DIR };
	ub_path_init(&p);
	ret = ub_tree_lookup(tc, &c->fs->root, &key, &p, &d, &size);
	if (ret == 0 && size >= sizeof(struct btrfs_inode_ref))
		index = UB_GET(btrfs_inode_ref, index, d);
	ub_path_release(&p);
	if (ret)
		return ret;
	ret = del_key(c, &key);
	if (!ret) {
		key = (struct ub_key){ TOP_DIR, BTRFS_DIR_INDEX_KEY, index };
		ret = del_key(c, &key);
	}
	if (!ret)
		ret = drop_inode_items(c, ino);
	if (ret)
		return ret;
	now(&ts);
	return touch_dir(c, -2 * (int64_t)len, &ts);
}

static int commit(struct fsctx *c)
{
	int ret;

	if (g_abort_every && ++g_txns % (unsigned long long)g_abort_every == 0) {
		ub_txn_abort(c->t);
		c->t = NULL;
		g_aborts++;
		/* the aborted transaction's inode numbers and indexes may be taken again */
		return init_counters(c);
	}
	if (g_check) {
		ret = walk_committed(c->e, &g_reach);
		if (ret) {
			ub_txn_abort(c->t);
			c->t = NULL;
			return ret;
		}
		g_rec.n = 0;
	}
	ret = ub_txn_commit(c->t);
	c->t = NULL;
	g_commits++;
	if (!ret && g_check)
		ret = check_writes();
	return ret;
}


/* ---- snapshot of the FS tree ---- */

static int insert_dir_entry(struct fsctx *c, const char *name, const struct ub_key *loc, uint8_t type,
			    uint64_t index)
{
	struct ub_tree_ctx *tc = &c->e->fs.tc;
	struct ub_tree_alloc *ta = ub_txn_ta(c->t);
	uint16_t len = (uint16_t)strlen(name);
	uint32_t dsize = (uint32_t)sizeof(struct btrfs_dir_item) + len;
	uint8_t di[300];
	struct ub_key key;
	int ret;

	ub_key_write(di + offsetof(struct btrfs_dir_item, location), loc);
	UB_SET(btrfs_dir_item, transid, di, c->t->transid);
	UB_SET(btrfs_dir_item, data_len, di, 0);
	UB_SET(btrfs_dir_item, name_len, di, len);
	UB_SET(btrfs_dir_item, type, di, type);
	memcpy(di + sizeof(struct btrfs_dir_item), name, len);
	key = (struct ub_key){ TOP_DIR, BTRFS_DIR_ITEM_KEY, ub_name_hash(name, len) };
	ret = ub_tree_insert_item(tc, ta, &c->fs->root, &key, di, dsize);
	if (ret)
		return ret;
	key = (struct ub_key){ TOP_DIR, BTRFS_DIR_INDEX_KEY, index };
	return ub_tree_insert_item(tc, ta, &c->fs->root, &key, di, dsize);
}

static int snapshot(struct fsctx *c, const char *name)
{
	struct ub_engine *e = c->e;
	struct ub_tree_ctx *tc = &e->fs.tc;
	struct ub_tree_alloc *ta;
	struct ub_key key = { BTRFS_LAST_FREE_OBJECTID, BTRFS_ROOT_ITEM_KEY, UINT64_MAX }, loc;
	uint8_t ri[sizeof(struct btrfs_root_item)] = { 0 }, ref[sizeof(struct btrfs_root_ref) + 255];
	uint16_t len = (uint16_t)strlen(name);
	struct ub_root snap;
	struct ub_eroot *er;
	struct ub_timespec ts;
	struct ub_path p;
	const uint8_t *d;
	uint32_t size;
	uint64_t id, index = c->next_index++;
	uuid_t uuid;
	int ret;

	ret = ub_txn_start(e, &c->t);
	if (ret)
		return ret;
	ta = ub_txn_ta(c->t);
	/* the new tree's id: one past the highest subvolume id in the root tree */
	ub_path_init(&p);
	ret = ub_tree_search_le(tc, &e->fs.root_tree->root, &key, &p);
	if (ret == 0)
		ub_path_key(&p, &key);
	ub_path_release(&p);
	if (ret < 0)
		return ret;
	id = ret == 0 && key.objectid >= BTRFS_FIRST_FREE_OBJECTID ? key.objectid + 1 : BTRFS_FIRST_FREE_OBJECTID;
	/* the source's ROOT_ITEM is the template (its inode, flags, byte limit) */
	key = (struct ub_key){ BTRFS_FS_TREE_OBJECTID, BTRFS_ROOT_ITEM_KEY, c->fs->item_offset };
	ub_path_init(&p);
	ret = ub_tree_lookup(tc, &e->fs.root_tree->root, &key, &p, &d, &size);
	if (ret == 0)
		memcpy(ri, d, size < sizeof(ri) ? size : sizeof(ri));
	ub_path_release(&p);
	if (ret)
		return ret;
	ret = ub_tree_copy_root(tc, ta, &c->fs->root, id, &snap);
	if (ret)
		return ret;
	now(&ts);
	uuid_generate(uuid);
	memcpy(ri + offsetof(struct btrfs_root_item, parent_uuid), ri + offsetof(struct btrfs_root_item, uuid), 16);
	memcpy(ri + offsetof(struct btrfs_root_item, uuid), uuid, 16);
	memset(ri + offsetof(struct btrfs_root_item, received_uuid), 0, 16);
	UB_SET(btrfs_root_item, bytenr, ri, snap.bytenr);
	UB_SET(btrfs_root_item, generation, ri, snap.generation);
	UB_SET(btrfs_root_item, generation_v2, ri, snap.generation);
	UB_SET(btrfs_root_item, level, ri, snap.level);
	UB_SET(btrfs_root_item, refs, ri, 1);
	UB_SET(btrfs_root_item, last_snapshot, ri, c->t->transid);
	UB_SET(btrfs_root_item, flags, ri, 0);
	UB_SET(btrfs_root_item, drop_level, ri, 0);
	memset(ri + offsetof(struct btrfs_root_item, drop_progress), 0, sizeof(struct btrfs_disk_key));
	UB_SET(btrfs_root_item, ctransid, ri, c->t->transid);
	UB_SET(btrfs_root_item, otransid, ri, c->t->transid);
	UB_SET(btrfs_root_item, stransid, ri, 0);
	UB_SET(btrfs_root_item, rtransid, ri, 0);
	set_time(ri, offsetof(struct btrfs_root_item, ctime), &ts);
	set_time(ri, offsetof(struct btrfs_root_item, otime), &ts);
	memset(ri + offsetof(struct btrfs_root_item, stime), 0, 2 * sizeof(struct btrfs_timespec));
	key = (struct ub_key){ id, BTRFS_ROOT_ITEM_KEY, c->t->transid };
	ret = ub_tree_insert_item(tc, ta, &e->fs.root_tree->root, &key, ri, sizeof(ri));
	if (!ret)
		ret = ub_engine_add_root(e, &snap, c->t->transid, c->t->transid, &er);
	if (ret)
		return ret;
	/* ROOT_REF (parent -> child) and ROOT_BACKREF (child -> parent), the same payload */
	UB_SET(btrfs_root_ref, dirid, ref, TOP_DIR);
	UB_SET(btrfs_root_ref, sequence, ref, index);
	UB_SET(btrfs_root_ref, name_len, ref, len);
	memcpy(ref + sizeof(struct btrfs_root_ref), name, len);
	key = (struct ub_key){ BTRFS_FS_TREE_OBJECTID, BTRFS_ROOT_REF_KEY, id };
	ret = ub_tree_insert_item(tc, ta, &e->fs.root_tree->root, &key, ref, (uint32_t)sizeof(struct btrfs_root_ref) + len);
	if (ret)
		return ret;
	key = (struct ub_key){ id, BTRFS_ROOT_BACKREF_KEY, BTRFS_FS_TREE_OBJECTID };
	ret = ub_tree_insert_item(tc, ta, &e->fs.root_tree->root, &key, ref, (uint32_t)sizeof(struct btrfs_root_ref) + len);
	if (ret)
		return ret;
	/* the name in the source's top directory (the snapshot does not hold itself: copied before) */
	loc = (struct ub_key){ id, BTRFS_ROOT_ITEM_KEY, UINT64_MAX };
	ret = insert_dir_entry(c, name, &loc, BTRFS_FT_DIR, index);
	if (!ret)
		ret = touch_dir(c, 2 * (int64_t)len, &ts);
	if (ret)
		return ret;
	/* the UUID tree entry, when the filesystem has a UUID tree */
	ret = ub_engine_root(e, BTRFS_UUID_TREE_OBJECTID, &er);
	if (ret == 0) {
		uint8_t v[8];
		ub_put_le(v, 8, id);
		key = (struct ub_key){ ub_le64(uuid), BTRFS_UUID_KEY_SUBVOL, ub_le64(uuid + 8) };
		ret = ub_tree_insert_item(tc, ta, &er->root, &key, v, 8);
	} else if (ret == -ENOENT) {
		ret = 0;
	}
	if (ret)
		return ret;
	printf("snapshot %s id %llu\n", name, (unsigned long long)id);
	return commit(c);
}

static int create_n(struct fsctx *c, const char *prefix, long n)
{
	int ret = ub_txn_start(c->e, &c->t);

	for (long i = 0; !ret && i < n; i++) {
		char name[256];
		snprintf(name, sizeof(name), "%s%06ld", prefix, i);
		ret = create_file(c, name);
	}
	if (ret) {
		if (c->t)
			ub_txn_abort(c->t);
		c->t = NULL;
		return ret;
	}
	return commit(c);
}

static int snapcycle(struct fsctx *c, const char *prefix, long count, long files)
{
	int ret = 0;

	for (long k = 1; !ret && k <= count; k++) {
		char name[240];

		snprintf(name, sizeof(name), "%s%ld", prefix, k);
		ret = snapshot(c, name);
		if (!ret)
			ret = init_counters(c);
		snprintf(name, sizeof(name), "%s%ld_", prefix, k);
		if (!ret)
			ret = create_n(c, name, files);
	}
	return ret;
}

static int subvols_create(struct fsctx *c, const char *prefix, uint64_t first, uint64_t last, long files)
{
	int ret = 0;

	for (uint64_t id = first; !ret && id <= last; id++) {
		ret = ub_engine_root(c->e, id, &c->fs);
		if (!ret)
			ret = init_counters(c);
		if (!ret)
			ret = create_n(c, prefix, files);
	}
	return ret;
}

static void usage(void)
{
	fprintf(stderr, "usage: engine_driver [--check-writes] open DEV...\n"
			"       engine_driver [--check-writes] create PREFIX N EVERY DEV...\n"
			"       engine_driver [--check-writes] delete PREFIX FROM TO STEP EVERY DEV...\n"
			"       engine_driver [--check-writes] snapshot NAME DEV...\n"
			"       engine_driver [--check-writes] snapcycle PREFIX COUNT FILES DEV...\n"
			"       engine_driver [--check-writes] subvols-create PREFIX FIRST LAST FILES DEV...\n"
			"options: --subvol ID (create, delete: the subvolume, default 5)\n"
			"         --abort-every K (create, delete: abort every K-th transaction)\n"
			"         --missing-ok (delete: skip names that are not there)\n"
			"         --crash-dir DIR --crash-cuts K (record, then write K crash images into DIR)\n"
			"         --fault N [--fault-kinds rwf] (the Nth I/O after the open fails; 0: count)\n");
	exit(1);
}

int main(int argc, char **argv)
{
	struct ub_dev *devs[16];
	struct fsctx c = { 0 };
	const char *op, *prefix = NULL;
	long from = 0, to = 0, step = 1, every = 1;
	uint64_t subvol = BTRFS_FS_TREE_OBJECTID;
	const char *crash_dir = NULL;
	long crash_cuts = 0;
	struct ub_rec_log *rlog = NULL;
	struct ub_fault_plan *plan = NULL;
	long fault_nth = -1;
	unsigned fault_mask = UB_FAULT_WRITE | UB_FAULT_FLUSH;
	int i = 1, ndevs, ret, nargs;

	for (; i < argc && argv[i][0] == '-' && argv[i][1] == '-'; i++) {
		if (strcmp(argv[i], "--check-writes") == 0)
			g_check = true;
		else if (strcmp(argv[i], "--fault") == 0 && i + 1 < argc)
			fault_nth = atol(argv[++i]);
		else if (strcmp(argv[i], "--fault-kinds") == 0 && i + 1 < argc) {
			const char *k = argv[++i];
			fault_mask = (strchr(k, 'r') ? UB_FAULT_READ : 0) | (strchr(k, 'w') ? UB_FAULT_WRITE : 0) |
				     (strchr(k, 'f') ? UB_FAULT_FLUSH : 0);
		} else if (strcmp(argv[i], "--crash-dir") == 0 && i + 1 < argc)
			crash_dir = argv[++i];
		else if (strcmp(argv[i], "--crash-cuts") == 0 && i + 1 < argc)
			crash_cuts = atol(argv[++i]);
		else if (strcmp(argv[i], "--missing-ok") == 0)
			g_missing_ok = true;
		else if (strcmp(argv[i], "--abort-every") == 0 && i + 1 < argc)
			g_abort_every = atol(argv[++i]);
		else if (strcmp(argv[i], "--subvol") == 0 && i + 1 < argc)
			subvol = strtoull(argv[++i], NULL, 0);
		else
			usage();
	}
	if (i >= argc)
		usage();
	op = argv[i++];
	nargs = strcmp(op, "open") == 0 ? 0 : strcmp(op, "create") == 0 ? 3 : strcmp(op, "delete") == 0 ? 5
		: strcmp(op, "snapshot") == 0 ? 1 : strcmp(op, "snapcycle") == 0 ? 3
		: strcmp(op, "subvols-create") == 0 ? 4 : -1;
	if (nargs < 0 || argc - i < nargs + 1)
		usage();
	if (nargs) {
		prefix = argv[i];
		if (nargs == 3) {
			to = atol(argv[i + 1]);
			every = atol(argv[i + 2]);
		} else if (nargs == 4) {
			from = atol(argv[i + 1]);
			to = atol(argv[i + 2]);
			step = atol(argv[i + 3]);
		} else if (nargs == 5) {
			from = atol(argv[i + 1]);
			to = atol(argv[i + 2]);
			step = atol(argv[i + 3]);
			every = atol(argv[i + 4]);
		}
		i += nargs;
	}
	if (every < 1 || step < 1 || strlen(prefix ? prefix : "") > 200)
		usage();
	ndevs = argc - i;
	if (ndevs > 16 || (crash_dir && crash_cuts < 1))
		usage();
	if (crash_dir) {
		if (crash_save_bases(crash_dir, argv + i, ndevs) || ub_rec_log_new(&rlog))
			return 1;
	}
	if (fault_nth >= 0 && ub_fault_plan_new(&plan))
		return 1;
	for (int d = 0; d < ndevs; d++) {
		struct ub_dev *inner;
		struct rec_dev *r;

		ret = ub_dev_open(argv[i + d], true, &inner);
		if (!ret && rlog)
			ret = ub_dev_open_recorder(inner, rlog, d, &inner);
		if (!ret && plan)
			ret = ub_dev_open_faulty(inner, plan, &inner);
		if (ret) {
			fprintf(stderr, "engine_driver: %s: %s\n", argv[i + d], strerror(-ret));
			return 1;
		}
		if (!g_check) {
			devs[d] = inner;
			continue;
		}
		r = calloc(1, sizeof(*r));
		if (!r)
			return 1;
		*r = (struct rec_dev){ inner, &g_rec, argv[i + d] };
		ret = ub_dev_create(argv[i + d], &rec_ops, r, inner->size, true, &devs[d]);
		if (ret)
			return 1;
	}
	ret = ub_engine_open_devs(devs, ndevs, NULL, &c.e);
	if (ret) {
		fprintf(stderr, "engine_driver: cannot open for writing: %s\n", strerror(-ret));
		return 2;
	}
	if (plan)
		ub_fault_plan_arm(plan, fault_mask, (uint64_t)fault_nth, false);
	if (strcmp(op, "open") == 0)
		goto done;
	ret = ub_engine_root(c.e, strcmp(op, "snapshot") == 0 ? BTRFS_FS_TREE_OBJECTID : subvol, &c.fs);
	if (!ret)
		ret = init_counters(&c);
	if (!ret && strcmp(op, "snapcycle") == 0) {
		ret = snapcycle(&c, prefix, to, every);
		goto out;
	}
	if (!ret && strcmp(op, "subvols-create") == 0) {
		ret = subvols_create(&c, prefix, (uint64_t)from, (uint64_t)to, step);
		goto out;
	}
	if (!ret && strcmp(op, "snapshot") == 0) {
		ret = snapshot(&c, prefix);
		if (ret)
			fprintf(stderr, "engine_driver: snapshot %s: %s\n", prefix, strerror(-ret));
		goto out;
	}
	for (long n = from, done_ops = 0; !ret && n < to; n += step) {
		char name[256];

		if (!c.t)
			ret = ub_txn_start(c.e, &c.t);
		if (ret)
			break;
		snprintf(name, sizeof(name), "%s%06ld", prefix, n);
		ret = nargs == 3 ? create_file(&c, name) : delete_file(&c, name);
		if (ret == -ENOENT && nargs == 5 && g_missing_ok) {
			/* no such name (its search may have copied blocks, which changes nothing visible): not an operation */
			ret = 0;
			continue;
		}
		if (ret) {
			fprintf(stderr, "engine_driver: %s %s: %s\n", op, name, strerror(-ret));
			break;
		}
		if (++done_ops % every == 0)
			ret = commit(&c);
	}
	if (!ret && c.t)
		ret = commit(&c);
out:
	if (c.t)
		ub_txn_abort(c.t);
done:
	printf("generation %llu commits %llu writes_checked %llu violations %llu aborts %llu\n",
	       (unsigned long long)c.e->generation, g_commits, g_writes_checked, g_violations, g_aborts);
	if (plan)
		printf("io %llu %llu %llu injected %llu\n", (unsigned long long)ub_fault_plan_count(plan, UB_FAULT_READ),
		       (unsigned long long)ub_fault_plan_count(plan, UB_FAULT_WRITE),
		       (unsigned long long)ub_fault_plan_count(plan, UB_FAULT_FLUSH),
		       (unsigned long long)ub_fault_plan_injected(plan));
	ub_engine_close(c.e);
	ub_fault_plan_put(plan);
	if (rlog && !ret) {
		ret = crash_make_cuts(rlog, crash_dir, ndevs, crash_cuts, 0);
		if (ret)
			fprintf(stderr, "engine_driver: crash images: %s\n", strerror(-ret));
	}
	ub_rec_log_put(rlog);
	free(g_rec.w);
	free(g_reach.p);
	if (ret) {
		fprintf(stderr, "engine_driver: %s\n", strerror(-ret));
		return 1;
	}
	return g_violations ? 1 : 0;
}
