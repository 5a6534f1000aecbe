/* SPDX-License-Identifier: MIT */
/*
 * The fsync log, replayed in memory. When the superblock points at a log
 * tree, the kernel crashed after an fsync: the log holds the fsynced inodes'
 * newest items. Replaying means applying them to the subvolume trees the way
 * the kernel's mount-time replay does; we apply them to in-memory copies of
 * the affected inodes' items (struct ub_itemset) and write nothing.
 *
 * Per log tree (one per subvolume), in the kernel's order:
 *  1. inodes: every logged inode item replaces the on-disk one; a logged
 *     directory loses the entries inside its logged index ranges that the log
 *     does not have; a logged file loses extents past its logged size; a
 *     logged inode loses xattrs the log does not have;
 *  2. everything else: extents replace what they overlap, xattrs, inode refs
 *     (names in parent directories, dropping stale ones), directory entries,
 *     and data checksums (kept aside for data verification);
 *  3. link counts and directory sizes recomputed for what changed.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include "log_replay.h"

#define FE(field, p) UB_GET(btrfs_file_extent_item, field, p)
#define DIR_HDR ((uint32_t)sizeof(struct btrfs_dir_item))
#define REF_HDR ((uint32_t)sizeof(struct btrfs_inode_ref))
#define EXTREF_HDR ((uint32_t)sizeof(struct btrfs_inode_extref))

struct csum_run {
	uint64_t start;  /* logical address of the first sector */
	uint32_t bytes;  /* csum bytes */
	uint8_t *csums;
};

struct ub_replay {
	struct ub_itemset **sets; /* sorted by (subvol, ino) */
	size_t n, cap;
	uint8_t *changed;         /* per set: 1 refs changed, 2 entries changed */
	struct csum_run *csums;
	size_t ncsums, csums_cap;
};

/* ---- the replayed sets ------------------------------------------------------ */

static size_t set_pos(const struct ub_replay *rp, uint64_t subvol, uint64_t ino)
{
	size_t lo = 0, hi = rp->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct ub_itemset *s = rp->sets[mid];
		if (s->subvol < subvol || (s->subvol == subvol && s->ino < ino))
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

const struct ub_itemset *ub_replay_lookup(const struct ub_fs *fs, uint64_t subvol, uint64_t ino)
{
	const struct ub_replay *rp = fs->replay;
	size_t i;

	if (!rp)
		return NULL;
	i = set_pos(rp, subvol, ino);
	return i < rp->n && rp->sets[i]->subvol == subvol && rp->sets[i]->ino == ino ? rp->sets[i] : NULL;
}

/* The replayed set of an inode, made from its on-disk items the first time. */
static int get_set(struct ub_fs *fs, struct ub_replay *rp, uint64_t subvol, uint64_t ino, struct ub_itemset **out,
		   uint8_t **changed)
{
	size_t i = set_pos(rp, subvol, ino);
	struct ub_itemset *s;
	struct ub_icur cur;
	int ret;

	if (i < rp->n && rp->sets[i]->subvol == subvol && rp->sets[i]->ino == ino)
		goto found;
	s = ub_itemset_new(subvol, ino);
	if (!s)
		return -ENOMEM;
	ret = ub_icur_open_disk(fs, subvol, ino, &cur);
	if (ret == 0)
		ret = ub_icur_seek(&cur, 0, 0);
	while (ret == 0) {
		struct ub_key k;
		uint32_t size;
		const uint8_t *d = ub_icur_data(&cur, &size);
		ub_icur_key(&cur, &k);
		ret = ub_itemset_put(s, &k, d, size);
		if (ret == 0)
			ret = ub_icur_next(&cur);
	}
	ub_icur_close(&cur);
	if (ret < 0) {
		ub_itemset_free(s);
		return ret;
	}
	if (rp->n == rp->cap) {
		size_t cap = rp->cap ? rp->cap * 2 : 32;
		struct ub_itemset **v = realloc(rp->sets, cap * sizeof(*v));
		uint8_t *c = realloc(rp->changed, cap);
		if (v)
			rp->sets = v;
		if (c)
			rp->changed = c;
		if (!v || !c) {
			ub_itemset_free(s);
			return -ENOMEM;
		}
		rp->cap = cap;
	}
	memmove(&rp->sets[i + 1], &rp->sets[i], (rp->n - i) * sizeof(rp->sets[0]));
	memmove(&rp->changed[i + 1], &rp->changed[i], rp->n - i);
	rp->sets[i] = s;
	rp->changed[i] = 0;
	rp->n++;
found:
	*out = rp->sets[i];
	if (changed)
		*changed = &rp->changed[i];
	return 0;
}

/* ---- directory entries and inode refs --------------------------------------- */

struct replay_ctx {
	struct ub_fs *fs;
	struct ub_replay *rp;
	uint64_t subvol;
	uint64_t transid;
};

static uint8_t ftype_of(const struct ub_itemset *t)
{
	struct ub_key k = { t->ino, BTRFS_INODE_ITEM_KEY, 0 };
	struct ub_item *it = ub_itemset_find(t, &k);
	uint32_t mode;

	if (!it || it->size < sizeof(struct btrfs_inode_item))
		return BTRFS_FT_UNKNOWN;
	mode = (uint32_t)UB_GET(btrfs_inode_item, mode, it->data);
	return ub_mode_ftype(mode);
}

/*
 * Remove `name` from a packed item of variable entries (dir items: 30-byte
 * header + name + data; inode refs: 10-byte header + name), deleting the
 * item when it becomes empty.
 */
static int remove_packed(struct ub_itemset *s, const struct ub_key *key, bool dir, const char *name, uint32_t len)
{
	struct ub_item *it = ub_itemset_find(s, key);
	uint8_t *out;
	uint32_t pos = 0, o = 0;
	int ret;

	if (!it)
		return 0;
	out = malloc(it->size ? it->size : 1);
	if (!out)
		return -ENOMEM;
	while (pos < it->size) {
		uint32_t hdr = dir ? DIR_HDR : REF_HDR, nlen, dlen = 0, n;
		if (it->size - pos < hdr)
			break;
		nlen = dir ? (uint32_t)UB_GET(btrfs_dir_item, name_len, it->data + pos)
			   : (uint32_t)UB_GET(btrfs_inode_ref, name_len, it->data + pos);
		if (dir)
			dlen = (uint32_t)UB_GET(btrfs_dir_item, data_len, it->data + pos);
		n = hdr + nlen + dlen;
		if (n > it->size - pos)
			break;
		if (!(nlen == len && !memcmp(it->data + pos + hdr, name, len))) {
			memcpy(out + o, it->data + pos, n);
			o += n;
		}
		pos += n;
	}
	if (o == 0)
		ub_itemset_del(s, ub_itemset_lower(s, key));
	else if (o != it->size) {
		ret = ub_itemset_put(s, key, out, o);
		if (ret) {
			free(out);
			return ret;
		}
	}
	free(out);
	return 0;
}

/* Append an entry to a packed item (creating it), unless the name is there already. */
static int append_packed(struct ub_itemset *s, const struct ub_key *key, const uint8_t *entry, uint32_t elen,
			 bool dir, const char *name, uint32_t len)
{
	struct ub_item *it;
	uint8_t *buf;
	int ret;

	ret = remove_packed(s, key, dir, name, len);
	if (ret)
		return ret;
	it = ub_itemset_find(s, key);
	buf = malloc((it ? it->size : 0) + elen);
	if (!buf)
		return -ENOMEM;
	if (it)
		memcpy(buf, it->data, it->size);
	memcpy(buf + (it ? it->size : 0), entry, elen);
	ret = ub_itemset_put(s, key, buf, (it ? it->size : 0) + elen);
	free(buf);
	return ret;
}

/*
 * Drop the name (parent, name) from the INODE_EXTREF items of `t`: extrefs
 * hold the names that did not fit the INODE_REF item of their parent, each
 * item packing (parent, index, name) entries of one name hash.
 */
static int remove_extref(struct ub_itemset *t, uint64_t parent, const char *name, uint32_t len)
{
	struct ub_key k = { t->ino, BTRFS_INODE_EXTREF_KEY, 0 };
	size_t i = ub_itemset_lower(t, &k);

	while (i < t->n && t->items[i].key.objectid == t->ino && t->items[i].key.type == BTRFS_INODE_EXTREF_KEY) {
		const struct ub_item *it = &t->items[i];
		uint32_t pos = 0, o = 0;
		uint8_t *out = malloc(it->size ? it->size : 1);
		int ret = 0;

		if (!out)
			return -ENOMEM;
		while (it->size - pos >= EXTREF_HDR) {
			uint32_t n = (uint32_t)UB_GET(btrfs_inode_extref, name_len, it->data + pos);
			if (EXTREF_HDR + n > it->size - pos)
				break;
			if (!(UB_GET(btrfs_inode_extref, parent_objectid, it->data + pos) == parent && n == len &&
			      !memcmp(it->data + pos + EXTREF_HDR, name, len))) {
				memcpy(out + o, it->data + pos, EXTREF_HDR + n);
				o += EXTREF_HDR + n;
			}
			pos += EXTREF_HDR + n;
		}
		if (o == 0) {
			ub_itemset_del(t, i);
		} else {
			if (o != it->size)
				ret = ub_itemset_put(t, &t->items[i].key, out, o);
			i++;
		}
		free(out);
		if (ret)
			return ret;
	}
	return 0;
}

/* Look `name` up in directory set `d`: its index and target inode, via the DIR_ITEM hash item. */
static bool find_entry(const struct ub_itemset *d, const char *name, uint32_t len, uint64_t *target,
		       uint8_t *loc_type)
{
	struct ub_key k = { d->ino, BTRFS_DIR_ITEM_KEY, ub_name_hash(name, len) };
	struct ub_item *it = ub_itemset_find(d, &k);
	uint32_t pos = 0;

	if (!it)
		return false;
	while (it->size - pos >= DIR_HDR) {
		uint32_t nlen = (uint32_t)UB_GET(btrfs_dir_item, name_len, it->data + pos);
		uint32_t dlen = (uint32_t)UB_GET(btrfs_dir_item, data_len, it->data + pos);
		struct ub_key loc;
		if (DIR_HDR + nlen + dlen > it->size - pos)
			break;
		if (nlen == len && !memcmp(it->data + pos + DIR_HDR, name, len)) {
			ub_key_read(&loc, it->data + pos);
			*target = loc.objectid;
			*loc_type = loc.type;
			return true;
		}
		pos += DIR_HDR + nlen + dlen;
	}
	return false;
}

static void mark(struct replay_ctx *rc, const struct ub_itemset *s, uint8_t bit)
{
	size_t i = set_pos(rc->rp, s->subvol, s->ino);
	if (i < rc->rp->n && rc->rp->sets[i] == s)
		rc->rp->changed[i] |= bit;
}

/* Remove name from directory `d` (both its index and hash items) and from its target's refs. */
static int unlink_entry(struct replay_ctx *rc, struct ub_itemset *d, const char *name, uint32_t len)
{
	struct ub_key k = { d->ino, BTRFS_DIR_INDEX_KEY, 0 };
	struct ub_itemset *t;
	uint64_t target = 0;
	uint8_t loc_type = 0;
	int ret;

	if (!find_entry(d, name, len, &target, &loc_type))
		return 0;
	/* the index item with this name */
	for (size_t i = ub_itemset_lower(d, &k); i < d->n && d->items[i].key.type == BTRFS_DIR_INDEX_KEY; i++) {
		const struct ub_item *it = &d->items[i];
		if (it->size >= DIR_HDR && UB_GET(btrfs_dir_item, name_len, it->data) == len &&
		    DIR_HDR + len <= it->size && !memcmp(it->data + DIR_HDR, name, len)) {
			ub_itemset_del(d, i);
			break;
		}
	}
	k.type = BTRFS_DIR_ITEM_KEY;
	k.offset = ub_name_hash(name, len);
	ret = remove_packed(d, &k, true, name, len);
	if (ret)
		return ret;
	mark(rc, d, 2);
	if (loc_type != BTRFS_INODE_ITEM_KEY)
		return 0; /* a subvolume: no inode ref to drop */
	ret = get_set(rc->fs, rc->rp, rc->subvol, target, &t, NULL);
	if (ret)
		return ret;
	k = (struct ub_key){ target, BTRFS_INODE_REF_KEY, d->ino };
	ret = remove_packed(t, &k, false, name, len);
	if (!ret)
		ret = remove_extref(t, d->ino, name, len);
	mark(rc, t, 1);
	return ret;
}

/* Add name -> target to directory `d` at `index`, with the target's inode ref. */
static int add_entry(struct replay_ctx *rc, struct ub_itemset *d, const char *name, uint32_t len, uint64_t index,
		     struct ub_itemset *t, uint8_t ftype)
{
	uint8_t entry[DIR_HDR + UB_NAME_LEN], ref[REF_HDR + UB_NAME_LEN];
	struct ub_key loc = { t->ino, BTRFS_INODE_ITEM_KEY, 0 }, k;
	int ret;

	if (len > UB_NAME_LEN)
		return -EUCLEAN;
	memset(entry, 0, DIR_HDR);
	ub_key_write(entry, &loc);
	UB_SET(btrfs_dir_item, transid, entry, rc->transid);
	UB_SET(btrfs_dir_item, name_len, entry, len);
	UB_SET(btrfs_dir_item, type, entry, ftype);
	memcpy(entry + DIR_HDR, name, len);
	k = (struct ub_key){ d->ino, BTRFS_DIR_INDEX_KEY, index };
	ret = ub_itemset_put(d, &k, entry, DIR_HDR + len);
	if (ret)
		return ret;
	k = (struct ub_key){ d->ino, BTRFS_DIR_ITEM_KEY, ub_name_hash(name, len) };
	ret = append_packed(d, &k, entry, DIR_HDR + len, true, name, len);
	if (ret)
		return ret;
	UB_SET(btrfs_inode_ref, index, ref, index);
	UB_SET(btrfs_inode_ref, name_len, ref, len);
	memcpy(ref + REF_HDR, name, len);
	/* in memory every name lives in the INODE_REF item, however long it grows: none may stay in an extref too */
	ret = remove_extref(t, d->ino, name, len);
	if (ret)
		return ret;
	k = (struct ub_key){ t->ino, BTRFS_INODE_REF_KEY, d->ino };
	ret = append_packed(t, &k, ref, REF_HDR + len, false, name, len);
	mark(rc, d, 2);
	mark(rc, t, 1);
	return ret;
}

/* Make `name` in `d` lead to `t` (replacing an entry of that name leading elsewhere). */
static int link_name(struct replay_ctx *rc, struct ub_itemset *d, const char *name, uint32_t len, uint64_t index,
		     struct ub_itemset *t, uint8_t ftype)
{
	uint64_t target;
	uint8_t loc_type;
	int ret;

	if (find_entry(d, name, len, &target, &loc_type)) {
		if (target == t->ino && loc_type == BTRFS_INODE_ITEM_KEY)
			return 0;
		ret = unlink_entry(rc, d, name, len);
		if (ret)
			return ret;
	}
	return add_entry(rc, d, name, len, index, t, ftype);
}

/* ---- applying log items ----------------------------------------------------- */

/*
 * How many file bytes an extent item claims: num_bytes, or for an inline
 * extent its ram_bytes rounded up to a sector. 0 for an item too short to
 * say; UINT64_MAX when the rounding would wrap (a corrupt ram_bytes).
 */
static uint64_t extent_claim(const struct ub_item *it, uint32_t ss)
{
	uint64_t ram, r;

	if (it->size < UB_FILE_EXTENT_INLINE_DATA_START)
		return 0;
	if (FE(type, it->data) != BTRFS_FILE_EXTENT_INLINE)
		return it->size >= sizeof(struct btrfs_file_extent_item) ? FE(num_bytes, it->data) : 0;
	ram = FE(ram_bytes, it->data);
	if (__builtin_add_overflow(ram, ss - 1, &r))
		return UINT64_MAX;
	return r / ss * ss;
}

/* a + b, or UINT64_MAX where that would wrap */
static uint64_t sat_add(uint64_t a, uint64_t b)
{
	uint64_t r;

	return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}

/*
 * Drop (or trim) extents of `s` within [start, end). *found gets the bytes
 * that leave the inode's nbytes, counted as the kernel's btrfs_drop_extents
 * counts them: the part of each extent with data (disk_bytenr set, so not a
 * hole) inside the range, and an inline extent's ram_bytes.
 */
static int drop_extents(struct ub_itemset *s, uint64_t start, uint64_t end, uint32_t sectorsize, uint64_t *found)
{
	struct ub_key k = { s->ino, BTRFS_EXTENT_DATA_KEY, 0 };
	size_t i = ub_itemset_lower(s, &k);

	*found = 0;
	while (i < s->n && s->items[i].key.type == BTRFS_EXTENT_DATA_KEY) {
		struct ub_item *it = &s->items[i];
		uint64_t es = it->key.offset, ee, len;
		uint8_t buf[sizeof(struct btrfs_file_extent_item)];
		bool is_inline = it->size >= UB_FILE_EXTENT_INLINE_DATA_START &&
				 FE(type, it->data) == BTRFS_FILE_EXTENT_INLINE;
		int ret;

		/* a corrupt claim is cut at the end of the key space here; reading names it */
		len = is_inline || it->size >= sizeof(buf) ? extent_claim(it, sectorsize) : 0;
		ee = sat_add(es, len);
		if (ee <= start || es >= end || len == 0) {
			i++;
			continue;
		}
		/* nbytes is the kernel's running count, not checked here: wrapping is what it would do too */
		if (is_inline)
			*found += FE(ram_bytes, it->data);
		else if (FE(disk_bytenr, it->data))
			*found += (ee < end ? ee : end) - (es > start ? es : start);
		if (is_inline || (es >= start && ee <= end)) {
			ub_itemset_del(s, i);
			continue;
		}
		memcpy(buf, it->data, sizeof(buf));
		if (ee > end) {
			/* the tail beyond `end` survives as its own item */
			struct ub_key tk = { s->ino, BTRFS_EXTENT_DATA_KEY, end };
			uint8_t tail[sizeof(buf)];
			memcpy(tail, buf, sizeof(buf));
			if (FE(disk_bytenr, tail))
				UB_SET(btrfs_file_extent_item, offset, tail, sat_add(FE(offset, tail), end - es));
			UB_SET(btrfs_file_extent_item, num_bytes, tail, ee - end);
			ret = ub_itemset_put(s, &tk, tail, sizeof(tail));
			if (ret)
				return ret;
		}
		i = ub_itemset_lower(s, &(struct ub_key){ s->ino, BTRFS_EXTENT_DATA_KEY, es });
		if (es < start) {
			UB_SET(btrfs_file_extent_item, num_bytes, buf, start - es);
			ret = ub_itemset_put(s, &s->items[i].key, buf, sizeof(buf));
			if (ret)
				return ret;
			i++;
		} else {
			ub_itemset_del(s, i);
		}
	}
	return 0;
}

/*
 * One logged file extent item over [li's offset, end) of set `s`, with the
 * inode's nbytes kept as the kernel's replay_one_extent keeps it: an extent
 * the inode has already, byte for byte, changes nothing; otherwise what the
 * item covers is dropped (less nbytes) and the item added (more nbytes: its
 * num_bytes if it has data, an inline extent's ram_bytes, a hole nothing).
 */
static int replay_extent(struct replay_ctx *rc, struct ub_itemset *s, const struct ub_item *li, uint64_t end)
{
	const size_t fesz = sizeof(struct btrfs_file_extent_item);
	struct ub_key ik = { s->ino, BTRFS_INODE_ITEM_KEY, 0 };
	const struct ub_item *same = ub_itemset_find(s, &li->key);
	struct ub_item *ii;
	uint8_t type = (uint8_t)FE(type, li->data);
	uint64_t found, added = 0;
	int ret;

	if (same && type != BTRFS_FILE_EXTENT_INLINE && same->size >= fesz && !memcmp(same->data, li->data, fesz))
		return 0;
	ret = drop_extents(s, li->key.offset, end, rc->fs->vol->sectorsize, &found);
	if (ret)
		return ret;
	if (type == BTRFS_FILE_EXTENT_INLINE)
		added = FE(ram_bytes, li->data);
	else if (FE(disk_bytenr, li->data))
		added = FE(num_bytes, li->data);
	/* the log names holes; with no-holes the kernel's replay only punches them */
	if (!((rc->fs->incompat & BTRFS_FEATURE_INCOMPAT_NO_HOLES) && type == BTRFS_FILE_EXTENT_REG &&
	      !FE(disk_bytenr, li->data))) {
		ret = ub_itemset_put(s, &li->key, li->data, li->size);
		if (ret)
			return ret;
	}
	ii = ub_itemset_find(s, &ik);
	if (ii && ii->size >= sizeof(struct btrfs_inode_item))
		UB_SET(btrfs_inode_item, nbytes, ii->data, UB_GET(btrfs_inode_item, nbytes, ii->data) + added - found);
	return 0;
}

static int replay_inode(struct replay_ctx *rc, const struct ub_itemset *log)
{
	struct ub_key k = { log->ino, BTRFS_INODE_ITEM_KEY, 0 };
	const struct ub_item *li = ub_itemset_find(log, &k);
	struct ub_item *existing;
	struct ub_itemset *s;
	uint8_t *changed;
	uint32_t mode;
	int ret;

	if (!li || li->size < sizeof(struct btrfs_inode_item))
		return 0;
	ret = get_set(rc->fs, rc->rp, rc->subvol, log->ino, &s, NULL);
	if (ret)
		return ret;
	mode = (uint32_t)UB_GET(btrfs_inode_item, mode, li->data);
	if (S_ISDIR(mode)) {
		/* entries inside the logged index ranges that the log lacks were deleted */
		struct ub_key lk = { log->ino, BTRFS_DIR_LOG_INDEX_KEY, 0 };
		for (size_t r = ub_itemset_lower(log, &lk); r < log->n && log->items[r].key.type == BTRFS_DIR_LOG_INDEX_KEY;
		     r++) {
			uint64_t lo = log->items[r].key.offset, hi;
			struct ub_key ik = { log->ino, BTRFS_DIR_INDEX_KEY, lo };
			if (log->items[r].size < sizeof(struct btrfs_dir_log_item))
				continue;
			hi = UB_GET(btrfs_dir_log_item, end, log->items[r].data);
			for (size_t i = ub_itemset_lower(s, &ik);
			     i < s->n && s->items[i].key.type == BTRFS_DIR_INDEX_KEY && s->items[i].key.offset <= hi;) {
				struct ub_item *it = &s->items[i];
				char name[UB_NAME_LEN];
				uint32_t nlen;
				if (ub_itemset_find(log, &it->key) || it->size < DIR_HDR) {
					i++;
					continue;
				}
				nlen = (uint32_t)UB_GET(btrfs_dir_item, name_len, it->data);
				if (nlen > UB_NAME_LEN || DIR_HDR + nlen > it->size) {
					i++;
					continue;
				}
				memcpy(name, it->data + DIR_HDR, nlen);
				ret = unlink_entry(rc, s, name, nlen);
				if (ret)
					return ret;
				/* unlink_entry removed s->items[i]; look again from the same index */
				i = ub_itemset_lower(s, &ik);
				while (i < s->n && s->items[i].key.type == BTRFS_DIR_INDEX_KEY &&
				       s->items[i].key.offset <= hi && ub_itemset_find(log, &s->items[i].key))
					i++;
			}
		}
	}
	existing = ub_itemset_find(s, &k);
	if (UB_GET(btrfs_inode_item, generation, li->data) == 0 && existing &&
	    existing->size >= sizeof(struct btrfs_inode_item)) {
		/*
		 * Generation 0: logged only to say the inode exists. The committed
		 * item stays; a regular file takes just a non-zero logged size.
		 */
		uint64_t lsize = UB_GET(btrfs_inode_item, size, li->data);
		if (S_ISREG(mode) && S_ISREG(UB_GET(btrfs_inode_item, mode, existing->data)) && lsize)
			UB_SET(btrfs_inode_item, size, existing->data, lsize);
	} else {
		/*
		 * The log's nbytes is not kept up to date by the kernel (0, or stale
		 * bytes): its replay keeps the committed inode's nbytes, or starts a
		 * new inode at 0, and then counts every extent it drops or adds. A
		 * directory keeps its committed size the same way (overwrite_item's
		 * saved i_size): the entries the replay adds and drops change it,
		 * never the logged size, which may count entries that left the
		 * directory after it was logged.
		 */
		bool had = existing && existing->size >= sizeof(struct btrfs_inode_item);
		uint64_t nbytes = had ? UB_GET(btrfs_inode_item, nbytes, existing->data) : 0;
		bool keep_size = had && S_ISDIR(mode) && S_ISDIR(UB_GET(btrfs_inode_item, mode, existing->data));
		uint64_t dsize = keep_size ? UB_GET(btrfs_inode_item, size, existing->data) : 0;

		ret = ub_itemset_put(s, &k, li->data, li->size);
		if (ret)
			return ret;
		UB_SET(btrfs_inode_item, nbytes, ub_itemset_find(s, &k)->data, nbytes);
		if (keep_size) {
			UB_SET(btrfs_inode_item, size, ub_itemset_find(s, &k)->data, dsize);
		} else if (S_ISDIR(mode)) {
			/*
			 * a new directory starts empty (size 0) and gets the size of the
			 * entries the replay gives it (the pointer is taken here: getting
			 * another inode's set may move the flags)
			 */
			UB_SET(btrfs_inode_item, size, ub_itemset_find(s, &k)->data, 0);
			ret = get_set(rc->fs, rc->rp, rc->subvol, log->ino, &s, &changed);
			if (ret)
				return ret;
			*changed |= 2;
		}
	}
	existing = ub_itemset_find(s, &k);
	if (S_ISREG(mode) && existing) {
		uint64_t size = UB_GET(btrfs_inode_item, size, existing->data), ss = rc->fs->vol->sectorsize, found;
		ret = drop_extents(s, sat_add(size, ss - 1) / ss * ss, UINT64_MAX, rc->fs->vol->sectorsize, &found);
		if (ret)
			return ret;
		existing = ub_itemset_find(s, &k);
		UB_SET(btrfs_inode_item, nbytes, existing->data, UB_GET(btrfs_inode_item, nbytes, existing->data) - found);
	}
	/* xattrs the log does not carry were removed */
	k = (struct ub_key){ log->ino, BTRFS_XATTR_ITEM_KEY, 0 };
	for (size_t i = ub_itemset_lower(s, &k); i < s->n && s->items[i].key.type == BTRFS_XATTR_ITEM_KEY;) {
		if (!ub_itemset_find(log, &s->items[i].key))
			ub_itemset_del(s, i);
		else
			i++;
	}
	return 0;
}

static int replay_ref(struct replay_ctx *rc, struct ub_itemset *t, const struct ub_item *li)
{
	struct ub_itemset *d;
	struct ub_item *old;
	uint8_t ftype = ftype_of(t);
	uint32_t pos;
	int ret = get_set(rc->fs, rc->rp, rc->subvol, li->key.offset, &d, NULL);

	if (ret)
		return ret;
	/* names of this inode in this directory that the log no longer has */
	old = ub_itemset_find(t, &li->key);
	while (old) {
		bool gone = false;
		char name[UB_NAME_LEN];
		uint32_t nlen = 0;
		for (pos = 0; old->size - pos >= REF_HDR;) {
			uint32_t n = (uint32_t)UB_GET(btrfs_inode_ref, name_len, old->data + pos), lp;
			bool found = false;
			if (REF_HDR + n > old->size - pos || n > UB_NAME_LEN)
				break;
			for (lp = 0; li->size - lp >= REF_HDR;) {
				uint32_t m = (uint32_t)UB_GET(btrfs_inode_ref, name_len, li->data + lp);
				if (REF_HDR + m > li->size - lp)
					break;
				found |= m == n && !memcmp(li->data + lp + REF_HDR, old->data + pos + REF_HDR, n);
				lp += REF_HDR + m;
			}
			if (!found) {
				memcpy(name, old->data + pos + REF_HDR, n);
				nlen = n;
				gone = true;
				break;
			}
			pos += REF_HDR + n;
		}
		if (!gone)
			break;
		ret = unlink_entry(rc, d, name, nlen);
		if (ret)
			return ret;
		if (ub_itemset_find(t, &li->key) == old) {
			/* the entry was not in the directory: drop the stale ref directly */
			ret = remove_packed(t, &li->key, false, name, nlen);
			if (ret)
				return ret;
		}
		old = ub_itemset_find(t, &li->key);
	}
	for (pos = 0; li->size - pos >= REF_HDR;) {
		uint32_t n = (uint32_t)UB_GET(btrfs_inode_ref, name_len, li->data + pos);
		uint64_t index = UB_GET(btrfs_inode_ref, index, li->data + pos);
		if (REF_HDR + n > li->size - pos)
			break;
		ret = link_name(rc, d, (const char *)li->data + pos + REF_HDR, n, index, t, ftype);
		if (ret)
			return ret;
		pos += REF_HDR + n;
	}
	mark(rc, t, 1);
	return 0;
}

/* Whether packed extref data holds (parent, name). */
static bool extref_has(const uint8_t *data, uint32_t size, uint64_t parent, const uint8_t *name, uint32_t len)
{
	for (uint32_t pos = 0; size - pos >= EXTREF_HDR;) {
		uint32_t n = (uint32_t)UB_GET(btrfs_inode_extref, name_len, data + pos);
		if (EXTREF_HDR + n > size - pos)
			break;
		if (UB_GET(btrfs_inode_extref, parent_objectid, data + pos) == parent && n == len &&
		    !memcmp(data + pos + EXTREF_HDR, name, len))
			return true;
		pos += EXTREF_HDR + n;
	}
	return false;
}

/*
 * An INODE_EXTREF item of the log: like an INODE_REF item, but each of its
 * entries names its own parent. Names of the committed item with this key
 * that the log lacks were unlinked; each entry of the log's is one link.
 */
static int replay_extref(struct replay_ctx *rc, struct ub_itemset *t, const struct ub_item *li)
{
	uint8_t ftype = ftype_of(t);
	uint32_t pos;
	int ret;

	for (;;) {
		const struct ub_item *old = ub_itemset_find(t, &li->key);
		struct ub_itemset *d;
		char name[UB_NAME_LEN];
		uint64_t parent = 0;
		uint32_t nlen = 0;
		bool gone = false;

		for (pos = 0; old && old->size - pos >= EXTREF_HDR;) {
			uint32_t n = (uint32_t)UB_GET(btrfs_inode_extref, name_len, old->data + pos);
			if (EXTREF_HDR + n > old->size - pos || n > UB_NAME_LEN)
				break;
			parent = UB_GET(btrfs_inode_extref, parent_objectid, old->data + pos);
			if (!extref_has(li->data, li->size, parent, old->data + pos + EXTREF_HDR, n)) {
				memcpy(name, old->data + pos + EXTREF_HDR, n);
				nlen = n;
				gone = true;
				break;
			}
			pos += EXTREF_HDR + n;
		}
		if (!gone)
			break;
		ret = get_set(rc->fs, rc->rp, rc->subvol, parent, &d, NULL);
		if (ret)
			return ret;
		{
			uint64_t target;
			uint8_t loc_type;
			/* only this inode's entry goes; the name may lead elsewhere by now */
			if (find_entry(d, name, nlen, &target, &loc_type) && target == t->ino &&
			    loc_type == BTRFS_INODE_ITEM_KEY)
				ret = unlink_entry(rc, d, name, nlen);
		}
		/* the entry was not in the directory (or led elsewhere): drop the stale name directly */
		if (!ret)
			ret = remove_extref(t, parent, name, nlen);
		if (ret)
			return ret;
	}
	for (pos = 0; li->size - pos >= EXTREF_HDR;) {
		uint32_t n = (uint32_t)UB_GET(btrfs_inode_extref, name_len, li->data + pos);
		uint64_t parent = UB_GET(btrfs_inode_extref, parent_objectid, li->data + pos);
		uint64_t index = UB_GET(btrfs_inode_extref, index, li->data + pos);
		struct ub_itemset *d;

		if (EXTREF_HDR + n > li->size - pos)
			break;
		ret = get_set(rc->fs, rc->rp, rc->subvol, parent, &d, NULL);
		if (!ret)
			ret = link_name(rc, d, (const char *)li->data + pos + EXTREF_HDR, n, index, t, ftype);
		if (ret)
			return ret;
		pos += EXTREF_HDR + n;
	}
	mark(rc, t, 1);
	return 0;
}

static int replay_dir_index(struct replay_ctx *rc, struct ub_itemset *d, const struct ub_item *li)
{
	struct ub_itemset *t;
	struct ub_key loc;
	uint32_t nlen;
	int ret;

	if (li->size < DIR_HDR)
		return 0;
	ub_key_read(&loc, li->data);
	nlen = (uint32_t)UB_GET(btrfs_dir_item, name_len, li->data);
	if (loc.type != BTRFS_INODE_ITEM_KEY || DIR_HDR + nlen > li->size)
		return 0;
	ret = get_set(rc->fs, rc->rp, rc->subvol, loc.objectid, &t, NULL);
	if (ret)
		return ret;
	return link_name(rc, d, (const char *)li->data + DIR_HDR, nlen, li->key.offset, t,
			 (uint8_t)UB_GET(btrfs_dir_item, type, li->data));
}

/* A log item that contradicts the format: named, and the replay gives up (the kernel's would refuse the leaf). */
static int log_corrupt(struct replay_ctx *rc, const struct ub_item *li, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int log_corrupt(struct replay_ctx *rc, const struct ub_item *li, const char *fmt, ...)
{
	char why[200];
	va_list ap;
	const char *tn = ub_key_type_name(li->key.type);
	char tbuf[8];

	if (!tn) {
		snprintf(tbuf, sizeof(tbuf), "%u", (unsigned)li->key.type);
		tn = tbuf;
	}
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	ub_err(&rc->fs->log, "fsync log of subvol %llu: item (%llu %s %llu): %s", (unsigned long long)rc->subvol,
	       (unsigned long long)li->key.objectid, tn, (unsigned long long)li->key.offset, why);
	return -EUCLEAN;
}

static int add_csums(struct replay_ctx *rc, const struct ub_item *li)
{
	struct ub_replay *rp = rc->rp;
	const uint32_t ss = rc->fs->vol->sectorsize, cs = rc->fs->vol->csum_size;
	struct csum_run *r;
	uint64_t span, end;

	/* each checksum covers one sector from key.offset on: the run must end inside the address space */
	span = (uint64_t)(li->size / cs) * ss;
	if (li->key.offset % ss || li->size % cs || __builtin_add_overflow(li->key.offset, span, &end))
		return log_corrupt(rc, li, "%u bytes of %u-byte checksums from logical %llu: not whole checksums, "
				   "not sector-aligned, or past the end of the address space",
				   (unsigned)li->size, (unsigned)cs, (unsigned long long)li->key.offset);

	if (rp->ncsums == rp->csums_cap) {
		size_t cap = rp->csums_cap ? rp->csums_cap * 2 : 16;
		struct csum_run *v = realloc(rp->csums, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		rp->csums = v;
		rp->csums_cap = cap;
	}
	r = &rp->csums[rp->ncsums];
	r->csums = malloc(li->size ? li->size : 1);
	if (!r->csums)
		return -ENOMEM;
	memcpy(r->csums, li->data, li->size);
	r->start = li->key.offset;
	r->bytes = li->size;
	rp->ncsums++;
	return 0;
}

static int replay_items(struct replay_ctx *rc, const struct ub_itemset *log)
{
	struct ub_itemset *s = NULL;
	int ret = 0;

	for (size_t i = 0; i < log->n && !ret; i++) {
		const struct ub_item *li = &log->items[i];

		if (log->ino == BTRFS_EXTENT_CSUM_OBJECTID) {
			if (li->key.type == BTRFS_EXTENT_CSUM_KEY)
				ret = add_csums(rc, li);
			continue;
		}
		switch (li->key.type) {
		case BTRFS_EXTENT_DATA_KEY: {
			const uint32_t ss = rc->fs->vol->sectorsize;
			uint64_t len, end;
			if (li->size < UB_FILE_EXTENT_INLINE_DATA_START)
				break;
			if (FE(type, li->data) == BTRFS_FILE_EXTENT_INLINE) {
				/* inline data never exceeds a sector (max_inline is capped by it) */
				if (FE(ram_bytes, li->data) > ss) {
					ret = log_corrupt(rc, li, "inline extent claims ram_bytes %llu, above the %u-byte sector",
							  (unsigned long long)FE(ram_bytes, li->data), (unsigned)ss);
					break;
				}
			} else if (li->size < sizeof(struct btrfs_file_extent_item)) {
				break;
			}
			len = extent_claim(li, ss);
			if (__builtin_add_overflow(li->key.offset, len, &end)) {
				ret = log_corrupt(rc, li, "num_bytes %llu runs past the largest file offset",
						  (unsigned long long)len);
				break;
			}
			ret = get_set(rc->fs, rc->rp, rc->subvol, log->ino, &s, NULL);
			if (!ret)
				ret = replay_extent(rc, s, li, end);
			break;
		}
		case BTRFS_XATTR_ITEM_KEY:
			ret = get_set(rc->fs, rc->rp, rc->subvol, log->ino, &s, NULL);
			if (!ret)
				ret = ub_itemset_put(s, &li->key, li->data, li->size);
			break;
		case BTRFS_INODE_REF_KEY:
			ret = get_set(rc->fs, rc->rp, rc->subvol, log->ino, &s, NULL);
			/*
			 * A subvolume's top directory refers to itself ("..", index 0): that marks the
			 * root, it is no link, and the kernel's replay adds no entry for it.
			 */
			if (!ret && li->key.offset == log->ino)
				ret = ub_itemset_put(s, &li->key, li->data, li->size);
			else if (!ret)
				ret = replay_ref(rc, s, li);
			break;
		case BTRFS_INODE_EXTREF_KEY:
			ret = get_set(rc->fs, rc->rp, rc->subvol, log->ino, &s, NULL);
			if (!ret)
				ret = replay_extref(rc, s, li);
			break;
		case BTRFS_DIR_INDEX_KEY:
			ret = get_set(rc->fs, rc->rp, rc->subvol, log->ino, &s, NULL);
			if (!ret)
				ret = replay_dir_index(rc, s, li);
			break;
		default:
			/* inode items and dir log ranges were applied in the first pass; the rest carries nothing to read */
			break;
		}
	}
	return ret;
}

/* How many names (INODE_REF and INODE_EXTREF entries) an inode's set holds. */
static uint64_t count_names(const struct ub_itemset *s)
{
	uint64_t names = 0;

	for (size_t j = 0; j < s->n; j++) {
		const struct ub_item *it = &s->items[j];
		uint32_t hdr;

		if (it->key.type == BTRFS_INODE_REF_KEY)
			hdr = REF_HDR;
		else if (it->key.type == BTRFS_INODE_EXTREF_KEY)
			hdr = EXTREF_HDR; /* one item, as many links as it packs entries */
		else
			continue;
		for (uint32_t pos = 0; it->size - pos >= hdr;) {
			uint32_t n = hdr == REF_HDR ? (uint32_t)UB_GET(btrfs_inode_ref, name_len, it->data + pos)
						    : (uint32_t)UB_GET(btrfs_inode_extref, name_len, it->data + pos);
			if (hdr + n > it->size - pos)
				break;
			names++;
			pos += hdr + n;
		}
	}
	return names;
}

static bool is_dir_set(const struct ub_itemset *s)
{
	struct ub_key k = { s->ino, BTRFS_INODE_ITEM_KEY, 0 };
	const struct ub_item *ii = ub_itemset_find(s, &k);

	return ii && ii->size >= sizeof(struct btrfs_inode_item) && S_ISDIR(UB_GET(btrfs_inode_item, mode, ii->data));
}

/*
 * A directory the replay left with no name is deleted by the kernel's
 * (fixup_inode_link_count: replay_dir_deletes of all its entries, then an
 * orphan item): its entries are unlinked here too, and an inode that loses
 * its last name so is counted as such below; a directory among them may
 * lose its own entries in turn, hence the rounds.
 */
static int drop_nameless_dirs(struct ub_fs *fs, struct ub_replay *rp)
{
	bool again = true;
	int ret = 0;

	while (again && !ret) {
		again = false;
		for (size_t i = 0; i < rp->n && !ret; i++) {
			struct ub_itemset *s = rp->sets[i];
			struct replay_ctx rc = { fs, rp, s->subvol, fs->vol->generation + 1 };

			if (!(rp->changed[i] & 1) || !is_dir_set(s) || count_names(s))
				continue;
			for (size_t j = 0; j < s->n && !ret;) {
				const struct ub_item *it = &s->items[j];
				char name[UB_NAME_LEN];
				uint32_t len;
				size_t before = s->n;

				if ((it->key.type != BTRFS_DIR_INDEX_KEY && it->key.type != BTRFS_DIR_ITEM_KEY) ||
				    it->size < DIR_HDR) {
					j++;
					continue;
				}
				len = (uint32_t)UB_GET(btrfs_dir_item, name_len, it->data);
				if (len > UB_NAME_LEN || DIR_HDR + len > it->size) {
					ub_itemset_del(s, j);
					continue;
				}
				/* the name is copied: unlinking frees the item it is in */
				memcpy(name, it->data + DIR_HDR, len);
				ret = unlink_entry(&rc, s, name, len);
				/* an index item whose name no DIR_ITEM has: gone without a target to tell */
				if (!ret && s->n == before)
					ub_itemset_del(s, j);
				again = true;
				/* unlinking may add sets: rp->sets moves, s does not */
			}
		}
	}
	return ret;
}

/* Link counts from names, directory sizes from entries, for every set the replay changed. */
static int fixup_counts(struct ub_fs *fs, struct ub_replay *rp)
{
	int ret = drop_nameless_dirs(fs, rp);

	for (size_t i = 0; i < rp->n && !ret; i++) {
		struct ub_itemset *s = rp->sets[i];
		struct ub_key k = { s->ino, BTRFS_INODE_ITEM_KEY, 0 };
		struct ub_item *ii = ub_itemset_find(s, &k);
		uint64_t dsize = 0;

		if (!rp->changed[i] || !ii || ii->size < sizeof(struct btrfs_inode_item))
			continue;
		for (size_t j = 0; j < s->n; j++) {
			const struct ub_item *it = &s->items[j];

			if (it->key.type == BTRFS_DIR_INDEX_KEY && it->size >= DIR_HDR)
				dsize += 2 * UB_GET(btrfs_dir_item, name_len, it->data);
		}
		if (S_ISDIR(UB_GET(btrfs_inode_item, mode, ii->data)) && (rp->changed[i] & 2))
			UB_SET(btrfs_inode_item, size, ii->data, dsize);
		/* directories too, as the kernel's fixup_inode_link_count: one left with no name has no link */
		if (rp->changed[i] & 1)
			UB_SET(btrfs_inode_item, nlink, ii->data, count_names(s));
	}
	return ret;
}

/* Every item of one log tree, grouped into one set per objectid. */
static int load_log_tree(struct ub_fs *fs, const struct ub_root *root, struct ub_itemset ***out, size_t *nout)
{
	struct ub_key key = { 0, 0, 0 };
	struct ub_itemset **v = NULL;
	struct ub_path p;
	size_t n = 0;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_search(&fs->tc, root, &key, &p);
	ret = ret == 2 ? (ub_eb_nritems(p.nodes[0]) ? 0 : 1) : (ret < 0 ? ret : 0);
	while (ret == 0) {
		uint32_t size;
		const uint8_t *d = ub_path_data(&p, &size);
		ub_path_key(&p, &key);
		if (!n || v[n - 1]->ino != key.objectid) {
			struct ub_itemset **nv = realloc(v, (n + 1) * sizeof(*v));
			if (!nv) {
				ret = -ENOMEM;
				break;
			}
			v = nv;
			v[n] = ub_itemset_new(root->objectid, key.objectid);
			if (!v[n]) {
				ret = -ENOMEM;
				break;
			}
			n++;
		}
		ret = ub_itemset_put(v[n - 1], &key, d, size);
		if (ret == 0)
			ret = ub_tree_next(&p);
	}
	ub_path_release(&p);
	*out = v;
	*nout = n;
	return ret < 0 ? ret : 0;
}

static int replay_log_tree(struct ub_fs *fs, struct ub_replay *rp, uint64_t subvol, const struct ub_root *root)
{
	struct replay_ctx rc = { fs, rp, subvol, fs->vol->generation + 1 };
	struct ub_itemset **logs = NULL;
	size_t n = 0;
	int ret = load_log_tree(fs, root, &logs, &n);

	for (size_t i = 0; i < n && !ret; i++)
		ret = replay_inode(&rc, logs[i]);
	for (size_t i = 0; i < n && !ret; i++)
		ret = replay_items(&rc, logs[i]);
	for (size_t i = 0; i < n; i++)
		ub_itemset_free(logs[i]);
	free(logs);
	return ret;
}

void ub_replay_free(struct ub_replay *rp)
{
	if (!rp)
		return;
	for (size_t i = 0; i < rp->n; i++)
		ub_itemset_free(rp->sets[i]);
	for (size_t i = 0; i < rp->ncsums; i++)
		free(rp->csums[i].csums);
	free(rp->sets);
	free(rp->changed);
	free(rp->csums);
	free(rp);
}

int ub_replay_log(struct ub_fs *fs)
{
	const uint8_t *sb = fs->vol->super;
	struct ub_root logroot = { BTRFS_TREE_LOG_OBJECTID, UB_GET(ub_disk_super, log_root, sb), 0,
				   (uint8_t)UB_GET(ub_disk_super, log_root_level, sb) };
	struct ub_key key = { BTRFS_TREE_LOG_OBJECTID, BTRFS_ROOT_ITEM_KEY, 0 };
	struct ub_replay *rp;
	struct ub_path p;
	int ret, trees = 0;

	if (!logroot.bytenr)
		return 0;
	rp = calloc(1, sizeof(*rp));
	if (!rp)
		return -ENOMEM;
	fs->replay = rp; /* sets become visible as they are built; on failure all is dropped */
	ub_path_init(&p);
	ret = ub_tree_search(&fs->tc, &logroot, &key, &p);
	ret = ret == 2 ? (ub_eb_nritems(p.nodes[0]) ? 0 : 1) : (ret < 0 ? ret : 0);
	while (ret == 0) {
		uint32_t size;
		const uint8_t *d = ub_path_data(&p, &size);
		struct ub_root r;

		ub_path_key(&p, &key);
		if (key.objectid != BTRFS_TREE_LOG_OBJECTID || key.type != BTRFS_ROOT_ITEM_KEY)
			break;
		if (size < offsetof(struct btrfs_root_item, generation_v2)) {
			ret = -EUCLEAN;
			break;
		}
		r = (struct ub_root){ BTRFS_TREE_LOG_OBJECTID, UB_GET(btrfs_root_item, bytenr, d),
				      UB_GET(btrfs_root_item, generation, d), (uint8_t)UB_GET(btrfs_root_item, level, d) };
		/* the replay reads trees itself: let go of the log root's path meanwhile */
		{
			struct ub_key next = key;
			ub_path_release(&p);
			ret = replay_log_tree(fs, rp, next.offset, &r);
			if (ret)
				break;
			trees++;
			next.offset++;
			if (next.offset == 0)
				break;
			ret = ub_tree_search(&fs->tc, &logroot, &next, &p);
			ret = ret == 2 ? 1 : (ret < 0 ? ret : 0);
		}
	}
	ub_path_release(&p);
	if (ret >= 0)
		ret = fixup_counts(fs, rp);
	if (ret < 0) {
		ub_err(&fs->log, "the fsync log tree (root at logical %llu) cannot be replayed: %s%s",
		       (unsigned long long)logroot.bytenr, strerror(-ret), fs->opts.writable ? "" : "; reading without it");
		fs->replay = NULL;
		ub_replay_free(rp);
		return ret;
	}
	ub_info(&fs->log, "replayed the fsync log in memory: %d log trees, %zu inodes changed", trees, rp->n);
	return 0;
}

void ub_replay_csums(const struct ub_fs *fs, uint64_t logical, uint64_t nsec, uint8_t *csums, uint8_t *have)
{
	const struct ub_replay *rp = fs->replay;
	const uint32_t ss = fs->vol->sectorsize, cs = fs->vol->csum_size;
	uint64_t end = logical + nsec * ss;

	if (!rp)
		return;
	for (size_t i = 0; i < rp->ncsums; i++) {
		const struct csum_run *r = &rp->csums[i];
		uint64_t count = r->bytes / cs;
		for (uint64_t j = 0; j < count; j++) {
			uint64_t at = r->start + j * ss;
			if (at < logical || at >= end)
				continue;
			memcpy(csums + ((at - logical) / ss) * cs, r->csums + j * cs, cs);
			have[(at - logical) / ss] = 1;
		}
	}
}

/* ---- for the read-write replay (log_commit.c) ---------------------------- */

size_t ub_replay_nsets(const struct ub_fs *fs)
{
	return fs->replay ? fs->replay->n : 0;
}

const struct ub_itemset *ub_replay_set(const struct ub_fs *fs, size_t i)
{
	return fs->replay->sets[i];
}

int ub_replay_for_each_csum(const struct ub_fs *fs,
			    int (*fn)(void *arg, uint64_t start, const uint8_t *csums, uint32_t bytes), void *arg)
{
	const struct ub_replay *rp = fs->replay;
	int ret = 0;

	for (size_t i = 0; rp && i < rp->ncsums && !ret; i++)
		ret = fn(arg, rp->csums[i].start, rp->csums[i].csums, rp->csums[i].bytes);
	return ret;
}
