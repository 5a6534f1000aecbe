/* SPDX-License-Identifier: MIT */
/*
 * Names across inodes: each link of an inode into a directory is three
 * records (the inode's INODE_REF or EXTREF entry, the directory's DIR_ITEM
 * and DIR_INDEX entries). Sorted by directory, name hash, length, a second
 * hash and child, the three of one link sit together; each group must hold one of each,
 * agreeing on the index and the type. Memory: 40 bytes per record, per
 * subvolume (docs/check.md).
 */
#include <stdlib.h>
#include <string.h>

#include "check/fs_tree.h"

static int name_cmp(const void *a, const void *b)
{
	const struct chk_name *x = a, *y = b;

	if (x->dir != y->dir)
		return x->dir < y->dir ? -1 : 1;
	if (x->hash != y->hash)
		return x->hash < y->hash ? -1 : 1;
	if (x->len != y->len)
		return x->len < y->len ? -1 : 1;
	if (x->hash2 != y->hash2)
		return x->hash2 < y->hash2 ? -1 : 1;
	if (x->child != y->child)
		return x->child < y->child ? -1 : 1;
	if (x->kind != y->kind)
		return x->kind < y->kind ? -1 : 1;
	return x->index < y->index ? -1 : x->index > y->index;
}

static bool same_link(const struct chk_name *x, const struct chk_name *y)
{
	return x->dir == y->dir && x->hash == y->hash && x->len == y->len && x->hash2 == y->hash2 &&
	       x->child == y->child;
}

/*
 * FNV-1a: two names the kernel's hash cannot tell apart (one DIR_ITEM holds
 * both, links of one inode pack them in one INODE_EXTREF) are two links.
 */
uint32_t chk_name_hash2(const uint8_t *name, uint32_t len)
{
	uint32_t h = 2166136261u;

	for (uint32_t i = 0; i < len; i++)
		h = (h ^ name[i]) * 16777619u;
	return h;
}

static const char *const kind_names[] = { "INODE_REF", "DIR_ITEM", "DIR_INDEX" };

/* Where a record lives: its own item's key. */
static void where_name(struct ub_chk_problem *p, const struct fstate *f, const struct chk_name *n)
{
	switch (n->kind) {
	case NAME_REF: chk_fs_where(p, f, n->child, BTRFS_INODE_REF_KEY, n->dir); break;
	case NAME_ITEM: chk_fs_where(p, f, n->dir, BTRFS_DIR_ITEM_KEY, n->hash); break;
	default: chk_fs_where(p, f, n->dir, BTRFS_DIR_INDEX_KEY, n->index); break;
	}
	p->inode = n->child;
}

/* One link's records g[0..n), sorted by kind. */
static void check_link(struct fstate *f, const struct chk_name *g, size_t n)
{
	const struct chk_name *have[3] = { NULL, NULL, NULL };
	struct ub_chk_problem p;

	for (size_t i = 0; i < n; i++) {
		if (have[g[i].kind]) {
			where_name(&p, f, &g[i]);
			chk_report(f->s.c, &p, "a second %s entry for the name of inode %llu in directory %llu",
				   kind_names[g[i].kind], (unsigned long long)g[i].child, (unsigned long long)g[i].dir);
			continue;
		}
		have[g[i].kind] = &g[i];
	}
	if (!have[NAME_REF]) {
		const struct chk_name *e = have[NAME_INDEX] ? have[NAME_INDEX] : have[NAME_ITEM];

		where_name(&p, f, e);
		chk_report(f->s.c, &p, "directory %llu has an entry (%s%s) for inode %llu, which has no INODE_REF with that name there",
			   (unsigned long long)e->dir, have[NAME_ITEM] ? "DIR_ITEM" : "",
			   have[NAME_INDEX] ? (have[NAME_ITEM] ? " and DIR_INDEX" : "DIR_INDEX") : "",
			   (unsigned long long)e->child);
		return;
	}
	for (int k = NAME_ITEM; k <= NAME_INDEX; k++) {
		const struct chk_name *e = have[k];

		if (!e) {
			where_name(&p, f, have[NAME_REF]);
			chk_report(f->s.c, &p, "the name of inode %llu in directory %llu (index %llu) has no %s",
				   (unsigned long long)have[NAME_REF]->child, (unsigned long long)have[NAME_REF]->dir,
				   (unsigned long long)have[NAME_REF]->index, kind_names[k]);
			continue;
		}
		if (have[NAME_REF]->type && e->type != have[NAME_REF]->type) {
			where_name(&p, f, e);
			chk_report(f->s.c, &p, "%s type %u for inode %llu, whose mode says type %u", kind_names[k],
				   e->type, (unsigned long long)e->child, have[NAME_REF]->type);
		}
	}
	if (have[NAME_INDEX] && have[NAME_INDEX]->index != have[NAME_REF]->index) {
		where_name(&p, f, have[NAME_REF]);
		chk_report(f->s.c, &p, "INODE_REF says index %llu, the DIR_INDEX of the name is %llu",
			   (unsigned long long)have[NAME_REF]->index, (unsigned long long)have[NAME_INDEX]->index);
	}
}

void chk_names_check(struct fstate *f)
{
	size_t i = 0;

	if (f->nnames)
		qsort(f->names, f->nnames, sizeof(*f->names), name_cmp);
	while (i < f->nnames) {
		size_t j = i + 1;

		while (j < f->nnames && same_link(&f->names[i], &f->names[j]))
			j++;
		check_link(f, &f->names[i], j - i);
		i = j;
	}
}

static int u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

void chk_orphans_check(struct fstate *f)
{
	size_t o = 0;

	if (f->norphans)
		qsort(f->orphans, f->norphans, sizeof(*f->orphans), u64_cmp);
	for (size_t i = 0; i < f->nunlinked; i++) {
		struct ub_chk_problem p;
		uint64_t ino = f->unlinked[i];

		while (o < f->norphans && f->orphans[o] < ino)
			o++;
		if (o < f->norphans && f->orphans[o] == ino)
			continue;
		chk_fs_where(&p, f, ino, BTRFS_INODE_ITEM_KEY, 0);
		chk_report(f->s.c, &p, "nlink 0 and no orphan item: an unlinked inode nothing will delete");
	}
}
