/* SPDX-License-Identifier: MIT */
/* ubtrfs check: verify an unmounted filesystem read-only and say each problem on one line. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "ubtrfs/check.h"
#include "ubtrfs/devinfo.h"
#include "ubtrfs/fsinfo.h"
#include "ubtrfs/rescue.h"
#include "ubtrfs/repair.h"
#include <uuid/uuid.h>
#include "cmd.h"
#include "print_priv.h"

/*
 * The block cache of a check: 16 MiB. bench/check (kernel-made images of
 * 100,000 and 200,000 files): 31 and 41 MB of peak memory against 47 and 60
 * with 32 MiB, for 0.03-0.05 s more (the two threads read some blocks twice);
 * 192 MiB was slower as well as larger (fresh pages to fault in).
 */
#define CHECK_CACHE_BYTES (16ULL << 20)

static const char help[] =
	"usage: ubtrfs check [OPTIONS] DEV...\n"
	"       ubtrfs check --repair [--init-csum-tree] [--init-extent-tree] [--dry-run] [--undo-file FILE] [OPTIONS] DEV...\n\n"
	"Check the filesystem on DEV... without changing it (devices are opened read-only):\n"
	"superblocks, tree blocks (every copy), chunks, block groups, device extents, the\n"
	"extent tree's references against the trees, the free space tree or v1 space cache,\n"
	"root items, references and subvolume links, the uuid tree, the checksum tree, the\n"
	"file trees (inodes, names and directory entries, file extents, checksum coverage)\n"
	"and the quota tree's counts; with --check-data-csum every\n"
	"copy of the data and the RAID5/6 parity (docs/check.md). Each problem is one line on\n"
	"stdout (class, tree, key, inode and its path, logical address, device, what is\n"
	"wrong), then a summary. A device the kernel or a ubtrfs mount holds is refused.\n\n"
	"      --json         one JSON object per problem, then one {\"summary\": ...} object\n"
	"      --force        check a device even if a mounted filesystem uses it\n"
	"      --check-data-csum  read every data sector the checksum tree covers, on every copy,\n"
	"                     and verify its checksum; compare each RAID5/6 full stripe's\n"
	"                     parity with its data\n"
	"      --repair       then cure what has a cure (docs/check.md lists them), in one\n"
	"                     copy-on-write commit, every byte it overwrites saved first in an\n"
	"                     undo file; then check again and report what is left\n"
	"      --init-csum-tree  rebuild the checksum tree from the data (implies --repair):\n"
	"                     every copy of every sector is read; a checksum a copy verifies\n"
	"                     is kept, one no copy verifies is kept too (the sector stays\n"
	"                     unreadable, named); a sector without one gets one only when\n"
	"                     all its copies agree\n"
	"      --init-extent-tree  rebuild the extent tree from the trees that exist (implies\n"
	"                     --repair): every tree block and data extent they reach gets its\n"
	"                     item and back references, block groups their used bytes, the\n"
	"                     free space tree is rewritten; the old tree's problems need no cure\n"
	"      --dry-run      with --repair: say each change, write nothing\n"
	"      --undo-file FILE  with --repair: the undo file (default: ubtrfs-undo-UUID-genN.undo\n"
	"                     in the current folder; never overwritten); `ubtrfs rescue undo`\n"
	"                     puts the devices back from it\n"
	"  -h, --help         this text\n"
	OPEN_ARGS_HELP
	"\nExit codes: 0 no problem found (with --repair: none left), 1 problems found (left),\n"
	"2 usage or fatal error (the filesystem could not be opened, a pass could not run, the\n"
	"repair failed: then nothing of it was committed).\n";

struct out {
	bool json;
	bool tty;          /* progress on stderr */
	bool progress_shown;
	bool nomem;        /* a problem could not be noted for the repair */
	struct timespec last;
};

static void json_string(const char *s)
{
	putchar('"');
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\')
			printf("\\%c", *p);
		else if (*p < 0x20 || *p >= 0x7f)
			printf("\\u%04x", *p);
		else
			putchar(*p);
	}
	putchar('"');
}

static void clear_progress(struct out *o)
{
	if (o->progress_shown) {
		fputs("\r\033[K", stderr);
		o->progress_shown = false;
	}
}

static void on_problem(void *arg, const struct ub_chk_problem *p)
{
	struct out *o = arg;
	char name[32];

	clear_progress(o);
	if (o->json) {
		printf("{\"class\":\"%s\",\"tree\":", ub_chk_class_name(p->cls));
		if (p->tree) {
			printf("%llu,\"tree_name\":", (unsigned long long)p->tree);
			json_string(ub_tree_name(p->tree, name, sizeof(name)));
		} else {
			printf("null,\"tree_name\":null");
		}
		if (p->has_key)
			printf(",\"key\":[%llu,%u,%llu]", (unsigned long long)p->key.objectid, p->key.type,
			       (unsigned long long)p->key.offset);
		else
			printf(",\"key\":null");
		printf(",\"logical\":%llu,\"devid\":%llu,\"physical\":%llu,\"inode\":%llu,\"path\":",
		       (unsigned long long)p->logical, (unsigned long long)p->devid, (unsigned long long)p->physical,
		       (unsigned long long)p->inode);
		if (p->path)
			json_string(p->path);
		else
			printf("null");
		printf(",\"message\":");
		json_string(p->msg);
		printf("}\n");
		return;
	}
	printf("%s:", ub_chk_class_name(p->cls));
	if (p->tree)
		printf(" tree %s", ub_tree_name(p->tree, name, sizeof(name)));
	if (p->has_key) {
		const char *t = ub_key_type_name(p->key.type);

		if (t)
			printf(" key (%llu %s %llu)", (unsigned long long)p->key.objectid, t,
			       (unsigned long long)p->key.offset);
		else
			printf(" key (%llu %u %llu)", (unsigned long long)p->key.objectid, p->key.type,
			       (unsigned long long)p->key.offset);
	}
	if (p->inode)
		printf(" inode %llu", (unsigned long long)p->inode);
	if (p->logical)
		printf(" logical %llu", (unsigned long long)p->logical);
	if (p->devid)
		printf(" devid %llu", (unsigned long long)p->devid);
	if (p->devid && p->physical)
		printf(" physical %llu", (unsigned long long)p->physical);
	/* a path may be a name from the disk: escaped, so that one problem stays one line */
	if (p->path) {
		fputs(" (", stdout);
		pr_name(stdout, (const uint8_t *)p->path, strlen(p->path));
		fputs(")", stdout);
	}
	printf("%s%s\n", p->tree || p->has_key || p->inode || p->logical || p->devid || p->path ? ": " : " ", p->msg);
}

static void on_progress(void *arg, const char *phase, uint64_t done, uint64_t total)
{
	struct out *o = arg;
	struct timespec now;

	if (!o->tty)
		return;
	clock_gettime(CLOCK_MONOTONIC, &now);
	/* five updates a second are enough to see it move */
	if (o->progress_shown && (now.tv_sec - o->last.tv_sec) * 1000000000L + (now.tv_nsec - o->last.tv_nsec) < 200000000L)
		return;
	o->last = now;
	if (total)
		fprintf(stderr, "\r\033[Kchecking %s: %llu of %llu", phase, (unsigned long long)done,
			(unsigned long long)total);
	else if (done)
		fprintf(stderr, "\r\033[Kchecking %s: %llu MiB", phase, (unsigned long long)(done >> 20));
	else
		fprintf(stderr, "\r\033[Kchecking %s", phase);
	o->progress_shown = true;
}

/* The devices of the open filesystem, refused when a mount holds one. 0 or -EBUSY (said). */
static int refuse_mounted(struct ub_fs *fs)
{
	struct ub_device_info *devs = NULL;
	char why[512];
	int n = 0, ret = ub_volume_list_devices(ub_fs_volume(fs), &devs, &n);

	for (int i = 0; !ret && i < n; i++) {
		const char *path = devs[i].path;

		if (!path)
			continue;
		if (ub_rescue_check_unmounted(&path, 1, why, sizeof(why)) == -EBUSY) {
			fprintf(stderr, "ubtrfs check: error: %s (--force checks it anyway)\n", why);
			ret = -EBUSY;
		}
	}
	free(devs);
	return ret;
}

static void print_summary(const struct out *o, const struct ub_chk_summary *s, bool opened)
{
	uint64_t total = 0;

	for (int i = 0; i < UB_CHK_NCLASSES; i++)
		total += s->problems[i];
	if (o->json) {
		printf("{\"summary\":{\"opened\":%s,\"problems\":%llu,\"by_class\":{", opened ? "true" : "false",
		       (unsigned long long)total);
		for (int i = 0; i < UB_CHK_NCLASSES; i++)
			printf("%s\"%s\":%llu", i ? "," : "", ub_chk_class_name((enum ub_chk_class)i),
			       (unsigned long long)s->problems[i]);
		printf("},\"superblocks\":%llu,\"trees\":%llu,\"tree_blocks\":%llu,\"shared_blocks\":%llu,"
		       "\"metadata_bytes\":%llu,\"chunks\":%llu,\"block_groups\":%llu,\"dev_extents\":%llu,"
		       "\"extents\":%llu,\"data_bytes\":%llu",
		       (unsigned long long)s->superblocks, (unsigned long long)s->trees,
		       (unsigned long long)s->tree_blocks, (unsigned long long)s->shared_blocks,
		       (unsigned long long)s->meta_bytes, (unsigned long long)s->chunks,
		       (unsigned long long)s->block_groups, (unsigned long long)s->dev_extents,
		       (unsigned long long)s->extents, (unsigned long long)s->data_bytes);
		/* ---- checksum tree ---- */
		printf(",\"csum_items\":%llu,\"csum_bytes\":%llu", (unsigned long long)s->csum_items,
		       (unsigned long long)s->csum_bytes);
		/* ---- file trees ---- */
		printf(",\"subvolumes\":%llu,\"inodes\":%llu,\"names\":%llu,\"file_extents\":%llu",
		       (unsigned long long)s->subvols, (unsigned long long)s->inodes, (unsigned long long)s->names,
		       (unsigned long long)s->file_extents);
		/* ---- RAID5/6 parity ---- */
		printf(",\"parity_stripes\":%llu", (unsigned long long)s->parity_stripes);
		/* ---- quotas ---- */
		printf(",\"qgroups\":%llu,\"space_caches\":%llu}}\n", (unsigned long long)s->qgroups,
		       (unsigned long long)s->space_caches);
		return;
	}
	printf("checked: %llu superblock copies, %llu trees, %llu tree blocks (%llu bytes of metadata, %llu shared "
	       "blocks seen again), %llu chunks, %llu block groups, %llu device extents, %llu extents (%llu bytes "
	       "of data)\n",
	       (unsigned long long)s->superblocks, (unsigned long long)s->trees, (unsigned long long)s->tree_blocks,
	       (unsigned long long)s->meta_bytes, (unsigned long long)s->shared_blocks, (unsigned long long)s->chunks,
	       (unsigned long long)s->block_groups, (unsigned long long)s->dev_extents,
	       (unsigned long long)s->extents, (unsigned long long)s->data_bytes);
	/* ---- checksum tree ---- */
	printf("checksums: %llu items covering %llu bytes of data\n", (unsigned long long)s->csum_items,
	       (unsigned long long)s->csum_bytes);
	/* ---- file trees ---- */
	printf("file trees: %llu subvolumes, %llu inodes, %llu names, %llu file extents\n",
	       (unsigned long long)s->subvols, (unsigned long long)s->inodes, (unsigned long long)s->names,
	       (unsigned long long)s->file_extents);
	if (s->parity_stripes)
		printf("parity: %llu RAID5/6 full stripes compared with their data\n",
		       (unsigned long long)s->parity_stripes);
	if (s->space_caches)
		printf("free space: %llu v1 space caches compared with the extents\n",
		       (unsigned long long)s->space_caches);
	if (s->qgroups)
		printf("quotas: %llu qgroups' counts compared\n", (unsigned long long)s->qgroups);
	printf("problems: %llu", (unsigned long long)total);
	for (int i = 0; i < UB_CHK_NCLASSES; i++)
		printf("%s%s %llu", i ? ", " : " (", ub_chk_class_name((enum ub_chk_class)i),
		       (unsigned long long)s->problems[i]);
	printf(")%s\n", opened ? "" : "; the filesystem could not be opened, so only its superblocks were checked");
}

/* One check: open, refuse a mounted device, every pass, the summary. rc as the command's exit code. */
struct check_run {
	struct open_args *oa;
	char **devs;
	int ndevs;
	struct out *o;
	struct ub_chk_opts copts;
	bool force;
	struct ub_repair *repair;      /* the problems are noted for it too */
	/*
	 * the blocks no copy of which passes (fix SALVAGE), noted apart: when
	 * such a block stops the check (the root tree's), the repair salvages
	 * them alone and checks again itself (docs/check.md)
	 */
	struct ub_repair *salvage;
	uint64_t nsalvage;
	/* ---- what the run found out, for the repair ---- */
	struct ub_volume_info vi;
	char **paths;                  /* every device of the filesystem (freed by the caller) */
	int npaths;
	bool missing;
	uint64_t problems;
};

static void on_problem_noted(void *arg, const struct ub_chk_problem *p)
{
	struct check_run *cr = arg;

	on_problem(cr->o, p);
	if (cr->repair && ub_repair_note(cr->repair, p))
		cr->o->nomem = true;
	if (cr->repair && cr->salvage && p->fix == UB_CHK_FIX_SALVAGE) {
		cr->nsalvage++;
		if (ub_repair_note(cr->salvage, p))
			cr->o->nomem = true;
	}
}

static void on_progress_run(void *arg, const char *phase, uint64_t done, uint64_t total)
{
	on_progress(((struct check_run *)arg)->o, phase, done, total);
}

/* The paths of every device of the open filesystem (what a repair opens for writing). */
static int keep_paths(struct check_run *cr, struct ub_fs *fs)
{
	struct ub_device_info *devs = NULL;
	int n = 0, ret = ub_volume_list_devices(ub_fs_volume(fs), &devs, &n);

	if (!ret)
		ret = ub_volume_get_info(ub_fs_volume(fs), &cr->vi);
	if (!ret && n > 0 && !(cr->paths = calloc((size_t)n, sizeof(*cr->paths))))
		ret = -ENOMEM;
	for (int i = 0; !ret && i < n; i++) {
		if (devs[i].missing || !devs[i].path) {
			cr->missing = true;
			continue;
		}
		if (!(cr->paths[cr->npaths] = strdup(devs[i].path)))
			ret = -ENOMEM;
		else
			cr->npaths++;
	}
	free(devs);
	return ret;
}

static int check_once(struct check_run *cr)
{
	struct ub_chk_sink sink = { on_problem_noted, on_progress_run, cr };
	struct ub_chk_summary sum;
	struct ub_checker *c = NULL;
	struct ub_fs *fs = NULL;
	struct ub_log log;
	int ret, rc = EXIT_OK;

	if (ub_checker_new(&cr->copts, &sink, &c)) {
		fprintf(stderr, "ubtrfs check: error: out of memory\n");
		return EXIT_FATAL;
	}
	ub_checker_log(c, &log);
	{
		struct ub_fs_opts fo = open_args_fs_opts(cr->oa);

		/*
		 * The passes stream their trees in key order and a block is rarely
		 * wanted twice: a small cache is faster here than a mount's large one
		 * (fewer fresh pages to fault in) and holds less (docs/check.md).
		 */
		if (!fo.cache_bytes)
			fo.cache_bytes = CHECK_CACHE_BYTES;
		ret = open_fs_with(cr->oa, cr->devs, cr->ndevs, &fo, &log, &fs);
	}
	if (ret) {
		/* what can be read without the filesystem: the superblocks of the devices named */
		ub_checker_supers(c, (const char *const *)cr->devs, cr->ndevs, NULL);
		rc = EXIT_FATAL;
		goto out;
	}
	if (!cr->force && refuse_mounted(fs)) {
		ub_fs_close(fs);
		ub_checker_free(c);
		return EXIT_FATAL;
	}
	ret = ub_checker_supers(c, (const char *const *)cr->devs, cr->ndevs, fs);
	if (!ret)
		ret = ub_checker_run(c, fs);
	if (ret) {
		clear_progress(cr->o);
		fprintf(stderr, "ubtrfs check: error: the check could not be completed: %s\n", strerror(-ret));
		rc = EXIT_FATAL;
	}
	if (cr->repair && !cr->paths && keep_paths(cr, fs)) {
		fprintf(stderr, "ubtrfs check: error: out of memory\n");
		rc = EXIT_FATAL;
	}
out:
	clear_progress(cr->o);
	ub_checker_summary(c, &sum);
	print_summary(cr->o, &sum, fs != NULL);
	cr->problems = 0;
	for (int i = 0; i < UB_CHK_NCLASSES; i++)
		cr->problems += sum.problems[i];
	if (rc == EXIT_OK && cr->problems)
		rc = EXIT_PROBLEMS;
	if (fs)
		ub_fs_close(fs);
	ub_checker_free(c);
	return rc;
}

static void on_change(void *arg, const struct ub_repair_change *ch)
{
	struct out *o = arg;

	if (o->json) {
		printf("{\"repair\":");
		json_string(ch->msg);
		printf(",\"tree\":%llu,\"inode\":%llu,\"devid\":%llu,\"was\":%llu,\"want\":%llu}\n",
		       (unsigned long long)ch->tree, (unsigned long long)ch->inode, (unsigned long long)ch->devid,
		       (unsigned long long)ch->was, (unsigned long long)ch->want);
	} else {
		printf("repair: %s\n", ch->msg);
	}
}

/* The undo file's default name: the filesystem's UUID and the generation repaired, in the current folder. */
static void default_undo_name(const struct ub_volume_info *vi, char *buf, size_t len)
{
	char uuid[37];

	uuid_unparse_lower(vi->fsid, uuid);
	snprintf(buf, len, "ubtrfs-undo-%s-gen%llu.undo", uuid, (unsigned long long)vi->generation);
}

/* --repair after the check that noted the problems: the repair, then a check of what it left. */
static int repair(struct check_run *cr, bool dry_run, const char *undo_file, bool init_csum, bool init_extent)
{
	struct ub_repair_sink rsink = { on_change, cr->o };
	struct ub_repair_opts ro = { .dry_run = dry_run, .sink = &rsink, .init_csum_tree = init_csum,
				     .init_extent_tree = init_extent };
	struct ub_repair_result res;
	struct ub_log log = { .fn = NULL, .arg = NULL, .verbosity = cr->oa->verbosity, .errors = NULL };
	char undo_name[128];
	int ret;

	if (!cr->problems && !init_csum && !init_extent) {
		if (!cr->o->json)
			printf("repair: nothing to repair\n");
		return EXIT_OK;
	}
	if (cr->missing) {
		fprintf(stderr, "ubtrfs check: error: a device of the filesystem is missing: no repair without every "
			"device\n");
		return EXIT_FATAL;
	}
	if (!dry_run) {
		if (!undo_file) {
			default_undo_name(&cr->vi, undo_name, sizeof(undo_name));
			undo_file = undo_name;
		}
		ro.undo_file = undo_file;
	}
	ret = ub_repair_run(cr->repair, (const char *const *)cr->paths, cr->npaths, &ro, &log, &res);
	if (ret) {
		fprintf(stderr, "ubtrfs check: error: the repair failed (%s); nothing of it was committed%s%s\n",
			strerror(-ret), ro.undo_file ? ", the undo file " : "", ro.undo_file ? ro.undo_file : "");
		return EXIT_FATAL;
	}
	if (!cr->o->json) {
		printf("repair: %llu problems found, %llu with a cure this repair has, %llu changes %s\n",
		       (unsigned long long)res.noted, (unsigned long long)res.curable, (unsigned long long)res.changes,
		       dry_run ? "it would make (dry run: nothing written)" : "made");
		if (res.generation)
			printf("repair: committed as generation %llu; `ubtrfs rescue undo %s DEV...` puts the devices "
			       "back as they were\n", (unsigned long long)res.generation, ro.undo_file);
	}
	if (res.unverified && !cr->o->json)
		printf("repair: %llu data sectors %s no copy verifies (named above): reading them fails or is "
		       "unchecked\n", (unsigned long long)res.unverified, dry_run ? "would be left that" : "left that");
	if (dry_run || !res.changes)
		return cr->problems || res.unverified ? EXIT_PROBLEMS : EXIT_OK;
	/* what is left: a full check of the repaired filesystem */
	if (!cr->o->json)
		printf("after the repair:\n");
	cr->repair = NULL;
	ret = check_once(cr);
	/* data the rebuilt checksum tree could not vouch for is a problem left too */
	return ret == EXIT_OK && res.unverified ? EXIT_PROBLEMS : ret;
}

int cmd_check(int argc, char **argv)
{
	static const struct option longopts[] = {
		OPEN_ARGS_LONGOPTS,
		{ "json", no_argument, NULL, 0x400 },
		{ "force", no_argument, NULL, 0x401 },
		{ "check-data-csum", no_argument, NULL, 0x402 },
		{ "repair", no_argument, NULL, 0x403 },
		{ "dry-run", no_argument, NULL, 0x404 },
		{ "undo-file", required_argument, NULL, 0x405 },
		{ "init-csum-tree", no_argument, NULL, 0x406 },
		{ "init-extent-tree", no_argument, NULL, 0x407 },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct open_args oa;
	struct out o = { 0 };
	struct check_run cr = { .oa = &oa, .o = &o };
	bool do_repair = false, dry_run = false, init_csum = false, init_extent = false;
	const char *undo_file = NULL;
	int opt, rc;

	open_args_init(&oa);
	optind = 1;
	while ((opt = getopt_long(argc, argv, "vqh", longopts, NULL)) != -1) {
		int r = open_args_parse(&oa, opt, optarg);

		if (r < 0)
			return usage_error("check", "invalid value '%s'", optarg ? optarg : "");
		if (r)
			continue;
		switch (opt) {
		case 0x400: o.json = true; break;
		case 0x401: cr.force = true; break;
		case 0x402: cr.copts.check_data_csum = true; break;
		case 0x403: do_repair = true; break;
		case 0x404: dry_run = true; break;
		case 0x405: undo_file = optarg; break;
		case 0x406: init_csum = do_repair = true; break;
		case 0x407: init_extent = do_repair = true; break;
		case 'h': fputs(help, stdout); return EXIT_OK;
		default: return usage_error("check", "invalid option");
		}
	}
	if (optind >= argc)
		return usage_error("check", "no device given");
	if ((dry_run || undo_file) && !do_repair)
		return usage_error("check", "--dry-run and --undo-file go with --repair");
	if (do_repair && cr.force)
		return usage_error("check", "--repair never changes a mounted filesystem: --force is refused with it");
	if (do_repair && (oa.generation || oa.backup || oa.root_bytenr || oa.super_mirror > 0))
		return usage_error("check", "--repair repairs the newest commit: --generation, --backup, --root and --super are "
				   "refused with it");
	cr.devs = argv + optind;
	cr.ndevs = argc - optind;
	o.tty = isatty(2);
	cr.copts.verbosity = oa.verbosity;
	cr.copts.no_log = oa.no_log;
	if (do_repair && ub_repair_new(&cr.repair)) {
		fprintf(stderr, "ubtrfs check: error: out of memory\n");
		return EXIT_FATAL;
	}
	if (do_repair && ub_repair_new(&cr.salvage))
		o.nomem = true;
	rc = check_once(&cr);
	if (do_repair) {
		struct ub_repair *r = cr.repair;

		if (o.nomem) {
			fprintf(stderr, "ubtrfs check: error: out of memory while noting the problems: no repair\n");
			rc = EXIT_FATAL;
		} else if (rc != EXIT_FATAL) {
			rc = repair(&cr, dry_run, undo_file, init_csum, init_extent);
		} else if (cr.paths && cr.nsalvage) {
			/* the check stopped at a block no copy of which passes: only its salvage, then the rest */
			cr.repair = cr.salvage;
			rc = repair(&cr, dry_run, undo_file, false, false);
		}
		ub_repair_free(r);
		ub_repair_free(cr.salvage);
	}
	for (int i = 0; i < cr.npaths; i++)
		free(cr.paths[i]);
	free(cr.paths);
	return rc;
}
