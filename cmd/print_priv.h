/* SPDX-License-Identifier: MIT */
/*
 * Shared helpers of the dump printers (cmd/print_*.c). Not part of the library
 * API: only the printers include this.
 *
 * Every decoder receives the item bytes and their size, and checks that a field
 * lies inside the item before reading it: the printers also run on fuzzed
 * garbage.
 */
#ifndef UBTRFS_CMD_PRINT_PRIV_H
#define UBTRFS_CMD_PRINT_PRIV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ubtrfs/format.h"
#include "print.h"

/* Offset just past `field` of on-disk struct `stype`. */
#define PR_END(stype, field) (offsetof(struct stype, field) + UB_FSIZE(stype, field))

/* Longest name or xattr value printed, as btrfs-progs caps it. */
#define PR_NAME_MAX 255U

/* Not in the UAPI header: the pre-2008 csum item type, and where the backref revision sits. */
#define PR_OLD_CSUM_ITEM_KEY 120
#define PR_BACKREF_REV_SHIFT 56

#define PR_UUID_STR_LEN 37
#define PR_FLAGS_STR_LEN 160

/* The note printed when an item ends before the field being decoded. */
void pr_short(FILE *f, uint32_t size);

/* 16 bytes -> "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx". */
void pr_uuid_str(char out[PR_UUID_STR_LEN], const uint8_t *uuid);

/*
 * Print `len` bytes of a name or value: printable ASCII and well-formed UTF-8
 * as they are, backslash doubled, anything else (controls, escape sequences,
 * broken UTF-8) as \xNN, so a hostile name cannot drive the terminal.
 */
void pr_name(FILE *f, const uint8_t *p, size_t len);

/* An objectid the way dump-tree spells it; the key type decides ambiguous ids. */
void pr_objectid(FILE *f, uint64_t objectid, uint8_t type);

/* "key (...)" for a 17-byte on-disk key the caller has bounds-checked. */
void pr_disk_key(FILE *f, const uint8_t *disk_key);

/* `prefix` + "SEC.NSEC (YYYY-MM-DD HH:MM:SS)" + newline, from a 12-byte btrfs_timespec. */
void pr_timespec(FILE *f, const char *prefix, const uint8_t *ts);

/* Block group / chunk type flags: "DATA|single", "METADATA|DUP", "SYSTEM|RAID1C3". */
void pr_bg_flags_str(char *out, size_t n, uint64_t flags);

/* Hex lines of at most `max` of the `size` bytes (for items we cannot decode). */
void pr_hexdump(FILE *f, const uint8_t *p, uint32_t size, uint32_t max);

/* Chunk item body (also used for the superblock's sys_chunk_array). */
void pr_chunk(FILE *f, const uint8_t *p, uint32_t size);

/* ---- item bodies, by family ---- */

/* print_item_fs.c */
void pr_inode_item(FILE *f, const uint8_t *p, uint32_t size);
void pr_inode_ref(FILE *f, const uint8_t *p, uint32_t size);
void pr_inode_extref(FILE *f, const uint8_t *p, uint32_t size);
void pr_dir_item(FILE *f, const uint8_t *p, uint32_t size);
void pr_dir_log(FILE *f, const uint8_t *p, uint32_t size);
void pr_file_extent(FILE *f, const uint8_t *p, uint32_t size);
void pr_extent_csum(FILE *f, const struct ub_key *key, const uint8_t *p, uint32_t size,
		    const struct ub_print_ctx *ctx);
void pr_verity(FILE *f, const struct ub_key *key, const uint8_t *p, uint32_t size);

/* print_item_extent.c */
void pr_extent_item(FILE *f, const struct ub_key *key, const uint8_t *p, uint32_t size);
void pr_extent_data_ref(FILE *f, const uint8_t *p, uint32_t size);
void pr_shared_data_ref(FILE *f, const uint8_t *p, uint32_t size);
void pr_block_group(FILE *f, const uint8_t *p, uint32_t size);
void pr_free_space_info(FILE *f, const uint8_t *p, uint32_t size);
void pr_raid_stripe(FILE *f, const uint8_t *p, uint32_t size);

/* print_item_root.c */
void pr_root_item(FILE *f, const uint8_t *p, uint32_t size);
void pr_root_ref(FILE *f, const uint8_t *p, uint32_t size, const char *tag);
void pr_uuid_item(FILE *f, const uint8_t *p, uint32_t size);
void pr_qgroup_status(FILE *f, const uint8_t *p, uint32_t size);
void pr_qgroup_info(FILE *f, const uint8_t *p, uint32_t size);
void pr_qgroup_limit(FILE *f, const uint8_t *p, uint32_t size);
void pr_free_space_header(FILE *f, const uint8_t *p, uint32_t size);

/* print_item_volume.c */
void pr_dev_item(FILE *f, const uint8_t *p, uint32_t size);
void pr_dev_extent(FILE *f, const uint8_t *p, uint32_t size);
void pr_persistent_item(FILE *f, const struct ub_key *key, const uint8_t *p, uint32_t size);
void pr_temporary_item(FILE *f, const struct ub_key *key, const uint8_t *p, uint32_t size);
void pr_dev_replace(FILE *f, const uint8_t *p, uint32_t size);

#endif
