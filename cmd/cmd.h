/* SPDX-License-Identifier: MIT */
/* What the subcommands share: option conventions, exit codes, opening devices. */
#ifndef UBTRFS_CMD_H
#define UBTRFS_CMD_H

#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include "ubtrfs/fs.h"

enum { EXIT_OK = 0, EXIT_PROBLEMS = 1, EXIT_FATAL = 2 };

/* Options every command that opens a filesystem accepts. */
struct open_args {
	int verbosity;    /* -v raises, -q lowers */
	int super_mirror; /* --super N */
	bool no_log;      /* --no-log */
	unsigned errors;  /* error messages the library printed: they make the exit code at least 1 */
	bool no_scan;     /* --no-scan: use the devices named, never look for others */
	/* ---- older roots ---- */
	uint64_t generation; /* --generation N: 0 is the superblock's root */
	bool backup;          /* --backup: the current root unreadable, try the backup roots */
	uint64_t root_bytenr; /* --root BYTENR: the root tree at that address, 0 if not given */
	bool rescue_chunks;   /* a chunk tree that cannot be read is rebuilt from a scan (restore) */
	bool degraded;        /* open for writing with devices missing (device remove missing) */
};

#define OPEN_ARGS_LONGOPTS                                          \
	{ "verbose", no_argument, NULL, 'v' },                      \
	{ "quiet", no_argument, NULL, 'q' },                        \
	{ "super", required_argument, NULL, 0x100 },                \
	{ "no-log", no_argument, NULL, 0x101 },                     \
	{ "generation", required_argument, NULL, 0x180 },          \
	{ "backup", no_argument, NULL, 0x181 },                     \
	{ "root", required_argument, NULL, 0x182 },                 \
	{ "no-scan", no_argument, NULL, 0x102 },                    \
	{ "io-timeout", required_argument, NULL, 0x183 }

#define OPEN_ARGS_HELP                                                                    \
	"  -v, --verbose      say more (repeat for debug output)\n"                           \
	"  -q, --quiet        errors only\n"                                                  \
	"      --super N      use superblock copy N (0: 64 KiB, 1: 64 MiB, 2: 256 GiB)\n"   \
	"                     instead of the newest valid one\n"                              \
	"      --no-log       ignore the fsync log tree\n"                                   \
	"      --generation N read the older root of generation N (a backup root)\n"       \
	"      --backup       if the current root cannot be read, use the newest backup\n"  \
	"                     root that can\n"                                             \
	"      --root BYTENR  read the root tree at logical address BYTENR (see find-root)\n" \
	"      --no-scan      use the devices named only (no search of the block devices;\n" \
	"                     DEV may be UUID=... or LABEL=... unless this is given)\n" \
	"      --io-timeout S a network device (nbd://...) that does not answer within S\n" \
	"                     seconds (default 5) is a missing device from then on\n"

void open_args_init(struct open_args *oa);
/* Handle one of the shared options; returns 1 if `opt` was one of them, -1 on a bad value. */
int open_args_parse(struct open_args *oa, int opt, const char *arg);
int open_fs(struct open_args *oa, char **devs, int ndevs, struct ub_fs **out);
/* The library's open options that the shared command-line options give (read-only). */
struct ub_fs_opts open_args_fs_opts(const struct open_args *oa);
/* open_fs with the caller's options and log sink (the mount's); the devices are found as open_fs finds them. */
/* The same for writing: the write engine over the devices found as open_fs_with finds them (messages said). */
struct ub_engine;
int open_engine_with(struct open_args *oa, char **devs, int ndevs, const struct ub_log *log, struct ub_engine **out);
int open_fs_with(struct open_args *oa, char **devs, int ndevs, const struct ub_fs_opts *opts,
		 const struct ub_log *log, struct ub_fs **out);
/* The exit code once the command is done: `rc`, raised to 1 if the library reported errors. */
int final_rc(const struct open_args *oa, int rc);

int usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int parse_u64(const char *s, uint64_t *out);

int cmd_dump_super(int argc, char **argv);
int cmd_dump_tree(int argc, char **argv);
int cmd_ls(int argc, char **argv);
int cmd_cat(int argc, char **argv);
int cmd_filesystem(int argc, char **argv);
int cmd_subvolume(int argc, char **argv);
int cmd_balance(int argc, char **argv);
int cmd_device(int argc, char **argv);
int cmd_replace(int argc, char **argv);
int cmd_mkfs(int argc, char **argv);
int cmd_mount(int argc, char **argv);
int cmd_umount(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_find_root(int argc, char **argv);
int cmd_restore(int argc, char **argv);
int cmd_scrub(int argc, char **argv);
int cmd_rescue(int argc, char **argv);

#endif
