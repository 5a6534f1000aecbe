/* SPDX-License-Identifier: MIT */
/*
 * FS_IOC_FIEMAP as the kernel's btrfs answers it, for `filesystem du`: a
 * file's extents (holes left out) with the flags btrfs sets, SHARED among
 * them. An extent is shared, as the kernel's btrfs_is_data_extent_shared
 * decides, when something else can reach its data: the data extent has more
 * than one back reference (another file, another subvolume, or the same file
 * at another offset: a clone; pieces of one extent split by a write keep one
 * reference), its one reference is another tree's or another leaf's, or a
 * tree block on the way from the subvolume's root to the leaf holding the
 * file extent item has more than one reference (a snapshot shares it).
 */
#include <errno.h>
#include <string.h>
#include <linux/fiemap.h>
#include "ubtrfs/devinfo.h"
#include "ubtrfs/fsquery.h"
#include "ubtrfs/log.h"
#include "fs_priv.h"

#define FE(field, p) UB_GET(btrfs_file_extent_item, field, p)

/* The references the extent item of a tree block counts (skinny or not): 0 and *refs, <0. */
static int block_refs(struct ub_fs *fs, const struct ub_root *extent_root, const struct ub_eb *eb, uint64_t *refs)
{
	struct ub_key key = { ub_eb_start(eb), BTRFS_METADATA_ITEM_KEY, ub_eb_level(eb) };
	struct ub_path p;
	const uint8_t *d;
	uint32_t size;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_lookup(&fs->tc, extent_root, &key, &p, &d, &size);
	if (ret == -ENOENT) {
		ub_path_release(&p);
		key = (struct ub_key){ ub_eb_start(eb), BTRFS_EXTENT_ITEM_KEY, ub_eb_len(eb) };
		ret = ub_tree_lookup(&fs->tc, extent_root, &key, &p, &d, &size);
	}
	if (ret == 0 && size < sizeof(struct btrfs_extent_item))
		ret = -EUCLEAN;
	if (ret == 0)
		*refs = UB_GET(btrfs_extent_item, refs, d);
	else if (ret == -ENOENT || ret == -EUCLEAN)
		ub_err(&fs->log, "extent tree: tree block %llu (level %u) has no valid extent item",
		       (unsigned long long)ub_eb_start(eb), ub_eb_level(eb));
	ub_path_release(&p);
	return ret == -ENOENT ? -EUCLEAN : ret;
}

/* Does a tree block on p's way down (root to leaf) have more than one reference? 1, 0, <0. */
static int path_shared(struct ub_fs *fs, const struct ub_root *extent_root, const struct ub_path *p)
{
	for (int level = UB_MAX_LEVEL - 1; level >= 0; level--) {
		uint64_t refs;
		int ret;

		if (!p->nodes[level])
			continue;
		ret = block_refs(fs, extent_root, p->nodes[level], &refs);
		if (ret)
			return ret;
		if (refs > 1)
			return 1;
	}
	return 0;
}

/* A data extent's references, as the extent tree says: how many records, and the one when it is one. */
struct data_refs {
	unsigned records;
	bool keyed;          /* the first record: an EXTENT_DATA_REF (root, owner) or a SHARED_DATA_REF (parent) */
	uint64_t root, owner, parent;
};

static void data_ref_seen(struct data_refs *r, bool keyed, uint64_t root, uint64_t owner, uint64_t parent)
{
	if (r->records++ == 0) {
		r->keyed = keyed;
		r->root = root;
		r->owner = owner;
		r->parent = parent;
	}
}

/* Inline references after the extent item's header (a data extent has no tree block info). */
static int inline_data_refs(const uint8_t *d, uint32_t size, struct data_refs *r)
{
	uint32_t at = sizeof(struct btrfs_extent_item);

	while (at < size) {
		uint8_t type = d[at];
		const uint8_t *x = d + at + 1;

		switch (type) {
		case BTRFS_EXTENT_DATA_REF_KEY:
			if (at + 1 + sizeof(struct btrfs_extent_data_ref) > size)
				return -EUCLEAN;
			data_ref_seen(r, true, UB_GET(btrfs_extent_data_ref, root, x),
				      UB_GET(btrfs_extent_data_ref, objectid, x), 0);
			at += 1 + (uint32_t)sizeof(struct btrfs_extent_data_ref);
			break;
		case BTRFS_SHARED_DATA_REF_KEY:
			if (at + 1 + 8 + sizeof(struct btrfs_shared_data_ref) > size)
				return -EUCLEAN;
			data_ref_seen(r, false, 0, 0, ub_le64(x));
			at += 1 + 8 + (uint32_t)sizeof(struct btrfs_shared_data_ref);
			break;
		case BTRFS_EXTENT_OWNER_REF_KEY:
			/* simple quotas' owner: not a reference */
			if (at + 1 + 8 > size)
				return -EUCLEAN;
			at += 1 + 8;
			break;
		default:
			return -EUCLEAN;
		}
	}
	return 0;
}

/* Every reference of the data extent at bytenr (inline, then keyed items). */
static int data_extent_refs(struct ub_fs *fs, const struct ub_root *extent_root, uint64_t bytenr, struct data_refs *r)
{
	struct ub_key key = { bytenr, BTRFS_EXTENT_ITEM_KEY, 0 };
	struct ub_path p;
	bool item = false;
	int ret;

	memset(r, 0, sizeof(*r));
	ub_path_init(&p);
	ret = ub_tree_search(&fs->tc, extent_root, &key, &p);
	ret = ret == 2 ? 1 : ret < 0 ? ret : 0;
	while (ret == 0) {
		const uint8_t *d;
		uint32_t size;

		ub_path_key(&p, &key);
		if (key.objectid != bytenr || key.type > BTRFS_SHARED_DATA_REF_KEY)
			break;
		d = ub_path_data(&p, &size);
		if (key.type == BTRFS_EXTENT_ITEM_KEY) {
			if (size < sizeof(struct btrfs_extent_item)) {
				ret = -EUCLEAN;
				break;
			}
			item = true;
			ret = inline_data_refs(d, size, r);
		} else if (key.type == BTRFS_EXTENT_DATA_REF_KEY) {
			if (size < sizeof(struct btrfs_extent_data_ref)) {
				ret = -EUCLEAN;
				break;
			}
			data_ref_seen(r, true, UB_GET(btrfs_extent_data_ref, root, d),
				      UB_GET(btrfs_extent_data_ref, objectid, d), 0);
		} else if (key.type == BTRFS_SHARED_DATA_REF_KEY) {
			data_ref_seen(r, false, 0, 0, key.offset);
		}
		if (ret)
			break;
		ret = ub_tree_next(&p);
	}
	ub_path_release(&p);
	if (ret < 0 || !item) {
		ub_err(&fs->log, "extent tree: data extent %llu: %s", (unsigned long long)bytenr,
		       ret < 0 ? "its extent item or references are invalid" : "no extent item");
		return ret < 0 && ret != -EUCLEAN ? ret : -EUCLEAN;
	}
	return 0;
}

struct fiemap_walk {
	struct ub_fs *fs;
	struct ub_root extent_root;
	uint64_t subvol, ino;
	/* the leaf the last answer about tree sharing was for */
	uint64_t leaf;
	int leaf_shared;
};

static int extent_shared(struct fiemap_walk *w, const struct ub_path *p, uint64_t bytenr)
{
	struct data_refs r;
	uint64_t leaf = ub_eb_start(p->nodes[0]);
	int ret = data_extent_refs(w->fs, &w->extent_root, bytenr, &r);

	if (ret)
		return ret;
	if (r.records != 1)
		return 1;
	if (r.keyed ? r.root != w->subvol || r.owner != w->ino : r.parent != leaf)
		return 1;
	if (w->leaf != leaf) {
		ret = path_shared(w->fs, &w->extent_root, p);
		if (ret < 0)
			return ret;
		w->leaf = leaf;
		w->leaf_shared = ret;
	}
	return w->leaf_shared;
}

static int fiemap_impl(struct ub_fs *fs, uint64_t subvol, uint64_t ino, uint64_t start, ub_fiemap_fn fn, void *arg)
{
	struct fiemap_walk w = { .fs = fs, .subvol = subvol, .ino = ino, .leaf = 0 };
	struct ub_key key = { ino, BTRFS_EXTENT_DATA_KEY, start };
	struct ub_fiemap_extent pend;
	struct ub_inode in;
	struct ub_root root;
	struct ub_path p;
	bool have = false;
	uint32_t sectorsize = UB_GET(ub_disk_super, sectorsize, ub_volume_super(fs->vol));
	int ret, stop = 0;

	ret = ub_inode_read(fs, subvol, ino, &in);
	if (!ret)
		ret = ub_fs_tree_root(fs, subvol, &root);
	if (!ret)
		ret = ub_fs_tree_root(fs, BTRFS_EXTENT_TREE_OBJECTID, &w.extent_root);
	if (ret)
		return ret;
	ub_path_init(&p);
	/* the extent holding `start` may begin before it */
	ret = ub_tree_search_le(&fs->tc, &root, &key, &p);
	if (ret == 0) {
		ub_path_key(&p, &key);
		if (key.objectid != ino || key.type != BTRFS_EXTENT_DATA_KEY)
			ret = ub_tree_next(&p);
	} else if (ret == 1) {
		ub_path_release(&p);
		key = (struct ub_key){ ino, BTRFS_EXTENT_DATA_KEY, 0 };
		ret = ub_tree_search(&fs->tc, &root, &key, &p);
		ret = ret == 2 ? 1 : ret < 0 ? ret : 0;
	}
	while (ret == 0) {
		struct ub_fiemap_extent x;
		const uint8_t *d;
		uint32_t size;
		uint8_t type;

		ub_path_key(&p, &key);
		if (key.objectid != ino || key.type != BTRFS_EXTENT_DATA_KEY)
			break;
		d = ub_path_data(&p, &size);
		if (size < UB_FILE_EXTENT_INLINE_DATA_START) {
			ret = -EUCLEAN;
			break;
		}
		type = (uint8_t)FE(type, d);
		memset(&x, 0, sizeof(x));
		x.logical = key.offset;
		if (type == BTRFS_FILE_EXTENT_INLINE) {
			uint64_t ram = FE(ram_bytes, d);

			x.length = (ram + sectorsize - 1) / sectorsize * sectorsize;
			x.flags = FIEMAP_EXTENT_DATA_INLINE | FIEMAP_EXTENT_NOT_ALIGNED;
		} else {
			uint64_t bytenr, num;

			if (size < sizeof(struct btrfs_file_extent_item)) {
				ret = -EUCLEAN;
				break;
			}
			bytenr = FE(disk_bytenr, d);
			num = FE(num_bytes, d);
			if (bytenr == 0 || num == 0 || key.offset + num <= start) {
				ret = ub_tree_next(&p);
				continue; /* a hole, or before where the caller asked */
			}
			x.length = num;
			if (FE(compression, d)) {
				x.physical = bytenr;
				x.flags |= FIEMAP_EXTENT_ENCODED;
			} else {
				x.physical = bytenr + FE(offset, d);
			}
			if (type == BTRFS_FILE_EXTENT_PREALLOC)
				x.flags |= FIEMAP_EXTENT_UNWRITTEN;
			ret = extent_shared(&w, &p, bytenr);
			if (ret < 0)
				break;
			if (ret)
				x.flags |= FIEMAP_EXTENT_SHARED;
		}
		/* one behind: the last one found gets FIEMAP_EXTENT_LAST */
		if (have) {
			stop = fn(arg, &pend);
			if (stop)
				break;
		}
		pend = x;
		have = true;
		ret = ub_tree_next(&p);
	}
	ub_path_release(&p);
	if (ret < 0) {
		if (ret == -EUCLEAN)
			ub_err(&fs->log, "subvol %llu ino %llu: a file extent item or its extent is invalid",
			       (unsigned long long)subvol, (unsigned long long)ino);
		return ret;
	}
	if (!stop && have) {
		pend.flags |= FIEMAP_EXTENT_LAST;
		stop = fn(arg, &pend);
	}
	return stop;
}

int ub_file_fiemap(struct ub_fs *fs, uint64_t subvol, uint64_t ino, uint64_t start, ub_fiemap_fn fn, void *arg)
{
	int in = ub_view_enter(fs);
	int ret = fiemap_impl(fs, subvol, ino, start, fn, arg);

	ub_view_exit(fs, in);
	return ret;
}
