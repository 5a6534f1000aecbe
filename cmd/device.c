// SPDX-License-Identifier: MIT
/* ubtrfs device SUBCOMMAND: the dispatcher. */
#include <stdio.h>
#include <string.h>

#include "cmd.h"
#include "device_change.h"

static const char help[] =
	"usage: ubtrfs device SUBCOMMAND [OPTIONS] ...\n\n"
	"  add      add devices to a filesystem\n"
	"  remove   remove devices from a filesystem, what they hold moved first ('delete' too)\n\n"
	"'ubtrfs device SUBCOMMAND --help' describes one.\n";

int cmd_device(int argc, char **argv)
{
	static const struct {
		const char *name;
		int (*fn)(int, char **);
	} subs[] = {
		{ "add", cmd_device_add }, { "remove", cmd_device_remove }, { "delete", cmd_device_remove },
	};

	if (argc < 2)
		return usage_error("device", "expected a subcommand: add, remove");
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
		fputs(help, stdout);
		return EXIT_OK;
	}
	for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++)
		if (!strcmp(argv[1], subs[i].name))
			return subs[i].fn(argc - 1, argv + 1);
	return usage_error("device", "unknown subcommand '%s'", argv[1]);
}
