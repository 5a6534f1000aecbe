/* SPDX-License-Identifier: MIT */
/*
 * Tests for lib/fs/compress.c: round trips through zlib, btrfs-framed lzo and
 * zstd; corrupt and hostile streams; and extents written by the Linux kernel.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <lzo/lzo1x.h>
#include <zlib.h>
#include <zstd.h>

#include "fs/compress.h"
#include "ubtrfs/format.h"

#define SECTOR 4096U
#define LZO_HDR 4U

/* xorshift64: reproducible "random" bytes without libc's shared rand() state. */
static uint64_t next_rand(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void fill_random(uint8_t *buf, size_t len, uint64_t seed)
{
	uint64_t s = seed * 0x9E3779B97F4A7C15ULL + 1;

	for (size_t i = 0; i < len; i++)
		buf[i] = (uint8_t)(next_rand(&s) >> 56);
}

/* "line 0\nline 1\n...": the content of the files behind the real vectors. */
static size_t fill_lines(uint8_t *buf, size_t cap, unsigned int nlines)
{
	size_t len = 0;

	for (unsigned int i = 0; i < nlines; i++) {
		char tmp[32];
		int n = snprintf(tmp, sizeof(tmp), "line %u\n", i);

		assert_true(n > 0 && len + (size_t)n <= cap);
		memcpy(buf + len, tmp, (size_t)n);
		len += (size_t)n;
	}
	return len;
}

/* The same pattern, cut to exactly len bytes. */
static void fill_lines_exact(uint8_t *buf, size_t len)
{
	size_t pos = 0;

	for (unsigned int i = 0; pos < len; i++) {
		char tmp[32];
		int n = snprintf(tmp, sizeof(tmp), "line %u\n", i);
		size_t take = len - pos < (size_t)n ? len - pos : (size_t)n;

		memcpy(buf + pos, tmp, take);
		pos += take;
	}
}

static void put_le32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

static uint32_t get_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static size_t hex_decode(const char *hex, uint8_t *out, size_t cap)
{
	size_t n = strlen(hex) / 2;

	assert_true(n <= cap);
	for (size_t i = 0; i < n; i++) {
		unsigned int v;

		assert_int_equal(sscanf(hex + 2 * i, "%2x", &v), 1);
		out[i] = (uint8_t)v;
	}
	return n;
}

/*
 * A btrfs lzo framer laid out as the kernel writes it: le32 total, then per
 * input sector a le32 segment length and the LZO1X-1 output; a header that
 * would not fit in what is left of an output sector moves to the next one,
 * the gap zero-filled. `seg_in` is the input taken per segment (the kernel
 * uses one sector; tests use more to build oversize segments). Returns the
 * framed length; *pads counts the sector-end paddings written.
 */
static size_t lzo_frame(const uint8_t *in, size_t len, size_t seg_in, uint32_t sectorsize,
			uint8_t *out, size_t cap, unsigned int *pads)
{
	static const size_t worst_extra = 64 + 3;
	size_t pos = LZO_HDR, done = 0;
	uint8_t *wrk = malloc(LZO1X_1_MEM_COMPRESS);
	uint8_t *tmp = malloc(seg_in + seg_in / 16 + worst_extra);

	assert_non_null(wrk);
	assert_non_null(tmp);
	assert_int_equal(lzo_init(), LZO_E_OK);
	if (pads)
		*pads = 0;
	while (done < len) {
		size_t in_len = len - done < seg_in ? len - done : seg_in;
		lzo_uint clen = 0;
		size_t left;

		assert_int_equal(lzo1x_1_compress(in + done, in_len, tmp, &clen, wrk), LZO_E_OK);
		assert_true(pos + LZO_HDR + clen + sectorsize <= cap);
		put_le32(out + pos, (uint32_t)clen);
		memcpy(out + pos + LZO_HDR, tmp, clen);
		pos += LZO_HDR + clen;
		done += in_len;
		left = sectorsize - pos % sectorsize;
		if (left < LZO_HDR) {
			memset(out + pos, 0, left);
			pos += left;
			if (pads)
				(*pads)++;
		}
	}
	put_le32(out, (uint32_t)pos);
	free(tmp);
	free(wrk);
	return pos;
}

/* Worst case room for any of the three compressors over `len` bytes. */
static size_t comp_cap(size_t len)
{
	return len + len / 8 + 2 * SECTOR + 1024;
}

/* Compress `len` bytes with `type` the way btrfs lays it out. */
static size_t compress_as(int type, const uint8_t *in, size_t len, uint8_t *out, size_t cap)
{
	switch (type) {
	case UB_COMPRESS_ZLIB: {
		uLongf dlen = cap;

		assert_int_equal(compress2(out, &dlen, in, len, 3), Z_OK);
		return dlen;
	}
	case UB_COMPRESS_LZO:
		return lzo_frame(in, len, SECTOR, SECTOR, out, cap, NULL);
	default: {
		size_t r = ZSTD_compress(out, cap, in, len, 3);

		assert_false(ZSTD_isError(r));
		return r;
	}
	}
}

/* Decompress into a buffer of exactly outlen bytes so ASan sees any overrun. */
static int run(int type, const uint8_t *in, size_t inlen, size_t outlen, uint8_t **outp,
	       size_t *produced)
{
	char why[128];
	uint8_t *out = malloc(outlen ? outlen : 1);
	int ret;

	assert_non_null(out);
	memset(why, 'x', sizeof(why));
	ret = ub_decompress(type, in, inlen, out, outlen, SECTOR, produced, why, sizeof(why));
	assert_true(*produced <= outlen);
	assert_non_null(memchr(why, '\0', sizeof(why)));
	if (ret)
		assert_true(why[0] != '\0');
	if (outp)
		*outp = out;
	else
		free(out);
	return ret;
}

static const int types[] = { UB_COMPRESS_ZLIB, UB_COMPRESS_LZO, UB_COMPRESS_ZSTD };

enum content { RANDOM, LINES, ZEROS };

static void round_trip(int type, size_t len, enum content what, size_t extra_out)
{
	uint8_t *src = malloc(len ? len : 1), *comp, *out;
	size_t cap = comp_cap(len), clen, produced = 99;
	int ret;

	assert_non_null(src);
	if (what == RANDOM)
		fill_random(src, len, len + (size_t)type);
	else if (what == LINES)
		fill_lines_exact(src, len);
	else
		memset(src, 0, len);
	comp = malloc(cap);
	assert_non_null(comp);
	clen = compress_as(type, src, len, comp, cap);
	ret = run(type, comp, clen, len + extra_out, &out, &produced);
	if (type == UB_COMPRESS_LZO && clen > 128 * 1024) {
		/* btrfs stores such data uncompressed; the kernel refuses the frame */
		assert_int_equal(ret, -EUCLEAN);
		goto out;
	}
	if (ret)
		print_error("type %d len %zu content %d: ret %d\n", type, len, (int)what, ret);
	assert_int_equal(ret, 0);
	assert_int_equal(produced, len);
	assert_memory_equal(out, src, len);
out:
	free(out);
	free(comp);
	free(src);
}

static void test_round_trips(void **state)
{
	static const size_t sizes[] = { 1, 2, 100, SECTOR - 1, SECTOR, SECTOR + 1, 3 * SECTOR + 5,
					65536 + 123, 131072 };

	for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++)
		for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++)
			for (int c = RANDOM; c <= ZEROS; c++)
				round_trip(types[t], sizes[s], (enum content)c, 0);
}

/* ram_bytes is sector-rounded: a stream ending before outlen is not an error. */
static void test_short_stream_into_larger_buffer(void **state)
{
	for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
		round_trip(types[t], 18000, LINES, 20480 - 18000);
		round_trip(types[t], 1, RANDOM, SECTOR - 1);
	}
}

/*
 * The bytes a stream does not produce read as zeros (the kernel's rule), even
 * when the caller's buffer held something else: decoders may use the unfilled
 * tail as scratch (libzstd >= 1.5.1 parks literals there). Every buffer is
 * poisoned with 0xAA first, so a tail left as it was, or scribbled on, shows.
 */
static void poisoned_case1(int type, const uint8_t *comp, size_t clen, const uint8_t *src, size_t len,
			   size_t outlen, int want_ret, uint8_t poison)
{
	uint8_t *out = malloc(outlen);
	char why[160];
	size_t produced = 0;
	int ret;

	assert_non_null(out);
	memset(out, poison, outlen);
	ret = ub_decompress(type, comp, clen, out, outlen, SECTOR, &produced, why, sizeof(why));
	if (want_ret == 0) {
		assert_int_equal(ret, 0);
		assert_int_equal(produced, len < outlen ? len : outlen);
	} else {
		assert_int_equal(ret, want_ret);
	}
	assert_memory_equal(out, src, produced);
	for (size_t i = produced; i < outlen; i++) {
		if (out[i] != 0)
			fail_msg("type %d len %zu outlen %zu ret %d poison 0x%02x: byte %zu past the %zu produced is 0x%02x",
				 type, len, outlen, ret, poison, i, produced, out[i]);
	}
	free(out);
}

/* 0xAA: a tail left alone shows; 0x00: a tail the decoder scribbled on shows. */
static void poisoned_case(int type, const uint8_t *comp, size_t clen, const uint8_t *src, size_t len,
			  size_t outlen, int want_ret)
{
	poisoned_case1(type, comp, clen, src, len, outlen, want_ret, 0x00);
	poisoned_case1(type, comp, clen, src, len, outlen, want_ret, 0xAA);
}

static void test_poisoned_tail_is_zero(void **state)
{
	/* sizes like the kernel's: a file end inside a sector, ram_bytes rounded up, or 128 KiB claimed */
	static const size_t lens[] = { 1, 700, 4095, 18000, 40000, 65537, 100000 };
	static const size_t extra[] = { 1, 96, SECTOR, 128 * 1024 };

	for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
		for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
			size_t len = lens[l], cap = comp_cap(len), clen;
			uint8_t *src = malloc(len), *comp = malloc(cap);

			assert_non_null(src);
			assert_non_null(comp);
			/* text with random stretches: literals as well as matches in every block */
			fill_lines_exact(src, len);
			for (size_t i = 0; i + 64 < len; i += 1000)
				fill_random(src + i, 64, i + (size_t)types[t]);
			clen = compress_as(types[t], src, len, comp, cap);
			for (size_t e = 0; e < sizeof(extra) / sizeof(extra[0]); e++) {
				size_t outlen = len + extra[e];

				if (outlen > 128 * 1024 + len % SECTOR + SECTOR)
					continue;
				poisoned_case(types[t], comp, clen, src, len, outlen, 0);
			}
			/* cut streams: what was decoded stays, the rest is zeros, not poison */
			if (clen > 16)
				poisoned_case(types[t], comp, clen / 2, src, len, len + SECTOR, -EUCLEAN);
			/* output shorter than the stream: all of it data, nothing to clear */
			if (len > 2)
				poisoned_case(types[t], comp, clen, src, len, len / 2, 0);
			free(comp);
			free(src);
		}
	}
}

/* Nothing requested: success with nothing produced, whatever the input. */
static void test_zero_outlen(void **state)
{
	for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
		size_t produced = 7;

		assert_int_equal(run(types[t], (const uint8_t *)"", 0, 0, NULL, &produced), 0);
		assert_int_equal(produced, 0);
	}
}

/*
 * Force the sector-end rule: a first segment ending 1..3 bytes short of the
 * sector makes the writer pad, and the reader must skip to the next sector.
 * Zeros then r random bytes compress to about r bytes plus a constant, one
 * more per step of r, so a short search meets every gap from 0 to 4.
 */
static void test_lzo_sector_end_padding(void **state)
{
	uint8_t *src = malloc(3 * SECTOR), *comp = malloc(comp_cap(3 * SECTOR)), *out;
	unsigned int found[LZO_HDR + 1] = { 0 };

	assert_non_null(src);
	assert_non_null(comp);
	for (uint64_t seed = 1; seed <= 2; seed++) {
		for (size_t r = 3950; r <= SECTOR; r++) {
			unsigned int pads;
			size_t clen, produced, first_end, gap;

			memset(src, 0, SECTOR - r);
			fill_random(src + SECTOR - r, r, seed);
			fill_lines_exact(src + SECTOR, 2 * SECTOR);
			clen = lzo_frame(src, 3 * SECTOR, SECTOR, SECTOR, comp, comp_cap(3 * SECTOR),
					 &pads);
			first_end = LZO_HDR + LZO_HDR + get_le32(comp + LZO_HDR);
			if (first_end > SECTOR || SECTOR - first_end > LZO_HDR)
				continue;
			gap = SECTOR - first_end;
			/* a gap of 0 or 4 needs no padding: the next header fits */
			assert_int_equal(pads != 0, gap != 0 && gap < LZO_HDR);
			found[gap]++;
			assert_int_equal(run(UB_COMPRESS_LZO, comp, clen, 3 * SECTOR, &out, &produced),
					 0);
			assert_int_equal(produced, 3 * SECTOR);
			assert_memory_equal(out, src, 3 * SECTOR);
			free(out);
		}
	}
	for (unsigned int g = 0; g <= LZO_HDR; g++) {
		if (!found[g])
			print_error("no frame with a %u-byte sector gap found\n", g);
		assert_true(found[g] > 0);
	}
	free(comp);
	free(src);
}

/* Stopping at outlen must write exactly that much and report success. */
static void test_output_smaller_than_data(void **state)
{
	static const size_t outlens[] = { 1, 1000, SECTOR, SECTOR + 1, 5000, 65535 };
	size_t len = 65536 + 777, cap = comp_cap(len);
	uint8_t *src = malloc(len), *comp = malloc(cap), *out;

	assert_non_null(src);
	assert_non_null(comp);
	fill_lines_exact(src, len / 2);
	fill_random(src + len / 2, len - len / 2, 3);
	for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
		size_t clen = compress_as(types[t], src, len, comp, cap);

		for (size_t o = 0; o < sizeof(outlens) / sizeof(outlens[0]); o++) {
			size_t produced;

			assert_int_equal(run(types[t], comp, clen, outlens[o], &out, &produced), 0);
			assert_int_equal(produced, outlens[o]);
			assert_memory_equal(out, src, outlens[o]);
			free(out);
		}
	}
	free(comp);
	free(src);
}

/* Cut streams fail, but the bytes decoded before the cut are right. */
static void test_truncated(void **state)
{
	size_t len = 65536, cap = comp_cap(len);
	uint8_t *src = malloc(len), *comp = malloc(cap), *out;

	assert_non_null(src);
	assert_non_null(comp);
	fill_lines_exact(src, len);
	fill_random(src + 20000, 30000, 11);
	for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
		size_t clen = compress_as(types[t], src, len, comp, cap);
		size_t cuts[] = { 1, 2, 3, 5, clen / 3, clen / 2, clen - 9 };

		for (size_t c = 0; c < sizeof(cuts) / sizeof(cuts[0]); c++) {
			size_t produced;
			int ret = run(types[t], comp, cuts[c], len, &out, &produced);

			assert_int_equal(ret, -EUCLEAN);
			assert_true(produced < len);
			assert_memory_equal(out, src, produced);
			free(out);
		}
	}
	/* An lzo frame whose total was rewritten to the cut: earlier segments survive. */
	{
		size_t clen = lzo_frame(src, len, SECTOR, SECTOR, comp, cap, NULL), produced;
		size_t cut = clen / 2;

		put_le32(comp, (uint32_t)cut);
		assert_int_equal(run(UB_COMPRESS_LZO, comp, cut, len, &out, &produced), -EUCLEAN);
		assert_true(produced > 0 && produced < len && produced % SECTOR == 0);
		assert_memory_equal(out, src, produced);
		free(out);
	}
	free(comp);
	free(src);
}

static void test_zero_length_input(void **state)
{
	for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
		size_t produced;

		assert_int_equal(run(types[t], (const uint8_t *)"", 0, SECTOR, NULL, &produced),
				 -EUCLEAN);
		assert_int_equal(produced, 0);
		assert_int_equal(run(types[t], NULL, 0, SECTOR, NULL, &produced), -EUCLEAN);
	}
}

static void test_garbage(void **state)
{
	uint8_t junk[8192];

	fill_random(junk, sizeof(junk), 42);
	for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
		size_t produced;

		assert_int_equal(run(types[t], junk, sizeof(junk), 16384, NULL, &produced), -EUCLEAN);
	}
	/* Plausible headers in front of junk: no crash, no overrun, no success claim past outlen. */
	for (uint64_t seed = 0; seed < 200; seed++) {
		size_t produced;
		int ret;

		fill_random(junk, sizeof(junk), seed);
		junk[0] = 0x78;
		junk[1] = 0x9c;
		ret = run(UB_COMPRESS_ZLIB, junk, sizeof(junk), 16384, NULL, &produced);
		assert_true(ret == 0 || ret == -EUCLEAN);
		put_le32(junk, sizeof(junk));
		put_le32(junk + 4, 1000);
		ret = run(UB_COMPRESS_LZO, junk, sizeof(junk), 16384, NULL, &produced);
		assert_true(ret == 0 || ret == -EUCLEAN);
		put_le32(junk, 0xFD2FB528U);
		ret = run(UB_COMPRESS_ZSTD, junk, sizeof(junk), 16384, NULL, &produced);
		assert_true(ret == 0 || ret == -EUCLEAN);
	}
}

/* Every lzo length check the kernel makes. */
static void test_lzo_bad_lengths(void **state)
{
	size_t len = 5 * SECTOR, cap = comp_cap(len), clen, produced;
	uint8_t *src = malloc(len), *comp = calloc(1, cap), *out;

	assert_non_null(src);
	assert_non_null(comp);
	fill_lines_exact(src, len);
	clen = lzo_frame(src, len, SECTOR, SECTOR, comp, cap, NULL);
	assert_int_equal(run(UB_COMPRESS_LZO, comp, clen, len, NULL, &produced), 0);
	assert_int_equal(produced, len);

	/* total claims more than the extent holds */
	put_le32(comp, (uint32_t)clen + 1);
	assert_int_equal(run(UB_COMPRESS_LZO, comp, clen, len, NULL, &produced), -EUCLEAN);
	assert_int_equal(produced, 0);
	put_le32(comp, 0xFFFFFFFFU);
	assert_int_equal(run(UB_COMPRESS_LZO, comp, clen, len, NULL, &produced), -EUCLEAN);
	/* total leaves a whole unused sector in the extent */
	put_le32(comp, (uint32_t)clen);
	assert_int_equal(run(UB_COMPRESS_LZO, comp, clen + SECTOR + 100, len, NULL, &produced),
			 -EUCLEAN);
	/* ...while the tail of the last sector may be unused (regular extents) */
	assert_int_equal(run(UB_COMPRESS_LZO, comp, (clen + SECTOR - 1) / SECTOR * SECTOR, len,
			     NULL, &produced),
			 0);
	assert_int_equal(produced, len);
	/* a frame bigger than btrfs ever writes */
	{
		size_t big = 128 * 1024 + SECTOR;
		uint8_t *huge = calloc(1, big);

		assert_non_null(huge);
		put_le32(huge, (uint32_t)big);
		assert_int_equal(run(UB_COMPRESS_LZO, huge, big, len, NULL, &produced), -EUCLEAN);
		free(huge);
	}
	/* a total too small to hold any segment decodes to nothing, as in the kernel */
	put_le32(comp, LZO_HDR);
	assert_int_equal(run(UB_COMPRESS_LZO, comp, SECTOR, len, NULL, &produced), 0);
	assert_int_equal(produced, 0);
	/* a total ending inside a segment header */
	put_le32(comp, LZO_HDR + 2);
	assert_int_equal(run(UB_COMPRESS_LZO, comp, SECTOR, len, NULL, &produced), -EUCLEAN);
	put_le32(comp, (uint32_t)clen);

	/* first segment runs past the total */
	{
		uint32_t seg = get_le32(comp + LZO_HDR);

		put_le32(comp + LZO_HDR, (uint32_t)clen);
		assert_int_equal(run(UB_COMPRESS_LZO, comp, clen, len, NULL, &produced), -EUCLEAN);
		/* above lzo1x_worst_compress(sectorsize) */
		put_le32(comp + LZO_HDR, SECTOR + SECTOR / 16 + 64 + 3 + 1);
		assert_int_equal(run(UB_COMPRESS_LZO, comp, clen, len, NULL, &produced), -EUCLEAN);
		/* one byte short: the segment's own decode fails */
		put_le32(comp + LZO_HDR, seg - 1);
		assert_int_equal(run(UB_COMPRESS_LZO, comp, clen, len, NULL, &produced), -EUCLEAN);
		put_le32(comp + LZO_HDR, seg);
	}
	/* a later segment runs past the end: the earlier ones are still delivered */
	{
		size_t second = LZO_HDR + LZO_HDR + get_le32(comp + LZO_HDR);

		if (SECTOR - second % SECTOR < LZO_HDR)
			second += SECTOR - second % SECTOR;
		put_le32(comp + second, (uint32_t)clen);
		assert_int_equal(run(UB_COMPRESS_LZO, comp, clen, len, &out, &produced), -EUCLEAN);
		assert_int_equal(produced, SECTOR);
		assert_memory_equal(out, src, SECTOR);
		free(out);
	}
	/* a segment holding two sectors of output is corrupt... */
	{
		char why[128];
		uint8_t *o = malloc(len);

		assert_non_null(o);
		clen = lzo_frame(src, len, 2 * SECTOR, SECTOR, comp, cap, NULL);
		assert_int_equal(ub_decompress(UB_COMPRESS_LZO, comp, clen, o, len, SECTOR,
					       &produced, why, sizeof(why)),
				 -EUCLEAN);
		assert_non_null(strstr(why, "more than a sector"));
		assert_true(produced <= SECTOR);
		/* ...unless the sectors are that big */
		clen = lzo_frame(src, len, 2 * SECTOR, 2 * SECTOR, comp, cap, NULL);
		assert_int_equal(ub_decompress(UB_COMPRESS_LZO, comp, clen, o, len, 2 * SECTOR,
					       &produced, why, sizeof(why)),
				 0);
		assert_int_equal(produced, len);
		assert_memory_equal(o, src, len);
		free(o);
	}
	free(comp);
	free(src);
}

static void test_lzo_sectorsize(void **state)
{
	uint8_t buf[64] = { 0 }, out[16];
	size_t produced;
	char why[64];

	put_le32(buf, 8);
	for (uint32_t ss = 0; ss < 3; ss++) {
		static const uint32_t bad[] = { 0, 3000, 1U << 20 };

		assert_int_equal(ub_decompress(UB_COMPRESS_LZO, buf, sizeof(buf), out, sizeof(out),
					       bad[ss], &produced, why, sizeof(why)),
				 -EINVAL);
		assert_non_null(strstr(why, "sector"));
	}
}

/* The kernel skips the adler32 trailer; so do we. The header is still checked. */
static void test_zlib_header_and_trailer(void **state)
{
	size_t len = 10000, cap = comp_cap(len), clen, produced;
	uint8_t *src = malloc(len), *comp = malloc(cap), *out;

	assert_non_null(src);
	assert_non_null(comp);
	fill_lines_exact(src, len);
	clen = compress_as(UB_COMPRESS_ZLIB, src, len, comp, cap);
	comp[clen - 1] ^= 0xff;
	assert_int_equal(run(UB_COMPRESS_ZLIB, comp, clen, len, &out, &produced), 0);
	assert_int_equal(produced, len);
	assert_memory_equal(out, src, len);
	free(out);
	assert_int_equal(run(UB_COMPRESS_ZLIB, comp, clen - 4, len, NULL, &produced), 0);
	assert_int_equal(produced, len);

	comp[0] = 0x79; /* method 9 */
	assert_int_equal(run(UB_COMPRESS_ZLIB, comp, clen, len, NULL, &produced), -EUCLEAN);
	comp[0] = 0x88; /* 64 KiB window: not valid zlib */
	comp[1] = (uint8_t)(31 - (0x88 * 256) % 31);
	assert_int_equal(run(UB_COMPRESS_ZLIB, comp, clen, len, NULL, &produced), -EUCLEAN);
	comp[0] = 0x78;
	comp[1] = 0x9d; /* check bits wrong */
	assert_int_equal(run(UB_COMPRESS_ZLIB, comp, clen, len, NULL, &produced), -EUCLEAN);
	comp[1] = 0xbb; /* preset dictionary */
	assert_int_equal((0x78 * 256 + 0xbb) % 31, 0);
	assert_int_equal(run(UB_COMPRESS_ZLIB, comp, clen, len, NULL, &produced), -EUCLEAN);
	assert_int_equal(run(UB_COMPRESS_ZLIB, comp, 1, len, NULL, &produced), -EUCLEAN);
	free(comp);
	free(src);
}

static void test_zstd_frames(void **state)
{
	size_t len = 50000, cap = comp_cap(len) + 8192, clen, produced;
	uint8_t *src = malloc(len), *comp = calloc(1, cap), *out;
	ZSTD_CCtx *cctx = ZSTD_createCCtx();

	assert_non_null(src);
	assert_non_null(comp);
	assert_non_null(cctx);
	fill_lines_exact(src, len);

	/* zero padding after the frame, as in a regular extent */
	clen = compress_as(UB_COMPRESS_ZSTD, src, len, comp, cap);
	memset(comp + clen, 0, 4096);
	assert_int_equal(run(UB_COMPRESS_ZSTD, comp, clen + 4096, len + 100, &out, &produced), 0);
	assert_int_equal(produced, len);
	assert_memory_equal(out, src, len);
	free(out);

	/* a checksummed frame with a bad checksum */
	assert_false(ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1)));
	clen = ZSTD_compress2(cctx, comp, cap, src, len);
	assert_false(ZSTD_isError(clen));
	assert_int_equal(run(UB_COMPRESS_ZSTD, comp, clen, len, NULL, &produced), 0);
	comp[clen - 1] ^= 1;
	assert_int_equal(run(UB_COMPRESS_ZSTD, comp, clen, len, NULL, &produced), -EUCLEAN);

	/* a frame wanting a 256 MiB window is refused, not allocated */
	{
		ZSTD_inBuffer ib = { src, len, 0 };
		ZSTD_outBuffer ob = { comp, cap, 0 };
		size_t r;

		ZSTD_CCtx_reset(cctx, ZSTD_reset_session_and_parameters);
		assert_false(ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_windowLog, 28)));
		/* streamed without a size, so the window is not shrunk to fit */
		r = ZSTD_compressStream2(cctx, &ob, &ib, ZSTD_e_continue);
		assert_false(ZSTD_isError(r));
		do {
			r = ZSTD_compressStream2(cctx, &ob, &ib, ZSTD_e_end);
			assert_false(ZSTD_isError(r));
		} while (r);
		assert_int_equal(run(UB_COMPRESS_ZSTD, comp, ob.pos, len, NULL, &produced),
				 -EUCLEAN);
	}
	ZSTD_freeCCtx(cctx);
	free(comp);
	free(src);
}

static void test_unknown_type_and_names(void **state)
{
	static const int bad[] = { UB_COMPRESS_NONE, 4, -1, 255 };
	uint8_t in[8] = { 0 }, out[8];
	size_t produced = 5;
	char why[64];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(ub_decompress(bad[i], in, sizeof(in), out, sizeof(out), SECTOR,
					       &produced, why, sizeof(why)),
				 -EINVAL);
		assert_int_equal(produced, 0);
		assert_non_null(strstr(why, "type"));
	}
	/* why and produced are optional */
	assert_int_equal(ub_decompress(UB_COMPRESS_ZSTD, in, sizeof(in), out, sizeof(out), SECTOR,
				       NULL, NULL, 0),
			 -EUCLEAN);
	assert_string_equal(ub_compress_name(UB_COMPRESS_NONE), "none");
	assert_string_equal(ub_compress_name(UB_COMPRESS_ZLIB), "zlib");
	assert_string_equal(ub_compress_name(UB_COMPRESS_LZO), "lzo");
	assert_string_equal(ub_compress_name(UB_COMPRESS_ZSTD), "zstd");
	assert_null(ub_compress_name(4));
	assert_null(ub_compress_name(-1));
}

/*
 * Extents written by Linux 6.18 (mount -o compress-force=ALG, 4 KiB
 * sectors): small.txt holds "line 0\n".."line 199\n" (1690 bytes, stored
 * inline), medium.txt "line 0\n".."line 1199\n" (10890 bytes, one regular
 * extent of ram_bytes 12288 and disk_num_bytes 4096). Each vector is the
 * extent's bytes up to its last non-zero byte; the rest of disk_num_bytes is
 * zeros, put back here.
 */
/* 3933 bytes, zero-padded to 4096 */
static const char real_lzo_regular_hex[] =
	"5f0f0000a6050000046c696e6520300a990031b90032b90033b90034b90035b90036b90037b90038b90039b90031f808"
	"dd0831c10931c50931c90931cd0931d10931d50931d90931dd0932dd0932dd0932dd0932dd0932dd0932dd0932dd0932"
	"dd0932dd0932dd0933dd0933dd0933dd0933dd0933dd0933dd0933dd0933dd0933dd0933dd0934dd0934dd0934dd0934"
	"dd0934dd0934dd0934dd0934dd0934dd0934dd0935dd0935dd0935dd0935dd0935dd0935dd0935dd0935dd0935dd0935"
	"dd0936dd0936dd0936dd0936dd0936dd0936dd0936dd0936dd0936dd0936dd0937dd0937dd0937dd0937dd0937dd0937"
	"dd0937dd0937dd0937dd0937dd0938dd0938dd0938dd0938dd0938dd0938dd0938dd0938dd0938dd0938dd0939dd0939"
	"dd0939dd0939dd0939dd0939dd0939dd0939dd0939dd0939de093130c20a3130c60a3130ca0a3130ce0a3130d20a3130"
	"d60a3130da0a3130de0a3130c20b3130e40b28a80ce40b27b00c27b40c27b80c27bc0c27c00c27c40c27c80ced6631f1"
	"6631f56631f96631fd6631e16731e56731e96731ed6731f16731f56731f96731fd6731e16831e56831e96831ed6831f1"
	"6831f56831f96831fd6831e16931e56931e96931ed6931f16931f56931f96931fd6931e16a31e56a31e96a31ed6a31f1"
	"6a31f56a31f96a31fd6a31e16b31e56b31e96b31ee6b3136ec43f66b3136ec43fd6b31e16c31e56c31e96c31ed6c31f1"
	"6c31f56c31f96c31fd6c31e16d31e56d31e96d31ed6d31f16d31f56d31f96d31fd6d31e16e31e56e31e96e31ed6e31f1"
	"6e31f56e31f96e31fd6e31e16f31e56f31e96f31ed6f31f16f31f56f31f96f31fd6f31e17031e57031e97031ed7032ed"
	"7032ed7032ed7032ed7032ed7032ed7032ed7032ed7032ed7032ed7032ee703231cd7032ed7032ed7032ed7032ed7032"
	"ed7032ed7032ed7032ed7032ed7032ed7032ed7032ed7032ed7032ed7032ed7032ed7032ed7032ed7032ed7032ed7032"
	"ed7032ed7032ed7032ed7032ed7032ed7032ed7032ed7032ed7032ed7032ed7032ed7032ed7032ed7032ed7032ed7032"
	"ed7032ed7032ed7032ed7032ed7032ed7032ed7032ed7032ed7032ed7032ed7032ed7032ed7032ed7032ed7032ee7032"
	"36deb33236deb33236ddb332ed7032ed7032ed7032ee703237ed4337d57b32ee703237e40bed7032ed7032ed7032ed70"
	"32ed7032ed7032ed7032ed7032ed7032ed7032ed7032ed7032ed7032ed7032ed7032ed7032ed7032ed7032ed7032ed70"
	"32ed7032ed7032ed7032ed7032ed7033ed7033ed7033ed7033ed7033ed7033ee703330dd2c33ed7033ed7033ed7033ed"
	"7033ed7033ed7033ed7033ed7033ed7033ed7033ed7033ed7033ed7033ed7033ed7033ed7033ed7033ed7033ed7033ed"
	"7033ed7033ed7033ed7033ed7033ed7033ed7033ed7033ed7033ed7033ed7033ed7033ed7033ed7033ed7033ed7033ed"
	"7033ed7033ed7033ed7033ed7033ed7033ed7033ed7033ed7033ed7033ed7033ed7033ed7033ed7033ed7033ed7033ed"
	"7033ed7033ed7033ed7033ed7033ed7033ed7033ed7033ed7033ed7033ed7033ed7033ed7033ed7033ed7033ed7033ee"
	"703337d57b33ed7033ed7033ed7033ee703338cdf733ee703338d67b3338255d2733ee703338e40bed7033ed7033ed70"
	"33ed7033ed7033ed7033ed7033ed7033ed7033ed7033ed7033ed7033ed7033ed7034ed7034ed7034ed7034ed7034ed70"
	"34ed7034ed7034ee703430252e2a3430252d2a34ed7034ed7034ed7034ed7034ed7034ed7034ee70343125952b34ed70"
	"34ed7034ed7034ed7034ed7034ed7034ed7034ed7034ed7034ed7034ed7034ed7034ed7034ed7034ed7034ed7034ed70"
	"34ed7034ed7034ed7034ed7034ed7034ed7034ed7034ed7034ed7034ed7034ed7034ed7034ed7034ed7034ed7034ed70"
	"34ed7034ed7034ed7034ed7034ed7034ed7034ed7034ed7034ed7034ed7034ed7034ed7034ed7034ec700d3436350a6c"
	"696e65203436360a6c696e110000800500000665203436370a6c696e610138e10139c2013730e10131e10132e10133e1"
	"0134e10135e10136e10137e001e50b37e50b38e50b38e50b38e50b38e50b38e50b38e50b38e50b38e50b38e50b38e50b"
	"39e50b39e50b39e50b39e50b39e50b39e50b39e50b39e50b39e50b39c60b3530c60b3530c60b3530c60b3530c60b3530"
	"c60b3530c60b3530c60b3530c60b3530c60b3530e50b31e50b31e50b31e50b31e50b31e50b31e50b31e50b31e50b31e5"
	"0b31e50b32e50b32e50b32e50b32e50b32e50b32e50b32e50b32e50b32e50b32e50b33e50b33e50b33e50b33e50b33e5"
	"0b33e50b33e50b33e50b33e50b33e50b34e50b34e50b34e50b34e50b34e50b34e50b34e50b34e50b34e50b34e50b35e5"
	"0b35e50b35e50b35e50b35e50b35e50b35e50b35e50b35e50b35e50b36e50b36e50b36e50b36e50b36e50b36e50b36e5"
	"0b36e50b36e50b36e40bee703537e50b37e50b37e50b37e50b37e50b37e50b37e50b37e40bed7035ed7035ed7035ed70"
	"35ed7035ed7035ed7035ed7035ed7035ed7035ed7035ed7035ed7035ed7035ed7035ed7035ed7035ed7035ed7035ed70"
	"35ed7036ed7036ed7036ed7036ed7036ed7036ed7036ed7036ed7036ed7036ed7036ed7036ed7036ed7036ed7036ed70"
	"36ed7036ed7036ed7036ed7036ed7036ed7036ed7036ed7036ed7036ed7036ed7036ed7036ed7036ed7036ed7036ed70"
	"36ed7036ed7036ed7036ed7036ee703633ce433633ce433633ce433633d54e36ed7036ed7036ed7036ed7036ed7036ed"
	"7036ed7036ed7036ed7036ed7036ed7036ed7036ed7036ed7036ed7036ed7036ed7036ed7036ed7036ed7036ed7036ed"
	"7036ed7036ed7036ed7036ed7036ed7036ed7036ed7036ed7036ed7036ed7036ed7036ed7036ed7036ed7036ed7036ed"
	"7036ed7036ed7036ed7036ed7036ed7036ed7036ed7036ed7036ed7036ed7036ed7036ed7036ed7036ed7036ed7036ed"
	"7036ed7036ed7036ed7036ed7036ed7036ed7037ed7037ed7037ed7037ed7037ed7037ed7037ed7037ed7037ed7037ed"
	"7037ed7037ed7037ed7037ed7037ed7037ed7037ed7037ed7037ed7037ed7037ed7037ed7037ed7037ed7037ed7037ed"
	"7037ed7037ed7037ed7037ed7037ed7037ed7037ed7037ed7037ed7037ed7037ed7037ed7037ed7037ed7037ed7037ed"
	"7037ed7037ed7037ed7037ee703734d57b37ee703734d67b3734d57b37ed7037ed7037ed7037ed7037ed7037ed7037ed"
	"7037ed7037ed7037ed7037ed7037ed7037ed7037ed7037ed7037ed7037ed7037ed7037ed7037ed7037ed7037ed7037ed"
	"7037ed7037ed7037ed7037ed7037ed7037ed7037ed7037ed7037ed7037ed7037ed7037ed7037ed7037ed7037ed7037ed"
	"7037ed7037ed7037ed7037ed7037ed7037ed7037ed7037ed7037ed7037ed7037ed7038ed7038ed7038ed7038ed7038ed"
	"7038ed7038ed7038ed7038ed7038ed7038ed7038ed7038ed7038ed7038ed7038ed7038ed7038ed7038ed7038ed7038ed"
	"7038ed7038ed7038ed7038ed7038ed7038ed7038ed7038ed7038ed7038ed7038ed7038ed7038ed7038ed7038ed7038ed"
	"7038ed7038ed7038ed7038ed7038ed7038ed7038ed7038ed7038ed7038ed7038ed7038ed7038ed7038ed7038ed7038ed"
	"7038ed7038ed7038ee703835d67b3835cdf738ee703835d57b38ed7038ed7038ed7038ed7038ed7038ed7038ed7038ed"
	"7038ed7038ed7038ed7038ed7038ed7038ed7038ed7038ed7038ed7038ed7038ed7038ed7038ed7038ed7038ed7038ed"
	"7038ed7038ed7038ed7038ed7038ed7038ed7038ed7038ed7038ed7038ed7038ed7038ed7038ed7038ed7038ed7038ed"
	"7039ed7039ed7039ed7039ed7039ed7039ed7039ed7039ed7039ed7039ed7039ed7039ed7039ed7039ed7039ed7039ed"
	"7039ed7039ed7039ed7039ec700e3932300a6c696e65203932310a6c696e65110000290400000b203932320a6c696e65"
	"203932330ac10134e10135e10136e10137e10138e10139c2013330e10131e10132e001e50b33e50b33e50b33e50b33e5"
	"0b33e50b33e50b34e50b34e50b34e50b34e50b34e50b34e50b34e50b34e50b34e50b34e50b35e50b35e50b35e50b35e5"
	"0b35e50b35e50b35e50b35e50b35e50b35e50b36e50b36e50b36e50b36e50b36e50b36e50b36e50b36e50b36e50b36e5"
	"0b37e50b37e50b37e50b37e50b37e50b37e50b37e50b37e50b37e50b37e50b38e50b38e50b38e50b38e50b38e50b38e5"
	"0b38e50b38e50b38e50b38e50b39e50b39e50b39e50b39e50b39e50b39e50b39e50b39e50b39e50b39c70b313030cb0b"
	"313030cf0b313030d30b313030d70b313030db0b313030df0b313030c30c313030c70c313030cb0c313030278d013127"
	"8d0131278d0131278d0131278d0131278d0131278d0131278d0131278d0131278d0131278d0132278d0132278d013227"
	"8c01ef73313032278d0132278d0132278d0132278d0132278d0132278c01eb74313033278d0133278d0133271c03fa74"
	"3130fe743130e2753130e6753130ea753130ee753130f2753130f6753130fa753130fe753130e2763130e6763130ea76"
	"3130ee763130f2763130f6763130fb76313035271d0335271c03e6773130ea773130ee773130f2773130f6773130fa77"
	"3130fe773130e2783130e6783130ea783130ee783130f2783130f6783130fa783130fe783130e2793130e6793130ea79"
	"3130ee793130f2793130f6793130fa793130fe793130e27a3130e67a3130ea7a3130ee7a3130f27a3130f67a3130fa7a"
	"3130fe7a3130e27b3130e67b3130ea7b3130ee7b3130f27b3130f67b3130fa7b3130fe7b3130e27c3130e67c3130ea7c"
	"3130ee7c3130f27c3130f67c3130fa7c3130279d0f31279d0f31279d0f31279d0f31279d0f31279d0f31279d0f31279d"
	"0f31279d0f31279d0f31279d0f31279d0f31279d0f31279d0f31279d0f31279d0f31279d0f31279d0f31279d0f31279d"
	"0f31279d0f31279d0f31279d0f31279d0f31279d0f31279d0f31279d0f31279d0f31279d0f31279d0f31279d0f31279d"
	"0f31279d0f31279d0f31279d0f31279d0f31279d0f31279d0f31279d0f31279d0f31279d0f31279d0f31279d0f31279d"
	"0f31279d0f31279d0f31279d0f31279d0f31279d0f31279d0f31279d0f31279d0f31279d0f31279d0f31279e0f3135ee"
	"a23135eda231279d0f31279d0f31279d0f31279e0f3136fdae31279e0f3136ee893136eda231279d0f31279d0f31279d"
	"0f31279d0f31279d0f31279d0f31279d0f31279d0f31279d0f31279d0f31279d0f31279d0f31279d0f31279d0f31279d"
	"0f31279d0f31279d0f31279d0f31279d0f31279d0f31279d0f31279d0f31279d0f31279d0f31279d0f31279d0f31279d"
	"0f31279d0f31279d0f31279d0f31279d0f31279d0f31279d0f31279c0f0b3139380a6c696e6520313139390a11";
#define REAL_LZO_REGULAR_LEN 4096
/* 631 bytes, zero-padded to 633 */
static const char real_lzo_inline_hex[] =
	"7902000071020000046c696e6520300a990031b90032b90033b90034b90035b90036b90037b90038b90039b90031f808"
	"dd0831c10931c50931c90931cd0931d10931d50931d90931dd0932dd0932dd0932dd0932dd0932dd0932dd0932dd0932"
	"dd0932dd0932dd0933dd0933dd0933dd0933dd0933dd0933dd0933dd0933dd0933dd0933dd0934dd0934dd0934dd0934"
	"dd0934dd0934dd0934dd0934dd0934dd0934dd0935dd0935dd0935dd0935dd0935dd0935dd0935dd0935dd0935dd0935"
	"dd0936dd0936dd0936dd0936dd0936dd0936dd0936dd0936dd0936dd0936dd0937dd0937dd0937dd0937dd0937dd0937"
	"dd0937dd0937dd0937dd0937dd0938dd0938dd0938dd0938dd0938dd0938dd0938dd0938dd0938dd0938dd0939dd0939"
	"dd0939dd0939dd0939dd0939dd0939dd0939dd0939dd0939de093130c20a3130c60a3130ca0a3130ce0a3130d20a3130"
	"d60a3130da0a3130de0a3130c20b3130e40b28a80ce40b27b00c27b40c27b80c27bc0c27c00c27c40c27c80ced6631f1"
	"6631f56631f96631fd6631e16731e56731e96731ed6731f16731f56731f96731fd6731e16831e56831e96831ed6831f1"
	"6831f56831f96831fd6831e16931e56931e96931ed6931f16931f56931f96931fd6931e16a31e56a31e96a31ed6a31f1"
	"6a31f56a31f96a31fd6a31e16b31e56b31e96b31ee6b3136ec43f66b3136ec43fd6b31e16c31e56c31e96c31ed6c31f1"
	"6c31f56c31f96c31fd6c31e16d31e56d31e96d31ed6d31f16d31f56d31f96d31fd6d31e16e31e56e31e96e31ed6e31f1"
	"6e31f56e31f96e31fd6e31e16f31e56f31e96f31ed6f31f16f31f56f31f96f31fd6f31e17031e4700a3139380a6c696e"
	"65203139390a11";
#define REAL_LZO_INLINE_LEN 633
/* 1130 bytes, zero-padded to 4096 */
static const char real_zstd_regular_hex[] =
	"28b52ffd608a29052300da54700912a0a5a039d12300f047e4f6d2263cf08b562b9d009c009900ff3f994c2693c96432"
	"99b46ddbb62449926455555555550821841042084444444444333333333322222222221111111111ffffbf582c168bc5"
	"62b158b46ddbb62449926455555555550821841042084444444444333333333322222222221111111111ffffdbb66ddb"
	"6ddbb62d49922459555555551542082184100211111111d1cccccccc8c888888884844444444c4ffff65051a89051b00"
	"0c040804111111ffffbfb0b0b0b0b0b0b0b0b0d0b66ddb9224499255555555552184104208211011111111cdcccccccc"
	"88888888884444444444fcffff68341a8d46a3d168d4b66ddb9224499255555555552184104208211011111111cdcccc"
	"cccc88888888884444444444fcffff66b3d96c369bcd66d3b66ddb9224499255555555552184104208211011111111cd"
	"cccccccc88888888884444444444fc072222221111111111ffffbfaeebbaaeebbaae6ddbb62d49922459555555551542"
	"082184100211111111d1cccccccc8c888888884844444444c4ffff8fe3388ee3388e63dbb66d4b922449565555555585"
	"10420821844044444444343333333323222222221211111111f1ffffabd56ab55aad56ab55dbb66d4b92244956555555"
	"5585104208218440444444443433333333232222222212111182f6ffffffffffffffffffffffffffffffffffffffffff"
	"ffb66ddb96244992acbdf7de7befbdf7de7befbdf7de7befbdf7de7befbdf7de7befbdf7de7befbdf7de7befbdf7de7b"
	"efbdf7de7befbdf7de7befb66ddb96244992acaaaaaaaa0a21841042088188888888686666666646442484afa843b0dd"
	"9b03831e494451cf011390c0404939df55ab2bababd5aad5d4caca6a656a65b56eb59ababa5a4d5b5dadaeacd6a65656"
	"eb56aba9ababd5b4d5d5a0ee7aaec5287374bb00e6e85e8ccbd1bd8c2c47f702548eeec5a01cddcb6872742f80e4e85e"
	"8cc8d1bd8c2087b69a5a5d594dad56ad865b4f27eba2ea33ea94d34fe9a1d1d7d0cb9f9fce83cd379917973f9507936f"
	"222f1e3f8d07165f12af1c7e0a8f0cbe045efc7df41decbdc9bbb8fba93b987b89bbf0f6693bb2f69276e5ec537630f6"
	"22ece2eba7eb60eb4dd6c5d5a7eac0d44bd495a74fd391a597a48ba38fa283a13741173f3f3d073b2f39176e3e354766"
	"5e62aebc7c5a0e565ea45c9cfc941c8cbc09b9f8f8741cd878c9b872f1a93832f11231b9fc74b19ee774ed5974fbcf38"
	"9ae5194f32e72ccb753da75b97e03e9aa5338e6615fd24a73bcdf33cf564f3cb338e66796ef0db6678ed5a9ed7a5e87c"
	"9664139c2505cf6535a76bd7f1bc6ad74f139c25c944c75bccf23ced3c8fabea5c8ecdf28ca3275404010c4381a230c8"
	"cecdf28c63b33cb5024250a0280c448a683c9c4bd20467a17e4d719ea7ade76997b57320e0525a0e3772dbb5c56c8bad"
	"5c3b6b516d87da5def3bf734f75ad79bf55bf71af75df79afb9beb9df78df59dfb99fbadebcd9bffb425f9176d06f9fb"
	"6c77fc35db327e7bcba6a88f8e46a3d191d1a867d45300155d01";
#define REAL_ZSTD_REGULAR_LEN 4096
/* 410 bytes, zero-padded to 410 */
static const char real_zlib_inline_hex[] =
	"785e3cd33b4e04311405d19c55b00497ff5e10011262ff2142bee5e84573d4d37debe7fbf7ebb37cfcfc1feea9f7b47b"
	"fa3de39e79cfba67df73f2739938042212a1884530a2118e78355ef5b9e2d578355e8d57e3d578355e8dd7e2b578cd3f"
	"1aafc56bf15abc16afc56bf17abc1eafc7ebbeb9783d5e8fd7e3f5783dde8837e28d7823def053c41bf146bc116fc49b"
	"f166bc196fc69bf1a6df36de8c37e3cd782bde8ab7e2ad782bde8ab71c4bbc156fc5dbf176bc1d6fc7dbf176bc1d6fbb"
	"be783bde8977e29d7827de8977e29d7827de71ce6fcf0ebab8e8e2a48b9b2e8ebab8eae2ac8bbb2e0ebb28f352517eb1"
	"bc5a5e2eaf9717cc2be6256333180d5643f599ed06c3c172301d6c07e3c17a301fec0703a2f9364c081bc288b022cc08"
	"3bc290b0244c095ba2fb9ead0973c29e30282c0a93c2a6302aac0ab362f8050d0bcbc2b4b02d8c0bebc2bcb02f0c0c0b"
	"63ba0d1bc3c8b032cc0c3bc3d0b0344c0d5bc3d858aecedcb0370c0e8bc3e4b0398c0eabc3ecb03bb67bb63c4c0fdbc3"
	"f8b03ecc0ffbc300b1404c90733efe000000ffff0300bd87cf6c";
#define REAL_ZLIB_INLINE_LEN 410

struct real_vector {
	const char *name;
	int type;
	const char *hex;
	size_t disk_len; /* the extent's disk_num_bytes, or the inline data size */
	size_t ram_bytes;
	unsigned int nlines; /* content: "line 0\n".."line N-1\n" */
};

static const struct real_vector real_vectors[] = {
	{ "lzo regular", UB_COMPRESS_LZO, real_lzo_regular_hex, REAL_LZO_REGULAR_LEN, 12288, 1200 },
	{ "lzo inline", UB_COMPRESS_LZO, real_lzo_inline_hex, REAL_LZO_INLINE_LEN, 1690, 200 },
	{ "zstd regular", UB_COMPRESS_ZSTD, real_zstd_regular_hex, REAL_ZSTD_REGULAR_LEN, 12288,
	  1200 },
	{ "zlib inline", UB_COMPRESS_ZLIB, real_zlib_inline_hex, REAL_ZLIB_INLINE_LEN, 1690, 200 },
};

static uint8_t *load_vector(const struct real_vector *v)
{
	uint8_t *raw = calloc(1, v->disk_len);

	assert_non_null(raw);
	hex_decode(v->hex, raw, v->disk_len);
	return raw;
}

static void test_real_kernel_extents(void **state)
{
	for (size_t i = 0; i < sizeof(real_vectors) / sizeof(real_vectors[0]); i++) {
		const struct real_vector *v = &real_vectors[i];
		uint8_t *raw = load_vector(v), *out, *want = malloc(v->ram_bytes);
		size_t want_len, produced;

		assert_non_null(want);
		want_len = fill_lines(want, v->ram_bytes, v->nlines);
		if (run(v->type, raw, v->disk_len, v->ram_bytes, &out, &produced))
			fail_msg("%s: real extent did not decode", v->name);
		assert_int_equal(produced, want_len);
		assert_memory_equal(out, want, want_len);
		free(out);
		/* reading only the start, as for a partial extent reference */
		assert_int_equal(run(v->type, raw, v->disk_len, 100, &out, &produced), 0);
		assert_int_equal(produced, 100);
		assert_memory_equal(out, want, 100);
		free(out);
		free(want);
		free(raw);
	}
}

/* The kernel's lzo extent has three segments, one per input sector. */
static void test_real_lzo_layout(void **state)
{
	uint8_t *raw = load_vector(&real_vectors[0]);
	size_t pos = LZO_HDR, segs = 0, total = get_le32(raw);

	assert_true(total <= REAL_LZO_REGULAR_LEN && total > REAL_LZO_REGULAR_LEN - SECTOR);
	while (pos < total) {
		pos += LZO_HDR + get_le32(raw + pos);
		if (SECTOR - pos % SECTOR < LZO_HDR)
			pos += SECTOR - pos % SECTOR;
		segs++;
	}
	assert_int_equal(pos, total);
	assert_int_equal(segs, 3);
	free(raw);
}

/* Every single-byte change to the real extents: any result but a crash or overrun. */
static void test_real_extents_mutated(void **state)
{
	for (size_t i = 0; i < sizeof(real_vectors) / sizeof(real_vectors[0]); i++) {
		const struct real_vector *v = &real_vectors[i];
		uint8_t *raw = load_vector(v);
		size_t produced;

		for (size_t at = 0; at < v->disk_len; at += (at < 64 ? 1 : 7)) {
			static const uint8_t flips[] = { 0x01, 0x80, 0xff };

			for (size_t f = 0; f < sizeof(flips); f++) {
				int ret;

				raw[at] ^= flips[f];
				ret = run(v->type, raw, v->disk_len, v->ram_bytes, NULL, &produced);
				assert_true(ret == 0 || ret == -EUCLEAN);
				raw[at] ^= flips[f];
			}
		}
		free(raw);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_round_trips),
		cmocka_unit_test(test_short_stream_into_larger_buffer),
		cmocka_unit_test(test_zero_outlen),
		cmocka_unit_test(test_poisoned_tail_is_zero),
		cmocka_unit_test(test_lzo_sector_end_padding),
		cmocka_unit_test(test_output_smaller_than_data),
		cmocka_unit_test(test_truncated),
		cmocka_unit_test(test_zero_length_input),
		cmocka_unit_test(test_garbage),
		cmocka_unit_test(test_lzo_bad_lengths),
		cmocka_unit_test(test_lzo_sectorsize),
		cmocka_unit_test(test_zlib_header_and_trailer),
		cmocka_unit_test(test_zstd_frames),
		cmocka_unit_test(test_unknown_type_and_names),
		cmocka_unit_test(test_real_kernel_extents),
		cmocka_unit_test(test_real_lzo_layout),
		cmocka_unit_test(test_real_extents_mutated),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
