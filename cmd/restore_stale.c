/* SPDX-License-Identifier: MIT */
/*
 * Files the walk read from a root older than the last commit, held back until
 * the scan. When the current root of a tree cannot be reached (its root node
 * lost, or the root tree's), the walk reads an older root, and a file the
 * commits since changed would come out as it was then, although the leaves
 * those commits wrote may be intact. The library holds each such file
 * (ub_recover_hold), its scan marks those a leaf of a later commit holds and
 * gathers their newer items, and it says whether that newer version reads
 * whole and verified (ub_recover_held_newer): then it is restored so, else as
 * the walk read it. Everything here runs on the walking thread, with the
 * copiers idle or only copying.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "restore.h"

bool rs_stale_defer(struct restorer *r, const char *rel, const struct ub_inode *in)
{
	struct rs_stale *st;
	int ret;

	if (!r->defer_stale || !r->recover)
		return false;
	if (r->nstale == r->stale_cap) {
		size_t cap = r->stale_cap ? r->stale_cap * 2 : 64;
		struct rs_stale *v = realloc(r->stale, cap * sizeof(*v));

		if (!v)
			return false; /* restored now, as read */
		r->stale = v;
		r->stale_cap = cap;
	}
	st = &r->stale[r->nstale];
	*st = (struct rs_stale){ .gen = r->fs_gen, .fs = r->fs, .in = *in };
	st->rel = strdup(rel);
	if (!st->rel)
		return false;
	ret = ub_recover_hold(r->recover, in, r->fs_gen, r->nstale);
	if (ret <= 0) {
		free(st->rel); /* read from the last commit (or no room to hold it): restored now */
		return false;
	}
	r->nstale++;
	return true;
}

/* Restore st's file at its path, from `fs`; the directory keeps the times the walk gave it. */
static void place(struct restorer *r, struct frame *root, const struct rs_stale *st, struct ub_fs *fs,
		  const struct ub_inode *in)
{
	const char *slash = strrchr(st->rel, '/');
	char *dir = slash ? strndup(st->rel, (size_t)(slash - st->rel)) : strdup("");
	struct ub_fs *saved = r->fs;
	struct frame *all = NULL, *d;
	char *copy = NULL;
	struct stat sb;
	bool have_times;
	int n = 0;

	if (!dir) {
		rs_problem(r, st->rel, "out of memory");
		r->rc = EXIT_FATAL;
		return;
	}
	d = rs_open_chain(r, root, dir, &all, &copy, &n);
	if (d) {
		have_times = d != root && fstat(d->fd, &sb) == 0;
		r->fs = fs;
		rs_entry(r, d, slash ? slash + 1 : st->rel, st->rel, in);
		r->fs = saved;
		if (r->times && have_times) {
			struct timespec ts[2] = { sb.st_atim, sb.st_mtim };

			futimens(d->fd, ts);
		}
	}
	rs_close_chain(r, all, copy, n);
	free(dir);
}

void rs_stale_restore(struct restorer *r, struct frame *root)
{
	size_t n = r->recover ? ub_recover_held_count(r->recover) : 0;

	/* in the library's order, (subvolume, inode): the order the scan sorted them in */
	for (size_t i = 0; i < n && r->rc != EXIT_FATAL; i++) {
		struct ub_recover_held h;
		const struct rs_stale *st;
		struct ub_inode in;

		if (ub_recover_held_get(r->recover, i, &h) || h.tag >= r->nstale)
			continue;
		st = &r->stale[h.tag];
		if (ub_recover_held_newer(r->recover, i, &in) == 0) {
			r->nfresh++;
			rs_note(r, UB_LOG_WARN, st->rel, "restored as the commit of generation %llu left it, from leaves "
				"the scan found (the root the walk read is of generation %llu)",
				(unsigned long long)in.transid, (unsigned long long)st->gen);
			place(r, root, st, r->fs, &in);
		} else {
			place(r, root, st, st->fs, &st->in);
		}
		rs_progress(r, false);
	}
}

void rs_stale_free(struct restorer *r)
{
	for (size_t i = 0; i < r->nstale; i++)
		free(r->stale[i].rel);
	free(r->stale);
	r->stale = NULL;
	r->nstale = r->stale_cap = 0;
}
