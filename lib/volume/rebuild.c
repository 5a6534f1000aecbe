// SPDX-License-Identifier: MIT
/*
 * What one stripe of a chunk holds, made from the chunk's logical contents
 * (a device replace writes it onto the new device at the same place): every
 * unit of stripe_len is a copy of some logical range (read through the
 * volume, so a missing or failing device is read around: another copy, or a
 * rebuild from parity), or on RAID5/6 the P or Q of its row, computed from the
 * row's data units.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "volume_internal.h"

/*
 * For each stripe_len unit of stripe `stripe`, the logical offset (inside the
 * chunk) whose copy it holds, or UINT64_MAX when it holds none (parity). The
 * layouts map logical to physical only, so the table is made by mapping
 * every logical unit and every copy.
 */
static int unit_table(const struct ub_chunk *c, int stripe, uint64_t units, uint64_t **out)
{
	uint64_t *t = malloc((units ? units : 1) * sizeof(*t));
	int copies = c->profile->nparity ? 1 : ub_chunk_num_copies(c);

	if (!t)
		return -ENOMEM;
	for (uint64_t u = 0; u < units; u++)
		t[u] = UINT64_MAX;
	for (uint64_t off = 0; off < c->length; off += c->stripe_len) {
		for (int m = 1; m <= copies; m++) {
			struct ub_map map;
			uint64_t u;

			if (ub_chunk_map_copy(c, c->logical + off, m, &map) || map.stripe != stripe)
				continue;
			u = (map.physical - c->stripes[stripe].physical) / c->stripe_len;
			if (u < units)
				t[u] = off;
		}
	}
	*out = t;
	return 0;
}

/* P (which 0) or Q (1) of full stripe `full`, `in`..`in + len` inside each strip: the row's data read at once. */
static int parity_unit(struct ub_volume *vol, const struct ub_chunk *c, uint64_t full, int which, uint64_t in,
		       uint64_t len, uint8_t *out)
{
	int ndata = c->num_stripes - c->profile->nparity, np = c->profile->nparity, ret = 0;
	uint8_t *row = malloc((size_t)ndata * c->stripe_len), *pq = malloc((size_t)np * len);
	uint8_t *strips[UB_RAID_MAX_STRIPES];

	if (!row || !pq || ndata + np > UB_RAID_MAX_STRIPES) {
		ret = row && pq ? -EUCLEAN : -ENOMEM;
		goto out;
	}
	/* a row's data units follow each other logically: one read (a missing one rebuilt by it) */
	ret = ub_volume_read(vol, c->logical + full * (uint64_t)ndata * c->stripe_len, (uint64_t)ndata * c->stripe_len,
			     0, row);
	for (int j = 0; j < ndata; j++)
		strips[j] = row + (size_t)j * c->stripe_len + in;
	for (int k = 0; k < np; k++)
		strips[ndata + k] = pq + (size_t)k * len;
	if (!ret)
		ret = ub_raid_gen_parity(ndata, np, strips, len);
	if (!ret)
		memcpy(out, strips[ndata + which], len);
out:
	free(row);
	free(pq);
	return ret;
}

int ub_stripe_src_init(struct ub_stripe_src *src, struct ub_volume *vol, const struct ub_chunk *c, int stripe)
{
	memset(src, 0, sizeof(*src));
	if (stripe < 0 || stripe >= c->num_stripes)
		return -EINVAL;
	src->vol = vol;
	src->c = c;
	src->stripe = stripe;
	src->size = ub_chunk_stripe_size(c);
	src->units = (src->size + c->stripe_len - 1) / c->stripe_len;
	return unit_table(c, stripe, src->units, &src->table);
}

void ub_stripe_src_free(struct ub_stripe_src *src)
{
	free(src->table);
	src->table = NULL;
}

int ub_stripe_src_read(struct ub_stripe_src *src, uint64_t off, uint64_t len, uint8_t *buf)
{
	const struct ub_chunk *c = src->c;
	int ret = 0;

	if (off > src->size || len > src->size - off)
		return -EINVAL;
	while (!ret && len > 0) {
		uint64_t u = off / c->stripe_len, in = off % c->stripe_len;
		uint64_t n = c->stripe_len - in < len ? c->stripe_len - in : len;

		if (src->table[u] != UINT64_MAX) {
			/* units whose logical ranges follow each other (every mirrored layout): one read */
			while (n < len && u + 1 < src->units && src->table[u + 1] == src->table[u] + c->stripe_len &&
			       (off + n) % c->stripe_len == 0) {
				uint64_t more = len - n < c->stripe_len ? len - n : c->stripe_len;

				n += more;
				u++;
			}
			ret = ub_volume_read(src->vol, c->logical + src->table[off / c->stripe_len] + in, n, 0, buf);
		} else if (c->profile->nparity) {
			int nst = c->num_stripes, ndata = nst - c->profile->nparity;
			int slot = (int)(((uint64_t)src->stripe + (uint64_t)nst - u % (uint64_t)nst) % (uint64_t)nst);

			ret = slot >= ndata ? parity_unit(src->vol, c, u, slot - ndata, in, n, buf) : -EUCLEAN;
		} else {
			memset(buf, 0, n); /* past the chunk's last unit: nothing there */
		}
		buf += n;
		off += n;
		len -= n;
	}
	return ret;
}
