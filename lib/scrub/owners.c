/* SPDX-License-Identifier: MIT */
/*
 * The files a bad data sector belongs to, as the pinned commit says: the
 * extent's back references (EXTENT_DATA_REF: a subvolume, an inode and the
 * file offset the extent starts at; SHARED_DATA_REF: a leaf that holds such
 * file extent items) lead to file extent items; each one that covers the
 * sector names a file and the offset in it. Snapshots share leaves without
 * references of their own, so every subvolume is asked for the same inode's
 * items: a snapshot that still holds the extent is an owner too. PREALLOC
 * items are no owners: their bytes were never written, nothing reads them.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "scrub/scrub_priv.h"

struct cand {
	uint64_t root; /* 0: from a shared leaf, any subvolume */
	uint64_t ino;
	uint64_t off;  /* EXTENT_DATA_REF: the extent's file offset; shared: the item's key offset */
	bool exact;
};

struct found {
	struct ub_scrub_owner *v;
	int n, max;
	bool more;
};

static int load_subvols(struct ub_scrub *s)
{
	struct ub_key key = { BTRFS_FS_TREE_OBJECTID, BTRFS_ROOT_ITEM_KEY, 0 };
	struct ub_path p;
	int ret;

	if (s->subvols_loaded)
		return 0;
	ub_path_init(&p);
	ret = ub_tree_search(s->tc, &s->root_root, &key, &p);
	ret = ret == 2 ? 1 : ret < 0 ? ret : 0;
	while (ret == 0) {
		ub_path_key(&p, &key);
		if (key.objectid > BTRFS_LAST_FREE_OBJECTID)
			break;
		if (key.type == BTRFS_ROOT_ITEM_KEY &&
		    (key.objectid == BTRFS_FS_TREE_OBJECTID || key.objectid >= BTRFS_FIRST_FREE_OBJECTID) &&
		    (!s->nsubvols || s->subvols[s->nsubvols - 1] != key.objectid)) {
			uint64_t *v = realloc(s->subvols, (size_t)(s->nsubvols + 1) * sizeof(*v));

			if (!v) {
				ret = -ENOMEM;
				break;
			}
			s->subvols = v;
			s->subvols[s->nsubvols++] = key.objectid;
		}
		ret = ub_tree_next(&p);
	}
	ub_path_release(&p);
	if (ret < 0)
		return ret;
	s->subvols_loaded = true;
	return 0;
}

static int add_owner(struct sx_thread *t, struct found *f, uint64_t subvol, uint64_t ino, uint64_t off, uint64_t len,
		     bool compressed)
{
	char path[PATH_MAX];

	for (int i = 0; i < f->n; i++)
		if (f->v[i].subvol == subvol && f->v[i].ino == ino && f->v[i].offset == off)
			return 0;
	if (f->n >= f->max) {
		f->more = true;
		return 1;
	}
	f->v[f->n] = (struct ub_scrub_owner){ .subvol = subvol, .ino = ino, .offset = off, .length = len,
					     .compressed = compressed };
	if (ub_inode_path(t->s->view, subvol, ino, path, sizeof(path)) == 0)
		f->v[f->n].path = strdup(path);
	f->n++;
	return 0;
}

/* The file extent item at p: an owner of `logical` of extent x? (1 added and full, 0 go on, <0) */
static int match_item(struct sx_thread *t, struct found *f, uint64_t subvol, const struct ub_key *k,
		      const uint8_t *d, uint32_t size, const struct sx_extent *x, uint64_t logical)
{
	uint64_t disk, doff, nbytes;
	uint8_t type, comp;

	if (size < sizeof(struct btrfs_file_extent_item))
		return 0;
	type = (uint8_t)UB_GET(btrfs_file_extent_item, type, d);
	if (type != BTRFS_FILE_EXTENT_REG)
		return 0;
	disk = UB_GET(btrfs_file_extent_item, disk_bytenr, d);
	if (disk != x->bytenr)
		return 0;
	doff = UB_GET(btrfs_file_extent_item, offset, d);
	nbytes = UB_GET(btrfs_file_extent_item, num_bytes, d);
	comp = (uint8_t)UB_GET(btrfs_file_extent_item, compression, d);
	if (comp)
		return add_owner(t, f, subvol, k->objectid, k->offset, nbytes, true);
	if (logical < disk + doff || logical - (disk + doff) >= nbytes)
		return 0;
	return add_owner(t, f, subvol, k->objectid, k->offset + (logical - (disk + doff)), t->s->ss, false);
}

/* Subvolume v's file extent items of candidate c that may reference x. */
static int search_subvol(struct sx_thread *t, struct found *f, uint64_t v, const struct cand *c,
			 const struct sx_extent *x, uint64_t logical)
{
	struct ub_scrub *s = t->s;
	struct ub_root root;
	struct ub_key key = { c->ino, BTRFS_EXTENT_DATA_KEY, c->off <= (UINT64_MAX >> 1) ? c->off : 0 };
	struct ub_path p;
	int ret;

	ret = ub_fs_tree_root(s->view, v, &root);
	if (ret)
		return ret == -ENOENT ? 0 : ret;
	ub_path_init(&p);
	ret = ub_tree_search(s->tc, &root, &key, &p);
	if (c->exact) {
		if (ret == 0) {
			const uint8_t *d;
			uint32_t size;

			d = ub_path_data(&p, &size);
			ret = match_item(t, f, v, &key, d, size, x, logical);
		} else {
			ret = ret < 0 ? ret : 0;
		}
		ub_path_release(&p);
		return ret;
	}
	ret = ret == 2 ? 1 : ret < 0 ? ret : 0;
	while (ret == 0) {
		const uint8_t *d;
		uint32_t size;

		ub_path_key(&p, &key);
		/* an item referencing x from the file offset it starts at lies below off + x's length */
		if (key.objectid != c->ino || key.type != BTRFS_EXTENT_DATA_KEY || key.offset - c->off >= x->len)
			break;
		d = ub_path_data(&p, &size);
		ret = match_item(t, f, v, &key, d, size, x, logical);
		if (ret)
			break;
		ret = ub_tree_next(&p);
	}
	ub_path_release(&p);
	return ret < 0 ? ret : 0;
}

static int add_cand(struct cand **v, int *n, int *cap, struct cand c)
{
	for (int i = 0; i < *n; i++)
		if ((*v)[i].root == c.root && (*v)[i].ino == c.ino && (*v)[i].off == c.off && (*v)[i].exact == c.exact)
			return 0;
	if (*n == *cap) {
		int nc = *cap ? *cap * 2 : 8;
		struct cand *nv = realloc(*v, (size_t)nc * sizeof(*nv));

		if (!nv)
			return -ENOMEM;
		*v = nv;
		*cap = nc;
	}
	(*v)[(*n)++] = c;
	return 0;
}

/* The file extent items of leaf `parent` that point at x: candidates of any subvolume sharing it. */
static int shared_leaf(struct sx_thread *t, uint64_t parent, const struct sx_extent *x, struct cand **v, int *n,
		       int *cap)
{
	struct ub_eb *eb;
	int ret = ub_tree_read_block(t->s->tc, parent, NULL, &eb);

	if (ret)
		return 0; /* its own problem, said by the reader */
	for (uint32_t i = 0; ub_eb_level(eb) == 0 && i < ub_eb_nritems(eb) && !ret; i++) {
		struct ub_key k;
		const uint8_t *d;
		uint32_t size;

		ub_eb_item_key(eb, (int)i, &k);
		if (k.type != BTRFS_EXTENT_DATA_KEY)
			continue;
		d = ub_eb_item_data(eb, (int)i, &size);
		if (size >= sizeof(struct btrfs_file_extent_item) &&
		    UB_GET(btrfs_file_extent_item, type, d) != BTRFS_FILE_EXTENT_INLINE &&
		    UB_GET(btrfs_file_extent_item, disk_bytenr, d) == x->bytenr)
			ret = add_cand(v, n, cap, (struct cand){ 0, k.objectid, k.offset, true });
	}
	ub_eb_put(t->s->tc, eb);
	return ret;
}

/* The data extent's back references. */
static int data_refs(struct sx_thread *t, const struct sx_extent *x, struct cand **v, int *n, int *cap)
{
	struct ub_scrub *s = t->s;
	struct ub_key key = { x->bytenr, BTRFS_EXTENT_ITEM_KEY, 0 };
	uint64_t parents[64];
	int np = 0, ret;

	ub_path_release(&t->path);
	ret = ub_tree_search(s->tc, &s->extent_root, &key, &t->path);
	ret = ret == 2 ? 1 : ret < 0 ? ret : 0;
	while (ret == 0) {
		const uint8_t *d;
		uint32_t size;

		ub_path_key(&t->path, &key);
		if (key.objectid != x->bytenr)
			break;
		d = ub_path_data(&t->path, &size);
		if (key.type == BTRFS_EXTENT_ITEM_KEY && size >= sizeof(struct btrfs_extent_item)) {
			uint32_t at = (uint32_t)sizeof(struct btrfs_extent_item);

			while (at < size && !ret) {
				uint8_t type = d[at];
				const uint8_t *r = d + at + 1;

				if (type == BTRFS_EXTENT_DATA_REF_KEY && at + 1 + sizeof(struct btrfs_extent_data_ref) <= size) {
					ret = add_cand(v, n, cap,
						       (struct cand){ UB_GET(btrfs_extent_data_ref, root, r),
								      UB_GET(btrfs_extent_data_ref, objectid, r),
								      UB_GET(btrfs_extent_data_ref, offset, r), false });
					at += 1 + (uint32_t)sizeof(struct btrfs_extent_data_ref);
				} else if (type == BTRFS_SHARED_DATA_REF_KEY && at + 1 + 8 + 4 <= size) {
					if (np < 64)
						parents[np++] = ub_le64(r);
					at += 1 + 8 + 4;
				} else if (type == BTRFS_EXTENT_OWNER_REF_KEY && at + 9 <= size) {
					at += 9;
				} else {
					break; /* not parseable: the checker's business */
				}
			}
		} else if (key.type == BTRFS_EXTENT_DATA_REF_KEY && size >= sizeof(struct btrfs_extent_data_ref)) {
			ret = add_cand(v, n, cap,
				       (struct cand){ UB_GET(btrfs_extent_data_ref, root, d),
						      UB_GET(btrfs_extent_data_ref, objectid, d),
						      UB_GET(btrfs_extent_data_ref, offset, d), false });
		} else if (key.type == BTRFS_SHARED_DATA_REF_KEY) {
			if (np < 64)
				parents[np++] = key.offset;
		}
		if (!ret)
			ret = ub_tree_next(&t->path);
	}
	ub_path_release(&t->path);
	if (ret < 0)
		return ret;
	ret = 0; /* the end of the tree ends the references too */
	for (int i = 0; i < np && !ret; i++)
		ret = shared_leaf(t, parents[i], x, v, n, cap);
	return ret;
}

int sx_owners(struct sx_thread *t, const struct sx_extent *x, uint64_t logical, struct ub_scrub_owner **out,
	      int *n, bool *more)
{
	struct ub_scrub *s = t->s;
	struct cand *c = NULL;
	int nc = 0, cap = 0, ret;
	struct found f = { 0 };

	*out = NULL;
	*n = 0;
	*more = false;
	f.max = s->opts.max_owners > 0 ? s->opts.max_owners : 32;
	f.v = calloc((size_t)f.max, sizeof(*f.v));
	if (!f.v)
		return -ENOMEM;
	pthread_mutex_lock(&s->lock);
	ret = load_subvols(s);
	pthread_mutex_unlock(&s->lock);
	if (!ret)
		ret = data_refs(t, x, &c, &nc, &cap);
	for (int i = 0; i < nc && !ret && !f.more; i++) {
		/* the subvolume the reference names first, then every other (snapshots share its leaves) */
		if (c[i].root)
			ret = search_subvol(t, &f, c[i].root, &c[i], x, logical);
		for (int k = 0; k < s->nsubvols && ret == 0 && !f.more; k++)
			if (s->subvols[k] != c[i].root)
				ret = search_subvol(t, &f, s->subvols[k], &c[i], x, logical);
		ret = ret < 0 ? ret : 0;
	}
	free(c);
	*out = f.v;
	*n = f.n;
	*more = f.more;
	return ret;
}

void sx_owners_free(struct ub_scrub_owner *o, int n)
{
	for (int i = 0; o && i < n; i++)
		free((char *)o[i].path);
	free(o);
}
