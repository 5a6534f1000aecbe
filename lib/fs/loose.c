/* SPDX-License-Identifier: MIT */
/*
 * Loose inodes: the items of inodes that no readable tree gives any more,
 * taken from leaves a scan of the metadata found (old copies that hang from
 * no root). Restore's last resort for a file whose leaves are lost: once
 * published, the inode cursor (icursor.c) reads such an inode from its set, as
 * it reads an inode the fsync log replayed, and its data is still verified
 * against the checksum tree like any file's. Built by one thread with no
 * other thread reading the fs; only read after ub_fs_loose_publish.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "ubtrfs/rootscan.h"
#include "fs_priv.h"
#include "items.h"

struct loose_item {
	uint64_t subvol, generation;
	struct ub_key key;
	uint32_t size;
	uint8_t *data;
};

/* A leaf that held every item of one inode that existed in [first, last] when it was written. */
struct loose_cover {
	uint64_t subvol, ino, generation;
	struct ub_key first, last;
};

struct ub_loose {
	struct loose_item *pending; /* added, not yet published */
	size_t npending, pending_cap;
	struct loose_cover *covers; /* sorted by inode at publishing */
	size_t ncovers, covers_cap;
	struct ub_itemset **sets;   /* published, by (subvol, ino) */
	size_t n;
};

int ub_fs_loose_add(struct ub_fs *fs, uint64_t subvol, const struct ub_eb *leaf, int slot)
{
	struct ub_loose *l = fs->loose;
	struct loose_item *it;
	const uint8_t *d;
	uint32_t size;

	if (!l && !(l = fs->loose = calloc(1, sizeof(*l))))
		return -ENOMEM;
	if (l->npending == l->pending_cap) {
		size_t cap = l->pending_cap ? l->pending_cap * 2 : 64;
		struct loose_item *v = realloc(l->pending, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		l->pending = v;
		l->pending_cap = cap;
	}
	it = &l->pending[l->npending];
	it->subvol = subvol;
	it->generation = ub_eb_generation(leaf);
	ub_eb_item_key(leaf, slot, &it->key);
	d = ub_eb_item_data(leaf, slot, &size);
	it->size = size;
	it->data = malloc(size ? size : 1);
	if (!it->data)
		return -ENOMEM;
	memcpy(it->data, d, size);
	l->npending++;
	return 0;
}

int ub_fs_loose_cover(struct ub_fs *fs, uint64_t subvol, uint64_t generation, const struct ub_key *first,
		      const struct ub_key *last)
{
	struct ub_loose *l = fs->loose;

	if (first->objectid != last->objectid || ub_key_cmp(first, last) > 0)
		return -EINVAL;
	if (!l && !(l = fs->loose = calloc(1, sizeof(*l))))
		return -ENOMEM;
	if (l->ncovers == l->covers_cap) {
		size_t cap = l->covers_cap ? l->covers_cap * 2 : 64;
		struct loose_cover *v = realloc(l->covers, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		l->covers = v;
		l->covers_cap = cap;
	}
	l->covers[l->ncovers++] = (struct loose_cover){ subvol, first->objectid, generation, *first, *last };
	return 0;
}

static int cover_cmp(const void *a, const void *b)
{
	const struct loose_cover *x = a, *y = b;

	if (x->subvol != y->subvol)
		return x->subvol < y->subvol ? -1 : 1;
	return x->ino < y->ino ? -1 : x->ino > y->ino;
}

/* Does a leaf newer than the one `it` comes from cover its key without holding it (deleted by then)? */
static bool covered_by_newer(const struct ub_loose *l, const struct loose_item *it)
{
	struct loose_cover key = { .subvol = it->subvol, .ino = it->key.objectid };
	size_t lo = 0, hi = l->ncovers;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (cover_cmp(&l->covers[mid], &key) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (; lo < l->ncovers && !cover_cmp(&l->covers[lo], &key); lo++) {
		const struct loose_cover *c = &l->covers[lo];

		if (c->generation > it->generation && ub_key_cmp(&c->first, &it->key) <= 0 &&
		    ub_key_cmp(&it->key, &c->last) <= 0)
			return true;
	}
	return false;
}

/* By inode, then key, the oldest copy first: putting them in order leaves the newest of each key. */
static int item_cmp(const void *a, const void *b)
{
	const struct loose_item *x = a, *y = b;
	int c;

	if (x->subvol != y->subvol)
		return x->subvol < y->subvol ? -1 : 1;
	c = ub_key_cmp(&x->key, &y->key);
	if (c)
		return c;
	return x->generation < y->generation ? -1 : x->generation > y->generation;
}

static void free_pending(struct ub_loose *l)
{
	for (size_t i = 0; i < l->npending; i++)
		free(l->pending[i].data);
	free(l->pending);
	l->pending = NULL;
	l->npending = l->pending_cap = 0;
}

int ub_fs_loose_publish(struct ub_fs *fs)
{
	struct ub_loose *l = fs->loose;
	int ret = 0;

	if (!l || !l->npending)
		return 0;
	if (l->sets)
		return -EBUSY; /* published once: readers may hold its sets */
	qsort(l->pending, l->npending, sizeof(*l->pending), item_cmp);
	if (l->ncovers > 1)
		qsort(l->covers, l->ncovers, sizeof(*l->covers), cover_cmp);
	for (size_t i = 0; i < l->npending && !ret; i++) {
		const struct loose_item *it = &l->pending[i];
		struct ub_itemset *s = l->n ? l->sets[l->n - 1] : NULL;

		if (l->ncovers && covered_by_newer(l, it))
			continue;
		if (!s || s->subvol != it->subvol || s->ino != it->key.objectid) {
			struct ub_itemset **v = realloc(l->sets, (l->n + 1) * sizeof(*v));

			if (!v || !(s = ub_itemset_new(it->subvol, it->key.objectid))) {
				if (v)
					l->sets = v;
				ret = -ENOMEM;
				break;
			}
			l->sets = v;
			l->sets[l->n++] = s;
		}
		ret = ub_itemset_put(s, &it->key, it->data, it->size);
	}
	free_pending(l);
	free(l->covers);
	l->covers = NULL;
	l->ncovers = l->covers_cap = 0;
	return ret;
}

const struct ub_itemset *ub_loose_lookup(const struct ub_fs *fs, uint64_t subvol, uint64_t ino)
{
	const struct ub_loose *l = fs->loose;
	size_t lo = 0, hi;

	if (!l || !l->n)
		return NULL;
	hi = l->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct ub_itemset *s = l->sets[mid];

		if (s->subvol < subvol || (s->subvol == subvol && s->ino < ino))
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < l->n && l->sets[lo]->subvol == subvol && l->sets[lo]->ino == ino ? l->sets[lo] : NULL;
}

int ub_fs_loose_extent_bytes(const struct ub_fs *fs, uint64_t subvol, uint64_t ino, uint64_t *bytes)
{
	const struct ub_itemset *set = ub_loose_lookup(fs, subvol, ino);

	*bytes = 0;
	if (!set)
		return -ENOENT;
	for (size_t i = 0; i < set->n; i++) {
		const struct ub_item *it = &set->items[i];
		const uint8_t *d = it->data;
		uint64_t n;

		if (it->key.type != BTRFS_EXTENT_DATA_KEY)
			continue;
		if (it->size < UB_FILE_EXTENT_INLINE_DATA_START)
			return -EUCLEAN;
		if (UB_GET(btrfs_file_extent_item, type, d) == BTRFS_FILE_EXTENT_INLINE) {
			n = UB_GET(btrfs_file_extent_item, ram_bytes, d);
		} else {
			if (it->size < sizeof(struct btrfs_file_extent_item))
				return -EUCLEAN;
			/* a hole (no disk extent) takes no bytes */
			n = UB_GET(btrfs_file_extent_item, disk_bytenr, d) ? UB_GET(btrfs_file_extent_item, num_bytes, d) : 0;
		}
		if (__builtin_add_overflow(*bytes, n, bytes))
			return -EUCLEAN;
	}
	return 0;
}

void ub_loose_free(struct ub_loose *l)
{
	if (!l)
		return;
	free_pending(l);
	free(l->covers);
	for (size_t i = 0; i < l->n; i++)
		ub_itemset_free(l->sets[i]);
	free(l->sets);
	free(l);
}
