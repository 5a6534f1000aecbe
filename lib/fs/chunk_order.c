/* SPDX-License-Identifier: MIT */
/*
 * Which device extent is which stripe of a RAID0, RAID10, RAID5 or RAID6
 * chunk whose chunk item is lost. The profile says where any logical address
 * of the chunk lies: stripe s, so many bytes into the stripe. So a tree block
 * of the chunk found at that offset into a device extent puts that extent at
 * stripe s, and a data sector whose checksum (from a leaf of the checksum
 * tree) matches what that offset of an extent holds does the same. Each
 * extent takes the stripe most of its clues name; an extent no clue reaches
 * takes the one stripe left, or, for RAID10, a place in the one mirror pair
 * left (the two copies are alike). Anything else is not guessed.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "chunk_order.h"
#include "fs_priv.h"

#define CLUES_MAX (1u << 18)
#define DATA_CLUES_TRIED 512 /* data clues read per chunk, at most: each costs a sector per extent */

static uint64_t unit_hash(uint64_t logical)
{
	uint64_t u = logical / UB_STRIPE_LEN;

	u ^= u >> 33;
	u *= 0xff51afd7ed558ccdULL;
	u ^= u >> 33;
	return u;
}

static bool kept(unsigned thin, uint64_t logical)
{
	return !(unit_hash(logical) & ((1ULL << thin) - 1));
}

int ub_clues_add(struct ub_clues *c, const struct ub_clue *clue)
{
	if (!kept(c->thin, clue->logical))
		return 0;
	if (c->n == CLUES_MAX) {
		size_t w = 0;

		c->thin++;
		for (size_t i = 0; i < c->n; i++)
			if (kept(c->thin, c->v[i].logical))
				c->v[w++] = c->v[i];
		c->n = w;
		if (!kept(c->thin, clue->logical))
			return 0;
	}
	if (c->n == c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 1024;
		struct ub_clue *v = realloc(c->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		c->v = v;
		c->cap = cap;
	}
	c->v[c->n++] = *clue;
	c->sorted = false;
	return 0;
}

void ub_clues_free(struct ub_clues *c)
{
	free(c->v);
	memset(c, 0, sizeof(*c));
}

/* By address, the newest first: the first of each address is the one to believe. */
static int clue_cmp(const void *a, const void *b)
{
	const struct ub_clue *x = a, *y = b;

	if (x->logical != y->logical)
		return x->logical < y->logical ? -1 : 1;
	return x->generation > y->generation ? -1 : x->generation < y->generation;
}

struct layout {
	uint64_t profile;
	int n, nparity, slots, per_slot; /* RAID10: n/2 mirror pairs of 2; else n stripes of 1 */
	uint64_t stripe_size;
};

/* The slot (stripe, or RAID10 pair) and offset into a device extent of byte `off` of the chunk. */
static void place_of(const struct layout *l, uint64_t off, int *slot, uint64_t *dev_off)
{
	uint64_t unit = off / UB_STRIPE_LEN, row;

	if (l->nparity) {
		uint64_t nd = (uint64_t)(l->n - l->nparity);

		row = unit / nd;
		*slot = (int)((unit % nd + row) % (uint64_t)l->n);
	} else {
		row = unit / (uint64_t)l->slots;
		*slot = (int)(unit % (uint64_t)l->slots);
	}
	*dev_off = row * UB_STRIPE_LEN + off % UB_STRIPE_LEN;
}

static int layout_of(uint64_t flags, uint64_t length, int n, struct layout *l)
{
	const struct ub_profile *p = ub_profile_of(flags);
	int data;

	memset(l, 0, sizeof(*l));
	l->profile = flags & BTRFS_BLOCK_GROUP_PROFILE_MASK;
	l->n = n;
	if (!p || !p->striped)
		return -EOPNOTSUPP; /* whole copies need no order */
	if (n < p->devs_min || n % p->sub_stripes)
		return -EUCLEAN;
	l->nparity = p->nparity;
	l->per_slot = p->sub_stripes;
	l->slots = n / p->sub_stripes;
	data = ub_profile_data_stripes(p, n, p->sub_stripes);
	if (data < 1 || !length || length % (uint64_t)data)
		return -EUCLEAN;
	l->stripe_size = length / (uint64_t)data;
	return 0;
}

/* First clue at or after `logical` (the clues sorted). */
static size_t first_clue(const struct ub_clues *c, uint64_t logical)
{
	size_t lo = 0, hi = c->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (c->v[mid].logical < logical)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Votes from the clues in [logical, logical + length): votes[k * slots + s]. */
/*
 * Votes from the clues in [logical, logical + length): votes[k * slots + s].
 * A clue that more extents bear out than a slot holds says nothing: in RAID5/6
 * a row whose other data strips are zero has P (and, for the first strip, Q)
 * equal to the one that is not, so its tree blocks and sectors are found
 * there too.
 */
static int gather(struct ub_volume *vol, struct ub_clues *c, uint64_t logical, uint64_t length, const struct layout *l,
		  const struct ub_stripe_place *st, unsigned *votes)
{
	const uint32_t ss = vol->sectorsize;
	uint8_t *sector = malloc(ss), *hit = calloc((size_t)l->n, 1), sum[UB_CSUM_SIZE_MAX];
	int tried = 0;

	if (!sector || !hit) {
		free(sector);
		free(hit);
		return -ENOMEM;
	}
	for (size_t i = first_clue(c, logical), next; i < c->n && c->v[i].logical - logical < length; i = next) {
		const struct ub_clue *cl = &c->v[i];
		uint64_t dev_off;
		int slot, nhit = 0;

		/* a tree block's clues are all of the places it was found; of a sector's, the newest checksum */
		for (next = i + 1; next < c->n && c->v[next].logical == cl->logical && c->v[next].data == cl->data; next++)
			;
		place_of(l, cl->logical - logical, &slot, &dev_off);
		if (dev_off >= l->stripe_size || (cl->data && cl->logical % ss))
			continue;
		memset(hit, 0, (size_t)l->n);
		for (int k = 0; k < l->n; k++) {
			if (!cl->data) {
				for (size_t j = i; j < next && !hit[k]; j++)
					hit[k] = c->v[j].devid == st[k].devid && c->v[j].physical == st[k].physical + dev_off;
			} else if (!ub_volume_read_raw(vol, st[k].devid, sector, ss, st[k].physical + dev_off) &&
				   ub_csum(vol->csum_type, sector, ss, sum) >= 0) {
				hit[k] = !memcmp(sum, cl->csum, vol->csum_size);
			}
			nhit += hit[k];
		}
		for (int k = 0; nhit <= l->per_slot && k < l->n; k++)
			votes[k * l->slots + slot] += hit[k];
		if (cl->data && ++tried == DATA_CLUES_TRIED)
			break;
	}
	free(sector);
	free(hit);
	return 0;
}

/*
 * RAID5/6 whose clues left several extents unplaced (the chunk's data fills
 * only its first rows, say, so P and Q were never where a clue could be):
 * P is the XOR of its row's data strips, so of the ways to put the unplaced
 * extents on the open stripes, the one whose P strips match the most rows
 * (rows of data that is not all zero; at most PARITY_ROWS) is the order, if
 * one does so strictly more than every other. slot_of[] (-1: unplaced)
 * gets it: 0; -ENODATA when parity does not settle it either.
 */
#define PARITY_ROWS 64
#define PARITY_UNKNOWN_MAX 3 /* ways to try: at most 3! */

/* Does the row's P strip match the XOR of its data strips? 1 yes, 0 not known (unreadable or all zero), -1 no. */
static int row_parity(struct ub_volume *vol, const struct layout *l, const struct ub_stripe_place *at, uint64_t row,
		      uint64_t *buf, uint64_t *acc)
{
	const size_t words = UB_STRIPE_LEN / sizeof(uint64_t);
	int nd = l->n - l->nparity, p = (int)(((uint64_t)nd + row) % (uint64_t)l->n);
	uint64_t any = 0;

	memset(acc, 0, UB_STRIPE_LEN);
	for (int d = 0; d < nd; d++) {
		const struct ub_stripe_place *sp = &at[(uint64_t)(d + row) % (uint64_t)l->n];

		if (ub_volume_read_raw(vol, sp->devid, buf, UB_STRIPE_LEN, sp->physical + row * UB_STRIPE_LEN))
			return 0;
		for (size_t i = 0; i < words; i++)
			acc[i] ^= buf[i];
	}
	for (size_t i = 0; i < words; i++)
		any |= acc[i];
	if (!any || ub_volume_read_raw(vol, at[p].devid, buf, UB_STRIPE_LEN, at[p].physical + row * UB_STRIPE_LEN))
		return 0;
	return memcmp(acc, buf, UB_STRIPE_LEN) ? -1 : 1;
}

/* The next arrangement of v[0..n) in lexicographic order; false after the last. */
static bool next_perm(int *v, int n)
{
	int i = n - 2, j = n - 1, t;

	while (i >= 0 && v[i] >= v[i + 1])
		i--;
	if (i < 0)
		return false;
	while (v[j] <= v[i])
		j--;
	t = v[i], v[i] = v[j], v[j] = t;
	for (int a = i + 1, b = n - 1; a < b; a++, b--)
		t = v[a], v[a] = v[b], v[b] = t;
	return true;
}

static int settle_by_parity(struct ub_volume *vol, const struct layout *l, const struct ub_stripe_place *st,
			    int *slot_of)
{
	uint64_t rows = l->stripe_size / UB_STRIPE_LEN, *buf = malloc(UB_STRIPE_LEN), *acc = malloc(UB_STRIPE_LEN);
	struct ub_stripe_place *at = calloc((size_t)l->n, sizeof(*at));
	int unk[PARITY_UNKNOWN_MAX], open[PARITY_UNKNOWN_MAX], perm[PARITY_UNKNOWN_MAX], best[PARITY_UNKNOWN_MAX];
	int nu = 0, no = 0, top = 0, ret = -ENODATA;
	bool tie = false;

	if (!buf || !acc || !at) {
		ret = -ENOMEM;
		goto out;
	}
	for (int k = 0; k < l->n; k++) {
		if (slot_of[k] < 0) {
			if (nu == PARITY_UNKNOWN_MAX)
				goto out;
			unk[nu++] = k;
		} else {
			at[slot_of[k]] = st[k]; /* taken: a length is never 0 (layout_of) */
		}
	}
	for (int s = 0; s < l->n && no < PARITY_UNKNOWN_MAX; s++)
		if (!at[s].length)
			open[no++] = s;
	if (no != nu)
		goto out;
	for (int i = 0; i < nu; i++)
		perm[i] = i;
	do {
		int score = 0;

		for (int i = 0; i < nu; i++)
			at[open[perm[i]]] = st[unk[i]];
		for (uint64_t row = 0; row < rows && row < PARITY_ROWS; row++)
			score += row_parity(vol, l, at, row, buf, acc) == 1;
		if (score > top) {
			top = score;
			tie = false;
			memcpy(best, perm, sizeof(best));
		} else if (score && score == top) {
			tie = true;
		}
	} while (next_perm(perm, nu));
	if (top && !tie) {
		for (int i = 0; i < nu; i++)
			slot_of[unk[i]] = open[best[i]];
		ret = 0;
	}
out:
	free(buf);
	free(acc);
	free(at);
	return ret;
}

int ub_chunk_order(struct ub_volume *vol, struct ub_clues *c, uint64_t logical, uint64_t length, uint64_t flags,
		   struct ub_stripe_place *st, int n, char *why, size_t whylen)
{
	struct ub_stripe_place *out = NULL;
	unsigned *votes = NULL;
	int *slot_of = NULL, *used = NULL, unknown = 0, ret;
	struct layout l;

	ret = layout_of(flags, length, n, &l);
	if (ret) {
		snprintf(why, whylen, "%d device extents cannot make a chunk of this profile and length", n);
		return ret;
	}
	for (int k = 0; k < n; k++)
		if (st[k].length != l.stripe_size) {
			snprintf(why, whylen, "the device extent on devid %llu at physical %llu is %llu bytes, its stripes %llu",
				 (unsigned long long)st[k].devid, (unsigned long long)st[k].physical,
				 (unsigned long long)st[k].length, (unsigned long long)l.stripe_size);
			return -EUCLEAN;
		}
	if (!c->sorted && c->n) {
		qsort(c->v, c->n, sizeof(*c->v), clue_cmp);
		c->sorted = true;
	}
	votes = calloc((size_t)n * (size_t)l.slots, sizeof(*votes));
	slot_of = calloc((size_t)n, sizeof(*slot_of));
	used = calloc((size_t)l.slots, sizeof(*used));
	out = calloc((size_t)n, sizeof(*out));
	if (!votes || !slot_of || !used || !out || gather(vol, c, logical, length, &l, st, votes)) {
		ret = -ENOMEM;
		goto done;
	}
	for (int k = 0; k < n; k++) {
		int best = -1;
		unsigned top = 0;
		bool tie = false;

		for (int s = 0; s < l.slots; s++) {
			unsigned v = votes[k * l.slots + s];

			if (v > top) {
				top = v;
				best = s;
				tie = false;
			} else if (v && v == top) {
				tie = true;
			}
		}
		slot_of[k] = tie ? -1 : best;
		if (slot_of[k] < 0) {
			unknown++;
			continue;
		}
		if (++used[slot_of[k]] > l.per_slot) {
			snprintf(why, whylen, "the tree blocks and checksums found put two device extents at stripe %d",
				 slot_of[k] * l.per_slot);
			ret = -EUCLEAN;
			goto done;
		}
	}
	/* the extents no clue reached: only where one place is left for them */
	if (unknown) {
		int open = -1, nopen = 0;

		for (int s = 0; s < l.slots; s++)
			if (used[s] < l.per_slot) {
				open = s;
				nopen++;
			}
		if (nopen != 1 && l.nparity && unknown <= PARITY_UNKNOWN_MAX) {
			ret = settle_by_parity(vol, &l, st, slot_of);
			if (ret == -ENOMEM)
				goto done;
			if (ret == 0)
				goto order;
		}
		if (nopen != 1) {
			int k = 0;

			while (slot_of[k] >= 0)
				k++;
			snprintf(why, whylen, "no tree block or data checksum found settles which stripe the device extent "
				 "on devid %llu at physical %llu is", (unsigned long long)st[k].devid,
				 (unsigned long long)st[k].physical);
			ret = -ENODATA;
			goto done;
		}
		for (int k = 0; k < n; k++)
			if (slot_of[k] < 0) {
				slot_of[k] = open;
				used[open]++;
			}
	}
order:
	memset(used, 0, (size_t)l.slots * sizeof(*used));
	for (int k = 0; k < n; k++)
		out[slot_of[k] * l.per_slot + used[slot_of[k]]++] = st[k];
	memcpy(st, out, (size_t)n * sizeof(*st));
	ret = 0;
done:
	free(votes);
	free(slot_of);
	free(used);
	free(out);
	return ret;
}
