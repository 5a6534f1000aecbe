/* SPDX-License-Identifier: MIT */
/*
 * Small files for bench/mount-write: in DIR, create N files in N/1000
 * directories (open O_CREAT|O_EXCL, write SIZE bytes, close), then stat every
 * one, then delete them all (and the directories). Prints the three phases'
 * seconds on one line: "create S stat S delete S".
 *
 *   bench_smallfiles DIR N SIZE
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>

#define PER_DIR 1000

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what, const char *path)
{
	fprintf(stderr, "bench_smallfiles: %s %s: %s\n", what, path, strerror(errno));
	exit(1);
}

int main(int argc, char **argv)
{
	char path[4096];
	char *buf;
	long n, size, i;
	double t0, t1, t2, t3;

	if (argc != 4) {
		fprintf(stderr, "usage: bench_smallfiles DIR N SIZE\n");
		return 2;
	}
	n = atol(argv[2]);
	size = atol(argv[3]);
	buf = malloc((size_t)size + 1);
	if (!buf)
		return 1;
	for (i = 0; i < size; i++)
		buf[i] = (char)('a' + i % 26);
	t0 = now();
	for (i = 0; i < n; i++) {
		int fd;

		if (i % PER_DIR == 0) {
			snprintf(path, sizeof(path), "%s/d%ld", argv[1], i / PER_DIR);
			if (mkdir(path, 0755) < 0)
				die("mkdir", path);
		}
		snprintf(path, sizeof(path), "%s/d%ld/f%ld", argv[1], i / PER_DIR, i);
		fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
		if (fd < 0)
			die("create", path);
		if (write(fd, buf, (size_t)size) != size)
			die("write", path);
		if (close(fd) < 0)
			die("close", path);
	}
	t1 = now();
	for (i = 0; i < n; i++) {
		struct stat st;

		snprintf(path, sizeof(path), "%s/d%ld/f%ld", argv[1], i / PER_DIR, i);
		if (stat(path, &st) < 0 || st.st_size != size)
			die("stat", path);
	}
	t2 = now();
	for (i = 0; i < n; i++) {
		snprintf(path, sizeof(path), "%s/d%ld/f%ld", argv[1], i / PER_DIR, i);
		if (unlink(path) < 0)
			die("unlink", path);
		if (i % PER_DIR == PER_DIR - 1 || i == n - 1) {
			snprintf(path, sizeof(path), "%s/d%ld", argv[1], i / PER_DIR);
			if (rmdir(path) < 0)
				die("rmdir", path);
		}
	}
	t3 = now();
	printf("create %.6f stat %.6f delete %.6f\n", t1 - t0, t2 - t1, t3 - t2);
	free(buf);
	return 0;
}
