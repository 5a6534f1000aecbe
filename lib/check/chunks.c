/* SPDX-License-Identifier: MIT */
/*
 * Chunks, block groups and device extents against each other: each chunk has
 * its block group and one device extent per stripe, no device extent
 * overlaps another or runs past its device, a device item's bytes_used is
 * the sum of its device extents, profiles fit the device count, and a block
 * group's used bytes are the sum of the extents in it.
 *
 * Every tree is read once, in key order, as a stream: the chunks and device
 * items (a few per GiB of filesystem) are held in memory, the device extents
 * and the extent tree are not.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check/chunks.h"

#define CH(field, p) UB_GET(btrfs_chunk, field, p)
#define UB_DEVICE_FIRST_MIB (1024ULL * 1024)

void chk_where(struct ub_chk_problem *p, uint64_t tree, const struct ub_key *k, uint64_t logical)
{
	memset(p, 0, sizeof(*p));
	p->cls = UB_CHK_CHUNK;
	p->tree = tree;
	if (k) {
		p->has_key = true;
		p->key = *k;
	}
	p->logical = logical;
}

int chk_scan_root(struct cstate *s, const struct ub_root *r, const char *name, const struct ub_key *from,
		  chk_item_fn fn)
{
	struct ub_tree_ctx *tc = ub_fs_trees(s->fs);
	struct ub_chk_problem p;
	struct ub_path path;
	const char *why;
	int ret;

	ub_path_init(&path);
	chk_capture(s->c);
	ret = ub_tree_search(tc, r, from, &path);
	/* 2: every item is below `from` (or there is none) */
	if (ret == 2 || (ret >= 0 && !path.nodes[0]))
		ret = 0;
	else
		while (ret >= 0) {
			struct ub_key k;
			uint32_t size;
			const uint8_t *d;

			chk_captured(s->c);
			ub_path_key(&path, &k);
			d = ub_path_data(&path, &size);
			ret = fn(s, &k, d, size);
			if (ret)
				break;
			chk_capture(s->c);
			ret = ub_tree_next(&path);
			if (ret == 1) {
				ret = 0;
				break;
			}
		}
	why = chk_captured(s->c);
	ub_path_release(&path);
	if (ret < 0 && ret != -ENOMEM) {
		chk_where(&p, r->objectid, NULL, 0);
		if (s->scan_cls)
			p.cls = s->scan_cls;
		/* a block that failed before fails again quietly: the tree pass has named it */
		chk_report(s->c, &p, "%s cannot be read to its end: %s%s", name, *why ? why : strerror(-ret),
			   *why ? "" : " (the tree block problem above names the block)");
		return 1;
	}
	return ret;
}

int chk_scan_tree(struct cstate *s, uint64_t tree, const struct ub_key *from, chk_item_fn fn)
{
	struct ub_chk_problem p;
	struct ub_root r;
	char name[32];
	int ret = ub_fs_tree_root(s->fs, tree, &r);

	if (ret == -ENOENT) {
		chk_where(&p, tree, NULL, 0);
		if (s->scan_cls)
			p.cls = s->scan_cls;
		chk_report(s->c, &p, "%s is missing", ub_tree_name(tree, name, sizeof(name)));
		return 1;
	}
	if (ret)
		return ret;
	return chk_scan_root(s, &r, ub_tree_name(tree, name, sizeof(name)), from, fn);
}

/* The chunk holding `logical`, or -1. */
long chk_find_chunk(const struct cstate *s, uint64_t logical)
{
	size_t lo = 0, hi = s->nch;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (s->ch[mid].logical + s->ch[mid].length <= logical)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < s->nch && s->ch[lo].logical <= logical ? (long)lo : -1;
}

static struct dinfo *find_dev(struct cstate *s, uint64_t devid)
{
	for (size_t i = 0; i < s->ndev; i++)
		if (s->dev[i].devid == devid)
			return &s->dev[i];
	return NULL;
}

/* Bytes each stripe of a chunk holds. */
static uint64_t stripe_size(uint64_t type, uint64_t length, unsigned num, unsigned sub)
{
	const struct ub_profile *pr = ub_profile_of(type);
	unsigned data;

	if (!pr || !num)
		return 0;
	if (pr->nparity)
		data = num > (unsigned)pr->nparity ? num - (unsigned)pr->nparity : 0;
	else if (pr->sub_stripes > 1)
		data = sub ? num / sub : 0;
	else if (pr->ncopies > 1)
		data = 1;
	else
		data = num;
	return data ? length / data : 0;
}

static int chunk_item(struct cstate *s, const struct ub_key *k, const uint8_t *d, uint32_t size)
{
	struct ub_chk_problem p;
	struct cinfo *ci;
	unsigned num;

	if (k->type == BTRFS_DEV_ITEM_KEY) {
		if (size < sizeof(struct btrfs_dev_item))
			return 0;
		if (chk_reserve(&s->dev, &s->dcap, s->ndev, sizeof(*s->dev), 8))
			return -ENOMEM;
		s->dev[s->ndev] = (struct dinfo){ .devid = UB_GET(btrfs_dev_item, devid, d),
						  .total = UB_GET(btrfs_dev_item, total_bytes, d),
						  .used = UB_GET(btrfs_dev_item, bytes_used, d) };
		memcpy(s->dev[s->ndev].uuid, UB_PTR(btrfs_dev_item, uuid, d), UB_UUID_SIZE);
		s->ndev++;
		{
			const uint8_t *sb = ub_volume_super(ub_fs_volume(s->fs));
			const uint8_t *want = UB_GET(ub_disk_super, incompat_flags, sb) & BTRFS_FEATURE_INCOMPAT_METADATA_UUID
						      ? UB_PTR(ub_disk_super, metadata_uuid, sb)
						      : UB_PTR(ub_disk_super, fsid, sb);

			/* the kernel takes a device item of another fsid for a seed device's: this one goes missing */
			if (memcmp(UB_PTR(btrfs_dev_item, fsid, d), want, UB_FSID_SIZE)) {
				chk_where(&p, BTRFS_CHUNK_TREE_OBJECTID, k, 0);
				p.devid = UB_GET(btrfs_dev_item, devid, d);
				chk_report(s->c, &p, "the device item of devid %llu names another filesystem's fsid",
					   (unsigned long long)p.devid);
			}
		}
		return 0;
	}
	if (k->type != BTRFS_CHUNK_ITEM_KEY || size < offsetof(struct btrfs_chunk, stripe))
		return 0;
	num = (unsigned)CH(num_stripes, d);
	/* the tree checker has matched the item size to num_stripes */
	if (size < offsetof(struct btrfs_chunk, stripe) + (size_t)num * sizeof(struct btrfs_stripe))
		return 0;
	if (chk_reserve(&s->ch, &s->cap, s->nch, sizeof(*s->ch), 64))
		return -ENOMEM;
	ci = &s->ch[s->nch];
	memset(ci, 0, sizeof(*ci));
	ci->logical = k->offset;
	ci->length = CH(length, d);
	ci->type = CH(type, d);
	ci->num = (uint16_t)num;
	ci->stripe_size = stripe_size(ci->type, ci->length, num, (unsigned)CH(sub_stripes, d));
	ci->st = calloc(num ? num : 1, sizeof(*ci->st));
	if (!ci->st)
		return -ENOMEM;
	for (unsigned i = 0; i < num; i++) {
		const uint8_t *st = d + offsetof(struct btrfs_chunk, stripe) + (size_t)i * sizeof(struct btrfs_stripe);

		ci->st[i].devid = UB_GET(btrfs_stripe, devid, st);
		ci->st[i].physical = UB_GET(btrfs_stripe, offset, st);
		memcpy(ci->st[i].dev_uuid, UB_PTR(btrfs_stripe, dev_uuid, st), UB_UUID_SIZE);
	}
	s->nch++;
	chk_where(&p, BTRFS_CHUNK_TREE_OBJECTID, k, ci->logical);
	if (s->nch > 1 && s->ch[s->nch - 2].logical + s->ch[s->nch - 2].length > ci->logical)
		chk_report(s->c, &p, "chunk %llu overlaps chunk %llu (length %llu)", (unsigned long long)ci->logical,
			   (unsigned long long)s->ch[s->nch - 2].logical, (unsigned long long)s->ch[s->nch - 2].length);
	if (!ci->length || ci->length % s->sectorsize)
		chk_report(s->c, &p, "chunk length %llu is not a positive multiple of the sector size",
			   (unsigned long long)ci->length);
	if (!(ci->type & BTRFS_BLOCK_GROUP_TYPE_MASK))
		chk_report(s->c, &p, "chunk type 0x%llx has no data, metadata or system bit",
			   (unsigned long long)ci->type);
	if (!ub_profile_stripes_valid(ci->type, num, (unsigned)CH(sub_stripes, d)))
		chk_report(s->c, &p, "%s chunk with %u stripes (sub_stripes %u) breaks the profile's rules",
			   ub_profile_name(ci->type), num, (unsigned)CH(sub_stripes, d));
	return 0;
}

/*
 * The superblock's system chunk array against the chunk tree: the same SYSTEM
 * chunks, stripe for stripe (the array is how the chunk tree is found, the
 * tree is what a commit changes).
 */
static void check_sys_array(struct cstate *s, const uint8_t *sb)
{
	const uint8_t *arr = UB_PTR(ub_disk_super, sys_chunk_array, sb);
	uint32_t size = (uint32_t)UB_GET(ub_disk_super, sys_chunk_array_size, sb), pos = 0;
	const uint32_t hdr = (uint32_t)offsetof(struct btrfs_chunk, stripe);
	/* every entry holds a key and a chunk with at least one stripe */
	uint64_t listed[UB_SYSTEM_CHUNK_ARRAY_SIZE / (UB_DISK_KEY_SIZE + sizeof(struct btrfs_chunk)) + 1];
	size_t nlisted = 0;
	struct ub_chk_problem p;

	memset(&p, 0, sizeof(p));
	p.cls = UB_CHK_SUPER;
	if (size > UB_SYSTEM_CHUNK_ARRAY_SIZE)
		return; /* the volume refused it already */
	while (pos + UB_DISK_KEY_SIZE + hdr <= size && nlisted < sizeof(listed) / sizeof(listed[0])) {
		struct ub_key k;
		const uint8_t *c = arr + pos + UB_DISK_KEY_SIZE;
		unsigned num = (unsigned)CH(num_stripes, c);
		uint32_t len = hdr + num * (uint32_t)sizeof(struct btrfs_stripe);
		long i;
		bool same;

		ub_key_read(&k, arr + pos);
		if (!num || pos + UB_DISK_KEY_SIZE + len > size)
			break;
		pos += UB_DISK_KEY_SIZE + len;
		listed[nlisted++] = k.offset;
		p.logical = k.offset;
		i = chk_find_chunk(s, k.offset);
		if (i < 0 || s->ch[i].logical != k.offset) {
			chk_report(s->c, &p, "system chunk array: chunk %llu is not in the chunk tree",
				   (unsigned long long)k.offset);
			continue;
		}
		same = CH(length, c) == s->ch[i].length && CH(type, c) == s->ch[i].type && num == s->ch[i].num;
		for (unsigned j = 0; same && j < num; j++) {
			const uint8_t *st = c + hdr + (size_t)j * sizeof(struct btrfs_stripe);

			same = UB_GET(btrfs_stripe, devid, st) == s->ch[i].st[j].devid &&
			       UB_GET(btrfs_stripe, offset, st) == s->ch[i].st[j].physical;
		}
		if (!same)
			chk_report(s->c, &p, "system chunk array: chunk %llu differs from the chunk tree's",
				   (unsigned long long)k.offset);
	}
	for (size_t i = 0; i < s->nch; i++) {
		bool found = false;

		if (!(s->ch[i].type & BTRFS_BLOCK_GROUP_SYSTEM))
			continue;
		for (size_t j = 0; j < nlisted; j++)
			found |= listed[j] == s->ch[i].logical;
		if (!found) {
			p.logical = s->ch[i].logical;
			chk_report(s->c, &p, "SYSTEM chunk %llu is not in the superblock's system chunk array",
				   (unsigned long long)s->ch[i].logical);
		}
	}
}

/* The chunk tree's device items against the devices' own superblocks and the superblock's total. */
static void check_dev_items(struct cstate *s, const uint8_t *sb)
{
	struct ub_chk_problem p;
	uint64_t total = 0;

	memset(&p, 0, sizeof(p));
	p.cls = UB_CHK_SUPER;
	for (size_t i = 0; i < s->ndev; i++)
		total += s->dev[i].total;
	/* the kernel refuses to mount when the devices hold more than the superblock says */
	if (UB_GET(ub_disk_super, total_bytes, sb) < total)
		chk_report(s->c, &p, "superblock total_bytes %llu, the device items sum to %llu",
			   (unsigned long long)UB_GET(ub_disk_super, total_bytes, sb), (unsigned long long)total);
	for (size_t i = 0; i < s->c->ndev_supers; i++) {
		const struct chk_dev_super *e = &s->c->dev_supers[i];
		struct dinfo *dv = find_dev(s, e->devid);

		p.devid = e->devid;
		p.path = e->path;
		if (!dv)
			chk_report(s->c, &p, "the device's superblock names devid %llu, which has no device item",
				   (unsigned long long)e->devid);
		else if (memcmp(dv->uuid, e->uuid, UB_UUID_SIZE))
			chk_report(s->c, &p, "the device's uuid is not the one its device item names");
		else if (dv->total != e->total_bytes)
			chk_report(s->c, &p, "the device's superblock says %llu bytes, its device item %llu",
				   (unsigned long long)e->total_bytes, (unsigned long long)dv->total);
	}
}

/*
 * The first MiB of a device holds the primary superblock (and what boot
 * loaders put before it): no tool gives it to a chunk. Old filesystems mapped
 * their first chunk 1:1 from logical 0 and keep the area out of the block
 * group instead: a chunk that starts below 1 MiB of logical space may.
 */
static bool in_first_mib(uint64_t chunk_logical, uint64_t physical)
{
	return physical < UB_DEVICE_FIRST_MIB && chunk_logical >= UB_DEVICE_FIRST_MIB;
}

/* Once all chunks and dev items are in: what needs both. */
static void check_chunk_devices(struct cstate *s)
{
	struct ub_chk_problem p;

	for (size_t i = 0; i < s->nch; i++) {
		struct cinfo *ci = &s->ch[i];
		const struct ub_profile *pr = ub_profile_of(ci->type);
		struct ub_key k = { BTRFS_FIRST_CHUNK_TREE_OBJECTID, BTRFS_CHUNK_ITEM_KEY, ci->logical };

		chk_where(&p, BTRFS_CHUNK_TREE_OBJECTID, &k, ci->logical);
		if (pr && pr->devs_min > 0 && s->ndev < (size_t)pr->devs_min)
			chk_report(s->c, &p, "%s chunk needs at least %d devices, the filesystem has %zu",
				   ub_profile_name(ci->type), pr->devs_min, s->ndev);
		for (unsigned j = 0; j < ci->num; j++) {
			struct dinfo *dv = find_dev(s, ci->st[j].devid);

			p.devid = ci->st[j].devid;
			p.physical = ci->st[j].physical;
			if (in_first_mib(ci->logical, ci->st[j].physical))
				chk_report(s->c, &p, "stripe %u (devid %llu physical %llu) lies in the device's first MiB, which holds the superblock and is given to no chunk",
					   j, (unsigned long long)ci->st[j].devid, (unsigned long long)ci->st[j].physical);
			if (!dv) {
				chk_report(s->c, &p, "stripe %u is on devid %llu, which has no device item", j,
					   (unsigned long long)ci->st[j].devid);
				continue;
			}
			/* the kernel finds a stripe's device by devid and uuid: another uuid is a missing device */
			if (memcmp(ci->st[j].dev_uuid, dv->uuid, UB_UUID_SIZE))
				chk_report(s->c, &p, "stripe %u names devid %llu with a device uuid that is not its device item's", j,
					   (unsigned long long)ci->st[j].devid);
			if (ci->st[j].physical + ci->stripe_size > dv->total)
				chk_report(s->c, &p, "stripe %u (%llu bytes at %llu) runs past the end of devid %llu (%llu bytes)",
					   j, (unsigned long long)ci->stripe_size, (unsigned long long)ci->st[j].physical,
					   (unsigned long long)dv->devid, (unsigned long long)dv->total);
			/* two copies on one device protect nothing: only DUP may do that */
			if (!(ci->type & BTRFS_BLOCK_GROUP_DUP))
				for (unsigned m = 0; m < j; m++)
					if (ci->st[m].devid == ci->st[j].devid)
						chk_report(s->c, &p, "stripes %u and %u are both on devid %llu", m, j,
							   (unsigned long long)ci->st[j].devid);
		}
	}
}

static int dev_extent(struct cstate *s, const struct ub_key *k, const uint8_t *d, uint32_t size)
{
	struct ub_chk_problem p;
	struct dinfo *dv;
	uint64_t len, logical;
	long ci;

	if (k->type != BTRFS_DEV_EXTENT_KEY || size < sizeof(struct btrfs_dev_extent))
		return 0;
	s->c->sum.dev_extents++;
	len = UB_GET(btrfs_dev_extent, length, d);
	logical = UB_GET(btrfs_dev_extent, chunk_offset, d);
	chk_where(&p, BTRFS_DEV_TREE_OBJECTID, k, logical);
	p.devid = k->objectid;
	p.physical = k->offset;
	if (s->prev_devid == k->objectid && k->offset < s->prev_dev_end)
		chk_report(s->c, &p, "device extent at %llu overlaps the one before it (ending at %llu)",
			   (unsigned long long)k->offset, (unsigned long long)s->prev_dev_end);
	s->prev_devid = k->objectid;
	s->prev_dev_end = k->offset + len;
	dv = find_dev(s, k->objectid);
	if (!dv)
		chk_report(s->c, &p, "device extent on devid %llu, which has no device item",
			   (unsigned long long)k->objectid);
	else {
		dv->extents_sum += len;
		if (k->offset + len > dv->total)
			chk_report(s->c, &p, "device extent (%llu bytes at %llu) runs past the end of devid %llu (%llu bytes)",
				   (unsigned long long)len, (unsigned long long)k->offset,
				   (unsigned long long)dv->devid, (unsigned long long)dv->total);
	}
	ci = chk_find_chunk(s, logical);
	if (in_first_mib(ci >= 0 ? s->ch[ci].logical : logical, k->offset))
		chk_report(s->c, &p, "device extent at %llu lies in the device's first MiB, which holds the superblock and is given to no chunk",
			   (unsigned long long)k->offset);
	if (ci < 0 || s->ch[ci].logical != logical) {
		if (!s->chunks_incomplete)
			chk_report(s->c, &p, "device extent for chunk %llu, which does not exist", (unsigned long long)logical);
		return 0;
	}
	for (unsigned i = 0; i < s->ch[ci].num; i++) {
		struct cstripe *st = &s->ch[ci].st[i];

		if (st->devid != k->objectid || st->physical != k->offset)
			continue;
		if (st->found)
			chk_report(s->c, &p, "a second device extent for stripe %u of chunk %llu", i,
				   (unsigned long long)logical);
		st->found = true;
		if (len != s->ch[ci].stripe_size)
			chk_report(s->c, &p, "device extent length %llu, its chunk's stripes hold %llu",
				   (unsigned long long)len, (unsigned long long)s->ch[ci].stripe_size);
		return 0;
	}
	chk_report(s->c, &p, "chunk %llu has no stripe at devid %llu physical %llu", (unsigned long long)logical,
		   (unsigned long long)k->objectid, (unsigned long long)k->offset);
	return 0;
}

static void block_group(struct cstate *s, const struct ub_key *k, const uint8_t *d, uint32_t size, uint64_t tree)
{
	struct ub_chk_problem p;
	long i;

	if (size < sizeof(struct btrfs_block_group_item))
		return;
	s->c->sum.block_groups++;
	chk_where(&p, tree, k, k->objectid);
	i = chk_find_chunk(s, k->objectid);
	if (i < 0 || s->ch[i].logical != k->objectid) {
		if (!s->chunks_incomplete)
			chk_report(s->c, &p, "block group %llu has no chunk", (unsigned long long)k->objectid);
		return;
	}
	if (s->ch[i].bg)
		chk_report(s->c, &p, "a second block group for chunk %llu", (unsigned long long)k->objectid);
	s->ch[i].bg = true;
	s->ch[i].bg_used = UB_GET(btrfs_block_group_item, used, d);
	if (k->offset != s->ch[i].length)
		chk_report(s->c, &p, "block group length %llu, its chunk's %llu", (unsigned long long)k->offset,
			   (unsigned long long)s->ch[i].length);
	if (UB_GET(btrfs_block_group_item, flags, d) != s->ch[i].type)
		chk_report(s->c, &p, "block group flags 0x%llx, its chunk's type 0x%llx",
			   (unsigned long long)UB_GET(btrfs_block_group_item, flags, d),
			   (unsigned long long)s->ch[i].type);
	if (s->ch[i].bg_used > k->offset)
		chk_report(s->c, &p, "block group used %llu exceeds its length %llu", (unsigned long long)s->ch[i].bg_used,
			   (unsigned long long)k->offset);
}

static int bg_item(struct cstate *s, const struct ub_key *k, const uint8_t *d, uint32_t size)
{
	if (k->type == BTRFS_BLOCK_GROUP_ITEM_KEY)
		block_group(s, k, d, size, BTRFS_BLOCK_GROUP_TREE_OBJECTID);
	return 0;
}

/*
 * An extent over the stripe of a superblock copy: the kernel keeps those
 * ranges out of every block group (the next commit's superblock writes land
 * there), as it keeps [start, 64 KiB) out of a group that starts below the
 * primary copy (old 1:1 layouts).
 */
static void super_overlap(struct cstate *s, struct cinfo *ci, struct ub_chk_problem *p, uint64_t start, uint64_t len)
{
	if (!ci->sup_known) {
		const struct ub_chunk *c = ub_volume_find_chunk(ub_fs_volume(s->fs), ci->logical);
		int max = 1 + UB_SUPER_MIRROR_MAX * (c ? c->num_stripes : 0);

		ci->sup_known = true;
		if (!c || c->logical != ci->logical)
			return;
		ci->sup_start = calloc((size_t)max, sizeof(uint64_t));
		ci->sup_len = calloc((size_t)max, sizeof(uint64_t));
		if (!ci->sup_start || !ci->sup_len || ub_chunk_super_ranges(c, ci->sup_start, ci->sup_len, max, &ci->nsup)) {
			ci->nsup = 0; /* not judged */
			return;
		}
		if (ci->nsup && ci->sup_start[0] == ci->logical && ci->logical < UB_DEVICE_FIRST_MIB)
			ci->sup_len[0] = ci->logical < UB_SUPER_INFO_OFFSET ? UB_SUPER_INFO_OFFSET - ci->logical : 0;
	}
	for (int j = 0; j < ci->nsup; j++)
		if (start < ci->sup_start[j] + ci->sup_len[j] && ci->sup_start[j] < start + len) {
			chk_report(s->c, p, "extent [%llu, +%llu) lies over [%llu, +%llu), the stripe of a superblock copy, which the kernel keeps out of every block group",
				   (unsigned long long)start, (unsigned long long)len, (unsigned long long)ci->sup_start[j],
				   (unsigned long long)ci->sup_len[j]);
			return;
		}
}

static int extent_item(struct cstate *s, const struct ub_key *k, const uint8_t *d, uint32_t size)
{
	struct ub_chk_problem p;
	uint64_t len;
	long i;

	chk_data_refs_item(s, k, d, size);
	if (k->type == BTRFS_BLOCK_GROUP_ITEM_KEY) {
		block_group(s, k, d, size, BTRFS_EXTENT_TREE_OBJECTID);
		return 0;
	}
	if (k->type == BTRFS_TREE_BLOCK_REF_KEY || k->type == BTRFS_SHARED_BLOCK_REF_KEY) {
		chk_block_ref_keyed(s->c, k);
		return 0;
	}
	if (k->type != BTRFS_EXTENT_ITEM_KEY && k->type != BTRFS_METADATA_ITEM_KEY)
		return 0;
	chk_extent_refs_item(s->c, k, d, size, s->nodesize, &s->blocks_cursor);
	len = k->type == BTRFS_METADATA_ITEM_KEY ? s->nodesize : k->offset;
	chk_space_cache_extent(s, k->objectid, len);
	s->c->sum.extents++;
	chk_where(&p, BTRFS_EXTENT_TREE_OBJECTID, k, k->objectid);
	if (s->prev_ext_end > k->objectid)
		chk_report(s->c, &p, "extent [%llu, +%llu) overlaps the extent at %llu (ending at %llu)",
			   (unsigned long long)k->objectid, (unsigned long long)len, (unsigned long long)s->prev_ext,
			   (unsigned long long)s->prev_ext_end);
	if (size >= sizeof(struct btrfs_extent_item)) {
		uint64_t gen = UB_GET(btrfs_extent_item, generation, d);

		if (!gen || gen > s->c->super_generation) {
			p.cls = UB_CHK_EXTENT;
			/* a tree block's item gets its header's generation (extent_refs.c says which); data the last commit's */
			if (k->type == BTRFS_EXTENT_ITEM_KEY && (UB_GET(btrfs_extent_item, flags, d) & BTRFS_EXTENT_FLAG_DATA)) {
				p.fix = UB_CHK_FIX_EXTENT_GEN;
				p.want = s->c->super_generation;
			}
			chk_report(s->c, &p, "extent item generation %llu, expected in [1, %llu]", (unsigned long long)gen,
				   (unsigned long long)s->c->super_generation);
			p.cls = UB_CHK_CHUNK;
			p.fix = UB_CHK_FIX_NONE;
			p.want = 0;
		}
	}
	if (k->objectid + len > s->prev_ext_end) {
		s->prev_ext = k->objectid;
		s->prev_ext_end = k->objectid + len;
	}
	i = chk_find_chunk(s, k->objectid);
	if (i < 0) {
		if (!s->chunks_incomplete)
			chk_report(s->c, &p, "extent [%llu, +%llu) is in no chunk", (unsigned long long)k->objectid,
				   (unsigned long long)len);
		return 0;
	}
	if (k->objectid + len > s->ch[i].logical + s->ch[i].length)
		chk_report(s->c, &p, "extent [%llu, +%llu) runs past the end of chunk %llu",
			   (unsigned long long)k->objectid, (unsigned long long)len, (unsigned long long)s->ch[i].logical);
	s->ch[i].extents_sum += len;
	super_overlap(s, &s->ch[i], &p, k->objectid, len);
	chk_parity_mark(s, &s->ch[i], k->objectid, len);
	if (s->ch[i].type & BTRFS_BLOCK_GROUP_DATA)
		s->c->sum.data_bytes += len;
	{
		bool tree_block = k->type == BTRFS_METADATA_ITEM_KEY ||
				  (size >= sizeof(struct btrfs_extent_item) &&
				   (UB_GET(btrfs_extent_item, flags, d) & BTRFS_EXTENT_FLAG_TREE_BLOCK));
		uint64_t want = tree_block ? BTRFS_BLOCK_GROUP_METADATA | BTRFS_BLOCK_GROUP_SYSTEM : BTRFS_BLOCK_GROUP_DATA;

		if (!(s->ch[i].type & want))
			chk_report(s->c, &p, "%s extent in chunk %llu of type 0x%llx", tree_block ? "tree block" : "data",
				   (unsigned long long)s->ch[i].logical, (unsigned long long)s->ch[i].type);
	}
	return 0;
}

/* What only the whole of every stream can tell. */
static void check_totals(struct cstate *s)
{
	struct ub_chk_problem p;

	for (size_t i = 0; i < s->nch; i++) {
		struct cinfo *ci = &s->ch[i];
		struct ub_key k = { BTRFS_FIRST_CHUNK_TREE_OBJECTID, BTRFS_CHUNK_ITEM_KEY, ci->logical };

		chk_where(&p, BTRFS_CHUNK_TREE_OBJECTID, &k, ci->logical);
		if (!ci->bg && !s->bg_incomplete)
			chk_report(s->c, &p, "chunk %llu (%s, %llu bytes) has no block group", (unsigned long long)ci->logical,
				   ub_profile_name(ci->type), (unsigned long long)ci->length);
		if (ci->bg && !s->extents_incomplete && ci->bg_used != ci->extents_sum) {
			p.tree = BTRFS_EXTENT_TREE_OBJECTID;
			k = (struct ub_key){ ci->logical, BTRFS_BLOCK_GROUP_ITEM_KEY, ci->length };
			p.key = k;
			p.fix = UB_CHK_FIX_SPACE;
			chk_report(s->c, &p, "block group %llu: used %llu, its extents sum to %llu",
				   (unsigned long long)ci->logical, (unsigned long long)ci->bg_used,
				   (unsigned long long)ci->extents_sum);
			p.tree = BTRFS_CHUNK_TREE_OBJECTID;
			p.fix = UB_CHK_FIX_NONE;
		}
		for (unsigned j = 0; j < ci->num && !s->devext_incomplete; j++)
			if (!ci->st[j].found) {
				p.devid = ci->st[j].devid;
				p.physical = ci->st[j].physical;
				chk_report(s->c, &p, "stripe %u (devid %llu physical %llu) has no device extent", j,
					   (unsigned long long)ci->st[j].devid, (unsigned long long)ci->st[j].physical);
				p.devid = p.physical = 0;
			}
	}
	if (!s->bg_incomplete && s->newest_root) {
		const uint8_t *sb = ub_volume_super(ub_fs_volume(s->fs));
		uint64_t used = 0;

		for (size_t i = 0; i < s->nch; i++)
			used += s->ch[i].bg_used;
		memset(&p, 0, sizeof(p));
		p.cls = UB_CHK_SUPER;
		p.fix = UB_CHK_FIX_SPACE;
		if (used != UB_GET(ub_disk_super, bytes_used, sb))
			chk_report(s->c, &p, "superblock bytes_used %llu, the block groups' used bytes sum to %llu",
				   (unsigned long long)UB_GET(ub_disk_super, bytes_used, sb), (unsigned long long)used);
	}
	for (size_t i = 0; i < s->ndev && !s->devext_incomplete; i++) {
		struct ub_key k = { BTRFS_DEV_ITEMS_OBJECTID, BTRFS_DEV_ITEM_KEY, s->dev[i].devid };

		chk_where(&p, BTRFS_CHUNK_TREE_OBJECTID, &k, 0);
		p.devid = s->dev[i].devid;
		p.fix = UB_CHK_FIX_DEV_USED;
		p.want = s->dev[i].extents_sum;
		if (s->dev[i].used != s->dev[i].extents_sum)
			chk_report(s->c, &p, "devid %llu: bytes_used %llu, its device extents sum to %llu",
				   (unsigned long long)s->dev[i].devid, (unsigned long long)s->dev[i].used,
				   (unsigned long long)s->dev[i].extents_sum);
	}
}

int chk_chunks(struct ub_checker *c, struct ub_fs *fs)
{
	struct ub_volume_info vi;
	struct cstate s = { .c = c, .fs = fs };
	const uint8_t *sb = ub_volume_super(ub_fs_volume(fs));
	struct ub_key from = { 0, 0, 0 };
	bool v1 = false;
	int ret = ub_volume_get_info(ub_fs_volume(fs), &vi);

	if (ret)
		return ret;
	s.nodesize = vi.nodesize;
	s.sectorsize = vi.sectorsize;
	{
		struct ub_root rt;

		s.newest_root = !ub_fs_tree_root(fs, BTRFS_ROOT_TREE_OBJECTID, &rt) &&
				rt.bytenr == UB_GET(ub_disk_super, root, sb);
	}
	chk_progress(c, "chunks", 0, 0);
	ret = chk_scan_tree(&s, BTRFS_CHUNK_TREE_OBJECTID, &from, chunk_item);
	s.chunks_incomplete = ret == 1;
	c->sum.chunks = s.nch;
	if (ret == 0 && s.newest_root) {
		check_sys_array(&s, sb);
		check_dev_items(&s, sb);
	}
	if (ret >= 0) {
		check_chunk_devices(&s);
		chk_progress(c, "device extents", 0, 0);
		ret = chk_scan_tree(&s, BTRFS_DEV_TREE_OBJECTID, &from, dev_extent);
		s.devext_incomplete = ret == 1;
	}
	if (ret >= 0 && (UB_GET(ub_disk_super, compat_ro_flags, sb) & BTRFS_FEATURE_COMPAT_RO_BLOCK_GROUP_TREE)) {
		ret = chk_scan_tree(&s, BTRFS_BLOCK_GROUP_TREE_OBJECTID, &from, bg_item);
		s.bg_incomplete = ret == 1;
	}
	/*
	 * The v1 space cache, when the superblock says it is current and no free
	 * space tree replaces it (the kernel then ignores it).
	 */
	if (ret >= 0 && !(UB_GET(ub_disk_super, compat_ro_flags, sb) & BTRFS_FEATURE_COMPAT_RO_FREE_SPACE_TREE) &&
	    UB_GET(ub_disk_super, cache_generation, sb) == UB_GET(ub_disk_super, generation, sb) && s.newest_root) {
		chk_progress(c, "space cache", 0, 0);
		v1 = true;
		ret = chk_space_cache_load(&s);
	}
	if (ret >= 0) {
		chk_progress(c, "extents", 0, 0);
		ret = chk_scan_tree(&s, BTRFS_EXTENT_TREE_OBJECTID, &from, extent_item);
		s.extents_incomplete = ret == 1;
		if (ret == 1)
			chk_extent_refs_missing(c);
		if (ret == 0) {
			chk_extent_refs_end(c, &s.blocks_cursor);
			chk_data_refs_end(&s);
			chk_qgroup_data_done(c);
		}
		if (!(UB_GET(ub_disk_super, compat_ro_flags, sb) & BTRFS_FEATURE_COMPAT_RO_BLOCK_GROUP_TREE))
			s.bg_incomplete = s.extents_incomplete;
	}
	if (ret >= 0)
		check_totals(&s);
	if (ret >= 0 && v1 && !s.extents_incomplete && !s.bg_incomplete)
		chk_space_cache_check(&s);
	/* the free space tree, when the filesystem keeps one and says it is valid */
	if (ret >= 0 && !s.extents_incomplete && !s.bg_incomplete && !s.chunks_incomplete &&
	    (UB_GET(ub_disk_super, compat_ro_flags, sb) & BTRFS_FEATURE_COMPAT_RO_FREE_SPACE_TREE) &&
	    (UB_GET(ub_disk_super, compat_ro_flags, sb) & BTRFS_FEATURE_COMPAT_RO_FREE_SPACE_TREE_VALID)) {
		chk_progress(c, "free space", 0, 0);
		ret = chk_scan_tree(&s, BTRFS_FREE_SPACE_TREE_OBJECTID, &from, chk_free_space_item);
		if (ret == 0)
			chk_free_space_check(&s);
		else if (ret == 1)
			ret = 0;
	}
	/* the checksum tree's items against the chunk map */
	if (ret >= 0 && !s.chunks_incomplete) {
		s.csum_size = vi.csum_size;
		s.csum_type = vi.csum_type;
		chk_progress(c, "checksums", 0, 0);
		/* a pending fsync log may hold extents the extent tree gets only when the log is replayed */
		ret = chk_csum_begin(&s, !s.extents_incomplete && !UB_GET(ub_disk_super, log_root, sb));
		if (!ret)
			ret = chk_scan_tree(&s, BTRFS_CSUM_TREE_OBJECTID, &from, chk_csum_item);
		if (ret == 1)
			ret = 0;
		chk_csum_end(&s);
	}
	/* RAID5/6 parity of every full stripe with extents (--check-data-csum) */
	if (ret >= 0 && !s.extents_incomplete && c->opts.check_data_csum) {
		chk_progress(c, "parity", 0, 0);
		chk_parity_verify(&s);
	}
	for (size_t i = 0; i < s.nch; i++) {
		free(s.ch[i].st);
		free(s.ch[i].full_used);
		free(s.ch[i].sup_start);
		free(s.ch[i].sup_len);
	}
	free(s.ch);
	free(s.dev);
	free(s.drefs);
	free(s.v1);
	return ret < 0 ? ret : 0;
}
