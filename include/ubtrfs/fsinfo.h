/* SPDX-License-Identifier: MIT */
/* Accessors tools use instead of reading struct ub_fs's fields. */
#ifndef UBTRFS_FSINFO_H
#define UBTRFS_FSINFO_H

#include "ubtrfs/fs.h"

/* The volume under an open filesystem (for ubtrfs/devinfo.h); valid until ub_fs_close. */
struct ub_volume *ub_fs_volume(const struct ub_fs *fs);

#endif
