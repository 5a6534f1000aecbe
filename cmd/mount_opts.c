/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cmd.h"
#include "mount.h"

/* Options the kernel's btrfs takes that mean nothing on a read-only mount: accepted and ignored. */
static const char *const harmless[] = { "ro", "noatime", "relatime", "nodev", "nosuid", "noexec", "defaults", NULL };

/* SIZE as mount options write it (cache=, readahead=): bytes, or with a K, M or G suffix (powers of 1024). */
static int parse_size(const char *val, uint64_t *out)
{
	char *end;
	unsigned long long v;
	int shift = 0;

	errno = 0;
	v = strtoull(val, &end, 10);
	if (errno || end == val || *val == '-')
		return -EINVAL;
	switch (*end) {
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	default: break;
	}
	if (*end || v > (UINT64_MAX >> shift))
		return -EINVAL;
	*out = (uint64_t)v << shift;
	return 0;
}

static int one_opt(struct mount_opts *mo, char *opt)
{
	char *val = strchr(opt, '=');

	if (val)
		*val++ = '\0';
	if (!strcmp(opt, "subvol") && val && *val) {
		mo->subvol = strdup(val);
		return mo->subvol ? 0 : -ENOMEM;
	}
	if (!strcmp(opt, "subvolid") && val) {
		if (parse_u64(val, &mo->subvolid) || !mo->subvolid) {
			fprintf(stderr, "ubtrfs mount: bad subvolid '%s'\n", val);
			return -EINVAL;
		}
		return 0;
	}
	if (!strcmp(opt, "generation") && val) {
		if (parse_u64(val, &mo->generation) || !mo->generation) {
			fprintf(stderr, "ubtrfs mount: bad generation '%s'\n", val);
			return -EINVAL;
		}
		return 0;
	}
	if (!strcmp(opt, "root") && val) {
		if (parse_u64(val, &mo->root_bytenr) || !mo->root_bytenr) {
			fprintf(stderr, "ubtrfs mount: bad root '%s'\n", val);
			return -EINVAL;
		}
		return 0;
	}
	if (!strcmp(opt, "cache") && val) {
		/* below a few MiB the tree cache cannot hold one walk's path and its readahead */
		if (parse_size(val, &mo->cache_bytes) || mo->cache_bytes < (16ULL << 20)) {
			fprintf(stderr, "ubtrfs mount: bad cache size '%s' (at least 16M; K, M, G suffixes)\n", val);
			return -EINVAL;
		}
		return 0;
	}
	if (!strcmp(opt, "readahead") && val) {
		/* the kernel takes the window in KiB; 0 leaves its default */
		if (parse_size(val, &mo->readahead_bytes) || mo->readahead_bytes > (1ULL << 30)) {
			fprintf(stderr, "ubtrfs mount: bad readahead '%s' (at most 1G; K, M, G suffixes)\n", val);
			return -EINVAL;
		}
		return 0;
	}
	if (!val ? !strcmp(opt, "usebackuproot") : !strcmp(opt, "rescue") && !strcmp(val, "usebackuproot")) {
		mo->usebackuproot = true;
		return 0;
	}
	if (!val && !strcmp(opt, "nologreplay")) {
		mo->nologreplay = true;
		return 0;
	}
	if (!val && !strcmp(opt, "degraded")) {
		mo->degraded = true;
		return 0;
	}
	for (int i = 0; !val && harmless[i]; i++)
		if (!strcmp(opt, harmless[i]))
			return 0;
	if (!val && !strcmp(opt, "rw"))
		fprintf(stderr, "ubtrfs mount: the mount is read-only, 'rw' cannot be given\n");
	else
		fprintf(stderr, "ubtrfs mount: unknown option '%s%s%s'\n", opt, val ? "=" : "", val ? val : "");
	return -EINVAL;
}

int mount_opts_parse(struct mount_opts *mo, const char *list)
{
	char *copy = strdup(list), *save = NULL;
	int ret = copy ? 0 : -ENOMEM;

	for (char *opt = copy ? strtok_r(copy, ",", &save) : NULL; opt && !ret; opt = strtok_r(NULL, ",", &save))
		ret = one_opt(mo, opt);
	free(copy);
	return ret;
}
