/* SPDX-License-Identifier: MIT */
/*
 * Repair of what the root tree and the uuid tree say about subvolumes: the
 * uuid tree maps each subvolume's uuid (and received uuid) to its id, and a
 * deleted subvolume waits for its drop with an orphan item in the root tree.
 */
#include <errno.h>
#include <string.h>
#include "fsw/fsw.h"
#include "repair/repair_priv.h"

/* The uuid (or received uuid) of subvolume id, from its root item in the running transaction. */
static int root_uuid(struct rp_ctx *c, uint64_t id, bool received, uint8_t uuid[UB_UUID_SIZE])
{
	struct ub_key k = { id, BTRFS_ROOT_ITEM_KEY, 0 };
	size_t off = received ? offsetof(struct btrfs_root_item, received_uuid) : offsetof(struct btrfs_root_item, uuid);
	struct ub_path p;
	const uint8_t *d;
	uint32_t size;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_search(&c->e->fs.tc, &c->e->fs.root_tree->root, &k, &p);
	if (ret == 0 || ret == 1) {
		ub_path_key(&p, &k);
		d = ub_path_data(&p, &size);
		if (k.objectid != id || k.type != BTRFS_ROOT_ITEM_KEY)
			ret = -ENOENT;
		else if (size < off + UB_UUID_SIZE)
			ret = -EUCLEAN;
		else
			memcpy(uuid, d + off, UB_UUID_SIZE), ret = 0;
	} else if (ret == 2) {
		ret = -ENOENT;
	}
	ub_path_release(&p);
	return ret;
}

int rp_fix_roots(struct rp_ctx *c, const struct rp_note *n)
{
	uint8_t uuid[UB_UUID_SIZE];
	struct fsw w;
	int ret = fsw_init_ro(&w, c->t, BTRFS_FS_TREE_OBJECTID);

	if (ret)
		return ret;
	switch (n->fix) {
	case UB_CHK_FIX_UUID_ADD: {
		bool received = n->want == BTRFS_UUID_KEY_RECEIVED_SUBVOL;

		ret = root_uuid(c, n->tree, received, uuid);
		if (!ret)
			ret = fsw_uuid_tree_change(&w, uuid, (uint8_t)n->want, n->tree, true);
		if (!ret)
			rp_say(c, n, 0, "uuid tree: subvolume %llu added under its %suuid", (unsigned long long)n->tree,
			       received ? "received " : "");
		break;
	}
	case UB_CHK_FIX_UUID_DEL:
		/* the key is the uuid: its two halves as little-endian numbers */
		ub_put_le(uuid, 8, n->key.objectid);
		ub_put_le(uuid + 8, 8, n->key.offset);
		ret = fsw_uuid_tree_change(&w, uuid, n->key.type, n->want, false);
		if (!ret)
			rp_say(c, n, 0, "uuid tree: subvolume %llu removed from the item (%llu %u %llu)",
			       (unsigned long long)n->want, (unsigned long long)n->key.objectid, n->key.type,
			       (unsigned long long)n->key.offset);
		break;
	default: {
		struct ub_key k = { BTRFS_ORPHAN_OBJECTID, BTRFS_ORPHAN_ITEM_KEY, n->want };

		ret = ub_tree_insert_item(w.tc, w.ta, &c->e->fs.root_tree->root, &k, NULL, 0);
		if (ret == -EEXIST)
			ret = 0;
		else if (!ret)
			rp_say(c, n, 0, "deleted subvolume %llu: its orphan item added (its drop finishes at the next "
			       "read-write mount)", (unsigned long long)n->want);
		break;
	}
	}
	if (ret)
		ub_err(c->log, "repair: the root tree / uuid tree change for subvolume %llu failed: %s",
		       (unsigned long long)(n->fix == UB_CHK_FIX_UUID_ADD ? n->tree : n->want), strerror(-ret));
	return ret;
}

int rp_fix_root_newer(struct rp_ctx *c, const struct rp_note *n)
{
	struct ub_expect exp = { .owner = n->tree, .level = (int)n->want2, .generation = n->want, .exact_owner = true };
	struct ub_eroot *er;
	struct ub_eb *eb = NULL;
	struct ub_root was;
	struct rp_note said;
	int ret;

	if (n->want2 >= UB_MAX_LEVEL)
		return -EINVAL;
	ret = ub_engine_root(c->e, n->tree, &er);
	if (ret) {
		ub_err(c->log, "repair: the root item of tree %llu cannot be read: %s", (unsigned long long)n->tree,
		       strerror(-ret));
		return ret;
	}
	if (!er->has_item || n->tree == BTRFS_TREE_RELOC_OBJECTID)
		return -EINVAL;
	/* what the check saw must still hold: the item older than the newer root, which reads as its root */
	if (er->root.generation >= n->want) {
		ub_err(c->log, "repair: the root item of tree %llu has generation %llu now, not older than %llu: "
		       "left as it is", (unsigned long long)n->tree, (unsigned long long)er->root.generation,
		       (unsigned long long)n->want);
		return -ESTALE;
	}
	ret = ub_tree_read_block(&c->e->fs.tc, n->inode, &exp, &eb);
	if (ret) {
		ub_err(c->log, "repair: tree %llu's newer root %llu cannot be read: %s", (unsigned long long)n->tree,
		       (unsigned long long)n->inode, strerror(-ret));
		return ret;
	}
	ub_eb_put(&c->e->fs.tc, eb);
	was = er->root;
	/* the commit writes the item from the tree's object: bytenr, generation, level, generation_v2 */
	er->root.bytenr = n->inode;
	er->root.generation = n->want;
	er->root.level = (uint8_t)n->want2;
	/* said as the root's address before and after */
	said = *n;
	said.inode = 0;
	said.want = n->inode;
	rp_say(c, &said, was.bytenr, "the root item of tree %llu points at its newer root %llu (generation %llu, level "
	       "%llu), no longer at %llu (generation %llu)", (unsigned long long)n->tree, (unsigned long long)n->inode,
	       (unsigned long long)n->want, (unsigned long long)n->want2, (unsigned long long)was.bytenr,
	       (unsigned long long)was.generation);
	return 0;
}
