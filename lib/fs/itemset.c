/* SPDX-License-Identifier: MIT */
/* Sorted in-memory item arrays for one inode. */
#include <errno.h>
#include <stdlib.h>
#include "items.h"

struct ub_itemset *ub_itemset_new(uint64_t subvol, uint64_t ino)
{
	struct ub_itemset *s = calloc(1, sizeof(*s));

	if (s) {
		s->subvol = subvol;
		s->ino = ino;
	}
	return s;
}

void ub_itemset_free(struct ub_itemset *set)
{
	if (!set)
		return;
	for (size_t i = 0; i < set->n; i++)
		free(set->items[i].data);
	free(set->items);
	free(set);
}

size_t ub_itemset_lower(const struct ub_itemset *set, const struct ub_key *key)
{
	size_t lo = 0, hi = set->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (ub_key_cmp(&set->items[mid].key, key) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

struct ub_item *ub_itemset_find(const struct ub_itemset *set, const struct ub_key *key)
{
	size_t i = ub_itemset_lower(set, key);

	return i < set->n && ub_key_cmp(&set->items[i].key, key) == 0 ? &set->items[i] : NULL;
}

int ub_itemset_put(struct ub_itemset *set, const struct ub_key *keyp, const uint8_t *data, uint32_t size)
{
	/* callers may pass a key (or data) that lives in this set: copy both before anything moves */
	const struct ub_key k = *keyp, *key = &k;
	size_t i = ub_itemset_lower(set, key);
	uint8_t *copy = malloc(size ? size : 1);

	if (!copy)
		return -ENOMEM;
	memcpy(copy, data, size);
	if (i < set->n && ub_key_cmp(&set->items[i].key, key) == 0) {
		free(set->items[i].data);
		set->items[i].data = copy;
		set->items[i].size = size;
		return 0;
	}
	if (set->n == set->cap) {
		size_t cap = set->cap ? set->cap * 2 : 16;
		struct ub_item *v = realloc(set->items, cap * sizeof(*v));
		if (!v) {
			free(copy);
			return -ENOMEM;
		}
		set->items = v;
		set->cap = cap;
	}
	memmove(&set->items[i + 1], &set->items[i], (set->n - i) * sizeof(set->items[0]));
	set->items[i].key = *key;
	set->items[i].data = copy;
	set->items[i].size = size;
	set->n++;
	return 0;
}

void ub_itemset_del(struct ub_itemset *set, size_t idx)
{
	if (idx >= set->n)
		return;
	free(set->items[idx].data);
	memmove(&set->items[idx], &set->items[idx + 1], (set->n - idx - 1) * sizeof(set->items[0]));
	set->n--;
}
