/* SPDX-License-Identifier: MIT */
/*
 * Decoders for chunk-tree and device-tree items: devices, chunks and their
 * stripes, device extents, device statistics, device replace, and the
 * balance item kept in the root tree.
 */
#include <stdio.h>
#include <string.h>

#include "print_priv.h"

#define CHUNK_HDR ((uint32_t)offsetof(struct btrfs_chunk, stripe))
#define STRIPE_SIZE ((uint32_t)sizeof(struct btrfs_stripe))
#define DEV_STATS_KNOWN ((uint32_t)sizeof(struct btrfs_dev_stats_item))

void pr_dev_item(FILE *f, const uint8_t *p, uint32_t size)
{
	char uuid[PR_UUID_STR_LEN];

	if (size < PR_END(btrfs_dev_item, bytes_used))
		goto short_item;
	fprintf(f, "\t\tdevid %llu total_bytes %llu bytes_used %llu\n",
		(unsigned long long)UB_GET(btrfs_dev_item, devid, p),
		(unsigned long long)UB_GET(btrfs_dev_item, total_bytes, p),
		(unsigned long long)UB_GET(btrfs_dev_item, bytes_used, p));
	if (size < PR_END(btrfs_dev_item, type))
		goto short_item;
	fprintf(f, "\t\tio_align %u io_width %u sector_size %u type %llu\n",
		(unsigned)UB_GET(btrfs_dev_item, io_align, p), (unsigned)UB_GET(btrfs_dev_item, io_width, p),
		(unsigned)UB_GET(btrfs_dev_item, sector_size, p),
		(unsigned long long)UB_GET(btrfs_dev_item, type, p));
	if (size < PR_END(btrfs_dev_item, dev_group))
		goto short_item;
	fprintf(f, "\t\tgeneration %llu start_offset %llu dev_group %u\n",
		(unsigned long long)UB_GET(btrfs_dev_item, generation, p),
		(unsigned long long)UB_GET(btrfs_dev_item, start_offset, p),
		(unsigned)UB_GET(btrfs_dev_item, dev_group, p));
	if (size < PR_END(btrfs_dev_item, bandwidth))
		goto short_item;
	fprintf(f, "\t\tseek_speed %u bandwidth %u\n", (unsigned)UB_GET(btrfs_dev_item, seek_speed, p),
		(unsigned)UB_GET(btrfs_dev_item, bandwidth, p));
	if (size < PR_END(btrfs_dev_item, uuid))
		goto short_item;
	pr_uuid_str(uuid, UB_PTR(btrfs_dev_item, uuid, p));
	fprintf(f, "\t\tuuid %s\n", uuid);
	if (size < PR_END(btrfs_dev_item, fsid))
		goto short_item;
	pr_uuid_str(uuid, UB_PTR(btrfs_dev_item, fsid, p));
	fprintf(f, "\t\tfsid %s\n", uuid);
	return;
short_item:
	pr_short(f, size);
}

void pr_chunk(FILE *f, const uint8_t *p, uint32_t size)
{
	char type[PR_FLAGS_STR_LEN], uuid[PR_UUID_STR_LEN];
	unsigned num_stripes;

	if (size < CHUNK_HDR)
		goto short_item;
	num_stripes = (unsigned)UB_GET(btrfs_chunk, num_stripes, p);
	pr_bg_flags_str(type, sizeof(type), UB_GET(btrfs_chunk, type, p));
	fprintf(f, "\t\tlength %llu owner %llu stripe_len %llu type %s\n",
		(unsigned long long)UB_GET(btrfs_chunk, length, p), (unsigned long long)UB_GET(btrfs_chunk, owner, p),
		(unsigned long long)UB_GET(btrfs_chunk, stripe_len, p), type);
	fprintf(f, "\t\tio_align %u io_width %u sector_size %u\n", (unsigned)UB_GET(btrfs_chunk, io_align, p),
		(unsigned)UB_GET(btrfs_chunk, io_width, p), (unsigned)UB_GET(btrfs_chunk, sector_size, p));
	fprintf(f, "\t\tnum_stripes %u sub_stripes %u\n", num_stripes,
		(unsigned)UB_GET(btrfs_chunk, sub_stripes, p));
	if (num_stripes == 0)
		fputs("\t\t(invalid num_stripes 0)\n", f);
	for (unsigned i = 0; i < num_stripes; i++) {
		uint32_t off = CHUNK_HDR + i * STRIPE_SIZE;
		const uint8_t *s = p + off;

		if (size - off < STRIPE_SIZE)
			goto short_item;
		pr_uuid_str(uuid, UB_PTR(btrfs_stripe, dev_uuid, s));
		fprintf(f, "\t\t\tstripe %u devid %llu offset %llu\n\t\t\tdev_uuid %s\n", i,
			(unsigned long long)UB_GET(btrfs_stripe, devid, s),
			(unsigned long long)UB_GET(btrfs_stripe, offset, s), uuid);
	}
	return;
short_item:
	pr_short(f, size);
}

void pr_dev_extent(FILE *f, const uint8_t *p, uint32_t size)
{
	char uuid[PR_UUID_STR_LEN];

	if (size < sizeof(struct btrfs_dev_extent)) {
		pr_short(f, size);
		return;
	}
	pr_uuid_str(uuid, UB_PTR(btrfs_dev_extent, chunk_tree_uuid, p));
	fprintf(f,
		"\t\tdev extent chunk_tree %llu\n"
		"\t\tchunk_objectid %llu chunk_offset %llu length %llu\n"
		"\t\tchunk_tree_uuid %s\n",
		(unsigned long long)UB_GET(btrfs_dev_extent, chunk_tree, p),
		(unsigned long long)UB_GET(btrfs_dev_extent, chunk_objectid, p),
		(unsigned long long)UB_GET(btrfs_dev_extent, chunk_offset, p),
		(unsigned long long)UB_GET(btrfs_dev_extent, length, p), uuid);
}

static void print_dev_stats(FILE *f, const uint8_t *p, uint32_t size)
{
	fputs("\t\tdevice stats\n", f);
	if (size < DEV_STATS_KNOWN) {
		pr_short(f, size);
		return;
	}
	fprintf(f, "\t\twrite_errs %llu read_errs %llu flush_errs %llu corruption_errs %llu generation %llu\n",
		(unsigned long long)ub_le64(p + 8 * BTRFS_DEV_STAT_WRITE_ERRS),
		(unsigned long long)ub_le64(p + 8 * BTRFS_DEV_STAT_READ_ERRS),
		(unsigned long long)ub_le64(p + 8 * BTRFS_DEV_STAT_FLUSH_ERRS),
		(unsigned long long)ub_le64(p + 8 * BTRFS_DEV_STAT_CORRUPTION_ERRS),
		(unsigned long long)ub_le64(p + 8 * BTRFS_DEV_STAT_GENERATION_ERRS));
	/* A newer kernel may count more things; show them rather than hide them. */
	if (size > DEV_STATS_KNOWN) {
		fprintf(f, "\t\tunknown stats item bytes %u\n", size - DEV_STATS_KNOWN);
		for (uint32_t off = DEV_STATS_KNOWN; size - off >= 8; off += 8)
			fprintf(f, "\t\tunknown item %u offset %u value %llu\n", off / 8, off,
				(unsigned long long)ub_le64(p + off));
	}
}

void pr_persistent_item(FILE *f, const struct ub_key *key, const uint8_t *p, uint32_t size)
{
	fputs("\t\tpersistent item objectid ", f);
	pr_objectid(f, key->objectid, key->type);
	fprintf(f, " offset %llu\n", (unsigned long long)key->offset);
	if (key->objectid == BTRFS_DEV_STATS_OBJECTID)
		print_dev_stats(f, p, size);
	else
		fprintf(f, "\t\tunknown persistent item objectid %llu\n", (unsigned long long)key->objectid);
}

static void print_balance_args(FILE *f, const char *name, const uint8_t *a)
{
	fprintf(f, "\t\t%s\n", name);
	fprintf(f, "\t\tprofiles %llu devid %llu target %llu flags %llu\n",
		(unsigned long long)UB_GET(btrfs_disk_balance_args, profiles, a),
		(unsigned long long)UB_GET(btrfs_disk_balance_args, devid, a),
		(unsigned long long)UB_GET(btrfs_disk_balance_args, target, a),
		(unsigned long long)UB_GET(btrfs_disk_balance_args, flags, a));
	fprintf(f, "\t\tusage_min %u usage_max %u pstart %llu pend %llu\n",
		(unsigned)UB_GET(btrfs_disk_balance_args, usage_min, a),
		(unsigned)UB_GET(btrfs_disk_balance_args, usage_max, a),
		(unsigned long long)UB_GET(btrfs_disk_balance_args, pstart, a),
		(unsigned long long)UB_GET(btrfs_disk_balance_args, pend, a));
	fprintf(f, "\t\tvstart %llu vend %llu limit_min %u limit_max %u\n",
		(unsigned long long)UB_GET(btrfs_disk_balance_args, vstart, a),
		(unsigned long long)UB_GET(btrfs_disk_balance_args, vend, a),
		(unsigned)UB_GET(btrfs_disk_balance_args, limit_min, a),
		(unsigned)UB_GET(btrfs_disk_balance_args, limit_max, a));
	fprintf(f, "\t\tstripes_min %u stripes_max %u\n", (unsigned)UB_GET(btrfs_disk_balance_args, stripes_min, a),
		(unsigned)UB_GET(btrfs_disk_balance_args, stripes_max, a));
}

static void print_balance_item(FILE *f, const uint8_t *p, uint32_t size)
{
	if (size < PR_END(btrfs_balance_item, flags))
		goto short_item;
	fprintf(f, "\t\tbalance status flags %llu\n", (unsigned long long)UB_GET(btrfs_balance_item, flags, p));
	if (size < PR_END(btrfs_balance_item, data))
		goto short_item;
	print_balance_args(f, "DATA", UB_PTR(btrfs_balance_item, data, p));
	if (size < PR_END(btrfs_balance_item, meta))
		goto short_item;
	print_balance_args(f, "METADATA", UB_PTR(btrfs_balance_item, meta, p));
	if (size < PR_END(btrfs_balance_item, sys))
		goto short_item;
	print_balance_args(f, "SYSTEM", UB_PTR(btrfs_balance_item, sys, p));
	return;
short_item:
	pr_short(f, size);
}

void pr_temporary_item(FILE *f, const struct ub_key *key, const uint8_t *p, uint32_t size)
{
	fputs("\t\ttemporary item objectid ", f);
	pr_objectid(f, key->objectid, key->type);
	fprintf(f, " offset %llu\n", (unsigned long long)key->offset);
	if (key->objectid == BTRFS_BALANCE_OBJECTID)
		print_balance_item(f, p, size);
	else
		fprintf(f, "\t\tunknown temporary item objectid %llu\n", (unsigned long long)key->objectid);
}

void pr_dev_replace(FILE *f, const uint8_t *p, uint32_t size)
{
	static const char *const states[] = {
		[BTRFS_IOCTL_DEV_REPLACE_STATE_NEVER_STARTED] = "never started",
		[BTRFS_IOCTL_DEV_REPLACE_STATE_STARTED] = "started",
		[BTRFS_IOCTL_DEV_REPLACE_STATE_FINISHED] = "finished",
		[BTRFS_IOCTL_DEV_REPLACE_STATE_CANCELED] = "canceled",
		[BTRFS_IOCTL_DEV_REPLACE_STATE_SUSPENDED] = "suspended",
	};
	uint64_t state;

	if (size < sizeof(struct btrfs_dev_replace_item)) {
		pr_short(f, size);
		return;
	}
	state = UB_GET(btrfs_dev_replace_item, replace_state, p);
	fprintf(f, "\t\tsrc_devid %llu cursor_left %llu cursor_right %llu cont_reading_from_srcdev_mode %llu\n",
		(unsigned long long)UB_GET(btrfs_dev_replace_item, src_devid, p),
		(unsigned long long)UB_GET(btrfs_dev_replace_item, cursor_left, p),
		(unsigned long long)UB_GET(btrfs_dev_replace_item, cursor_right, p),
		(unsigned long long)UB_GET(btrfs_dev_replace_item, cont_reading_from_srcdev_mode, p));
	fprintf(f, "\t\treplace_state %llu (%s) time_started %llu time_stopped %llu\n", (unsigned long long)state,
		state < sizeof(states) / sizeof(states[0]) ? states[state] : "unknown",
		(unsigned long long)UB_GET(btrfs_dev_replace_item, time_started, p),
		(unsigned long long)UB_GET(btrfs_dev_replace_item, time_stopped, p));
	fprintf(f, "\t\tnum_write_errors %llu num_uncorrectable_read_errors %llu\n",
		(unsigned long long)UB_GET(btrfs_dev_replace_item, num_write_errors, p),
		(unsigned long long)UB_GET(btrfs_dev_replace_item, num_uncorrectable_read_errors, p));
}
