// SPDX-License-Identifier: MIT
/*
 * What each file API operation may add to the trees, so the caller (the
 * mount) can reserve before it and let the engine commit or add chunks by
 * itself (ub_engine_begin_op). The figures follow the kernel's reservation
 * rule (btrfs_calc_insert_metadata_size): every item changed may copy a path
 * of BTRFS_MAX_LEVEL blocks and split each of them once.
 */
#include <errno.h>
#include "fsw/fsw.h"

#define MAX_LEVEL 8
#define EXTENT_CHUNK (128 * 1024) /* the smallest extent a long write is cut into (compressed) */
#define MAX_CSUM_SIZE 32

static uint64_t kind_items(int kind, uint64_t len, uint32_t sectorsize, uint32_t nodesize)
{
	uint64_t extents = len / EXTENT_CHUNK + 1;

	switch (kind) {
	case UB_FSW_OP_CREATE: /* inode, its ref, dir item and index, the parent's size */
	case UB_FSW_OP_LINK:
	case UB_FSW_OP_UNLINK:
		return 5;
	case UB_FSW_OP_RENAME: /* both names, both parents, the inode, a replaced target */
		return 11;
	case UB_FSW_OP_SETATTR:
	case UB_FSW_OP_XATTR:
		return 2;
	case UB_FSW_OP_WRITE: /* inode, extent items (one split at each end), csum leaves */
		return 3 + extents + (len / sectorsize * MAX_CSUM_SIZE) / nodesize + 1;
	case UB_FSW_OP_TRUNCATE:
		return 3 + extents;
	case UB_FSW_OP_SUBVOL: /* ROOT_ITEM, ROOT_REF/BACKREF, names, UUID entry, the new tree */
		return 9;
	default:
		return 0;
	}
}

uint64_t ub_fsw_op_bytes(const struct ub_engine *e, int kind, uint64_t len)
{
	uint32_t nodesize = e->fs.vol->nodesize;

	return kind_items(kind, len, e->fs.vol->sectorsize, nodesize) * nodesize * MAX_LEVEL * 2;
}

int ub_fsw_begin(struct ub_engine *e, int kind, uint64_t len, struct ub_txn **out)
{
	/* deletions may dip into half the reserve: they are how space comes back */
	int op = (kind == UB_FSW_OP_UNLINK || kind == UB_FSW_OP_TRUNCATE) ? UB_CHUNK_OP_FREE : UB_CHUNK_OP_ADD;

	if (kind < UB_FSW_OP_CREATE || kind > UB_FSW_OP_SUBVOL)
		return -EINVAL;
	return ub_engine_begin_op(e, ub_fsw_op_bytes(e, kind, len), op, out);
}

void ub_fsw_end(struct ub_engine *e)
{
	ub_engine_end_op(e);
}
