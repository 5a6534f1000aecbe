/* SPDX-License-Identifier: MIT */
/* ubtrfs filesystem show: the devices of a filesystem, which are present and which missing. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "cmd.h"

static const char help[] =
	"usage: ubtrfs filesystem show [OPTIONS] DEV...\n\n"
	"Show the filesystem on DEV...: label, uuid, generation, and each device by devid with its size\n"
	"and path, or MISSING.\n\n"
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

static int by_devid(const void *a, const void *b)
{
	const struct ub_vdev *x = *(const struct ub_vdev *const *)a, *y = *(const struct ub_vdev *const *)b;

	return x->devid < y->devid ? -1 : x->devid > y->devid;
}

static int show(const struct ub_volume *vol, bool json)
{
	char label[UB_LABEL_SIZE + 1], uuid[40];
	int missing = 0;
	/* devid order (the volume keeps them in the order they were found); a hostile chunk tree has many */
	const struct ub_vdev **order = malloc(sizeof(*order) * (size_t)(vol->nvdevs ? vol->nvdevs : 1));

	if (!order) {
		fprintf(stderr, "ubtrfs: error: out of memory listing %d devices\n", vol->nvdevs);
		return EXIT_FATAL;
	}
	for (int i = 0; i < vol->nvdevs; i++)
		order[i] = &vol->vdevs[i];
	qsort(order, (size_t)vol->nvdevs, sizeof(*order), by_devid);

	memcpy(label, UB_PTR(ub_disk_super, label, vol->super), UB_LABEL_SIZE);
	label[UB_LABEL_SIZE] = 0;
	for (char *p = label; *p; p++)
		if ((unsigned char)*p < 0x20)
			*p = '?';
	ub_uuid_str(vol->fsid, uuid);
	for (int i = 0; i < vol->nvdevs; i++)
		missing += vol->vdevs[i].missing;
	if (json) {
		printf("{\"label\": ");
		print_label_json(label);
		printf(", \"uuid\": \"%s\", \"generation\": %llu, \"num_devices\": %llu, \"bytes_used\": %llu, "
		       "\"devices\": [",
		       uuid, (unsigned long long)vol->generation, (unsigned long long)vol->num_devices,
		       (unsigned long long)UB_GET(ub_disk_super, bytes_used, vol->super));
		for (int i = 0; i < vol->nvdevs; i++) {
			const struct ub_vdev *v = order[i];
			printf("%s{\"devid\": %llu, \"size\": %llu, \"missing\": %s, \"path\": ", i ? ", " : "",
			       (unsigned long long)v->devid, (unsigned long long)v->total_bytes,
			       v->missing ? "true" : "false");
			if (v->dev)
				print_label_json(v->dev->path);
			else
				printf("null");
			printf("}");
		}
		printf("]}\n");
	} else {
		printf("Label: %s  uuid: %s\n", label[0] ? label : "none", uuid);
		printf("\tTotal devices %llu FS bytes used %llu generation %llu\n", (unsigned long long)vol->num_devices,
		       (unsigned long long)UB_GET(ub_disk_super, bytes_used, vol->super),
		       (unsigned long long)vol->generation);
		for (int i = 0; i < vol->nvdevs; i++) {
			const struct ub_vdev *v = order[i];
			printf("\tdevid %4llu size %llu path %s\n", (unsigned long long)v->devid,
			       (unsigned long long)v->total_bytes, v->missing ? "<MISSING>" : v->dev->path);
		}
		if (missing)
			printf("\t*** Some devices missing (%d)\n", missing);
	}
	if (missing) {
		const struct ub_vdev *first = NULL;
		for (int i = 0; i < vol->nvdevs && !first; i++)
			if (vol->vdevs[i].missing)
				first = &vol->vdevs[i];
		fprintf(stderr, "ubtrfs: error: %d of %d devices missing (devid %llu%s)\n", missing, vol->nvdevs,
			(unsigned long long)first->devid, missing > 1 ? " and others" : "");
	}
	free(order);
	return missing ? EXIT_PROBLEMS : EXIT_OK;
}

int cmd_filesystem(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "json", no_argument, NULL, 0x400 }, { "help", no_argument, NULL, 'h' },
		OPEN_ARGS_LONGOPTS, { NULL, 0, NULL, 0 },
	};
	struct open_args oa;
	struct ub_fs *fs;
	bool json = false;
	int opt, r, rc;

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
	if (optind >= argc)
		return usage_error("filesystem show", "no device given");
	oa.no_log = true; /* devices only: no need to replay the fsync log */
	if (open_fs(&oa, argv + optind, argc - optind, &fs) == 0) {
		rc = show(fs->vol, json);
		ub_fs_close(fs);
		return final_rc(&oa, rc);
	}
	/* the chunk tree is out of reach: the superblocks alone still say which devices there are */
	{
		struct ub_volume *vol;
		struct ub_log log = { .fn = NULL, .arg = NULL, .verbosity = UB_LOG_ERROR, .errors = NULL };
		if (ub_volume_open((const char *const *)argv + optind, argc - optind, NULL, &log, &vol))
			return EXIT_FATAL;
		fprintf(stderr, "ubtrfs: warning: devices from the superblocks only (sizes of devices not given are unknown)\n");
		show(vol, json);
		ub_volume_close(vol);
		return EXIT_PROBLEMS;
	}
}
