/* SPDX-License-Identifier: MIT */
/* Reading tree blocks: every copy is verified before anyone sees it; verified blocks are cached. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include "ubtrfs/tree.h"
#include "tree/tree_check.h"
#include "tree/tree_write.h"
#include "tree/cache.h"

#define HDR(field, p) UB_GET(ub_disk_header, field, p)

static bool is_subvol_tree(uint64_t id)
{
	return id == BTRFS_FS_TREE_OBJECTID ||
	       (id >= BTRFS_FIRST_FREE_OBJECTID && id <= BTRFS_LAST_FREE_OBJECTID) ||
	       id == BTRFS_TREE_RELOC_OBJECTID || id == BTRFS_DATA_RELOC_TREE_OBJECTID;
}

int ub_tree_ctx_init(struct ub_tree_ctx *tc, struct ub_volume *vol, const struct ub_log *log)
{
	struct ub_block_cache *c;
	pthread_mutexattr_t attr;
	int r;

	memset(tc, 0, sizeof(*tc));
	tc->vol = vol;
	tc->log = log ? *log : vol->log;
	memcpy(tc->metadata_uuid, vol->metadata_uuid, UB_FSID_SIZE);
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->hash_bits = 12;
	c->hash = calloc(hash_buckets(c), sizeof(*c->hash));
	c->cache_limit = UB_TREE_CACHE_DEFAULT;
	/* held for a few table operations only: spinning a little beats sleeping in the kernel */
	pthread_mutexattr_init(&attr);
	pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ADAPTIVE_NP);
	r = c->hash ? pthread_mutex_init(&c->lock, &attr) : -1;
	pthread_mutexattr_destroy(&attr);
	if (r) {
		free(c->hash);
		free(c);
		return -ENOMEM;
	}
	tc->cache = c;
	return 0;
}

/* The unreferenced-block list `eb` waits on: leaves and interior nodes apart (cache.h). */
static struct ub_eb **lru_list(struct ub_tree_ctx *tc, const struct ub_eb *eb, struct ub_eb ***tail)
{
	if (ub_eb_level(eb) > 0) {
		*tail = &tc->cache->node_tail;
		return &tc->cache->node_head;
	}
	*tail = &tc->cache->lru_tail;
	return &tc->cache->lru_head;
}

static void lru_unlink(struct ub_tree_ctx *tc, struct ub_eb *eb)
{
	struct ub_eb **tail, **head = lru_list(tc, eb, &tail);

	if (eb->lru_prev)
		eb->lru_prev->lru_next = eb->lru_next;
	else if (*head == eb)
		*head = eb->lru_next;
	if (eb->lru_next)
		eb->lru_next->lru_prev = eb->lru_prev;
	else if (*tail == eb)
		*tail = eb->lru_prev;
	eb->lru_prev = eb->lru_next = NULL;
}

/*
 * The chain of `bytenr`. Block addresses are multiples of the node size, so
 * they are mixed rather than taken modulo: every bucket gets its share.
 */
static size_t addr_hash(uint64_t bytenr, unsigned bits)
{
	return (size_t)(((bytenr >> 12) * 0x9e3779b97f4a7c15ULL) >> (64 - bits));
}

static struct ub_eb **bucket(const struct ub_block_cache *c, uint64_t bytenr)
{
	return &c->hash[addr_hash(bytenr, c->hash_bits)];
}

/* Twice the buckets once there are more blocks than buckets, so chains stay short; a failed allocation keeps the old table. */
static void hash_grow(struct ub_block_cache *c)
{
	unsigned bits = c->hash_bits + 1;
	struct ub_eb **h;

	if (c->nhashed <= hash_buckets(c) || bits > 30)
		return;
	h = calloc((size_t)1 << bits, sizeof(*h));
	if (!h)
		return;
	for (size_t i = 0; i < hash_buckets(c); i++) {
		while (c->hash[i]) {
			struct ub_eb *eb = c->hash[i], **pp = &h[addr_hash(eb->start, bits)];
			c->hash[i] = eb->hnext;
			eb->hnext = *pp;
			*pp = eb;
		}
	}
	free(c->hash);
	c->hash = h;
	c->hash_bits = bits;
}

static void hash_unlink(struct ub_tree_ctx *tc, struct ub_eb *eb)
{
	struct ub_eb **pp = bucket(tc->cache, eb->start);

	while (*pp && *pp != eb)
		pp = &(*pp)->hnext;
	if (*pp) {
		*pp = eb->hnext;
		tc->cache->nhashed--;
	}
	eb->hnext = NULL;
	eb->hashed = false;
}

static void hash_link(struct ub_tree_ctx *tc, struct ub_eb *eb)
{
	struct ub_eb **pp = bucket(tc->cache, eb->start);

	eb->hnext = *pp;
	*pp = eb;
	eb->hashed = true;
	tc->cache->nhashed++;
	hash_grow(tc->cache);
}

/* A buffer for a block: a spare one (cache.h), or a new one. Takes the cache's lock. */
static void *buf_get(struct ub_tree_ctx *tc)
{
	void *b = NULL;

	pthread_mutex_lock(&tc->cache->lock);
	if (tc->cache->spare) {
		b = tc->cache->spare;
		memcpy(&tc->cache->spare, b, sizeof(void *));
		tc->cache->nspare--;
	}
	pthread_mutex_unlock(&tc->cache->lock);
	return b ? b : malloc(tc->vol->nodesize);
}

/* A block's buffer given back. Caller holds cache_lock. */
static void buf_put_locked(struct ub_tree_ctx *tc, void *b)
{
	if (!b)
		return;
	if (tc->cache->nspare >= UB_SPARE_BUFS) {
		free(b);
		return;
	}
	memcpy(b, &tc->cache->spare, sizeof(void *));
	tc->cache->spare = b;
	tc->cache->nspare++;
}

static void buf_put(struct ub_tree_ctx *tc, void *b)
{
	pthread_mutex_lock(&tc->cache->lock);
	buf_put_locked(tc, b);
	pthread_mutex_unlock(&tc->cache->lock);
}

/* Caller holds cache_lock (or is the only thread, at destroy). */
static void eb_free(struct ub_tree_ctx *tc, struct ub_eb *eb)
{
	tc->cache->cached_bytes -= eb->len;
	buf_put_locked(tc, eb->data);
	free(eb);
}

void ub_tree_ctx_destroy(struct ub_tree_ctx *tc)
{
	if (!tc->cache)
		return;
	for (size_t i = 0; i < hash_buckets(tc->cache); i++) {
		struct ub_eb *eb = tc->cache->hash[i];
		while (eb) {
			struct ub_eb *next = eb->hnext;
			eb_free(tc, eb);
			eb = next;
		}
	}
	while (tc->cache->spare) {
		void *b = tc->cache->spare;

		memcpy(&tc->cache->spare, b, sizeof(void *));
		free(b);
	}
	free(tc->cache->hash);
	pthread_mutex_destroy(&tc->cache->lock);
	free(tc->cache);
	tc->cache = NULL;
}

static void evict(struct ub_tree_ctx *tc)
{
	while (tc->cache->cached_bytes > tc->cache->cache_limit && (tc->cache->lru_tail || tc->cache->node_tail)) {
		struct ub_eb *eb = tc->cache->lru_tail ? tc->cache->lru_tail : tc->cache->node_tail;
		lru_unlink(tc, eb);
		hash_unlink(tc, eb);
		eb_free(tc, eb);
	}
}

/* Caller holds cache_lock. */
static void put_locked(struct ub_tree_ctx *tc, struct ub_eb *eb)
{
	struct ub_eb **head, **tail;

	if (--eb->refs > 0)
		return;
	if (!eb->hashed) {
		/* dropped from the cache while someone still held it */
		eb_free(tc, eb);
		return;
	}
	head = lru_list(tc, eb, &tail);
	eb->lru_next = *head;
	eb->lru_prev = NULL;
	if (*head)
		(*head)->lru_prev = eb;
	*head = eb;
	if (!*tail)
		*tail = eb;
	evict(tc);
}

void ub_eb_put_many(struct ub_tree_ctx *tc, struct ub_eb *const *ebs, int n)
{
	int i = 0;

	while (i < n && !ebs[i])
		i++;
	if (i == n)
		return;
	pthread_mutex_lock(&tc->cache->lock);
	for (; i < n; i++)
		if (ebs[i])
			put_locked(tc, ebs[i]);
	pthread_mutex_unlock(&tc->cache->lock);
}

void ub_eb_put(struct ub_tree_ctx *tc, struct ub_eb *eb)
{
	if (!eb)
		return;
	pthread_mutex_lock(&tc->cache->lock);
	put_locked(tc, eb);
	pthread_mutex_unlock(&tc->cache->lock);
}

void ub_tree_set_cache_limit(struct ub_tree_ctx *tc, uint64_t bytes)
{
	pthread_mutex_lock(&tc->cache->lock);
	tc->cache->cache_limit = bytes;
	evict(tc);
	pthread_mutex_unlock(&tc->cache->lock);
}

void ub_tree_cache_stats(struct ub_tree_ctx *tc, struct ub_tree_cache_stats *out)
{
	pthread_mutex_lock(&tc->cache->lock);
	out->hits = tc->cache->hits;
	out->misses = tc->cache->misses;
	out->bytes = tc->cache->cached_bytes;
	out->limit = tc->cache->cache_limit;
	out->dirty = tc->ndirty;
	pthread_mutex_unlock(&tc->cache->lock);
}

const char *ub_tree_name(uint64_t id, char *buf, size_t len)
{
	const char *n = id ? ub_objectid_name(id) : "unknown";
	if (n)
		snprintf(buf, len, "%s", n);
	else
		snprintf(buf, len, "%llu", (unsigned long long)id);
	return buf;
}

static void key_str(const struct ub_key *k, char *buf, size_t len)
{
	snprintf(buf, len, "(%llu %u %llu)", (unsigned long long)k->objectid, k->type, (unsigned long long)k->offset);
}

/*
 * What a block must be whoever points at it; the reason goes into `why`.
 * any_gen: a repair's salvaged block (below), whose generation the
 * transaction that lets it in replaces, may be from the future.
 */
static int verify_block(struct ub_tree_ctx *tc, const uint8_t *buf, uint64_t bytenr, bool any_gen, char *why,
			size_t whylen)
{
	struct ub_volume *vol = tc->vol;
	uint8_t csum[UB_CSUM_SIZE_MAX];
	struct ub_check_ctx cctx;
	uint64_t gen = HDR(generation, buf);
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
	/* log trees are written one transaction ahead of the superblock */
	if (gen > vol->generation + 1 && !any_gen) {
		snprintf(why, whylen, "generation %llu is newer than the filesystem's %llu", (unsigned long long)gen,
			 (unsigned long long)vol->generation);
		return -EUCLEAN;
	}
	cctx.nodesize = vol->nodesize;
	cctx.sectorsize = vol->sectorsize;
	cctx.csum_size = vol->csum_size;
	cctx.incompat_flags = UB_GET(ub_disk_super, incompat_flags, vol->super);
	cctx.owner = HDR(owner, buf);
	if (ub_tree_check_block(buf, &cctx, why, whylen))
		return -EUCLEAN;
	return 0;
}

static int verify_intrinsic(struct ub_tree_ctx *tc, const uint8_t *buf, uint64_t bytenr, char *why, size_t whylen)
{
	return verify_block(tc, buf, bytenr, false, why, whylen);
}

/*
 * ---- blocks a repair salvaged (tree_priv.h) ---- a short list for the whole
 * process, filled only by lib/repair before it opens its engine and emptied
 * after: no other reader ever meets an entry, since none is there while it runs.
 */
struct salvaged {
	uint8_t fsid[UB_FSID_SIZE];
	uint64_t bytenr;
	uint8_t *buf;
	uint32_t len;
	struct salvaged *next;
};

static pthread_mutex_t salvage_lock = PTHREAD_MUTEX_INITIALIZER;
static struct salvaged *salvage_list;

int ub_tree_salvage_put(const uint8_t fsid[UB_FSID_SIZE], uint64_t bytenr, const void *buf, uint32_t len)
{
	struct salvaged *s = calloc(1, sizeof(*s));

	if (!s || !(s->buf = malloc(len))) {
		free(s);
		return -ENOMEM;
	}
	memcpy(s->fsid, fsid, UB_FSID_SIZE);
	memcpy(s->buf, buf, len);
	s->bytenr = bytenr;
	s->len = len;
	pthread_mutex_lock(&salvage_lock);
	s->next = salvage_list;
	/* atomic: salvage_get's first look, at every block read, takes no lock */
	__atomic_store_n(&salvage_list, s, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&salvage_lock);
	return 0;
}

void ub_tree_salvage_clear(void)
{
	struct salvaged *s, *next;

	pthread_mutex_lock(&salvage_lock);
	s = salvage_list;
	__atomic_store_n(&salvage_list, NULL, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&salvage_lock);
	for (; s; s = next) {
		next = s->next;
		free(s->buf);
		free(s);
	}
}

/* The salvaged bytes of the block at `bytenr` of this filesystem into buf: true when there are some. */
static bool salvage_get(struct ub_tree_ctx *tc, uint64_t bytenr, uint8_t *buf)
{
	bool found = false;

	if (!__atomic_load_n(&salvage_list, __ATOMIC_RELAXED))
		return false;
	pthread_mutex_lock(&salvage_lock);
	for (struct salvaged *s = salvage_list; s; s = s->next)
		if (s->bytenr == bytenr && s->len == tc->vol->nodesize &&
		    !memcmp(s->fsid, tc->vol->metadata_uuid, UB_FSID_SIZE)) {
			memcpy(buf, s->buf, s->len);
			found = true;
			break;
		}
	pthread_mutex_unlock(&salvage_lock);
	return found;
}

/*
 * What the pointer to the block says it must be. Runs on every access, also
 * for cached blocks: a healthy block reached through a wrong pointer fails
 * here without being any less healthy for its real parent. The block passed
 * verify_intrinsic, so its keys are in order and in bounds.
 */
static int verify_expect(const uint8_t *buf, const struct ub_expect *exp, char *why, size_t whylen)
{
	uint64_t owner = HDR(owner, buf), gen = HDR(generation, buf);
	uint32_t n = (uint32_t)HDR(nritems, buf);
	int level = (int)HDR(level, buf);
	char a[64], b[64], ka[80], kb[80];

	if (!exp)
		return 0;
	/*
	 * The owner first: a block of another tree is the most telling reason.
	 * A relocation tree is a snapshot of its source, whose blocks (its root
	 * too, as older kernels wrote it) it shares: the kernel checks no owner there.
	 */
	if (exp->owner && exp->owner != BTRFS_TREE_RELOC_OBJECTID) {
		/* snapshots share blocks, so a subvolume tree may hold blocks another subvolume wrote */
		bool shared = is_subvol_tree(exp->owner) && !exp->exact_owner;
		bool ok = shared ? is_subvol_tree(owner) : owner == exp->owner;
		if (!ok) {
			snprintf(why, whylen, "owner %s, expected %s%s: a block of another tree",
				 ub_tree_name(owner, a, sizeof(a)), ub_tree_name(exp->owner, b, sizeof(b)),
				 shared ? " or another subvolume" : exp->exact_owner ? " (a root block is its own tree's)" : "");
			return -EUCLEAN;
		}
	}
	if (exp->level >= 0 && level != exp->level) {
		snprintf(why, whylen, "level %d, expected %d", level, exp->level);
		return -EUCLEAN;
	}
	if (exp->generation && gen != exp->generation) {
		snprintf(why, whylen, "generation %llu, expected %llu", (unsigned long long)gen,
			 (unsigned long long)exp->generation);
		return -EUCLEAN;
	}
	if (exp->first_key && n == 0) {
		snprintf(why, whylen, "empty %s below a node", level ? "node" : "leaf");
		return -EUCLEAN;
	}
	if (exp->first_key) {
		struct ub_key k;
		ub_key_read(&k, buf + UB_HEADER_SIZE); /* item and key_ptr both start with the key */
		if (ub_key_cmp(&k, exp->first_key)) {
			key_str(&k, ka, sizeof(ka));
			key_str(exp->first_key, kb, sizeof(kb));
			snprintf(why, whylen, "first key %s does not match the parent's %s", ka, kb);
			return -EUCLEAN;
		}
	}
	if (exp->end_key && n > 0) {
		struct ub_key k;
		uint32_t step = level ? UB_KEY_PTR_SIZE : UB_ITEM_SIZE;
		ub_key_read(&k, buf + UB_HEADER_SIZE + (n - 1) * step);
		if (ub_key_cmp(&k, exp->end_key) >= 0) {
			key_str(&k, ka, sizeof(ka));
			key_str(exp->end_key, kb, sizeof(kb));
			snprintf(why, whylen, "last key %s is not below %s, where the parent's next child starts: "
				 "the block is outside its parent's key range", ka, kb);
			return -EUCLEAN;
		}
	}
	return 0;
}

static bool bad_matches(const struct ub_bad_block *b, uint64_t bytenr, const struct ub_expect *exp)
{
	if (!b->err || b->bytenr != bytenr)
		return false;
	if (b->any)
		return true;
	if (!exp)
		return false;
	return b->owner == exp->owner && b->exact_owner == exp->exact_owner && b->level == exp->level && b->generation == exp->generation &&
	       b->has_first == !!exp->first_key && (!exp->first_key || !ub_key_cmp(&b->first, exp->first_key)) &&
	       b->has_end == !!exp->end_key && (!exp->end_key || !ub_key_cmp(&b->end, exp->end_key));
}

static __thread int quiet_depth;

void ub_tree_quiet(bool on)
{
	quiet_depth += on ? 1 : -1;
}

bool ub_tree_is_quiet(void)
{
	return quiet_depth > 0;
}

static __thread bool repeat_bad;

void ub_tree_repeat_bad(bool on)
{
	repeat_bad = on;
}

static void remember_bad(struct ub_tree_ctx *tc, uint64_t bytenr, const struct ub_expect *exp, bool any, int err,
			 const char *what)
{
	struct ub_bad_block *b;

	/* a quiet probe said nothing, so the next caller must still hear about it */
	if (ub_tree_is_quiet())
		return;
	b = &tc->cache->bad[tc->cache->bad_next++ % 64];
	memset(b, 0, sizeof(*b));
	b->bytenr = bytenr;
	b->err = err;
	snprintf(b->what, sizeof(b->what), "%s", what);
	b->any = any || !exp;
	if (b->any)
		return;
	b->owner = exp->owner;
	b->exact_owner = exp->exact_owner;
	b->level = exp->level;
	b->generation = exp->generation;
	if (exp->first_key) {
		b->has_first = true;
		b->first = *exp->first_key;
	}
	if (exp->end_key) {
		b->has_end = true;
		b->end = *exp->end_key;
	}
}

/* "tree FS_TREE, level 0, slot 3 of node 30425088" */
static void describe_ref(const struct ub_expect *exp, char *buf, size_t len)
{
	char t[64];

	ub_tree_name(exp && exp->owner ? exp->owner : 0, t, sizeof(t));
	if (exp && exp->parent)
		snprintf(buf, len, "tree %s, level %d, slot %d of node %llu", t, exp->level, exp->slot,
			 (unsigned long long)exp->parent);
	else if (exp)
		snprintf(buf, len, "tree %s, level %d, root", t, exp->level);
	else
		snprintf(buf, len, "tree unknown");
}

/*
 * A cached block at `bytenr` that fits `exp`, referenced for the caller: 0 and
 * *out set, 1 if there is none, or -EUCLEAN for a dirty block the pointer does
 * not fit. Caller holds cache_lock.
 */
static int find_cached(struct ub_tree_ctx *tc, uint64_t bytenr, const struct ub_expect *exp, struct ub_eb **out)
{
	struct ub_eb *eb;
	char why[320], ref[160];

	why[0] = '\0'; /* not "" as an initializer: that zeroes all of it, for every block of every walk */
	for (eb = *bucket(tc->cache, bytenr); eb; eb = eb->hnext) {
		if (eb->start != bytenr)
			continue;
		/* the cached copy was good for some pointer; it still has to fit this one */
		if (verify_expect(eb->data, exp, why, sizeof(why))) {
			/* a block of the running transaction is not on disk yet: nothing else to try */
			if (eb->dirty) {
				describe_ref(exp, ref, sizeof(ref));
				if (!ub_tree_is_quiet())
					ub_err(&tc->log, "tree block at logical %llu (%s, changed in this transaction): "
					       "the pointer is wrong: %s", (unsigned long long)bytenr, ref, why);
				return -EUCLEAN;
			}
			continue;
		}
		if (eb->refs++ == 0)
			lru_unlink(tc, eb);
		*out = eb;
		return 0;
	}
	return 1;
}

/* Say that the read of the block failed (unless quiet), and remember it. */
static void read_failed(struct ub_tree_ctx *tc, uint64_t bytenr, const struct ub_expect *exp, const char *ref, bool any,
			int err, const char *what)
{
	if (!ub_tree_is_quiet())
		ub_err(&tc->log, "tree block at logical %llu (%s): %s", (unsigned long long)bytenr, ref, what);
	pthread_mutex_lock(&tc->cache->lock);
	remember_bad(tc, bytenr, exp, any, err, what);
	pthread_mutex_unlock(&tc->cache->lock);
}

/*
 * Copy `m` of the block read and verified: 0, -EOPNOTSUPP (no such copy),
 * -EIO/-EUCLEAN for a failed read, or the verifiers' error with `why` filled;
 * *pointer_wrong when the copy is whole but not what the pointer expects.
 */
static int read_copy(struct ub_tree_ctx *tc, uint64_t bytenr, int m, const struct ub_expect *exp, uint8_t *buf,
		     char *why, size_t whylen, bool *pointer_wrong)
{
	int r = ub_volume_read(tc->vol, bytenr, tc->vol->nodesize, m, buf);

	*pointer_wrong = false;
	if (r == -EOPNOTSUPP)
		return r;
	if (r) {
		snprintf(why, whylen, "read error: %s", strerror(-r));
		return r == -ERANGE ? -EUCLEAN : r == -ENXIO ? -ENXIO : -EIO;
	}
	r = verify_intrinsic(tc, buf, bytenr, why, whylen);
	if (r)
		return r;
	r = verify_expect(buf, exp, why, whylen);
	*pointer_wrong = r != 0;
	return r;
}

/*
 * The clean cached block at `bytenr` that fits `exp`, with a reference, or NULL.
 * Quiet: a block that does not fit is simply not used.
 */
static struct ub_eb *cached_clean(struct ub_tree_ctx *tc, uint64_t bytenr, const struct ub_expect *exp)
{
	char why[320];
	struct ub_eb *eb;

	pthread_mutex_lock(&tc->cache->lock);
	for (eb = *bucket(tc->cache, bytenr); eb; eb = eb->hnext)
		if (eb->start == bytenr && !eb->dirty && eb->mirror > 0 && !verify_expect(eb->data, exp, why, sizeof(why)))
			break;
	if (eb && eb->refs++ == 0)
		lru_unlink(tc, eb);
	pthread_mutex_unlock(&tc->cache->lock);
	return eb;
}

int ub_tree_check_copies(struct ub_tree_ctx *tc, uint64_t bytenr, const struct ub_expect *exp,
			 void (*bad)(void *arg, int mirror, const char *where, const char *why), void *arg)
{
	struct ub_volume *vol = tc->vol;
	char why[320], where[256];
	int copies = ub_volume_num_copies(vol, bytenr), nbad = 0;
	uint8_t *buf = malloc(vol->nodesize);
	/*
	 * The copy the cache holds was read from its device and verified when it
	 * was cached: it is not read again. Another copy with the same bytes needs
	 * only the pointer's expectations (the checksum and the items are the same);
	 * a copy that differs is verified whole. Both halve what a check of mirrored
	 * metadata reads and checksums.
	 */
	struct ub_eb *held = buf ? cached_clean(tc, bytenr, exp) : NULL;

	if (!buf)
		return -ENOMEM;
	for (int m = 1; m <= copies; m++) {
		bool pointer_wrong;
		int r;

		if (held && m == held->mirror)
			continue;
		if (held && !ub_volume_read(vol, bytenr, vol->nodesize, m, buf) && !memcmp(buf, held->data, vol->nodesize))
			continue;
		r = read_copy(tc, bytenr, m, exp, buf, why, sizeof(why), &pointer_wrong);
		/* no such copy to read here, or a missing device (reported as such elsewhere) */
		if (r == -EOPNOTSUPP || r == -ENXIO)
			continue;
		if (r) {
			ub_volume_describe_copy(vol, bytenr, m, where, sizeof(where));
			bad(arg, m, where, why);
			nbad++;
		}
	}
	ub_eb_put(tc, held);
	free(buf);
	return nbad;
}

/* Publish a verified copy; a copy another thread published meanwhile wins and `eb` goes. Caller holds cache_lock. */
static struct ub_eb *publish(struct ub_tree_ctx *tc, struct ub_eb *eb, const struct ub_expect *exp)
{
	struct ub_eb **pp = bucket(tc->cache, eb->start);
	struct ub_eb *old, *other = NULL;

	if (find_cached(tc, eb->start, exp, &other) == 0) {
		buf_put_locked(tc, eb->data);
		free(eb);
		return other;
	}
	/* a stale entry for the same address (other expectations) is replaced */
	for (old = *pp; old; old = old->hnext)
		if (old->start == eb->start && old->refs == 0)
			break;
	if (old) {
		lru_unlink(tc, old);
		hash_unlink(tc, old);
		eb_free(tc, old);
	}
	hash_link(tc, eb);
	/* every block of a filesystem names the same chunk tree; new blocks copy it */
	if (!tc->have_chunk_tree_uuid) {
		memcpy(tc->chunk_tree_uuid, UB_PTR(ub_disk_header, chunk_tree_uuid, eb->data), UB_UUID_SIZE);
		tc->have_chunk_tree_uuid = true;
	}
	tc->cache->cached_bytes += eb->len;
	return eb;
}

int ub_tree_read_block(struct ub_tree_ctx *tc, uint64_t bytenr, const struct ub_expect *exp, struct ub_eb **out)
{
	struct ub_volume *vol = tc->vol;
	struct ub_eb *eb;
	uint8_t *buf = NULL;
	char why[320], where[256], ref[160];
	int copies, ret = -EIO, bad_mirror = 0, good_mirror = 0;
	bool intrinsic_only = true;

	why[0] = '\0'; /* not "" as an initializer: that zeroes all of it, on every cached read */

	pthread_mutex_lock(&tc->cache->lock);
	ret = find_cached(tc, bytenr, exp, out);
	if (ret <= 0) {
		tc->cache->hits += ret == 0;
		pthread_mutex_unlock(&tc->cache->lock);
		return ret;
	}
	ret = -EIO;
	for (unsigned i = 0; i < 64; i++) {
		if (bad_matches(&tc->cache->bad[i], bytenr, exp)) {
			int err = tc->cache->bad[i].err;
			char what[sizeof(tc->cache->bad[i].what)];

			memcpy(what, tc->cache->bad[i].what, sizeof(what));
			pthread_mutex_unlock(&tc->cache->lock);
			if (repeat_bad && !ub_tree_is_quiet()) {
				describe_ref(exp, ref, sizeof(ref));
				ub_err(&tc->log, "tree block at logical %llu (%s): %s", (unsigned long long)bytenr, ref, what);
			}
			return err;
		}
	}
	tc->cache->misses++;
	pthread_mutex_unlock(&tc->cache->lock);
	describe_ref(exp, ref, sizeof(ref));
	if (bytenr % vol->sectorsize) {
		read_failed(tc, bytenr, exp, ref, true, -EUCLEAN, "not aligned to sectorsize");
		return -EUCLEAN;
	}
	copies = ub_volume_num_copies(vol, bytenr);
	if (copies == 0) {
		/* a pointer into no chunk is corruption, not a missing item */
		read_failed(tc, bytenr, exp, ref, true, -EUCLEAN, "address is not in any chunk");
		return -EUCLEAN;
	}
	buf = buf_get(tc);
	if (!buf)
		return -ENOMEM;
	/*
	 * A block the repair salvaged (no copy on disk passes): its cured bytes
	 * pass every check but the generation's bound, and the pointer's; it is
	 * cached as made in memory (mirror 0), and the repair's copy-on-write
	 * moves it to a new address before the commit.
	 */
	if (salvage_get(tc, bytenr, buf) && !verify_block(tc, buf, bytenr, true, why, sizeof(why)) &&
	    !verify_expect(buf, exp, why, sizeof(why))) {
		good_mirror = 0;
		goto cache;
	}
	for (int m = 1; m <= copies; m++) {
		bool pointer_wrong = false;
		int r = read_copy(tc, bytenr, m, exp, buf, why, sizeof(why), &pointer_wrong);

		if (r == -EOPNOTSUPP)
			continue;
		if (pointer_wrong)
			intrinsic_only = false;
		/* a copy on a missing device is an I/O failure to the caller, as any unreadable copy */
		ret = r == -ENXIO ? -EIO : r;
		if (r == 0) {
			good_mirror = m;
			if (bad_mirror && !ub_tree_is_quiet())
				ub_info(&tc->log, "tree block at logical %llu: read good copy %d", (unsigned long long)bytenr, m);
			break;
		}
		/*
		 * A device already reported missing is not news for every block; a
		 * healthy copy that does not fit the pointer is no news about the
		 * copy: the pointer is said to be wrong once, below.
		 */
		if (!ub_tree_is_quiet() && r != -ENXIO && !pointer_wrong) {
			ub_volume_describe_copy(tc->vol, bytenr, m, where, sizeof(where));
			ub_warn(&tc->log, "tree block at logical %llu (%s): %s: %s", (unsigned long long)bytenr, ref,
				where, why);
		}
		bad_mirror = m;
	}
	if (ret) {
		char what[sizeof(why) + 32];

		if (intrinsic_only)
			snprintf(what, sizeof(what), "no good copy among %d: %s", copies, why);
		else
			snprintf(what, sizeof(what), "the pointer is wrong: %s", why);
		read_failed(tc, bytenr, exp, ref, intrinsic_only, ret, what);
		buf_put(tc, buf);
		return ret;
	}
cache:
	eb = calloc(1, sizeof(*eb));
	if (!eb) {
		buf_put(tc, buf);
		return -ENOMEM;
	}
	eb->start = bytenr;
	eb->len = vol->nodesize;
	eb->data = buf;
	eb->refs = 1;
	eb->mirror = good_mirror;
	pthread_mutex_lock(&tc->cache->lock);
	*out = publish(tc, eb, exp);
	pthread_mutex_unlock(&tc->cache->lock);
	return 0;
}

static struct ub_dev *dev_of(const struct ub_volume *vol, uint64_t devid)
{
	for (int i = 0; i < vol->nvdevs; i++)
		if (vol->vdevs[i].devid == devid)
			return vol->vdevs[i].dev;
	return NULL;
}

/* Which of the children [slot, slot + n) of `parent` are cached already: bit i for slot + i (n <= 64). */
static uint64_t cached_children(struct ub_tree_ctx *tc, const struct ub_eb *parent, int slot, int n)
{
	uint32_t nr = ub_eb_nritems(parent);
	uint64_t mask = 0;

	pthread_mutex_lock(&tc->cache->lock);
	for (int i = 0; i < n && i < 64 && (uint32_t)(slot + i) < nr; i++) {
		uint64_t bytenr = ub_eb_node_blockptr(parent, slot + i);

		for (struct ub_eb *eb = *bucket(tc->cache, bytenr); eb; eb = eb->hnext)
			if (eb->start == bytenr) {
				mask |= 1ULL << i;
				break;
			}
	}
	pthread_mutex_unlock(&tc->cache->lock);
	return mask;
}

/* Advice for copy `mirror` of the children [slot, slot + n) of `parent`, merged into runs per device. */
static void readahead_copy(struct ub_tree_ctx *tc, const struct ub_eb *parent, int slot, int n, int mirror)
{
	struct ub_volume *vol = tc->vol;
	struct ub_dev *run_dev = NULL;
	uint64_t run_start = 0, run_len = 0, cached = 0;
	uint32_t nr = ub_eb_nritems(parent);

	if (slot < 0)
		return;
	if (mirror == 1)
		cached = cached_children(tc, parent, slot, n);
	for (int i = slot; (uint32_t)i < nr && i < slot + n; i++) {
		uint64_t bytenr = ub_eb_node_blockptr(parent, i), devid, phys;
		const struct ub_chunk *c;
		const char *path;
		struct ub_dev *dev;

		/* a hostile pointer is the read's to report; advice for it is just skipped */
		if (mirror == 1 ? (i - slot < 64 && (cached >> (i - slot) & 1)) :
				 !(c = ub_volume_find_chunk(vol, bytenr)) || (c->type & BTRFS_BLOCK_GROUP_RAID56_MASK))
			continue;
		if (ub_volume_map(vol, bytenr, mirror, &devid, &phys, &path))
			continue;
		dev = dev_of(vol, devid);
		if (!dev)
			continue;
		if (dev == run_dev && phys == run_start + run_len) {
			run_len += vol->nodesize;
			continue;
		}
		if (run_dev)
			ub_dev_willneed(run_dev, run_start, run_len);
		run_dev = dev;
		run_start = phys;
		run_len = vol->nodesize;
	}
	if (run_dev)
		ub_dev_willneed(run_dev, run_start, run_len);
}

/*
 * The window this thread asked for last. Lookups of neighbouring keys step
 * over the same leaf boundary again and again; one piece of advice is enough.
 */
static __thread struct {
	const struct ub_tree_ctx *tc;
	uint64_t parent, gen;
	int slot;
} last_ra;

void ub_tree_readahead(struct ub_tree_ctx *tc, const struct ub_eb *parent, int slot, int n)
{
	uint64_t gen = ub_eb_generation(parent);

	if (last_ra.tc == tc && last_ra.parent == parent->start && last_ra.gen == gen && last_ra.slot == slot)
		return;
	last_ra.tc = tc;
	last_ra.parent = parent->start;
	last_ra.gen = gen;
	last_ra.slot = slot;
	readahead_copy(tc, parent, slot, n, 1);
}

void ub_tree_readahead_copies(struct ub_tree_ctx *tc, const struct ub_eb *parent, int slot, int n)
{
	/* mirrored copies only: a RAID5/6 block's other "copies" are rebuilt, not read */
	for (int m = 1; m <= 4; m++)
		readahead_copy(tc, parent, slot, n, m);
}

int ub_block_set_add(struct ub_block_set *s, uint64_t bytenr, uint64_t tag, uint64_t *first_tag)
{
	size_t i;

	if (!bytenr)
		return -EINVAL;
	if ((s->n + 1) * 2 > s->cap) {
		size_t ncap = s->cap ? s->cap * 2 : 256;
		uint64_t *na = calloc(ncap, sizeof(*na)), *nt = calloc(ncap, sizeof(*nt));
		if (!na || !nt) {
			free(na);
			free(nt);
			return -ENOMEM;
		}
		/* address 0 is never a tree block, so it marks a free entry */
		for (size_t j = 0; j < s->cap; j++) {
			if (!s->addr[j])
				continue;
			for (i = addr_hash(s->addr[j], (unsigned)__builtin_ctzll(ncap)); na[i]; i = (i + 1) & (ncap - 1))
				;
			na[i] = s->addr[j];
			nt[i] = s->tag[j];
		}
		free(s->addr);
		free(s->tag);
		s->addr = na;
		s->tag = nt;
		s->cap = ncap;
	}
	for (i = addr_hash(bytenr, (unsigned)__builtin_ctzll(s->cap)); s->addr[i]; i = (i + 1) & (s->cap - 1)) {
		if (s->addr[i] == bytenr) {
			if (first_tag)
				*first_tag = s->tag[i];
			return 1;
		}
	}
	s->addr[i] = bytenr;
	s->tag[i] = tag;
	s->n++;
	return 0;
}

void ub_block_set_free(struct ub_block_set *s)
{
	free(s->addr);
	free(s->tag);
	memset(s, 0, sizeof(*s));
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

/* ---- the write side's blocks: created dirty, written at commit ---- */

static void dirty_link(struct ub_tree_ctx *tc, struct ub_eb *eb)
{
	eb->dirty = true;
	eb->dirty_prev = NULL;
	eb->dirty_next = tc->cache->dirty_head;
	if (tc->cache->dirty_head)
		tc->cache->dirty_head->dirty_prev = eb;
	tc->cache->dirty_head = eb;
	tc->ndirty++;
	eb->refs++; /* the dirty list's: eviction never sees a dirty block */
}

static void dirty_unlink(struct ub_tree_ctx *tc, struct ub_eb *eb)
{
	if (eb->dirty_prev)
		eb->dirty_prev->dirty_next = eb->dirty_next;
	else
		tc->cache->dirty_head = eb->dirty_next;
	if (eb->dirty_next)
		eb->dirty_next->dirty_prev = eb->dirty_prev;
	eb->dirty_prev = eb->dirty_next = NULL;
	eb->dirty = false;
	tc->ndirty--;
}

int ub_tree_new_block(struct ub_tree_ctx *tc, uint64_t bytenr, uint64_t owner, int level, uint64_t transid,
		      struct ub_eb **out)
{
	struct ub_volume *vol = tc->vol;
	struct ub_eb *eb, *old;

	if (!bytenr || bytenr % vol->sectorsize || level < 0 || level >= UB_MAX_LEVEL || !transid) {
		ub_err(&tc->log, "new tree block at logical %llu (level %d, generation %llu): invalid address or level",
		       (unsigned long long)bytenr, level, (unsigned long long)transid);
		return -EINVAL;
	}
	eb = calloc(1, sizeof(*eb));
	if (!eb)
		return -ENOMEM;
	eb->data = buf_get(tc);
	if (!eb->data) {
		free(eb);
		return -ENOMEM;
	}
	/* a new block starts zeroed: what its items do not cover is written as zeros */
	memset(eb->data, 0, vol->nodesize);
	pthread_mutex_lock(&tc->cache->lock);
	for (old = *bucket(tc->cache, bytenr); old; old = old->hnext) {
		if (old->start != bytenr)
			continue;
		if (old->dirty) {
			/* the allocator handed out an address still in use by this transaction */
			pthread_mutex_unlock(&tc->cache->lock);
			ub_err(&tc->log, "new tree block at logical %llu: the address holds a block of the running "
			       "transaction", (unsigned long long)bytenr);
			buf_put(tc, eb->data);
			free(eb);
			return -EEXIST;
		}
	}
	/* a stale copy of what was there before (freed in an earlier transaction) goes */
	for (old = *bucket(tc->cache, bytenr); old;) {
		struct ub_eb *next = old->hnext;
		if (old->start == bytenr) {
			hash_unlink(tc, old);
			if (old->refs == 0) {
				lru_unlink(tc, old);
				eb_free(tc, old);
			}
		}
		old = next;
	}
	eb->start = bytenr;
	eb->len = vol->nodesize;
	eb->refs = 1;
	eb->born = ++tc->births;
	UB_SET(ub_disk_header, bytenr, eb->data, bytenr);
	UB_SET(ub_disk_header, owner, eb->data, owner);
	UB_SET(ub_disk_header, level, eb->data, (uint64_t)level);
	UB_SET(ub_disk_header, generation, eb->data, transid);
	/* not WRITTEN until it is; back references of the mixed revision, as the kernel makes them */
	UB_SET(ub_disk_header, flags, eb->data, UB_MIXED_BACKREF_REV << UB_BACKREF_REV_SHIFT);
	memcpy(eb->data + offsetof(struct ub_disk_header, fsid), tc->metadata_uuid, UB_FSID_SIZE);
	memcpy(eb->data + offsetof(struct ub_disk_header, chunk_tree_uuid), tc->chunk_tree_uuid, UB_UUID_SIZE);
	hash_link(tc, eb);
	dirty_link(tc, eb);
	tc->cache->cached_bytes += eb->len;
	pthread_mutex_unlock(&tc->cache->lock);
	*out = eb;
	return 0;
}

void ub_tree_forget_block(struct ub_tree_ctx *tc, struct ub_eb *eb)
{
	pthread_mutex_lock(&tc->cache->lock);
	if (eb->dirty) {
		dirty_unlink(tc, eb);
		hash_unlink(tc, eb);
		put_locked(tc, eb); /* the dirty list's reference; freed with the last holder's */
	}
	pthread_mutex_unlock(&tc->cache->lock);
}

void ub_tree_forget_unread_block(struct ub_tree_ctx *tc, struct ub_eb *eb)
{
	if (eb->dirty) {
		ub_tree_forget_block(tc, eb);
		return;
	}
	pthread_mutex_lock(&tc->cache->lock);
	/* out of the table: its buffer goes back to the spares with the last holder's reference */
	if (eb->hashed)
		hash_unlink(tc, eb);
	pthread_mutex_unlock(&tc->cache->lock);
}

/* Zero what no item uses, so a block's bytes depend only on its items. */
static void clear_unused(const struct ub_tree_ctx *tc, uint8_t *buf)
{
	uint32_t n = (uint32_t)HDR(nritems, buf), data = tc->vol->nodesize - UB_HEADER_SIZE;
	uint32_t used_end, data_start;

	if (HDR(level, buf)) {
		used_end = n * UB_KEY_PTR_SIZE;
		data_start = data;
	} else {
		used_end = n * UB_ITEM_SIZE;
		data_start = n ? (uint32_t)UB_GET(ub_disk_item, offset, buf + UB_HEADER_SIZE + (n - 1) * UB_ITEM_SIZE)
			       : data;
	}
	if (used_end < data_start && data_start <= data)
		memset(buf + UB_HEADER_SIZE + used_end, 0, data_start - used_end);
}

/* A dirty block made final for the disk: header, unused bytes, the checker's rules, checksum. */
static int seal_block(struct ub_tree_ctx *tc, struct ub_eb *eb)
{
	struct ub_volume *vol = tc->vol;
	uint8_t *buf = eb->data;
	char why[320];
	struct ub_check_ctx cctx = {
		.nodesize = vol->nodesize,
		.sectorsize = vol->sectorsize,
		.csum_size = vol->csum_size,
		.incompat_flags = UB_GET(ub_disk_super, incompat_flags, vol->super),
		.owner = HDR(owner, buf),
	};

	UB_SET(ub_disk_header, bytenr, buf, eb->start);
	memcpy(buf + offsetof(struct ub_disk_header, fsid), tc->metadata_uuid, UB_FSID_SIZE);
	memcpy(buf + offsetof(struct ub_disk_header, chunk_tree_uuid), tc->chunk_tree_uuid, UB_UUID_SIZE);
	UB_SET(ub_disk_header, flags, buf, HDR(flags, buf) | BTRFS_HEADER_FLAG_WRITTEN);
	clear_unused(tc, buf);
	/* what the next reader's checker would refuse must not reach the disk */
	if (ub_tree_check_block(buf, &cctx, why, sizeof(why))) {
		char t[64];
		ub_err(&tc->log, "tree %s: block at logical %llu (level %u) is invalid, not written: %s",
		       ub_tree_name(cctx.owner, t, sizeof(t)), (unsigned long long)eb->start,
		       (unsigned)HDR(level, buf), why);
		return -EUCLEAN;
	}
	memset(buf, 0, UB_CSUM_SIZE_MAX);
	return ub_csum(vol->csum_type, buf + UB_CSUM_SIZE_MAX, vol->nodesize - UB_CSUM_SIZE_MAX, buf);
}

int ub_tree_write_dirty(struct ub_tree_ctx *tc)
{
	struct ub_eb *sealed = NULL;
	int ret = ub_tree_seal_dirty(tc, &sealed);

	if (!ret)
		ret = ub_tree_write_sealed(tc, sealed);
	ub_tree_release_sealed(tc, sealed, ret != 0);
	return ret;
}

int ub_tree_seal_dirty(struct ub_tree_ctx *tc, struct ub_eb **out)
{
	struct ub_eb *list = NULL;
	int ret = 0;

	/* the checks and checksums first, while the blocks are still the running transaction's */
	for (struct ub_eb *eb = tc->cache->dirty_head; eb && !ret; eb = eb->dirty_next)
		ret = seal_block(tc, eb);
	if (ret)
		return ret;
	/*
	 * Off the dirty list, onto the commit's: clean now (WRITTEN set, so the
	 * next transaction copies them before any change), the list's reference
	 * kept until they are on disk.
	 */
	pthread_mutex_lock(&tc->cache->lock);
	while (tc->cache->dirty_head) {
		struct ub_eb *eb = tc->cache->dirty_head;

		dirty_unlink(tc, eb);
		eb->dirty_next = list;
		list = eb;
	}
	pthread_mutex_unlock(&tc->cache->lock);
	*out = list;
	return 0;
}

int ub_tree_seal_dirty_owner(struct ub_tree_ctx *tc, uint64_t owner, struct ub_eb **out)
{
	struct ub_eb *list = NULL, *eb, *next;
	int ret = 0;

	for (eb = tc->cache->dirty_head; eb && !ret; eb = eb->dirty_next)
		if (HDR(owner, eb->data) == owner)
			ret = seal_block(tc, eb);
	if (ret)
		return ret;
	pthread_mutex_lock(&tc->cache->lock);
	for (eb = tc->cache->dirty_head; eb; eb = next) {
		next = eb->dirty_next;
		if (HDR(owner, eb->data) != owner)
			continue;
		dirty_unlink(tc, eb);
		eb->dirty_next = list;
		list = eb;
	}
	pthread_mutex_unlock(&tc->cache->lock);
	*out = list;
	return 0;
}

void ub_tree_drop_dirty_owner(struct ub_tree_ctx *tc, uint64_t owner)
{
	struct ub_eb *eb = tc->cache->dirty_head, *next;

	for (; eb; eb = next) {
		next = eb->dirty_next;
		if (HDR(owner, eb->data) == owner)
			ub_tree_forget_block(tc, eb);
	}
}

int ub_tree_write_sealed(struct ub_tree_ctx *tc, struct ub_eb *list)
{
	for (struct ub_eb *eb = list; eb; eb = eb->dirty_next) {
		int ret = ub_volume_write(tc->vol, eb->start, tc->vol->nodesize, eb->data);

		if (ret) {
			ub_err(&tc->log, "tree block at logical %llu: write failed: %s", (unsigned long long)eb->start,
			       strerror(-ret));
			return ret;
		}
	}
	return 0;
}

void ub_tree_release_sealed(struct ub_tree_ctx *tc, struct ub_eb *list, bool forget)
{
	pthread_mutex_lock(&tc->cache->lock);
	while (list) {
		struct ub_eb *eb = list;

		list = eb->dirty_next;
		eb->dirty_next = NULL;
		/* never on disk: nobody may find it by address any more */
		if (forget)
			hash_unlink(tc, eb);
		put_locked(tc, eb);
	}
	pthread_mutex_unlock(&tc->cache->lock);
}

void ub_tree_drop_dirty(struct ub_tree_ctx *tc)
{
	while (tc->cache->dirty_head)
		ub_tree_forget_block(tc, tc->cache->dirty_head);
}
