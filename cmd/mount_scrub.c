/* SPDX-License-Identifier: MIT */
/*
 * Scrub on a ubtrfs mount: the kernel's scrub ioctls answered by the daemon
 * with the library's scrub (include/ubtrfs/scrub.h) beside the mount's readers
 * and writers. BTRFS_IOC_SCRUB names one device and blocks until that
 * device is done, as the kernel's does; btrfs-progs (and `ubtrfs scrub`) send
 * one per device from as many threads at once. The devices whose ioctls
 * arrive within a short while are scrubbed together, as one scrub of the
 * library (its threads, one per device, share the RAID5/6 full stripes out
 * between them: scrubbed apart, every device's scrub would verify every full
 * stripe it holds a strip of). A later device starts a scrub of its own.
 *
 * What each scrub finds is logged and kept as lines (text and JSON) for
 * UBTRFS_IOC_SCRUB_LINES; a device's counts stay after its scrub ended, for
 * SCRUB_PROGRESS and UBTRFS_IOC_SCRUB_COUNTS. The device error counters are
 * read and reset through GET_DEV_STATS. A scrub of a read-only mount reads
 * only.
 */
#define FUSE_USE_VERSION 35
#include <errno.h>
#include <fuse_lowlevel.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mount.h"
#include "mount_scrub.h"
#include "scrub.h"
#include "ubtrfs/devinfo.h"
#include "ubtrfs/engine.h"
#include "ubtrfs/fsinfo.h"
#include "ubtrfs/scrub.h"

/* how long a scrub waits for the other devices' ioctls of the same command */
#define GATHER_MS 300
#define MAX_DEVS 64

struct session {
	struct mount_scrubs *ms;
	struct ub_scrub *s;
	int n;
	uint64_t devids[MAX_DEVS], start[MAX_DEVS];
	bool claimed[MAX_DEVS];
	bool readonly;
	bool started, done;
	int ret;
	pthread_t runner;
	bool runner_started;
	struct session *next;
};

/* the counts of a device's last scrub, kept after its session is gone */
struct last {
	uint64_t devid;
	struct ub_scrub_dev_progress p;
};

struct mount_scrubs {
	struct mount_ctx *mc;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct session *sessions;
	struct last last[MAX_DEVS];
	int nlast;
	/* problem lines: a ring of UBTRFS_SCRUB_KEEP, numbered from 0 */
	char *text[UBTRFS_SCRUB_KEEP], *json[UBTRFS_SCRUB_KEEP];
	uint64_t next_line;
};

int mount_scrub_init(struct mount_ctx *mc)
{
	struct mount_scrubs *ms = calloc(1, sizeof(*ms));

	if (!ms)
		return -ENOMEM;
	ms->mc = mc;
	pthread_mutex_init(&ms->lock, NULL);
	pthread_cond_init(&ms->cond, NULL);
	mc->scrubs = ms;
	return 0;
}

static void keep_last(struct mount_scrubs *ms, uint64_t devid, const struct ub_scrub_dev_progress *p)
{
	int i = 0;

	while (i < ms->nlast && ms->last[i].devid != devid)
		i++;
	if (i == ms->nlast) {
		if (ms->nlast == MAX_DEVS)
			return;
		ms->nlast++;
	}
	ms->last[i].devid = devid;
	ms->last[i].p = *p;
}

static void session_unlink(struct mount_scrubs *ms, struct session *x)
{
	for (struct session **pp = &ms->sessions; *pp; pp = &(*pp)->next)
		if (*pp == x) {
			*pp = x->next;
			return;
		}
}

void mount_scrub_stop(struct mount_ctx *mc)
{
	struct mount_scrubs *ms = mc->scrubs;

	if (!ms)
		return;
	pthread_mutex_lock(&ms->lock);
	for (struct session *x = ms->sessions; x; x = x->next)
		if (x->s)
			ub_scrub_cancel(x->s);
	/* the runners end their sessions; the waiting ioctls are gone with the FUSE loop */
	while (ms->sessions) {
		struct session *x = ms->sessions;

		if (x->runner_started) {
			pthread_mutex_unlock(&ms->lock);
			pthread_join(x->runner, NULL);
			pthread_mutex_lock(&ms->lock);
			x->runner_started = false;
		}
		session_unlink(ms, x);
		ub_scrub_free(x->s);
		free(x);
	}
	pthread_mutex_unlock(&ms->lock);
	for (int i = 0; i < UBTRFS_SCRUB_KEEP; i++) {
		free(ms->text[i]);
		free(ms->json[i]);
	}
	pthread_cond_destroy(&ms->cond);
	pthread_mutex_destroy(&ms->lock);
	free(ms);
	mc->scrubs = NULL;
}

static char *format(const struct ub_scrub_problem *p, bool json)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (!f)
		return NULL;
	scrub_format_problem(f, p, json);
	fclose(f);
	return buf;
}

/* The library's sink (serialized by the scrub): the log, and the kept lines. */
static void on_problem(void *arg, const struct ub_scrub_problem *p)
{
	struct session *x = arg;
	struct mount_scrubs *ms = x->ms;
	char *text = format(p, false), *json = format(p, true);
	size_t i;

	if (text) {
		fprintf(stderr, "ubtrfs: scrub: %s", text);
		fflush(stderr);
	}
	pthread_mutex_lock(&ms->lock);
	i = (size_t)(ms->next_line % UBTRFS_SCRUB_KEEP);
	free(ms->text[i]);
	free(ms->json[i]);
	ms->text[i] = text;
	ms->json[i] = json;
	ms->next_line++;
	pthread_mutex_unlock(&ms->lock);
}

static void *runner_main(void *arg)
{
	struct session *x = arg;
	struct mount_scrubs *ms = x->ms;
	int ret = ub_scrub_run(x->s);

	pthread_mutex_lock(&ms->lock);
	for (int i = 0; i < x->n; i++) {
		struct ub_scrub_dev_progress p;

		if (!ub_scrub_progress(x->s, x->devids[i], &p))
			keep_last(ms, x->devids[i], &p);
	}
	x->ret = ret;
	x->done = true;
	pthread_cond_broadcast(&ms->cond);
	pthread_mutex_unlock(&ms->lock);
	return NULL;
}

static int session_index(const struct session *x, uint64_t devid)
{
	for (int i = 0; i < x->n; i++)
		if (x->devids[i] == devid)
			return i;
	return -1;
}

/* The session that has (or gathers) devid; NULL when none. */
static struct session *session_of(struct mount_scrubs *ms, uint64_t devid, int *idx)
{
	for (struct session *x = ms->sessions; x; x = x->next) {
		int i = session_index(x, devid);

		if (i >= 0 && !x->done) {
			*idx = i;
			return x;
		}
	}
	return NULL;
}

static void to_btrfs(const struct ub_scrub_dev_progress *p, struct btrfs_scrub_progress *b)
{
	memset(b, 0, sizeof(*b));
	b->data_extents_scrubbed = p->data_extents_scrubbed;
	b->tree_extents_scrubbed = p->tree_extents_scrubbed;
	b->data_bytes_scrubbed = p->data_bytes_scrubbed;
	b->tree_bytes_scrubbed = p->tree_bytes_scrubbed;
	b->read_errors = p->read_errors;
	b->csum_errors = p->csum_errors;
	b->verify_errors = p->verify_errors;
	b->no_csum = p->no_csum;
	b->super_errors = p->super_errors;
	b->malloc_errors = p->malloc_errors;
	b->uncorrectable_errors = p->uncorrectable_errors;
	b->corrected_errors = p->corrected_errors;
	b->last_physical = p->last_physical;
	b->unverified_errors = p->unverified_errors;
}

/* Is devid a device of the filesystem, and present? */
static bool devid_known(struct mount_ctx *mc, uint64_t devid)
{
	struct ub_device_info *devs = NULL;
	bool found = false;
	int n = 0;

	if (ub_volume_list_devices(ub_fs_volume(mc->fs), &devs, &n))
		return false;
	for (int i = 0; i < n; i++)
		found |= devs[i].devid == devid && !devs[i].missing;
	free(devs);
	return found;
}

int mount_scrub_start(struct mount_ctx *mc, struct btrfs_ioctl_scrub_args *a)
{
	struct mount_scrubs *ms = mc->scrubs;
	const bool readonly = (a->flags & BTRFS_SCRUB_READONLY) || !mc->e;
	struct session *x;
	struct ub_scrub_dev_progress p;
	int idx, ret = 0;

	if (!ms)
		return -ENOTTY;
	if (a->flags & ~(uint64_t)BTRFS_SCRUB_READONLY)
		return -EOPNOTSUPP;
	if (!(a->flags & BTRFS_SCRUB_READONLY) && !mc->e)
		return -EROFS;
	pthread_mutex_lock(&ms->lock);
	x = session_of(ms, a->devid, &idx);
	if (x && x->claimed[idx]) {
		pthread_mutex_unlock(&ms->lock);
		return -EINPROGRESS;
	}
	if (!x) {
		/* a session still gathering devices takes this one too, else a new one gathers */
		for (x = ms->sessions; x && (x->started || x->readonly != readonly || x->n == MAX_DEVS); x = x->next)
			;
		if (!x) {
			pthread_mutex_unlock(&ms->lock);
			if (!devid_known(mc, a->devid))
				return -ENODEV;
			pthread_mutex_lock(&ms->lock);
			for (x = ms->sessions; x && (x->started || x->readonly != readonly || x->n == MAX_DEVS); x = x->next)
				;
		}
		if (!x) {
			struct timespec until;

			x = calloc(1, sizeof(*x));
			if (!x) {
				pthread_mutex_unlock(&ms->lock);
				return -ENOMEM;
			}
			x->ms = ms;
			x->readonly = readonly;
			x->next = ms->sessions;
			ms->sessions = x;
			idx = x->n++;
			x->devids[idx] = a->devid;
			x->start[idx] = a->start;
			x->claimed[idx] = true;
			/* the other devices' ioctls of the same command arrive meanwhile */
			clock_gettime(CLOCK_REALTIME, &until);
			until.tv_nsec += GATHER_MS * 1000000L;
			until.tv_sec += until.tv_nsec / 1000000000L;
			until.tv_nsec %= 1000000000L;
			while (pthread_cond_timedwait(&ms->cond, &ms->lock, &until) != ETIMEDOUT)
				;
			{
				struct ub_scrub_opts so = { .readonly = readonly, .devids = x->devids, .ndevids = x->n,
							    .start = x->start };
				struct ub_scrub_sink sink = { on_problem, x };

				ret = ub_scrub_new(mc->e ? NULL : mc->fs, mc->e, &so, &sink, &x->s);
			}
			x->started = true;
			if (!ret) {
				x->runner_started = pthread_create(&x->runner, NULL, runner_main, x) == 0;
				if (!x->runner_started)
					ret = -EAGAIN;
			}
			if (ret) {
				x->ret = ret;
				x->done = true;
			}
			pthread_cond_broadcast(&ms->cond);
		} else {
			idx = x->n++;
			x->devids[idx] = a->devid;
			x->start[idx] = a->start;
			x->claimed[idx] = true;
		}
	} else {
		x->claimed[idx] = true;
	}
	/* until this device is done (or the session could not start, or the mount goes) */
	for (;;) {
		struct timespec until;

		if (x->done)
			break;
		if (x->started && x->s && !ub_scrub_progress(x->s, a->devid, &p) && !p.running &&
		    (p.finished || p.canceled || x->done))
			break;
		if (mc->se && fuse_session_exited(mc->se) && x->s)
			ub_scrub_cancel(x->s);
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_nsec += 200 * 1000000L;
		until.tv_sec += until.tv_nsec / 1000000000L;
		until.tv_nsec %= 1000000000L;
		pthread_cond_timedwait(&ms->cond, &ms->lock, &until);
	}
	ret = x->s ? 0 : x->ret;
	if (x->s && !ub_scrub_progress(x->s, a->devid, &p)) {
		to_btrfs(&p, &a->progress);
		keep_last(ms, a->devid, &p);
		ret = p.canceled ? -ECANCELED : p.finished ? 0 : x->done && x->ret ? x->ret : 0;
		if (!p.finished && !p.canceled && !ret)
			ret = -EIO;
	}
	x->claimed[idx] = false;
	/* the last one out of a finished session frees it */
	if (x->done) {
		bool any = false;

		for (int i = 0; i < x->n; i++)
			any |= x->claimed[i];
		if (!any) {
			session_unlink(ms, x);
			pthread_mutex_unlock(&ms->lock);
			if (x->runner_started)
				pthread_join(x->runner, NULL);
			ub_scrub_free(x->s);
			free(x);
			return ret;
		}
	}
	pthread_mutex_unlock(&ms->lock);
	return ret;
}

/* A running scrub's counts of devid, else the last one's: 0 with *running, or -ENOTCONN. */
static int counts_of(struct mount_scrubs *ms, uint64_t devid, struct ub_scrub_dev_progress *p, bool *running)
{
	int idx;
	struct session *x = session_of(ms, devid, &idx);

	*running = false;
	if (x && x->s && !ub_scrub_progress(x->s, devid, p)) {
		*running = p->running;
		return 0;
	}
	for (int i = 0; i < ms->nlast; i++)
		if (ms->last[i].devid == devid) {
			*p = ms->last[i].p;
			return 0;
		}
	return -ENOTCONN;
}

int mount_scrub_progress(struct mount_ctx *mc, struct btrfs_ioctl_scrub_args *a)
{
	struct mount_scrubs *ms = mc->scrubs;
	struct ub_scrub_dev_progress p;
	bool running;
	int ret;

	if (!ms)
		return -ENOTTY;
	pthread_mutex_lock(&ms->lock);
	ret = counts_of(ms, a->devid, &p, &running);
	pthread_mutex_unlock(&ms->lock);
	/* the kernel answers for a running scrub only */
	if (!ret && !running)
		ret = -ENOTCONN;
	if (!ret)
		to_btrfs(&p, &a->progress);
	return ret;
}

int mount_scrub_counts(struct mount_ctx *mc, struct ubtrfs_ioctl_scrub_counts *a)
{
	struct mount_scrubs *ms = mc->scrubs;
	struct ub_scrub_dev_progress p;
	bool running;
	int ret;

	if (!ms)
		return -ENOTTY;
	pthread_mutex_lock(&ms->lock);
	ret = counts_of(ms, a->devid, &p, &running);
	pthread_mutex_unlock(&ms->lock);
	if (ret)
		return ret;
	a->flags = (running ? UBTRFS_SCRUB_RUNNING : 0) | (p.finished ? UBTRFS_SCRUB_FINISHED : 0) |
		   (p.canceled ? UBTRFS_SCRUB_CANCELED : 0);
	scrub_counts_pack(&p, (uint64_t *)a->v, UBTRFS_SCRUB_COUNTS);
	return 0;
}

int mount_scrub_cancel(struct mount_ctx *mc)
{
	struct mount_scrubs *ms = mc->scrubs;
	int ret = -ENOTCONN;

	if (!ms)
		return -ENOTTY;
	pthread_mutex_lock(&ms->lock);
	for (struct session *x = ms->sessions; x; x = x->next)
		if (x->s && !x->done) {
			ub_scrub_cancel(x->s);
			ret = 0;
		}
	pthread_mutex_unlock(&ms->lock);
	return ret;
}

int mount_scrub_lines(struct mount_ctx *mc, struct ubtrfs_ioctl_scrub_lines *a)
{
	struct mount_scrubs *ms = mc->scrubs;
	uint64_t first, seq;
	size_t used = 0;

	if (!ms)
		return -ENOTTY;
	pthread_mutex_lock(&ms->lock);
	first = ms->next_line > UBTRFS_SCRUB_KEEP ? ms->next_line - UBTRFS_SCRUB_KEEP : 0;
	/* past the end (UINT64_MAX): where the lines end now, for a caller that wants only new ones */
	if (a->seq > ms->next_line)
		a->seq = ms->next_line;
	seq = a->seq < first ? first : a->seq;
	a->dropped = seq - a->seq;
	for (; seq < ms->next_line; seq++) {
		const char *line = (a->json ? ms->json : ms->text)[seq % UBTRFS_SCRUB_KEEP];
		size_t len = line ? strlen(line) : 0;

		if (used + len > sizeof(a->buf))
			break;
		memcpy(a->buf + used, line, len);
		used += len;
	}
	pthread_mutex_unlock(&ms->lock);
	a->seq = seq;
	a->len = (uint32_t)used;
	return 0;
}

int mount_dev_stats(struct mount_ctx *mc, struct btrfs_ioctl_get_dev_stats *a)
{
	uint64_t v[UB_DEV_STAT_COUNT];
	int ret;

	if (!devid_known(mc, a->devid))
		return -ENODEV;
	ret = ub_dev_stats_read(mc->fs, a->devid, v);
	if (ret)
		return ret;
	if (a->flags & BTRFS_DEV_STATS_RESET) {
		/* as the kernel: set to zero now, written with the next commit */
		if (!mc->e)
			return -EROFS;
		ret = ub_dev_stats_update(mc->e, a->devid, NULL, true);
		if (ret)
			return ret;
	}
	if (a->nr_items > UB_DEV_STAT_COUNT)
		a->nr_items = UB_DEV_STAT_COUNT;
	for (uint64_t i = 0; i < a->nr_items; i++)
		a->values[i] = v[i];
	return 0;
}
