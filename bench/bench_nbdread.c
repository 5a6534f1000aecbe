/* SPDX-License-Identifier: MIT */
/*
 * The NBD ceiling for bench/nbd: how fast a client can pull bytes from NBD
 * servers on this machine when it does nothing else with them. Each URI gets
 * its own connection and thread, reads BYTES from offset OFFSET in 1 MiB
 * requests with 16 in flight (as ubtrfs's NBD backend does at most), and drops
 * what it got. Prints the seconds all of them took.
 *
 *   bench_nbdread OFFSET BYTES URI...
 */
#include <errno.h>
#include <libnbd.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define REQ (1U << 20)
#define IN_FLIGHT 16

static uint64_t offset, bytes;

struct reader {
	pthread_t tid;
	const char *uri;
	int ret;
};

static int one_done(void *user_data, int *error)
{
	uint64_t *done = user_data;

	if (*error)
		fprintf(stderr, "bench_nbdread: a read failed: %d\n", *error);
	(*done)++;
	return 1; /* retire the command */
}

static void *read_all(void *arg)
{
	struct reader *r = arg;
	struct nbd_handle *h = nbd_create();
	char *buf = malloc((size_t)REQ * IN_FLIGHT);
	uint64_t issued = 0, done = 0, nreq = (bytes + REQ - 1) / REQ;

	r->ret = 1;
	if (!h || !buf || nbd_connect_uri(h, r->uri) < 0) {
		fprintf(stderr, "bench_nbdread: %s: %s\n", r->uri, h ? nbd_get_error() : "out of memory");
		goto out;
	}
	while (done < nreq) {
		while (issued < nreq && issued - done < IN_FLIGHT) {
			uint64_t at = issued * REQ, len = bytes - at < REQ ? bytes - at : REQ;
			nbd_completion_callback cb = { .callback = one_done, .user_data = &done };

			if (nbd_aio_pread(h, buf + (issued % IN_FLIGHT) * REQ, len, offset + at, cb, 0) < 0) {
				fprintf(stderr, "bench_nbdread: %s: %s\n", r->uri, nbd_get_error());
				goto out;
			}
			issued++;
		}
		if (nbd_poll(h, -1) < 0) {
			fprintf(stderr, "bench_nbdread: %s: %s\n", r->uri, nbd_get_error());
			goto out;
		}
	}
	r->ret = 0;
out:
	if (h)
		nbd_close(h);
	free(buf);
	return NULL;
}

int main(int argc, char **argv)
{
	struct reader *r;
	struct timespec t0, t1;
	int n = argc - 3, bad = 0;

	if (argc < 4) {
		fprintf(stderr, "usage: bench_nbdread OFFSET BYTES URI...\n");
		return 2;
	}
	offset = strtoull(argv[1], NULL, 0);
	bytes = strtoull(argv[2], NULL, 0);
	r = calloc((size_t)n, sizeof(*r));
	if (!r)
		return 2;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int i = 0; i < n; i++) {
		r[i].uri = argv[3 + i];
		if (pthread_create(&r[i].tid, NULL, read_all, &r[i]))
			return 2;
	}
	for (int i = 0; i < n; i++) {
		pthread_join(r[i].tid, NULL);
		bad |= r[i].ret;
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("%.3f\n", (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
	free(r);
	return bad;
}
