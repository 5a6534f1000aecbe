/* SPDX-License-Identifier: MIT */
/*
 * Data extent references, streamed with the extent tree (one extent open at
 * a time): the counts of an item's inline EXTENT_DATA_REF and SHARED_DATA_REF
 * records and of the keyed ones that follow it must add up to its refs, and
 * each reference must be made by as many file extent items as it counts
 * (the tree pass's records, sorted by address, met here by a cursor).
 */
#include <stdlib.h>
#include <string.h>

#include "check/chunks.h"

int chk_fext_cmp(const struct chk_fext *a, const struct chk_fext *b)
{
	const uint64_t x[] = { a->bytenr, a->root, a->ino, a->offset, a->leaf };
	const uint64_t y[] = { b->bytenr, b->root, b->ino, b->offset, b->leaf };

	for (size_t i = 0; i < sizeof(x) / sizeof(x[0]); i++)
		if (x[i] != y[i])
			return x[i] < y[i] ? -1 : 1;
	return 0;
}

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

	while (s->fext_cursor < c->nfext && c->fext[s->fext_cursor].bytenr < upto) {
		const struct chk_fext *f = &c->fext[s->fext_cursor];
		uint64_t at = f->bytenr, n = 0;
		struct ub_chk_problem p;

		while (s->fext_cursor < c->nfext && c->fext[s->fext_cursor].bytenr == at) {
			s->fext_cursor++;
			n++;
		}
		if (!files_known(s))
			continue;
		chk_where(&p, f->root, NULL, at);
		p.cls = UB_CHK_EXTENT;
		p.inode = f->ino;
		/* the repair finds the items again (every leaf once) and makes the extent item from them */
		p.fix = UB_CHK_FIX_DATA_ADD;
		p.want = n;
		p.want2 = f->leaf;
		chk_report(s->c, &p, "%llu file extent item%s (the first: root %llu inode %llu) point at data at %llu, "
			   "which has no data extent item", (unsigned long long)n, n == 1 ? "" : "s",
			   (unsigned long long)f->root, (unsigned long long)f->ino, (unsigned long long)at);
	}
}

static void add_ref(struct cstate *s, const struct chk_dref *r)
{
	if (chk_reserve(&s->drefs, &s->drefs_cap, s->ndrefs, sizeof(*s->drefs), 8)) {
		/* without the list only the counts are compared */
		s->drefs_nomem = true;
		return;
	}
	s->drefs[s->ndrefs++] = *r;
	s->dref_sum += r->count;
}

/* The open extent's file extent items (NULL when there are none: no array may be there to index). */
static struct chk_fext *open_fexts(struct cstate *s)
{
	return s->fext_n ? s->c->fext + s->fext_first : NULL;
}

/* Mark the open extent's unmatched file extent items that `r` stands for; how many. */
static uint64_t match(struct cstate *s, const struct chk_dref *r)
{
	struct chk_fext *f = open_fexts(s);
	uint64_t m = 0;

	if (!s->fext_n)
		return 0; /* nothing to match, nor a first item to take the extent's address from */
	if (r->shared) {
		for (size_t i = 0; i < s->fext_n; i++)
			if (!f[i].used && f[i].leaf == r->parent)
				f[i].used = true, m++;
		return m;
	}
	{
		/* the first item of (root, inode, offset): they sort together */
		struct chk_fext key = { .bytenr = f->bytenr, .root = r->root, .ino = r->ino, .offset = r->offset };
		size_t lo = 0, hi = s->fext_n;

		while (lo < hi) {
			size_t mid = lo + (hi - lo) / 2;

			if (chk_fext_cmp(&f[mid], &key) < 0)
				lo = mid + 1;
			else
				hi = mid;
		}
		for (; lo < s->fext_n && f[lo].root == r->root && f[lo].ino == r->ino && f[lo].offset == r->offset; lo++)
			if (!f[lo].used)
				f[lo].used = true, m++;
	}
	return m;
}

/* Each reference against the file extent items that make it; then the items no reference stands for. */
static void match_files(struct cstate *s, struct ub_chk_problem *p)
{
	struct chk_fext *f = open_fexts(s);
	uint64_t *made = calloc(s->ndrefs ? s->ndrefs : 1, sizeof(*made));
	size_t unused = 0;

	/* a leaf's items are taken by its SHARED_DATA_REF first: its own root's leaf may make the same triple */
	for (int shared = 1; shared >= 0; shared--)
		for (size_t i = 0; i < s->ndrefs; i++) {
			const struct chk_dref *r = &s->drefs[i];
			uint64_t m;

			if (r->shared != (bool)shared)
				continue;
			m = match(s, r);
			if (made)
				made[i] = m;
			if (m == r->count)
				continue;
			if (r->shared)
				chk_report(s->c, p, "SHARED_DATA_REF (parent %llu) counts %llu, %llu file extent items of that leaf point at the extent",
					   (unsigned long long)r->parent, (unsigned long long)r->count, (unsigned long long)m);
			else if (!made) /* no memory for the cure's bookkeeping: the problem alone */
				chk_report(s->c, p, "EXTENT_DATA_REF (root %llu inode %llu offset %llu) counts %llu, %llu file extent items make it",
					   (unsigned long long)r->root, (unsigned long long)r->ino,
					   (unsigned long long)r->offset, (unsigned long long)r->count, (unsigned long long)m);
		}
	for (size_t i = 0; i < s->fext_n; i++)
		unused += !f[i].used;
	for (size_t i = 0; i < s->ndrefs; i++) {
		const struct chk_dref *r = &s->drefs[i];
		struct ub_chk_problem q = *p;

		if (r->shared || !made || made[i] == r->count)
			continue;
		/*
		 * More counted than file extent items make, every file tree walked, every
		 * item of the extent matched and the item's refs their sum: the surplus
		 * stands for no item, and goes (the count lowered, the reference with it at
		 * zero, the extent freed with its last). An item left unmatched may be
		 * what the reference meant: then nothing (the extent must not be freed).
		 */
		if (made[i] < r->count && !unused && s->dref_sum == s->dref_refs) {
			q.fix = UB_CHK_FIX_DATA_REF_DROP;
			q.tree = r->root;
			q.inode = r->ino;
			q.want = r->offset;
			q.want2 = r->count - made[i];
		}
		chk_report(s->c, &q, "EXTENT_DATA_REF (root %llu inode %llu offset %llu) counts %llu, %llu file extent items make it",
			   (unsigned long long)r->root, (unsigned long long)r->ino, (unsigned long long)r->offset,
			   (unsigned long long)r->count, (unsigned long long)made[i]);
	}
	free(made);
	for (size_t i = 0; i < s->fext_n; i++)
		if (!f[i].used)
			chk_report(s->c, p, "the file extent item of root %llu inode %llu (offset %llu, leaf %llu) points at the extent, which has no reference for it",
				   (unsigned long long)f[i].root, (unsigned long long)f[i].ino,
				   (unsigned long long)f[i].offset, (unsigned long long)f[i].leaf);
}

static void finish(struct cstate *s)
{
	struct ub_chk_problem p;

	if (!s->dref_open)
		return;
	s->dref_open = false;
	where_ref(&p, &s->dref_key);
	if (!s->dref_unknown && s->dref_sum != s->dref_refs) {
		/* the file extent items that point at it agree with its references: the count alone is wrong */
		if (files_known(s) && s->fext_n == s->dref_sum && s->dref_sum) {
			p.fix = UB_CHK_FIX_EXTENT_REFS;
			p.want = s->dref_sum;
		}
		chk_report(s->c, &p, "data extent item counts %llu references, its references count %llu",
			   (unsigned long long)s->dref_refs, (unsigned long long)s->dref_sum);
		p.fix = UB_CHK_FIX_NONE;
	}
	if (!files_known(s) || s->dref_unknown)
		return;
	if (s->drefs_nomem) {
		if (s->fext_n != s->dref_refs)
			chk_report(s->c, &p, "data extent item counts %llu references, %llu file extent items point at it",
				   (unsigned long long)s->dref_refs, (unsigned long long)s->fext_n);
		return;
	}
	match_files(s, &p);
}

/* The inline references after the extent item proper, or unknown on a record it cannot read. */
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
		if (type == BTRFS_EXTENT_DATA_REF_KEY) {
			const uint8_t *r = d + at + 1;

			add_ref(s, &(struct chk_dref){ .root = UB_GET(btrfs_extent_data_ref, root, r),
						       .ino = UB_GET(btrfs_extent_data_ref, objectid, r),
						       .offset = UB_GET(btrfs_extent_data_ref, offset, r),
						       .count = UB_GET(btrfs_extent_data_ref, count, r) });
		} else if (type == BTRFS_SHARED_DATA_REF_KEY) {
			add_ref(s, &(struct chk_dref){ .shared = true, .parent = ub_le64(d + at + 1),
						       .count = UB_GET(btrfs_shared_data_ref, count, d + at + 9) });
		}
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
		s->fext_first = s->fext_cursor;
		while (s->fext_cursor < s->c->nfext && s->c->fext[s->fext_cursor].bytenr == k->objectid)
			s->fext_cursor++;
		s->fext_n = s->fext_cursor - s->fext_first;
		chk_qgroup_data(s->c, k->objectid, k->offset, open_fexts(s), s->fext_n);
		s->dref_open = true;
		s->dref_unknown = false;
		s->drefs_nomem = false;
		s->ndrefs = 0;
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
		add_ref(s, &(struct chk_dref){ .root = UB_GET(btrfs_extent_data_ref, root, d),
					       .ino = UB_GET(btrfs_extent_data_ref, objectid, d),
					       .offset = UB_GET(btrfs_extent_data_ref, offset, d),
					       .count = UB_GET(btrfs_extent_data_ref, count, d) });
	else if (k->type == BTRFS_SHARED_DATA_REF_KEY && size >= sizeof(struct btrfs_shared_data_ref))
		add_ref(s, &(struct chk_dref){ .shared = true, .parent = k->offset,
					       .count = UB_GET(btrfs_shared_data_ref, count, d) });
	else
		s->dref_unknown = true;
}

void chk_data_refs_end(struct cstate *s)
{
	finish(s);
	/* no data extent can start at the last address: the tree checker aligns them */
	unowned_before(s, UINT64_MAX);
	free(s->drefs);
	s->drefs = NULL;
}
