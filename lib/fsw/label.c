/* SPDX-License-Identifier: MIT */
/*
 * The filesystem's label: the superblock field every device carries. It is
 * written by the next commit, which copies the engine's superblock to each
 * device, as the kernel's SET_FSLABEL changes its superblock copy and commits.
 */
#include <errno.h>
#include <string.h>

#include "fsw/fsw.h"

int ub_fsw_set_label(struct ub_txn *t, const char *label, size_t len)
{
	struct ub_engine *e = t->e;
	struct ub_key key = { BTRFS_FS_TREE_OBJECTID, BTRFS_ROOT_ITEM_KEY, 0 };
	uint8_t *sb = e->fs.vol->super;
	struct ub_path p;
	int ret;

	/* the kernel keeps a NUL at the end: 255 bytes at most, and none inside (it would cut the label) */
	if (len >= UB_LABEL_SIZE || memchr(label, '\0', len))
		return -EINVAL;
	/*
	 * A commit that changed no tree writes nothing (the last commit stays the
	 * truth), so the root tree's path to a ROOT_ITEM is copied: the commit
	 * then makes a new generation, whose superblocks carry the label.
	 */
	ub_path_init(&p);
	ret = ub_tree_search_slot(&e->fs.tc, ub_txn_ta(t), &e->fs.root_tree->root, &key, &p, 0, true);
	ub_path_release(&p);
	if (ret < 0)
		return ret;
	memset(sb + offsetof(struct ub_disk_super, label), 0, UB_LABEL_SIZE);
	memcpy(sb + offsetof(struct ub_disk_super, label), label, len);
	return 0;
}
