/* SPDX-License-Identifier: MIT */
/*
 * Repair of names: each name of an inode in a directory is three records
 * (the inode's INODE_REF, the directory's DIR_ITEM under the name's hash and
 * its DIR_INDEX under the name's index). Where one or two survive, the others
 * are made again from them; the index is the DIR_INDEX's when there is one
 * (readdir's order), else the ref's, else a new one; the type is the one the
 * inode's mode says. An inode no name reaches gets one in /lost+found, named
 * by its number, as btrfs check does. Then the counts that follow the names,
 * the inode's nlink and the directory's size, are counted again.
 */
#include <errno.h>
#include <stddef.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "fsw/fsw.h"
#include "repair/repair_priv.h"

#define DI_HDR ((uint32_t)sizeof(struct btrfs_dir_item))
#define REF_HDR ((uint32_t)sizeof(struct btrfs_inode_ref))
#define EXTREF_HDR ((uint32_t)sizeof(struct btrfs_inode_extref))

/* One name of the child in the directory, and which of its three records exist. */
struct rname {
	char name[UB_NAME_LEN];
	uint16_t len;
	bool has_ref, has_idx, has_item;
	uint64_t ref_index, idx_index;
	uint8_t idx_type, item_type;
	/* second DIR_INDEX items of the name (each holding it alone): they go */
	uint64_t idx_extra[8];
	uint8_t nextra;
	/* the name again in its INODE_REF (EXTREF) item or its DIR_ITEM: all go, fix_one makes one again */
	uint32_t ref_dups, item_dups;
};

struct names {
	struct rname *v;
	size_t n, cap;
};

static struct rname *name_get(struct names *ns, const uint8_t *name, uint32_t len)
{
	for (size_t i = 0; i < ns->n; i++)
		if (ns->v[i].len == len && !memcmp(ns->v[i].name, name, len))
			return &ns->v[i];
	if (len == 0 || len > UB_NAME_LEN)
		return NULL;
	if (ns->n == ns->cap) {
		size_t cap = ns->cap ? ns->cap * 2 : 4;
		struct rname *m = realloc(ns->v, cap * sizeof(*m));

		if (!m)
			return NULL;
		ns->v = m;
		ns->cap = cap;
	}
	memset(&ns->v[ns->n], 0, sizeof(ns->v[0]));
	memcpy(ns->v[ns->n].name, name, len);
	ns->v[ns->n].len = (uint16_t)len;
	return &ns->v[ns->n++];
}

/* Visit every item of (objectid, type) in w's subvolume tree: fn(key, data, size). */
static int each_item(struct fsw *w, uint64_t objectid, uint8_t type,
		     int (*fn)(void *arg, const struct ub_key *k, const uint8_t *d, uint32_t size), void *arg)
{
	struct ub_key k = { objectid, type, 0 };
	struct ub_path p;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_search(w->tc, &w->fs->root, &k, &p);
	ret = ret == 2 ? 1 : ret < 0 ? ret : 0;
	while (ret == 0) {
		const uint8_t *d;
		uint32_t size;

		ub_path_key(&p, &k);
		if (k.objectid != objectid || k.type != type) {
			ret = 1;
			break;
		}
		d = ub_path_data(&p, &size);
		ret = fn(arg, &k, d, size);
		if (ret)
			break;
		ret = ub_tree_next(&p);
	}
	ub_path_release(&p);
	return ret == 1 ? 0 : ret;
}

struct gather {
	struct names *ns;
	uint64_t dir, child;
};

/* dir item records (DIR_ITEM: several of one hash; DIR_INDEX: one) naming the child */
static int gather_entries(void *arg, const struct ub_key *k, const uint8_t *d, uint32_t size)
{
	struct gather *g = arg;
	uint32_t at = 0;

	while (at + DI_HDR <= size) {
		uint32_t nl = (uint32_t)UB_GET(btrfs_dir_item, name_len, d + at);
		uint32_t dl = (uint32_t)UB_GET(btrfs_dir_item, data_len, d + at);
		struct ub_key loc;
		struct rname *n;

		if (at + DI_HDR + nl + dl > size)
			return -EUCLEAN;
		ub_key_read(&loc, d + at + offsetof(struct btrfs_dir_item, location));
		if (loc.type == BTRFS_INODE_ITEM_KEY && loc.objectid == g->child) {
			n = name_get(g->ns, d + at + DI_HDR, nl);
			if (!n)
				return -ENOMEM;
			if (k->type == BTRFS_DIR_INDEX_KEY && n->has_idx) {
				/*
				 * A second DIR_INDEX of one name (readdir lists it
				 * twice): the one at the index its ref gives stays,
				 * else the first; an item holding more than this
				 * entry is not removed whole.
				 */
				uint64_t extra = k->offset;

				if (size != DI_HDR + nl + dl || n->nextra == sizeof(n->idx_extra) / sizeof(n->idx_extra[0]))
					return 0;
				if (n->has_ref && k->offset == n->ref_index) {
					extra = n->idx_index;
					n->idx_index = k->offset;
					n->idx_type = (uint8_t)UB_GET(btrfs_dir_item, type, d + at);
				}
				n->idx_extra[n->nextra++] = extra;
			} else if (k->type == BTRFS_DIR_INDEX_KEY) {
				n->has_idx = true;
				n->idx_index = k->offset;
				n->idx_type = (uint8_t)UB_GET(btrfs_dir_item, type, d + at);
			} else {
				n->item_dups += n->has_item;
				n->has_item = true;
				n->item_type = (uint8_t)UB_GET(btrfs_dir_item, type, d + at);
			}
		}
		at += DI_HDR + nl + dl;
	}
	return 0;
}

static int gather_refs(void *arg, const struct ub_key *k, const uint8_t *d, uint32_t size)
{
	struct gather *g = arg;
	bool ext = k->type == BTRFS_INODE_EXTREF_KEY;
	uint32_t hdr = ext ? EXTREF_HDR : REF_HDR, at = 0;

	if (!ext && k->offset != g->dir)
		return 0;
	while (at + hdr <= size) {
		uint32_t nl = ext ? (uint32_t)UB_GET(btrfs_inode_extref, name_len, d + at)
				  : (uint32_t)UB_GET(btrfs_inode_ref, name_len, d + at);
		struct rname *n;

		if (at + hdr + nl > size)
			return -EUCLEAN;
		if (!ext || UB_GET(btrfs_inode_extref, parent_objectid, d + at) == g->dir) {
			n = name_get(g->ns, d + at + hdr, nl);
			if (!n)
				return -ENOMEM;
			n->ref_dups += n->has_ref;
			n->has_ref = true;
			n->ref_index = ext ? UB_GET(btrfs_inode_extref, index, d + at) : UB_GET(btrfs_inode_ref, index, d + at);
		}
		at += hdr + nl;
	}
	return 0;
}

struct counter {
	uint64_t n;
	bool ext;
};

static int count_refs(void *arg, const struct ub_key *k, const uint8_t *d, uint32_t size)
{
	struct counter *c = arg;
	uint32_t hdr = c->ext ? EXTREF_HDR : REF_HDR, at = 0;

	while (at + hdr <= size) {
		uint32_t nl = c->ext ? (uint32_t)UB_GET(btrfs_inode_extref, name_len, d + at)
				     : (uint32_t)UB_GET(btrfs_inode_ref, name_len, d + at);

		at += hdr + nl;
		c->n++;
	}
	return 0;
}

static int count_name_bytes(void *arg, const struct ub_key *k, const uint8_t *d, uint32_t size)
{
	struct counter *c = arg;
	uint32_t at = 0;

	while (at + DI_HDR <= size) {
		uint32_t nl = (uint32_t)UB_GET(btrfs_dir_item, name_len, d + at);

		at += DI_HDR + nl + (uint32_t)UB_GET(btrfs_dir_item, data_len, d + at);
		c->n += nl;
	}
	return 0;
}

/* The inode's names now (INODE_REF and INODE_EXTREF records), in the running transaction. */
static int names_now(struct fsw *w, uint64_t ino, uint64_t *out)
{
	struct counter c = { 0, false };
	int ret = each_item(w, ino, BTRFS_INODE_REF_KEY, count_refs, &c);

	c.ext = true;
	if (!ret)
		ret = each_item(w, ino, BTRFS_INODE_EXTREF_KEY, count_refs, &c);
	*out = c.n;
	return ret;
}

/* Set nlink (directory: size) of ino to what its items say now; `what` for the message. */
int rp_recount(struct rp_ctx *c, uint64_t tree, uint64_t ino, bool dir_size)
{
	struct rp_note n = { dir_size ? UB_CHK_FIX_DIR_SIZE : UB_CHK_FIX_NLINK, tree, ino, 0, 0 };
	uint8_t ii[UB_II_SIZE];
	struct fsw w;
	uint64_t was;
	int ret = fsw_init_ro(&w, c->t, tree);

	if (!ret)
		ret = fsw_inode_get(&w, ino, ii);
	if (ret)
		return ret;
	if (dir_size) {
		struct counter cn = { 0, false };

		ret = each_item(&w, ino, BTRFS_DIR_ITEM_KEY, count_name_bytes, &cn);
		if (!ret)
			ret = each_item(&w, ino, BTRFS_DIR_INDEX_KEY, count_name_bytes, &cn);
		n.want = cn.n;
		was = UB_GET(btrfs_inode_item, size, ii);
		UB_SET(btrfs_inode_item, size, ii, n.want);
	} else {
		ret = names_now(&w, ino, &n.want);
		was = UB_GET(btrfs_inode_item, nlink, ii);
		UB_SET(btrfs_inode_item, nlink, ii, n.want);
	}
	if (ret || was == n.want)
		return ret;
	ret = fsw_inode_put(&w, ino, ii);
	if (!ret)
		rp_say(c, &n, was, "inode %llu of tree %llu: %s %llu -> %llu (counted again after the names)",
		       (unsigned long long)ino, (unsigned long long)tree, dir_size ? "size" : "nlink",
		       (unsigned long long)was, (unsigned long long)n.want);
	return ret;
}

/* A dir item record for the child: location, transid, the name, the type. */
static uint32_t make_rec(uint8_t *rec, uint64_t child, uint64_t transid, const struct rname *n, uint8_t type)
{
	struct ub_key loc = { child, BTRFS_INODE_ITEM_KEY, 0 };

	memset(rec, 0, DI_HDR);
	ub_key_write(rec + offsetof(struct btrfs_dir_item, location), &loc);
	UB_SET(btrfs_dir_item, transid, rec, transid);
	UB_SET(btrfs_dir_item, data_len, rec, 0);
	UB_SET(btrfs_dir_item, name_len, rec, n->len);
	UB_SET(btrfs_dir_item, type, rec, type);
	memcpy(rec + DI_HDR, n->name, n->len);
	return DI_HDR + n->len;
}

/* Whether (dir, DIR_INDEX, index) is free or already this name's. */
static int index_free(struct fsw *w, uint64_t dir, uint64_t index, const struct rname *n)
{
	struct ub_key k = { dir, BTRFS_DIR_INDEX_KEY, index };
	struct ub_path p;
	const uint8_t *d;
	uint32_t size;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_lookup(w->tc, &w->fs->root, &k, &p, &d, &size);
	if (ret == -ENOENT) {
		ret = 1;
	} else if (ret == 0) {
		ret = n->has_idx && n->idx_index == index;
	}
	ub_path_release(&p);
	return ret;
}

/* Make one name whole: its ref, DIR_ITEM and DIR_INDEX, one index, the right type. */
static int fix_one(struct rp_ctx *c, struct fsw *w, uint64_t dir, uint64_t child, uint8_t type, struct rname *n,
		   bool *changed)
{
	uint8_t rec[DI_HDR + UB_NAME_LEN];
	uint64_t index, old;
	uint32_t rsize;
	int ret = 0;

	if (n->has_ref && n->has_idx && n->has_item && n->ref_index == n->idx_index && n->idx_type == type &&
	    n->item_type == type)
		return 0;
	*changed = true;
	/* the index: the DIR_INDEX's (where readdir has it), else the ref's when free, else a new one */
	if (n->has_idx) {
		index = n->idx_index;
	} else if (n->has_ref && (ret = index_free(w, dir, n->ref_index, n)) == 1) {
		index = n->ref_index;
	} else {
		if (ret < 0)
			return ret;
		ret = fsw_next_index(w, dir, &index);
		if (ret)
			return ret;
	}
	if (n->has_ref && n->ref_index != index) {
		ret = fsw_del_ref(w, child, dir, n->name, n->len, &old);
		if (ret)
			return ret;
		n->has_ref = false;
	}
	if (!n->has_ref) {
		ret = fsw_add_ref(w, child, dir, n->name, n->len, index);
		if (ret)
			return ret;
	}
	rsize = make_rec(rec, child, c->t->transid, n, type);
	if (n->has_idx && n->idx_type != type) {
		struct ub_key k = { dir, BTRFS_DIR_INDEX_KEY, index };

		ret = fsw_del_key(w, &w->fs->root, &k);
		if (ret)
			return ret;
		n->has_idx = false;
	}
	if (!n->has_idx) {
		struct ub_key k = { dir, BTRFS_DIR_INDEX_KEY, index };

		ret = ub_tree_insert_item(w->tc, w->ta, &w->fs->root, &k, rec, rsize);
		if (ret)
			return ret == -EEXIST ? -EUCLEAN : ret;
	}
	if (n->has_item && n->item_type != type) {
		struct ub_key k = { dir, BTRFS_DIR_ITEM_KEY, ub_name_hash(n->name, n->len) };

		ret = fsw_dir_item_del(w, &k, n->name, n->len);
		if (ret)
			return ret;
		n->has_item = false;
	}
	if (!n->has_item) {
		struct ub_key k = { dir, BTRFS_DIR_ITEM_KEY, ub_name_hash(n->name, n->len) };

		ret = fsw_dir_item_add(w, &k, rec, rsize);
		if (ret)
			return ret;
	}
	return 0;
}

static void escape(const struct rname *n, char *shown, size_t cap)
{
	size_t o = 0;

	for (uint16_t i = 0; i < n->len && o + 5 < cap; i++) {
		unsigned char ch = (unsigned char)n->name[i];

		if (ch < 0x20 || ch >= 0x7f || ch == '\\')
			o += (size_t)snprintf(shown + o, cap - o, "\\x%02x", ch);
		else
			shown[o++] = (char)ch;
	}
	shown[o] = 0;
}

static void say_name(struct rp_ctx *c, const struct rp_note *note, uint64_t dir, const struct rname *n)
{
	char shown[UB_NAME_LEN * 4 + 1];

	/* a name from the disk: its odd bytes escaped, so that the message stays one line */
	escape(n, shown, sizeof(shown));
	rp_say(c, note, 0, "inode %llu of tree %llu: the name '%s' in directory %llu made whole (%s%s%s%s)",
	       (unsigned long long)note->inode, (unsigned long long)note->tree, shown, (unsigned long long)dir,
	       n->has_ref ? "" : "INODE_REF added ", n->has_idx ? "" : "DIR_INDEX added ",
	       n->has_item ? "" : "DIR_ITEM added ", n->has_ref && n->has_idx && n->has_item ? "index or type set" : "");
}

static void say_bad_index(struct rp_ctx *c, const struct rp_note *note, uint64_t dir, const struct rname *bad,
			  const struct rname *good)
{
	char b[UB_NAME_LEN * 4 + 1], g[UB_NAME_LEN * 4 + 1];

	escape(bad, b, sizeof(b));
	escape(good, g, sizeof(g));
	rp_say(c, note, 0, "inode %llu of tree %llu: directory %llu's DIR_INDEX %llu names it '%s', its INODE_REF "
	       "of that index '%s': the index's damaged copy removed", (unsigned long long)note->inode,
	       (unsigned long long)note->tree, (unsigned long long)dir, (unsigned long long)bad->idx_index, b, g);
}

int rp_fix_names(struct rp_ctx *c, const struct rp_note *note)
{
	uint64_t dir = note->want, child = note->inode;
	uint8_t ii[UB_II_SIZE], dii[UB_II_SIZE];
	struct names ns = { NULL, 0, 0 };
	struct gather g = { &ns, dir, child };
	struct fsw w;
	uint8_t type;
	int ret = fsw_init_ro(&w, c->t, note->tree);

	if (!ret)
		ret = fsw_inode_get(&w, child, ii);
	if (!ret)
		ret = fsw_inode_get(&w, dir, dii);
	if (ret) {
		ub_warn(c->log, "repair: the names of inode %llu in directory %llu (tree %llu) are left: %s has no inode "
			"item", (unsigned long long)child, (unsigned long long)dir, (unsigned long long)note->tree,
			ret == -ENOENT ? "one of them" : strerror(-ret));
		return ret == -ENOENT ? 0 : ret;
	}
	if (!S_ISDIR(UB_GET(btrfs_inode_item, mode, dii))) {
		ub_warn(c->log, "repair: inode %llu of tree %llu is no directory: its entries are left",
			(unsigned long long)dir, (unsigned long long)note->tree);
		return 0;
	}
	type = ub_mode_ftype((uint32_t)UB_GET(btrfs_inode_item, mode, ii));
	ret = each_item(&w, child, BTRFS_INODE_REF_KEY, gather_refs, &g);
	if (!ret)
		ret = each_item(&w, child, BTRFS_INODE_EXTREF_KEY, gather_refs, &g);
	if (!ret)
		ret = each_item(&w, dir, BTRFS_DIR_INDEX_KEY, gather_entries, &g);
	if (!ret)
		ret = each_item(&w, dir, BTRFS_DIR_ITEM_KEY, gather_entries, &g);
	/* a directory has one name: a second one is not made (the checker says which is extra) */
	if (!ret && S_ISDIR(UB_GET(btrfs_inode_item, mode, ii)) && ns.n > 1) {
		ub_warn(c->log, "repair: directory %llu of tree %llu has %zu names in directory %llu: left",
			(unsigned long long)child, (unsigned long long)note->tree, ns.n, (unsigned long long)dir);
		free(ns.v);
		return 0;
	}
	/*
	 * A DIR_INDEX whose name nothing else has, at the index a ref gives another
	 * name of the same child: the index's copy of that name is what is damaged
	 * (btrfs check's reading too). It goes; the ref's name gets its DIR_INDEX
	 * again below. Anything else that only the DIR_INDEX names is a name of its
	 * own and is made whole.
	 */
	for (size_t i = 0; !ret && i < ns.n; i++) {
		struct rname *x = &ns.v[i];

		if (!x->has_idx || x->has_ref || x->has_item)
			continue;
		for (size_t j = 0; j < ns.n; j++) {
			struct rname *r = &ns.v[j];
			struct ub_key k = { dir, BTRFS_DIR_INDEX_KEY, x->idx_index };

			if (j == i || !r->has_ref || r->has_idx || r->ref_index != x->idx_index)
				continue;
			ret = fsw_del_key(&w, &w.fs->root, &k);
			if (!ret) {
				say_bad_index(c, note, dir, x, r);
				x->has_idx = false;
				x->len = 0; /* nothing left of it */
				ret = rp_touch(c, note->tree, dir, true);
			}
			break;
		}
	}
	for (size_t i = 0; !ret && i < ns.n; i++) {
		struct rname *x = &ns.v[i];
		char shown[UB_NAME_LEN * 4 + 1];

		/*
		 * One name twice in the child's ref item or the directory's DIR_ITEM:
		 * every copy goes (the writers remove one matching entry a call),
		 * and fix_one below makes the one record again, with the index and
		 * type the other records and the mode give.
		 */
		escape(x, shown, sizeof(shown));
		if (x->ref_dups) {
			uint64_t old;

			for (uint32_t e = 0; !ret && e <= x->ref_dups; e++)
				ret = fsw_del_ref(&w, child, dir, x->name, x->len, &old);
			if (ret)
				break;
			rp_say(c, note, 0, "inode %llu of tree %llu: the name '%s' in directory %llu was %u times in its "
			       "INODE_REF: removed, to be made once", (unsigned long long)note->inode,
			       (unsigned long long)note->tree, shown, (unsigned long long)dir, x->ref_dups + 1);
			x->has_ref = false;
			x->ref_dups = 0;
			ret = rp_touch(c, note->tree, child, false);
		}
		if (!ret && x->item_dups) {
			struct ub_key k = { dir, BTRFS_DIR_ITEM_KEY, ub_name_hash(x->name, x->len) };

			for (uint32_t e = 0; !ret && e <= x->item_dups; e++)
				ret = fsw_dir_item_del(&w, &k, x->name, x->len);
			if (ret)
				break;
			rp_say(c, note, 0, "inode %llu of tree %llu: the name '%s' was %u times in directory %llu's DIR_ITEM: "
			       "removed, to be made once", (unsigned long long)note->inode, (unsigned long long)note->tree,
			       shown, x->item_dups + 1, (unsigned long long)dir);
			x->has_item = false;
			x->item_dups = 0;
			ret = rp_touch(c, note->tree, dir, true);
		}
		for (uint8_t e = 0; !ret && e < x->nextra; e++) {
			struct ub_key k = { dir, BTRFS_DIR_INDEX_KEY, x->idx_extra[e] };

			ret = fsw_del_key(&w, &w.fs->root, &k);
			if (ret)
				break;
			rp_say(c, note, 0, "inode %llu of tree %llu: a second DIR_INDEX (%llu) of the name '%s' in directory "
			       "%llu removed, the name keeps DIR_INDEX %llu", (unsigned long long)note->inode,
			       (unsigned long long)note->tree, (unsigned long long)x->idx_extra[e], shown,
			       (unsigned long long)dir, (unsigned long long)x->idx_index);
			ret = rp_touch(c, note->tree, dir, true);
		}
		x->nextra = 0;
	}
	for (size_t i = 0; !ret && i < ns.n; i++) {
		bool changed = false;
		struct rname before = ns.v[i];

		if (!ns.v[i].len)
			continue;

		ret = fix_one(c, &w, dir, child, type, &ns.v[i], &changed);
		if (!ret && changed) {
			say_name(c, note, dir, &before);
			ret = rp_touch(c, note->tree, child, false);
			if (!ret)
				ret = rp_touch(c, note->tree, dir, true);
		}
	}
	free(ns.v);
	return ret;
}

/* /lost+found of the subvolume (made when missing): its inode number. */
static int lost_found(struct rp_ctx *c, struct fsw *w, uint64_t tree, uint64_t *out)
{
	static const char name[] = "lost+found";
	uint64_t root = BTRFS_FIRST_FREE_OBJECTID;
	struct ub_key loc;
	uint8_t type;
	int ret = fsw_lookup(w, root, name, sizeof(name) - 1, &loc, &type);

	if (ret == 0) {
		if (loc.type != BTRFS_INODE_ITEM_KEY || type != BTRFS_FT_DIR) {
			ub_err(c->log, "repair: /lost+found of tree %llu is no directory", (unsigned long long)tree);
			return -ENOTDIR;
		}
		*out = loc.objectid;
		return 0;
	}
	if (ret != -ENOENT)
		return ret;
	/* the root directory's size grows by the new name: counted again at the end, not set to the check's */
	ret = rp_touch(c, tree, root, true);
	return ret ? ret : ub_fsw_mkdir(c->t, tree, root, name, sizeof(name) - 1, 0700, 0, 0, out);
}

int rp_fix_lost(struct rp_ctx *c, const struct rp_note *note)
{
	uint8_t ii[UB_II_SIZE];
	struct fsw w;
	uint64_t names, lf, index;
	char name[24];
	int len, ret = fsw_init_ro(&w, c->t, note->tree);

	if (!ret)
		ret = fsw_inode_get(&w, note->inode, ii);
	if (!ret)
		ret = names_now(&w, note->inode, &names);
	if (ret)
		return ret;
	/* a name made again by the names' cure: only the count is left to set */
	if (names)
		return rp_touch(c, note->tree, note->inode, false);
	ret = lost_found(c, &w, note->tree, &lf);
	if (ret) {
		ub_err(c->log, "repair: no /lost+found in tree %llu for inode %llu: %s", (unsigned long long)note->tree,
		       (unsigned long long)note->inode, strerror(-ret));
		return ret;
	}
	len = snprintf(name, sizeof(name), "%" PRIu64, note->inode);
	ret = fsw_next_index(&w, lf, &index);
	if (!ret)
		ret = fsw_add_ref(&w, note->inode, lf, name, (size_t)len, index);
	if (!ret) {
		struct ub_key loc = { note->inode, BTRFS_INODE_ITEM_KEY, 0 };

		ret = fsw_add_entry(&w, lf, name, (size_t)len, &loc, ub_mode_ftype((uint32_t)UB_GET(btrfs_inode_item, mode, ii)),
				    index);
	}
	/* an orphan item would delete it at the next mount: it has a name now */
	if (!ret) {
		ret = fsw_orphan_del(&w, note->inode);
		if (ret == -ENOENT)
			ret = 0;
	}
	if (ret)
		return ret;
	rp_say(c, note, 0, "inode %llu of tree %llu had no name: linked as /lost+found/%s", (unsigned long long)note->inode,
	       (unsigned long long)note->tree, name);
	return rp_touch(c, note->tree, note->inode, false);
}

/* ---- a subvolume's root directory without its inode item ---- */

int rp_fix_root_dir(struct rp_ctx *c, const struct rp_note *n)
{
	struct ub_key key = { n->inode, BTRFS_INODE_ITEM_KEY, 0 };
	uint8_t ii[UB_II_SIZE];
	struct fsw w;
	int ret = fsw_init(&w, c->t, n->tree);

	if (ret) {
		ub_err(c->log, "repair: subvolume %llu cannot be changed: %s", (unsigned long long)n->tree, strerror(-ret));
		return ret;
	}
	/* as a new directory's (fsw_alloc_inode), with btrfs check's choices: 0755, root's, one link */
	memset(ii, 0, sizeof(ii));
	UB_SET(btrfs_inode_item, generation, ii, c->t->transid);
	UB_SET(btrfs_inode_item, transid, ii, c->t->transid);
	UB_SET(btrfs_inode_item, nlink, ii, 1);
	UB_SET(btrfs_inode_item, mode, ii, 040755);
	UB_SET(btrfs_inode_item, sequence, ii, 1);
	fsw_set_time(ii, offsetof(struct btrfs_inode_item, atime), &w.now);
	fsw_set_time(ii, offsetof(struct btrfs_inode_item, ctime), &w.now);
	fsw_set_time(ii, offsetof(struct btrfs_inode_item, mtime), &w.now);
	fsw_set_time(ii, offsetof(struct btrfs_inode_item, otime), &w.now);
	ret = ub_tree_insert_item(w.tc, w.ta, &w.fs->root, &key, ii, UB_II_SIZE);
	if (ret) {
		ub_err(c->log, "repair: the root directory's inode item of subvolume %llu cannot be made: %s",
		       (unsigned long long)n->tree, strerror(-ret));
		return ret;
	}
	rp_say(c, n, 0, "subvolume %llu: the root directory's inode item %llu made again (a directory, 0755, root's)",
	       (unsigned long long)n->tree, (unsigned long long)n->inode);
	/* its size from its entries, at the end */
	return rp_touch(c, n->tree, n->inode, true);
}
