/* SPDX-License-Identifier: MIT */
/*
 * Test driver for scrub's crash test (tests/integration/test_scrub.py,
 * test_crash_during_repair): a repairing scrub of DEV... through the write
 * engine with every device recorded (lib/dev's recorder), then the images a
 * crash could have left at CUTS points spread over its writes and flushes
 * (tests/tools/crash_cuts.c; the closing commit's own order is the engine's
 * crash tests' business):
 * DIR/base_devD.img as the devices were, DIR/cutC_devD.img per cut, one line
 * "cut C entries N of M" each. The scrub's problem lines go to stdout first,
 * one "problem KIND OUTCOME devid D physical P length L" each.
 *
 *   scrub_crash [--bad-read D:OFF:LEN]... DIR CUTS DEV...
 *
 * --bad-read: reads of device D (0-based, in the order given) that touch
 * [OFF, OFF+LEN) fail with -EIO, always (writes go through): a medium error.
 * CUTS 0: no cut images, only the scrub.
 *
 * Exit: 0 done, 1 the scrub or the cuts failed.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ubtrfs/engine.h"
#include "ubtrfs/scrub.h"
#include "crash_cuts.h"

/* ---- a device whose reads of some ranges fail ---- */

#define MAX_BAD 16
struct badrd {
	struct ub_dev *inner;
	int n;
	uint64_t off[MAX_BAD], len[MAX_BAD];
};

static bool bad_range(const struct badrd *b, uint64_t off, uint64_t len)
{
	for (int i = 0; i < b->n; i++)
		if (off < b->off[i] + b->len[i] && b->off[i] < off + len)
			return true;
	return false;
}

static int b_read(struct ub_dev *dev, void *buf, size_t len, uint64_t off)
{
	struct badrd *b = ub_dev_priv(dev);

	return bad_range(b, off, len) ? -EIO : ub_dev_read(b->inner, buf, len, off);
}

static int b_write(struct ub_dev *dev, const void *buf, size_t len, uint64_t off)
{
	return ub_dev_write(((struct badrd *)ub_dev_priv(dev))->inner, buf, len, off);
}

static int b_flush(struct ub_dev *dev)
{
	return ub_dev_flush(((struct badrd *)ub_dev_priv(dev))->inner);
}

static void b_release(struct ub_dev *dev)
{
	struct badrd *b = ub_dev_priv(dev);

	ub_dev_close(b->inner);
	free(b);
}

static const struct ub_dev_ops bad_ops = { "bad-read", b_read, b_write, b_flush, b_release };

static void on_problem(void *arg, const struct ub_scrub_problem *p)
{
	(void)arg;
	printf("problem %s %s devid %llu physical %llu length %llu\n", ub_scrub_kind_name(p->kind),
	       ub_scrub_outcome_name(p->outcome), (unsigned long long)p->devid, (unsigned long long)p->physical,
	       (unsigned long long)p->length);
}

int main(int argc, char **argv)
{
	struct ub_log log = { .verbosity = UB_LOG_ERROR };
	struct ub_dev *devs[16];
	struct ub_rec_log *rlog = NULL;
	struct ub_engine *e = NULL;
	struct ub_scrub *s = NULL;
	struct ub_scrub_opts so = { 0 };
	struct ub_scrub_sink sink = { on_problem, NULL };
	struct badrd *bad[16] = { NULL };
	int ndevs, ret, a = 1;
	long cuts;

	while (a + 1 < argc && !strcmp(argv[a], "--bad-read")) {
		unsigned d;
		unsigned long long off, len;

		if (sscanf(argv[a + 1], "%u:%llu:%llu", &d, &off, &len) != 3 || d >= 16) {
			fprintf(stderr, "scrub_crash: bad --bad-read %s\n", argv[a + 1]);
			return 1;
		}
		if (!bad[d] && !(bad[d] = calloc(1, sizeof(*bad[d]))))
			return 1;
		if (bad[d]->n == MAX_BAD)
			return 1;
		bad[d]->off[bad[d]->n] = off;
		bad[d]->len[bad[d]->n++] = len;
		a += 2;
	}
	argc -= a - 1;
	argv += a - 1;
	ndevs = argc - 3;
	if (argc < 4 || ndevs > 16 || (cuts = strtol(argv[2], NULL, 10)) < 0) {
		fprintf(stderr, "usage: scrub_crash [--bad-read D:OFF:LEN]... DIR CUTS DEV...\n");
		return 1;
	}
	if ((cuts && crash_save_bases(argv[1], argv + 3, ndevs)) || ub_rec_log_new(&rlog))
		return 1;
	for (int d = 0; d < ndevs; d++) {
		struct ub_dev *inner;

		ret = ub_dev_open(argv[3 + d], true, &inner);
		if (!ret && bad[d]) {
			bad[d]->inner = inner;
			ret = ub_dev_create(argv[3 + d], &bad_ops, bad[d], ub_dev_size(inner), true, &inner);
			bad[d] = NULL;
		}
		if (!ret)
			ret = ub_dev_open_recorder(inner, rlog, d, &inner);
		if (ret) {
			fprintf(stderr, "scrub_crash: %s: %s\n", argv[3 + d], strerror(-ret));
			return 1;
		}
		devs[d] = inner;
	}
	ret = ub_engine_open_devs(devs, ndevs, &log, &e);
	if (!ret)
		ret = ub_scrub_new(NULL, e, &so, &sink, &s);
	if (!ret)
		ret = ub_scrub_run(s);
	ub_scrub_free(s);
	ub_engine_close(e);
	fflush(stdout);
	if (ret) {
		fprintf(stderr, "scrub_crash: the scrub failed: %s\n", strerror(-ret));
		ub_rec_log_put(rlog);
		return 1;
	}
	ret = cuts ? crash_make_cuts(rlog, argv[1], ndevs, cuts, 0) : 0;
	ub_rec_log_put(rlog);
	return ret ? 1 : 0;
}
