/* SPDX-License-Identifier: MIT */
/*
 * The allocator: block groups, their free space, reservations and pinned
 * space of one open filesystem (library-internal).
 *
 * Four views of every block group's bytes, kept exact:
 *
 *   committed free  what the free space tree says (or would say) after the
 *                   accounting done so far: the block group minus every
 *                   extent that has an extent item. Changed only by
 *                   ub_alloc_account(). The superblock mirror stripes are in
 *                   it when they are free space on disk (the kernel writes
 *                   the whole block group as free space when it creates the
 *                   free space info and excludes the mirrors only in memory).
 *   avail           what ub_alloc_reserve() may hand out now: committed free
 *                   minus superblock mirror stripes, minus reservations, minus
 *                   pinned ranges (and, on RAID5/6, see below).
 *   reserved        handed out by ub_alloc_reserve(), not yet accounted
 *                   (the extent item does not exist yet).
 *   pinned          freed in the running transaction (ub_alloc_pin): the
 *                   last committed trees may still point there, so it is not
 *                   handed out before ub_alloc_unpin(), after the new
 *                   superblocks are durable.
 *
 * Life of an extent: reserve -> (written) -> account(alloc) at commit when its
 * first reference is inserted. Dropped: account(free) at commit when its last
 * reference goes + pin; unpin after the superblocks -> avail again. A
 * reservation whose extent never got a reference (folded away in the same
 * transaction, or an aborted write) goes back with ub_alloc_unreserve().
 *
 * Alignment: data extents start on a sectorsize boundary; tree blocks on a
 * nodesize boundary (absolute logical address). Since nodesize is a power of
 * two <= 64 KiB, a nodesize-aligned block never crosses a 64 KiB stripe
 * boundary, which is what btrfs check ("crossing stripe boundary") and the
 * kernel's extent buffer alignment checks require; reserve also refuses
 * (never returns) a metadata range crossing one.
 *
 * RAID5/6 (data and metadata alike, issue 7: no write hole): a full stripe is
 * [bg.start + k * fs, bg.start + (k+1) * fs) with fs = data stripes * 64 KiB
 * (a block group's logical start is where its chunk's stripe 0 starts). A
 * reservation in a RAID5/6 block group only uses full stripes that are, at
 * the moment the transaction first touches them, wholly in `avail` (no byte
 * allocated, reserved, pinned or superblock). Such a stripe becomes "open"
 * for the running transaction: the rest of it may be handed out to the same
 * transaction (it is written before the commit with the rest of the stripe,
 * and nothing committed lives there). ub_alloc_unpin() ends the transaction
 * for the allocator and closes every open stripe: its unused tail stays free
 * space on disk (in committed free and avail) but is skipped by reserve until
 * its whole stripe is free again. So a stripe written by a transaction never
 * holds data a committed tree can reach, and the volume layer's
 * read-modify-write of a partial stripe only reads bytes that are free or
 * belong to the same transaction. This holds only if every reservation is
 * written, and accounted or given back, before the transaction that made it
 * commits (no reservation may outlive its transaction, as delayed
 * allocation across commits would). ub_alloc_reserve_at() does not apply the
 * rule (it takes exactly what it is told) but opens the stripes it touches.
 *
 * When to add a chunk (the caller's job, after ub_alloc_need_chunk() says so
 * or reserve fails with -ENOSPC): for METADATA and SYSTEM the rule follows the
 * kernel's should_alloc_chunk(): allocate a new chunk once
 * used + reserved + pinned + super + 2 MiB >= 80% of the type's total, so a
 * commit (which COWs many blocks) never runs out in the middle. DATA chunks
 * are added only when a reservation fails (-ENOSPC), as the kernel does for
 * data (it allocates on demand, filling what exists first).
 *
 * Threads: one struct ub_alloc per open filesystem; every call must be
 * serialised by the caller (the transaction holds its lock around them).
 * Readers of committed trees do not use the allocator.
 */
#ifndef UBTRFS_ALLOC_ALLOC_H
#define UBTRFS_ALLOC_ALLOC_H

#include <stdbool.h>
#include <stdint.h>
#include "tree/tree_priv.h"
#include "ubtrfs/volume.h"
#include "alloc/free_space.h"

struct ub_alloc; /* per open fs */

/*
 * Block groups from the extent tree's BLOCK_GROUP_ITEMs matched with the
 * chunk map; free space from the free space tree when `fst_root` is given
 * (FREE_SPACE_INFO / EXTENT / BITMAP items), else from the extent tree's
 * EXTENT_ITEM / METADATA_ITEM keys. Everything read is validated: a block
 * group without its chunk (or of another type/length), used > length, free
 * space outside its block group, overlapping or unaligned ranges, an
 * extent_count or free+used total that disagrees: -EUCLEAN with a message
 * naming the block group. A filesystem whose block group items live in the
 * block group tree (incompat BLOCK_GROUP_TREE) is refused with -EOPNOTSUPP,
 * naming the feature.
 */
int ub_alloc_load(struct ub_tree_ctx *tc, struct ub_volume *vol, const struct ub_root *extent_root,
		  const struct ub_root *fst_root /* NULL: no free space tree */, struct ub_alloc **out);
/*
 * For a repair (lib/repair): the block groups as ub_alloc_load reads them, but
 * the free space from the extent tree whatever the free space tree says, each
 * group's used bytes recounted from its extents, and every group dirty with
 * its free space tree items to be rewritten whole at the next commit (a
 * BLOCK_GROUP_ITEM's `used` and the superblock's bytes_used follow). What
 * changed is counted in *fixed (groups whose used bytes were wrong).
 */
int ub_alloc_load_repair(struct ub_tree_ctx *tc, struct ub_volume *vol, const struct ub_root *extent_root,
			 uint64_t *fixed, struct ub_alloc **out);
/*
 * For a repair that rebuilds the extent tree (lib/repair/init_extent.c): one
 * block group per chunk of the volume's map (its type from the chunk), every
 * byte free, nothing read from the extent tree (which may be damaged). The
 * caller then takes every extent it found in use out with ub_alloc_account
 * (alloc) before anything is reserved, and writes the BLOCK_GROUP_ITEMs; every
 * group is dirty, its free space tree items rewritten whole at the next commit.
 */
int ub_alloc_load_chunks(struct ub_volume *vol, struct ub_alloc **out);
/* An allocator with no block group (mkfs, tests); sizes from vol (NULL: sectorsize 4096, nodesize 16384). */
int ub_alloc_create(struct ub_volume *vol, const struct ub_log *log, struct ub_alloc **out);
void ub_alloc_free(struct ub_alloc *a);

/*
 * `len` bytes in a block group whose type has every bit of `type` (DATA /
 * METADATA / SYSTEM; a mixed DATA|METADATA group serves both), starting the
 * search at `hint` (0: the type's last allocation) and wrapping around.
 * METADATA and SYSTEM requests are nodesize aligned (len must be nodesize),
 * DATA sectorsize aligned (len a multiple of sectorsize). RAID5/6 groups:
 * the whole-stripe rule above. -ENOSPC: no group has room (caller may add a
 * chunk and retry); -EINVAL: bad type or length.
 */
int ub_alloc_reserve(struct ub_alloc *a, uint64_t type, uint64_t len, uint64_t hint, uint64_t *start);
/* Give back (part of) a reservation that was never accounted: avail again at once. */
void ub_alloc_unreserve(struct ub_alloc *a, uint64_t start, uint64_t len);
/*
 * Reserve exactly [start, start+len) (log replay, tests): 0, -ENOSPC if any
 * byte is not in avail, -ENOENT if not inside one block group.
 */
int ub_alloc_reserve_at(struct ub_alloc *a, uint64_t start, uint64_t len);

/*
 * Commit-time accounting, called as extent items are inserted (alloc) and
 * deleted (free): block group used +/- len, committed free -/+, the range
 * recorded in the block group's delta, the group marked dirty. alloc: the
 * range comes out of the reservations (or of avail if it was not reserved);
 * -EUCLEAN if any byte is already allocated. free: -EUCLEAN if any byte is
 * already free or used would go below 0; the range is NOT made available
 * (pin it). -ENOENT if the range is not inside one block group.
 */
int ub_alloc_account(struct ub_alloc *a, uint64_t start, uint64_t len, bool alloc);

/* Freed in the running transaction: unusable until ub_alloc_unpin (after supers are durable). */
int ub_alloc_pin(struct ub_alloc *a, uint64_t start, uint64_t len);
/*
 * Reader epochs. The superblocks of transaction `gen` are durable: what it
 * pinned waits, tagged `gen`, until no reader of an older commit is left;
 * every waiting part whose tag is at most `oldest` (the oldest commit a
 * reader still reads, UINT64_MAX with none) goes back to avail. Ends the
 * transaction for the allocator (closes open RAID5/6 stripes).
 */
void ub_alloc_commit_pins(struct ub_alloc *a, uint64_t gen, uint64_t oldest);
/*
 * A transaction sealed for a commit whose writing goes on without the
 * writer lock: its pins wait, tagged `gen`, like those of a committed one,
 * and the transaction ends for the allocator; the caller releases them
 * (ub_alloc_release_pins) only up to the generation known durable.
 */
void ub_alloc_seal_pins(struct ub_alloc *a, uint64_t gen);
/* Waiting parts tagged at most `upto` (the oldest commit a reader reads, at most the last durable one) -> avail: their bytes. */
uint64_t ub_alloc_release_pins(struct ub_alloc *a, uint64_t upto);
/*
 * The next-fit hints (where each type's next search starts): copied out,
 * or (set) back in, so that a reservation made only to see whether room
 * exists leaves the layout of what follows as it would have been.
 */
void ub_alloc_hints(struct ub_alloc *a, uint64_t hints[3], bool set);
/* Bytes pinned by committed transactions that readers of older commits still hold. */
uint64_t ub_alloc_pins_waiting(const struct ub_alloc *a);
/* ub_alloc_commit_pins with no reader: every pinned range -> avail (tests, single-threaded users). */
void ub_alloc_unpin(struct ub_alloc *a);
/*
 * The running transaction's open RAID5/6 stripes close now, as at its end:
 * what it wrote so far became durable before its commit (an fsync log
 * points at it), so no later write of the transaction may rewrite those
 * stripes' parity (the write hole would reach durable data).
 */
void ub_alloc_close_stripes(struct ub_alloc *a);
/*
 * Abort of the running transaction: every reservation goes back to avail
 * (nothing committed points there), so the next transaction can use that
 * space; the chunks it added are taken out; pins and open stripes are
 * dropped without freeing anything (pinned space stays unusable, which is
 * safe). Accounting happens only inside a commit, so an abort before one
 * leaves the allocator exactly as the last commit did. Accounting already
 * done by a commit that then failed is NOT undone: the in-memory used/free
 * no longer match the disk, so after a failed commit the allocator may
 * serve no further commit; the engine is read-only and a reopen reloads the
 * truth from the last commit.
 */
void ub_alloc_abort(struct ub_alloc *a);

/* One changed block group at commit. */
struct ub_bg_delta {
	uint64_t start, length;
	uint64_t flags;          /* BTRFS_BLOCK_GROUP_* type and profile */
	uint64_t chunk_objectid; /* BTRFS_FIRST_CHUNK_TREE_OBJECTID */
	uint64_t used;           /* bytes used now: the BLOCK_GROUP_ITEM's `used` */
	uint64_t old_used;       /* at the last commit */
	bool is_new;             /* added this transaction: insert its BLOCK_GROUP_ITEM and FREE_SPACE_INFO */
	bool fst_bitmaps;        /* its FREE_SPACE_INFO has BTRFS_FREE_SPACE_USING_BITMAPS (as loaded) */
	bool fst_rebuild;        /* a repair: its free space tree items rewritten whole from `free` */
	/*
	 * Since the last commit, netted (a range freed then allocated again in
	 * between appears in neither): ranges that became free space (add to
	 * the free space tree) and ranges that became allocated (remove).
	 * Both sorted, disjoint, merged.
	 */
	const struct ub_range_set *became_free, *became_used;
	/*
	 * For a new group (is_new), both are relative to the group as created
	 * (all free): write its FREE_SPACE_INFO and `free` instead.
	 *
	 * The complete committed free space of the group after this commit:
	 * what its free space tree items must describe (iterate with
	 * ub_rs_next; ->count is the FREE_SPACE_INFO extent_count for extents).
	 */
	const struct ub_range_set *free;
};
/*
 * Visit every block group changed since the last commit, in address order;
 * a nonzero return from fn stops the walk and is returned. The dirty marks
 * and deltas are cleared only by ub_alloc_clear_dirty() (after fn succeeded
 * for all), so a failed commit can walk again.
 */
int ub_alloc_for_each_dirty_bg(struct ub_alloc *a, int (*fn)(void *arg, const struct ub_bg_delta *d), void *arg);
void ub_alloc_clear_dirty(struct ub_alloc *a);
/*
 * Every block group marked changed with its free space tree items to be
 * rewritten whole at the next commit (a free space tree made or repaired
 * from the allocator's free set). Returns the number of block groups.
 */
int ub_alloc_rebuild_fst_all(struct ub_alloc *a);

/*
 * A block group for a chunk just created (the chunk must already be in the
 * volume's map when vol was given): all of it free but the superblock
 * mirror stripes; marked dirty and new. -EEXIST if it overlaps a group.
 */
int ub_alloc_add_block_group(struct ub_alloc *a, uint64_t type, uint64_t logical, uint64_t length);

/* Per-type totals (statfs, chunk decisions); type bits as in reserve, summed over matching groups. */
struct ub_space_info {
	uint64_t total;    /* sum of block group lengths */
	uint64_t used;     /* accounted (extent items) */
	uint64_t reserved; /* reserved, not yet accounted */
	uint64_t pinned;   /* freed this transaction */
	uint64_t super;    /* superblock mirror stripes not otherwise used */
	uint64_t avail;    /* what reserve could hand out now (RAID5/6 rule not subtracted) */
	uint64_t readonly; /* free bytes of groups being relocated (in total, never handed out) */
	int nr_groups;
};
void ub_alloc_space_info(const struct ub_alloc *a, uint64_t type, struct ub_space_info *out);
/* What reserve could really hand out now: avail, but on RAID5/6 only whole free full stripes and the rest of
 * the stripes this transaction opened (the rule above). */
uint64_t ub_alloc_usable(const struct ub_alloc *a, uint64_t type);
/* Sum of every group's used bytes: the superblock's bytes_used. */
uint64_t ub_alloc_bytes_used(const struct ub_alloc *a);
/* The rule above: true when a chunk of `type` should be added before the next commit. */
bool ub_alloc_need_chunk(const struct ub_alloc *a, uint64_t type);

/* A block group's public state (tests, check). */
struct ub_bg_info {
	uint64_t start, length, flags, used, super, pinned, reserved;
	uint64_t full_stripe; /* RAID5/6: bytes of logical space per full stripe; 0 otherwise */
	bool ro;              /* being relocated */
};
/*
 * Relocation (a balance, a device removal): a read-only group hands nothing
 * out (its free bytes count as readonly, not avail) while its extents move
 * elsewhere. 0 or -ENOENT (no group starts at `start`).
 */
int ub_alloc_set_ro(struct ub_alloc *a, uint64_t start, bool ro);
/*
 * A convert: from now on space of `type`'s kind comes only from groups of
 * `profile` (and new chunks get it: ub_chunk_profile_for); profile 0 ends it.
 * `profile` is a BTRFS_BLOCK_GROUP_* profile bit, or BTRFS_AVAIL_ALLOC_BIT_SINGLE
 * for single.
 */
void ub_alloc_set_target(struct ub_alloc *a, uint64_t type, uint64_t profile);
/* The target set above for `type`'s kind, 0 when none. */
uint64_t ub_alloc_target(const struct ub_alloc *a, uint64_t type);
/* The block group containing `logical`: 0 or -ENOENT. */
int ub_alloc_bg_info(const struct ub_alloc *a, uint64_t logical, struct ub_bg_info *out);
/* Iterate groups in address order: the first group starting at or after `pos`; 0, or 1 at the end. */
int ub_alloc_next_bg(const struct ub_alloc *a, uint64_t pos, struct ub_bg_info *out);
/* The group's committed free set / avail set (read-only; tests and the free space tree writer). */
const struct ub_range_set *ub_alloc_bg_free(const struct ub_alloc *a, uint64_t logical);
const struct ub_range_set *ub_alloc_bg_avail(const struct ub_alloc *a, uint64_t logical);

#endif
