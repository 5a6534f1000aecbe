// SPDX-License-Identifier: MIT
/*
 * ubtrfs device add DEV... TARGET, ubtrfs device remove DEVID|DEV|missing... TARGET:
 * TARGET is the devices of a filesystem nothing has mounted (the library,
 * ubtrfs/balance.h) or the mount point of a mounted btrfs (the kernel's
 * BTRFS_IOC_ADD_DEV and BTRFS_IOC_RM_DEV_V2, as btrfs-progs asks them).
 *
 * Offline, which arguments are the new (or leaving) devices and which the
 * filesystem's: `add` takes the last FS_DEVS... after `--`, or, without `--`,
 * every argument that holds this filesystem's superblock is the filesystem's
 * and the others are added; `remove` takes ids, paths and "missing" first,
 * then the filesystem's devices.
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
#include "device_change.h"
#include "fs_target.h"
#include "ubtrfs/balance.h"
#include "ubtrfs/engine.h"
#include "ubtrfs/devinfo.h"
#include "ubtrfs/fsinfo.h"
#include "ubtrfs/volume.h"

static const char add_help[] =
	"usage: ubtrfs device add [OPTIONS] NEWDEV... MOUNTPOINT\n"
	"       ubtrfs device add [OPTIONS] NEWDEV... -- DEV...\n\n"
	"Add devices to a filesystem: on a mount point (the kernel's btrfs), or offline to the\n"
	"filesystem on DEV... (the devices after --; without --, every argument holding a btrfs\n"
	"superblock is taken as the filesystem's). Nothing is moved onto the new devices: a\n"
	"balance does that.\n\n"
	"  -f, --force        overwrite a device that holds a btrfs filesystem\n"
	OPEN_ARGS_HELP;

static const char remove_help[] =
	"usage: ubtrfs device remove [OPTIONS] DEVID|DEV|missing... MOUNTPOINT\n"
	"       ubtrfs device remove [OPTIONS] DEVID|DEV|missing... -- DEV...\n\n"
	"Remove devices from a filesystem: what they hold is relocated to the others first. Refused,\n"
	"before anything changes, when a profile in use would be left with fewer devices than it\n"
	"needs (RAID1 2, RAID1C3 3, RAID1C4 4, RAID10 4, RAID5 2, RAID6 3) or when the others have\n"
	"no room. 'missing' removes a device that is not present, rebuilding what it held from the\n"
	"other copies or parity. 'delete' is the same command.\n"
	OPEN_ARGS_HELP;

static bool holds_btrfs(const char *path)
{
	uint8_t sb[4096];
	int fd = open(path, O_RDONLY);
	bool yes = false;

	if (fd < 0)
		return false;
	if (pread(fd, sb, sizeof(sb), 65536) == (ssize_t)sizeof(sb))
		yes = !memcmp(sb + 64, "_BHRfS_M", 8);
	close(fd);
	return yes;
}

/* args: [what...] [--] [fs devs...]; split into the two lists */
static int split_args(char **args, int n, bool by_superblock, char ***what, int *nwhat, char ***fs, int *nfs)
{
	for (int i = 0; i < n; i++) {
		if (!strcmp(args[i], "--")) {
			*what = args;
			*nwhat = i;
			*fs = args + i + 1;
			*nfs = n - i - 1;
			return 0;
		}
	}
	if (!by_superblock)
		return -EINVAL;
	/* the ones with a btrfs superblock are the filesystem's; they come last */
	{
		int k = n;

		while (k > 0 && holds_btrfs(args[k - 1]))
			k--;
		*what = args;
		*nwhat = k;
		*fs = args + k;
		*nfs = n - k;
	}
	return 0;
}

int cmd_device_add(int argc, char **argv)
{
	static const struct option longopts[] = { { "force", no_argument, NULL, 'f' },
						  { "help", no_argument, NULL, 0x1ff }, OPEN_ARGS_LONGOPTS,
						  { NULL, 0, NULL, 0 } };
	struct open_args oa;
	struct target t;
	char **what, **fs;
	int nwhat, nfs, opt, r, rc = EXIT_OK;
	bool force = false;

	open_args_init(&oa);
	optind = 1;
	while ((opt = getopt_long(argc, argv, "+fvqh", longopts, NULL)) != -1) {
		if ((r = open_args_parse(&oa, opt, optarg)) != 0) {
			if (r < 0)
				return usage_error("device add", "invalid value '%s'", optarg);
			continue;
		}
		switch (opt) {
		case 'f': force = true; break;
		case 'h': case 0x1ff: fputs(add_help, stdout); return EXIT_OK;
		default: return usage_error("device add", "invalid option");
		}
	}
	if (argc - optind < 2)
		return usage_error("device add", "expected NEWDEV... and a mount point or the filesystem's devices");
	if (target_args_mounted(argv + argc - 1, 1)) {
		int fd = open(argv[argc - 1], O_RDONLY | O_DIRECTORY);

		if (fd < 0) {
			fprintf(stderr, "ERROR: cannot open %s: %s\n", argv[argc - 1], strerror(errno));
			return EXIT_FATAL;
		}
		for (int i = optind; i < argc - 1; i++) {
			struct btrfs_ioctl_vol_args va;

			memset(&va, 0, sizeof(va));
			snprintf(va.name, sizeof(va.name), "%s", argv[i]);
			if (ioctl(fd, BTRFS_IOC_ADD_DEV, &va) < 0) {
				fprintf(stderr, "ERROR: error adding device '%s': %s\n", argv[i], strerror(errno));
				rc = EXIT_PROBLEMS;
			}
		}
		close(fd);
		return rc;
	}
	if (split_args(argv + optind, argc - optind, true, &what, &nwhat, &fs, &nfs) || nwhat == 0 || nfs == 0)
		return usage_error("device add", "cannot tell the new devices from the filesystem's: put -- before the "
				   "filesystem's devices");
	/* a filesystem that lost a device gets its new one before the lost one is removed */
	oa.degraded = true;
	if (target_open_devs(&t, &oa, fs, nfs, true))
		return EXIT_FATAL;
	for (int i = 0; i < nwhat; i++) {
		uint64_t devid;
		int ret = ub_engine_device_add(t.e, what[i], force, &devid);

		if (ret) {
			fprintf(stderr, "ERROR: error adding device '%s': %s\n", what[i], strerror(-ret));
			rc = ret == -EEXIST || ret == -EINVAL ? EXIT_FATAL : EXIT_PROBLEMS;
			break;
		}
		if (oa.verbosity >= UB_LOG_INFO)
			printf("added %s as device %llu\n", what[i], (unsigned long long)devid);
	}
	target_close(&t);
	return final_rc(&oa, rc);
}

static int progress(void *arg, const struct ub_balance_progress *p)
{
	if (*(bool *)arg)
		fprintf(stderr, "\rrelocating: %llu of %llu block groups", (unsigned long long)p->completed,
			(unsigned long long)p->expected);
	return 0;
}

/* DEVID, a path of a device of the filesystem, or "missing": its devid (0 for missing). */
static int which_device(struct ub_fs *fs, const char *arg, uint64_t *devid)
{
	struct ub_device_info *devs = NULL;
	int n = 0, ret;
	char *end, *want = realpath(arg, NULL);

	if (!strcmp(arg, "missing")) {
		*devid = 0;
		return 0;
	}
	*devid = strtoull(arg, &end, 10);
	if (!*end && end != arg)
		return 0;
	ret = ub_volume_list_devices(ub_fs_volume(fs), &devs, &n);
	if (ret) {
		free(want);
		return ret;
	}
	ret = -ENOENT;
	for (int i = 0; i < n && ret; i++) {
		char *have = devs[i].path ? realpath(devs[i].path, NULL) : NULL;

		if (have && want && !strcmp(have, want)) {
			*devid = devs[i].devid;
			ret = 0;
		}
		free(have);
	}
	free(devs);
	free(want);
	return ret;
}

int cmd_device_remove(int argc, char **argv)
{
	static const struct option longopts[] = { { "help", no_argument, NULL, 0x1ff }, OPEN_ARGS_LONGOPTS,
						  { NULL, 0, NULL, 0 } };
	struct open_args oa;
	struct target t;
	char **what, **fs;
	int nwhat, nfs, opt, r, rc = EXIT_OK;

	open_args_init(&oa);
	optind = 1;
	while ((opt = getopt_long(argc, argv, "+vqh", longopts, NULL)) != -1) {
		if ((r = open_args_parse(&oa, opt, optarg)) != 0) {
			if (r < 0)
				return usage_error("device remove", "invalid value '%s'", optarg);
			continue;
		}
		switch (opt) {
		case 'h': case 0x1ff: fputs(remove_help, stdout); return EXIT_OK;
		default: return usage_error("device remove", "invalid option");
		}
	}
	if (argc - optind < 2)
		return usage_error("device remove", "expected DEVID|DEV|missing... and a mount point or the filesystem's "
				   "devices");
	if (target_args_mounted(argv + argc - 1, 1)) {
		int fd = open(argv[argc - 1], O_RDONLY | O_DIRECTORY);

		if (fd < 0) {
			fprintf(stderr, "ERROR: cannot open %s: %s\n", argv[argc - 1], strerror(errno));
			return EXIT_FATAL;
		}
		for (int i = optind; i < argc - 1; i++) {
			struct btrfs_ioctl_vol_args_v2 va;
			char *end;
			unsigned long long id = strtoull(argv[i], &end, 10);

			memset(&va, 0, sizeof(va));
			if (!*end && end != argv[i]) {
				va.flags = BTRFS_DEVICE_SPEC_BY_ID;
				va.devid = id;
			} else {
				snprintf(va.name, sizeof(va.name), "%s", argv[i]);
			}
			if (ioctl(fd, BTRFS_IOC_RM_DEV_V2, &va) < 0) {
				fprintf(stderr, "ERROR: error removing device '%s': %s\n", argv[i], strerror(errno));
				rc = EXIT_PROBLEMS;
			}
		}
		close(fd);
		return rc;
	}
	for (int i = optind; i < argc; i++)
		if (!strcmp(argv[i], "missing"))
			oa.degraded = true; /* a missing device can only go with the filesystem opened without it */
	if (split_args(argv + optind, argc - optind, false, &what, &nwhat, &fs, &nfs) || nwhat == 0 || nfs == 0) {
		/* without --: the first argument names the device, the rest are the filesystem's */
		what = argv + optind;
		nwhat = 1;
		fs = argv + optind + 1;
		nfs = argc - optind - 1;
	}
	if (target_open_devs(&t, &oa, fs, nfs, true))
		return EXIT_FATAL;
	for (int i = 0; i < nwhat; i++) {
		struct ub_balance_progress done = { 0 };
		bool tty = isatty(2);
		uint64_t devid;
		int ret = which_device(t.fs, what[i], &devid);

		if (ret) {
			fprintf(stderr, "ERROR: %s is not a device of this filesystem\n", what[i]);
			rc = EXIT_FATAL;
			break;
		}
		ret = ub_engine_device_remove(t.e, devid, progress, &tty, &done);
		if (tty && done.expected)
			fprintf(stderr, "\n");
		if (ret) {
			fprintf(stderr, "ERROR: error removing device '%s': %s\n", what[i], strerror(-ret));
			rc = ret == -EINVAL || ret == -ENOENT ? EXIT_FATAL : EXIT_PROBLEMS;
			break;
		}
		if (oa.verbosity >= UB_LOG_INFO)
			printf("removed %s (%llu block groups relocated)\n", what[i], (unsigned long long)done.completed);
	}
	target_close(&t);
	return final_rc(&oa, rc);
}
