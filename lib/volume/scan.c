/* SPDX-License-Identifier: MIT */
/* The block devices of btrfs filesystems, by libblkid and our own superblock checks. */
#include <blkid/blkid.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ubtrfs/scan.h"
#include "volume_internal.h"

#define SB(field, sb) UB_GET(ub_disk_super, field, sb)
#define DI(field, p) UB_GET(btrfs_dev_item, field, p)

/* the library's own complaint about a device, kept to be said once as a warning */
static void keep_reason(void *arg, enum ub_log_level lvl, const char *msg)
{
	if (lvl == UB_LOG_ERROR)
		snprintf(arg, 200, "%s", msg);
}

static struct ub_scan_fs *fs_for(struct ub_scan *scan, const uint8_t *fsid)
{
	struct ub_scan_fs *n;

	for (int i = 0; i < scan->nfs; i++)
		if (!memcmp(scan->fs[i].fsid, fsid, UB_FSID_SIZE))
			return &scan->fs[i];
	n = realloc(scan->fs, (size_t)(scan->nfs + 1) * sizeof(*n));
	if (!n)
		return NULL;
	scan->fs = n;
	n = &scan->fs[scan->nfs++];
	memset(n, 0, sizeof(*n));
	memcpy(n->fsid, fsid, UB_FSID_SIZE);
	return n;
}

static int add_device(struct ub_scan *scan, const char *path, const uint8_t *sb, const struct ub_log *log)
{
	const uint8_t *di = UB_PTR(ub_disk_super, dev_item, sb);
	struct ub_scan_fs *fs = fs_for(scan, UB_PTR(ub_disk_super, fsid, sb));
	struct ub_scan_dev *d = NULL;
	uint64_t devid = DI(devid, di), gen = SB(generation, sb);
	char *p;

	if (!fs)
		return -ENOMEM;
	for (int i = 0; i < fs->ndevs; i++)
		if (fs->devs[i].devid == devid)
			d = &fs->devs[i];
	if (d) {
		const char *stale = d->generation >= gen ? path : d->path;
		ub_warn(log, "%s: devid %llu is also on %s at a newer generation; this stale copy is ignored", stale,
			(unsigned long long)devid, d->generation >= gen ? d->path : path);
		if (d->generation >= gen)
			return 0;
		free(d->path);
		d->path = NULL;
	} else {
		struct ub_scan_dev *n = realloc(fs->devs, (size_t)(fs->ndevs + 1) * sizeof(*n));
		if (!n)
			return -ENOMEM;
		fs->devs = n;
		/* kept in devid order */
		int at = fs->ndevs;
		while (at > 0 && fs->devs[at - 1].devid > devid) {
			fs->devs[at] = fs->devs[at - 1];
			at--;
		}
		fs->ndevs++;
		d = &fs->devs[at];
	}
	p = strdup(path);
	if (!p)
		return -ENOMEM;
	d->path = p;
	d->devid = devid;
	d->generation = gen;
	d->total_bytes = DI(total_bytes, di);
	if (gen >= fs->generation) {
		fs->generation = gen;
		fs->num_devices = SB(num_devices, sb);
		fs->bytes_used = SB(bytes_used, sb);
		memcpy(fs->label, UB_PTR(ub_disk_super, label, sb), UB_LABEL_SIZE);
		fs->label[UB_LABEL_SIZE] = '\0';
	}
	return 0;
}

/* One candidate: skipped unless it names `fsid` (when given), kept only if its superblock passes. */
static int probe_one(struct ub_scan *scan, const char *path, const uint8_t *fsid, const struct ub_log *log)
{
	uint8_t sb[UB_SUPER_INFO_SIZE];
	char why[200] = "";
	struct ub_log keep = { .fn = keep_reason, .arg = why, .verbosity = UB_LOG_ERROR };
	struct ub_dev *dev;
	int mirror, ret;

	if (ub_dev_open(path, false, &dev))
		return 0; /* gone since blkid saw it, or not ours to read */
	if (fsid && (ub_dev_read(dev, sb, sizeof(sb), ub_super_offset(0)) ||
		     (SB(magic, sb) == UB_MAGIC && memcmp(UB_PTR(ub_disk_super, fsid, sb), fsid, UB_FSID_SIZE)))) {
		ub_dev_close(dev);
		return 0;
	}
	ret = ub_volume_read_super(dev, -1, &keep, sb, &mirror);
	ub_dev_close(dev);
	if (ret) {
		ub_warn(log, "%s: blkid says btrfs, but the superblock fails our checks; ignored (%s)", path, why);
		return 0;
	}
	if (fsid && memcmp(UB_PTR(ub_disk_super, fsid, sb), fsid, UB_FSID_SIZE))
		return 0;
	return add_device(scan, path, sb, log);
}

int ub_scan_block_devices(const uint8_t *fsid, const struct ub_log *log, struct ub_scan **out)
{
	struct ub_scan *scan = calloc(1, sizeof(*scan));
	blkid_cache cache = NULL;
	blkid_dev_iterate it;
	blkid_dev bdev;
	int ret = 0;

	if (!scan)
		return -ENOMEM;
	/* no cache file: a remembered answer could name a device that has changed since */
	if (blkid_get_cache(&cache, "/dev/null") < 0 || blkid_probe_all(cache) < 0) {
		ub_err(log, "libblkid cannot list the block devices");
		ret = -EIO;
		goto out;
	}
	it = blkid_dev_iterate_begin(cache);
	blkid_dev_set_search(it, "TYPE", "btrfs");
	while (!ret && blkid_dev_next(it, &bdev) == 0)
		ret = probe_one(scan, blkid_dev_devname(bdev), fsid, log);
	blkid_dev_iterate_end(it);
out:
	if (cache)
		blkid_put_cache(cache);
	if (ret)
		ub_scan_free(scan);
	else
		*out = scan;
	return ret;
}

void ub_scan_free(struct ub_scan *scan)
{
	if (!scan)
		return;
	for (int i = 0; i < scan->nfs; i++) {
		for (int j = 0; j < scan->fs[i].ndevs; j++)
			free(scan->fs[i].devs[j].path);
		free(scan->fs[i].devs);
	}
	free(scan->fs);
	free(scan);
}

int ub_scan_identify(const char *path, const struct ub_log *log, uint8_t *fsid, uint64_t *devid, uint64_t *num_devices)
{
	uint8_t sb[UB_SUPER_INFO_SIZE];
	struct ub_dev *dev;
	int mirror, ret = ub_dev_open(path, false, &dev);

	if (ret)
		return ret;
	ret = ub_volume_read_super(dev, -1, log, sb, &mirror);
	ub_dev_close(dev);
	if (ret)
		return ret;
	memcpy(fsid, UB_PTR(ub_disk_super, fsid, sb), UB_FSID_SIZE);
	*devid = DI(devid, UB_PTR(ub_disk_super, dev_item, sb));
	*num_devices = SB(num_devices, sb);
	return 0;
}
