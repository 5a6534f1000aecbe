/* SPDX-License-Identifier: MIT */
/*
 * lib/alloc/chunk_alloc.c on memory devices made by lib/mkfs: a planned chunk
 * becomes exactly the items it must (checked by reading the trees back, and
 * against the plan recomputed from the holes), the sys chunk array follows a
 * SYSTEM chunk, an abort undoes everything outside the trees, a commit makes
 * it stick (reopen: mapped, block group loaded with its free space), and
 * running out of device space is -ENOSPC with nothing changed. btrfs check
 * and the kernel judge real images in tests/integration/test_enospc.py.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "txn/txn.h"
#include "alloc/alloc_internal.h"
#include "alloc/chunk_alloc.h"
#include "ubtrfs/mkfs.h"

#define MiB (1024ULL * 1024)

static const struct ub_log quiet = { .fn = NULL, .arg = NULL, .verbosity = -1, .errors = NULL };

struct fx {
	uint8_t *bufs[4];
	int n;
	uint64_t size;
	struct ub_engine *e;
	struct ub_txn *t;
	struct ub_eroot *dev;
	struct ub_chunk_ctx cc;
};

static void open_devs(struct fx *f, struct ub_dev **devs)
{
	for (int i = 0; i < f->n; i++) {
		char name[16];
		snprintf(name, sizeof(name), "mem%d", i);
		assert_int_equal(ub_dev_open_mem(name, f->bufs[i], f->size, true, &devs[i]), 0);
	}
}

static void fx_make(struct fx *f, int n, uint64_t size, uint64_t meta, uint64_t data)
{
	struct ub_dev *devs[4];
	struct ub_mkfs_opts o;

	memset(f, 0, sizeof(*f));
	f->n = n;
	f->size = size;
	for (int i = 0; i < n; i++)
		assert_non_null(f->bufs[i] = calloc(1, size));
	ub_mkfs_opts_init(&o);
	o.meta_profile = meta;
	o.data_profile = data;
	o.now = 1700000000;
	open_devs(f, devs);
	assert_int_equal(ub_mkfs(devs, n, &o, &quiet, NULL), 0);
}

static void fx_open(struct fx *f)
{
	struct ub_dev *devs[4];

	open_devs(f, devs);
	assert_int_equal(ub_engine_open_devs(devs, f->n, &quiet, &f->e), 0);
	assert_int_equal(ub_engine_root(f->e, BTRFS_DEV_TREE_OBJECTID, &f->dev), 0);
	assert_int_equal(ub_txn_start(f->e, &f->t), 0);
	f->cc = (struct ub_chunk_ctx){
		.tc = &f->e->fs.tc,
		.ta = ub_txn_ta(f->t),
		.vol = f->e->fs.vol,
		.alloc = f->e->alloc,
		.chunk_root = &f->e->fs.chunk_tree->root,
		.dev_root = &f->dev->root,
		.extent_root = &f->e->fs.extent_tree->root,
		.fst_root = f->e->fs.fst_tree ? &f->e->fs.fst_tree->root : NULL,
	};
}

static void fx_close(struct fx *f)
{
	if (f->t)
		ub_txn_abort(f->t);
	f->t = NULL;
	ub_engine_close(f->e);
	f->e = NULL;
}

static void fx_free(struct fx *f)
{
	for (int i = 0; i < f->n; i++)
		free(f->bufs[i]);
}

/* The item at key in root: its bytes copied to out (up to cap), size returned; -ENOENT if none. */
static int get_item(struct fx *f, const struct ub_root *root, uint64_t oid, uint8_t type, uint64_t off, uint8_t *out,
		    uint32_t cap)
{
	struct ub_key k = { oid, type, off };
	struct ub_path p;
	const uint8_t *d;
	uint32_t size;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_lookup(&f->e->fs.tc, root, &k, &p, &d, &size);
	if (ret == 0) {
		memcpy(out, d, size < cap ? size : cap);
		ret = (int)size;
	}
	ub_path_release(&p);
	return ret;
}

static uint64_t dev_bytes_used(struct fx *f, uint64_t devid)
{
	uint8_t di[sizeof(struct btrfs_dev_item)];

	assert_int_equal(get_item(f, &f->e->fs.chunk_tree->root, BTRFS_DEV_ITEMS_OBJECTID, BTRFS_DEV_ITEM_KEY, devid, di,
				  sizeof(di)),
			 (int)sizeof(di));
	return UB_GET(btrfs_dev_item, bytes_used, di);
}

static const struct ub_vdev *vdev(struct fx *f, uint64_t devid)
{
	for (int i = 0; i < f->e->fs.vol->nvdevs; i++)
		if (f->e->fs.vol->vdevs[i].devid == devid)
			return &f->e->fs.vol->vdevs[i];
	return NULL;
}

/* Everything a new chunk must have left behind, checked against the plan the holes give. */
static void check_chunk(struct fx *f, uint64_t type, const struct ub_chunk_plan *plan, uint64_t logical,
			const uint64_t *used_before)
{
	uint8_t item[4096], de[sizeof(struct btrfs_dev_extent)], bgi[sizeof(struct btrfs_block_group_item)];
	uint8_t fsi[sizeof(struct btrfs_free_space_info)];
	struct ub_bg_info bi;
	int size;

	size = get_item(f, &f->e->fs.chunk_tree->root, BTRFS_FIRST_CHUNK_TREE_OBJECTID, BTRFS_CHUNK_ITEM_KEY, logical,
			item, sizeof(item));
	assert_int_equal(size, (int)ub_chunk_item_size(plan->num_stripes));
	assert_int_equal(UB_GET(btrfs_chunk, length, item), plan->length);
	assert_int_equal(UB_GET(btrfs_chunk, type, item), type);
	assert_int_equal(UB_GET(btrfs_chunk, owner, item), BTRFS_EXTENT_TREE_OBJECTID);
	assert_int_equal(UB_GET(btrfs_chunk, stripe_len, item), 65536);
	assert_int_equal(UB_GET(btrfs_chunk, sector_size, item), f->e->fs.vol->sectorsize);
	assert_int_equal(UB_GET(btrfs_chunk, num_stripes, item), (uint64_t)plan->num_stripes);
	for (int i = 0; i < plan->num_stripes; i++) {
		const uint8_t *s = item + offsetof(struct btrfs_chunk, stripe) + (size_t)i * sizeof(struct btrfs_stripe);
		uint64_t devid = UB_GET(btrfs_stripe, devid, s), phys = UB_GET(btrfs_stripe, offset, s);

		assert_int_equal(devid, plan->stripes[i].devid);
		assert_int_equal(phys, plan->stripes[i].physical);
		assert_memory_equal(UB_PTR(btrfs_stripe, dev_uuid, s), vdev(f, devid)->uuid, UB_UUID_SIZE);
		assert_true(phys >= UB_DEV_RESERVED);
		/* the dev extent names the chunk */
		assert_int_equal(get_item(f, &f->dev->root, devid, BTRFS_DEV_EXTENT_KEY, phys, de, sizeof(de)),
				 (int)sizeof(de));
		assert_int_equal(UB_GET(btrfs_dev_extent, chunk_tree, de), BTRFS_CHUNK_TREE_OBJECTID);
		assert_int_equal(UB_GET(btrfs_dev_extent, chunk_objectid, de), BTRFS_FIRST_CHUNK_TREE_OBJECTID);
		assert_int_equal(UB_GET(btrfs_dev_extent, chunk_offset, de), logical);
		assert_int_equal(UB_GET(btrfs_dev_extent, length, de), plan->stripe_size);
		assert_memory_equal(UB_PTR(btrfs_dev_extent, chunk_tree_uuid, de), f->e->fs.tc.chunk_tree_uuid,
				    UB_UUID_SIZE);
	}
	/* each device's bytes_used grew by its stripes, in the chunk tree and in what its superblock will get */
	for (int i = 0; i < f->e->fs.vol->nvdevs; i++) {
		uint64_t devid = f->e->fs.vol->vdevs[i].devid, add = 0;
		for (int s = 0; s < plan->num_stripes; s++)
			add += plan->stripes[s].devid == devid ? plan->stripe_size : 0;
		assert_int_equal(dev_bytes_used(f, devid), used_before[i] + add);
		assert_int_equal(UB_GET(btrfs_dev_item, bytes_used, f->e->fs.vol->vdevs[i].item), used_before[i] + add);
	}
	assert_int_equal(get_item(f, &f->e->fs.extent_tree->root, logical, BTRFS_BLOCK_GROUP_ITEM_KEY, plan->length, bgi,
				  sizeof(bgi)),
			 (int)sizeof(bgi));
	assert_int_equal(UB_GET(btrfs_block_group_item, flags, bgi), type);
	assert_int_equal(UB_GET(btrfs_block_group_item, chunk_objectid, bgi), BTRFS_FIRST_CHUNK_TREE_OBJECTID);
	if (f->cc.fst_root) {
		assert_int_equal(get_item(f, f->cc.fst_root, logical, BTRFS_FREE_SPACE_INFO_KEY, plan->length, fsi,
					  sizeof(fsi)),
				 (int)sizeof(fsi));
		assert_int_equal(UB_GET(btrfs_free_space_info, extent_count, fsi), 1);
		assert_int_equal(get_item(f, f->cc.fst_root, logical, BTRFS_FREE_SPACE_EXTENT_KEY, plan->length, fsi, 0),
				 0);
	}
	/* mapped at once, and the allocator serves it */
	assert_non_null(ub_volume_find_chunk(f->e->fs.vol, logical));
	assert_int_equal(ub_volume_find_chunk(f->e->fs.vol, logical)->length, plan->length);
	assert_int_equal(ub_alloc_bg_info(f->e->alloc, logical, &bi), 0);
	assert_int_equal(bi.start, logical);
	assert_int_equal(bi.length, plan->length);
	assert_int_equal(bi.flags, type);
}

static uint64_t chunk_end(struct fx *f)
{
	uint64_t end = 0;
	for (int i = 0; i < f->e->fs.vol->nchunks; i++) {
		const struct ub_chunk *c = f->e->fs.vol->chunks[i];
		if (c->logical + c->length > end)
			end = c->logical + c->length;
	}
	return end;
}

/* One chunk of `type`: the plan the holes give now, then ub_chunk_alloc, then every item. */
static uint64_t add_and_check(struct fx *f, uint64_t type)
{
	struct ub_dev_space *ds;
	struct ub_chunk_plan plan;
	uint64_t used[8], logical, expect_logical = chunk_end(f);
	int nds;

	for (int i = 0; i < f->e->fs.vol->nvdevs; i++)
		used[i] = dev_bytes_used(f, f->e->fs.vol->vdevs[i].devid);
	assert_int_equal(ub_chunk_dev_space(&f->cc, &ds, &nds), 0);
	/* the holes: every device minus the first MiB minus its extents, as bytes_used says */
	for (int i = 0; i < nds; i++) {
		uint64_t free_b = 0;
		for (int h = 0; h < ds[i].nholes; h++) {
			assert_true(ds[i].hole_start[h] >= UB_DEV_RESERVED);
			free_b += ds[i].hole_len[h];
		}
		assert_int_equal(free_b, ds[i].total_bytes - UB_DEV_RESERVED - used[i]);
	}
	assert_int_equal(ub_chunk_layout(ds, nds, type, 0, &plan), 0);
	ub_chunk_free_space(ds, nds);
	assert_int_equal(ub_chunk_alloc(&f->cc, type, &logical), 0);
	assert_int_equal(logical, expect_logical);
	check_chunk(f, type, &plan, logical, used);
	return logical;
}

static void metadata_dup_items_abort_commit(void **state)
{
	struct fx f;
	uint64_t sys_size, logical, added[3];
	uint8_t sys_before[UB_SYSTEM_CHUNK_ARRAY_SIZE], used_before[sizeof(struct btrfs_dev_item)];
	struct ub_bg_info bi;

	(void)state;
	fx_make(&f, 1, 512 * MiB, BTRFS_BLOCK_GROUP_DUP, 0);
	fx_open(&f);
	sys_size = UB_GET(ub_disk_super, sys_chunk_array_size, f.e->fs.vol->super);
	memcpy(sys_before, f.e->fs.vol->super + offsetof(struct ub_disk_super, sys_chunk_array), sizeof(sys_before));
	memcpy(used_before, f.e->fs.vol->vdevs[0].item, sizeof(used_before));
	assert_int_equal(ub_chunk_profile_for(f.e->alloc, f.e->fs.vol, BTRFS_BLOCK_GROUP_METADATA), BTRFS_BLOCK_GROUP_DUP);
	assert_int_equal(ub_chunk_profile_for(f.e->alloc, f.e->fs.vol, BTRFS_BLOCK_GROUP_DATA), 0);

	/* a metadata chunk and a system chunk; the system chunk also lands in the sys chunk array */
	logical = add_and_check(&f, BTRFS_BLOCK_GROUP_METADATA | BTRFS_BLOCK_GROUP_DUP);
	assert_int_equal(UB_GET(ub_disk_super, sys_chunk_array_size, f.e->fs.vol->super), sys_size);
	uint64_t sys_logical = add_and_check(&f, BTRFS_BLOCK_GROUP_SYSTEM | BTRFS_BLOCK_GROUP_DUP);
	assert_int_equal(UB_GET(ub_disk_super, sys_chunk_array_size, f.e->fs.vol->super),
			 sys_size + UB_DISK_KEY_SIZE + ub_chunk_item_size(2));
	{
		struct ub_key k;
		ub_key_read(&k, f.e->fs.vol->super + offsetof(struct ub_disk_super, sys_chunk_array) + sys_size);
		assert_int_equal(k.type, BTRFS_CHUNK_ITEM_KEY);
		assert_int_equal(k.offset, sys_logical);
	}
	ub_chunk_stats(f.e->alloc, added);
	assert_int_equal(added[1], 1);
	assert_int_equal(added[2], 1);

	/* abort: the block groups leave the allocator; sys array and dev items are as before */
	ub_txn_abort(f.t);
	f.t = NULL;
	assert_int_equal(ub_alloc_bg_info(f.e->alloc, logical, &bi), -ENOENT);
	assert_int_equal(ub_alloc_bg_info(f.e->alloc, sys_logical, &bi), -ENOENT);
	assert_int_equal(UB_GET(ub_disk_super, sys_chunk_array_size, f.e->fs.vol->super), sys_size);
	assert_memory_equal(f.e->fs.vol->super + offsetof(struct ub_disk_super, sys_chunk_array), sys_before,
			    sizeof(sys_before));
	assert_int_equal(UB_GET(btrfs_dev_item, bytes_used, f.e->fs.vol->vdevs[0].item),
			 UB_GET(btrfs_dev_item, bytes_used, used_before));
	fx_close(&f);

	/* again, committed this time: a reopen maps both chunks and loads their groups, free but the mirrors */
	fx_open(&f);
	logical = add_and_check(&f, BTRFS_BLOCK_GROUP_METADATA | BTRFS_BLOCK_GROUP_DUP);
	sys_logical = add_and_check(&f, BTRFS_BLOCK_GROUP_SYSTEM | BTRFS_BLOCK_GROUP_DUP);
	assert_int_equal(ub_txn_commit(f.t), 0);
	f.t = NULL;
	fx_close(&f);
	fx_open(&f);
	assert_int_equal(ub_alloc_bg_info(f.e->alloc, logical, &bi), 0);
	assert_int_equal(bi.flags, BTRFS_BLOCK_GROUP_METADATA | BTRFS_BLOCK_GROUP_DUP);
	assert_int_equal(ub_alloc_bg_info(f.e->alloc, sys_logical, &bi), 0);
	assert_int_equal(UB_GET(ub_disk_super, sys_chunk_array_size, f.e->fs.vol->super),
			 sys_size + UB_DISK_KEY_SIZE + ub_chunk_item_size(2));
	assert_int_equal(UB_GET(btrfs_dev_item, bytes_used, f.e->fs.vol->vdevs[0].item), dev_bytes_used(&f, 1));
	fx_close(&f);
	fx_free(&f);
}

static void raid_profiles_place_across_devices(void **state)
{
	static const struct {
		int ndev;
		uint64_t profile;
	} cases[] = {
		{ 2, BTRFS_BLOCK_GROUP_RAID1 },
		{ 4, BTRFS_BLOCK_GROUP_RAID10 },
		{ 3, BTRFS_BLOCK_GROUP_RAID5 },
		{ 4, BTRFS_BLOCK_GROUP_RAID6 },
	};

	(void)state;
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		struct fx f;
		uint64_t logical;

		fx_make(&f, cases[c].ndev, 256 * MiB, cases[c].profile, cases[c].profile);
		fx_open(&f);
		assert_int_equal(ub_chunk_profile_for(f.e->alloc, f.e->fs.vol, BTRFS_BLOCK_GROUP_DATA), cases[c].profile);
		logical = add_and_check(&f, BTRFS_BLOCK_GROUP_DATA | cases[c].profile);
		/* a data reservation lands in it once the old data group is full; here: it serves data */
		struct ub_bg_info bi;
		assert_int_equal(ub_alloc_bg_info(f.e->alloc, logical, &bi), 0);
		assert_true(bi.flags & BTRFS_BLOCK_GROUP_DATA);
		add_and_check(&f, BTRFS_BLOCK_GROUP_METADATA | cases[c].profile);
		assert_int_equal(ub_txn_commit(f.t), 0);
		f.t = NULL;
		fx_close(&f);
		fx_free(&f);
	}
}

static void devices_full_is_enospc(void **state)
{
	struct fx f;
	int ret, n = 0;
	uint64_t used;

	(void)state;
	fx_make(&f, 1, 256 * MiB, BTRFS_BLOCK_GROUP_DUP, 0);
	fx_open(&f);
	/* data chunks until nothing fits: each takes at most 10% of the device */
	while ((ret = ub_chunk_alloc(&f.cc, BTRFS_BLOCK_GROUP_DATA, NULL)) == 0)
		assert_true(++n < 64);
	assert_int_equal(ret, -ENOSPC);
	assert_true(n >= 5);
	used = dev_bytes_used(&f, 1);
	/* nothing changed by the refusal; the ensure/prepare rules say the same */
	assert_int_equal(ub_chunk_alloc(&f.cc, BTRFS_BLOCK_GROUP_METADATA | BTRFS_BLOCK_GROUP_DUP, NULL), -ENOSPC);
	assert_int_equal(dev_bytes_used(&f, 1), used);
	assert_int_equal(ub_chunk_ensure_data(&f.cc, 512 * MiB), -ENOSPC);
	assert_int_equal(ub_chunk_ensure_data(&f.cc, 1 * MiB), 0);
	assert_int_equal(ub_txn_commit(f.t), 0);
	f.t = NULL;
	fx_close(&f);
	fx_free(&f);
}

static void encoders(void **state)
{
	struct ub_chunk_plan plan = { .type = BTRFS_BLOCK_GROUP_DATA | BTRFS_BLOCK_GROUP_RAID10,
				      .length = 64 * MiB, .stripe_size = 32 * MiB, .num_stripes = 4, .sub_stripes = 2 };
	uint8_t uuids[4 * UB_UUID_SIZE], item[512], de[sizeof(struct btrfs_dev_extent)], ctu[UB_UUID_SIZE];

	(void)state;
	for (int i = 0; i < 4; i++) {
		plan.stripes[i].devid = (uint64_t)i + 1;
		plan.stripes[i].physical = (uint64_t)(i + 2) * MiB;
		memset(uuids + i * UB_UUID_SIZE, 0x10 + i, UB_UUID_SIZE);
	}
	assert_int_equal(ub_chunk_item_size(4), 80 + 3 * 32);
	ub_chunk_encode(&plan, 4096, uuids, item);
	assert_int_equal(UB_GET(btrfs_chunk, sub_stripes, item), 2);
	assert_int_equal(UB_GET(btrfs_chunk, io_align, item), 65536);
	assert_int_equal(UB_GET(btrfs_chunk, io_width, item), 65536);
	assert_int_equal(UB_GET(btrfs_stripe, devid, item + offsetof(struct btrfs_chunk, stripe) + 3 * 32), 4);
	assert_int_equal(UB_GET(btrfs_stripe, offset, item + offsetof(struct btrfs_chunk, stripe) + 3 * 32), 5 * MiB);
	assert_int_equal(item[offsetof(struct btrfs_chunk, stripe) + 3 * 32 + offsetof(struct btrfs_stripe, dev_uuid)],
			 0x13);
	memset(ctu, 0xab, sizeof(ctu));
	ub_dev_extent_encode(7 * MiB, 3 * MiB, ctu, de);
	assert_int_equal(UB_GET(btrfs_dev_extent, chunk_offset, de), 7 * MiB);
	assert_int_equal(UB_GET(btrfs_dev_extent, length, de), 3 * MiB);
	assert_memory_equal(UB_PTR(btrfs_dev_extent, chunk_tree_uuid, de), ctu, UB_UUID_SIZE);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(encoders),
		cmocka_unit_test(metadata_dup_items_abort_commit),
		cmocka_unit_test(raid_profiles_place_across_devices),
		cmocka_unit_test(devices_full_is_enospc),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
