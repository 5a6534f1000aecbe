/* SPDX-License-Identifier: MIT */
/* Where a file holds data and where it has holes, from its extent items (for copies that keep holes). */
#include <errno.h>
#include "ubtrfs/fs.h"
#include "fs_priv.h"
#include "items.h"

#define FE(field, p) UB_GET(btrfs_file_extent_item, field, p)

/* The file offsets an extent item gives bytes to: 0 and [*s, *e), or 1 for a hole or preallocated space. */
static int data_span(const struct ub_fs *fs, const struct ub_key *key, const uint8_t *d, uint32_t size,
		     uint64_t *s, uint64_t *e)
{
	uint64_t n;

	if (size < UB_FILE_EXTENT_INLINE_DATA_START)
		return -EUCLEAN;
	if (FE(type, d) == BTRFS_FILE_EXTENT_INLINE) {
		/* an inline extent fills at most its first sector; ub_file_read checks the rest */
		n = fs->vol->sectorsize;
	} else {
		if (size < sizeof(struct btrfs_file_extent_item))
			return -EUCLEAN;
		if (FE(type, d) != BTRFS_FILE_EXTENT_REG || !FE(disk_bytenr, d))
			return 1;
		n = FE(num_bytes, d);
	}
	*s = key->offset;
	if (__builtin_add_overflow(key->offset, n, e))
		*e = UINT64_MAX;
	return 0;
}

static int no_item(struct ub_fs *fs, uint64_t subvol, uint64_t ino, uint64_t from, uint64_t to, uint64_t size)
{
	ub_err(&fs->log, "subvol %llu ino %llu: no file extent item covers file offsets %llu..%llu of its %llu "
	       "bytes, and this filesystem (no-holes off) keeps an item for every hole: the size is corrupt or "
	       "items are missing", (unsigned long long)subvol, (unsigned long long)ino, (unsigned long long)from,
	       (unsigned long long)to, (unsigned long long)size);
	return -EUCLEAN;
}

static int file_next_data_inode_impl(struct ub_fs *fs, const struct ub_inode *inode, uint64_t off, uint64_t *start,
			    uint64_t *end)
{
	const uint64_t subvol = inode->subvol, ino = inode->ino;
	struct ub_icur cur;
	struct ub_key key;
	bool found = false;
	bool holes_kept = !(fs->incompat & BTRFS_FEATURE_INCOMPAT_NO_HOLES);
	uint64_t covered = UINT64_MAX; /* where the items seen so far end; none seen yet */
	int ret;

	if (off >= inode->size)
		return 1;
	ret = ub_icur_open(fs, subvol, ino, &cur);
	if (ret)
		return ret;
	ret = ub_icur_seek_extent(&cur, off);
	/* the first span reaching past `off`, then every span that continues it without a gap */
	while (ret == 0) {
		const uint8_t *d;
		uint32_t size;
		uint64_t s, e;
		int r;

		ub_icur_key(&cur, &key);
		if (key.type != BTRFS_EXTENT_DATA_KEY || key.offset >= inode->size || (found && key.offset > *end))
			break;
		/* without no-holes every hole has its item: a gap is items lost (as ub_file_read says) */
		if (holes_kept && !found && key.offset > (covered == UINT64_MAX ? off : covered)) {
			ret = no_item(fs, subvol, ino, covered == UINT64_MAX ? off : covered, key.offset, inode->size);
			break;
		}
		d = ub_icur_data(&cur, &size);
		r = data_span(fs, &key, d, size, &s, &e);
		if (r < 0) {
			ret = r;
			break;
		}
		if (r == 1) {
			s = key.offset;
			e = key.offset + (size >= sizeof(struct btrfs_file_extent_item) ? FE(num_bytes, d) : 0);
			if (e < s)
				e = UINT64_MAX;
		}
		if (covered == UINT64_MAX || e > covered)
			covered = e;
		if (r == 0 && e > off) {
			if (!found) {
				*start = s > off ? s : off;
				*end = e;
				found = true;
			} else if (e > *end) {
				*end = e;
			}
		} else if (found && r == 1) {
			break;
		}
		ret = ub_icur_next(&cur);
	}
	ub_icur_close(&cur);
	if (ret < 0)
		return ret;
	if (!found && holes_kept && (covered == UINT64_MAX ? 0 : covered) < inode->size)
		return no_item(fs, subvol, ino, covered == UINT64_MAX ? off : covered, inode->size, inode->size);
	if (!found)
		return 1;
	if (*end > inode->size)
		*end = inode->size;
	return 0;
}

int ub_file_next_data_inode(struct ub_fs *fs, const struct ub_inode *inode, uint64_t off, uint64_t *start,
			    uint64_t *end)
{
	int in = ub_view_enter(fs);
	int ret = file_next_data_inode_impl(fs, inode, off, start, end);

	ub_view_exit(fs, in);
	return ret;
}

static int file_next_data_impl(struct ub_fs *fs, uint64_t subvol, uint64_t ino, uint64_t off, uint64_t *start,
		      uint64_t *end)
{
	struct ub_inode inode;
	int ret = ub_inode_read(fs, subvol, ino, &inode);

	return ret ? ret : ub_file_next_data_inode(fs, &inode, off, start, end);
}

int ub_file_next_data(struct ub_fs *fs, uint64_t subvol, uint64_t ino, uint64_t off, uint64_t *start,
		      uint64_t *end)
{
	int in = ub_view_enter(fs);
	int ret = file_next_data_impl(fs, subvol, ino, off, start, end);

	ub_view_exit(fs, in);
	return ret;
}

static int inode_has_extents_impl(struct ub_fs *fs, uint64_t subvol, uint64_t ino)
{
	struct ub_icur cur;
	struct ub_key key;
	int ret = ub_icur_open(fs, subvol, ino, &cur);

	if (ret)
		return ret;
	ret = ub_icur_seek(&cur, BTRFS_EXTENT_DATA_KEY, 0);
	if (ret == 0) {
		ub_icur_key(&cur, &key);
		ret = key.type == BTRFS_EXTENT_DATA_KEY;
	} else if (ret == 1) {
		ret = 0;
	}
	ub_icur_close(&cur);
	return ret;
}

int ub_inode_has_extents(struct ub_fs *fs, uint64_t subvol, uint64_t ino)
{
	int in = ub_view_enter(fs);
	int ret = inode_has_extents_impl(fs, subvol, ino);

	ub_view_exit(fs, in);
	return ret;
}
