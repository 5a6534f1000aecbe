/* SPDX-License-Identifier: MIT */
/*
 * File data through the write engine, laid out as the kernel's writeback
 * would leave it (no-holes filesystems only: a hole is the absence of items).
 *
 *  - A file whose whole content stays within max_inline bytes (2048, below a
 *    sector, and what fits a leaf) from offset 0 is one uncompressed inline
 *    extent; nbytes = its ram_bytes.
 *  - Otherwise regular extents: data reserved in DATA block groups (the
 *    allocator gives RAID5/6 only whole free stripes), written with
 *    ub_volume_write, described by EXTENT_DATA items (disk_bytenr,
 *    disk_num_bytes, offset, num_bytes, ram_bytes) and referenced through the
 *    transaction's delayed-ref queue (EXTENT_DATA_REF root / inode / key
 *    offset - extent offset), checksummed per sector into the csum tree
 *    unless the inode is NODATASUM. nbytes = sum of num_bytes.
 *  - Writes are copy-on-write (except where the kernel writes in place:
 *    PREALLOC extents and NODATACOW files' unshared extents, see nocow_write
 *    at the end): the old items over the range are trimmed or
 *    split (a split adds one reference: two items now use the extent), and a
 *    wholly covered item is deleted with its reference. When an extent's
 *    references (its committed count plus this transaction's queued changes)
 *    reach zero, its checksums leave the csum tree: the commit frees the
 *    extent itself.
 *  - Bytes of the last sector past EOF are zero on disk after a truncate down
 *    (it rewrites that sector), but a filesystem the kernel wrote may hold
 *    old bytes there: growing a file rewrites that sector first, with zeros
 *    past the old EOF (fsw_zero_past), as the kernel's btrfs_cont_expand
 *    does, so growing never shows old data.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fsw/fsw.h"
#include "txn/log_tree.h"
#include "fs/compress.h"
#include "txn/backref.h"

#define II_GET(f, p) UB_GET(btrfs_inode_item, f, p)
#define II_SET(f, p, v) UB_SET(btrfs_inode_item, f, p, v)
#define FE_GET(f, p) UB_GET(btrfs_file_extent_item, f, p)
#define FE_SET(f, p, v) UB_SET(btrfs_file_extent_item, f, p, v)
#define INLINE_HDR UB_FILE_EXTENT_INLINE_DATA_START
/* the biggest extent one write makes (the kernel goes to 128 MiB; smaller keeps a reservation easy to place) */
#define MAX_EXTENT (1024 * 1024ULL)

static uint64_t ss_of(const struct fsw *w) { return w->e->fs.vol->sectorsize; }
static uint64_t round_down_ss(const struct fsw *w, uint64_t v) { return v - v % ss_of(w); }
static uint64_t round_up_ss(const struct fsw *w, uint64_t v) { return round_down_ss(w, v + ss_of(w) - 1); }

static uint32_t max_inline(const struct fsw *w)
{
	uint32_t m = w->e->fs.vol->nodesize - UB_HEADER_SIZE - UB_ITEM_SIZE - INLINE_HDR;

	if (m > w->e->max_inline)
		m = w->e->max_inline;
	if (m > w->e->fs.vol->sectorsize - 1)
		m = w->e->fs.vol->sectorsize - 1;
	return m;
}

void fsw_note_change(struct fsw *w, uint64_t ino, const uint8_t *ii, uint64_t start, uint64_t end)
{
	/* a small file's one inline extent is rewritten whole (or becomes regular): from 0 */
	if (!ii || II_GET(size, ii) <= max_inline(w) + ss_of(w))
		start = 0;
	/*
	 * past the end: the gap from the old end becomes a hole of the file, which
	 * the log must say (the last commit may have data there, from before a
	 * truncate)
	 */
	else if (start > II_GET(size, ii))
		start = II_GET(size, ii);
	start = round_down_ss(w, start);
	if (end != UINT64_MAX)
		end = end > UINT64_MAX - ss_of(w) ? UINT64_MAX : round_up_ss(w, end);
	ub_log_note(w->t, w->subvol, ino, start, end);
}

/* the file extent item whose range holds `pos`, or the first one after it: 0 (key, copy of the item), 1 none */
int fsw_extent_at(struct fsw *w, uint64_t ino, uint64_t pos, struct ub_key *key, uint8_t *fe, uint32_t *fsize)
{
	struct ub_key k = { ino, BTRFS_EXTENT_DATA_KEY, pos };
	struct ub_path p;
	const uint8_t *d;
	uint32_t size;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_search_le(w->tc, &w->fs->root, &k, &p);
	if (ret == 0) {
		ub_path_key(&p, &k);
		if (k.objectid != ino || k.type != BTRFS_EXTENT_DATA_KEY)
			ret = 1;
	}
	for (int pass = 0; ret >= 0 && pass < 2; pass++) {
		if (ret == 0) {
			uint64_t end;

			d = ub_path_data(&p, &size);
			if (size < INLINE_HDR) {
				ret = -EUCLEAN;
				break;
			}
			if (FE_GET(type, d) == BTRFS_FILE_EXTENT_INLINE)
				end = k.offset + FE_GET(ram_bytes, d);
			else if (size >= UB_FE_SIZE)
				end = k.offset + FE_GET(num_bytes, d);
			else {
				ret = -EUCLEAN;
				break;
			}
			if (end > pos || k.offset >= pos) {
				*key = k;
				*fsize = size < UB_FE_SIZE + 4096 ? size : UB_FE_SIZE + 4096;
				memcpy(fe, d, *fsize);
				ub_path_release(&p);
				return 0;
			}
		}
		/* the item before pos ends before it: the next one */
		if (pass == 0) {
			ub_path_release(&p);
			ub_path_init(&p);
			k = (struct ub_key){ ino, BTRFS_EXTENT_DATA_KEY, pos };
			ret = ub_tree_search(w->tc, &w->fs->root, &k, &p);
			if (ret == 2) {
				ret = 1;
				break;
			}
			if (ret >= 0) {
				ub_path_key(&p, &k);
				ret = k.objectid == ino && k.type == BTRFS_EXTENT_DATA_KEY ? 0 : 1;
				if (ret)
					break;
			}
		}
	}
	ub_path_release(&p);
	if (ret == 0)
		ret = 1;
	if (ret < 0)
		ub_err(&w->e->fs.log, "tree %llu inode %llu: bad file extent item near offset %llu",
		       (unsigned long long)w->subvol, (unsigned long long)ino, (unsigned long long)pos);
	return ret;
}

/*
 * Copy [off, off+len) of the file as the transaction sees it (zeros in holes
 * and past isize): through the readers' path in the live view, so every
 * sector is checked against the transaction's checksums and a bad copy is
 * skipped for a good one (copies, parity); -EIO when no copy is good, never
 * bytes nobody vouches for (a partial-sector write would give them fresh
 * checksums).
 */
static int read_range(struct fsw *w, uint64_t ino, const uint8_t *ii, uint64_t off, uint8_t *buf, uint64_t len)
{
	struct ub_inode inode = { .subvol = w->subvol, .ino = ino, .size = II_GET(size, ii),
				  .flags = II_GET(flags, ii) };
	struct ub_fs live;
	uint64_t got;

	memset(buf, 0, len);
	/* a live view of the engine's filesystem, made now: it sees every tree the transaction has */
	ub_fs_view_init_live(&live, &w->e->fs);
	return ub_file_read_inode(&live, &inode, off, len, buf, &got, NULL);
}

/* ---- checksums ---- */

static int csum_root(struct fsw *w, struct ub_eroot **out)
{
	return ub_engine_root(w->e, BTRFS_CSUM_TREE_OBJECTID, out);
}

static uint32_t csum_item_max(const struct fsw *w)
{
	/* the kernel's MAX_CSUM_ITEMS: two item headers' room kept in the leaf */
	return (w->e->fs.vol->nodesize - UB_HEADER_SIZE - 2 * UB_ITEM_SIZE) / w->e->fs.vol->csum_size - 1;
}

/* the key and size of the item at or before csum key offset `at` (0; 1: none) */
static int csum_item_le(struct fsw *w, struct ub_eroot *cr, uint64_t at, struct ub_key *k, uint32_t *size)
{
	struct ub_path p;
	int ret;

	*k = (struct ub_key){ BTRFS_EXTENT_CSUM_OBJECTID, BTRFS_EXTENT_CSUM_KEY, at };
	*size = 0;
	ub_path_init(&p);
	ret = ub_tree_search_le(w->tc, &cr->root, k, &p);
	if (ret == 0) {
		ub_path_key(&p, k);
		ub_path_data(&p, size);
	}
	ub_path_release(&p);
	return ret;
}

/* pre: the sums already computed (ub_fsw_compress_extent), or NULL */
static int csum_insert(struct fsw *w, uint64_t bytenr, const uint8_t *data, uint64_t len, const uint8_t *pre)
{
	uint32_t cs = w->e->fs.vol->csum_size;
	uint64_t ss = ss_of(w), n = len / ss;
	uint8_t *sums;
	int ret = 0;

	if (pre)
		return fsw_csum_put(w, bytenr, pre, n);
	sums = malloc(n * cs);
	if (!sums)
		return -ENOMEM;
	for (uint64_t i = 0; i < n && !ret; i++) {
		uint8_t c[UB_CSUM_SIZE_MAX];

		ret = ub_csum(w->e->fs.vol->csum_type, data + i * ss, ss, c);
		memcpy(sums + i * cs, c, cs);
	}
	if (!ret)
		ret = fsw_csum_put(w, bytenr, sums, n);
	free(sums);
	return ret;
}

int fsw_csum_put(struct fsw *w, uint64_t bytenr, const uint8_t *sums, uint64_t n)
{
	uint32_t cs = w->e->fs.vol->csum_size, max = csum_item_max(w);
	uint64_t ss = ss_of(w), done = 0;
	struct ub_eroot *cr;
	int ret;

	ret = csum_root(w, &cr);
	if (ret)
		return ret;
	/* extend the item that ends where this extent starts, as the kernel does */
	{
		struct ub_key k;
		struct ub_path p;
		uint32_t size;

		ret = csum_item_le(w, cr, bytenr - 1, &k, &size);
		if (ret == 0 && k.objectid == BTRFS_EXTENT_CSUM_OBJECTID && k.type == BTRFS_EXTENT_CSUM_KEY &&
		    size % cs == 0 && k.offset + (uint64_t)(size / cs) * ss == bytenr && size / cs < max) {
			uint64_t take = max - size / cs;
			if (take > n)
				take = n;
			ub_path_init(&p);
			ret = ub_tree_search_slot(w->tc, w->ta, &cr->root, &k, &p, (int)(take * cs), true);
			if (ret == 0)
				ret = ub_tree_extend_item(w->tc, w->ta, &cr->root, &p, (uint32_t)(take * cs));
			if (ret == 0) {
				uint8_t *d = ub_path_data_mut(&p, &size);
				if (!d) {
					ret = -EUCLEAN;
				} else {
					memcpy(d + size - take * cs, sums, take * cs);
					ub_path_mark_dirty(&p);
					done = take;
				}
			}
			ub_path_release(&p);
			if (ret == -ENOSPC || ret == -EOVERFLOW) {
				ret = 0; /* no room to grow it: a new item */
				done = 0;
			}
			if (ret > 0)
				ret = -EUCLEAN;
		} else if (ret >= 0) {
			ret = 0;
		}
	}
	while (!ret && done < n) {
		uint64_t take = n - done < max ? n - done : max;
		struct ub_key k = { BTRFS_EXTENT_CSUM_OBJECTID, BTRFS_EXTENT_CSUM_KEY, bytenr + done * ss };

		ret = ub_tree_insert_item(w->tc, w->ta, &cr->root, &k, sums + done * cs, (uint32_t)(take * cs));
		done += take;
	}
	return ret;
}

/* remove every checksum of [start, start+len) (items trimmed or split at the edges) */
static int csum_delete(struct fsw *w, uint64_t start, uint64_t len)
{
	uint32_t cs = w->e->fs.vol->csum_size;
	uint64_t ss = ss_of(w), end = start + len;
	struct ub_eroot *cr;
	int ret;

	ret = csum_root(w, &cr);
	if (ret)
		return ret == -ENOENT ? 0 : ret;
	for (;;) {
		struct ub_key k = { BTRFS_EXTENT_CSUM_OBJECTID, BTRFS_EXTENT_CSUM_KEY, end - 1 };
		struct ub_path p;
		const uint8_t *d;
		uint8_t *tail = NULL;
		uint32_t size;
		uint64_t cstart, cend, keep_head, tail_n = 0;

		ub_path_init(&p);
		ret = ub_tree_search_le(w->tc, &cr->root, &k, &p);
		if (ret == 0) {
			ub_path_key(&p, &k);
			d = ub_path_data(&p, &size);
		}
		if (ret || k.objectid != BTRFS_EXTENT_CSUM_OBJECTID || k.type != BTRFS_EXTENT_CSUM_KEY) {
			ub_path_release(&p);
			return ret < 0 ? ret : 0;
		}
		if (size % cs) {
			ub_path_release(&p);
			ub_err(&w->e->fs.log, "csum tree: EXTENT_CSUM %llu of %u bytes, not a multiple of %u",
			       (unsigned long long)k.offset, size, cs);
			return -EUCLEAN;
		}
		cstart = k.offset;
		cend = cstart + (uint64_t)(size / cs) * ss;
		if (cend <= start) {
			ub_path_release(&p);
			return 0;
		}
		keep_head = cstart < start ? (start - cstart) / ss : 0;
		if (cend > end) {
			tail_n = (cend - end) / ss;
			tail = malloc(tail_n * cs);
			if (!tail) {
				ub_path_release(&p);
				return -ENOMEM;
			}
			memcpy(tail, d + size - tail_n * cs, tail_n * cs);
		}
		ub_path_release(&p);
		ub_path_init(&p);
		ret = ub_tree_search_slot(w->tc, w->ta, &cr->root, &k, &p, -1, true);
		if (ret == 0) {
			if (keep_head) {
				ub_tree_truncate_item(w->tc, &p, (uint32_t)(keep_head * cs), true);
				ub_path_mark_dirty(&p);
			} else {
				ret = ub_tree_del_items(w->tc, w->ta, &cr->root, &p, p.slots[0], 1);
			}
		}
		ub_path_release(&p);
		if (ret == 0 && tail_n) {
			k.offset = end;
			ret = ub_tree_insert_item(w->tc, w->ta, &cr->root, &k, tail, (uint32_t)(tail_n * cs));
		}
		free(tail);
		if (ret)
			return ret > 0 ? -EUCLEAN : ret;
	}
}

int fsw_csum_delete(struct fsw *w, uint64_t start, uint64_t len)
{
	return csum_delete(w, start, len);
}

/* after dropping a reference: if nothing references the extent any more, its checksums go */
static int maybe_free_csums(struct fsw *w, uint64_t bytenr, uint64_t num_bytes)
{
	const struct ub_dref_head *h = ub_dref_find(w->t->refs, bytenr);
	int64_t refs = 0;
	int ret;

	if (!h || !h->new_extent) {
		struct ub_key k = { bytenr, BTRFS_EXTENT_ITEM_KEY, num_bytes };
		struct ub_path p;
		const uint8_t *d;
		uint32_t size;

		ub_path_init(&p);
		ret = ub_tree_lookup(w->tc, &w->e->fs.extent_tree->root, &k, &p, &d, &size);
		if (ret == 0 && size >= sizeof(struct btrfs_extent_item))
			refs = (int64_t)UB_GET(btrfs_extent_item, refs, d);
		else if (ret == 0)
			ret = -EUCLEAN;
		ub_path_release(&p);
		if (ret) {
			ub_err(&w->e->fs.log, "data extent %llu (%llu bytes): no extent item (%d)", (unsigned long long)bytenr,
			       (unsigned long long)num_bytes, ret);
			return ret == -ENOENT ? -EUCLEAN : ret;
		}
	}
	if (h)
		refs += h->total_delta;
	if (refs < 0)
		return -EUCLEAN;
	return refs == 0 ? csum_delete(w, bytenr, num_bytes) : 0;
}

/* ---- file extent items ---- */

static int fe_replace(struct fsw *w, const struct ub_key *k, const uint8_t *fe, uint32_t size)
{
	struct ub_path p;
	uint32_t cur;
	uint8_t *d;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_search_slot(w->tc, w->ta, &w->fs->root, k, &p, 0, true);
	if (ret == 0) {
		d = ub_path_data_mut(&p, &cur);
		if (!d || cur < size) {
			ret = -EUCLEAN;
		} else {
			memcpy(d, fe, size);
			if (cur > size)
				ub_tree_truncate_item(w->tc, &p, size, true);
			ub_path_mark_dirty(&p);
		}
	}
	ub_path_release(&p);
	return ret > 0 ? -EUCLEAN : ret;
}

int fsw_drop_extents(struct fsw *w, uint64_t ino, uint8_t *ii, uint64_t start, uint64_t end)
{
	uint8_t *fe = malloc(UB_FE_SIZE + 4096);
	int ret = 0;

	if (!fe)
		return -ENOMEM;
	while (start < end) {
		struct ub_key k;
		uint32_t fsize;
		uint64_t es, ee, bytenr, dlen, eoff, nbytes = II_GET(nbytes, ii);

		ret = fsw_extent_at(w, ino, start, &k, fe, &fsize);
		if (ret) {
			ret = ret > 0 ? 0 : ret;
			break;
		}
		es = k.offset;
		if (es >= end)
			break;
		if (FE_GET(type, fe) == BTRFS_FILE_EXTENT_INLINE) {
			uint64_t ram = FE_GET(ram_bytes, fe);

			if (start == 0 || FE_GET(compression, fe) != UB_COMPRESS_NONE) {
				ret = fsw_del_key(w, &w->fs->root, &k);
				II_SET(nbytes, ii, nbytes >= ram ? nbytes - ram : 0);
			} else {
				/* keep the head, as the kernel truncates an uncompressed inline extent */
				FE_SET(ram_bytes, fe, start);
				ret = fe_replace(w, &k, fe, INLINE_HDR + (uint32_t)start);
				II_SET(nbytes, ii, nbytes >= ram - start ? nbytes - (ram - start) : 0);
			}
			if (ret)
				break;
			continue;
		}
		if (fsize < UB_FE_SIZE) {
			ret = -EUCLEAN;
			break;
		}
		ee = es + FE_GET(num_bytes, fe);
		bytenr = FE_GET(disk_bytenr, fe);
		dlen = FE_GET(disk_num_bytes, fe);
		eoff = FE_GET(offset, fe);
		if (es < start && ee > end) {
			/* split: [es, start) stays, [end, ee) becomes a second item of the same extent */
			uint8_t nfe[UB_FE_SIZE];
			struct ub_key nk = { ino, BTRFS_EXTENT_DATA_KEY, end };

			memcpy(nfe, fe, UB_FE_SIZE);
			FE_SET(num_bytes, fe, start - es);
			ret = fe_replace(w, &k, fe, UB_FE_SIZE);
			FE_SET(offset, nfe, eoff + (end - es));
			FE_SET(num_bytes, nfe, ee - end);
			if (!ret)
				ret = ub_tree_insert_item(w->tc, w->ta, &w->fs->root, &nk, nfe, UB_FE_SIZE);
			if (!ret && bytenr)
				ret = ub_dref_add_data(w->t->refs, bytenr, dlen, w->subvol, ino, es - eoff, 0, 1, 0);
			if (bytenr)
				II_SET(nbytes, ii, nbytes - (end - start));
			if (ret)
				break;
			break;
		} else if (es < start) {
			FE_SET(num_bytes, fe, start - es);
			ret = fe_replace(w, &k, fe, UB_FE_SIZE);
			if (bytenr)
				II_SET(nbytes, ii, nbytes - (ee - start));
		} else if (ee > end) {
			/* the head goes: the item moves to `end` (same reference: key offset - offset is unchanged) */
			struct ub_key nk = { ino, BTRFS_EXTENT_DATA_KEY, end };

			FE_SET(offset, fe, eoff + (end - es));
			FE_SET(num_bytes, fe, ee - end);
			ret = fsw_del_key(w, &w->fs->root, &k);
			if (!ret)
				ret = ub_tree_insert_item(w->tc, w->ta, &w->fs->root, &nk, fe, UB_FE_SIZE);
			if (bytenr)
				II_SET(nbytes, ii, nbytes - (end - es));
		} else {
			ret = fsw_del_key(w, &w->fs->root, &k);
			if (!ret && bytenr) {
				ret = ub_dref_add_data(w->t->refs, bytenr, dlen, w->subvol, ino, es - eoff, 0, -1, 0);
				if (!ret)
					ret = maybe_free_csums(w, bytenr, dlen);
			}
			if (bytenr)
				II_SET(nbytes, ii, nbytes - (ee - es));
		}
		if (ret)
			break;
	}
	free(fe);
	return ret;
}

/*
 * The kernel reads lzo and zstd extents only on a filesystem that says it has
 * them (incompat bits): the first one written sets the bit in the superblock
 * the next commit writes.
 */
static void note_compression(struct fsw *w, int ctype)
{
	uint64_t bit = ctype == UB_COMPRESS_LZO ? BTRFS_FEATURE_INCOMPAT_COMPRESS_LZO
		     : ctype == UB_COMPRESS_ZSTD ? BTRFS_FEATURE_INCOMPAT_COMPRESS_ZSTD : 0;

	if (!bit || (w->e->incompat & bit))
		return;
	w->e->incompat |= bit;
	UB_SET(ub_disk_super, incompat_flags, w->e->fs.vol->super, w->e->incompat);
}

/* one new extent of n bytes at file offset pos: disk holds dbuf (dlen bytes; compressed when ctype) */
static int add_extent_sums(struct fsw *w, uint64_t ino, uint8_t *ii, uint64_t pos, const uint8_t *dbuf,
			   uint64_t dlen, uint64_t n, int ctype, uint8_t type, const uint8_t *sums)
{
	bool sum = type == BTRFS_FILE_EXTENT_REG && !(II_GET(flags, ii) & UB_INODE_NODATASUM);
	uint8_t fe[UB_FE_SIZE];
	struct ub_key k = { ino, BTRFS_EXTENT_DATA_KEY, pos };
	uint64_t start = 0;
	int ret;

	ret = ub_txn_reserve_data(w->t, dlen, 0, &start);
	if (ret)
		return ret;
	note_compression(w, ctype);
	if (dbuf) {
		ret = ub_volume_write(w->e->fs.vol, start, dlen, dbuf);
		if (ret) {
			ub_alloc_unreserve(w->e->alloc, start, dlen);
			return ret;
		}
	}
	memset(fe, 0, sizeof(fe));
	FE_SET(generation, fe, w->t->transid);
	FE_SET(ram_bytes, fe, n);
	FE_SET(compression, fe, ctype);
	FE_SET(type, fe, type);
	FE_SET(disk_bytenr, fe, start);
	FE_SET(disk_num_bytes, fe, dlen);
	FE_SET(offset, fe, 0);
	FE_SET(num_bytes, fe, n);
	ret = ub_dref_add_data(w->t->refs, start, dlen, w->subvol, ino, pos, 0, 1, UB_DREF_NEW_EXTENT);
	if (ret) {
		ub_alloc_unreserve(w->e->alloc, start, dlen);
		return ret;
	}
	/* from here the queue owns the reservation (unreserved at commit if every ref cancels) */
	ret = ub_tree_insert_item(w->tc, w->ta, &w->fs->root, &k, fe, UB_FE_SIZE);
	if (!ret && sum)
		ret = csum_insert(w, start, dbuf, dlen, sums);
	if (!ret)
		II_SET(nbytes, ii, II_GET(nbytes, ii) + n);
	return ret;
}

static int add_extent(struct fsw *w, uint64_t ino, uint8_t *ii, uint64_t pos, const uint8_t *dbuf, uint64_t dlen,
		      uint64_t n, int ctype, uint8_t type)
{
	return add_extent_sums(w, ino, ii, pos, dbuf, dlen, n, ctype, type, NULL);
}

/* the kernel's BTRFS_MAX_UNCOMPRESSED: file bytes per compressed extent */
#define MAX_COMPRESSED_RAM (128 * 1024ULL)

/* new extents holding buf at [off, off+len) (both sector aligned; the range holds no item) */
static int write_extents(struct fsw *w, uint64_t ino, uint8_t *ii, uint64_t off, const uint8_t *buf, uint64_t len)
{
	uint64_t done = 0, ss = ss_of(w);
	uint8_t *cbuf = NULL;
	int ret = 0;

	if (w->compress) {
		cbuf = malloc(MAX_COMPRESSED_RAM);
		if (!cbuf)
			return -ENOMEM;
	}
	while (!ret && done < len) {
		uint64_t n = len - done < MAX_EXTENT ? len - done : MAX_EXTENT;
		size_t clen = 0;

		if (cbuf) {
			if (n > MAX_COMPRESSED_RAM)
				n = MAX_COMPRESSED_RAM;
			ret = fsw_compress(w->compress, w->level, buf + done, n, (uint32_t)ss, cbuf, &clen);
			if (ret == 0) {
				uint64_t dlen = round_up_ss(w, clen);
				memset(cbuf + clen, 0, dlen - clen);
				ret = add_extent(w, ino, ii, off + done, cbuf, dlen, n, w->compress, BTRFS_FILE_EXTENT_REG);
				done += n;
				continue;
			}
			if (ret != -E2BIG)
				break;
			ret = 0;
		}
		for (;;) {
			ret = add_extent(w, ino, ii, off + done, buf + done, n, n, UB_COMPRESS_NONE, BTRFS_FILE_EXTENT_REG);
			if (ret != -ENOSPC || n <= ss)
				break;
			n = round_up_ss(w, n / 2);
		}
		done += n;
	}
	free(cbuf);
	return ret;
}

static int write_inline(struct fsw *w, uint64_t ino, uint8_t *ii, const uint8_t *buf, uint64_t len)
{
	uint8_t fe[INLINE_HDR + 4096];
	struct ub_key k = { ino, BTRFS_EXTENT_DATA_KEY, 0 };
	int ret;

	memset(fe, 0, INLINE_HDR);
	FE_SET(generation, fe, w->t->transid);
	FE_SET(ram_bytes, fe, len);
	FE_SET(compression, fe, UB_COMPRESS_NONE);
	FE_SET(type, fe, BTRFS_FILE_EXTENT_INLINE);
	memcpy(fe + INLINE_HDR, buf, len);
	ret = ub_tree_insert_item(w->tc, w->ta, &w->fs->root, &k, fe, INLINE_HDR + (uint32_t)len);
	if (!ret)
		II_SET(nbytes, ii, II_GET(nbytes, ii) + len);
	return ret;
}

static int has_inline(struct fsw *w, uint64_t ino, bool *yes)
{
	struct ub_key k = { ino, BTRFS_EXTENT_DATA_KEY, 0 };
	struct ub_path p;
	const uint8_t *d;
	uint32_t size;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_lookup(w->tc, &w->fs->root, &k, &p, &d, &size);
	*yes = ret == 0 && size >= INLINE_HDR && FE_GET(type, d) == BTRFS_FILE_EXTENT_INLINE;
	ub_path_release(&p);
	return ret == -ENOENT ? 0 : ret;
}

/* the file's data as one new content [0, size) when it is to be inline */
static int rewrite_inline(struct fsw *w, uint64_t ino, uint8_t *ii, uint64_t size, uint64_t off, const uint8_t *buf,
			  uint64_t len)
{
	uint8_t data[4096];
	int ret;

	ret = read_range(w, ino, ii, 0, data, size);
	if (ret)
		return ret;
	if (len)
		memcpy(data + off, buf, len);
	ret = fsw_drop_extents(w, ino, ii, 0, UINT64_MAX);
	if (!ret && size)
		ret = write_inline(w, ino, ii, data, size);
	return ret;
}

/* an inline file becomes a regular one: its data goes to sector 0 as an extent */
static int uninline(struct fsw *w, uint64_t ino, uint8_t *ii)
{
	uint64_t ss = ss_of(w);
	uint8_t *data = calloc(1, ss);
	int ret;

	if (!data)
		return -ENOMEM;
	ret = read_range(w, ino, ii, 0, data, ss);
	if (!ret)
		ret = fsw_drop_extents(w, ino, ii, 0, UINT64_MAX);
	if (!ret)
		ret = write_extents(w, ino, ii, 0, data, ss);
	free(data);
	return ret;
}

static int regular(struct fsw *w, uint64_t ino, uint8_t *ii)
{
	uint32_t fmt = (uint32_t)II_GET(mode, ii) & S_IFMT;

	if (fmt == S_IFDIR)
		return -EISDIR;
	if (fmt != S_IFREG)
		return -EINVAL;
	if (!(w->e->incompat & BTRFS_FEATURE_INCOMPAT_NO_HOLES))
		return -EOPNOTSUPP; /* hole items are not written */
	return 0;
}

static int nocow_write(struct fsw *w, uint64_t ino, uint8_t *ii, uint64_t pos, const uint8_t *buf, uint64_t len,
		       bool *done);

/* a change to the data of regular file ino: w set up, its inode item in ii */
int fsw_regular_inode(struct fsw *w, struct ub_txn *t, uint64_t subvol, uint64_t ino, uint8_t *ii)
{
	int ret = fsw_init(w, t, subvol);

	if (!ret)
		ret = fsw_inode_get(w, ino, ii);
	if (!ret)
		ret = regular(w, ino, ii);
	return ret;
}

/*
 * Room for new data: the pieces (sizes[i] bytes each; with `halve`, a piece
 * may be cut in halves down to a sector while space is short, as
 * write_extents cuts its extents) reserved and given back at once, the
 * allocator's hints put back: a write that cannot fit fails with -ENOSPC
 * before it changes anything, the writer lock keeps every other operation
 * from taking the room meanwhile, and the layout of what follows is the one
 * the write would have had anyway.
 */
static int room_for_once(struct fsw *w, const uint64_t *sizes, size_t npieces, bool halve);

/*
 * Room for these pieces: reserved to see that they fit, and given back. Space
 * this transaction freed is pinned until its commit, so a refusal commits once
 * and asks again (the kernel's data space flush commits the same way when a
 * reservation fails); nothing was changed before this check.
 */
static int room_for(struct fsw *w, const uint64_t *sizes, size_t npieces, bool halve)
{
	int ret = room_for_once(w, sizes, npieces, halve);

	if (ret == -ENOSPC) {
		ret = ub_txn_commit_keep(w->t);
		if (!ret)
			ret = room_for_once(w, sizes, npieces, halve);
	}
	return ret;
}

static int room_for_once(struct fsw *w, const uint64_t *sizes, size_t npieces, bool halve)
{
	uint64_t ss = ss_of(w), hints[3];
	struct { uint64_t start, len; } *got = NULL;
	size_t n = 0, cap = 0;
	int ret = 0;

	ub_alloc_hints(w->e->alloc, hints, false);
	for (size_t i = 0; !ret && i < npieces; i++) {
		uint64_t left = sizes[i], piece = sizes[i];

		while (left) {
			uint64_t want = left < piece ? left : piece, start;

			ret = ub_txn_reserve_data(w->t, want, 0, &start);
			if (ret == -ENOSPC && halve && piece > ss) {
				piece = round_up_ss(w, piece / 2);
				continue;
			}
			if (ret)
				break;
			if (n == cap) {
				size_t nc = cap ? 2 * cap : 16;
				void *g = realloc(got, nc * sizeof(*got));

				if (!g) {
					ub_alloc_unreserve(w->e->alloc, start, want);
					ret = -ENOMEM;
					break;
				}
				got = g;
				cap = nc;
			}
			got[n].start = start;
			got[n++].len = want;
			left -= want;
		}
	}
	for (size_t i = 0; i < n; i++)
		ub_alloc_unreserve(w->e->alloc, got[i].start, got[i].len);
	ub_alloc_hints(w->e->alloc, hints, true);
	free(got);
	return ret;
}

/*
 * Room for len bytes of plain data written at file offset pos, in the
 * pieces write_extents asks for. Writes that may go in place (a NODATACOW
 * file, a preallocated extent) need none, as for the kernel
 * (can_nocow_extent skips the data reservation).
 */
static int data_room(struct fsw *w, uint64_t ino, const uint8_t *ii, uint64_t pos, uint64_t len)
{
	uint64_t *sizes;
	size_t n = 0;
	int ret;

	if (II_GET(flags, ii) & UB_INODE_NODATACOW)
		return 0;
	{
		struct ub_key k;
		uint8_t *fe = malloc(UB_FE_SIZE + 4096);
		uint32_t fsize;

		if (!fe)
			return -ENOMEM;
		ret = fsw_extent_at(w, ino, pos, &k, fe, &fsize);
		if (ret == 0 && k.offset <= pos && FE_GET(type, fe) == BTRFS_FILE_EXTENT_PREALLOC)
			ret = 1;
		else
			ret = ret < 0 ? ret : 0;
		free(fe);
		if (ret)
			return ret > 0 ? 0 : ret;
	}
	sizes = malloc((len / MAX_EXTENT + 1) * sizeof(*sizes));
	if (!sizes)
		return -ENOMEM;
	for (uint64_t left = len; left; n++) {
		sizes[n] = left < MAX_EXTENT ? left : MAX_EXTENT;
		left -= sizes[n];
	}
	ret = room_for(w, sizes, n, true);
	free(sizes);
	return ret;
}

/*
 * The bytes of the sector holding `size` past it become zeros on disk, when
 * an extent covers that sector (a hole or a PREALLOC extent reads as zeros
 * anyway, and an inline extent ends at the size): after a truncate down, and
 * before a file grows past `size` (the kernel's btrfs_truncate_block from
 * btrfs_cont_expand), since a filesystem the kernel wrote may hold old bytes
 * there. ii's size must be at least `size`.
 */
int fsw_zero_past(struct fsw *w, uint64_t ino, uint8_t *ii, uint64_t size)
{
	uint64_t ss = ss_of(w), a0 = round_down_ss(w, size);
	uint8_t *sec, *fe;
	struct ub_key k;
	uint32_t fsize;
	int ret = 0;

	if (size % ss == 0)
		return 0;
	sec = calloc(1, ss);
	fe = malloc(UB_FE_SIZE + 4096);
	if (!sec || !fe)
		ret = -ENOMEM;
	if (!ret)
		ret = fsw_extent_at(w, ino, a0, &k, fe, &fsize);
	if (ret == 0 && k.offset < a0 + ss && k.offset + FE_GET(num_bytes, fe) > a0 &&
	    FE_GET(type, fe) == BTRFS_FILE_EXTENT_REG) {
		ret = read_range(w, ino, ii, a0, sec, size - a0);
		if (!ret)
			ret = fsw_drop_extents(w, ino, ii, a0, a0 + ss);
		if (!ret)
			ret = write_extents(w, ino, ii, a0, sec, ss);
	} else if (ret >= 0) {
		ret = 0;
	}
	free(sec);
	free(fe);
	return ret;
}

/* the write itself; ii updated (size, nbytes), not stored */
static int do_write(struct fsw *w, uint64_t ino, uint8_t *ii, uint64_t off, const uint8_t *buf, uint64_t len)
{
	uint64_t isize = II_GET(size, ii), nsize = off + len > isize ? off + len : isize, a0, a1;
	bool inl, inplace = false, whole, tail;
	uint8_t *win;
	int ret;

	ret = has_inline(w, ino, &inl);
	if (ret)
		return ret;
	if (nsize <= max_inline(w) && (inl || isize == 0)) {
		ret = rewrite_inline(w, ino, ii, nsize, off, buf, len);
		if (!ret)
			II_SET(size, ii, nsize);
		return ret;
	}
	a0 = round_down_ss(w, off);
	a1 = round_up_ss(w, off + len);
	/* a write that starts past the sector of the old EOF: that sector's bytes past it must not show */
	tail = !inl && isize % ss_of(w) && a0 > round_down_ss(w, isize);
	/* all the data room first: nothing changes unless the whole write fits */
	ret = data_room(w, ino, ii, a0, a1 - a0 + (inl || tail ? ss_of(w) : 0));
	if (ret)
		return ret;
	if (inl) {
		ret = uninline(w, ino, ii);
		if (ret)
			return ret;
	}
	if (tail) {
		ret = fsw_zero_past(w, ino, ii, isize);
		if (ret)
			return ret;
	}
	/* whole sectors need no window: the caller's bytes are written as they are */
	whole = a0 == off && a1 == off + len;
	win = whole ? NULL : malloc(a1 - a0);
	if (!whole && !win)
		return -ENOMEM;
	ret = 0;
	/* the partial sectors at both ends keep what the file holds there */
	if (off > a0)
		ret = read_range(w, ino, ii, a0, win, ss_of(w));
	if (!ret && off + len < a1)
		ret = read_range(w, ino, ii, a1 - ss_of(w), win + (a1 - a0) - ss_of(w), ss_of(w));
	if (!ret && win)
		memcpy(win + (off - a0), buf, len);
	if (!ret)
		ret = nocow_write(w, ino, ii, a0, win ? win : buf, a1 - a0, &inplace);
	if (!ret && !inplace)
		ret = fsw_drop_extents(w, ino, ii, a0, a1);
	if (!ret && !inplace)
		ret = write_extents(w, ino, ii, a0, win ? win : buf, a1 - a0);
	free(win);
	if (!ret)
		II_SET(size, ii, nsize);
	return ret;
}

/* the "btrfs.compression" property of the inode, as the kernel reads it */
static void compress_property(struct fsw *w, uint64_t ino, int *type, int *level)
{
	char v[32];
	size_t vlen = 0;

	*type = 0;
	*level = 0;
	if (ub_fsw_getxattr(w->t, w->subvol, ino, "btrfs.compression", 17, v, sizeof(v) - 1, &vlen))
		return;
	v[vlen] = 0;
	if (strncmp(v, "zlib", 4) == 0)
		*type = UB_COMPRESS_ZLIB;
	else if (strncmp(v, "lzo", 3) == 0)
		*type = UB_COMPRESS_LZO;
	else if (strncmp(v, "zstd", 4) == 0)
		*type = UB_COMPRESS_ZSTD;
	if (*type && (v[3] == ':' || v[4] == ':'))
		*level = atoi(strchr(v, ':') + 1);
}

int ub_fsw_write(struct ub_txn *t, uint64_t subvol, uint64_t ino, uint64_t off, const void *buf, size_t len)
{
	return ub_fsw_write_ex(t, subvol, ino, off, buf, len, -1, 0);
}

int ub_fsw_write_ex(struct ub_txn *t, uint64_t subvol, uint64_t ino, uint64_t off, const void *buf, size_t len,
		    int compress, int level)
{
	uint8_t ii[UB_II_SIZE];
	struct fsw w;
	int ret;

	if (compress > UB_COMPRESS_ZSTD)
		return -EINVAL;
	ret = fsw_init(&w, t, subvol);
	if (!ret && compress < 0)
		compress_property(&w, ino, &compress, &level);
	w.compress = compress;
	w.level = level;
	if (!ret)
		ret = fsw_inode_get(&w, ino, ii);
	if (!ret)
		ret = regular(&w, ino, ii);
	if (ret)
		return ret;
	/*
	 * The kernel never compresses a NODATACOW or NODATASUM file, whatever the
	 * mount or the property asks (btrfs_inode_can_compress): a compressed
	 * extent needs checksums, and btrfs check calls one without them bad.
	 */
	if (II_GET(flags, ii) & (UB_INODE_NODATACOW | UB_INODE_NODATASUM))
		w.compress = 0;
	if (len == 0)
		return 0;
	if (!buf || off + len < off || off + len > FSW_MAX_FILE_SIZE)
		return -EFBIG;
	fsw_note_change(&w, ino, ii, off, off + len);
	ret = do_write(&w, ino, ii, off, buf, len);
	if (ret)
		return ret;
	fsw_inode_touch(&w, ii, true, true);
	return fsw_inode_put(&w, ino, ii);
}

int fsw_truncate_locked(struct fsw *w, uint64_t ino, uint8_t *ii, uint64_t size)
{
	uint64_t isize = II_GET(size, ii), ss = ss_of(w);
	bool inl;
	int ret;

	ret = regular(w, ino, ii);
	if (!ret)
		ret = has_inline(w, ino, &inl);
	if (ret || size == isize)
		return ret;
	if (size > FSW_MAX_FILE_SIZE)
		return -EFBIG;
	fsw_note_change(w, ino, ii, size < isize ? size : isize, UINT64_MAX);
	if (inl) {
		if (size <= max_inline(w))
			ret = rewrite_inline(w, ino, ii, size, 0, NULL, 0);
		else
			ret = uninline(w, ino, ii);
	} else if (size < isize) {
		ret = fsw_drop_extents(w, ino, ii, round_up_ss(w, size), UINT64_MAX);
		/* the last sector's bytes past the new EOF become zeros on disk */
		if (!ret)
			ret = fsw_zero_past(w, ino, ii, size);
	} else if (isize % ss) {
		/* growing: what lay past the old EOF in its sector must not show */
		ret = data_room(w, ino, ii, round_down_ss(w, isize), ss);
		if (!ret)
			ret = fsw_zero_past(w, ino, ii, isize);
	}
	if (!ret)
		II_SET(size, ii, size);
	return ret;
}

int ub_fsw_truncate(struct ub_txn *t, uint64_t subvol, uint64_t ino, uint64_t size)
{
	struct ub_fsw_attr a = { .valid = UB_FSW_ATTR_SIZE, .size = size };

	return ub_fsw_setattr(t, subvol, ino, &a);
}

int ub_fsw_read(struct ub_txn *t, uint64_t subvol, uint64_t ino, uint64_t off, void *buf, size_t len, size_t *got)
{
	uint8_t ii[UB_II_SIZE];
	uint64_t isize;
	struct fsw w;
	int ret;

	ret = fsw_init_ro(&w, t, subvol);
	if (!ret)
		ret = fsw_inode_get(&w, ino, ii);
	if (ret)
		return ret;
	isize = II_GET(size, ii);
	*got = off >= isize ? 0 : (isize - off < len ? (size_t)(isize - off) : len);
	return *got ? read_range(&w, ino, ii, off, buf, *got) : 0;
}

/*
 * Room for the preallocated extents fallocate would add over the holes of
 * [a0, a1) (and a sector for an inline extent made regular), asked as it
 * will ask: pieces of MAX_EXTENT per hole, halved while space is short.
 */
static int hole_room(struct fsw *w, uint64_t ino, uint64_t a0, uint64_t a1, bool inl)
{
	uint8_t *fe = malloc(UB_FE_SIZE + 4096);
	uint64_t *sizes = NULL, pos;
	size_t n = 0, cap = 0;
	int ret = 0;

	if (!fe)
		return -ENOMEM;
	for (pos = a0; !ret && pos < a1;) {
		struct ub_key k;
		uint32_t fsize;
		uint64_t hole_end;

		/* an inline extent (at 0) becomes a regular one of a sector: that sector is no hole */
		if (inl && pos < ss_of(w)) {
			pos = ss_of(w);
			continue;
		}
		ret = fsw_extent_at(w, ino, pos, &k, fe, &fsize);
		if (ret < 0)
			break;
		if (ret == 0 && k.offset <= pos) {
			pos = k.offset + (FE_GET(type, fe) == BTRFS_FILE_EXTENT_INLINE ? ss_of(w) : FE_GET(num_bytes, fe));
			ret = 0;
			continue;
		}
		hole_end = ret == 0 && k.offset < a1 ? k.offset : a1;
		ret = 0;
		while (pos < hole_end) {
			uint64_t piece = hole_end - pos < MAX_EXTENT ? hole_end - pos : MAX_EXTENT;

			if (n == cap) {
				size_t nc = cap ? 2 * cap : 16;
				uint64_t *ns = realloc(sizes, (nc + 1) * sizeof(*ns));

				if (!ns) {
					ret = -ENOMEM;
					break;
				}
				sizes = ns;
				cap = nc;
			}
			sizes[n++] = piece;
			pos += piece;
		}
	}
	free(fe);
	if (!ret && inl) {
		uint64_t *ns = realloc(sizes, (n + 1) * sizeof(*ns));

		if (!ns)
			ret = -ENOMEM;
		else
			(sizes = ns)[n++] = ss_of(w);
	}
	if (!ret && n)
		ret = room_for(w, sizes, n, true);
	free(sizes);
	return ret;
}

static int zero_range(struct ub_txn *t, uint64_t subvol, uint64_t ino, uint64_t off, uint64_t len, bool keep);

int ub_fsw_fallocate(struct ub_txn *t, uint64_t subvol, uint64_t ino, uint64_t off, uint64_t len, int mode)
{
	uint8_t ii[UB_II_SIZE], *fe;
	uint64_t a0, a1, pos, isize;
	struct fsw w;
	bool inl, grow;
	int ret;

	/* the kernel's btrfs_fallocate: mode 0, KEEP_SIZE, PUNCH_HOLE (with KEEP_SIZE), ZERO_RANGE */
	if (mode & UB_FSW_FALLOC_PUNCH_HOLE) {
		if (mode != (UB_FSW_FALLOC_PUNCH_HOLE | UB_FSW_FALLOC_KEEP_SIZE))
			return mode & ~(UB_FSW_FALLOC_PUNCH_HOLE | UB_FSW_FALLOC_KEEP_SIZE) ? -EOPNOTSUPP : -EINVAL;
		return ub_fsw_punch_hole(t, subvol, ino, off, len);
	}
	if (mode & UB_FSW_FALLOC_ZERO_RANGE) {
		if (mode & ~(UB_FSW_FALLOC_ZERO_RANGE | UB_FSW_FALLOC_KEEP_SIZE))
			return -EOPNOTSUPP;
		return zero_range(t, subvol, ino, off, len, mode & UB_FSW_FALLOC_KEEP_SIZE);
	}
	if (mode & ~UB_FSW_FALLOC_KEEP_SIZE)
		return -EOPNOTSUPP;
	ret = fsw_regular_inode(&w, t, subvol, ino, ii);
	if (ret)
		return ret;
	if (len == 0)
		return -EINVAL;
	if (off + len < off || off + len > FSW_MAX_FILE_SIZE)
		return -EFBIG;
	fsw_note_change(&w, ino, ii, off, off + len);
	ret = has_inline(&w, ino, &inl);
	if (ret)
		return ret;
	a0 = round_down_ss(&w, off);
	a1 = round_up_ss(&w, off + len);
	isize = II_GET(size, ii);
	/* growing: what lay past the old EOF in its sector must not show */
	grow = !inl && !(mode & UB_FSW_FALLOC_KEEP_SIZE) && off + len > isize && isize % ss_of(&w);
	/* the room for every hole first: nothing changes unless all of it fits */
	ret = hole_room(&w, ino, a0, a1, inl);
	if (!ret && grow)
		ret = data_room(&w, ino, ii, round_down_ss(&w, isize), ss_of(&w));
	if (!ret && inl)
		ret = uninline(&w, ino, ii);
	if (!ret && grow)
		ret = fsw_zero_past(&w, ino, ii, isize);
	if (ret)
		return ret;
	fe = malloc(UB_FE_SIZE + 4096);
	if (!fe)
		return -ENOMEM;
	for (pos = a0; !ret && pos < a1;) {
		struct ub_key k;
		uint32_t fsize;
		uint64_t hole_end;

		ret = fsw_extent_at(&w, ino, pos, &k, fe, &fsize);
		if (ret < 0)
			break;
		if (ret == 0 && k.offset <= pos) {
			pos = k.offset + FE_GET(num_bytes, fe);
			continue;
		}
		hole_end = ret == 0 && k.offset < a1 ? k.offset : a1;
		ret = 0;
		while (!ret && pos < hole_end) {
			uint64_t n = hole_end - pos < MAX_EXTENT ? hole_end - pos : MAX_EXTENT;
			for (;;) {
				ret = add_extent(&w, ino, ii, pos, NULL, n, n, UB_COMPRESS_NONE, BTRFS_FILE_EXTENT_PREALLOC);
				if (ret != -ENOSPC || n <= ss_of(&w))
					break;
				n = round_up_ss(&w, n / 2);
			}
			pos += n;
		}
	}
	free(fe);
	if (ret)
		return ret;
	if (!(mode & UB_FSW_FALLOC_KEEP_SIZE) && off + len > II_GET(size, ii))
		II_SET(size, ii, off + len);
	II_SET(flags, ii, II_GET(flags, ii) | UB_INODE_PREALLOC);
	fsw_inode_touch(&w, ii, false, true);
	return fsw_inode_put(&w, ino, ii);
}

int ub_fsw_punch_hole(struct ub_txn *t, uint64_t subvol, uint64_t ino, uint64_t off, uint64_t len)
{
	uint8_t ii[UB_II_SIZE], *zero = NULL;
	uint64_t end, a0, a1, isize;
	struct fsw w;
	bool inl;
	int ret;

	ret = fsw_regular_inode(&w, t, subvol, ino, ii);
	if (ret)
		return ret;
	if (off + len < off)
		return -EINVAL;
	isize = II_GET(size, ii);
	end = off + len < isize ? off + len : isize;
	if (off >= end)
		return 0;
	fsw_note_change(&w, ino, ii, off, end);
	ret = has_inline(&w, ino, &inl);
	if (ret)
		return ret;
	zero = calloc(1, ss_of(&w) > end - off ? end - off : ss_of(&w) * 2);
	if (!zero)
		return -ENOMEM;
	if (inl) {
		uint8_t *z = calloc(1, end - off);
		ret = z ? rewrite_inline(&w, ino, ii, isize, off, z, end - off) : -ENOMEM;
		free(z);
	} else {
		a0 = round_up_ss(&w, off);
		a1 = round_down_ss(&w, end);
		if (a0 >= a1) {
			/* no whole sector inside: zeros over the range */
			uint8_t *z = calloc(1, end - off);
			ret = z ? do_write(&w, ino, ii, off, z, end - off) : -ENOMEM;
			free(z);
		} else {
			ret = fsw_drop_extents(&w, ino, ii, a0, a1);
			if (!ret && off < a0)
				ret = do_write(&w, ino, ii, off, zero, a0 - off);
			if (!ret && a1 < end)
				ret = do_write(&w, ino, ii, a1, zero, end - a1);
		}
	}
	free(zero);
	if (ret)
		return ret;
	II_SET(size, ii, isize);
	fsw_inode_touch(&w, ii, true, true);
	return fsw_inode_put(&w, ino, ii);
}

/*
 * FALLOC_FL_ZERO_RANGE, as the kernel's btrfs_zero_range leaves it: the
 * range reads as zeros and has its space (preallocated where it was a hole
 * or data, zeros written in partial sectors), the size grown to its end
 * unless `keep`. The room for all of it is asked for first.
 */
static int zero_range(struct ub_txn *t, uint64_t subvol, uint64_t ino, uint64_t off, uint64_t len, bool keep)
{
	uint8_t ii[UB_II_SIZE];
	uint64_t a0, a1, *sizes;
	size_t n = 0;
	struct fsw w;
	int ret;

	ret = fsw_regular_inode(&w, t, subvol, ino, ii);
	if (ret)
		return ret;
	if (len == 0)
		return -EINVAL;
	if (off + len < off || off + len > FSW_MAX_FILE_SIZE)
		return -EFBIG;
	fsw_note_change(&w, ino, ii, off, off + len);
	a0 = round_down_ss(&w, off);
	a1 = round_up_ss(&w, off + len);
	sizes = malloc(((a1 - a0) / MAX_EXTENT + 3) * sizeof(*sizes));
	if (!sizes)
		return -ENOMEM;
	for (uint64_t p = a0; p < a1; p += sizes[n++])
		sizes[n] = a1 - p < MAX_EXTENT ? a1 - p : MAX_EXTENT;
	/* the partial sectors at both ends are written (zeros), and an inline extent may become a sector */
	sizes[n++] = ss_of(&w);
	sizes[n++] = ss_of(&w);
	ret = room_for(&w, sizes, n, true);
	free(sizes);
	if (!ret)
		ret = ub_fsw_punch_hole(t, subvol, ino, off, len);
	if (!ret)
		ret = ub_fsw_fallocate(t, subvol, ino, off, len, keep ? UB_FSW_FALLOC_KEEP_SIZE : 0);
	return ret;
}

/* ---- extents prepared outside the transaction ---- */

int ub_fsw_compress_extent(int compress, int level, uint32_t sectorsize, int csum_type, const void *in, size_t len,
			   void *out, uint8_t *sums, struct ub_fsw_extent *x)
{
	unsigned cs = csum_type >= 0 ? ub_csum_size((unsigned)csum_type) : 0;
	size_t clen = 0;
	int ret;

	if (!sectorsize || !len || len % sectorsize || compress < 0 || compress > UB_COMPRESS_ZSTD ||
	    len > (compress ? UB_FSW_COMPRESSED_MAX : UB_FSW_EXTENT_MAX) || (csum_type >= 0 && (!cs || !sums)))
		return -EINVAL;
	*x = (struct ub_fsw_extent){ .ram_bytes = len, .disk_bytes = len, .data = in };
	if (compress) {
		ret = fsw_compress(compress, level, in, len, sectorsize, out, &clen);
		if (ret == 0) {
			x->disk_bytes = (clen + sectorsize - 1) / sectorsize * sectorsize;
			memset((uint8_t *)out + clen, 0, x->disk_bytes - clen);
			x->compression = compress;
			x->data = out;
		} else if (ret != -E2BIG) {
			return ret;
		}
	}
	if (csum_type < 0)
		return 0;
	for (uint64_t i = 0; i < x->disk_bytes / sectorsize; i++) {
		uint8_t c[UB_CSUM_SIZE_MAX];

		ret = ub_csum((unsigned)csum_type, (const uint8_t *)x->data + i * sectorsize, sectorsize, c);
		if (ret)
			return ret;
		memcpy(sums + i * cs, c, cs);
	}
	x->csums = sums;
	return 0;
}

/* one prepared extent at pos; a plain one is split in halves when no free space holds it whole, as write_extents */
static int add_encoded(struct fsw *w, uint64_t ino, uint8_t *ii, uint64_t pos, const struct ub_fsw_extent *x)
{
	uint64_t ss = ss_of(w), cs = w->e->fs.vol->csum_size, done = 0;
	const uint8_t *d = x->data;
	int ret = 0;

	if (x->compression)
		return add_extent_sums(w, ino, ii, pos, d, x->disk_bytes, x->ram_bytes, x->compression,
				       BTRFS_FILE_EXTENT_REG, x->csums);
	while (!ret && done < x->ram_bytes) {
		uint64_t n = x->ram_bytes - done;

		for (;;) {
			ret = add_extent_sums(w, ino, ii, pos + done, d + done, n, n, UB_COMPRESS_NONE,
					      BTRFS_FILE_EXTENT_REG, x->csums ? x->csums + done / ss * cs : NULL);
			if (ret != -ENOSPC || n <= ss)
				break;
			n = round_up_ss(w, n / 2);
		}
		done += n;
	}
	return ret;
}

int ub_fsw_write_encoded(struct ub_txn *t, uint64_t subvol, uint64_t ino, uint64_t off, uint64_t len,
			 const struct ub_fsw_extent *x, size_t n)
{
	uint64_t total = 0, isize, nsize, pos;
	uint8_t ii[UB_II_SIZE];
	struct fsw w;
	bool inl;
	int ret;

	ret = fsw_regular_inode(&w, t, subvol, ino, ii);
	if (ret)
		return ret;
	for (size_t i = 0; i < n; i++) {
		if (!x[i].data || !x[i].ram_bytes || x[i].ram_bytes % ss_of(&w) || !x[i].disk_bytes ||
		    x[i].disk_bytes % ss_of(&w) || x[i].compression < 0 || x[i].compression > UB_COMPRESS_ZSTD ||
		    (x[i].compression ? x[i].ram_bytes > UB_FSW_COMPRESSED_MAX || x[i].disk_bytes >= x[i].ram_bytes
				      : x[i].disk_bytes != x[i].ram_bytes) ||
		    total + x[i].ram_bytes < total)
			return -EINVAL;
		total += x[i].ram_bytes;
	}
	if (!len || off % ss_of(&w) || total != round_up_ss(&w, len) || off + total < off || off + total > FSW_MAX_FILE_SIZE)
		return -EINVAL;
	isize = II_GET(size, ii);
	nsize = off + len > isize ? off + len : isize;
	ret = has_inline(&w, ino, &inl);
	if (ret)
		return ret;
	if (nsize <= max_inline(&w) && (inl || isize == 0))
		return -EINVAL;
	fsw_note_change(&w, ino, ii, off, off + total);
	{
		/* every extent's room first, and a sector for an inline extent's, before anything changes */
		uint64_t *sizes = malloc((n + 1) * sizeof(*sizes));

		if (!sizes)
			return -ENOMEM;
		for (size_t i = 0; i < n; i++)
			sizes[i] = x[i].disk_bytes;
		sizes[n] = ss_of(&w);
		ret = room_for(&w, sizes, n + (inl ? 1 : 0), false);
		free(sizes);
		if (ret)
			return ret;
	}
	if (inl)
		ret = uninline(&w, ino, ii);
	if (!ret)
		ret = fsw_drop_extents(&w, ino, ii, off, off + total);
	pos = off;
	for (size_t i = 0; !ret && i < n; pos += x[i].ram_bytes, i++)
		ret = add_encoded(&w, ino, ii, pos, &x[i]);
	if (ret)
		return ret;
	II_SET(size, ii, nsize);
	fsw_inode_touch(&w, ii, true, true);
	return fsw_inode_put(&w, ino, ii);
}

/*
 * Writes in place, where the kernel's go (can_nocow_extent): into a PREALLOC
 * extent (any file), or over a regular uncompressed extent of a NODATACOW
 * file that has no checksums in the range; either only when nothing else can
 * see the old bytes: one reference, created after the subvolume's last
 * snapshot. Not on RAID5/6: a partial stripe rewrite would open the write
 * hole, so those writes stay copy-on-write. A written PREALLOC range becomes
 * a regular item of the same extent (the item split around it, one more
 * reference), checksummed unless NODATASUM.
 */
/*
 * The kernel's cross-reference check: the extent is this file's alone when
 * every reference is the one EXTENT_DATA_REF (subvolume, inode, file offset -
 * extent offset) of the item being written (split items of one extent share
 * it) and the extent is newer than the subvolume's last snapshot.
 */
static int extent_unshared(struct fsw *w, uint64_t bytenr, uint64_t num_bytes, uint64_t ino, uint64_t refoff,
			   bool *yes)
{
	const struct ub_dref_head *h = ub_dref_find(w->t->refs, bytenr);
	uint64_t gen = w->t->transid;
	int64_t refs = 0, ours = 0;
	int ret = 0;

	*yes = false;
	if (!h || !h->new_extent) {
		struct ub_key k = { bytenr, BTRFS_EXTENT_ITEM_KEY, num_bytes };
		struct ub_ref r = { .type = BTRFS_EXTENT_DATA_REF_KEY, .root = w->subvol, .owner = ino, .offset = refoff };
		struct ub_path p;
		const uint8_t *d;
		uint32_t size, pos, count = 0;

		ub_path_init(&p);
		ret = ub_tree_lookup(w->tc, &w->e->fs.extent_tree->root, &k, &p, &d, &size);
		if (ret == 0 && size >= UB_EXTENT_ITEM_SIZE) {
			refs = (int64_t)UB_GET(btrfs_extent_item, refs, d);
			gen = UB_GET(btrfs_extent_item, generation, d);
			if (ub_inline_ref_find(d, size, UB_EXTENT_ITEM_SIZE, &r, &pos, &count) == 0)
				ours = count;
		} else if (ret == 0) {
			ret = -EUCLEAN;
		}
		ub_path_release(&p);
		if (ret)
			return ret == -ENOENT ? -EUCLEAN : ret;
	}
	for (int i = 0; h && i < h->nrefs; i++) {
		const struct ub_dref *d = &h->refs[i];

		if (d->type != BTRFS_EXTENT_DATA_REF_KEY || d->root != w->subvol || d->objectid != ino ||
		    d->offset != refoff)
			return 0;
		ours += d->delta;
	}
	if (h)
		refs += h->total_delta;
	*yes = refs > 0 && ours == refs && gen > w->fs->last_snapshot;
	return 0;
}

static int csums_in(struct fsw *w, uint64_t start, uint64_t len, bool *yes)
{
	struct ub_eroot *cr;
	struct ub_key k;
	uint32_t size;
	int ret;

	ret = csum_root(w, &cr);
	if (!ret)
		ret = csum_item_le(w, cr, start + len - 1, &k, &size);
	if (ret < 0)
		return ret;
	/* items never overlap: only the last one starting below the end can reach into the range */
	*yes = ret == 0 && k.objectid == BTRFS_EXTENT_CSUM_OBJECTID && k.type == BTRFS_EXTENT_CSUM_KEY &&
	       k.offset + (uint64_t)(size / w->e->fs.vol->csum_size) * ss_of(w) > start;
	return 0;
}

/* [pos, pos + len) of the PREALLOC item at k (copy fe), just written at `at`, becomes a regular item */
static int prealloc_written(struct fsw *w, uint64_t ino, uint8_t *ii, const struct ub_key *k, const uint8_t *fe,
			    uint64_t pos, uint64_t at, const uint8_t *buf, uint64_t len)
{
	uint64_t bytenr = FE_GET(disk_bytenr, fe), dlen = FE_GET(disk_num_bytes, fe), eoff = FE_GET(offset, fe);
	struct ub_key nk = { ino, BTRFS_EXTENT_DATA_KEY, pos };
	uint8_t nfe[UB_FE_SIZE];
	int ret;

	/* the new item's reference first, so dropping the old range never frees the extent */
	ret = ub_dref_add_data(w->t->refs, bytenr, dlen, w->subvol, ino, k->offset - eoff, 0, 1, 0);
	if (!ret)
		ret = fsw_drop_extents(w, ino, ii, pos, pos + len);
	if (ret)
		return ret;
	memcpy(nfe, fe, UB_FE_SIZE);
	FE_SET(generation, nfe, w->t->transid);
	FE_SET(type, nfe, BTRFS_FILE_EXTENT_REG);
	FE_SET(offset, nfe, eoff + (pos - k->offset));
	FE_SET(num_bytes, nfe, len);
	ret = ub_tree_insert_item(w->tc, w->ta, &w->fs->root, &nk, nfe, UB_FE_SIZE);
	if (!ret && !(II_GET(flags, ii) & UB_INODE_NODATASUM))
		ret = csum_insert(w, at, buf, len, NULL);
	if (!ret)
		II_SET(nbytes, ii, II_GET(nbytes, ii) + len);
	return ret;
}

static int nocow_write(struct fsw *w, uint64_t ino, uint8_t *ii, uint64_t pos, const uint8_t *buf, uint64_t len,
		       bool *done)
{
	uint8_t fe[UB_FE_SIZE + 4096]; /* what extent_at copies at most */
	const struct ub_chunk *c;
	uint64_t bytenr, at;
	struct ub_key k;
	uint32_t fsize;
	bool ok, prealloc;
	int ret;

	*done = false;
	ret = fsw_extent_at(w, ino, pos, &k, fe, &fsize);
	if (ret)
		return ret > 0 ? 0 : ret;
	prealloc = fsize >= UB_FE_SIZE && FE_GET(type, fe) == BTRFS_FILE_EXTENT_PREALLOC;
	if (!prealloc && !(II_GET(flags, ii) & UB_INODE_NODATACOW))
		return 0;
	if (fsize < UB_FE_SIZE || (!prealloc && FE_GET(type, fe) != BTRFS_FILE_EXTENT_REG) || FE_GET(compression, fe) ||
	    FE_GET(encryption, fe) || FE_GET(other_encoding, fe) || !(bytenr = FE_GET(disk_bytenr, fe)) ||
	    k.offset > pos || k.offset + FE_GET(num_bytes, fe) < pos + len)
		return 0;
	at = bytenr + FE_GET(offset, fe) + (pos - k.offset);
	if (at < bytenr || at + len > bytenr + FE_GET(disk_num_bytes, fe))
		return -EUCLEAN;
	c = ub_volume_find_chunk(w->e->fs.vol, at);
	if (!c || (c->type & (BTRFS_BLOCK_GROUP_RAID5 | BTRFS_BLOCK_GROUP_RAID6)))
		return 0;
	ret = extent_unshared(w, bytenr, FE_GET(disk_num_bytes, fe), ino, k.offset - FE_GET(offset, fe), &ok);
	if (ret || !ok)
		return ret;
	if (!prealloc) {
		ret = csums_in(w, bytenr, FE_GET(disk_num_bytes, fe), &ok);
		if (ret || ok)
			return ret;
	}
	ret = ub_volume_write(w->e->fs.vol, at, len, buf);
	if (!ret && prealloc)
		ret = prealloc_written(w, ino, ii, &k, fe, pos, at, buf, len);
	*done = !ret;
	return ret;
}

int ub_fsw_set_flags(struct ub_txn *t, uint64_t subvol, uint64_t ino, uint64_t set, uint64_t clear)
{
	const uint64_t allowed = UB_INODE_NODATACOW | UB_INODE_NOCOMPRESS | UB_INODE_NODUMP | UB_INODE_NOATIME |
				 UB_INODE_SYNC;
	const uint64_t cow = UB_INODE_NODATACOW | UB_INODE_NODATASUM;
	uint8_t ii[UB_II_SIZE];
	uint64_t flags, nflags;
	struct fsw w;
	int ret;

	if ((set | clear) & ~allowed)
		return -EOPNOTSUPP;
	if (set & clear)
		return -EINVAL;
	ret = fsw_init(&w, t, subvol);
	if (!ret)
		ret = fsw_inode_get(&w, ino, ii);
	if (ret)
		return ret;
	flags = II_GET(flags, ii);
	nflags = (flags | (set & ~UB_INODE_NODATACOW)) & ~(clear & ~UB_INODE_NODATACOW);
	if ((set | clear) & UB_INODE_NODATACOW) {
		bool on = set & UB_INODE_NODATACOW;

		/* a file with data keeps the state its extents have (checksummed or not) */
		if (((uint32_t)II_GET(mode, ii) & S_IFMT) == S_IFREG) {
			if (II_GET(size, ii) == 0)
				nflags = on ? nflags | cow : nflags & ~cow;
		} else {
			nflags = on ? nflags | UB_INODE_NODATACOW : nflags & ~UB_INODE_NODATACOW;
		}
	}
	II_SET(flags, ii, nflags);
	fsw_inode_touch(&w, ii, false, true);
	return fsw_inode_put(&w, ino, ii);
}
/* ---- end of the extents prepared outside the transaction ---- */
