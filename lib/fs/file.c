/* SPDX-License-Identifier: MIT */
/* File contents: inline, regular, prealloc, hole and compressed extents. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include "fs/compress.h"
#include "ubtrfs/fs.h"
#include "decomp_pool.h"
#include "fs_priv.h"
#include "items.h"

#define FE(field, p) UB_GET(btrfs_file_extent_item, field, p)
#define FE_INLINE_START UB_FILE_EXTENT_INLINE_DATA_START
/* btrfs never compresses more than this into one extent */
#define MAX_UNCOMPRESSED (128U * 1024)
/*
 * Compressed extents one read call has in flight: read and checked, waiting
 * for (or being decoded by) the workers. Each holds two 128 KiB buffers, so a
 * call uses at most 2 MiB for them, whatever the request's size.
 */
#define DC_DEPTH 8
/* Requests from this size on read ahead past their end (see ub_file_read). */
#define READ_AHEAD_MIN (512U * 1024U)

/* The most sectors a compressed extent has (btrfs sectors are 4 KiB at least). */
#define DC_MAX_SECTORS (MAX_UNCOMPRESSED / 4096)

/* A compressed extent on its way: its job, buffers, and where its bytes go. */
struct dc_slot {
	struct ub_dc_job job;
	uint8_t *in, *out, *bad;
	uint64_t key_off, num, eoff, dbytenr, dlen;
	bool direct; /* decoded straight into the caller's buffer */
	bool unzeroed; /* its part of the buffer was not cleared first: its bytes (or zeros) fill it */
	/*
	 * Read by the worker that decodes it, against these checksums: the
	 * reading thread only looks them up. Anything short of good is read
	 * again by dc_finish_oldest, in file order, with ub_data_read's messages.
	 */
	bool worker_reads;
	uint8_t csums[DC_MAX_SECTORS * UB_CSUM_SIZE_MAX], have[DC_MAX_SECTORS];
	struct ub_dc_ahead *ahead; /* read by an earlier call: its job and buffers stand in for these */
};

struct file_ctx {
	struct ub_fs *fs;
	uint64_t subvol, ino;
	bool verify;
	uint8_t *buf;    /* the caller's buffer, file offset `off` at buf[0] */
	uint64_t off, end;
	struct ub_read_report *rep;
	int err;
	uint64_t key_off;    /* key offset of the extent being read */
	uint64_t corrupt_at; /* file offset of a corrupt extent item, UINT64_MAX while none */
	/* compressed extents in flight, in file order: slots[(dc_head + i) % DC_DEPTH], i < dc_count */
	struct ub_dc_pool *pool;
	struct dc_slot slots[DC_DEPTH];
	unsigned int dc_head, dc_count;
	uint64_t covered; /* where the extent items before the current one reach */
	/*
	 * The buffer is cleared lazily: below `zeroed` (a file offset) every byte
	 * is zero or an extent's; an extent that fills its part whole (a decoded
	 * compressed extent) is not cleared first.
	 */
	uint64_t zeroed;
	int fatal; /* an error a finished extent met that ends the read (as a failed read_extent would) */
	/* the committed extent tree, part of a read-ahead entry's key; have_era false: no read-ahead */
	struct ub_root era;
	bool have_era, took_ahead;
};

/* A cheap fingerprint of a message, to tell repeats of one error apart from new ones. */
static uint32_t why_hash(const char *s)
{
	uint32_t h = 2166136261u;

	while (*s)
		h = (h ^ (uint8_t)*s++) * 16777619u;
	return h;
}

void ub_read_report_flush(struct ub_fs *fs, struct ub_read_report *rep)
{
	if (!rep || !rep->repeats)
		return;
	ub_err(&fs->log, "... and %llu more like this (up to file offset %llu)",
	       (unsigned long long)rep->repeats, (unsigned long long)rep->last_end);
	rep->repeats = 0;
}

/*
 * Unreadable bytes: logged, counted and left as zeros. A large bad extent is
 * met again by every chunk-sized read that overlaps it; those repeats of one
 * error (same inode, same extent, same reason, continuing where the last one
 * ended) are counted, not printed, and ub_read_report_flush() sums them up.
 */
static void report_bad(struct file_ctx *c, uint64_t key_off, uint64_t foff, uint64_t len, uint64_t logical,
		       const char *what)
{
	struct ub_read_report *rep = c->rep;

	if (len) {
		/* only what this request covers: an extent may reach past it on either side */
		uint64_t fe, s = foff > c->off ? foff : c->off, e;

		if (__builtin_add_overflow(foff, len, &fe))
			fe = UINT64_MAX;
		e = fe < c->end ? fe : c->end;
		if (s >= e)
			return;
		foff = s;
		len = e - s;
	}
	c->err = -EIO;
	if (rep && rep->bad_range)
		rep->bad_range(rep->bad_arg, foff, len, what);
	if (rep) {
		uint32_t h = why_hash(what);

		if (!rep->bad_bytes || foff < rep->first_bad_offset)
			rep->first_bad_offset = foff;
		rep->bad_bytes += len;
		if (rep->seen && rep->last_subvol == c->subvol && rep->last_ino == c->ino &&
		    rep->last_key == key_off && rep->last_why == h && rep->last_end == foff) {
			rep->repeats++;
			rep->last_end = foff + len;
			return;
		}
		ub_read_report_flush(c->fs, rep);
		rep->seen = true;
		rep->last_subvol = c->subvol;
		rep->last_ino = c->ino;
		rep->last_key = key_off;
		rep->last_why = h;
		rep->last_end = foff + len;
	}
	ub_err(&c->fs->log, "subvol %llu ino %llu file offset %llu length %llu (logical %llu): %s",
	       (unsigned long long)c->subvol, (unsigned long long)c->ino, (unsigned long long)foff,
	       (unsigned long long)len, (unsigned long long)logical, what);
}

/*
 * Bytes delivered without a checksum, in a file that requires them (what the
 * kernel calls a checksum hole and fails with EIO): named once per extent,
 * and counted.
 */
static void report_unverified(struct file_ctx *c, uint64_t key_off, uint64_t foff, uint64_t len, uint64_t logical,
			      bool compressed)
{
	struct ub_read_report *rep = c->rep;
	uint64_t fe, s = foff > c->off ? foff : c->off, e;

	if (__builtin_add_overflow(foff, len, &fe))
		fe = UINT64_MAX;
	e = fe < c->end ? fe : c->end;
	if (s >= e)
		return;
	if (rep) {
		if (!rep->unverified_bytes || s < rep->first_unverified_offset)
			rep->first_unverified_offset = s;
		rep->unverified_bytes += e - s;
		if (rep->unverified_seen && rep->unverified_subvol == c->subvol && rep->unverified_ino == c->ino &&
		    rep->unverified_key == key_off)
			return;
		rep->unverified_seen = true;
		rep->unverified_subvol = c->subvol;
		rep->unverified_ino = c->ino;
		rep->unverified_key = key_off;
	}
	ub_err(&c->fs->log, "subvol %llu ino %llu file offset %llu length %llu (logical %llu%s): no data checksum, "
	       "although the inode requires them (a checksum hole, which the kernel reads as an I/O error): "
	       "delivered as read, not verified", (unsigned long long)c->subvol, (unsigned long long)c->ino,
	       (unsigned long long)s, (unsigned long long)(e - s),
	       (unsigned long long)(compressed ? logical : logical + (s - foff)), compressed ? ", compressed" : "");
}

static void dc_drain(struct file_ctx *c);

/*
 * A file extent item that contradicts the format: named once, and the read
 * stops there (-EUCLEAN), since the sizes it claims cannot be trusted to bound
 * anything (2^60 bytes of zeros is not a useful answer).
 */
static int corrupt(struct file_ctx *c, const struct ub_key *key, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int corrupt(struct file_ctx *c, const struct ub_key *key, const char *fmt, ...)
{
	char why[200];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	dc_drain(c);
	ub_read_report_flush(c->fs, c->rep);
	ub_err(&c->fs->log, "subvol %llu ino %llu file offset %llu: corrupt file extent item (key (%llu EXTENT_DATA %llu)): %s",
	       (unsigned long long)c->subvol, (unsigned long long)c->ino, (unsigned long long)key->offset,
	       (unsigned long long)key->objectid, (unsigned long long)key->offset, why);
	c->corrupt_at = key->offset;
	return -EUCLEAN;
}

/* Zeros into the part of the request [at, at + n) overlaps. */
static void zero_range(struct file_ctx *c, uint64_t at, uint64_t n)
{
	uint64_t s = at > c->off ? at : c->off;
	uint64_t e = n > c->end - at ? c->end : at + n;

	if (at < c->end && s < e)
		memset(c->buf + (s - c->off), 0, e - s);
}

/* Every byte of the request below file offset `to` zero or an extent's. */
static void zero_to(struct file_ctx *c, uint64_t to)
{
	if (to > c->zeroed) {
		zero_range(c, c->zeroed, to - c->zeroed);
		c->zeroed = to;
	}
}

/* Copy `src` (file bytes starting at file offset `at`, `n` long) into the part of the request it overlaps. */
static void place(struct file_ctx *c, uint64_t at, const uint8_t *src, uint64_t n)
{
	uint64_t s = at > c->off ? at : c->off;
	uint64_t e = n > c->end - at ? c->end : at + n;

	if (at < c->end && s < e)
		memcpy(c->buf + (s - c->off), src + (s - at), e - s);
}

/*
 * The oldest compressed extent in flight, finished: its bytes placed or its
 * error reported. Always in file order, so the output and the messages are
 * those of reading one extent after the other.
 */
/*
 * An extent its worker could not read whole and good: read here as any
 * extent is (every copy, sector by sector, each failure named), then
 * decoded on this thread. False when nothing is left to decode (named, or
 * an error that ends the read).
 */
static bool read_again(struct file_ctx *c, struct dc_slot *sl)
{
	const uint32_t ss = c->fs->vol->sectorsize;
	struct ub_dc_job *job = &sl->job;
	int ret = ub_data_read(c->fs, sl->dbytenr, sl->dlen, sl->in, c->verify, sl->bad,
			       &(struct ub_data_owner){ .subvol = c->subvol, .ino = c->ino, .foff = sl->key_off,
							.logical = sl->dbytenr, .compressed = true });

	if (ret) {
		if (sl->direct || sl->unzeroed)
			zero_range(c, sl->key_off, sl->num);
		if (ret == -EIO)
			report_bad(c, sl->key_off, sl->key_off, sl->num, sl->dbytenr, "compressed data unreadable on every copy");
		else if (!c->fatal)
			c->fatal = ret;
		return false;
	}
	/* the stream is decoded whole: one unverified sector leaves every byte it gives unverified */
	if (c->verify && memchr(sl->bad, 2, sl->dlen / ss))
		report_unverified(c, sl->key_off, sl->key_off, sl->num, sl->dbytenr, true);
	job->ret = ub_decompress(job->type, job->in, job->inlen, job->out, job->outlen, job->sectorsize,
				 &job->produced, job->why, sizeof(job->why));
	return true;
}

static void dc_finish_oldest(struct file_ctx *c)
{
	struct dc_slot *sl = &c->slots[c->dc_head];
	struct ub_dc_job *job = sl->ahead ? &sl->ahead->job : &sl->job;

	ub_dc_wait(c->pool, job);
	if (!sl->ahead && sl->worker_reads && job->ret == -EAGAIN && !read_again(c, sl)) {
		/* named already (or the read ends): nothing to place */
	} else if (job->ret) {
		/* a direct decode left what it made of the bad stream where zeros belong; nothing cleared the rest */
		if (sl->direct || sl->unzeroed)
			zero_range(c, sl->key_off, sl->num);
		report_bad(c, sl->key_off, sl->key_off, sl->num, sl->dbytenr, job->why);
	} else if (!sl->direct) {
		place(c, sl->key_off, (sl->ahead ? sl->ahead->out : sl->out) + sl->eoff, sl->num);
	}
	ub_dc_ahead_free(c->pool, sl->ahead);
	sl->ahead = NULL;
	c->dc_head = (c->dc_head + 1) % DC_DEPTH;
	c->dc_count--;
}

/* Everything in flight finished: before any other extent is read or reported, and at the end. */
static void dc_drain(struct file_ctx *c)
{
	while (c->dc_count)
		dc_finish_oldest(c);
}

static void dc_free(struct file_ctx *c)
{
	dc_drain(c);
	for (unsigned int i = 0; i < DC_DEPTH; i++) {
		ub_dc_buf_put(c->pool, c->slots[i].in);
		ub_dc_buf_put(c->pool, c->slots[i].out);
		free(c->slots[i].bad);
	}
}

static int read_inline(struct file_ctx *c, const struct ub_key *key, const uint8_t *d, uint32_t size)
{
	const uint32_t ss = c->fs->vol->sectorsize;
	uint64_t ram = FE(ram_bytes, d);
	int comp = (int)FE(compression, d);
	const uint8_t *data = d + FE_INLINE_START;
	uint32_t dlen = size - FE_INLINE_START;
	uint8_t *tmp;
	size_t produced = 0;
	char why[160];

	/* the kernel's tree checker: an inline extent is the whole file, from offset 0 */
	if (key->offset != 0)
		return corrupt(c, key, "inline extent at a non-zero file offset");
	if (comp == UB_COMPRESS_NONE) {
		if (ram != dlen)
			return corrupt(c, key, "inline extent claims %llu bytes but holds %u",
				       (unsigned long long)ram, (unsigned)dlen);
		place(c, 0, data, dlen);
		return 0;
	}
	/* data is only ever inlined when it fits one sector (max_inline is capped by it) */
	if (ram > ss)
		return corrupt(c, key, "compressed inline extent claims %llu bytes, above the %u-byte sector",
			       (unsigned long long)ram, (unsigned)ss);
	if (dlen == 0)
		return corrupt(c, key, "compressed inline extent holds no data");
	tmp = malloc(ram ? ram : 1);
	if (!tmp)
		return -ENOMEM;
	if (ub_decompress(comp, data, dlen, tmp, ram, ss, &produced, why, sizeof(why)))
		report_bad(c, 0, 0, ram, 0, why);
	else if (produced < ram)
		/* unlike a regular extent's, an inline stream that ends early is an error to the kernel */
		report_bad(c, 0, produced, ram - produced, 0, "compressed inline extent ends before its ram_bytes");
	else
		place(c, 0, tmp, ram);
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

	/* the caller checked foff + num and logical + num for overflow */
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
	ret = ub_data_read(c->fs, (ls / ss) * ss, alen, tmp, c->verify, bad,
			   &(struct ub_data_owner){ .subvol = c->subvol, .ino = c->ino, .foff = foff, .logical = logical });
	if (ret && ret != -EIO)
		goto out;
	if (!direct)
		memcpy(c->buf + (s - c->off), tmp + (ls % ss), e - s);
	{
		/* one message per run of bad (or unverified) sectors, in file offsets clipped to the request */
		uint64_t n = alen / ss, base = (ls / ss) * ss;
		for (uint64_t i = 0; i < n; i++) {
			uint64_t j = i, rs, re;
			if (!bad[i])
				continue;
			while (j < n && bad[j] == bad[i])
				j++;
			rs = base + i * ss < ls ? ls : base + i * ss;
			re = base + j * ss > le ? le : base + j * ss;
			if (bad[i] == 1)
				report_bad(c, c->key_off, foff + (rs - logical), re - rs, rs,
					   "checksum mismatch or read error on every copy");
			else
				report_unverified(c, c->key_off, foff + (rs - logical), re - rs, rs, false);
			i = j - 1;
		}
	}
	ret = 0;
out:
	if (!direct)
		free(tmp);
	free(bad);
	return ret;
}

/*
 * The read-ahead key of a regular compressed extent item, false when it is
 * none or its sizes are not safe to read and decode (the read that reaches
 * the item checks and names what is wrong with it).
 */
static bool ahead_key(const struct file_ctx *c, const uint8_t *d, struct ub_dc_ahead *k)
{
	const uint32_t ss = c->fs->vol->sectorsize;
	uint64_t dbytenr = FE(disk_bytenr, d), dlen = FE(disk_num_bytes, d), ram = FE(ram_bytes, d), end;
	int comp = (int)FE(compression, d);

	if (!c->have_era || FE(type, d) != BTRFS_FILE_EXTENT_REG || comp == UB_COMPRESS_NONE ||
	    !ub_compress_name(comp) || FE(encryption, d) || FE(other_encoding, d))
		return false;
	if (!dbytenr || !dlen || !ram || dbytenr % ss || dlen % ss || dlen > MAX_UNCOMPRESSED ||
	    ram > MAX_UNCOMPRESSED || __builtin_add_overflow(dbytenr, dlen, &end))
		return false;
	*k = (struct ub_dc_ahead){ .dbytenr = dbytenr, .dlen = dlen, .ram = ram, .type = comp, .verify = c->verify,
				   .era_bytenr = c->era.bytenr, .era_gen = c->era.generation };
	return true;
}

/* An entry of ours that never reached the workers. */
static void ahead_drop(struct ub_dc_pool *pool, struct ub_dc_ahead *a)
{
	ub_dc_buf_put(pool, a->in);
	ub_dc_buf_put(pool, a->out);
	free(a);
}

/*
 * After a request that ended inside a file's compressed extents: the next
 * few (the cursor is at the first item past the request) are read, checked
 * and queued for the workers, so that they decode while the caller handles
 * this request's bytes. Silent: whatever is odd or unreadable is left for the
 * call that reaches it, which reports it as always.
 */
static void read_ahead(struct file_ctx *c, struct ub_icur *cur)
{
	const uint32_t ss = c->fs->vol->sectorsize;
	int ret = 0;

	dc_drain(c);
	for (int n = 0; n < UB_DC_AHEAD && ret == 0; n++, ret = ub_icur_next(cur)) {
		struct ub_dc_ahead k, *a;
		struct ub_key key;
		const uint8_t *d;
		uint32_t size;

		ub_icur_key(cur, &key);
		if (key.type != BTRFS_EXTENT_DATA_KEY)
			return;
		d = ub_icur_data(cur, &size);
		if (size != sizeof(struct btrfs_file_extent_item) || !ahead_key(c, d, &k))
			return;
		if (ub_dc_ahead_has(c->pool, &k))
			continue;
		a = malloc(sizeof(*a));
		if (!a)
			return;
		*a = k;
		a->in = ub_dc_buf_get(c->pool);
		a->out = ub_dc_buf_get(c->pool);
		if (!a->in || !a->out || ub_data_read_ahead(c->fs, k.dbytenr, k.dlen, a->in, c->verify)) {
			ahead_drop(c->pool, a);
			return;
		}
		a->job = (struct ub_dc_job){ .type = k.type, .in = a->in, .inlen = k.dlen, .out = a->out,
					     .outlen = k.ram, .sectorsize = ss };
		ub_dc_submit(c->pool, &a->job);
		ub_dc_ahead_put(c->pool, a);
	}
}

/*
 * A compressed extent: read and checked here, decoded by the workers while
 * the next extents are read, placed by dc_finish_oldest.
 */
static int read_compressed(struct file_ctx *c, const struct ub_key *key, const uint8_t *d)
{
	const uint32_t ss = c->fs->vol->sectorsize;
	uint64_t dbytenr = FE(disk_bytenr, d), dlen = FE(disk_num_bytes, d);
	uint64_t num = FE(num_bytes, d), ram = FE(ram_bytes, d);
	struct ub_dc_ahead k;
	struct dc_slot *sl;
	int ret;

	/* sizes were checked against the format by check_extent(): dlen and ram are at most 128 KiB */
	if (key->offset + num <= c->off || key->offset >= c->end)
		return 0;
	if (c->dc_count == DC_DEPTH)
		dc_finish_oldest(c);
	if (!c->pool) {
		c->pool = ub_dc_pool_get(c->fs);
		/* read-ahead is keyed by the committed extent tree: the live view neither parks nor takes */
		c->have_era = c->fs->view != UB_VIEW_LIVE && c->pool && c->fs->extent_tree &&
			      !ub_fs_committed(c->fs, c->fs->extent_tree, &c->era);
	}
	sl = &c->slots[(c->dc_head + c->dc_count) % DC_DEPTH];
	sl->key_off = key->offset;
	sl->num = num;
	sl->eoff = FE(offset, d);
	sl->dbytenr = dbytenr;
	sl->unzeroed = false;
	sl->worker_reads = false;
	if (ahead_key(c, d, &k) && (sl->ahead = ub_dc_ahead_take(c->pool, &k)) != NULL) {
		/* an earlier call read it, checked it and has it decoding already: placed whole, or zeros */
		sl->direct = false;
		if (key->offset >= c->zeroed) {
			zero_to(c, key->offset);
			sl->unzeroed = true;
			c->zeroed = key->offset + num;
		} else {
			zero_to(c, key->offset + num);
		}
		c->took_ahead = true;
		c->dc_count++;
		return 0;
	}
	/*
	 * The whole extent inside the request and nothing before it reaching in:
	 * decode into the caller's buffer. Its part of the buffer is then written
	 * by this job alone, as the zeros the request started with.
	 */
	sl->direct = FE(offset, d) == 0 && num == ram && key->offset >= c->off && c->end - key->offset >= num &&
		     key->offset >= c->covered && key->offset >= c->zeroed;
	/* a direct decode writes all of its part (zeros past what the stream makes); anything else is cleared */
	zero_to(c, sl->direct ? key->offset : key->offset + num);
	if (!sl->in)
		sl->in = ub_dc_buf_get(c->pool);
	if (!sl->out && !sl->direct)
		sl->out = ub_dc_buf_get(c->pool);
	if (!sl->bad)
		sl->bad = malloc(MAX_UNCOMPRESSED / ss + 1);
	if (!sl->in || (!sl->out && !sl->direct) || !sl->bad)
		return -ENOMEM;
	sl->dlen = dlen;
	/* what the stream does not produce comes back as zeros, as the kernel reads it */
	sl->job = (struct ub_dc_job){ .type = (int)FE(compression, d), .in = sl->in, .inlen = dlen,
				      .out = sl->direct ? c->buf + (key->offset - c->off) : sl->out,
				      .outlen = ram, .sectorsize = ss };
	/*
	 * The worker reads it too (this thread only looks its checksums up), so
	 * that reading and checking go on on every core; a failed look-up is the
	 * read's as before, here and now.
	 */
	sl->worker_reads = dlen / ss <= DC_MAX_SECTORS &&
			   (!c->verify || !ub_data_csums(c->fs, dbytenr, dlen, sl->csums, sl->have));
	if (sl->worker_reads) {
		sl->job.read_fs = c->fs;
		sl->job.read_logical = dbytenr;
		sl->job.read_buf = sl->in;
		sl->job.read_verify = c->verify;
		sl->job.read_csums = sl->csums;
		sl->job.read_have = sl->have;
	} else {
		ret = ub_data_read(c->fs, dbytenr, dlen, sl->in, c->verify, sl->bad,
				   &(struct ub_data_owner){ .subvol = c->subvol, .ino = c->ino, .foff = key->offset,
							    .logical = dbytenr, .compressed = true });
		if (ret == -EIO) {
			dc_drain(c);
			if (sl->direct)
				zero_range(c, key->offset, num);
			report_bad(c, key->offset, key->offset, num, dbytenr, "compressed data unreadable on every copy");
			return 0;
		}
		if (ret)
			return ret;
		/* the stream is decoded whole: one unverified sector leaves every byte it gives unverified */
		if (c->verify && memchr(sl->bad, 2, dlen / ss))
			report_unverified(c, key->offset, key->offset, num, dbytenr, true);
	}
	ub_dc_submit(c->pool, &sl->job);
	if (sl->direct)
		c->zeroed = key->offset + num;
	c->dc_count++;
	return 0;
}

/*
 * Every size and sum of a regular or prealloc extent against what the format
 * allows, before any of it is used to size a buffer or address a read.
 */
static int check_extent(struct file_ctx *c, const struct ub_key *key, const uint8_t *d, uint32_t size)
{
	const struct ub_volume *vol = c->fs->vol;
	const uint32_t ss = vol->sectorsize;
	uint64_t dbytenr = FE(disk_bytenr, d), dlen = FE(disk_num_bytes, d);
	uint64_t eoff = FE(offset, d), num = FE(num_bytes, d), ram = FE(ram_bytes, d), sum;
	int type = (int)FE(type, d), comp = (int)FE(compression, d);
	const struct ub_chunk *chunk;

	if (size != sizeof(struct btrfs_file_extent_item))
		return corrupt(c, key, "item of %u bytes, a %s extent item is %zu", (unsigned)size,
			       type == BTRFS_FILE_EXTENT_REG ? "regular" : "prealloc",
			       sizeof(struct btrfs_file_extent_item));
	if (__builtin_add_overflow(key->offset, num, &sum))
		return corrupt(c, key, "num_bytes %llu runs past the largest file offset",
			       (unsigned long long)num);
	if (num % ss || eoff % ss || dbytenr % ss || dlen % ss)
		return corrupt(c, key, "num_bytes %llu, offset %llu, disk_bytenr %llu or disk_num_bytes %llu "
			       "not a multiple of the %u-byte sector", (unsigned long long)num,
			       (unsigned long long)eoff, (unsigned long long)dbytenr, (unsigned long long)dlen,
			       (unsigned)ss);
	if (type == BTRFS_FILE_EXTENT_PREALLOC && comp != UB_COMPRESS_NONE)
		return corrupt(c, key, "preallocated extent claims compression %d", comp);
	if (dbytenr == 0)
		return 0; /* a hole: it only claims file offsets, checked above */
	if (dlen == 0)
		return corrupt(c, key, "extent at logical %llu has disk_num_bytes 0", (unsigned long long)dbytenr);
	if (__builtin_add_overflow(dbytenr, dlen, &sum))
		return corrupt(c, key, "disk_bytenr %llu + disk_num_bytes %llu overflows",
			       (unsigned long long)dbytenr, (unsigned long long)dlen);
	if (comp != UB_COMPRESS_NONE) {
		/* btrfs compresses at most 128 KiB into at most 128 KiB */
		if (ram > MAX_UNCOMPRESSED || dlen > MAX_UNCOMPRESSED)
			return corrupt(c, key, "compressed extent claims ram_bytes %llu, disk_num_bytes %llu "
				       "(at most %u each)", (unsigned long long)ram, (unsigned long long)dlen,
				       MAX_UNCOMPRESSED);
		if (eoff > ram || num > ram - eoff)
			return corrupt(c, key, "offset %llu + num_bytes %llu runs past the %llu bytes the "
				       "compressed extent holds", (unsigned long long)eoff,
				       (unsigned long long)num, (unsigned long long)ram);
	} else if (eoff > dlen || num > dlen - eoff) {
		/* the file's bytes are a slice of the disk extent: a reflink or a split never widens it */
		return corrupt(c, key, "offset %llu + num_bytes %llu runs past its %llu-byte disk extent at "
			       "logical %llu", (unsigned long long)eoff, (unsigned long long)num,
			       (unsigned long long)dlen, (unsigned long long)dbytenr);
	}
	/* a data extent (preallocated too) never straddles block groups */
	chunk = ub_volume_find_chunk(vol, dbytenr);
	if (chunk && dlen > chunk->logical + chunk->length - dbytenr)
		return corrupt(c, key, "disk extent at logical %llu length %llu runs past the end of its chunk "
			       "(logical %llu length %llu)", (unsigned long long)dbytenr, (unsigned long long)dlen,
			       (unsigned long long)chunk->logical, (unsigned long long)chunk->length);
	if (!chunk) {
		uint64_t total = 0;

		for (int i = 0; i < vol->nvdevs; i++)
			if (__builtin_add_overflow(total, vol->vdevs[i].total_bytes, &total))
				total = UINT64_MAX;
		if (dlen > total)
			return corrupt(c, key, "disk extent at logical %llu length %llu is larger than all devices "
				       "together (%llu bytes)", (unsigned long long)dbytenr,
				       (unsigned long long)dlen, (unsigned long long)total);
	}
	return 0;
}

static uint64_t max_u64(uint64_t a, uint64_t b)
{
	return a > b ? a : b;
}

/* Where an extent item's claim on file offsets ends (an inline extent holds its whole first sector). */
static uint64_t extent_end(const struct ub_fs *fs, const struct ub_key *key, const uint8_t *d)
{
	uint64_t n = FE(type, d) == BTRFS_FILE_EXTENT_INLINE ? fs->vol->sectorsize : FE(num_bytes, d), end;

	return __builtin_add_overflow(key->offset, n, &end) ? UINT64_MAX : end;
}

static int read_extent(struct file_ctx *c, const struct ub_key *key, const uint8_t *d, uint32_t size)
{
	int type, comp, ret;

	if (size < FE_INLINE_START)
		return corrupt(c, key, "item of %u bytes is shorter than a file extent header", (unsigned)size);
	type = (int)FE(type, d);
	comp = (int)FE(compression, d);
	if (type != BTRFS_FILE_EXTENT_INLINE && type != BTRFS_FILE_EXTENT_REG && type != BTRFS_FILE_EXTENT_PREALLOC)
		return corrupt(c, key, "unknown extent type %d", type);
	if (comp != UB_COMPRESS_NONE && !ub_compress_name(comp))
		return corrupt(c, key, "unknown compression type %d", comp);
	if (FE(encryption, d) || FE(other_encoding, d))
		return corrupt(c, key, "encryption %u / other encoding %u, which btrfs does not define",
			       (unsigned)FE(encryption, d), (unsigned)FE(other_encoding, d));
	if (type == BTRFS_FILE_EXTENT_INLINE) {
		dc_drain(c);
		zero_to(c, extent_end(c->fs, key, d));
		return read_inline(c, key, d, size);
	}
	ret = check_extent(c, key, d, size);
	if (ret)
		return ret;
	if (type == BTRFS_FILE_EXTENT_PREALLOC || FE(disk_bytenr, d) == 0)
		return 0; /* reads as zeros: the buffer is cleared where no extent writes */
	if (comp != UB_COMPRESS_NONE)
		return read_compressed(c, key, d);
	dc_drain(c);
	zero_to(c, extent_end(c->fs, key, d));
	c->key_off = key->offset;
	return read_plain(c, key->offset, FE(num_bytes, d), FE(disk_bytenr, d) + FE(offset, d));
}

static int file_read_inode_impl(struct ub_fs *fs, const struct ub_inode *inode, uint64_t off, uint64_t len, void *buf,
		       uint64_t *got, struct ub_read_report *rep)
{
	const uint64_t subvol = inode->subvol, ino = inode->ino;
	struct ub_icur cur;
	struct ub_key key;
	struct file_ctx c;
	uint64_t covered = 0; /* file offsets the extent items seen so far reach */
	bool more = false;    /* extent items go on past this request */
	int ret;

	*got = 0;
	if (off >= inode->size)
		return 0;
	if (len > inode->size - off)
		len = inode->size - off;
	ret = ub_icur_open(fs, subvol, ino, &cur);
	if (ret) {
		memset(buf, 0, len);
		return ret;
	}
	c = (struct file_ctx){ .fs = fs, .subvol = subvol, .ino = ino, .verify = !(inode->flags & UB_INODE_NODATASUM),
			       .buf = buf, .off = off, .end = off + len, .rep = rep, .corrupt_at = UINT64_MAX,
			       .zeroed = off };
	ret = ub_icur_seek_extent(&cur, off);
	while (ret == 0) {
		const uint8_t *d;
		uint32_t size;

		ub_icur_key(&cur, &key);
		if (key.type != BTRFS_EXTENT_DATA_KEY)
			break;
		if (key.offset >= c.end) {
			more = true;
			break;
		}
		d = ub_icur_data(&cur, &size);
		c.covered = covered;
		ret = read_extent(&c, &key, d, size);
		if (!ret)
			ret = c.fatal;
		if (ret)
			break;
		covered = max_u64(covered, extent_end(fs, &key, d));
		ret = ub_icur_next(&cur);
	}
	/*
	 * A large request, a file's start or one that used what the last call read ahead reads on
	 * (a small request somewhere in the middle is likely a random access, not a stream).
	 */
	if (ret == 0 && more && c.pool && !c.err && (c.took_ahead || off == 0 || len >= READ_AHEAD_MIN))
		read_ahead(&c, &cur);
	ub_icur_close(&cur);
	dc_free(&c);
	if (ret >= 0 && c.fatal)
		ret = c.fatal;
	/* holes, preallocated and unreadable ranges, and whatever no item reached */
	zero_to(&c, c.end);
	/*
	 * Without the no-holes feature every hole has an extent item of its own, so a file whose
	 * items stop short of its size contradicts itself; reading on would hand out zeros that
	 * nothing vouches for, up to any size the inode claims (2^60 bytes included).
	 */
	if (ret >= 0 && !more && !(fs->incompat & BTRFS_FEATURE_INCOMPAT_NO_HOLES) && covered < c.end) {
		ub_read_report_flush(fs, rep);
		ub_err(&fs->log, "subvol %llu ino %llu: no file extent item covers file offsets %llu..%llu of its "
		       "%llu bytes, and this filesystem (no-holes off) keeps an item for every hole: the size "
		       "is corrupt or items are missing; the file is read up to offset %llu",
		       (unsigned long long)subvol, (unsigned long long)ino,
		       (unsigned long long)max_u64(covered, off), (unsigned long long)inode->size,
		       (unsigned long long)inode->size, (unsigned long long)max_u64(covered, off));
		*got = covered > off ? covered - off : 0;
		return -EUCLEAN;
	}
	if (ret == -EUCLEAN && c.corrupt_at != UINT64_MAX) {
		/* what precedes the corrupt extent is good; nothing after it is delivered */
		*got = c.corrupt_at > off ? c.corrupt_at - off : 0;
		return ret;
	}
	if (ret < 0)
		return ret;
	*got = len;
	return c.err;
}

int ub_file_read_inode(struct ub_fs *fs, const struct ub_inode *inode, uint64_t off, uint64_t len, void *buf,
		       uint64_t *got, struct ub_read_report *rep)
{
	int in = ub_view_enter(fs);
	int ret = file_read_inode_impl(fs, inode, off, len, buf, got, rep);

	ub_view_exit(fs, in);
	return ret;
}

static int file_read_impl(struct ub_fs *fs, uint64_t subvol, uint64_t ino, uint64_t off, uint64_t len, void *buf,
		 uint64_t *got, struct ub_read_report *rep)
{
	struct ub_inode inode;
	int ret;

	*got = 0;
	ret = ub_inode_read(fs, subvol, ino, &inode);
	return ret ? ret : ub_file_read_inode(fs, &inode, off, len, buf, got, rep);
}

int ub_file_read(struct ub_fs *fs, uint64_t subvol, uint64_t ino, uint64_t off, uint64_t len, void *buf,
		 uint64_t *got, struct ub_read_report *rep)
{
	int in = ub_view_enter(fs);
	int ret = file_read_impl(fs, subvol, ino, off, len, buf, got, rep);

	ub_view_exit(fs, in);
	return ret;
}
