/* SPDX-License-Identifier: MIT */
/*
 * Adding chunks inside a transaction when space runs out (library-internal).
 *
 * A new chunk is placed by ub_chunk_layout() on the free holes of every
 * writable device (holes = [1 MiB, total_bytes) minus the dev tree's
 * DEV_EXTENT items, so extents added earlier in the same transaction count),
 * at the logical address after the highest chunk the volume maps (the
 * kernel's find_next_chunk; the map also holds chunks of aborted
 * transactions, so a logical range is never handed out twice). Then, all in
 * the running transaction:
 *   chunk tree   CHUNK_ITEM (256, CHUNK_ITEM, logical); each device's DEV_ITEM
 *                bytes_used grows by its stripes (and the volume's copy of the
 *                dev item, which the commit writes into that device's
 *                superblock); a SYSTEM chunk also goes into the superblock's
 *                sys_chunk_array (the volume's superblock copy, which the
 *                commit writes).
 *   dev tree     one DEV_EXTENT per stripe (devid, DEV_EXTENT, physical):
 *                chunk_tree 3, chunk_objectid 256, chunk_offset, length.
 *   extent tree  BLOCK_GROUP_ITEM (logical, BLOCK_GROUP_ITEM, length), used 0.
 *   free space   FREE_SPACE_INFO (extent_count 1) and one FREE_SPACE_EXTENT
 *   tree         covering the whole group, as the kernel writes a new group;
 *                the commit's free space writer then applies this
 *                transaction's allocations in it like in any other group.
 *   memory       ub_volume_add_chunk (mapped at once), ub_alloc_add_block_group.
 * An abort (ub_alloc_abort) takes the block group out of the allocator and
 * puts the superblock's sys_chunk_array and the volume's dev items back; the
 * tree changes go with the transaction's dirty blocks. The chunk stays in the
 * volume's map, unreferenced (nothing can allocate there), which keeps its
 * logical range from being reused.
 *
 * When to add (ub_chunk_prepare, called before every operation that changes
 * trees, and ub_chunk_reserve_data):
 *   METADATA and SYSTEM: when ub_alloc_need_chunk() says so (used + reserved
 *   + pinned + super + 2 MiB >= 80% of the type's total, the kernel's
 *   should_alloc_chunk), so the type never fills up in the middle of an
 *   operation or of the commit.
 *   DATA: when a reservation fails with -ENOSPC (data fills what exists first).
 * The commit reserve (the kernel's global block reserve idea): the commit
 * copies, at most once each, the path to every change in the extent, free
 * space, root, dev, csum and changed subvolume trees, and may split a leaf or
 * node per level while applying references. An operation is admitted only if
 * the metadata that reserve() could hand out now, after adding a chunk if
 * that was possible, is at least
 *     reserve = nodesize * (2 * sum over the metadata trees of (level + 1) + 16)
 *             + 2 * the metadata reserved by this transaction so far (each new
 *               block's extent item and free space change may copy a leaf each)
 *             + 64 bytes per metadata block in use, at most 512 MiB (every
 *               extent tree leaf, which deleting many blocks may copy)
 * plus what the operation itself asks (its own estimate of blocks it copies
 * or adds; ub_chunk_op_blocks() for one item change in one tree). A deletion
 * (UB_CHUNK_OP_FREE) needs only half the reserve: it is what gives space
 * back, and the kernel lets unlink dip into its global reserve for the same
 * reason. When the space is short only because of this transaction's share
 * of the reserve (a fresh transaction would be admitted), or because of what
 * it freed (pinned until the commit), the answer is -EAGAIN: commit, retry. The SYSTEM type is held to nodesize * 2 * (chunk tree level + 2)
 * + the cost of one chunk insertion. Otherwise -ENOSPC for the operation; the
 * transaction is untouched by the refusal and can commit or abort.
 *
 * Threads: as the allocator: the caller holds the transaction.
 */
#ifndef UBTRFS_ALLOC_CHUNK_ALLOC_H
#define UBTRFS_ALLOC_CHUNK_ALLOC_H

#include <stdbool.h>
#include <stdint.h>
#include "ubtrfs/tree.h"
#include "ubtrfs/volume.h"
#include "tree/tree_write.h"
#include "alloc/alloc.h"
#include "alloc/chunk_layout.h"

struct ub_roots;

/* What chunk allocation works on: the running transaction's pieces. */
struct ub_chunk_ctx {
	struct ub_tree_ctx *tc;
	struct ub_tree_alloc *ta; /* the running transaction's */
	struct ub_volume *vol;
	struct ub_alloc *alloc;
	struct ub_root *chunk_root, *dev_root, *extent_root;
	struct ub_root *fst_root; /* NULL: no free space tree */
	/*
	 * The table of every tree's root object, for the commit reserve, which
	 * counts each tree but the chunk tree (in SYSTEM space) at its live
	 * height; NULL: only the trees above.
	 */
	struct ub_roots *roots;
};

/* The profile new chunks of `kind` (DATA, METADATA or SYSTEM) get: the existing groups' (the kernel's
 * reduction order when several), SINGLE when there is none (DUP for metadata on one device). */
uint64_t ub_chunk_profile_for(const struct ub_alloc *a, const struct ub_volume *vol, uint64_t kind);

/*
 * Free holes of every present device from the dev tree: *out (ndevs entries,
 * free with ub_chunk_free_space). -EUCLEAN (with a message naming device and
 * offset) for a DEV_EXTENT outside its device, inside the first MiB, or
 * overlapping another.
 */
int ub_chunk_dev_space(struct ub_chunk_ctx *cc, struct ub_dev_space **out, int *ndevs);
void ub_chunk_free_space(struct ub_dev_space *devs, int ndevs);

/* The on-disk items of a plan (pure; tests): buffers as large as the item sizes below. */
uint32_t ub_chunk_item_size(int num_stripes);
/* dev_uuid(i) of each stripe's device comes from `uuids` (num_stripes entries of UB_UUID_SIZE). */
void ub_chunk_encode(const struct ub_chunk_plan *plan, uint32_t sectorsize, const uint8_t *uuids, uint8_t *item);
void ub_dev_extent_encode(uint64_t chunk_offset, uint64_t length, const uint8_t *chunk_tree_uuid, uint8_t *item);

/*
 * A chunk of `type` (kind | profile) added in the running transaction as
 * above; *logical (may be NULL) gets its address. -ENOSPC if no device has
 * room for it (nothing changed then). Any other error leaves the transaction
 * half changed: the caller aborts it (-EIO when the tree blocks for the new
 * items ran out, which ub_chunk_prepare's system reserve prevents).
 */
int ub_chunk_alloc(struct ub_chunk_ctx *cc, uint64_t type, uint64_t *logical);

/* Blocks one item insertion or deletion in a tree of `level` may copy or add (path + split). */
uint64_t ub_chunk_op_blocks(int level);
/* The commit reserve for METADATA (see above), in bytes. */
uint64_t ub_chunk_commit_reserve(const struct ub_chunk_ctx *cc);

#define UB_CHUNK_OP_ADD 0  /* an operation that may grow the trees */
#define UB_CHUNK_OP_FREE 1 /* a deletion: may use half the reserve */
/*
 * Before an operation needing about `op_bytes` of new metadata: add metadata
 * or system chunks as the rule above says; 0 if the operation may go on,
 * -EAGAIN if it may once the running transaction has committed (space it
 * freed is pinned until then and would be enough: commit, start a new
 * transaction, ask again), -ENOSPC if it must not. Blocks a transaction
 * frees are only known (pinned) at its commit, so a caller whose transaction
 * holds changes commits and asks once more on -ENOSPC too (the kernel's
 * flush-by-commit); -ENOSPC from a fresh transaction is final. The trees are
 * unchanged by a refusal but for any chunk added.
 */
int ub_chunk_prepare(struct ub_chunk_ctx *cc, uint64_t op_bytes, int op);

/* A data reservation that adds a data chunk when the existing ones are full (-ENOSPC when none fits). */
int ub_chunk_reserve_data(struct ub_chunk_ctx *cc, uint64_t len, uint64_t hint, uint64_t *start);

/*
 * Before writing `len` bytes of data: add data chunks until the data groups
 * could hand that much out (RAID5/6: in whole free stripes); -ENOSPC when no
 * device has room for another and it is still short. (The file API's write
 * reserves with ub_alloc_reserve itself; this is what its caller runs first.)
 */
int ub_chunk_ensure_data(struct ub_chunk_ctx *cc, uint64_t len);

/* Statistics since the allocator was made (tests): chunks added per kind (data, metadata, system). */
void ub_chunk_stats(const struct ub_alloc *a, uint64_t added[3]);

/* ---- which block group the cleaner may remove (chunk_remove.c) ---- */
/* The first block group at or after `pos` the kernel's rule lets the cleaner remove (chunk_remove.c):
 * 0 with *start, 1 when none is left. */
int ub_chunk_next_removable(const struct ub_alloc *a, uint64_t pos, uint64_t *start);
/*
 * Remove the empty block group at `start` in the running transaction: out of
 * the allocator first, then its BLOCK_GROUP_ITEM, free space tree items,
 * DEV_EXTENTs, DEV_ITEM bytes_used, CHUNK_ITEM and (SYSTEM) sys_chunk_array
 * entry. -EBUSY if the group is not empty or was touched by this transaction
 * (its space is then pinned or reserved). The caller commits right after and
 * adds no chunk before that commit: the freed device ranges are holes in the
 * live dev tree, and must not be reused while the last commit maps them.
 * The volume keeps the chunk's mapping, as after an aborted chunk addition:
 * no tree points into it any more, and the map is what keeps its logical
 * range from being handed out again (next chunks go after the highest
 * mapping), so a stale pointer in an old commit can never meet new data at
 * the same logical address. Its device ranges are reused by later chunks.
 * On an error the group is back in the allocator and the caller aborts.
 */
int ub_chunk_remove(struct ub_chunk_ctx *cc, uint64_t start);

#endif
