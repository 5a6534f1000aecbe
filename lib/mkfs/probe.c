/* SPDX-License-Identifier: MIT */
/*
 * What mkfs refuses before it writes a byte: a device given twice (also as a
 * loop device and the file behind it), a device in use by a mounted
 * filesystem, a device that already holds something.
 *
 * "In use" is decided by device number, not by name: mountinfo's source and
 * major:minor (btrfs shows an anonymous 0:N there, hence the source path too),
 * every member of a mounted btrfs (/sys/fs/btrfs/FSID/devices, since
 * mountinfo names one member only), and for an image file every loop device
 * whose backing file is that same inode.
 */
#include <blkid/blkid.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/loop.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "ubtrfs/dev.h"
#include "ubtrfs/mkfs.h"

struct devset {
	dev_t *v;
	size_t n, cap;
};

static int devset_add(struct devset *s, dev_t d)
{
	for (size_t i = 0; i < s->n; i++)
		if (s->v[i] == d)
			return 0;
	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 32;
		dev_t *v = realloc(s->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		s->v = v;
		s->cap = cap;
	}
	s->v[s->n++] = d;
	return 0;
}

static bool devset_has(const struct devset *s, dev_t d)
{
	for (size_t i = 0; i < s->n; i++)
		if (s->v[i] == d)
			return true;
	return false;
}

/* "7:3\n" from a sysfs dev file */
static int read_devno(const char *path, dev_t *out)
{
	FILE *f = fopen(path, "re");
	unsigned maj, min;
	int ok;

	if (!f)
		return -errno;
	ok = fscanf(f, "%u:%u", &maj, &min) == 2;
	fclose(f);
	if (!ok)
		return -EINVAL;
	*out = makedev(maj, min);
	return 0;
}

/* mountinfo fields escape spaces and such as \ooo */
static void unescape(char *s)
{
	char *o = s;

	for (; *s; s++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '7' && s[2] >= '0' && s[2] <= '7' && s[3] >= '0' &&
		    s[3] <= '7') {
			*o++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
			s += 3;
		} else {
			*o++ = *s;
		}
	}
	*o = 0;
}

static int collect_mounted(struct devset *busy)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char *line = NULL;
	size_t cap = 0;
	DIR *d;
	struct dirent *de;
	int ret = 0;

	if (!f)
		return -errno;
	while (getline(&line, &cap, f) > 0 && !ret) {
		unsigned maj, min;
		char *sep = strstr(line, " - ");
		char src[4096];
		struct stat st;

		if (sscanf(line, "%*u %*u %u:%u", &maj, &min) == 2)
			ret = devset_add(busy, makedev(maj, min));
		/* after " - ": fstype, then the source */
		if (!ret && sep && sscanf(sep + 3, "%*s %4095s", src) == 1) {
			unescape(src);
			if (src[0] == '/' && !stat(src, &st) && S_ISBLK(st.st_mode))
				ret = devset_add(busy, st.st_rdev);
		}
	}
	free(line);
	fclose(f);
	if (ret)
		return ret;

	d = opendir("/sys/fs/btrfs");
	if (!d)
		return 0; /* no btrfs module loaded: no btrfs mounted */
	while ((de = readdir(d)) && !ret) {
		char path[512];
		DIR *dd;
		struct dirent *e;

		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/sys/fs/btrfs/%s/devices", de->d_name);
		dd = opendir(path);
		if (!dd)
			continue;
		while ((e = readdir(dd)) && !ret) {
			char devfile[1024];
			dev_t dn;

			if (e->d_name[0] == '.')
				continue;
			snprintf(devfile, sizeof(devfile), "%s/%s/dev", path, e->d_name);
			if (!read_devno(devfile, &dn))
				ret = devset_add(busy, dn);
		}
		closedir(dd);
	}
	closedir(d);
	return ret;
}

/* the loop devices whose backing file is st's inode */
static int loops_of(const struct stat *st, struct devset *out)
{
	DIR *d = opendir("/sys/block");
	struct dirent *de;
	int ret = 0;

	if (!d)
		return 0;
	while ((de = readdir(d)) && !ret) {
		char path[512], back[4096];
		struct stat bs;
		FILE *f;
		dev_t dn;

		if (strncmp(de->d_name, "loop", 4))
			continue;
		snprintf(path, sizeof(path), "/sys/block/%s/loop/backing_file", de->d_name);
		f = fopen(path, "re");
		if (!f)
			continue;
		if (!fgets(back, sizeof(back), f)) {
			fclose(f);
			continue;
		}
		fclose(f);
		back[strcspn(back, "\n")] = 0;
		if (stat(back, &bs) || bs.st_dev != st->st_dev || bs.st_ino != st->st_ino)
			continue;
		snprintf(path, sizeof(path), "/sys/block/%s/dev", de->d_name);
		if (!read_devno(path, &dn))
			ret = devset_add(out, dn);
	}
	closedir(d);
	return ret;
}

/*
 * A whole disk is in use when one of its partitions is, and any block device
 * when something is stacked on it (dm, md: its holders).
 */
static int parts_and_holders(dev_t dn, struct devset *out)
{
	char path[256];
	DIR *d;
	struct dirent *de;
	int ret = devset_add(out, dn);

	snprintf(path, sizeof(path), "/sys/dev/block/%u:%u", major(dn), minor(dn));
	d = opendir(path);
	if (!d)
		return ret;
	while ((de = readdir(d)) && !ret) {
		char f[1024];
		struct stat st;
		dev_t sub;

		if (de->d_name[0] == '.')
			continue;
		/* a partition is a subdirectory holding a "partition" file */
		snprintf(f, sizeof(f), "%s/%s/partition", path, de->d_name);
		if (stat(f, &st))
			continue;
		snprintf(f, sizeof(f), "%s/%s/dev", path, de->d_name);
		if (!read_devno(f, &sub))
			ret = devset_add(out, sub);
	}
	closedir(d);
	for (size_t i = 0; i < out->n && !ret; i++) {
		DIR *h;

		snprintf(path, sizeof(path), "/sys/dev/block/%u:%u/holders", major(out->v[i]), minor(out->v[i]));
		h = opendir(path);
		if (!h)
			continue;
		while ((de = readdir(h)) && !ret) {
			char f[1024];
			dev_t sub;

			if (de->d_name[0] == '.')
				continue;
			snprintf(f, sizeof(f), "%s/%s/dev", path, de->d_name);
			if (!read_devno(f, &sub))
				ret = devset_add(out, sub);
		}
		closedir(h);
	}
	return ret;
}

/*
 * A network device as blkid can probe it: a sparse memory file of its size
 * holding its first and last MiB, where signatures and partition tables are.
 */
static int remote_copy(const char *uri, int *fdp)
{
	struct ub_dev *dev;
	uint8_t *buf = NULL;
	uint64_t size, spans[2][2];
	int fd, ret = ub_dev_open(uri, false, &dev);

	if (ret)
		return ret;
	size = ub_dev_size(dev);
	spans[0][0] = 0;
	spans[0][1] = size < (1U << 20) ? size : 1U << 20;
	spans[1][0] = size > (2U << 20) ? size - (1U << 20) : spans[0][1];
	spans[1][1] = size - spans[1][0];
	fd = memfd_create("ubtrfs-probe", MFD_CLOEXEC);
	buf = malloc(1U << 20);
	if (fd < 0 || !buf || ftruncate(fd, (off_t)size)) {
		ret = fd < 0 || !buf ? -ENOMEM : -errno;
		goto out;
	}
	for (int i = 0; i < 2 && !ret; i++) {
		if (!spans[i][1])
			continue;
		ret = ub_dev_read(dev, buf, spans[i][1], spans[i][0]);
		if (!ret && pwrite(fd, buf, spans[i][1], (off_t)spans[i][0]) != (ssize_t)spans[i][1])
			ret = -EIO;
	}
out:
	free(buf);
	ub_dev_close(dev);
	if (ret && fd >= 0)
		close(fd);
	if (!ret)
		*fdp = fd;
	return ret;
}

/* what blkid finds on the device: 1 and a name, 0 nothing */
static int probe_signature(const char *path, char *what, size_t len)
{
	blkid_probe pr;
	const char *type = NULL;
	int rc, ret = 0, fd = -1;

	if (ub_dev_is_uri(path)) {
		ret = remote_copy(path, &fd);
		if (ret)
			return ret;
		pr = blkid_new_probe();
		if (pr && blkid_probe_set_device(pr, fd, 0, 0)) {
			blkid_free_probe(pr);
			pr = NULL;
		}
	} else {
		pr = blkid_new_probe_from_filename(path);
	}
	if (!pr) {
		ret = -errno ? -errno : -EIO;
		if (fd >= 0)
			close(fd);
		return ret;
	}
	blkid_probe_enable_superblocks(pr, 1);
	blkid_probe_set_superblocks_flags(pr, BLKID_SUBLKS_TYPE);
	blkid_probe_enable_partitions(pr, 1);
	blkid_probe_set_partitions_flags(pr, BLKID_PARTS_MAGIC);
	rc = blkid_do_safeprobe(pr);
	if (rc == 0) {
		if (!blkid_probe_lookup_value(pr, "TYPE", &type, NULL))
			snprintf(what, len, "a %s filesystem", type);
		else if (!blkid_probe_lookup_value(pr, "PTTYPE", &type, NULL))
			snprintf(what, len, "a %s partition table", type);
		else
			snprintf(what, len, "a known signature");
		ret = 1;
	} else if (rc == -2) {
		snprintf(what, len, "several filesystem signatures");
		ret = 1;
	} else if (rc < 0) {
		ret = -EIO;
	}
	blkid_free_probe(pr);
	if (fd >= 0)
		close(fd);
	return ret;
}

/*
 * The file behind a loop device, by its inode (the path the kernel shows may
 * name another file by now): false when `path` is no loop device or has no
 * backing file.
 */
static bool loop_backing(const char *path, dev_t *dev, ino_t *ino)
{
	struct loop_info64 li;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	bool ok;

	if (fd < 0)
		return false;
	ok = ioctl(fd, LOOP_GET_STATUS64, &li) == 0;
	close(fd);
	if (ok) {
		/* the kernel encodes the device number as stat(2) does */
		*dev = (dev_t)li.lo_device;
		*ino = (ino_t)li.lo_inode;
	}
	return ok;
}

/*
 * Do two paths name the same storage? A device by its number, a file by its
 * inode, and a loop device is also the file behind it: writing both would
 * write one file twice, as two devices of one filesystem.
 */
static bool same_storage(const struct stat *a, const struct stat *b, const bool *aloop, const struct stat *aback,
			 const bool *bloop, const struct stat *bback)
{
	if (S_ISBLK(a->st_mode) && S_ISBLK(b->st_mode) && a->st_rdev == b->st_rdev)
		return true;
	if (S_ISREG(a->st_mode) && S_ISREG(b->st_mode))
		return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
	/* file and loop device, or two loop devices of one file */
	if (*aloop && S_ISREG(b->st_mode))
		return aback->st_dev == b->st_dev && aback->st_ino == b->st_ino;
	if (*bloop && S_ISREG(a->st_mode))
		return bback->st_dev == a->st_dev && bback->st_ino == a->st_ino;
	return *aloop && *bloop && aback->st_dev == bback->st_dev && aback->st_ino == bback->st_ino;
}

int ub_mkfs_check_paths(const char *const *paths, int npaths, bool force, char *why, size_t whylen)
{
	struct devset busy = { 0 };
	const size_t n = (size_t)(npaths > 0 ? npaths : 1);
	struct stat *st = calloc(n, sizeof(*st)), *back = calloc(n, sizeof(*back));
	bool *loop = calloc(n, sizeof(*loop));
	int ret;

	if (!st || !back || !loop) {
		free(st);
		free(back);
		free(loop);
		return -ENOMEM;
	}
	for (int i = 0; i < npaths; i++) {
		/* a network device: no local mount or holder to look for; the same URI twice is refused */
		if (ub_dev_is_uri(paths[i])) {
			for (int j = 0; j < i; j++) {
				if (!strcmp(paths[i], paths[j])) {
					snprintf(why, whylen, "%s is given twice", paths[i]);
					ret = -EINVAL;
					goto out;
				}
			}
			continue;
		}
		if (stat(paths[i], &st[i])) {
			ret = -errno;
			snprintf(why, whylen, "cannot access %s: %s", paths[i], strerror(errno));
			goto out;
		}
		if (!S_ISBLK(st[i].st_mode) && !S_ISREG(st[i].st_mode)) {
			snprintf(why, whylen, "%s is neither a block device nor a regular file", paths[i]);
			ret = -EINVAL;
			goto out;
		}
		if (S_ISBLK(st[i].st_mode))
			loop[i] = loop_backing(paths[i], &back[i].st_dev, &back[i].st_ino);
		for (int j = 0; j < i; j++) {
			if (ub_dev_is_uri(paths[j]) ||
			    !same_storage(&st[i], &st[j], &loop[i], &back[i], &loop[j], &back[j]))
				continue;
			if (loop[i] && !S_ISBLK(st[j].st_mode))
				snprintf(why, whylen, "%s is given twice: %s is a loop device over it", paths[j], paths[i]);
			else if (loop[j] && !S_ISBLK(st[i].st_mode))
				snprintf(why, whylen, "%s is given twice: %s is a loop device over it", paths[i], paths[j]);
			else if (loop[i] && loop[j] && st[i].st_rdev != st[j].st_rdev)
				snprintf(why, whylen, "%s and %s are loop devices over one file: it is given twice", paths[j],
					 paths[i]);
			else
				snprintf(why, whylen, "%s is given twice (also as %s)", paths[i], paths[j]);
			ret = -EINVAL;
			goto out;
		}
	}

	ret = collect_mounted(&busy);
	if (ret) {
		snprintf(why, whylen, "cannot read the mount table: %s", strerror(-ret));
		goto out;
	}
	for (int i = 0; i < npaths; i++) {
		struct devset mine = { 0 };
		bool mounted = false;

		if (ub_dev_is_uri(paths[i]))
			continue;

		if (S_ISBLK(st[i].st_mode)) {
			ret = parts_and_holders(st[i].st_rdev, &mine);
		} else {
			struct devset loops = { 0 };

			ret = loops_of(&st[i], &loops);
			for (size_t k = 0; k < loops.n && !ret; k++)
				ret = parts_and_holders(loops.v[k], &mine);
			free(loops.v);
		}
		if (ret) {
			free(mine.v);
			snprintf(why, whylen, "cannot look at the users of %s: %s", paths[i], strerror(-ret));
			goto out;
		}
		for (size_t k = 0; k < mine.n; k++)
			mounted |= devset_has(&busy, mine.v[k]);
		free(mine.v);
		if (mounted) {
			snprintf(why, whylen, "%s holds a mounted filesystem%s", paths[i],
				 S_ISBLK(st[i].st_mode) ? "" : " (through a loop device)");
			ret = -EBUSY;
			goto out;
		}
		/* whatever the tables say: the kernel knows who holds a block device exclusively */
		if (S_ISBLK(st[i].st_mode)) {
			int fd = open(paths[i], O_RDONLY | O_EXCL | O_CLOEXEC);

			if (fd < 0 && errno == EBUSY) {
				snprintf(why, whylen, "%s is in use (mounted, or held by another program)", paths[i]);
				ret = -EBUSY;
				goto out;
			}
			if (fd >= 0)
				close(fd);
		}
	}

	if (!force) {
		for (int i = 0; i < npaths; i++) {
			char what[128];
			int rc = probe_signature(paths[i], what, sizeof(what));

			if (rc < 0) {
				snprintf(why, whylen, "cannot probe %s for an existing filesystem: %s", paths[i],
					 strerror(-rc));
				ret = rc;
				goto out;
			}
			if (rc) {
				snprintf(why, whylen, "%s already holds %s (use -f to overwrite it)", paths[i], what);
				ret = -EEXIST;
				goto out;
			}
		}
	}
	ret = 0;
out:
	free(busy.v);
	free(st);
	free(back);
	free(loop);
	return ret;
}
