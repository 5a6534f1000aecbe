/* SPDX-License-Identifier: MIT */
/*
 * The layouts that store whole copies and no parity: mirrored (single, DUP,
 * RAID1, RAID1C3, RAID1C4: copy k is stripe k-1 at the same offset), RAID0
 * (64 KiB units round-robin over the stripes) and RAID10 (units round-robin
 * over pairs of stripes, each pair holding two copies). They share mapping,
 * reading, writing and what a missing device costs; only the stripe counts
 * a chunk item may have differ.
 */
#include <errno.h>
#include "volume_internal.h"

/*
 * One striped layout covers the three: stripes form groups of `width` (the
 * profile's copies: 1 for RAID0, 2 for RAID10, every stripe for mirrored),
 * 64 KiB units go round-robin over the groups, and copy k of a unit is the
 * group's stripe k-1. With a single group (mirrored) a copy runs to the end
 * of the chunk.
 */

/* ---- mapping ---- */

static int striped_map(const struct ub_chunk *c, uint64_t off, int mirror, struct ub_map *m)
{
	const int width = c->profile->ncopies;
	const uint64_t groups = (uint64_t)(c->num_stripes / width);
	uint64_t unit = off / c->stripe_len, in = off % c->stripe_len;

	if (mirror < 1 || mirror > width)
		return -EINVAL;
	if (groups == 0)
		return -EUCLEAN; /* refused when the chunk was added; never divide by it */
	m->stripe = (int)((unit % groups) * (uint64_t)width + (uint64_t)(mirror - 1));
	m->physical = c->stripes[m->stripe].physical + (unit / groups) * c->stripe_len + in;
	m->contig = groups == 1 ? c->length - off : c->stripe_len - in;
	m->data_index = 0;
	m->full_stripe = 0;
	return 0;
}

/* ---- copies and stripe counts ---- */

static int ncopies(const struct ub_chunk *c)
{
	return c->profile->ncopies;
}

static bool mirror_stripes_valid(const struct ub_profile *p, unsigned num, unsigned sub)
{
	return num >= (unsigned)p->devs_min && num == (unsigned)p->ncopies;
}

static bool raid0_stripes_valid(const struct ub_profile *p, unsigned num, unsigned sub)
{
	return num >= (unsigned)p->devs_min;
}

static bool raid10_stripes_valid(const struct ub_profile *p, unsigned num, unsigned sub)
{
	/* btrfs check refuses an odd count (the last stripe would hold nothing) */
	return num >= (unsigned)p->devs_min && sub == (unsigned)p->sub_stripes && num % sub == 0;
}

/* ---- missing devices ---- */

/* Every group keeps one stripe. */
static bool striped_readable(const struct ub_chunk *c)
{
	const int width = c->profile->ncopies;

	for (int g = 0; g + width <= c->num_stripes; g += width) {
		bool any = false;

		for (int k = 0; k < width; k++)
			any = any || c->stripes[g + k].dev;
		if (!any)
			return false;
	}
	return true;
}

/* ---- reading ---- */

/* One stored copy: striped layouts change device every unit, so the units are gathered per device. */
static int read_copy(const struct ub_chunk *c, uint64_t logical, uint64_t len, int mirror, uint8_t *buf)
{
	return ub_span_read(c, logical, len, mirror, buf);
}

static int copies_read(struct ub_volume *vol, const struct ub_chunk *c, uint64_t logical, uint64_t len, int mirror,
		       uint8_t *buf)
{
	const struct ub_layout *l = c->profile->layout;
	int copies = l->num_copies(c), ret = -EIO;
	struct ub_map m;

	if (mirror > 0) {
		if (mirror > copies)
			return -EINVAL;
		return read_copy(c, logical, len, mirror, buf);
	}
	/* a healthy striped read: the first copy, gathered; segment by segment only when that fails */
	ret = l->map(c, logical - c->logical, 1, &m);
	if (ret)
		return ret;
	if (m.contig < len && read_copy(c, logical, len, 1, buf) == 0)
		return 0;
	/*
	 * Any copy, segment by segment: on RAID10 with a device missing in two
	 * pairs, neither copy is whole over a long range, yet every segment is.
	 */
	while (len > 0) {
		uint64_t n;

		ret = l->map(c, logical - c->logical, 1, &m);
		if (ret)
			return ret;
		n = len < m.contig ? len : m.contig;
		for (int k = 1; k <= copies; k++) {
			ret = read_copy(c, logical, n, k, buf);
			if (ret == 0)
				break;
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

struct copy_write {
	struct ub_volume *vol;
	const struct ub_chunk *c;
	uint64_t logical, len;
	const uint8_t *buf;
};

static int copy_write(void *arg, int i)
{
	const struct copy_write *w = arg;

	return ub_span_write(w->vol, w->c, w->logical, w->len, i + 1, w->buf);
}

/*
 * Every copy (side by side, par_io.c). Mapping and checking come first, segment by segment, so a
 * refused write changes nothing; copies on missing devices are skipped as
 * long as each segment keeps one. The writes then go out gathered per device.
 */
static int copies_write(struct ub_volume *vol, const struct ub_chunk *c, uint64_t logical, uint64_t len,
			const uint8_t *buf)
{
	const struct ub_layout *l = c->profile->layout;
	const int copies = l->num_copies(c);
	uint64_t lg = logical, left = len;

	if (copies > UB_RAID_MAX_STRIPES)
		return -EUCLEAN;
	while (left > 0) {
		struct ub_map maps[UB_RAID_MAX_STRIPES];
		uint64_t n = left;
		int present = 0, ret;

		for (int k = 1; k <= copies; k++) {
			ret = l->map(c, lg - c->logical, k, &maps[k - 1]);
			if (ret)
				return ret;
			if (maps[k - 1].contig < n)
				n = maps[k - 1].contig;
		}
		for (int k = 0; k < copies; k++) {
			const struct ub_map *m = &maps[k];

			if (!c->stripes[m->stripe].dev) {
				vol->writes_skipped++;
				continue;
			}
			present++;
			ret = ub_vol_phys_check(vol, c, m->stripe, m->physical, n);
			if (ret)
				return ret;
		}
		if (!present) {
			ub_err(&vol->log, "write at logical %llu (%s chunk at %llu): every copy is on a missing device",
			       (unsigned long long)lg, c->profile->name, (unsigned long long)c->logical);
			return -EIO;
		}
		lg += n;
		left -= n;
	}
	{
		struct copy_write w = { .vol = vol, .c = c, .logical = logical, .len = len, .buf = buf };

		return ub_vol_par_run(copies, ub_vol_par_worth(c, len * (uint64_t)copies), copy_write, &w);
	}
}

/* Only the stripe counts differ between the three families. */
#define STRIPED_LAYOUT(valid)                                                                                   \
	{ .stripes_valid = (valid), .num_copies = ncopies, .map = striped_map, .read = copies_read,            \
	  .write = copies_write, .readable = striped_readable }

const struct ub_layout ub_layout_mirror = STRIPED_LAYOUT(mirror_stripes_valid);
const struct ub_layout ub_layout_raid0 = STRIPED_LAYOUT(raid0_stripes_valid);
const struct ub_layout ub_layout_raid10 = STRIPED_LAYOUT(raid10_stripes_valid);
