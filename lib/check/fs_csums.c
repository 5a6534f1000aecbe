/* SPDX-License-Identifier: MIT */
/*
 * Checksum coverage: the data every file extent of a checksummed inode
 * references must have checksums. The file tree pass hands over one range per
 * such extent (40 bytes each); at the end the checksum tree is read once into
 * the runs of address space it covers (adjacent items merged: one run per
 * stretch of checksummed data) and every range is looked up in them.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check/fs_tree.h"

void chk_csum_need(struct fstate *f, const struct ub_key *k, uint64_t start, uint64_t len)
{
	if (!len)
		return;
	if (chk_reserve(&f->needs, &f->needs_cap, f->nneeds, sizeof(*f->needs), 1024)) {
		f->nomem = true;
		return;
	}
	f->needs[f->nneeds++] = (struct chk_csum_need){ start, len, f->tree, k->objectid, k->offset };
}

struct run {
	uint64_t start, end;
};

struct runs {
	struct cstate s; /* first: chk_scan_tree hands it back */
	uint32_t csum_size;
	struct run *v;
	size_t n, cap;
};

static int csum_item(struct cstate *s, const struct ub_key *k, const uint8_t *d, uint32_t size)
{
	struct runs *r = (struct runs *)s;
	uint64_t end;

	(void)d;
	if (k->objectid != BTRFS_EXTENT_CSUM_OBJECTID || k->type != BTRFS_EXTENT_CSUM_KEY || !r->csum_size)
		return 0;
	end = k->offset + (uint64_t)(size / r->csum_size) * s->sectorsize;
	if (r->n && k->offset <= r->v[r->n - 1].end) {
		if (end > r->v[r->n - 1].end)
			r->v[r->n - 1].end = end;
		return 0;
	}
	if (chk_reserve(&r->v, &r->cap, r->n, sizeof(*r->v), 256))
		return -ENOMEM;
	r->v[r->n++] = (struct run){ k->offset, end };
	return 0;
}

static int need_cmp(const void *a, const void *b)
{
	const struct chk_csum_need *x = a, *y = b;

	if (x->start != y->start)
		return x->start < y->start ? -1 : 1;
	return x->len < y->len ? -1 : x->len > y->len;
}

/* The first byte of [start, end) no run covers, or `end`. */
static uint64_t first_uncovered(const struct runs *r, uint64_t start, uint64_t end)
{
	size_t lo = 0, hi = r->n;

	/* the last run starting at or before `start` */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (r->v[mid].start <= start)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (!lo || r->v[lo - 1].end <= start)
		return start;
	return r->v[lo - 1].end < end ? r->v[lo - 1].end : end;
}

int chk_csum_needs_check(struct fstate *f)
{
	struct runs r = { .s = { .c = f->s.c, .fs = f->s.fs, .sectorsize = f->s.sectorsize, .scan_cls = UB_CHK_CSUM },
			  .csum_size = f->csum_size };
	struct ub_key from = { BTRFS_EXTENT_CSUM_OBJECTID, BTRFS_EXTENT_CSUM_KEY, 0 };
	int ret;

	if (!f->nneeds)
		return 0;
	ret = chk_scan_tree(&r.s, BTRFS_CSUM_TREE_OBJECTID, &from, csum_item);
	/* a checksum tree read in part would make every later extent "missing" */
	if (ret) {
		free(r.v);
		return ret < 0 ? ret : 0;
	}
	qsort(f->needs, f->nneeds, sizeof(*f->needs), need_cmp);
	for (size_t i = 0; i < f->nneeds; i++) {
		const struct chk_csum_need *n = &f->needs[i];
		uint64_t end = n->start + n->len, gap;
		struct ub_chk_problem p;

		/* a range shared by snapshots and reflinks is looked at once */
		if (i && n->start == f->needs[i - 1].start && n->len == f->needs[i - 1].len)
			continue;
		gap = first_uncovered(&r, n->start, end);
		if (gap >= end)
			continue;
		memset(&p, 0, sizeof(p));
		p.cls = UB_CHK_CSUM;
		p.tree = n->tree;
		p.inode = n->ino;
		p.has_key = true;
		p.key = (struct ub_key){ n->ino, BTRFS_EXTENT_DATA_KEY, n->offset };
		p.logical = gap;
		chk_report(f->s.c, &p, "data [%llu, +%llu) the file extent references has no checksum from %llu on",
			   (unsigned long long)n->start, (unsigned long long)n->len, (unsigned long long)gap);
	}
	free(r.v);
	return 0;
}
