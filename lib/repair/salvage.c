/* SPDX-License-Identifier: MIT */
/*
 * Salvage: a tree block no copy of which passes the tree checks (its
 * checksum good, its header sane, an item breaking a rule). The repair reads
 * each copy leniently, here and nowhere else, cures what breaks the rules
 * (each cure below names the rule), and when a cured copy passes every check
 * hands it to the tree layer (ub_tree_salvage_put) before its engine opens:
 * the engine's reads of that address get the cured bytes. In the repair's
 * transaction the block is then copied on write in every tree the check saw
 * reach it (rp_salvage_cow), so the commit points at the copy and the bad
 * block stays on disk as it was, unreferenced: nothing is written in place.
 *
 * The cures, in order:
 *   - a header generation above the filesystem's: the pointer's generation
 *     when that one is not (the copy on write gives the block the
 *     transaction's generation anyway; btrfs check's transid cure does the same);
 *   - item data that does not lie end to end (an offset shifted or garbled):
 *     the items laid out again, each one's data taken from where its offset
 *     says when that lies inside the block, else assumed in place;
 *   - an uncompressed inline extent whose ram_bytes is not its data's length:
 *     ram_bytes set to it;
 *   - a file extent whose disk_bytenr is no sector's address: the data extent
 *     whose back reference names the item (tree, inode, file offset less the
 *     offset into the extent) with the item's length, when exactly one does
 *     (btrfs check deletes the item and the extent's reference instead);
 *   - an inode mode with an unknown type or stray bits: the type from what the
 *     leaf says of the inode (a directory's entries, file extents, an entry
 *     naming it; else a regular file), the permission bits the owner's only
 *     (0700 / 0600: the old ones are noise too);
 *   - an inode's items with no INODE_ITEM before them: one made from what the
 *     leaf says of it (btrfs check makes one too);
 *   - a DIR_ITEM / DIR_INDEX entry that breaks a rule (a name whose hash is
 *     not its key's): the item dropped, and the names of the inodes it named
 *     made whole again from the records that survive (names.c);
 *   - a tree block's skinny extent item with a level that is no level, or no
 *     valid flags: remade from the header of the block it describes (its
 *     level; flags TREE_BLOCK, one reference of the header's owner);
 *   - a block group item whose used bytes exceed its length: the used bytes
 *     are recounted from the extents (the engine's repair open does it);
 *   - a CHUNK_ITEM key in the root tree, whose item is a root item's size:
 *     the key type ROOT_ITEM again (a flipped type byte).
 * A copy that still fails is left; with no copy cured the block is reported
 * with no cure.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include "fs/fs_embed.h"
#include "tree/tree_check.h"
#include "repair/repair_priv.h"

struct salv_name {
	uint64_t tree, ino, dir;
};

struct rp_salvage {
	struct salv_name *names; /* inodes a dropped entry named: their names made whole after the copies */
	size_t nnames, capnames;
	bool space;              /* a block group's used bytes to be recounted */
	uint64_t *done;          /* blocks cured and handed to the tree layer */
	size_t ndone, capdone;
};

/* What one block's cures need: the volume (to read the blocks an extent item describes), what was done. */
struct salv_block {
	struct ub_fs *fs;        /* the filesystem opened read-only: its extent tree tells where data lies */
	struct ub_volume *vol;
	const struct rp_note *n;
	uint8_t *buf;
	char done[512];
	size_t donelen;
	struct rp_salvage *s;
	struct salv_name pend[32]; /* names this copy's cures would remake */
	int npend;
	bool space;
};

static void said(struct salv_block *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void said(struct salv_block *b, const char *fmt, ...)
{
	va_list ap;
	int r;

	if (b->donelen >= sizeof(b->done) - 1)
		return;
	if (b->donelen) {
		b->done[b->donelen++] = ';';
		b->done[b->donelen++] = ' ';
		b->done[b->donelen] = '\0';
	}
	va_start(ap, fmt);
	r = vsnprintf(b->done + b->donelen, sizeof(b->done) - b->donelen, fmt, ap);
	va_end(ap);
	if (r > 0)
		b->donelen += (size_t)r;
	if (b->donelen >= sizeof(b->done))
		b->donelen = sizeof(b->done) - 1;
}

#define ITEM(buf, i) ((buf) + UB_HEADER_SIZE + (size_t)(i) * UB_ITEM_SIZE)
#define HDR(field, buf) UB_GET(ub_disk_header, field, buf)

static uint32_t item_off(const uint8_t *buf, uint32_t i) { return (uint32_t)UB_GET(ub_disk_item, offset, ITEM(buf, i)); }
static uint32_t item_size(const uint8_t *buf, uint32_t i) { return (uint32_t)UB_GET(ub_disk_item, size, ITEM(buf, i)); }

static void item_key(const uint8_t *buf, uint32_t i, struct ub_key *k)
{
	ub_key_read(k, ITEM(buf, i));
}

static void set_item_key(uint8_t *buf, uint32_t i, const struct ub_key *k)
{
	ub_key_write(ITEM(buf, i), k);
}

static uint8_t *item_data(uint8_t *buf, uint32_t i)
{
	return buf + UB_HEADER_SIZE + item_off(buf, i);
}

/* Item data end to end from the block's end: already so (0), laid out again (1), impossible (-EUCLEAN). */
static int relay_items(struct salv_block *b, uint32_t nodesize)
{
	uint8_t *buf = b->buf, *orig;
	uint32_t n = (uint32_t)HDR(nritems, buf), data_size = nodesize - UB_HEADER_SIZE, end = data_size;
	uint64_t total = 0;
	bool ok = true;

	if ((uint64_t)n * UB_ITEM_SIZE > data_size)
		return -EUCLEAN;
	for (uint32_t i = 0; i < n; i++) {
		total += item_size(buf, i);
		if (item_off(buf, i) + (uint64_t)item_size(buf, i) != end)
			ok = false;
		end = item_off(buf, i);
	}
	if (ok)
		return 0;
	if (total + (uint64_t)n * UB_ITEM_SIZE > data_size)
		return -EUCLEAN;
	orig = malloc(nodesize);
	if (!orig)
		return -ENOMEM;
	memcpy(orig, buf, nodesize);
	memset(buf + UB_HEADER_SIZE + n * UB_ITEM_SIZE, 0, data_size - n * UB_ITEM_SIZE);
	end = data_size;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t size = item_size(orig, i), off = item_off(orig, i), want = end - size;
		/* data inside the data area: it was moved with its offset; else the offset alone is garbage */
		bool moved = off >= n * UB_ITEM_SIZE && (uint64_t)off + size <= data_size;

		memcpy(buf + UB_HEADER_SIZE + want, orig + UB_HEADER_SIZE + (moved ? off : want), size);
		UB_SET(ub_disk_item, offset, ITEM(buf, i), want);
		end = want;
	}
	free(orig);
	said(b, "item data laid out again end to end");
	return 1;
}

/* Slot N of a tree check's reason ("slot 3 key (...): ..."), -1 if it names none. */
static int why_slot(const char *why)
{
	int slot;

	if (sscanf(why, "slot %d", &slot) == 1 && slot >= 0)
		return slot;
	return -1;
}

/* Read the tree block at `bytenr` whole (some copy with a good checksum and its own address): its header. */
static int read_header(struct ub_volume *vol, uint64_t bytenr, uint8_t *hdr)
{
	uint8_t *buf = malloc(vol->nodesize), csum[UB_CSUM_SIZE_MAX];
	int copies = ub_volume_num_copies(vol, bytenr), ret = -ENOENT;

	if (!buf)
		return -ENOMEM;
	for (int m = 1; m <= copies && ret; m++) {
		if (ub_volume_read(vol, bytenr, vol->nodesize, m, buf))
			continue;
		ub_csum(vol->csum_type, buf + UB_CSUM_SIZE_MAX, vol->nodesize - UB_CSUM_SIZE_MAX, csum);
		if (memcmp(csum, buf, vol->csum_size) || HDR(bytenr, buf) != bytenr ||
		    memcmp(UB_PTR(ub_disk_header, fsid, buf), vol->metadata_uuid, UB_FSID_SIZE))
			continue;
		memcpy(hdr, buf, UB_HEADER_SIZE);
		ret = 0;
	}
	free(buf);
	return ret;
}

/* The file type of inode `ino` as the leaf tells it: 0 when it says nothing. */
static uint32_t leaf_says_type(const uint8_t *buf, uint64_t ino, uint64_t tree)
{
	uint32_t n = (uint32_t)HDR(nritems, buf);

	if (ino == BTRFS_FIRST_FREE_OBJECTID && tree != BTRFS_ROOT_TREE_OBJECTID)
		return S_IFDIR;
	for (uint32_t i = 0; i < n; i++) {
		struct ub_key k;

		item_key(buf, i, &k);
		if (k.objectid == ino && (k.type == BTRFS_DIR_ITEM_KEY || k.type == BTRFS_DIR_INDEX_KEY))
			return S_IFDIR;
		if (k.objectid == ino && k.type == BTRFS_EXTENT_DATA_KEY)
			return S_IFREG;
	}
	for (uint32_t i = 0; i < n; i++) {
		struct ub_key k, loc;
		const uint8_t *d = buf + UB_HEADER_SIZE + item_off(buf, i);

		item_key(buf, i, &k);
		if ((k.type != BTRFS_DIR_INDEX_KEY && k.type != BTRFS_DIR_ITEM_KEY) ||
		    item_size(buf, i) < sizeof(struct btrfs_dir_item))
			continue;
		ub_key_read(&loc, UB_PTR(btrfs_dir_item, location, d));
		if (loc.objectid != ino || loc.type != BTRFS_INODE_ITEM_KEY)
			continue;
		switch (UB_GET(btrfs_dir_item, type, d)) {
		case BTRFS_FT_REG_FILE: return S_IFREG;
		case BTRFS_FT_DIR: return S_IFDIR;
		case BTRFS_FT_CHRDEV: return S_IFCHR;
		case BTRFS_FT_BLKDEV: return S_IFBLK;
		case BTRFS_FT_FIFO: return S_IFIFO;
		case BTRFS_FT_SOCK: return S_IFSOCK;
		case BTRFS_FT_SYMLINK: return S_IFLNK;
		default: break;
		}
	}
	return 0;
}

static bool mode_valid(uint32_t mode)
{
	switch (mode & S_IFMT) {
	case S_IFREG: case S_IFDIR: case S_IFCHR: case S_IFBLK: case S_IFIFO: case S_IFSOCK: case S_IFLNK:
		return true;
	default:
		return false;
	}
}

static int cure_inode(struct salv_block *b, uint32_t slot, const struct ub_key *k)
{
	uint8_t *d = item_data(b->buf, slot);
	uint64_t mode = UB_GET(btrfs_inode_item, mode, d);
	uint32_t type, perm;

	if (item_size(b->buf, slot) != sizeof(struct btrfs_inode_item))
		return -EUCLEAN;
	if (mode <= 07777777 && mode_valid((uint32_t)mode))
		return -EUCLEAN; /* not the mode: some other rule, no cure here */
	/*
	 * A mode with no valid type or stray bits is garbage, its permission
	 * bits too (set-id bits from noise must not come out): owner only. The
	 * kernel's free space cache inodes (root tree) are regular files, 0600.
	 */
	type = b->n->tree == BTRFS_ROOT_TREE_OBJECTID ? S_IFREG : leaf_says_type(b->buf, k->objectid, b->n->tree);
	if (!type)
		type = S_IFREG;
	perm = type == S_IFDIR ? 0700 : 0600;
	UB_SET(btrfs_inode_item, mode, d, type | perm);
	said(b, "inode %llu: mode 0%llo -> 0%o", (unsigned long long)k->objectid, (unsigned long long)mode, type | perm);
	return 0;
}

/*
 * The data extent whose back reference names this file extent (tree, inode,
 * file offset less the offset into the extent) and whose length is the
 * item's disk_num_bytes: 0 and *out when there is exactly one, else -ENOENT.
 */
static int extent_by_backref(struct salv_block *b, uint64_t ino, uint64_t offset, uint64_t len, uint64_t *out)
{
	struct ub_key min = { 0, 0, 0 }, max = { UINT64_MAX, UINT8_MAX, UINT64_MAX }, k, ext = { 0, 0, 0 };
	struct ub_tree_iter it;
	const uint8_t *d;
	uint32_t size;
	int found = 0, ret;

	if (!b->fs->extent_tree)
		return -ENOENT;
	ret = ub_tree_iter_start(&it, &b->fs->tc, &b->fs->extent_tree->root, &min, &max);
	while (!ret && (ret = ub_tree_iter_next(&it, &k, &d, &size)) == 0) {
		if (k.type == BTRFS_EXTENT_ITEM_KEY) {
			uint32_t pos = sizeof(struct btrfs_extent_item);

			ext = k;
			if (size < pos || !(UB_GET(btrfs_extent_item, flags, d) & BTRFS_EXTENT_FLAG_DATA) || k.offset != len)
				continue;
			/* inline references: a type byte, then its body */
			while (pos < size) {
				uint8_t type = d[pos];
				const uint8_t *r = d + pos + 1;

				if (type == BTRFS_EXTENT_DATA_REF_KEY && pos + 1 + sizeof(struct btrfs_extent_data_ref) <= size) {
					if (UB_GET(btrfs_extent_data_ref, root, r) == b->n->tree &&
					    UB_GET(btrfs_extent_data_ref, objectid, r) == ino &&
					    UB_GET(btrfs_extent_data_ref, offset, r) == offset) {
						*out = k.objectid;
						found++;
					}
					pos += 1 + (uint32_t)sizeof(struct btrfs_extent_data_ref);
				} else if (type == BTRFS_SHARED_DATA_REF_KEY) {
					pos += 1 + (uint32_t)sizeof(struct btrfs_shared_data_ref);
				} else {
					break;
				}
			}
		} else if (k.type == BTRFS_EXTENT_DATA_REF_KEY && k.objectid == ext.objectid && ext.offset == len &&
			   size >= sizeof(struct btrfs_extent_data_ref) &&
			   UB_GET(btrfs_extent_data_ref, root, d) == b->n->tree &&
			   UB_GET(btrfs_extent_data_ref, objectid, d) == ino &&
			   UB_GET(btrfs_extent_data_ref, offset, d) == offset) {
			*out = k.objectid;
			found++;
		}
	}
	ub_tree_iter_end(&it);
	if (ret < 0)
		return ret;
	return found == 1 && !(*out % b->vol->sectorsize) ? 0 : -ENOENT;
}

static int cure_file_extent(struct salv_block *b, uint32_t slot, const struct ub_key *k)
{
	uint8_t *d = item_data(b->buf, slot);
	uint32_t size = item_size(b->buf, slot);
	uint64_t ram, bytenr, want;
	int ret;

	if (size <= UB_FILE_EXTENT_INLINE_DATA_START)
		return -EUCLEAN;
	if (UB_GET(btrfs_file_extent_item, type, d) != BTRFS_FILE_EXTENT_INLINE) {
		/* an address that is no sector's: the extent tree's back reference says which extent it was */
		if (size != sizeof(struct btrfs_file_extent_item))
			return -EUCLEAN;
		bytenr = UB_GET(btrfs_file_extent_item, disk_bytenr, d);
		if (!(bytenr % b->vol->sectorsize) || UB_GET(btrfs_file_extent_item, offset, d) > k->offset)
			return -EUCLEAN;
		ret = extent_by_backref(b, k->objectid, k->offset - UB_GET(btrfs_file_extent_item, offset, d),
					UB_GET(btrfs_file_extent_item, disk_num_bytes, d), &want);
		if (ret)
			return ret == -ENOMEM ? ret : -EUCLEAN; /* an extent tree that cannot be read tells nothing */
		UB_SET(btrfs_file_extent_item, disk_bytenr, d, want);
		said(b, "inode %llu: file extent at %llu: disk_bytenr %llu -> %llu, the extent whose back reference "
		     "names it", (unsigned long long)k->objectid, (unsigned long long)k->offset,
		     (unsigned long long)bytenr, (unsigned long long)want);
		return 0;
	}
	if (UB_GET(btrfs_file_extent_item, compression, d) != 0)
		return -EUCLEAN;
	ram = UB_GET(btrfs_file_extent_item, ram_bytes, d);
	if (ram == size - UB_FILE_EXTENT_INLINE_DATA_START)
		return -EUCLEAN;
	UB_SET(btrfs_file_extent_item, ram_bytes, d, size - UB_FILE_EXTENT_INLINE_DATA_START);
	said(b, "inode %llu: inline extent at %llu: ram_bytes %llu -> %u, its data's length",
	     (unsigned long long)k->objectid, (unsigned long long)k->offset, (unsigned long long)ram,
	     size - UB_FILE_EXTENT_INLINE_DATA_START);
	return 0;
}

/* Remove item `slot` from the leaf (its data closed up). */
static void drop_item(uint8_t *buf, uint32_t slot)
{
	uint32_t n = (uint32_t)HDR(nritems, buf), size = item_size(buf, slot), off = item_off(buf, slot);
	uint32_t low = n ? item_off(buf, n - 1) : 0;

	/* the data of later slots lies below this one's: moved up by its size */
	memmove(buf + UB_HEADER_SIZE + low + size, buf + UB_HEADER_SIZE + low, off - low);
	for (uint32_t i = slot + 1; i < n; i++)
		UB_SET(ub_disk_item, offset, ITEM(buf, i), item_off(buf, i) + size);
	memmove(ITEM(buf, slot), ITEM(buf, slot + 1), (size_t)(n - slot - 1) * UB_ITEM_SIZE);
	UB_SET(ub_disk_header, nritems, buf, n - 1);
}

static int cure_dir(struct salv_block *b, uint32_t slot, const struct ub_key *k)
{
	const uint8_t *d = item_data(b->buf, slot);
	uint32_t size = item_size(b->buf, slot), pos = 0;
	int names = 0;

	/* every inode an entry of the item names gets its names made whole after the item goes */
	while (pos + sizeof(struct btrfs_dir_item) <= size) {
		const uint8_t *e = d + pos;
		struct ub_key loc;
		uint32_t len = (uint32_t)sizeof(struct btrfs_dir_item) + (uint32_t)UB_GET(btrfs_dir_item, name_len, e) +
			       (uint32_t)UB_GET(btrfs_dir_item, data_len, e);

		ub_key_read(&loc, UB_PTR(btrfs_dir_item, location, e));
		if (loc.type == BTRFS_INODE_ITEM_KEY && b->npend < (int)(sizeof(b->pend) / sizeof(b->pend[0])))
			b->pend[b->npend++] = (struct salv_name){ b->n->tree, loc.objectid, k->objectid };
		names++;
		pos += len;
	}
	drop_item(b->buf, slot);
	said(b, "%s (%llu %u %llu) dropped (%d entries; their names made again from what else names them)",
	     k->type == BTRFS_DIR_ITEM_KEY ? "DIR_ITEM" : "DIR_INDEX", (unsigned long long)k->objectid, k->type,
	     (unsigned long long)k->offset, names);
	return 0;
}

static int cure_tree_extent(struct salv_block *b, uint32_t slot, const struct ub_key *k)
{
	uint8_t *d = item_data(b->buf, slot), hdr[UB_HEADER_SIZE];
	uint32_t size = item_size(b->buf, slot);
	uint64_t flags;
	struct ub_key nk = *k;
	int ret;

	if (k->type != BTRFS_METADATA_ITEM_KEY || size < sizeof(struct btrfs_extent_item))
		return -EUCLEAN;
	ret = read_header(b->vol, k->objectid, hdr);
	if (ret)
		return ret == -ENOMEM ? ret : -EUCLEAN;
	if (k->offset != HDR(level, hdr)) {
		nk.offset = HDR(level, hdr);
		set_item_key(b->buf, slot, &nk);
		said(b, "extent item of tree block %llu: level %llu -> %llu, its header's", (unsigned long long)k->objectid,
		     (unsigned long long)k->offset, (unsigned long long)nk.offset);
		return 0;
	}
	flags = UB_GET(btrfs_extent_item, flags, d);
	if ((flags & (BTRFS_EXTENT_FLAG_DATA | BTRFS_EXTENT_FLAG_TREE_BLOCK)) == BTRFS_EXTENT_FLAG_TREE_BLOCK)
		return -EUCLEAN;
	/* no valid flags: the item is garbage; one reference of the block's owner, as its header says */
	if (size != sizeof(struct btrfs_extent_item) + 1 + 8)
		return -EUCLEAN;
	memset(d, 0, size);
	UB_SET(btrfs_extent_item, refs, d, 1);
	UB_SET(btrfs_extent_item, generation, d, HDR(generation, hdr));
	UB_SET(btrfs_extent_item, flags, d, BTRFS_EXTENT_FLAG_TREE_BLOCK);
	d[sizeof(struct btrfs_extent_item)] = BTRFS_TREE_BLOCK_REF_KEY;
	ub_put_le(d + sizeof(struct btrfs_extent_item) + 1, 8, HDR(owner, hdr));
	said(b, "extent item of tree block %llu remade from its header: one reference of tree %llu, generation %llu",
	     (unsigned long long)k->objectid, (unsigned long long)HDR(owner, hdr),
	     (unsigned long long)HDR(generation, hdr));
	return 0;
}

static int cure_block_group(struct salv_block *b, uint32_t slot, const struct ub_key *k)
{
	uint8_t *d = item_data(b->buf, slot);

	if (item_size(b->buf, slot) != sizeof(struct btrfs_block_group_item) ||
	    UB_GET(btrfs_block_group_item, used, d) <= k->offset)
		return -EUCLEAN;
	/* a placeholder the repair's open replaces: it recounts every group's used bytes from the extents */
	UB_SET(btrfs_block_group_item, used, d, 0);
	b->space = true;
	said(b, "block group %llu: used bytes beyond its length, recounted from its extents",
	     (unsigned long long)k->objectid);
	return 0;
}

static int cure_root_key(struct salv_block *b, uint32_t slot, const struct ub_key *k)
{
	struct ub_key nk = *k;

	if (b->n->tree != BTRFS_ROOT_TREE_OBJECTID || item_size(b->buf, slot) != sizeof(struct btrfs_root_item))
		return -EUCLEAN;
	nk.type = BTRFS_ROOT_ITEM_KEY;
	set_item_key(b->buf, slot, &nk);
	said(b, "key (%llu %u %llu): a root item's size in the root tree, type ROOT_ITEM again",
	     (unsigned long long)k->objectid, k->type, (unsigned long long)k->offset);
	return 0;
}

/*
 * Insert an item of `size` bytes (zeroed) with key `k` at `slot`: 0, or
 * -ENOSPC when the leaf has no room. The data of the items from `slot` on
 * moves down by `size`, as the kernel's insert does.
 */
static int insert_item(uint8_t *buf, uint32_t nodesize, uint32_t slot, const struct ub_key *k, uint32_t size)
{
	uint32_t n = (uint32_t)HDR(nritems, buf), data_size = nodesize - UB_HEADER_SIZE;
	uint32_t top = slot ? item_off(buf, slot - 1) : data_size, low = n ? item_off(buf, n - 1) : data_size;

	if (slot > n || low < size || low - size < (n + 1) * UB_ITEM_SIZE)
		return -ENOSPC;
	memmove(buf + UB_HEADER_SIZE + low - size, buf + UB_HEADER_SIZE + low, top - low);
	for (uint32_t i = slot; i < n; i++)
		UB_SET(ub_disk_item, offset, ITEM(buf, i), item_off(buf, i) - size);
	memmove(ITEM(buf, slot + 1), ITEM(buf, slot), (size_t)(n - slot) * UB_ITEM_SIZE);
	set_item_key(buf, slot, k);
	UB_SET(ub_disk_item, offset, ITEM(buf, slot), top - size);
	UB_SET(ub_disk_item, size, ITEM(buf, slot), size);
	memset(buf + UB_HEADER_SIZE + top - size, 0, size);
	UB_SET(ub_disk_header, nritems, buf, n + 1);
	return 0;
}

/*
 * An inode's items with no INODE_ITEM before them: one made from what the
 * leaf says (the type an entry naming it gives, its names for nlink, its
 * file extents for the size), generation and transid the leaf's, times now;
 * owner-only permissions. A second round of the repair counts the rest
 * (nlink, size, nbytes) again from the items.
 */
static int cure_missing_inode(struct salv_block *b, uint32_t slot, const struct ub_key *k)
{
	uint8_t *buf = b->buf, *d;
	uint32_t n = (uint32_t)HDR(nritems, buf), type = leaf_says_type(buf, k->objectid, b->n->tree), nlink = 0;
	uint64_t size = 0, now = (uint64_t)time(NULL), gen = HDR(generation, buf);
	struct ub_key ik = { k->objectid, BTRFS_INODE_ITEM_KEY, 0 };
	int ret;

	for (uint32_t i = slot; i < n; i++) {
		struct ub_key ck;
		const uint8_t *cd = buf + UB_HEADER_SIZE + item_off(buf, i);
		uint32_t cs = item_size(buf, i);

		item_key(buf, i, &ck);
		if (ck.objectid != k->objectid)
			break;
		if (ck.type == BTRFS_INODE_REF_KEY) {
			for (uint32_t pos = 0; pos + sizeof(struct btrfs_inode_ref) <= cs; nlink++)
				pos += (uint32_t)sizeof(struct btrfs_inode_ref) + (uint32_t)UB_GET(btrfs_inode_ref, name_len, cd + pos);
		} else if (ck.type == BTRFS_EXTENT_DATA_KEY && cs > UB_FILE_EXTENT_INLINE_DATA_START) {
			bool inl = UB_GET(btrfs_file_extent_item, type, cd) == BTRFS_FILE_EXTENT_INLINE;
			uint64_t len = inl ? UB_GET(btrfs_file_extent_item, ram_bytes, cd) :
				       cs >= sizeof(struct btrfs_file_extent_item) ? UB_GET(btrfs_file_extent_item, num_bytes, cd) : 0;

			if (ck.offset + len > size)
				size = ck.offset + len;
		}
	}
	if (!type)
		type = S_IFREG;
	ret = insert_item(buf, b->vol->nodesize, slot, &ik, sizeof(struct btrfs_inode_item));
	if (ret)
		return -EUCLEAN;
	d = item_data(buf, slot);
	UB_SET(btrfs_inode_item, generation, d, gen);
	UB_SET(btrfs_inode_item, transid, d, gen);
	UB_SET(btrfs_inode_item, size, d, type == S_IFREG ? size : 0);
	UB_SET(btrfs_inode_item, nlink, d, nlink ? nlink : 1);
	UB_SET(btrfs_inode_item, mode, d, type | (type == S_IFDIR ? 0700 : 0600));
	ub_put_le(d + offsetof(struct btrfs_inode_item, atime), 8, now);
	ub_put_le(d + offsetof(struct btrfs_inode_item, ctime), 8, now);
	ub_put_le(d + offsetof(struct btrfs_inode_item, mtime), 8, now);
	said(b, "inode %llu: its INODE_ITEM made again from the leaf (mode 0%o, nlink %u, size %llu)",
	     (unsigned long long)k->objectid, type | (type == S_IFDIR ? 0700 : 0600), nlink ? nlink : 1,
	     (unsigned long long)(type == S_IFREG ? size : 0));
	return 0;
}

static int cure_item(struct salv_block *b, uint32_t slot, const char *why)
{
	struct ub_key k;

	item_key(b->buf, slot, &k);
	if (strstr(why, "belongs to another inode; the INODE_ITEM of"))
		return cure_missing_inode(b, slot, &k);
	switch (k.type) {
	case BTRFS_INODE_ITEM_KEY:
		return cure_inode(b, slot, &k);
	case BTRFS_EXTENT_DATA_KEY:
		return cure_file_extent(b, slot, &k);
	case BTRFS_DIR_ITEM_KEY:
	case BTRFS_DIR_INDEX_KEY:
		return cure_dir(b, slot, &k);
	case BTRFS_METADATA_ITEM_KEY:
		return cure_tree_extent(b, slot, &k);
	case BTRFS_BLOCK_GROUP_ITEM_KEY:
		return cure_block_group(b, slot, &k);
	case BTRFS_CHUNK_ITEM_KEY:
		return cure_root_key(b, slot, &k);
	default:
		return -EUCLEAN;
	}
}

/*
 * One copy cured in b->buf: 0 when it passes every check (what is left said
 * in `why`), -EUCLEAN when a rule is broken that no cure here mends.
 */
static int cure_copy(struct salv_block *b, char *why, size_t whylen)
{
	struct ub_volume *vol = b->vol;
	uint8_t *buf = b->buf, csum[UB_CSUM_SIZE_MAX];
	uint64_t gen = HDR(generation, buf), level = HDR(level, buf);
	struct ub_check_ctx cctx;
	uint32_t n;
	int ret;

	ub_csum(vol->csum_type, buf + UB_CSUM_SIZE_MAX, vol->nodesize - UB_CSUM_SIZE_MAX, csum);
	if (memcmp(csum, buf, vol->csum_size)) {
		snprintf(why, whylen, "checksum mismatch");
		return -EUCLEAN;
	}
	if (HDR(bytenr, buf) != b->n->inode || memcmp(UB_PTR(ub_disk_header, fsid, buf), vol->metadata_uuid, UB_FSID_SIZE) ||
	    level >= UB_MAX_LEVEL || (b->n->want2 != UINT64_MAX && level != b->n->want2)) {
		snprintf(why, whylen, "header not of this block (address, filesystem or level)");
		return -EUCLEAN;
	}
	if (gen > vol->generation + 1) {
		if (!b->n->want || b->n->want > vol->generation) {
			/* the pointer says the same future generation: the copy on write replaces both */
			if (b->n->want != gen) {
				snprintf(why, whylen, "generation %llu from the future, and no pointer tells the right one",
					 (unsigned long long)gen);
				return -EUCLEAN;
			}
		} else {
			UB_SET(ub_disk_header, generation, buf, b->n->want);
			said(b, "header generation %llu -> %llu, its pointer's", (unsigned long long)gen,
			     (unsigned long long)b->n->want);
		}
	}
	if (level == 0) {
		ret = relay_items(b, vol->nodesize);
		if (ret < 0) {
			snprintf(why, whylen, "the items do not fit the block");
			return ret;
		}
	}
	cctx.nodesize = vol->nodesize;
	cctx.sectorsize = vol->sectorsize;
	cctx.csum_size = vol->csum_size;
	cctx.incompat_flags = UB_GET(ub_disk_super, incompat_flags, vol->super);
	cctx.owner = HDR(owner, buf);
	n = (uint32_t)HDR(nritems, buf);
	/* each pass cures the slot the check names; a cure that mends nothing ends it */
	for (uint32_t pass = 0; pass <= 2 * n + 2; pass++) {
		int slot;

		why[0] = '\0';
		if (!ub_tree_check_block(buf, &cctx, why, whylen))
			goto sealed;
		slot = why_slot(why);
		if (level != 0 || slot < 0 || (uint32_t)slot >= HDR(nritems, buf))
			return -EUCLEAN;
		ret = cure_item(b, (uint32_t)slot, why);
		if (ret)
			return ret == -ENOMEM ? ret : -EUCLEAN;
	}
	return -EUCLEAN;
sealed:
	ub_csum(vol->csum_type, buf + UB_CSUM_SIZE_MAX, vol->nodesize - UB_CSUM_SIZE_MAX, csum);
	memcpy(buf, csum, vol->csum_size);
	return 0;
}

static bool already(const struct rp_salvage *s, uint64_t bytenr)
{
	for (size_t i = 0; i < s->ndone; i++)
		if (s->done[i] == bytenr)
			return true;
	return false;
}

static int remember(struct rp_salvage *s, const struct salv_block *b)
{
	if (s->ndone == s->capdone) {
		size_t cap = s->capdone ? s->capdone * 2 : 8;
		uint64_t *m = realloc(s->done, cap * sizeof(*m));

		if (!m)
			return -ENOMEM;
		s->done = m;
		s->capdone = cap;
	}
	s->done[s->ndone++] = b->n->inode;
	for (int i = 0; i < b->npend; i++) {
		if (s->nnames == s->capnames) {
			size_t cap = s->capnames ? s->capnames * 2 : 8;
			struct salv_name *m = realloc(s->names, cap * sizeof(*m));

			if (!m)
				return -ENOMEM;
			s->names = m;
			s->capnames = cap;
		}
		s->names[s->nnames++] = b->pend[i];
	}
	s->space |= b->space;
	return 0;
}

/* One block: its copies cured until one passes, handed to the tree layer. 1: none could be. */
static int salvage_block(struct rp_ctx *c, struct ub_fs *fs, const struct rp_note *n)
{
	struct ub_volume *vol = fs->vol;
	struct salv_block b = { .fs = fs, .vol = vol, .n = n, .s = c->salvage };
	int copies = ub_volume_num_copies(vol, n->inode), ret = 1;
	char why[320] = "no copy can be read";

	b.buf = malloc(vol->nodesize);
	if (!b.buf)
		return -ENOMEM;
	for (int m = 1; m <= copies && ret == 1; m++) {
		b.donelen = 0;
		b.done[0] = '\0';
		b.npend = 0;
		b.space = false;
		if (ub_volume_read(vol, n->inode, vol->nodesize, m, b.buf))
			continue;
		ret = cure_copy(&b, why, sizeof(why));
		if (ret && ret != -ENOMEM)
			ret = 1;
	}
	if (ret == 0)
		ret = ub_tree_salvage_put(vol->metadata_uuid, n->inode, b.buf, vol->nodesize);
	if (ret == 0)
		ret = remember(c->salvage, &b);
	if (ret == 0)
		rp_say(c, n, 0, "%s tree block %llu of tree %llu (no copy passed the tree checks): %s%s",
		       c->opts->dry_run ? "would salvage" : "salvaging", (unsigned long long)n->inode,
		       (unsigned long long)n->tree, b.done[0] ? b.done : "nothing to cure",
		       c->opts->dry_run ? "" : "; copied on write in the transaction");
	else if (ret == 1)
		ub_warn(c->log, "repair: tree block %llu of tree %llu: no copy can be salvaged (%s); left as it is",
			(unsigned long long)n->inode, (unsigned long long)n->tree, why);
	free(b.buf);
	return ret;
}

int rp_salvage_prepare(struct rp_ctx *c)
{
	struct ub_fs_opts fo = { .super_mirror = -1, .no_log = true };
	struct ub_repair *r = c->r;
	struct ub_fs fs;
	size_t k = 0;
	bool any = false;
	int ret;

	for (size_t i = 0; i < r->nnotes; i++)
		any |= r->notes[i].fix == UB_CHK_FIX_SALVAGE;
	if (!any)
		return 0;
	c->salvage = calloc(1, sizeof(*c->salvage));
	if (!c->salvage)
		return -ENOMEM;
	memset(&fs, 0, sizeof(fs));
	ret = ub_fs_open_at(&fs, c->paths, NULL, c->npaths, &fo, c->log);
	if (ret) {
		ub_err(c->log, "repair: cannot open the devices to salvage tree blocks: %s", strerror(-ret));
		return ret;
	}
	/* a block shared by several trees is cured once; a note whose block cannot be is dropped */
	for (size_t i = 0; i < r->nnotes && !ret; i++) {
		struct rp_note *n = &r->notes[i];

		if (n->fix == UB_CHK_FIX_SALVAGE && !already(c->salvage, n->inode)) {
			ret = salvage_block(c, &fs, n);
			if (ret == 1) {
				ret = 0;
				continue;
			}
		}
		if (n->fix == UB_CHK_FIX_SALVAGE && !already(c->salvage, n->inode))
			continue;
		r->notes[k++] = *n;
	}
	if (!ret)
		r->nnotes = k;
	ub_fs_fini(&fs);
	if (ret)
		ub_tree_salvage_clear();
	return ret;
}

bool rp_salvage_space(const struct rp_ctx *c)
{
	return c->salvage && c->salvage->space;
}

bool rp_salvaged(const struct rp_ctx *c)
{
	return c->salvage && c->salvage->ndone;
}

int rp_salvage_cow(struct rp_ctx *c, const struct rp_note *n)
{
	struct ub_eroot *er;
	struct ub_path p;
	struct ub_eb *eb = NULL;
	struct ub_expect exp = { .level = -1 };
	struct ub_key first;
	int level, ret = 0;

	if (n->tree == BTRFS_ROOT_TREE_OBJECTID)
		er = c->e->fs.root_tree;
	else
		ret = ub_engine_root(c->e, n->tree, &er);
	if (!ret) {
		/* the first key of the cured block: a copy-on-write search for it passes through the block */
		ret = ub_tree_read_block(&c->e->fs.tc, n->inode, &exp, &eb);
	}
	if (ret) {
		ub_err(c->log, "repair: salvaged tree block %llu of tree %llu cannot be read: %s",
		       (unsigned long long)n->inode, (unsigned long long)n->tree, strerror(-ret));
		return ret;
	}
	level = ub_eb_level(eb);
	if (ub_eb_nritems(eb) == 0) {
		ub_eb_put(&c->e->fs.tc, eb);
		return -EUCLEAN;
	}
	ub_eb_item_key(eb, 0, &first);
	ub_eb_put(&c->e->fs.tc, eb);
	ub_path_init(&p);
	ret = ub_tree_search_slot(&c->e->fs.tc, ub_txn_ta(c->t), &er->root, &first, &p, 0, true);
	if (ret >= 0) {
		/* the path must have gone through a copy of the block, not the block itself nor around it */
		ret = level < UB_MAX_LEVEL && p.nodes[level] && p.nodes[level]->start != n->inode ? 0 : -EUCLEAN;
		if (ret)
			ub_err(c->log, "repair: salvaged tree block %llu of tree %llu was not reached by its tree's "
			       "copy on write: nothing committed", (unsigned long long)n->inode,
			       (unsigned long long)n->tree);
	}
	ub_path_release(&p);
	return ret;
}

int rp_salvage_names(struct rp_ctx *c)
{
	int ret = 0;

	for (size_t i = 0; c->salvage && i < c->salvage->nnames && !ret; i++) {
		const struct salv_name *s = &c->salvage->names[i];
		struct rp_note n = { .fix = UB_CHK_FIX_NAMES, .tree = s->tree, .inode = s->ino, .want = s->dir };

		ret = rp_fix_names(c, &n);
	}
	if (c->salvage)
		c->salvage->nnames = 0; /* made whole once: a second round must not do it again */
	return ret;
}

void rp_salvage_done(struct rp_ctx *c)
{
	if (!c->salvage)
		return;
	ub_tree_salvage_clear();
	free(c->salvage->names);
	free(c->salvage->done);
	free(c->salvage);
	c->salvage = NULL;
}

struct recheck {
	struct ub_repair *r;
	int err;
};

static void recheck_problem(void *arg, const struct ub_chk_problem *p)
{
	struct recheck *rc = arg;

	if (!rc->err)
		rc->err = ub_repair_note(rc->r, p);
}

int rp_salvage_recheck(struct rp_ctx *c, struct ub_repair *r2)
{
	struct recheck rc = { r2, 0 };
	struct ub_chk_sink sink = { recheck_problem, NULL, &rc };
	struct ub_chk_opts o = { 0 };
	struct ub_checker *chk;
	int ret = ub_checker_new(&o, &sink, &chk);

	if (ret)
		return ret;
	ret = ub_checker_run(chk, &c->e->fs);
	ub_checker_free(chk);
	return ret ? ret : rc.err;
}
