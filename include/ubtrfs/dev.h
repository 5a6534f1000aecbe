/* SPDX-License-Identifier: MIT */
/* One device or image file. */
#ifndef UBTRFS_DEV_H
#define UBTRFS_DEV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ub_dev {
	int fd;
	char *path;
	uint64_t size;  /* bytes */
	bool writable;
};

/* Opens read-only unless `writable`. */
int ub_dev_open(const char *path, bool writable, struct ub_dev **out);
void ub_dev_close(struct ub_dev *dev);
/* Reads exactly `len` bytes at `off`; -EIO on a short read or past the end. */
int ub_dev_read(struct ub_dev *dev, void *buf, size_t len, uint64_t off);
int ub_dev_write(struct ub_dev *dev, const void *buf, size_t len, uint64_t off);
int ub_dev_flush(struct ub_dev *dev);

#endif
