/* SPDX-License-Identifier: MIT */
/*
 * Older roots of the same filesystem, the second chance for what the root in
 * use cannot give: the backup roots and the root trees a scan of the metadata
 * finds, newest first, each opened by the caller (who knows the devices and
 * options) as a filesystem of its own. Found and opened once, on the first
 * need: an undamaged filesystem never pays for the scan.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include "ubtrfs/recover.h"

#define OLDER_MAX 4                  /* older roots kept open: each holds a cache */
#define OLDER_CACHE (32ULL << 20)    /* tree block cache of each */

struct ub_older_roots {
	struct ub_fs *fs;
	uint64_t generation;
	ub_older_open_fn open;
	void *arg;
	pthread_mutex_t lock; /* readers on several threads may be first to need them */
	bool tried;
	struct {
		struct ub_fs *fs;
		uint64_t generation;
	} v[OLDER_MAX];
	int n;
};

int ub_older_roots_new(struct ub_fs *fs, uint64_t generation, ub_older_open_fn open, void *arg,
		       struct ub_older_roots **out)
{
	struct ub_older_roots *o = calloc(1, sizeof(*o));

	*out = NULL;
	if (!o)
		return -ENOMEM;
	o->fs = fs;
	o->generation = generation;
	o->open = open;
	o->arg = arg;
	pthread_mutex_init(&o->lock, NULL);
	*out = o;
	return 0;
}

static void open_all(struct ub_older_roots *o)
{
	struct ub_root_candidate *c = NULL;
	size_t n = 0;

	o->tried = true;
	if (ub_find_roots(o->fs, true, NULL, NULL, &c, &n))
		return;
	for (size_t i = 0; i < n && o->n < OLDER_MAX; i++) {
		struct ub_fs *fs;

		/* only older than the root in use, and only one whose root block reads */
		if (c[i].current || c[i].probe.tree_err || c[i].generation >= o->generation)
			continue;
		if (o->open(o->arg, c[i].bytenr, OLDER_CACHE, &fs))
			continue;
		o->v[o->n].fs = fs;
		o->v[o->n].generation = c[i].generation;
		o->n++;
	}
	free(c);
}

int ub_older_roots_get(struct ub_older_roots *o, int i, struct ub_fs **fs, uint64_t *generation)
{
	int n;

	if (!o)
		return -ENOENT;
	pthread_mutex_lock(&o->lock);
	if (!o->tried && o->open)
		open_all(o);
	n = o->n;
	pthread_mutex_unlock(&o->lock);
	if (i < 0 || i >= n)
		return -ENOENT;
	*fs = o->v[i].fs;
	*generation = o->v[i].generation;
	return 0;
}

int ub_older_roots_dirent_inode(struct ub_older_roots *o, const struct ub_dirent *de, struct ub_inode *in,
				struct ub_fs **fs, uint64_t *generation)
{
	/* the newest first: the closest to what the entry led to when it was written */
	for (int i = 0; !ub_older_roots_get(o, i, fs, generation); i++)
		if (ub_dirent_inode(*fs, de, in) == 0)
			return 0;
	return -ENOENT;
}

int ub_older_roots_same_file(struct ub_older_roots *o, int *i, const struct ub_inode *in, const struct ub_fs *skip,
			     struct ub_inode *old, struct ub_fs **fs, uint64_t *generation)
{
	while (!ub_older_roots_get(o, *i, fs, generation)) {
		(*i)++;
		/*
		 * The same inode generation is the same file (not one that took
		 * its number since); the same size is the file not grown or cut
		 * since, so its extents there cover the same range.
		 */
		if (*fs != skip && !ub_inode_read(*fs, in->subvol, in->ino, old) && old->generation == in->generation &&
		    old->size == in->size)
			return 0;
	}
	return -ENOENT;
}

void ub_older_roots_free(struct ub_older_roots *o)
{
	if (!o)
		return;
	for (int i = 0; i < o->n; i++)
		ub_fs_close(o->v[i].fs);
	pthread_mutex_destroy(&o->lock);
	free(o);
}
