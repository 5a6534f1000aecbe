/* SPDX-License-Identifier: MIT */
/*
 * Checksums and hashes of the btrfs format: the four metadata/data checksum
 * types selected by the superblock's csum_type, and the two crc32c-based key
 * hashes (directory names, extent data back references).
 */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include <blake2.h>
#include <isa-l.h>
#include <openssl/evp.h>
#include <xxhash.h>

#include "ubtrfs/format.h"

/*
 * Advance a raw CRC-32C register over `len` bytes. No inversion at either end:
 * this is the primitive the kernel's crc32c(seed, p, len) exposes, which the
 * key hashes use directly. ISA-L takes an int length, so long buffers go in
 * slices.
 */
static uint32_t crc32c_raw(uint32_t crc, const void *data, size_t len)
{
	const unsigned char *p = data;
	const size_t slice = 1U << 30;

	while (len > 0) {
		size_t n = len < slice ? len : slice;

		/* ISA-L's prototype lacks const; it does not write the buffer. */
		crc = crc32_iscsi((unsigned char *)(uintptr_t)p, (int)n, crc);
		p += n;
		len -= n;
	}
	return crc;
}

static const struct {
	const char *name;
	unsigned size;
} csum_types[] = {
	[BTRFS_CSUM_TYPE_CRC32] = { "crc32c", 4 },
	[BTRFS_CSUM_TYPE_XXHASH] = { "xxhash64", 8 },
	[BTRFS_CSUM_TYPE_SHA256] = { "sha256", 32 },
	[BTRFS_CSUM_TYPE_BLAKE2] = { "blake2b", 32 },
};

#define NUM_CSUM_TYPES (sizeof(csum_types) / sizeof(csum_types[0]))

/*
 * libcrypto (SHA-256 only) through dlopen, on the first SHA-256 checksum.
 * Linked outright, its relocations cost every command's start about a
 * hundred page faults and a third of its time (4 of 8-12 ms on the 2-core VM
 * of bench/read.d/15-ls-inline), for a checksum type few filesystems use.
 */
static struct {
	pthread_once_t once;
	__typeof__(EVP_Digest) *digest;
	__typeof__(EVP_sha256) *sha256;
} crypto = { PTHREAD_ONCE_INIT, NULL, NULL };

static void crypto_load(void)
{
	void *h = dlopen("libcrypto.so.3", RTLD_NOW | RTLD_LOCAL);
	void *d, *s;

	if (!h)
		return;
	d = dlsym(h, "EVP_Digest");
	s = dlsym(h, "EVP_sha256");
	if (!d || !s)
		return; /* stays loaded: dlclose of a half-used library buys nothing */
	crypto.digest = (__typeof__(EVP_Digest) *)d;
	crypto.sha256 = (__typeof__(EVP_sha256) *)s;
}

static int sha256(const void *data, size_t len, uint8_t *digest)
{
	unsigned int mdlen = 0;

	pthread_once(&crypto.once, crypto_load);
	if (!crypto.digest)
		return -ENOSYS;
	if (crypto.digest(data, len, digest, &mdlen, crypto.sha256(), NULL) != 1 || mdlen != 32)
		return -EIO;
	return 0;
}

unsigned ub_csum_size(unsigned type)
{
	return type < NUM_CSUM_TYPES ? csum_types[type].size : 0;
}

const char *ub_csum_name(unsigned type)
{
	return type < NUM_CSUM_TYPES ? csum_types[type].name : NULL;
}

int ub_csum(unsigned type, const void *data, size_t len, uint8_t out[UB_CSUM_SIZE_MAX])
{
	uint8_t digest[UB_CSUM_SIZE_MAX] = { 0 };
	int ret = 0;

	if (!out || (!data && len > 0))
		return -EINVAL;

	switch (type) {
	case BTRFS_CSUM_TYPE_CRC32:
		/* btrfs stores the finished CRC-32C (register inverted on both ends). */
		ub_put_le(digest, 4, ~crc32c_raw(~(uint32_t)0, data, len));
		break;
	case BTRFS_CSUM_TYPE_XXHASH:
		ub_put_le(digest, 8, XXH64(data, len, 0));
		break;
	case BTRFS_CSUM_TYPE_SHA256:
		ret = sha256(data, len, digest);
		break;
	case BTRFS_CSUM_TYPE_BLAKE2:
		/* Unkeyed BLAKE2b truncated by parameter (not by cutting) to 256 bits. */
		if (blake2b(digest, data, NULL, 32, len, 0) != 0)
			ret = -EIO;
		break;
	default:
		ret = -EINVAL;
		break;
	}
	if (ret == 0)
		memcpy(out, digest, UB_CSUM_SIZE_MAX);
	return ret;
}

uint64_t ub_name_hash(const char *name, size_t len)
{
	if (!name)
		len = 0;
	/* The kernel seeds with ~1 and keeps the raw register: no final inversion. */
	return crc32c_raw(~(uint32_t)1, name, len);
}

uint64_t ub_extent_data_ref_hash(uint64_t root, uint64_t owner, uint64_t offset)
{
	uint8_t le[8];
	uint32_t high = ~(uint32_t)0;
	uint32_t low = ~(uint32_t)0;

	/* The fields are hashed in their on-disk (little-endian) form. */
	ub_put_le(le, 8, root);
	high = crc32c_raw(high, le, sizeof(le));
	ub_put_le(le, 8, owner);
	low = crc32c_raw(low, le, sizeof(le));
	ub_put_le(le, 8, offset);
	low = crc32c_raw(low, le, sizeof(le));
	/* Shift by 31, not 32: the kernel's choice, and the top bit overlaps. */
	return ((uint64_t)high << 31) ^ (uint64_t)low;
}
