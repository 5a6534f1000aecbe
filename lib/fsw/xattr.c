/* SPDX-License-Identifier: MIT */
/*
 * Extended attributes: (ino, XATTR_ITEM, name hash) items of dir_item
 * records (zero location key, type XATTR, name then value), several records
 * in one item when names share a hash, as the kernel keeps them. Setting or
 * removing one changes the inode's ctime, transid and sequence.
 *
 * "btrfs.compression" is a property, with the kernel's rules: its value is
 * checked, an empty one removes it, and the inode's COMPRESS / NOCOMPRESS
 * flags follow it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fsw/fsw.h"

#define II_GET(f, p) UB_GET(btrfs_inode_item, f, p)

static int check(const char *name, size_t nlen)
{
	if (!name || nlen == 0 || memchr(name, 0, nlen))
		return -EINVAL;
	return nlen > UB_NAME_LEN ? -ERANGE : 0;
}

/* ctime, transid and sequence; and the inode flags a compression property stands for (set: its value) */
static int touch_flags(struct fsw *w, uint64_t ino, bool prop, const char *value, size_t vlen)
{
	uint8_t ii[UB_II_SIZE];
	int ret = fsw_inode_get(w, ino, ii);

	if (ret)
		return ret;
	if (prop) {
		uint64_t flags = II_GET(flags, ii) & ~(UB_INODE_COMPRESS | UB_INODE_NOCOMPRESS);

		if ((vlen == 2 && !memcmp(value, "no", 2)) || (vlen == 4 && !memcmp(value, "none", 4)))
			flags |= UB_INODE_NOCOMPRESS;
		else if (vlen)
			flags |= UB_INODE_COMPRESS;
		UB_SET(btrfs_inode_item, flags, ii, flags);
	}
	fsw_inode_touch(w, ii, false, true);
	return fsw_inode_put(w, ino, ii);
}

#define PROP_COMPRESSION "btrfs.compression"

static bool is_compression_prop(const char *name, size_t nlen)
{
	return nlen == strlen(PROP_COMPRESSION) && !memcmp(name, PROP_COMPRESSION, nlen);
}

/*
 * The kernel's rules for the compression property (btrfs props): a value
 * naming an algorithm (its prefix: "zstd:3" is zstd), "no" or "none", or
 * empty; refused on an inode without checksums (it could not compress); taken
 * and ignored on anything but a file or a directory. 1: ignore it.
 */
static int compression_prop_check(const uint8_t *ii, const char *value, size_t vlen)
{
	uint32_t fmt = (uint32_t)II_GET(mode, ii) & S_IFMT;
	static const char *const algs[] = { "zlib", "lzo", "zstd" };
	bool ok = vlen == 0 || (vlen == 2 && !memcmp(value, "no", 2)) || (vlen == 4 && !memcmp(value, "none", 4));

	for (size_t i = 0; i < sizeof(algs) / sizeof(algs[0]) && !ok; i++)
		ok = vlen >= strlen(algs[i]) && !memcmp(value, algs[i], strlen(algs[i]));
	if (!ok || (II_GET(flags, ii) & (UB_INODE_NODATACOW | UB_INODE_NODATASUM)))
		return -EINVAL;
	return fmt != S_IFREG && fmt != S_IFDIR ? 1 : 0;
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

/* The record of one xattr set (replacing one of that name), the inode's times left alone. */
int fsw_xattr_set(struct fsw *w, uint64_t ino, const char *name, size_t nlen, const void *value, size_t vlen,
		  int flags)
{
	struct ub_key key = { ino, BTRFS_XATTR_ITEM_KEY, ub_name_hash(name, nlen) };
	uint8_t *rec;
	uint32_t rsize, max;
	int ret = check(name, nlen);

	if (ret)
		return ret;
	if (!value && vlen)
		return -EINVAL;
	/* the kernel's BTRFS_MAX_XATTR_SIZE: one record alone in a leaf (and its answer, ENOSPC) */
	max = w->e->fs.vol->nodesize - UB_HEADER_SIZE - UB_ITEM_SIZE - UB_DI_SIZE;
	if (nlen + vlen > max)
		return -ENOSPC;
	ret = find(w, ino, name, nlen, NULL, NULL);
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
		ret = fsw_dir_item_del(w, &key, name, nlen);
		if (ret)
			return ret;
	}
	rsize = UB_DI_SIZE + (uint32_t)(nlen + vlen);
	rec = calloc(1, rsize);
	if (!rec)
		return -ENOMEM;
	UB_SET(btrfs_dir_item, transid, rec, w->t->transid);
	UB_SET(btrfs_dir_item, data_len, rec, vlen);
	UB_SET(btrfs_dir_item, name_len, rec, nlen);
	UB_SET(btrfs_dir_item, type, rec, BTRFS_FT_XATTR);
	memcpy(rec + UB_DI_SIZE, name, nlen);
	if (vlen)
		memcpy(rec + UB_DI_SIZE + nlen, value, vlen);
	ret = fsw_dir_item_add(w, &key, rec, rsize);
	free(rec);
	if (ret == -EOVERFLOW)
		ret = -ENOSPC; /* names sharing a hash do not fit one leaf together: the kernel's answer */
	return ret;
}

int ub_fsw_setxattr(struct ub_txn *t, uint64_t subvol, uint64_t ino, const char *name, size_t nlen,
		    const void *value, size_t vlen, int flags)
{
	uint8_t ii[UB_II_SIZE];
	struct fsw w;
	int ret;

	bool prop = is_compression_prop(name, nlen);

	ret = check(name, nlen);
	if (!ret)
		ret = fsw_init(&w, t, subvol);
	if (!ret)
		ret = fsw_inode_get(&w, ino, ii);
	if (ret)
		return ret;
	if (prop) {
		if (!value && vlen)
			return -EINVAL;
		ret = compression_prop_check(ii, value, vlen);
		if (ret)
			return ret < 0 ? ret : 0;
	}
	if (prop && vlen == 0) {
		/* an empty value takes the property away (nothing to take is fine, unless asked to replace) */
		struct ub_key key = { ino, BTRFS_XATTR_ITEM_KEY, ub_name_hash(name, nlen) };

		ret = find(&w, ino, name, nlen, NULL, NULL);
		if (ret == 0)
			ret = fsw_dir_item_del(&w, &key, name, nlen);
		else if (ret == -ENODATA && !(flags & UB_FSW_XATTR_REPLACE))
			ret = 0;
	} else {
		ret = fsw_xattr_set(&w, ino, name, nlen, value, vlen, flags);
	}
	return ret ? ret : touch_flags(&w, ino, prop, value, vlen);
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
	if (!ret && is_compression_prop(name, nlen)) {
		/* as setting it empty: refused where it could not apply, ignored on other kinds of inode */
		ret = compression_prop_check(ii, NULL, 0);
		if (ret)
			return ret < 0 ? ret : 0;
	}
	if (!ret)
		ret = find(&w, ino, name, nlen, NULL, NULL); /* before any copy-on-write: a miss changes nothing */
	if (ret)
		return ret;
	ret = fsw_dir_item_del(&w, &key, name, nlen);
	if (ret)
		return ret == -ENOENT ? -EUCLEAN : ret;
	/* the property gone, its flags go with it */
	return touch_flags(&w, ino, is_compression_prop(name, nlen), NULL, 0);
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
