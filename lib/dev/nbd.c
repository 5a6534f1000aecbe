/* SPDX-License-Identifier: MIT */
/*
 * A device on another machine: an NBD export, through libnbd. Every request
 * goes out asynchronously (a large read as several requests in flight) and is
 * waited for at most the I/O timeout: a server that is down or stops
 * answering becomes a failed device, named by its URI, and the volume layer
 * reads on from mirrors and parity as for a missing disk. Once a device has
 * timed out, later requests fail at once instead of waiting again.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "dev_priv.h"
#include "nbd_lib.h"

#define NBD_CHUNK (1U << 20) /* bytes per request of a large read or write */
#define NBD_MAX_INFLIGHT 16

static _Atomic unsigned io_timeout_ms = UB_DEV_IO_TIMEOUT_DEFAULT_MS;

#define NBD_RA_SLOTS 4           /* ranges read ahead per device */
#define NBD_RA_MAX (8U << 20)     /* the largest range read ahead */
#define NBD_RA_REQS ((int)(NBD_RA_MAX / NBD_CHUNK))

/*
 * A range asked for by ub_dev_willneed, read into a buffer of its own while
 * the caller reads other devices: so the servers of a striped chunk work at
 * the same time, and the next part of a stream is on its way before it is
 * asked for.
 */
struct nbd_ahead {
	uint8_t *buf;
	size_t cap;
	uint64_t off, len;
	int64_t cookies[NBD_RA_REQS];
	int nc;
	bool used;   /* the slot holds a range */
	bool landed; /* its requests completed (ok: all good) */
	bool ok;
	uint64_t seq; /* age, for eviction */
};

struct nbd_dev {
	struct nbd_handle *h;
	/* one caller at a time drives the handle's state machine (nbd_poll is not for several threads) */
	pthread_mutex_t lock;
	bool failed;
	uint64_t max_request;
	struct nbd_ahead ahead[NBD_RA_SLOTS];
	uint64_t seq;
	/* ---- reconnecting ---- */
	char *uri;
	int64_t size;
	int64_t failed_at;   /* ms, when it failed or last failed to reconnect */
};

/* How long a failed device rests before a request tries to reconnect it. */
#define NBD_RETRY_MS 5000

void ub_dev_set_io_timeout(unsigned ms)
{
	io_timeout_ms = ms ? ms : UB_DEV_IO_TIMEOUT_DEFAULT_MS;
}

unsigned ub_dev_io_timeout(void)
{
	return io_timeout_ms;
}

bool ub_dev_is_uri(const char *path)
{
	static const char *const schemes[] = { "nbd://", "nbds://", "nbd+unix://", "nbds+unix://", "nbd+vsock://",
					       "nbds+vsock://" };

	for (size_t i = 0; i < sizeof(schemes) / sizeof(schemes[0]); i++)
		if (!strncmp(path, schemes[i], strlen(schemes[i])))
			return true;
	return false;
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* libnbd's errno for the last failure on this thread, never 0. */
static int nbd_err(void)
{
	int e = ub_nbd.get_errno();

	return e ? -e : -EIO;
}

/*
 * Drive the handle until every cookie completed, or the timeout: 0, the first
 * command's error, or -ETIMEDOUT (the device is failed from then on).
 */
static int wait_all(struct nbd_dev *n, int64_t *cookies, int nc, int64_t deadline)
{
	int ret = 0, left = nc;

	while (left > 0) {
		int64_t wait = deadline - now_ms();
		int r;

		for (int i = 0; i < nc; i++) {
			if (cookies[i] < 0)
				continue;
			r = ub_nbd.aio_command_completed(n->h, (uint64_t)cookies[i]);
			if (r == 0)
				continue;
			if (r < 0 && !ret)
				ret = nbd_err();
			cookies[i] = -1;
			left--;
		}
		if (!left)
			break;
		if (wait <= 0 || ub_nbd.aio_is_dead(n->h) || ub_nbd.aio_is_closed(n->h)) {
			n->failed = true;
			n->failed_at = now_ms();
			return wait <= 0 ? -ETIMEDOUT : -EIO;
		}
		r = ub_nbd.poll(n->h, (int)(wait > 1000 ? 1000 : wait));
		if (r < 0) {
			n->failed = true;
			n->failed_at = now_ms();
			return nbd_err();
		}
	}
	return ret;
}

static uint64_t request_size(const struct nbd_dev *n)
{
	return n->max_request < NBD_CHUNK ? n->max_request : NBD_CHUNK;
}

/* Wait for a slot's requests (once): ok when every one of them succeeded. */
static void ahead_land(struct nbd_dev *n, struct nbd_ahead *a)
{
	if (a->landed)
		return;
	a->ok = wait_all(n, a->cookies, a->nc, now_ms() + io_timeout_ms) == 0;
	a->landed = true;
}

/* An empty slot; the buffer stays for the next range (fresh pages cost a fault each). */
static void ahead_reset(struct nbd_ahead *a)
{
	uint8_t *buf = a->buf;
	size_t cap = a->cap;

	memset(a, 0, sizeof(*a));
	a->buf = buf;
	a->cap = cap;
}

static void ahead_drop(struct nbd_dev *n, struct nbd_ahead *a)
{
	/* its requests must be collected, or libnbd keeps them */
	if (!n->failed)
		ahead_land(n, a);
	ahead_reset(a);
}

/* A read served from the ranges read ahead: 1 done, 0 not there (or failed there: read it anew). */
static int ahead_read(struct nbd_dev *n, void *buf, size_t len, uint64_t off)
{
	for (int i = 0; i < NBD_RA_SLOTS; i++) {
		struct nbd_ahead *a = &n->ahead[i];

		if (!a->used || off < a->off || off + len > a->off + a->len)
			continue;
		ahead_land(n, a);
		if (!a->ok) {
			ahead_drop(n, a);
			return 0;
		}
		memcpy(buf, a->buf + (off - a->off), len);
		/* a stream moves on: what ends here is not asked for again */
		if (off + len == a->off + a->len)
			ahead_drop(n, a);
		return 1;
	}
	return 0;
}

static int connect_uri(struct nbd_handle *h, const char *uri);

/*
 * A failed device that has rested NBD_RETRY_MS tries its server again (a
 * server that came back, under a long-running mount): on a new connection to
 * an export of the same size it serves requests again. Called locked.
 */
static void maybe_reconnect(struct nbd_dev *n)
{
	struct nbd_handle *h;

	if (!n->failed || now_ms() - n->failed_at < NBD_RETRY_MS)
		return;
	n->failed_at = now_ms();
	h = ub_nbd.create();
	if (!h)
		return;
	ub_nbd.set_uri_allow_local_file(h, true);
	if (connect_uri(h, n->uri) || ub_nbd.get_size(h) != n->size) {
		ub_nbd.close(h);
		return;
	}
	/* what the old connection had on its way is gone with it */
	for (int i = 0; i < NBD_RA_SLOTS; i++)
		ahead_reset(&n->ahead[i]);
	ub_nbd.close(n->h);
	n->h = h;
	n->failed = false;
}

/* Requests for `len` bytes at `off` on the current connection, several in flight. Called locked. */
static int transfer_once(struct nbd_dev *n, void *buf, size_t len, uint64_t off, bool write, bool fua)
{
	int64_t cookies[NBD_MAX_INFLIGHT];
	uint64_t chunk = request_size(n);
	size_t done = 0;
	int ret = 0;

	while (!ret && done < len) {
		int64_t deadline = now_ms() + io_timeout_ms;
		int nc = 0;

		for (; nc < NBD_MAX_INFLIGHT && done < len; nc++) {
			size_t piece = len - done < chunk ? len - done : (size_t)chunk;
			uint8_t *p = (uint8_t *)buf + done;

			cookies[nc] = write ? ub_nbd.aio_pwrite(n->h, p, piece, off + done, NBD_NULL_COMPLETION,
							     fua ? LIBNBD_CMD_FLAG_FUA : 0)
					    : ub_nbd.aio_pread(n->h, p, piece, off + done, NBD_NULL_COMPLETION, 0);
			if (cookies[nc] < 0) {
				ret = nbd_err();
				if (ub_nbd.aio_is_dead(n->h) == 1 || ub_nbd.aio_is_closed(n->h) == 1) {
					n->failed = true;
					n->failed_at = now_ms();
				}
				break;
			}
			done += piece;
		}
		if (nc) {
			int r = wait_all(n, cookies, nc, deadline);

			if (!ret)
				ret = r;
		}
	}
	return ret;
}

/* A read or write of `len` bytes at `off`. */
static int transfer(struct ub_dev *dev, void *buf, size_t len, uint64_t off, bool write, bool fua)
{
	struct nbd_dev *n = dev->priv;
	int ret;

	pthread_mutex_lock(&n->lock);
	maybe_reconnect(n);
	if (n->failed) {
		pthread_mutex_unlock(&n->lock);
		return -EIO;
	}
	if (write) {
		/* what is read ahead may be overwritten now */
		for (int i = 0; i < NBD_RA_SLOTS; i++)
			if (n->ahead[i].used && off < n->ahead[i].off + n->ahead[i].len && n->ahead[i].off < off + len)
				ahead_drop(n, &n->ahead[i]);
	} else if (ahead_read(n, buf, len, off)) {
		pthread_mutex_unlock(&n->lock);
		return n->failed ? -EIO : 0;
	}
	ret = transfer_once(n, buf, len, off, write, fua);
	/*
	 * A connection found closed (the server went away since the last request,
	 * perhaps to come back: a restart) is tried again at once, one time; a
	 * server that does not answer in time rests first.
	 */
	if (ret && ret != -ETIMEDOUT && n->failed) {
		n->failed_at = now_ms() - NBD_RETRY_MS;
		maybe_reconnect(n);
		if (!n->failed)
			ret = transfer_once(n, buf, len, off, write, fua);
	}
	pthread_mutex_unlock(&n->lock);
	return ret;
}

static int nd_read(struct ub_dev *dev, void *buf, size_t len, uint64_t off)
{
	return transfer(dev, buf, len, off, false, false);
}

static int nd_write(struct ub_dev *dev, const void *buf, size_t len, uint64_t off)
{
	return transfer(dev, (void *)(uintptr_t)buf, len, off, true, false);
}

static int nd_flush(struct ub_dev *dev)
{
	struct nbd_dev *n = dev->priv;
	int64_t cookie;
	int ret;

	pthread_mutex_lock(&n->lock);
	if (n->failed) {
		ret = -EIO;
	} else if (ub_nbd.can_flush(n->h) != 1) {
		/* a server that cannot flush writes through: nothing to wait for */
		ret = 0;
	} else {
		cookie = ub_nbd.aio_flush(n->h, NBD_NULL_COMPLETION, 0);
		ret = cookie < 0 ? nbd_err() : wait_all(n, &cookie, 1, now_ms() + io_timeout_ms);
	}
	pthread_mutex_unlock(&n->lock);
	return ret;
}

static void nd_willneed(struct ub_dev *dev, uint64_t off, uint64_t len)
{
	struct nbd_dev *n = dev->priv;
	struct nbd_ahead *a = NULL;
	uint64_t chunk;

	if (len == 0 || len > NBD_RA_MAX)
		return;
	pthread_mutex_lock(&n->lock);
	if (n->failed)
		goto out;
	for (int i = 0; i < NBD_RA_SLOTS; i++) {
		struct nbd_ahead *s = &n->ahead[i];

		if (s->used && off >= s->off && off + len <= s->off + s->len)
			goto out; /* on its way already */
		if (!s->used && !a)
			a = s;
	}
	if (!a) {
		a = &n->ahead[0];
		for (int i = 1; i < NBD_RA_SLOTS; i++)
			if (n->ahead[i].seq < a->seq)
				a = &n->ahead[i];
		ahead_drop(n, a);
	}
	if (a->cap < len) {
		uint8_t *b = realloc(a->buf, len);

		if (!b)
			goto out;
		a->buf = b;
		a->cap = len;
	}
	a->used = true;
	a->off = off;
	a->len = len;
	a->seq = ++n->seq;
	chunk = request_size(n);
	for (uint64_t done = 0; done < len && a->nc < NBD_RA_REQS; a->nc++) {
		uint64_t piece = len - done < chunk ? len - done : chunk;

		a->cookies[a->nc] = ub_nbd.aio_pread(n->h, a->buf + done, piece, off + done, NBD_NULL_COMPLETION, 0);
		if (a->cookies[a->nc] < 0)
			break;
		done += piece;
	}
	/* a range not wholly asked for is not served from: collect what went out and forget it */
	if (a->nc < NBD_RA_REQS && (uint64_t)a->nc * chunk < len)
		ahead_drop(n, a);
out:
	pthread_mutex_unlock(&n->lock);
}

static void nd_release(struct ub_dev *dev)
{
	struct nbd_dev *n = dev->priv;

	if (!n)
		return;
	for (int i = 0; i < NBD_RA_SLOTS; i++) {
		if (n->ahead[i].used)
			ahead_drop(n, &n->ahead[i]);
		free(n->ahead[i].buf);
	}
	if (!n->failed && ub_nbd.aio_is_ready(n->h))
		ub_nbd.shutdown(n->h, 0);
	ub_nbd.close(n->h);
	pthread_mutex_destroy(&n->lock);
	free(n->uri);
	free(n);
}

static const struct ub_dev_ops nbd_ops = {
	.kind = "nbd",
	.read = nd_read,
	.write = nd_write,
	.flush = nd_flush,
	.release = nd_release,
	.willneed = nd_willneed,
};

/* Connect within the timeout: 0, or <0 with the handle closed. */
static int connect_uri(struct nbd_handle *h, const char *uri)
{
	int64_t deadline = now_ms() + io_timeout_ms;

	if (ub_nbd.aio_connect_uri(h, uri) < 0)
		return nbd_err();
	while (ub_nbd.aio_is_connecting(h) == 1) {
		int64_t wait = deadline - now_ms();

		if (wait <= 0)
			return -ETIMEDOUT;
		if (ub_nbd.poll(h, (int)(wait > 1000 ? 1000 : wait)) < 0)
			return nbd_err();
	}
	return ub_nbd.aio_is_ready(h) == 1 ? 0 : nbd_err();
}

int ub_dev_open_nbd(const char *uri, bool writable, struct ub_dev **out)
{
	struct nbd_dev *n;
	int64_t size, max;
	const char *why = NULL;
	int ret;

	if (ub_nbd_lib_load(&why)) {
		/* the device layer has no log of its own; this is the only way the user learns why */
		fprintf(stderr, "ubtrfs: error: %s: NBD devices need libnbd (libnbd.so.0), which cannot be loaded: %s\n",
			uri, why ? why : "unknown reason");
		return -ENOSYS;
	}
	n = calloc(1, sizeof(*n));
	if (!n)
		return -ENOMEM;
	n->h = ub_nbd.create();
	if (!n->h) {
		free(n);
		return -ENOMEM;
	}
	pthread_mutex_init(&n->lock, NULL);
	/* the URI is the user's own: ?tls-psk-file= may name the key file on this machine */
	ub_nbd.set_uri_allow_local_file(n->h, true);
	ret = connect_uri(n->h, uri);
	if (!ret) {
		size = ub_nbd.get_size(n->h);
		if (size < 0)
			ret = nbd_err();
		else if (writable && ub_nbd.is_read_only(n->h) == 1)
			ret = -EROFS;
	}
	if (ret) {
		ub_nbd.close(n->h);
		pthread_mutex_destroy(&n->lock);
		free(n);
		return ret;
	}
	n->size = size;
	n->uri = strdup(uri);
	if (!n->uri) {
		ub_nbd.close(n->h);
		pthread_mutex_destroy(&n->lock);
		free(n);
		return -ENOMEM;
	}
	max = ub_nbd.get_block_size(n->h, LIBNBD_SIZE_MAXIMUM);
	n->max_request = max > 0 ? (uint64_t)max : 32U << 20;
	return ub_dev_create(uri, &nbd_ops, n, (uint64_t)size, writable, out);
}
