/* SPDX-License-Identifier: MIT */
/* ubtrfs ls: list directories straight from the trees, crossing into subvolumes. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include "cmd.h"

static const char help[] =
	"usage: ubtrfs ls [OPTIONS] DEV...\n\n"
	"List a directory of the filesystem on DEV... without mounting it.\n\n"
	"      --path P       the directory (or file) to list, default /\n"
	"  -l                 long format: mode, links, owner, group, size, mtime, name\n"
	"  -R, --recursive    list every directory below, crossing into subvolumes and snapshots\n"
	"      --json         one JSON object per entry (path, name, subvol, ino, type, mode, size,\n"
	"                     nlink, uid, gid, rdev_major, rdev_minor, atime, mtime, ctime, target, xattrs)\n"
	"  -h, --help         this text\n"
	OPEN_ARGS_HELP
	"\nExit codes: 0 listed, 1 some entries could not be read, 2 usage or fatal error.\n";

enum fmt { FMT_NAMES, FMT_LONG, FMT_JSON };

struct lister {
	struct ub_fs *fs;
	enum fmt fmt;
	bool recursive;
	int rc;
	/* ancestors of the directory being listed, to refuse loops on a corrupt filesystem */
	struct { uint64_t subvol, ino; } *stack;
	int depth;
};

struct entry {
	char *name;
	uint32_t name_len;
	uint64_t subvol, ino;
};

struct entries {
	struct entry *v;
	size_t n, cap;
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

static void json_str(FILE *f, const char *s, size_t len)
{
	fputc('"', f);
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20 || c == 0x7f)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

static int xattr_json(void *arg, const struct ub_xattr *xa)
{
	int *first = arg;

	if (!*first)
		printf(", ");
	*first = 0;
	json_str(stdout, xa->name, xa->name_len);
	printf(": \"");
	for (uint32_t i = 0; i < xa->value_len; i++)
		printf("%02x", xa->value[i]);
	printf("\"");
	return 0;
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
	bool is_link = S_ISLNK(in->mode);

	if (is_link && ub_readlink(l->fs, in->subvol, in->ino, target, sizeof(target), &tlen)) {
		l->rc = EXIT_PROBLEMS;
		target[0] = 0;
		tlen = 0;
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
		if (is_link)
			printf(" -> %.*s", (int)tlen, target);
		printf("\n");
	} else {
		int first = 1;
		printf("{\"path\": ");
		json_str(stdout, path, strlen(path));
		printf(", \"name\": ");
		json_str(stdout, name, name_len);
		printf(", \"subvol\": %llu, \"ino\": %llu, \"type\": \"%s\", \"mode\": %u, \"size\": %llu, "
		       "\"nlink\": %llu, \"uid\": %u, \"gid\": %u, \"rdev_major\": %llu, \"rdev_minor\": %llu, "
		       "\"atime\": [%lld, %u], \"mtime\": [%lld, %u], \"ctime\": [%lld, %u]",
		       (unsigned long long)in->subvol, (unsigned long long)in->ino, type_name(in->mode), in->mode,
		       (unsigned long long)in->size, (unsigned long long)in->nlink, in->uid, in->gid,
		       (unsigned long long)(in->rdev >> 20), (unsigned long long)(in->rdev & 0xfffff),
		       (long long)in->atime.sec, in->atime.nsec, (long long)in->mtime.sec, in->mtime.nsec,
		       (long long)in->ctime.sec, in->ctime.nsec);
		if (is_link) {
			printf(", \"target\": ");
			json_str(stdout, target, tlen);
		}
		printf(", \"xattrs\": {");
		if (ub_xattr_iterate(l->fs, in->subvol, in->ino, xattr_json, &first) < 0)
			l->rc = EXIT_PROBLEMS;
		printf("}}\n");
	}
}

static int collect(void *arg, const struct ub_dirent *de)
{
	struct entries *es = arg;
	struct entry *e;

	if (es->n == es->cap) {
		size_t cap = es->cap ? es->cap * 2 : 64;
		struct entry *v = realloc(es->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		es->v = v;
		es->cap = cap;
	}
	e = &es->v[es->n];
	e->name = malloc(de->name_len + 1);
	if (!e->name)
		return -ENOMEM;
	memcpy(e->name, de->name, de->name_len);
	e->name[de->name_len] = 0;
	e->name_len = de->name_len;
	e->subvol = de->subvol;
	e->ino = de->ino;
	es->n++;
	return 0;
}

static bool on_stack(const struct lister *l, uint64_t subvol, uint64_t ino)
{
	for (int i = 0; i < l->depth; i++)
		if (l->stack[i].subvol == subvol && l->stack[i].ino == ino)
			return true;
	return false;
}

static void list_dir(struct lister *l, const char *path, uint64_t subvol, uint64_t ino)
{
	struct entries es = { NULL, 0, 0 };
	int ret;

	if (l->depth >= 4096 || on_stack(l, subvol, ino)) {
		fprintf(stderr, "ubtrfs: error: %s: directory loop (subvol %llu ino %llu); not entered\n", path,
			(unsigned long long)subvol, (unsigned long long)ino);
		l->rc = EXIT_PROBLEMS;
		return;
	}
	l->stack[l->depth].subvol = subvol;
	l->stack[l->depth].ino = ino;
	l->depth++;
	ret = ub_dir_iterate(l->fs, subvol, ino, collect, &es);
	if (ret) {
		fprintf(stderr, "ubtrfs: error: %s: cannot read the directory fully: %s\n", path, strerror(-ret));
		l->rc = EXIT_PROBLEMS;
	}
	for (size_t i = 0; i < es.n; i++) {
		struct entry *e = &es.v[i];
		struct ub_inode in;
		size_t plen = strlen(path);
		char *child = malloc(plen + e->name_len + 2);

		if (!child) {
			l->rc = EXIT_FATAL;
			break;
		}
		snprintf(child, plen + e->name_len + 2, "%s%s%s", path, (plen && path[plen - 1] == '/') ? "" : "/",
			 e->name);
		ret = ub_inode_read(l->fs, e->subvol, e->ino, &in);
		if (ret) {
			fprintf(stderr, "ubtrfs: error: %s: cannot read inode %llu of subvol %llu: %s\n", child,
				(unsigned long long)e->ino, (unsigned long long)e->subvol, strerror(-ret));
			l->rc = EXIT_PROBLEMS;
		} else {
			print_entry(l, child, e->name, e->name_len, &in);
			if (l->recursive && S_ISDIR(in.mode))
				list_dir(l, child, e->subvol, e->ino);
		}
		free(child);
	}
	for (size_t i = 0; i < es.n; i++)
		free(es.v[i].name);
	free(es.v);
	l->depth--;
}

int cmd_ls(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "path", required_argument, NULL, 'p' }, { "recursive", no_argument, NULL, 'R' },
		{ "json", no_argument, NULL, 0x300 }, { "help", no_argument, NULL, 'h' },
		OPEN_ARGS_LONGOPTS, { NULL, 0, NULL, 0 },
	};
	struct lister l = { NULL, FMT_NAMES, false, EXIT_OK, NULL, 0 };
	struct open_args oa;
	const char *path = "/";
	uint64_t subvol, ino;
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
	if (open_fs(&oa, argv + optind, argc - optind, &l.fs))
		return EXIT_FATAL;
	l.stack = malloc(sizeof(*l.stack) * 4097);
	if (!l.stack) {
		l.rc = EXIT_FATAL;
		goto out;
	}
	ret = ub_path_lookup(l.fs, path, &subvol, &ino);
	if (!ret)
		ret = ub_inode_read(l.fs, subvol, ino, &in);
	if (ret) {
		fprintf(stderr, "ubtrfs: error: %s: %s\n", path, strerror(-ret));
		l.rc = EXIT_FATAL;
		goto out;
	}
	if (S_ISDIR(in.mode)) {
		list_dir(&l, path, subvol, ino);
	} else {
		const char *slash = strrchr(path, '/');
		const char *name = slash ? slash + 1 : path;
		print_entry(&l, path, name, strlen(name), &in);
	}
out:
	fflush(stdout);
	free(l.stack);
	ub_fs_close(l.fs);
	return final_rc(&oa, l.rc);
}
