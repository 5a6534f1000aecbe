/* SPDX-License-Identifier: MIT */
#include <stdio.h>
#include "ubtrfs/log.h"

static const char *const level_names[] = { "error", "warning", "info", "debug" };

void ub_logf(const struct ub_log *log, enum ub_log_level lvl, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	int verbosity = log ? log->verbosity : UB_LOG_WARN;

	if (log && log->errors && lvl == UB_LOG_ERROR)
		__atomic_fetch_add(log->errors, 1, __ATOMIC_RELAXED);
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (log && log->fn) {
		log->fn(log->arg, lvl, msg);
		return;
	}
	if ((int)lvl > verbosity)
		return;
	fprintf(stderr, "ubtrfs: %s: %s\n", level_names[lvl], msg);
}
