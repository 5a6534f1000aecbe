/* SPDX-License-Identifier: MIT */
/*
 * The decoding floor of a compressed file, for bench/read.d/20-compress: the
 * file's compressed extents (one "logical disk_len ram_len type" line each on
 * stdin, type as in the extent item: 1 zlib, 2 lzo, 3 zstd) are read into
 * memory first (untimed), then decoded with the library's decoders
 * (ub_decompress: libzstd, libdeflate/zlib, liblzo2) on THREADS threads, each
 * taking the next extent. Each extent is first copied (untimed) into a buffer
 * of the thread's own, so that the decoder reads it from the CPU's cache as a
 * reader does right after reading it: decoding straight out of hundreds of MiB
 * of cold memory was up to twice as slow on this project's VM (TLB misses)
 * and made a "floor" slower than ubtrfs cat itself. Only the decoder calls are
 * timed, in each thread's CPU time. What it prints, "seconds extents
 * bytes_out cpu_seconds", is cpu_seconds (the decoders' CPU time summed over
 * the threads) and seconds = cpu_seconds / THREADS: the wall time of the
 * decoding alone if it were spread evenly over THREADS otherwise idle cores.
 * No reader of these extents that uses these libraries can be faster than
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

static double thread_cpu(void)
{
	struct timespec t;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* returns NULL, or 1 on a failure; the decoders' CPU seconds go into *arg */
static void *decoder(void *arg)
{
	double *cpu = arg;
	uint8_t *out = malloc(128 * 1024), *in = malloc(128 * 1024);
	size_t i;

	if (!out || !in) {
		free(out);
		free(in);
		return (void *)1;
	}
	*cpu = 0;
	while ((i = __atomic_fetch_add(&next_ext, 1, __ATOMIC_RELAXED)) < nexts) {
		size_t produced;
		char why[160];
		double t0;
		int ret;

		memcpy(in, exts[i].in, exts[i].inlen);
		t0 = thread_cpu();
		ret = ub_decompress(exts[i].type, in, exts[i].inlen, out, exts[i].outlen, sectorsize, &produced, why,
				    sizeof(why));
		*cpu += thread_cpu() - t0;
		if (ret) {
			fprintf(stderr, "bench_decode: extent %zu: %s\n", i, why);
			free(out);
			free(in);
			return (void *)1;
		}
	}
	free(out);
	free(in);
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
	double cpu[16], total = 0;
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
	for (int i = 0; i < nth; i++)
		if (pthread_create(&th[i], NULL, decoder, &cpu[i]))
			return 2;
	for (int i = 0; i < nth; i++) {
		void *r;

		pthread_join(th[i], &r);
		failed |= r != NULL;
		total += cpu[i];
	}
	printf("%.4f %zu %llu %.4f\n", total / nth, nexts, (unsigned long long)out_bytes, total);
	for (size_t i = 0; i < nexts; i++)
		free(exts[i].in);
	free(exts);
	ub_fs_close(fs);
	return failed ? 1 : 0;
}
