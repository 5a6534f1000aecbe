/* SPDX-License-Identifier: MIT */
/*
 * Superblock checks, read raw from every device (so they run also when the
 * filesystem cannot be opened): every copy the device's size calls for, its
 * fields, the backup roots, and the copies and devices against each other.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check/check_priv.h"

#define SB(field, p) UB_GET(ub_disk_super, field, p)
#define DI(field, p) UB_GET(btrfs_dev_item, field, (p) + offsetof(struct ub_disk_super, dev_item))
#define BK(field, p, i) \
	UB_GET(ub_disk_root_backup, field, (p) + offsetof(struct ub_disk_super, super_roots) + \
						 (size_t)(i) * sizeof(struct ub_disk_root_backup))

struct dev_super {
	const char *path;
	uint8_t sb[UB_SUPER_INFO_SIZE]; /* the first valid copy */
	bool valid;
	uint64_t size;
};

static void where_dev(struct ub_chk_problem *p, const struct dev_super *d, uint64_t physical)
{
	memset(p, 0, sizeof(*p));
	p->cls = UB_CHK_SUPER;
	p->path = d->path;
	p->devid = d->valid ? DI(devid, d->sb) : 0;
	p->physical = physical;
}

static bool aligned(uint64_t v, uint32_t to)
{
	return to && v % to == 0;
}

/* The fields ub_super_validate leaves to the checker, on a copy that passed it. */
static void check_fields(struct ub_checker *c, const struct dev_super *d, const uint8_t *sb, uint64_t off)
{
	uint32_t ss = (uint32_t)SB(sectorsize, sb);
	uint64_t gen = SB(generation, sb);
	const uint8_t *want_fsid = SB(incompat_flags, sb) & BTRFS_FEATURE_INCOMPAT_METADATA_UUID
					   ? UB_PTR(ub_disk_super, metadata_uuid, sb)
					   : UB_PTR(ub_disk_super, fsid, sb);
	struct ub_chk_problem p;
	bool current_ok = false;
	int current = -1;

	where_dev(&p, d, off);
	if (!SB(root, sb) || !aligned(SB(root, sb), ss))
		chk_report(c, &p, "superblock copy at %llu: root tree address %llu is not a sector-aligned address",
			   (unsigned long long)off, (unsigned long long)SB(root, sb));
	if (!SB(chunk_root, sb) || !aligned(SB(chunk_root, sb), ss))
		chk_report(c, &p, "superblock copy at %llu: chunk tree address %llu is not a sector-aligned address",
			   (unsigned long long)off, (unsigned long long)SB(chunk_root, sb));
	if (SB(log_root, sb) && !aligned(SB(log_root, sb), ss))
		chk_report(c, &p, "superblock copy at %llu: log tree address %llu is not sector-aligned",
			   (unsigned long long)off, (unsigned long long)SB(log_root, sb));
	if (SB(chunk_root_generation, sb) > gen)
		chk_report(c, &p, "superblock copy at %llu: chunk root generation %llu is newer than the superblock's %llu",
			   (unsigned long long)off, (unsigned long long)SB(chunk_root_generation, sb),
			   (unsigned long long)gen);
	if (SB(stripesize, sb) != ss)
		chk_report(c, &p, "superblock copy at %llu: stripesize %llu, the sector size is %u", (unsigned long long)off,
			   (unsigned long long)SB(stripesize, sb), ss);
	if (!SB(num_devices, sb))
		chk_report(c, &p, "superblock copy at %llu: num_devices is 0", (unsigned long long)off);
	if (SB(bytes_used, sb) > SB(total_bytes, sb))
		chk_report(c, &p, "superblock copy at %llu: bytes_used %llu exceeds total_bytes %llu",
			   (unsigned long long)off, (unsigned long long)SB(bytes_used, sb),
			   (unsigned long long)SB(total_bytes, sb));
	if (memcmp(UB_PTR(btrfs_dev_item, fsid, sb + offsetof(struct ub_disk_super, dev_item)), want_fsid,
		   UB_FSID_SIZE))
		chk_report(c, &p, "superblock copy at %llu: the device item's fsid is not the filesystem's",
			   (unsigned long long)off);
	if (DI(bytes_used, sb) > DI(total_bytes, sb))
		chk_report(c, &p, "superblock copy at %llu: device item bytes_used %llu exceeds its total_bytes %llu",
			   (unsigned long long)off, (unsigned long long)DI(bytes_used, sb),
			   (unsigned long long)DI(total_bytes, sb));
	for (int i = 0; i < UB_NUM_BACKUP_ROOTS; i++) {
		uint64_t bgen = BK(tree_root_gen, sb, i);

		if (!bgen && !BK(tree_root, sb, i))
			continue;
		if (bgen > gen || BK(chunk_root_gen, sb, i) > bgen)
			chk_report(c, &p, "superblock copy at %llu: backup root %d: generation %llu (chunk %llu) is newer than the superblock's %llu",
				   (unsigned long long)off, i, (unsigned long long)bgen,
				   (unsigned long long)BK(chunk_root_gen, sb, i), (unsigned long long)gen);
		if (!aligned(BK(tree_root, sb, i), ss) || !aligned(BK(chunk_root, sb, i), ss) ||
		    BK(tree_root_level, sb, i) >= UB_MAX_LEVEL || BK(chunk_root_level, sb, i) >= UB_MAX_LEVEL)
			chk_report(c, &p, "superblock copy at %llu: backup root %d: tree root %llu level %u, chunk root %llu level %u: invalid address or level",
				   (unsigned long long)off, i, (unsigned long long)BK(tree_root, sb, i),
				   (unsigned)BK(tree_root_level, sb, i), (unsigned long long)BK(chunk_root, sb, i),
				   (unsigned)BK(chunk_root_level, sb, i));
		if (bgen == gen) {
			if (BK(tree_root, sb, i) == SB(root, sb) && BK(chunk_root, sb, i) == SB(chunk_root, sb))
				current_ok = true;
			else if (current < 0)
				current = i;
		}
	}
	/* the kernel may commit one generation twice (two slots of it): one must be the superblock's */
	if (current >= 0 && !current_ok)
		chk_report(c, &p, "superblock copy at %llu: backup root %d of the current generation %llu names tree root %llu and chunk root %llu, the superblock %llu and %llu",
			   (unsigned long long)off, current, (unsigned long long)gen,
			   (unsigned long long)BK(tree_root, sb, current), (unsigned long long)BK(chunk_root, sb, current),
			   (unsigned long long)SB(root, sb), (unsigned long long)SB(chunk_root, sb));
}

static int read_device(struct ub_checker *c, struct dev_super *d)
{
	struct ub_dev *dev;
	uint8_t buf[UB_SUPER_MIRROR_MAX][UB_SUPER_INFO_SIZE];
	bool good[UB_SUPER_MIRROR_MAX] = { false };
	int newest = -1;
	struct ub_chk_problem p;
	char why[256];
	int ret = ub_dev_open(d->path, false, &dev);

	where_dev(&p, d, 0);
	if (ret) {
		chk_report(c, &p, "cannot open the device: %s", strerror(-ret));
		return 0;
	}
	d->size = ub_dev_size(dev);
	for (int m = 0; m < UB_SUPER_MIRROR_MAX; m++) {
		uint64_t off = ub_super_offset(m);

		if (off + UB_SUPER_INFO_SIZE > d->size)
			break;
		ret = ub_dev_read(dev, buf[m], sizeof(buf[m]), off);
		where_dev(&p, d, off);
		if (ret) {
			chk_report(c, &p, "superblock copy %d at %llu cannot be read: %s", m, (unsigned long long)off,
				   strerror(-ret));
			continue;
		}
		ret = ub_super_validate(buf[m], off, why, sizeof(why));
		/*
		 * A mirror copy without any magic was never written (btrfs-image
		 * restores and some tools write the primary only); one that is there
		 * but bad, or stale, is a problem.
		 */
		if (ret == -ENOENT && m > 0)
			continue;
		c->sum.superblocks++;
		if (ret) {
			chk_report(c, &p, "superblock copy %d at %llu: %s", m, (unsigned long long)off, why);
			continue;
		}
		good[m] = true;
		/*
		 * The newest copy of the first good copy's filesystem (the one the volume
		 * reads, unless an older filesystem's copy outlived a mkfs: then that
		 * one is the odd one out).
		 */
		if (newest < 0 || (!memcmp(UB_PTR(ub_disk_super, fsid, buf[m]), UB_PTR(ub_disk_super, fsid, buf[newest]),
					   UB_FSID_SIZE) &&
				   SB(generation, buf[m]) > SB(generation, buf[newest])))
			newest = m;
	}
	if (newest >= 0) {
		memcpy(d->sb, buf[newest], sizeof(d->sb));
		d->valid = true;
	}
	for (int m = 0; m < UB_SUPER_MIRROR_MAX; m++) {
		uint64_t off = ub_super_offset(m), gen;
		bool other_fs;

		if (!good[m])
			continue;
		where_dev(&p, d, off);
		gen = SB(generation, buf[m]);
		other_fs = memcmp(UB_PTR(ub_disk_super, fsid, buf[m]), UB_PTR(ub_disk_super, fsid, d->sb), UB_FSID_SIZE);
		/*
		 * A commit writes every copy of every device in turn: a crash between
		 * those writes leaves copies one commit behind, which the kernel and
		 * btrfs check accept and the next commit rewrites. More is a copy the
		 * commits missed.
		 */
		if (!other_fs && gen + 1 == SB(generation, d->sb))
			chk_note(c, "%s: superblock copy %d at %llu is one commit behind (generation %llu, the device's newest copy %llu): a crash between the superblock writes of a commit leaves this",
				 d->path, m, (unsigned long long)off, (unsigned long long)gen,
				 (unsigned long long)SB(generation, d->sb));
		else if (other_fs || gen != SB(generation, d->sb))
			chk_report(c, &p, "superblock copy %d at %llu: generation %llu, the device's newest copy's %llu%s", m,
				   (unsigned long long)off, (unsigned long long)gen,
				   (unsigned long long)SB(generation, d->sb), other_fs ? ", and another fsid" : "");
		check_fields(c, d, buf[m], off);
	}
	where_dev(&p, d, 0);
	if (d->valid && DI(total_bytes, d->sb) > d->size)
		chk_report(c, &p, "the device has %llu bytes, its device item says %llu", (unsigned long long)d->size,
			   (unsigned long long)DI(total_bytes, d->sb));
	ub_dev_close(dev);
	return 0;
}

/* The devices against each other and against the volume the filesystem assembled. */
static void compare_devices(struct ub_checker *c, struct dev_super *ds, int n, struct ub_fs *fs)
{
	const struct dev_super *newest = NULL;
	struct ub_chk_problem p;

	for (int i = 0; i < n; i++)
		if (ds[i].valid && (!newest || SB(generation, ds[i].sb) > SB(generation, newest->sb)))
			newest = &ds[i];
	for (int i = 0; i < n && newest; i++) {
		if (!ds[i].valid)
			continue;
		where_dev(&p, &ds[i], ub_super_offset(0));
		if (memcmp(UB_PTR(ub_disk_super, fsid, ds[i].sb), UB_PTR(ub_disk_super, fsid, newest->sb), UB_FSID_SIZE))
			chk_report(c, &p, "the device belongs to another filesystem than %s", newest->path);
		/* one commit behind: a crash between the devices' superblock writes (the volume reads it) */
		else if (SB(generation, ds[i].sb) + 1 == SB(generation, newest->sb))
			chk_note(c, "%s: the superblock is one commit behind (generation %llu, %s has %llu): a crash between the superblock writes of a commit leaves this",
				 ds[i].path, (unsigned long long)SB(generation, ds[i].sb), newest->path,
				 (unsigned long long)SB(generation, newest->sb));
		else if (SB(generation, ds[i].sb) != SB(generation, newest->sb))
			chk_report(c, &p, "stale superblock: generation %llu, %s has %llu (a device that missed commits)",
				   (unsigned long long)SB(generation, ds[i].sb), newest->path,
				   (unsigned long long)SB(generation, newest->sb));
		else if (SB(num_devices, ds[i].sb) != SB(num_devices, newest->sb))
			chk_report(c, &p, "num_devices %llu, %s says %llu", (unsigned long long)SB(num_devices, ds[i].sb),
				   newest->path, (unsigned long long)SB(num_devices, newest->sb));
		for (int j = 0; j < i; j++)
			if (ds[j].valid && DI(devid, ds[j].sb) == DI(devid, ds[i].sb))
				chk_report(c, &p, "devid %llu is also the devid of %s",
					   (unsigned long long)DI(devid, ds[i].sb), ds[j].path);
	}
	if (!fs)
		return;
	{
		struct ub_device_info *devs = NULL;
		struct ub_volume_info vi;
		int nd = 0;

		if (ub_volume_get_info(ub_fs_volume(fs), &vi) || ub_volume_list_devices(ub_fs_volume(fs), &devs, &nd))
			return;
		memset(&p, 0, sizeof(p));
		p.cls = UB_CHK_SUPER;
		for (int i = 0; i < nd; i++) {
			p.devid = devs[i].devid;
			if (devs[i].missing)
				chk_report(c, &p, "devid %llu is missing (in the chunk tree, not among the devices)",
					   (unsigned long long)devs[i].devid);
		}
		p.devid = 0;
		if ((uint64_t)nd != vi.num_devices) {
			/* the device items are the filesystem's devices (the kernel's mount counts them) */
			p.fix = nd > 0 ? UB_CHK_FIX_NUM_DEVICES : UB_CHK_FIX_NONE;
			p.want = (uint64_t)nd;
			chk_report(c, &p, "the superblock counts %llu devices, the chunk tree has %d device items",
				   (unsigned long long)vi.num_devices, nd);
		}
		free(devs);
	}
}

/* Whether two device paths name one device (a block device by its number, a file by its inode). */
static bool same_device(const char *a, const char *b)
{
	struct stat x, y;

	if (stat(a, &x) || stat(b, &y))
		return !strcmp(a, b);
	if (S_ISBLK(x.st_mode) || S_ISBLK(y.st_mode))
		return S_ISBLK(x.st_mode) && S_ISBLK(y.st_mode) && x.st_rdev == y.st_rdev;
	return x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

int ub_checker_supers(struct ub_checker *c, const char *const *paths, int npaths, struct ub_fs *fs)
{
	struct ub_device_info *devs = NULL;
	struct dev_super *ds;
	int n = 0, nvol = 0, ret = 0;

	if (fs) {
		ret = ub_volume_list_devices(ub_fs_volume(fs), &devs, &nvol);
		if (ret)
			return ret;
	}
	ds = calloc((size_t)nvol + (size_t)(npaths > 0 ? npaths : 0) + 1, sizeof(*ds));
	if (!ds) {
		free(devs);
		return -ENOMEM;
	}
	for (int i = 0; i < nvol; i++)
		ds[n++].path = devs[i].path; /* NULL: missing, compare_devices says so */
	/* the devices given that the volume left out (another filesystem's, or stale) are read too */
	for (int i = 0; i < npaths; i++) {
		bool known = false;

		for (int j = 0; j < nvol && !known; j++)
			known = devs[j].path && same_device(devs[j].path, paths[i]);
		if (!known)
			ds[n++].path = paths[i];
	}
	for (int i = 0; i < n; i++) {
		if (!ds[i].path)
			continue;
		chk_progress(c, "superblocks", (uint64_t)i, (uint64_t)n);
		read_device(c, &ds[i]);
	}
	compare_devices(c, ds, n, fs);
	if (fs) {
		free(c->dev_supers);
		c->ndev_supers = 0;
		c->dev_supers = calloc((size_t)(nvol ? nvol : 1), sizeof(*c->dev_supers));
		/* the volume's own devices only: their superblocks against the chunk tree */
		for (int i = 0; c->dev_supers && i < nvol; i++) {
			struct chk_dev_super *e;

			if (!ds[i].valid)
				continue;
			e = &c->dev_supers[c->ndev_supers++];
			e->devid = DI(devid, ds[i].sb);
			e->total_bytes = DI(total_bytes, ds[i].sb);
			memcpy(e->uuid, UB_PTR(btrfs_dev_item, uuid, ds[i].sb + offsetof(struct ub_disk_super, dev_item)),
			       UB_UUID_SIZE);
			e->path = ds[i].path;
		}
	}
	free(ds);
	free(devs);
	return ret;
}
