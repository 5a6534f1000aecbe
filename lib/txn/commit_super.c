/* SPDX-License-Identifier: MIT */
/*
 * The next superblock of a commit: generation, roots and the rotating backup
 * roots. The kernel keeps four backup slots and fills them round robin: at
 * mount it finds the slot whose tree_root_gen equals the superblock's
 * generation and the next commit writes the slot after it, holding the roots
 * of that new commit. So the newest slot always describes the superblock
 * itself and the three before it the three previous commits, which is what
 * `mount -o rescue=usebackuproot` and `btrfs check --backup` fall back to.
 */
#include "txn/commit.h"

#define SB_SET(field, sb, v) UB_SET(ub_disk_super, field, sb, v)
#define BK_SET(field, b, v) UB_SET(ub_disk_root_backup, field, b, v)

static uint8_t *backup_slot(uint8_t *sb, int i)
{
	return sb + offsetof(struct ub_disk_super, super_roots) + (size_t)i * sizeof(struct ub_disk_root_backup);
}

int ub_backup_next_slot(const uint8_t *sb)
{
	uint64_t gen = UB_GET(ub_disk_super, generation, sb);

	for (int i = 0; i < UB_NUM_BACKUP_ROOTS; i++) {
		const uint8_t *b = backup_slot((uint8_t *)sb, i);
		if (UB_GET(ub_disk_root_backup, tree_root_gen, b) == gen)
			return (i + 1) % UB_NUM_BACKUP_ROOTS;
	}
	return 0;
}

void ub_super_set_commit(uint8_t *sb, const struct ub_commit_roots *c)
{
	int slot = ub_backup_next_slot(sb);
	uint8_t *b = backup_slot(sb, slot);

	SB_SET(generation, sb, c->generation);
	SB_SET(root, sb, c->root.bytenr);
	SB_SET(root_level, sb, c->root.level);
	SB_SET(chunk_root, sb, c->chunk.bytenr);
	SB_SET(chunk_root_level, sb, c->chunk.level);
	SB_SET(chunk_root_generation, sb, c->chunk.generation);
	SB_SET(bytes_used, sb, c->bytes_used);
	/* a log belongs to the commit it was written after; a new commit has none */
	SB_SET(log_root, sb, 0);
	SB_SET(log_root_level, sb, 0);

	memset(b, 0, sizeof(struct ub_disk_root_backup));
	BK_SET(tree_root, b, c->root.bytenr);
	BK_SET(tree_root_gen, b, c->root.generation);
	BK_SET(tree_root_level, b, c->root.level);
	BK_SET(chunk_root, b, c->chunk.bytenr);
	BK_SET(chunk_root_gen, b, c->chunk.generation);
	BK_SET(chunk_root_level, b, c->chunk.level);
	BK_SET(extent_root, b, c->extent.bytenr);
	BK_SET(extent_root_gen, b, c->extent.generation);
	BK_SET(extent_root_level, b, c->extent.level);
	BK_SET(fs_root, b, c->fs.bytenr);
	BK_SET(fs_root_gen, b, c->fs.generation);
	BK_SET(fs_root_level, b, c->fs.level);
	BK_SET(dev_root, b, c->dev.bytenr);
	BK_SET(dev_root_gen, b, c->dev.generation);
	BK_SET(dev_root_level, b, c->dev.level);
	BK_SET(csum_root, b, c->csum.bytenr);
	BK_SET(csum_root_gen, b, c->csum.generation);
	BK_SET(csum_root_level, b, c->csum.level);
	BK_SET(total_bytes, b, UB_GET(ub_disk_super, total_bytes, sb));
	BK_SET(bytes_used, b, c->bytes_used);
	BK_SET(num_devices, b, UB_GET(ub_disk_super, num_devices, sb));
}
