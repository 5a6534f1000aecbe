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

/*
 * A name (or a path of names) from the disk for a human-readable message, as
 * check prints paths (pr_name): printable ASCII and well-formed UTF-8 as they
 * are, a backslash doubled, every other byte (newline, escape, a broken UTF-8
 * sequence) as \xNN, so that a hostile name cannot split a line or drive the
 * terminal. Malloc'd; NULL without memory.
 */
char *name_shown(const char *s, size_t len);

#endif
