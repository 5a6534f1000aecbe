/* SPDX-License-Identifier: MIT */
/*
 * `check --repair` with every device write recorded, then the images a crash at
 * chosen points could have left (crash_cuts.h), for test_repair_crash.py:
 *
 *   repair_driver --crash-dir DIR --crash-cuts K|all [--init-extent-tree] DEV...
 *
 * The checker runs on the devices (read-only) and its problems are noted for
 * the repair; then the repair runs on devices stacked as `check --repair`
 * stacks them, with a recorder below the undo device:
 *
 *   undo device (DIR/repair.undo) -> probe -> recorder -> the file
 *
 * so a record of the undo file is durable before the write it covers reaches
 * the recorder. The probe writes DIR/undo_lengths: "start L" (the file as
 * created), then "W I L" for each write the recorder logs as entry I, L the
 * undo file's length when that write was issued (every record before it
 * fdatasync'd), and "end L" after the trailer. A crash after the first k
 * entries leaves at least the undo file cut to the L of the last write below k.
 * K: that many points spread over the log; "all": every point (0..M entries), each
 * with its own seeded choice of the pending writes that land. Both add both
 * sides of every superblock write.
 * stdout: "noted N curable C changes X generation G", then the cut lines.
 * Written as a library user: include/ubtrfs only. Exit 0 when the repair and
 * the images succeeded.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "crash_cuts.h"
#include "ubtrfs/check.h"
#include "ubtrfs/dev.h"
#include "ubtrfs/fs.h"
#include "ubtrfs/repair.h"
#include "ubtrfs/undo.h"

#define MAX_DEVS 16

/* What every probe shares: the log whose entries it numbers, the undo file it measures. */
static struct {
	pthread_mutex_t lock;
	struct ub_rec_log *rlog;
	const char *undo_path;
	FILE *lengths;
} probe_g = { PTHREAD_MUTEX_INITIALIZER, NULL, NULL, NULL };

struct probe {
	struct ub_dev *inner;
};

static long long undo_len(void)
{
	struct stat st;

	return stat(probe_g.undo_path, &st) ? -1 : (long long)st.st_size;
}

static int probe_read(struct ub_dev *dev, void *buf, size_t len, uint64_t off)
{
	return ub_dev_read(((struct probe *)ub_dev_priv(dev))->inner, buf, len, off);
}

static int probe_readv(struct ub_dev *dev, const struct iovec *iov, int iovcnt, uint64_t off)
{
	return ub_dev_readv(((struct probe *)ub_dev_priv(dev))->inner, iov, iovcnt, off);
}

/*
 * The lock makes "the recorder's next entry number" and "the undo file's
 * length" belong to this write: writes of other threads wait (a test driver
 * may be slow).
 */
static int probe_writev(struct ub_dev *dev, const struct iovec *iov, int iovcnt, uint64_t off)
{
	struct probe *p = ub_dev_priv(dev);
	int ret;

	pthread_mutex_lock(&probe_g.lock);
	fprintf(probe_g.lengths, "W %llu %lld\n", (unsigned long long)ub_rec_log_count(probe_g.rlog), undo_len());
	ret = ub_dev_writev(p->inner, iov, iovcnt, off);
	pthread_mutex_unlock(&probe_g.lock);
	return ret;
}

static int probe_write(struct ub_dev *dev, const void *buf, size_t len, uint64_t off)
{
	struct iovec iov = { (void *)buf, len };

	return probe_writev(dev, &iov, 1, off);
}

static int probe_flush(struct ub_dev *dev)
{
	int ret;

	pthread_mutex_lock(&probe_g.lock);
	ret = ub_dev_flush(((struct probe *)ub_dev_priv(dev))->inner);
	pthread_mutex_unlock(&probe_g.lock);
	return ret;
}

static void probe_release(struct ub_dev *dev)
{
	struct probe *p = ub_dev_priv(dev);

	ub_dev_close(p->inner);
	free(p);
}

static const struct ub_dev_ops probe_ops = {
	.kind = "probe",
	.read = probe_read,
	.write = probe_write,
	.flush = probe_flush,
	.release = probe_release,
	.writev = probe_writev,
	.readv = probe_readv,
};

static int open_probe(struct ub_dev *inner, struct ub_dev **out)
{
	struct probe *p = calloc(1, sizeof(*p));

	if (!p) {
		ub_dev_close(inner);
		return -ENOMEM;
	}
	p->inner = inner;
	return ub_dev_create(ub_dev_path(inner), &probe_ops, p, ub_dev_size(inner), true, out);
}

/* The check before the repair, its problems noted: what `check --repair` does first. */
struct note_ctx {
	int err;
	struct ub_repair *r;
};

static void note_problem(void *arg, const struct ub_chk_problem *p)
{
	struct note_ctx *n = arg;

	if (ub_repair_note(n->r, p))
		n->err = -ENOMEM;
}

static int check_and_note(char *const *paths, int n, struct ub_repair *r)
{
	struct note_ctx nc = { 0, r };
	struct ub_chk_sink sink = { note_problem, NULL, &nc };
	struct ub_chk_opts copts = { 0 };
	struct ub_fs_opts fo = { .super_mirror = -1 };
	struct ub_checker *c = NULL;
	struct ub_fs *fs = NULL;
	struct ub_log log;
	int ret = ub_checker_new(&copts, &sink, &c);

	if (ret)
		return ret;
	ub_checker_log(c, &log);
	ret = ub_fs_open((const char *const *)paths, n, &fo, &log, &fs);
	if (!ret)
		ret = ub_checker_supers(c, (const char *const *)paths, n, fs);
	if (!ret)
		ret = ub_checker_run(c, fs);
	if (fs)
		ub_fs_close(fs);
	ub_checker_free(c);
	return ret ? ret : nc.err;
}

int main(int argc, char **argv)
{
	struct ub_repair_result res = { 0 };
	struct ub_repair_opts opts = { 0 };
	struct ub_repair *r = NULL;
	struct ub_undo *u = NULL;
	struct ub_dev *devs[MAX_DEVS] = { 0 };
	char undo_path[4096], lengths_path[4096];
	const char *dir;
	long cuts;
	int ndevs, ret, d;

	if (argc < 6 || strcmp(argv[1], "--crash-dir") || strcmp(argv[3], "--crash-cuts")) {
		fprintf(stderr, "usage: repair_driver --crash-dir DIR --crash-cuts K|all [--init-extent-tree] DEV...\n");
		return 2;
	}
	dir = argv[2];
	cuts = strcmp(argv[4], "all") ? atol(argv[4]) : -1;
	/* the option: taken out, so the devices stay argv[5]... */
	if (!strcmp(argv[5], "--init-extent-tree")) {
		opts.init_extent_tree = true;
		argv[5] = argv[4];
		argv++;
		argc--;
	}
	ndevs = argc - 5;
	if (ndevs < 1 || ndevs > MAX_DEVS)
		return 2;
	snprintf(undo_path, sizeof(undo_path), "%s/repair.undo", dir);
	snprintf(lengths_path, sizeof(lengths_path), "%s/undo_lengths", dir);

	ret = ub_repair_new(&r);
	if (!ret)
		ret = check_and_note(argv + 5, ndevs, r);
	if (ret) {
		fprintf(stderr, "repair_driver: check: %s\n", strerror(-ret));
		return 1;
	}
	ret = crash_save_bases(dir, argv + 5, ndevs);
	if (!ret)
		ret = ub_rec_log_new(&probe_g.rlog);
	if (!ret)
		ret = ub_undo_create(undo_path, &u);
	probe_g.undo_path = undo_path;
	if (!ret && !(probe_g.lengths = fopen(lengths_path, "w")))
		ret = -errno;
	if (ret) {
		fprintf(stderr, "repair_driver: setup: %s\n", strerror(-ret));
		return 1;
	}
	fprintf(probe_g.lengths, "start %lld\n", undo_len());
	for (d = 0; d < ndevs && !ret; d++) {
		struct ub_dev *dev = NULL;

		ret = ub_dev_open(argv[5 + d], true, &dev);
		if (!ret)
			ret = ub_dev_open_recorder(dev, probe_g.rlog, d, &dev);
		if (!ret)
			ret = open_probe(dev, &dev);
		if (!ret)
			ret = ub_dev_open_undo(dev, u, &dev);
		devs[d] = ret ? NULL : dev;
	}
	if (ret) {
		fprintf(stderr, "repair_driver: open %s: %s\n", argv[4 + d], strerror(-ret));
		for (d = 0; d < ndevs; d++)
			if (devs[d])
				ub_dev_close(devs[d]);
		return 1;
	}
	/* the devices are closed by the repair, also when it fails */
	ret = ub_repair_run_devs(r, devs, ndevs, &opts, NULL, &res);
	if (ret)
		fprintf(stderr, "repair_driver: repair: %s\n", strerror(-ret));
	if (!ret)
		ret = ub_undo_finish(u);
	else
		ub_undo_free(u);
	fprintf(probe_g.lengths, "end %lld\n", undo_len());
	if (fclose(probe_g.lengths) && !ret)
		ret = -errno;
	printf("noted %llu curable %llu changes %llu generation %llu\n", (unsigned long long)res.noted,
	       (unsigned long long)res.curable, (unsigned long long)res.changes, (unsigned long long)res.generation);
	if (!ret) {
		/* spread points, and both sides of every superblock write: where the commit becomes durable */
		if (cuts < 0)
			cuts = (long)ub_rec_log_count(probe_g.rlog) + 1;
		ret = crash_make_cuts(probe_g.rlog, dir, ndevs, cuts, 1);
		if (ret)
			fprintf(stderr, "repair_driver: crash images: %s\n", strerror(-ret));
	}
	ub_rec_log_put(probe_g.rlog);
	ub_repair_free(r);
	return ret ? 1 : 0;
}
