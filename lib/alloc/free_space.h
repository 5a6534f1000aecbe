/* SPDX-License-Identifier: MIT */
/*
 * Range sets: disjoint, merged [start, start+len) extents in address order.
 *
 * One structure serves every "set of byte ranges" the allocator keeps (free
 * space of a block group as the free space tree sees it, space that can be
 * handed out now, reservations, pinned ranges, the per-commit deltas). It is a
 * treap (a balanced search tree with priorities from a hash of the start, so
 * the shape is deterministic and no global random state is needed): insert,
 * remove, neighbour lookups in O(log n) expected. Each node also keeps the
 * longest extent in its subtree, so a first-fit search skips every subtree
 * that cannot hold the request: fast with 100k+ fragments.
 *
 * Adjacent ranges are always merged: the set holds maximal extents, so "the
 * range [a, b) is wholly in the set" is "one extent covers it".
 *
 * Not thread-safe: the owner (struct ub_alloc) serialises access.
 */
#ifndef UBTRFS_ALLOC_FREE_SPACE_H
#define UBTRFS_ALLOC_FREE_SPACE_H

#include <stdbool.h>
#include <stdint.h>

struct ub_rs_node;

struct ub_range_set {
	struct ub_rs_node *root;
	uint64_t count; /* extents */
	uint64_t bytes; /* sum of their lengths */
};

struct ub_range {
	uint64_t start, len;
};

static inline void ub_rs_init(struct ub_range_set *s) { s->root = 0; s->count = 0; s->bytes = 0; }
void ub_rs_clear(struct ub_range_set *s);

/*
 * Add [start, start+len): merged with its neighbours. -EEXIST (set unchanged)
 * if any byte is already in the set; -ENOMEM; -EINVAL for len 0 or overflow.
 */
int ub_rs_add(struct ub_range_set *s, uint64_t start, uint64_t len);
/* Add, ignoring bytes already present (union). 0 or -ENOMEM. */
int ub_rs_add_union(struct ub_range_set *s, uint64_t start, uint64_t len);
/*
 * Remove [start, start+len), which must lie wholly inside one extent of the
 * set: -ENOENT (set unchanged) otherwise; -ENOMEM when a split needs a node.
 */
int ub_rs_remove(struct ub_range_set *s, uint64_t start, uint64_t len);
/* Remove whatever part of [start, start+len) is in the set; *removed (may be NULL) gets the bytes. */
int ub_rs_remove_any(struct ub_range_set *s, uint64_t start, uint64_t len, uint64_t *removed);
/* true if every byte of [start, start+len) is in the set */
bool ub_rs_contains(const struct ub_range_set *s, uint64_t start, uint64_t len);
/* true if some byte of [start, start+len) is in the set */
bool ub_rs_overlaps(const struct ub_range_set *s, uint64_t start, uint64_t len);
/* Bytes of [start, start+len) that are in the set (O(k log n), k = extents overlapping). */
uint64_t ub_rs_bytes_in(const struct ub_range_set *s, uint64_t start, uint64_t len);
/*
 * The first extent (in address order) that ends after `pos`: 0 and *out, or 1
 * if none. Iterate with pos = out.start + out.len.
 */
int ub_rs_next(const struct ub_range_set *s, uint64_t pos, struct ub_range *out);

/*
 * First fit: walk the extents that end after `from`, in address order,
 * skipping those shorter than `len`; for each, fit(arg, ext, lo) with
 * lo = max(from, ext.start) returns a start >= lo where `len` bytes fit
 * (inside ext) or UINT64_MAX to go on. 0 and *start on success, 1 if no
 * extent fits. The set is not changed.
 */
typedef uint64_t (*ub_rs_fit_fn)(void *arg, const struct ub_range *ext, uint64_t lo, uint64_t len);
int ub_rs_find(const struct ub_range_set *s, uint64_t from, uint64_t len, ub_rs_fit_fn fit, void *arg,
	       uint64_t *start);
/* The common fit: the first `align`-aligned (absolute address) start in the extent; align a power of two. */
uint64_t ub_rs_fit_aligned(void *align_ptr /* uint64_t * */, const struct ub_range *ext, uint64_t lo, uint64_t len);

/* Internal consistency (ordering, merging, counters, subtree maxima): 0 or -EUCLEAN. For tests. */
int ub_rs_verify(const struct ub_range_set *s);

#endif
