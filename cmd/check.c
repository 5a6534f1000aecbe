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
#include "ubtrfs/mkfs.h"
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
	"usage: ubtrfs check [OPTIONS] DEV...\n\n"
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
	"  -h, --help         this text\n"
	OPEN_ARGS_HELP
	"\nExit codes: 0 no problem found, 1 problems found, 2 usage or fatal error (the\n"
	"filesystem could not be opened or a pass could not run).\n";

struct out {
	bool json;
	bool tty;          /* progress on stderr */
	bool progress_shown;
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

/*
 * A ubtrfs (FUSE) mount names its first device in mountinfo's source field;
 * the kernel's mounts are found by ub_mkfs_check_paths.
 */
static bool fuse_mounted(const char *path)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	struct stat want, st;
	char *line = NULL;
	size_t cap = 0;
	bool found = false;

	if (!f)
		return false;
	if (stat(path, &want)) {
		fclose(f);
		return false;
	}
	while (!found && getline(&line, &cap, f) > 0) {
		char *sep = strstr(line, " - ");
		char fstype[256], src[4096];

		if (!sep || sscanf(sep + 3, "%255s %4095s", fstype, src) != 2 || strcmp(fstype, "fuse.ubtrfs"))
			continue;
		if (stat(src, &st))
			continue;
		found = S_ISBLK(want.st_mode) ? S_ISBLK(st.st_mode) && st.st_rdev == want.st_rdev
					      : st.st_dev == want.st_dev && st.st_ino == want.st_ino;
	}
	free(line);
	fclose(f);
	return found;
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
		if (ub_mkfs_check_paths(&path, 1, true, why, sizeof(why)) == -EBUSY) {
			fprintf(stderr, "ubtrfs check: error: %s (--force checks it anyway)\n", why);
			ret = -EBUSY;
		} else if (fuse_mounted(path)) {
			fprintf(stderr, "ubtrfs check: error: %s is mounted by ubtrfs mount (--force checks it anyway)\n",
				path);
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

int cmd_check(int argc, char **argv)
{
	static const struct option longopts[] = {
		OPEN_ARGS_LONGOPTS,
		{ "json", no_argument, NULL, 0x400 },
		{ "force", no_argument, NULL, 0x401 },
		{ "check-data-csum", no_argument, NULL, 0x402 },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct open_args oa;
	struct out o = { 0 };
	struct ub_chk_sink sink = { on_problem, on_progress, &o };
	struct ub_chk_opts copts = { 0 };
	struct ub_chk_summary sum;
	struct ub_checker *c = NULL;
	struct ub_fs *fs = NULL;
	struct ub_log log;
	bool force = false;
	int opt, ret, rc = EXIT_OK;

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
		case 0x401: force = true; break;
		case 0x402: copts.check_data_csum = true; break;
		case 'h': fputs(help, stdout); return EXIT_OK;
		default: return usage_error("check", "invalid option");
		}
	}
	if (optind >= argc)
		return usage_error("check", "no device given");
	o.tty = isatty(2);
	copts.verbosity = oa.verbosity;
	copts.no_log = oa.no_log;
	if (ub_checker_new(&copts, &sink, &c)) {
		fprintf(stderr, "ubtrfs check: error: out of memory\n");
		return EXIT_FATAL;
	}
	ub_checker_log(c, &log);
	{
		struct ub_fs_opts fo = open_args_fs_opts(&oa);

		/*
		 * The passes stream their trees in key order and a block is rarely
		 * wanted twice: a small cache is faster here than a mount's large one
		 * (fewer fresh pages to fault in) and holds less (docs/check.md).
		 */
		if (!fo.cache_bytes)
			fo.cache_bytes = CHECK_CACHE_BYTES;
		ret = open_fs_with(&oa, argv + optind, argc - optind, &fo, &log, &fs);
	}
	if (ret) {
		/* what can be read without the filesystem: the superblocks of the devices named */
		ub_checker_supers(c, (const char *const *)argv + optind, argc - optind, NULL);
		rc = EXIT_FATAL;
		goto out;
	}
	if (!force && refuse_mounted(fs)) {
		ub_fs_close(fs);
		ub_checker_free(c);
		return EXIT_FATAL;
	}
	ret = ub_checker_supers(c, (const char *const *)argv + optind, argc - optind, fs);
	if (!ret)
		ret = ub_checker_run(c, fs);
	if (ret) {
		clear_progress(&o);
		fprintf(stderr, "ubtrfs check: error: the check could not be completed: %s\n", strerror(-ret));
		rc = EXIT_FATAL;
	}
out:
	clear_progress(&o);
	ub_checker_summary(c, &sum);
	print_summary(&o, &sum, fs != NULL);
	if (rc == EXIT_OK)
		for (int i = 0; i < UB_CHK_NCLASSES; i++)
			if (sum.problems[i])
				rc = EXIT_PROBLEMS;
	if (fs)
		ub_fs_close(fs);
	ub_checker_free(c);
	return rc;
}
