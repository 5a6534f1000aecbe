/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the superblock: validation, the device-less volume built
 * from it (system chunk array included) and the dump-super printer.
 *
 * Input: the superblock bytes (padded with zeros or cut to 4096). Random bytes
 * almost never carry the magic and a matching checksum, so unless the first
 * byte (part of the checksum field, overwritten anyway) is odd, the magic and
 * bytenr are set and the checksum is recomputed with the algorithm the buffer's
 * csum_type names; odd inputs reach the validator untouched.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* fopencookie */
#endif
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ubtrfs/format.h"
#include "print.h"
#include "ubtrfs/volume.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *sb = calloc(1, UB_SUPER_INFO_SIZE);
	size_t logged = 0;
	struct ub_log log = { .fn = fuzz_quiet, .arg = &logged, .verbosity = UB_LOG_DEBUG, .errors = NULL };
	struct ub_volume *vol = NULL;
	uint8_t csum[UB_CSUM_SIZE_MAX];
	char why[160];

	/* heap copy of exactly 4096 bytes so ASan sees any read past the superblock */
	if (!sb)
		return 0;
	memcpy(sb, data, size < UB_SUPER_INFO_SIZE ? size : UB_SUPER_INFO_SIZE);
	if (size == 0 || !(data[0] & 1)) {
		UB_SET(ub_disk_super, magic, sb, UB_MAGIC);
		UB_SET(ub_disk_super, bytenr, sb, UB_SUPER_INFO_OFFSET);
		if (ub_csum((unsigned)UB_GET(ub_disk_super, csum_type, sb), sb + UB_CSUM_SIZE_MAX,
			    UB_SUPER_INFO_SIZE - UB_CSUM_SIZE_MAX, csum) == 0)
			memcpy(sb, csum, UB_CSUM_SIZE_MAX);
	}
	why[0] = 0;
	if (ub_super_validate(sb, UB_SUPER_INFO_OFFSET, why, sizeof(why)) == 0) {
		if (ub_volume_open_super(sb, &log, &vol) == 0)
			ub_volume_close(vol);
	} else if (!memchr(why, '\0', sizeof(why)) || !why[0]) {
		abort(); /* a rejection must say why */
	}
	fuzz_print_super(sb);
	free(sb);
	return 0;
}
