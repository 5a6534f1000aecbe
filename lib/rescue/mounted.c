/* SPDX-License-Identifier: MIT */
/*
 * Is a device mounted? The kernel's mounts are mkfs's probe's to find
 * (lib/mkfs/probe.c: loop devices over image files, members of multi-device
 * filesystems); a ubtrfs (FUSE) mount names its first device in mountinfo's
 * source field, so that is looked up here.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ubtrfs/mkfs.h"
#include "ubtrfs/rescue.h"

static bool fuse_mounted(const char *path)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	struct stat want, st;
	char *line = NULL;
	size_t cap = 0;
	bool found = false;

	if (!f)
		return false;
	if (stat(path, &want)) {
		fclose(f);
		return false;
	}
	while (!found && getline(&line, &cap, f) > 0) {
		char *sep = strstr(line, " - ");
		char fstype[256], src[4096];

		if (!sep || sscanf(sep + 3, "%255s %4095s", fstype, src) != 2 || strcmp(fstype, "fuse.ubtrfs"))
			continue;
		if (stat(src, &st))
			continue;
		found = S_ISBLK(want.st_mode) ? S_ISBLK(st.st_mode) && st.st_rdev == want.st_rdev
					      : st.st_dev == want.st_dev && st.st_ino == want.st_ino;
	}
	free(line);
	fclose(f);
	return found;
}

int ub_rescue_check_unmounted(const char *const *paths, int npaths, char *why, size_t whylen)
{
	for (int i = 0; i < npaths; i++) {
		/* force: an existing filesystem is what a rescue expects; only a mount is refused */
		if (ub_mkfs_check_paths(&paths[i], 1, true, why, whylen) == -EBUSY)
			return -EBUSY;
		if (fuse_mounted(paths[i])) {
			snprintf(why, whylen, "%s is mounted by ubtrfs mount", paths[i]);
			return -EBUSY;
		}
	}
	return 0;
}
