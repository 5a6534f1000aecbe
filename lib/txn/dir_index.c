/* SPDX-License-Identifier: MIT */
/*
 * Directory index numbers handed out while the engine is open: never one
 * twice, as the kernel's in-memory index_cnt of a directory only grows. The
 * tree alone cannot say it: an entry removed in this transaction (or made and
 * removed) leaves no DIR_INDEX behind, and an fsync log that still holds the
 * old entry, or the last commit that does, would then meet a second entry of
 * the same index at the replay.
 */
#include <errno.h>
#include <stdlib.h>
#include "txn/txn.h"

struct dir_index {
	uint64_t subvol, dir, next;
};

struct ub_dir_indexes {
	struct dir_index *slot; /* open addressing; dir 0 is empty */
	size_t cap, used;
};

static size_t slot_of(uint64_t subvol, uint64_t dir, size_t cap)
{
	uint64_t h = (dir * 0x9e3779b97f4a7c15ULL) ^ (subvol * 0xc2b2ae3d27d4eb4fULL);

	return (size_t)(h ^ (h >> 31)) & (cap - 1);
}

static int grow(struct ub_dir_indexes *m)
{
	size_t cap = m->cap ? m->cap * 2 : 256;
	struct dir_index *s = calloc(cap, sizeof(*s));

	if (!s)
		return -ENOMEM;
	for (size_t i = 0; i < m->cap; i++) {
		size_t j;

		if (!m->slot[i].dir)
			continue;
		for (j = slot_of(m->slot[i].subvol, m->slot[i].dir, cap); s[j].dir; j = (j + 1) & (cap - 1))
			;
		s[j] = m->slot[i];
	}
	free(m->slot);
	m->slot = s;
	m->cap = cap;
	return 0;
}

uint64_t ub_engine_dir_index(struct ub_engine *e, uint64_t subvol, uint64_t dir, uint64_t floor)
{
	struct ub_dir_indexes *m = e->dir_indexes;
	size_t i;

	if (!m && !(m = e->dir_indexes = calloc(1, sizeof(*m))))
		return floor; /* out of memory: the tree's floor, as before */
	if ((m->used + 1) * 2 > m->cap && grow(m))
		return floor;
	for (i = slot_of(subvol, dir, m->cap); m->slot[i].dir; i = (i + 1) & (m->cap - 1))
		if (m->slot[i].dir == dir && m->slot[i].subvol == subvol)
			break;
	if (!m->slot[i].dir) {
		m->slot[i] = (struct dir_index){ subvol, dir, floor };
		m->used++;
	}
	if (m->slot[i].next < floor)
		m->slot[i].next = floor;
	return m->slot[i].next++;
}

void ub_engine_dir_indexes_free(struct ub_engine *e)
{
	if (e->dir_indexes) {
		free(e->dir_indexes->slot);
		free(e->dir_indexes);
		e->dir_indexes = NULL;
	}
}
