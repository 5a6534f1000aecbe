/* SPDX-License-Identifier: MIT */
/*
 * RAID5/6 parity (--check-data-csum): every full stripe that holds an extent
 * (data or metadata) is read as stored, strip by strip, and its P and Q
 * compared with what its data strips give. A full stripe no extent touches
 * is left alone: parts of the disk no commit wrote hold whatever was there.
 * The chunk pass marks the full stripes as the extent tree streams by (a bit
 * per full stripe of each RAID5/6 chunk), then each marked one is verified.
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
	uint64_t fs, first, last, n;

	if (!s->c->opts.check_data_csum || !is_parity(ci) || !len || logical < ci->logical)
		return;
	fs = full_size(ci);
	n = (ci->length + fs - 1) / fs;
	if (!ci->full_used) {
		ci->full_used = calloc((n + 63) / 64, sizeof(uint64_t));
		if (!ci->full_used)
			return; /* verified as far as memory allows: this chunk is not */
	}
	first = (logical - ci->logical) / fs;
	last = (logical - ci->logical + len - 1) / fs;
	for (uint64_t f = first; f <= last && f < n; f++)
		ci->full_used[f / 64] |= 1ULL << (f % 64);
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
		int bad, unreadable, ret, slot;

		if (!(ci->full_used[f / 64] & (1ULL << (f % 64))))
			continue;
		chk_capture(s->c);
		ret = ub_volume_parity_check(c, f, &bad, &unreadable);
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
				chk_report(s->c, &p, "%s full stripe [%llu, +%llu): %s (devid %llu physical %llu) does not match its data strips",
					   prof, (unsigned long long)(ci->logical + f * fs), (unsigned long long)fs,
					   bad ? "Q" : "P", (unsigned long long)st->devid, (unsigned long long)p.physical);
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
