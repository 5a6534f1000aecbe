/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "dirlist.h"

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
