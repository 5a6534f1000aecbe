/* SPDX-License-Identifier: MIT */
/*
 * The scavenging scan: every inode item in a leaf of a subvolume tree (the
 * live tree's and older copies alike) whose inode the caller did not reach
 * by its names is a candidate, looked up in the live tree first, then in the
 * older roots. The same scan marks the held files a leaf of a later commit
 * has an inode item of.
 */
#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>
#include "recover_priv.h"

/* An inode item of a held file, in a leaf of a later commit than its root's. */
static void mark_fresh(struct ub_recover *rc, const struct ub_eb *eb, uint64_t ino)
{
	uint64_t owner = ub_eb_owner(eb), gen = ub_eb_generation(eb);

	if (gen > rc->o.last_commit)
		return; /* a transaction that never committed */
	for (size_t x = rc_held_lower(rc, owner, ino); x < rc->nheld && rc->held[x].subvol == owner &&
	     rc->held[x].ino == ino; x++)
		if (gen > rc->held[x].gen)
			rc->held[x].fresh = true;
}

static int found(void *arg, const struct ub_eb *eb)
{
	struct ub_recover *rc = arg;
	uint32_t n = ub_eb_nritems(eb);
	uint64_t owner = ub_eb_owner(eb);

	for (uint32_t i = 0; i < n; i++) {
		struct ub_key k;

		ub_eb_item_key(eb, (int)i, &k);
		if (k.type != BTRFS_INODE_ITEM_KEY || k.objectid < BTRFS_FIRST_FREE_OBJECTID ||
		    k.objectid > BTRFS_LAST_FREE_OBJECTID)
			continue;
		/* a subvolume the caller left out stays out */
		if (rc->o.subvol_wanted && !rc->o.subvol_wanted(rc->o.arg, owner))
			continue;
		mark_fresh(rc, eb, k.objectid);
		if (rc->o.reached && rc->o.reached(rc->o.arg, owner, k.objectid))
			continue;
		if (rc_cand_add(&rc->cands, owner, k.objectid))
			return -ENOMEM;
	}
	return 0;
}

int ub_recover_scan(struct ub_recover *rc)
{
	struct ub_meta_scan_ops ops = { .want = rc_want_fs_leaf, .found = found, .arg = rc,
					.progress = RC_PROGRESS(rc) };
	int ret;

	rc_held_sort(rc);
	ret = ub_scan_metadata(rc->fs, &ops);
	rc->nfresh = 0;
	for (size_t i = 0; i < rc->nheld; i++)
		rc->nfresh += rc->held[i].fresh;
	if (rc->cands.n)
		qsort(rc->cands.v, rc->cands.n, sizeof(*rc->cands.v), rc_cand_cmp);
	return ret;
}

/* The inode in the live tree, else in the newest older root that has it. */
static int find_inode(struct ub_recover *rc, struct ub_recover_inode *ri)
{
	int ret = ub_inode_read(rc->fs, ri->subvol, ri->ino, &ri->in);

	ri->fs = rc->fs;
	ri->generation = 0;
	/* not there: deleted (or its subvolume is), not lost */
	if (ret == 0 || ret == -ENOENT || ret == -ENOMEM)
		return ret;
	for (int i = 0; !ub_older_roots_get(rc->o.older, i, &ri->fs, &ri->generation); i++)
		if (ub_inode_read(ri->fs, ri->subvol, ri->ino, &ri->in) == 0)
			return 0;
	return ret;
}

/*
 * A deleted inode, from the newest older root where it still has a name:
 * false when none has it (the leaves may still). A directory has nothing to
 * give: true, and not undeleted.
 */
static bool undelete(struct ub_recover *rc, struct ub_recover_inode *ri)
{
	struct ub_inode in;
	struct ub_fs *fs;
	uint64_t gen;

	for (int i = 0; !ub_older_roots_get(rc->o.older, i, &fs, &gen); i++) {
		if (ub_inode_read(fs, ri->subvol, ri->ino, &in) || !in.nlink)
			continue;
		if (!S_ISDIR(in.mode)) {
			ri->undeleted = true;
			ri->in = in;
			ri->fs = fs;
			ri->generation = gen;
		}
		return true;
	}
	return false;
}

static int classify(struct ub_recover *rc, uint64_t subvol, uint64_t ino, struct ub_recover_inode *ri)
{
	int ret;

	*ri = (struct ub_recover_inode){ .subvol = subvol, .ino = ino };
	ret = find_inode(rc, ri);
	if (ret == -ENOENT || (!ret && !ri->in.nlink)) {
		/* not there, or unlinked and waiting for its orphan cleanup: deleted */
		ri->kind = UB_RECOVER_DELETED;
		/* one the gone list cannot take stays deleted, as without undelete */
		if (rc->o.undelete && !undelete(rc, ri) && ret == -ENOENT)
			(void)rc_cand_add(&rc->gone, subvol, ino);
		if (!ri->undeleted) {
			ri->fs = NULL;
			ri->generation = 0;
		}
		return 0;
	}
	if (ret && ret != -ENOMEM && !rc_cand_add(&rc->lost, subvol, ino)) {
		ri->kind = UB_RECOVER_LOST; /* from the leaves, once the others are done */
		ri->err = ret;
		ri->fs = NULL;
		return 0;
	}
	if (ret) {
		ri->kind = UB_RECOVER_UNREADABLE;
		ri->err = ret;
		ri->fs = NULL;
		return 0;
	}
	ri->kind = UB_RECOVER_FOUND;
	return 0;
}

int ub_recover_classify(struct ub_recover *rc, ub_recover_inode_fn fn, void *arg)
{
	int ret = 0;

	for (size_t i = 0; !ret && i < rc->cands.n; i++) {
		struct ub_recover_inode ri;

		if (i && !rc_cand_cmp(&rc->cands.v[i], &rc->cands.v[i - 1]))
			continue;
		ret = classify(rc, rc->cands.v[i].subvol, rc->cands.v[i].ino, &ri);
		if (!ret)
			ret = fn(arg, &ri);
	}
	return ret;
}
