/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dirlist.h"
#include "print_priv.h"

int entries_add(void *arg, const struct ub_dirent *de)
{
	struct entries *es = arg;
	struct entry *e;

	if (es->n == es->cap) {
		size_t cap = es->cap ? es->cap * 2 : 64;
		struct entry *v = realloc(es->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		es->v = v;
		es->cap = cap;
	}
	e = &es->v[es->n];
	e->name = malloc(de->name_len + 1);
	if (!e->name)
		return -ENOMEM;
	memcpy(e->name, de->name, de->name_len);
	e->name[de->name_len] = 0;
	e->de = *de;
	e->de.name = e->name;
	e->fs = es->fs;
	e->gen = es->gen;
	es->n++;
	return 0;
}

void entries_free(struct entries *es)
{
	for (size_t i = 0; i < es->n; i++)
		free(es->v[i].name);
	free(es->v);
	es->v = NULL;
	es->n = es->cap = 0;
}

char *name_shown(const char *s, size_t len)
{
	char *buf = NULL;
	size_t n = 0;
	FILE *f = open_memstream(&buf, &n);

	if (!f)
		return NULL;
	pr_name(f, (const uint8_t *)s, len);
	if (fclose(f)) {
		free(buf);
		return NULL;
	}
	return buf;
}
