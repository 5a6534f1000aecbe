/* SPDX-License-Identifier: MIT */
/*
 * ubtrfs device SUBCOMMAND: the devices of a filesystem. add and remove live in
 * device_change.c. `stats` prints the
 * error counters the device tree keeps for each device (DEV_STATS items, as
 * the kernel keeps them: scrub and the kernel count into them), from devices
 * or from a mount (BTRFS_IOC_GET_DEV_STATS, the kernel's btrfs and a ubtrfs
 * mount alike), in btrfs-progs' format.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <linux/btrfs.h>

#include "cmd.h"
#include "device_change.h"
#include "fs_target.h"
#include "json.h"
#include "scrub.h"
#include "ubtrfs/engine.h"
#include "ubtrfs/scrub.h"

static const char stats_help[] =
	"usage: ubtrfs device stats [OPTIONS] DEV...|MOUNTPOINT\n\n"
	"Print the error counters of each device of the filesystem (write, read and flush I/O\n"
	"errors, checksum and generation errors: the device tree's DEV_STATS items, which scrub\n"
	"and the kernel update), as 'btrfs device stats' prints them. DEV... are devices\n"
	"nothing has mounted; for a mounted filesystem give its mount point.\n\n"
	"  -c, --check        exit with 1 if any counter is not zero\n"
	"  -z, --reset        print the counters, then set them to zero (committed)\n"
	"  -T                 one table instead of one line per counter\n"
	"      --json         one JSON object\n"
	"  -h, --help         this text\n"
	OPEN_ARGS_HELP
	"\nExit codes: 0 success (and with --check: every counter zero), 1 a counter is not\n"
	"zero (--check), 2 usage or fatal error.\n";

struct devstat {
	uint64_t devid;
	char path[1025];
	uint64_t v[UB_DEV_STAT_COUNT];
	bool have; /* the counters could be read (a missing device's cannot on a mount) */
};

/* The counters of every device: online through the ioctl (reset there too), offline from the items. */
static int collect(struct target *t, bool reset, struct devstat **out, int *n)
{
	struct target_devinfo *devs = NULL;
	struct devstat *v;
	int nd = 0, ret = target_devices(t, &devs, &nd);

	if (ret)
		return ret;
	v = calloc((size_t)nd + 1, sizeof(*v));
	if (!v) {
		free(devs);
		return -ENOMEM;
	}
	for (int i = 0; i < nd && !ret; i++) {
		v[i].devid = devs[i].devid;
		snprintf(v[i].path, sizeof(v[i].path), "%s", devs[i].path);
		if (t->online) {
			struct btrfs_ioctl_get_dev_stats a;

			memset(&a, 0, sizeof(a));
			a.devid = devs[i].devid;
			a.nr_items = BTRFS_DEV_STAT_VALUES_MAX;
			a.flags = reset ? BTRFS_DEV_STATS_RESET : 0;
			if (ioctl(t->fd, BTRFS_IOC_GET_DEV_STATS, &a) < 0) {
				if (errno == ENODEV)
					continue;
				ret = -errno;
				fprintf(stderr, "ERROR: device stats ioctl failed on %s: %s\n", t->path, strerror(errno));
				break;
			}
			for (int k = 0; k < UB_DEV_STAT_COUNT && (uint64_t)k < a.nr_items; k++)
				v[i].v[k] = a.values[k];
			v[i].have = true;
		} else {
			ret = ub_dev_stats_read(t->fs, devs[i].devid, v[i].v);
			v[i].have = ret == 0;
			if (ret)
				fprintf(stderr, "ERROR: cannot read the counters of devid %" PRIu64 ": %s\n", devs[i].devid,
					strerror(-ret));
		}
	}
	free(devs);
	if (ret) {
		free(v);
		return ret;
	}
	*out = v;
	*n = nd;
	return 0;
}

static const char *shown_path(const struct devstat *d, char *buf, size_t len)
{
	if (d->path[0])
		return d->path;
	snprintf(buf, len, "devid:%" PRIu64, d->devid);
	return buf;
}

static int cmd_stats(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "help", no_argument, NULL, 'h' },
		{ "check", no_argument, NULL, 'c' },
		{ "reset", no_argument, NULL, 'z' },
		{ "json", no_argument, NULL, 0x600 },
		OPEN_ARGS_LONGOPTS,
		{ NULL, 0, NULL, 0 },
	};
	static const char *const titles[UB_DEV_STAT_COUNT] = { "Write errors", "Read errors", "Flush errors",
							       "Corruption errors", "Generation errors" };
	struct open_args oa;
	struct target t;
	struct devstat *v = NULL;
	bool check = false, reset = false, table = false, json = false, nonzero = false;
	int n = 0, opt, ret, rc = EXIT_OK;
	char buf[64];

	open_args_init(&oa);
	optind = 1;
	while ((opt = getopt_long(argc, argv, "czThvq", longopts, NULL)) != -1) {
		int r = open_args_parse(&oa, opt, optarg);

		if (r < 0)
			return usage_error("device stats", "invalid value '%s'", optarg);
		if (r > 0)
			continue;
		switch (opt) {
		case 'h':
			fputs(stats_help, stdout);
			return EXIT_OK;
		case 'c': check = true; break;
		case 'z': reset = true; break;
		case 'T': table = true; break;
		case 0x600: json = true; break;
		default:
			return usage_error("device stats", "unknown option");
		}
	}
	if (optind >= argc)
		return usage_error("device stats", "a device or a mount point is needed");
	if (target_args_mounted(argv + optind, argc - optind)) {
		if (target_open_path(&t, argv[optind], "device stats"))
			return EXIT_FATAL;
	} else {
		if (reset) {
			/* nothing may hold the devices the reset commits to */
			struct ub_fs *fs;

			if (open_fs(&oa, argv + optind, argc - optind, &fs))
				return EXIT_FATAL;
			ret = scrub_refuse_mounted(fs, "device stats");
			ub_fs_close(fs);
			if (ret)
				return EXIT_FATAL;
		}
		if (target_open_devs(&t, &oa, argv + optind, argc - optind, reset))
			return EXIT_FATAL;
	}
	ret = collect(&t, reset, &v, &n);
	if (ret) {
		target_close(&t);
		return EXIT_FATAL;
	}
	if (reset && !t.online) {
		for (int i = 0; i < n && !ret; i++)
			if (v[i].have)
				ret = ub_dev_stats_update(t.e, v[i].devid, NULL, true);
		if (!ret)
			ret = ub_engine_commit(t.e);
		if (ret) {
			fprintf(stderr, "ERROR: cannot reset the counters: %s\n", strerror(-ret));
			rc = EXIT_FATAL;
		}
	}
	for (int i = 0; i < n; i++)
		for (int k = 0; k < UB_DEV_STAT_COUNT; k++)
			nonzero |= v[i].v[k] != 0;
	if (json) {
		printf("{\"devices\":[");
		for (int i = 0; i < n; i++) {
			printf("%s{\"devid\":%" PRIu64 ",\"path\":", i ? "," : "", v[i].devid);
			json_str(stdout, v[i].path, strlen(v[i].path));
			for (int k = 0; k < UB_DEV_STAT_COUNT; k++)
				printf(",\"%s\":%" PRIu64, ub_dev_stat_name(k), v[i].v[k]);
			printf("}");
		}
		printf("]}\n");
	} else if (table) {
		int w = 4;

		for (int i = 0; i < n; i++) {
			int l = (int)strlen(shown_path(&v[i], buf, sizeof(buf)));
			w = l > w ? l : w;
		}
		printf("Id %-*s", w, "Path");
		for (int k = 0; k < UB_DEV_STAT_COUNT; k++)
			printf(" %s", titles[k]);
		printf("\n-- ");
		for (int c = 0; c < w; c++)
			putchar('-');
		for (int k = 0; k < UB_DEV_STAT_COUNT; k++) {
			putchar(' ');
			for (size_t c = 0; c < strlen(titles[k]); c++)
				putchar('-');
		}
		putchar('\n');
		for (int i = 0; i < n; i++) {
			printf("%2" PRIu64 " %-*s", v[i].devid, w, shown_path(&v[i], buf, sizeof(buf)));
			for (int k = 0; k < UB_DEV_STAT_COUNT; k++)
				printf(" %*" PRIu64, (int)strlen(titles[k]), v[i].v[k]);
			putchar('\n');
		}
	} else {
		for (int i = 0; i < n; i++)
			for (int k = 0; k < UB_DEV_STAT_COUNT; k++)
				printf("[%s].%-16s %" PRIu64 "\n", shown_path(&v[i], buf, sizeof(buf)), ub_dev_stat_name(k),
				       v[i].v[k]);
	}
	free(v);
	target_close(&t);
	if (rc == EXIT_OK && check && nonzero)
		rc = EXIT_PROBLEMS;
	return rc;
}

/* ---- the subcommands: one table, so that more can join it ---- */

static const struct {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *summary;
} subs[] = {
	{ "add", cmd_device_add, "add devices to a filesystem" },
	{ "remove", cmd_device_remove, "remove devices, what they hold moved first" },
	{ "delete", cmd_device_remove, "the same as remove" },
	{ "stats", cmd_stats, "the error counters of each device" },
};

static void usage(FILE *f)
{
	fprintf(f, "usage: ubtrfs device COMMAND [OPTIONS] ...\n\nThe devices of a filesystem.\n\nCommands:\n");
	for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++)
		fprintf(f, "  %-10s %s\n", subs[i].name, subs[i].summary);
	fprintf(f, "\n'ubtrfs device COMMAND --help' describes one.\n");
}

int cmd_device(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return EXIT_FATAL;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage(stdout);
		return EXIT_OK;
	}
	for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++)
		if (!strcmp(argv[1], subs[i].name))
			return subs[i].fn(argc - 1, argv + 1);
	return usage_error("device", "unknown subcommand '%s'", argv[1]);
}
