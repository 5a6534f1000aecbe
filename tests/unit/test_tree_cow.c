/* SPDX-License-Identifier: MIT */
/*
 * The tree layer's write side against a model: random inserts, deletes,
 * extends, truncates and data changes on a COW B-tree in a filesystem image
 * mkfs.btrfs made (nodesizes 4, 16 and 64 KiB), checked after every batch:
 *
 *  - every item equals the model (a sorted array), by full iteration and by
 *    lookups;
 *  - the tree's shape, walked independently: key order across blocks, node keys
 *    equal to their child's first key, pointer generations and levels, no
 *    empty non-root leaf, every block valid for the tree checker;
 *  - copy on write: the blocks of the last committed tree keep their bytes
 *    while the next transaction changes the tree, and the committed root still
 *    reads as the old model;
 *  - a commit (ub_tree_write_dirty) reads back through a fresh cache, with
 *    checksums and the checker, as the same items;
 *  - snapshots (ub_tree_copy_root) share children and diverge by COW.
 *
 * Fixed seeds; UBTRFS_LONG_TESTS=1 runs more operations. Needs mkfs.btrfs (skipped without it).
 */
#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ubtrfs/fs.h"
#include "fs/fs_priv.h"
#include "tree/tree_check.h"
#include "tree/tree_write.h"
#include "scratch.h"

#define TEST_TYPE 248 /* a key type the checker has no rules for, outside the inode-keyed ones */
#define TREE_ID 256ULL
#define SNAP_ID 257ULL

static char g_dir[64];
static bool g_have_mkfs;
static unsigned g_errors;

static void sink_fn(void *arg, enum ub_log_level lvl, const char *msg)
{
	(void)arg;
	if (lvl <= UB_LOG_WARN)
		fprintf(stderr, "log: %s\n", msg);
}

static const struct ub_log g_log = { sink_fn, NULL, UB_LOG_WARN, &g_errors };

static bool long_tests(void)
{
	const char *v = getenv("UBTRFS_LONG_TESTS");
	return v && *v && strcmp(v, "0");
}

/* ---- a filesystem to write into ---- */

struct env {
	char img[128];
	struct ub_fs *fs;
	struct ub_tree_ctx tc;
	uint32_t nodesize;
};

static void env_open(struct env *e, uint32_t nodesize, const char *csum)
{
	char img[128];
	const char *paths[1] = { img };
	struct ub_fs_opts opts = { .writable = true, .super_mirror = -1, .no_log = true };

	snprintf(img, sizeof(img), "%s/n%u-%s.img", g_dir, nodesize, csum);
	/* the long runs grow big trees: a bigger metadata chunk (sparse file) */
	assert_int_equal(sh("rm -f %s && truncate -s %s %s && mkfs.btrfs -q -f -n %u --csum %s %s >/dev/null", img,
			    long_tests() ? "1G" : "256M", img, nodesize, csum, img),
			 0);
	memset(e, 0, sizeof(*e));
	snprintf(e->img, sizeof(e->img), "%s", img);
	assert_int_equal(ub_fs_open(paths, 1, &opts, &g_log, &e->fs), 0);
	e->nodesize = nodesize;
	assert_int_equal(e->fs->vol->nodesize, nodesize);
	assert_int_equal(ub_tree_ctx_init(&e->tc, e->fs->vol, &g_log), 0);
	/* the fs's chunk tree uuid, from its chunk root's header */
	{
		struct ub_eb *eb;
		struct ub_root ct;
		struct ub_expect exp;

		assert_int_equal(ub_fs_tree_root(e->fs, BTRFS_CHUNK_TREE_OBJECTID, &ct), 0);
		exp = ub_root_expect(&ct);
		assert_int_equal(ub_tree_read_block(&e->tc, ct.bytenr, &exp, &eb), 0);
		assert_true(e->tc.have_chunk_tree_uuid);
		assert_memory_equal(e->tc.chunk_tree_uuid, UB_PTR(ub_disk_header, chunk_tree_uuid, eb->data), UB_UUID_SIZE);
		ub_eb_put(&e->tc, eb);
	}
}

static void env_close(struct env *e)
{
	ub_tree_drop_dirty(&e->tc);
	ub_tree_ctx_destroy(&e->tc);
	ub_fs_close(e->fs);
}

/* ---- the test allocator: bump addresses in the metadata chunk, reuse freed ones after commit ---- */

struct talloc {
	struct ub_tree_alloc ta;
	struct env *e;
	uint64_t next, end;
	uint64_t *free_now, *free_later;
	size_t nnow, nlater, cap;
	bool reuse;
	unsigned fail_at; /* 0: never; else the allocation with this number fails */
	unsigned nalloc, ncow, nfree, ncopy;
	uint64_t last_copy_src, last_copy_dst;
	bool keep_replaced; /* cow answers "still held elsewhere" for blocks of the transaction (snapshots in it) */
	unsigned nkept;
};

static void push_addr(struct talloc *a, uint64_t **arr, size_t *n, uint64_t v)
{
	if (*n == a->cap) {
		/* both lists share cap: grow both */
		size_t ncap = a->cap ? a->cap * 2 : 1024;
		a->free_now = realloc(a->free_now, ncap * sizeof(uint64_t));
		a->free_later = realloc(a->free_later, ncap * sizeof(uint64_t));
		assert_non_null(a->free_now);
		assert_non_null(a->free_later);
		a->cap = ncap;
	}
	(*arr)[(*n)++] = v;
}

/* a real allocator never hands out what a superblock copy sits on (the volume refuses the write) */
static bool over_super(const struct ub_volume *vol, uint64_t logical, uint32_t len)
{
	int copies = ub_volume_num_copies(vol, logical);

	for (int m = 1; m <= copies; m++) {
		uint64_t devid, physical;
		const char *path;
		assert_int_equal(ub_volume_map(vol, logical, m, &devid, &physical, &path), 0);
		for (int i = 0; i < UB_SUPER_MIRROR_MAX; i++) {
			uint64_t so = ub_super_offset(i);
			if (physical < so + UB_SUPER_INFO_SIZE && so < physical + len)
				return true;
		}
	}
	return false;
}

static int ta_alloc(void *arg, uint64_t root_id, int level, uint64_t *bytenr)
{
	struct talloc *a = arg;

	(void)root_id;
	(void)level;
	a->nalloc++;
	if (a->fail_at && a->nalloc >= a->fail_at)
		return -ENOSPC;
	if (a->reuse && a->nnow) {
		*bytenr = a->free_now[--a->nnow];
		return 0;
	}
	for (;;) {
		if (a->next + a->e->nodesize > a->end)
			return -ENOSPC;
		*bytenr = a->next;
		a->next += a->e->nodesize;
		if (!over_super(a->e->fs->vol, *bytenr, a->e->nodesize))
			return 0;
	}
}

/* a block of this transaction never reached the disk: its address is free at once */
static void release(struct talloc *a, const struct ub_eb *eb)
{
	if (!a->reuse)
		return;
	if (eb->dirty && ub_eb_generation(eb) == a->ta.transid)
		push_addr(a, &a->free_now, &a->nnow, eb->start);
	else
		push_addr(a, &a->free_later, &a->nlater, eb->start);
}

static int ta_cow(void *arg, uint64_t root_id, const struct ub_eb *old, const struct ub_eb *copy, uint64_t parent)
{
	struct talloc *a = arg;

	(void)root_id;
	(void)parent;
	assert_int_equal(ub_eb_generation(copy), a->ta.transid);
	assert_int_equal(ub_eb_nritems(copy), ub_eb_nritems(old));
	a->ncow++;
	if (a->keep_replaced && old->dirty && ub_eb_generation(old) == a->ta.transid) {
		a->nkept++;
		return 1;
	}
	release(a, old);
	return 0;
}

static int ta_free(void *arg, uint64_t root_id, const struct ub_eb *eb, uint64_t parent)
{
	struct talloc *a = arg;

	(void)root_id;
	(void)parent;
	a->nfree++;
	release(a, eb);
	return 0;
}

static int ta_copy_root(void *arg, uint64_t new_root_id, const struct ub_eb *src, const struct ub_eb *copy)
{
	struct talloc *a = arg;

	a->ncopy++;
	a->last_copy_src = src->start;
	a->last_copy_dst = copy->start;
	assert_int_equal(ub_eb_owner(copy), new_root_id);
	return 0;
}

static void talloc_init(struct talloc *a, struct env *e, bool reuse)
{
	struct ub_volume *vol = e->fs->vol;

	memset(a, 0, sizeof(*a));
	a->e = e;
	a->reuse = reuse;
	a->ta = (struct ub_tree_alloc){ a, vol->generation + 1, ta_alloc, ta_cow, ta_free, ta_copy_root };
	for (int i = 0; i < vol->nchunks; i++) {
		const struct ub_chunk *c = vol->chunks[i];
		if ((c->type & BTRFS_BLOCK_GROUP_METADATA) && !(c->type & BTRFS_BLOCK_GROUP_DATA)) {
			/* mkfs's own blocks sit at the chunk's start */
			a->next = c->logical + c->length / 4;
			a->end = c->logical + c->length;
		}
	}
	assert_true(a->next != 0);
}

static void talloc_free(struct talloc *a)
{
	free(a->free_now);
	free(a->free_later);
}

/* commit: write, then the superblock would say this generation; replaced blocks become free */
static void commit(struct env *e, struct talloc *a)
{
	assert_int_equal(ub_tree_write_dirty(&e->tc), 0);
	assert_int_equal(e->tc.ndirty, 0);
	e->fs->vol->generation = a->ta.transid;
	a->ta.transid++;
	while (a->nlater)
		push_addr(a, &a->free_now, &a->nnow, a->free_later[--a->nlater]);
}

/* ---- the model: a sorted array of items ---- */

struct mitem {
	struct ub_key key;
	uint32_t size;
	uint8_t *data;
};

struct model {
	struct mitem *v;
	size_t n, cap;
};

static size_t model_find(const struct model *m, const struct ub_key *k, bool *found)
{
	size_t lo = 0, hi = m->n;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (ub_key_cmp(&m->v[mid].key, k) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	*found = lo < m->n && !ub_key_cmp(&m->v[lo].key, k);
	return lo;
}

static void model_insert(struct model *m, const struct ub_key *k, const uint8_t *data, uint32_t size)
{
	bool found;
	size_t i = model_find(m, k, &found);

	assert_false(found);
	if (m->n == m->cap) {
		m->cap = m->cap ? m->cap * 2 : 256;
		m->v = realloc(m->v, m->cap * sizeof(*m->v));
		assert_non_null(m->v);
	}
	memmove(&m->v[i + 1], &m->v[i], (m->n - i) * sizeof(*m->v));
	m->v[i].key = *k;
	m->v[i].size = size;
	m->v[i].data = malloc(size ? size : 1);
	assert_non_null(m->v[i].data);
	if (size)
		memcpy(m->v[i].data, data, size);
	m->n++;
}

static void model_delete(struct model *m, size_t i)
{
	free(m->v[i].data);
	memmove(&m->v[i], &m->v[i + 1], (m->n - i - 1) * sizeof(*m->v));
	m->n--;
}

static void model_copy(struct model *dst, const struct model *src)
{
	memset(dst, 0, sizeof(*dst));
	for (size_t i = 0; i < src->n; i++)
		model_insert(dst, &src->v[i].key, src->v[i].data, src->v[i].size);
}

static void model_free(struct model *m)
{
	for (size_t i = 0; i < m->n; i++)
		free(m->v[i].data);
	free(m->v);
	memset(m, 0, sizeof(*m));
}

/* ---- checks ---- */

static uint64_t rng_state;
static uint64_t rnd(void)
{
	/* xorshift64*: fixed seeds make every run the same */
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 2685821657736338717ULL;
}
static uint32_t rnd_below(uint32_t n) { return n ? (uint32_t)(rnd() % n) : 0; }

static void fill_random(uint8_t *d, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		d[i] = (uint8_t)rnd();
}

/* Every item in order, through the iterator, equals the model. */
static void check_iter(struct ub_tree_ctx *tc, const struct ub_root *root, const struct model *m)
{
	struct ub_tree_iter it;
	struct ub_key min = { 0, 0, 0 }, max = { UINT64_MAX, 255, UINT64_MAX }, k;
	const uint8_t *d;
	uint32_t size;
	size_t i = 0;
	int ret;

	assert_int_equal(ub_tree_iter_start(&it, tc, root, &min, &max), 0);
	while ((ret = ub_tree_iter_next(&it, &k, &d, &size)) == 0) {
		assert_true(i < m->n);
		if (ub_key_cmp(&k, &m->v[i].key))
			fail_msg("item %zu: key (%" PRIu64 " %u %" PRIu64 ") expected (%" PRIu64 " %u %" PRIu64 ")", i,
				 k.objectid, k.type, k.offset, m->v[i].key.objectid, m->v[i].key.type, m->v[i].key.offset);
		assert_int_equal(size, m->v[i].size);
		if (size)
			assert_memory_equal(d, m->v[i].data, size);
		i++;
	}
	assert_int_equal(ret, 1);
	assert_int_equal(i, m->n);
	ub_tree_iter_end(&it);
}

struct shape {
	struct ub_tree_ctx *tc;
	const struct ub_root *root;
	struct ub_key last;
	bool have_last;
	size_t items, leaves, nodes;
	uint32_t nodesize;
};

/* The block's bytes as the checker sees them once written (WRITTEN set). */
static void check_block_valid(struct shape *s, const struct ub_eb *eb)
{
	uint8_t *copy = malloc(eb->len);
	struct ub_check_ctx cctx = {
		.nodesize = s->nodesize,
		.sectorsize = s->tc->vol->sectorsize,
		.csum_size = s->tc->vol->csum_size,
		.incompat_flags = UB_GET(ub_disk_super, incompat_flags, s->tc->vol->super),
		.owner = ub_eb_owner(eb),
	};
	char why[320];

	assert_non_null(copy);
	memcpy(copy, eb->data, eb->len);
	UB_SET(ub_disk_header, flags, copy, UB_GET(ub_disk_header, flags, copy) | BTRFS_HEADER_FLAG_WRITTEN);
	if (ub_tree_check_block(copy, &cctx, why, sizeof(why)))
		fail_msg("block %" PRIu64 " level %u: %s", eb->start, ub_eb_level(eb), why);
	free(copy);
	assert_int_equal(UB_GET(ub_disk_header, bytenr, eb->data), eb->start);
}

static void walk_shape(struct shape *s, uint64_t bytenr, int level, uint64_t gen, const struct ub_key *first,
		       const struct ub_key *end, bool is_root)
{
	struct ub_eb *eb;
	struct ub_expect exp = { .owner = s->root->objectid, .level = level, .generation = gen, .slot = -1 };
	uint32_t n;

	if (is_root)
		exp.exact_owner = true;
	assert_int_equal(ub_tree_read_block(s->tc, bytenr, &exp, &eb), 0);
	n = ub_eb_nritems(eb);
	check_block_valid(s, eb);
	if (level == 0) {
		s->leaves++;
		if (!is_root)
			assert_true(n > 0);
		for (uint32_t i = 0; i < n; i++) {
			struct ub_key k;
			ub_eb_item_key(eb, (int)i, &k);
			if (i == 0 && first)
				assert_int_equal(ub_key_cmp(&k, first), 0);
			if (s->have_last)
				assert_true(ub_key_cmp(&s->last, &k) < 0);
			if (end)
				assert_true(ub_key_cmp(&k, end) < 0);
			s->last = k;
			s->have_last = true;
			s->items++;
		}
	} else {
		s->nodes++;
		assert_true(n > 0);
		assert_true(n <= (s->nodesize - UB_HEADER_SIZE) / UB_KEY_PTR_SIZE);
		for (uint32_t i = 0; i < n; i++) {
			struct ub_key k, next;
			ub_eb_item_key(eb, (int)i, &k);
			if (i == 0 && first)
				assert_int_equal(ub_key_cmp(&k, first), 0);
			if (i + 1 < n)
				ub_eb_item_key(eb, (int)i + 1, &next);
			walk_shape(s, ub_eb_node_blockptr(eb, (int)i), level - 1, ub_eb_node_gen(eb, (int)i), &k,
				   i + 1 < n ? &next : end, false);
		}
	}
	ub_eb_put(s->tc, eb);
}

static struct shape shape_of(struct ub_tree_ctx *tc, const struct ub_root *root)
{
	struct shape s = { .tc = tc, .root = root, .nodesize = tc->vol->nodesize };

	walk_shape(&s, root->bytenr, root->level, root->generation, NULL, NULL, true);
	return s;
}

static void check_shape(struct ub_tree_ctx *tc, const struct ub_root *root, const struct model *m)
{
	assert_int_equal(shape_of(tc, root).items, m->n);
}

static void check_all(struct ub_tree_ctx *tc, const struct ub_root *root, const struct model *m)
{
	check_shape(tc, root, m);
	check_iter(tc, root, m);
	/* a few exact lookups through the plain read path */
	for (int i = 0; i < 16 && m->n; i++) {
		size_t j = rnd_below((uint32_t)m->n);
		struct ub_path p;
		const uint8_t *d;
		uint32_t size;
		ub_path_init(&p);
		assert_int_equal(ub_tree_lookup(tc, root, &m->v[j].key, &p, &d, &size), 0);
		assert_int_equal(size, m->v[j].size);
		ub_path_release(&p);
	}
}

/* The committed tree read back through a fresh cache: checksums, checker, same items. */
static void check_on_disk(struct env *e, const struct ub_root *root, const struct model *m)
{
	struct ub_tree_ctx fresh;
	struct ub_block_set seen = { 0 };

	assert_int_equal(ub_tree_ctx_init(&fresh, e->fs->vol, &g_log), 0);
	assert_int_equal(ub_tree_walk(&fresh, root, &seen, root->objectid, NULL, NULL), 0);
	check_iter(&fresh, root, m);
	check_shape(&fresh, root, m);
	ub_block_set_free(&seen);
	ub_tree_ctx_destroy(&fresh);
}

/* ---- random operations ---- */

static uint32_t max_item(const struct env *e) { return e->nodesize - UB_HEADER_SIZE - UB_ITEM_SIZE; }

static uint32_t rand_size(const struct env *e)
{
	uint32_t r = rnd_below(100);

	if (r < 70)
		return rnd_below(64);
	if (r < 95)
		return rnd_below(600);
	return rnd_below(max_item(e) + 1); /* now and then as big as a leaf takes */
}

static struct ub_key rand_key(uint32_t span)
{
	struct ub_key k = { 256 + rnd_below(span), TEST_TYPE, rnd_below(span * 4) };
	return k;
}

static void op_insert(struct env *e, struct talloc *a, struct ub_root *root, struct model *m, uint32_t span)
{
	struct ub_key k = rand_key(span);
	uint32_t size = rand_size(e);
	uint8_t *buf = malloc(size + 1);
	bool found;
	int ret;

	assert_non_null(buf);
	fill_random(buf, size);
	model_find(m, &k, &found);
	ret = ub_tree_insert_item(&e->tc, &a->ta, root, &k, buf, size);
	if (found) {
		assert_int_equal(ret, -EEXIST);
	} else {
		if (ret)
			fail_msg("insert of (%" PRIu64 " %u %" PRIu64 ") size %u: %s", k.objectid, k.type, k.offset, size,
				 strerror(-ret));
		model_insert(m, &k, buf, size);
	}
	free(buf);
}

/* insert a batch of consecutive keys at once */
static void op_insert_batch(struct env *e, struct talloc *a, struct ub_root *root, struct model *m, uint32_t span)
{
	struct ub_key keys[8];
	uint32_t sizes[8], total = 0;
	int n = 1 + (int)rnd_below(8);
	struct ub_path p;
	bool any = false, found;
	int ret;

	keys[0] = rand_key(span);
	for (int i = 0; i < n; i++) {
		if (i) {
			keys[i] = keys[i - 1];
			keys[i].offset++;
		}
		sizes[i] = rnd_below(100);
		total += sizes[i] + UB_ITEM_SIZE;
		model_find(m, &keys[i], &found);
		any |= found;
	}
	ub_path_init(&p);
	ret = ub_tree_insert_empty_items(&e->tc, &a->ta, root, &p, keys, sizes, n);
	if (any) {
		/* present or in the way: refused either way, nothing changed */
		assert_int_equal(ret, -EEXIST);
		ub_path_release(&p);
		return;
	}
	assert_int_equal(ret, 0);
	for (int i = 0; i < n; i++) {
		uint8_t *d;
		uint32_t sz;
		struct ub_key k;
		ub_path_key(&p, &k);
		assert_int_equal(ub_key_cmp(&k, &keys[i]), 0);
		d = ub_path_data_mut(&p, &sz);
		assert_non_null(d);
		assert_int_equal(sz, sizes[i]);
		fill_random(d, sz);
		model_insert(m, &k, d, sz);
		p.slots[0]++;
	}
	ub_path_mark_dirty(&p);
	ub_path_release(&p);
	(void)total;
}

static void op_delete(struct env *e, struct talloc *a, struct ub_root *root, struct model *m)
{
	struct ub_path p;
	size_t i;
	uint32_t n, avail;
	bool found;
	int ret;

	if (!m->n)
		return;
	i = rnd_below((uint32_t)m->n);
	ub_path_init(&p);
	ret = ub_tree_search_slot(&e->tc, &a->ta, root, &m->v[i].key, &p, -1, true);
	assert_int_equal(ret, 0);
	avail = ub_eb_nritems(p.nodes[0]) - (uint32_t)p.slots[0];
	n = 1 + rnd_below(rnd_below(4) ? 1 : (avail < 6 ? avail : 6));
	if (n > avail)
		n = avail;
	for (uint32_t j = 0; j < n; j++) {
		struct ub_key k;
		ub_eb_item_key(p.nodes[0], p.slots[0] + (int)j, &k);
		size_t mi = model_find(m, &k, &found);
		assert_true(found);
		model_delete(m, mi);
	}
	assert_int_equal(ub_tree_del_items(&e->tc, &a->ta, root, &p, p.slots[0], (int)n), 0);
	ub_path_release(&p);
}

static void op_extend(struct env *e, struct talloc *a, struct ub_root *root, struct model *m)
{
	struct ub_path p;
	struct mitem *it;
	uint32_t extra, size;
	uint8_t *d;
	int ret;

	if (!m->n)
		return;
	it = &m->v[rnd_below((uint32_t)m->n)];
	extra = 1 + rnd_below(rnd_below(10) ? 200 : max_item(e));
	ub_path_init(&p);
	if (it->size + extra > max_item(e)) {
		ret = ub_tree_search_slot(&e->tc, &a->ta, root, &it->key, &p, (int)extra, true);
		if (ret == 0) {
			/* the item cannot grow that much in any leaf */
			assert_int_equal(ub_tree_extend_item(&e->tc, &a->ta, root, &p, extra), -EOVERFLOW);
		} else {
			assert_int_equal(ret, -EOVERFLOW);
		}
		ub_path_release(&p);
		return;
	}
	ret = ub_tree_search_slot(&e->tc, &a->ta, root, &it->key, &p, (int)extra, true);
	assert_int_equal(ret, 0);
	assert_int_equal(ub_tree_extend_item(&e->tc, &a->ta, root, &p, extra), 0);
	d = ub_path_data_mut(&p, &size);
	assert_non_null(d);
	assert_int_equal(size, it->size + extra);
	assert_memory_equal(d, it->data, it->size);
	for (uint32_t i = it->size; i < size; i++)
		assert_int_equal(d[i], 0);
	fill_random(d + it->size, extra);
	it->data = realloc(it->data, size);
	assert_non_null(it->data);
	memcpy(it->data, d, size);
	it->size = size;
	ub_path_release(&p);
}

static void op_truncate(struct env *e, struct talloc *a, struct ub_root *root, struct model *m)
{
	struct ub_path p;
	struct mitem *it;
	uint32_t ns, size;
	bool from_end = rnd() & 1;
	const uint8_t *d;

	if (!m->n)
		return;
	it = &m->v[rnd_below((uint32_t)m->n)];
	if (!it->size)
		return;
	ns = rnd_below(it->size);
	ub_path_init(&p);
	assert_int_equal(ub_tree_search_slot(&e->tc, &a->ta, root, &it->key, &p, 0, true), 0);
	ub_tree_truncate_item(&e->tc, &p, ns, from_end);
	d = ub_path_data(&p, &size);
	assert_int_equal(size, ns);
	if (from_end)
		assert_memory_equal(d, it->data, ns);
	else
		assert_memory_equal(d, it->data + it->size - ns, ns);
	if (!from_end)
		memmove(it->data, it->data + it->size - ns, ns);
	it->size = ns;
	ub_path_release(&p);
}

static void op_modify(struct env *e, struct talloc *a, struct ub_root *root, struct model *m)
{
	struct ub_path p;
	struct mitem *it;
	uint32_t size;
	uint8_t *d;

	if (!m->n)
		return;
	it = &m->v[rnd_below((uint32_t)m->n)];
	ub_path_init(&p);
	assert_int_equal(ub_tree_search_slot(&e->tc, &a->ta, root, &it->key, &p, 0, true), 0);
	d = ub_path_data_mut(&p, &size);
	assert_non_null(d);
	fill_random(d, size);
	memcpy(it->data, d, size);
	ub_path_mark_dirty(&p);
	ub_path_release(&p);
}

static void random_op(struct env *e, struct talloc *a, struct ub_root *root, struct model *m, uint32_t span,
		      unsigned insert_bias)
{
	unsigned r = rnd_below(100), rest;

	if (r < insert_bias) {
		op_insert(e, a, root, m, span);
		return;
	}
	if (r < insert_bias + 5) {
		op_insert_batch(e, a, root, m, span);
		return;
	}
	/* the rest: half deletes, then extends, truncates and changes in place */
	rest = rnd_below(100);
	if (rest < 50)
		op_delete(e, a, root, m);
	else if (rest < 65)
		op_extend(e, a, root, m);
	else if (rest < 80)
		op_truncate(e, a, root, m);
	else
		op_modify(e, a, root, m);
}

/* ---- committed blocks: their bytes, to compare after the next transaction's changes ---- */

struct saved {
	uint64_t *addr;
	uint8_t **bytes;
	size_t n;
};

static int save_fn(void *arg, const struct ub_eb *eb)
{
	struct saved *s = arg;

	s->addr = realloc(s->addr, (s->n + 1) * sizeof(*s->addr));
	s->bytes = realloc(s->bytes, (s->n + 1) * sizeof(*s->bytes));
	assert_non_null(s->addr);
	assert_non_null(s->bytes);
	s->addr[s->n] = eb->start;
	s->bytes[s->n] = malloc(eb->len);
	assert_non_null(s->bytes[s->n]);
	memcpy(s->bytes[s->n], eb->data, eb->len);
	s->n++;
	return 0;
}

struct cmp {
	struct saved *s;
	size_t i;
};

static int cmp_fn(void *arg, const struct ub_eb *eb)
{
	struct cmp *c = arg;

	assert_true(c->i < c->s->n);
	assert_int_equal(eb->start, c->s->addr[c->i]);
	assert_false(eb->dirty);
	assert_memory_equal(eb->data, c->s->bytes[c->i], eb->len);
	c->i++;
	return 0;
}

static void saved_free(struct saved *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->bytes[i]);
	free(s->addr);
	free(s->bytes);
	memset(s, 0, sizeof(*s));
}

/* ---- the tests ---- */

static void model_progs_check(struct env *e, const struct ub_root *root, const struct model *m);

static void run_random(uint32_t nodesize, const char *csum, uint64_t seed, unsigned ops, unsigned batch, uint32_t span,
		       int want_level)
{
	struct env e;
	struct talloc a;
	struct ub_root root;
	struct model m = { 0 };
	unsigned errs = g_errors, done = 0, batches = 0;
	bool progs_done = false;
	int max_level = 0;

	rng_state = seed;
	env_open(&e, nodesize, csum);
	talloc_init(&a, &e, true);
	assert_int_equal(ub_tree_create_root(&e.tc, &a.ta, TREE_ID, &root), 0);
	assert_int_equal(root.level, 0);
	commit(&e, &a);
	while (done < ops) {
		struct ub_root committed = root;
		struct model before;
		struct saved sv = { 0 };
		struct ub_block_set seen = { 0 };
		struct cmp c = { &sv, 0 };
		/* grow the tree, churn it, shrink it */
		unsigned bias = done < ops * 4 / 10 ? 80 : done < ops * 7 / 10 ? 40 : 10;

		model_copy(&before, &m);
		assert_int_equal(ub_tree_walk(&e.tc, &committed, &seen, TREE_ID, save_fn, &sv), 0);
		ub_block_set_free(&seen);
		for (unsigned i = 0; i < batch && done < ops; i++, done++)
			random_op(&e, &a, &root, &m, span, bias);
		check_all(&e.tc, &root, &m);
		/* the committed tree is untouched in memory: same bytes, same items */
		assert_int_equal(ub_tree_walk(&e.tc, &committed, &seen, TREE_ID, cmp_fn, &c), 0);
		assert_int_equal(c.i, sv.n);
		ub_block_set_free(&seen);
		check_iter(&e.tc, &committed, &before);
		saved_free(&sv);
		model_free(&before);
		if (root.level > max_level)
			max_level = root.level;
		commit(&e, &a);
		if (++batches % 4 == 0)
			check_on_disk(&e, &root, &m);
		if (!progs_done && done >= ops * 4 / 10) {
			/* the tree at its biggest, through btrfs-progs */
			model_progs_check(&e, &root, &m);
			progs_done = true;
		}
	}
	check_on_disk(&e, &root, &m);
	/* everything goes: the tree shrinks back to one empty leaf */
	while (m.n) {
		op_delete(&e, &a, &root, &m);
		if (rnd_below(200) == 0)
			check_all(&e.tc, &root, &m);
	}
	/* one more search for deletion collapses a root left with one child */
	{
		struct ub_path p;
		struct ub_key k = { 0, 0, 0 };
		ub_path_init(&p);
		assert_true(ub_tree_search_slot(&e.tc, &a.ta, &root, &k, &p, -1, true) >= 0);
		ub_path_release(&p);
	}
	check_all(&e.tc, &root, &m);
	assert_int_equal(root.level, 0);
	commit(&e, &a);
	check_on_disk(&e, &root, &m);
	print_message("nodesize %u %s: %u ops, max level %d, %u allocs, %u cows, %u frees\n", nodesize, csum, ops,
		      max_level, a.nalloc, a.ncow, a.nfree);
	assert_true(max_level >= want_level);
	assert_int_equal(g_errors, errs);
	model_free(&m);
	talloc_free(&a);
	env_close(&e);
}


#define NEED_MKFS() SKIP_WITHOUT_MKFS(g_have_mkfs)

static void test_random_4k(void **state)
{
	(void)state;
	NEED_MKFS();
	run_random(4096, "crc32c", 0x1234567ULL, long_tests() ? 60000 : 12000, 300, 400, 2);
}

static void test_random_16k(void **state)
{
	(void)state;
	NEED_MKFS();
	run_random(16384, "xxhash", 0xfeedbeefULL, long_tests() ? 60000 : 6000, 300, 800, 1);
}

static void test_random_8k(void **state)
{
	(void)state;
	NEED_MKFS();
	run_random(8192, "sha256", 0x8888ULL, long_tests() ? 30000 : 3000, 300, 500, 1);
}

static void test_random_32k(void **state)
{
	(void)state;
	NEED_MKFS();
	run_random(32768, "blake2", 0x3232ULL, long_tests() ? 30000 : 3000, 300, 1000, 1);
}

static void test_random_64k(void **state)
{
	(void)state;
	NEED_MKFS();
	run_random(65536, "crc32c", 0xabcdef01ULL, long_tests() ? 30000 : 4000, 300, 1500, 1);
}

/* Items as big as a leaf takes go in (each alone in a leaf); a byte more is refused. */
static void test_item_limits(void **state)
{
	static const uint32_t sizes[] = { 4096, 65536 };

	(void)state;
	NEED_MKFS();
	for (size_t s = 0; s < 2; s++) {
		struct env e;
		struct talloc a;
		struct ub_root root;
		struct model m = { 0 };
		uint32_t max;
		uint8_t *buf;

		env_open(&e, sizes[s], "crc32c");
		talloc_init(&a, &e, true);
		max = max_item(&e);
		buf = calloc(1, max + 2);
		assert_non_null(buf);
		assert_int_equal(ub_tree_create_root(&e.tc, &a.ta, TREE_ID, &root), 0);
		for (uint64_t i = 0; i < 6; i++) {
			struct ub_key k = { 300, TEST_TYPE, i * 2 };
			fill_random(buf, max);
			assert_int_equal(ub_tree_insert_item(&e.tc, &a.ta, &root, &k, buf, max), 0);
			model_insert(&m, &k, buf, max);
			/* and a small one between the big ones: a split on each side of it */
			k.offset = i * 2 + 1;
			assert_int_equal(ub_tree_insert_item(&e.tc, &a.ta, &root, &k, buf, 10), 0);
			model_insert(&m, &k, buf, 10);
		}
		{
			struct ub_key k = { 300, TEST_TYPE, 1000 };
			assert_int_equal(ub_tree_insert_item(&e.tc, &a.ta, &root, &k, buf, max + 1), -EOVERFLOW);
		}
		check_all(&e.tc, &root, &m);
		commit(&e, &a);
		check_on_disk(&e, &root, &m);
		free(buf);
		model_free(&m);
		talloc_free(&a);
		env_close(&e);
	}
}

/* A snapshot shares every child; changing either tree copies only what it changes. */
static void test_copy_root(void **state)
{
	struct env e;
	struct talloc a;
	struct ub_root root, snap;
	struct model m = { 0 }, ms;
	struct ub_eb *src, *dst;
	struct ub_expect ex;

	(void)state;
	NEED_MKFS();
	rng_state = 42;
	env_open(&e, 4096, "crc32c");
	talloc_init(&a, &e, false); /* shared blocks: nothing is reused */
	assert_int_equal(ub_tree_create_root(&e.tc, &a.ta, TREE_ID, &root), 0);
	for (int i = 0; i < 1500; i++)
		op_insert(&e, &a, &root, &m, 300);
	commit(&e, &a);
	assert_true(root.level >= 1);
	assert_int_equal(ub_tree_copy_root(&e.tc, &a.ta, &root, SNAP_ID, &snap), 0);
	assert_int_equal(a.ncopy, 1);
	assert_int_equal(snap.level, root.level);
	assert_int_equal(snap.objectid, SNAP_ID);
	assert_int_equal(a.last_copy_src, root.bytenr);
	assert_int_equal(a.last_copy_dst, snap.bytenr);
	ex = ub_root_expect(&root);
	assert_int_equal(ub_tree_read_block(&e.tc, root.bytenr, &ex, &src), 0);
	ex = ub_root_expect(&snap);
	assert_int_equal(ub_tree_read_block(&e.tc, snap.bytenr, &ex, &dst), 0);
	assert_int_equal(ub_eb_nritems(src), ub_eb_nritems(dst));
	for (int i = 0; i < (int)ub_eb_nritems(src); i++) {
		assert_int_equal(ub_eb_node_blockptr(src, i), ub_eb_node_blockptr(dst, i));
		assert_int_equal(ub_eb_node_gen(src, i), ub_eb_node_gen(dst, i));
	}
	assert_int_equal(ub_eb_owner(dst), SNAP_ID);
	ub_eb_put(&e.tc, src);
	ub_eb_put(&e.tc, dst);
	commit(&e, &a);
	check_on_disk(&e, &snap, &m);
	/* diverge: the snapshot changes, the source does not, and the other way round */
	model_copy(&ms, &m);
	for (int i = 0; i < 300; i++)
		random_op(&e, &a, &snap, &ms, 300, 40);
	check_all(&e.tc, &snap, &ms);
	check_all(&e.tc, &root, &m);
	for (int i = 0; i < 300; i++)
		random_op(&e, &a, &root, &m, 300, 40);
	check_all(&e.tc, &snap, &ms);
	check_all(&e.tc, &root, &m);
	commit(&e, &a);
	check_on_disk(&e, &snap, &ms);
	check_on_disk(&e, &root, &m);
	model_free(&m);
	model_free(&ms);
	talloc_free(&a);
	env_close(&e);
}

/*
 * A snapshot of a tree built in the running transaction: blocks made before
 * the copy are copied at their first change in either tree (and stay for the
 * other), blocks made after it change in place.
 */
static void test_copy_root_dirty(void **state)
{
	struct env e;
	struct talloc a;
	struct ub_root root, snap, snap2;
	struct model m = { 0 }, ms, ms2;

	(void)state;
	NEED_MKFS();
	rng_state = 43;
	env_open(&e, 4096, "crc32c");
	talloc_init(&a, &e, false);
	a.keep_replaced = true;
	assert_int_equal(ub_tree_create_root(&e.tc, &a.ta, TREE_ID, &root), 0);
	for (int i = 0; i < 1500; i++)
		op_insert(&e, &a, &root, &m, 300);
	assert_true(root.level >= 1);
	assert_int_equal(a.ncow, 0); /* all of this transaction: changed in place */
	assert_int_equal(ub_tree_copy_root(&e.tc, &a.ta, &root, SNAP_ID, &snap), 0);
	assert_int_equal(root.shared_upto, snap.shared_upto);
	model_copy(&ms, &m);
	for (int i = 0; i < 300; i++)
		random_op(&e, &a, &snap, &ms, 300, 40);
	assert_true(a.nkept > 0);
	check_all(&e.tc, &snap, &ms);
	check_all(&e.tc, &root, &m);
	for (int i = 0; i < 300; i++)
		random_op(&e, &a, &root, &m, 300, 40);
	check_all(&e.tc, &snap, &ms);
	check_all(&e.tc, &root, &m);
	/* a snapshot of the snapshot, still in the same transaction */
	assert_int_equal(ub_tree_copy_root(&e.tc, &a.ta, &snap, SNAP_ID + 1, &snap2), 0);
	model_copy(&ms2, &ms);
	for (int i = 0; i < 200; i++)
		random_op(&e, &a, &snap, &ms, 300, 40);
	check_all(&e.tc, &snap2, &ms2);
	check_all(&e.tc, &snap, &ms);
	check_all(&e.tc, &root, &m);
	commit(&e, &a);
	check_on_disk(&e, &root, &m);
	check_on_disk(&e, &snap, &ms);
	check_on_disk(&e, &snap2, &ms2);
	model_free(&m);
	model_free(&ms);
	model_free(&ms2);
	talloc_free(&a);
	env_close(&e);
}

/* An aborted transaction leaves the committed tree as it was, in memory and on disk. */
static void test_drop_dirty(void **state)
{
	struct env e;
	struct talloc a;
	struct ub_root root, committed;
	struct model m = { 0 }, mc;

	(void)state;
	NEED_MKFS();
	rng_state = 7;
	env_open(&e, 16384, "crc32c");
	talloc_init(&a, &e, false);
	assert_int_equal(ub_tree_create_root(&e.tc, &a.ta, TREE_ID, &root), 0);
	for (int i = 0; i < 2000; i++)
		op_insert(&e, &a, &root, &m, 500);
	commit(&e, &a);
	committed = root;
	model_copy(&mc, &m);
	for (int i = 0; i < 500; i++)
		random_op(&e, &a, &root, &m, 500, 30);
	assert_true(e.tc.ndirty > 0);
	ub_tree_drop_dirty(&e.tc);
	assert_int_equal(e.tc.ndirty, 0);
	check_all(&e.tc, &committed, &mc);
	check_on_disk(&e, &committed, &mc);
	model_free(&m);
	model_free(&mc);
	talloc_free(&a);
	env_close(&e);
}

/*
 * The allocator runs dry in the middle of changes: the error comes back from
 * whatever call needed a block, and aborting (drop_dirty) leaves the committed
 * tree whole, in memory and on disk.
 */
static void test_alloc_failure(void **state)
{
	struct env e;
	struct talloc a;
	struct ub_root root, committed;
	struct model m = { 0 }, mc;
	unsigned errs;

	(void)state;
	NEED_MKFS();
	rng_state = 11;
	env_open(&e, 4096, "crc32c");
	talloc_init(&a, &e, false);
	assert_int_equal(ub_tree_create_root(&e.tc, &a.ta, TREE_ID, &root), 0);
	for (int i = 0; i < 3000; i++)
		op_insert(&e, &a, &root, &m, 400);
	commit(&e, &a);
	for (unsigned round = 1; round <= 40; round++) {
		int ret = 0;

		committed = root;
		model_copy(&mc, &m);
		a.fail_at = a.nalloc + round;
		errs = g_errors;
		/* big items so splits (and so allocations) come quickly */
		for (int i = 0; i < 2000 && !ret; i++) {
			struct ub_key k = rand_key(400);
			uint8_t buf[1500];
			bool found;
			uint32_t size = 200 + rnd_below(1200);
			fill_random(buf, size);
			model_find(&m, &k, &found);
			if (i % 3 == 2 && m.n) {
				struct ub_path p;
				ub_path_init(&p);
				ret = ub_tree_search_slot(&e.tc, &a.ta, &root, &m.v[rnd_below((uint32_t)m.n)].key, &p, -1, true);
				if (ret == 0)
					ret = ub_tree_del_items(&e.tc, &a.ta, &root, &p, p.slots[0], 1);
				ub_path_release(&p);
			} else {
				ret = ub_tree_insert_item(&e.tc, &a.ta, &root, &k, buf, size);
				if (ret == -EEXIST && found)
					ret = 0;
			}
		}
		assert_int_equal(ret, -ENOSPC);
		(void)errs;
		ub_tree_drop_dirty(&e.tc);
		root = committed;
		model_free(&m);
		m = mc;
		a.fail_at = 0;
		check_all(&e.tc, &root, &m);
	}
	check_on_disk(&e, &root, &m);
	model_free(&m);
	talloc_free(&a);
	env_close(&e);
}

/*
 * What the cache promises about transaction blocks: a wrong pointer to one is
 * refused (there is no disk copy to fall back on); a committed leaf reached by
 * a plain search is not writable; a new block's header is the fs's.
 */
static void test_dirty_rules(void **state)
{
	struct env e;
	struct talloc a;
	struct ub_root root;
	struct model m = { 0 };
	struct ub_eb *eb;
	struct ub_expect ex;
	struct ub_path p;
	uint32_t size;
	unsigned errs;
	uint64_t flags;

	(void)state;
	NEED_MKFS();
	rng_state = 5;
	env_open(&e, 16384, "crc32c");
	talloc_init(&a, &e, true);
	assert_int_equal(ub_tree_create_root(&e.tc, &a.ta, TREE_ID, &root), 0);
	for (int i = 0; i < 50; i++)
		op_insert(&e, &a, &root, &m, 100);
	ex = ub_root_expect(&root);
	assert_int_equal(ub_tree_read_block(&e.tc, root.bytenr, &ex, &eb), 0);
	assert_true(eb->dirty);
	assert_int_equal(ub_eb_generation(eb), a.ta.transid);
	assert_int_equal(ub_eb_owner(eb), TREE_ID);
	assert_int_equal(UB_GET(ub_disk_header, bytenr, eb->data), root.bytenr);
	assert_memory_equal(UB_PTR(ub_disk_header, fsid, eb->data), e.fs->vol->metadata_uuid, UB_FSID_SIZE);
	assert_memory_equal(UB_PTR(ub_disk_header, chunk_tree_uuid, eb->data), e.tc.chunk_tree_uuid, UB_UUID_SIZE);
	flags = UB_GET(ub_disk_header, flags, eb->data);
	assert_int_equal(flags & BTRFS_HEADER_FLAG_WRITTEN, 0);
	assert_int_equal(flags >> UB_BACKREF_REV_SHIFT, UB_MIXED_BACKREF_REV);
	ub_eb_put(&e.tc, eb);
	errs = g_errors;
	ex.generation = root.generation - 1;
	assert_int_equal(ub_tree_read_block(&e.tc, root.bytenr, &ex, &eb), -EUCLEAN);
	assert_int_equal(g_errors, errs + 1);
	commit(&e, &a);
	ex = ub_root_expect(&root);
	assert_int_equal(ub_tree_read_block(&e.tc, root.bytenr, &ex, &eb), 0);
	assert_false(eb->dirty);
	flags = UB_GET(ub_disk_header, flags, eb->data);
	assert_int_equal(flags & BTRFS_HEADER_FLAG_WRITTEN, BTRFS_HEADER_FLAG_WRITTEN);
	ub_eb_put(&e.tc, eb);
	/* committed: readable, not writable, until a cow search copies it */
	ub_path_init(&p);
	assert_int_equal(ub_tree_search(&e.tc, &root, &m.v[0].key, &p), 0);
	assert_null(ub_path_data_mut(&p, &size));
	ub_path_release(&p);
	assert_int_equal(ub_tree_search_slot(&e.tc, &a.ta, &root, &m.v[0].key, &p, 0, true), 0);
	assert_non_null(ub_path_data_mut(&p, &size));
	assert_true(p.nodes[0]->dirty);
	ub_path_release(&p);
	assert_int_equal(root.generation, a.ta.transid);
	model_free(&m);
	talloc_free(&a);
	env_close(&e);
}

/* The iterator stops at its bounds, from anywhere. */
static void test_iter_range(void **state)
{
	struct env e;
	struct talloc a;
	struct ub_root root;
	struct model m = { 0 };

	(void)state;
	NEED_MKFS();
	rng_state = 99;
	env_open(&e, 4096, "crc32c");
	talloc_init(&a, &e, true);
	assert_int_equal(ub_tree_create_root(&e.tc, &a.ta, TREE_ID, &root), 0);
	for (int i = 0; i < 1200; i++)
		op_insert(&e, &a, &root, &m, 200);
	for (int t = 0; t < 60; t++) {
		struct ub_key lo = rand_key(220), hi = rand_key(220), k;
		struct ub_tree_iter it;
		bool found;
		size_t i, j;
		int ret;

		if (t % 10 == 0)
			hi = lo; /* one key */
		i = model_find(&m, &lo, &found);
		assert_int_equal(ub_tree_iter_start(&it, &e.tc, &root, &lo, &hi), 0);
		j = i;
		while ((ret = ub_tree_iter_next(&it, &k, NULL, NULL)) == 0) {
			assert_true(j < m.n);
			assert_int_equal(ub_key_cmp(&k, &m.v[j].key), 0);
			j++;
		}
		assert_int_equal(ret, 1);
		/* it stopped at the first key past hi (or the end) */
		if (ub_key_cmp(&lo, &hi) <= 0)
			assert_true(j == m.n || ub_key_cmp(&m.v[j].key, &hi) > 0);
		else
			assert_int_equal(j, i);
		ub_tree_iter_end(&it);
	}
	model_free(&m);
	talloc_free(&a);
	env_close(&e);
}

/*
 * Many small items, so 4 KiB nodes fill and empty: node splits, merges and
 * pointers taken from siblings. The model is a fixed key set with a present
 * flag per key; an item's bytes follow from its index.
 */
struct dense {
	uint32_t n;
	bool *present;
	uint32_t count;
};

static struct ub_key dense_key(uint32_t i)
{
	struct ub_key k = { 256 + i / 64, TEST_TYPE, (uint64_t)(i % 64) * 3 };
	return k;
}

static uint32_t dense_size(uint32_t i) { return i % 11; }

static void dense_bytes(uint32_t i, uint8_t *d)
{
	for (uint32_t j = 0; j < dense_size(i); j++)
		d[j] = (uint8_t)(i * 7 + j);
}

static void dense_insert(struct env *e, struct talloc *a, struct ub_root *root, struct dense *m, uint32_t i)
{
	struct ub_key k = dense_key(i);
	uint8_t d[16];

	dense_bytes(i, d);
	assert_int_equal(ub_tree_insert_item(&e->tc, &a->ta, root, &k, d, dense_size(i)), m->present[i] ? -EEXIST : 0);
	if (!m->present[i])
		m->count++;
	m->present[i] = true;
}

static void dense_delete(struct env *e, struct talloc *a, struct ub_root *root, struct dense *m, uint32_t i)
{
	struct ub_key k = dense_key(i);
	struct ub_path p;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_search_slot(&e->tc, &a->ta, root, &k, &p, -1, true);
	assert_int_equal(ret, m->present[i] ? 0 : 1);
	if (ret == 0) {
		assert_int_equal(ub_tree_del_items(&e->tc, &a->ta, root, &p, p.slots[0], 1), 0);
		m->present[i] = false;
		m->count--;
	}
	ub_path_release(&p);
}

static void dense_check(struct ub_tree_ctx *tc, const struct ub_root *root, const struct dense *m)
{
	struct ub_tree_iter it;
	struct ub_key min = { 0, 0, 0 }, max = { UINT64_MAX, 255, UINT64_MAX }, k;
	const uint8_t *d;
	uint32_t size, i = 0;
	uint8_t want[16];
	int ret;

	assert_int_equal(shape_of(tc, root).items, m->count);
	assert_int_equal(ub_tree_iter_start(&it, tc, root, &min, &max), 0);
	while ((ret = ub_tree_iter_next(&it, &k, &d, &size)) == 0) {
		struct ub_key w;
		while (i < m->n && !m->present[i])
			i++;
		assert_true(i < m->n);
		w = dense_key(i);
		assert_int_equal(ub_key_cmp(&k, &w), 0);
		assert_int_equal(size, dense_size(i));
		dense_bytes(i, want);
		if (size)
			assert_memory_equal(d, want, size);
		i++;
	}
	assert_int_equal(ret, 1);
	while (i < m->n && !m->present[i])
		i++;
	assert_int_equal(i, m->n);
	ub_tree_iter_end(&it);
}

static void dense_commit_check(struct env *e, struct talloc *a, const struct ub_root *root, const struct dense *m)
{
	struct ub_tree_ctx fresh;
	struct ub_block_set seen = { 0 };

	dense_check(&e->tc, root, m);
	commit(e, a);
	assert_int_equal(ub_tree_ctx_init(&fresh, e->fs->vol, &g_log), 0);
	assert_int_equal(ub_tree_walk(&fresh, root, &seen, root->objectid, NULL, NULL), 0);
	dense_check(&fresh, root, m);
	ub_block_set_free(&seen);
	ub_tree_ctx_destroy(&fresh);
}

/*
 * btrfs-progs as the independent reader: dump-tree follows the written tree
 * from its root (checksums, headers, child generations checked on the way) and
 * prints every item; keys and sizes must be the expected ones, in order.
 */
static void progs_check(struct env *e, const struct ub_root *root, const struct ub_key *keys, const uint32_t *sizes,
			size_t n)
{
	char cmd[512], line[512];
	FILE *f;
	size_t items = 0;
	bool bad = false;

	if (sh("command -v btrfs >/dev/null 2>&1")) {
		print_message("btrfs-progs not installed: the dump-tree check is skipped\n");
		return;
	}
	snprintf(cmd, sizeof(cmd), "btrfs inspect-internal dump-tree --noscan -b %" PRIu64 " --follow %s 2>&1",
		 root->bytenr, e->img);
	f = popen(cmd, "r");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f)) {
		unsigned long long oid, off;
		unsigned type, ioff, isize;
		char tname[64];
		const char *kp = strstr(line, " key (");

		if (strstr(line, "verify failed") || strstr(line, "ERROR") || strstr(line, "corrupt")) {
			fprintf(stderr, "dump-tree: %s", line);
			bad = true;
		}
		/* leaf items: "\titem N key (OID TYPE OFF) itemoff X itemsize Y" */
		if (!kp || !strstr(line, "itemsize"))
			continue;
		if (sscanf(kp, " key (%llu %63s %llu) itemoff %u itemsize %u", &oid, tname, &off, &ioff, &isize) != 5) {
			fprintf(stderr, "dump-tree: unparsed: %s", line);
			bad = true;
			continue;
		}
		/* progs names type 248 */
		if (!strcmp(tname, "TEMPORARY_ITEM"))
			type = TEST_TYPE;
		else if (sscanf(tname, "%u", &type) != 1)
			type = 0;
		if (items < n) {
			struct ub_key k = { oid, (uint8_t)type, off };
			if (ub_key_cmp(&k, &keys[items]) || isize != sizes[items]) {
				if (!bad)
					fprintf(stderr, "dump-tree: item %zu is (%llu %u %llu) size %u, expected (%" PRIu64
						" %u %" PRIu64 ") size %u\n", items, oid, type, off, isize, keys[items].objectid,
						keys[items].type, keys[items].offset, sizes[items]);
				bad = true;
			}
		}
		items++;
	}
	assert_int_equal(pclose(f), 0);
	assert_false(bad);
	assert_int_equal(items, n);
	print_message("btrfs dump-tree read %zu items back\n", items);
}

static void model_progs_check(struct env *e, const struct ub_root *root, const struct model *m)
{
	struct ub_key *keys = malloc((m->n + 1) * sizeof(*keys));
	uint32_t *sizes = malloc((m->n + 1) * sizeof(*sizes));

	assert_non_null(keys);
	assert_non_null(sizes);
	for (size_t i = 0; i < m->n; i++) {
		keys[i] = m->v[i].key;
		sizes[i] = m->v[i].size;
	}
	progs_check(e, root, keys, sizes, m->n);
	free(keys);
	free(sizes);
}

static void dense_progs_check(struct env *e, const struct ub_root *root, const struct dense *m)
{
	struct ub_key *keys = malloc((m->count + 1) * sizeof(*keys));
	uint32_t *sizes = malloc((m->count + 1) * sizeof(*sizes));
	size_t n = 0;

	assert_non_null(keys);
	assert_non_null(sizes);
	for (uint32_t i = 0; i < m->n; i++) {
		if (!m->present[i])
			continue;
		keys[n] = dense_key(i);
		sizes[n++] = dense_size(i);
	}
	progs_check(e, root, keys, sizes, n);
	free(keys);
	free(sizes);
}

static void test_nodes_4k(void **state)
{
	struct env e;
	struct talloc a;
	struct ub_root root;
	struct dense m = { 0 };
	uint32_t *perm, n = long_tests() ? 120000 : 40000;
	unsigned errs = g_errors;
	int max_level = 0;
	struct shape sh1;

	(void)state;
	NEED_MKFS();
	rng_state = 0x5eed;
	env_open(&e, 4096, "crc32c");
	talloc_init(&a, &e, true);
	m.n = n;
	m.present = calloc(n, sizeof(bool));
	perm = malloc(n * sizeof(uint32_t));
	assert_non_null(m.present);
	assert_non_null(perm);
	for (uint32_t i = 0; i < n; i++)
		perm[i] = i;
	for (uint32_t i = n - 1; i > 0; i--) {
		uint32_t j = rnd_below(i + 1), t = perm[i];
		perm[i] = perm[j];
		perm[j] = t;
	}
	assert_int_equal(ub_tree_create_root(&e.tc, &a.ta, TREE_ID, &root), 0);
	/* the first half in random order, the second appended in key order */
	for (uint32_t i = 0; i < n; i++) {
		if (i < n / 2)
			dense_insert(&e, &a, &root, &m, perm[i]);
		if (i % 5000 == 4999)
			commit(&e, &a);
	}
	for (uint32_t i = 0; i < n; i++)
		if (!m.present[i])
			dense_insert(&e, &a, &root, &m, i);
	max_level = root.level;
	sh1 = shape_of(&e.tc, &root);
	print_message("%u items: level %d, %zu nodes, %zu leaves\n", m.count, root.level, sh1.nodes, sh1.leaves);
	assert_true(root.level >= 2);
	dense_commit_check(&e, &a, &root, &m);
	dense_progs_check(&e, &root, &m);
	/* a contiguous third goes: whole leaves and nodes empty out */
	for (uint32_t i = n / 3; i < 2 * n / 3; i++)
		dense_delete(&e, &a, &root, &m, i);
	dense_commit_check(&e, &a, &root, &m);
	/* then every other one of the rest, at random: underfull leaves and nodes beside full ones */
	for (uint32_t i = 0; i < n; i++) {
		if (perm[i] % 2)
			dense_delete(&e, &a, &root, &m, perm[i]);
		if (i % 10000 == 9999)
			commit(&e, &a);
	}
	dense_commit_check(&e, &a, &root, &m);
	/* refill part of the hole, every third key */
	for (uint32_t i = n / 3; i < 2 * n / 3; i += 3)
		dense_insert(&e, &a, &root, &m, i);
	dense_commit_check(&e, &a, &root, &m);
	/* and all the rest away, at random */
	for (uint32_t i = 0; i < n; i++)
		if (m.present[perm[i]])
			dense_delete(&e, &a, &root, &m, perm[i]);
	{
		struct ub_path p;
		struct ub_key k = { 0, 0, 0 };
		ub_path_init(&p);
		assert_int_equal(ub_tree_search_slot(&e.tc, &a.ta, &root, &k, &p, -1, true), 1);
		ub_path_release(&p);
	}
	assert_int_equal(root.level, 0);
	assert_int_equal(m.count, 0);
	dense_commit_check(&e, &a, &root, &m);
	print_message("max level %d, %u allocs, %u cows, %u frees\n", max_level, a.nalloc, a.ncow, a.nfree);
	assert_int_equal(g_errors, errs);
	free(perm);
	free(m.present);
	talloc_free(&a);
	env_close(&e);
}

/* The plain search of the contract: no allocator, nothing copied, the insert position. */
static void test_search_readonly(void **state)
{
	struct env e;
	struct talloc a;
	struct ub_root root, before;
	struct model m = { 0 };
	struct ub_path p;
	size_t dirty;

	(void)state;
	NEED_MKFS();
	rng_state = 3;
	env_open(&e, 4096, "crc32c");
	talloc_init(&a, &e, true);
	assert_int_equal(ub_tree_create_root(&e.tc, &a.ta, TREE_ID, &root), 0);
	for (int i = 0; i < 800; i++)
		op_insert(&e, &a, &root, &m, 100);
	commit(&e, &a);
	before = root;
	dirty = e.tc.ndirty;
	ub_path_init(&p);
	for (size_t i = 0; i < m.n; i += 7) {
		struct ub_key k = m.v[i].key, got;
		assert_int_equal(ub_tree_search_slot(&e.tc, NULL, &root, &k, &p, 0, false), 0);
		ub_path_key(&p, &got);
		assert_int_equal(ub_key_cmp(&k, &got), 0);
		/* one past it: not found, positioned at the next item or past the last one */
		k.offset++;
		if (i + 1 < m.n && !ub_key_cmp(&k, &m.v[i + 1].key))
			continue;
		assert_int_equal(ub_tree_search_slot(&e.tc, NULL, &root, &k, &p, 0, false), 1);
		if ((uint32_t)p.slots[0] < ub_eb_nritems(p.nodes[0])) {
			ub_path_key(&p, &got);
			assert_true(i + 1 < m.n);
			assert_int_equal(ub_key_cmp(&got, &m.v[i + 1].key), 0);
		} else {
			assert_true(i + 1 == m.n);
		}
	}
	ub_path_release(&p);
	/* changing needs copying: refused without cow */
	assert_int_equal(ub_tree_search_slot(&e.tc, &a.ta, &root, &m.v[0].key, &p, 1, false), -EINVAL);
	ub_path_release(&p);
	assert_int_equal(e.tc.ndirty, dirty);
	assert_memory_equal(&root, &before, sizeof(root));
	model_free(&m);
	talloc_free(&a);
	env_close(&e);
}

static int group_setup(void **state)
{
	(void)state;
	if (scratch_dir("cow", g_dir, sizeof(g_dir)))
		return -1;
	g_have_mkfs = have_mkfs_btrfs();
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	sh("rm -rf %s", g_dir);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_iter_range),
		cmocka_unit_test(test_item_limits),
		cmocka_unit_test(test_drop_dirty),
		cmocka_unit_test(test_alloc_failure),
		cmocka_unit_test(test_dirty_rules),
		cmocka_unit_test(test_copy_root),
		cmocka_unit_test(test_copy_root_dirty),
		cmocka_unit_test(test_search_readonly),
		cmocka_unit_test(test_nodes_4k),
		cmocka_unit_test(test_random_4k),
		cmocka_unit_test(test_random_16k),
		cmocka_unit_test(test_random_8k),
		cmocka_unit_test(test_random_32k),
		cmocka_unit_test(test_random_64k),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
