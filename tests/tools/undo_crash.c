/* SPDX-License-Identifier: MIT */
/*
 * A rescue run stopped at its Kth device write, for test_rescue.py: the image
 * under a faulty device (every write from the Kth on fails and does nothing, as
 * if the machine stopped there: writes are synchronous, so the image holds
 * exactly the writes before), under an undo device; the run then ends without
 * the undo file's trailer, as a crash leaves it. `ubtrfs rescue undo` must give
 * back the image as it was before the run, whatever K.
 *
 *   undo_crash size|super|zerolog|chunk IMAGE UNDOFILE K
 *
 * K 0: nothing fails; prints the number of writes the run made. A library user.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ubtrfs/dev.h"
#include "ubtrfs/rescue.h"
#include "ubtrfs/undo.h"

int main(int argc, char **argv)
{
	struct ub_log quiet = { .verbosity = -1 };
	struct ub_fault_plan *plan = NULL;
	struct ub_undo *u = NULL;
	struct ub_dev *dev = NULL;
	uint64_t k, injected;
	int ret, rewritten;

	if (argc != 5) {
		fprintf(stderr, "usage: undo_crash size|super|zerolog|chunk IMAGE UNDOFILE K\n");
		return 2;
	}
	k = strtoull(argv[4], NULL, 0);
	ret = ub_fault_plan_new(&plan);
	if (!ret)
		ret = ub_undo_create(argv[3], &u);
	if (!ret)
		ret = ub_dev_open(argv[2], true, &dev);
	if (!ret)
		ret = ub_dev_open_faulty(dev, plan, &dev);
	if (!ret)
		ret = ub_dev_open_undo(dev, u, &dev);
	if (ret) {
		fprintf(stderr, "undo_crash: %s\n", strerror(-ret));
		return 2;
	}
	ret = 0;
	/* from here on every write the run makes is counted; the Kth and later fail */
	ub_fault_plan_arm(plan, UB_FAULT_WRITE, k, true);
	if (!strcmp(argv[1], "size"))
		ret = ub_rescue_fix_device_size(&dev, 1, &quiet, NULL);
	else if (!strcmp(argv[1], "super"))
		ret = ub_rescue_super_recover(&dev, 1, &quiet, NULL, &rewritten);
	else if (!strcmp(argv[1], "chunk"))
		ret = ub_rescue_chunk_recover((const char *const *)&argv[2], 1, &dev, 1, &quiet, &rewritten);
	else
		ret = ub_rescue_zero_log(&dev, 1, &quiet, NULL);
	injected = ub_fault_plan_injected(plan);
	printf("%llu writes, %llu failed, run %s\n", (unsigned long long)ub_fault_plan_count(plan, UB_FAULT_WRITE),
	       (unsigned long long)injected, ret < 0 ? strerror(-ret) : "ok");
	ub_fault_plan_put(plan);
	/* a crash writes no trailer */
	ub_undo_free(u);
	return k && !injected ? 1 : 0;
}
