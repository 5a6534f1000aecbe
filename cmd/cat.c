/* SPDX-License-Identifier: MIT */
/* ubtrfs cat: a file's bytes to stdout, verified against the data checksums. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "cmd.h"
#include "dirlist.h"

static const char help[] =
	"usage: ubtrfs cat [OPTIONS] --path P DEV...\n\n"
	"Write the contents of file P to standard output without mounting.\n"
	"Every block is checked against its checksum; a bad copy is skipped for a good one.\n"
	"Parts that no copy holds correctly are written as zeros and reported on stderr\n"
	"with their file offset and logical address; an error repeated over a large extent\n"
	"is printed once and then counted. A file extent item that contradicts the format\n"
	"is named and ends the output at its file offset.\n\n"
	"      --path P       the file, an absolute path (it may cross into subvolumes)\n"
	"  -h, --help         this text\n"
	OPEN_ARGS_HELP
	"\nExit codes: 0 the whole file was read, 1 parts of it could not be read or have\n"
	"no checksum although the file requires them (a checksum hole: written as read)\n"
	"or a corrupt extent item stopped the output,\n"
	"2 usage or fatal error (no such file, not a regular file, not btrfs).\n";

#define CHUNK (4U << 20)

int cmd_cat(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "path", required_argument, NULL, 'p' }, { "help", no_argument, NULL, 'h' },
		OPEN_ARGS_LONGOPTS, { NULL, 0, NULL, 0 },
	};
	struct open_args oa;
	struct ub_fs *fs = NULL;
	struct ub_read_report rep = { 0, 0 };
	struct ub_inode in;
	const char *path = NULL;
	char *shown = NULL; /* the path for messages, escaped as names are in every message */
	uint64_t subvol, ino, off = 0;
	uint8_t *buf = NULL;
	int opt, r, ret, rc = EXIT_OK;

	open_args_init(&oa);
	while ((opt = getopt_long(argc, argv, "hvq", longopts, NULL)) != -1) {
		if ((r = open_args_parse(&oa, opt, optarg)) != 0) {
			if (r < 0)
				return usage_error("cat", "invalid value '%s'", optarg);
			continue;
		}
		switch (opt) {
		case 'p': path = optarg; break;
		case 'h': fputs(help, stdout); return EXIT_OK;
		default: return usage_error("cat", "invalid option");
		}
	}
	if (!path)
		return usage_error("cat", "--path is required");
	if (optind >= argc)
		return usage_error("cat", "no device given");
	shown = name_shown(path, strlen(path));
	if (!shown) {
		fprintf(stderr, "ubtrfs: error: out of memory\n");
		return EXIT_FATAL;
	}
	if (open_fs(&oa, argv + optind, argc - optind, &fs)) {
		free(shown);
		return EXIT_FATAL;
	}
	ret = ub_path_lookup(fs, path, &subvol, &ino);
	if (!ret)
		ret = ub_inode_read(fs, subvol, ino, &in);
	if (ret) {
		fprintf(stderr, "ubtrfs: error: %s: %s\n", shown, strerror(-ret));
		rc = EXIT_FATAL;
		goto out;
	}
	if (!S_ISREG(in.mode)) {
		fprintf(stderr, "ubtrfs: error: %s: not a regular file\n", shown);
		rc = EXIT_FATAL;
		goto out;
	}
	buf = malloc(CHUNK);
	if (!buf) {
		rc = EXIT_FATAL;
		goto out;
	}
	while (off < in.size) {
		uint64_t got = 0;
		ret = ub_file_read(fs, subvol, ino, off, CHUNK, buf, &got, &rep);
		if (ret == -EUCLEAN) {
			/* a corrupt extent item (named already): what came before it is still good */
			if (got && fwrite(buf, 1, got, stdout) != got) {
				fprintf(stderr, "ubtrfs: error: writing to stdout: %s\n", strerror(errno));
				rc = EXIT_FATAL;
				break;
			}
			fprintf(stderr, "ubtrfs: error: %s: corrupt file extent at file offset %llu; output stops there\n",
				shown, (unsigned long long)(off + got));
			rc = EXIT_PROBLEMS;
			break;
		}
		if (ret && ret != -EIO) {
			fprintf(stderr, "ubtrfs: error: %s: read failed at file offset %llu: %s\n", shown,
				(unsigned long long)off, strerror(-ret));
			rc = EXIT_FATAL;
			break;
		}
		if (got == 0)
			break;
		if (fwrite(buf, 1, got, stdout) != got) {
			fprintf(stderr, "ubtrfs: error: writing to stdout: %s\n", strerror(errno));
			rc = EXIT_FATAL;
			break;
		}
		off += got;
	}
	ub_read_report_flush(fs, &rep);
	if (rep.bad_bytes && rc == EXIT_OK) {
		fprintf(stderr, "ubtrfs: error: %s: %llu bytes could not be read (first at file offset %llu); written as zeros\n",
			shown, (unsigned long long)rep.bad_bytes, (unsigned long long)rep.first_bad_offset);
		rc = EXIT_PROBLEMS;
	}
	if (rep.unverified_bytes) {
		fprintf(stderr, "ubtrfs: error: %s: %llu bytes have no data checksum although the file requires them "
			"(first at file offset %llu): written as read, not verified\n", shown,
			(unsigned long long)rep.unverified_bytes, (unsigned long long)rep.first_unverified_offset);
		if (rc == EXIT_OK)
			rc = EXIT_PROBLEMS;
	}
out:
	if (fflush(stdout) && rc == EXIT_OK)
		rc = EXIT_FATAL;
	free(buf);
	free(shown);
	ub_fs_close(fs);
	return final_rc(&oa, rc);
}
