/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include "volume_internal.h"

uint64_t ub_super_offset(int mirror)
{
	if (mirror == 0)
		return UB_SUPER_INFO_OFFSET;
	/* 64 MiB, 256 GiB: 16 KiB shifted left by 12 per mirror. */
	return (16ULL * 1024) << (UB_SUPER_MIRROR_SHIFT * mirror);
}

static int is_pow2_in(uint64_t v, uint64_t lo, uint64_t hi)
{
	return v >= lo && v <= hi && (v & (v - 1)) == 0;
}

#define SB(field) UB_GET(ub_disk_super, field, sb)
/* btrfs never puts anything in a device's first MiB but the superblock */
#define UB_DEVICE_RESERVED (1024ULL * 1024)

/*
 * The system chunk array is part of the copy: without it nothing else can be
 * read, so a copy whose array breaks the format (a truncated entry, another
 * key type, a chunk item that breaks a chunk's rules, a chunk that is not
 * SYSTEM, two chunks that overlap) fails as a bad checksum would, and the
 * reader falls back to the next copy. The array size was bounded before.
 */
static int sys_array_valid(const uint8_t *sb, uint32_t sectorsize, char *why, size_t whylen)
{
	const uint8_t *arr = UB_PTR(ub_disk_super, sys_chunk_array, sb);
	const uint32_t size = (uint32_t)SB(sys_chunk_array_size), hdr = (uint32_t)offsetof(struct btrfs_chunk, stripe);
	/* every entry holds a key and a chunk item with one stripe at least */
	uint64_t start[UB_SYSTEM_CHUNK_ARRAY_SIZE / (UB_DISK_KEY_SIZE + sizeof(struct btrfs_chunk)) + 1];
	uint64_t end[sizeof(start) / sizeof(start[0])];
	uint32_t pos = 0, n = 0;
	char item_why[160];

	while (pos < size) {
		struct ub_key key;
		const uint8_t *item;
		uint32_t num, isz;

		if (size - pos < UB_DISK_KEY_SIZE + hdr) {
			snprintf(why, whylen, "system chunk array: truncated entry at offset %u of %u", pos, size);
			return -EUCLEAN;
		}
		ub_key_read(&key, arr + pos);
		item = arr + pos + UB_DISK_KEY_SIZE;
		if (key.type != BTRFS_CHUNK_ITEM_KEY) {
			snprintf(why, whylen, "system chunk array: entry at offset %u has key type %u, not CHUNK_ITEM", pos,
				 key.type);
			return -EUCLEAN;
		}
		num = (uint32_t)UB_GET(btrfs_chunk, num_stripes, item);
		isz = hdr + num * (uint32_t)sizeof(struct btrfs_stripe);
		if (!num || isz > size - pos - UB_DISK_KEY_SIZE) {
			snprintf(why, whylen, "system chunk array: chunk at logical %llu with %u stripes overruns the array",
				 (unsigned long long)key.offset, num);
			return -EUCLEAN;
		}
		if (ub_chunk_item_check(key.offset, item, isz, sectorsize, item_why, sizeof(item_why))) {
			snprintf(why, whylen, "system chunk array: chunk at logical %llu: %s", (unsigned long long)key.offset,
				 item_why);
			return -EUCLEAN;
		}
		if (!(UB_GET(btrfs_chunk, type, item) & BTRFS_BLOCK_GROUP_SYSTEM)) {
			snprintf(why, whylen, "system chunk array: chunk at logical %llu has type 0x%llx, not SYSTEM",
				 (unsigned long long)key.offset, (unsigned long long)UB_GET(btrfs_chunk, type, item));
			return -EUCLEAN;
		}
		start[n] = key.offset;
		end[n] = key.offset + UB_GET(btrfs_chunk, length, item);
		for (uint32_t i = 0; i < n; i++)
			if (start[n] < end[i] && start[i] < end[n]) {
				snprintf(why, whylen, "system chunk array: chunk at logical %llu overlaps chunk at %llu",
					 (unsigned long long)start[n], (unsigned long long)start[i]);
				return -EUCLEAN;
			}
		n++;
		pos += UB_DISK_KEY_SIZE + isz;
	}
	return 0;
}

int ub_super_validate(const uint8_t *sb, uint64_t bytenr, char *why, size_t whylen)
{
	uint8_t csum[UB_CSUM_SIZE_MAX];
	unsigned type, csize;
	uint64_t sectorsize, nodesize;

	if (SB(magic) != UB_MAGIC) {
		snprintf(why, whylen, "no btrfs magic");
		return -ENOENT;
	}
	type = (unsigned)SB(csum_type);
	csize = ub_csum_size(type);
	if (!csize) {
		snprintf(why, whylen, "unknown checksum type %u", type);
		return -EUCLEAN;
	}
	if (ub_csum(type, sb + UB_CSUM_SIZE_MAX, UB_SUPER_INFO_SIZE - UB_CSUM_SIZE_MAX, csum) < 0 ||
	    memcmp(csum, sb, csize) != 0) {
		snprintf(why, whylen, "checksum mismatch (%s)", ub_csum_name(type));
		return -EUCLEAN;
	}
	if (SB(bytenr) != bytenr) {
		snprintf(why, whylen, "bytenr %llu does not match its location %llu",
			 (unsigned long long)SB(bytenr), (unsigned long long)bytenr);
		return -EUCLEAN;
	}
	sectorsize = SB(sectorsize);
	nodesize = SB(nodesize);
	if (!is_pow2_in(sectorsize, 4096, 65536)) {
		snprintf(why, whylen, "invalid sectorsize %llu", (unsigned long long)sectorsize);
		return -EUCLEAN;
	}
	if (!is_pow2_in(nodesize, UB_MIN_NODESIZE, UB_MAX_NODESIZE) || nodesize < sectorsize) {
		snprintf(why, whylen, "invalid nodesize %llu", (unsigned long long)nodesize);
		return -EUCLEAN;
	}
	if (SB(sys_chunk_array_size) > UB_SYSTEM_CHUNK_ARRAY_SIZE) {
		snprintf(why, whylen, "system chunk array size %llu exceeds %u",
			 (unsigned long long)SB(sys_chunk_array_size), UB_SYSTEM_CHUNK_ARRAY_SIZE);
		return -EUCLEAN;
	}
	if (SB(root_level) >= UB_MAX_LEVEL || SB(chunk_root_level) >= UB_MAX_LEVEL ||
	    SB(log_root_level) >= UB_MAX_LEVEL) {
		snprintf(why, whylen, "invalid tree level (root %llu chunk %llu log %llu)",
			 (unsigned long long)SB(root_level), (unsigned long long)SB(chunk_root_level),
			 (unsigned long long)SB(log_root_level));
		return -EUCLEAN;
	}
	if (!SB(root) || SB(root) % sectorsize || !SB(chunk_root) || SB(chunk_root) % sectorsize ||
	    SB(log_root) % sectorsize) {
		snprintf(why, whylen, "tree root address not aligned to sectorsize (root %llu chunk %llu log %llu)",
			 (unsigned long long)SB(root), (unsigned long long)SB(chunk_root),
			 (unsigned long long)SB(log_root));
		return -EUCLEAN;
	}
	if (SB(num_devices) == 0) {
		snprintf(why, whylen, "num_devices is 0");
		return -EUCLEAN;
	}
	/* every device keeps its first MiB to itself, so total_bytes bounds how many there can be */
	if (SB(total_bytes) / UB_DEVICE_RESERVED < SB(num_devices)) {
		snprintf(why, whylen, "num_devices %llu is more than total_bytes %llu can hold (at least 1 MiB each)",
			 (unsigned long long)SB(num_devices), (unsigned long long)SB(total_bytes));
		return -EUCLEAN;
	}
	if (UB_GET(btrfs_dev_item, total_bytes, UB_PTR(ub_disk_super, dev_item, sb)) > SB(total_bytes)) {
		snprintf(why, whylen, "this device's item claims %llu bytes, more than the filesystem's total_bytes %llu",
			 (unsigned long long)UB_GET(btrfs_dev_item, total_bytes, UB_PTR(ub_disk_super, dev_item, sb)),
			 (unsigned long long)SB(total_bytes));
		return -EUCLEAN;
	}
	/* a chunk item is at least a key, a chunk header and one stripe */
	if (SB(sys_chunk_array_size) < UB_DISK_KEY_SIZE + sizeof(struct btrfs_chunk)) {
		snprintf(why, whylen, "system chunk array size %llu cannot hold a single chunk",
			 (unsigned long long)SB(sys_chunk_array_size));
		return -EUCLEAN;
	}
	if (SB(generation) == 0) {
		snprintf(why, whylen, "generation is 0");
		return -EUCLEAN;
	}
	return sys_array_valid(sb, (uint32_t)sectorsize, why, whylen);
}
