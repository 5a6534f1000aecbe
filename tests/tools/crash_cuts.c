/* SPDX-License-Identifier: MIT */
/* Crash images of a recorded run (crash_cuts.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "ubtrfs/volume.h"
#include "crash_cuts.h"

int crash_copy_sparse(const char *from, const char *to)
{
	int in = open(from, O_RDONLY), out = -1, ret = 0;
	off_t size, pos = 0;
	static char buf[1 << 16];

	if (in < 0)
		return -errno;
	out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	size = lseek(in, 0, SEEK_END);
	if (out < 0 || size < 0 || ftruncate(out, size) < 0)
		ret = -errno;
	while (!ret && pos < size) {
		off_t data = lseek(in, pos, SEEK_DATA), hole;
		if (data < 0)
			break; /* no more data */
		hole = lseek(in, data, SEEK_HOLE);
		if (hole < 0) {
			ret = -errno;
			break;
		}
		for (pos = data; pos < hole && !ret;) {
			size_t n = (size_t)(hole - pos < (off_t)sizeof(buf) ? hole - pos : (off_t)sizeof(buf));
			ssize_t r = pread(in, buf, n, pos);
			if (r <= 0 || pwrite(out, buf, (size_t)r, pos) != r)
				ret = r < 0 ? -errno : -EIO;
			pos += r > 0 ? r : 0;
		}
	}
	close(in);
	if (out >= 0)
		close(out);
	return ret;
}

bool crash_is_super(uint64_t off, uint64_t len)
{
	for (int i = 0; i < UB_SUPER_MIRROR_MAX; i++) {
		uint64_t s = ub_super_offset(i);
		if (off < s + UB_SUPER_INFO_SIZE && s < off + len)
			return true;
	}
	return false;
}

int crash_save_bases(const char *dir, char *const *paths, int ndevs)
{
	char base[4096];
	int ret = 0;

	for (int d = 0; d < ndevs && !ret; d++) {
		snprintf(base, sizeof(base), "%s/base_dev%d.img", dir, d);
		ret = crash_copy_sparse(paths[d], base);
		if (ret)
			fprintf(stderr, "crash cuts: %s: %s\n", base, strerror(-ret));
	}
	return ret;
}

static int one_cut(struct ub_rec_log *log, const char *dir, int ndevs, long c, uint64_t k)
{
	struct ub_dev *targets[16] = { 0 };
	char base[4096], name[4096];
	int ret = ndevs > 16 ? -EINVAL : 0;

	for (int d = 0; d < ndevs && !ret; d++) {
		snprintf(base, sizeof(base), "%s/base_dev%d.img", dir, d);
		snprintf(name, sizeof(name), "%s/cut%ld_dev%d.img", dir, c, d);
		ret = crash_copy_sparse(base, name);
		if (!ret)
			ret = ub_dev_open(name, true, &targets[d]);
	}
	if (!ret)
		ret = ub_rec_log_apply_variant(log, k, (uint64_t)c * 7919 + 1, targets, ndevs);
	for (int d = 0; d < ndevs; d++)
		ub_dev_close(targets[d]);
	if (!ret)
		printf("cut %ld entries %llu of %llu\n", c, (unsigned long long)k,
		       (unsigned long long)ub_rec_log_count(log));
	return ret;
}

int crash_make_cuts(struct ub_rec_log *log, const char *dir, int ndevs, long spread, long super_stride)
{
	uint64_t total = ub_rec_log_count(log), last = UINT64_MAX, nsuper = 0;
	struct ub_rec_entry e;
	long c = 0;
	int ret = 0;

	for (; c < spread && !ret; c++)
		ret = one_cut(log, dir, ndevs, c,
			      spread > 1 ? total * (uint64_t)c / (uint64_t)(spread - 1) : total);
	for (uint64_t i = 0; super_stride > 0 && i < total && !ret; i++) {
		ret = ub_rec_log_entry(log, i, &e);
		if (ret || e.kind != UB_REC_WRITE || !crash_is_super(e.off, e.len))
			continue;
		if (nsuper++ % (uint64_t)super_stride)
			continue;
		if (last != i)
			ret = one_cut(log, dir, ndevs, c++, i);
		if (!ret)
			ret = one_cut(log, dir, ndevs, c++, i + 1);
		last = i + 1;
	}
	return ret;
}
