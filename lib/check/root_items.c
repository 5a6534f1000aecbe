/* SPDX-License-Identifier: MIT */
/*
 * Root items and the uuid tree: every root item's generation, every deleted
 * subvolume's orphan item (what makes the cleaner finish dropping it), and,
 * when the superblock says the uuid tree is current, its entries against
 * the subvolumes' uuids both ways. One entry per subvolume is held.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check/chunks.h"

struct rroot {
	uint64_t id, refs;
	uint8_t uuid[UB_UUID_SIZE], received[UB_UUID_SIZE];
	bool subvol_entry, received_entry; /* the uuid tree names it */
};

struct rstate {
	struct cstate s; /* first: chk_scan_tree hands it back */
	struct rroot *v;
	size_t n, cap;
	uint64_t *orphans;
	size_t norphans, orphans_cap;
};

static bool is_subvol(uint64_t id)
{
	return id == BTRFS_FS_TREE_OBJECTID || (id >= BTRFS_FIRST_FREE_OBJECTID && id <= BTRFS_LAST_FREE_OBJECTID);
}

static void where_root(struct ub_chk_problem *p, uint64_t tree, const struct ub_key *k)
{
	chk_where(p, tree, k, 0);
	p->cls = UB_CHK_ROOT;
}

static int root_tree_item(struct cstate *s, const struct ub_key *k, const uint8_t *d, uint32_t size)
{
	struct rstate *r = (struct rstate *)s;
	struct ub_chk_problem p;
	uint64_t gen;

	if (k->objectid == BTRFS_ORPHAN_OBJECTID && k->type == BTRFS_ORPHAN_ITEM_KEY) {
		if (chk_reserve(&r->orphans, &r->orphans_cap, r->norphans, sizeof(*r->orphans), 16))
			return -ENOMEM;
		r->orphans[r->norphans++] = k->offset;
		return 0;
	}
	/* the tree checker has rejected a root item too short for the fields read here */
	if (k->type != BTRFS_ROOT_ITEM_KEY || size < offsetof(struct btrfs_root_item, generation_v2))
		return 0;
	gen = UB_GET(btrfs_root_item, generation, d);
	/* a log tree's root item carries the transaction after the superblock's */
	if (gen > s->c->super_generation + (k->objectid == BTRFS_TREE_LOG_OBJECTID)) {
		where_root(&p, BTRFS_ROOT_TREE_OBJECTID, k);
		chk_report(s->c, &p, "root item generation %llu is newer than the filesystem's %llu",
			   (unsigned long long)gen, (unsigned long long)s->c->super_generation);
	}
	/* the fixed trees have one root item each, at offset 0 (extent-tree-v2, which numbers them, is not supported) */
	if (k->objectid < BTRFS_FIRST_FREE_OBJECTID && k->objectid != BTRFS_FS_TREE_OBJECTID && k->offset) {
		char name[32];

		where_root(&p, BTRFS_ROOT_TREE_OBJECTID, k);
		chk_report(s->c, &p, "the root item of %s has offset %llu, not 0",
			   ub_tree_name(k->objectid, name, sizeof(name)), (unsigned long long)k->offset);
	}
	if (!is_subvol(k->objectid))
		return 0;
	if (chk_reserve(&r->v, &r->cap, r->n, sizeof(*r->v), 16))
		return -ENOMEM;
	r->v[r->n] = (struct rroot){ .id = k->objectid, .refs = UB_GET(btrfs_root_item, refs, d) };
	/* the uuids came with the root item's second version; an older one has none */
	if (size >= sizeof(struct btrfs_root_item)) {
		memcpy(r->v[r->n].uuid, UB_PTR(btrfs_root_item, uuid, d), UB_UUID_SIZE);
		memcpy(r->v[r->n].received, UB_PTR(btrfs_root_item, received_uuid, d), UB_UUID_SIZE);
	}
	r->n++;
	return 0;
}

static struct rroot *find_root(struct rstate *r, uint64_t id)
{
	for (size_t i = 0; i < r->n; i++)
		if (r->v[i].id == id)
			return &r->v[i];
	return NULL;
}

static bool is_zero(const uint8_t *u)
{
	for (int i = 0; i < UB_UUID_SIZE; i++)
		if (u[i])
			return false;
	return true;
}

static int uuid_item(struct cstate *s, const struct ub_key *k, const uint8_t *d, uint32_t size)
{
	struct rstate *r = (struct rstate *)s;
	bool received = k->type == BTRFS_UUID_KEY_RECEIVED_SUBVOL;
	uint8_t uuid[UB_UUID_SIZE];

	if (k->type != BTRFS_UUID_KEY_SUBVOL && !received)
		return 0;
	/* the key is the uuid: its two halves as little-endian numbers */
	ub_put_le(uuid, 8, k->objectid);
	ub_put_le(uuid + 8, 8, k->offset);
	for (uint32_t at = 0; at + 8 <= size; at += 8) {
		uint64_t id = ub_le64(d + at);
		struct rroot *rt = find_root(r, id);
		struct ub_chk_problem p;

		where_root(&p, BTRFS_UUID_TREE_OBJECTID, k);
		/* an entry for no (live) subvolume, or for a uuid the subvolume does not have: it goes */
		p.fix = UB_CHK_FIX_UUID_DEL;
		p.want = id;
		if (!rt || !rt->refs) {
			chk_report(s->c, &p, "the uuid tree names subvolume %llu, which %s", (unsigned long long)id,
				   rt ? "is deleted" : "does not exist");
			continue;
		}
		if (memcmp(received ? rt->received : rt->uuid, uuid, UB_UUID_SIZE)) {
			chk_report(s->c, &p, "the uuid tree gives subvolume %llu a %suuid its root item does not have",
				   (unsigned long long)id, received ? "received " : "");
			continue;
		}
		if (received)
			rt->received_entry = true;
		else
			rt->subvol_entry = true;
	}
	return 0;
}

static void check_orphans(struct rstate *r)
{
	for (size_t i = 0; i < r->n; i++) {
		const struct rroot *rt = &r->v[i];
		struct ub_chk_problem p;
		bool found = false;

		if (rt->refs || rt->id == BTRFS_FS_TREE_OBJECTID)
			continue;
		for (size_t j = 0; j < r->norphans && !found; j++)
			found = r->orphans[j] == rt->id;
		if (found)
			continue;
		where_root(&p, BTRFS_ROOT_TREE_OBJECTID, &(struct ub_key){ rt->id, BTRFS_ROOT_ITEM_KEY, 0 });
		p.fix = UB_CHK_FIX_DEAD_ORPHAN;
		p.want = rt->id;
		chk_report(r->s.c, &p, "deleted subvolume %llu has no orphan item: nothing will finish dropping it",
			   (unsigned long long)rt->id);
	}
}

static void check_uuid_entries(struct rstate *r)
{
	for (size_t i = 0; i < r->n; i++) {
		const struct rroot *rt = &r->v[i];
		struct ub_chk_problem p;

		/* the top-level tree gets its uuid from the kernel, not always at once */
		if (!rt->refs || rt->id == BTRFS_FS_TREE_OBJECTID)
			continue;
		where_root(&p, BTRFS_ROOT_TREE_OBJECTID, &(struct ub_key){ rt->id, BTRFS_ROOT_ITEM_KEY, 0 });
		/* the subvolume is the key's objectid (its ROOT_ITEM) */
		p.fix = UB_CHK_FIX_UUID_ADD;
		p.want = BTRFS_UUID_KEY_SUBVOL;
		if (!is_zero(rt->uuid) && !rt->subvol_entry)
			chk_report(r->s.c, &p, "subvolume %llu has no entry for its uuid in the uuid tree",
				   (unsigned long long)rt->id);
		p.want = BTRFS_UUID_KEY_RECEIVED_SUBVOL;
		if (!is_zero(rt->received) && !rt->received_entry)
			chk_report(r->s.c, &p, "subvolume %llu has no entry for its received uuid in the uuid tree",
				   (unsigned long long)rt->id);
	}
}

int chk_root_items(struct ub_checker *c, struct ub_fs *fs)
{
	const uint8_t *sb = ub_volume_super(ub_fs_volume(fs));
	struct rstate r = { .s = { .c = c, .fs = fs, .scan_cls = UB_CHK_ROOT } };
	struct ub_key from = { 0, 0, 0 };
	struct ub_root uuid_root;
	int ret;

	chk_progress(c, "root items", 0, 0);
	ret = chk_scan_tree(&r.s, BTRFS_ROOT_TREE_OBJECTID, &from, root_tree_item);
	if (ret == 0) {
		check_orphans(&r);
		/*
		 * The kernel rebuilds the uuid tree at mount when the superblock's
		 * uuid_tree_generation is not the generation: only then is it whole.
		 */
		struct ub_root rt;
		bool newest = !ub_fs_tree_root(fs, BTRFS_ROOT_TREE_OBJECTID, &rt) && rt.bytenr == UB_GET(ub_disk_super, root, sb);

		if (newest && UB_GET(ub_disk_super, uuid_tree_generation, sb) == UB_GET(ub_disk_super, generation, sb) &&
		    !ub_fs_tree_root(fs, BTRFS_UUID_TREE_OBJECTID, &uuid_root)) {
			ret = chk_scan_tree(&r.s, BTRFS_UUID_TREE_OBJECTID, &from, uuid_item);
			if (ret == 0)
				check_uuid_entries(&r);
		}
	}
	free(r.v);
	free(r.orphans);
	return ret < 0 ? ret : 0;
}
