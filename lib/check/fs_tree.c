/* SPDX-License-Identifier: MIT */
/*
 * File trees: every live subvolume tree streamed in key order. An inode's
 * items are adjacent (inode item, names, xattrs, directory entries, file
 * extents), so what one inode's items say about each other is checked when
 * the stream leaves it, holding nothing but that inode. The links between a
 * name and the directory entries that name it span inodes: each adds a small
 * record, matched per subvolume in fs_names.c.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check/fs_tree.h"

#define FE(field, d) UB_GET(btrfs_file_extent_item, field, d)

void chk_fs_where(struct ub_chk_problem *p, const struct fstate *f, uint64_t ino, uint64_t type, uint64_t offset)
{
	memset(p, 0, sizeof(*p));
	p->cls = UB_CHK_FS;
	p->tree = f->tree;
	p->inode = ino;
	p->has_key = true;
	p->key = (struct ub_key){ ino, (uint8_t)type, offset };
}

int chk_name_add(struct fstate *f, const struct chk_name *n)
{
	if (chk_reserve(&f->names, &f->names_cap, f->nnames, sizeof(*f->names), 1024)) {
		f->nomem = true;
		return -ENOMEM;
	}
	f->names[f->nnames] = *n;
	f->names[f->nnames++].seq = f->name_seq++;
	return 0;
}

static int add_u64(uint64_t **v, size_t *n, size_t *cap, uint64_t x)
{
	if (chk_reserve(v, cap, *n, sizeof(**v), 64))
		return -ENOMEM;
	(*v)[(*n)++] = x;
	return 0;
}

static const char *kind_of(uint32_t mode)
{
	switch (mode & S_IFMT) {
	case S_IFREG: return "regular file";
	case S_IFDIR: return "directory";
	case S_IFLNK: return "symlink";
	default: return "special file";
	}
}

/*
 * An unlinked directory is emptied by its orphan cleanup, entry by entry: what
 * it still holds, and its size, are not matched.
 */
static void forget_entries(struct fstate *f)
{
	size_t kept = f->cur.first_name;

	for (size_t i = f->cur.first_name; i < f->nnames; i++)
		if (f->names[i].kind == NAME_REF)
			f->names[kept++] = f->names[i];
	f->nnames = kept;
}

/* The verdicts on the inode the stream leaves. */
static void inode_verdicts(struct fstate *f)
{
	struct finode *i = &f->cur;
	struct ub_chk_problem p;
	bool is_dir = S_ISDIR(i->mode), has_data = S_ISREG(i->mode) || S_ISLNK(i->mode);

	if (!i->ino)
		return;
	f->s.c->sum.inodes++;
	chk_fs_where(&p, f, i->ino, BTRFS_INODE_ITEM_KEY, 0);
	if (!i->item) {
		/* a subvolume's root directory is known to be a directory: btrfs check makes it again too */
		if (i->ino == f->root_dirid && !f->log)
			p.fix = UB_CHK_FIX_ROOT_DIR;
		chk_report(f->s.c, &p, "%s has items but no inode item",
			   i->ino == f->root_dirid ? "the subvolume's root directory" : "the inode");
		return;
	}
	if (i->ino == f->root_dirid)
		f->saw_root_dir = true;
	if (i->nlink != i->names) {
		/* an inode no name reaches needs a name (lost+found), not a count of zero */
		if (i->names) {
			p.fix = UB_CHK_FIX_NLINK;
			p.want = i->names;
		} else {
			p.fix = UB_CHK_FIX_LOST;
		}
		chk_report(f->s.c, &p, "nlink %llu, but the inode has %llu names (INODE_REF and INODE_EXTREF entries)",
			   (unsigned long long)i->nlink, (unsigned long long)i->names);
		p.fix = UB_CHK_FIX_NONE;
	} else if (is_dir && i->nlink > 1)
		chk_report(f->s.c, &p, "a directory with %llu names (directories have one)", (unsigned long long)i->nlink);
	if (!i->nlink && add_u64(&f->unlinked, &f->nunlinked, &f->unlinked_cap, i->ino))
		f->nomem = true;
	if (!i->nlink && is_dir) {
		forget_entries(f);
		return;
	}
	if (i->dir_entries && !is_dir)
		chk_report(f->s.c, &p, "a %s with %llu directory entries", kind_of(i->mode),
			   (unsigned long long)i->dir_entries);
	if (i->extents && !has_data)
		chk_report(f->s.c, &p, "a %s with %llu file extents", kind_of(i->mode), (unsigned long long)i->extents);
	if (is_dir && i->size != i->dir_bytes) {
		p.fix = UB_CHK_FIX_DIR_SIZE;
		p.want = i->dir_bytes;
		chk_report(f->s.c, &p, "directory size %llu, its entries' names (DIR_ITEM and DIR_INDEX) sum to %llu",
			   (unsigned long long)i->size, (unsigned long long)i->dir_bytes);
		p.fix = UB_CHK_FIX_NONE;
	}
	/* an unlinked inode waits for its orphan cleanup: its nbytes may be stale (btrfs check's rule too) */
	if (!has_data || !i->nlink)
		return;
	if (i->nbytes != i->found) {
		p.fix = UB_CHK_FIX_NBYTES;
		p.want = i->found;
		chk_report(f->s.c, &p, "nbytes %llu, its file extents hold %llu", (unsigned long long)i->nbytes,
			   (unsigned long long)i->found);
		p.fix = UB_CHK_FIX_NONE;
	}
	if (f->no_holes || !i->size)
		return;
	/* without NO_HOLES every byte up to the size has an extent item, holes included */
	p.fix = UB_CHK_FIX_HOLES;
	if (i->ext_start == UINT64_MAX || i->ext_start)
		chk_report(f->s.c, &p, "no file extent covers [0, +%llu) (size %llu; the filesystem has no NO_HOLES)",
			   (unsigned long long)(i->ext_start == UINT64_MAX ? i->size : i->ext_start),
			   (unsigned long long)i->size);
	else if (i->gap < i->size)
		chk_report(f->s.c, &p, "no file extent covers offset %llu (size %llu; the filesystem has no NO_HOLES)",
			   (unsigned long long)i->gap, (unsigned long long)i->size);
	else if (i->ext_end < i->size)
		chk_report(f->s.c, &p, "file extents end at %llu, the size is %llu (the filesystem has no NO_HOLES)",
			   (unsigned long long)i->ext_end, (unsigned long long)i->size);
}

static void finish_inode(struct fstate *f)
{
	inode_verdicts(f);
	/* what is left of its names (an unlinked directory's entries are forgotten) */
	chk_names_flush(f, f->cur.ino);
}

static void inode_item(struct fstate *f, const struct ub_key *k, const uint8_t *d, uint32_t size)
{
	struct finode *i = &f->cur;

	/* the tree checker has rejected a short inode item */
	if (size < sizeof(struct btrfs_inode_item) || k->offset)
		return;
	i->item = true;
	i->mode = (uint32_t)UB_GET(btrfs_inode_item, mode, d);
	i->nlink = UB_GET(btrfs_inode_item, nlink, d);
	i->size = UB_GET(btrfs_inode_item, size, d);
	i->nbytes = UB_GET(btrfs_inode_item, nbytes, d);
	i->flags = UB_GET(btrfs_inode_item, flags, d);
	chk_inode_rules(f, k, d, size);
}

/* INODE_REF (name, index; the key names the directory) and INODE_EXTREF (directory, index, name) entries. */
static void ref_item(struct fstate *f, const struct ub_key *k, const uint8_t *d, uint32_t size)
{
	bool ext = k->type == BTRFS_INODE_EXTREF_KEY;
	uint32_t hdr = ext ? (uint32_t)sizeof(struct btrfs_inode_extref) : (uint32_t)sizeof(struct btrfs_inode_ref);

	/* the tree checker has bounded every entry by the item */
	for (uint32_t at = 0; at + hdr <= size;) {
		struct chk_name n = { .child = k->objectid, .kind = NAME_REF };
		const uint8_t *e = d + at;

		if (ext) {
			n.dir = UB_GET(btrfs_inode_extref, parent_objectid, e);
			n.index = UB_GET(btrfs_inode_extref, index, e);
			n.len = (uint16_t)UB_GET(btrfs_inode_extref, name_len, e);
		} else {
			n.dir = k->offset;
			n.index = UB_GET(btrfs_inode_ref, index, e);
			n.len = (uint16_t)UB_GET(btrfs_inode_ref, name_len, e);
		}
		if (at + hdr + n.len > size)
			return;
		if (!(n.dir == k->objectid && k->objectid == f->root_dirid))
			chk_name_rules(f, k, k->objectid, ext ? "INODE_EXTREF" : "INODE_REF", e + hdr, n.len);
		f->cur.names++;
		f->s.c->sum.names++;
		n.hash = (uint32_t)ub_name_hash((const char *)e + hdr, n.len);
		n.hash2 = chk_name_hash2(e + hdr, n.len);
		n.type = f->cur.item ? ub_mode_ftype(f->cur.mode) : 0;
		/* the root directory's ".." names itself: no directory entry goes with it */
		if (n.dir == k->objectid && k->objectid == f->root_dirid) {
			if (n.index || n.len != 2 || memcmp(e + hdr, "..", 2)) {
				struct ub_chk_problem p;

				chk_fs_where(&p, f, k->objectid, k->type, k->offset);
				chk_report(f->s.c, &p, "the root directory's reference to itself has index %llu and a %u-byte name; it must be \"..\" at index 0",
					   (unsigned long long)n.index, n.len);
			}
		} else {
			chk_name_add(f, &n);
		}
		at += hdr + n.len;
	}
}

/*
 * Two entries of one DIR_ITEM with the same name: a directory lists each name
 * once (a lookup finds the first only; btrfs check does not look). The tree
 * checker has bounded every entry by the item.
 */
static void same_names(struct fstate *f, const struct ub_key *k, const uint8_t *d, uint32_t size)
{
	const uint32_t hdr = (uint32_t)sizeof(struct btrfs_dir_item);

	for (uint32_t a = 0; a + hdr <= size;) {
		uint32_t alen = (uint32_t)UB_GET(btrfs_dir_item, name_len, d + a);
		uint32_t anext = a + hdr + alen + (uint32_t)UB_GET(btrfs_dir_item, data_len, d + a);

		if (anext > size)
			return;
		for (uint32_t b = anext; b + hdr <= size;) {
			uint32_t blen = (uint32_t)UB_GET(btrfs_dir_item, name_len, d + b);
			uint32_t bnext = b + hdr + blen + (uint32_t)UB_GET(btrfs_dir_item, data_len, d + b);

			if (bnext > size)
				return;
			if (alen == blen && !memcmp(d + a + hdr, d + b + hdr, alen)) {
				struct ub_chk_problem p;
				struct ub_key la, lb;
				char esc[UB_NAME_LEN * 4 + 8];

				ub_key_read(&la, UB_PTR(btrfs_dir_item, location, d + a));
				ub_key_read(&lb, UB_PTR(btrfs_dir_item, location, d + b));
				ub_name_escape((const char *)d + a + hdr, alen, esc, sizeof(esc));
				chk_fs_where(&p, f, k->objectid, k->type, k->offset);
				chk_report(f->s.c, &p, "directory %llu has two entries named \"%s\" (for %llu and %llu)",
					   (unsigned long long)k->objectid, esc, (unsigned long long)la.objectid,
					   (unsigned long long)lb.objectid);
			}
			b = bnext;
		}
		a = anext;
	}
}

/* DIR_ITEM (entries of one name hash) and DIR_INDEX (one entry) items of a directory. */
static void dir_item(struct fstate *f, const struct ub_key *k, const uint8_t *d, uint32_t size)
{
	const uint32_t hdr = (uint32_t)sizeof(struct btrfs_dir_item);
	unsigned count = 0;

	for (uint32_t at = 0; at + hdr <= size;) {
		const uint8_t *e = d + at;
		uint16_t len = (uint16_t)UB_GET(btrfs_dir_item, name_len, e);
		uint16_t dlen = (uint16_t)UB_GET(btrfs_dir_item, data_len, e);
		struct ub_key loc;
		struct chk_name n = {
			.dir = k->objectid, .len = len, .type = (uint8_t)UB_GET(btrfs_dir_item, type, e),
			.kind = k->type == BTRFS_DIR_INDEX_KEY ? NAME_INDEX : NAME_ITEM,
			.index = k->type == BTRFS_DIR_INDEX_KEY ? k->offset : 0,
		};

		if (at + hdr + len + dlen > size)
			return;
		count++;
		f->cur.dir_entries++;
		f->cur.dir_bytes += len;
		ub_key_read(&loc, UB_PTR(btrfs_dir_item, location, e));
		chk_name_rules(f, k, loc.objectid, k->type == BTRFS_DIR_INDEX_KEY ? "DIR_INDEX" : "DIR_ITEM", e + hdr, len);
		/* a subvolume's entry: the root tree's ROOT_REF is its other half (chk_subvol_links_check) */
		if (loc.type == BTRFS_ROOT_ITEM_KEY && len <= UB_NAME_LEN) {
			struct ub_checker *c = f->s.c;
			struct chk_subvol_link *l;

			if (chk_reserve(&c->links, &c->links_cap, c->nlinks, sizeof(*c->links), 8)) {
				f->nomem = true;
				return;
			}
			l = &c->links[c->nlinks++];
			*l = (struct chk_subvol_link){ .tree = f->tree, .dir = k->objectid, .child = loc.objectid,
						       .index = n.index, .is_index = n.kind == NAME_INDEX,
						       .name_len = len };
			memcpy(l->name, e + hdr, len);
		}
		/*
		 * The tree checker lets a location of type 0 through (the rule it
		 * shares with xattrs), but a lookup of the name refuses it: said here,
		 * and the entry still stands for its name, so its link is matched.
		 */
		if (loc.type != BTRFS_INODE_ITEM_KEY && loc.type != BTRFS_ROOT_ITEM_KEY) {
			struct ub_chk_problem p;

			chk_fs_where(&p, f, k->objectid, k->type, k->offset);
			p.inode = loc.objectid;
			chk_report(f->s.c, &p, "%s entry of directory %llu for inode %llu: location key type %u, neither INODE_ITEM nor ROOT_ITEM",
				   k->type == BTRFS_DIR_INDEX_KEY ? "DIR_INDEX" : "DIR_ITEM", (unsigned long long)k->objectid,
				   (unsigned long long)loc.objectid, loc.type);
		}
		if (loc.type != BTRFS_ROOT_ITEM_KEY) {
			n.child = loc.objectid;
			n.hash = (uint32_t)ub_name_hash((const char *)e + hdr, len);
			n.hash2 = chk_name_hash2(e + hdr, len);
			chk_name_add(f, &n);
		}
		at += hdr + len + dlen;
	}
	/* one DIR_ITEM holds every entry of one name hash: a name twice is two entries of one name */
	if (k->type == BTRFS_DIR_ITEM_KEY && count > 1)
		same_names(f, k, d, size);
	if (k->type == BTRFS_DIR_INDEX_KEY && count > 1) {
		struct ub_chk_problem p;

		chk_fs_where(&p, f, k->objectid, k->type, k->offset);
		chk_report(f->s.c, &p, "a DIR_INDEX item with %u entries (it holds one)", count);
	}
}

static void file_extent(struct fstate *f, const struct ub_key *k, const uint8_t *d, uint32_t size)
{
	struct finode *i = &f->cur;
	struct ub_chk_problem p;
	uint64_t len;
	uint8_t type;

	/* the tree checker has rejected items too short for their type */
	if (size < UB_FILE_EXTENT_INLINE_DATA_START)
		return;
	type = (uint8_t)FE(type, d);
	chk_fs_where(&p, f, k->objectid, k->type, k->offset);
	chk_extent_rules(f, k, d, size);
	i->extents++;
	f->s.c->sum.file_extents++;
	if (type == BTRFS_FILE_EXTENT_INLINE) {
		uint64_t ram = FE(ram_bytes, d);

		i->found += ram;
		len = (ram + f->s.sectorsize - 1) / f->s.sectorsize * f->s.sectorsize;
	} else {
		uint64_t off;

		if (size < sizeof(struct btrfs_file_extent_item))
			return;
		len = FE(num_bytes, d);
		off = FE(offset, d);
		if (FE(disk_bytenr, d))
			i->found += len;
		/* compressed data is checksummed whatever the inode says (btrfs check's rule too) */
		if (type == BTRFS_FILE_EXTENT_REG && FE(disk_bytenr, d) &&
		    (!(i->flags & UB_INODE_NODATASUM) || FE(compression, d))) {
			if (FE(compression, d))
				chk_csum_need(f, k, FE(disk_bytenr, d), FE(disk_num_bytes, d));
			else
				chk_csum_need(f, k, FE(disk_bytenr, d) + off, len);
		}
	}
	if (i->ext_start == UINT64_MAX) {
		i->ext_start = k->offset;
	} else if (k->offset < i->ext_end) {
		/* a reader takes these bytes from this item already: the ones before it are cut to end here */
		p.fix = UB_CHK_FIX_OVERLAP;
		p.want = k->offset;
		chk_report(f->s.c, &p, "file extent at %llu overlaps the one before it (which ends at %llu)",
			   (unsigned long long)k->offset, (unsigned long long)i->ext_end);
	} else if (k->offset > i->ext_end && i->gap == UINT64_MAX) {
		i->gap = i->ext_end;
	}
	if (k->offset + len > i->ext_end)
		i->ext_end = k->offset + len;
}

static int fs_item(struct cstate *s, const struct ub_key *k, const uint8_t *d, uint32_t size)
{
	struct fstate *f = (struct fstate *)s;

	if (k->objectid == BTRFS_ORPHAN_OBJECTID) {
		if (k->type == BTRFS_ORPHAN_ITEM_KEY && add_u64(&f->orphans, &f->norphans, &f->orphans_cap, k->offset))
			return -ENOMEM;
		return 0;
	}
	/* inodes only; the old inode number cache (FREE_INO) and anything else is not the pass's */
	if (k->objectid < BTRFS_FIRST_FREE_OBJECTID || k->objectid > BTRFS_LAST_FREE_OBJECTID)
		return 0;
	if (k->objectid != f->cur.ino) {
		finish_inode(f);
		f->cur = (struct finode){ .ino = k->objectid, .ext_start = UINT64_MAX, .gap = UINT64_MAX,
					  .first_name = f->nnames };
		if (!(f->s.c->sum.inodes & 4095))
			chk_progress(f->s.c, "file trees", f->s.c->sum.inodes, 0);
	}
	switch (k->type) {
	case BTRFS_INODE_ITEM_KEY: inode_item(f, k, d, size); break;
	case BTRFS_INODE_REF_KEY:
	case BTRFS_INODE_EXTREF_KEY: ref_item(f, k, d, size); break;
	case BTRFS_DIR_ITEM_KEY:
	case BTRFS_DIR_INDEX_KEY: dir_item(f, k, d, size); break;
	case BTRFS_EXTENT_DATA_KEY: file_extent(f, k, d, size); break;
	default: break;
	}
	return f->nomem ? -ENOMEM : 0;
}

/* One subvolume tree, whole. */
static int check_tree(struct fstate *f, uint64_t tree, uint64_t root_dirid)
{
	struct ub_key from = { 0, 0, 0 };
	struct ub_chk_problem p;
	int ret;

	f->tree = tree;
	f->root_dirid = root_dirid;
	f->cur = (struct finode){ 0 };
	f->saw_root_dir = false;
	f->nnames = f->npending = f->nkept = f->nunlinked = f->norphans = 0;
	f->name_seq = 0;
	ret = chk_scan_tree(&f->s, tree, &from, fs_item);
	if (ret < 0)
		return ret;
	/*
	 * A tree read in part: the inode the stream stopped in may have lost items
	 * to the bad block, and names and orphans cannot be matched without a
	 * flood of "missing" verdicts.
	 */
	if (ret == 1)
		return 0;
	finish_inode(f);
	if (!f->saw_root_dir) {
		chk_fs_where(&p, f, root_dirid, BTRFS_INODE_ITEM_KEY, 0);
		chk_report(f->s.c, &p, "the subvolume's root directory (inode %llu) is missing",
			   (unsigned long long)root_dirid);
	}
	chk_names_check(f);
	chk_orphans_check(f);
	if (chk_reserve(&f->s.c->whole_trees, &f->s.c->whole_cap, f->s.c->nwhole, sizeof(uint64_t), 16))
		return -ENOMEM;
	f->s.c->whole_trees[f->s.c->nwhole++] = tree;
	return f->nomem ? -ENOMEM : 0;
}

struct subvol {
	uint64_t id, dirid;
};

struct subvols {
	struct cstate s; /* first, as for fstate */
	struct subvol *v;
	size_t n, cap;
};

/*
 * The live subvolume trees the root tree names: the top one, every subvolume
 * or snapshot, and the data relocation tree (a directory of its own).
 */
static int root_item(struct cstate *s, const struct ub_key *k, const uint8_t *d, uint32_t size)
{
	struct subvols *l = (struct subvols *)s;

	if (k->type != BTRFS_ROOT_ITEM_KEY ||
	    (k->objectid != BTRFS_FS_TREE_OBJECTID && k->objectid != BTRFS_DATA_RELOC_TREE_OBJECTID &&
	     (k->objectid < BTRFS_FIRST_FREE_OBJECTID || k->objectid > BTRFS_LAST_FREE_OBJECTID)))
		return 0;
	/* a deleted subvolume (refs 0) may be half dropped: its inodes are the cleaner's */
	if (size < offsetof(struct btrfs_root_item, generation_v2) || !UB_GET(btrfs_root_item, refs, d))
		return 0;
	if (chk_reserve(&l->v, &l->cap, l->n, sizeof(*l->v), 16))
		return -ENOMEM;
	l->v[l->n++] = (struct subvol){ k->objectid, UB_GET(btrfs_root_item, root_dirid, d) };
	return 0;
}

int chk_fs_trees(struct ub_checker *c, struct ub_fs *fs)
{
	const uint8_t *sb = ub_volume_super(ub_fs_volume(fs));
	struct ub_key from = { BTRFS_FS_TREE_OBJECTID, BTRFS_ROOT_ITEM_KEY, 0 };
	struct subvols l = { .s = { .c = c, .fs = fs, .scan_cls = UB_CHK_FS } };
	struct fstate f = { .s = { .c = c, .fs = fs, .scan_cls = UB_CHK_FS } };
	struct ub_volume_info vi;
	int ret = ub_volume_get_info(ub_fs_volume(fs), &vi);

	if (ret)
		return ret;
	f.s.sectorsize = vi.sectorsize;
	f.s.nodesize = vi.nodesize;
	f.csum_size = vi.csum_size;
	f.no_holes = UB_GET(ub_disk_super, incompat_flags, sb) & BTRFS_FEATURE_INCOMPAT_NO_HOLES;
	/* an inode made in the transaction a pending log belongs to carries the next generation */
	f.gen_limit = c->super_generation + 1;
	chk_progress(c, "file trees", 0, 0);
	ret = chk_scan_tree(&l.s, BTRFS_ROOT_TREE_OBJECTID, &from, root_item);
	for (size_t i = 0; ret >= 0 && i < l.n; i++) {
		c->sum.subvols++;
		ret = check_tree(&f, l.v[i].id, l.v[i].dirid);
	}
	if (ret >= 0)
		ret = chk_csum_needs_check(&f);
	if (ret >= 0)
		ret = chk_log_items(&f);
	free(l.v);
	free(f.needs);
	chk_names_free(&f);
	free(f.unlinked);
	free(f.orphans);
	return ret < 0 ? ret : 0;
}
