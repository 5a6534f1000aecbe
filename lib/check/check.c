/* SPDX-License-Identifier: MIT */
/* The checker object: options, the sink, the log bridge, the order of the passes. */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check/check_priv.h"

static const char *const class_names[UB_CHK_NCLASSES] = { "super", "tree", "chunk", "extent", "free-space", "root", "csum", "fs", "qgroup", "other" };

/* What a thread's pass keeps of the errors the library logs while it reads (see chk_capture). */
static __thread struct {
	bool on;
	bool defer; /* the second thread: its problems wait in c->deferred */
	char last[512];
	unsigned n;
} tls;

const char *ub_chk_class_name(enum ub_chk_class c)
{
	return (unsigned)c < UB_CHK_NCLASSES ? class_names[c] : "?";
}

int ub_checker_new(const struct ub_chk_opts *opts, const struct ub_chk_sink *sink, struct ub_checker **out)
{
	struct ub_checker *c = calloc(1, sizeof(*c));

	if (!c)
		return -ENOMEM;
	if (opts)
		c->opts = *opts;
	c->sink = *sink;
	pthread_mutex_init(&c->lock, NULL);
	*out = c;
	return 0;
}

void ub_checker_free(struct ub_checker *c)
{
	if (!c)
		return;
	chk_block_map_free(&c->blocks);
	free(c->tag_tree);
	free(c->tag_gen);
	free(c->behind);
	free(c->newer);
	free(c->dev_supers);
	free(c->root_refs);
	free(c->live_subvols);
	free(c->dead_subvols);
	free(c->fext);
	free(c->edges);
	free(c->ob.refs);
	chk_qgroup_free(c);
	free(c->links);
	free(c->whole_trees);
	for (size_t i = 0; i < c->ndeferred; i++) {
		free((char *)c->deferred[i].msg);
		free((char *)c->deferred[i].path);
	}
	free(c->deferred);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

int chk_reserve(void *arrayp, size_t *cap, size_t n, size_t elem, size_t first)
{
	size_t ncap;
	void *v, *nv;

	if (n < *cap)
		return 0;
	/* through memcpy: `arrayp` is the address of a pointer to any element type */
	memcpy(&v, arrayp, sizeof(v));
	/* doubling until `n` fits, for callers that reserve several at once */
	for (ncap = *cap ? *cap * 2 : first; ncap <= n; ncap *= 2)
		if (ncap > SIZE_MAX / 4 / elem)
			return -ENOMEM;
	nv = realloc(v, ncap * elem);
	if (!nv)
		return -ENOMEM;
	memcpy(arrayp, &nv, sizeof(nv));
	*cap = ncap;
	return 0;
}

/* Keep a copy of `p` for the sink (under c->lock); without memory it is counted, not kept. */
static void defer(struct ub_checker *c, const struct ub_chk_problem *p)
{
	struct ub_chk_problem *d;

	if (chk_reserve(&c->deferred, &c->deferred_cap, c->ndeferred, sizeof(*c->deferred), 16))
		goto lost;
	d = &c->deferred[c->ndeferred];
	*d = *p;
	d->msg = strdup(p->msg);
	d->path = p->path ? strdup(p->path) : NULL;
	if (!d->msg || (p->path && !d->path)) {
		free((char *)d->msg);
		free((char *)d->path);
		goto lost;
	}
	c->ndeferred++;
	return;
lost:
	c->deferred_nomem = true;
	c->sum.problems[p->cls]++;
}

/* The second thread's problems, in the order it found them (after the first thread's). */
static void flush_deferred(struct ub_checker *c)
{
	for (size_t i = 0; i < c->ndeferred; i++) {
		struct ub_chk_problem *d = &c->deferred[i];

		c->sum.problems[d->cls]++;
		if (c->sink.problem)
			c->sink.problem(c->sink.arg, d);
		free((char *)d->msg);
		free((char *)d->path);
	}
	c->ndeferred = 0;
	if (c->deferred_nomem) {
		struct ub_chk_problem p = { .cls = UB_CHK_OTHER };

		c->deferred_nomem = false;
		chk_report(c, &p, "out of memory: some problems of the file tree pass were counted but not kept");
	}
}

void chk_report(struct ub_checker *c, const struct ub_chk_problem *where, const char *fmt, ...)
{
	struct ub_chk_problem p = *where;
	char msg[1024], path[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	p.msg = msg;
	/* an inode of a file tree: its path too, when its names lead to the root directory */
	if (c->fs && !p.path && p.inode >= BTRFS_FIRST_FREE_OBJECTID && p.tree && p.tree != BTRFS_EXTENT_TREE_OBJECTID &&
	    p.tree != BTRFS_TREE_LOG_OBJECTID) {
		bool was = tls.on;

		/* what the path's blocks say is the passes' to report, not this lookup's */
		tls.on = true;
		if (!ub_inode_path(c->fs, p.tree, p.inode, path, sizeof(path)))
			p.path = path;
		tls.on = was;
	}
	if ((unsigned)p.cls >= UB_CHK_NCLASSES)
		p.cls = UB_CHK_OTHER;
	pthread_mutex_lock(&c->lock);
	if (tls.defer) {
		defer(c, &p);
	} else {
		c->sum.problems[p.cls]++;
		if (c->sink.problem)
			c->sink.problem(c->sink.arg, &p);
	}
	pthread_mutex_unlock(&c->lock);
}

void chk_note(const struct ub_checker *c, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	if (c->opts.verbosity < UB_LOG_INFO)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "ubtrfs: note: %s\n", msg);
}

void chk_capture(struct ub_checker *c)
{
	(void)c;
	tls.on = true;
	tls.last[0] = 0;
	tls.n = 0;
	/*
	 * A block another pass failed to read before is named again: which pass
	 * reads it first depends on the two threads' timing, what each one
	 * reports must not.
	 */
	ub_tree_repeat_bad(true);
}

const char *chk_captured(struct ub_checker *c)
{
	(void)c;
	tls.on = false;
	ub_tree_repeat_bad(false);
	return tls.last;
}

void chk_progress(struct ub_checker *c, const char *phase, uint64_t done, uint64_t total)
{
	/* the progress line follows the first thread's passes */
	if (!c->sink.progress || tls.defer)
		return;
	pthread_mutex_lock(&c->lock);
	c->sink.progress(c->sink.arg, phase, done, total);
	pthread_mutex_unlock(&c->lock);
}

static void log_bridge(void *arg, enum ub_log_level lvl, const char *msg)
{
	struct ub_checker *c = arg;

	if (lvl == UB_LOG_ERROR && tls.on) {
		/* the first error of a read names its cause; later ones only repeat it per copy */
		if (!tls.n++)
			snprintf(tls.last, sizeof(tls.last), "%s", msg);
		return;
	}
	if (lvl == UB_LOG_ERROR) {
		struct ub_chk_problem p = { .cls = UB_CHK_OTHER };

		chk_report(c, &p, "%s", msg);
		return;
	}
	/* a failed copy's warning repeats what the problem says; -v shows it */
	if (tls.on && lvl == UB_LOG_WARN && c->opts.verbosity < UB_LOG_INFO)
		return;
	if ((int)lvl <= c->opts.verbosity)
		fprintf(stderr, "ubtrfs: %s: %s\n", lvl == UB_LOG_WARN ? "warning" : "note", msg);
}

void ub_checker_log(struct ub_checker *c, struct ub_log *out)
{
	memset(out, 0, sizeof(*out));
	out->fn = log_bridge;
	out->arg = c;
	out->verbosity = UB_LOG_DEBUG;
}

struct second {
	struct ub_checker *c;
	struct ub_fs *fs;
	pthread_t self; /* the caller's thread: run there, nothing is deferred */
	int ret;
};

/* The passes that need nothing of the tree and chunk passes: file trees, root items. */
static void *second_passes(void *arg)
{
	struct second *s = arg;
	bool threaded = !pthread_equal(pthread_self(), s->self);

	tls.defer = threaded;
	s->ret = chk_fs_trees(s->c, s->fs);
	if (!s->ret)
		s->ret = chk_root_items(s->c, s->fs);
	tls.defer = false;
	return NULL;
}

int ub_checker_run(struct ub_checker *c, struct ub_fs *fs)
{
	struct second second = { .self = pthread_self() };
	bool threaded;
	pthread_t tid;
	struct ub_volume_info vi;
	int ret = ub_volume_get_info(ub_fs_volume(fs), &vi);

	if (ret)
		return ret;
	c->super_generation = vi.generation;
	c->fs = fs;
	second.c = c;
	second.fs = fs;
	/* without a second thread the same passes run after the others, on this one */
	threaded = !pthread_create(&tid, NULL, second_passes, &second);
	ret = chk_trees(c, fs);
	if (!ret)
		ret = chk_qgroup_begin(c, fs);
	if (!ret)
		ret = chk_chunks(c, fs);
	if (!ret)
		chk_qgroup_end(c);
	if (threaded) {
		pthread_join(tid, NULL);
		flush_deferred(c);
	} else {
		second_passes(&second);
	}
	if (!ret && !second.ret)
		chk_subvol_links_check(c);
	return ret ? ret : second.ret;
}

void ub_checker_summary(const struct ub_checker *c, struct ub_chk_summary *out)
{
	*out = c->sum;
}
