/* SPDX-License-Identifier: MIT */
/*
 * Library API: the undo file. A repair (check --repair, rescue) writes its
 * devices through undo devices: before the first write that touches a range
 * of a device, the old bytes of that range go into the undo file and are made
 * durable, so ub_undo_apply can put every device back byte for byte, also
 * from a file a crash cut short (every record in it was durable before its
 * write reached the device). docs/rescue.md describes the file.
 */
#ifndef UBTRFS_UNDO_H
#define UBTRFS_UNDO_H

#include <stdbool.h>
#include <stdint.h>
#include "ubtrfs/dev.h"
#include "ubtrfs/log.h"
#include "ubtrfs/api.h"

UB_API_BEGIN

/* An undo file being written: the library's (lib/undo/undo.c). Thread-safe. */
struct ub_undo;

/* Create the undo file at `path` (never over an existing file: -EEXIST), its header durable. */
int ub_undo_create(const char *path, struct ub_undo **out);
/*
 * A device over `inner` (taken over: closed with it, and on failure) that
 * saves the old bytes of every 4 KiB piece a write touches into `u` before
 * that piece's first write. `inner`'s identity (devid, dev uuid, fsid from its
 * newest valid superblock copy, its whole old primary superblock, its size, its
 * path) is recorded now. -EINVAL when `inner` is the undo file itself.
 */
int ub_dev_open_undo(struct ub_dev *inner, struct ub_undo *u, struct ub_dev **out);
/*
 * Write the trailer (the file is complete), fsync, close, free. Call after
 * the wrapped devices are closed; a device still open fails its next first
 * write (-EBADF). ub_undo_free closes without the trailer (an aborted run: the
 * file stays usable, as one a crash cut short).
 */
int ub_undo_finish(struct ub_undo *u);
void ub_undo_free(struct ub_undo *u);
/* Ranges and bytes saved so far (either may be NULL). */
void ub_undo_saved(struct ub_undo *u, uint64_t *ranges, uint64_t *bytes);

struct ub_undo_stats {
	uint64_t ranges;          /* ranges written back (or that would be, dry run) */
	uint64_t bytes;
	int devices;              /* devices matched to a record */
	int records;              /* device records in the file */
	bool complete;            /* the trailer was found: the run that wrote it ended */
	bool cut;                 /* a record that does not verify ended the list (a run cut short) */
};

/*
 * Put the devices back: each path is matched to a device record (devid, dev
 * uuid and fsid of any valid superblock copy it holds now, or, when none is
 * valid, its primary superblock bytes equal to the ones saved); then every
 * saved range is written back and the devices flushed. Nothing is written
 * unless every record has its device and every device its record (-ENODEV,
 * -EINVAL, said through `log`); a file that is not an undo file: -EUCLEAN.
 * `dry_run` checks and counts, writes nothing.
 */
int ub_undo_apply(const char *file, const char *const *devpaths, int ndevs, bool dry_run, const struct ub_log *log,
		  struct ub_undo_stats *st);

UB_API_END

#endif
