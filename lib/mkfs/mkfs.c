/* SPDX-License-Identifier: MIT */
/*
 * A new filesystem in one step. mkfs.btrfs bootstraps through temporary
 * chunks and several commits; the result is what matters, so we compute the
 * final chunks up front (placed by ub_chunk_layout, as the kernel would place
 * them), build every tree as one leaf from its sorted items, and write the
 * lot as generation 1 through the volume layer: tree blocks first, then the
 * superblocks (which ub_volume_write_supers flushes around).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uuid/uuid.h>

#include "alloc/chunk_layout.h"
#include "mkfs/mkfs_internal.h"
#include "ubtrfs/mkfs.h"
#include "ubtrfs/volume.h"
#include "volume/volume_priv.h"

#define MiB (1024ULL * 1024)
#define SECTORSIZE 4096U
#define GENERATION 1ULL
/* the first system chunk is small, as mkfs.btrfs makes it: it only ever holds the chunk tree */
#define SYS_CHUNK_HINT (8 * MiB)

void ub_mkfs_opts_init(struct ub_mkfs_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->data_profile = UB_MKFS_PROFILE_DEFAULT;
	o->meta_profile = UB_MKFS_PROFILE_DEFAULT;
	o->nodesize = 16384;
	o->csum_type = BTRFS_CSUM_TYPE_CRC32;
	o->features = UB_MKFS_F_DEFAULT;
}

/* fewest devices each profile takes for mkfs (the profile table's) */
static int profile_min_devs(uint64_t prof)
{
	const struct ub_profile *p = ub_profile_of(prof);

	return p ? p->mkfs_devs_min : 1;
}

uint64_t ub_mkfs_min_dev_size(uint64_t meta_profile, uint64_t data_profile)
{
	/*
	 * mkfs.btrfs 6.2's figure: the reserved MiB, its temporary system (4 MiB),
	 * metadata and data (8 MiB each) chunks, then the real ones: system 8 MiB +
	 * metadata 32 MiB (twice for DUP; the temporary ones serve when single),
	 * data 64 MiB (twice for DUP; 8 MiB when single).
	 */
	uint64_t sz = 1 * MiB + 4 * MiB + 8 * MiB + 8 * MiB;

	if (!meta_profile)
		sz += 16 * MiB;
	else if (meta_profile == BTRFS_BLOCK_GROUP_DUP)
		sz += 80 * MiB;
	else
		sz += 40 * MiB;
	if (!data_profile)
		sz += 8 * MiB;
	else if (data_profile == BTRFS_BLOCK_GROUP_DUP)
		sz += 128 * MiB;
	else
		sz += 64 * MiB;
	return sz;
}

/* the trees in the metadata chunk, in the order their leaves sit there */
enum { T_ROOT, T_EXTENT, T_DEV, T_FS, T_CSUM, T_UUID, T_FST, T_RELOC, T_META_MAX };
static const uint64_t tree_ids[T_META_MAX] = {
	BTRFS_ROOT_TREE_OBJECTID, BTRFS_EXTENT_TREE_OBJECTID, BTRFS_DEV_TREE_OBJECTID,
	BTRFS_FS_TREE_OBJECTID,   BTRFS_CSUM_TREE_OBJECTID,   BTRFS_UUID_TREE_OBJECTID,
	BTRFS_FREE_SPACE_TREE_OBJECTID, BTRFS_DATA_RELOC_TREE_OBJECTID,
};

enum { C_SYS, C_META, C_DATA, C_MAX };

struct mk {
	const struct ub_mkfs_opts *o;
	const struct ub_log *log;
	int ndevs;
	uint32_t nodesize;
	bool skinny, fst;
	int64_t now;
	uint8_t fsid[UB_FSID_SIZE], chunk_uuid[UB_UUID_SIZE], fs_uuid[UB_UUID_SIZE];
	uint8_t (*dev_uuid)[UB_UUID_SIZE];
	uint64_t *dev_size, *dev_used;
	struct ub_chunk_plan chunk[C_MAX];
	uint64_t logical[C_MAX];
	uint64_t chunk_leaf;               /* the chunk tree's leaf, first block of the system chunk */
	uint64_t leaf[T_META_MAX];         /* 0: tree not made (free space tree off) */
	int nmeta;                         /* leaves in the metadata chunk */
	struct ub_key first_key[T_META_MAX], chunk_first_key;
	uint8_t *meta_buf;                 /* nmeta leaves, contiguous from the metadata chunk's start */
	uint8_t *chunk_buf;
};

static uint8_t *leaf_buf(struct mk *m, int t)
{
	return m->meta_buf + (m->leaf[t] - m->logical[C_META]);
}

static void leaf_start(struct mk *m, struct ub_leaf_builder *lb, uint8_t *buf, uint64_t bytenr, uint64_t owner)
{
	struct ub_leaf_header h = { .bytenr = bytenr, .generation = GENERATION, .owner = owner,
				    .fsid = m->fsid, .chunk_tree_uuid = m->chunk_uuid };

	ub_leaf_init(lb, buf, m->nodesize, &h);
}

static int add(struct mk *m, struct ub_leaf_builder *lb, const char *tree, uint64_t objectid, uint8_t type,
	       uint64_t offset, uint32_t size, uint8_t **data)
{
	struct ub_key k = { objectid, type, offset };
	int ret = ub_leaf_add(lb, &k, size, data);

	if (ret == -E2BIG)
		ub_err(m->log, "mkfs: the %s does not fit one %u-byte leaf (too many devices for this nodesize)",
		       tree, m->nodesize);
	else if (ret)
		ub_err(m->log, "mkfs: internal error: %s items out of order", tree);
	return ret;
}

static int finish(struct mk *m, struct ub_leaf_builder *lb, struct ub_key *first)
{
	if (first) {
		memset(first, 0, sizeof(*first));
		if (lb->nritems)
			ub_key_read(first, lb->buf + UB_HEADER_SIZE + offsetof(struct ub_disk_item, key));
	}
	return ub_leaf_finish(lb, m->o->csum_type);
}

static int build_chunk_tree(struct mk *m)
{
	struct ub_leaf_builder lb;
	uint8_t *p;
	int ret;

	leaf_start(m, &lb, m->chunk_buf, m->chunk_leaf, BTRFS_CHUNK_TREE_OBJECTID);
	for (int i = 0; i < m->ndevs; i++) {
		ret = add(m, &lb, "chunk tree", BTRFS_DEV_ITEMS_OBJECTID, BTRFS_DEV_ITEM_KEY, (uint64_t)i + 1,
			  sizeof(struct btrfs_dev_item), &p);
		if (ret)
			return ret;
		ub_put_dev_item(p, (uint64_t)i + 1, m->dev_size[i], m->dev_used[i], SECTORSIZE, m->dev_uuid[i], m->fsid);
	}
	for (int c = 0; c < C_MAX; c++) {
		const struct ub_chunk_plan *cp = &m->chunk[c];

		ret = add(m, &lb, "chunk tree", BTRFS_FIRST_CHUNK_TREE_OBJECTID, BTRFS_CHUNK_ITEM_KEY, m->logical[c],
			  UB_CHUNK_ITEM_SIZE(cp->num_stripes), &p);
		if (ret)
			return ret;
		ub_put_chunk_head(p, cp->length, cp->type, SECTORSIZE, cp->num_stripes, cp->sub_stripes);
		for (int s = 0; s < cp->num_stripes; s++)
			ub_put_chunk_stripe(p, s, cp->stripes[s].devid, cp->stripes[s].physical,
					    m->dev_uuid[cp->stripes[s].devid - 1]);
	}
	return finish(m, &lb, &m->chunk_first_key);
}

struct dev_ext {
	uint64_t devid, physical, chunk_offset, len;
};

static int cmp_dev_ext(const void *a, const void *b)
{
	const struct dev_ext *x = a, *y = b;

	if (x->devid != y->devid)
		return x->devid < y->devid ? -1 : 1;
	return x->physical < y->physical ? -1 : x->physical > y->physical;
}

static int build_dev_tree(struct mk *m)
{
	struct dev_ext ext[C_MAX * UB_MAX_STRIPES];
	struct ub_leaf_builder lb;
	int n = 0, ret;
	uint8_t *p;

	for (int c = 0; c < C_MAX; c++)
		for (int s = 0; s < m->chunk[c].num_stripes; s++)
			ext[n++] = (struct dev_ext){ m->chunk[c].stripes[s].devid, m->chunk[c].stripes[s].physical,
						     m->logical[c], m->chunk[c].stripe_size };
	qsort(ext, (size_t)n, sizeof(ext[0]), cmp_dev_ext);
	leaf_start(m, &lb, leaf_buf(m, T_DEV), m->leaf[T_DEV], BTRFS_DEV_TREE_OBJECTID);
	for (int i = 0; i < n; i++) {
		ret = add(m, &lb, "device tree", ext[i].devid, BTRFS_DEV_EXTENT_KEY, ext[i].physical,
			  sizeof(struct btrfs_dev_extent), &p);
		if (ret)
			return ret;
		ub_put_dev_extent(p, ext[i].chunk_offset, ext[i].len, m->chunk_uuid);
	}
	return finish(m, &lb, &m->first_key[T_DEV]);
}

/* a subvolume-style tree whose only content is its top directory, inode 256 */
static int build_dir_tree(struct mk *m, int t, uint64_t nbytes, bool otime)
{
	struct ub_leaf_builder lb;
	uint8_t *p;
	int ret;

	leaf_start(m, &lb, leaf_buf(m, t), m->leaf[t], tree_ids[t]);
	ret = add(m, &lb, "fs tree", BTRFS_FIRST_FREE_OBJECTID, BTRFS_INODE_ITEM_KEY, 0,
		  sizeof(struct btrfs_inode_item), &p);
	if (ret)
		return ret;
	ub_put_dir_inode(p, GENERATION, nbytes, m->now, otime);
	ret = add(m, &lb, "fs tree", BTRFS_FIRST_FREE_OBJECTID, BTRFS_INODE_REF_KEY, BTRFS_FIRST_FREE_OBJECTID,
		  sizeof(struct btrfs_inode_ref) + 2, &p);
	if (ret)
		return ret;
	ub_put_inode_ref(p, 0, "..", 2);
	return finish(m, &lb, &m->first_key[t]);
}

static int build_empty_tree(struct mk *m, int t)
{
	struct ub_leaf_builder lb;

	leaf_start(m, &lb, leaf_buf(m, t), m->leaf[t], tree_ids[t]);
	return finish(m, &lb, &m->first_key[t]);
}

static int build_uuid_tree(struct mk *m)
{
	struct ub_leaf_builder lb;
	uint8_t *p;
	int ret;

	/* the key is the subvolume uuid split in two little-endian halves */
	leaf_start(m, &lb, leaf_buf(m, T_UUID), m->leaf[T_UUID], BTRFS_UUID_TREE_OBJECTID);
	ret = add(m, &lb, "uuid tree", ub_le64(m->fs_uuid), BTRFS_UUID_KEY_SUBVOL, ub_le64(m->fs_uuid + 8), 8, &p);
	if (ret)
		return ret;
	ub_put_le(p, 8, BTRFS_FS_TREE_OBJECTID);
	return finish(m, &lb, &m->first_key[T_UUID]);
}

/* bytes of tree blocks at the start of chunk c */
static uint64_t chunk_used(const struct mk *m, int c)
{
	if (c == C_SYS)
		return m->nodesize;
	if (c == C_META)
		return (uint64_t)m->nmeta * m->nodesize;
	return 0;
}

static int build_fst(struct mk *m)
{
	struct ub_leaf_builder lb;
	uint8_t *p;
	int ret;

	leaf_start(m, &lb, leaf_buf(m, T_FST), m->leaf[T_FST], BTRFS_FREE_SPACE_TREE_OBJECTID);
	/* chunks are laid out in logical order: sys, meta, data */
	for (int c = 0; c < C_MAX; c++) {
		uint64_t used = chunk_used(m, c), len = m->chunk[c].length;
		bool free_tail = used < len;

		ret = add(m, &lb, "free space tree", m->logical[c], BTRFS_FREE_SPACE_INFO_KEY, len,
			  sizeof(struct btrfs_free_space_info), &p);
		if (ret)
			return ret;
		ub_put_free_space_info(p, free_tail ? 1 : 0);
		if (free_tail) {
			ret = add(m, &lb, "free space tree", m->logical[c] + used, BTRFS_FREE_SPACE_EXTENT_KEY,
				  len - used, 0, &p);
			if (ret)
				return ret;
		}
	}
	return finish(m, &lb, &m->first_key[T_FST]);
}

static int build_root_tree(struct mk *m)
{
	static const char def[] = "default";
	const uint16_t deflen = (uint16_t)(sizeof(def) - 1);
	struct ub_leaf_builder lb;
	uint8_t *p;
	int ret;

#define ROOT_ITEM(t, dirid, uuid)                                                                            \
	do {                                                                                                 \
		ret = add(m, &lb, "root tree", tree_ids[t], BTRFS_ROOT_ITEM_KEY, 0, sizeof(struct btrfs_root_item), \
			  &p);                                                                               \
		if (ret)                                                                                     \
			return ret;                                                                          \
		ub_put_root_item(p, m->leaf[t], GENERATION, dirid, m->nodesize, uuid, m->now);               \
	} while (0)

	leaf_start(m, &lb, leaf_buf(m, T_ROOT), m->leaf[T_ROOT], BTRFS_ROOT_TREE_OBJECTID);
	ROOT_ITEM(T_EXTENT, 0, NULL);
	ROOT_ITEM(T_DEV, 0, NULL);
	/* mkfs.btrfs names the top subvolume "default" from the fs tree's side too */
	ret = add(m, &lb, "root tree", BTRFS_FS_TREE_OBJECTID, BTRFS_INODE_REF_KEY, BTRFS_ROOT_TREE_DIR_OBJECTID,
		  sizeof(struct btrfs_inode_ref) + deflen, &p);
	if (ret)
		return ret;
	ub_put_inode_ref(p, 0, def, deflen);
	ROOT_ITEM(T_FS, BTRFS_FIRST_FREE_OBJECTID, m->fs_uuid);
	/* the root tree's directory holding "default" -> the fs tree */
	ret = add(m, &lb, "root tree", BTRFS_ROOT_TREE_DIR_OBJECTID, BTRFS_INODE_ITEM_KEY, 0,
		  sizeof(struct btrfs_inode_item), &p);
	if (ret)
		return ret;
	ub_put_dir_inode(p, GENERATION, m->nodesize, m->now, true);
	ret = add(m, &lb, "root tree", BTRFS_ROOT_TREE_DIR_OBJECTID, BTRFS_INODE_REF_KEY,
		  BTRFS_ROOT_TREE_DIR_OBJECTID, sizeof(struct btrfs_inode_ref) + 2, &p);
	if (ret)
		return ret;
	ub_put_inode_ref(p, 0, "..", 2);
	ret = add(m, &lb, "root tree", BTRFS_ROOT_TREE_DIR_OBJECTID, BTRFS_DIR_ITEM_KEY, ub_name_hash(def, deflen),
		  sizeof(struct btrfs_dir_item) + deflen, &p);
	if (ret)
		return ret;
	{
		struct ub_key loc = { BTRFS_FS_TREE_OBJECTID, BTRFS_ROOT_ITEM_KEY, (uint64_t)-1 };

		ub_put_dir_item(p, &loc, BTRFS_FT_DIR, def, deflen);
	}
	ROOT_ITEM(T_CSUM, 0, NULL);
	ROOT_ITEM(T_UUID, 0, NULL);
	if (m->fst)
		ROOT_ITEM(T_FST, 0, NULL);
	ROOT_ITEM(T_RELOC, BTRFS_FIRST_FREE_OBJECTID, NULL);
#undef ROOT_ITEM
	return finish(m, &lb, &m->first_key[T_ROOT]);
}

struct ext_item {
	struct ub_key key;
	uint64_t root;      /* tree block: owner; 0 for a block group */
	int chunk;          /* block group: which chunk */
	int tree;           /* tree block: index into leaf[] (-1: chunk tree) */
};

static int cmp_ext_item(const void *a, const void *b)
{
	const struct ext_item *x = a, *y = b;

	return ub_key_cmp(&x->key, &y->key);
}

static int build_extent_tree(struct mk *m)
{
	struct ext_item it[T_META_MAX + 1 + C_MAX];
	struct ub_leaf_builder lb;
	int n = 0, ret;
	uint8_t *p;

	for (int c = 0; c < C_MAX; c++)
		it[n++] = (struct ext_item){ { m->logical[c], BTRFS_BLOCK_GROUP_ITEM_KEY, m->chunk[c].length }, 0, c, 0 };
	for (int t = -1; t < T_META_MAX; t++) {
		uint64_t bytenr = t < 0 ? m->chunk_leaf : m->leaf[t];

		if (!bytenr)
			continue;
		if (m->skinny)
			it[n] = (struct ext_item){ { bytenr, BTRFS_METADATA_ITEM_KEY, 0 }, 0, 0, t };
		else
			it[n] = (struct ext_item){ { bytenr, BTRFS_EXTENT_ITEM_KEY, m->nodesize }, 0, 0, t };
		it[n++].root = t < 0 ? BTRFS_CHUNK_TREE_OBJECTID : tree_ids[t];
	}
	qsort(it, (size_t)n, sizeof(it[0]), cmp_ext_item);
	/* the extent tree's own block records the leaf's first key: the first of these items */
	m->first_key[T_EXTENT] = it[0].key;

	leaf_start(m, &lb, leaf_buf(m, T_EXTENT), m->leaf[T_EXTENT], BTRFS_EXTENT_TREE_OBJECTID);
	for (int i = 0; i < n; i++) {
		if (!it[i].root) {
			ret = add(m, &lb, "extent tree", it[i].key.objectid, it[i].key.type, it[i].key.offset,
				  sizeof(struct btrfs_block_group_item), &p);
			if (ret)
				return ret;
			ub_put_block_group(p, chunk_used(m, it[i].chunk), m->chunk[it[i].chunk].type);
			continue;
		}
		ret = add(m, &lb, "extent tree", it[i].key.objectid, it[i].key.type, it[i].key.offset,
			  m->skinny ? UB_SKINNY_TREE_REF_SIZE : UB_FAT_TREE_REF_SIZE, &p);
		if (ret)
			return ret;
		ub_put_tree_block_ref(p, m->skinny, GENERATION, it[i].root,
				      it[i].tree < 0 ? &m->chunk_first_key : &m->first_key[it[i].tree], 0);
	}
	return finish(m, &lb, NULL);
}

static void put_backup(struct mk *m, uint8_t *sb, uint64_t total, uint64_t used)
{
	uint8_t *b = sb + offsetof(struct ub_disk_super, super_roots);

#define B(f, v) UB_SET(ub_disk_root_backup, f, b, v)
	B(tree_root, m->leaf[T_ROOT]);
	B(tree_root_gen, GENERATION);
	B(chunk_root, m->chunk_leaf);
	B(chunk_root_gen, GENERATION);
	B(extent_root, m->leaf[T_EXTENT]);
	B(extent_root_gen, GENERATION);
	B(fs_root, m->leaf[T_FS]);
	B(fs_root_gen, GENERATION);
	B(dev_root, m->leaf[T_DEV]);
	B(dev_root_gen, GENERATION);
	B(csum_root, m->leaf[T_CSUM]);
	B(csum_root_gen, GENERATION);
	B(total_bytes, total);
	B(bytes_used, used);
	B(num_devices, (uint64_t)m->ndevs);
#undef B
}

static void build_super(struct mk *m, uint8_t *sb, uint64_t total)
{
	uint64_t used = (uint64_t)(m->nmeta + 1) * m->nodesize;
	uint64_t incompat = BTRFS_FEATURE_INCOMPAT_MIXED_BACKREF;
	uint64_t profiles = m->chunk[C_SYS].type | m->chunk[C_META].type | m->chunk[C_DATA].type;
	const struct ub_chunk_plan *sys = &m->chunk[C_SYS];
	uint8_t *arr = sb + offsetof(struct ub_disk_super, sys_chunk_array);
	uint32_t arr_len = UB_DISK_KEY_SIZE + UB_CHUNK_ITEM_SIZE(sys->num_stripes);
	struct ub_key k = { BTRFS_FIRST_CHUNK_TREE_OBJECTID, BTRFS_CHUNK_ITEM_KEY, m->logical[C_SYS] };

	if (m->o->features & UB_MKFS_F_EXTREF)
		incompat |= BTRFS_FEATURE_INCOMPAT_EXTENDED_IREF;
	if (m->skinny)
		incompat |= BTRFS_FEATURE_INCOMPAT_SKINNY_METADATA;
	if (m->o->features & UB_MKFS_F_NO_HOLES)
		incompat |= BTRFS_FEATURE_INCOMPAT_NO_HOLES;
	/* what the profiles in use need the kernel to know */
	for (int i = 0; i < ub_profile_count(); i++)
		if (ub_profile_at(i)->flag & profiles)
			incompat |= ub_profile_at(i)->incompat;
	/* the kernel refuses lzo / zstd extents on a filesystem without their bit (zlib has none) */
	if (m->o->compress == UB_COMPRESS_LZO)
		incompat |= BTRFS_FEATURE_INCOMPAT_COMPRESS_LZO;
	if (m->o->compress == UB_COMPRESS_ZSTD)
		incompat |= BTRFS_FEATURE_INCOMPAT_COMPRESS_ZSTD;

	memset(sb, 0, UB_SUPER_INFO_SIZE);
#define S(f, v) UB_SET(ub_disk_super, f, sb, v)
	memcpy(sb + offsetof(struct ub_disk_super, fsid), m->fsid, UB_FSID_SIZE);
	memcpy(sb + offsetof(struct ub_disk_super, metadata_uuid), m->fsid, UB_FSID_SIZE);
	S(bytenr, UB_SUPER_INFO_OFFSET);
	S(flags, BTRFS_HEADER_FLAG_WRITTEN);
	S(magic, UB_MAGIC);
	S(generation, GENERATION);
	S(root, m->leaf[T_ROOT]);
	S(chunk_root, m->chunk_leaf);
	S(total_bytes, total);
	S(bytes_used, used);
	S(root_dir_objectid, BTRFS_ROOT_TREE_DIR_OBJECTID);
	S(num_devices, (uint64_t)m->ndevs);
	S(sectorsize, SECTORSIZE);
	S(nodesize, m->nodesize);
	S(unused_leafsize, m->nodesize);
	S(stripesize, SECTORSIZE);
	S(sys_chunk_array_size, arr_len);
	S(chunk_root_generation, GENERATION);
	S(compat_ro_flags, m->fst ? BTRFS_FEATURE_COMPAT_RO_FREE_SPACE_TREE |
					    BTRFS_FEATURE_COMPAT_RO_FREE_SPACE_TREE_VALID
				  : 0);
	S(incompat_flags, incompat);
	S(csum_type, m->o->csum_type);
	/* the uuid tree is complete: no rescan needed at the first mount */
	S(uuid_tree_generation, GENERATION);
#undef S
	ub_put_dev_item(sb + offsetof(struct ub_disk_super, dev_item), 1, m->dev_size[0], m->dev_used[0], SECTORSIZE,
			m->dev_uuid[0], m->fsid);
	memcpy(sb + offsetof(struct ub_disk_super, label), m->o->label, strnlen(m->o->label, UB_LABEL_SIZE - 1));
	ub_key_write(arr, &k);
	ub_put_chunk_head(arr + UB_DISK_KEY_SIZE, sys->length, sys->type, SECTORSIZE, sys->num_stripes,
			  sys->sub_stripes);
	for (int s = 0; s < sys->num_stripes; s++)
		ub_put_chunk_stripe(arr + UB_DISK_KEY_SIZE, s, sys->stripes[s].devid, sys->stripes[s].physical,
				    m->dev_uuid[sys->stripes[s].devid - 1]);
	put_backup(m, sb, total, used);
}

static int plan_chunks(struct mk *m, uint64_t meta_prof, uint64_t data_prof)
{
	struct ub_dev_space *sp;
	uint64_t *hs, *hl;
	static const char *const what[C_MAX] = { "system", "metadata", "data" };
	const uint64_t kind[C_MAX] = { BTRFS_BLOCK_GROUP_SYSTEM, BTRFS_BLOCK_GROUP_METADATA, BTRFS_BLOCK_GROUP_DATA };
	const uint64_t prof[C_MAX] = { meta_prof, meta_prof, data_prof };
	uint64_t next = 1 * MiB; /* logical addresses start past the first MiB, as mkfs.btrfs's do */
	int ret = 0;

	sp = calloc((size_t)m->ndevs, sizeof(*sp));
	hs = calloc((size_t)m->ndevs, sizeof(*hs));
	hl = calloc((size_t)m->ndevs, sizeof(*hl));
	if (!sp || !hs || !hl) {
		ret = -ENOMEM;
		goto out;
	}
	for (int i = 0; i < m->ndevs; i++) {
		hs[i] = UB_DEV_RESERVED;
		hl[i] = m->dev_size[i] - UB_DEV_RESERVED;
		sp[i] = (struct ub_dev_space){ (uint64_t)i + 1, m->dev_size[i], &hs[i], &hl[i], 1 };
	}
	for (int c = 0; c < C_MAX; c++) {
		ret = ub_chunk_layout(sp, m->ndevs, kind[c] | prof[c], c == C_SYS ? SYS_CHUNK_HINT : 0, &m->chunk[c]);
		if (!ret)
			ret = ub_chunk_plan_apply(sp, m->ndevs, &m->chunk[c]);
		if (ret) {
			ub_err(m->log, "mkfs: no room for the %s chunk (%s) on the devices given", what[c],
			       ub_profile_name(prof[c]));
			goto out;
		}
		m->logical[c] = next;
		next += m->chunk[c].length;
		for (int s = 0; s < m->chunk[c].num_stripes; s++)
			m->dev_used[m->chunk[c].stripes[s].devid - 1] += m->chunk[c].stripe_size;
	}
	if (m->chunk[C_META].length < (uint64_t)T_META_MAX * m->nodesize ||
	    m->chunk[C_SYS].length < m->nodesize) {
		ub_err(m->log, "mkfs: the devices are too small for the first chunks");
		ret = -ENOSPC;
	}
out:
	free(sp);
	free(hs);
	free(hl);
	return ret;
}

static int check_opts(struct mk *m, uint64_t *meta_prof, uint64_t *data_prof)
{
	const struct ub_mkfs_opts *o = m->o;
	uint64_t n = o->nodesize;

	if (n < UB_MIN_NODESIZE || n > UB_MAX_NODESIZE || (n & (n - 1))) {
		ub_err(m->log, "mkfs: nodesize %u is not a power of two from 4096 to 65536", o->nodesize);
		return -EINVAL;
	}
	if (!ub_csum_size(o->csum_type)) {
		ub_err(m->log, "mkfs: unknown checksum type %u", o->csum_type);
		return -EINVAL;
	}
	*meta_prof = o->meta_profile == UB_MKFS_PROFILE_DEFAULT
			     ? (m->ndevs > 1 ? BTRFS_BLOCK_GROUP_RAID1 : BTRFS_BLOCK_GROUP_DUP)
			     : o->meta_profile;
	*data_prof = o->data_profile == UB_MKFS_PROFILE_DEFAULT ? 0 : o->data_profile;
	for (int i = 0; i < 2; i++) {
		uint64_t p = i ? *data_prof : *meta_prof;
		struct ub_chunk_rules r;

		if (ub_chunk_rules_of(p, &r) || (p & ~BTRFS_BLOCK_GROUP_PROFILE_MASK)) {
			ub_err(m->log, "mkfs: bad %s profile", i ? "data" : "metadata");
			return -EINVAL;
		}
		if (m->ndevs < profile_min_devs(p)) {
			ub_err(m->log, "mkfs: %s profile %s needs at least %d devices, %d given", i ? "data" : "metadata",
			       ub_profile_name(p), profile_min_devs(p), m->ndevs);
			return -EINVAL;
		}
	}
	if (strnlen(o->label, UB_LABEL_SIZE) >= UB_LABEL_SIZE) {
		ub_err(m->log, "mkfs: label longer than %u bytes", UB_LABEL_SIZE - 1);
		return -EINVAL;
	}
	return 0;
}

static int write_all(struct mk *m, struct ub_dev *const *devs, const uint8_t *sb)
{
	struct ub_volume *vol = NULL;
	uint8_t *zero = NULL, item[UB_CHUNK_ITEM_SIZE(UB_MAX_STRIPES)];
	int ret;

	/*
	 * The reserved first MiB: wipe what an earlier filesystem or partition
	 * table left there so no prober finds two signatures (the volume layer
	 * never writes there itself). And every superblock copy of an earlier
	 * btrfs, made durable before a byte of the new one is written, as
	 * mkfs.btrfs does: otherwise an mkfs stopped before its own superblocks
	 * land leaves the old filesystem readable through its mirror at 64 MiB,
	 * over blocks the new one has begun to overwrite.
	 */
	zero = calloc(1, UB_DEV_RESERVED);
	if (!zero) {
		for (int i = 0; i < m->ndevs; i++)
			ub_dev_close(devs[i]);
		return -ENOMEM;
	}
	for (int i = 0; i < m->ndevs; i++) {
		/* and the last MiB, where md, GPT backups and others keep theirs (free space to us) */
		ret = ub_dev_write(devs[i], zero, UB_DEV_RESERVED, 0);
		if (!ret)
			ret = ub_dev_write(devs[i], zero, UB_DEV_RESERVED, m->dev_size[i] - UB_DEV_RESERVED);
		for (int c = 1; c < UB_SUPER_MIRROR_MAX && !ret; c++)
			if (ub_super_offset(c) + UB_SUPER_INFO_SIZE <= m->dev_size[i])
				ret = ub_dev_write(devs[i], zero, UB_SUPER_INFO_SIZE, ub_super_offset(c));
		if (!ret)
			ret = ub_dev_flush(devs[i]);
		if (ret) {
			ub_err(m->log, "mkfs: cannot write to %s: %s", devs[i]->path, strerror(-ret));
			for (int j = 0; j < m->ndevs; j++)
				ub_dev_close(devs[j]);
			free(zero);
			return ret;
		}
	}
	free(zero);

	ret = ub_volume_create(devs, m->ndevs, sb, m->log, &vol);
	if (ret) {
		ub_err(m->log, "mkfs: cannot set up the volume: %s", strerror(-ret));
		return ret;
	}
	for (int c = C_META; c < C_MAX && !ret; c++) {
		const struct ub_chunk_plan *cp = &m->chunk[c];

		memset(item, 0, sizeof(item));
		ub_put_chunk_head(item, cp->length, cp->type, SECTORSIZE, cp->num_stripes, cp->sub_stripes);
		for (int s = 0; s < cp->num_stripes; s++)
			ub_put_chunk_stripe(item, s, cp->stripes[s].devid, cp->stripes[s].physical,
					    m->dev_uuid[cp->stripes[s].devid - 1]);
		ret = ub_volume_add_chunk(vol, m->logical[c], item, UB_CHUNK_ITEM_SIZE(cp->num_stripes));
	}
	for (int i = 0; i < m->ndevs && !ret; i++) {
		memset(item, 0, sizeof(item));
		ub_put_dev_item(item, (uint64_t)i + 1, m->dev_size[i], m->dev_used[i], SECTORSIZE, m->dev_uuid[i],
				m->fsid);
		ret = ub_volume_add_dev_item(vol, item, sizeof(struct btrfs_dev_item));
	}
	if (ret) {
		ub_err(m->log, "mkfs: the volume refused our own chunk or device item: %s", strerror(-ret));
		goto out;
	}
	ret = ub_volume_write(vol, m->chunk_leaf, m->nodesize, m->chunk_buf);
	if (!ret)
		ret = ub_volume_write(vol, m->logical[C_META], (uint64_t)m->nmeta * m->nodesize, m->meta_buf);
	if (!ret)
		ret = ub_volume_write_supers(vol, sb);
	if (ret)
		ub_err(m->log, "mkfs: writing the new filesystem failed: %s", strerror(-ret));
out:
	ub_volume_close(vol);
	return ret;
}

int ub_mkfs(struct ub_dev *const *devs, int ndevs, const struct ub_mkfs_opts *o, const struct ub_log *log,
	    struct ub_mkfs_result *res)
{
	struct mk m = { .o = o, .log = log, .ndevs = ndevs };
	uint64_t meta_prof = 0, data_prof = 0, total = 0;
	uint8_t *sb = NULL;
	int ret, t;
	bool owned = true; /* the devices are still ours to close */

	if (ndevs < 1 || ndevs > UB_MAX_STRIPES) {
		ub_err(log, "mkfs: %d devices: from 1 to %d are supported", ndevs, UB_MAX_STRIPES);
		ret = -EINVAL;
		goto out;
	}
	m.nodesize = o->nodesize;
	m.skinny = o->features & UB_MKFS_F_SKINNY_METADATA;
	m.fst = o->features & UB_MKFS_F_FREE_SPACE_TREE;
	m.now = o->now ? o->now : (int64_t)time(NULL);
	ret = check_opts(&m, &meta_prof, &data_prof);
	if (ret)
		goto out;
	m.dev_uuid = calloc((size_t)ndevs, sizeof(*m.dev_uuid));
	m.dev_size = calloc((size_t)ndevs, sizeof(*m.dev_size));
	m.dev_used = calloc((size_t)ndevs, sizeof(*m.dev_used));
	sb = calloc(1, UB_SUPER_INFO_SIZE);
	if (!m.dev_uuid || !m.dev_size || !m.dev_used || !sb) {
		ret = -ENOMEM;
		goto out;
	}
	for (int i = 0; i < ndevs; i++) {
		uint64_t min = ub_mkfs_min_dev_size(meta_prof, data_prof);

		m.dev_size[i] = devs[i]->size / SECTORSIZE * SECTORSIZE;
		if (m.dev_size[i] < min) {
			ub_err(log, "mkfs: %s is too small: %llu bytes, these profiles need at least %llu per device",
			       devs[i]->path, (unsigned long long)m.dev_size[i], (unsigned long long)min);
			ret = -ENOSPC;
			goto out;
		}
		total += m.dev_size[i];
		uuid_generate(m.dev_uuid[i]);
	}
	if (o->fsid_given)
		memcpy(m.fsid, o->fsid, UB_FSID_SIZE);
	else
		uuid_generate(m.fsid);
	uuid_generate(m.chunk_uuid);
	uuid_generate(m.fs_uuid);

	ret = plan_chunks(&m, meta_prof, data_prof);
	if (ret)
		goto out;
	m.chunk_leaf = m.logical[C_SYS];
	t = 0;
	for (int i = 0; i < T_META_MAX; i++) {
		if (i == T_FST && !m.fst)
			continue;
		m.leaf[i] = m.logical[C_META] + (uint64_t)t++ * m.nodesize;
	}
	m.nmeta = t;
	m.meta_buf = calloc((size_t)m.nmeta, m.nodesize);
	m.chunk_buf = calloc(1, m.nodesize);
	if (!m.meta_buf || !m.chunk_buf) {
		ret = -ENOMEM;
		goto out;
	}

	ret = build_chunk_tree(&m);
	if (!ret)
		ret = build_dev_tree(&m);
	if (!ret)
		ret = build_dir_tree(&m, T_FS, m.nodesize, true);
	if (!ret)
		ret = build_dir_tree(&m, T_RELOC, 0, false);
	if (!ret)
		ret = build_empty_tree(&m, T_CSUM);
	if (!ret)
		ret = build_uuid_tree(&m);
	if (!ret && m.fst)
		ret = build_fst(&m);
	if (!ret)
		ret = build_root_tree(&m);
	if (!ret)
		ret = build_extent_tree(&m);
	if (ret)
		goto out;
	build_super(&m, sb, total);

	owned = false;
	ret = write_all(&m, devs, sb);
	if (ret)
		goto out;
	if (res) {
		memcpy(res->fsid, m.fsid, UB_FSID_SIZE);
		res->total_bytes = total;
		res->meta_profile = meta_prof;
		res->data_profile = data_prof;
		res->sys_len = m.chunk[C_SYS].length;
		res->meta_len = m.chunk[C_META].length;
		res->data_len = m.chunk[C_DATA].length;
	}
out:
	if (owned)
		for (int i = 0; i < ndevs; i++)
			ub_dev_close(devs[i]);
	free(m.dev_uuid);
	free(m.dev_size);
	free(m.dev_used);
	free(m.meta_buf);
	free(m.chunk_buf);
	free(sb);
	return ret;
}
