/* SPDX-License-Identifier: MIT */
/*
 * RAID5/6 parity (--check-data-csum): every full stripe that holds an extent
 * (data or metadata) is read as stored, strip by strip, and its P and Q
 * compared with what its data strips give, in the sector rows that hold live
 * data only. The kernel computes parity for the rows a write touches (a
 * partial write reads the rest of the row, not of the full stripe), so a row
 * no extent uses may hold leftovers of an older chunk at that place (after a
 * balance) under a parity nobody wrote. The chunk pass marks, as the extent
 * tree streams by, the rows each extent covers (a row mask per full stripe
 * of each RAID5/6 chunk), then each full stripe with marked rows is verified.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check/chunks.h"

static uint64_t full_size(const struct cinfo *ci)
{
	const struct ub_profile *pr = ub_profile_of(ci->type);
	unsigned data = pr && ci->num > (unsigned)pr->nparity ? ci->num - (unsigned)pr->nparity : 0;

	return (uint64_t)data * UB_STRIPE_LEN;
}

static bool is_parity(const struct cinfo *ci)
{
	const struct ub_profile *pr = ub_profile_of(ci->type);

	return pr && pr->nparity > 0 && full_size(ci);
}

void chk_parity_mark(struct cstate *s, struct cinfo *ci, uint64_t logical, uint64_t len)
{
	const struct ub_profile *pr = ub_profile_of(ci->type);
	uint64_t fs, n, off, end;
	unsigned data;

	if (!s->c->opts.check_data_csum || !is_parity(ci) || !len || logical < ci->logical ||
	    UB_STRIPE_LEN / s->sectorsize > 16)
		return;
	fs = full_size(ci);
	data = ci->num - (unsigned)pr->nparity;
	n = (ci->length + fs - 1) / fs;
	if (!ci->full_used) {
		ci->full_used = calloc(n, sizeof(*ci->full_used));
		if (!ci->full_used)
			return; /* verified as far as memory allows: this chunk is not */
	}
	off = logical - ci->logical;
	end = off + len < ci->length ? off + len : ci->length;
	/* strip by strip (a strip is one device's 64 KiB of a full stripe): the rows inside it */
	while (off < end) {
		uint64_t unit = off / UB_STRIPE_LEN, in = off % UB_STRIPE_LEN;
		uint64_t stop = end - off < UB_STRIPE_LEN - in ? in + (end - off) : UB_STRIPE_LEN;
		uint32_t first = (uint32_t)(in / s->sectorsize), last = (uint32_t)((stop - 1) / s->sectorsize);

		for (uint32_t r = first; r <= last; r++)
			ci->full_used[unit / data] |= (uint16_t)(1u << r);
		off += stop - in;
	}
}

static void verify_chunk(struct cstate *s, const struct cinfo *ci)
{
	struct ub_volume *vol = ub_fs_volume(s->fs);
	const struct ub_chunk *c = ub_volume_find_chunk(vol, ci->logical);
	const uint64_t fs = full_size(ci), n = ci->length / fs;
	const char *prof = ub_profile_name(ci->type);

	if (!c || c->logical != ci->logical)
		return;
	for (uint64_t f = 0; f < n; f++) {
		struct ub_chk_problem p;
		int bad, unreadable, row, ret, slot;

		if (!ci->full_used[f])
			continue;
		chk_capture(s->c);
		ret = ub_volume_parity_check(c, f, ci->full_used[f], s->sectorsize, &bad, &unreadable, &row);
		(void)chk_captured(s->c);
		if (ret == -ENOMEM)
			return;
		s->c->sum.parity_stripes++;
		if (ret != 1 && ret != 2)
			continue;
		slot = ret == 2 ? (int)(ci->num - ub_profile_of(ci->type)->nparity) + bad : unreadable;
		{
			const struct ub_stripe *st = &c->stripes[ub_volume_parity_slot(c, f, slot)];

			/* a missing device is said once, in class super */
			if (ret == 1 && !st->dev)
				continue;
			chk_where(&p, BTRFS_CHUNK_TREE_OBJECTID, NULL, ci->logical + f * fs);
			p.cls = UB_CHK_CSUM;
			p.devid = st->devid;
			p.physical = st->physical + f * UB_STRIPE_LEN;
			if (ret == 2)
				chk_report(s->c, &p, "%s full stripe [%llu, +%llu): %s (devid %llu physical %llu) does not match its data strips (first in sector row %d, at physical %llu)",
					   prof, (unsigned long long)(ci->logical + f * fs), (unsigned long long)fs,
					   bad ? "Q" : "P", (unsigned long long)st->devid, (unsigned long long)p.physical, row,
					   (unsigned long long)(p.physical + (uint64_t)row * s->sectorsize));
			else
				chk_report(s->c, &p, "%s full stripe [%llu, +%llu): strip %d (devid %llu physical %llu) cannot be read",
					   prof, (unsigned long long)(ci->logical + f * fs), (unsigned long long)fs, slot,
					   (unsigned long long)st->devid, (unsigned long long)p.physical);
		}
		if (!(s->c->sum.parity_stripes & 255))
			chk_progress(s->c, "parity", s->c->sum.parity_stripes, 0);
	}
}

void chk_parity_verify(struct cstate *s)
{
	for (size_t i = 0; i < s->nch; i++)
		if (s->ch[i].full_used)
			verify_chunk(s, &s->ch[i]);
}
