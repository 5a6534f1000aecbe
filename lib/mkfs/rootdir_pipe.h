/* SPDX-License-Identifier: MIT */
/*
 * mkfs --rootdir's readers: worker threads that read file ranges, compress
 * and checksum them (ub_fsw_compress_extent) ahead of the single thread that
 * owns the transaction. Pieces are handed out and come back in the order
 * they were queued; the bytes held by started, unreleased pieces stay within
 * a budget (a piece starts when it fits, or when nothing else is held), so
 * the writer, consuming in queue order, always finds its next piece started.
 */
#ifndef UBTRFS_MKFS_ROOTDIR_PIPE_H
#define UBTRFS_MKFS_ROOTDIR_PIPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "ubtrfs/fswrite.h"

struct rd_pipe;

/* One data range of a file as read: [off, off + len) file bytes; extents NULL: raw only (a sub-sector file) */
struct rd_seg {
	uint64_t off, len;
	const uint8_t *raw;
	struct ub_fsw_extent *x;
	size_t nx;
};

struct rd_piece;

/* threads <= 0: none (-EINVAL); budget: bytes of buffers held at once */
int rd_pipe_start(int threads, uint64_t budget, uint32_t sectorsize, int csum_type, int compress, int level,
		  struct rd_pipe **out);
/* workers finish their piece and exit; every piece is freed */
void rd_pipe_stop(struct rd_pipe *p);
/*
 * Queue [off, off + len) of file `name` in directory dfd (dfd stays open
 * until the piece is released). holes: find the data ranges inside with
 * SEEK_DATA / SEEK_HOLE, else the range is read whole.
 */
int rd_pipe_submit(struct rd_pipe *p, int dfd, const char *name, uint64_t off, uint64_t len, bool holes,
		   struct rd_piece **out);
/* wake the workers for what was queued since (a wake-up per piece would cost more than small files' reads) */
void rd_pipe_kick(struct rd_pipe *p);
/* wait for a piece: 0 and its segments (a file that shrank has fewer bytes), or the -errno reading it met */
int rd_pipe_wait(struct rd_pipe *p, struct rd_piece *pc, const struct rd_seg **segs, size_t *nsegs);
/* done with a piece (waits for it if a worker holds it) */
void rd_pipe_release(struct rd_pipe *p, struct rd_piece *pc);
/* room for element n of a growing array *arr (a pointer to the array pointer) of *cap elements: 0 or -ENOMEM */
int rd_grow(void *arr, size_t *cap, size_t n, size_t elem);
/* the data ranges of fd within [pos, size) as ub_mkfs_rootdir copies them (whole sectors, clipped at size):
 * cb for each; 0 or -errno */
int rd_data_ranges(int fd, uint64_t pos, uint64_t size, int (*cb)(void *arg, uint64_t start, uint64_t end),
		   void *arg);

#endif
