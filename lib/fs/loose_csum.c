/* SPDX-License-Identifier: MIT */
/*
 * Checksums for the data of deleted files (restore --deleted from the leaves
 * a scan found). A deleted file's checksum items went with it, so the live
 * checksum tree has none for its extents (or, where the space was written
 * again since, the new data's, which then fail, as they should). Old copies
 * of checksum-tree leaves may still hold them: for each extent the caller
 * registers, the window of generations in which the file held it (from the
 * extent's own generation to the newest leaf naming it), a scan feeds every
 * checksum-tree leaf, and each sector keeps the checksum of the newest leaf
 * inside that window. Reads then check such sectors against it; a sector of
 * a registered extent that no leaf gave a checksum for is not trusted: it
 * reads as bad, so the file comes back partial, never with bytes nobody
 * vouched for. Built by one thread with no other thread reading the fs.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "ubtrfs/rootscan.h"
#include "fs_priv.h"
#include "items.h"

#define SECTORS_MAX (1ULL << 22) /* over every range: 16 GiB of 4 KiB sectors, ~50 MiB */

struct csum_range {
	uint64_t logical, nsec, min_gen, max_gen;
	uint64_t *gen;  /* per sector: the generation of the leaf its checksum came from, 0: none */
	uint8_t *csums; /* per sector, csum_size bytes */
};

struct ub_loose_csums {
	struct csum_range *v;
	size_t n, cap;
	uint64_t sectors, longest; /* longest: in sectors, bounds the search for covering ranges */
	bool sorted;
};

static struct ub_loose_csums *get(struct ub_fs *fs)
{
	if (!fs->loose_csums)
		fs->loose_csums = calloc(1, sizeof(*fs->loose_csums));
	return fs->loose_csums;
}

int ub_fs_loose_csum_range(struct ub_fs *fs, uint64_t logical, uint64_t len, uint64_t min_gen, uint64_t max_gen)
{
	const uint32_t ss = fs->vol->sectorsize, cs = fs->vol->csum_size;
	struct ub_loose_csums *l = get(fs);
	struct csum_range *r;
	uint64_t nsec = len / ss;

	if (!l)
		return -ENOMEM;
	if (logical % ss || len % ss || !nsec || min_gen > max_gen)
		return -EINVAL;
	for (size_t i = 0; i < l->n; i++) {
		r = &l->v[i];
		/* the same extent named again (another leaf, another file): one window over both */
		if (r->logical == logical && r->nsec == nsec) {
			r->min_gen = r->min_gen < min_gen ? r->min_gen : min_gen;
			r->max_gen = r->max_gen > max_gen ? r->max_gen : max_gen;
			return 0;
		}
	}
	if (l->sectors + nsec > SECTORS_MAX)
		return -E2BIG;
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;
		struct csum_range *v = realloc(l->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		l->v = v;
		l->cap = cap;
	}
	r = &l->v[l->n];
	*r = (struct csum_range){ logical, nsec, min_gen, max_gen, calloc(nsec, sizeof(uint64_t)), malloc(nsec * cs) };
	if (!r->gen || !r->csums) {
		free(r->gen);
		free(r->csums);
		return -ENOMEM;
	}
	l->n++;
	l->sectors += nsec;
	l->longest = nsec > l->longest ? nsec : l->longest;
	l->sorted = false;
	return 0;
}

static int range_cmp(const void *a, const void *b)
{
	const struct csum_range *x = a, *y = b;

	return x->logical < y->logical ? -1 : x->logical > y->logical;
}

/*
 * Index of the first range that may cover `logical`: none starting more than
 * `longest` sectors before it can (the ranges are sorted by their start only;
 * their ends are in no order).
 */
static size_t first_covering(const struct ub_loose_csums *l, uint64_t logical, uint32_t ss)
{
	uint64_t from = logical > l->longest * ss ? logical - l->longest * ss : 0;
	size_t lo = 0, hi = l->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (l->v[mid].logical < from)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static void sort_ranges(struct ub_loose_csums *l)
{
	if (!l->sorted && l->n)
		qsort(l->v, l->n, sizeof(*l->v), range_cmp);
	l->sorted = true;
}

int ub_fs_loose_csum_leaf(struct ub_fs *fs, const struct ub_eb *leaf)
{
	const uint32_t ss = fs->vol->sectorsize, cs = fs->vol->csum_size;
	struct ub_loose_csums *l = fs->loose_csums;
	uint64_t gen = ub_eb_generation(leaf);
	uint32_t n = ub_eb_nritems(leaf);

	if (!l || !l->n || ub_eb_owner(leaf) != BTRFS_CSUM_TREE_OBJECTID || ub_eb_level(leaf))
		return 0;
	sort_ranges(l);
	for (uint32_t i = 0; i < n; i++) {
		struct ub_key k;
		const uint8_t *d;
		uint32_t size;
		uint64_t end;

		ub_eb_item_key(leaf, (int)i, &k);
		if (k.objectid != BTRFS_EXTENT_CSUM_OBJECTID || k.type != BTRFS_EXTENT_CSUM_KEY || k.offset % ss)
			continue;
		d = ub_eb_item_data(leaf, (int)i, &size);
		if (__builtin_add_overflow(k.offset, (uint64_t)(size / cs) * ss, &end))
			continue;
		for (size_t j = first_covering(l, k.offset, ss); j < l->n && l->v[j].logical < end; j++) {
			struct csum_range *r = &l->v[j];
			uint64_t from = k.offset > r->logical ? k.offset : r->logical;
			uint64_t to = end < r->logical + r->nsec * ss ? end : r->logical + r->nsec * ss;

			if (gen < r->min_gen || gen > r->max_gen)
				continue;
			for (uint64_t at = from; at < to; at += ss) {
				uint64_t s = (at - r->logical) / ss;

				if (r->gen[s] >= gen)
					continue;
				r->gen[s] = gen;
				memcpy(r->csums + s * cs, d + (at - k.offset) / ss * cs, cs);
			}
		}
	}
	return 0;
}

void ub_loose_csums(const struct ub_fs *fs, uint64_t logical, uint64_t nsec, uint8_t *csums, uint8_t *have)
{
	const uint32_t ss = fs->vol->sectorsize, cs = fs->vol->csum_size;
	const struct ub_loose_csums *l = fs->loose_csums;
	uint64_t end = logical + nsec * ss;

	if (!l || !l->n)
		return;
	/* sorted once the first leaf was fed; before that (no leaf at all), every range is looked at */
	for (size_t j = l->sorted ? first_covering(l, logical, ss) : 0; j < l->n && (!l->sorted || l->v[j].logical < end);
	     j++) {
		const struct csum_range *r = &l->v[j];
		uint64_t from = logical > r->logical ? logical : r->logical;
		uint64_t to = end < r->logical + r->nsec * ss ? end : r->logical + r->nsec * ss;

		for (uint64_t at = from; at < to; at += ss) {
			uint64_t s = (at - r->logical) / ss, k = (at - logical) / ss;

			if (have[k] == 1)
				continue; /* the live tree's (or the log's) checksum */
			if (r->gen[s]) {
				memcpy(csums + k * cs, r->csums + s * cs, cs);
				have[k] = 1;
			} else {
				have[k] = UB_CSUM_UNKNOWN;
			}
		}
	}
}

void ub_loose_csums_free(struct ub_loose_csums *l)
{
	if (!l)
		return;
	for (size_t i = 0; i < l->n; i++) {
		free(l->v[i].gen);
		free(l->v[i].csums);
	}
	free(l->v);
	free(l);
}
