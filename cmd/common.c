/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include "cmd.h"

void open_args_init(struct open_args *oa)
{
	oa->verbosity = UB_LOG_WARN;
	oa->super_mirror = -1;
	oa->no_log = false;
	oa->errors = 0;
	oa->generation = 0;
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
	}
	return 0;
}

int open_fs(struct open_args *oa, char **devs, int ndevs, struct ub_fs **out)
{
	struct ub_fs_opts opts = { .writable = false, .super_mirror = oa->super_mirror, .no_log = oa->no_log,
				    .root_generation = oa->generation };
	struct ub_log log = { .fn = NULL, .arg = NULL, .verbosity = oa->verbosity, .errors = &oa->errors };
	int ret = ub_fs_open((const char *const *)devs, ndevs, &opts, &log, out);

	/* the library has said what was wrong; errno names would mislead here (ENOENT for "no magic") */
	if (ret == -ENOMEM)
		fprintf(stderr, "ubtrfs: error: out of memory\n");
	else if (ret)
		fprintf(stderr, "ubtrfs: error: no usable btrfs filesystem on %s%s\n", devs[0], ndevs > 1 ? " ..." : "");
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
