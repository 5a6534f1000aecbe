/* SPDX-License-Identifier: MIT */
/* The parts of a commit and an open that need no tree access (unit-testable). */
#ifndef UBTRFS_TXN_COMMIT_H
#define UBTRFS_TXN_COMMIT_H

#include <stddef.h>
#include <stdint.h>
#include "tree/tree_priv.h"

/* Why the engine cannot write this superblock's filesystem: 0, or -EOPNOTSUPP and the reason in `why`. */
int ub_engine_check_features(const uint8_t *sb, bool metadump_ok, char *why, size_t len);

/* The roots a superblock and its backup slot record. */
struct ub_commit_roots {
	uint64_t generation;
	struct ub_root root, chunk, extent, fs, dev, csum; /* bytenr 0: absent */
	uint64_t bytes_used;
};
/* The backup slot the next commit fills: the one after the slot holding sb's generation (0 if none does). */
int ub_backup_next_slot(const uint8_t *sb);
/* Turn `sb` (a copy of the last superblock) into the next one: generation, roots, levels, backup slot. */
void ub_super_set_commit(uint8_t *sb, const struct ub_commit_roots *c);

#endif
