/* SPDX-License-Identifier: MIT */
/* The device interface: checks shared by every backend, then the file/block-device backend. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <linux/fs.h>
#include "ubtrfs/dev.h"
#include "dev/dev_priv.h"

int ub_dev_create(const char *name, const struct ub_dev_ops *ops, void *priv, uint64_t size, bool writable,
		  struct ub_dev **out)
{
	struct ub_dev *dev;
	int ret;

	if (!ops || !ops->read || !ops->write || !ops->flush) {
		ret = -EINVAL;
		goto fail;
	}
	dev = calloc(1, sizeof(*dev));
	if (!dev) {
		ret = -ENOMEM;
		goto fail;
	}
	dev->path = strdup(name ? name : "");
	if (!dev->path) {
		free(dev);
		ret = -ENOMEM;
		goto fail;
	}
	dev->ops = ops;
	dev->priv = priv;
	dev->size = size;
	dev->writable = writable;
	*out = dev;
	return 0;
fail:
	/* the caller handed over priv: it is ours to release on every path */
	if (ops && ops->release) {
		struct ub_dev tmp = { .ops = ops, .priv = priv };
		ops->release(&tmp);
	}
	return ret;
}

void ub_dev_close(struct ub_dev *dev)
{
	if (!dev)
		return;
	if (dev->ops->release)
		dev->ops->release(dev);
	free(dev->path);
	free(dev);
}

static bool in_range(const struct ub_dev *dev, size_t len, uint64_t off)
{
	return off <= dev->size && (uint64_t)len <= dev->size - off;
}

int ub_dev_read(struct ub_dev *dev, void *buf, size_t len, uint64_t off)
{
	if (!in_range(dev, len, off))
		return -EIO;
	if (len == 0)
		return 0;
	return dev->ops->read(dev, buf, len, off);
}

int ub_dev_write(struct ub_dev *dev, const void *buf, size_t len, uint64_t off)
{
	if (!dev->writable)
		return -EROFS;
	/* an image file would silently grow and a block device fails late: refuse up front */
	if (!in_range(dev, len, off))
		return -ENOSPC;
	if (len == 0)
		return 0;
	return dev->ops->write(dev, buf, len, off);
}

int ub_dev_flush(struct ub_dev *dev)
{
	return dev->ops->flush(dev);
}

/* ---- file or block device ---- */

struct file_dev {
	int fd;
	uint64_t unkicked; /* bytes written since writeback was last started (atomic: writers on any thread) */
};

/*
 * Writeback is started (not waited for) every WRITEBACK_KICK bytes written:
 * a flush then finds little left to write, instead of every byte written
 * since the last one (mkfs --rootdir onto a disk waited a second in its
 * flushes), and the disk works while the writer goes on.
 */
#define WRITEBACK_KICK (8ULL << 20)

static void written(struct file_dev *f, uint64_t len)
{
	if (__atomic_add_fetch(&f->unkicked, len, __ATOMIC_RELAXED) < WRITEBACK_KICK)
		return;
	__atomic_store_n(&f->unkicked, 0, __ATOMIC_RELAXED);
	/* only a start: a failure here is the flush's to find */
	(void)sync_file_range(f->fd, 0, 0, SYNC_FILE_RANGE_WRITE);
}

static int file_read(struct ub_dev *dev, void *buf, size_t len, uint64_t off)
{
	struct file_dev *f = dev->priv;
	uint8_t *p = buf;

	while (len > 0) {
		ssize_t n = pread(f->fd, p, len, (off_t)off);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		/* the file shrank under us */
		if (n == 0)
			return -EIO;
		p += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

static int file_write(struct ub_dev *dev, const void *buf, size_t len, uint64_t off)
{
	struct file_dev *f = dev->priv;
	const uint8_t *p = buf;

	written(f, len);
	while (len > 0) {
		ssize_t n = pwrite(f->fd, p, len, (off_t)off);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -EIO;
		p += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

/* pwritev as far as it goes, then again from where a short write stopped */
static int file_writev(struct ub_dev *dev, const struct iovec *iov, int iovcnt, uint64_t off)
{
	struct file_dev *f = dev->priv;
	struct iovec cur[64];
	uint64_t len = 0;
	int i = 0;

	for (int j = 0; j < iovcnt; j++)
		len += iov[j].iov_len;
	written(f, len);

	while (i < iovcnt) {
		int cnt = iovcnt - i < 64 ? iovcnt - i : 64;
		ssize_t n;

		memcpy(cur, iov + i, (size_t)cnt * sizeof(*cur));
		n = pwritev(f->fd, cur, cnt, (off_t)off);
		if (n <= 0 && !(n < 0 && errno == EINTR))
			return n < 0 ? -errno : -EIO;
		if (n < 0)
			continue;
		off += (uint64_t)n;
		for (; cnt > 0 && (size_t)n >= cur[0].iov_len; i++, cnt--) {
			n -= (ssize_t)cur[0].iov_len;
			memmove(cur, cur + 1, (size_t)(cnt - 1) * sizeof(*cur));
		}
		if (n > 0) {
			/* a buffer written in part: the rest of it alone, then on */
			int ret = file_write(dev, (const uint8_t *)iov[i].iov_base + n, iov[i].iov_len - (size_t)n, off);
			if (ret)
				return ret;
			off += iov[i].iov_len - (size_t)n;
			i++;
		}
	}
	return 0;
}

static int file_flush(struct ub_dev *dev)
{
	struct file_dev *f = dev->priv;

	return fdatasync(f->fd) < 0 ? -errno : 0;
}

static void file_release(struct ub_dev *dev)
{
	struct file_dev *f = dev->priv;

	if (!f)
		return;
	close(f->fd);
	free(f);
}

/*
 * One preadv; what it left (a short read, or buffers past what one call takes)
 * is read buffer by buffer through file_read, which finishes or fails.
 */
static int file_readv(struct ub_dev *dev, const struct iovec *iov, int iovcnt, uint64_t off)
{
	struct file_dev *f = dev->priv;
	ssize_t n;
	size_t done;

	do
		n = preadv(f->fd, iov, iovcnt < IOV_MAX ? iovcnt : IOV_MAX, (off_t)off);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	done = (size_t)n;
	for (int i = 0; i < iovcnt; i++) {
		size_t l = iov[i].iov_len, skip = done < l ? done : l;
		int ret = skip < l ? file_read(dev, (uint8_t *)iov[i].iov_base + skip, l - skip, off + skip) : 0;

		if (ret)
			return ret;
		done -= skip;
		off += l;
	}
	return 0;
}

static void file_willneed(struct ub_dev *dev, uint64_t off, uint64_t len)
{
	struct file_dev *f = dev->priv;

	/* only a hint: a failure costs speed, never data */
	(void)posix_fadvise(f->fd, (off_t)off, (off_t)len, POSIX_FADV_WILLNEED);
}

static const struct ub_dev_ops file_ops = {
	.kind = "file",
	.read = file_read,
	.write = file_write,
	.flush = file_flush,
	.release = file_release,
	.writev = file_writev,
	.readv = file_readv,
	.willneed = file_willneed,
};

bool ub_dev_is_file(const struct ub_dev *dev)
{
	return dev->ops == &file_ops;
}

int ub_dev_open(const char *path, bool writable, struct ub_dev **out)
{
	struct file_dev *f;
	struct stat st;
	uint64_t size;
	int fd, ret;

	if (ub_dev_is_uri(path))
		return ub_dev_open_nbd(path, writable, out);
	/*
	 * O_EXCL without O_CREAT: on Linux an exclusive open of a block device
	 * (EBUSY while mounted); ignored for regular files, which get a flock
	 * below instead.
	 */
	fd = open(path, (writable ? O_RDWR | O_EXCL : O_RDONLY) | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		ret = -errno;
		goto out_close;
	}
	if (writable && S_ISREG(st.st_mode) && flock(fd, LOCK_EX | LOCK_NB) < 0) {
		ret = errno == EWOULDBLOCK ? -EBUSY : -errno;
		goto out_close;
	}
	if (S_ISBLK(st.st_mode)) {
		if (ioctl(fd, BLKGETSIZE64, &size) < 0) {
			ret = -errno;
			goto out_close;
		}
	} else if (S_ISREG(st.st_mode)) {
		size = (uint64_t)st.st_size;
	} else {
		ret = -ENODEV;
		goto out_close;
	}
	f = malloc(sizeof(*f));
	if (!f) {
		ret = -ENOMEM;
		goto out_close;
	}
	f->fd = fd;
	/* from here the fd belongs to the backend and is closed through file_release */
	return ub_dev_create(path, &file_ops, f, size, writable, out);
out_close:
	close(fd);
	return ret;
}

/* ---- gathered writes ---- */

/*
 * Gathered reads and writes share their checks (the same errors as a single
 * read or write over the total length) and, for a backend without a gathered
 * op, go buffer by buffer.
 */
static int gathered(struct ub_dev *dev, const struct iovec *iov, int iovcnt, uint64_t off, bool write)
{
	int (*op)(struct ub_dev *, const struct iovec *, int, uint64_t) = write ? dev->ops->writev : dev->ops->readv;
	uint64_t total = 0;

	if (iovcnt < 0)
		return -EINVAL;
	for (int i = 0; i < iovcnt; i++) {
		if (iov[i].iov_len > SIZE_MAX - total)
			return -EINVAL;
		total += iov[i].iov_len;
	}
	if (!in_range(dev, total, off))
		return write ? -ENOSPC : -EIO;
	if (total == 0)
		return 0;
	if (op)
		return op(dev, iov, iovcnt, off);
	for (int i = 0; i < iovcnt; i++) {
		int ret = !iov[i].iov_len ? 0
			  : write	  ? dev->ops->write(dev, iov[i].iov_base, iov[i].iov_len, off)
					  : dev->ops->read(dev, iov[i].iov_base, iov[i].iov_len, off);

		if (ret)
			return ret;
		off += iov[i].iov_len;
	}
	return 0;
}

int ub_dev_writev(struct ub_dev *dev, const struct iovec *iov, int iovcnt, uint64_t off)
{
	return dev->writable ? gathered(dev, iov, iovcnt, off, true) : -EROFS;
}

const char *ub_dev_path(const struct ub_dev *dev)
{
	return dev->path;
}

uint64_t ub_dev_size(const struct ub_dev *dev)
{
	return dev->size;
}

void *ub_dev_priv(const struct ub_dev *dev)
{
	return dev->priv;
}

/* ---- gathered reads ---- */

int ub_dev_readv(struct ub_dev *dev, const struct iovec *iov, int iovcnt, uint64_t off)
{
	return gathered(dev, iov, iovcnt, off, false);
}

void ub_dev_willneed(struct ub_dev *dev, uint64_t off, uint64_t len)
{
	if (dev->ops->willneed && len && in_range(dev, len, off))
		dev->ops->willneed(dev, off, len);
}
