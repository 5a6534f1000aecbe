/* SPDX-License-Identifier: MIT */
/*
 * Repair: the cures of the problems a check noted, in one copy-on-write
 * transaction of the write engine (include/ubtrfs/repair.h).
 *
 * The checker decides what is wrong and what the value must be (struct
 * ub_chk_problem's fix and want); this file only applies it, so the rule of
 * what is right lives in one place. Nothing is written in place: the tree
 * blocks changed are new copies, the superblocks point at them at the commit,
 * and until then every device still holds the filesystem as it was.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ubtrfs/repair.h"
#include "ubtrfs/undo.h"
#include "fsw/fsw.h"
#include "repair/repair_priv.h"

int ub_repair_new(struct ub_repair **out)
{
	*out = calloc(1, sizeof(**out));
	return *out ? 0 : -ENOMEM;
}

void ub_repair_free(struct ub_repair *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->nnotes; i++)
		free(r->notes[i].drefs);
	free(r->notes);
	free(r);
}

int ub_repair_note(struct ub_repair *r, const struct ub_chk_problem *p)
{
	struct rp_note *n;

	r->noted++;
	if (p->fix == UB_CHK_FIX_NONE || (unsigned)p->fix >= UB_CHK_FIX_COUNT)
		return 0;
	if (r->nnotes == r->cap) {
		size_t cap = r->cap ? r->cap * 2 : 64;
		struct rp_note *m = realloc(r->notes, cap * sizeof(*m));

		if (!m)
			return -ENOMEM;
		r->notes = m;
		r->cap = cap;
	}
	n = &r->notes[r->nnotes++];
	memset(n, 0, sizeof(*n)); /* drefs NULL: filled by rp_data_scan */
	n->fix = p->fix;
	n->tree = p->tree;
	n->inode = p->inode;
	n->devid = p->devid;
	n->want = p->want;
	n->want2 = p->want2;
	if (p->fix == UB_CHK_FIX_EXTENT_ADD) {
		if (!p->logical)
			goto drop;
		n->key = (struct ub_key){ p->logical, 0, 0 };
		n->inode = p->logical;
	}
	if (p->fix == UB_CHK_FIX_DATA_ADD) {
		if (!p->logical || !p->tree || !p->inode)
			goto drop;
		n->key = (struct ub_key){ p->logical, 0, 0 };
	}
	if (p->fix == UB_CHK_FIX_EXTENT_DEL) {
		if (!p->has_key)
			goto drop;
		n->key = p->key;
		n->inode = p->key.objectid;
	}
	if (p->fix == UB_CHK_FIX_ROOT_NEWER || p->fix == UB_CHK_FIX_SALVAGE) {
		if (!p->logical || !p->tree)
			goto drop;
		n->inode = p->logical;
	}
	/*
	 * The chunk tree's blocks are the volume's map, the log's and relocation's
	 * are not the engine's to copy. A checksum tree block is not salvaged
	 * either: its checksums are data the tree checks cannot judge, and one a
	 * mutation changed would make data that reads now (unverified, the
	 * block being unreadable) fail to read; --init-csum-tree rebuilds the
	 * tree from the data instead.
	 */
	if (p->fix == UB_CHK_FIX_SALVAGE && (p->tree == BTRFS_CHUNK_TREE_OBJECTID || p->tree == BTRFS_TREE_LOG_OBJECTID ||
					     p->tree == BTRFS_TREE_RELOC_OBJECTID || p->tree == BTRFS_CSUM_TREE_OBJECTID))
		goto drop;
	if (p->fix == UB_CHK_FIX_UUID_ADD || p->fix == UB_CHK_FIX_UUID_DEL) {
		if (!p->has_key)
			goto drop;
		n->key = p->key;
		if (p->fix == UB_CHK_FIX_UUID_ADD)
			n->tree = p->key.objectid;
	}
	if (p->fix == UB_CHK_FIX_EXTENT_REFS) {
		if (!p->has_key)
			goto drop;
		n->key = p->key;
		n->tree = BTRFS_EXTENT_TREE_OBJECTID;
		n->inode = p->key.objectid; /* sorts and tells the notes of two extents apart */
	}
	/* an added reference goes to the block's item wherever it is (one made by EXTENT_ADD too): no key needed */
	if (p->fix == UB_CHK_FIX_BLOCK_REF_ADD || p->fix == UB_CHK_FIX_BLOCK_REF_DEL) {
		if ((!p->has_key && p->fix == UB_CHK_FIX_BLOCK_REF_DEL) || !p->logical)
			goto drop;
		n->key = p->has_key ? p->key : (struct ub_key){ p->logical, 0, 0 };
		n->tree = BTRFS_EXTENT_TREE_OBJECTID;
		n->inode = p->logical;
	}
	if (p->fix == UB_CHK_FIX_EXTENT_GEN) {
		if (!p->has_key)
			goto drop;
		n->key = p->key;
		n->tree = BTRFS_EXTENT_TREE_OBJECTID;
		n->inode = p->key.objectid;
	}
	if (p->fix == UB_CHK_FIX_DATA_REF_DROP) {
		if (!p->has_key || !p->tree || !p->inode)
			goto drop;
		n->key = p->key;
	}
	if ((p->fix == UB_CHK_FIX_INODE_GEN || p->fix == UB_CHK_FIX_ROOT_DIR) && (!p->tree || !p->inode))
		goto drop;
	if (p->fix == UB_CHK_FIX_QGROUP) {
		if (!p->has_key || p->key.type != BTRFS_QGROUP_INFO_KEY)
			goto drop;
		n->key = p->key;
		n->tree = BTRFS_QUOTA_TREE_OBJECTID;
		n->inode = p->key.offset; /* the referenced and the exclusive problem are one note */
	}
	/* every space problem has the one cure, every bad copy too: keep one note of each */
	if (p->fix == UB_CHK_FIX_SPACE || p->fix == UB_CHK_FIX_COPY) {
		n->tree = n->inode = n->devid = n->want = 0;
	}
	return 0;
	/* a cure without what it needs to know: no note (counted as noted, not as curable) */
drop:
	r->nnotes--;
	return 0;
}

static bool space_cure(enum ub_chk_fix f)
{
	return f == UB_CHK_FIX_SPACE || f == UB_CHK_FIX_EXTENT_ADD || f == UB_CHK_FIX_DATA_ADD ||
	       f == UB_CHK_FIX_EXTENT_DEL;
}

/*
 * An extent the extent tree misses and this repair cannot make again: the
 * space cures all count from the extent tree, and it would call that
 * extent's space free (a later write would go over it). They are dropped,
 * and the space accounting is left as it is; so is the warning itself, which
 * has no cure.
 */
static void drop_space_cures(struct rp_ctx *c)
{
	struct ub_repair *r = c->r;
	size_t k = 0, uncounted = 0, dropped = 0;

	for (size_t i = 0; i < r->nnotes; i++)
		uncounted += r->notes[i].fix == UB_CHK_FIX_UNCOUNTED;
	for (size_t i = 0; i < r->nnotes; i++) {
		if (r->notes[i].fix == UB_CHK_FIX_UNCOUNTED || (uncounted && space_cure(r->notes[i].fix))) {
			dropped += r->notes[i].fix != UB_CHK_FIX_UNCOUNTED;
			continue;
		}
		r->notes[k++] = r->notes[i];
	}
	r->nnotes = k;
	if (dropped)
		ub_warn(c->log, "repair: the extent tree misses %zu extents this repair cannot make again: the block "
			"group counts, the free space tree and the extent items are left as they are (counted again "
			"from the extent tree they would call space in use free)", uncounted);
}

/*
 * A root item moved to its tree's newer root: the check judged the extent
 * tree's references against the older root (its leaves' file extents, its
 * nodes' pointers), which the move leaves unreached. Those cures would fit
 * the extent tree to the older root: they are dropped, and a check after the
 * repair judges the references again against the newer one.
 */
static void drop_older_root_cures(struct rp_ctx *c)
{
	struct ub_repair *r = c->r;
	size_t k = 0, dropped = 0;
	bool moved = false;

	for (size_t i = 0; i < r->nnotes; i++)
		moved |= r->notes[i].fix == UB_CHK_FIX_ROOT_NEWER || r->notes[i].fix == UB_CHK_FIX_BEHIND;
	if (!moved)
		return;
	for (size_t i = 0; i < r->nnotes; i++) {
		enum ub_chk_fix f = r->notes[i].fix;

		/* a warning, no cure */
		if (f == UB_CHK_FIX_BEHIND)
			continue;

		if (f == UB_CHK_FIX_EXTENT_REFS || f == UB_CHK_FIX_EXTENT_ADD || f == UB_CHK_FIX_EXTENT_DEL ||
		    f == UB_CHK_FIX_DATA_ADD || f == UB_CHK_FIX_BLOCK_REF_ADD || f == UB_CHK_FIX_BLOCK_REF_DEL ||
		    f == UB_CHK_FIX_DATA_REF_DROP || f == UB_CHK_FIX_EXTENT_GEN) {
			dropped++;
			continue;
		}
		r->notes[k++] = r->notes[i];
	}
	r->nnotes = k;
	if (dropped)
		ub_warn(c->log, "repair: a root item moves to its tree's newer root, or may be behind its tree: %zu "
			"cures of the extent tree's references, judged against the older root, are left", dropped);
}

static int note_cmp(const void *a, const void *b)
{
	const struct rp_note *x = a, *y = b;

	if (x->fix != y->fix)
		return x->fix < y->fix ? -1 : 1;
	if (x->tree != y->tree)
		return x->tree < y->tree ? -1 : 1;
	if (x->inode != y->inode)
		return x->inode < y->inode ? -1 : 1;
	if (x->devid != y->devid)
		return x->devid < y->devid ? -1 : 1;
	if (x->want != y->want)
		return x->want < y->want ? -1 : 1;
	/* two pointers of one block from nodes of one tree: two references to add */
	if (x->want2 != y->want2)
		return x->want2 < y->want2 ? -1 : 1;
	return memcmp(&x->key, &y->key, sizeof(x->key));
}

/* One note per cure: sorted, the same (fix, tree, inode, device) once. */
static void notes_unique(struct ub_repair *r)
{
	size_t k = 0;

	/* nothing noted: notes is NULL, which qsort may not be given even for no elements */
	if (!r->nnotes)
		return;
	qsort(r->notes, r->nnotes, sizeof(*r->notes), note_cmp);
	for (size_t i = 0; i < r->nnotes; i++)
		if (!k || note_cmp(&r->notes[k - 1], &r->notes[i]))
			r->notes[k++] = r->notes[i];
	r->nnotes = k;
}

static const char *const field_name[UB_CHK_FIX_COUNT] = {
	[UB_CHK_FIX_NLINK] = "nlink",
	[UB_CHK_FIX_NBYTES] = "nbytes",
	[UB_CHK_FIX_DIR_SIZE] = "size",
};

/* A dry run: what each note would change, nothing opened for writing. */
static void dry_run(struct rp_ctx *c)
{
	for (size_t i = 0; i < c->r->nnotes; i++) {
		const struct rp_note *n = &c->r->notes[i];

		switch (n->fix) {
		case UB_CHK_FIX_NLINK:
		case UB_CHK_FIX_NBYTES:
		case UB_CHK_FIX_DIR_SIZE:
			rp_say(c, n, 0, "would set inode %llu's %s to %llu (tree %llu)", (unsigned long long)n->inode,
			       field_name[n->fix], (unsigned long long)n->want, (unsigned long long)n->tree);
			break;
		case UB_CHK_FIX_DEV_USED:
			rp_say(c, n, 0, "would set devid %llu's bytes_used to %llu, its device extents' sum",
			       (unsigned long long)n->devid, (unsigned long long)n->want);
			break;
		case UB_CHK_FIX_HOLES:
			rp_say(c, n, 0, "would add hole file extent items in the gaps of inode %llu (tree %llu)",
			       (unsigned long long)n->inode, (unsigned long long)n->tree);
			break;
		case UB_CHK_FIX_UUID_ADD:
			rp_say(c, n, 0, "would add subvolume %llu to the uuid tree under its %suuid",
			       (unsigned long long)n->tree, n->want == BTRFS_UUID_KEY_RECEIVED_SUBVOL ? "received " : "");
			break;
		case UB_CHK_FIX_UUID_DEL:
			rp_say(c, n, 0, "would remove subvolume %llu from the uuid tree item (%llu %u %llu)",
			       (unsigned long long)n->want, (unsigned long long)n->key.objectid, n->key.type,
			       (unsigned long long)n->key.offset);
			break;
		case UB_CHK_FIX_DEAD_ORPHAN:
			rp_say(c, n, 0, "would add the orphan item of deleted subvolume %llu", (unsigned long long)n->want);
			break;
		case UB_CHK_FIX_COPY:
			rp_say(c, n, 0, "would scrub: every bad copy of a tree block or of data rewritten from a good "
			       "one");
			break;
		case UB_CHK_FIX_EXTENT_ADD:
			rp_say(c, n, 0, "would give tree block %llu its extent item back (one reference, of tree %llu)",
			       (unsigned long long)n->key.objectid, (unsigned long long)n->want);
			break;
		case UB_CHK_FIX_DATA_ADD:
			rp_say(c, n, 0, "would give the data at %llu its extent item back (%llu references of inode %llu, "
			       "tree %llu)", (unsigned long long)n->key.objectid, (unsigned long long)n->want,
			       (unsigned long long)n->inode, (unsigned long long)n->tree);
			break;
		case UB_CHK_FIX_EXTENT_DEL:
			rp_say(c, n, 0, "would remove the extent item of tree block %llu, which no tree reaches",
			       (unsigned long long)n->key.objectid);
			break;
		case UB_CHK_FIX_EXTENT_REFS:
			rp_say(c, n, 0, "would set the references of extent %llu (%s) to %llu",
			       (unsigned long long)n->key.objectid,
			       n->key.type == BTRFS_METADATA_ITEM_KEY ? "tree block" : "extent item",
			       (unsigned long long)n->want);
			break;
		case UB_CHK_FIX_OVERLAP:
			rp_say(c, n, 0, "would cut the file extent items of inode %llu (tree %llu) that run past %llu to end there",
			       (unsigned long long)n->inode, (unsigned long long)n->tree, (unsigned long long)n->want);
			break;
		case UB_CHK_FIX_BLOCK_REF_ADD:
			rp_say(c, n, 0, "would give tree block %llu a reference for the pointer from %s %llu",
			       (unsigned long long)n->inode, n->want2 ? "node" : "the root item of tree",
			       (unsigned long long)(n->want2 ? n->want2 : n->want));
			break;
		case UB_CHK_FIX_BLOCK_REF_DEL:
			rp_say(c, n, 0, "would remove tree block %llu's %s %llu, which no pointer stands for",
			       (unsigned long long)n->inode,
			       n->want == BTRFS_SHARED_BLOCK_REF_KEY ? "SHARED_BLOCK_REF parent" : "TREE_BLOCK_REF root",
			       (unsigned long long)n->want2);
			break;
		case UB_CHK_FIX_NAMES:
			rp_say(c, n, 0, "would make the names of inode %llu in directory %llu whole (tree %llu)",
			       (unsigned long long)n->inode, (unsigned long long)n->want, (unsigned long long)n->tree);
			break;
		case UB_CHK_FIX_LOST:
			rp_say(c, n, 0, "would link inode %llu (tree %llu) into /lost+found unless a name is made again",
			       (unsigned long long)n->inode, (unsigned long long)n->tree);
			break;
		case UB_CHK_FIX_ROOT_NEWER:
			rp_say(c, n, 0, "would point the root item of tree %llu at its newer root, tree block %llu "
			       "(generation %llu, level %llu)", (unsigned long long)n->tree, (unsigned long long)n->inode,
			       (unsigned long long)n->want, (unsigned long long)n->want2);
			break;
		case UB_CHK_FIX_ROOT_DIR:
			rp_say(c, n, 0, "would make the inode item of subvolume %llu's root directory %llu again",
			       (unsigned long long)n->tree, (unsigned long long)n->inode);
			break;
		case UB_CHK_FIX_DATA_REF_DROP:
			rp_say(c, n, 0, "would lower extent %llu's EXTENT_DATA_REF (root %llu inode %llu offset %llu) by %llu",
			       (unsigned long long)n->key.objectid, (unsigned long long)n->tree, (unsigned long long)n->inode,
			       (unsigned long long)n->want, (unsigned long long)n->want2);
			break;
		case UB_CHK_FIX_NUM_DEVICES:
			rp_say(c, n, 0, "would set the superblocks' num_devices to %llu", (unsigned long long)n->want);
			break;
		case UB_CHK_FIX_INODE_GEN:
			rp_say(c, n, 0, "would set inode %llu's generation and transid (tree %llu) to the repair's transaction",
			       (unsigned long long)n->inode, (unsigned long long)n->tree);
			break;
		case UB_CHK_FIX_EXTENT_GEN:
			rp_say(c, n, 0, "would set the generation of extent %llu to %llu", (unsigned long long)n->key.objectid,
			       (unsigned long long)n->want);
			break;
		case UB_CHK_FIX_QGROUP:
			rp_say(c, n, 0, "would set qgroup %llu/%llu's counts to referenced %llu, exclusive %llu bytes",
			       (unsigned long long)(n->key.offset >> 48),
			       (unsigned long long)(n->key.offset & ((1ULL << 48) - 1)), (unsigned long long)n->want,
			       (unsigned long long)n->want2);
			break;
		case UB_CHK_FIX_SPACE:
			rp_say(c, n, 0, "would recount every block group's used bytes and the superblock's bytes_used "
			       "from the extent tree and rewrite the free space tree from them");
			break;
		default:
			break;
		}
	}
}

/* The inode fields: the item read from the running transaction, one field set, written back (copied on write). */
static int fix_inode(struct rp_ctx *c, const struct rp_note *n)
{
	uint8_t ii[UB_II_SIZE];
	struct fsw w;
	uint64_t was;
	int ret = fsw_init_ro(&w, c->t, n->tree);

	if (!ret)
		ret = fsw_inode_get(&w, n->inode, ii);
	if (ret) {
		ub_err(c->log, "repair: inode %llu of tree %llu cannot be read for its %s: %s",
		       (unsigned long long)n->inode, (unsigned long long)n->tree, field_name[n->fix], strerror(-ret));
		return ret;
	}
	switch (n->fix) {
	case UB_CHK_FIX_NLINK:
		if (n->want > UINT32_MAX)
			return -EOVERFLOW;
		was = UB_GET(btrfs_inode_item, nlink, ii);
		UB_SET(btrfs_inode_item, nlink, ii, (uint32_t)n->want);
		break;
	case UB_CHK_FIX_NBYTES:
		was = UB_GET(btrfs_inode_item, nbytes, ii);
		UB_SET(btrfs_inode_item, nbytes, ii, n->want);
		break;
	default:
		was = UB_GET(btrfs_inode_item, size, ii);
		UB_SET(btrfs_inode_item, size, ii, n->want);
		break;
	}
	if (was == n->want)
		return 0;
	ret = fsw_inode_put(&w, n->inode, ii);
	if (ret)
		return ret;
	rp_say(c, n, was, "inode %llu of tree %llu: %s %llu -> %llu", (unsigned long long)n->inode,
	       (unsigned long long)n->tree, field_name[n->fix], (unsigned long long)was, (unsigned long long)n->want);
	return 0;
}

static bool has_note(const struct rp_ctx *c, enum ub_chk_fix fix, uint64_t tree, uint64_t inode)
{
	for (size_t i = 0; i < c->r->nnotes; i++)
		if (c->r->notes[i].fix == fix && c->r->notes[i].tree == tree && c->r->notes[i].inode == inode)
			return true;
	return false;
}

static int apply(struct rp_ctx *c)
{
	int ret = 0;

	/*
	 * Salvaged blocks first: each copied on write in every tree that reaches
	 * it, so no later change meets the old address; then the names an entry
	 * they dropped held.
	 */
	for (size_t i = 0; !ret && i < c->r->nnotes; i++)
		if (c->r->notes[i].fix == UB_CHK_FIX_SALVAGE)
			ret = rp_salvage_cow(c, &c->r->notes[i]);
	if (!ret)
		ret = rp_salvage_names(c);
	/* a root item behind its tree first: any later change of the tree copies the newer root */
	for (size_t i = 0; !ret && i < c->r->nnotes; i++)
		if (c->r->notes[i].fix == UB_CHK_FIX_ROOT_NEWER)
			ret = rp_fix_root_newer(c, &c->r->notes[i]);
	/*
	 * The extent items' counts before anything else: they are the counts as
	 * the check saw them, and every copy-on-write of this transaction changes
	 * them by its delayed references, applied after (at the commit).
	 */
	for (size_t i = 0; !ret && i < c->r->nnotes; i++)
		if (c->r->notes[i].fix == UB_CHK_FIX_EXTENT_REFS)
			ret = rp_fix_extent_refs(c, &c->r->notes[i]);
	for (size_t i = 0; !ret && i < c->r->nnotes; i++)
		if (c->r->notes[i].fix == UB_CHK_FIX_EXTENT_ADD)
			ret = rp_fix_extent_add(c, &c->r->notes[i]);
	/* a reference no pointer stands for goes before one is added (its room in the item is free then) */
	for (size_t i = 0; !ret && i < c->r->nnotes; i++)
		if (c->r->notes[i].fix == UB_CHK_FIX_BLOCK_REF_DEL)
			ret = rp_fix_block_ref_del(c, &c->r->notes[i]);
	for (size_t i = 0; !ret && i < c->r->nnotes; i++)
		if (c->r->notes[i].fix == UB_CHK_FIX_BLOCK_REF_ADD)
			ret = rp_fix_block_ref_add(c, &c->r->notes[i]);
	for (size_t i = 0; !ret && i < c->r->nnotes; i++)
		if (c->r->notes[i].fix == UB_CHK_FIX_DATA_ADD)
			ret = rp_fix_data_add(c, &c->r->notes[i]);
	for (size_t i = 0; !ret && i < c->r->nnotes; i++)
		if (c->r->notes[i].fix == UB_CHK_FIX_EXTENT_DEL)
			ret = rp_fix_extent_del(c, &c->r->notes[i]);
	/* names first: the counts that follow them are counted again after, not taken from the check */
	for (size_t i = 0; !ret && i < c->r->nnotes; i++)
		if (c->r->notes[i].fix == UB_CHK_FIX_NAMES)
			ret = rp_fix_names(c, &c->r->notes[i]);
	for (size_t i = 0; !ret && i < c->r->nnotes; i++)
		if (c->r->notes[i].fix == UB_CHK_FIX_LOST)
			ret = rp_fix_lost(c, &c->r->notes[i]);
	for (size_t i = 0; !ret && i < c->r->nnotes; i++) {
		const struct rp_note *n = &c->r->notes[i];

		switch (n->fix) {
		case UB_CHK_FIX_NLINK:
		case UB_CHK_FIX_DIR_SIZE:
			if (rp_is_touched(c, n->tree, n->inode, n->fix == UB_CHK_FIX_DIR_SIZE))
				break;
			ret = fix_inode(c, n);
			break;
		case UB_CHK_FIX_NBYTES:
			/* counted again after the cut, from the items as they are then */
			if (has_note(c, UB_CHK_FIX_OVERLAP, n->tree, n->inode))
				break;
			ret = fix_inode(c, n);
			break;
		case UB_CHK_FIX_OVERLAP:
			ret = rp_fix_overlap(c, n);
			break;
		case UB_CHK_FIX_HOLES:
			ret = rp_fix_holes(c, n);
			break;
		case UB_CHK_FIX_UUID_ADD:
		case UB_CHK_FIX_UUID_DEL:
		case UB_CHK_FIX_DEAD_ORPHAN:
			ret = rp_fix_roots(c, n);
			break;
		case UB_CHK_FIX_DEV_USED:
			ret = rp_fix_dev_used(c, n);
			break;
		case UB_CHK_FIX_ROOT_DIR:
			ret = rp_fix_root_dir(c, n);
			break;
		case UB_CHK_FIX_DATA_REF_DROP:
			ret = rp_fix_data_ref_drop(c, n);
			break;
		case UB_CHK_FIX_NUM_DEVICES:
			ret = rp_fix_num_devices(c, n);
			break;
		case UB_CHK_FIX_INODE_GEN:
			ret = rp_fix_inode_gen(c, n);
			break;
		case UB_CHK_FIX_EXTENT_GEN:
			ret = rp_fix_extent_gen(c, n);
			break;
		case UB_CHK_FIX_QGROUP:
			ret = rp_fix_qgroup(c, n);
			break;
		case UB_CHK_FIX_SPACE:
			/* done by the engine's open (UB_ENGINE_OPEN_REPAIR_SPACE) and its commit */
			rp_say(c, n, 0, "block group used bytes recounted from the extent tree (wrong in %d block groups), "
			       "the superblock's bytes_used from them, the free space tree rewritten",
			       ub_engine_repair_fixed_groups(c->e));
			break;
		default:
			break;
		}
	}
	for (size_t i = 0; !ret && i < c->ntouched; i++)
		ret = rp_recount(c, c->touched[i].tree, c->touched[i].ino, c->touched[i].dir_size);
	return ret;
}

/* The devices, each saving what it overwrites into the undo file first when there is one. */
static int open_devices(struct rp_ctx *c, const char *const *paths, int n, struct ub_dev **devs)
{
	int ret = 0, i;

	for (i = 0; i < n; i++) {
		struct ub_dev *d;

		ret = ub_dev_open(paths[i], true, &d);
		if (ret) {
			ub_err(c->log, "repair: cannot open %s for writing: %s", paths[i], strerror(-ret));
			break;
		}
		if (c->undo) {
			ret = ub_dev_open_undo(d, c->undo, &devs[i]);
			if (ret) {
				ub_err(c->log, "repair: %s: cannot record its old bytes into the undo file: %s", paths[i],
				       strerror(-ret));
				break;
			}
		} else {
			devs[i] = d;
		}
	}
	if (ret)
		while (i-- > 0)
			ub_dev_close(devs[i]);
	return ret;
}

/*
 * Whether the repair changes nothing but qgroup counts. The engine keeps no
 * qgroup counts: a transaction that changed other trees could leave the counts
 * it set untrue (a shared block copied moves bytes from shared to exclusive),
 * so the counts are cured only alone; a filesystem with quotas refuses the
 * other cures (the engine's open says so).
 */
static bool quota_counts_only(const struct rp_ctx *c)
{
	if (!c->r->nnotes || c->opts->init_csum_tree || c->opts->init_extent_tree)
		return false;
	for (size_t i = 0; i < c->r->nnotes; i++)
		if (c->r->notes[i].fix != UB_CHK_FIX_QGROUP)
			return false;
	return true;
}

static void drop_mixed_qgroup_cures(struct rp_ctx *c)
{
	size_t k = 0;

	if (quota_counts_only(c))
		return;
	for (size_t i = 0; i < c->r->nnotes; i++)
		if (c->r->notes[i].fix != UB_CHK_FIX_QGROUP)
			c->r->notes[k++] = c->r->notes[i];
	if (k != c->r->nnotes)
		ub_warn(c->log, "repair: the qgroup counts are left as they are: other cures change the trees they count "
			"(the engine keeps no qgroup counts); they are cured by a repair that has nothing else to do");
	c->r->nnotes = k;
}

/* The cures --init-extent-tree makes needless: the rebuilt tree holds what they would mend. */
static bool extent_cure(enum ub_chk_fix f)
{
	return space_cure(f) || f == UB_CHK_FIX_UNCOUNTED || f == UB_CHK_FIX_EXTENT_REFS ||
	       f == UB_CHK_FIX_BLOCK_REF_ADD || f == UB_CHK_FIX_BLOCK_REF_DEL || f == UB_CHK_FIX_EXTENT_GEN ||
	       f == UB_CHK_FIX_DATA_REF_DROP;
}

/* The notes dropped: cured all the same, by the rebuild. */
static size_t drop_extent_cures(struct rp_ctx *c)
{
	struct ub_repair *r = c->r;
	size_t k = 0, dropped = 0;

	for (size_t i = 0; i < r->nnotes; i++) {
		/* the extent tree's own blocks are replaced whole: none is salvaged */
		if (extent_cure(r->notes[i].fix) ||
		    (r->notes[i].fix == UB_CHK_FIX_SALVAGE && r->notes[i].tree == BTRFS_EXTENT_TREE_OBJECTID)) {
			free(r->notes[i].drefs);
			dropped += r->notes[i].fix != UB_CHK_FIX_UNCOUNTED;
			continue;
		}
		r->notes[k++] = r->notes[i];
	}
	r->nnotes = k;
	return dropped;
}

/* What every run does first: the notes made unique and counted. */
static void run_begin(struct rp_ctx *c)
{
	size_t rebuilt = 0;

	memset(c->res, 0, sizeof(*c->res));
	c->res->noted = c->r->noted;
	notes_unique(c->r);
	if (c->opts->init_extent_tree)
		rebuilt = drop_extent_cures(c);
	drop_space_cures(c);
	drop_older_root_cures(c);
	drop_mixed_qgroup_cures(c);
	c->res->curable = c->r->nnotes + rebuilt;
}

/*
 * --init-extent-tree walks the trees as the last commit has them: a root item
 * that moves to a newer root in the same run would leave that tree's blocks
 * out of the rebuilt extent tree. One repair first, then the rebuild.
 */
static int root_newer_refused(struct rp_ctx *c)
{
	if (!c->opts->init_extent_tree)
		return 0;
	for (size_t i = 0; i < c->r->nnotes; i++)
		if (c->r->notes[i].fix == UB_CHK_FIX_ROOT_NEWER) {
			ub_err(c->log, "repair: --init-extent-tree: the root item of tree %llu is behind its tree: run "
			       "`ubtrfs check --repair` without it first", (unsigned long long)c->r->notes[i].tree);
			return -EOPNOTSUPP;
		}
	return 0;
}

/*
 * A second round, after the commit that let salvaged blocks in: their items
 * were never checked (the check before could not read them), so the check
 * runs again on the committed filesystem, and the cures of what it finds
 * that need nothing the open decided (no space cure unless the engine
 * counts the space from the extent tree; no scrub, no salvage, no extent
 * item made again) go in a second transaction on the same devices and
 * undo file. Its failure leaves the first commit, a filesystem better than
 * before, as it is.
 */
static int run_again(struct rp_ctx *c, unsigned flags)
{
	struct ub_repair *r1 = c->r, *r2;
	size_t k = 0;
	int ret;

	free(c->touched);
	c->touched = NULL;
	c->ntouched = c->captouched = 0;
	ret = ub_repair_new(&r2);
	if (ret)
		return ret;
	ret = rp_salvage_recheck(c, r2);
	if (ret) {
		ub_warn(c->log, "repair: the check after the salvage could not be completed (%s): no second round",
			strerror(-ret));
		ub_repair_free(r2);
		return 0;
	}
	c->r = r2;
	notes_unique(r2);
	drop_space_cures(c);
	drop_older_root_cures(c);
	for (size_t i = 0; i < r2->nnotes; i++) {
		enum ub_chk_fix f = r2->notes[i].fix;

		if (f == UB_CHK_FIX_SALVAGE || f == UB_CHK_FIX_COPY || f == UB_CHK_FIX_EXTENT_ADD ||
		    f == UB_CHK_FIX_DATA_ADD || (space_cure(f) && !(flags & UB_ENGINE_OPEN_REPAIR_SPACE)))
			continue;
		r2->notes[k++] = r2->notes[i];
	}
	r2->nnotes = k;
	c->res->curable += k;
	if (k)
		ret = ub_txn_start(c->e, &c->t);
	if (k && !ret) {
		ret = apply(c);
		if (ret)
			ub_txn_abort(c->t);
		else
			ret = ub_txn_commit(c->t);
		if (!ret)
			c->res->generation = ub_engine_generation(c->e);
	}
	c->r = r1;
	ub_repair_free(r2);
	if (ret)
		ub_warn(c->log, "repair: the second round after the salvage failed (%s); the first commit stands",
			strerror(-ret));
	return 0;
}

/* The engine on the opened devices (taken over), the cures, the commit. */
static int run_on(struct rp_ctx *c, struct ub_dev *const *devs, int ndevs)
{
	struct ub_repair *r = c->r;
	/* a btrfs-image dump is repaired as btrfs check --repair repairs it: its metadata */
	unsigned flags = UB_ENGINE_OPEN_NO_LOG_REPLAY | UB_ENGINE_OPEN_METADUMP;
	int ret;

	/*
	 * The space the extent tree gives: a tree block or data without its item
	 * has its space counted free there, a stray item holds space nothing
	 * uses. They need the allocator loaded from the extent tree and
	 * corrected before anything is allocated (rp_extent_claim), as the space
	 * problems do.
	 */
	for (size_t i = 0; i < r->nnotes; i++)
		if (space_cure(r->notes[i].fix))
			flags |= UB_ENGINE_OPEN_REPAIR_SPACE;
	if (rp_salvage_space(c))
		flags |= UB_ENGINE_OPEN_REPAIR_SPACE;
	if (quota_counts_only(c))
		flags |= UB_ENGINE_OPEN_QUOTA_COUNTS;
	/* a rebuilt extent tree: the free space is what the walk of the trees leaves (init_extent.c) */
	if (c->opts->init_extent_tree)
		flags = (flags & ~UB_ENGINE_OPEN_REPAIR_SPACE) | UB_ENGINE_OPEN_REPAIR_EXTENTS;
	/* the engine takes the devices over, also when it fails */
	ret = ub_engine_open_raw(NULL, devs, ndevs, c->log, flags, &c->e);
	/* a dead subvolume's drop after the commit would change what the counts were set to */
	if (!ret && (flags & UB_ENGINE_OPEN_QUOTA_COUNTS))
		ub_engine_set_clean_step(c->e, 0);
	if (!ret && c->opts->init_extent_tree)
		ret = rp_init_extent_scan(c);
	if (!ret)
		ret = ub_engine_ready(c->e);
	if (!ret)
		ret = rp_data_scan(c);
	for (size_t i = 0; !ret && i < r->nnotes; i++)
		if (r->notes[i].fix == UB_CHK_FIX_EXTENT_ADD || r->notes[i].fix == UB_CHK_FIX_DATA_ADD)
			ret = rp_extent_claim(c, &r->notes[i]);
	/* bad copies first, by a scrub: what the transaction then reads and copies is the good bytes */
	for (size_t i = 0; !ret && i < r->nnotes; i++)
		if (r->notes[i].fix == UB_CHK_FIX_COPY)
			ret = rp_scrub(c, &r->notes[i]);
	if (ret)
		goto out;
	ret = ub_txn_start(c->e, &c->t);
	if (ret)
		goto out;
	/* the new extent tree first: every copy-on-write after it is applied to it */
	if (c->opts->init_extent_tree)
		ret = rp_init_extent_tree(c);
	if (!ret)
		ret = apply(c);
	if (!ret && c->opts->init_csum_tree)
		ret = rp_init_csum_tree(c);
	if (!ret && (flags & UB_ENGINE_OPEN_QUOTA_COUNTS))
		ret = rp_qgroup_status(c);
	if (ret) {
		ub_txn_abort(c->t);
		goto out;
	}
	ret = ub_txn_commit(c->t);
	if (!ret)
		c->res->generation = ub_engine_generation(c->e);
	if (!ret && rp_salvaged(c))
		ret = run_again(c, flags);
out:
	rp_init_extent_free(c);
	if (c->e) {
		int err = ub_engine_error(c->e);

		ub_engine_close(c->e);
		c->e = NULL;
		if (!ret && err)
			ret = err;
	}
	free(c->touched);
	c->touched = NULL;
	c->ntouched = c->captouched = 0;
	return ret;
}

int ub_repair_run(struct ub_repair *r, const char *const *paths, int npaths, const struct ub_repair_opts *opts,
		  const struct ub_log *log, struct ub_repair_result *res)
{
	static const struct ub_repair_opts none;
	struct rp_ctx c = { .r = r, .opts = opts ? opts : &none, .log = log, .res = res, .paths = paths,
			    .npaths = npaths };
	struct ub_dev **devs = NULL;
	size_t before;
	int ret;

	run_begin(&c);
	if (npaths <= 0)
		return -EINVAL;
	ret = root_newer_refused(&c);
	if (ret)
		return ret;
	if (!r->nnotes && !c.opts->init_csum_tree && !c.opts->init_extent_tree)
		return 0;
	/* blocks no copy of which passes: cured from the devices read-only, before anything opens for writing */
	before = r->nnotes;
	ret = rp_salvage_prepare(&c);
	if (ret) {
		rp_salvage_done(&c);
		return ret;
	}
	/* the salvage notes whose blocks cannot be salvaged are gone */
	c.res->curable -= before - r->nnotes;
	if (!r->nnotes && !c.opts->init_csum_tree && !c.opts->init_extent_tree) {
		rp_salvage_done(&c);
		return 0;
	}
	if (c.opts->dry_run) {
		dry_run(&c);
		ret = c.opts->init_extent_tree ? rp_init_extent_scan(&c) : 0;
		if (!ret && c.opts->init_csum_tree)
			ret = rp_init_csum_tree(&c);
		rp_salvage_done(&c);
		return ret;
	}
	devs = calloc((size_t)npaths, sizeof(*devs));
	if (!devs) {
		rp_salvage_done(&c);
		return -ENOMEM;
	}
	if (c.opts->undo_file) {
		ret = ub_undo_create(c.opts->undo_file, &c.undo);
		if (ret) {
			ub_err(log, "repair: cannot create the undo file %s: %s", c.opts->undo_file,
			       ret == -EEXIST ? "it exists (an undo file is never overwritten)" : strerror(-ret));
			rp_salvage_done(&c);
			free(devs);
			return ret;
		}
	}
	ret = open_devices(&c, paths, npaths, devs);
	if (!ret)
		ret = run_on(&c, devs, npaths);
	rp_salvage_done(&c);
	if (c.undo) {
		int u = ub_undo_finish(c.undo);

		if (!ret && u)
			ret = u;
	}
	free(devs);
	return ret;
}

int ub_repair_run_devs(struct ub_repair *r, struct ub_dev *const *devs, int ndevs, const struct ub_repair_opts *opts,
		       const struct ub_log *log, struct ub_repair_result *res)
{
	static const struct ub_repair_opts none;
	struct rp_ctx c = { .r = r, .opts = opts ? opts : &none, .log = log, .res = res };
	int ret;

	run_begin(&c);
	/* a salvage reads the devices leniently by their paths before the engine opens: ub_repair_run's only */
	{
		size_t k = 0;

		for (size_t i = 0; i < r->nnotes; i++)
			if (r->notes[i].fix != UB_CHK_FIX_SALVAGE)
				r->notes[k++] = r->notes[i];
		r->nnotes = k;
		c.res->curable = k;
	}
	/* no paths: --init-csum-tree's dry run opens the devices by their paths, so it is ub_repair_run's */
	ret = ndevs <= 0 ? -EINVAL : c.opts->undo_file ? -EINVAL : 0;
	if (!ret && c.opts->dry_run && (c.opts->init_csum_tree || c.opts->init_extent_tree))
		ret = -EINVAL;
	if (!ret)
		ret = root_newer_refused(&c);
	if (!ret && c.opts->dry_run)
		dry_run(&c);
	if (ret || c.opts->dry_run || (!r->nnotes && !c.opts->init_csum_tree && !c.opts->init_extent_tree)) {
		for (int i = 0; i < ndevs; i++)
			ub_dev_close(devs[i]);
		return ret;
	}
	return run_on(&c, devs, ndevs);
}
