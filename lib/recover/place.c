/* SPDX-License-Identifier: MIT */
/*
 * Lost inodes (no tree gives them, their items gathered from the leaves) back
 * at their names, and what is left after: the lost ones no name took, the
 * deleted ones the leaves give (undelete).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "recover_priv.h"

#define PASSES 64   /* directories nested this deep in lost ones are placed; deeper go unplaced */
#define NAMES 64    /* names of one inode tried (a bit each) */

struct place_ctx {
	ub_recover_place_fn fn;
	void *arg;
	uint64_t *tried; /* the names (by their order, the first NAMES) tried already */
	int nth;
	bool placed_one;
	struct ub_inode in;
};

static int place_name(void *arg, uint64_t dir, const char *bytes, size_t len)
{
	struct place_ctx *pc = arg;
	uint64_t bit = pc->nth < NAMES ? 1ULL << pc->nth : 0;
	char name[UB_NAME_LEN + 1];
	int ret;

	pc->nth++;
	if (!bit || (*pc->tried & bit))
		return 0;
	if (!ub_name_valid(bytes, len)) {
		*pc->tried |= bit;
		return 0;
	}
	memcpy(name, bytes, len);
	name[len] = 0;
	ret = pc->fn(pc->arg, &pc->in, dir, name);
	if (ret == -EAGAIN)
		return 0; /* its directory may be placed in a later pass */
	*pc->tried |= bit;
	if (ret)
		return 0; /* the name is taken */
	pc->placed_one = true;
	/* a directory has one name: a second would be a second directory */
	if (S_ISDIR(pc->in.mode)) {
		*pc->tried = ~0ULL;
		return 1;
	}
	return 0;
}

int ub_recover_place(struct ub_recover *rc, ub_recover_place_fn fn, void *arg)
{
	uint64_t *tried = calloc(rc->lost.n ? rc->lost.n : 1, sizeof(*tried));
	bool progress = true;

	if (!tried || !rc->placed) {
		free(tried);
		return -ENOMEM;
	}
	/* each pass may place directories that make more names placeable in the next */
	for (int pass = 0; progress && pass < PASSES; pass++) {
		progress = false;
		for (size_t i = 0; i < rc->lost.n; i++) {
			struct place_ctx pc = { fn, arg, &tried[i], 0, false };

			/* every name tried already: nothing a later pass can add */
			if (tried[i] == ~0ULL || ub_inode_read(rc->fs, rc->lost.v[i].subvol, rc->lost.v[i].ino, &pc.in) ||
			    !pc.in.nlink)
				continue;
			ub_inode_names(rc->fs, rc->lost.v[i].subvol, rc->lost.v[i].ino, place_name, &pc);
			if (pc.nth < NAMES && tried[i] == (1ULL << pc.nth) - 1)
				tried[i] = ~0ULL;
			if (pc.placed_one) {
				rc->placed[i] = 1;
				progress = true;
			}
		}
	}
	free(tried);
	return 0;
}

int ub_recover_unplaced(struct ub_recover *rc, int err, ub_recover_inode_fn fn, void *arg)
{
	int ret = 0;

	for (size_t i = 0; !ret && i < rc->lost.n; i++) {
		struct ub_recover_inode ri = { .subvol = rc->lost.v[i].subvol, .ino = rc->lost.v[i].ino, .loose = true };

		if (rc->placed && rc->placed[i])
			continue;
		ri.err = err ? err : ub_inode_read(rc->fs, ri.subvol, ri.ino, &ri.in);
		if (ri.err)
			ri.kind = UB_RECOVER_UNREADABLE;
		else if (!ri.in.nlink)
			ri.kind = UB_RECOVER_DELETED;
		else
			ri.kind = UB_RECOVER_FOUND;
		ri.fs = ri.err ? NULL : rc->fs;
		ret = fn(arg, &ri);
	}
	return ret;
}

int ub_recover_deleted(struct ub_recover *rc, ub_recover_inode_fn fn, void *arg)
{
	int ret = 0;

	for (size_t g = 0; !ret && g < rc->gone.n; g++) {
		struct ub_recover_inode ri = { .subvol = rc->gone.v[g].subvol, .ino = rc->gone.v[g].ino,
					       .kind = UB_RECOVER_DELETED, .undeleted = true, .loose = true };

		/* unlinked there too, or a directory (nothing to give): deleted it stays */
		if (ub_inode_read(rc->fs, ri.subvol, ri.ino, &ri.in) || !ri.in.nlink || S_ISDIR(ri.in.mode))
			continue;
		ri.unchecked = rc->gone_bad && rc->gone_bad[g];
		ri.fs = rc->fs;
		ret = fn(arg, &ri);
	}
	return ret;
}
