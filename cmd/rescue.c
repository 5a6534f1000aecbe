/* SPDX-License-Identifier: MIT */
/*
 * ubtrfs rescue undo|super-recover|zero-log|fix-device-size|chunk-recover: btrfs rescue's
 * operations (include/ubtrfs/rescue.h) and the undo file's replay
 * (include/ubtrfs/undo.h); with --undo-file every write goes through undo
 * devices first. docs/rescue.md.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd.h"
#include "ubtrfs/rescue.h"
#include "ubtrfs/undo.h"

static const char help[] =
	"usage: ubtrfs rescue undo [--dry-run] FILE DEV...\n"
	"       ubtrfs rescue super-recover [-y] [--undo-file FILE] DEV...\n"
	"       ubtrfs rescue zero-log [--undo-file FILE] DEV...\n"
	"       ubtrfs rescue fix-device-size [--undo-file FILE] DEV...\n"
	"       ubtrfs rescue chunk-recover [-y] [--undo-file FILE] DEV...\n\n"
	"Repair what keeps a filesystem from opening, as btrfs rescue does, on devices nothing has\n"
	"mounted (a mounted one is refused). DEV... are every device of the filesystem.\n\n"
	"  undo               put the devices back as an undo file saved them\n"
	"  super-recover      rewrite bad or stale superblock copies from the newest good one\n"
	"  zero-log           drop the fsync log (after saying what it held)\n"
	"  fix-device-size    device sizes a multiple of the sector size and within the device\n"
	"  chunk-recover      write a chunk tree that cannot be read again from a scan\n\n"
	"'ubtrfs rescue COMMAND --help' describes each. With --undo-file FILE the old bytes of\n"
	"everything written are saved in FILE first (a new file, never on the devices), so that\n"
	"'ubtrfs rescue undo FILE DEV...' puts the devices back byte for byte.\n\n"
	"Exit codes: 0 done (or nothing to do), 1 problems left, 2 usage or fatal error.\n";

static const char undo_help[] =
	"usage: ubtrfs rescue undo [--dry-run] FILE DEV...\n\n"
	"Write back every range the undo FILE saved (check --repair --undo-file, rescue ...\n"
	"--undo-file), so each device is again what it was before that run, byte for byte. Each DEV\n"
	"is matched to a device of the file by the devid, device uuid and fsid of its superblock (or,\n"
	"when none of its copies is valid, by its primary superblock as saved); nothing is written\n"
	"unless every device of the file is given and every DEV is one of them. A file a crash cut\n"
	"short undoes everything it recorded.\n\n"
	"      --dry-run      check the file and the devices, say what would be written, write nothing\n"
	"  -h, --help         this text\n\n"
	"Exit codes: 0 restored, 1 a write failed partway (run it again), 2 usage, not an undo file,\n"
	"or devices that do not match (nothing written).\n";

static const char super_help[] =
	"usage: ubtrfs rescue super-recover [-y] [--undo-file FILE] DEV...\n\n"
	"Read every superblock copy (64 KiB, 64 MiB, 256 GiB) of every device; when a copy is bad\n"
	"or older than the newest valid one, rewrite it from that one (each device's own device\n"
	"item, the copy's own bytenr, the checksum recomputed). All copies valid and at one\n"
	"generation: nothing to do.\n\n"
	"  -y, --yes          do not ask for confirmation (needed without a terminal)\n"
	"      --undo-file FILE  save the old bytes of what is written into FILE first\n"
	"  -h, --help         this text\n\n"
	"Exit codes: 0 recovered or nothing to do, 1 a device could not be recovered, 2 usage, a\n"
	"refusal or fatal error.\n";

static const char zero_help[] =
	"usage: ubtrfs rescue zero-log [--undo-file FILE] DEV...\n\n"
	"Say what the fsync log holds (its generation, the inodes it logged per subvolume), then\n"
	"clear log_root and log_root_level in every superblock copy of every device: what was\n"
	"fsynced after the last commit is dropped, the last commit stays. No log: nothing written.\n\n"
	"      --undo-file FILE  save the old bytes of what is written into FILE first\n"
	"  -h, --help         this text\n\n"
	"Exit codes: 0 cleared or no log, 2 usage or fatal error.\n";

static const char size_help[] =
	"usage: ubtrfs rescue fix-device-size [--undo-file FILE] DEV...\n\n"
	"Each device item's size rounded down to the sector size and, where no device extent lies\n"
	"past it, to the device's real size; the superblock's total the sum. Committed as one\n"
	"transaction. A filesystem with a pending fsync log is refused (mount it, or zero-log).\n\n"
	"      --undo-file FILE  save the old bytes of what is written into FILE first\n"
	"  -h, --help         this text\n\n"
	"Exit codes: 0 fixed or nothing to fix, 1 a device larger than itself that its extents\n"
	"keep so, 2 usage or fatal error.\n";

static const char chunk_help[] =
	"usage: ubtrfs rescue chunk-recover [-y] [--undo-file FILE] DEV...\n\n"
	"When the chunk tree cannot be read, rebuild the chunk map from older copies of its leaves,\n"
	"or from the block group items and device extents a scan of the devices finds (what\n"
	"restore reads through), and write it as a new one-leaf chunk tree in place of the old\n"
	"root. A chunk tree that reads: nothing to do. A chunk tree of several levels, or more\n"
	"chunks than one leaf holds, is refused.\n\n"
	"  -y, --yes          do not ask for confirmation (needed without a terminal)\n"
	"      --undo-file FILE  save the old bytes of what is written into FILE first\n"
	"  -h, --help         this text\n\n"
	"Exit codes: 0 rebuilt or nothing to do, 2 usage, a refusal or fatal error.\n";

enum { OPT_UNDO = 0x200, OPT_DRY };

struct rescue_args {
	const char *sub;
	const char *undo_file;
	bool yes, dry_run;
	char **devs;
	int ndevs;
	unsigned errors;
	struct ub_log log;
};

static int parse(int argc, char **argv, const char *helptext, struct rescue_args *a)
{
	static const struct option opts[] = {
		{ "help", no_argument, NULL, 'h' },
		{ "yes", no_argument, NULL, 'y' },
		{ "undo-file", required_argument, NULL, OPT_UNDO },
		{ "dry-run", no_argument, NULL, OPT_DRY },
		{ NULL, 0, NULL, 0 },
	};
	bool is_undo = !strcmp(a->sub, "undo");
	bool is_super = !strcmp(a->sub, "super-recover") || !strcmp(a->sub, "chunk-recover");
	int c;

	optind = 1;
	while ((c = getopt_long(argc, argv, "hy", opts, NULL)) != -1) {
		switch (c) {
		case 'h':
			fputs(helptext, stdout);
			return -1;
		case 'y':
			if (!is_super)
				return usage_error("rescue", "%s takes no -y", a->sub);
			a->yes = true;
			break;
		case OPT_UNDO:
			if (is_undo)
				return usage_error("rescue", "undo takes no --undo-file");
			a->undo_file = optarg;
			break;
		case OPT_DRY:
			if (!is_undo)
				return usage_error("rescue", "%s takes no --dry-run", a->sub);
			a->dry_run = true;
			break;
		default:
			return EXIT_FATAL;
		}
	}
	a->devs = argv + optind;
	a->ndevs = argc - optind;
	if (is_undo) {
		if (a->ndevs < 2)
			return usage_error("rescue", "undo needs the undo file and the devices");
		a->undo_file = a->devs[0];
		a->devs++;
		a->ndevs--;
	} else if (a->ndevs < 1) {
		return usage_error("rescue", "%s needs the filesystem's devices", a->sub);
	}
	a->log = (struct ub_log){ .verbosity = UB_LOG_WARN, .errors = &a->errors };
	return 0;
}

static int refuse_mounted(const struct rescue_args *a)
{
	char why[512];

	if (ub_rescue_check_unmounted((const char *const *)a->devs, a->ndevs, why, sizeof(why)) == -EBUSY) {
		fprintf(stderr, "ubtrfs rescue %s: error: %s\n", a->sub, why);
		return -EBUSY;
	}
	return 0;
}

/* The devices opened (writable: each over an undo device when u is set); closed again on failure. */
static int open_devs(const struct rescue_args *a, bool writable, struct ub_undo *u, struct ub_dev **devs)
{
	int ret = 0, i;

	for (i = 0; !ret && i < a->ndevs; i++) {
		struct ub_dev *d = NULL;

		ret = ub_dev_open(a->devs[i], writable, &d);
		if (ret) {
			fprintf(stderr, "ubtrfs rescue %s: error: cannot open %s%s: %s\n", a->sub, a->devs[i],
				writable ? " for writing" : "", strerror(-ret));
			break;
		}
		if (u) {
			ret = ub_dev_open_undo(d, u, &d);
			if (ret) {
				fprintf(stderr, "ubtrfs rescue %s: error: %s: %s\n", a->sub, a->devs[i],
					ret == -EINVAL ? "is the undo file" : strerror(-ret));
				break;
			}
		}
		devs[i] = d;
	}
	if (ret)
		for (int k = 0; k < i; k++)
			ub_dev_close(devs[k]);
	return ret;
}

static int start_undo(const struct rescue_args *a, struct ub_undo **u)
{
	int ret;

	*u = NULL;
	if (!a->undo_file)
		return 0;
	ret = ub_undo_create(a->undo_file, u);
	if (ret)
		fprintf(stderr, "ubtrfs rescue %s: error: cannot create the undo file %s: %s\n", a->sub, a->undo_file,
			ret == -EEXIST ? "it exists (an undo file is never overwritten)" : strerror(-ret));
	return ret;
}

/* The undo file's trailer, and what it holds; an error makes the run's exit 2 (its undo may be incomplete). */
static int end_undo(const struct rescue_args *a, struct ub_undo *u)
{
	uint64_t ranges = 0, bytes = 0;
	int ret;

	if (!u)
		return 0;
	ub_undo_saved(u, &ranges, &bytes);
	ret = ub_undo_finish(u);
	if (ret)
		fprintf(stderr, "ubtrfs rescue %s: error: the undo file %s could not be completed: %s\n", a->sub,
			a->undo_file, strerror(-ret));
	else
		printf("undo file %s: %" PRIu64 " ranges, %" PRIu64 " bytes saved\n", a->undo_file, ranges, bytes);
	return ret;
}

/* ---- undo ---- */

static int do_undo(struct rescue_args *a)
{
	struct ub_undo_stats st;
	int ret = ub_undo_apply(a->undo_file, (const char *const *)a->devs, a->ndevs, a->dry_run, &a->log, &st);

	if (ret && !st.ranges) {
		fprintf(stderr, "ubtrfs rescue undo: error: nothing restored: %s\n", strerror(-ret));
		return EXIT_FATAL;
	}
	printf("%s %" PRIu64 " ranges (%" PRIu64 " bytes) on %d device%s from %s (%s)\n",
	       a->dry_run ? "would restore" : ret ? "restored only" : "restored", st.ranges, st.bytes, st.devices,
	       st.devices == 1 ? "" : "s", a->undo_file,
	       st.complete ? "complete: the run that wrote it finished"
			   : "cut short: the run that wrote it did not finish; all it recorded is restored");
	return ret ? EXIT_PROBLEMS : EXIT_OK;
}

/* ---- super-recover ---- */

static const char *state_name(enum ub_sb_state s)
{
	switch (s) {
	case UB_SB_GOOD:
		return "good";
	case UB_SB_STALE:
		return "stale";
	case UB_SB_BAD:
		return "bad";
	default:
		return "absent";
	}
}

static void print_survey(const struct ub_sb_survey *s)
{
	for (int i = 0; i < s->ndevs; i++) {
		const struct ub_sb_dev *d = &s->dev[i];

		printf("%s (devid %" PRIu64 "):\n", d->path, d->devid);
		for (int m = 0; m < UB_SUPER_MIRROR_MAX; m++) {
			const struct ub_sb_copy *c = &d->copy[m];

			if (c->state == UB_SB_ABSENT)
				continue;
			printf("  copy %d at %" PRIu64 ": %s", m, c->bytenr, state_name(c->state));
			if (c->state == UB_SB_BAD)
				printf(" (%s)", c->why);
			else
				printf(", generation %" PRIu64, c->generation);
			putchar('\n');
		}
	}
}

static bool confirm(const char *sub)
{
	char line[16];

	printf("Make sure this is a btrfs disk otherwise the tool will destroy other fs, Are you sure? [y/N]: ");
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		return false;
	(void)sub;
	return line[0] == 'y' || line[0] == 'Y';
}

static int do_super(struct rescue_args *a)
{
	struct ub_dev **devs = calloc((size_t)a->ndevs, sizeof(*devs));
	struct ub_sb_survey s;
	struct ub_undo *u = NULL;
	int ret, rewritten = 0, rc;

	if (!devs)
		return EXIT_FATAL;
	ret = open_devs(a, false, NULL, devs);
	if (ret) {
		free(devs);
		return EXIT_FATAL;
	}
	ret = ub_rescue_super_survey(devs, a->ndevs, &a->log, &s);
	for (int i = 0; i < a->ndevs; i++)
		ub_dev_close(devs[i]);
	if (ret || !s.generation) {
		fprintf(stderr, "ubtrfs rescue super-recover: error: %s\n",
			ret ? strerror(-ret) : "no valid superblock copy on any device: nothing to recover from");
		ub_sb_survey_free(&s);
		free(devs);
		return EXIT_FATAL;
	}
	print_survey(&s);
	if (!s.to_rewrite) {
		printf("All supers are valid, no need to recover\n");
		rc = s.unrecoverable ? EXIT_PROBLEMS : EXIT_OK;
		goto out;
	}
	printf("newest valid copy: generation %" PRIu64 " (%s, copy %d); %d cop%s to rewrite\n", s.generation,
	       s.dev[s.best_dev].path, s.best_mirror, s.to_rewrite, s.to_rewrite == 1 ? "y" : "ies");
	if (!a->yes) {
		if (!isatty(STDIN_FILENO)) {
			fprintf(stderr, "ubtrfs rescue super-recover: error: no terminal to ask for confirmation: give -y\n");
			rc = EXIT_FATAL;
			goto out;
		}
		if (!confirm(a->sub)) {
			printf("Aborted\n");
			rc = EXIT_FATAL;
			goto out;
		}
	}
	ub_sb_survey_free(&s);
	if (start_undo(a, &u) || open_devs(a, true, u, devs)) {
		ub_undo_free(u);
		free(devs);
		return EXIT_FATAL;
	}
	ret = ub_rescue_super_recover(devs, a->ndevs, &a->log, &s, &rewritten);
	rc = EXIT_OK;
	if (ret) {
		fprintf(stderr, "ubtrfs rescue super-recover: error: failed to recover bad superblocks: %s\n",
			strerror(-ret));
		rc = EXIT_FATAL;
	} else {
		printf("Recovered bad superblocks successful: %d cop%s rewritten\n", rewritten, rewritten == 1 ? "y" : "ies");
		/* a device named unrecoverable, or one the volume left out (stale beyond a commit) */
		if (s.unrecoverable || rewritten < s.to_rewrite)
			rc = EXIT_PROBLEMS;
	}
	if (end_undo(a, u))
		rc = EXIT_FATAL;
out:
	ub_sb_survey_free(&s);
	free(devs);
	return rc;
}

/* ---- zero-log ---- */

static void print_log(const struct ub_log_survey *s)
{
	printf("log tree at logical %" PRIu64 " (level %u", s->log_root, s->log_level);
	if (s->log_generation)
		printf(", generation %" PRIu64, s->log_generation);
	printf(") after the commit of generation %" PRIu64 "\n", s->generation);
	if (!s->replayable) {
		printf("the log cannot be replayed: what it logged is unknown\n");
		return;
	}
	printf("it logged %zu inode%s\n", s->ninodes, s->ninodes == 1 ? "" : "s");
	for (size_t i = 0; i < s->ninodes; i++) {
		if (!i || s->inodes[i].subvol != s->inodes[i - 1].subvol)
			printf("%s  subvolume %" PRIu64 ": inode", i ? "\n" : "", s->inodes[i].subvol);
		printf(" %" PRIu64, s->inodes[i].ino);
	}
	if (s->ninodes)
		putchar('\n');
}

static int do_zero_log(struct rescue_args *a)
{
	struct ub_dev **devs = calloc((size_t)a->ndevs, sizeof(*devs));
	struct ub_log_survey s;
	struct ub_undo *u = NULL;
	uint64_t old = 0;
	int ret, rc, level = -1;

	if (!devs)
		return EXIT_FATAL;
	ret = ub_rescue_log_survey((const char *const *)a->devs, a->ndevs, &a->log, &s);
	if (ret) {
		fprintf(stderr, "ubtrfs rescue zero-log: warning: the filesystem does not open (%s): what the log "
			"held cannot be said\n", strerror(-ret));
	} else if (!s.log_root) {
		printf("no log tree on %s: nothing to clear\n", a->devs[0]);
		ub_log_survey_free(&s);
		free(devs);
		return EXIT_OK;
	} else {
		print_log(&s);
		level = (int)s.log_level;
	}
	ub_log_survey_free(&s);
	if (start_undo(a, &u) || open_devs(a, true, u, devs)) {
		ub_undo_free(u);
		free(devs);
		return EXIT_FATAL;
	}
	ret = ub_rescue_zero_log(devs, a->ndevs, &a->log, &old);
	rc = EXIT_OK;
	if (ret) {
		fprintf(stderr, "ubtrfs rescue zero-log: error: %s\n", strerror(-ret));
		rc = EXIT_FATAL;
	} else if (old) {
		printf("Clearing log on %s, previous log_root %" PRIu64, a->devs[0], old);
		if (level >= 0)
			printf(", level %d", level);
		putchar('\n');
	} else {
		printf("no log tree on %s: nothing to clear\n", a->devs[0]);
	}
	if (end_undo(a, u))
		rc = EXIT_FATAL;
	free(devs);
	return rc;
}

/* ---- fix-device-size ---- */

static int do_fix_size(struct rescue_args *a)
{
	struct ub_dev **devs = calloc((size_t)a->ndevs, sizeof(*devs));
	struct ub_devsize_result r;
	struct ub_undo *u = NULL;
	int ret, rc;

	if (!devs)
		return EXIT_FATAL;
	if (start_undo(a, &u) || open_devs(a, true, u, devs)) {
		ub_undo_free(u);
		free(devs);
		return EXIT_FATAL;
	}
	ret = ub_rescue_fix_device_size(devs, a->ndevs, &a->log, &r);
	rc = EXIT_OK;
	if (ret) {
		fprintf(stderr, "ubtrfs rescue fix-device-size: error: %s\n",
			ret == -EOPNOTSUPP ? "the filesystem cannot be written as it is (see above)" : strerror(-ret));
		rc = EXIT_FATAL;
		goto out;
	}
	for (int i = 0; i < r.ndevs; i++) {
		const struct ub_devsize_fix *f = &r.dev[i];

		if (f->held) {
			fprintf(stderr, "ubtrfs rescue fix-device-size: error: devid %" PRIu64 " claims %" PRIu64
				" bytes, the device has %" PRIu64 ", but its device extents reach %" PRIu64 ": left\n",
				f->devid, f->old_bytes, f->dev_bytes, f->extents_end);
			rc = EXIT_PROBLEMS;
		}
		if (f->new_bytes != f->old_bytes)
			printf("Fixed device size for devid %" PRIu64 ", old size: %" PRIu64 " new size: %" PRIu64 "\n",
			       f->devid, f->old_bytes, f->new_bytes);
	}
	if (r.new_total != r.old_total)
		printf("Fixed super total bytes, old size: %" PRIu64 " new size: %" PRIu64 "\n", r.old_total,
		       r.new_total);
	if (!r.changed)
		printf("No device size related problem found\n");
out:
	if (end_undo(a, u))
		rc = EXIT_FATAL;
	ub_devsize_result_free(&r);
	free(devs);
	return rc;
}

/* ---- chunk-recover ---- */

static int do_chunk(struct rescue_args *a)
{
	struct ub_fs_opts o = { .super_mirror = -1, .no_log = true };
	struct ub_log silent = { .verbosity = -1 };
	struct ub_dev **devs;
	struct ub_undo *u = NULL;
	struct ub_fs *fs = NULL;
	int ret, rc = EXIT_OK, nchunks = 0;

	if (!ub_fs_open((const char *const *)a->devs, a->ndevs, &o, &silent, &fs)) {
		ub_fs_close(fs);
		printf("the chunk tree reads: nothing to recover\n");
		return EXIT_OK;
	}
	if (!a->yes) {
		if (!isatty(STDIN_FILENO)) {
			fprintf(stderr, "ubtrfs rescue chunk-recover: error: no terminal to ask for confirmation: give -y\n");
			return EXIT_FATAL;
		}
		if (!confirm(a->sub)) {
			printf("Aborted\n");
			return EXIT_FATAL;
		}
	}
	devs = calloc((size_t)a->ndevs, sizeof(*devs));
	if (!devs)
		return EXIT_FATAL;
	if (start_undo(a, &u) || open_devs(a, true, u, devs)) {
		ub_undo_free(u);
		free(devs);
		return EXIT_FATAL;
	}
	ret = ub_rescue_chunk_recover((const char *const *)a->devs, a->ndevs, devs, a->ndevs, &a->log, &nchunks);
	if (ret < 0) {
		fprintf(stderr, "ubtrfs rescue chunk-recover: error: chunk tree not rebuilt: %s\n", strerror(-ret));
		rc = EXIT_FATAL;
	} else if (!nchunks) {
		printf("the chunk tree reads: nothing to recover\n");
	} else {
		printf("Chunk tree recovered successfully: %d chunk%s\n", nchunks, nchunks == 1 ? "" : "s");
	}
	if (end_undo(a, u))
		rc = EXIT_FATAL;
	free(devs);
	return rc;
}

int cmd_rescue(int argc, char **argv)
{
	static const struct {
		const char *name, *help;
		int (*fn)(struct rescue_args *a);
	} subs[] = {
		{ "undo", undo_help, do_undo },
		{ "super-recover", super_help, do_super },
		{ "zero-log", zero_help, do_zero_log },
		{ "fix-device-size", size_help, do_fix_size },
		{ "chunk-recover", chunk_help, do_chunk },
	};
	struct rescue_args a;

	if (argc < 2)
		return usage_error("rescue", "a command is needed");
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		fputs(help, stdout);
		return EXIT_OK;
	}
	for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++) {
		int ret;

		if (strcmp(argv[1], subs[i].name))
			continue;
		memset(&a, 0, sizeof(a));
		a.sub = subs[i].name;
		ret = parse(argc - 1, argv + 1, subs[i].help, &a);
		if (ret)
			return ret < 0 ? EXIT_OK : ret;
		if (refuse_mounted(&a))
			return EXIT_FATAL;
		ret = subs[i].fn(&a);
		/* an error the library said makes a success at least "problems" */
		return ret == EXIT_OK && a.errors ? EXIT_PROBLEMS : ret;
	}
	return usage_error("rescue", "unknown command '%s'", argv[1]);
}
