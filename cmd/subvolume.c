/* SPDX-License-Identifier: MIT */
/*
 * ubtrfs subvolume create|snapshot|delete|list|show|get-default|set-default:
 * btrfs-progs' `btrfs subvolume`, with its options and output, on a mounted
 * btrfs (the kernel's or ubtrfs's: through btrfs's ioctls) or on devices
 * nothing has mounted (paths inside the filesystem as --path options, changes
 * through the write engine, each committed). fs_target.c hides which.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <uuid/uuid.h>
#include "cmd.h"
#include "fs_target.h"
#include "json.h"

#define SUBVOL_HELP_COMMON                                                                       \
	"Where: PATH is a path on a mounted btrfs (the kernel's or a ubtrfs mount); without it the\n" \
	"devices DEV... of a filesystem nothing has mounted, and the path inside it is --path.\n"

static const char help[] =
	"usage: ubtrfs subvolume COMMAND ...\n\n"
	"  create [-p] PATH...            create subvolumes (offline: --path P DEV...)\n"
	"  snapshot [-r] SRC DEST         snapshot subvolume SRC as DEST, or DEST/name(SRC) if DEST\n"
	"                                 is a directory (offline: --path SRC --dest DEST DEV...)\n"
	"  delete [-c|-C] PATH...         delete subvolumes (offline: --path P DEV...)\n"
	"  delete --subvolid ID PATH      delete subvolume ID (offline: --subvolid ID DEV...)\n"
	"  list [OPTIONS] PATH            list the subvolumes (offline: [--path P] DEV...)\n"
	"  show [-r ID|-u UUID] PATH      show one subvolume (offline: --path P, -r or -u, DEV...)\n"
	"  get-default PATH               the default subvolume (offline: DEV...)\n"
	"  set-default ID PATH            set the default subvolume (offline: ID DEV...)\n"
	"  set-default PATH               the subvolume PATH is in becomes the default\n"
	"                                 (offline: --path P DEV...)\n\n"
	SUBVOL_HELP_COMMON
	"'ubtrfs subvolume COMMAND --help' describes each.\n"
	"Exit codes: 0 done, 1 the filesystem refused (the reason is said), 2 usage or fatal error.\n";

/* ---- the subvolumes of a filesystem, as btrfs-progs' list collects them ---- */

struct sv {
	uint64_t id, gen, ogen, flags, parent, dirid, root_offset, ctransid, stransid, rtransid, refs;
	uint8_t uuid[16], puuid[16], ruuid[16];
	struct ub_timespec ctime, otime, stime, rtime;
	char name[256];
	char *path;      /* directory path in the parent subvolume + name */
	char *full;      /* resolved for printing */
	bool has_item, has_ref, deleted;
};

struct svlist {
	struct sv *v;
	size_t n, cap;
};

static struct sv *sv_get(struct svlist *l, uint64_t id)
{
	for (size_t i = 0; i < l->n; i++)
		if (l->v[i].id == id)
			return &l->v[i];
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 16;
		struct sv *v = realloc(l->v, cap * sizeof(*v));

		if (!v)
			return NULL;
		l->v = v;
		l->cap = cap;
	}
	memset(&l->v[l->n], 0, sizeof(l->v[0]));
	l->v[l->n].id = id;
	return &l->v[l->n++];
}

static struct sv *sv_find(struct svlist *l, uint64_t id)
{
	for (size_t i = 0; i < l->n; i++)
		if (l->v[i].id == id)
			return &l->v[i];
	return NULL;
}

static void svlist_free(struct svlist *l)
{
	for (size_t i = 0; i < l->n; i++) {
		free(l->v[i].path);
		free(l->v[i].full);
	}
	free(l->v);
	l->v = NULL;
	l->n = l->cap = 0;
}

static void read_ts(struct ub_timespec *ts, const uint8_t *p)
{
	ts->sec = (int64_t)UB_GET(btrfs_timespec, sec, p);
	ts->nsec = (uint32_t)UB_GET(btrfs_timespec, nsec, p);
}

static void root_item_fill(struct sv *s, uint64_t offset, const uint8_t *d, uint32_t len)
{
	s->has_item = true;
	s->root_offset = offset;
	s->gen = UB_GET(btrfs_root_item, generation, d);
	s->flags = UB_GET(btrfs_root_item, flags, d);
	s->refs = UB_GET(btrfs_root_item, refs, d);
	/* an item from before the v2 fields (a short one) has no uuids nor times */
	if (len >= sizeof(struct btrfs_root_item)) {
		memcpy(s->uuid, UB_PTR(btrfs_root_item, uuid, d), 16);
		memcpy(s->puuid, UB_PTR(btrfs_root_item, parent_uuid, d), 16);
		memcpy(s->ruuid, UB_PTR(btrfs_root_item, received_uuid, d), 16);
		s->ctransid = UB_GET(btrfs_root_item, ctransid, d);
		s->ogen = UB_GET(btrfs_root_item, otransid, d);
		s->stransid = UB_GET(btrfs_root_item, stransid, d);
		s->rtransid = UB_GET(btrfs_root_item, rtransid, d);
		read_ts(&s->ctime, UB_PTR(btrfs_root_item, ctime, d));
		read_ts(&s->otime, UB_PTR(btrfs_root_item, otime, d));
		read_ts(&s->stime, UB_PTR(btrfs_root_item, stime, d));
		read_ts(&s->rtime, UB_PTR(btrfs_root_item, rtime, d));
	}
}

static int collect_item(void *arg, const struct ub_key *key, uint64_t transid, const uint8_t *d, uint32_t len)
{
	struct svlist *l = arg;
	struct sv *s;

	(void)transid;
	if (key->type == BTRFS_ROOT_ITEM_KEY) {
		if (len < offsetof(struct btrfs_root_item, generation_v2))
			return -EUCLEAN;
		s = sv_get(l, key->objectid);
		if (!s)
			return -ENOMEM;
		root_item_fill(s, key->offset, d, len);
	} else if (key->type == BTRFS_ROOT_BACKREF_KEY) {
		uint32_t nlen;

		if (len < sizeof(struct btrfs_root_ref))
			return -EUCLEAN;
		nlen = (uint32_t)UB_GET(btrfs_root_ref, name_len, d);
		if (nlen == 0 || nlen > UB_NAME_LEN || sizeof(struct btrfs_root_ref) + nlen > len)
			return -EUCLEAN;
		s = sv_get(l, key->objectid);
		if (!s)
			return -ENOMEM;
		if (s->has_ref)
			return 0; /* btrfs has one; the first stands */
		s->has_ref = true;
		s->parent = key->offset;
		s->dirid = UB_GET(btrfs_root_ref, dirid, d);
		memcpy(s->name, d + sizeof(struct btrfs_root_ref), nlen);
		s->name[nlen] = '\0';
	}
	return 0;
}

/* Every subvolume (the top level too, id 5) with its name and its path inside its parent. */
static int collect(struct target *t, struct svlist *l)
{
	struct ub_search_key sk = { .tree = BTRFS_ROOT_TREE_OBJECTID,
				    .min = { BTRFS_FS_TREE_OBJECTID, BTRFS_ROOT_ITEM_KEY, 0 },
				    .max = { BTRFS_FS_TREE_OBJECTID, BTRFS_ROOT_ITEM_KEY, UINT64_MAX },
				    .max_transid = UINT64_MAX };
	int ret = target_search(t, &sk, collect_item, l);

	if (!ret) {
		sk.min = (struct ub_key){ BTRFS_FIRST_FREE_OBJECTID, BTRFS_ROOT_ITEM_KEY, 0 };
		sk.max = (struct ub_key){ BTRFS_LAST_FREE_OBJECTID, BTRFS_ROOT_BACKREF_KEY, UINT64_MAX };
		ret = target_search(t, &sk, collect_item, l);
	}
	if (ret == -EUCLEAN)
		fprintf(stderr, "ERROR: the root tree holds an invalid root item or root back reference\n");
	else if (ret)
		fprintf(stderr, "ERROR: cannot search the root tree: %s\n", strerror(-ret));
	for (size_t i = 0; !ret && i < l->n; i++) {
		struct sv *s = &l->v[i];
		char dir[BTRFS_INO_LOOKUP_PATH_MAX];

		if (!s->has_ref)
			continue;
		ret = target_ino_lookup(t, s->parent, s->dirid, dir, sizeof(dir));
		if (ret) {
			fprintf(stderr, "ERROR: cannot find the path of directory %llu of subvolume %llu (where "
				"subvolume %llu is): %s\n", (unsigned long long)s->dirid, (unsigned long long)s->parent,
				(unsigned long long)s->id, strerror(-ret));
			break;
		}
		if (asprintf(&s->path, "%s%s", dir, s->name) < 0) {
			s->path = NULL;
			ret = -ENOMEM;
		}
	}
	return ret;
}

/*
 * The path of s as btrfs-progs' resolve_root makes it: parent by parent up to
 * `top` (the subvolume the command was pointed at) or the top level. -ENOENT
 * when a link is missing (a deleted subvolume, or one inside it).
 */
static int resolve(struct svlist *l, struct sv *s, uint64_t top, char **out)
{
	char *full = NULL, *tmp;
	struct sv *f = s;

	for (size_t depth = 0;; depth++) {
		/* parents that lead round in a circle (a damaged root tree) name nothing */
		if (!f->has_ref || !f->path || depth > l->n) {
			free(full);
			return -ENOENT;
		}
		if (full) {
			if (asprintf(&tmp, "%s/%s", f->path, full) < 0) {
				free(full);
				return -ENOMEM;
			}
			free(full);
			full = tmp;
		} else if (!(full = strdup(f->path))) {
			return -ENOMEM;
		}
		if (f->parent == top || f->parent == BTRFS_FS_TREE_OBJECTID)
			break;
		f = sv_find(l, f->parent);
		if (!f || f == s) {
			free(full);
			return -ENOENT;
		}
	}
	*out = full;
	return 0;
}

/* ---- list ---- */

enum { COL_ID, COL_GEN, COL_CGEN, COL_PARENT, COL_TOP, COL_OTIME, COL_PUUID, COL_RUUID, COL_UUID, COL_PATH, NCOL };
static const char *const col_name[NCOL] = { "ID", "gen", "cgen", "parent", "top level", "otime", "parent_uuid",
					    "received_uuid", "uuid", "path" };

enum { SORT_ROOTID, SORT_GEN, SORT_OGEN, SORT_PATH };
struct sort_key {
	int what;
	bool desc;
};

struct list_opts {
	bool col[NCOL];
	bool table, json, all, only_below, snapshots, readonly, deleted;
	int gen_cmp, ogen_cmp; /* -G/-C: -1 at most, 0 equal, 1 at least; 2 unset */
	uint64_t gen_val, ogen_val;
	struct sort_key sort[8];
	int nsort;
};

static void fmt_uuid(const uint8_t *u, char out[37])
{
	static const uint8_t zero[16];

	if (!memcmp(u, zero, 16))
		strcpy(out, "-");
	else
		ub_uuid_str(u, out);
}

static void fmt_otime(const struct ub_timespec *ts, char *out, size_t len)
{
	struct tm tm;
	time_t t = (time_t)ts->sec;

	if (ts->sec && localtime_r(&t, &tm))
		strftime(out, len, "%Y-%m-%d %X", &tm);
	else
		snprintf(out, len, "-");
}

static void print_col(const struct sv *s, int c)
{
	char buf[64];

	switch (c) {
	case COL_ID: printf("%llu", (unsigned long long)s->id); break;
	case COL_GEN: printf("%llu", (unsigned long long)s->gen); break;
	case COL_CGEN: printf("%llu", (unsigned long long)s->ogen); break;
	case COL_PARENT: printf("%llu", (unsigned long long)s->parent); break;
	case COL_TOP: printf("%llu", (unsigned long long)s->parent); break;
	case COL_OTIME: fmt_otime(&s->otime, buf, sizeof(buf)); printf("%s", buf); break;
	case COL_PUUID: fmt_uuid(s->puuid, buf); printf("%-36s", buf); break;
	case COL_RUUID: fmt_uuid(s->ruuid, buf); printf("%-36s", buf); break;
	case COL_UUID: fmt_uuid(s->uuid, buf); printf("%-36s", buf); break;
	case COL_PATH: printf("%s", s->full ? s->full : ""); break;
	}
}

static void print_line(const struct sv *s, const bool *col)
{
	for (int c = 0; c < NCOL; c++) {
		if (!col[c])
			continue;
		printf("%s ", col_name[c]);
		print_col(s, c);
		if (c != COL_PATH)
			printf(" ");
	}
	printf("\n");
}

static void print_table_head(const bool *col)
{
	for (int c = 0; c < NCOL; c++)
		if (col[c])
			printf("%s\t", col_name[c]);
	printf("\n");
	for (int c = 0; c < NCOL; c++)
		if (col[c]) {
			for (size_t i = strlen(col_name[c]); i > 0; i--)
				putchar('-');
			printf("\t");
		}
	printf("\n");
}

static void print_table_row(const struct sv *s, const bool *col)
{
	for (int c = 0; c < NCOL; c++) {
		if (!col[c])
			continue;
		print_col(s, c);
		if (c != COL_PATH)
			printf("\t");
		if (c == COL_TOP)
			printf("\t");
	}
	printf("\n");
}

static void json_ts(const char *key, const struct ub_timespec *ts)
{
	printf(", \"%s\": %lld.%09u", key, (long long)ts->sec, ts->nsec);
}

#define JSON_UUID(u) strcmp(u, "-") ? "\"" : "", strcmp(u, "-") ? u : "null", strcmp(u, "-") ? "\"" : ""

static void print_json(const struct sv *s, bool first)
{
	char u[37], pu[37], ru[37];

	/* JSON says "none" as null, not as btrfs-progs' "-" */
	fmt_uuid(s->uuid, u);
	fmt_uuid(s->puuid, pu);
	fmt_uuid(s->ruuid, ru);
	printf("%s{\"id\": %llu, \"gen\": %llu, \"cgen\": %llu, \"parent\": %llu, \"top_level\": %llu, \"path\": ",
	       first ? "" : ",\n ", (unsigned long long)s->id, (unsigned long long)s->gen, (unsigned long long)s->ogen,
	       (unsigned long long)s->parent, (unsigned long long)s->parent);
	json_str(stdout, s->full ? s->full : "", s->full ? strlen(s->full) : 0);
	printf(", \"name\": ");
	json_str(stdout, s->name, strlen(s->name));
	printf(", \"uuid\": %s%s%s, \"parent_uuid\": %s%s%s, \"received_uuid\": %s%s%s, \"readonly\": %s, "
	       "\"snapshot\": %s, \"deleted\": %s, \"ctransid\": %llu, \"stransid\": %llu, \"rtransid\": %llu",
	       JSON_UUID(u), JSON_UUID(pu), JSON_UUID(ru), s->flags & BTRFS_ROOT_SUBVOL_RDONLY ? "true" : "false", s->root_offset ? "true" : "false",
	       s->deleted ? "true" : "false", (unsigned long long)s->ctransid, (unsigned long long)s->stransid,
	       (unsigned long long)s->rtransid);
	json_ts("otime", &s->otime);
	json_ts("ctime", &s->ctime);
	json_ts("stime", &s->stime);
	json_ts("rtime", &s->rtime);
	printf("}");
}

static int cmp_u64(uint64_t a, uint64_t b, bool desc)
{
	int r = a < b ? -1 : a > b;

	return desc ? -r : r;
}

static int sv_cmp(const void *pa, const void *pb, void *arg)
{
	const struct sv *a = *(const struct sv *const *)pa, *b = *(const struct sv *const *)pb;
	const struct list_opts *sort_opts = arg;
	bool rootid_done = false;
	int r = 0;

	for (int i = 0; i < sort_opts->nsort; i++) {
		const struct sort_key *k = &sort_opts->sort[i];

		switch (k->what) {
		case SORT_ROOTID: r = cmp_u64(a->id, b->id, k->desc); rootid_done = true; break;
		case SORT_GEN: r = cmp_u64(a->gen, b->gen, k->desc); break;
		case SORT_OGEN: r = cmp_u64(a->ogen, b->ogen, k->desc); break;
		case SORT_PATH:
			r = strcmp(a->full ? a->full : "", b->full ? b->full : "");
			r = k->desc ? -r : r;
			break;
		}
		if (r)
			return r;
	}
	return rootid_done ? 0 : cmp_u64(a->id, b->id, false);
}

static int parse_sort(struct list_opts *o, const char *arg)
{
	char *copy = strdup(arg), *save = NULL, *tok;
	int ret = 0;

	if (!copy)
		return -ENOMEM;
	for (tok = strtok_r(copy, ",", &save); tok && !ret; tok = strtok_r(NULL, ",", &save)) {
		struct sort_key k = { 0, false };

		if (*tok == '+' || *tok == '-') {
			k.desc = *tok == '-';
			tok++;
		}
		if (!strcmp(tok, "rootid"))
			k.what = SORT_ROOTID;
		else if (!strcmp(tok, "gen"))
			k.what = SORT_GEN;
		else if (!strcmp(tok, "ogen"))
			k.what = SORT_OGEN;
		else if (!strcmp(tok, "path"))
			k.what = SORT_PATH;
		else
			ret = -EINVAL;
		if (!ret && o->nsort < (int)(sizeof(o->sort) / sizeof(o->sort[0])))
			o->sort[o->nsort++] = k;
	}
	free(copy);
	return ret;
}

static int parse_gen_filter(const char *arg, int *cmp, uint64_t *val)
{
	*cmp = *arg == '+' ? 1 : *arg == '-' ? -1 : 0;
	return parse_u64(*arg == '+' || *arg == '-' ? arg + 1 : arg, val);
}

static bool gen_ok(int cmp, uint64_t want, uint64_t have)
{
	return cmp == 2 || (cmp == 0 && have == want) || (cmp > 0 && have >= want) || (cmp < 0 && have <= want);
}

/*
 * Print the subvolumes of l as btrfs-progs' list does from a descriptor in
 * subvolume `top`: relative paths (to top) by default, from the top level
 * with -a (marked <FS_TREE>/ when not directly under top) and -o (only those
 * directly under top).
 */
static int list_print(struct svlist *l, const struct list_opts *o, uint64_t top, uint64_t only_id)
{
	struct sv **sel = calloc(l->n + 1, sizeof(*sel));
	size_t n = 0;
	bool relative = !o->all && !o->only_below;

	if (!sel)
		return -ENOMEM;
	for (size_t i = 0; i < l->n; i++) {
		struct sv *s = &l->v[i];
		int r;

		if (s->id < BTRFS_FIRST_FREE_OBJECTID || !s->has_item)
			continue;
		free(s->full);
		s->full = NULL;
		r = resolve(l, s, relative ? top : 0, &s->full);
		if (r == -ENOMEM) {
			free(sel);
			return r;
		}
		s->deleted = r != 0;
		if (s->deleted && !(s->full = strdup("DELETED"))) {
			free(sel);
			return -ENOMEM;
		}
		if (only_id && s->id != only_id)
			continue;
		if (o->deleted != s->deleted)
			continue;
		if (o->only_below && s->parent != top)
			continue;
		if (o->snapshots && !s->root_offset)
			continue;
		if (o->readonly && !(s->flags & BTRFS_ROOT_SUBVOL_RDONLY))
			continue;
		if (!gen_ok(o->gen_cmp, o->gen_val, s->gen) || !gen_ok(o->ogen_cmp, o->ogen_val, s->ogen))
			continue;
		if (o->all && s->parent != top && !s->deleted) {
			char *tmp;

			if (asprintf(&tmp, "<FS_TREE>/%s", s->full) < 0) {
				free(sel);
				return -ENOMEM;
			}
			free(s->full);
			s->full = tmp;
		}
		sel[n++] = s;
	}
	qsort_r(sel, n, sizeof(*sel), sv_cmp, (void *)o);
	if (o->json) {
		printf("[");
		for (size_t i = 0; i < n; i++)
			print_json(sel[i], i == 0);
		printf("]\n");
	} else {
		if (o->table)
			print_table_head(o->col);
		for (size_t i = 0; i < n; i++) {
			if (o->table)
				print_table_row(sel[i], o->col);
			else
				print_line(sel[i], o->col);
		}
	}
	free(sel);
	return 0;
}

/* ---- opening what the command works on ---- */

/*
 * A mounted path (the one positional argument is a directory and no --path
 * was given), or the devices. Returns EXIT_OK or the exit code to leave with.
 */
static int open_target(struct target *t, struct open_args *oa, char **args, int n, bool write, const char *path,
		       const char *what)
{
	int ret;

	if (!path && target_args_mounted(args, n))
		return target_open_path(t, args[0], what) ? EXIT_FATAL : EXIT_OK;
	if (n >= 1 && !path && n == 1) {
		struct stat st;

		if (stat(args[0], &st) == 0 && S_ISDIR(st.st_mode)) {
			fprintf(stderr, "ubtrfs %s: %s is a directory, not a device\n", what, args[0]);
			return EXIT_FATAL;
		}
	}
	ret = target_open_devs(t, oa, args, n, write);
	if (ret)
		return EXIT_FATAL;
	if (path) {
		ret = target_set_path(t, path);
		if (ret) {
			fprintf(stderr, "ERROR: cannot access '%s': %s\n", path, strerror(-ret));
			target_close(t);
			return EXIT_FATAL;
		}
	}
	return EXIT_OK;
}

#define SUBVOL_LONGOPTS_COMMON \
	{ "help", no_argument, NULL, 0x1ff }, { "path", required_argument, NULL, 0x1fe }, OPEN_ARGS_LONGOPTS

/* getopt's shared options; 1 handled, 0 not one of them, -1 bad value */
static int common_opt(struct open_args *oa, int opt, const char *arg, const char **path)
{
	int r = open_args_parse(oa, opt, arg);

	if (r)
		return r;
	if (opt == 0x1fe) {
		*path = arg;
		return 1;
	}
	return 0;
}

/* ---- list ---- */

static const char list_help[] =
	"usage: ubtrfs subvolume list [OPTIONS] PATH\n"
	"       ubtrfs subvolume list [OPTIONS] [--path P] DEV...\n\n"
	"List the subvolumes of the filesystem, as btrfs subvolume list does; paths are relative to\n"
	"the subvolume PATH (or P) is in, unless -a or -o.\n\n"
	"  -o                 only the subvolumes directly below PATH's subvolume (paths from the top)\n"
	"  -a                 all, paths from the top level, <FS_TREE>/ marking those not directly\n"
	"                     below PATH's subvolume\n"
	"  -p -c -g -u -q -R  add the parent id, the generation at creation, the generation, the\n"
	"                     uuid, the parent uuid, the received uuid\n"
	"  -s                 only snapshots (with cgen and otime)\n"
	"  -r                 only read-only subvolumes\n"
	"  -d                 only deleted subvolumes that are not cleaned yet\n"
	"  -t                 a table\n"
	"  -G [+|-]VALUE      generation at least / at most / exactly VALUE\n"
	"  -C [+|-]VALUE      generation at creation at least / at most / exactly VALUE\n"
	"  --sort=[+|-]rootid,gen,ogen,path   order (default: by id)\n"
	"      --json         one JSON array, every field of every subvolume\n"
	"      --path P       offline: the path inside the filesystem the listing is relative to\n"
	OPEN_ARGS_HELP;

static int cmd_list(int argc, char **argv)
{
	static const struct option longopts[] = { { "sort", required_argument, NULL, 0x1f0 },
						  { "json", no_argument, NULL, 0x1f1 },
						  SUBVOL_LONGOPTS_COMMON, { NULL, 0, NULL, 0 } };
	struct list_opts o = { .gen_cmp = 2, .ogen_cmp = 2 };
	struct open_args oa;
	struct target t;
	struct svlist l = { 0 };
	const char *path = NULL;
	uint64_t top;
	bool is_top;
	int opt, r, ret;

	open_args_init(&oa);
	optind = 1;
	while ((opt = getopt_long(argc, argv, "acdgopqrstuRG:C:vh", longopts, NULL)) != -1) {
		/* -q is the parent uuid here, as in btrfs-progs, not --quiet */
		if (opt != 'q' && (r = common_opt(&oa, opt, optarg, &path)) != 0) {
			if (r < 0)
				return usage_error("subvolume list", "invalid value '%s'", optarg);
			continue;
		}
		switch (opt) {
		case 'a': o.all = true; break;
		case 'c': o.col[COL_CGEN] = true; break;
		case 'd': o.deleted = true; break;
		case 'g': o.col[COL_GEN] = true; break;
		case 'o': o.only_below = true; break;
		case 'p': o.col[COL_PARENT] = true; break;
		case 'q': o.col[COL_PUUID] = true; break;
		case 'R': o.col[COL_RUUID] = true; break;
		case 'u': o.col[COL_UUID] = true; break;
		case 'r': o.readonly = true; break;
		case 's': o.snapshots = true; o.col[COL_CGEN] = o.col[COL_OTIME] = true; break;
		case 't': o.table = true; break;
		case 'G':
			if (parse_gen_filter(optarg, &o.gen_cmp, &o.gen_val))
				return usage_error("subvolume list", "invalid value for -G: '%s'", optarg);
			o.col[COL_GEN] = true;
			break;
		case 'C':
			if (parse_gen_filter(optarg, &o.ogen_cmp, &o.ogen_val))
				return usage_error("subvolume list", "invalid value for -C: '%s'", optarg);
			o.col[COL_CGEN] = true;
			break;
		case 0x1f0:
			if (parse_sort(&o, optarg))
				return usage_error("subvolume list", "invalid sort key '%s' (rootid, gen, ogen, path)",
						   optarg);
			break;
		case 0x1f1: o.json = true; break;
		case 'h': case 0x1ff: fputs(list_help, stdout); return EXIT_OK;
		default: return usage_error("subvolume list", "invalid option");
		}
	}
	if (optind >= argc)
		return usage_error("subvolume list", "expected PATH, or DEV...");
	o.col[COL_ID] = o.col[COL_GEN] = o.col[COL_TOP] = o.col[COL_PATH] = true;
	/* quota-less: -q is the parent uuid, as btrfs-progs */
	ret = open_target(&t, &oa, argv + optind, argc - optind, false, path, "subvolume list");
	if (ret)
		return ret;
	ret = target_subvol_of(&t, &top, &is_top);
	if (ret)
		fprintf(stderr, "ERROR: cannot find the subvolume of '%s': %s\n", t.online ? t.path : path,
			strerror(-ret));
	if (!ret)
		ret = collect(&t, &l);
	if (!ret)
		ret = list_print(&l, &o, top, 0);
	svlist_free(&l);
	target_close(&t);
	return ret ? EXIT_PROBLEMS : t.online ? EXIT_OK : final_rc(&oa, EXIT_OK);
}

/* ---- show ---- */

static const char show_help[] =
	"usage: ubtrfs subvolume show [-r ID|-u UUID] [--json] PATH\n"
	"       ubtrfs subvolume show [--path P|-r ID|-u UUID] [--json] DEV...\n\n"
	"Show the subvolume PATH (or P) is the top of, or the one of id ID or uuid UUID, with its\n"
	"snapshots, as btrfs subvolume show does.\n"
	OPEN_ARGS_HELP;

static void fmt_time_z(const struct ub_timespec *ts, char *out, size_t len)
{
	struct tm tm;
	time_t t = (time_t)ts->sec;

	if (ts->sec && localtime_r(&t, &tm))
		strftime(out, len, "%Y-%m-%d %H:%M:%S %z", &tm);
	else
		snprintf(out, len, "-");
}

static int by_parent_id(const void *pa, const void *pb)
{
	const struct sv *a = *(const struct sv *const *)pa, *b = *(const struct sv *const *)pb;

	if (a->parent != b->parent)
		return a->parent < b->parent ? -1 : 1;
	return a->id < b->id ? -1 : a->id > b->id;
}

/* Append the subvolumes below `parent` (sorted[] by parent, then id) in pre-order. */
static void dfs_from(struct sv **sorted, size_t n, uint64_t parent, struct sv **out, size_t *nout, int depth)
{
	size_t lo = 0, hi = n;

	if (depth > 4096)
		return; /* a loop of parents (corruption): the rest is left out */
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (sorted[mid]->parent < parent)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (size_t i = lo; i < n && sorted[i]->parent == parent; i++) {
		out[(*nout)++] = sorted[i];
		if (sorted[i]->id != parent)
			dfs_from(sorted, n, sorted[i]->id, out, nout, depth + 1);
	}
}

/* pre-order from the top level, children by id: the order btrfs-progs' subvolume iterator gives */
static struct sv **dfs_order(struct svlist *l, size_t *n)
{
	/* each subvolume has one parent: it is met at most once */
	struct sv **sorted = calloc(l->n + 1, sizeof(*sorted)), **out = calloc(l->n + 1, sizeof(*out));
	size_t ns = 0;

	*n = 0;
	if (!sorted || !out) {
		free(sorted);
		free(out);
		return NULL;
	}
	for (size_t i = 0; i < l->n; i++)
		if (l->v[i].has_ref && l->v[i].id >= BTRFS_FIRST_FREE_OBJECTID)
			sorted[ns++] = &l->v[i];
	qsort(sorted, ns, sizeof(*sorted), by_parent_id);
	dfs_from(sorted, ns, BTRFS_FS_TREE_OBJECTID, out, n, 0);
	free(sorted);
	return out;
}

static int show_one(struct svlist *l, struct sv *s, bool json)
{
	static const uint8_t zero[16];
	char u[37], pu[37], ru[37], tbuf[64];
	struct sv **order;
	size_t n = 0;
	bool first = true;

	free(s->full);
	s->full = NULL;
	if (s->id == BTRFS_FS_TREE_OBJECTID) {
		s->full = strdup("/");
		strcpy(s->name, "<FS_TREE>");
	} else if (resolve(l, s, 0, &s->full)) {
		fprintf(stderr, "ERROR: subvolume %llu has no name (deleted)\n", (unsigned long long)s->id);
		return -ENOENT;
	}
	if (!s->full)
		return -ENOMEM;
	order = dfs_order(l, &n);
	if (!order)
		return -ENOMEM;
	fmt_uuid(s->uuid, u);
	fmt_uuid(s->puuid, pu);
	fmt_uuid(s->ruuid, ru);
	if (json) {
		printf("{\"subvolume\": ");
		print_json(s, true);
		printf(", \"snapshots\": [");
	} else {
		printf("%s\n", s->full);
		printf("\tName: \t\t\t%s\n", s->name);
		printf("\tUUID: \t\t\t%s\n", u);
		printf("\tParent UUID: \t\t%s\n", pu);
		printf("\tReceived UUID: \t\t%s\n", ru);
		fmt_time_z(&s->otime, tbuf, sizeof(tbuf));
		printf("\tCreation time: \t\t%s\n", tbuf);
		printf("\tSubvolume ID: \t\t%llu\n", (unsigned long long)s->id);
		printf("\tGeneration: \t\t%llu\n", (unsigned long long)s->gen);
		printf("\tGen at creation: \t%llu\n", (unsigned long long)s->ogen);
		printf("\tParent ID: \t\t%llu\n", (unsigned long long)s->parent);
		printf("\tTop level ID: \t\t%llu\n", (unsigned long long)s->parent);
		printf("\tFlags: \t\t\t%s\n", s->flags & BTRFS_ROOT_SUBVOL_RDONLY ? "readonly" : "-");
		printf("\tSend transid: \t\t%llu\n", (unsigned long long)s->stransid);
		/* btrfs-progs 6.2 prints the creation time here, whatever the send time is */
		fmt_time_z(&s->otime, tbuf, sizeof(tbuf));
		printf("\tSend time: \t\t%s\n", tbuf);
		printf("\tReceive transid: \t%llu\n", (unsigned long long)s->rtransid);
		fmt_time_z(&s->rtime, tbuf, sizeof(tbuf));
		printf("\tReceive time: \t\t%s\n", tbuf);
		printf("\tSnapshot(s):\n");
	}
	for (size_t i = 0; i < n; i++) {
		struct sv *c = order[i];
		char *p = NULL;

		if (!memcmp(s->uuid, zero, 16) || memcmp(c->puuid, s->uuid, 16) || c == s)
			continue;
		if (resolve(l, c, 0, &p))
			continue;
		if (json) {
			printf("%s", first ? "" : ", ");
			json_str(stdout, p, strlen(p));
		} else {
			printf("\t\t\t\t%s\n", p);
		}
		first = false;
		free(p);
	}
	if (json)
		printf("]}\n");
	free(order);
	return 0;
}

static int cmd_show(int argc, char **argv)
{
	static const struct option longopts[] = { { "rootid", required_argument, NULL, 'r' },
						  { "uuid", required_argument, NULL, 'u' },
						  { "json", no_argument, NULL, 0x1f1 },
						  SUBVOL_LONGOPTS_COMMON, { NULL, 0, NULL, 0 } };
	struct open_args oa;
	struct target t;
	struct svlist l = { 0 };
	const char *path = NULL, *uuid_arg = NULL;
	uint64_t want = 0, id;
	uint8_t uuid[16];
	bool is_top, json = false, by_id = false;
	struct sv *s = NULL;
	int opt, r, ret;

	open_args_init(&oa);
	optind = 1;
	while ((opt = getopt_long(argc, argv, "r:u:vqh", longopts, NULL)) != -1) {
		if ((r = common_opt(&oa, opt, optarg, &path)) != 0) {
			if (r < 0)
				return usage_error("subvolume show", "invalid value '%s'", optarg);
			continue;
		}
		switch (opt) {
		case 'r':
			if (parse_u64(optarg, &want))
				return usage_error("subvolume show", "invalid subvolume id '%s'", optarg);
			by_id = true;
			break;
		case 'u':
			if (uuid_parse(optarg, uuid))
				return usage_error("subvolume show", "invalid uuid '%s'", optarg);
			uuid_arg = optarg;
			break;
		case 0x1f1: json = true; break;
		case 'h': case 0x1ff: fputs(show_help, stdout); return EXIT_OK;
		default: return usage_error("subvolume show", "invalid option");
		}
	}
	if (optind >= argc)
		return usage_error("subvolume show", "expected PATH, or DEV...");
	if (by_id && uuid_arg)
		return usage_error("subvolume show", "-r and -u name one subvolume each: give one");
	ret = open_target(&t, &oa, argv + optind, argc - optind, false, path, "subvolume show");
	if (ret)
		return ret;
	ret = target_subvol_of(&t, &id, &is_top);
	if (!ret && !by_id && !uuid_arg && !is_top) {
		fprintf(stderr, "ERROR: Not a Btrfs subvolume: %s\n", t.online ? t.path : path ? path : "/");
		ret = -EINVAL;
	}
	if (!ret)
		ret = collect(&t, &l);
	if (!ret) {
		for (size_t i = 0; i < l.n && !s; i++) {
			struct sv *c = &l.v[i];

			if (!c->has_item)
				continue;
			if (uuid_arg ? !memcmp(c->uuid, uuid, 16) : c->id == (by_id ? want : id))
				s = c;
		}
		if (!s) {
			if (uuid_arg)
				fprintf(stderr, "ERROR: can't find uuid '%s' on '%s'\n", uuid_arg, t.online ? t.path : argv[optind]);
			else
				fprintf(stderr, "ERROR: can't find subvolume id %llu\n", (unsigned long long)(by_id ? want : id));
			ret = -ENOENT;
		}
	}
	if (!ret)
		ret = show_one(&l, s, json);
	svlist_free(&l);
	target_close(&t);
	return ret ? EXIT_PROBLEMS : t.online ? EXIT_OK : final_rc(&oa, EXIT_OK);
}

/* ---- get-default / set-default ---- */

static int default_item(void *arg, const struct ub_key *key, uint64_t transid, const uint8_t *d, uint32_t len)
{
	uint64_t *id = arg;
	uint32_t at = 0;

	(void)key;
	(void)transid;
	while (at + sizeof(struct btrfs_dir_item) <= len) {
		uint32_t nl = (uint32_t)UB_GET(btrfs_dir_item, name_len, d + at);
		uint32_t dl = (uint32_t)UB_GET(btrfs_dir_item, data_len, d + at);
		struct ub_key loc;

		if (at + sizeof(struct btrfs_dir_item) + nl + dl > len)
			return -EUCLEAN;
		if (nl == 7 && !memcmp(d + at + sizeof(struct btrfs_dir_item), "default", 7)) {
			ub_key_read(&loc, UB_PTR(btrfs_dir_item, location, d + at));
			*id = loc.objectid;
			return 1;
		}
		at += (uint32_t)sizeof(struct btrfs_dir_item) + nl + dl;
	}
	return 0;
}

/* The default subvolume as btrfs-progs finds it: the "default" entry of the root tree's directory. */
static int find_default(struct target *t, uint64_t *id)
{
	struct ub_search_key sk = { .tree = BTRFS_ROOT_TREE_OBJECTID,
				    .min = { BTRFS_ROOT_TREE_DIR_OBJECTID, BTRFS_DIR_ITEM_KEY, 0 },
				    .max = { BTRFS_ROOT_TREE_DIR_OBJECTID, BTRFS_DIR_ITEM_KEY, UINT64_MAX },
				    .max_transid = UINT64_MAX };
	int ret;

	*id = 0;
	ret = target_search(t, &sk, default_item, id);
	if (ret < 0)
		return ret;
	return *id ? 0 : -ENOENT;
}

static const char get_default_help[] =
	"usage: ubtrfs subvolume get-default PATH\n"
	"       ubtrfs subvolume get-default DEV...\n\n"
	"The default subvolume (the one a mount without subvol= shows).\n"
	"      --json         as JSON\n"
	OPEN_ARGS_HELP;

static int cmd_get_default(int argc, char **argv)
{
	static const struct option longopts[] = { { "json", no_argument, NULL, 0x1f1 }, SUBVOL_LONGOPTS_COMMON,
						  { NULL, 0, NULL, 0 } };
	struct list_opts o = { .gen_cmp = 2, .ogen_cmp = 2 };
	struct open_args oa;
	struct target t;
	struct svlist l = { 0 };
	const char *path = NULL;
	uint64_t def, top;
	bool is_top;
	int opt, r, ret;

	open_args_init(&oa);
	optind = 1;
	while ((opt = getopt_long(argc, argv, "vqh", longopts, NULL)) != -1) {
		if ((r = common_opt(&oa, opt, optarg, &path)) != 0) {
			if (r < 0)
				return usage_error("subvolume get-default", "invalid value '%s'", optarg);
			continue;
		}
		switch (opt) {
		case 0x1f1: o.json = true; break;
		case 'h': case 0x1ff: fputs(get_default_help, stdout); return EXIT_OK;
		default: return usage_error("subvolume get-default", "invalid option");
		}
	}
	if (optind >= argc)
		return usage_error("subvolume get-default", "expected PATH, or DEV...");
	ret = open_target(&t, &oa, argv + optind, argc - optind, false, path, "subvolume get-default");
	if (ret)
		return ret;
	ret = find_default(&t, &def);
	if (ret == -ENOENT) {
		fprintf(stderr, "ERROR: could not find the default subvolume: the root tree has no \"default\" entry\n");
	} else if (ret) {
		fprintf(stderr, "ERROR: cannot search the root tree: %s\n", strerror(-ret));
	} else if (def == BTRFS_FS_TREE_OBJECTID) {
		if (o.json)
			printf("[{\"id\": 5, \"path\": \"<FS_TREE>\"}]\n");
		else
			printf("ID 5 (FS_TREE)\n");
	} else {
		ret = target_subvol_of(&t, &top, &is_top);
		if (!ret)
			ret = collect(&t, &l);
		o.col[COL_ID] = o.col[COL_GEN] = o.col[COL_TOP] = o.col[COL_PATH] = true;
		if (!ret)
			ret = list_print(&l, &o, top, def);
		svlist_free(&l);
	}
	target_close(&t);
	return ret ? EXIT_PROBLEMS : t.online ? EXIT_OK : final_rc(&oa, EXIT_OK);
}

static const char set_default_help[] =
	"usage: ubtrfs subvolume set-default ID PATH\n"
	"       ubtrfs subvolume set-default PATH\n"
	"       ubtrfs subvolume set-default ID DEV...\n"
	"       ubtrfs subvolume set-default --path P DEV...\n\n"
	"Make subvolume ID (or the one PATH or P is in) the default: the one a mount without\n"
	"subvol= shows. Offline the change is committed before the command returns.\n"
	OPEN_ARGS_HELP;

static int cmd_set_default(int argc, char **argv)
{
	static const struct option longopts[] = { SUBVOL_LONGOPTS_COMMON, { NULL, 0, NULL, 0 } };
	struct open_args oa;
	struct target t;
	const char *path = NULL;
	uint64_t id = 0;
	bool have_id = false, is_top;
	char **args;
	int opt, r, ret, nargs;

	open_args_init(&oa);
	optind = 1;
	while ((opt = getopt_long(argc, argv, "vqh", longopts, NULL)) != -1) {
		if ((r = common_opt(&oa, opt, optarg, &path)) != 0) {
			if (r < 0)
				return usage_error("subvolume set-default", "invalid value '%s'", optarg);
			continue;
		}
		switch (opt) {
		case 'h': case 0x1ff: fputs(set_default_help, stdout); return EXIT_OK;
		default: return usage_error("subvolume set-default", "invalid option");
		}
	}
	args = argv + optind;
	nargs = argc - optind;
	/* ID first when there is more than one argument and it is a number */
	if (nargs >= 2 && !path && parse_u64(args[0], &id) == 0) {
		have_id = true;
		args++;
		nargs--;
	}
	if (nargs < 1)
		return usage_error("subvolume set-default", "expected ID PATH, PATH, or ID DEV...");
	if (!have_id && !path && !target_args_mounted(args, nargs))
		return usage_error("subvolume set-default", "give the subvolume: ID DEV..., or --path P DEV...");
	ret = open_target(&t, &oa, args, nargs, true, path, "subvolume set-default");
	if (ret)
		return ret;
	if (!have_id) {
		ret = target_subvol_of(&t, &id, &is_top);
		if (ret)
			fprintf(stderr, "ERROR: cannot find the subvolume of '%s': %s\n", t.online ? t.path : path,
				strerror(-ret));
	}
	if (!ret) {
		ret = target_set_default(&t, id);
		if (ret)
			fprintf(stderr, "ERROR: unable to set a new default subvolume: %s\n", strerror(-ret));
	}
	target_close(&t);
	return ret ? EXIT_PROBLEMS : t.online ? EXIT_OK : final_rc(&oa, EXIT_OK);
}

/* ---- create / snapshot / delete ---- */

static const char create_help[] =
	"usage: ubtrfs subvolume create PATH...\n"
	"       ubtrfs subvolume create --path P [--path P2...] DEV...\n\n"
	"Create a subvolume at each PATH (a new name in an existing directory). Offline each is\n"
	"committed before the command returns.\n"
	OPEN_ARGS_HELP;

/* the --path options of create and delete, several allowed */
struct paths {
	const char *v[64];
	int n;
};

static int cmd_create(int argc, char **argv)
{
	static const struct option longopts[] = { SUBVOL_LONGOPTS_COMMON, { NULL, 0, NULL, 0 } };
	struct open_args oa;
	struct target t;
	struct paths ps = { .n = 0 };
	const char *path = NULL;
	char **targets;
	int opt, r, ret, ntargets, rc = EXIT_OK;

	open_args_init(&oa);
	optind = 1;
	while ((opt = getopt_long(argc, argv, "i:vqh", longopts, NULL)) != -1) {
		if ((r = common_opt(&oa, opt, optarg, &path)) != 0) {
			if (r < 0)
				return usage_error("subvolume create", "invalid value '%s'", optarg);
			if (opt == 0x1fe) {
				if (ps.n == (int)(sizeof(ps.v) / sizeof(ps.v[0])))
					return usage_error("subvolume create", "too many --path options");
				ps.v[ps.n++] = optarg;
			}
			continue;
		}
		switch (opt) {
		case 'i':
			fprintf(stderr, "ERROR: quota groups are not supported (-i)\n");
			return EXIT_FATAL;
		case 'h': case 0x1ff: fputs(create_help, stdout); return EXIT_OK;
		default: return usage_error("subvolume create", "invalid option");
		}
	}
	if (optind >= argc)
		return usage_error("subvolume create", "expected PATH..., or --path P DEV...");
	if (ps.n) {
		ret = open_target(&t, &oa, argv + optind, argc - optind, true, NULL, "subvolume create");
		if (ret)
			return ret;
		if (t.online) {
			target_close(&t);
			return usage_error("subvolume create", "--path takes devices, not a mounted path");
		}
		targets = (char **)ps.v;
		ntargets = ps.n;
	} else {
		targets = argv + optind;
		ntargets = argc - optind;
		memset(&t, 0, sizeof(t));
		t.online = true;
		t.fd = -1;
	}
	for (int i = 0; i < ntargets; i++) {
		struct tloc loc;
		char *copy, *dir;

		if (!ps.n) {
			/* each PATH may be on another filesystem: its directory decides */
			copy = strdup(targets[i]);
			dir = copy ? dirname(copy) : NULL;
			ret = dir ? target_open_path(&t, dir, "subvolume create") : -ENOMEM;
			free(copy);
			if (ret) {
				rc = EXIT_PROBLEMS;
				continue;
			}
		}
		ret = target_parent_of(&t, targets[i], &loc);
		if (ret) {
			fprintf(stderr, "ERROR: cannot create subvolume '%s': %s\n", targets[i], strerror(-ret));
		} else {
			ret = target_subvol_create(&t, &loc);
			if (ret == -EEXIST)
				fprintf(stderr, "ERROR: target path already exists: %s\n", targets[i]);
			else if (ret)
				fprintf(stderr, "ERROR: cannot create subvolume: %s\n", strerror(-ret));
			else
				printf("Create subvolume '%s'\n", targets[i]);
			tloc_free(&loc);
		}
		if (ret)
			rc = EXIT_PROBLEMS;
		if (!ps.n)
			target_close(&t);
	}
	if (ps.n) {
		target_close(&t);
		rc = final_rc(&oa, rc);
	}
	return rc;
}

static const char snapshot_help[] =
	"usage: ubtrfs subvolume snapshot [-r] SOURCE DEST\n"
	"       ubtrfs subvolume snapshot [-r] --path SOURCE --dest DEST DEV...\n\n"
	"Snapshot subvolume SOURCE as DEST, or as DEST/<name of SOURCE> when DEST is a directory.\n"
	"It holds everything written to SOURCE before the command was called. Offline it is\n"
	"committed before the command returns.\n"
	"  -r                 a read-only snapshot\n"
	OPEN_ARGS_HELP;

static int cmd_snapshot(int argc, char **argv)
{
	static const struct option longopts[] = { { "dest", required_argument, NULL, 0x1f2 }, SUBVOL_LONGOPTS_COMMON,
						  { NULL, 0, NULL, 0 } };
	struct open_args oa;
	struct target t;
	struct tloc loc;
	const char *path = NULL, *dest = NULL, *src;
	char *fulldest = NULL;
	bool ro = false, online;
	int opt, r, ret;

	open_args_init(&oa);
	optind = 1;
	while ((opt = getopt_long(argc, argv, "ri:vqh", longopts, NULL)) != -1) {
		if ((r = common_opt(&oa, opt, optarg, &path)) != 0) {
			if (r < 0)
				return usage_error("subvolume snapshot", "invalid value '%s'", optarg);
			continue;
		}
		switch (opt) {
		case 'r': ro = true; break;
		case 'i':
			fprintf(stderr, "ERROR: quota groups are not supported (-i)\n");
			return EXIT_FATAL;
		case 0x1f2: dest = optarg; break;
		case 'h': case 0x1ff: fputs(snapshot_help, stdout); return EXIT_OK;
		default: return usage_error("subvolume snapshot", "invalid option");
		}
	}
	online = !path && !dest;
	if (online && argc - optind != 2)
		return usage_error("subvolume snapshot", "expected SOURCE DEST");
	if (!online && (!path || !dest || optind >= argc))
		return usage_error("subvolume snapshot", "offline: --path SOURCE --dest DEST DEV...");
	src = online ? argv[optind] : path;
	dest = online ? argv[optind + 1] : dest;
	if (online) {
		struct stat st;
		uint64_t id;
		bool is_top;

		/* the source must be a subvolume (its top directory) */
		ret = target_open_path(&t, src, "subvolume snapshot");
		if (ret)
			return EXIT_FATAL;
		ret = target_subvol_of(&t, &id, &is_top);
		target_close(&t);
		if (ret || !is_top) {
			fprintf(stderr, "ERROR: Not a Btrfs subvolume: %s\n", src);
			return EXIT_PROBLEMS;
		}
		if (stat(dest, &st) == 0 && S_ISDIR(st.st_mode)) {
			char *c = strdup(src), *b;
			size_t len = c ? strlen(c) : 0;

			while (len > 1 && c[len - 1] == '/')
				c[--len] = '\0';
			b = c ? basename(c) : NULL;
			if (!b || asprintf(&fulldest, "%s/%s", dest, b) < 0)
				fulldest = NULL;
			free(c);
			if (!fulldest)
				return EXIT_FATAL;
		}
		{
			char *c = strdup(fulldest ? fulldest : dest), *dir = c ? dirname(c) : NULL;

			ret = dir ? target_open_path(&t, dir, "subvolume snapshot") : -ENOMEM;
			free(c);
			if (ret) {
				free(fulldest);
				return EXIT_FATAL;
			}
		}
	} else {
		struct ub_inode in;
		uint64_t sv, ino;

		ret = open_target(&t, &oa, argv + optind, argc - optind, true, NULL, "subvolume snapshot");
		if (ret)
			return ret;
		if (t.online) {
			target_close(&t);
			return usage_error("subvolume snapshot", "--path and --dest take devices, not a mounted path");
		}
		if (ub_path_lookup(t.fs, dest, &sv, &ino) == 0 && ub_inode_read(t.fs, sv, ino, &in) == 0 &&
		    S_ISDIR(in.mode)) {
			char *c = strdup(src), *b;
			size_t len = c ? strlen(c) : 0;

			while (len > 1 && c[len - 1] == '/')
				c[--len] = '\0';
			b = c ? basename(c) : NULL;
			if (!b || asprintf(&fulldest, "%s/%s", strcmp(dest, "/") ? dest : "", b) < 0)
				fulldest = NULL;
			free(c);
			if (!fulldest) {
				target_close(&t);
				return EXIT_FATAL;
			}
		}
	}
	ret = target_parent_of(&t, fulldest ? fulldest : dest, &loc);
	if (ret) {
		fprintf(stderr, "ERROR: cannot snapshot '%s' as '%s': %s\n", src, fulldest ? fulldest : dest,
			strerror(-ret));
	} else {
		ret = target_snapshot(&t, src, &loc, ro);
		if (ret == -EEXIST)
			fprintf(stderr, "ERROR: '%s' exists\n", fulldest ? fulldest : dest);
		else if (ret == -EINVAL && !online)
			fprintf(stderr, "ERROR: Not a Btrfs subvolume: %s\n", src);
		else if (ret)
			fprintf(stderr, "ERROR: cannot snapshot '%s': %s\n", src, strerror(-ret));
		else
			printf("Create a%s snapshot of '%s' in '%s'\n", ro ? " readonly" : "", src,
			       fulldest ? fulldest : dest);
		tloc_free(&loc);
	}
	free(fulldest);
	target_close(&t);
	if (!online)
		return ret ? EXIT_PROBLEMS : final_rc(&oa, EXIT_OK);
	return ret ? EXIT_PROBLEMS : EXIT_OK;
}

static const char delete_help[] =
	"usage: ubtrfs subvolume delete [-c|-C] PATH...\n"
	"       ubtrfs subvolume delete [-c|-C] --subvolid ID PATH\n"
	"       ubtrfs subvolume delete --path P [--path P2...] DEV...\n"
	"       ubtrfs subvolume delete --subvolid ID DEV...\n\n"
	"Delete subvolumes: their names go at once, their blocks are freed in the background (the\n"
	"kernel's cleaner, a ubtrfs mount's commit thread; offline a few steps now, the rest at the\n"
	"next read-write open). The default subvolume cannot be deleted, nor one that holds others.\n"
	"  -c, --commit-after commit once at the end\n"
	"  -C, --commit-each  commit after each\n"
	"  -i, --subvolid ID  the subvolume of this id\n"
	OPEN_ARGS_HELP;

static int cmd_delete(int argc, char **argv)
{
	static const struct option longopts[] = { { "subvolid", required_argument, NULL, 'i' },
						  { "commit-after", no_argument, NULL, 'c' },
						  { "commit-each", no_argument, NULL, 'C' },
						  SUBVOL_LONGOPTS_COMMON, { NULL, 0, NULL, 0 } };
	struct open_args oa;
	struct target t;
	struct paths ps = { .n = 0 };
	const char *path = NULL;
	uint64_t id = 0;
	bool by_id = false, commit_after = false, commit_each = false;
	int opt, r, ret, rc = EXIT_OK;

	open_args_init(&oa);
	optind = 1;
	while ((opt = getopt_long(argc, argv, "cCi:vqh", longopts, NULL)) != -1) {
		if ((r = common_opt(&oa, opt, optarg, &path)) != 0) {
			if (r < 0)
				return usage_error("subvolume delete", "invalid value '%s'", optarg);
			if (opt == 0x1fe) {
				if (ps.n == (int)(sizeof(ps.v) / sizeof(ps.v[0])))
					return usage_error("subvolume delete", "too many --path options");
				ps.v[ps.n++] = optarg;
			}
			continue;
		}
		switch (opt) {
		case 'c': commit_after = true; break;
		case 'C': commit_each = true; break;
		case 'i':
			if (parse_u64(optarg, &id))
				return usage_error("subvolume delete", "invalid subvolume id '%s'", optarg);
			by_id = true;
			break;
		case 'h': case 0x1ff: fputs(delete_help, stdout); return EXIT_OK;
		default: return usage_error("subvolume delete", "invalid option");
		}
	}
	if (optind >= argc)
		return usage_error("subvolume delete", "expected PATH..., or --path P DEV..., or --subvolid ID");
	if (by_id && ps.n)
		return usage_error("subvolume delete", "--subvolid and --path name subvolumes each: give one");
	if (by_id || ps.n) {
		bool mounted = !ps.n && target_args_mounted(argv + optind, argc - optind);

		if (by_id && mounted) {
			ret = target_open_path(&t, argv[optind], "subvolume delete");
		} else {
			ret = open_target(&t, &oa, argv + optind, argc - optind, true, NULL, "subvolume delete");
			if (!ret && t.online) {
				target_close(&t);
				return usage_error("subvolume delete", "--path takes devices, not a mounted path");
			}
		}
		if (ret)
			return EXIT_FATAL;
		if (by_id) {
			const char *mode = commit_after || commit_each ? "commit" : "no-commit";

			ret = target_subvol_delete_id(&t, id);
			if (ret)
				fprintf(stderr, "ERROR: Could not destroy subvolume %llu: %s\n", (unsigned long long)id,
					ret == -ENOTEMPTY ? "Directory not empty" : strerror(-ret));
			else
				printf("Delete subvolume (%s): id %llu\n", mode, (unsigned long long)id);
			if (!ret && (commit_after || commit_each) && t.online)
				ret = target_sync(&t);
			rc = ret ? EXIT_PROBLEMS : EXIT_OK;
		} else {
			for (int i = 0; i < ps.n; i++) {
				struct tloc loc;

				ret = target_parent_of(&t, ps.v[i], &loc);
				if (!ret) {
					ret = target_subvol_delete(&t, &loc);
					tloc_free(&loc);
				}
				if (ret) {
					fprintf(stderr, "ERROR: Could not destroy subvolume/snapshot '%s': %s\n", ps.v[i],
						ret == -EINVAL ? "Not a Btrfs subvolume" : strerror(-ret));
					rc = EXIT_PROBLEMS;
				} else {
					printf("Delete subvolume (commit): '%s'\n", ps.v[i]);
				}
			}
		}
		target_close(&t);
		return t.online ? rc : final_rc(&oa, rc);
	}
	for (int i = optind; i < argc; i++) {
		struct tloc loc;
		char *copy = strdup(argv[i]), *dir = copy ? dirname(copy) : NULL;
		char *real = NULL;
		uint64_t sid;
		bool is_top;

		/* the subvolume itself first: it must be one */
		ret = target_open_path(&t, argv[i], "subvolume delete");
		if (!ret) {
			ret = target_subvol_of(&t, &sid, &is_top);
			if (!ret && !is_top)
				ret = -EINVAL;
			if (ret)
				fprintf(stderr, "ERROR: Not a Btrfs subvolume: %s\n", argv[i]);
			target_close(&t);
		}
		if (!ret)
			ret = dir ? target_open_path(&t, dir, "subvolume delete") : -ENOMEM;
		free(copy);
		if (ret) {
			rc = EXIT_PROBLEMS;
			continue;
		}
		ret = target_parent_of(&t, argv[i], &loc);
		if (!ret) {
			char *rp = realpath(argv[i], NULL);

			real = rp;
			ret = target_subvol_delete(&t, &loc);
			tloc_free(&loc);
		}
		if (ret) {
			fprintf(stderr, "ERROR: Could not destroy subvolume/snapshot: %s\n",
				ret == -EINVAL ? "Not a Btrfs subvolume" : strerror(-ret));
			rc = EXIT_PROBLEMS;
		} else {
			printf("Delete subvolume (%s): '%s'\n", commit_after || commit_each ? "commit" : "no-commit",
			       real ? real : argv[i]);
			if (commit_each || (commit_after && i == argc - 1))
				target_sync(&t);
		}
		free(real);
		target_close(&t);
	}
	return rc;
}

int cmd_subvolume(int argc, char **argv)
{
	static const struct {
		const char *name;
		int (*fn)(int, char **);
	} subs[] = {
		{ "create", cmd_create },           { "snapshot", cmd_snapshot },   { "delete", cmd_delete },
		{ "list", cmd_list },               { "show", cmd_show },           { "get-default", cmd_get_default },
		{ "set-default", cmd_set_default },
	};

	if (argc < 2)
		return usage_error("subvolume", "expected a subcommand: create, snapshot, delete, list, show, "
				   "get-default, set-default");
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
		fputs(help, stdout);
		return EXIT_OK;
	}
	for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++)
		if (!strcmp(argv[1], subs[i].name))
			return subs[i].fn(argc - 1, argv + 1);
	return usage_error("subvolume", "unknown subcommand '%s'", argv[1]);
}
