/* SPDX-License-Identifier: MIT */
/*
 * Scavenging: inodes no name leads to any more. What is found, and which copy
 * of it is trusted, is the library's (ub_recover, lib/recover): after the
 * walk it scans the metadata block groups for inode items of inodes the walk
 * did not restore and looks each up, in the live tree first, then in the
 * older roots, then in the leaves themselves. Here each finding is put under
 * OUTDIR: one a tree has (a file whose directory was lost, say) under
 * OUTDIR/lost+found/<subvolume>/<inode>; one no tree has at its own name when
 * its directory is known, else there too; a deleted one stays deleted
 * (counted), unless --deleted asks for it: then as the newest older root that
 * still has it linked gives it, or the leaves do, under
 * OUTDIR/deleted/<subvolume>/<inode>.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "dirlist.h"
#include "restore.h"

static bool subvol_wanted(void *arg, uint64_t subvol)
{
	struct restorer *r = arg;

	/* only subvolumes the walk went into: one left out (--no-snapshots) stays out */
	return rmap_has(&r->entered, subvol, BTRFS_FIRST_FREE_OBJECTID);
}

static bool reached(void *arg, uint64_t subvol, uint64_t ino)
{
	struct restorer *r = arg;

	return rmap_has(&r->reached, subvol, ino) || rmap_has(&r->entered, subvol, ino);
}

int rs_recover_init(struct restorer *r)
{
	struct ub_recover_opts o = { .last_commit = r->last_commit, .older = r->older, .undelete = r->deleted,
				     .subvol_wanted = subvol_wanted, .reached = reached,
				     .progress = r->tty ? rs_progress_scan : NULL, .arg = r };

	return ub_recover_new(r->fs, &o, &r->recover);
}

/* An inode restored under lost+found: from `fs` (an older root: gen, the leaves a scan found: loose). */
static void restore_lost(struct restorer *r, struct frame *dir, const struct ub_inode *in, struct ub_fs *fs,
			 uint64_t gen, bool loose)
{
	char name[24], rel[64];
	struct ub_fs *saved = r->fs;

	snprintf(name, sizeof(name), "%llu", (unsigned long long)in->ino);
	snprintf(rel, sizeof(rel), "lost+found/%llu/%llu", (unsigned long long)in->subvol, (unsigned long long)in->ino);
	r->nscavenged++;
	rs_problem(r, rel, "no name leads to inode %llu of subvolume %llu any more%s: restored here",
		   (unsigned long long)in->ino, (unsigned long long)in->subvol,
		   loose ? " and no tree has it (its items are from leaves the scan found)"
			 : gen ? " (as the older root has it)" : "");
	r->fs = fs;
	if (S_ISDIR(in->mode)) {
		struct frame f = { dir, name, rel, -1, false, false, true, *in };

		/* its entries are restored where the scan finds their inodes: the directory stays empty */
		rs_dir_make(r, &f);
		rs_dir_done(r, &f);
	} else {
		rs_entry(r, dir, name, rel, in);
	}
	r->fs = saved;
}

/* A deleted inode as the newest older root that still has it linked gives it. */
static void undeleted_older(struct restorer *r, struct frame *dir, const struct ub_recover_inode *ri)
{
	char name[24], rel[64], was[512];
	struct ub_fs *saved = r->fs;

	snprintf(name, sizeof(name), "%llu", (unsigned long long)ri->ino);
	snprintf(rel, sizeof(rel), "deleted/%llu/%llu", (unsigned long long)ri->subvol, (unsigned long long)ri->ino);
	if (ub_inode_path(ri->fs, ri->subvol, ri->ino, was, sizeof(was)))
		snprintf(was, sizeof(was), "?");
	if (r->oa.verbosity >= UB_LOG_WARN) {
		/* a path from the disk: escaped, as in every message */
		char *shown = name_shown(was, strlen(was));

		fprintf(stderr, "ubtrfs: %s: deleted inode %llu of subvolume %llu, restored as generation %llu has it "
			"(it was %s)\n", rel, (unsigned long long)ri->ino, (unsigned long long)ri->subvol,
			(unsigned long long)ri->generation, shown ? shown : "?");
		free(shown);
	}
	r->nundeleted++;
	r->fs = ri->fs;
	rs_entry(r, dir, name, rel, &ri->in);
	r->fs = saved;
}

/* The scan's candidates, one subvolume after another: its folders under lost+found and deleted. */
struct found_ctx {
	struct restorer *r;
	struct frame *lf, *df;
	bool open;
	uint64_t subvol;
	char sname[24], srel[40], drel[40];
	struct frame sf, dsf;
};

static void found_close(struct found_ctx *fc)
{
	if (!fc->open)
		return;
	rs_dir_done(fc->r, &fc->sf);
	rs_dir_done(fc->r, &fc->dsf);
	fc->open = false;
}

static int found_one(void *arg, const struct ub_recover_inode *ri)
{
	struct found_ctx *fc = arg;
	struct restorer *r = fc->r;
	char rel[64];

	if (!fc->open || fc->subvol != ri->subvol) {
		found_close(fc);
		fc->subvol = ri->subvol;
		snprintf(fc->sname, sizeof(fc->sname), "%llu", (unsigned long long)ri->subvol);
		snprintf(fc->srel, sizeof(fc->srel), "lost+found/%llu", (unsigned long long)ri->subvol);
		snprintf(fc->drel, sizeof(fc->drel), "deleted/%llu", (unsigned long long)ri->subvol);
		fc->sf = (struct frame){ fc->lf, fc->sname, fc->srel, -1, false, false, false };
		fc->dsf = (struct frame){ fc->df, fc->sname, fc->drel, -1, false, false, false };
		fc->open = true;
	}
	switch (ri->kind) {
	case UB_RECOVER_DELETED:
		r->ndeleted++;
		if (ri->undeleted)
			undeleted_older(r, &fc->dsf, ri);
		break;
	case UB_RECOVER_LOST:
		break; /* from the leaves, after the others (restore_loose) */
	case UB_RECOVER_UNREADABLE:
		snprintf(rel, sizeof(rel), "lost+found/%llu/%llu", (unsigned long long)ri->subvol,
			 (unsigned long long)ri->ino);
		rs_problem(r, rel, "inode %llu of subvolume %llu was found by the scan but cannot be read: %s",
			   (unsigned long long)ri->ino, (unsigned long long)ri->subvol, strerror(-ri->err));
		break;
	case UB_RECOVER_FOUND:
		restore_lost(r, &fc->sf, &ri->in, ri->fs, ri->generation, false);
		break;
	}
	return 0;
}

/* ---- the last resort: inodes no tree gives, from the leaves themselves ---- */

/* Where a deleted inode was: its own name is only in the leaves, its directory's path in the trees ("?" if not). */
static void gone_path(struct restorer *r, uint64_t subvol, uint64_t ino, char *was, size_t size)
{
	char name[UB_NAME_LEN + 1];
	uint64_t dir;
	size_t len, at;

	if (ub_inode_first_name(r->fs, subvol, ino, &dir, name, &len) || size < len + 2 ||
	    ub_inode_path(r->fs, subvol, dir, was, size - len - 1)) {
		snprintf(was, size, "?");
		return;
	}
	at = strlen(was);
	if (at && was[at - 1] != '/')
		was[at++] = '/';
	memcpy(was + at, name, len);
	was[at + len] = 0;
}

/* A deleted inode no older root has, from the items of the leaves the scan found. */
static int restore_gone(void *arg, const struct ub_recover_inode *ri)
{
	struct restorer *r = ((struct found_ctx *)arg)->r;
	struct frame *df = ((struct found_ctx *)arg)->df;
	uint64_t subvol = ri->subvol, ino = ri->ino;
	char sname[24], srel[40], name[24], rel[64], was[512];
	struct frame dsf = { df, sname, srel, -1, false, false, false };

	snprintf(sname, sizeof(sname), "%llu", (unsigned long long)subvol);
	snprintf(srel, sizeof(srel), "deleted/%llu", (unsigned long long)subvol);
	snprintf(name, sizeof(name), "%llu", (unsigned long long)ino);
	snprintf(rel, sizeof(rel), "deleted/%llu/%llu", (unsigned long long)subvol, (unsigned long long)ino);
	if (ri->unchecked) {
		rs_problem(r, rel, "deleted inode %llu of subvolume %llu: not undeleted: the checksums of its data cannot "
			   "all be looked for (an extent not on sector boundaries, or past the bound of 16 GiB of data)",
			   (unsigned long long)ino, (unsigned long long)subvol);
		return 0;
	}
	gone_path(r, subvol, ino, was, sizeof(was));
	if (r->oa.verbosity >= UB_LOG_WARN) {
		char *shown = name_shown(was, strlen(was));

		fprintf(stderr, "ubtrfs: %s: deleted inode %llu of subvolume %llu, restored from the items of leaves the "
			"scan found (it was %s); its data is checked against checksums from old leaves of the checksum "
			"tree, and a sector none was found for is reported lost\n", rel, (unsigned long long)ino,
			(unsigned long long)subvol, shown ? shown : "?");
		free(shown);
	}
	r->nundeleted_loose++;
	rs_entry(r, &dsf, name, rel, &ri->in);
	rs_dir_done(r, &dsf);
	return 0;
}

/*
 * The frames of directory `path` under OUTDIR (root: OUTDIR's), each component
 * opened with O_NOFOLLOW as the walk opens them: the last one, or NULL.
 * *all gets the array to release with rs_close_chain.
 */
struct frame *rs_open_chain(struct restorer *r, struct frame *root, const char *path, struct frame **all,
			    char **copy, int *n)
{
	struct frame *v;
	char *p, *save = NULL;
	int k = 0, max = 1;

	*all = NULL;
	*n = 0;
	for (const char *c = path; *c; c++)
		max += *c == '/';
	*copy = strdup(path);
	v = calloc((size_t)max, sizeof(*v));
	if (!*copy || !v) {
		free(v);
		return NULL;
	}
	for (p = strtok_r(*copy, "/", &save); p; p = strtok_r(NULL, "/", &save)) {
		struct frame *parent = k ? &v[k - 1] : root;
		char *rel = malloc(strlen(path) + 1);

		if (!rel)
			break;
		memcpy(rel, path, (size_t)(p - *copy) + strlen(p));
		rel[(size_t)(p - *copy) + strlen(p)] = 0;
		v[k] = (struct frame){ parent, p, rel, -1, false, false, false };
		k++;
	}
	*all = v;
	*n = k;
	if (rs_dir_make(r, k ? &v[k - 1] : root))
		return NULL;
	return k ? &v[k - 1] : root;
}

void rs_close_chain(struct restorer *r, struct frame *v, char *copy, int n)
{
	for (int k = n - 1; k >= 0; k--) {
		rs_dir_done(r, &v[k]);
		free(v[k].rel);
	}
	free(v);
	free(copy);
}

/*
 * A loose inode at its own name, in directory `ppath` (a directory the walk
 * entered, or a loose one placed already): 0 placed (*made: the path of a
 * directory made), else not (it goes to lost+found).
 */
static int place_at(struct restorer *r, struct frame *root, const char *ppath, const char *name,
		    const struct ub_inode *in, char **made)
{
	struct frame *all, *dir;
	struct stat st;
	char *copy, *rel = malloc(strlen(ppath) + strlen(name) + 2);
	int n, ret = -EEXIST;

	*made = NULL;
	if (!rel || r->dry_run) {
		free(rel);
		return -EOPNOTSUPP; /* a dry run lists it under lost+found */
	}
	sprintf(rel, "%s%s%s", ppath, *ppath ? "/" : "", name);
	dir = rs_open_chain(r, root, ppath, &all, &copy, &n);
	/* a name taken already (by what the walk restored) is left alone */
	if (dir && fstatat(dir->fd, name, &st, AT_SYMLINK_NOFOLLOW) && errno == ENOENT) {
		r->nplaced++;
		rs_problem(r, rel, "inode %llu of subvolume %llu: no tree has it; restored at its name from the items of leaves the scan found",
			   (unsigned long long)in->ino, (unsigned long long)in->subvol);
		if (S_ISDIR(in->mode)) {
			struct frame f = { dir, name, rel, -1, false, false, false };

			if (!rs_dir_make(r, &f))
				*made = rel;
			rs_dir_done(r, &f);
		} else {
			rs_entry(r, dir, name, rel, in);
		}
		ret = 0;
	}
	rs_close_chain(r, all, copy, n);
	if (!*made)
		free(rel);
	return ret;
}

/* Directories placed from loose inodes get their metadata last, after everything went into them. */
static void finish_placed(struct restorer *r, struct frame *root, const struct rmap *placed)
{
	for (size_t i = 0; i < placed->cap; i++) {
		const struct rmap_slot *sl = &placed->v[i];
		struct frame *all, *dir;
		char *copy;
		int n;

		if (!sl->ino || !sl->path)
			continue;
		dir = rs_open_chain(r, root, sl->path, &all, &copy, &n);
		if (dir && dir != root && !ub_inode_read(r->fs, sl->subvol, sl->ino, &dir->in)) {
			dir->have_inode = true;
			dir->made = true;
		}
		rs_close_chain(r, all, copy, n);
	}
}

/*
 * A directory the walk restored whose mtime a placed inode changed: its times
 * again, from its inode (left as they are if it cannot be read now).
 */
static void retime_entered(struct restorer *r, struct frame *root, const struct rmap *touched)
{
	for (size_t i = 0; r->times && i < touched->cap; i++) {
		const struct rmap_slot *sl = &touched->v[i];
		struct frame *all, *dir;
		struct ub_inode in;
		char *copy;
		int n;

		if (!sl->ino || !sl->path || ub_inode_read(r->fs, sl->subvol, sl->ino, &in))
			continue;
		dir = rs_open_chain(r, root, sl->path, &all, &copy, &n);
		if (dir && dir != root)
			rs_set_times(r, dir->fd, sl->path, &in);
		rs_close_chain(r, all, copy, n);
	}
}

/* Where a lost inode goes at its own name: a directory the walk entered, or a lost one placed already. */
struct place_ctx {
	struct restorer *r;
	struct frame *root;
	struct rmap placed, touched;
};

static int place_name(void *arg, const struct ub_inode *in, uint64_t dir, const char *name)
{
	struct place_ctx *pc = arg;
	struct restorer *r = pc->r;
	const char *ppath = rmap_get(&r->entered, in->subvol, dir);
	bool walked = ppath != NULL;
	char *made;

	if (!ppath)
		ppath = rmap_get(&pc->placed, in->subvol, dir);
	if (!ppath)
		return -EAGAIN;
	if (place_at(r, pc->root, ppath, name, in, &made))
		return -EEXIST;
	if (walked && rmap_add(&pc->touched, in->subvol, dir, ppath, NULL) < 0)
		r->rc = EXIT_FATAL;
	if (made && rmap_add(&pc->placed, in->subvol, in->ino, made, NULL) < 0)
		r->rc = EXIT_FATAL;
	free(made);
	return 0;
}

/* A lost inode no name took: under lost+found (one the leaves say is unlinked stays deleted). */
static int restore_unplaced(void *arg, const struct ub_recover_inode *ri)
{
	struct found_ctx *fc = arg;
	struct restorer *r = fc->r;
	char sname[24], srel[40], rel[64];
	struct frame sf = { fc->lf, sname, srel, -1, false, false, false };

	snprintf(sname, sizeof(sname), "%llu", (unsigned long long)ri->subvol);
	snprintf(srel, sizeof(srel), "lost+found/%llu", (unsigned long long)ri->subvol);
	snprintf(rel, sizeof(rel), "lost+found/%llu/%llu", (unsigned long long)ri->subvol, (unsigned long long)ri->ino);
	if (ri->kind == UB_RECOVER_UNREADABLE)
		rs_problem(r, rel, "inode %llu of subvolume %llu was found by the scan but cannot be read, from a tree or from the leaves found: %s",
			   (unsigned long long)ri->ino, (unsigned long long)ri->subvol, strerror(-ri->err));
	else if (ri->kind == UB_RECOVER_DELETED)
		r->ndeleted++;
	else
		restore_lost(r, &sf, &ri->in, ri->fs, 0, true);
	rs_dir_done(r, &sf);
	return 0;
}

static void restore_loose(struct restorer *r, struct found_ctx *fc)
{
	struct place_ctx pc = { r, fc->lf->parent, { 0 }, { 0 } };
	int ret;

	/* the copiers read this fs: they must be idle while its loose inodes (and checksums) are added */
	rs_copy_drain(r);
	ret = ub_recover_gather(r->recover);
	/* a failed checksum scan leaves sectors without one: those read as lost, never as good */
	if (!ret && ub_recover_gather_csums(r->recover))
		fprintf(stderr, "ubtrfs: warning: the scan for the checksums of deleted files stopped: their data may "
			"show as lost\n");
	/* the files held back, newer where the leaves give them so, before any loose inode takes a name */
	rs_stale_restore(r, fc->lf->parent);
	/*
	 * At their names where their directory is known, parents before children
	 * (a loose directory placed makes its own known): each name once, the
	 * second and later names of a file as hard links to the first.
	 */
	if (!ret)
		ret = ub_recover_place(r->recover, place_name, &pc);
	ub_recover_unplaced(r->recover, ret, restore_unplaced, fc);
	if (!ret)
		ub_recover_deleted(r->recover, restore_gone, fc);
	finish_placed(r, fc->lf->parent, &pc.placed);
	retime_entered(r, fc->lf->parent, &pc.touched);
	rmap_free(&pc.placed);
	rmap_free(&pc.touched);
}

void rs_scavenge(struct restorer *r, struct frame *root)
{
	struct frame lf = { root, "lost+found", "lost+found", -1, false, false, false };
	struct frame df = { root, "deleted", "deleted", -1, false, false, false };
	struct found_ctx fc = { .r = r, .lf = &lf, .df = &df };
	int ret;

	if (!r->recover)
		return;
	ret = ub_recover_scan(r->recover);
	if (ret && ret != -ENOMEM)
		fprintf(stderr, "ubtrfs: warning: the scan of the metadata for lost inodes stopped: %s\n",
			strerror(-ret));
	ub_recover_classify(r->recover, found_one, &fc);
	found_close(&fc);
	if (ub_recover_pending(r->recover))
		restore_loose(r, &fc);
	else
		rs_stale_restore(r, root);
	rs_dir_done(r, &lf);
	rs_dir_done(r, &df);
}
