/* SPDX-License-Identifier: MIT */
/*
 * RAID5/6 reads: plain reads of a data stripe, and rebuilds of it from the
 * other stripes of its full stripe with P (and Q). Mirror numbers follow the
 * seed patch: 1 is the data as stored, 2 is rebuilt from P, 3 is rebuilt from
 * Q (assuming P bad too), and for RAID6, 4.. assume one more data stripe bad
 * and rebuild from P and Q together, so that two bad data stripes are found
 * by trying copies until the checksum matches.
 *
 * The algebra is in raid_math.c.
 */
#include <errno.h>
#include <stdlib.h>
#include "volume_internal.h"

/* Physical stripe index of logical stripe `i` in full stripe `full`: parity rotates one device per full stripe. */
static int phys_index(const struct ub_chunk *c, uint64_t full, int i)
{
	return (int)((full + (uint64_t)i) % c->num_stripes);
}

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
		const struct ub_stripe *s = &c->stripes[phys_index(c, full, i)];
		stripes[i] = bufs + (size_t)i * len;
		if (bad[i] || used >= n) {
			bad[i] = true;
			continue;
		}
		if (!s->dev || ub_dev_read(s->dev->dev, stripes[i], len, s->physical + full * c->stripe_len + soff))
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

int ub_raid56_num_copies(const struct ub_chunk *c)
{
	/* RAID6: plain, from P, from Q, then each other data stripe assumed bad too */
	return c->profile->nparity == 1 ? 2 : c->num_stripes;
}

/* Read one segment (inside one stripe unit) as copy `mirror`. */
static int read_segment(struct ub_volume *vol, const struct ub_chunk *c, uint64_t logical, uint64_t len, int mirror,
			uint8_t *buf)
{
	const int total = c->num_stripes, n = total - c->profile->nparity;
	bool bad[UB_RAID_MAX_STRIPES] = { false };
	struct ub_map m;
	int ret = ub_chunk_map_copy(c, logical, 1, &m);
	uint64_t soff;

	if (ret)
		return ret;
	soff = m.physical - c->stripes[m.stripe].physical - m.full_stripe * c->stripe_len;
	if (mirror == 1) {
		const struct ub_stripe *s = &c->stripes[m.stripe];
		return s->dev ? ub_dev_read(s->dev->dev, buf, len, m.physical) : -ENXIO;
	}
	if (mirror == 3)
		bad[n] = true; /* rebuild from Q: P assumed bad */
	if (mirror >= 4) {
		/* the (mirror-3)th other data stripe assumed bad as well */
		int want = mirror - 4, seen = 0;
		for (int i = 0; i < n; i++) {
			if (i == m.data_index)
				continue;
			if (seen++ == want) {
				bad[i] = true;
				break;
			}
		}
	}
	return rebuild(c, m.full_stripe, soff, m.data_index, bad, len, buf);
}

int ub_raid56_read(struct ub_volume *vol, const struct ub_chunk *c, uint64_t logical, uint64_t len, int mirror,
		   uint8_t *buf)
{
	int copies = ub_raid56_num_copies(c);

	if (c->num_stripes > UB_RAID_MAX_STRIPES)
		return -EUCLEAN;
	if (mirror < 0 || mirror > copies)
		return -EINVAL;
	while (len > 0) {
		struct ub_map m;
		uint64_t n;
		int ret = ub_chunk_map_copy(c, logical, 1, &m);

		if (ret)
			return ret;
		n = len < m.contig ? len : m.contig;
		if (mirror > 0) {
			ret = read_segment(vol, c, logical, n, mirror, buf);
		} else {
			/* any copy that reads: the stored data, else the first rebuild that works */
			ret = -EIO;
			for (int k = 1; k <= copies && ret; k++)
				ret = read_segment(vol, c, logical, n, k, buf);
		}
		if (ret)
			return ret;
		buf += n;
		logical += n;
		len -= n;
	}
	return 0;
}
