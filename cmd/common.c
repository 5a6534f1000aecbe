/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <uuid/uuid.h>
#include "ubtrfs/dev.h"
#include "ubtrfs/engine.h"
#include "ubtrfs/scan.h"
#include "cmd.h"

void open_args_init(struct open_args *oa)
{
	/* every field not named here starts as zero / false */
	*oa = (struct open_args){ .verbosity = UB_LOG_WARN, .super_mirror = -1 };
}

int final_rc(const struct open_args *oa, int rc)
{
	return rc == EXIT_OK && oa->errors ? EXIT_PROBLEMS : rc;
}

int parse_u64(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;

	if (!s || !*s || *s == '-')
		return -EINVAL;
	errno = 0;
	/* decimal, or hex with 0x; a leading 0 is not octal (addresses are written in decimal) */
	if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
		v = strtoull(s + 2, &end, 16);
	else
		v = strtoull(s, &end, 10);
	if (errno || *end)
		return -EINVAL;
	*out = v;
	return 0;
}

int open_args_parse(struct open_args *oa, int opt, const char *arg)
{
	uint64_t v;

	switch (opt) {
	case 'v':
		oa->verbosity++;
		return 1;
	case 'q':
		oa->verbosity = UB_LOG_ERROR;
		return 1;
	case 0x100:
		if (parse_u64(arg, &v) || v >= UB_SUPER_MIRROR_MAX)
			return -1;
		oa->super_mirror = (int)v;
		return 1;
	case 0x101:
		oa->no_log = true;
		return 1;
	case 0x180:
		if (parse_u64(arg, &v) || !v)
			return -1;
		oa->generation = v;
		return 1;
	case 0x102:
		oa->no_scan = true;
		return 1;
	case 0x181:
		oa->backup = true;
		return 1;
	case 0x182:
		if (parse_u64(arg, &v) || !v)
			return -1;
		oa->root_bytenr = v;
		return 1;
	case 0x183: {
		/* seconds, fractions allowed: network devices wait this long for an answer */
		char *end;
		double sec = strtod(arg, &end);

		if (*end || !(sec >= 0.01 && sec <= 3600))
			return -1;
		ub_dev_set_io_timeout((unsigned)(sec * 1000));
		return 1;
	}
	}
	return 0;
}

/* ---- device scan: UUID=, LABEL=, and the devices not named ---- */

struct dev_list {
	char **paths; /* from argv or the scan (owned by `scan`) */
	int n;
	struct ub_scan *scan;
};

static int list_add(struct dev_list *l, char *path)
{
	char **n = realloc(l->paths, (size_t)(l->n + 1) * sizeof(*n));

	if (!n)
		return -ENOMEM;
	l->paths = n;
	l->paths[l->n++] = path;
	return 0;
}

/* UUID=... or LABEL=...: every device of the one filesystem it names */
static int resolve_tag(const struct ub_log *log, const char *arg, struct dev_list *l)
{
	bool by_uuid = !strncmp(arg, "UUID=", 5);
	const char *val = arg + (by_uuid ? 5 : 6);
	const struct ub_scan_fs *found = NULL;
	uint8_t fsid[UB_FSID_SIZE];
	int nfound = 0, ret;

	if (by_uuid && uuid_parse(val, fsid)) {
		fprintf(stderr, "ubtrfs: error: %s: not a uuid\n", arg);
		return -EINVAL;
	}
	ret = ub_scan_block_devices(by_uuid ? fsid : NULL, log, &l->scan);
	if (ret)
		return ret;
	for (int i = 0; i < l->scan->nfs; i++) {
		const struct ub_scan_fs *f = &l->scan->fs[i];
		if (by_uuid ? !memcmp(f->fsid, fsid, UB_FSID_SIZE) : !strcmp(f->label, val)) {
			found = f;
			nfound++;
		}
	}
	if (nfound != 1) {
		fprintf(stderr, "ubtrfs: error: %s: %s\n", arg,
			nfound ? "several btrfs filesystems have this label; name one by UUID=" :
				 "no btrfs filesystem on the block devices has it");
		return -ENOENT;
	}
	for (int i = 0; i < found->ndevs && !ret; i++)
		ret = list_add(l, found->devs[i].path);
	return ret;
}

/*
 * The devices to open: the named ones, UUID=/LABEL= resolved, and when block
 * devices are named and the superblock counts more devices than were given,
 * the others found by the scan. Image files are never searched for.
 */
static int devices_to_open(struct open_args *oa, char **devs, int ndevs, struct dev_list *l)
{
	struct ub_log log = { .fn = NULL, .arg = NULL, .verbosity = oa->verbosity, .errors = &oa->errors };
	struct ub_log quiet = { .fn = NULL, .arg = NULL, .verbosity = -1, .errors = NULL };
	uint8_t fsid[UB_FSID_SIZE], other[UB_FSID_SIZE];
	uint64_t devid, num_devices, n, *given;
	bool all_blk = true;
	int ret = 0, ngiven = 0;

	for (int i = 0; i < ndevs; i++) {
		struct stat st;
		if (!strncmp(devs[i], "UUID=", 5) || !strncmp(devs[i], "LABEL=", 6)) {
			if (oa->no_scan || ndevs > 1) {
				fprintf(stderr, "ubtrfs: error: %s names a filesystem by the scan: give it alone%s\n",
					devs[i], oa->no_scan ? ", without --no-scan" : "");
				return -EINVAL;
			}
			return resolve_tag(&log, devs[i], l);
		}
		all_blk &= stat(devs[i], &st) == 0 && S_ISBLK(st.st_mode);
	}
	for (int i = 0; i < ndevs && !ret; i++)
		ret = list_add(l, devs[i]);
	if (ret || ub_scan_identify(devs[0], &quiet, fsid, &devid, &num_devices) || num_devices <= (uint64_t)ndevs)
		return ret;
	if (!all_blk || oa->no_scan) {
		fprintf(stderr, "ubtrfs: note: the filesystem has %llu devices and %d %s named; %s\n",
			(unsigned long long)num_devices, ndevs, ndevs > 1 ? "were" : "was",
			all_blk ? "--no-scan keeps the others out" :
				  "image files are not searched for: name every device of the filesystem");
		return 0;
	}
	given = calloc((size_t)ndevs, sizeof(*given));
	if (!given)
		return -ENOMEM;
	for (int i = 0; i < ndevs; i++)
		if (!ub_scan_identify(devs[i], &quiet, other, &given[ngiven], &n) && !memcmp(other, fsid, UB_FSID_SIZE))
			ngiven++;
	ret = ub_scan_block_devices(fsid, &log, &l->scan);
	for (int i = 0; !ret && i < l->scan->nfs; i++) {
		const struct ub_scan_fs *f = &l->scan->fs[i];
		for (int j = 0; !ret && j < f->ndevs; j++) {
			bool named = false;
			for (int k = 0; k < ngiven; k++)
				named |= given[k] == f->devs[j].devid;
			if (named)
				continue;
			if (oa->verbosity >= UB_LOG_INFO)
				fprintf(stderr, "ubtrfs: devid %llu found by the scan: %s\n",
					(unsigned long long)f->devs[j].devid, f->devs[j].path);
			ret = list_add(l, f->devs[j].path);
		}
	}
	free(given);
	return ret;
}

struct ub_fs_opts open_args_fs_opts(const struct open_args *oa)
{
	return (struct ub_fs_opts){ .writable = false, .super_mirror = oa->super_mirror, .no_log = oa->no_log,
				    .root_generation = oa->generation, .backup = oa->backup,
				    .root_bytenr = oa->root_bytenr, .rescue_chunks = oa->rescue_chunks };
}

int open_fs(struct open_args *oa, char **devs, int ndevs, struct ub_fs **out)
{
	struct ub_fs_opts opts = open_args_fs_opts(oa);
	struct ub_log log = { .fn = NULL, .arg = NULL, .verbosity = oa->verbosity, .errors = &oa->errors };

	return open_fs_with(oa, devs, ndevs, &opts, &log, out);
}

int open_fs_with(struct open_args *oa, char **devs, int ndevs, const struct ub_fs_opts *opts,
		 const struct ub_log *log, struct ub_fs **out)
{
	struct dev_list l = { NULL, 0, NULL };
	int ret;

	if (opts->root_generation && opts->root_bytenr) {
		fprintf(stderr, "ubtrfs: error: --generation and --root name two roots: give one\n");
		return -EINVAL;
	}
	ret = devices_to_open(oa, devs, ndevs, &l);
	if (ret == 0)
		ret = ub_fs_open((const char *const *)l.paths, l.n, opts, log, out);
	/* the library has said what was wrong; errno names would mislead here (ENOENT for "no magic") */
	if (ret == -ENOMEM)
		fprintf(stderr, "ubtrfs: error: out of memory\n");
	else if (ret)
		fprintf(stderr, "ubtrfs: error: no usable btrfs filesystem on %s%s\n", devs[0], ndevs > 1 ? " ..." : "");
	free(l.paths);
	ub_scan_free(l.scan);
	return ret;
}

int open_engine_with(struct open_args *oa, char **devs, int ndevs, const struct ub_log *log, struct ub_engine **out)
{
	struct dev_list l = { NULL, 0, NULL };
	int ret = devices_to_open(oa, devs, ndevs, &l);

	if (ret == 0)
		ret = ub_engine_open_ex((const char *const *)l.paths, l.n, log,
					oa->degraded ? UB_ENGINE_OPEN_DEGRADED : 0, out);
	if (ret == -ENOMEM)
		fprintf(stderr, "ubtrfs: error: out of memory\n");
	else if (ret == -EOPNOTSUPP || ret == -EROFS || ret == -EBUSY)
		fprintf(stderr, "ubtrfs: error: cannot open %s%s for writing (the messages above say why; -o ro "
			"mounts it read-only)\n", devs[0], ndevs > 1 ? " ..." : "");
	else if (ret)
		fprintf(stderr, "ubtrfs: error: no usable btrfs filesystem on %s%s\n", devs[0], ndevs > 1 ? " ..." : "");
	free(l.paths);
	ub_scan_free(l.scan);
	return ret;
}

int usage_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "ubtrfs %s: ", cmd);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry 'ubtrfs %s --help'.\n", cmd);
	return EXIT_FATAL;
}
