/* SPDX-License-Identifier: MIT */
/*
 * A scavenging session: made before the caller's walk (which may hold files
 * read from an older root), run after it, freed last. The lists here are
 * kept sorted by (subvolume, inode) once the scan has run, so each leaf finds
 * the inodes it concerns by bisection.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "ubtrfs/format.h"
#include "recover_priv.h"

int ub_recover_new(struct ub_fs *fs, const struct ub_recover_opts *opts, struct ub_recover **out)
{
	struct ub_recover *rc = calloc(1, sizeof(*rc));

	*out = NULL;
	if (!rc)
		return -ENOMEM;
	rc->fs = fs;
	rc->o = *opts;
	*out = rc;
	return 0;
}

void ub_recover_free(struct ub_recover *rc)
{
	if (!rc)
		return;
	free(rc->cands.v);
	free(rc->lost.v);
	free(rc->gone.v);
	free(rc->gone_bad);
	free(rc->placed);
	free(rc->held);
	free(rc->buf);
	free(rc);
}

int rc_cand_add(struct rc_candv *cv, uint64_t subvol, uint64_t ino)
{
	if (cv->n == cv->cap) {
		size_t cap = cv->cap ? cv->cap * 2 : 256;
		struct rc_cand *v = realloc(cv->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		cv->v = v;
		cv->cap = cap;
	}
	cv->v[cv->n++] = (struct rc_cand){ subvol, ino };
	return 0;
}

int rc_cand_cmp(const void *a, const void *b)
{
	const struct rc_cand *x = a, *y = b;

	if (x->subvol != y->subvol)
		return x->subvol < y->subvol ? -1 : 1;
	return x->ino < y->ino ? -1 : x->ino > y->ino;
}

long rc_cand_index(const struct rc_candv *cv, uint64_t subvol, uint64_t ino)
{
	struct rc_cand key = { subvol, ino };
	size_t lo = 0, hi = cv->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (rc_cand_cmp(&cv->v[mid], &key) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < cv->n && !rc_cand_cmp(&cv->v[lo], &key) ? (long)lo : -1;
}

bool rc_want_fs_leaf(void *arg, uint64_t owner, uint64_t generation, int level)
{
	(void)arg;
	(void)generation;
	return level == 0 && (owner == BTRFS_FS_TREE_OBJECTID ||
			      (owner >= BTRFS_FIRST_FREE_OBJECTID && owner <= BTRFS_LAST_FREE_OBJECTID));
}

/* ---- held files ---- */

int ub_recover_hold(struct ub_recover *rc, const struct ub_inode *in, uint64_t root_generation, uint64_t tag)
{
	/* read from the last commit's root: nothing newer can be committed */
	if (root_generation >= rc->o.last_commit)
		return 0;
	if (rc->nheld == rc->held_cap) {
		size_t cap = rc->held_cap ? rc->held_cap * 2 : 64;
		struct rc_held *v = realloc(rc->held, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		rc->held = v;
		rc->held_cap = cap;
	}
	rc->held[rc->nheld] = (struct rc_held){ .subvol = in->subvol, .ino = in->ino, .gen = root_generation,
						.inode_gen = in->generation, .tag = tag, .order = rc->nheld };
	rc->nheld++;
	return 1;
}

static int held_cmp(const void *a, const void *b)
{
	const struct rc_held *x = a, *y = b;

	if (x->subvol != y->subvol)
		return x->subvol < y->subvol ? -1 : 1;
	if (x->ino != y->ino)
		return x->ino < y->ino ? -1 : 1;
	return x->order < y->order ? -1 : x->order > y->order;
}

void rc_held_sort(struct ub_recover *rc)
{
	if (rc->nheld > 1)
		qsort(rc->held, rc->nheld, sizeof(*rc->held), held_cmp);
}

size_t rc_held_lower(const struct ub_recover *rc, uint64_t subvol, uint64_t ino)
{
	size_t lo = 0, hi = rc->nheld;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct rc_held *h = &rc->held[mid];

		if (h->subvol < subvol || (h->subvol == subvol && h->ino < ino))
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

size_t ub_recover_held_count(const struct ub_recover *rc)
{
	return rc->nheld;
}

int ub_recover_held_get(const struct ub_recover *rc, size_t i, struct ub_recover_held *out)
{
	const struct rc_held *h;

	if (i >= rc->nheld)
		return -ENOENT;
	h = &rc->held[i];
	*out = (struct ub_recover_held){ h->subvol, h->ino, h->gen, h->tag, h->fresh };
	return 0;
}

size_t ub_recover_nfresh(const struct ub_recover *rc)
{
	return rc->nfresh;
}

bool ub_recover_pending(const struct ub_recover *rc)
{
	return rc->lost.n || rc->gone.n || rc->nfresh;
}

void rc_progress(void *arg, uint64_t done, uint64_t total)
{
	struct ub_recover *rc = arg;

	rc->o.progress(rc->o.arg, done, total);
}
