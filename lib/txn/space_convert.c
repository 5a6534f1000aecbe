/* SPDX-License-Identifier: MIT */
/*
 * A filesystem without a free space tree, opened for writing: it keeps the
 * v1 space cache (one file per block group in the root tree, which only the
 * kernel writes) or no cache at all. The allocator loaded its free space
 * from the extent tree; the engine keeps only the free space tree. So the
 * first transaction makes one, as the kernel's `mount -o space_cache=v2`
 * does (the kernel has deprecated v1): the tree created, every block group's
 * items written at the commit from the allocator's free set, the v1 cache
 * files removed with their extents, the superblock's cache_generation set to
 * 0 (the kernel's rule: nonzero only while v1 is in use) and the
 * FREE_SPACE_TREE and FREE_SPACE_TREE_VALID bits set. It commits before
 * anything else is written, so the disk holds the old filesystem or the
 * converted one, nothing between.
 *
 * Without the conversion (ub_engine_open_raw's callers: repair, rescue), a
 * commit leaves a v1 cache stale but harmless: its cache_generation no longer
 * equals the superblock's generation, and the kernel then rebuilds every
 * cache instead of loading one.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "txn.h"

#define FE_GET(f, p) UB_GET(btrfs_file_extent_item, f, p)
#define II_GET(f, p) UB_GET(btrfs_inode_item, f, p)
#define RI_SET(f, p, v) UB_SET(btrfs_root_item, f, p, v)

/* what the kernel gives a free space cache file (btrfs's __create_free_space_inode) */
#define V1_FLAGS (UB_INODE_NODATASUM | UB_INODE_NODATACOW | UB_INODE_PREALLOC)

bool ub_engine_needs_fst(const struct ub_engine *e)
{
	return !(e->compat_ro & BTRFS_FEATURE_COMPAT_RO_FREE_SPACE_TREE);
}

struct keys {
	struct ub_key *k;
	size_t n, cap;
};

static int keys_add(struct keys *l, const struct ub_key *k)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 16;
		struct ub_key *m = realloc(l->k, cap * sizeof(*m));

		if (!m)
			return -ENOMEM;
		l->k = m;
		l->cap = cap;
	}
	l->k[l->n++] = *k;
	return 0;
}

/* The keys of the root tree from `from` on while `keep` says so (1 keep, 0 skip, 2 stop), collected. */
static int collect(struct ub_txn *t, const struct ub_key *from, int (*keep)(const struct ub_key *k, void *arg),
		   void *arg, struct keys *out)
{
	struct ub_engine *e = t->e;
	struct ub_path p;
	struct ub_key k;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_search(&e->fs.tc, &e->fs.root_tree->root, from, &p);
	ret = ret == 2 ? 1 : ret < 0 ? ret : 0;
	while (ret == 0) {
		int what;

		ub_path_key(&p, &k);
		what = keep(&k, arg);
		if (what == 2)
			break;
		if (what == 1 && (ret = keys_add(out, &k)) != 0)
			break;
		ret = ub_tree_next(&p);
	}
	ub_path_release(&p);
	return ret < 0 ? ret : 0;
}

static int is_header(const struct ub_key *k, void *arg)
{
	if (k->objectid != BTRFS_FREE_SPACE_OBJECTID)
		return 2;
	return k->type == 0;
}

static int of_inode(const struct ub_key *k, void *arg)
{
	if (k->objectid != *(const uint64_t *)arg)
		return 2;
	return k->type == BTRFS_INODE_ITEM_KEY || k->type == BTRFS_EXTENT_DATA_KEY;
}

static int del_key(struct ub_txn *t, const struct ub_key *key)
{
	struct ub_engine *e = t->e;
	struct ub_path p;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_search_slot(&e->fs.tc, ub_txn_ta(t), &e->fs.root_tree->root, key, &p, -1, true);
	if (ret == 0)
		ret = ub_tree_del_items(&e->fs.tc, ub_txn_ta(t), &e->fs.root_tree->root, &p, p.slots[0], 1);
	else if (ret > 0)
		ret = -ENOENT;
	ub_path_release(&p);
	return ret;
}

/*
 * Whether inode `ino` of the root tree is a free space cache file: a regular
 * file with the cache's flags. Anything else a header names is left alone.
 */
static bool cache_file(struct ub_txn *t, uint64_t ino)
{
	struct ub_engine *e = t->e;
	struct ub_key key = { ino, BTRFS_INODE_ITEM_KEY, 0 };
	const uint8_t *d;
	struct ub_path p;
	uint32_t size;
	bool ok = false;

	if (ino < BTRFS_FIRST_FREE_OBJECTID || ino > BTRFS_LAST_FREE_OBJECTID)
		return false;
	ub_path_init(&p);
	if (ub_tree_lookup(&e->fs.tc, &e->fs.root_tree->root, &key, &p, &d, &size) == 0 &&
	    size >= sizeof(struct btrfs_inode_item))
		ok = S_ISREG(II_GET(mode, d)) && (II_GET(flags, d) & V1_FLAGS) == V1_FLAGS;
	ub_path_release(&p);
	return ok;
}

/* The file's extents' references dropped (the commit frees what nothing else holds), then its items. */
static int drop_file(struct ub_txn *t, uint64_t ino)
{
	struct ub_engine *e = t->e;
	struct ub_key from = { ino, 0, 0 };
	struct keys items = { 0 };
	int ret = collect(t, &from, of_inode, &ino, &items);

	for (size_t i = 0; !ret && i < items.n; i++) {
		const struct ub_key *k = &items.k[i];
		const uint8_t *d;
		struct ub_path p;
		uint32_t size;

		if (k->type != BTRFS_EXTENT_DATA_KEY)
			continue;
		ub_path_init(&p);
		ret = ub_tree_lookup(&e->fs.tc, &e->fs.root_tree->root, k, &p, &d, &size);
		if (!ret && size >= 21 && FE_GET(type, d) != BTRFS_FILE_EXTENT_INLINE) {
			uint64_t bytenr, len;

			if (size < sizeof(struct btrfs_file_extent_item)) {
				ub_err(&e->fs.log, "root tree: v1 space cache file %llu: file extent item at offset %llu "
				       "has %u bytes", (unsigned long long)ino, (unsigned long long)k->offset, size);
				ret = -EUCLEAN;
			} else if ((bytenr = FE_GET(disk_bytenr, d)) != 0) {
				len = FE_GET(disk_num_bytes, d);
				ret = ub_dref_add_data(t->refs, bytenr, len, BTRFS_ROOT_TREE_OBJECTID, ino,
						       k->offset - FE_GET(offset, d), 0, -1, 0);
			}
		}
		ub_path_release(&p);
	}
	for (size_t i = 0; !ret && i < items.n; i++)
		ret = del_key(t, &items.k[i]);
	free(items.k);
	return ret;
}

/* Every FREE_SPACE header of the root tree and the cache file it names: removed; *n counts them. */
static int drop_v1_cache(struct ub_txn *t, int *n)
{
	struct ub_engine *e = t->e;
	struct ub_key from = { BTRFS_FREE_SPACE_OBJECTID, 0, 0 };
	struct keys hdrs = { 0 };
	int ret = collect(t, &from, is_header, NULL, &hdrs);

	*n = 0;
	for (size_t i = 0; !ret && i < hdrs.n; i++) {
		const uint8_t *d;
		struct ub_path p;
		uint32_t size;
		uint64_t ino = 0;

		ub_path_init(&p);
		ret = ub_tree_lookup(&e->fs.tc, &e->fs.root_tree->root, &hdrs.k[i], &p, &d, &size);
		if (!ret && size >= sizeof(struct btrfs_free_space_header))
			ino = UB_GET(btrfs_disk_key, objectid, UB_PTR(btrfs_free_space_header, location, d));
		ub_path_release(&p);
		if (ret)
			break;
		if (ino && cache_file(t, ino)) {
			ret = drop_file(t, ino);
		} else if (ino) {
			ub_warn(&e->fs.log, "root tree: the v1 space cache header of block group %llu names inode %llu, "
				"which is no cache file: the inode is left as it is",
				(unsigned long long)hdrs.k[i].offset, (unsigned long long)ino);
		}
		if (!ret)
			ret = del_key(t, &hdrs.k[i]);
		if (!ret)
			(*n)++;
	}
	free(hdrs.k);
	return ret;
}

/* The empty tree and its ROOT_ITEM, as a new global tree gets them; the engine then keeps it. */
static int create_tree(struct ub_txn *t)
{
	struct ub_engine *e = t->e;
	uint32_t nodesize = e->fs.vol->nodesize;
	uint8_t ri[sizeof(struct btrfs_root_item)] = { 0 };
	struct ub_key key = { BTRFS_FREE_SPACE_TREE_OBJECTID, BTRFS_ROOT_ITEM_KEY, 0 };
	struct ub_eroot *er;
	struct ub_root r;
	int ret = ub_tree_create_root(&e->fs.tc, ub_txn_ta(t), BTRFS_FREE_SPACE_TREE_OBJECTID, &r);

	if (ret)
		return ret;
	/* the embedded inode: the directory stub every new root gets */
	UB_SET(btrfs_root_item, inode.generation, ri, 1);
	UB_SET(btrfs_root_item, inode.size, ri, 3);
	UB_SET(btrfs_root_item, inode.nlink, ri, 1);
	UB_SET(btrfs_root_item, inode.nbytes, ri, nodesize);
	UB_SET(btrfs_root_item, inode.mode, ri, S_IFDIR | 0755);
	RI_SET(generation, ri, t->transid);
	RI_SET(bytenr, ri, r.bytenr);
	RI_SET(level, ri, r.level);
	RI_SET(bytes_used, ri, nodesize);
	RI_SET(refs, ri, 1);
	RI_SET(generation_v2, ri, t->transid);
	ret = ub_tree_insert_item(&e->fs.tc, ub_txn_ta(t), &e->fs.root_tree->root, &key, ri, sizeof(ri));
	if (!ret)
		ret = ub_engine_add_root(e, &r, 0, 0, &er);
	if (!ret)
		e->fs.fst_tree = er;
	return ret;
}

int ub_engine_create_fst(struct ub_engine *e)
{
	uint32_t nodesize = e->fs.vol->nodesize;
	struct ub_eroot *old;
	struct ub_txn *t;
	int nbgs, ncaches = 0;
	uint64_t room;
	int ret;

	if (!ub_engine_needs_fst(e))
		return 0;
	/* a tree the superblock does not flag: someone's half-done work, not ours to guess about */
	ret = ub_engine_root(e, BTRFS_FREE_SPACE_TREE_OBJECTID, &old);
	if (ret == 0) {
		ub_err(&e->fs.log, "cannot open for writing: a free space tree is present but not flagged in the "
		       "superblock; clear it first (btrfs check --clear-space-cache v2)");
		return -EOPNOTSUPP;
	}
	if (ret != -ENOENT)
		return ret;
	/* room: a leaf or two per block group for its items, and the cache files' deletions */
	nbgs = ub_alloc_rebuild_fst_all(e->alloc);
	room = ((uint64_t)nbgs * 4 + 64) * nodesize;
	ret = ub_engine_begin_op(e, room, UB_CHUNK_OP_ADD, &t);
	if (ret)
		return ret;
	ret = create_tree(t);
	if (!ret)
		ret = drop_v1_cache(t, &ncaches);
	if (!ret) {
		e->compat_ro |= BTRFS_FEATURE_COMPAT_RO_FREE_SPACE_TREE | BTRFS_FEATURE_COMPAT_RO_FREE_SPACE_TREE_VALID;
		UB_SET(ub_disk_super, compat_ro_flags, e->fs.vol->super, e->compat_ro);
		UB_SET(ub_disk_super, cache_generation, e->fs.vol->super, 0);
	}
	ub_engine_end_op(e);
	if (!ret)
		ret = ub_engine_commit(e);
	if (ret) {
		ub_err(&e->fs.log, "cannot create the free space tree: %s", strerror(-ret));
		return ret;
	}
	ub_info(&e->fs.log, "created the free space tree (%d block groups)%s", nbgs,
		ncaches ? "; the v1 space cache was removed" : "");
	return 0;
}
