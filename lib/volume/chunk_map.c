/* SPDX-License-Identifier: MIT */
/* The chunk map: chunk items, their lookup by logical address, and the way into each chunk's layout. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "volume_internal.h"

#define CK(field, p) UB_GET(btrfs_chunk, field, p)
#define ST(field, p) UB_GET(btrfs_stripe, field, p)
#define CHUNK_HDR ((uint32_t)offsetof(struct btrfs_chunk, stripe))
#define STRIPE_SZ ((uint32_t)sizeof(struct btrfs_stripe))

struct ub_vdev *ub_volume_vdev(const struct ub_volume *vol, uint64_t devid)
{
	for (int i = 0; i < vol->nvdevs; i++)
		if (vol->vdevs[i].devid == devid)
			return &vol->vdevs[i];
	return NULL;
}

/* Bind chunk stripes to assembled devices (again after new dev items arrive). */
void ub_chunk_bind(struct ub_volume *vol, struct ub_chunk *c)
{
	for (int i = 0; i < c->num_stripes; i++) {
		struct ub_vdev *v = ub_volume_vdev(vol, c->stripes[i].devid);
		c->stripes[i].dev = (v && !v->missing) ? v : NULL;
	}
}

int ub_chunk_item_check(uint64_t logical, const uint8_t *item, uint32_t size, uint32_t sectorsize, char *why,
			size_t whylen)
{
	uint64_t length, type, stripe_len;
	uint16_t num, sub;
	const struct ub_profile *prof;

	if (size < CHUNK_HDR + STRIPE_SZ) {
		snprintf(why, whylen, "item too small (%u bytes)", size);
		return -EUCLEAN;
	}
	length = CK(length, item);
	type = CK(type, item);
	stripe_len = CK(stripe_len, item);
	num = (uint16_t)CK(num_stripes, item);
	sub = (uint16_t)CK(sub_stripes, item);
	prof = ub_profile_of(type);
	if (num == 0 || size != CHUNK_HDR + (uint32_t)num * STRIPE_SZ) {
		snprintf(why, whylen, "%u stripes do not fit item size %u", num, size);
		return -EUCLEAN;
	}
	if (!prof || !(type & BTRFS_BLOCK_GROUP_TYPE_MASK)) {
		snprintf(why, whylen, "invalid type flags 0x%llx", (unsigned long long)type);
		return -EUCLEAN;
	}
	if (length == 0 || !sectorsize || length % sectorsize || logical % sectorsize || logical + length < logical) {
		snprintf(why, whylen, "invalid length %llu", (unsigned long long)length);
		return -EUCLEAN;
	}
	if (stripe_len != UB_STRIPE_LEN) {
		snprintf(why, whylen, "stripe length %llu, expected 65536", (unsigned long long)stripe_len);
		return -EUCLEAN;
	}
	if (!prof->layout->stripes_valid(prof, num, sub)) {
		snprintf(why, whylen, "%u stripes (sub_stripes %u) invalid for %s", num, sub, prof->name);
		return -EUCLEAN;
	}
	return 0;
}

static int chunk_item_valid(struct ub_volume *vol, uint64_t logical, const uint8_t *item, uint32_t size)
{
	char why[160];
	int ret = ub_chunk_item_check(logical, item, size, vol->sectorsize, why, sizeof(why));

	if (ret)
		ub_err(&vol->log, "chunk at logical %llu: %s", (unsigned long long)logical, why);
	return ret;
}

static int chunk_cmp_find(struct ub_volume *vol, uint64_t logical)
{
	/* index of the first chunk whose logical > `logical` */
	int lo = 0, hi = vol->nchunks;

	while (lo < hi) {
		int mid = lo + (hi - lo) / 2;
		if (vol->chunks[mid]->logical <= logical)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

int ub_volume_add_chunk(struct ub_volume *vol, uint64_t logical, const uint8_t *item, uint32_t size)
{
	struct ub_chunk *c;
	uint16_t num;
	int pos, ret;

	ret = chunk_item_valid(vol, logical, item, size);
	if (ret)
		return ret;
	pos = chunk_cmp_find(vol, logical);
	if (pos > 0) {
		const struct ub_chunk *prev = vol->chunks[pos - 1];
		if (prev->logical == logical)
			return 0; /* the sys array and the chunk tree both carry system chunks */
		if (prev->logical + prev->length > logical) {
			ub_err(&vol->log, "chunk at logical %llu overlaps chunk at %llu",
			       (unsigned long long)logical, (unsigned long long)prev->logical);
			return -EUCLEAN;
		}
	}
	if (pos < vol->nchunks && logical + CK(length, item) > vol->chunks[pos]->logical) {
		ub_err(&vol->log, "chunk at logical %llu overlaps chunk at %llu", (unsigned long long)logical,
		       (unsigned long long)vol->chunks[pos]->logical);
		return -EUCLEAN;
	}
	num = (uint16_t)CK(num_stripes, item);
	c = calloc(1, sizeof(*c) + num * sizeof(c->stripes[0]));
	if (!c)
		return -ENOMEM;
	c->logical = logical;
	c->length = CK(length, item);
	c->type = CK(type, item);
	c->stripe_len = CK(stripe_len, item);
	c->num_stripes = num;
	c->sub_stripes = (uint16_t)CK(sub_stripes, item);
	c->profile = ub_profile_of(c->type);
	for (int i = 0; i < num; i++) {
		const uint8_t *s = item + CHUNK_HDR + (uint32_t)i * STRIPE_SZ;
		c->stripes[i].devid = ST(devid, s);
		c->stripes[i].physical = ST(offset, s);
		memcpy(c->stripes[i].dev_uuid, UB_PTR(btrfs_stripe, dev_uuid, s), UB_UUID_SIZE);
	}
	ub_chunk_bind(vol, c);
	if (!vol->chunk_lock_ready) {
		pthread_rwlockattr_t attr;
		int r;

		/* busy readers must not starve the writer adding the chunk a transaction waits for */
		pthread_rwlockattr_init(&attr);
		pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
		r = pthread_rwlock_init(&vol->chunk_lock, &attr);
		pthread_rwlockattr_destroy(&attr);
		if (r) {
			free(c);
			return -ENOMEM;
		}
		vol->chunk_lock_ready = true;
	}
	pthread_rwlock_wrlock(&vol->chunk_lock);
	if (vol->nchunks == vol->chunks_cap) {
		int cap = vol->chunks_cap ? vol->chunks_cap * 2 : 64;
		struct ub_chunk **n = realloc(vol->chunks, (size_t)cap * sizeof(*n));
		if (!n) {
			pthread_rwlock_unlock(&vol->chunk_lock);
			free(c);
			return -ENOMEM;
		}
		vol->chunks = n;
		vol->chunks_cap = cap;
	}
	memmove(&vol->chunks[pos + 1], &vol->chunks[pos], (size_t)(vol->nchunks - pos) * sizeof(c));
	vol->chunks[pos] = c;
	vol->nchunks++;
	pthread_rwlock_unlock(&vol->chunk_lock);
	return 0;
}

const struct ub_chunk *ub_volume_find_chunk(const struct ub_volume *vol, uint64_t logical)
{
	struct ub_volume *v = (struct ub_volume *)vol;
	const struct ub_chunk *c = NULL;
	int pos;

	if (!vol->chunk_lock_ready)
		return NULL; /* no chunk was ever added */
	pthread_rwlock_rdlock(&v->chunk_lock);
	pos = chunk_cmp_find(v, logical);
	if (pos > 0 && logical - v->chunks[pos - 1]->logical < v->chunks[pos - 1]->length)
		c = v->chunks[pos - 1];
	pthread_rwlock_unlock(&v->chunk_lock);
	return c;
}

int ub_chunk_num_copies(const struct ub_chunk *c)
{
	return c->profile->layout->num_copies(c);
}

int ub_volume_num_copies(const struct ub_volume *vol, uint64_t logical)
{
	const struct ub_chunk *c = ub_volume_find_chunk(vol, logical);
	return c ? ub_chunk_num_copies(c) : 0;
}

/*
 * Where the data of copy `mirror` (1-based, a stored copy, not a rebuild) of
 * `logical` lives, and how many bytes from there on are contiguous.
 */
int ub_chunk_map_copy(const struct ub_chunk *c, uint64_t logical, int mirror, struct ub_map *m)
{
	if (mirror < 1)
		return -EINVAL;
	return c->profile->layout->map(c, logical - c->logical, mirror, m);
}

void ub_chunks_free(struct ub_volume *vol)
{
	for (int i = 0; i < vol->nchunks; i++)
		free(vol->chunks[i]);
	free(vol->chunks);
	vol->chunks = NULL;
	vol->nchunks = vol->chunks_cap = 0;
	if (vol->chunk_lock_ready)
		pthread_rwlock_destroy(&vol->chunk_lock);
	vol->chunk_lock_ready = false;
}

uint32_t ub_chunk_item_bytes(int num_stripes)
{
	return (uint32_t)(sizeof(struct btrfs_chunk) + (size_t)(num_stripes - 1) * sizeof(struct btrfs_stripe));
}

void ub_chunk_item_encode(uint64_t length, uint64_t type, uint32_t sectorsize, int num, int sub_stripes,
			  const uint64_t *devid, const uint64_t *phys, const uint8_t *uuids, uint8_t *item)
{
	memset(item, 0, ub_chunk_item_bytes(num));
	UB_SET(btrfs_chunk, length, item, length);
	/* the kernel names the extent tree as the owner of every chunk */
	UB_SET(btrfs_chunk, owner, item, BTRFS_EXTENT_TREE_OBJECTID);
	UB_SET(btrfs_chunk, stripe_len, item, UB_STRIPE_LEN);
	UB_SET(btrfs_chunk, type, item, type);
	UB_SET(btrfs_chunk, io_align, item, UB_STRIPE_LEN);
	UB_SET(btrfs_chunk, io_width, item, UB_STRIPE_LEN);
	UB_SET(btrfs_chunk, sector_size, item, sectorsize);
	UB_SET(btrfs_chunk, num_stripes, item, (uint64_t)num);
	UB_SET(btrfs_chunk, sub_stripes, item, (uint64_t)(sub_stripes ? sub_stripes : 1));
	for (int i = 0; i < num; i++) {
		uint8_t *s = item + offsetof(struct btrfs_chunk, stripe) + (size_t)i * sizeof(struct btrfs_stripe);

		UB_SET(btrfs_stripe, devid, s, devid[i]);
		UB_SET(btrfs_stripe, offset, s, phys[i]);
		memcpy(s + offsetof(struct btrfs_stripe, dev_uuid), uuids + (size_t)i * UB_UUID_SIZE, UB_UUID_SIZE);
	}
}

int ub_volume_add_chunk_stripes(struct ub_volume *vol, uint64_t logical, uint64_t length, uint64_t type, int num,
				const uint64_t *devid, const uint64_t *phys)
{
	const struct ub_profile *p = ub_profile_of(type);
	uint8_t *item, *uuids;
	int ret = 0;

	if (!p || num < 1 || num > UB_CHUNK_MAX_STRIPES)
		return -EINVAL;
	item = malloc(ub_chunk_item_bytes(num));
	uuids = malloc((size_t)num * UB_UUID_SIZE);
	if (!item || !uuids) {
		ret = -ENOMEM;
		goto out;
	}
	for (int i = 0; i < num && !ret; i++) {
		const struct ub_vdev *vd = ub_volume_vdev(vol, devid[i]);

		if (!vd)
			ret = -ENOENT;
		else
			memcpy(uuids + (size_t)i * UB_UUID_SIZE, vd->uuid, UB_UUID_SIZE);
	}
	if (!ret) {
		ub_chunk_item_encode(length, type, vol->sectorsize, num, p->sub_stripes, devid, phys, uuids, item);
		ret = ub_volume_add_chunk(vol, logical, item, ub_chunk_item_bytes(num));
	}
out:
	free(item);
	free(uuids);
	return ret;
}
