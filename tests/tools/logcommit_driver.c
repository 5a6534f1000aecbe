// SPDX-License-Identifier: MIT
/*
 * Opens a filesystem read-write through the write engine and closes it: with
 * a pending fsync log that replays the log into the trees and commits it
 * (tests/integration/test_log_commit.py). --no-replay asks the open to refuse
 * the log instead. Exit 0 when the open succeeded, 1 otherwise; the engine's
 * messages (info level: what the replay did) go to stderr.
 *
 * crash WORK PRISTINE OUT: the same open of WORK (a copy of PRISTINE) through
 * a write recorder; then for every flush of the replay's commit, and at its
 * end, OUT.K.img is PRISTINE with the first K writes applied (K printed one a
 * line), and OUT.K.v.img the same with each write not yet flushed kept or
 * lost at random (seed K): the disk states a crash during the replay leaves.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ubtrfs/dev.h"
#include "txn/txn.h"

/* PRISTINE copied to path, then entries before k applied (variant: seed k) */
static int materialise(struct ub_rec_log *rl, const char *pristine, const char *path, uint64_t k, bool variant)
{
	char cmd[4096];
	struct ub_dev *d;
	int ret;

	snprintf(cmd, sizeof(cmd), "cp --sparse=always '%s' '%s'", pristine, path);
	if (system(cmd) != 0)
		return -EIO;
	ret = ub_dev_open(path, true, &d);
	if (ret)
		return ret;
	ret = variant ? ub_rec_log_apply_variant(rl, k, k, &d, 1) : ub_rec_log_apply(rl, k, &d, 1);
	ub_dev_close(d);
	return ret;
}

static int crash_points(const char *work, const char *pristine, const char *out)
{
	struct ub_log log = { .verbosity = UB_LOG_INFO };
	struct ub_rec_log *rl;
	struct ub_dev *inner, *rec;
	struct ub_engine *e;
	uint64_t n;
	char path[4096];
	int ret = ub_rec_log_new(&rl);

	if (ret)
		return ret;
	ret = ub_dev_open(work, true, &inner);
	if (!ret)
		ret = ub_dev_open_recorder(inner, rl, 0, &rec);
	if (!ret)
		ret = ub_engine_open_devs(&rec, 1, &log, &e);
	if (!ret)
		ub_engine_close(e);
	n = ub_rec_log_count(rl);
	for (uint64_t k = 0; k <= n && !ret; k++) {
		struct ub_rec_entry en;
		if (k < n && (ub_rec_log_entry(rl, k, &en) || en.kind != UB_REC_FLUSH))
			continue;
		snprintf(path, sizeof(path), "%s.%llu.img", out, (unsigned long long)k);
		ret = materialise(rl, pristine, path, k, false);
		snprintf(path, sizeof(path), "%s.%llu.v.img", out, (unsigned long long)k);
		if (!ret)
			ret = materialise(rl, pristine, path, k, true);
		if (!ret)
			printf("%llu\n", (unsigned long long)k);
	}
	ub_rec_log_put(rl);
	return ret;
}

int main(int argc, char **argv)
{
	struct ub_log log = { .verbosity = UB_LOG_INFO };
	struct ub_engine *e = NULL;
	unsigned flags = 0;
	int i = 1, ret;

	if (argc == 5 && !strcmp(argv[1], "crash")) {
		ret = crash_points(argv[2], argv[3], argv[4]);
		if (ret)
			fprintf(stderr, "logcommit_driver: crash: %s\n", strerror(-ret));
		return ret ? 1 : 0;
	}
	if (i < argc && !strcmp(argv[i], "--no-replay")) {
		flags |= UB_ENGINE_OPEN_NO_LOG_REPLAY;
		i++;
	}
	if (i >= argc) {
		fprintf(stderr, "usage: logcommit_driver [--no-replay] DEVICE...\n");
		return 2;
	}
	ret = ub_engine_open_ex((const char *const *)argv + i, argc - i, &log, flags, &e);
	if (ret) {
		fprintf(stderr, "logcommit_driver: open: %s\n", strerror(-ret));
		return 1;
	}
	ub_engine_close(e);
	return 0;
}
