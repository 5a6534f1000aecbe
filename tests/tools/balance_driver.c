// SPDX-License-Identifier: MIT
/*
 * A balance or a device removal with every device write and flush recorded,
 * then the images a crash at chosen points could have left (crash_cuts.h):
 *
 *   balance_driver --crash-dir DIR --crash-cuts K OP DEV...
 *   balance_driver --pause-after N OP DEV...
 *
 * The second form records nothing: the balance's progress callback stops it
 * after N groups, which pauses it (its balance item stays on the disk, as a
 * paused kernel balance leaves it), for the tests of status, resume and cancel.
 *
 * OP: "balance" (every group), "convert=DATA,META" (-dconvert -mconvert, with
 * --force), "remove=DEVID". Written as a library user: include/ubtrfs only.
 * Exit 0 when the operation and the images succeeded.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crash_cuts.h"
#include "ubtrfs/balance.h"
#include "ubtrfs/dev.h"
#include "ubtrfs/engine.h"

static long pause_after;

static int stop_after(void *arg, const struct ub_balance_progress *p)
{
	return pause_after > 0 && p->completed >= (uint64_t)pause_after;
}

static int run(struct ub_engine *e, const char *op)
{
	struct ub_balance b;
	char why[128];

	memset(&b, 0, sizeof(b));
	if (!strcmp(op, "balance"))
		return ub_engine_balance(e, &b, stop_after, NULL, NULL);
	if (!strncmp(op, "convert=", 8)) {
		char data[64], meta[64], *comma;

		snprintf(data, sizeof(data), "convert=%s", op + 8);
		comma = strchr(data, ',');
		if (!comma)
			return -EINVAL;
		*comma = 0;
		snprintf(meta, sizeof(meta), "convert=%s", comma + 1);
		b.flags = BTRFS_BALANCE_DATA | BTRFS_BALANCE_METADATA | BTRFS_BALANCE_FORCE;
		if (ub_balance_parse_filters(data, &b.data, why, sizeof(why)) ||
		    ub_balance_parse_filters(meta, &b.meta, why, sizeof(why))) {
			fprintf(stderr, "balance_driver: %s\n", why);
			return -EINVAL;
		}
		return ub_engine_balance(e, &b, stop_after, NULL, NULL);
	}
	if (!strncmp(op, "remove=", 7))
		return ub_engine_device_remove(e, strtoull(op + 7, NULL, 10), NULL, NULL, NULL);
	return -EINVAL;
}

int main(int argc, char **argv)
{
	struct ub_rec_log *rlog = NULL;
	struct ub_dev *devs[16];
	struct ub_engine *e = NULL;
	const char *dir;
	long cuts;
	int ndevs, ret;

	if (argc >= 5 && !strcmp(argv[1], "--pause-after")) {
		pause_after = atol(argv[2]);
		ndevs = argc - 4;
		ret = ub_engine_open((const char *const *)(argv + 4), ndevs, NULL, &e);
		if (ret) {
			fprintf(stderr, "balance_driver: open: %s\n", strerror(-ret));
			return 1;
		}
		ret = run(e, argv[3]);
		printf("balance_driver: %s\n", ret ? strerror(-ret) : "done");
		ub_engine_close(e);
		return ret == -ECANCELED ? 0 : ret ? 1 : 3;
	}
	if (argc < 7 || strcmp(argv[1], "--crash-dir") || strcmp(argv[3], "--crash-cuts")) {
		fprintf(stderr, "usage: balance_driver --crash-dir DIR --crash-cuts K OP DEV...\n");
		return 2;
	}
	dir = argv[2];
	cuts = atol(argv[4]);
	ndevs = argc - 6;
	if (ndevs < 1 || ndevs > 16)
		return 2;
	ret = crash_save_bases(dir, argv + 6, ndevs);
	if (!ret)
		ret = ub_rec_log_new(&rlog);
	for (int d = 0; d < ndevs; d++) {
		struct ub_dev *inner = NULL;

		if (!ret)
			ret = ub_dev_open(argv[6 + d], true, &inner);
		if (!ret)
			ret = ub_dev_open_recorder(inner, rlog, d, &inner);
		devs[d] = ret ? NULL : inner;
	}
	if (!ret) {
		ret = ub_engine_open_devs(devs, ndevs, NULL, &e);
	} else {
		for (int d = 0; d < ndevs; d++)
			if (devs[d])
				ub_dev_close(devs[d]);
	}
	if (ret) {
		fprintf(stderr, "balance_driver: open: %s\n", strerror(-ret));
		return 1;
	}
	ret = run(e, argv[5]);
	if (ret)
		fprintf(stderr, "balance_driver: %s: %s\n", argv[5], strerror(-ret));
	ub_engine_close(e);
	if (!ret) {
		/* spread points, and both sides of every superblock write: where each relocation became durable */
		ret = crash_make_cuts(rlog, dir, ndevs, cuts, 1);
		if (ret)
			fprintf(stderr, "balance_driver: crash images: %d\n", ret);
	}
	ub_rec_log_put(rlog);
	return ret ? 1 : 0;
}
