/* SPDX-License-Identifier: MIT */
/* mkfs's names: profiles, checksums, -O features (the spellings mkfs.btrfs accepts). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ubtrfs/mkfs.h"
#include "volume/volume_priv.h"

int ub_mkfs_parse_profile(const char *s, uint64_t *out)
{
	const struct ub_profile *p = ub_profile_named(s);

	if (!p)
		return -EINVAL;
	*out = p->flag;
	return 0;
}

int ub_mkfs_parse_csum(const char *s, unsigned *out)
{
	static const struct {
		const char *name;
		unsigned type;
	} t[] = {
		{ "crc32c", BTRFS_CSUM_TYPE_CRC32 },   { "xxhash", BTRFS_CSUM_TYPE_XXHASH },
		{ "xxhash64", BTRFS_CSUM_TYPE_XXHASH }, { "sha256", BTRFS_CSUM_TYPE_SHA256 },
		{ "blake2", BTRFS_CSUM_TYPE_BLAKE2 },   { "blake2b", BTRFS_CSUM_TYPE_BLAKE2 },
	};

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		if (!strcasecmp(s, t[i].name)) {
			*out = t[i].type;
			return 0;
		}
	return -EINVAL;
}

int ub_mkfs_parse_features(const char *list, unsigned *features, char *why, size_t whylen)
{
	static const struct {
		const char *name;
		unsigned bit; /* 0: a feature mkfs.btrfs knows that we do not make (yet) */
		bool can_clear;
	} t[] = {
		{ "no-holes", UB_MKFS_F_NO_HOLES, true },
		{ "free-space-tree", UB_MKFS_F_FREE_SPACE_TREE, true },
		{ "fst", UB_MKFS_F_FREE_SPACE_TREE, true },
		{ "skinny-metadata", UB_MKFS_F_SKINNY_METADATA, true },
		{ "extref", UB_MKFS_F_EXTREF, true },
		/* what we refuse by name: the write engine does not keep these up to date */
		{ "quota", 0, true },
		{ "squota", 0, true },
		{ "block-group-tree", 0, true },
		{ "raid-stripe-tree", 0, true },
		{ "zoned", 0, true },
		{ "mixed-bg", 0, true },
		{ "raid56", 0, true },
		{ "raid1c34", 0, true },
		{ "list-all", 0, true },
	};
	char *copy = strdup(list), *save = NULL, *tok;
	int ret = 0;

	if (!copy)
		return -ENOMEM;
	for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		bool clear = tok[0] == '^';
		const char *name = clear ? tok + 1 : tok;
		size_t i;

		for (i = 0; i < sizeof(t) / sizeof(t[0]); i++)
			if (!strcasecmp(name, t[i].name))
				break;
		if (i == sizeof(t) / sizeof(t[0])) {
			snprintf(why, whylen, "unknown feature '%s'", name);
			ret = -EINVAL;
			break;
		}
		if (!t[i].bit) {
			if (clear)
				continue; /* turning off what we never turn on is fine */
			if (!strcasecmp(name, "raid56") || !strcasecmp(name, "raid1c34"))
				snprintf(why, whylen, "feature '%s' is set by the profiles (-d/-m), not by -O", name);
			else if (!strcasecmp(name, "list-all"))
				snprintf(why, whylen, "features: no-holes, free-space-tree, skinny-metadata, extref (on by default; ^NAME turns one off)");
			else
				snprintf(why, whylen, "feature '%s' is not supported by ubtrfs mkfs", name);
			ret = -EINVAL;
			break;
		}
		if (clear)
			*features &= ~t[i].bit;
		else
			*features |= t[i].bit;
	}
	free(copy);
	return ret;
}

int ub_mkfs_parse_compress(const char *s, int *compress, int *level)
{
	static const struct { const char *name; int type, max_level; } algs[] = {
		{ "zlib", UB_COMPRESS_ZLIB, 9 },
		{ "lzo", UB_COMPRESS_LZO, 0 },
		{ "zstd", UB_COMPRESS_ZSTD, 15 },
	};
	const char *colon = strchr(s, ':');
	size_t n = colon ? (size_t)(colon - s) : strlen(s);

	for (size_t i = 0; i < sizeof(algs) / sizeof(algs[0]); i++) {
		if (strlen(algs[i].name) != n || strncasecmp(s, algs[i].name, n))
			continue;
		*compress = algs[i].type;
		*level = 0;
		if (colon) {
			char *end;
			long v;

			errno = 0;
			v = strtol(colon + 1, &end, 10);
			if (errno || end == colon + 1 || *end || v < 1 || v > algs[i].max_level)
				return -EINVAL;
			*level = (int)v;
		}
		return 0;
	}
	return -EINVAL;
}
