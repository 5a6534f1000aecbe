/* SPDX-License-Identifier: MIT */
/*
 * Writes through the volume layer (lib/volume/write.c) on memory devices, for
 * every profile and several device counts.
 *
 * The oracle is a model of the chunk's bytes (what the test wrote) and a
 * placement model written here from the btrfs layout rules, independent of the
 * code under test:
 *   - SINGLE/DUP/RAID1*: copy k is stripe k-1 at stripe.physical + offset.
 *   - RAID0 over N: 64 KiB unit u on stripe u % N, row u / N.
 *   - RAID10 over N: unit u on pair u % (N/2), row u / (N/2), both stripes.
 *   - RAID5/6 over N, n = N - parity: unit u is data slot u % n of full stripe
 *     f = u / n; slot s (P = n, Q = n+1) of f sits on stripe (f + s) % N, row f;
 *     P is the XOR of the data slots, Q the GF(2^8) sum of 2^i * D_i (0x11d),
 *     both computed here byte by byte.
 * After random writes every device buffer must hold exactly what the models
 * say, and ub_volume_read of every mirror (RAID5 2 = rebuilt from P, RAID6
 * 3 = from Q, ...) must return the model. Then the superblocks written by
 * ub_volume_write_supers must validate on every device and mirror and reopen
 * the volume, devices go missing (writes degrade, reads still return the
 * model) or turn to garbage (for every sector some mirror still returns the
 * model), and a failing device makes the write error sticky.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "volume/volume_internal.h"

#define KiB 1024ULL
#define MiB (1024ULL * KiB)
#define GiB (1024ULL * MiB)
#define SL (64 * KiB)
/* room for superblock mirror 1 (64 MiB) and the chunks below it */
#define DEVSZ (64 * MiB + 64 * KiB)
#define SS (1 * MiB)          /* bytes of the chunk on each stripe */
#define CHUNK_LOGICAL (1 * GiB)
#define MAXDEV 8

static uint64_t rng_state;
/* the failures these tests provoke are expected: keep their messages out of the output */
static const struct ub_log quiet_log = { .verbosity = -1 };

static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static void rnd_fill(uint8_t *p, size_t len)
{
	for (size_t i = 0; i < len; i++)
		p[i] = (uint8_t)(rnd() >> 24);
}

static uint8_t gf_mul(uint8_t a, uint8_t b)
{
	unsigned acc = 0, x = a;

	for (int bit = 0; bit < 8; bit++) {
		if (b & (1u << bit))
			acc ^= x;
		x <<= 1;
		if (x & 0x100)
			x ^= 0x11d;
	}
	return (uint8_t)acc;
}

/* ---- the configuration under test ---- */

struct cfg {
	uint64_t bits;  /* profile bits */
	int ndevs;      /* devices in the volume */
	int nstripes;   /* stripes of the chunk */
	int nparity, ncopies, tolerated;
};

struct rig {
	struct cfg cfg;
	uint8_t *buf[MAXDEV];
	uint8_t uuid[MAXDEV][UB_UUID_SIZE];
	uint64_t phys[UB_RAID_MAX_STRIPES];
	uint64_t devid[UB_RAID_MAX_STRIPES];
	uint64_t length;
	uint8_t sb[UB_SUPER_INFO_SIZE];
	uint8_t *model;
	unsigned csum_type;
};

static uint64_t chunk_length(const struct cfg *c)
{
	switch (c->bits) {
	case BTRFS_BLOCK_GROUP_RAID0:
		return (uint64_t)c->nstripes * SS;
	case BTRFS_BLOCK_GROUP_RAID10:
		return (uint64_t)c->nstripes / 2 * SS;
	case BTRFS_BLOCK_GROUP_RAID5:
	case BTRFS_BLOCK_GROUP_RAID6:
		return (uint64_t)(c->nstripes - c->nparity) * SS;
	default:
		return SS;
	}
}

/* the chunk item's bytes; returns its size */
static uint32_t make_chunk_item(struct rig *r, uint8_t *item, uint64_t type)
{
	const uint32_t hdr = (uint32_t)offsetof(struct btrfs_chunk, stripe);
	uint32_t size = hdr + (uint32_t)r->cfg.nstripes * (uint32_t)sizeof(struct btrfs_stripe);

	memset(item, 0, size);
	UB_SET(btrfs_chunk, length, item, r->length);
	UB_SET(btrfs_chunk, owner, item, 2);
	UB_SET(btrfs_chunk, stripe_len, item, SL);
	UB_SET(btrfs_chunk, type, item, type);
	UB_SET(btrfs_chunk, io_align, item, SL);
	UB_SET(btrfs_chunk, io_width, item, SL);
	UB_SET(btrfs_chunk, sector_size, item, 4096);
	UB_SET(btrfs_chunk, num_stripes, item, (uint64_t)r->cfg.nstripes);
	UB_SET(btrfs_chunk, sub_stripes, item, r->cfg.bits == BTRFS_BLOCK_GROUP_RAID10 ? 2 : 1);
	for (int i = 0; i < r->cfg.nstripes; i++) {
		uint8_t *s = item + hdr + (uint32_t)i * sizeof(struct btrfs_stripe);
		UB_SET(btrfs_stripe, devid, s, r->devid[i]);
		UB_SET(btrfs_stripe, offset, s, r->phys[i]);
		memcpy(s + offsetof(struct btrfs_stripe, dev_uuid), r->uuid[r->devid[i] - 1], UB_UUID_SIZE);
	}
	return size;
}

static void make_template(struct rig *r, uint64_t generation)
{
	uint8_t *sb = r->sb, item[1024];
	uint8_t *arr = sb + offsetof(struct ub_disk_super, sys_chunk_array);
	struct ub_key key = { 256, BTRFS_CHUNK_ITEM_KEY, CHUNK_LOGICAL };
	uint32_t isz;

	memset(sb, 0, UB_SUPER_INFO_SIZE);
	for (int i = 0; i < UB_FSID_SIZE; i++)
		sb[offsetof(struct ub_disk_super, fsid) + i] = (uint8_t)(0x40 + i);
	UB_SET(ub_disk_super, magic, sb, UB_MAGIC);
	UB_SET(ub_disk_super, generation, sb, generation);
	UB_SET(ub_disk_super, root, sb, CHUNK_LOGICAL);
	UB_SET(ub_disk_super, chunk_root, sb, CHUNK_LOGICAL);
	UB_SET(ub_disk_super, total_bytes, sb, (uint64_t)r->cfg.ndevs * DEVSZ);
	UB_SET(ub_disk_super, num_devices, sb, (uint64_t)r->cfg.ndevs);
	UB_SET(ub_disk_super, sectorsize, sb, 4096);
	UB_SET(ub_disk_super, nodesize, sb, 16384);
	UB_SET(ub_disk_super, stripesize, sb, 4096);
	UB_SET(ub_disk_super, csum_type, sb, r->csum_type);
	/* the chunk under test is a system chunk so that reopening finds it in the superblock alone */
	ub_key_write(arr, &key);
	isz = make_chunk_item(r, item, BTRFS_BLOCK_GROUP_SYSTEM | r->cfg.bits);
	memcpy(arr + UB_DISK_KEY_SIZE, item, isz);
	UB_SET(ub_disk_super, sys_chunk_array_size, sb, UB_DISK_KEY_SIZE + isz);
}

static void dev_item(const struct rig *r, int d, uint8_t *item)
{
	memset(item, 0, sizeof(struct btrfs_dev_item));
	UB_SET(btrfs_dev_item, devid, item, (uint64_t)d + 1);
	UB_SET(btrfs_dev_item, total_bytes, item, DEVSZ);
	UB_SET(btrfs_dev_item, bytes_used, item, (uint64_t)(d + 3) * 7 * MiB);
	UB_SET(btrfs_dev_item, io_align, item, 4096);
	UB_SET(btrfs_dev_item, io_width, item, 4096);
	UB_SET(btrfs_dev_item, sector_size, item, 4096);
	UB_SET(btrfs_dev_item, generation, item, 99); /* must not reach the superblock copy */
	memcpy(item + offsetof(struct btrfs_dev_item, uuid), r->uuid[d], UB_UUID_SIZE);
}

static void rig_init(struct rig *r, const struct cfg *c, unsigned csum_type)
{
	memset(r, 0, sizeof(*r));
	r->cfg = *c;
	r->csum_type = csum_type;
	r->length = chunk_length(c);
	for (int d = 0; d < c->ndevs; d++) {
		r->buf[d] = calloc(1, DEVSZ);
		assert_non_null(r->buf[d]);
		rnd_fill(r->uuid[d], UB_UUID_SIZE);
	}
	for (int i = 0; i < c->nstripes; i++) {
		if (c->bits == BTRFS_BLOCK_GROUP_DUP) {
			r->devid[i] = 1;
			r->phys[i] = 2 * MiB + (uint64_t)i * 3 * SS;
		} else {
			r->devid[i] = (uint64_t)i + 1;
			/* distinct per device, so a write on the wrong row or device shows */
			r->phys[i] = 2 * MiB + (uint64_t)i * 1 * MiB;
		}
	}
	make_template(r, 1);
	r->model = malloc(r->length);
	assert_non_null(r->model);
}

static void rig_free(struct rig *r)
{
	for (int d = 0; d < r->cfg.ndevs; d++)
		free(r->buf[d]);
	free(r->model);
}

/* open the rig's devices (skipping those in `skip`) as a volume read from disk */
static struct ub_volume *rig_open(struct rig *r, unsigned skip)
{
	struct ub_volume_opts opts = { .writable = true, .super_mirror = -1 };
	struct ub_log quiet = { .verbosity = -1 };
	struct ub_dev *devs[MAXDEV];
	struct ub_volume *vol = NULL;
	int n = 0;

	for (int d = 0; d < r->cfg.ndevs; d++) {
		if (skip & (1u << d))
			continue;
		assert_int_equal(ub_dev_open_mem("m", r->buf[d], DEVSZ, true, &devs[n]), 0);
		n++;
	}
	assert_int_equal(ub_volume_open_devs(devs, n, &opts, &quiet, &vol), 0);
	return vol;
}

static struct ub_volume *rig_create(struct rig *r)
{
	struct ub_dev *devs[MAXDEV];
	struct ub_volume *vol = NULL;
	uint8_t item[sizeof(struct btrfs_dev_item)];

	for (int d = 0; d < r->cfg.ndevs; d++)
		assert_int_equal(ub_dev_open_mem("m", r->buf[d], DEVSZ, true, &devs[d]), 0);
	assert_int_equal(ub_volume_create(devs, r->cfg.ndevs, r->sb, &quiet_log, &vol), 0);
	assert_int_equal(vol->nvdevs, r->cfg.ndevs);
	assert_non_null(ub_volume_find_chunk(vol, CHUNK_LOGICAL));
	for (int d = 0; d < r->cfg.ndevs; d++) {
		dev_item(r, d, item);
		assert_int_equal(ub_volume_add_dev_item(vol, item, sizeof(item)), 0);
	}
	return vol;
}

/* ---- the placement model ---- */

/* Check every device buffer against the model; stripes on devices in `skip` are not looked at. */
static void check_layout(const struct rig *r, unsigned skip)
{
	const struct cfg *c = &r->cfg;
	const uint64_t units = r->length / SL;

	if (c->nparity) {
		const int N = c->nstripes, n = N - c->nparity;
		uint8_t *p = malloc(SL), *q = malloc(SL);
		assert_non_null(p);
		assert_non_null(q);
		for (uint64_t f = 0; f < units / (uint64_t)n; f++) {
			memset(p, 0, SL);
			memset(q, 0, SL);
			for (int j = 0; j < n; j++) {
				const uint8_t *d = r->model + (f * (uint64_t)n + (uint64_t)j) * SL;
				int s = (int)((f + (uint64_t)j) % (uint64_t)N);
				uint8_t g = 1;
				for (int k = 0; k < j; k++)
					g = gf_mul(g, 2);
				for (uint64_t b = 0; b < SL; b++) {
					p[b] ^= d[b];
					q[b] ^= gf_mul(g, d[b]);
				}
				if (skip & (1u << (r->devid[s] - 1)))
					continue;
				if (memcmp(r->buf[r->devid[s] - 1] + r->phys[s] + f * SL, d, SL))
					fail_msg("%s/%d: data slot %d of full stripe %llu wrong on stripe %d",
						 ub_profile_name(c->bits), N, j, (unsigned long long)f, s);
			}
			for (int k = 0; k < c->nparity; k++) {
				int s = (int)((f + (uint64_t)n + (uint64_t)k) % (uint64_t)N);
				if (skip & (1u << (r->devid[s] - 1)))
					continue;
				if (memcmp(r->buf[r->devid[s] - 1] + r->phys[s] + f * SL, k ? q : p, SL))
					fail_msg("%s/%d: %c of full stripe %llu wrong on stripe %d", ub_profile_name(c->bits),
						 N, k ? 'Q' : 'P', (unsigned long long)f, s);
			}
		}
		free(p);
		free(q);
		return;
	}
	for (uint64_t u = 0; u < units; u++) {
		const uint8_t *d = r->model + u * SL;
		int stripes[4], ns = 0;
		uint64_t row = u;

		if (c->bits == BTRFS_BLOCK_GROUP_RAID0) {
			stripes[ns++] = (int)(u % (uint64_t)c->nstripes);
			row = u / (uint64_t)c->nstripes;
		} else if (c->bits == BTRFS_BLOCK_GROUP_RAID10) {
			uint64_t pairs = (uint64_t)c->nstripes / 2;
			stripes[ns++] = (int)(u % pairs) * 2;
			stripes[ns++] = (int)(u % pairs) * 2 + 1;
			row = u / pairs;
		} else {
			for (int k = 0; k < c->nstripes; k++)
				stripes[ns++] = k;
		}
		for (int k = 0; k < ns; k++) {
			int s = stripes[k];
			if (skip & (1u << (r->devid[s] - 1)))
				continue;
			if (memcmp(r->buf[r->devid[s] - 1] + r->phys[s] + row * SL, d, SL))
				fail_msg("%s/%d: unit %llu wrong on stripe %d", ub_profile_name(c->bits), c->nstripes,
					 (unsigned long long)u, s);
		}
	}
}

static void check_reads(struct ub_volume *vol, const struct rig *r, bool every_mirror)
{
	int copies = ub_volume_num_copies(vol, CHUNK_LOGICAL);
	uint8_t *out = malloc(r->length);

	assert_non_null(out);
	assert_true(copies >= 1);
	for (int m = every_mirror ? 1 : 0; m <= (every_mirror ? copies : 0); m++) {
		memset(out, 0xEE, r->length);
		assert_int_equal(ub_volume_read(vol, CHUNK_LOGICAL, r->length, m, out), 0);
		if (memcmp(out, r->model, r->length))
			fail_msg("%s/%d: mirror %d reads other bytes than written", ub_profile_name(r->cfg.bits),
				 r->cfg.nstripes, m);
	}
	free(out);
}

/* Some mirror of every sector returns the model (garbage on some devices, found by trying copies). */
static void check_some_mirror(struct ub_volume *vol, const struct rig *r)
{
	int copies = ub_volume_num_copies(vol, CHUNK_LOGICAL);
	uint8_t out[4096];

	for (uint64_t off = 0; off < r->length; off += sizeof(out)) {
		bool ok = false;
		for (int m = 1; m <= copies && !ok; m++)
			ok = ub_volume_read(vol, CHUNK_LOGICAL + off, sizeof(out), m, out) == 0 &&
			     !memcmp(out, r->model + off, sizeof(out));
		if (!ok)
			fail_msg("%s/%d: no mirror of chunk offset %llu returns what was written",
				 ub_profile_name(r->cfg.bits), r->cfg.nstripes, (unsigned long long)off);
	}
}

/* Random writes: mostly sector aligned, some not, up to a few full stripes long. */
static void random_writes(struct ub_volume *vol, struct rig *r, int count)
{
	uint8_t *data = malloc(4 * 6 * SL);

	assert_non_null(data);
	for (int i = 0; i < count; i++) {
		uint64_t off, len;
		if (rnd() % 4) {
			off = (rnd() % (r->length / 4096)) * 4096;
			len = (1 + rnd() % 64) * 4096;
		} else {
			off = rnd() % r->length;
			len = 1 + rnd() % (3 * SL);
		}
		if (rnd() % 8 == 0)
			len = 4 * 6 * SL;
		if (len > r->length - off)
			len = r->length - off;
		rnd_fill(data, len);
		assert_int_equal(ub_volume_write(vol, CHUNK_LOGICAL + off, len, data), 0);
		memcpy(r->model + off, data, len);
	}
	free(data);
}

static void full_rewrite(struct ub_volume *vol, struct rig *r)
{
	rnd_fill(r->model, r->length);
	assert_int_equal(ub_volume_write(vol, CHUNK_LOGICAL, r->length, r->model), 0);
}

/* ---- superblocks ---- */

static void check_supers(const struct rig *r, uint64_t generation)
{
	for (int d = 0; d < r->cfg.ndevs; d++) {
		for (int m = 0; m < UB_SUPER_MIRROR_MAX; m++) {
			uint64_t off = ub_super_offset(m);
			const uint8_t *sb = r->buf[d] + off, *di;
			char why[160];

			if (off + UB_SUPER_INFO_SIZE > DEVSZ)
				break;
			if (ub_super_validate(sb, off, why, sizeof(why)))
				fail_msg("device %d mirror %d: %s", d, m, why);
			di = sb + offsetof(struct ub_disk_super, dev_item);
			assert_true(UB_GET(ub_disk_super, generation, sb) == generation);
			assert_true(UB_GET(ub_disk_super, csum_type, sb) == r->csum_type);
			assert_true(UB_GET(btrfs_dev_item, devid, di) == (uint64_t)d + 1);
			assert_true(UB_GET(btrfs_dev_item, total_bytes, di) == DEVSZ);
			assert_true(UB_GET(btrfs_dev_item, bytes_used, di) == (uint64_t)(d + 3) * 7 * MiB);
			assert_true(UB_GET(btrfs_dev_item, generation, di) == 0);
			assert_true(UB_GET(btrfs_dev_item, io_align, di) == 4096);
			assert_memory_equal(di + offsetof(struct btrfs_dev_item, uuid), r->uuid[d], UB_UUID_SIZE);
			assert_memory_equal(di + offsetof(struct btrfs_dev_item, fsid),
					    r->sb + offsetof(struct ub_disk_super, fsid), UB_FSID_SIZE);
			/* everything else is the caller's superblock, untouched */
			assert_memory_equal(sb + offsetof(struct ub_disk_super, label),
					    r->sb + offsetof(struct ub_disk_super, label),
					    UB_SUPER_INFO_SIZE - offsetof(struct ub_disk_super, label));
		}
	}
}

/* ---- the whole run for one configuration ---- */

static bool next_subset(unsigned *set, int ndevs, int maxbits)
{
	/* every non-empty subset of the devices with at most maxbits members, in order */
	while (++*set < (1u << (unsigned)ndevs))
		if (__builtin_popcount(*set) <= maxbits)
			return true;
	return false;
}

/* a missing set this configuration survives: for RAID10 at most one device of each pair */
static bool survivable(const struct rig *r, unsigned set)
{
	if (r->cfg.bits == BTRFS_BLOCK_GROUP_RAID10) {
		for (int i = 0; i + 1 < r->cfg.nstripes; i += 2)
			if ((set >> i & 1) && (set >> (i + 1) & 1))
				return false;
		return true;
	}
	return __builtin_popcount(set) <= r->cfg.tolerated;
}

static void run_cfg(const struct cfg *c, unsigned csum_type, uint64_t seed)
{
	struct rig r;
	struct ub_volume *vol;
	unsigned set = 0;
	int tested = 0;
	/* devices holding the chunk (a RAID1 may have a spare) */
	const int nused = c->bits == BTRFS_BLOCK_GROUP_DUP ? 1 : c->nstripes;

	rng_state = seed;
	rig_init(&r, c, csum_type);
	vol = rig_create(&r);
	full_rewrite(vol, &r);
	check_layout(&r, 0);
	random_writes(vol, &r, 40);
	check_layout(&r, 0);
	check_reads(vol, &r, true);
	assert_int_equal(vol->writes_skipped, 0);

	/* superblocks, then the volume as read back from them */
	UB_SET(ub_disk_super, generation, r.sb, 7);
	assert_int_equal(ub_volume_write_supers(vol, r.sb), 0);
	assert_true(vol->generation == 7);
	ub_volume_close(vol);
	check_supers(&r, 7);
	vol = rig_open(&r, 0);
	assert_true(vol->generation == 7);
	assert_int_equal(vol->nvdevs, c->ndevs);
	check_reads(vol, &r, true);
	random_writes(vol, &r, 10);
	check_layout(&r, 0);
	ub_volume_close(vol);

	/* devices missing: writes skip them, reads still return the model, the rest of the layout is exact */
	while (next_subset(&set, nused, c->tolerated + 1) && tested < 6) {
		if (!survivable(&r, set)) {
			/* more than the profile tolerates: refused before anything changes */
			if (__builtin_popcount(set) < c->ndevs) {
				uint8_t *junk = malloc(r.length);
				assert_non_null(junk);
				rnd_fill(junk, r.length);
				vol = rig_open(&r, set);
				assert_int_equal(ub_volume_write(vol, CHUNK_LOGICAL, r.length, junk), -EIO);
				free(junk);
				assert_int_equal(ub_volume_write_error(vol), 0);
				ub_volume_close(vol);
				check_layout(&r, 0);
			}
			continue;
		}
		vol = rig_open(&r, set);
		random_writes(vol, &r, 12);
		check_reads(vol, &r, false);
		check_layout(&r, set);
		full_rewrite(vol, &r);
		assert_true(vol->writes_skipped > 0);
		random_writes(vol, &r, 4);
		check_reads(vol, &r, false);
		check_layout(&r, set);
		ub_volume_close(vol);
		/* bring the stale devices back in step */
		vol = rig_open(&r, 0);
		full_rewrite(vol, &r);
		ub_volume_close(vol);
		check_layout(&r, 0);
		tested++;
	}

	/* devices turned to garbage: some mirror of every sector still returns the model */
	set = 0;
	tested = 0;
	while (c->tolerated && next_subset(&set, nused, c->tolerated) && tested < 4) {
		uint8_t *saved[MAXDEV] = { NULL };
		if (!survivable(&r, set))
			continue;
		for (int d = 0; d < c->ndevs; d++) {
			if (!(set & (1u << d)))
				continue;
			saved[d] = malloc(8 * MiB);
			assert_non_null(saved[d]);
			memcpy(saved[d], r.buf[d] + 2 * MiB, 8 * MiB);
			rnd_fill(r.buf[d] + 2 * MiB, 8 * MiB);
		}
		vol = rig_open(&r, 0);
		check_some_mirror(vol, &r);
		ub_volume_close(vol);
		for (int d = 0; d < c->ndevs; d++) {
			if (saved[d])
				memcpy(r.buf[d] + 2 * MiB, saved[d], 8 * MiB);
			free(saved[d]);
		}
		tested++;
	}
	rig_free(&r);
}

#define P_SINGLE 0
#define P_DUP BTRFS_BLOCK_GROUP_DUP
#define P_R0 BTRFS_BLOCK_GROUP_RAID0
#define P_R1 BTRFS_BLOCK_GROUP_RAID1
#define P_R1C3 BTRFS_BLOCK_GROUP_RAID1C3
#define P_R1C4 BTRFS_BLOCK_GROUP_RAID1C4
#define P_R10 BTRFS_BLOCK_GROUP_RAID10
#define P_R5 BTRFS_BLOCK_GROUP_RAID5
#define P_R6 BTRFS_BLOCK_GROUP_RAID6

static void run_profile(uint64_t bits, const int *counts, int ncounts)
{
	const struct ub_profile *p = ub_profile_of(bits);

	for (int i = 0; i < ncounts; i++) {
		struct cfg c = {
			.bits = bits,
			.ndevs = bits == P_DUP || bits == P_SINGLE ? 1 : counts[i],
			.nstripes = counts[i],
			.nparity = p->nparity,
			.ncopies = p->ncopies,
			.tolerated = p->tolerated_failures,
		};
		/* RAID1* chunks have exactly ncopies stripes; give them a spare device */
		if (p->ncopies > 1 && p->sub_stripes == 1 && bits != P_DUP)
			c.ndevs = counts[i] + (i & 1);
		run_cfg(&c, (unsigned)i % 4, 0x9E3779B97F4A7C15ULL ^ (bits * 31 + (uint64_t)counts[i]));
	}
}

static void test_single(void **s) { static const int n[] = { 1 }; (void)s; run_profile(P_SINGLE, n, 1); }
static void test_dup(void **s) { static const int n[] = { 2 }; (void)s; run_profile(P_DUP, n, 1); }
static void test_raid0(void **s) { static const int n[] = { 2, 3, 5 }; (void)s; run_profile(P_R0, n, 3); }
static void test_raid1(void **s) { static const int n[] = { 2, 2 }; (void)s; run_profile(P_R1, n, 2); }
static void test_raid1c3(void **s) { static const int n[] = { 3, 3 }; (void)s; run_profile(P_R1C3, n, 2); }
static void test_raid1c4(void **s) { static const int n[] = { 4 }; (void)s; run_profile(P_R1C4, n, 1); }
static void test_raid10(void **s) { static const int n[] = { 4, 6 }; (void)s; run_profile(P_R10, n, 2); }
static void test_raid5(void **s) { static const int n[] = { 2, 3, 4, 5 }; (void)s; run_profile(P_R5, n, 4); }
static void test_raid6(void **s) { static const int n[] = { 3, 4, 5, 6 }; (void)s; run_profile(P_R6, n, 4); }

/* ---- argument and bounds checks ---- */

static struct ub_volume *single_rig(struct rig *r, uint64_t phys, uint64_t length)
{
	struct cfg c = { .bits = 0, .ndevs = 1, .nstripes = 1, .ncopies = 1 };
	struct ub_volume *vol;

	rig_init(r, &c, 0);
	vol = rig_create(r);
	if (phys) {
		/* a data chunk at 2 GiB placed where the test wants it */
		uint8_t item[256];
		uint32_t isz;
		uint64_t saved_len = r->length, saved_phys = r->phys[0];
		r->length = length;
		r->phys[0] = phys;
		isz = make_chunk_item(r, item, BTRFS_BLOCK_GROUP_DATA);
		assert_int_equal(ub_volume_add_chunk(vol, 2 * GiB, item, isz), 0);
		r->length = saved_len;
		r->phys[0] = saved_phys;
	}
	return vol;
}

static void test_write_args(void **state)
{
	struct rig r;
	struct ub_volume *vol;
	uint8_t data[8192] = { 1, 2, 3 };

	(void)state;
	rng_state = 77;
	vol = single_rig(&r, 0, 0);
	assert_int_equal(ub_volume_write(vol, CHUNK_LOGICAL + SS - 4096, 4096, data), 0);
	/* one byte past the chunk's end */
	assert_int_equal(ub_volume_write(vol, CHUNK_LOGICAL + SS - 4096, 4097, data), -EINVAL);
	assert_int_equal(ub_volume_write(vol, CHUNK_LOGICAL + SS, 1, data), -ENOENT);
	assert_int_equal(ub_volume_write(vol, CHUNK_LOGICAL - 1, 1, data), -ENOENT);
	assert_int_equal(ub_volume_write(vol, CHUNK_LOGICAL, 0, data), 0);
	assert_int_equal(ub_volume_write_error(vol), 0);
	assert_memory_equal(r.buf[0] + r.phys[0] + SS - 4096, data, 4096);
	ub_volume_close(vol);
	rig_free(&r);
}

static void test_write_bounds(void **state)
{
	struct rig r;
	struct ub_volume *vol;
	uint8_t data[8192];

	(void)state;
	memset(data, 0x5A, sizeof(data));
	rng_state = 78;
	/* a chunk reaching into the first MiB */
	vol = single_rig(&r, 1 * MiB - 64 * KiB, 1 * MiB);
	assert_int_equal(ub_volume_write(vol, 2 * GiB, 4096, data), -EUCLEAN);
	assert_int_equal(ub_volume_write(vol, 2 * GiB + 64 * KiB, 4096, data), 0);
	assert_int_equal(ub_volume_write_error(vol), 0);
	ub_volume_close(vol);
	rig_free(&r);
	/* a chunk over superblock mirror 1 */
	vol = single_rig(&r, 63 * MiB, 1 * MiB + 64 * KiB);
	assert_int_equal(ub_volume_write(vol, 2 * GiB + 1 * MiB - 4096, 8192, data), -EUCLEAN);
	assert_int_equal(ub_volume_write(vol, 2 * GiB + 1 * MiB + 4096, 4096, data), 0);
	for (size_t i = 0; i < 4096; i++)
		assert_int_equal(r.buf[0][64 * MiB + i], 0);
	ub_volume_close(vol);
	rig_free(&r);
	/* a chunk past the device's end */
	vol = single_rig(&r, DEVSZ - 64 * KiB, 1 * MiB);
	assert_int_equal(ub_volume_write(vol, 2 * GiB + 60 * KiB, 8192, data), -EUCLEAN);
	assert_int_equal(ub_volume_write(vol, 2 * GiB + 8192, 4096, data), 0);
	ub_volume_close(vol);
	rig_free(&r);
}

/* the RAID5/6 write refuses a full stripe whose parity would land outside the device */
static void test_write_bounds_parity(void **state)
{
	struct cfg c = { .bits = P_R5, .ndevs = 3, .nstripes = 3, .nparity = 1, .ncopies = 1, .tolerated = 1 };
	struct rig r;
	struct ub_volume *vol;
	static uint8_t data[4 * SL] = { 9 };

	(void)state;
	rng_state = 79;
	rig_init(&r, &c, 0);
	r.phys[2] = 64 * MiB - 64 * KiB; /* the third stripe's second row covers mirror 1 */
	make_template(&r, 1);
	vol = rig_create(&r);
	/* full stripe 0: P on stripe 2 row 0, fine */
	assert_int_equal(ub_volume_write(vol, CHUNK_LOGICAL, 4096, data), 0);
	/* full stripe 1: data 0 on stripe 1 and P on stripe 0 are fine */
	assert_int_equal(ub_volume_write(vol, CHUNK_LOGICAL + 2 * SL, 4096, data), 0);
	/* its data 1 is on stripe 2 row 1, over mirror 1 */
	assert_int_equal(ub_volume_write(vol, CHUNK_LOGICAL + 3 * SL, 4096, data), -EUCLEAN);
	/* full stripe 3: data 0 on stripe 0 is fine, its P on stripe 2 row 3 is past the device's end */
	assert_int_equal(ub_volume_write(vol, CHUNK_LOGICAL + 6 * SL, 4096, data), -EUCLEAN);
	/* and a write over full stripes 0 and 1 is refused as a whole, before anything changes */
	memset(data, 0x77, sizeof(data));
	assert_int_equal(ub_volume_write(vol, CHUNK_LOGICAL + 4096, 4 * SL - 8192, data), -EUCLEAN);
	assert_int_equal(r.buf[0][r.phys[0] + 4096], 0);
	assert_int_equal(ub_volume_write_error(vol), 0);
	ub_volume_close(vol);
	rig_free(&r);
}

static void test_read_only_volume(void **state)
{
	struct cfg c = { .bits = P_R1, .ndevs = 2, .nstripes = 2, .ncopies = 2, .tolerated = 1 };
	struct ub_volume_opts opts = { .writable = false, .super_mirror = -1 };
	struct ub_dev *devs[2];
	struct rig r;
	struct ub_volume *vol;
	uint8_t data[4096] = { 4 };

	(void)state;
	rng_state = 80;
	rig_init(&r, &c, 1);
	vol = rig_create(&r);
	assert_int_equal(ub_volume_write_supers(vol, r.sb), 0);
	ub_volume_close(vol);
	for (int d = 0; d < 2; d++)
		assert_int_equal(ub_dev_open_mem("m", r.buf[d], DEVSZ, false, &devs[d]), 0);
	assert_int_equal(ub_volume_open_devs(devs, 2, &opts, NULL, &vol), 0);
	assert_int_equal(ub_volume_write(vol, CHUNK_LOGICAL, 4096, data), -EROFS);
	assert_int_equal(ub_volume_flush(vol), -EROFS);
	assert_int_equal(ub_volume_write_supers(vol, r.sb), -EROFS);
	ub_volume_close(vol);
	rig_free(&r);
}

/*
 * Scrub's in-place rewrite of one copy: exactly the bytes named on exactly
 * the stripe named (the other copy and, on RAID5, parity and the other strips
 * stay as they were), nothing outside the stripe's device extent, and nothing
 * on a read-only volume.
 */
static void test_rewrite_one_copy(void **state)
{
	struct cfg c1 = { .bits = P_R1, .ndevs = 2, .nstripes = 2, .ncopies = 2, .tolerated = 1 };
	struct cfg c5 = { .bits = P_R5, .ndevs = 3, .nstripes = 3, .nparity = 1, .ncopies = 1, .tolerated = 1 };
	struct ub_volume_opts ro = { .writable = false, .super_mirror = -1 };
	struct ub_dev *devs[3];
	uint8_t *before[3], data[8192];
	const struct ub_chunk *ch;
	struct rig r;
	struct ub_volume *vol;

	(void)state;
	memset(data, 0xC3, sizeof(data));
	rng_state = 81;
	rig_init(&r, &c1, 0);
	vol = rig_create(&r);
	rnd_fill(r.model, r.length);
	assert_int_equal(ub_volume_write(vol, CHUNK_LOGICAL, r.length, r.model), 0);
	for (int d = 0; d < 2; d++) {
		before[d] = malloc(DEVSZ);
		assert_non_null(before[d]);
		memcpy(before[d], r.buf[d], DEVSZ);
	}
	ch = ub_volume_find_chunk(vol, CHUNK_LOGICAL);
	assert_non_null(ch);
	assert_int_equal(ub_chunk_stripe_size(ch), SS);
	/* copy 2 (stripe 1) of the sectors at chunk offset 64 KiB */
	assert_int_equal(ub_volume_rewrite(vol, ch, 1, r.phys[1] + 64 * KiB, 8192, data), 0);
	assert_memory_equal(r.buf[0], before[0], DEVSZ);
	assert_memory_equal(r.buf[1] + r.phys[1] + 64 * KiB, data, 8192);
	memcpy(before[1] + r.phys[1] + 64 * KiB, data, 8192);
	assert_memory_equal(r.buf[1], before[1], DEVSZ);
	/* outside the stripe's extent: before it, past its end, crossing its end; bad stripe index */
	assert_int_equal(ub_volume_rewrite(vol, ch, 1, r.phys[1] - 4096, 4096, data), -EINVAL);
	assert_int_equal(ub_volume_rewrite(vol, ch, 1, r.phys[1] + SS, 4096, data), -EINVAL);
	assert_int_equal(ub_volume_rewrite(vol, ch, 1, r.phys[1] + SS - 4096, 8192, data), -EINVAL);
	assert_int_equal(ub_volume_rewrite(vol, ch, 2, r.phys[1], 4096, data), -EINVAL);
	assert_int_equal(ub_volume_rewrite(vol, ch, 1, r.phys[1], 0, data), -EINVAL);
	assert_memory_equal(r.buf[1], before[1], DEVSZ);
	assert_int_equal(ub_volume_write_error(vol), 0);
	assert_int_equal(ub_volume_write_supers(vol, r.sb), 0);
	ub_volume_close(vol);
	/* read-only: refused */
	for (int d = 0; d < 2; d++)
		assert_int_equal(ub_dev_open_mem("m", r.buf[d], DEVSZ, false, &devs[d]), 0);
	assert_int_equal(ub_volume_open_devs(devs, 2, &ro, &quiet_log, &vol), 0);
	ch = ub_volume_find_chunk(vol, CHUNK_LOGICAL);
	assert_int_equal(ub_volume_rewrite(vol, ch, 0, r.phys[0], 4096, data), -EROFS);
	ub_volume_close(vol);
	for (int d = 0; d < 2; d++)
		free(before[d]);
	rig_free(&r);

	/* RAID5: one data strip's sectors change, P and the other strip do not */
	rig_init(&r, &c5, 0);
	vol = rig_create(&r);
	rnd_fill(r.model, r.length);
	assert_int_equal(ub_volume_write(vol, CHUNK_LOGICAL, r.length, r.model), 0);
	for (int d = 0; d < 3; d++) {
		before[d] = malloc(DEVSZ);
		assert_non_null(before[d]);
		memcpy(before[d], r.buf[d], DEVSZ);
	}
	ch = ub_volume_find_chunk(vol, CHUNK_LOGICAL);
	assert_int_equal(ub_chunk_stripe_size(ch), SS);
	assert_int_equal(ub_volume_rewrite(vol, ch, 2, r.phys[2] + 4096, 4096, data), 0);
	memcpy(before[2] + r.phys[2] + 4096, data, 4096);
	for (int d = 0; d < 3; d++)
		assert_memory_equal(r.buf[d], before[d], DEVSZ);
	ub_volume_close(vol);
	for (int d = 0; d < 3; d++)
		free(before[d]);
	rig_free(&r);
}

/* ---- sticky errors: a backend that fails writes after a budget ---- */

struct failing {
	uint8_t *buf;
	int writes_left; /* -1: never fails */
	int flushes_left;
};

static int f_read(struct ub_dev *dev, void *buf, size_t len, uint64_t off)
{
	struct failing *f = dev->priv;
	memcpy(buf, f->buf + off, len);
	return 0;
}

static int f_write(struct ub_dev *dev, const void *buf, size_t len, uint64_t off)
{
	struct failing *f = dev->priv;
	if (f->writes_left == 0)
		return -EIO;
	if (f->writes_left > 0)
		f->writes_left--;
	memcpy(f->buf + off, buf, len);
	return 0;
}

static int f_flush(struct ub_dev *dev)
{
	struct failing *f = dev->priv;
	if (f->flushes_left == 0)
		return -EIO;
	if (f->flushes_left > 0)
		f->flushes_left--;
	return 0;
}

static const struct ub_dev_ops failing_ops = { "failing", f_read, f_write, f_flush, NULL };

static void test_sticky_error(void **state)
{
	struct cfg c = { .bits = P_R1, .ndevs = 2, .nstripes = 2, .ncopies = 2, .tolerated = 1 };
	struct ub_log quiet = { .verbosity = -1 };
	struct failing f[2];
	struct ub_dev *devs[2];
	struct rig r;
	struct ub_volume *vol;
	uint8_t data[4096], before[2][4096];

	(void)state;
	rng_state = 81;
	rig_init(&r, &c, 0);
	for (int kind = 0; kind < 2; kind++) {
		for (int d = 0; d < 2; d++) {
			f[d].buf = r.buf[d];
			f[d].writes_left = -1;
			f[d].flushes_left = -1;
			assert_int_equal(ub_dev_create("failing", &failing_ops, &f[d], DEVSZ, true, &devs[d]), 0);
		}
		assert_int_equal(ub_volume_create(devs, 2, r.sb, &quiet, &vol), 0);
		memset(data, 1, sizeof(data));
		assert_int_equal(ub_volume_write(vol, CHUNK_LOGICAL, 4096, data), 0);
		if (kind == 0) {
			f[1].writes_left = 0;
			assert_int_equal(ub_volume_write(vol, CHUNK_LOGICAL + 8192, 4096, data), -EIO);
		} else {
			f[0].flushes_left = 0;
			assert_int_equal(ub_volume_flush(vol), -EIO);
		}
		assert_int_equal(ub_volume_write_error(vol), -EIO);
		/* the device works again, but nothing more may reach the disks */
		f[0].writes_left = f[1].writes_left = -1;
		f[0].flushes_left = f[1].flushes_left = -1;
		memcpy(before[0], r.buf[0] + r.phys[0], 4096);
		memcpy(before[1], r.buf[1] + r.phys[1], 4096);
		memset(data, 2, sizeof(data));
		assert_int_equal(ub_volume_write(vol, CHUNK_LOGICAL, 4096, data), -EROFS);
		assert_int_equal(ub_volume_flush(vol), -EROFS);
		assert_int_equal(ub_volume_write_supers(vol, r.sb), -EROFS);
		assert_memory_equal(before[0], r.buf[0] + r.phys[0], 4096);
		assert_memory_equal(before[1], r.buf[1] + r.phys[1], 4096);
		for (int d = 0; d < 2; d++)
			assert_int_equal(UB_GET(ub_disk_super, magic, r.buf[d] + 65536), 0);
		assert_int_equal(ub_volume_write_error(vol), -EIO);
		ub_volume_close(vol);
	}
	rig_free(&r);
}

/* write_supers flushes before and after the superblock writes: a failing flush stops it before any super */
static void test_supers_flush_first(void **state)
{
	struct cfg c = { .bits = P_R1, .ndevs = 2, .nstripes = 2, .ncopies = 2, .tolerated = 1 };
	struct ub_log quiet = { .verbosity = -1 };
	struct failing f[2];
	struct ub_dev *devs[2];
	struct rig r;
	struct ub_volume *vol;

	(void)state;
	rng_state = 82;
	rig_init(&r, &c, 0);
	for (int d = 0; d < 2; d++) {
		f[d].buf = r.buf[d];
		f[d].writes_left = -1;
		f[d].flushes_left = d == 1 ? 0 : -1;
		assert_int_equal(ub_dev_create("failing", &failing_ops, &f[d], DEVSZ, true, &devs[d]), 0);
	}
	assert_int_equal(ub_volume_create(devs, 2, r.sb, &quiet, &vol), 0);
	assert_int_equal(ub_volume_write_supers(vol, r.sb), -EIO);
	for (int d = 0; d < 2; d++)
		assert_int_equal(UB_GET(ub_disk_super, magic, r.buf[d] + 65536), 0);
	ub_volume_close(vol);
	/* and the flush after: the supers are written, the error still reported and sticky */
	for (int d = 0; d < 2; d++) {
		f[d].writes_left = -1;
		f[d].flushes_left = d == 1 ? 1 : -1;
		assert_int_equal(ub_dev_create("failing", &failing_ops, &f[d], DEVSZ, true, &devs[d]), 0);
	}
	assert_int_equal(ub_volume_create(devs, 2, r.sb, &quiet, &vol), 0);
	assert_int_equal(ub_volume_write_supers(vol, r.sb), -EIO);
	assert_int_equal(ub_volume_write_error(vol), -EIO);
	for (int d = 0; d < 2; d++)
		assert_true(UB_GET(ub_disk_super, magic, r.buf[d] + 65536) == UB_MAGIC);
	ub_volume_close(vol);
	rig_free(&r);
}

/*
 * The faulty backend, failing I/O number N for every N of a short run (a
 * RAID5 read-modify-write, a write over several stripes, a flush, the
 * superblocks): a failed write or flush is returned once and then every
 * later call fails with -EROFS; a failed read only degrades the
 * read-modify-write (rebuilt from parity), so the run completes and the data
 * is right.
 */
static int faulty_run(struct rig *r, struct ub_fault_plan *plan, uint64_t nth, int *first_err, int *later_err,
		      uint8_t *model)
{
	struct ub_dev *devs[MAXDEV];
	struct ub_volume *vol;
	static uint8_t data[4 * SL];
	int rets[4], step = 0;

	for (int d = 0; d < r->cfg.ndevs; d++) {
		struct ub_dev *m;
		memset(r->buf[d], 0, 4 * MiB);
		memset(r->buf[d] + 64 * MiB, 0, DEVSZ - 64 * MiB);
		memset(r->buf[d] + 65536, 0, 4096);
		assert_int_equal(ub_dev_open_mem("m", r->buf[d], DEVSZ, true, &m), 0);
		assert_int_equal(ub_dev_open_faulty(m, plan, &devs[d]), 0);
	}
	assert_int_equal(ub_volume_create(devs, r->cfg.ndevs, r->sb, &quiet_log, &vol), 0);
	ub_fault_plan_arm(plan, UB_FAULT_ANY, nth, false);
	memset(model, 0, r->length);
	memset(data, 0x31, sizeof(data));
	rets[step++] = ub_volume_write(vol, CHUNK_LOGICAL + 4096, 8192, data);
	memcpy(model + 4096, data, 8192);
	memset(data, 0x32, sizeof(data));
	rets[step++] = ub_volume_write(vol, CHUNK_LOGICAL + SL - 4096, 3 * SL, data);
	memcpy(model + SL - 4096, data, 3 * SL);
	rets[step++] = ub_volume_flush(vol);
	rets[step++] = ub_volume_write_supers(vol, r->sb);
	*first_err = 0;
	*later_err = 0;
	for (int i = 0; i < step; i++) {
		if (*first_err) {
			if (rets[i] != -EROFS)
				*later_err = rets[i] ? rets[i] : 1;
		} else {
			*first_err = rets[i];
		}
	}
	if (*first_err)
		assert_int_equal(ub_volume_write_error(vol), *first_err);
	else
		assert_int_equal(ub_volume_write_error(vol), 0);
	/* whatever happened, the sticky state holds for the next caller too */
	if (*first_err)
		assert_int_equal(ub_volume_write(vol, CHUNK_LOGICAL, 4096, data), -EROFS);
	ub_fault_plan_arm(plan, UB_FAULT_ANY, 0, false);
	if (!*first_err) {
		uint8_t *out = malloc(r->length);
		assert_non_null(out);
		assert_int_equal(ub_volume_read(vol, CHUNK_LOGICAL, r->length, 1, out), 0);
		assert_memory_equal(out, model, r->length);
		free(out);
	}
	ub_volume_close(vol);
	return step;
}

static void test_sticky_faulty(void **state)
{
	struct cfg c = { .bits = P_R5, .ndevs = 3, .nstripes = 3, .nparity = 1, .ncopies = 1, .tolerated = 1 };
	struct ub_fault_plan *plan;
	struct rig r;
	uint64_t total, nreads, reads_failed = 0, errors = 0;
	int first, later;

	(void)state;
	rng_state = 83;
	rig_init(&r, &c, 0);
	assert_int_equal(ub_fault_plan_new(&plan), 0);
	faulty_run(&r, plan, 0, &first, &later, r.model);
	assert_int_equal(first, 0);
	ub_fault_plan_arm(plan, UB_FAULT_ANY, 0, false);
	/* count the run's I/O once, unfailed */
	{
		struct ub_dev *devs[MAXDEV];
		struct ub_volume *vol;
		static uint8_t data[4 * SL];
		for (int d = 0; d < c.ndevs; d++) {
			struct ub_dev *m;
			assert_int_equal(ub_dev_open_mem("m", r.buf[d], DEVSZ, true, &m), 0);
			assert_int_equal(ub_dev_open_faulty(m, plan, &devs[d]), 0);
		}
		assert_int_equal(ub_volume_create(devs, c.ndevs, r.sb, &quiet_log, &vol), 0);
		ub_fault_plan_arm(plan, UB_FAULT_ANY, 0, false);
		assert_int_equal(ub_volume_write(vol, CHUNK_LOGICAL + 4096, 8192, data), 0);
		assert_int_equal(ub_volume_write(vol, CHUNK_LOGICAL + SL - 4096, 3 * SL, data), 0);
		assert_int_equal(ub_volume_flush(vol), 0);
		assert_int_equal(ub_volume_write_supers(vol, r.sb), 0);
		total = ub_fault_plan_count(plan, UB_FAULT_ANY);
		nreads = ub_fault_plan_count(plan, UB_FAULT_READ);
		assert_true(nreads > 0);
		assert_true(ub_fault_plan_count(plan, UB_FAULT_FLUSH) == 3 * 3);
		ub_volume_close(vol);
	}
	for (uint64_t n = 1; n <= total; n++) {
		faulty_run(&r, plan, n, &first, &later, r.model);
		assert_true(ub_fault_plan_injected(plan) <= 1);
		assert_int_equal(later, 0);
		if (first) {
			assert_int_equal(first, -EIO);
			errors++;
		} else {
			reads_failed++;
		}
	}
	/* every write and flush of the run, failed in turn, was an error; only failed reads were survived */
	assert_true(reads_failed == nreads);
	assert_true(errors == total - nreads);
	faulty_run(&r, plan, total + 1, &first, &later, r.model);
	assert_int_equal(first, 0);
	ub_fault_plan_put(plan);
	rig_free(&r);
}

/*
 * The recorder under a volume: a commit-like sequence (data, then
 * superblocks, which flush before and after) recorded on two RAID1 devices
 * sharing one log. A crash at every cut, and variants with the unflushed
 * writes dropped or reordered, must open at generation 1 with the old data or
 * at generation 2 with the new: a superblock never lands before the data it
 * follows.
 */
static void restore(struct rig *r, uint8_t *const *base)
{
	for (int d = 0; d < r->cfg.ndevs; d++) {
		memcpy(r->buf[d], base[d], 10 * MiB);
		memcpy(r->buf[d] + 64 * MiB, base[d] + 10 * MiB, DEVSZ - 64 * MiB);
	}
}

static void test_recorder_crash_cuts(void **state)
{
	struct cfg c = { .bits = P_R1, .ndevs = 2, .nstripes = 2, .ncopies = 2, .tolerated = 1 };
	struct ub_rec_log *log;
	struct ub_dev *devs[2], *tg[2];
	struct ub_volume *vol;
	uint8_t *base[2], oldd[3 * 4096], newd[3 * 4096], out[3 * 4096];
	struct rig r;
	uint64_t count;
	int seen[3] = { 0 };

	(void)state;
	rng_state = 84;
	rig_init(&r, &c, 0);
	rnd_fill(oldd, sizeof(oldd));
	rnd_fill(newd, sizeof(newd));
	vol = rig_create(&r);
	assert_int_equal(ub_volume_write(vol, CHUNK_LOGICAL + 4096, sizeof(oldd), oldd), 0);
	assert_int_equal(ub_volume_write_supers(vol, r.sb), 0);
	ub_volume_close(vol);
	for (int d = 0; d < 2; d++) {
		base[d] = malloc(10 * MiB + DEVSZ - 64 * MiB);
		assert_non_null(base[d]);
		memcpy(base[d], r.buf[d], 10 * MiB);
		memcpy(base[d] + 10 * MiB, r.buf[d] + 64 * MiB, DEVSZ - 64 * MiB);
	}

	/* the recorded run: reopen through recorders, write new data, commit generation 2 */
	assert_int_equal(ub_rec_log_new(&log), 0);
	for (int d = 0; d < 2; d++) {
		struct ub_dev *m;
		assert_int_equal(ub_dev_open_mem("m", r.buf[d], DEVSZ, true, &m), 0);
		assert_int_equal(ub_dev_open_recorder(m, log, d, &devs[d]), 0);
	}
	{
		struct ub_volume_opts opts = { .writable = true, .super_mirror = -1 };
		assert_int_equal(ub_volume_open_devs(devs, 2, &opts, &quiet_log, &vol), 0);
	}
	assert_int_equal(ub_volume_write(vol, CHUNK_LOGICAL + 4096, sizeof(newd), newd), 0);
	UB_SET(ub_disk_super, generation, r.sb, 2);
	assert_int_equal(ub_volume_write_supers(vol, r.sb), 0);
	ub_volume_close(vol);
	count = ub_rec_log_count(log);
	/* 2 data writes, 2 flushes, 2 x 2 superblocks, 2 flushes */
	assert_true(count == 10);

	for (uint64_t k = 0; k <= count; k++) {
		for (uint64_t seed = 0; seed < 12; seed++) {
			struct ub_volume_opts opts = { .writable = false, .super_mirror = -1 };
			struct ub_dev *rd[2];
			uint64_t gen;

			restore(&r, base);
			for (int d = 0; d < 2; d++)
				assert_int_equal(ub_dev_open_mem("t", r.buf[d], DEVSZ, true, &tg[d]), 0);
			/* seed 0: every pending write landed in order; then variants */
			if (seed == 0)
				assert_int_equal(ub_rec_log_apply(log, k, tg, 2), 0);
			else
				assert_int_equal(ub_rec_log_apply_variant(log, k, seed, tg, 2), 0);
			for (int d = 0; d < 2; d++) {
				ub_dev_close(tg[d]);
				assert_int_equal(ub_dev_open_mem("t", r.buf[d], DEVSZ, false, &rd[d]), 0);
			}
			assert_int_equal(ub_volume_open_devs(rd, 2, &opts, &quiet_log, &vol), 0);
			gen = vol->generation;
			assert_true(gen == 1 || gen == 2);
			assert_int_equal(ub_volume_read(vol, CHUNK_LOGICAL + 4096, sizeof(out), 0, out), 0);
			if (gen == 2)
				assert_memory_equal(out, newd, sizeof(out));
			seen[gen]++;
			ub_volume_close(vol);
		}
	}
	/* both outcomes happen */
	assert_true(seen[1] > 0 && seen[2] > 0);
	ub_rec_log_put(log);
	for (int d = 0; d < 2; d++)
		free(base[d]);
	rig_free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_single),
		cmocka_unit_test(test_dup),
		cmocka_unit_test(test_raid0),
		cmocka_unit_test(test_raid1),
		cmocka_unit_test(test_raid1c3),
		cmocka_unit_test(test_raid1c4),
		cmocka_unit_test(test_raid10),
		cmocka_unit_test(test_raid5),
		cmocka_unit_test(test_raid6),
		cmocka_unit_test(test_write_args),
		cmocka_unit_test(test_write_bounds),
		cmocka_unit_test(test_write_bounds_parity),
		cmocka_unit_test(test_read_only_volume),
		cmocka_unit_test(test_rewrite_one_copy),
		cmocka_unit_test(test_sticky_error),
		cmocka_unit_test(test_supers_flush_first),
		cmocka_unit_test(test_sticky_faulty),
		cmocka_unit_test(test_recorder_crash_cuts),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
