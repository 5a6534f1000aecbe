/* SPDX-License-Identifier: MIT */
/* ubtrfs ls: list directories straight from the trees, crossing into subvolumes. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include "cmd.h"
#include "dirlist.h"
#include "json.h"

static const char help[] =
	"usage: ubtrfs ls [OPTIONS] DEV...\n\n"
	"List a directory of the filesystem on DEV... without mounting it.\n\n"
	"      --path P       the directory (or file) to list, default /\n"
	"  -l                 long format: mode, links, owner, group, size, mtime, name\n"
	"  -R, --recursive    list every directory below, crossing into subvolumes and snapshots\n"
	"                     (names only read no file's inode, as find on the kernel; -l and --json do)\n"
	"      --json         one JSON object per entry (path, name, subvol, ino, type, mode, size,\n"
	"                     nlink, uid, gid, rdev_major, rdev_minor, atime, mtime, ctime, target, xattrs);\n"
	"                     strings that are not UTF-8 also come as bytes in hex: path_hex, name_hex...\n"
	"  -h, --help         this text\n"
	OPEN_ARGS_HELP
	"\nExit codes: 0 listed, 1 some entries could not be read or are corrupt, 2 usage or fatal error.\n";

/*
 * A listing passes each leaf once, and the upper levels it comes back through
 * stay cached before any leaf: a small budget serves it as well as a large one,
 * and memory a process first touches costs a page fault per page. 1 MiB (768
 * KiB of blocks): the cache stops growing after 48 blocks of 16 KiB and its
 * freed buffers are reused; with 8 MiB a names-only `ls -R` of 40,000 inline
 * files took 1,870 page faults, with 1 MiB 400 (bench/read.d/15-ls-inline).
 */
#define LS_CACHE (1ULL << 20)

enum fmt { FMT_NAMES, FMT_LONG, FMT_JSON };

struct dirid {
	uint64_t subvol, ino;
};

struct lister {
	struct ub_fs *fs;
	enum fmt fmt;
	bool recursive;
	int rc;
	/* ancestors of the directory being listed, to refuse loops on a corrupt filesystem */
	struct dirid *stack;
	int depth;
	/* every directory entered (open addressing, ino 0 = free): each is listed once */
	struct dirid *visited;
	size_t nvisited, vcap;
};

static const char *type_name(uint32_t mode)
{
	switch (mode & S_IFMT) {
	case S_IFREG: return "file";
	case S_IFDIR: return "dir";
	case S_IFLNK: return "symlink";
	case S_IFCHR: return "chr";
	case S_IFBLK: return "blk";
	case S_IFIFO: return "fifo";
	case S_IFSOCK: return "sock";
	default: return "unknown";
	}
}

struct xattr_out {
	bool want_utf8; /* the "xattrs" pass, or the "xattrs_hex" pass */
	bool first;
	unsigned skipped;
};

static int xattr_json(void *arg, const struct ub_xattr *xa)
{
	struct xattr_out *xo = arg;

	if (is_utf8(xa->name, xa->name_len) != xo->want_utf8) {
		xo->skipped++;
		return 0;
	}
	if (!xo->first)
		printf(", ");
	xo->first = false;
	if (xo->want_utf8)
		json_str(stdout, xa->name, xa->name_len);
	else
		json_hex(stdout, xa->name, xa->name_len);
	printf(": ");
	json_hex(stdout, xa->value, xa->value_len);
	return 0;
}

/* "ubtrfs: error: PATH: ..." with PATH (names from the disk) escaped as check escapes them: one error, one line. */
static void ls_error(const char *path, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void ls_error(const char *path, const char *fmt, ...)
{
	char *shown = name_shown(path, strlen(path));
	va_list ap;

	fprintf(stderr, "ubtrfs: error: %s: ", shown ? shown : "(out of memory)");
	free(shown);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static void mode_string(uint32_t mode, char out[11])
{
	static const char types[] = "?pc?d?b?-?l?s???";
	const char *rwx = "rwxrwxrwx";

	out[0] = types[(mode >> 12) & 15];
	for (int i = 0; i < 9; i++)
		out[1 + i] = (mode & (1u << (8 - i))) ? rwx[i] : '-';
	if (mode & S_ISUID)
		out[3] = (mode & S_IXUSR) ? 's' : 'S';
	if (mode & S_ISGID)
		out[6] = (mode & S_IXGRP) ? 's' : 'S';
	if (mode & S_ISVTX)
		out[9] = (mode & S_IXOTH) ? 't' : 'T';
	out[10] = 0;
}

static void print_entry(struct lister *l, const char *path, const char *name, size_t name_len,
			const struct ub_inode *in)
{
	char target[4096 + 1];
	size_t tlen = 0;
	bool is_link = S_ISLNK(in->mode), target_ok = true;
	int ret;

	if (is_link) {
		ret = ub_readlink(l->fs, in->subvol, in->ino, target, sizeof(target), &tlen);
		if (ret) {
			ls_error(path, "cannot read the target of symlink ino %llu of subvol %llu: %s",
				 (unsigned long long)in->ino, (unsigned long long)in->subvol, strerror(-ret));
			l->rc = EXIT_PROBLEMS;
			target[0] = 0;
			tlen = 0;
			target_ok = false;
		}
	}
	if (tlen >= sizeof(target))
		tlen = sizeof(target) - 1;
	if (l->fmt == FMT_NAMES) {
		printf("%s\n", l->recursive ? path : name);
	} else if (l->fmt == FMT_LONG) {
		char ms[11], tbuf[32];
		time_t t = (time_t)in->mtime.sec;
		struct tm tm;
		mode_string(in->mode, ms);
		if (gmtime_r(&t, &tm))
			strftime(tbuf, sizeof(tbuf), "%Y-%m-%d %H:%M", &tm);
		else
			snprintf(tbuf, sizeof(tbuf), "?");
		printf("%s %3llu %5u %5u %10llu %s %s", ms, (unsigned long long)in->nlink, in->uid, in->gid,
		       (unsigned long long)in->size, tbuf, l->recursive ? path : name);
		/* an unreadable target is not an empty one: say it is unknown */
		if (is_link && target_ok)
			printf(" -> %.*s", (int)tlen, target);
		else if (is_link)
			printf(" -> ?");
		printf("\n");
	} else {
		struct xattr_out xo = { true, true, 0 };
		printf("{\"path\": ");
		if (!json_str(stdout, path, strlen(path))) {
			printf(", \"path_hex\": ");
			json_hex(stdout, path, strlen(path));
		}
		json_field(stdout, "name", name, name_len);
		printf(", \"subvol\": %llu, \"ino\": %llu, \"type\": \"%s\", \"mode\": %u, \"size\": %llu, "
		       "\"nlink\": %llu, \"uid\": %u, \"gid\": %u, \"rdev_major\": %llu, \"rdev_minor\": %llu, "
		       "\"atime\": [%lld, %u], \"mtime\": [%lld, %u], \"ctime\": [%lld, %u]",
		       (unsigned long long)in->subvol, (unsigned long long)in->ino, type_name(in->mode), in->mode,
		       (unsigned long long)in->size, (unsigned long long)in->nlink, in->uid, in->gid,
		       (unsigned long long)(in->rdev >> 20), (unsigned long long)(in->rdev & 0xfffff),
		       (long long)in->atime.sec, in->atime.nsec, (long long)in->mtime.sec, in->mtime.nsec,
		       (long long)in->ctime.sec, in->ctime.nsec);
		if (is_link && target_ok)
			json_field(stdout, "target", target, tlen);
		else if (is_link)
			printf(", \"target\": null");
		printf(", \"xattrs\": {");
		ret = in->no_xattrs ? 0 : ub_xattr_iterate(l->fs, in->subvol, in->ino, xattr_json, &xo);
		printf("}");
		if (ret >= 0 && xo.skipped) {
			xo = (struct xattr_out){ false, true, 0 };
			printf(", \"xattrs_hex\": {");
			ret = ub_xattr_iterate(l->fs, in->subvol, in->ino, xattr_json, &xo);
			printf("}");
		}
		printf("}\n");
		if (ret < 0) {
			ls_error(path, "cannot read the xattrs of ino %llu of subvol %llu: %s", (unsigned long long)in->ino,
				 (unsigned long long)in->subvol, strerror(-ret));
			l->rc = EXIT_PROBLEMS;
		}
	}
}

static bool on_stack(const struct lister *l, uint64_t subvol, uint64_t ino)
{
	for (int i = 0; i < l->depth; i++)
		if (l->stack[i].subvol == subvol && l->stack[i].ino == ino)
			return true;
	return false;
}

static uint64_t mix(uint64_t subvol, uint64_t ino)
{
	uint64_t h = subvol * 0x9e3779b97f4a7c15ULL ^ ino;

	h ^= h >> 31;
	h *= 0xbf58476d1ce4e5b9ULL;
	return h ^ (h >> 29);
}

/* Remember a directory as entered; false if it already was. */
static int visit(struct lister *l, uint64_t subvol, uint64_t ino)
{
	size_t i;

	if (2 * (l->nvisited + 1) > l->vcap) {
		size_t cap = l->vcap ? l->vcap * 2 : 1024;
		struct dirid *v = calloc(cap, sizeof(*v));
		if (!v)
			return -ENOMEM;
		for (size_t j = 0; j < l->vcap; j++) {
			if (!l->visited[j].ino)
				continue;
			for (i = mix(l->visited[j].subvol, l->visited[j].ino) & (cap - 1); v[i].ino; i = (i + 1) & (cap - 1))
				;
			v[i] = l->visited[j];
		}
		free(l->visited);
		l->visited = v;
		l->vcap = cap;
	}
	for (i = mix(subvol, ino) & (l->vcap - 1); l->visited[i].ino; i = (i + 1) & (l->vcap - 1))
		if (l->visited[i].subvol == subvol && l->visited[i].ino == ino)
			return 0;
	l->visited[i].subvol = subvol;
	l->visited[i].ino = ino;
	l->nvisited++;
	return 1;
}

/*
 * May the walk show (and enter) the directory entry `e` leads to? Only through
 * its real name: another entry naming a directory is corruption, and entering
 * through it would list the directory again (exponentially often, or forever).
 */
static bool real_dir_name(struct lister *l, const char *child, const struct entry *e)
{
	int ret = ub_dir_entry_is_link(l->fs, &e->de);

	if (ret == 1)
		return true;
	l->rc = EXIT_PROBLEMS;
	if (ret == 0) {
		ls_error(child, "entry %llu of dir %llu (subvol %llu) names directory ino %llu of subvol %llu, whose "
			 "back reference gives it another name; a second name for a directory is corruption: not "
			 "listed", (unsigned long long)e->de.index, (unsigned long long)e->de.dir_ino,
			 (unsigned long long)e->de.dir_subvol, (unsigned long long)e->de.ino,
			 (unsigned long long)e->de.subvol);
		return false;
	}
	if (ret == -ENOENT)
		ls_error(child, "directory ino %llu of subvol %llu has no back reference (INODE_REF)",
			 (unsigned long long)e->de.ino, (unsigned long long)e->de.subvol);
	else
		ls_error(child, "cannot check the back reference of directory ino %llu of subvol %llu: %s",
			 (unsigned long long)e->de.ino, (unsigned long long)e->de.subvol, strerror(-ret));
	/* with the back reference gone, the first name found stands in for it */
	return true;
}

/* A type that names neither a directory nor nothing: the entry alone says what a names-only listing needs. */
static bool names_only_type(uint8_t type)
{
	return type >= BTRFS_FT_REG_FILE && type <= BTRFS_FT_SYMLINK && type != BTRFS_FT_DIR;
}

static void list_dir(struct lister *l, const char *path, uint64_t subvol, uint64_t ino)
{
	struct entries es = { 0 };
	int ret;

	if (l->depth >= 4096 || on_stack(l, subvol, ino)) {
		ls_error(path, "directory loop (subvol %llu ino %llu); not entered", (unsigned long long)subvol,
			 (unsigned long long)ino);
		l->rc = EXIT_PROBLEMS;
		return;
	}
	/* every stand-in for a subvolume a snapshot left behind is inode 2 and empty: nothing to enter */
	if (ino == BTRFS_EMPTY_SUBVOL_DIR_OBJECTID)
		return;
	ret = visit(l, subvol, ino);
	if (ret <= 0) {
		if (ret == 0)
			ls_error(path, "directory ino %llu of subvol %llu was already listed under another name; "
				 "not entered again", (unsigned long long)ino, (unsigned long long)subvol);
		else
			ls_error(path, "out of memory");
		l->rc = ret == 0 ? EXIT_PROBLEMS : EXIT_FATAL;
		return;
	}
	l->stack[l->depth].subvol = subvol;
	l->stack[l->depth].ino = ino;
	l->depth++;
	ret = ub_dir_iterate(l->fs, subvol, ino, entries_add, &es);
	if (ret) {
		ls_error(path, "cannot read the directory (subvol %llu ino %llu) fully: %s", (unsigned long long)subvol,
			 (unsigned long long)ino, strerror(-ret));
		l->rc = ret == -ENOMEM ? EXIT_FATAL : EXIT_PROBLEMS;
	}
	for (size_t i = 0; i < es.n; i++) {
		struct entry *e = &es.v[i];
		struct ub_inode in;
		size_t plen = strlen(path);
		bool slash = !(plen && path[plen - 1] == '/');
		char *child;

		/*
		 * A names-only listing takes a non-directory's type from its entry, as
		 * readdir does for find and ls on the kernel: it never reads that inode.
		 * Directories are read, to enter them and to check their one real name.
		 * Its line is written as it is, without a path built for it (most lines
		 * of a large listing are these).
		 */
		if (l->fmt == FMT_NAMES && names_only_type(e->de.type)) {
			if (l->recursive) {
				fputs_unlocked(path, stdout);
				if (slash)
					putchar_unlocked('/');
			}
			fputs_unlocked(e->name, stdout);
			putchar_unlocked('\n');
			continue;
		}
		child = malloc(plen + e->de.name_len + 2);
		if (!child) {
			ls_error(path, "out of memory");
			l->rc = EXIT_FATAL;
			break;
		}
		snprintf(child, plen + e->de.name_len + 2, "%s%s%s", path, slash ? "/" : "", e->name);
		ret = ub_dirent_inode(l->fs, &e->de, &in);
		if (ret) {
			ls_error(child, "cannot read inode %llu of subvol %llu: %s", (unsigned long long)e->de.ino,
				 (unsigned long long)e->de.subvol, strerror(-ret));
			l->rc = EXIT_PROBLEMS;
		} else if (!S_ISDIR(in.mode) || real_dir_name(l, child, e)) {
			print_entry(l, child, e->name, e->de.name_len, &in);
			if (l->recursive && S_ISDIR(in.mode))
				list_dir(l, child, e->de.subvol, e->de.ino);
		}
		free(child);
	}
	entries_free(&es);
	l->depth--;
}

int cmd_ls(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "path", required_argument, NULL, 'p' }, { "recursive", no_argument, NULL, 'R' },
		{ "json", no_argument, NULL, 0x300 }, { "help", no_argument, NULL, 'h' },
		OPEN_ARGS_LONGOPTS, { NULL, 0, NULL, 0 },
	};
	struct lister l = { NULL, FMT_NAMES, false, EXIT_OK, NULL, 0, NULL, 0, 0 };
	struct open_args oa;
	const char *path = "/";
	struct ub_inode in;
	int opt, r, ret;

	open_args_init(&oa);
	while ((opt = getopt_long(argc, argv, "lRhvq", longopts, NULL)) != -1) {
		if ((r = open_args_parse(&oa, opt, optarg)) != 0) {
			if (r < 0)
				return usage_error("ls", "invalid value '%s'", optarg);
			continue;
		}
		switch (opt) {
		case 'p': path = optarg; break;
		case 'l': if (l.fmt != FMT_JSON) l.fmt = FMT_LONG; break;
		case 'R': l.recursive = true; break;
		case 0x300: l.fmt = FMT_JSON; break;
		case 'h': fputs(help, stdout); return EXIT_OK;
		default: return usage_error("ls", "invalid option");
		}
	}
	if (optind >= argc)
		return usage_error("ls", "no device given");
	{
		struct ub_fs_opts opts = open_args_fs_opts(&oa);
		struct ub_log log = { .fn = NULL, .arg = NULL, .verbosity = oa.verbosity, .errors = &oa.errors };
		opts.cache_bytes = LS_CACHE;
		if (open_fs_with(&oa, argv + optind, argc - optind, &opts, &log, &l.fs))
			return EXIT_FATAL;
	}
	l.stack = malloc(sizeof(*l.stack) * 4097);
	if (!l.stack) {
		fprintf(stderr, "ubtrfs: error: out of memory\n");
		l.rc = EXIT_FATAL;
		goto out;
	}
	ret = ub_path_lookup_inode(l.fs, path, &in);
	if (ret) {
		ls_error(path, "%s", strerror(-ret));
		l.rc = EXIT_FATAL;
		goto out;
	}
	if (S_ISDIR(in.mode)) {
		list_dir(&l, path, in.subvol, in.ino);
	} else {
		const char *slash = strrchr(path, '/');
		const char *name = slash ? slash + 1 : path;
		print_entry(&l, path, name, strlen(name), &in);
	}
out:
	fflush(stdout);
	free(l.stack);
	free(l.visited);
	ub_fs_close(l.fs);
	return final_rc(&oa, l.rc);
}
