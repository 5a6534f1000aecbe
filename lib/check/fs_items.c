/* SPDX-License-Identifier: MIT */
/*
 * The rules of one item of a file tree that need no other item: what the
 * readers refuse when they meet it (lib/fs: an inode's size, a symlink's
 * target, a file extent's claims, a name) and the tree checker leaves to
 * them. The file tree pass applies them to the subvolume trees; the fsync
 * log's trees get them too (chk_log_items), with the replay's own rules on
 * top (lib/fs/log_replay.c), since the readers meet a logged item through
 * the replay just as they meet a committed one.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check/fs_tree.h"

#define FE(field, d) UB_GET(btrfs_file_extent_item, field, d)
/* btrfs compresses at most 128 KiB of a file into one extent */
#define MAX_COMPRESSED (128u * 1024)

/* One problem of an item; in a log tree the message says whose log. */
static void item_report(struct fstate *f, const struct ub_chk_problem *p, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void item_report(struct fstate *f, const struct ub_chk_problem *p, const char *fmt, ...)
{
	char msg[900];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (f->log)
		chk_report(f->s.c, p, "in the fsync log of subvolume %llu: %s", (unsigned long long)f->log_subvol, msg);
	else
		chk_report(f->s.c, p, "%s", msg);
}

/* The longest symlink target: stored inline, at most PATH_MAX - 1 bytes (the readers' limit). */
static uint64_t max_symlink(const struct fstate *f)
{
	uint64_t inline_max = UB_MAX_INLINE_DATA_SIZE((uint64_t)f->s.nodesize);

	return inline_max < 4095 ? inline_max : 4095;
}

void chk_inode_rules(struct fstate *f, const struct ub_key *k, const uint8_t *d, uint32_t size)
{
	struct ub_chk_problem p;
	uint64_t gen, transid, isize, flags;
	uint32_t mode;

	/* the tree checker has rejected a short inode item */
	if (size < sizeof(struct btrfs_inode_item) || k->offset)
		return;
	mode = (uint32_t)UB_GET(btrfs_inode_item, mode, d);
	isize = UB_GET(btrfs_inode_item, size, d);
	flags = UB_GET(btrfs_inode_item, flags, d);
	gen = UB_GET(btrfs_inode_item, generation, d);
	transid = UB_GET(btrfs_inode_item, transid, d);
	chk_fs_where(&p, f, k->objectid, k->type, k->offset);
	if (gen > f->gen_limit || transid > f->gen_limit) {
		p.fix = f->log ? UB_CHK_FIX_NONE : UB_CHK_FIX_INODE_GEN;
		item_report(f, &p, "generation %llu or transid %llu is newer than the filesystem's %llu",
			    (unsigned long long)gen, (unsigned long long)transid, (unsigned long long)f->gen_limit - 1);
		p.fix = UB_CHK_FIX_NONE;
	}
	if (S_ISLNK(mode) && (flags & (UB_INODE_IMMUTABLE | UB_INODE_APPEND)))
		item_report(f, &p, "a symlink with the immutable or append-only flag (flags 0x%llx)",
			    (unsigned long long)flags);
	/* file offsets are signed 64-bit in the kernel: no file is larger */
	if (isize > (uint64_t)INT64_MAX)
		item_report(f, &p, "inode size %llu is larger than any file can be (2^63 - 1)", (unsigned long long)isize);
	else if (S_ISLNK(mode) && isize > max_symlink(f))
		item_report(f, &p, "a symlink whose target claims %llu bytes, more than btrfs allows (%llu)",
			    (unsigned long long)isize, (unsigned long long)max_symlink(f));
}

void chk_extent_rules(struct fstate *f, const struct ub_key *k, const uint8_t *d, uint32_t size)
{
	struct ub_chk_problem p;
	uint8_t type, comp;

	/* the tree checker has rejected items too short for their type, unknown types and encodings */
	if (size < UB_FILE_EXTENT_INLINE_DATA_START)
		return;
	type = (uint8_t)FE(type, d);
	comp = (uint8_t)FE(compression, d);
	chk_fs_where(&p, f, k->objectid, k->type, k->offset);
	if (type == BTRFS_FILE_EXTENT_INLINE) {
		uint64_t ram = FE(ram_bytes, d);

		if (!ram)
			item_report(f, &p, "an inline extent of 0 bytes");
		/* inline data fills at most the first sector (max_inline is capped by it) */
		else if ((comp || f->log) && ram > f->s.sectorsize)
			item_report(f, &p, "a%s inline extent of %llu bytes, more than a sector (%u)",
				    comp ? " compressed" : "n", (unsigned long long)ram, f->s.sectorsize);
		if (comp && size == UB_FILE_EXTENT_INLINE_DATA_START)
			item_report(f, &p, "a compressed inline extent that holds no data");
		return;
	}
	if (size < sizeof(struct btrfs_file_extent_item))
		return;
	{
		uint64_t len = FE(num_bytes, d), ram = FE(ram_bytes, d), off = FE(offset, d);
		uint64_t bytenr = FE(disk_bytenr, d), dlen = FE(disk_num_bytes, d);

		if (!len)
			item_report(f, &p, "a file extent of 0 bytes");
		if (off > ram || len > ram - off)
			item_report(f, &p, "the extent's bytes [%llu, +%llu) run past its %llu bytes of data",
				    (unsigned long long)off, (unsigned long long)len, (unsigned long long)ram);
		if (type == BTRFS_FILE_EXTENT_PREALLOC && (comp || FE(encryption, d) || FE(other_encoding, d)))
			item_report(f, &p, "a preallocated extent that says it is compressed or encoded");
		if (type == BTRFS_FILE_EXTENT_REG && bytenr && comp && (ram > MAX_COMPRESSED || dlen > MAX_COMPRESSED))
			item_report(f, &p, "a compressed extent of %llu bytes (%llu on disk), more than btrfs compresses at once (%u)",
				    (unsigned long long)ram, (unsigned long long)dlen, MAX_COMPRESSED);
		/*
		 * A logged extent may have no extent item yet (the replay makes it), so
		 * the data references cannot vouch for its place: the chunk map does.
		 */
		if (f->log && bytenr) {
			const struct ub_chunk *ch = ub_volume_find_chunk(ub_fs_volume(f->s.fs), bytenr);

			if (!ch || dlen > ch->length - (bytenr - ch->logical) || !(ch->type & BTRFS_BLOCK_GROUP_DATA))
				item_report(f, &p, "its disk extent [%llu, +%llu) is not inside one data chunk",
					    (unsigned long long)bytenr, (unsigned long long)dlen);
		}
	}
}

void chk_name_rules(struct fstate *f, const struct ub_key *k, uint64_t ino, const char *kind, const uint8_t *name,
		    uint32_t len)
{
	const char *why = ub_name_problem((const char *)name, len);
	struct ub_chk_problem p;
	char esc[UB_NAME_LEN * 4 + 8];

	if (!why)
		return;
	chk_fs_where(&p, f, k->objectid, k->type, k->offset);
	p.inode = ino;
	ub_name_escape((const char *)name, len, esc, sizeof(esc));
	item_report(f, &p, "%s entry \"%s\" for inode %llu: %s", kind, esc, (unsigned long long)ino, why);
}

/* ---- the fsync log's trees ---- */

/* INODE_REF and INODE_EXTREF entries: their names (the tree checker bounded each by the item). */
static void log_refs(struct fstate *f, const struct ub_key *k, const uint8_t *d, uint32_t size)
{
	bool ext = k->type == BTRFS_INODE_EXTREF_KEY;
	uint32_t hdr = ext ? (uint32_t)sizeof(struct btrfs_inode_extref) : (uint32_t)sizeof(struct btrfs_inode_ref);

	for (uint32_t at = 0; at + hdr <= size;) {
		uint32_t len = ext ? (uint32_t)UB_GET(btrfs_inode_extref, name_len, d + at)
				   : (uint32_t)UB_GET(btrfs_inode_ref, name_len, d + at);

		if (at + hdr + len > size)
			return;
		/* a subvolume's top directory refers to itself as ".." */
		if (!(!ext && k->offset == k->objectid))
			chk_name_rules(f, k, k->objectid, ext ? "INODE_EXTREF" : "INODE_REF", d + at + hdr, len);
		at += hdr + len;
	}
}

static void log_dir_entries(struct fstate *f, const struct ub_key *k, const uint8_t *d, uint32_t size)
{
	const uint32_t hdr = (uint32_t)sizeof(struct btrfs_dir_item);
	const char *kind = k->type == BTRFS_DIR_INDEX_KEY ? "DIR_INDEX" : "DIR_ITEM";

	for (uint32_t at = 0; at + hdr <= size;) {
		uint32_t len = (uint32_t)UB_GET(btrfs_dir_item, name_len, d + at);
		uint32_t next = at + hdr + len + (uint32_t)UB_GET(btrfs_dir_item, data_len, d + at);
		struct ub_key loc;

		if (next > size)
			return;
		ub_key_read(&loc, UB_PTR(btrfs_dir_item, location, d + at));
		chk_name_rules(f, k, loc.objectid, kind, d + at + hdr, len);
		if (loc.type != BTRFS_INODE_ITEM_KEY && loc.type != BTRFS_ROOT_ITEM_KEY) {
			struct ub_chk_problem p;

			chk_fs_where(&p, f, k->objectid, k->type, k->offset);
			p.inode = loc.objectid;
			item_report(f, &p, "%s entry of directory %llu for inode %llu: location key type %u, neither INODE_ITEM nor ROOT_ITEM",
				    kind, (unsigned long long)k->objectid, (unsigned long long)loc.objectid, loc.type);
		}
		at = next;
	}
}

/* Logged data checksums: whole checksums of whole sectors, inside the address space (the replay's rule). */
static void log_csums(struct fstate *f, const struct ub_key *k, uint32_t size)
{
	struct ub_chk_problem p;
	uint64_t end;

	if (!f->csum_size || (k->offset % f->s.sectorsize == 0 && size % f->csum_size == 0 &&
			      !__builtin_add_overflow(k->offset, (uint64_t)(size / f->csum_size) * f->s.sectorsize, &end)))
		return;
	chk_fs_where(&p, f, k->objectid, k->type, k->offset);
	p.cls = UB_CHK_CSUM;
	p.logical = k->offset;
	item_report(f, &p, "%u bytes of %u-byte checksums from logical %llu: not whole checksums, not sector-aligned, or past the end of the address space",
		    size, f->csum_size, (unsigned long long)k->offset);
}

static int log_item(struct cstate *s, const struct ub_key *k, const uint8_t *d, uint32_t size)
{
	struct fstate *f = (struct fstate *)s;

	if (k->objectid == BTRFS_EXTENT_CSUM_OBJECTID) {
		if (k->type == BTRFS_EXTENT_CSUM_KEY)
			log_csums(f, k, size);
		return 0;
	}
	switch (k->type) {
	case BTRFS_INODE_ITEM_KEY: chk_inode_rules(f, k, d, size); break;
	case BTRFS_INODE_REF_KEY:
	case BTRFS_INODE_EXTREF_KEY: log_refs(f, k, d, size); break;
	case BTRFS_DIR_ITEM_KEY:
	case BTRFS_DIR_INDEX_KEY: log_dir_entries(f, k, d, size); break;
	case BTRFS_EXTENT_DATA_KEY: chk_extent_rules(f, k, d, size); break;
	default: break;
	}
	return 0;
}

struct log_roots {
	struct cstate s; /* first: chk_scan_root hands it back */
	struct ub_root *v;
	uint64_t *subvol;
	size_t n, cap, subvol_cap;
};

static int log_root_item(struct cstate *s, const struct ub_key *k, const uint8_t *d, uint32_t size)
{
	struct log_roots *l = (struct log_roots *)s;

	/* the tree checker has rejected a root item too short to hold these */
	if (k->objectid != BTRFS_TREE_LOG_OBJECTID || k->type != BTRFS_ROOT_ITEM_KEY ||
	    size < offsetof(struct btrfs_root_item, generation_v2) || !UB_GET(btrfs_root_item, bytenr, d))
		return 0;
	if (chk_reserve(&l->v, &l->cap, l->n, sizeof(*l->v), 8) ||
	    chk_reserve(&l->subvol, &l->subvol_cap, l->n, sizeof(*l->subvol), 8))
		return -ENOMEM;
	l->v[l->n] = (struct ub_root){ .objectid = BTRFS_TREE_LOG_OBJECTID, .bytenr = UB_GET(btrfs_root_item, bytenr, d),
				       .generation = UB_GET(btrfs_root_item, generation, d),
				       .level = (uint8_t)UB_GET(btrfs_root_item, level, d) };
	l->subvol[l->n++] = k->offset;
	return 0;
}

int chk_log_items(struct fstate *f)
{
	struct ub_checker *c = f->s.c;
	struct ub_fs *fs = f->s.fs;
	const uint8_t *sb = ub_volume_super(ub_fs_volume(fs));
	struct log_roots l = { .s = { .c = c, .fs = fs, .scan_cls = UB_CHK_FS } };
	struct ub_key from = { 0, 0, 0 };
	struct ub_root rt, lr = { .objectid = BTRFS_TREE_LOG_OBJECTID, .bytenr = UB_GET(ub_disk_super, log_root, sb),
				  .generation = UB_GET(ub_disk_super, generation, sb) + 1,
				  .level = (uint8_t)UB_GET(ub_disk_super, log_root_level, sb) };
	int ret;

	/* the log belongs to the superblock's own root tree, not to an older one being checked */
	if (c->opts.no_log || !lr.bytenr || ub_fs_tree_root(fs, BTRFS_ROOT_TREE_OBJECTID, &rt) ||
	    rt.bytenr != UB_GET(ub_disk_super, root, sb))
		return 0;
	ret = chk_scan_root(&l.s, &lr, "the log root tree", &from, log_root_item);
	f->log = true;
	for (size_t i = 0; ret >= 0 && i < l.n; i++) {
		char name[64];

		snprintf(name, sizeof(name), "the fsync log of subvolume %llu", (unsigned long long)l.subvol[i]);
		f->tree = BTRFS_TREE_LOG_OBJECTID;
		f->log_subvol = l.subvol[i];
		ret = chk_scan_root(&f->s, &l.v[i], name, &from, log_item);
	}
	f->log = false;
	free(l.v);
	free(l.subvol);
	return ret < 0 ? ret : 0;
}
