/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <linux/fs.h>
#include "ubtrfs/dev.h"

int ub_dev_open(const char *path, bool writable, struct ub_dev **out)
{
	struct ub_dev *dev = NULL;
	struct stat st;
	int fd, ret;

	fd = open(path, (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		ret = -errno;
		goto out_close;
	}
	dev = calloc(1, sizeof(*dev));
	if (!dev) {
		ret = -ENOMEM;
		goto out_close;
	}
	if (S_ISBLK(st.st_mode)) {
		uint64_t sz = 0;
		if (ioctl(fd, BLKGETSIZE64, &sz) < 0) {
			ret = -errno;
			goto out_close;
		}
		dev->size = sz;
	} else if (S_ISREG(st.st_mode)) {
		dev->size = (uint64_t)st.st_size;
	} else {
		ret = -ENODEV;
		goto out_close;
	}
	dev->path = strdup(path);
	if (!dev->path) {
		ret = -ENOMEM;
		goto out_close;
	}
	dev->fd = fd;
	dev->writable = writable;
	*out = dev;
	return 0;
out_close:
	free(dev);
	close(fd);
	return ret;
}

void ub_dev_close(struct ub_dev *dev)
{
	if (!dev)
		return;
	close(dev->fd);
	free(dev->path);
	free(dev);
}

int ub_dev_read(struct ub_dev *dev, void *buf, size_t len, uint64_t off)
{
	uint8_t *p = buf;

	if (off > dev->size || len > dev->size - off)
		return -EIO;
	while (len > 0) {
		ssize_t n = pread(dev->fd, p, len, (off_t)off);
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

int ub_dev_write(struct ub_dev *dev, const void *buf, size_t len, uint64_t off)
{
	const uint8_t *p = buf;

	if (!dev->writable)
		return -EROFS;
	while (len > 0) {
		ssize_t n = pwrite(dev->fd, p, len, (off_t)off);
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

int ub_dev_flush(struct ub_dev *dev)
{
	return fdatasync(dev->fd) < 0 ? -errno : 0;
}
