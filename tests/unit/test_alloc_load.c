/* SPDX-License-Identifier: MIT */
/*
 * Block groups and free space loaded from real filesystems (ub_alloc_load),
 * against what `btrfs inspect-internal dump-tree` prints for the same image:
 *
 *  - every BLOCK_GROUP_ITEM (start, length, used) is a group;
 *  - each group's free space equals the group minus the EXTENT_ITEM /
 *    METADATA_ITEM ranges dump-tree lists, both when loaded from the free
 *    space tree and from the extent tree alone;
 *  - with a free space tree, its FREE_SPACE_EXTENT items (or, in bitmap form,
 *    its extent count) are exactly that set;
 *  - superblock mirror stripes (placed by the layout rule for single/DUP,
 *    computed here independently) are never available;
 *  - damaged items (used that disagrees with the free space, a wrong
 *    extent_count) are refused with -EUCLEAN.
 *
 * Images: mkfs.btrfs at setup (skipped without it); one fragmented by the
 * kernel (loop mount, needs root; skipped otherwise) so that the free space
 * tree switches to bitmaps.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ubtrfs/fs.h"
#include "fs/fs_priv.h"
#include "alloc/alloc_internal.h"
#include "tree/roots.h"
#include "scratch.h"

enum { IMG_DEFAULT, IMG_NOFST, IMG_MIXED, IMG_ROOTDIR, IMG_64K, IMG_KERNEL, IMG_R5, IMG_R6, IMG_R10, IMG_R0, NIMG };

#define MAXDEV 4

struct env {
	char dir[64];
	char img[NIMG][128];            /* device 1 */
	char dev[NIMG][MAXDEV][128];    /* every device */
	int ndev[NIMG];
	char dump[128];                 /* dump-tree wrapper (loop devices for several) */
	char fill[128];                 /* the kernel writes and deletes files on several devices */
	bool made[NIMG];
	const char *why[NIMG];
	bool have_mkfs;
};

static struct env E;

static int group_setup(void **state)
{
	if (scratch_dir("alloc", E.dir, sizeof(E.dir)))
		return -1;
	static const int ndev[NIMG] = { [IMG_R5] = 3, [IMG_R6] = 4, [IMG_R10] = 4, [IMG_R0] = 3 };
	for (int i = 0; i < NIMG; i++) {
		E.ndev[i] = ndev[i] ? ndev[i] : 1;
		for (int d = 0; d < E.ndev[i]; d++)
			snprintf(E.dev[i][d], sizeof(E.dev[i][d]), "%s/img%d.%d", E.dir, i, d);
		snprintf(E.img[i], sizeof(E.img[i]), "%s", E.dev[i][0]);
	}
	/* dump-tree finds the other devices of a filesystem only among block devices */
	snprintf(E.dump, sizeof(E.dump), "%s/dump.sh", E.dir);
	FILE *ds = fopen(E.dump, "w");
	if (!ds)
		return -1;
	fputs("#!/bin/sh\n"
	      "t=$1; shift\n"
	      "if [ $# -eq 1 ]; then exec btrfs inspect-internal dump-tree -t $t \"$1\"; fi\n"
	      "L=\"\"\n"
	      "cleanup() { for l in $L; do btrfs device scan --forget $l >/dev/null 2>&1; losetup -d $l; done; }\n"
	      "trap cleanup EXIT\n"
	      "for f in \"$@\"; do l=$(losetup -f --show \"$f\") || exit 1; L=\"$L $l\"; done\n"
	      "set -- $L\n"
	      "btrfs inspect-internal dump-tree -t $t $1\n",
	      ds);
	fclose(ds);
	snprintf(E.fill, sizeof(E.fill), "%s/fill.sh", E.dir);
	ds = fopen(E.fill, "w");
	if (!ds)
		return -1;
	fputs("#!/bin/sh\n"
	      "m=$1; shift\n"
	      "L=\"\"\n"
	      "cleanup() { umount $m 2>/dev/null; for l in $L; do btrfs device scan --forget $l >/dev/null 2>&1; "
	      "losetup -d $l; done; }\n"
	      "trap cleanup EXIT\n"
	      "for f in \"$@\"; do l=$(losetup -f --show \"$f\") || exit 1; L=\"$L $l\"; done\n"
	      "for l in $L; do btrfs device scan $l >/dev/null || exit 1; done\n"
	      "set -- $L\n"
	      "mkdir -p $m && mount $1 $m || exit 1\n"
	      "python3 - \"$m\" <<'PY' || exit 1\n"
	      "import os, sys\n"
	      "m = sys.argv[1]\n"
	      "for i in range(150):\n"
	      "    open(os.path.join(m, 'k%d' % i), 'wb').write(os.urandom(1000 + i * 997))\n"
	      "PY\n"
	      "sync -f $m || exit 1\n"
	      "python3 - \"$m\" <<'PY' || exit 1\n"
	      "import os, sys\n"
	      "m = sys.argv[1]\n"
	      "for i in range(0, 150, 3):\n"
	      "    os.unlink(os.path.join(m, 'k%d' % i))\n"
	      "PY\n"
	      "umount $m\n",
	      ds);
	fclose(ds);
	E.have_mkfs = sh("command -v mkfs.btrfs >/dev/null 2>&1 && command -v btrfs >/dev/null 2>&1") == 0;
	if (!E.have_mkfs)
		return 0;
	static const char *const opts[] = {
		[IMG_DEFAULT] = "",
		[IMG_NOFST] = "-R ^free-space-tree -n 4096",
		[IMG_MIXED] = "-M",
		[IMG_ROOTDIR] = "--rootdir %s/src",
		[IMG_64K] = "-n 65536",
		[IMG_KERNEL] = "",
		[IMG_R5] = "-d raid5 -m raid1",
		[IMG_R6] = "-d raid6 -m raid6",
		[IMG_R10] = "-d raid10 -m raid10",
		[IMG_R0] = "-d raid0 -m raid1c3",
	};
	if (sh("mkdir -p %s/src/d && cd %s/src && python3 -c \"for i in range(1, 301): "
	       "open('f%%d' %% i, 'w').write('x' * (i * 1500))\"",
	       E.dir, E.dir))
		return -1;
	for (int i = 0; i < NIMG; i++) {
		char o[256], devs[MAXDEV * 130] = "";
		snprintf(o, sizeof(o), opts[i], E.dir);
		for (int d = 0; d < E.ndev[i]; d++) {
			strcat(devs, " ");
			strcat(devs, E.dev[i][d]);
			if (sh("truncate -s %s %s", E.ndev[i] > 1 ? "384M" : "512M", E.dev[i][d]))
				return -1;
		}
		if (E.ndev[i] > 1 && geteuid() != 0) {
			E.why[i] = "not root: dump-tree needs loop devices for several devices";
			continue;
		}
		E.made[i] = sh("mkfs.btrfs -q -f %s %s >/dev/null 2>&1", o, devs) == 0;
		if (!E.made[i])
			E.why[i] = "mkfs.btrfs failed";
		/* data in the striped profiles: the kernel writes it (needs root, loop devices) */
		if (E.made[i] && (i == IMG_R5 || i == IMG_R10) && sh("sh %s %s/mnt%d %s >/dev/null 2>&1", E.fill, E.dir, i, devs)) {
			E.made[i] = false;
			E.why[i] = "the kernel could not write to the multi-device filesystem";
		}
	}
	/* the kernel writes 400 small files and deletes every other one: hundreds of free holes */
	E.made[IMG_KERNEL] = false;
	E.why[IMG_KERNEL] = "not root: no loop mount";
	if (geteuid() == 0) {
		int r = sh("set -e; m=%s/mnt; mkdir -p $m; mount -o loop,max_inline=0 %s $m 2>/dev/null; "
			   "trap 'umount $m' EXIT; "
			   "python3 -c \"import os\nfor i in range(400):\n open('$m/k%%d' %% i,'wb').write(os.urandom(4096))\"; "
			   "sync -f $m; python3 -c \"import os\nfor i in range(0,400,2): os.unlink('$m/k%%d' %% i)\"",
			   E.dir, E.img[IMG_KERNEL]);
		if (r == 0)
			E.made[IMG_KERNEL] = true;
		else
			E.why[IMG_KERNEL] = "loop mount or the kernel's writes failed";
	}
	return 0;
}

static int group_teardown(void **state)
{
	sh("umount %s/mnt 2>/dev/null; rm -rf %s", E.dir, E.dir);
	return 0;
}

static void need(int i)
{
	if (!E.have_mkfs) {
		fprintf(stderr, "mkfs.btrfs/btrfs not installed: skipped\n");
		skip();
	}
	if (!E.made[i]) {
		fprintf(stderr, "image %d not made (%s): skipped\n", i, E.why[i]);
		skip();
	}
}

/* ---- what dump-tree says ---- */

struct xr {
	uint64_t start, len;
};

struct oracle {
	struct xr bg[64];
	uint64_t bg_used[64];
	char bg_flags[64][64];
	int nbg;
	struct xr *ext; /* extent items in key order */
	int next, cap;
	/* free space tree */
	struct xr info[64];
	uint32_t info_count[64], info_flags[64];
	int ninfo;
	struct xr *fse; /* FREE_SPACE_EXTENT */
	int nfse, fse_cap;
	int nbitmaps;
};

static void push(struct xr **v, int *n, int *cap, uint64_t s, uint64_t l)
{
	if (*n == *cap) {
		*cap = *cap ? *cap * 2 : 256;
		*v = realloc(*v, (size_t)*cap * sizeof(**v));
		assert_non_null(*v);
	}
	(*v)[(*n)++] = (struct xr){ s, l };
}

static void dump_cmd(char *cmd, size_t len, const char *tree, int img)
{
	int n = snprintf(cmd, len, "sh %s %s", E.dump, tree);
	for (int d = 0; d < E.ndev[img]; d++)
		n += snprintf(cmd + n, len - (size_t)n, " %s", E.dev[img][d]);
	snprintf(cmd + n, len - (size_t)n, " 2>/dev/null");
}

static void read_oracle(int img, uint32_t nodesize, struct oracle *o)
{
	char cmd[1024], line[512], type[64];
	uint64_t obj, off;
	memset(o, 0, sizeof(*o));
	dump_cmd(cmd, sizeof(cmd), "extent", img);
	FILE *f = popen(cmd, "r");
	assert_non_null(f);
	bool want_used = false;
	while (fgets(line, sizeof(line), f)) {
		if (want_used) {
			uint64_t used;
			char fl[64] = "";
			if (sscanf(line, " block group used %" SCNu64 " chunk_objectid %*u flags %63s", &used, fl) >= 1) {
				o->bg_used[o->nbg - 1] = used;
				snprintf(o->bg_flags[o->nbg - 1], sizeof(o->bg_flags[0]), "%s", fl);
				want_used = false;
			}
			continue;
		}
		if (sscanf(line, " item %*d key (%" SCNu64 " %63s %" SCNu64 ")", &obj, type, &off) != 3)
			continue;
		if (!strcmp(type, "BLOCK_GROUP_ITEM")) {
			assert_true(o->nbg < 64);
			o->bg[o->nbg++] = (struct xr){ obj, off };
			want_used = true;
		} else if (!strcmp(type, "EXTENT_ITEM")) {
			push(&o->ext, &o->next, &o->cap, obj, off);
		} else if (!strcmp(type, "METADATA_ITEM")) {
			push(&o->ext, &o->next, &o->cap, obj, nodesize);
		}
	}
	assert_int_equal(pclose(f), 0);
	dump_cmd(cmd, sizeof(cmd), "10", img);
	f = popen(cmd, "r");
	assert_non_null(f);
	bool want_info = false;
	while (fgets(line, sizeof(line), f)) {
		if (want_info) {
			unsigned c, fl;
			if (sscanf(line, " free space info extent count %u flags %u", &c, &fl) == 2) {
				o->info_count[o->ninfo - 1] = c;
				o->info_flags[o->ninfo - 1] = fl;
				want_info = false;
			}
			continue;
		}
		if (sscanf(line, " item %*d key (%" SCNu64 " %63s %" SCNu64 ")", &obj, type, &off) != 3)
			continue;
		if (!strcmp(type, "FREE_SPACE_INFO")) {
			assert_true(o->ninfo < 64);
			o->info[o->ninfo++] = (struct xr){ obj, off };
			want_info = true;
		} else if (!strcmp(type, "FREE_SPACE_EXTENT")) {
			push(&o->fse, &o->nfse, &o->fse_cap, obj, off);
		} else if (!strcmp(type, "FREE_SPACE_BITMAP")) {
			o->nbitmaps++;
		}
	}
	pclose(f); /* no free space tree: dump-tree fails, nothing parsed */
}

static void free_oracle(struct oracle *o)
{
	free(o->ext);
	free(o->fse);
}

/* ---- opening ---- */

static struct ub_fs *open_paths(const char *const *paths, int n)
{
	struct ub_fs_opts opts = { .writable = false, .super_mirror = -1, .no_log = true };
	struct ub_fs *fs = NULL;
	assert_int_equal(ub_fs_open(paths, n, &opts, NULL, &fs), 0);
	return fs;
}

static struct ub_fs *open_fs(const char *img)
{
	const char *paths[1] = { img };
	return open_paths(paths, 1);
}

static struct ub_fs *open_img(int img)
{
	const char *paths[MAXDEV];
	for (int d = 0; d < E.ndev[img]; d++)
		paths[d] = E.dev[img][d];
	return open_paths(paths, E.ndev[img]);
}

static int load(struct ub_fs *fs, bool use_fst, struct ub_alloc **a)
{
	return ub_alloc_load(&fs->tc, fs->vol, &fs->extent_tree->committed,
			     use_fst && fs->fst_tree ? &fs->fst_tree->committed : NULL, a);
}

/* The group's free set must be exactly the group minus the oracle's extents. */
static void check_free_vs_extents(const struct ub_alloc *a, const struct oracle *o, int g)
{
	uint64_t s = o->bg[g].start, e = s + o->bg[g].len, pos = s;
	const struct ub_range_set *fr = ub_alloc_bg_free(a, s);
	assert_non_null(fr);
	struct ub_range r;
	uint64_t q = s, nfree = 0;
	for (int i = 0; i <= o->next; i++) {
		uint64_t xs = i < o->next ? o->ext[i].start : e, xl = i < o->next ? o->ext[i].len : 0;
		if (i < o->next && (xs < s || xs >= e))
			continue;
		if (xs > pos) { /* a gap: must be one free extent */
			assert_int_equal(ub_rs_next(fr, q, &r), 0);
			assert_int_equal(r.start, pos);
			assert_int_equal(r.len, xs - pos);
			q = r.start + r.len;
			nfree++;
		}
		if (xs + xl > pos)
			pos = xs + xl;
	}
	assert_true(ub_rs_next(fr, q, &r) == 1 || r.start >= e);
	assert_int_equal(fr->count, nfree);
}

static uint64_t n_super_found;

/*
 * Superblock mirror stripes, with the read path's mapping (ub_volume_map) as
 * the oracle: a 64 KiB logical unit any copy of which lands on a mirror is
 * never available, and nothing else is excluded. RAID5/6: the whole row
 * (full stripe) whose unit on some device holds a mirror, parity or data.
 */
static bool on_mirror(uint64_t phys)
{
	for (int m = 0; m < 3; m++) {
		uint64_t off = m == 0 ? 65536ULL : m == 1 ? 64ULL << 20 : 256ULL << 30;
		if (off >= phys && off < phys + 65536)
			return true;
	}
	return false;
}

static void check_super(const struct ub_fs *fs, const struct ub_alloc *a)
{
	const struct ub_volume *vol = fs->vol;
	for (int c = 0; c < vol->nchunks; c++) {
		const struct ub_chunk *ch = vol->chunks[c];
		const struct ub_range_set *av = ub_alloc_bg_avail(a, ch->logical);
		struct ub_bg_info bi;
		assert_non_null(av);
		assert_int_equal(ub_alloc_bg_info(a, ch->logical, &bi), 0);
		uint64_t excluded = 0;
		if (ch->type & BTRFS_BLOCK_GROUP_RAID56_MASK) {
			int data = ch->num_stripes - ((ch->type & BTRFS_BLOCK_GROUP_RAID6) ? 2 : 1);
			uint64_t fs_len = (uint64_t)data * 65536, rows = ch->length / fs_len;
			assert_int_equal(bi.full_stripe, fs_len);
			for (uint64_t r = 0; r < rows; r++) {
				bool hit = false;
				for (int j = 0; j < ch->num_stripes; j++)
					hit |= on_mirror(ch->stripes[j].physical + r * 65536);
				if (!hit)
					continue;
				assert_false(ub_rs_overlaps(av, ch->logical + r * fs_len, fs_len));
				excluded += fs_len;
				n_super_found++;
			}
		} else {
			int copies = ub_volume_num_copies(vol, ch->logical);
			for (uint64_t u = 0; u < ch->length; u += 65536) {
				bool hit = false;
				for (int m = 1; m <= copies; m++) {
					uint64_t devid, phys;
					const char *path;
					assert_int_equal(ub_volume_map(vol, ch->logical + u, m, &devid, &phys, &path), 0);
					hit |= on_mirror(phys);
				}
				if (!hit)
					continue;
				assert_false(ub_rs_overlaps(av, ch->logical + u, 65536));
				excluded += 65536;
				n_super_found++;
			}
		}
		assert_int_equal(bi.super, excluded);
	}
}

/* What the setup must have produced, so a test that passes has looked at it. */
static void check_setup(int img, const struct ub_fs *fs, const struct ub_alloc *a)
{
	struct ub_bg_info bi;
	bool mixed = false;
	uint64_t data_used = 0;
	for (uint64_t pos = 0; ub_alloc_next_bg(a, pos, &bi) == 0; pos = bi.start + 1) {
		mixed |= (bi.flags & BTRFS_BLOCK_GROUP_DATA) && (bi.flags & BTRFS_BLOCK_GROUP_METADATA);
		if (bi.flags & BTRFS_BLOCK_GROUP_DATA)
			data_used += bi.used;
	}
	assert_int_equal(fs->fst_tree != NULL, img != IMG_NOFST);
	assert_int_equal(mixed, img == IMG_MIXED);
	if (img == IMG_ROOTDIR || img == IMG_R5 || img == IMG_R10)
		assert_true(data_used > 1000000);
	if (img == IMG_KERNEL)
		assert_true(data_used >= 200 * 4096);
	if (img == IMG_64K || img == IMG_NOFST)
		assert_int_equal(fs->vol->nodesize, img == IMG_64K ? 65536 : 4096);
}

static void check_image(int img, bool expect_bitmaps)
{
	need(img);
	struct ub_fs *fs = open_img(img);
	struct oracle o;
	read_oracle(img, fs->vol->nodesize, &o);
	assert_true(o.nbg >= 2);
	struct ub_alloc *a = NULL, *b = NULL;
	assert_int_equal(load(fs, true, &a), 0);
	assert_int_equal(load(fs, false, &b), 0);
	assert_int_equal(ub_alloc_verify(a), 0);
	assert_int_equal(ub_alloc_verify(b), 0);
	check_setup(img, fs, a);
	int ngroups = 0;
	struct ub_bg_info bi;
	for (uint64_t pos = 0; ub_alloc_next_bg(a, pos, &bi) == 0; pos = bi.start + 1)
		ngroups++;
	assert_int_equal(ngroups, o.nbg);
	/* the sum of every group's used is the superblock's bytes_used */
	assert_int_equal(ub_alloc_bytes_used(a), UB_GET(ub_disk_super, bytes_used, fs->vol->super));
	int bitmap_groups = 0;
	for (int g = 0; g < o.nbg; g++) {
		assert_int_equal(ub_alloc_bg_info(a, o.bg[g].start, &bi), 0);
		assert_int_equal(bi.start, o.bg[g].start);
		assert_int_equal(bi.length, o.bg[g].len);
		assert_int_equal(bi.used, o.bg_used[g]);
		check_free_vs_extents(a, &o, g);
		check_free_vs_extents(b, &o, g);
		if (!fs->fst_tree)
			continue;
		/* the free space tree's own items for this group */
		int k = -1;
		for (int i = 0; i < o.ninfo; i++)
			if (o.info[i].start == o.bg[g].start && o.info[i].len == o.bg[g].len)
				k = i;
		assert_true(k >= 0);
		const struct ub_range_set *fr = ub_alloc_bg_free(a, o.bg[g].start);
		assert_int_equal(fr->count, o.info_count[k]);
		const struct ub_bg *bg = ub_alloc_find_bg(a, o.bg[g].start);
		assert_int_equal(bg->fst_bitmaps, (o.info_flags[k] & BTRFS_FREE_SPACE_USING_BITMAPS) != 0);
		if (bg->fst_bitmaps) {
			bitmap_groups++;
			continue;
		}
		uint64_t q = 0;
		int n = 0;
		for (int i = 0; i < o.nfse; i++) {
			if (o.fse[i].start < bi.start || o.fse[i].start >= bi.start + bi.length)
				continue;
			struct ub_range r;
			assert_int_equal(ub_rs_next(fr, q, &r), 0);
			assert_int_equal(r.start, o.fse[i].start);
			assert_int_equal(r.len, o.fse[i].len);
			q = r.start + r.len;
			n++;
		}
		assert_int_equal(n, fr->count);
	}
	if (expect_bitmaps) {
		assert_true(o.nbitmaps > 0); /* the setup reached the bitmap form */
		assert_true(bitmap_groups > 0);
	}
	check_super(fs, a);
	/* per-type totals, from the flags dump-tree prints ("DATA|METADATA|single" for mixed) */
	static const struct { uint64_t bit; const char *name; } types[] = {
		{ BTRFS_BLOCK_GROUP_DATA, "DATA" }, { BTRFS_BLOCK_GROUP_METADATA, "METADATA" },
		{ BTRFS_BLOCK_GROUP_SYSTEM, "SYSTEM" } };
	for (unsigned t = 0; t < 3; t++) {
		uint64_t total = 0, used = 0;
		int n = 0;
		for (int g = 0; g < o.nbg; g++) {
			char f[70];
			snprintf(f, sizeof(f), "|%s|", o.bg_flags[g]);
			char want[16];
			snprintf(want, sizeof(want), "|%s|", types[t].name);
			if (!strstr(f, want))
				continue;
			total += o.bg[g].len;
			used += o.bg_used[g];
			n++;
		}
		struct ub_space_info si;
		ub_alloc_space_info(a, types[t].bit, &si);
		assert_int_equal(si.nr_groups, n);
		assert_int_equal(si.total, total);
		assert_int_equal(si.used, used);
		assert_int_equal(si.reserved, 0);
		assert_int_equal(si.pinned, 0);
	}
	/* what the loaded allocator hands out is free on disk and no superblock stripe */
	uint64_t s;
	for (int i = 0; i < 200 && ub_alloc_reserve(a, BTRFS_BLOCK_GROUP_METADATA, fs->vol->nodesize, 0, &s) == 0;
	     i++) {
		for (int x = 0; x < o.next; x++)
			assert_false(s < o.ext[x].start + o.ext[x].len && o.ext[x].start < s + fs->vol->nodesize);
		assert_int_equal(ub_alloc_account(a, s, fs->vol->nodesize, true), 0);
	}
	assert_int_equal(ub_alloc_verify(a), 0);
	ub_alloc_free(a);
	ub_alloc_free(b);
	free_oracle(&o);
	ub_fs_close(fs);
}

static void test_default(void **state)
{
	n_super_found = 0;
	check_image(IMG_DEFAULT, false);
	assert_true(n_super_found > 0); /* 512 MiB: the 64 MiB mirror is inside a chunk */
}
static void test_no_fst(void **state) { check_image(IMG_NOFST, false); }
static void test_mixed(void **state) { check_image(IMG_MIXED, false); }
static void test_rootdir(void **state) { check_image(IMG_ROOTDIR, false); }
static void test_nodesize_64k(void **state) { check_image(IMG_64K, false); }
static void test_kernel_bitmaps(void **state) { check_image(IMG_KERNEL, true); }
static void test_raid5(void **state)
{
	n_super_found = 0;
	check_image(IMG_R5, false);
	assert_true(n_super_found > 0); /* the 64 MiB mirror of device 1 is inside the RAID5 chunk */
}
static void test_raid6(void **state) { check_image(IMG_R6, false); }
static void test_raid10(void **state) { check_image(IMG_R10, false); }
static void test_raid0(void **state) { check_image(IMG_R0, false); }

/* ---- damage ---- */

/*
 * Rewrite item `key` of tree `root` in a copy of the image: `edit` changes
 * its data; the block's checksum is recomputed and every copy rewritten.
 */
static void patch_item(const char *img, const struct ub_root *(*pick)(struct ub_fs *), const struct ub_key *key,
		       void (*edit)(uint8_t *data, uint32_t size))
{
	struct ub_fs *fs = open_fs(img);
	struct ub_path p;
	const uint8_t *d;
	uint32_t size;
	ub_path_init(&p);
	assert_int_equal(ub_tree_lookup(&fs->tc, pick(fs), key, &p, &d, &size), 0);
	struct ub_eb *eb = p.nodes[0];
	uint32_t ns = eb->len;
	uint8_t *blk = malloc(ns);
	assert_non_null(blk);
	memcpy(blk, eb->data, ns);
	edit(blk + (d - eb->data), size);
	uint8_t csum[UB_CSUM_SIZE_MAX];
	assert_int_equal(ub_csum(fs->vol->csum_type, blk + UB_CSUM_SIZE_MAX, ns - UB_CSUM_SIZE_MAX, csum), 0);
	memcpy(blk, csum, fs->vol->csum_size);
	uint64_t logical = eb->start;
	int copies = ub_volume_num_copies(fs->vol, logical);
	uint64_t phys[4];
	assert_true(copies >= 1 && copies <= 4);
	for (int m = 1; m <= copies; m++) {
		uint64_t devid;
		const char *path;
		assert_int_equal(ub_volume_map(fs->vol, logical, m, &devid, &phys[m - 1], &path), 0);
	}
	ub_path_release(&p);
	ub_fs_close(fs);
	int fd = open(img, O_WRONLY);
	assert_true(fd >= 0);
	for (int m = 0; m < copies; m++)
		assert_int_equal(pwrite(fd, blk, ns, (off_t)phys[m]), (ssize_t)ns);
	close(fd);
	free(blk);
}

static const struct ub_root *pick_extent(struct ub_fs *fs) { return &fs->extent_tree->committed; }
static const struct ub_root *pick_fst(struct ub_fs *fs) { return &fs->fst_tree->committed; }

static void used_less(uint8_t *d, uint32_t size)
{
	uint64_t used = UB_GET(btrfs_block_group_item, used, d);
	UB_SET(btrfs_block_group_item, used, d, used - 16384);
}

static void count_plus_one(uint8_t *d, uint32_t size)
{
	UB_SET(btrfs_free_space_info, extent_count, d, UB_GET(btrfs_free_space_info, extent_count, d) + 1);
}

static void used_over_length(uint8_t *d, uint32_t size)
{
	/* the block group's length is not known here: any used above 2^40 exceeds every test group */
	UB_SET(btrfs_block_group_item, used, d, 1ULL << 40);
}

static void info_unknown_flag(uint8_t *d, uint32_t size)
{
	UB_SET(btrfs_free_space_info, flags, d, UB_GET(btrfs_free_space_info, flags, d) | 0x100);
}

static void info_claims_bitmaps(uint8_t *d, uint32_t size)
{
	UB_SET(btrfs_free_space_info, flags, d, BTRFS_FREE_SPACE_USING_BITMAPS);
}

struct msgs {
	char text[4096];
	size_t len;
};

static void msg_fn(void *arg, enum ub_log_level lvl, const char *msg)
{
	struct msgs *m = arg;
	int n = snprintf(m->text + m->len, sizeof(m->text) - m->len, "%s\n", msg);
	if (n > 0 && (size_t)n < sizeof(m->text) - m->len)
		m->len += (size_t)n;
}

/* Load a damaged copy of the default image: -EUCLEAN and a message naming the block group. */
static void damaged(const struct ub_root *(*pick)(struct ub_fs *), uint8_t type, void (*edit)(uint8_t *, uint32_t),
		    bool use_fst)
{
	need(IMG_DEFAULT);
	char copy[160];
	snprintf(copy, sizeof(copy), "%s/damaged", E.dir);
	assert_int_equal(sh("cp --sparse=always %s %s", E.img[IMG_DEFAULT], copy), 0);
	/* the metadata group: it has used space, so "used - 16 KiB" stays >= 0 */
	struct ub_fs *fs = open_fs(copy);
	struct ub_alloc *a = NULL;
	assert_int_equal(load(fs, true, &a), 0);
	struct ub_bg_info bi;
	uint64_t target = 0;
	for (uint64_t pos = 0; ub_alloc_next_bg(a, pos, &bi) == 0; pos = bi.start + 1)
		if ((bi.flags & BTRFS_BLOCK_GROUP_METADATA) && bi.used >= 16384)
			target = bi.start;
	assert_true(target != 0);
	assert_int_equal(ub_alloc_bg_info(a, target, &bi), 0);
	ub_alloc_free(a);
	ub_fs_close(fs);
	struct ub_key key = { bi.start, type, bi.length };
	patch_item(copy, pick, &key, edit);

	fs = open_fs(copy);
	struct msgs m = { .len = 0 };
	struct ub_log log = { msg_fn, &m, UB_LOG_WARN, NULL };
	fs->vol->log = log;
	fs->tc.log = log; /* a damage the tree checker sees first is reported by the tree layer */
	a = NULL;
	assert_int_equal(load(fs, use_fst, &a), -EUCLEAN);
	assert_null(a);
	char name[64], keytext[64];
	snprintf(name, sizeof(name), "block group %" PRIu64, bi.start);
	snprintf(keytext, sizeof(keytext), "(%" PRIu64 " BLOCK_GROUP_ITEM", bi.start);
	if (!strstr(m.text, name) && !strstr(m.text, keytext))
		fail_msg("message does not name %s: %s", name, m.text);
	ub_fs_close(fs);
	unlink(copy);
}

static void test_damaged_used_fst(void **state) { damaged(pick_extent, BTRFS_BLOCK_GROUP_ITEM_KEY, used_less, true); }
static void test_damaged_used_extents(void **state)
{
	damaged(pick_extent, BTRFS_BLOCK_GROUP_ITEM_KEY, used_less, false);
}
static void test_damaged_extent_count(void **state)
{
	damaged(pick_fst, BTRFS_FREE_SPACE_INFO_KEY, count_plus_one, true);
}

static void test_damaged_used_over_length(void **state)
{
	damaged(pick_extent, BTRFS_BLOCK_GROUP_ITEM_KEY, used_over_length, true);
}
static void test_damaged_info_flags(void **state)
{
	damaged(pick_fst, BTRFS_FREE_SPACE_INFO_KEY, info_unknown_flag, true);
}
static void test_damaged_info_bitmaps(void **state)
{
	damaged(pick_fst, BTRFS_FREE_SPACE_INFO_KEY, info_claims_bitmaps, true);
}

/* A block-group-tree filesystem (the feature bit set on a copy: mkfs.btrfs 6.2 cannot make one) is refused by name. */
static void test_bgt_refused(void **state)
{
	need(IMG_DEFAULT);
	char copy[160];
	snprintf(copy, sizeof(copy), "%s/bgt", E.dir);
	assert_int_equal(sh("cp --sparse=always %s %s", E.img[IMG_DEFAULT], copy), 0);
	int fd = open(copy, O_RDWR);
	assert_true(fd >= 0);
	for (int m = 0; m < 2; m++) {
		uint8_t sb[UB_SUPER_INFO_SIZE], csum[UB_CSUM_SIZE_MAX];
		off_t at = m == 0 ? 65536 : 64 << 20;
		assert_int_equal(pread(fd, sb, sizeof(sb), at), (ssize_t)sizeof(sb));
		UB_SET(ub_disk_super, compat_ro_flags, sb,
		       UB_GET(ub_disk_super, compat_ro_flags, sb) | BTRFS_FEATURE_COMPAT_RO_BLOCK_GROUP_TREE);
		assert_int_equal(ub_csum((unsigned)UB_GET(ub_disk_super, csum_type, sb), sb + UB_CSUM_SIZE_MAX,
					 sizeof(sb) - UB_CSUM_SIZE_MAX, csum),
				 0);
		memcpy(sb, csum, ub_csum_size((unsigned)UB_GET(ub_disk_super, csum_type, sb)));
		assert_int_equal(pwrite(fd, sb, sizeof(sb), at), (ssize_t)sizeof(sb));
	}
	close(fd);
	struct ub_fs *fs = open_fs(copy);
	struct msgs m = { .len = 0 };
	struct ub_log log = { msg_fn, &m, UB_LOG_WARN, NULL };
	fs->vol->log = log;
	struct ub_alloc *a = NULL;
	assert_int_equal(load(fs, true, &a), -EOPNOTSUPP);
	assert_null(a);
	if (!strstr(m.text, "block-group-tree"))
		fail_msg("message does not name the feature: %s", m.text);
	ub_fs_close(fs);
	unlink(copy);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_default),
		cmocka_unit_test(test_no_fst),
		cmocka_unit_test(test_mixed),
		cmocka_unit_test(test_rootdir),
		cmocka_unit_test(test_nodesize_64k),
		cmocka_unit_test(test_kernel_bitmaps),
		cmocka_unit_test(test_raid5),
		cmocka_unit_test(test_raid6),
		cmocka_unit_test(test_raid10),
		cmocka_unit_test(test_raid0),
		cmocka_unit_test(test_damaged_used_fst),
		cmocka_unit_test(test_damaged_used_extents),
		cmocka_unit_test(test_damaged_extent_count),
		cmocka_unit_test(test_damaged_used_over_length),
		cmocka_unit_test(test_damaged_info_flags),
		cmocka_unit_test(test_damaged_info_bitmaps),
		cmocka_unit_test(test_bgt_refused),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
