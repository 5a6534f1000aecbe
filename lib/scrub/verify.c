/* SPDX-License-Identifier: MIT */
/*
 * One copy of a tree block or data sector judged on its own bytes: a tree
 * block by its checksum and the header fields that name it (its address, the
 * filesystem, the chunk tree, the level and generation its extent item
 * gives), a data sector by its checksum in the pinned commit's checksum tree.
 * The items inside a block are the tree checker's business, not scrub's: a
 * copy whose checksum matches was written so, and no other copy is better.
 */
#include <stdio.h>
#include <string.h>

#include "scrub/scrub_priv.h"

#define HDR(field, b) UB_GET(ub_disk_header, field, b)

static void hex(const uint8_t *c, unsigned n, char *out, size_t outsz)
{
	size_t at = 0;

	out[0] = '\0';
	if (n > 8)
		n = 8; /* enough to tell them apart in a message */
	for (unsigned i = 0; i < n && at + 3 < outsz; i++)
		at += (size_t)snprintf(out + at, outsz - at, "%02x", c[i]);
}

int sx_verify(struct sx_thread *t, const struct sx_unit *u, const uint8_t *buf, char *why, size_t whylen)
{
	struct ub_scrub *s = t->s;
	uint8_t csum[UB_CSUM_SIZE_MAX];
	char a[24], b[24];

	if (u->kind == SX_NOCSUM)
		return 0;
	if (u->kind == SX_DATA) {
		const uint8_t *want = t->csum + (size_t)u->csum * s->csum_size;

		ub_csum(s->csum_type, buf, s->ss, csum);
		if (!memcmp(csum, want, s->csum_size))
			return 0;
		hex(csum, s->csum_size, a, sizeof(a));
		hex(want, s->csum_size, b, sizeof(b));
		snprintf(why, whylen, "data checksum 0x%s, expected 0x%s", a, b);
		return UB_SCRUB_CSUM + 1;
	} else {
		const struct sx_extent *x = &t->ext[u->ext];
		uint64_t gen = HDR(generation, buf);
		int level = (int)HDR(level, buf);

		ub_csum(s->csum_type, buf + UB_CSUM_SIZE_MAX, s->ns - UB_CSUM_SIZE_MAX, csum);
		if (memcmp(csum, buf, s->csum_size)) {
			hex(csum, s->csum_size, a, sizeof(a));
			hex(buf, s->csum_size, b, sizeof(b));
			snprintf(why, whylen, "tree block checksum 0x%s, the header says 0x%s", a, b);
			return UB_SCRUB_META_CSUM + 1;
		}
		if (HDR(bytenr, buf) != u->logical) {
			snprintf(why, whylen, "header bytenr %llu, not the block's address",
				 (unsigned long long)HDR(bytenr, buf));
			return UB_SCRUB_META_HEADER + 1;
		}
		if (memcmp(UB_PTR(ub_disk_header, fsid, buf), s->vol->metadata_uuid, UB_FSID_SIZE)) {
			snprintf(why, whylen, "header fsid is not the filesystem's");
			return UB_SCRUB_META_HEADER + 1;
		}
		if (s->tc->have_chunk_tree_uuid &&
		    memcmp(UB_PTR(ub_disk_header, chunk_tree_uuid, buf), s->tc->chunk_tree_uuid, UB_UUID_SIZE)) {
			snprintf(why, whylen, "header chunk tree uuid is not the filesystem's");
			return UB_SCRUB_META_HEADER + 1;
		}
		if (x->level >= 0 && level != x->level) {
			snprintf(why, whylen, "header level %d, the extent item says %d", level, x->level);
			return UB_SCRUB_META_HEADER + 1;
		}
		if (gen != x->gen) {
			snprintf(why, whylen, "header generation %llu, the extent item says %llu", (unsigned long long)gen,
				 (unsigned long long)x->gen);
			return UB_SCRUB_META_GENERATION + 1;
		}
		return 0;
	}
}
