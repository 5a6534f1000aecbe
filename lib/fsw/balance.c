// SPDX-License-Identifier: MIT
/*
 * A balance (ubtrfs/balance.h): which block groups the kernel's filters
 * select, the checks before anything changes, the convert's target profile
 * held in the allocator while the groups move (lib/fsw/relocate.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fsw/fsw.h"
#include "volume/volume_priv.h"
#include "ubtrfs/balance.h"

#define KIND_BITS (BTRFS_BLOCK_GROUP_DATA | BTRFS_BLOCK_GROUP_METADATA | BTRFS_BLOCK_GROUP_SYSTEM)

/* ---- parsing ---- */

/* A profile name as btrfs-progs spells it: its bit (single: the "single" bit of balance args). */
static int profile_bit(const char *name, size_t len, uint64_t *bit)
{
	char buf[16];
	const struct ub_profile *p;

	if (len == 0 || len >= sizeof(buf))
		return -EINVAL;
	memcpy(buf, name, len);
	buf[len] = 0;
	for (char *c = buf; *c; c++)
		if (*c >= 'A' && *c <= 'Z')
			*c = (char)(*c - 'A' + 'a');
	p = ub_profile_named(buf);
	if (!p)
		return -EINVAL;
	*bit = p->flag ? p->flag : BTRFS_AVAIL_ALLOC_BIT_SINGLE;
	return 0;
}

/* "N", "N..", "..M" or "N..M" */
static int parse_range(const char *v, size_t len, uint64_t *lo, uint64_t *hi, bool *ranged)
{
	char buf[64], *dots, *end;

	if (len == 0 || len >= sizeof(buf))
		return -EINVAL;
	memcpy(buf, v, len);
	buf[len] = 0;
	dots = strstr(buf, "..");
	*ranged = dots != NULL;
	*lo = 0;
	*hi = UINT64_MAX;
	if (!dots) {
		*lo = strtoull(buf, &end, 10);
		return *end || end == buf ? -EINVAL : 0;
	}
	*dots = 0;
	if (dots != buf) {
		*lo = strtoull(buf, &end, 10);
		if (*end)
			return -EINVAL;
	}
	if (dots[2]) {
		*hi = strtoull(dots + 2, &end, 10);
		if (*end)
			return -EINVAL;
	}
	return *lo > *hi ? -EINVAL : 0;
}

int ub_balance_parse_filters(const char *text, struct btrfs_balance_args *a, char *why, size_t whylen)
{
	const char *s = text;

	memset(a, 0, sizeof(*a));
	if (!text)
		return 0;
	while (*s) {
		const char *end = strchr(s, ','), *eq;
		size_t len = end ? (size_t)(end - s) : strlen(s), nlen, vlen;
		const char *v;
		uint64_t lo, hi;
		bool ranged;
		int ret = 0;

		eq = memchr(s, '=', len);
		nlen = eq ? (size_t)(eq - s) : len;
		v = eq ? eq + 1 : NULL;
		vlen = eq ? len - nlen - 1 : 0;
#define IS(name) (nlen == strlen(name) && !memcmp(s, name, nlen))
		if (IS("soft") && !v) {
			a->flags |= BTRFS_BALANCE_ARGS_SOFT;
		} else if (!v) {
			snprintf(why, whylen, "the filter '%.*s' needs a value", (int)nlen, s);
			return -EINVAL;
		} else if (IS("profiles")) {
			const char *p = v, *stop = v + vlen;

			while (p < stop && !ret) {
				const char *bar = memchr(p, '|', (size_t)(stop - p));
				size_t plen = bar ? (size_t)(bar - p) : (size_t)(stop - p);
				uint64_t bit;

				ret = profile_bit(p, plen, &bit);
				a->profiles |= bit;
				p += plen + 1;
			}
			a->flags |= BTRFS_BALANCE_ARGS_PROFILES;
		} else if (IS("convert")) {
			uint64_t bit = 0;

			ret = profile_bit(v, vlen, &bit);
			a->target = bit;
			a->flags |= BTRFS_BALANCE_ARGS_CONVERT;
		} else if (IS("usage")) {
			ret = parse_range(v, vlen, &lo, &hi, &ranged);
			if (!ret && ((ranged && hi != UINT64_MAX && hi > 100) || lo > 100))
				ret = -EINVAL;
			if (!ret && ranged) {
				a->usage_min = (uint32_t)lo;
				a->usage_max = hi == UINT64_MAX ? 100 : (uint32_t)hi;
				a->flags |= BTRFS_BALANCE_ARGS_USAGE_RANGE;
			} else if (!ret) {
				a->usage = lo;
				a->flags |= BTRFS_BALANCE_ARGS_USAGE;
			}
		} else if (IS("devid")) {
			ret = parse_range(v, vlen, &lo, &hi, &ranged);
			if (!ret && (ranged || lo == 0))
				ret = -EINVAL;
			a->devid = lo;
			a->flags |= BTRFS_BALANCE_ARGS_DEVID;
		} else if (IS("drange") || IS("vrange")) {
			ret = parse_range(v, vlen, &lo, &hi, &ranged);
			if (!ret && !ranged)
				ret = -EINVAL;
			if (IS("drange")) {
				a->pstart = lo;
				a->pend = hi;
				a->flags |= BTRFS_BALANCE_ARGS_DRANGE;
			} else {
				a->vstart = lo;
				a->vend = hi;
				a->flags |= BTRFS_BALANCE_ARGS_VRANGE;
			}
		} else if (IS("limit")) {
			ret = parse_range(v, vlen, &lo, &hi, &ranged);
			if (!ret && ranged) {
				a->limit_min = (uint32_t)lo;
				a->limit_max = hi > UINT32_MAX ? UINT32_MAX : (uint32_t)hi;
				a->flags |= BTRFS_BALANCE_ARGS_LIMIT_RANGE;
			} else if (!ret) {
				a->limit = lo;
				a->flags |= BTRFS_BALANCE_ARGS_LIMIT;
			}
		} else if (IS("stripes")) {
			ret = parse_range(v, vlen, &lo, &hi, &ranged);
			a->stripes_min = (uint32_t)lo;
			a->stripes_max = ranged ? (hi > UINT32_MAX ? UINT32_MAX : (uint32_t)hi) : (uint32_t)lo;
			a->flags |= BTRFS_BALANCE_ARGS_STRIPES_RANGE;
		} else {
			snprintf(why, whylen, "unknown filter '%.*s'", (int)nlen, s);
			return -EINVAL;
		}
#undef IS
		if (ret) {
			snprintf(why, whylen, "bad value in the filter '%.*s'", (int)len, s);
			return -EINVAL;
		}
		s += len;
		if (*s == ',')
			s++;
	}
	if ((a->flags & BTRFS_BALANCE_ARGS_SOFT) && !(a->flags & BTRFS_BALANCE_ARGS_CONVERT)) {
		snprintf(why, whylen, "the filter 'soft' needs 'convert'");
		return -EINVAL;
	}
	if ((a->flags & BTRFS_BALANCE_ARGS_DRANGE) && !(a->flags & BTRFS_BALANCE_ARGS_DEVID)) {
		snprintf(why, whylen, "the filter 'drange' needs 'devid'");
		return -EINVAL;
	}
	return 0;
}

/* ---- selecting groups ---- */

static uint64_t chunk_profile_bit(uint64_t type)
{
	uint64_t p = type & BTRFS_BLOCK_GROUP_PROFILE_MASK;

	return p ? p : BTRFS_AVAIL_ALLOC_BIT_SINGLE;
}

/* The kernel's should_balance_chunk, one type's args, but for limit (counted by the caller). */
static bool selected(const struct btrfs_balance_args *a, const struct ub_chunk *c, uint64_t used)
{
	uint64_t prof = chunk_profile_bit(c->type);

	if ((a->flags & BTRFS_BALANCE_ARGS_PROFILES) && !(a->profiles & prof))
		return false;
	if (a->flags & BTRFS_BALANCE_ARGS_USAGE) {
		uint64_t thresh = a->usage == 0 ? 1 : a->usage >= 100 ? c->length + 1 : c->length * a->usage / 100;

		if (used >= thresh)
			return false;
	}
	if (a->flags & BTRFS_BALANCE_ARGS_USAGE_RANGE) {
		uint64_t lo = c->length * a->usage_min / 100;
		uint64_t hi = a->usage_max >= 100 ? c->length + 1 : a->usage_max == 0 ? 1 : c->length * a->usage_max / 100;

		if (used < lo || used >= hi)
			return false;
	}
	if (a->flags & BTRFS_BALANCE_ARGS_DEVID) {
		bool on = false;

		for (unsigned i = 0; i < c->num_stripes && !on; i++) {
			if (c->stripes[i].devid != a->devid)
				continue;
			if (!(a->flags & BTRFS_BALANCE_ARGS_DRANGE))
				on = true;
			else
				on = c->stripes[i].physical < a->pend &&
				     c->stripes[i].physical + ub_chunk_stripe_size(c) > a->pstart;
		}
		if (!on)
			return false;
	}
	if ((a->flags & BTRFS_BALANCE_ARGS_VRANGE) && !(c->logical < a->vend && c->logical + c->length > a->vstart))
		return false;
	if ((a->flags & BTRFS_BALANCE_ARGS_STRIPES_RANGE) &&
	    (c->num_stripes < a->stripes_min || c->num_stripes > a->stripes_max))
		return false;
	if ((a->flags & BTRFS_BALANCE_ARGS_CONVERT) && (a->flags & BTRFS_BALANCE_ARGS_SOFT) && prof == a->target)
		return false;
	return true;
}

static const struct btrfs_balance_args *args_for(const struct ub_balance *b, uint64_t type)
{
	if ((type & BTRFS_BLOCK_GROUP_DATA) && (b->flags & BTRFS_BALANCE_DATA))
		return &b->data;
	if ((type & BTRFS_BLOCK_GROUP_SYSTEM) && (b->flags & BTRFS_BALANCE_SYSTEM))
		return &b->sys;
	if ((type & BTRFS_BLOCK_GROUP_METADATA) && (b->flags & BTRFS_BALANCE_METADATA))
		return &b->meta;
	return NULL;
}

struct group { uint64_t start, type; };

static int select_groups(struct ub_engine *e, const struct ub_balance *b, struct group **out, size_t *nout)
{
	struct group *g = NULL;
	size_t n = 0, cap = 0;
	uint64_t count[3] = { 0 }, pos = 0;
	struct ub_bg_info bi;
	int ret = 0;

	while (ub_alloc_next_bg(e->alloc, pos, &bi) == 0) {
		const struct btrfs_balance_args *a = args_for(b, bi.flags);
		const struct ub_chunk *c = ub_volume_find_chunk(e->fs.vol, bi.start);

		pos = bi.start + bi.length;
		if (!a || !c || !selected(a, c, bi.used))
			continue;
		if (n == cap) {
			size_t nc = cap ? cap * 2 : 32;
			struct group *ng = realloc(g, nc * sizeof(*ng));

			if (!ng) {
				ret = -ENOMEM;
				break;
			}
			g = ng;
			cap = nc;
		}
		g[n++] = (struct group){ bi.start, bi.flags };
	}
	/* limit: the first `limit` of each type from the top (the order they are relocated in) */
	for (size_t i = n; i-- > 0 && !ret;) {
		const struct btrfs_balance_args *a = args_for(b, g[i].type);
		int ti = (g[i].type & BTRFS_BLOCK_GROUP_DATA) ? 0 : (g[i].type & BTRFS_BLOCK_GROUP_SYSTEM) ? 2 : 1;
		uint64_t max = (a->flags & BTRFS_BALANCE_ARGS_LIMIT) ? a->limit
			: (a->flags & BTRFS_BALANCE_ARGS_LIMIT_RANGE) ? a->limit_max : UINT64_MAX;

		if (count[ti] >= max)
			g[i].type = 0; /* dropped */
		else
			count[ti]++;
	}
	for (size_t i = 0; i < n && !ret; i++) {
		const struct btrfs_balance_args *a = g[i].type ? args_for(b, g[i].type) : NULL;
		int ti;

		if (!a || !(a->flags & BTRFS_BALANCE_ARGS_LIMIT_RANGE))
			continue;
		ti = (g[i].type & BTRFS_BLOCK_GROUP_DATA) ? 0 : (g[i].type & BTRFS_BLOCK_GROUP_SYSTEM) ? 2 : 1;
		if (count[ti] < a->limit_min)
			g[i].type = 0; /* fewer than the range's least: none of this type */
	}
	if (ret) {
		free(g);
		return ret;
	}
	*out = g;
	*nout = n;
	return 0;
}

/* ---- checks ---- */

static int present_devices(const struct ub_engine *e)
{
	int n = 0;

	for (int i = 0; i < e->fs.vol->nvdevs; i++)
		n += e->fs.vol->vdevs[i].dev != NULL && !e->fs.vol->vdevs[i].missing;
	return n;
}

static const struct ub_profile *target_profile(uint64_t target)
{
	return ub_profile_of(target == BTRFS_AVAIL_ALLOC_BIT_SINGLE ? 0 : target);
}

/* The profile a kind has now: the most redundant present (what new chunks would get). */
static const struct ub_profile *current_profile(struct ub_engine *e, uint64_t kind)
{
	return ub_profile_of(ub_chunk_profile_for(e->alloc, e->fs.vol, kind));
}

static int check_convert(struct ub_engine *e, const struct ub_balance *b, const char *what, uint64_t kind,
			 const struct btrfs_balance_args *a)
{
	const struct ub_profile *to, *now;
	int devs = present_devices(e);

	if (!(a->flags & BTRFS_BALANCE_ARGS_CONVERT))
		return 0;
	to = target_profile(a->target);
	if (!to) {
		ub_err(&e->fs.log, "balance: convert of %s to an unknown profile (0x%llx)", what,
		       (unsigned long long)a->target);
		return -EINVAL;
	}
	if (devs < to->devs_min) {
		ub_err(&e->fs.log, "balance: cannot convert %s to %s: it needs at least %d devices, the filesystem has %d",
		       what, to->opt, to->devs_min, devs);
		return -EINVAL;
	}
	now = current_profile(e, kind);
	if (kind != BTRFS_BLOCK_GROUP_DATA && now && to->tolerated_failures < now->tolerated_failures &&
	    !(b->flags & BTRFS_BALANCE_FORCE)) {
		ub_err(&e->fs.log, "balance: converting %s from %s to %s reduces its redundancy; use --force if you want "
		       "this", what, now->opt, to->opt);
		return -EINVAL;
	}
	return 0;
}

/* A convert to a profile the filesystem's incompat bits do not allow yet sets the bit (the next commit writes it). */
static void allow_profile(struct ub_engine *e, uint64_t target)
{
	const struct ub_profile *p = target_profile(target);

	if (!p || !p->incompat || (e->incompat & p->incompat))
		return;
	e->incompat |= p->incompat;
	UB_SET(ub_disk_super, incompat_flags, e->fs.vol->super,
	       UB_GET(ub_disk_super, incompat_flags, e->fs.vol->super) | p->incompat);
}

/* ---- the balance ---- */

static void set_targets(struct ub_engine *e, const struct ub_balance *b, bool on)
{
	static const uint64_t kinds[3] = { BTRFS_BLOCK_GROUP_DATA, BTRFS_BLOCK_GROUP_METADATA,
					   BTRFS_BLOCK_GROUP_SYSTEM };
	const struct btrfs_balance_args *args[3] = { &b->data, &b->meta, &b->sys };
	const uint64_t flags[3] = { BTRFS_BALANCE_DATA, BTRFS_BALANCE_METADATA, BTRFS_BALANCE_SYSTEM };

	for (int i = 0; i < 3; i++) {
		if (!(b->flags & flags[i]) || !(args[i]->flags & BTRFS_BALANCE_ARGS_CONVERT))
			continue;
		ub_alloc_set_target(e->alloc, kinds[i], on ? args[i]->target : 0);
		if (on)
			allow_profile(e, args[i]->target);
	}
}

/* ---- the balance item: the kernel's record of a balance under way (root tree) ---- */

#define BI(field, p) UB_GET(btrfs_balance_item, field, p)
#define BA(field, p) UB_GET(btrfs_disk_balance_args, field, p)
#define BA_SET(field, p, v) UB_SET(btrfs_disk_balance_args, field, p, v)

static const struct ub_key balance_key = { BTRFS_BALANCE_OBJECTID, BTRFS_TEMPORARY_ITEM_KEY, 0 };

/*
 * As the kernel converts them: usage and limit as the 64-bit words their
 * unions are (usage_min/usage_max and limit_min/limit_max are their halves).
 */
static void args_to_disk(uint8_t *d, const struct btrfs_balance_args *a)
{
	memset(d, 0, sizeof(struct btrfs_disk_balance_args));
	BA_SET(profiles, d, a->profiles);
	BA_SET(usage, d, a->usage);
	BA_SET(devid, d, a->devid);
	BA_SET(pstart, d, a->pstart);
	BA_SET(pend, d, a->pend);
	BA_SET(vstart, d, a->vstart);
	BA_SET(vend, d, a->vend);
	BA_SET(target, d, a->target);
	BA_SET(flags, d, a->flags);
	BA_SET(limit, d, a->limit);
	BA_SET(stripes_min, d, a->stripes_min);
	BA_SET(stripes_max, d, a->stripes_max);
}

static void args_from_disk(struct btrfs_balance_args *a, const uint8_t *d)
{
	memset(a, 0, sizeof(*a));
	a->profiles = BA(profiles, d);
	a->usage = BA(usage, d);
	a->devid = BA(devid, d);
	a->pstart = BA(pstart, d);
	a->pend = BA(pend, d);
	a->vstart = BA(vstart, d);
	a->vend = BA(vend, d);
	a->target = BA(target, d);
	a->flags = BA(flags, d);
	a->limit = BA(limit, d);
	a->stripes_min = BA(stripes_min, d);
	a->stripes_max = BA(stripes_max, d);
}

int ub_balance_item_decode(const void *item, size_t size, struct ub_balance *b)
{
	const uint8_t *p = item;

	if (!item || !b)
		return -EINVAL;
	memset(b, 0, sizeof(*b));
	if (size < sizeof(struct btrfs_balance_item))
		return -EUCLEAN;
	b->flags = BI(flags, p) & (BTRFS_BALANCE_TYPE_MASK | BTRFS_BALANCE_FORCE);
	args_from_disk(&b->data, UB_PTR(btrfs_balance_item, data, p));
	args_from_disk(&b->meta, UB_PTR(btrfs_balance_item, meta, p));
	args_from_disk(&b->sys, UB_PTR(btrfs_balance_item, sys, p));
	return 0;
}

/* Under the writer lock: 0 and *b (may be NULL), -ENOENT when there is none, -EUCLEAN (said) when it is damaged. */
static int item_read(struct ub_engine *e, struct ub_balance *b)
{
	struct ub_balance dummy;
	struct ub_path p;
	const uint8_t *d;
	uint32_t size;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_lookup(&e->fs.tc, &e->fs.root_tree->root, &balance_key, &p, &d, &size);
	if (ret == 0) {
		ret = ub_balance_item_decode(d, size, b ? b : &dummy);
		if (ret)
			ub_err(&e->fs.log, "balance: the balance item of the root tree (BALANCE TEMPORARY_ITEM 0) is "
			       "%u bytes, %zu expected", size, sizeof(struct btrfs_balance_item));
	}
	ub_path_release(&p);
	return ret;
}

/* The item written as the kernel's insert_balance_item writes it (not committed: the caller does). */
static int item_insert(struct ub_engine *e, const struct ub_balance *b)
{
	uint8_t item[sizeof(struct btrfs_balance_item)];
	struct ub_txn *t;
	int ret;

	memset(item, 0, sizeof(item));
	UB_SET(btrfs_balance_item, flags, item, b->flags);
	args_to_disk(item + offsetof(struct btrfs_balance_item, data), &b->data);
	args_to_disk(item + offsetof(struct btrfs_balance_item, meta), &b->meta);
	args_to_disk(item + offsetof(struct btrfs_balance_item, sys), &b->sys);
	ret = ub_engine_begin_op(e, ub_chunk_op_blocks(UB_MAX_LEVEL - 1) * e->fs.vol->nodesize, UB_CHUNK_OP_ADD, &t);
	if (ret)
		return ret;
	ret = ub_tree_insert_item(&e->fs.tc, ub_txn_ta(t), &e->fs.root_tree->root, &balance_key, item, sizeof(item));
	if (ret)
		ub_txn_abort(t);
	ub_engine_end_op(e);
	return ret;
}

/* The item deleted (not committed); 0 when there was none. */
static int item_delete(struct ub_engine *e)
{
	struct ub_txn *t;
	struct ub_path p;
	int ret;

	ret = ub_engine_begin_op(e, ub_chunk_op_blocks(UB_MAX_LEVEL - 1) * e->fs.vol->nodesize, UB_CHUNK_OP_FREE, &t);
	if (ret)
		return ret;
	ub_path_init(&p);
	ret = ub_tree_search_slot(&e->fs.tc, ub_txn_ta(t), &e->fs.root_tree->root, &balance_key, &p, -1, true);
	if (ret == 0)
		ret = ub_tree_del_items(&e->fs.tc, ub_txn_ta(t), &e->fs.root_tree->root, &p, p.slots[0], 1);
	else if (ret > 0)
		ret = 0;
	ub_path_release(&p);
	if (ret)
		ub_txn_abort(t);
	ub_engine_end_op(e);
	return ret;
}

/*
 * What the kernel's update_balance_args does to a resumed balance: a
 * convert goes on in soft mode (the groups already converted stay), and a
 * type without usage or convert filter takes usage=90 (the groups it moved
 * are full enough).
 */
static void resume_args(struct ub_balance *b)
{
	struct btrfs_balance_args *args[3] = { &b->data, &b->meta, &b->sys };

	for (int i = 0; i < 3; i++) {
		struct btrfs_balance_args *a = args[i];

		if (a->flags & BTRFS_BALANCE_ARGS_CONVERT)
			a->flags |= BTRFS_BALANCE_ARGS_SOFT;
		else if (!(a->flags & (BTRFS_BALANCE_ARGS_USAGE | BTRFS_BALANCE_ARGS_USAGE_RANGE))) {
			a->flags |= BTRFS_BALANCE_ARGS_USAGE;
			a->usage = 90;
		}
	}
}

enum item_mode {
	ITEM_NONE,   /* a device remove or shrink: the kernel keeps no item for those */
	ITEM_START,  /* a new balance: the item written first, refused while one is paused */
	ITEM_RESUME, /* the balance the item holds */
};

static int run_balance(struct ub_engine *e, const struct ub_balance *req, enum item_mode mode,
		       int (*progress)(void *arg, const struct ub_balance_progress *p), void *arg,
		       struct ub_balance_progress *out)
{
	struct ub_balance_progress pr = { 0 };
	struct ub_balance b;
	struct group *g = NULL;
	size_t n = 0;
	bool paused = false;
	int ret, dret;

	if (out)
		*out = pr;
	if (!e || (!req && mode != ITEM_RESUME))
		return -EINVAL;
	ret = ub_fs_live_write_lock(&e->fs);
	if (ret)
		return ret;
	if (ub_engine_broken(e))
		ret = -EROFS;
	if (!ret && mode == ITEM_RESUME) {
		ret = item_read(e, &b);
		if (ret == -ENOENT)
			ret = -ENOTCONN; /* as the kernel answers a resume with nothing paused */
		if (!ret)
			resume_args(&b);
	} else if (!ret) {
		b = *req;
		if (!(b.flags & (BTRFS_BALANCE_DATA | BTRFS_BALANCE_METADATA | BTRFS_BALANCE_SYSTEM)))
			b.flags |= BTRFS_BALANCE_DATA | BTRFS_BALANCE_METADATA | BTRFS_BALANCE_SYSTEM;
		/* as btrfs-progs: system chunks go with metadata unless asked for by themselves */
		if ((b.flags & BTRFS_BALANCE_METADATA) && !(req->flags & BTRFS_BALANCE_SYSTEM)) {
			b.flags |= BTRFS_BALANCE_SYSTEM;
			b.sys = b.meta;
		}
		b.flags &= BTRFS_BALANCE_TYPE_MASK | BTRFS_BALANCE_FORCE;
		if (mode == ITEM_START) {
			ret = item_read(e, NULL);
			if (ret == 0) {
				ub_err(&e->fs.log, "balance: a paused balance exists; resume or cancel it first");
				ret = -EINPROGRESS;
			} else if (ret == -ENOENT) {
				ret = 0;
			}
		}
	}
	if (!ret && (b.flags & BTRFS_BALANCE_DATA))
		ret = check_convert(e, &b, "data", BTRFS_BLOCK_GROUP_DATA, &b.data);
	if (!ret && (b.flags & BTRFS_BALANCE_METADATA))
		ret = check_convert(e, &b, "metadata", BTRFS_BLOCK_GROUP_METADATA, &b.meta);
	if (!ret && (b.flags & BTRFS_BALANCE_SYSTEM))
		ret = check_convert(e, &b, "system", BTRFS_BLOCK_GROUP_SYSTEM, &b.sys);
	ub_fs_live_write_unlock(&e->fs);
	if (ret)
		return ret;
	/* the item first, committed: a crash from here on leaves it for a resume (ours or the kernel's) */
	if (mode == ITEM_START) {
		ret = item_insert(e, &b);
		if (!ret)
			ret = ub_engine_commit(e);
		if (ret)
			return ret;
	}
	ret = ub_fs_live_write_lock(&e->fs);
	if (ret)
		return ret;
	ret = select_groups(e, &b, &g, &n);
	if (!ret)
		set_targets(e, &b, true);
	ub_fs_live_write_unlock(&e->fs);
	for (size_t i = 0; i < n; i++)
		pr.expected += g[i].type != 0;
	/* from the top down, as the kernel goes */
	for (size_t i = n; i-- > 0 && !ret;) {
		struct ub_reloc_stats st;

		pr.considered++;
		if (!g[i].type)
			continue;
		pr.group = g[i].start;
		ret = ub_engine_relocate_group(e, g[i].start, &st);
		if (ret == -ENOENT)
			ret = 0; /* the cleaner removed it meanwhile (it was empty) */
		if (ret)
			break;
		pr.completed++;
		pr.moved.extents += st.extents;
		pr.moved.tree_blocks += st.tree_blocks;
		pr.moved.data_bytes += st.data_bytes;
		if (progress && progress(arg, &pr)) {
			ret = -ECANCELED;
			paused = true;
			break;
		}
	}
	free(g);
	if (ub_fs_live_write_lock(&e->fs) == 0) {
		set_targets(e, &b, false);
		ub_fs_live_write_unlock(&e->fs);
	}
	/*
	 * The item goes with the last commit, but for a pause (the kernel's
	 * reset_balance_state: done, failed or cancelled alike); a crash keeps it.
	 */
	if (mode != ITEM_NONE && !paused && !ub_engine_broken(e)) {
		dret = item_delete(e);
		if (!dret)
			dret = ub_engine_commit(e);
		if (!ret)
			ret = dret;
	} else if (!ret || paused) {
		dret = ub_engine_commit(e);
		if (!ret)
			ret = dret;
	}
	if (out)
		*out = pr;
	return ret;
}

int ub_engine_balance(struct ub_engine *e, const struct ub_balance *req,
		      int (*progress)(void *arg, const struct ub_balance_progress *p), void *arg,
		      struct ub_balance_progress *out)
{
	return run_balance(e, req, ITEM_START, progress, arg, out);
}

int fsw_balance_no_item(struct ub_engine *e, const struct ub_balance *req,
			int (*progress)(void *arg, const struct ub_balance_progress *p), void *arg,
			struct ub_balance_progress *out)
{
	return run_balance(e, req, ITEM_NONE, progress, arg, out);
}

int ub_engine_balance_resume(struct ub_engine *e, int (*progress)(void *arg, const struct ub_balance_progress *p),
			     void *arg, struct ub_balance_progress *out)
{
	return run_balance(e, NULL, ITEM_RESUME, progress, arg, out);
}

int ub_engine_balance_item(struct ub_engine *e, struct ub_balance *b)
{
	int ret;

	if (!e)
		return -EINVAL;
	ret = ub_fs_live_write_lock(&e->fs);
	if (ret)
		return ret;
	ret = item_read(e, b);
	ub_fs_live_write_unlock(&e->fs);
	return ret;
}

int ub_engine_balance_cancel(struct ub_engine *e)
{
	int ret = ub_engine_balance_item(e, NULL);

	if (ret == -ENOENT)
		return -ENOTCONN;
	if (ret)
		return ret;
	ret = item_delete(e);
	if (!ret)
		ret = ub_engine_commit(e);
	return ret;
}
