/* SPDX-License-Identifier: MIT */
/*
 * The parity layout (RAID5, RAID6): data strips and P (and Q) per full
 * stripe, the parity rotating one device per full stripe. Reads are plain
 * reads of a data strip or rebuilds of it from the rest of its full stripe;
 * mirror numbers follow the seed patch: 1 is the data as stored, 2 is rebuilt
 * from P, 3 is rebuilt from Q (assuming P bad too), and for RAID6, 4.. assume
 * one more data strip bad and rebuild from P and Q together, so that two bad
 * data strips are found by trying copies until the checksum matches. Writes
 * are read-modify-writes of every full stripe they touch, the exact inverse:
 * the same rotation, the same algebra (raid_math.c).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "volume_internal.h"

/* Physical stripe holding slot `i` (data 0..n-1, P, Q) of full stripe `full`. */
static int slot_stripe(const struct ub_chunk *c, uint64_t full, int i)
{
	return (int)((full + (uint64_t)i) % c->num_stripes);
}

static int parity_map(const struct ub_chunk *c, uint64_t off, int mirror, struct ub_map *m)
{
	const uint64_t ndata = (uint64_t)c->num_stripes - (uint64_t)c->profile->nparity;
	uint64_t unit = off / c->stripe_len, in = off % c->stripe_len;

	if (mirror != 1)
		return -EOPNOTSUPP; /* rebuilds are not a place on disk */
	m->full_stripe = unit / ndata;
	m->data_index = (int)(unit % ndata);
	m->stripe = slot_stripe(c, m->full_stripe, m->data_index);
	m->physical = c->stripes[m->stripe].physical + m->full_stripe * c->stripe_len + in;
	m->contig = c->stripe_len - in;
	return 0;
}

static int parity_num_copies(const struct ub_chunk *c)
{
	/* RAID6: plain, from P, from Q, then each other data stripe assumed bad too */
	return c->profile->nparity == 1 ? 2 : c->num_stripes;
}

static bool parity_stripes_valid(const struct ub_profile *p, unsigned num, unsigned sub)
{
	return num >= (unsigned)p->devs_min && num > (unsigned)p->nparity;
}

static bool parity_readable(const struct ub_chunk *c)
{
	int missing = 0;

	for (int i = 0; i < c->num_stripes; i++)
		missing += !c->stripes[i].dev;
	return missing <= c->profile->nparity;
}

/* ---- reading ---- */

/*
 * Rebuild `len` bytes of data stripe `target` at stripe offset `soff` of full
 * stripe `full`, treating the stripes in `bad` (logical indices) as lost and
 * adding any that cannot be read.
 */
static int rebuild(const struct ub_chunk *c, uint64_t full, uint64_t soff, int target, bool *bad, uint64_t len,
		   uint8_t *out)
{
	const int total = c->num_stripes, n = total - c->profile->nparity;
	uint8_t *bufs, *stripes[UB_RAID_MAX_STRIPES];
	int ret = 0, used = 0;

	bufs = malloc((size_t)total * len);
	if (!bufs)
		return -ENOMEM;
	bad[target] = true;
	/* read just enough survivors: n of them */
	for (int i = 0; i < total; i++) {
		const struct ub_stripe *s = &c->stripes[slot_stripe(c, full, i)];
		stripes[i] = bufs + (size_t)i * len;
		if (bad[i] || used >= n) {
			bad[i] = true;
			continue;
		}
		if (!s->dev || ub_vdev_read(s->dev, stripes[i], len, s->physical + full * c->stripe_len + soff))
			bad[i] = true;
		else
			used++;
	}
	if (used < n) {
		ret = -EIO;
		goto out;
	}
	ret = ub_raid_recover(n, c->profile->nparity, stripes, bad, len);
	if (ret == 0)
		memcpy(out, stripes[target], len);
out:
	free(bufs);
	return ret;
}

/* Read one segment (inside one stripe unit, mapped at `m`) as copy `mirror`. */
static int read_segment(const struct ub_chunk *c, const struct ub_map *m, uint64_t len, int mirror, uint8_t *buf)
{
	const int n = c->num_stripes - c->profile->nparity;
	bool bad[UB_RAID_MAX_STRIPES] = { false };
	uint64_t soff = m->physical - c->stripes[m->stripe].physical - m->full_stripe * c->stripe_len;

	if (mirror == 1) {
		const struct ub_stripe *s = &c->stripes[m->stripe];
		return s->dev ? ub_vdev_read(s->dev, buf, len, m->physical) : -ENXIO;
	}
	if (mirror == 3)
		bad[n] = true; /* rebuild from Q: P assumed bad */
	if (mirror >= 4) {
		/* the (mirror-3)th other data stripe assumed bad as well */
		int want = mirror - 4, seen = 0;
		for (int i = 0; i < n; i++) {
			if (i == m->data_index)
				continue;
			if (seen++ == want) {
				bad[i] = true;
				break;
			}
		}
	}
	return rebuild(c, m->full_stripe, soff, m->data_index, bad, len, buf);
}

/*
 * A degraded read rebuilds units from the rest of their full stripe: every
 * present device is asked at once for its strips of the rows the read covers,
 * parity included, instead of 64 KiB at a time as each unit comes up (and,
 * for a stream, the rows after them too).
 */
static void advise_rows(const struct ub_chunk *c, uint64_t off, uint64_t len)
{
	const uint64_t fsz = (uint64_t)(c->num_stripes - c->profile->nparity) * c->stripe_len;
	const uint64_t f0 = off / fsz, rows = (off + len - 1) / fsz - f0 + 1;

	for (int st = 0; st < c->num_stripes; st++)
		if (c->stripes[st].dev && c->stripes[st].dev->dev)
			ub_dev_willneed(c->stripes[st].dev->dev, c->stripes[st].physical + f0 * c->stripe_len,
					rows * c->stripe_len);
}

static int parity_read(struct ub_volume *vol, const struct ub_chunk *c, uint64_t logical, uint64_t len, int mirror,
		       uint8_t *buf)
{
	int copies = parity_num_copies(c);

	if (c->num_stripes > UB_RAID_MAX_STRIPES)
		return -EUCLEAN;
	if (mirror < 0 || mirror > copies)
		return -EINVAL;
	/* healthy: the data units as stored, gathered per device; no parity is read or computed */
	if (mirror <= 1) {
		int ret = ub_span_read(c, logical, len, 1, buf);

		if (ret == 0 || mirror == 1)
			return ret;
		if (len > c->stripe_len) {
			uint64_t off = logical - c->logical, ahead = 0;

			if (len >= UB_STREAM_MIN)
				ahead = c->length - (off + len) < UB_STREAM_AHEAD * len ? c->length - (off + len)
											: UB_STREAM_AHEAD * len;
			advise_rows(c, off, len + ahead);
		}
	}
	while (len > 0) {
		struct ub_map m;
		uint64_t n;
		int ret = parity_map(c, logical - c->logical, 1, &m);

		if (ret)
			return ret;
		n = len < m.contig ? len : m.contig;
		if (mirror > 0) {
			ret = read_segment(c, &m, n, mirror, buf);
		} else {
			/* any copy that reads: the stored data, else the first rebuild that works */
			ret = -EIO;
			for (int k = 1; k <= copies && ret; k++)
				ret = read_segment(c, &m, n, k, buf);
		}
		if (ret)
			return ret;
		buf += n;
		logical += n;
		len -= n;
	}
	return 0;
}

/* ---- writing ---- */

/* Full stripes per gathered write: each device gets up to this many strips in one write. */
#define RUN_BATCH 16

/*
 * A write's stripes and parity need up to a few MiB of aligned scratch (ISA-L's
 * vector code wants 32-byte alignment). A fresh allocation that large is a
 * fresh mapping whose pages fault in again on every write, so each thread
 * keeps its largest one.
 */
struct scratch {
	uint8_t *buf;
	size_t size;
};

static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static bool scratch_ready;

static void scratch_release(void *p)
{
	struct scratch *s = p;

	free(s->buf);
	free(s);
}

static void scratch_setup(void)
{
	scratch_ready = pthread_key_create(&scratch_key, scratch_release) == 0;
}

/* `size` bytes, 64-byte aligned, this thread's until its next call */
static uint8_t *scratch_get(size_t size)
{
	struct scratch *s;

	pthread_once(&scratch_once, scratch_setup);
	if (!scratch_ready)
		return NULL;
	s = pthread_getspecific(scratch_key);
	if (!s) {
		s = calloc(1, sizeof(*s));
		if (!s)
			return NULL;
		if (pthread_setspecific(scratch_key, s)) {
			free(s);
			return NULL;
		}
	}
	if (s->size < size) {
		uint8_t *b = aligned_alloc(64, (size + 63) & ~(size_t)63);

		if (!b)
			return NULL;
		free(s->buf);
		s->buf = b;
		s->size = size;
	}
	return s->buf;
}

/* One full stripe's share of a write: which columns of each data strip it covers. */
struct full_write {
	uint64_t full;
	uint64_t a[UB_RAID_MAX_STRIPES], b[UB_RAID_MAX_STRIPES]; /* data strip i covers [a, b); a == b: not at all */
	uint64_t lo, hi;  /* the columns whose parity changes */
};

static void full_write_plan(const struct ub_chunk *c, uint64_t full, uint64_t off, uint64_t end,
			    struct full_write *fw)
{
	const int nd = c->num_stripes - c->profile->nparity;
	const uint64_t slen = c->stripe_len;

	fw->full = full;
	fw->lo = slen;
	fw->hi = 0;
	for (int i = 0; i < nd; i++) {
		uint64_t s0 = (full * (uint64_t)nd + (uint64_t)i) * slen, s1 = s0 + slen;
		uint64_t x0 = off > s0 ? off : s0, x1 = end < s1 ? end : s1;

		if (x0 >= x1) {
			fw->a[i] = fw->b[i] = 0;
			continue;
		}
		fw->a[i] = x0 - s0;
		fw->b[i] = x1 - s0;
		if (fw->a[i] < fw->lo)
			fw->lo = fw->a[i];
		if (fw->b[i] > fw->hi)
			fw->hi = fw->b[i];
	}
}

static uint64_t slot_phys(const struct ub_chunk *c, uint64_t full, int slot)
{
	return c->stripes[slot_stripe(c, full, slot)].physical + full * c->stripe_len;
}

static int full_write_check(struct ub_volume *vol, const struct ub_chunk *c, const struct full_write *fw)
{
	const int total = c->num_stripes, nd = total - c->profile->nparity;

	for (int i = 0; i < total; i++) {
		int st = slot_stripe(c, fw->full, i);
		uint64_t a = i < nd ? fw->a[i] : fw->lo, b = i < nd ? fw->b[i] : fw->hi;
		int ret;

		if (a == b || !c->stripes[st].dev)
			continue;
		ret = ub_vol_phys_check(vol, c, st, slot_phys(c, fw->full, i) + a, b - a);
		if (ret)
			return ret;
	}
	return 0;
}

static int slot_read(const struct ub_chunk *c, const struct full_write *fw, int slot, uint8_t *out)
{
	const struct ub_stripe *s = &c->stripes[slot_stripe(c, fw->full, slot)];

	return ub_vdev_read(s->dev, out, fw->hi - fw->lo, slot_phys(c, fw->full, slot) + fw->lo);
}

/*
 * Read-modify-write of one full stripe over the columns [lo, hi) the write
 * changes: the old contents of data strips the write covers only in part come
 * from disk (rebuilt from parity when their device is missing or fails the
 * read), the new data goes over them, P (and Q) are computed from the result,
 * then the changed data and the parity are written.
 */
static int full_write_do(struct ub_volume *vol, const struct ub_chunk *c, const struct full_write *fw,
			 const uint8_t *src /* the write's bytes for chunk offset 0 */)
{
	const int total = c->num_stripes, np = c->profile->nparity, nd = total - np;
	const uint64_t width = fw->hi - fw->lo, stride = (width + 63) & ~63ULL;
	bool lost[UB_RAID_MAX_STRIPES] = { false }, have[UB_RAID_MAX_STRIPES] = { false };
	bool rebuild = false;
	uint8_t *bufs, *strips[UB_RAID_MAX_STRIPES];
	int ret = 0, nlost = 0;

	bufs = scratch_get((size_t)stride * (size_t)total);
	if (!bufs)
		return -ENOMEM;
	for (int i = 0; i < total; i++) {
		strips[i] = bufs + (size_t)i * stride;
		lost[i] = !c->stripes[slot_stripe(c, fw->full, i)].dev;
	}
	for (int i = 0; i < nd; i++) {
		if (fw->a[i] <= fw->lo && fw->b[i] >= fw->hi)
			continue; /* fully overwritten: its old bytes do not matter */
		if (!lost[i] && slot_read(c, fw, i, strips[i]) == 0)
			have[i] = true;
		else
			lost[i] = true;
		rebuild |= lost[i];
	}
	if (rebuild) {
		for (int i = 0; i < total; i++) {
			if (lost[i] || have[i])
				continue;
			if (slot_read(c, fw, i, strips[i]) == 0)
				have[i] = true;
			else
				lost[i] = true;
		}
		for (int i = 0; i < total; i++)
			nlost += lost[i];
		if (nlost > np) {
			ub_err(&vol->log,
			       "%s chunk at logical %llu, full stripe %llu: %d of %d strips unreadable, the old data the "
			       "write does not cover cannot be rebuilt",
			       c->profile->name, (unsigned long long)c->logical, (unsigned long long)fw->full, nlost,
			       total);
			ret = -EIO;
			goto out;
		}
		ret = ub_raid_recover(nd, np, strips, lost, width);
		if (ret)
			goto out;
	}
	for (int i = 0; i < nd; i++) {
		uint64_t loff = (fw->full * (uint64_t)nd + (uint64_t)i) * c->stripe_len + fw->a[i];
		if (fw->a[i] < fw->b[i])
			memcpy(strips[i] + (fw->a[i] - fw->lo), src + loff, fw->b[i] - fw->a[i]);
	}
	ret = ub_raid_gen_parity(nd, np, strips, width);
	if (ret)
		goto out;
	for (int i = 0; i < total; i++) {
		int st = slot_stripe(c, fw->full, i);
		uint64_t a = i < nd ? fw->a[i] : fw->lo, b = i < nd ? fw->b[i] : fw->hi;

		if (a == b)
			continue;
		if (!c->stripes[st].dev) {
			vol->writes_skipped++;
			continue;
		}
		ret = ub_vol_dev_write(vol, c, st, strips[i] + (a - fw->lo), b - a, slot_phys(c, fw->full, i) + a);
		if (ret)
			goto out;
	}
out:
	return ret;
}

/*
 * Full stripes the write covers completely need nothing from disk: P (and Q)
 * come straight from the caller's bytes, and since consecutive full stripes
 * lie back to back on every device, each device gets one gathered write of
 * its strips of the batch; the data itself is never copied.
 */
struct run_dev_write {
	struct ub_volume *vol;
	const struct ub_chunk *c;
	uint64_t phys_off; /* f0 * stripe_len */
	int k;
	const int *sts;    /* the present devices' stripes */
	struct iovec (*iov)[RUN_BATCH];
};

static int run_dev_write(void *arg, int i)
{
	const struct run_dev_write *w = arg;
	int st = w->sts[i];

	return ub_vol_dev_writev(w->vol, w->c, st, w->iov[st], w->k, w->c->stripes[st].physical + w->phys_off);
}

/*
 * Full stripes the write covers completely need nothing from disk: P (and Q)
 * come straight from the caller's bytes, and since consecutive full stripes
 * lie back to back on every device, each device gets one gathered write of
 * its strips of the batch (the devices side by side, par_io.c); the data
 * itself is never copied.
 */
static int full_run_write(struct ub_volume *vol, const struct ub_chunk *c, uint64_t f0, uint64_t k,
			  const uint8_t *src /* the write's bytes for chunk offset 0 */)
{
	const int total = c->num_stripes, np = c->profile->nparity, nd = total - np;
	const uint64_t slen = c->stripe_len;
	struct iovec iov[UB_RAID_MAX_STRIPES][RUN_BATCH];
	int sts[UB_RAID_MAX_STRIPES], npresent = 0;
	uint8_t *par = scratch_get((size_t)(k * (uint64_t)np * slen));
	struct run_dev_write w = { .vol = vol, .c = c, .phys_off = f0 * slen, .k = (int)k, .sts = sts, .iov = iov };
	int ret;

	if (!par)
		return -ENOMEM;
	for (uint64_t j = 0; j < k; j++) {
		uint8_t *strips[UB_RAID_MAX_STRIPES];

		for (int i = 0; i < nd; i++)
			strips[i] = (uint8_t *)src + ((f0 + j) * (uint64_t)nd + (uint64_t)i) * slen;
		for (int p = 0; p < np; p++)
			strips[nd + p] = par + (j * (uint64_t)np + (uint64_t)p) * slen;
		ret = ub_raid_gen_parity(nd, np, strips, slen);
		if (ret)
			return ret;
	}
	for (int st = 0; st < total; st++) {
		if (!c->stripes[st].dev) {
			vol->writes_skipped += k;
			continue;
		}
		sts[npresent++] = st;
		for (uint64_t j = 0; j < k; j++) {
			/* the inverse of slot_stripe */
			uint64_t slot = ((uint64_t)st + (uint64_t)total - (f0 + j) % (uint64_t)total) % (uint64_t)total;

			iov[st][j].iov_base = slot < (uint64_t)nd ? (void *)(src + ((f0 + j) * (uint64_t)nd + slot) * slen)
								   : (void *)(par + (j * (uint64_t)np + slot - (uint64_t)nd) * slen);
			iov[st][j].iov_len = slen;
		}
	}
	return ub_vol_par_run(npresent, ub_vol_par_worth(c, k * (uint64_t)total * slen), run_dev_write, &w);
}

static int parity_write(struct ub_volume *vol, const struct ub_chunk *c, uint64_t logical, uint64_t len,
			const uint8_t *buf)
{
	const int total = c->num_stripes, np = c->profile->nparity, nd = total - np;
	const uint64_t fsz = (uint64_t)nd * c->stripe_len;
	const uint64_t off = logical - c->logical, end = off + len;
	struct full_write fw;
	int missing = 0, ret;

	if (total > UB_RAID_MAX_STRIPES)
		return -EUCLEAN;
	for (int i = 0; i < total; i++)
		missing += !c->stripes[i].dev;
	if (missing > np) {
		ub_err(&vol->log, "write at logical %llu: %s chunk at %llu has %d of %d devices missing",
		       (unsigned long long)logical, c->profile->name, (unsigned long long)c->logical, missing, total);
		return -EIO;
	}
	for (uint64_t f = off / fsz; f * fsz < end; f++) {
		full_write_plan(c, f, off, end, &fw);
		ret = full_write_check(vol, c, &fw);
		if (ret)
			return ret;
	}
	for (uint64_t f = off / fsz; f * fsz < end;) {
		uint64_t k = 0;

		while (k < RUN_BATCH && (f + k) * fsz >= off && (f + k + 1) * fsz <= end)
			k++;
		if (k) {
			ret = full_run_write(vol, c, f, k, buf - off);
			f += k;
		} else {
			full_write_plan(c, f, off, end, &fw);
			ret = full_write_do(vol, c, &fw, buf - off);
			f++;
		}
		if (ret)
			return ret;
	}
	return 0;
}

const struct ub_layout ub_layout_parity = {
	.stripes_valid = parity_stripes_valid,
	.num_copies = parity_num_copies,
	.map = parity_map,
	.read = parity_read,
	.write = parity_write,
	.readable = parity_readable,
};

/* ---- verifying parity ---- */

int ub_volume_parity_check(const struct ub_chunk *c, uint64_t full, uint64_t rows, uint32_t row_bytes,
			   int *bad_parity, int *unreadable, int *bad_row)
{
	const int total = c->num_stripes, np = c->profile ? c->profile->nparity : 0, n = total - np;
	const size_t len = (size_t)c->stripe_len;
	uint8_t *bufs, *stripes[UB_RAID_MAX_STRIPES];
	int ret = 0;

	*bad_parity = *unreadable = *bad_row = -1;
	if (np < 1 || n < 1 || total > UB_RAID_MAX_STRIPES || full >= c->length / ((uint64_t)n * c->stripe_len) ||
	    !row_bytes || len % row_bytes || len / row_bytes > 64)
		return -EINVAL;
	/* the strips as stored, then the parity their data gives, side by side */
	bufs = malloc((size_t)(total + np) * len);
	if (!bufs)
		return -ENOMEM;
	for (int i = 0; i < total; i++) {
		const struct ub_stripe *s = &c->stripes[slot_stripe(c, full, i)];

		stripes[i] = bufs + (size_t)i * len;
		if (!s->dev || ub_vdev_read(s->dev, stripes[i], len, s->physical + full * c->stripe_len)) {
			*unreadable = i;
			ret = 1;
			goto out;
		}
	}
	/*
	 * Row by row: the kernel computes P and Q only for the rows a write
	 * touched, so a row nobody wrote may hold any leftover bytes.
	 */
	for (size_t r = 0; r < len / row_bytes && !ret; r++) {
		uint8_t *fresh[UB_RAID_MAX_STRIPES];
		size_t at = r * row_bytes;

		if (!(rows & (1ULL << r)))
			continue;
		for (int i = 0; i < n; i++)
			fresh[i] = stripes[i] + at;
		for (int p = 0; p < np; p++)
			fresh[n + p] = bufs + (size_t)(total + p) * len + at;
		ret = ub_raid_gen_parity(n, np, fresh, row_bytes);
		if (ret)
			goto out;
		for (int p = 0; p < np; p++)
			if (memcmp(fresh[n + p], stripes[n + p] + at, row_bytes)) {
				*bad_parity = p;
				*bad_row = (int)r;
				ret = 2;
				break;
			}
	}
out:
	free(bufs);
	return ret;
}

int ub_volume_parity_slot(const struct ub_chunk *c, uint64_t full, int slot)
{
	return slot_stripe(c, full, slot);
}
