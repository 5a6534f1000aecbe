/* SPDX-License-Identifier: MIT */
/*
 * The tree blocks the walk reached: address, how many pointers reached it and
 * the tag of the tree that reached it first; open addressing while the walk
 * adds, then compacted and sorted by address for the extent tree's stream.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check/check_priv.h"

static size_t slot_of(uint64_t addr, size_t cap)
{
	/* addresses are multiples of the sector size: mix the low bits in */
	uint64_t h = addr * 0x9E3779B97F4A7C15ULL;

	return (size_t)(h >> 32) & (cap - 1);
}

static int grow(struct chk_block_map *m)
{
	size_t cap = m->cap ? m->cap * 2 : 1024;
	struct chk_block *v = calloc(cap, sizeof(*v));

	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < m->cap; i++) {
		size_t j;

		if (!m->v[i].addr)
			continue;
		for (j = slot_of(m->v[i].addr, cap); v[j].addr; j = (j + 1) & (cap - 1))
			;
		v[j] = m->v[i];
	}
	free(m->v);
	m->v = v;
	m->cap = cap;
	return 0;
}

int chk_block_map_add(struct chk_block_map *m, uint64_t addr, uint32_t tag, struct chk_block **out)
{
	size_t j;

	if (!addr)
		return -EINVAL;
	/* at most half full */
	if ((m->n + 1) * 2 > m->cap) {
		int ret = grow(m);

		if (ret)
			return ret;
	}
	for (j = slot_of(addr, m->cap); m->v[j].addr; j = (j + 1) & (m->cap - 1))
		if (m->v[j].addr == addr) {
			*out = &m->v[j];
			return 1;
		}
	m->v[j] = (struct chk_block){ .addr = addr, .tag = tag };
	m->n++;
	*out = &m->v[j];
	return 0;
}

static int by_addr(const void *a, const void *b)
{
	const struct chk_block *x = a, *y = b;

	return x->addr < y->addr ? -1 : x->addr > y->addr;
}

void chk_block_map_sort(struct chk_block_map *m)
{
	size_t n = 0;

	for (size_t i = 0; i < m->cap; i++)
		if (m->v[i].addr)
			m->v[n++] = m->v[i];
	qsort(m->v, n, sizeof(*m->v), by_addr);
	m->n = n;
	m->cap = 0; /* no longer a hash table */
}

void chk_block_map_free(struct chk_block_map *m)
{
	free(m->v);
	memset(m, 0, sizeof(*m));
}
