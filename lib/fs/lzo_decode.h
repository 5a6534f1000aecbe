/* SPDX-License-Identifier: MIT */
/* Decoding one LZO1X stream (a btrfs lzo segment). */
#ifndef UBTRFS_FS_LZO_DECODE_H
#define UBTRFS_FS_LZO_DECODE_H

#include <stddef.h>
#include <stdint.h>

/*
 * Decode `in` into `out`, whose room *outlen gives; *outlen becomes what was
 * written, also on failure (a correct prefix of the stream's output). Returns
 * LZO_E_OK or liblzo2's LZO_E_* code for the same fault. Bytes of `out` past
 * the new *outlen may have been written and hold nothing meaningful.
 */
int ub_lzo1x_decode(const uint8_t *in, size_t inlen, uint8_t *out, size_t *outlen);

#endif
