/* SPDX-License-Identifier: MIT */
/*
 * Tree block references: the extent tree's metadata items against the blocks
 * the tree walk reached, merged in address order as the extent tree streams
 * by (the walk's blocks are sorted, the extent tree is in key order), so
 * nothing of the extent tree is held. Each block needs its extent item, each
 * metadata extent item a block some tree reaches, and the item's reference
 * count must equal the pointers (and root items) that reach the block: a
 * block shared by snapshots is counted once per parent, as the kernel counts.
 */
#include <errno.h>
#include <string.h>

#include "check/check_priv.h"

static bool is_log_block(const struct ub_checker *c, const struct chk_block *b)
{
	return b->tag >= 1 && b->tag <= c->ntags && c->tag_tree[b->tag - 1] == BTRFS_TREE_LOG_OBJECTID;
}

static uint64_t tree_of(const struct ub_checker *c, const struct chk_block *b)
{
	return b->tag >= 1 && b->tag <= c->ntags ? c->tag_tree[b->tag - 1] : 0;
}

static bool subvol_tree(uint64_t id)
{
	return id == BTRFS_FS_TREE_OBJECTID || id == BTRFS_TREE_RELOC_OBJECTID || id == BTRFS_DATA_RELOC_TREE_OBJECTID ||
	       (id >= BTRFS_FIRST_FREE_OBJECTID && id <= BTRFS_LAST_FREE_OBJECTID);
}

/*
 * The tree a pointer's reference names when the pointing node has no full
 * back references (the kernel's rule): the pointing node's owner, or the tree
 * whose root item points at the block. UINT64_MAX: the node was not read.
 */
static uint64_t edge_root(const struct ub_checker *c, const struct chk_edge *e)
{
	const struct chk_block *parent = e->parent ? chk_block_at(c, e->parent) : NULL;

	if (!e->parent)
		return e->tree;
	return parent && parent->gen ? parent->owner : UINT64_MAX;
}

/* The generation of the root tree `tree` was walked from (the newest, reloc trees share an id); 0: not walked. */
static uint64_t root_gen_of(const struct ub_checker *c, uint64_t tree)
{
	uint64_t gen = 0;

	for (size_t i = 0; c->tag_gen && i < c->ntags; i++)
		if (c->tag_tree[i] == tree && c->tag_gen[i] > gen)
			gen = c->tag_gen[i];
	return gen;
}

static struct chk_behind *behind_of(const struct ub_checker *c, uint64_t tree)
{
	for (size_t i = 0; i < c->nbehind; i++)
		if (c->behind[i].tree == tree)
			return &c->behind[i];
	return NULL;
}

static bool is_behind(const struct ub_checker *c, uint64_t tree)
{
	return behind_of(c, tree) != NULL;
}

/* Whether a tree that reaches block b (or its header's owner) may have its root item behind. */
static bool reached_by_behind(const struct ub_checker *c, const struct chk_block *b)
{
	size_t ne;
	const struct chk_edge *e;

	if (!c->nbehind)
		return false;
	if (is_behind(c, b->owner) || is_behind(c, tree_of(c, b)))
		return true;
	e = chk_edges_of(c, b->addr, &ne);
	for (size_t i = 0; i < ne; i++)
		if (is_behind(c, e[i].tree))
			return true;
	return false;
}

/*
 * Whether every tree that reaches block b is behind with a newer root found
 * (the cure's), and the newer root does not reach b (its blocks all have
 * items, b has none): after the cure nothing reaches b.
 */
static bool only_by_cured(const struct ub_checker *c, const struct chk_block *b)
{
	size_t ne;
	const struct chk_edge *e = chk_edges_of(c, b->addr, &ne);
	const struct chk_behind *bh;

	if (!ne)
		return false;
	for (size_t i = 0; i < ne; i++) {
		bh = behind_of(c, e[i].tree);
		if (!bh || !bh->newer)
			return false;
	}
	return true;
}

/* Blocks below `upto` that the extent tree skipped: marked, told when the stream ends (chk_extent_refs_missing). */
static void missing_before(struct ub_checker *c, size_t *cursor, uint64_t upto)
{
	for (; *cursor < c->blocks.n && c->blocks.v[*cursor].addr < upto; (*cursor)++)
		if (!is_log_block(c, &c->blocks.v[*cursor]))
			c->blocks.v[*cursor].missing = true;
}

/*
 * A block with no extent item. Told after the whole stream: whether a newer
 * root of its tree has items (a stray met later in the stream) decides
 * whether giving this block its item back is a cure or the loss of the
 * newer commit.
 */
static void report_missing(struct ub_checker *c, const struct chk_block *b)
{
	struct ub_chk_problem p;
	char name[32];

	memset(&p, 0, sizeof(p));
	p.cls = UB_CHK_EXTENT;
	p.tree = tree_of(c, b);
	p.logical = b->addr;
	/*
	 * Every pointer known, one of them from the tree its header names:
	 * the item is made again with that pointer's reference, and each
	 * other pointer gets its own (one problem each, as each reference
	 * is missing), in the form the kernel gives it (the repair, by the
	 * pointing node's flags); the block's own FULL_BACKREF flag the
	 * repair reads from its children's references.
	 */
	size_t ne = 0, own = SIZE_MAX;
	const struct chk_edge *e = NULL;

	if (c->walk_complete && !c->dropped_roots && b->owner_reached && !b->reloc && b->gen) {
		e = chk_edges_of(c, b->addr, &ne);
		/* the owner's pointer: from a node of the owner, or walking the owner's tree (the older rule) */
		for (size_t i = 0; i < ne && own == SIZE_MAX; i++)
			if (edge_root(c, &e[i]) == b->owner)
				own = i;
		for (size_t i = 0; i < ne && own == SIZE_MAX; i++)
			if (e[i].tree == b->owner)
				own = i;
		/* every other pointer's reference needs the node that holds it read */
		for (size_t i = 0; i < ne && own != SIZE_MAX; i++)
			if (i != own && edge_root(c, &e[i]) == UINT64_MAX)
				own = SIZE_MAX;
	}
	if (reached_by_behind(c, b) && only_by_cured(c, b)) {
		/* the cure points the root item at the newer root, which does not reach the block: no item needed */
		chk_report(c, &p, "tree block of %s has no extent item (a block of the older root of a tree whose "
			   "root item is behind: the newer root the cure takes does not need it)",
			   ub_tree_name(p.tree, name, sizeof(name)));
		return;
	}
	if (reached_by_behind(c, b)) {
		/*
		 * The block may belong to an older root than the one the extent
		 * tree accounts for: its item made again would go with freeing
		 * the newer root's blocks. No cure; nor may space be counted
		 * from the extent tree, which calls this block's space free.
		 */
		p.fix = UB_CHK_FIX_UNCOUNTED;
		chk_report(c, &p, "tree block of %s has no extent item (the root item of a tree reaching it is older "
			   "than blocks of the tree the extent tree has items for: no cure)",
			   ub_tree_name(p.tree, name, sizeof(name)));
		return;
	}
	if (own != SIZE_MAX && ne == b->ptrs) {
		p.fix = UB_CHK_FIX_EXTENT_ADD;
		p.want = b->owner;
		p.want2 = e[own].parent;
	} else {
		p.fix = UB_CHK_FIX_UNCOUNTED;
	}
	chk_report(c, &p, "tree block of %s has no extent item", ub_tree_name(p.tree, name, sizeof(name)));
	if (p.fix != UB_CHK_FIX_EXTENT_ADD)
		return;
	for (size_t i = 0; i < ne; i++) {
		char by[32];

		if (i == own)
			continue;
		p.fix = UB_CHK_FIX_BLOCK_REF_ADD;
		p.want = edge_root(c, &e[i]);
		p.want2 = e[i].parent;
		if (e[i].parent)
			chk_report(c, &p, "tree block of %s has no extent item: tree %s reaches it through node %llu too, "
				   "with no reference", name, ub_tree_name(e[i].tree, by, sizeof(by)),
				   (unsigned long long)e[i].parent);
		else
			chk_report(c, &p, "tree block of %s has no extent item: the root item of tree %s points at "
				   "it too, with no reference", name, ub_tree_name(e[i].tree, by, sizeof(by)));
	}
}

/* Whether the block at addr has an extent item: a block of the walk the stream did not skip, or a newer one. */
static bool has_item(const struct ub_checker *c, uint64_t addr)
{
	const struct chk_block *b = chk_block_at(c, addr);

	if (b)
		return !b->missing && !is_log_block(c, b);
	for (size_t i = 0; i < c->nnewer; i++)
		if (c->newer[i].addr == addr)
			return true;
	return false;
}

/*
 * The tree below a newer root read as the walk reads a tree (every pointer's
 * level, generation and keys as the tree layer checks them): 1 when every
 * block reads and has its extent item, 0 when one does not, <0 (-ENOMEM).
 */
static int verify_newer(struct ub_checker *c, uint64_t addr, const struct ub_expect *exp, int depth)
{
	struct ub_tree_ctx *tc = ub_fs_trees(c->fs);
	struct ub_eb *eb = NULL;
	int ret;

	if (depth > UB_MAX_LEVEL || !has_item(c, addr))
		return 0;
	chk_capture(c);
	ret = ub_tree_read_block(tc, addr, exp, &eb);
	(void)chk_captured(c);
	if (ret)
		return ret == -ENOMEM ? ret : 0;
	ret = 1;
	if (ub_eb_level(eb) > 0) {
		uint32_t n = ub_eb_nritems(eb);

		for (uint32_t i = 0; i < n && ret == 1; i++) {
			struct ub_key k, next;
			struct ub_expect ce = { .owner = exp->owner, .level = ub_eb_level(eb) - 1,
						.generation = ub_eb_node_gen(eb, (int)i), .first_key = &k,
						.end_key = exp->end_key, .parent = addr, .slot = (int)i };

			ub_eb_item_key(eb, (int)i, &k);
			if (i + 1 < n) {
				ub_eb_item_key(eb, (int)i + 1, &next);
				ce.end_key = &next;
			}
			if (ce.generation > ub_eb_generation(eb))
				ret = 0;
			else
				ret = verify_newer(c, ub_eb_node_blockptr(eb, (int)i), &ce, depth + 1);
		}
	}
	ub_eb_put(tc, eb);
	return ret;
}

/*
 * A tree whose root item is behind: its newer root is the newer block of the
 * highest level (one only, of the newest generation among them), read whole
 * with every block under it having its item. Found: the cure (ROOT_NEWER).
 */
static int find_newer_root(struct ub_checker *c, struct chk_behind *bh)
{
	const struct chk_newer *top = NULL;
	bool tie = false;
	uint64_t newest = 0;
	struct ub_chk_problem p;
	struct ub_expect exp;
	char name[32];
	int ret;

	for (size_t i = 0; i < c->nnewer; i++) {
		const struct chk_newer *nw = &c->newer[i];

		if (nw->tree != bh->tree)
			continue;
		if (nw->gen > newest)
			newest = nw->gen;
		if (!top || nw->level > top->level) {
			top = nw;
			tie = false;
		} else if (nw->level == top->level) {
			tie = true;
		}
	}
	/*
	 * Only a tree with a root item of its own and one root: the root and
	 * chunk trees' roots are the superblock's, relocation trees share an id.
	 */
	if (bh->tree == BTRFS_ROOT_TREE_OBJECTID || bh->tree == BTRFS_CHUNK_TREE_OBJECTID ||
	    bh->tree == BTRFS_TREE_LOG_OBJECTID || bh->tree == BTRFS_TREE_RELOC_OBJECTID)
		return 0;
	if (!top || tie || top->gen != newest || !c->fs)
		return 0;
	exp = (struct ub_expect){ .owner = bh->tree, .level = top->level, .generation = top->gen, .exact_owner = true };
	ret = verify_newer(c, top->addr, &exp, 0);
	if (ret <= 0)
		return ret;
	bh->newer = top->addr;
	memset(&p, 0, sizeof(p));
	p.cls = UB_CHK_ROOT;
	p.tree = bh->tree;
	p.logical = top->addr;
	p.fix = UB_CHK_FIX_ROOT_NEWER;
	p.want = top->gen;
	p.want2 = top->level;
	chk_report(c, &p, "the root item of %s is behind its tree: it names an older root (generation %llu) than "
		   "the tree block %llu (generation %llu, level %u) whose blocks all have their extent items",
		   ub_tree_name(bh->tree, name, sizeof(name)), (unsigned long long)root_gen_of(c, bh->tree),
		   (unsigned long long)top->addr, (unsigned long long)top->gen, top->level);
	return 1;
}

void chk_extent_refs_missing(struct ub_checker *c)
{
	for (size_t i = 0; i < c->blocks.n; i++)
		if (c->blocks.v[i].missing) {
			c->blocks.v[i].missing = false;
			report_missing(c, &c->blocks.v[i]);
		}
}

/*
 * A tree block extent item no tree reaches, of tree T (an inline
 * TREE_BLOCK_REF) and of a generation newer than T's root item: when the
 * block there reads as a block of T of that generation, it may be T's next
 * commit whose root item update was lost (btrfs check's "outdated root
 * item"). Its tree is then marked behind (no cure for its strays nor for
 * the older root's blocks) and 1 returned, T in *tree.
 */
static int newer_of_tree(struct ub_checker *c, const struct ub_key *k, const uint8_t *d, uint32_t size,
			 uint64_t *tree)
{
	uint32_t at = sizeof(struct btrfs_extent_item);
	uint64_t gen = UB_GET(btrfs_extent_item, generation, d);
	uint8_t level = 0;

	if (k->type == BTRFS_EXTENT_ITEM_KEY)
		at += sizeof(struct btrfs_tree_block_info);
	while (at + sizeof(struct btrfs_extent_inline_ref) <= size) {
		uint8_t type = (uint8_t)UB_GET(btrfs_extent_inline_ref, type, d + at);
		uint64_t t = UB_GET(btrfs_extent_inline_ref, offset, d + at);
		uint64_t rgen;

		if (type != BTRFS_TREE_BLOCK_REF_KEY && type != BTRFS_SHARED_BLOCK_REF_KEY)
			return 0;
		at += sizeof(struct btrfs_extent_inline_ref);
		if (type != BTRFS_TREE_BLOCK_REF_KEY)
			continue;
		rgen = root_gen_of(c, t);
		if (!rgen || gen <= rgen)
			continue;
		if (c->fs) {
			struct ub_expect exp = { .owner = t, .level = -1, .generation = gen, .exact_owner = true };
			struct ub_eb *eb = NULL;
			int ret;

			chk_capture(c);
			ret = ub_tree_read_block(ub_fs_trees(c->fs), k->objectid, &exp, &eb);
			(void)chk_captured(c);
			if (ret == -ENOMEM)
				return ret;
			if (ret)
				continue;
			level = ub_eb_level(eb);
			ub_eb_put(ub_fs_trees(c->fs), eb);
		} else {
			continue;
		}
		*tree = t;
		if (!is_behind(c, t)) {
			if (chk_reserve(&c->behind, &c->behind_cap, c->nbehind, sizeof(*c->behind), 4))
				return -ENOMEM;
			c->behind[c->nbehind++] = (struct chk_behind){ t, 0 };
		}
		if (chk_reserve(&c->newer, &c->newer_cap, c->nnewer, sizeof(*c->newer), 16))
			return -ENOMEM;
		c->newer[c->nnewer++] = (struct chk_newer){ k->objectid, t, gen, level };
		return 1;
	}
	return 0;
}

/* A problem at an item of the extent tree. */
static void where_item(struct ub_chk_problem *p, const struct ub_key *k)
{
	memset(p, 0, sizeof(*p));
	p->cls = UB_CHK_EXTENT;
	p->tree = BTRFS_EXTENT_TREE_OBJECTID;
	p->has_key = true;
	p->key = *k;
	p->logical = k->objectid;
}

const struct chk_edge *chk_edges_of(const struct ub_checker *c, uint64_t child, size_t *n)
{
	size_t lo = 0, hi = c->nedges, end;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (c->edges[mid].child < child)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (end = lo; end < c->nedges && c->edges[end].child == child; end++)
		;
	*n = end - lo;
	return c->edges + lo;
}

const struct chk_block *chk_block_at(const struct ub_checker *c, uint64_t addr)
{
	size_t lo = 0, hi = c->blocks.n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (c->blocks.v[mid].addr < addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < c->blocks.n && c->blocks.v[lo].addr == addr ? &c->blocks.v[lo] : NULL;
}

/*
 * One reference of tree block `bytenr` against the pointers that reach it: a
 * TREE_BLOCK_REF's root must be the tree of a pointer (the tree walked, or the
 * owner of the node holding it; a root item's for a root block), a
 * SHARED_BLOCK_REF's parent must be a node that points at the block, or the
 * block itself when it is a root with full back references (`flags`: its
 * extent item's; a relocation tree's root names itself so).
 */
static void block_ref(struct ub_checker *c, const struct ub_chk_problem *p, uint64_t bytenr, uint64_t flags,
		      uint8_t type, uint64_t value)
{
	size_t n;
	const struct chk_edge *e = chk_edges_of(c, bytenr, &n);
	struct ub_chk_problem q;
	char name[32];

	for (size_t i = 0; i < n; i++) {
		const struct chk_block *parent;

		if (type == BTRFS_SHARED_BLOCK_REF_KEY) {
			if (e[i].parent == value)
				return;
			if (!e[i].parent && value == bytenr) {
				if (flags & BTRFS_BLOCK_FLAG_FULL_BACKREF)
					return;
				chk_report(c, p, "the block's SHARED_BLOCK_REF names the block itself, and its extent item has no FULL_BACKREF flag");
				return;
			}
			continue;
		}
		if (e[i].tree == value)
			return;
		parent = e[i].parent ? chk_block_at(c, e[i].parent) : NULL;
		if (parent && parent->owner == value)
			return;
	}
	/*
	 * Every tree was walked (refs_judged): no pointer this reference could
	 * stand for reaches the block, so it goes; a pointer it leaves without
	 * a reference gets one of its own (close_block), and the count is the
	 * pointers' (EXTENT_REFS), so the item ends as the kernel keeps it.
	 */
	q = *p;
	q.fix = UB_CHK_FIX_BLOCK_REF_DEL;
	q.want = type;
	q.want2 = value;
	q.logical = bytenr;
	if (type == BTRFS_SHARED_BLOCK_REF_KEY)
		chk_report(c, &q, "the block's SHARED_BLOCK_REF names parent %llu, which does not point at it",
			   (unsigned long long)value);
	else
		chk_report(c, &q, "the block's TREE_BLOCK_REF names tree %s, which does not reach it",
			   ub_tree_name(value, name, sizeof(name)));
}

/* Whether reference `r` of the block at `bytenr` accounts for pointer `e` (the rules of block_ref). */
static bool ref_covers(const struct ub_checker *c, uint64_t bytenr, uint64_t flags, const struct chk_block_ref *r,
		       const struct chk_edge *e)
{
	const struct chk_block *parent;

	if (r->type == BTRFS_SHARED_BLOCK_REF_KEY)
		return e->parent ? r->value == e->parent : r->value == bytenr && (flags & BTRFS_BLOCK_FLAG_FULL_BACKREF);
	if (r->value == e->tree)
		return true;
	parent = e->parent ? chk_block_at(c, e->parent) : NULL;
	return parent && parent->owner == r->value;
}

/*
 * The stream leaves the open block: every pointer that reaches it must have a
 * reference of its own (the counts may add up while one tree's reference
 * stands for another's).
 */
static void close_block(struct ub_checker *c)
{
	struct chk_open_block *ob = &c->ob;
	struct ub_chk_problem p;
	const struct chk_edge *e;
	char name[32];
	size_t n;

	if (!ob->open)
		return;
	ob->open = false;
	e = chk_edges_of(c, ob->key.objectid, &n);
	for (size_t i = 0; i < n; i++) {
		bool covered = false;

		for (size_t j = 0; j < ob->nrefs && !covered; j++)
			covered = ref_covers(c, ob->key.objectid, ob->flags, &ob->refs[j], &e[i]);
		if (covered)
			continue;
		where_item(&p, &ob->key);
		/*
		 * The reference the kernel would have made for this pointer: of
		 * the tree that holds the pointing node (its header's owner), or
		 * of the tree whose root item points here; the repair makes it a
		 * SHARED_BLOCK_REF when the pointing node has full back references.
		 */
		if (edge_root(c, &e[i]) != UINT64_MAX) {
			p.fix = UB_CHK_FIX_BLOCK_REF_ADD;
			p.want = edge_root(c, &e[i]);
			p.want2 = e[i].parent;
		}
		if (e[i].parent)
			chk_report(c, &p, "tree %s reaches the block through node %llu, and no reference of the block accounts for it",
				   ub_tree_name(e[i].tree, name, sizeof(name)), (unsigned long long)e[i].parent);
		else
			chk_report(c, &p, "the root item of tree %s points at the block, and no reference of the block accounts for it",
				   ub_tree_name(e[i].tree, name, sizeof(name)));
	}
}

static void keep_ref(struct ub_checker *c, uint8_t type, uint64_t value)
{
	struct chk_open_block *ob = &c->ob;

	/* without memory the block is not judged (no false "unaccounted" verdicts) */
	if (chk_reserve(&ob->refs, &ob->refs_cap, ob->nrefs, sizeof(*ob->refs), 8)) {
		ob->open = false;
		return;
	}
	ob->refs[ob->nrefs++] = (struct chk_block_ref){ type, value };
}

/* Whether the individual references of the block at `bytenr` can be judged. */
static bool refs_judged(const struct ub_checker *c, uint64_t bytenr)
{
	const struct chk_block *b = chk_block_at(c, bytenr);

	return b && c->walk_complete && !c->dropped_roots && !is_log_block(c, b);
}

static void inline_block_refs(struct ub_checker *c, const struct ub_chk_problem *p, const struct ub_key *k,
			      const uint8_t *d, uint32_t size)
{
	uint32_t at = sizeof(struct btrfs_extent_item);

	if (!refs_judged(c, k->objectid))
		return;
	if (k->type == BTRFS_EXTENT_ITEM_KEY)
		at += sizeof(struct btrfs_tree_block_info);
	c->ob = (struct chk_open_block){ .key = *k, .flags = UB_GET(btrfs_extent_item, flags, d), .open = true,
					 .refs = c->ob.refs, .refs_cap = c->ob.refs_cap };
	while (at + sizeof(struct btrfs_extent_inline_ref) <= size) {
		uint8_t type = (uint8_t)UB_GET(btrfs_extent_inline_ref, type, d + at);
		uint64_t value = UB_GET(btrfs_extent_inline_ref, offset, d + at);

		/* the tree checker has rejected other records in a tree block's item */
		if (type != BTRFS_TREE_BLOCK_REF_KEY && type != BTRFS_SHARED_BLOCK_REF_KEY)
			return;
		block_ref(c, p, k->objectid, c->ob.flags, type, value);
		keep_ref(c, type, value);
		at += sizeof(struct btrfs_extent_inline_ref);
	}
}

void chk_block_ref_keyed(struct ub_checker *c, const struct ub_key *k)
{
	struct ub_chk_problem p;
	bool mine = c->ob.open && c->ob.key.objectid == k->objectid;

	if (!mine)
		close_block(c);
	if (!refs_judged(c, k->objectid))
		return;
	where_item(&p, k);
	/* a keyed reference of a block whose item was not kept: its flags unknown, the self reference passes */
	block_ref(c, &p, k->objectid, mine ? c->ob.flags : BTRFS_BLOCK_FLAG_FULL_BACKREF, k->type, k->offset);
	if (mine)
		keep_ref(c, k->type, k->offset);
}

/*
 * The tree its header names must account for a block (btrfs check's rule): it
 * reaches the block, or one of the item's TREE_BLOCK_REFs names it. Told only
 * when every reference is inline and none is a full back reference.
 */
static void owner_refs(struct ub_checker *c, const struct ub_chk_problem *p, const struct chk_block *b,
		       const struct ub_key *k, const uint8_t *d, uint32_t size, uint64_t refs)
{
	uint32_t at = sizeof(struct btrfs_extent_item);
	uint64_t seen = 0;
	char name[32];

	if (UB_GET(btrfs_extent_item, flags, d) & BTRFS_BLOCK_FLAG_FULL_BACKREF)
		return;
	/* relocation writes such blocks with full back references (btrfs check's rule too) */
	if (b->reloc) {
		chk_report(c, p, "the block's header has the RELOC flag, its extent item not FULL_BACKREF");
		return;
	}
	if (b->owner_reached)
		return;
	if (k->type == BTRFS_EXTENT_ITEM_KEY)
		at += sizeof(struct btrfs_tree_block_info);
	while (at + sizeof(struct btrfs_extent_inline_ref) <= size) {
		uint8_t type = (uint8_t)UB_GET(btrfs_extent_inline_ref, type, d + at);

		if (type == BTRFS_TREE_BLOCK_REF_KEY && UB_GET(btrfs_extent_inline_ref, offset, d + at) == b->owner)
			return;
		if (type != BTRFS_TREE_BLOCK_REF_KEY && type != BTRFS_SHARED_BLOCK_REF_KEY)
			return;
		seen++;
		at += sizeof(struct btrfs_extent_inline_ref);
	}
	if (seen != refs)
		return;
	chk_report(c, p, "the block's owner %s (in its header) neither reaches it nor has a TREE_BLOCK_REF for it",
		   ub_tree_name(b->owner, name, sizeof(name)));
}

void chk_extent_refs_item(struct ub_checker *c, const struct ub_key *k, const uint8_t *d, uint32_t size,
			  uint32_t nodesize, size_t *cursor)
{
	struct ub_chk_problem p;
	const struct chk_block *b;
	uint64_t refs;
	bool tree_block = k->type == BTRFS_METADATA_ITEM_KEY;

	/* any extent item ends the references of the block before it */
	close_block(c);
	if (size < sizeof(struct btrfs_extent_item))
		return;
	if (k->type == BTRFS_EXTENT_ITEM_KEY)
		tree_block = UB_GET(btrfs_extent_item, flags, d) & BTRFS_EXTENT_FLAG_TREE_BLOCK;
	if (!tree_block)
		return;
	where_item(&p, k);
	if (k->type == BTRFS_EXTENT_ITEM_KEY && k->offset != nodesize)
		chk_report(c, &p, "tree block extent item of %llu bytes, the node size is %u",
			   (unsigned long long)k->offset, nodesize);
	missing_before(c, cursor, k->objectid);
	if (*cursor >= c->blocks.n || c->blocks.v[*cursor].addr != k->objectid) {
		if (c->walk_complete && !c->dropped_roots) {
			uint64_t t = 0;
			char name[32];

			if (newer_of_tree(c, k, d, size, &t) > 0) {
				/* perhaps the tree's newer commit: its item stays (no cure), and the repair is warned */
				p.fix = UB_CHK_FIX_BEHIND;
				chk_report(c, &p, "extent item for a tree block that no tree reaches: a block of %s of "
					   "generation %llu, newer than its root item's %llu (the root item may be behind "
					   "its tree: no cure)", ub_tree_name(t, name, sizeof(name)),
					   (unsigned long long)UB_GET(btrfs_extent_item, generation, d),
					   (unsigned long long)root_gen_of(c, t));
				return;
			}
			p.fix = UB_CHK_FIX_EXTENT_DEL;
			chk_report(c, &p, "extent item for a tree block that no tree reaches");
		}
		return;
	}
	b = &c->blocks.v[(*cursor)++];
	refs = UB_GET(btrfs_extent_item, refs, d);
	/* a log tree block is never in the extent tree */
	if (is_log_block(c, b)) {
		chk_report(c, &p, "extent item for a block of the log tree");
		return;
	}
	/* the extent item is made with the block, in the transaction that wrote the block's header */
	if (b->gen && UB_GET(btrfs_extent_item, generation, d) != b->gen) {
		p.fix = UB_CHK_FIX_EXTENT_GEN;
		p.want = b->gen;
		chk_report(c, &p, "extent item generation %llu, the block's header says %llu",
			   (unsigned long long)UB_GET(btrfs_extent_item, generation, d), (unsigned long long)b->gen);
		p.fix = UB_CHK_FIX_NONE;
		p.want = 0;
	}
	if (!c->walk_complete || (c->dropped_roots && subvol_tree(tree_of(c, b))))
		return;
	if (refs != b->ptrs) {
		/* every tree walked: the pointers are the block's references, whatever its refs say */
		p.fix = UB_CHK_FIX_EXTENT_REFS;
		p.want = b->ptrs;
		chk_report(c, &p, "extent item counts %llu references, %u pointers reach the block",
			   (unsigned long long)refs, b->ptrs);
		p.fix = UB_CHK_FIX_NONE;
	}
	/* ---- individual tree block references ---- */
	owner_refs(c, &p, b, k, d, size, refs);
	inline_block_refs(c, &p, k, d, size);
}

void chk_extent_refs_end(struct ub_checker *c, size_t *cursor)
{
	close_block(c);
	missing_before(c, cursor, UINT64_MAX);
	/* the whole stream seen: a tree behind may have its newer root whole */
	for (size_t i = 0; i < c->nbehind; i++)
		if (find_newer_root(c, &c->behind[i]) == -ENOMEM)
			break;
	chk_extent_refs_missing(c);
}
