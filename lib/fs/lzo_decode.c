/* SPDX-License-Identifier: MIT */
/*
 * An LZO1X decoder for btrfs's lzo segments (at most one sector out each).
 * liblzo2's safe decoder copies literals and matches a few bytes at a time
 * and took most of a compressed read's CPU time; this one checks every
 * input and output bound just as strictly, then copies in 8- and 16-byte
 * words wherever the buffers leave room for the overshoot (bytes past the
 * current end that a later instruction or the caller's tail clearing
 * overwrites). Results and error codes are liblzo2's (LZO_E_*).
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <lzo/lzoconf.h>
#include "lzo_decode.h"

/* Offsets the short matches start from (LZO1X's M2 limit, and M4's base). */
#define AFTER_RUN_BASE 0x801U
#define FAR_BASE 0x4000U

/* n literals (both bounds checked by the caller), over-copying when both buffers leave room. */
static inline void copy_literals(uint8_t *op, const uint8_t *ip, size_t n, size_t out_room, size_t in_room)
{
	if (n <= 16 && out_room >= 16 && in_room >= 16)
		memcpy(op, ip, 16);
	else
		memcpy(op, ip, n);
}

/* n bytes from dist back (1 <= dist <= what was written; n checked): the stream may overlap itself. */
static inline void copy_match(uint8_t *op, size_t dist, size_t n, size_t out_room)
{
	const uint8_t *m = op - dist;

	if (dist >= 16 && n <= 16 && out_room >= 16) {
		memcpy(op, m, 16);
	} else if (dist >= 8 && out_room >= n + 8) {
		/* every word read lies wholly before the one written: earlier words are final */
		for (size_t k = 0; k < n; k += 8)
			memcpy(op + k, m + k, 8);
	} else {
		for (size_t k = 0; k < n; k++)
			op[k] = m[k];
	}
}

/*
 * A length coded as zero bytes (255 each) then a non-zero byte, on top of
 * `base`; false when the input ends inside it.
 */
static inline bool long_length(const uint8_t **ipp, const uint8_t *ip_end, size_t base, size_t *len)
{
	const uint8_t *ip = *ipp;
	size_t n = base;

	while (ip < ip_end && *ip == 0) {
		n += 255;
		ip++;
	}
	if (ip == ip_end)
		return false;
	*len = n + *ip++;
	*ipp = ip;
	return true;
}

#define NEED_IN(n)                                     \
	do {                                           \
		if ((size_t)(ip_end - ip) < (size_t)(n)) { \
			ret = LZO_E_INPUT_OVERRUN;     \
			goto out;                      \
		}                                      \
	} while (0)
#define NEED_OUT(n)                                    \
	do {                                           \
		if ((size_t)(op_end - op) < (size_t)(n)) { \
			ret = LZO_E_OUTPUT_OVERRUN;    \
			goto out;                      \
		}                                      \
	} while (0)

int ub_lzo1x_decode(const uint8_t *in, size_t inlen, uint8_t *out, size_t *outlen)
{
	const uint8_t *ip = in, *const ip_end = in + inlen;
	uint8_t *op = out, *const op_end = out + *outlen;
	size_t t, n, dist, tail;
	int ret;

	NEED_IN(1);
	if (*ip > 17) {
		/* the stream opens with a literal run of t bytes */
		t = (size_t)*ip++ - 17;
		if (t < 4)
			goto trailing_literals;
		NEED_IN(t);
		NEED_OUT(t);
		copy_literals(op, ip, t, (size_t)(op_end - op), (size_t)(ip_end - ip));
		op += t;
		ip += t;
		goto after_run;
	}
	for (;;) {
		if (ip == ip_end) {
			ret = LZO_E_EOF_NOT_FOUND;
			goto out;
		}
		t = *ip++;
		if (t >= 16)
			goto match;
		/* a literal run of 3 or more */
		if (t == 0 && !long_length(&ip, ip_end, 15, &t)) {
			ret = LZO_E_INPUT_OVERRUN;
			goto out;
		}
		t += 3;
		NEED_IN(t);
		NEED_OUT(t);
		copy_literals(op, ip, t, (size_t)(op_end - op), (size_t)(ip_end - ip));
		op += t;
		ip += t;
after_run:
		NEED_IN(1);
		t = *ip++;
		if (t >= 16)
			goto match;
		/* right after a long run, a small code is a 3-byte match from 2049 bytes back or more */
		NEED_IN(1);
		dist = AFTER_RUN_BASE + (t >> 2) + ((size_t)*ip++ << 2);
		n = 3;
		tail = t & 3;
		goto copy;
match:
		if (t >= 64) {
			NEED_IN(1);
			dist = 1 + ((t >> 2) & 7) + ((size_t)*ip++ << 3);
			n = (t >> 5) + 1;
			tail = t & 3;
		} else if (t >= 32) {
			t &= 31;
			if (t == 0 && !long_length(&ip, ip_end, 31, &t)) {
				ret = LZO_E_INPUT_OVERRUN;
				goto out;
			}
			NEED_IN(2);
			dist = 1 + (((size_t)ip[0] | (size_t)ip[1] << 8) >> 2);
			tail = ip[0] & 3;
			ip += 2;
			n = t + 2;
		} else if (t >= 16) {
			size_t far = (t & 8) << 11;

			t &= 7;
			if (t == 0 && !long_length(&ip, ip_end, 7, &t)) {
				ret = LZO_E_INPUT_OVERRUN;
				goto out;
			}
			NEED_IN(2);
			dist = far + (((size_t)ip[0] | (size_t)ip[1] << 8) >> 2);
			tail = ip[0] & 3;
			ip += 2;
			if (dist == 0) {
				/* the end marker: all input used up, or the stream lied about its length */
				ret = ip == ip_end ? LZO_E_OK : LZO_E_INPUT_NOT_CONSUMED;
				goto out;
			}
			dist += FAR_BASE;
			n = t + 2;
		} else {
			/* after 1-3 trailing literals: a 2-byte match from at most 1024 back */
			NEED_IN(1);
			dist = 1 + (t >> 2) + ((size_t)*ip++ << 2);
			n = 2;
			tail = t & 3;
		}
copy:
		if (dist > (size_t)(op - out)) {
			ret = LZO_E_LOOKBEHIND_OVERRUN;
			goto out;
		}
		NEED_OUT(n);
		copy_match(op, dist, n, (size_t)(op_end - op));
		op += n;
		if (!tail)
			continue;
		t = tail;
trailing_literals:
		/* 1-3 literals ride on the last instruction; a match code follows */
		NEED_IN(t + 1);
		NEED_OUT(t);
		copy_literals(op, ip, t, (size_t)(op_end - op), (size_t)(ip_end - ip));
		op += t;
		ip += t;
		t = *ip++;
		goto match;
	}
out:
	*outlen = (size_t)(op - out);
	return ret;
}
