/* SPDX-License-Identifier: MIT */
/* What a library user reaches of a block and a path, now that their structures are private. */
#include <errno.h>
#include <stdlib.h>
#include "tree/tree_priv.h"

/* The names in parentheses are the functions, not tree_priv.h's inline macros. */
const uint8_t *(ub_eb_data)(const struct ub_eb *eb) { return ub_eb_data_inl(eb); }
uint32_t (ub_eb_len)(const struct ub_eb *eb) { return ub_eb_len_inl(eb); }
uint64_t (ub_eb_start)(const struct ub_eb *eb) { return ub_eb_start_inl(eb); }
uint8_t (ub_eb_level)(const struct ub_eb *eb) { return ub_eb_level_inl(eb); }
uint32_t (ub_eb_nritems)(const struct ub_eb *eb) { return ub_eb_nritems_inl(eb); }
uint64_t (ub_eb_owner)(const struct ub_eb *eb) { return ub_eb_owner_inl(eb); }
uint64_t (ub_eb_generation)(const struct ub_eb *eb) { return ub_eb_generation_inl(eb); }

int ub_path_new(struct ub_path **out)
{
	struct ub_path *p = malloc(sizeof(*p));

	*out = NULL;
	if (!p)
		return -ENOMEM;
	ub_path_init(p);
	*out = p;
	return 0;
}

void ub_path_free(struct ub_path *p)
{
	if (!p)
		return;
	ub_path_release(p);
	free(p);
}
