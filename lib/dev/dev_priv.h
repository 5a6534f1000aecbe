/* SPDX-License-Identifier: MIT */
/*
 * A device's structure, private to the library: include/ubtrfs/dev.h
 * declares it opaque (a backend reaches its state with ub_dev_priv, a user
 * reads ub_dev_path / ub_dev_size). Library code that reads the fields
 * includes this.
 */
#ifndef UBTRFS_DEV_PRIV_H
#define UBTRFS_DEV_PRIV_H

#include <stdbool.h>
#include <stdint.h>
#include "ubtrfs/dev.h"

struct ub_dev {
	const struct ub_dev_ops *ops;
	void *priv;     /* the backend's state */
	char *path;     /* path or name, for messages */
	uint64_t size;  /* bytes */
	bool writable;
};

/* the file backend (an image file or a block device): safe and worth writing beside other devices */
bool ub_dev_is_file(const struct ub_dev *dev);

#endif
