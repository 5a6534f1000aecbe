/* SPDX-License-Identifier: MIT */
/* Diagnostics: every layer reports through the sink its owner installed, never to a global. */
#ifndef UBTRFS_LOG_H
#define UBTRFS_LOG_H

#include <stdarg.h>
#include "ubtrfs/api.h"

UB_API_BEGIN

enum ub_log_level { UB_LOG_ERROR = 0, UB_LOG_WARN = 1, UB_LOG_INFO = 2, UB_LOG_DEBUG = 3 };

struct ub_log {
	/* NULL means: print "ubtrfs: error: ..." lines to stderr up to `verbosity`. */
	void (*fn)(void *arg, enum ub_log_level lvl, const char *msg);
	void *arg;
	int verbosity; /* highest level printed by the default sink */
	/* if set, counts UB_LOG_ERROR messages (shared by every copy of this sink); atomically, as
	 * readers on several threads log through one sink (fn, too, must then be thread-safe) */
	unsigned *errors;
};

void ub_logf(const struct ub_log *log, enum ub_log_level lvl, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#define ub_err(log, ...) ub_logf((log), UB_LOG_ERROR, __VA_ARGS__)
#define ub_warn(log, ...) ub_logf((log), UB_LOG_WARN, __VA_ARGS__)
#define ub_info(log, ...) ub_logf((log), UB_LOG_INFO, __VA_ARGS__)

UB_API_END

#endif
