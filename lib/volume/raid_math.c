/* SPDX-License-Identifier: MIT */
/*
 * RAID5/6 parity algebra over in-memory stripes, through ISA-L: P is the XOR
 * of the data stripes, Q the GF(2^8) sum of 2^i * data_i (polynomial 0x11d,
 * as the kernel's raid6 code). Recovery treats the stripes of a full stripe as
 * rows of a matrix over the data (data: identity, P: ones, Q: powers of 2),
 * inverts the rows that survive and recomputes what was lost.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <isa-l.h>
#include "volume_internal.h"

static void stripe_row(int i, int n, uint8_t *row)
{
	uint8_t g = 1;

	for (int k = 0; k < n; k++) {
		if (i < n)
			row[k] = (uint8_t)(k == i);
		else if (i == n)
			row[k] = 1;
		else
			row[k] = g;
		g = gf_mul(g, 2);
	}
}

int ub_raid_gen_parity(int ndata, int nparity, uint8_t **stripes, size_t len)
{
	uint8_t *tbls, coef[2 * UB_RAID_MAX_STRIPES];

	if (ndata < 1 || nparity < 1 || nparity > 2 || ndata + nparity > UB_RAID_MAX_STRIPES || len > INT32_MAX)
		return -EINVAL;
	bool aligned = true;

	for (int i = 0; i < ndata + nparity && ndata + nparity <= UB_RAID_MAX_STRIPES; i++)
		aligned &= ((uintptr_t)stripes[i] & 31) == 0;
	/*
	 * xor_gen/pq_gen want 32-byte multiples at 32-byte aligned addresses and
	 * more than one source; the table path takes anything
	 */
	if (aligned && len % 32 == 0 && ndata >= 2) {
		if (nparity == 1)
			return xor_gen(ndata + 1, (int)len, (void **)stripes) ? -EIO : 0;
		return pq_gen(ndata + 2, (int)len, (void **)stripes) ? -EIO : 0;
	}
	for (int p = 0; p < nparity; p++)
		stripe_row(ndata + p, ndata, coef + p * ndata);
	tbls = malloc((size_t)32 * ndata * nparity);
	if (!tbls)
		return -ENOMEM;
	ec_init_tables(ndata, nparity, coef, tbls);
	ec_encode_data((int)len, ndata, nparity, tbls, stripes, stripes + ndata);
	free(tbls);
	return 0;
}

int ub_raid_recover(int ndata, int nparity, uint8_t **stripes, const bool *lost, size_t len)
{
	const int total = ndata + nparity;
	uint8_t mat[UB_RAID_MAX_STRIPES * UB_RAID_MAX_STRIPES];
	uint8_t inv[UB_RAID_MAX_STRIPES * UB_RAID_MAX_STRIPES];
	uint8_t coef[2 * UB_RAID_MAX_STRIPES];
	uint8_t *srcs[UB_RAID_MAX_STRIPES], *outs[2], *tbls;
	int rows[UB_RAID_MAX_STRIPES], nsurv = 0, nout = 0, ret = 0;
	bool parity_lost = false;

	if (ndata < 1 || nparity < 1 || nparity > 2 || total > UB_RAID_MAX_STRIPES || len > INT32_MAX)
		return -EINVAL;
	for (int i = 0; i < total && nsurv < ndata; i++)
		if (!lost[i])
			rows[nsurv++] = i;
	if (nsurv < ndata)
		return -EIO;
	for (int r = 0; r < ndata; r++) {
		stripe_row(rows[r], ndata, mat + r * ndata);
		srcs[r] = stripes[rows[r]];
	}
	if (gf_invert_matrix(mat, inv, ndata))
		return -EIO;
	tbls = malloc((size_t)32 * ndata * 2);
	if (!tbls)
		return -ENOMEM;
	/* lost data: its row of the inverse, over the survivors (at most two at a time) */
	for (int d = 0; d < ndata; d++) {
		if (!lost[d])
			continue;
		memcpy(coef + nout * ndata, inv + d * ndata, (size_t)ndata);
		outs[nout++] = stripes[d];
		if (nout == 2) {
			ec_init_tables(ndata, nout, coef, tbls);
			ec_encode_data((int)len, ndata, nout, tbls, srcs, outs);
			nout = 0;
		}
	}
	if (nout) {
		ec_init_tables(ndata, nout, coef, tbls);
		ec_encode_data((int)len, ndata, nout, tbls, srcs, outs);
	}
	free(tbls);
	for (int p = ndata; p < total; p++)
		parity_lost |= lost[p];
	/* lost parity: regenerate from the (now complete) data */
	if (parity_lost) {
		uint8_t *tmp[UB_RAID_MAX_STRIPES];
		for (int i = 0; i < total; i++)
			tmp[i] = stripes[i];
		ret = ub_raid_gen_parity(ndata, nparity, tmp, len);
	}
	return ret;
}
