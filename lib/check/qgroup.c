/* SPDX-License-Identifier: MIT */
/*
 * The quota tree's counts against what the trees hold. A qgroup of level 0
 * is a subvolume: it refers to every tree block and data extent its tree
 * reaches, and holds exclusively those no other subvolume reaches. A qgroup
 * of a higher level refers to what any of its member subvolumes reaches and
 * holds what only its members reach. So each block and extent is reduced to
 * the set of subvolumes that reach it, bytes are summed per distinct set
 * (there are few: a subvolume and the snapshots sharing with it), and each
 * qgroup's two counts come from the sums of the sets it meets or contains.
 *
 * The set of a tree block is the union of its parents' sets (a root item's
 * pointer gives the subvolume itself); a data extent's is the union of the
 * sets of the leaves whose file extent items point at it. The sets are
 * interned, a block remembers its set's number, so each block is looked at
 * once. Counts are only compared when the quota tree says they are kept up
 * to date (quotas on, no rescan running, not marked inconsistent, written at
 * the current generation, full accounting rather than simple quotas) and
 * every tree and the extent tree were read whole.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check/chunks.h"

#define QG_SIMPLE_MODE (1ULL << 3) /* the status flag of simple quotas (newer than the UAPI header) */
#define QG_LEVEL(id) ((id) >> 48)
#define QG_ID(id) ((id) & ((1ULL << 48) - 1))
#define MEMO_BUSY UINT32_MAX

struct qg_info {
	struct ub_key key;
	uint64_t rfer, excl;
};

struct qg_rel {
	uint64_t child, parent;
};

struct qg_set {
	size_t off;   /* into pool */
	uint32_t n;   /* subvolumes in it, sorted */
	uint64_t bytes;
};

struct chk_qgroups {
	struct qg_info *info;
	size_t ninfo, info_cap;
	struct qg_rel *rel;
	size_t nrel, rel_cap;
	bool have_status, counts_kept;
	/* the interned sets of subvolumes; set 0 is the empty one */
	uint64_t *pool;
	size_t npool, pool_cap;
	struct qg_set *sets;
	size_t nsets, sets_cap;
	uint32_t *hash; /* open addressing: set number + 1, 0 free */
	size_t hash_cap;
	uint32_t *memo; /* per block of c->blocks: set number + 1, 0 not yet, MEMO_BUSY being worked out */
	uint64_t *tmp;
	size_t tmp_cap;
	uint32_t nodesize;
	bool nomem, data_done;
};

struct qscan {
	struct cstate s; /* first: chk_scan_tree hands it back */
	struct chk_qgroups *q;
};

static bool is_subvol(uint64_t id)
{
	return id == BTRFS_FS_TREE_OBJECTID || (id >= BTRFS_FIRST_FREE_OBJECTID && id <= BTRFS_LAST_FREE_OBJECTID);
}

static void where_quota(struct ub_chk_problem *p, const struct ub_key *k)
{
	chk_where(p, BTRFS_QUOTA_TREE_OBJECTID, k, 0);
	p->cls = UB_CHK_QGROUP;
}

static int quota_item(struct cstate *s, const struct ub_key *k, const uint8_t *d, uint32_t size)
{
	struct chk_qgroups *q = ((struct qscan *)s)->q;

	switch (k->type) {
	case BTRFS_QGROUP_STATUS_KEY: {
		uint64_t flags, gen;

		/* the tree checker has rejected a status item of another size */
		if (size < sizeof(struct btrfs_qgroup_status_item))
			return 0;
		flags = UB_GET(btrfs_qgroup_status_item, flags, d);
		gen = UB_GET(btrfs_qgroup_status_item, generation, d);
		q->have_status = true;
		/* the kernel itself treats a status of another generation as inconsistent on mount */
		q->counts_kept = (flags & BTRFS_QGROUP_STATUS_FLAG_ON) &&
				 !(flags & (BTRFS_QGROUP_STATUS_FLAG_RESCAN | BTRFS_QGROUP_STATUS_FLAG_INCONSISTENT |
					    QG_SIMPLE_MODE)) &&
				 gen == s->c->super_generation;
		return 0;
	}
	case BTRFS_QGROUP_INFO_KEY:
		if (size < sizeof(struct btrfs_qgroup_info_item))
			return 0;
		if (chk_reserve(&q->info, &q->info_cap, q->ninfo, sizeof(*q->info), 16))
			return -ENOMEM;
		q->info[q->ninfo++] = (struct qg_info){ .key = *k, .rfer = UB_GET(btrfs_qgroup_info_item, rfer, d),
							.excl = UB_GET(btrfs_qgroup_info_item, excl, d) };
		return 0;
	case BTRFS_QGROUP_RELATION_KEY:
		/* each relation is kept twice, once under each end; the lower level is the member */
		if (QG_LEVEL(k->objectid) >= QG_LEVEL(k->offset))
			return 0;
		if (chk_reserve(&q->rel, &q->rel_cap, q->nrel, sizeof(*q->rel), 16))
			return -ENOMEM;
		q->rel[q->nrel++] = (struct qg_rel){ k->objectid, k->offset };
		return 0;
	default:
		return 0;
	}
}

static void note(const struct ub_checker *c, const char *why)
{
	if (c->opts.verbosity >= UB_LOG_INFO)
		fprintf(stderr, "ubtrfs: note: qgroup counts not verified: %s\n", why);
}

int chk_qgroup_begin(struct ub_checker *c, struct ub_fs *fs)
{
	struct qscan qs = { .s = { .c = c, .fs = fs, .scan_cls = UB_CHK_QGROUP } };
	struct ub_key from = { 0, 0, 0 };
	struct ub_chk_problem p;
	struct ub_volume_info vi;
	struct ub_root r;
	int ret;

	if (ub_fs_tree_root(fs, BTRFS_QUOTA_TREE_OBJECTID, &r))
		return 0; /* no quotas (an unreadable root item is the root pass's to say) */
	qs.q = calloc(1, sizeof(*qs.q));
	if (!qs.q)
		return -ENOMEM;
	c->qg = qs.q;
	ret = chk_scan_tree(&qs.s, BTRFS_QUOTA_TREE_OBJECTID, &from, quota_item);
	if (ret < 0)
		return ret;
	if (ret == 0 && !qs.q->have_status) {
		where_quota(&p, NULL);
		chk_report(c, &p, "the quota tree has no QGROUP_STATUS item");
	}
	if (ret || !qs.q->counts_kept || (UB_GET(ub_disk_super, incompat_flags, ub_volume_super(ub_fs_volume(fs))) &
					  BTRFS_FEATURE_INCOMPAT_SIMPLE_QUOTA)) {
		note(c, ret ? "the quota tree could not be read whole"
			    : "quotas are off, being rescanned, marked inconsistent or simple");
		chk_qgroup_free(c);
		return 0;
	}
	if (!c->walk_complete || c->dropped_roots) {
		note(c, c->walk_complete ? "a deleted subvolume is partly dropped" : "not every tree was read whole");
		chk_qgroup_free(c);
		return 0;
	}
	ret = ub_volume_get_info(ub_fs_volume(fs), &vi);
	if (ret)
		return ret;
	qs.q->nodesize = vi.nodesize;
	qs.q->memo = calloc(c->blocks.n ? c->blocks.n : 1, sizeof(*qs.q->memo));
	qs.q->sets = calloc(16, sizeof(*qs.q->sets));
	if (!qs.q->memo || !qs.q->sets)
		return -ENOMEM;
	qs.q->sets_cap = 16;
	qs.q->nsets = 1; /* the empty set */
	return 0;
}

/* ---- interned sets of subvolumes ---- */

static uint64_t set_hash(const uint64_t *v, uint32_t n)
{
	uint64_t h = 1469598103934665603ULL;

	for (uint32_t i = 0; i < n; i++)
		h = (h ^ v[i]) * 1099511628211ULL;
	return h ^ (h >> 29);
}

static int rehash(struct chk_qgroups *q)
{
	size_t cap = q->hash_cap ? q->hash_cap * 2 : 64;
	uint32_t *h = calloc(cap, sizeof(*h));

	if (!h)
		return -ENOMEM;
	for (size_t i = 1; i < q->nsets; i++) {
		size_t at = set_hash(q->pool + q->sets[i].off, q->sets[i].n) & (cap - 1);

		while (h[at])
			at = (at + 1) & (cap - 1);
		h[at] = (uint32_t)i + 1;
	}
	free(q->hash);
	q->hash = h;
	q->hash_cap = cap;
	return 0;
}

/* The number of the set v[0..n) (sorted, no repeats); 0 on failure (q->nomem). */
static uint32_t intern(struct chk_qgroups *q, const uint64_t *v, uint32_t n)
{
	size_t at;

	if (!n)
		return 0;
	if ((q->nsets + 1) * 2 > q->hash_cap && rehash(q))
		goto nomem;
	at = set_hash(v, n) & (q->hash_cap - 1);
	for (; q->hash[at]; at = (at + 1) & (q->hash_cap - 1)) {
		const struct qg_set *s = &q->sets[q->hash[at] - 1];

		if (s->n == n && !memcmp(q->pool + s->off, v, n * sizeof(*v)))
			return q->hash[at] - 1;
	}
	if (q->nsets >= UINT32_MAX - 1 || chk_reserve(&q->sets, &q->sets_cap, q->nsets, sizeof(*q->sets), 16) ||
	    chk_reserve(&q->pool, &q->pool_cap, q->npool + n - 1, sizeof(*q->pool), 64))
		goto nomem;
	/* the pool may have moved: v points into q->tmp or the caller's, never into the pool */
	memcpy(q->pool + q->npool, v, n * sizeof(*v));
	q->sets[q->nsets] = (struct qg_set){ .off = q->npool, .n = n };
	q->npool += n;
	q->hash[at] = (uint32_t)q->nsets + 1;
	return (uint32_t)q->nsets++;
nomem:
	q->nomem = true;
	return 0;
}

static uint32_t set_union(struct chk_qgroups *q, uint32_t a, uint32_t b)
{
	const struct qg_set *sa = &q->sets[a], *sb = &q->sets[b];
	const uint64_t *va, *vb;
	uint32_t i = 0, j = 0, n = 0;

	if (a == b || !b)
		return a;
	if (!a)
		return b;
	if (chk_reserve(&q->tmp, &q->tmp_cap, (size_t)sa->n + sb->n - 1, sizeof(*q->tmp), 64)) {
		q->nomem = true;
		return 0;
	}
	va = q->pool + sa->off;
	vb = q->pool + sb->off;
	while (i < sa->n || j < sb->n) {
		if (j == sb->n || (i < sa->n && va[i] < vb[j]))
			q->tmp[n++] = va[i++];
		else if (i == sa->n || vb[j] < va[i])
			q->tmp[n++] = vb[j++];
		else {
			q->tmp[n++] = va[i++];
			j++;
		}
	}
	return intern(q, q->tmp, n);
}

/* The subvolumes that reach the block at c->blocks.v[idx]. */
static uint32_t block_set(struct ub_checker *c, size_t idx, unsigned depth)
{
	struct chk_qgroups *q = c->qg;
	const struct chk_edge *e;
	uint32_t acc = 0;
	size_t n;

	/* a pointer back up the path (a loop the tree pass has reported) adds nothing */
	if (q->memo[idx] == MEMO_BUSY || depth > UB_MAX_LEVEL + 1)
		return 0;
	if (q->memo[idx])
		return q->memo[idx] - 1;
	q->memo[idx] = MEMO_BUSY;
	e = chk_edges_of(c, c->blocks.v[idx].addr, &n);
	for (size_t i = 0; i < n && !q->nomem; i++) {
		uint32_t s = 0;

		if (!e[i].parent) {
			if (is_subvol(e[i].tree))
				s = intern(q, &e[i].tree, 1);
		} else {
			const struct chk_block *b = chk_block_at(c, e[i].parent);

			if (b)
				s = block_set(c, (size_t)(b - c->blocks.v), depth + 1);
		}
		acc = set_union(q, acc, s);
	}
	q->memo[idx] = acc + 1;
	return acc;
}

void chk_qgroup_data(struct ub_checker *c, uint64_t bytenr, uint64_t len, const struct chk_fext *f, size_t n)
{
	struct chk_qgroups *q = c->qg;
	uint32_t acc = 0;

	(void)bytenr;
	if (!q || q->nomem)
		return;
	for (size_t i = 0; i < n && !q->nomem; i++) {
		const struct chk_block *b = chk_block_at(c, f[i].leaf);

		if (b)
			acc = set_union(q, acc, block_set(c, (size_t)(b - c->blocks.v), 0));
	}
	if (acc)
		q->sets[acc].bytes += len;
}

void chk_qgroup_data_done(struct ub_checker *c)
{
	if (c->qg)
		c->qg->data_done = true;
}

/* ---- the verdicts ---- */

static int u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * The subvolumes (level-0 ids, sorted) under qgroup `id`, following member
 * relations down; *n of them in a malloc'd array, NULL on failure.
 */
static uint64_t *members(const struct chk_qgroups *q, uint64_t id, size_t *n)
{
	size_t cap = 8, nstack = 1, nout = 0, steps = 0;
	uint64_t *stack = malloc(cap * sizeof(*stack)), *out = malloc(cap * sizeof(*out));
	size_t out_cap = cap;

	if (!stack || !out)
		goto fail;
	stack[0] = id;
	/* a crafted loop of relations ends after as many steps as there are relations */
	while (nstack && steps++ <= q->nrel + 1) {
		uint64_t g = stack[--nstack];

		if (!QG_LEVEL(g)) {
			if (chk_reserve(&out, &out_cap, nout, sizeof(*out), 8))
				goto fail;
			out[nout++] = QG_ID(g);
			continue;
		}
		for (size_t i = 0; i < q->nrel; i++) {
			if (q->rel[i].parent != g)
				continue;
			if (chk_reserve(&stack, &cap, nstack, sizeof(*stack), 8))
				goto fail;
			stack[nstack++] = q->rel[i].child;
		}
	}
	free(stack);
	qsort(out, nout, sizeof(*out), u64_cmp);
	*n = nout;
	return out;
fail:
	free(stack);
	free(out);
	return NULL;
}

static bool member(const uint64_t *m, size_t n, uint64_t id)
{
	return bsearch(&id, m, n, sizeof(*m), u64_cmp) != NULL;
}

static const struct qg_info *info_of(const struct chk_qgroups *q, uint64_t id)
{
	for (size_t i = 0; i < q->ninfo; i++)
		if (q->info[i].key.offset == id)
			return &q->info[i];
	return NULL;
}

static void judge(struct ub_checker *c, const struct qg_info *g)
{
	struct chk_qgroups *q = c->qg;
	uint64_t rfer = 0, excl = 0;
	struct ub_chk_problem p;
	size_t n;
	uint64_t *m = members(q, g->key.offset, &n);

	if (!m) {
		q->nomem = true;
		return;
	}
	for (size_t i = 1; i < q->nsets; i++) {
		const struct qg_set *s = &q->sets[i];
		uint32_t in = 0;

		for (uint32_t j = 0; j < s->n; j++)
			in += member(m, n, q->pool[s->off + j]);
		if (in)
			rfer += s->bytes;
		if (in == s->n)
			excl += s->bytes;
	}
	free(m);
	where_quota(&p, &g->key);
	/* every count of the quota tree was judged whole: the cure sets both from what the trees reach */
	p.fix = UB_CHK_FIX_QGROUP;
	p.want = rfer;
	p.want2 = excl;
	if (g->rfer != rfer)
		chk_report(c, &p, "qgroup %llu/%llu: referenced %llu bytes, its subvolumes reach %llu",
			   (unsigned long long)QG_LEVEL(g->key.offset), (unsigned long long)QG_ID(g->key.offset),
			   (unsigned long long)g->rfer, (unsigned long long)rfer);
	if (g->excl != excl)
		chk_report(c, &p, "qgroup %llu/%llu: exclusive %llu bytes, only its subvolumes reach %llu",
			   (unsigned long long)QG_LEVEL(g->key.offset), (unsigned long long)QG_ID(g->key.offset),
			   (unsigned long long)g->excl, (unsigned long long)excl);
}

void chk_qgroup_end(struct ub_checker *c)
{
	struct chk_qgroups *q = c->qg;
	struct ub_chk_problem p;

	if (!q)
		return;
	if (!q->data_done) {
		note(c, "the extent tree was not read whole");
		chk_qgroup_free(c);
		return;
	}
	for (size_t i = 0; i < c->blocks.n && !q->nomem; i++) {
		uint32_t s = block_set(c, i, 0);

		if (s)
			q->sets[s].bytes += q->nodesize;
	}
	for (size_t i = 0; i < q->ninfo && !q->nomem; i++) {
		judge(c, &q->info[i]);
		c->sum.qgroups++;
	}
	/*
	 * Every subvolume that holds anything has its qgroup: the kernel makes one
	 * with each. A deleted one the cleaner has not dropped yet may have none
	 * (quotas enabled after the delete make qgroups for linked subvolumes only;
	 * btrfs check passes it too).
	 */
	for (size_t i = 1; i < q->nsets && !q->nomem; i++) {
		const struct qg_set *s = &q->sets[i];
		bool dead = false;

		for (size_t j = 0; s->n == 1 && j < c->ndead; j++)
			dead |= c->dead_subvols[j] == q->pool[s->off];
		if (s->n != 1 || dead || info_of(q, q->pool[s->off]))
			continue;
		where_quota(&p, NULL);
		chk_report(c, &p, "subvolume %llu has no qgroup (no QGROUP_INFO 0/%llu)",
			   (unsigned long long)q->pool[s->off], (unsigned long long)q->pool[s->off]);
	}
	if (q->nomem)
		note(c, "out of memory");
	chk_qgroup_free(c);
}

void chk_qgroup_free(struct ub_checker *c)
{
	struct chk_qgroups *q = c->qg;

	if (!q)
		return;
	free(q->info);
	free(q->rel);
	free(q->pool);
	free(q->sets);
	free(q->hash);
	free(q->memo);
	free(q->tmp);
	free(q);
	c->qg = NULL;
}
