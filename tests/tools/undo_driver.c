/* SPDX-License-Identifier: MIT */
/*
 * Many threads writing one device through an undo device (include/ubtrfs/undo.h),
 * for test_rescue.py: the writes overlap each other, start and end off the 4 KiB
 * pieces, and half go through ub_dev_writev, so the undo file sees first writes
 * racing for the same pieces. `ubtrfs rescue undo` must then give the image back.
 *
 *   undo_driver IMAGE UNDOFILE THREADS WRITES SEED START END
 *
 * writes into [START, END) of IMAGE; with UNDOFILE "-" the file is left without its
 * trailer (ub_undo_free, as an aborted run). A library user: public headers only.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ubtrfs/dev.h"
#include "ubtrfs/undo.h"

struct job {
	struct ub_dev *dev;
	uint64_t seed, start, end;
	int writes, ret;
};

static uint64_t next(uint64_t *s)
{
	/* splitmix64: a fixed seed gives the same run */
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static void *writer(void *arg)
{
	struct job *j = arg;
	uint8_t *buf = malloc(3 * 65536);

	if (!buf) {
		j->ret = -ENOMEM;
		return NULL;
	}
	for (int i = 0; i < j->writes && !j->ret; i++) {
		uint64_t len = 1 + next(&j->seed) % 40000;
		uint64_t off = j->start + next(&j->seed) % (j->end - j->start - len);

		for (uint64_t k = 0; k < len; k++)
			buf[k] = (uint8_t)next(&j->seed);
		if (next(&j->seed) & 1) {
			struct iovec iov[3];
			uint64_t a = len / 3, b = len / 2;

			iov[0] = (struct iovec){ buf, a };
			iov[1] = (struct iovec){ buf + a, b - a };
			iov[2] = (struct iovec){ buf + b, len - b };
			j->ret = ub_dev_writev(j->dev, iov, 3, off);
		} else {
			j->ret = ub_dev_write(j->dev, buf, len, off);
		}
	}
	free(buf);
	return NULL;
}

int main(int argc, char **argv)
{
	struct ub_undo *u = NULL;
	struct ub_dev *dev = NULL;
	pthread_t th[64];
	struct job jobs[64];
	int nthreads, ret;
	bool abort_run;

	if (argc != 8) {
		fprintf(stderr, "usage: undo_driver IMAGE UNDOFILE|-:UNDOFILE THREADS WRITES SEED START END\n");
		return 2;
	}
	nthreads = atoi(argv[3]);
	if (nthreads < 1 || nthreads > 64)
		return 2;
	abort_run = !strncmp(argv[2], "-:", 2);
	ret = ub_undo_create(argv[2] + (abort_run ? 2 : 0), &u);
	if (!ret)
		ret = ub_dev_open(argv[1], true, &dev);
	if (!ret)
		ret = ub_dev_open_undo(dev, u, &dev);
	if (ret) {
		fprintf(stderr, "undo_driver: %s\n", strerror(-ret));
		return 1;
	}
	for (int t = 0; t < nthreads; t++) {
		jobs[t] = (struct job){ dev, strtoull(argv[5], NULL, 0) * 1000 + (uint64_t)t, strtoull(argv[6], NULL, 0),
					strtoull(argv[7], NULL, 0), atoi(argv[4]), 0 };
		pthread_create(&th[t], NULL, writer, &jobs[t]);
	}
	for (int t = 0; t < nthreads; t++) {
		pthread_join(th[t], NULL);
		if (jobs[t].ret && !ret)
			ret = jobs[t].ret;
	}
	if (!ret)
		ret = ub_dev_flush(dev);
	ub_dev_close(dev);
	if (abort_run) {
		ub_undo_free(u);
	} else {
		int r = ub_undo_finish(u);

		if (!ret)
			ret = r;
	}
	if (ret) {
		fprintf(stderr, "undo_driver: %s\n", strerror(-ret));
		return 1;
	}
	return 0;
}
