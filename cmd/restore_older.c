/* SPDX-License-Identifier: MIT */
/*
 * restore's second chance: older roots of the same filesystem, for a
 * directory or an inode the current root cannot give. Which roots, and when
 * they are found, is the library's (ub_older_roots, lib/recover/older.c);
 * restore only opens each the way it opened the filesystem (its devices, its
 * options), quietly: what they give is reported by restore.
 */
#include "restore.h"

static int open_older(void *arg, uint64_t root_bytenr, uint64_t cache_bytes, struct ub_fs **out)
{
	struct restorer *r = arg;
	struct ub_log quiet = { .verbosity = -1 };
	struct ub_fs_opts opts = open_args_fs_opts(&r->oa);
	struct open_args oa = r->oa;
	int ret;

	oa.verbosity = -1;
	opts.root_generation = 0;
	opts.backup = false;
	opts.root_bytenr = root_bytenr;
	opts.cache_bytes = cache_bytes;
	/* open_fs_with may say why a device fails: one thread on stderr at a time */
	pthread_mutex_lock(&r->lock);
	ret = open_fs_with(&oa, r->devs, r->ndevs, &opts, &quiet, out);
	pthread_mutex_unlock(&r->lock);
	return ret;
}

int rs_older_init(struct restorer *r)
{
	return ub_older_roots_new(r->fs, r->generation, open_older, r, &r->older);
}

int rs_older(struct restorer *r, int i, struct ub_fs **fs, uint64_t *generation)
{
	return ub_older_roots_get(r->older, i, fs, generation);
}

void rs_older_close(struct restorer *r)
{
	ub_older_roots_free(r->older);
	r->older = NULL;
}
