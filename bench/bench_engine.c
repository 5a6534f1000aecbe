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
 *   bench_engine creates N T DEV... N empty files created through the file
 *                                   API by T threads, each in a directory of
 *                                   its own, one operation per file (begin,
 *                                   create, end); prints "creates SECONDS
 *                                   MAXRSS_KIB" (the creates alone, then a
 *                                   commit not timed)
 *   bench_engine kcreates N T DIR   the same through the kernel: T threads,
 *                                   open(O_CREAT) + close of N files in T
 *                                   directories under DIR; "creates SECONDS"
 *   bench_engine statlat MIB DEV... one thread writes MIB MiB into a file in
 *                                   one transaction and commits it, while
 *                                   another stats a file through the
 *                                   filesystem's handle (the last commit) in
 *                                   a loop; prints "stat N P50_US P99_US
 *                                   MAX_US" for the stats during the commit,
 *                                   then the same for the whole run
 *
 * The data is a fixed pseudo-random pattern, the same bench/engine gives the
 * kernel, so neither side gains from compression or zero detection.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/resource.h>
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

/* ---- creates ---- */

struct cr {
	struct ub_engine *e;
	uint64_t dir;
	unsigned n, tid;
	int ret;
};

static void *cr_main(void *arg)
{
	struct cr *c = arg;

	for (unsigned i = 0; !c->ret && i < c->n; i++) {
		struct ub_txn *t;
		char name[32];
		uint64_t ino;
		int len = snprintf(name, sizeof(name), "f%u-%07u", c->tid, i);

		c->ret = ub_fsw_begin(c->e, UB_FSW_OP_CREATE, 0, &t);
		if (c->ret)
			break;
		c->ret = ub_fsw_create(t, FS_TREE, c->dir, name, (size_t)len, S_IFREG | 0644, 0, 0, 0, &ino);
		ub_fsw_end(c->e);
	}
	return NULL;
}

static int bench_creates(struct ub_engine *e, unsigned n, unsigned nt)
{
	struct cr c[64];
	pthread_t th[64];
	struct ub_txn *t;
	struct rusage ru;
	double t0, t1;
	int ret;

	if (nt < 1 || nt > 64)
		return -EINVAL;
	ret = ub_fsw_begin(e, UB_FSW_OP_CREATE, 0, &t);
	for (unsigned i = 0; !ret && i < nt; i++) {
		char name[16];
		int len = snprintf(name, sizeof(name), "d%u", i);

		c[i] = (struct cr){ .e = e, .n = n / nt, .tid = i };
		ret = ub_fsw_mkdir(t, FS_TREE, TOP_DIR, name, (size_t)len, 0755, 0, 0, &c[i].dir);
	}
	if (!ret)
		ub_fsw_end(e);
	if (!ret)
		ret = ub_engine_commit(e);
	if (ret)
		return ret;
	t0 = now();
	for (unsigned i = 0; i < nt; i++)
		pthread_create(&th[i], NULL, cr_main, &c[i]);
	for (unsigned i = 0; i < nt; i++) {
		pthread_join(th[i], NULL);
		if (c[i].ret && !ret)
			ret = c[i].ret;
	}
	t1 = now();
	if (!ret)
		ret = ub_engine_commit(e);
	getrusage(RUSAGE_SELF, &ru);
	if (!ret)
		printf("creates %.6f %ld\n", t1 - t0, ru.ru_maxrss);
	return ret;
}

struct kc {
	char dir[4096];
	unsigned n, tid;
	int ret;
};

static void *kc_main(void *arg)
{
	struct kc *k = arg;
	char path[4200];

	for (unsigned i = 0; !k->ret && i < k->n; i++) {
		int fd;

		snprintf(path, sizeof(path), "%s/f%u-%07u", k->dir, k->tid, i);
		fd = open(path, O_CREAT | O_EXCL | O_WRONLY, 0644);
		if (fd < 0)
			k->ret = -errno;
		else
			close(fd);
	}
	return NULL;
}

static int bench_kcreates(unsigned n, unsigned nt, const char *top)
{
	struct kc k[64];
	pthread_t th[64];
	double t0, t1;
	int ret = 0;

	if (nt < 1 || nt > 64)
		return -EINVAL;
	for (unsigned i = 0; i < nt; i++) {
		k[i] = (struct kc){ .n = n / nt, .tid = i };
		snprintf(k[i].dir, sizeof(k[i].dir), "%s/d%u", top, i);
		if (mkdir(k[i].dir, 0755) && errno != EEXIST)
			return -errno;
	}
	t0 = now();
	for (unsigned i = 0; i < nt; i++)
		pthread_create(&th[i], NULL, kc_main, &k[i]);
	for (unsigned i = 0; i < nt; i++) {
		pthread_join(th[i], NULL);
		if (k[i].ret && !ret)
			ret = k[i].ret;
	}
	t1 = now();
	if (!ret)
		printf("creates %.6f\n", t1 - t0);
	return ret;
}

/* ---- stat latency during a commit ---- */

struct sl {
	struct ub_engine *e;
	uint64_t ino;
	atomic_int phase; /* 0 writing, 1 committing, 2 done */
	double *lat[2];
	size_t n[2], cap;
	int ret;
};

static void *sl_main(void *arg)
{
	struct sl *s = arg;
	struct ub_fs *fs = ub_engine_fs(s->e);
	int ph;

	while ((ph = atomic_load(&s->phase)) < 2) {
		struct ub_inode in;
		double t0 = now(), d;
		int ret = ub_inode_read(fs, FS_TREE, s->ino, &in);

		d = now() - t0;
		if (ret) {
			s->ret = ret;
			break;
		}
		if (s->n[ph] < s->cap)
			s->lat[ph][s->n[ph]++] = d;
	}
	return NULL;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static void print_lat(const char *what, double *v, size_t n)
{
	if (!n) {
		printf("%s 0 0 0 0\n", what);
		return;
	}
	qsort(v, n, sizeof(*v), cmp_d);
	printf("%s %zu %.1f %.1f %.1f\n", what, n, v[n / 2] * 1e6, v[n * 99 / 100] * 1e6, v[n - 1] * 1e6);
}

static int bench_statlat(struct ub_engine *e, uint64_t mib)
{
	const size_t chunk = 1 << 20;
	struct sl s = { .e = e, .cap = 20000000 };
	uint8_t *buf = malloc(chunk);
	uint64_t st = 0x9e3779b97f4a7c15ULL, ino;
	pthread_t th;
	struct ub_txn *t;
	double tw, tc;
	int ret;

	s.lat[0] = malloc(s.cap * sizeof(double));
	s.lat[1] = malloc(s.cap * sizeof(double));
	if (!buf || !s.lat[0] || !s.lat[1])
		return -ENOMEM;
	/* the file stat'ed, committed first */
	ret = ub_fsw_begin(e, UB_FSW_OP_CREATE, 0, &t);
	if (!ret)
		ret = ub_fsw_create(t, FS_TREE, TOP_DIR, "probe", 5, S_IFREG | 0644, 0, 0, 0, &s.ino);
	if (!ret)
		ret = ub_fsw_create(t, FS_TREE, TOP_DIR, "big", 3, S_IFREG | 0644, 0, 0, 0, &ino);
	if (!ret)
		ub_fsw_end(e);
	if (!ret)
		ret = ub_engine_commit(e);
	if (ret)
		return ret;
	/* the whole write in one transaction: the commit then has it all to settle and write */
	ub_engine_set_dirty_budget(e, 1ULL << 40);
	pthread_create(&th, NULL, sl_main, &s);
	tw = now();
	for (uint64_t i = 0; !ret && i < mib; i++) {
		fill(buf, chunk, &st);
		ret = ub_fsw_begin(e, UB_FSW_OP_WRITE, chunk, &t);
		if (ret)
			break;
		ret = ub_fsw_write(t, FS_TREE, ino, i * chunk, buf, chunk);
		ub_fsw_end(e);
	}
	tw = now() - tw;
	atomic_store(&s.phase, 1);
	tc = now();
	if (!ret)
		ret = ub_engine_commit(e);
	tc = now() - tc;
	atomic_store(&s.phase, 2);
	pthread_join(th, NULL);
	if (!ret)
		ret = s.ret;
	if (!ret) {
		printf("write %.3f commit %.3f\n", tw, tc);
		print_lat("stat-commit", s.lat[1], s.n[1]);
		memcpy(s.lat[1] + s.n[1], s.lat[0], (s.n[0] < s.cap - s.n[1] ? s.n[0] : s.cap - s.n[1]) * sizeof(double));
		print_lat("stat-all", s.lat[1], s.n[1] + (s.n[0] < s.cap - s.n[1] ? s.n[0] : s.cap - s.n[1]));
	}
	free(s.lat[0]);
	free(s.lat[1]);
	free(buf);
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

	if (argc == 5 && strcmp(argv[1], "kcreates") == 0) {
		ret = bench_kcreates((unsigned)strtoul(argv[2], NULL, 0), (unsigned)strtoul(argv[3], NULL, 0), argv[4]);
		if (ret)
			fprintf(stderr, "bench_engine: kcreates: %s\n", strerror(-ret));
		return ret ? 1 : 0;
	}
	if (argc >= 5 && strcmp(argv[1], "creates") == 0) {
		ret = ub_engine_open((const char *const *)argv + 4, argc - 4, NULL, &e);
		if (!ret)
			ret = bench_creates(e, (unsigned)strtoul(argv[2], NULL, 0), (unsigned)strtoul(argv[3], NULL, 0));
		if (ret)
			fprintf(stderr, "bench_engine: creates: %s\n", strerror(-ret));
		ub_engine_close(e);
		return ret ? 1 : 0;
	}
	if (argc >= 4 && strcmp(argv[1], "statlat") == 0) {
		ret = ub_engine_open((const char *const *)argv + 3, argc - 3, NULL, &e);
		if (!ret)
			ret = bench_statlat(e, strtoull(argv[2], NULL, 0));
		if (ret)
			fprintf(stderr, "bench_engine: statlat: %s\n", strerror(-ret));
		ub_engine_close(e);
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
