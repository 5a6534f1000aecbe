/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include "mount.h"

struct mount_map {
	pthread_mutex_t lock;
	struct mount_node *nodes; /* nodes[id - 1] */
	uint64_t n, cap;
	uint64_t *slots; /* open addressing: id, 0 empty */
	uint64_t nslots;
};

static uint64_t pair_hash(uint64_t subvol, uint64_t ino)
{
	uint64_t h = subvol * 0x9e3779b97f4a7c15ULL ^ ino;

	h ^= h >> 31;
	h *= 0xbf58476d1ce4e5b9ULL;
	return h ^ (h >> 29);
}

int mount_map_new(struct mount_map **out)
{
	struct mount_map *m = calloc(1, sizeof(*m));

	if (!m)
		return -ENOMEM;
	m->nslots = 1024;
	m->slots = calloc(m->nslots, sizeof(*m->slots));
	if (!m->slots) {
		free(m);
		return -ENOMEM;
	}
	pthread_mutex_init(&m->lock, NULL);
	*out = m;
	return 0;
}

void mount_map_free(struct mount_map *m)
{
	if (!m)
		return;
	pthread_mutex_destroy(&m->lock);
	free(m->nodes);
	free(m->slots);
	free(m);
}

static void slot_put(uint64_t *slots, uint64_t nslots, const struct mount_node *nodes, uint64_t id)
{
	uint64_t i = pair_hash(nodes[id - 1].subvol, nodes[id - 1].ino) & (nslots - 1);

	while (slots[i])
		i = (i + 1) & (nslots - 1);
	slots[i] = id;
}

/* Keep the table at most half full; called with the lock held. */
static int grow(struct mount_map *m)
{
	if (m->n == m->cap) {
		uint64_t cap = m->cap ? m->cap * 2 : 256;
		struct mount_node *nodes = realloc(m->nodes, cap * sizeof(*nodes));

		if (!nodes)
			return -ENOMEM;
		m->nodes = nodes;
		m->cap = cap;
	}
	if ((m->n + 1) * 2 > m->nslots) {
		uint64_t nslots = m->nslots * 2;
		uint64_t *slots = calloc(nslots, sizeof(*slots));

		if (!slots)
			return -ENOMEM;
		for (uint64_t id = 1; id <= m->n; id++)
			slot_put(slots, nslots, m->nodes, id);
		free(m->slots);
		m->slots = slots;
		m->nslots = nslots;
	}
	return 0;
}

uint64_t mount_map_get(struct mount_map *m, uint64_t subvol, uint64_t ino, uint64_t dir_ino, uint64_t parent,
		       uint64_t name, bool *first)
{
	uint64_t id = 0;

	if (first)
		*first = true;
	pthread_mutex_lock(&m->lock);
	for (uint64_t i = pair_hash(subvol, ino) & (m->nslots - 1);; i = (i + 1) & (m->nslots - 1)) {
		uint64_t s = m->slots[i];

		if (!s)
			break;
		if (m->nodes[s - 1].subvol == subvol && m->nodes[s - 1].ino == ino) {
			id = s;
			if (first)
				*first = m->nodes[s - 1].parent == parent && m->nodes[s - 1].name == name;
			goto out;
		}
	}
	if (grow(m))
		goto out;
	m->nodes[m->n] = (struct mount_node){ .subvol = subvol, .ino = ino, .dir_ino = dir_ino,
					       .parent = parent ? parent : m->n + 1, .name = name };
	id = ++m->n;
	slot_put(m->slots, m->nslots, m->nodes, id);
out:
	pthread_mutex_unlock(&m->lock);
	return id;
}

int mount_map_node(struct mount_map *m, uint64_t id, struct mount_node *out)
{
	int ret = -ENOENT;

	pthread_mutex_lock(&m->lock);
	if (id >= 1 && id <= m->n) {
		*out = m->nodes[id - 1];
		ret = 0;
	}
	pthread_mutex_unlock(&m->lock);
	return ret;
}
