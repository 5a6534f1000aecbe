// SPDX-License-Identifier: MIT
/*
 * Opens a filesystem read-write through the write engine and closes it: with
 * a pending fsync log that replays the log into the trees and commits it
 * (tests/integration/test_log_commit.py). --no-replay asks the open to refuse
 * the log instead. Exit 0 when the open succeeded, 1 otherwise; the engine's
 * messages (info level: what the replay did) go to stderr.
 */
#include <stdio.h>
#include <string.h>
#include "txn/txn.h"

int main(int argc, char **argv)
{
	struct ub_log log = { .verbosity = UB_LOG_INFO };
	struct ub_engine *e = NULL;
	unsigned flags = 0;
	int i = 1, ret;

	if (i < argc && !strcmp(argv[i], "--no-replay")) {
		flags |= UB_ENGINE_OPEN_NO_LOG_REPLAY;
		i++;
	}
	if (i >= argc) {
		fprintf(stderr, "usage: logcommit_driver [--no-replay] DEVICE...\n");
		return 2;
	}
	ret = ub_engine_open_ex((const char *const *)argv + i, argc - i, &log, flags, &e);
	if (ret) {
		fprintf(stderr, "logcommit_driver: open: %s\n", strerror(-ret));
		return 1;
	}
	ub_engine_close(e);
	return 0;
}
