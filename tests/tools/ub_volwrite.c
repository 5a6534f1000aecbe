/* SPDX-License-Identifier: MIT */
/*
 * Test tool: write a file's bytes at a logical address of a btrfs through
 * ub_volume_write (every copy; RAID5/6 parity recomputed), then flush.
 *
 *   ub_volwrite LOGICAL DATAFILE DEVICE...
 *
 * The chunk tree is read through the filesystem opener; nothing but the
 * given range (and its parity) is written. Exit 0 on success; prints
 * "skipped N" (device writes left out for missing devices).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ubtrfs/fs.h"
#include "fs/fs_priv.h"
#include "ubtrfs/volume.h"

int main(int argc, char **argv)
{
	struct ub_fs_opts opts = { .writable = true, .super_mirror = -1, .no_log = true };
	struct ub_fs *fs;
	uint64_t logical;
	char *end;
	uint8_t *data;
	long len;
	FILE *f;
	int ret;

	if (argc < 4) {
		fprintf(stderr, "usage: %s LOGICAL DATAFILE DEVICE...\n", argv[0]);
		return 2;
	}
	errno = 0;
	logical = strtoull(argv[1], &end, 0);
	if (errno || *end) {
		fprintf(stderr, "bad logical address %s\n", argv[1]);
		return 2;
	}
	f = fopen(argv[2], "rb");
	if (!f || fseek(f, 0, SEEK_END) || (len = ftell(f)) < 0 || fseek(f, 0, SEEK_SET)) {
		fprintf(stderr, "%s: cannot read\n", argv[2]);
		return 2;
	}
	data = malloc(len ? (size_t)len : 1);
	if (!data || fread(data, 1, (size_t)len, f) != (size_t)len) {
		fprintf(stderr, "%s: cannot read\n", argv[2]);
		return 2;
	}
	fclose(f);
	ret = ub_fs_open((const char *const *)argv + 3, argc - 3, &opts, NULL, &fs);
	if (ret) {
		fprintf(stderr, "open: %s\n", strerror(-ret));
		free(data);
		return 1;
	}
	ret = ub_volume_write(fs->vol, logical, (uint64_t)len, data);
	if (!ret)
		ret = ub_volume_flush(fs->vol);
	if (ret)
		fprintf(stderr, "write of %ld bytes at %" PRIu64 ": %s\n", len, logical, strerror(-ret));
	else
		printf("skipped %" PRIu64 "\n", fs->vol->writes_skipped);
	ub_fs_close(fs);
	free(data);
	return ret ? 1 : 0;
}
