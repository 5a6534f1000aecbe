/* SPDX-License-Identifier: MIT */
/*
 * The last resort: inodes no tree gives, from the leaves themselves. A second
 * scan adds every item of a lost or deleted inode, and of a held file's newer
 * version, from the leaves that hold them (ub_fs_loose_add); once published
 * the fs reads such an inode from the newest copy of each of its keys. The
 * data of a deleted inode (or of a newer version) may be checksummed in no
 * tree the fs reads, so its extents are registered for a scan of old
 * checksum-tree leaves.
 */
#include <errno.h>
#include <stdlib.h>
#include "recover_priv.h"

/*
 * A file extent of a deleted inode (or of a held file's newer version): its
 * checksums are looked for in old checksum-tree leaves, between the extent's
 * generation and this leaf's (the file held it then). *bad when that cannot
 * be done.
 */
static int leaf_extent(struct ub_recover *rc, const struct ub_eb *eb, int slot, bool *bad)
{
	uint32_t size;
	const uint8_t *d = ub_eb_item_data(eb, slot, &size);
	uint64_t gen = ub_eb_generation(eb), egen;
	int ret;

	if (size < sizeof(struct btrfs_file_extent_item) ||
	    UB_GET(btrfs_file_extent_item, type, d) != BTRFS_FILE_EXTENT_REG ||
	    !UB_GET(btrfs_file_extent_item, disk_bytenr, d))
		return 0; /* inline (in the leaf, checked with it), preallocated or a hole: nothing on disk to check */
	egen = UB_GET(btrfs_file_extent_item, generation, d);
	ret = ub_fs_loose_csum_range(rc->fs, UB_GET(btrfs_file_extent_item, disk_bytenr, d),
				     UB_GET(btrfs_file_extent_item, disk_num_bytes, d), egen < gen ? egen : gen, gen);
	if (ret == -ENOMEM)
		return ret;
	if (ret)
		*bad = true;
	return 0;
}

/*
 * The held files with a newer version whose inode numbers this leaf spans:
 * it held every item of theirs in that span (ub_fs_loose_cover), and their
 * items here are added. Leaves of no commit are left out.
 */
static int fresh_leaf(struct ub_recover *rc, const struct ub_eb *eb)
{
	uint64_t owner = ub_eb_owner(eb), gen = ub_eb_generation(eb);
	uint32_t n = ub_eb_nritems(eb), i = 0;
	struct ub_key first, last;
	int ret = 0;

	if (!n || gen > rc->o.last_commit)
		return 0;
	ub_eb_item_key(eb, 0, &first);
	ub_eb_item_key(eb, (int)n - 1, &last);
	for (size_t x = rc_held_lower(rc, owner, first.objectid);
	     !ret && x < rc->nheld && rc->held[x].subvol == owner && rc->held[x].ino <= last.objectid; x++) {
		struct rc_held *h = &rc->held[x];
		struct ub_key lo = { h->ino, 0, 0 }, hi = { h->ino, UINT8_MAX, UINT64_MAX };

		/* an inode held twice is gathered once */
		if (!h->fresh || (x && rc->held[x - 1].subvol == owner && rc->held[x - 1].ino == h->ino))
			continue;
		ret = ub_fs_loose_cover(rc->fs, owner, gen, ub_key_cmp(&first, &lo) > 0 ? &first : &lo,
					ub_key_cmp(&last, &hi) < 0 ? &last : &hi);
		for (; !ret && i < n; i++) {
			struct ub_key k;

			ub_eb_item_key(eb, (int)i, &k);
			if (k.objectid > h->ino)
				break;
			if (k.objectid < h->ino)
				continue;
			ret = ub_fs_loose_add(rc->fs, owner, eb, (int)i);
			if (!ret && k.type == BTRFS_EXTENT_DATA_KEY)
				ret = leaf_extent(rc, eb, (int)i, &h->bad_csums);
		}
	}
	return ret;
}

static int found_loose(void *arg, const struct ub_eb *eb)
{
	struct ub_recover *rc = arg;
	uint32_t n = ub_eb_nritems(eb);
	uint64_t owner = ub_eb_owner(eb);

	for (uint32_t i = 0; i < n; i++) {
		struct ub_key k;
		long g = -1;
		int ret;

		ub_eb_item_key(eb, (int)i, &k);
		if (rc_cand_index(&rc->lost, owner, k.objectid) < 0 &&
		    (g = rc_cand_index(&rc->gone, owner, k.objectid)) < 0)
			continue;
		ret = ub_fs_loose_add(rc->fs, owner, eb, (int)i);
		if (!ret && g >= 0 && k.type == BTRFS_EXTENT_DATA_KEY) {
			bool bad = false;

			ret = leaf_extent(rc, eb, (int)i, &bad);
			rc->gone_bad[g] |= bad;
		}
		if (ret)
			return ret;
	}
	return rc->nfresh ? fresh_leaf(rc, eb) : 0;
}

int ub_recover_gather(struct ub_recover *rc)
{
	struct ub_meta_scan_ops ops = { .want = rc_want_fs_leaf, .found = found_loose, .arg = rc,
					.progress = RC_PROGRESS(rc) };
	int ret;

	if (rc->lost.n)
		qsort(rc->lost.v, rc->lost.n, sizeof(*rc->lost.v), rc_cand_cmp);
	if (rc->gone.n)
		qsort(rc->gone.v, rc->gone.n, sizeof(*rc->gone.v), rc_cand_cmp);
	free(rc->gone_bad);
	free(rc->placed);
	rc->gone_bad = calloc(rc->gone.n ? rc->gone.n : 1, 1);
	rc->placed = calloc(rc->lost.n ? rc->lost.n : 1, 1);
	ret = rc->gone_bad && rc->placed ? ub_scan_metadata(rc->fs, &ops) : -ENOMEM;
	if (!ret)
		ret = ub_fs_loose_publish(rc->fs);
	return ret;
}

static bool want_csums(void *arg, uint64_t owner, uint64_t generation, int level)
{
	(void)arg;
	(void)generation;
	return level == 0 && owner == BTRFS_CSUM_TREE_OBJECTID;
}

static int found_csums(void *arg, const struct ub_eb *eb)
{
	struct ub_recover *rc = arg;

	return ub_fs_loose_csum_leaf(rc->fs, eb);
}

int ub_recover_gather_csums(struct ub_recover *rc)
{
	struct ub_meta_scan_ops ops = { .want = want_csums, .found = found_csums, .arg = rc,
					.progress = RC_PROGRESS(rc) };

	/* only deleted files and newer versions registered ranges to check */
	if (!rc->gone.n && !rc->nfresh)
		return 0;
	return ub_scan_metadata(rc->fs, &ops);
}
