/* SPDX-License-Identifier: MIT */
/* Inodes, directories, path resolution, symlinks and xattrs. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include "ubtrfs/fs.h"
#include "fs_priv.h"
#include "items.h"

#define II(field, p) UB_GET(btrfs_inode_item, field, p)
#define DI(field, p) UB_GET(btrfs_dir_item, field, p)
#define DIR_ITEM_HDR ((uint32_t)sizeof(struct btrfs_dir_item))

static void read_ts(struct ub_timespec *t, const uint8_t *p)
{
	t->sec = (int64_t)UB_GET(btrfs_timespec, sec, p);
	t->nsec = (uint32_t)UB_GET(btrfs_timespec, nsec, p);
}

bool ub_name_valid(const char *name, size_t len)
{
	if (len == 0 || len > UB_NAME_LEN)
		return false;
	if ((len == 1 && name[0] == '.') || (len == 2 && name[0] == '.' && name[1] == '.'))
		return false;
	return memchr(name, '/', len) == NULL && memchr(name, 0, len) == NULL;
}

const char *ub_name_problem(const char *name, size_t len)
{
	if (len == 0)
		return "empty name";
	if (len > UB_NAME_LEN)
		return "name longer than 255 bytes";
	if ((len == 1 && name[0] == '.') || (len == 2 && name[0] == '.' && name[1] == '.'))
		return "name is \".\" or \"..\"";
	if (memchr(name, '/', len))
		return "name contains '/'";
	if (memchr(name, 0, len))
		return "name contains a NUL byte";
	return NULL;
}

void ub_name_escape(const char *name, size_t len, char *out, size_t outsz)
{
	size_t o = 0, i;

	if (!outsz)
		return;
	for (i = 0; i < len && o + 5 < outsz; i++) {
		unsigned char c = (unsigned char)name[i];
		if (c >= 0x20 && c < 0x7f && c != '\\' && c != '"')
			out[o++] = (char)c;
		else
			o += (size_t)snprintf(out + o, outsz - o, "\\x%02x", c);
	}
	if (i < len && outsz > 4) {
		/* cut short: say so rather than show a different name */
		o = o < outsz - 4 ? o : outsz - 4;
		memcpy(out + o, "...", 3);
		o += 3;
	}
	out[o] = 0;
}

static const char *type_name(uint8_t type)
{
	const char *n = ub_key_type_name(type);
	return n ? n : "item";
}

static void report_bad_name(struct ub_fs *fs, uint64_t subvol, const struct ub_key *key, const char *name,
			    size_t len, const char *problem)
{
	char esc[UB_NAME_LEN * 4 + 8];

	ub_name_escape(name, len, esc, sizeof(esc));
	ub_err(&fs->log, "subvol %llu dir %llu: %s %llu: %s (\"%s\", %zu bytes); entry ignored",
	       (unsigned long long)subvol, (unsigned long long)key->objectid, type_name(key->type),
	       (unsigned long long)key->offset, problem, esc, len);
}

static void now(struct ub_timespec *t)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	t->sec = ts.tv_sec;
	t->nsec = (uint32_t)ts.tv_nsec;
}

static int placeholder_inode_impl(struct ub_fs *fs, uint64_t subvol, uint64_t dir_ino, struct ub_inode *out)
{
	struct ub_inode dir;
	int ret;

	memset(out, 0, sizeof(*out));
	out->subvol = subvol;
	out->ino = BTRFS_EMPTY_SUBVOL_DIR_OBJECTID;
	/* what the kernel makes up for it: 0755, one link, the holder's owner and atime, "now" for the rest */
	out->mode = S_IFDIR | 0755;
	out->nlink = 1;
	now(&out->mtime);
	out->ctime = out->mtime;
	out->otime = out->mtime;
	if (!dir_ino)
		return 0;
	ret = ub_inode_read(fs, subvol, dir_ino, &dir);
	if (ret)
		return ret;
	out->uid = dir.uid;
	out->gid = dir.gid;
	out->atime = dir.atime;
	return 0;
}

int ub_placeholder_inode(struct ub_fs *fs, uint64_t subvol, uint64_t dir_ino, struct ub_inode *out)
{
	int in = ub_view_enter(fs);
	int ret = placeholder_inode_impl(fs, subvol, dir_ino, out);

	ub_view_exit(fs, in);
	return ret;
}

/*
 * With `cur` on the inode item: do the next items, in the same leaf, show that
 * there is no XATTR_ITEM? Extended attributes sort right after the back
 * references, so a reader need not search for them in most files. No block is
 * read for it: past the leaf's end the answer is "not known".
 */
static bool no_xattrs_after(struct ub_icur *cur)
{
	struct ub_key key;

	for (int i = 0; i < 8; i++) {
		int ret = ub_icur_next_here(cur);

		if (ret)
			return ret == 1;
		ub_icur_key(cur, &key);
		if (key.type >= BTRFS_XATTR_ITEM_KEY)
			return key.type > BTRFS_XATTR_ITEM_KEY;
	}
	return false;
}

static int inode_read_impl(struct ub_fs *fs, uint64_t subvol, uint64_t ino, struct ub_inode *out)
{
	struct ub_icur cur;
	struct ub_key key;
	const uint8_t *d;
	uint32_t size;
	int ret;

	if (ino == BTRFS_EMPTY_SUBVOL_DIR_OBJECTID)
		return ub_placeholder_inode(fs, subvol, 0, out);
	memset(out, 0, sizeof(*out));
	out->subvol = subvol;
	out->ino = ino;
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
	} else {
		out->no_xattrs = no_xattrs_after(&cur);
	}
out:
	ub_icur_close(&cur);
	return ret > 0 ? -ENOENT : ret;
}

int ub_inode_read(struct ub_fs *fs, uint64_t subvol, uint64_t ino, struct ub_inode *out)
{
	int in = ub_view_enter(fs);
	int ret = inode_read_impl(fs, subvol, ino, out);

	ub_view_exit(fs, in);
	return ret;
}

static int dirent_inode_impl(struct ub_fs *fs, const struct ub_dirent *de, struct ub_inode *out)
{
	if (de->ino == BTRFS_EMPTY_SUBVOL_DIR_OBJECTID)
		return ub_placeholder_inode(fs, de->subvol, de->dir_ino, out);
	return ub_inode_read(fs, de->subvol, de->ino, out);
}

int ub_dirent_inode(struct ub_fs *fs, const struct ub_dirent *de, struct ub_inode *out)
{
	int in = ub_view_enter(fs);
	int ret = dirent_inode_impl(fs, de, out);

	ub_view_exit(fs, in);
	return ret;
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

	struct ub_root rt;

	ub_path_init(&p);
	if (ub_fs_committed(fs, fs->root_tree, &rt) == 0 &&
	    ub_tree_lookup(&fs->tc, &rt, &key, &p, &d, &size) == 0 && size >= sizeof(struct btrfs_root_ref)) {
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

/*
 * Decode the dir item entry at `d` (bounds verified by the tree checker).
 * Returns its total length, 0 if it does not fit; *usable is false for an
 * entry that must not be shown (a name that cannot be a path component, a
 * location that is neither an inode nor a subvolume), already reported.
 */
static uint32_t decode_entry(struct ub_fs *fs, uint64_t subvol, const struct ub_key *key, const uint8_t *d,
			     uint32_t avail, struct ub_dirent *de, bool *usable)
{
	const uint64_t dir_ino = key->objectid;
	struct ub_key loc;
	uint32_t nlen, dlen;
	const char *problem;

	*usable = false;
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
	de->dir_subvol = subvol;
	de->dir_ino = dir_ino;
	problem = ub_name_problem(de->name, nlen);
	if (problem) {
		/* such a name would be a path component of something else, or cut a path short */
		report_bad_name(fs, subvol, key, de->name, nlen, problem);
		return DIR_ITEM_HDR + nlen + dlen;
	}
	if (loc.type == BTRFS_ROOT_ITEM_KEY) {
		resolve_subvol_entry(fs, subvol, dir_ino, de, loc.objectid);
	} else if (loc.type == BTRFS_INODE_ITEM_KEY && loc.objectid >= BTRFS_FIRST_FREE_OBJECTID &&
		   loc.objectid <= BTRFS_LAST_FREE_OBJECTID) {
		de->subvol = subvol;
		de->ino = loc.objectid;
	} else {
		char esc[UB_NAME_LEN * 4 + 8];
		ub_name_escape(de->name, nlen, esc, sizeof(esc));
		ub_err(&fs->log, "subvol %llu dir %llu: %s %llu (\"%s\"): location (%llu type %u %llu) is not an "
		       "inode or a subvolume; entry ignored", (unsigned long long)subvol, (unsigned long long)dir_ino,
		       type_name(key->type), (unsigned long long)key->offset, esc, (unsigned long long)loc.objectid,
		       loc.type, (unsigned long long)loc.offset);
		return DIR_ITEM_HDR + nlen + dlen;
	}
	*usable = true;
	return DIR_ITEM_HDR + nlen + dlen;
}

static int dir_iterate_impl(struct ub_fs *fs, uint64_t subvol, uint64_t dir_ino,
		   int (*cb)(void *arg, const struct ub_dirent *de), void *arg)
{
	return ub_dir_iterate_from(fs, subvol, dir_ino, 0, cb, arg);
}

int ub_dir_iterate(struct ub_fs *fs, uint64_t subvol, uint64_t dir_ino,
		   int (*cb)(void *arg, const struct ub_dirent *de), void *arg)
{
	int in = ub_view_enter(fs);
	int ret = dir_iterate_impl(fs, subvol, dir_ino, cb, arg);

	ub_view_exit(fs, in);
	return ret;
}

static int dir_iterate_from_impl(struct ub_fs *fs, uint64_t subvol, uint64_t dir_ino, uint64_t from_index,
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
	ret = ub_icur_seek(&cur, BTRFS_DIR_INDEX_KEY, from_index);
	while (ret == 0) {
		struct ub_dirent de;
		const uint8_t *d;
		uint32_t size;
		bool usable;

		ub_icur_key(&cur, &key);
		if (key.type != BTRFS_DIR_INDEX_KEY)
			break;
		d = ub_icur_data(&cur, &size);
		memset(&de, 0, sizeof(de));
		if (decode_entry(fs, subvol, &key, d, size, &de, &usable) && usable) {
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

int ub_dir_iterate_from(struct ub_fs *fs, uint64_t subvol, uint64_t dir_ino, uint64_t from_index,
			int (*cb)(void *arg, const struct ub_dirent *de), void *arg)
{
	int in = ub_view_enter(fs);
	int ret = dir_iterate_from_impl(fs, subvol, dir_ino, from_index, cb, arg);

	ub_view_exit(fs, in);
	return ret;
}

static int dir_lookup_impl(struct ub_fs *fs, uint64_t subvol, uint64_t dir_ino, const char *name, size_t len,
		  struct ub_dirent *out)
{
	uint64_t hash;
	struct ub_icur cur;
	struct ub_key key;
	const uint8_t *d;
	uint32_t size, pos = 0;
	int ret;

	/* no entry may carry such a name; asking for one is the caller's mistake */
	if (!ub_name_valid(name, len))
		return -EINVAL;
	if (dir_ino == BTRFS_EMPTY_SUBVOL_DIR_OBJECTID)
		return -ENOENT;
	hash = ub_name_hash(name, len);
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
		bool usable;
		uint32_t n;

		memset(&de, 0, sizeof(de));
		n = decode_entry(fs, subvol, &key, d + pos, size - pos, &de, &usable);
		if (!n)
			break;
		if (usable && de.name_len == len && memcmp(de.name, name, len) == 0) {
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

int ub_dir_lookup(struct ub_fs *fs, uint64_t subvol, uint64_t dir_ino, const char *name, size_t len,
		  struct ub_dirent *out)
{
	int in = ub_view_enter(fs);
	int ret = dir_lookup_impl(fs, subvol, dir_ino, name, len, out);

	ub_view_exit(fs, in);
	return ret;
}

struct ref_match {
	struct ub_fs *fs;
	uint64_t subvol;
	const struct ub_key *key;
	const struct ub_dirent *de;
};

static int ref_matches(void *arg, uint64_t parent, uint64_t index, const char *name, uint32_t nlen)
{
	const struct ref_match *m = arg;
	const char *problem = ub_name_problem(name, nlen);

	/* the root directory's own ref is ".." by design */
	if (problem && !(m->key->objectid == BTRFS_FIRST_FREE_OBJECTID && parent == m->key->objectid))
		report_bad_name(m->fs, m->subvol, m->key, name, nlen, problem);
	else if (!problem && parent == m->de->dir_ino && nlen == m->de->name_len &&
		 memcmp(name, m->de->name, nlen) == 0 && (!m->de->index || index == m->de->index))
		return 1;
	return 0;
}

/* Does one INODE_REF / INODE_EXTREF item of a directory hold (parent, name[, index])? */
static bool ref_item_matches(struct ub_fs *fs, uint64_t subvol, const struct ub_key *key, const uint8_t *d,
			     uint32_t size, const struct ub_dirent *de)
{
	struct ref_match m = { fs, subvol, key, de };

	return ub_ref_item_each(key, d, size, ref_matches, &m) == 1;
}

static int dir_entry_is_link_impl(struct ub_fs *fs, const struct ub_dirent *de)
{
	struct ub_icur cur;
	struct ub_key key;
	bool found = false, any = false;
	int ret;

	if (de->ino == BTRFS_EMPTY_SUBVOL_DIR_OBJECTID)
		return 1; /* a placeholder leads nowhere */
	if (de->subvol != de->dir_subvol) {
		/* resolve_subvol_entry matched the ROOT_REF; the child's ROOT_BACKREF must agree */
		struct ub_key k = { de->subvol, BTRFS_ROOT_BACKREF_KEY, de->dir_subvol };
		struct ub_path p;
		const uint8_t *d;
		uint32_t size;
		struct ub_root rt;

		ub_path_init(&p);
		ret = ub_fs_committed(fs, fs->root_tree, &rt);
		if (!ret)
			ret = ub_tree_lookup(&fs->tc, &rt, &k, &p, &d, &size);
		if (ret == 0 && size >= sizeof(struct btrfs_root_ref)) {
			uint32_t nlen = (uint32_t)UB_GET(btrfs_root_ref, name_len, d);
			found = UB_GET(btrfs_root_ref, dirid, d) == de->dir_ino && nlen == de->name_len &&
				nlen <= size - sizeof(struct btrfs_root_ref) &&
				memcmp(d + sizeof(struct btrfs_root_ref), de->name, nlen) == 0;
		}
		ub_path_release(&p);
		if (ret < 0)
			return ret;
		return found ? 1 : 0;
	}
	ret = ub_icur_open(fs, de->subvol, de->ino, &cur);
	if (ret)
		return ret;
	ret = ub_icur_seek(&cur, BTRFS_INODE_REF_KEY, 0);
	while (ret == 0 && !found) {
		const uint8_t *d;
		uint32_t size;

		ub_icur_key(&cur, &key);
		if (key.type != BTRFS_INODE_REF_KEY && key.type != BTRFS_INODE_EXTREF_KEY)
			break;
		any = true;
		d = ub_icur_data(&cur, &size);
		found = ref_item_matches(fs, de->subvol, &key, d, size, de);
		if (!found)
			ret = ub_icur_next(&cur);
	}
	ub_icur_close(&cur);
	if (ret < 0)
		return ret;
	return found ? 1 : any ? 0 : -ENOENT;
}

int ub_dir_entry_is_link(struct ub_fs *fs, const struct ub_dirent *de)
{
	int in = ub_view_enter(fs);
	int ret = dir_entry_is_link_impl(fs, de);

	ub_view_exit(fs, in);
	return ret;
}

#define MAX_DEPTH 4096

static int path_lookup_impl(struct ub_fs *fs, const char *path, uint64_t *subvol, uint64_t *ino)
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
		/* a directory is reached through its real name only, as the walks do */
		de.name = s;
		ret = ub_dirent_inode(fs, &de, &inode);
		if (ret == 0 && S_ISDIR(inode.mode))
			ret = ub_dir_entry_is_link(fs, &de);
		else if (ret == 0)
			ret = 1;
		if (ret == 0) {
			char esc[UB_NAME_LEN * 4 + 8];
			ub_name_escape(s, len, esc, sizeof(esc));
			ub_err(&fs->log, "subvol %llu dir %llu: entry \"%s\" names directory ino %llu of subvol %llu, whose "
			       "back reference gives it another name: not followed", (unsigned long long)de.dir_subvol,
			       (unsigned long long)de.dir_ino, esc, (unsigned long long)de.ino, (unsigned long long)de.subvol);
			ret = -EUCLEAN;
			break;
		}
		/* no back reference to compare with (-ENOENT): the name stands */
		if (ret < 0 && ret != -ENOENT)
			break;
		ret = 0;
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

int ub_path_lookup(struct ub_fs *fs, const char *path, uint64_t *subvol, uint64_t *ino)
{
	int in = ub_view_enter(fs);
	int ret = path_lookup_impl(fs, path, subvol, ino);

	ub_view_exit(fs, in);
	return ret;
}

static int path_lookup_inode_impl(struct ub_fs *fs, const char *path, struct ub_inode *out)
{
	const char *end = path + strlen(path), *slash;
	uint64_t subvol, ino, dsub, dino;
	struct ub_dirent de;
	size_t len;
	char *parent;
	int ret = ub_path_lookup(fs, path, &subvol, &ino);

	if (ret)
		return ret;
	if (ino != BTRFS_EMPTY_SUBVOL_DIR_OBJECTID)
		return ub_inode_read(fs, subvol, ino, out);
	/* a placeholder takes after the directory holding it: find that one again */
	while (end > path && end[-1] == '/')
		end--;
	for (slash = end; slash > path && slash[-1] != '/'; slash--)
		;
	len = (size_t)(end - slash);
	parent = strndup(path, (size_t)(slash - path));
	if (!parent)
		return -ENOMEM;
	ret = ub_path_lookup(fs, parent[0] ? parent : "/", &dsub, &dino);
	free(parent);
	if (!ret)
		ret = ub_dir_lookup(fs, dsub, dino, slash, len, &de);
	if (ret || de.ino != BTRFS_EMPTY_SUBVOL_DIR_OBJECTID)
		return ub_placeholder_inode(fs, subvol, 0, out);
	return ub_dirent_inode(fs, &de, out);
}

int ub_path_lookup_inode(struct ub_fs *fs, const char *path, struct ub_inode *out)
{
	int in = ub_view_enter(fs);
	int ret = path_lookup_inode_impl(fs, path, out);

	ub_view_exit(fs, in);
	return ret;
}

static uint64_t max_symlink_len(const struct ub_fs *fs)
{
	uint64_t inline_max = UB_MAX_INLINE_DATA_SIZE((uint64_t)fs->vol->nodesize);
	return inline_max < 4095 ? inline_max : 4095;
}

static int readlink_impl(struct ub_fs *fs, uint64_t subvol, uint64_t ino, char *buf, size_t bufsz, size_t *len)
{
	struct ub_inode inode;
	uint64_t got = 0;
	uint8_t *tmp;
	int ret = ub_inode_read(fs, subvol, ino, &inode);

	if (ret)
		return ret;
	if (!S_ISLNK(inode.mode))
		return -EINVAL;
	/* targets are stored inline and are at most PATH_MAX - 1 bytes; a larger size is corruption */
	if (inode.size > max_symlink_len(fs)) {
		ub_err(&fs->log, "subvol %llu ino %llu: symlink target claims %llu bytes, more than btrfs allows (%llu)",
		       (unsigned long long)subvol, (unsigned long long)ino, (unsigned long long)inode.size,
		       (unsigned long long)max_symlink_len(fs));
		return -EUCLEAN;
	}
	tmp = malloc(inode.size + 1);
	if (!tmp)
		return -ENOMEM;
	ret = ub_file_read(fs, subvol, ino, 0, inode.size, tmp, &got, NULL);
	/* a target cannot hold a NUL: one means the inode claims more than its extent stores */
	if (ret == 0 && memchr(tmp, 0, got)) {
		ub_err(&fs->log, "subvol %llu ino %llu: symlink target has a NUL byte at offset %llu of %llu",
		       (unsigned long long)subvol, (unsigned long long)ino,
		       (unsigned long long)((const uint8_t *)memchr(tmp, 0, got) - tmp), (unsigned long long)got);
		ret = -EUCLEAN;
	}
	if (ret == 0) {
		size_t n = got < bufsz - 1 ? got : bufsz - 1;
		memcpy(buf, tmp, n);
		buf[n] = 0;
		*len = got;
	}
	free(tmp);
	return ret;
}

int ub_readlink(struct ub_fs *fs, uint64_t subvol, uint64_t ino, char *buf, size_t bufsz, size_t *len)
{
	int in = ub_view_enter(fs);
	int ret = readlink_impl(fs, subvol, ino, buf, bufsz, len);

	ub_view_exit(fs, in);
	return ret;
}

static int xattr_iterate_impl(struct ub_fs *fs, uint64_t subvol, uint64_t ino,
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

int ub_xattr_iterate(struct ub_fs *fs, uint64_t subvol, uint64_t ino,
		     int (*cb)(void *arg, const struct ub_xattr *xa), void *arg)
{
	int in = ub_view_enter(fs);
	int ret = xattr_iterate_impl(fs, subvol, ino, cb, arg);

	ub_view_exit(fs, in);
	return ret;
}
