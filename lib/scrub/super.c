/* SPDX-License-Identifier: MIT */
/*
 * The superblock copies of a device (64 KiB, 64 MiB, 256 GiB, those the
 * device is large enough for): each must validate, belong to this
 * filesystem and device, and be of the generation scrub reads (or newer: a
 * commit of a live filesystem may be under way). Scrub rewrites none of
 * them itself: with a writable engine the commit that ends the scrub writes
 * every copy of every device (scrub.c), as the kernel leaves them to its next
 * commit.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scrub/scrub_priv.h"

int sx_scrub_supers(struct sx_thread *t)
{
	struct ub_scrub *s = t->s;
	struct sx_dev *d = t->d;
	const uint64_t size = ub_dev_size(d->vd->dev);
	const uint64_t gen = ub_fs_view_generation(s->view);
	uint8_t *sb = malloc(UB_SUPER_INFO_SIZE);
	int bad = 0;

	if (!sb)
		return -ENOMEM;
	for (int m = 0; m < UB_SUPER_MIRROR_MAX; m++) {
		const uint64_t off = ub_super_offset(m);
		struct ub_scrub_problem p;
		char why[200] = "";
		int ret;

		if (off + UB_SUPER_INFO_SIZE > size)
			break;
		ret = sx_dev_read(t, d->vd, sb, UB_SUPER_INFO_SIZE, off);
		if (ret) {
			snprintf(why, sizeof(why), "superblock copy %d cannot be read: %s", m, strerror(-ret));
		} else if (ub_super_validate(sb, off, why, sizeof(why))) {
			char tmp[200];

			snprintf(tmp, sizeof(tmp), "superblock copy %d: %s", m, why);
			memcpy(why, tmp, sizeof(why));
		} else if (memcmp(UB_PTR(ub_disk_super, fsid, sb), s->vol->fsid, UB_FSID_SIZE)) {
			snprintf(why, sizeof(why), "superblock copy %d belongs to another filesystem", m);
		} else if (UB_GET(btrfs_dev_item, devid, UB_PTR(ub_disk_super, dev_item, sb)) != d->devid) {
			snprintf(why, sizeof(why), "superblock copy %d names devid %llu", m,
				 (unsigned long long)UB_GET(btrfs_dev_item, devid, UB_PTR(ub_disk_super, dev_item, sb)));
		} else if (UB_GET(ub_disk_super, generation, sb) < gen) {
			snprintf(why, sizeof(why), "superblock copy %d has generation %llu, the filesystem %llu", m,
				 (unsigned long long)UB_GET(ub_disk_super, generation, sb), (unsigned long long)gen);
		} else {
			continue;
		}
		bad++;
		memset(&p, 0, sizeof(p));
		p.kind = ret ? UB_SCRUB_READ_ERROR : UB_SCRUB_SUPER;
		p.devid = d->devid;
		p.dev_path = d->path;
		p.physical = off;
		p.length = UB_SUPER_INFO_SIZE;
		p.level = -1;
		p.detail = why;
		/* the closing commit of a repairing scrub writes every copy again (scrub.c) */
		p.outcome = s->opts.readonly ? UB_SCRUB_NOT_REPAIRED : s->e ? UB_SCRUB_REPAIRED : UB_SCRUB_UNREPAIRABLE;
		sx_report(t, d, &p, NULL);
	}
	free(sb);
	if (bad && s->e && !s->opts.readonly) {
		pthread_mutex_lock(&s->lock);
		s->supers_bad = true;
		pthread_mutex_unlock(&s->lock);
	}
	return 0;
}
