/* SPDX-License-Identifier: MIT */
/*
 * check --repair --init-extent-tree: the extent tree rebuilt from the trees
 * that exist (docs/check.md, "Repair").
 *
 * Nothing of the old extent tree is trusted but its root pointer. Every tree
 * the root tree names (and the root and chunk trees) is walked from the last
 * commit, each tree block once: every block gets a metadata item with one
 * back reference per pointer that reaches it, every file extent item of the
 * file trees counts towards its data extent's references. The references
 * take the kernel's form:
 *
 *   - a tree's root block: TREE_BLOCK_REF of the tree;
 *   - a block below a parent without FULL_BACKREF: TREE_BLOCK_REF of the
 *     parent's owner (the kernel's btrfs_inc_ref names the header owner); data
 *     below such a leaf: EXTENT_DATA_REF (owner, inode, file offset minus the
 *     extent offset), counted per file extent item;
 *   - below a parent with FULL_BACKREF: SHARED_BLOCK_REF / SHARED_DATA_REF
 *     naming the parent.
 *
 * A block has FULL_BACKREF when it sits in a subvolume tree, is not the root
 * block, and the tree it is first reached from is not its owner: the state
 * the kernel leaves a shared block in once the owner copied its own path
 * away (update_ref_for_cow) or dropped the snapshot that owned it. The trees
 * are walked in id order, so a block is first reached from its owner when the
 * owner still reaches it (a snapshot's id is above its source's), and those
 * keep normal references, as btrfs check --init-extent-tree makes them.
 *
 * The allocator of this run comes from the chunk map alone
 * (UB_ENGINE_OPEN_REPAIR_EXTENTS): every block group starts empty and each
 * extent the walk found (the old extent tree's own blocks too) is taken out
 * before anything is allocated, so the repair's transaction never hands out
 * a byte a tree or a file still uses, whatever the old tree said. In the
 * transaction the extent tree gets a new empty root, the old tree's blocks
 * are freed (pinned until the commit is durable: the superblocks of before
 * still reach them), and the items are inserted in key order, with a
 * BLOCK_GROUP_ITEM per chunk; every copy-on-write after that (the commit's
 * own) is applied to the new tree by the delayed references as usual, and
 * the commit writes each group's used bytes, the superblock's bytes_used and
 * a free space tree rewritten from them.
 *
 * Refused (nothing written): a tree block of any tree but the extent tree
 * that cannot be read (the walk could not see what lies below it, and its
 * space would look free), a subvolume whose drop is half done, two extents
 * that overlap.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ubtrfs/fs.h"
#include "ubtrfs/fsinfo.h"
#include "txn/backref.h"
#include "repair/repair_priv.h"
#include "volume/volume_priv.h"

/* The tree block cache while the trees are walked (check's own size). */
#define WALK_CACHE_BYTES (16ULL << 20)

struct ie_block {
	uint64_t bytenr, gen, owner;
	struct ub_key first;
	uint8_t level;
	bool full;       /* FULL_BACKREF */
	bool old_extent; /* a block of the old extent tree: freed, not described */
	bool unclaimed;  /* such a block whose address is not free space (a damaged pointer): left alone */
};

struct ie_bref {
	uint64_t bytenr;
	struct ub_ref r;
};

struct ie_dref {
	uint64_t bytenr, len, gen;
	struct ub_ref r;
	uint32_t count;
};

struct rp_ie {
	struct rp_ctx *c;
	struct ub_tree_ctx *tc;
	struct ub_volume *vol;
	uint32_t nodesize;
	struct ub_block_set seen;
	struct ie_block *blocks;
	size_t nblocks, capblocks;
	struct ie_bref *brefs;
	size_t nbrefs, capbrefs;
	struct ie_dref *drefs;
	size_t ndrefs, capdrefs;
	uint64_t trees, data_extents, data_bytes, meta_bytes, old_blocks, lost;
};

/* The trees whose blocks the kernel shares between snapshots (and marks FULL_BACKREF). */
static bool fs_tree(uint64_t id)
{
	return id == BTRFS_FS_TREE_OBJECTID || (id >= BTRFS_FIRST_FREE_OBJECTID && id <= BTRFS_LAST_FREE_OBJECTID) ||
	       id == BTRFS_DATA_RELOC_TREE_OBJECTID;
}

static int add_bref(struct rp_ie *s, uint64_t bytenr, const struct ub_ref *r)
{
	if (rp_grow((void **)&s->brefs, &s->capbrefs, s->nbrefs, sizeof(*s->brefs), 1024))
		return -ENOMEM;
	s->brefs[s->nbrefs++] = (struct ie_bref){ bytenr, *r };
	return 0;
}

/* One file extent item of leaf `leaf`: a reference of the data it points at. */
static int add_file_extent(struct rp_ie *s, uint64_t tree, uint64_t leaf, uint64_t owner, bool full,
			   const struct ub_key *k, const uint8_t *d, uint32_t size)
{
	struct ie_dref dr = { 0 };
	uint8_t type;

	if (size < offsetof(struct btrfs_file_extent_item, disk_bytenr))
		return 0;
	type = (uint8_t)UB_GET(btrfs_file_extent_item, type, d);
	if (type != BTRFS_FILE_EXTENT_REG && type != BTRFS_FILE_EXTENT_PREALLOC)
		return 0;
	if (size < sizeof(struct btrfs_file_extent_item)) {
		ub_err(s->c->log, "repair: --init-extent-tree: tree %llu, leaf %llu: the file extent item of inode %llu "
		       "at offset %llu is %u bytes, too short", (unsigned long long)tree, (unsigned long long)leaf,
		       (unsigned long long)k->objectid, (unsigned long long)k->offset, size);
		return -EUCLEAN;
	}
	dr.bytenr = UB_GET(btrfs_file_extent_item, disk_bytenr, d);
	if (!dr.bytenr)
		return 0; /* a hole */
	dr.len = UB_GET(btrfs_file_extent_item, disk_num_bytes, d);
	dr.gen = UB_GET(btrfs_file_extent_item, generation, d);
	dr.count = 1;
	if (full) {
		dr.r.type = BTRFS_SHARED_DATA_REF_KEY;
		dr.r.parent = leaf;
	} else {
		dr.r.type = BTRFS_EXTENT_DATA_REF_KEY;
		dr.r.root = owner;
		dr.r.owner = k->objectid;
		dr.r.offset = k->offset - UB_GET(btrfs_file_extent_item, offset, d);
	}
	if (!dr.len || dr.len % s->vol->sectorsize || dr.bytenr % s->vol->sectorsize || dr.bytenr + dr.len < dr.bytenr) {
		ub_err(s->c->log, "repair: --init-extent-tree: tree %llu, inode %llu, offset %llu: the file extent "
		       "points at [%llu, +%llu), not whole sectors", (unsigned long long)tree,
		       (unsigned long long)k->objectid, (unsigned long long)k->offset, (unsigned long long)dr.bytenr,
		       (unsigned long long)dr.len);
		return -EUCLEAN;
	}
	if (rp_grow((void **)&s->drefs, &s->capdrefs, s->ndrefs, sizeof(*s->drefs), 1024))
		return -ENOMEM;
	s->drefs[s->ndrefs++] = dr;
	return 0;
}

/*
 * Block `bytenr` of tree `tree` (pointed at from `parent`, 0: the root item)
 * and, the first time it is reached, everything below it.
 */
static int walk(struct rp_ie *s, uint64_t tree, uint64_t bytenr, int level, uint64_t gen, uint64_t parent, int slot)
{
	struct ub_expect exp = { .owner = 0, .level = level, .generation = gen, .parent = parent, .slot = slot };
	struct ie_block b = { .bytenr = bytenr, .level = (uint8_t)level };
	struct ub_ref child = { 0 };
	uint64_t first_tag;
	struct ub_eb *eb;
	uint32_t n;
	int ret = ub_block_set_add(&s->seen, bytenr, tree, &first_tag);
	char tn[32];

	if (ret)
		return ret < 0 ? ret : 0; /* reached before: its reference is added, what is below it is counted */
	if (level < 0 || level >= UB_MAX_LEVEL) {
		ub_err(s->c->log, "repair: --init-extent-tree: tree %s: a pointer at %llu says level %d",
		       ub_tree_name(tree, tn, sizeof(tn)), (unsigned long long)bytenr, level);
		return -EUCLEAN;
	}
	ret = ub_tree_read_block(s->tc, bytenr, &exp, &eb);
	if (ret) {
		if (tree != BTRFS_EXTENT_TREE_OBJECTID) {
			ub_err(s->c->log, "repair: --init-extent-tree: tree block %llu of tree %s (level %d, pointed at "
			       "from %s %llu) cannot be read (%s): what lies below it would look free; repair it first",
			       (unsigned long long)bytenr, ub_tree_name(tree, tn, sizeof(tn)), level,
			       parent ? "node" : "the root item of tree", (unsigned long long)(parent ? parent : tree),
			       strerror(-ret));
			return -EUCLEAN;
		}
		/* the old extent tree goes anyway: its block is kept until the commit, what is below it is unknown */
		b.owner = BTRFS_EXTENT_TREE_OBJECTID;
		b.old_extent = true;
		s->lost += level > 0;
		if (rp_grow((void **)&s->blocks, &s->capblocks, s->nblocks, sizeof(*s->blocks), 1024))
			return -ENOMEM;
		s->blocks[s->nblocks++] = b;
		return 0;
	}
	b.gen = ub_eb_generation(eb);
	b.owner = ub_eb_owner(eb);
	n = ub_eb_nritems(eb);
	if (n)
		ub_eb_item_key(eb, 0, &b.first);
	b.old_extent = tree == BTRFS_EXTENT_TREE_OBJECTID;
	b.full = fs_tree(tree) && parent && b.owner != tree;
	if (rp_grow((void **)&s->blocks, &s->capblocks, s->nblocks, sizeof(*s->blocks), 1024)) {
		ub_eb_put(s->tc, eb);
		return -ENOMEM;
	}
	s->blocks[s->nblocks++] = b;
	if (b.full) {
		child.type = BTRFS_SHARED_BLOCK_REF_KEY;
		child.parent = bytenr;
	} else {
		child.type = BTRFS_TREE_BLOCK_REF_KEY;
		child.root = b.owner;
	}
	if (level > 0) {
		ub_tree_readahead(s->tc, eb, 0, (int)n);
		for (uint32_t i = 0; !ret && i < n; i++) {
			uint64_t ptr = ub_eb_node_blockptr(eb, (int)i);

			if (!b.old_extent)
				ret = add_bref(s, ptr, &child);
			if (!ret)
				ret = walk(s, tree, ptr, level - 1, ub_eb_node_gen(eb, (int)i), bytenr, (int)i);
		}
	} else if (fs_tree(tree)) {
		for (uint32_t i = 0; !ret && i < n; i++) {
			struct ub_key k;
			const uint8_t *d;
			uint32_t size;

			ub_eb_item_key(eb, (int)i, &k);
			if (k.type != BTRFS_EXTENT_DATA_KEY)
				continue;
			d = ub_eb_item_data(eb, (int)i, &size);
			ret = add_file_extent(s, tree, bytenr, b.owner, b.full, &k, d, size);
		}
	}
	ub_eb_put(s->tc, eb);
	return ret;
}

static int walk_root(struct rp_ie *s, uint64_t tree, uint64_t bytenr, int level, uint64_t gen)
{
	struct ub_ref r = { .type = BTRFS_TREE_BLOCK_REF_KEY, .root = tree };
	int ret = 0;

	if (!bytenr)
		return 0;
	s->trees++;
	if (tree != BTRFS_EXTENT_TREE_OBJECTID)
		ret = add_bref(s, bytenr, &r);
	return ret ? ret : walk(s, tree, bytenr, level, gen, 0, -1);
}

/* Every tree of the last commit: the root and chunk trees, then each ROOT_ITEM of the root tree in id order. */
static int walk_all(struct rp_ie *s, struct ub_fs *fs)
{
	const uint8_t *sb = s->vol->super;
	struct ub_root rt = { .objectid = BTRFS_ROOT_TREE_OBJECTID, .bytenr = UB_GET(ub_disk_super, root, sb),
			      .generation = UB_GET(ub_disk_super, generation, sb),
			      .level = (uint8_t)UB_GET(ub_disk_super, root_level, sb) };
	struct ub_key min = { 0, BTRFS_ROOT_ITEM_KEY, 0 }, max = { UINT64_MAX, BTRFS_ROOT_ITEM_KEY, UINT64_MAX }, k;
	struct ub_tree_iter it;
	const uint8_t *d;
	uint32_t size;
	uint64_t ext_bytenr = 0, ext_gen = 0;
	int ext_level = 0;
	char tn[32];
	int ret;

	(void)fs;
	if (UB_GET(ub_disk_super, log_root, sb)) {
		ub_err(s->c->log, "repair: --init-extent-tree: the filesystem has a pending fsync log: mount it once or "
		       "run `ubtrfs rescue zero-log` first");
		return -EOPNOTSUPP;
	}
	ret = walk_root(s, BTRFS_ROOT_TREE_OBJECTID, rt.bytenr, rt.level, rt.generation);
	if (!ret)
		ret = walk_root(s, BTRFS_CHUNK_TREE_OBJECTID, UB_GET(ub_disk_super, chunk_root, sb),
				(int)UB_GET(ub_disk_super, chunk_root_level, sb),
				UB_GET(ub_disk_super, chunk_root_generation, sb));
	if (ret)
		return ret;
	ret = ub_tree_iter_start(&it, s->tc, &rt, &min, &max);
	if (ret)
		return ret;
	while (!(ret = ub_tree_iter_next(&it, &k, &d, &size))) {
		uint64_t bytenr, gen;
		int level;

		if (k.type != BTRFS_ROOT_ITEM_KEY)
			continue;
		if (size < offsetof(struct btrfs_root_item, drop_level) + 1) {
			ub_err(s->c->log, "repair: --init-extent-tree: the root item of tree %s is %u bytes, too short",
			       ub_tree_name(k.objectid, tn, sizeof(tn)), size);
			ret = -EUCLEAN;
			break;
		}
		if (k.objectid == BTRFS_TREE_LOG_OBJECTID || k.objectid == BTRFS_TREE_RELOC_OBJECTID) {
			ub_err(s->c->log, "repair: --init-extent-tree: the root tree holds a %s tree: mount the "
			       "filesystem once to finish its work first", k.objectid == BTRFS_TREE_LOG_OBJECTID ? "log" :
			       "relocation");
			ret = -EOPNOTSUPP;
			break;
		}
		if (UB_GET(btrfs_disk_key, objectid, d + offsetof(struct btrfs_root_item, drop_progress)) ||
		    UB_GET(btrfs_root_item, drop_level, d)) {
			ub_err(s->c->log, "repair: --init-extent-tree: deleted subvolume %llu is half dropped: mount the "
			       "filesystem to let its cleanup finish first", (unsigned long long)k.objectid);
			ret = -EOPNOTSUPP;
			break;
		}
		bytenr = UB_GET(btrfs_root_item, bytenr, d);
		gen = UB_GET(btrfs_root_item, generation, d);
		level = (int)UB_GET(btrfs_root_item, level, d);
		/*
		 * The old extent tree last: a damaged pointer of it at a block another
		 * tree uses then finds that block seen, and leaves it to its tree.
		 */
		if (k.objectid == BTRFS_EXTENT_TREE_OBJECTID) {
			ext_bytenr = bytenr;
			ext_gen = gen;
			ext_level = level;
			continue;
		}
		ret = walk_root(s, k.objectid, bytenr, level, gen);
		if (ret)
			break;
	}
	ub_tree_iter_end(&it);
	if (ret == 1)
		ret = walk_root(s, BTRFS_EXTENT_TREE_OBJECTID, ext_bytenr, ext_level, ext_gen);
	if (ret < 0 && ret != -EUCLEAN && ret != -EOPNOTSUPP && ret != -ENOMEM)
		ub_err(s->c->log, "repair: --init-extent-tree: the root tree cannot be read: %s", strerror(-ret));
	return ret < 0 ? ret : 0;
}

/* ---- what was found, sorted and merged ---- */

static int u64_cmp3(uint64_t a, uint64_t b)
{
	return a < b ? -1 : a > b;
}

static int ref_cmp(const struct ub_ref *x, const struct ub_ref *y)
{
	if (x->type != y->type)
		return x->type < y->type ? -1 : 1;
	if (x->root != y->root)
		return u64_cmp3(x->root, y->root);
	if (x->parent != y->parent)
		return u64_cmp3(x->parent, y->parent);
	if (x->owner != y->owner)
		return u64_cmp3(x->owner, y->owner);
	return u64_cmp3(x->offset, y->offset);
}

static int block_cmp(const void *a, const void *b)
{
	return u64_cmp3(((const struct ie_block *)a)->bytenr, ((const struct ie_block *)b)->bytenr);
}

static int bref_cmp(const void *a, const void *b)
{
	const struct ie_bref *x = a, *y = b;

	return x->bytenr != y->bytenr ? u64_cmp3(x->bytenr, y->bytenr) : ref_cmp(&x->r, &y->r);
}

static int dref_cmp(const void *a, const void *b)
{
	const struct ie_dref *x = a, *y = b;

	if (x->bytenr != y->bytenr)
		return u64_cmp3(x->bytenr, y->bytenr);
	if (x->len != y->len)
		return u64_cmp3(x->len, y->len);
	return ref_cmp(&x->r, &y->r);
}

/* Sorted; the same reference once (data: its counts added, the extent's generation the oldest). */
static int settle(struct rp_ie *s)
{
	size_t k = 0;

	if (s->nblocks)
		qsort(s->blocks, s->nblocks, sizeof(*s->blocks), block_cmp);
	if (s->nbrefs)
		qsort(s->brefs, s->nbrefs, sizeof(*s->brefs), bref_cmp);
	for (size_t i = 0; i < s->nbrefs; i++)
		if (!k || bref_cmp(&s->brefs[k - 1], &s->brefs[i]))
			s->brefs[k++] = s->brefs[i];
	s->nbrefs = k;
	if (s->ndrefs)
		qsort(s->drefs, s->ndrefs, sizeof(*s->drefs), dref_cmp);
	k = 0;
	for (size_t i = 0; i < s->ndrefs; i++) {
		struct ie_dref *d = &s->drefs[i];

		if (k && s->drefs[k - 1].bytenr == d->bytenr && s->drefs[k - 1].len != d->len) {
			ub_err(s->c->log, "repair: --init-extent-tree: file extents point at the data at %llu as %llu and "
			       "as %llu bytes long: which is right cannot be told", (unsigned long long)d->bytenr,
			       (unsigned long long)s->drefs[k - 1].len, (unsigned long long)d->len);
			return -EUCLEAN;
		}
		if (k && s->drefs[k - 1].bytenr == d->bytenr && !ref_cmp(&s->drefs[k - 1].r, &d->r)) {
			s->drefs[k - 1].count += d->count;
			if (d->gen < s->drefs[k - 1].gen)
				s->drefs[k - 1].gen = d->gen;
			continue;
		}
		s->drefs[k++] = *d;
	}
	s->ndrefs = k;
	/* every reference of one data extent carries the extent's generation: the oldest file extent's */
	for (size_t i = 0, j; i < s->ndrefs; i = j) {
		uint64_t gen = s->drefs[i].gen;

		for (j = i; j < s->ndrefs && s->drefs[j].bytenr == s->drefs[i].bytenr; j++)
			gen = s->drefs[j].gen < gen ? s->drefs[j].gen : gen;
		for (size_t m = i; m < j; m++)
			s->drefs[m].gen = gen;
		s->data_extents++;
		s->data_bytes += s->drefs[i].len;
	}
	for (size_t i = 0; i < s->nblocks; i++) {
		if (s->blocks[i].old_extent)
			s->old_blocks++;
		else
			s->meta_bytes += s->nodesize;
	}
	return 0;
}

/* ---- the allocator: what the walk found is in use ---- */

static int claim(struct rp_ie *s, struct ub_engine *e, uint64_t at, uint64_t len, const char *what)
{
	int ret = ub_alloc_account(e->alloc, at, len, true);

	if (ret) {
		ub_err(s->c->log, "repair: --init-extent-tree: %s [%llu, +%llu) %s", what, (unsigned long long)at,
		       (unsigned long long)len,
		       ret == -ENOENT ? "is in no block group" : ret == -EUCLEAN ? "overlaps another extent" :
		       strerror(-ret));
		return ret == -ENOENT ? -EUCLEAN : ret;
	}
	e->bytes_used += len;
	return 0;
}

static int claim_all(struct rp_ie *s, struct ub_engine *e)
{
	int ret = 0;

	for (size_t i = 0; !ret && i < s->nblocks; i++)
		if (!s->blocks[i].old_extent)
			ret = claim(s, e, s->blocks[i].bytenr, s->nodesize, "tree block");
	for (size_t i = 0; !ret && i < s->ndrefs; i++)
		if (!i || s->drefs[i - 1].bytenr != s->drefs[i].bytenr)
			ret = claim(s, e, s->drefs[i].bytenr, s->drefs[i].len, "data extent");
	/*
	 * The old extent tree's blocks after everything that lives: a pointer of
	 * it that is damaged may name space in use or outside every block group,
	 * which is then not the old tree's to free.
	 */
	for (size_t i = 0; !ret && i < s->nblocks; i++) {
		struct ie_block *b = &s->blocks[i];

		if (!b->old_extent)
			continue;
		if (ub_alloc_account(e->alloc, b->bytenr, s->nodesize, true)) {
			b->unclaimed = true;
			s->old_blocks--;
			continue;
		}
		e->bytes_used += s->nodesize;
	}
	return ret;
}

void rp_init_extent_free(struct rp_ctx *c)
{
	struct rp_ie *s = c->ie;

	if (!s)
		return;
	ub_block_set_free(&s->seen);
	free(s->blocks);
	free(s->brefs);
	free(s->drefs);
	free(s);
	c->ie = NULL;
}

static void summary(struct rp_ie *s, bool dry)
{
	struct rp_note n = { UB_CHK_FIX_NONE, BTRFS_EXTENT_TREE_OBJECTID, 0, 0, 0 };

	rp_say(s->c, &n, 0,
	       "extent tree %s from %llu trees: %llu tree blocks (%llu bytes), %llu data extents (%llu bytes) in "
	       "%zu back references; %llu blocks of the old extent tree %s%s",
	       dry ? "would be rebuilt" : "rebuilt", (unsigned long long)s->trees,
	       (unsigned long long)(s->meta_bytes / s->nodesize), (unsigned long long)s->meta_bytes,
	       (unsigned long long)s->data_extents, (unsigned long long)s->data_bytes, s->nbrefs + s->ndrefs,
	       (unsigned long long)s->old_blocks, dry ? "would be freed" : "freed",
	       s->lost ? " (some below its unreadable nodes cannot be found: their space stays leaked until a check "
			 "finds it)" : "");
}

int rp_init_extent_scan(struct rp_ctx *c)
{
	struct ub_fs *own = NULL, *fs;
	struct rp_ie *s;
	int ret;

	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	c->ie = s;
	s->c = c;
	if (c->e) {
		fs = &c->e->fs;
	} else {
		/* a dry run: the devices read-only, the last commit */
		struct ub_fs_opts fo = { .super_mirror = -1, .no_log = true };

		ret = ub_fs_open(c->paths, c->npaths, &fo, c->log, &own);
		if (ret) {
			ub_err(c->log, "repair: --init-extent-tree: the filesystem cannot be opened: %s", strerror(-ret));
			rp_init_extent_free(c);
			return ret;
		}
		fs = own;
	}
	s->tc = ub_fs_trees(fs);
	s->vol = ub_fs_volume(fs);
	s->nodesize = s->vol->nodesize;
	if (UB_GET(ub_disk_super, incompat_flags, s->vol->super) & BTRFS_FEATURE_INCOMPAT_EXTENT_TREE_V2) {
		ub_err(c->log, "repair: --init-extent-tree: extent-tree-v2 is not supported");
		ret = -EOPNOTSUPP;
	} else {
		/* every block is read once: a cache as large as the engine's would only hold memory */
		struct ub_tree_cache_stats st;

		ub_tree_cache_stats(s->tc, &st);
		if (st.limit > WALK_CACHE_BYTES)
			ub_tree_set_cache_limit(s->tc, WALK_CACHE_BYTES);
		ret = walk_all(s, fs);
		ub_tree_set_cache_limit(s->tc, st.limit);
	}
	if (!ret)
		ret = settle(s);
	if (!ret && c->e)
		ret = claim_all(s, c->e);
	if (!ret && !c->e)
		summary(s, true);
	if (own)
		ub_fs_close(own);
	if (ret || !c->e)
		rp_init_extent_free(c);
	return ret;
}

/* ---- the new tree ---- */

static int put(struct rp_ie *s, const struct ub_key *k, const uint8_t *d, uint32_t size)
{
	struct ub_engine *e = s->c->e;
	int ret = ub_tree_insert_item(&e->fs.tc, ub_txn_ta(s->c->t), &e->fs.extent_tree->root, k, d, size);

	if (ret)
		ub_err(s->c->log, "repair: --init-extent-tree: the item (%llu %u %llu) cannot be inserted: %s",
		       (unsigned long long)k->objectid, k->type, (unsigned long long)k->offset, strerror(-ret));
	return ret;
}

struct keyed {
	struct ub_key key;
	struct ub_ref r;
	uint32_t count;
};

static int keyed_cmp(const void *a, const void *b)
{
	return ub_key_cmp(&((const struct keyed *)a)->key, &((const struct keyed *)b)->key);
}

/*
 * One extent item: its references inline while the item stays below the
 * kernel's limit, the rest as keyed items after it.
 */
static int put_extent(struct rp_ie *s, const struct ub_key *k, uint64_t flags, uint64_t gen,
		      const struct ub_key *first, int level, const struct ub_ref *refs, const uint32_t *counts,
		      size_t n)
{
	uint32_t max = ub_max_extent_item_size(s->nodesize);
	uint32_t start = ub_extent_refs_start(k->type, !(flags & BTRFS_EXTENT_FLAG_TREE_BLOCK)), size = start;
	uint8_t item[UB_MAX_NODESIZE / 16];
	struct keyed *kd = NULL;
	size_t nk = 0;
	uint64_t total = 0;
	int ret = 0;

	if (max > sizeof(item))
		return -EINVAL;
	memset(item, 0, sizeof(item));
	for (size_t i = 0; i < n; i++) {
		uint32_t rs = ub_ref_inline_size(refs[i].type), pos, cnt;

		total += counts[i];
		if (size + rs >= max) {
			if (!kd && !(kd = calloc(n, sizeof(*kd))))
				return -ENOMEM;
			ub_ref_key(&refs[i], k->objectid, &kd[nk].key);
			kd[nk].r = refs[i];
			kd[nk++].count = counts[i];
			continue;
		}
		ret = ub_inline_ref_find(item, size, start, &refs[i], &pos, &cnt);
		if (ret < 0)
			goto out;
		if (ret == 0) {
			ret = -EUCLEAN; /* merged before: cannot happen */
			goto out;
		}
		memmove(item + pos + rs, item + pos, size - pos);
		ub_inline_ref_write(item + pos, &refs[i], counts[i]);
		size += rs;
	}
	UB_SET(btrfs_extent_item, refs, item, total);
	UB_SET(btrfs_extent_item, generation, item, gen);
	UB_SET(btrfs_extent_item, flags, item, flags);
	if (start > UB_EXTENT_ITEM_SIZE) {
		ub_key_write(item + UB_EXTENT_ITEM_SIZE + offsetof(struct btrfs_tree_block_info, key), first);
		UB_SET(btrfs_tree_block_info, level, item + UB_EXTENT_ITEM_SIZE, (uint8_t)level);
	}
	ret = put(s, k, item, size);
	if (nk)
		qsort(kd, nk, sizeof(*kd), keyed_cmp);
	for (size_t i = 0; !ret && i < nk; i++) {
		uint8_t body[64];
		uint32_t bs = ub_ref_keyed_size(kd[i].r.type);

		if (bs > sizeof(body)) {
			ret = -EINVAL;
			break;
		}
		memset(body, 0, sizeof(body));
		ub_keyed_ref_write(body, &kd[i].r, kd[i].count);
		/* two data references of one hash: the kernel takes the next key offset free */
		for (int tries = 0; tries < 16; tries++) {
			ret = ub_tree_insert_item(&s->c->e->fs.tc, ub_txn_ta(s->c->t), &s->c->e->fs.extent_tree->root,
						  &kd[i].key, body, bs);
			if (ret != -EEXIST || kd[i].r.type != BTRFS_EXTENT_DATA_REF_KEY)
				break;
			kd[i].key.offset++;
		}
		if (ret)
			ub_err(s->c->log, "repair: --init-extent-tree: the back reference item (%llu %u %llu) cannot be "
			       "inserted: %s", (unsigned long long)kd[i].key.objectid, kd[i].key.type,
			       (unsigned long long)kd[i].key.offset, strerror(-ret));
	}
out:
	free(kd);
	return ret;
}

static int put_block(struct rp_ie *s, const struct ie_block *b, const struct ie_bref *r, size_t n, bool skinny)
{
	struct ub_ref refs[64];
	uint32_t counts[64];
	struct ub_ref *rv = refs;
	uint32_t *cv = counts;
	struct ub_key k;
	int ret;

	if (n > 64) {
		rv = calloc(n, sizeof(*rv));
		cv = calloc(n, sizeof(*cv));
		if (!rv || !cv) {
			free(rv);
			free(cv);
			return -ENOMEM;
		}
	}
	for (size_t i = 0; i < n; i++) {
		rv[i] = r[i].r;
		cv[i] = 1;
	}
	if (skinny)
		k = (struct ub_key){ b->bytenr, BTRFS_METADATA_ITEM_KEY, b->level };
	else
		k = (struct ub_key){ b->bytenr, BTRFS_EXTENT_ITEM_KEY, s->nodesize };
	ret = put_extent(s, &k, BTRFS_EXTENT_FLAG_TREE_BLOCK | (b->full ? BTRFS_BLOCK_FLAG_FULL_BACKREF : 0), b->gen,
			 &b->first, b->level, rv, cv, n);
	if (rv != refs) {
		free(rv);
		free(cv);
	}
	return ret;
}

static int put_data(struct rp_ie *s, const struct ie_dref *d, size_t n)
{
	struct ub_key k = { d->bytenr, BTRFS_EXTENT_ITEM_KEY, d->len };
	struct ub_ref *rv = calloc(n, sizeof(*rv));
	uint32_t *cv = calloc(n, sizeof(*cv));
	int ret = -ENOMEM;

	if (rv && cv) {
		for (size_t i = 0; i < n; i++) {
			rv[i] = d[i].r;
			cv[i] = d[i].count;
		}
		ret = put_extent(s, &k, BTRFS_EXTENT_FLAG_DATA, d->gen, NULL, 0, rv, cv, n);
	}
	free(rv);
	free(cv);
	return ret;
}

/* The BLOCK_GROUP_ITEM of chunk i (its used bytes are the commit's: every group is dirty). */
static int put_group(struct rp_ie *s, const struct ub_chunk *ch)
{
	struct ub_key k = { ch->logical, BTRFS_BLOCK_GROUP_ITEM_KEY, ch->length };
	uint8_t bi[sizeof(struct btrfs_block_group_item)];

	memset(bi, 0, sizeof(bi));
	UB_SET(btrfs_block_group_item, used, bi, 0);
	UB_SET(btrfs_block_group_item, chunk_objectid, bi, BTRFS_FIRST_CHUNK_TREE_OBJECTID);
	UB_SET(btrfs_block_group_item, flags, bi, ch->type);
	return put(s, &k, bi, sizeof(bi));
}

static int chunk_cmp(const void *a, const void *b)
{
	return u64_cmp3((*(const struct ub_chunk *const *)a)->logical, (*(const struct ub_chunk *const *)b)->logical);
}

int rp_init_extent_tree(struct rp_ctx *c)
{
	struct rp_ie *s = c->ie;
	struct ub_engine *e = c->e;
	bool skinny = e->incompat & BTRFS_FEATURE_INCOMPAT_SKINNY_METADATA;
	const struct ub_chunk **chunks = NULL;
	size_t ib = 0, ir = 0, id = 0, ic = 0, nchunks = (size_t)e->fs.vol->nchunks;
	struct ub_root nr;
	int ret;

	if (!s)
		return -EINVAL;
	chunks = calloc(nchunks ? nchunks : 1, sizeof(*chunks));
	if (!chunks)
		return -ENOMEM;
	for (size_t i = 0; i < nchunks; i++)
		chunks[i] = e->fs.vol->chunks[i];
	qsort(chunks, nchunks, sizeof(*chunks), chunk_cmp);
	ret = ub_tree_create_root(&e->fs.tc, ub_txn_ta(c->t), BTRFS_EXTENT_TREE_OBJECTID, &nr);
	if (ret)
		goto out;
	e->fs.extent_tree->root = nr;
	/* the old tree's blocks: free once the commit is durable (pinned until then, the old superblocks reach them) */
	for (size_t i = 0; !ret && i < s->nblocks; i++) {
		if (!s->blocks[i].old_extent || s->blocks[i].unclaimed)
			continue;
		ret = ub_alloc_account(e->alloc, s->blocks[i].bytenr, s->nodesize, false);
		if (!ret)
			ret = ub_alloc_pin(e->alloc, s->blocks[i].bytenr, s->nodesize);
		if (!ret)
			e->bytes_used -= s->nodesize;
	}
	/* in key order: at each address its extent item and keyed references, a block group's item after them */
	while (!ret && (ib < s->nblocks || id < s->ndrefs)) {
		uint64_t at;

		if (ib < s->nblocks && s->blocks[ib].old_extent) {
			ib++;
			continue;
		}
		at = ib < s->nblocks ? s->blocks[ib].bytenr : UINT64_MAX;
		if (id < s->ndrefs && s->drefs[id].bytenr < at)
			at = s->drefs[id].bytenr;
		while (!ret && ic < nchunks && chunks[ic]->logical < at)
			ret = put_group(s, chunks[ic++]);
		if (ret)
			break;
		if (ib < s->nblocks && s->blocks[ib].bytenr == at) {
			size_t r0;

			while (ir < s->nbrefs && s->brefs[ir].bytenr < at)
				ir++; /* a pointer at a block that is not there: cannot be (every pointer was walked) */
			for (r0 = ir; ir < s->nbrefs && s->brefs[ir].bytenr == at; ir++)
				;
			ret = put_block(s, &s->blocks[ib], &s->brefs[r0], ir - r0, skinny);
			ib++;
		} else {
			size_t d0 = id;

			while (id < s->ndrefs && s->drefs[id].bytenr == at)
				id++;
			ret = put_data(s, &s->drefs[d0], id - d0);
		}
	}
	while (!ret && ic < nchunks)
		ret = put_group(s, chunks[ic++]);
	if (!ret)
		summary(s, false);
out:
	free(chunks);
	rp_init_extent_free(c);
	return ret;
}
