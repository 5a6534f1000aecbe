/* SPDX-License-Identifier: MIT */
/* Searching and walking a tree by key (read-only paths). */
#include <errno.h>
#include <stdio.h>
#include "ubtrfs/tree.h"
#include "tree/tree_write.h"

static void key_str(const struct ub_key *k, char *buf, size_t len)
{
	snprintf(buf, len, "(%llu %u %llu)", (unsigned long long)k->objectid, k->type, (unsigned long long)k->offset);
}

void ub_path_init(struct ub_path *p)
{
	memset(p, 0, sizeof(*p));
}

void ub_path_release(struct ub_path *p)
{
	/* a whole path goes back at once: one taking of the cache's lock, not one per level */
	ub_eb_put_many(p->tc, p->nodes, UB_MAX_LEVEL);
	for (int i = 0; i < UB_MAX_LEVEL; i++) {
		p->nodes[i] = NULL;
		p->slots[i] = 0;
	}
}

/* The on-disk key at `d` against `key`, read field by field: no copy of the whole key per probe. */
static inline int disk_key_cmp(const uint8_t *d, const struct ub_key *key)
{
	uint64_t v = UB_GET(btrfs_disk_key, objectid, d);
	uint8_t t;

	if (v != key->objectid)
		return v < key->objectid ? -1 : 1;
	t = (uint8_t)UB_GET(btrfs_disk_key, type, d);
	if (t != key->type)
		return t < key->type ? -1 : 1;
	v = UB_GET(btrfs_disk_key, offset, d);
	if (v != key->offset)
		return v < key->offset ? -1 : 1;
	return 0;
}

/* First slot whose key is >= `key` (nritems if none). The binary search of every tree walk. */
int ub_eb_lower_bound(const struct ub_eb *eb, const struct ub_key *key, bool *exact)
{
	const uint8_t *base = eb->data + UB_HEADER_SIZE;
	uint32_t step = ub_eb_level(eb) ? UB_KEY_PTR_SIZE : UB_ITEM_SIZE;
	int lo = 0, hi = (int)ub_eb_nritems(eb);

	*exact = false;
	while (lo < hi) {
		int mid = lo + (hi - lo) / 2;
		int c = disk_key_cmp(base + (uint32_t)mid * step, key);

		if (c < 0) {
			lo = mid + 1;
		} else {
			if (c == 0)
				*exact = true;
			hi = mid;
		}
	}
	return lo;
}

/*
 * The key where the range of the block at `level` of the path ends: the key of
 * the next slot in the first node above that has one. false: unbounded (the
 * right edge of the tree).
 */
static bool path_end_key(const struct ub_path *p, int level, struct ub_key *end)
{
	for (int l = level; l < UB_MAX_LEVEL && p->nodes[l]; l++) {
		if ((uint32_t)(p->slots[l] + 1) < ub_eb_nritems(p->nodes[l])) {
			ub_eb_item_key(p->nodes[l], p->slots[l] + 1, end);
			return true;
		}
	}
	return false;
}

/* The child at `slot` of the node at `level`: it must start at the slot's key and end before the next range. */
int ub_path_read_child(struct ub_path *p, int level, int slot, struct ub_eb **out)
{
	const struct ub_eb *parent = p->nodes[level];
	struct ub_key first, end;
	struct ub_expect exp = {
		.owner = p->root->objectid,
		.level = level - 1,
		.generation = ub_eb_node_gen(parent, slot),
		.first_key = &first,
		.parent = parent->start,
		.slot = slot,
	};

	ub_eb_item_key(parent, slot, &first);
	if (path_end_key(p, level, &end))
		exp.end_key = &end;
	return ub_tree_read_block(p->tc, ub_eb_node_blockptr(parent, slot), &exp, out);
}

/* What a root pointer (superblock or ROOT_ITEM) promises about the block it names. */
struct ub_expect ub_root_expect(const struct ub_root *root)
{
	return (struct ub_expect){
		.owner = root->objectid,
		.level = root->level,
		.generation = root->generation,
		.slot = -1,
		.exact_owner = true,
	};
}

static int read_root(struct ub_tree_ctx *tc, const struct ub_root *root, struct ub_eb **out)
{
	struct ub_expect exp = ub_root_expect(root);

	return ub_tree_read_block(tc, root->bytenr, &exp, out);
}

int ub_tree_search(struct ub_tree_ctx *tc, const struct ub_root *root, const struct ub_key *key, struct ub_path *p)
{
	struct ub_eb *eb;
	int level, ret;
	bool exact;

	ub_path_release(p);
	p->tc = tc;
	p->root = root;
	if (root->level >= UB_MAX_LEVEL)
		return -EUCLEAN;
	ret = read_root(tc, root, &eb);
	if (ret)
		return ret;
	level = ub_eb_level(eb);
	p->nodes[level] = eb;
	while (level > 0) {
		int slot = ub_eb_lower_bound(eb, key, &exact);
		/* descend into the child whose key range holds `key` */
		if (!exact && slot > 0)
			slot--;
		p->slots[level] = slot;
		ret = ub_path_read_child(p, level, slot, &eb);
		if (ret)
			return ret;
		level--;
		p->nodes[level] = eb;
	}
	p->slots[0] = ub_eb_lower_bound(eb, key, &exact);
	if (exact)
		return 0;
	if ((uint32_t)p->slots[0] < ub_eb_nritems(eb))
		return 1;
	/* past this leaf: the next item (if any) starts the next leaf */
	p->slots[0] = (int)ub_eb_nritems(eb) - 1;
	if (p->slots[0] < 0)
		p->slots[0] = 0;
	ret = ub_eb_nritems(eb) ? ub_tree_next(p) : 1;
	if (ret < 0)
		return ret;
	return ret == 0 ? 1 : 2;
}

static int step_leaf(struct ub_path *p, int dir);

/*
 * Move to the neighbour leaf in direction `dir` (+1 / -1). 0 ok, 1 no more, <0 error.
 * Keys must keep going the same way: a repeated or reversed key means two
 * pointers share a block, which ends the walk rather than looping.
 */
static int step(struct ub_path *p, int dir)
{
	struct ub_key prev, now;
	int ret;

	if (!ub_eb_nritems(p->nodes[0]))
		return step_leaf(p, dir);
	ub_path_key(p, &prev);
	ret = step_leaf(p, dir);
	if (ret)
		return ret;
	ub_path_key(p, &now);
	if (dir * ub_key_cmp(&now, &prev) <= 0) {
		char t[64], a[80], b[80];
		if (!ub_tree_is_quiet()) {
			key_str(&now, a, sizeof(a));
			key_str(&prev, b, sizeof(b));
			ub_err(&p->tc->log, "tree %s: leaf at logical %llu (level 0): key %s comes %s key %s: "
			       "keys out of order across leaves, a shared or misplaced block",
			       ub_tree_name(p->root->objectid, t, sizeof(t)), (unsigned long long)p->nodes[0]->start, a,
			       dir > 0 ? "after" : "before", b);
		}
		return -EUCLEAN;
	}
	return 0;
}

static int step_leaf(struct ub_path *p, int dir)
{
	int level = 1;

	while (level < UB_MAX_LEVEL && p->nodes[level]) {
		int slot = p->slots[level] + dir;
		if (slot >= 0 && (uint32_t)slot < ub_eb_nritems(p->nodes[level]))
			break;
		level++;
	}
	if (level >= UB_MAX_LEVEL || !p->nodes[level])
		return 1;
	p->slots[level] += dir;
	while (level > 0) {
		struct ub_eb *child;
		int ret = ub_path_read_child(p, level, p->slots[level], &child);
		uint32_t n;

		if (ret)
			return ret;
		level--;
		ub_eb_put(p->tc, p->nodes[level]);
		p->nodes[level] = child;
		n = ub_eb_nritems(child);
		if (n == 0)
			return -EUCLEAN; /* refused by read_child already; kept for the slot arithmetic below */
		p->slots[level] = dir > 0 ? 0 : (int)n - 1;
	}
	/* every half window, ask for the next window of leaves: a forward walk always has some on the way */
	if (dir > 0 && p->nodes[1] && p->slots[1] % (UB_TREE_READAHEAD_LEAVES / 2) == 0)
		ub_tree_readahead(p->tc, p->nodes[1], p->slots[1] + 1, UB_TREE_READAHEAD_LEAVES);
	return 0;
}

int ub_tree_next(struct ub_path *p)
{
	if (!p->nodes[0])
		return 1;
	if ((uint32_t)(p->slots[0] + 1) < ub_eb_nritems(p->nodes[0])) {
		p->slots[0]++;
		return 0;
	}
	return step(p, +1);
}

int ub_tree_next_key(const struct ub_path *p, struct ub_key *key)
{
	if (!p->nodes[0])
		return 1;
	if ((uint32_t)(p->slots[0] + 1) < ub_eb_nritems(p->nodes[0])) {
		ub_eb_item_key(p->nodes[0], p->slots[0] + 1, key);
		return 0;
	}
	for (int level = 1; level < UB_MAX_LEVEL && p->nodes[level]; level++) {
		if ((uint32_t)(p->slots[level] + 1) < ub_eb_nritems(p->nodes[level])) {
			ub_eb_item_key(p->nodes[level], p->slots[level] + 1, key);
			return 0;
		}
	}
	return 1;
}

int ub_tree_prev(struct ub_path *p)
{
	if (!p->nodes[0])
		return 1;
	if (p->slots[0] > 0) {
		p->slots[0]--;
		return 0;
	}
	return step(p, -1);
}

void ub_path_key(const struct ub_path *p, struct ub_key *key)
{
	ub_eb_item_key(p->nodes[0], p->slots[0], key);
}

const uint8_t *ub_path_data(const struct ub_path *p, uint32_t *size)
{
	return ub_eb_item_data(p->nodes[0], p->slots[0], size);
}

int ub_tree_lookup(struct ub_tree_ctx *tc, const struct ub_root *root, const struct ub_key *key, struct ub_path *p,
		   const uint8_t **data, uint32_t *size)
{
	int ret = ub_tree_search(tc, root, key, p);

	if (ret < 0)
		return ret;
	if (ret > 0)
		return -ENOENT;
	*data = ub_path_data(p, size);
	return 0;
}

int ub_tree_search_le(struct ub_tree_ctx *tc, const struct ub_root *root, const struct ub_key *key, struct ub_path *p)
{
	int ret = ub_tree_search(tc, root, key, p);

	if (ret <= 0)
		return ret;
	if (ret == 2)
		return ub_eb_nritems(p->nodes[0]) ? 0 : 1;
	return ub_tree_prev(p);
}

/* Tags are tree ids, except that every log tree is tagged with the subvolume it logs. */
static const char *tag_name(uint64_t owner, uint64_t tag, char *buf, size_t len)
{
	if (owner == BTRFS_TREE_LOG_OBJECTID && tag == BTRFS_TREE_LOG_OBJECTID)
		snprintf(buf, len, "the log root tree");
	else if (owner == BTRFS_TREE_LOG_OBJECTID)
		snprintf(buf, len, "the log tree of subvolume %llu", (unsigned long long)tag);
	else
		ub_tree_name(tag, buf, len);
	return buf;
}

struct walk {
	struct ub_tree_ctx *tc;
	struct ub_block_set *seen;
	uint64_t tag;
	int (*fn)(void *arg, const struct ub_eb *eb);
	void *arg;
};

static int walk_block(struct walk *w, uint64_t bytenr, const struct ub_expect *exp)
{
	struct ub_eb *eb;
	uint64_t first_tag = 0;
	/* the pointer's own expectations first: they say best what is wrong */
	int ret = ub_tree_read_block(w->tc, bytenr, exp, &eb);

	if (ret)
		return ret;
	ret = ub_block_set_add(w->seen, bytenr, w->tag, &first_tag);
	if (ret == 1) {
		char t[64], a[64], b[64];
		if (!ub_tree_is_quiet()) {
			if (exp->parent)
				snprintf(t, sizeof(t), "slot %d of node %llu", exp->slot, (unsigned long long)exp->parent);
			else
				snprintf(t, sizeof(t), "the root pointer");
			ub_err(&w->tc->log, "%s: tree block at logical %llu (level %d, %s) was already entered in %s: "
			       "a block is part of one tree once", tag_name(exp->owner, w->tag, a, sizeof(a)),
			       (unsigned long long)bytenr, exp->level, t, tag_name(exp->owner, first_tag, b, sizeof(b)));
		}
		ub_eb_put(w->tc, eb);
		return -EUCLEAN;
	}
	if (ret < 0) {
		ub_eb_put(w->tc, eb);
		return ret;
	}
	if (w->fn)
		ret = w->fn(w->arg, eb);
	if (!ret && ub_eb_level(eb) > 0) {
		uint32_t n = ub_eb_nritems(eb);
		for (uint32_t i = 0; i < n && !ret; i++) {
			struct ub_key first, end;
			struct ub_expect cexp = {
				.owner = exp->owner,
				.level = ub_eb_level(eb) - 1,
				.generation = ub_eb_node_gen(eb, (int)i),
				.first_key = &first,
				.end_key = exp->end_key,
				.parent = bytenr,
				.slot = (int)i,
			};
			ub_eb_item_key(eb, (int)i, &first);
			if (i + 1 < n) {
				ub_eb_item_key(eb, (int)i + 1, &end);
				cexp.end_key = &end;
			}
			ret = walk_block(w, ub_eb_node_blockptr(eb, (int)i), &cexp);
		}
	}
	ub_eb_put(w->tc, eb);
	return ret;
}

int ub_tree_walk(struct ub_tree_ctx *tc, const struct ub_root *root, struct ub_block_set *seen, uint64_t tag,
		 int (*fn)(void *arg, const struct ub_eb *eb), void *arg)
{
	struct walk w = { tc, seen, tag, fn, arg };
	struct ub_expect exp = ub_root_expect(root);

	if (root->level >= UB_MAX_LEVEL)
		return -EUCLEAN;
	return walk_block(&w, root->bytenr, &exp);
}
