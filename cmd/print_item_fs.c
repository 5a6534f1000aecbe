/* SPDX-License-Identifier: MIT */
/*
 * Decoders for the items of file trees (and log trees): inodes, names,
 * directory entries and xattrs, file extents, data checksums, verity.
 */
#include <stdio.h>
#include <string.h>

#include "print_priv.h"

/* Packed sizes of the variable-length name records (header before the name). */
#define INODE_REF_HDR ((uint32_t)sizeof(struct btrfs_inode_ref))
#define INODE_EXTREF_HDR ((uint32_t)offsetof(struct btrfs_inode_extref, name))
#define DIR_ITEM_HDR ((uint32_t)sizeof(struct btrfs_dir_item))
/* A file extent item up to and including its type byte; inline data follows. */
#define FILE_EXTENT_HDR UB_FILE_EXTENT_INLINE_DATA_START

/* Bytes of verity data shown as hex. */
#define PR_VERITY_DUMP_MAX 32U

static void inode_flags_str(char *out, size_t n, uint64_t flags)
{
	/* Bit values of the kernel's BTRFS_INODE_* flags (not in the UAPI header). */
	static const struct {
		uint64_t bit;
		const char *name;
	} names[] = {
		{ 1ULL << 0, "NODATASUM" }, { 1ULL << 1, "NODATACOW" },	 { 1ULL << 2, "READONLY" },
		{ 1ULL << 3, "NOCOMPRESS" }, { 1ULL << 4, "PREALLOC" },	 { 1ULL << 5, "SYNC" },
		{ 1ULL << 6, "IMMUTABLE" },  { 1ULL << 7, "APPEND" },	 { 1ULL << 8, "NODUMP" },
		{ 1ULL << 9, "NOATIME" },    { 1ULL << 10, "DIRSYNC" },	 { 1ULL << 11, "COMPRESS" },
		{ 1ULL << 31, "ROOT_ITEM_INIT" },
	};
	size_t len = 0;

	out[0] = '\0';
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (!(flags & names[i].bit))
			continue;
		len += (size_t)snprintf(out + len, n - len, "%s%s", len ? "|" : "", names[i].name);
		if (len >= n)
			return;
	}
	if (len == 0)
		snprintf(out, n, "none");
}

void pr_inode_item(FILE *f, const uint8_t *p, uint32_t size)
{
	char flags[PR_FLAGS_STR_LEN];
	uint64_t v;

	if (size < PR_END(btrfs_inode_item, nbytes))
		goto short_item;
	fprintf(f, "\t\tgeneration %llu transid %llu size %llu nbytes %llu\n",
		(unsigned long long)UB_GET(btrfs_inode_item, generation, p),
		(unsigned long long)UB_GET(btrfs_inode_item, transid, p),
		(unsigned long long)UB_GET(btrfs_inode_item, size, p),
		(unsigned long long)UB_GET(btrfs_inode_item, nbytes, p));
	if (size < PR_END(btrfs_inode_item, rdev))
		goto short_item;
	fprintf(f, "\t\tblock group %llu mode %o links %u uid %u gid %u rdev %llu\n",
		(unsigned long long)UB_GET(btrfs_inode_item, block_group, p),
		(unsigned)UB_GET(btrfs_inode_item, mode, p), (unsigned)UB_GET(btrfs_inode_item, nlink, p),
		(unsigned)UB_GET(btrfs_inode_item, uid, p), (unsigned)UB_GET(btrfs_inode_item, gid, p),
		(unsigned long long)UB_GET(btrfs_inode_item, rdev, p));
	if (size < PR_END(btrfs_inode_item, sequence))
		goto short_item;
	v = UB_GET(btrfs_inode_item, flags, p);
	inode_flags_str(flags, sizeof(flags), v);
	fprintf(f, "\t\tsequence %llu flags 0x%llx(%s)\n",
		(unsigned long long)UB_GET(btrfs_inode_item, sequence, p), (unsigned long long)v, flags);
	if (size < PR_END(btrfs_inode_item, atime))
		goto short_item;
	pr_timespec(f, "\t\tatime ", UB_PTR(btrfs_inode_item, atime, p));
	if (size < PR_END(btrfs_inode_item, ctime))
		goto short_item;
	pr_timespec(f, "\t\tctime ", UB_PTR(btrfs_inode_item, ctime, p));
	if (size < PR_END(btrfs_inode_item, mtime))
		goto short_item;
	pr_timespec(f, "\t\tmtime ", UB_PTR(btrfs_inode_item, mtime, p));
	if (size < PR_END(btrfs_inode_item, otime))
		goto short_item;
	pr_timespec(f, "\t\totime ", UB_PTR(btrfs_inode_item, otime, p));
	return;
short_item:
	pr_short(f, size);
}

/*
 * Print a name of `name_len` bytes that should start at `off`; shows at most
 * PR_NAME_MAX bytes and only what the item holds. Returns false when the item
 * ends inside the name.
 */
static bool print_bounded_name(FILE *f, const uint8_t *p, uint32_t size, uint32_t off, uint32_t name_len)
{
	uint32_t avail = off <= size ? size - off : 0;
	uint32_t shown = name_len < avail ? name_len : avail;

	if (shown > PR_NAME_MAX)
		shown = PR_NAME_MAX;
	pr_name(f, p + off, shown);
	return name_len <= avail;
}

void pr_inode_ref(FILE *f, const uint8_t *p, uint32_t size)
{
	uint32_t cur = 0;

	while (cur < size) {
		const uint8_t *ref = p + cur;
		uint32_t name_len;

		if (size - cur < INODE_REF_HDR)
			goto short_item;
		name_len = (uint32_t)UB_GET(btrfs_inode_ref, name_len, ref);
		fprintf(f, "\t\tindex %llu namelen %u name: ",
			(unsigned long long)UB_GET(btrfs_inode_ref, index, ref), name_len);
		if (!print_bounded_name(f, p, size, cur + INODE_REF_HDR, name_len)) {
			fputc('\n', f);
			goto short_item;
		}
		fputc('\n', f);
		cur += INODE_REF_HDR + name_len;
	}
	return;
short_item:
	pr_short(f, size);
}

void pr_inode_extref(FILE *f, const uint8_t *p, uint32_t size)
{
	uint32_t cur = 0;

	while (cur < size) {
		const uint8_t *ref = p + cur;
		uint32_t name_len;

		if (size - cur < INODE_EXTREF_HDR)
			goto short_item;
		name_len = (uint32_t)UB_GET(btrfs_inode_extref, name_len, ref);
		fprintf(f, "\t\tindex %llu parent %llu namelen %u name: ",
			(unsigned long long)UB_GET(btrfs_inode_extref, index, ref),
			(unsigned long long)UB_GET(btrfs_inode_extref, parent_objectid, ref), name_len);
		if (!print_bounded_name(f, p, size, cur + INODE_EXTREF_HDR, name_len)) {
			fputc('\n', f);
			goto short_item;
		}
		fputc('\n', f);
		cur += INODE_EXTREF_HDR + name_len;
	}
	return;
short_item:
	pr_short(f, size);
}

static void print_dir_type(FILE *f, unsigned type)
{
	static const char *const names[] = {
		[BTRFS_FT_REG_FILE] = "FILE", [BTRFS_FT_DIR] = "DIR",	    [BTRFS_FT_CHRDEV] = "CHRDEV",
		[BTRFS_FT_BLKDEV] = "BLKDEV", [BTRFS_FT_FIFO] = "FIFO",	    [BTRFS_FT_SOCK] = "SOCK",
		[BTRFS_FT_SYMLINK] = "SYMLINK", [BTRFS_FT_XATTR] = "XATTR",
	};

	if (type < sizeof(names) / sizeof(names[0]) && names[type])
		fputs(names[type], f);
	else
		fprintf(f, "DIR_ITEM.%u", type);
}

/* Directory entries and xattrs share a layout; one item may hold several (hash collisions). */
void pr_dir_item(FILE *f, const uint8_t *p, uint32_t size)
{
	uint32_t cur = 0;

	while (cur < size) {
		const uint8_t *di = p + cur;
		uint32_t name_len, data_len, name_off;

		if (size - cur < DIR_ITEM_HDR)
			goto short_item;
		name_len = (uint32_t)UB_GET(btrfs_dir_item, name_len, di);
		data_len = (uint32_t)UB_GET(btrfs_dir_item, data_len, di);
		fputs("\t\tlocation ", f);
		pr_disk_key(f, UB_PTR(btrfs_dir_item, location, di));
		fputs(" type ", f);
		print_dir_type(f, (unsigned)UB_GET(btrfs_dir_item, type, di));
		fprintf(f, "\n\t\ttransid %llu data_len %u name_len %u\n",
			(unsigned long long)UB_GET(btrfs_dir_item, transid, di), data_len, name_len);
		name_off = cur + DIR_ITEM_HDR;
		fputs("\t\tname: ", f);
		if (!print_bounded_name(f, p, size, name_off, name_len)) {
			fputc('\n', f);
			goto short_item;
		}
		fputc('\n', f);
		if (data_len) {
			fputs("\t\tdata ", f);
			if (!print_bounded_name(f, p, size, name_off + name_len, data_len)) {
				fputc('\n', f);
				goto short_item;
			}
			fputc('\n', f);
		}
		cur = name_off + name_len + data_len;
	}
	return;
short_item:
	pr_short(f, size);
}

void pr_dir_log(FILE *f, const uint8_t *p, uint32_t size)
{
	if (size < PR_END(btrfs_dir_log_item, end)) {
		pr_short(f, size);
		return;
	}
	fprintf(f, "\t\tdir log end %llu\n", (unsigned long long)UB_GET(btrfs_dir_log_item, end, p));
}

static void compress_str(char *out, size_t n, unsigned type)
{
	static const char *const names[] = {
		[UB_COMPRESS_NONE] = "none",
		[UB_COMPRESS_ZLIB] = "zlib",
		[UB_COMPRESS_LZO] = "lzo",
		[UB_COMPRESS_ZSTD] = "zstd",
	};

	if (type < sizeof(names) / sizeof(names[0]))
		snprintf(out, n, "%s", names[type]);
	else
		snprintf(out, n, "UNKNOWN.%u", type);
}

void pr_file_extent(FILE *f, const uint8_t *p, uint32_t size)
{
	static const char *const type_names[] = {
		[BTRFS_FILE_EXTENT_INLINE] = "inline",
		[BTRFS_FILE_EXTENT_REG] = "regular",
		[BTRFS_FILE_EXTENT_PREALLOC] = "prealloc",
	};
	unsigned type, compression;
	char comp[24];
	const char *kind;

	if (size < FILE_EXTENT_HDR)
		goto short_item;
	type = (unsigned)UB_GET(btrfs_file_extent_item, type, p);
	compression = (unsigned)UB_GET(btrfs_file_extent_item, compression, p);
	compress_str(comp, sizeof(comp), compression);
	fprintf(f, "\t\tgeneration %llu type %u (%s)\n",
		(unsigned long long)UB_GET(btrfs_file_extent_item, generation, p), type,
		type < sizeof(type_names) / sizeof(type_names[0]) ? type_names[type] : "unknown");

	if (type == BTRFS_FILE_EXTENT_INLINE) {
		fprintf(f, "\t\tinline extent data size %u ram_bytes %llu compression %u (%s)\n",
			size - FILE_EXTENT_HDR,
			(unsigned long long)UB_GET(btrfs_file_extent_item, ram_bytes, p), compression, comp);
		return;
	}
	if (size < sizeof(struct btrfs_file_extent_item))
		goto short_item;
	/* Unknown types print like regular extents, the most likely intent. */
	kind = type == BTRFS_FILE_EXTENT_PREALLOC ? "prealloc" : "extent";
	fprintf(f, "\t\t%s data disk byte %llu nr %llu\n", kind,
		(unsigned long long)UB_GET(btrfs_file_extent_item, disk_bytenr, p),
		(unsigned long long)UB_GET(btrfs_file_extent_item, disk_num_bytes, p));
	if (type == BTRFS_FILE_EXTENT_PREALLOC) {
		fprintf(f, "\t\tprealloc data offset %llu nr %llu\n",
			(unsigned long long)UB_GET(btrfs_file_extent_item, offset, p),
			(unsigned long long)UB_GET(btrfs_file_extent_item, num_bytes, p));
		return;
	}
	fprintf(f, "\t\textent data offset %llu nr %llu ram %llu\n",
		(unsigned long long)UB_GET(btrfs_file_extent_item, offset, p),
		(unsigned long long)UB_GET(btrfs_file_extent_item, num_bytes, p),
		(unsigned long long)UB_GET(btrfs_file_extent_item, ram_bytes, p));
	fprintf(f, "\t\textent compression %u (%s)\n", compression, comp);
	return;
short_item:
	pr_short(f, size);
}

void pr_extent_csum(FILE *f, const struct ub_key *key, const uint8_t *p, uint32_t size,
		    const struct ub_print_ctx *ctx)
{
	unsigned csum_size = ctx ? ctx->csum_size : 0;
	uint32_t sectorsize = ctx ? ctx->sectorsize : 0;
	uint64_t start = key->offset, count, len;
	unsigned per_line;

	/* Without the filesystem's geometry only the start is known. */
	if (csum_size == 0 || csum_size > UB_CSUM_SIZE_MAX || sectorsize == 0) {
		fprintf(f, "\t\trange start %llu\n", (unsigned long long)start);
		return;
	}
	count = size / csum_size;
	len = count * sectorsize;
	fprintf(f, "\t\trange start %llu end %llu length %llu\n", (unsigned long long)start,
		(unsigned long long)(start + len), (unsigned long long)len);

	/* As many checksums per line as fill about one 64-digit line. */
	per_line = UB_CSUM_SIZE_MAX / csum_size / 2;
	if (per_line == 0)
		per_line = 1;
	for (uint64_t i = 0; i < count; i++) {
		const uint8_t *c = p + i * csum_size;

		if (i % per_line == 0)
			fputs(i ? "\n\t\t" : "\t\t", f);
		else
			fputc(' ', f);
		fprintf(f, "[%llu] 0x", (unsigned long long)(start + i * sectorsize));
		for (unsigned j = 0; j < csum_size; j++)
			fprintf(f, "%02x", c[j]);
	}
	if (count)
		fputc('\n', f);
	if (size % csum_size)
		fprintf(f, "\t\t(%u trailing bytes, not a whole checksum)\n", size % csum_size);
}

void pr_verity(FILE *f, const struct ub_key *key, const uint8_t *p, uint32_t size)
{
	if (key->type == BTRFS_VERITY_DESC_ITEM_KEY && key->offset == 0) {
		/* Offset 0 holds btrfs' own record of the descriptor's size. */
		if (size < PR_END(btrfs_verity_descriptor_item, encryption)) {
			pr_short(f, size);
			return;
		}
		fprintf(f, "\t\tverity descriptor size %llu encryption %u\n",
			(unsigned long long)UB_GET(btrfs_verity_descriptor_item, size, p),
			(unsigned)UB_GET(btrfs_verity_descriptor_item, encryption, p));
		return;
	}
	fprintf(f, "\t\tverity %s data offset %llu size %u\n",
		key->type == BTRFS_VERITY_DESC_ITEM_KEY ? "descriptor" : "merkle tree",
		(unsigned long long)key->offset, size);
	pr_hexdump(f, p, size, PR_VERITY_DUMP_MAX);
}
