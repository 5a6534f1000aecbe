/* SPDX-License-Identifier: MIT */
/*
 * Reads and writes of a range of one chunk gathered per device. A striped or parity
 * layout changes device every 64 KiB unit; read unit by unit, one device after
 * the other, the devices take turns instead of reading together, and each
 * device file sees short reads with holes that its readahead does not follow.
 * Here the units that follow each other on a device become one gathered read
 * straight into the caller's buffer (nothing is copied twice), every device is
 * told first what it will be asked for so that all of them read at once, and a
 * large read, taken as part of a stream, has the devices start on what comes
 * after it while the caller checks and hands on this part. Writes are
 * gathered the same way, for the same reason: each device gets one write per
 * run of its units instead of one per 64 KiB.
 */
#include <errno.h>
#include <stdlib.h>
#include "volume_internal.h"

/* Buffers per gathered read: well under IOV_MAX. */
#define SPAN_IOV 256
/* Units a read may cover with its plan on the stack. */
#define SMALL_UNITS 8

/* One gathered read of one device: iov[first, first + n) back to back from `phys`. */
struct span {
	int stripe;
	uint64_t phys, end;
	int first, n;
};

struct span_plan {
	struct iovec *iov; /* one per unit (or part of one) */
	struct span *spans;
	int niov, nspans;
};

/* The units of stripe `st` in [off, off + len) of the chunk, in order, as spans. */
static int plan_stripe(const struct ub_chunk *c, int st, uint64_t off, uint64_t len, int mirror, uint8_t *buf,
		       struct span_plan *p)
{
	const struct ub_layout *l = c->profile->layout;
	struct span *cur = NULL;

	while (len > 0) {
		struct ub_map m;
		uint64_t n;
		int ret = l->map(c, off, mirror, &m);

		if (ret)
			return ret;
		n = len < m.contig ? len : m.contig;
		if (m.stripe == st) {
			if (!cur || m.physical != cur->end || cur->n == SPAN_IOV) {
				cur = &p->spans[p->nspans++];
				*cur = (struct span){ .stripe = st, .phys = m.physical, .end = m.physical, .first = p->niov };
			}
			p->iov[p->niov++] = (struct iovec){ .iov_base = buf, .iov_len = n };
			cur->n++;
			cur->end = m.physical + n;
		}
		buf += n;
		off += n;
		len -= n;
	}
	return 0;
}

static bool stripe_present(const struct ub_chunk *c, int st)
{
	return c->stripes[st].dev && c->stripes[st].dev->dev;
}

/*
 * Every device's spans of [off, off + len); -ENXIO when one is on a missing
 * device, unless `skip_missing` (a write: the caller made sure every unit has a
 * copy on a present device), which leaves missing devices out.
 */
static int plan_spans(const struct ub_chunk *c, uint64_t off, uint64_t len, int mirror, uint8_t *buf,
		      bool skip_missing, struct span_plan *p)
{
	p->niov = p->nspans = 0;
	for (int st = 0; st < c->num_stripes; st++) {
		int ret = skip_missing && !stripe_present(c, st) ? 0 : plan_stripe(c, st, off, len, mirror, buf, p);

		if (ret)
			return ret;
	}
	for (int i = 0; i < p->nspans; i++) {
		if (!stripe_present(c, p->spans[i].stripe))
			return -ENXIO;
	}
	return 0;
}

static int plan(const struct ub_chunk *c, uint64_t off, uint64_t len, int mirror, uint8_t *buf, struct span_plan *p)
{
	return plan_spans(c, off, len, mirror, buf, false, p);
}

/* Several devices: ask all of them for their spans at once. */
static void advise(const struct ub_chunk *c, const struct span_plan *p)
{
	for (int i = 0; i < p->nspans && p->nspans > 1; i++)
		ub_dev_willneed(c->stripes[p->spans[i].stripe].dev->dev, p->spans[i].phys,
				p->spans[i].end - p->spans[i].phys);
}

/* The plan's arrays for `len` bytes: on the stack (the caller's) for short ranges, else allocated. */
static int plan_alloc(const struct ub_chunk *c, uint64_t len, struct span_plan *p)
{
	/* each unit gives at most one buffer and one span; a mirrored copy is one unit */
	const uint64_t units = c->stripe_len ? len / c->stripe_len + 2 : 0;

	if (c->stripe_len == 0 || units > SIZE_MAX / sizeof(struct iovec))
		return -EUCLEAN;
	if (units <= SMALL_UNITS)
		return 0;
	p->iov = malloc((size_t)units * sizeof(*p->iov));
	p->spans = malloc((size_t)units * sizeof(*p->spans));
	return p->iov && p->spans ? 0 : -ENOMEM;
}

static void plan_free(struct span_plan *p, const struct iovec *iov_small)
{
	if (p->iov != iov_small) {
		free(p->iov);
		free(p->spans);
	}
}

int ub_span_read(const struct ub_chunk *c, uint64_t logical, uint64_t len, int mirror, uint8_t *buf)
{
	const uint64_t off = logical - c->logical;
	/* tree blocks and other short reads, most of the calls, need no allocation */
	struct iovec iov_small[SMALL_UNITS];
	struct span spans_small[SMALL_UNITS];
	struct span_plan p = { .iov = iov_small, .spans = spans_small };
	int ret = plan_alloc(c, len, &p);

	if (ret)
		goto out;
	ret = plan(c, off, len, mirror, buf, &p);
	if (ret)
		goto out; /* before any I/O: the caller rebuilds instead */
	advise(c, &p);
	for (int i = 0; i < p.nspans && ret == 0; i++) {
		const struct span *sp = &p.spans[i];

		ret = ub_vdev_readv(c->stripes[sp->stripe].dev, p.iov + sp->first, sp->n, sp->phys);
	}
	/* the same plan arrays fit each part ahead: none is longer than this one */
	for (uint64_t k = 1; ret == 0 && p.nspans > 1 && len >= UB_STREAM_MIN && k <= UB_STREAM_AHEAD; k++) {
		uint64_t at = off + k * len, next;

		if (at >= c->length)
			break;
		next = c->length - at < len ? c->length - at : len;
		if (plan(c, at, next, mirror, buf, &p) == 0)
			advise(c, &p);
	}
out:
	plan_free(&p, iov_small);
	return ret;
}

struct span_write {
	struct ub_volume *vol;
	const struct ub_chunk *c;
	const struct span_plan *p;
};

static int span_write(void *arg, int i)
{
	const struct span_write *w = arg;
	const struct span *sp = &w->p->spans[i];

	return ub_vol_dev_writev(w->vol, w->c, sp->stripe, w->p->iov + sp->first, sp->n, sp->phys);
}

int ub_span_write(struct ub_volume *vol, const struct ub_chunk *c, uint64_t logical, uint64_t len, int copy,
		  const uint8_t *buf)
{
	struct iovec iov_small[SMALL_UNITS];
	struct span spans_small[SMALL_UNITS];
	struct span_plan p = { .iov = iov_small, .spans = spans_small };
	int ret = plan_alloc(c, len, &p);

	/* the plan only points into buf: the writes read from it */
	if (!ret)
		ret = plan_spans(c, logical - c->logical, len, copy, (uint8_t *)buf, true, &p);
	if (!ret) {
		struct span_write w = { .vol = vol, .c = c, .p = &p };

		ret = ub_vol_par_run(p.nspans, ub_vol_par_worth(c, len), span_write, &w);
	}
	plan_free(&p, iov_small);
	return ret;
}
