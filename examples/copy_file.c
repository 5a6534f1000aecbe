/* SPDX-License-Identifier: MIT */
/*
 * Copy one file out of a btrfs image (or device) through libubtrfs, without
 * mounting it. Every data sector is verified against its checksum; ranges no
 * copy holds correctly are written as zeros and counted.
 *
 *   copy_file IMAGE PATH OUTFILE     (PATH: an absolute path inside the image)
 *
 * Exit status: 0 copied and verified, 1 copied with unreadable ranges, 2 failed.
 *
 * Build against an installed libubtrfs:
 *   cc -o copy_file copy_file.c $(pkg-config --cflags --libs ubtrfs)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <ubtrfs/fs.h>

#define CHUNK (1U << 20)

int main(int argc, char **argv)
{
	struct ub_fs_opts opts = { .super_mirror = -1 };
	struct ub_read_report report = { 0 };
	struct ub_fs *fs = NULL;
	struct ub_inode inode;
	uint64_t off = 0;
	FILE *out = NULL;
	char *buf = NULL;
	int ret;

	if (argc != 4) {
		fprintf(stderr, "usage: copy_file IMAGE PATH OUTFILE\n");
		return 2;
	}
	/* a NULL sink: the library's messages go to stderr, errors and warnings */
	ret = ub_fs_open((const char *const *)&argv[1], 1, &opts, NULL, &fs);
	if (ret < 0) {
		fprintf(stderr, "copy_file: cannot open %s: %s\n", argv[1], strerror(-ret));
		return 2;
	}
	ret = ub_path_lookup_inode(fs, argv[2], &inode);
	if (ret == 0 && !S_ISREG(inode.mode))
		ret = -EINVAL;
	if (ret < 0) {
		fprintf(stderr, "copy_file: %s: %s\n", argv[2], ret == -EINVAL ? "not a regular file" : strerror(-ret));
		goto out;
	}
	buf = malloc(CHUNK);
	out = fopen(argv[3], "wb");
	if (!buf || !out) {
		ret = -errno;
		fprintf(stderr, "copy_file: %s: %s\n", argv[3], strerror(errno));
		goto out;
	}
	while (off < inode.size) {
		uint64_t got = 0;

		/*
		 * -EIO: some ranges were unreadable, zeros there and counted in the
		 * report: go on. Any other error ends the copy after the bytes before it.
		 */
		ret = ub_file_read_inode(fs, &inode, off, CHUNK, buf, &got, &report);
		if (got && fwrite(buf, 1, got, out) != got) {
			ret = -errno;
			break;
		}
		off += got;
		if (ret < 0 && ret != -EIO)
			break;
		if (got == 0) { /* short of the size the inode gave: not a file the format allows */
			ret = -EUCLEAN;
			break;
		}
		ret = 0;
	}
	ub_read_report_flush(fs, &report);
	if (ret < 0)
		fprintf(stderr, "copy_file: %s at offset %llu: %s\n", argv[2], (unsigned long long)off, strerror(-ret));
out:
	if (out && fclose(out) != 0 && ret == 0)
		ret = -errno;
	free(buf);
	ub_fs_close(fs);
	if (ret < 0)
		return 2;
	if (report.bad_bytes) {
		fprintf(stderr, "copy_file: %llu bytes could not be read (zeros written), the first at offset %llu\n",
			(unsigned long long)report.bad_bytes, (unsigned long long)report.first_bad_offset);
		return 1;
	}
	return 0;
}
