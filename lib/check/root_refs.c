/* SPDX-License-Identifier: MIT */
/*
 * Root references: every ROOT_REF (parent, child) has its ROOT_BACKREF
 * (child, parent) with the same directory, sequence and name, and the other
 * way round; a live subvolume has a back reference (is linked somewhere).
 * The root tree's leaves hand their items over as the tree pass walks them;
 * there are as many as there are subvolumes.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check/check_priv.h"

struct chk_root_ref {
	uint8_t type; /* ROOT_REF or ROOT_BACKREF */
	uint64_t from, to; /* the key's objectid and offset */
	uint64_t dirid, sequence;
	uint16_t name_len;
	char name[UB_NAME_LEN];
};

int chk_root_refs_add(struct ub_checker *c, const struct ub_key *k, const uint8_t *d, uint32_t size)
{
	struct chk_root_ref *r;
	uint32_t hdr = (uint32_t)sizeof(struct btrfs_root_ref);
	uint16_t len;

	if (k->type == BTRFS_ROOT_ITEM_KEY) {
		/* a live subvolume: it must be linked */
		if (k->objectid < BTRFS_FIRST_FREE_OBJECTID || k->objectid > BTRFS_LAST_FREE_OBJECTID ||
		    size < offsetof(struct btrfs_root_item, generation_v2) || !UB_GET(btrfs_root_item, refs, d))
			return 0;
		if (chk_reserve(&c->live_subvols, &c->live_cap, c->nlive, sizeof(*c->live_subvols), 16))
			return -ENOMEM;
		c->live_subvols[c->nlive++] = k->objectid;
		return 0;
	}
	if ((k->type != BTRFS_ROOT_REF_KEY && k->type != BTRFS_ROOT_BACKREF_KEY) || size < hdr)
		return 0;
	len = (uint16_t)UB_GET(btrfs_root_ref, name_len, d);
	/* the tree checker has bounded the name by the item */
	if (len > UB_NAME_LEN || hdr + len > size)
		return 0;
	if (chk_reserve(&c->root_refs, &c->root_refs_cap, c->nroot_refs, sizeof(*c->root_refs), 16))
		return -ENOMEM;
	r = &c->root_refs[c->nroot_refs++];
	r->type = k->type;
	r->from = k->objectid;
	r->to = k->offset;
	r->dirid = UB_GET(btrfs_root_ref, dirid, d);
	r->sequence = UB_GET(btrfs_root_ref, sequence, d);
	r->name_len = len;
	memcpy(r->name, d + hdr, len);
	return 0;
}

static int ref_cmp(const struct chk_root_ref *a, uint8_t type, uint64_t from, uint64_t to)
{
	if (a->type != type)
		return a->type < type ? -1 : 1;
	if (a->from != from)
		return a->from < from ? -1 : 1;
	return a->to < to ? -1 : a->to > to;
}

static int by_key(const void *x, const void *y)
{
	const struct chk_root_ref *b = y;

	return ref_cmp(x, b->type, b->from, b->to);
}

/* The first ref at or after (type, from, to) in the sorted list (an index, nroot_refs if none). */
static size_t lower_bound(const struct ub_checker *c, uint8_t type, uint64_t from, uint64_t to)
{
	size_t lo = 0, hi = c->nroot_refs;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (ref_cmp(&c->root_refs[mid], type, from, to) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static const struct chk_root_ref *find_ref(const struct ub_checker *c, uint8_t type, uint64_t from, uint64_t to)
{
	size_t i = lower_bound(c, type, from, to);

	return i < c->nroot_refs && !ref_cmp(&c->root_refs[i], type, from, to) ? &c->root_refs[i] : NULL;
}

void chk_root_refs_check(struct ub_checker *c)
{
	struct ub_chk_problem p;

	/* the root tree hands them over in key order already; sorting makes sure of it */
	if (c->nroot_refs)
		qsort(c->root_refs, c->nroot_refs, sizeof(*c->root_refs), by_key);

	for (size_t i = 0; i < c->nroot_refs; i++) {
		const struct chk_root_ref *r = &c->root_refs[i];
		uint8_t other = r->type == BTRFS_ROOT_REF_KEY ? BTRFS_ROOT_BACKREF_KEY : BTRFS_ROOT_REF_KEY;
		const struct chk_root_ref *m = find_ref(c, other, r->to, r->from);

		memset(&p, 0, sizeof(p));
		p.cls = UB_CHK_ROOT;
		p.tree = BTRFS_ROOT_TREE_OBJECTID;
		p.has_key = true;
		p.key = (struct ub_key){ r->from, r->type, r->to };
		if (!m)
			chk_report(c, &p, "%s without its %s (%llu %s %llu)",
				   r->type == BTRFS_ROOT_REF_KEY ? "ROOT_REF" : "ROOT_BACKREF",
				   other == BTRFS_ROOT_REF_KEY ? "ROOT_REF" : "ROOT_BACKREF", (unsigned long long)r->to,
				   other == BTRFS_ROOT_REF_KEY ? "ROOT_REF" : "ROOT_BACKREF", (unsigned long long)r->from);
		else if (r->type == BTRFS_ROOT_REF_KEY &&
			 (m->dirid != r->dirid || m->sequence != r->sequence || m->name_len != r->name_len ||
			  memcmp(m->name, r->name, r->name_len)))
			chk_report(c, &p, "ROOT_REF and its ROOT_BACKREF disagree on the directory, index or name");
	}
	if (!c->walk_complete)
		return; /* a root tree leaf may be missing: its refs are unknown */
	for (size_t i = 0; i < c->nlive; i++) {
		size_t j = lower_bound(c, BTRFS_ROOT_BACKREF_KEY, c->live_subvols[i], 0);

		if (j >= c->nroot_refs || c->root_refs[j].type != BTRFS_ROOT_BACKREF_KEY ||
		    c->root_refs[j].from != c->live_subvols[i]) {
			memset(&p, 0, sizeof(p));
			p.cls = UB_CHK_ROOT;
			p.tree = BTRFS_ROOT_TREE_OBJECTID;
			p.has_key = true;
			p.key = (struct ub_key){ c->live_subvols[i], BTRFS_ROOT_ITEM_KEY, 0 };
			chk_report(c, &p, "subvolume %llu has references but no ROOT_BACKREF: it is linked nowhere",
				   (unsigned long long)c->live_subvols[i]);
		}
	}
}

static bool link_matches(const struct chk_subvol_link *l, const struct chk_root_ref *r, bool is_index)
{
	return l->tree == r->from && l->dir == r->dirid && l->child == r->to && l->is_index == is_index &&
	       (!is_index || l->index == r->sequence) && l->name_len == r->name_len &&
	       !memcmp(l->name, r->name, r->name_len);
}

/*
 * A ROOT_REF is one half of a subvolume's link; the DIR_ITEM and DIR_INDEX
 * entries in its parent's directory are the other. The reverse is not a
 * rule: a snapshot keeps the entries of subvolumes below its source without
 * their ROOT_REFs (the kernel shows them as empty directories).
 */
void chk_subvol_links_check(struct ub_checker *c)
{
	struct ub_chk_problem p;

	if (!c->walk_complete)
		return;
	for (size_t i = 0; i < c->nroot_refs; i++) {
		const struct chk_root_ref *r = &c->root_refs[i];
		bool whole = false, item = false, index = false;

		if (r->type != BTRFS_ROOT_REF_KEY)
			continue;
		for (size_t j = 0; j < c->nwhole && !whole; j++)
			whole = c->whole_trees[j] == r->from;
		/* a parent tree not read whole (or a deleted one, never read) cannot be judged */
		if (!whole)
			continue;
		for (size_t j = 0; j < c->nlinks; j++) {
			item |= link_matches(&c->links[j], r, false);
			index |= link_matches(&c->links[j], r, true);
		}
		if (item && index)
			continue;
		memset(&p, 0, sizeof(p));
		p.cls = UB_CHK_ROOT;
		p.tree = BTRFS_ROOT_TREE_OBJECTID;
		p.has_key = true;
		p.key = (struct ub_key){ r->from, r->type, r->to };
		chk_report(c, &p, "ROOT_REF of subvolume %llu: directory %llu of tree %llu has no %s%s%s entry for it "
			   "(index %llu, with the ROOT_REF's name)", (unsigned long long)r->to,
			   (unsigned long long)r->dirid, (unsigned long long)r->from, item ? "" : "DIR_ITEM",
			   item || index ? "" : " and no ", index ? "" : "DIR_INDEX", (unsigned long long)r->sequence);
	}
}
