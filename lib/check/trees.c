/* SPDX-License-Identifier: MIT */
/*
 * Tree block checks: every tree from the superblock (chunk, root, log) and
 * every root item, walked parents before children. Each block is read
 * through the tree layer with what its parent says it must be (level,
 * generation, first key, the next pointer's key as an upper bound, owner),
 * so checksum, header, item layout and key order within and across blocks
 * are the reader's verdicts; this pass adds reachability (each block once
 * per tree, shared only between subvolume trees), the chunk a block lies in
 * and pointer generations against their node's.
 *
 * Memory: one entry per block reached (40 bytes: address, owner, generation, pointers,
 * tree; handed to the extent checks), one record per file extent item with
 * data (40 bytes, for the data references) and the root items to walk; the
 * blocks themselves go through the bounded block cache.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check/check_priv.h"

struct walk {
	struct ub_checker *c;
	struct ub_tree_ctx *tc;
	struct ub_volume *vol;
	struct chk_block_map *seen;
	uint64_t tree;
	/* the set's tag of the tree being walked: one per root (reloc trees share an objectid), 1-based */
	uint64_t tag;
	uint64_t *tag_tree; /* objectid of each tag */
	uint64_t *tag_gen;  /* the generation of each tag's root */
	size_t ntags, tagcap, gencap;
	uint32_t nodesize;
	uint64_t owner;   /* what the blocks' headers must say (0: any subvolume's) */
	bool shareable;   /* a subvolume tree: its blocks may be other subvolumes' too */
	uint64_t max_gen; /* no block newer than this */
	/* leaves of the root tree (and the log root tree) name the trees to walk next */
	int (*leaf)(struct walk *w, const struct ub_eb *eb);
	struct root_list *roots;
	struct root_list *log_roots; /* the log root tree's list, when `roots` is it */
};

struct root_ref {
	struct ub_key key;
	struct ub_root root;
};

struct root_list {
	struct root_ref *v;
	size_t n, cap;
};

static int edge_cmp(const void *a, const void *b)
{
	const struct chk_edge *x = a, *y = b;

	if (x->child != y->child)
		return x->child < y->child ? -1 : 1;
	return x->parent < y->parent ? -1 : x->parent > y->parent;
}

static int fext_cmp(const void *a, const void *b)
{
	return chk_fext_cmp(a, b);
}

static bool subvol_tree(uint64_t id)
{
	return id == BTRFS_FS_TREE_OBJECTID || id == BTRFS_TREE_RELOC_OBJECTID || id == BTRFS_DATA_RELOC_TREE_OBJECTID ||
	       (id >= BTRFS_FIRST_FREE_OBJECTID && id <= BTRFS_LAST_FREE_OBJECTID);
}

static void where_block(struct ub_chk_problem *p, const struct walk *w, uint64_t bytenr, const struct ub_key *key)
{
	memset(p, 0, sizeof(*p));
	p->cls = UB_CHK_TREE;
	p->tree = w->tree;
	p->logical = bytenr;
	if (key) {
		p->has_key = true;
		p->key = *key;
	}
}

/* 1: walk the block's children, 0: do not (already checked through another tree), <0: stop. */
static int enter(struct walk *w, uint64_t bytenr, const struct ub_key *key, struct chk_block **bp)
{
	char name[32], other[32];
	struct ub_chk_problem p;
	struct chk_block *b;
	uint64_t first;
	const struct ub_chunk *ch;
	int ret = chk_block_map_add(w->seen, bytenr, (uint32_t)w->tag, &b);

	if (ret < 0)
		return ret;
	*bp = b;
	b->ptrs++;
	first = b->tag;
	where_block(&p, w, bytenr, key);
	if (ret == 1) {
		uint64_t first_tree = first >= 1 && first <= w->ntags ? w->tag_tree[first - 1] : 0;

		if (first == w->tag) {
			chk_report(w->c, &p, "tree block reached twice in this tree (a loop or a block pointed at twice)");
			return 0;
		}
		if (w->shareable && subvol_tree(first_tree)) {
			w->c->sum.shared_blocks++;
			return 0;
		}
		chk_report(w->c, &p, "tree block is also in %s (only subvolume trees share blocks)",
			   ub_tree_name(first_tree, other, sizeof(other)));
		return 0;
	}
	/* the kernel never lets a tree block cross a stripe: RAID maps a block in one piece */
	if (bytenr / UB_STRIPE_LEN != (bytenr + w->nodesize - 1) / UB_STRIPE_LEN)
		chk_report(w->c, &p, "tree block [%llu, +%u) crosses a %llu KiB stripe boundary",
			   (unsigned long long)bytenr, w->nodesize, UB_STRIPE_LEN >> 10);
	ch = ub_volume_find_chunk(w->vol, bytenr);
	if (ch) {
		uint64_t want = w->tree == BTRFS_CHUNK_TREE_OBJECTID ? BTRFS_BLOCK_GROUP_SYSTEM : BTRFS_BLOCK_GROUP_METADATA;

		if (!(ch->type & want))
			chk_report(w->c, &p, "tree block of %s lies in chunk %llu whose type 0x%llx is not %s",
				   ub_tree_name(w->tree, name, sizeof(name)), (unsigned long long)ch->logical,
				   (unsigned long long)ch->type, want == BTRFS_BLOCK_GROUP_SYSTEM ? "SYSTEM" : "METADATA");
	}
	return 1;
}

struct bad_copy {
	struct walk *w;
	uint64_t bytenr;
	const struct ub_key *key;
};

static void report_bad_copy(void *arg, int mirror, const char *where, const char *why)
{
	struct bad_copy *b = arg;
	struct ub_chk_problem p;

	where_block(&p, b->w, b->bytenr, b->key);
	(void)mirror;
	p.fix = UB_CHK_FIX_COPY;
	chk_report(b->w->c, &p, "%s is bad: %s; another copy is good", where, why);
}

/* A pointer followed (parent 0: a root item's), for the blocks' individual references. */
static int add_edge(struct walk *w, uint64_t child, uint64_t parent)
{
	struct ub_checker *c = w->c;

	/* the log trees' blocks have no references */
	if (w->tree == BTRFS_TREE_LOG_OBJECTID)
		return 0;
	if (chk_reserve(&c->edges, &c->edges_cap, c->nedges, sizeof(*c->edges), 1024))
		return -ENOMEM;
	c->edges[c->nedges++] = (struct chk_edge){ child, parent, w->tree };
	return 0;
}

static int visit(struct walk *w, uint64_t bytenr, const struct ub_expect *exp, const struct ub_key *key)
{
	struct ub_chk_problem p;
	struct ub_eb *eb = NULL;
	struct chk_block *b = NULL;
	const char *why;
	uint32_t n;
	uint8_t level;
	int ret = enter(w, bytenr, key, &b);
	bool descend = ret == 1;

	if (ret < 0)
		return ret;
	chk_capture(w->c);
	ret = ub_tree_read_block(w->tc, bytenr, exp, &eb);
	why = chk_captured(w->c);
	if (ret) {
		where_block(&p, w, bytenr, key);
		if (ret == -ENOMEM)
			return ret;
		/* every copy read and none passes: a repair may salvage one (lib/repair/salvage.c) */
		if (ret == -EUCLEAN && strstr(why, "no good copy among")) {
			p.fix = UB_CHK_FIX_SALVAGE;
			p.want = exp ? exp->generation : 0;
			p.want2 = exp && exp->level >= 0 ? (uint64_t)exp->level : UINT64_MAX;
		}
		chk_report(w->c, &p, "%s", *why ? why : strerror(-ret));
		/* what lies below is unknown: reference counts and "unreached" verdicts would be wrong */
		w->c->walk_complete = false;
		return 0;
	}
	/* the map may move while children are added: the entry is used before that */
	b->owner = ub_eb_owner(eb);
	b->gen = ub_eb_generation(eb);
	if (b->owner == w->tree)
		b->owner_reached = true;
	if (UB_GET(ub_disk_header, flags, ub_eb_data(eb)) & BTRFS_HEADER_FLAG_RELOC)
		b->reloc = true;
	if (!descend) {
		ub_eb_put(w->tc, eb);
		return 0;
	}
	/* the read stopped at the first good copy: the others are checked here, once per block */
	if (ub_volume_num_copies(w->vol, bytenr) > 1) {
		struct bad_copy bc = { w, bytenr, key };

		chk_capture(w->c);
		ret = ub_tree_check_copies(w->tc, bytenr, exp, report_bad_copy, &bc);
		(void)chk_captured(w->c);
		if (ret == -ENOMEM) {
			ub_eb_put(w->tc, eb);
			return ret;
		}
		ret = 0;
	}
	w->c->sum.tree_blocks++;
	w->c->sum.meta_bytes += ub_eb_len(eb);
	if (!(w->c->sum.tree_blocks & 255))
		chk_progress(w->c, "tree blocks", w->c->sum.meta_bytes, 0);
	level = ub_eb_level(eb);
	n = ub_eb_nritems(eb);
	if (ub_eb_generation(eb) > w->max_gen) {
		where_block(&p, w, bytenr, key);
		chk_report(w->c, &p, "generation %llu is newer than the filesystem's %llu",
			   (unsigned long long)ub_eb_generation(eb), (unsigned long long)w->max_gen);
	}
	if (level == 0) {
		ret = w->leaf ? w->leaf(w, eb) : 0;
		ub_eb_put(w->tc, eb);
		return ret;
	}
	for (uint32_t i = 0; i < n && ret >= 0; i++) {
		struct ub_key k, next;
		uint64_t child = ub_eb_node_blockptr(eb, (int)i), gen = ub_eb_node_gen(eb, (int)i);
		struct ub_expect ce = {
			.owner = w->owner, .level = level - 1, .generation = gen, .first_key = &k,
			.end_key = exp->end_key, .parent = bytenr, .slot = (int)i,
		};

		/* the disk fetches the next children (every copy, each is verified) while these are checked */
		if (!(i % UB_TREE_READAHEAD_LEAVES))
			ub_tree_readahead_copies(w->tc, eb, (int)i, UB_TREE_READAHEAD_LEAVES);
		ub_eb_item_key(eb, (int)i, &k);
		if (i + 1 < n) {
			ub_eb_item_key(eb, (int)i + 1, &next);
			ce.end_key = &next;
		}
		if (add_edge(w, child, bytenr)) {
			ub_eb_put(w->tc, eb);
			return -ENOMEM;
		}
		if (gen > ub_eb_generation(eb)) {
			where_block(&p, w, bytenr, &k);
			chk_report(w->c, &p, "slot %u points at %llu with generation %llu, newer than the node's %llu", i,
				   (unsigned long long)child, (unsigned long long)gen,
				   (unsigned long long)ub_eb_generation(eb));
		}
		ret = visit(w, child, &ce, &k);
	}
	ub_eb_put(w->tc, eb);
	return ret;
}

static int walk_tree(struct walk *w, const struct ub_root *r, const struct ub_key *key)
{
	struct ub_expect exp = { .owner = w->owner, .level = r->level, .generation = r->generation,
				 .exact_owner = w->owner != 0 };

	if (chk_reserve(&w->tag_tree, &w->tagcap, w->ntags, sizeof(*w->tag_tree), 32) ||
	    chk_reserve(&w->tag_gen, &w->gencap, w->ntags, sizeof(*w->tag_gen), 32))
		return -ENOMEM;
	if (w->ntags >= UINT32_MAX)
		return -EOVERFLOW;
	w->tag_gen[w->ntags] = r->generation;
	w->tag_tree[w->ntags++] = w->tree;
	w->tag = w->ntags;
	w->c->sum.trees++;
	if (add_edge(w, r->bytenr, 0))
		return -ENOMEM;
	return visit(w, r->bytenr, &exp, key);
}

static int add_root(struct root_list *l, const struct ub_key *key, const uint8_t *d)
{
	if (chk_reserve(&l->v, &l->cap, l->n, sizeof(*l->v), 32))
		return -ENOMEM;
	l->v[l->n].key = *key;
	l->v[l->n].root = (struct ub_root){
		.objectid = key->objectid,
		.bytenr = UB_GET(btrfs_root_item, bytenr, d),
		.generation = UB_GET(btrfs_root_item, generation, d),
		.level = (uint8_t)UB_GET(btrfs_root_item, level, d),
	};
	l->n++;
	return 0;
}

/* File extent items with data on disk (log trees' make no references and are not looked at). */
static int collect_file_extents(struct walk *w, const struct ub_eb *eb)
{
	struct ub_checker *c = w->c;
	uint32_t n = ub_eb_nritems(eb);

	for (uint32_t i = 0; i < n; i++) {
		struct ub_key k;
		uint32_t size;
		const uint8_t *d;
		uint8_t type;

		ub_eb_item_key(eb, (int)i, &k);
		if (k.type != BTRFS_EXTENT_DATA_KEY)
			continue;
		d = ub_eb_item_data(eb, (int)i, &size);
		/* the tree checker has rejected an item too short for its type */
		if (size < sizeof(struct btrfs_file_extent_item))
			continue;
		type = (uint8_t)UB_GET(btrfs_file_extent_item, type, d);
		if ((type != BTRFS_FILE_EXTENT_REG && type != BTRFS_FILE_EXTENT_PREALLOC) ||
		    !UB_GET(btrfs_file_extent_item, disk_bytenr, d))
			continue;
		if (chk_reserve(&c->fext, &c->fext_cap, c->nfext, sizeof(*c->fext), 1024))
			return -ENOMEM;
		c->fext[c->nfext++] = (struct chk_fext){
			.bytenr = UB_GET(btrfs_file_extent_item, disk_bytenr, d),
			.root = ub_eb_owner(eb), .ino = k.objectid,
			.offset = k.offset - UB_GET(btrfs_file_extent_item, offset, d),
			.leaf = ub_eb_start(eb),
		};
	}
	return 0;
}

/* Root items in a leaf of the root tree or of the log root tree: the trees to walk after it. */
static int collect_roots(struct walk *w, const struct ub_eb *eb)
{
	uint32_t n = ub_eb_nritems(eb);

	/* the free space cache's inodes (v1) live in the root tree, with data extents of their own */
	if (w->roots != w->log_roots && collect_file_extents(w, eb))
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		struct ub_key k;
		uint32_t size;
		const uint8_t *d;

		ub_eb_item_key(eb, (int)i, &k);
		d = ub_eb_item_data(eb, (int)i, &size);
		/* the root tree's (not the log root tree's) references between subvolumes */
		if (w->roots != w->log_roots && chk_root_refs_add(w->c, &k, d, size))
			return -ENOMEM;
		if (k.type != BTRFS_ROOT_ITEM_KEY)
			continue;
		/* the tree checker has rejected a root item too short to hold these */
		if (size < offsetof(struct btrfs_root_item, generation_v2) || !UB_GET(btrfs_root_item, bytenr, d))
			continue;
		/*
		 * A deleted subvolume is walked while its drop has not started; once the
		 * cleaner has dropped part of it, what is left may point at freed blocks.
		 */
		if (!UB_GET(btrfs_root_item, refs, d) && k.objectid != BTRFS_TREE_LOG_OBJECTID &&
		    (size < offsetof(struct btrfs_root_item, drop_level) ||
		     UB_GET(btrfs_disk_key, objectid, d + offsetof(struct btrfs_root_item, drop_progress)))) {
			w->c->dropped_roots = true;
			continue;
		}
		if (add_root(w->roots, &k, d))
			return -ENOMEM;
		/* deleted, not yet cleaned: its tree is walked, but it is no live subvolume */
		if (!UB_GET(btrfs_root_item, refs, d) && w->roots != w->log_roots) {
			struct ub_checker *c = w->c;

			if (chk_reserve(&c->dead_subvols, &c->dead_cap, c->ndead, sizeof(*c->dead_subvols), 8))
				return -ENOMEM;
			c->dead_subvols[c->ndead++] = k.objectid;
		}
	}
	return 0;
}

static int walk_roots(struct walk *w, struct root_list *l, bool log)
{
	int ret = 0;

	for (size_t i = 0; i < l->n && ret >= 0; i++) {
		const struct root_ref *r = &l->v[i];

		w->tree = log ? BTRFS_TREE_LOG_OBJECTID : r->key.objectid;
		w->shareable = !log && subvol_tree(w->tree);
		/* below its root a subvolume tree accepts any subvolume's block (the reader's rule) */
		w->owner = w->tree;
		w->leaf = log ? NULL : collect_file_extents;
		ret = walk_tree(w, &r->root, &r->key);
	}
	return ret;
}

int chk_trees(struct ub_checker *c, struct ub_fs *fs)
{
	struct root_list roots = { 0 }, logs = { 0 };
	struct ub_root chunk, rt;
	const uint8_t *sb = ub_volume_super(ub_fs_volume(fs));
	struct walk w = { .c = c, .tc = ub_fs_trees(fs), .vol = ub_fs_volume(fs), .seen = &c->blocks,
			  .max_gen = c->super_generation };
	struct ub_volume_info vi;
	int ret = ub_volume_get_info(w.vol, &vi);

	if (ret)
		return ret;
	w.nodesize = vi.nodesize;
	c->walk_complete = true;
	ret = ub_fs_tree_root(fs, BTRFS_CHUNK_TREE_OBJECTID, &chunk);
	if (!ret)
		ret = ub_fs_tree_root(fs, BTRFS_ROOT_TREE_OBJECTID, &rt);
	if (ret)
		return ret;
	w.tree = w.owner = BTRFS_CHUNK_TREE_OBJECTID;
	ret = walk_tree(&w, &chunk, NULL);
	if (ret >= 0) {
		w.tree = w.owner = BTRFS_ROOT_TREE_OBJECTID;
		w.leaf = collect_roots;
		w.roots = &roots;
		ret = walk_tree(&w, &rt, NULL);
	}
	if (ret >= 0) {
		chk_root_refs_check(c);
		ret = walk_roots(&w, &roots, false);
	}
	/* the log belongs to the superblock's own root tree, not to an older one being checked */
	if (ret >= 0 && !c->opts.no_log && UB_GET(ub_disk_super, log_root, sb) && rt.bytenr == UB_GET(ub_disk_super, root, sb)) {
		struct ub_root lr = { .objectid = BTRFS_TREE_LOG_OBJECTID,
				      .bytenr = UB_GET(ub_disk_super, log_root, sb),
				      .generation = UB_GET(ub_disk_super, generation, sb) + 1,
				      .level = (uint8_t)UB_GET(ub_disk_super, log_root_level, sb) };

		w.tree = w.owner = BTRFS_TREE_LOG_OBJECTID;
		w.shareable = false;
		w.leaf = collect_roots;
		w.roots = &logs;
		w.log_roots = &logs;
		/* log blocks carry the generation after the superblock's */
		w.max_gen = c->super_generation + 1;
		ret = walk_tree(&w, &lr, NULL);
		if (ret >= 0)
			ret = walk_roots(&w, &logs, true);
	}
	chk_progress(c, "tree blocks", c->sum.meta_bytes, 0);
	free(roots.v);
	free(logs.v);
	c->tag_tree = w.tag_tree;
	c->tag_gen = w.tag_gen;
	c->ntags = w.ntags;
	chk_block_map_sort(&c->blocks);
	if (c->nfext)
		qsort(c->fext, c->nfext, sizeof(*c->fext), fext_cmp);
	if (c->nedges)
		qsort(c->edges, c->nedges, sizeof(*c->edges), edge_cmp);
	return ret < 0 ? ret : 0;
}
