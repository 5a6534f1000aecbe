/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cmd.h"
#include "mount.h"
#include "ubtrfs/format.h"

/*
 * Options the kernel's btrfs takes that change nothing here: accepted and
 * ignored (device tuning, and what only the kernel's own caches mean).
 */
static const char *const harmless[] = { "defaults", "ssd", "nossd", "ssd_spread", "nossd_spread", "noautodefrag",
					"space_cache=v2", "nodiscard", "datacow", "datasum", "norecovery", "exec",
					"async", "nobarrier", "barrier", "flushoncommit",
					"noflushoncommit", NULL };
/* Options the kernel's btrfs takes that this mount does not do: refused with a reason. */
static const struct {
	const char *opt, *why;
} refused[] = {
	{ "discard", "discard (trim) is not supported: run fstrim on the devices when they are not mounted" },
	{ "discard=sync", "discard (trim) is not supported" },
	{ "discard=async", "discard (trim) is not supported" },
	{ "space_cache", "the v1 space cache is not kept: use space_cache=v2 (the free space tree)" },
	{ "space_cache=v1", "the v1 space cache is not kept: use space_cache=v2 (the free space tree)" },
	{ "autodefrag", "autodefrag is not supported" },
	{ "user_subvol_rm_allowed", "use ubtrfs subvolume delete" },
	{ NULL, NULL },
};

/* ALGO[:LEVEL] of compress= and compress-force= (no value: zlib, as btrfs). */
static int parse_compress(const char *val, int *type, int *level)
{
	const char *colon = val ? strchr(val, ':') : NULL;
	size_t n = val ? (colon ? (size_t)(colon - val) : strlen(val)) : 0;
	char *end;
	long lv = 0;

	if (!val || (n == 4 && !strncmp(val, "zlib", 4)) || (n == 3 && !strncmp(val, "yes", 3)))
		*type = UB_COMPRESS_ZLIB;
	else if (n == 3 && !strncmp(val, "lzo", 3))
		*type = UB_COMPRESS_LZO;
	else if (n == 4 && !strncmp(val, "zstd", 4))
		*type = UB_COMPRESS_ZSTD;
	else if ((n == 2 && !strncmp(val, "no", 2)) || (n == 4 && !strncmp(val, "none", 4)))
		*type = 0;
	else
		return -EINVAL;
	if (colon) {
		errno = 0;
		lv = strtol(colon + 1, &end, 10);
		/* the kernel's ranges: zlib 1..9, zstd 1..15 (negative: fast levels), lzo none */
		if (errno || *end || end == colon + 1 || *type == UB_COMPRESS_LZO ||
		    (*type == UB_COMPRESS_ZLIB && (lv < 1 || lv > 9)) ||
		    (*type == UB_COMPRESS_ZSTD && (lv < -15 || lv > 15 || lv == 0)) || !*type)
			return -EINVAL;
	}
	*level = (int)lv;
	return 0;
}

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
	if (!val && !strcmp(opt, "skip_balance")) {
		mo->skip_balance = true;
		return 0;
	}
	if (!val && !strcmp(opt, "degraded")) {
		mo->degraded = true;
		return 0;
	}
	if (!val && (!strcmp(opt, "ro") || !strcmp(opt, "rw"))) {
		mo->ro = opt[0] == 'r' && opt[1] == 'o';
		mo->rw = !mo->ro;
		return 0;
	}
	if (!strcmp(opt, "commit")) {
		/* the kernel's default when given without a value; 0 is "the default" too */
		if (!val || !*val) {
			mo->commit_secs = MOUNT_COMMIT_DEFAULT;
			return 0;
		}
		if (parse_u64(val, &mo->commit_secs) || mo->commit_secs > 300 * 24 * 3600) {
			fprintf(stderr, "ubtrfs mount: bad commit interval '%s' (seconds)\n", val);
			return -EINVAL;
		}
		if (!mo->commit_secs)
			mo->commit_secs = MOUNT_COMMIT_DEFAULT;
		return 0;
	}
	if (!strcmp(opt, "compress") || !strcmp(opt, "compress-force")) {
		if (parse_compress(val, &mo->compress, &mo->compress_level)) {
			fprintf(stderr, "ubtrfs mount: bad %s '%s' (zlib[:1-9], lzo, zstd[:1-15], no)\n", opt,
				val ? val : "");
			return -EINVAL;
		}
		mo->compress_force = opt[8] == '-' && mo->compress;
		return 0;
	}
	if (!val && (!strcmp(opt, "treelog") || !strcmp(opt, "notreelog"))) {
		/* notreelog: every fsync is a full commit, as the kernel's option makes it */
		mo->notreelog = opt[0] == 'n';
		return 0;
	}
	if (!val && (!strcmp(opt, "nodatacow") || !strcmp(opt, "nodatasum"))) {
		/* nodatacow implies nodatasum, as on the kernel */
		mo->nodatasum = true;
		if (!strcmp(opt, "nodatacow"))
			mo->nodatacow = true;
		return 0;
	}
	if (!strcmp(opt, "max_inline") && val) {
		if (parse_size(val, &mo->max_inline)) {
			fprintf(stderr, "ubtrfs mount: bad max_inline '%s'\n", val);
			return -EINVAL;
		}
		return 0;
	}
	if (!strcmp(opt, "dirty") && val) {
		if (parse_size(val, &mo->dirty_bytes) || mo->dirty_bytes < (1ULL << 20)) {
			fprintf(stderr, "ubtrfs mount: bad dirty size '%s' (at least 1M; K, M, G suffixes)\n", val);
			return -EINVAL;
		}
		return 0;
	}
	if (!val && (!strcmp(opt, "noatime") || !strcmp(opt, "relatime") || !strcmp(opt, "strictatime"))) {
		mo->atime = opt[0] == 'n' ? MOUNT_NOATIME : opt[0] == 'r' ? MOUNT_RELATIME : MOUNT_STRICTATIME;
		return 0;
	}
	if (!val && (!strcmp(opt, "acl") || !strcmp(opt, "noacl"))) {
		mo->noacl = opt[0] == 'n';
		return 0;
	}
	/* the last of nosuid / suid (nodev / dev) given wins, as for mount(8) */
	if (!val && (!strcmp(opt, "nosuid") || !strcmp(opt, "suid"))) {
		mo->nosuid = opt[0] == 'n';
		mo->suid = !mo->nosuid;
		return 0;
	}
	if (!val && (!strcmp(opt, "nodev") || !strcmp(opt, "dev"))) {
		mo->nodev = opt[0] == 'n';
		mo->dev = !mo->nodev;
		return 0;
	}
	if (!val && !strcmp(opt, "noexec")) {
		mo->noexec = true;
		return 0;
	}
	{
		char whole[256];

		snprintf(whole, sizeof(whole), "%s%s%s", opt, val ? "=" : "", val ? val : "");
		for (int i = 0; harmless[i]; i++)
			if (!strcmp(whole, harmless[i]))
				return 0;
		for (int i = 0; refused[i].opt; i++)
			if (!strcmp(whole, refused[i].opt)) {
				fprintf(stderr, "ubtrfs mount: -o %s: %s\n", whole, refused[i].why);
				return -EINVAL;
			}
		fprintf(stderr, "ubtrfs mount: unknown option '%s'\n", whole);
	}
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
