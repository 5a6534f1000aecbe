/* SPDX-License-Identifier: MIT */
/*
 * The version of libubtrfs and of the ubtrfs command: the one place it is
 * written. The Makefile reads it from here (the shared library's file name
 * and soname, ubtrfs.pc, the man pages), the Debian changelog must agree with
 * it (tests/integration/test_install.py checks), and `ubtrfs --version` prints
 * ub_version().
 *
 * MAJOR changes when the ABI breaks (the soname is libubtrfs.so.MAJOR and the
 * Debian package libubtrfsMAJOR); MINOR when functions are added; PATCH for
 * fixes that change no interface.
 */
#ifndef UBTRFS_VERSION_H
#define UBTRFS_VERSION_H

#include "ubtrfs/api.h"

#define UBTRFS_VERSION_MAJOR 0
#define UBTRFS_VERSION_MINOR 1
#define UBTRFS_VERSION_PATCH 0

#define UB_STRINGIFY_(x) #x
#define UB_STRINGIFY(x) UB_STRINGIFY_(x)
/* "MAJOR.MINOR.PATCH" of the headers a program was compiled with */
#define UBTRFS_VERSION                                                                          \
	UB_STRINGIFY(UBTRFS_VERSION_MAJOR) "." UB_STRINGIFY(UBTRFS_VERSION_MINOR) "." UB_STRINGIFY( \
		UBTRFS_VERSION_PATCH)
/* one number that orders versions, for #if: 10000 * MAJOR + 100 * MINOR + PATCH */
#define UBTRFS_VERSION_NUMBER (UBTRFS_VERSION_MAJOR * 10000 + UBTRFS_VERSION_MINOR * 100 + UBTRFS_VERSION_PATCH)

UB_API_BEGIN

/*
 * The version of the library a program runs with, "MAJOR.MINOR.PATCH": it may
 * be newer than UBTRFS_VERSION, the headers' (same MAJOR: same soname).
 */
const char *ub_version(void);

UB_API_END

#endif
