/* SPDX-License-Identifier: MIT */
/*
 * A data extent item's reference count against its own references: the
 * counts of its inline EXTENT_DATA_REF and SHARED_DATA_REF records and of the
 * keyed ones that follow it in the extent tree (same objectid) must add up to
 * the item's refs. Streamed with the extent tree: one extent open at a time.
 */
#include <string.h>

#include "check/chunks.h"

static void where_ref(struct ub_chk_problem *p, const struct ub_key *k)
{
	chk_where(p, BTRFS_EXTENT_TREE_OBJECTID, k, k->objectid);
	p->cls = UB_CHK_EXTENT;
}

/*
 * The file extent items' side is whole only when every tree was walked to its
 * end and no half-dropped subvolume (whose leaves still hold references) was
 * left out.
 */
static bool files_known(const struct cstate *s)
{
	return s->c->walk_complete && !s->c->dropped_roots;
}

/* File extent items that point at addresses below `upto` with no data extent item there. */
static void unowned_before(struct cstate *s, uint64_t upto)
{
	const struct ub_checker *c = s->c;

	while (s->fext_cursor < c->nfext && c->fext[s->fext_cursor] < upto) {
		uint64_t at = c->fext[s->fext_cursor], n = 0;
		struct ub_chk_problem p;

		while (s->fext_cursor < c->nfext && c->fext[s->fext_cursor] == at) {
			s->fext_cursor++;
			n++;
		}
		if (!files_known(s))
			continue;
		chk_where(&p, BTRFS_EXTENT_TREE_OBJECTID, NULL, at);
		p.cls = UB_CHK_EXTENT;
		chk_report(s->c, &p, "%llu file extent item%s point at data at %llu, which has no data extent item",
			   (unsigned long long)n, n == 1 ? "" : "s", (unsigned long long)at);
	}
}

static void finish(struct cstate *s)
{
	struct ub_chk_problem p;

	if (!s->dref_open)
		return;
	s->dref_open = false;
	where_ref(&p, &s->dref_key);
	if (!s->dref_unknown && s->dref_sum != s->dref_refs)
		chk_report(s->c, &p, "data extent item counts %llu references, its references count %llu",
			   (unsigned long long)s->dref_refs, (unsigned long long)s->dref_sum);
	else if (files_known(s) && s->dref_files != s->dref_refs)
		chk_report(s->c, &p, "data extent item counts %llu references, %llu file extent items point at it",
			   (unsigned long long)s->dref_refs, (unsigned long long)s->dref_files);
}

/* The inline references after the extent item proper: their counts, or unknown on a record it cannot read. */
static void inline_refs(struct cstate *s, const uint8_t *d, uint32_t size)
{
	uint32_t at = sizeof(struct btrfs_extent_item);

	while (at < size) {
		uint8_t type = d[at];
		uint32_t need;

		if (type == BTRFS_EXTENT_DATA_REF_KEY)
			need = 1 + sizeof(struct btrfs_extent_data_ref);
		else if (type == BTRFS_SHARED_DATA_REF_KEY)
			need = 1 + 8 + sizeof(struct btrfs_shared_data_ref);
		else if (type == BTRFS_EXTENT_OWNER_REF_KEY)
			need = 1 + 8;
		else
			need = 0;
		/* the tree layer's item checks say what is wrong with such a record */
		if (!need || size - at < need) {
			s->dref_unknown = true;
			return;
		}
		if (type == BTRFS_EXTENT_DATA_REF_KEY)
			s->dref_sum += UB_GET(btrfs_extent_data_ref, count, d + at + 1);
		else if (type == BTRFS_SHARED_DATA_REF_KEY)
			s->dref_sum += UB_GET(btrfs_shared_data_ref, count, d + at + 9);
		at += need;
	}
}

void chk_data_refs_item(struct cstate *s, const struct ub_key *k, const uint8_t *d, uint32_t size)
{
	struct ub_chk_problem p;

	if (s->dref_open && k->objectid != s->dref_key.objectid)
		finish(s);
	if (k->type == BTRFS_EXTENT_ITEM_KEY && size >= sizeof(struct btrfs_extent_item) &&
	    (UB_GET(btrfs_extent_item, flags, d) & BTRFS_EXTENT_FLAG_DATA)) {
		finish(s);
		unowned_before(s, k->objectid);
		s->dref_files = 0;
		while (s->fext_cursor < s->c->nfext && s->c->fext[s->fext_cursor] == k->objectid) {
			s->fext_cursor++;
			s->dref_files++;
		}
		s->dref_open = true;
		s->dref_unknown = false;
		s->dref_key = *k;
		s->dref_refs = UB_GET(btrfs_extent_item, refs, d);
		s->dref_sum = 0;
		inline_refs(s, d, size);
		return;
	}
	if (k->type != BTRFS_EXTENT_DATA_REF_KEY && k->type != BTRFS_SHARED_DATA_REF_KEY)
		return;
	if (!s->dref_open) {
		where_ref(&p, k);
		chk_report(s->c, &p, "data reference to %llu, which has no data extent item",
			   (unsigned long long)k->objectid);
		return;
	}
	if (k->type == BTRFS_EXTENT_DATA_REF_KEY && size >= sizeof(struct btrfs_extent_data_ref))
		s->dref_sum += UB_GET(btrfs_extent_data_ref, count, d);
	else if (k->type == BTRFS_SHARED_DATA_REF_KEY && size >= sizeof(struct btrfs_shared_data_ref))
		s->dref_sum += UB_GET(btrfs_shared_data_ref, count, d);
	else
		s->dref_unknown = true;
}

void chk_data_refs_end(struct cstate *s)
{
	finish(s);
	/* no data extent can start at the last address: the tree checker aligns them */
	unowned_before(s, UINT64_MAX);
}
