// SPDX-License-Identifier: MIT
/* The table of root objects: lookup, loading from ROOT_ITEMs, publication of commits. */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include "ubtrfs/format.h"
#include "roots.h"

#define RI(field, p) UB_GET(btrfs_root_item, field, p)

void ub_roots_init(struct ub_roots *rs)
{
	pthread_mutex_init(&rs->lock, NULL);
	rs->list = NULL;
	rs->readers = NULL;
	rs->nreaders = rs->capreaders = 0;
}

void ub_roots_destroy(struct ub_roots *rs)
{
	while (rs->list) {
		struct ub_eroot *next = rs->list->next;
		free(rs->list);
		rs->list = next;
	}
	free(rs->readers);
	rs->readers = NULL;
	rs->nreaders = rs->capreaders = 0;
	pthread_mutex_destroy(&rs->lock);
}

int ub_roots_reader_enter(struct ub_roots *rs, const struct ub_eroot *root_tree, const struct ub_eroot *chunk_tree,
			  uint64_t *gen, struct ub_root *rt, struct ub_root *ct)
{
	int ret = 0, i;
	uint64_t g;

	pthread_mutex_lock(&rs->lock);
	g = root_tree ? root_tree->committed.generation : 0;
	/* generations only grow: the newest is last, found at once */
	for (i = rs->nreaders - 1; i >= 0 && rs->readers[i].gen > g; i--)
		;
	if (i >= 0 && rs->readers[i].gen == g) {
		rs->readers[i].count++;
	} else {
		if (rs->nreaders == rs->capreaders) {
			int cap = rs->capreaders ? 2 * rs->capreaders : 8;
			struct ub_reader_gen *r = realloc(rs->readers, (size_t)cap * sizeof(*r));

			if (!r) {
				ret = -ENOMEM;
				goto out;
			}
			rs->readers = r;
			rs->capreaders = cap;
		}
		memmove(&rs->readers[i + 2], &rs->readers[i + 1], (size_t)(rs->nreaders - i - 1) * sizeof(*rs->readers));
		rs->readers[i + 1] = (struct ub_reader_gen){ g, 1 };
		rs->nreaders++;
	}
	*gen = g;
	*rt = root_tree ? root_tree->committed : (struct ub_root){ 0 };
	*ct = chunk_tree ? chunk_tree->committed : (struct ub_root){ 0 };
out:
	pthread_mutex_unlock(&rs->lock);
	return ret;
}

void ub_roots_reader_exit(struct ub_roots *rs, uint64_t gen)
{
	pthread_mutex_lock(&rs->lock);
	for (int i = rs->nreaders - 1; i >= 0; i--) {
		if (rs->readers[i].gen != gen)
			continue;
		if (--rs->readers[i].count == 0) {
			memmove(&rs->readers[i], &rs->readers[i + 1], (size_t)(rs->nreaders - i - 1) * sizeof(*rs->readers));
			rs->nreaders--;
		}
		break;
	}
	pthread_mutex_unlock(&rs->lock);
}

uint64_t ub_roots_oldest_reader_locked(const struct ub_roots *rs)
{
	return rs->nreaders ? rs->readers[0].gen : UINT64_MAX;
}

uint64_t ub_roots_oldest_reader(struct ub_roots *rs)
{
	uint64_t g;

	pthread_mutex_lock(&rs->lock);
	g = ub_roots_oldest_reader_locked(rs);
	pthread_mutex_unlock(&rs->lock);
	return g;
}

void ub_roots_lock(struct ub_roots *rs)
{
	pthread_mutex_lock(&rs->lock);
}

void ub_roots_unlock(struct ub_roots *rs)
{
	pthread_mutex_unlock(&rs->lock);
}

static struct ub_eroot *find_locked(struct ub_roots *rs, uint64_t objectid)
{
	for (struct ub_eroot *er = rs->list; er; er = er->next)
		if (er->objectid == objectid)
			return er;
	return NULL;
}

struct ub_eroot *ub_roots_find(struct ub_roots *rs, uint64_t objectid)
{
	struct ub_eroot *er;

	pthread_mutex_lock(&rs->lock);
	er = find_locked(rs, objectid);
	pthread_mutex_unlock(&rs->lock);
	return er;
}

static bool is_subvol_id(uint64_t id)
{
	return id == BTRFS_FS_TREE_OBJECTID || (id >= BTRFS_FIRST_FREE_OBJECTID && id <= BTRFS_LAST_FREE_OBJECTID) ||
	       id == BTRFS_DATA_RELOC_TREE_OBJECTID;
}

/* (Re)fill an object: the ROOT_ITEM (or superblock) says r, and so does the last commit unless `born`. */
static void fill(struct ub_eroot *er, const struct ub_root *r, bool has_item, bool born)
{
	er->root = *r;
	er->has_item = has_item;
	er->shareable = is_subvol_id(r->objectid);
	er->item_bytenr = r->bytenr;
	er->item_generation = r->generation;
	er->item_level = r->level;
	er->committed = born ? (struct ub_root){ r->objectid, 0, 0, 0 } : *r;
	/* a tree made anew (an empty object reused) counts its inode numbers afresh */
	__atomic_store_n(&er->next_ino, 0, __ATOMIC_RELAXED);
}

/* Called with the mutex held; the new object goes at the end so the root and chunk trees stay first. */
static int add_locked(struct ub_roots *rs, const struct ub_root *r, bool has_item, bool born, struct ub_eroot **out)
{
	struct ub_eroot *er = find_locked(rs, r->objectid), **pp = &rs->list;

	if (er) {
		if (er->root.bytenr || er->committed.bytenr)
			return -EEXIST;
		fill(er, r, has_item, born);
		*out = er;
		return 0;
	}
	er = calloc(1, sizeof(*er));
	if (!er)
		return -ENOMEM;
	er->objectid = r->objectid;
	fill(er, r, has_item, born);
	while (*pp)
		pp = &(*pp)->next;
	/* filled before it is linked: walkers without the mutex see a whole object */
	__atomic_store_n(pp, er, __ATOMIC_RELEASE);
	*out = er;
	return 0;
}

int ub_roots_add(struct ub_roots *rs, const struct ub_root *r, bool has_item, struct ub_eroot **out)
{
	int ret;

	pthread_mutex_lock(&rs->lock);
	ret = add_locked(rs, r, has_item, has_item, out);
	pthread_mutex_unlock(&rs->lock);
	return ret;
}

int ub_roots_read_item(struct ub_tree_ctx *tc, const struct ub_root *root_tree, uint64_t objectid,
		       struct ub_root *out, uint64_t *item_offset, uint64_t *last_snapshot)
{
	struct ub_key key = { objectid, BTRFS_ROOT_ITEM_KEY, UINT64_MAX };
	struct ub_path p;
	const uint8_t *d;
	uint32_t size;
	char t[64];
	int ret;

	ub_path_init(&p);
	ret = ub_tree_search_le(tc, root_tree, &key, &p);
	if (ret)
		goto out;
	ub_path_key(&p, &key);
	if (key.objectid != objectid || key.type != BTRFS_ROOT_ITEM_KEY) {
		ret = 1;
		goto out;
	}
	d = ub_path_data(&p, &size);
	/* legacy root items are shorter; the fields used here are in the old part */
	if (size < offsetof(struct btrfs_root_item, generation_v2) || RI(level, d) >= UB_MAX_LEVEL || !RI(bytenr, d)) {
		ub_err(&tc->log, "root tree: ROOT_ITEM of tree %s (leaf at logical %llu slot %d): size %u, bytenr %llu, "
		       "level %u: not a usable root", ub_tree_name(objectid, t, sizeof(t)),
		       (unsigned long long)p.nodes[0]->start, p.slots[0], size,
		       size >= offsetof(struct btrfs_root_item, generation_v2) ? (unsigned long long)RI(bytenr, d) : 0ULL,
		       size >= offsetof(struct btrfs_root_item, generation_v2) ? (unsigned)RI(level, d) : 0U);
		ret = -EUCLEAN;
		goto out;
	}
	*out = (struct ub_root){ objectid, RI(bytenr, d), RI(generation, d), (uint8_t)RI(level, d) };
	if (item_offset)
		*item_offset = key.offset;
	if (last_snapshot)
		*last_snapshot = RI(last_snapshot, d);
out:
	ub_path_release(&p);
	return ret > 0 ? -ENOENT : ret;
}

int ub_roots_load(struct ub_roots *rs, struct ub_tree_ctx *tc, const struct ub_root *root_tree, uint64_t objectid,
		  struct ub_eroot **out)
{
	struct ub_eroot *er = ub_roots_find(rs, objectid);
	uint64_t offset, last_snapshot;
	struct ub_root r;
	int ret;

	if (er) {
		*out = er;
		return 0;
	}
	ret = ub_roots_read_item(tc, root_tree, objectid, &r, &offset, &last_snapshot);
	if (ret)
		return ret;
	pthread_mutex_lock(&rs->lock);
	/* another thread may have loaded (or the writer added) the tree meanwhile: the table's object wins */
	er = find_locked(rs, objectid);
	if (!er) {
		ret = add_locked(rs, &r, true, false, &er);
		if (!ret) {
			er->item_offset = offset;
			er->last_snapshot = er->item_last_snapshot = last_snapshot;
		}
	}
	pthread_mutex_unlock(&rs->lock);
	if (!ret)
		*out = er;
	return ret;
}

int ub_roots_committed(struct ub_roots *rs, const struct ub_eroot *er, struct ub_root *out)
{
	if (!er)
		return -ENOENT;
	pthread_mutex_lock(&rs->lock);
	*out = er->committed;
	pthread_mutex_unlock(&rs->lock);
	return out->bytenr ? 0 : -ENOENT;
}
