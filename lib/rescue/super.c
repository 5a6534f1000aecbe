/* SPDX-License-Identifier: MIT */
/*
 * rescue super-recover: every superblock copy of every device read raw and
 * judged; the bad and stale ones rewritten from the newest valid copy by the
 * volume layer's superblock writer (each device's own dev item, bytenr,
 * checksum), as btrfs rescue super-recover does.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ubtrfs/rescue.h"
#include "volume/volume_priv.h"

#define SB(f, p) UB_GET(ub_disk_super, f, p)

void ub_sb_survey_free(struct ub_sb_survey *s)
{
	if (!s)
		return;
	for (int i = 0; i < s->ndevs; i++)
		free(s->dev[i].path);
	free(s->dev);
	memset(s, 0, sizeof(*s));
}

/* One device's copies; its newest valid one into `newest` (generation 0 when none). */
static void survey_dev(struct ub_dev *dev, struct ub_sb_dev *d, uint8_t *newest, uint8_t *buf)
{
	uint64_t best = 0, size = ub_dev_size(dev);

	for (int m = 0; m < UB_SUPER_MIRROR_MAX; m++) {
		struct ub_sb_copy *c = &d->copy[m];
		int ret;

		c->bytenr = ub_super_offset(m);
		if (c->bytenr + UB_SUPER_INFO_SIZE > size) {
			c->state = UB_SB_ABSENT;
			continue;
		}
		ret = ub_dev_read(dev, buf, UB_SUPER_INFO_SIZE, c->bytenr);
		if (ret) {
			c->state = UB_SB_BAD;
			snprintf(c->why, sizeof(c->why), "cannot be read: %s", strerror(-ret));
			continue;
		}
		if (ub_super_validate(buf, c->bytenr, c->why, sizeof(c->why))) {
			c->state = UB_SB_BAD;
			continue;
		}
		c->state = UB_SB_GOOD;
		c->generation = SB(generation, buf);
		if (c->generation > best) {
			best = c->generation;
			memcpy(newest, buf, UB_SUPER_INFO_SIZE);
		}
	}
	if (!best)
		UB_SET(ub_disk_super, generation, newest, 0);
}

int ub_rescue_super_survey(struct ub_dev *const *devs, int ndevs, const struct ub_log *log, struct ub_sb_survey *s)
{
	uint8_t *newest = NULL, *buf = NULL;
	int ret = 0;

	memset(s, 0, sizeof(*s));
	s->best_dev = s->best_mirror = -1;
	if (ndevs <= 0)
		return -EINVAL;
	s->dev = calloc((size_t)ndevs, sizeof(*s->dev));
	newest = calloc((size_t)ndevs, UB_SUPER_INFO_SIZE);
	buf = malloc(UB_SUPER_INFO_SIZE);
	if (!s->dev || !newest || !buf) {
		ret = -ENOMEM;
		goto out;
	}
	s->ndevs = ndevs;
	for (int i = 0; i < ndevs; i++) {
		uint8_t *nw = newest + (size_t)i * UB_SUPER_INFO_SIZE;

		s->dev[i].path = strdup(ub_dev_path(devs[i]));
		if (!s->dev[i].path) {
			ret = -ENOMEM;
			goto out;
		}
		survey_dev(devs[i], &s->dev[i], nw, buf);
		if (SB(generation, nw) > s->generation) {
			s->generation = SB(generation, nw);
			s->best_dev = i;
			for (int m = 0; m < UB_SUPER_MIRROR_MAX; m++)
				if (s->dev[i].copy[m].state == UB_SB_GOOD && s->dev[i].copy[m].generation == s->generation &&
				    s->best_mirror < 0)
					s->best_mirror = m;
			memcpy(s->best, nw, UB_SUPER_INFO_SIZE);
		}
	}
	if (!s->generation)
		goto out;
	memcpy(s->fsid, UB_PTR(ub_disk_super, fsid, s->best), UB_FSID_SIZE);
	for (int i = 0; i < ndevs; i++) {
		struct ub_sb_dev *d = &s->dev[i];
		const uint8_t *nw = newest + (size_t)i * UB_SUPER_INFO_SIZE;
		uint64_t total;

		if (!SB(generation, nw)) {
			ub_err(log, "%s: no valid superblock copy: nothing tells which device of the filesystem it is",
			       d->path);
			s->unrecoverable++;
			continue;
		}
		if (memcmp(UB_PTR(ub_disk_super, fsid, nw), s->fsid, UB_FSID_SIZE)) {
			char a[UB_UUID_STR_LEN], b[UB_UUID_STR_LEN];

			ub_uuid_str(UB_PTR(ub_disk_super, fsid, nw), a);
			ub_uuid_str(s->fsid, b);
			ub_err(log, "%s: belongs to another filesystem (fsid %s, not %s)", d->path, a, b);
			d->foreign = true;
			s->unrecoverable++;
			continue;
		}
		d->devid = UB_GET(btrfs_dev_item, devid, UB_PTR(ub_disk_super, dev_item, nw));
		/* btrfs writes no copy past the device's size in the filesystem, whatever the device's own size */
		total = UB_GET(btrfs_dev_item, total_bytes, UB_PTR(ub_disk_super, dev_item, nw));
		for (int m = 0; m < UB_SUPER_MIRROR_MAX; m++) {
			struct ub_sb_copy *c = &d->copy[m];

			if (c->state != UB_SB_ABSENT && total && c->bytenr + UB_SUPER_INFO_SIZE > total)
				c->state = UB_SB_ABSENT;
			if (c->state == UB_SB_GOOD && c->generation < s->generation)
				c->state = UB_SB_STALE;
			s->to_rewrite += c->state == UB_SB_BAD || c->state == UB_SB_STALE;
		}
	}
out:
	free(newest);
	free(buf);
	if (ret)
		ub_sb_survey_free(s);
	return ret;
}

static bool want_copy(void *arg, uint64_t devid, int mirror)
{
	const struct ub_sb_survey *s = arg;

	for (int i = 0; i < s->ndevs; i++) {
		const struct ub_sb_dev *d = &s->dev[i];

		if (d->devid == devid && !d->foreign)
			return d->copy[mirror].state == UB_SB_BAD || d->copy[mirror].state == UB_SB_STALE;
	}
	return false;
}

int ub_rescue_super_recover(struct ub_dev *const *devs, int ndevs, const struct ub_log *log, struct ub_sb_survey *out,
			    int *rewritten)
{
	struct ub_volume_opts vo = { .writable = true, .super_mirror = -1 };
	struct ub_sb_survey s;
	struct ub_volume *vol = NULL;
	int ret, written = 0;

	if (rewritten)
		*rewritten = 0;
	ret = ub_rescue_super_survey(devs, ndevs, log, &s);
	if (ret) {
		for (int i = 0; i < ndevs; i++)
			ub_dev_close(devs[i]);
		return ret;
	}
	if (!s.generation) {
		ub_err(log, "no valid superblock copy on any device: nothing to recover from");
		ret = -ENOENT;
		for (int i = 0; i < ndevs; i++)
			ub_dev_close(devs[i]);
		goto out;
	}
	/* the volume takes the devices over; it reads each device's newest valid copy as its own */
	ret = ub_volume_open_devs(devs, ndevs, &vo, log, &vol);
	if (ret) {
		ub_err(log, "the devices do not make a filesystem to write superblocks to: %s", strerror(-ret));
		goto out;
	}
	if (s.to_rewrite)
		ret = ub_volume_write_super_copies(vol, s.best, want_copy, &s, &written);
	if (!ret && written < s.to_rewrite)
		ub_warn(log, "%d of %d copies rewritten (a device was left out of the filesystem)", written, s.to_rewrite);
	ub_volume_close(vol);
out:
	if (rewritten)
		*rewritten = written;
	if (out)
		*out = s;
	else
		ub_sb_survey_free(&s);
	return ret;
}
