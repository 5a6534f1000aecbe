/* SPDX-License-Identifier: MIT */
/* JSON output of names from the disk: any bytes in, strict JSON out. */
#ifndef UBTRFS_CMD_JSON_H
#define UBTRFS_CMD_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* A JSON string of the bytes; bytes that are not UTF-8 become U+FFFD. Returns whether all were UTF-8. */
bool json_str(FILE *f, const char *s, size_t len);
/* The bytes in hex, as a JSON string. */
void json_hex(FILE *f, const void *p, size_t len);
/*
 * `, "key": "text"`, and when the bytes are not all UTF-8 also
 * `, "key_hex": "<every byte in hex>"` (docs/ls.md).
 */
void json_field(FILE *f, const char *key, const char *s, size_t len);
bool is_utf8(const char *s, size_t len);

#endif
