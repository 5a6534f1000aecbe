/* SPDX-License-Identifier: MIT */
/*
 * Names across inodes: each link of an inode into a directory is three
 * records (the inode's INODE_REF or EXTREF entry, the directory's DIR_ITEM
 * and DIR_INDEX entries). Sorted by directory, name hash, length, a second
 * hash and child, the three of one link sit together; each group must hold one of each,
 * agreeing on the index and the type.
 *
 * The stream meets a link's records in two inodes only, the directory's and
 * the child's, so the link is complete once the later of the two has been
 * streamed: its records wait until then in a heap ordered by that inode,
 * and a complete link whose records agree is forgotten. Memory: 40 bytes
 * per record of the links still open (in a tree the kernel wrote, a
 * directory's entries until its files' inodes come, which follow it), and
 * of the links found wrong (docs/check.md).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check/fs_tree.h"

static int name_cmp(const void *a, const void *b)
{
	const struct chk_name *x = a, *y = b;

	if (x->dir != y->dir)
		return x->dir < y->dir ? -1 : 1;
	if (x->hash != y->hash)
		return x->hash < y->hash ? -1 : 1;
	if (x->len != y->len)
		return x->len < y->len ? -1 : 1;
	if (x->hash2 != y->hash2)
		return x->hash2 < y->hash2 ? -1 : 1;
	if (x->child != y->child)
		return x->child < y->child ? -1 : 1;
	if (x->kind != y->kind)
		return x->kind < y->kind ? -1 : 1;
	if (x->index != y->index)
		return x->index < y->index ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static bool same_link(const struct chk_name *x, const struct chk_name *y)
{
	return x->dir == y->dir && x->hash == y->hash && x->len == y->len && x->hash2 == y->hash2 &&
	       x->child == y->child;
}

/*
 * FNV-1a: two names the kernel's hash cannot tell apart (one DIR_ITEM holds
 * both, links of one inode pack them in one INODE_EXTREF) are two links.
 */
uint32_t chk_name_hash2(const uint8_t *name, uint32_t len)
{
	uint32_t h = 2166136261u;

	for (uint32_t i = 0; i < len; i++)
		h = (h ^ name[i]) * 16777619u;
	return h;
}

static const char *const kind_names[] = { "INODE_REF", "DIR_ITEM", "DIR_INDEX" };

/* Where a record lives: its own item's key. */
static void where_name(struct ub_chk_problem *p, const struct fstate *f, const struct chk_name *n)
{
	switch (n->kind) {
	case NAME_REF: chk_fs_where(p, f, n->child, BTRFS_INODE_REF_KEY, n->dir); break;
	case NAME_ITEM: chk_fs_where(p, f, n->dir, BTRFS_DIR_ITEM_KEY, n->hash); break;
	default: chk_fs_where(p, f, n->dir, BTRFS_DIR_INDEX_KEY, n->index); break;
	}
	p->inode = n->child;
}

/* One link's records g[0..n), sorted by kind. */
static void check_link(struct fstate *f, const struct chk_name *g, size_t n)
{
	const struct chk_name *have[3] = { NULL, NULL, NULL };
	struct ub_chk_problem p;

	for (size_t i = 0; i < n; i++) {
		if (have[g[i].kind]) {
			where_name(&p, f, &g[i]);
			/*
			 * The repair keeps a second DIR_INDEX's twin at the ref's
			 * index, and makes a name twice in a ref or DIR_ITEM once
			 * (names.c)
			 */
			p.fix = UB_CHK_FIX_NAMES;
			p.want = g[i].dir;
			chk_report(f->s.c, &p, "a second %s entry for the name of inode %llu in directory %llu",
				   kind_names[g[i].kind], (unsigned long long)g[i].child, (unsigned long long)g[i].dir);
			continue;
		}
		have[g[i].kind] = &g[i];
	}
	if (!have[NAME_REF]) {
		const struct chk_name *e = have[NAME_INDEX] ? have[NAME_INDEX] : have[NAME_ITEM];

		where_name(&p, f, e);
		p.fix = UB_CHK_FIX_NAMES;
		p.want = e->dir;
		chk_report(f->s.c, &p, "directory %llu has an entry (%s%s) for inode %llu, which has no INODE_REF with that name there",
			   (unsigned long long)e->dir, have[NAME_ITEM] ? "DIR_ITEM" : "",
			   have[NAME_INDEX] ? (have[NAME_ITEM] ? " and DIR_INDEX" : "DIR_INDEX") : "",
			   (unsigned long long)e->child);
		return;
	}
	for (int k = NAME_ITEM; k <= NAME_INDEX; k++) {
		const struct chk_name *e = have[k];

		if (!e) {
			where_name(&p, f, have[NAME_REF]);
			p.fix = UB_CHK_FIX_NAMES;
			p.want = have[NAME_REF]->dir;
			chk_report(f->s.c, &p, "the name of inode %llu in directory %llu (index %llu) has no %s",
				   (unsigned long long)have[NAME_REF]->child, (unsigned long long)have[NAME_REF]->dir,
				   (unsigned long long)have[NAME_REF]->index, kind_names[k]);
			continue;
		}
		if (have[NAME_REF]->type && e->type != have[NAME_REF]->type) {
			where_name(&p, f, e);
			p.fix = UB_CHK_FIX_NAMES;
			p.want = e->dir;
			chk_report(f->s.c, &p, "%s type %u for inode %llu, whose mode says type %u", kind_names[k],
				   e->type, (unsigned long long)e->child, have[NAME_REF]->type);
		}
	}
	if (have[NAME_INDEX] && have[NAME_INDEX]->index != have[NAME_REF]->index) {
		where_name(&p, f, have[NAME_REF]);
		p.fix = UB_CHK_FIX_NAMES;
		p.want = have[NAME_REF]->dir;
		chk_report(f->s.c, &p, "INODE_REF says index %llu, the DIR_INDEX of the name is %llu",
			   (unsigned long long)have[NAME_REF]->index, (unsigned long long)have[NAME_INDEX]->index);
	}
}

/* The inode whose items complete the link of `n`: the later of the directory and the child. */
static uint64_t completes(const struct chk_name *n)
{
	return n->dir > n->child ? n->dir : n->child;
}

static int push(struct chk_name **v, size_t *n, size_t *cap, const struct chk_name *x)
{
	if (chk_reserve(v, cap, *n, sizeof(**v), 256))
		return -ENOMEM;
	(*v)[(*n)++] = *x;
	return 0;
}

/* The pending heap: a min-heap on completes(). */
static int heap_push(struct fstate *f, const struct chk_name *x)
{
	size_t i;

	if (push(&f->pending, &f->npending, &f->pending_cap, x))
		return -ENOMEM;
	for (i = f->npending - 1; i > 0;) {
		size_t up = (i - 1) / 2;
		struct chk_name t;

		if (completes(&f->pending[up]) <= completes(&f->pending[i]))
			break;
		t = f->pending[up];
		f->pending[up] = f->pending[i];
		f->pending[i] = t;
		i = up;
	}
	return 0;
}

static void heap_pop(struct fstate *f, struct chk_name *out)
{
	size_t i = 0, n = --f->npending;

	*out = f->pending[0];
	f->pending[0] = f->pending[n];
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;
		struct chk_name t;

		if (l < n && completes(&f->pending[l]) < completes(&f->pending[m]))
			m = l;
		if (r < n && completes(&f->pending[r]) < completes(&f->pending[m]))
			m = r;
		if (m == i)
			break;
		t = f->pending[m];
		f->pending[m] = f->pending[i];
		f->pending[i] = t;
		i = m;
	}
}

/* Whether check_link would say nothing of the link g[0..n) (sorted by kind). */
static bool link_agrees(const struct chk_name *g, size_t n)
{
	const struct chk_name *ref = &g[0], *item = &g[1], *idx = &g[2];

	if (n != 3 || ref->kind != NAME_REF || item->kind != NAME_ITEM || idx->kind != NAME_INDEX)
		return false;
	if (ref->type && (item->type != ref->type || idx->type != ref->type))
		return false;
	return idx->index == ref->index;
}

void chk_names_flush(struct fstate *f, uint64_t ino)
{
	size_t i = 0;

	f->ncand = 0;
	for (size_t j = 0; j < f->nnames && !f->nomem; j++) {
		const struct chk_name *n = &f->names[j];

		if (completes(n) > ino ? heap_push(f, n) : push(&f->cand, &f->ncand, &f->cand_cap, n))
			f->nomem = true;
	}
	f->nnames = 0;
	while (f->npending && completes(&f->pending[0]) <= ino && !f->nomem) {
		struct chk_name n;

		heap_pop(f, &n);
		if (push(&f->cand, &f->ncand, &f->cand_cap, &n))
			f->nomem = true;
	}
	if (f->nomem || !f->ncand)
		return;
	if (f->ncand > 1)
		qsort(f->cand, f->ncand, sizeof(*f->cand), name_cmp);
	while (i < f->ncand) {
		size_t j = i + 1;

		while (j < f->ncand && same_link(&f->cand[i], &f->cand[j]))
			j++;
		if (!link_agrees(&f->cand[i], j - i))
			for (size_t k = i; k < j; k++)
				if (push(&f->kept, &f->nkept, &f->kept_cap, &f->cand[k]))
					f->nomem = true;
		i = j;
	}
}

void chk_names_check(struct fstate *f)
{
	size_t i = 0;

	/* links whose other inode never came: their records are all there is */
	for (size_t j = 0; j < f->npending && !f->nomem; j++)
		if (push(&f->kept, &f->nkept, &f->kept_cap, &f->pending[j]))
			f->nomem = true;
	f->npending = 0;
	if (f->nkept)
		qsort(f->kept, f->nkept, sizeof(*f->kept), name_cmp);
	while (i < f->nkept) {
		size_t j = i + 1;

		while (j < f->nkept && same_link(&f->kept[i], &f->kept[j]))
			j++;
		check_link(f, &f->kept[i], j - i);
		i = j;
	}
	f->nkept = 0;
}

void chk_names_free(struct fstate *f)
{
	free(f->names);
	free(f->pending);
	free(f->kept);
	free(f->cand);
}

static int u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

void chk_orphans_check(struct fstate *f)
{
	size_t o = 0;

	if (f->norphans)
		qsort(f->orphans, f->norphans, sizeof(*f->orphans), u64_cmp);
	for (size_t i = 0; i < f->nunlinked; i++) {
		struct ub_chk_problem p;
		uint64_t ino = f->unlinked[i];

		while (o < f->norphans && f->orphans[o] < ino)
			o++;
		if (o < f->norphans && f->orphans[o] == ino)
			continue;
		chk_fs_where(&p, f, ino, BTRFS_INODE_ITEM_KEY, 0);
		/* its data is kept: a name in lost+found rather than an orphan item that would delete it */
		p.fix = UB_CHK_FIX_LOST;
		chk_report(f->s.c, &p, "nlink 0 and no orphan item: an unlinked inode nothing will delete");
	}
}
