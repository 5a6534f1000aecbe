/* SPDX-License-Identifier: MIT */
/* Worker threads decompressing extents for readers (see decomp_pool.h). */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "fs/compress.h"
#include "decomp_pool.h"
#include "fs_priv.h"

/* Bounds on the worker count: one per core, but at least two so that decoding overlaps reading. */
#define DC_MIN_THREADS 2
#define DC_MAX_THREADS 8

enum { DC_QUEUED = 1, DC_RUNNING, DC_DONE };

struct ub_dc_pool {
	pthread_mutex_t lock;
	pthread_cond_t work; /* a job was queued, or stop */
	pthread_cond_t done; /* a job finished */
	struct ub_dc_job *head, *tail;
	bool stop;
	uint8_t *idle[UB_DC_IDLE_BUFS];
	int nidle;
	int nthreads;
	pthread_t threads[DC_MAX_THREADS];
	/* read-ahead entries, oldest first */
	struct ub_dc_ahead *ahead[UB_DC_AHEAD];
	int nahead;
};

static void run(struct ub_dc_job *job)
{
	if (job->read_fs && ub_data_read_checked(job->read_fs, job->read_logical, job->inlen, job->read_buf,
						 job->read_verify, job->read_csums, job->read_have)) {
		job->ret = -EAGAIN;
		job->produced = 0;
		return;
	}
	job->ret = ub_decompress(job->type, job->in, job->inlen, job->out, job->outlen, job->sectorsize,
				 &job->produced, job->why, sizeof(job->why));
}

/* The oldest queued job, taken (the lock held). */
static struct ub_dc_job *take_head(struct ub_dc_pool *pool)
{
	struct ub_dc_job *job = pool->head;

	pool->head = job->next;
	if (!pool->head)
		pool->tail = NULL;
	job->state = DC_RUNNING;
	return job;
}

/* Decode a taken job outside the lock and tell its waiter (the lock held on entry and return). */
static void run_taken(struct ub_dc_pool *pool, struct ub_dc_job *job)
{
	pthread_mutex_unlock(&pool->lock);
	run(job);
	pthread_mutex_lock(&pool->lock);
	job->state = DC_DONE;
	pthread_cond_broadcast(&pool->done);
}

static void *worker(void *arg)
{
	struct ub_dc_pool *pool = arg;

	pthread_mutex_lock(&pool->lock);
	for (;;) {
		while (!pool->head && !pool->stop)
			pthread_cond_wait(&pool->work, &pool->lock);
		if (!pool->head)
			break;
		run_taken(pool, take_head(pool));
	}
	pthread_mutex_unlock(&pool->lock);
	/* the thread's decoders go with it (the key destructor of compress.c) */
	return NULL;
}

static int thread_count(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	if (n < DC_MIN_THREADS)
		return DC_MIN_THREADS;
	return n > DC_MAX_THREADS ? DC_MAX_THREADS : (int)n;
}

static struct ub_dc_pool *pool_create(void)
{
	struct ub_dc_pool *pool = calloc(1, sizeof(*pool));
	sigset_t all, old;
	int want = thread_count();

	if (!pool)
		return NULL;
	pthread_mutex_init(&pool->lock, NULL);
	pthread_cond_init(&pool->work, NULL);
	pthread_cond_init(&pool->done, NULL);
	/* signals stay with the caller's threads (a mount's handlers, a command's ^C) */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	while (pool->nthreads < want &&
	       pthread_create(&pool->threads[pool->nthreads], NULL, worker, pool) == 0)
		pool->nthreads++;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (!pool->nthreads) {
		ub_dc_pool_destroy(pool);
		return NULL;
	}
	return pool;
}

struct ub_dc_pool *ub_dc_pool_get(struct ub_fs *view)
{
	/* a view's reads use its filesystem's workers */
	struct ub_fs *fs = ub_fs_base(view);
	struct ub_dc_pool *pool = __atomic_load_n(&fs->dc_pool, __ATOMIC_ACQUIRE), *none = NULL;

	if (pool)
		return pool;
	pool = pool_create();
	if (!pool)
		return NULL;
	/* two readers may race to start it: the first one published wins */
	if (!__atomic_compare_exchange_n(&fs->dc_pool, &none, pool, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		ub_dc_pool_destroy(pool);
		return none;
	}
	return pool;
}

void ub_dc_pool_destroy(struct ub_dc_pool *pool)
{
	if (!pool)
		return;
	pthread_mutex_lock(&pool->lock);
	pool->stop = true;
	pthread_cond_broadcast(&pool->work);
	pthread_mutex_unlock(&pool->lock);
	for (int i = 0; i < pool->nthreads; i++)
		pthread_join(pool->threads[i], NULL);
	/* the workers ran every queued job before they stopped */
	for (int i = 0; i < pool->nahead; i++) {
		free(pool->ahead[i]->in);
		free(pool->ahead[i]->out);
		free(pool->ahead[i]);
	}
	while (pool->nidle)
		free(pool->idle[--pool->nidle]);
	pthread_cond_destroy(&pool->done);
	pthread_cond_destroy(&pool->work);
	pthread_mutex_destroy(&pool->lock);
	free(pool);
}

void ub_dc_submit(struct ub_dc_pool *pool, struct ub_dc_job *job)
{
	job->next = NULL;
	if (!pool) {
		run(job);
		job->state = DC_DONE;
		return;
	}
	pthread_mutex_lock(&pool->lock);
	job->state = DC_QUEUED;
	if (pool->tail)
		pool->tail->next = job;
	else
		pool->head = job;
	pool->tail = job;
	pthread_cond_signal(&pool->work);
	pthread_mutex_unlock(&pool->lock);
}

void ub_dc_wait(struct ub_dc_pool *pool, struct ub_dc_job *job)
{
	struct ub_dc_job **pp, *prev = NULL;

	if (!pool)
		return;
	pthread_mutex_lock(&pool->lock);
	if (job->state == DC_QUEUED) {
		/* nobody took it yet: waiting would idle this thread, so decode it here */
		for (pp = &pool->head; *pp != job; pp = &(*pp)->next)
			prev = *pp;
		*pp = job->next;
		if (pool->tail == job)
			pool->tail = prev;
		job->state = DC_RUNNING;
		pthread_mutex_unlock(&pool->lock);
		run(job);
		job->state = DC_DONE;
		return;
	}
	/* a worker has it: rather than idle, decode whatever else is queued (any reader's) */
	while (job->state != DC_DONE) {
		if (pool->head)
			run_taken(pool, take_head(pool));
		else
			pthread_cond_wait(&pool->done, &pool->lock);
	}
	pthread_mutex_unlock(&pool->lock);
}

uint8_t *ub_dc_buf_get(struct ub_dc_pool *pool)
{
	uint8_t *buf = NULL;

	if (pool) {
		pthread_mutex_lock(&pool->lock);
		if (pool->nidle)
			buf = pool->idle[--pool->nidle];
		pthread_mutex_unlock(&pool->lock);
	}
	return buf ? buf : malloc(UB_DC_BUF_SIZE);
}

void ub_dc_buf_put(struct ub_dc_pool *pool, uint8_t *buf)
{
	if (!buf)
		return;
	if (pool) {
		pthread_mutex_lock(&pool->lock);
		if (pool->nidle < UB_DC_IDLE_BUFS) {
			pool->idle[pool->nidle++] = buf;
			buf = NULL;
		}
		pthread_mutex_unlock(&pool->lock);
	}
	free(buf);
}

static bool same_key(const struct ub_dc_ahead *a, const struct ub_dc_ahead *b)
{
	return a->dbytenr == b->dbytenr && a->dlen == b->dlen && a->ram == b->ram && a->type == b->type &&
	       a->verify == b->verify && a->era_bytenr == b->era_bytenr && a->era_gen == b->era_gen;
}

void ub_dc_ahead_free(struct ub_dc_pool *pool, struct ub_dc_ahead *a)
{
	if (!a)
		return;
	ub_dc_wait(pool, &a->job);
	ub_dc_buf_put(pool, a->in);
	ub_dc_buf_put(pool, a->out);
	free(a);
}

void ub_dc_ahead_put(struct ub_dc_pool *pool, struct ub_dc_ahead *a)
{
	struct ub_dc_ahead *old = NULL;

	pthread_mutex_lock(&pool->lock);
	if (pool->nahead == UB_DC_AHEAD) {
		old = pool->ahead[0];
		memmove(pool->ahead, pool->ahead + 1, (UB_DC_AHEAD - 1) * sizeof(pool->ahead[0]));
		pool->nahead--;
	}
	pool->ahead[pool->nahead++] = a;
	pthread_mutex_unlock(&pool->lock);
	ub_dc_ahead_free(pool, old);
}

/* The index of the entry with `key`'s key, or -1 (the lock held). */
static int find_ahead(struct ub_dc_pool *pool, const struct ub_dc_ahead *key)
{
	for (int i = 0; i < pool->nahead; i++)
		if (same_key(pool->ahead[i], key))
			return i;
	return -1;
}

struct ub_dc_ahead *ub_dc_ahead_take(struct ub_dc_pool *pool, const struct ub_dc_ahead *key)
{
	struct ub_dc_ahead *a = NULL;
	int i;

	pthread_mutex_lock(&pool->lock);
	i = find_ahead(pool, key);
	if (i >= 0) {
		a = pool->ahead[i];
		memmove(pool->ahead + i, pool->ahead + i + 1, (size_t)(pool->nahead - i - 1) * sizeof(pool->ahead[0]));
		pool->nahead--;
	}
	pthread_mutex_unlock(&pool->lock);
	return a;
}

bool ub_dc_ahead_has(struct ub_dc_pool *pool, const struct ub_dc_ahead *key)
{
	bool has;

	pthread_mutex_lock(&pool->lock);
	has = find_ahead(pool, key) >= 0;
	pthread_mutex_unlock(&pool->lock);
	return has;
}
