/* SPDX-License-Identifier: MIT */
/* What a library user reaches from an engine, whose structure is private (include/ubtrfs/engine.h). */
#include "txn.h"

struct ub_fs *ub_engine_fs(struct ub_engine *e)
{
	return &e->fs;
}

int ub_engine_error(struct ub_engine *e)
{
	return ub_engine_broken(e);
}
