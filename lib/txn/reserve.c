/* SPDX-License-Identifier: MIT */
/*
 * Space for the operations of a transaction: the chunk allocator
 * (lib/alloc/chunk_alloc.h) works on the transaction's trees, which only the
 * engine knows, so the engine lends it their root objects here. Callers above
 * (the file API, mkfs --rootdir) ask through these instead of reserving from
 * the allocator directly, so a full data or metadata type grows by a chunk
 * the way the kernel's would.
 */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>
#include "txn.h"

int ub_txn_chunk_ctx(struct ub_txn *t, struct ub_chunk_ctx *cc)
{
	struct ub_engine *e = t->e;
	struct ub_eroot *dev;
	int ret;

	ret = ub_engine_root(e, BTRFS_DEV_TREE_OBJECTID, &dev);
	if (ret)
		return ret;
	*cc = (struct ub_chunk_ctx){
		.tc = &e->fs.tc,
		.ta = ub_txn_ta(t),
		.vol = e->fs.vol,
		.alloc = e->alloc,
		.chunk_root = &e->fs.chunk_tree->root,
		.dev_root = &dev->root,
		.extent_root = &e->fs.extent_tree->root,
		.fst_root = e->fs.fst_tree ? &e->fs.fst_tree->root : NULL,
		.roots = e->fs.roots,
	};
	return 0;
}

int ub_txn_reserve_data(struct ub_txn *t, uint64_t len, uint64_t hint, uint64_t *start)
{
	struct ub_chunk_ctx cc;
	int ret = ub_txn_chunk_ctx(t, &cc);

	return ret ? ret : ub_chunk_reserve_data(&cc, len, hint, start);
}

int ub_txn_prepare(struct ub_txn *t, uint64_t op_bytes, int op)
{
	struct ub_chunk_ctx cc;
	int ret = ub_txn_chunk_ctx(t, &cc);

	return ret ? ret : ub_chunk_prepare(&cc, op_bytes, op);
}

/*
 * Operations that prepare and commit by themselves: on a refusal that a
 * commit may lift (below), and when the transaction's dirty memory reaches
 * the engine's budget (txn.h "dirty budget").
 */

int ub_engine_commit(struct ub_engine *e)
{
	int ret = ub_fs_live_write_lock(&e->fs);

	if (ret)
		return ret;
	/*
	 * A transaction its owner left running is committed for it: the owner's
	 * lock goes with it. With none running, a broken engine still answers
	 * -EROFS: what was changed since the last commit was forgotten, so
	 * "everything so far is durable" (fsync) would be a lie.
	 */
	ret = e->running ? ub_txn_commit(e->running) : ub_engine_broken(e) ? -EROFS : 0;
	ub_fs_live_write_unlock(&e->fs);
	return ret;
}

void ub_engine_end_op(struct ub_engine *e)
{
	ub_fs_live_write_unlock(&e->fs);
}

uint64_t ub_txn_dirty_bytes(const struct ub_txn *t)
{
	const struct ub_engine *e = t->e;

	return (uint64_t)e->fs.tc.ndirty * e->fs.vol->nodesize + ub_dref_count(t->refs) * sizeof(struct ub_dref_head);
}

void ub_engine_set_dirty_budget(struct ub_engine *e, uint64_t bytes)
{
	e->dirty_budget = bytes;
}

uint64_t ub_engine_ram_budget(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
	uint64_t cap;

	if (pages <= 0 || psize <= 0)
		return UB_ENGINE_DIRTY_BUDGET;
	/* a small machine must not spend more than an eighth of its memory on one transaction */
	cap = (uint64_t)pages * (uint64_t)psize / 8;
	return cap < UB_ENGINE_DIRTY_BUDGET ? cap : UB_ENGINE_DIRTY_BUDGET;
}

uint64_t ub_engine_dirty_budget(const struct ub_engine *e)
{
	return e->dirty_budget ? e->dirty_budget : e->ram_budget;
}

static int begin_op_locked(struct ub_engine *e, uint64_t op_bytes, int op, struct ub_txn **out);

int ub_engine_begin_op(struct ub_engine *e, uint64_t op_bytes, int op, struct ub_txn **out)
{
	int ret = ub_fs_live_write_lock(&e->fs);

	if (ret)
		return ret;
	ret = begin_op_locked(e, op_bytes, op, out);
	if (ret)
		ub_fs_live_write_unlock(&e->fs);
	return ret;
}

/*
 * Whether the running transaction holds so much data space that only its
 * commit settles that writes would run out while the commit would give much of
 * it back: space it freed (pinned until the commit) and space it reserved (an
 * extent written and dropped again in the transaction is given back only when
 * the commit folds its references), together more than what is still free. A
 * transaction may last long (fsyncs go through the log, commit= may be long):
 * the kernel commits when space runs short too. Called between operations,
 * when no reservation of an operation is in flight.
 */
static bool pinned_data_pressing(const struct ub_engine *e)
{
	struct ub_space_info si;

	ub_alloc_space_info(e->alloc, BTRFS_BLOCK_GROUP_DATA, &si);
	return si.pinned + si.reserved >= (1ULL << 20) && si.pinned + si.reserved >= si.avail;
}

static int begin_op_locked(struct ub_engine *e, uint64_t op_bytes, int op, struct ub_txn **out)
{
	if (e->running && (ub_txn_dirty_bytes(e->running) >= ub_engine_dirty_budget(e) || pinned_data_pressing(e))) {
		int ret = ub_engine_commit(e);

		if (ret)
			return ret;
		e->auto_commits++;
	}
	/*
	 * Space a transaction frees is pinned until its commit, so a refusal
	 * while it holds changes may be lifted by committing: one more try from
	 * a fresh transaction; a refusal there is final.
	 */
	for (int attempt = 0; attempt < 2; attempt++) {
		bool fresh = !e->running;
		int ret;

		if (fresh) {
			struct ub_txn *t;

			ret = ub_txn_start_joined(e, &t);
			if (ret)
				return ret;
		}
		ret = ub_txn_prepare(e->running, op_bytes, op);
		if (!ret) {
			*out = e->running;
			return 0;
		}
		if ((ret != -EAGAIN && ret != -ENOSPC) || (fresh && ret == -ENOSPC) || attempt)
			return ret;
		ret = ub_engine_commit(e);
		if (ret)
			return ret;
	}
	return -ENOSPC;
}
