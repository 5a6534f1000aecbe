// SPDX-License-Identifier: MIT
/*
 * ubtrfs balance start [-d[FILTERS]] [-m[FILTERS]] [-s[FILTERS]] [-f] [--full-balance] DEV...|MOUNTPOINT
 *
 * On devices nothing has mounted, through the library (ubtrfs/balance.h); on
 * a mounted btrfs (the kernel's) or a ubtrfs mount, through btrfs's
 * BTRFS_IOC_BALANCE_V2, as btrfs-progs asks it.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "cmd.h"
#include "fs_target.h"
#include "ubtrfs/balance.h"
#include "ubtrfs/engine.h"

static void start_usage(FILE *f)
{
	fprintf(f,
		"usage: ubtrfs balance start [OPTIONS] DEV...|MOUNTPOINT\n\n"
		"Move the block groups the filters select elsewhere (all of them without filters),\n"
		"converting them to another profile with convert=. On devices nothing has mounted\n"
		"or on a mount point (the kernel's btrfs or a ubtrfs mount).\n\n"
		"  -d[FILTERS]        data block groups (filters: see below)\n"
		"  -m[FILTERS]        metadata block groups (system ones too, with the same filters)\n"
		"  -s[FILTERS]        system block groups (needs --force)\n"
		"  -f, --force        allow reducing the redundancy of metadata, and -s\n"
		"      --full-balance every block group, without the warning pause\n"
		"FILTERS, comma separated, as btrfs balance takes them:\n"
		"  profiles=P[|P...]  groups of these profiles\n"
		"  usage=N, usage=A..B  groups less than N percent used (or within the range)\n"
		"  devid=N            groups with a stripe on device N\n"
		"  drange=A..B        with devid: a stripe on that device overlapping bytes A..B\n"
		"  vrange=A..B        groups overlapping logical bytes A..B\n"
		"  limit=N, limit=A..B  at most N groups of the type (at least A, at most B)\n"
		"  stripes=A..B       groups of A to B stripes\n"
		"  convert=PROFILE    write what moves as PROFILE (single, dup, raid0, raid1,\n"
		"                     raid1c3, raid1c4, raid10, raid5, raid6)\n"
		"  soft               with convert: leave groups already in the target profile\n"
		OPEN_ARGS_HELP
		"Exit codes: 0 done, 1 stopped by a problem (what moved stays moved; run it\n"
		"again for the rest), 2 usage or fatal error.\n");
}

struct printer {
	bool tty;
	int verbosity;
};

static int on_progress(void *arg, const struct ub_balance_progress *p)
{
	struct printer *pr = arg;

	if (pr->tty)
		fprintf(stderr, "\rbalance: %llu of %llu block groups relocated", (unsigned long long)p->completed,
			(unsigned long long)p->expected);
	else if (pr->verbosity >= UB_LOG_INFO)
		printf("relocated block group %llu (%llu of %llu)\n", (unsigned long long)p->group,
		       (unsigned long long)p->completed, (unsigned long long)p->expected);
	return 0;
}

/* The kernel's balance ioctl on a mounted filesystem. */
static int balance_online(struct target *t, const struct ub_balance *b)
{
	struct btrfs_ioctl_balance_args args;

	memset(&args, 0, sizeof(args));
	args.flags = b->flags;
	args.data = b->data;
	args.meta = b->meta;
	args.sys = b->sys;
	if (ioctl(t->fd, BTRFS_IOC_BALANCE_V2, &args) < 0) {
		int err = errno;

		if (err == ENOTTY || err == EINVAL || err == EOPNOTSUPP)
			fprintf(stderr, "ERROR: balance on %s: %s\n", t->path, strerror(err));
		else
			fprintf(stderr, "ERROR: error during balancing '%s': %s\n", t->path, strerror(err));
		return EXIT_PROBLEMS;
	}
	printf("Done, had to relocate %llu out of %llu chunks\n", (unsigned long long)args.stat.completed,
	       (unsigned long long)args.stat.considered);
	return EXIT_OK;
}

static int parse_type(const char *arg, struct btrfs_balance_args *a, const char *opt)
{
	char why[128] = "";

	if (ub_balance_parse_filters(arg, a, why, sizeof(why))) {
		usage_error("balance", "%s: %s", opt, why);
		return -1;
	}
	return 0;
}

static int cmd_balance_start(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "data", optional_argument, NULL, 'd' },
		{ "metadata", optional_argument, NULL, 'm' },
		{ "system", optional_argument, NULL, 's' },
		{ "force", no_argument, NULL, 'f' },
		{ "full-balance", no_argument, NULL, 0x1f0 },
		{ "help", no_argument, NULL, 'h' },
		OPEN_ARGS_LONGOPTS,
		{ NULL, 0, NULL, 0 },
	};
	struct ub_balance b;
	struct ub_balance_progress done;
	struct open_args oa;
	struct target t;
	struct printer pr;
	int opt, rc, ret;

	memset(&b, 0, sizeof(b));
	open_args_init(&oa);
	optind = 1;
	while ((opt = getopt_long(argc, argv, "d::m::s::fvqh", longopts, NULL)) != -1) {
		switch (opt) {
		case 'd':
			b.flags |= BTRFS_BALANCE_DATA;
			if (parse_type(optarg, &b.data, "-d"))
				return EXIT_FATAL;
			break;
		case 'm':
			b.flags |= BTRFS_BALANCE_METADATA;
			if (parse_type(optarg, &b.meta, "-m"))
				return EXIT_FATAL;
			break;
		case 's':
			b.flags |= BTRFS_BALANCE_SYSTEM;
			if (parse_type(optarg, &b.sys, "-s"))
				return EXIT_FATAL;
			break;
		case 'f':
			b.flags |= BTRFS_BALANCE_FORCE;
			break;
		case 0x1f0:
			break;
		case 'h':
			start_usage(stdout);
			return EXIT_OK;
		default:
			ret = open_args_parse(&oa, opt, optarg);
			if (ret == 1)
				break;
			if (ret == 0)
				start_usage(stderr);
			return EXIT_FATAL;
		}
	}
	if (optind >= argc)
		return usage_error("balance start", "no device or mount point given");
	if ((b.flags & BTRFS_BALANCE_SYSTEM) && !(b.flags & BTRFS_BALANCE_FORCE))
		return usage_error("balance start", "-s (system block groups on their own) needs --force");
	if (!(b.flags & (BTRFS_BALANCE_DATA | BTRFS_BALANCE_METADATA | BTRFS_BALANCE_SYSTEM)))
		b.flags |= BTRFS_BALANCE_DATA | BTRFS_BALANCE_METADATA | BTRFS_BALANCE_SYSTEM;
	if (target_args_mounted(argv + optind, argc - optind)) {
		if (target_open_path(&t, argv[optind], "balance"))
			return EXIT_FATAL;
		rc = balance_online(&t, &b);
		target_close(&t);
		return rc;
	}
	if (target_open_devs(&t, &oa, argv + optind, argc - optind, true))
		return EXIT_FATAL;
	pr.tty = isatty(2);
	pr.verbosity = oa.verbosity;
	ret = ub_engine_balance(t.e, &b, on_progress, &pr, &done);
	if (pr.tty && done.expected)
		fprintf(stderr, "\n");
	if (ret) {
		fprintf(stderr, "ERROR: error during balancing: %s (%llu of %llu block groups relocated)\n",
			strerror(-ret), (unsigned long long)done.completed, (unsigned long long)done.expected);
		rc = ret == -EINVAL ? EXIT_FATAL : EXIT_PROBLEMS;
	} else {
		printf("Done, had to relocate %llu out of %llu chunks\n", (unsigned long long)done.completed,
		       (unsigned long long)done.considered);
		if (oa.verbosity >= UB_LOG_INFO)
			printf("moved %llu extents: %llu tree blocks, %llu bytes of data\n",
			       (unsigned long long)done.moved.extents, (unsigned long long)done.moved.tree_blocks,
			       (unsigned long long)done.moved.data_bytes);
		rc = EXIT_OK;
	}
	target_close(&t);
	return final_rc(&oa, rc);
}

static void usage(FILE *f)
{
	fprintf(f, "usage: ubtrfs balance start [OPTIONS] DEV...|MOUNTPOINT\n\n"
		   "  start   relocate block groups (convert their profile); 'ubtrfs balance start --help'\n");
}

int cmd_balance(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return EXIT_FATAL;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage(stdout);
		return EXIT_OK;
	}
	if (!strcmp(argv[1], "start"))
		return cmd_balance_start(argc - 1, argv + 1);
	fprintf(stderr, "ubtrfs balance: unknown subcommand '%s'\n", argv[1]);
	usage(stderr);
	return EXIT_FATAL;
}
