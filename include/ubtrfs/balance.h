/* SPDX-License-Identifier: MIT */
/*
 * Library API: moving block groups (lib/fsw/relocate.c, balance.c;
 * docs/balance.md). A balance relocates every block group its filters select
 * (the kernel's balance filters, struct btrfs_balance_args of <linux/btrfs.h>)
 * and, with a convert, writes what it moves in the target profile. Each group
 * is committed once it is empty and removed: an interruption at any moment
 * leaves a consistent filesystem, and running the balance again does what is
 * left.
 *
 * Threads: as any change (ubtrfs/engine.h); a balance takes the writer lock
 * for each move and gives it back between them, so a live filesystem goes on
 * meanwhile.
 */
#ifndef UBTRFS_BALANCE_H
#define UBTRFS_BALANCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <linux/btrfs.h>
#include "ubtrfs/engine.h"
#include "ubtrfs/api.h"

UB_API_BEGIN

struct ub_reloc_stats {
	uint64_t extents;     /* extents moved */
	uint64_t tree_blocks; /* of them, tree blocks */
	uint64_t data_bytes;  /* bytes of data extents moved */
};

/*
 * Move every extent of the block group starting at `start` elsewhere and
 * remove the group. 0; -ENOENT (no group starts there); -ENOSPC (no room
 * elsewhere: nothing lost, the group stays); -EIO (data with no good copy
 * left: named; the group stays); other errors as a commit's.
 */
int ub_engine_relocate_group(struct ub_engine *e, uint64_t start, struct ub_reloc_stats *st);

/* What a balance is asked: BTRFS_BALANCE_{DATA,METADATA,SYSTEM,FORCE} and the filters of each type. */
struct ub_balance {
	uint64_t flags;
	struct btrfs_balance_args data, meta, sys;
};

struct ub_balance_progress {
	uint64_t expected;   /* groups the filters selected */
	uint64_t considered; /* groups looked at */
	uint64_t completed;  /* groups relocated */
	struct ub_reloc_stats moved;
	uint64_t group;      /* the group being relocated (its start), 0 before the first */
};

/*
 * The balance: the checks first (a convert's target needs as many devices as
 * its profile does; reducing the redundancy of metadata or system needs
 * BTRFS_BALANCE_FORCE; -EINVAL with a message otherwise, nothing changed),
 * then each selected group from the highest address down, relocated. The
 * `progress` callback (may be NULL) hears after each group; a nonzero return
 * stops the balance there (-ECANCELED). *out (may be NULL) gets the totals.
 */
int ub_engine_balance(struct ub_engine *e, const struct ub_balance *b,
		      int (*progress)(void *arg, const struct ub_balance_progress *p), void *arg,
		      struct ub_balance_progress *out);

/*
 * The balance item. ub_engine_balance writes it (the kernel's: BALANCE
 * TEMPORARY_ITEM 0 in the root tree, the balance's flags and filters) and
 * commits it before the first group moves, and deletes it with its last
 * commit, but when `progress` stopped it: then the balance is paused, as the
 * kernel's is, and the item waits for ub_engine_balance_resume (or the
 * kernel's resume at mount) or ub_engine_balance_cancel. A crash leaves it
 * too. While it is there ub_engine_balance refuses (-EINPROGRESS).
 */
/* The paused (or interrupted) balance: 0 and *b (may be NULL); -ENOENT none; -EUCLEAN a damaged item (said). */
int ub_engine_balance_item(struct ub_engine *e, struct ub_balance *b);
/*
 * The balance the item holds, resumed as the kernel resumes one: a convert
 * goes on in soft mode, a type without usage or convert filter takes
 * usage=90. -ENOTCONN when there is none; else as ub_engine_balance.
 */
int ub_engine_balance_resume(struct ub_engine *e, int (*progress)(void *arg, const struct ub_balance_progress *p),
			     void *arg, struct ub_balance_progress *out);
/* The paused balance dropped: its item deleted and committed. -ENOTCONN when there is none. */
int ub_engine_balance_cancel(struct ub_engine *e);
/* A balance item's bytes (as a tree search gives them) decoded: 0, -EUCLEAN when too short. */
int ub_balance_item_decode(const void *item, size_t size, struct ub_balance *b);

/*
 * A device added (`path`: a block device or image file, at least 256 MiB):
 * its first MiB and superblock places zeroed, its dev item added, the
 * superblock's device count and size grown, committed. A device that holds
 * a btrfs filesystem is refused (-EEXIST) unless `force`. *devid (may be
 * NULL) gets its id.
 */
int ub_engine_device_add(struct ub_engine *e, const char *path, bool force, uint64_t *devid);
/*
 * Device `devid` (0: the missing one) removed: refused before anything
 * changes when a profile in use would be left with fewer devices than it
 * needs, or when the other devices have no room (-EINVAL, -ENOSPC, named);
 * then every block group with a stripe there relocated (as a balance with
 * devid=, `progress` as there), its dev item deleted, committed, and its
 * superblocks wiped.
 */
int ub_engine_device_remove(struct ub_engine *e, uint64_t devid,
			    int (*progress)(void *arg, const struct ub_balance_progress *p), void *arg,
			    struct ub_balance_progress *out);
/*
 * Device `devid`'s size in the filesystem set to `size` bytes (UINT64_MAX:
 * all of the device): a shrink relocates the block groups past the new end
 * first. -EINVAL past the device's end or below 256 MiB.
 */
int ub_engine_device_resize(struct ub_engine *e, uint64_t devid, uint64_t size);

/*
 * Device `devid` (0: the missing one) replaced by the device at `path`, at
 * least as large: every stripe it holds is written onto the new device at the
 * same place, from the device itself where it reads, else rebuilt from the
 * other copies or parity (not checked against the data checksums: a scrub
 * afterwards does that); then the new device takes its devid and uuid (as the
 * kernel's replace leaves them), the superblocks are committed to it, and the
 * old device's are wiped. No relocation, nothing else changes. A device that
 * holds a btrfs filesystem is refused (-EEXIST) unless `force`. The writer lock
 * is held while the stripes are copied.
 */
int ub_engine_device_replace(struct ub_engine *e, uint64_t devid, const char *path, bool force);

/*
 * From any thread: a replace under way on `e` stops at its next step of the
 * copy and returns -ECANCELED, the filesystem as it was (the new device took
 * nothing's place; its superblock places stay zeroed). 0 when one was running,
 * -ENOENT when none. ub_engine_device_replace_progress: bytes copied and to
 * copy of the one under way (0 and 0 when none).
 */
int ub_engine_device_replace_cancel(struct ub_engine *e);
void ub_engine_device_replace_progress(struct ub_engine *e, uint64_t *done, uint64_t *total);

/*
 * Parse one type's filters as `btrfs balance start -d/-m/-s` spells them
 * ("convert=raid1,soft,usage=50,devid=2,limit=3..."), into *args (zeroed
 * first). 0, or -EINVAL with the reason in `why`.
 */
int ub_balance_parse_filters(const char *text, struct btrfs_balance_args *args, char *why, size_t whylen);

UB_API_END

#endif
