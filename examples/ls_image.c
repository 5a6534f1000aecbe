/* SPDX-License-Identifier: MIT */
/*
 * List a directory of a btrfs image (or device) through libubtrfs, without
 * mounting it: one line per entry, type, inode number, size and name.
 *
 *   ls_image IMAGE [PATH]      (PATH: an absolute path inside it, default /)
 *
 * Build against an installed libubtrfs:
 *   cc -o ls_image ls_image.c $(pkg-config --cflags --libs ubtrfs)
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <ubtrfs/fs.h>
#include <ubtrfs/version.h>

/* The library tells what went wrong, and where, through the caller's sink. */
static void log_line(void *arg, enum ub_log_level lvl, const char *msg)
{
	if (lvl <= UB_LOG_WARN)
		fprintf(stderr, "%s: %s: %s\n", (const char *)arg, lvl == UB_LOG_ERROR ? "error" : "warning", msg);
}

static char type_char(uint8_t ftype)
{
	switch (ftype) {
	case BTRFS_FT_DIR: return 'd';
	case BTRFS_FT_SYMLINK: return 'l';
	case BTRFS_FT_REG_FILE: return '-';
	case BTRFS_FT_CHRDEV: return 'c';
	case BTRFS_FT_BLKDEV: return 'b';
	case BTRFS_FT_FIFO: return 'p';
	case BTRFS_FT_SOCK: return 's';
	default: return '?';
	}
}

struct listing {
	struct ub_fs *fs;
	int bad; /* entries whose inode could not be read */
};

/* Called for each entry, in the directory's index order; non-zero would stop the walk. */
static int print_entry(void *arg, const struct ub_dirent *de)
{
	struct listing *l = arg;
	struct ub_inode inode;
	int ret = ub_dirent_inode(l->fs, de, &inode);

	if (ret < 0) {
		fprintf(stderr, "ls_image: %.*s: %s\n", (int)de->name_len, de->name, strerror(-ret));
		l->bad++;
		return 0;
	}
	printf("%c %10llu %12llu %.*s\n", type_char(de->type), (unsigned long long)de->ino,
	       (unsigned long long)inode.size, (int)de->name_len, de->name);
	return 0;
}

int main(int argc, char **argv)
{
	struct ub_log log = { .fn = log_line, .arg = "ls_image" };
	struct ub_fs_opts opts = { .super_mirror = -1 }; /* read-only, the newest valid superblock */
	const char *path = argc > 2 ? argv[2] : "/";
	struct listing l = { 0 };
	struct ub_inode dir;
	int ret;

	if (argc < 2 || argc > 3) {
		fprintf(stderr, "usage: ls_image IMAGE [PATH]   (libubtrfs %s)\n", ub_version());
		return 2;
	}
	ret = ub_fs_open((const char *const *)&argv[1], 1, &opts, &log, &l.fs);
	if (ret < 0) {
		fprintf(stderr, "ls_image: cannot open %s: %s\n", argv[1], strerror(-ret));
		return 2;
	}
	ret = ub_path_lookup_inode(l.fs, path, &dir);
	if (ret == 0 && !S_ISDIR(dir.mode))
		ret = -ENOTDIR;
	if (ret == 0)
		ret = ub_dir_iterate(l.fs, dir.subvol, dir.ino, print_entry, &l);
	if (ret < 0)
		fprintf(stderr, "ls_image: %s: %s\n", path, strerror(-ret));
	ub_fs_close(l.fs);
	return ret < 0 ? 2 : l.bad ? 1 : 0;
}
