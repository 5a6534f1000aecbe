/* SPDX-License-Identifier: MIT */
/* ubtrfs dump-super: reads superblock copies straight from the devices, even when they are damaged. */
#include <errno.h>
#include <string.h>
#include "cmd.h"
#include "print.h"

static const char help[] =
	"usage: ubtrfs dump-super [OPTIONS] DEV...\n\n"
	"Print the superblock of each device.\n\n"
	"  -a, --all          print every superblock copy that exists (64 KiB, 64 MiB, 256 GiB)\n"
	"  -s, --super N      print copy N only (0, 1 or 2)\n"
	"  -f, --full         also print the system chunk array and the backup roots\n"
	"  -F, --force        print a copy even when it has no btrfs magic\n"
	"  -h, --help         this text\n\n"
	"Exit codes: 0 every printed copy is valid, 1 a copy is invalid or missing,\n"
	"2 usage or I/O error, or no copy has btrfs magic (not btrfs).\n";

static int dump_one(struct ub_dev *dev, int mirror, bool full, bool force, bool explicit_mirror, bool *magic)
{
	uint8_t sb[UB_SUPER_INFO_SIZE];
	uint64_t off = ub_super_offset(mirror);
	char why[200];
	int ret;

	if (off + UB_SUPER_INFO_SIZE > ub_dev_size(dev)) {
		if (explicit_mirror || mirror == 0) {
			fprintf(stderr, "ubtrfs: error: %s: superblock copy %d at %llu is beyond the end of the device\n",
				ub_dev_path(dev), mirror, (unsigned long long)off);
			return EXIT_PROBLEMS;
		}
		return EXIT_OK;
	}
	ret = ub_dev_read(dev, sb, sizeof(sb), off);
	if (ret) {
		fprintf(stderr, "ubtrfs: error: %s: cannot read superblock copy %d at %llu: %s\n", ub_dev_path(dev), mirror,
			(unsigned long long)off, strerror(-ret));
		return EXIT_FATAL;
	}
	ret = ub_super_validate(sb, off, why, sizeof(why));
	if (ret != -ENOENT)
		*magic = true;
	if (ret == -ENOENT && !force) {
		fprintf(stderr, "ubtrfs: error: %s: superblock copy %d at %llu: %s\n", ub_dev_path(dev), mirror,
			(unsigned long long)off, why);
		return EXIT_PROBLEMS;
	}
	printf("superblock: bytenr=%llu, device=%s\n", (unsigned long long)off, ub_dev_path(dev));
	printf("---------------------------------------------------------\n");
	ub_print_super(stdout, sb, full);
	printf("\n");
	if (ret) {
		fprintf(stderr, "ubtrfs: error: %s: superblock copy %d at %llu is invalid: %s\n", ub_dev_path(dev), mirror,
			(unsigned long long)off, why);
		return EXIT_PROBLEMS;
	}
	return EXIT_OK;
}

int cmd_dump_super(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "all", no_argument, NULL, 'a' }, { "super", required_argument, NULL, 's' },
		{ "full", no_argument, NULL, 'f' }, { "force", no_argument, NULL, 'F' },
		{ "help", no_argument, NULL, 'h' }, { NULL, 0, NULL, 0 },
	};
	bool all = false, full = false, force = false;
	int mirror = 0, opt, rc = EXIT_OK;
	bool explicit_mirror = false;
	uint64_t v;

	while ((opt = getopt_long(argc, argv, "as:fFh", longopts, NULL)) != -1) {
		switch (opt) {
		case 'a': all = true; break;
		case 'f': full = true; break;
		case 'F': force = true; break;
		case 's':
			if (parse_u64(optarg, &v) || v >= UB_SUPER_MIRROR_MAX)
				return usage_error("dump-super", "invalid superblock copy '%s' (0, 1 or 2)", optarg);
			mirror = (int)v;
			explicit_mirror = true;
			break;
		case 'h': fputs(help, stdout); return EXIT_OK;
		default: return usage_error("dump-super", "invalid option");
		}
	}
	if (optind >= argc)
		return usage_error("dump-super", "no device given");
	for (int i = optind; i < argc; i++) {
		struct ub_dev *dev;
		int ret = ub_dev_open(argv[i], false, &dev);

		if (ret) {
			fprintf(stderr, "ubtrfs: error: %s: cannot open: %s\n", argv[i], strerror(-ret));
			rc = EXIT_FATAL;
			continue;
		}
		bool magic = false;
		for (int m = all ? 0 : mirror; m < (all ? UB_SUPER_MIRROR_MAX : mirror + 1); m++) {
			int r = dump_one(dev, m, full, force, explicit_mirror, &magic);
			if (r > rc)
				rc = r;
		}
		if (!magic && !force && !all) {
			/* the copy asked for is not there: say whether another one is */
			for (int m = 0; m < UB_SUPER_MIRROR_MAX; m++) {
				uint8_t sb[UB_SUPER_INFO_SIZE];
				char why[160];
				uint64_t off = ub_super_offset(m);
				if (m == mirror || off + UB_SUPER_INFO_SIZE > ub_dev_size(dev) ||
				    ub_dev_read(dev, sb, sizeof(sb), off))
					continue;
				if (ub_super_validate(sb, off, why, sizeof(why)) == 0) {
					fprintf(stderr, "ubtrfs: error: %s: superblock copy %d at %llu is valid: print it with -s %d or --all\n",
						argv[i], m, (unsigned long long)off, m);
					magic = true;
					break;
				}
			}
		}
		if (!magic && !force) {
			fprintf(stderr, "ubtrfs: error: %s: not a btrfs device (no superblock with btrfs magic)\n", argv[i]);
			rc = EXIT_FATAL;
		}
		ub_dev_close(dev);
	}
	return rc;
}
