/* SPDX-License-Identifier: MIT */
/* Which filesystems the write engine may open for writing. */
#include <errno.h>
#include <stdio.h>
#include "txn/commit.h"

#define SB(field, sb) UB_GET(ub_disk_super, field, sb)

/* incompat bits whose trees the engine keeps exact (or that only change how items are read) */
#define RW_INCOMPAT                                                                                            \
	(BTRFS_FEATURE_INCOMPAT_MIXED_BACKREF | BTRFS_FEATURE_INCOMPAT_DEFAULT_SUBVOL |                         \
	 BTRFS_FEATURE_INCOMPAT_COMPRESS_LZO | BTRFS_FEATURE_INCOMPAT_COMPRESS_ZSTD |                           \
	 BTRFS_FEATURE_INCOMPAT_BIG_METADATA | BTRFS_FEATURE_INCOMPAT_EXTENDED_IREF |                           \
	 BTRFS_FEATURE_INCOMPAT_RAID56 | BTRFS_FEATURE_INCOMPAT_SKINNY_METADATA |                               \
	 BTRFS_FEATURE_INCOMPAT_NO_HOLES | BTRFS_FEATURE_INCOMPAT_METADATA_UUID |                               \
	 BTRFS_FEATURE_INCOMPAT_RAID1C34)
#define RW_COMPAT_RO (BTRFS_FEATURE_COMPAT_RO_FREE_SPACE_TREE | BTRFS_FEATURE_COMPAT_RO_FREE_SPACE_TREE_VALID)

static const struct {
	uint64_t bit;
	const char *name;
} incompat_names[] = {
	{ BTRFS_FEATURE_INCOMPAT_MIXED_GROUPS, "mixed block groups (mixed-bg)" },
	{ BTRFS_FEATURE_INCOMPAT_ZONED, "zoned mode" },
	{ BTRFS_FEATURE_INCOMPAT_EXTENT_TREE_V2, "extent-tree-v2" },
	{ BTRFS_FEATURE_INCOMPAT_RAID_STRIPE_TREE, "the raid-stripe tree" },
	{ BTRFS_FEATURE_INCOMPAT_SIMPLE_QUOTA, "simple quotas (squota)" },
}, compat_ro_names[] = {
	{ BTRFS_FEATURE_COMPAT_RO_BLOCK_GROUP_TREE, "the block group tree (block-group-tree)" },
	{ BTRFS_FEATURE_COMPAT_RO_VERITY, "fs-verity" },
};

/*
 * Can the engine write this superblock's filesystem? 0, or -EOPNOTSUPP with
 * the reason (naming the feature) in `why`. metadump_ok: a btrfs-image dump is
 * acceptable (a repair's open: UB_ENGINE_OPEN_METADUMP).
 */
int ub_engine_check_features(const uint8_t *sb, bool metadump_ok, char *why, size_t len)
{
	uint64_t incompat = SB(incompat_flags, sb), compat_ro = SB(compat_ro_flags, sb), flags = SB(flags, sb);
	uint64_t bad;

	for (size_t i = 0; i < sizeof(incompat_names) / sizeof(incompat_names[0]); i++) {
		if (incompat & incompat_names[i].bit) {
			snprintf(why, len, "the filesystem uses %s, which the write engine does not keep up to date",
				 incompat_names[i].name);
			return -EOPNOTSUPP;
		}
	}
	for (size_t i = 0; i < sizeof(compat_ro_names) / sizeof(compat_ro_names[0]); i++) {
		if (compat_ro & compat_ro_names[i].bit) {
			snprintf(why, len, "the filesystem uses %s, which the write engine does not keep up to date",
				 compat_ro_names[i].name);
			return -EOPNOTSUPP;
		}
	}
	bad = incompat & ~RW_INCOMPAT;
	if (bad) {
		snprintf(why, len, "unknown incompatible feature flags 0x%llx", (unsigned long long)bad);
		return -EOPNOTSUPP;
	}
	bad = compat_ro & ~RW_COMPAT_RO;
	if (bad) {
		snprintf(why, len, "unknown read-only-compatible feature flags 0x%llx", (unsigned long long)bad);
		return -EOPNOTSUPP;
	}
	/* without skinny-metadata, tree blocks' extent items take the older form (extent_tree.c) */
	/* no free space tree (the v1 space cache, or none): ub_engine_create_fst makes one (space_convert.c) */
	if ((compat_ro & BTRFS_FEATURE_COMPAT_RO_FREE_SPACE_TREE) &&
	    !(compat_ro & BTRFS_FEATURE_COMPAT_RO_FREE_SPACE_TREE_VALID)) {
		snprintf(why, len, "the free space tree is flagged as not valid (free-space-tree without its VALID bit)");
		return -EOPNOTSUPP;
	}
	if (flags & BTRFS_SUPER_FLAG_SEEDING) {
		snprintf(why, len, "the filesystem is a seed device (read-only by design)");
		return -EOPNOTSUPP;
	}
	if ((flags & (BTRFS_SUPER_FLAG_METADUMP | BTRFS_SUPER_FLAG_METADUMP_V2)) && !metadump_ok) {
		snprintf(why, len, "the image is a metadata dump (btrfs-image), which holds no data");
		return -EOPNOTSUPP;
	}
	if (flags & (BTRFS_SUPER_FLAG_CHANGING_FSID | BTRFS_SUPER_FLAG_CHANGING_FSID_V2)) {
		snprintf(why, len, "an fsid change was interrupted (btrfstune must finish it first)");
		return -EOPNOTSUPP;
	}
	return 0;
}
