/* SPDX-License-Identifier: MIT */
/*
 * Applying the transaction's folded reference changes to the extent tree, as
 * the kernel lays the items out: a tree block is a skinny METADATA_ITEM
 * (bytenr, METADATA_ITEM, level), a data extent an EXTENT_ITEM (bytenr,
 * EXTENT_ITEM, length); back references go inline into the item, sorted
 * (backref.h), as long as the item stays below the kernel's maximum size and
 * no keyed reference of the extent exists yet, else into keyed items
 * (TREE_BLOCK_REF / SHARED_BLOCK_REF / EXTENT_DATA_REF at the data ref hash,
 * the next free offset on a collision / SHARED_DATA_REF).
 *
 * Per extent, additions run before drops so the count never passes through
 * zero on its way; an extent whose count reaches zero loses its item and its
 * space is accounted free and pinned until the commit is durable.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include "txn.h"
#include "backref.h"

#define EI(field, p) UB_GET(btrfs_extent_item, field, p)

static struct ub_root *extent_root(struct ub_txn *t)
{
	return &t->e->fs.extent_tree->root;
}

static bool skinny(const struct ub_txn *t)
{
	return (t->e->incompat & BTRFS_FEATURE_INCOMPAT_SKINNY_METADATA) != 0;
}

/* The key of the extent's item in the form a new one takes: a tree block's skinny only with skinny-metadata. */
static void head_key(const struct ub_txn *t, const struct ub_dref_head *h, struct ub_key *k)
{
	bool meta = !h->is_data && skinny(t);

	k->objectid = h->bytenr;
	k->type = meta ? BTRFS_METADATA_ITEM_KEY : BTRFS_EXTENT_ITEM_KEY;
	k->offset = meta ? (uint64_t)h->level : h->num_bytes;
}

/*
 * A writable path to the extent's item (search_slot's 0, 1 absent, <0), *key
 * its key. A tree block's item may be in either form: a filesystem that
 * turned skinny-metadata on later keeps its older blocks' EXTENT_ITEMs (with
 * a tree_block_info), and the kernel looks for the other form when the first
 * is absent, as this does.
 */
static int search_item(struct ub_txn *t, const struct ub_dref_head *h, int ins_len, struct ub_path *p,
		       struct ub_key *key)
{
	struct ub_engine *e = t->e;
	int ret;

	head_key(t, h, key);
	ret = ub_tree_search_slot(&e->fs.tc, &t->ta, extent_root(t), key, p, ins_len, true);
	if (ret <= 0 || h->is_data)
		return ret;
	ub_path_release(p);
	ub_path_init(p);
	if (key->type == BTRFS_METADATA_ITEM_KEY)
		*key = (struct ub_key){ h->bytenr, BTRFS_EXTENT_ITEM_KEY, h->num_bytes };
	else
		*key = (struct ub_key){ h->bytenr, BTRFS_METADATA_ITEM_KEY, (uint64_t)h->level };
	ret = ub_tree_search_slot(&e->fs.tc, &t->ta, extent_root(t), key, p, ins_len, true);
	if (ret > 0)
		head_key(t, h, key); /* named in messages as the form it would take */
	return ret;
}

static void to_ref(const struct ub_dref *d, struct ub_ref *r)
{
	*r = (struct ub_ref){ .type = d->type, .root = d->root, .parent = d->parent, .owner = d->objectid,
			      .offset = d->offset };
}

static void ref_str(const struct ub_ref *r, char *buf, size_t len)
{
	switch (r->type) {
	case BTRFS_TREE_BLOCK_REF_KEY:
		snprintf(buf, len, "TREE_BLOCK_REF root %llu", (unsigned long long)r->root);
		break;
	case BTRFS_SHARED_BLOCK_REF_KEY:
		snprintf(buf, len, "SHARED_BLOCK_REF parent %llu", (unsigned long long)r->parent);
		break;
	case BTRFS_EXTENT_DATA_REF_KEY:
		snprintf(buf, len, "EXTENT_DATA_REF root %llu inode %llu offset %llu", (unsigned long long)r->root,
			 (unsigned long long)r->owner, (unsigned long long)r->offset);
		break;
	default:
		snprintf(buf, len, "SHARED_DATA_REF parent %llu", (unsigned long long)r->parent);
		break;
	}
}

/* Is there any keyed back reference of the extent at bytenr? */
static int has_keyed_refs(struct ub_txn *t, uint64_t bytenr)
{
	struct ub_key key = { bytenr, BTRFS_TREE_BLOCK_REF_KEY, 0 };
	struct ub_path p;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_search(&t->e->fs.tc, extent_root(t), &key, &p);
	if (ret >= 0 && ret < 2) {
		ub_path_key(&p, &key);
		ret = key.objectid == bytenr && key.type < BTRFS_BLOCK_GROUP_ITEM_KEY;
	} else if (ret == 2) {
		ret = 0;
	}
	ub_path_release(&p);
	return ret;
}

/*
 * Find the keyed form of `r`: 0 with *key set, 1 absent (*key = where a new
 * one goes: for EXTENT_DATA_REF the first free offset from the hash on).
 */
static int find_keyed(struct ub_txn *t, uint64_t bytenr, const struct ub_ref *r, struct ub_key *key, uint32_t *count)
{
	struct ub_path p;
	const uint8_t *d;
	uint32_t size;
	int ret;

	ub_ref_key(r, bytenr, key);
	for (unsigned probe = 0;; probe++) {
		ub_path_init(&p);
		ret = ub_tree_lookup(&t->e->fs.tc, extent_root(t), key, &p, &d, &size);
		if (ret == -ENOENT) {
			ub_path_release(&p);
			return 1;
		}
		if (ret) {
			ub_path_release(&p);
			return ret;
		}
		if (r->type != BTRFS_EXTENT_DATA_REF_KEY || ub_keyed_data_ref_match(d, size, r)) {
			*count = ub_keyed_ref_count(key, d, size);
			ub_path_release(&p);
			return 0;
		}
		ub_path_release(&p);
		/* another ref with the same hash sits there: the kernel probes the next offsets */
		if (probe > 1000000 || key->offset == UINT64_MAX)
			return -EUCLEAN;
		key->offset++;
	}
}

/* Change a keyed ref's count by delta (insert / delete as needed). */
static int change_keyed(struct ub_txn *t, const struct ub_dref_head *h, const struct ub_ref *r, int64_t delta)
{
	struct ub_engine *e = t->e;
	struct ub_key key;
	uint32_t count = 0;
	struct ub_path p;
	char rs[128];
	int ret;

	ret = find_keyed(t, h->bytenr, r, &key, &count);
	if (ret < 0)
		return ret;
	ref_str(r, rs, sizeof(rs));
	if (ret == 1) {
		uint8_t body[sizeof(struct btrfs_extent_data_ref)];

		if (delta < 0 || delta > UINT32_MAX) {
			ub_err(&e->fs.log, "extent tree: extent at logical %llu: dropping %s, which it does not hold",
			       (unsigned long long)h->bytenr, rs);
			return -EUCLEAN;
		}
		ub_keyed_ref_write(body, r, (uint32_t)delta);
		return ub_tree_insert_item(&e->fs.tc, &t->ta, extent_root(t), &key, body, ub_ref_keyed_size(r->type));
	}
	if ((int64_t)count + delta < 0 || (int64_t)count + delta > UINT32_MAX ||
	    (delta > 0 && (r->type == BTRFS_TREE_BLOCK_REF_KEY || r->type == BTRFS_SHARED_BLOCK_REF_KEY))) {
		ub_err(&e->fs.log, "extent tree: extent at logical %llu: %s count %u cannot change by %lld",
		       (unsigned long long)h->bytenr, rs, count, (long long)delta);
		return -EUCLEAN;
	}
	ub_path_init(&p);
	if ((int64_t)count + delta == 0) {
		ret = ub_tree_search_slot(&e->fs.tc, &t->ta, extent_root(t), &key, &p, -1, true);
		if (ret == 0)
			ret = ub_tree_del_items(&e->fs.tc, &t->ta, extent_root(t), &p, p.slots[0], 1);
	} else {
		ret = ub_tree_search_slot(&e->fs.tc, &t->ta, extent_root(t), &key, &p, 0, true);
		if (ret == 0) {
			uint32_t size;
			uint8_t *d = ub_path_data_mut(&p, &size);
			ub_keyed_ref_write(d, r, (uint32_t)((int64_t)count + delta));
			ub_path_mark_dirty(&p);
		}
	}
	ub_path_release(&p);
	return ret > 0 ? -EUCLEAN : ret;
}

/*
 * One back reference of an existing (or just inserted) extent item changes
 * by delta: inline if it is there or fits, keyed otherwise. The item's total
 * count is the caller's.
 */
static int change_ref(struct ub_txn *t, const struct ub_dref_head *h, const struct ub_ref *r, int64_t delta)
{
	struct ub_engine *e = t->e;
	struct ub_key key;
	struct ub_path p;
	uint8_t *d;
	uint32_t size, pos, count, isz = ub_ref_inline_size(r->type);
	bool block_ref = r->type == BTRFS_TREE_BLOCK_REF_KEY || r->type == BTRFS_SHARED_BLOCK_REF_KEY;
	char rs[128];
	int ret, keyed = -1;

	if (!isz)
		return -EINVAL;
	ref_str(r, rs, sizeof(rs));
	/* adding inline needs room for the bigger item: ask the search for it */
	if (delta > 0) {
		keyed = has_keyed_refs(t, h->bytenr);
		if (keyed < 0)
			return keyed;
	}
	ub_path_init(&p);
	ret = search_item(t, h, delta > 0 ? (int)isz : 0, &p, &key);
	if (ret > 0) {
		ub_err(&e->fs.log, "extent tree: no extent item (%llu %u %llu) for a reference change (%s)",
		       (unsigned long long)key.objectid, key.type, (unsigned long long)key.offset, rs);
		ret = -EUCLEAN;
	}
	if (ret)
		goto out;
	d = ub_path_data_mut(&p, &size);
	ret = ub_inline_ref_find(d, size, ub_extent_refs_start(key.type, h->is_data), r, &pos, &count);
	if (ret < 0) {
		ub_err(&e->fs.log, "extent tree: extent item (%llu %u %llu): inline references do not parse",
		       (unsigned long long)key.objectid, key.type, (unsigned long long)key.offset);
		goto out;
	}
	if (ret == 0) {
		int64_t n = (int64_t)count + delta;

		if (n < 0 || n > UINT32_MAX || (delta > 0 && block_ref)) {
			ub_err(&e->fs.log, "extent tree: extent at logical %llu: inline %s count %u cannot change by %lld",
			       (unsigned long long)h->bytenr, rs, count, (long long)delta);
			ret = -EUCLEAN;
			goto out;
		}
		if (n == 0) {
			memmove(d + pos, d + pos + isz, size - pos - isz);
			ub_tree_truncate_item(&e->fs.tc, &p, size - isz, true);
		} else {
			ub_inline_ref_set_count(d + pos, r->type, (uint32_t)n);
		}
		ub_path_mark_dirty(&p);
		goto out;
	}
	/* not inline: keyed, or a new inline ref if it fits and no keyed ref exists */
	if (delta > 0 && !keyed && size + isz < ub_max_extent_item_size(e->fs.vol->nodesize) && delta <= UINT32_MAX) {
		ret = ub_tree_extend_item(&e->fs.tc, &t->ta, extent_root(t), &p, isz);
		if (ret)
			goto out;
		d = ub_path_data_mut(&p, &size);
		memmove(d + pos + isz, d + pos, size - isz - pos);
		ub_inline_ref_write(d + pos, r, (uint32_t)delta);
		ub_path_mark_dirty(&p);
		goto out;
	}
	ub_path_release(&p);
	return change_keyed(t, h, r, delta);
out:
	ub_path_release(&p);
	return ret;
}

/* Count and flags of the extent item: add total_delta, OR set_flags; delete the item at zero. */
static int finish_extent(struct ub_txn *t, const struct ub_dref_head *h, bool *freed)
{
	struct ub_engine *e = t->e;
	struct ub_key key;
	struct ub_path p;
	uint8_t *d;
	uint32_t size, first;
	int64_t refs;
	int ret;

	*freed = false;
	ub_path_init(&p);
	ret = search_item(t, h, -1, &p, &key);
	if (ret > 0) {
		ub_err(&e->fs.log, "extent tree: no extent item (%llu %u %llu) to change the count of",
		       (unsigned long long)key.objectid, key.type, (unsigned long long)key.offset);
		ret = -EUCLEAN;
	}
	if (ret)
		goto out;
	d = ub_path_data_mut(&p, &size);
	first = ub_extent_refs_start(key.type, h->is_data);
	if (size < first) {
		ret = -EUCLEAN;
		goto out;
	}
	refs = (int64_t)EI(refs, d) + h->total_delta;
	if (refs < 0) {
		ub_err(&e->fs.log, "extent tree: extent at logical %llu has %llu references, %lld dropped",
		       (unsigned long long)h->bytenr, (unsigned long long)EI(refs, d), (long long)-h->total_delta);
		ret = -EUCLEAN;
		goto out;
	}
	if (refs == 0) {
		if (size != first) {
			ub_err(&e->fs.log, "extent tree: extent at logical %llu has no references left but its item "
			       "still holds %u bytes of inline references", (unsigned long long)h->bytenr,
			       size - first);
			ret = -EUCLEAN;
			goto out;
		}
		ret = ub_tree_del_items(&e->fs.tc, &t->ta, extent_root(t), &p, p.slots[0], 1);
		*freed = !ret;
		goto out;
	}
	UB_SET(btrfs_extent_item, refs, d, (uint64_t)refs);
	UB_SET(btrfs_extent_item, flags, d, EI(flags, d) | h->set_flags);
	ub_path_mark_dirty(&p);
out:
	ub_path_release(&p);
	return ret;
}

/*
 * The tree_block_info of a tree block's item in the form before
 * skinny-metadata: its level, and its first key as the block holds it now (the
 * kernel writes the first key it had when allocated; nothing reads it back).
 */
static void block_info(struct ub_txn *t, const struct ub_dref_head *h, uint8_t *info)
{
	struct ub_key first = { 0, 0, 0 };
	struct ub_eb *eb;

	/* a block new in this transaction is in the cache (dirty): nothing is read */
	if (ub_tree_read_block(&t->e->fs.tc, h->bytenr, NULL, &eb) == 0) {
		if (ub_eb_nritems(eb))
			ub_eb_item_key(eb, 0, &first);
		ub_eb_put(&t->e->fs.tc, eb);
	}
	ub_key_write(info + offsetof(struct btrfs_tree_block_info, key), &first);
	UB_SET(btrfs_tree_block_info, level, info, (uint8_t)h->level);
}

static int insert_extent(struct ub_txn *t, const struct ub_dref_head *h)
{
	struct ub_engine *e = t->e;
	uint8_t item[UB_EXTENT_ITEM_SIZE + sizeof(struct btrfs_tree_block_info)];
	struct ub_key key;
	uint32_t size;
	int ret;

	head_key(t, h, &key);
	size = ub_extent_refs_start(key.type, h->is_data);
	UB_SET(btrfs_extent_item, refs, item, 0);
	UB_SET(btrfs_extent_item, generation, item, h->generation ? h->generation : t->transid);
	UB_SET(btrfs_extent_item, flags, item,
	       (h->is_data ? BTRFS_EXTENT_FLAG_DATA : BTRFS_EXTENT_FLAG_TREE_BLOCK) | h->set_flags);
	if (size > UB_EXTENT_ITEM_SIZE)
		block_info(t, h, item + UB_EXTENT_ITEM_SIZE);
	ret = ub_tree_insert_item(&e->fs.tc, &t->ta, extent_root(t), &key, item, size);
	if (ret == -EEXIST) {
		ub_err(&e->fs.log, "extent tree: new extent at logical %llu already has an extent item",
		       (unsigned long long)h->bytenr);
		ret = -EUCLEAN;
	}
	if (ret)
		return ret;
	ret = ub_alloc_account(e->alloc, h->bytenr, h->num_bytes, true);
	if (ret)
		return ret;
	e->bytes_used += h->num_bytes;
	return 0;
}


/*
 * A data extent's last reference went: its checksums leave the csum tree.
 * Items (EXTENT_CSUM, EXTENT_CSUM, start) hold one checksum per sector from
 * start on; those overlapping [b, e) are deleted, cut at the end, or (when
 * they reach past e) replaced by an item starting at e holding the rest.
 */
static int del_csums(struct ub_txn *t, uint64_t b, uint64_t len)
{
	struct ub_engine *e = t->e;
	struct ub_eroot *er;
	uint64_t end = b + len, ss = e->fs.vol->sectorsize, cs = e->fs.vol->csum_size;
	int ret = ub_engine_root(e, BTRFS_CSUM_TREE_OBJECTID, &er);

	if (ret)
		return ret == -ENOENT ? 0 : ret;
	for (;;) {
		struct ub_key key = { BTRFS_EXTENT_CSUM_OBJECTID, BTRFS_EXTENT_CSUM_KEY, end - 1 }, k;
		struct ub_path p;
		uint8_t *d, *tail = NULL;
		uint32_t size, tail_len = 0;
		uint64_t s, iend;

		/* the last item at or before end - 1 (maybe in an earlier leaf), then a writable path to it */
		ub_path_init(&p);
		ret = ub_tree_search_le(&e->fs.tc, &er->root, &key, &p);
		if (ret == 0)
			ub_path_key(&p, &k);
		ub_path_release(&p);
		if (ret)
			return ret > 0 ? 0 : ret;
		if (k.objectid != BTRFS_EXTENT_CSUM_OBJECTID || k.type != BTRFS_EXTENT_CSUM_KEY)
			return 0;
		ret = ub_tree_search_slot(&e->fs.tc, &t->ta, &er->root, &k, &p, -1, true);
		d = ret == 0 ? ub_path_data_mut(&p, &size) : NULL;
		if (!d) {
			ub_path_release(&p);
			return ret < 0 ? ret : -EUCLEAN;
		}
		s = k.offset;
		iend = s + size / cs * ss;
		if (iend <= b) {
			ub_path_release(&p);
			return 0;
		}
		if (iend > end) {
			tail_len = (uint32_t)((iend - end) / ss * cs);
			tail = malloc(tail_len);
			if (!tail) {
				ub_path_release(&p);
				return -ENOMEM;
			}
			memcpy(tail, d + (end - s) / ss * cs, tail_len);
		}
		if (s >= b) {
			ret = ub_tree_del_items(&e->fs.tc, &t->ta, &er->root, &p, p.slots[0], 1);
		} else {
			ub_tree_truncate_item(&e->fs.tc, &p, (uint32_t)((b - s) / ss * cs), true);
			ub_path_mark_dirty(&p);
		}
		ub_path_release(&p);
		if (!ret && tail) {
			key.offset = end;
			ret = ub_tree_insert_item(&e->fs.tc, &t->ta, &er->root, &key, tail, tail_len);
		}
		free(tail);
		if (ret || s <= b)
			return ret;
	}
}

static int run_head(struct ub_txn *t, const struct ub_dref_head *h)
{
	struct ub_engine *e = t->e;
	bool freed;
	int ret;

	if (h->new_extent) {
		if (h->total_delta <= 0) {
			if (h->nrefs || h->total_delta) {
				ub_err(&e->fs.log, "transaction %llu: new extent at logical %llu: references dropped below "
				       "zero", (unsigned long long)t->transid, (unsigned long long)h->bytenr);
				return -EUCLEAN;
			}
			/* allocated and freed in this transaction: never reached a commit */
			ub_alloc_unreserve(e->alloc, h->bytenr, h->num_bytes);
			return 0;
		}
		ret = insert_extent(t, h);
		if (ret)
			return ret;
	} else if (h->nrefs == 0 && !h->set_flags) {
		return 0;
	}
	/* additions first: the count must not touch zero on its way */
	for (int pass = 0; pass < 2; pass++) {
		for (int i = 0; i < h->nrefs; i++) {
			struct ub_ref r;

			if ((h->refs[i].delta > 0) != (pass == 0))
				continue;
			to_ref(&h->refs[i], &r);
			ret = change_ref(t, h, &r, h->refs[i].delta);
			if (ret)
				return ret;
		}
	}
	ret = finish_extent(t, h, &freed);
	if (ret || !freed)
		return ret;
	ret = h->is_data ? del_csums(t, h->bytenr, h->num_bytes) : 0;
	if (!ret)
		ret = ub_alloc_account(e->alloc, h->bytenr, h->num_bytes, false);
	if (!ret)
		ret = ub_alloc_pin(e->alloc, h->bytenr, h->num_bytes);
	if (ret)
		return ret;
	e->bytes_used -= h->num_bytes;
	return 0;
}

int ub_txn_run_refs(struct ub_txn *t)
{
	struct ub_dref_head *h;
	int ret;

	while ((ret = ub_dref_pop_head(t->refs, &h)) == 0) {
		ret = run_head(t, h);
		if (ret) {
			ub_err(&t->e->fs.log, "transaction %llu: cannot apply the reference changes of the %s extent at "
			       "logical %llu: %s", (unsigned long long)t->transid, h->is_data ? "data" : "tree block",
			       (unsigned long long)h->bytenr, strerror(-ret));
			ub_dref_head_free(h);
			return ret;
		}
		ub_dref_head_free(h);
	}
	return ret < 0 ? ret : 0;
}
