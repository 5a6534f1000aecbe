/* SPDX-License-Identifier: MIT */
/*
 * Drives NODATACOW writes through the file API for tests/integration/test_nocow.py:
 *
 *   nocow_driver SCRIPT DEV...
 *
 * SCRIPT, one command a line, on names in the top directory of subvolume 5:
 *   create NAME | nocow NAME | write NAME OFF LEN BYTE | fallocate NAME OFF LEN | snapshot NAME | commit
 * (write fills with one byte value). The verdict is the test's: where the
 * extents lie (dump-tree), btrfs check and the kernel's mount.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ubtrfs/format.h"
#include "ubtrfs/fswrite.h"
#include "ubtrfs/engine.h"

#define FS BTRFS_FS_TREE_OBJECTID
#define TOP BTRFS_FIRST_FREE_OBJECTID

static int lookup(struct ub_txn *t, const char *name, uint64_t *ino)
{
	uint8_t type;

	return ub_fsw_lookup(t, FS, TOP, name, strlen(name), ino, &type);
}

static int run(struct ub_engine *e, struct ub_txn **t, char *line)
{
	char cmd[32], name[256];
	unsigned long long off = 0, len = 0;
	unsigned byte = 0;
	uint64_t ino, id;
	int n = sscanf(line, "%31s %255s %llu %llu %u", cmd, name, &off, &len, &byte), ret;

	if (n >= 1 && !strcmp(cmd, "commit")) {
		ret = ub_txn_commit(*t);
		*t = NULL;
		return ret ? ret : ub_txn_start(e, t);
	}
	if (n < 2)
		return -EINVAL;
	if (!strcmp(cmd, "create"))
		return ub_fsw_create(*t, FS, TOP, name, strlen(name), S_IFREG | 0644, 0, 0, 0, &ino);
	if (!strcmp(cmd, "snapshot"))
		return ub_fsw_snapshot(*t, FS, FS, TOP, name, strlen(name), false, &id);
	ret = lookup(*t, name, &ino);
	if (ret)
		return ret;
	if (!strcmp(cmd, "nocow"))
		return ub_fsw_set_flags(*t, FS, ino, UB_INODE_NODATACOW, 0);
	if (!strcmp(cmd, "fallocate") && n >= 4)
		return ub_fsw_fallocate(*t, FS, ino, off, len, 0);
	if (!strcmp(cmd, "write") && n == 5) {
		uint8_t *buf = malloc(len ? len : 1);

		if (!buf)
			return -ENOMEM;
		memset(buf, (int)byte, len);
		ret = ub_fsw_write(*t, FS, ino, off, buf, len);
		free(buf);
		return ret;
	}
	return -EINVAL;
}

int main(int argc, char **argv)
{
	struct ub_engine *e = NULL;
	struct ub_txn *t = NULL;
	char line[512];
	FILE *f;
	int ret;

	if (argc < 3) {
		fprintf(stderr, "usage: nocow_driver SCRIPT DEV...\n");
		return 2;
	}
	f = fopen(argv[1], "r");
	if (!f) {
		perror(argv[1]);
		return 2;
	}
	ret = ub_engine_open((const char *const *)argv + 2, argc - 2, NULL, &e);
	if (!ret)
		ret = ub_txn_start(e, &t);
	while (!ret && fgets(line, sizeof(line), f)) {
		if (line[0] == '\n' || line[0] == '#')
			continue;
		ret = run(e, &t, line);
		if (ret)
			fprintf(stderr, "nocow_driver: %s", line);
	}
	fclose(f);
	if (!ret && t) {
		ret = ub_txn_commit(t);
		t = NULL;
	}
	if (t)
		ub_txn_abort(t);
	if (e)
		ub_engine_close(e);
	if (ret) {
		fprintf(stderr, "nocow_driver: %s\n", strerror(-ret));
		return 1;
	}
	return 0;
}
