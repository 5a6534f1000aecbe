/* SPDX-License-Identifier: MIT */
/*
 * Delayed reference queue (rules in delayed_ref.h).
 *
 * Heads live in a treap keyed by bytenr (priorities from a hash of the key,
 * as in free_space.c), so lookups, inserts and "pop the lowest" are
 * O(log n) however the transaction interleaves them. A head's references are
 * a sorted array: most heads have one or two, and a binary search keeps heads
 * shared by many snapshots cheap too.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <linux/btrfs_tree.h>
#include "alloc/delayed_ref.h"

struct dnode {
	struct ub_dref_head *h;
	uint32_t prio;
	struct dnode *l, *r;
};

struct ub_dref_queue {
	struct dnode *root;
	uint64_t count;
};

static uint32_t prio_of(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return (uint32_t)(x ^ (x >> 31));
}

static void split(struct dnode *t, uint64_t key, struct dnode **a, struct dnode **b)
{
	if (!t) {
		*a = *b = NULL;
	} else if (t->h->bytenr < key) {
		split(t->r, key, &t->r, b);
		*a = t;
	} else {
		split(t->l, key, a, &t->l);
		*b = t;
	}
}

static struct dnode *insert(struct dnode *t, struct dnode *n)
{
	if (!t)
		return n;
	if (n->prio > t->prio) {
		split(t, n->h->bytenr, &n->l, &n->r);
		return n;
	}
	if (n->h->bytenr < t->h->bytenr)
		t->l = insert(t->l, n);
	else
		t->r = insert(t->r, n);
	return t;
}

static struct dnode *find(struct dnode *t, uint64_t bytenr)
{
	while (t && t->h->bytenr != bytenr)
		t = bytenr < t->h->bytenr ? t->l : t->r;
	return t;
}

int ub_dref_queue_new(struct ub_dref_queue **out)
{
	*out = calloc(1, sizeof(**out));
	return *out ? 0 : -ENOMEM;
}

void ub_dref_head_free(struct ub_dref_head *h)
{
	if (!h)
		return;
	free(h->refs);
	free(h);
}

static void free_nodes(struct dnode *t)
{
	while (t) {
		if (t->l) {
			struct dnode *l = t->l;
			t->l = l->r;
			l->r = t;
			t = l;
		} else {
			struct dnode *r = t->r;
			ub_dref_head_free(t->h);
			free(t);
			t = r;
		}
	}
}

void ub_dref_queue_free(struct ub_dref_queue *q)
{
	if (!q)
		return;
	free_nodes(q->root);
	free(q);
}

uint64_t ub_dref_count(const struct ub_dref_queue *q)
{
	return q->count;
}

const struct ub_dref_head *ub_dref_find(const struct ub_dref_queue *q, uint64_t bytenr)
{
	struct dnode *n = find(q->root, bytenr);
	return n ? n->h : NULL;
}

/* The head for bytenr, created if missing; -EINVAL when the existing one disagrees. */
static int get_head(struct ub_dref_queue *q, uint64_t bytenr, uint64_t num_bytes, bool is_data, int level,
		    struct ub_dref_head **out)
{
	if (num_bytes == 0 || bytenr + num_bytes < bytenr || (!is_data && (level < 0 || level >= 8)))
		return -EINVAL;
	struct dnode *n = find(q->root, bytenr);
	if (n) {
		struct ub_dref_head *h = n->h;
		if (h->num_bytes != num_bytes || h->is_data != is_data || (!is_data && h->level != level))
			return -EINVAL;
		*out = h;
		return 0;
	}
	n = calloc(1, sizeof(*n));
	struct ub_dref_head *h = calloc(1, sizeof(*h));
	if (!n || !h) {
		free(n);
		free(h);
		return -ENOMEM;
	}
	h->bytenr = bytenr;
	h->num_bytes = num_bytes;
	h->is_data = is_data;
	h->level = is_data ? 0 : level;
	n->h = h;
	n->prio = prio_of(bytenr);
	q->root = insert(q->root, n);
	q->count++;
	*out = h;
	return 0;
}

static int ref_cmp(const struct ub_dref *a, const struct ub_dref *b)
{
#define CMP(f) if (a->f != b->f) return a->f < b->f ? -1 : 1
	CMP(type);
	CMP(root);
	CMP(parent);
	CMP(objectid);
	CMP(offset);
#undef CMP
	return 0;
}

/* Fold `r` into h: add to a matching reference, drop it when the sum is 0. */
static int fold(struct ub_dref_head *h, const struct ub_dref *r)
{
	int lo = 0, hi = h->nrefs;
	while (lo < hi) {
		int mid = lo + (hi - lo) / 2;
		int c = ref_cmp(&h->refs[mid], r);
		if (c == 0) {
			struct ub_dref *e = &h->refs[mid];
			/* counts are 32-bit on disk: a sum outside that is a caller bug */
			if ((r->delta > 0 && e->delta > INT64_MAX / 2) || (r->delta < 0 && e->delta < INT64_MIN / 2))
				return -EOVERFLOW;
			e->delta += r->delta;
			h->total_delta += r->delta;
			if (e->delta == 0) {
				memmove(e, e + 1, (size_t)(h->nrefs - mid - 1) * sizeof(*e));
				h->nrefs--;
			}
			return 0;
		}
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (h->nrefs == h->cap) {
		int ncap = h->cap ? h->cap * 2 : 2;
		struct ub_dref *n = realloc(h->refs, (size_t)ncap * sizeof(*n));
		if (!n)
			return -ENOMEM;
		h->refs = n;
		h->cap = ncap;
	}
	memmove(&h->refs[lo + 1], &h->refs[lo], (size_t)(h->nrefs - lo) * sizeof(*r));
	h->refs[lo] = *r;
	h->nrefs++;
	h->total_delta += r->delta;
	return 0;
}

static void apply_flags(struct ub_dref_head *h, int64_t delta, unsigned flags)
{
	if ((flags & UB_DREF_NEW_EXTENT) && delta > 0)
		h->new_extent = true;
	if ((flags & UB_DREF_LAST_REF) && delta < 0)
		h->free_hint = true;
}

int ub_dref_add_tree(struct ub_dref_queue *q, uint64_t bytenr, uint64_t num_bytes, int level, uint64_t root,
		     uint64_t parent, int delta, unsigned flags)
{
	struct ub_dref_head *h;
	if (delta == 0 || (root == 0) == (parent == 0))
		return -EINVAL;
	int ret = get_head(q, bytenr, num_bytes, false, level, &h);
	if (ret)
		return ret;
	struct ub_dref r = {
		.type = root ? BTRFS_TREE_BLOCK_REF_KEY : BTRFS_SHARED_BLOCK_REF_KEY,
		.root = root,
		.parent = root ? 0 : parent,
		.delta = delta,
	};
	ret = fold(h, &r);
	if (ret)
		return ret;
	apply_flags(h, delta, flags);
	return 0;
}

int ub_dref_add_data(struct ub_dref_queue *q, uint64_t bytenr, uint64_t num_bytes, uint64_t root,
		     uint64_t objectid, uint64_t offset, uint64_t parent, int64_t delta, unsigned flags)
{
	struct ub_dref_head *h;
	if (delta == 0 || (parent == 0 && root == 0))
		return -EINVAL;
	int ret = get_head(q, bytenr, num_bytes, true, 0, &h);
	if (ret)
		return ret;
	struct ub_dref r = { .delta = delta };
	if (parent) {
		r.type = BTRFS_SHARED_DATA_REF_KEY;
		r.parent = parent;
	} else {
		r.type = BTRFS_EXTENT_DATA_REF_KEY;
		r.root = root;
		r.objectid = objectid;
		r.offset = offset;
	}
	ret = fold(h, &r);
	if (ret)
		return ret;
	apply_flags(h, delta, flags);
	return 0;
}

int ub_dref_set_flags(struct ub_dref_queue *q, uint64_t bytenr, uint64_t num_bytes, int level, uint64_t flags)
{
	struct ub_dref_head *h;
	if (flags & ~(uint64_t)BTRFS_BLOCK_FLAG_FULL_BACKREF)
		return -EINVAL;
	int ret = get_head(q, bytenr, num_bytes, false, level, &h);
	if (ret)
		return ret;
	h->set_flags |= flags;
	return 0;
}

int ub_dref_set_generation(struct ub_dref_queue *q, uint64_t bytenr, uint64_t num_bytes, int level,
			   uint64_t generation)
{
	struct ub_dref_head *h;
	int ret = get_head(q, bytenr, num_bytes, false, level, &h);

	if (ret)
		return ret;
	h->generation = generation;
	return 0;
}

int ub_dref_pop_head(struct ub_dref_queue *q, struct ub_dref_head **out)
{
	if (!q->root)
		return 1;
	/* leftmost node: its right subtree takes its place */
	struct dnode **pp = &q->root;
	while ((*pp)->l)
		pp = &(*pp)->l;
	struct dnode *n = *pp;
	*pp = n->r;
	*out = n->h;
	free(n);
	q->count--;
	return 0;
}
