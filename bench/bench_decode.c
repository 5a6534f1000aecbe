/* SPDX-License-Identifier: MIT */
/*
 * The decoding floor of a compressed file, for bench/read.d/20-compress: the
 * file's compressed extents (one "logical disk_len ram_len type" line each on
 * stdin, type as in the extent item: 1 zlib, 2 lzo, 3 zstd) are read into
 * memory first (untimed), then decoded with the library's decoders
 * (ub_decompress: libzstd, libdeflate/zlib, liblzo2) on THREADS threads, each
 * taking the next extent, as fast as they go. What it prints, "seconds
 * extents bytes_out", is what decoding alone costs on this machine's cores:
 * no reader of these extents that uses these libraries can be faster than
 * that (the kernel decodes with decoders of its own).
 *
 * Usage: bench_decode IMAGE THREADS < extents
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "fs/compress.h"
#include "ubtrfs/fs.h"
#include "ubtrfs/devinfo.h"
#include "ubtrfs/fsinfo.h"
#include "ubtrfs/volume.h"

struct ext {
	uint8_t *in;
	uint64_t inlen, outlen;
	int type;
};

static struct ext *exts;
static size_t nexts;
static size_t next_ext; /* atomic */
static uint32_t sectorsize;

static void *decoder(void *arg)
{
	uint8_t *out = malloc(128 * 1024);
	size_t i;

	(void)arg;
	if (!out)
		return (void *)1;
	while ((i = __atomic_fetch_add(&next_ext, 1, __ATOMIC_RELAXED)) < nexts) {
		size_t produced;
		char why[160];

		if (ub_decompress(exts[i].type, exts[i].in, exts[i].inlen, out, exts[i].outlen, sectorsize, &produced, why,
				  sizeof(why))) {
			fprintf(stderr, "bench_decode: extent %zu: %s\n", i, why);
			free(out);
			return (void *)1;
		}
	}
	free(out);
	return NULL;
}

int main(int argc, char **argv)
{
	const char *paths[1];
	struct ub_fs *fs = NULL;
	struct ub_fs_opts opts = { 0 };
	struct ub_volume_info vi;
	pthread_t th[16];
	unsigned long long logical, dlen, ram;
	size_t cap = 0;
	uint64_t out_bytes = 0;
	struct timespec t0, t1;
	int type, nth, failed = 0;

	if (argc != 3 || (nth = atoi(argv[2])) < 1 || nth > 16) {
		fprintf(stderr, "usage: bench_decode IMAGE THREADS < extents\n");
		return 2;
	}
	paths[0] = argv[1];
	if (ub_fs_open(paths, 1, &opts, NULL, &fs) || ub_volume_get_info(ub_fs_volume(fs), &vi)) {
		fprintf(stderr, "bench_decode: cannot open %s\n", argv[1]);
		return 2;
	}
	sectorsize = vi.sectorsize;
	while (scanf("%llu %llu %llu %d", &logical, &dlen, &ram, &type) == 4) {
		if (nexts == cap) {
			cap = cap ? cap * 2 : 1024;
			exts = realloc(exts, cap * sizeof(*exts));
			if (!exts)
				return 2;
		}
		exts[nexts] = (struct ext){ .in = malloc(dlen), .inlen = dlen, .outlen = ram, .type = type };
		if (!exts[nexts].in || dlen > 128 * 1024 || ram > 128 * 1024 ||
		    ub_volume_read(ub_fs_volume(fs), logical, dlen, 0, exts[nexts].in)) {
			fprintf(stderr, "bench_decode: cannot read the extent at %llu\n", logical);
			return 2;
		}
		out_bytes += ram;
		nexts++;
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int i = 0; i < nth; i++)
		if (pthread_create(&th[i], NULL, decoder, NULL))
			return 2;
	for (int i = 0; i < nth; i++) {
		void *r;

		pthread_join(th[i], &r);
		failed |= r != NULL;
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("%.4f %zu %llu\n", (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9, nexts,
	       (unsigned long long)out_bytes);
	for (size_t i = 0; i < nexts; i++)
		free(exts[i].in);
	free(exts);
	ub_fs_close(fs);
	return failed ? 1 : 0;
}
