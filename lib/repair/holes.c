/* SPDX-License-Identifier: MIT */
/*
 * Repair of missing holes: without the NO_HOLES feature every byte of a file
 * up to its size is covered by a file extent item, a hole by one whose disk
 * address is 0. Where a gap is left (an item lost), a hole item is put in it:
 * the bytes read as zeros, which is what a reader of the gap got before.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "fsw/fsw.h"
#include "repair/repair_priv.h"

struct gap {
	uint64_t start, len;
};

static int insert_hole(struct fsw *w, uint64_t ino, uint64_t start, uint64_t len)
{
	uint8_t fe[UB_FE_SIZE];
	struct ub_key k = { ino, BTRFS_EXTENT_DATA_KEY, start };

	memset(fe, 0, sizeof(fe));
	UB_SET(btrfs_file_extent_item, generation, fe, w->t->transid);
	UB_SET(btrfs_file_extent_item, ram_bytes, fe, len);
	UB_SET(btrfs_file_extent_item, type, fe, BTRFS_FILE_EXTENT_REG);
	UB_SET(btrfs_file_extent_item, num_bytes, fe, len);
	return ub_tree_insert_item(w->tc, w->ta, &w->fs->root, &k, fe, sizeof(fe));
}

int rp_fix_holes(struct rp_ctx *c, const struct rp_note *n)
{
	uint32_t ss = c->e->fs.vol->sectorsize;
	struct ub_key k = { n->inode, BTRFS_EXTENT_DATA_KEY, 0 };
	struct gap *gaps = NULL;
	size_t ngaps = 0, cap = 0;
	uint8_t ii[UB_II_SIZE];
	uint64_t pos = 0, size, end;
	bool inline_seen = false;
	struct ub_path p;
	struct fsw w;
	int ret = fsw_init_ro(&w, c->t, n->tree);

	if (!ret)
		ret = fsw_inode_get(&w, n->inode, ii);
	if (ret)
		return ret;
	size = UB_GET(btrfs_inode_item, size, ii);
	end = (size + ss - 1) / ss * ss;
	/* the gaps first (read), then the items (written): a path does not live across changes */
	ub_path_init(&p);
	ret = ub_tree_search(w.tc, &w.fs->root, &k, &p);
	ret = ret == 2 ? 1 : ret < 0 ? ret : 0;
	while (ret == 0) {
		const uint8_t *d;
		uint32_t dsize;
		uint64_t e;

		ub_path_key(&p, &k);
		if (k.objectid != n->inode || k.type != BTRFS_EXTENT_DATA_KEY) {
			ret = 1;
			break;
		}
		d = ub_path_data(&p, &dsize);
		if (dsize < UB_FILE_EXTENT_INLINE_DATA_START) {
			ret = -EUCLEAN;
			break;
		}
		if (UB_GET(btrfs_file_extent_item, type, d) == BTRFS_FILE_EXTENT_INLINE) {
			inline_seen = true;
			e = k.offset + UB_GET(btrfs_file_extent_item, ram_bytes, d);
		} else {
			if (dsize < UB_FE_SIZE) {
				ret = -EUCLEAN;
				break;
			}
			e = k.offset + UB_GET(btrfs_file_extent_item, num_bytes, d);
		}
		if (k.offset > pos && pos < end) {
			if (ngaps == cap) {
				struct gap *m = realloc(gaps, (cap = cap ? cap * 2 : 8) * sizeof(*m));

				if (!m) {
					ret = -ENOMEM;
					break;
				}
				gaps = m;
			}
			gaps[ngaps++] = (struct gap){ pos, (k.offset < end ? k.offset : end) - pos };
		}
		if (e > pos)
			pos = e;
		ret = ub_tree_next(&p);
	}
	ub_path_release(&p);
	if (ret == 1)
		ret = 0;
	if (!ret && pos < end) {
		struct gap *m = realloc(gaps, (ngaps + 1) * sizeof(*m));

		if (!m)
			ret = -ENOMEM;
		else
			(gaps = m)[ngaps++] = (struct gap){ pos, end - pos };
	}
	/* an inline extent stands alone in its file: a file that has one and gaps is left as it is */
	if (!ret && inline_seen && ngaps) {
		ub_warn(c->log, "repair: inode %llu of tree %llu has an inline extent and gaps: left",
			(unsigned long long)n->inode, (unsigned long long)n->tree);
		ngaps = 0;
	}
	for (size_t i = 0; !ret && i < ngaps; i++) {
		if (gaps[i].start % ss || gaps[i].len % ss) {
			ub_warn(c->log, "repair: inode %llu of tree %llu: the gap [%llu, +%llu) is not sector-aligned: left",
				(unsigned long long)n->inode, (unsigned long long)n->tree,
				(unsigned long long)gaps[i].start, (unsigned long long)gaps[i].len);
			continue;
		}
		ret = insert_hole(&w, n->inode, gaps[i].start, gaps[i].len);
		if (!ret)
			rp_say(c, n, 0, "inode %llu of tree %llu: a hole item for [%llu, +%llu)", (unsigned long long)n->inode,
			       (unsigned long long)n->tree, (unsigned long long)gaps[i].start,
			       (unsigned long long)gaps[i].len);
	}
	free(gaps);
	return ret;
}
