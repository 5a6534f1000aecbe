/* SPDX-License-Identifier: MIT */
/*
 * An inode's path inside its subvolume, found backwards: each step follows
 * the inode's first name (INODE_REF, else INODE_EXTREF) to its directory,
 * until the subvolume's root directory. For messages about an inode (the
 * checker's), so it reads the committed items, bounds the walk and never
 * trusts a name to be printable as more than bytes.
 */
#include <errno.h>
#include <string.h>

#include "ubtrfs/fs.h"
#include "fs_priv.h"
#include "items.h"

/* Steps at most: a deeper path, or a loop, is not followed to its end. */
#define MAX_DEPTH 256

/* The first name of `ino`: its directory and the name's bytes (copied into name[UB_NAME_LEN]). */
static int first_name(struct ub_fs *fs, uint64_t subvol, uint64_t ino, uint64_t *dir, char *name, size_t *len,
		      bool disk_only)
{
	struct ub_icur cur;
	struct ub_key k;
	const uint8_t *d;
	uint32_t size, hdr;
	int ret = disk_only ? ub_icur_open_disk(fs, subvol, ino, &cur) : ub_icur_open(fs, subvol, ino, &cur);

	if (ret)
		return ret;
	ret = ub_icur_seek(&cur, BTRFS_INODE_REF_KEY, 0);
	if (ret)
		goto out;
	ub_icur_key(&cur, &k);
	d = ub_icur_data(&cur, &size);
	if (k.type == BTRFS_INODE_REF_KEY) {
		hdr = sizeof(struct btrfs_inode_ref);
		*dir = k.offset;
		*len = size >= hdr ? UB_GET(btrfs_inode_ref, name_len, d) : 0;
	} else if (k.type == BTRFS_INODE_EXTREF_KEY) {
		hdr = sizeof(struct btrfs_inode_extref);
		*dir = size >= hdr ? UB_GET(btrfs_inode_extref, parent_objectid, d) : 0;
		*len = size >= hdr ? UB_GET(btrfs_inode_extref, name_len, d) : 0;
	} else {
		ret = 1;
		goto out;
	}
	/* the tree checker bounded the name by the item; an empty or overlong one is not a name */
	if (!*len || *len > UB_NAME_LEN || hdr + *len > size) {
		ret = -EUCLEAN;
		goto out;
	}
	memcpy(name, d + hdr, *len);
out:
	ub_icur_close(&cur);
	return ret > 0 ? -ENOENT : ret;
}

static int inode_path_impl(struct ub_fs *fs, uint64_t subvol, uint64_t ino, char *buf, size_t bufsz)
{
	char name[UB_NAME_LEN];
	size_t at = bufsz, len;
	uint64_t dir;
	int ret;

	if (bufsz < 2)
		return -ENAMETOOLONG;
	buf[--at] = 0;
	for (int depth = 0; ino != BTRFS_FIRST_FREE_OBJECTID; depth++) {
		if (depth >= MAX_DEPTH)
			return -ELOOP;
		ret = first_name(fs, subvol, ino, &dir, name, &len, true);
		if (ret)
			return ret;
		if (dir == ino)
			return -ELOOP;
		if (len + 1 > at)
			return -ENAMETOOLONG;
		at -= len;
		memcpy(buf + at, name, len);
		buf[--at] = '/';
		ino = dir;
	}
	if (at == bufsz - 1)
		buf[--at] = '/';
	memmove(buf, buf + at, bufsz - at);
	return 0;
}

int ub_inode_path(struct ub_fs *fs, uint64_t subvol, uint64_t ino, char *buf, size_t bufsz)
{
	int in = ub_view_enter(fs);
	int ret = inode_path_impl(fs, subvol, ino, buf, bufsz);

	ub_view_exit(fs, in);
	return ret;
}

static int inode_first_name_impl(struct ub_fs *fs, uint64_t subvol, uint64_t ino, uint64_t *dir, char *name, size_t *len)
{
	return first_name(fs, subvol, ino, dir, name, len, false);
}

int ub_inode_first_name(struct ub_fs *fs, uint64_t subvol, uint64_t ino, uint64_t *dir, char *name, size_t *len)
{
	int in = ub_view_enter(fs);
	int ret = inode_first_name_impl(fs, subvol, ino, dir, name, len);

	ub_view_exit(fs, in);
	return ret;
}

int ub_ref_item_each(const struct ub_key *key, const uint8_t *d, uint32_t size, ub_ref_fn fn, void *arg)
{
	const bool ext = key->type == BTRFS_INODE_EXTREF_KEY;
	const uint32_t hdr = ext ? (uint32_t)offsetof(struct btrfs_inode_extref, name)
				 : (uint32_t)sizeof(struct btrfs_inode_ref);
	uint32_t pos = 0;

	while (size - pos >= hdr) {
		const uint8_t *r = d + pos;
		uint64_t parent = ext ? UB_GET(btrfs_inode_extref, parent_objectid, r) : key->offset;
		uint64_t index = ext ? UB_GET(btrfs_inode_extref, index, r) : UB_GET(btrfs_inode_ref, index, r);
		uint32_t nlen = ext ? (uint32_t)UB_GET(btrfs_inode_extref, name_len, r)
				    : (uint32_t)UB_GET(btrfs_inode_ref, name_len, r);
		int ret;

		if (nlen > size - pos - hdr)
			break;
		ret = fn(arg, parent, index, (const char *)r + hdr, nlen);
		if (ret)
			return ret;
		pos += hdr + nlen;
	}
	return 0;
}

struct names_ctx {
	ub_name_fn fn;
	void *arg;
};

static int one_name(void *arg, uint64_t parent, uint64_t index, const char *name, uint32_t len)
{
	struct names_ctx *c = arg;

	(void)index;
	if (!len || len > UB_NAME_LEN)
		return 0; /* not a name: the others may still be */
	return c->fn(c->arg, parent, name, len);
}

static int inode_names_impl(struct ub_fs *fs, uint64_t subvol, uint64_t ino, ub_name_fn fn, void *arg)
{
	struct names_ctx c = { fn, arg };
	struct ub_icur cur;
	struct ub_key k;
	int stop = 0, ret = ub_icur_open(fs, subvol, ino, &cur);

	if (ret)
		return ret;
	ret = ub_icur_seek(&cur, BTRFS_INODE_REF_KEY, 0);
	while (ret == 0) {
		const uint8_t *d;
		uint32_t size;

		ub_icur_key(&cur, &k);
		if (k.type != BTRFS_INODE_REF_KEY && k.type != BTRFS_INODE_EXTREF_KEY)
			break;
		d = ub_icur_data(&cur, &size);
		stop = ub_ref_item_each(&k, d, size, one_name, &c);
		if (stop)
			break;
		ret = ub_icur_next(&cur);
	}
	ub_icur_close(&cur);
	if (stop)
		return stop;
	return ret < 0 ? ret : 0;
}

int ub_inode_names(struct ub_fs *fs, uint64_t subvol, uint64_t ino, ub_name_fn fn, void *arg)
{
	int in = ub_view_enter(fs);
	int ret = inode_names_impl(fs, subvol, ino, fn, arg);

	ub_view_exit(fs, in);
	return ret;
}
