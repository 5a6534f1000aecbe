/* SPDX-License-Identifier: MIT */
/*
 * `ubtrfs scrub`: the command (scrub.c) and the state it keeps between runs
 * (scrub_state.c), as btrfs-progs keeps /var/lib/btrfs/scrub.status.FSID:
 * one line per device with its counts, where it got to and whether it
 * finished, so that `scrub status` can tell and `scrub resume` can go on.
 */
#ifndef UBTRFS_CMD_SCRUB_H
#define UBTRFS_CMD_SCRUB_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include "ubtrfs/scrub.h"

struct scrub_rec {
	uint64_t devid;
	struct ub_scrub_dev_progress p;
	int64_t t_start, t_resumed;  /* seconds since the epoch */
	uint64_t duration;           /* seconds spent scrubbing, over every run */
	pid_t pid;                   /* the process scrubbing, 0 when none */
	bool readonly;
	char path[4096];
};

/* $UBTRFS_STATE_DIR, else /var/lib/ubtrfs */
const char *scrub_state_dir(void);
/* The file of filesystem `fsid`: dir/scrub.status.UUID */
void scrub_state_path(const uint8_t fsid[16], const char *suffix, char *out, size_t len);
/* Every device's record (malloc'd, *n): 0, -ENOENT (no scrub ever), <0. */
int scrub_state_load(const uint8_t fsid[16], struct scrub_rec **out, int *n);
/* The records replace the file's, atomically (written aside, renamed over it). 0 or <0 (said). */
int scrub_state_save(const uint8_t fsid[16], const struct scrub_rec *r, int n);
struct ub_fs;
#include <stdio.h>
/* One problem line as `ubtrfs scrub` prints it (text, or one JSON object), newline included. */
void scrub_format_problem(FILE *f, const struct ub_scrub_problem *p, bool json);
/* A device's counts to and from the u64 array of UBTRFS_IOC_SCRUB_COUNTS (n entries). */
void scrub_counts_pack(const struct ub_scrub_dev_progress *p, uint64_t *v, int n);
void scrub_counts_unpack(const uint64_t *v, int n, struct ub_scrub_dev_progress *p);
/* Refused (said, -EBUSY) when the kernel or a ubtrfs mount holds a device of fs; `what` names the command. */
int scrub_refuse_mounted(struct ub_fs *fs, const char *what);
/* Is process `pid` alive and an ubtrfs? */
bool scrub_pid_alive(pid_t pid);

#endif
