/* SPDX-License-Identifier: MIT */
/*
 * The profiles that keep whole copies (single, DUP, RAID1, RAID1C3/C4) or
 * spread them in 64 KiB units (RAID0, RAID10): one device extent of this
 * device, window by window. What the pinned commit has in the window is read
 * from this device in runs and each tree block and data sector verified; a
 * bad one is then looked at again under the repair lock with the other
 * copies (which the threads of their own devices verify too), rewritten from
 * the first good one, or said to be unrepairable. Data without checksums is
 * compared with its other copies once, by the thread of the first copy
 * scrubbed: copies that differ are reported, and nothing is rewritten, since
 * nothing tells which one is right.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "scrub/scrub_priv.h"

/* The device offset window of a mirrored stripe: what one extent lookup and one run of reads cover. */
#define WIN (4ULL << 20)
/* Units closer than this are read in one run (the gap is read and ignored). */
#define GAP (64ULL << 10)

struct piece {
	const struct ub_chunk *c;
	int stripe, mirror, width;
	uint64_t logical, len, phys; /* the piece: logical range and where it starts on this device */
};

static void fill_problem(struct sx_thread *t, const struct piece *pc, const struct sx_unit *u,
			 struct ub_scrub_problem *p)
{
	const struct sx_extent *x = &t->ext[u->ext];

	memset(p, 0, sizeof(*p));
	p->metadata = u->kind == SX_META;
	p->devid = t->d->devid;
	p->dev_path = t->d->path;
	p->physical = pc->phys + (u->logical - pc->logical);
	p->logical = u->logical;
	p->length = u->len;
	p->mirror = pc->mirror;
	p->tree = p->metadata ? x->tree : 0;
	p->level = p->metadata ? x->level : -1;
}

/* Is some other copy of this group scrubbed by a thread before this one (so it compares nodatasum copies)? */
static bool first_scrubbed_copy(struct ub_scrub *s, const struct piece *pc)
{
	const int g0 = pc->stripe - (pc->mirror - 1);

	for (int k = 0; k < pc->width; k++) {
		const struct ub_stripe *st = &pc->c->stripes[g0 + k];

		if (st->dev && st->dev->dev && sx_dev_of(s, st->devid))
			return g0 + k == pc->stripe;
	}
	return false;
}

/* Read this copy of unit u again, straight from the device (or through the volume for a split one). */
static int reread(struct sx_thread *t, const struct piece *pc, const struct sx_unit *u, uint8_t *out)
{
	if (u->crosses)
		return ub_volume_read(t->s->vol, u->logical, u->len, pc->mirror, out);
	return sx_dev_read(t, t->d->vd, out, u->len, pc->phys + (u->logical - pc->logical));
}

/*
 * A unit found bad: under the repair lock, confirm it, find a good copy,
 * rewrite this one from it. The problem is reported once the lock is gone.
 */
static int repair_unit(struct sx_thread *t, const struct piece *pc, struct sx_unit *u)
{
	struct ub_scrub *s = t->s;
	struct ub_scrub_problem p;
	char why[200], src_why[200];
	uint8_t *mine, *good;
	int ret, kind, found = 0;

	ret = sx_tmp(t, 2 * (size_t)u->len);
	if (ret)
		return ret;
	mine = t->tmp;
	good = t->tmp + u->len;
	ret = sx_repair_lock(s);
	if (ret)
		return ret;
	ret = reread(t, pc, u, mine);
	kind = ret ? UB_SCRUB_READ_ERROR + 1 : sx_verify(t, u, mine, why, sizeof(why));
	if (ret)
		snprintf(why, sizeof(why), "read failed: %s", strerror(-ret));
	ret = 0;
	if (!kind) {
		/* good now: a passing failure of the device, nothing to say */
		sx_repair_unlock(s);
		u->state = SX_GOOD;
		return 0;
	}
	for (int m = 1; m <= pc->width && !found; m++) {
		if (m == pc->mirror)
			continue;
		if (ub_volume_read(s->vol, u->logical, u->len, m, good))
			continue;
		if (!sx_verify(t, u, good, src_why, sizeof(src_why)))
			found = m;
	}
	fill_problem(t, pc, u, &p);
	p.kind = (enum ub_scrub_kind)(kind - 1);
	p.detail = why;
	if (!found) {
		p.outcome = UB_SCRUB_UNREPAIRABLE;
	} else if (s->opts.readonly) {
		p.outcome = UB_SCRUB_NOT_REPAIRED;
	} else if (u->crosses) {
		/* two devices' pieces: written by neither thread alone */
		p.outcome = UB_SCRUB_UNREPAIRABLE;
		snprintf(why + strlen(why), sizeof(why) - strlen(why), "; crosses a stripe boundary, not rewritten");
	} else if (!sx_extent_unchanged(t, &t->ext[u->ext])) {
		p.outcome = UB_SCRUB_SKIPPED;
	} else {
		ret = sx_rewrite(t, pc->c, pc->stripe, p.physical, u->len, good);
		p.outcome = ret ? UB_SCRUB_UNREPAIRABLE : UB_SCRUB_REPAIRED;
		if (ret)
			snprintf(why + strlen(why), sizeof(why) - strlen(why), "; the rewrite failed: %s", strerror(-ret));
	}
	sx_repair_unlock(s);
	u->state = p.outcome == UB_SCRUB_REPAIRED ? SX_REPAIRED : SX_UNREPAIRABLE;
	sx_report(t, t->d, &p, u);
	return ret;
}

/*
 * Data without checksums: this copy against each other one, sector by
 * sector, in runs. Copies that differ are checked again under the repair lock
 * (a writer changes NOCOW data in place, under the writer lock) and reported.
 */
static int compare_nocsum(struct sx_thread *t, const struct piece *pc, size_t first, size_t end)
{
	struct ub_scrub *s = t->s;
	const struct sx_unit *u0 = &t->units[first], *ul = &t->units[end - 1];
	const uint64_t len = ul->logical + ul->len - u0->logical;
	int ret;

	ret = sx_tmp(t, 2 * (size_t)len);
	if (ret)
		return ret;
	for (int m = 1; m <= pc->width; m++) {
		bool differ = false;

		if (m == pc->mirror)
			continue;
		if (ub_volume_read(s->vol, u0->logical, len, m, t->tmp))
			continue; /* its own thread says what is wrong with it */
		for (size_t i = first; i < end && !differ; i++)
			differ = memcmp(t->buf + t->units[i].off, t->tmp + (t->units[i].logical - u0->logical), s->ss) != 0;
		if (!differ)
			continue;
		ret = sx_repair_lock(s);
		if (ret)
			return ret;
		/* both again, as they are now */
		if (sx_dev_read(t, t->d->vd, t->tmp + len, len, pc->phys + (u0->logical - pc->logical)) ||
		    ub_volume_read(s->vol, u0->logical, len, m, t->tmp)) {
			sx_repair_unlock(s);
			continue;
		}
		sx_repair_unlock(s);
		for (size_t i = first; i < end; i++) {
			struct sx_unit *u = &t->units[i];
			const uint64_t at = u->logical - u0->logical;
			struct ub_scrub_problem p;
			char why[160];

			if (!memcmp(t->tmp + len + at, t->tmp + at, s->ss))
				continue;
			fill_problem(t, pc, u, &p);
			p.kind = UB_SCRUB_NOCSUM_MISMATCH;
			p.outcome = UB_SCRUB_UNREPAIRABLE;
			snprintf(why, sizeof(why), "data without checksums: copy %d and copy %d differ", pc->mirror, m);
			p.detail = why;
			u->state = SX_UNKNOWN;
			sx_report(t, t->d, &p, u);
		}
	}
	return 0;
}

static int scrub_piece(struct sx_thread *t, const struct piece *pc)
{
	struct ub_scrub *s = t->s;
	uint64_t read_end = 0, data_ext = 0;
	bool any_data = false, compare;
	int prev_ext = -1, ret;

	ret = sx_collect_extents(t, pc->logical, pc->logical + pc->len);
	if (ret)
		return ret;
	if (!t->next)
		return 0;
	for (size_t i = 0; i < t->next; i++)
		any_data |= !t->ext[i].meta;
	ret = any_data ? sx_collect_csums(t, pc->logical, pc->logical + pc->len) : 0;
	if (!ret) {
		t->csum_n = any_data ? t->csum_n : 0;
		t->nunits = 0;
		ret = sx_units_of(t, pc->logical, pc->logical + pc->len, 0);
	}
	if (ret)
		return ret;
	/* a mirrored stripe holds a block that crosses the window whole: read on to its end */
	for (size_t i = 0; i < t->nunits; i++) {
		struct sx_unit *u = &t->units[i];

		if (u->crosses && pc->width == pc->c->num_stripes &&
		    u->logical + u->len <= pc->c->logical + pc->c->length)
			u->crosses = false;
		if (!u->crosses && u->off + u->len > read_end)
			read_end = u->off + u->len;
	}
	ret = sx_buf(t, (size_t)read_end);
	if (ret)
		return ret;
	/* runs of units, gaps under GAP read through */
	for (size_t i = 0; i < t->nunits;) {
		size_t j = i + 1, a, b;

		while (i < t->nunits && t->units[i].crosses)
			i++;
		if (i >= t->nunits)
			break;
		a = t->units[i].off;
		b = a + t->units[i].len;
		for (j = i + 1; j < t->nunits; j++) {
			if (t->units[j].crosses)
				continue;
			if (t->units[j].off > b + GAP)
				break;
			if (t->units[j].off + t->units[j].len > b)
				b = t->units[j].off + t->units[j].len;
		}
		if (sx_dev_read(t, t->d->vd, t->buf + a, b - a, pc->phys + a)) {
			/* which of them: each on its own */
			for (size_t k = i; k < j; k++) {
				struct sx_unit *u = &t->units[k];

				if (!u->crosses && sx_dev_read(t, t->d->vd, t->buf + u->off, u->len, pc->phys + u->off)) {
					u->state = SX_BAD;
					u->bad_kind = UB_SCRUB_READ_ERROR;
				}
			}
		}
		i = j;
	}
	for (size_t i = 0; i < t->nunits; i++) {
		struct sx_unit *u = &t->units[i];
		char why[200];
		int kind;

		if (u->kind == SX_META) {
			SX_COUNT(t, tree_extents_scrubbed, 1);
			SX_COUNT(t, tree_bytes_scrubbed, u->len);
		} else {
			if (u->ext != prev_ext)
				data_ext++;
			prev_ext = u->ext;
			SX_COUNT(t, data_bytes_scrubbed, u->len);
			if (u->kind == SX_NOCSUM)
				SX_COUNT(t, no_csum, 1);
		}
		if (u->state == SX_BAD)
			continue;
		if (u->crosses) {
			ret = sx_tmp(t, u->len);
			if (ret)
				return ret;
			ret = reread(t, pc, u, t->tmp);
			kind = ret ? UB_SCRUB_READ_ERROR + 1 : sx_verify(t, u, t->tmp, why, sizeof(why));
			ret = 0;
		} else {
			kind = sx_verify(t, u, t->buf + u->off, why, sizeof(why));
		}
		u->state = kind ? SX_BAD : SX_GOOD;
		u->bad_kind = kind ? (uint8_t)(kind - 1) : 0;
	}
	SX_COUNT(t, data_extents_scrubbed, data_ext);
	for (size_t i = 0; i < t->nunits && !ret; i++)
		if (t->units[i].state == SX_BAD)
			ret = repair_unit(t, pc, &t->units[i]);
	if (ret)
		return ret;
	compare = pc->width > 1 && first_scrubbed_copy(s, pc);
	for (size_t i = 0; compare && i < t->nunits && !ret;) {
		size_t j = i;

		if (t->units[i].kind != SX_NOCSUM || t->units[i].crosses || t->units[i].state != SX_GOOD) {
			i++;
			continue;
		}
		/* a run of this extent's sectors that follow each other */
		while (j + 1 < t->nunits && t->units[j + 1].kind == SX_NOCSUM && !t->units[j + 1].crosses &&
		       t->units[j + 1].state == SX_GOOD && t->units[j + 1].ext == t->units[i].ext &&
		       t->units[j + 1].logical == t->units[j].logical + s->ss && j + 1 - i < 256)
			j++;
		ret = compare_nocsum(t, pc, i, j + 1);
		i = j + 1;
	}
	return ret;
}

int sx_scrub_copies(struct sx_thread *t, const struct ub_chunk *c, int stripe)
{
	struct ub_scrub *s = t->s;
	const int width = c->profile->ncopies;
	const uint64_t groups = (uint64_t)(c->num_stripes / width), size = ub_chunk_stripe_size(c);
	const uint64_t phys0 = c->stripes[stripe].physical;
	struct piece pc = { .c = c, .stripe = stripe, .mirror = stripe % width + 1, .width = width };
	uint64_t off = 0;
	int ret = 0;

	if (!groups || !size)
		return 0;
	if (t->d->start > phys0)
		off = (t->d->start - phys0) / UB_STRIPE_LEN * UB_STRIPE_LEN;
	for (; off < size && !ret; off += groups == 1 ? WIN : UB_STRIPE_LEN) {
		if (sx_cancelled(s))
			return -ECANCELED;
		if (groups == 1) {
			pc.logical = c->logical + off;
			pc.len = size - off < WIN ? size - off : WIN;
		} else {
			/* this stripe's 64 KiB unit of row `off / 64 KiB` */
			pc.logical = c->logical + ((off / UB_STRIPE_LEN) * groups + (uint64_t)(stripe / width)) * UB_STRIPE_LEN;
			pc.len = UB_STRIPE_LEN;
		}
		pc.phys = phys0 + off;
		ret = scrub_piece(t, &pc);
		sx_progress_at(t, pc.phys + pc.len);
		sx_throttle(t);
	}
	return ret;
}
