/* SPDX-License-Identifier: MIT */
/*
 * RAID5/6: one full stripe at a time, by the thread of the first of its P, Q,
 * data 0, data 1... devices that is scrubbed (with every device scrubbed, P's:
 * the parity rotates, so the work spreads evenly and every strip is read
 * once). Every strip of the sector rows that hold live data is read; each tree
 * block and data sector is verified as stored; a bad one is rebuilt from the
 * rest of its rows (from P, from Q, with another data strip taken as bad too)
 * until a rebuild verifies; then P and Q are computed from the data of each
 * live row and compared with what is stored. A row whose live sectors are all
 * proven (verified, or rebuilt and verified) gets its bad parity recomputed;
 * a row with data nothing proves (no checksums) is reported, not changed.
 * Rows without live data are not looked at: nothing keeps their parity.
 *
 * A full stripe found wrong is read and judged again under the repair lock
 * before anything is written or reported, so that a writer's change between
 * the two looks is never taken for damage.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scrub/scrub_priv.h"

#define MAXROWS 16 /* 64 KiB strips of 4 KiB sectors */

struct fstripe {
	const struct ub_chunk *c;
	int n, nd, np, rows;
	uint64_t full, base;        /* full stripe number, logical of its data 0 */
	int rlo, rhi;               /* the rows read */
	int stripe_of[UB_RAID_MAX_STRIPES]; /* slot -> c->stripes index */
	bool missing[UB_RAID_MAX_STRIPES];  /* slot's device absent */
	bool lost[UB_RAID_MAX_STRIPES][MAXROWS]; /* row unreadable */
	int unit_at[UB_RAID_MAX_STRIPES][MAXROWS]; /* data slot, row -> unit index, -1 none */
	bool live[MAXROWS];
	uint8_t *strip[UB_RAID_MAX_STRIPES]; /* slot's 64 KiB as read (data repaired in memory) */
	uint8_t *fresh[2];          /* P and Q computed */
	bool pbad[2][MAXROWS];      /* parity p of the row differs (or was unreadable) */
	bool fix_parity[2][MAXROWS];
};

static uint64_t slot_phys(const struct fstripe *fs, int slot, int row, uint32_t ss)
{
	return fs->c->stripes[fs->stripe_of[slot]].physical + fs->full * UB_STRIPE_LEN + (uint64_t)row * ss;
}

/* Every slot's rows [rlo, rhi): a slot that fails the read is read row by row to find the bad ones. */
static void read_strips(struct sx_thread *t, struct fstripe *fs)
{
	const uint32_t ss = t->s->ss;

	for (int k = 0; k < fs->n; k++) {
		const struct ub_stripe *st = &fs->c->stripes[fs->stripe_of[k]];

		memset(fs->lost[k], 0, sizeof(fs->lost[k]));
		fs->missing[k] = !st->dev || !st->dev->dev;
		if (fs->missing[k]) {
			for (int r = fs->rlo; r < fs->rhi; r++)
				fs->lost[k][r] = true;
			continue;
		}
		if (!sx_dev_read(t, st->dev, fs->strip[k] + (size_t)fs->rlo * ss, (size_t)(fs->rhi - fs->rlo) * ss,
				 slot_phys(fs, k, fs->rlo, ss)))
			continue;
		for (int r = fs->rlo; r < fs->rhi; r++)
			if (sx_dev_read(t, st->dev, fs->strip[k] + (size_t)r * ss, ss, slot_phys(fs, k, r, ss)))
				fs->lost[k][r] = true;
	}
}

static int unit_rows(const struct sx_thread *t, const struct sx_unit *u)
{
	return (int)((u->len + t->s->ss - 1) / t->s->ss);
}

static bool rows_lost(const struct fstripe *fs, int slot, int r0, int nr)
{
	for (int r = r0; r < r0 + nr && r < MAXROWS; r++)
		if (fs->lost[slot][r])
			return true;
	return false;
}

/*
 * Rebuild unit u (slot i, rows [r0, r0+nr)) with the slots in `lost` taken
 * as lost: into t->tmp, verified. True when the rebuild verifies.
 */
static bool try_rebuild(struct sx_thread *t, struct fstripe *fs, const struct sx_unit *u, const bool *lost)
{
	const uint32_t ss = t->s->ss;
	const int nr = unit_rows(t, u), r0 = u->row;
	const size_t len = (size_t)nr * ss;
	uint8_t *ptr[UB_RAID_MAX_STRIPES];
	char why[160];
	int nlost = 0;

	for (int k = 0; k < fs->n; k++) {
		nlost += lost[k];
		/* a slot needed as a source must be whole in these rows */
		if (!lost[k] && rows_lost(fs, k, r0, nr))
			return false;
	}
	if (nlost > fs->np)
		return false;
	for (int k = 0; k < fs->n; k++) {
		ptr[k] = t->tmp + (size_t)k * len;
		memcpy(ptr[k], fs->strip[k] + (size_t)r0 * ss, len);
	}
	if (ub_raid_recover(fs->nd, fs->np, ptr, lost, len))
		return false;
	if (sx_verify(t, u, ptr[u->slot], why, sizeof(why)))
		return false;
	memmove(t->tmp, ptr[u->slot], len);
	return true;
}

/*
 * Find a rebuild of bad unit u that verifies; on success its bytes go into the
 * strip in memory. Taken as lost whatever else is tried: u's own slot, slots
 * that cannot be read there, and data slots with a bad unit of their own in
 * those rows. With room for one more (RAID6 and one bad slot): from P (Q
 * taken as lost), from Q, then with each other data strip taken as silently
 * bad too. Data without checksums (only a read error brings it here) takes the
 * first rebuild, as nothing can verify another.
 */
static bool rebuild_unit(struct sx_thread *t, struct fstripe *fs, struct sx_unit *u)
{
	const uint32_t ss = t->s->ss;
	const int nr = unit_rows(t, u), r0 = u->row, i = u->slot;
	bool forced[UB_RAID_MAX_STRIPES] = { false }, lost[UB_RAID_MAX_STRIPES];
	int nforced = 0, extra[UB_RAID_MAX_STRIPES + 2], nextra = 0;

	forced[i] = true;
	for (int k = 0; k < fs->n; k++) {
		if (k == i)
			continue;
		if (rows_lost(fs, k, r0, nr))
			forced[k] = true;
		for (int r = r0; k < fs->nd && r < r0 + nr; r++)
			if (fs->unit_at[k][r] >= 0 && t->units[fs->unit_at[k][r]].state == SX_BAD)
				forced[k] = true;
	}
	for (int k = 0; k < fs->n; k++)
		nforced += forced[k];
	if (nforced > fs->np)
		return false;
	if (sx_tmp(t, (size_t)fs->n * (size_t)nr * ss))
		return false;
	if (nforced == fs->np) {
		extra[nextra++] = -1;
	} else {
		/* RAID6, one slot forced: each other slot in turn as the second lost one */
		extra[nextra++] = fs->nd + 1;
		extra[nextra++] = fs->nd;
		for (int k = 0; k < fs->nd && u->kind != SX_NOCSUM; k++)
			if (!forced[k])
				extra[nextra++] = k;
	}
	for (int e = 0; e < nextra; e++) {
		memcpy(lost, forced, sizeof(lost));
		if (extra[e] >= 0)
			lost[extra[e]] = true;
		if (try_rebuild(t, fs, u, lost)) {
			memcpy(fs->strip[i] + (size_t)r0 * ss, t->tmp, (size_t)nr * ss);
			return true;
		}
		if (u->kind == SX_NOCSUM)
			break;
	}
	return false;
}

static void unit_problem(struct sx_thread *t, const struct fstripe *fs, const struct sx_unit *u,
			 struct ub_scrub_problem *p)
{
	const struct sx_extent *x = &t->ext[u->ext];
	const struct ub_stripe *st = &fs->c->stripes[fs->stripe_of[u->slot]];
	struct sx_dev *d = sx_dev_of(t->s, st->devid);

	memset(p, 0, sizeof(*p));
	p->metadata = u->kind == SX_META;
	p->devid = st->devid;
	p->dev_path = d ? d->path : st->dev && st->dev->dev ? ub_dev_path(st->dev->dev) : NULL;
	p->physical = slot_phys(fs, u->slot, u->row, t->s->ss);
	p->logical = u->logical;
	p->length = u->len;
	p->mirror = 1;
	p->tree = p->metadata ? x->tree : 0;
	p->level = p->metadata ? x->level : -1;
}

/* The device entry problems of a slot's device are counted on (its own, or the scrubbing thread's). */
static struct sx_dev *count_dev(struct sx_thread *t, const struct fstripe *fs, int slot)
{
	struct sx_dev *d = sx_dev_of(t->s, fs->c->stripes[fs->stripe_of[slot]].devid);

	return d ? d : t->d;
}

/*
 * Judge the full stripe (the units of t->units, already collected): read,
 * verify, rebuild in memory, compare parity. final: also write what is to be
 * repaired and report every problem. Returns 1 when something is wrong, 0
 * when all is well, <0 on errors.
 */
static int judge(struct sx_thread *t, struct fstripe *fs, bool final)
{
	struct ub_scrub *s = t->s;
	const uint32_t ss = s->ss;
	bool wrong = false, certain[MAXROWS], nocsum_only[MAXROWS];
	char why[240];
	int ret = 0;

	read_strips(t, fs);
	for (size_t ui = 0; ui < t->nunits; ui++) {
		struct sx_unit *u = &t->units[ui];
		int kind;

		if (u->crosses) {
			if (sx_tmp(t, u->len))
				return -ENOMEM;
			kind = ub_volume_read(s->vol, u->logical, u->len, 1, t->tmp) ? UB_SCRUB_READ_ERROR + 1
										  : sx_verify(t, u, t->tmp, why, sizeof(why));
		} else if (rows_lost(fs, u->slot, u->row, unit_rows(t, u))) {
			kind = fs->missing[u->slot] ? 0 : UB_SCRUB_READ_ERROR + 1;
		} else {
			kind = sx_verify(t, u, fs->strip[u->slot] + (size_t)u->row * ss, why, sizeof(why));
		}
		if (kind == UB_SCRUB_READ_ERROR + 1)
			snprintf(why, sizeof(why), "read failed");
		if (kind)
			snprintf(u->why, sizeof(u->why), "%.119s", why);
		u->state = kind ? SX_BAD : fs->missing[u->slot] ? SX_UNKNOWN : SX_GOOD;
		u->bad_kind = kind ? (uint8_t)(kind - 1) : 0;
		if (u->state == SX_GOOD && u->kind == SX_NOCSUM)
			u->state = SX_UNKNOWN;
		wrong |= kind != 0;
	}
	/* rebuild the bad ones; a unit rebuilt can make another's rebuild possible (RAID6), so go round twice */
	for (int pass = 0; pass < 2; pass++)
		for (size_t ui = 0; ui < t->nunits; ui++) {
			struct sx_unit *u = &t->units[ui];

			if (u->state != SX_BAD || u->crosses)
				continue;
			if (rebuild_unit(t, fs, u))
				u->state = SX_REPAIRED;
		}
	/* parity of the live rows whose every strip is there */
	for (int r = fs->rlo; r < fs->rhi; r++) {
		uint8_t *ptr[UB_RAID_MAX_STRIPES];
		bool whole = true;

		fs->pbad[0][r] = fs->pbad[1][r] = false;
		fs->fix_parity[0][r] = fs->fix_parity[1][r] = false;
		certain[r] = true;
		nocsum_only[r] = true;
		if (!fs->live[r])
			continue;
		for (int k = 0; k < fs->nd; k++) {
			int ui = fs->unit_at[k][r];
			const struct sx_unit *u = ui >= 0 ? &t->units[ui] : NULL;

			if (fs->lost[k][r] && !(u && u->state == SX_REPAIRED))
				whole = false;
			if (u && u->state != SX_GOOD && u->state != SX_REPAIRED) {
				certain[r] = false;
				if (!(u->state == SX_UNKNOWN && u->kind == SX_NOCSUM))
					nocsum_only[r] = false;
			}
		}
		if (!whole)
			continue;
		for (int k = 0; k < fs->nd; k++)
			ptr[k] = fs->strip[k] + (size_t)r * ss;
		for (int p = 0; p < fs->np; p++)
			ptr[fs->nd + p] = fs->fresh[p] + (size_t)r * ss;
		ret = ub_raid_gen_parity(fs->nd, fs->np, ptr, ss);
		if (ret)
			return ret;
		if (!final)
			SX_COUNT(t, parity_rows_checked, 1);
		for (int p = 0; p < fs->np; p++) {
			const int slot = fs->nd + p;

			if (fs->missing[slot])
				continue;
			if (fs->lost[slot][r] || memcmp(ptr[slot], fs->strip[slot] + (size_t)r * ss, ss)) {
				fs->pbad[p][r] = true;
				fs->fix_parity[p][r] = certain[r];
				wrong = true;
			}
		}
	}
	if (!final || !wrong)
		return wrong;

	/* ---- final: write and report ---- */
	for (size_t ui = 0; ui < t->nunits; ui++) {
		struct sx_unit *u = &t->units[ui];
		struct ub_scrub_problem p;

		if (u->state != SX_BAD && u->state != SX_REPAIRED)
			continue;
		unit_problem(t, fs, u, &p);
		p.kind = (enum ub_scrub_kind)u->bad_kind;
		/* what was wrong, said again from the bytes as stored */
		snprintf(why, sizeof(why), "%s", u->why);
		if (u->state != SX_REPAIRED) {
			p.outcome = UB_SCRUB_UNREPAIRABLE;
			if (u->crosses)
				snprintf(why + strlen(why), sizeof(why) - strlen(why), "; crosses a stripe boundary");
			else
				snprintf(why + strlen(why), sizeof(why) - strlen(why),
					 "; no rebuild from the rest of its rows verifies");
			u->state = SX_UNREPAIRABLE;
		} else if (s->opts.readonly) {
			p.outcome = UB_SCRUB_NOT_REPAIRED;
		} else if (!sx_extent_unchanged(t, &t->ext[u->ext])) {
			p.outcome = UB_SCRUB_SKIPPED;
		} else {
			ret = sx_rewrite(t, fs->c, fs->stripe_of[u->slot], p.physical, u->len,
					 fs->strip[u->slot] + (size_t)u->row * ss);
			p.outcome = ret ? UB_SCRUB_UNREPAIRABLE : UB_SCRUB_REPAIRED;
			if (ret)
				snprintf(why + strlen(why), sizeof(why) - strlen(why), "; the rewrite failed: %s",
					 strerror(-ret));
		}
		p.detail = why;
		sx_report(t, count_dev(t, fs, u->slot), &p, u);
		if (ret)
			return ret;
	}
	for (int pi = 0; pi < fs->np; pi++) {
		const int slot = fs->nd + pi;

		for (int r = fs->rlo; r < fs->rhi;) {
			struct ub_scrub_problem p;
			const struct ub_stripe *st = &fs->c->stripes[fs->stripe_of[slot]];
			struct sx_dev *d;
			int e = r;

			if (!fs->pbad[pi][r] || (!fs->fix_parity[pi][r] && !nocsum_only[r])) {
				r++;
				continue;
			}
			/* a run of rows with the same verdict */
			while (e + 1 < fs->rhi && fs->pbad[pi][e + 1] && fs->fix_parity[pi][e + 1] == fs->fix_parity[pi][r] &&
			       (fs->fix_parity[pi][e + 1] || nocsum_only[e + 1]))
				e++;
			d = count_dev(t, fs, slot);
			memset(&p, 0, sizeof(p));
			p.kind = UB_SCRUB_PARITY;
			p.parity = pi;
			p.devid = st->devid;
			p.dev_path = st->dev && st->dev->dev ? ub_dev_path(st->dev->dev) : NULL;
			p.physical = slot_phys(fs, slot, r, ss);
			p.logical = fs->base + (uint64_t)r * ss;
			p.length = (uint64_t)(e - r + 1) * ss;
			p.level = -1;
			snprintf(why, sizeof(why), "%s of full stripe %llu (data at logical %llu, %d strips), sector rows %d-%d, %s",
				 pi ? "Q" : "P", (unsigned long long)fs->full, (unsigned long long)fs->base, fs->nd, r, e,
				 fs->lost[slot][r] ? "cannot be read" : "does not match the data");
			if (!fs->fix_parity[pi][r]) {
				p.outcome = UB_SCRUB_UNREPAIRABLE;
				snprintf(why + strlen(why), sizeof(why) - strlen(why),
					 "; the row holds data without checksums, so which is wrong is unknown");
			} else if (s->opts.readonly) {
				p.outcome = UB_SCRUB_NOT_REPAIRED;
			} else {
				ret = sx_rewrite(t, fs->c, fs->stripe_of[slot], p.physical, p.length,
						 fs->fresh[pi] + (size_t)r * ss);
				p.outcome = ret ? UB_SCRUB_UNREPAIRABLE : UB_SCRUB_REPAIRED;
			}
			p.detail = why;
			sx_report(t, d, &p, NULL);
			if (ret)
				return ret;
			r = e + 1;
		}
	}
	return 1;
}

static int scrub_full(struct sx_thread *t, struct fstripe *fs)
{
	struct ub_scrub *s = t->s;
	const uint32_t ss = s->ss;
	const uint64_t span = (uint64_t)fs->nd * UB_STRIPE_LEN;
	bool any_data = false;
	int ret;

	ret = sx_collect_extents(t, fs->base, fs->base + span);
	if (ret || !t->next)
		return ret;
	for (size_t i = 0; i < t->next; i++)
		any_data |= !t->ext[i].meta;
	ret = any_data ? sx_collect_csums(t, fs->base, fs->base + span) : 0;
	if (ret)
		return ret;
	if (!any_data)
		t->csum_n = 0;
	t->nunits = 0;
	ret = sx_units_of(t, fs->base, fs->base + span, 0);
	if (ret || !t->nunits)
		return ret;
	memset(fs->unit_at, 0xff, sizeof(fs->unit_at));
	memset(fs->live, 0, sizeof(fs->live));
	fs->rlo = fs->rows;
	fs->rhi = 0;
	for (size_t ui = 0; ui < t->nunits; ui++) {
		struct sx_unit *u = &t->units[ui];
		uint64_t in = u->off % UB_STRIPE_LEN;
		int nr;

		u->slot = (int)(u->off / UB_STRIPE_LEN);
		u->row = (int)(in / ss);
		if (in + u->len > UB_STRIPE_LEN)
			u->crosses = true;
		nr = u->crosses ? fs->rows - u->row : unit_rows(t, u);
		for (int r = u->row; r < u->row + nr; r++) {
			fs->unit_at[u->slot][r] = (int)ui;
			fs->live[r] = true;
		}
		if (u->row < fs->rlo)
			fs->rlo = u->row;
		if (u->row + nr > fs->rhi)
			fs->rhi = u->row + nr;
		/* what lies on a missing device is not verified: not counted */
		if (!fs->c->stripes[fs->stripe_of[u->slot]].dev || !fs->c->stripes[fs->stripe_of[u->slot]].dev->dev)
			continue;
		if (u->kind == SX_META) {
			SX_COUNT(t, tree_extents_scrubbed, 1);
			SX_COUNT(t, tree_bytes_scrubbed, u->len);
		} else {
			SX_COUNT(t, data_bytes_scrubbed, u->len);
			if (u->kind == SX_NOCSUM)
				SX_COUNT(t, no_csum, 1);
		}
	}
	/* a split tree block's second half lies in the next strip: its rows are read there too */
	for (size_t ui = 0; ui < t->nunits; ui++) {
		const struct sx_unit *u = &t->units[ui];

		if (u->crosses) {
			fs->rlo = 0;
			fs->rhi = fs->rows;
			for (int r = 0; r < fs->rows; r++)
				fs->live[r] = true;
		}
	}
	SX_COUNT(t, data_extents_scrubbed, t->next);
	ret = judge(t, fs, false);
	if (ret <= 0)
		goto out;
	ret = sx_repair_lock(s);
	if (ret)
		goto out;
	ret = judge(t, fs, true);
	sx_repair_unlock(s);
	ret = ret < 0 ? ret : 0;
out:
	return ret;
}

/* The slot of full stripe `full` whose device scrubs it: P's, else Q's, else the first data strip's scrubbed. */
static int owner_slot(struct ub_scrub *s, const struct ub_chunk *c, uint64_t full, int nd, int np)
{
	for (int i = 0; i < nd + np; i++) {
		int slot = i < np ? nd + i : i - np;
		const struct ub_stripe *st = &c->stripes[ub_volume_parity_slot(c, full, slot)];

		if (st->dev && st->dev->dev && sx_dev_of(s, st->devid))
			return slot;
	}
	return -1;
}

int sx_scrub_parity(struct sx_thread *t, const struct ub_chunk *c, int stripe)
{
	struct ub_scrub *s = t->s;
	const int n = c->num_stripes, np = c->profile->nparity, nd = n - np;
	const uint64_t size = ub_chunk_stripe_size(c), nfull = size / UB_STRIPE_LEN;
	const uint64_t phys0 = c->stripes[stripe].physical;
	struct fstripe *fs;
	uint64_t f = 0;
	int ret = 0;

	if (n > UB_RAID_MAX_STRIPES || nd < 1 || UB_STRIPE_LEN / s->ss > MAXROWS || c->stripe_len != UB_STRIPE_LEN) {
		ub_err(&s->log, "scrub: %s chunk at logical %llu: %d stripes of %llu bytes with %u byte sectors: not scrubbed",
		       c->profile->name, (unsigned long long)c->logical, n, (unsigned long long)c->stripe_len, s->ss);
		return 0;
	}
	fs = calloc(1, sizeof(*fs));
	if (!fs)
		return -ENOMEM;
	ret = sx_buf(t, (size_t)(n + np) * UB_STRIPE_LEN);
	if (ret)
		goto out;
	fs->c = c;
	fs->n = n;
	fs->nd = nd;
	fs->np = np;
	fs->rows = (int)(UB_STRIPE_LEN / s->ss);
	for (int k = 0; k < n; k++)
		fs->strip[k] = t->buf + (size_t)k * UB_STRIPE_LEN;
	for (int p = 0; p < np; p++)
		fs->fresh[p] = t->buf + (size_t)(n + p) * UB_STRIPE_LEN;
	if (t->d->start > phys0)
		f = (t->d->start - phys0) / UB_STRIPE_LEN;
	for (; f < nfull && !ret; f++) {
		int slot;

		if (sx_cancelled(s)) {
			ret = -ECANCELED;
			break;
		}
		slot = owner_slot(s, c, f, nd, np);
		if (slot >= 0 && ub_volume_parity_slot(c, f, slot) == stripe) {
			fs->full = f;
			fs->base = c->logical + f * (uint64_t)nd * UB_STRIPE_LEN;
			for (int k = 0; k < n; k++)
				fs->stripe_of[k] = ub_volume_parity_slot(c, f, k);
			ret = scrub_full(t, fs);
		}
		sx_progress_at(t, phys0 + (f + 1) * UB_STRIPE_LEN);
		sx_throttle(t);
	}
out:
	free(fs);
	return ret;
}
