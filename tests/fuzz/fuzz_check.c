/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for `ubtrfs check` and find-root's scan: the inputs of
 * fuzz_image (a real image, mutations of its tree blocks and superblock: see
 * fuzz_image.c and image_harness.h), and on every one of them the checker
 * runs as the command runs it (its log sink turns the reader's verdicts into
 * problems; every pass, both threads), then the scan of the metadata block
 * groups for root trees, each candidate probed (ub_find_roots). When the
 * filesystem does not open, it is opened as --backup would, then with the
 * chunk map rebuilt as restore would, so the older roots and the chunk
 * rescue are reached too.
 *
 * The filesystem is opened from the image's file (fuzz_file_sync), as the
 * command opens it, so the superblock pass reads every copy raw.
 *
 * Byte 1 of the input: bit 0 without the fsync log (also for the checker),
 * bit 1 --check-data-csum (every data sector on every copy, RAID5/6 parity).
 *
 * At exit: executions, how many opened, how many problems were found.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ubtrfs/check.h"
#include "ubtrfs/fs.h"
#include "ubtrfs/rootscan.h"
#include "image_harness.h"

static unsigned long long st_execs, st_opened, st_fallback, st_clean, st_candidates;
static volatile size_t touched;

static void print_stats(void)
{
	if (!st_execs)
		return;
	fprintf(stderr,
		"fuzz_check: %llu executions: %.1f%% opened the filesystem (%.1f%% only as --backup or with the chunk "
		"map rebuilt), %.1f%% checked clean; %llu root tree candidates probed\n",
		st_execs, 100.0 * (double)(st_opened + st_fallback) / (double)st_execs,
		100.0 * (double)st_fallback / (double)st_execs, 100.0 * (double)st_clean / (double)st_execs,
		st_candidates);
}

static bool verbose; /* $UBTRFS_FUZZ_VERBOSE: print the problems (to look at one input) */

static void problem(void *arg, const struct ub_chk_problem *p)
{
	(void)arg;
	/* every string handed out must be terminated: strlen lets ASan see the bytes */
	touched += strlen(p->msg) + (p->path ? strlen(p->path) : 0) + ub_chk_class_name(p->cls)[0];
	if (verbose)
		fprintf(stderr, "fuzz_check: %s: %s\n", ub_chk_class_name(p->cls), p->msg);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fuzz_images_load("fuzz_check");
	fuzz_files_init("fuzz_check");
	verbose = getenv("UBTRFS_FUZZ_VERBOSE") != NULL;
	atexit(print_stats);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fimage *img = fuzz_apply(data, size);
	struct ub_chk_opts copts;
	struct ub_chk_sink sink = { .problem = problem };
	struct ub_checker *c = NULL;
	struct ub_fs *fs = NULL;
	struct ub_log log;
	const char *path;
	bool no_log;

	if (!img)
		return 0;
	no_log = data[1] & 1;
	st_execs++;
	memset(&copts, 0, sizeof(copts));
	copts.verbosity = -1; /* no notes on stderr: problems come to the sink */
	copts.no_log = no_log;
	copts.check_data_csum = data[1] & 2;
	if (ub_checker_new(&copts, &sink, &c))
		abort();
	ub_checker_log(c, &log);
	/* as the command: from the device's name, so the superblock pass reads every copy raw */
	path = fuzz_file_sync(img);
	if (ub_fs_open(&path, 1, &(struct ub_fs_opts){ .super_mirror = -1, .no_log = no_log }, &log, &fs) == 0) {
		struct ub_chk_summary sum;

		st_opened++;
		ub_checker_supers(c, &path, 1, fs);
		ub_checker_run(c, fs);
		ub_checker_summary(c, &sum);
		uint64_t problems = 0;
		for (int i = 0; i < UB_CHK_NCLASSES; i++)
			problems += sum.problems[i];
		st_clean += problems == 0;
	} else {
		/* what the recovery options would open: the newest usable backup root, a rebuilt chunk map */
		struct ub_fs_opts opts = { .writable = false, .super_mirror = -1, .no_log = no_log, .backup = true };

		/* the superblock pass, as check does when nothing opens */
		ub_checker_supers(c, &path, 1, NULL);
		if (fuzz_open_with(img, &opts, &fuzz_quiet_log, &fs)) {
			opts.backup = false;
			opts.rescue_chunks = true;
			if (fuzz_open_with(img, &opts, &fuzz_quiet_log, &fs))
				fs = NULL;
		}
		st_fallback += fs != NULL;
	}
	if (fs) {
		struct ub_root_candidate *cands = NULL;
		size_t n = 0;

		if (ub_find_roots(fs, true, NULL, NULL, &cands, &n) == 0)
			st_candidates += n;
		free(cands);
		/* before the checker goes: the filesystem may log through its sink until it is closed */
		ub_fs_close(fs);
	}
	ub_checker_free(c);
	fuzz_undo(img);
	return 0;
}
