/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for `ubtrfs restore`: the inputs of fuzz_image (a real
 * image and mutations of it: fuzz_image.c, image_harness.h), and on every one
 * of them the command itself (cmd_restore, cmd/restore*.c) restores the whole
 * filesystem into a fresh folder: the walk, the copier threads, older roots
 * where the current one fails, the scan of the metadata block groups for
 * what no name reaches, a chunk map rebuilt when the chunk tree is gone.
 *
 * restore opens its devices by name: it reads the image's file
 * (fuzz_file_sync), which holds the input's changes until fuzz_undo. What restore prints goes to /dev/null; a
 * sanitizer's report still reaches the original stderr.
 *
 * Byte 1 of the input: bit 0 --no-log, bit 1 --deleted (undelete from older
 * roots and scanned leaves), bit 2 --no-scavenge, bit 3 --dry-run.
 *
 * At exit: executions, and how many exited 0, 1 and 2.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <sanitizer/common_interface_defs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmd.h"
#include "image_harness.h"

static const char *workdir;
static unsigned long long st_execs, st_rc[3];

static void print_stats(void)
{
	if (!st_execs)
		return;
	fprintf(stderr, "fuzz_restore: %llu executions: %.1f%% exit 0, %.1f%% exit 1, %.1f%% exit 2\n", st_execs,
		100.0 * (double)st_rc[0] / (double)st_execs, 100.0 * (double)st_rc[1] / (double)st_execs,
		100.0 * (double)st_rc[2] / (double)st_execs);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fuzz_images_load("fuzz_restore");
	workdir = fuzz_files_init("fuzz_restore");
	atexit(print_stats);
	return 0;
}

/* cmd_restore with its output silenced (a sanitizer report still goes to the real stderr). */
static int run_restore(char **args, int nargs)
{
	int saved_out = dup(STDOUT_FILENO), saved_err = dup(STDERR_FILENO), null = open("/dev/null", O_WRONLY);
	int rc;

	if (saved_out < 0 || saved_err < 0 || null < 0)
		abort();
	fflush(stdout);
	fflush(stderr);
	__sanitizer_set_report_fd((void *)(intptr_t)saved_err);
	dup2(null, STDOUT_FILENO);
	dup2(null, STDERR_FILENO);
	optind = 0; /* getopt_long starts over for every call */
	rc = cmd_restore(nargs, args);
	fflush(stdout);
	fflush(stderr);
	dup2(saved_out, STDOUT_FILENO);
	dup2(saved_err, STDERR_FILENO);
	__sanitizer_set_report_fd((void *)(intptr_t)STDERR_FILENO);
	close(saved_out);
	close(saved_err);
	close(null);
	return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fimage *img = fuzz_apply(data, size);
	char out[4200], *args[16];
	int nargs = 0, rc;

	if (!img)
		return 0;
	st_execs++;
	snprintf(out, sizeof(out), "%s/out", workdir);
	fuzz_rm_tree(out);
	args[nargs++] = "restore";
	args[nargs++] = "--no-scan";
	if (data[1] & 1)
		args[nargs++] = "--no-log";
	if ((data[1] & 2) && !(data[1] & 4))
		args[nargs++] = "--deleted";
	if (data[1] & 4)
		args[nargs++] = "--no-scavenge";
	if (data[1] & 8)
		args[nargs++] = "--dry-run";
	args[nargs++] = (char *)fuzz_file_sync(img);
	args[nargs++] = out;
	args[nargs] = NULL;
	if (mkdir(out, 0700))
		abort();
	rc = run_restore(args, nargs);
	if (rc < 0 || rc > 2)
		abort(); /* exit codes are 0, 1 and 2 */
	st_rc[rc]++;
	fuzz_rm_tree(out);
	fuzz_undo(img);
	return 0;
}
