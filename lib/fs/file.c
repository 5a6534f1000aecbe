/* SPDX-License-Identifier: MIT */
/* File contents: inline, regular, prealloc, hole and compressed extents. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include "ubtrfs/compress.h"
#include "ubtrfs/fs.h"
#include "items.h"

#define FE(field, p) UB_GET(btrfs_file_extent_item, field, p)
#define FE_INLINE_START UB_FILE_EXTENT_INLINE_DATA_START
/* btrfs never compresses more than this into one extent */
#define MAX_UNCOMPRESSED (128U * 1024)

struct file_ctx {
	struct ub_fs *fs;
	uint64_t subvol, ino;
	bool verify;
	uint8_t *buf;    /* the caller's buffer, file offset `off` at buf[0] */
	uint64_t off, end;
	struct ub_read_report *rep;
	int err;
};

static void report_bad(struct file_ctx *c, uint64_t foff, uint64_t len, uint64_t logical, const char *what)
{
	/* only what this request covers: an extent may reach past it on either side */
	uint64_t s = foff > c->off ? foff : c->off, e = foff + len < c->end ? foff + len : c->end;

	if (len && s >= e)
		return;
	if (len) {
		foff = s;
		len = e - s;
	}
	ub_err(&c->fs->log, "subvol %llu ino %llu file offset %llu length %llu (logical %llu): %s",
	       (unsigned long long)c->subvol, (unsigned long long)c->ino, (unsigned long long)foff,
	       (unsigned long long)len, (unsigned long long)logical, what);
	if (c->rep) {
		if (!c->rep->bad_bytes || foff < c->rep->first_bad_offset)
			c->rep->first_bad_offset = foff;
		c->rep->bad_bytes += len;
	}
	c->err = -EIO;
}

/* Copy `src` (file bytes starting at file offset `at`, `n` long) into the part of the request it overlaps. */
static void place(struct file_ctx *c, uint64_t at, const uint8_t *src, uint64_t n)
{
	uint64_t s = at > c->off ? at : c->off;
	uint64_t e = at + n < c->end ? at + n : c->end;

	if (s < e)
		memcpy(c->buf + (s - c->off), src + (s - at), e - s);
}

static int read_inline(struct file_ctx *c, const struct ub_key *key, const uint8_t *d, uint32_t size)
{
	uint64_t ram = FE(ram_bytes, d);
	int comp = (int)FE(compression, d);
	const uint8_t *data = d + FE_INLINE_START;
	uint32_t dlen = size - FE_INLINE_START;
	uint8_t *tmp;
	size_t produced = 0;
	char why[128];

	if (comp == UB_COMPRESS_NONE) {
		place(c, key->offset, data, dlen < ram ? dlen : ram);
		return 0;
	}
	if (ram > MAX_UNCOMPRESSED) {
		report_bad(c, key->offset, 0, 0, "inline extent claims too large a decompressed size");
		return 0;
	}
	tmp = calloc(1, ram ? ram : 1);
	if (!tmp)
		return -ENOMEM;
	if (ub_decompress(comp, data, dlen, tmp, ram, c->fs->vol->sectorsize, &produced, why, sizeof(why)))
		report_bad(c, key->offset, ram, 0, why);
	else
		place(c, key->offset, tmp, ram);
	free(tmp);
	return 0;
}

static int read_plain(struct file_ctx *c, uint64_t foff, uint64_t num, uint64_t logical)
{
	const uint32_t ss = c->fs->vol->sectorsize;
	uint64_t s = foff > c->off ? foff : c->off, e = foff + num < c->end ? foff + num : c->end;
	uint64_t ls, le, alen;
	uint8_t *tmp, *bad;
	bool direct;
	int ret;

	if (s >= e)
		return 0;
	/* the sector-aligned logical range behind [s, e) */
	ls = logical + (s - foff);
	le = logical + (e - foff);
	alen = ((le + ss - 1) / ss) * ss - (ls / ss) * ss;
	/* aligned requests (the common case) are read straight into the caller's buffer */
	direct = ls % ss == 0 && alen == e - s;
	tmp = direct ? c->buf + (s - c->off) : malloc(alen);
	bad = malloc(alen / ss + 1);
	if (!tmp || !bad) {
		if (!direct)
			free(tmp);
		free(bad);
		return -ENOMEM;
	}
	ret = ub_data_read(c->fs, (ls / ss) * ss, alen, tmp, c->verify, bad);
	if (ret && ret != -EIO)
		goto out;
	if (!direct)
		memcpy(c->buf + (s - c->off), tmp + (ls % ss), e - s);
	if (ret == -EIO) {
		/* one message per run of bad sectors, in file offsets clipped to the request */
		uint64_t n = alen / ss, base = (ls / ss) * ss;
		for (uint64_t i = 0; i < n; i++) {
			uint64_t j = i, rs, re;
			if (!bad[i])
				continue;
			while (j < n && bad[j])
				j++;
			rs = base + i * ss < ls ? ls : base + i * ss;
			re = base + j * ss > le ? le : base + j * ss;
			report_bad(c, foff + (rs - logical), re - rs, rs, "checksum mismatch or read error on every copy");
			i = j;
		}
	}
	ret = 0;
out:
	if (!direct)
		free(tmp);
	free(bad);
	return ret;
}

static int read_compressed(struct file_ctx *c, const struct ub_key *key, const uint8_t *d)
{
	const uint32_t ss = c->fs->vol->sectorsize;
	uint64_t dbytenr = FE(disk_bytenr, d), dlen = FE(disk_num_bytes, d);
	uint64_t eoff = FE(offset, d), num = FE(num_bytes, d), ram = FE(ram_bytes, d);
	uint8_t *in = NULL, *out = NULL, *bad = NULL;
	size_t produced = 0;
	char why[160];
	int ret = 0;

	if (key->offset + num <= c->off || key->offset >= c->end)
		return 0;
	if (ram > MAX_UNCOMPRESSED || dlen > MAX_UNCOMPRESSED || dlen % ss || dbytenr % ss || !dlen ||
	    eoff > ram || num > ram - eoff) {
		report_bad(c, key->offset, num, dbytenr, "compressed extent has invalid sizes");
		return 0;
	}
	in = malloc(dlen);
	out = calloc(1, ram ? ram : 1);
	bad = malloc(dlen / ss);
	if (!in || !out || !bad) {
		ret = -ENOMEM;
		goto out;
	}
	ret = ub_data_read(c->fs, dbytenr, dlen, in, c->verify, bad);
	if (ret == -EIO) {
		report_bad(c, key->offset, num, dbytenr, "compressed data unreadable on every copy");
		ret = 0;
		goto out;
	}
	if (ret)
		goto out;
	if (ub_decompress((int)FE(compression, d), in, dlen, out, ram, ss, &produced, why, sizeof(why))) {
		report_bad(c, key->offset, num, dbytenr, why);
		goto out;
	}
	place(c, key->offset, out + eoff, num);
out:
	free(in);
	free(out);
	free(bad);
	return ret;
}

static int read_extent(struct file_ctx *c, const struct ub_key *key, const uint8_t *d, uint32_t size)
{
	int type = (int)FE(type, d);

	if (type == BTRFS_FILE_EXTENT_INLINE)
		return read_inline(c, key, d, size);
	if (size < sizeof(struct btrfs_file_extent_item))
		return -EUCLEAN;
	if (type == BTRFS_FILE_EXTENT_PREALLOC || FE(disk_bytenr, d) == 0)
		return 0; /* reads as zeros, which the buffer already holds */
	if (FE(compression, d) != UB_COMPRESS_NONE)
		return read_compressed(c, key, d);
	return read_plain(c, key->offset, FE(num_bytes, d), FE(disk_bytenr, d) + FE(offset, d));
}

int ub_file_read(struct ub_fs *fs, uint64_t subvol, uint64_t ino, uint64_t off, uint64_t len, void *buf,
		 uint64_t *got, struct ub_read_report *rep)
{
	struct ub_inode inode;
	struct ub_icur cur;
	struct ub_key key;
	struct file_ctx c;
	int ret;

	*got = 0;
	ret = ub_inode_read(fs, subvol, ino, &inode);
	if (ret)
		return ret;
	if (off >= inode.size)
		return 0;
	if (len > inode.size - off)
		len = inode.size - off;
	memset(buf, 0, len);
	ret = ub_icur_open(fs, subvol, ino, &cur);
	if (ret)
		return ret;
	c = (struct file_ctx){ fs, subvol, ino, !(inode.flags & UB_INODE_NODATASUM), buf, off, off + len, rep, 0 };
	/* the extent covering `off` starts at or before it */
	ret = ub_icur_seek_le(&cur, BTRFS_EXTENT_DATA_KEY, off);
	if (ret == 0) {
		ub_icur_key(&cur, &key);
		if (key.type != BTRFS_EXTENT_DATA_KEY)
			ret = ub_icur_next(&cur);
	} else if (ret == 1) {
		ret = ub_icur_seek(&cur, BTRFS_EXTENT_DATA_KEY, 0);
	}
	while (ret == 0) {
		const uint8_t *d;
		uint32_t size;

		ub_icur_key(&cur, &key);
		if (key.type != BTRFS_EXTENT_DATA_KEY || key.offset >= c.end)
			break;
		d = ub_icur_data(&cur, &size);
		ret = read_extent(&c, &key, d, size);
		if (ret)
			break;
		ret = ub_icur_next(&cur);
	}
	ub_icur_close(&cur);
	if (ret < 0)
		return ret;
	*got = len;
	return c.err;
}
