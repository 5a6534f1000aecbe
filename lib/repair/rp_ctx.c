/* SPDX-License-Identifier: MIT */
/*
 * The run's context that every cure uses: a change said (counted, handed to
 * the caller's sink) and the inodes whose names a cure changed, counted again
 * at the end. Its own file so the cures (names.c, extents.c, ...) and the run
 * (repair.c) that calls them both lean on it, and neither on the other.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include "repair/repair_priv.h"

void rp_say(struct rp_ctx *c, const struct rp_note *n, uint64_t was, const char *fmt, ...)
{
	struct ub_repair_change ch = { n->fix, n->tree, n->inode, n->devid, was, n->want, NULL };
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	ch.msg = msg;
	c->res->changes++;
	if (c->opts->sink && c->opts->sink->change)
		c->opts->sink->change(c->opts->sink->arg, &ch);
}

bool rp_is_touched(const struct rp_ctx *c, uint64_t tree, uint64_t ino, bool dir_size)
{
	for (size_t i = 0; i < c->ntouched; i++)
		if (c->touched[i].tree == tree && c->touched[i].ino == ino && c->touched[i].dir_size == dir_size)
			return true;
	return false;
}

int rp_touch(struct rp_ctx *c, uint64_t tree, uint64_t ino, bool dir_size)
{
	if (rp_is_touched(c, tree, ino, dir_size))
		return 0;
	if (c->ntouched == c->captouched) {
		size_t cap = c->captouched ? c->captouched * 2 : 16;
		struct rp_touched *m = realloc(c->touched, cap * sizeof(*m));

		if (!m)
			return -ENOMEM;
		c->touched = m;
		c->captouched = cap;
	}
	c->touched[c->ntouched++] = (struct rp_touched){ tree, ino, dir_size };
	return 0;
}

int rp_grow(void **v, size_t *cap, size_t n, size_t elem, size_t first)
{
	size_t c;
	void *m;

	if (n < *cap)
		return 0;
	c = *cap ? *cap * 2 : first;
	m = realloc(*v, c * elem);
	if (!m)
		return -ENOMEM;
	*v = m;
	*cap = c;
	return 0;
}
