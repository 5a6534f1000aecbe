/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the whole read path: a small real image (made by
 * tests/fuzz/make-images with mkfs.btrfs --rootdir and with the kernel,
 * compressed files, a snapshot, a pending fsync log) held in memory behind a
 * memory device, changed by a list of mutations, then opened and walked like
 * the commands do: every tree printed (dump-tree), every subvolume listed
 * (ls -R), every file read to the end (cat), symlinks and xattrs read, with or
 * without replaying the fsync log.
 *
 * The input is not an image but a compact description of what to change
 * (every whole-image target takes it, through image_harness.c):
 *   byte 0  image (modulo the number of images loaded)
 *   byte 1  bit 0: ignore the fsync log (no replay); the other bits are the
 *           target's own (fuzz_check, fuzz_restore say what they mean)
 *   then up to FUZZ_MAX_MUT entries of 16 bytes:
 *     u16 block   index into the image's tree blocks; the number of blocks
 *                 (after reduction) means the superblock
 *     u16 offset  byte offset in the block (modulo its size)
 *     u8  op      bits 0-1 width 1/2/4/8 bytes; bits 2-3 set/add/xor/copy
 *                 (copy: the value is a second offset in the same block);
 *                 bit 4: first copy only (DUP, superblock mirrors);
 *                 bit 5: leave the checksum stale
 *     u8, u16     unused
 *     u64 value   little-endian
 * After the mutations, each touched block's checksum is recomputed (unless
 * asked not to) so the block is read and checked rather than rejected early.
 *
 * LLVMFuzzerCustomMutator writes these entries knowing the structure of the
 * block it picked: header fields, keys, node pointers (other blocks' addresses,
 * generations), leaf item offsets/sizes, and the fields of the item types the
 * reader interprets; values are boundary values, small deltas or values taken
 * from elsewhere in the image. libFuzzer's own mutations still run on a share
 * of the inputs, which carries its comparison hints into the values.
 *
 * Images are found in $UBTRFS_FUZZ_IMAGES or the source tree's tests/fuzz/images.
 * At exit the target prints how many executions opened the filesystem and how
 * many read file data from a regular (on-disk) extent.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ubtrfs/format.h"
#include "ubtrfs/fs.h"
#include "fs/fs_priv.h"
#include "image_harness.h"

/* Bounds on one execution: exceeding them is not an error, the walk just stops there. */
#define FUZZ_MAX_ENTRIES 4096     /* directory entries visited */
#define FUZZ_MAX_FILE (4U << 20)  /* bytes read from one file */
#define FUZZ_MAX_READ (32U << 20) /* bytes read in all */
#define FUZZ_MAX_DEPTH 64

/* ---- the filesystem walk: ls -R, cat, readlink, xattrs ---- */

struct ent {
	char name[UB_NAME_LEN + 1];
	uint32_t name_len;
	uint64_t subvol, ino;
	uint8_t type;
};

struct entlist {
	struct ent *v;
	int n, cap;
};

static int collect(void *arg, const struct ub_dirent *de)
{
	struct entlist *l = arg;

	if (l->n >= FUZZ_MAX_ENTRIES)
		return 1;
	if (l->n == l->cap) {
		int cap = l->cap ? l->cap * 2 : 16;
		struct ent *v = realloc(l->v, sizeof(*v) * (size_t)cap);
		if (!v)
			return -ENOMEM;
		l->v = v;
		l->cap = cap;
	}
	if (de->name_len > UB_NAME_LEN)
		abort(); /* the directory layer let an over-long name through */
	memcpy(l->v[l->n].name, de->name, de->name_len);
	l->v[l->n].name[de->name_len] = 0;
	l->v[l->n].name_len = de->name_len;
	l->v[l->n].subvol = de->subvol;
	l->v[l->n].ino = de->ino;
	l->v[l->n].type = de->type;
	l->n++;
	return 0;
}

static volatile uint8_t touched;

static int xattr_cb(void *arg, const struct ub_xattr *xa)
{
	(void)arg;
	/* touch every byte so ASan checks the ranges handed out */
	for (uint32_t i = 0; i < xa->name_len; i++)
		touched += (uint8_t)xa->name[i];
	for (uint32_t i = 0; i < xa->value_len; i++)
		touched += xa->value[i];
	return 0;
}

/* Whether the file's bytes come (at least partly) from an on-disk extent rather than inline data. */
static bool has_regular_extent(struct ub_fs *fs, uint64_t subvol, uint64_t ino)
{
	struct ub_key key = { ino, BTRFS_EXTENT_DATA_KEY, 0 };
	struct ub_root root;
	struct ub_path p;
	bool found = false;
	int ret;

	if (ub_fs_tree_root(fs, subvol, &root))
		return false;
	ub_path_init(&p);
	ret = ub_tree_search(&fs->tc, &root, &key, &p);
	ret = ret == 2 ? 1 : (ret < 0 ? ret : 0);
	while (ret == 0 && !found) {
		uint32_t size;
		const uint8_t *d = ub_path_data(&p, &size);

		ub_path_key(&p, &key);
		if (key.objectid != ino || key.type != BTRFS_EXTENT_DATA_KEY)
			break;
		if (size >= sizeof(struct btrfs_file_extent_item) &&
		    UB_GET(btrfs_file_extent_item, type, d) != BTRFS_FILE_EXTENT_INLINE &&
		    UB_GET(btrfs_file_extent_item, disk_bytenr, d) != 0)
			found = true;
		ret = ub_tree_next(&p);
	}
	ub_path_release(&p);
	return found;
}

static void read_file(struct walk *w, uint64_t subvol, uint64_t ino, uint64_t isize)
{
	enum { CAP = 256 * 1024 };
	static uint8_t *buf;
	uint64_t off = 0, limit = isize < FUZZ_MAX_FILE ? isize : FUZZ_MAX_FILE;
	bool clean = true, any = false;

	if (!buf && !(buf = malloc(CAP)))
		abort();
	while (off < limit && w->bytes_read < FUZZ_MAX_READ) {
		uint64_t want = limit - off < CAP ? limit - off : CAP, got = 0;
		struct ub_read_report rep = { 0, 0 };
		/* at the end of the heap buffer, so a write past `want` lands in ASan's redzone */
		int ret = ub_file_read(w->fs, subvol, ino, off, want, buf + CAP - want, &got, &rep);

		if (got > want)
			abort(); /* more than asked for: the buffer overflowed */
		if (ret)
			clean = false;
		if (ret && ret != -EIO)
			break;
		if (got == 0)
			break;
		any = true;
		w->bytes_read += got;
		off += got;
	}
	if (any) {
		w->read_any = true;
		if (clean && !w->read_regular && has_regular_extent(w->fs, subvol, ino))
			w->read_regular = true;
	}
}

static void walk_dir(struct walk *w, uint64_t subvol, uint64_t dir, int depth, char *path, size_t plen)
{
	struct entlist l = { NULL, 0, 0 };

	if (depth > FUZZ_MAX_DEPTH || w->entries >= FUZZ_MAX_ENTRIES)
		return;
	ub_dir_iterate(w->fs, subvol, dir, collect, &l);
	for (int i = 0; i < l.n && w->entries < FUZZ_MAX_ENTRIES; i++) {
		struct ent *e = &l.v[i];
		struct ub_dirent de;
		struct ub_inode ino;
		char link[64];
		size_t llen;

		w->entries++;
		ub_dir_lookup(w->fs, subvol, dir, e->name, e->name_len, &de);
		if (ub_inode_read(w->fs, e->subvol, e->ino, &ino))
			continue;
		ub_xattr_iterate(w->fs, e->subvol, e->ino, xattr_cb, NULL);
		/* resolve the path again from the top, as a path argument would be */
		if (subvol == BTRFS_FS_TREE_OBJECTID && depth < 3 && plen + 1 + e->name_len < 1024) {
			uint64_t sv, in;

			path[plen] = '/';
			memcpy(path + plen + 1, e->name, e->name_len + 1);
			ub_path_lookup(w->fs, path, &sv, &in);
		}
		switch (ino.mode & S_IFMT) {
		case S_IFDIR:
			/* subvolumes are walked on their own; a directory that is its own ancestor stops at the depth bound */
			if (e->subvol == subvol && e->ino != dir)
				walk_dir(w, subvol, e->ino, depth + 1, path,
					 plen + 1 + e->name_len < 1024 && depth < 3 ? plen + 1 + e->name_len : plen);
			break;
		case S_IFREG:
			read_file(w, e->subvol, e->ino, ino.size);
			break;
		case S_IFLNK:
			ub_readlink(w->fs, e->subvol, e->ino, link, sizeof(link), &llen);
			if (strnlen(link, sizeof(link)) == sizeof(link))
				abort();
			break;
		}
		path[plen] = 0;
	}
	free(l.v);
}


/* ---- statistics ---- */

static unsigned long long st_execs, st_opened, st_regular, st_any;

static void print_stats(void)
{
	if (!st_execs)
		return;
	fprintf(stderr,
		"fuzz_image: %llu executions: %.1f%% opened the filesystem, %.1f%% read file data from a regular "
		"extent (verified), %.1f%% read some file bytes\n",
		st_execs, 100.0 * (double)st_opened / (double)st_execs, 100.0 * (double)st_regular / (double)st_execs,
		100.0 * (double)st_any / (double)st_execs);
}


int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fuzz_images_load("fuzz_image");
	atexit(print_stats);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fimage *img = fuzz_apply(data, size);
	struct ub_fs *fs = NULL;
	uint64_t subvols[64];
	int nsub = 0;
	struct walk w;
	char path[1024];

	if (!img)
		return 0;
	st_execs++;
	if (fuzz_open_image(img, data[1] & 1, &fuzz_quiet_log, &fs) == 0) {
		st_opened++;
		memset(&w, 0, sizeof(w));
		w.fs = fs;
		w.out = fuzz_print_open();
		fuzz_walk_all_trees(&w, subvols, &nsub, 64);
		fclose(w.out);
		w.out = NULL;
		path[0] = 0;
		walk_dir(&w, BTRFS_FS_TREE_OBJECTID, BTRFS_FIRST_FREE_OBJECTID, 0, path, 0);
		for (int i = 0; i < nsub; i++)
			if (subvols[i] >= BTRFS_FIRST_FREE_OBJECTID && subvols[i] <= BTRFS_LAST_FREE_OBJECTID)
				walk_dir(&w, subvols[i], BTRFS_FIRST_FREE_OBJECTID, 0, path, 0);
		st_regular += w.read_regular;
		st_any += w.read_any;
		ub_fs_close(fs);
	}
	fuzz_undo(img);
	return 0;
}
