/* SPDX-License-Identifier: MIT */
/*
 * Decompression of btrfs compressed extents.
 *
 * The rules for what counts as valid follow what the Linux kernel accepts when
 * it reads an extent, so that we return the same bytes it would for anything it
 * can read, and an error (never a crash) for anything else.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libdeflate.h>
#include <lzo/lzo1x.h>
#define ZLIB_CONST
#include <zlib.h>
#include <zstd.h>
#include <zstd_errors.h>

#include "fs/compress.h"
#include "ubtrfs/format.h"

/* btrfs never compresses more than this much data into one extent. */
#define UB_MAX_COMPRESSED (128U * 1024U)
/* Size of the lzo total-length and segment-length fields. */
#define UB_LZO_LEN 4U
/*
 * btrfs writes zstd windows of at most 128 KiB; libzstd itself goes further.
 * 2^27 is what libzstd accepts by default and keeps a hostile frame from
 * asking for more memory than that.
 */
#define UB_ZSTD_WINDOWLOG_MAX 27

static void set_why(char *why, size_t whylen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void set_why(char *why, size_t whylen, const char *fmt, ...)
{
	va_list ap;

	if (!why || whylen == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(why, whylen, fmt, ap);
	va_end(ap);
}

/*
 * Decoder state kept per thread: a zstd context and an inflate stream cost
 * more to set up than a 128 KiB extent takes to decode, so each thread makes
 * them once and resets them per extent. Freed when the thread exits (the key's
 * destructor) or when it calls ub_decompress_release().
 */
struct decoders {
	ZSTD_DCtx *zstd;
	z_stream zlib;
	bool zlib_ready;
	struct libdeflate_decompressor *inflate_fast;
	uint8_t *lzo_seg; /* one sector of lzo output, UB_LZO_SEG_MAX bytes */
};

/* The largest sector size the lzo framing accepts. */
#define UB_LZO_SEG_MAX 65536U

static pthread_key_t decoders_key;
static pthread_once_t decoders_once = PTHREAD_ONCE_INIT;
static int decoders_key_err;
static int lzo_init_ret;

static void decoders_free(void *p)
{
	struct decoders *d = p;

	if (!d)
		return;
	ZSTD_freeDCtx(d->zstd);
	libdeflate_free_decompressor(d->inflate_fast);
	if (d->zlib_ready)
		inflateEnd(&d->zlib);
	free(d->lzo_seg);
	free(d);
}

static void decoders_setup(void)
{
	decoders_key_err = pthread_key_create(&decoders_key, decoders_free);
	lzo_init_ret = lzo_init();
}

/* This thread's decoders, made on first use; NULL when out of memory. */
static struct decoders *decoders_get(void)
{
	struct decoders *d;

	pthread_once(&decoders_once, decoders_setup);
	if (decoders_key_err)
		return NULL;
	d = pthread_getspecific(decoders_key);
	if (d)
		return d;
	d = calloc(1, sizeof(*d));
	if (!d)
		return NULL;
	if (pthread_setspecific(decoders_key, d)) {
		free(d);
		return NULL;
	}
	return d;
}

void ub_decompress_release(void)
{
	pthread_once(&decoders_once, decoders_setup);
	if (decoders_key_err)
		return;
	decoders_free(pthread_getspecific(decoders_key));
	pthread_setspecific(decoders_key, NULL);
}

/*
 * The kernel checks the two-byte zlib header itself and then inflates the raw
 * deflate data, which skips the adler32 trailer: a stream whose trailer is
 * missing or wrong still reads on Linux, so it must read here too.
 */
static int decompress_zlib(struct decoders *dec, const uint8_t *in, size_t inlen, uint8_t *out,
			   size_t outlen, size_t *produced, char *why, size_t whylen)
{
	z_stream *strm = &dec->zlib;
	size_t in_left, out_left;
	int wbits, zret, ret;
	unsigned int cmf, flg;

	if (inlen < 2) {
		set_why(why, whylen, "zlib: stream of %zu bytes has no header", inlen);
		return -EUCLEAN;
	}
	cmf = in[0];
	flg = in[1];
	if ((cmf & 0x0f) != Z_DEFLATED || (cmf >> 4) > 7 || ((cmf << 8) | flg) % 31 != 0) {
		set_why(why, whylen, "zlib: bad stream header %02x %02x", cmf, flg);
		return -EUCLEAN;
	}
	if (flg & 0x20) {
		set_why(why, whylen, "zlib: stream wants a preset dictionary");
		return -EUCLEAN;
	}
	wbits = -(int)((cmf >> 4) + 8);

	/*
	 * libdeflate decodes whole buffers about twice as fast as inflate. It
	 * only answers "the stream ended within outlen bytes", and always with a
	 * 32 KiB window, so it is tried for the streams the kernel writes (window
	 * 32 KiB) and trusted only on that success, which is then inflate's
	 * answer too. Anything else (a stream running past ram_bytes, a corrupt
	 * or truncated one) is decoded again by inflate, which says how far it got.
	 */
	if (cmf >> 4 == 7) {
		size_t got;

		if (!dec->inflate_fast)
			dec->inflate_fast = libdeflate_alloc_decompressor();
		if (dec->inflate_fast &&
		    libdeflate_deflate_decompress_ex(dec->inflate_fast, in + 2, inlen - 2, out, outlen, NULL,
						     &got) == LIBDEFLATE_SUCCESS) {
			*produced = got;
			return 0;
		}
	}

	if (!dec->zlib_ready) {
		memset(strm, 0, sizeof(*strm));
		if (inflateInit2(strm, wbits) != Z_OK) {
			set_why(why, whylen, "zlib: cannot set up inflate");
			return -ENOMEM;
		}
		dec->zlib_ready = true;
	} else if (inflateReset2(strm, wbits) != Z_OK) {
		set_why(why, whylen, "zlib: cannot reset inflate");
		return -ENOMEM;
	}
	/* the loop below hands out both buffers in slices, starting from empty ones */
	strm->avail_in = 0;
	strm->avail_out = 0;
	in_left = inlen - 2;
	out_left = outlen;
	strm->next_in = in + 2;
	strm->next_out = out;

	for (;;) {
		size_t in_before, out_before;

		/* zlib counts in uInt; feed size_t lengths through in slices. */
		if (strm->avail_in == 0) {
			strm->avail_in = in_left > UINT_MAX ? UINT_MAX : (uInt)in_left;
			in_left -= strm->avail_in;
		}
		if (strm->avail_out == 0) {
			strm->avail_out = out_left > UINT_MAX ? UINT_MAX : (uInt)out_left;
			out_left -= strm->avail_out;
		}
		if (strm->avail_out == 0) {
			/* Filled ram_bytes: the rest of the stream is not needed. */
			ret = 0;
			goto out;
		}
		if (strm->avail_in == 0) {
			set_why(why, whylen, "zlib: stream truncated after %zu bytes of output",
				(size_t)(strm->next_out - out));
			ret = -EUCLEAN;
			goto out;
		}
		in_before = strm->avail_in;
		out_before = strm->avail_out;
		zret = inflate(strm, Z_NO_FLUSH);
		if (zret == Z_STREAM_END) {
			ret = 0;
			goto out;
		}
		if (zret == Z_MEM_ERROR) {
			set_why(why, whylen, "zlib: out of memory");
			ret = -ENOMEM;
			goto out;
		}
		if (zret != Z_OK && zret != Z_BUF_ERROR) {
			set_why(why, whylen, "zlib: corrupt stream (%s) after %zu bytes of output",
				strm->msg ? strm->msg : "inflate error", (size_t)(strm->next_out - out));
			ret = -EUCLEAN;
			goto out;
		}
		/* Each slice is refilled above, so a stalled call means bad input. */
		if (strm->avail_in == in_before && strm->avail_out == out_before &&
		    strm->avail_in != 0 && strm->avail_out != 0) {
			set_why(why, whylen, "zlib: inflate made no progress");
			ret = -EUCLEAN;
			goto out;
		}
	}
out:
	*produced = (size_t)(strm->next_out - out);
	return ret;
}

/* The kernel's bound on one lzo segment: LZO1X's worst case for a sector. */
static size_t lzo_worst(uint32_t sectorsize)
{
	return (size_t)sectorsize + sectorsize / 16 + 64 + 3;
}

/*
 * btrfs lzo framing: le32 total length (itself included), then segments of
 * le32 length + LZO1X data, each holding at most one sector of output. A
 * segment header never straddles a sector: when fewer than four bytes are
 * left in a sector after a segment, they are padding and the next header
 * starts on the next sector.
 */
static int decompress_lzo(struct decoders *dec, const uint8_t *in, size_t inlen, uint8_t *out, size_t outlen,
			  uint32_t sectorsize, size_t *produced, char *why, size_t whylen)
{
	uint8_t *seg_out;
	size_t total, pos, done = 0;
	int ret;

	if (sectorsize < 512 || sectorsize > UB_LZO_SEG_MAX || (sectorsize & (sectorsize - 1))) {
		set_why(why, whylen, "lzo: bad sector size %u", (unsigned)sectorsize);
		ret = -EINVAL;
		goto out;
	}
	if (inlen < UB_LZO_LEN) {
		set_why(why, whylen, "lzo: %zu bytes cannot hold the length header", inlen);
		ret = -EUCLEAN;
		goto out;
	}
	total = ub_le32(in);
	/*
	 * As the kernel: the total may not run past the extent (nor past the
	 * largest compressed extent), and the extent may not have whole unused
	 * sectors after it.
	 */
	if (total > inlen || total > UB_MAX_COMPRESSED) {
		set_why(why, whylen, "lzo: total length %zu exceeds the %zu bytes of extent",
			total, inlen);
		ret = -EUCLEAN;
		goto out;
	}
	if ((total + sectorsize - 1) / sectorsize * sectorsize < inlen) {
		set_why(why, whylen, "lzo: total length %zu leaves unused sectors in %zu bytes",
			total, inlen);
		ret = -EUCLEAN;
		goto out;
	}
	if (lzo_init_ret != LZO_E_OK) {
		set_why(why, whylen, "lzo: library failed to initialise");
		ret = -EIO;
		goto out;
	}
	/* Output goes through a sector-sized buffer so that outlen can cut a segment short. */
	if (!dec->lzo_seg)
		dec->lzo_seg = malloc(UB_LZO_SEG_MAX);
	seg_out = dec->lzo_seg;
	if (!seg_out) {
		ret = -ENOMEM;
		goto out;
	}

	pos = UB_LZO_LEN;
	ret = 0;
	while (pos < total && done < outlen) {
		size_t seg_len, left_in_sector, copy;
		lzo_uint seg_out_len = sectorsize;
		bool direct;
		int lret;

		if (total - pos < UB_LZO_LEN) {
			set_why(why, whylen, "lzo: segment header at %zu cut off by total length %zu",
				pos, total);
			ret = -EUCLEAN;
			goto out;
		}
		seg_len = ub_le32(in + pos);
		pos += UB_LZO_LEN;
		if (seg_len > lzo_worst(sectorsize)) {
			set_why(why, whylen, "lzo: segment at %zu has length %zu, above the %zu limit",
				pos - UB_LZO_LEN, seg_len, lzo_worst(sectorsize));
			ret = -EUCLEAN;
			goto out;
		}
		if (seg_len > total - pos) {
			set_why(why, whylen, "lzo: segment at %zu of length %zu runs past total length %zu",
				pos - UB_LZO_LEN, seg_len, total);
			ret = -EUCLEAN;
			goto out;
		}
		/* a whole sector still fits: decode in place, else through seg_out and cut */
		direct = outlen - done >= sectorsize;
		lret = lzo1x_decompress_safe(in + pos, seg_len, direct ? out + done : seg_out, &seg_out_len, NULL);
		/* lzo reports what it wrote even on failure; keep that as partial output. */
		if (seg_out_len > sectorsize)
			seg_out_len = sectorsize;
		copy = seg_out_len < outlen - done ? seg_out_len : outlen - done;
		if (!direct)
			memcpy(out + done, seg_out, copy);
		done += copy;
		if (lret == LZO_E_OUTPUT_OVERRUN) {
			set_why(why, whylen, "lzo: segment at %zu decompresses to more than a sector",
				pos - UB_LZO_LEN);
			ret = -EUCLEAN;
			goto out;
		}
		if (lret != LZO_E_OK) {
			set_why(why, whylen, "lzo: corrupt segment at %zu (lzo error %d)",
				pos - UB_LZO_LEN, lret);
			ret = -EUCLEAN;
			goto out;
		}
		pos += seg_len;
		left_in_sector = sectorsize - pos % sectorsize;
		if (left_in_sector < UB_LZO_LEN)
			pos += left_in_sector;
	}
out:
	*produced = done;
	return ret;
}

/*
 * One zstd frame, as the kernel reads it: decoding stops at the end of the
 * first frame (regular extents are zero-padded to a sector after it, which is
 * not a frame) or when outlen bytes have come out.
 */
static int decompress_zstd(struct decoders *dec, const uint8_t *in, size_t inlen, uint8_t *out,
			   size_t outlen, size_t *produced, char *why, size_t whylen)
{
	ZSTD_DCtx *dctx = dec->zstd;
	ZSTD_inBuffer ib = { in, inlen, 0 };
	ZSTD_outBuffer ob = { out, outlen, 0 };
	int ret;

	if (!dctx) {
		dctx = ZSTD_createDCtx();
		if (!dctx) {
			set_why(why, whylen, "zstd: cannot create a decompression context");
			ret = -ENOMEM;
			goto out;
		}
		if (ZSTD_isError(ZSTD_DCtx_setParameter(dctx, ZSTD_d_windowLogMax, UB_ZSTD_WINDOWLOG_MAX))) {
			ZSTD_freeDCtx(dctx);
			set_why(why, whylen, "zstd: cannot bound the window size");
			ret = -EIO;
			goto out;
		}
		dec->zstd = dctx;
	} else if (ZSTD_isError(ZSTD_DCtx_reset(dctx, ZSTD_reset_session_only))) {
		/* a frame left half-decoded by the last extent must not leak into this one */
		set_why(why, whylen, "zstd: cannot reset the decompression context");
		ret = -EIO;
		goto out;
	}
	if (inlen == 0) {
		set_why(why, whylen, "zstd: empty input");
		ret = -EUCLEAN;
		goto out;
	}
	for (;;) {
		size_t in_before = ib.pos, out_before = ob.pos;
		size_t zret = ZSTD_decompressStream(dctx, &ob, &ib);

		if (ZSTD_isError(zret)) {
			set_why(why, whylen, "zstd: corrupt frame (%s) after %zu bytes of output",
				ZSTD_getErrorName(zret), ob.pos);
			ret = ZSTD_getErrorCode(zret) == ZSTD_error_memory_allocation ? -ENOMEM
										 : -EUCLEAN;
			goto out;
		}
		if (zret == 0 || ob.pos == ob.size) {
			ret = 0;
			goto out;
		}
		if (ib.pos == ib.size && ob.pos == out_before) {
			set_why(why, whylen, "zstd: frame truncated after %zu bytes of output", ob.pos);
			ret = -EUCLEAN;
			goto out;
		}
		/* libzstd always moves one of the two; guard against it anyway. */
		if (ib.pos == in_before && ob.pos == out_before) {
			set_why(why, whylen, "zstd: decompression made no progress");
			ret = -EUCLEAN;
			goto out;
		}
	}
out:
	*produced = ob.pos;
	return ret;
}

int ub_decompress(int type, const uint8_t *in, size_t inlen, uint8_t *out, size_t outlen,
		  uint32_t sectorsize, size_t *produced, char *why, size_t whylen)
{
	struct decoders *dec;
	size_t dummy;
	int ret;

	if (!produced)
		produced = &dummy;
	*produced = 0;
	if (why && whylen)
		why[0] = '\0';
	if (type != UB_COMPRESS_ZLIB && type != UB_COMPRESS_LZO && type != UB_COMPRESS_ZSTD) {
		set_why(why, whylen, "unknown compression type %d", type);
		return -EINVAL;
	}
	/* Nothing asked for, nothing to check: the stream is not needed at all. */
	if (outlen == 0)
		return 0;
	dec = decoders_get();
	if (!dec) {
		set_why(why, whylen, "%s: cannot set up the decoder", ub_compress_name(type));
		ret = -ENOMEM;
	} else if (type == UB_COMPRESS_ZLIB) {
		ret = decompress_zlib(dec, in, inlen, out, outlen, produced, why, whylen);
	} else if (type == UB_COMPRESS_LZO) {
		ret = decompress_lzo(dec, in, inlen, out, outlen, sectorsize, produced, why, whylen);
	} else {
		ret = decompress_zstd(dec, in, inlen, out, outlen, produced, why, whylen);
	}
	/*
	 * The kernel reads whatever the stream did not produce as zeros. The
	 * decoders may have used that part of `out` as scratch space (libzstd
	 * >= 1.5.1 keeps literals there), so a zeroed buffer going in proves
	 * nothing: clear it here, on success and failure alike.
	 */
	if (*produced > outlen)
		*produced = outlen;
	memset(out + *produced, 0, outlen - *produced);
	return ret;
}

const char *ub_compress_name(int type)
{
	switch (type) {
	case UB_COMPRESS_NONE:
		return "none";
	case UB_COMPRESS_ZLIB:
		return "zlib";
	case UB_COMPRESS_LZO:
		return "lzo";
	case UB_COMPRESS_ZSTD:
		return "zstd";
	default:
		return NULL;
	}
}
