/* SPDX-License-Identifier: MIT */
/* A cursor over one inode's items: the subvolume tree, or the replayed set. */
#include <errno.h>
#include "items.h"

static int open_common(struct ub_fs *fs, uint64_t subvol, uint64_t ino, struct ub_icur *cur, bool disk_only)
{
	memset(cur, 0, sizeof(*cur));
	cur->fs = fs;
	cur->subvol = subvol;
	cur->ino = ino;
	ub_path_init(&cur->path);
	/* the overlays stand over the last commit; the running transaction has none */
	if (!disk_only && fs->view != UB_VIEW_LIVE) {
		cur->set = ub_replay_lookup(fs, subvol, ino);
		if (!cur->set)
			cur->set = ub_loose_lookup(fs, subvol, ino);
	}
	if (cur->set)
		return 0;
	return ub_fs_tree_root(fs, subvol, &cur->root);
}

int ub_icur_open(struct ub_fs *fs, uint64_t subvol, uint64_t ino, struct ub_icur *cur)
{
	return open_common(fs, subvol, ino, cur, false);
}

int ub_icur_open_disk(struct ub_fs *fs, uint64_t subvol, uint64_t ino, struct ub_icur *cur)
{
	return open_common(fs, subvol, ino, cur, true);
}

void ub_icur_close(struct ub_icur *cur)
{
	ub_path_release(&cur->path);
	cur->valid = false;
}

/* Is the tree position on an item of this inode? */
static int check_tree_pos(struct ub_icur *cur)
{
	struct ub_key k;

	ub_path_key(&cur->path, &k);
	cur->valid = k.objectid == cur->ino;
	return cur->valid ? 0 : 1;
}

int ub_icur_seek(struct ub_icur *cur, uint8_t type, uint64_t offset)
{
	struct ub_key key = { cur->ino, type, offset };
	int ret;

	cur->valid = false;
	if (cur->set) {
		cur->idx = ub_itemset_lower(cur->set, &key);
		cur->valid = cur->idx < cur->set->n;
		return cur->valid ? 0 : 1;
	}
	ret = ub_tree_search(&cur->fs->tc, &cur->root, &key, &cur->path);
	if (ret < 0)
		return ret;
	if (ret == 2)
		return 1;
	return check_tree_pos(cur);
}

int ub_icur_seek_le(struct ub_icur *cur, uint8_t type, uint64_t offset)
{
	struct ub_key key = { cur->ino, type, offset };
	int ret;

	cur->valid = false;
	if (cur->set) {
		size_t i = ub_itemset_lower(cur->set, &key);
		if (i < cur->set->n && ub_key_cmp(&cur->set->items[i].key, &key) == 0) {
			cur->idx = i;
		} else {
			if (i == 0)
				return 1;
			cur->idx = i - 1;
		}
		cur->valid = true;
		return 0;
	}
	ret = ub_tree_search_le(&cur->fs->tc, &cur->root, &key, &cur->path);
	if (ret)
		return ret;
	return check_tree_pos(cur);
}

int ub_icur_seek_extent(struct ub_icur *cur, uint64_t off)
{
	struct ub_key key;
	int ret = ub_icur_seek_le(cur, BTRFS_EXTENT_DATA_KEY, off);

	if (ret == 0) {
		/* an item of a lower type (the inode item, xattrs) stands before the extents */
		ub_icur_key(cur, &key);
		if (key.type != BTRFS_EXTENT_DATA_KEY)
			ret = ub_icur_next(cur);
	} else if (ret == 1) {
		ret = ub_icur_seek(cur, BTRFS_EXTENT_DATA_KEY, 0);
	}
	return ret;
}

int ub_icur_next(struct ub_icur *cur)
{
	int ret;

	if (!cur->valid)
		return 1;
	if (cur->set) {
		cur->idx++;
		cur->valid = cur->idx < cur->set->n;
		return cur->valid ? 0 : 1;
	}
	/*
	 * The inode's last item ends its leaf: where the next leaf starts (its
	 * parent says) tells whether it holds more of them, so a damaged
	 * neighbour leaf that does not is never read, and a healthy one not
	 * read for nothing.
	 */
	if ((uint32_t)(cur->path.slots[0] + 1) >= ub_eb_nritems(cur->path.nodes[0])) {
		struct ub_key next;

		if (ub_tree_next_key(&cur->path, &next) || next.objectid != cur->ino) {
			cur->valid = false;
			return 1;
		}
	}
	ret = ub_tree_next(&cur->path);
	if (ret) {
		cur->valid = false;
		return ret;
	}
	return check_tree_pos(cur);
}

int ub_icur_next_here(struct ub_icur *cur)
{
	if (!cur->valid || cur->set)
		return ub_icur_next(cur);
	if (!cur->path.nodes[0] || (uint32_t)(cur->path.slots[0] + 1) >= ub_eb_nritems(cur->path.nodes[0]))
		return 2;
	cur->path.slots[0]++;
	return check_tree_pos(cur);
}

void ub_icur_key(const struct ub_icur *cur, struct ub_key *key)
{
	if (cur->set)
		*key = cur->set->items[cur->idx].key;
	else
		ub_path_key(&cur->path, key);
}

const uint8_t *ub_icur_data(const struct ub_icur *cur, uint32_t *size)
{
	if (cur->set) {
		*size = cur->set->items[cur->idx].size;
		return cur->set->items[cur->idx].data;
	}
	return ub_path_data(&cur->path, size);
}
