/* SPDX-License-Identifier: MIT */
/*
 * The tree layer's structures, private to the library: include/ubtrfs/tree.h
 * declares them opaque for users (who reach a context through ub_fs_trees, a
 * block through the ub_eb_* accessors, a position through ub_path_new).
 * Library code that reads the fields, or keeps a context or a path in its
 * own storage, includes this.
 */
#ifndef UBTRFS_TREE_PRIV_H
#define UBTRFS_TREE_PRIV_H

#include <stdbool.h>
#include <stdint.h>
#include "ubtrfs/format.h"
#include "ubtrfs/tree.h"
#include "volume/volume_priv.h"

/*
 * One tree block in memory (refcounted, owned by the cache): verified when read,
 * or created by the write side (lib/tree/tree_write.h).
 *
 * Ownership and threading: several reader threads and the one writer thread
 * may share a ub_tree_ctx. Its cache's lock (lib/tree/cache.h) guards the
 * table, the LRU, every block's refs/hnext/lru/dirty links, the negative
 * cache and the counters; reads from the device and checksum verification
 * run without it. A block's
 * data is immutable once published, except that
 * only the transaction's single writer changes block contents, and only blocks
 * of its own transaction (generation == transid, not yet written), which are
 * reachable only from the roots it updates: a reader walking from committed
 * root values never meets one, so committed blocks in the cache stay exactly
 * what is on disk. A dirty block holds one reference for the dirty list, so
 * eviction never drops it.
 */
struct ub_eb {
	uint64_t start;
	uint32_t len;
	int refs;
	struct ub_eb *hnext, *lru_prev, *lru_next;
	uint8_t *data;
	struct ub_eb *dirty_prev, *dirty_next;
	bool dirty;  /* changed in the running transaction, not yet written (on tc's dirty list) */
	bool hashed; /* findable by address; a block dropped from the cache lives until its last put */
	int mirror;  /* the copy it was read from and verified (0: made in memory) */
	/* ---- shared blocks of the running transaction ---- */
	uint64_t born; /* the writer's count of new blocks when this one was made (0: read from a device) */
};

/*
 * A caller probing for blocks that may well be bad (root candidates, a scan
 * of the metadata) silences the messages of failed block reads on its own
 * thread between ub_tree_quiet(true) and ub_tree_quiet(false), which nest:
 * readers on other threads of the same trees still hear of theirs.
 */
void ub_tree_quiet(bool on);
bool ub_tree_is_quiet(void);
/*
 * A block whose read failed is remembered, and the next read of it fails
 * at once without a word: the first reader named it. A caller that must
 * hear the reason whichever thread read the block first (the checker, whose
 * passes run on two threads) turns this on for its own thread: the
 * remembered failure is then said again, as a read of the block would say it.
 */
void ub_tree_repeat_bad(bool on);
/*
 * A repair's way to let in a tree block no copy of which passes the checks
 * (lib/repair/salvage.c): its cured bytes (checksum sealed, every item check
 * passing; only the generation may be from the future) for the filesystem
 * whose tree blocks carry `fsid`. Every tree context of that filesystem then
 * takes them for the block at `bytenr` instead of reading the devices, until
 * ub_tree_salvage_clear. The repair copies such a block on write in its
 * transaction, so nothing committed points at the address; only the repair
 * puts entries, and only while it runs.
 */
int ub_tree_salvage_put(const uint8_t fsid[UB_FSID_SIZE], uint64_t bytenr, const void *buf, uint32_t len);
void ub_tree_salvage_clear(void);

struct ub_tree_ctx {
	struct ub_volume *vol;
	struct ub_log log;
	struct ub_block_cache *cache; /* the blocks and what guards them: lib/tree/cache.h */
	/* write side: how many blocks the running transaction changed (the list is the cache's) */
	size_t ndirty;
	/*
	 * What new block headers carry: metadata_uuid comes from the volume at
	 * init; chunk_tree_uuid from the first verified block read, unless the
	 * opener (mkfs, tests) sets it and have_chunk_tree_uuid first.
	 */
	uint8_t metadata_uuid[UB_FSID_SIZE];
	uint8_t chunk_tree_uuid[UB_UUID_SIZE];
	bool have_chunk_tree_uuid;
	/* ---- shared blocks of the running transaction ---- */
	uint64_t births; /* new blocks made so far (ub_eb.born); only grows */
};

int ub_tree_ctx_init(struct ub_tree_ctx *tc, struct ub_volume *vol, const struct ub_log *log);
void ub_tree_ctx_destroy(struct ub_tree_ctx *tc);

/* A position in a tree: nodes[0] is the leaf. */
struct ub_path {
	struct ub_eb *nodes[UB_MAX_LEVEL];
	int slots[UB_MAX_LEVEL];
	struct ub_tree_ctx *tc;
	const struct ub_root *root;
};

void ub_path_init(struct ub_path *p);

/*
 * Inside the library the block header accessors read the block directly, as
 * they did when ub_eb was public: they run in every search step. The
 * out-of-line functions users call (lib/tree/access.c) are the same code.
 */
static inline const uint8_t *ub_eb_data_inl(const struct ub_eb *eb) { return eb->data; }
static inline uint32_t ub_eb_len_inl(const struct ub_eb *eb) { return eb->len; }
static inline uint64_t ub_eb_start_inl(const struct ub_eb *eb) { return eb->start; }
static inline uint8_t ub_eb_level_inl(const struct ub_eb *eb) { return (uint8_t)UB_GET(ub_disk_header, level, eb->data); }
static inline uint32_t ub_eb_nritems_inl(const struct ub_eb *eb) { return (uint32_t)UB_GET(ub_disk_header, nritems, eb->data); }
static inline uint64_t ub_eb_owner_inl(const struct ub_eb *eb) { return UB_GET(ub_disk_header, owner, eb->data); }
static inline uint64_t ub_eb_generation_inl(const struct ub_eb *eb) { return UB_GET(ub_disk_header, generation, eb->data); }
#define ub_eb_data(eb) ub_eb_data_inl(eb)
#define ub_eb_len(eb) ub_eb_len_inl(eb)
#define ub_eb_start(eb) ub_eb_start_inl(eb)
#define ub_eb_level(eb) ub_eb_level_inl(eb)
#define ub_eb_nritems(eb) ub_eb_nritems_inl(eb)
#define ub_eb_owner(eb) ub_eb_owner_inl(eb)
#define ub_eb_generation(eb) ub_eb_generation_inl(eb)

#endif
