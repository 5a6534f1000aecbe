/* SPDX-License-Identifier: MIT */
/* The checker object: options, the sink, the log bridge, the order of the passes. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check/check_priv.h"

static const char *const class_names[UB_CHK_NCLASSES] = { "super", "tree", "chunk", "extent", "free-space", "root", "csum", "fs", "other" };

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
	*out = c;
	return 0;
}

void ub_checker_free(struct ub_checker *c)
{
	if (!c)
		return;
	chk_block_map_free(&c->blocks);
	free(c->tag_tree);
	free(c->dev_supers);
	free(c->root_refs);
	free(c->live_subvols);
	free(c->fext);
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
	ncap = *cap ? *cap * 2 : first;
	nv = realloc(v, ncap * elem);
	if (!nv)
		return -ENOMEM;
	memcpy(arrayp, &nv, sizeof(nv));
	*cap = ncap;
	return 0;
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
	if (c->fs && !p.path && p.inode >= BTRFS_FIRST_FREE_OBJECTID && p.tree && p.tree != BTRFS_EXTENT_TREE_OBJECTID) {
		bool was = c->capturing;

		/* what the path's blocks say is the passes' to report, not this lookup's */
		c->capturing = true;
		if (!ub_inode_path(c->fs, p.tree, p.inode, path, sizeof(path)))
			p.path = path;
		c->capturing = was;
	}
	if ((unsigned)p.cls >= UB_CHK_NCLASSES)
		p.cls = UB_CHK_OTHER;
	c->sum.problems[p.cls]++;
	if (c->sink.problem)
		c->sink.problem(c->sink.arg, &p);
}

void chk_capture(struct ub_checker *c)
{
	c->capturing = true;
	c->last[0] = 0;
	c->nlogged = 0;
}

const char *chk_captured(struct ub_checker *c)
{
	c->capturing = false;
	return c->last;
}

void chk_progress(struct ub_checker *c, const char *phase, uint64_t done, uint64_t total)
{
	if (c->sink.progress)
		c->sink.progress(c->sink.arg, phase, done, total);
}

static void log_bridge(void *arg, enum ub_log_level lvl, const char *msg)
{
	struct ub_checker *c = arg;

	if (lvl == UB_LOG_ERROR && c->capturing) {
		/* the first error of a read names its cause; later ones only repeat it per copy */
		if (!c->nlogged++)
			snprintf(c->last, sizeof(c->last), "%s", msg);
		return;
	}
	if (lvl == UB_LOG_ERROR) {
		struct ub_chk_problem p = { .cls = UB_CHK_OTHER };

		chk_report(c, &p, "%s", msg);
		return;
	}
	/* a failed copy's warning repeats what the problem says; -v shows it */
	if (c->capturing && lvl == UB_LOG_WARN && c->opts.verbosity < UB_LOG_INFO)
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

int ub_checker_run(struct ub_checker *c, struct ub_fs *fs)
{
	struct ub_volume_info vi;
	int ret = ub_volume_get_info(ub_fs_volume(fs), &vi);

	if (ret)
		return ret;
	c->super_generation = vi.generation;
	c->fs = fs;
	ret = chk_trees(c, fs);
	if (!ret)
		ret = chk_chunks(c, fs);
	if (!ret)
		ret = chk_fs_trees(c, fs);
	if (!ret)
		ret = chk_root_items(c, fs);
	return ret;
}

void ub_checker_summary(const struct ub_checker *c, struct ub_chk_summary *out)
{
	*out = c->sum;
}
