/* SPDX-License-Identifier: MIT */
/* Decompression of btrfs compressed extents (zlib, btrfs-framed lzo, zstd): the library's and the fuzzers'. */
#ifndef UBTRFS_FS_COMPRESS_H
#define UBTRFS_FS_COMPRESS_H

#include <stddef.h>
#include <stdint.h>

/*
 * Decompress `inlen` bytes of a compressed extent of type `type`
 * (UB_COMPRESS_ZLIB/LZO/ZSTD) into `out`, which holds `outlen` bytes: the
 * extent's ram_bytes (or, for inline extents, the item's ram_bytes).
 * `sectorsize` is needed by the lzo framing (segments never straddle a sector).
 * Writes the number of bytes produced to *produced (may be less than outlen
 * when the stream ends early). For every known type, success or not,
 * out[*produced, outlen) is zero on return, as the kernel reads it: the decoders may scribble there.
 * Safe to call from several threads at once.
 * Returns 0, -EINVAL for an unknown type, or -EUCLEAN with a reason in `why`
 * for a corrupt stream. Never reads or writes out of bounds, whatever the input.
 */
int ub_decompress(int type, const uint8_t *in, size_t inlen, uint8_t *out, size_t outlen,
		  uint32_t sectorsize, size_t *produced, char *why, size_t whylen);

/*
 * ub_decompress keeps its decoder state per thread, made on first use and freed
 * when the thread exits; this frees the calling thread's now (it is made again
 * if needed), for a long-lived thread that is done decompressing.
 */
void ub_decompress_release(void);

const char *ub_compress_name(int type); /* "none", "zlib", "lzo", "zstd", or NULL */

#endif
