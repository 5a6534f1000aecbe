/* SPDX-License-Identifier: MIT */
/*
 * Scavenging: inodes no name leads to any more. After the walk, the metadata
 * block groups are scanned for leaves of subvolume trees (the live tree's
 * and older copies alike); every inode item there whose inode the walk did
 * not restore is looked up: in the live tree first, then in the older roots.
 * One that is found (a file whose directory was lost, say) is restored under
 * OUTDIR/lost+found/<subvolume>/<inode>; one that the live tree says does not
 * exist was deleted and stays so (counted), unless --deleted asks for it:
 * then the newest older root that still has it linked gives it, under
 * OUTDIR/deleted/<subvolume>/<inode>, with its data as that root has it
 * (verified against that root's checksums: space reused since shows as lost).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "restore.h"
#include "ubtrfs/rootscan.h"
#include "ubtrfs/tree.h"

struct cand {
	uint64_t subvol, ino;
};

struct scan {
	struct restorer *r;
	struct cand *v;
	size_t n, cap;
	bool nomem;
	/* inodes the scan found that no readable tree gives: their items from the leaves, then */
	struct cand *lost;
	size_t nlost, lost_cap;
};

static bool subvol_tree(uint64_t id)
{
	return id == BTRFS_FS_TREE_OBJECTID || (id >= BTRFS_FIRST_FREE_OBJECTID && id <= BTRFS_LAST_FREE_OBJECTID);
}

static bool want(void *arg, uint64_t owner, uint64_t generation, int level)
{
	(void)arg;
	(void)generation;
	return level == 0 && subvol_tree(owner);
}

static int found(void *arg, const struct ub_eb *eb)
{
	struct scan *s = arg;
	uint32_t n = ub_eb_nritems(eb);

	for (uint32_t i = 0; i < n; i++) {
		struct ub_key k;

		ub_eb_item_key(eb, (int)i, &k);
		if (k.type != BTRFS_INODE_ITEM_KEY || k.objectid < BTRFS_FIRST_FREE_OBJECTID ||
		    k.objectid > BTRFS_LAST_FREE_OBJECTID)
			continue;
		/* only subvolumes the walk went into: one left out (--no-snapshots) stays out */
		if (!rmap_has(&s->r->entered, ub_eb_owner(eb), BTRFS_FIRST_FREE_OBJECTID))
			continue;
		if (rmap_has(&s->r->reached, ub_eb_owner(eb), k.objectid) ||
		    rmap_has(&s->r->entered, ub_eb_owner(eb), k.objectid))
			continue;
		if (s->n == s->cap) {
			size_t cap = s->cap ? s->cap * 2 : 256;
			struct cand *v = realloc(s->v, cap * sizeof(*v));

			if (!v) {
				s->nomem = true;
				return -ENOMEM;
			}
			s->v = v;
			s->cap = cap;
		}
		s->v[s->n++] = (struct cand){ ub_eb_owner(eb), k.objectid };
	}
	return 0;
}

/* ub_scan_metadata's progress: its arg is the scan's */
static void scan_progress(void *arg, uint64_t done, uint64_t total)
{
	struct scan *s = arg;

	rs_progress_scan(s->r, done, total);
}

static int cand_cmp(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;

	if (x->subvol != y->subvol)
		return x->subvol < y->subvol ? -1 : 1;
	return x->ino < y->ino ? -1 : x->ino > y->ino;
}

/* The inode in the live tree, else in the newest older root that has it: 0 and *fs, or -errno. */
static int find_inode(struct restorer *r, uint64_t subvol, uint64_t ino, struct ub_inode *in, struct ub_fs **fs,
		      uint64_t *gen)
{
	int ret = ub_inode_read(r->fs, subvol, ino, in);

	*fs = r->fs;
	*gen = 0;
	/* not there: deleted (or its subvolume is), not lost */
	if (ret == 0 || ret == -ENOENT || ret == -ENOMEM)
		return ret;
	for (int i = 0; !rs_older(r, i, fs, gen); i++)
		if (ub_inode_read(*fs, subvol, ino, in) == 0)
			return 0;
	return ret;
}

/* A deleted inode, from the newest older root where it still has a name (directories have nothing to give). */
static void undelete(struct restorer *r, struct frame *dir, uint64_t subvol, uint64_t ino)
{
	char name[24], rel[64], was[512];
	struct ub_fs *fs, *saved = r->fs;
	struct ub_inode in;
	uint64_t gen;

	for (int i = 0; !rs_older(r, i, &fs, &gen); i++) {
		if (ub_inode_read(fs, subvol, ino, &in) || !in.nlink)
			continue;
		if (S_ISDIR(in.mode))
			return;
		snprintf(name, sizeof(name), "%llu", (unsigned long long)ino);
		snprintf(rel, sizeof(rel), "deleted/%llu/%llu", (unsigned long long)subvol, (unsigned long long)ino);
		if (ub_inode_path(fs, subvol, ino, was, sizeof(was)))
			snprintf(was, sizeof(was), "?");
		if (r->oa.verbosity >= UB_LOG_WARN)
			fprintf(stderr, "ubtrfs: %s: deleted inode %llu of subvolume %llu, restored as generation %llu has it "
				"(it was %s)\n", rel, (unsigned long long)ino, (unsigned long long)subvol,
				(unsigned long long)gen, was);
		r->nundeleted++;
		r->fs = fs;
		rs_entry(r, dir, name, rel, &in);
		r->fs = saved;
		return;
	}
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

static int add_lost(struct scan *s, uint64_t subvol, uint64_t ino)
{
	if (s->nlost == s->lost_cap) {
		size_t cap = s->lost_cap ? s->lost_cap * 2 : 16;
		struct cand *v = realloc(s->lost, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		s->lost = v;
		s->lost_cap = cap;
	}
	s->lost[s->nlost++] = (struct cand){ subvol, ino };
	return 0;
}

static void restore_one(struct restorer *r, struct scan *sc, struct frame *dir, struct frame *deleted, uint64_t subvol,
			uint64_t ino)
{
	char rel[64];
	struct ub_inode in;
	struct ub_fs *fs;
	uint64_t gen;
	int ret = find_inode(r, subvol, ino, &in, &fs, &gen);

	snprintf(rel, sizeof(rel), "lost+found/%llu/%llu", (unsigned long long)subvol, (unsigned long long)ino);
	if (ret == -ENOENT || (!ret && !in.nlink)) {
		/* not there, or unlinked and waiting for its orphan cleanup: deleted */
		r->ndeleted++;
		if (r->deleted)
			undelete(r, deleted, subvol, ino);
		return;
	}
	if (ret && ret != -ENOMEM && !add_lost(sc, subvol, ino))
		return; /* from the leaves, after the walk of the others (restore_loose) */
	if (ret) {
		rs_problem(r, rel, "inode %llu of subvolume %llu was found by the scan but cannot be read: %s",
			   (unsigned long long)ino, (unsigned long long)subvol, strerror(-ret));
		return;
	}
	restore_lost(r, dir, &in, fs, gen, false);
}

/* ---- the last resort: inodes no tree gives, from the leaves themselves ---- */

static int cand_find(const struct cand *v, size_t n, uint64_t subvol, uint64_t ino)
{
	struct cand key = { subvol, ino };
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (cand_cmp(&v[mid], &key) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < n && !cand_cmp(&v[lo], &key);
}

static int found_loose(void *arg, const struct ub_eb *eb)
{
	struct scan *s = arg;
	uint32_t n = ub_eb_nritems(eb);
	uint64_t owner = ub_eb_owner(eb);

	for (uint32_t i = 0; i < n; i++) {
		struct ub_key k;
		int ret;

		ub_eb_item_key(eb, (int)i, &k);
		if (!cand_find(s->lost, s->nlost, owner, k.objectid))
			continue;
		ret = ub_fs_loose_add(s->r->fs, owner, eb, (int)i);
		if (ret)
			return ret;
	}
	return 0;
}

/*
 * The frames of directory `path` under OUTDIR (root: OUTDIR's), each component
 * opened with O_NOFOLLOW as the walk opens them: the last one, or NULL.
 * *all gets the array to release with close_chain.
 */
static struct frame *open_chain(struct restorer *r, struct frame *root, const char *path, struct frame **all,
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

static void close_chain(struct restorer *r, struct frame *v, char *copy, int n)
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
	dir = open_chain(r, root, ppath, &all, &copy, &n);
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
	close_chain(r, all, copy, n);
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
		dir = open_chain(r, root, sl->path, &all, &copy, &n);
		if (dir && dir != root && !ub_inode_read(r->fs, sl->subvol, sl->ino, &dir->in)) {
			dir->have_inode = true;
			dir->made = true;
		}
		close_chain(r, all, copy, n);
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
		dir = open_chain(r, root, sl->path, &all, &copy, &n);
		if (dir && dir != root)
			rs_set_times(r, dir->fd, sl->path, &in);
		close_chain(r, all, copy, n);
	}
}

static void restore_loose(struct restorer *r, struct scan *s, struct frame *lf)
{
	struct ub_meta_scan_ops ops = { .want = want, .found = found_loose, .arg = s,
					.progress = r->tty ? scan_progress : NULL };
	struct rmap placed = { 0 }, touched = { 0 };
	uint8_t *done = calloc(s->nlost ? s->nlost : 1, 1);
	bool progress = true;
	int ret;

	qsort(s->lost, s->nlost, sizeof(*s->lost), cand_cmp);
	/* the copiers read this fs: they must be idle while its loose inodes are added */
	rs_copy_drain(r);
	ret = done ? ub_scan_metadata(r->fs, &ops) : -ENOMEM;
	if (!ret)
		ret = ub_fs_loose_publish(r->fs);
	/* at their names where their directory is known, parents before children (a loose directory placed makes its own known) */
	for (int pass = 0; !ret && progress && pass < 64; pass++) {
		progress = false;
		for (size_t i = 0; i < s->nlost; i++) {
			uint64_t subvol = s->lost[i].subvol, ino = s->lost[i].ino, dir;
			char name[UB_NAME_LEN + 1], *made;
			const char *ppath;
			struct ub_inode in;
			bool walked;
			size_t len;

			if (done[i] || ub_inode_read(r->fs, subvol, ino, &in) || !in.nlink ||
			    ub_inode_first_name(r->fs, subvol, ino, &dir, name, &len) || !ub_name_valid(name, len))
				continue;
			name[len] = 0;
			ppath = rmap_get(&r->entered, subvol, dir);
			walked = ppath != NULL;
			if (!ppath)
				ppath = rmap_get(&placed, subvol, dir);
			if (!ppath)
				continue; /* its directory may be placed in this pass */
			if (place_at(r, lf->parent, ppath, name, &in, &made)) {
				done[i] = 2; /* to lost+found */
				continue;
			}
			done[i] = 1;
			progress = true;
			if (walked && rmap_add(&touched, subvol, dir, ppath, NULL) < 0)
				r->rc = EXIT_FATAL;
			if (made && rmap_add(&placed, subvol, ino, made, NULL) < 0)
				r->rc = EXIT_FATAL;
			free(made);
		}
	}
	for (size_t i = 0; i < s->nlost; i++) {
		uint64_t subvol = s->lost[i].subvol, ino = s->lost[i].ino;
		char sname[24], srel[40], rel[64];
		struct frame sf = { lf, sname, srel, -1, false, false, false };
		struct ub_inode in;
		int ret2 = ret ? ret : ub_inode_read(r->fs, subvol, ino, &in);

		if (done && done[i] == 1)
			continue;
		snprintf(sname, sizeof(sname), "%llu", (unsigned long long)subvol);
		snprintf(srel, sizeof(srel), "lost+found/%llu", (unsigned long long)subvol);
		snprintf(rel, sizeof(rel), "lost+found/%llu/%llu", (unsigned long long)subvol, (unsigned long long)ino);
		if (ret2)
			rs_problem(r, rel, "inode %llu of subvolume %llu was found by the scan but cannot be read, from a tree or from the leaves found: %s",
				   (unsigned long long)ino, (unsigned long long)subvol, strerror(-ret2));
		else if (!in.nlink)
			r->ndeleted++;
		else
			restore_lost(r, &sf, &in, r->fs, 0, true);
		rs_dir_done(r, &sf);
	}
	finish_placed(r, lf->parent, &placed);
	retime_entered(r, lf->parent, &touched);
	rmap_free(&placed);
	rmap_free(&touched);
	free(done);
}

void rs_scavenge(struct restorer *r, struct frame *root)
{
	struct scan s = { .r = r };
	struct ub_meta_scan_ops ops = { .want = want, .found = found, .arg = &s,
					.progress = r->tty ? scan_progress : NULL };
	struct frame lf = { root, "lost+found", "lost+found", -1, false, false, false };
	struct frame df = { root, "deleted", "deleted", -1, false, false, false };
	int ret = ub_scan_metadata(r->fs, &ops);

	if (ret && !s.nomem)
		fprintf(stderr, "ubtrfs: warning: the scan of the metadata for lost inodes stopped: %s\n",
			strerror(-ret));
	if (s.n)
		qsort(s.v, s.n, sizeof(*s.v), cand_cmp);
	for (size_t i = 0; i < s.n;) {
		uint64_t subvol = s.v[i].subvol;
		char sname[24], srel[40], drel[40];
		struct frame sf = { &lf, sname, srel, -1, false, false, false };
		struct frame dsf = { &df, sname, drel, -1, false, false, false };

		snprintf(sname, sizeof(sname), "%llu", (unsigned long long)subvol);
		snprintf(srel, sizeof(srel), "lost+found/%llu", (unsigned long long)subvol);
		snprintf(drel, sizeof(drel), "deleted/%llu", (unsigned long long)subvol);
		for (; i < s.n && s.v[i].subvol == subvol; i++) {
			if (i && !cand_cmp(&s.v[i], &s.v[i - 1]))
				continue;
			restore_one(r, &s, &sf, &dsf, subvol, s.v[i].ino);
		}
		rs_dir_done(r, &sf);
		rs_dir_done(r, &dsf);
	}
	if (s.nlost)
		restore_loose(r, &s, &lf);
	rs_dir_done(r, &lf);
	rs_dir_done(r, &df);
	free(s.v);
	free(s.lost);
}
