/* SPDX-License-Identifier: MIT */
/* Inline and keyed back references as bytes (see backref.h for the layout rules). */
#include <errno.h>
#include "backref.h"

#define IREF_HDR ((uint32_t)sizeof(struct btrfs_extent_inline_ref))
/* An inline EXTENT_DATA_REF replaces the header's offset field with the data ref. */
#define IREF_TYPE_SIZE ((uint32_t)offsetof(struct btrfs_extent_inline_ref, offset))

uint32_t ub_ref_inline_size(uint8_t type)
{
	switch (type) {
	case BTRFS_TREE_BLOCK_REF_KEY:
	case BTRFS_SHARED_BLOCK_REF_KEY:
		return IREF_HDR;
	case BTRFS_SHARED_DATA_REF_KEY:
		return IREF_HDR + (uint32_t)sizeof(struct btrfs_shared_data_ref);
	case BTRFS_EXTENT_DATA_REF_KEY:
		return IREF_TYPE_SIZE + (uint32_t)sizeof(struct btrfs_extent_data_ref);
	default:
		return 0;
	}
}

uint32_t ub_ref_keyed_size(uint8_t type)
{
	switch (type) {
	case BTRFS_SHARED_DATA_REF_KEY:
		return (uint32_t)sizeof(struct btrfs_shared_data_ref);
	case BTRFS_EXTENT_DATA_REF_KEY:
		return (uint32_t)sizeof(struct btrfs_extent_data_ref);
	default:
		return 0;
	}
}

uint64_t ub_ref_seq(const struct ub_ref *r)
{
	switch (r->type) {
	case BTRFS_TREE_BLOCK_REF_KEY:
		return r->root;
	case BTRFS_EXTENT_DATA_REF_KEY:
		return ub_extent_data_ref_hash(r->root, r->owner, r->offset);
	default:
		return r->parent;
	}
}

bool ub_ref_same(const struct ub_ref *a, const struct ub_ref *b)
{
	if (a->type != b->type)
		return false;
	switch (a->type) {
	case BTRFS_TREE_BLOCK_REF_KEY:
		return a->root == b->root;
	case BTRFS_EXTENT_DATA_REF_KEY:
		return a->root == b->root && a->owner == b->owner && a->offset == b->offset;
	default:
		return a->parent == b->parent;
	}
}

void ub_ref_key(const struct ub_ref *r, uint64_t bytenr, struct ub_key *key)
{
	key->objectid = bytenr;
	key->type = r->type;
	key->offset = ub_ref_seq(r);
}

/* The reference an inline ref at `p` (already bounds-checked) describes, and its count. */
static void inline_ref_read(const uint8_t *p, struct ub_ref *r, uint32_t *count)
{
	const uint8_t *dr = p + IREF_TYPE_SIZE;

	*r = (struct ub_ref){ .type = (uint8_t)UB_GET(btrfs_extent_inline_ref, type, p) };
	*count = 1;
	switch (r->type) {
	case BTRFS_TREE_BLOCK_REF_KEY:
		r->root = UB_GET(btrfs_extent_inline_ref, offset, p);
		break;
	case BTRFS_SHARED_BLOCK_REF_KEY:
		r->parent = UB_GET(btrfs_extent_inline_ref, offset, p);
		break;
	case BTRFS_SHARED_DATA_REF_KEY:
		r->parent = UB_GET(btrfs_extent_inline_ref, offset, p);
		*count = (uint32_t)UB_GET(btrfs_shared_data_ref, count, p + IREF_HDR);
		break;
	case BTRFS_EXTENT_DATA_REF_KEY:
		r->root = UB_GET(btrfs_extent_data_ref, root, dr);
		r->owner = UB_GET(btrfs_extent_data_ref, objectid, dr);
		r->offset = UB_GET(btrfs_extent_data_ref, offset, dr);
		*count = (uint32_t)UB_GET(btrfs_extent_data_ref, count, dr);
		break;
	}
}

int ub_inline_ref_find(const uint8_t *item, uint32_t size, uint32_t first, const struct ub_ref *r, uint32_t *pos,
		       uint32_t *count)
{
	uint64_t want_seq = ub_ref_seq(r);
	uint32_t cur = first;
	bool placed = false;

	if (size < first || first < UB_EXTENT_ITEM_SIZE)
		return -EUCLEAN;
	*count = 0;
	while (cur < size) {
		struct ub_ref have;
		uint32_t n, rsize;
		uint8_t type = item[cur];

		rsize = ub_ref_inline_size(type);
		if (!rsize || size - cur < rsize)
			return -EUCLEAN;
		inline_ref_read(item + cur, &have, &n);
		if (type == r->type && ub_ref_same(&have, r)) {
			*pos = cur;
			*count = n;
			return 0;
		}
		/* the first ref that sorts after ours: a later type, or a smaller sequence in our type */
		if (!placed && (type > r->type || (type == r->type && ub_ref_seq(&have) < want_seq))) {
			*pos = cur;
			placed = true;
		}
		cur += rsize;
	}
	if (!placed)
		*pos = size;
	return 1;
}

int ub_inline_ref_next(const uint8_t *item, uint32_t size, uint32_t *pos, struct ub_ref *r, uint32_t *count)
{
	uint32_t rsize;

	if (*pos >= size)
		return 1;
	rsize = ub_ref_inline_size(item[*pos]);
	if (!rsize || size - *pos < rsize)
		return -EUCLEAN;
	inline_ref_read(item + *pos, r, count);
	*pos += rsize;
	return 0;
}

int ub_keyed_ref_read(const struct ub_key *key, const uint8_t *data, uint32_t size, struct ub_ref *r,
		      uint32_t *count)
{
	*r = (struct ub_ref){ .type = key->type };
	*count = 1;
	switch (key->type) {
	case BTRFS_TREE_BLOCK_REF_KEY:
		r->root = key->offset;
		return 0;
	case BTRFS_SHARED_BLOCK_REF_KEY:
		r->parent = key->offset;
		return 0;
	case BTRFS_SHARED_DATA_REF_KEY:
		if (size < sizeof(struct btrfs_shared_data_ref))
			return -EUCLEAN;
		r->parent = key->offset;
		*count = (uint32_t)UB_GET(btrfs_shared_data_ref, count, data);
		return 0;
	case BTRFS_EXTENT_DATA_REF_KEY:
		if (size < sizeof(struct btrfs_extent_data_ref))
			return -EUCLEAN;
		r->root = UB_GET(btrfs_extent_data_ref, root, data);
		r->owner = UB_GET(btrfs_extent_data_ref, objectid, data);
		r->offset = UB_GET(btrfs_extent_data_ref, offset, data);
		*count = (uint32_t)UB_GET(btrfs_extent_data_ref, count, data);
		return 0;
	default:
		return -EUCLEAN;
	}
}

void ub_inline_ref_write(uint8_t *dst, const struct ub_ref *r, uint32_t count)
{
	UB_SET(btrfs_extent_inline_ref, type, dst, r->type);
	switch (r->type) {
	case BTRFS_TREE_BLOCK_REF_KEY:
		UB_SET(btrfs_extent_inline_ref, offset, dst, r->root);
		break;
	case BTRFS_SHARED_BLOCK_REF_KEY:
		UB_SET(btrfs_extent_inline_ref, offset, dst, r->parent);
		break;
	case BTRFS_SHARED_DATA_REF_KEY:
		UB_SET(btrfs_extent_inline_ref, offset, dst, r->parent);
		UB_SET(btrfs_shared_data_ref, count, dst + IREF_HDR, count);
		break;
	case BTRFS_EXTENT_DATA_REF_KEY:
		ub_keyed_ref_write(dst + IREF_TYPE_SIZE, r, count);
		break;
	}
}

void ub_inline_ref_set_count(uint8_t *p, uint8_t type, uint32_t count)
{
	if (type == BTRFS_SHARED_DATA_REF_KEY)
		UB_SET(btrfs_shared_data_ref, count, p + IREF_HDR, count);
	else if (type == BTRFS_EXTENT_DATA_REF_KEY)
		UB_SET(btrfs_extent_data_ref, count, p + IREF_TYPE_SIZE, count);
}

uint32_t ub_keyed_ref_count(const struct ub_key *key, const uint8_t *data, uint32_t size)
{
	if (key->type == BTRFS_SHARED_DATA_REF_KEY)
		return size >= sizeof(struct btrfs_shared_data_ref) ? (uint32_t)UB_GET(btrfs_shared_data_ref, count, data)
								     : 0;
	if (key->type == BTRFS_EXTENT_DATA_REF_KEY)
		return size >= sizeof(struct btrfs_extent_data_ref) ? (uint32_t)UB_GET(btrfs_extent_data_ref, count, data)
								     : 0;
	return 1;
}

bool ub_keyed_data_ref_match(const uint8_t *data, uint32_t size, const struct ub_ref *r)
{
	return size >= sizeof(struct btrfs_extent_data_ref) && UB_GET(btrfs_extent_data_ref, root, data) == r->root &&
	       UB_GET(btrfs_extent_data_ref, objectid, data) == r->owner &&
	       UB_GET(btrfs_extent_data_ref, offset, data) == r->offset;
}

void ub_keyed_ref_write(uint8_t *dst, const struct ub_ref *r, uint32_t count)
{
	if (r->type == BTRFS_SHARED_DATA_REF_KEY) {
		UB_SET(btrfs_shared_data_ref, count, dst, count);
	} else if (r->type == BTRFS_EXTENT_DATA_REF_KEY) {
		UB_SET(btrfs_extent_data_ref, root, dst, r->root);
		UB_SET(btrfs_extent_data_ref, objectid, dst, r->owner);
		UB_SET(btrfs_extent_data_ref, offset, dst, r->offset);
		UB_SET(btrfs_extent_data_ref, count, dst, count);
	}
}
