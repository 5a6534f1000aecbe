/* SPDX-License-Identifier: MIT */
/* Device assembly, the system chunk array, and reads by logical address. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include "volume_internal.h"

#define SB(field, sb) UB_GET(ub_disk_super, field, sb)
#define DI(field, p) UB_GET(btrfs_dev_item, field, p)

struct candidate {
	struct ub_dev *dev;
	uint8_t super[UB_SUPER_INFO_SIZE];
	int mirror;
	bool used;
};

int ub_volume_read_super(struct ub_dev *dev, int want_mirror, const struct ub_log *log, uint8_t *super, int *mirror)
{
	uint8_t buf[UB_SUPER_INFO_SIZE];
	char why[160], first_why[160] = "";
	uint64_t best_gen = 0;
	int best = -1, ret = -ENOENT;

	for (int m = 0; m < UB_SUPER_MIRROR_MAX; m++) {
		uint64_t off = ub_super_offset(m);
		int r;

		if (want_mirror >= 0 && m != want_mirror)
			continue;
		if (off + UB_SUPER_INFO_SIZE > dev->size)
			break;
		r = ub_dev_read(dev, buf, sizeof(buf), off);
		if (r == 0)
			r = ub_super_validate(buf, off, why, sizeof(why));
		else
			snprintf(why, sizeof(why), "read error: %s", strerror(-r));
		if (r) {
			if (m == 0 || want_mirror >= 0) {
				snprintf(first_why, sizeof(first_why), "%s", why);
				ret = r;
			}
			if (r != -ENOENT && m > 0)
				ub_warn(log, "%s: superblock mirror %d at %llu is invalid: %s", dev->path, m,
					(unsigned long long)off, why);
			continue;
		}
		if (best < 0 || SB(generation, buf) > best_gen) {
			best = m;
			best_gen = SB(generation, buf);
			memcpy(super, buf, sizeof(buf));
		}
	}
	if (best < 0) {
		if (want_mirror >= 0)
			ub_err(log, "%s: superblock mirror %d: %s", dev->path, want_mirror,
			       first_why[0] ? first_why : "beyond the end of the device");
		else
			ub_err(log, "%s: no valid btrfs superblock (primary: %s)", dev->path,
			       first_why[0] ? first_why : "unreadable");
		return ret == 0 ? -EUCLEAN : ret;
	}
	if (first_why[0] && want_mirror < 0)
		ub_warn(log, "%s: primary superblock is invalid (%s); using mirror %d at %llu (generation %llu)",
			dev->path, first_why, best, (unsigned long long)ub_super_offset(best),
			(unsigned long long)best_gen);
	*mirror = best;
	return 0;
}

static int load_sys_chunk_array(struct ub_volume *vol)
{
	const uint8_t *arr = UB_PTR(ub_disk_super, sys_chunk_array, vol->super);
	uint32_t size = (uint32_t)SB(sys_chunk_array_size, vol->super), pos = 0;
	const uint32_t hdr = (uint32_t)offsetof(struct btrfs_chunk, stripe);

	while (pos < size) {
		struct ub_key key;
		uint32_t num, isz;
		int ret;

		if (size - pos < UB_DISK_KEY_SIZE + hdr) {
			ub_err(&vol->log, "system chunk array: truncated entry at offset %u", pos);
			return -EUCLEAN;
		}
		ub_key_read(&key, arr + pos);
		pos += UB_DISK_KEY_SIZE;
		if (key.type != BTRFS_CHUNK_ITEM_KEY) {
			ub_err(&vol->log, "system chunk array: unexpected key type %u at offset %u", key.type,
			       pos - UB_DISK_KEY_SIZE);
			return -EUCLEAN;
		}
		num = (uint32_t)UB_GET(btrfs_chunk, num_stripes, arr + pos);
		isz = hdr + num * (uint32_t)sizeof(struct btrfs_stripe);
		if (num == 0 || isz > size - pos) {
			ub_err(&vol->log, "system chunk array: chunk at logical %llu with %u stripes overruns the array",
			       (unsigned long long)key.offset, num);
			return -EUCLEAN;
		}
		ret = ub_volume_add_chunk(vol, key.offset, arr + pos, isz);
		if (ret)
			return ret;
		pos += isz;
	}
	if (vol->nchunks == 0) {
		ub_err(&vol->log, "system chunk array is empty");
		return -EUCLEAN;
	}
	return 0;
}

/* Everything the volume derives from its (validated) superblock, the system chunks included. */
static int init_from_super(struct ub_volume *vol)
{
	memcpy(vol->fsid, UB_PTR(ub_disk_super, fsid, vol->super), UB_FSID_SIZE);
	if (SB(incompat_flags, vol->super) & BTRFS_FEATURE_INCOMPAT_METADATA_UUID)
		memcpy(vol->metadata_uuid, UB_PTR(ub_disk_super, metadata_uuid, vol->super), UB_FSID_SIZE);
	else
		memcpy(vol->metadata_uuid, vol->fsid, UB_FSID_SIZE);
	vol->csum_type = (unsigned)SB(csum_type, vol->super);
	vol->csum_size = ub_csum_size(vol->csum_type);
	vol->sectorsize = (uint32_t)SB(sectorsize, vol->super);
	vol->nodesize = (uint32_t)SB(nodesize, vol->super);
	vol->generation = SB(generation, vol->super);
	vol->num_devices = SB(num_devices, vol->super);
	return load_sys_chunk_array(vol);
}

int ub_volume_open_super(const uint8_t *sb, const struct ub_log *log, struct ub_volume **out)
{
	struct ub_volume *vol = calloc(1, sizeof(*vol));
	char why[160];
	int ret;

	if (!vol)
		return -ENOMEM;
	if (log)
		vol->log = *log;
	else
		vol->log.verbosity = UB_LOG_WARN;
	memcpy(vol->super, sb, UB_SUPER_INFO_SIZE);
	ret = ub_super_validate(sb, UB_GET(ub_disk_super, bytenr, sb), why, sizeof(why));
	if (ret) {
		ub_err(&vol->log, "superblock: %s", why);
		goto out;
	}
	ret = init_from_super(vol);
out:
	if (ret)
		ub_volume_close(vol);
	else
		*out = vol;
	return ret;
}

static int add_vdev(struct ub_volume *vol, uint64_t devid, const uint8_t *uuid, uint64_t total, struct ub_dev *dev,
		    uint64_t gen)
{
	struct ub_vdev *n;

	if (vol->nvdevs == vol->vdevs_cap) {
		/* only while the volume is assembled, before any reader: see volume_priv.h */
		int cap = vol->vdevs_cap ? vol->vdevs_cap * 2 : UB_VOLUME_DEVS_ROOM;

		n = realloc(vol->vdevs, (size_t)cap * sizeof(*n));
		if (!n)
			return -ENOMEM;
		vol->vdevs = n;
		vol->vdevs_cap = cap;
	}
	n = &vol->vdevs[vol->nvdevs];
	memset(n, 0, sizeof(*n));
	n->devid = devid;
	memcpy(n->uuid, uuid, UB_UUID_SIZE);
	n->total_bytes = total;
	n->dev = dev;
	n->generation = gen;
	n->missing = dev == NULL;
	n->log = &vol->log;
	UB_SET(btrfs_dev_item, devid, n->item, devid);
	UB_SET(btrfs_dev_item, total_bytes, n->item, total);
	memcpy(n->item + offsetof(struct btrfs_dev_item, uuid), uuid, UB_UUID_SIZE);
	/* readers that count devices see the entry whole */
	__atomic_store_n(&vol->nvdevs, vol->nvdevs + 1, __ATOMIC_RELEASE);
	return 0;
}

/*
 * Devices the system chunks need but that were not given: known (devid and
 * uuid) before the chunk tree is read, so they can be named even when the
 * chunk tree itself is out of reach.
 */
static int note_missing_sys_devices(struct ub_volume *vol)
{
	for (int i = 0; i < vol->nchunks; i++) {
		const struct ub_chunk *c = vol->chunks[i];
		for (int j = 0; j < c->num_stripes; j++) {
			bool known = false;
			int ret;
			for (int k = 0; k < vol->nvdevs; k++)
				known |= vol->vdevs[k].devid == c->stripes[j].devid;
			if (known)
				continue;
			ret = add_vdev(vol, c->stripes[j].devid, c->stripes[j].dev_uuid, 0, NULL, 0);
			if (ret)
				return ret;
		}
	}
	for (int i = 0; i < vol->nchunks; i++)
		ub_chunk_bind(vol, vol->chunks[i]);
	return 0;
}



/*
 * Take candidate c into the volume (pass 0: devices at the filesystem's
 * generation; pass 1: devices one commit behind). A commit flushes every block
 * it writes before any of its superblocks, so a device whose superblock is one
 * commit behind (a crash between the superblock writes of a commit, as the
 * kernel also finds it) holds the newer commit's blocks, or, if it missed them,
 * fails the generation and checksum checks every read makes. Older devices
 * are stale.
 */
static int assemble_one(struct ub_volume *vol, struct candidate *c, int pass)
{
	const uint8_t *s = c->super;
	const uint8_t *di = UB_PTR(ub_disk_super, dev_item, s);
	uint64_t devid, gen = SB(generation, s);
	bool dup = false, behind = gen + 1 == vol->generation_hint;
	char u1[40], u2[40];
	int ret;

	if (!c->dev || c->used)
		return 0;
	if (memcmp(UB_PTR(ub_disk_super, fsid, s), UB_PTR(ub_disk_super, fsid, vol->super), UB_FSID_SIZE)) {
		if (pass == 0) {
			ub_uuid_str(UB_PTR(ub_disk_super, fsid, s), u1);
			ub_uuid_str(UB_PTR(ub_disk_super, fsid, vol->super), u2);
			ub_warn(&vol->log, "%s: belongs to another filesystem (fsid %s, not %s); ignored", c->dev->path,
				u1, u2);
		}
		return 0;
	}
	if ((pass == 0) == behind)
		return 0;
	devid = DI(devid, di);
	for (int j = 0; j < vol->nvdevs; j++)
		dup |= vol->vdevs[j].devid == devid;
	if (dup) {
		ub_warn(&vol->log, "%s: devid %llu given twice; %signored", c->dev->path, (unsigned long long)devid,
			behind ? "this copy is stale (one commit behind); " : "");
		return 0;
	}
	if (gen < vol->generation_hint && !behind) {
		ub_warn(&vol->log, "%s: devid %llu is stale (generation %llu, filesystem at %llu); ignored",
			c->dev->path, (unsigned long long)devid, (unsigned long long)gen,
			(unsigned long long)vol->generation_hint);
		return 0;
	}
	if (behind)
		ub_warn(&vol->log, "%s: devid %llu is one commit behind (generation %llu, filesystem at %llu): used, "
			"its blocks checked against the generations the trees expect", c->dev->path,
			(unsigned long long)devid, (unsigned long long)gen, (unsigned long long)vol->generation_hint);
	if (DI(total_bytes, di) > c->dev->size)
		ub_warn(&vol->log, "%s: devid %llu claims %llu bytes but the device has %llu; reads past its end "
			"will fail", c->dev->path, (unsigned long long)devid,
			(unsigned long long)DI(total_bytes, di), (unsigned long long)c->dev->size);
	ret = add_vdev(vol, devid, UB_PTR(btrfs_dev_item, uuid, di), DI(total_bytes, di), c->dev, gen);
	if (ret)
		return ret;
	memcpy(vol->vdevs[vol->nvdevs - 1].item, di, sizeof(struct btrfs_dev_item));
	c->used = true;
	return 0;
}

/* Keep devices of one filesystem, one per devid, newest generation first; say why others are left out. */
static int assemble(struct ub_volume *vol, struct candidate *c, int n)
{
	int lead = -1, best_count = 0, ret = 0;
	const uint8_t *fsid = NULL;

	/* the filesystem most of the devices belong to (the first given on a tie) */
	for (int i = 0; i < n; i++) {
		int count = 0;
		if (!c[i].dev)
			continue;
		for (int j = 0; j < n; j++)
			count += c[j].dev && !memcmp(UB_PTR(ub_disk_super, fsid, c[i].super),
						     UB_PTR(ub_disk_super, fsid, c[j].super), UB_FSID_SIZE);
		if (count > best_count) {
			best_count = count;
			fsid = UB_PTR(ub_disk_super, fsid, c[i].super);
		}
	}
	if (!fsid)
		return -EUCLEAN;
	/* and among its devices, the newest superblock */
	vol->generation_hint = 0;
	for (int i = 0; i < n; i++) {
		if (!c[i].dev || memcmp(UB_PTR(ub_disk_super, fsid, c[i].super), fsid, UB_FSID_SIZE))
			continue;
		if (lead < 0 || SB(generation, c[i].super) > SB(generation, c[lead].super))
			lead = i;
		if (SB(generation, c[i].super) > vol->generation_hint)
			vol->generation_hint = SB(generation, c[i].super);
	}
	memcpy(vol->super, c[lead].super, UB_SUPER_INFO_SIZE);
	vol->super_mirror_used = c[lead].mirror;
	/* current devices first: a device one commit behind stands in only for a devid none of them has */
	for (int pass = 0; pass < 2 && !ret; pass++)
		for (int i = 0; i < n && !ret; i++)
			ret = assemble_one(vol, &c[i], pass);
	return ret;
}

int ub_volume_open_devs(struct ub_dev *const *devs, int npaths, const struct ub_volume_opts *opts,
			const struct ub_log *log, struct ub_volume **out)
{
	struct ub_volume_opts defaults = { .writable = false, .super_mirror = -1 };
	struct ub_volume *vol;
	struct candidate *cand;
	int ret = 0, nvalid = 0;

	if (!opts)
		opts = &defaults;
	if (npaths < 1)
		return -EINVAL;
	vol = calloc(1, sizeof(*vol));
	cand = calloc((size_t)npaths, sizeof(*cand));
	if (!vol || !cand) {
		for (int i = 0; i < npaths; i++)
			ub_dev_close(devs[i]);
		ret = -ENOMEM;
		goto out;
	}
	if (log)
		vol->log = *log;
	else
		vol->log.verbosity = UB_LOG_WARN;
	vol->writable = opts->writable;
	for (int i = 0; i < npaths; i++) {
		struct ub_dev *dev = devs[i];
		int r = ub_volume_read_super(dev, opts->super_mirror, &vol->log, cand[i].super, &cand[i].mirror);
		if (r == 0)
			cand[i].dev = dev;
		if (r) {
			ub_dev_close(dev);
			cand[i].dev = NULL;
			if (npaths == 1) {
				ret = r;
				goto out;
			}
			continue;
		}
		nvalid++;
	}
	if (!nvalid) {
		ret = -EUCLEAN;
		goto out;
	}
	ret = assemble(vol, cand, npaths);
	if (ret)
		goto out;
	ret = init_from_super(vol);
	if (!ret)
		ret = note_missing_sys_devices(vol);
out:
	if (cand) {
		for (int i = 0; i < npaths; i++)
			if (cand[i].dev && !cand[i].used)
				ub_dev_close(cand[i].dev);
		free(cand);
	}
	if (ret && vol) {
		ub_volume_close(vol);
		vol = NULL;
	}
	if (!ret)
		*out = vol;
	return ret;
}

int ub_volume_open(const char *const *paths, int npaths, const struct ub_volume_opts *opts, const struct ub_log *log,
		   struct ub_volume **out)
{
	struct ub_log quiet = { .verbosity = UB_LOG_WARN };
	struct ub_dev **devs;
	int ret = 0, n = 0;

	if (npaths < 1)
		return -EINVAL;
	devs = calloc((size_t)npaths, sizeof(*devs));
	if (!devs)
		return -ENOMEM;
	for (int i = 0; i < npaths; i++) {
		ret = ub_dev_open(paths[i], opts && opts->writable, &devs[n]);
		/*
		 * A network device whose server is down is a missing device for a reader, as a
		 * disk left out would be: the profile's redundancy decides what can still be read.
		 */
		if (ret && ub_dev_is_uri(paths[i]) && !(opts && opts->writable) && npaths > 1) {
			ub_err(log ? log : &quiet, "%s: cannot connect: %s; the device is treated as missing", paths[i],
			       strerror(-ret));
			ret = 0;
			continue;
		}
		if (ret) {
			ub_err(log ? log : &quiet, "%s: cannot open: %s", paths[i], strerror(-ret));
			while (n > 0)
				ub_dev_close(devs[--n]);
			goto out;
		}
		n++;
	}
	ret = n ? ub_volume_open_devs(devs, n, opts, log, out) : -ENODEV;
out:
	free(devs);
	return ret;
}

void ub_volume_close(struct ub_volume *vol)
{
	if (!vol)
		return;
	ub_chunks_free(vol);
	for (int i = 0; i < vol->nvdevs; i++)
		ub_dev_close(vol->vdevs[i].dev);
	free(vol->vdevs);
	free(vol);
}

int ub_volume_add_dev_item(struct ub_volume *vol, const uint8_t *item, uint32_t size)
{
	uint64_t devid;
	int ret;

	if (size < sizeof(struct btrfs_dev_item))
		return -EUCLEAN;
	devid = DI(devid, item);
	for (int i = 0; i < vol->nvdevs; i++) {
		struct ub_vdev *v = &vol->vdevs[i];
		if (v->devid == devid) {
			/* a commit's writing (another thread) bounds its writes by it */
			__atomic_store_n(&v->total_bytes, DI(total_bytes, item), __ATOMIC_RELAXED);
			/* the uuid found on the device (or mkfs's blank one) names it; the rest is the chunk tree's */
			if (vol->creating)
				memcpy(v->uuid, UB_PTR(btrfs_dev_item, uuid, item), UB_UUID_SIZE);
			memcpy(v->item, item, sizeof(v->item));
			memcpy(v->item + offsetof(struct btrfs_dev_item, uuid), v->uuid, UB_UUID_SIZE);
			return 0;
		}
	}
	ret = add_vdev(vol, devid, UB_PTR(btrfs_dev_item, uuid, item), DI(total_bytes, item), NULL, 0);
	if (ret)
		return ret;
	memcpy(vol->vdevs[vol->nvdevs - 1].item, item, sizeof(struct btrfs_dev_item));
	/* the vdev array moved: rebind every stripe */
	for (int i = 0; i < vol->nchunks; i++)
		ub_chunk_bind(vol, vol->chunks[i]);
	return 0;
}

int ub_volume_add_device(struct ub_volume *vol, struct ub_dev *dev, const uint8_t *item)
{
	uint64_t devid = DI(devid, item);
	int ret;

	if (ub_volume_vdev(vol, devid))
		return -EEXIST;
	/* the array must not move under live readers */
	if (vol->nvdevs == vol->vdevs_cap)
		return -ENOSPC;
	ret = add_vdev(vol, devid, UB_PTR(btrfs_dev_item, uuid, item), DI(total_bytes, item), dev, 0);
	if (ret)
		return ret;
	memcpy(vol->vdevs[vol->nvdevs - 1].item, item, sizeof(struct btrfs_dev_item));
	/* only dead chunks (removed earlier, kept for their logical range) can name a reused devid */
	for (int i = 0; i < vol->nchunks; i++)
		for (int j = 0; j < vol->chunks[i]->num_stripes; j++)
			if (vol->chunks[i]->stripes[j].devid == devid)
				ub_chunk_bind(vol, vol->chunks[i]);
	return 0;
}

int ub_volume_detach_device(struct ub_volume *vol, uint64_t devid, struct ub_dev **dev)
{
	int at = -1;

	for (int i = 0; i < vol->nvdevs; i++)
		if (vol->vdevs[i].devid == devid)
			at = i;
	if (at < 0)
		return -ENOENT;
	/* the map keeps removed chunks (their logical range stays taken): the caller checked the live ones */
	*dev = vol->vdevs[at].dev;
	/* a tombstone, not a hole: stripes point into the array (volume_priv.h) */
	for (int i = 0; i < vol->nchunks; i++)
		for (int j = 0; j < vol->chunks[i]->num_stripes; j++)
			if (vol->chunks[i]->stripes[j].devid == devid)
				vol->chunks[i]->stripes[j].dev = NULL;
	vol->vdevs[at].missing = true;
	__atomic_store_n(&vol->vdevs[at].dev, NULL, __ATOMIC_RELEASE);
	__atomic_store_n(&vol->vdevs[at].total_bytes, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&vol->vdevs[at].devid, 0, __ATOMIC_RELEASE);
	return 0;
}

int ub_volume_swap_device(struct ub_volume *vol, uint64_t devid, struct ub_dev *dev, struct ub_dev **old)
{
	struct ub_vdev *v = devid ? ub_volume_vdev(vol, devid) : NULL;

	if (!v)
		return -ENOENT;
	*old = v->dev;
	v->missing = false;
	__atomic_store_n(&v->dev, dev, __ATOMIC_RELEASE);
	for (int i = 0; i < vol->nchunks; i++)
		for (int j = 0; j < vol->chunks[i]->num_stripes; j++)
			if (vol->chunks[i]->stripes[j].devid == devid)
				ub_chunk_bind(vol, vol->chunks[i]);
	return 0;
}

int ub_volume_map(const struct ub_volume *vol, uint64_t logical, int mirror, uint64_t *devid, uint64_t *physical,
		  const char **path)
{
	const struct ub_chunk *c = ub_volume_find_chunk(vol, logical);
	struct ub_map m;
	int ret;

	if (!c)
		return -ENOENT;
	ret = ub_chunk_map_copy(c, logical, mirror, &m);
	if (ret)
		return ret;
	*devid = c->stripes[m.stripe].devid;
	*physical = m.physical;
	*path = c->stripes[m.stripe].dev ? c->stripes[m.stripe].dev->dev->path : NULL;
	return 0;
}

int ub_volume_read(struct ub_volume *vol, uint64_t logical, uint64_t len, int mirror, void *buf)
{
	const struct ub_chunk *c = ub_volume_find_chunk(vol, logical);

	if (!c)
		return -ENOENT;
	if (len > c->length - (logical - c->logical))
		return -ERANGE;
	return c->profile->layout->read(vol, c, logical, len, mirror, buf);
}

/* Messages of one kind after the first few only count; the last says how many were left out. */
#define SAME_KIND_SHOWN 5

/*
 * What the chunk tree says against what the superblock claims: the number of
 * devices, their sizes against total_bytes, stripes on devices nobody
 * describes, more stripes than devices.
 */
static void check_counts(struct ub_volume *vol)
{
	uint64_t sum = 0, total = SB(total_bytes, vol->super);
	int unknown = 0, crowded = 0;

	for (int i = 0; i < vol->nvdevs; i++)
		sum += vol->vdevs[i].total_bytes;
	if ((uint64_t)vol->nvdevs != vol->num_devices)
		ub_warn(&vol->log, "the superblock says %llu devices, the chunk tree and the devices given describe %d",
			(unsigned long long)vol->num_devices, vol->nvdevs);
	if (sum > total)
		ub_err(&vol->log, "the devices add up to %llu bytes, more than the superblock's total_bytes %llu",
		       (unsigned long long)sum, (unsigned long long)total);
	for (int i = 0; i < vol->nchunks; i++) {
		const struct ub_chunk *c = vol->chunks[i];
		int distinct = 0;

		for (int j = 0; j < c->num_stripes; j++) {
			bool known = false, seen = false;
			for (int k = 0; k < vol->nvdevs; k++)
				known |= vol->vdevs[k].devid == c->stripes[j].devid;
			for (int k = 0; k < j; k++)
				seen |= c->stripes[k].devid == c->stripes[j].devid;
			distinct += !seen;
			if (known)
				continue;
			if (unknown++ < SAME_KIND_SHOWN)
				ub_err(&vol->log, "chunk at logical %llu: stripe %d is on devid %llu, which no device item "
				       "describes", (unsigned long long)c->logical, j,
				       (unsigned long long)c->stripes[j].devid);
		}
		/* only DUP keeps two stripes of a chunk on one device */
		if ((uint64_t)distinct > vol->num_devices ||
		    (c->profile->flag != BTRFS_BLOCK_GROUP_DUP && distinct != c->num_stripes)) {
			if (crowded++ < SAME_KIND_SHOWN)
				ub_err(&vol->log, "chunk at logical %llu (%s): %u stripes on %d distinct devices of %llu",
				       (unsigned long long)c->logical, c->profile->name, c->num_stripes, distinct,
				       (unsigned long long)vol->num_devices);
		}
	}
	if (unknown > SAME_KIND_SHOWN)
		ub_err(&vol->log, "... and %d more stripes on devices no device item describes", unknown - SAME_KIND_SHOWN);
	if (crowded > SAME_KIND_SHOWN)
		ub_err(&vol->log, "... and %d more chunks with stripes that do not fit the devices", crowded - SAME_KIND_SHOWN);
}

int ub_volume_check_devices(struct ub_volume *vol)
{
	int nmissing = 0, unreadable = 0;
	char u[40];

	check_counts(vol);
	for (int i = 0; i < vol->nvdevs; i++) {
		if (!vol->vdevs[i].missing)
			continue;
		if (nmissing++ >= SAME_KIND_SHOWN)
			continue;
		ub_uuid_str(vol->vdevs[i].uuid, u);
		if (vol->vdevs[i].total_bytes)
			ub_warn(&vol->log, "devid %llu (uuid %s, %llu bytes) is missing",
				(unsigned long long)vol->vdevs[i].devid, u, (unsigned long long)vol->vdevs[i].total_bytes);
		else
			ub_warn(&vol->log, "devid %llu (uuid %s) is missing", (unsigned long long)vol->vdevs[i].devid, u);
	}
	if (nmissing > SAME_KIND_SHOWN)
		ub_warn(&vol->log, "... and %d more devices missing", nmissing - SAME_KIND_SHOWN);
	if (!nmissing)
		return 0;
	for (int i = 0; i < vol->nchunks; i++) {
		const struct ub_chunk *c = vol->chunks[i];
		if (c->profile->layout->readable(c))
			continue;
		/* warnings: what cannot be read is an error when, and if, someone reads it */
		if (unreadable++ < SAME_KIND_SHOWN)
			ub_warn(&vol->log, "chunk at logical %llu (%s) has lost more devices than %s tolerates",
			       (unsigned long long)c->logical, c->profile->name, c->profile->name);
	}
	if (unreadable > SAME_KIND_SHOWN)
		ub_warn(&vol->log, "... and %d more chunks like this", unreadable - SAME_KIND_SHOWN);
	if (unreadable)
		ub_warn(&vol->log, "%d chunks are not fully readable with %d devices missing", unreadable, nmissing);
	else
		ub_warn(&vol->log, "reading degraded: %d of %llu devices missing, every chunk still has its data",
			nmissing, (unsigned long long)vol->num_devices);
	return unreadable ? -ENXIO : 0;
}

void ub_volume_describe_copy(const struct ub_volume *vol, uint64_t logical, int mirror, char *out, size_t len)
{
	uint64_t devid, phys;
	const char *path;

	if (ub_volume_map(vol, logical, mirror, &devid, &phys, &path) == 0)
		snprintf(out, len, "copy %d (devid %llu %s physical %llu)", mirror, (unsigned long long)devid,
			 path ? path : "missing", (unsigned long long)phys);
	else
		snprintf(out, len, "copy %d", mirror);
}

/* What a mkfs template must hold for the volume to be built from it (no roots yet, no checksum). */
static int template_valid(struct ub_volume *vol, const uint8_t *sb)
{
	uint64_t ss = SB(sectorsize, sb), ns = SB(nodesize, sb);

	if (SB(magic, sb) != UB_MAGIC) {
		ub_err(&vol->log, "superblock template: no btrfs magic");
		return -EINVAL;
	}
	if (!ub_csum_size((unsigned)SB(csum_type, sb))) {
		ub_err(&vol->log, "superblock template: unknown checksum type %llu", (unsigned long long)SB(csum_type, sb));
		return -EINVAL;
	}
	if (ss < 4096 || ss > 65536 || (ss & (ss - 1)) || ns < ss || ns > UB_MAX_NODESIZE || (ns & (ns - 1))) {
		ub_err(&vol->log, "superblock template: sectorsize %llu / nodesize %llu invalid", (unsigned long long)ss,
		       (unsigned long long)ns);
		return -EINVAL;
	}
	if (SB(sys_chunk_array_size, sb) > UB_SYSTEM_CHUNK_ARRAY_SIZE) {
		ub_err(&vol->log, "superblock template: system chunk array size %llu exceeds %u",
		       (unsigned long long)SB(sys_chunk_array_size, sb), UB_SYSTEM_CHUNK_ARRAY_SIZE);
		return -EINVAL;
	}
	return 0;
}

int ub_volume_create(struct ub_dev *const *devs, int ndevs, const uint8_t *sb, const struct ub_log *log,
		     struct ub_volume **out)
{
	struct ub_volume *vol = calloc(1, sizeof(*vol));
	static const uint8_t blank[UB_UUID_SIZE];
	int ret = 0, taken = 0;

	if (!vol) {
		ret = -ENOMEM;
		goto out;
	}
	if (log)
		vol->log = *log;
	else
		vol->log.verbosity = UB_LOG_WARN;
	if (ndevs < 1) {
		ret = -EINVAL;
		goto out;
	}
	ret = template_valid(vol, sb);
	if (ret)
		goto out;
	memcpy(vol->super, sb, UB_SUPER_INFO_SIZE);
	vol->writable = true;
	vol->creating = true;
	for (; taken < ndevs; taken++) {
		ret = add_vdev(vol, (uint64_t)taken + 1, blank, devs[taken]->size, devs[taken], 0);
		if (ret)
			goto out;
	}
	ret = init_from_super(vol);
	if (ret)
		goto out;
	/* the system chunks' stripes carry the uuids of the devices they sit on */
	for (int i = 0; i < vol->nchunks; i++) {
		const struct ub_chunk *c = vol->chunks[i];
		for (int j = 0; j < c->num_stripes; j++) {
			for (int k = 0; k < vol->nvdevs; k++) {
				struct ub_vdev *v = &vol->vdevs[k];
				if (v->devid != c->stripes[j].devid)
					continue;
				memcpy(v->uuid, c->stripes[j].dev_uuid, UB_UUID_SIZE);
				memcpy(v->item + offsetof(struct btrfs_dev_item, uuid), v->uuid, UB_UUID_SIZE);
			}
		}
	}
	ret = note_missing_sys_devices(vol);
out:
	if (ret) {
		/* devices not yet in the volume are still ours to close */
		for (int i = taken; i < ndevs; i++)
			ub_dev_close(devs[i]);
		ub_volume_close(vol);
	} else {
		*out = vol;
	}
	return ret;
}

/*
 * A device that fails a read (an I/O error, a server gone) is said once, as
 * an error: what it held is then read from the other copies or rebuilt from
 * parity without a word per block, and the command's exit code tells that
 * something was wrong.
 */
static int vdev_said(struct ub_vdev *vd, uint64_t phys, int ret)
{
	if (ret && ret != -ENXIO && vd->log && !atomic_exchange(&vd->read_failed, true))
		ub_err(vd->log, "devid %llu (%s): read failed at physical %llu: %s; its copies are read from the other "
		       "devices from now on where the profile has them", (unsigned long long)vd->devid,
		       ub_dev_path(vd->dev), (unsigned long long)phys, strerror(-ret));
	return ret;
}

int ub_vdev_read(struct ub_vdev *vd, void *buf, size_t len, uint64_t phys)
{
	return vdev_said(vd, phys, ub_dev_read(vd->dev, buf, len, phys));
}

int ub_vdev_readv(struct ub_vdev *vd, const struct iovec *iov, int iovcnt, uint64_t phys)
{
	return vdev_said(vd, phys, ub_dev_readv(vd->dev, iov, iovcnt, phys));
}
