/* SPDX-License-Identifier: MIT */
/*
 * Files the walk read from a root older than the last commit, held back until
 * the scan. When the current root of a tree cannot be reached (its root node
 * lost, or the root tree's), the walk reads an older root, and a file the
 * commits since changed would come out as it was then, although the leaves
 * those commits wrote may be intact. The scan (restore_scavenge.c) marks the
 * files that a leaf of a later commit holds an inode item of; their items are
 * then taken from the newest leaves (loose inodes, lib/fs/loose.c) and their
 * data checked against the checksums those commits wrote. A file whose newer
 * version reads whole and verified is restored so; any other as the walk read
 * it. Everything here runs on the walking thread, with the copiers idle or
 * only copying.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "restore.h"
#include "ubtrfs/rootscan.h"

#define CHECK_CHUNK (1U << 20)

bool rs_stale_defer(struct restorer *r, const char *rel, const struct ub_inode *in)
{
	struct rs_stale *st;

	if (!r->defer_stale || r->fs_gen >= r->last_commit)
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
	*st = (struct rs_stale){ .subvol = in->subvol, .ino = in->ino, .gen = r->fs_gen, .fs = r->fs, .in = *in };
	st->rel = strdup(rel);
	if (!st->rel)
		return false;
	r->nstale++;
	return true;
}

static int stale_cmp(const void *a, const void *b)
{
	const struct rs_stale *x = a, *y = b;

	if (x->subvol != y->subvol)
		return x->subvol < y->subvol ? -1 : 1;
	return x->ino < y->ino ? -1 : x->ino > y->ino;
}

void rs_stale_sort(struct restorer *r)
{
	if (r->nstale > 1)
		qsort(r->stale, r->nstale, sizeof(*r->stale), stale_cmp);
}

size_t rs_stale_lower(const struct restorer *r, uint64_t subvol, uint64_t ino)
{
	struct rs_stale key = { .subvol = subvol, .ino = ino };
	size_t lo = 0, hi = r->nstale;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (stale_cmp(&r->stale[mid], &key) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/*
 * The version of st's file the leaves give (r->fs reads it from them once
 * published): true, and *out, when it is the same file changed later, and
 * every byte of it reads and verifies.
 */
static bool newer(struct restorer *r, const struct rs_stale *st, struct ub_inode *out, uint8_t *buf)
{
	struct ub_read_report rep = { 0 };
	struct ub_inode in;
	uint64_t off = 0, bytes;

	if (!st->fresh || st->bad_csums || !buf || ub_inode_read(r->fs, st->subvol, st->ino, &in) ||
	    !S_ISREG(in.mode) || in.nlink != 1 || in.generation != st->in.generation || in.transid <= st->gen ||
	    in.transid > r->last_commit)
		return false;
	/* extent items missing (a damaged newer leaf) or left over would not add up to its nbytes */
	if (ub_fs_loose_extent_bytes(r->fs, st->subvol, st->ino, &bytes) || bytes != in.nbytes)
		return false;
	while (off < in.size) {
		uint64_t got = 0;
		int ret = ub_file_read_inode(r->fs, &in, off, CHECK_CHUNK, buf, &got, &rep);

		if (ret || !got || rep.bad_bytes || rep.unverified_bytes)
			break;
		off += got;
	}
	ub_read_report_flush(r->fs, &rep);
	if (off < in.size || rep.bad_bytes || rep.unverified_bytes)
		return false;
	*out = in;
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
	bool any = false;
	uint8_t *buf;

	for (size_t i = 0; i < r->nstale; i++)
		any |= r->stale[i].fresh;
	buf = any ? malloc(CHECK_CHUNK) : NULL;
	for (size_t i = 0; i < r->nstale && r->rc != EXIT_FATAL; i++) {
		const struct rs_stale *st = &r->stale[i];
		struct ub_inode in;

		if (newer(r, st, &in, buf)) {
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
	free(buf);
}

void rs_stale_free(struct restorer *r)
{
	for (size_t i = 0; i < r->nstale; i++)
		free(r->stale[i].rel);
	free(r->stale);
	r->stale = NULL;
	r->nstale = r->stale_cap = 0;
}
