/* SPDX-License-Identifier: MIT */
/*
 * Compressing one extent's data as the kernel stores it (at most 128 KiB of
 * file data per compressed extent):
 *   zlib  a zlib stream (header, deflate, adler32), as the kernel's deflate
 *   zstd  one zstd frame whose window fits the kernel's 128 KiB decoder
 *   lzo   le32 total length, then per input sector a le32 segment length and
 *         its LZO1X-1 data; a segment header never straddles a sector (the
 *         rest of a sector with fewer than 4 bytes left is zero padding)
 * Returns 0 and the compressed size, or -E2BIG when the result would not
 * save at least one sector (the kernel then writes the data uncompressed).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <lzo/lzo1x.h>
#include <zlib.h>
#include <zstd.h>

#include "fsw/fsw.h"

static int c_zlib(const uint8_t *in, size_t len, uint8_t *out, size_t cap, size_t *olen, int level)
{
	uLongf n = cap;

	if (compress2(out, &n, in, len, level > 0 && level <= 9 ? level : 3) != Z_OK)
		return -E2BIG;
	*olen = n;
	return 0;
}

static int c_zstd(const uint8_t *in, size_t len, uint8_t *out, size_t cap, size_t *olen, int level)
{
	ZSTD_CCtx *cx = ZSTD_createCCtx();
	size_t n;

	if (!cx)
		return -ENOMEM;
	ZSTD_CCtx_setParameter(cx, ZSTD_c_compressionLevel, level > 0 && level <= 15 ? level : 3);
	/* the kernel decodes with a 128 KiB window at most */
	ZSTD_CCtx_setParameter(cx, ZSTD_c_windowLog, 17);
	ZSTD_CCtx_setParameter(cx, ZSTD_c_contentSizeFlag, 1);
	n = ZSTD_compress2(cx, out, cap, in, len);
	ZSTD_freeCCtx(cx);
	if (ZSTD_isError(n))
		return -E2BIG;
	*olen = n;
	return 0;
}

static int c_lzo(const uint8_t *in, size_t len, uint8_t *out, size_t cap, size_t *olen, uint32_t ss)
{
	uint8_t wrk[LZO1X_1_MEM_COMPRESS];
	uint8_t *seg = malloc(ss + ss / 16 + 64 + 3);
	size_t pos = 4;

	if (!seg)
		return -ENOMEM;
	if (lzo_init() != LZO_E_OK) {
		free(seg);
		return -EINVAL;
	}
	for (size_t at = 0; at < len; at += ss) {
		lzo_uint n = 0;
		size_t in_n = len - at < ss ? len - at : ss;
		size_t room = ss - pos % ss;

		if (lzo1x_1_compress(in + at, in_n, seg, &n, wrk) != LZO_E_OK)
			break;
		if (room < 4) {
			if (pos + room > cap)
				break;
			memset(out + pos, 0, room);
			pos += room;
		}
		if (pos + 4 + n > cap)
			break;
		ub_put_le(out + pos, 4, n);
		memcpy(out + pos + 4, seg, n);
		pos += 4 + n;
		if (at + ss >= len) {
			free(seg);
			ub_put_le(out, 4, pos);
			*olen = pos;
			return 0;
		}
	}
	free(seg);
	return -E2BIG;
}

int fsw_compress(int type, int level, const uint8_t *in, size_t len, uint32_t sectorsize, uint8_t *out, size_t *olen)
{
	/* worth it only when it saves a sector: out has room for len - sectorsize bytes */
	size_t cap = len > sectorsize ? len - sectorsize : 0;
	int ret;

	if (!cap)
		return -E2BIG;
	switch (type) {
	case UB_COMPRESS_ZLIB: ret = c_zlib(in, len, out, cap, olen, level); break;
	case UB_COMPRESS_ZSTD: ret = c_zstd(in, len, out, cap, olen, level); break;
	case UB_COMPRESS_LZO: ret = c_lzo(in, len, out, cap, olen, sectorsize); break;
	default: return -EINVAL;
	}
	if (!ret && (*olen + sectorsize - 1) / sectorsize * sectorsize >= len)
		ret = -E2BIG;
	return ret;
}
