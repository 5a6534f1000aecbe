/* SPDX-License-Identifier: MIT */
/*
 * The recovery API (include/ubtrfs/recover.h) called directly, for
 * test_recover_api.py: open IMAGE read-only, walk every directory from the
 * top (the inodes whose names lead to them are "reached"), then scavenge and
 * print one JSON line per finding:
 *
 *   {"event":"found","subvol":S,"ino":I,"kind":"found|deleted|lost|unreadable","generation":G}
 *   {"event":"placed","subvol":S,"ino":I,"dir":D,"name":"N"}   a lost inode put back at a name
 *   {"event":"unplaced","subvol":S,"ino":I,"kind":"..."}       a lost inode no name took
 *
 *   recover_driver [--no-older] IMAGE
 *
 * --no-older gives the session no older roots, so every inode the live tree
 * cannot give is rebuilt from the leaves. A library user: public headers only.
 * Names are printed as they are (the test makes plain ones); exit 0, or 1 on
 * an error of the API.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ubtrfs/devinfo.h"
#include "ubtrfs/fsinfo.h"
#include "ubtrfs/recover.h"

struct seen {
	struct { uint64_t subvol, ino; bool dir; } *v;
	size_t n, cap;
};

static int seen_add(struct seen *s, uint64_t subvol, uint64_t ino, bool dir)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 256;
		void *v = realloc(s->v, cap * sizeof(*s->v));

		if (!v)
			return -ENOMEM;
		s->v = v;
		s->cap = cap;
	}
	s->v[s->n].subvol = subvol;
	s->v[s->n].ino = ino;
	s->v[s->n].dir = dir;
	s->n++;
	return 0;
}

/* Linear: the test's images hold a few hundred inodes. */
static int seen_find(const struct seen *s, uint64_t subvol, uint64_t ino)
{
	for (size_t i = 0; i < s->n; i++)
		if (s->v[i].subvol == subvol && s->v[i].ino == ino)
			return (int)i;
	return -1;
}

struct walk {
	struct ub_fs *fs;
	struct seen *seen;
	struct seen dirs; /* directories still to list */
};

static int walk_entry(void *arg, const struct ub_dirent *de)
{
	struct walk *w = arg;
	struct ub_inode in;

	/* a name that leads to an inode the live tree cannot give does not reach it */
	if (ub_dirent_inode(w->fs, de, &in) || seen_find(w->seen, de->subvol, de->ino) >= 0)
		return 0;
	if (seen_add(w->seen, de->subvol, de->ino, S_ISDIR(in.mode)))
		return -ENOMEM;
	return S_ISDIR(in.mode) ? seen_add(&w->dirs, de->subvol, de->ino, true) : 0;
}

static int walk_all(struct ub_fs *fs, struct seen *seen)
{
	struct walk w = { fs, seen, { 0 } };
	uint64_t subvol, ino;
	int ret = ub_path_lookup(fs, "/", &subvol, &ino);

	if (!ret)
		ret = seen_add(seen, subvol, ino, true);
	if (!ret)
		ret = seen_add(&w.dirs, subvol, ino, true);
	/* breadth first; a directory that cannot be listed to its end gives what it can */
	for (size_t i = 0; !ret && i < w.dirs.n; i++) {
		int r = ub_dir_iterate(fs, w.dirs.v[i].subvol, w.dirs.v[i].ino, walk_entry, &w);

		if (r == -ENOMEM)
			ret = r;
	}
	free(w.dirs.v);
	return ret;
}

static const char *image;

static int open_older(void *arg, uint64_t root_bytenr, uint64_t cache_bytes, struct ub_fs **out)
{
	struct ub_fs_opts opts = { .super_mirror = -1, .root_bytenr = root_bytenr, .cache_bytes = cache_bytes,
				   .rescue_chunks = true };
	struct ub_log quiet = { .verbosity = -1 };
	const char *paths[1] = { image };

	(void)arg;
	return ub_fs_open(paths, 1, &opts, &quiet, out);
}

static bool subvol_wanted(void *arg, uint64_t subvol)
{
	return seen_find(arg, subvol, BTRFS_FIRST_FREE_OBJECTID) >= 0;
}

static bool reached(void *arg, uint64_t subvol, uint64_t ino)
{
	return seen_find(arg, subvol, ino) >= 0;
}

static const char *kind_name(enum ub_recover_kind k)
{
	switch (k) {
	case UB_RECOVER_FOUND:
		return "found";
	case UB_RECOVER_DELETED:
		return "deleted";
	case UB_RECOVER_LOST:
		return "lost";
	case UB_RECOVER_UNREADABLE:
		return "unreadable";
	}
	return "?";
}

static int on_found(void *arg, const struct ub_recover_inode *ri)
{
	(void)arg;
	printf("{\"event\":\"found\",\"subvol\":%" PRIu64 ",\"ino\":%" PRIu64 ",\"kind\":\"%s\",\"generation\":%" PRIu64
	       ",\"err\":%d}\n", ri->subvol, ri->ino, kind_name(ri->kind), ri->generation, ri->err);
	return 0;
}

static int on_unplaced(void *arg, const struct ub_recover_inode *ri)
{
	(void)arg;
	printf("{\"event\":\"unplaced\",\"subvol\":%" PRIu64 ",\"ino\":%" PRIu64 ",\"kind\":\"%s\"}\n", ri->subvol,
	       ri->ino, kind_name(ri->kind));
	return 0;
}

/* Placed where its directory was reached, or is a lost directory placed already (a later pass). */
static int on_place(void *arg, const struct ub_inode *in, uint64_t dir, const char *name)
{
	struct seen *seen = arg;
	int at = seen_find(seen, in->subvol, dir);

	if (at < 0 || !seen->v[at].dir)
		return -EAGAIN;
	printf("{\"event\":\"placed\",\"subvol\":%" PRIu64 ",\"ino\":%" PRIu64 ",\"dir\":%" PRIu64 ",\"name\":\"%s\"}\n",
	       in->subvol, in->ino, dir, name);
	if (S_ISDIR(in->mode) && seen_find(seen, in->subvol, in->ino) < 0 && seen_add(seen, in->subvol, in->ino, true))
		return -ENOMEM;
	return 0;
}

int main(int argc, char **argv)
{
	struct ub_fs_opts opts = { .super_mirror = -1, .rescue_chunks = true };
	struct ub_log log = { .verbosity = -1 };
	struct ub_older_roots *older = NULL;
	struct ub_recover *rc = NULL;
	struct ub_volume_info vi;
	struct seen seen = { 0 };
	struct ub_root rt;
	struct ub_fs *fs;
	bool no_older = argc == 3 && !strcmp(argv[1], "--no-older");
	int ret;

	if (argc != 2 && !no_older) {
		fprintf(stderr, "usage: recover_driver [--no-older] IMAGE\n");
		return 2;
	}
	image = argv[argc - 1];
	ret = ub_fs_open((const char *const *)&argv[argc - 1], 1, &opts, &log, &fs);
	if (ret) {
		fprintf(stderr, "recover_driver: %s: %s\n", image, strerror(-ret));
		return 1;
	}
	ret = walk_all(fs, &seen);
	if (!ret && !no_older)
		ret = ub_older_roots_new(fs, ub_fs_tree_root(fs, BTRFS_ROOT_TREE_OBJECTID, &rt) ? UINT64_MAX : rt.generation,
					 open_older, NULL, &older);
	if (!ret) {
		struct ub_recover_opts o = { .older = older, .subvol_wanted = subvol_wanted, .reached = reached,
					     .arg = &seen };

		o.last_commit = ub_volume_get_info(ub_fs_volume(fs), &vi) == 0 ? vi.generation : 0;
		ret = ub_recover_new(fs, &o, &rc);
	}
	if (!ret) {
		int scan = ub_recover_scan(rc);

		if (scan)
			fprintf(stderr, "recover_driver: the scan stopped: %s\n", strerror(-scan));
		ret = ub_recover_classify(rc, on_found, NULL);
	}
	if (!ret && ub_recover_pending(rc)) {
		ret = ub_recover_gather(rc);
		if (!ret)
			ret = ub_recover_place(rc, on_place, &seen);
		if (!ret)
			ret = ub_recover_unplaced(rc, 0, on_unplaced, NULL);
	}
	if (ret)
		fprintf(stderr, "recover_driver: %s\n", strerror(-ret));
	ub_recover_free(rc);
	ub_older_roots_free(older);
	ub_fs_close(fs);
	free(seen.v);
	return ret ? 1 : 0;
}
