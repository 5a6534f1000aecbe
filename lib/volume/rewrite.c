/* SPDX-License-Identifier: MIT */
/*
 * One stored copy rewritten in place: scrub's repair of a bad copy of a tree
 * block or data sector (from a good copy or a parity rebuild) and of a bad P
 * or Q strip. Unlike ub_volume_write, which writes every copy and keeps parity
 * in step, this touches exactly the bytes named: the other copies are the good
 * ones the repair came from, and a data strip's parity already matches the
 * good bytes that go back.
 */
#include <errno.h>
#include "volume_internal.h"

uint64_t ub_chunk_stripe_size(const struct ub_chunk *c)
{
	int ds = ub_chunk_data_stripes(c);

	return ds > 0 ? c->length / (uint64_t)ds : 0;
}

int ub_volume_rewrite(struct ub_volume *vol, const struct ub_chunk *c, int stripe, uint64_t physical, uint64_t len,
		      const void *buf)
{
	const struct ub_stripe *s;
	uint64_t size = ub_chunk_stripe_size(c);
	int ret = ub_volume_write_error(vol) || !vol->writable ? -EROFS : 0;

	if (ret)
		return ret;
	if (stripe < 0 || stripe >= c->num_stripes || len == 0)
		return -EINVAL;
	s = &c->stripes[stripe];
	if (!s->dev || !s->dev->dev)
		return -ENXIO;
	/* the stripe's own device extent, nothing beyond it (the chunk map came from the disk too) */
	if (physical < s->physical || physical - s->physical > size || len > size - (physical - s->physical)) {
		ub_err(&vol->log,
		       "rewrite of [%llu, +%llu) on devid %llu: outside stripe %d of the chunk at logical %llu "
		       "(physical [%llu, +%llu))",
		       (unsigned long long)physical, (unsigned long long)len, (unsigned long long)s->devid, stripe,
		       (unsigned long long)c->logical, (unsigned long long)s->physical, (unsigned long long)size);
		return -EINVAL;
	}
	ret = ub_vol_phys_check(vol, c, stripe, physical, len);
	if (ret)
		return ret;
	return ub_vol_dev_write(vol, c, stripe, buf, len, physical);
}
