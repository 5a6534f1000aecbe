/* SPDX-License-Identifier: MIT */
/* Opening a filesystem: volume, chunk tree, root tree and the global trees. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include "ubtrfs/fs.h"
#include "decomp_pool.h"
#include "fs_embed.h"
#include "log_replay.h"
#include "tree/roots.h"
#include "ubtrfs/rootscan.h"

#define SB(field, sb) UB_GET(ub_disk_super, field, sb)
#define RI(field, p) UB_GET(btrfs_root_item, field, p)

/* The chunk tree holds every chunk and device; the volume needs them before any other tree can be read. */
static int load_chunk_tree(struct ub_fs *fs)
{
	struct ub_key key = { 0, 0, 0 };
	struct ub_path p;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_search(&fs->tc, &fs->chunk_tree->root, &key, &p);
	if (ret == 2)
		ret = ub_eb_nritems(p.nodes[0]) ? 0 : 1;
	else if (ret == 1)
		ret = 0;
	while (ret == 0) {
		const uint8_t *data;
		uint32_t size;

		ub_path_key(&p, &key);
		data = ub_path_data(&p, &size);
		if (key.type == BTRFS_DEV_ITEM_KEY)
			ret = ub_volume_add_dev_item(fs->vol, data, size);
		else if (key.type == BTRFS_CHUNK_ITEM_KEY)
			ret = ub_volume_add_chunk(fs->vol, key.offset, data, size);
		if (ret)
			break;
		ret = ub_tree_next(&p);
	}
	ub_path_release(&p);
	return ret < 0 ? ret : 0;
}

int ub_fs_root(struct ub_fs *fs, uint64_t objectid, struct ub_eroot **out)
{
	struct ub_root rt;
	int ret = ub_roots_committed(fs->roots, fs->root_tree, &rt);

	if (fs->view == UB_VIEW_LIVE) {
		/* a tree the running transaction made is loaded from the live root tree, as the writer loads it */
		if (!fs->root_tree)
			return -ENOENT;
		rt = fs->root_tree->root;
		ret = 0;
	}
	if (ret)
		return ret;
	return ub_roots_load(fs->roots, &fs->tc, &rt, objectid, out);
}

int ub_fs_committed(struct ub_fs *fs, const struct ub_eroot *er, struct ub_root *out)
{
	if (!er)
		return -ENOENT;
	switch (fs->view) {
	case UB_VIEW_PINNED:
		return ub_fs_view_lookup(fs, er->objectid, out);
	case UB_VIEW_LIVE:
		/* the live root is the writer's: a live read holds the writer lock (view.c) */
		if (!er->root.bytenr)
			return -ENOENT;
		*out = er->root;
		return 0;
	default: {
		/* inside a call pinned to one commit (view.c) */
		int ret = ub_view_call_root(fs, er->objectid, out);

		return ret <= 0 ? ret : ub_roots_committed(fs->roots, er, out);
	}
	}
}

int ub_fs_tree_root(struct ub_fs *fs, uint64_t objectid, struct ub_root *out)
{
	struct ub_eroot *er;
	int ret;

	/* a pinned view finds every root in its own root tree: the table holds the newest */
	if (fs->view == UB_VIEW_PINNED)
		return ub_fs_view_lookup(fs, objectid, out);
	if (fs->view == UB_VIEW_LATEST) {
		ret = ub_view_call_root(fs, objectid, out);
		if (ret <= 0)
			return ret;
	}
	ret = ub_fs_root(fs, objectid, &er);
	return ret ? ret : ub_fs_committed(fs, er, out);
}

static void find_global(struct ub_fs *fs, uint64_t id, struct ub_eroot **er, bool expected)
{
	int ret = ub_fs_root(fs, id, er);

	if (ret) {
		*er = NULL;
		if (expected && ret != -ENOENT)
			ub_warn(&fs->log, "cannot read the root item of tree %s: %s", ub_objectid_name(id),
				strerror(-ret));
		else if (expected)
			ub_warn(&fs->log, "tree %s is missing from the root tree", ub_objectid_name(id));
	}
}

/* What the log root tree and each log tree it names may hold, and who is walking which. */
struct log_check {
	struct ub_fs *fs;
	uint64_t subvol; /* the log tree being walked; 0 for the log root tree */
	struct ub_root *roots;
	uint64_t *subvols;
	size_t n;
};

static int log_root_leaf(void *arg, const struct ub_eb *eb)
{
	struct log_check *lc = arg;
	uint32_t n = ub_eb_nritems(eb);

	if (ub_eb_level(eb))
		return 0;
	for (uint32_t i = 0; i < n; i++) {
		struct ub_key k;
		uint32_t size;
		const uint8_t *d = ub_eb_item_data(eb, (int)i, &size);
		struct ub_root *nr;
		uint64_t *ns;

		ub_eb_item_key(eb, (int)i, &k);
		/* the kernel writes (TREE_LOG ROOT_ITEM subvolume) items there and nothing else */
		if (k.objectid != BTRFS_TREE_LOG_OBJECTID || k.type != BTRFS_ROOT_ITEM_KEY ||
		    size < offsetof(struct btrfs_root_item, generation_v2)) {
			ub_err(&lc->fs->log, "log root tree: leaf at logical %llu slot %u: key (%llu %u %llu) size %u "
			       "is not a log ROOT_ITEM, the only item the log root tree holds",
			       (unsigned long long)eb->start, i, (unsigned long long)k.objectid, k.type,
			       (unsigned long long)k.offset, size);
			return -EUCLEAN;
		}
		nr = realloc(lc->roots, (lc->n + 1) * sizeof(*nr));
		if (nr)
			lc->roots = nr;
		ns = realloc(lc->subvols, (lc->n + 1) * sizeof(*ns));
		if (ns)
			lc->subvols = ns;
		if (!nr || !ns)
			return -ENOMEM;
		lc->roots[lc->n] = (struct ub_root){ BTRFS_TREE_LOG_OBJECTID, RI(bytenr, d), RI(generation, d),
						     (uint8_t)RI(level, d) };
		lc->subvols[lc->n++] = k.offset;
		if (RI(level, d) >= UB_MAX_LEVEL) {
			ub_err(&lc->fs->log, "log root tree: leaf at logical %llu slot %u: log tree of subvolume %llu "
			       "has invalid level %u", (unsigned long long)eb->start, i, (unsigned long long)k.offset,
			       (unsigned)RI(level, d));
			return -EUCLEAN;
		}
	}
	return 0;
}

static int log_tree_leaf(void *arg, const struct ub_eb *eb)
{
	struct log_check *lc = arg;
	uint32_t n = ub_eb_nritems(eb);

	if (ub_eb_level(eb))
		return 0;
	for (uint32_t i = 0; i < n; i++) {
		struct ub_key k;
		ub_eb_item_key(eb, (int)i, &k);
		/* root items live in the log root tree; a log tree holding them is the log root tree's block */
		if (k.type == BTRFS_ROOT_ITEM_KEY) {
			ub_err(&lc->fs->log, "log tree of subvolume %llu: leaf at logical %llu slot %u: key (%llu %u "
			       "%llu) is a ROOT_ITEM, which no log tree holds: the pointer to this tree is wrong",
			       (unsigned long long)lc->subvol, (unsigned long long)eb->start, i,
			       (unsigned long long)k.objectid, k.type, (unsigned long long)k.offset);
			return -EUCLEAN;
		}
	}
	return 0;
}

/*
 * Before the log is replayed: every block of the log root tree and of the log
 * trees is entered once across all of them (they all carry owner TREE_LOG, so
 * only this tells a log tree that points into the log root tree or into
 * another log tree), and each holds only the items its kind may hold.
 */
/* keep: where the log's block set goes when it checks out (NULL: dropped) */
static int check_log(struct ub_fs *fs, struct ub_block_set *keep)
{
	const uint8_t *sb = fs->vol->super;
	/* the kernel writes the log in the transaction after the superblock's */
	struct ub_root lr = { BTRFS_TREE_LOG_OBJECTID, SB(log_root, sb), SB(generation, sb) + 1,
			      (uint8_t)SB(log_root_level, sb) };
	struct log_check lc = { fs, 0, NULL, NULL, 0 };
	struct ub_block_set seen = { 0 };
	int ret;

	if (SB(log_root_level, sb) >= UB_MAX_LEVEL) {
		ub_err(&fs->log, "superblock: log_root_level %llu is invalid", (unsigned long long)SB(log_root_level, sb));
		return -EUCLEAN;
	}
	ret = ub_tree_walk(&fs->tc, &lr, &seen, BTRFS_TREE_LOG_OBJECTID, log_root_leaf, &lc);
	for (size_t i = 0; i < lc.n && !ret; i++) {
		lc.subvol = lc.subvols[i];
		ret = ub_tree_walk(&fs->tc, &lc.roots[i], &seen, lc.subvols[i], log_tree_leaf, &lc);
		if (ret)
			ub_err(&fs->log, "log tree of subvolume %llu (root at logical %llu, level %u) is corrupt: %s",
			       (unsigned long long)lc.subvols[i], (unsigned long long)lc.roots[i].bytenr,
			       lc.roots[i].level, strerror(-ret));
	}
	if (keep && !ret)
		*keep = seen;
	else
		ub_block_set_free(&seen);
	free(lc.roots);
	free(lc.subvols);
	return ret;
}

/* Features that change how data or trees are found: read anyway (rescue), but say so. */
static void warn_features(struct ub_fs *fs)
{
	const uint64_t understood = BTRFS_FEATURE_INCOMPAT_MIXED_BACKREF | BTRFS_FEATURE_INCOMPAT_DEFAULT_SUBVOL |
				    BTRFS_FEATURE_INCOMPAT_MIXED_GROUPS | BTRFS_FEATURE_INCOMPAT_COMPRESS_LZO |
				    BTRFS_FEATURE_INCOMPAT_COMPRESS_ZSTD | BTRFS_FEATURE_INCOMPAT_BIG_METADATA |
				    BTRFS_FEATURE_INCOMPAT_EXTENDED_IREF | BTRFS_FEATURE_INCOMPAT_RAID56 |
				    BTRFS_FEATURE_INCOMPAT_SKINNY_METADATA | BTRFS_FEATURE_INCOMPAT_NO_HOLES |
				    BTRFS_FEATURE_INCOMPAT_METADATA_UUID | BTRFS_FEATURE_INCOMPAT_RAID1C34 |
				    BTRFS_FEATURE_INCOMPAT_ZONED | BTRFS_FEATURE_INCOMPAT_SIMPLE_QUOTA;
	uint64_t other = fs->incompat & ~understood;

	if (other & BTRFS_FEATURE_INCOMPAT_EXTENT_TREE_V2)
		ub_warn(&fs->log, "the filesystem uses extent-tree-v2, which ubtrfs does not support yet: reads may fail");
	if (other & BTRFS_FEATURE_INCOMPAT_RAID_STRIPE_TREE)
		ub_warn(&fs->log, "the filesystem uses the raid-stripe tree, which ubtrfs does not follow yet: "
				  "data reads may be wrong and fail their checksums");
	other &= ~(BTRFS_FEATURE_INCOMPAT_EXTENT_TREE_V2 | BTRFS_FEATURE_INCOMPAT_RAID_STRIPE_TREE);
	if (other)
		ub_warn(&fs->log, "unknown incompatible feature flags 0x%llx: reading anyway", (unsigned long long)other);
}

int ub_fs_open_volume(struct ub_fs *fs, const char *const *paths, struct ub_dev *const *devs, int npaths,
		  const struct ub_fs_opts *opts, const struct ub_log *log)
{
	struct ub_volume_opts vopts = { .writable = false, .super_mirror = -1 };
	int ret;

	if (log)
		fs->log = *log;
	else
		fs->log.verbosity = UB_LOG_WARN;
	if (opts) {
		fs->opts = *opts;
		vopts.writable = opts->writable;
		vopts.super_mirror = opts->super_mirror;
	} else {
		fs->opts.super_mirror = -1;
	}
	pthread_rwlock_init(&fs->live_lock, NULL); /* destroyed with the root table, below */
	fs->roots = calloc(1, sizeof(*fs->roots));
	if (!fs->roots) {
		for (int i = 0; devs && i < npaths; i++)
			ub_dev_close(devs[i]);
		return -ENOMEM;
	}
	ub_roots_init(fs->roots);
	ret = devs ? ub_volume_open_devs(devs, npaths, &vopts, &fs->log, &fs->vol)
		   : ub_volume_open(paths, npaths, &vopts, &fs->log, &fs->vol);
	if (ret)
		goto fail;
	ret = ub_tree_ctx_init(&fs->tc, fs->vol, &fs->log);
	if (ret)
		goto fail;
	if (fs->opts.cache_bytes)
		ub_tree_set_cache_limit(&fs->tc, fs->opts.cache_bytes / 4 * 3);
	return 0;
fail:
	ub_fs_fini(fs);
	return ret;
}

#define BK(field, b) UB_GET(ub_disk_root_backup, field, b)

static const uint8_t *backup_slot(const uint8_t *sb, int i)
{
	return UB_PTR(ub_disk_super, super_roots, sb) + i * sizeof(struct ub_disk_root_backup);
}

static int add_top_roots(struct ub_fs *fs, const struct ub_root *tree, const struct ub_root *chunk)
{
	int ret = ub_roots_add(fs->roots, tree, false, &fs->root_tree);

	return ret ? ret : ub_roots_add(fs->roots, chunk, false, &fs->chunk_tree);
}

/* Back to an empty root table, before another root is tried. */
static int reset_roots(struct ub_fs *fs)
{
	ub_roots_destroy(fs->roots);
	ub_roots_init(fs->roots);
	fs->root_tree = fs->chunk_tree = NULL;
	return 0;
}

/* Writing on top of an older root would orphan everything committed after it. */
static int older_root_read_only(struct ub_fs *fs, const char *what)
{
	if (!fs->opts.writable)
		return 0;
	ub_err(&fs->log, "%s opens read-only only", what);
	return -EROFS;
}

/*
 * The root tree and chunk tree of backup slot i; the other trees follow from
 * that root tree's items, so every block read under it is checked against its
 * own older generation.
 */
static int use_backup_slot(struct ub_fs *fs, int i)
{
	const uint8_t *sb = fs->vol->super, *b = backup_slot(sb, i);
	uint64_t gen = BK(tree_root_gen, b);
	struct ub_root tree = { BTRFS_ROOT_TREE_OBJECTID, BK(tree_root, b), gen, (uint8_t)BK(tree_root_level, b) };
	struct ub_root chunk = { BTRFS_CHUNK_TREE_OBJECTID, BK(chunk_root, b), BK(chunk_root_gen, b),
				 (uint8_t)BK(chunk_root_level, b) };

	if (gen > SB(generation, sb) || chunk.generation > gen) {
		ub_err(&fs->log, "backup root %d: generation %llu is newer than the superblock's %llu", i,
		       (unsigned long long)gen, (unsigned long long)SB(generation, sb));
		return -EUCLEAN;
	}
	if (tree.level >= UB_MAX_LEVEL || chunk.level >= UB_MAX_LEVEL || !chunk.bytenr) {
		ub_err(&fs->log, "backup root %d (generation %llu): invalid level or chunk root", i,
		       (unsigned long long)gen);
		return -EUCLEAN;
	}
	return add_top_roots(fs, &tree, &chunk);
}

static int backup_roots(struct ub_fs *fs, uint64_t gen)
{
	const uint8_t *sb = fs->vol->super;
	int ret = older_root_read_only(fs, "an older root");

	for (int i = 0; i < UB_NUM_BACKUP_ROOTS && !ret; i++) {
		const uint8_t *b = backup_slot(sb, i);

		if (BK(tree_root_gen, b) != gen || !BK(tree_root, b))
			continue;
		ret = use_backup_slot(fs, i);
		if (!ret)
			ub_info(&fs->log, "using backup root %d: root tree at logical %llu, generation %llu", i,
				(unsigned long long)BK(tree_root, b), (unsigned long long)gen);
		return ret;
	}
	if (!ret) {
		ub_err(&fs->log, "no backup root of generation %llu in the superblock", (unsigned long long)gen);
		ret = -ENOENT;
	}
	return ret;
}

static void current_roots(const uint8_t *sb, struct ub_root *tree, struct ub_root *chunk)
{
	*tree = (struct ub_root){ BTRFS_ROOT_TREE_OBJECTID, SB(root, sb), SB(generation, sb), (uint8_t)SB(root_level, sb) };
	*chunk = (struct ub_root){ BTRFS_CHUNK_TREE_OBJECTID, SB(chunk_root, sb), SB(chunk_root_generation, sb),
				   (uint8_t)SB(chunk_root_level, sb) };
}

/*
 * The root tree at `bytenr`: its header gives generation and level (checked
 * like any root block: checksum, fsid, bytenr, owner); the chunk tree is the
 * backup slot's of that generation if there is one, else the current one,
 * whose chunks map the block in the first place.
 */
static int root_at(struct ub_fs *fs, uint64_t bytenr)
{
	const uint8_t *sb = fs->vol->super;
	struct ub_expect exp = { .owner = BTRFS_ROOT_TREE_OBJECTID, .level = -1, .exact_owner = true };
	struct ub_root tree, chunk;
	struct ub_eb *eb;
	int ret = older_root_read_only(fs, "a root tree named by address");

	current_roots(sb, &tree, &chunk);
	if (!ret)
		ret = add_top_roots(fs, &tree, &chunk);
	if (!ret)
		ret = load_chunk_tree(fs);
	if (!ret)
		ret = ub_tree_read_block(&fs->tc, bytenr, &exp, &eb);
	if (ret) {
		ub_err(&fs->log, "no root tree block at logical %llu: %s", (unsigned long long)bytenr, strerror(-ret));
		return ret;
	}
	tree = (struct ub_root){ BTRFS_ROOT_TREE_OBJECTID, bytenr, ub_eb_generation(eb), ub_eb_level(eb) };
	ub_eb_put(&fs->tc, eb);
	if (tree.generation > SB(generation, sb)) {
		ub_err(&fs->log, "root tree block at logical %llu: generation %llu is newer than the superblock's %llu",
		       (unsigned long long)bytenr, (unsigned long long)tree.generation,
		       (unsigned long long)SB(generation, sb));
		return -EUCLEAN;
	}
	for (int i = 0; i < UB_NUM_BACKUP_ROOTS; i++) {
		const uint8_t *b = backup_slot(sb, i);

		if (BK(tree_root_gen, b) == tree.generation && BK(chunk_root, b) &&
		    BK(chunk_root_gen, b) <= tree.generation && BK(chunk_root_level, b) < UB_MAX_LEVEL) {
			chunk = (struct ub_root){ BTRFS_CHUNK_TREE_OBJECTID, BK(chunk_root, b), BK(chunk_root_gen, b),
						  (uint8_t)BK(chunk_root_level, b) };
			break;
		}
	}
	reset_roots(fs);
	ret = add_top_roots(fs, &tree, &chunk);
	if (!ret)
		ub_info(&fs->log, "using the root tree at logical %llu, generation %llu", (unsigned long long)bytenr,
			(unsigned long long)tree.generation);
	return ret;
}

static int pick_roots(struct ub_fs *fs)
{
	struct ub_root tree, chunk;

	if (fs->opts.root_bytenr)
		return root_at(fs, fs->opts.root_bytenr);
	if (fs->opts.root_generation)
		return backup_roots(fs, fs->opts.root_generation);
	current_roots(fs->vol->super, &tree, &chunk);
	return add_top_roots(fs, &tree, &chunk);
}

/* What a failed probe found first, for one line of message. */
static void probe_problem(const struct ub_root_probe *pr, char *buf, size_t len)
{
	char name[32];

	if (pr->tree_err) {
		snprintf(buf, len, "root tree block at logical %llu: %s", (unsigned long long)pr->tree.bytenr,
			 strerror(-pr->tree_err));
		return;
	}
	for (int i = 0; i < UB_PROBE_NTREES; i++) {
		if (!pr->trees[i].err)
			continue;
		ub_tree_name(ub_probe_tree_ids[i], name, sizeof(name));
		if (pr->trees[i].root.bytenr)
			snprintf(buf, len, "%s root at logical %llu: %s", name, (unsigned long long)pr->trees[i].root.bytenr,
				 strerror(-pr->trees[i].err));
		else
			snprintf(buf, len, "%s: %s", name,
				 pr->trees[i].err == -ENOENT ? "no root item" : strerror(-pr->trees[i].err));
		return;
	}
	snprintf(buf, len, "no problem");
}

static int probe_picked(struct ub_fs *fs, struct ub_root_probe *pr)
{
	struct ub_root rt;
	int ret = ub_roots_committed(fs->roots, fs->root_tree, &rt);

	memset(pr, 0, sizeof(*pr));
	if (ret)
		pr->tree_err = ret;
	return ret ? ret : ub_root_tree_probe(&fs->tc, &rt, pr);
}

/*
 * --backup: the root picked could not be read (why says how); the backup
 * slots other than the one that failed, newest generation first, until one
 * whose chunk tree loads and whose root tree and main trees read.
 */
static int fall_back(struct ub_fs *fs, const char *why)
{
	const uint8_t *sb = fs->vol->super;
	uint64_t failed = fs->root_tree ? fs->root_tree->committed.bytenr : 0;
	/* only older roots: a newer one than an older root asked for is not what the caller wants */
	uint64_t below = fs->root_tree ? fs->root_tree->committed.generation : SB(generation, sb) + 1;
	struct ub_root_probe pr;
	char problem[192];
	int ret = older_root_read_only(fs, "a backup root");

	if (ret)
		return ret;
	ub_warn(&fs->log, "the root (generation %llu) cannot be read: %s; trying the older backup roots",
		(unsigned long long)(fs->root_tree ? fs->root_tree->committed.generation : SB(generation, sb)), why);
	for (;;) {
		int best = -1;

		for (int i = 0; i < UB_NUM_BACKUP_ROOTS; i++) {
			const uint8_t *b = backup_slot(sb, i);

			if (!BK(tree_root, b) || BK(tree_root, b) == failed || BK(tree_root_gen, b) >= below)
				continue;
			if (best < 0 || BK(tree_root_gen, b) > BK(tree_root_gen, backup_slot(sb, best)))
				best = i;
		}
		if (best < 0)
			break;
		below = BK(tree_root_gen, backup_slot(sb, best));
		reset_roots(fs);
		bool probed = false;

		ret = use_backup_slot(fs, best);
		if (!ret)
			ret = load_chunk_tree(fs);
		if (!ret) {
			probed = true;
			ret = probe_picked(fs, &pr);
		}
		if (!ret) {
			ub_warn(&fs->log, "using backup root %d: generation %llu, root tree at logical %llu", best,
				(unsigned long long)below, (unsigned long long)fs->root_tree->committed.bytenr);
			return 0;
		}
		if (ret == -ENOMEM)
			return ret;
		if (probed)
			probe_problem(&pr, problem, sizeof(problem));
		else
			snprintf(problem, sizeof(problem), "%s", strerror(-ret));
		ub_warn(&fs->log, "backup root %d (generation %llu) cannot be read either: %s", best,
			(unsigned long long)below, problem);
	}
	ub_err(&fs->log, "no backup root is readable");
	return -EIO;
}

int ub_fs_load_trees(struct ub_fs *fs)
{
	const uint8_t *sb = fs->vol->super;
	struct ub_root_probe pr;
	char problem[192];
	int ret;

	fs->incompat = SB(incompat_flags, sb);
	fs->compat_ro = SB(compat_ro_flags, sb);
	/* the two trees the superblock points at come first in the table */
	ret = pick_roots(fs);
	if (ret)
		goto fail;
	warn_features(fs);
	ret = load_chunk_tree(fs);
	if (ret && ret != -ENOMEM && fs->opts.rescue_chunks && !fs->opts.writable) {
		int why = ret;

		ub_warn(&fs->log, "the chunk tree cannot be read whole (%s): looking for older copies of its leaves",
			strerror(-ret));
		ret = ub_fs_rescue_chunks(fs);
		/* the leaves found may be older than chunks added since: those come from the other trees */
		if (ret == 0)
			ret = ub_fs_complete_chunks(fs);
		else if (ret == -ENOENT)
			ret = ub_fs_rebuild_chunks(fs, false);
		/* nothing found: the chunk tree's own failure is the one to report */
		if (ret == -ENOENT)
			ret = why;
	}
	if (ret && fs->opts.backup) {
		snprintf(problem, sizeof(problem), "chunk tree: %s", strerror(-ret));
		ret = fall_back(fs, problem);
	} else if (ret) {
		ub_err(&fs->log, "cannot read the chunk tree: %s", strerror(-ret));
	} else if (probe_picked(fs, &pr)) {
		probe_problem(&pr, problem, sizeof(problem));
		if (fs->opts.backup)
			ret = fall_back(fs, problem);
		else if (pr.tree_err)
			ub_warn(&fs->log, "the root tree cannot be read (%s); a backup root may still be readable", problem);
	}
	if (ret) {
		ub_volume_check_devices(fs->vol);
		goto fail;
	}
	/* too many missing devices is not fatal: whatever survives can still be read */
	ub_volume_check_devices(fs->vol);
	find_global(fs, BTRFS_EXTENT_TREE_OBJECTID, &fs->extent_tree, true);
	find_global(fs, BTRFS_DEV_TREE_OBJECTID, &fs->dev_tree, true);
	find_global(fs, BTRFS_CSUM_TREE_OBJECTID, &fs->csum_tree, true);
	find_global(fs, BTRFS_UUID_TREE_OBJECTID, &fs->uuid_tree, false);
	find_global(fs, BTRFS_FREE_SPACE_TREE_OBJECTID, &fs->fst_tree,
		    fs->compat_ro & BTRFS_FEATURE_COMPAT_RO_FREE_SPACE_TREE);
	find_global(fs, BTRFS_BLOCK_GROUP_TREE_OBJECTID, &fs->bgt_tree,
		    fs->compat_ro & BTRFS_FEATURE_COMPAT_RO_BLOCK_GROUP_TREE);
	find_global(fs, BTRFS_QUOTA_TREE_OBJECTID, &fs->quota_tree, false);
	find_global(fs, BTRFS_RAID_STRIPE_TREE_OBJECTID, &fs->rst_tree,
		    fs->incompat & BTRFS_FEATURE_INCOMPAT_RAID_STRIPE_TREE);
	/* the log continues the superblock's root: on an older one it would replay onto the wrong trees */
	if (!fs->opts.no_log && SB(log_root, sb) && fs->root_tree->committed.bytenr != SB(root, sb)) {
		ub_info(&fs->log, "the fsync log belongs to the superblock's root: not replayed on an older root");
	} else if (!fs->opts.no_log && SB(log_root, sb)) {
		/* a failed replay is reported and reading goes on without the log */
		ret = check_log(fs, NULL);
		if (ret)
			ub_err(&fs->log, "the fsync log tree (root at logical %llu) is corrupt: %s; reading without it",
			       (unsigned long long)SB(log_root, sb), strerror(-ret));
		else
			ub_replay_log(fs);
	}
	return 0;
fail:
	ub_fs_fini(fs);
	return ret;
}

int ub_fs_open_at(struct ub_fs *fs, const char *const *paths, struct ub_dev *const *devs, int npaths,
		  const struct ub_fs_opts *opts, const struct ub_log *log)
{
	int ret = ub_fs_open_volume(fs, paths, devs, npaths, opts, log);

	return ret ? ret : ub_fs_load_trees(fs);
}

/* From paths, or from devices already open when `devs` is set (then they are ours to close, whatever happens). */
static int fs_open(const char *const *paths, struct ub_dev *const *devs, int npaths, const struct ub_fs_opts *opts,
		   const struct ub_log *log, struct ub_fs **out)
{
	struct ub_fs *fs = calloc(1, sizeof(*fs));
	int ret;

	if (!fs) {
		for (int i = 0; devs && i < npaths; i++)
			ub_dev_close(devs[i]);
		return -ENOMEM;
	}
	ret = ub_fs_open_at(fs, paths, devs, npaths, opts, log);
	if (ret) {
		free(fs);
		return ret;
	}
	*out = fs;
	return 0;
}

int ub_fs_open(const char *const *paths, int npaths, const struct ub_fs_opts *opts, const struct ub_log *log,
	       struct ub_fs **out)
{
	return fs_open(paths, NULL, npaths, opts, log, out);
}

int ub_fs_open_devs(struct ub_dev *const *devs, int ndevs, const struct ub_fs_opts *opts, const struct ub_log *log,
		    struct ub_fs **out)
{
	return fs_open(NULL, devs, ndevs, opts, log, out);
}

void ub_fs_fini(struct ub_fs *fs)
{
	ub_dc_pool_destroy(fs->dc_pool);
	fs->dc_pool = NULL;
	ub_replay_free(fs->replay);
	fs->replay = NULL;
	ub_loose_free(fs->loose);
	fs->loose = NULL;
	ub_loose_csums_free(fs->loose_csums);
	fs->loose_csums = NULL;
	ub_tree_ctx_destroy(&fs->tc);
	memset(&fs->tc, 0, sizeof(fs->tc));
	ub_volume_close(fs->vol);
	fs->vol = NULL;
	if (fs->roots) {
		ub_roots_destroy(fs->roots);
		free(fs->roots);
		fs->roots = NULL;
		pthread_rwlock_destroy(&fs->live_lock);
	}
}

int ub_fs_replay_log_strict(struct ub_fs *fs, struct ub_block_set *blocks)
{
	int ret;

	memset(blocks, 0, sizeof(*blocks));
	if (!SB(log_root, fs->vol->super))
		return 0;
	ret = check_log(fs, blocks);
	if (ret == 0)
		ret = ub_replay_log(fs);
	if (ret) {
		ub_fs_drop_replay(fs);
		ub_block_set_free(blocks);
	}
	return ret;
}

void ub_fs_drop_replay(struct ub_fs *fs)
{
	ub_replay_free(fs->replay);
	fs->replay = NULL;
}

void ub_fs_close(struct ub_fs *fs)
{
	if (!fs)
		return;
	if (fs->base) {
		ub_fs_view_free(fs);
		return;
	}
	ub_fs_fini(fs);
	free(fs);
}
