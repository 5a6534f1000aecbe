/* SPDX-License-Identifier: MIT */
/*
 * Range sets as a treap keyed by extent start (see free_space.h).
 *
 * Priorities come from a hash of the start address: the tree's shape is a
 * function of its contents, which keeps tests reproducible, and addresses in
 * the same set are distinct so ties are practically absent (a tie only costs
 * balance, never correctness). Every node caches the longest extent of its
 * subtree (`maxlen`) for the first-fit search.
 */
#include <errno.h>
#include <stdlib.h>
#include "alloc/free_space.h"

struct ub_rs_node {
	uint64_t start, len, maxlen;
	uint32_t prio;
	struct ub_rs_node *l, *r;
};

static uint32_t prio_of(uint64_t x)
{
	/* splitmix64 finaliser: good avalanche, so aligned addresses spread */
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return (uint32_t)x;
}

static inline uint64_t max3(uint64_t a, uint64_t b, uint64_t c)
{
	uint64_t m = a > b ? a : b;
	return m > c ? m : c;
}

static inline void pull(struct ub_rs_node *n)
{
	n->maxlen = max3(n->len, n->l ? n->l->maxlen : 0, n->r ? n->r->maxlen : 0);
}

/* Split t into keys < start (*a) and >= start (*b). */
static void split(struct ub_rs_node *t, uint64_t start, struct ub_rs_node **a, struct ub_rs_node **b)
{
	if (!t) {
		*a = *b = NULL;
		return;
	}
	if (t->start < start) {
		split(t->r, start, &t->r, b);
		pull(t);
		*a = t;
	} else {
		split(t->l, start, a, &t->l);
		pull(t);
		*b = t;
	}
}

/* Every key of a is below every key of b. */
static struct ub_rs_node *merge(struct ub_rs_node *a, struct ub_rs_node *b)
{
	if (!a)
		return b;
	if (!b)
		return a;
	if (a->prio >= b->prio) {
		a->r = merge(a->r, b);
		pull(a);
		return a;
	}
	b->l = merge(a, b->l);
	pull(b);
	return b;
}

static struct ub_rs_node *insert_node(struct ub_rs_node *t, struct ub_rs_node *n)
{
	if (!t)
		return n;
	if (n->prio > t->prio) {
		split(t, n->start, &n->l, &n->r);
		pull(n);
		return n;
	}
	if (n->start < t->start)
		t->l = insert_node(t->l, n);
	else
		t->r = insert_node(t->r, n);
	pull(t);
	return t;
}

/* Remove the node with key `start` (must exist); it is returned through *gone. */
static struct ub_rs_node *erase_node(struct ub_rs_node *t, uint64_t start, struct ub_rs_node **gone)
{
	if (!t)
		return NULL;
	if (t->start == start) {
		struct ub_rs_node *m = merge(t->l, t->r);
		*gone = t;
		return m;
	}
	if (start < t->start)
		t->l = erase_node(t->l, start, gone);
	else
		t->r = erase_node(t->r, start, gone);
	pull(t);
	return t;
}

/* Change the length of the node with key `start`, fixing maxima on the path. */
static void set_len(struct ub_rs_node *t, uint64_t start, uint64_t len)
{
	if (!t)
		return;
	if (t->start == start)
		t->len = len;
	else if (start < t->start)
		set_len(t->l, start, len);
	else
		set_len(t->r, start, len);
	pull(t);
}

/* Last node with start <= pos. */
static struct ub_rs_node *floor_node(struct ub_rs_node *t, uint64_t pos)
{
	struct ub_rs_node *best = NULL;
	while (t) {
		if (t->start <= pos) {
			best = t;
			t = t->r;
		} else {
			t = t->l;
		}
	}
	return best;
}

/* First node with start > pos. */
static struct ub_rs_node *above_node(struct ub_rs_node *t, uint64_t pos)
{
	struct ub_rs_node *best = NULL;
	while (t) {
		if (t->start > pos) {
			best = t;
			t = t->l;
		} else {
			t = t->r;
		}
	}
	return best;
}

static void free_tree(struct ub_rs_node *t)
{
	while (t) {
		/* rotate-free: avoid recursion depth on the left spine */
		if (t->l) {
			struct ub_rs_node *l = t->l;
			t->l = l->r;
			l->r = t;
			t = l;
		} else {
			struct ub_rs_node *r = t->r;
			free(t);
			t = r;
		}
	}
}

void ub_rs_clear(struct ub_range_set *s)
{
	free_tree(s->root);
	ub_rs_init(s);
}

static struct ub_rs_node *new_node(uint64_t start, uint64_t len)
{
	struct ub_rs_node *n = calloc(1, sizeof(*n));
	if (!n)
		return NULL;
	n->start = start;
	n->len = len;
	n->maxlen = len;
	n->prio = prio_of(start);
	return n;
}

int ub_rs_add(struct ub_range_set *s, uint64_t start, uint64_t len)
{
	if (len == 0 || start + len < start)
		return -EINVAL;
	uint64_t end = start + len;
	struct ub_rs_node *p = floor_node(s->root, start);
	struct ub_rs_node *n = above_node(s->root, start);
	if (p && p->start + p->len > start)
		return -EEXIST;
	if (n && n->start < end)
		return -EEXIST;
	bool join_l = p && p->start + p->len == start;
	bool join_r = n && n->start == end;
	if (join_l && join_r) {
		struct ub_rs_node *gone = NULL;
		uint64_t nlen = n->len;
		s->root = erase_node(s->root, n->start, &gone);
		free(gone);
		set_len(s->root, p->start, p->len + len + nlen);
		s->count--;
	} else if (join_l) {
		set_len(s->root, p->start, p->len + len);
	} else if (join_r) {
		/* the key changes: take the node out and put it back */
		struct ub_rs_node *gone = NULL;
		s->root = erase_node(s->root, n->start, &gone);
		gone->start = start;
		gone->len += len;
		gone->l = gone->r = NULL;
		gone->maxlen = gone->len;
		gone->prio = prio_of(start);
		s->root = insert_node(s->root, gone);
	} else {
		struct ub_rs_node *m = new_node(start, len);
		if (!m)
			return -ENOMEM;
		s->root = insert_node(s->root, m);
		s->count++;
	}
	s->bytes += len;
	return 0;
}

int ub_rs_add_union(struct ub_range_set *s, uint64_t start, uint64_t len)
{
	if (len == 0)
		return 0;
	if (start + len < start)
		return -EINVAL;
	uint64_t end = start + len, pos = start;
	/* fill each gap between existing extents */
	while (pos < end) {
		struct ub_range r;
		uint64_t gap_end = end;
		if (ub_rs_next(s, pos, &r) == 0 && r.start < end) {
			if (r.start <= pos) {
				pos = r.start + r.len;
				continue;
			}
			gap_end = r.start;
		}
		int ret = ub_rs_add(s, pos, gap_end - pos);
		if (ret)
			return ret;
		pos = gap_end;
	}
	return 0;
}

int ub_rs_remove(struct ub_range_set *s, uint64_t start, uint64_t len)
{
	if (len == 0 || start + len < start)
		return -EINVAL;
	uint64_t end = start + len;
	struct ub_rs_node *p = floor_node(s->root, start);
	if (!p || p->start + p->len < end)
		return -ENOENT;
	uint64_t pstart = p->start, pend = p->start + p->len;
	if (pstart == start && pend == end) {
		struct ub_rs_node *gone = NULL;
		s->root = erase_node(s->root, pstart, &gone);
		free(gone);
		s->count--;
	} else if (pstart == start) {
		struct ub_rs_node *gone = NULL;
		s->root = erase_node(s->root, pstart, &gone);
		gone->start = end;
		gone->len = pend - end;
		gone->l = gone->r = NULL;
		gone->maxlen = gone->len;
		gone->prio = prio_of(end);
		s->root = insert_node(s->root, gone);
	} else if (pend == end) {
		set_len(s->root, pstart, start - pstart);
	} else {
		struct ub_rs_node *m = new_node(end, pend - end);
		if (!m)
			return -ENOMEM;
		set_len(s->root, pstart, start - pstart);
		s->root = insert_node(s->root, m);
		s->count++;
	}
	s->bytes -= len;
	return 0;
}

int ub_rs_remove_any(struct ub_range_set *s, uint64_t start, uint64_t len, uint64_t *removed)
{
	uint64_t done = 0;
	int ret = 0;
	if (len == 0 || start + len < start) {
		ret = len == 0 ? 0 : -EINVAL;
		goto out;
	}
	uint64_t end = start + len, pos = start;
	while (pos < end) {
		struct ub_range r;
		if (ub_rs_next(s, pos, &r) || r.start >= end)
			break;
		uint64_t a = r.start > pos ? r.start : pos;
		uint64_t b = r.start + r.len < end ? r.start + r.len : end;
		ret = ub_rs_remove(s, a, b - a);
		if (ret)
			goto out;
		done += b - a;
		pos = b;
	}
out:
	if (removed)
		*removed = done;
	return ret;
}

bool ub_rs_contains(const struct ub_range_set *s, uint64_t start, uint64_t len)
{
	if (len == 0)
		return true;
	const struct ub_rs_node *p = floor_node(s->root, start);
	return p && p->start + p->len >= start + len && start + len > start;
}

int ub_rs_next(const struct ub_range_set *s, uint64_t pos, struct ub_range *out)
{
	const struct ub_rs_node *p = floor_node(s->root, pos);
	if (!p || p->start + p->len <= pos)
		p = above_node(s->root, pos);
	if (!p)
		return 1;
	out->start = p->start;
	out->len = p->len;
	return 0;
}

bool ub_rs_overlaps(const struct ub_range_set *s, uint64_t start, uint64_t len)
{
	struct ub_range r;
	if (len == 0)
		return false;
	return ub_rs_next(s, start, &r) == 0 && r.start < start + len;
}

uint64_t ub_rs_bytes_in(const struct ub_range_set *s, uint64_t start, uint64_t len)
{
	uint64_t end = start + len, pos = start, sum = 0;
	struct ub_range r;
	while (pos < end && ub_rs_next(s, pos, &r) == 0 && r.start < end) {
		uint64_t a = r.start > pos ? r.start : pos;
		uint64_t b = r.start + r.len < end ? r.start + r.len : end;
		sum += b - a;
		pos = b;
	}
	return sum;
}

struct find_ctx {
	uint64_t from, len;
	ub_rs_fit_fn fit;
	void *arg;
	uint64_t found;
};

/* In-order walk of the extents ending after from, pruned by maxlen; 1 when found. */
static int find_in(const struct ub_rs_node *t, struct find_ctx *c)
{
	while (t) {
		if (t->maxlen < c->len)
			return 0;
		/* left keys end at or before t->start: useless when t->start <= from */
		if (t->start > c->from && find_in(t->l, c))
			return 1;
		if (t->len >= c->len && t->start + t->len > c->from) {
			struct ub_range e = { t->start, t->len };
			uint64_t lo = t->start > c->from ? t->start : c->from;
			uint64_t s = c->fit(c->arg, &e, lo, c->len);
			if (s != UINT64_MAX) {
				c->found = s;
				return 1;
			}
		}
		t = t->r;
	}
	return 0;
}

int ub_rs_find(const struct ub_range_set *s, uint64_t from, uint64_t len, ub_rs_fit_fn fit, void *arg,
	       uint64_t *start)
{
	struct find_ctx c = { from, len, fit, arg, 0 };
	if (len == 0)
		return 1;
	if (!find_in(s->root, &c))
		return 1;
	*start = c.found;
	return 0;
}

uint64_t ub_rs_fit_aligned(void *align_ptr, const struct ub_range *ext, uint64_t lo, uint64_t len)
{
	uint64_t align = *(const uint64_t *)align_ptr;
	uint64_t s = (lo + align - 1) & ~(align - 1);
	if (s < lo || s + len < s || s + len > ext->start + ext->len)
		return UINT64_MAX;
	return s;
}

struct verify_ctx {
	uint64_t count, bytes;
	bool have_prev;
	uint64_t prev_end;
	int bad;
};

static uint64_t verify_node(const struct ub_rs_node *t, struct verify_ctx *v, int depth)
{
	if (!t)
		return 0;
	if (depth > 4096) {
		v->bad = 1;
		return 0;
	}
	if ((t->l && t->l->prio > t->prio) || (t->r && t->r->prio > t->prio))
		v->bad = 1;
	uint64_t ml = verify_node(t->l, v, depth + 1);
	if (t->len == 0 || t->start + t->len < t->start)
		v->bad = 1;
	/* maximal extents: a neighbour that touches should have merged */
	if (v->have_prev && t->start <= v->prev_end)
		v->bad = 1;
	v->have_prev = true;
	v->prev_end = t->start + t->len;
	v->count++;
	v->bytes += t->len;
	uint64_t mr = verify_node(t->r, v, depth + 1);
	uint64_t m = max3(t->len, ml, mr);
	if (m != t->maxlen)
		v->bad = 1;
	return m;
}

int ub_rs_verify(const struct ub_range_set *s)
{
	struct verify_ctx v = { 0 };
	verify_node(s->root, &v, 0);
	if (v.bad || v.count != s->count || v.bytes != s->bytes)
		return -EUCLEAN;
	return 0;
}
