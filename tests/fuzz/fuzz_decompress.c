/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for ub_decompress. Input: one byte selecting the type
 * (1..3 after reduction; 0 and 4.. also reach the unknown-type path), two
 * bytes little-endian giving outlen (below 0x8000: that many bytes; from
 * 0x8000: 4 * (v - 0x8000) + 4, up to 128 KiB), then the compressed bytes. The output buffer is exactly outlen bytes so that ASan
 * catches any write past it.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fs/compress.h"

#define FUZZ_MAX_OUT (128U * 1024U)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char why[128];
	size_t outlen, produced = 0;
	uint8_t *out, *in;
	int type, ret;

	if (size < 3)
		return 0;
	/* 1..3 most of the time; keep a sliver of invalid types reachable */
	type = data[0] < 250 ? 1 + data[0] % 3 : data[0] - 250;
	/* exact small sizes for boundary cases, coarse large ones up to the btrfs maximum */
	outlen = (size_t)data[1] | (size_t)(data[2] & 0x7f) << 8;
	if (data[2] & 0x80)
		outlen = outlen * 4 + 4;
	if (outlen > FUZZ_MAX_OUT)
		outlen = FUZZ_MAX_OUT;
	size -= 3;
	/* a copy of exactly the input, so reads past it are caught too */
	in = malloc(size ? size : 1);
	out = malloc(outlen ? outlen : 1);
	if (!in || !out)
		goto out;
	if (size)
		memcpy(in, data + 3, size);
	ret = ub_decompress(type, in, size, out, outlen, 4096, &produced, why, sizeof(why));
	if (produced > outlen || (ret != 0 && !memchr(why, '\0', sizeof(why))))
		abort();
out:
	free(in);
	free(out);
	return 0;
}
