/* SPDX-License-Identifier: MIT */
/*
 * rescue zero-log: the fsync log dropped from every superblock copy, as
 * btrfs rescue zero-log does, after saying what it held (the fs layer's
 * replay, run strictly on a read-only open, lists the inodes it logged).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ubtrfs/devinfo.h"
#include "ubtrfs/fsinfo.h"
#include "ubtrfs/rescue.h"
#include "ubtrfs/tree.h"
#include "fs/fs_priv.h"
#include "fs/log_replay.h"
#include "volume/volume_priv.h"

#define SB(f, p) UB_GET(ub_disk_super, f, p)

void ub_log_survey_free(struct ub_log_survey *s)
{
	if (!s)
		return;
	free(s->inodes);
	memset(s, 0, sizeof(*s));
}

/* The log's inodes from a strict replay over the last commit (nothing written: read-only open). */
static int list_inodes(struct ub_fs *fs, struct ub_log_survey *s)
{
	struct ub_block_set blocks;
	size_t n;

	if (ub_fs_replay_log_strict(fs, &blocks))
		return 0;
	ub_block_set_free(&blocks);
	s->replayable = true;
	n = ub_replay_nsets(fs);
	if (n) {
		s->inodes = calloc(n, sizeof(*s->inodes));
		if (!s->inodes) {
			ub_fs_drop_replay(fs);
			return -ENOMEM;
		}
	}
	for (size_t i = 0; i < n; i++) {
		const struct ub_itemset *set = ub_replay_set(fs, i);

		s->inodes[i].subvol = set->subvol;
		s->inodes[i].ino = set->ino;
	}
	s->ninodes = n;
	ub_fs_drop_replay(fs);
	return 0;
}

int ub_rescue_log_survey(const char *const *paths, int npaths, const struct ub_log *log, struct ub_log_survey *s)
{
	struct ub_fs_opts o = { .super_mirror = -1, .no_log = true };
	struct ub_fs *fs = NULL;
	const uint8_t *sb;
	int ret;

	memset(s, 0, sizeof(*s));
	ret = ub_fs_open(paths, npaths, &o, log, &fs);
	if (ret)
		return ret;
	sb = ub_volume_super(ub_fs_volume(fs));
	s->generation = SB(generation, sb);
	s->log_root = SB(log_root, sb);
	s->log_level = (unsigned)SB(log_root_level, sb);
	if (s->log_root) {
		struct ub_expect exp = { .level = (int)s->log_level, .owner = BTRFS_TREE_LOG_OBJECTID };
		struct ub_eb *eb = NULL;

		if (!ub_tree_read_block(ub_fs_trees(fs), s->log_root, &exp, &eb)) {
			s->log_generation = ub_eb_generation(eb);
			ub_eb_put(ub_fs_trees(fs), eb);
		}
		ret = list_inodes(fs, s);
	}
	ub_fs_close(fs);
	if (ret)
		ub_log_survey_free(s);
	return ret;
}

int ub_rescue_zero_log(struct ub_dev *const *devs, int ndevs, const struct ub_log *log, uint64_t *old_root)
{
	struct ub_volume_opts vo = { .writable = true, .super_mirror = -1 };
	struct ub_volume *vol = NULL;
	uint8_t sb[UB_SUPER_INFO_SIZE];
	int ret;

	if (old_root)
		*old_root = 0;
	ret = ub_volume_open_devs(devs, ndevs, &vo, log, &vol);
	if (ret)
		return ret;
	memcpy(sb, ub_volume_super(vol), sizeof(sb));
	if (old_root)
		*old_root = SB(log_root, sb);
	if (SB(log_root, sb) || SB(log_root_level, sb) || SB(unused_log_root_transid, sb)) {
		UB_SET(ub_disk_super, log_root, sb, 0);
		UB_SET(ub_disk_super, log_root_level, sb, 0);
		UB_SET(ub_disk_super, unused_log_root_transid, sb, 0);
		/* the same commit without its log: every copy of every device, generation unchanged */
		ret = ub_volume_write_supers(vol, sb);
	}
	ub_volume_close(vol);
	return ret;
}
