/* SPDX-License-Identifier: MIT */
/*
 * The undo file's writer and the undo device: a wrapper that saves the old
 * bytes of each piece a write touches, durably, before that first write
 * reaches the inner device (lib/undo/undo_file.h has the layout).
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>

#include <isa-l.h>

#include "ubtrfs/undo.h"
#include "ubtrfs/volume.h"
#include "dev/dev_priv.h"
#include "undo/undo_file.h"

uint32_t ub_undo_crc(const void *p, size_t len)
{
	/* ISA-L's prototype lacks const; it does not write the buffer */
	return ~crc32_iscsi((unsigned char *)(uintptr_t)p, (int)len, ~0U);
}

uint32_t ub_undo_rec_crc(const struct undo_disk_rec *head, const void *payload, uint32_t len)
{
	struct undo_disk_rec h = *head;
	uint32_t crc;

	UB_SET(undo_disk_rec, crc, &h, 0);
	crc = crc32_iscsi((unsigned char *)&h, (int)sizeof(h), ~0U);
	if (len)
		crc = crc32_iscsi((unsigned char *)(uintptr_t)payload, (int)len, crc);
	return ~crc;
}

/* The pieces of one device saved so far: sorted, disjoint, not adjacent [start, end). */
struct span {
	uint64_t start, end;
};

struct undo_devrec {
	struct span *v;
	size_t n, cap;
	struct ub_dev *inner; /* for reading old bytes; owned by the undo device */
	uint64_t size;
};

struct ub_undo {
	pthread_mutex_t lock;
	int fd;
	int refs;             /* the creator's and one per undo device */
	bool closed;          /* finish/free called: no more records */
	bool fsid_set;
	int error;            /* sticky: a failed append leaves the file's tail unknown */
	uint64_t end;         /* where the next record goes */
	struct undo_disk_header hdr;
	struct undo_devrec *devs;
	int ndevs;
	uint64_t ranges, bytes;
};

/* ---- appending ---- */

static int pwrite_all(int fd, const void *buf, size_t len, uint64_t off)
{
	const uint8_t *p = buf;

	while (len) {
		ssize_t n = pwrite(fd, p, len, (off_t)off);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

/* One record at the end of the file (not yet durable: the caller syncs). */
static int append_rec(struct ub_undo *u, uint32_t type, uint32_t dev, uint64_t offset, const void *payload,
		      uint32_t len)
{
	struct undo_disk_rec h;
	int ret;

	memset(&h, 0, sizeof(h));
	UB_SET(undo_disk_rec, type, &h, type);
	UB_SET(undo_disk_rec, dev, &h, dev);
	UB_SET(undo_disk_rec, offset, &h, offset);
	UB_SET(undo_disk_rec, len, &h, len);
	UB_SET(undo_disk_rec, crc, &h, ub_undo_rec_crc(&h, payload, len));
	ret = pwrite_all(u->fd, &h, sizeof(h), u->end);
	if (!ret && len)
		ret = pwrite_all(u->fd, payload, len, u->end + sizeof(h));
	if (!ret)
		u->end += sizeof(h) + len;
	return ret;
}

static int sync_file(struct ub_undo *u)
{
	return fdatasync(u->fd) ? -errno : 0;
}

static void put_header(struct ub_undo *u)
{
	UB_SET(undo_disk_header, crc, &u->hdr, ub_undo_crc(&u->hdr, offsetof(struct undo_disk_header, crc)));
}

/* fsync the folder holding `path`, so that the new file's name is durable too. */
static int sync_parent(const char *path)
{
	char *copy = strdup(path);
	int fd, ret = 0;

	if (!copy)
		return -ENOMEM;
	fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	free(copy);
	if (fd < 0)
		return -errno;
	if (fsync(fd) && errno != EINVAL)
		ret = -errno;
	close(fd);
	return ret;
}

int ub_undo_create(const char *path, struct ub_undo **out)
{
	struct ub_undo *u;
	int ret;

	if (!path || !*path || !out)
		return -EINVAL;
	u = calloc(1, sizeof(*u));
	if (!u)
		return -ENOMEM;
	pthread_mutex_init(&u->lock, NULL);
	u->refs = 1;
	u->fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (u->fd < 0) {
		ret = -errno;
		pthread_mutex_destroy(&u->lock);
		free(u);
		return ret;
	}
	memcpy(u->hdr.magic, UNDO_MAGIC, sizeof(u->hdr.magic));
	UB_SET(undo_disk_header, version, &u->hdr, UNDO_VERSION);
	UB_SET(undo_disk_header, size, &u->hdr, sizeof(u->hdr));
	UB_SET(undo_disk_header, created, &u->hdr, (uint64_t)time(NULL));
	put_header(u);
	ret = pwrite_all(u->fd, &u->hdr, sizeof(u->hdr), 0);
	if (!ret)
		ret = fsync(u->fd) ? -errno : 0;
	if (!ret)
		ret = sync_parent(path);
	if (ret) {
		close(u->fd);
		unlink(path);
		pthread_mutex_destroy(&u->lock);
		free(u);
		return ret;
	}
	u->end = sizeof(u->hdr);
	*out = u;
	return 0;
}

static void undo_put(struct ub_undo *u)
{
	bool last;

	pthread_mutex_lock(&u->lock);
	last = --u->refs == 0;
	pthread_mutex_unlock(&u->lock);
	if (!last)
		return;
	for (int i = 0; i < u->ndevs; i++)
		free(u->devs[i].v);
	free(u->devs);
	pthread_mutex_destroy(&u->lock);
	free(u);
}

/* Close the file (under the lock); the trailer first when `trailer`. */
static int undo_close(struct ub_undo *u, bool trailer)
{
	int ret = 0;

	pthread_mutex_lock(&u->lock);
	if (trailer) {
		struct undo_disk_end e;

		memset(&e, 0, sizeof(e));
		UB_SET(undo_disk_end, ranges, &e, u->ranges);
		UB_SET(undo_disk_end, bytes, &e, u->bytes);
		UB_SET(undo_disk_end, devices, &e, (uint32_t)u->ndevs);
		ret = u->error;
		if (!ret)
			ret = append_rec(u, UNDO_REC_END, 0, 0, &e, sizeof(e));
		if (!ret)
			ret = fsync(u->fd) ? -errno : 0;
	}
	if (close(u->fd) && !ret && trailer)
		ret = -errno;
	u->fd = -1;
	u->closed = true;
	pthread_mutex_unlock(&u->lock);
	return ret;
}

int ub_undo_finish(struct ub_undo *u)
{
	int ret;

	if (!u)
		return -EINVAL;
	ret = undo_close(u, true);
	undo_put(u);
	return ret;
}

void ub_undo_free(struct ub_undo *u)
{
	if (!u)
		return;
	undo_close(u, false);
	undo_put(u);
}

void ub_undo_saved(struct ub_undo *u, uint64_t *ranges, uint64_t *bytes)
{
	pthread_mutex_lock(&u->lock);
	if (ranges)
		*ranges = u->ranges;
	if (bytes)
		*bytes = u->bytes;
	pthread_mutex_unlock(&u->lock);
}

/* ---- the saved pieces of a device ---- */

/* Index of the first span ending after `off`. */
static size_t span_find(const struct undo_devrec *d, uint64_t off)
{
	size_t lo = 0, hi = d->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (d->v[mid].end <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* [a, b) saved: merged with every span it overlaps or touches. */
static int span_add(struct undo_devrec *d, uint64_t a, uint64_t b)
{
	size_t lo = 0, hi = d->n, i, j;

	/* the first span ending at or after a: touching spans merge too */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (d->v[mid].end < a)
			lo = mid + 1;
		else
			hi = mid;
	}
	i = lo;
	j = i;
	while (j < d->n && d->v[j].start <= b) {
		if (d->v[j].start < a)
			a = d->v[j].start;
		if (d->v[j].end > b)
			b = d->v[j].end;
		j++;
	}
	if (j == i) {
		if (d->n == d->cap) {
			size_t cap = d->cap ? d->cap * 2 : 16;
			struct span *v = realloc(d->v, cap * sizeof(*v));

			if (!v)
				return -ENOMEM;
			d->v = v;
			d->cap = cap;
		}
		memmove(d->v + i + 1, d->v + i, (d->n - i) * sizeof(*d->v));
		d->n++;
	} else if (j > i + 1) {
		memmove(d->v + i + 1, d->v + j, (d->n - j) * sizeof(*d->v));
		d->n -= j - i - 1;
	}
	d->v[i].start = a;
	d->v[i].end = b;
	return 0;
}

/* The old bytes of [a, b) of device `idx` appended as RANGE records. */
static int save_gap(struct ub_undo *u, int idx, uint64_t a, uint64_t b, uint8_t **buf)
{
	struct undo_devrec *d = &u->devs[idx];

	if (!*buf) {
		*buf = malloc(UNDO_RANGE_MAX);
		if (!*buf)
			return -ENOMEM;
	}
	while (a < b) {
		uint32_t n = b - a > UNDO_RANGE_MAX ? UNDO_RANGE_MAX : (uint32_t)(b - a);
		int ret = ub_dev_read(d->inner, *buf, n, a);

		if (!ret)
			ret = append_rec(u, UNDO_REC_RANGE, (uint32_t)idx, a, *buf, n);
		if (ret)
			return ret;
		u->ranges++;
		u->bytes += n;
		a += n;
	}
	return 0;
}

/*
 * Before a write of [off, off+len) of device `idx`: every piece it touches
 * that is not saved yet is saved and made durable. Under the lock, so a
 * second writer of the same piece waits until the old bytes are safe.
 */
static int undo_save(struct ub_undo *u, int idx, uint64_t off, uint64_t len)
{
	struct undo_devrec *d;
	uint64_t a, b, pos;
	uint8_t *buf = NULL;
	bool appended = false;
	int ret = 0;

	pthread_mutex_lock(&u->lock);
	d = &u->devs[idx];
	if (u->closed)
		ret = -EBADF;
	else if (u->error)
		ret = u->error;
	a = off / UNDO_PIECE * UNDO_PIECE;
	b = (off + len + UNDO_PIECE - 1) / UNDO_PIECE * UNDO_PIECE;
	if (b > d->size)
		b = d->size;
	pos = a;
	for (size_t i = span_find(d, a); !ret && pos < b; i++) {
		uint64_t gap_end = i < d->n && d->v[i].start < b ? d->v[i].start : b;

		if (gap_end > pos) {
			ret = save_gap(u, idx, pos, gap_end, &buf);
			appended = true;
		}
		if (gap_end == b)
			break;
		if (d->v[i].end > pos)
			pos = d->v[i].end;
	}
	if (!ret && appended)
		ret = sync_file(u);
	if (!ret && appended)
		ret = span_add(d, a, b);
	/* a record half written or not durable: nothing more may go after it, nor any write pass */
	if (ret && ret != -EBADF && appended)
		u->error = ret;
	pthread_mutex_unlock(&u->lock);
	free(buf);
	return ret;
}

/* ---- the device ---- */

struct undo_dev {
	struct ub_dev *inner;
	struct ub_undo *u;
	int idx;
};

static int ud_read(struct ub_dev *dev, void *buf, size_t len, uint64_t off)
{
	struct undo_dev *ud = dev->priv;

	return ub_dev_read(ud->inner, buf, len, off);
}

static int ud_readv(struct ub_dev *dev, const struct iovec *iov, int iovcnt, uint64_t off)
{
	struct undo_dev *ud = dev->priv;

	return ub_dev_readv(ud->inner, iov, iovcnt, off);
}

static void ud_willneed(struct ub_dev *dev, uint64_t off, uint64_t len)
{
	struct undo_dev *ud = dev->priv;

	ub_dev_willneed(ud->inner, off, len);
}

static int ud_write(struct ub_dev *dev, const void *buf, size_t len, uint64_t off)
{
	struct undo_dev *ud = dev->priv;
	int ret = undo_save(ud->u, ud->idx, off, len);

	return ret ? ret : ub_dev_write(ud->inner, buf, len, off);
}

static int ud_writev(struct ub_dev *dev, const struct iovec *iov, int iovcnt, uint64_t off)
{
	struct undo_dev *ud = dev->priv;
	uint64_t len = 0;
	int ret;

	for (int i = 0; i < iovcnt; i++)
		len += iov[i].iov_len;
	ret = undo_save(ud->u, ud->idx, off, len);
	return ret ? ret : ub_dev_writev(ud->inner, iov, iovcnt, off);
}

static int ud_flush(struct ub_dev *dev)
{
	struct undo_dev *ud = dev->priv;

	return ub_dev_flush(ud->inner);
}

static void ud_release(struct ub_dev *dev)
{
	struct undo_dev *ud = dev->priv;

	if (!ud)
		return;
	if (ud->u) {
		pthread_mutex_lock(&ud->u->lock);
		ud->u->devs[ud->idx].inner = NULL;
		pthread_mutex_unlock(&ud->u->lock);
		undo_put(ud->u);
	}
	ub_dev_close(ud->inner);
	free(ud);
}

static const struct ub_dev_ops undo_ops = {
	.kind = "undo",
	.read = ud_read,
	.write = ud_write,
	.flush = ud_flush,
	.release = ud_release,
	.writev = ud_writev,
	.readv = ud_readv,
	.willneed = ud_willneed,
};

/* The device's identity from its newest valid superblock copy, and its primary copy's bytes as they are. */
static void read_identity(struct ub_dev *inner, struct undo_disk_dev *rec)
{
	uint8_t sb[UB_SUPER_INFO_SIZE];
	uint64_t best = 0;
	char why[160];

	for (int m = 0; m < UB_SUPER_MIRROR_MAX; m++) {
		uint64_t off = ub_super_offset(m);

		if (off + UB_SUPER_INFO_SIZE > ub_dev_size(inner) || ub_dev_read(inner, sb, sizeof(sb), off))
			continue;
		if (m == 0)
			memcpy(rec->primary, sb, sizeof(sb));
		if (ub_super_validate(sb, off, why, sizeof(why)) ||
		    UB_GET(ub_disk_super, generation, sb) <= best)
			continue;
		best = UB_GET(ub_disk_super, generation, sb);
		UB_SET(undo_disk_dev, devid, rec, UB_GET(btrfs_dev_item, devid, UB_PTR(ub_disk_super, dev_item, sb)));
		memcpy(rec->uuid, UB_PTR(btrfs_dev_item, uuid, UB_PTR(ub_disk_super, dev_item, sb)), UB_UUID_SIZE);
		memcpy(rec->fsid, UB_PTR(ub_disk_super, fsid, sb), UB_FSID_SIZE);
		UB_SET(undo_disk_dev, flags, rec, UNDO_DEV_IDENTIFIED);
	}
}

/* Is the device at `path` the undo file itself? */
static bool same_file(int fd, const char *path)
{
	struct stat a, b;

	return !fstat(fd, &a) && !stat(path, &b) && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* Add the device record (its DEV record durable) and its piece set; its index in *idx. */
static int add_device(struct ub_undo *u, struct ub_dev *inner, int *idx)
{
	const char *path = ub_dev_path(inner);
	size_t plen = strlen(path);
	struct undo_disk_dev *rec;
	struct undo_devrec *devs;
	int ret;

	if (plen > 4096)
		plen = 4096;
	rec = calloc(1, sizeof(*rec) + plen);
	if (!rec)
		return -ENOMEM;
	UB_SET(undo_disk_dev, size, rec, ub_dev_size(inner));
	UB_SET(undo_disk_dev, path_len, rec, (uint32_t)plen);
	memcpy((uint8_t *)(rec + 1), path, plen);
	read_identity(inner, rec);

	pthread_mutex_lock(&u->lock);
	if (u->closed)
		ret = -EBADF;
	else if (same_file(u->fd, path))
		ret = -EINVAL;
	else
		ret = u->error;
	if (!ret) {
		devs = realloc(u->devs, (size_t)(u->ndevs + 1) * sizeof(*devs));
		if (!devs)
			ret = -ENOMEM;
		else
			u->devs = devs;
	}
	if (!ret && !u->fsid_set && (UB_GET(undo_disk_dev, flags, rec) & UNDO_DEV_IDENTIFIED)) {
		memcpy(u->hdr.fsid, rec->fsid, UB_FSID_SIZE);
		put_header(u);
		ret = pwrite_all(u->fd, &u->hdr, sizeof(u->hdr), 0);
		u->fsid_set = !ret;
	}
	if (!ret)
		ret = append_rec(u, UNDO_REC_DEV, (uint32_t)u->ndevs, 0, rec, (uint32_t)(sizeof(*rec) + plen));
	if (!ret)
		ret = sync_file(u);
	if (!ret) {
		memset(&u->devs[u->ndevs], 0, sizeof(u->devs[0]));
		u->devs[u->ndevs].inner = inner;
		u->devs[u->ndevs].size = ub_dev_size(inner);
		*idx = u->ndevs++;
		u->refs++;
	} else if (ret != -EBADF && ret != -EINVAL && ret != -ENOMEM) {
		u->error = ret;
	}
	pthread_mutex_unlock(&u->lock);
	free(rec);
	return ret;
}

int ub_dev_open_undo(struct ub_dev *inner, struct ub_undo *u, struct ub_dev **out)
{
	struct undo_dev *ud;
	int ret;

	if (!inner)
		return -EINVAL;
	if (!u || !out) {
		ub_dev_close(inner);
		return -EINVAL;
	}
	ud = calloc(1, sizeof(*ud));
	if (!ud) {
		ub_dev_close(inner);
		return -ENOMEM;
	}
	ret = add_device(u, inner, &ud->idx);
	if (ret) {
		ub_dev_close(inner);
		free(ud);
		return ret;
	}
	ud->inner = inner;
	ud->u = u;
	return ub_dev_create(inner->path, &undo_ops, ud, inner->size, inner->writable, out);
}
