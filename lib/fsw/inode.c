/* SPDX-License-Identifier: MIT */
/*
 * The file API's namespace operations: inodes, names, links, rename, setattr.
 * Items as the kernel keeps them:
 *   (ino, INODE_ITEM, 0)                      the inode
 *   (ino, INODE_REF, parent)                  {index, name_len, name}... one record per name in parent
 *   (ino, INODE_EXTREF, hash(parent, name))   {parent, index, name_len, name}: when the ref item is full
 *   (dir, DIR_ITEM, name hash)                dir_item records (several on a hash collision)
 *   (dir, DIR_INDEX, index)                   one dir_item; index from 2 up, the highest + 1
 * A directory's size is twice the sum of its names' lengths and its nlink 1;
 * every change sets the changed inodes' transid, bumps their sequence and
 * sets ctime (and a directory's mtime when its names change).
 *
 * Inode numbers: the highest objectid in the subvolume tree + 1 (the kernel's
 * free objectid after a mount). Within one mount the kernel never reuses a
 * number; here a number freed and taken again in the same transaction is
 * harmless (every item of the old inode is gone, and the data references,
 * keyed by inode, fold).
 *
 * Unlinking the last name removes the inode at once (its extents, references,
 * checksums and items) in the same transaction; or, on an engine that keeps
 * orphans (ub_engine_keep_orphans: the mount, whose open files outlive their
 * names), leaves it with nlink 0 and an ORPHAN item, as the kernel does,
 * until ub_fsw_evict (orphan.c).
 */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <isa-l.h>

#include "fsw/fsw.h"
#include "txn/log_tree.h"

#define II_GET(f, p) UB_GET(btrfs_inode_item, f, p)
#define II_SET(f, p, v) UB_SET(btrfs_inode_item, f, p, v)
#define REF_HDR ((uint32_t)sizeof(struct btrfs_inode_ref))
#define EXTREF_HDR ((uint32_t)sizeof(struct btrfs_inode_extref))
#define LINK_MAX_BTRFS 65535U

int fsw_init_ro(struct fsw *w, struct ub_txn *t, uint64_t subvol)
{
	struct timespec ts;

	if (!t || !t->e)
		return -EINVAL;
	memset(w, 0, sizeof(*w));
	w->t = t;
	w->e = t->e;
	w->tc = &t->e->fs.tc;
	w->ta = ub_txn_ta(t);
	w->subvol = subvol;
	if (subvol != BTRFS_FS_TREE_OBJECTID &&
	    (subvol < BTRFS_FIRST_FREE_OBJECTID || subvol > BTRFS_LAST_FREE_OBJECTID))
		return -EINVAL;
	clock_gettime(CLOCK_REALTIME, &ts);
	w->now.sec = ts.tv_sec;
	w->now.nsec = (uint32_t)ts.tv_nsec;
	return ub_engine_root(t->e, subvol, &w->fs);
}

/* for changes: a read-only subvolume (ROOT_ITEM flag SUBVOL_RDONLY) refuses them, as the kernel (-EROFS) */
int fsw_init(struct fsw *w, struct ub_txn *t, uint64_t subvol)
{
	struct ub_key key;
	struct ub_path p;
	const uint8_t *d;
	uint32_t size;
	int ret = fsw_init_ro(w, t, subvol);

	if (ret)
		return ret;
	key = (struct ub_key){ subvol, BTRFS_ROOT_ITEM_KEY, w->fs->item_offset };
	ub_path_init(&p);
	ret = ub_tree_lookup(w->tc, &w->e->fs.root_tree->root, &key, &p, &d, &size);
	if (ret == 0 && size >= offsetof(struct btrfs_root_item, flags) + 8 &&
	    (UB_GET(btrfs_root_item, flags, d) & BTRFS_ROOT_SUBVOL_RDONLY))
		ret = -EROFS;
	ub_path_release(&p);
	return ret == -ENOENT ? 0 : ret;
}

void fsw_set_time(uint8_t *ii, size_t off, const struct ub_timespec *ts)
{
	UB_SET(btrfs_timespec, sec, ii + off, (uint64_t)ts->sec);
	UB_SET(btrfs_timespec, nsec, ii + off, ts->nsec);
}

void fsw_inode_touch(struct fsw *w, uint8_t *ii, bool mtime, bool ctime)
{
	II_SET(transid, ii, w->t->transid);
	II_SET(sequence, ii, II_GET(sequence, ii) + 1);
	if (mtime)
		fsw_set_time(ii, offsetof(struct btrfs_inode_item, mtime), &w->now);
	if (ctime)
		fsw_set_time(ii, offsetof(struct btrfs_inode_item, ctime), &w->now);
}

int fsw_inode_get(struct fsw *w, uint64_t ino, uint8_t ii[UB_II_SIZE])
{
	struct ub_key key = { ino, BTRFS_INODE_ITEM_KEY, 0 };
	struct ub_path p;
	const uint8_t *d;
	uint32_t size;
	int ret;

	if (ino < BTRFS_FIRST_FREE_OBJECTID || ino > BTRFS_LAST_FREE_OBJECTID)
		return -ENOENT;
	ub_path_init(&p);
	ret = ub_tree_lookup(w->tc, &w->fs->root, &key, &p, &d, &size);
	if (ret == 0) {
		if (size < UB_II_SIZE) {
			ub_err(&w->e->fs.log, "tree %llu inode %llu: inode item of %u bytes, expected %u",
				     (unsigned long long)w->subvol, (unsigned long long)ino, size, UB_II_SIZE);
			ret = -EUCLEAN;
		} else {
			memcpy(ii, d, UB_II_SIZE);
		}
	}
	ub_path_release(&p);
	return ret;
}

int fsw_inode_put(struct fsw *w, uint64_t ino, const uint8_t ii[UB_II_SIZE])
{
	struct ub_key key = { ino, BTRFS_INODE_ITEM_KEY, 0 };
	struct ub_path p;
	uint32_t size;
	uint8_t *d;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_search_slot(w->tc, w->ta, &w->fs->root, &key, &p, 0, true);
	if (ret == 0) {
		d = ub_path_data_mut(&p, &size);
		if (!d || size < UB_II_SIZE) {
			ret = -EUCLEAN;
		} else {
			memcpy(d, ii, UB_II_SIZE);
			ub_path_mark_dirty(&p);
			if (!w->t->log_replay) {
				w->fs->touched = true;
				w->fs->touch_sec = w->now.sec;
				w->fs->touch_nsec = w->now.nsec;
			}
		}
	}
	ub_path_release(&p);
	return ret > 0 ? -ENOENT : ret;
}

int fsw_del_key(struct fsw *w, struct ub_root *root, const struct ub_key *key)
{
	struct ub_path p;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_search_slot(w->tc, w->ta, root, key, &p, -1, true);
	if (ret == 0)
		ret = ub_tree_del_items(w->tc, w->ta, root, &p, p.slots[0], 1);
	ub_path_release(&p);
	return ret > 0 ? -ENOENT : ret;
}

/* the first item >= `from` if it is in [from, to]: 0 and *found, 1 none */
static int next_key_in(struct fsw *w, struct ub_root *root, const struct ub_key *from, const struct ub_key *to,
		       struct ub_key *found)
{
	struct ub_path p;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_search(w->tc, root, from, &p);
	if (ret == 0 || ret == 1) {
		ub_path_key(&p, found);
		ret = ub_key_cmp(found, to) <= 0 ? 0 : 1;
	} else if (ret == 2) {
		ret = 1;
	}
	ub_path_release(&p);
	return ret;
}

int fsw_del_all(struct fsw *w, uint64_t ino, uint8_t tmin, uint8_t tmax)
{
	struct ub_key from = { ino, tmin, 0 }, to = { ino, tmax, UINT64_MAX }, k;
	struct ub_path p;
	int ret;

	for (;;) {
		ret = next_key_in(w, &w->fs->root, &from, &to, &k);
		if (ret)
			return ret < 0 ? ret : 0;
		ub_path_init(&p);
		ret = ub_tree_search_slot(w->tc, w->ta, &w->fs->root, &k, &p, -1, true);
		if (ret == 0) {
			int slot = p.slots[0], n = 0, nr = (int)ub_eb_nritems(p.nodes[0]);
			struct ub_key kk;

			while (slot + n < nr) {
				ub_eb_item_key(p.nodes[0], slot + n, &kk);
				if (ub_key_cmp(&kk, &to) > 0)
					break;
				n++;
			}
			ret = ub_tree_del_items(w->tc, w->ta, &w->fs->root, &p, slot, n);
		}
		ub_path_release(&p);
		if (ret)
			return ret > 0 ? -EUCLEAN : ret;
	}
}

int fsw_dir_item_find(const uint8_t *d, uint32_t size, const char *name, size_t len, uint32_t *pos, uint32_t *esize)
{
	uint32_t at = 0;

	while (at + UB_DI_SIZE <= size) {
		uint32_t nl = (uint32_t)UB_GET(btrfs_dir_item, name_len, d + at);
		uint32_t es = UB_DI_SIZE + nl + (uint32_t)UB_GET(btrfs_dir_item, data_len, d + at);

		if (at + es > size)
			return -EUCLEAN;
		if (nl == len && memcmp(d + at + UB_DI_SIZE, name, len) == 0) {
			*pos = at;
			*esize = es;
			return 0;
		}
		at += es;
	}
	return -ENOENT;
}

int fsw_dir_item_add(struct fsw *w, const struct ub_key *key, const uint8_t *rec, uint32_t rsize)
{
	struct ub_path p;
	uint32_t size;
	uint8_t *d;
	int ret;

	ret = ub_tree_insert_item(w->tc, w->ta, &w->fs->root, key, rec, rsize);
	if (ret != -EEXIST)
		return ret;
	/* the records share one item, one after the other (a hash collision, or a second name's ref) */
	ub_path_init(&p);
	ret = ub_tree_search_slot(w->tc, w->ta, &w->fs->root, key, &p, (int)rsize, true);
	if (ret == 0)
		ret = ub_tree_extend_item(w->tc, w->ta, &w->fs->root, &p, rsize);
	if (ret == 0) {
		d = ub_path_data_mut(&p, &size);
		if (!d) {
			ret = -EUCLEAN;
		} else {
			memcpy(d + size - rsize, rec, rsize);
			ub_path_mark_dirty(&p);
		}
	}
	ub_path_release(&p);
	return ret > 0 ? -EUCLEAN : ret;
}

int fsw_dir_item_del(struct fsw *w, const struct ub_key *key, const char *name, size_t len)
{
	struct ub_path p;
	uint32_t size, pos, es;
	const uint8_t *d;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_search_slot(w->tc, w->ta, &w->fs->root, key, &p, -1, true);
	if (ret > 0)
		ret = -ENOENT;
	if (ret == 0) {
		d = ub_path_data(&p, &size);
		ret = fsw_dir_item_find(d, size, name, len, &pos, &es);
	}
	if (ret == 0) {
		if (es == size) {
			ret = ub_tree_del_items(w->tc, w->ta, &w->fs->root, &p, p.slots[0], 1);
		} else {
			uint8_t *m = ub_path_data_mut(&p, &size);
			if (!m) {
				ret = -EUCLEAN;
			} else {
				memmove(m + pos, m + pos + es, size - pos - es);
				ub_tree_truncate_item(w->tc, &p, size - es, true);
				ub_path_mark_dirty(&p);
			}
		}
	}
	ub_path_release(&p);
	return ret;
}

/* ---- names ---- */

int fsw_check_name(const char *name, size_t len)
{
	if (!name || len == 0)
		return -EINVAL;
	if (len > UB_NAME_LEN)
		return -ENAMETOOLONG;
	if ((len == 1 && name[0] == '.') || (len == 2 && name[0] == '.' && name[1] == '.'))
		return -EINVAL;
	if (memchr(name, '/', len) || memchr(name, 0, len))
		return -EINVAL;
	return 0;
}

/*
 * Inode numbers as the kernel hands them out during one mount: the highest
 * objectid of the tree + 1 when the tree is first used, then one up each
 * time, never reusing a number freed meanwhile (so a number names one inode
 * for the life of the open filesystem, which NFS-style handles and the FUSE
 * mount rely on). The count lives in the subvolume's root object
 * (ub_eroot.next_ino). A new snapshot starts counting when it is made (the
 * kernel loads its root then), so names its source unlinks before the first
 * create there do not lower the count.
 */
int fsw_next_ino(struct fsw *w, bool take, uint64_t *ino)
{
	uint64_t next = __atomic_load_n(&w->fs->next_ino, __ATOMIC_ACQUIRE), n;

	if (next == 0) {
		struct ub_key key = { BTRFS_LAST_FREE_OBJECTID, 255, UINT64_MAX };
		struct ub_path p;
		int ret;

		ub_path_init(&p);
		ret = ub_tree_search_le(w->tc, &w->fs->root, &key, &p);
		if (ret == 0)
			ub_path_key(&p, &key);
		ub_path_release(&p);
		if (ret < 0)
			return ret;
		n = ret == 0 && key.objectid >= BTRFS_FIRST_FREE_OBJECTID ? key.objectid + 1
									  : BTRFS_FIRST_FREE_OBJECTID + 1;
		/* whoever counted first wins; `next` then holds its count */
		if (__atomic_compare_exchange_n(&w->fs->next_ino, &next, n, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
			next = n;
	}
	if (take)
		next = __atomic_fetch_add(&w->fs->next_ino, 1, __ATOMIC_ACQ_REL);
	if (next > BTRFS_LAST_FREE_OBJECTID)
		return -EOVERFLOW;
	*ino = next;
	return 0;
}

/* One past the highest DIR_INDEX of dir in `root` (2 for none): 0 and *next, <0. */
static int index_after(struct fsw *w, const struct ub_root *root, uint64_t dir, uint64_t *next)
{
	struct ub_key key = { dir, BTRFS_DIR_INDEX_KEY, UINT64_MAX };
	struct ub_path p;
	int ret;

	*next = 2;
	if (!root->bytenr)
		return 0;
	ub_path_init(&p);
	ret = ub_tree_search_le(w->tc, root, &key, &p);
	if (ret == 0)
		ub_path_key(&p, &key);
	ub_path_release(&p);
	if (ret < 0)
		return ret;
	if (ret == 0 && key.objectid == dir && key.type == BTRFS_DIR_INDEX_KEY && key.offset >= 2)
		*next = key.offset + 1;
	return 0;
}

int fsw_next_index(struct fsw *w, uint64_t dir, uint64_t *index)
{
	struct ub_root last;
	uint64_t now, old = 2;
	int ret;

	/*
	 * Past every entry the directory has now and every one the last commit
	 * has (one removed since would otherwise give its index to a new name, and
	 * the replay of an fsync log would meet both), and never one handed out
	 * before while the engine is open.
	 */
	ret = index_after(w, &w->fs->root, dir, &now);
	/* a copy: a commit being written (without the writer lock) publishes its roots meanwhile */
	if (!ret && ub_roots_committed(w->e->fs.roots, w->fs, &last) == 0)
		ret = index_after(w, &last, dir, &old);
	if (ret)
		return ret;
	*index = ub_engine_dir_index(w->e, w->subvol, dir, now > old ? now : old);
	return 0;
}

/* name in dir: 0 and its location key and type, -ENOENT */
int fsw_lookup(struct fsw *w, uint64_t dir, const char *name, size_t len, struct ub_key *loc, uint8_t *type)
{
	struct ub_key key = { dir, BTRFS_DIR_ITEM_KEY, ub_name_hash(name, len) };
	struct ub_path p;
	const uint8_t *d;
	uint32_t size, pos, es;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_lookup(w->tc, &w->fs->root, &key, &p, &d, &size);
	if (ret == 0)
		ret = fsw_dir_item_find(d, size, name, len, &pos, &es);
	if (ret == 0) {
		ub_key_read(loc, d + pos + offsetof(struct btrfs_dir_item, location));
		*type = (uint8_t)UB_GET(btrfs_dir_item, type, d + pos);
	}
	ub_path_release(&p);
	return ret;
}

int fsw_get_dir(struct fsw *w, uint64_t dir, uint8_t ii[UB_II_SIZE])
{
	int ret = fsw_inode_get(w, dir, ii);

	if (ret == 0 && (II_GET(mode, ii) & S_IFMT) != S_IFDIR)
		ret = -ENOTDIR;
	return ret;
}

static uint64_t extref_hash(uint64_t parent, const char *name, size_t len)
{
	return crc32_iscsi((unsigned char *)(uintptr_t)name, (int)len, (uint32_t)parent);
}

/* the name's back reference in ino: an INODE_REF record, or an INODE_EXTREF when the ref item is full */
int fsw_add_ref(struct fsw *w, uint64_t ino, uint64_t parent, const char *name, size_t len, uint64_t index)
{
	uint8_t rec[EXTREF_HDR + UB_NAME_LEN];
	struct ub_key key = { ino, BTRFS_INODE_REF_KEY, parent };
	int ret;

	UB_SET(btrfs_inode_ref, index, rec, index);
	UB_SET(btrfs_inode_ref, name_len, rec, len);
	memcpy(rec + REF_HDR, name, len);
	ret = fsw_dir_item_add(w, &key, rec, REF_HDR + (uint32_t)len);
	if (ret != -EOVERFLOW)
		return ret;
	if (!(w->e->incompat & BTRFS_FEATURE_INCOMPAT_EXTENDED_IREF))
		return -EMLINK;
	UB_SET(btrfs_inode_extref, parent_objectid, rec, parent);
	UB_SET(btrfs_inode_extref, index, rec, index);
	UB_SET(btrfs_inode_extref, name_len, rec, len);
	memcpy(rec + EXTREF_HDR, name, len);
	key = (struct ub_key){ ino, BTRFS_INODE_EXTREF_KEY, extref_hash(parent, name, len) };
	return fsw_dir_item_add(w, &key, rec, EXTREF_HDR + (uint32_t)len);
}

/* remove a record from a ref / extref item: hdr is the record header size, match() finds it */
static int del_ref_rec(struct fsw *w, const struct ub_key *key, bool ext, uint64_t parent, const char *name,
		       size_t len, uint64_t *index)
{
	uint32_t hdr = ext ? EXTREF_HDR : REF_HDR, size, at = 0;
	struct ub_path p;
	const uint8_t *d;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_search_slot(w->tc, w->ta, &w->fs->root, key, &p, -1, true);
	if (ret > 0)
		ret = -ENOENT;
	if (ret) {
		ub_path_release(&p);
		return ret;
	}
	d = ub_path_data(&p, &size);
	ret = -ENOENT;
	while (at + hdr <= size) {
		uint32_t nl = ext ? (uint32_t)UB_GET(btrfs_inode_extref, name_len, d + at)
				  : (uint32_t)UB_GET(btrfs_inode_ref, name_len, d + at);
		uint32_t rs = hdr + nl;

		if (at + rs > size) {
			ret = -EUCLEAN;
			break;
		}
		if (nl == len && memcmp(d + at + hdr, name, len) == 0 &&
		    (!ext || UB_GET(btrfs_inode_extref, parent_objectid, d + at) == parent)) {
			*index = ext ? UB_GET(btrfs_inode_extref, index, d + at) : UB_GET(btrfs_inode_ref, index, d + at);
			if (rs == size) {
				ret = ub_tree_del_items(w->tc, w->ta, &w->fs->root, &p, p.slots[0], 1);
			} else {
				uint8_t *m = ub_path_data_mut(&p, &size);
				if (!m) {
					ret = -EUCLEAN;
					break;
				}
				memmove(m + at, m + at + rs, size - at - rs);
				ub_tree_truncate_item(w->tc, &p, size - rs, true);
				ub_path_mark_dirty(&p);
				ret = 0;
			}
			break;
		}
		at += rs;
	}
	ub_path_release(&p);
	return ret;
}

int fsw_del_ref(struct fsw *w, uint64_t ino, uint64_t parent, const char *name, size_t len, uint64_t *index)
{
	struct ub_key key = { ino, BTRFS_INODE_REF_KEY, parent };
	int ret = del_ref_rec(w, &key, false, parent, name, len, index);

	if (ret != -ENOENT)
		return ret;
	key = (struct ub_key){ ino, BTRFS_INODE_EXTREF_KEY, extref_hash(parent, name, len) };
	return del_ref_rec(w, &key, true, parent, name, len, index);
}

/* dir entry (DIR_ITEM + DIR_INDEX) for loc; the directory's size and times follow */
int fsw_add_entry(struct fsw *w, uint64_t dir, const char *name, size_t len, const struct ub_key *loc,
		     uint8_t type, uint64_t index)
{
	uint8_t rec[UB_DI_SIZE + UB_NAME_LEN], dii[UB_II_SIZE];
	uint32_t rsize = UB_DI_SIZE + (uint32_t)len;
	struct ub_key key = { dir, BTRFS_DIR_ITEM_KEY, ub_name_hash(name, len) };
	int ret;

	/* the fsync log of a directory logs the index ranges that changed */
	ub_log_note(w->t, w->subvol, dir, index, index + 1);
	memset(rec, 0, UB_DI_SIZE);
	ub_key_write(rec + offsetof(struct btrfs_dir_item, location), loc);
	UB_SET(btrfs_dir_item, transid, rec, w->t->transid);
	UB_SET(btrfs_dir_item, data_len, rec, 0);
	UB_SET(btrfs_dir_item, name_len, rec, len);
	UB_SET(btrfs_dir_item, type, rec, type);
	memcpy(rec + UB_DI_SIZE, name, len);
	ret = fsw_dir_item_add(w, &key, rec, rsize);
	if (ret)
		return ret;
	key = (struct ub_key){ dir, BTRFS_DIR_INDEX_KEY, index };
	ret = ub_tree_insert_item(w->tc, w->ta, &w->fs->root, &key, rec, rsize);
	if (ret)
		return ret == -EEXIST ? -EUCLEAN : ret;
	ret = fsw_inode_get(w, dir, dii);
	if (ret)
		return ret;
	II_SET(size, dii, II_GET(size, dii) + 2 * len);
	fsw_inode_touch(w, dii, true, true);
	return fsw_inode_put(w, dir, dii);
}

int fsw_del_entry(struct fsw *w, uint64_t dir, const char *name, size_t len, uint64_t index)
{
	struct ub_key key = { dir, BTRFS_DIR_ITEM_KEY, ub_name_hash(name, len) };
	uint8_t dii[UB_II_SIZE];
	int ret;

	ub_log_note(w->t, w->subvol, dir, index, index + 1);
	ret = fsw_dir_item_del(w, &key, name, len);
	if (ret)
		return ret == -ENOENT ? -EUCLEAN : ret;
	key = (struct ub_key){ dir, BTRFS_DIR_INDEX_KEY, index };
	ret = fsw_del_key(w, &w->fs->root, &key);
	if (ret)
		return ret == -ENOENT ? -EUCLEAN : ret;
	ret = fsw_inode_get(w, dir, dii);
	if (ret)
		return ret;
	if (II_GET(size, dii) < 2 * len)
		return -EUCLEAN;
	II_SET(size, dii, II_GET(size, dii) - 2 * len);
	fsw_inode_touch(w, dii, true, true);
	return fsw_inode_put(w, dir, dii);
}

/* a name for inode ino (ref + entry + the parent's size) with a new index */
static int add_name(struct fsw *w, uint64_t dir, const char *name, size_t len, uint64_t ino, uint32_t mode)
{
	struct ub_key loc = { ino, BTRFS_INODE_ITEM_KEY, 0 };
	uint64_t index;
	int ret;

	ub_log_note_names(w->t, w->subvol, ino);
	ret = fsw_next_index(w, dir, &index);
	if (!ret)
		ret = fsw_add_ref(w, ino, dir, name, len, index);
	if (!ret)
		ret = fsw_add_entry(w, dir, name, len, &loc, ub_mode_ftype(mode), index);
	return ret;
}

static int del_name(struct fsw *w, uint64_t dir, const char *name, size_t len, uint64_t ino)
{
	uint64_t index = 0;
	int ret;

	ub_log_note_names(w->t, w->subvol, ino);
	ret = fsw_del_ref(w, ino, dir, name, len, &index);

	if (ret)
		return ret == -ENOENT ? -EUCLEAN : ret;
	return fsw_del_entry(w, dir, name, len, index);
}

/* every item of an inode that lost its last name, with its data */
int fsw_evict(struct fsw *w, uint64_t ino, uint8_t *ii)
{
	int ret = 0;

	if ((II_GET(mode, ii) & S_IFMT) == S_IFREG || (II_GET(mode, ii) & S_IFMT) == S_IFLNK)
		ret = fsw_drop_extents(w, ino, ii, 0, UINT64_MAX);
	if (!ret)
		ret = fsw_del_all(w, ino, 0, 255);
	return ret;
}

int fsw_alloc_inode(struct fsw *w, const uint8_t *dii, uint32_t mode, uint32_t uid, uint32_t gid, uint64_t rdev,
		    uint32_t nlink, uint64_t *out)
{
	uint8_t ii[UB_II_SIZE];
	struct ub_key key;
	uint64_t ino;
	int ret;

	ret = fsw_next_ino(w, true, &ino);
	if (ret)
		return ret;
	memset(ii, 0, sizeof(ii));
	II_SET(generation, ii, w->t->transid);
	II_SET(transid, ii, w->t->transid);
	II_SET(nlink, ii, nlink);
	II_SET(uid, ii, uid);
	II_SET(gid, ii, gid);
	II_SET(mode, ii, mode);
	II_SET(rdev, ii, rdev);
	II_SET(sequence, ii, 1);
	/* a new inode takes the directory's NODATASUM / NODATACOW / COMPRESS choices, as the kernel's inherit */
	II_SET(flags, ii, II_GET(flags, dii) & (UB_INODE_NODATASUM | UB_INODE_NODATACOW | UB_INODE_COMPRESS |
						 UB_INODE_NOCOMPRESS));
	fsw_set_time(ii, offsetof(struct btrfs_inode_item, atime), &w->now);
	fsw_set_time(ii, offsetof(struct btrfs_inode_item, ctime), &w->now);
	fsw_set_time(ii, offsetof(struct btrfs_inode_item, mtime), &w->now);
	fsw_set_time(ii, offsetof(struct btrfs_inode_item, otime), &w->now);
	key = (struct ub_key){ ino, BTRFS_INODE_ITEM_KEY, 0 };
	ret = ub_tree_insert_item(w->tc, w->ta, &w->fs->root, &key, ii, UB_II_SIZE);
	if (ret)
		return ret == -EEXIST ? -EUCLEAN : ret;
	*out = ino;
	return 0;
}

static int new_inode(struct fsw *w, uint64_t dir, const char *name, size_t len, uint32_t mode, uint32_t uid,
		     uint32_t gid, uint64_t rdev, const struct ub_fsw_xattr *xa, size_t nxa, uint64_t *out)
{
	uint8_t dii[UB_II_SIZE];
	struct ub_key loc;
	uint8_t type;
	uint64_t ino;
	int ret;

	ret = fsw_check_name(name, len);
	if (!ret)
		ret = fsw_get_dir(w, dir, dii);
	if (ret)
		return ret;
	ret = fsw_lookup(w, dir, name, len, &loc, &type);
	if (ret == 0)
		return -EEXIST;
	if (ret != -ENOENT)
		return ret;
	ret = fsw_alloc_inode(w, dii, mode, uid, gid, rdev, 1, &ino);
	/* its xattrs are part of its birth (inherited ACLs, properties): no ctime of their own */
	for (size_t i = 0; !ret && i < nxa; i++)
		ret = fsw_xattr_set(w, ino, xa[i].name, xa[i].nlen, xa[i].value, xa[i].vlen, UB_FSW_XATTR_CREATE);
	if (!ret)
		ret = add_name(w, dir, name, len, ino, mode);
	if (!ret && out)
		*out = ino;
	return ret;
}

int ub_fsw_create(struct ub_txn *t, uint64_t subvol, uint64_t dir, const char *name, size_t len, uint32_t mode,
		  uint32_t uid, uint32_t gid, uint64_t rdev, uint64_t *ino)
{
	return ub_fsw_create_ex(t, subvol, dir, name, len, mode, uid, gid, rdev, NULL, 0, ino);
}

int ub_fsw_create_ex(struct ub_txn *t, uint64_t subvol, uint64_t dir, const char *name, size_t len, uint32_t mode,
		     uint32_t uid, uint32_t gid, uint64_t rdev, const struct ub_fsw_xattr *xa, size_t nxa, uint64_t *ino)
{
	struct fsw w;
	int ret;

	switch (mode & S_IFMT) {
	case S_IFREG: case S_IFDIR: case S_IFIFO: case S_IFSOCK:
		rdev = 0;
		break;
	case S_IFCHR: case S_IFBLK:
		break;
	case 0:
		mode |= S_IFREG;
		break;
	default:
		return -EINVAL;
	}
	ret = fsw_init(&w, t, subvol);
	if (ret)
		return ret;
	return new_inode(&w, dir, name, len, mode & (S_IFMT | 07777), uid, gid, rdev, xa, nxa, ino);
}

int ub_fsw_tmpfile_ex(struct ub_txn *t, uint64_t subvol, uint64_t dir, uint32_t mode, uint32_t uid, uint32_t gid,
		      const struct ub_fsw_xattr *xa, size_t nxa, uint64_t *ino)
{
	uint8_t dii[UB_II_SIZE];
	struct fsw w;
	int ret;

	if ((mode & S_IFMT) && (mode & S_IFMT) != S_IFREG)
		return -EINVAL;
	ret = fsw_init(&w, t, subvol);
	if (!ret)
		ret = fsw_get_dir(&w, dir, dii);
	if (!ret)
		ret = fsw_alloc_inode(&w, dii, S_IFREG | (mode & 07777), uid, gid, 0, 0, ino);
	for (size_t i = 0; !ret && i < nxa; i++)
		ret = fsw_xattr_set(&w, *ino, xa[i].name, xa[i].nlen, xa[i].value, xa[i].vlen, UB_FSW_XATTR_CREATE);
	return ret ? ret : fsw_orphan_add(&w, *ino);
}

int ub_fsw_mkdir(struct ub_txn *t, uint64_t subvol, uint64_t dir, const char *name, size_t len, uint32_t mode,
		 uint32_t uid, uint32_t gid, uint64_t *ino)
{
	return ub_fsw_create(t, subvol, dir, name, len, S_IFDIR | (mode & 07777), uid, gid, 0, ino);
}

int ub_fsw_symlink(struct ub_txn *t, uint64_t subvol, uint64_t dir, const char *name, size_t len,
		   const char *target, size_t tlen, uint32_t uid, uint32_t gid, uint64_t *out)
{
	uint8_t ii[UB_II_SIZE], fe[UB_FE_SIZE + 4096];
	struct ub_key key;
	struct fsw w;
	uint64_t ino;
	uint32_t max;
	int ret;

	ret = fsw_init(&w, t, subvol);
	if (ret)
		return ret;
	/* the kernel's BTRFS_MAX_INLINE_DATA_SIZE, and below a sector (a symlink is one inline extent) */
	max = w.e->fs.vol->nodesize - UB_HEADER_SIZE - UB_ITEM_SIZE - UB_FILE_EXTENT_INLINE_DATA_START;
	if (max > w.e->fs.vol->sectorsize - 1)
		max = w.e->fs.vol->sectorsize - 1;
	if (!target || tlen == 0)
		return -EINVAL;
	if (tlen > max)
		return -ENAMETOOLONG;
	if (memchr(target, 0, tlen))
		return -EINVAL;
	ret = new_inode(&w, dir, name, len, S_IFLNK | 0777, uid, gid, 0, NULL, 0, &ino);
	if (ret)
		return ret;
	memset(fe, 0, UB_FE_SIZE);
	UB_SET(btrfs_file_extent_item, generation, fe, t->transid);
	UB_SET(btrfs_file_extent_item, ram_bytes, fe, tlen);
	UB_SET(btrfs_file_extent_item, compression, fe, UB_COMPRESS_NONE);
	UB_SET(btrfs_file_extent_item, type, fe, BTRFS_FILE_EXTENT_INLINE);
	memcpy(fe + UB_FILE_EXTENT_INLINE_DATA_START, target, tlen);
	key = (struct ub_key){ ino, BTRFS_EXTENT_DATA_KEY, 0 };
	ret = ub_tree_insert_item(w.tc, w.ta, &w.fs->root, &key, fe, UB_FILE_EXTENT_INLINE_DATA_START + (uint32_t)tlen);
	if (!ret)
		ret = fsw_inode_get(&w, ino, ii);
	if (ret)
		return ret;
	II_SET(size, ii, tlen);
	II_SET(nbytes, ii, tlen);
	ret = fsw_inode_put(&w, ino, ii);
	if (!ret && out)
		*out = ino;
	return ret;
}

int ub_fsw_link(struct ub_txn *t, uint64_t subvol, uint64_t ino, uint64_t dir, const char *name, size_t len)
{
	uint8_t ii[UB_II_SIZE], dii[UB_II_SIZE];
	struct ub_key loc;
	struct fsw w;
	uint8_t type;
	int ret;

	ret = fsw_init(&w, t, subvol);
	if (!ret)
		ret = fsw_check_name(name, len);
	if (!ret)
		ret = fsw_get_dir(&w, dir, dii);
	if (!ret)
		ret = fsw_inode_get(&w, ino, ii);
	if (ret)
		return ret;
	if ((II_GET(mode, ii) & S_IFMT) == S_IFDIR)
		return -EPERM;
	if (II_GET(nlink, ii) >= LINK_MAX_BTRFS)
		return -EMLINK;
	ret = fsw_lookup(&w, dir, name, len, &loc, &type);
	if (ret == 0)
		return -EEXIST;
	if (ret != -ENOENT)
		return ret;
	ret = add_name(&w, dir, name, len, ino, (uint32_t)II_GET(mode, ii));
	if (!ret)
		ret = fsw_inode_get(&w, ino, ii);
	if (ret)
		return ret;
	/* an orphan given a name (linkat of an O_TMPFILE file) is no orphan any more */
	if (II_GET(nlink, ii) == 0)
		ret = fsw_orphan_del(&w, ino);
	if (ret)
		return ret;
	II_SET(nlink, ii, II_GET(nlink, ii) + 1);
	fsw_inode_touch(&w, ii, false, true);
	return fsw_inode_put(&w, ino, ii);
}

/* one name less for ino (already checked to be named name in dir) */
static int drop_name(struct fsw *w, uint64_t dir, const char *name, size_t len, uint64_t ino)
{
	uint8_t ii[UB_II_SIZE];
	int ret;

	ret = del_name(w, dir, name, len, ino);
	if (!ret)
		ret = fsw_inode_get(w, ino, ii);
	if (ret)
		return ret;
	if ((II_GET(mode, ii) & S_IFMT) == S_IFDIR || II_GET(nlink, ii) <= 1) {
		if (!w->e->keep_orphans)
			return fsw_evict(w, ino, ii);
		/* the last name: kept, nlink 0, until ub_fsw_evict (a directory's size is 0 then, as rmdir leaves it) */
		II_SET(nlink, ii, 0);
		if ((II_GET(mode, ii) & S_IFMT) == S_IFDIR)
			II_SET(size, ii, 0);
		fsw_inode_touch(w, ii, false, true);
		ret = fsw_inode_put(w, ino, ii);
		return ret ? ret : fsw_orphan_add(w, ino);
	}
	II_SET(nlink, ii, II_GET(nlink, ii) - 1);
	fsw_inode_touch(w, ii, false, true);
	return fsw_inode_put(w, ino, ii);
}

static int dir_empty(struct fsw *w, uint64_t ino, const uint8_t *ii)
{
	struct ub_key from = { ino, BTRFS_DIR_ITEM_KEY, 0 }, to = { ino, BTRFS_DIR_INDEX_KEY, UINT64_MAX }, k;
	int ret = next_key_in(w, &w->fs->root, &from, &to, &k);

	if (ret < 0)
		return ret;
	return ret == 1 && II_GET(size, ii) == 0 ? 0 : -ENOTEMPTY;
}

static int remove_name(struct fsw *w, uint64_t dir, const char *name, size_t len, bool isdir)
{
	uint8_t ii[UB_II_SIZE], dii[UB_II_SIZE];
	struct ub_key loc;
	uint8_t type;
	int ret;

	if (len == 1 && name && name[0] == '.')
		return -EINVAL;
	if (len == 2 && name && name[0] == '.' && name[1] == '.')
		return -ENOTEMPTY;
	ret = fsw_check_name(name, len);
	if (!ret)
		ret = fsw_get_dir(w, dir, dii);
	if (!ret)
		ret = fsw_lookup(w, dir, name, len, &loc, &type);
	if (ret)
		return ret;
	if (loc.type != BTRFS_INODE_ITEM_KEY)
		return -EPERM; /* a subvolume: ub_fsw_subvol_delete's job */
	ret = fsw_inode_get(w, loc.objectid, ii);
	if (ret)
		return ret == -ENOENT ? -EUCLEAN : ret;
	if (isdir) {
		if ((II_GET(mode, ii) & S_IFMT) != S_IFDIR)
			return -ENOTDIR;
		ret = dir_empty(w, loc.objectid, ii);
		if (ret)
			return ret;
	} else if ((II_GET(mode, ii) & S_IFMT) == S_IFDIR) {
		return -EISDIR;
	}
	return drop_name(w, dir, name, len, loc.objectid);
}

int ub_fsw_unlink(struct ub_txn *t, uint64_t subvol, uint64_t dir, const char *name, size_t len)
{
	struct fsw w;
	int ret = fsw_init(&w, t, subvol);

	return ret ? ret : remove_name(&w, dir, name, len, false);
}

int ub_fsw_rmdir(struct ub_txn *t, uint64_t subvol, uint64_t dir, const char *name, size_t len)
{
	struct fsw w;
	int ret = fsw_init(&w, t, subvol);

	return ret ? ret : remove_name(&w, dir, name, len, true);
}

/* is `anc` dir or one of dir's ancestors? (directories have one INODE_REF: their parent) */
static int is_ancestor(struct fsw *w, uint64_t anc, uint64_t dir)
{
	for (int depth = 0; depth < 65536; depth++) {
		struct ub_key from = { dir, BTRFS_INODE_REF_KEY, 0 }, to = { dir, BTRFS_INODE_REF_KEY, UINT64_MAX }, k;
		int ret;

		if (dir == anc)
			return 1;
		ret = next_key_in(w, &w->fs->root, &from, &to, &k);
		if (ret < 0)
			return ret;
		if (ret == 1 || k.offset == dir)
			return 0; /* the subvolume's top directory */
		dir = k.offset;
	}
	return -ELOOP;
}

int ub_fsw_rename(struct ub_txn *t, uint64_t subvol, uint64_t olddir, const char *oldname, size_t oldlen,
		  uint64_t newdir, const char *newname, size_t newlen, unsigned flags)
{
	return ub_fsw_rename2(t, subvol, olddir, oldname, oldlen, newdir, newname, newlen, flags, 0, 0);
}

static int rename_common(struct fsw *w, uint64_t olddir, const char *oldname, size_t oldlen, uint64_t newdir,
			 const char *newname, size_t newlen, unsigned flags);

int ub_fsw_rename2(struct ub_txn *t, uint64_t subvol, uint64_t olddir, const char *oldname, size_t oldlen,
		   uint64_t newdir, const char *newname, size_t newlen, unsigned flags, uint32_t uid, uint32_t gid)
{
	struct fsw w;
	int ret;

	if ((flags & UB_FSW_RENAME_WHITEOUT) && (flags & UB_FSW_RENAME_EXCHANGE))
		return -EINVAL;
	ret = fsw_init(&w, t, subvol);
	if (!ret)
		ret = rename_common(&w, olddir, oldname, oldlen, newdir, newname, newlen,
				    flags & ~UB_FSW_RENAME_WHITEOUT);
	/* RENAME_WHITEOUT: the old name becomes a whiteout, a character device 0:0 of no permissions (overlayfs') */
	if (!ret && (flags & UB_FSW_RENAME_WHITEOUT))
		ret = new_inode(&w, olddir, oldname, oldlen, S_IFCHR, uid, gid, 0, NULL, 0, NULL);
	return ret;
}

static int rename_common(struct fsw *wp, uint64_t olddir, const char *oldname, size_t oldlen, uint64_t newdir,
			 const char *newname, size_t newlen, unsigned flags)
{
	uint8_t sii[UB_II_SIZE], dii[UB_II_SIZE], tmp[UB_II_SIZE];
	struct ub_key sloc, dloc;
	uint8_t stype, dtype;
	bool sdir, ddir = false, dexists;
	struct fsw w = *wp;
	int ret;

	if ((flags & ~(UB_FSW_RENAME_NOREPLACE | UB_FSW_RENAME_EXCHANGE)) ||
	    (flags & UB_FSW_RENAME_NOREPLACE && flags & UB_FSW_RENAME_EXCHANGE))
		return -EINVAL;
	ret = fsw_check_name(oldname, oldlen);
	if (!ret)
		ret = fsw_check_name(newname, newlen);
	if (!ret)
		ret = fsw_get_dir(&w, olddir, tmp);
	if (!ret)
		ret = fsw_get_dir(&w, newdir, tmp);
	if (!ret)
		ret = fsw_lookup(&w, olddir, oldname, oldlen, &sloc, &stype);
	if (ret)
		return ret;
	ret = fsw_lookup(&w, newdir, newname, newlen, &dloc, &dtype);
	if (ret && ret != -ENOENT)
		return ret;
	dexists = ret == 0;
	if (sloc.type == BTRFS_ROOT_ITEM_KEY && !dexists && !(flags & UB_FSW_RENAME_EXCHANGE))
		return fsw_subvol_move(&w, olddir, oldname, oldlen, newdir, newname, newlen, sloc.objectid);
	/* replacing or exchanging with a subvolume: not yet */
	if (sloc.type != BTRFS_INODE_ITEM_KEY || (dexists && dloc.type != BTRFS_INODE_ITEM_KEY))
		return -EXDEV;
	if ((flags & UB_FSW_RENAME_EXCHANGE) && !dexists)
		return -ENOENT;
	if ((flags & UB_FSW_RENAME_NOREPLACE) && dexists)
		return -EEXIST;
	ret = fsw_inode_get(&w, sloc.objectid, sii);
	if (ret)
		return ret == -ENOENT ? -EUCLEAN : ret;
	sdir = (II_GET(mode, sii) & S_IFMT) == S_IFDIR;
	if (dexists) {
		if (dloc.objectid == sloc.objectid)
			return 0; /* two names of one inode: rename(2) does nothing */
		ret = fsw_inode_get(&w, dloc.objectid, dii);
		if (ret)
			return ret == -ENOENT ? -EUCLEAN : ret;
		ddir = (II_GET(mode, dii) & S_IFMT) == S_IFDIR;
	}
	/* a directory may not go below itself */
	if (sdir && olddir != newdir) {
		ret = is_ancestor(&w, sloc.objectid, newdir);
		if (ret)
			return ret < 0 ? ret : -EINVAL;
	}
	/* nor may the target be an ancestor of the source (the VFS answers ENOTEMPTY, EINVAL for an exchange) */
	if (dexists && ddir && olddir != newdir) {
		ret = is_ancestor(&w, dloc.objectid, olddir);
		if (ret)
			return ret < 0 ? ret : (flags & UB_FSW_RENAME_EXCHANGE) ? -EINVAL : -ENOTEMPTY;
	}
	if (flags & UB_FSW_RENAME_EXCHANGE) {
		ret = del_name(&w, olddir, oldname, oldlen, sloc.objectid);
		if (!ret)
			ret = del_name(&w, newdir, newname, newlen, dloc.objectid);
		if (!ret)
			ret = add_name(&w, newdir, newname, newlen, sloc.objectid, (uint32_t)II_GET(mode, sii));
		if (!ret)
			ret = add_name(&w, olddir, oldname, oldlen, dloc.objectid, (uint32_t)II_GET(mode, dii));
		if (!ret)
			ret = fsw_inode_get(&w, dloc.objectid, dii);
		if (ret)
			return ret;
		fsw_inode_touch(&w, dii, false, true);
		ret = fsw_inode_put(&w, dloc.objectid, dii);
	} else {
		if (dexists) {
			if (sdir && !ddir)
				return -ENOTDIR;
			if (!sdir && ddir)
				return -EISDIR;
			if (ddir) {
				ret = dir_empty(&w, dloc.objectid, dii);
				if (ret)
					return ret;
			}
			ret = drop_name(&w, newdir, newname, newlen, dloc.objectid);
			if (ret)
				return ret;
		}
		ret = del_name(&w, olddir, oldname, oldlen, sloc.objectid);
		if (!ret)
			ret = add_name(&w, newdir, newname, newlen, sloc.objectid, (uint32_t)II_GET(mode, sii));
	}
	if (!ret)
		ret = fsw_inode_get(&w, sloc.objectid, sii);
	if (ret)
		return ret;
	fsw_inode_touch(&w, sii, false, true);
	return fsw_inode_put(&w, sloc.objectid, sii);
}

int ub_fsw_setattr(struct ub_txn *t, uint64_t subvol, uint64_t ino, const struct ub_fsw_attr *a)
{
	uint8_t ii[UB_II_SIZE];
	struct fsw w;
	int ret;

	if (!a)
		return -EINVAL;
	ret = fsw_init(&w, t, subvol);
	if (!ret)
		ret = fsw_inode_get(&w, ino, ii);
	if (ret)
		return ret;
	if (a->valid & UB_FSW_ATTR_SIZE) {
		uint32_t fmt = (uint32_t)II_GET(mode, ii) & S_IFMT;
		if (fmt == S_IFDIR)
			return -EISDIR;
		if (fmt != S_IFREG)
			return -EINVAL;
		if (a->size != II_GET(size, ii)) {
			ret = fsw_truncate_locked(&w, ino, ii, a->size);
			if (ret)
				return ret;
			fsw_inode_touch(&w, ii, true, true);
		}
	}
	if (a->valid & UB_FSW_ATTR_MODE)
		II_SET(mode, ii, (II_GET(mode, ii) & S_IFMT) | (a->mode & 07777));
	if (a->valid & UB_FSW_ATTR_UID)
		II_SET(uid, ii, a->uid);
	if (a->valid & UB_FSW_ATTR_GID)
		II_SET(gid, ii, a->gid);
	if (a->valid & UB_FSW_ATTR_ATIME) {
		struct ub_timespec ts = { a->atime_sec, a->atime_nsec };
		fsw_set_time(ii, offsetof(struct btrfs_inode_item, atime), &ts);
	}
	if (a->valid & UB_FSW_ATTR_MTIME) {
		struct ub_timespec ts = { a->mtime_sec, a->mtime_nsec };
		fsw_set_time(ii, offsetof(struct btrfs_inode_item, mtime), &ts);
	}
	fsw_inode_touch(&w, ii, false, true);
	if (a->valid & UB_FSW_ATTR_CTIME) {
		struct ub_timespec ts = { a->ctime_sec, a->ctime_nsec };
		fsw_set_time(ii, offsetof(struct btrfs_inode_item, ctime), &ts);
	}
	return fsw_inode_put(&w, ino, ii);
}

int fsw_lookup_name(struct ub_txn *t, uint64_t subvol, uint64_t dir, const char *name, size_t len,
		    struct ub_key *loc, uint8_t *type)
{
	uint8_t dii[UB_II_SIZE];
	struct fsw w;
	int ret;

	ret = fsw_init_ro(&w, t, subvol);
	if (!ret)
		ret = fsw_check_name(name, len);
	if (!ret)
		ret = fsw_get_dir(&w, dir, dii);
	if (!ret)
		ret = fsw_lookup(&w, dir, name, len, loc, type);
	return ret;
}

int ub_fsw_lookup(struct ub_txn *t, uint64_t subvol, uint64_t dir, const char *name, size_t len, uint64_t *ino,
		  uint8_t *type)
{
	struct ub_key loc;
	uint8_t ty;
	int ret = fsw_lookup_name(t, subvol, dir, name, len, &loc, &ty);

	if (ret)
		return ret;
	if (ino)
		*ino = loc.objectid;
	if (type)
		*type = ty;
	return 0;
}
