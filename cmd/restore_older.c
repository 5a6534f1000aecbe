/* SPDX-License-Identifier: MIT */
/*
 * restore's second chance: older roots of the same filesystem (the backup
 * roots and the root trees a scan of the metadata finds, newest first), each
 * opened as a filesystem of its own, for a directory or an inode the current
 * root cannot give. Opened once, on the first need: an undamaged filesystem
 * never pays for the scan.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "ubtrfs/rootscan.h"
#include "restore.h"

#define OLDER_MAX 4                  /* older roots kept open */
#define OLDER_CACHE (32ULL << 20)    /* tree block cache of each */

static void open_all(struct restorer *r)
{
	struct ub_root_candidate *c = NULL;
	struct ub_log quiet = { .verbosity = -1 };
	struct open_args oa = r->oa;
	size_t n = 0;

	r->older_tried = true;
	if (ub_find_roots(r->fs, true, NULL, NULL, &c, &n))
		return;
	r->older = calloc(OLDER_MAX, sizeof(*r->older));
	if (!r->older) {
		free(c);
		return;
	}
	/* older opens say nothing of their own damage: what they give is reported by restore */
	oa.verbosity = -1;
	for (size_t i = 0; i < n && r->nolder < OLDER_MAX; i++) {
		struct ub_fs_opts opts = open_args_fs_opts(&r->oa);
		struct ub_fs *fs;

		if (c[i].current || c[i].probe.tree_err || c[i].generation >= r->generation)
			continue;
		opts.root_generation = 0;
		opts.backup = false;
		opts.root_bytenr = c[i].bytenr;
		opts.cache_bytes = OLDER_CACHE;
		if (open_fs_with(&oa, r->devs, r->ndevs, &opts, &quiet, &fs))
			continue;
		r->older[r->nolder].fs = fs;
		r->older[r->nolder].generation = c[i].generation;
		r->nolder++;
	}
	free(c);
}

int rs_older(struct restorer *r, int i, struct ub_fs **fs, uint64_t *generation)
{
	int n;

	/* the walk and the copiers may both need them first: opened once, then only read */
	pthread_mutex_lock(&r->lock);
	if (!r->older_tried)
		open_all(r);
	n = r->nolder;
	pthread_mutex_unlock(&r->lock);
	if (i < 0 || i >= n)
		return -ENOENT;
	*fs = r->older[i].fs;
	*generation = r->older[i].generation;
	return 0;
}

void rs_older_close(struct restorer *r)
{
	for (int i = 0; i < r->nolder; i++)
		ub_fs_close(r->older[i].fs);
	free(r->older);
	r->older = NULL;
	r->nolder = 0;
}
