/* SPDX-License-Identifier: MIT */
/*
 * Where the superblock mirrors fall in a chunk's logical space: what neither
 * the allocator may hand out nor a v1 space cache may call free (the kernel
 * keeps these stripes out of every block group).
 */
#include <errno.h>

#include "volume/volume_priv.h"

/* The first MiB of a device: no chunk today's tools make starts there. */
#define UB_FIRST_MB (1024ULL * 1024)

int ub_chunk_data_stripes(const struct ub_chunk *c)
{
	const struct ub_profile *p = c->profile ? c->profile : ub_profile_of(c->type);

	return p ? ub_profile_data_stripes(p, c->num_stripes, c->sub_stripes) : 0;
}

int ub_chunk_super_ranges(const struct ub_chunk *c, uint64_t *start, uint64_t *len, int max, int *n)
{
	const struct ub_profile *p = c->profile ? c->profile : ub_profile_of(c->type);
	int k = 0;
	int ds = ub_chunk_data_stripes(c);
	if (!p || ds <= 0 || c->stripe_len == 0)
		return -EINVAL;
	/*
	 * The first MiB of every device is never given to chunks by today's
	 * tools; a group starting below 1 MiB of logical space is one of the
	 * old layouts that mapped it 1:1, so keep its boot/superblock area out.
	 */
	if (c->logical < UB_FIRST_MB) {
		if (k == max)
			return -ENOSPC;
		uint64_t e = c->logical + c->length < UB_FIRST_MB ? c->logical + c->length : UB_FIRST_MB;
		start[k] = c->logical;
		len[k++] = e - c->logical;
	}
	uint64_t stripe_size = c->length / (uint64_t)ds; /* per device */
	for (int m = 0; m < UB_SUPER_MIRROR_MAX; m++) {
		uint64_t off = ub_super_offset(m);
		for (int j = 0; j < c->num_stripes; j++) {
			uint64_t phys = c->stripes[j].physical;
			if (off < phys || off - phys >= stripe_size)
				continue;
			uint64_t nr = (off - phys) / c->stripe_len, l = c->stripe_len;
			if (p->striped && p->nparity) {
				/* the whole full stripe: its parity covers the mirror too */
				nr = nr * (uint64_t)ds;
				l = (uint64_t)ds * c->stripe_len;
			} else if (p->striped) {
				/* RAID0 and RAID10: the units go round the stripes (RAID10's in mirrored pairs) */
				nr = nr * (uint64_t)ds + (uint64_t)(j / (c->sub_stripes ? c->sub_stripes : 1));
			}
			uint64_t lg = c->logical + nr * c->stripe_len;
			if (lg >= c->logical + c->length)
				continue;
			if (lg + l > c->logical + c->length)
				l = c->logical + c->length - lg;
			if (k == max)
				return -ENOSPC;
			start[k] = lg;
			len[k++] = l;
		}
	}
	*n = k;
	return 0;
}

