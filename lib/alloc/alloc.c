/* SPDX-License-Identifier: MIT */
/*
 * Reservation, accounting, pinning and per-commit deltas (rules in alloc.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include "alloc/alloc_internal.h"

#define TYPE_BITS (BTRFS_BLOCK_GROUP_DATA | BTRFS_BLOCK_GROUP_METADATA | BTRFS_BLOCK_GROUP_SYSTEM)
#define FIRST_MB (1024ULL * 1024)

static void bg_free(struct ub_bg *bg)
{
	if (!bg)
		return;
	ub_rs_clear(&bg->free);
	ub_rs_clear(&bg->avail);
	ub_rs_clear(&bg->reserved);
	ub_rs_clear(&bg->super_set);
	ub_rs_clear(&bg->open);
	ub_rs_clear(&bg->became_free);
	ub_rs_clear(&bg->became_used);
	free(bg);
}

int ub_alloc_create(struct ub_volume *vol, const struct ub_log *log, struct ub_alloc **out)
{
	struct ub_alloc *a = calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	if (log)
		a->log = *log;
	else if (vol)
		a->log = vol->log;
	a->vol = vol;
	a->sectorsize = vol ? vol->sectorsize : 4096;
	a->nodesize = vol ? vol->nodesize : 16384;
	ub_rs_init(&a->pinned);
	ub_rs_init(&a->pin_cur);
	*out = a;
	return 0;
}

void ub_alloc_free(struct ub_alloc *a)
{
	if (!a)
		return;
	ub_chunk_undo_forget(a);
	for (int i = 0; i < a->nbgs; i++)
		bg_free(a->bgs[i]);
	free(a->bgs);
	ub_rs_clear(&a->pinned);
	ub_rs_clear(&a->pin_cur);
	for (int i = 0; i < a->nwaiting; i++)
		ub_rs_clear(&a->waiting[i].set);
	free(a->waiting);
	free(a);
}

/* Index of the last group starting at or below logical, -1 if none. */
static int bg_floor(const struct ub_alloc *a, uint64_t logical)
{
	int lo = 0, hi = a->nbgs - 1, best = -1;
	while (lo <= hi) {
		int mid = lo + (hi - lo) / 2;
		if (a->bgs[mid]->start <= logical) {
			best = mid;
			lo = mid + 1;
		} else {
			hi = mid - 1;
		}
	}
	return best;
}

struct ub_bg *ub_alloc_find_bg(const struct ub_alloc *a, uint64_t logical)
{
	int i = bg_floor(a, logical);
	if (i < 0)
		return NULL;
	struct ub_bg *bg = a->bgs[i];
	return logical - bg->start < bg->length ? bg : NULL;
}

/* The group holding all of [start, start+len), or NULL. */
static struct ub_bg *bg_of_range(const struct ub_alloc *a, uint64_t start, uint64_t len)
{
	struct ub_bg *bg = ub_alloc_find_bg(a, start);
	if (!bg || len == 0 || start + len < start || start + len > bg->start + bg->length)
		return NULL;
	return bg;
}

int ub_alloc_insert_bg(struct ub_alloc *a, uint64_t flags, uint64_t start, uint64_t length, uint64_t full_stripe,
		       const struct ub_range *super, int nsuper, struct ub_bg **out)
{
	int ret;
	if (length == 0 || start + length < start)
		return -EINVAL;
	int i = bg_floor(a, start);
	if (i >= 0 && a->bgs[i]->start + a->bgs[i]->length > start)
		return -EEXIST;
	if (i + 1 < a->nbgs && a->bgs[i + 1]->start < start + length)
		return -EEXIST;
	if (a->nbgs == a->cap) {
		int ncap = a->cap ? a->cap * 2 : 16;
		struct ub_bg **n = realloc(a->bgs, (size_t)ncap * sizeof(*n));
		if (!n)
			return -ENOMEM;
		a->bgs = n;
		a->cap = ncap;
	}
	struct ub_bg *bg = calloc(1, sizeof(*bg));
	if (!bg)
		return -ENOMEM;
	bg->start = start;
	bg->length = length;
	bg->flags = flags;
	bg->full_stripe = full_stripe;
	ret = ub_rs_add(&bg->free, start, length);
	if (ret)
		goto fail;
	ret = ub_rs_add(&bg->avail, start, length);
	if (ret)
		goto fail;
	for (int k = 0; k < nsuper; k++) {
		uint64_t s = super[k].start, e = super[k].start + super[k].len;
		if (s < start)
			s = start;
		if (e > start + length)
			e = start + length;
		if (e <= s)
			continue;
		ret = ub_rs_add_union(&bg->super_set, s, e - s);
		if (ret)
			goto fail;
		ret = ub_rs_remove_any(&bg->avail, s, e - s, NULL);
		if (ret)
			goto fail;
	}
	bg->super = bg->super_set.bytes;
	memmove(&a->bgs[i + 2], &a->bgs[i + 1], (size_t)(a->nbgs - (i + 1)) * sizeof(*a->bgs));
	a->bgs[i + 1] = bg;
	a->nbgs++;
	if (out)
		*out = bg;
	return 0;
fail:
	bg_free(bg);
	return ret;
}

uint64_t ub_alloc_chunk_full_stripe(const struct ub_chunk *c)
{
	if (!(c->type & BTRFS_BLOCK_GROUP_RAID56_MASK))
		return 0;
	int ds = ub_chunk_data_stripes(c);
	return ds > 0 ? (uint64_t)ds * c->stripe_len : 0;
}

int ub_alloc_insert_chunk_bg(struct ub_alloc *a, const struct ub_chunk *c, uint64_t flags, struct ub_bg **out)
{
	/* the first-MiB range plus one stripe per device per mirror, at most */
	int max = 1 + UB_SUPER_MIRROR_MAX * (c->num_stripes ? c->num_stripes : 1), nsup = 0;
	struct ub_range *sup = calloc((size_t)max, sizeof(*sup));
	uint64_t *start = calloc((size_t)max, sizeof(*start)), *len = calloc((size_t)max, sizeof(*len));
	int ret = -ENOMEM;
	if (sup && start && len)
		ret = ub_chunk_super_ranges(c, start, len, max, &nsup);
	for (int i = 0; !ret && i < nsup; i++)
		sup[i] = (struct ub_range){ start[i], len[i] };
	free(start);
	free(len);
	if (!ret)
		ret = ub_alloc_insert_bg(a, flags, c->logical, c->length, ub_alloc_chunk_full_stripe(c), sup, nsup, out);
	free(sup);
	return ret;
}

int ub_alloc_add_block_group(struct ub_alloc *a, uint64_t type, uint64_t logical, uint64_t length)
{
	int ret;
	struct ub_bg *bg;
	if (a->vol) {
		const struct ub_chunk *c = ub_volume_find_chunk(a->vol, logical);
		if (!c || c->logical != logical || c->length != length) {
			ub_err(&a->log, "new block group [%" PRIu64 ", +%" PRIu64 ") has no chunk of that size", logical,
			       length);
			return -ENOENT;
		}
		ret = ub_alloc_insert_chunk_bg(a, c, type, &bg);
	} else {
		struct ub_range sup = { logical, 0 };
		if (logical < FIRST_MB)
			sup.len = (logical + length < FIRST_MB ? logical + length : FIRST_MB) - logical;
		ret = ub_alloc_insert_bg(a, type, logical, length, 0, &sup, sup.len ? 1 : 0, &bg);
	}
	if (ret)
		return ret;
	bg->is_new = true;
	bg->dirty = true;
	return 0;
}

/* ---- reservation ---- */

static int type_index(uint64_t type)
{
	if (type & BTRFS_BLOCK_GROUP_SYSTEM)
		return 2;
	if (type & BTRFS_BLOCK_GROUP_METADATA)
		return 1;
	return 0;
}

struct fit_arg {
	const struct ub_bg *bg;
	uint64_t align;
	bool meta;
};

static inline uint64_t align_up(uint64_t x, uint64_t a)
{
	uint64_t r = (x + a - 1) & ~(a - 1);
	return r < x ? UINT64_MAX : r;
}

static bool crosses_stripe(uint64_t s, uint64_t len)
{
	return s / UB_STRIPE_LEN != (s + len - 1) / UB_STRIPE_LEN;
}

static uint64_t fit_plain(void *arg, const struct ub_range *ext, uint64_t lo, uint64_t len)
{
	const struct fit_arg *f = arg;
	uint64_t s = align_up(lo, f->align), end = ext->start + ext->len;
	while (s != UINT64_MAX && s + len >= s && s + len <= end) {
		if (!f->meta || !crosses_stripe(s, len))
			return s;
		s = align_up((s / UB_STRIPE_LEN + 1) * UB_STRIPE_LEN, f->align);
	}
	return UINT64_MAX;
}

/* A full stripe the running transaction may write into. */
static bool stripe_ok(const struct ub_bg *bg, uint64_t st)
{
	uint64_t end = st + bg->full_stripe;
	if (end > bg->start + bg->length)
		end = bg->start + bg->length;
	return ub_rs_contains(&bg->open, st, end - st) || ub_rs_contains(&bg->avail, st, end - st);
}

static uint64_t fit_raid56(void *arg, const struct ub_range *ext, uint64_t lo, uint64_t len)
{
	const struct fit_arg *f = arg;
	const struct ub_bg *bg = f->bg;
	uint64_t fs = bg->full_stripe, end = ext->start + ext->len;
	uint64_t s = align_up(lo, f->align);
	while (s != UINT64_MAX && s + len >= s && s + len <= end) {
		if (f->meta && crosses_stripe(s, len)) {
			s = align_up((s / UB_STRIPE_LEN + 1) * UB_STRIPE_LEN, f->align);
			continue;
		}
		uint64_t first = bg->start + (s - bg->start) / fs * fs;
		uint64_t last = bg->start + (s + len - 1 - bg->start) / fs * fs;
		if (!stripe_ok(bg, first)) {
			s = align_up(first + fs, f->align);
			continue;
		}
		/*
		 * Stripes strictly between first and last lie inside this
		 * (maximal) free extent, so they are wholly free. A bad last
		 * stripe stays bad for every later s in this extent.
		 */
		if (last != first && !stripe_ok(bg, last))
			return UINT64_MAX;
		return s;
	}
	return UINT64_MAX;
}

/* Mark every stripe that [s, s+len) touches as opened by this transaction. */
static int open_stripes(struct ub_bg *bg, uint64_t s, uint64_t len)
{
	if (!bg->full_stripe)
		return 0;
	uint64_t fs = bg->full_stripe;
	uint64_t first = bg->start + (s - bg->start) / fs * fs;
	uint64_t end = bg->start + ((s + len - 1 - bg->start) / fs + 1) * fs;
	if (end > bg->start + bg->length)
		end = bg->start + bg->length;
	return ub_rs_add_union(&bg->open, first, end - first);
}

static int take(struct ub_bg *bg, uint64_t s, uint64_t len)
{
	int ret = ub_rs_remove(&bg->avail, s, len);
	if (ret)
		return ret;
	ret = ub_rs_add(&bg->reserved, s, len);
	if (ret)
		goto undo;
	ret = open_stripes(bg, s, len);
	if (ret) {
		ub_rs_remove(&bg->reserved, s, len);
		goto undo;
	}
	return 0;
undo:
	ub_rs_add(&bg->avail, s, len);
	return ret;
}

static bool bg_serves(const struct ub_bg *bg, uint64_t req)
{
	return (bg->flags & req) == req;
}

/* A group's profile as a convert target names it (single has its own bit there). */
static uint64_t bg_profile(const struct ub_bg *bg)
{
	uint64_t p = bg->flags & BTRFS_BLOCK_GROUP_PROFILE_MASK;

	return p ? p : BTRFS_AVAIL_ALLOC_BIT_SINGLE;
}

/* The group may take new extents of `req` now: its type, not being relocated. */
static bool bg_takes(const struct ub_bg *bg, uint64_t req)
{
	return bg_serves(bg, req) && !bg->ro;
}

/*
 * During a convert the target profile's groups are taken first, the others
 * only when those are full (as the kernel's find_free_extent goes through
 * the wanted profile's groups first): the chunks a convert needs are added in
 * the target profile (ub_alloc_usable and ub_alloc_need_chunk count its
 * groups only), but the first of them can still be placed with the old
 * profile's space.
 */
static bool bg_preferred(const struct ub_alloc *a, const struct ub_bg *bg, uint64_t req)
{
	uint64_t target = a->target[type_index(req)];

	return bg_takes(bg, req) && (!target || bg_profile(bg) == target);
}

int ub_alloc_set_ro(struct ub_alloc *a, uint64_t start, bool ro)
{
	struct ub_bg *bg = ub_alloc_find_bg(a, start);

	if (!bg || bg->start != start)
		return -ENOENT;
	bg->ro = ro;
	return 0;
}

void ub_alloc_set_target(struct ub_alloc *a, uint64_t type, uint64_t profile)
{
	a->target[type_index(type & TYPE_BITS)] = profile;
}

uint64_t ub_alloc_target(const struct ub_alloc *a, uint64_t type)
{
	return a->target[type_index(type & TYPE_BITS)];
}

int ub_alloc_reserve(struct ub_alloc *a, uint64_t type, uint64_t len, uint64_t hint, uint64_t *start)
{
	uint64_t req = type & TYPE_BITS;
	if (!req || (type & ~(TYPE_BITS | BTRFS_BLOCK_GROUP_PROFILE_MASK)) || len == 0)
		return -EINVAL;
	bool meta = (req & (BTRFS_BLOCK_GROUP_METADATA | BTRFS_BLOCK_GROUP_SYSTEM)) != 0;
	uint64_t align = meta ? a->nodesize : a->sectorsize;
	if (meta ? len != a->nodesize : len % a->sectorsize)
		return -EINVAL;
	int ti = type_index(req);
	if (hint == 0)
		hint = a->last[ti];
	if (a->nbgs == 0)
		return -ENOSPC;
	int first = bg_floor(a, hint);
	if (first < 0)
		first = 0;
	/* the hint's group from the hint, then every group, then the hint's group from its start;
	 * during a convert, all of that in the target's groups first */
	for (int step = 0; step <= 2 * a->nbgs + 1; step++) {
		bool second = step > a->nbgs;
		struct ub_bg *bg = a->bgs[(first + step % (a->nbgs + 1)) % a->nbgs];
		if (second && !a->target[ti])
			break;
		if (!(second ? bg_takes(bg, req) : bg_preferred(a, bg, req)) || bg->avail.bytes < len)
			continue;
		uint64_t from = (step % (a->nbgs + 1) == 0 && hint > bg->start) ? hint : bg->start;
		struct fit_arg f = { bg, align, meta };
		uint64_t s;
		int r = ub_rs_find(&bg->avail, from, len, bg->full_stripe ? fit_raid56 : fit_plain, &f, &s);
		if (r)
			continue;
		int ret = take(bg, s, len);
		if (ret)
			return ret;
		*start = s;
		a->last[ti] = s + len;
		return 0;
	}
	return -ENOSPC;
}

int ub_alloc_reserve_at(struct ub_alloc *a, uint64_t start, uint64_t len)
{
	struct ub_bg *bg = bg_of_range(a, start, len);
	if (!bg)
		return -ENOENT;
	if (!ub_rs_contains(&bg->avail, start, len))
		return -ENOSPC;
	return take(bg, start, len);
}

void ub_alloc_unreserve(struct ub_alloc *a, uint64_t start, uint64_t len)
{
	struct ub_bg *bg = bg_of_range(a, start, len);
	if (!bg || ub_rs_remove(&bg->reserved, start, len)) {
		/* a caller bug; never turn unknown space into free space */
		ub_err(&a->log, "allocator: unreserve of [%" PRIu64 ", +%" PRIu64 ") which is not reserved", start, len);
		return;
	}
	if (ub_rs_add(&bg->avail, start, len))
		ub_err(&a->log, "allocator: unreserved range [%" PRIu64 ", +%" PRIu64 ") already available", start,
		       len);
}

/* ---- accounting ---- */

/* Record [s, s+len) as changed to `to` (became_free or became_used), netting against `from`. */
static int record_delta(struct ub_range_set *from, struct ub_range_set *to, uint64_t s, uint64_t len)
{
	uint64_t pos = s, end = s + len;
	while (pos < end) {
		struct ub_range r;
		uint64_t piece_end = end;
		bool in_from = false;
		if (ub_rs_next(from, pos, &r) == 0 && r.start < end) {
			if (r.start <= pos) {
				in_from = true;
				piece_end = r.start + r.len < end ? r.start + r.len : end;
			} else {
				piece_end = r.start;
			}
		}
		int ret = in_from ? ub_rs_remove(from, pos, piece_end - pos) : ub_rs_add(to, pos, piece_end - pos);
		if (ret)
			return ret;
		pos = piece_end;
	}
	return 0;
}

int ub_alloc_account(struct ub_alloc *a, uint64_t start, uint64_t len, bool alloc)
{
	struct ub_bg *bg = bg_of_range(a, start, len);
	int ret;
	if (!bg) {
		ub_err(&a->log, "allocator: extent [%" PRIu64 ", +%" PRIu64 ") is not inside one block group", start, len);
		return -ENOENT;
	}
	if (alloc) {
		bool was_reserved = ub_rs_contains(&bg->reserved, start, len);
		if (!ub_rs_contains(&bg->free, start, len) || (!was_reserved && !ub_rs_contains(&bg->avail, start, len))) {
			ub_err(&a->log,
			       "allocator: extent [%" PRIu64 ", +%" PRIu64 ") in block group %" PRIu64
			       " is already allocated, pinned or a superblock area",
			       start, len, bg->start);
			return -EUCLEAN;
		}
		ret = ub_rs_remove(&bg->free, start, len);
		if (ret)
			return ret;
		ret = was_reserved ? ub_rs_remove(&bg->reserved, start, len) : ub_rs_remove(&bg->avail, start, len);
		if (ret) {
			ub_rs_add(&bg->free, start, len);
			return ret;
		}
		ret = record_delta(&bg->became_free, &bg->became_used, start, len);
		if (ret)
			return ret;
		bg->used += len;
	} else {
		if (ub_rs_overlaps(&bg->free, start, len) || bg->used < len) {
			ub_err(&a->log,
			       "allocator: freeing [%" PRIu64 ", +%" PRIu64 ") in block group %" PRIu64
			       ": %s",
			       start, len, bg->start, bg->used < len ? "more than the group uses" : "already free");
			return -EUCLEAN;
		}
		ret = ub_rs_add(&bg->free, start, len);
		if (ret)
			return ret;
		ret = record_delta(&bg->became_used, &bg->became_free, start, len);
		if (ret)
			return ret;
		bg->used -= len;
	}
	bg->dirty = true;
	return 0;
}

/* ---- pinning ---- */

int ub_alloc_pin(struct ub_alloc *a, uint64_t start, uint64_t len)
{
	struct ub_bg *bg = bg_of_range(a, start, len);
	int ret;
	if (!bg) {
		ub_err(&a->log, "allocator: pin of [%" PRIu64 ", +%" PRIu64 ") outside every block group", start, len);
		return -ENOENT;
	}
	uint64_t had = ub_rs_bytes_in(&a->pinned, start, len);
	ret = ub_rs_add_union(&a->pinned, start, len);
	if (!ret)
		ret = ub_rs_add_union(&a->pin_cur, start, len);
	if (ret)
		return ret;
	bg->pinned += len - had;
	/* pinned space must not be handed out, whatever the caller did before */
	return ub_rs_remove_any(&bg->avail, start, len, NULL);
}

static void end_transaction(struct ub_alloc *a)
{
	for (int i = 0; i < a->nbgs; i++)
		ub_rs_clear(&a->bgs[i]->open);
}

void ub_alloc_close_stripes(struct ub_alloc *a)
{
	end_transaction(a);
}

/* [s, e) of one group leaves the pins: what is free on disk comes back to avail */
static void unpin_in_group(struct ub_alloc *a, struct ub_bg *bg, uint64_t s, uint64_t be)
{
	/*
	 * Only what is free on disk comes back (a pin of a still referenced
	 * extent must not make it allocatable), minus superblock stripes and
	 * reservations.
	 */
	uint64_t q = s, gone = ub_rs_bytes_in(&a->pinned, s, be - s);
	struct ub_range fr;

	while (q < be && ub_rs_next(&bg->free, q, &fr) == 0 && fr.start < be) {
		uint64_t fs = fr.start > q ? fr.start : q;
		uint64_t fe = fr.start + fr.len < be ? fr.start + fr.len : be;
		/* split around super_set / reserved pieces */
		uint64_t x = fs;
		while (x < fe) {
			struct ub_range b1, b2;
			uint64_t stop = fe;
			bool blocked = false;
			if (ub_rs_next(&bg->super_set, x, &b1) == 0 && b1.start < stop) {
				if (b1.start <= x) {
					blocked = true;
					stop = b1.start + b1.len < fe ? b1.start + b1.len : fe;
				} else {
					stop = b1.start;
				}
			}
			if (!blocked && ub_rs_next(&bg->reserved, x, &b2) == 0 && b2.start < stop) {
				if (b2.start <= x) {
					blocked = true;
					stop = b2.start + b2.len < stop ? b2.start + b2.len : stop;
				} else {
					stop = b2.start;
				}
			}
			if (!blocked && ub_rs_add_union(&bg->avail, x, stop - x))
				ub_err(&a->log, "allocator: out of memory returning pinned space");
			x = stop;
		}
		q = fe;
	}
	if (ub_rs_remove_any(&a->pinned, s, be - s, NULL))
		ub_err(&a->log, "allocator: out of memory returning pinned space");
	bg->pinned -= gone < bg->pinned ? gone : bg->pinned;
}

/* Every range of `set` leaves the pins (the set is emptied): the bytes that did. */
static uint64_t unpin_set(struct ub_alloc *a, struct ub_range_set *set)
{
	struct ub_range r;
	uint64_t pos = 0, bytes = 0;

	while (ub_rs_next(set, pos, &r) == 0) {
		/* a pinned range may span groups only through a caller bug; walk groups anyway */
		uint64_t s = r.start, e = r.start + r.len;

		pos = e;
		bytes += r.len;
		while (s < e) {
			int i = bg_floor(a, s);
			struct ub_bg *bg = i >= 0 ? a->bgs[i] : NULL;
			if (!bg || s >= bg->start + bg->length) {
				int ni = i + 1;
				if (ni >= a->nbgs || a->bgs[ni]->start >= e)
					break;
				s = a->bgs[ni]->start;
				continue;
			}
			uint64_t be = bg->start + bg->length < e ? bg->start + bg->length : e;
			unpin_in_group(a, bg, s, be);
			s = be;
		}
	}
	ub_rs_clear(set);
	return bytes;
}

uint64_t ub_alloc_release_pins(struct ub_alloc *a, uint64_t oldest)
{
	uint64_t bytes = 0;
	int kept = 0;

	/* batches are in commit order: the oldest go first */
	for (int i = 0; i < a->nwaiting; i++) {
		if (a->waiting[i].gen <= oldest)
			bytes += unpin_set(a, &a->waiting[i].set);
		else
			a->waiting[kept++] = a->waiting[i];
	}
	a->nwaiting = kept;
	return bytes;
}

void ub_alloc_hints(struct ub_alloc *a, uint64_t hints[3], bool set)
{
	if (set)
		memcpy(a->last, hints, sizeof(a->last));
	else
		memcpy(hints, a->last, sizeof(a->last));
}

uint64_t ub_alloc_pins_waiting(const struct ub_alloc *a)
{
	uint64_t bytes = 0;

	for (int i = 0; i < a->nwaiting; i++)
		bytes += ub_rs_bytes_in(&a->waiting[i].set, 0, UINT64_MAX);
	return bytes;
}

/* The running transaction's pins wait, tagged `gen`; false when there was no memory to keep them apart. */
static void tag_pins(struct ub_alloc *a, uint64_t gen)
{
	if (!ub_rs_bytes_in(&a->pin_cur, 0, UINT64_MAX))
		return;
	if (a->nwaiting == a->capwaiting) {
		int cap = a->capwaiting ? 2 * a->capwaiting : 8;
		struct ub_pin_batch *w = realloc(a->waiting, (size_t)cap * sizeof(*w));

		if (w) {
			a->waiting = w;
			a->capwaiting = cap;
		}
	}
	if (a->nwaiting < a->capwaiting) {
		a->waiting[a->nwaiting].gen = gen;
		a->waiting[a->nwaiting++].set = a->pin_cur;
		ub_rs_init(&a->pin_cur);
	} else {
		/* no memory to keep it apart: it stays pinned for good, which is safe */
		ub_err(&a->log, "allocator: out of memory keeping freed space for readers; it stays unused");
		ub_rs_clear(&a->pin_cur);
	}
}

void ub_alloc_seal_pins(struct ub_alloc *a, uint64_t gen)
{
	tag_pins(a, gen);
	end_transaction(a);
	/* the chunks the sealed transaction added are its for good: a failed write breaks the engine */
	ub_chunk_undo_forget(a);
}

void ub_alloc_commit_pins(struct ub_alloc *a, uint64_t gen, uint64_t oldest)
{
	if (gen > oldest)
		tag_pins(a, gen); /* a reader of an older commit may still read there */
	else
		unpin_set(a, &a->pin_cur);
	ub_alloc_release_pins(a, oldest);
	end_transaction(a);
	/* the superblocks holding this transaction's chunks are durable */
	ub_chunk_undo_forget(a);
}

void ub_alloc_unpin(struct ub_alloc *a)
{
	ub_alloc_commit_pins(a, 0, UINT64_MAX);
}

void ub_alloc_abort(struct ub_alloc *a)
{
	/*
	 * Nothing committed references a reservation of the aborted transaction
	 * (its extent items were never written), so every one is free space the
	 * next transaction may use at once. Reserved ranges lie inside committed
	 * free and outside the superblock stripes and pins, so they join avail
	 * as they are.
	 */
	for (int i = 0; i < a->nbgs; i++) {
		struct ub_bg *bg = a->bgs[i];
		struct ub_range r;
		uint64_t pos = 0;

		while (ub_rs_next(&bg->reserved, pos, &r) == 0) {
			pos = r.start + r.len;
			if (ub_rs_add_union(&bg->avail, r.start, r.len))
				ub_err(&a->log, "allocator: out of memory returning an aborted reservation");
		}
		ub_rs_clear(&bg->reserved);
	}
	/* this transaction's pins leave the books but not avail; what waits for readers stays */
	{
		struct ub_range r;
		uint64_t pos = 0;

		while (ub_rs_next(&a->pin_cur, pos, &r) == 0) {
			pos = r.start + r.len;
			for (uint64_t s = r.start; s < r.start + r.len;) {
				struct ub_bg *bg = ub_alloc_find_bg(a, s);
				uint64_t be;

				if (!bg)
					break;
				be = bg->start + bg->length < r.start + r.len ? bg->start + bg->length : r.start + r.len;
				uint64_t gone = ub_rs_bytes_in(&a->pinned, s, be - s);
				bg->pinned -= gone < bg->pinned ? gone : bg->pinned;
				ub_rs_remove_any(&a->pinned, s, be - s, NULL);
				s = be;
			}
		}
		ub_rs_clear(&a->pin_cur);
	}
	end_transaction(a);
	ub_chunk_undo_abort(a);
}

int ub_alloc_remove_bg(struct ub_alloc *a, uint64_t start)
{
	int i = bg_floor(a, start);
	if (i < 0 || a->bgs[i]->start != start)
		return -ENOENT;
	bg_free(a->bgs[i]);
	memmove(&a->bgs[i], &a->bgs[i + 1], (size_t)(a->nbgs - i - 1) * sizeof(*a->bgs));
	a->nbgs--;
	return 0;
}

/* ---- commit ---- */

int ub_alloc_for_each_dirty_bg(struct ub_alloc *a, int (*fn)(void *arg, const struct ub_bg_delta *d), void *arg)
{
	for (int i = 0; i < a->nbgs; i++) {
		struct ub_bg *bg = a->bgs[i];
		if (!bg->dirty)
			continue;
		struct ub_bg_delta d = {
			.start = bg->start,
			.length = bg->length,
			.flags = bg->flags,
			.chunk_objectid = BTRFS_FIRST_CHUNK_TREE_OBJECTID,
			.used = bg->used,
			.old_used = bg->old_used,
			.is_new = bg->is_new,
			.fst_bitmaps = bg->fst_bitmaps,
			.fst_rebuild = bg->fst_rebuild,
			.became_free = &bg->became_free,
			.became_used = &bg->became_used,
			.free = &bg->free,
		};
		int ret = fn(arg, &d);
		if (ret)
			return ret;
	}
	return 0;
}

void ub_alloc_clear_dirty(struct ub_alloc *a)
{
	for (int i = 0; i < a->nbgs; i++) {
		struct ub_bg *bg = a->bgs[i];
		if (!bg->dirty)
			continue;
		ub_rs_clear(&bg->became_free);
		ub_rs_clear(&bg->became_used);
		bg->old_used = bg->used;
		bg->is_new = false;
		bg->fst_rebuild = false;
		bg->dirty = false;
	}
}

int ub_alloc_rebuild_fst_all(struct ub_alloc *a)
{
	for (int i = 0; i < a->nbgs; i++) {
		a->bgs[i]->dirty = true;
		a->bgs[i]->fst_rebuild = true;
	}
	return a->nbgs;
}

/* ---- totals ---- */

void ub_alloc_space_info(const struct ub_alloc *a, uint64_t type, struct ub_space_info *out)
{
	uint64_t req = type & TYPE_BITS;
	memset(out, 0, sizeof(*out));
	for (int i = 0; i < a->nbgs; i++) {
		const struct ub_bg *bg = a->bgs[i];
		if (!req || !bg_serves(bg, req))
			continue;
		out->total += bg->length;
		out->used += bg->used;
		out->reserved += bg->reserved.bytes;
		out->pinned += bg->pinned;
		out->super += bg->super;
		if (bg->ro)
			out->readonly += bg->avail.bytes;
		else
			out->avail += bg->avail.bytes;
		out->nr_groups++;
	}
}

uint64_t ub_alloc_usable(const struct ub_alloc *a, uint64_t type)
{
	uint64_t req = type & TYPE_BITS, sum = 0;
	for (int i = 0; i < a->nbgs; i++) {
		const struct ub_bg *bg = a->bgs[i];
		if (!req || !bg_preferred(a, bg, req))
			continue;
		if (!bg->full_stripe) {
			sum += bg->avail.bytes;
			continue;
		}
		/* RAID5/6: whole free stripes, and what is left in the ones this transaction opened */
		for (uint64_t st = bg->start; st < bg->start + bg->length; st += bg->full_stripe) {
			uint64_t len = bg->start + bg->length - st < bg->full_stripe ? bg->start + bg->length - st
										       : bg->full_stripe;
			if (ub_rs_contains(&bg->avail, st, len))
				sum += len;
			else if (ub_rs_contains(&bg->open, st, len))
				sum += ub_rs_bytes_in(&bg->avail, st, len);
		}
	}
	return sum;
}

uint64_t ub_alloc_bytes_used(const struct ub_alloc *a)
{
	uint64_t sum = 0;
	for (int i = 0; i < a->nbgs; i++)
		sum += a->bgs[i]->used;
	return sum;
}

bool ub_alloc_need_chunk(const struct ub_alloc *a, uint64_t type)
{
	struct ub_space_info si;
	uint64_t req = type & TYPE_BITS;
	ub_alloc_space_info(a, req, &si);
	if (si.nr_groups == 0)
		return true;
	if (req & BTRFS_BLOCK_GROUP_DATA && !(req & BTRFS_BLOCK_GROUP_METADATA))
		return false; /* data: on demand, when a reservation fails */
	uint64_t busy = si.used + si.reserved + si.pinned + si.super + si.readonly;
	if (a->target[type_index(req)]) {
		/* a convert: only the target profile's groups count */
		uint64_t total = 0;

		busy = 0;
		for (int i = 0; i < a->nbgs; i++) {
			const struct ub_bg *bg = a->bgs[i];

			if (!bg_preferred(a, bg, req))
				continue;
			total += bg->length;
			busy += bg->length - bg->avail.bytes;
		}
		return total == 0 || busy + 2 * FIRST_MB >= total / 10 * 8;
	}
	return busy + 2 * FIRST_MB >= si.total / 10 * 8;
}

static void fill_info(const struct ub_bg *bg, struct ub_bg_info *out)
{
	out->start = bg->start;
	out->length = bg->length;
	out->flags = bg->flags;
	out->used = bg->used;
	out->super = bg->super;
	out->pinned = bg->pinned;
	out->reserved = bg->reserved.bytes;
	out->full_stripe = bg->full_stripe;
	out->ro = bg->ro;
}

int ub_alloc_bg_info(const struct ub_alloc *a, uint64_t logical, struct ub_bg_info *out)
{
	const struct ub_bg *bg = ub_alloc_find_bg(a, logical);
	if (!bg)
		return -ENOENT;
	fill_info(bg, out);
	return 0;
}

int ub_alloc_next_bg(const struct ub_alloc *a, uint64_t pos, struct ub_bg_info *out)
{
	int i = bg_floor(a, pos);
	if (i < 0 || a->bgs[i]->start < pos)
		i++;
	if (i >= a->nbgs)
		return 1;
	fill_info(a->bgs[i], out);
	return 0;
}

const struct ub_range_set *ub_alloc_bg_free(const struct ub_alloc *a, uint64_t logical)
{
	const struct ub_bg *bg = ub_alloc_find_bg(a, logical);
	return bg ? &bg->free : NULL;
}

const struct ub_range_set *ub_alloc_bg_avail(const struct ub_alloc *a, uint64_t logical)
{
	const struct ub_bg *bg = ub_alloc_find_bg(a, logical);
	return bg ? &bg->avail : NULL;
}

/* ---- invariants ---- */

static bool sets_overlap(const struct ub_range_set *x, const struct ub_range_set *y)
{
	struct ub_range r;
	uint64_t pos = 0;
	const struct ub_range_set *small = x->count < y->count ? x : y, *big = small == x ? y : x;
	while (ub_rs_next(small, pos, &r) == 0) {
		if (ub_rs_overlaps(big, r.start, r.len))
			return true;
		pos = r.start + r.len;
	}
	return false;
}

static bool set_inside(const struct ub_range_set *x, const struct ub_range_set *outer)
{
	struct ub_range r;
	uint64_t pos = 0;
	while (ub_rs_next(x, pos, &r) == 0) {
		if (!ub_rs_contains(outer, r.start, r.len))
			return false;
		pos = r.start + r.len;
	}
	return true;
}

int ub_alloc_verify(const struct ub_alloc *a)
{
	const char *why = NULL;
	const struct ub_bg *bg = NULL;
	for (int i = 0; i < a->nbgs && !why; i++) {
		bg = a->bgs[i];
		const struct ub_range_set *sets[] = { &bg->free, &bg->avail, &bg->reserved, &bg->super_set, &bg->open,
						      &bg->became_free, &bg->became_used };
		for (unsigned k = 0; k < sizeof(sets) / sizeof(sets[0]); k++)
			if (ub_rs_verify(sets[k]))
				why = "a range set is malformed";
		if (why)
			break;
		if (i > 0 && a->bgs[i - 1]->start + a->bgs[i - 1]->length > bg->start)
			why = "block groups overlap";
		else if (bg->used + bg->free.bytes != bg->length)
			why = "used + free != length";
		else if (!set_inside(&bg->avail, &bg->free))
			why = "avail outside free";
		else if (!set_inside(&bg->reserved, &bg->free))
			why = "reserved outside free";
		else if (sets_overlap(&bg->avail, &bg->reserved))
			why = "avail overlaps reserved";
		else if (sets_overlap(&bg->avail, &bg->super_set))
			why = "avail overlaps a superblock stripe";
		else if (sets_overlap(&bg->avail, &a->pinned))
			why = "avail overlaps pinned";
		else if (sets_overlap(&bg->became_free, &bg->became_used))
			why = "delta sets overlap";
		else if (ub_rs_bytes_in(&a->pinned, bg->start, bg->length) != bg->pinned)
			why = "pinned counter";
	}
	if (why) {
		ub_err(&a->log, "allocator invariant broken in block group %" PRIu64 ": %s", bg ? bg->start : 0, why);
		return -EUCLEAN;
	}
	return 0;
}
