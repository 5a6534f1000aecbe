/* SPDX-License-Identifier: MIT */
/*
 * Library throughput next to memcpy, for bench/read: crc32c per 4 KiB sector
 * (as the data path checksums), RAID6 P/Q over 4 data stripes of 64 KiB
 * (a full stripe of a 6-device RAID6), and memcpy, each over one 64 MiB buffer.
 * Prints "name seconds MB/s" lines; the best of several passes counts.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "ubtrfs/format.h"
#include "volume/volume_internal.h"

#define BUF_SIZE (64u << 20)
#define SECTOR 4096u
#define STRIPE (64u << 10)
#define NDATA 4
#define PASSES 5

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void report(const char *name, double secs)
{
	printf("%s %.6f %.1f\n", name, secs, (double)BUF_SIZE / secs / 1e6);
}

int main(void)
{
	uint8_t *src = aligned_alloc(64, BUF_SIZE), *dst = aligned_alloc(64, BUF_SIZE);
	uint8_t *parity = aligned_alloc(64, 2 * (BUF_SIZE / NDATA));
	uint8_t out[UB_CSUM_SIZE_MAX];
	volatile uint8_t sink = 0; /* volatile: the checksums must really be computed */
	double best_crc = 1e9, best_pq = 1e9, best_cpy = 1e9;
	int ret = 1;

	if (!src || !dst || !parity)
		goto out;
	for (size_t i = 0; i < BUF_SIZE; i++)
		src[i] = (uint8_t)(i * 2654435761u >> 13);
	memset(dst, 0, BUF_SIZE);
	memset(parity, 0, 2 * (BUF_SIZE / NDATA));
	for (int pass = 0; pass < PASSES; pass++) {
		double t = now();
		for (size_t off = 0; off < BUF_SIZE; off += SECTOR) {
			if (ub_csum(0, src + off, SECTOR, out))
				goto out;
			sink ^= out[0];
		}
		t = now() - t;
		if (t < best_crc)
			best_crc = t;

		t = now();
		for (size_t off = 0, fs = 0; off < BUF_SIZE; off += NDATA * STRIPE, fs++) {
			uint8_t *s[NDATA + 2];
			for (int d = 0; d < NDATA; d++)
				s[d] = src + off + (size_t)d * STRIPE;
			s[NDATA] = parity + fs * 2 * STRIPE;
			s[NDATA + 1] = s[NDATA] + STRIPE;
			if (ub_raid_gen_parity(NDATA, 2, s, STRIPE))
				goto out;
		}
		t = now() - t;
		if (t < best_pq)
			best_pq = t;

		t = now();
		memcpy(dst, src, BUF_SIZE);
		t = now() - t;
		sink ^= dst[pass];
		if (t < best_cpy)
			best_cpy = t;
	}
	report("crc32c_4k", best_crc);
	report("raid6_pq_4+2", best_pq);
	report("memcpy", best_cpy);
	printf("# fold %u\n", (unsigned)sink);
	ret = 0;
out:
	free(src);
	free(dst);
	free(parity);
	return ret;
}
