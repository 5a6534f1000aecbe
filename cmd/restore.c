/* SPDX-License-Identifier: MIT */
/* ubtrfs restore: copy the files out of a filesystem (damaged or not) into a folder, read-only. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "dirlist.h"
#include "restore.h"
#include "ubtrfs/devinfo.h"
#include "ubtrfs/fsinfo.h"

#define RESTORE_CACHE (8ULL << 20)

static const char help[] =
	"usage: ubtrfs restore [OPTIONS] DEV... OUTDIR\n\n"
	"Copy the files of a btrfs filesystem into the folder OUTDIR without mounting it:\n"
	"every subvolume and snapshot under its path, directories, regular files (holes\n"
	"stay holes), symbolic links, hard links (made again as links), device nodes, fifos\n"
	"and sockets, with owner, mode, times and extended attributes. The devices are\n"
	"only read. Nothing is written outside OUTDIR, whatever the filesystem's names say;\n"
	"OUTDIR is made if it does not exist. What cannot be restored is listed on stderr\n"
	"and the rest goes on: damage is read around from mirrors, parity and older\n"
	"roots, and a lost chunk tree is rebuilt from a scan of the devices.\n\n"
	"      --path P         only P (a file or a directory, an absolute path) and what\n"
	"                       is below it, under OUTDIR/P\n"
	"      --path-regex RE  only the paths (absolute, from the top-level subvolume)\n"
	"                       that the POSIX extended regular expression RE matches;\n"
	"                       their directories are made as needed\n"
	"      --no-snapshots   leave out subvolumes that are snapshots\n"
	"      --no-owner       leave owner and group to the user running restore\n"
	"      --no-mode        permissions from the umask instead of the filesystem's\n"
	"      --no-times       leave access and modification times at now\n"
	"      --no-xattrs      leave out extended attributes (and POSIX ACLs)\n"
	"      --no-privileged  make no device nodes, clear set-user-ID and set-group-ID\n"
	"                       bits (not a directory's) and leave out file capabilities\n"
	"                       (security.capability): for an image not to be trusted\n"
	"                       restored as root (by default they are made as on the\n"
	"                       disk, as cp -a and tar do, and counted in the summary)\n"
	"      --overwrite      replace files that exist in OUTDIR (never a directory);\n"
	"                       without it they are kept and reported\n"
	"      --no-scavenge    do not scan the metadata for inodes no name leads to any\n"
	"                       more (by default they go to OUTDIR/lost+found/SUBVOL/INODE;\n"
	"                       those no tree has at all are read from the leaves found\n"
	"                       and go back at their names when their folder is known)\n"
	"      --deleted        undelete: files the scan finds that were deleted, as the\n"
	"                       newest older root still on disk has them (else as the\n"
	"                       old leaves do, their data checked against checksums\n"
	"                       from old leaves), go to OUTDIR/deleted/SUBVOL/INODE\n"
	"      --report FILE    write one JSON line per damaged or lost file to FILE: its\n"
	"                       path, and for a file whose data could not all be read,\n"
	"                       the byte ranges lost and why\n"
	"  -n, --dry-run        list what would be restored (directories end in '/',\n"
	"                       symlinks in '@'); make nothing\n"
	"  -h, --help           this text\n"
	OPEN_ARGS_HELP
	"\nExit codes: 0 everything was restored, 1 something could not be (each listed:\n"
	"unreadable inodes or data, names that cannot be paths, files that exist),\n"
	"2 usage or fatal error (not btrfs, OUTDIR unusable).\n";

static bool has_name(const struct entries *es, const char *name)
{
	for (size_t i = 0; i < es->n; i++)
		if (!strcmp(es->v[i].name, name))
			return true;
	return false;
}

/*
 * A directory the root in use cannot list to its end: the names it lacks are
 * taken from older roots, newest first, until one lists the directory whole.
 */
static void list_from_older(struct restorer *r, const char *rel, uint64_t subvol, uint64_t ino, struct entries *es)
{
	struct ub_fs *fs;
	uint64_t gen;

	for (int i = 0; !rs_older(r, i, &fs, &gen); i++) {
		struct entries more = { .fs = fs, .gen = gen };
		size_t added = 0;
		int ret = ub_dir_iterate(fs, subvol, ino, entries_add, &more);

		for (size_t k = 0; k < more.n; k++) {
			if (has_name(es, more.v[k].name) || entries_add(es, &more.v[k].de))
				continue;
			es->v[es->n - 1].fs = fs;
			es->v[es->n - 1].gen = gen;
			added++;
		}
		entries_free(&more);
		if (added)
			rs_note(r, UB_LOG_WARN, rel, "%zu entries from the older root of generation %llu", added,
				(unsigned long long)gen);
		if (!ret)
			break;
	}
}

static char *join(const char *dir, const char *name)
{
	size_t dl = strlen(dir), nl = strlen(name);
	char *p = malloc(dl + nl + 2);

	if (p)
		snprintf(p, dl + nl + 2, "%s%s%s", dir, dl ? "/" : "", name);
	return p;
}

static bool selected(struct restorer *r, const char *rel)
{
	char *abs;
	bool ok;

	if (!r->use_regex)
		return true;
	/* the expression sees absolute paths, as --path names them */
	abs = malloc(strlen(rel) + 2);
	if (!abs)
		return false;
	abs[0] = '/';
	strcpy(abs + 1, rel);
	ok = regexec(&r->regex, abs, 0, NULL, 0) == 0;
	free(abs);
	return ok;
}

/*
 * May the walk enter the directory entry `de` leads to? Only once, and only
 * through its real name. `inode_lost`: its inode cannot be read, and so, as a
 * rule, neither can its back reference (the same leaf): not said again.
 */
static bool may_enter(struct restorer *r, const char *rel, const struct ub_dirent *de, bool inode_lost)
{
	int ret = ub_dir_entry_is_link(r->fs, de);

	if (ret == 0) {
		rs_problem(r, rel, "a second name of directory %llu of subvolume %llu (its back reference names "
			   "another): not entered", (unsigned long long)de->ino, (unsigned long long)de->subvol);
		return false;
	}
	if (ret < 0 && ret != -ENOENT && !inode_lost)
		rs_problem(r, rel, "the back reference of directory %llu cannot be read: %s",
			   (unsigned long long)de->ino, strerror(-ret));
	ret = rmap_add(&r->entered, de->subvol, de->ino, rel, NULL);
	if (ret == 0)
		rs_problem(r, rel, "directory %llu of subvolume %llu was restored under another name already: not "
			   "entered again", (unsigned long long)de->ino, (unsigned long long)de->subvol);
	if (ret < 0) {
		rs_problem(r, rel, "out of memory");
		r->rc = EXIT_FATAL;
	}
	return ret == 1;
}

static bool skip_subvol(struct restorer *r, const char *rel, const struct ub_dirent *de)
{
	struct ub_subvol_info si;
	int ret;

	if (!r->no_snapshots || de->subvol == de->dir_subvol)
		return false;
	ret = ub_subvol_info(r->fs, de->subvol, &si);
	if (ret) {
		rs_problem(r, rel, "subvolume %llu: its root item cannot be read: %s", (unsigned long long)de->subvol,
			   strerror(-ret));
		return false;
	}
	if (si.snapshot)
		rs_note(r, UB_LOG_INFO, rel, "snapshot %llu left out", (unsigned long long)de->subvol);
	return si.snapshot;
}

static const char *ftype_word(uint8_t t)
{
	static const char *const words[] = { "unknown", "a regular file", "a directory", "a character device",
					     "a block device", "a fifo", "a socket", "a symbolic link" };

	return t < sizeof(words) / sizeof(words[0]) ? words[t] : "unknown";
}

/*
 * What the walk would otherwise pass over in silence: an entry whose type
 * is not its inode's (the kernel refuses such an inode; restore goes by the
 * inode's mode), and file extents on an inode whose mode has no data (a
 * directory, a device node, a fifo, a socket), whose bytes are not restored.
 */
static void check_shape(struct restorer *r, const char *rel, const struct ub_dirent *de, const struct ub_inode *in)
{
	uint8_t t = ub_mode_ftype(in->mode);
	int ret;

	if (de->type != t && de->ino != BTRFS_EMPTY_SUBVOL_DIR_OBJECTID)
		rs_problem(r, rel, "the directory entry says %s (type %u), inode %llu's mode %s (0%o): restored as "
			   "the mode says", ftype_word(de->type), (unsigned)de->type, (unsigned long long)in->ino,
			   ftype_word(t), (unsigned)in->mode);
	if (S_ISREG(in->mode) || S_ISLNK(in->mode) || in->ino == BTRFS_EMPTY_SUBVOL_DIR_OBJECTID)
		return;
	ret = ub_inode_has_extents(r->fs, in->subvol, in->ino);
	if (ret > 0)
		rs_problem(r, rel, "inode %llu of subvolume %llu is %s by its mode (0%o) but has file extent items: "
			   "their data is not restored", (unsigned long long)in->ino, (unsigned long long)in->subvol,
			   ftype_word(t), (unsigned)in->mode);
	else if (ret < 0 && !S_ISDIR(in->mode)) /* a directory's own walk says that its items cannot be read */
		rs_problem(r, rel, "inode %llu of subvolume %llu: its items cannot be read to the end: %s",
			   (unsigned long long)in->ino, (unsigned long long)in->subvol, strerror(-ret));
}

static void walk_dir(struct restorer *r, struct frame *f, uint64_t subvol, uint64_t ino);

/*
 * A directory whose inode no root can read, entered through its entry: it is
 * made from what is known (its name; mode 0700, restore's owner, the time of
 * the restore) and its entries are walked, so that they come back at their
 * paths, not by number under lost+found.
 */
static void walk_orphan_dir(struct restorer *r, struct frame *f, const struct entry *e, const char *rel)
{
	struct frame child = { f, e->name, (char *)rel, -1, false, false, false };

	rs_note(r, UB_LOG_WARN, rel, "directory %llu of subvolume %llu is made from its entries, with mode 0700, "
		"restore's owner and the time of the restore: its inode cannot be read", (unsigned long long)e->de.ino,
		(unsigned long long)e->de.subvol);
	if (selected(r, rel))
		rs_dir_make(r, &child);
	walk_dir(r, &child, e->de.subvol, e->de.ino);
	rs_dir_done(r, &child);
}

static void walk_entry(struct restorer *r, struct frame *f, const struct entry *e)
{
	uint64_t saved_gen;
	struct ub_fs *saved;
	struct ub_inode in;
	char *rel;
	int ret;

	rel = join(f->rel, e->name);
	if (!rel) {
		rs_problem(r, f->rel, "out of memory");
		r->rc = EXIT_FATAL;
		return;
	}
	/* the reader hands out valid names only; a second look costs nothing */
	if (!ub_name_valid(e->de.name, e->de.name_len)) {
		rs_problem(r, f->rel, "an entry's name cannot be a path component: not restored");
		free(rel);
		return;
	}
	saved = r->fs;
	saved_gen = r->fs_gen;
	if (e->fs) {
		r->fs = e->fs;
		r->fs_gen = e->gen;
	}
	ret = ub_dirent_inode(r->fs, &e->de, &in);
	if (ret) {
		struct ub_fs *fs;
		uint64_t gen;

		rs_problem(r, rel, "inode %llu of subvolume %llu cannot be read: %s", (unsigned long long)e->de.ino,
			   (unsigned long long)e->de.subvol, strerror(-ret));
		/* a second chance in the older roots: the inode as it was there */
		if (!e->fs && ub_older_roots_dirent_inode(r->older, &e->de, &in, &fs, &gen) == 0) {
			ret = 0;
			r->fs = fs;
			r->fs_gen = gen;
			rs_note(r, UB_LOG_WARN, rel, "restored as it was in the older root of generation %llu",
				(unsigned long long)gen);
		}
	}
	if (!ret)
		check_shape(r, rel, &e->de, &in);
	if (ret && e->de.type == BTRFS_FT_DIR && e->de.ino != BTRFS_EMPTY_SUBVOL_DIR_OBJECTID) {
		/* its entries may be intact where its inode is not: listed from them, as btrfs restore does */
		if (may_enter(r, rel, &e->de, true))
			walk_orphan_dir(r, f, e, rel);
	} else if (ret) {
		/* said above */
	} else if (S_ISDIR(in.mode)) {
		/*
		 * Every placeholder of a snapshot is inode 2 of that snapshot: they
		 * are all one empty directory, which holds nothing to enter twice.
		 */
		bool placeholder = e->de.ino == BTRFS_EMPTY_SUBVOL_DIR_OBJECTID;

		if (placeholder || (!skip_subvol(r, rel, &e->de) && may_enter(r, rel, &e->de, false))) {
			struct frame child = { f, e->name, rel, -1, false, false, true, in };

			if (selected(r, rel))
				rs_dir_make(r, &child);
			walk_dir(r, &child, e->de.subvol, e->de.ino);
			rs_dir_done(r, &child);
		}
	} else if (selected(r, rel)) {
		rs_entry(r, f, e->name, rel, &in);
	}
	r->fs = saved;
	r->fs_gen = saved_gen;
	free(rel);
}

static void walk_dir(struct restorer *r, struct frame *f, uint64_t subvol, uint64_t ino)
{
	struct entries es = { 0 };
	int ret;

	if (f->failed || r->rc == EXIT_FATAL)
		return;
	/* a snapshot's stand-in for a subvolume it did not take along is empty */
	if (ino == BTRFS_EMPTY_SUBVOL_DIR_OBJECTID)
		return;
	if (r->depth >= 4096) {
		rs_problem(r, f->rel, "directories nested deeper than 4096: not entered");
		return;
	}
	r->depth++;
	ret = ub_dir_iterate(r->fs, subvol, ino, entries_add, &es);
	if (ret)
		rs_problem(r, f->rel, "the directory (inode %llu of subvolume %llu) cannot be read to its end: %s",
			   (unsigned long long)ino, (unsigned long long)subvol, strerror(-ret));
	if (ret && ret != -ENOMEM)
		list_from_older(r, f->rel, subvol, ino, &es);
	for (size_t i = 0; i < es.n && r->rc != EXIT_FATAL; i++)
		walk_entry(r, f, &es.v[i]);
	entries_free(&es);
	r->depth--;
}

/* --path's components, as ub_path_lookup takes them: "." dropped, ".." one up. */
static int split_path(const char *path, char ***out, size_t *n)
{
	char *copy = strdup(path), *save = NULL, *tok, **v;
	size_t k = 0;

	if (!copy)
		return -ENOMEM;
	v = calloc(strlen(path) / 2 + 2, sizeof(*v));
	if (!v) {
		free(copy);
		return -ENOMEM;
	}
	for (tok = strtok_r(copy, "/", &save); tok; tok = strtok_r(NULL, "/", &save)) {
		if (!strcmp(tok, "."))
			continue;
		if (!strcmp(tok, "..")) {
			if (k)
				free(v[--k]);
			continue;
		}
		if (!(v[k++] = strdup(tok))) {
			for (size_t i = 0; i < k - 1; i++)
				free(v[i]);
			free(v);
			free(copy);
			return -ENOMEM;
		}
	}
	free(copy);
	*out = v;
	*n = k;
	return 0;
}

/* "/a/b" from the first n components. */
static char *abs_path(char **comps, size_t n)
{
	size_t len = 2;
	char *p;

	for (size_t i = 0; i < n; i++)
		len += strlen(comps[i]) + 1;
	p = malloc(len);
	if (!p)
		return NULL;
	strcpy(p, n ? "" : "/");
	for (size_t i = 0; i < n; i++) {
		strcat(p, "/");
		strcat(p, comps[i]);
	}
	return p;
}

/* --path: the directories down to it (made plainly, without metadata of theirs), then it and what is below. */
static void restore_path(struct restorer *r, struct frame *root, const char *path)
{
	struct frame *chain = NULL, *pf = root;
	char **comps = NULL, *where = NULL;
	size_t n = 0, ndirs = 0, made = 0;
	uint64_t subvol, ino;
	struct ub_inode in;
	int ret;

	ret = split_path(path, &comps, &n);
	if (!ret)
		ret = (where = abs_path(comps, n)) ? 0 : -ENOMEM;
	if (!ret)
		ret = ub_path_lookup(r->fs, where, &subvol, &ino);
	if (!ret)
		ret = ub_inode_read(r->fs, subvol, ino, &in);
	if (ret) {
		fprintf(stderr, "ubtrfs: error: %s: %s\n", path, strerror(-ret));
		r->rc = EXIT_FATAL;
		goto out;
	}
	ndirs = S_ISDIR(in.mode) ? n : n - 1;
	chain = calloc(ndirs + 1, sizeof(*chain));
	if (!chain)
		goto oom;
	for (made = 0; made < ndirs; made++) {
		struct frame *f = &chain[made];

		f->parent = made ? &chain[made - 1] : root;
		f->name = comps[made];
		f->rel = join(f->parent->rel, comps[made]);
		f->fd = -1;
		if (!f->rel)
			goto oom;
		/* the directories on the way get their own metadata too, when they can be read */
		{
			char *at = abs_path(comps, made + 1);

			f->have_inode = at && ub_path_lookup_inode(r->fs, at, &f->in) == 0;
			free(at);
		}
	}
	pf = ndirs ? &chain[ndirs - 1] : root;
	if (S_ISDIR(in.mode)) {
		if (ndirs) {
			pf->have_inode = true;
			pf->in = in;
		}
		if (rmap_add(&r->entered, subvol, ino, NULL, NULL) < 0)
			goto oom;
		if (selected(r, pf->rel))
			rs_dir_make(r, pf);
		walk_dir(r, pf, subvol, ino);
	} else {
		struct entry e = { .name = comps[n - 1] };

		free(where);
		where = abs_path(comps, n - 1);
		ret = where ? ub_path_lookup(r->fs, where, &subvol, &ino) : -ENOMEM;
		if (!ret)
			ret = ub_dir_lookup(r->fs, subvol, ino, e.name, strlen(e.name), &e.de);
		/* the entry's name is ours (the lookup's may not outlive it) */
		e.de.name = e.name;
		if (ret) {
			fprintf(stderr, "ubtrfs: error: %s: %s\n", path, strerror(-ret));
			r->rc = EXIT_FATAL;
		} else {
			walk_entry(r, pf, &e);
		}
	}
	goto out;
oom:
	fprintf(stderr, "ubtrfs: error: out of memory\n");
	r->rc = EXIT_FATAL;
out:
	while (made-- > 0) {
		rs_dir_done(r, &chain[made]);
		free(chain[made].rel);
	}
	free(chain);
	for (size_t i = 0; i < n; i++)
		free(comps[i]);
	free(comps);
	free(where);
}

/* OUTDIR: made when missing (one level), else it must be a directory. */
static int open_outdir(struct restorer *r, const char *dir)
{
	if (r->dry_run)
		return 0;
	if (mkdir(dir, 0755) && errno != EEXIST) {
		fprintf(stderr, "ubtrfs: error: %s: cannot make the output folder: %s\n", dir, strerror(errno));
		return -1;
	}
	r->rootfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (r->rootfd < 0) {
		fprintf(stderr, "ubtrfs: error: %s: %s\n", dir, errno == ENOTDIR ? "not a directory" : strerror(errno));
		return -1;
	}
	return 0;
}

int cmd_restore(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "path", required_argument, NULL, 'p' }, { "path-regex", required_argument, NULL, 0x300 },
		{ "no-snapshots", no_argument, NULL, 0x301 }, { "no-owner", no_argument, NULL, 0x302 },
		{ "no-mode", no_argument, NULL, 0x303 }, { "no-times", no_argument, NULL, 0x304 },
		{ "no-xattrs", no_argument, NULL, 0x305 }, { "overwrite", no_argument, NULL, 0x306 },
		{ "report", required_argument, NULL, 0x307 },
		{ "no-scavenge", no_argument, NULL, 0x308 },
		{ "deleted", no_argument, NULL, 0x309 }, { "no-privileged", no_argument, NULL, 0x30a },
		{ "dry-run", no_argument, NULL, 'n' }, { "help", no_argument, NULL, 'h' },
		OPEN_ARGS_LONGOPTS, { NULL, 0, NULL, 0 },
	};
	struct restorer r = { .owner = true, .mode = true, .times = true, .xattrs = true, .rootfd = -1,
			      .scavenge = true, .lock = PTHREAD_MUTEX_INITIALIZER };
	struct frame root = { .rel = "", .fd = -1 };
	const char *path = NULL, *outdir, *report = NULL;
	int opt, o, ret;

	open_args_init(&r.oa);
	/* restore gets what it can: a chunk tree that cannot be read is rebuilt from older copies of its leaves */
	r.oa.rescue_chunks = true;
	while ((opt = getopt_long(argc, argv, "nhvq", longopts, NULL)) != -1) {
		if ((o = open_args_parse(&r.oa, opt, optarg)) != 0) {
			if (o < 0)
				return usage_error("restore", "invalid value '%s'", optarg);
			continue;
		}
		switch (opt) {
		case 'p': path = optarg; break;
		case 0x300:
			if (r.use_regex)
				regfree(&r.regex);
			ret = regcomp(&r.regex, optarg, REG_EXTENDED | REG_NOSUB);
			if (ret)
				return usage_error("restore", "invalid regular expression '%s'", optarg);
			r.use_regex = true;
			break;
		case 0x301: r.no_snapshots = true; break;
		case 0x302: r.owner = false; break;
		case 0x303: r.mode = false; break;
		case 0x304: r.times = false; break;
		case 0x305: r.xattrs = false; break;
		case 0x306: r.overwrite = true; break;
		case 0x307: report = optarg; break;
		case 0x308: r.scavenge = false; break;
		case 0x309: r.deleted = true; break;
		case 0x30a: r.no_privileged = true; break;
		case 'n': r.dry_run = true; break;
		case 'h': fputs(help, stdout); return EXIT_OK;
		default: return usage_error("restore", "invalid option");
		}
	}
	if (argc - optind < 2)
		return usage_error("restore", "give the devices, then the output folder");
	if (path && path[0] != '/')
		return usage_error("restore", "--path must be absolute");
	/* lost inodes belong to no path: only a whole-filesystem restore looks for them */
	if (path || r.use_regex)
		r.scavenge = false;
	if (r.deleted && !r.scavenge)
		return usage_error("restore", "--deleted needs the scan: not with --no-scavenge, --path or --path-regex");
	outdir = argv[argc - 1];
	r.umask = umask(0);
	umask(r.umask);
	r.euid = geteuid();
	r.egid = getegid();
	r.tty = isatty(STDERR_FILENO) && r.oa.verbosity >= UB_LOG_WARN;
	r.target = malloc(65536);
	if (!r.target) {
		fprintf(stderr, "ubtrfs: error: out of memory\n");
		r.rc = EXIT_FATAL;
		goto out;
	}
	if (report && !(r.report = fopen(report, "we"))) {
		fprintf(stderr, "ubtrfs: error: --report %s: %s\n", report, strerror(errno));
		r.rc = EXIT_FATAL;
		goto out;
	}
	if (open_outdir(&r, outdir)) {
		r.rc = EXIT_FATAL;
		goto out;
	}
	root.fd = r.rootfd;
	root.plain = rs_plain_dir(&r, root.fd);
	r.devs = argv + optind;
	r.ndevs = argc - optind - 1;
	{
		struct ub_fs_opts opts = open_args_fs_opts(&r.oa);
		struct ub_log log = { .verbosity = r.oa.verbosity, .errors = &r.oa.errors };

		/* the walk reads each leaf about once, in key order: a small cache keeps it fast */
		opts.cache_bytes = RESTORE_CACHE;
		if (r.tty) {
			opts.rescue_progress = rs_progress_chunks;
			opts.rescue_arg = &r;
		}
		if (open_fs_with(&r.oa, r.devs, r.ndevs, &opts, &log, &r.fs)) {
			r.rc = EXIT_FATAL;
			goto out;
		}
	}
	if (!r.dry_run && rs_copy_start(&r)) {
		fprintf(stderr, "ubtrfs: error: out of memory\n");
		r.rc = EXIT_FATAL;
		goto out;
	}
	{
		struct ub_volume_info vi;
		struct ub_root rt;

		r.generation = ub_fs_tree_root(r.fs, BTRFS_ROOT_TREE_OBJECTID, &rt) == 0 ? rt.generation : UINT64_MAX;
		r.fs_gen = r.generation;
		r.last_commit = ub_volume_get_info(ub_fs_volume(r.fs), &vi) == 0 ? vi.generation : 0;
	}
	if (rs_older_init(&r) || rs_recover_init(&r)) {
		fprintf(stderr, "ubtrfs: error: out of memory\n");
		r.rc = EXIT_FATAL;
		goto out;
	}
	r.defer_open = true;
	if (path) {
		restore_path(&r, &root, path);
		r.defer_open = false;
	} else {
		uint64_t subvol, ino;

		ret = ub_path_lookup(r.fs, "/", &subvol, &ino);
		if (!ret)
			ret = rmap_add(&r.entered, subvol, ino, "", NULL) < 0 ? -ENOMEM : 0;
		if (ret) {
			fprintf(stderr, "ubtrfs: error: the top-level directory: %s\n", strerror(-ret));
			r.rc = EXIT_FATAL;
		} else {
			/* an older state asked for by name is what the user wants, not the newest the leaves give */
			r.defer_stale = r.scavenge && !r.use_regex && !r.dry_run && !r.oa.generation && !r.oa.root_bytenr;
			walk_dir(&r, &root, subvol, ino);
			r.defer_stale = false;
			/* every directory the walk made is finished before the scavenging adds to any */
			r.defer_open = false;
			rs_copy_drain(&r);
			/* what no name reached: only a whole-filesystem restore can tell */
			if (r.scavenge && !r.use_regex)
				rs_scavenge(&r, &root);
		}
	}
	rs_copy_finish(&r);
	rs_progress(&r, true);
	if (r.oa.verbosity >= UB_LOG_WARN && !r.dry_run)
		fprintf(stderr, "restored %llu directories, %llu files (%llu bytes), %llu symlinks, %llu hard links, "
			"%llu special files; %llu problems\n", (unsigned long long)r.ndirs,
			(unsigned long long)r.nfiles, (unsigned long long)r.bytes, (unsigned long long)r.nsymlinks,
			(unsigned long long)r.nhardlinks, (unsigned long long)r.nspecial,
			(unsigned long long)r.nproblems);
	if (r.oa.verbosity >= UB_LOG_WARN && !r.dry_run && (r.nprivdev || r.nsetid || r.ncaps))
		fprintf(stderr, r.no_privileged ? "privileged files (--no-privileged): %llu device nodes left out, %llu "
						  "set-id files made without their set-id bits, %llu file capabilities "
						  "dropped\n"
						: "privileged files, made as on the disk: %llu device nodes, %llu set-id "
						  "files, %llu files with capabilities (--no-privileged leaves them out)\n",
			(unsigned long long)r.nprivdev, (unsigned long long)r.nsetid, (unsigned long long)r.ncaps);
	if (r.oa.verbosity >= UB_LOG_WARN && !r.dry_run && (r.nscavenged || r.ndeleted || r.nplaced))
		fprintf(stderr, "scavenged: %llu inodes no name leads to, under lost+found; %llu deleted inodes %s; "
			"%llu inodes no tree has, at their names from the scanned leaves\n",
			(unsigned long long)r.nscavenged, (unsigned long long)r.ndeleted,
			r.deleted ? "found" : "left deleted", (unsigned long long)r.nplaced);
	if (r.oa.verbosity >= UB_LOG_WARN && !r.dry_run && r.deleted)
		fprintf(stderr, "undeleted: %llu files under deleted (%llu as an older root has them, %llu from the "
			"items of leaves the scan found)\n", (unsigned long long)(r.nundeleted + r.nundeleted_loose),
			(unsigned long long)r.nundeleted, (unsigned long long)r.nundeleted_loose);
	if (r.oa.verbosity >= UB_LOG_WARN && !r.dry_run)
		fprintf(stderr, "files: %llu complete, %llu partial, %llu lost; data: %llu bytes recovered, %llu lost\n",
			(unsigned long long)r.files_complete, (unsigned long long)r.files_partial,
			(unsigned long long)r.files_lost, (unsigned long long)(r.bytes - r.bytes_zeroed),
			(unsigned long long)r.bytes_lost);
out:
	rs_copy_finish(&r);
	if (r.nproblems && r.rc == EXIT_OK)
		r.rc = EXIT_PROBLEMS;
	if (fflush(stdout) && r.rc == EXIT_OK)
		r.rc = EXIT_FATAL;
	rs_stale_free(&r);
	ub_recover_free(r.recover);
	rs_older_close(&r);
	ub_fs_close(r.fs);
	if (r.rootfd >= 0)
		close(r.rootfd);
	if (r.use_regex)
		regfree(&r.regex);
	if (r.report && fclose(r.report) && r.rc == EXIT_OK) {
		fprintf(stderr, "ubtrfs: error: --report %s: %s\n", report, strerror(errno));
		r.rc = EXIT_FATAL;
	}
	rmap_free(&r.links);
	rmap_free(&r.reached);
	rmap_free(&r.entered);
	free(r.target);
	pthread_mutex_destroy(&r.lock);
	return final_rc(&r.oa, r.rc);
}
