// SPDX-License-Identifier: MIT
/*
 * ubtrfs balance start [-d[FILTERS]] [-m[FILTERS]] [-s[FILTERS]] [-f] [--full-balance] DEV...|MOUNTPOINT
 * ubtrfs balance pause|cancel|resume|status DEV...|MOUNTPOINT
 *
 * On devices nothing has mounted, through the library (ubtrfs/balance.h); on
 * a mounted btrfs (the kernel's) or a ubtrfs mount, through btrfs's
 * BTRFS_IOC_BALANCE_V2, BALANCE_CTL and BALANCE_PROGRESS, as btrfs-progs asks
 * them, with its messages and exit codes.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
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

/* SIGINT or SIGTERM during an offline balance: a pause after the group being moved (the item stays). */
static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
	interrupted = sig;
}

static void catch_signals(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
}

static int on_progress(void *arg, const struct ub_balance_progress *p)
{
	struct printer *pr = arg;

	if (pr->tty)
		fprintf(stderr, "\rbalance: %llu of %llu block groups relocated", (unsigned long long)p->completed,
			(unsigned long long)p->expected);
	else if (pr->verbosity >= UB_LOG_INFO)
		printf("relocated block group %llu (%llu of %llu)\n", (unsigned long long)p->group,
		       (unsigned long long)p->completed, (unsigned long long)p->expected);
	fflush(stdout);
	return interrupted != 0;
}

/*
 * What a balance ioctl's answer says, as btrfs-progs says it: the kernel's
 * ECANCELED for a paused or cancelled balance, or a ubtrfs mount's 0 with
 * the request's bit in state (a FUSE answer has no data with an error).
 */
static int balance_answer(const char *path, const char *verb, int ret, int err,
			  const struct btrfs_ioctl_balance_args *args)
{
	if ((ret < 0 && err == ECANCELED) ||
	    (ret == 0 && (args->state & (BTRFS_BALANCE_STATE_PAUSE_REQ | BTRFS_BALANCE_STATE_CANCEL_REQ)))) {
		if (args->state & BTRFS_BALANCE_STATE_PAUSE_REQ)
			fprintf(stderr, "balance paused by user\n");
		if (args->state & BTRFS_BALANCE_STATE_CANCEL_REQ)
			fprintf(stderr, "balance canceled by user\n");
		return EXIT_PROBLEMS;
	}
	if (ret < 0) {
		if (err == ENOTCONN || err == EINPROGRESS) {
			fprintf(stderr, "ERROR: balance %s on '%s' failed: %s\n", verb, path,
				err == ENOTCONN ? "Not in progress" : "Already running");
			return err == ENOTCONN ? EXIT_FATAL : EXIT_PROBLEMS;
		}
		if (err == ENOTTY || err == EOPNOTSUPP)
			fprintf(stderr, "ERROR: balance on %s: %s\n", path, strerror(err));
		else
			fprintf(stderr, "ERROR: error during balancing '%s': %s\n", path, strerror(err));
		return EXIT_PROBLEMS;
	}
	printf("Done, had to relocate %llu out of %llu chunks\n", (unsigned long long)args->stat.completed,
	       (unsigned long long)args->stat.considered);
	return EXIT_OK;
}

/* The kernel's balance ioctl on a mounted filesystem. */
static int balance_online(struct target *t, const struct ub_balance *b)
{
	struct btrfs_ioctl_balance_args args;
	int ret;

	memset(&args, 0, sizeof(args));
	args.flags = b->flags;
	args.data = b->data;
	args.meta = b->meta;
	args.sys = b->sys;
	ret = ioctl(t->fd, BTRFS_IOC_BALANCE_V2, &args);
	if (ret < 0 && errno == EINVAL && !(b->flags & BTRFS_BALANCE_RESUME)) {
		fprintf(stderr, "ERROR: balance on %s: %s\n", t->path, strerror(errno));
		return EXIT_PROBLEMS;
	}
	return balance_answer(t->path, (b->flags & BTRFS_BALANCE_RESUME) ? "resume" : "start", ret, errno, &args);
}

/* The offline balance's end, said as balance_answer says the ioctl's. */
static int balance_offline_answer(const char *path, const char *verb, int ret, const struct ub_balance_progress *done,
				  const struct open_args *oa)
{
	if (ret == -ECANCELED) {
		fprintf(stderr, "balance paused by user\n");
		return EXIT_PROBLEMS;
	}
	if (ret == -ENOTCONN || ret == -EINPROGRESS) {
		fprintf(stderr, "ERROR: balance %s on '%s' failed: %s\n", verb, path,
			ret == -ENOTCONN ? "Not in progress" : "a paused balance exists (resume or cancel it)");
		return ret == -ENOTCONN ? EXIT_FATAL : EXIT_PROBLEMS;
	}
	if (ret) {
		fprintf(stderr, "ERROR: error during balancing: %s (%llu of %llu block groups relocated)\n",
			strerror(-ret), (unsigned long long)done->completed, (unsigned long long)done->expected);
		return ret == -EINVAL ? EXIT_FATAL : EXIT_PROBLEMS;
	}
	printf("Done, had to relocate %llu out of %llu chunks\n", (unsigned long long)done->completed,
	       (unsigned long long)done->considered);
	if (oa->verbosity >= UB_LOG_INFO)
		printf("moved %llu extents: %llu tree blocks, %llu bytes of data\n",
		       (unsigned long long)done->moved.extents, (unsigned long long)done->moved.tree_blocks,
		       (unsigned long long)done->moved.data_bytes);
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
	catch_signals();
	ret = ub_engine_balance(t.e, &b, on_progress, &pr, &done);
	if (pr.tty && done.expected)
		fprintf(stderr, "\n");
	rc = balance_offline_answer(argv[optind], "start", ret, &done, &oa);
	target_close(&t);
	return final_rc(&oa, rc);
}

/* ---- pause, cancel, resume, status ---- */

static void ctl_usage(FILE *f, const char *verb)
{
	if (!strcmp(verb, "pause"))
		fprintf(f, "usage: ubtrfs balance pause DEV...|MOUNTPOINT\n\n"
			   "Pause the running balance after the block group it is moving. On devices\n"
			   "nothing has mounted no balance runs (an offline 'balance start' pauses on\n"
			   "SIGINT or SIGTERM).\n");
	else if (!strcmp(verb, "cancel"))
		fprintf(f, "usage: ubtrfs balance cancel DEV...|MOUNTPOINT\n\n"
			   "Cancel the running balance, or drop a paused one (what moved stays moved).\n");
	else if (!strcmp(verb, "resume"))
		fprintf(f, "usage: ubtrfs balance resume DEV...|MOUNTPOINT\n\n"
			   "Resume a paused or interrupted balance, as the kernel does (a convert goes on\n"
			   "with soft, other types with usage=90 unless a usage filter was given).\n");
	else
		fprintf(f, "usage: ubtrfs balance status [-v] DEV...|MOUNTPOINT\n\n"
			   "Show the state of a running or paused balance.\n");
	fprintf(f, OPEN_ARGS_HELP);
	if (!strcmp(verb, "status"))
		fprintf(f, "Exit codes: 0 no balance, 1 a balance running or paused, 2 error.\n");
	else if (!strcmp(verb, "resume"))
		fprintf(f, "Exit codes: 0 done, 1 stopped again or failed, 2 nothing to resume or usage.\n");
	else
		fprintf(f, "Exit codes: 0 done, 1 error, 2 no balance to %s or usage.\n", verb);
}

/* The filters as the kernel's log and btrfs-progs' status -v describe them ("convert=raid1,soft,usage=90"). */
static void describe_args(FILE *f, const char *opt, const struct btrfs_balance_args *a)
{
	const char *sep = "";

	fprintf(f, "  %s", opt);
	if (a->flags & BTRFS_BALANCE_ARGS_CONVERT) {
		const char *name = profile_name(a->target == BTRFS_AVAIL_ALLOC_BIT_SINGLE ? 0 : a->target);

		fprintf(f, "%sconvert=", sep);
		for (; *name; name++)
			fputc(*name >= 'A' && *name <= 'Z' ? *name - 'A' + 'a' : *name, f);
		sep = ",";
	}
	if (a->flags & BTRFS_BALANCE_ARGS_SOFT) {
		fprintf(f, "%ssoft", sep);
		sep = ",";
	}
	if (a->flags & BTRFS_BALANCE_ARGS_PROFILES) {
		fprintf(f, "%sprofiles=0x%llx", sep, (unsigned long long)a->profiles);
		sep = ",";
	}
	if (a->flags & BTRFS_BALANCE_ARGS_USAGE) {
		fprintf(f, "%susage=%llu", sep, (unsigned long long)a->usage);
		sep = ",";
	}
	if (a->flags & BTRFS_BALANCE_ARGS_USAGE_RANGE) {
		fprintf(f, "%susage=%u..%u", sep, a->usage_min, a->usage_max);
		sep = ",";
	}
	if (a->flags & BTRFS_BALANCE_ARGS_DEVID) {
		fprintf(f, "%sdevid=%llu", sep, (unsigned long long)a->devid);
		sep = ",";
	}
	if (a->flags & BTRFS_BALANCE_ARGS_DRANGE) {
		fprintf(f, "%sdrange=%llu..%llu", sep, (unsigned long long)a->pstart, (unsigned long long)a->pend);
		sep = ",";
	}
	if (a->flags & BTRFS_BALANCE_ARGS_VRANGE) {
		fprintf(f, "%svrange=%llu..%llu", sep, (unsigned long long)a->vstart, (unsigned long long)a->vend);
		sep = ",";
	}
	if (a->flags & BTRFS_BALANCE_ARGS_LIMIT) {
		fprintf(f, "%slimit=%llu", sep, (unsigned long long)a->limit);
		sep = ",";
	}
	if (a->flags & BTRFS_BALANCE_ARGS_LIMIT_RANGE) {
		fprintf(f, "%slimit=%u..%u", sep, a->limit_min, a->limit_max);
		sep = ",";
	}
	if (a->flags & BTRFS_BALANCE_ARGS_STRIPES_RANGE)
		fprintf(f, "%sstripes=%u..%u", sep, a->stripes_min, a->stripes_max);
	fprintf(f, "\n");
}

static void print_status(const char *path, const struct btrfs_ioctl_balance_args *a, bool verbose)
{
	if (a->state & BTRFS_BALANCE_STATE_RUNNING)
		printf("Balance on '%s' is running%s\n", path,
		       (a->state & BTRFS_BALANCE_STATE_CANCEL_REQ) ? ", cancel requested"
		       : (a->state & BTRFS_BALANCE_STATE_PAUSE_REQ) ? ", pause requested" : "");
	else
		printf("Balance on '%s' is paused\n", path);
	/* btrfs-progs divides by the expected count; none known (a balance found on the disk) is all left */
	printf("%llu out of about %llu chunks balanced (%llu considered), %3.f%% left\n",
	       (unsigned long long)a->stat.completed, (unsigned long long)a->stat.expected,
	       (unsigned long long)a->stat.considered,
	       a->stat.expected ? 100 * (1 - (double)a->stat.completed / (double)a->stat.expected) : 100.0);
	if (!verbose)
		return;
	printf("Dumping filters: flags 0x%llx, state 0x%llx, force is %s\n", (unsigned long long)a->flags,
	       (unsigned long long)a->state, (a->flags & BTRFS_BALANCE_FORCE) ? "on" : "off");
	if (a->flags & BTRFS_BALANCE_DATA)
		describe_args(stdout, "DATA ", &a->data);
	if (a->flags & BTRFS_BALANCE_METADATA)
		describe_args(stdout, "METADATA ", &a->meta);
	if (a->flags & BTRFS_BALANCE_SYSTEM)
		describe_args(stdout, "SYSTEM ", &a->sys);
}

struct item_found {
	bool found;
	int ret;
	struct ub_balance b;
};

static int item_cb(void *arg, const struct ub_key *key, uint64_t transid, const uint8_t *data, uint32_t len)
{
	struct item_found *f = arg;

	if (key->objectid != BTRFS_BALANCE_OBJECTID || key->type != BTRFS_TEMPORARY_ITEM_KEY || key->offset != 0)
		return 0;
	f->found = true;
	f->ret = ub_balance_item_decode(data, len, &f->b);
	return 0;
}

static int ctl_online(struct target *t, const char *verb, bool verbose)
{
	struct btrfs_ioctl_balance_args args;
	int ret, ctl;

	if (!strcmp(verb, "resume")) {
		struct ub_balance b;

		memset(&b, 0, sizeof(b));
		b.flags = BTRFS_BALANCE_RESUME;
		return balance_online(t, &b);
	}
	if (!strcmp(verb, "status")) {
		memset(&args, 0, sizeof(args));
		if (ioctl(t->fd, BTRFS_IOC_BALANCE_PROGRESS, &args) < 0) {
			if (errno == ENOTCONN) {
				printf("No balance found on '%s'\n", t->path);
				return EXIT_OK;
			}
			fprintf(stderr, "ERROR: balance status on '%s' failed: %s\n", t->path, strerror(errno));
			return EXIT_FATAL;
		}
		print_status(t->path, &args, verbose);
		return EXIT_PROBLEMS;
	}
	ctl = !strcmp(verb, "pause") ? BTRFS_BALANCE_CTL_PAUSE : BTRFS_BALANCE_CTL_CANCEL;
	/* the kernel takes the int itself as the argument; FUSE passes what the argument points at */
	ret = t->fuse ? ioctl(t->fd, BTRFS_IOC_BALANCE_CTL, &ctl) : ioctl(t->fd, BTRFS_IOC_BALANCE_CTL, ctl);
	if (ret < 0) {
		int err = errno;

		fprintf(stderr, "ERROR: balance %s on '%s' failed: %s\n", verb, t->path,
			err == ENOTCONN ? (ctl == BTRFS_BALANCE_CTL_PAUSE ? "Not running" : "Not in progress")
					: strerror(err));
		return err == ENOTCONN ? EXIT_FATAL : EXIT_PROBLEMS;
	}
	return EXIT_OK;
}

/* Devices nothing has mounted: no balance runs there; one may be paused or interrupted (its item). */
static int ctl_offline(struct open_args *oa, char **devs, int n, const char *verb, bool verbose)
{
	const char *path = devs[0];
	struct target t;
	int ret, rc;

	if (!strcmp(verb, "pause")) {
		fprintf(stderr, "ERROR: balance pause on '%s' failed: Not running\n", path);
		return EXIT_FATAL;
	}
	if (!strcmp(verb, "status")) {
		struct ub_search_key sk = { .tree = BTRFS_ROOT_TREE_OBJECTID,
					    .min = { BTRFS_BALANCE_OBJECTID, BTRFS_TEMPORARY_ITEM_KEY, 0 },
					    .max = { BTRFS_BALANCE_OBJECTID, BTRFS_TEMPORARY_ITEM_KEY, 0 },
					    .max_transid = UINT64_MAX };
		struct item_found f = { 0 };
		struct btrfs_ioctl_balance_args args;

		if (target_open_devs(&t, oa, devs, n, false))
			return EXIT_FATAL;
		ret = target_search(&t, &sk, item_cb, &f);
		target_close(&t);
		if (!ret)
			ret = f.ret;
		if (ret) {
			fprintf(stderr, "ERROR: balance status on '%s' failed: %s%s\n", path, strerror(-ret),
				ret == -EUCLEAN ? " (the balance item of the root tree is too short)" : "");
			return EXIT_FATAL;
		}
		if (!f.found) {
			printf("No balance found on '%s'\n", path);
			return final_rc(oa, EXIT_OK);
		}
		memset(&args, 0, sizeof(args));
		args.flags = f.b.flags;
		args.data = f.b.data;
		args.meta = f.b.meta;
		args.sys = f.b.sys;
		print_status(path, &args, verbose);
		return final_rc(oa, EXIT_PROBLEMS);
	}
	if (target_open_devs(&t, oa, devs, n, true))
		return EXIT_FATAL;
	if (!strcmp(verb, "cancel")) {
		ret = ub_engine_balance_cancel(t.e);
		if (ret == -ENOTCONN) {
			fprintf(stderr, "ERROR: balance cancel on '%s' failed: Not in progress\n", path);
			rc = EXIT_FATAL;
		} else if (ret) {
			fprintf(stderr, "ERROR: balance cancel on '%s' failed: %s\n", path, strerror(-ret));
			rc = EXIT_PROBLEMS;
		} else {
			rc = EXIT_OK;
		}
	} else {
		struct ub_balance_progress done;
		struct printer pr = { isatty(2), oa->verbosity };

		catch_signals();
		ret = ub_engine_balance_resume(t.e, on_progress, &pr, &done);
		if (pr.tty && done.expected)
			fprintf(stderr, "\n");
		rc = balance_offline_answer(path, "resume", ret, &done, oa);
	}
	target_close(&t);
	return final_rc(oa, rc);
}

static int cmd_balance_ctl(const char *verb, int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "help", no_argument, NULL, 'h' },
		OPEN_ARGS_LONGOPTS,
		{ NULL, 0, NULL, 0 },
	};
	struct open_args oa;
	struct target t;
	int opt, ret, rc;

	open_args_init(&oa);
	optind = 1;
	while ((opt = getopt_long(argc, argv, "vqh", longopts, NULL)) != -1) {
		if (opt == 'h') {
			ctl_usage(stdout, verb);
			return EXIT_OK;
		}
		ret = open_args_parse(&oa, opt, optarg);
		if (ret == 1)
			continue;
		if (ret == 0)
			ctl_usage(stderr, verb);
		return EXIT_FATAL;
	}
	if (optind >= argc) {
		fprintf(stderr, "ubtrfs balance %s: no device or mount point given\n", verb);
		ctl_usage(stderr, verb);
		return EXIT_FATAL;
	}
	if (!target_args_mounted(argv + optind, argc - optind))
		return ctl_offline(&oa, argv + optind, argc - optind, verb, oa.verbosity >= UB_LOG_INFO);
	if (target_open_path(&t, argv[optind], "balance"))
		return EXIT_FATAL;
	rc = ctl_online(&t, verb, oa.verbosity >= UB_LOG_INFO);
	target_close(&t);
	return rc;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: ubtrfs balance start|pause|cancel|resume|status [OPTIONS] DEV...|MOUNTPOINT\n\n"
		   "  start   relocate block groups (convert their profile); 'ubtrfs balance start --help'\n"
		   "  pause   pause the running balance\n"
		   "  cancel  cancel the running or paused balance\n"
		   "  resume  resume a paused or interrupted balance\n"
		   "  status  show the state of a running or paused balance\n");
}

int cmd_balance(int argc, char **argv)
{
	static const char *const ctls[] = { "pause", "cancel", "resume", "status" };

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
	for (size_t i = 0; i < sizeof(ctls) / sizeof(ctls[0]); i++)
		if (!strcmp(argv[1], ctls[i]))
			return cmd_balance_ctl(ctls[i], argc - 1, argv + 1);
	fprintf(stderr, "ubtrfs balance: unknown subcommand '%s'\n", argv[1]);
	usage(stderr);
	return EXIT_FATAL;
}
