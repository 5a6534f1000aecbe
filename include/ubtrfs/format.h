/* SPDX-License-Identifier: MIT */
/*
 * The btrfs on-disk format: constants and struct layouts.
 *
 * Struct layouts come from the kernel UAPI header where it has them; the few it
 * does not export (superblock, tree block header, items, key pointers, backup
 * roots) are declared here. Structs are used ONLY for offsetof/sizeof: fields are
 * read through UB_GET(), which decodes little-endian bytes and never casts a struct
 * onto a buffer.
 */
#ifndef UBTRFS_FORMAT_H
#define UBTRFS_FORMAT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <linux/btrfs.h>
#include <linux/btrfs_tree.h>
#include "ubtrfs/api.h"

UB_API_BEGIN

#define UB_MAGIC 0x4D5F53665248425FULL /* "_BHRfS_M" */
#define UB_SUPER_INFO_OFFSET 65536ULL
#define UB_SUPER_INFO_SIZE 4096U
#define UB_SUPER_MIRROR_MAX 3
#define UB_SUPER_MIRROR_SHIFT 12
#define UB_CSUM_SIZE_MAX 32
#define UB_FSID_SIZE 16
#define UB_UUID_SIZE 16
#define UB_LABEL_SIZE 256
#define UB_SYSTEM_CHUNK_ARRAY_SIZE 2048
#define UB_NUM_BACKUP_ROOTS 4
#define UB_MAX_LEVEL 8
#define UB_NAME_LEN 255
#define UB_STRIPE_LEN 65536ULL
#define UB_MIN_NODESIZE 4096U
#define UB_MAX_NODESIZE 65536U
#define UB_MAX_INLINE_DATA_SIZE(nodesize) ((nodesize) - 101U - 25U - 21U)

/* Newer than the installed UAPI header. */
#ifndef BTRFS_RAID_STRIPE_TREE_OBJECTID
#define BTRFS_RAID_STRIPE_TREE_OBJECTID 12ULL
#endif
#ifndef BTRFS_RAID_STRIPE_KEY
#define BTRFS_RAID_STRIPE_KEY 230
#endif
#ifndef BTRFS_FEATURE_INCOMPAT_RAID_STRIPE_TREE
#define BTRFS_FEATURE_INCOMPAT_RAID_STRIPE_TREE (1ULL << 14)
#endif
#ifndef BTRFS_FEATURE_INCOMPAT_SIMPLE_QUOTA
#define BTRFS_FEATURE_INCOMPAT_SIMPLE_QUOTA (1ULL << 16)
#endif
#ifndef BTRFS_EXTENT_OWNER_REF_KEY
#define BTRFS_EXTENT_OWNER_REF_KEY 172
#endif
#ifndef BTRFS_FEATURE_COMPAT_RO_VERITY
#define BTRFS_FEATURE_COMPAT_RO_VERITY (1ULL << 2)
#endif

/* Inode item flags (not in the UAPI header). */
#define UB_INODE_NODATASUM (1ULL << 0)
#define UB_INODE_NODATACOW (1ULL << 1)
#define UB_INODE_READONLY (1ULL << 2)
#define UB_INODE_NOCOMPRESS (1ULL << 3)
#define UB_INODE_PREALLOC (1ULL << 4)
#define UB_INODE_SYNC (1ULL << 5)
#define UB_INODE_IMMUTABLE (1ULL << 6)
#define UB_INODE_APPEND (1ULL << 7)
#define UB_INODE_NODUMP (1ULL << 8)
#define UB_INODE_NOATIME (1ULL << 9)
#define UB_INODE_DIRSYNC (1ULL << 10)
#define UB_INODE_COMPRESS (1ULL << 11)
#define UB_INODE_ROOT_ITEM_INIT (1ULL << 31)

/* Compression types in file extent items. */
enum { UB_COMPRESS_NONE = 0, UB_COMPRESS_ZLIB = 1, UB_COMPRESS_LZO = 2, UB_COMPRESS_ZSTD = 3 };

/* Layout-only declarations of what the UAPI header does not export. */
struct ub_disk_root_backup {
	__le64 tree_root, tree_root_gen;
	__le64 chunk_root, chunk_root_gen;
	__le64 extent_root, extent_root_gen;
	__le64 fs_root, fs_root_gen;
	__le64 dev_root, dev_root_gen;
	__le64 csum_root, csum_root_gen;
	__le64 total_bytes, bytes_used, num_devices;
	__le64 unused_64[4];
	__u8 tree_root_level, chunk_root_level, extent_root_level;
	__u8 fs_root_level, dev_root_level, csum_root_level;
	__u8 unused_8[10];
} __attribute__((__packed__));

struct ub_disk_super {
	__u8 csum[UB_CSUM_SIZE_MAX];
	__u8 fsid[UB_FSID_SIZE];
	__le64 bytenr, flags, magic, generation, root, chunk_root, log_root;
	__le64 unused_log_root_transid;
	__le64 total_bytes, bytes_used, root_dir_objectid, num_devices;
	__le32 sectorsize, nodesize, unused_leafsize, stripesize, sys_chunk_array_size;
	__le64 chunk_root_generation, compat_flags, compat_ro_flags, incompat_flags;
	__le16 csum_type;
	__u8 root_level, chunk_root_level, log_root_level;
	struct btrfs_dev_item dev_item;
	char label[UB_LABEL_SIZE];
	__le64 cache_generation, uuid_tree_generation;
	__u8 metadata_uuid[UB_FSID_SIZE];
	__le64 nr_global_roots;
	__le64 reserved[27];
	__u8 sys_chunk_array[UB_SYSTEM_CHUNK_ARRAY_SIZE];
	struct ub_disk_root_backup super_roots[UB_NUM_BACKUP_ROOTS];
	__u8 padding[565];
} __attribute__((__packed__));

struct ub_disk_header {
	__u8 csum[UB_CSUM_SIZE_MAX];
	__u8 fsid[UB_FSID_SIZE];
	__le64 bytenr, flags;
	__u8 chunk_tree_uuid[UB_UUID_SIZE];
	__le64 generation, owner;
	__le32 nritems;
	__u8 level;
} __attribute__((__packed__));

struct ub_disk_item {
	struct btrfs_disk_key key;
	__le32 offset, size;
} __attribute__((__packed__));

struct ub_disk_key_ptr {
	struct btrfs_disk_key key;
	__le64 blockptr, generation;
} __attribute__((__packed__));

/* RAID stripe tree item: an array of these. */
struct ub_disk_raid_stride {
	__le64 devid, physical;
} __attribute__((__packed__));

UB_STATIC_ASSERT(sizeof(struct ub_disk_super) == 4096, "superblock is 4096 bytes");
UB_STATIC_ASSERT(sizeof(struct ub_disk_root_backup) == 168, "backup root is 168 bytes");
UB_STATIC_ASSERT(sizeof(struct ub_disk_header) == 101, "tree block header is 101 bytes");
UB_STATIC_ASSERT(sizeof(struct ub_disk_item) == 25, "leaf item is 25 bytes");
UB_STATIC_ASSERT(sizeof(struct ub_disk_key_ptr) == 33, "key pointer is 33 bytes");
UB_STATIC_ASSERT(sizeof(struct btrfs_dev_item) == 98, "dev item is 98 bytes");
UB_STATIC_ASSERT(sizeof(struct btrfs_chunk) == 80, "chunk item (one stripe) is 80 bytes");
UB_STATIC_ASSERT(sizeof(struct btrfs_inode_item) == 160, "inode item is 160 bytes");
UB_STATIC_ASSERT(sizeof(struct btrfs_root_item) == 439, "root item is 439 bytes");
UB_STATIC_ASSERT(sizeof(struct btrfs_file_extent_item) == 53, "file extent item is 53 bytes");

#define UB_HEADER_SIZE ((uint32_t)sizeof(struct ub_disk_header))
#define UB_ITEM_SIZE ((uint32_t)sizeof(struct ub_disk_item))
#define UB_KEY_PTR_SIZE ((uint32_t)sizeof(struct ub_disk_key_ptr))
#define UB_DISK_KEY_SIZE ((uint32_t)sizeof(struct btrfs_disk_key))
/* Offset of the inline data inside a file extent item. */
#define UB_FILE_EXTENT_INLINE_DATA_START ((uint32_t)offsetof(struct btrfs_file_extent_item, disk_bytenr))

/* ---- little-endian access ------------------------------------------------ */

/*
 * The loads and stores below are the hottest code of every tree walk: for the
 * sizes fields have (n is a constant at every call) they are one unaligned
 * load or store and a byte swap where the host is big-endian, not a loop.
 * The byte order comes from the compiler rather than <endian.h>, whose
 * le64toh a strict -std=c11 or C++ caller of this header does not get.
 */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define UB_LE16_CPU(x) __builtin_bswap16(x)
#define UB_LE32_CPU(x) __builtin_bswap32(x)
#define UB_LE64_CPU(x) __builtin_bswap64(x)
#else
#define UB_LE16_CPU(x) (x)
#define UB_LE32_CPU(x) (x)
#define UB_LE64_CPU(x) (x)
#endif
static inline uint64_t ub_get_le(const void *p, size_t n)
{
	const uint8_t *b = (const uint8_t *)p;
	uint64_t v = 0;

	switch (n) {
	case 1:
		return b[0];
	case 2: {
		uint16_t x;
		memcpy(&x, b, 2);
		return UB_LE16_CPU(x);
	}
	case 4: {
		uint32_t x;
		memcpy(&x, b, 4);
		return UB_LE32_CPU(x);
	}
	case 8: {
		uint64_t x;
		memcpy(&x, b, 8);
		return UB_LE64_CPU(x);
	}
	default:
		for (size_t i = n; i-- > 0;)
			v = (v << 8) | b[i];
		return v;
	}
}

static inline void ub_put_le(void *p, size_t n, uint64_t v)
{
	uint8_t *b = (uint8_t *)p;

	switch (n) {
	case 1:
		b[0] = (uint8_t)v;
		return;
	case 2: {
		uint16_t x = UB_LE16_CPU((uint16_t)v);
		memcpy(b, &x, 2);
		return;
	}
	case 4: {
		uint32_t x = UB_LE32_CPU((uint32_t)v);
		memcpy(b, &x, 4);
		return;
	}
	case 8: {
		uint64_t x = UB_LE64_CPU(v);
		memcpy(b, &x, 8);
		return;
	}
	default:
		for (size_t i = 0; i < n; i++, v >>= 8)
			b[i] = (uint8_t)v;
	}
}

static inline uint16_t ub_le16(const void *p) { return (uint16_t)ub_get_le(p, 2); }
static inline uint32_t ub_le32(const void *p) { return (uint32_t)ub_get_le(p, 4); }
static inline uint64_t ub_le64(const void *p) { return ub_get_le(p, 8); }

#define UB_FSIZE(stype, field) sizeof(((struct stype *)0)->field)
/*
 * Read a scalar field of on-disk struct `stype` from a byte buffer `p` that the
 * caller has already checked to hold at least sizeof(struct stype) bytes.
 */
#define UB_GET(stype, field, p) \
	ub_get_le((const uint8_t *)(p) + offsetof(struct stype, field), UB_FSIZE(stype, field))
#define UB_SET(stype, field, p, v) \
	ub_put_le((uint8_t *)(p) + offsetof(struct stype, field), UB_FSIZE(stype, field), (v))
/* Pointer to an array/byte field (uuids, csums, names). */
#define UB_PTR(stype, field, p) ((const uint8_t *)(p) + offsetof(struct stype, field))

/* ---- keys ----------------------------------------------------------------- */

struct ub_key {
	uint64_t objectid;
	uint8_t type;
	uint64_t offset;
};

static inline void ub_key_read(struct ub_key *k, const void *disk_key)
{
	k->objectid = UB_GET(btrfs_disk_key, objectid, disk_key);
	k->type = (uint8_t)UB_GET(btrfs_disk_key, type, disk_key);
	k->offset = UB_GET(btrfs_disk_key, offset, disk_key);
}

static inline void ub_key_write(void *disk_key, const struct ub_key *k)
{
	UB_SET(btrfs_disk_key, objectid, disk_key, k->objectid);
	UB_SET(btrfs_disk_key, type, disk_key, k->type);
	UB_SET(btrfs_disk_key, offset, disk_key, k->offset);
}

static inline int ub_key_cmp(const struct ub_key *a, const struct ub_key *b)
{
	if (a->objectid != b->objectid)
		return a->objectid < b->objectid ? -1 : 1;
	if (a->type != b->type)
		return a->type < b->type ? -1 : 1;
	if (a->offset != b->offset)
		return a->offset < b->offset ? -1 : 1;
	return 0;
}

/* ---- checksums (lib/disk/csum.c) -------------------------------------------- */

/* Size in bytes of checksum type `type`, or 0 if unknown. */
unsigned ub_csum_size(unsigned type);
/* Human name ("crc32c", "xxhash64", "sha256", "blake2b"), or NULL if unknown. */
const char *ub_csum_name(unsigned type);
/* Checksum `len` bytes into `out` (UB_CSUM_SIZE_MAX bytes, zero padded). 0 or -EINVAL. */
int ub_csum(unsigned type, const void *data, size_t len, uint8_t out[UB_CSUM_SIZE_MAX]);
/* The name hash used in dir item keys (crc32c with seed ~1, as the kernel's btrfs_name_hash). */
uint64_t ub_name_hash(const char *name, size_t len);
/* Hash for extent data ref keys (owner objectid / offset). */
uint64_t ub_extent_data_ref_hash(uint64_t root, uint64_t owner, uint64_t offset);
/* The BTRFS_FT_* type a directory entry gives an inode of `mode` (BTRFS_FT_UNKNOWN if none). */
uint8_t ub_mode_ftype(uint32_t mode);

/* ---- names for printing (lib/disk/names.c) ------------------------------------ */
const char *ub_key_type_name(uint8_t type);          /* "INODE_ITEM", or NULL */
const char *ub_objectid_name(uint64_t objectid);      /* "ROOT_TREE", "FS_TREE"..., or NULL */
const char *ub_profile_name(uint64_t bg_flags);       /* "single", "DUP", "RAID1"... */
#define UB_UUID_STR_LEN 37
/* 16 bytes -> "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (NUL-terminated). */
void ub_uuid_str(const uint8_t *uuid, char out[UB_UUID_STR_LEN]);

UB_API_END

#endif
