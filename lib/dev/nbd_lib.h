/* SPDX-License-Identifier: MIT */
/*
 * libnbd, loaded with dlopen when the first NBD device is opened. Linked
 * outright it brings about twenty libraries (GnuTLS, libxml2, ICU...) into
 * every command's start, NBD or not: half of the time of a short `ubtrfs ls`.
 */
#ifndef UBTRFS_DEV_NBD_LIB_H
#define UBTRFS_DEV_NBD_LIB_H

#include <libnbd.h>

struct nbd_lib {
	__typeof__(nbd_create) *create;
	__typeof__(nbd_close) *close;
	__typeof__(nbd_shutdown) *shutdown;
	__typeof__(nbd_get_errno) *get_errno;
	__typeof__(nbd_set_uri_allow_local_file) *set_uri_allow_local_file;
	__typeof__(nbd_aio_connect_uri) *aio_connect_uri;
	__typeof__(nbd_aio_is_connecting) *aio_is_connecting;
	__typeof__(nbd_aio_is_ready) *aio_is_ready;
	__typeof__(nbd_aio_is_dead) *aio_is_dead;
	__typeof__(nbd_aio_is_closed) *aio_is_closed;
	__typeof__(nbd_aio_pread) *aio_pread;
	__typeof__(nbd_aio_pwrite) *aio_pwrite;
	__typeof__(nbd_aio_flush) *aio_flush;
	__typeof__(nbd_aio_command_completed) *aio_command_completed;
	__typeof__(nbd_poll) *poll;
	__typeof__(nbd_get_size) *get_size;
	__typeof__(nbd_get_block_size) *get_block_size;
	__typeof__(nbd_is_read_only) *is_read_only;
	__typeof__(nbd_can_flush) *can_flush;
};

/* The loaded library (valid after ub_nbd_lib_load returned 0). */
extern struct nbd_lib ub_nbd;

/* Load libnbd once: 0, or -ENOSYS with `*why` (dlerror's words) when it cannot be. Thread-safe. */
int ub_nbd_lib_load(const char **why);

#endif
