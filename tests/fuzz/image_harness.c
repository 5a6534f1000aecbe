/* SPDX-License-Identifier: MIT */
/* The whole-image fuzz targets' shared part: see image_harness.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* fopencookie */
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include "ubtrfs/dev.h"
#include "ubtrfs/format.h"
#include "ubtrfs/fs.h"
#include "fs/fs_priv.h"
#include "print.h"
#include "fuzz_util.h"
#include "image_harness.h"

#ifndef FUZZ_IMAGE_DIR
#define FUZZ_IMAGE_DIR "tests/fuzz/images"
#endif

struct fimage fuzz_images[FUZZ_MAX_IMAGES];
int fuzz_nimages;

/* ---- loading ---- */

/* The whole zstd stream (the content size is not always in the frame header). */
static uint8_t *unzstd(const uint8_t *in, size_t inlen, unsigned long long *outlen)
{
	ZSTD_DCtx *dc = ZSTD_createDCtx();
	ZSTD_inBuffer ib = { in, inlen, 0 };
	size_t cap = 8U << 20;
	ZSTD_outBuffer ob = { malloc(cap), cap, 0 };

	while (dc && ob.dst) {
		size_t r = ZSTD_decompressStream(dc, &ob, &ib);

		if (ZSTD_isError(r))
			break;
		if (r == 0 && ib.pos == ib.size) {
			ZSTD_freeDCtx(dc);
			*outlen = ob.pos;
			return ob.dst;
		}
		if (ob.pos == ob.size) {
			void *p = cap < (1U << 30) ? realloc(ob.dst, cap * 2) : NULL;
			if (!p)
				break;
			ob.dst = p;
			cap *= 2;
			ob.size = cap;
		} else if (ib.pos == ib.size) {
			break; /* truncated */
		}
	}
	free(ob.dst);
	ZSTD_freeDCtx(dc);
	return NULL;
}

static int load_packed(const char *path, struct fimage *img)
{
	uint8_t *packed = NULL, *raw = NULL;
	unsigned long long rawlen;
	size_t plen, pos;
	uint32_t nranges;
	FILE *f = fopen(path, "rb");
	struct stat st;
	int ret = -EINVAL;

	if (!f || fstat(fileno(f), &st) || st.st_size <= 0)
		goto out;
	plen = (size_t)st.st_size;
	packed = malloc(plen);
	if (!packed || fread(packed, 1, plen, f) != plen)
		goto out;
	raw = unzstd(packed, plen, &rawlen);
	if (!raw || rawlen < 20)
		goto out;
	if (memcmp(raw, "UBFZIMG1", 8))
		goto out;
	img->size = ub_le64(raw + 8);
	nranges = ub_le32(raw + 16);
	if (img->size < (1U << 20) || img->size > (1ULL << 32))
		goto out;
	/* anonymous memory: pages never written stay unallocated, so a 128 MiB image costs what it uses */
	img->mem = mmap(NULL, img->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (img->mem == MAP_FAILED) {
		img->mem = NULL;
		goto out;
	}
	pos = 20;
	for (uint32_t i = 0; i < nranges; i++) {
		uint64_t off, len;

		if (pos + 16 > rawlen)
			goto out;
		off = ub_le64(raw + pos);
		len = ub_le64(raw + pos + 8);
		pos += 16;
		if (len > rawlen - pos || off > img->size || len > img->size - off)
			goto out;
		memcpy(img->mem + off, raw + pos, len);
		pos += len;
	}
	ret = 0;
out:
	if (f)
		fclose(f);
	free(packed);
	free(raw);
	return ret;
}

static void add_block(struct fimage *img, struct ub_fs *fs, const struct ub_eb *eb)
{
	struct fblock *b;
	int n;

	for (int i = 0; i < img->nblocks; i++)
		if (img->blocks[i].logical == eb->start)
			return;
	b = realloc(img->blocks, sizeof(*b) * (size_t)(img->nblocks + 1));
	if (!b)
		abort();
	img->blocks = b;
	b = &img->blocks[img->nblocks];
	memset(b, 0, sizeof(*b));
	b->logical = eb->start;
	b->level = ub_eb_level(eb);
	b->owner = ub_eb_owner(eb);
	n = ub_volume_num_copies(fs->vol, eb->start);
	for (int m = 1; m <= n && b->ncopies < 4; m++) {
		uint64_t devid, phys;
		const char *path;

		if (ub_volume_map(fs->vol, eb->start, m, &devid, &phys, &path) == 0 && phys < img->size &&
		    img->nodesize <= img->size - phys)
			b->phys[b->ncopies++] = phys;
	}
	if (b->ncopies)
		img->nblocks++;
}

/* ---- walking (shared by indexing and by every execution) ---- */


static size_t print_total;

static ssize_t sink_write(void *cookie, const char *buf, size_t len)
{
	(void)cookie;
	(void)buf;
	print_total += len;
	if (print_total > FUZZ_PRINT_BUDGET)
		abort(); /* a printer ran away */
	return (ssize_t)len;
}

FILE *fuzz_print_open(void)
{
	cookie_io_functions_t io = { .write = sink_write };
	FILE *f;

	print_total = 0;
	f = fopencookie(NULL, "w", io);
	if (!f)
		abort();
	return f;
}

static void print_block(struct walk *w, const struct ub_eb *eb)
{
	struct ub_print_ctx pctx = { w->fs->vol->csum_size, w->fs->vol->sectorsize, ub_eb_owner(eb) };
	uint32_t n = ub_eb_nritems(eb);

	ub_print_block_header(w->out, eb->data, eb->len);
	for (uint32_t i = 0; i < n; i++) {
		struct ub_key key;

		ub_eb_item_key(eb, (int)i, &key);
		if (ub_eb_level(eb)) {
			ub_print_key_ptr(w->out, &key, ub_eb_node_blockptr(eb, (int)i), ub_eb_node_gen(eb, (int)i));
		} else {
			uint32_t size;
			const uint8_t *d = ub_eb_item_data(eb, (int)i, &size);

			ub_print_item(w->out, (int)i, &key, (uint32_t)(d - eb->data - UB_HEADER_SIZE), d, size, &pctx);
		}
	}
}

/* ---- seed export for the other targets (UBTRFS_FUZZ_EXPORT=DIR) ---- */

static void write_seed(const char *dir, const char *sub, const char *name, const uint8_t *a, size_t alen,
		       const uint8_t *b, size_t blen)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, sub);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/%s/%s", dir, sub, name);
	f = fopen(path, "wb");
	if (!f || fwrite(a, 1, alen, f) != alen || (blen && fwrite(b, 1, blen, f) != blen)) {
		fprintf(stderr, "fuzz_image: cannot write %s\n", path);
		exit(1);
	}
	fclose(f);
}

static const char *export_image;
static unsigned export_counts[256][4][2];

static uint8_t export_mode(const struct walk *w)
{
	uint32_t ns = w->fs->vol->nodesize;
	unsigned cs = w->fs->vol->csum_size;

	/* fuzz_tree_block's byte 0: nodesize 4K/16K/64K in bits 0-1, checksum size 4/8/32 in bits 2-3 */
	return (uint8_t)((ns == 16384 ? 1 : ns == 65536 ? 2 : 0) | (cs == 8 ? 4 : cs == 32 ? 8 : 0));
}

static uint8_t export_features(const struct walk *w)
{
	return (uint8_t)(!!(w->fs->incompat & BTRFS_FEATURE_INCOMPAT_SKINNY_METADATA) |
			 (!!(w->fs->incompat & BTRFS_FEATURE_INCOMPAT_MIXED_GROUPS) << 1));
}

/* A compressed extent as fuzz_decompress takes it: type, output length, the compressed bytes. */
static void export_extent(struct walk *w, const struct ub_key *key, const uint8_t *d, uint32_t size)
{
	uint8_t comp = (uint8_t)UB_GET(btrfs_file_extent_item, compression, d);
	uint8_t type = (uint8_t)UB_GET(btrfs_file_extent_item, type, d);
	uint64_t ram = UB_GET(btrfs_file_extent_item, ram_bytes, d);
	bool inl = type == BTRFS_FILE_EXTENT_INLINE;
	uint8_t hdr[3];
	char name[256];
	unsigned *count;

	if (comp < 1 || comp > 3 || ram == 0 || ram > 128 * 1024)
		return;
	count = &export_counts[comp][0][inl];
	if (*count >= 4)
		return;
	hdr[0] = (uint8_t)(comp - 1);
	if (ram < 0x8000) {
		hdr[1] = (uint8_t)ram;
		hdr[2] = (uint8_t)(ram >> 8);
	} else {
		uint64_t v = (ram - 4) / 4;
		hdr[1] = (uint8_t)v;
		hdr[2] = (uint8_t)(0x80 | (v >> 8));
	}
	snprintf(name, sizeof(name), "%s_%s_%s_%llu_%llu", export_image, comp == 1 ? "zlib" : comp == 2 ? "lzo" : "zstd",
		 inl ? "inline" : "regular", (unsigned long long)key->objectid, (unsigned long long)key->offset);
	if (inl) {
		if (size <= UB_FILE_EXTENT_INLINE_DATA_START)
			return;
		write_seed(w->export, "corpus_decompress", name, hdr, 3, d + UB_FILE_EXTENT_INLINE_DATA_START,
			   size - UB_FILE_EXTENT_INLINE_DATA_START);
	} else {
		uint64_t bytenr = UB_GET(btrfs_file_extent_item, disk_bytenr, d);
		uint64_t len = UB_GET(btrfs_file_extent_item, disk_num_bytes, d);
		uint8_t *buf;

		if (size < sizeof(struct btrfs_file_extent_item) || !bytenr || !len || len > 128 * 1024)
			return;
		buf = malloc(len);
		if (!buf || ub_volume_read(w->fs->vol, bytenr, len, 0, buf)) {
			free(buf);
			return;
		}
		write_seed(w->export, "corpus_decompress", name, hdr, 3, buf, len);
		free(buf);
	}
	(*count)++;
}

/* How many times `what` was seen before (a small set of strings: seed export only). */
static unsigned export_seen(const char *what)
{
	static char seen[512][64];
	static unsigned count[512];
	static int nseen;

	for (int i = 0; i < nseen; i++)
		if (!strcmp(seen[i], what))
			return count[i]++;
	if (nseen < 512) {
		snprintf(seen[nseen], sizeof(seen[nseen]), "%s", what);
		count[nseen++] = 1;
	}
	return 0;
}

static void export_block(struct walk *w, const struct ub_eb *eb)
{
	uint8_t hdr[2] = { export_mode(w), export_features(w) };
	uint32_t len = eb->len, n = ub_eb_nritems(eb);
	char name[256];

	/* the whole block, trailing zeros cut (the target pads with zeros); two per tree and level */
	while (len > UB_HEADER_SIZE && !eb->data[len - 1])
		len--;
	snprintf(name, sizeof(name), "%s_tree%lld_level%u_", export_image, (long long)ub_eb_owner(eb), ub_eb_level(eb));
	if (export_seen(name) < 2) {
		snprintf(name + strlen(name), sizeof(name) - strlen(name), "%llu", (unsigned long long)eb->start);
		write_seed(w->export, "corpus_tree_block", name, hdr, 2, eb->data, len);
	}
	if (ub_eb_level(eb))
		return;
	for (uint32_t i = 0; i < n; i++) {
		struct ub_key key;
		uint32_t size;
		const uint8_t *d = ub_eb_item_data(eb, (int)i, &size);
		uint8_t item_hdr[2 + 17];

		ub_eb_item_key(eb, (int)i, &key);
		if (key.type == BTRFS_EXTENT_DATA_KEY && size >= UB_FILE_EXTENT_INLINE_DATA_START)
			export_extent(w, &key, d, size);
		/* item mode (bit 7): a key and one item, two of each type per image */
		if (export_counts[key.type][1][0] >= 2)
			continue;
		export_counts[key.type][1][0]++;
		item_hdr[0] = (uint8_t)(0x80 | export_mode(w));
		item_hdr[1] = export_features(w);
		memcpy(item_hdr + 2, eb->data + UB_HEADER_SIZE + i * UB_ITEM_SIZE, 17);
		snprintf(name, sizeof(name), "%s_item_type%u_%u", export_image, key.type,
			 export_counts[key.type][1][0]);
		write_seed(w->export, "corpus_tree_block", name, item_hdr, sizeof(item_hdr), d, size);
	}
}

static void walk_blocks(struct walk *w, uint64_t bytenr, const struct ub_expect *exp, int depth)
{
	struct ub_eb *eb;

	if (w->blocks >= FUZZ_MAX_BLOCKS || ub_tree_read_block(&w->fs->tc, bytenr, exp, &eb))
		return;
	w->blocks++;
	if (w->index)
		add_block(w->index, w->fs, eb);
	if (w->export)
		export_block(w, eb);
	if (w->out)
		print_block(w, eb);
	if (ub_eb_level(eb) > 0 && depth < UB_MAX_LEVEL) {
		uint32_t n = ub_eb_nritems(eb);

		for (uint32_t i = 0; i < n; i++) {
			struct ub_key first;
			struct ub_expect cexp = { exp->owner, ub_eb_level(eb) - 1, ub_eb_node_gen(eb, (int)i), &first };

			ub_eb_item_key(eb, (int)i, &first);
			walk_blocks(w, ub_eb_node_blockptr(eb, (int)i), &cexp, depth + 1);
		}
	}
	ub_eb_put(&w->fs->tc, eb);
}

static void walk_root(struct walk *w, const struct ub_root *r)
{
	struct ub_expect exp = { r->objectid, r->level, r->generation, NULL };

	if (r->bytenr)
		walk_blocks(w, r->bytenr, &exp, 0);
}

/* Each ROOT_ITEM of `tree`: walked (owner `owner`, or the item's objectid when 0), and its id noted. */
static int walk_root_items(struct walk *w, const struct ub_root *tree, uint64_t owner, uint64_t *ids, int maxids)
{
	struct ub_key key = { 0, 0, 0 };
	struct ub_path p;
	int ret, nids = 0;

	ub_path_init(&p);
	ret = ub_tree_search(&w->fs->tc, tree, &key, &p);
	ret = ret == 2 ? 1 : (ret < 0 ? ret : 0);
	while (ret == 0) {
		uint32_t size;
		const uint8_t *d = ub_path_data(&p, &size);

		ub_path_key(&p, &key);
		if (key.type == BTRFS_ROOT_ITEM_KEY && size >= offsetof(struct btrfs_root_item, generation_v2)) {
			struct ub_root r = { owner ? owner : key.objectid, UB_GET(btrfs_root_item, bytenr, d),
					     UB_GET(btrfs_root_item, generation, d),
					     (uint8_t)UB_GET(btrfs_root_item, level, d) };
			walk_root(w, &r);
			if (ids && nids < maxids)
				ids[nids++] = key.objectid;
		}
		ret = ub_tree_next(&p);
	}
	ub_path_release(&p);
	return nids;
}

void fuzz_walk_all_trees(struct walk *w, uint64_t *subvols, int *nsubvols, int max)
{
	const uint8_t *sb = w->fs->vol->super;
	struct ub_root lr = { BTRFS_TREE_LOG_OBJECTID, UB_GET(ub_disk_super, log_root, sb), 0,
			      (uint8_t)UB_GET(ub_disk_super, log_root_level, sb) };
	struct ub_root rt = { 0 }, ct = { 0 };

	ub_fs_tree_root(w->fs, BTRFS_CHUNK_TREE_OBJECTID, &ct);
	ub_fs_tree_root(w->fs, BTRFS_ROOT_TREE_OBJECTID, &rt);
	walk_root(w, &ct);
	walk_root(w, &rt);
	*nsubvols = walk_root_items(w, &rt, 0, subvols, max);
	if (lr.bytenr) {
		walk_root(w, &lr);
		walk_root_items(w, &lr, BTRFS_TREE_LOG_OBJECTID, NULL, 0);
	}
}

/* ---- mutations ---- */

struct mut {
	uint16_t block, offset;
	uint8_t op;
	uint64_t value;
};

static void get_mut(const uint8_t *p, struct mut *m)
{
	m->block = ub_le16(p);
	m->offset = ub_le16(p + 2);
	m->op = p[4];
	m->value = ub_le64(p + 8);
}

static void put_mut(uint8_t *p, const struct mut *m)
{
	memset(p, 0, FUZZ_ENTRY);
	p[0] = (uint8_t)m->block;
	p[1] = (uint8_t)(m->block >> 8);
	p[2] = (uint8_t)m->offset;
	p[3] = (uint8_t)(m->offset >> 8);
	p[4] = m->op;
	for (int i = 0; i < 8; i++)
		p[8 + i] = (uint8_t)(m->value >> (8 * i));
}

static uint64_t get_n(const uint8_t *p, unsigned w)
{
	uint64_t v = 0;

	for (unsigned i = 0; i < w; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

static void put_n(uint8_t *p, unsigned w, uint64_t v)
{
	for (unsigned i = 0; i < w; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* What one execution changed, to be put back afterwards. */
struct undo {
	uint64_t off;
	uint32_t len;
	uint8_t *saved;
	bool fix_csum;
	bool super;
};

static struct undo undos[FUZZ_MAX_MUT * 4];
static int nundo;

static struct undo *touch_range(struct fimage *img, uint64_t off, uint32_t len, bool super)
{
	for (int i = 0; i < nundo; i++)
		if (undos[i].off == off)
			return &undos[i];
	if (nundo == (int)(sizeof(undos) / sizeof(undos[0])))
		return NULL;
	undos[nundo].off = off;
	undos[nundo].len = len;
	undos[nundo].saved = malloc(len);
	if (!undos[nundo].saved)
		abort();
	memcpy(undos[nundo].saved, img->mem + off, len);
	undos[nundo].fix_csum = true;
	undos[nundo].super = super;
	return &undos[nundo++];
}

static void apply_one(struct fimage *img, uint8_t *blk, uint32_t len, const struct mut *m)
{
	static const unsigned widths[4] = { 1, 2, 4, 8 };
	unsigned w = widths[m->op & 3];
	uint32_t off = m->offset % len;
	uint64_t cur;

	if (off + w > len)
		off = len - w;
	cur = get_n(blk + off, w);
	switch ((m->op >> 2) & 3) {
	case 0: put_n(blk + off, w, m->value); break;
	case 1: put_n(blk + off, w, cur + m->value); break;
	case 2: put_n(blk + off, w, cur ^ m->value); break;
	case 3: {
		uint32_t src = (uint32_t)(m->value % len);
		if (src + w > len)
			src = len - w;
		memmove(blk + off, blk + src, w);
		break;
	}
	}
	(void)img;
}

struct fimage *fuzz_apply(const uint8_t *data, size_t size)
{
	struct fimage *img;
	int nm;

	if (size < FUZZ_HDR || !fuzz_nimages)
		return NULL;
	img = &fuzz_images[data[0] % fuzz_nimages];
	nm = (int)((size - FUZZ_HDR) / FUZZ_ENTRY);
	if (nm > FUZZ_MAX_MUT)
		nm = FUZZ_MAX_MUT;
	nundo = 0;
	for (int i = 0; i < nm; i++) {
		struct mut m;
		int bi;

		get_mut(data + FUZZ_HDR + (size_t)i * FUZZ_ENTRY, &m);
		bi = m.block % (img->nblocks + 1);
		if (bi == img->nblocks) {
			/* the superblock and, unless asked for the primary only, its mirrors */
			for (int c = 0; c < UB_SUPER_MIRROR_MAX; c++) {
				uint64_t off = ub_super_offset(c);
				struct undo *u;

				if ((c > 0 && (m.op & 0x10)) || off + UB_SUPER_INFO_SIZE > img->size)
					continue;
				u = touch_range(img, off, UB_SUPER_INFO_SIZE, true);
				if (!u)
					continue;
				apply_one(img, img->mem + off, UB_SUPER_INFO_SIZE, &m);
				if (m.op & 0x20)
					u->fix_csum = false;
			}
			continue;
		}
		for (int c = 0; c < img->blocks[bi].ncopies; c++) {
			struct undo *u;

			if (c > 0 && (m.op & 0x10))
				break;
			u = touch_range(img, img->blocks[bi].phys[c], img->nodesize, false);
			if (!u)
				continue;
			apply_one(img, img->mem + u->off, img->nodesize, &m);
			if (m.op & 0x20)
				u->fix_csum = false;
		}
	}
	for (int i = 0; i < nundo; i++) {
		uint8_t csum[UB_CSUM_SIZE_MAX];
		uint8_t *p = img->mem + undos[i].off;

		if (!undos[i].fix_csum)
			continue;
		/* the algorithm of the pristine image: a mutated csum_type gets a checksum it cannot match */
		if (ub_csum(img->csum_type, p + UB_CSUM_SIZE_MAX, undos[i].len - UB_CSUM_SIZE_MAX, csum) == 0)
			memcpy(p, csum, UB_CSUM_SIZE_MAX);
	}
	return img;
}


/* ---- the images as files, for what opens devices by name ---- */

static char workdir[4096];
static char files[FUZZ_MAX_IMAGES][4200];
static int synced_fd = -1; /* the file the last fuzz_file_sync wrote the changes to */

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

void fuzz_rm_tree(const char *path)
{
	nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void files_cleanup(void)
{
	if (workdir[0])
		fuzz_rm_tree(workdir);
}

static void put_bytes(int fd, const uint8_t *p, uint64_t off, uint64_t len)
{
	if (pwrite(fd, p + off, len, (off_t)off) != (ssize_t)len) {
		fprintf(stderr, "fuzz: cannot write an image file: %s\n", strerror(errno));
		abort();
	}
}

/* Folders of earlier runs of `target` that crashed (their atexit never ran): the process is gone. */
static void remove_stale(const char *tmp, const char *target)
{
	char prefix[128], path[4600];
	struct dirent *de;
	DIR *d = opendir(tmp);

	if (!d)
		return;
	snprintf(prefix, sizeof(prefix), "ubtrfs-%s-", target);
	while ((de = readdir(d))) {
		long pid;

		if (strncmp(de->d_name, prefix, strlen(prefix)) ||
		    sscanf(de->d_name + strlen(prefix), "%ld-", &pid) != 1 || pid <= 0)
			continue;
		/* a run still going (or not ours to ask about) keeps its folder */
		if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
			continue;
		snprintf(path, sizeof(path), "%s/%s", tmp, de->d_name);
		fuzz_rm_tree(path);
	}
	closedir(d);
}

const char *fuzz_files_init(const char *target)
{
	static const uint8_t zero[4096];
	const char *tmp = getenv("TMPDIR");

	if (!tmp || !*tmp)
		tmp = "/tmp";
	remove_stale(tmp, target);
	snprintf(workdir, sizeof(workdir), "%s/ubtrfs-%s-%ld-XXXXXX", tmp, target, (long)getpid());
	if (!mkdtemp(workdir)) {
		fprintf(stderr, "%s: cannot make a folder under %s: %s\n", target, tmp, strerror(errno));
		exit(1);
	}
	atexit(files_cleanup);
	for (int i = 0; i < fuzz_nimages; i++) {
		const struct fimage *img = &fuzz_images[i];
		int fd;

		snprintf(files[i], sizeof(files[i]), "%s/%s.img", workdir, img->name);
		fd = open(files[i], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		if (fd < 0 || ftruncate(fd, (off_t)img->size)) {
			fprintf(stderr, "%s: cannot make %s: %s\n", target, files[i], strerror(errno));
			exit(1);
		}
		/* sparse: only the non-zero 4 KiB blocks */
		for (uint64_t off = 0; off + sizeof(zero) <= img->size; off += sizeof(zero))
			if (memcmp(img->mem + off, zero, sizeof(zero)))
				put_bytes(fd, img->mem, off, sizeof(zero));
		close(fd);
	}
	return workdir;
}

const char *fuzz_file_sync(struct fimage *img)
{
	const int i = (int)(img - fuzz_images);

	synced_fd = open(files[i], O_WRONLY | O_CLOEXEC);
	if (synced_fd < 0)
		abort();
	for (int u = 0; u < nundo; u++)
		put_bytes(synced_fd, img->mem, undos[u].off, undos[u].len);
	return files[i];
}

void fuzz_undo(struct fimage *img)
{
	while (nundo > 0) {
		struct undo *u = &undos[--nundo];

		memcpy(img->mem + u->off, u->saved, u->len);
		if (synced_fd >= 0)
			put_bytes(synced_fd, img->mem, u->off, u->len);
		free(u->saved);
	}
	if (synced_fd >= 0)
		close(synced_fd);
	synced_fd = -1;
}

static size_t quiet_bytes;
const struct ub_log fuzz_quiet_log = { .fn = fuzz_quiet, .arg = &quiet_bytes, .verbosity = UB_LOG_DEBUG };

int fuzz_open_with(struct fimage *img, const struct ub_fs_opts *opts, const struct ub_log *log, struct ub_fs **fs)
{
	struct ub_dev *dev;
	int ret = ub_dev_open_mem(img->name, img->mem, img->size, false, &dev);

	if (ret)
		return ret;
	return ub_fs_open_devs(&dev, 1, opts, log, fs);
}

int fuzz_open_image(struct fimage *img, bool no_log, const struct ub_log *log, struct ub_fs **fs)
{
	struct ub_fs_opts opts = { .writable = false, .super_mirror = -1, .no_log = no_log };

	return fuzz_open_with(img, &opts, log, fs);
}

static void index_image(const char *target, struct fimage *img)
{
	struct ub_fs *fs;
	struct walk w;
	uint64_t ids[64];
	int n;

	if (fuzz_open_image(img, true, &fuzz_quiet_log, &fs)) {
		fprintf(stderr, "%s: %s does not open\n", target, img->name);
		exit(1);
	}
	img->nodesize = fs->vol->nodesize;
	img->csum_type = fs->vol->csum_type;
	memset(&w, 0, sizeof(w));
	w.fs = fs;
	w.index = img;
	w.export = getenv("UBTRFS_FUZZ_EXPORT");
	export_image = img->name;
	memset(export_counts, 0, sizeof(export_counts));
	fuzz_walk_all_trees(&w, ids, &n, 64);
	if (w.export)
		write_seed(w.export, "corpus_super", img->name, fs->vol->super, UB_SUPER_INFO_SIZE, NULL, 0);
	fprintf(stderr, "%s: %s: %llu MiB, nodesize %u, %d tree blocks, %d trees, log_root %llu\n", target,
		img->name, (unsigned long long)(img->size >> 20), img->nodesize, img->nblocks, n,
		(unsigned long long)UB_GET(ub_disk_super, log_root, fs->vol->super));
	ub_fs_close(fs);
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

void fuzz_images_load(const char *target)
{
	const char *dir = getenv("UBTRFS_FUZZ_IMAGES");
	char *names[FUZZ_MAX_IMAGES];
	int nnames = 0;
	struct dirent *de;
	DIR *d;

	if (!dir)
		dir = FUZZ_IMAGE_DIR;
	d = opendir(dir);
	if (!d) {
		fprintf(stderr, "%s: cannot open the image directory %s (set UBTRFS_FUZZ_IMAGES)\n", target, dir);
		exit(1);
	}
	while ((de = readdir(d)) && nnames < FUZZ_MAX_IMAGES) {
		size_t n = strlen(de->d_name);
		if (n > 8 && !strcmp(de->d_name + n - 8, ".img.zst"))
			names[nnames++] = strdup(de->d_name);
	}
	closedir(d);
	/* sorted, so that byte 0 of an input names the same image on every machine */
	qsort(names, (size_t)nnames, sizeof(names[0]), by_name);
	for (int i = 0; i < nnames; i++) {
		char path[4096];
		struct fimage *img = &fuzz_images[fuzz_nimages];

		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		snprintf(img->name, sizeof(img->name), "%.*s", (int)(strlen(names[i]) - 8), names[i]);
		if (load_packed(path, img)) {
			fprintf(stderr, "%s: cannot load %s\n", target, path);
			exit(1);
		}
		index_image(target, img);
		fuzz_nimages++;
		free(names[i]);
	}
	if (getenv("UBTRFS_FUZZ_EXPORT"))
		exit(0);
	if (!fuzz_nimages) {
		fprintf(stderr, "%s: no images in %s\n", target, dir);
		exit(1);
	}
}

/* ---- the structure-aware mutator ---- */

static uint64_t rng_state;

static uint64_t rnd(void)
{
	/* splitmix64: libFuzzer hands us a seed per call, this stretches it */
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static uint64_t rndn(uint64_t n)
{
	return n ? rnd() % n : 0;
}

struct field {
	uint16_t off;
	uint8_t width;
};

#define F(stype, member) { (uint16_t)offsetof(struct stype, member), (uint8_t)UB_FSIZE(stype, member) }

static const struct field header_fields[] = {
	F(ub_disk_header, bytenr), F(ub_disk_header, flags), F(ub_disk_header, generation),
	F(ub_disk_header, owner), F(ub_disk_header, nritems), F(ub_disk_header, level),
	{ offsetof(struct ub_disk_header, fsid), 8 }, { offsetof(struct ub_disk_header, chunk_tree_uuid), 8 },
};
static const struct field super_fields[] = {
	F(ub_disk_super, generation), F(ub_disk_super, root), F(ub_disk_super, chunk_root),
	F(ub_disk_super, log_root), F(ub_disk_super, total_bytes), F(ub_disk_super, bytes_used),
	F(ub_disk_super, root_dir_objectid), F(ub_disk_super, num_devices), F(ub_disk_super, sectorsize),
	F(ub_disk_super, nodesize), F(ub_disk_super, stripesize), F(ub_disk_super, sys_chunk_array_size),
	F(ub_disk_super, chunk_root_generation), F(ub_disk_super, compat_ro_flags),
	F(ub_disk_super, incompat_flags), F(ub_disk_super, csum_type), F(ub_disk_super, root_level),
	F(ub_disk_super, chunk_root_level), F(ub_disk_super, log_root_level),
};
static const struct field file_extent_fields[] = {
	F(btrfs_file_extent_item, generation), F(btrfs_file_extent_item, ram_bytes),
	F(btrfs_file_extent_item, compression), F(btrfs_file_extent_item, encryption),
	F(btrfs_file_extent_item, type), F(btrfs_file_extent_item, disk_bytenr),
	F(btrfs_file_extent_item, disk_num_bytes), F(btrfs_file_extent_item, offset),
	F(btrfs_file_extent_item, num_bytes),
};
static const struct field inode_fields[] = {
	F(btrfs_inode_item, generation), F(btrfs_inode_item, size), F(btrfs_inode_item, nbytes),
	F(btrfs_inode_item, nlink), F(btrfs_inode_item, mode), F(btrfs_inode_item, rdev),
	F(btrfs_inode_item, flags),
};
static const struct field dir_fields[] = {
	{ offsetof(struct btrfs_dir_item, location), 8 }, { offsetof(struct btrfs_dir_item, location) + 8, 1 },
	{ offsetof(struct btrfs_dir_item, location) + 9, 8 }, F(btrfs_dir_item, data_len),
	F(btrfs_dir_item, name_len), F(btrfs_dir_item, type),
};
static const struct field root_fields[] = {
	F(btrfs_root_item, bytenr), F(btrfs_root_item, generation), F(btrfs_root_item, level),
	F(btrfs_root_item, root_dirid), F(btrfs_root_item, flags), F(btrfs_root_item, refs),
	F(btrfs_root_item, drop_level),
};
static const struct field chunk_fields[] = {
	F(btrfs_chunk, length), F(btrfs_chunk, stripe_len), F(btrfs_chunk, type), F(btrfs_chunk, num_stripes),
	F(btrfs_chunk, sub_stripes), { offsetof(struct btrfs_chunk, stripe) + offsetof(struct btrfs_stripe, devid), 8 },
	{ offsetof(struct btrfs_chunk, stripe) + offsetof(struct btrfs_stripe, offset), 8 },
};
static const struct field ref_fields[] = { F(btrfs_inode_ref, index), F(btrfs_inode_ref, name_len) };
static const struct field extent_fields[] = {
	F(btrfs_extent_item, refs), F(btrfs_extent_item, generation), F(btrfs_extent_item, flags),
};

static uint8_t width_code(unsigned w)
{
	return w >= 8 ? 3 : w >= 4 ? 2 : w >= 2 ? 1 : 0;
}

/* A value worth trying in a field of width `w` whose current value is `cur`. */
static uint64_t pick_value(const struct fimage *img, unsigned w, uint64_t cur, uint8_t *op)
{
	static const uint64_t special[] = {
		0, 1, 2, 3, 7, 8, 0x7f, 0x80, 0xff, 0x100, 0xfff, 0x1000, 0x1001, 0x4000, 0x8000, 0xffff, 0x10000,
		0x20000, 0x7fffffff, 0x80000000, 0xffffffff, 0x100000000ULL, 0x7fffffffffffffffULL,
		0x8000000000000000ULL, UINT64_MAX, UINT64_MAX - 1, 256, 257, 258, 5,
		(uint64_t)-7 /* tree log */, (uint64_t)-6, (uint64_t)-8, 1ULL << 62,
	};
	switch (rndn(6)) {
	case 0:
	case 1:
	{
		int d = (int)rndn(17) - 8;

		*op = 1 << 2; /* add a small delta */
		return (uint64_t)(int64_t)(d ? d : 1);
	}
	case 2:
		return special[rndn(sizeof(special) / sizeof(special[0]))];
	case 3:
		/* a multiple or offset of the block and sector sizes: plausible addresses and lengths */
		return cur + (rndn(2) ? 1 : -1) * (uint64_t)(rndn(2) ? img->nodesize : 4096) * (1 + rndn(4));
	case 4:
		if (img->nblocks)
			return img->blocks[rndn((uint64_t)img->nblocks)].logical;
		return cur;
	default:
		*op = 2 << 2; /* flip one bit */
		return 1ULL << rndn(w * 8);
	}
}

static const struct field *item_fields(uint8_t type, int *n)
{
	switch (type) {
	case BTRFS_EXTENT_DATA_KEY: *n = (int)(sizeof(file_extent_fields) / sizeof(file_extent_fields[0])); return file_extent_fields;
	case BTRFS_INODE_ITEM_KEY: *n = (int)(sizeof(inode_fields) / sizeof(inode_fields[0])); return inode_fields;
	case BTRFS_DIR_ITEM_KEY:
	case BTRFS_DIR_INDEX_KEY:
	case BTRFS_XATTR_ITEM_KEY: *n = (int)(sizeof(dir_fields) / sizeof(dir_fields[0])); return dir_fields;
	case BTRFS_ROOT_ITEM_KEY: *n = (int)(sizeof(root_fields) / sizeof(root_fields[0])); return root_fields;
	case BTRFS_CHUNK_ITEM_KEY: *n = (int)(sizeof(chunk_fields) / sizeof(chunk_fields[0])); return chunk_fields;
	case BTRFS_INODE_REF_KEY: *n = (int)(sizeof(ref_fields) / sizeof(ref_fields[0])); return ref_fields;
	case BTRFS_EXTENT_ITEM_KEY:
	case BTRFS_METADATA_ITEM_KEY: *n = (int)(sizeof(extent_fields) / sizeof(extent_fields[0])); return extent_fields;
	default: *n = 0; return NULL;
	}
}

/* A new mutation, aimed at a field of the block it picks. */
static void new_mut(const struct fimage *img, struct mut *m)
{
	uint32_t off = 0;
	unsigned w = 8;
	uint8_t op = 0;
	const uint8_t *blk;
	uint32_t len;

	m->block = (uint16_t)rndn((uint64_t)img->nblocks + 1);
	if (m->block == img->nblocks || rndn(16) == 0) {
		const struct field *f = &super_fields[rndn(sizeof(super_fields) / sizeof(super_fields[0]))];

		m->block = (uint16_t)img->nblocks;
		blk = img->mem + UB_SUPER_INFO_OFFSET;
		len = UB_SUPER_INFO_SIZE;
		off = f->off;
		w = f->width;
	} else {
		const struct fblock *b = &img->blocks[m->block];
		uint32_t nr, slot;
		unsigned kind = (unsigned)rndn(8);

		blk = img->mem + b->phys[0];
		len = img->nodesize;
		nr = (uint32_t)UB_GET(ub_disk_header, nritems, blk);
		slot = nr ? (uint32_t)rndn(nr + (rndn(8) == 0)) : 0;
		if (kind == 0 || nr == 0) {
			const struct field *f = &header_fields[rndn(sizeof(header_fields) / sizeof(header_fields[0]))];
			off = f->off;
			w = f->width;
		} else if (b->level > 0) {
			uint32_t base = UB_HEADER_SIZE + slot * UB_KEY_PTR_SIZE;
			switch (rndn(5)) {
			case 0: off = base; break;                /* key objectid */
			case 1: off = base + 8; w = 1; break;     /* key type */
			case 2: off = base + 9; break;            /* key offset */
			case 3: off = base + 17; break;           /* blockptr */
			default: off = base + 25; break;          /* generation */
			}
		} else {
			uint32_t base = UB_HEADER_SIZE + slot * UB_ITEM_SIZE;
			uint32_t ioff = (uint32_t)get_n(blk + base + 17, 4), isize = (uint32_t)get_n(blk + base + 21, 4);
			uint8_t type = blk[base + 8];

			switch (kind) {
			case 1: off = base; break;
			case 2: off = base + 8; w = 1; break;
			case 3: off = base + 9; break;
			case 4: off = base + 17 + 4 * (uint32_t)rndn(2); w = 4; break; /* item offset or size */
			default: {
				/* the item body: a field the readers interpret, or any aligned spot */
				int nf;
				const struct field *fl = item_fields(type, &nf);

				if (fl && rndn(4)) {
					const struct field *f = &fl[rndn((uint64_t)nf)];
					off = UB_HEADER_SIZE + ioff + f->off;
					w = f->width;
				} else {
					w = 1u << rndn(4);
					off = UB_HEADER_SIZE + ioff + (isize ? (uint32_t)rndn(isize) : 0);
				}
				break;
			}
			}
		}
		if (off + w > len)
			off = len - w;
	}
	m->value = pick_value(img, w, get_n(blk + off, w), &op);
	m->offset = (uint16_t)off;
	m->op = (uint8_t)(width_code(w) | op | (rndn(8) == 0 ? 0x10 : 0) | (rndn(32) == 0 ? 0x20 : 0));
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed)
{
	const struct fimage *img;
	size_t nm;
	struct mut m;

	rng_state = seed;
	if (max_size < FUZZ_HDR + FUZZ_ENTRY)
		return LLVMFuzzerMutate(data, size, max_size);
	if (size < FUZZ_HDR) {
		data[0] = (uint8_t)rndn((uint64_t)fuzz_nimages);
		data[1] = 0;
		size = FUZZ_HDR;
	}
	/* whole entries only */
	size = FUZZ_HDR + (size - FUZZ_HDR) / FUZZ_ENTRY * FUZZ_ENTRY;
	if (size > FUZZ_HDR + FUZZ_MAX_MUT * FUZZ_ENTRY)
		size = FUZZ_HDR + FUZZ_MAX_MUT * FUZZ_ENTRY;
	nm = (size - FUZZ_HDR) / FUZZ_ENTRY;
	switch (rndn(16)) {
	case 0:
		/* libFuzzer's own byte mutations, with its comparison hints */
		return LLVMFuzzerMutate(data, size, max_size);
	case 1:
		data[1] ^= 1; /* with or without the fsync log */
		return size;
	case 2:
		if (fuzz_nimages > 1 && rndn(4) == 0) {
			data[0] = (uint8_t)((data[0] % fuzz_nimages + 1 + rndn((uint64_t)fuzz_nimages - 1)) % fuzz_nimages);
			return size;
		}
		break;
	case 3:
	case 4:
		if (nm > 0) {
			size_t i = rndn(nm);
			memmove(data + FUZZ_HDR + i * FUZZ_ENTRY, data + FUZZ_HDR + (i + 1) * FUZZ_ENTRY,
				(nm - i - 1) * FUZZ_ENTRY);
			return size - FUZZ_ENTRY;
		}
		break;
	case 5:
	case 6:
		if (nm > 0) {
			/* a new value for an existing entry */
			size_t i = rndn(nm);
			uint8_t op = 0;
			get_mut(data + FUZZ_HDR + i * FUZZ_ENTRY, &m);
			img = &fuzz_images[data[0] % fuzz_nimages];
			m.value = pick_value(img, 8, m.value, &op);
			m.op = (uint8_t)((m.op & 0x33) | op);
			put_mut(data + FUZZ_HDR + i * FUZZ_ENTRY, &m);
			return size;
		}
		break;
	default:
		break;
	}
	img = &fuzz_images[data[0] % fuzz_nimages];
	if (nm >= FUZZ_MAX_MUT || size + FUZZ_ENTRY > max_size) {
		/* full: replace one */
		size_t i = rndn(nm ? nm : 1);
		new_mut(img, &m);
		put_mut(data + FUZZ_HDR + i * FUZZ_ENTRY, &m);
		return size;
	}
	new_mut(img, &m);
	put_mut(data + size, &m);
	return size + FUZZ_ENTRY;
}
