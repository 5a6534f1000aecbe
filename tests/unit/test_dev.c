/* SPDX-License-Identifier: MIT */
/*
 * The device interface (lib/dev): the file backend against a real temporary
 * file (read back with plain stdio as the oracle), the memory backend against
 * its buffer, and the checks every backend shares (bounds, read-only, short
 * reads) through a counting backend that must never be called out of range.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "ubtrfs/dev.h"

#define SIZE 8192

static void fill(uint8_t *buf, size_t len, unsigned seed)
{
	for (size_t i = 0; i < len; i++)
		buf[i] = (uint8_t)(i * 31 + seed);
}

/* ---- memory backend ---- */

static void test_mem_read_bounds(void **state)
{
	uint8_t img[SIZE], out[SIZE + 1];
	struct ub_dev *dev;

	(void)state;
	fill(img, sizeof(img), 1);
	assert_int_equal(ub_dev_open_mem("m", img, SIZE, false, &dev), 0);
	assert_string_equal(dev->path, "m");
	assert_true(dev->size == SIZE);
	assert_false(dev->writable);
	assert_int_equal(ub_dev_read(dev, out, 100, 4000), 0);
	assert_memory_equal(out, img + 4000, 100);
	/* the last byte, and nothing past it */
	assert_int_equal(ub_dev_read(dev, out, 1, SIZE - 1), 0);
	assert_int_equal(out[0], img[SIZE - 1]);
	assert_int_equal(ub_dev_read(dev, out, 2, SIZE - 1), -EIO);
	assert_int_equal(ub_dev_read(dev, out, SIZE + 1, 0), -EIO);
	assert_int_equal(ub_dev_read(dev, out, 1, SIZE), -EIO);
	assert_int_equal(ub_dev_read(dev, out, 0, SIZE), 0);
	assert_int_equal(ub_dev_read(dev, out, 0, SIZE + 1), -EIO);
	/* offsets and lengths that wrap around 2^64 */
	assert_int_equal(ub_dev_read(dev, out, 16, UINT64_MAX - 8), -EIO);
	assert_int_equal(ub_dev_read(dev, out, SIZE, UINT64_MAX), -EIO);
	assert_int_equal(ub_dev_read(dev, out, SIZE, 0), 0);
	assert_memory_equal(out, img, SIZE);
	ub_dev_close(dev);
}

static void test_mem_readonly_refuses_writes(void **state)
{
	uint8_t img[SIZE], copy[SIZE], data[64];
	struct ub_dev *dev;

	(void)state;
	fill(img, sizeof(img), 2);
	memcpy(copy, img, sizeof(img));
	memset(data, 0xaa, sizeof(data));
	assert_int_equal(ub_dev_open_mem("ro", img, SIZE, false, &dev), 0);
	assert_int_equal(ub_dev_write(dev, data, sizeof(data), 0), -EROFS);
	assert_int_equal(ub_dev_write(dev, data, sizeof(data), SIZE * 2), -EROFS);
	assert_memory_equal(img, copy, SIZE);
	assert_int_equal(ub_dev_flush(dev), 0);
	ub_dev_close(dev);
}

static void test_mem_write_bounds(void **state)
{
	uint8_t img[SIZE], expect[SIZE], data[64], out[64];
	struct ub_dev *dev;

	(void)state;
	fill(img, sizeof(img), 3);
	memcpy(expect, img, sizeof(img));
	fill(data, sizeof(data), 9);
	assert_int_equal(ub_dev_open_mem(NULL, img, SIZE, true, &dev), 0);
	assert_string_equal(dev->path, "mem");
	assert_int_equal(ub_dev_write(dev, data, sizeof(data), SIZE - sizeof(data)), 0);
	memcpy(expect + SIZE - sizeof(data), data, sizeof(data));
	assert_memory_equal(img, expect, SIZE);
	assert_int_equal(ub_dev_read(dev, out, sizeof(out), SIZE - sizeof(out)), 0);
	assert_memory_equal(out, data, sizeof(data));
	/* one byte too far, wrapping, or starting past the end: refused, nothing written */
	assert_int_equal(ub_dev_write(dev, data, sizeof(data), SIZE - sizeof(data) + 1), -ENOSPC);
	assert_int_equal(ub_dev_write(dev, data, sizeof(data), UINT64_MAX - 1), -ENOSPC);
	assert_int_equal(ub_dev_write(dev, data, 1, SIZE), -ENOSPC);
	assert_int_equal(ub_dev_write(dev, data, 0, SIZE), 0);
	assert_memory_equal(img, expect, SIZE);
	assert_int_equal(ub_dev_flush(dev), 0);
	ub_dev_close(dev);
}

static void test_mem_open_invalid(void **state)
{
	struct ub_dev *dev;
	uint8_t b;

	(void)state;
	assert_int_equal(ub_dev_open_mem("x", NULL, 10, false, &dev), -EINVAL);
	/* an empty device is valid; every non-empty access is out of range */
	assert_int_equal(ub_dev_open_mem("empty", NULL, 0, true, &dev), 0);
	assert_int_equal(ub_dev_read(dev, &b, 1, 0), -EIO);
	assert_int_equal(ub_dev_write(dev, &b, 1, 0), -ENOSPC);
	ub_dev_close(dev);
	ub_dev_close(NULL);
}

/* ---- file backend ---- */

struct tmpfile {
	char path[64];
};

static void make_file(struct tmpfile *t, const uint8_t *data, size_t len)
{
	int fd;

	snprintf(t->path, sizeof(t->path), "/tmp/ubtrfs-test-dev-XXXXXX");
	fd = mkstemp(t->path);
	assert_true(fd >= 0);
	assert_true(write(fd, data, len) == (ssize_t)len);
	close(fd);
}

/* The oracle: the file's bytes through stdio, not through the code under test. */
static void slurp(const char *path, uint8_t *buf, size_t len, size_t *got)
{
	FILE *f = fopen(path, "rb");

	assert_non_null(f);
	*got = fread(buf, 1, len, f);
	fclose(f);
}

static void test_file_read_write(void **state)
{
	uint8_t data[SIZE], out[SIZE], disk[SIZE + 16], patch[100];
	struct tmpfile t;
	struct ub_dev *dev;
	size_t got;

	(void)state;
	fill(data, sizeof(data), 4);
	make_file(&t, data, sizeof(data));

	assert_int_equal(ub_dev_open(t.path, false, &dev), 0);
	assert_true(dev->size == SIZE);
	assert_string_equal(dev->path, t.path);
	assert_string_equal(dev->ops->kind, "file");
	assert_int_equal(ub_dev_read(dev, out, SIZE, 0), 0);
	assert_memory_equal(out, data, SIZE);
	assert_int_equal(ub_dev_read(dev, out, 2, SIZE - 1), -EIO);
	assert_int_equal(ub_dev_write(dev, data, 10, 0), -EROFS);
	ub_dev_close(dev);

	assert_int_equal(ub_dev_open(t.path, true, &dev), 0);
	fill(patch, sizeof(patch), 77);
	assert_int_equal(ub_dev_write(dev, patch, sizeof(patch), 5000), 0);
	assert_int_equal(ub_dev_flush(dev), 0);
	/* past the end: an image file must not grow */
	assert_int_equal(ub_dev_write(dev, patch, sizeof(patch), SIZE - 10), -ENOSPC);
	ub_dev_close(dev);
	memcpy(data + 5000, patch, sizeof(patch));
	slurp(t.path, disk, sizeof(disk), &got);
	assert_int_equal(got, SIZE);
	assert_memory_equal(disk, data, SIZE);
	unlink(t.path);
}

static void test_file_short_read(void **state)
{
	uint8_t data[SIZE], out[SIZE];
	struct tmpfile t;
	struct ub_dev *dev;

	(void)state;
	fill(data, sizeof(data), 5);
	make_file(&t, data, sizeof(data));
	assert_int_equal(ub_dev_open(t.path, false, &dev), 0);
	/* the file shrinks after the size was taken: the read comes up short */
	assert_int_equal(truncate(t.path, 4096), 0);
	assert_int_equal(ub_dev_read(dev, out, 4096, 0), 0);
	assert_memory_equal(out, data, 4096);
	assert_int_equal(ub_dev_read(dev, out, 200, 4000), -EIO);
	assert_int_equal(ub_dev_read(dev, out, 100, 6000), -EIO);
	ub_dev_close(dev);
	unlink(t.path);
}

static void test_file_open_errors(void **state)
{
	struct ub_dev *dev = NULL;
	char dir[64];

	(void)state;
	assert_int_equal(ub_dev_open("/nonexistent/ubtrfs-test-dev", false, &dev), -ENOENT);
	snprintf(dir, sizeof(dir), "/tmp/ubtrfs-test-dev-dir-XXXXXX");
	assert_non_null(mkdtemp(dir));
	/* neither a regular file nor a block device */
	assert_int_equal(ub_dev_open(dir, false, &dev), -ENODEV);
	rmdir(dir);
	assert_int_equal(ub_dev_open("/dev/null", false, &dev), -ENODEV);
}

/* ---- the shared checks, seen from a backend ---- */

struct counting {
	unsigned reads, writes, flushes, releases;
	uint64_t last_off;
	size_t last_len;
};

static int c_read(struct ub_dev *dev, void *buf, size_t len, uint64_t off)
{
	struct counting *c = dev->priv;

	c->reads++;
	c->last_off = off;
	c->last_len = len;
	memset(buf, 0x5a, len);
	return 0;
}

static int c_write(struct ub_dev *dev, const void *buf, size_t len, uint64_t off)
{
	struct counting *c = dev->priv;

	(void)buf;
	c->writes++;
	c->last_off = off;
	c->last_len = len;
	return 0;
}

static int c_flush(struct ub_dev *dev)
{
	((struct counting *)dev->priv)->flushes++;
	return 0;
}

static void c_release(struct ub_dev *dev)
{
	((struct counting *)dev->priv)->releases++;
}

static const struct ub_dev_ops counting_ops = {
	.kind = "counting", .read = c_read, .write = c_write, .flush = c_flush, .release = c_release,
};

static void test_backend_sees_only_valid_requests(void **state)
{
	struct counting c = { 0 };
	struct ub_dev *dev;
	uint8_t buf[32];

	(void)state;
	assert_int_equal(ub_dev_create("c", &counting_ops, &c, 1000, true, &dev), 0);
	assert_int_equal(ub_dev_read(dev, buf, 32, 968), 0);
	assert_int_equal(c.reads, 1);
	assert_true(c.last_off == 968 && c.last_len == 32);
	assert_int_equal(ub_dev_read(dev, buf, 32, 969), -EIO);
	assert_int_equal(ub_dev_read(dev, buf, 0, 10), 0);
	assert_int_equal(ub_dev_write(dev, buf, 32, 969), -ENOSPC);
	assert_int_equal(ub_dev_write(dev, buf, 0, 10), 0);
	assert_int_equal(c.reads, 1);
	assert_int_equal(c.writes, 0);
	assert_int_equal(ub_dev_write(dev, buf, 8, 992), 0);
	assert_int_equal(c.writes, 1);
	assert_int_equal(ub_dev_flush(dev), 0);
	assert_int_equal(c.flushes, 1);
	dev->writable = false;
	assert_int_equal(ub_dev_write(dev, buf, 8, 0), -EROFS);
	assert_int_equal(c.writes, 1);
	assert_int_equal(c.releases, 0);
	ub_dev_close(dev);
	assert_int_equal(c.releases, 1);
}

static void test_create_failure_releases(void **state)
{
	static const struct ub_dev_ops no_read = { .kind = "broken", .write = c_write, .flush = c_flush,
						   .release = c_release };
	struct counting c = { 0 };
	struct ub_dev *dev;

	(void)state;
	/* the backend state is handed over even when creation fails */
	assert_int_equal(ub_dev_create("b", &no_read, &c, 10, false, &dev), -EINVAL);
	assert_int_equal(c.releases, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mem_read_bounds),
		cmocka_unit_test(test_mem_readonly_refuses_writes),
		cmocka_unit_test(test_mem_write_bounds),
		cmocka_unit_test(test_mem_open_invalid),
		cmocka_unit_test(test_file_read_write),
		cmocka_unit_test(test_file_short_read),
		cmocka_unit_test(test_file_open_errors),
		cmocka_unit_test(test_backend_sees_only_valid_requests),
		cmocka_unit_test(test_create_failure_releases),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
