/* SPDX-License-Identifier: MIT */
/* Older roots: probing a root tree, and finding the root trees still on disk. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "ubtrfs/rootscan.h"
#include "fs/fs_priv.h"

#define SB(field, sb) UB_GET(ub_disk_super, field, sb)
#define BK(field, b) UB_GET(ub_disk_root_backup, field, b)
#define RI(field, p) UB_GET(btrfs_root_item, field, p)
#define HD(field, p) UB_GET(ub_disk_header, field, p)

const uint64_t ub_probe_tree_ids[UB_PROBE_NTREES] = { BTRFS_EXTENT_TREE_OBJECTID, BTRFS_CSUM_TREE_OBJECTID,
						      BTRFS_FS_TREE_OBJECTID, BTRFS_DEV_TREE_OBJECTID };

static int read_root_block(struct ub_tree_ctx *tc, const struct ub_root *r)
{
	struct ub_expect exp = { .owner = r->objectid, .level = r->level, .generation = r->generation,
				 .exact_owner = true };
	struct ub_eb *eb;
	int ret = ub_tree_read_block(tc, r->bytenr, &exp, &eb);

	if (!ret)
		ub_eb_put(tc, eb);
	return ret;
}

/* The root of tree `id` as the newest ROOT_ITEM under `rt` names it: 0, -ENOENT, <0. */
static int named_root(struct ub_tree_ctx *tc, const struct ub_root *rt, uint64_t id, struct ub_root *out)
{
	struct ub_key key = { id, BTRFS_ROOT_ITEM_KEY, UINT64_MAX };
	struct ub_path p;
	const uint8_t *d;
	uint32_t size;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_search_le(tc, rt, &key, &p);
	if (ret == 1)
		ret = -ENOENT;
	if (!ret) {
		ub_path_key(&p, &key);
		d = ub_path_data(&p, &size);
		if (key.objectid != id || key.type != BTRFS_ROOT_ITEM_KEY)
			ret = -ENOENT;
		else if (size < offsetof(struct btrfs_root_item, generation_v2) || !RI(bytenr, d) ||
			 RI(level, d) >= UB_MAX_LEVEL)
			ret = -EUCLEAN;
		else
			*out = (struct ub_root){ id, RI(bytenr, d), RI(generation, d), (uint8_t)RI(level, d) };
	}
	ub_path_release(&p);
	return ret;
}

int ub_root_tree_probe(struct ub_tree_ctx *tc, const struct ub_root *root_tree, struct ub_root_probe *out)
{
	int first = 0;

	memset(out, 0, sizeof(*out));
	out->tree = *root_tree;
	/* a probe expects failures: the caller reports them, once, in its own words */
	ub_tree_quiet(true);
	out->tree_err = read_root_block(tc, root_tree);
	first = out->tree_err;
	for (int i = 0; i < UB_PROBE_NTREES; i++) {
		int ret = out->tree_err;

		if (!ret)
			ret = named_root(tc, root_tree, ub_probe_tree_ids[i], &out->trees[i].root);
		if (!ret)
			ret = read_root_block(tc, &out->trees[i].root);
		out->trees[i].err = ret;
		if (!first)
			first = ret;
	}
	ub_tree_quiet(false);
	return first;
}

/* Entries [0, known) are looked through for the same block first; the scan meets each address once. */
static int add_candidate(struct ub_root_candidate **v, size_t *n, size_t *cap, size_t known, uint64_t bytenr,
			 uint64_t gen, uint8_t level, struct ub_root_candidate **out)
{
	for (size_t i = 0; i < *n && i < known; i++) {
		if ((*v)[i].bytenr == bytenr && (*v)[i].generation == gen) {
			*out = &(*v)[i];
			return 0;
		}
	}
	if (*n == *cap) {
		size_t nc = *cap ? *cap * 2 : 16;
		struct ub_root_candidate *nv = realloc(*v, nc * sizeof(*nv));

		if (!nv)
			return -ENOMEM;
		*v = nv;
		*cap = nc;
	}
	*out = &(*v)[(*n)++];
	memset(*out, 0, sizeof(**out));
	(*out)->bytenr = bytenr;
	(*out)->generation = gen;
	(*out)->level = level;
	(*out)->backup_slot = -1;
	return 0;
}

/* A block that claims to be a tree block of this filesystem at this address (verified later). */
static bool looks_like_tree_block(const struct ub_volume *vol, const uint8_t *h, uint64_t logical)
{
	return HD(bytenr, h) == logical && HD(level, h) < UB_MAX_LEVEL &&
	       !memcmp(UB_PTR(ub_disk_header, fsid, h), vol->metadata_uuid, UB_FSID_SIZE);
}

#define SCAN_STEP (1U << 20)

/*
 * Whether some copy of chunk `ch` lies on a present device whole: a chunk
 * item can claim any length (a crafted one, terabytes), and a scan of what no
 * device holds would read nothing for hours.
 */
static bool chunk_on_disk(const struct ub_chunk *ch)
{
	int ds = ub_chunk_data_stripes(ch);
	uint64_t per_dev = ds > 0 ? ch->length / (uint64_t)ds : ch->length;

	for (int j = 0; j < ch->num_stripes; j++) {
		const struct ub_vdev *v = ch->stripes[j].dev;

		if (v && v->dev && ch->stripes[j].physical <= ub_dev_size(v->dev) &&
		    per_dev <= ub_dev_size(v->dev) - ch->stripes[j].physical)
			return true;
	}
	return false;
}

/* One block the header check let through: verified on any copy, then handed to ops->found. */
static int scan_one(struct ub_fs *fs, const struct ub_meta_scan_ops *ops, const uint8_t *h, uint64_t logical)
{
	struct ub_expect exp = { .owner = HD(owner, h), .level = HD(level, h), .generation = HD(generation, h),
				 .exact_owner = true };
	struct ub_eb *eb;
	int ret;

	if (ops->want && !ops->want(ops->arg, exp.owner, exp.generation, exp.level))
		return 0;
	/* checksum, header and tree-checker rules; a block that fails is no candidate, and no error either */
	ub_tree_quiet(true);
	ret = ub_tree_read_block(&fs->tc, logical, &exp, &eb);
	ub_tree_quiet(false);
	if (ret)
		return 0;
	ret = ops->found(ops->arg, eb);
	ub_eb_put(&fs->tc, eb);
	return ret;
}

int ub_scan_metadata(struct ub_fs *fs, const struct ub_meta_scan_ops *ops)
{
	struct ub_volume *vol = fs->vol;
	uint32_t ns = vol->nodesize;
	uint64_t total = 0, done = 0, type = ops->system ? BTRFS_BLOCK_GROUP_SYSTEM : BTRFS_BLOCK_GROUP_METADATA;
	uint8_t *buf;
	int ret = 0;

	if (!ns || SCAN_STEP % ns)
		return -EINVAL;
	buf = malloc(SCAN_STEP);
	if (!buf)
		return -ENOMEM;
	for (int c = 0; c < vol->nchunks; c++)
		if ((vol->chunks[c]->type & type) && chunk_on_disk(vol->chunks[c]))
			total += vol->chunks[c]->length;
	for (int c = 0; c < vol->nchunks && !ret; c++) {
		const struct ub_chunk *ch = vol->chunks[c];

		if (!(ch->type & type) || !chunk_on_disk(ch))
			continue;
		for (uint64_t off = 0; off < ch->length && !ret; off += SCAN_STEP) {
			uint64_t len = ch->length - off < SCAN_STEP ? ch->length - off : SCAN_STEP;

			/* an unreadable stretch (every copy) holds nothing we can use; go on past it */
			if (ub_volume_read(vol, ch->logical + off, len, 0, buf) == 0)
				for (uint64_t b = 0; b + ns <= len && !ret; b += ns)
					if (looks_like_tree_block(vol, buf + b, ch->logical + off + b))
						ret = scan_one(fs, ops, buf + b, ch->logical + off + b);
			done += len;
			if (ops->progress)
				ops->progress(ops->arg, done, total);
		}
	}
	free(buf);
	return ret;
}

struct root_scan {
	struct ub_root_candidate **v;
	size_t *n, *cap;
	size_t known; /* the superblock's candidates, before the scan's */
	ub_scan_progress_fn progress;
	void *arg;
};

static bool want_root_tree(void *arg, uint64_t owner, uint64_t generation, int level)
{
	return owner == BTRFS_ROOT_TREE_OBJECTID;
}

static int found_root_tree(void *arg, const struct ub_eb *eb)
{
	struct root_scan *rs = arg;
	struct ub_root_candidate *cand;
	int ret = add_candidate(rs->v, rs->n, rs->cap, rs->known, ub_eb_start(eb), ub_eb_generation(eb),
				ub_eb_level(eb), &cand);

	if (!ret)
		cand->scanned = true;
	return ret;
}

static void root_scan_progress(void *arg, uint64_t done, uint64_t total)
{
	struct root_scan *rs = arg;

	if (rs->progress)
		rs->progress(rs->arg, done, total);
}

static int cand_cmp(const void *a, const void *b)
{
	const struct ub_root_candidate *x = a, *y = b;

	if (x->generation != y->generation)
		return x->generation < y->generation ? 1 : -1;
	return x->bytenr < y->bytenr ? -1 : x->bytenr > y->bytenr;
}

/*
 * A root tree of several levels leaves its lower blocks in the scan too: of
 * the scanned blocks of one generation only those of the highest level can be
 * its root. v is sorted by generation; the superblock's candidates all stay.
 */
static size_t keep_top_levels(struct ub_root_candidate *v, size_t n)
{
	size_t k = 0;

	for (size_t i = 0, j; i < n; i = j) {
		uint8_t top = 0;

		for (j = i; j < n && v[j].generation == v[i].generation; j++)
			if (v[j].level > top)
				top = v[j].level;
		for (size_t m = i; m < j; m++)
			if (v[m].level == top || v[m].current || v[m].backup_slot >= 0)
				v[k++] = v[m];
	}
	return k;
}

int ub_find_roots(struct ub_fs *fs, bool scan, ub_scan_progress_fn progress, void *arg,
		  struct ub_root_candidate **out, size_t *nout)
{
	const uint8_t *sb = fs->vol->super;
	struct ub_root_candidate *v = NULL, *cand;
	size_t n = 0, cap = 0;
	int ret;

	ret = add_candidate(&v, &n, &cap, SIZE_MAX, SB(root, sb), SB(generation, sb), (uint8_t)SB(root_level, sb),
			    &cand);
	if (!ret)
		cand->current = true;
	for (int i = 0; i < UB_NUM_BACKUP_ROOTS && !ret; i++) {
		const uint8_t *b = UB_PTR(ub_disk_super, super_roots, sb) + i * sizeof(struct ub_disk_root_backup);

		if (!BK(tree_root, b) || BK(tree_root_level, b) >= UB_MAX_LEVEL)
			continue;
		ret = add_candidate(&v, &n, &cap, SIZE_MAX, BK(tree_root, b), BK(tree_root_gen, b),
				    (uint8_t)BK(tree_root_level, b), &cand);
		if (!ret)
			cand->backup_slot = i;
	}
	if (!ret && scan) {
		struct root_scan rs = { &v, &n, &cap, n, progress, arg };
		struct ub_meta_scan_ops ops = { want_root_tree, found_root_tree, root_scan_progress, &rs };

		ret = ub_scan_metadata(fs, &ops);
	}
	if (ret) {
		free(v);
		return ret;
	}
	qsort(v, n, sizeof(*v), cand_cmp);
	n = keep_top_levels(v, n);
	for (size_t i = 0; i < n; i++) {
		struct ub_root r = { BTRFS_ROOT_TREE_OBJECTID, v[i].bytenr, v[i].generation, v[i].level };

		ub_root_tree_probe(&fs->tc, &r, &v[i].probe);
	}
	*out = v;
	*nout = n;
	return 0;
}
