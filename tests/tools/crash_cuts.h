/* SPDX-License-Identifier: MIT */
/*
 * Crash images for the test drivers: the devices as they were before a
 * recorded run (DIR/base_devD.img), then for chosen points of the recorded
 * order of writes and flushes the images a crash there could have left
 * (DIR/cutC_devD.img: lib/dev's recorder, a seeded choice of the pending
 * writes kept, dropped, reordered). One line per cut on stdout:
 * "cut C entries N of M".
 */
#ifndef UBTRFS_TEST_CRASH_CUTS_H
#define UBTRFS_TEST_CRASH_CUTS_H

#include <stdbool.h>
#include <stdint.h>
#include "ubtrfs/dev.h"

/* Copy a (sparse) image file, holes kept. */
int crash_copy_sparse(const char *from, const char *to);
/* Whether a device write of [off, off+len) touches a superblock mirror. */
bool crash_is_super(uint64_t off, uint64_t len);
/* DIR/base_devD.img from each of the ndevs paths. */
int crash_save_bases(const char *dir, char *const *paths, int ndevs);
/*
 * The cuts: `spread` points spread evenly over the log (the last one its very
 * end); then, with super_stride > 0, both sides of every super_stride-th
 * superblock write (1: every one), where commits become durable.
 */
int crash_make_cuts(struct ub_rec_log *log, const char *dir, int ndevs, long spread, long super_stride);

#endif
