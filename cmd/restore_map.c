/* SPDX-License-Identifier: MIT */
/* restore's table of inodes: an open-addressing hash on (subvolume, inode). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "restore.h"

static size_t slot_of(uint64_t subvol, uint64_t ino, size_t cap)
{
	uint64_t h = (ino ^ (subvol << 40) ^ (subvol >> 24)) * 0x9e3779b97f4a7c15ULL;

	return (size_t)(h >> 17) & (cap - 1);
}

static int grow(struct rmap *m)
{
	size_t cap = m->cap ? m->cap * 2 : 256;
	struct rmap_slot *v = calloc(cap, sizeof(*v));

	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < m->cap; i++) {
		size_t j;

		if (!m->v[i].ino)
			continue;
		for (j = slot_of(m->v[i].subvol, m->v[i].ino, cap); v[j].ino; j = (j + 1) & (cap - 1))
			;
		v[j] = m->v[i];
	}
	free(m->v);
	m->v = v;
	m->cap = cap;
	return 0;
}

int rmap_add(struct rmap *m, uint64_t subvol, uint64_t ino, const char *path, const char **found)
{
	size_t i;

	/* inode 0 marks a free slot; no entry leads to it (the reader refuses such locations) */
	if (!ino)
		return -EINVAL;
	if (2 * (m->n + 1) > m->cap && grow(m))
		return -ENOMEM;
	for (i = slot_of(subvol, ino, m->cap); m->v[i].ino; i = (i + 1) & (m->cap - 1)) {
		if (m->v[i].subvol == subvol && m->v[i].ino == ino) {
			if (found)
				*found = m->v[i].path;
			return 0;
		}
	}
	if (path && !(m->v[i].path = strdup(path)))
		return -ENOMEM;
	m->v[i].subvol = subvol;
	m->v[i].ino = ino;
	m->n++;
	return 1;
}

void rmap_free(struct rmap *m)
{
	for (size_t i = 0; i < m->cap; i++)
		free(m->v[i].path);
	free(m->v);
	memset(m, 0, sizeof(*m));
}

bool rmap_has(const struct rmap *m, uint64_t subvol, uint64_t ino)
{
	if (!m->cap || !ino)
		return false;
	for (size_t i = slot_of(subvol, ino, m->cap); m->v[i].ino; i = (i + 1) & (m->cap - 1))
		if (m->v[i].subvol == subvol && m->v[i].ino == ino)
			return true;
	return false;
}

const char *rmap_get(const struct rmap *m, uint64_t subvol, uint64_t ino)
{
	if (!m->cap || !ino)
		return NULL;
	for (size_t i = slot_of(subvol, ino, m->cap); m->v[i].ino; i = (i + 1) & (m->cap - 1))
		if (m->v[i].subvol == subvol && m->v[i].ino == ino)
			return m->v[i].path;
	return NULL;
}
