/* SPDX-License-Identifier: MIT */
/* ubtrfs filesystem show: the devices of a filesystem, which are present and which missing. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "cmd.h"
#include "ubtrfs/devinfo.h"
#include "ubtrfs/fsinfo.h"
#include "ubtrfs/scan.h"

static const char help[] =
	"usage: ubtrfs filesystem show [OPTIONS] [DEV...]\n\n"
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

int cmd_filesystem(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "json", no_argument, NULL, 0x400 }, { "help", no_argument, NULL, 'h' },
		OPEN_ARGS_LONGOPTS, { NULL, 0, NULL, 0 },
	};
	struct open_args oa;
	bool json = false;
	int opt, r;

	if (argc < 2 || (strcmp(argv[1], "show") && strcmp(argv[1], "--help") && strcmp(argv[1], "-h")))
		return usage_error("filesystem", "expected a subcommand: show");
	if (strcmp(argv[1], "show")) {
		fputs(help, stdout);
		return EXIT_OK;
	}
	argc--;
	argv++;
	open_args_init(&oa);
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
