/* SPDX-License-Identifier: MIT */
/* libnbd through dlopen: see nbd_lib.h for why. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include "nbd_lib.h"

struct nbd_lib ub_nbd;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static const char *load_error;

static void *sym(void *h, const char *name)
{
	void *p = dlsym(h, name);

	if (!p && !load_error)
		load_error = dlerror();
	return p;
}

static void load(void)
{
	struct nbd_lib l;
	void *h = dlopen("libnbd.so.0", RTLD_NOW | RTLD_LOCAL);

	if (!h) {
		load_error = dlerror();
		return;
	}
	l.create = sym(h, "nbd_create");
	l.close = sym(h, "nbd_close");
	l.shutdown = sym(h, "nbd_shutdown");
	l.get_errno = sym(h, "nbd_get_errno");
	l.set_uri_allow_local_file = sym(h, "nbd_set_uri_allow_local_file");
	l.aio_connect_uri = sym(h, "nbd_aio_connect_uri");
	l.aio_is_connecting = sym(h, "nbd_aio_is_connecting");
	l.aio_is_ready = sym(h, "nbd_aio_is_ready");
	l.aio_is_dead = sym(h, "nbd_aio_is_dead");
	l.aio_is_closed = sym(h, "nbd_aio_is_closed");
	l.aio_pread = sym(h, "nbd_aio_pread");
	l.aio_pwrite = sym(h, "nbd_aio_pwrite");
	l.aio_flush = sym(h, "nbd_aio_flush");
	l.aio_command_completed = sym(h, "nbd_aio_command_completed");
	l.poll = sym(h, "nbd_poll");
	l.get_size = sym(h, "nbd_get_size");
	l.get_block_size = sym(h, "nbd_get_block_size");
	l.is_read_only = sym(h, "nbd_is_read_only");
	l.can_flush = sym(h, "nbd_can_flush");
	if (load_error) {
		/* the library stays loaded: dlclose of a half-used library buys nothing */
		return;
	}
	ub_nbd = l;
}

int ub_nbd_lib_load(const char **why)
{
	pthread_once(&once, load);
	if (load_error) {
		if (why)
			*why = load_error;
		return -ENOSYS;
	}
	return 0;
}
