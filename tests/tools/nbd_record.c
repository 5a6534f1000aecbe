/* SPDX-License-Identifier: MIT */
/*
 * An nbdkit plugin (run through nbdkit's cc plugin: `nbdkit cc nbd_record.c
 * file=IMAGE log=LOG`) that serves an image file and records, in order, every
 * write with its bytes and every flush, so that a test can build the images a
 * crash after any prefix of them could have left (tests/integration/
 * test_mount_crash.py). Requests are served one at a time, so the order in the
 * log is the order the writes reached the "disk".
 *
 * A record: magic "UBRL", kind (u32: 1 write, 2 flush, 3 write with FUA,
 * durable by itself), offset (u64), length (u64), then for writes the bytes;
 * all little-endian, as written on the machines the tests run on.
 *
 * `fail_writes=PATH`: while PATH exists every write and flush fails with EIO
 * (a disk gone bad at a moment the test chooses); a failed request is not
 * recorded.
 */
#define NBDKIT_API_VERSION 2
#include <nbdkit-plugin.h>

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define THREAD_MODEL NBDKIT_THREAD_MODEL_SERIALIZE_ALL_REQUESTS

enum { REC_WRITE = 1, REC_FLUSH = 2, REC_WRITE_FUA = 3 };

struct rec_header {
	char magic[4];
	uint32_t kind;
	uint64_t off, len;
};

/* nbdkit's plugin interface keeps its configuration in the plugin's globals */
static char *image_path, *log_path, *fail_path;
static int image_fd = -1, log_fd = -1;

static int rec_config(const char *key, const char *value)
{
	char **slot = !strcmp(key, "file") ? &image_path : !strcmp(key, "log") ? &log_path
		      : !strcmp(key, "fail_writes") ? &fail_path : NULL;

	if (!slot) {
		nbdkit_error("unknown parameter '%s'", key);
		return -1;
	}
	free(*slot);
	*slot = nbdkit_absolute_path(value);
	return *slot ? 0 : -1;
}

static int rec_config_complete(void)
{
	if (!image_path || !log_path) {
		nbdkit_error("file= and log= are required");
		return -1;
	}
	return 0;
}

static int rec_get_ready(void)
{
	image_fd = open(image_path, O_RDWR | O_CLOEXEC);
	if (image_fd < 0) {
		nbdkit_error("%s: %m", image_path);
		return -1;
	}
	log_fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
	if (log_fd < 0) {
		nbdkit_error("%s: %m", log_path);
		return -1;
	}
	return 0;
}

static void rec_unload(void)
{
	if (image_fd >= 0)
		close(image_fd);
	if (log_fd >= 0)
		close(log_fd);
	free(image_path);
	free(log_path);
	free(fail_path);
}

static void *rec_open(int readonly)
{
	/* one image for every connection: any non-NULL handle */
	return &image_fd;
}

static int64_t rec_get_size(void *handle)
{
	struct stat st;

	if (fstat(image_fd, &st) < 0) {
		nbdkit_error("%s: %m", image_path);
		return -1;
	}
	return st.st_size;
}

static int rec_can_write(void *handle)
{
	return 1;
}

static int rec_can_flush(void *handle)
{
	return 1;
}

static int rec_can_fua(void *handle)
{
	return NBDKIT_FUA_NATIVE;
}

static int failing(void)
{
	if (fail_path && access(fail_path, F_OK) == 0) {
		nbdkit_set_error(EIO);
		return 1;
	}
	return 0;
}

static int put_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int record(uint32_t kind, uint64_t off, uint64_t len, const void *buf)
{
	struct rec_header h = { { 'U', 'B', 'R', 'L' }, kind, off, len };

	if (put_all(log_fd, &h, sizeof(h)) || (buf && put_all(log_fd, buf, len))) {
		nbdkit_error("%s: %m", log_path);
		return -1;
	}
	return 0;
}

static int rec_pread(void *handle, void *buf, uint32_t count, uint64_t offset, uint32_t flags)
{
	char *p = buf;

	while (count) {
		ssize_t n = pread(image_fd, p, count, (off_t)offset);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			nbdkit_error("read %s at %llu: %m", image_path, (unsigned long long)offset);
			return -1;
		}
		p += n;
		count -= (uint32_t)n;
		offset += (uint64_t)n;
	}
	return 0;
}

static int rec_pwrite(void *handle, const void *buf, uint32_t count, uint64_t offset, uint32_t flags)
{
	const char *p = buf;
	uint64_t off = offset;
	uint32_t left = count;

	if (failing())
		return -1;
	while (left) {
		ssize_t n = pwrite(image_fd, p, left, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			nbdkit_error("write %s at %llu: %m", image_path, (unsigned long long)off);
			return -1;
		}
		p += n;
		left -= (uint32_t)n;
		off += (uint64_t)n;
	}
	return record((flags & NBDKIT_FLAG_FUA) ? REC_WRITE_FUA : REC_WRITE, offset, count, buf);
}

static int rec_flush(void *handle, uint32_t flags)
{
	if (failing())
		return -1;
	return record(REC_FLUSH, 0, 0, NULL);
}

static struct nbdkit_plugin plugin = {
	.name = "ubtrfs-record",
	.version = "1",
	.config = rec_config,
	.config_complete = rec_config_complete,
	.get_ready = rec_get_ready,
	.unload = rec_unload,
	.open = rec_open,
	.get_size = rec_get_size,
	.can_write = rec_can_write,
	.can_flush = rec_can_flush,
	.can_fua = rec_can_fua,
	.pread = rec_pread,
	.pwrite = rec_pwrite,
	.flush = rec_flush,
};

NBDKIT_REGISTER_PLUGIN(plugin)
