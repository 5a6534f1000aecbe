/* SPDX-License-Identifier: MIT */
/*
 * Subvolumes and snapshots through the file API, laid out as the kernel's
 * create_subvol / create_pending_snapshot / btrfs_delete_subvolume do:
 *   root tree:  (id, ROOT_ITEM, 0 | snapshot transid)
 *               (parent, ROOT_REF, id) and (id, ROOT_BACKREF, parent): {dirid, sequence = dir index, name}
 *               (ORPHAN_OBJECTID, ORPHAN_ITEM, id) for a deleted one, whose ROOT_ITEM refs is 0
 *   parent:     DIR_ITEM + DIR_INDEX in dir, location (id, ROOT_ITEM, -1), type DIR; no INODE_REF
 *   new tree:   top directory 256 with an INODE_REF ".." to itself (index 0)
 *   uuid tree:  (uuid low, UUID_KEY_SUBVOL, uuid high) -> id, when the tree exists
 */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <uuid/uuid.h>

#include "fsw/fsw.h"

#define RI_SET(f, p, v) UB_SET(btrfs_root_item, f, p, v)
#define RI_GET(f, p) UB_GET(btrfs_root_item, f, p)
#define II_SET(f, p, v) UB_SET(btrfs_inode_item, f, p, v)
#define RI_SIZE ((uint32_t)sizeof(struct btrfs_root_item))
#define RREF_SIZE ((uint32_t)sizeof(struct btrfs_root_ref))

static int next_root_id(struct fsw *w, uint64_t *id)
{
	struct ub_key key = { BTRFS_LAST_FREE_OBJECTID, 255, UINT64_MAX };
	struct ub_path p;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_search_le(w->tc, &w->e->fs.root_tree->root, &key, &p);
	if (ret == 0)
		ub_path_key(&p, &key);
	ub_path_release(&p);
	if (ret < 0)
		return ret;
	*id = ret == 0 && key.objectid >= BTRFS_FIRST_FREE_OBJECTID ? key.objectid + 1 : BTRFS_FIRST_FREE_OBJECTID;
	/* never the id of a subvolume deleted in this session, though the cleaner dropped it since */
	if (*id < w->e->next_root_id)
		*id = w->e->next_root_id;
	return *id > BTRFS_LAST_FREE_OBJECTID ? -EOVERFLOW : 0;
}

int fsw_uuid_tree_change(struct fsw *w, const uint8_t *uuid, uint8_t type, uint64_t id, bool add)
{
	struct ub_key key = { ub_le64(uuid), type, ub_le64(uuid + 8) };
	struct ub_eroot *ur;
	uint8_t v[8];
	int ret;

	ret = ub_engine_root(w->e, BTRFS_UUID_TREE_OBJECTID, &ur);
	if (ret)
		return ret == -ENOENT ? 0 : ret;
	if (add) {
		ub_put_le(v, 8, id);
		ret = ub_tree_insert_item(w->tc, w->ta, &ur->root, &key, v, 8);
		if (ret == -EEXIST) {
			/* another subvolume with this uuid (received): the ids share one item */
			struct ub_path p;
			uint32_t size;
			uint8_t *d;

			ub_path_init(&p);
			ret = ub_tree_search_slot(w->tc, w->ta, &ur->root, &key, &p, 8, true);
			if (ret == 0)
				ret = ub_tree_extend_item(w->tc, w->ta, &ur->root, &p, 8);
			if (ret == 0) {
				d = ub_path_data_mut(&p, &size);
				if (d) {
					memcpy(d + size - 8, v, 8);
					ub_path_mark_dirty(&p);
				} else {
					ret = -EUCLEAN;
				}
			}
			ub_path_release(&p);
			ret = ret > 0 ? -EUCLEAN : ret;
		}
		return ret;
	}
	{
		struct ub_path p;
		const uint8_t *d;
		uint32_t size;

		ub_path_init(&p);
		ret = ub_tree_search_slot(w->tc, w->ta, &ur->root, &key, &p, -1, true);
		if (ret == 0) {
			d = ub_path_data(&p, &size);
			if (size == 8 && ub_le64(d) == id) {
				ret = ub_tree_del_items(w->tc, w->ta, &ur->root, &p, p.slots[0], 1);
			} else {
				uint8_t *m = ub_path_data_mut(&p, &size);
				uint32_t at;

				for (at = 0; m && at + 8 <= size && ub_le64(m + at) != id; at += 8)
					;
				if (m && at + 8 <= size) {
					memmove(m + at, m + at + 8, size - at - 8);
					ub_tree_truncate_item(w->tc, &p, size - 8, true);
					ub_path_mark_dirty(&p);
				}
			}
		}
		ub_path_release(&p);
		return ret < 0 ? ret : 0;
	}
}

/* ROOT_REF + ROOT_BACKREF, the name in the parent directory */
static int link_subvol(struct fsw *w, uint64_t dir, const char *name, size_t len, uint64_t id)
{
	uint8_t ref[RREF_SIZE + UB_NAME_LEN];
	struct ub_key key, loc = { id, BTRFS_ROOT_ITEM_KEY, UINT64_MAX };
	uint64_t index;
	int ret;

	ret = fsw_next_index(w, dir, &index);
	if (ret)
		return ret;
	UB_SET(btrfs_root_ref, dirid, ref, dir);
	UB_SET(btrfs_root_ref, sequence, ref, index);
	UB_SET(btrfs_root_ref, name_len, ref, len);
	memcpy(ref + RREF_SIZE, name, len);
	key = (struct ub_key){ w->subvol, BTRFS_ROOT_REF_KEY, id };
	ret = ub_tree_insert_item(w->tc, w->ta, &w->e->fs.root_tree->root, &key, ref, RREF_SIZE + (uint32_t)len);
	if (!ret) {
		key = (struct ub_key){ id, BTRFS_ROOT_BACKREF_KEY, w->subvol };
		ret = ub_tree_insert_item(w->tc, w->ta, &w->e->fs.root_tree->root, &key, ref, RREF_SIZE + (uint32_t)len);
	}
	if (!ret)
		ret = fsw_add_entry(w, dir, name, len, &loc, BTRFS_FT_DIR, index);
	return ret == -EEXIST ? -EUCLEAN : ret;
}

static int check_new_name(struct fsw *w, uint64_t dir, const char *name, size_t len)
{
	uint8_t dii[UB_II_SIZE], type;
	struct ub_key loc;
	int ret = fsw_check_name(name, len);

	if (!ret)
		ret = fsw_get_dir(w, dir, dii);
	if (ret)
		return ret;
	ret = fsw_lookup(w, dir, name, len, &loc, &type);
	return ret == 0 ? -EEXIST : ret == -ENOENT ? 0 : ret;
}

/*
 * The "default" entry of the root tree's directory (dir BTRFS_ROOT_TREE_DIR_OBJECTID):
 * the subvolume it names in *id; with a path `p` (a cow search of the
 * transaction) p is left at the item and *pos at the record. -ENOENT when
 * there is none, -EUCLEAN when it names no subvolume.
 */
static int default_entry(struct fsw *w, struct ub_path *p, uint64_t *id, uint32_t *pos)
{
	static const char name[] = "default";
	const size_t nlen = sizeof(name) - 1;
	struct ub_key key = { BTRFS_ROOT_TREE_DIR_OBJECTID, BTRFS_DIR_ITEM_KEY, ub_name_hash(name, nlen) };
	struct ub_path own;
	struct ub_key loc;
	const uint8_t *d;
	uint32_t size, at, esize;
	int ret;

	if (!p) {
		p = &own;
		ub_path_init(p);
		ret = ub_tree_lookup(w->tc, &w->e->fs.root_tree->root, &key, p, &d, &size);
	} else {
		ret = ub_tree_search_slot(w->tc, w->ta, &w->e->fs.root_tree->root, &key, p, 0, true);
		ret = ret > 0 ? -ENOENT : ret;
		d = ret ? NULL : ub_path_data(p, &size);
	}
	if (!ret)
		ret = fsw_dir_item_find(d, size, name, nlen, &at, &esize);
	if (!ret) {
		ub_key_read(&loc, UB_PTR(btrfs_dir_item, location, d + at));
		if (loc.type != BTRFS_ROOT_ITEM_KEY)
			ret = -EUCLEAN;
		*id = loc.objectid;
		if (pos)
			*pos = at;
	}
	if (p == &own)
		ub_path_release(p);
	return ret;
}

int ub_fsw_subvol_create(struct ub_txn *t, uint64_t subvol, uint64_t dir, const char *name, size_t len,
			 uint64_t *new_id)
{
	uint8_t ri[RI_SIZE], ii[UB_II_SIZE], ref[sizeof(struct btrfs_inode_ref) + 2];
	struct ub_eroot *er;
	struct ub_root r;
	struct ub_key key;
	struct fsw w, nw;
	uint64_t id;
	uuid_t uuid;
	int ret;

	/* as the kernel: a name that exists (EEXIST) before a read-only parent (EROFS) */
	ret = fsw_init_ro(&w, t, subvol);
	if (!ret)
		ret = check_new_name(&w, dir, name, len);
	if (!ret)
		ret = fsw_init(&w, t, subvol);
	if (!ret)
		ret = next_root_id(&w, &id);
	if (!ret)
		ret = ub_tree_create_root(w.tc, w.ta, id, &r);
	if (ret)
		return ret;
	memset(ri, 0, sizeof(ri));
	uuid_generate(uuid);
	/* the ROOT_ITEM's own inode, as the kernel fills it */
	II_SET(generation, ri, 1);
	II_SET(size, ri, 3);
	II_SET(nlink, ri, 1);
	II_SET(nbytes, ri, w.e->fs.vol->nodesize);
	II_SET(mode, ri, S_IFDIR | 0755);
	RI_SET(generation, ri, t->transid);
	RI_SET(root_dirid, ri, BTRFS_FIRST_FREE_OBJECTID);
	RI_SET(bytenr, ri, r.bytenr);
	RI_SET(level, ri, r.level);
	RI_SET(refs, ri, 1);
	RI_SET(generation_v2, ri, t->transid);
	memcpy(ri + offsetof(struct btrfs_root_item, uuid), uuid, 16);
	RI_SET(ctransid, ri, t->transid);
	RI_SET(otransid, ri, t->transid);
	fsw_set_time(ri, offsetof(struct btrfs_root_item, ctime), &w.now);
	fsw_set_time(ri, offsetof(struct btrfs_root_item, otime), &w.now);
	key = (struct ub_key){ id, BTRFS_ROOT_ITEM_KEY, 0 };
	ret = ub_tree_insert_item(w.tc, w.ta, &w.e->fs.root_tree->root, &key, ri, RI_SIZE);
	if (!ret)
		ret = ub_engine_add_root(w.e, &r, 0, 0, &er);
	if (ret)
		return ret;
	/* its top directory */
	ret = fsw_init(&nw, t, id);
	if (ret)
		return ret;
	memset(ii, 0, sizeof(ii));
	II_SET(generation, ii, t->transid);
	II_SET(transid, ii, t->transid);
	II_SET(nlink, ii, 1);
	II_SET(mode, ii, S_IFDIR | 0755);
	II_SET(sequence, ii, 1);
	fsw_set_time(ii, offsetof(struct btrfs_inode_item, atime), &w.now);
	fsw_set_time(ii, offsetof(struct btrfs_inode_item, ctime), &w.now);
	fsw_set_time(ii, offsetof(struct btrfs_inode_item, mtime), &w.now);
	fsw_set_time(ii, offsetof(struct btrfs_inode_item, otime), &w.now);
	key = (struct ub_key){ BTRFS_FIRST_FREE_OBJECTID, BTRFS_INODE_ITEM_KEY, 0 };
	ret = ub_tree_insert_item(nw.tc, nw.ta, &nw.fs->root, &key, ii, UB_II_SIZE);
	if (ret)
		return ret;
	UB_SET(btrfs_inode_ref, index, ref, 0);
	UB_SET(btrfs_inode_ref, name_len, ref, 2);
	memcpy(ref + sizeof(struct btrfs_inode_ref), "..", 2);
	key = (struct ub_key){ BTRFS_FIRST_FREE_OBJECTID, BTRFS_INODE_REF_KEY, BTRFS_FIRST_FREE_OBJECTID };
	ret = ub_tree_insert_item(nw.tc, nw.ta, &nw.fs->root, &key, ref, sizeof(ref));
	if (!ret)
		ret = link_subvol(&w, dir, name, len, id);
	if (!ret)
		ret = fsw_uuid_tree_change(&w, uuid, BTRFS_UUID_KEY_SUBVOL, id, true);
	if (!ret && new_id)
		*new_id = id;
	return ret;
}

static int root_item_get(struct fsw *w, uint64_t id, uint64_t offset, uint8_t *ri)
{
	struct ub_key key = { id, BTRFS_ROOT_ITEM_KEY, offset };
	struct ub_path p;
	const uint8_t *d;
	uint32_t size;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_lookup(w->tc, &w->e->fs.root_tree->root, &key, &p, &d, &size);
	if (ret == 0) {
		memset(ri, 0, RI_SIZE);
		memcpy(ri, d, size < RI_SIZE ? size : RI_SIZE);
		if (size < RI_SIZE) /* an old short item: the v2 fields are not valid */
			RI_SET(generation_v2, ri, 0);
	}
	ub_path_release(&p);
	return ret;
}

/*
 * The snapshot's ROOT_ITEM from the source's, as the kernel's
 * create_pending_snapshot fills it: the source's inode, ctransid, ctime and
 * flags stay (rdonly as asked); a new uuid with the source's as parent_uuid;
 * the snapshot transid as otransid, generation_v2 and last_snapshot (which the
 * source's item gets too, at commit); a writable snapshot drops what a receive
 * left (received_uuid, stransid, rtransid, stime, rtime).
 */
static void snapshot_item(uint8_t *ri, const struct ub_root *snap, const uint8_t *uuid, bool readonly,
			  const struct fsw *w)
{
	uint64_t flags = RI_GET(flags, ri) & ~(uint64_t)BTRFS_ROOT_SUBVOL_RDONLY;

	memcpy(ri + offsetof(struct btrfs_root_item, parent_uuid), ri + offsetof(struct btrfs_root_item, uuid), 16);
	memcpy(ri + offsetof(struct btrfs_root_item, uuid), uuid, 16);
	RI_SET(bytenr, ri, snap->bytenr);
	RI_SET(generation, ri, snap->generation);
	RI_SET(generation_v2, ri, w->t->transid);
	RI_SET(level, ri, snap->level);
	RI_SET(refs, ri, 1);
	RI_SET(last_snapshot, ri, w->t->transid);
	RI_SET(flags, ri, flags | (readonly ? BTRFS_ROOT_SUBVOL_RDONLY : 0));
	RI_SET(drop_level, ri, 0);
	memset(ri + offsetof(struct btrfs_root_item, drop_progress), 0, sizeof(struct btrfs_disk_key));
	RI_SET(otransid, ri, w->t->transid);
	fsw_set_time(ri, offsetof(struct btrfs_root_item, otime), &w->now);
	if (!readonly) {
		memset(ri + offsetof(struct btrfs_root_item, received_uuid), 0, 16);
		RI_SET(stransid, ri, 0);
		RI_SET(rtransid, ri, 0);
		memset(ri + offsetof(struct btrfs_root_item, stime), 0, 2 * sizeof(struct btrfs_timespec));
	}
}

int ub_fsw_snapshot(struct ub_txn *t, uint64_t src, uint64_t subvol, uint64_t dir, const char *name, size_t len,
		    bool readonly, uint64_t *new_id)
{
	static const uint8_t zero[16];
	uint8_t ri[RI_SIZE];
	struct ub_eroot *ser, *er;
	struct ub_root snap;
	struct ub_key key;
	struct fsw w;
	uint64_t id;
	uuid_t uuid;
	int ret;

	ret = fsw_init_ro(&w, t, subvol);
	if (!ret)
		ret = check_new_name(&w, dir, name, len);
	if (!ret)
		ret = fsw_init(&w, t, subvol);
	if (!ret)
		ret = ub_engine_root(w.e, src, &ser);
	if (!ret)
		ret = root_item_get(&w, src, ser->item_offset, ri);
	if (!ret && (RI_GET(refs, ri) == 0 || (RI_GET(flags, ri) & BTRFS_ROOT_SUBVOL_DEAD)))
		ret = -ENOENT; /* deleted, waiting for the cleaner */
	if (!ret)
		ret = next_root_id(&w, &id);
	/* the source as it is now, changes of this transaction included (the tree layer keeps them apart) */
	if (!ret)
		ret = ub_tree_copy_root(w.tc, w.ta, &ser->root, id, &snap);
	if (ret)
		return ret;
	uuid_generate(uuid);
	snapshot_item(ri, &snap, uuid, readonly, &w);
	key = (struct ub_key){ id, BTRFS_ROOT_ITEM_KEY, t->transid };
	ret = ub_tree_insert_item(w.tc, w.ta, &w.e->fs.root_tree->root, &key, ri, RI_SIZE);
	if (!ret)
		ret = ub_engine_add_root(w.e, &snap, t->transid, t->transid, &er);
	if (!ret)
		ret = link_subvol(&w, dir, name, len, id);
	if (!ret)
		ret = fsw_uuid_tree_change(&w, uuid, BTRFS_UUID_KEY_SUBVOL, id, true);
	if (!ret && memcmp(ri + offsetof(struct btrfs_root_item, received_uuid), zero, 16))
		ret = fsw_uuid_tree_change(&w, ri + offsetof(struct btrfs_root_item, received_uuid),
				       BTRFS_UUID_KEY_RECEIVED_SUBVOL, id, true);
	if (!ret && !readonly) {
		/* as the kernel, which loads the new root at once: inode numbers count from its highest now */
		struct fsw sw;
		uint64_t ino;

		ret = fsw_init_ro(&sw, t, id);
		if (!ret)
			ret = fsw_next_ino(&sw, false, &ino);
	}
	/*
	 * The kernel makes a snapshot inside a commit, so nothing writes into
	 * it in the transaction it is born in, and every drop relies on that:
	 * a block not newer than the ROOT_ITEM's offset came from the source.
	 * Written in the same transaction, the snapshot's own blocks would look
	 * shared and never get the full back references a later drop needs.
	 */
	if (!ret)
		ret = ub_txn_commit_keep(t);
	if (!ret && new_id)
		*new_id = id;
	return ret;
}

int fsw_subvol_move(struct fsw *w, uint64_t olddir, const char *oldname, size_t oldlen, uint64_t newdir,
		    const char *newname, size_t newlen, uint64_t id)
{
	struct ub_key key = { w->subvol, BTRFS_ROOT_REF_KEY, id };
	struct ub_path p;
	const uint8_t *d;
	uint32_t size;
	uint64_t index = 0;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_lookup(w->tc, &w->e->fs.root_tree->root, &key, &p, &d, &size);
	if (ret == 0 && size >= RREF_SIZE)
		index = UB_GET(btrfs_root_ref, sequence, d);
	else if (ret == 0)
		ret = -EUCLEAN;
	ub_path_release(&p);
	if (ret)
		return ret == -ENOENT ? -EUCLEAN : ret;
	ret = fsw_del_entry(w, olddir, oldname, oldlen, index);
	if (!ret)
		ret = fsw_del_key(w, &w->e->fs.root_tree->root, &key);
	if (!ret) {
		key = (struct ub_key){ id, BTRFS_ROOT_BACKREF_KEY, w->subvol };
		ret = fsw_del_key(w, &w->e->fs.root_tree->root, &key);
	}
	if (!ret)
		ret = link_subvol(w, newdir, newname, newlen, id);
	return ret == -ENOENT ? -EUCLEAN : ret;
}

static int has_key(struct fsw *w, const struct ub_key *from, const struct ub_key *to)
{
	struct ub_path p;
	struct ub_key k;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_search(w->tc, &w->e->fs.root_tree->root, from, &p);
	if (ret == 0 || ret == 1) {
		ub_path_key(&p, &k);
		ret = ub_key_cmp(&k, to) <= 0;
	} else if (ret == 2) {
		ret = 0;
	}
	ub_path_release(&p);
	return ret;
}

int ub_fsw_subvol_delete(struct ub_txn *t, uint64_t subvol, uint64_t dir, const char *name, size_t len)
{
	uint8_t dii[UB_II_SIZE], type, ri[RI_SIZE];
	struct ub_key loc, key, from, to;
	struct ub_eroot *er;
	struct ub_path p;
	const uint8_t *d;
	uint32_t size;
	uint64_t id, index;
	struct fsw w;
	int ret;

	ret = fsw_init(&w, t, subvol);
	if (!ret)
		ret = fsw_check_name(name, len);
	if (!ret)
		ret = fsw_get_dir(&w, dir, dii);
	if (!ret)
		ret = fsw_lookup(&w, dir, name, len, &loc, &type);
	if (ret)
		return ret;
	if (loc.type != BTRFS_ROOT_ITEM_KEY)
		return -ENOTDIR;
	id = loc.objectid;
	ret = ub_engine_root(w.e, id, &er);
	if (ret)
		return ret == -ENOENT ? -EUCLEAN : ret;
	/* as the kernel's may_destroy_subvol: never the default subvolume (a mount without subvol= shows it) */
	{
		uint64_t def;

		ret = default_entry(&w, NULL, &def, NULL);
		if (ret < 0 && ret != -ENOENT)
			return ret;
		if (ret == 0 && def == id)
			return -EPERM;
	}
	/* subvolumes inside it must go first */
	from = (struct ub_key){ id, BTRFS_ROOT_REF_KEY, 0 };
	to = (struct ub_key){ id, BTRFS_ROOT_REF_KEY, UINT64_MAX };
	ret = has_key(&w, &from, &to);
	if (ret)
		return ret < 0 ? ret : -ENOTEMPTY;
	/* the ROOT_REF names the index of the dir entry */
	key = (struct ub_key){ subvol, BTRFS_ROOT_REF_KEY, id };
	ub_path_init(&p);
	ret = ub_tree_lookup(w.tc, &w.e->fs.root_tree->root, &key, &p, &d, &size);
	if (ret == 0 && size >= RREF_SIZE)
		index = UB_GET(btrfs_root_ref, sequence, d);
	else if (ret == 0)
		ret = -EUCLEAN;
	ub_path_release(&p);
	if (ret)
		return ret == -ENOENT ? -EUCLEAN : ret;
	ret = fsw_del_entry(&w, dir, name, len, index);
	if (!ret)
		ret = fsw_del_key(&w, &w.e->fs.root_tree->root, &key);
	if (!ret) {
		key = (struct ub_key){ id, BTRFS_ROOT_BACKREF_KEY, subvol };
		ret = fsw_del_key(&w, &w.e->fs.root_tree->root, &key);
	}
	if (!ret)
		ret = root_item_get(&w, id, er->item_offset, ri);
	if (ret)
		return ret == -ENOENT ? -EUCLEAN : ret;
	ret = fsw_uuid_tree_change(&w, ri + offsetof(struct btrfs_root_item, uuid), BTRFS_UUID_KEY_SUBVOL, id, false);
	if (!ret) {
		static const uint8_t zero[16];
		const uint8_t *ru = ri + offsetof(struct btrfs_root_item, received_uuid);
		if (memcmp(ru, zero, 16))
			ret = fsw_uuid_tree_change(&w, ru, BTRFS_UUID_KEY_RECEIVED_SUBVOL, id, false);
	}
	if (ret)
		return ret;
	/* refs 0 and an ORPHAN item: a dead root for the cleaner */
	key = (struct ub_key){ id, BTRFS_ROOT_ITEM_KEY, er->item_offset };
	ub_path_init(&p);
	ret = ub_tree_search_slot(w.tc, w.ta, &w.e->fs.root_tree->root, &key, &p, 0, true);
	if (ret == 0) {
		uint8_t *m = ub_path_data_mut(&p, &size);
		if (m && size >= offsetof(struct btrfs_root_item, refs) + 4) {
			/* as the kernel's delete: SUBVOL_DEAD stops send and new snapshots of it */
			UB_SET(btrfs_root_item, flags, m, UB_GET(btrfs_root_item, flags, m) | BTRFS_ROOT_SUBVOL_DEAD);
			UB_SET(btrfs_root_item, refs, m, 0);
			ub_path_mark_dirty(&p);
		} else {
			ret = -EUCLEAN;
		}
	}
	ub_path_release(&p);
	if (ret)
		return ret > 0 ? -EUCLEAN : ret;
	key = (struct ub_key){ BTRFS_ORPHAN_OBJECTID, BTRFS_ORPHAN_ITEM_KEY, id };
	{
		static const uint8_t none[1];
		ret = ub_tree_insert_item(w.tc, w.ta, &w.e->fs.root_tree->root, &key, none, 0);
	}
	if (!ret) {
		w.e->dead_roots = true; /* the commits that follow drop it (txn/cleaner.h) */
		if (w.e->next_root_id <= id)
			w.e->next_root_id = id + 1;
	}
	return ret;
}

int ub_fsw_lookup_at(struct ub_txn *t, uint64_t subvol, uint64_t dir, const char *name, size_t len, uint64_t *sub_out,
		     uint64_t *ino, uint8_t *type)
{
	struct ub_key loc;
	uint8_t ty;
	int ret = fsw_lookup_name(t, subvol, dir, name, len, &loc, &ty);

	if (ret)
		return ret;
	if (loc.type == BTRFS_ROOT_ITEM_KEY) {
		*sub_out = loc.objectid;
		*ino = BTRFS_FIRST_FREE_OBJECTID;
	} else {
		*sub_out = subvol;
		*ino = loc.objectid;
	}
	if (type)
		*type = ty;
	return 0;
}

/*
 * Is `id` a subvolume a name may lead to (the top level or a live one):
 * its root object in *er, 0; -ENOENT for none, or a deleted one.
 */
static int live_subvol(struct fsw *w, uint64_t id, struct ub_eroot **er, uint8_t *ri)
{
	int ret;

	if (id != BTRFS_FS_TREE_OBJECTID && (id < BTRFS_FIRST_FREE_OBJECTID || id > BTRFS_LAST_FREE_OBJECTID))
		return -ENOENT;
	ret = ub_engine_root(w->e, id, er);
	if (!ret)
		ret = root_item_get(w, id, (*er)->item_offset, ri);
	if (!ret && (RI_GET(refs, ri) == 0 || (RI_GET(flags, ri) & BTRFS_ROOT_SUBVOL_DEAD)))
		ret = -ENOENT;
	return ret;
}

int ub_fsw_set_default_subvol(struct ub_txn *t, uint64_t id)
{
	uint8_t ri[RI_SIZE];
	struct ub_eroot *er;
	struct ub_path p;
	struct ub_key loc;
	uint64_t old;
	uint32_t pos, size;
	uint8_t *d;
	struct fsw w;
	int ret;

	ret = fsw_init_ro(&w, t, BTRFS_FS_TREE_OBJECTID);
	if (!ret)
		ret = live_subvol(&w, id, &er, ri);
	if (ret)
		return ret;
	ub_path_init(&p);
	/* the kernel changes the entry mkfs made and refuses when there is none */
	ret = default_entry(&w, &p, &old, &pos);
	if (ret == 0) {
		d = ub_path_data_mut(&p, &size);
		if (d) {
			loc = (struct ub_key){ id, BTRFS_ROOT_ITEM_KEY, er->item_offset };
			ub_key_write(d + pos + offsetof(struct btrfs_dir_item, location), &loc);
			ub_path_mark_dirty(&p);
		} else {
			ret = -EUCLEAN;
		}
	}
	ub_path_release(&p);
	if (ret)
		return ret;
	if (!(w.e->incompat & BTRFS_FEATURE_INCOMPAT_DEFAULT_SUBVOL)) {
		w.e->incompat |= BTRFS_FEATURE_INCOMPAT_DEFAULT_SUBVOL;
		UB_SET(ub_disk_super, incompat_flags, w.e->fs.vol->super, w.e->incompat);
	}
	return 0;
}

int ub_fsw_subvol_set_readonly(struct ub_txn *t, uint64_t id, bool readonly)
{
	uint8_t ri[RI_SIZE];
	struct ub_eroot *er;
	struct ub_path p;
	struct ub_key key;
	uint64_t flags;
	uint32_t size;
	uint8_t *d;
	struct fsw w;
	int ret;

	ret = fsw_init_ro(&w, t, BTRFS_FS_TREE_OBJECTID);
	if (!ret)
		ret = live_subvol(&w, id, &er, ri);
	if (ret)
		return ret;
	flags = RI_GET(flags, ri);
	if (!!(flags & BTRFS_ROOT_SUBVOL_RDONLY) == readonly)
		return 0;
	key = (struct ub_key){ id, BTRFS_ROOT_ITEM_KEY, er->item_offset };
	ub_path_init(&p);
	ret = ub_tree_search_slot(w.tc, w.ta, &w.e->fs.root_tree->root, &key, &p, 0, true);
	if (ret == 0) {
		d = ub_path_data_mut(&p, &size);
		if (d && size >= offsetof(struct btrfs_root_item, flags) + 8) {
			flags = UB_GET(btrfs_root_item, flags, d);
			flags = readonly ? flags | BTRFS_ROOT_SUBVOL_RDONLY : flags & ~(uint64_t)BTRFS_ROOT_SUBVOL_RDONLY;
			UB_SET(btrfs_root_item, flags, d, flags);
			ub_path_mark_dirty(&p);
		} else {
			ret = -EUCLEAN;
		}
	}
	ub_path_release(&p);
	return ret > 0 ? -EUCLEAN : ret;
}

int ub_fsw_subvol_delete_id(struct ub_txn *t, uint64_t id)
{
	struct ub_key key = { id, BTRFS_ROOT_BACKREF_KEY, 0 }, found;
	char name[UB_NAME_LEN];
	uint64_t parent = 0, dirid = 0;
	size_t len = 0;
	struct ub_path p;
	struct fsw w;
	int ret;

	if (id == BTRFS_FS_TREE_OBJECTID || id < BTRFS_FIRST_FREE_OBJECTID || id > BTRFS_LAST_FREE_OBJECTID)
		return id == BTRFS_FS_TREE_OBJECTID ? -EINVAL : -ENOENT;
	ret = fsw_init_ro(&w, t, BTRFS_FS_TREE_OBJECTID);
	if (ret)
		return ret;
	/* its one name: the first ROOT_BACKREF (the parent, the directory and the name in it) */
	ub_path_init(&p);
	ret = ub_tree_search(w.tc, &w.e->fs.root_tree->root, &key, &p);
	if (ret == 0 || ret == 1) {
		const uint8_t *d;
		uint32_t size;

		ub_path_key(&p, &found);
		d = ub_path_data(&p, &size);
		if (found.objectid != id || found.type != BTRFS_ROOT_BACKREF_KEY) {
			ret = -ENOENT;
		} else if (size < RREF_SIZE || UB_GET(btrfs_root_ref, name_len, d) + RREF_SIZE > size ||
			   UB_GET(btrfs_root_ref, name_len, d) == 0 || UB_GET(btrfs_root_ref, name_len, d) > UB_NAME_LEN) {
			ret = -EUCLEAN;
		} else {
			parent = found.offset;
			dirid = UB_GET(btrfs_root_ref, dirid, d);
			len = (size_t)UB_GET(btrfs_root_ref, name_len, d);
			memcpy(name, d + RREF_SIZE, len);
			ret = 0;
		}
	} else if (ret == 2) {
		ret = -ENOENT;
	}
	ub_path_release(&p);
	if (ret)
		return ret;
	return ub_fsw_subvol_delete(t, parent, dirid, name, len);
}
