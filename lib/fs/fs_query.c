/* SPDX-License-Identifier: MIT */
/*
 * What the btrfs ioctls answer, asked of an open filesystem (ubtrfs/fsquery.h):
 * a search of any tree by key range (TREE_SEARCH), the default subvolume, and
 * the space per block group type and profile with the global reserve
 * (SPACE_INFO), each through the handle's view.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "ubtrfs/devinfo.h"
#include "ubtrfs/fsquery.h"
#include "ubtrfs/log.h"
#include "fs_priv.h"
#include "volume/volume_priv.h"

static int search_impl(struct ub_fs *fs, const struct ub_search_key *sk, ub_search_fn fn, void *arg)
{
	struct ub_root root;
	struct ub_path p;
	struct ub_key key = sk->min;
	int ret;

	if (ub_key_cmp(&sk->min, &sk->max) > 0)
		return 0;
	ret = ub_fs_tree_root(fs, sk->tree, &root);
	if (ret)
		return ret;
	ub_path_init(&p);
	ret = ub_tree_search(&fs->tc, &root, &key, &p);
	/* 2: nothing at or after min */
	ret = ret == 2 ? 1 : ret < 0 ? ret : 0;
	while (ret == 0) {
		const struct ub_eb *leaf = p.nodes[0];
		uint64_t gen = ub_eb_generation(leaf);
		const uint8_t *d;
		uint32_t size;

		ub_path_key(&p, &key);
		if (ub_key_cmp(&key, &sk->max) > 0)
			break;
		if (gen >= sk->min_transid && gen <= sk->max_transid) {
			d = ub_path_data(&p, &size);
			ret = fn(arg, &key, gen, d, size);
			if (ret)
				break;
		}
		ret = ub_tree_next(&p);
	}
	ub_path_release(&p);
	return ret == 1 ? 0 : ret;
}

int ub_fs_search(struct ub_fs *fs, const struct ub_search_key *sk, ub_search_fn fn, void *arg)
{
	int in = ub_view_enter(fs);
	int ret = search_impl(fs, sk, fn, arg);

	ub_view_exit(fs, in);
	return ret;
}

static int default_impl(struct ub_fs *fs, uint64_t *id)
{
	static const char name[] = "default";
	struct ub_key key = { BTRFS_ROOT_TREE_DIR_OBJECTID, BTRFS_DIR_ITEM_KEY, ub_name_hash(name, sizeof(name) - 1) };
	struct ub_root root;
	struct ub_path p;
	const uint8_t *d;
	uint32_t size, pos = 0;
	int ret;

	*id = BTRFS_FS_TREE_OBJECTID;
	ret = ub_fs_tree_root(fs, BTRFS_ROOT_TREE_OBJECTID, &root);
	if (ret)
		return ret;
	ub_path_init(&p);
	ret = ub_tree_lookup(&fs->tc, &root, &key, &p, &d, &size);
	if (ret == -ENOENT) {
		ret = 0; /* no entry: the top level, as the kernel mounts it */
		goto out;
	}
	/* one record per name of this hash; the tree checker vouched for their sizes */
	while (ret == 0 && pos + sizeof(struct btrfs_dir_item) <= size) {
		const uint8_t *r = d + pos;
		uint32_t nlen = (uint32_t)UB_GET(btrfs_dir_item, name_len, r);
		uint32_t dlen = (uint32_t)UB_GET(btrfs_dir_item, data_len, r);
		struct ub_key loc;

		if (nlen == sizeof(name) - 1 && pos + sizeof(struct btrfs_dir_item) + nlen <= size &&
		    !memcmp(r + sizeof(struct btrfs_dir_item), name, nlen)) {
			ub_key_read(&loc, UB_PTR(btrfs_dir_item, location, r));
			if (loc.type != BTRFS_ROOT_ITEM_KEY ||
			    (loc.objectid != BTRFS_FS_TREE_OBJECTID &&
			     (loc.objectid < BTRFS_FIRST_FREE_OBJECTID || loc.objectid > BTRFS_LAST_FREE_OBJECTID))) {
				ub_err(&fs->log, "root tree: the \"default\" entry of dir %llu leads to (%llu %u %llu), "
				       "not a subvolume", (unsigned long long)BTRFS_ROOT_TREE_DIR_OBJECTID,
				       (unsigned long long)loc.objectid, loc.type, (unsigned long long)loc.offset);
				ret = -EUCLEAN;
			} else {
				*id = loc.objectid;
			}
			goto out;
		}
		pos += (uint32_t)sizeof(struct btrfs_dir_item) + nlen + dlen;
	}
out:
	ub_path_release(&p);
	return ret;
}

int ub_default_subvol(struct ub_fs *fs, uint64_t *id)
{
	int in = ub_view_enter(fs);
	int ret = default_impl(fs, id);

	ub_view_exit(fs, in);
	return ret;
}

/* ---- space ---- */

/* the kernel's enum btrfs_raid_types has this many profiles */
#define NRAID 9
/* its order of space infos: data, system, metadata, mixed */
static const uint64_t space_types[] = {
	BTRFS_BLOCK_GROUP_DATA, BTRFS_BLOCK_GROUP_SYSTEM, BTRFS_BLOCK_GROUP_METADATA,
	BTRFS_BLOCK_GROUP_DATA | BTRFS_BLOCK_GROUP_METADATA,
};
#define NTYPES (sizeof(space_types) / sizeof(space_types[0]))
#define TYPE_MASK (BTRFS_BLOCK_GROUP_DATA | BTRFS_BLOCK_GROUP_SYSTEM | BTRFS_BLOCK_GROUP_METADATA)

struct space_acc {
	struct ub_space_entry slot[NTYPES][NRAID];
	bool present[NTYPES][NRAID];
};

static int type_index(uint64_t flags)
{
	for (size_t i = 0; i < NTYPES; i++)
		if ((flags & TYPE_MASK) == space_types[i])
			return (int)i;
	return -1;
}

struct bg_found {
	struct ub_key key;
	uint64_t flags, used;
	bool found;
};

/* The first block group item from where the search starts (the items before it are skipped). */
static int bg_item(void *arg, const struct ub_key *key, uint64_t transid, const uint8_t *d, uint32_t len)
{
	struct bg_found *f = arg;

	(void)transid;
	if (key->type != BTRFS_BLOCK_GROUP_ITEM_KEY)
		return 0;
	if (len < sizeof(struct btrfs_block_group_item) || !key->offset || key->objectid + key->offset < key->objectid)
		return -EUCLEAN;
	f->key = *key;
	f->flags = UB_GET(btrfs_block_group_item, flags, d);
	f->used = UB_GET(btrfs_block_group_item, used, d);
	f->found = true;
	return 1;
}

/*
 * Every block group item, found as the kernel finds them: a search for the
 * first item at or after the end of the previous group, so that a walk of the
 * extent tree skips the extent items in between.
 */
static int read_block_groups(struct ub_fs *fs, uint64_t tree, struct space_acc *sa)
{
	struct ub_search_key sk = { .tree = tree, .max = { UINT64_MAX, UINT8_MAX, UINT64_MAX },
				    .max_transid = UINT64_MAX };
	uint64_t next = 0;

	for (;;) {
		struct bg_found f = { .found = false };
		const struct ub_profile *pr;
		int t, r, ret;

		sk.min = (struct ub_key){ next, BTRFS_BLOCK_GROUP_ITEM_KEY, 0 };
		ret = search_impl(fs, &sk, bg_item, &f);
		if (ret < 0 || !f.found) {
			if (ret == -EUCLEAN)
				ub_err(&fs->log, "tree %llu: block group item after %llu is invalid (size or length)",
				       (unsigned long long)tree, (unsigned long long)next);
			return ret;
		}
		t = type_index(f.flags);
		pr = ub_profile_of(f.flags & BTRFS_BLOCK_GROUP_PROFILE_MASK);
		if (t < 0 || !pr || pr->raid_index < 0 || pr->raid_index >= NRAID) {
			ub_err(&fs->log, "tree %llu: block group (%llu %u %llu) has flags 0x%llx: not one type and profile",
			       (unsigned long long)tree, (unsigned long long)f.key.objectid, f.key.type,
			       (unsigned long long)f.key.offset, (unsigned long long)f.flags);
			return -EUCLEAN;
		}
		r = pr->raid_index;
		sa->present[t][r] = true;
		sa->slot[t][r].flags = f.flags & (TYPE_MASK | BTRFS_BLOCK_GROUP_PROFILE_MASK);
		sa->slot[t][r].total_bytes += f.key.offset;
		sa->slot[t][r].used_bytes += f.used < f.key.offset ? f.used : f.key.offset;
		next = f.key.objectid + f.key.offset;
	}
}

/* The bytes of tree blocks the ROOT_ITEM of `id` counts (0 when the tree has none). */
static int root_used(struct ub_fs *fs, const struct ub_root *rt, uint64_t id, uint64_t *used, bool *present)
{
	struct ub_key key = { id, BTRFS_ROOT_ITEM_KEY, 0 };
	struct ub_path p;
	const uint8_t *d;
	uint32_t size;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_lookup(&fs->tc, rt, &key, &p, &d, &size);
	if (ret == 0 && size >= offsetof(struct btrfs_root_item, bytes_used) + 8) {
		*used += UB_GET(btrfs_root_item, bytes_used, d);
		*present = true;
	} else if (ret == 0) {
		ret = -EUCLEAN;
	}
	ub_path_release(&p);
	return ret == -ENOENT ? 0 : ret;
}

/*
 * The global reserve as the kernel sizes it when it mounts read-write
 * (btrfs_update_global_block_rsv): the tree blocks of the extent, checksum
 * and free space trees (and block group / raid stripe trees), but at least
 * room to insert into each of them and for one unlink (6 items, twice with
 * a free space tree), capped at 512 MiB.
 */
static int global_reserve(struct ub_fs *fs, uint64_t *size)
{
	const uint8_t *sb = ub_volume_super(fs->vol);
	uint64_t nodesize = UB_GET(ub_disk_super, nodesize, sb);
	uint64_t compat_ro = UB_GET(ub_disk_super, compat_ro_flags, sb);
	uint64_t incompat = UB_GET(ub_disk_super, incompat_flags, sb);
	const uint64_t per_item = nodesize * UB_MAX_LEVEL * 2, unlink_units = 6;
	uint64_t ids[5], used = 0, min;
	unsigned nids = 0, items = 1;
	struct ub_root rt;
	int ret = ub_fs_tree_root(fs, BTRFS_ROOT_TREE_OBJECTID, &rt);

	if (ret)
		return ret;
	ids[nids++] = BTRFS_EXTENT_TREE_OBJECTID;
	ids[nids++] = BTRFS_CSUM_TREE_OBJECTID;
	ids[nids++] = BTRFS_FREE_SPACE_TREE_OBJECTID;
	if (compat_ro & BTRFS_FEATURE_COMPAT_RO_BLOCK_GROUP_TREE)
		ids[nids++] = BTRFS_BLOCK_GROUP_TREE_OBJECTID;
	if (incompat & BTRFS_FEATURE_INCOMPAT_RAID_STRIPE_TREE)
		ids[nids++] = BTRFS_RAID_STRIPE_TREE_OBJECTID;
	for (unsigned i = 0; i < nids && !ret; i++) {
		bool present = false;

		ret = root_used(fs, &rt, ids[i], &used, &present);
		items += present;
	}
	if (ret)
		return ret;
	items += unlink_units;
	min = per_item * items +
	      per_item * unlink_units * (compat_ro & BTRFS_FEATURE_COMPAT_RO_FREE_SPACE_TREE ? 2 : 1);
	*size = used > min ? used : min;
	if (*size > (512ULL << 20))
		*size = 512ULL << 20;
	return 0;
}

static int space_impl(struct ub_fs *fs, struct ub_space_entry *out, int max, int *n)
{
	const uint8_t *sb = ub_volume_super(fs->vol);
	uint64_t compat_ro = UB_GET(ub_disk_super, compat_ro_flags, sb);
	struct space_acc *sa = calloc(1, sizeof(*sa));
	uint64_t rsv = 0;
	int ret, count = 0;

	if (!sa)
		return -ENOMEM;
	ret = read_block_groups(fs, compat_ro & BTRFS_FEATURE_COMPAT_RO_BLOCK_GROUP_TREE ?
				BTRFS_BLOCK_GROUP_TREE_OBJECTID : BTRFS_EXTENT_TREE_OBJECTID, sa);
	if (!ret)
		ret = global_reserve(fs, &rsv);
	if (!ret) {
		for (size_t t = 0; t < NTYPES; t++)
			for (int r = 0; r < NRAID; r++) {
				if (!sa->present[t][r])
					continue;
				if (count < max)
					out[count] = sa->slot[t][r];
				count++;
			}
		if (count < max)
			out[count] = (struct ub_space_entry){ UB_SPACE_GLOBAL_RSV, rsv, 0 };
		count++;
		*n = count;
	}
	free(sa);
	return ret;
}

int ub_fs_space_info(struct ub_fs *fs, struct ub_space_entry *out, int max, int *n)
{
	int in = ub_view_enter(fs);
	int ret = space_impl(fs, out, max, n);

	ub_view_exit(fs, in);
	return ret;
}
