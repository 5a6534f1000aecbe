/* SPDX-License-Identifier: MIT */
/*
 * The mount's node ids (mount.h): two hash tables over one set of nodes, by
 * id and by (subvolume, inode), each node with the count of lookups the
 * kernel holds on it. A node goes when the kernel forgets it (the count back
 * to 0): its memory with it, its id never handed out again.
 */
#include <errno.h>
#include <stdlib.h>
#include "mount.h"

struct map_node {
	struct mount_node n;
	uint64_t id;
	uint64_t nlookup;
	struct map_node *by_id, *by_pair; /* chains */
};

struct mount_map {
	pthread_mutex_t lock;
	struct map_node **ids, **pairs;
	uint64_t nbuckets, count, next_id;
};

static uint64_t mix(uint64_t h)
{
	h ^= h >> 31;
	h *= 0xbf58476d1ce4e5b9ULL;
	return h ^ (h >> 29);
}

static uint64_t pair_bucket(const struct mount_map *m, uint64_t subvol, uint64_t ino)
{
	return mix(subvol * 0x9e3779b97f4a7c15ULL ^ ino) & (m->nbuckets - 1);
}

static uint64_t id_bucket(const struct mount_map *m, uint64_t id)
{
	return mix(id) & (m->nbuckets - 1);
}

int mount_map_new(struct mount_map **out)
{
	struct mount_map *m = calloc(1, sizeof(*m));

	if (!m)
		return -ENOMEM;
	m->nbuckets = 1024;
	m->ids = calloc(m->nbuckets, sizeof(*m->ids));
	m->pairs = calloc(m->nbuckets, sizeof(*m->pairs));
	if (!m->ids || !m->pairs) {
		free(m->ids);
		free(m->pairs);
		free(m);
		return -ENOMEM;
	}
	m->next_id = 1;
	pthread_mutex_init(&m->lock, NULL);
	*out = m;
	return 0;
}

void mount_map_free(struct mount_map *m)
{
	if (!m)
		return;
	for (uint64_t b = 0; b < m->nbuckets; b++)
		for (struct map_node *x = m->ids[b], *nx; x; x = nx) {
			nx = x->by_id;
			free(x);
		}
	pthread_mutex_destroy(&m->lock);
	free(m->ids);
	free(m->pairs);
	free(m);
}

/* At most two nodes a bucket on average; the lock held. */
static void grow(struct mount_map *m)
{
	uint64_t nb = m->nbuckets * 2;
	struct map_node **ids = calloc(nb, sizeof(*ids)), **pairs = calloc(nb, sizeof(*pairs));

	if (!ids || !pairs) {
		free(ids);
		free(pairs);
		return; /* longer chains, still right */
	}
	for (uint64_t b = 0; b < m->nbuckets; b++)
		for (struct map_node *x = m->ids[b], *nx; x; x = nx) {
			uint64_t i = mix(x->id) & (nb - 1);
			uint64_t p = mix(x->n.subvol * 0x9e3779b97f4a7c15ULL ^ x->n.ino) & (nb - 1);

			nx = x->by_id;
			x->by_id = ids[i];
			ids[i] = x;
			x->by_pair = pairs[p];
			pairs[p] = x;
		}
	free(m->ids);
	free(m->pairs);
	m->ids = ids;
	m->pairs = pairs;
	m->nbuckets = nb;
}

static struct map_node *find_pair(struct mount_map *m, uint64_t subvol, uint64_t ino)
{
	for (struct map_node *x = m->pairs[pair_bucket(m, subvol, ino)]; x; x = x->by_pair)
		if (x->n.subvol == subvol && x->n.ino == ino)
			return x;
	return NULL;
}

static struct map_node *find_id(struct mount_map *m, uint64_t id)
{
	for (struct map_node *x = m->ids[id_bucket(m, id)]; x; x = x->by_id)
		if (x->id == id)
			return x;
	return NULL;
}

uint64_t mount_map_get(struct mount_map *m, uint64_t subvol, uint64_t ino, uint64_t dir_ino, uint64_t parent,
		       uint64_t name, bool *first)
{
	struct map_node *x;
	uint64_t id = 0;

	if (first)
		*first = true;
	pthread_mutex_lock(&m->lock);
	x = find_pair(m, subvol, ino);
	if (x) {
		id = x->id;
		if (first)
			*first = x->n.parent == parent && x->n.name == name;
		goto out;
	}
	if (m->count >= 2 * m->nbuckets)
		grow(m);
	x = calloc(1, sizeof(*x));
	if (!x)
		goto out;
	x->id = id = m->next_id++;
	x->n = (struct mount_node){ .subvol = subvol, .ino = ino, .dir_ino = dir_ino, .parent = parent ? parent : id,
				    .name = name };
	x->by_id = m->ids[id_bucket(m, id)];
	m->ids[id_bucket(m, id)] = x;
	x->by_pair = m->pairs[pair_bucket(m, subvol, ino)];
	m->pairs[pair_bucket(m, subvol, ino)] = x;
	m->count++;
out:
	pthread_mutex_unlock(&m->lock);
	return id;
}

int mount_map_node(struct mount_map *m, uint64_t id, struct mount_node *out)
{
	struct map_node *x;
	int ret = -ENOENT;

	pthread_mutex_lock(&m->lock);
	x = find_id(m, id);
	if (x) {
		*out = x->n;
		ret = 0;
	}
	pthread_mutex_unlock(&m->lock);
	return ret;
}

void mount_map_ref(struct mount_map *m, uint64_t id)
{
	struct map_node *x;

	pthread_mutex_lock(&m->lock);
	x = find_id(m, id);
	if (x)
		x->nlookup++;
	pthread_mutex_unlock(&m->lock);
}

int mount_map_forget(struct mount_map *m, uint64_t id, uint64_t n, struct mount_node *gone)
{
	struct map_node *x, **pp;
	int ret = 0;

	pthread_mutex_lock(&m->lock);
	x = find_id(m, id);
	/* the mount's root stays: the kernel forgets it only on the way out */
	if (!x || id == 1)
		goto out;
	x->nlookup = x->nlookup > n ? x->nlookup - n : 0;
	if (x->nlookup)
		goto out;
	for (pp = &m->ids[id_bucket(m, id)]; *pp != x; pp = &(*pp)->by_id)
		;
	*pp = x->by_id;
	for (pp = &m->pairs[pair_bucket(m, x->n.subvol, x->n.ino)]; *pp != x; pp = &(*pp)->by_pair)
		;
	*pp = x->by_pair;
	m->count--;
	if (gone)
		*gone = x->n;
	free(x);
	ret = 1;
out:
	pthread_mutex_unlock(&m->lock);
	return ret;
}

void mount_map_moved(struct mount_map *m, uint64_t subvol, uint64_t ino, uint64_t parent, uint64_t name)
{
	struct map_node *x;

	pthread_mutex_lock(&m->lock);
	x = find_pair(m, subvol, ino);
	if (x) {
		x->n.parent = parent;
		x->n.name = name;
	}
	pthread_mutex_unlock(&m->lock);
}

uint64_t mount_map_find(struct mount_map *m, uint64_t subvol, uint64_t ino)
{
	struct map_node *x;
	uint64_t id;

	pthread_mutex_lock(&m->lock);
	x = find_pair(m, subvol, ino);
	id = x ? x->id : 0;
	pthread_mutex_unlock(&m->lock);
	return id;
}
