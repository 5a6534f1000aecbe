/* SPDX-License-Identifier: MIT */
#include "ubtrfs/version.h"

/* The string is built from the header's numbers, so the library and its headers cannot disagree. */
const char *ub_version(void)
{
	return UBTRFS_VERSION;
}
