// SPDX-License-Identifier: MIT
/*
 * Cost of one cached tree block lookup (ub_tree_read_block + ub_eb_put of a
 * block already in the cache), in one thread and in several at once, over
 * every block of an image's fs tree. Uses only calls the cache had before it
 * took a lock, so the same file built against an older libubtrfs.a gives the
 * "before" figure (one thread only: the cache before the lock was not safe for more).
 *
 * Usage: bench_cache IMAGE [threads] (make bench-cache makes an image and runs it)
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ubtrfs/fs.h"
#include "fs/fs_priv.h"

#define MAX_BLOCKS 65536
#define LOOKUPS 2000000

static struct {
	struct ub_fs *fs;
	uint64_t addr[MAX_BLOCKS], owner[MAX_BLOCKS];
	int level[MAX_BLOCKS];
	size_t n;
} B;

static int collect(void *arg, const struct ub_eb *eb)
{
	(void)arg;
	if (B.n < MAX_BLOCKS) {
		B.addr[B.n] = eb->start;
		B.owner[B.n] = ub_eb_owner(eb);
		B.level[B.n] = ub_eb_level(eb);
		B.n++;
	}
	return 0;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *lookups(void *arg)
{
	unsigned seed = (unsigned)(uintptr_t)arg;
	long bad = 0;

	for (long i = 0; i < LOOKUPS; i++) {
		size_t k = (size_t)rand_r(&seed) % B.n;
		struct ub_expect e = { B.owner[k], B.level[k], 0, NULL, NULL, 0, -1 };
		struct ub_eb *eb;

		if (ub_tree_read_block(&B.fs->tc, B.addr[k], &e, &eb)) {
			bad++;
			continue;
		}
		ub_eb_put(&B.fs->tc, eb);
	}
	return (void *)bad;
}

int main(int argc, char **argv)
{
	const char *paths[1];
	struct ub_fs_opts opts = { .writable = false, .super_mirror = -1, .no_log = true };
	struct ub_block_set seen = { 0 };
	struct ub_root root;
	int maxthreads = argc > 2 ? atoi(argv[2]) : 4;

	if (argc < 2) {
		fprintf(stderr, "usage: %s IMAGE [threads]\n", argv[0]);
		return 2;
	}
	paths[0] = argv[1];
	if (ub_fs_open(paths, 1, &opts, NULL, &B.fs) || ub_fs_tree_root(B.fs, BTRFS_FS_TREE_OBJECTID, &root) ||
	    ub_tree_walk(&B.fs->tc, &root, &seen, BTRFS_FS_TREE_OBJECTID, collect, NULL) || !B.n) {
		fprintf(stderr, "%s: cannot open or walk the fs tree\n", argv[1]);
		return 1;
	}
	ub_block_set_free(&seen);
	lookups((void *)1); /* warm: every block cached (the default limit holds them all) */
	printf("%zu fs tree blocks, %d lookups per thread\n", B.n, LOOKUPS);
	for (int t = 1; t <= maxthreads; t *= 2) {
		pthread_t th[64];
		long bad = 0;
		double t0 = now(), dt;

		for (int i = 0; i < t; i++)
			pthread_create(&th[i], NULL, lookups, (void *)(uintptr_t)(i + 2));
		for (int i = 0; i < t; i++) {
			void *r;
			pthread_join(th[i], &r);
			bad += (long)r;
		}
		dt = now() - t0;
		printf("%d thread%s: %.1f ns per lookup (wall / all lookups), %.1f M lookups/s%s\n", t, t > 1 ? "s" : " ",
		       dt * 1e9 / ((double)LOOKUPS * t), (double)LOOKUPS * t / dt / 1e6, bad ? "  LOOKUPS FAILED" : "");
	}
	ub_fs_close(B.fs);
	return 0;
}
