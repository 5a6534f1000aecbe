/* SPDX-License-Identifier: MIT */
/*
 * A chunk tree that cannot be read whole leaves every chunk but the system
 * ones (the superblock's array) unmapped. Its leaves are copied on write like
 * any tree's, so older copies of them usually survive in the system block
 * groups, which the array does map: a scan of those groups finds every leaf
 * of the chunk tree still on disk that verifies (checksum, header, tree
 * checker), and the newest copy of each chunk item and device item found
 * fills in what the tree could not give. Only for read-only opens that ask
 * for it (restore): the map it gives is the best the disk holds, not a
 * committed state.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "fs_priv.h"
#include "ubtrfs/rootscan.h"

struct rescued {
	uint64_t key;        /* a chunk's logical address, a device's id */
	uint64_t generation; /* of the leaf it was found in */
	bool chunk;
	uint32_t size;
	uint8_t *item;
};

struct rescue {
	struct rescued *v;
	size_t n, cap;
	size_t leaves;
};

static bool want_chunk_leaf(void *arg, uint64_t owner, uint64_t generation, int level)
{
	(void)arg;
	(void)generation;
	return owner == BTRFS_CHUNK_TREE_OBJECTID && level == 0;
}

static int keep(struct rescue *r, const struct ub_key *k, const uint8_t *d, uint32_t size, uint64_t gen)
{
	struct rescued *e;

	if (r->n == r->cap) {
		size_t cap = r->cap ? r->cap * 2 : 32;
		struct rescued *v = realloc(r->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		r->v = v;
		r->cap = cap;
	}
	e = &r->v[r->n];
	*e = (struct rescued){ .key = k->offset, .generation = gen,
			       .chunk = k->type == BTRFS_CHUNK_ITEM_KEY, .size = size, .item = malloc(size ? size : 1) };
	if (!e->item)
		return -ENOMEM;
	memcpy(e->item, d, size);
	r->n++;
	return 0;
}

static int found_chunk_leaf(void *arg, const struct ub_eb *eb)
{
	struct rescue *r = arg;
	uint32_t n = ub_eb_nritems(eb);

	r->leaves++;
	for (uint32_t i = 0; i < n; i++) {
		struct ub_key k;
		uint32_t size;
		const uint8_t *d;
		int ret;

		ub_eb_item_key(eb, (int)i, &k);
		if (k.type != BTRFS_CHUNK_ITEM_KEY && k.type != BTRFS_DEV_ITEM_KEY)
			continue;
		d = ub_eb_item_data(eb, (int)i, &size);
		ret = keep(r, &k, d, size, ub_eb_generation(eb));
		if (ret)
			return ret;
	}
	return 0;
}

/* Devices before chunks, each key's newest copy first. */
static int by_key_newest(const void *a, const void *b)
{
	const struct rescued *x = a, *y = b;

	if (x->chunk != y->chunk)
		return x->chunk ? 1 : -1;
	if (x->key != y->key)
		return x->key < y->key ? -1 : 1;
	return x->generation > y->generation ? -1 : x->generation < y->generation;
}

int ub_fs_rescue_chunks(struct ub_fs *fs)
{
	struct rescue r = { 0 };
	struct ub_meta_scan_ops ops = { .system = true, .want = want_chunk_leaf, .found = found_chunk_leaf, .arg = &r };
	uint64_t newest = UB_GET(ub_disk_super, generation, fs->vol->super);
	int before = fs->vol->nchunks, added = 0, ret = ub_scan_metadata(fs, &ops);

	if (ret)
		goto out;
	if (r.n)
		qsort(r.v, r.n, sizeof(*r.v), by_key_newest);
	for (size_t i = 0; i < r.n; i++) {
		const struct rescued *e = &r.v[i];

		/* a copy from after the superblock's commit was never committed; an older copy of a key already taken is stale */
		if (e->generation > newest || (i && r.v[i - 1].chunk == e->chunk && r.v[i - 1].key == e->key))
			continue;
		if (e->chunk && ub_volume_find_chunk(fs->vol, e->key))
			continue;
		/* one item the volume refuses (a chunk relocated since, overlapping a newer one) is skipped */
		ret = e->chunk ? ub_volume_add_chunk(fs->vol, e->key, e->item, e->size)
			       : ub_volume_add_dev_item(fs->vol, e->item, e->size);
		if (ret == -ENOMEM)
			goto out;
		if (!ret && e->chunk)
			added++;
		if (ret)
			ub_info(&fs->log, "chunk rescue: the %s item of %llu (generation %llu) is not used: %s",
				e->chunk ? "chunk" : "device", (unsigned long long)e->key,
				(unsigned long long)e->generation, strerror(-ret));
		ret = 0;
	}
	ub_warn(&fs->log, "chunk rescue: %zu chunk tree leaves of the system block groups gave %d chunks "
		"(%d were mapped before); what they map is the newest the disk holds, not a committed state",
		r.leaves, added, before);
	if (!added && fs->vol->nchunks == before)
		ret = -ENOENT;
out:
	for (size_t i = 0; i < r.n; i++)
		free(r.v[i].item);
	free(r.v);
	return ret;
}
