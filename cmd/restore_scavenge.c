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
#include "dirlist.h"
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
	/* deleted inodes no older root has (--deleted): from the leaves too; gone_bad: their data cannot be checked */
	struct cand *gone;
	size_t ngone, gone_cap;
	uint8_t *gone_bad;
	size_t nfresh; /* held-back files (r->stale) a later leaf has */
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

/* An inode item of a file the walk held back (restore_stale.c), in a leaf of a later commit than its root's. */
static void mark_fresh(struct restorer *r, const struct ub_eb *eb, uint64_t ino)
{
	uint64_t owner = ub_eb_owner(eb), gen = ub_eb_generation(eb);

	if (gen > r->last_commit)
		return; /* a transaction that never committed */
	for (size_t x = rs_stale_lower(r, owner, ino);
	     x < r->nstale && r->stale[x].subvol == owner && r->stale[x].ino == ino; x++)
		if (gen > r->stale[x].gen)
			r->stale[x].fresh = true;
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
		mark_fresh(s->r, eb, k.objectid);
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

/*
 * A deleted inode, from the newest older root where it still has a name:
 * false when none has it (the leaves may still: restore_loose). Directories
 * have nothing to give.
 */
static bool undelete(struct restorer *r, struct frame *dir, uint64_t subvol, uint64_t ino)
{
	char name[24], rel[64], was[512];
	struct ub_fs *fs, *saved = r->fs;
	struct ub_inode in;
	uint64_t gen;

	for (int i = 0; !rs_older(r, i, &fs, &gen); i++) {
		if (ub_inode_read(fs, subvol, ino, &in) || !in.nlink)
			continue;
		if (S_ISDIR(in.mode))
			return true;
		snprintf(name, sizeof(name), "%llu", (unsigned long long)ino);
		snprintf(rel, sizeof(rel), "deleted/%llu/%llu", (unsigned long long)subvol, (unsigned long long)ino);
		if (ub_inode_path(fs, subvol, ino, was, sizeof(was)))
			snprintf(was, sizeof(was), "?");
		if (r->oa.verbosity >= UB_LOG_WARN) {
			/* a path from the disk: escaped, as in every message */
			char *shown = name_shown(was, strlen(was));

			fprintf(stderr, "ubtrfs: %s: deleted inode %llu of subvolume %llu, restored as generation %llu has it "
				"(it was %s)\n", rel, (unsigned long long)ino, (unsigned long long)subvol,
				(unsigned long long)gen, shown ? shown : "?");
			free(shown);
		}
		r->nundeleted++;
		r->fs = fs;
		rs_entry(r, dir, name, rel, &in);
		r->fs = saved;
		return true;
	}
	return false;
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

static int add_cand(struct cand **v, size_t *n, size_t *cap, uint64_t subvol, uint64_t ino)
{
	if (*n == *cap) {
		size_t c = *cap ? *cap * 2 : 16;
		struct cand *nv = realloc(*v, c * sizeof(*nv));

		if (!nv)
			return -ENOMEM;
		*v = nv;
		*cap = c;
	}
	(*v)[(*n)++] = (struct cand){ subvol, ino };
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
		if (r->deleted && !undelete(r, deleted, subvol, ino) && ret == -ENOENT)
			add_cand(&sc->gone, &sc->ngone, &sc->gone_cap, subvol, ino);
		return;
	}
	if (ret && ret != -ENOMEM && !add_cand(&sc->lost, &sc->nlost, &sc->lost_cap, subvol, ino))
		return; /* from the leaves, after the walk of the others (restore_loose) */
	if (ret) {
		rs_problem(r, rel, "inode %llu of subvolume %llu was found by the scan but cannot be read: %s",
			   (unsigned long long)ino, (unsigned long long)subvol, strerror(-ret));
		return;
	}
	restore_lost(r, dir, &in, fs, gen, false);
}

/* ---- the last resort: inodes no tree gives, from the leaves themselves ---- */

/* The index of (subvol, ino) in the sorted v[0..n), or -1. */
static long cand_index(const struct cand *v, size_t n, uint64_t subvol, uint64_t ino)
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
	return lo < n && !cand_cmp(&v[lo], &key) ? (long)lo : -1;
}

/*
 * A file extent of a deleted inode (or of a held-back file's newer version):
 * its checksums may be in no tree the fs reads, so they are looked for in old
 * checksum-tree leaves, between the extent's generation and this leaf's (the
 * file held it then). *bad when that cannot be done.
 */
static int leaf_extent(struct scan *s, const struct ub_eb *eb, int slot, bool *bad)
{
	uint32_t size;
	const uint8_t *d = ub_eb_item_data(eb, slot, &size);
	uint64_t gen = ub_eb_generation(eb), egen;
	int ret;

	if (size < sizeof(struct btrfs_file_extent_item) ||
	    UB_GET(btrfs_file_extent_item, type, d) != BTRFS_FILE_EXTENT_REG || !UB_GET(btrfs_file_extent_item, disk_bytenr, d))
		return 0; /* inline (in the leaf, checked with it), preallocated or a hole: nothing on disk to check */
	egen = UB_GET(btrfs_file_extent_item, generation, d);
	ret = ub_fs_loose_csum_range(s->r->fs, UB_GET(btrfs_file_extent_item, disk_bytenr, d),
				     UB_GET(btrfs_file_extent_item, disk_num_bytes, d), egen < gen ? egen : gen, gen);
	if (ret == -ENOMEM)
		return ret;
	if (ret)
		*bad = true;
	return 0;
}

/*
 * The held-back files with a newer version whose inode numbers this leaf
 * spans: it held every item of theirs in that span (ub_fs_loose_cover), and
 * their items here are added. Leaves of no commit are left out.
 */
static int fresh_leaf(struct scan *s, const struct ub_eb *eb)
{
	struct restorer *r = s->r;
	uint64_t owner = ub_eb_owner(eb), gen = ub_eb_generation(eb);
	uint32_t n = ub_eb_nritems(eb), i = 0;
	struct ub_key first, last;
	int ret = 0;

	if (!n || gen > r->last_commit)
		return 0;
	ub_eb_item_key(eb, 0, &first);
	ub_eb_item_key(eb, (int)n - 1, &last);
	for (size_t x = rs_stale_lower(r, owner, first.objectid);
	     !ret && x < r->nstale && r->stale[x].subvol == owner && r->stale[x].ino <= last.objectid; x++) {
		struct rs_stale *st = &r->stale[x];
		struct ub_key lo = { st->ino, 0, 0 }, hi = { st->ino, UINT8_MAX, UINT64_MAX };

		if (!st->fresh || (x && r->stale[x - 1].subvol == owner && r->stale[x - 1].ino == st->ino))
			continue;
		ret = ub_fs_loose_cover(r->fs, owner, gen, ub_key_cmp(&first, &lo) > 0 ? &first : &lo,
					ub_key_cmp(&last, &hi) < 0 ? &last : &hi);
		for (; !ret && i < n; i++) {
			struct ub_key k;

			ub_eb_item_key(eb, (int)i, &k);
			if (k.objectid > st->ino)
				break;
			if (k.objectid < st->ino)
				continue;
			ret = ub_fs_loose_add(r->fs, owner, eb, (int)i);
			if (!ret && k.type == BTRFS_EXTENT_DATA_KEY)
				ret = leaf_extent(s, eb, (int)i, &st->bad_csums);
		}
	}
	return ret;
}

static int found_loose(void *arg, const struct ub_eb *eb)
{
	struct scan *s = arg;
	uint32_t n = ub_eb_nritems(eb);
	uint64_t owner = ub_eb_owner(eb);

	for (uint32_t i = 0; i < n; i++) {
		struct ub_key k;
		long g = -1;
		int ret;

		ub_eb_item_key(eb, (int)i, &k);
		if (cand_index(s->lost, s->nlost, owner, k.objectid) < 0 &&
		    (g = cand_index(s->gone, s->ngone, owner, k.objectid)) < 0)
			continue;
		ret = ub_fs_loose_add(s->r->fs, owner, eb, (int)i);
		if (!ret && g >= 0 && k.type == BTRFS_EXTENT_DATA_KEY) {
			bool bad = false;

			ret = leaf_extent(s, eb, (int)i, &bad);
			s->gone_bad[g] |= bad;
		}
		if (ret)
			return ret;
	}
	return s->nfresh ? fresh_leaf(s, eb) : 0;
}

static bool want_csums(void *arg, uint64_t owner, uint64_t generation, int level)
{
	(void)arg;
	(void)generation;
	return level == 0 && owner == BTRFS_CSUM_TREE_OBJECTID;
}

static int found_csums(void *arg, const struct ub_eb *eb)
{
	struct scan *s = arg;

	return ub_fs_loose_csum_leaf(s->r->fs, eb);
}

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

/* A deleted inode no older root has, from the items of the leaves the scan found (once published). */
static void restore_gone(struct restorer *r, struct scan *s, struct frame *df, size_t g)
{
	uint64_t subvol = s->gone[g].subvol, ino = s->gone[g].ino;
	char sname[24], srel[40], name[24], rel[64], was[512];
	struct frame dsf = { df, sname, srel, -1, false, false, false };
	struct ub_inode in;

	if (ub_inode_read(r->fs, subvol, ino, &in) || !in.nlink || S_ISDIR(in.mode))
		return; /* deleted it stays (counted) */
	snprintf(sname, sizeof(sname), "%llu", (unsigned long long)subvol);
	snprintf(srel, sizeof(srel), "deleted/%llu", (unsigned long long)subvol);
	snprintf(name, sizeof(name), "%llu", (unsigned long long)ino);
	snprintf(rel, sizeof(rel), "deleted/%llu/%llu", (unsigned long long)subvol, (unsigned long long)ino);
	if (s->gone_bad[g]) {
		rs_problem(r, rel, "deleted inode %llu of subvolume %llu: not undeleted: the checksums of its data cannot "
			   "all be looked for (an extent not on sector boundaries, or past the bound of 16 GiB of data)",
			   (unsigned long long)ino, (unsigned long long)subvol);
		return;
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
	rs_entry(r, &dsf, name, rel, &in);
	rs_dir_done(r, &dsf);
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

/* One loose inode's names, tried where their directories are known (ub_inode_names' callback). */
struct place_ctx {
	struct restorer *r;
	struct frame *root;
	struct rmap *placed, *touched;
	uint64_t subvol, ino;
	uint64_t *tried; /* the names (by their order, the first 64) tried already */
	int nth;
	bool placed_one;
	struct ub_inode in;
};

static int place_name(void *arg, uint64_t dir, const char *bytes, size_t len)
{
	struct place_ctx *pc = arg;
	uint64_t bit = pc->nth < 64 ? 1ULL << pc->nth : 0;
	char name[UB_NAME_LEN + 1], *made;
	const char *ppath;
	bool walked;

	pc->nth++;
	if (!bit || (*pc->tried & bit))
		return 0;
	if (!ub_name_valid(bytes, len)) {
		*pc->tried |= bit;
		return 0;
	}
	memcpy(name, bytes, len);
	name[len] = 0;
	ppath = rmap_get(&pc->r->entered, pc->subvol, dir);
	walked = ppath != NULL;
	if (!ppath)
		ppath = rmap_get(pc->placed, pc->subvol, dir);
	if (!ppath)
		return 0; /* its directory may be placed in a later pass */
	*pc->tried |= bit;
	if (place_at(pc->r, pc->root, ppath, name, &pc->in, &made))
		return 0; /* the name is taken */
	pc->placed_one = true;
	if (walked && rmap_add(pc->touched, pc->subvol, dir, ppath, NULL) < 0)
		pc->r->rc = EXIT_FATAL;
	if (made && rmap_add(pc->placed, pc->subvol, pc->ino, made, NULL) < 0)
		pc->r->rc = EXIT_FATAL;
	free(made);
	/* a directory has one name: a second would be a second directory */
	if (S_ISDIR(pc->in.mode)) {
		*pc->tried = ~0ULL;
		return 1;
	}
	return 0;
}

static void restore_loose(struct restorer *r, struct scan *s, struct frame *lf, struct frame *df)
{
	struct ub_meta_scan_ops cops = { .want = want_csums, .found = found_csums, .arg = s,
					 .progress = r->tty ? scan_progress : NULL };
	struct ub_meta_scan_ops ops = { .want = want, .found = found_loose, .arg = s,
					.progress = r->tty ? scan_progress : NULL };
	struct rmap placed = { 0 }, touched = { 0 };
	uint8_t *done = calloc(s->nlost ? s->nlost : 1, 1);
	uint64_t *tried = calloc(s->nlost ? s->nlost : 1, sizeof(*tried));
	bool progress = true;
	int ret;

	if (s->nlost)
		qsort(s->lost, s->nlost, sizeof(*s->lost), cand_cmp);
	if (s->ngone)
		qsort(s->gone, s->ngone, sizeof(*s->gone), cand_cmp);
	s->gone_bad = calloc(s->ngone ? s->ngone : 1, 1);
	/* the copiers read this fs: they must be idle while its loose inodes (and checksums) are added */
	rs_copy_drain(r);
	ret = done && tried && s->gone_bad ? ub_scan_metadata(r->fs, &ops) : -ENOMEM;
	if (!ret)
		ret = ub_fs_loose_publish(r->fs);
	/* a failed checksum scan leaves sectors without one: those read as lost, never as good */
	if (!ret && (s->ngone || s->nfresh) && ub_scan_metadata(r->fs, &cops))
		fprintf(stderr, "ubtrfs: warning: the scan for the checksums of deleted files stopped: their data may "
			"show as lost\n");
	/* the files held back, newer where the leaves give them so, before any loose inode takes a name */
	rs_stale_restore(r, lf->parent);
	/*
	 * At their names where their directory is known, parents before children
	 * (a loose directory placed makes its own known): each name once, the
	 * second and later names of a file as hard links to the first.
	 */
	for (int pass = 0; !ret && progress && pass < 64; pass++) {
		progress = false;
		for (size_t i = 0; i < s->nlost; i++) {
			struct place_ctx pc = { r, lf->parent, &placed, &touched, s->lost[i].subvol, s->lost[i].ino,
						&tried[i], 0, false };

			/* every name tried already: nothing a later pass can add */
			if (tried[i] == ~0ULL || ub_inode_read(r->fs, pc.subvol, pc.ino, &pc.in) || !pc.in.nlink)
				continue;
			ub_inode_names(r->fs, pc.subvol, pc.ino, place_name, &pc);
			if (pc.nth < 64 && tried[i] == (1ULL << pc.nth) - 1)
				tried[i] = ~0ULL;
			if (pc.placed_one) {
				done[i] = 1;
				progress = true;
			}
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
	for (size_t g = 0; !ret && g < s->ngone; g++)
		restore_gone(r, s, df, g);
	finish_placed(r, lf->parent, &placed);
	retime_entered(r, lf->parent, &touched);
	rmap_free(&placed);
	rmap_free(&touched);
	free(done);
	free(tried);
}

void rs_scavenge(struct restorer *r, struct frame *root)
{
	struct scan s = { .r = r };
	struct ub_meta_scan_ops ops = { .want = want, .found = found, .arg = &s,
					.progress = r->tty ? scan_progress : NULL };
	struct frame lf = { root, "lost+found", "lost+found", -1, false, false, false };
	struct frame df = { root, "deleted", "deleted", -1, false, false, false };
	int ret;

	rs_stale_sort(r);
	ret = ub_scan_metadata(r->fs, &ops);
	for (size_t i = 0; i < r->nstale; i++)
		s.nfresh += r->stale[i].fresh;

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
	if (s.nlost || s.ngone || s.nfresh)
		restore_loose(r, &s, &lf, &df);
	else
		rs_stale_restore(r, root);
	rs_dir_done(r, &lf);
	rs_dir_done(r, &df);
	free(s.v);
	free(s.lost);
	free(s.gone);
	free(s.gone_bad);
}
