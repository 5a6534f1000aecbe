/* SPDX-License-Identifier: MIT */
/*
 * The undo file's layout, shared by its writer (undo.c) and its reader
 * (apply.c). All numbers little-endian, read and written with UB_GET/UB_SET.
 *
 *   header (64 bytes)  magic, version, the filesystem's fsid, crc32c
 *   record...          head (24 bytes) + payload; crc32c of both (the head's
 *                      crc field zero) in the head
 *
 * Records: DEV (a device wrapped: its identity and old primary superblock),
 * RANGE (the old bytes of one range of a device, before its first write),
 * END (the trailer ub_undo_finish writes). Every record is durable before
 * the write it protects, so the records that verify, read in order up to the
 * first that does not, are exactly what must be put back.
 */
#ifndef UBTRFS_UNDO_FILE_H
#define UBTRFS_UNDO_FILE_H

#include <stdint.h>
#include "ubtrfs/format.h"

#define UNDO_MAGIC "ubtrundo"
#define UNDO_VERSION 1

struct undo_disk_header {
	uint8_t magic[8];
	__le32 version;
	__le32 size;            /* of this header */
	uint8_t fsid[UB_FSID_SIZE]; /* the filesystem's; zero until the first device is wrapped */
	__le64 created;         /* seconds since the epoch, for people */
	uint8_t reserved[20];
	__le32 crc;             /* crc32c of the bytes before it */
} __attribute__((__packed__));

enum { UNDO_REC_DEV = 1, UNDO_REC_RANGE = 2, UNDO_REC_END = 3 };

struct undo_disk_rec {
	__le32 type;
	__le32 dev;             /* the device record's index (0, 1, ... in file order) */
	__le64 offset;          /* RANGE: byte offset on the device */
	__le32 len;             /* payload bytes after the head */
	__le32 crc;             /* crc32c of head (this field zero) and payload */
} __attribute__((__packed__));

/* A DEV record's payload; the path (path_len bytes, no NUL) follows. */
struct undo_disk_dev {
	__le64 devid;
	uint8_t uuid[UB_UUID_SIZE];
	uint8_t fsid[UB_FSID_SIZE];
	__le64 size;            /* the device's size in bytes */
	__le32 flags;           /* UNDO_DEV_IDENTIFIED: devid/uuid/fsid come from a valid superblock copy */
	__le32 path_len;
	uint8_t primary[UB_SUPER_INFO_SIZE]; /* the primary superblock's bytes when wrapped (zeros past the end) */
} __attribute__((__packed__));

#define UNDO_DEV_IDENTIFIED 1u

/* An END record's payload. */
struct undo_disk_end {
	__le64 ranges, bytes;
	__le32 devices;
} __attribute__((__packed__));

/* The largest RANGE payload the writer makes (a larger range is several records) and the reader accepts. */
#define UNDO_RANGE_MAX (1U << 20)
/* Old bytes are saved in whole pieces of this size (sector-sized writes never share one with another's range). */
#define UNDO_PIECE 4096ULL

UB_STATIC_ASSERT(sizeof(struct undo_disk_header) == 64, "undo header is 64 bytes");
UB_STATIC_ASSERT(sizeof(struct undo_disk_rec) == 24, "undo record head is 24 bytes");

/* crc32c of a record: head with crc zero, then payload. */
uint32_t ub_undo_rec_crc(const struct undo_disk_rec *head, const void *payload, uint32_t len);
uint32_t ub_undo_crc(const void *p, size_t len);

#endif
