/* SPDX-License-Identifier: MIT */
/*
 * Structural checks of one tree block, the same ground the kernel's
 * tree-checker covers on read: header sanity, item bounds and layout, key
 * order, node pointers, and per-item-type size and value rules.
 *
 * Everything here depends only on the block itself and a few filesystem
 * constants, never on other blocks. The rules follow the kernel so that an
 * image the kernel mounts passes here and a block the kernel refuses is refused
 * here too; where the kernel is lenient (unknown item types, empty leaves of
 * most trees, legacy root items) so are we. Rules that need the superblock
 * generation (inode, root and extent generations) are left to the caller.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/stat.h>

#include "tree/tree_check.h"
#include "volume/volume_priv.h"

/* Bit 7 of a dir entry's type byte is an encryption flag in newer kernels, not part of the type. */
#define UB_DIR_TYPE_FLAG_MASK 0x80
/* The kernel's XATTR_SIZE_MAX: no xattr value may exceed it, whatever the node size. */
#define UB_XATTR_SIZE_MAX 65536U
/* Inode flags the kernel knows (low 32 bits of inode.flags). */
#define UB_INODE_FLAG_MASK 0x80000fffU
/* Chunks are capped so that a stripe number fits 32 bits. */
#define UB_CHUNK_LENGTH_LIMIT ((uint64_t)(UINT32_MAX * UB_STRIPE_LEN))
/* Root item up to generation_v2: what kernels before 3.6 wrote. */
#define UB_ROOT_ITEM_LEGACY_SIZE ((uint32_t)offsetof(struct btrfs_root_item, generation_v2))
/* The first extent item format (before 2.6.31): only a 32-bit ref count. */
#define UB_EXTENT_ITEM_V0_SIZE ((uint32_t)sizeof(struct btrfs_extent_item_v0))
/* Qgroup status without and with the simple-quota enable_gen field. */
#define UB_QGROUP_STATUS_SIZE ((uint32_t)(offsetof(struct btrfs_qgroup_status_item, rescan) + 8))
#define UB_QGROUP_STATUS_SQUOTA_SIZE (UB_QGROUP_STATUS_SIZE + 8U)
#define UB_INLINE_REF_HDR ((uint32_t)sizeof(struct btrfs_extent_inline_ref))

_Static_assert(sizeof(struct btrfs_dir_item) == 30, "dir item header is 30 bytes");
_Static_assert(sizeof(struct btrfs_inode_ref) == 10, "inode ref header is 10 bytes");
_Static_assert(sizeof(struct btrfs_inode_extref) == 18, "inode extref header is 18 bytes");
_Static_assert(sizeof(struct btrfs_root_ref) == 18, "root ref header is 18 bytes");
_Static_assert(sizeof(struct btrfs_chunk) - sizeof(struct btrfs_stripe) == 48, "chunk header is 48 bytes");
_Static_assert(sizeof(struct btrfs_stripe) == 32, "chunk stripe is 32 bytes");
_Static_assert(sizeof(struct btrfs_dev_extent) == 48, "dev extent is 48 bytes");
_Static_assert(sizeof(struct btrfs_block_group_item) == 24, "block group item is 24 bytes");
_Static_assert(sizeof(struct btrfs_extent_item) == 24, "extent item is 24 bytes");
_Static_assert(sizeof(struct btrfs_tree_block_info) == 18, "tree block info is 18 bytes");
_Static_assert(sizeof(struct btrfs_extent_data_ref) == 28, "extent data ref is 28 bytes");
_Static_assert(sizeof(struct btrfs_extent_inline_ref) == 9, "inline ref header is 9 bytes");
_Static_assert(UB_QGROUP_STATUS_SIZE == 32, "qgroup status (v1) is 32 bytes");
_Static_assert(UB_ROOT_ITEM_LEGACY_SIZE == 239, "legacy root item is 239 bytes");
/* The fields checked in a root item all lie inside the legacy part. */
_Static_assert(offsetof(struct btrfs_root_item, level) < UB_ROOT_ITEM_LEGACY_SIZE, "root level in legacy part");

/* Where a failure is reported from: the item's key, and its slot when inside a block. */
struct ck {
	const struct ub_check_ctx *ctx;
	const struct ub_key *key;
	int slot; /* -1: item checked on its own */
	char *why;
	size_t whylen;
};

static const char *type_str(uint8_t type, char *buf, size_t len)
{
	const char *name = ub_key_type_name(type);

	if (name)
		return name;
	snprintf(buf, len, "UNKNOWN.%u", type);
	return buf;
}

/*
 * A key as "(objectid TYPE offset)". The reserved objectids at the top of the
 * range (EXTENT_CSUM, TREE_LOG, ...) read better by name than as 20 digits;
 * small ones stay numeric, as their names depend on the tree.
 */
static const char *key_str(const struct ub_key *k, char *buf, size_t len)
{
	const char *oname = k->objectid > BTRFS_LAST_FREE_OBJECTID ? ub_objectid_name(k->objectid) : NULL;
	char tb[16], ob[24];

	if (oname)
		snprintf(ob, sizeof(ob), "%s", oname);
	else if (k->objectid > BTRFS_LAST_FREE_OBJECTID)
		snprintf(ob, sizeof(ob), "-%" PRIu64, -k->objectid);
	else
		snprintf(ob, sizeof(ob), "%" PRIu64, k->objectid);
	snprintf(buf, len, "(%s %s %" PRIu64 ")", ob, type_str(k->type, tb, sizeof(tb)), k->offset);
	return buf;
}

/*
 * A key formatted into a buffer that lives as long as the enclosing block:
 * used inside fail() arguments so a key is formatted only when a problem is
 * reported, never on the success path of a walk.
 */
#define KEY_STR(k) key_str((k), (char[96]){ 0 }, 96)

static void vreport(char *why, size_t whylen, const char *prefix, const char *fmt, va_list ap)
{
	int n;

	if (!why || whylen == 0)
		return;
	n = snprintf(why, whylen, "%s", prefix);
	if (n < 0 || (size_t)n >= whylen)
		return;
	vsnprintf(why + n, whylen - (size_t)n, fmt, ap);
}

/* Item-level failure: "slot N key (...): reason". */
__attribute__((format(printf, 2, 3))) static int fail(const struct ck *c, const char *fmt, ...)
{
	char prefix[128], ks[96];
	va_list ap;

	key_str(c->key, ks, sizeof(ks));
	if (c->slot >= 0)
		snprintf(prefix, sizeof(prefix), "slot %d key %s: ", c->slot, ks);
	else
		snprintf(prefix, sizeof(prefix), "key %s: ", ks);
	va_start(ap, fmt);
	vreport(c->why, c->whylen, prefix, fmt, ap);
	va_end(ap);
	return -EUCLEAN;
}

/* Block-level failure, not tied to one item. */
__attribute__((format(printf, 3, 4))) static int block_fail(char *why, size_t whylen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vreport(why, whylen, "", fmt, ap);
	va_end(ap);
	return -EUCLEAN;
}

static bool aligned(uint64_t v, uint32_t a)
{
	return (v & ((uint64_t)a - 1)) == 0;
}

static bool is_pow2(uint64_t v)
{
	return v && !(v & (v - 1));
}

static unsigned popcount64(uint64_t v)
{
	return (unsigned)__builtin_popcountll(v);
}

/* a + b, or UINT64_MAX when it does not fit: an end past everything still compares as "too far". */
static uint64_t sat_add(uint64_t a, uint64_t b)
{
	return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* Subvolume trees: the top-level FS tree and every id a subvolume can get. */
static bool is_fstree(uint64_t id)
{
	return id == BTRFS_FS_TREE_OBJECTID || (id >= BTRFS_FIRST_FREE_OBJECTID && id <= BTRFS_LAST_FREE_OBJECTID);
}

static int check_ctx(const struct ub_check_ctx *ctx, char *why, size_t whylen)
{
	if (!ctx || !is_pow2(ctx->nodesize) || ctx->nodesize < UB_MIN_NODESIZE || ctx->nodesize > UB_MAX_NODESIZE ||
	    !is_pow2(ctx->sectorsize) || ctx->sectorsize < 512 || ctx->sectorsize > UB_MAX_NODESIZE ||
	    ctx->csum_size == 0 || ctx->csum_size > UB_CSUM_SIZE_MAX) {
		block_fail(why, whylen, "invalid check parameters (nodesize %u sectorsize %u csum size %u)",
			   ctx ? ctx->nodesize : 0, ctx ? ctx->sectorsize : 0, ctx ? ctx->csum_size : 0);
		return -EINVAL;
	}
	return 0;
}

/* ---- file items ------------------------------------------------------------ */

#define FE_GET(field, p) UB_GET(btrfs_file_extent_item, field, p)

static int check_file_extent(const struct ck *c, const uint8_t *d, uint32_t size)
{
	const uint32_t ss = c->ctx->sectorsize;
	const uint64_t foff = c->key->offset;
	uint8_t type, comp, enc;
	uint64_t ram;

	if (!aligned(foff, ss))
		return fail(c, "file offset %" PRIu64 " is not aligned to sectorsize %u", foff, ss);
	if (size < UB_FILE_EXTENT_INLINE_DATA_START)
		return fail(c, "invalid item size %u, expect at least %u", size, UB_FILE_EXTENT_INLINE_DATA_START);
	/* Everything before disk_bytenr is inside the first 21 bytes, present in every file extent. */
	type = (uint8_t)FE_GET(type, d);
	comp = (uint8_t)FE_GET(compression, d);
	enc = (uint8_t)FE_GET(encryption, d);
	ram = FE_GET(ram_bytes, d);
	if (type >= BTRFS_NR_FILE_EXTENT_TYPES)
		return fail(c, "invalid file extent type %u, expect 0 (inline), 1 (regular) or 2 (prealloc)", type);
	if (comp > UB_COMPRESS_ZSTD)
		return fail(c, "invalid compression %u, expect [0, %u]", comp, UB_COMPRESS_ZSTD);
	if (enc)
		return fail(c, "invalid encryption %u, expect 0", enc);

	if (type == BTRFS_FILE_EXTENT_INLINE) {
		if (foff)
			return fail(c, "inline extent at file offset %" PRIu64 ", expect 0", foff);
		/* Compressed inline data has no size of its own to compare with. */
		if (comp == UB_COMPRESS_NONE && ram != size - UB_FILE_EXTENT_INLINE_DATA_START)
			return fail(c, "uncompressed inline extent has ram_bytes %" PRIu64 " but item size %u holds %u bytes",
				    ram, size, size - UB_FILE_EXTENT_INLINE_DATA_START);
		return 0;
	}

	if (size != sizeof(struct btrfs_file_extent_item))
		return fail(c, "invalid item size %u for %s extent, expect %zu", size,
			    type == BTRFS_FILE_EXTENT_REG ? "regular" : "prealloc", sizeof(struct btrfs_file_extent_item));
	{
		const struct {
			const char *name;
			uint64_t v;
		} f[] = {
			{ "ram_bytes", ram },
			{ "disk_bytenr", FE_GET(disk_bytenr, d) },
			{ "disk_num_bytes", FE_GET(disk_num_bytes, d) },
			{ "offset", FE_GET(offset, d) },
			{ "num_bytes", FE_GET(num_bytes, d) },
		};
		for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
			if (!aligned(f[i].v, ss))
				return fail(c, "%s %" PRIu64 " is not aligned to sectorsize %u", f[i].name, f[i].v, ss);
		if (f[4].v > UINT64_MAX - foff)
			return fail(c, "extent end overflows: file offset %" PRIu64 " + num_bytes %" PRIu64, foff,
				    f[4].v);
		if (f[3].v > UINT64_MAX - f[4].v)
			return fail(c, "offset %" PRIu64 " + num_bytes %" PRIu64 " overflows", f[3].v, f[4].v);
		/* A hole has disk_bytenr 0; anything allocated has a length. */
		if (f[1].v && !f[2].v)
			return fail(c, "extent at disk_bytenr %" PRIu64 " has disk_num_bytes 0", f[1].v);
	}
	return 0;
}

/* Where the previous file extent ends, as the kernel counts it (inline extents fill their sector). */
static uint64_t file_extent_end(const struct ub_key *k, const uint8_t *d, uint32_t sectorsize)
{
	if (FE_GET(type, d) == BTRFS_FILE_EXTENT_INLINE) {
		uint64_t end = sat_add(k->offset, FE_GET(ram_bytes, d));
		uint64_t up = sat_add(end, sectorsize - 1);
		return up == UINT64_MAX ? up : up & ~((uint64_t)sectorsize - 1);
	}
	return sat_add(k->offset, FE_GET(num_bytes, d));
}

static int check_csum_item(const struct ck *c, const uint8_t *d, uint32_t size)
{
	const uint32_t ss = c->ctx->sectorsize;

	if (c->key->objectid != BTRFS_EXTENT_CSUM_OBJECTID)
		return fail(c, "invalid objectid for a csum item, expect %" PRIu64 " (EXTENT_CSUM)",
			    (uint64_t)BTRFS_EXTENT_CSUM_OBJECTID);
	if (!aligned(c->key->offset, ss))
		return fail(c, "csum range start %" PRIu64 " is not aligned to sectorsize %u", c->key->offset, ss);
	if (size % c->ctx->csum_size)
		return fail(c, "invalid item size %u, expect a multiple of the checksum size %u", size,
			    c->ctx->csum_size);
	return 0;
}

/* ---- directory entries and xattrs ------------------------------------------ */

#define DI_GET(field, p) UB_GET(btrfs_dir_item, field, p)

static int check_dir_location(const struct ck *c, unsigned idx, const struct ub_key *loc)
{
	if (c->key->type == BTRFS_XATTR_ITEM_KEY) {
		if (loc->objectid || loc->type || loc->offset)
			return fail(c, "entry %u: xattr location key %s, expect (0 0 0)", idx, KEY_STR(loc));
		return 0;
	}
	if (loc->type == BTRFS_ROOT_ITEM_KEY) {
		/* A subvolume entry: it can only lead to another subvolume tree. */
		if (!is_fstree(loc->objectid))
			return fail(c, "entry %u: location key %s does not name a subvolume tree", idx, KEY_STR(loc));
		return 0;
	}
	if (loc->type == BTRFS_INODE_ITEM_KEY || loc->type == 0) {
		if ((loc->objectid < BTRFS_FIRST_FREE_OBJECTID || loc->objectid > BTRFS_LAST_FREE_OBJECTID) &&
		    loc->objectid != BTRFS_ROOT_TREE_DIR_OBJECTID && loc->objectid != BTRFS_FREE_INO_OBJECTID)
			return fail(c, "entry %u: location key %s has an invalid inode number", idx, KEY_STR(loc));
		if (loc->offset)
			return fail(c, "entry %u: location key %s has offset %" PRIu64 ", expect 0", idx, KEY_STR(loc),
				    loc->offset);
		return 0;
	}
	return fail(c, "entry %u: invalid location key type in %s, expect INODE_ITEM or ROOT_ITEM", idx, KEY_STR(loc));
}

static int check_dir_item(const struct ck *c, const uint8_t *d, uint32_t size)
{
	const uint8_t ktype = c->key->type;
	/* Name plus value must fit one item of a leaf with the entry header. */
	uint32_t max_xattr = c->ctx->nodesize - UB_HEADER_SIZE - UB_ITEM_SIZE - (uint32_t)sizeof(struct btrfs_dir_item);
	uint32_t cur = 0;
	unsigned n = 0;
	int ret;

	if (max_xattr > UB_XATTR_SIZE_MAX)
		max_xattr = UB_XATTR_SIZE_MAX;
	while (cur < size) {
		const uint8_t *e = d + cur;
		struct ub_key loc;
		uint32_t name_len, data_len, total;
		uint8_t ftype;

		if (size - cur < sizeof(struct btrfs_dir_item))
			return fail(c, "entry %u: header at offset %u crosses the item end %u", n, cur, size);
		ub_key_read(&loc, e + offsetof(struct btrfs_dir_item, location));
		ret = check_dir_location(c, n, &loc);
		if (ret)
			return ret;
		ftype = (uint8_t)DI_GET(type, e) & (uint8_t)~UB_DIR_TYPE_FLAG_MASK;
		if (ftype >= BTRFS_FT_MAX)
			return fail(c, "entry %u: invalid file type %u, expect [0, %u]", n, ftype, BTRFS_FT_MAX - 1);
		if (ktype == BTRFS_XATTR_ITEM_KEY && ftype != BTRFS_FT_XATTR)
			return fail(c, "entry %u: file type %u in an xattr item, expect %u (xattr)", n, ftype,
				    BTRFS_FT_XATTR);
		if (ktype != BTRFS_XATTR_ITEM_KEY && ftype == BTRFS_FT_XATTR)
			return fail(c, "entry %u: xattr file type in a directory entry", n);
		name_len = (uint32_t)DI_GET(name_len, e);
		data_len = (uint32_t)DI_GET(data_len, e);
		if (name_len > UB_NAME_LEN)
			return fail(c, "entry %u: name length %u exceeds %u", n, name_len, UB_NAME_LEN);
		if (name_len + data_len > max_xattr)
			return fail(c, "entry %u: name and data length %u exceed %u for nodesize %u", n,
				    name_len + data_len, max_xattr, c->ctx->nodesize);
		if (data_len && ftype != BTRFS_FT_XATTR)
			return fail(c, "entry %u: data length %u in a directory entry, expect 0", n, data_len);
		total = (uint32_t)sizeof(struct btrfs_dir_item) + name_len + data_len;
		if (total > size - cur)
			return fail(c, "entry %u: name/data at offset %u length %u cross the item end %u", n, cur,
				    total, size);
		if (ktype == BTRFS_DIR_ITEM_KEY || ktype == BTRFS_XATTR_ITEM_KEY) {
			uint64_t h = ub_name_hash((const char *)e + sizeof(struct btrfs_dir_item), name_len);
			if (h != c->key->offset)
				return fail(c, "entry %u: name hash 0x%08" PRIx64 " does not match the key offset 0x%08" PRIx64,
					    n, h, c->key->offset);
		}
		cur += total;
		n++;
	}
	if (ktype == BTRFS_DIR_INDEX_KEY && n != 1)
		return fail(c, "DIR_INDEX holds %u entries, expect exactly 1", n);
	return 0;
}

/* ---- inodes and back references ------------------------------------------ */

static int check_inode_item(const struct ck *c, const uint8_t *d, uint32_t size)
{
	const uint64_t ino = c->key->objectid;
	uint32_t mode, kind, nlink, flags;

	if ((ino < BTRFS_FIRST_FREE_OBJECTID || ino > BTRFS_LAST_FREE_OBJECTID) && ino != BTRFS_ROOT_TREE_DIR_OBJECTID &&
	    ino != BTRFS_FREE_INO_OBJECTID)
		return fail(c, "invalid inode number, expect %llu, [%llu, %llu] or %llu",
			    (unsigned long long)BTRFS_ROOT_TREE_DIR_OBJECTID, (unsigned long long)BTRFS_FIRST_FREE_OBJECTID,
			    (unsigned long long)BTRFS_LAST_FREE_OBJECTID, (unsigned long long)BTRFS_FREE_INO_OBJECTID);
	if (c->key->offset)
		return fail(c, "invalid key offset %" PRIu64 ", expect 0", c->key->offset);
	if (size != sizeof(struct btrfs_inode_item))
		return fail(c, "invalid item size %u, expect %zu", size, sizeof(struct btrfs_inode_item));
	mode = (uint32_t)UB_GET(btrfs_inode_item, mode, d);
	if (mode & ~(uint32_t)(S_IFMT | 07777))
		return fail(c, "unknown mode bits 0%o", mode & ~(uint32_t)(S_IFMT | 07777));
	kind = mode & S_IFMT;
	if (kind != S_IFREG && kind != S_IFDIR && kind != S_IFLNK && kind != S_IFCHR && kind != S_IFBLK &&
	    kind != S_IFIFO && kind != S_IFSOCK)
		return fail(c, "invalid file type in mode 0%o", mode);
	nlink = (uint32_t)UB_GET(btrfs_inode_item, nlink, d);
	if (kind == S_IFDIR && nlink > 1)
		return fail(c, "directory with nlink %u, expect at most 1", nlink);
	/* The high half holds read-only-compatible flags, which a reader may ignore. */
	flags = (uint32_t)UB_GET(btrfs_inode_item, flags, d);
	if (flags & ~UB_INODE_FLAG_MASK)
		return fail(c, "unknown inode flags 0x%x", flags & ~UB_INODE_FLAG_MASK);
	return 0;
}

static int check_inode_ref(const struct ck *c, const uint8_t *d, uint32_t size)
{
	const bool ext = c->key->type == BTRFS_INODE_EXTREF_KEY;
	const uint32_t hdr = ext ? (uint32_t)sizeof(struct btrfs_inode_extref) : (uint32_t)sizeof(struct btrfs_inode_ref);
	uint32_t cur = 0;
	unsigned n = 0;

	/* Names are never empty, so an inode ref needs more than its header. */
	if (!ext && size <= hdr)
		return fail(c, "invalid item size %u, expect more than %u", size, hdr);
	while (cur < size) {
		uint32_t name_len;

		if (size - cur < hdr)
			return fail(c, "ref %u: header at offset %u crosses the item end %u", n, cur, size);
		name_len = ext ? (uint32_t)UB_GET(btrfs_inode_extref, name_len, d + cur)
			       : (uint32_t)UB_GET(btrfs_inode_ref, name_len, d + cur);
		if (name_len > UB_NAME_LEN)
			return fail(c, "ref %u: name length %u exceeds %u", n, name_len, UB_NAME_LEN);
		if (name_len > size - cur - hdr)
			return fail(c, "ref %u: name at offset %u length %u crosses the item end %u", n, cur + hdr,
				    name_len, size);
		cur += hdr + name_len;
		n++;
	}
	return 0;
}

static int check_root_ref(const struct ck *c, const uint8_t *d, uint32_t size)
{
	const uint32_t hdr = (uint32_t)sizeof(struct btrfs_root_ref);
	uint32_t name_len;

	if (size < hdr)
		return fail(c, "invalid item size %u, expect at least %u", size, hdr);
	name_len = (uint32_t)UB_GET(btrfs_root_ref, name_len, d);
	if (name_len == 0 || name_len > UB_NAME_LEN)
		return fail(c, "invalid name length %u, expect [1, %u]", name_len, UB_NAME_LEN);
	if (size != hdr + name_len)
		return fail(c, "invalid item size %u, expect %u (header + name length %u)", size, hdr + name_len,
			    name_len);
	return 0;
}

/* ---- the root tree ---------------------------------------------------------- */

#define RI_GET(field, p) UB_GET(btrfs_root_item, field, p)

static int check_root_item(const struct ck *c, const uint8_t *d, uint32_t size)
{
	const uint64_t valid_flags = BTRFS_ROOT_SUBVOL_RDONLY | BTRFS_ROOT_SUBVOL_DEAD;
	const struct ub_key *k = c->key;
	uint64_t bytenr, flags;
	uint8_t level, drop_level;

	if (k->objectid == 0)
		return fail(c, "invalid root id 0");
	/*
	 * Only subvolume trees get relocation trees; the key offset names the
	 * subvolume. Kernels before 5.16 also gave one to the data relocation
	 * tree, and btrfs check accepts it (corpus tree_reloc_for_data_reloc).
	 */
	if (k->objectid == BTRFS_TREE_RELOC_OBJECTID && !is_fstree(k->offset) &&
	    k->offset != BTRFS_DATA_RELOC_TREE_OBJECTID)
		return fail(c, "relocation tree for %" PRIu64 ", which is not a subvolume tree", k->offset);
	if (size != sizeof(struct btrfs_root_item) && size != UB_ROOT_ITEM_LEGACY_SIZE)
		return fail(c, "invalid root item size %u, expect %zu or %u (legacy)", size,
			    sizeof(struct btrfs_root_item), UB_ROOT_ITEM_LEGACY_SIZE);
	bytenr = RI_GET(bytenr, d);
	level = (uint8_t)RI_GET(level, d);
	drop_level = (uint8_t)RI_GET(drop_level, d);
	flags = RI_GET(flags, d);
	if (!aligned(bytenr, c->ctx->sectorsize))
		return fail(c, "root bytenr %" PRIu64 " is not aligned to sectorsize %u", bytenr, c->ctx->sectorsize);
	if (level >= UB_MAX_LEVEL)
		return fail(c, "invalid root level %u, expect [0, %u]", level, UB_MAX_LEVEL - 1);
	if (drop_level >= UB_MAX_LEVEL)
		return fail(c, "invalid drop level %u, expect [0, %u]", drop_level, UB_MAX_LEVEL - 1);
	if (flags & ~valid_flags)
		return fail(c, "unknown root flags 0x%" PRIx64, flags & ~valid_flags);
	return 0;
}

/* ---- the chunk and device trees ------------------------------------------- */

#define CH_GET(field, p) UB_GET(btrfs_chunk, field, p)

static int check_chunk_item(const struct ck *c, const uint8_t *d, uint32_t size)
{
	const uint32_t ss = c->ctx->sectorsize;
	const uint32_t hdr = (uint32_t)(sizeof(struct btrfs_chunk) - sizeof(struct btrfs_stripe));
	const uint64_t logical = c->key->offset;
	const uint64_t known = BTRFS_BLOCK_GROUP_TYPE_MASK | BTRFS_BLOCK_GROUP_PROFILE_MASK;
	uint64_t length, stripe_len, type, profile, kind;
	uint32_t num_stripes, sub_stripes, sector_size;
	bool ok;

	if (size < sizeof(struct btrfs_chunk))
		return fail(c, "invalid chunk item size %u, expect at least %zu", size, sizeof(struct btrfs_chunk));
	num_stripes = (uint32_t)CH_GET(num_stripes, d);
	sub_stripes = (uint32_t)CH_GET(sub_stripes, d);
	if (num_stripes == 0)
		return fail(c, "chunk has 0 stripes");
	if (size != hdr + num_stripes * (uint32_t)sizeof(struct btrfs_stripe))
		return fail(c, "invalid chunk item size %u, expect %u for %u stripes", size,
			    hdr + num_stripes * (uint32_t)sizeof(struct btrfs_stripe), num_stripes);
	length = CH_GET(length, d);
	stripe_len = CH_GET(stripe_len, d);
	type = CH_GET(type, d);
	sector_size = (uint32_t)CH_GET(sector_size, d);
	if (!aligned(logical, ss))
		return fail(c, "chunk start %" PRIu64 " is not aligned to sectorsize %u", logical, ss);
	if (sector_size != ss)
		return fail(c, "chunk sector size %u, expect %u", sector_size, ss);
	if (!length || !aligned(length, ss))
		return fail(c, "invalid chunk length %" PRIu64 ", expect a non-zero multiple of %u", length, ss);
	if (length > UINT64_MAX - logical)
		return fail(c, "chunk start %" PRIu64 " + length %" PRIu64 " overflows", logical, length);
	if (stripe_len != UB_STRIPE_LEN)
		return fail(c, "invalid stripe length %" PRIu64 ", expect %llu", stripe_len, UB_STRIPE_LEN);
	if (length >= UB_CHUNK_LENGTH_LIMIT)
		return fail(c, "chunk length %" PRIu64 " too large, limit %" PRIu64, length, UB_CHUNK_LENGTH_LIMIT);
	if (type & ~known)
		return fail(c, "unknown chunk type bits 0x%" PRIx64, type & ~known);
	profile = type & BTRFS_BLOCK_GROUP_PROFILE_MASK;
	kind = type & BTRFS_BLOCK_GROUP_TYPE_MASK;
	if (popcount64(profile) > 1)
		return fail(c, "chunk type 0x%" PRIx64 " has several profile bits", type);
	if (!kind)
		return fail(c, "chunk type 0x%" PRIx64 " has no DATA, METADATA or SYSTEM bit", type);
	if ((kind & BTRFS_BLOCK_GROUP_SYSTEM) && kind != BTRFS_BLOCK_GROUP_SYSTEM)
		return fail(c, "system chunk also marked data or metadata (type 0x%" PRIx64 ")", type);
	if (kind == (BTRFS_BLOCK_GROUP_DATA | BTRFS_BLOCK_GROUP_METADATA) &&
	    !(c->ctx->incompat_flags & BTRFS_FEATURE_INCOMPAT_MIXED_GROUPS))
		return fail(c, "mixed data+metadata chunk without the mixed-groups feature");

	ok = ub_profile_stripes_valid(type, num_stripes, sub_stripes);
	if (!ok)
		return fail(c, "invalid stripe count %u (sub_stripes %u) for profile %s", num_stripes, sub_stripes,
			    ub_profile_name(type));
	return 0;
}

static int check_dev_item(const struct ck *c, const uint8_t *d, uint32_t size)
{
	uint64_t devid, total, used;

	if (c->key->objectid != BTRFS_DEV_ITEMS_OBJECTID)
		return fail(c, "invalid objectid for a device item, expect %llu",
			    (unsigned long long)BTRFS_DEV_ITEMS_OBJECTID);
	if (size != sizeof(struct btrfs_dev_item))
		return fail(c, "invalid item size %u, expect %zu", size, sizeof(struct btrfs_dev_item));
	devid = UB_GET(btrfs_dev_item, devid, d);
	total = UB_GET(btrfs_dev_item, total_bytes, d);
	used = UB_GET(btrfs_dev_item, bytes_used, d);
	if (devid != c->key->offset)
		return fail(c, "device id %" PRIu64 " does not match the key offset", devid);
	/* total_bytes may be 0 while a device is being removed; used may never exceed it. */
	if (used > total)
		return fail(c, "bytes_used %" PRIu64 " exceeds total_bytes %" PRIu64, used, total);
	return 0;
}

static int check_dev_extent(const struct ck *c, const uint8_t *d, uint32_t size)
{
	const uint32_t ss = c->ctx->sectorsize;
	uint64_t tree, cobj, coff, len;

	if (size != sizeof(struct btrfs_dev_extent))
		return fail(c, "invalid item size %u, expect %zu", size, sizeof(struct btrfs_dev_extent));
	tree = UB_GET(btrfs_dev_extent, chunk_tree, d);
	cobj = UB_GET(btrfs_dev_extent, chunk_objectid, d);
	coff = UB_GET(btrfs_dev_extent, chunk_offset, d);
	len = UB_GET(btrfs_dev_extent, length, d);
	if (tree != BTRFS_CHUNK_TREE_OBJECTID)
		return fail(c, "chunk tree id %" PRIu64 ", expect %llu", tree, (unsigned long long)BTRFS_CHUNK_TREE_OBJECTID);
	if (cobj != BTRFS_FIRST_CHUNK_TREE_OBJECTID)
		return fail(c, "chunk objectid %" PRIu64 ", expect %llu", cobj,
			    (unsigned long long)BTRFS_FIRST_CHUNK_TREE_OBJECTID);
	if (!aligned(c->key->offset, ss))
		return fail(c, "physical offset %" PRIu64 " is not aligned to sectorsize %u", c->key->offset, ss);
	if (!aligned(coff, ss))
		return fail(c, "chunk offset %" PRIu64 " is not aligned to sectorsize %u", coff, ss);
	if (!aligned(len, ss))
		return fail(c, "length %" PRIu64 " is not aligned to sectorsize %u", len, ss);
	return 0;
}

/* ---- the extent tree and its relatives ------------------------------------- */

static int check_block_group(const struct ck *c, const uint8_t *d, uint32_t size)
{
	uint64_t used, cobj, flags, kind;

	if (c->key->offset == 0)
		return fail(c, "block group of length 0");
	if (size != sizeof(struct btrfs_block_group_item))
		return fail(c, "invalid item size %u, expect %zu", size, sizeof(struct btrfs_block_group_item));
	used = UB_GET(btrfs_block_group_item, used, d);
	cobj = UB_GET(btrfs_block_group_item, chunk_objectid, d);
	flags = UB_GET(btrfs_block_group_item, flags, d);
	/* extent-tree-v2 reuses chunk_objectid as a global root id, checked against the superblock elsewhere. */
	if (!(c->ctx->incompat_flags & BTRFS_FEATURE_INCOMPAT_EXTENT_TREE_V2) && cobj != BTRFS_FIRST_CHUNK_TREE_OBJECTID)
		return fail(c, "chunk objectid %" PRIu64 ", expect %llu", cobj,
			    (unsigned long long)BTRFS_FIRST_CHUNK_TREE_OBJECTID);
	if (used > c->key->offset)
		return fail(c, "used %" PRIu64 " exceeds the block group length %" PRIu64, used, c->key->offset);
	if (popcount64(flags & BTRFS_BLOCK_GROUP_PROFILE_MASK) > 1)
		return fail(c, "flags 0x%" PRIx64 " have several profile bits", flags);
	kind = flags & BTRFS_BLOCK_GROUP_TYPE_MASK;
	if (kind != BTRFS_BLOCK_GROUP_DATA && kind != BTRFS_BLOCK_GROUP_METADATA && kind != BTRFS_BLOCK_GROUP_SYSTEM &&
	    kind != (BTRFS_BLOCK_GROUP_DATA | BTRFS_BLOCK_GROUP_METADATA))
		return fail(c, "invalid type in flags 0x%" PRIx64 ", expect one of DATA, METADATA, SYSTEM or DATA|METADATA",
			    flags);
	return 0;
}

/* Size of an inline back reference of `type`, header included; 0 for an unknown type. */
static uint32_t inline_ref_size(uint8_t type)
{
	switch (type) {
	case BTRFS_TREE_BLOCK_REF_KEY:
	case BTRFS_SHARED_BLOCK_REF_KEY:
	case BTRFS_EXTENT_OWNER_REF_KEY:
		return UB_INLINE_REF_HDR;
	case BTRFS_SHARED_DATA_REF_KEY:
		return UB_INLINE_REF_HDR + (uint32_t)sizeof(struct btrfs_shared_data_ref);
	case BTRFS_EXTENT_DATA_REF_KEY:
		/* The data ref takes the place of the header's offset field. */
		return (uint32_t)offsetof(struct btrfs_extent_inline_ref, offset) +
		       (uint32_t)sizeof(struct btrfs_extent_data_ref);
	default:
		return 0;
	}
}

static int check_extent_item(const struct ck *c, const uint8_t *d, uint32_t size)
{
	const struct ub_check_ctx *ctx = c->ctx;
	const struct ub_key *k = c->key;
	const bool skinny = k->type == BTRFS_METADATA_ITEM_KEY;
	uint64_t refs, flags, inline_refs = 0, last_seq = UINT64_MAX;
	uint32_t cur;
	uint8_t last_type = 0;
	unsigned n = 0;
	bool tree_block;

	if (!skinny && size == UB_EXTENT_ITEM_V0_SIZE)
		return fail(c, "extent item of size %u is the pre-2.6.31 v0 format, which is no longer supported; "
			       "recreate the filesystem", size);
	if (skinny && !(ctx->incompat_flags & BTRFS_FEATURE_INCOMPAT_SKINNY_METADATA))
		return fail(c, "METADATA_ITEM without the skinny-metadata feature");
	if (!aligned(k->objectid, ctx->sectorsize))
		return fail(c, "extent start %" PRIu64 " is not aligned to sectorsize %u", k->objectid, ctx->sectorsize);
	if (skinny && k->offset >= UB_MAX_LEVEL)
		return fail(c, "invalid tree level %" PRIu64 ", expect [0, %u]", k->offset, UB_MAX_LEVEL - 1);
	if (size < sizeof(struct btrfs_extent_item))
		return fail(c, "invalid item size %u, expect at least %zu", size, sizeof(struct btrfs_extent_item));
	refs = UB_GET(btrfs_extent_item, refs, d);
	flags = UB_GET(btrfs_extent_item, flags, d);
	if (popcount64(flags & (BTRFS_EXTENT_FLAG_DATA | BTRFS_EXTENT_FLAG_TREE_BLOCK)) != 1)
		return fail(c, "extent flags 0x%" PRIx64 " must have exactly one of DATA (0x1) and TREE_BLOCK (0x2)",
			    flags);
	tree_block = flags & BTRFS_EXTENT_FLAG_TREE_BLOCK;
	if (tree_block) {
		if (!skinny && k->offset != ctx->nodesize)
			return fail(c, "tree block extent length %" PRIu64 ", expect nodesize %u", k->offset,
				    ctx->nodesize);
	} else {
		if (skinny)
			return fail(c, "data extent recorded as a METADATA_ITEM");
		if (!aligned(k->offset, ctx->sectorsize))
			return fail(c, "data extent length %" PRIu64 " is not aligned to sectorsize %u", k->offset,
				    ctx->sectorsize);
		if (flags & BTRFS_BLOCK_FLAG_FULL_BACKREF)
			return fail(c, "data extent with the FULL_BACKREF flag");
	}
	cur = (uint32_t)sizeof(struct btrfs_extent_item);
	if (tree_block && !skinny) {
		uint8_t level;

		if (size - cur < sizeof(struct btrfs_tree_block_info))
			return fail(c, "invalid item size %u, a non-skinny tree block extent needs at least %zu", size,
				    sizeof(struct btrfs_extent_item) + sizeof(struct btrfs_tree_block_info));
		level = (uint8_t)UB_GET(btrfs_tree_block_info, level, d + cur);
		if (level >= UB_MAX_LEVEL)
			return fail(c, "invalid tree block info level %u, expect [0, %u]", level, UB_MAX_LEVEL - 1);
		cur += (uint32_t)sizeof(struct btrfs_tree_block_info);
	}

	/* Inline refs sorted by type, and within a type by descending sequence (offset or hash). */
	while (cur < size) {
		const uint8_t *r = d + cur;
		uint8_t type;
		uint64_t off, seq;
		uint32_t rsize;

		if (size - cur < UB_INLINE_REF_HDR)
			return fail(c, "inline ref %u at offset %u: header crosses the item end %u", n, cur, size);
		type = (uint8_t)UB_GET(btrfs_extent_inline_ref, type, r);
		off = UB_GET(btrfs_extent_inline_ref, offset, r);
		rsize = inline_ref_size(type);
		if (!rsize)
			return fail(c, "inline ref %u at offset %u: unknown type %u", n, cur, type);
		if (size - cur < rsize)
			return fail(c, "inline ref %u at offset %u: %u bytes cross the item end %u", n, cur, rsize, size);
		seq = off;
		switch (type) {
		case BTRFS_TREE_BLOCK_REF_KEY:
			inline_refs++;
			break;
		case BTRFS_SHARED_BLOCK_REF_KEY:
			if (!aligned(off, ctx->sectorsize))
				return fail(c, "inline ref %u: parent %" PRIu64 " is not aligned to sectorsize %u", n,
					    off, ctx->sectorsize);
			inline_refs++;
			break;
		case BTRFS_EXTENT_DATA_REF_KEY: {
			const uint8_t *dr = r + offsetof(struct btrfs_extent_inline_ref, offset);
			uint64_t root = UB_GET(btrfs_extent_data_ref, root, dr);
			uint64_t oid = UB_GET(btrfs_extent_data_ref, objectid, dr);
			uint64_t doff = UB_GET(btrfs_extent_data_ref, offset, dr);

			if (!aligned(doff, ctx->sectorsize))
				return fail(c, "inline ref %u: data ref offset %" PRIu64 " is not aligned to sectorsize %u",
					    n, doff, ctx->sectorsize);
			seq = ub_extent_data_ref_hash(root, oid, doff);
			inline_refs += UB_GET(btrfs_extent_data_ref, count, dr);
			break;
		}
		case BTRFS_SHARED_DATA_REF_KEY:
			if (!aligned(off, ctx->sectorsize))
				return fail(c, "inline ref %u: parent %" PRIu64 " is not aligned to sectorsize %u", n,
					    off, ctx->sectorsize);
			inline_refs += UB_GET(btrfs_shared_data_ref, count, r + UB_INLINE_REF_HDR);
			break;
		default: /* EXTENT_OWNER_REF (simple quotas): the owning root, counts no reference */
			break;
		}
		if (type < last_type)
			return fail(c, "inline ref %u: type %u after type %u, expect ascending types", n, type, last_type);
		if (type > last_type)
			last_seq = UINT64_MAX;
		if (seq > last_seq)
			return fail(c, "inline ref %u: type %u sequence 0x%" PRIx64 " after 0x%" PRIx64
				       ", expect descending order within a type",
				    n, type, seq, last_seq);
		last_type = type;
		last_seq = seq;
		cur += rsize;
		n++;
	}
	if (inline_refs > refs)
		return fail(c, "extent has %" PRIu64 " refs but its inline refs count %" PRIu64, refs, inline_refs);
	return 0;
}

/* Keyed back references: TREE_BLOCK_REF, SHARED_BLOCK_REF, SHARED_DATA_REF. */
static int check_keyed_ref(const struct ck *c, const uint8_t *d, uint32_t size)
{
	const uint32_t ss = c->ctx->sectorsize;
	uint32_t expect = c->key->type == BTRFS_SHARED_DATA_REF_KEY ? (uint32_t)sizeof(struct btrfs_shared_data_ref) : 0;

	if (size != expect)
		return fail(c, "invalid item size %u, expect %u", size, expect);
	if (!aligned(c->key->objectid, ss))
		return fail(c, "extent start %" PRIu64 " is not aligned to sectorsize %u", c->key->objectid, ss);
	/* For the shared kinds the offset is the parent tree block. */
	if (c->key->type != BTRFS_TREE_BLOCK_REF_KEY && !aligned(c->key->offset, ss))
		return fail(c, "parent %" PRIu64 " is not aligned to sectorsize %u", c->key->offset, ss);
	return 0;
}

static int check_extent_data_ref(const struct ck *c, const uint8_t *d, uint32_t size)
{
	const uint32_t ss = c->ctx->sectorsize;
	const uint32_t rs = (uint32_t)sizeof(struct btrfs_extent_data_ref);

	if (size % rs)
		return fail(c, "invalid item size %u, expect a multiple of %u", size, rs);
	if (!aligned(c->key->objectid, ss))
		return fail(c, "extent start %" PRIu64 " is not aligned to sectorsize %u", c->key->objectid, ss);
	/* Hash collisions can push refs into a neighbouring key, so the key offset is not checked. */
	for (uint32_t cur = 0; cur < size; cur += rs) {
		uint64_t off = UB_GET(btrfs_extent_data_ref, offset, d + cur);
		if (!aligned(off, ss))
			return fail(c, "data ref %u: offset %" PRIu64 " is not aligned to sectorsize %u", cur / rs, off,
				    ss);
	}
	return 0;
}

/* ---- the small fixed-shape items ------------------------------------------- */

static int expect_size(const struct ck *c, uint32_t size, uint32_t expect)
{
	if (size != expect)
		return fail(c, "invalid item size %u, expect %u", size, expect);
	return 0;
}

static int expect_multiple(const struct ck *c, uint32_t size, uint32_t unit, bool nonzero)
{
	if (size % unit || (nonzero && !size))
		return fail(c, "invalid item size %u, expect a %smultiple of %u", size, nonzero ? "non-zero " : "", unit);
	return 0;
}

static int check_free_space_bitmap(const struct ck *c, uint32_t size)
{
	const uint32_t ss = c->ctx->sectorsize;
	uint64_t bits, expect;

	if (!aligned(c->key->objectid, ss) || !aligned(c->key->offset, ss) || !c->key->offset)
		return fail(c, "bitmap range must be non-empty and aligned to sectorsize %u", ss);
	/* One bit per sector, rounded up to whole bytes. */
	bits = c->key->offset / ss;
	expect = bits / 8 + (bits % 8 ? 1 : 0);
	if (size != expect)
		return fail(c, "invalid item size %u, expect %" PRIu64 " for a bitmap of %" PRIu64 " sectors", size,
			    expect, bits);
	return 0;
}

static int check_raid_stripe(const struct ck *c, uint32_t size)
{
	if (!(c->ctx->incompat_flags & BTRFS_FEATURE_INCOMPAT_RAID_STRIPE_TREE))
		return fail(c, "RAID stripe item without the raid-stripe-tree feature");
	if (!aligned(c->key->objectid, c->ctx->sectorsize))
		return fail(c, "stripe start %" PRIu64 " is not aligned to sectorsize %u", c->key->objectid,
			    c->ctx->sectorsize);
	return expect_multiple(c, size, (uint32_t)sizeof(struct ub_disk_raid_stride), true);
}

static int check_item(const struct ck *c, const uint8_t *d, uint32_t size)
{
	switch (c->key->type) {
	case BTRFS_EXTENT_DATA_KEY:
		return check_file_extent(c, d, size);
	case BTRFS_EXTENT_CSUM_KEY:
		return check_csum_item(c, d, size);
	case BTRFS_DIR_ITEM_KEY:
	case BTRFS_DIR_INDEX_KEY:
	case BTRFS_XATTR_ITEM_KEY:
		return check_dir_item(c, d, size);
	case BTRFS_INODE_ITEM_KEY:
		return check_inode_item(c, d, size);
	case BTRFS_INODE_REF_KEY:
	case BTRFS_INODE_EXTREF_KEY:
		return check_inode_ref(c, d, size);
	case BTRFS_ROOT_ITEM_KEY:
		return check_root_item(c, d, size);
	case BTRFS_ROOT_REF_KEY:
	case BTRFS_ROOT_BACKREF_KEY:
		return check_root_ref(c, d, size);
	case BTRFS_CHUNK_ITEM_KEY:
		return check_chunk_item(c, d, size);
	case BTRFS_DEV_ITEM_KEY:
		return check_dev_item(c, d, size);
	case BTRFS_DEV_EXTENT_KEY:
		return check_dev_extent(c, d, size);
	case BTRFS_BLOCK_GROUP_ITEM_KEY:
		return check_block_group(c, d, size);
	case BTRFS_EXTENT_ITEM_KEY:
	case BTRFS_METADATA_ITEM_KEY:
		return check_extent_item(c, d, size);
	case BTRFS_TREE_BLOCK_REF_KEY:
	case BTRFS_SHARED_BLOCK_REF_KEY:
	case BTRFS_SHARED_DATA_REF_KEY:
		return check_keyed_ref(c, d, size);
	case BTRFS_EXTENT_DATA_REF_KEY:
		return check_extent_data_ref(c, d, size);
	case BTRFS_UUID_KEY_SUBVOL:
	case BTRFS_UUID_KEY_RECEIVED_SUBVOL:
		return expect_multiple(c, size, 8, false);
	case BTRFS_FREE_SPACE_INFO_KEY:
		return expect_size(c, size, (uint32_t)sizeof(struct btrfs_free_space_info));
	case BTRFS_FREE_SPACE_EXTENT_KEY:
	case BTRFS_ORPHAN_ITEM_KEY:
	case BTRFS_QGROUP_RELATION_KEY:
		return expect_size(c, size, 0);
	case BTRFS_FREE_SPACE_BITMAP_KEY:
		return check_free_space_bitmap(c, size);
	case BTRFS_QGROUP_STATUS_KEY:
		if (size != UB_QGROUP_STATUS_SIZE && size != UB_QGROUP_STATUS_SQUOTA_SIZE)
			return fail(c, "invalid item size %u, expect %u or %u", size, UB_QGROUP_STATUS_SIZE,
				    UB_QGROUP_STATUS_SQUOTA_SIZE);
		return 0;
	case BTRFS_QGROUP_INFO_KEY:
		return expect_size(c, size, (uint32_t)sizeof(struct btrfs_qgroup_info_item));
	case BTRFS_QGROUP_LIMIT_KEY:
		return expect_size(c, size, (uint32_t)sizeof(struct btrfs_qgroup_limit_item));
	case BTRFS_PERSISTENT_ITEM_KEY:
		/* Device statistics grow by whole 64-bit counters; older, shorter items are fine. */
		if (c->key->objectid == BTRFS_DEV_STATS_OBJECTID)
			return expect_multiple(c, size, 8, false);
		return 0;
	case BTRFS_DIR_LOG_ITEM_KEY:
	case BTRFS_DIR_LOG_INDEX_KEY:
		return expect_size(c, size, (uint32_t)sizeof(struct btrfs_dir_log_item));
	case BTRFS_RAID_STRIPE_KEY:
		return check_raid_stripe(c, size);
	default:
		/* Unknown types come with an incompat bit the superblock check already refused, or are harmless. */
		return 0;
	}
}

int ub_tree_check_item(const struct ub_key *key, const uint8_t *data, uint32_t size, const struct ub_check_ctx *ctx,
		       char *why, size_t whylen)
{
	struct ck c = { .ctx = ctx, .key = key, .slot = -1, .why = why, .whylen = whylen };
	int ret = check_ctx(ctx, why, whylen);

	if (ret)
		return ret;
	if (!key || (!data && size)) {
		block_fail(why, whylen, "no item to check");
		return -EINVAL;
	}
	return check_item(&c, data, size);
}

/* ---- rules between neighbouring items ------------------------------------- */

static bool keyed_by_inode(uint8_t type)
{
	return type == BTRFS_XATTR_ITEM_KEY || type == BTRFS_INODE_REF_KEY || type == BTRFS_INODE_EXTREF_KEY ||
	       type == BTRFS_DIR_INDEX_KEY || type == BTRFS_DIR_ITEM_KEY || type == BTRFS_EXTENT_DATA_KEY;
}

/*
 * `c` describes the current item, `pk`/`pd`/`psize` the previous one in the
 * same leaf, which has already passed its own checks (so its fixed fields can
 * be read).
 */
static int check_neighbors(const struct ck *c, uint64_t owner, const struct ub_key *pk, const uint8_t *pd,
			   uint32_t psize)
{
	const struct ub_check_ctx *ctx = c->ctx;
	const struct ub_key *k = c->key;
	uint64_t prev_end;

	/* In a subvolume tree an inode's items come right after its INODE_ITEM, sharing its objectid. */
	if (is_fstree(owner) && keyed_by_inode(k->type) && pk->objectid != k->objectid)
		return fail(c, "previous key %s belongs to another inode; the INODE_ITEM of %" PRIu64 " is missing", KEY_STR(pk),
			    k->objectid);
	switch (k->type) {
	case BTRFS_EXTENT_DATA_KEY:
		if (pk->type != BTRFS_EXTENT_DATA_KEY || pk->objectid != k->objectid)
			return 0;
		prev_end = file_extent_end(pk, pd, ctx->sectorsize);
		if (prev_end > k->offset)
			return fail(c, "file extent starts at %" PRIu64 " but the previous one %s ends at %" PRIu64,
				    k->offset, KEY_STR(pk), prev_end);
		return 0;
	case BTRFS_EXTENT_CSUM_KEY:
		if (pk->type != BTRFS_EXTENT_CSUM_KEY)
			return 0;
		prev_end = sat_add(pk->offset, (uint64_t)(psize / ctx->csum_size) * ctx->sectorsize);
		if (prev_end > k->offset)
			return fail(c, "csum range starts at %" PRIu64 " but the previous one %s ends at %" PRIu64,
				    k->offset, KEY_STR(pk), prev_end);
		return 0;
	case BTRFS_EXTENT_ITEM_KEY:
	case BTRFS_METADATA_ITEM_KEY:
		if (pk->type != BTRFS_EXTENT_ITEM_KEY && pk->type != BTRFS_METADATA_ITEM_KEY)
			return 0;
		prev_end = sat_add(pk->objectid, pk->type == BTRFS_METADATA_ITEM_KEY ? ctx->nodesize : pk->offset);
		if (prev_end > k->objectid)
			return fail(c, "extent starts at %" PRIu64 " but the previous extent %s ends at %" PRIu64,
				    k->objectid, KEY_STR(pk), prev_end);
		return 0;
	case BTRFS_DEV_EXTENT_KEY:
		if (pk->type != BTRFS_DEV_EXTENT_KEY || pk->objectid != k->objectid)
			return 0;
		prev_end = sat_add(pk->offset, UB_GET(btrfs_dev_extent, length, pd));
		if (prev_end > k->offset)
			return fail(c, "device extent starts at %" PRIu64 " but the previous one %s ends at %" PRIu64,
				    k->offset, KEY_STR(pk), prev_end);
		return 0;
	default:
		return 0;
	}
}

/* ---- whole blocks ---------------------------------------------------------- */

static int check_empty_leaf(uint64_t owner, uint64_t flags, const struct ub_check_ctx *ctx, char *why, size_t whylen)
{
	/* A relocation tree block carries its subvolume's id as owner and may legitimately be empty. */
	if (flags & BTRFS_HEADER_FLAG_RELOC)
		return 0;
	if (owner == 0)
		return block_fail(why, whylen, "empty leaf with owner 0, which is no tree");
	if (owner == BTRFS_ROOT_TREE_OBJECTID || owner == BTRFS_CHUNK_TREE_OBJECTID || owner == BTRFS_DEV_TREE_OBJECTID ||
	    owner == BTRFS_FS_TREE_OBJECTID || owner == BTRFS_DATA_RELOC_TREE_OBJECTID ||
	    (owner == BTRFS_EXTENT_TREE_OBJECTID && !(ctx->incompat_flags & BTRFS_FEATURE_INCOMPAT_EXTENT_TREE_V2))) {
		const char *name = ub_objectid_name(owner);
		return block_fail(why, whylen, "empty leaf in tree %" PRIu64 "%s%s%s, which is never empty", owner,
				  name ? " (" : "", name ? name : "", name ? ")" : "");
	}
	return 0;
}

static int check_leaf(const uint8_t *buf, const struct ub_check_ctx *ctx, char *why, size_t whylen)
{
	const uint32_t nritems = (uint32_t)UB_GET(ub_disk_header, nritems, buf);
	const uint64_t owner = UB_GET(ub_disk_header, owner, buf);
	const uint32_t data_size = ctx->nodesize - UB_HEADER_SIZE;
	const uint32_t max_items = data_size / UB_ITEM_SIZE;
	const uint8_t *items = buf + UB_HEADER_SIZE;
	struct ub_key prev = { 0, 0, 0 }, key;
	const uint8_t *pdata = NULL;
	uint32_t psize = 0, expect_end = data_size, array_end;
	int ret;

	if (nritems == 0)
		return check_empty_leaf(owner, UB_GET(ub_disk_header, flags, buf), ctx, why, whylen);
	if (nritems > max_items)
		return block_fail(why, whylen, "leaf has %u items, at most %u fit in nodesize %u", nritems, max_items,
				  ctx->nodesize);
	/* Item offsets count from the end of the header; the item headers occupy the start of that area. */
	array_end = nritems * UB_ITEM_SIZE;
	for (uint32_t slot = 0; slot < nritems; slot++) {
		const uint8_t *it = items + slot * UB_ITEM_SIZE;
		struct ck c = { .ctx = ctx, .key = &key, .slot = (int)slot, .why = why, .whylen = whylen };
		uint32_t off = (uint32_t)UB_GET(ub_disk_item, offset, it);
		uint32_t size = (uint32_t)UB_GET(ub_disk_item, size, it);
		uint64_t end = (uint64_t)off + size;

		ub_key_read(&key, it);
		if (ub_key_cmp(&prev, &key) >= 0) {
			char ps[96];

			key_str(&prev, ps, sizeof(ps));
			return fail(&c, slot ? "bad key order, previous key %s is not smaller"
					     : "bad key order, the first key must be greater than %s",
				    ps);
		}
		/* Item data is packed from the end of the block down, in slot order, without gaps. */
		if (end != expect_end) {
			if (slot == 0)
				return fail(&c, "item data [%u, %" PRIu64 ") must end at the end of the leaf, %u", off, end,
					    expect_end);
			return fail(&c, "item data [%u, %" PRIu64 ") must end where slot %u's data starts, %u", off, end,
				    slot - 1, expect_end);
		}
		if (off < array_end)
			return fail(&c, "item data at offset %u overlaps the item headers, which end at %u", off,
				    array_end);
		ret = check_item(&c, items + off, size);
		if (ret)
			return ret;
		if (slot > 0) {
			ret = check_neighbors(&c, owner, &prev, pdata, psize);
			if (ret)
				return ret;
		}
		prev = key;
		pdata = items + off;
		psize = size;
		expect_end = off;
	}
	return 0;
}

static int check_node(const uint8_t *buf, const struct ub_check_ctx *ctx, char *why, size_t whylen)
{
	const uint32_t nritems = (uint32_t)UB_GET(ub_disk_header, nritems, buf);
	const uint32_t max_ptrs = (ctx->nodesize - UB_HEADER_SIZE) / UB_KEY_PTR_SIZE;
	const uint8_t *ptrs = buf + UB_HEADER_SIZE;
	struct ub_key prev = { 0, 0, 0 }, key;

	if (nritems == 0)
		return block_fail(why, whylen, "node at level %u has no pointers",
				  (unsigned)UB_GET(ub_disk_header, level, buf));
	if (nritems > max_ptrs)
		return block_fail(why, whylen, "node has %u pointers, at most %u fit in nodesize %u", nritems, max_ptrs,
				  ctx->nodesize);
	for (uint32_t slot = 0; slot < nritems; slot++) {
		const uint8_t *p = ptrs + slot * UB_KEY_PTR_SIZE;
		struct ck c = { .ctx = ctx, .key = &key, .slot = (int)slot, .why = why, .whylen = whylen };
		uint64_t blockptr = UB_GET(ub_disk_key_ptr, blockptr, p);
		uint64_t gen = UB_GET(ub_disk_key_ptr, generation, p);

		ub_key_read(&key, p);
		if (slot > 0 && ub_key_cmp(&prev, &key) >= 0) {
			char ps[96];

			key_str(&prev, ps, sizeof(ps));
			return fail(&c, "bad key order, previous key %s is not smaller", ps);
		}
		if (blockptr == 0)
			return fail(&c, "child pointer is 0");
		if (!aligned(blockptr, ctx->sectorsize))
			return fail(&c, "child pointer %" PRIu64 " is not aligned to sectorsize %u", blockptr,
				    ctx->sectorsize);
		if (gen == 0)
			return fail(&c, "child pointer %" PRIu64 " has generation 0", blockptr);
		prev = key;
	}
	return 0;
}

int ub_tree_check_block(const uint8_t *buf, const struct ub_check_ctx *ctx, char *why, size_t whylen)
{
	uint8_t level;
	int ret = check_ctx(ctx, why, whylen);

	if (ret)
		return ret;
	if (!buf) {
		block_fail(why, whylen, "no block to check");
		return -EINVAL;
	}
	level = (uint8_t)UB_GET(ub_disk_header, level, buf);
	if (level >= UB_MAX_LEVEL)
		return block_fail(why, whylen, "invalid level %u, expect [0, %u]", level, UB_MAX_LEVEL - 1);
	/* Set on every block written out; a block without it was never finished. */
	if (!(UB_GET(ub_disk_header, flags, buf) & BTRFS_HEADER_FLAG_WRITTEN))
		return block_fail(why, whylen, "%s without the WRITTEN header flag", level ? "node" : "leaf");
	return level ? check_node(buf, ctx, why, whylen) : check_leaf(buf, ctx, why, whylen);
}
