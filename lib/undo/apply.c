/* SPDX-License-Identifier: MIT */
/*
 * ub_undo_apply: read an undo file, match its device records to the devices
 * given, write every saved range back. Every byte of the file is untrusted:
 * the records are read up to the first that does not verify (a run cut short
 * was writing it), and nothing is written until every record has its device.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "ubtrfs/undo.h"
#include "ubtrfs/volume.h"
#include "undo/undo_file.h"

struct rec_dev {
	struct undo_disk_dev d;
	char path[4097];
	int match;            /* index into the paths, -1 while none */
	uint64_t size_now;    /* the matched device's size */
};

/* A RANGE record: where its data lies in the file. */
struct rec_range {
	uint64_t file_off;    /* of the payload */
	uint64_t offset;
	uint32_t len, dev;
	uint32_t crc;         /* the head's, checked again when the data is read back */
	struct undo_disk_rec head;
};

struct undo_read {
	const char *file;
	const struct ub_log *log;
	int fd;
	uint64_t fsize;
	uint8_t fsid[UB_FSID_SIZE];
	struct rec_dev *devs;
	int ndevs;
	struct rec_range *ranges;
	size_t nranges, cap;
	bool complete, cut;
};

static int pread_all(int fd, void *buf, size_t len, uint64_t off)
{
	uint8_t *p = buf;

	while (len) {
		ssize_t n = pread(fd, p, len, (off_t)off);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -ENODATA;
		p += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

static int read_header(struct undo_read *r)
{
	struct undo_disk_header h;
	int ret = pread_all(r->fd, &h, sizeof(h), 0);

	if (ret == -ENODATA || (!ret && memcmp(h.magic, UNDO_MAGIC, sizeof(h.magic)))) {
		ub_err(r->log, "%s: not an undo file (no ubtrfs undo header)", r->file);
		return -EUCLEAN;
	}
	if (ret) {
		ub_err(r->log, "%s: cannot read: %s", r->file, strerror(-ret));
		return ret;
	}
	if (UB_GET(undo_disk_header, crc, &h) != ub_undo_crc(&h, offsetof(struct undo_disk_header, crc))) {
		ub_err(r->log, "%s: the undo header's checksum does not match", r->file);
		return -EUCLEAN;
	}
	if (UB_GET(undo_disk_header, version, &h) != UNDO_VERSION ||
	    UB_GET(undo_disk_header, size, &h) != sizeof(h)) {
		ub_err(r->log, "%s: undo file version %" PRIu64 " (header %" PRIu64 " bytes) is not one this ubtrfs reads",
		       r->file, UB_GET(undo_disk_header, version, &h), UB_GET(undo_disk_header, size, &h));
		return -EUCLEAN;
	}
	memcpy(r->fsid, h.fsid, UB_FSID_SIZE);
	return 0;
}

static int add_range(struct undo_read *r, const struct undo_disk_rec *h, uint64_t file_off)
{
	struct rec_range *x;

	if (r->nranges == r->cap) {
		size_t cap = r->cap ? r->cap * 2 : 64;
		struct rec_range *v = realloc(r->ranges, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		r->ranges = v;
		r->cap = cap;
	}
	x = &r->ranges[r->nranges++];
	x->file_off = file_off;
	x->offset = UB_GET(undo_disk_rec, offset, h);
	x->len = (uint32_t)UB_GET(undo_disk_rec, len, h);
	x->dev = (uint32_t)UB_GET(undo_disk_rec, dev, h);
	x->crc = (uint32_t)UB_GET(undo_disk_rec, crc, h);
	x->head = *h;
	return 0;
}

/* One record at *off: 1 taken, 0 the list ends here (cut short or the trailer), <0 an error. */
static int read_record(struct undo_read *r, uint64_t *off, uint8_t *buf)
{
	struct undo_disk_rec h;
	uint32_t type, len, dev;
	int ret;

	if (*off == r->fsize)
		return 0;
	ret = pread_all(r->fd, &h, sizeof(h), *off);
	if (ret == -ENODATA)
		goto cut;
	if (ret)
		return ret;
	type = (uint32_t)UB_GET(undo_disk_rec, type, &h);
	len = (uint32_t)UB_GET(undo_disk_rec, len, &h);
	dev = (uint32_t)UB_GET(undo_disk_rec, dev, &h);
	if (len > UNDO_RANGE_MAX || *off + sizeof(h) + len > r->fsize)
		goto cut;
	ret = pread_all(r->fd, buf, len, *off + sizeof(h));
	if (ret == -ENODATA)
		goto cut;
	if (ret)
		return ret;
	if (UB_GET(undo_disk_rec, crc, &h) != ub_undo_rec_crc(&h, buf, len))
		goto cut;
	switch (type) {
	case UNDO_REC_DEV: {
		struct rec_dev *d, *v;
		uint32_t plen;

		if (len < sizeof(struct undo_disk_dev) || dev != (uint32_t)r->ndevs)
			goto bad;
		plen = (uint32_t)UB_GET(undo_disk_dev, path_len, buf);
		if (plen > 4096 || plen != len - sizeof(struct undo_disk_dev))
			goto bad;
		v = realloc(r->devs, (size_t)(r->ndevs + 1) * sizeof(*v));
		if (!v)
			return -ENOMEM;
		r->devs = v;
		d = &r->devs[r->ndevs++];
		memcpy(&d->d, buf, sizeof(d->d));
		memcpy(d->path, buf + sizeof(d->d), plen);
		d->path[plen] = 0;
		d->match = -1;
		break;
	}
	case UNDO_REC_RANGE:
		if (dev >= (uint32_t)r->ndevs || !len ||
		    UB_GET(undo_disk_rec, offset, &h) > UB_GET(undo_disk_dev, size, &r->devs[dev].d) ||
		    len > UB_GET(undo_disk_dev, size, &r->devs[dev].d) - UB_GET(undo_disk_rec, offset, &h))
			goto bad;
		ret = add_range(r, &h, *off + sizeof(h));
		if (ret)
			return ret;
		break;
	case UNDO_REC_END:
		r->complete = true;
		*off += sizeof(h) + len;
		return 0;
	default:
		goto bad;
	}
	*off += sizeof(h) + len;
	return 1;
bad:
	/* it verified, so the writer wrote it: a record it cannot have written is a file made by someone else */
	ub_err(r->log, "%s: the record at byte %" PRIu64 " (type %u) does not fit the file", r->file, *off, type);
	return -EUCLEAN;
cut:
	r->cut = true;
	return 0;
}

static int read_records(struct undo_read *r)
{
	uint64_t off = sizeof(struct undo_disk_header);
	uint8_t *buf = malloc(UNDO_RANGE_MAX + sizeof(struct undo_disk_dev));
	int ret;

	if (!buf)
		return -ENOMEM;
	while ((ret = read_record(r, &off, buf)) > 0)
		;
	free(buf);
	if (!ret && r->complete && off != r->fsize)
		ub_warn(r->log, "%s: %" PRIu64 " bytes after the trailer ignored", r->file, r->fsize - off);
	return ret;
}

/* What a device says it is now: the identities of its valid superblock copies, its primary's bytes. */
struct dev_now {
	int n;
	uint64_t devid[UB_SUPER_MIRROR_MAX];
	uint8_t uuid[UB_SUPER_MIRROR_MAX][UB_UUID_SIZE];
	uint8_t fsid[UB_SUPER_MIRROR_MAX][UB_FSID_SIZE];
	uint8_t primary[UB_SUPER_INFO_SIZE];
	uint64_t size;
};

static int probe_device(const char *path, struct dev_now *now)
{
	struct ub_dev *dev;
	uint8_t sb[UB_SUPER_INFO_SIZE];
	char why[160];
	int ret = ub_dev_open(path, false, &dev);

	if (ret)
		return ret;
	memset(now, 0, sizeof(*now));
	now->size = ub_dev_size(dev);
	for (int m = 0; m < UB_SUPER_MIRROR_MAX; m++) {
		uint64_t off = ub_super_offset(m);

		if (off + UB_SUPER_INFO_SIZE > now->size || ub_dev_read(dev, sb, sizeof(sb), off))
			continue;
		if (m == 0)
			memcpy(now->primary, sb, sizeof(sb));
		if (ub_super_validate(sb, off, why, sizeof(why)))
			continue;
		now->devid[now->n] = UB_GET(btrfs_dev_item, devid, UB_PTR(ub_disk_super, dev_item, sb));
		memcpy(now->uuid[now->n], UB_PTR(btrfs_dev_item, uuid, UB_PTR(ub_disk_super, dev_item, sb)), UB_UUID_SIZE);
		memcpy(now->fsid[now->n], UB_PTR(ub_disk_super, fsid, sb), UB_FSID_SIZE);
		now->n++;
	}
	ub_dev_close(dev);
	return 0;
}

static bool record_is(const struct rec_dev *d, const struct dev_now *now)
{
	if (UB_GET(undo_disk_dev, flags, &d->d) & UNDO_DEV_IDENTIFIED) {
		for (int i = 0; i < now->n; i++)
			if (now->devid[i] == UB_GET(undo_disk_dev, devid, &d->d) &&
			    !memcmp(now->uuid[i], d->d.uuid, UB_UUID_SIZE) && !memcmp(now->fsid[i], d->d.fsid, UB_FSID_SIZE))
				return true;
	}
	/* no valid copy now: the primary superblock still as it was saved (damaged the same way) */
	return now->n == 0 && !memcmp(now->primary, d->d.primary, UB_SUPER_INFO_SIZE);
}

static int match_devices(struct undo_read *r, const char *const *paths, int n)
{
	struct stat fst, st;
	int ret = 0, err;

	if (fstat(r->fd, &fst))
		return -errno;
	for (int i = 0; i < n; i++) {
		struct dev_now now;
		int found = -1;

		if (!stat(paths[i], &st) && st.st_dev == fst.st_dev && st.st_ino == fst.st_ino) {
			ub_err(r->log, "%s: is the undo file itself, not a device", paths[i]);
			ret = -EINVAL;
			continue;
		}
		err = probe_device(paths[i], &now);
		if (err) {
			ub_err(r->log, "%s: cannot open: %s", paths[i], strerror(-err));
			return err;
		}
		for (int k = 0; k < r->ndevs && found < 0; k++)
			if (record_is(&r->devs[k], &now))
				found = k;
		if (found < 0) {
			ub_err(r->log, "%s: matches no device of the undo file (not the device it was made for)", paths[i]);
			ret = -EINVAL;
			continue;
		}
		if (r->devs[found].match >= 0) {
			ub_err(r->log, "%s: is the same device as %s", paths[i], paths[r->devs[found].match]);
			ret = -EINVAL;
			continue;
		}
		r->devs[found].match = i;
		r->devs[found].size_now = now.size;
	}
	/* a device that shrank cannot take its old bytes back: refuse before anything is written */
	for (size_t i = 0; i < r->nranges; i++) {
		const struct rec_dev *d = &r->devs[r->ranges[i].dev];

		if (d->match < 0 || r->ranges[i].offset + r->ranges[i].len <= d->size_now)
			continue;
		ub_err(r->log, "%s: is %" PRIu64 " bytes, but the undo file holds bytes up to %" PRIu64 " (it was %" PRIu64
		       " bytes)", paths[d->match], d->size_now, r->ranges[i].offset + r->ranges[i].len,
		       UB_GET(undo_disk_dev, size, &d->d));
		if (!ret)
			ret = -ENOSPC;
		break;
	}
	for (int k = 0; k < r->ndevs; k++) {
		if (r->devs[k].match >= 0)
			continue;
		ub_err(r->log, "the device recorded as %s (devid %" PRIu64 ") was not given", r->devs[k].path,
		       UB_GET(undo_disk_dev, devid, &r->devs[k].d));
		if (!ret)
			ret = -ENODEV;
	}
	return ret;
}

/* Write every range back, device by device (each opened writable once). */
static int write_back(struct undo_read *r, const char *const *paths, struct ub_undo_stats *st)
{
	uint8_t *buf = malloc(UNDO_RANGE_MAX);
	int ret = 0;

	if (!buf)
		return -ENOMEM;
	for (int k = 0; !ret && k < r->ndevs; k++) {
		const char *path = paths[r->devs[k].match];
		struct ub_dev *dev;

		ret = ub_dev_open(path, true, &dev);
		if (ret) {
			ub_err(r->log, "%s: cannot open for writing: %s", path, strerror(-ret));
			break;
		}
		for (size_t i = 0; !ret && i < r->nranges; i++) {
			const struct rec_range *x = &r->ranges[i];

			if (x->dev != (uint32_t)k)
				continue;
			ret = pread_all(r->fd, buf, x->len, x->file_off);
			if (!ret && ub_undo_rec_crc(&x->head, buf, x->len) != x->crc)
				ret = -EIO; /* the file changed since it was read */
			if (ret) {
				ub_err(r->log, "%s: the range at byte %" PRIu64 " cannot be read back: %s", r->file,
				       x->file_off, strerror(-ret));
				break;
			}
			ret = ub_dev_write(dev, buf, x->len, x->offset);
			if (ret) {
				ub_err(r->log, "%s: writing %u bytes at %" PRIu64 " failed: %s", path, x->len, x->offset,
				       strerror(-ret));
				break;
			}
			st->ranges++;
			st->bytes += x->len;
		}
		if (!ret) {
			ret = ub_dev_flush(dev);
			if (ret)
				ub_err(r->log, "%s: flush failed: %s", path, strerror(-ret));
		}
		ub_dev_close(dev);
	}
	free(buf);
	return ret;
}

int ub_undo_apply(const char *file, const char *const *devpaths, int ndevs, bool dry_run, const struct ub_log *log,
		  struct ub_undo_stats *st)
{
	struct undo_read r;
	struct ub_undo_stats dummy;
	struct stat fst;
	int ret;

	if (!st)
		st = &dummy;
	memset(st, 0, sizeof(*st));
	if (!file || (ndevs && !devpaths) || ndevs < 0)
		return -EINVAL;
	memset(&r, 0, sizeof(r));
	r.file = file;
	r.log = log;
	r.fd = open(file, O_RDONLY | O_CLOEXEC);
	if (r.fd < 0) {
		ret = -errno;
		ub_err(log, "%s: cannot open: %s", file, strerror(-ret));
		return ret;
	}
	if (fstat(r.fd, &fst) || !S_ISREG(fst.st_mode)) {
		ub_err(log, "%s: not a regular file", file);
		close(r.fd);
		return -EUCLEAN;
	}
	r.fsize = (uint64_t)fst.st_size;
	ret = read_header(&r);
	if (!ret)
		ret = read_records(&r);
	if (!ret && !r.ndevs) {
		ub_err(log, "%s: records no device (the run that made it wrote nothing)", file);
		ret = -ENODATA;
	}
	st->records = r.ndevs;
	st->complete = r.complete;
	st->cut = r.cut;
	if (!ret)
		ret = match_devices(&r, devpaths, ndevs);
	for (int k = 0; k < r.ndevs; k++)
		st->devices += r.devs[k].match >= 0;
	if (!ret && dry_run) {
		for (size_t i = 0; i < r.nranges; i++) {
			st->ranges++;
			st->bytes += r.ranges[i].len;
		}
	} else if (!ret) {
		ret = write_back(&r, devpaths, st);
	}
	close(r.fd);
	free(r.devs);
	free(r.ranges);
	return ret;
}
