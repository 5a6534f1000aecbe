/* SPDX-License-Identifier: MIT */
/* Walking the items of a key range in order. */
#include <errno.h>
#include "ubtrfs/tree.h"
#include "tree/tree_write.h"

int ub_tree_iter_start(struct ub_tree_iter *it, struct ub_tree_ctx *tc, const struct ub_root *root,
		       const struct ub_key *min, const struct ub_key *max)
{
	memset(it, 0, sizeof(*it));
	it->tc = tc;
	it->root = *root;
	it->min = *min;
	it->max = *max;
	ub_path_init(&it->path);
	it->done = ub_key_cmp(min, max) > 0;
	return 0;
}

int ub_tree_iter_next(struct ub_tree_iter *it, struct ub_key *key, const uint8_t **data, uint32_t *size)
{
	struct ub_key k;
	int ret;

	if (it->done)
		return 1;
	if (!it->started) {
		it->started = true;
		/* the path points at the iterator's own copy of the root */
		ret = ub_tree_search(it->tc, &it->root, &it->min, &it->path);
		if (ret == 2)
			ret = 1;
		else if (ret == 1)
			ret = 0;
	} else {
		ret = ub_tree_next(&it->path);
	}
	if (ret) {
		it->done = true;
		ub_path_release(&it->path);
		return ret;
	}
	ub_path_key(&it->path, &k);
	if (ub_key_cmp(&k, &it->max) > 0) {
		it->done = true;
		ub_path_release(&it->path);
		return 1;
	}
	if (key)
		*key = k;
	if (data || size) {
		uint32_t sz;
		const uint8_t *d = ub_path_data(&it->path, &sz);
		if (data)
			*data = d;
		if (size)
			*size = sz;
	}
	return 0;
}

void ub_tree_iter_end(struct ub_tree_iter *it)
{
	ub_path_release(&it->path);
	it->done = true;
}
