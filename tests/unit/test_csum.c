/* SPDX-License-Identifier: MIT */
/*
 * Checksums and key hashes: published vectors for each algorithm, superblocks
 * written by mkfs.btrfs (one per csum type), and dir-item / extent-data-ref
 * key offsets read from images made by mkfs.btrfs and the kernel.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ubtrfs/format.h"

/* ---- helpers ----------------------------------------------------------- */

static int hex_nibble(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* Decode lowercase hex into `out`; returns the byte count (the test fails on bad hex). */
static size_t unhex(const char *hex, uint8_t *out, size_t cap)
{
	size_t len = strlen(hex);

	assert_int_equal(len % 2, 0);
	assert_true(len / 2 <= cap);
	for (size_t i = 0; i < len / 2; i++) {
		int hi = hex_nibble(hex[2 * i]), lo = hex_nibble(hex[2 * i + 1]);

		assert_true(hi >= 0 && lo >= 0);
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	return len / 2;
}

/* Checksum `msg` with `type` and compare against the expected digest in hex (zero padded). */
static void check_digest(unsigned type, const void *msg, size_t len, const char *hex)
{
	uint8_t want[UB_CSUM_SIZE_MAX] = { 0 };
	uint8_t got[UB_CSUM_SIZE_MAX];

	assert_int_equal(unhex(hex, want, sizeof(want)), ub_csum_size(type));
	memset(got, 0xa5, sizeof(got));
	assert_int_equal(ub_csum(type, msg, len, got), 0);
	assert_memory_equal(got, want, UB_CSUM_SIZE_MAX);
}

static void check_str(unsigned type, const char *msg, const char *hex)
{
	check_digest(type, msg, strlen(msg), hex);
}

/* ---- sizes, names, rejection ------------------------------------------ */

static void test_sizes_and_names(void **state)
{
	assert_int_equal(ub_csum_size(BTRFS_CSUM_TYPE_CRC32), 4);
	assert_int_equal(ub_csum_size(BTRFS_CSUM_TYPE_XXHASH), 8);
	assert_int_equal(ub_csum_size(BTRFS_CSUM_TYPE_SHA256), 32);
	assert_int_equal(ub_csum_size(BTRFS_CSUM_TYPE_BLAKE2), 32);
	assert_string_equal(ub_csum_name(BTRFS_CSUM_TYPE_CRC32), "crc32c");
	assert_string_equal(ub_csum_name(BTRFS_CSUM_TYPE_XXHASH), "xxhash64");
	assert_string_equal(ub_csum_name(BTRFS_CSUM_TYPE_SHA256), "sha256");
	assert_string_equal(ub_csum_name(BTRFS_CSUM_TYPE_BLAKE2), "blake2b");

	const unsigned bad[] = { 4, 5, 255, 0xffff, 0x10000, ~0U };

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(ub_csum_size(bad[i]), 0);
		assert_null(ub_csum_name(bad[i]));
	}
}

static void test_rejects_bad_arguments(void **state)
{
	uint8_t out[UB_CSUM_SIZE_MAX];
	uint8_t untouched[UB_CSUM_SIZE_MAX];
	const unsigned bad[] = { 4, 0xffff, ~0U };

	memset(out, 0x5a, sizeof(out));
	memcpy(untouched, out, sizeof(out));
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(ub_csum(bad[i], "abc", 3, out), -EINVAL);
		/* A rejected call must not leave half a checksum behind. */
		assert_memory_equal(out, untouched, sizeof(out));
	}
	assert_int_equal(ub_csum(BTRFS_CSUM_TYPE_CRC32, "abc", 3, NULL), -EINVAL);
	assert_int_equal(ub_csum(BTRFS_CSUM_TYPE_CRC32, NULL, 1, out), -EINVAL);
	/* An empty message needs no buffer. */
	for (unsigned t = 0; t < 4; t++)
		assert_int_equal(ub_csum(t, NULL, 0, out), 0);
}

/* ---- published vectors ------------------------------------------------- */

static void test_crc32c(void **state)
{
	uint8_t buf[32];

	/* The CRC catalogue's check value, stored little-endian: 0xE3069283. */
	check_str(BTRFS_CSUM_TYPE_CRC32, "123456789", "839206e3");
	check_str(BTRFS_CSUM_TYPE_CRC32, "", "00000000");
	/* RFC 3720 appendix B.4 (iSCSI): the CRC bytes as they appear on the wire. */
	memset(buf, 0, sizeof(buf));
	check_digest(BTRFS_CSUM_TYPE_CRC32, buf, sizeof(buf), "aa36918a");
	memset(buf, 0xff, sizeof(buf));
	check_digest(BTRFS_CSUM_TYPE_CRC32, buf, sizeof(buf), "43aba862");
	for (unsigned i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)i;
	check_digest(BTRFS_CSUM_TYPE_CRC32, buf, sizeof(buf), "4e79dd46");
	for (unsigned i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)(31 - i);
	check_digest(BTRFS_CSUM_TYPE_CRC32, buf, sizeof(buf), "5cdb3f11");
}

static void test_xxhash64(void **state)
{
	/* Reference values of XXH64 with seed 0, stored little-endian. */
	check_str(BTRFS_CSUM_TYPE_XXHASH, "", "99e9d85137db46ef");             /* 0xEF46DB3751D8E999 */
	check_str(BTRFS_CSUM_TYPE_XXHASH, "a", "5b6e8ca9f1c44ed2");            /* 0xD24EC4F1A98C6E5B */
	check_str(BTRFS_CSUM_TYPE_XXHASH, "abc", "990977adf52cbc44");          /* 0x44BC2CF5AD770999 */
	check_str(BTRFS_CSUM_TYPE_XXHASH, "Nobody inspects the spammish repetition",
		  "f18b378a3ca8cefb");                                     /* 0xFBCEA83C8A378BF1 */
}

static void test_sha256(void **state)
{
	/* FIPS 180-2 appendix B examples. */
	check_str(BTRFS_CSUM_TYPE_SHA256, "abc",
		  "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	check_str(BTRFS_CSUM_TYPE_SHA256, "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
		  "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
	check_str(BTRFS_CSUM_TYPE_SHA256, "",
		  "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

static void test_blake2b_256(void **state)
{
	/* Unkeyed BLAKE2b with a 32-byte digest (not BLAKE2b-512 cut short). */
	check_str(BTRFS_CSUM_TYPE_BLAKE2, "",
		  "0e5751c026e543b2e8ab2eb06099daa1d1e5df47778f7787faab45cdf12fe3a8");
	check_str(BTRFS_CSUM_TYPE_BLAKE2, "abc",
		  "bddd813c634239723171ef3fee98579b94964e3bb1cb3e427262c8c068d52319");
}

/* A message longer than any internal block, from an odd address, equals the same bytes aligned. */
static void test_unaligned_input(void **state)
{
	enum { LEN = 65536 + 3 };
	uint8_t *odd = malloc(LEN + 1);
	uint8_t *even = malloc(LEN);
	uint8_t a[UB_CSUM_SIZE_MAX], b[UB_CSUM_SIZE_MAX];

	assert_non_null(odd);
	assert_non_null(even);
	for (size_t i = 0; i < LEN; i++)
		even[i] = odd[i + 1] = (uint8_t)(i * 131 + 7);
	for (unsigned t = 0; t < 4; t++) {
		assert_int_equal(ub_csum(t, odd + 1, LEN, a), 0);
		assert_int_equal(ub_csum(t, even, LEN, b), 0);
		assert_memory_equal(a, b, sizeof(a));
		/* Output beyond the checksum size is zero. */
		for (unsigned i = ub_csum_size(t); i < UB_CSUM_SIZE_MAX; i++)
			assert_int_equal(a[i], 0);
	}
	free(odd);
	free(even);
}

/* ---- superblocks written by mkfs.btrfs -------------------------------- */

/*
 * Primary superblocks (4096 bytes at 64 KiB) of images made with
 * `mkfs.btrfs --csum TYPE --rootdir DIR` (btrfs-progs 6.2), stored as the
 * non-zero spans: { offset, bytes in hex }. Everything else is zero. The first
 * span is the stored checksum.
 */
struct sb_span {
	uint16_t off;
	const char *hex;
};

static const struct sb_span sb_crc32c[] = {
	{ 0, "35e93617" },
	{ 32,
	  "c5fd2f12e8b74d448e4d2331ff1864a300000100000000000100000000000000"
	  "5f42485266535f4d07000000000000000000d3010000000000405001" },
	{ 115,
	  "080000000000c002000000000006000000000000000100000000000000001000"
	  "000040000000400000001000008100000006" },
	{ 180,
	  "0300000000000000410300000000000000000000000100000000000000000000"
	  "0800000000000080050000000000100000001000000010" },
	{ 267, "ece35d51d27d425193c3c14682a273eac5fd2f12e8b74d448e4d2331ff1864a3" },
	{ 812,
	  "01000000000000e4000050010000000000008000000000000200000000000000"
	  "0000010000000000220000000000000000000100000001000010000002000100"
	  "01000000000000000000500100000000ece35d51d27d425193c3c14682a273ea"
	  "01000000000000000000d00100000000ece35d51d27d425193c3c14682a273ea"
	  "0000000100000000002200000000000000000001000000010000100000020001"
	  "0001000000000000000000500100000000ece35d51d27d425193c3c14682a273"
	  "ea01000000000000000000d00100000000ece35d51d27d425193c3c14682a273"
	  "ea" },
	{ 2860,
	  "80d0010000000005000000000000000000500100000000050000000000000000"
	  "00d1010000000005000000000000000040d00100000000050000000000000000"
	  "c0d0010000000005000000000000000040d10100000000050000000000000000"
	  "00000800000000004002000000000001" },
	{ 3028,
	  "c0d2010000000006000000000000000040500100000000060000000000000000"
	  "00d0010000000006000000000000000040d00100000000050000000000000000"
	  "40d2010000000006000000000000000040d10100000000050000000000000000"
	  "00000800000000004002000000000001" },
	{ 3197,
	  "d301000000000700000000000000004050010000000006000000000000000000"
	  "d1010000000007000000000000000080d0010000000007000000000000000040"
	  "d20100000000060000000000000000c0d0010000000007000000000000000000"
	  "00080000000000c002000000000001" },
	{ 3365,
	  "d001000000000400000000000000004010000000000004000000000000000080"
	  "5100000000000400000000000000004051000000000003000000000000000000"
	  "5000000000000400000000000000004011000000000001000000000000000000"
	  "00080000000000c001000000000001" },
};

static const struct sb_span sb_xxhash[] = {
	{ 0, "804b339fbc07873e" },
	{ 32,
	  "5612a273e4154c7887414e741bb1de6700000100000000000100000000000000"
	  "5f42485266535f4d07000000000000000000d3010000000000405001" },
	{ 115,
	  "080000000000c002000000000006000000000000000100000000000000001000"
	  "000040000000400000001000008100000006" },
	{ 180,
	  "0300000000000000410300000000000001000000000100000000000000000000"
	  "0800000000000080050000000000100000001000000010" },
	{ 267, "c2722b593f274ed99f98514da64578255612a273e4154c7887414e741bb1de67" },
	{ 812,
	  "01000000000000e4000050010000000000008000000000000200000000000000"
	  "0000010000000000220000000000000000000100000001000010000002000100"
	  "01000000000000000000500100000000c2722b593f274ed99f98514da6457825"
	  "01000000000000000000d00100000000c2722b593f274ed99f98514da6457825"
	  "0000000100000000002200000000000000000001000000010000100000020001"
	  "0001000000000000000000500100000000c2722b593f274ed99f98514da64578"
	  "2501000000000000000000d00100000000c2722b593f274ed99f98514da64578"
	  "25" },
	{ 2860,
	  "80d0010000000005000000000000000000500100000000050000000000000000"
	  "00d1010000000005000000000000000040d00100000000050000000000000000"
	  "c0d0010000000005000000000000000040d10100000000050000000000000000"
	  "00000800000000004002000000000001" },
	{ 3028,
	  "c0d2010000000006000000000000000040500100000000060000000000000000"
	  "00d0010000000006000000000000000040d00100000000050000000000000000"
	  "40d2010000000006000000000000000040d10100000000050000000000000000"
	  "00000800000000004002000000000001" },
	{ 3197,
	  "d301000000000700000000000000004050010000000006000000000000000000"
	  "d1010000000007000000000000000080d0010000000007000000000000000040"
	  "d20100000000060000000000000000c0d0010000000007000000000000000000"
	  "00080000000000c002000000000001" },
	{ 3365,
	  "d001000000000400000000000000004010000000000004000000000000000080"
	  "5100000000000400000000000000004051000000000003000000000000000000"
	  "5000000000000400000000000000004011000000000001000000000000000000"
	  "00080000000000c001000000000001" },
};

static const struct sb_span sb_sha256[] = {
	{ 0,
	  "88c3e3eb4e0570c2f93ce768a4f027a6980f9192fcd4dffa04dfd2b5fc6eb655"
	  "ae461003afc9420ea48997671248586b00000100000000000100000000000000"
	  "5f42485266535f4d07000000000000000000d3010000000000405001" },
	{ 115,
	  "080000000000c002000000000006000000000000000100000000000000001000"
	  "000040000000400000001000008100000006" },
	{ 180,
	  "0300000000000000410300000000000002000000000100000000000000000000"
	  "0800000000000080050000000000100000001000000010" },
	{ 267, "f0417baea57e48a7a2c02e2845d4b265ae461003afc9420ea48997671248586b" },
	{ 812,
	  "01000000000000e4000050010000000000008000000000000200000000000000"
	  "0000010000000000220000000000000000000100000001000010000002000100"
	  "01000000000000000000500100000000f0417baea57e48a7a2c02e2845d4b265"
	  "01000000000000000000d00100000000f0417baea57e48a7a2c02e2845d4b265"
	  "0000000100000000002200000000000000000001000000010000100000020001"
	  "0001000000000000000000500100000000f0417baea57e48a7a2c02e2845d4b2"
	  "6501000000000000000000d00100000000f0417baea57e48a7a2c02e2845d4b2"
	  "65" },
	{ 2860,
	  "80d0010000000005000000000000000000500100000000050000000000000000"
	  "00d1010000000005000000000000000040d00100000000050000000000000000"
	  "c0d0010000000005000000000000000040d10100000000050000000000000000"
	  "00000800000000004002000000000001" },
	{ 3028,
	  "c0d2010000000006000000000000000040500100000000060000000000000000"
	  "00d0010000000006000000000000000040d00100000000050000000000000000"
	  "40d2010000000006000000000000000040d10100000000050000000000000000"
	  "00000800000000004002000000000001" },
	{ 3197,
	  "d301000000000700000000000000004050010000000006000000000000000000"
	  "d1010000000007000000000000000080d0010000000007000000000000000040"
	  "d20100000000060000000000000000c0d0010000000007000000000000000000"
	  "00080000000000c002000000000001" },
	{ 3365,
	  "d001000000000400000000000000004010000000000004000000000000000080"
	  "5100000000000400000000000000004051000000000003000000000000000000"
	  "5000000000000400000000000000004011000000000001000000000000000000"
	  "00080000000000c001000000000001" },
};

static const struct sb_span sb_blake2[] = {
	{ 0,
	  "36f49f59df8d859dcc150aff408263b8af940e2cfbd8827884736c5973f006e6"
	  "eaeed480e49a4d94b3cf040d0150437900000100000000000100000000000000"
	  "5f42485266535f4d07000000000000000000d3010000000000405001" },
	{ 115,
	  "080000000000c002000000000006000000000000000100000000000000001000"
	  "000040000000400000001000008100000006" },
	{ 180,
	  "0300000000000000410300000000000003000000000100000000000000000000"
	  "0800000000000080050000000000100000001000000010" },
	{ 267, "2a461fc557cb4eb380c14463fa81fe9deaeed480e49a4d94b3cf040d01504379" },
	{ 812,
	  "01000000000000e4000050010000000000008000000000000200000000000000"
	  "0000010000000000220000000000000000000100000001000010000002000100"
	  "010000000000000000005001000000002a461fc557cb4eb380c14463fa81fe9d"
	  "01000000000000000000d001000000002a461fc557cb4eb380c14463fa81fe9d"
	  "0000000100000000002200000000000000000001000000010000100000020001"
	  "00010000000000000000005001000000002a461fc557cb4eb380c14463fa81fe"
	  "9d01000000000000000000d001000000002a461fc557cb4eb380c14463fa81fe"
	  "9d" },
	{ 2860,
	  "80d0010000000005000000000000000000500100000000050000000000000000"
	  "00d1010000000005000000000000000040d00100000000050000000000000000"
	  "c0d0010000000005000000000000000040d10100000000050000000000000000"
	  "00000800000000004002000000000001" },
	{ 3028,
	  "c0d2010000000006000000000000000040500100000000060000000000000000"
	  "00d0010000000006000000000000000040d00100000000050000000000000000"
	  "40d2010000000006000000000000000040d10100000000050000000000000000"
	  "00000800000000004002000000000001" },
	{ 3197,
	  "d301000000000700000000000000004050010000000006000000000000000000"
	  "d1010000000007000000000000000080d0010000000007000000000000000040"
	  "d20100000000060000000000000000c0d0010000000007000000000000000000"
	  "00080000000000c002000000000001" },
	{ 3365,
	  "d001000000000400000000000000004010000000000004000000000000000080"
	  "5100000000000400000000000000004051000000000003000000000000000000"
	  "5000000000000400000000000000004011000000000001000000000000000000"
	  "00080000000000c001000000000001" },
};

static void build_super(const struct sb_span *spans, size_t n, uint8_t sb[UB_SUPER_INFO_SIZE])
{
	memset(sb, 0, UB_SUPER_INFO_SIZE);
	for (size_t i = 0; i < n; i++) {
		assert_true(spans[i].off < UB_SUPER_INFO_SIZE);
		unhex(spans[i].hex, sb + spans[i].off, UB_SUPER_INFO_SIZE - spans[i].off);
	}
}

static void check_super(const struct sb_span *spans, size_t n, unsigned want_type)
{
	uint8_t sb[UB_SUPER_INFO_SIZE];
	uint8_t got[UB_CSUM_SIZE_MAX];
	const size_t csum_off = offsetof(struct ub_disk_super, csum);
	const size_t body = csum_off + UB_CSUM_SIZE_MAX;

	build_super(spans, n, sb);
	assert_int_equal(UB_GET(ub_disk_super, magic, sb), UB_MAGIC);
	assert_int_equal(UB_GET(ub_disk_super, bytenr, sb), UB_SUPER_INFO_OFFSET);
	assert_int_equal(UB_GET(ub_disk_super, csum_type, sb), want_type);

	/* The checksum covers everything after the csum field; unused csum bytes are zero on disk. */
	assert_int_equal(ub_csum(want_type, sb + body, UB_SUPER_INFO_SIZE - body, got), 0);
	assert_memory_equal(got, sb + csum_off, UB_CSUM_SIZE_MAX);

	/* One flipped bit anywhere in the covered range must change it. */
	sb[UB_SUPER_INFO_SIZE - 1] ^= 0x01;
	assert_int_equal(ub_csum(want_type, sb + body, UB_SUPER_INFO_SIZE - body, got), 0);
	assert_memory_not_equal(got, sb + csum_off, ub_csum_size(want_type));
}

#define CHECK_SUPER(spans, type) check_super(spans, sizeof(spans) / sizeof(spans[0]), type)

static void test_super_crc32c(void **state) { CHECK_SUPER(sb_crc32c, BTRFS_CSUM_TYPE_CRC32); }
static void test_super_xxhash(void **state) { CHECK_SUPER(sb_xxhash, BTRFS_CSUM_TYPE_XXHASH); }
static void test_super_sha256(void **state) { CHECK_SUPER(sb_sha256, BTRFS_CSUM_TYPE_SHA256); }
static void test_super_blake2(void **state) { CHECK_SUPER(sb_blake2, BTRFS_CSUM_TYPE_BLAKE2); }

/* ---- key hashes -------------------------------------------------------- */

static void test_name_hash(void **state)
{
	/* DIR_ITEM key offsets printed by `btrfs inspect-internal dump-tree -t fs` on mkfs --rootdir images. */
	static const struct {
		const char *name;
		uint64_t hash;
	} v[] = {
		{ "hello.txt", 1096805209 },
		{ "data2", 1700610193 },
		{ "big.bin", 1956615555 },
		{ "link", 2885771098 },
		{ "sub", 3841705590 },
		{ "world", 4131655965 },
		{ "a", 3427024844 },
		{ "x", 2762482543 },
		{ ".hidden", 3212828904 },
		{ "with space", 1456940469 },
		{ "gr\xc3\xbc\xc3\x9f" "e.txt", 764702046 }, /* UTF-8 bytes are hashed as they are */
	};
	char longname[UB_NAME_LEN];

	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
		assert_int_equal(ub_name_hash(v[i].name, strlen(v[i].name)), v[i].hash);

	/* A maximal 255-byte name, "LLL...L". */
	memset(longname, 'L', sizeof(longname));
	assert_int_equal(ub_name_hash(longname, sizeof(longname)), 1888885866);

	/* Only `len` bytes count, not the terminator or what follows. */
	assert_int_equal(ub_name_hash("hello.txtJUNK", 9), 1096805209);
	/* The hash is the raw register: 32 bits, never more. */
	assert_true(ub_name_hash("", 0) <= UINT32_MAX);
	assert_int_equal(ub_name_hash("", 0), (uint32_t)~1U);
}

static void test_extent_data_ref_hash(void **state)
{
	/*
	 * EXTENT_DATA_REF key offsets from `dump-tree -t extent` of images written by
	 * the kernel: many reflinks of one extent push the back references out of the
	 * extent item into keyed items. Root 5 is FS_TREE, 256 a subvolume; the
	 * huge offset is a clone of the second half of an extent to file offset 0
	 * (file offset minus extent offset wraps).
	 */
	static const struct {
		uint64_t root, owner, offset, hash;
	} v[] = {
		{ 5, 314, 0, 1007496931468551167ULL },
		{ 5, 297, 0, 1007496931555208115ULL },
		{ 5, 313, 0, 1007496931787850508ULL },
		{ 5, 298, 0, 1007496931835677504ULL },
		{ 5, 303, 0, 1007496932036454997ULL },
		{ 256, 257, 811008, 1002667598108835397ULL },
		{ 256, 257, 835584, 1002667601197249292ULL },
		{ 256, 257, 860160, 1002667599912587814ULL },
		{ 256, 257, 884736, 1002667598705385327ULL },
		{ 256, 257, 909312, 1002667597743545256ULL },
		{ 256, 257, 933888, 1002667600771358011ULL },
		{ 256, 257, 958464, 1002667598850529032ULL },
		{ 256, 257, 983040, 1002667598397206872ULL },
		{ 256, 258, 1044480, 1002667599020122430ULL },
		{ 256, 258, 18446744073709547520ULL, 1002667597946646827ULL },
	};

	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
		assert_int_equal(ub_extent_data_ref_hash(v[i].root, v[i].owner, v[i].offset), v[i].hash);

	/* Each input matters, and the result never uses bit 63 (31-bit shift of a 32-bit value). */
	uint64_t base = ub_extent_data_ref_hash(5, 257, 0);

	assert_int_not_equal(base, ub_extent_data_ref_hash(6, 257, 0));
	assert_int_not_equal(base, ub_extent_data_ref_hash(5, 258, 0));
	assert_int_not_equal(base, ub_extent_data_ref_hash(5, 257, 4096));
	assert_int_not_equal(ub_extent_data_ref_hash(5, 1, 2), ub_extent_data_ref_hash(5, 2, 1));
	assert_true(ub_extent_data_ref_hash(~0ULL, ~0ULL, ~0ULL) < (1ULL << 63));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sizes_and_names),
		cmocka_unit_test(test_rejects_bad_arguments),
		cmocka_unit_test(test_crc32c),
		cmocka_unit_test(test_xxhash64),
		cmocka_unit_test(test_sha256),
		cmocka_unit_test(test_blake2b_256),
		cmocka_unit_test(test_unaligned_input),
		cmocka_unit_test(test_super_crc32c),
		cmocka_unit_test(test_super_xxhash),
		cmocka_unit_test(test_super_sha256),
		cmocka_unit_test(test_super_blake2),
		cmocka_unit_test(test_name_hash),
		cmocka_unit_test(test_extent_data_ref_hash),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
