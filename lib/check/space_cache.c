/* SPDX-License-Identifier: MIT */
/*
 * The v1 space cache: for each block group, a file of the root tree (its
 * FREE_SPACE header names the inode) lists the free space the kernel saw
 * when it wrote it. A cache the kernel would not load (generation or page
 * checksum mismatch, an entry of zero bytes, less free space than the block
 * group leaves) costs only a rebuild and is no problem. One the kernel would
 * load must not call anything free that holds an extent or a superblock
 * mirror, and must not record more free space than the block group item
 * leaves: the allocator would hand out used space. The free ranges of every
 * loaded cache are held (16 bytes each) and compared with the extent tree as
 * it streams by.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check/chunks.h"

/* The kernel writes the cache in pages; x86's 4 KiB is what every cache of a 4 KiB-sector filesystem has. */
#define V1_PAGE 4096U
#define V1_ENTRY 17U /* offset, bytes (le64 each), type */
#define V1_EXTENT 1
#define V1_BITMAP 2
/* A cache far beyond what any block group needs (the kernel's is 32 KiB per GiB) is not read. */
#define V1_MAX_BYTES (64ULL << 20)

struct v1_load {
	struct cstate *s;
	long bg; /* index into s->ch */
	uint64_t hdr_gen, entries, bitmaps, ino;
	struct ub_key key;
	const char *discard; /* why the kernel would not load it */
};

static void note(const struct cstate *s, uint64_t bg, const char *why)
{
	if (s->c->opts.verbosity >= UB_LOG_INFO)
		fprintf(stderr, "ubtrfs: note: v1 space cache of block group %llu not compared: %s\n",
			(unsigned long long)bg, why);
}

static void where_cache(struct ub_chk_problem *p, const struct ub_key *k, uint64_t logical)
{
	chk_where(p, BTRFS_ROOT_TREE_OBJECTID, k, logical);
	p->cls = UB_CHK_FREE_SPACE;
}

static int add_range(struct cstate *s, uint64_t start, uint64_t len)
{
	if (chk_reserve(&s->v1, &s->v1_cap, s->nv1, sizeof(*s->v1), 64))
		return -ENOMEM;
	s->v1[s->nv1++] = (struct chk_v1_range){ start, len };
	return 0;
}

static bool page_ok(const uint8_t *buf, uint32_t page, uint32_t npages)
{
	uint8_t sum[UB_CSUM_SIZE_MAX];
	uint32_t skip = page ? 0 : 4 * npages;

	ub_csum(BTRFS_CSUM_TYPE_CRC32, buf + (size_t)page * V1_PAGE + skip, V1_PAGE - skip, sum);
	return !memcmp(sum, buf + 4 * (size_t)page, 4);
}

/* Entries and bitmaps of a cache file read whole into buf: its free ranges go to s->v1. */
static int parse(struct v1_load *l, const uint8_t *buf, uint64_t size)
{
	struct cstate *s = l->s;
	uint32_t npages = (uint32_t)((size + V1_PAGE - 1) / V1_PAGE);
	uint32_t page = 0, at = 4 * npages + 8, nbitmaps = 0;
	uint64_t *bitmap_at = NULL;
	size_t first = s->nv1;
	int ret = 0;

	if ((uint64_t)npages * V1_PAGE > size || at + V1_ENTRY > V1_PAGE) {
		l->discard = "its file is too small for its page checksums";
		return 0;
	}
	for (uint32_t i = 0; i < npages; i++)
		if (!page_ok(buf, i, npages)) {
			l->discard = "a page checksum does not match";
			return 0;
		}
	if (ub_le64(buf + 4 * npages) != l->hdr_gen) {
		l->discard = "the generation in its first page is not its header's";
		return 0;
	}
	if (l->bitmaps > npages || !(bitmap_at = calloc(l->bitmaps + 1, sizeof(*bitmap_at))))
		goto too_many;
	for (uint64_t e = 0; e < l->entries; e++) {
		const uint8_t *d;
		uint64_t off, len;

		if (at + V1_ENTRY > V1_PAGE) {
			page++;
			at = 0;
		}
		if (page >= npages)
			goto too_many;
		d = buf + (size_t)page * V1_PAGE + at;
		at += V1_ENTRY;
		off = ub_le64(d);
		len = ub_le64(d + 8);
		if (!len) {
			l->discard = "an entry of zero bytes";
			goto out_discard;
		}
		if (d[16] == V1_BITMAP) {
			if (nbitmaps >= l->bitmaps)
				goto too_many;
			bitmap_at[nbitmaps++] = off;
		} else if ((ret = add_range(s, off, len))) {
			goto out;
		}
	}
	/* the bitmaps follow, a page each, from the page after the last entry's */
	for (uint32_t b = 0; b < nbitmaps; b++) {
		const uint8_t *bits;
		uint32_t nbits = V1_PAGE * 8;

		if (++page >= npages)
			goto too_many;
		bits = buf + (size_t)page * V1_PAGE;
		for (uint32_t i = 0; i < nbits;) {
			uint32_t j;

			if (!((bits[i / 8] >> (i % 8)) & 1)) {
				i++;
				continue;
			}
			for (j = i; j < nbits && ((bits[j / 8] >> (j % 8)) & 1); j++)
				;
			if ((ret = add_range(s, bitmap_at[b] + (uint64_t)i * s->sectorsize,
					     (uint64_t)(j - i) * s->sectorsize)))
				goto out;
			i = j;
		}
	}
	free(bitmap_at);
	return 0;
too_many:
	l->discard = "it counts more entries or bitmaps than its file holds";
out_discard:
	s->nv1 = first;
out:
	free(bitmap_at);
	return ret;
}

/* One FREE_SPACE header of the root tree: its cache read, checked for what the kernel checks on load. */
static int header(struct cstate *s, const struct ub_key *k, const uint8_t *d, uint32_t size)
{
	struct v1_load l = { .s = s, .key = *k };
	struct ub_chk_problem p;
	struct ub_inode ino;
	struct cinfo *ci;
	uint8_t *buf = NULL;
	uint64_t got = 0;
	size_t first = s->nv1;
	int ret;

	if (k->objectid != BTRFS_FREE_SPACE_OBJECTID)
		return 2; /* past the headers */
	if (k->type != 0 || size < sizeof(struct btrfs_free_space_header))
		return 0;
	l.bg = chk_find_chunk(s, k->offset);
	where_cache(&p, k, k->offset);
	/* block group items stream by with the extent tree, after this: chk_space_cache_check looks for them */
	if (l.bg < 0 || s->ch[l.bg].logical != k->offset) {
		chk_report(s->c, &p, "a v1 space cache for %llu, where no chunk starts",
			   (unsigned long long)k->offset);
		return 0;
	}
	ci = &s->ch[l.bg];
	l.ino = UB_GET(btrfs_disk_key, objectid, UB_PTR(btrfs_free_space_header, location, d));
	l.hdr_gen = UB_GET(btrfs_free_space_header, generation, d);
	l.entries = UB_GET(btrfs_free_space_header, num_entries, d);
	l.bitmaps = UB_GET(btrfs_free_space_header, num_bitmaps, d);
	if (!l.entries)
		return 0; /* nothing the kernel would load */
	chk_capture(s->c);
	ret = ub_inode_read(s->fs, BTRFS_ROOT_TREE_OBJECTID, l.ino, &ino);
	chk_captured(s->c);
	if (ret) {
		note(s, ci->logical, "its inode cannot be read");
		return ret == -ENOMEM ? ret : 0;
	}
	if (!ino.size || !ino.generation || ino.generation != l.hdr_gen) {
		note(s, ci->logical, "its inode's generation is not its header's (the kernel rebuilds it)");
		return 0;
	}
	if (ino.size > V1_MAX_BYTES || l.entries > ino.size / V1_ENTRY + 1) {
		chk_report(s->c, &p, "v1 space cache of block group %llu: a file of %llu bytes with %llu entries",
			   (unsigned long long)ci->logical, (unsigned long long)ino.size, (unsigned long long)l.entries);
		return 0;
	}
	if (s->sectorsize != V1_PAGE) {
		note(s, ci->logical, "its page size is the writer's, and sectors are not 4 KiB");
		return 0;
	}
	buf = calloc(1, ino.size);
	if (!buf)
		return -ENOMEM;
	chk_capture(s->c);
	ret = ub_file_read(s->fs, BTRFS_ROOT_TREE_OBJECTID, l.ino, 0, ino.size, buf, &got, NULL);
	chk_captured(s->c);
	if (ret || got != ino.size) {
		free(buf);
		note(s, ci->logical, "its file cannot be read whole");
		return ret == -ENOMEM ? ret : 0;
	}
	ret = parse(&l, buf, ino.size);
	free(buf);
	if (ret)
		return ret;
	if (l.discard) {
		note(s, ci->logical, l.discard);
		return 0;
	}
	ci->v1_loaded = true;
	ci->v1_key = *k;
	for (size_t i = first; i < s->nv1; i++) {
		const struct chk_v1_range *r = &s->v1[i];

		if (r->start < ci->logical || r->len > ci->logical + ci->length - r->start) {
			where_cache(&p, k, r->start);
			chk_report(s->c, &p, "v1 space cache of block group %llu: free space [%llu, +%llu) outside it",
				   (unsigned long long)ci->logical, (unsigned long long)r->start,
				   (unsigned long long)r->len);
			continue;
		}
		ci->v1_free += r->len;
	}
	return 0;
}

static int by_start(const void *a, const void *b)
{
	const struct chk_v1_range *x = a, *y = b;

	return x->start < y->start ? -1 : x->start > y->start;
}

int chk_space_cache_load(struct cstate *s)
{
	struct ub_key from = { BTRFS_FREE_SPACE_OBJECTID, 0, 0 };
	int ret = chk_scan_tree(s, BTRFS_ROOT_TREE_OBJECTID, &from, header);

	if (ret < 0)
		return ret;
	if (s->nv1)
		qsort(s->v1, s->nv1, sizeof(*s->v1), by_start);
	/* overlapping entries would count free space twice */
	for (size_t i = 1; i < s->nv1; i++) {
		const struct chk_v1_range *a = &s->v1[i - 1], *b = &s->v1[i];
		long bg = chk_find_chunk(s, b->start);
		struct ub_chk_problem p;

		if (a->start + a->len <= b->start || bg < 0)
			continue;
		where_cache(&p, &s->ch[bg].v1_key, b->start);
		chk_report(s->c, &p, "v1 space cache of block group %llu: free space [%llu, +%llu) overlaps [%llu, +%llu)",
			   (unsigned long long)s->ch[bg].logical, (unsigned long long)b->start,
			   (unsigned long long)b->len, (unsigned long long)a->start, (unsigned long long)a->len);
	}
	return 0;
}

/* Whether [start, +len) meets a loaded cache's free space: the first address it meets, else 0. */
static uint64_t free_overlap(struct cstate *s, uint64_t start, uint64_t len)
{
	while (s->v1_cursor < s->nv1 && s->v1[s->v1_cursor].start + s->v1[s->v1_cursor].len <= start)
		s->v1_cursor++;
	for (size_t i = s->v1_cursor; i < s->nv1 && s->v1[i].start < start + len; i++)
		if (s->v1[i].start + s->v1[i].len > start)
			return s->v1[i].start > start ? s->v1[i].start : start ? start : 1;
	return 0;
}

void chk_space_cache_extent(struct cstate *s, uint64_t start, uint64_t len)
{
	long bg;
	uint64_t at;

	if (!s->nv1 || !(at = free_overlap(s, start, len)))
		return;
	bg = chk_find_chunk(s, at);
	if (bg >= 0 && s->ch[bg].v1_loaded && !s->ch[bg].v1_used_free) {
		s->ch[bg].v1_used_free = at;
		s->ch[bg].v1_extent = start;
	}
}

void chk_space_cache_check(struct cstate *s)
{
	struct ub_chk_problem p;

	for (size_t i = 0; i < s->nch; i++) {
		struct cinfo *ci = &s->ch[i];
		const struct ub_chunk *c = ub_volume_find_chunk(ub_fs_volume(s->fs), ci->logical);
		uint64_t start[1 + UB_SUPER_MIRROR_MAX * 16], len[1 + UB_SUPER_MIRROR_MAX * 16], super = 0, leaves;
		int n = 0;

		if (!ci->v1_loaded || !c || c->num_stripes > 16 ||
		    ub_chunk_super_ranges(c, start, len, 1 + UB_SUPER_MIRROR_MAX * 16, &n))
			continue;
		where_cache(&p, &ci->v1_key, ci->logical);
		if (!ci->bg) {
			chk_report(s->c, &p, "a v1 space cache for %llu, where no block group starts",
				   (unsigned long long)ci->logical);
			continue;
		}
		for (int j = 0; j < n; j++) {
			bool seen = false;

			/* the kernel keeps [0, 64 KiB) out of a group that starts there, not the whole first MiB */
			if (start[j] == ci->logical && ci->logical < (1ULL << 20) && j == 0) {
				if (ci->logical >= UB_SUPER_INFO_OFFSET)
					continue;
				len[j] = UB_SUPER_INFO_OFFSET - ci->logical;
			}
			for (int m = 0; m < j; m++)
				seen |= start[m] == start[j];
			if (seen)
				continue;
			super += len[j];
			s->v1_cursor = 0;
			if (free_overlap(s, start[j], len[j]))
				chk_report(s->c, &p, "v1 space cache of block group %llu calls superblock mirror space "
					   "[%llu, +%llu) free", (unsigned long long)ci->logical,
					   (unsigned long long)start[j], (unsigned long long)len[j]);
		}
		s->c->sum.space_caches++;
		if (ci->bg_used + super > ci->length)
			continue;
		leaves = ci->length - ci->bg_used - super;
		if (ci->v1_free > leaves)
			chk_report(s->c, &p, "v1 space cache of block group %llu records %llu free bytes, its block group "
				   "item leaves %llu", (unsigned long long)ci->logical,
				   (unsigned long long)ci->v1_free, (unsigned long long)leaves);
		else if (ci->v1_free < leaves)
			note(s, ci->logical, "it records less free space than there is (the kernel rebuilds it)");
		else if (ci->v1_used_free)
			chk_report(s->c, &p, "v1 space cache of block group %llu calls %llu free, the extent at %llu "
				   "holds it", (unsigned long long)ci->logical, (unsigned long long)ci->v1_used_free,
				   (unsigned long long)ci->v1_extent);
	}
}
