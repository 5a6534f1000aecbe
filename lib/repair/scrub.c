/* SPDX-License-Identifier: MIT */
/*
 * Repair of bad copies: a tree block or a data sector one of whose copies
 * fails its checksum while another passes is scrub's job (lib/scrub), and the
 * repair runs it first, through the repair's engine (so its writes go through
 * the undo device too): every copy verified, the bad ones rewritten from a
 * good one; a range with no good copy is left (no bytes are made up).
 */
#include <errno.h>
#include <string.h>
#include "ubtrfs/scrub.h"
#include "repair/repair_priv.h"

int rp_scrub(struct rp_ctx *c, const struct rp_note *n)
{
	struct ub_scrub_opts so = { .readonly = false };
	struct ub_scrub *s = NULL;
	uint64_t devids[64], fixed = 0, left = 0;
	int nd, ret = ub_scrub_new(ub_engine_fs(c->e), c->e, &so, NULL, &s);

	if (!ret)
		ret = ub_scrub_run(s);
	if (ret) {
		ub_err(c->log, "repair: the scrub that rewrites bad copies failed: %s", strerror(-ret));
		ub_scrub_free(s);
		return ret;
	}
	nd = ub_scrub_devids(s, devids, 64);
	for (int i = 0; i < nd && i < 64; i++) {
		struct ub_scrub_dev_progress pr;

		if (ub_scrub_progress(s, devids[i], &pr))
			continue;
		fixed += pr.corrected_errors + pr.parity_fixed;
		left += pr.uncorrectable_errors;
	}
	ub_scrub_free(s);
	rp_say(c, n, 0, "scrub: %llu sectors of bad copies rewritten from good ones%s", (unsigned long long)fixed,
	       left ? ", some with no good copy left as they are" : "");
	return 0;
}
