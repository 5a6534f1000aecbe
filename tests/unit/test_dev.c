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
#include "dev/dev_priv.h"

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

/* ---- exclusive writable opens ---- */

static void test_file_writable_is_exclusive(void **state)
{
	uint8_t data[SIZE];
	struct tmpfile t;
	struct ub_dev *a, *b, *ro;

	(void)state;
	fill(data, sizeof(data), 6);
	make_file(&t, data, sizeof(data));
	assert_int_equal(ub_dev_open(t.path, true, &a), 0);
	assert_int_equal(ub_dev_open(t.path, true, &b), -EBUSY);
	/* readers are not kept out */
	assert_int_equal(ub_dev_open(t.path, false, &ro), 0);
	ub_dev_close(ro);
	ub_dev_close(a);
	assert_int_equal(ub_dev_open(t.path, true, &b), 0);
	ub_dev_close(b);
	unlink(t.path);
}

/* A loop device over a temporary file: O_EXCL keeps a second writer out. Skipped without root/losetup. */
static void test_blockdev_writable_is_exclusive(void **state)
{
	uint8_t data[SIZE];
	struct tmpfile t;
	struct ub_dev *a, *b;
	char cmd[200], loopdev[64] = "";
	FILE *p;

	(void)state;
	if (geteuid() != 0)
		skip();
	fill(data, sizeof(data), 7);
	make_file(&t, data, sizeof(data));
	snprintf(cmd, sizeof(cmd), "losetup -f --show %s 2>/dev/null", t.path);
	p = popen(cmd, "r");
	if (!p || !fgets(loopdev, sizeof(loopdev), p) || strncmp(loopdev, "/dev/loop", 9)) {
		if (p)
			pclose(p);
		unlink(t.path);
		skip();
	}
	pclose(p);
	loopdev[strcspn(loopdev, "\n")] = 0;
	int r1 = ub_dev_open(loopdev, true, &a);
	int r2 = r1 ? 0 : ub_dev_open(loopdev, true, &b);
	if (r1 == 0 && r2 == 0)
		ub_dev_close(b);
	if (r1 == 0)
		ub_dev_close(a);
	snprintf(cmd, sizeof(cmd), "losetup -d %s", loopdev);
	assert_int_equal(system(cmd), 0);
	unlink(t.path);
	assert_int_equal(r1, 0);
	assert_int_equal(r2, -EBUSY);
}

/* ---- recorder ---- */

#define RSIZE 4096

/* The test's own model of a crash: base images with the given writes applied in the given order. */
struct wr {
	int dev;
	uint64_t off, len;
	uint8_t byte;
};

static void model_apply(uint8_t img[][RSIZE], const struct wr *w)
{
	memset(img[w->dev] + w->off, w->byte, w->len);
}

static void test_recorder(void **state)
{
	/* d0: A B | flush d0 | C ; d1: D | E flush d1 ; d0: F (overlaps C) */
	static const struct wr script[] = {
		{ 0, 0, 100, 'A' }, { 0, 50, 100, 'B' }, { 1, 10, 10, 'D' }, { -1, 0, 0, 0 } /* flush d0 */,
		{ 0, 200, 30, 'C' }, { 1, 15, 30, 'E' }, { -2, 0, 0, 0 } /* flush d1 */, { 0, 210, 40, 'F' },
	};
	const uint64_t nscript = sizeof(script) / sizeof(script[0]);
	uint8_t base[2][RSIZE], live[2][RSIZE], img[2][RSIZE], want[2][RSIZE];
	struct ub_rec_log *log;
	struct ub_dev *devs[2], *tg[2];

	(void)state;
	fill(base[0], RSIZE, 11);
	fill(base[1], RSIZE, 12);
	memcpy(live, base, sizeof(base));
	assert_int_equal(ub_rec_log_new(&log), 0);
	for (int d = 0; d < 2; d++) {
		struct ub_dev *m;
		assert_int_equal(ub_dev_open_mem("m", live[d], RSIZE, true, &m), 0);
		assert_int_equal(ub_dev_open_recorder(m, log, d, &devs[d]), 0);
		assert_string_equal(devs[d]->ops->kind, "recorder");
		assert_true(devs[d]->size == RSIZE && devs[d]->writable);
	}
	for (uint64_t i = 0; i < nscript; i++) {
		uint8_t buf[200];
		if (script[i].dev < 0) {
			assert_int_equal(ub_dev_flush(devs[-script[i].dev - 1]), 0);
			continue;
		}
		memset(buf, script[i].byte, script[i].len);
		assert_int_equal(ub_dev_write(devs[script[i].dev], buf, script[i].len, script[i].off), 0);
	}
	/* refused by the bounds check: never reaches the log */
	assert_int_equal(ub_dev_write(devs[0], live, 10, RSIZE - 5), -ENOSPC);
	assert_true(ub_rec_log_count(log) == nscript);
	for (uint64_t i = 0; i < nscript; i++) {
		struct ub_rec_entry e;
		assert_int_equal(ub_rec_log_entry(log, i, &e), 0);
		if (script[i].dev < 0) {
			assert_int_equal(e.kind, UB_REC_FLUSH);
			assert_int_equal(e.dev, -script[i].dev - 1);
		} else {
			assert_int_equal(e.kind, UB_REC_WRITE);
			assert_int_equal(e.dev, script[i].dev);
			assert_true(e.off == script[i].off && e.len == script[i].len && e.data[0] == script[i].byte);
		}
	}
	{
		struct ub_rec_entry e;
		assert_int_equal(ub_rec_log_entry(log, nscript, &e), -ERANGE);
	}
	/* reads pass through */
	{
		uint8_t out[8];
		assert_int_equal(ub_dev_read(devs[0], out, 8, 60), 0);
		assert_int_equal(out[0], 'B');
	}
	for (int d = 0; d < 2; d++)
		assert_int_equal(ub_dev_open_mem("t", img[d], RSIZE, true, &tg[d]), 0);

	/* every cut: the prefix applied in order equals the model's prefix */
	for (uint64_t k = 0; k <= nscript; k++) {
		memcpy(img, base, sizeof(base));
		memcpy(want, base, sizeof(base));
		for (uint64_t i = 0; i < k; i++)
			if (script[i].dev >= 0)
				model_apply(want, &script[i]);
		assert_int_equal(ub_rec_log_apply(log, k, tg, 2), 0);
		assert_memory_equal(img, want, sizeof(img));
	}
	assert_memory_equal(img, live, sizeof(img));
	assert_int_equal(ub_rec_log_apply(log, nscript + 1, tg, 2), -ERANGE);

	/* pending writes: after a device's last flush before the cut */
	{
		static const struct { uint64_t k; size_t n; uint64_t idx[4]; } pend[] = {
			{ 0, 0, { 0 } }, { 3, 3, { 0, 1, 2 } }, { 4, 1, { 2 } }, { 6, 3, { 2, 4, 5 } },
			{ 7, 1, { 4 } }, { 8, 2, { 4, 7 } },
		};
		for (size_t t = 0; t < sizeof(pend) / sizeof(pend[0]); t++) {
			uint64_t *idx;
			size_t n;
			assert_int_equal(ub_rec_log_pending(log, pend[t].k, &idx, &n), 0);
			assert_int_equal(n, pend[t].n);
			for (size_t j = 0; j < n; j++)
				assert_true(idx[j] == pend[t].idx[j]);
			free(idx);
		}
	}

	/* cut at 8 with only F landed, then F before C (reordered: C wins the overlap) */
	{
		uint64_t only_f[] = { 7 }, f_then_c[] = { 7, 4 }, bad[] = { 0 }, twice[] = { 7, 7 };
		const uint64_t durable[] = { 0, 1, 2, 5 };

		memcpy(want, base, sizeof(base));
		for (size_t j = 0; j < 4; j++)
			model_apply(want, &script[durable[j]]);
		model_apply(want, &script[7]);
		memcpy(img, base, sizeof(base));
		assert_int_equal(ub_rec_log_apply_subset(log, 8, only_f, 1, tg, 2), 0);
		assert_memory_equal(img, want, sizeof(img));
		model_apply(want, &script[4]);
		memcpy(img, base, sizeof(base));
		assert_int_equal(ub_rec_log_apply_subset(log, 8, f_then_c, 2, tg, 2), 0);
		assert_memory_equal(img, want, sizeof(img));
		assert_true(img[0][215] == 'C' && live[0][215] == 'F');
		/* a durable write, or one listed twice, is not a variant */
		memcpy(img, base, sizeof(base));
		assert_int_equal(ub_rec_log_apply_subset(log, 8, bad, 1, tg, 2), -EINVAL);
		assert_int_equal(ub_rec_log_apply_subset(log, 8, twice, 2, tg, 2), -EINVAL);
		assert_memory_equal(img, base, sizeof(img));
		/* only device 1's target: device 0's writes are skipped */
		struct ub_dev *only1[2] = { NULL, tg[1] };
		assert_int_equal(ub_rec_log_apply(log, 8, only1, 2), 0);
		assert_memory_equal(img[0], base[0], RSIZE);
		assert_memory_equal(img[1], live[1], RSIZE);
	}

	/* variants: seed 0 keeps none of the pending writes; a seed always gives the same image */
	{
		uint8_t first[2][RSIZE];
		bool differs = false;

		memcpy(want, base, sizeof(base));
		model_apply(want, &script[0]);
		model_apply(want, &script[1]);
		model_apply(want, &script[2]);
		model_apply(want, &script[5]);
		memcpy(img, base, sizeof(base));
		assert_int_equal(ub_rec_log_apply_variant(log, 8, 0, tg, 2), 0);
		assert_memory_equal(img, want, sizeof(img));
		for (uint64_t seed = 1; seed < 40; seed++) {
			memcpy(img, base, sizeof(base));
			assert_int_equal(ub_rec_log_apply_variant(log, 8, seed, tg, 2), 0);
			memcpy(first, img, sizeof(img));
			memcpy(img, base, sizeof(base));
			assert_int_equal(ub_rec_log_apply_variant(log, 8, seed, tg, 2), 0);
			assert_memory_equal(img, first, sizeof(img));
			/* the durable part is always there */
			assert_memory_equal(img[1], want[1], RSIZE);
			assert_memory_equal(img[0], want[0], 200);
			differs |= memcmp(img, want, sizeof(img)) != 0;
		}
		assert_true(differs);
	}
	ub_rec_log_clear(log);
	assert_true(ub_rec_log_count(log) == 0);
	/* the log outlives the caller's reference while its devices use it */
	ub_rec_log_put(log);
	assert_int_equal(ub_dev_write(devs[1], "x", 1, 0), 0);
	assert_int_equal(ub_dev_flush(devs[1]), 0);
	for (int d = 0; d < 2; d++) {
		ub_dev_close(devs[d]);
		ub_dev_close(tg[d]);
	}
}

static void test_recorder_invalid(void **state)
{
	uint8_t buf[16];
	struct ub_rec_log *log;
	struct ub_dev *m, *r;

	(void)state;
	assert_int_equal(ub_rec_log_new(&log), 0);
	assert_int_equal(ub_dev_open_mem("m", buf, sizeof(buf), true, &m), 0);
	/* the inner device is taken over even on failure (ASan sees a leak otherwise) */
	assert_int_equal(ub_dev_open_recorder(m, log, -1, &r), -EINVAL);
	assert_int_equal(ub_dev_open_mem("m", buf, sizeof(buf), false, &m), 0);
	assert_int_equal(ub_dev_open_recorder(m, log, 0, &r), 0);
	assert_false(r->writable);
	assert_int_equal(ub_dev_write(r, buf, 1, 0), -EROFS);
	assert_true(ub_rec_log_count(log) == 0);
	ub_dev_close(r);
	ub_rec_log_put(log);
}

/* ---- faulty ---- */

static void test_faulty(void **state)
{
	uint8_t img[2][64], out[8], data[8];
	struct ub_fault_plan *plan;
	struct ub_dev *devs[2];

	(void)state;
	memset(img, 0, sizeof(img));
	memset(data, 0xCC, sizeof(data));
	assert_int_equal(ub_fault_plan_new(&plan), 0);
	for (int d = 0; d < 2; d++) {
		struct ub_dev *m;
		assert_int_equal(ub_dev_open_mem("m", img[d], 64, true, &m), 0);
		assert_int_equal(ub_dev_open_faulty(m, plan, &devs[d]), 0);
		assert_string_equal(devs[d]->ops->kind, "faulty");
	}
	/* unarmed: everything passes, everything is counted */
	assert_int_equal(ub_dev_write(devs[0], data, 8, 0), 0);
	assert_int_equal(ub_dev_read(devs[1], out, 8, 0), 0);
	assert_int_equal(ub_dev_flush(devs[1]), 0);
	assert_true(ub_fault_plan_count(plan, UB_FAULT_ANY) == 3);
	assert_true(ub_fault_plan_count(plan, UB_FAULT_WRITE) == 1);

	/* the 3rd write, counted over both devices, fails and changes nothing */
	ub_fault_plan_arm(plan, UB_FAULT_WRITE, 3, false);
	assert_true(ub_fault_plan_count(plan, UB_FAULT_ANY) == 0);
	assert_int_equal(ub_dev_write(devs[0], data, 8, 8), 0);
	assert_int_equal(ub_dev_read(devs[0], out, 8, 8), 0); /* reads are not in the mask */
	assert_int_equal(ub_dev_write(devs[1], data, 8, 8), 0);
	assert_int_equal(ub_dev_write(devs[0], data, 8, 16), -EIO);
	assert_int_equal(img[0][16], 0);
	assert_int_equal(ub_dev_write(devs[1], data, 8, 16), 0);
	assert_int_equal(img[1][16], 0xCC);
	assert_true(ub_fault_plan_injected(plan) == 1);
	assert_true(ub_fault_plan_count(plan, UB_FAULT_WRITE) == 4);
	assert_true(ub_fault_plan_count(plan, UB_FAULT_READ) == 1);

	/* all I/O from the 2nd on */
	ub_fault_plan_arm(plan, UB_FAULT_ANY, 2, true);
	assert_int_equal(ub_dev_read(devs[1], out, 8, 0), 0);
	assert_int_equal(ub_dev_flush(devs[0]), -EIO);
	assert_int_equal(ub_dev_read(devs[1], out, 8, 0), -EIO);
	assert_int_equal(ub_dev_write(devs[1], data, 8, 24), -EIO);
	assert_int_equal(img[1][24], 0);
	assert_true(ub_fault_plan_injected(plan) == 3);
	/* the bounds check comes first: an out-of-range request is neither counted nor failed */
	assert_int_equal(ub_dev_read(devs[1], out, 8, 60), -EIO);
	assert_true(ub_fault_plan_count(plan, UB_FAULT_ANY) == 4);

	/* disarmed */
	ub_fault_plan_arm(plan, UB_FAULT_ANY, 0, true);
	assert_int_equal(ub_dev_write(devs[1], data, 8, 24), 0);
	assert_int_equal(img[1][24], 0xCC);
	ub_fault_plan_put(plan);
	ub_dev_close(devs[0]);
	ub_dev_close(devs[1]);
}

/* ---- gathered writes ---- */

/*
 * More buffers than one pwritev takes here (64), one of them empty, against
 * the same bytes put together by hand: through pwritev on a file, through
 * one write per buffer on memory (no writev in that backend).
 */
static void test_writev(void **state)
{
	enum { NB = 100, BL = 40, AT = 123 };
	uint8_t data[SIZE], want[SIZE], disk[SIZE], src[NB * BL], mem[SIZE];
	struct iovec iov[NB];
	struct tmpfile t;
	struct ub_dev *dev;
	size_t got, pos = AT;

	(void)state;
	fill(data, sizeof(data), 9);
	fill(src, sizeof(src), 10);
	memcpy(want, data, SIZE);
	for (int i = 0; i < NB; i++) {
		iov[i].iov_base = src + i * BL;
		iov[i].iov_len = i == 7 ? 0 : BL;
		memcpy(want + pos, iov[i].iov_base, iov[i].iov_len);
		pos += iov[i].iov_len;
	}
	make_file(&t, data, sizeof(data));
	assert_int_equal(ub_dev_open(t.path, false, &dev), 0);
	assert_int_equal(ub_dev_writev(dev, iov, NB, AT), -EROFS);
	ub_dev_close(dev);
	assert_int_equal(ub_dev_open(t.path, true, &dev), 0);
	assert_int_equal(ub_dev_writev(dev, iov, NB, SIZE - 100), -ENOSPC);
	assert_int_equal(ub_dev_writev(dev, iov, NB, AT), 0);
	ub_dev_close(dev);
	slurp(t.path, disk, sizeof(disk), &got);
	assert_int_equal(got, SIZE);
	assert_memory_equal(disk, want, SIZE);
	unlink(t.path);

	memcpy(mem, data, SIZE);
	assert_int_equal(ub_dev_open_mem("mem", mem, SIZE, true, &dev), 0);
	assert_int_equal(ub_dev_writev(dev, iov, NB, SIZE - 100), -ENOSPC);
	assert_memory_equal(mem, data, SIZE);
	assert_int_equal(ub_dev_writev(dev, iov, NB, AT), 0);
	ub_dev_close(dev);
	assert_memory_equal(mem, want, SIZE);
}

/* ---- gathered reads ---- */

/*
 * More buffers than one preadv takes (IOV_MAX, 1024), one of them empty,
 * against the bytes as written: through preadv on a file (the rest buffer by
 * buffer), through one read per buffer on memory (no readv in that backend).
 */
static void test_readv(void **state)
{
	enum { NB = 1100, BL = 4, AT = 321 };
	uint8_t data[SIZE], dst[NB * BL];
	struct iovec iov[NB];
	struct tmpfile t;
	struct ub_dev *devs[2];

	(void)state;
	fill(data, sizeof(data), 11);
	for (int i = 0; i < NB; i++) {
		iov[i].iov_base = dst + i * BL;
		iov[i].iov_len = i == 5 ? 0 : BL;
	}
	make_file(&t, data, sizeof(data));
	assert_int_equal(ub_dev_open(t.path, false, &devs[0]), 0);
	assert_int_equal(ub_dev_open_mem("mem", data, SIZE, false, &devs[1]), 0);
	for (int d = 0; d < 2; d++) {
		size_t pos = AT;

		memset(dst, 0xee, sizeof(dst));
		assert_int_equal(ub_dev_readv(devs[d], iov, NB, SIZE - 100), -EIO);
		ub_dev_willneed(devs[d], SIZE - 100, 4096); /* out of range: nothing */
		ub_dev_willneed(devs[d], AT, NB * BL);
		assert_int_equal(ub_dev_readv(devs[d], iov, NB, AT), 0);
		for (int i = 0; i < NB; i++) {
			assert_memory_equal(iov[i].iov_base, data + pos, iov[i].iov_len);
			pos += iov[i].iov_len;
		}
		assert_int_equal(dst[5 * BL], 0xee); /* the empty buffer got nothing */
		ub_dev_close(devs[d]);
	}
	unlink(t.path);
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
		cmocka_unit_test(test_file_writable_is_exclusive),
		cmocka_unit_test(test_blockdev_writable_is_exclusive),
		cmocka_unit_test(test_recorder),
		cmocka_unit_test(test_recorder_invalid),
		cmocka_unit_test(test_faulty),
		cmocka_unit_test(test_writev),
		cmocka_unit_test(test_readv),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
