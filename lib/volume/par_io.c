/* SPDX-License-Identifier: MIT */
/*
 * Device writes of one volume write side by side. A write that reaches
 * several devices (the copies of RAID1/DUP, the strips of a RAID5/6 full
 * stripe run, a RAID0/10 span) spends most of its time in the kernel copying
 * into each device's page cache; done one device after the other that uses one
 * core while the caller (a FUSE request, a commit) waits. Here a second thread
 * takes every other piece, as the kernel's own block layer lets its devices
 * work at once.
 *
 * Only image files and block devices (the file backend) are written side by
 * side: the recording and fault-injecting backends keep the one order the
 * tests replay, and small writes (tree blocks) are not worth a thread.
 * Threads are made per call, not pooled: a call worth one moves hundreds of
 * KiB, and nothing outlives it (a daemon forks after opening, which a pool's
 * threads would not survive).
 */
#include <pthread.h>
#include <unistd.h>
#include "volume_internal.h"
#include "dev/dev_priv.h"

/* below this many bytes a piece each is cheaper than a thread */
#define PAR_MIN_BYTES (256U * 1024)

/* set on a helper thread, so that a piece that is itself split stays on it */
static __thread bool in_helper;

struct par_run {
	int n;
	int next;  /* the next piece to take (atomic) */
	int first; /* the first error (atomic) */
	int (*fn)(void *arg, int i);
	void *arg;
};

static void par_take(struct par_run *r)
{
	int i;

	/* after a failure nothing more is started: the volume's write error is sticky anyway */
	while (!__atomic_load_n(&r->first, __ATOMIC_ACQUIRE) && (i = __atomic_fetch_add(&r->next, 1, __ATOMIC_RELAXED)) < r->n) {
		int ret = r->fn(r->arg, i), none = 0;

		if (ret)
			__atomic_compare_exchange_n(&r->first, &none, ret, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
	}
}

static void *par_helper(void *p)
{
	in_helper = true;
	par_take(p);
	return NULL;
}

static bool many_cpus(void)
{
	static int cpus; /* 0: not asked yet; races only ask twice */
	int n = __atomic_load_n(&cpus, __ATOMIC_RELAXED);

	if (!n) {
		long c = sysconf(_SC_NPROCESSORS_ONLN);

		n = c > 1 ? 2 : 1;
		__atomic_store_n(&cpus, n, __ATOMIC_RELAXED);
	}
	return n > 1;
}

bool ub_vol_par_worth(const struct ub_chunk *c, uint64_t bytes)
{
	if (bytes < PAR_MIN_BYTES || in_helper || !many_cpus())
		return false;
	for (int i = 0; i < c->num_stripes; i++) {
		const struct ub_vdev *vd = c->stripes[i].dev;

		if (vd && vd->dev && !ub_dev_is_file(vd->dev))
			return false;
	}
	return true;
}

int ub_vol_par_run(int n, bool side_by_side, int (*fn)(void *arg, int i), void *arg)
{
	struct par_run r = { .n = n, .fn = fn, .arg = arg };
	pthread_t t;
	bool helper = side_by_side && n > 1 && pthread_create(&t, NULL, par_helper, &r) == 0;

	/* without a helper (none wanted, or none to be had) the caller takes every piece in order */
	par_take(&r);
	if (helper)
		pthread_join(t, NULL);
	return __atomic_load_n(&r.first, __ATOMIC_ACQUIRE);
}
