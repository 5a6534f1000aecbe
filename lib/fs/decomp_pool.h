/* SPDX-License-Identifier: MIT */
/*
 * Worker threads that decompress extents for the file-read path, so that the
 * reader goes on reading (and checksumming) the next extents while earlier
 * ones decode, on every core. One pool per open filesystem, started on the
 * first compressed extent and stopped at close; any number of reader threads
 * may use it at once.
 */
#ifndef UBTRFS_FS_DECOMP_POOL_H
#define UBTRFS_FS_DECOMP_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ub_fs;
struct ub_dc_pool;

/* One extent to decode: the arguments of ub_decompress and its results. */
struct ub_dc_job {
	int type;
	const uint8_t *in;
	size_t inlen;
	uint8_t *out;
	size_t outlen;
	uint32_t sectorsize;
	/*
	 * Optional, before the decoding: `inlen` bytes at `read_logical` read
	 * into `read_buf` (the same buffer as `in`) and checked against
	 * `read_csums`/`read_have` by ub_data_read_checked on the worker's thread
	 * (no tree is read there); when anything is short of good, `ret` is
	 * -EAGAIN, nothing is decoded and the caller reads the extent again itself.
	 */
	struct ub_fs *read_fs;
	uint64_t read_logical;
	uint8_t *read_buf;
	bool read_verify;
	const uint8_t *read_csums, *read_have;
	/* results, valid once ub_dc_wait returned */
	int ret;
	size_t produced;
	char why[160];
	/* the pool's */
	int state;
	struct ub_dc_job *next;
};

/* The fs's pool, started on first use; NULL when no thread could be started (jobs then run in the caller). */
struct ub_dc_pool *ub_dc_pool_get(struct ub_fs *fs);
/* Stops the workers (no job may be pending) and frees the pool; NULL is fine. */
void ub_dc_pool_destroy(struct ub_dc_pool *pool);
/* Queue `job`; with a NULL pool it runs at once. The buffers must stay until ub_dc_wait. */
void ub_dc_submit(struct ub_dc_pool *pool, struct ub_dc_job *job);
/* Until `job` is done; a job no worker has taken yet is run by the caller itself. */
void ub_dc_wait(struct ub_dc_pool *pool, struct ub_dc_job *job);

/*
 * Buffers of UB_DC_BUF_SIZE bytes (a compressed extent's most), kept by the pool
 * between reads (at most UB_DC_IDLE_BUFS of them) so that a read of many
 * chunks does not map and fault in fresh memory for every one; with a NULL
 * pool plain malloc and free. get returns NULL when out of memory.
 */
#define UB_DC_BUF_SIZE (128U * 1024U)
#define UB_DC_IDLE_BUFS 16
uint8_t *ub_dc_buf_get(struct ub_dc_pool *pool);
void ub_dc_buf_put(struct ub_dc_pool *pool, uint8_t *buf);

/*
 * ---- read-ahead across read calls ----
 * A read call that ends inside a run of compressed extents reads and queues
 * the next few (already checked against their checksums) before it returns,
 * so the workers go on decoding while the caller handles what it got; the
 * next call takes them instead of reading them again. At most UB_DC_AHEAD
 * are parked per pool (two buffers each: 2 MiB); more push out the oldest.
 * An entry is found by everything its bytes depend on, the committed extent
 * tree included: a commit may free and reuse the disk extent.
 */
#define UB_DC_AHEAD 8

struct ub_dc_ahead {
	struct ub_dc_job job; /* decodes `in` into `out` */
	uint8_t *in, *out;
	/* the key */
	uint64_t dbytenr, dlen, ram, era_bytenr, era_gen;
	int type;
	bool verify;
};

/* Park `a` (allocated with malloc, its job submitted); the pool owns it from here. */
void ub_dc_ahead_put(struct ub_dc_pool *pool, struct ub_dc_ahead *a);
/* The parked entry whose key is `key`'s, removed from the pool (the caller frees it), or NULL. */
struct ub_dc_ahead *ub_dc_ahead_take(struct ub_dc_pool *pool, const struct ub_dc_ahead *key);
/* Whether an entry with `key`'s key is parked. */
bool ub_dc_ahead_has(struct ub_dc_pool *pool, const struct ub_dc_ahead *key);
/* Wait for an entry's job and give back its buffers and itself. */
void ub_dc_ahead_free(struct ub_dc_pool *pool, struct ub_dc_ahead *a);

/*
 * The read-ahead's read of a data extent (data.c): the first copy, each
 * sector checked as ub_data_read checks it, nothing logged; 0 only when all
 * of it is good, else the extent is left to ub_data_read and its messages.
 */
int ub_data_read_ahead(struct ub_fs *fs, uint64_t logical, uint64_t len, uint8_t *buf, bool verify);
/*
 * Its two halves: the checksums of [logical, +len) (a tree search, on the
 * reading call's thread: 0 or the search's error), and the read of the
 * first copy checked against them, which touches no tree (so any thread may
 * run it during the read call): 0 only when every sector is good and, with
 * `verify`, has a checksum.
 */
int ub_data_csums(struct ub_fs *fs, uint64_t logical, uint64_t len, uint8_t *csums, uint8_t *have);
int ub_data_read_checked(struct ub_fs *fs, uint64_t logical, uint64_t len, uint8_t *buf, bool verify,
			 const uint8_t *csums, const uint8_t *have);

#endif
