/* SPDX-License-Identifier: MIT */
/*
 * Small formatting helpers shared by the superblock and tree printers: uuids,
 * safe names, objectids and keys, timestamps, flag strings, hex dumps.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "print_priv.h"

void pr_short(FILE *f, uint32_t size)
{
	fprintf(f, "\t\t(item too short: %u bytes)\n", size);
}

void pr_uuid_str(char out[PR_UUID_STR_LEN], const uint8_t *uuid)
{
	ub_uuid_str(uuid, out);
}

/*
 * Length of the well-formed UTF-8 sequence at p (at most `avail` bytes), or 0.
 * Overlong forms, surrogates, code points past U+10FFFF and the C1 controls
 * (which some terminals obey like ESC) do not count as well-formed here.
 */
static size_t utf8_seq_len(const uint8_t *p, size_t avail)
{
	uint32_t cp;
	size_t n;

	if (p[0] >= 0xc2 && p[0] <= 0xdf) {
		n = 2;
		cp = p[0] & 0x1fU;
	} else if (p[0] >= 0xe0 && p[0] <= 0xef) {
		n = 3;
		cp = p[0] & 0x0fU;
	} else if (p[0] >= 0xf0 && p[0] <= 0xf4) {
		n = 4;
		cp = p[0] & 0x07U;
	} else {
		return 0;
	}
	if (n > avail)
		return 0;
	for (size_t i = 1; i < n; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (p[i] & 0x3fU);
	}
	if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10ffff ||
	    (cp >= 0xd800 && cp <= 0xdfff) || (cp >= 0x80 && cp <= 0x9f))
		return 0;
	return n;
}

void pr_name(FILE *f, const uint8_t *p, size_t len)
{
	size_t i = 0;

	while (i < len) {
		uint8_t c = p[i];
		size_t n;

		if (c == '\\') {
			fputs("\\\\", f);
			i++;
		} else if (c >= 0x20 && c < 0x7f) {
			fputc(c, f);
			i++;
		} else if (c >= 0x80 && (n = utf8_seq_len(p + i, len - i)) > 0) {
			fwrite(p + i, 1, n, f);
			i += n;
		} else {
			fprintf(f, "\\x%02x", c);
			i++;
		}
	}
}

void pr_objectid(FILE *f, uint64_t objectid, uint8_t type)
{
	const char *name;

	/* Some key types use the objectid for something that is not a tree or inode. */
	switch (type) {
	case BTRFS_PERSISTENT_ITEM_KEY:
		if (objectid == BTRFS_DEV_STATS_OBJECTID)
			fputs("DEV_STATS", f);
		else
			fprintf(f, "%llu", (unsigned long long)objectid);
		return;
	case BTRFS_DEV_EXTENT_KEY:
		fprintf(f, "%llu", (unsigned long long)objectid);
		return;
	case BTRFS_QGROUP_RELATION_KEY:
		fprintf(f, "%llu/%llu", (unsigned long long)(objectid >> 48),
			(unsigned long long)(objectid & ((1ULL << 48) - 1)));
		return;
	case BTRFS_UUID_KEY_SUBVOL:
	case BTRFS_UUID_KEY_RECEIVED_SUBVOL:
		fprintf(f, "0x%016llx", (unsigned long long)objectid);
		return;
	default:
		break;
	}

	if (objectid == BTRFS_DEV_ITEMS_OBJECTID && type == BTRFS_DEV_ITEM_KEY) {
		fputs("DEV_ITEMS", f);
		return;
	}
	if (objectid == (uint64_t)-1) {
		fputs("-1", f);
		return;
	}
	/* 256 is also the first inode of every subvolume: only chunk items name it. */
	if (objectid == BTRFS_FIRST_CHUNK_TREE_OBJECTID) {
		if (type == BTRFS_CHUNK_ITEM_KEY)
			fputs("FIRST_CHUNK_TREE", f);
		else
			fprintf(f, "%llu", (unsigned long long)objectid);
		return;
	}
	name = ub_objectid_name(objectid);
	if (name)
		fputs(name, f);
	else
		fprintf(f, "%llu", (unsigned long long)objectid);
}

static void print_key_parts(FILE *f, uint64_t objectid, uint8_t type, uint64_t offset)
{
	const char *tname;

	fputc('(', f);
	pr_objectid(f, objectid, type);
	fputc(' ', f);
	if (type == 0 && objectid == BTRFS_FREE_SPACE_OBJECTID)
		tname = "UNTYPED"; /* v1 space cache header */
	else
		tname = type ? ub_key_type_name(type) : NULL;
	if (tname)
		fputs(tname, f);
	else
		fprintf(f, "UNKNOWN.%u", type);

	switch (type) {
	case BTRFS_QGROUP_RELATION_KEY:
	case BTRFS_QGROUP_INFO_KEY:
	case BTRFS_QGROUP_LIMIT_KEY:
		fprintf(f, " %llu/%llu)", (unsigned long long)(offset >> 48),
			(unsigned long long)(offset & ((1ULL << 48) - 1)));
		break;
	case BTRFS_UUID_KEY_SUBVOL:
	case BTRFS_UUID_KEY_RECEIVED_SUBVOL:
		fprintf(f, " 0x%016llx)", (unsigned long long)offset);
		break;
	case BTRFS_ROOT_ITEM_KEY:
		/* A relocation tree's offset is the id of the tree it relocates. */
		fputc(' ', f);
		if (objectid == BTRFS_TREE_RELOC_OBJECTID)
			pr_objectid(f, offset, type);
		else
			fprintf(f, "%llu", (unsigned long long)offset);
		fputc(')', f);
		break;
	default:
		if (offset == (uint64_t)-1)
			fputs(" -1)", f);
		else
			fprintf(f, " %llu)", (unsigned long long)offset);
		break;
	}
}

void ub_print_key(FILE *f, const struct ub_key *key)
{
	print_key_parts(f, key->objectid, key->type, key->offset);
}

void pr_disk_key(FILE *f, const uint8_t *disk_key)
{
	struct ub_key k;

	ub_key_read(&k, disk_key);
	fputs("key ", f);
	print_key_parts(f, k.objectid, k.type, k.offset);
}

void pr_timespec(FILE *f, const char *prefix, const uint8_t *ts)
{
	uint64_t sec = UB_GET(btrfs_timespec, sec, ts);
	uint32_t nsec = (uint32_t)UB_GET(btrfs_timespec, nsec, ts);
	char stamp[64] = "invalid time";
	time_t t = (time_t)sec;
	struct tm tm;

	/* Seconds far outside the calendar make localtime fail; say so instead. */
	if ((uint64_t)t == sec && localtime_r(&t, &tm))
		strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", &tm);
	fprintf(f, "%s%llu.%u (%s)\n", prefix, (unsigned long long)sec, nsec, stamp);
}

void pr_bg_flags_str(char *out, size_t n, uint64_t flags)
{
	static const struct {
		uint64_t bit;
		const char *name;
	} types[] = {
		{ BTRFS_BLOCK_GROUP_DATA, "DATA" },
		{ BTRFS_BLOCK_GROUP_METADATA, "METADATA" },
		{ BTRFS_BLOCK_GROUP_SYSTEM, "SYSTEM" },
	};
	const char *profile = ub_profile_name(flags);
	size_t len = 0;

	out[0] = '\0';
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		if (!(flags & types[i].bit))
			continue;
		len += (size_t)snprintf(out + len, n - len, "%s%s", len ? "|" : "", types[i].name);
		if (len >= n)
			return;
	}
	if (!profile || strcmp(profile, "UNKNOWN") == 0)
		snprintf(out + len, n - len, "|UNKNOWN.0x%llx",
			 (unsigned long long)(flags & BTRFS_BLOCK_GROUP_PROFILE_MASK));
	else
		snprintf(out + len, n - len, "|%s", profile);
}

void pr_hexdump(FILE *f, const uint8_t *p, uint32_t size, uint32_t max)
{
	uint32_t n = size < max ? size : max;

	for (uint32_t i = 0; i < n; i += 16) {
		fprintf(f, "\t\t%08x:", i);
		for (uint32_t j = i; j < i + 16 && j < n; j++)
			fprintf(f, " %02x", p[j]);
		fputc('\n', f);
	}
	if (n < size)
		fprintf(f, "\t\t... (%u more bytes)\n", size - n);
}
