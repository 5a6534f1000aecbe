// SPDX-License-Identifier: MIT
/*
 * Views: which state a read sees (fs_priv.h, docs/design.md "Views").
 *
 * A view is a copy of the filesystem's handle (struct ub_fs) that shares
 * everything the filesystem holds (volume, block cache, root table,
 * overlays, decompression workers) and answers "which root does tree X have"
 * its own way:
 *  - the filesystem itself (UB_VIEW_LATEST): the last commit, at each access;
 *  - a pinned view: the commit that was last when it was opened, the same for
 *    every call until it is closed; it is counted among the readers of that
 *    generation, so no block or extent a later commit frees is handed out
 *    again while it reads (reader epochs, lib/tree/roots.h); its roots come
 *    from that commit's root tree, never from the table (which holds the
 *    newest);
 *  - a live view: the engine's running transaction (each tree's live root).
 *    The writer changes those trees in place, so every read call through a
 *    live view holds the filesystem's writer lock for reading.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "fs_priv.h"
#include "tree/roots.h"

/* A pinned view's roots found so far (a view may be read by several threads). */
struct ub_view_roots {
	pthread_mutex_t lock;
	struct ub_root *r;
	size_t n, cap;
};

/*
 * Per thread: the filesystems whose writer lock this thread holds for
 * writing, and how often it took it (a writer may begin an operation inside
 * another one, and commits inside one); and the one it reads a live view of.
 */
#define HELD_MAX 4
static __thread struct {
	const struct ub_fs *base;
	unsigned depth;
} t_held[HELD_MAX];
static __thread const struct ub_fs *t_reading;
static __thread unsigned t_depth;

static int held_slot(const struct ub_fs *base)
{
	for (int i = 0; i < HELD_MAX; i++)
		if (t_held[i].base == base && t_held[i].depth)
			return i;
	return -1;
}

bool ub_fs_live_write_held(const struct ub_fs *base)
{
	return held_slot(base) >= 0;
}

unsigned ub_fs_live_write_depth(const struct ub_fs *base)
{
	int i = held_slot(base);

	return i < 0 ? 0 : t_held[i].depth;
}

int ub_fs_live_write_lock(struct ub_fs *base)
{
	int i = held_slot(base);

	if (i >= 0) {
		t_held[i].depth++;
		return 0;
	}
	for (i = 0; i < HELD_MAX && t_held[i].depth; i++)
		;
	if (i == HELD_MAX)
		return -EDEADLK; /* writing more filesystems at once on one thread than anyone needs */
	pthread_rwlock_wrlock(&base->live_lock);
	t_held[i].base = base;
	t_held[i].depth = 1;
	return 0;
}

void ub_fs_live_write_unlock(struct ub_fs *base)
{
	int i = held_slot(base);

	if (i < 0)
		return;
	if (--t_held[i].depth == 0) {
		t_held[i].base = NULL;
		pthread_rwlock_unlock(&base->live_lock);
	}
}

void ub_fs_live_write_release(struct ub_fs *base)
{
	int i = held_slot(base);

	if (i < 0)
		return;
	t_held[i].depth = 1;
	ub_fs_live_write_unlock(base);
}

/*
 * A call through the handle of a filesystem an engine writes (its LATEST
 * reads) is pinned for its duration: one commit throughout, counted among
 * the readers, so that a commit published in the middle of the call mixes
 * nothing into it and frees nothing it still reads. Per thread, as the call
 * is; nested calls use the outer one's.
 */
#define PIN_ROOTS 16
static __thread struct {
	const struct ub_fs *base;
	unsigned depth;
	uint64_t gen;
	struct ub_root rt, ct;
	struct ub_root roots[PIN_ROOTS];
	int n, next;
} t_pin;

int ub_view_enter(struct ub_fs *fs)
{
	struct ub_fs *b;

	if (fs->view == UB_VIEW_LATEST) {
		if (!fs->opts.writable || fs->base)
			return 0; /* nothing writes it: each access reads the one commit there is */
		if (t_pin.depth) {
			if (t_pin.base != fs)
				return 0; /* inside a call on another filesystem: not nested here */
			t_pin.depth++;
			return 2;
		}
		if (ub_roots_reader_enter(fs->roots, fs->root_tree, fs->chunk_tree, &t_pin.gen, &t_pin.rt, &t_pin.ct))
			return 0; /* no memory to count it: unpinned, as a read-only filesystem's calls */
		t_pin.base = fs;
		t_pin.depth = 1;
		t_pin.n = t_pin.next = 0;
		return 2;
	}
	if (fs->view != UB_VIEW_LIVE)
		return 0;
	b = ub_fs_base(fs);
	if (ub_fs_live_write_held(b))
		return 0;
	if (t_depth && t_reading == b) {
		t_depth++;
		return 1;
	}
	if (t_depth)
		return 0; /* reading another filesystem's live view already: not nested here */
	pthread_rwlock_rdlock(&b->live_lock);
	t_reading = b;
	t_depth = 1;
	return 1;
}

void ub_view_exit(struct ub_fs *fs, int entered)
{
	if (entered == 2) {
		if (--t_pin.depth == 0) {
			ub_roots_reader_exit(fs->roots, t_pin.gen);
			t_pin.base = NULL;
		}
		return;
	}
	if (!entered)
		return;
	if (--t_depth == 0) {
		t_reading = NULL;
		pthread_rwlock_unlock(&ub_fs_base(fs)->live_lock);
	}
}

int ub_view_call_root(struct ub_fs *fs, uint64_t objectid, struct ub_root *out)
{
	int ret;

	if (!t_pin.depth || t_pin.base != fs)
		return 1;
	if (objectid == BTRFS_ROOT_TREE_OBJECTID || objectid == BTRFS_CHUNK_TREE_OBJECTID) {
		*out = objectid == BTRFS_ROOT_TREE_OBJECTID ? t_pin.rt : t_pin.ct;
		return out->bytenr ? 0 : -ENOENT;
	}
	for (int i = 0; i < t_pin.n; i++)
		if (t_pin.roots[i].objectid == objectid) {
			*out = t_pin.roots[i];
			return out->bytenr ? 0 : -ENOENT;
		}
	ret = ub_roots_read_item(&fs->tc, &t_pin.rt, objectid, out, NULL, NULL);
	if (ret == -ENOENT)
		*out = (struct ub_root){ objectid, 0, 0, 0 };
	else if (ret)
		return ret;
	/* a few trees per call: a small ring */
	t_pin.roots[t_pin.next] = *out;
	t_pin.next = (t_pin.next + 1) % PIN_ROOTS;
	if (t_pin.n < PIN_ROOTS)
		t_pin.n++;
	return out->bytenr ? 0 : -ENOENT;
}

/* v: a copy of base's handle that reads through base */
static void view_copy(struct ub_fs *v, struct ub_fs *base, enum ub_view kind)
{
	/*
	 * Field by field: what the writer changes as it goes (its counts in the
	 * tree context, the decompression workers started on first use) is read
	 * through the base, never copied.
	 */
	memset(v, 0, sizeof(*v));
	v->log = base->log;
	v->vol = base->vol;
	v->tc = (struct ub_tree_ctx){ .vol = base->tc.vol, .log = base->tc.log, .cache = base->tc.cache,
				      .have_chunk_tree_uuid = base->tc.have_chunk_tree_uuid };
	memcpy(v->tc.metadata_uuid, base->tc.metadata_uuid, sizeof(v->tc.metadata_uuid));
	memcpy(v->tc.chunk_tree_uuid, base->tc.chunk_tree_uuid, sizeof(v->tc.chunk_tree_uuid));
	v->opts = base->opts;
	v->roots = base->roots;
	v->root_tree = base->root_tree;
	v->chunk_tree = base->chunk_tree;
	v->extent_tree = base->extent_tree;
	v->dev_tree = base->dev_tree;
	v->csum_tree = base->csum_tree;
	v->uuid_tree = base->uuid_tree;
	v->fst_tree = base->fst_tree;
	v->bgt_tree = base->bgt_tree;
	v->quota_tree = base->quota_tree;
	v->rst_tree = base->rst_tree;
	v->incompat = base->incompat;
	v->compat_ro = base->compat_ro;
	v->replay = base->replay;
	v->loose = base->loose;
	v->loose_csums = base->loose_csums;
	v->base = base;
	v->view = kind;
}

void ub_fs_view_init_live(struct ub_fs *v, struct ub_fs *base)
{
	view_copy(v, base, UB_VIEW_LIVE);
}

int ub_fs_view_open(struct ub_fs *fs, struct ub_fs **out)
{
	struct ub_fs *base = ub_fs_base(fs), *v;
	struct ub_view_roots *vr;
	int ret;

	v = malloc(sizeof(*v));
	vr = calloc(1, sizeof(*vr));
	if (!v || !vr) {
		free(v);
		free(vr);
		return -ENOMEM;
	}
	view_copy(v, base, UB_VIEW_PINNED);
	pthread_mutex_init(&vr->lock, NULL);
	v->view_roots = vr;
	ret = ub_roots_reader_enter(base->roots, base->root_tree, base->chunk_tree, &v->view_gen, &v->view_root_tree,
				    &v->view_chunk_root);
	if (ret) {
		/* not counted: nothing to take back */
		pthread_mutex_destroy(&vr->lock);
		free(vr);
		free(v);
		return ret;
	}
	if (!v->view_root_tree.bytenr) {
		ub_fs_view_free(v);
		return -ENOENT;
	}
	*out = v;
	return 0;
}

int ub_fs_live_view(struct ub_fs *fs, struct ub_fs **out)
{
	struct ub_fs *v = malloc(sizeof(*v));

	if (!v)
		return -ENOMEM;
	view_copy(v, ub_fs_base(fs), UB_VIEW_LIVE);
	*out = v;
	return 0;
}

uint64_t ub_fs_view_generation(struct ub_fs *fs)
{
	struct ub_root rt;

	if (fs->view == UB_VIEW_PINNED)
		return fs->view_gen;
	if (fs->view == UB_VIEW_LIVE) {
		/* the running transaction's: any tree it changed has its root at that generation */
		uint64_t g = 0;
		int in = ub_view_enter(fs);

		for (const struct ub_eroot *er = ub_roots_first(fs->roots); er; er = ub_roots_next(er))
			if (er->root.generation > g)
				g = er->root.generation;
		ub_view_exit(fs, in);
		return g;
	}
	return ub_roots_committed(fs->roots, fs->root_tree, &rt) ? 0 : rt.generation;
}

void ub_fs_view_free(struct ub_fs *v)
{
	if (!v)
		return;
	if (v->view == UB_VIEW_PINNED && v->view_roots) {
		ub_roots_reader_exit(v->roots, v->view_gen);
		pthread_mutex_destroy(&v->view_roots->lock);
		free(v->view_roots->r);
		free(v->view_roots);
	}
	free(v);
}

int ub_fs_view_lookup(struct ub_fs *fs, uint64_t objectid, struct ub_root *out)
{
	struct ub_view_roots *vr = fs->view_roots;
	struct ub_root r;
	int ret;

	if (objectid == BTRFS_ROOT_TREE_OBJECTID || objectid == BTRFS_CHUNK_TREE_OBJECTID) {
		*out = objectid == BTRFS_ROOT_TREE_OBJECTID ? fs->view_root_tree : fs->view_chunk_root;
		return out->bytenr ? 0 : -ENOENT;
	}
	pthread_mutex_lock(&vr->lock);
	for (size_t i = 0; i < vr->n; i++)
		if (vr->r[i].objectid == objectid) {
			*out = vr->r[i];
			pthread_mutex_unlock(&vr->lock);
			return out->bytenr ? 0 : -ENOENT;
		}
	pthread_mutex_unlock(&vr->lock);
	/* its commit's ROOT_ITEM: a tree deleted or changed since reads as it was */
	ret = ub_roots_read_item(&fs->tc, &fs->view_root_tree, objectid, &r, NULL, NULL);
	if (ret == -ENOENT)
		r = (struct ub_root){ objectid, 0, 0, 0 };
	else if (ret)
		return ret;
	pthread_mutex_lock(&vr->lock);
	if (vr->n == vr->cap) {
		size_t cap = vr->cap ? 2 * vr->cap : 8;
		struct ub_root *nr = realloc(vr->r, cap * sizeof(*nr));

		if (nr) {
			vr->r = nr;
			vr->cap = cap;
		}
	}
	if (vr->n < vr->cap)
		vr->r[vr->n++] = r; /* a second thread's copy of the same root is the same root */
	pthread_mutex_unlock(&vr->lock);
	*out = r;
	return r.bytenr ? 0 : -ENOENT;
}
