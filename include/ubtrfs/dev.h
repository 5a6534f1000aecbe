/* SPDX-License-Identifier: MIT */
/*
 * One device: an interface with backends: a file or block device, a memory
 * buffer (tests, fuzzers), and two that wrap another device through `priv`:
 * a recorder of writes and flushes (crash points) and a faulty device failing
 * the Nth I/O.
 *
 * Library API: a user opens, reads and closes devices and reads one through
 * ub_dev_path / ub_dev_size; a backend implements struct ub_dev_ops and
 * reaches its state with ub_dev_priv.
 */
#ifndef UBTRFS_DEV_H
#define UBTRFS_DEV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>
#include "ubtrfs/api.h"

UB_API_BEGIN

/* A device: the library's (lib/dev/dev_priv.h); a user holds a pointer. */
struct ub_dev;

/*
 * What a backend implements. The ub_dev_* wrappers check bounds, the
 * read-only flag and zero lengths before calling, so a backend only ever sees
 * an in-range request of at least one byte. Each returns 0 or -errno and
 * transfers all of `len` or fails.
 */
struct ub_dev_ops {
	const char *kind; /* "file", "mem", ...: for messages */
	int (*read)(struct ub_dev *dev, void *buf, size_t len, uint64_t off);
	int (*write)(struct ub_dev *dev, const void *buf, size_t len, uint64_t off);
	/* make every completed write durable (a barrier for recorders) */
	int (*flush)(struct ub_dev *dev);
	/* release `priv` (not the ub_dev itself); may be NULL */
	void (*release)(struct ub_dev *dev);
	/* ---- gathered writes ---- */
	/* optional: the iovcnt buffers back to back from `off`; without it ub_dev_writev writes them one by one */
	int (*writev)(struct ub_dev *dev, const struct iovec *iov, int iovcnt, uint64_t off);
	/* ---- gathered reads ---- */
	/* optional: fill the iovcnt buffers back to back from `off`; without it ub_dev_readv reads them one by one */
	int (*readv)(struct ub_dev *dev, const struct iovec *iov, int iovcnt, uint64_t off);
	/* optional hint: [off, off+len) will be read soon (start reading it in the background); never fails */
	void (*willneed)(struct ub_dev *dev, uint64_t off, uint64_t len);
};

/*
 * A file or block device; opens read-only unless `writable`. Writable opens
 * are exclusive: a block device is opened O_EXCL (-EBUSY while it is mounted
 * or another program holds it exclusively), an image file takes a
 * non-blocking flock(LOCK_EX) (-EBUSY while another writable ub_dev_open, in
 * this process or another, has it; the kernel's loop driver and programs that
 * do not flock are not kept out). Read-only opens take no lock.
 */
int ub_dev_open(const char *path, bool writable, struct ub_dev **out);
/*
 * A device over `size` bytes of memory at `buf` (not copied, not freed; it must
 * outlive the device). Writes go into `buf` when `writable`.
 */
int ub_dev_open_mem(const char *name, void *buf, uint64_t size, bool writable, struct ub_dev **out);
/*
 * A device with any backend: `priv` is handed to `ops` and released through
 * ops->release on close (also when this call fails).
 */
int ub_dev_create(const char *name, const struct ub_dev_ops *ops, void *priv, uint64_t size, bool writable,
		  struct ub_dev **out);
void ub_dev_close(struct ub_dev *dev);

/* Reads exactly `len` bytes at `off`; -EIO on a short read or past the end. */
int ub_dev_read(struct ub_dev *dev, void *buf, size_t len, uint64_t off);
/* Writes exactly `len` bytes at `off`; -EROFS when read-only, -ENOSPC past the end, -EIO on a short write. */
int ub_dev_write(struct ub_dev *dev, const void *buf, size_t len, uint64_t off);
int ub_dev_flush(struct ub_dev *dev);
/* For a caller that does not implement a backend: the name given at open, the size in bytes, the backend's state. */
const char *ub_dev_path(const struct ub_dev *dev);
uint64_t ub_dev_size(const struct ub_dev *dev);
void *ub_dev_priv(const struct ub_dev *dev);

/* ---- recorder (lib/dev/recorder.c): writes and flushes of several devices, in one log ---- */

/*
 * A crash test records a run, then builds the images a crash at any point
 * could have left. One log serves every device of a volume, so its entries are
 * in the order the devices saw them and a cut point is one index for all.
 *
 * Entry i is a write (device, offset, bytes) or a flush (device). A crash
 * after the first k entries leaves every write of device d that precedes a
 * flush of d (among the first k) on disk; the later writes of d (its
 * "pending" writes) may each have landed or not, in any order. Writes are
 * synchronous here, so every write before a flush completed before it.
 *
 * The log holds a copy of every byte written: keep recorded runs small.
 * Thread-safe; reference counted (each recorder device holds a reference).
 */
struct ub_rec_log;

enum ub_rec_kind { UB_REC_WRITE, UB_REC_FLUSH };

struct ub_rec_entry {
	enum ub_rec_kind kind;
	int dev;               /* the recorder's `index` */
	uint64_t off, len;     /* writes only */
	const uint8_t *data;   /* writes only: `len` bytes, valid while the log lives and is not cleared */
};

int ub_rec_log_new(struct ub_rec_log **out);
/* Drop the caller's reference (the log lives on while recorder devices use it). */
void ub_rec_log_put(struct ub_rec_log *log);
/* Forget every entry, e.g. after a setup phase whose result becomes the base images. */
void ub_rec_log_clear(struct ub_rec_log *log);
uint64_t ub_rec_log_count(struct ub_rec_log *log);
/* Entry `i` (< count); -ERANGE past the end. */
int ub_rec_log_entry(struct ub_rec_log *log, uint64_t i, struct ub_rec_entry *e);
/*
 * The pending writes of a crash after the first k entries: indices of writes
 * with no later flush of their device before k, in log order, in a malloc'ed
 * array (*idx, *n; *idx NULL when n is 0).
 */
int ub_rec_log_pending(struct ub_rec_log *log, uint64_t k, uint64_t **idx, size_t *n);
/*
 * Materialise "every entry before k applied in order" onto `targets`:
 * targets[d] is a writable device holding device d's contents from when
 * recording began (or since the last clear); NULL skips device d. Devices
 * numbered >= ntargets are skipped too.
 */
int ub_rec_log_apply(struct ub_rec_log *log, uint64_t k, struct ub_dev *const *targets, int ntargets);
/*
 * The same crash, but of the pending writes only those listed in `landed`
 * (indices from ub_rec_log_pending, each at most once) reach the disk, in the
 * order listed: a subset drops writes, a permutation reorders them. The
 * durable writes go first, in log order. -EINVAL for an index that is not
 * pending at k.
 */
int ub_rec_log_apply_subset(struct ub_rec_log *log, uint64_t k, const uint64_t *landed, size_t nlanded,
			    struct ub_dev *const *targets, int ntargets);
/*
 * A variant picked by `seed` (the same seed, the same variant): each pending
 * write kept with probability 1/2, the kept ones shuffled. Seed 0: none kept.
 */
int ub_rec_log_apply_variant(struct ub_rec_log *log, uint64_t k, uint64_t seed, struct ub_dev *const *targets,
			     int ntargets);
/*
 * A device passing every read, write and flush to `inner` (taken over: closed
 * with it, and on failure) and logging writes and flushes as device number
 * `index` (>= 0; the caller's numbering, e.g. devid - 1). A write that the
 * inner device fails is not logged.
 */
int ub_dev_open_recorder(struct ub_dev *inner, struct ub_rec_log *log, int index, struct ub_dev **out);

/* ---- faulty device (lib/dev/faulty.c): an I/O error at the Nth operation ---- */

/*
 * A plan counts the I/O of every faulty device sharing it and fails one of
 * them (or all from one on) with -EIO, for "fail I/O number N, for every N"
 * tests. A failed write or flush does nothing (the inner device is not
 * called). Thread-safe; reference counted (each faulty device holds one).
 */
struct ub_fault_plan;

#define UB_FAULT_READ 1u
#define UB_FAULT_WRITE 2u
#define UB_FAULT_FLUSH 4u
#define UB_FAULT_ANY (UB_FAULT_READ | UB_FAULT_WRITE | UB_FAULT_FLUSH)

int ub_fault_plan_new(struct ub_fault_plan **out);
void ub_fault_plan_put(struct ub_fault_plan *plan);
/*
 * Fail the `nth` (1-based) operation of the kinds in `mask`, counted across
 * every device of the plan from this call on; `from_then_on`: that one and
 * every later one of those kinds fail too. nth 0: disarm (count only).
 * Resets the counters.
 */
void ub_fault_plan_arm(struct ub_fault_plan *plan, unsigned mask, uint64_t nth, bool from_then_on);
/* Operations of the kinds in `mask` seen since the last arm (or creation), failed ones included. */
uint64_t ub_fault_plan_count(struct ub_fault_plan *plan, unsigned mask);
/* Errors injected since the last arm. */
uint64_t ub_fault_plan_injected(struct ub_fault_plan *plan);
/* A device over `inner` (taken over: closed with it, and on failure) failing I/O as `plan` says. */
int ub_dev_open_faulty(struct ub_dev *inner, struct ub_fault_plan *plan, struct ub_dev **out);

/* ---- gathered writes ---- */

/*
 * The iovcnt buffers written back to back from `off`, as one write where the
 * backend can (one syscall for a file); same checks and errors as ub_dev_write
 * over their total length.
 */
int ub_dev_writev(struct ub_dev *dev, const struct iovec *iov, int iovcnt, uint64_t off);

/* ---- gathered reads ---- */

/* Fills the iovcnt buffers back to back from `off`, all or -EIO/-errno; -EIO past the end. */
int ub_dev_readv(struct ub_dev *dev, const struct iovec *iov, int iovcnt, uint64_t off);
/* Hints that [off, off+len) is read next, so a file backend reads it ahead; out of range or unsupported: nothing. */
void ub_dev_willneed(struct ub_dev *dev, uint64_t off, uint64_t len);

/* ---- network devices (lib/dev/nbd.c): NBD exports through libnbd ---- */
/*
 * Does `path` name an NBD export: nbd://host[:port][/export], nbds://...
 * (TLS), nbd+unix:///export?socket=PATH, nbd+vsock://...? ub_dev_open opens
 * those with ub_dev_open_nbd, so every command takes them beside local paths.
 */
bool ub_dev_is_uri(const char *path);
/*
 * Connect to an NBD export (the URI forms of ub_dev_is_uri). A server that
 * does not answer within the I/O timeout fails the open with -ETIMEDOUT; a
 * request it does not answer in time fails with -ETIMEDOUT and every later
 * one on that device with -EIO at once (the volume layer then reads from
 * mirrors and parity, as for a missing disk).
 */
int ub_dev_open_nbd(const char *uri, bool writable, struct ub_dev **out);
/* The I/O timeout of network devices, for every device opened after (0: the default), in milliseconds. */
#define UB_DEV_IO_TIMEOUT_DEFAULT_MS 5000U
void ub_dev_set_io_timeout(unsigned ms);
unsigned ub_dev_io_timeout(void);

UB_API_END

#endif
