/* SPDX-License-Identifier: MIT */
/* ubtrfs find-root: the root trees still on disk, newest first, and how intact each is. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "ubtrfs/fsinfo.h"
#include "ubtrfs/rootscan.h"
#include "cmd.h"

static const char help[] =
	"usage: ubtrfs find-root [OPTIONS] DEV...\n\n"
	"List the root trees still on disk, newest generation first: the superblock's root,\n"
	"its backup roots, and every block of the metadata block groups that verifies as a\n"
	"root tree block (owner, checksum, fsid, address). For each, whether its own block\n"
	"and the root blocks of the extent, csum, fs and dev trees it names can be read.\n"
	"A usable candidate is opened by every command with --root BYTENR.\n\n"
	"      --json         a JSON array, one object per candidate\n"
	"      --backups-only the superblock's roots only, no scan of the metadata\n"
	"  -h, --help         this text\n"
	OPEN_ARGS_HELP
	"\nExit codes: 0 the current root is intact, 1 it is not (the candidates say what\n"
	"is left), 2 usage or fatal error (not btrfs, the chunk tree unreadable).\n";

static const char *const tree_names[UB_PROBE_NTREES] = { "extent", "csum", "fs", "dev" };

static void progress(void *arg, uint64_t done, uint64_t total)
{
	fprintf(stderr, "\rscanning metadata: %3llu%%", total ? (unsigned long long)(done * 100 / total) : 100ULL);
}

static bool usable(const struct ub_root_candidate *c)
{
	if (c->probe.tree_err)
		return false;
	for (int i = 0; i < UB_PROBE_NTREES; i++)
		if (c->probe.trees[i].err)
			return false;
	return true;
}

static void print_text(const struct ub_root_candidate *c)
{
	const char *sep = "";

	printf("generation %llu root tree at %llu level %u (", (unsigned long long)c->generation,
	       (unsigned long long)c->bytenr, c->level);
	if (c->current) {
		printf("superblock");
		sep = ", ";
	}
	if (c->backup_slot >= 0) {
		printf("%sbackup %d", sep, c->backup_slot);
		sep = ", ";
	}
	if (c->scanned)
		printf("%sscan", sep);
	printf("): ");
	if (c->probe.tree_err) {
		printf("root tree block unreadable: %s\n", strerror(-c->probe.tree_err));
		return;
	}
	for (int i = 0; i < UB_PROBE_NTREES; i++) {
		int e = c->probe.trees[i].err;

		printf("%s%s %s", i ? ", " : "", tree_names[i], !e ? "ok" : e == -ENOENT ? "missing" : strerror(-e));
	}
	printf("\n");
}

static void print_json(const struct ub_root_candidate *c, bool first)
{
	printf("%s\n  {\"generation\": %llu, \"bytenr\": %llu, \"level\": %u, \"current\": %s, \"backup_slot\": %d, "
	       "\"scanned\": %s, \"usable\": %s, \"error\": ",
	       first ? "" : ",", (unsigned long long)c->generation, (unsigned long long)c->bytenr, c->level,
	       c->current ? "true" : "false", c->backup_slot, c->scanned ? "true" : "false",
	       usable(c) ? "true" : "false");
	if (c->probe.tree_err)
		printf("\"%s\"", strerror(-c->probe.tree_err));
	else
		printf("null");
	printf(", \"trees\": {");
	for (int i = 0; i < UB_PROBE_NTREES; i++) {
		const struct ub_root *r = &c->probe.trees[i].root;
		int e = c->probe.trees[i].err;

		printf("%s\"%s\": {\"bytenr\": %llu, \"generation\": %llu, \"level\": %u, \"error\": ", i ? ", " : "",
		       tree_names[i], (unsigned long long)r->bytenr, (unsigned long long)r->generation, r->level);
		if (e)
			printf("\"%s\"}", e == -ENOENT ? "missing" : strerror(-e));
		else
			printf("null}");
	}
	printf("}}");
}

int cmd_find_root(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "json", no_argument, NULL, 'j' }, { "backups-only", no_argument, NULL, 'b' },
		{ "help", no_argument, NULL, 'h' }, OPEN_ARGS_LONGOPTS, { NULL, 0, NULL, 0 },
	};
	struct open_args oa;
	struct ub_fs *fs = NULL;
	struct ub_root_candidate *cands = NULL;
	size_t n = 0;
	uint64_t gen = 0, bytenr = 0;
	bool json = false, scan = true, tty;
	int opt, r, ret, rc = EXIT_OK;

	open_args_init(&oa);
	while ((opt = getopt_long(argc, argv, "hvq", longopts, NULL)) != -1) {
		if ((r = open_args_parse(&oa, opt, optarg)) != 0) {
			if (r < 0)
				return usage_error("find-root", "invalid value '%s'", optarg);
			continue;
		}
		switch (opt) {
		case 'j': json = true; break;
		case 'b': scan = false; break;
		case 'h': fputs(help, stdout); return EXIT_OK;
		default: return usage_error("find-root", "invalid option");
		}
	}
	if (optind >= argc)
		return usage_error("find-root", "no device given");
	if (open_fs(&oa, argv + optind, argc - optind, &fs))
		return EXIT_FATAL;
	tty = isatty(STDERR_FILENO) && oa.verbosity >= UB_LOG_WARN;
	ret = ub_find_roots(fs, scan, tty ? progress : NULL, NULL, &cands, &n);
	if (tty && scan)
		fprintf(stderr, "\r%*s\r", 24, "");
	if (ret) {
		fprintf(stderr, "ubtrfs: error: finding the root trees: %s\n", strerror(-ret));
		ub_fs_close(fs);
		return EXIT_FATAL;
	}
	if (json)
		printf("[");
	for (size_t i = 0; i < n; i++) {
		if (json)
			print_json(&cands[i], i == 0);
		else
			print_text(&cands[i]);
		if (cands[i].current && !usable(&cands[i])) {
			rc = EXIT_PROBLEMS;
			gen = cands[i].generation;
			bytenr = cands[i].bytenr;
		}
	}
	if (json)
		printf("\n]\n");
	fflush(stdout);
	if (rc == EXIT_PROBLEMS)
		fprintf(stderr, "ubtrfs: error: the superblock's root (generation %llu, root tree at logical %llu) "
			"is not intact; see the candidates\n",
			(unsigned long long)gen, (unsigned long long)bytenr);
	free(cands);
	ub_fs_close(fs);
	return final_rc(&oa, rc);
}
