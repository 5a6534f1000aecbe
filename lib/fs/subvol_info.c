/* SPDX-License-Identifier: MIT */
/* What the root tree says of one subvolume: its uuids, flags and generation. */
#include <errno.h>
#include <string.h>
#include "ubtrfs/fs.h"
#include "fs_priv.h"

#define RI(field, p) UB_GET(btrfs_root_item, field, p)

static int subvol_info_impl(struct ub_fs *fs, uint64_t id, struct ub_subvol_info *out)
{
	struct ub_key key = { id, BTRFS_ROOT_ITEM_KEY, UINT64_MAX };
	struct ub_root rt;
	struct ub_path p;
	const uint8_t *d;
	uint32_t size;
	int ret;

	memset(out, 0, sizeof(*out));
	out->id = id;
	ret = ub_fs_tree_root(fs, BTRFS_ROOT_TREE_OBJECTID, &rt);
	if (ret)
		return ret;
	ub_path_init(&p);
	ret = ub_tree_search_le(&fs->tc, &rt, &key, &p);
	if (ret == 1)
		ret = -ENOENT;
	if (!ret) {
		ub_path_key(&p, &key);
		d = ub_path_data(&p, &size);
		if (key.objectid != id || key.type != BTRFS_ROOT_ITEM_KEY) {
			ret = -ENOENT;
		} else if (size < offsetof(struct btrfs_root_item, generation_v2)) {
			ret = -EUCLEAN;
		} else {
			out->generation = RI(generation, d);
			out->flags = RI(flags, d);
			out->readonly = out->flags & BTRFS_ROOT_SUBVOL_RDONLY;
			/* an item from before the uuid fields (an old kernel's) knows no parent */
			if (size >= offsetof(struct btrfs_root_item, received_uuid)) {
				memcpy(out->uuid, UB_PTR(btrfs_root_item, uuid, d), UB_UUID_SIZE);
				memcpy(out->parent_uuid, UB_PTR(btrfs_root_item, parent_uuid, d), UB_UUID_SIZE);
				for (int i = 0; i < UB_UUID_SIZE; i++)
					out->snapshot |= out->parent_uuid[i] != 0;
			}
		}
	}
	ub_path_release(&p);
	return ret;
}

int ub_subvol_info(struct ub_fs *fs, uint64_t id, struct ub_subvol_info *out)
{
	int in = ub_view_enter(fs);
	int ret = subvol_info_impl(fs, id, out);

	ub_view_exit(fs, in);
	return ret;
}
