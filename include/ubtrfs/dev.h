/* SPDX-License-Identifier: MIT */
/*
 * One device: an interface with backends. Today: a file or block device, and
 * a memory buffer (tests, fuzzers). The write engine stacks more on the same
 * ops (a recorder of writes and flushes, a faulty device failing the Nth I/O),
 * which is why a backend may wrap another device through `priv`.
 */
#ifndef UBTRFS_DEV_H
#define UBTRFS_DEV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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
};

struct ub_dev {
	const struct ub_dev_ops *ops;
	void *priv;     /* the backend's state */
	char *path;     /* path or name, for messages */
	uint64_t size;  /* bytes */
	bool writable;
};

/* A file or block device; opens read-only unless `writable`. */
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

#endif
