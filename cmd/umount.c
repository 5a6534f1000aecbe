/* SPDX-License-Identifier: MIT */
#include <string.h>
#include <unistd.h>
#include "cmd.h"

int cmd_umount(int argc, char **argv)
{
	if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
		printf("usage: ubtrfs umount MOUNTPOINT\n\nUnmount a filesystem 'ubtrfs mount' mounted "
		       "(as fusermount3 -u: the daemon then closes the filesystem and exits).\n");
		return EXIT_OK;
	}
	if (argc != 2)
		return usage_error("umount", "expected one MOUNTPOINT");
	execlp("fusermount3", "fusermount3", "-u", "--", argv[1], (char *)NULL);
	perror("ubtrfs umount: cannot run fusermount3");
	return EXIT_FATAL;
}
