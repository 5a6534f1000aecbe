// SPDX-License-Identifier: MIT
/*
 * Opening a filesystem for writing, as a library user sees it
 * (include/ubtrfs/engine.h): the engine's half (lib/txn), then a pending
 * fsync log replayed into the trees and committed, as the kernel's mount
 * does. The replay is the writers' work, so it is done here, above the
 * engine, and the engine never calls up into this layer.
 */
#include "fsw/fsw.h"
#include "fsw/log_commit.h"

static int open_common(const char *const *paths, struct ub_dev *const *devs, int n, const struct ub_log *log,
		       unsigned flags, struct ub_engine **out)
{
	struct ub_engine *e = NULL;
	int ret = ub_engine_open_raw(paths, devs, n, log, flags, &e);

	if (ret)
		return ret;
	ret = ub_log_commit(e);
	/* as the kernel's mount -o space_cache=v2: the engine keeps only the free space tree */
	if (!ret)
		ret = ub_engine_create_fst(e);
	if (!ret)
		ret = ub_engine_ready(e);
	if (ret) {
		ub_engine_close(e);
		return ret;
	}
	*out = e;
	return 0;
}

int ub_engine_open(const char *const *paths, int npaths, const struct ub_log *log, struct ub_engine **out)
{
	return open_common(paths, NULL, npaths, log, 0, out);
}

int ub_engine_open_ex(const char *const *paths, int npaths, const struct ub_log *log, unsigned flags,
		      struct ub_engine **out)
{
	return open_common(paths, NULL, npaths, log, flags, out);
}

int ub_engine_open_devs(struct ub_dev *const *devs, int ndevs, const struct ub_log *log, struct ub_engine **out)
{
	return open_common(NULL, devs, ndevs, log, 0, out);
}
