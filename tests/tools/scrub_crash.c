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
 *   scrub_crash DIR CUTS DEV...
 *
 * Exit: 0 done, 1 the scrub or the cuts failed.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ubtrfs/engine.h"
#include "ubtrfs/scrub.h"
#include "crash_cuts.h"

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
	int ndevs = argc - 3, ret;
	long cuts;

	if (argc < 4 || ndevs > 16 || (cuts = strtol(argv[2], NULL, 10)) < 1) {
		fprintf(stderr, "usage: scrub_crash DIR CUTS DEV...\n");
		return 1;
	}
	if (crash_save_bases(argv[1], argv + 3, ndevs) || ub_rec_log_new(&rlog))
		return 1;
	for (int d = 0; d < ndevs; d++) {
		struct ub_dev *inner;

		ret = ub_dev_open(argv[3 + d], true, &inner);
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
	ret = crash_make_cuts(rlog, argv[1], ndevs, cuts, 0);
	ub_rec_log_put(rlog);
	return ret ? 1 : 0;
}
