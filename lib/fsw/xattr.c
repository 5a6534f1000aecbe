/* SPDX-License-Identifier: MIT */
/*
 * Extended attributes: (ino, XATTR_ITEM, name hash) items of dir_item
 * records (zero location key, type XATTR, name then value), several records
 * in one item when names share a hash, as the kernel keeps them. Setting or
 * removing one changes the inode's ctime, transid and sequence.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fsw/fsw.h"

#define II_GET(f, p) UB_GET(btrfs_inode_item, f, p)

static int check(const char *name, size_t nlen)
{
	if (!name || nlen == 0 || memchr(name, 0, nlen))
		return -EINVAL;
	return nlen > UB_NAME_LEN ? -ERANGE : 0;
}

static int touch(struct fsw *w, uint64_t ino)
{
	uint8_t ii[UB_II_SIZE];
	int ret = fsw_inode_get(w, ino, ii);

	if (ret)
		return ret;
	fsw_inode_touch(w, ii, false, true);
	return fsw_inode_put(w, ino, ii);
}

/* 0 and the record copied into rec (if set), -ENODATA */
static int find(struct fsw *w, uint64_t ino, const char *name, size_t nlen, uint8_t **rec, uint32_t *rsize)
{
	struct ub_key key = { ino, BTRFS_XATTR_ITEM_KEY, ub_name_hash(name, nlen) };
	struct ub_path p;
	const uint8_t *d;
	uint32_t size, pos, es;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_lookup(w->tc, &w->fs->root, &key, &p, &d, &size);
	if (ret == 0)
		ret = fsw_dir_item_find(d, size, name, nlen, &pos, &es);
	if (ret == 0 && rec) {
		*rec = malloc(es);
		if (!*rec)
			ret = -ENOMEM;
		else
			memcpy(*rec, d + pos, es);
		*rsize = es;
	}
	ub_path_release(&p);
	return ret == -ENOENT ? -ENODATA : ret;
}

int ub_fsw_setxattr(struct ub_txn *t, uint64_t subvol, uint64_t ino, const char *name, size_t nlen,
		    const void *value, size_t vlen, int flags)
{
	struct ub_key key = { ino, BTRFS_XATTR_ITEM_KEY, ub_name_hash(name, nlen) };
	uint8_t ii[UB_II_SIZE], *rec;
	uint32_t rsize, max;
	struct fsw w;
	int ret;

	ret = check(name, nlen);
	if (!ret)
		ret = fsw_init(&w, t, subvol);
	if (!ret)
		ret = fsw_inode_get(&w, ino, ii);
	if (ret)
		return ret;
	if (!value && vlen)
		return -EINVAL;
	/* the kernel's BTRFS_MAX_XATTR_SIZE: one record alone in a leaf (and its answer, ENOSPC) */
	max = w.e->fs.vol->nodesize - UB_HEADER_SIZE - UB_ITEM_SIZE - UB_DI_SIZE;
	if (nlen + vlen > max)
		return -ENOSPC;
	ret = find(&w, ino, name, nlen, NULL, NULL);
	if (ret && ret != -ENODATA)
		return ret;
	if (ret == 0 && (flags & UB_FSW_XATTR_CREATE))
		return -EEXIST;
	if (ret == -ENODATA && (flags & UB_FSW_XATTR_REPLACE))
		return -ENODATA;
	if (ret == 0) {
		/*
		 * The kernel replaces a value in place and refuses (ENOSPC) a larger
		 * one that its leaf has no room for; which leaf that is, and how full,
		 * depends on how its leaves were split, which is not ours: here the
		 * old record goes and the new one is added, a leaf split as needed.
		 */
		ret = fsw_dir_item_del(&w, &key, name, nlen);
		if (ret)
			return ret;
	}
	rsize = UB_DI_SIZE + (uint32_t)(nlen + vlen);
	rec = calloc(1, rsize);
	if (!rec)
		return -ENOMEM;
	UB_SET(btrfs_dir_item, transid, rec, t->transid);
	UB_SET(btrfs_dir_item, data_len, rec, vlen);
	UB_SET(btrfs_dir_item, name_len, rec, nlen);
	UB_SET(btrfs_dir_item, type, rec, BTRFS_FT_XATTR);
	memcpy(rec + UB_DI_SIZE, name, nlen);
	if (vlen)
		memcpy(rec + UB_DI_SIZE + nlen, value, vlen);
	ret = fsw_dir_item_add(&w, &key, rec, rsize);
	free(rec);
	if (ret == -EOVERFLOW)
		ret = -ENOSPC; /* names sharing a hash do not fit one leaf together: the kernel's answer */
	return ret ? ret : touch(&w, ino);
}

int ub_fsw_removexattr(struct ub_txn *t, uint64_t subvol, uint64_t ino, const char *name, size_t nlen)
{
	struct ub_key key = { ino, BTRFS_XATTR_ITEM_KEY, ub_name_hash(name, nlen) };
	uint8_t ii[UB_II_SIZE];
	struct fsw w;
	int ret;

	ret = check(name, nlen);
	if (!ret)
		ret = fsw_init(&w, t, subvol);
	if (!ret)
		ret = fsw_inode_get(&w, ino, ii);
	if (!ret)
		ret = find(&w, ino, name, nlen, NULL, NULL); /* before any copy-on-write: a miss changes nothing */
	if (ret)
		return ret;
	ret = fsw_dir_item_del(&w, &key, name, nlen);
	if (ret)
		return ret == -ENOENT ? -EUCLEAN : ret;
	return touch(&w, ino);
}

int ub_fsw_getxattr(struct ub_txn *t, uint64_t subvol, uint64_t ino, const char *name, size_t nlen, void *buf,
		    size_t size, size_t *vlen)
{
	uint8_t *rec;
	uint32_t rsize, dl;
	struct fsw w;
	int ret;

	ret = check(name, nlen);
	if (!ret)
		ret = fsw_init_ro(&w, t, subvol);
	if (!ret)
		ret = find(&w, ino, name, nlen, &rec, &rsize);
	if (ret)
		return ret;
	dl = (uint32_t)UB_GET(btrfs_dir_item, data_len, rec);
	*vlen = dl;
	if (size && size < dl)
		ret = -ERANGE;
	else if (size)
		memcpy(buf, rec + UB_DI_SIZE + nlen, dl);
	free(rec);
	return ret;
}

int ub_fsw_listxattr(struct ub_txn *t, uint64_t subvol, uint64_t ino, char *buf, size_t size, size_t *needed)
{
	struct ub_key min = { ino, BTRFS_XATTR_ITEM_KEY, 0 }, max = { ino, BTRFS_XATTR_ITEM_KEY, UINT64_MAX }, k;
	struct ub_tree_iter it;
	uint8_t ii[UB_II_SIZE];
	const uint8_t *d;
	uint32_t dsize;
	size_t total = 0;
	struct fsw w;
	int ret;

	ret = fsw_init_ro(&w, t, subvol);
	if (!ret)
		ret = fsw_inode_get(&w, ino, ii);
	if (ret)
		return ret;
	ret = ub_tree_iter_start(&it, w.tc, &w.fs->root, &min, &max);
	if (ret)
		return ret;
	while ((ret = ub_tree_iter_next(&it, &k, &d, &dsize)) == 0) {
		uint32_t at = 0;

		while (at + UB_DI_SIZE <= dsize) {
			uint32_t nl = (uint32_t)UB_GET(btrfs_dir_item, name_len, d + at);
			uint32_t es = UB_DI_SIZE + nl + (uint32_t)UB_GET(btrfs_dir_item, data_len, d + at);

			if (at + es > dsize) {
				ub_err(&w.e->fs.log, "tree %llu inode %llu: XATTR_ITEM %llu: record runs past the item",
				       (unsigned long long)subvol, (unsigned long long)ino, (unsigned long long)k.offset);
				ub_tree_iter_end(&it);
				return -EUCLEAN;
			}
			if (size && total + nl + 1 <= size) {
				memcpy(buf + total, d + at + UB_DI_SIZE, nl);
				buf[total + nl] = 0;
			}
			total += nl + 1;
			at += es;
		}
	}
	ub_tree_iter_end(&it);
	if (ret < 0)
		return ret;
	*needed = total;
	return size && total > size ? -ERANGE : 0;
}
