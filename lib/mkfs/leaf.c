/* SPDX-License-Identifier: MIT */
/* A leaf from sorted items: headers grow from the front, data from the back, as btrfs lays them out. */
#include <errno.h>
#include <string.h>

#include "mkfs/mkfs_internal.h"

void ub_leaf_init(struct ub_leaf_builder *lb, uint8_t *buf, uint32_t nodesize, const struct ub_leaf_header *h)
{
	memset(buf, 0, nodesize);
	lb->buf = buf;
	lb->nodesize = nodesize;
	lb->nritems = 0;
	lb->data_end = nodesize - UB_HEADER_SIZE;
	memset(&lb->last, 0, sizeof(lb->last));
	memcpy(buf + offsetof(struct ub_disk_header, fsid), h->fsid, UB_FSID_SIZE);
	memcpy(buf + offsetof(struct ub_disk_header, chunk_tree_uuid), h->chunk_tree_uuid, UB_UUID_SIZE);
	UB_SET(ub_disk_header, bytenr, buf, h->bytenr);
	/* WRITTEN, and the backref revision every kernel since 2.6.31 writes */
	UB_SET(ub_disk_header, flags, buf, BTRFS_HEADER_FLAG_WRITTEN | (1ULL << 56));
	UB_SET(ub_disk_header, generation, buf, h->generation);
	UB_SET(ub_disk_header, owner, buf, h->owner);
	UB_SET(ub_disk_header, level, buf, 0);
}

int ub_leaf_add(struct ub_leaf_builder *lb, const struct ub_key *key, uint32_t size, uint8_t **data)
{
	uint32_t used = lb->nritems * UB_ITEM_SIZE;
	uint8_t *item;

	if (lb->nritems && ub_key_cmp(&lb->last, key) >= 0)
		return -EINVAL;
	if (size > lb->data_end || lb->data_end - size < used + UB_ITEM_SIZE)
		return -E2BIG;
	lb->data_end -= size;
	item = lb->buf + UB_HEADER_SIZE + used;
	ub_key_write(item + offsetof(struct ub_disk_item, key), key);
	UB_SET(ub_disk_item, offset, item, lb->data_end);
	UB_SET(ub_disk_item, size, item, size);
	lb->nritems++;
	lb->last = *key;
	*data = lb->buf + UB_HEADER_SIZE + lb->data_end;
	memset(*data, 0, size);
	return 0;
}

int ub_leaf_finish(struct ub_leaf_builder *lb, unsigned csum_type)
{
	uint8_t csum[UB_CSUM_SIZE_MAX];
	int ret;

	UB_SET(ub_disk_header, nritems, lb->buf, lb->nritems);
	ret = ub_csum(csum_type, lb->buf + UB_CSUM_SIZE_MAX, lb->nodesize - UB_CSUM_SIZE_MAX, csum);
	if (ret)
		return ret;
	memcpy(lb->buf, csum, UB_CSUM_SIZE_MAX);
	return 0;
}
