/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the tree-checker.
 *
 * Input: byte 0 picks the mode and sizes, byte 1 the feature bits, the rest is
 * the block (or, in item mode, a key and one item's data).
 *
 *   byte 0 bits 0-1: nodesize 4K / 16K / 64K (3 wraps to 4K)
 *          bits 2-3: checksum size 4 / 8 / 32 (3 wraps to 4)
 *          bit  6:   put the second half of the input at the end of the block,
 *                    where leaf item data lives, instead of after the first
 *          bit  7:   item mode: bytes 2..18 are a disk key, the rest is the
 *                    item, checked alone from a buffer of exactly its size
 *   byte 1: incompat bits (skinny metadata, mixed groups, extent tree v2,
 *           raid stripe tree)
 *
 * A block the checker accepts is then walked the way readers will walk it:
 * every byte of every item is read (from the block, and again from an
 * exact-size copy checked with ub_tree_check_item), so that ASan reports any
 * rule that lets an out-of-bounds item through.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tree/tree_check.h"

static uint64_t features(uint8_t b)
{
	uint64_t f = 0;

	if (b & 1)
		f |= BTRFS_FEATURE_INCOMPAT_SKINNY_METADATA;
	if (b & 2)
		f |= BTRFS_FEATURE_INCOMPAT_MIXED_GROUPS;
	if (b & 4)
		f |= BTRFS_FEATURE_INCOMPAT_EXTENT_TREE_V2;
	if (b & 8)
		f |= BTRFS_FEATURE_INCOMPAT_RAID_STRIPE_TREE;
	return f;
}

/* Read every byte, so an out-of-bounds range shows up under ASan; the sum keeps the reads alive. */
static uint64_t touch(const uint8_t *p, size_t n)
{
	volatile uint64_t sum = 0;

	for (size_t i = 0; i < n; i++)
		sum += p[i];
	return sum;
}

static void check_alone(const struct ub_key *key, const uint8_t *data, uint32_t size,
			const struct ub_check_ctx *ctx, int expect_ok)
{
	/* An exact-size heap copy: any read past the item is a heap overflow. */
	uint8_t *copy = malloc(size ? size : 1);
	char why[256];
	int ret;

	if (!copy)
		return;
	if (size)
		memcpy(copy, data, size);
	ret = ub_tree_check_item(key, copy, size, ctx, why, sizeof(why));
	if (expect_ok && ret)
		abort(); /* the block passed, so each of its items must pass alone */
	if (ret && strnlen(why, sizeof(why)) == sizeof(why))
		abort();
	if (!ret)
		touch(copy, size);
	free(copy);
}

static void walk_block(const uint8_t *buf, const struct ub_check_ctx *ctx)
{
	uint32_t nritems = (uint32_t)UB_GET(ub_disk_header, nritems, buf);
	uint8_t level = (uint8_t)UB_GET(ub_disk_header, level, buf);

	for (uint32_t i = 0; i < nritems; i++) {
		struct ub_key key;

		if (level) {
			const uint8_t *p = buf + UB_HEADER_SIZE + (size_t)i * UB_KEY_PTR_SIZE;
			ub_key_read(&key, p);
			touch(p, UB_KEY_PTR_SIZE);
		} else {
			const uint8_t *it = buf + UB_HEADER_SIZE + (size_t)i * UB_ITEM_SIZE;
			uint32_t off = (uint32_t)UB_GET(ub_disk_item, offset, it);
			uint32_t size = (uint32_t)UB_GET(ub_disk_item, size, it);
			const uint8_t *data = buf + UB_HEADER_SIZE + off;

			ub_key_read(&key, it);
			/* Readers trust these bounds once the block has passed. */
			if ((uint64_t)UB_HEADER_SIZE + off + size > ctx->nodesize)
				abort();
			touch(data, size);
			check_alone(&key, data, size, ctx, 1);
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const uint32_t nodesizes[] = { 4096, 16384, 65536, 4096 };
	static const unsigned csum_sizes[] = { 4, 8, 32, 4 };
	struct ub_check_ctx ctx;
	uint8_t mode, *buf;
	char why[256];

	if (size < 2)
		return 0;
	mode = data[0];
	memset(&ctx, 0, sizeof(ctx));
	ctx.nodesize = nodesizes[mode & 3];
	ctx.sectorsize = 4096;
	ctx.csum_size = csum_sizes[(mode >> 2) & 3];
	ctx.incompat_flags = features(data[1]);
	data += 2;
	size -= 2;

	if (mode & 0x80) {
		struct ub_key key;

		if (size < UB_DISK_KEY_SIZE || size - UB_DISK_KEY_SIZE > ctx.nodesize)
			return 0;
		ub_key_read(&key, data);
		ctx.owner = BTRFS_FS_TREE_OBJECTID;
		check_alone(&key, data + UB_DISK_KEY_SIZE, (uint32_t)(size - UB_DISK_KEY_SIZE), &ctx, 0);
		return 0;
	}

	/* Exactly nodesize bytes on the heap: the checker must never look past the block. */
	buf = calloc(1, ctx.nodesize);
	if (!buf)
		return 0;
	if (size > ctx.nodesize)
		size = ctx.nodesize;
	if (mode & 0x40) {
		size_t head = size / 2;
		memcpy(buf, data, head);
		memcpy(buf + ctx.nodesize - (size - head), data + head, size - head);
	} else {
		memcpy(buf, data, size);
	}
	ctx.owner = UB_GET(ub_disk_header, owner, buf);
	if (ub_tree_check_block(buf, &ctx, why, sizeof(why)) == 0)
		walk_block(buf, &ctx);
	else if (strnlen(why, sizeof(why)) == 0 || strnlen(why, sizeof(why)) == sizeof(why))
		abort(); /* every refusal says why, in a terminated string */
	free(buf);
	return 0;
}
