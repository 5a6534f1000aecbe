/* SPDX-License-Identifier: MIT */
/*
 * statfs: the figures `df` shows on the kernel's read-only mount of
 * the same filesystem (fs/btrfs/super.c's btrfs_statfs), computed from what is on
 * disk: the block group items (space per profile) and the dev items (unallocated
 * space per device). The kernel takes its global block reserve off the free
 * blocks, but a read-only mount never sizes one (measured on 6.18: nothing is
 * taken off), so neither does this.
 *
 * The kernel's available space depends on whether it can write the devices: on
 * read-only ones (read-only loop devices) it marks every block group read-only,
 * leaving their free space out, and counts new chunks as single. This shows the
 * figure for writable devices (a read-only mount of ordinary disks).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include "fs_priv.h"
#include "tree/tree_priv.h"
#include "volume/volume_priv.h"
#include "ubtrfs/devinfo.h"
#include "ubtrfs/fsinfo.h"
#include "ubtrfs/log.h"

#define MiB (1ULL << 20)

/* The kernel's enum btrfs_raid_types has this many profiles (ub_profile.raid_index): the data factor is the last one present. */
#define NRAID 9

static int raid_index(uint64_t flags)
{
	const struct ub_profile *p = ub_profile_of(flags);

	return p && p->raid_index >= 0 && p->raid_index < NRAID ? p->raid_index : 4; /* single */
}

/* The profile of raid index i, or NULL. */
static const struct ub_profile *profile_at_index(int idx)
{
	for (int i = 0; i < ub_profile_count(); i++)
		if (ub_profile_at(i)->raid_index == idx)
			return ub_profile_at(i);
	return NULL;
}

struct space {
	uint64_t total_used;      /* every block group's used bytes times its copies */
	uint64_t free_data;       /* unused bytes of data block groups times their copies */
	bool data_present[NRAID];
	uint64_t data_profiles;   /* profile bits of the data block groups */
};

static void add_block_group(struct space *sp, uint64_t flags, uint64_t length, uint64_t used)
{
	const struct ub_profile *pr = ub_profile_of(flags);
	uint64_t factor = pr && pr->ncopies > 0 ? (uint64_t)pr->ncopies : 1;

	if (used > length)
		used = length;
	sp->total_used += used * factor;
	if (flags & BTRFS_BLOCK_GROUP_DATA) {
		sp->free_data += (length - used) * factor;
		sp->data_present[raid_index(flags)] = true;
		sp->data_profiles |= flags & BTRFS_BLOCK_GROUP_PROFILE_MASK;
	}
}

/*
 * Every block group item, found as the kernel finds them: a search for the first
 * item at or after the end of the previous group, so a walk of the extent tree
 * skips the extent items between them.
 */
static int read_block_groups(struct ub_fs *fs, uint64_t tree, struct space *sp)
{
	struct ub_tree_ctx *tc = ub_fs_trees(fs);
	struct ub_root root;
	uint64_t next = 0;
	int ret = ub_fs_tree_root(fs, tree, &root);

	if (ret)
		return ret;
	for (;;) {
		struct ub_key key = { next, BTRFS_BLOCK_GROUP_ITEM_KEY, 0 };
		struct ub_path p;
		bool found = false;

		ub_path_init(&p);
		ret = ub_tree_search(tc, &root, &key, &p);
		/* 0: at an item (the search's 0 and 1), 1: past the last (the search's 2, the step's 1) */
		ret = ret == 2 ? 1 : ret < 0 ? ret : 0;
		while (ret == 0) {
			const uint8_t *d;
			uint32_t size;

			ub_path_key(&p, &key);
			if (key.type != BTRFS_BLOCK_GROUP_ITEM_KEY) {
				ret = ub_tree_next(&p);
				continue;
			}
			d = ub_path_data(&p, &size);
			if (size < sizeof(struct btrfs_block_group_item) || !key.offset ||
			    key.objectid + key.offset < key.objectid) {
				ub_err(ub_fs_log(fs), "tree %llu: block group item (%llu %u %llu) of %u bytes is "
				       "invalid; df shows the superblock's figures", (unsigned long long)tree,
				       (unsigned long long)key.objectid, key.type, (unsigned long long)key.offset, size);
				ret = -EUCLEAN;
				break;
			}
			add_block_group(sp, UB_GET(btrfs_block_group_item, flags, d), key.offset,
					UB_GET(btrfs_block_group_item, used, d));
			next = key.objectid + key.offset;
			found = true;
			break;
		}
		ub_path_release(&p);
		if (ret < 0)
			return ret;
		if (!found)
			return 0;
	}
}

struct dev_avail {
	uint64_t avail;
};

static int avail_desc(const void *a, const void *b)
{
	uint64_t x = ((const struct dev_avail *)a)->avail, y = ((const struct dev_avail *)b)->avail;

	return x < y ? 1 : x > y ? -1 : 0;
}

/* The dev item's bytes_used (allocated to chunks) of `devid`, from the chunk tree. */
static int dev_bytes_used(struct ub_fs *fs, uint64_t devid, uint64_t *used)
{
	struct ub_root rt;
	struct ub_key key = { BTRFS_DEV_ITEMS_OBJECTID, BTRFS_DEV_ITEM_KEY, devid };
	struct ub_path p;
	const uint8_t *d;
	uint32_t size;
	int ret = ub_fs_tree_root(fs, BTRFS_CHUNK_TREE_OBJECTID, &rt);

	if (ret)
		return ret;
	ub_path_init(&p);
	ret = ub_tree_lookup(ub_fs_trees(fs), &rt, &key, &p, &d, &size);
	if (!ret && size < sizeof(struct btrfs_dev_item))
		ret = -EUCLEAN;
	if (!ret)
		*used = UB_GET(btrfs_dev_item, bytes_used, d);
	ub_path_release(&p);
	return ret;
}

/*
 * btrfs_calc_avail_data_space: what new chunks of the data profile could still
 * take from the unallocated space of the present devices, in raw bytes.
 */
static int avail_data_space(struct ub_fs *fs, uint64_t data_profiles, uint64_t *out)
{
	struct ub_device_info *devs;
	struct dev_avail *da;
	const struct ub_profile *pr;
	uint64_t type = 0, min_stripe, total = 0;
	int ndevs, n = 0, present = 0, stripes = 1;
	int ret = ub_volume_list_devices(ub_fs_volume(fs), &devs, &ndevs);

	if (ret)
		return ret;
	for (int i = 0; i < ndevs; i++)
		present += !devs[i].missing;
	/* the profile new data chunks get: the most redundant one present that the devices allow (the table's order) */
	for (int i = 0; i < ub_profile_count(); i++) {
		const struct ub_profile *c = ub_profile_at(i);

		if ((data_profiles & c->flag) && present >= c->devs_min) {
			type = c->flag;
			break;
		}
	}
	pr = ub_profile_of(type);
	stripes = !pr ? 1 : pr->statfs_stripes ? pr->statfs_stripes : present;
	min_stripe = (uint64_t)(pr ? pr->dev_stripes : 1) * UB_STRIPE_LEN;
	da = calloc(ndevs ? ndevs : 1, sizeof(*da));
	if (!da) {
		free(devs);
		return -ENOMEM;
	}
	for (int i = 0; i < ndevs; i++) {
		uint64_t used, avail;

		if (devs[i].missing)
			continue;
		ret = dev_bytes_used(fs, devs[i].devid, &used);
		if (ret)
			goto out;
		avail = devs[i].total_bytes > used ? devs[i].total_bytes - used : 0;
		avail -= avail % UB_STRIPE_LEN;
		/* the first MiB of every device is never allocated */
		if (avail <= MiB + min_stripe)
			continue;
		da[n++].avail = avail - MiB;
	}
	qsort(da, n, sizeof(*da), avail_desc);
	/* fill the smallest device first across `stripes` devices, as the allocator would */
	for (int i = n - 1; n >= (pr ? pr->devs_min : 1); i--, n--) {
		if (stripes > n)
			stripes = n;
		if (da[i].avail >= min_stripe) {
			uint64_t take = da[i].avail;

			total += take * stripes;
			for (int j = i + 1 - stripes; j <= i; j++)
				da[j].avail -= take;
		}
	}
	*out = total;
out:
	free(da);
	free(devs);
	return ret;
}

static int statfs_impl(struct ub_fs *fs, struct statvfs *out)
{
	const uint8_t *sb = ub_volume_super(ub_fs_volume(fs));
	uint32_t sectorsize = (uint32_t)UB_GET(ub_disk_super, sectorsize, sb);
	uint64_t compat_ro = UB_GET(ub_disk_super, compat_ro_flags, sb);
	struct space sp = { 0 };
	uint64_t factor = 1, blocks, used, avail_new, bavail;
	int ret;

	ret = read_block_groups(fs, compat_ro & BTRFS_FEATURE_COMPAT_RO_BLOCK_GROUP_TREE ?
				BTRFS_BLOCK_GROUP_TREE_OBJECTID : BTRFS_EXTENT_TREE_OBJECTID, &sp);
	if (!ret)
		ret = avail_data_space(fs, sp.data_profiles, &avail_new);
	if (ret)
		return ret;
	for (int i = 0; i < NRAID; i++) {
		const struct ub_profile *pr = profile_at_index(i);

		if (sp.data_present[i] && pr && pr->ncopies > 0)
			factor = (uint64_t)pr->ncopies;
	}
	blocks = UB_GET(ub_disk_super, total_bytes, sb) / factor / sectorsize;
	used = sp.total_used / factor / sectorsize;
	memset(out, 0, sizeof(*out));
	out->f_bsize = out->f_frsize = sectorsize;
	out->f_blocks = blocks;
	out->f_bfree = blocks > used ? blocks - used : 0;
	bavail = sp.free_data / factor + avail_new / factor;
	out->f_bavail = bavail / sectorsize;
	out->f_namemax = UB_NAME_LEN;
	return 0;
}

int ub_fs_statfs(struct ub_fs *fs, struct statvfs *out)
{
	int in = ub_view_enter(fs);
	int ret = statfs_impl(fs, out);

	ub_view_exit(fs, in);
	return ret;
}
