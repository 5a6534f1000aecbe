/* SPDX-License-Identifier: MIT */
/*
 * ubtrfs filesystem show|df|usage|du|sync|label: the filesystem as a whole,
 * as btrfs-progs' `btrfs filesystem` prints it. show reads devices only; the
 * others work on a mounted btrfs (the kernel's or a ubtrfs mount, through the
 * ioctls) and on devices (fs_target.c hides which), du through fiemap.
 */
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include "cmd.h"
#include "ubtrfs/balance.h"
#include "ubtrfs/devinfo.h"
#include "ubtrfs/fsinfo.h"
#include "ubtrfs/scan.h"
#include "fs_target.h"
#include "ubtrfs_ioctl.h"
#include "json.h"

static const char help[] =
	"usage: ubtrfs filesystem show [OPTIONS] [DEV...]\n"
	"       ubtrfs filesystem df|usage [OPTIONS] PATH|DEV...\n"
	"       ubtrfs filesystem du [-s] [OPTIONS] PATH... | --path P DEV...\n"
	"       ubtrfs filesystem label PATH|DEV... [NEWLABEL]\n"
	"       ubtrfs filesystem sync PATH|DEV...\n"
	"       ubtrfs filesystem resize [DEVID:]SIZE|max PATH|DEV...\n\n"
	"'ubtrfs filesystem SUBCOMMAND --help' describes each. show:\n"
	"Show the filesystem on DEV...: label, uuid, generation, and each device by devid with its size\n"
	"and path, or MISSING. Without DEV, every btrfs filesystem found on the block devices.\n\n"
	"      --json         print one JSON object instead of text\n"
	"  -h, --help         this text\n"
	OPEN_ARGS_HELP
	"\nExit codes: 0 all devices present, 1 some device is missing, 2 usage or fatal error.\n";


static void print_label_json(const char *label)
{
	putchar('"');
	for (const char *p = label; *p; p++) {
		unsigned char c = (unsigned char)*p;
		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

static int show(const struct ub_volume *vol, bool json)
{
	char label[UB_LABEL_SIZE + 1], uuid[40];
	struct ub_volume_info info;
	struct ub_device_info *devs;
	int ndevs, missing;

	if (ub_volume_get_info(vol, &info) || ub_volume_list_devices(vol, &devs, &ndevs)) {
		fprintf(stderr, "ubtrfs: error: out of memory listing the devices\n");
		return EXIT_FATAL;
	}
	memcpy(label, info.label, sizeof(label));
	for (char *p = label; *p; p++)
		if ((unsigned char)*p < 0x20)
			*p = '?';
	ub_uuid_str(info.fsid, uuid);
	missing = info.nmissing;
	if (json) {
		printf("{\"label\": ");
		print_label_json(label);
		printf(", \"uuid\": \"%s\", \"generation\": %llu, \"num_devices\": %llu, \"bytes_used\": %llu, "
		       "\"devices\": [",
		       uuid, (unsigned long long)info.generation, (unsigned long long)info.num_devices,
		       (unsigned long long)info.bytes_used);
		for (int i = 0; i < ndevs; i++) {
			printf("%s{\"devid\": %llu, \"size\": %llu, \"missing\": %s, \"path\": ", i ? ", " : "",
			       (unsigned long long)devs[i].devid, (unsigned long long)devs[i].total_bytes,
			       devs[i].missing ? "true" : "false");
			if (devs[i].path)
				print_label_json(devs[i].path);
			else
				printf("null");
			printf("}");
		}
		printf("]}");
	} else {
		printf("Label: %s  uuid: %s\n", label[0] ? label : "none", uuid);
		printf("\tTotal devices %llu FS bytes used %llu generation %llu\n", (unsigned long long)info.num_devices,
		       (unsigned long long)info.bytes_used, (unsigned long long)info.generation);
		for (int i = 0; i < ndevs; i++)
			printf("\tdevid %4llu size %llu path %s\n", (unsigned long long)devs[i].devid,
			       (unsigned long long)devs[i].total_bytes, devs[i].path ? devs[i].path : "<MISSING>");
		if (missing)
			printf("\t*** Some devices missing (%d)\n", missing);
	}
	if (missing) {
		/* the lowest devid missing (the list is in devid order) */
		int first = 0;
		while (!devs[first].missing)
			first++;
		fprintf(stderr, "ubtrfs: error: %d of %d devices missing (devid %llu%s)\n", missing, ndevs,
			(unsigned long long)devs[first].devid, missing > 1 ? " and others" : "");
	}
	free(devs);
	return missing ? EXIT_PROBLEMS : EXIT_OK;
}

/* One filesystem by its devices; the text or JSON object is not ended, so show_all can join several. */
static int show_devs(struct open_args *oa, char **devs, int ndevs, bool json)
{
	struct ub_fs *fs;
	int rc;

	if (open_fs(oa, devs, ndevs, &fs) == 0) {
		rc = show(ub_fs_volume(fs), json);
		ub_fs_close(fs);
		return final_rc(oa, rc);
	}
	/* the chunk tree is out of reach: the superblocks alone still say which devices there are */
	{
		struct ub_volume *vol;
		struct ub_log log = { .fn = NULL, .arg = NULL, .verbosity = UB_LOG_ERROR, .errors = NULL };
		if (ub_volume_open((const char *const *)devs, ndevs, NULL, &log, &vol))
			return EXIT_FATAL;
		fprintf(stderr, "ubtrfs: warning: devices from the superblocks only (sizes of devices not given are unknown)\n");
		show(vol, json);
		ub_volume_close(vol);
		return EXIT_PROBLEMS;
	}
}

/* Every filesystem the scan finds, each through the same open as when its devices are named. */
static int show_all(struct open_args *oa, bool json)
{
	struct ub_log log = { .fn = NULL, .arg = NULL, .verbosity = oa->verbosity, .errors = &oa->errors };
	struct ub_scan *scan;
	int rc = EXIT_OK;

	if (ub_scan_block_devices(NULL, &log, &scan))
		return EXIT_FATAL;
	if (json)
		printf("[");
	for (int i = 0; i < scan->nfs; i++) {
		const struct ub_scan_fs *f = &scan->fs[i];
		char **paths = calloc((size_t)f->ndevs, sizeof(*paths));
		int r;

		if (!paths) {
			rc = EXIT_FATAL;
			break;
		}
		for (int j = 0; j < f->ndevs; j++)
			paths[j] = f->devs[j].path;
		if (json && i)
			printf(",\n");
		r = show_devs(oa, paths, f->ndevs, json);
		if (!json)
			printf("\n");
		free(paths);
		if (r > rc)
			rc = r;
	}
	if (json)
		printf("]\n");
	ub_scan_free(scan);
	return rc;
}

static int cmd_show(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "json", no_argument, NULL, 0x400 }, { "help", no_argument, NULL, 'h' },
		OPEN_ARGS_LONGOPTS, { NULL, 0, NULL, 0 },
	};
	struct open_args oa;
	bool json = false;
	int opt, r;

	open_args_init(&oa);
	optind = 1;
	while ((opt = getopt_long(argc, argv, "hvq", longopts, NULL)) != -1) {
		if ((r = open_args_parse(&oa, opt, optarg)) != 0) {
			if (r < 0)
				return usage_error("filesystem show", "invalid value '%s'", optarg);
			continue;
		}
		switch (opt) {
		case 0x400: json = true; break;
		case 'h': fputs(help, stdout); return EXIT_OK;
		default: return usage_error("filesystem show", "invalid option");
		}
	}
	oa.no_log = true; /* devices only: no need to replay the fsync log */
	if (optind >= argc)
		return show_all(&oa, json);
	r = show_devs(&oa, argv + optind, argc - optind, json);
	if (json)
		printf("\n");
	return r;
}

/* ---- df ---- */

static const char df_help[] =
	"usage: ubtrfs filesystem df [OPTIONS] PATH\n"
	"       ubtrfs filesystem df [OPTIONS] DEV...\n\n"
	"Space per block group type and profile, and the global reserve, as btrfs filesystem df\n"
	"(offline: what the kernel's mount of the devices would show).\n\n"
	UNITS_HELP
	"      --json         as JSON (btrfs-progs' --format json shape)\n"
	OPEN_ARGS_HELP;

#define FS_LONGOPTS_COMMON { "help", no_argument, NULL, 0x1ff }, UNITS_LONGOPTS, OPEN_ARGS_LONGOPTS

/* The one mounted path, or the devices. EXIT_OK or the exit code to leave with. */
static int fs_open(struct target *t, struct open_args *oa, char **args, int n, bool write, const char *what)
{
	if (target_args_mounted(args, n))
		return target_open_path(t, args[0], what) ? EXIT_FATAL : EXIT_OK;
	return target_open_devs(t, oa, args, n, write) ? EXIT_FATAL : EXIT_OK;
}

static int fs_done(struct target *t, struct open_args *oa, int rc)
{
	bool online = t->online;

	target_close(t);
	return online ? rc : final_rc(oa, rc);
}

static int cmd_df(int argc, char **argv)
{
	static const struct option longopts[] = { { "json", no_argument, NULL, 0x1f1 }, FS_LONGOPTS_COMMON,
						  { NULL, 0, NULL, 0 } };
	struct units u = { UNITS_HUMAN, false };
	struct open_args oa;
	struct target t;
	struct ub_space_entry *v;
	bool json = false;
	int opt, r, n, ret;

	open_args_init(&oa);
	optind = 1;
	while ((opt = getopt_long(argc, argv, "bhHkmgtvq", longopts, NULL)) != -1) {
		if (units_option(opt, &u) || opt == 'h') {
			if (opt == 'h')
				u = (struct units){ UNITS_HUMAN, false };
			continue;
		}
		if ((r = open_args_parse(&oa, opt, optarg)) != 0) {
			if (r < 0)
				return usage_error("filesystem df", "invalid value '%s'", optarg);
			continue;
		}
		switch (opt) {
		case 0x1f1: json = true; break;
		case 0x1ff: fputs(df_help, stdout); return EXIT_OK;
		default: return usage_error("filesystem df", "invalid option");
		}
	}
	if (optind >= argc)
		return usage_error("filesystem df", "expected PATH, or DEV...");
	ret = fs_open(&t, &oa, argv + optind, argc - optind, false, "filesystem df");
	if (ret)
		return ret;
	ret = target_space_info(&t, &v, &n);
	if (ret) {
		fprintf(stderr, "ERROR: cannot get space info on '%s': %s\n", argv[optind], strerror(-ret));
		return fs_done(&t, &oa, EXIT_PROBLEMS);
	}
	if (json)
		printf("{\n  \"__header\": {\n    \"version\": \"1\"\n  },\n  \"filesystem-df\": [\n");
	for (int i = 0; i < n; i++) {
		char tb[32], ub[32];

		if (json) {
			printf("    {\n      \"bg-type\": \"%s\",\n      \"bg-profile\": \"%s\",\n      \"total\": \"%llu\",\n"
			       "      \"used\": \"%llu\"\n    }%s\n", type_name(v[i].flags), profile_name(v[i].flags),
			       (unsigned long long)v[i].total_bytes, (unsigned long long)v[i].used_bytes,
			       i + 1 < n ? "," : "");
			continue;
		}
		printf("%s, %s: total=%s, used=%s\n", type_name(v[i].flags), profile_name(v[i].flags),
		       pretty_size(v[i].total_bytes, &u, tb, sizeof(tb)), pretty_size(v[i].used_bytes, &u, ub, sizeof(ub)));
	}
	if (json)
		printf("  ]\n}\n");
	free(v);
	return fs_done(&t, &oa, EXIT_OK);
}

/* ---- usage ---- */

/* one stripe of a chunk, as btrfs-progs' chunk_info */
struct chunk_info {
	uint64_t type, devid, size;
	uint32_t num_stripes, sub_stripes;
};

struct chunks {
	struct chunk_info *v;
	size_t n, cap;
};

static int chunk_cb(void *arg, const struct ub_key *key, uint64_t transid, const uint8_t *d, uint32_t len)
{
	struct chunks *c = arg;
	uint32_t num, sub;

	(void)transid;
	if (key->type != BTRFS_CHUNK_ITEM_KEY)
		return 0;
	if (len < sizeof(struct btrfs_chunk))
		return -EUCLEAN;
	num = (uint32_t)UB_GET(btrfs_chunk, num_stripes, d);
	sub = (uint32_t)UB_GET(btrfs_chunk, sub_stripes, d);
	if (num == 0 || len < sizeof(struct btrfs_chunk) + (size_t)(num - 1) * sizeof(struct btrfs_stripe))
		return -EUCLEAN;
	for (uint32_t i = 0; i < num; i++) {
		const uint8_t *st = d + offsetof(struct btrfs_chunk, stripe) + (size_t)i * sizeof(struct btrfs_stripe);

		if (c->n == c->cap) {
			size_t cap = c->cap ? c->cap * 2 : 64;
			struct chunk_info *v = realloc(c->v, cap * sizeof(*v));

			if (!v)
				return -ENOMEM;
			c->v = v;
			c->cap = cap;
		}
		c->v[c->n++] = (struct chunk_info){ UB_GET(btrfs_chunk, type, d), UB_GET(btrfs_stripe, devid, st),
						    UB_GET(btrfs_chunk, length, d), num, sub };
	}
	return 0;
}

/* What one stripe of the chunk takes on its device (btrfs-progs' calc_chunk_size). */
static uint64_t chunk_dev_size(const struct chunk_info *c)
{
	uint64_t div = 1;

	if (c->type & BTRFS_BLOCK_GROUP_RAID0)
		div = c->num_stripes;
	else if (c->type & BTRFS_BLOCK_GROUP_RAID5)
		div = c->num_stripes > 1 ? c->num_stripes - 1 : 1;
	else if (c->type & BTRFS_BLOCK_GROUP_RAID6)
		div = c->num_stripes > 2 ? c->num_stripes - 2 : 1;
	else if (c->type & BTRFS_BLOCK_GROUP_RAID10)
		div = c->sub_stripes ? c->num_stripes / c->sub_stripes : 1;
	return c->size / (div ? div : 1);
}

/* the copies a profile keeps of every byte (btrfs_bg_type_to_factor) */
static int profile_factor(uint64_t flags)
{
	if (flags & (BTRFS_BLOCK_GROUP_DUP | BTRFS_BLOCK_GROUP_RAID1 | BTRFS_BLOCK_GROUP_RAID10))
		return 2;
	if (flags & BTRFS_BLOCK_GROUP_RAID1C3)
		return 3;
	if (flags & BTRFS_BLOCK_GROUP_RAID1C4)
		return 4;
	return 1;
}

/* the order btrfs-progs prints the types in: data, metadata, system (mixed with data), then by profile */
static int space_rank(uint64_t flags)
{
	if (flags & BTRFS_SPACE_INFO_GLOBAL_RSV)
		return 4;
	if (flags & BTRFS_BLOCK_GROUP_DATA)
		return flags & BTRFS_BLOCK_GROUP_METADATA ? 1 : 0;
	if (flags & BTRFS_BLOCK_GROUP_METADATA)
		return 2;
	return 3;
}

static int space_cmp(const void *pa, const void *pb)
{
	const struct ub_space_entry *a = pa, *b = pb;
	int ra = space_rank(a->flags), rb = space_rank(b->flags);

	if (ra != rb)
		return ra - rb;
	return a->flags < b->flags ? -1 : a->flags > b->flags;
}

static int dev_path_cmp(const void *pa, const void *pb)
{
	return strcmp(((const struct target_devinfo *)pa)->path, ((const struct target_devinfo *)pb)->path);
}

/* The size of what `path` names: a block device's, a file's (an image); 0 when unknown (missing). */
static uint64_t device_size(const char *path)
{
	struct stat st;
	uint64_t size = 0;
	int fd;

	if (!path[0] || stat(path, &st) < 0)
		return 0;
	if (S_ISREG(st.st_mode))
		return (uint64_t)st.st_size;
	if (!S_ISBLK(st.st_mode))
		return 0;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	if (ioctl(fd, BLKGETSIZE64, &size) < 0)
		size = 0;
	close(fd);
	return size;
}

static const char usage_help[] =
	"usage: ubtrfs filesystem usage [OPTIONS] PATH\n"
	"       ubtrfs filesystem usage [OPTIONS] DEV...\n\n"
	"The filesystem's space, overall, per block group type and profile, and per device, as\n"
	"btrfs filesystem usage (offline: what the kernel's mount of the devices would show).\n\n"
	UNITS_HELP
	OPEN_ARGS_HELP;

static int cmd_usage(int argc, char **argv)
{
	static const struct option longopts[] = { FS_LONGOPTS_COMMON, { NULL, 0, NULL, 0 } };
	struct ub_search_key sk = { .tree = BTRFS_CHUNK_TREE_OBJECTID,
				    .min = { BTRFS_FIRST_CHUNK_TREE_OBJECTID, BTRFS_CHUNK_ITEM_KEY, 0 },
				    .max = { BTRFS_FIRST_CHUNK_TREE_OBJECTID, BTRFS_CHUNK_ITEM_KEY, UINT64_MAX },
				    .max_transid = UINT64_MAX };
	struct units u = { UNITS_HUMAN, false };
	struct open_args oa;
	struct target t;
	struct ub_space_entry *sp = NULL;
	struct target_devinfo *dev = NULL;
	struct chunks ch = { NULL, 0, 0 };
	struct statvfs sv;
	int opt, r, nsp = 0, ndev = 0, ret, width;
	bool have_chunks;
	uint64_t r_total_size = 0, r_total_missing = 0, slack = 0, r_data_used = 0, r_data_chunks = 0,
		 l_data_chunks = 0, r_meta_used = 0, r_meta_chunks = 0, l_meta_chunks = 0, r_sys_used = 0,
		 r_sys_chunks = 0, l_rsv = 0, l_rsv_used = 0, r_total_chunks, r_total_used, r_total_unused;
	double data_ratio, meta_ratio, free_est, free_min;
	int max_ratio = 1;
	bool mixed = false, multiple = false;
	char b1[32], b2[32];

	open_args_init(&oa);
	optind = 1;
	while ((opt = getopt_long(argc, argv, "bhHkmgtTvq", longopts, NULL)) != -1) {
		if (units_option(opt, &u) || opt == 'h') {
			if (opt == 'h')
				u = (struct units){ UNITS_HUMAN, false };
			continue;
		}
		if ((r = open_args_parse(&oa, opt, optarg)) != 0) {
			if (r < 0)
				return usage_error("filesystem usage", "invalid value '%s'", optarg);
			continue;
		}
		switch (opt) {
		case 'T':
			fprintf(stderr, "ERROR: the tabular format (-T) is not supported; the default one is\n");
			return EXIT_FATAL;
		case 0x1ff: fputs(usage_help, stdout); return EXIT_OK;
		default: return usage_error("filesystem usage", "invalid option");
		}
	}
	if (optind >= argc)
		return usage_error("filesystem usage", "expected PATH, or DEV...");
	ret = fs_open(&t, &oa, argv + optind, argc - optind, false, "filesystem usage");
	if (ret)
		return ret;
	ret = target_space_info(&t, &sp, &nsp);
	if (ret)
		fprintf(stderr, "ERROR: cannot get space info on '%s': %s\n", argv[optind], strerror(-ret));
	if (!ret) {
		ret = target_devices(&t, &dev, &ndev);
		if (ret)
			fprintf(stderr, "ERROR: cannot get the devices of '%s': %s\n", argv[optind], strerror(-ret));
	}
	if (!ret) {
		ret = target_statfs(&t, &sv);
		if (ret)
			fprintf(stderr, "ERROR: cannot get the free space of '%s': %s\n", argv[optind], strerror(-ret));
	}
	if (ret) {
		free(sp);
		free(dev);
		return fs_done(&t, &oa, EXIT_PROBLEMS);
	}
	/* the chunk tree needs root on a mount, as in btrfs-progs: without it, no per-device lines */
	have_chunks = target_search(&t, &sk, chunk_cb, &ch) == 0;
	if (!have_chunks)
		fprintf(stderr, "WARNING: cannot read detailed chunk info, per-device usage will not be shown, run as root\n");
	qsort(sp, (size_t)nsp, sizeof(*sp), space_cmp);
	for (int i = 0; i < ndev; i++) {
		uint64_t dsize;

		if (dev[i].missing)
			strcpy(dev[i].path, "missing");
		dsize = dev[i].missing ? 0 : device_size(dev[i].path);
		r_total_size += dev[i].total_bytes;
		if (dsize > dev[i].total_bytes)
			slack += dsize - dev[i].total_bytes;
		if (!dsize)
			r_total_missing += dev[i].total_bytes;
	}
	qsort(dev, (size_t)ndev, sizeof(*dev), dev_path_cmp);
	for (int i = 0; i < nsp; i++) {
		uint64_t f = sp[i].flags;
		int ratio = profile_factor(f);

		if ((f & (BTRFS_BLOCK_GROUP_DATA | BTRFS_BLOCK_GROUP_METADATA)) ==
		    (BTRFS_BLOCK_GROUP_DATA | BTRFS_BLOCK_GROUP_METADATA))
			mixed = true;
		if (f & BTRFS_SPACE_INFO_GLOBAL_RSV) {
			l_rsv = sp[i].total_bytes;
			l_rsv_used = sp[i].used_bytes;
			continue;
		}
		/* RAID5/6: the raw bytes are the chunks' stripes, their ratio per chunk */
		if (f & (BTRFS_BLOCK_GROUP_RAID5 | BTRFS_BLOCK_GROUP_RAID6)) {
			uint64_t raw = 0;

			for (size_t j = 0; j < ch.n; j++)
				if (ch.v[j].type == f)
					raw += chunk_dev_size(&ch.v[j]);
			if (sp[i].total_bytes)
				ratio = 0;
			if (f & BTRFS_BLOCK_GROUP_DATA) {
				r_data_chunks += raw;
				r_data_used += sp[i].total_bytes ? (uint64_t)((double)sp[i].used_bytes * raw / sp[i].total_bytes) : 0;
				l_data_chunks += sp[i].total_bytes;
			}
			if (f & BTRFS_BLOCK_GROUP_METADATA) {
				r_meta_chunks += raw;
				r_meta_used += sp[i].total_bytes ? (uint64_t)((double)sp[i].used_bytes * raw / sp[i].total_bytes) : 0;
				l_meta_chunks += sp[i].total_bytes;
			}
			if (f & BTRFS_BLOCK_GROUP_SYSTEM) {
				r_sys_chunks += raw;
				r_sys_used += sp[i].total_bytes ? (uint64_t)((double)sp[i].used_bytes * raw / sp[i].total_bytes) : 0;
			}
			continue;
		}
		if (ratio > max_ratio)
			max_ratio = ratio;
		if (f & BTRFS_BLOCK_GROUP_DATA) {
			r_data_used += sp[i].used_bytes * ratio;
			r_data_chunks += sp[i].total_bytes * ratio;
			l_data_chunks += sp[i].total_bytes;
		}
		if (f & BTRFS_BLOCK_GROUP_METADATA) {
			r_meta_used += sp[i].used_bytes * ratio;
			r_meta_chunks += sp[i].total_bytes * ratio;
			l_meta_chunks += sp[i].total_bytes;
		}
		if (f & BTRFS_BLOCK_GROUP_SYSTEM) {
			r_sys_used += sp[i].used_bytes * ratio;
			r_sys_chunks += sp[i].total_bytes * ratio;
		}
	}
	/* a type with more than one profile */
	for (int i = 0; i < nsp; i++)
		for (int j = i + 1; j < nsp; j++)
			if (!(sp[i].flags & BTRFS_SPACE_INFO_GLOBAL_RSV) &&
			    space_rank(sp[i].flags) == space_rank(sp[j].flags) && sp[i].flags != sp[j].flags)
				multiple = true;
	r_total_chunks = r_data_chunks + r_sys_chunks;
	r_total_used = r_data_used + r_sys_used;
	if (!mixed) {
		r_total_chunks += r_meta_chunks;
		r_total_used += r_meta_used;
	}
	r_total_unused = r_total_size - r_total_chunks;
	data_ratio = l_data_chunks ? (double)r_data_chunks / l_data_chunks : 1.0;
	meta_ratio = mixed ? data_ratio : l_meta_chunks ? (double)r_meta_chunks / l_meta_chunks : 1.0;
	free_est = (double)(r_data_chunks - r_data_used) / data_ratio;
	if (mixed)
		free_est -= (double)(l_rsv - l_rsv_used);
	free_min = free_est;
	/* btrfs-progs: what is left unallocated counts once it is 16 MiB at least */
	if (r_total_unused >= (16ULL << 20)) {
		free_est += (double)r_total_unused / data_ratio;
		free_min += (double)r_total_unused / max_ratio;
	}
	width = u.mode == UNITS_HUMAN && !u.si ? 10 : 18;
	printf("Overall:\n");
	printf("    Device size:\t\t%*s\n", width, pretty_size(r_total_size, &u, b1, sizeof(b1)));
	printf("    Device allocated:\t\t%*s\n", width, pretty_size(r_total_chunks, &u, b1, sizeof(b1)));
	printf("    Device unallocated:\t\t%*s\n", width, pretty_size(r_total_unused, &u, b1, sizeof(b1)));
	printf("    Device missing:\t\t%*s\n", width, pretty_size(r_total_missing, &u, b1, sizeof(b1)));
	printf("    Device slack:\t\t%*s\n", width, pretty_size(slack, &u, b1, sizeof(b1)));
	printf("    Used:\t\t\t%*s\n", width, pretty_size(r_total_used, &u, b1, sizeof(b1)));
	printf("    Free (estimated):\t\t%*s\t(min: %s)\n", width,
	       pretty_size(free_est > 0 ? (uint64_t)free_est : 0, &u, b1, sizeof(b1)),
	       pretty_size(free_min > 0 ? (uint64_t)free_min : 0, &u, b2, sizeof(b2)));
	printf("    Free (statfs, df):\t\t%*s\n", width,
	       pretty_size((uint64_t)sv.f_bavail * sv.f_bsize, &u, b1, sizeof(b1)));
	printf("    Data ratio:\t\t\t%*.2f\n", width, data_ratio);
	printf("    Metadata ratio:\t\t%*.2f\n", width, meta_ratio);
	printf("    Global reserve:\t\t%*s\t(used: %s)\n", width, pretty_size(l_rsv, &u, b1, sizeof(b1)),
	       pretty_size(l_rsv_used, &u, b2, sizeof(b2)));
	printf("    Multiple profiles:\t\t%*s\n", width, multiple ? "yes" : "no");
	printf("\n");
	for (int i = 0; i < nsp; i++) {
		const struct ub_space_entry *s = &sp[i];

		if (s->flags & BTRFS_SPACE_INFO_GLOBAL_RSV)
			continue;
		printf("%s,%s: Size:%s, ", type_name(s->flags), profile_name(s->flags),
		       pretty_size(s->total_bytes, &u, b1, sizeof(b1)));
		printf("Used:%s (%.2f%%)\n", pretty_size(s->used_bytes, &u, b1, sizeof(b1)),
		       100.0f * (float)s->used_bytes / (float)(s->total_bytes + (s->total_bytes == 0)));
		for (int d = 0; have_chunks && d < ndev; d++) {
			uint64_t total = 0;

			for (size_t j = 0; j < ch.n; j++)
				if (ch.v[j].type == s->flags && ch.v[j].devid == dev[d].devid)
					total += chunk_dev_size(&ch.v[j]);
			if (total)
				printf("   %s\t%10s\n", dev[d].path, pretty_size(total, &u, b1, sizeof(b1)));
		}
		printf("\n");
	}
	if (have_chunks) {
		printf("Unallocated:\n");
		for (int d = 0; d < ndev; d++) {
			uint64_t total = 0;

			for (size_t j = 0; j < ch.n; j++)
				if (ch.v[j].devid == dev[d].devid)
					total += chunk_dev_size(&ch.v[j]);
			printf("   %s\t%10s\n", dev[d].path,
			       pretty_size(dev[d].total_bytes > total ? dev[d].total_bytes - total : 0, &u, b1, sizeof(b1)));
		}
	}
	free(ch.v);
	free(sp);
	free(dev);
	return fs_done(&t, &oa, EXIT_OK);
}

/* ---- du ---- */

struct range {
	uint64_t start, end;
};

struct seen_ino {
	uint64_t dev, ino;
};

struct du {
	struct target *t;
	struct units u;
	bool summarize;
	int rc;
	/* of the argument being walked: the shared extents' physical ranges, the inodes met */
	struct range *shared;
	size_t nshared, capshared;
	struct seen_ino *seen;
	size_t nseen, capseen;
};

static int du_add_shared(struct du *du, uint64_t start, uint64_t len)
{
	if (du->nshared == du->capshared) {
		size_t cap = du->capshared ? du->capshared * 2 : 256;
		struct range *v = realloc(du->shared, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		du->shared = v;
		du->capshared = cap;
	}
	du->shared[du->nshared++] = (struct range){ start, start + len };
	return 0;
}

static int range_cmp(const void *pa, const void *pb)
{
	const struct range *a = pa, *b = pb;

	return a->start < b->start ? -1 : a->start > b->start;
}

/* the bytes the shared ranges cover together (overlaps once) */
static uint64_t du_shared_union(struct du *du)
{
	uint64_t total = 0, cur_s = 0, cur_e = 0;
	bool open_range = false;

	if (du->nshared)
		qsort(du->shared, du->nshared, sizeof(*du->shared), range_cmp);
	for (size_t i = 0; i < du->nshared; i++) {
		const struct range *r = &du->shared[i];

		if (open_range && r->start <= cur_e) {
			if (r->end > cur_e)
				cur_e = r->end;
			continue;
		}
		if (open_range)
			total += cur_e - cur_s;
		cur_s = r->start;
		cur_e = r->end;
		open_range = true;
	}
	if (open_range)
		total += cur_e - cur_s;
	return total;
}

/* 1 when (dev, ino) was met before in this argument (a hard link: counted once, as btrfs-progs) */
static int du_seen(struct du *du, uint64_t dev, uint64_t ino)
{
	for (size_t i = 0; i < du->nseen; i++)
		if (du->seen[i].dev == dev && du->seen[i].ino == ino)
			return 1;
	if (du->nseen == du->capseen) {
		size_t cap = du->capseen ? du->capseen * 2 : 256;
		struct seen_ino *v = realloc(du->seen, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		du->seen = v;
		du->capseen = cap;
	}
	du->seen[du->nseen++] = (struct seen_ino){ dev, ino };
	return 0;
}

/* one extent as btrfs-progs' du counts it: inline, delalloc and unknown ones not */
struct du_file {
	struct du *du;
	uint64_t total, shared;
	bool last;
	int err;
};

static int du_extent(void *arg, const struct ub_fiemap_extent *x)
{
	struct du_file *f = arg;

	if (x->flags & FIEMAP_EXTENT_LAST)
		f->last = true;
	if (x->flags & (FIEMAP_EXTENT_UNKNOWN | FIEMAP_EXTENT_DELALLOC | FIEMAP_EXTENT_DATA_INLINE))
		return 0;
	if (!x->length)
		return 0;
	f->total += x->length;
	if (x->flags & FIEMAP_EXTENT_SHARED) {
		f->shared += x->length;
		if (du_add_shared(f->du, x->physical, x->length))
			return -ENOMEM;
	}
	return 0;
}

/* The extents of a file of a mount: the kernel's FIEMAP, or a ubtrfs mount's own (FUSE passes no FIEMAP). */
static int du_fiemap_fd(struct du *du, int fd, bool fuse, struct du_file *f)
{
	uint64_t start = 0;

	while (!f->last) {
		uint32_t n;
		struct ub_fiemap_extent x;

		if (fuse) {
			struct ubtrfs_ioctl_fiemap_args a;

			memset(&a, 0, sizeof(a));
			a.start = start;
			if (ioctl(fd, UBTRFS_IOC_FIEMAP, &a) < 0)
				return -errno;
			n = a.count > UBTRFS_FIEMAP_EXTENTS ? UBTRFS_FIEMAP_EXTENTS : a.count;
			for (uint32_t i = 0; i < n; i++) {
				x = (struct ub_fiemap_extent){ a.extents[i].logical, a.extents[i].physical,
							       a.extents[i].length, a.extents[i].flags };
				if (du_extent(f, &x))
					return -ENOMEM;
				start = x.logical + x.length;
			}
		} else {
			enum { N = 32 };
			/* struct fiemap ends in its extents: room for N of them after it */
			union {
				struct fiemap fm;
				uint8_t room[sizeof(struct fiemap) + N * sizeof(struct fiemap_extent)];
			} a;

			memset(&a, 0, sizeof(a));
			a.fm.fm_start = start;
			a.fm.fm_length = UINT64_MAX - start;
			a.fm.fm_extent_count = N;
			if (ioctl(fd, FS_IOC_FIEMAP, &a.fm) < 0)
				return -errno;
			n = a.fm.fm_mapped_extents > N ? N : a.fm.fm_mapped_extents;
			for (uint32_t i = 0; i < n; i++) {
				const struct fiemap_extent *fe = &a.fm.fm_extents[i];

				x = (struct ub_fiemap_extent){ fe->fe_logical, fe->fe_physical, fe->fe_length,
							       fe->fe_flags };
				if (du_extent(f, &x))
					return -ENOMEM;
				start = x.logical + x.length;
			}
		}
		if (n == 0)
			break;
	}
	(void)du;
	return 0;
}

static void du_line(struct du *du, uint64_t total, uint64_t excl, const uint64_t *set_shared, const char *path)
{
	char a[32], b[32], c[32];

	printf("%10s  %10s  %10s  %s\n", pretty_size(total, &du->u, a, sizeof(a)),
	       pretty_size(excl, &du->u, b, sizeof(b)), set_shared ? pretty_size(*set_shared, &du->u, c, sizeof(c)) : "-",
	       path);
}

/* ---- walking a mount ---- */

static int du_walk_path(struct du *du, const char *path, bool top, uint64_t *tot, uint64_t *excl);

static int du_walk_dir_fd(struct du *du, const char *path, uint64_t *tot, uint64_t *excl)
{
	DIR *d = opendir(path);
	struct dirent *de;

	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		char *child;
		uint64_t t = 0, e = 0;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (asprintf(&child, "%s/%s", path, de->d_name) < 0) {
			closedir(d);
			return -ENOMEM;
		}
		if (du_walk_path(du, child, false, &t, &e) == -ENOMEM) {
			free(child);
			closedir(d);
			return -ENOMEM;
		}
		*tot += t;
		*excl += e;
		free(child);
	}
	closedir(d);
	return 0;
}

static int du_walk_path(struct du *du, const char *path, bool top, uint64_t *tot, uint64_t *excl)
{
	struct stat st;
	int ret;

	*tot = *excl = 0;
	if (lstat(path, &st) < 0) {
		fprintf(stderr, "ERROR: cannot access '%s': %s\n", path, strerror(errno));
		du->rc = EXIT_PROBLEMS;
		return -errno;
	}
	if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
		return 0;
	ret = du_seen(du, st.st_dev, st.st_ino);
	if (ret)
		return ret < 0 ? ret : 0;
	if (S_ISREG(st.st_mode)) {
		struct du_file f = { .du = du };
		int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);

		ret = fd < 0 ? -errno : du_fiemap_fd(du, fd, du->t->fuse, &f);
		if (fd >= 0)
			close(fd);
		if (ret) {
			fprintf(stderr, "ERROR: cannot check space of '%s': %s\n", path, strerror(-ret));
			du->rc = EXIT_PROBLEMS;
			return ret;
		}
		*tot = f.total;
		*excl = f.total - f.shared;
	} else {
		ret = du_walk_dir_fd(du, path, tot, excl);
		if (ret) {
			fprintf(stderr, "ERROR: cannot read directory '%s': %s\n", path, strerror(-ret));
			du->rc = EXIT_PROBLEMS;
			if (ret == -ENOMEM)
				return ret;
		}
	}
	if (top) {
		uint64_t set = du_shared_union(du);

		du_line(du, *tot, *excl, &set, path);
	} else if (!du->summarize) {
		du_line(du, *tot, *excl, NULL, path);
	}
	return 0;
}

/* ---- walking devices ---- */

static int du_walk_node(struct du *du, uint64_t subvol, uint64_t ino, const char *path, bool top, uint64_t *tot,
			uint64_t *excl);

struct du_dir {
	struct du *du;
	const char *path;
	uint64_t tot, excl;
	int err;
};

static int du_dir_entry(void *arg, const struct ub_dirent *de)
{
	struct du_dir *dd = arg;
	char *child;
	uint64_t t = 0, e = 0;
	int ret;

	if (de->type != BTRFS_FT_REG_FILE && de->type != BTRFS_FT_DIR)
		return 0;
	if (asprintf(&child, "%s/%.*s", strcmp(dd->path, "/") ? dd->path : "", (int)de->name_len, de->name) < 0)
		return -ENOMEM;
	ret = du_walk_node(dd->du, de->subvol, de->ino, child, false, &t, &e);
	free(child);
	if (ret == -ENOMEM)
		return ret;
	dd->tot += t;
	dd->excl += e;
	return 0;
}

static int du_walk_node(struct du *du, uint64_t subvol, uint64_t ino, const char *path, bool top, uint64_t *tot,
			uint64_t *excl)
{
	struct ub_inode in;
	int ret;

	*tot = *excl = 0;
	ret = ub_inode_read(du->t->fs, subvol, ino, &in);
	if (ret) {
		fprintf(stderr, "ERROR: cannot access '%s': %s\n", path, strerror(-ret));
		du->rc = EXIT_PROBLEMS;
		return ret;
	}
	if (!S_ISREG(in.mode) && !S_ISDIR(in.mode))
		return 0;
	ret = du_seen(du, subvol, ino);
	if (ret)
		return ret < 0 ? ret : 0;
	if (S_ISREG(in.mode)) {
		struct du_file f = { .du = du };

		ret = ub_file_fiemap(du->t->fs, subvol, ino, 0, du_extent, &f);
		if (ret) {
			fprintf(stderr, "ERROR: cannot check space of '%s': %s\n", path, strerror(-ret));
			du->rc = EXIT_PROBLEMS;
			return ret;
		}
		*tot = f.total;
		*excl = f.total - f.shared;
	} else {
		struct du_dir dd = { du, path, 0, 0, 0 };

		ret = ub_dir_iterate(du->t->fs, subvol, ino, du_dir_entry, &dd);
		*tot = dd.tot;
		*excl = dd.excl;
		if (ret) {
			fprintf(stderr, "ERROR: cannot read directory '%s': %s\n", path, strerror(-ret));
			du->rc = EXIT_PROBLEMS;
			if (ret == -ENOMEM)
				return ret;
		}
	}
	if (top) {
		uint64_t set = du_shared_union(du);

		du_line(du, *tot, *excl, &set, path);
	} else if (!du->summarize) {
		du_line(du, *tot, *excl, NULL, path);
	}
	return 0;
}

static const char du_help[] =
	"usage: ubtrfs filesystem du [-s] [OPTIONS] PATH...\n"
	"       ubtrfs filesystem du [-s] [OPTIONS] --path P [--path P2...] DEV...\n\n"
	"Disk usage of each file and directory, as btrfs filesystem du: Total (the extents' bytes),\n"
	"Exclusive (not shared with any other file, subvolume or snapshot) and, for each argument,\n"
	"Set shared (the shared bytes below it, counted once). Inline files take no extent. On a\n"
	"ubtrfs mount the sharing is that of a commit made first.\n\n"
	"  -s, --summarize    only a total for each argument\n"
	UNITS_HELP
	OPEN_ARGS_HELP;

static int cmd_du(int argc, char **argv)
{
	static const struct option longopts[] = { { "summarize", no_argument, NULL, 's' },
						  { "path", required_argument, NULL, 0x1fe }, FS_LONGOPTS_COMMON,
						  { NULL, 0, NULL, 0 } };
	struct open_args oa;
	struct target t;
	struct du du = { .u = { UNITS_HUMAN, false }, .rc = EXIT_OK };
	const char *paths[64];
	int npaths = 0, opt, r, ret;

	open_args_init(&oa);
	optind = 1;
	while ((opt = getopt_long(argc, argv, "sbhHkmgtvq", longopts, NULL)) != -1) {
		if (units_option(opt, &du.u) || opt == 'h') {
			if (opt == 'h')
				du.u = (struct units){ UNITS_HUMAN, false };
			continue;
		}
		if ((r = open_args_parse(&oa, opt, optarg)) != 0) {
			if (r < 0)
				return usage_error("filesystem du", "invalid value '%s'", optarg);
			continue;
		}
		switch (opt) {
		case 's': du.summarize = true; break;
		case 0x1fe:
			if (npaths == (int)(sizeof(paths) / sizeof(paths[0])))
				return usage_error("filesystem du", "too many --path options");
			paths[npaths++] = optarg;
			break;
		case 0x1ff: fputs(du_help, stdout); return EXIT_OK;
		default: return usage_error("filesystem du", "invalid option");
		}
	}
	if (optind >= argc)
		return usage_error("filesystem du", "expected PATH..., or --path P DEV...");
	if (npaths) {
		ret = target_open_devs(&t, &oa, argv + optind, argc - optind, false);
		if (ret)
			return EXIT_FATAL;
		du.t = &t;
		printf("%10s  %10s  %10s  %s\n", "Total", "Exclusive", "Set shared", "Filename");
		for (int i = 0; i < npaths; i++) {
			uint64_t sv, ino, tot, excl;

			du.nshared = du.nseen = 0;
			ret = ub_path_lookup(t.fs, paths[i], &sv, &ino);
			if (ret) {
				fprintf(stderr, "ERROR: cannot access '%s': %s\n", paths[i], strerror(-ret));
				du.rc = EXIT_PROBLEMS;
				continue;
			}
			if (du_walk_node(&du, sv, ino, paths[i], true, &tot, &excl) == -ENOMEM) {
				du.rc = EXIT_FATAL;
				break;
			}
		}
		free(du.shared);
		free(du.seen);
		return fs_done(&t, &oa, du.rc);
	}
	printf("%10s  %10s  %10s  %s\n", "Total", "Exclusive", "Set shared", "Filename");
	for (int i = optind; i < argc; i++) {
		uint64_t tot, excl;

		du.nshared = du.nseen = 0;
		if (target_open_path(&t, argv[i], "filesystem du")) {
			du.rc = EXIT_PROBLEMS;
			continue;
		}
		du.t = &t;
		/* what FUSE answers is read from the trees: the sharing of a commit, made now */
		if (t.fuse && (ret = target_sync(&t)) != 0)
			fprintf(stderr, "WARNING: cannot commit on '%s' first (%s): sharing of the last commit\n", argv[i],
				strerror(-ret));
		ret = du_walk_path(&du, argv[i], true, &tot, &excl);
		target_close(&t);
		if (ret == -ENOMEM) {
			du.rc = EXIT_FATAL;
			break;
		}
	}
	free(du.shared);
	free(du.seen);
	return du.rc;
}

/* ---- label, sync ---- */

static const char label_help[] =
	"usage: ubtrfs filesystem label PATH|DEV... [NEWLABEL]\n\n"
	"Print the label, or set it to NEWLABEL (at most 255 bytes): on a mount through the ioctl\n"
	"(root only), offline in every device's superblock, committed before the command returns.\n"
	OPEN_ARGS_HELP;

static int cmd_label(int argc, char **argv)
{
	static const struct option longopts[] = { { "help", no_argument, NULL, 0x1ff }, OPEN_ARGS_LONGOPTS,
						  { NULL, 0, NULL, 0 } };
	struct open_args oa;
	struct target t;
	struct target_fsinfo fi;
	const char *newlabel = NULL;
	int opt, r, ret, nargs;
	struct stat st;

	open_args_init(&oa);
	optind = 1;
	while ((opt = getopt_long(argc, argv, "vqh", longopts, NULL)) != -1) {
		if ((r = open_args_parse(&oa, opt, optarg)) != 0) {
			if (r < 0)
				return usage_error("filesystem label", "invalid value '%s'", optarg);
			continue;
		}
		switch (opt) {
		case 'h': case 0x1ff: fputs(label_help, stdout); return EXIT_OK;
		default: return usage_error("filesystem label", "invalid option");
		}
	}
	nargs = argc - optind;
	if (nargs < 1)
		return usage_error("filesystem label", "expected PATH or DEV..., and a new label to set one");
	/*
	 * The last argument is the new label when it is no device: with a mount
	 * path there are two arguments; with devices, every device exists.
	 */
	if (nargs >= 2 && (target_args_mounted(argv + optind, 1) || stat(argv[argc - 1], &st) < 0)) {
		newlabel = argv[argc - 1];
		nargs--;
	}
	if (newlabel && strlen(newlabel) >= BTRFS_LABEL_SIZE) {
		fprintf(stderr, "ERROR: label %s is too long (max %d)\n", newlabel, BTRFS_LABEL_SIZE - 1);
		return EXIT_FATAL;
	}
	ret = fs_open(&t, &oa, argv + optind, nargs, newlabel != NULL, "filesystem label");
	if (ret)
		return ret;
	if (newlabel) {
		ret = target_set_label(&t, newlabel);
		if (ret)
			fprintf(stderr, "ERROR: unable to set label for %s: %s\n", argv[optind], strerror(-ret));
	} else {
		ret = target_fs_info(&t, &fi);
		if (ret)
			fprintf(stderr, "ERROR: unable to get label for %s: %s\n", argv[optind], strerror(-ret));
		else
			printf("%s\n", fi.label);
	}
	return fs_done(&t, &oa, ret ? EXIT_PROBLEMS : EXIT_OK);
}

static const char sync_help[] =
	"usage: ubtrfs filesystem sync PATH\n"
	"       ubtrfs filesystem sync DEV...\n\n"
	"Commit: on a mount what it holds becomes durable (BTRFS_IOC_SYNC); offline a pending fsync\n"
	"log is replayed into the trees and committed, as a mount would.\n"
	OPEN_ARGS_HELP;

static int cmd_sync(int argc, char **argv)
{
	static const struct option longopts[] = { { "help", no_argument, NULL, 0x1ff }, OPEN_ARGS_LONGOPTS,
						  { NULL, 0, NULL, 0 } };
	struct open_args oa;
	struct target t;
	int opt, r, ret;

	open_args_init(&oa);
	optind = 1;
	while ((opt = getopt_long(argc, argv, "vqh", longopts, NULL)) != -1) {
		if ((r = open_args_parse(&oa, opt, optarg)) != 0) {
			if (r < 0)
				return usage_error("filesystem sync", "invalid value '%s'", optarg);
			continue;
		}
		switch (opt) {
		case 'h': case 0x1ff: fputs(sync_help, stdout); return EXIT_OK;
		default: return usage_error("filesystem sync", "invalid option");
		}
	}
	if (optind >= argc)
		return usage_error("filesystem sync", "expected PATH, or DEV...");
	ret = fs_open(&t, &oa, argv + optind, argc - optind, true, "filesystem sync");
	if (ret)
		return ret;
	ret = target_sync(&t);
	if (ret)
		fprintf(stderr, "ERROR: sync failed on %s: %s\n", argv[optind], strerror(-ret));
	return fs_done(&t, &oa, ret ? EXIT_PROBLEMS : EXIT_OK);
}

static const char resize_help[] =
	"usage: ubtrfs filesystem resize [DEVID:][+/-]SIZE[kKmMgGtT]|[DEVID:]max MOUNTPOINT\n"
	"       ubtrfs filesystem resize [DEVID:][+/-]SIZE[kKmMgGtT]|[DEVID:]max DEV...\n\n"
	"Set the size one device (DEVID, 1 by default) gives the filesystem: SIZE bytes, SIZE more\n"
	"or less, or all of the device (max). A shrink moves the block groups past the new end\n"
	"first. On a mount point the kernel's resize ioctl; on devices nothing has mounted, the\n"
	"library.\n"
	OPEN_ARGS_HELP;

/* "[devid:][+|-]N[kmgtpe]" or "[devid:]max" */
static int parse_resize(const char *s, uint64_t *devid, int *sign, uint64_t *bytes, bool *max)
{
	const char *colon = strchr(s, ':');
	char *end;

	*devid = 1;
	*sign = 0;
	*max = false;
	if (colon) {
		*devid = strtoull(s, &end, 10);
		if (end != colon || *devid == 0)
			return -EINVAL;
		s = colon + 1;
	}
	if (!strcmp(s, "max")) {
		*max = true;
		return 0;
	}
	if (*s == '+' || *s == '-')
		*sign = *s++ == '+' ? 1 : -1;
	if (*s < '0' || *s > '9')
		return -EINVAL;
	*bytes = strtoull(s, &end, 10);
	switch (*end) {
	case 'e': case 'E': *bytes <<= 10; /* fall through */
	case 'p': case 'P': *bytes <<= 10; /* fall through */
	case 't': case 'T': *bytes <<= 10; /* fall through */
	case 'g': case 'G': *bytes <<= 10; /* fall through */
	case 'm': case 'M': *bytes <<= 10; /* fall through */
	case 'k': case 'K': *bytes <<= 10; end++; break;
	case 0: break;
	default: return -EINVAL;
	}
	return *end ? -EINVAL : 0;
}

static int cmd_resize(int argc, char **argv)
{
	static const struct option longopts[] = { { "help", no_argument, NULL, 0x1ff }, OPEN_ARGS_LONGOPTS,
						  { NULL, 0, NULL, 0 } };
	struct open_args oa;
	struct target t;
	uint64_t devid, bytes = 0, cur = 0, want;
	bool max, found = false;
	int opt, r, sign, ret;

	int nopt = argc;

	open_args_init(&oa);
	optind = 1;
	/* "-1g" (or "2:-1g") is a size, not options: the options end before it, as btrfs-progs has it */
	for (int i = 1; i < argc; i++) {
		if (argv[i][0] == '-' && argv[i][1] >= '0' && argv[i][1] <= '9') {
			nopt = i;
			break;
		}
	}
	while ((opt = getopt_long(nopt, argv, "+vqh", longopts, NULL)) != -1) {
		if ((r = open_args_parse(&oa, opt, optarg)) != 0) {
			if (r < 0)
				return usage_error("filesystem resize", "invalid value '%s'", optarg);
			continue;
		}
		switch (opt) {
		case 'h': case 0x1ff: fputs(resize_help, stdout); return EXIT_OK;
		default: return usage_error("filesystem resize", "invalid option");
		}
	}
	if (argc - optind < 2)
		return usage_error("filesystem resize", "expected a size and a mount point or DEV...");
	if (parse_resize(argv[optind], &devid, &sign, &bytes, &max))
		return usage_error("filesystem resize", "invalid size '%s'", argv[optind]);
	if (target_args_mounted(argv + optind + 1, argc - optind - 1)) {
		struct btrfs_ioctl_vol_args va;

		if (target_open_path(&t, argv[optind + 1], "filesystem resize"))
			return EXIT_FATAL;
		memset(&va, 0, sizeof(va));
		snprintf(va.name, sizeof(va.name), "%s", argv[optind]);
		ret = ioctl(t.fd, BTRFS_IOC_RESIZE, &va) < 0 ? -errno : 0;
		if (ret)
			fprintf(stderr, "ERROR: unable to resize '%s': %s\n", argv[optind + 1], strerror(-ret));
		return fs_done(&t, &oa, ret ? EXIT_PROBLEMS : EXIT_OK);
	}
	if (target_open_devs(&t, &oa, argv + optind + 1, argc - optind - 1, true))
		return EXIT_FATAL;
	{
		struct ub_device_info *devs = NULL;
		int n = 0;

		ret = ub_volume_list_devices(ub_fs_volume(t.fs), &devs, &n);
		for (int i = 0; !ret && i < n; i++) {
			if (devs[i].devid == devid && !devs[i].missing) {
				cur = devs[i].total_bytes;
				found = true;
			}
		}
		free(devs);
	}
	if (!ret && !found) {
		fprintf(stderr, "ERROR: the filesystem has no device %llu present\n", (unsigned long long)devid);
		return fs_done(&t, &oa, EXIT_FATAL);
	}
	want = max ? UINT64_MAX : sign > 0 ? cur + bytes : sign < 0 ? (bytes > cur ? 0 : cur - bytes) : bytes;
	if (!ret)
		ret = ub_engine_device_resize(t.e, devid, want);
	if (ret) {
		fprintf(stderr, "ERROR: unable to resize device %llu: %s\n", (unsigned long long)devid, strerror(-ret));
		return fs_done(&t, &oa, ret == -EINVAL ? EXIT_FATAL : EXIT_PROBLEMS);
	}
	if (oa.verbosity >= UB_LOG_WARN)
		printf("Resize device id %llu from %llu to %s\n", (unsigned long long)devid, (unsigned long long)cur,
		       max ? "max" : argv[optind]);
	return fs_done(&t, &oa, EXIT_OK);
}

int cmd_filesystem(int argc, char **argv)
{
	static const struct {
		const char *name;
		int (*fn)(int, char **);
	} subs[] = {
		{ "show", cmd_show }, { "df", cmd_df }, { "usage", cmd_usage }, { "du", cmd_du },
		{ "label", cmd_label }, { "sync", cmd_sync }, { "resize", cmd_resize },
	};

	if (argc < 2)
		return usage_error("filesystem", "expected a subcommand: show, df, usage, du, label, sync, resize");
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
		fputs(help, stdout);
		return EXIT_OK;
	}
	for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++)
		if (!strcmp(argv[1], subs[i].name))
			return subs[i].fn(argc - 1, argv + 1);
	return usage_error("filesystem", "unknown subcommand '%s'", argv[1]);
}
