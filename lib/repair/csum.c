/* SPDX-License-Identifier: MIT */
/*
 * check --repair --init-csum-tree: the checksum tree rebuilt from the data
 * the file trees reference (docs/check.md, "Repair").
 *
 * The rule is "never bless a sector no copy verifies". Every copy of every
 * sector is read (DUP and RAID1* mirrors, RAID10 pairs, on RAID5/6 the data
 * and the copies the volume rebuilds from P and Q). Where the old tree holds a
 * checksum for the sector it is kept: when a copy matches it the data is
 * good, and when none does, a checksum made from bad bytes would turn an
 * honest read error (EIO) into silent corruption. Only where there is no old
 * checksum (or its leaf cannot be read) is one computed, and only when every
 * copy that can be read holds the same bytes; where copies disagree nothing
 * tells which is right, so the sector gets none.
 *
 * Three steps: the file trees of the last commit are read into a list of the
 * disk ranges that need checksums (per file extent item, 48 bytes each); the
 * list sorted, each sector is read once on every copy and judged against the
 * old tree, streamed beside it in address order; then, in the repair's
 * transaction, every block of the old tree is dropped and a new tree holds
 * exactly the checksums decided. The decided checksums are held in memory
 * until then (csum_size bytes per 4 KiB of data: 1 MiB per GiB with crc32c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ubtrfs/fsinfo.h"
#include "fsw/fsw.h"
#include "txn/backref.h"
#include "repair/repair_priv.h"
#include "volume/volume_priv.h"

/* Bytes of each copy one read takes at most. */
#define READ_MAX (1U << 20)
/* The copies read of a sector; RAID6 on more devices has more ways, the first ones suffice to judge. */
#define COPIES_MAX 16

/* A disk range (whole sectors) a file extent item needs checksums for, and who references it. */
struct need {
	uint64_t start, len;
	uint64_t subvol, ino;
	uint64_t key_off; /* the file extent item's key offset */
	uint64_t base;    /* disk address of file offset key_off; 0 for compressed data */
};

struct subvol_count {
	uint64_t id, extents, bytes;
};

struct sum_run {
	uint64_t start, n; /* n sectors from start */
	size_t off;        /* their checksums in sums[] */
};

struct cs {
	struct rp_ctx *c;
	struct ub_fs *fs;
	struct ub_tree_ctx *tc;
	struct ub_volume *vol;
	uint32_t ss, csize;
	unsigned ctype;
	struct need *needs;
	size_t nneeds, ncap;
	struct subvol_count *sv;
	size_t nsv, svcap;
	/* ---- the old tree, a cursor moving forward ---- */
	struct ub_root old;
	bool has_old, old_broken, old_end, old_at, old_gaps;
	struct ub_path *op;
	uint64_t cur_start, cur_end;
	const uint8_t *cur;
	/* ---- the checksums decided ---- */
	struct sum_run *runs;
	size_t nruns, rcap;
	uint8_t *sums;
	size_t slen, scap;
	/* ---- reading ---- */
	uint8_t *buf[COPIES_MAX];
	bool *readable[COPIES_MAX];
	/* ---- the old tree's blocks dropped (sorted when the extent tree is searched for the rest) ---- */
	uint64_t *dropped;
	size_t ndropped, dcap;
	/* ---- what was decided, in sectors ---- */
	uint64_t kept, computed, kept_bad, disagree, unreadable, bad_copies;
};

/* Said to the caller's sink without counting as a change: what the repair could not make good. */
static void tell(struct cs *s, uint64_t tree, uint64_t ino, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void tell(struct cs *s, uint64_t tree, uint64_t ino, const char *fmt, ...)
{
	const struct ub_repair_sink *sink = s->c->opts->sink;
	struct ub_repair_change ch = { UB_CHK_FIX_NONE, tree, ino, 0, 0, 0, NULL };
	char msg[768];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	ch.msg = msg;
	if (sink && sink->change)
		sink->change(sink->arg, &ch);
	else
		ub_warn(s->c->log, "repair: %s", msg);
}

/* ---- step 1: what the file trees reference ---- */

static struct subvol_count *count_of(struct cs *s, uint64_t id)
{
	if (s->nsv && s->sv[s->nsv - 1].id == id)
		return &s->sv[s->nsv - 1];
	if (rp_grow((void **)&s->sv, &s->svcap, s->nsv, sizeof(*s->sv), 16))
		return NULL;
	s->sv[s->nsv] = (struct subvol_count){ id, 0, 0 };
	return &s->sv[s->nsv++];
}

static int add_need(struct cs *s, uint64_t subvol, const struct ub_key *k, const uint8_t *d)
{
	uint64_t bytenr = UB_GET(btrfs_file_extent_item, disk_bytenr, d);
	uint64_t dlen = UB_GET(btrfs_file_extent_item, disk_num_bytes, d);
	uint64_t off = UB_GET(btrfs_file_extent_item, offset, d);
	uint64_t num = UB_GET(btrfs_file_extent_item, num_bytes, d);
	bool compressed = UB_GET(btrfs_file_extent_item, compression, d) != 0;
	uint64_t start, end, base = 0;
	struct subvol_count *sc;

	if (compressed) {
		/* the checksums cover the bytes on disk, the whole compressed extent */
		start = bytenr;
		end = bytenr + dlen;
	} else {
		if (off > dlen || num > dlen - off) {
			tell(s, subvol, k->objectid,
			     "inode %llu of tree %llu: the file extent at offset %llu references [%llu, +%llu) of its "
			     "disk extent of %llu bytes; only the disk extent's bytes get checksums",
			     (unsigned long long)k->objectid, (unsigned long long)subvol, (unsigned long long)k->offset,
			     (unsigned long long)off, (unsigned long long)num, (unsigned long long)dlen);
			off = off > dlen ? dlen : off;
			num = dlen - off;
		}
		start = bytenr + off;
		end = start + num;
		base = start;
	}
	if (end < start || end > UINT64_MAX - s->ss) {
		tell(s, subvol, k->objectid, "inode %llu of tree %llu: the file extent at offset %llu runs past the end "
		     "of the address space: left out", (unsigned long long)k->objectid, (unsigned long long)subvol,
		     (unsigned long long)k->offset);
		return 0;
	}
	start -= start % s->ss;
	end += (s->ss - end % s->ss) % s->ss;
	if (start >= end)
		return 0;
	if (rp_grow((void **)&s->needs, &s->ncap, s->nneeds, sizeof(*s->needs), 1024))
		return -ENOMEM;
	s->needs[s->nneeds++] = (struct need){ start, end - start, subvol, k->objectid, k->offset, base };
	sc = count_of(s, subvol);
	if (!sc)
		return -ENOMEM;
	sc->extents++;
	sc->bytes += end - start;
	return 0;
}

/* Every REG file extent item of one subvolume whose data is checksummed. */
static int collect_subvol(struct cs *s, uint64_t id)
{
	struct ub_key min = { 0, 0, 0 }, max = { UINT64_MAX, 0xff, UINT64_MAX }, k;
	struct ub_tree_iter it;
	struct ub_root r;
	uint64_t ino = 0, flags = 0;
	const uint8_t *d;
	uint32_t size;
	char tn[32];
	int ret = ub_fs_tree_root(s->fs, id, &r);

	if (ret == -ENOENT)
		return 0; /* an empty tree: nothing references data */
	if (ret)
		goto fail;
	ret = ub_tree_iter_start(&it, s->tc, &r, &min, &max);
	if (ret)
		goto fail;
	while (!ret && !(ret = ub_tree_iter_next(&it, &k, &d, &size))) {
		if (k.type == BTRFS_INODE_ITEM_KEY) {
			ino = k.objectid;
			flags = size >= sizeof(struct btrfs_inode_item) ? UB_GET(btrfs_inode_item, flags, d) : 0;
			continue;
		}
		if (k.type != BTRFS_EXTENT_DATA_KEY || size < sizeof(struct btrfs_file_extent_item))
			continue;
		if (UB_GET(btrfs_file_extent_item, type, d) != BTRFS_FILE_EXTENT_REG ||
		    !UB_GET(btrfs_file_extent_item, disk_bytenr, d))
			continue;
		/* an item without its inode item is taken as checksummed: the kernel's default */
		if (k.objectid == ino && (flags & UB_INODE_NODATASUM) && !UB_GET(btrfs_file_extent_item, compression, d))
			continue;
		ret = add_need(s, id, &k, d);
	}
	ub_tree_iter_end(&it);
	if (ret == 1)
		return 0;
	if (ret == -ENOMEM)
		return ret;
fail:
	ub_err(s->c->log, "repair: --init-csum-tree: tree %s cannot be read to its end (%s): no checksum tree is "
	       "rebuilt from part of the files", ub_tree_name(id, tn, sizeof(tn)), strerror(-ret));
	return ret;
}

/* Every subvolume and snapshot the root tree names (deleted ones, refs 0, left to the cleaner). */
static int collect(struct cs *s)
{
	struct ub_key min = { BTRFS_FS_TREE_OBJECTID, BTRFS_ROOT_ITEM_KEY, 0 };
	struct ub_key max = { BTRFS_LAST_FREE_OBJECTID, BTRFS_ROOT_ITEM_KEY, UINT64_MAX }, k;
	struct ub_tree_iter it;
	struct ub_root rt;
	uint64_t *ids = NULL;
	size_t n = 0, cap = 0;
	const uint8_t *d;
	uint32_t size;
	int ret = ub_fs_tree_root(s->fs, BTRFS_ROOT_TREE_OBJECTID, &rt);

	if (!ret)
		ret = ub_tree_iter_start(&it, s->tc, &rt, &min, &max);
	if (ret)
		return ret;
	while (!(ret = ub_tree_iter_next(&it, &k, &d, &size))) {
		if (k.type != BTRFS_ROOT_ITEM_KEY ||
		    (k.objectid != BTRFS_FS_TREE_OBJECTID && k.objectid < BTRFS_FIRST_FREE_OBJECTID))
			continue;
		if (size < offsetof(struct btrfs_root_item, refs) + 4 || !UB_GET(btrfs_root_item, refs, d))
			continue;
		if (n && ids[n - 1] == k.objectid)
			continue;
		if (rp_grow((void **)&ids, &cap, n, sizeof(*ids), 16)) {
			ret = -ENOMEM;
			break;
		}
		ids[n++] = k.objectid;
	}
	ub_tree_iter_end(&it);
	if (ret < 0)
		ub_err(s->c->log, "repair: --init-csum-tree: the root tree cannot be read to its end (%s)",
		       strerror(-ret));
	else
		ret = 0;
	for (size_t i = 0; !ret && i < n; i++)
		ret = collect_subvol(s, ids[i]);
	free(ids);
	return ret;
}

/* ---- step 2: every copy of every sector, against the old tree ---- */

/* The cursor at the first checksum item ending past `at` (old_end when none). */
static void old_seek(struct cs *s, uint64_t at)
{
	struct ub_key k = { BTRFS_EXTENT_CSUM_OBJECTID, BTRFS_EXTENT_CSUM_KEY, at };
	int ret;

	ub_path_release(s->op);
	s->old_at = s->old_end = false;
	s->cur = NULL;
	ret = ub_tree_search_le(s->tc, &s->old, &k, s->op);
	if (ret == 1) {
		/* nothing at or before `at`: the first item is after it */
		k.offset = 0;
		k.objectid = BTRFS_EXTENT_CSUM_OBJECTID;
		ret = ub_tree_search(s->tc, &s->old, &k, s->op);
		ret = ret == 2 ? 1 : ret < 0 ? ret : 0;
	}
	if (ret < 0) {
		s->old_broken = s->old_gaps = true;
		return;
	}
	s->old_broken = false;
	if (ret == 1 || !s->op->nodes[0]) {
		s->old_end = true;
		return;
	}
	s->old_at = true;
}

/* The item at the cursor as the current one, or the next that is an EXTENT_CSUM item: false at the end. */
static bool old_load(struct cs *s, bool step)
{
	for (;;) {
		struct ub_key k;
		const uint8_t *d;
		uint32_t size;
		int ret = step ? ub_tree_next(s->op) : 0;

		step = true;
		if (ret < 0) {
			s->old_broken = s->old_gaps = true;
			s->old_at = false;
			return false;
		}
		if (ret == 1) {
			s->old_end = true;
			s->old_at = false;
			return false;
		}
		ub_path_key(s->op, &k);
		d = ub_path_data(s->op, &size);
		if (k.objectid != BTRFS_EXTENT_CSUM_OBJECTID || k.type != BTRFS_EXTENT_CSUM_KEY || !size ||
		    size % s->csize || k.offset % s->ss)
			continue;
		s->cur_start = k.offset;
		s->cur_end = k.offset + (uint64_t)(size / s->csize) * s->ss;
		if (s->cur_end < s->cur_start)
			continue;
		s->cur = d;
		return true;
	}
}

/* The old checksum of the sector at `at` (called with `at` never going back): true and out[], or false. */
static bool old_sum(struct cs *s, uint64_t at, uint8_t *out)
{
	if (!s->has_old || s->old_end || s->old_broken)
		return false;
	if (!s->old_at) {
		old_seek(s, at);
		if (!s->old_at || !old_load(s, false))
			return false;
	}
	while (s->cur_end <= at)
		if (!old_load(s, true))
			return false;
	if (at < s->cur_start)
		return false;
	memcpy(out, s->cur + (at - s->cur_start) / s->ss * s->csize, s->csize);
	return true;
}

static int put_sum(struct cs *s, uint64_t at, const uint8_t *sum)
{
	struct sum_run *r = s->nruns ? &s->runs[s->nruns - 1] : NULL;

	if (rp_grow((void **)&s->sums, &s->scap, s->slen + s->csize, 1, 1 << 16))
		return -ENOMEM;
	if (!r || r->start + r->n * s->ss != at) {
		if (rp_grow((void **)&s->runs, &s->rcap, s->nruns, sizeof(*s->runs), 256))
			return -ENOMEM;
		r = &s->runs[s->nruns++];
		*r = (struct sum_run){ at, 0, s->slen };
	}
	memcpy(s->sums + s->slen, sum, s->csize);
	s->slen += s->csize;
	r->n++;
	return 0;
}

/* How a need's sector is named: the file, and where in it. */
static void name_of(struct cs *s, const struct need *nd, uint64_t at, char *out, size_t len)
{
	char path[512];

	if (ub_inode_path(s->fs, nd->subvol, nd->ino, path, sizeof(path)))
		snprintf(path, sizeof(path), "?");
	if (nd->base)
		snprintf(out, len, "inode %llu (%s) of tree %llu, file offset %llu",
			 (unsigned long long)nd->ino, path, (unsigned long long)nd->subvol,
			 (unsigned long long)(nd->key_off + (at > nd->base ? at - nd->base : 0)));
	else
		snprintf(out, len, "inode %llu (%s) of tree %llu, the compressed extent at file offset %llu",
			 (unsigned long long)nd->ino, path, (unsigned long long)nd->subvol,
			 (unsigned long long)nd->key_off);
}

/* A stretch of sectors of one kind in one read, said once. */
struct stretch {
	uint64_t first, n;
};

static void note(struct stretch *st, uint64_t at)
{
	if (!st->n++)
		st->first = at;
}

/* Copy m of [at, +n): one read, or sector by sector when it fails, so one bad sector costs only itself. */
static void read_copy(struct cs *s, int m, uint64_t at, uint64_t n)
{
	uint64_t sectors = n / s->ss;

	if (!ub_volume_read(s->vol, at, n, m, s->buf[m - 1])) {
		for (uint64_t i = 0; i < sectors; i++)
			s->readable[m - 1][i] = true;
		return;
	}
	for (uint64_t i = 0; i < sectors; i++)
		s->readable[m - 1][i] = !ub_volume_read(s->vol, at + i * s->ss, s->ss, m, s->buf[m - 1] + i * s->ss);
}

/* Sectors [at, +n) (inside one chunk) of need nd: read, judged, their checksums decided. */
static int judge(struct cs *s, const struct need *nd, uint64_t at, uint64_t n)
{
	int copies = ub_volume_num_copies(s->vol, at);
	struct stretch kept_bad = { 0, 0 }, disagree = { 0, 0 }, unreadable = { 0, 0 }, badcopy[COPIES_MAX];
	uint8_t sum[COPIES_MAX][UB_CSUM_SIZE_MAX], old[UB_CSUM_SIZE_MAX];
	char who[768];
	int ret = 0;

	memset(badcopy, 0, sizeof(badcopy));
	if (copies > COPIES_MAX)
		copies = COPIES_MAX;
	for (int m = 0; m < copies; m++) {
		if (!s->buf[m] && !(s->buf[m] = malloc(READ_MAX)))
			return -ENOMEM;
		if (!s->readable[m] && !(s->readable[m] = calloc(READ_MAX / s->ss, sizeof(bool))))
			return -ENOMEM;
	}
	for (int m = 1; m <= copies; m++)
		read_copy(s, m, at, n);
	if (s->old_broken)
		old_seek(s, at); /* try again past a leaf that could not be read */
	for (uint64_t i = 0; !ret && i < n / s->ss; i++) {
		uint64_t x = at + i * s->ss;
		bool have_old = old_sum(s, x, old), any = false, agree = true, match = false;
		int first = -1;

		for (int m = 0; m < copies; m++) {
			if (!s->readable[m][i])
				continue;
			ret = ub_csum(s->ctype, s->buf[m] + i * s->ss, s->ss, sum[m]);
			if (ret)
				return ret;
			if (first < 0)
				first = m;
			else if (memcmp(sum[m], sum[first], s->csize))
				agree = false;
			any = true;
			if (have_old && !memcmp(sum[m], old, s->csize))
				match = true;
		}
		if (have_old) {
			/* the old checksum stays either way: a good copy proves it, and none may be blessed */
			ret = put_sum(s, x, old);
			if (match) {
				s->kept++;
				for (int m = 0; m < copies; m++)
					if (!s->readable[m][i] || memcmp(sum[m], old, s->csize)) {
						note(&badcopy[m], x);
						s->bad_copies++;
					}
			} else {
				s->kept_bad++;
				note(&kept_bad, x);
			}
		} else if (!any) {
			s->unreadable++;
			note(&unreadable, x);
		} else if (!agree) {
			s->disagree++;
			note(&disagree, x);
		} else {
			s->computed++;
			ret = put_sum(s, x, sum[first]);
		}
	}
	if (ret)
		return ret;
	if (kept_bad.n) {
		name_of(s, nd, kept_bad.first, who, sizeof(who));
		tell(s, nd->subvol, nd->ino,
		     "%s: %llu sectors from logical %llu match their checksum on no copy; the checksum is kept and "
		     "reading them fails (EIO)", who, (unsigned long long)kept_bad.n, (unsigned long long)kept_bad.first);
	}
	if (disagree.n) {
		name_of(s, nd, disagree.first, who, sizeof(who));
		tell(s, nd->subvol, nd->ino,
		     "%s: %llu sectors from logical %llu have no checksum and copies that differ: none is written",
		     who, (unsigned long long)disagree.n, (unsigned long long)disagree.first);
	}
	if (unreadable.n) {
		name_of(s, nd, unreadable.first, who, sizeof(who));
		tell(s, nd->subvol, nd->ino,
		     "%s: %llu sectors from logical %llu have no checksum and no copy can be read: none is written",
		     who, (unsigned long long)unreadable.n, (unsigned long long)unreadable.first);
	}
	if (s->c->log && s->c->log->verbosity >= UB_LOG_INFO)
		for (int m = 0; m < copies; m++) {
			char where[256];

			if (!badcopy[m].n)
				continue;
			name_of(s, nd, badcopy[m].first, who, sizeof(who));
			ub_volume_describe_copy(s->vol, badcopy[m].first, m + 1, where, sizeof(where));
			ub_info(s->c->log, "repair: %s: %s is bad in %llu sectors from logical %llu; another copy "
				"matches the checksum kept (a scrub rewrites it)", who, where,
				(unsigned long long)badcopy[m].n, (unsigned long long)badcopy[m].first);
		}
	return 0;
}

static int need_cmp(const void *a, const void *b)
{
	const struct need *x = a, *y = b;

	if (x->start != y->start)
		return x->start < y->start ? -1 : 1;
	return x->len < y->len ? -1 : x->len > y->len;
}

/* Each sector any need covers, once, in address order. */
static int verify(struct cs *s)
{
	uint64_t done = 0;
	int ret = 0;

	qsort(s->needs, s->nneeds, sizeof(*s->needs), need_cmp);
	for (size_t i = 0; !ret && i < s->nneeds; i++) {
		const struct need *nd = &s->needs[i];
		uint64_t at = nd->start > done ? nd->start : done, end = nd->start + nd->len;

		while (!ret && at < end) {
			const struct ub_chunk *ch = ub_volume_find_chunk(s->vol, at);
			uint64_t n = end - at;
			char who[768];

			if (!ch || !(ch->type & BTRFS_BLOCK_GROUP_DATA) || at - ch->logical >= ch->length) {
				name_of(s, nd, at, who, sizeof(who));
				tell(s, nd->subvol, nd->ino, "%s: its data at logical %llu lies in no data chunk: no checksum",
				     who, (unsigned long long)at);
				s->unreadable += (end - at) / s->ss;
				break;
			}
			if (n > ch->logical + ch->length - at)
				n = ch->logical + ch->length - at;
			if (n > READ_MAX)
				n = READ_MAX;
			ret = judge(s, nd, at, n);
			at += n;
		}
		if (end > done)
			done = end;
	}
	return ret;
}

/* ---- step 3: the new tree ---- */

static int drop_one(struct cs *s, struct ub_txn *t, uint64_t bytenr, int level)
{
	if (rp_grow((void **)&s->dropped, &s->dcap, s->ndropped, sizeof(*s->dropped), 64))
		return -ENOMEM;
	s->dropped[s->ndropped++] = bytenr;
	return ub_dref_add_tree(t->refs, bytenr, s->vol->nodesize, level, BTRFS_CSUM_TREE_OBJECTID, 0, -1,
				UB_DREF_LAST_REF);
}

/* Drop block `bytenr` of the old tree and, for a node, every block below it first. */
static int drop_block(struct cs *s, struct ub_txn *t, uint64_t bytenr, int level, uint64_t gen, uint64_t *lost)
{
	int ret = 0;

	if (level > 0) {
		struct ub_expect exp = { .owner = BTRFS_CSUM_TREE_OBJECTID, .level = level, .generation = gen,
					 .slot = -1 };
		struct ub_eb *eb;

		if (ub_tree_read_block(s->tc, bytenr, &exp, &eb)) {
			/* the blocks below it cannot be found from here: they stay allocated */
			(*lost)++;
		} else {
			uint32_t n = ub_eb_nritems(eb);

			for (uint32_t i = 0; !ret && i < n; i++)
				ret = drop_block(s, t, ub_eb_node_blockptr(eb, (int)i), level - 1, ub_eb_node_gen(eb, (int)i),
						 lost);
			ub_eb_put(s->tc, eb);
		}
	}
	if (!ret)
		ret = drop_one(s, t, bytenr, level);
	return ret;
}

static int u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* A block of the old tree found in the extent tree but not through the tree: dropped too (once). */
static int drop_stray(struct cs *s, struct ub_txn *t, uint64_t bytenr, int level, uint64_t *strays)
{
	if (level < 0 || level >= UB_MAX_LEVEL ||
	    bsearch(&bytenr, s->dropped, s->ndropped, sizeof(*s->dropped), u64_cmp))
		return 0;
	(*strays)++;
	return ub_dref_add_tree(t->refs, bytenr, s->vol->nodesize, level, BTRFS_CSUM_TREE_OBJECTID, 0, -1,
				UB_DREF_LAST_REF);
}

/*
 * Below a node that cannot be read, the old tree's blocks are found by their
 * back references instead: every tree block the extent tree says the checksum
 * tree holds (its TREE_BLOCK_REF, inline or keyed; the checksum tree shares
 * no block) that the walk did not drop. Without this they would keep extent
 * items no tree reaches.
 */
static int drop_strays(struct cs *s, struct ub_txn *t, uint64_t *strays)
{
	struct ub_key min = { 0, 0, 0 }, max = { UINT64_MAX, 0xff, UINT64_MAX }, k;
	struct ub_tree_iter it;
	struct ub_root r;
	uint64_t cur = 0;
	int cur_level = -1;
	const uint8_t *d;
	uint32_t size;
	int ret = ub_fs_tree_root(s->fs, BTRFS_EXTENT_TREE_OBJECTID, &r);

	if (!ret)
		ret = ub_tree_iter_start(&it, s->tc, &r, &min, &max);
	if (ret)
		return ret;
	qsort(s->dropped, s->ndropped, sizeof(*s->dropped), u64_cmp);
	while (!(ret = ub_tree_iter_next(&it, &k, &d, &size))) {
		uint32_t pos = UB_EXTENT_ITEM_SIZE, count;
		struct ub_ref ref;

		if (k.type == BTRFS_TREE_BLOCK_REF_KEY) {
			if (k.offset == BTRFS_CSUM_TREE_OBJECTID && k.objectid == cur)
				ret = drop_stray(s, t, cur, cur_level, strays);
			if (ret)
				break;
			continue;
		}
		if ((k.type != BTRFS_METADATA_ITEM_KEY && k.type != BTRFS_EXTENT_ITEM_KEY) || size < UB_EXTENT_ITEM_SIZE ||
		    !(UB_GET(btrfs_extent_item, flags, d) & BTRFS_EXTENT_FLAG_TREE_BLOCK))
			continue;
		cur = k.objectid;
		if (k.type == BTRFS_METADATA_ITEM_KEY) {
			cur_level = k.offset < UB_MAX_LEVEL ? (int)k.offset : -1;
		} else {
			pos += (uint32_t)sizeof(struct btrfs_tree_block_info);
			cur_level = size >= pos ? (int)UB_GET(btrfs_tree_block_info, level, d + UB_EXTENT_ITEM_SIZE) : -1;
		}
		while (!ret && !ub_inline_ref_next(d, size, &pos, &ref, &count))
			if (ref.type == BTRFS_TREE_BLOCK_REF_KEY && ref.root == BTRFS_CSUM_TREE_OBJECTID)
				ret = drop_stray(s, t, cur, cur_level, strays);
		if (ret)
			break;
	}
	ub_tree_iter_end(&it);
	if (ret < 0)
		ub_err(s->c->log, "repair: --init-csum-tree: the extent tree cannot be read to its end (%s): the old "
		       "checksum tree's blocks below its unreadable nodes cannot all be found", strerror(-ret));
	return ret < 0 ? ret : 0;
}

static int rebuild(struct cs *s)
{
	struct ub_txn *t = s->c->t;
	struct ub_eroot *er;
	struct ub_root nr;
	struct fsw w;
	uint64_t lost = 0, strays = 0;
	int ret = ub_engine_root(s->c->e, BTRFS_CSUM_TREE_OBJECTID, &er);

	if (ret == -ENOENT) {
		ub_err(s->c->log, "repair: --init-csum-tree: the filesystem has no checksum tree to replace");
		return -EUCLEAN;
	}
	if (ret)
		return ret;
	if (s->has_old && (er->root.bytenr != s->old.bytenr || er->root.level != s->old.level)) {
		ub_err(s->c->log, "repair: --init-csum-tree: the checksum tree changed in the repair's transaction");
		return -EBUSY;
	}
	if (s->has_old) {
		ret = drop_block(s, t, s->old.bytenr, s->old.level, s->old.generation, &lost);
		if (ret)
			return ret;
	}
	if (lost) {
		ret = drop_strays(s, t, &strays);
		if (ret)
			return ret;
		tell(s, BTRFS_CSUM_TREE_OBJECTID, 0,
		     "%llu nodes of the old checksum tree cannot be read: %llu blocks below them found by their back "
		     "references in the extent tree and freed with the rest", (unsigned long long)lost,
		     (unsigned long long)strays);
	}
	ret = ub_tree_create_root(s->tc, ub_txn_ta(t), BTRFS_CSUM_TREE_OBJECTID, &nr);
	if (ret)
		return ret;
	er->root = nr;
	ret = fsw_init_ro(&w, t, BTRFS_FS_TREE_OBJECTID);
	for (size_t i = 0; !ret && i < s->nruns; i++)
		ret = fsw_csum_put(&w, s->runs[i].start, s->sums + s->runs[i].off, s->runs[i].n);
	return ret;
}

static void summary(struct cs *s)
{
	struct rp_note n = { UB_CHK_FIX_NONE, BTRFS_CSUM_TREE_OBJECTID, 0, 0, 0 };
	bool dry = s->c->opts->dry_run;

	for (size_t i = 0; i < s->nsv; i++) {
		n.tree = s->sv[i].id;
		rp_say(s->c, &n, 0, "%s: tree %llu: %llu file extents reference %llu bytes of checksummed data",
		       dry ? "would rebuild the checksum tree" : "checksum tree rebuilt", (unsigned long long)s->sv[i].id,
		       (unsigned long long)s->sv[i].extents, (unsigned long long)s->sv[i].bytes);
	}
	n.tree = BTRFS_CSUM_TREE_OBJECTID;
	rp_say(s->c, &n, 0,
	       "checksum tree %s: %llu sectors: %llu old checksums a copy verifies, %llu computed from copies that "
	       "agree, %llu old checksums no copy matches (kept), %llu without a checksum (copies differ: %llu, "
	       "unreadable: %llu); %llu bad copies of good sectors%s",
	       dry ? "would hold" : "holds", (unsigned long long)(s->kept + s->computed + s->kept_bad),
	       (unsigned long long)s->kept, (unsigned long long)s->computed, (unsigned long long)s->kept_bad,
	       (unsigned long long)(s->disagree + s->unreadable), (unsigned long long)s->disagree,
	       (unsigned long long)s->unreadable, (unsigned long long)s->bad_copies,
	       s->old_gaps || !s->has_old ? "; the old checksum tree could not be read everywhere" : "");
}

int rp_init_csum_tree(struct rp_ctx *c)
{
	struct cs s = { .c = c };
	struct ub_fs *own = NULL;
	int ret = 0;

	if (c->e) {
		s.fs = &c->e->fs; /* reads the last commit: the old checksum tree as it is on disk */
	} else {
		/* a dry run: the devices read-only, the last commit (a pending log is the real run's refusal) */
		struct ub_fs_opts fo = { .super_mirror = -1, .no_log = true };

		ret = ub_fs_open(c->paths, c->npaths, &fo, c->log, &own);
		if (ret) {
			ub_err(c->log, "repair: --init-csum-tree: the filesystem cannot be opened: %s", strerror(-ret));
			return ret;
		}
		s.fs = own;
	}
	s.tc = ub_fs_trees(s.fs);
	s.vol = ub_fs_volume(s.fs);
	s.ss = s.vol->sectorsize;
	s.csize = s.vol->csum_size;
	s.ctype = s.vol->csum_type;
	if (!s.ss || s.ss > READ_MAX || !s.csize || s.csize > UB_CSUM_SIZE_MAX) {
		ret = -EUCLEAN;
		goto out;
	}
	/* a btrfs-image dump keeps metadata only: its data reads as zeros, and checksums of them would lie */
	if (UB_GET(ub_disk_super, flags, s.vol->super) & (BTRFS_SUPER_FLAG_METADUMP | BTRFS_SUPER_FLAG_METADUMP_V2)) {
		ub_err(c->log, "repair: --init-csum-tree: the image is a metadata dump (btrfs-image), which holds no "
		       "data to checksum");
		ret = -EOPNOTSUPP;
		goto out;
	}
	ret = ub_path_new(&s.op);
	if (ret)
		goto out;
	ret = ub_fs_tree_root(s.fs, BTRFS_CSUM_TREE_OBJECTID, &s.old);
	s.has_old = !ret;
	if (ret && ret != -ENOENT)
		s.old_gaps = true;
	ret = collect(&s);
	if (!ret)
		ret = verify(&s);
	if (!ret && c->e)
		ret = rebuild(&s);
	if (!ret) {
		summary(&s);
		c->res->unverified = s.kept_bad + s.disagree + s.unreadable;
	}
out:
	ub_path_free(s.op);
	for (int m = 0; m < COPIES_MAX; m++) {
		free(s.buf[m]);
		free(s.readable[m]);
	}
	free(s.needs);
	free(s.sv);
	free(s.runs);
	free(s.sums);
	free(s.dropped);
	if (own)
		ub_fs_close(own);
	return ret;
}
