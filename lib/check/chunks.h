/* SPDX-License-Identifier: MIT */
/* The chunk pass's state, shared by the files that stream trees into it (chunks.c, free_space.c). */
#ifndef UBTRFS_CHECK_CHUNKS_H
#define UBTRFS_CHECK_CHUNKS_H

#include "check/check_priv.h"

struct cstripe {
	uint64_t devid, physical;
	uint8_t dev_uuid[UB_UUID_SIZE];
	bool found;
};

struct cinfo {
	uint64_t logical, length, type, stripe_size;
	uint64_t extents_sum, bg_used;
	uint64_t free_sum;              /* bytes the free space tree calls free */
	uint32_t free_count, free_extents; /* FREE_SPACE_INFO's extent_count, FREE_SPACE_EXTENTs seen */
	uint32_t free_flags;
	uint16_t num;
	bool bg, free_info;
	bool free_format_told; /* an item of the other format than its info says was reported */
	/* the logical ranges of superblock copies the kernel keeps out of the block group (once looked up) */
	uint64_t *sup_start, *sup_len;
	int nsup;
	bool sup_known;
	struct cstripe *st;
	uint16_t *full_used; /* RAID5/6 with --check-data-csum: per full stripe, the sector rows extents cover */
	/* ---- its v1 space cache, when the kernel would load it ---- */
	bool v1_loaded;
	struct ub_key v1_key;     /* the FREE_SPACE header */
	uint64_t v1_free;         /* bytes it calls free */
	uint64_t v1_used_free, v1_extent; /* the first address it calls free that an extent holds, that extent */
};

struct chk_v1_range {
	uint64_t start, len;
};

struct dinfo {
	uint64_t devid, total, used, extents_sum;
	uint8_t uuid[UB_UUID_SIZE];
};

struct cstate {
	struct ub_checker *c;
	struct ub_fs *fs;
	uint32_t nodesize, sectorsize;
	struct cinfo *ch;
	size_t nch, cap;
	struct dinfo *dev;
	size_t ndev, dcap;
	uint64_t prev_devid, prev_dev_end; /* last device extent, for overlaps */
	uint64_t prev_ext_end, prev_ext;   /* last extent item */
	size_t blocks_cursor;              /* the tree walk's next block, for the extent checks */
	uint64_t prev_free_end;            /* last free space extent or bitmap */
	bool chunks_incomplete, devext_incomplete, extents_incomplete, bg_incomplete;
	bool newest_root; /* the superblock's own root tree, not an older one (--generation) */
	/* ---- checksum tree ---- */
	uint32_t csum_size;
	uint64_t prev_csum_end; /* end of the data the items so far cover */
	/*
	 * A second cursor in the extent tree, moving forward with the checksum
	 * items: the data extent it is at is [ext_start, ext_end). NULL: the
	 * checksums are not compared with the extents.
	 */
	struct ub_path *ext_path;
	struct ub_root ext_root;
	uint64_t ext_start, ext_end;
	bool ext_at_item, ext_done;
	/* ---- data extent references ---- */
	struct ub_key dref_key; /* the data extent item open */
	uint64_t dref_refs, dref_sum;
	bool dref_open, dref_unknown;
	size_t fext_cursor;   /* the next entry of c->fext */
	size_t fext_first, fext_n; /* the entries that point at the open extent */
	struct chk_dref {
		bool shared;
		uint64_t root, ino, offset; /* EXTENT_DATA_REF */
		uint64_t parent;            /* SHARED_DATA_REF */
		uint64_t count;
	} *drefs;             /* the open extent's references */
	size_t ndrefs, drefs_cap;
	bool drefs_nomem;
	/* ---- data checksums (--check-data-csum) ---- */
	unsigned csum_type;
	uint8_t *data_buf; /* one read's worth */
	uint64_t data_done;
	/* ---- the v1 space cache: every loaded cache's free ranges, sorted ---- */
	struct chk_v1_range *v1;
	size_t nv1, v1_cap, v1_cursor;
	/* ---- passes that stream trees ---- */
	enum ub_chk_class scan_cls; /* the class of a tree that cannot be read (0: chunk) */
};

void chk_where(struct ub_chk_problem *p, uint64_t tree, const struct ub_key *k, uint64_t logical);
typedef int (*chk_item_fn)(struct cstate *s, const struct ub_key *k, const uint8_t *d, uint32_t size);
/*
 * Every item of tree `tree` from `from` on, in key order. 0 when all were
 * seen, 1 when the tree is absent or could not be read to its end (said as a
 * problem), <0 on a fatal error.
 */
int chk_scan_tree(struct cstate *s, uint64_t tree, const struct ub_key *from, chk_item_fn fn);
/* The same for the tree at `r` (a log tree, which the root table does not hold), `name` for messages. */
int chk_scan_root(struct cstate *s, const struct ub_root *r, const char *name, const struct ub_key *from,
		  chk_item_fn fn);
/* The chunk holding `logical` (an index into s->ch), or -1. */
long chk_find_chunk(const struct cstate *s, uint64_t logical);

/* free_space.c: one item of the free space tree's stream; then the verdicts per block group. */
int chk_free_space_item(struct cstate *s, const struct ub_key *k, const uint8_t *d, uint32_t size);
void chk_free_space_check(struct cstate *s);

/*
 * space_cache.c: chk_space_cache_load (before the extent tree's stream: every
 * block group's v1 cache the kernel would load), chk_space_cache_extent for
 * each extent of the stream, chk_space_cache_check after it.
 */
int chk_space_cache_load(struct cstate *s);
void chk_space_cache_extent(struct cstate *s, uint64_t start, uint64_t len);
void chk_space_cache_check(struct cstate *s);

/*
 * csum_tree.c: chk_csum_begin (before the stream: `with_extents`, compare
 * with the extent tree's data extents too; 0 or -ENOMEM), then one item of
 * the checksum tree's stream each, then chk_csum_end.
 */
int chk_csum_begin(struct cstate *s, bool with_extents);
int chk_csum_item(struct cstate *s, const struct ub_key *k, const uint8_t *d, uint32_t size);
void chk_csum_end(struct cstate *s);

/* parity.c (--check-data-csum): mark the full stripes an extent touches; then verify those. */
void chk_parity_mark(struct cstate *s, struct cinfo *ci, uint64_t logical, uint64_t len);
void chk_parity_verify(struct cstate *s);

/* data_refs.c: every item of the extent tree's stream, then its end. */
void chk_data_refs_item(struct cstate *s, const struct ub_key *k, const uint8_t *d, uint32_t size);
void chk_data_refs_end(struct cstate *s);

#endif
