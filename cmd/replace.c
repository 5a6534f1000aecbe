// SPDX-License-Identifier: MIT
/*
 * ubtrfs replace start [-f] SRC|DEVID|missing NEWDEV DEV...|MOUNTPOINT, replace status, replace cancel:
 * offline through the library (ubtrfs/balance.h), on a mounted btrfs of the
 * kernel through BTRFS_IOC_DEV_REPLACE as btrfs-progs asks it.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include <linux/btrfs.h>

#include "cmd.h"
#include "fs_target.h"
#include "ubtrfs/balance.h"
#include "ubtrfs/devinfo.h"
#include "ubtrfs/fsinfo.h"

static const char start_help[] =
	"usage: ubtrfs replace start [OPTIONS] SRCDEV|DEVID|missing NEWDEV MOUNTPOINT\n"
	"       ubtrfs replace start [OPTIONS] SRCDEV|DEVID|missing NEWDEV DEV...\n\n"
	"Put NEWDEV in the place of a device: everything the device holds is written onto NEWDEV at\n"
	"the same place (read from the device, or rebuilt from the other copies and parity when it\n"
	"is missing or fails), then NEWDEV takes its devid and the old device's superblocks are\n"
	"wiped. Nothing is relocated. NEWDEV must be at least as large. DEV... are the filesystem's\n"
	"devices (nothing may have it mounted); 'missing' names the device that is not there.\n\n"
	"  -f, --force        overwrite a NEWDEV that holds a btrfs filesystem\n"
	"  -B                 (accepted: an offline replace is always done before the command returns)\n"
	OPEN_ARGS_HELP
	"Exit codes: 0 done, 1 stopped by a problem (data that no copy or parity gives back), 2 usage\n"
	"or fatal error.\n";

/* DEVID, a device path of the filesystem, or "missing" (0). */
static int which(struct ub_fs *fs, const char *arg, uint64_t *devid)
{
	struct ub_device_info *devs = NULL;
	char *end, *want;
	int n = 0, ret;

	if (!strcmp(arg, "missing")) {
		*devid = 0;
		return 0;
	}
	*devid = strtoull(arg, &end, 10);
	if (!*end && end != arg)
		return 0;
	want = realpath(arg, NULL);
	ret = ub_volume_list_devices(ub_fs_volume(fs), &devs, &n);
	for (int i = 0; !ret && want && i < n; i++) {
		char *have = devs[i].path ? realpath(devs[i].path, NULL) : NULL;

		if (have && !strcmp(have, want))
			*devid = devs[i].devid;
		free(have);
	}
	free(devs);
	free(want);
	return ret ? ret : *devid ? 0 : -ENOENT;
}

static int start_online(const char *mnt, const char *src, const char *dst, bool force)
{
	struct btrfs_ioctl_dev_replace_args a;
	int fd = open(mnt, O_RDONLY | O_DIRECTORY), ret = EXIT_OK;
	char *end;
	unsigned long long id;

	if (fd < 0) {
		fprintf(stderr, "ERROR: cannot open %s: %s\n", mnt, strerror(errno));
		return EXIT_FATAL;
	}
	memset(&a, 0, sizeof(a));
	a.cmd = BTRFS_IOCTL_DEV_REPLACE_CMD_START;
	a.start.cont_reading_from_srcdev_mode = BTRFS_IOCTL_DEV_REPLACE_CONT_READING_FROM_SRCDEV_MODE_ALWAYS;
	id = strtoull(src, &end, 10);
	if (!*end && end != src)
		a.start.srcdevid = id;
	else
		snprintf((char *)a.start.srcdev_name, sizeof(a.start.srcdev_name), "%s", src);
	snprintf((char *)a.start.tgtdev_name, sizeof(a.start.tgtdev_name), "%s", dst);
	/* as btrfs-progs: a target holding a btrfs filesystem needs -f (the kernel's ioctl overwrites it) */
	if (!force) {
		char magic[8];
		int tfd = open(dst, O_RDONLY);

		if (tfd >= 0 && pread(tfd, magic, sizeof(magic), 65536 + 64) == (ssize_t)sizeof(magic) &&
		    !memcmp(magic, "_BHRfS_M", sizeof(magic))) {
			fprintf(stderr, "ERROR: %s appears to contain an existing filesystem (btrfs)\n"
					"Use the -f option to force overwrite of %s\n", dst, dst);
			close(tfd);
			close(fd);
			return EXIT_FATAL;
		}
		if (tfd >= 0)
			close(tfd);
	}
	if (ioctl(fd, BTRFS_IOC_DEV_REPLACE, &a) < 0 || a.result != BTRFS_IOCTL_DEV_REPLACE_RESULT_NO_ERROR) {
		fprintf(stderr, "ERROR: ioctl(DEV_REPLACE_START) on '%s' failed: %s (result %llu)\n", mnt, strerror(errno),
			(unsigned long long)a.result);
		ret = EXIT_PROBLEMS;
	}
	close(fd);
	return ret;
}

static int cmd_replace_start(int argc, char **argv)
{
	static const struct option longopts[] = { { "force", no_argument, NULL, 'f' },
						  { "help", no_argument, NULL, 0x1ff }, OPEN_ARGS_LONGOPTS,
						  { NULL, 0, NULL, 0 } };
	struct open_args oa;
	struct target t;
	bool force = false;
	uint64_t devid;
	int opt, r, ret, nfs;
	char **fs;

	open_args_init(&oa);
	optind = 1;
	while ((opt = getopt_long(argc, argv, "+fBrvqh", longopts, NULL)) != -1) {
		if ((r = open_args_parse(&oa, opt, optarg)) != 0) {
			if (r < 0)
				return usage_error("replace start", "invalid value '%s'", optarg);
			continue;
		}
		switch (opt) {
		case 'f': force = true; break;
		case 'B': case 'r': break;
		case 'h': case 0x1ff: fputs(start_help, stdout); return EXIT_OK;
		default: return usage_error("replace start", "invalid option");
		}
	}
	if (argc - optind < 3)
		return usage_error("replace start", "expected SRCDEV|DEVID|missing NEWDEV and a mount point or DEV...");
	if (argc - optind == 3 && target_args_mounted(argv + optind + 2, 1))
		return start_online(argv[optind + 2], argv[optind], argv[optind + 1], force);
	fs = argv + optind + 2;
	nfs = argc - optind - 2;
	if (nfs > 0 && !strcmp(fs[0], "--")) {
		fs++;
		nfs--;
	}
	/* the device being replaced may be gone (or failing): the filesystem opens without it */
	oa.degraded = true;
	if (target_open_devs(&t, &oa, fs, nfs, true))
		return EXIT_FATAL;
	ret = which(t.fs, argv[optind], &devid);
	if (ret) {
		fprintf(stderr, "ERROR: %s is not a device of this filesystem\n", argv[optind]);
		target_close(&t);
		return EXIT_FATAL;
	}
	ret = ub_engine_device_replace(t.e, devid, argv[optind + 1], force);
	if (ret)
		fprintf(stderr, "ERROR: replace of %s by %s failed: %s\n", argv[optind], argv[optind + 1], strerror(-ret));
	else if (oa.verbosity >= UB_LOG_WARN)
		printf("replaced %s by %s\n", argv[optind], argv[optind + 1]);
	target_close(&t);
	return final_rc(&oa, !ret ? EXIT_OK : ret == -EEXIST || ret == -ENOENT || ret == -ENOSPC ? EXIT_FATAL
					       : EXIT_PROBLEMS);
}

static const char help[] =
	"usage: ubtrfs replace start [OPTIONS] SRCDEV|DEVID|missing NEWDEV MOUNTPOINT|DEV...\n"
	"       ubtrfs replace status|cancel MOUNTPOINT|DEV...\n\n"
	"  start    put a new device in the place of one (see 'ubtrfs replace start --help')\n"
	"  status   offline: nothing runs in the background ('Never started'); on a mount: the state\n"
	"           its DEV_REPLACE ioctl reports (btrfs-progs' words)\n"
	"  cancel   offline: nothing to cancel; on a mount: the copy stops at its next step and the\n"
	"           filesystem stays as it was (the start reports 'Operation canceled')\n";

static int status_or_cancel(int argc, char **argv, bool cancel)
{
	struct btrfs_ioctl_dev_replace_args a;
	int fd;

	if (argc < 2)
		return usage_error(cancel ? "replace cancel" : "replace status", "expected a mount point or DEV...");
	if (!target_args_mounted(argv + 1, 1)) {
		/* an offline replace is done before its command returns: none is ever running */
		if (cancel) {
			fprintf(stderr, "INFO: no replace is running\n");
			return EXIT_OK;
		}
		printf("Never started\n");
		return EXIT_OK;
	}
	fd = open(argv[1], O_RDONLY | O_DIRECTORY);
	if (fd < 0) {
		fprintf(stderr, "ERROR: cannot open %s: %s\n", argv[1], strerror(errno));
		return EXIT_FATAL;
	}
	memset(&a, 0, sizeof(a));
	a.cmd = cancel ? BTRFS_IOCTL_DEV_REPLACE_CMD_CANCEL : BTRFS_IOCTL_DEV_REPLACE_CMD_STATUS;
	if (ioctl(fd, BTRFS_IOC_DEV_REPLACE, &a) < 0) {
		fprintf(stderr, "ERROR: ioctl(DEV_REPLACE) on '%s' failed: %s\n", argv[1], strerror(errno));
		close(fd);
		return EXIT_PROBLEMS;
	}
	close(fd);
	if (cancel) {
		if (a.result == BTRFS_IOCTL_DEV_REPLACE_RESULT_NOT_STARTED)
			fprintf(stderr, "INFO: no replace is running\n");
		return EXIT_OK;
	}
	if (a.status.replace_state == BTRFS_IOCTL_DEV_REPLACE_STATE_STARTED)
		printf("%.1f%% done\n", a.status.progress_1000 / 10.0);
	else
		printf("%s\n", a.status.replace_state == BTRFS_IOCTL_DEV_REPLACE_STATE_NEVER_STARTED ? "Never started"
			       : a.status.replace_state == BTRFS_IOCTL_DEV_REPLACE_STATE_FINISHED ? "Finished"
			       : "Canceled or suspended");
	return EXIT_OK;
}

int cmd_replace(int argc, char **argv)
{
	if (argc < 2)
		return usage_error("replace", "expected a subcommand: start, status, cancel");
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
		fputs(help, stdout);
		return EXIT_OK;
	}
	if (!strcmp(argv[1], "start"))
		return cmd_replace_start(argc - 1, argv + 1);
	if (!strcmp(argv[1], "status"))
		return status_or_cancel(argc - 1, argv + 1, false);
	if (!strcmp(argv[1], "cancel"))
		return status_or_cancel(argc - 1, argv + 1, true);
	return usage_error("replace", "unknown subcommand '%s'", argv[1]);
}
