// SPDX-License-Identifier: MIT
/*
 * The readers of mkfs --rootdir (rootdir_pipe.h): a queue of file pieces in
 * the writer's order, N threads that each take the oldest waiting piece,
 * read it (SEEK_DATA / SEEK_HOLE inside when asked), cut it into the extents
 * ub_fsw_write_ex would make (1 MiB plain, 128 KiB compressed, counted from
 * the start of each data range) and compress and checksum them.
 *
 * Locking: one mutex over the queue, the held-bytes count and every piece's
 * state; a piece's buffers belong to the worker that took it until it is
 * DONE, then to the writer until released. Workers start pieces in queue
 * order only, so every held piece is at or before the writer's next one.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mkfs/rootdir_pipe.h"
#include "ubtrfs/format.h"

enum { QUEUED, RUNNING, DONE };

struct rd_piece {
	struct rd_piece *next; /* queue order */
	int dfd;
	char *name;
	uint64_t off, len, cost;
	bool holes;
	int state, err;
	uint8_t *block; /* buf, cbuf and sums, cut from one allocation of block_size */
	size_t block_size;
	uint8_t *buf, *cbuf, *sums;
	struct rd_seg *segs;
	size_t nsegs, segs_cap;
	struct ub_fsw_extent *x;
	size_t nx, x_cap;
};

struct rd_pipe {
	pthread_mutex_t mu;
	/* few wake-ups (each one costs more than reading a small file): workers sleep on work_cv until
	 * rd_pipe_kick or a release frees budget they wait for; the writer on done_cv for one piece */
	pthread_cond_t work_cv, done_cv;
	struct rd_piece *awaited;
	int idle;
	bool budget_wait;
	pthread_t *th;
	int nth;
	bool stop;
	struct rd_piece *head, *tail, *next_start; /* head: oldest unreleased; next_start: oldest QUEUED */
	uint64_t held, budget;
	uint32_t ss;
	int csum_type, compress, level;
	unsigned csize;
	/* blocks of released pieces by size class (2^i bytes), for the next pieces: fresh memory costs a page
	 * fault per page, more than reading the data */
	void *pool[64];
	uint64_t pooled;
};

/* blocks below this come from malloc's heap, which reuses them by itself */
#define POOL_MIN 4096U

static unsigned size_class(size_t size)
{
	unsigned c = 0;

	while (((size_t)1 << c) < size)
		c++;
	return c;
}

static uint8_t *get_block(struct rd_pipe *p, size_t *size)
{
	unsigned c;
	void *b;

	if (*size < POOL_MIN)
		return malloc(*size);
	c = size_class(*size);
	*size = (size_t)1 << c;
	pthread_mutex_lock(&p->mu);
	b = p->pool[c];
	if (b) {
		p->pool[c] = *(void **)b;
		p->pooled -= *size;
	}
	pthread_mutex_unlock(&p->mu);
	return b ? b : malloc(*size);
}

/* under p->mu */
static void put_block(struct rd_pipe *p, uint8_t *b, size_t size)
{
	unsigned c;

	/* pooled and held together within the budget: the pool only saves page faults */
	if (!b || size < POOL_MIN || p->pooled + p->held + size > p->budget) {
		free(b);
		return;
	}
	c = size_class(size);
	*(void **)b = p->pool[c];
	p->pool[c] = b;
	p->pooled += size;
}

int rd_data_ranges(int fd, uint64_t pos, uint64_t size, int (*cb)(void *arg, uint64_t start, uint64_t end),
		   void *arg)
{
	const uint64_t ss = 4096;
	int ret;

	while (pos < size) {
		off_t d = lseek(fd, (off_t)pos, SEEK_DATA), h;
		uint64_t dstart, dend;

		if (d < 0) {
			if (errno == ENXIO)
				return 0; /* only a hole is left */
			if (errno != EINVAL)
				return -errno;
			d = (off_t)pos; /* no SEEK_DATA: all data */
			h = (off_t)size;
		} else {
			h = lseek(fd, d, SEEK_HOLE);
			if (h < 0)
				h = (off_t)size;
		}
		dstart = (uint64_t)d / ss * ss;
		if (dstart < pos)
			dstart = pos;
		dend = ((uint64_t)h + ss - 1) / ss * ss;
		if (dend > size)
			dend = size;
		if (dend <= dstart) {
			pos = (uint64_t)h > pos ? (uint64_t)h : pos + ss;
			continue;
		}
		ret = cb(arg, dstart, dend);
		if (ret)
			return ret;
		pos = dend;
	}
	return 0;
}

static uint64_t round_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

int rd_grow(void *arr, size_t *cap, size_t n, size_t elem)
{
	void *a, *m;
	size_t c;

	if (n < *cap)
		return 0;
	c = *cap ? *cap * 2 : 8;
	/* the caller's pointer is of its own type: read and written as bytes */
	memcpy(&a, arr, sizeof(a));
	m = realloc(a, c * elem);
	if (!m)
		return -ENOMEM;
	memcpy(arr, &m, sizeof(m));
	*cap = c;
	return 0;
}

static int add_x(struct rd_piece *pc, const struct ub_fsw_extent *x)
{
	int ret = rd_grow(&pc->x, &pc->x_cap, pc->nx, sizeof(*pc->x));

	if (!ret)
		pc->x[pc->nx++] = *x;
	return ret;
}

struct read_ctx {
	struct rd_pipe *p;
	struct rd_piece *pc;
	int fd;
};

/* one data range [start, end) of the piece: read, cut, compress, checksum */
static int read_range(void *arg, uint64_t start, uint64_t end)
{
	struct read_ctx *c = arg;
	struct rd_pipe *p = c->p;
	struct rd_piece *pc = c->pc;
	uint64_t at = start - pc->off, got = 0, want = end - start, step, xlen;
	uint8_t *b = pc->buf + at;
	struct rd_seg *s;
	int ret;

	while (got < want) {
		ssize_t n = pread(c->fd, b + got, want - got, (off_t)(start + got));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			break; /* shrunk while copying: what was read stays */
		got += (uint64_t)n;
	}
	if (!got)
		return 1;
	xlen = round_up(got, p->ss);
	memset(b + got, 0, xlen - got);
	ret = rd_grow(&pc->segs, &pc->segs_cap, pc->nsegs, sizeof(*pc->segs));
	if (ret)
		return ret;
	s = &pc->segs[pc->nsegs++];
	*s = (struct rd_seg){ .off = start, .len = got, .raw = b, .nx = pc->nx };
	/* a file within one sector may go inline: the writer takes the bytes */
	if (start + got >= p->ss) {
		step = p->compress ? UB_FSW_COMPRESSED_MAX : UB_FSW_EXTENT_MAX;
		for (uint64_t o = 0; o < xlen; o += step) {
			uint64_t n = xlen - o < step ? xlen - o : step;
			struct ub_fsw_extent x;

			ret = ub_fsw_compress_extent(p->compress, p->level, p->ss, p->csum_type, b + o, n,
						     pc->cbuf + at + o, pc->sums + (at + o) / p->ss * p->csize, &x);
			if (!ret)
				ret = add_x(pc, &x);
			if (ret)
				return ret;
		}
	}
	s->nx = pc->nx - s->nx;
	return got < want ? 1 : 0;
}

static int run_piece(struct rd_pipe *p, struct rd_piece *pc)
{
	struct read_ctx c = { p, pc, -1 };
	uint64_t alen = round_up(pc->len, p->ss);
	int ret;

	pc->block_size = alen * (p->compress ? 2 : 1) + alen / p->ss * p->csize + 1;
	pc->block = get_block(p, &pc->block_size);
	if (!pc->block)
		return -ENOMEM;
	pc->buf = pc->block;
	pc->cbuf = p->compress ? pc->buf + alen : NULL;
	pc->sums = pc->buf + alen * (p->compress ? 2 : 1);
	c.fd = openat(pc->dfd, pc->name, O_RDONLY | O_NOFOLLOW | O_NOATIME | O_CLOEXEC);
	if (c.fd < 0 && errno == EPERM)
		c.fd = openat(pc->dfd, pc->name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (c.fd < 0)
		return -errno;
	if (pc->holes)
		ret = rd_data_ranges(c.fd, pc->off, pc->off + pc->len, read_range, &c);
	else
		ret = read_range(&c, pc->off, pc->off + pc->len);
	close(c.fd);
	if (ret < 0)
		return ret;
	/* extents moved while growing: segments point into the final array */
	for (size_t i = 0, k = 0; i < pc->nsegs; k += pc->segs[i].nx, i++)
		pc->segs[i].x = pc->segs[i].nx ? pc->x + k : NULL;
	return 0;
}

static void *worker(void *arg)
{
	struct rd_pipe *p = arg;

	pthread_mutex_lock(&p->mu);
	for (;;) {
		struct rd_piece *pc = p->next_start;

		if (p->stop)
			break;
		if (!pc || (p->held && p->held + pc->cost > p->budget)) {
			p->budget_wait |= pc != NULL;
			p->idle++;
			pthread_cond_wait(&p->work_cv, &p->mu);
			p->idle--;
			continue;
		}
		p->next_start = pc->next;
		pc->state = RUNNING;
		p->held += pc->cost;
		pthread_mutex_unlock(&p->mu);
		pc->err = run_piece(p, pc);
		pthread_mutex_lock(&p->mu);
		pc->state = DONE;
		if (p->awaited == pc)
			pthread_cond_signal(&p->done_cv);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

static void free_piece(struct rd_piece *pc)
{
	free(pc->name);
	free(pc->block);
	free(pc->segs);
	free(pc->x);
	free(pc);
}

int rd_pipe_start(int threads, uint64_t budget, uint32_t sectorsize, int csum_type, int compress, int level,
		  struct rd_pipe **out)
{
	struct rd_pipe *p;

	if (threads <= 0 || !sectorsize)
		return -EINVAL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->th = calloc((size_t)threads, sizeof(*p->th));
	if (!p->th) {
		free(p);
		return -ENOMEM;
	}
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->work_cv, NULL);
	pthread_cond_init(&p->done_cv, NULL);
	p->budget = budget;
	p->ss = sectorsize;
	p->csum_type = csum_type;
	p->csize = ub_csum_size((unsigned)csum_type);
	p->compress = compress;
	p->level = level;
	for (; p->nth < threads; p->nth++)
		if (pthread_create(&p->th[p->nth], NULL, worker, p))
			break;
	if (!p->nth) {
		rd_pipe_stop(p);
		return -EAGAIN;
	}
	*out = p;
	return 0;
}

void rd_pipe_stop(struct rd_pipe *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->stop = true;
	pthread_cond_broadcast(&p->work_cv);
	pthread_mutex_unlock(&p->mu);
	for (int i = 0; i < p->nth; i++)
		pthread_join(p->th[i], NULL);
	while (p->head) {
		struct rd_piece *n = p->head->next;

		free_piece(p->head);
		p->head = n;
	}
	for (int c = 0; c < 64; c++)
		while (p->pool[c]) {
			void *b = p->pool[c];

			p->pool[c] = *(void **)b;
			free(b);
		}
	pthread_cond_destroy(&p->work_cv);
	pthread_cond_destroy(&p->done_cv);
	pthread_mutex_destroy(&p->mu);
	free(p->th);
	free(p);
}

int rd_pipe_submit(struct rd_pipe *p, int dfd, const char *name, uint64_t off, uint64_t len, bool holes,
		   struct rd_piece **out)
{
	struct rd_piece *pc = calloc(1, sizeof(*pc));
	uint64_t alen = round_up(len, p->ss);

	if (!pc || !(pc->name = strdup(name))) {
		free(pc);
		return -ENOMEM;
	}
	pc->dfd = dfd;
	pc->off = off;
	pc->len = len;
	pc->holes = holes;
	pc->cost = alen * (p->compress ? 2 : 1) + alen / p->ss * p->csize;
	pthread_mutex_lock(&p->mu);
	if (p->tail)
		p->tail->next = pc;
	else
		p->head = pc;
	p->tail = pc;
	if (!p->next_start)
		p->next_start = pc;
	pthread_mutex_unlock(&p->mu);
	*out = pc;
	return 0;
}

void rd_pipe_kick(struct rd_pipe *p)
{
	pthread_mutex_lock(&p->mu);
	if (p->idle && p->next_start)
		pthread_cond_broadcast(&p->work_cv);
	pthread_mutex_unlock(&p->mu);
}

/* under p->mu */
static void await(struct rd_pipe *p, struct rd_piece *pc)
{
	while (pc->state != DONE) {
		/* a piece not started yet may wait for a worker that sleeps */
		if (pc->state == QUEUED && p->idle)
			pthread_cond_broadcast(&p->work_cv);
		p->awaited = pc;
		pthread_cond_wait(&p->done_cv, &p->mu);
	}
	p->awaited = NULL;
}

int rd_pipe_wait(struct rd_pipe *p, struct rd_piece *pc, const struct rd_seg **segs, size_t *nsegs)
{
	pthread_mutex_lock(&p->mu);
	await(p, pc);
	pthread_mutex_unlock(&p->mu);
	*segs = pc->segs;
	*nsegs = pc->nsegs;
	return pc->err;
}

void rd_pipe_release(struct rd_pipe *p, struct rd_piece *pc)
{
	struct rd_piece **pp;

	pthread_mutex_lock(&p->mu);
	await(p, pc);
	for (pp = &p->head; *pp && *pp != pc; pp = &(*pp)->next)
		;
	if (*pp) {
		*pp = pc->next;
		if (p->tail == pc) {
			p->tail = NULL;
			for (struct rd_piece *q = p->head; q; q = q->next)
				p->tail = q;
		}
	}
	p->held -= pc->cost;
	put_block(p, pc->block, pc->block_size);
	pc->block = NULL;
	if (p->budget_wait) {
		p->budget_wait = false;
		pthread_cond_broadcast(&p->work_cv);
	}
	pthread_mutex_unlock(&p->mu);
	free_piece(pc);
}
