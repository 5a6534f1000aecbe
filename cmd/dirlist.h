/* SPDX-License-Identifier: MIT */
/* A directory's entries copied out of the library's callback, for the walks of ls and restore. */
#ifndef UBTRFS_CMD_DIRLIST_H
#define UBTRFS_CMD_DIRLIST_H

#include <stddef.h>
#include <stdint.h>
#include "ubtrfs/fs.h"

struct entry {
	struct ub_dirent de; /* de.name points at `name` */
	char *name;          /* NUL-terminated copy */
	struct ub_fs *fs;    /* the filesystem (an older root) it was listed from; NULL: the one in use */
	uint64_t gen;        /* that root's generation */
};

struct entries {
	struct entry *v;
	size_t n, cap;
	struct ub_fs *fs; /* what entries_add marks the entries it adds with */
	uint64_t gen;
};

/* A callback for ub_dir_iterate (arg: struct entries): 0, -ENOMEM. */
int entries_add(void *arg, const struct ub_dirent *de);
void entries_free(struct entries *es);

#endif
