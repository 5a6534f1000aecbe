/* SPDX-License-Identifier: MIT */
#include <string.h>
#include "cmd.h"
#include "ubtrfs/version.h"

static const struct {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *summary;
} commands[] = {
	{ "dump-super", cmd_dump_super, "print the superblock (and its mirror copies)" },
	{ "dump-tree", cmd_dump_tree, "print tree blocks and their items" },
	{ "ls", cmd_ls, "list a directory without mounting" },
	{ "cat", cmd_cat, "write a file's contents to stdout without mounting" },
	{ "filesystem", cmd_filesystem, "show, df, usage, du, label, sync: the filesystem as a whole" },
	{ "subvolume", cmd_subvolume, "create, snapshot, delete, list, show, get-default, set-default" },
	{ "device", cmd_device, "add, remove, stats: the devices of a filesystem" },
	{ "replace", cmd_replace, "start, status, cancel: a new device in the place of one" },
	{ "balance", cmd_balance, "start: move block groups elsewhere, convert their profile" },
	{ "mkfs", cmd_mkfs, "make a new filesystem on one or more devices" },
	{ "mount", cmd_mount, "mount through FUSE, read-write (or -o ro)" },
	{ "umount", cmd_umount, "unmount what 'ubtrfs mount' mounted" },
	{ "check", cmd_check, "verify a filesystem read-only and report every problem found" },
	{ "find-root", cmd_find_root, "list the root trees still on disk (for --root BYTENR)" },
	{ "restore", cmd_restore, "copy the files out of a filesystem, damaged or not, read-only" },
	{ "rescue", cmd_rescue, "undo, super-recover, zero-log, fix-device-size: repair what keeps it from opening" },
	{ "scrub", cmd_scrub, "verify every copy and parity, repair what a good copy proves (start, status...)" },
};

#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

static void usage(FILE *f)
{
	fprintf(f, "usage: ubtrfs COMMAND [OPTIONS] DEV... [TARGET]\n\n"
		   "btrfs in userspace: read and write btrfs filesystems on devices or image files.\n\n"
		   "Commands:\n");
	for (size_t i = 0; i < NCOMMANDS; i++)
		fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].summary);
	fprintf(f, "\n'ubtrfs COMMAND --help' describes a command, 'ubtrfs --version' prints the version.\n"
		   "Exit codes: 0 success, 1 problems found or data partly unreadable, 2 usage or fatal error.\n");
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return EXIT_FATAL;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
		usage(stdout);
		return EXIT_OK;
	}
	if (!strcmp(argv[1], "--version")) {
		printf("ubtrfs %s\n", ub_version());
		return EXIT_OK;
	}
	for (size_t i = 0; i < NCOMMANDS; i++)
		if (!strcmp(argv[1], commands[i].name))
			return commands[i].fn(argc - 1, argv + 1);
	fprintf(stderr, "ubtrfs: unknown command '%s'\n\n", argv[1]);
	usage(stderr);
	return EXIT_FATAL;
}
