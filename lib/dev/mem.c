/* SPDX-License-Identifier: MIT */
/* The memory backend: a device over a caller's buffer, for tests and fuzzers. */
#include <errno.h>
#include <string.h>
#include "ubtrfs/dev.h"
#include "dev/dev_priv.h"

/* ub_dev_read/write have checked the range, so the copies stay inside the buffer. */
static int mem_read(struct ub_dev *dev, void *buf, size_t len, uint64_t off)
{
	memcpy(buf, (const uint8_t *)dev->priv + off, len);
	return 0;
}

static int mem_write(struct ub_dev *dev, const void *buf, size_t len, uint64_t off)
{
	memcpy((uint8_t *)dev->priv + off, buf, len);
	return 0;
}

static int mem_flush(struct ub_dev *dev)
{
	return 0;
}

static const struct ub_dev_ops mem_ops = {
	.kind = "mem",
	.read = mem_read,
	.write = mem_write,
	.flush = mem_flush,
};

int ub_dev_open_mem(const char *name, void *buf, uint64_t size, bool writable, struct ub_dev **out)
{
	if (!buf && size)
		return -EINVAL;
	if ((size_t)size != size)
		return -EFBIG;
	return ub_dev_create(name ? name : "mem", &mem_ops, buf, size, writable, out);
}
