/* SPDX-License-Identifier: MIT */
/*
 * Repair of overlapping file extent items: an item that runs past the start
 * of the next one is cut to end where that one starts. A reader of the file
 * (the kernel's, ours) takes each byte from the last item that starts at or
 * before it, so the bytes past the next item's start were never read from the
 * earlier item: cutting it changes nothing a reader gets. The data extent it
 * points at keeps its reference (the reference names the item's file offset
 * less its offset into the extent, neither changed); the inode's nbytes is
 * counted again from the items after the cut, as the checker counts it.
 * btrfs check --repair (6.2) leaves such items as they are.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "fsw/fsw.h"
#include "repair/repair_priv.h"

/* The file offsets of n->inode's items that run past n->want, and the nbytes its items give after the cut. */
static int scan(struct fsw *w, const struct rp_note *n, uint64_t **cut, size_t *ncut, uint64_t *nbytes, bool *inl)
{
	struct ub_key k = { n->inode, BTRFS_EXTENT_DATA_KEY, 0 };
	size_t cap = 0;
	struct ub_path p;
	int ret;

	*nbytes = 0;
	ub_path_init(&p);
	ret = ub_tree_search(w->tc, &w->fs->root, &k, &p);
	ret = ret == 2 ? 1 : ret < 0 ? ret : 0;
	while (ret == 0) {
		const uint8_t *d;
		uint32_t size;
		uint64_t len;
		bool is_inline;

		ub_path_key(&p, &k);
		if (k.objectid != n->inode || k.type != BTRFS_EXTENT_DATA_KEY) {
			ret = 1;
			break;
		}
		d = ub_path_data(&p, &size);
		if (!d || size < UB_FILE_EXTENT_INLINE_DATA_START) {
			ret = -EUCLEAN;
			break;
		}
		is_inline = UB_GET(btrfs_file_extent_item, type, d) == BTRFS_FILE_EXTENT_INLINE;
		if (!is_inline && size < UB_FE_SIZE) {
			ret = -EUCLEAN;
			break;
		}
		len = is_inline ? UB_GET(btrfs_file_extent_item, ram_bytes, d) : UB_GET(btrfs_file_extent_item, num_bytes, d);
		if (k.offset < n->want && k.offset + len > n->want) {
			if (is_inline) {
				*inl = true;
			} else {
				if (*ncut == cap) {
					uint64_t *m = realloc(*cut, (cap = cap ? cap * 2 : 4) * sizeof(*m));

					if (!m) {
						ret = -ENOMEM;
						break;
					}
					*cut = m;
				}
				(*cut)[(*ncut)++] = k.offset;
				len = n->want - k.offset;
			}
		}
		if (is_inline || UB_GET(btrfs_file_extent_item, disk_bytenr, d))
			*nbytes += len;
		ret = ub_tree_next(&p);
	}
	ub_path_release(&p);
	return ret == 1 ? 0 : ret;
}

static int cut_item(struct fsw *w, uint64_t ino, uint64_t offset, uint64_t len)
{
	struct ub_key k = { ino, BTRFS_EXTENT_DATA_KEY, offset };
	struct ub_path p;
	uint8_t *d;
	uint32_t size;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_search_slot(w->tc, w->ta, &w->fs->root, &k, &p, 0, true);
	if (ret > 0)
		ret = -ESTALE;
	if (!ret) {
		d = ub_path_data_mut(&p, &size);
		if (!d || size < UB_FE_SIZE) {
			ret = -EUCLEAN;
		} else {
			UB_SET(btrfs_file_extent_item, num_bytes, d, len);
			/* a hole's ram_bytes is its length (the kernel writes it so); data keeps its extent's */
			if (!UB_GET(btrfs_file_extent_item, disk_bytenr, d))
				UB_SET(btrfs_file_extent_item, ram_bytes, d, len);
			ub_path_mark_dirty(&p);
		}
	}
	ub_path_release(&p);
	return ret;
}

int rp_fix_overlap(struct rp_ctx *c, const struct rp_note *n)
{
	uint64_t *cut = NULL, nbytes = 0, was;
	uint32_t ss = c->e->fs.vol->sectorsize;
	uint8_t ii[UB_II_SIZE];
	size_t ncut = 0;
	bool inl = false;
	struct fsw w;
	int ret = fsw_init_ro(&w, c->t, n->tree);

	if (!ret)
		ret = fsw_inode_get(&w, n->inode, ii);
	if (!ret)
		ret = scan(&w, n, &cut, &ncut, &nbytes, &inl);
	if (ret) {
		free(cut);
		ub_err(c->log, "repair: inode %llu of tree %llu: its file extent items cannot be read: %s",
		       (unsigned long long)n->inode, (unsigned long long)n->tree, strerror(-ret));
		return ret;
	}
	/* an inline extent stands alone at offset 0 and is not cut; an unaligned start is no item the kernel wrote */
	if (inl || n->want % ss) {
		free(cut);
		ub_warn(c->log, "repair: inode %llu of tree %llu: the file extent items before %llu are left (%s)",
			(unsigned long long)n->inode, (unsigned long long)n->tree, (unsigned long long)n->want,
			inl ? "an inline extent overlaps" : "the next item starts inside a sector");
		return 0;
	}
	for (size_t i = 0; !ret && i < ncut; i++) {
		ret = cut_item(&w, n->inode, cut[i], n->want - cut[i]);
		if (!ret)
			rp_say(c, n, 0, "inode %llu of tree %llu: the file extent item at %llu cut to end at %llu, where the "
			       "next one starts", (unsigned long long)n->inode, (unsigned long long)n->tree,
			       (unsigned long long)cut[i], (unsigned long long)n->want);
	}
	free(cut);
	was = UB_GET(btrfs_inode_item, nbytes, ii);
	if (!ret && ncut && was != nbytes) {
		UB_SET(btrfs_inode_item, nbytes, ii, nbytes);
		ret = fsw_inode_put(&w, n->inode, ii);
		if (!ret)
			rp_say(c, n, was, "inode %llu of tree %llu: nbytes %llu -> %llu, its file extents after the cut",
			       (unsigned long long)n->inode, (unsigned long long)n->tree, (unsigned long long)was,
			       (unsigned long long)nbytes);
	}
	return ret;
}
