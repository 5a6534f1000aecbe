/* SPDX-License-Identifier: MIT */
/*
 * What a crash test compares with its model, in one process (the read side,
 * as `ubtrfs ls` and `ubtrfs cat` open it): one line per entry of the top
 * directory of the FS tree, in index order,
 *
 *   NAME TYPE SIZE SHA256      (regular files; other entries: NAME TYPE - -)
 *
 * then "generation G errors E" (E: log errors plus unreadable bytes).
 *
 *   tree_digest DEV...
 *
 * Exit: 0 read whole, 1 something could not be read, 2 no filesystem.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <openssl/evp.h>

#include "ubtrfs/fs.h"
#include "ubtrfs/volume.h"
#include "fs/fs_priv.h"

struct walk {
	struct ub_fs *fs;
	unsigned long long bad;
};

static int digest_file(struct walk *w, const struct ub_dirent *de, uint64_t size, char hex[65])
{
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	struct ub_read_report rep = { 0 };
	unsigned char h[32];
	unsigned hl = 0;
	uint8_t *buf = malloc(1 << 20);
	uint64_t off = 0;
	int ret = ctx && buf ? 0 : -ENOMEM;

	if (!ret)
		EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
	while (!ret && off < size) {
		uint64_t got = 0;
		int r = ub_file_read(w->fs, de->subvol, de->ino, off, 1 << 20, buf, &got, &rep);
		if (r == -EIO)
			w->bad++; /* zeros where nothing could be read: the digest will not match */
		else if (r)
			ret = r;
		if (!ret && got == 0)
			ret = -EUCLEAN;
		if (!ret)
			EVP_DigestUpdate(ctx, buf, got);
		off += got;
	}
	ub_read_report_flush(w->fs, &rep);
	if (!ret) {
		EVP_DigestFinal_ex(ctx, h, &hl);
		for (int i = 0; i < 32; i++)
			sprintf(hex + 2 * i, "%02x", h[i]);
	}
	EVP_MD_CTX_free(ctx);
	free(buf);
	return ret;
}

static int one_entry(void *arg, const struct ub_dirent *de)
{
	struct walk *w = arg;
	struct ub_inode in;
	char name[1024], hex[65] = "-";
	int ret = ub_dirent_inode(w->fs, de, &in);

	ub_name_escape(de->name, de->name_len, name, sizeof(name));
	if (!ret && S_ISREG(in.mode))
		ret = digest_file(w, de, in.size, hex);
	if (ret) {
		fprintf(stderr, "tree_digest: %s: %s\n", name, strerror(-ret));
		w->bad++;
		return 0;
	}
	if (S_ISREG(in.mode))
		printf("%s file %llu %s\n", name, (unsigned long long)in.size, hex);
	else
		printf("%s %s - -\n", name, S_ISDIR(in.mode) ? "dir" : "other");
	return 0;
}

int main(int argc, char **argv)
{
	struct ub_fs_opts opts = { .writable = false, .super_mirror = -1 };
	unsigned errors = 0;
	struct ub_log log = { .fn = NULL, .arg = NULL, .verbosity = UB_LOG_WARN, .errors = &errors };
	struct walk w = { 0 };
	int ret;

	if (argc < 2) {
		fprintf(stderr, "usage: tree_digest DEV...\n");
		return 2;
	}
	ret = ub_fs_open((const char *const *)argv + 1, argc - 1, &opts, &log, &w.fs);
	if (ret) {
		fprintf(stderr, "tree_digest: open: %s\n", strerror(-ret));
		return 2;
	}
	ret = ub_dir_iterate(w.fs, BTRFS_FS_TREE_OBJECTID, BTRFS_FIRST_FREE_OBJECTID, one_entry, &w);
	if (ret) {
		fprintf(stderr, "tree_digest: top directory: %s\n", strerror(-ret));
		w.bad++;
	}
	printf("generation %llu errors %llu\n", (unsigned long long)w.fs->vol->generation, w.bad + errors);
	ub_fs_close(w.fs);
	return w.bad + errors ? 1 : 0;
}
