/* SPDX-License-Identifier: MIT */
/* JSON output of names from the disk, for the commands that print them (ls, restore's report). */
#include <stdint.h>
#include "json.h"

/* Length of the valid UTF-8 sequence at s (n bytes left), 0 if the byte there starts none. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
	unsigned c = s[0];
	uint32_t cp, min;
	size_t len;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf) {
		len = 2, cp = c & 0x1f, min = 0x80;
	} else if (c >= 0xe0 && c <= 0xef) {
		len = 3, cp = c & 0x0f, min = 0x800;
	} else if (c >= 0xf0 && c <= 0xf4) {
		len = 4, cp = c & 0x07, min = 0x10000;
	} else {
		return 0;
	}
	if (n < len)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	/* overlong forms and UTF-16 surrogates are not UTF-8 either */
	if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return len;
}

/* A JSON string of the bytes; bytes that are not UTF-8 become U+FFFD. Returns whether all were UTF-8. */
bool json_str(FILE *f, const char *s, size_t len)
{
	const unsigned char *u = (const unsigned char *)s;
	bool valid = true;

	fputc('"', f);
	for (size_t i = 0; i < len;) {
		unsigned char c = u[i];
		size_t n = utf8_seq(u + i, len - i);

		if (!n) {
			fputs("\\ufffd", f);
			valid = false;
			i++;
			continue;
		}
		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20 || c == 0x7f)
			fprintf(f, "\\u%04x", c);
		else
			fwrite(u + i, 1, n, f);
		i += n;
	}
	fputc('"', f);
	return valid;
}

void json_hex(FILE *f, const void *p, size_t len)
{
	const uint8_t *b = p;

	fputc('"', f);
	for (size_t i = 0; i < len; i++)
		fprintf(f, "%02x", b[i]);
	fputc('"', f);
}

/*
 * `, "key": "text"`, and when the bytes are not all UTF-8 also
 * `, "key_hex": "<every byte in hex>"` (docs/ls.md).
 */
void json_field(FILE *f, const char *key, const char *s, size_t len)
{
	const unsigned char *u = (const unsigned char *)s;
	bool valid = true;

	for (size_t i = 0; i < len && valid;) {
		size_t n = utf8_seq(u + i, len - i);
		valid = n != 0;
		i += n;
	}
	fprintf(f, ", \"%s\": ", key);
	json_str(f, s, len);
	if (!valid) {
		fprintf(f, ", \"%s_hex\": ", key);
		json_hex(f, s, len);
	}
}

bool is_utf8(const char *s, size_t len)
{
	for (size_t i = 0; i < len;) {
		size_t n = utf8_seq((const unsigned char *)s + i, len - i);
		if (!n)
			return false;
		i += n;
	}
	return true;
}
