/* SPDX-License-Identifier: MIT */
/*
 * Chunk placement as the kernel's allocator does it (volumes.c:
 * gather_device_info, decide_stripe_size_regular, create_chunk), so that a
 * filesystem we grow looks like one the kernel grew and the kernel's own
 * allocator finds nothing surprising afterwards.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "alloc/chunk_layout.h"
#include "ubtrfs/format.h"
#include "volume/volume_priv.h"

#define MiB (1024ULL * 1024)
#define GiB (1024ULL * MiB)

int ub_chunk_rules_of(uint64_t type, struct ub_chunk_rules *r)
{
	const struct ub_profile *p = ub_profile_of(type);

	if (!p)
		return -EINVAL;
	*r = (struct ub_chunk_rules){ .dev_stripes = p->dev_stripes, .devs_min = p->devs_min, .devs_max = p->devs_max,
				      .devs_increment = p->devs_increment, .ncopies = p->ncopies, .nparity = p->nparity,
				      .sub_stripes = p->sub_stripes };
	return 0;
}

struct cand {
	int idx;               /* into the caller's array, for a stable order */
	uint64_t dev_offset;   /* where the extent starts */
	uint64_t max_avail;    /* how much of it we may use */
	uint64_t total_avail;  /* all free bytes of the device (tie break) */
};

/*
 * The kernel's find_free_dev_extent: the first hole (at or past the reserved
 * first MiB) that holds `want`; failing that, the largest one (the first of
 * equals). Returns the usable size: `want` when a hole was big enough.
 */
static uint64_t find_hole(const struct ub_dev_space *d, uint64_t want, uint64_t *start)
{
	uint64_t best = 0, best_start = 0;

	for (int i = 0; i < d->nholes; i++) {
		uint64_t s = d->hole_start[i], e = s + d->hole_len[i];

		if (e <= UB_DEV_RESERVED)
			continue;
		if (s < UB_DEV_RESERVED)
			s = UB_DEV_RESERVED;
		if (e - s > best) {
			best = e - s;
			best_start = s;
		}
		if (e - s >= want) {
			*start = s;
			return want;
		}
	}
	*start = best_start;
	return best;
}

static bool holes_sane(const struct ub_dev_space *d)
{
	uint64_t prev_end = 0;

	if (d->nholes < 0 || (d->nholes && (!d->hole_start || !d->hole_len)))
		return false;
	for (int i = 0; i < d->nholes; i++) {
		uint64_t s = d->hole_start[i], l = d->hole_len[i];

		if (s < prev_end || l > d->total_bytes || s > d->total_bytes - l)
			return false;
		prev_end = s + l;
	}
	return true;
}

/* larger max_avail first, then larger total_avail; equal ones keep the caller's order */
static bool cand_before(const struct cand *a, const struct cand *b)
{
	if (a->max_avail != b->max_avail)
		return a->max_avail > b->max_avail;
	if (a->total_avail != b->total_avail)
		return a->total_avail > b->total_avail;
	return a->idx < b->idx;
}

int ub_chunk_layout(const struct ub_dev_space *devs, int ndevs, uint64_t type, uint64_t max_logical_hint,
		    struct ub_chunk_plan *out)
{
	struct ub_chunk_rules r;
	struct cand cands[UB_MAX_STRIPES];
	uint64_t total_rw = 0, max_chunk, max_stripe, want, stripe_size;
	int ncand = 0, devs_max, use, num_stripes, data_stripes;

	if (ndevs < 0 || (ndevs && !devs) || !out || !(type & (BTRFS_BLOCK_GROUP_DATA | BTRFS_BLOCK_GROUP_METADATA |
							      BTRFS_BLOCK_GROUP_SYSTEM)))
		return -EINVAL;
	if (ub_chunk_rules_of(type, &r))
		return -EINVAL;
	for (int i = 0; i < ndevs; i++) {
		if (!holes_sane(&devs[i]))
			return -EINVAL;
		total_rw += devs[i].total_bytes;
	}

	/* the kernel's calc_chunk_size and init_alloc_chunk_ctl_policy_regular */
	if (type & BTRFS_BLOCK_GROUP_DATA)
		max_chunk = 10 * GiB;
	else if (type & BTRFS_BLOCK_GROUP_SYSTEM)
		max_chunk = 32 * MiB;
	else
		max_chunk = total_rw > 50 * GiB ? GiB : 256 * MiB;
	max_stripe = max_chunk < GiB ? max_chunk : GiB;
	/* no chunk larger than 10% of the writable space */
	if (total_rw / 10 < max_chunk)
		max_chunk = total_rw / 10;
	devs_max = r.devs_max ? r.devs_max : UB_MAX_STRIPES;
	if ((type & BTRFS_BLOCK_GROUP_SYSTEM) && devs_max > UB_MAX_DEVS_SYS_CHUNK)
		devs_max = UB_MAX_DEVS_SYS_CHUNK;
	if (devs_max * r.dev_stripes > UB_MAX_STRIPES)
		devs_max = UB_MAX_STRIPES / r.dev_stripes;

	want = max_stripe * (uint64_t)r.dev_stripes;
	for (int i = 0; i < ndevs; i++) {
		struct cand c = { .idx = i };
		uint64_t dev_extent_min = UB_STRIPE_LEN * (uint64_t)r.dev_stripes;

		for (int h = 0; h < devs[i].nholes; h++)
			c.total_avail += devs[i].hole_len[h];
		if (c.total_avail < dev_extent_min)
			continue;
		c.max_avail = find_hole(&devs[i], want, &c.dev_offset);
		if (c.max_avail < dev_extent_min)
			continue;
		/* insertion sort: a handful of devices */
		int at = ncand < UB_MAX_STRIPES ? ncand : UB_MAX_STRIPES - 1;
		if (ncand == UB_MAX_STRIPES && !cand_before(&c, &cands[at]))
			continue;
		while (at > 0 && cand_before(&c, &cands[at - 1])) {
			cands[at] = cands[at - 1];
			at--;
		}
		cands[at] = c;
		if (ncand < UB_MAX_STRIPES)
			ncand++;
	}

	use = ncand < devs_max ? ncand : devs_max;
	use -= use % r.devs_increment;
	if (use < r.devs_min || use < 1)
		return -ENOSPC;

	/* the smallest of the chosen devices decides; DUP's max_avail holds both stripes */
	stripe_size = cands[use - 1].max_avail / (uint64_t)r.dev_stripes;
	num_stripes = use * r.dev_stripes;
	data_stripes = (num_stripes - r.nparity) / r.ncopies;
	if (data_stripes < 1)
		return -ENOSPC;
	if (stripe_size * (uint64_t)data_stripes > max_chunk) {
		/* shrink to the cap rounded up to 16 MiB, never above what was there */
		uint64_t s = max_chunk / (uint64_t)data_stripes;

		s = (s + 16 * MiB - 1) / (16 * MiB) * (16 * MiB);
		if (s < stripe_size)
			stripe_size = s;
	}
	if (stripe_size > GiB)
		stripe_size = GiB;
	if (max_logical_hint && stripe_size * (uint64_t)data_stripes > max_logical_hint)
		stripe_size = max_logical_hint / (uint64_t)data_stripes;
	stripe_size -= stripe_size % UB_STRIPE_LEN;
	if (!stripe_size)
		return -ENOSPC;

	memset(out, 0, sizeof(*out));
	out->type = type;
	out->stripe_size = stripe_size;
	out->length = stripe_size * (uint64_t)data_stripes;
	out->num_stripes = num_stripes;
	out->sub_stripes = r.sub_stripes;
	for (int i = 0; i < use; i++)
		for (int j = 0; j < r.dev_stripes; j++) {
			int k = i * r.dev_stripes + j;

			out->stripes[k].devid = devs[cands[i].idx].devid;
			out->stripes[k].physical = cands[i].dev_offset + (uint64_t)j * stripe_size;
		}
	return 0;
}

static int carve(struct ub_dev_space *d, uint64_t start, uint64_t len)
{
	for (int i = 0; i < d->nholes; i++) {
		uint64_t s = d->hole_start[i], e = s + d->hole_len[i];

		if (start < s || start >= e)
			continue;
		if (len > e - start)
			return -EINVAL;
		if (start == s) {
			d->hole_start[i] += len;
			d->hole_len[i] -= len;
		} else if (start + len == e) {
			d->hole_len[i] -= len;
		} else {
			return -EINVAL; /* would split a hole: not a placement of ours */
		}
		if (!d->hole_len[i]) {
			memmove(&d->hole_start[i], &d->hole_start[i + 1], (size_t)(d->nholes - i - 1) * sizeof(uint64_t));
			memmove(&d->hole_len[i], &d->hole_len[i + 1], (size_t)(d->nholes - i - 1) * sizeof(uint64_t));
			d->nholes--;
		}
		return 0;
	}
	return -EINVAL;
}

int ub_chunk_plan_apply(struct ub_dev_space *devs, int ndevs, const struct ub_chunk_plan *plan)
{
	if (plan->num_stripes < 1 || plan->num_stripes > UB_MAX_STRIPES)
		return -EINVAL;
	for (int k = 0; k < plan->num_stripes; k++) {
		struct ub_dev_space *d = NULL;
		int ret;

		for (int i = 0; i < ndevs; i++)
			if (devs[i].devid == plan->stripes[k].devid)
				d = &devs[i];
		if (!d)
			return -EINVAL;
		ret = carve(d, plan->stripes[k].physical, plan->stripe_size);
		if (ret)
			return ret;
	}
	return 0;
}
