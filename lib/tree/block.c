/* SPDX-License-Identifier: MIT */
/* Reading tree blocks: every copy is verified before anyone sees it; verified blocks are cached. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include "ubtrfs/tree.h"
#include "ubtrfs/tree_check.h"

#define HDR(field, p) UB_GET(ub_disk_header, field, p)

static bool is_subvol_tree(uint64_t id)
{
	return id == BTRFS_FS_TREE_OBJECTID ||
	       (id >= BTRFS_FIRST_FREE_OBJECTID && id <= BTRFS_LAST_FREE_OBJECTID) ||
	       id == BTRFS_TREE_RELOC_OBJECTID || id == BTRFS_DATA_RELOC_TREE_OBJECTID;
}

int ub_tree_ctx_init(struct ub_tree_ctx *tc, struct ub_volume *vol, const struct ub_log *log)
{
	memset(tc, 0, sizeof(*tc));
	tc->vol = vol;
	tc->log = log ? *log : vol->log;
	tc->hash_size = 4096;
	tc->hash = calloc(tc->hash_size, sizeof(*tc->hash));
	tc->cache_limit = 64ULL << 20;
	return tc->hash ? 0 : -ENOMEM;
}

static void lru_unlink(struct ub_tree_ctx *tc, struct ub_eb *eb)
{
	if (eb->lru_prev)
		eb->lru_prev->lru_next = eb->lru_next;
	else if (tc->lru_head == eb)
		tc->lru_head = eb->lru_next;
	if (eb->lru_next)
		eb->lru_next->lru_prev = eb->lru_prev;
	else if (tc->lru_tail == eb)
		tc->lru_tail = eb->lru_prev;
	eb->lru_prev = eb->lru_next = NULL;
}

static void hash_unlink(struct ub_tree_ctx *tc, struct ub_eb *eb)
{
	struct ub_eb **pp = &tc->hash[(eb->start / 4096) % tc->hash_size];

	while (*pp && *pp != eb)
		pp = &(*pp)->hnext;
	if (*pp)
		*pp = eb->hnext;
}

static void eb_free(struct ub_tree_ctx *tc, struct ub_eb *eb)
{
	tc->cached_bytes -= eb->len;
	free(eb->data);
	free(eb);
}

void ub_tree_ctx_destroy(struct ub_tree_ctx *tc)
{
	if (!tc->hash)
		return;
	for (unsigned i = 0; i < tc->hash_size; i++) {
		struct ub_eb *eb = tc->hash[i];
		while (eb) {
			struct ub_eb *next = eb->hnext;
			eb_free(tc, eb);
			eb = next;
		}
	}
	free(tc->hash);
	tc->hash = NULL;
}

static void evict(struct ub_tree_ctx *tc)
{
	while (tc->cached_bytes > tc->cache_limit && tc->lru_tail) {
		struct ub_eb *eb = tc->lru_tail;
		lru_unlink(tc, eb);
		hash_unlink(tc, eb);
		eb_free(tc, eb);
	}
}

void ub_eb_put(struct ub_tree_ctx *tc, struct ub_eb *eb)
{
	if (!eb)
		return;
	if (--eb->refs > 0)
		return;
	eb->lru_next = tc->lru_head;
	eb->lru_prev = NULL;
	if (tc->lru_head)
		tc->lru_head->lru_prev = eb;
	tc->lru_head = eb;
	if (!tc->lru_tail)
		tc->lru_tail = eb;
	evict(tc);
}

static const char *tree_name(uint64_t owner, char *buf, size_t len)
{
	const char *n = owner ? ub_objectid_name(owner) : "unknown";
	if (n)
		snprintf(buf, len, "%s", n);
	else
		snprintf(buf, len, "%llu", (unsigned long long)owner);
	return buf;
}

/* Everything that must hold for one copy; the reason goes into `why`. */
static int verify_copy(struct ub_tree_ctx *tc, const uint8_t *buf, uint64_t bytenr, const struct ub_expect *exp,
		       char *why, size_t whylen)
{
	struct ub_volume *vol = tc->vol;
	uint8_t csum[UB_CSUM_SIZE_MAX];
	struct ub_check_ctx cctx;
	uint64_t owner = HDR(owner, buf), gen = HDR(generation, buf);
	int level = (int)HDR(level, buf);

	ub_csum(vol->csum_type, buf + UB_CSUM_SIZE_MAX, vol->nodesize - UB_CSUM_SIZE_MAX, csum);
	if (memcmp(csum, buf, vol->csum_size)) {
		snprintf(why, whylen, "checksum mismatch");
		return -EUCLEAN;
	}
	if (HDR(bytenr, buf) != bytenr) {
		snprintf(why, whylen, "header bytenr %llu does not match", (unsigned long long)HDR(bytenr, buf));
		return -EUCLEAN;
	}
	if (memcmp(UB_PTR(ub_disk_header, fsid, buf), vol->metadata_uuid, UB_FSID_SIZE)) {
		snprintf(why, whylen, "fsid does not match the filesystem");
		return -EUCLEAN;
	}
	if (level >= UB_MAX_LEVEL) {
		snprintf(why, whylen, "invalid level %d", level);
		return -EUCLEAN;
	}
	if (exp && exp->level >= 0 && level != exp->level) {
		snprintf(why, whylen, "level %d, expected %d", level, exp->level);
		return -EUCLEAN;
	}
	if (exp && exp->generation && gen != exp->generation) {
		snprintf(why, whylen, "generation %llu, parent expects %llu", (unsigned long long)gen,
			 (unsigned long long)exp->generation);
		return -EUCLEAN;
	}
	/* log trees are written one transaction ahead of the superblock */
	if (gen > vol->generation + 1) {
		snprintf(why, whylen, "generation %llu is newer than the filesystem's %llu", (unsigned long long)gen,
			 (unsigned long long)vol->generation);
		return -EUCLEAN;
	}
	if (exp && exp->owner) {
		/* snapshots share blocks, so a subvolume tree may hold blocks another subvolume wrote */
		bool ok = is_subvol_tree(exp->owner) ? is_subvol_tree(owner) : owner == exp->owner;
		if (!ok) {
			snprintf(why, whylen, "owner %llu, expected %llu", (unsigned long long)owner,
				 (unsigned long long)exp->owner);
			return -EUCLEAN;
		}
	}
	cctx.nodesize = vol->nodesize;
	cctx.sectorsize = vol->sectorsize;
	cctx.csum_size = vol->csum_size;
	cctx.incompat_flags = UB_GET(ub_disk_super, incompat_flags, vol->super);
	cctx.owner = owner;
	if (ub_tree_check_block(buf, &cctx, why, whylen))
		return -EUCLEAN;
	if (exp && exp->first_key && HDR(nritems, buf) > 0) {
		struct ub_key k;
		const uint8_t *p = buf + UB_HEADER_SIZE; /* item and key_ptr both start with the key */
		ub_key_read(&k, p);
		if (ub_key_cmp(&k, exp->first_key)) {
			snprintf(why, whylen, "first key (%llu %u %llu) does not match parent's (%llu %u %llu)",
				 (unsigned long long)k.objectid, k.type, (unsigned long long)k.offset,
				 (unsigned long long)exp->first_key->objectid, exp->first_key->type,
				 (unsigned long long)exp->first_key->offset);
			return -EUCLEAN;
		}
	}
	return 0;
}

int ub_tree_read_block(struct ub_tree_ctx *tc, uint64_t bytenr, const struct ub_expect *exp, struct ub_eb **out)
{
	struct ub_volume *vol = tc->vol;
	struct ub_eb *eb;
	uint8_t *buf = NULL;
	char why[256] = "", where[256], tname[32];
	int copies, ret = -EIO, bad_mirror = 0;

	for (eb = tc->hash[(bytenr / 4096) % tc->hash_size]; eb; eb = eb->hnext) {
		if (eb->start != bytenr)
			continue;
		/* a cached block still has to be what this parent expects */
		if (exp && ((exp->level >= 0 && ub_eb_level(eb) != exp->level) ||
			    (exp->generation && ub_eb_generation(eb) != exp->generation)))
			break;
		if (eb->refs++ == 0)
			lru_unlink(tc, eb);
		*out = eb;
		return 0;
	}
	for (unsigned i = 0; i < 64; i++)
		if (tc->bad[i] == bytenr && tc->bad_err[i])
			return tc->bad_err[i];
	tree_name(exp && exp->owner ? exp->owner : 0, tname, sizeof(tname));
	if (bytenr % vol->sectorsize) {
		if (!tc->quiet)
			ub_err(&tc->log, "tree block at logical %llu (tree %s): not aligned to sectorsize",
			       (unsigned long long)bytenr, tname);
		return -EUCLEAN;
	}
	copies = ub_volume_num_copies(vol, bytenr);
	if (copies == 0) {
		if (!tc->quiet)
			ub_err(&tc->log, "tree block at logical %llu (tree %s): address is not in any chunk",
			       (unsigned long long)bytenr, tname);
		return -ENOENT;
	}
	buf = malloc(vol->nodesize);
	if (!buf)
		return -ENOMEM;
	for (int m = 1; m <= copies; m++) {
		int r = ub_volume_read(vol, bytenr, vol->nodesize, m, buf);
		if (r == -EOPNOTSUPP)
			continue;
		if (r) {
			snprintf(why, sizeof(why), "read error: %s", strerror(-r));
			ret = r == -ERANGE ? -EUCLEAN : -EIO;
		} else {
			r = verify_copy(tc, buf, bytenr, exp, why, sizeof(why));
			ret = r;
		}
		if (r == 0) {
			if (bad_mirror && !tc->quiet)
				ub_info(&tc->log, "tree block at logical %llu: read good copy %d", (unsigned long long)bytenr, m);
			break;
		}
		/* a device already reported missing is not news for every block */
		if (!tc->quiet && r != -ENXIO) {
			ub_volume_describe_copy(tc->vol, bytenr, m, where, sizeof(where));
			ub_warn(&tc->log, "tree block at logical %llu (tree %s, level %d): %s: %s",
				(unsigned long long)bytenr, tname, exp ? exp->level : -1, where, why);
		}
		bad_mirror = m;
	}
	if (ret) {
		if (!tc->quiet)
			ub_err(&tc->log, "tree block at logical %llu (tree %s, level %d): no good copy among %d: %s",
			       (unsigned long long)bytenr, tname, exp ? exp->level : -1, copies, why);
		tc->bad[tc->bad_next % 64] = bytenr;
		tc->bad_err[tc->bad_next % 64] = ret;
		tc->bad_next++;
		free(buf);
		return ret;
	}
	eb = calloc(1, sizeof(*eb));
	if (!eb) {
		free(buf);
		return -ENOMEM;
	}
	eb->start = bytenr;
	eb->len = vol->nodesize;
	eb->data = buf;
	eb->refs = 1;
	{
		/* a stale entry for the same address (other expectations) is replaced */
		struct ub_eb **pp = &tc->hash[(bytenr / 4096) % tc->hash_size];
		struct ub_eb *old;
		for (old = *pp; old; old = old->hnext)
			if (old->start == bytenr && old->refs == 0)
				break;
		if (old) {
			lru_unlink(tc, old);
			hash_unlink(tc, old);
			eb_free(tc, old);
		}
		eb->hnext = *pp;
		*pp = eb;
	}
	tc->cached_bytes += eb->len;
	*out = eb;
	return 0;
}

void ub_eb_item_key(const struct ub_eb *eb, int slot, struct ub_key *key)
{
	uint32_t step = ub_eb_level(eb) ? UB_KEY_PTR_SIZE : UB_ITEM_SIZE;
	ub_key_read(key, eb->data + UB_HEADER_SIZE + (uint32_t)slot * step);
}

const uint8_t *ub_eb_item_data(const struct ub_eb *eb, int slot, uint32_t *size)
{
	const uint8_t *it = eb->data + UB_HEADER_SIZE + (uint32_t)slot * UB_ITEM_SIZE;
	*size = (uint32_t)UB_GET(ub_disk_item, size, it);
	return eb->data + UB_HEADER_SIZE + (uint32_t)UB_GET(ub_disk_item, offset, it);
}

uint64_t ub_eb_node_blockptr(const struct ub_eb *eb, int slot)
{
	return UB_GET(ub_disk_key_ptr, blockptr, eb->data + UB_HEADER_SIZE + (uint32_t)slot * UB_KEY_PTR_SIZE);
}

uint64_t ub_eb_node_gen(const struct ub_eb *eb, int slot)
{
	return UB_GET(ub_disk_key_ptr, generation, eb->data + UB_HEADER_SIZE + (uint32_t)slot * UB_KEY_PTR_SIZE);
}
