/* SPDX-License-Identifier: MIT */
/*
 * Decoders for root-tree, uuid-tree and quota-tree items, and the v1 free
 * space cache header.
 */
#include <stdio.h>
#include <string.h>

#include "print_priv.h"

#define ROOT_REF_HDR ((uint32_t)sizeof(struct btrfs_root_ref))

/* Kernel-internal root item flag: the subvolume is deleted and being cleaned. */
#define PR_ROOT_SUBVOL_DEAD (1ULL << 48)

/* Newer than the installed UAPI header: quota status flag and item tail. */
#define PR_QGROUP_STATUS_FLAG_SIMPLE_MODE (1ULL << 3)
#define PR_QGROUP_STATUS_ENABLE_GEN_OFF 32U

static void root_flags_str(char *out, size_t n, uint64_t flags)
{
	bool rdonly = flags & BTRFS_ROOT_SUBVOL_RDONLY;
	bool dead = flags & PR_ROOT_SUBVOL_DEAD;

	if (!rdonly && !dead)
		snprintf(out, n, "none");
	else
		snprintf(out, n, "%s%s%s", rdonly ? "RDONLY" : "", rdonly && dead ? "|" : "", dead ? "DEAD" : "");
}

static void print_root_uuids(FILE *f, const uint8_t *p, uint32_t size)
{
	char uuid[PR_UUID_STR_LEN];

	if (size < PR_END(btrfs_root_item, uuid))
		goto short_item;
	pr_uuid_str(uuid, UB_PTR(btrfs_root_item, uuid, p));
	fprintf(f, "\t\tuuid %s\n", uuid);
	if (size < PR_END(btrfs_root_item, parent_uuid))
		goto short_item;
	pr_uuid_str(uuid, UB_PTR(btrfs_root_item, parent_uuid, p));
	fprintf(f, "\t\tparent_uuid %s\n", uuid);
	if (size < PR_END(btrfs_root_item, received_uuid))
		goto short_item;
	pr_uuid_str(uuid, UB_PTR(btrfs_root_item, received_uuid, p));
	fprintf(f, "\t\treceived_uuid %s\n", uuid);
	if (size < PR_END(btrfs_root_item, rtransid))
		goto short_item;
	fprintf(f, "\t\tctransid %llu otransid %llu stransid %llu rtransid %llu\n",
		(unsigned long long)UB_GET(btrfs_root_item, ctransid, p),
		(unsigned long long)UB_GET(btrfs_root_item, otransid, p),
		(unsigned long long)UB_GET(btrfs_root_item, stransid, p),
		(unsigned long long)UB_GET(btrfs_root_item, rtransid, p));
	if (size < PR_END(btrfs_root_item, ctime))
		goto short_item;
	pr_timespec(f, "\t\tctime ", UB_PTR(btrfs_root_item, ctime, p));
	if (size < PR_END(btrfs_root_item, otime))
		goto short_item;
	pr_timespec(f, "\t\totime ", UB_PTR(btrfs_root_item, otime, p));
	if (size < PR_END(btrfs_root_item, stime))
		goto short_item;
	pr_timespec(f, "\t\tstime ", UB_PTR(btrfs_root_item, stime, p));
	if (size < PR_END(btrfs_root_item, rtime))
		goto short_item;
	pr_timespec(f, "\t\trtime ", UB_PTR(btrfs_root_item, rtime, p));
	return;
short_item:
	pr_short(f, size);
}

void pr_root_item(FILE *f, const uint8_t *p, uint32_t size)
{
	char flags_str[32];
	uint64_t generation, generation_v2 = 0, flags;

	if (size < PR_END(btrfs_root_item, bytes_used))
		goto short_item;
	generation = UB_GET(btrfs_root_item, generation, p);
	fprintf(f, "\t\tgeneration %llu root_dirid %llu bytenr %llu byte_limit %llu bytes_used %llu\n",
		(unsigned long long)generation, (unsigned long long)UB_GET(btrfs_root_item, root_dirid, p),
		(unsigned long long)UB_GET(btrfs_root_item, bytenr, p),
		(unsigned long long)UB_GET(btrfs_root_item, byte_limit, p),
		(unsigned long long)UB_GET(btrfs_root_item, bytes_used, p));
	if (size < PR_END(btrfs_root_item, refs))
		goto short_item;
	flags = UB_GET(btrfs_root_item, flags, p);
	root_flags_str(flags_str, sizeof(flags_str), flags);
	fprintf(f, "\t\tlast_snapshot %llu flags 0x%llx(%s) refs %u\n",
		(unsigned long long)UB_GET(btrfs_root_item, last_snapshot, p), (unsigned long long)flags,
		flags_str, (unsigned)UB_GET(btrfs_root_item, refs, p));
	if (size < PR_END(btrfs_root_item, drop_level))
		goto short_item;
	fputs("\t\tdrop_progress ", f);
	pr_disk_key(f, UB_PTR(btrfs_root_item, drop_progress, p));
	fprintf(f, " drop_level %u\n", (unsigned)UB_GET(btrfs_root_item, drop_level, p));
	if (size < PR_END(btrfs_root_item, level))
		goto short_item;
	/* Items written before generation_v2 existed end here; the field reads as 0. */
	if (size >= PR_END(btrfs_root_item, generation_v2))
		generation_v2 = UB_GET(btrfs_root_item, generation_v2, p);
	fprintf(f, "\t\tlevel %u generation_v2 %llu\n", (unsigned)UB_GET(btrfs_root_item, level, p),
		(unsigned long long)generation_v2);
	/* A kernel that did not know the v2 fields left generation_v2 stale: they are unreliable. */
	if (size >= PR_END(btrfs_root_item, generation_v2) && generation == generation_v2)
		print_root_uuids(f, p, size);
	return;
short_item:
	pr_short(f, size);
}

void pr_root_ref(FILE *f, const uint8_t *p, uint32_t size, const char *tag)
{
	uint32_t name_len, avail, shown;

	if (size < ROOT_REF_HDR) {
		pr_short(f, size);
		return;
	}
	name_len = (uint32_t)UB_GET(btrfs_root_ref, name_len, p);
	avail = size - ROOT_REF_HDR;
	shown = name_len < avail ? name_len : avail;
	if (shown > PR_NAME_MAX)
		shown = PR_NAME_MAX;
	fprintf(f, "\t\troot %s key dirid %llu sequence %llu name ", tag,
		(unsigned long long)UB_GET(btrfs_root_ref, dirid, p),
		(unsigned long long)UB_GET(btrfs_root_ref, sequence, p));
	pr_name(f, p + ROOT_REF_HDR, shown);
	fputc('\n', f);
	if (name_len > avail)
		pr_short(f, size);
}

void pr_uuid_item(FILE *f, const uint8_t *p, uint32_t size)
{
	for (uint32_t off = 0; size - off >= 8; off += 8)
		fprintf(f, "\t\tsubvol_id %llu\n", (unsigned long long)ub_le64(p + off));
	if (size % 8)
		fprintf(f, "\t\tuuid item with illegal size %u\n", size);
}

void pr_qgroup_status(FILE *f, const uint8_t *p, uint32_t size)
{
	uint64_t flags;

	if (size < sizeof(struct btrfs_qgroup_status_item)) {
		pr_short(f, size);
		return;
	}
	flags = UB_GET(btrfs_qgroup_status_item, flags, p);
	fprintf(f, "\t\tversion %llu generation %llu flags %s%s%s%s scan %llu",
		(unsigned long long)UB_GET(btrfs_qgroup_status_item, version, p),
		(unsigned long long)UB_GET(btrfs_qgroup_status_item, generation, p),
		(flags & BTRFS_QGROUP_STATUS_FLAG_ON) ? "ON" : "OFF",
		(flags & BTRFS_QGROUP_STATUS_FLAG_RESCAN) ? "|SCANNING" : "",
		(flags & BTRFS_QGROUP_STATUS_FLAG_INCONSISTENT) ? "|INCONSISTENT" : "",
		(flags & PR_QGROUP_STATUS_FLAG_SIMPLE_MODE) ? "|SIMPLE_MODE" : "",
		(unsigned long long)UB_GET(btrfs_qgroup_status_item, rescan, p));
	/*
	 * Kernels now always write the enable generation, but it only means
	 * something (and btrfs-progs only shows it) for simple quotas.
	 */
	if ((flags & PR_QGROUP_STATUS_FLAG_SIMPLE_MODE) && size >= PR_QGROUP_STATUS_ENABLE_GEN_OFF + 8)
		fprintf(f, " enable_gen %llu", (unsigned long long)ub_le64(p + PR_QGROUP_STATUS_ENABLE_GEN_OFF));
	fputc('\n', f);
}

void pr_qgroup_info(FILE *f, const uint8_t *p, uint32_t size)
{
	if (size < sizeof(struct btrfs_qgroup_info_item)) {
		pr_short(f, size);
		return;
	}
	fprintf(f,
		"\t\tgeneration %llu\n"
		"\t\treferenced %llu referenced_compressed %llu\n"
		"\t\texclusive %llu exclusive_compressed %llu\n",
		(unsigned long long)UB_GET(btrfs_qgroup_info_item, generation, p),
		(unsigned long long)UB_GET(btrfs_qgroup_info_item, rfer, p),
		(unsigned long long)UB_GET(btrfs_qgroup_info_item, rfer_cmpr, p),
		(unsigned long long)UB_GET(btrfs_qgroup_info_item, excl, p),
		(unsigned long long)UB_GET(btrfs_qgroup_info_item, excl_cmpr, p));
}

void pr_qgroup_limit(FILE *f, const uint8_t *p, uint32_t size)
{
	if (size < sizeof(struct btrfs_qgroup_limit_item)) {
		pr_short(f, size);
		return;
	}
	/* Signed, as btrfs-progs shows them. */
	fprintf(f,
		"\t\tflags %llx\n"
		"\t\tmax_referenced %lld max_exclusive %lld\n"
		"\t\trsv_referenced %lld rsv_exclusive %lld\n",
		(unsigned long long)UB_GET(btrfs_qgroup_limit_item, flags, p),
		(long long)UB_GET(btrfs_qgroup_limit_item, max_rfer, p),
		(long long)UB_GET(btrfs_qgroup_limit_item, max_excl, p),
		(long long)UB_GET(btrfs_qgroup_limit_item, rsv_rfer, p),
		(long long)UB_GET(btrfs_qgroup_limit_item, rsv_excl, p));
}

void pr_free_space_header(FILE *f, const uint8_t *p, uint32_t size)
{
	if (size < sizeof(struct btrfs_free_space_header)) {
		pr_short(f, size);
		return;
	}
	fputs("\t\tlocation ", f);
	pr_disk_key(f, UB_PTR(btrfs_free_space_header, location, p));
	fprintf(f, "\n\t\tcache generation %llu entries %llu bitmaps %llu\n",
		(unsigned long long)UB_GET(btrfs_free_space_header, generation, p),
		(unsigned long long)UB_GET(btrfs_free_space_header, num_entries, p),
		(unsigned long long)UB_GET(btrfs_free_space_header, num_bitmaps, p));
}
