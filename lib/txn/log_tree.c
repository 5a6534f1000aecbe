/* SPDX-License-Identifier: MIT */
/* The fsync log trees of the running transaction: log_tree.h says what they are and when. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "txn/txn.h"
#include "txn/log_tree.h"

/* A list of log block addresses. */
struct addrs {
	uint64_t *a;
	size_t n, cap;
};

struct log_subvol {
	uint64_t subvol;
	struct ub_root root;
	uint64_t item_bytenr; /* what its ROOT_ITEM in the log root tree says (0: no item yet) */
	uint8_t item_level;
};

struct ub_log_trees {
	uint64_t transid;
	struct ub_tree_alloc ta;
	struct ub_engine *e;
	struct ub_root root;     /* the log root tree (bytenr 0 until the first log tree is made) */
	struct log_subvol *subs;
	size_t nsubs;
	struct addrs live;       /* reserved, in a log tree now (dirty or written) */
	struct addrs stale;      /* written, then replaced: the durable log may still point at them */
	bool synced;             /* the superblock on disk points at a log of this transaction */
	bool failed;             /* a sync failed: the transaction must commit instead */
	int error;               /* the first callback failure */
};

static int addrs_add(struct addrs *l, uint64_t v)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;
		uint64_t *a = realloc(l->a, cap * sizeof(*a));

		if (!a)
			return -ENOMEM;
		l->a = a;
		l->cap = cap;
	}
	l->a[l->n++] = v;
	return 0;
}

static bool addrs_del(struct addrs *l, uint64_t v)
{
	for (size_t i = 0; i < l->n; i++)
		if (l->a[i] == v) {
			l->a[i] = l->a[--l->n];
			return true;
		}
	return false;
}

static int log_fail(struct ub_log_trees *lg, int ret)
{
	if (ret && !lg->error)
		lg->error = ret;
	return ret;
}

/* ---- the tree layer's callbacks for log trees: space without extent items ---- */

static int log_alloc_block(void *arg, uint64_t root_id, int level, uint64_t *bytenr)
{
	struct ub_log_trees *lg = arg;
	struct ub_engine *e = lg->e;
	uint64_t start;
	int ret = ub_alloc_reserve(e->alloc, BTRFS_BLOCK_GROUP_METADATA, e->fs.vol->nodesize, 0, &start);

	if (ret) {
		if (ret == -ENOSPC)
			ub_err(&e->fs.log, "transaction %llu: no metadata space left for a block of the fsync log",
			       (unsigned long long)lg->transid);
		return log_fail(lg, ret);
	}
	ret = addrs_add(&lg->live, start);
	if (ret) {
		ub_alloc_unreserve(e->alloc, start, e->fs.vol->nodesize);
		return log_fail(lg, ret);
	}
	*bytenr = start;
	return 0;
}

/* A log block leaves its tree: never written, its space is free at once; written, after the next sync. */
static int log_drop(struct ub_log_trees *lg, const struct ub_eb *eb)
{
	struct ub_engine *e = lg->e;

	if (!addrs_del(&lg->live, eb->start)) {
		ub_err(&e->fs.log, "fsync log: block at logical %llu left a log tree it was not in",
		       (unsigned long long)eb->start);
		return log_fail(lg, -EUCLEAN);
	}
	if (!(UB_GET(ub_disk_header, flags, eb->data) & BTRFS_HEADER_FLAG_WRITTEN)) {
		ub_alloc_unreserve(e->alloc, eb->start, e->fs.vol->nodesize);
		return 0;
	}
	return log_fail(lg, addrs_add(&lg->stale, eb->start));
}

static int log_cow_block(void *arg, uint64_t root_id, const struct ub_eb *old, const struct ub_eb *copy,
			 uint64_t parent)
{
	return log_drop(arg, old);
}

static int log_free_block(void *arg, uint64_t root_id, const struct ub_eb *eb, uint64_t parent)
{
	return log_drop(arg, eb);
}

static int log_copy_root(void *arg, uint64_t new_root_id, const struct ub_eb *src, const struct ub_eb *copy)
{
	return -EINVAL; /* logs are never snapshotted */
}

/* ---- the state ---- */

bool ub_log_active(const struct ub_engine *e)
{
	return e->log != NULL;
}

static int log_state(struct ub_txn *t, struct ub_log_trees **out)
{
	struct ub_engine *e = t->e;
	struct ub_log_trees *lg = e->log;

	if (lg && lg->transid != t->transid) {
		/* a log of a transaction that ended without discarding it: a caller bug */
		ub_err(&e->fs.log, "fsync log of transaction %llu met in transaction %llu",
		       (unsigned long long)lg->transid, (unsigned long long)t->transid);
		return -EUCLEAN;
	}
	if (!lg) {
		lg = calloc(1, sizeof(*lg));
		if (!lg)
			return -ENOMEM;
		lg->transid = t->transid;
		lg->e = e;
		lg->ta = (struct ub_tree_alloc){
			.arg = lg,
			.transid = t->transid,
			.alloc_block = log_alloc_block,
			.cow_block = log_cow_block,
			.free_block = log_free_block,
			.copy_root = log_copy_root,
		};
		lg->root.objectid = BTRFS_TREE_LOG_OBJECTID;
		e->log = lg;
	}
	if (lg->failed || lg->error)
		return lg->error ? lg->error : -EIO;
	*out = lg;
	return 0;
}

int ub_log_tree(struct ub_txn *t, uint64_t subvol, struct ub_root **root, struct ub_tree_alloc **ta)
{
	struct ub_log_trees *lg;
	struct log_subvol *s;
	int ret = log_state(t, &lg);

	if (ret)
		return ret;
	for (size_t i = 0; i < lg->nsubs; i++)
		if (lg->subs[i].subvol == subvol) {
			*root = &lg->subs[i].root;
			*ta = &lg->ta;
			return 0;
		}
	if (!lg->root.bytenr) {
		ret = ub_tree_create_root(&t->e->fs.tc, &lg->ta, BTRFS_TREE_LOG_OBJECTID, &lg->root);
		if (ret)
			return log_fail(lg, ret);
	}
	s = realloc(lg->subs, (lg->nsubs + 1) * sizeof(*s));
	if (!s)
		return -ENOMEM;
	lg->subs = s;
	s = &lg->subs[lg->nsubs];
	memset(s, 0, sizeof(*s));
	s->subvol = subvol;
	ret = ub_tree_create_root(&t->e->fs.tc, &lg->ta, BTRFS_TREE_LOG_OBJECTID, &s->root);
	if (ret)
		return log_fail(lg, ret);
	lg->nsubs++;
	*root = &s->root;
	*ta = &lg->ta;
	return 0;
}

/* The log root tree's ROOT_ITEM of every log tree whose root moved since it was written. */
static int write_log_root_items(struct ub_engine *e, struct ub_log_trees *lg)
{
	for (size_t i = 0; i < lg->nsubs; i++) {
		struct log_subvol *s = &lg->subs[i];
		struct ub_key key = { BTRFS_TREE_LOG_OBJECTID, BTRFS_ROOT_ITEM_KEY, s->subvol };
		uint8_t ri[sizeof(struct btrfs_root_item)];
		int ret;

		if (s->item_bytenr == s->root.bytenr && s->item_level == s->root.level)
			continue;
		/* as the kernel fills it: where the tree is, its generation twice, nothing else */
		memset(ri, 0, sizeof(ri));
		UB_SET(btrfs_root_item, generation, ri, lg->transid);
		UB_SET(btrfs_root_item, generation_v2, ri, lg->transid);
		UB_SET(btrfs_root_item, bytenr, ri, s->root.bytenr);
		UB_SET(btrfs_root_item, level, ri, s->root.level);
		if (s->item_bytenr) {
			struct ub_path p;
			uint8_t *d;
			uint32_t size;

			ub_path_init(&p);
			ret = ub_tree_search_slot(&e->fs.tc, &lg->ta, &lg->root, &key, &p, 0, true);
			if (ret == 0) {
				d = ub_path_data_mut(&p, &size);
				if (!d || size != sizeof(ri))
					ret = -EUCLEAN;
				else {
					memcpy(d, ri, sizeof(ri));
					ub_path_mark_dirty(&p);
				}
			} else if (ret > 0) {
				ret = -EUCLEAN;
			}
			ub_path_release(&p);
		} else {
			ret = ub_tree_insert_item(&e->fs.tc, &lg->ta, &lg->root, &key, ri, sizeof(ri));
		}
		if (ret)
			return log_fail(lg, ret);
		s->item_bytenr = s->root.bytenr;
		s->item_level = s->root.level;
	}
	return 0;
}

int ub_log_wait_commits(struct ub_engine *e)
{
	int ret;

	pthread_mutex_lock(&e->commit_lock);
	while (ub_engine_generation(e) < e->sealed && !ub_engine_broken(e))
		pthread_cond_wait(&e->commit_cond, &e->commit_lock);
	ret = ub_engine_broken(e) ? -EROFS : 0;
	pthread_mutex_unlock(&e->commit_lock);
	return ret;
}

int ub_log_sync(struct ub_txn *t)
{
	struct ub_engine *e = t->e;
	struct ub_log_trees *lg;
	struct ub_super_images *ims = NULL;
	struct ub_eb *list = NULL;
	uint8_t sb[UB_SUPER_INFO_SIZE];
	int ret = log_state(t, &lg);

	if (ret)
		return ret;
	if (!lg->root.bytenr)
		return 0; /* nothing logged */
	ret = ub_log_wait_commits(e);
	if (!ret && ub_engine_generation(e) + 1 != lg->transid) {
		ub_err(&e->fs.log, "fsync log of transaction %llu after commit %llu: it must follow the last commit",
		       (unsigned long long)lg->transid, (unsigned long long)ub_engine_generation(e));
		ret = -EUCLEAN;
	}
	if (!ret)
		ret = write_log_root_items(e, lg);
	if (!ret)
		ret = lg->error;
	if (!ret)
		ret = ub_tree_seal_dirty_owner(&e->fs.tc, BTRFS_TREE_LOG_OBJECTID, &list);
	if (!ret) {
		size_t nb = 0;

		for (struct ub_eb *b = list; b; b = b->dirty_next)
			nb++;
		ub_logf(&e->fs.log, UB_LOG_DEBUG, "fsync log of transaction %llu: %zu blocks written",
			(unsigned long long)lg->transid, nb);
		ret = ub_tree_write_sealed(&e->fs.tc, list);
	}
	ub_tree_release_sealed(&e->fs.tc, list, false);
	if (!ret) {
		/* the last commit's superblock, pointing at the log; only the primary copy, as the kernel */
		memcpy(sb, e->fs.vol->super, sizeof(sb));
		UB_SET(ub_disk_super, log_root, sb, lg->root.bytenr);
		UB_SET(ub_disk_super, log_root_level, sb, lg->root.level);
		ret = ub_volume_super_images(e->fs.vol, sb, &ims);
	}
	if (!ret)
		ret = ub_volume_write_super_images_primary(e->fs.vol, ims);
	ub_super_images_free(ims);
	if (ret) {
		ub_err(&e->fs.log, "fsync log of transaction %llu could not be written (%s): a full commit follows",
		       (unsigned long long)lg->transid, strerror(-ret));
		lg->failed = true;
		return ret;
	}
	lg->synced = true;
	/*
	 * RAID5/6: the data the log points at was written into stripes this
	 * transaction opened; a later write into the rest of them would rewrite
	 * their parity, a write hole under durable data. They close as at a
	 * commit (fsync.c logs only where the log's own blocks are not striped
	 * with parity).
	 */
	ub_alloc_close_stripes(e->alloc);
	/* what the durable log no longer points at is free again (nothing on disk reaches it) */
	for (size_t i = 0; i < lg->stale.n; i++)
		ub_alloc_unreserve(e->alloc, lg->stale.a[i], e->fs.vol->nodesize);
	lg->stale.n = 0;
	return 0;
}

/* ---- what changed in each file (ub_log_note) ---- */

struct mark {
	uint64_t subvol, ino;
	bool logged, whole;
	bool relog;         /* logged, then a name of it changed: on ub_log_take_relog's list */
	size_t n, cap;
	struct { uint64_t s, e; } *r;
};

struct ub_log_marks {
	struct mark **slot; /* open addressing, linear probing; NULL empty */
	size_t cap, used;
	bool lost;          /* a note could not be kept: every file is logged whole */
	struct ub_log_inode *relog; /* logged inodes whose names changed since */
	size_t nrelog, caprelog;
	bool relog_lost;    /* one could not be listed: the next fsync commits */
};

static size_t mark_hash(uint64_t subvol, uint64_t ino, size_t cap)
{
	uint64_t h = (ino * 0x9e3779b97f4a7c15ULL) ^ (subvol * 0xc2b2ae3d27d4eb4fULL);

	return (size_t)(h ^ (h >> 29)) & (cap - 1);
}

static struct mark *mark_find(struct ub_log_marks *m, uint64_t subvol, uint64_t ino, bool make)
{
	size_t i;

	if (m->cap && m->used * 2 < m->cap) {
		for (i = mark_hash(subvol, ino, m->cap); m->slot[i]; i = (i + 1) & (m->cap - 1))
			if (m->slot[i]->subvol == subvol && m->slot[i]->ino == ino)
				return m->slot[i];
		if (!make)
			return NULL;
	} else if (m->cap) {
		/* grow: every mark moves to a table twice the size */
		size_t ncap = m->cap * 2;
		struct mark **ns = calloc(ncap, sizeof(*ns));

		if (!ns)
			return NULL;
		for (size_t j = 0; j < m->cap; j++)
			if (m->slot[j]) {
				for (i = mark_hash(m->slot[j]->subvol, m->slot[j]->ino, ncap); ns[i]; i = (i + 1) & (ncap - 1))
					;
				ns[i] = m->slot[j];
			}
		free(m->slot);
		m->slot = ns;
		m->cap = ncap;
		return mark_find(m, subvol, ino, make);
	} else {
		if (!make)
			return NULL;
		m->slot = calloc(256, sizeof(*m->slot));
		if (!m->slot)
			return NULL;
		m->cap = 256;
		return mark_find(m, subvol, ino, make);
	}
	{
		struct mark *k = calloc(1, sizeof(*k));

		if (!k)
			return NULL;
		k->subvol = subvol;
		k->ino = ino;
		m->slot[i] = k;
		m->used++;
		return k;
	}
}

void ub_log_note(struct ub_txn *t, uint64_t subvol, uint64_t ino, uint64_t start, uint64_t end)
{
	struct ub_engine *e = t->e;
	struct ub_log_marks *m = e->marks;
	struct mark *k;
	size_t i, j;

	if (!m) {
		m = e->marks = calloc(1, sizeof(*m));
		if (!m)
			return; /* no marks at all: ub_log_take says whole */
	}
	if (m->lost)
		return;
	k = mark_find(m, subvol, ino, true);
	if (!k) {
		m->lost = true;
		return;
	}
	if (k->whole)
		return;
	if (start >= end)
		return;
	/* merge with every range it touches, keeping the list sorted */
	for (i = 0; i < k->n && k->r[i].e < start; i++)
		;
	for (j = i; j < k->n && k->r[j].s <= end; j++) {
		if (k->r[j].s < start)
			start = k->r[j].s;
		if (k->r[j].e > end)
			end = k->r[j].e;
	}
	if (j > i) {
		k->r[i].s = start;
		k->r[i].e = end;
		memmove(&k->r[i + 1], &k->r[j], (k->n - j) * sizeof(k->r[0]));
		k->n -= j - i - 1;
		return;
	}
	if (k->n == k->cap) {
		size_t cap = k->cap ? k->cap * 2 : 4;
		void *r = realloc(k->r, cap * sizeof(k->r[0]));

		if (!r || cap > 4096) {
			/* too scattered to be worth ranges: the whole file */
			free(r);
			k->r = NULL;
			k->n = k->cap = 0;
			k->whole = true;
			return;
		}
		k->r = r;
		k->cap = cap;
	}
	memmove(&k->r[i + 1], &k->r[i], (k->n - i) * sizeof(k->r[0]));
	k->r[i].s = start;
	k->r[i].e = end;
	k->n++;
}

void ub_log_note_names(struct ub_txn *t, uint64_t subvol, uint64_t ino)
{
	struct ub_log_marks *m = t->e->marks;
	struct mark *k = m ? mark_find(m, subvol, ino, false) : NULL;

	if (!k || !k->logged || k->relog)
		return;
	if (m->nrelog == m->caprelog) {
		size_t cap = m->caprelog ? m->caprelog * 2 : 16;
		void *v = realloc(m->relog, cap * sizeof(m->relog[0]));

		if (!v) {
			m->relog_lost = true;
			return;
		}
		m->relog = v;
		m->caprelog = cap;
	}
	m->relog[m->nrelog++] = (struct ub_log_inode){ subvol, ino };
	k->relog = true;
}

int ub_log_take_relog(struct ub_txn *t, struct ub_log_inode **list, size_t *n)
{
	struct ub_log_marks *m = t->e->marks;

	*list = NULL;
	*n = 0;
	if (!m)
		return 0;
	if (m->relog_lost)
		return -ENOMEM;
	for (size_t i = 0; i < m->nrelog; i++) {
		struct mark *k = mark_find(m, m->relog[i].subvol, m->relog[i].ino, false);

		if (k)
			k->relog = false;
	}
	*list = m->relog;
	*n = m->nrelog;
	m->relog = NULL;
	m->nrelog = m->caprelog = 0;
	return 0;
}

int ub_log_take(struct ub_txn *t, uint64_t subvol, uint64_t ino, struct ub_log_changes *out)
{
	struct ub_log_marks *m = t->e->marks;
	struct mark *k;

	memset(out, 0, sizeof(*out));
	if (!m)
		m = t->e->marks = calloc(1, sizeof(*m));
	k = m && !m->lost ? mark_find(m, subvol, ino, true) : NULL;
	if (!k) {
		out->whole = true;
		return 0;
	}
	out->logged = k->logged;
	out->whole = k->whole;
	if (k->n) {
		out->r = malloc(k->n * sizeof(out->r[0]));
		if (!out->r) {
			out->whole = true;
		} else {
			memcpy(out->r, k->r, k->n * sizeof(out->r[0]));
			out->n = k->n;
		}
	}
	k->n = 0;
	k->whole = false;
	k->logged = true;
	return 0;
}

void ub_log_changes_free(struct ub_log_changes *c)
{
	free(c->r);
	memset(c, 0, sizeof(*c));
}

static void marks_forget(struct ub_engine *e)
{
	struct ub_log_marks *m = e->marks;

	if (!m)
		return;
	for (size_t i = 0; i < m->cap; i++)
		if (m->slot[i]) {
			free(m->slot[i]->r);
			free(m->slot[i]);
		}
	free(m->slot);
	free(m->relog);
	free(m);
	e->marks = NULL;
}

static void log_forget(struct ub_engine *e)
{
	struct ub_log_trees *lg = e->log;

	if (!lg)
		return;
	free(lg->live.a);
	free(lg->stale.a);
	free(lg->subs);
	free(lg);
	e->log = NULL;
}

int ub_log_discard(struct ub_engine *e, bool *synced)
{
	struct ub_log_trees *lg = e->log;
	uint32_t ns = e->fs.vol->nodesize;
	int ret = 0;

	*synced = false;
	if (!lg) {
		marks_forget(e); /* the next transaction notes its own changes */
		return 0;
	}
	*synced = lg->synced;
	ub_tree_drop_dirty_owner(&e->fs.tc, BTRFS_TREE_LOG_OBJECTID);
	/*
	 * Free on disk after this commit (the log had no extent items), but the
	 * superblock on disk may point at the log until this commit's is durable:
	 * pinned until then, as the commit's own frees are.
	 */
	for (int pass = 0; pass < 2; pass++) {
		struct addrs *l = pass ? &lg->stale : &lg->live;

		for (size_t i = 0; i < l->n; i++) {
			int r;

			ub_alloc_unreserve(e->alloc, l->a[i], ns);
			r = ub_alloc_pin(e->alloc, l->a[i], ns);
			if (r && !ret)
				ret = r;
		}
	}
	log_forget(e);
	marks_forget(e);
	return ret;
}

void ub_log_abort(struct ub_engine *e)
{
	struct ub_log_trees *lg = e->log;

	marks_forget(e);
	if (!lg)
		return;
	/*
	 * The reservations go back with the transaction's (ub_alloc_abort). A
	 * log already on disk must keep its blocks until a superblock without it
	 * is durable, which the aborted transaction cannot give: as the kernel's
	 * abort, the filesystem becomes read-only.
	 */
	if (lg->synced) {
		int none = 0;

		ub_err(&e->fs.log, "transaction %llu aborted after its fsync log was written: read-only from now on "
		       "(the next mount replays the log)", (unsigned long long)lg->transid);
		__atomic_compare_exchange_n(&e->broken, &none, -EROFS, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
	}
	log_forget(e);
}

void ub_log_free(struct ub_engine *e)
{
	log_forget(e);
	marks_forget(e);
}
