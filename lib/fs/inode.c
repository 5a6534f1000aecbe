/* SPDX-License-Identifier: MIT */
/* Inodes, directories, path resolution, symlinks and xattrs. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include "ubtrfs/fs.h"
#include "items.h"

#define II(field, p) UB_GET(btrfs_inode_item, field, p)
#define DI(field, p) UB_GET(btrfs_dir_item, field, p)
#define DIR_ITEM_HDR ((uint32_t)sizeof(struct btrfs_dir_item))

static void read_ts(struct ub_timespec *t, const uint8_t *p)
{
	t->sec = (int64_t)UB_GET(btrfs_timespec, sec, p);
	t->nsec = (uint32_t)UB_GET(btrfs_timespec, nsec, p);
}

int ub_inode_read(struct ub_fs *fs, uint64_t subvol, uint64_t ino, struct ub_inode *out)
{
	struct ub_icur cur;
	struct ub_key key;
	const uint8_t *d;
	uint32_t size;
	int ret;

	memset(out, 0, sizeof(*out));
	out->subvol = subvol;
	out->ino = ino;
	if (ino == BTRFS_EMPTY_SUBVOL_DIR_OBJECTID) {
		/* the stand-in the kernel shows for a subvolume that a snapshot did not take along */
		out->mode = S_IFDIR | 0555;
		out->nlink = 1;
		return 0;
	}
	ret = ub_icur_open(fs, subvol, ino, &cur);
	if (ret)
		return ret;
	ret = ub_icur_seek(&cur, BTRFS_INODE_ITEM_KEY, 0);
	if (ret)
		goto out;
	ub_icur_key(&cur, &key);
	if (key.type != BTRFS_INODE_ITEM_KEY || key.offset != 0) {
		ret = 1;
		goto out;
	}
	d = ub_icur_data(&cur, &size);
	if (size < sizeof(struct btrfs_inode_item)) {
		ret = -EUCLEAN;
		goto out;
	}
	out->generation = II(generation, d);
	out->transid = II(transid, d);
	out->size = II(size, d);
	out->nbytes = II(nbytes, d);
	out->nlink = II(nlink, d);
	out->uid = (uint32_t)II(uid, d);
	out->gid = (uint32_t)II(gid, d);
	out->mode = (uint32_t)II(mode, d);
	out->rdev = II(rdev, d);
	out->flags = II(flags, d);
	read_ts(&out->atime, d + offsetof(struct btrfs_inode_item, atime));
	read_ts(&out->ctime, d + offsetof(struct btrfs_inode_item, ctime));
	read_ts(&out->mtime, d + offsetof(struct btrfs_inode_item, mtime));
	read_ts(&out->otime, d + offsetof(struct btrfs_inode_item, otime));
	/* no file can be larger than a signed 64-bit offset allows (the kernel's limit too) */
	if (out->size > INT64_MAX) {
		ub_err(&fs->log, "subvol %llu ino %llu: invalid inode size %llu", (unsigned long long)subvol,
		       (unsigned long long)ino, (unsigned long long)out->size);
		ret = -EUCLEAN;
	}
out:
	ub_icur_close(&cur);
	return ret > 0 ? -ENOENT : ret;
}

/*
 * A dir entry pointing at a subvolume is real only if the subvolume's ROOT_REF
 * names this directory and name; a snapshot keeps stale entries for the
 * subvolumes inside its source, which the kernel shows as empty directories.
 */
static void resolve_subvol_entry(struct ub_fs *fs, uint64_t subvol, uint64_t dir_ino, struct ub_dirent *de,
				 uint64_t target)
{
	struct ub_key key = { subvol, BTRFS_ROOT_REF_KEY, target };
	struct ub_path p;
	const uint8_t *d;
	uint32_t size;
	bool ok = false;

	ub_path_init(&p);
	if (ub_tree_lookup(&fs->tc, &fs->root_tree, &key, &p, &d, &size) == 0 && size >= sizeof(struct btrfs_root_ref)) {
		uint64_t dirid = UB_GET(btrfs_root_ref, dirid, d);
		uint32_t nlen = (uint32_t)UB_GET(btrfs_root_ref, name_len, d);
		ok = dirid == dir_ino && nlen == de->name_len && nlen <= size - sizeof(struct btrfs_root_ref) &&
		     memcmp(d + sizeof(struct btrfs_root_ref), de->name, nlen) == 0;
	}
	ub_path_release(&p);
	if (ok) {
		de->subvol = target;
		de->ino = BTRFS_FIRST_FREE_OBJECTID;
	} else {
		de->subvol = subvol;
		de->ino = BTRFS_EMPTY_SUBVOL_DIR_OBJECTID;
	}
}

/* Decode the dir item entry at `d` (bounds verified by the tree checker). Returns its total length. */
static uint32_t decode_entry(struct ub_fs *fs, uint64_t subvol, uint64_t dir_ino, const uint8_t *d, uint32_t avail,
			     struct ub_dirent *de)
{
	struct ub_key loc;
	uint32_t nlen, dlen;

	if (avail < DIR_ITEM_HDR)
		return 0;
	nlen = (uint32_t)DI(name_len, d);
	dlen = (uint32_t)DI(data_len, d);
	if ((uint64_t)DIR_ITEM_HDR + nlen + dlen > avail)
		return 0;
	ub_key_read(&loc, d);
	de->name = (const char *)d + DIR_ITEM_HDR;
	de->name_len = nlen;
	de->type = (uint8_t)DI(type, d);
	if (loc.type == BTRFS_ROOT_ITEM_KEY) {
		resolve_subvol_entry(fs, subvol, dir_ino, de, loc.objectid);
	} else {
		de->subvol = subvol;
		de->ino = loc.objectid;
	}
	return DIR_ITEM_HDR + nlen + dlen;
}

int ub_dir_iterate(struct ub_fs *fs, uint64_t subvol, uint64_t dir_ino,
		   int (*cb)(void *arg, const struct ub_dirent *de), void *arg)
{
	struct ub_icur cur;
	struct ub_key key;
	int ret, cb_ret = 0;

	if (dir_ino == BTRFS_EMPTY_SUBVOL_DIR_OBJECTID)
		return 0;
	ret = ub_icur_open(fs, subvol, dir_ino, &cur);
	if (ret)
		return ret;
	ret = ub_icur_seek(&cur, BTRFS_DIR_INDEX_KEY, 0);
	while (ret == 0) {
		struct ub_dirent de;
		const uint8_t *d;
		uint32_t size;

		ub_icur_key(&cur, &key);
		if (key.type != BTRFS_DIR_INDEX_KEY)
			break;
		d = ub_icur_data(&cur, &size);
		memset(&de, 0, sizeof(de));
		if (decode_entry(fs, subvol, dir_ino, d, size, &de)) {
			de.index = key.offset;
			cb_ret = cb(arg, &de);
			if (cb_ret)
				break;
		}
		ret = ub_icur_next(&cur);
	}
	ub_icur_close(&cur);
	if (cb_ret)
		return cb_ret;
	return ret < 0 ? ret : 0;
}

int ub_dir_lookup(struct ub_fs *fs, uint64_t subvol, uint64_t dir_ino, const char *name, size_t len,
		  struct ub_dirent *out)
{
	uint64_t hash = ub_name_hash(name, len);
	struct ub_icur cur;
	struct ub_key key;
	const uint8_t *d;
	uint32_t size, pos = 0;
	int ret;

	if (dir_ino == BTRFS_EMPTY_SUBVOL_DIR_OBJECTID)
		return -ENOENT;
	ret = ub_icur_open(fs, subvol, dir_ino, &cur);
	if (ret)
		return ret;
	ret = ub_icur_seek(&cur, BTRFS_DIR_ITEM_KEY, hash);
	if (ret)
		goto out;
	ub_icur_key(&cur, &key);
	ret = -ENOENT;
	if (key.type != BTRFS_DIR_ITEM_KEY || key.offset != hash)
		goto out;
	d = ub_icur_data(&cur, &size);
	/* hash collisions put several names into one item */
	while (pos < size) {
		struct ub_dirent de;
		uint32_t n;

		memset(&de, 0, sizeof(de));
		n = decode_entry(fs, subvol, dir_ino, d + pos, size - pos, &de);
		if (!n)
			break;
		if (de.name_len == len && memcmp(de.name, name, len) == 0) {
			*out = de;
			out->name = NULL; /* the block is released below */
			ret = 0;
			break;
		}
		pos += n;
	}
out:
	ub_icur_close(&cur);
	return ret > 0 ? -ENOENT : ret;
}

#define MAX_DEPTH 4096

int ub_path_lookup(struct ub_fs *fs, const char *path, uint64_t *subvol, uint64_t *ino)
{
	struct { uint64_t subvol, ino; } *stack;
	int depth = 0, ret = 0;
	const char *s = path;

	stack = malloc(sizeof(*stack) * MAX_DEPTH);
	if (!stack)
		return -ENOMEM;
	stack[0].subvol = BTRFS_FS_TREE_OBJECTID;
	stack[0].ino = BTRFS_FIRST_FREE_OBJECTID;
	while (*s) {
		const char *e;
		size_t len;
		struct ub_dirent de;
		struct ub_inode inode;

		while (*s == '/')
			s++;
		if (!*s)
			break;
		e = strchr(s, '/');
		len = e ? (size_t)(e - s) : strlen(s);
		if (len == 1 && s[0] == '.') {
			s += len;
			continue;
		}
		if (len == 2 && s[0] == '.' && s[1] == '.') {
			if (depth > 0)
				depth--;
			s += len;
			continue;
		}
		if (len > UB_NAME_LEN) {
			ret = -ENAMETOOLONG;
			break;
		}
		ret = ub_inode_read(fs, stack[depth].subvol, stack[depth].ino, &inode);
		if (ret)
			break;
		if (!S_ISDIR(inode.mode)) {
			ret = -ENOTDIR;
			break;
		}
		ret = ub_dir_lookup(fs, stack[depth].subvol, stack[depth].ino, s, len, &de);
		if (ret)
			break;
		if (depth + 1 >= MAX_DEPTH) {
			ret = -ELOOP;
			break;
		}
		depth++;
		stack[depth].subvol = de.subvol;
		stack[depth].ino = de.ino;
		s += len;
	}
	if (!ret) {
		*subvol = stack[depth].subvol;
		*ino = stack[depth].ino;
	}
	free(stack);
	return ret;
}

int ub_readlink(struct ub_fs *fs, uint64_t subvol, uint64_t ino, char *buf, size_t bufsz, size_t *len)
{
	struct ub_inode inode;
	uint64_t got = 0;
	uint8_t *tmp;
	int ret = ub_inode_read(fs, subvol, ino, &inode);

	if (ret)
		return ret;
	if (!S_ISLNK(inode.mode))
		return -EINVAL;
	if (inode.size > 65536)
		return -EUCLEAN;
	tmp = malloc(inode.size + 1);
	if (!tmp)
		return -ENOMEM;
	ret = ub_file_read(fs, subvol, ino, 0, inode.size, tmp, &got, NULL);
	if (ret == 0) {
		size_t n = got < bufsz - 1 ? got : bufsz - 1;
		memcpy(buf, tmp, n);
		buf[n] = 0;
		*len = got;
	}
	free(tmp);
	return ret;
}

int ub_xattr_iterate(struct ub_fs *fs, uint64_t subvol, uint64_t ino,
		     int (*cb)(void *arg, const struct ub_xattr *xa), void *arg)
{
	struct ub_icur cur;
	struct ub_key key;
	int ret, cb_ret = 0;

	if (ino == BTRFS_EMPTY_SUBVOL_DIR_OBJECTID)
		return 0;
	ret = ub_icur_open(fs, subvol, ino, &cur);
	if (ret)
		return ret;
	ret = ub_icur_seek(&cur, BTRFS_XATTR_ITEM_KEY, 0);
	while (ret == 0) {
		const uint8_t *d;
		uint32_t size, pos = 0;

		ub_icur_key(&cur, &key);
		if (key.type != BTRFS_XATTR_ITEM_KEY)
			break;
		d = ub_icur_data(&cur, &size);
		while (pos + DIR_ITEM_HDR <= size) {
			struct ub_xattr xa;
			uint32_t nlen = (uint32_t)DI(name_len, d + pos), dlen = (uint32_t)DI(data_len, d + pos);

			if ((uint64_t)pos + DIR_ITEM_HDR + nlen + dlen > size)
				break;
			xa.name = (const char *)d + pos + DIR_ITEM_HDR;
			xa.name_len = nlen;
			xa.value = d + pos + DIR_ITEM_HDR + nlen;
			xa.value_len = dlen;
			cb_ret = cb(arg, &xa);
			if (cb_ret)
				goto out;
			pos += DIR_ITEM_HDR + nlen + dlen;
		}
		ret = ub_icur_next(&cur);
	}
out:
	ub_icur_close(&cur);
	if (cb_ret)
		return cb_ret;
	return ret < 0 ? ret : 0;
}
