/* SPDX-License-Identifier: MIT */
/*
 * The write engine measured through the library, for bench/engine:
 *
 *   bench_engine write MIB PATTERN DEV...
 *                                   one file of MIB MiB written through the
 *                                   file API in 1 MiB calls, committed every
 *                                   256 MiB and at the end (the commit flushes
 *                                   every device); prints "write SECONDS". The
 *                                   bytes are read from PATTERN 1 MiB at a
 *                                   time, as dd reads them on the kernel's side
 *   bench_engine pattern MIB FILE   the same data into FILE (for the kernel side)
 *   bench_engine commit N DEV...    N empty files created in one transaction,
 *                                   then the commit timed alone; prints
 *                                   "commit SECONDS BLOCKS" (tree blocks the
 *                                   commit wrote)
 *
 * The data is a fixed pseudo-random pattern, the same bench/engine gives the
 * kernel, so neither side gains from compression or zero detection.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "ubtrfs/fswrite.h"
#include "txn/txn.h"

#define FS_TREE 5
#define TOP_DIR 256

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* xorshift64: the pattern bench/engine also writes through the kernel */
static void fill(uint8_t *buf, size_t len, uint64_t *st)
{
	for (size_t i = 0; i + 8 <= len; i += 8) {
		uint64_t x = *st;

		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		*st = x;
		memcpy(buf + i, &x, 8);
	}
}

static int bench_write(struct ub_engine *e, uint64_t mib, const char *pattern)
{
	const size_t chunk = 1 << 20;
	uint8_t *buf = malloc(chunk);
	struct ub_txn *t = NULL;
	uint64_t ino;
	double t0;
	int ret, fd = open(pattern, O_RDONLY);

	if (!buf || fd < 0) {
		ret = -errno;
		free(buf);
		if (fd >= 0)
			close(fd);
		return ret;
	}
	t0 = now();
	ret = ub_txn_start(e, &t);
	if (!ret)
		ret = ub_fsw_create(t, FS_TREE, TOP_DIR, "big", 3, S_IFREG | 0644, 0, 0, 0, &ino);
	for (uint64_t i = 0; !ret && i < mib; i++) {
		if (pread(fd, buf, chunk, (off_t)(i * chunk)) != (ssize_t)chunk)
			ret = -EIO;
		if (!ret)
			ret = ub_fsw_write(t, FS_TREE, ino, i * chunk, buf, chunk);
		if (!ret && (i + 1) % 256 == 0 && i + 1 < mib) {
			ret = ub_txn_commit(t);
			t = NULL;
			if (!ret)
				ret = ub_txn_start(e, &t);
		}
	}
	if (!ret) {
		ret = ub_txn_commit(t);
		t = NULL;
	}
	if (t)
		ub_txn_abort(t);
	if (!ret)
		printf("write %.3f\n", now() - t0);
	close(fd);
	free(buf);
	return ret;
}

static int bench_commit(struct ub_engine *e, unsigned n)
{
	struct ub_txn *t = NULL;
	unsigned blocks;
	double t0;
	int ret;

	ret = ub_txn_start(e, &t);
	for (unsigned i = 0; !ret && i < n; i++) {
		char name[32];
		uint64_t ino;
		int len = snprintf(name, sizeof(name), "f%07u", i);

		ret = ub_fsw_create(t, FS_TREE, TOP_DIR, name, (size_t)len, S_IFREG | 0644, 0, 0, 0, &ino);
	}
	if (ret) {
		if (t)
			ub_txn_abort(t);
		return ret;
	}
	blocks = e->fs.tc.ndirty; /* grows during the commit (extent and space trees): a lower bound */
	t0 = now();
	ret = ub_txn_commit(t);
	if (!ret)
		printf("commit %.6f %u\n", now() - t0, blocks);
	return ret;
}

static int write_pattern(uint64_t mib, const char *path)
{
	const size_t chunk = 1 << 20;
	uint8_t *buf = malloc(chunk);
	uint64_t st = 0x9e3779b97f4a7c15ULL;
	FILE *f = fopen(path, "wb");
	int ret = 0;

	if (!buf || !f)
		ret = -errno;
	for (uint64_t i = 0; !ret && i < mib; i++) {
		fill(buf, chunk, &st);
		if (fwrite(buf, 1, chunk, f) != chunk)
			ret = -EIO;
	}
	if (f && fclose(f) && !ret)
		ret = -EIO;
	free(buf);
	return ret;
}

int main(int argc, char **argv)
{
	struct ub_engine *e = NULL;
	int ret;

	if (argc == 4 && strcmp(argv[1], "pattern") == 0) {
		ret = write_pattern(strtoull(argv[2], NULL, 0), argv[3]);
		if (ret)
			fprintf(stderr, "bench_engine: pattern: %s\n", strerror(-ret));
		return ret ? 1 : 0;
	}

	bool wr = argc >= 5 && strcmp(argv[1], "write") == 0;

	if (!wr && (argc < 4 || strcmp(argv[1], "commit"))) {
		fprintf(stderr, "usage: bench_engine write MIB PATTERN DEV... | bench_engine commit N DEV...\n");
		return 2;
	}
	ret = ub_engine_open((const char *const *)argv + 3 + wr, argc - 3 - wr, NULL, &e);
	if (ret) {
		fprintf(stderr, "bench_engine: open: %s\n", strerror(-ret));
		return 2;
	}
	if (wr)
		ret = bench_write(e, strtoull(argv[2], NULL, 0), argv[3]);
	else
		ret = bench_commit(e, (unsigned)strtoul(argv[2], NULL, 0));
	if (ret)
		fprintf(stderr, "bench_engine: %s: %s\n", argv[1], strerror(-ret));
	ub_engine_close(e);
	return ret ? 1 : 0;
}
