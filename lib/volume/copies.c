/* SPDX-License-Identifier: MIT */
/*
 * The layouts that store whole copies and no parity: mirrored (single, DUP,
 * RAID1, RAID1C3, RAID1C4: copy k is stripe k-1 at the same offset), RAID0
 * (64 KiB units round-robin over the stripes) and RAID10 (units round-robin
 * over pairs of stripes, each pair holding two copies). They share reading
 * and writing; only the mapping and what a missing device costs differ.
 */
#include <errno.h>
#include "volume_internal.h"

/* ---- mapping ---- */

static int mirror_map(const struct ub_chunk *c, uint64_t off, int mirror, struct ub_map *m)
{
	if (mirror > c->num_stripes)
		return -EINVAL;
	m->stripe = mirror - 1;
	m->physical = c->stripes[m->stripe].physical + off;
	m->contig = c->length - off;
	m->data_index = 0;
	m->full_stripe = 0;
	return 0;
}

static int raid0_map(const struct ub_chunk *c, uint64_t off, int mirror, struct ub_map *m)
{
	uint64_t unit = off / c->stripe_len, in = off % c->stripe_len;

	if (mirror != 1)
		return -EINVAL;
	m->stripe = (int)(unit % c->num_stripes);
	m->physical = c->stripes[m->stripe].physical + (unit / c->num_stripes) * c->stripe_len + in;
	m->contig = c->stripe_len - in;
	m->data_index = 0;
	m->full_stripe = 0;
	return 0;
}

static int raid10_map(const struct ub_chunk *c, uint64_t off, int mirror, struct ub_map *m)
{
	uint64_t unit = off / c->stripe_len, in = off % c->stripe_len;
	uint64_t pairs = c->num_stripes / c->sub_stripes;

	if (mirror > c->sub_stripes)
		return -EINVAL;
	m->stripe = (int)((unit % pairs) * c->sub_stripes + (uint64_t)(mirror - 1));
	m->physical = c->stripes[m->stripe].physical + (unit / pairs) * c->stripe_len + in;
	m->contig = c->stripe_len - in;
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
	return num >= (unsigned)p->devs_min && sub == 2 && num % 2 == 0;
}

/* ---- missing devices ---- */

static int count_missing(const struct ub_chunk *c)
{
	int missing = 0;

	for (int i = 0; i < c->num_stripes; i++)
		missing += !c->stripes[i].dev;
	return missing;
}

static bool mirror_readable(const struct ub_chunk *c)
{
	return count_missing(c) < c->num_stripes;
}

static bool raid0_readable(const struct ub_chunk *c)
{
	return count_missing(c) == 0;
}

static bool raid10_readable(const struct ub_chunk *c)
{
	for (int i = 0; i + 1 < c->num_stripes; i += 2)
		if (!c->stripes[i].dev && !c->stripes[i + 1].dev)
			return false;
	return true;
}

/* ---- reading ---- */

/* One stored copy, segment by segment (striped layouts change device every unit). */
static int read_copy(const struct ub_chunk *c, uint64_t logical, uint64_t len, int mirror, uint8_t *buf)
{
	const struct ub_layout *l = c->profile->layout;

	while (len > 0) {
		struct ub_map m;
		const struct ub_stripe *s;
		uint64_t n;
		int ret = l->map(c, logical - c->logical, mirror, &m);

		if (ret)
			return ret;
		s = &c->stripes[m.stripe];
		if (!s->dev)
			return -ENXIO;
		n = len < m.contig ? len : m.contig;
		ret = ub_dev_read(s->dev->dev, buf, n, m.physical);
		if (ret)
			return ret;
		buf += n;
		logical += n;
		len -= n;
	}
	return 0;
}

static int copies_read(struct ub_volume *vol, const struct ub_chunk *c, uint64_t logical, uint64_t len, int mirror,
		       uint8_t *buf)
{
	const struct ub_layout *l = c->profile->layout;
	int copies = l->num_copies(c), ret = -EIO;

	if (mirror > 0) {
		if (mirror > copies)
			return -EINVAL;
		return read_copy(c, logical, len, mirror, buf);
	}
	/*
	 * Any copy, segment by segment: on RAID10 with a device missing in two
	 * pairs, neither copy is whole over a long range, yet every segment is.
	 */
	while (len > 0) {
		struct ub_map m;
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

/*
 * Every copy, segment by segment. The first pass only maps and checks, so a
 * refused write changes nothing; copies on missing devices are skipped as
 * long as each segment keeps one.
 */
static int copies_write(struct ub_volume *vol, const struct ub_chunk *c, uint64_t logical, uint64_t len,
			const uint8_t *buf)
{
	const struct ub_layout *l = c->profile->layout;
	const int copies = l->num_copies(c);

	for (int pass = 0; pass < 2; pass++) {
		uint64_t lg = logical, left = len;
		const uint8_t *p = buf;

		while (left > 0) {
			struct ub_map maps[UB_RAID_MAX_STRIPES];
			uint64_t n = left;
			int present = 0, ret;

			if (copies > UB_RAID_MAX_STRIPES)
				return -EUCLEAN;
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
					vol->writes_skipped += (uint64_t)pass;
					continue;
				}
				present++;
				ret = pass ? ub_vol_dev_write(vol, c, m->stripe, p, n, m->physical)
					   : ub_vol_phys_check(vol, c, m->stripe, m->physical, n);
				if (ret)
					return ret;
			}
			if (!present) {
				ub_err(&vol->log, "write at logical %llu (%s chunk at %llu): every copy is on a missing device",
				       (unsigned long long)lg, c->profile->name, (unsigned long long)c->logical);
				return -EIO;
			}
			p += n;
			lg += n;
			left -= n;
		}
	}
	return 0;
}

const struct ub_layout ub_layout_mirror = {
	.stripes_valid = mirror_stripes_valid,
	.num_copies = ncopies,
	.map = mirror_map,
	.read = copies_read,
	.write = copies_write,
	.readable = mirror_readable,
};

const struct ub_layout ub_layout_raid0 = {
	.stripes_valid = raid0_stripes_valid,
	.num_copies = ncopies,
	.map = raid0_map,
	.read = copies_read,
	.write = copies_write,
	.readable = raid0_readable,
};

const struct ub_layout ub_layout_raid10 = {
	.stripes_valid = raid10_stripes_valid,
	.num_copies = ncopies,
	.map = raid10_map,
	.read = copies_read,
	.write = copies_write,
	.readable = raid10_readable,
};
