// SPDX-License-Identifier: MIT
/*
 * Cloning a range of one file into another (FICLONERANGE, a reflink
 * copy_file_range): the destination's file extent items point at the
 * source's disk extents, each with a back reference of its own, as the
 * kernel's btrfs_clone leaves them; nothing is copied. Checksums stay with
 * the disk extents, which both files now share.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fsw/fsw.h"
#include "txn/backref.h"

#define II_GET(f, p) UB_GET(btrfs_inode_item, f, p)
#define II_SET(f, p, v) UB_SET(btrfs_inode_item, f, p, v)
#define FE_GET(f, p) UB_GET(btrfs_file_extent_item, f, p)
#define FE_SET(f, p, v) UB_SET(btrfs_file_extent_item, f, p, v)

/* One source file extent item, copied before the destination changes (it may be the same file). */
struct piece {
	uint64_t off; /* its key offset */
	uint8_t fe[UB_FE_SIZE];
};

/* The source's extent items over [start, end): *out (n of them); -EOPNOTSUPP for an inline extent there. */
static int collect(struct fsw *w, uint64_t ino, uint64_t start, uint64_t end, struct piece **out, size_t *n)
{
	uint8_t *fe = malloc(UB_FE_SIZE + 4096);
	struct piece *v = NULL;
	size_t cap = 0;
	uint64_t pos = start;
	int ret = 0;

	*n = 0;
	if (!fe)
		return -ENOMEM;
	while (pos < end) {
		struct ub_key k;
		uint32_t fsize;

		ret = fsw_extent_at(w, ino, pos, &k, fe, &fsize);
		if (ret) {
			ret = ret > 0 ? 0 : ret;
			break;
		}
		if (k.offset >= end)
			break;
		/* an inline extent lives in the leaf: the kernel clones it only in corners; the caller copies */
		if (FE_GET(type, fe) == BTRFS_FILE_EXTENT_INLINE) {
			ret = -EOPNOTSUPP;
			break;
		}
		if (fsize < UB_FE_SIZE) {
			ret = -EUCLEAN;
			break;
		}
		if (*n == cap) {
			size_t nc = cap ? 2 * cap : 16;
			struct piece *nv = realloc(v, nc * sizeof(*nv));

			if (!nv) {
				ret = -ENOMEM;
				break;
			}
			v = nv;
			cap = nc;
		}
		v[*n].off = k.offset;
		memcpy(v[*n].fe, fe, UB_FE_SIZE);
		(*n)++;
		pos = k.offset + FE_GET(num_bytes, fe);
	}
	free(fe);
	if (ret) {
		free(v);
		*n = 0;
		return ret;
	}
	*out = v;
	return 0;
}

int ub_fsw_clone_range(struct ub_txn *t, uint64_t src_subvol, uint64_t src_ino, uint64_t src_off,
		       uint64_t dst_subvol, uint64_t dst_ino, uint64_t dst_off, uint64_t len)
{
	uint8_t sii[UB_II_SIZE], dii[UB_II_SIZE];
	struct fsw sw, dw;
	struct piece *v = NULL;
	uint64_t ss, ssize, send, alen, dsize;
	size_t n = 0;
	int ret;

	ret = fsw_regular_inode(&sw, t, src_subvol, src_ino, sii);
	if (!ret)
		ret = fsw_regular_inode(&dw, t, dst_subvol, dst_ino, dii);
	if (ret)
		return ret;
	ss = dw.e->fs.vol->sectorsize;
	ssize = II_GET(size, sii);
	dsize = II_GET(size, dii);
	if (len == 0)
		len = src_off < ssize ? ssize - src_off : 0; /* to the source's end, as FICLONERANGE's 0 */
	if (src_off + len < src_off || dst_off + len < dst_off || dst_off + len > FSW_MAX_FILE_SIZE)
		return -EINVAL;
	if (src_off + len > ssize)
		return -EINVAL;
	if (len == 0)
		return 0;
	/* whole sectors; a partial last one only at the source's end, over the destination's end */
	send = src_off + len;
	if (src_off % ss || dst_off % ss ||
	    (len % ss && (send != ssize || dst_off + len < dsize)))
		return -EINVAL;
	alen = (len + ss - 1) / ss * ss;
	/* one file onto itself: the ranges must not overlap */
	if (src_subvol == dst_subvol && src_ino == dst_ino && src_off < dst_off + alen && dst_off < src_off + alen)
		return -EINVAL;
	/* checksummed and unchecksummed data do not mix (the kernel's rule) */
	if ((II_GET(flags, sii) ^ II_GET(flags, dii)) & UB_INODE_NODATASUM)
		return -EINVAL;
	{
		/* an inline destination would have to become regular first: the caller copies instead */
		uint8_t fe[UB_FE_SIZE + 4096];
		struct ub_key k;
		uint32_t fsize;

		ret = fsw_extent_at(&dw, dst_ino, 0, &k, fe, &fsize);
		if (ret == 0 && k.offset == 0 && FE_GET(type, fe) == BTRFS_FILE_EXTENT_INLINE)
			return -EOPNOTSUPP;
		if (ret < 0)
			return ret;
	}
	/* a clone past the destination's end: what lay past its old EOF in that sector must not show */
	if (dst_off > dsize && dsize % ss) {
		ret = fsw_zero_past(&dw, dst_ino, dii, dsize);
		if (ret)
			return ret;
	}
	ret = collect(&sw, src_ino, src_off, src_off + alen, &v, &n);
	if (ret)
		return ret;
	fsw_note_change(&dw, dst_ino, dii, dst_off, dst_off + alen);
	ret = fsw_drop_extents(&dw, dst_ino, dii, dst_off, dst_off + alen);
	for (size_t i = 0; !ret && i < n; i++) {
		uint8_t *fe = v[i].fe;
		uint64_t es = v[i].off, ee = es + FE_GET(num_bytes, fe);
		uint64_t from = es > src_off ? es : src_off, to = ee < src_off + alen ? ee : src_off + alen;
		uint64_t bytenr = FE_GET(disk_bytenr, fe), dpos = dst_off + (from - src_off);
		struct ub_key k = { dst_ino, BTRFS_EXTENT_DATA_KEY, dpos };

		if (from >= to)
			continue;
		FE_SET(offset, fe, FE_GET(offset, fe) + (from - es));
		FE_SET(num_bytes, fe, to - from);
		FE_SET(generation, fe, t->transid);
		ret = ub_tree_insert_item(dw.tc, dw.ta, &dw.fs->root, &k, fe, UB_FE_SIZE);
		if (!ret && bytenr) {
			/* the destination's own reference: by root, inode and the file offset of the extent's start */
			ret = ub_dref_add_data(t->refs, bytenr, FE_GET(disk_num_bytes, fe), dst_subvol, dst_ino,
					       dpos - FE_GET(offset, fe), 0, 1, 0);
			II_SET(nbytes, dii, II_GET(nbytes, dii) + (to - from));
		}
	}
	free(v);
	if (ret)
		return ret;
	if (dst_off + len > dsize)
		II_SET(size, dii, dst_off + len);
	if (II_GET(flags, sii) & UB_INODE_PREALLOC)
		II_SET(flags, dii, II_GET(flags, dii) | UB_INODE_PREALLOC);
	fsw_inode_touch(&dw, dii, true, true);
	return fsw_inode_put(&dw, dst_ino, dii);
}
