/* SPDX-License-Identifier: MIT */
/*
 * restore's file data, copied on other threads while the walk goes on: the
 * walk hands each file over (during the main walk, a small one unmade: the
 * copier makes it, and its directory waits for that, struct rs_dir); a
 * copier reads its data (every sector verified, bad ones retried on every
 * copy, then taken from an older root when the extent items cannot be read),
 * writes it, and sets the file's metadata last. A large file is cut into
 * ranges so that every copier works on it at once. The walk's thread only
 * waits when the queue is full.
 *
 * Ownership: a queued file (struct rs_file) belongs to its ranges; the one
 * that finishes last gives the verdict, sets the metadata, closes and frees.
 * What copiers share is in struct restorer, under its lock.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "restore.h"

#define DATA_CHUNK (1U << 20)    /* one read and one write; a buffer of this size per copier */
#define RANGE_BYTES (32ULL << 20) /* a file of more than two of these is copied in ranges */
#define RANGES_MAX 16            /* whatever size an inode claims (a corrupt one: 2^60) */
#define QUEUE_MAX 64             /* each queued file holds a descriptor open */
#define COPIERS_MAX 4
/*
 * Idle copiers are woken once this many small files wait, not for each: a
 * wake-up per file of a few hundred bytes costs more than copying it.
 */
#define WAKE_BATCH 8

struct rs_file {
	struct ub_fs *fs; /* the root the walk read the inode from */
	int fd;           /* -1 until made, when the copier is to make it (rs_copy_make) */
	char *rel;
	/* where a copier makes it: the name is rel + name_off; dir NULL when dirfd outlives the copiers (OUTDIR) */
	struct rs_dir *dir;
	int dirfd;
	size_t name_off;
	mode_t make;
	struct ub_inode in;
	/* under r->lock, added to by each range as it finishes */
	unsigned pending;     /* ranges not finished */
	struct rs_lostv lost; /* every range's, sorted when the last finishes */
	uint64_t written_end; /* the furthest byte written */
	uint64_t bad_bytes, first_bad;
	uint64_t unverified, first_unverified; /* bytes read that no checksum covers, though the inode requires them */
	int err;              /* the error that ended a range's data first in the file, at err_off */
	uint64_t err_off;
	bool write_failed;    /* said already; no verdict */
	unsigned have;        /* RS_HAVE_*: what making it set already */
};

struct rs_job {
	struct rs_file *f;
	uint64_t start, end;
};

struct rs_pool {
	pthread_t th[COPIERS_MAX];
	uint8_t *buf[COPIERS_MAX];
	int nth;
	uint8_t *own_buf; /* no copiers: the walk's thread copies */
	/* under r->lock */
	pthread_cond_t more;  /* a job was queued, or stop */
	pthread_cond_t room;  /* a job was taken or finished */
	struct rs_job q[QUEUE_MAX];
	unsigned head, n, busy;
	bool stop;
};

struct copier {
	struct restorer *r;
	int i;
};

/* A new slot at the end of lv, or NULL (counted: the report says its ranges are incomplete). */
static struct rs_lost *lost_slot(struct rs_lostv *lv)
{
	if (lv->n == lv->cap) {
		size_t cap = lv->cap ? lv->cap * 2 : 16;
		struct rs_lost *v = realloc(lv->v, cap * sizeof(*v));

		if (!v) {
			lv->nomem = true;
			return NULL;
		}
		lv->v = v;
		lv->cap = cap;
	}
	return &lv->v[lv->n++];
}

/* ub_read_report's callback: a range the reader could not give, adjacent ones of one cause merged. */
static void note_bad(void *arg, uint64_t off, uint64_t len, const char *why)
{
	struct rs_lostv *lv = arg;
	struct rs_lost *l = lv->n ? &lv->v[lv->n - 1] : NULL;

	if (l && l->off + l->len == off && !strncmp(l->why, why, sizeof(l->why) - 1)) {
		l->len += len;
		return;
	}
	l = lost_slot(lv);
	if (!l)
		return;
	l->off = off;
	l->len = len;
	snprintf(l->why, sizeof(l->why), "%s", why);
}

/*
 * Copy the data of f's inode in [*offp, end) from `fs` (left where it
 * stopped, *wend the end of what was written). Unreadable data is zeros,
 * counted in `rep`; 0 at `end`, -ECANCELED when writing OUTDIR failed (said),
 * or the reader's error that ended the data.
 */
/* `in`: the file's inode as `fs` has it, read once for every range (no search for it per call). */
static int copy_from(struct restorer *r, struct ub_fs *fs, const struct ub_inode *in, struct rs_file *f, uint8_t *buf,
		     uint64_t end, uint64_t *offp, uint64_t *wend, struct ub_read_report *rep)
{
	uint64_t off = *offp, s, e;
	int ret = 0;

	while (off < end) {
		ret = ub_file_next_data_inode(fs, in, off, &s, &e);
		if (ret)
			break;
		if (s >= end) {
			off = end;
			break;
		}
		if (e > end)
			e = end;
		for (off = s; off < e;) {
			uint64_t want = e - off < DATA_CHUNK ? e - off : DATA_CHUNK, got = 0;

			ret = ub_file_read_inode(fs, in, off, want, buf, &got, rep);
			if (got && pwrite(f->fd, buf, got, (off_t)off) != (ssize_t)got) {
				rs_problem(r, f->rel, "write failed at offset %llu: %s", (unsigned long long)off,
					   strerror(errno));
				*offp = off;
				return -ECANCELED;
			}
			if (got) {
				pthread_mutex_lock(&r->lock);
				r->bytes += got;
				pthread_mutex_unlock(&r->lock);
				*wend = off + got;
			}
			off += got;
			if (ret == -EIO)
				ret = 0; /* zeros where no copy was good: reported by the reader, counted by the caller */
			else if (ret || !got)
				break;
		}
		if (ret || off < e)
			break;
	}
	ub_read_report_flush(fs, rep);
	*offp = off;
	return ret == 1 ? 0 : ret;
}

/*
 * The file's extent items cannot be read from *offp on in the root in use:
 * the rest of the range from an older root where the same file is whole
 * (which roots hold the same file is the library's: ub_older_roots_same_file).
 * Only for a failure to find the data, never for data that fails its
 * checksum (an older root would give older bytes there).
 */
static int data_from_older(struct restorer *r, struct rs_file *f, uint8_t *buf, uint64_t end, uint64_t *offp,
			   uint64_t *wend, int ret, struct ub_read_report *rep, struct rs_lostv *lost)
{
	const struct ub_inode *in = &f->in;
	struct ub_inode old;
	struct ub_fs *fs;
	uint64_t gen;
	int i = 0;

	while (!ub_older_roots_same_file(r->older, &i, in, f->fs, &old, &fs, &gen)) {
		uint64_t o = *offp;
		size_t nlost = lost->n;
		int ret2;

		ret2 = copy_from(r, fs, &old, f, buf, end, &o, wend, rep);
		if (ret2 == -ECANCELED)
			return ret2;
		if (ret2) {
			lost->n = nlost; /* what this root could not give is said by the next try or the caller */
			continue;
		}
		rs_problem(r, f->rel, "the file's extent items cannot be read from offset %llu on (%s): that data is from the older root of generation %llu",
			   (unsigned long long)*offp, strerror(-ret), (unsigned long long)gen);
		*offp = o;
		return 0;
	}
	return ret;
}

static int lost_cmp(const void *a, const void *b)
{
	const struct rs_lost *x = a, *y = b;

	return x->off < y->off ? -1 : x->off > y->off;
}

/* The last range is done: the verdict, the size, the metadata. */
static void file_done(struct restorer *r, struct rs_file *f)
{
	const struct ub_inode *in = &f->in;

	if (!f->write_failed) {
		struct rs_lostv *lv = &f->lost;

		if (lv->n > 1) {
			size_t k = 0;

			qsort(lv->v, lv->n, sizeof(*lv->v), lost_cmp);
			for (size_t i = 1; i < lv->n; i++) { /* ranges that met at a range boundary */
				if (lv->v[k].off + lv->v[k].len == lv->v[i].off && !strcmp(lv->v[k].why, lv->v[i].why))
					lv->v[k].len += lv->v[i].len;
				else
					lv->v[++k] = lv->v[i];
			}
			lv->n = k + 1;
		}
		rs_verdict(r, f->rel, in, lv);
		pthread_mutex_lock(&r->lock);
		r->bytes_zeroed += f->bad_bytes;
		pthread_mutex_unlock(&r->lock);
		if (f->err == -EUCLEAN)
			rs_data_problem(r, f->rel, "a corrupt file extent at offset %llu ends the file's data there",
					(unsigned long long)f->err_off);
		else if (f->err)
			rs_data_problem(r, f->rel, "reading failed at offset %llu: %s", (unsigned long long)f->err_off,
					strerror(-f->err));
		else if (f->bad_bytes)
			rs_data_problem(r, f->rel, "%llu bytes could not be read (first at offset %llu); written as zeros",
					(unsigned long long)f->bad_bytes, (unsigned long long)f->first_bad);
		if (f->unverified)
			rs_problem(r, f->rel, "%llu bytes have no data checksum although the inode requires them (first at "
				   "offset %llu): restored as read, not verified", (unsigned long long)f->unverified,
				   (unsigned long long)f->first_unverified);
		/* a file made by restore is empty: only a hole at the end needs the size set */
		if (f->written_end < in->size && ftruncate(f->fd, (off_t)in->size))
			rs_data_problem(r, f->rel, "cannot set the size: %s", strerror(errno));
	}
	rs_set_meta(r, f->fs, f->fd, false, f->rel, in, f->have);
	if (close(f->fd))
		rs_problem(r, f->rel, "close failed: %s", strerror(errno));
	free(f->lost.v);
	free(f->rel);
	free(f);
}

/* Drop a file's hold on its directory; the last one finishes it. */
static void dir_put(struct restorer *r, struct rs_dir *d)
{
	bool last;

	if (!d)
		return;
	pthread_mutex_lock(&r->lock);
	last = --d->refs == 0;
	pthread_mutex_unlock(&r->lock);
	if (last)
		rs_dir_finish(r, d);
}

/*
 * Make a file the walk handed over unmade, as the walk would have
 * (make_file in restore_out.c): false when it could not be (said, f freed).
 */
static bool make_now(struct restorer *r, struct rs_file *f)
{
	const char *name = f->rel + f->name_off;
	int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
	int fd = openat(f->dirfd, name, flags, f->make), err = fd < 0 ? errno : 0;

	/* a name taken already is said by rs_make_room, and replaced only with --overwrite */
	if (err == EEXIST && rs_make_room(r, f->dirfd, name, f->rel) == 0) {
		fd = openat(f->dirfd, name, flags, f->make);
		err = fd < 0 ? errno : 0;
	}
	dir_put(r, f->dir);
	if (fd < 0) {
		if (err != EEXIST)
			rs_problem(r, f->rel, "cannot make the file: %s", strerror(err));
		free(f->rel);
		free(f);
		return false;
	}
	__atomic_add_fetch(&r->nfiles, 1, __ATOMIC_RELAXED);
	f->fd = fd;
	return true;
}

static void copy_range(struct restorer *r, const struct rs_job *j, uint8_t *buf)
{
	struct rs_file *f = j->f;
	struct rs_lostv lost = { 0 };
	struct ub_read_report rep = { .bad_range = note_bad, .bad_arg = &lost };
	uint64_t off = j->start, wend = 0;
	bool last;
	int ret;

	if (f->fd < 0 && !make_now(r, f))
		return;
	ret = copy_from(r, f->fs, &f->in, f, buf, j->end, &off, &wend, &rep);
	if (ret && ret != -ECANCELED && ret != -ENOMEM && off < j->end)
		ret = data_from_older(r, f, buf, j->end, &off, &wend, ret, &rep, &lost);
	if (ret && ret != -ECANCELED && off < j->end)
		note_bad(&lost, off, j->end - off,
			 ret == -EUCLEAN ? "a corrupt file extent item ends the file's data" : strerror(-ret));

	pthread_mutex_lock(&r->lock);
	for (size_t i = 0; i < lost.n; i++) {
		struct rs_lost *l = lost_slot(&f->lost);

		if (!l)
			break;
		*l = lost.v[i];
	}
	f->lost.nomem |= lost.nomem;
	if (rep.bad_bytes && (!f->bad_bytes || rep.first_bad_offset < f->first_bad))
		f->first_bad = rep.first_bad_offset;
	f->bad_bytes += rep.bad_bytes;
	if (rep.unverified_bytes && (!f->unverified || rep.first_unverified_offset < f->first_unverified))
		f->first_unverified = rep.first_unverified_offset;
	f->unverified += rep.unverified_bytes;
	if (ret == -ECANCELED)
		f->write_failed = true;
	else if (ret && (!f->err || off < f->err_off)) {
		f->err = ret;
		f->err_off = off;
	}
	if (wend > f->written_end)
		f->written_end = wend;
	last = --f->pending == 0;
	pthread_mutex_unlock(&r->lock);
	free(lost.v);
	if (last)
		file_done(r, f);
}

static void *copier_main(void *arg)
{
	struct copier *c = arg;
	struct restorer *r = c->r;
	struct rs_pool *p = r->pool;
	uint8_t *buf = p->buf[c->i];

	free(c);
	pthread_mutex_lock(&r->lock);
	for (;;) {
		struct rs_job j;

		while (!p->n && !p->stop)
			pthread_cond_wait(&p->more, &r->lock);
		if (!p->n)
			break;
		j = p->q[p->head];
		p->head = (p->head + 1) % QUEUE_MAX;
		p->n--;
		p->busy++;
		/* a walk waiting for room is let go once half the queue is free, to fill it in one go */
		if (p->n == QUEUE_MAX / 2)
			pthread_cond_broadcast(&p->room);
		pthread_mutex_unlock(&r->lock);
		copy_range(r, &j, buf);
		pthread_mutex_lock(&r->lock);
		p->busy--;
		if (!p->n && !p->busy)
			pthread_cond_broadcast(&p->room);
	}
	pthread_mutex_unlock(&r->lock);
	/* this thread's decompression state (lib/fs/compress.c) goes with it */
	return NULL;
}

/* Wait on `room` (under r->lock) for at most the progress line's interval, and update it. */
static void wait_room(struct restorer *r)
{
	struct timespec until;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_nsec += 250000000L;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	pthread_cond_timedwait(&r->pool->room, &r->lock, &until);
	pthread_mutex_unlock(&r->lock);
	rs_progress(r, false);
	pthread_mutex_lock(&r->lock);
}

int rs_copy_start(struct restorer *r)
{
	struct rs_pool *p = calloc(1, sizeof(*p));
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	int want = cpus < 2 ? 0 : cpus > COPIERS_MAX ? COPIERS_MAX : (int)cpus;

	if (!p)
		return -ENOMEM;
	r->pool = p;
	pthread_cond_init(&p->more, NULL);
	pthread_cond_init(&p->room, NULL);
	for (int i = 0; i < want; i++) {
		struct copier *c = malloc(sizeof(*c));

		p->buf[i] = malloc(DATA_CHUNK);
		if (!c || !p->buf[i]) {
			free(c);
			free(p->buf[i]);
			p->buf[i] = NULL;
			break;
		}
		c->r = r;
		c->i = i;
		if (pthread_create(&p->th[i], NULL, copier_main, c)) {
			free(c);
			free(p->buf[i]);
			p->buf[i] = NULL;
			break;
		}
		p->nth++;
	}
	if (!p->nth && !(p->own_buf = malloc(DATA_CHUNK)))
		return -ENOMEM;
	return 0;
}

/* Queue the copies of f (made, or to be made by the first and only range). */
static void queue_file(struct restorer *r, struct rs_file *f)
{
	struct rs_pool *p = r->pool;
	uint64_t nranges = 1, step = f->in.size;

	if (p->nth > 1 && f->in.size > 2 * RANGE_BYTES) {
		nranges = (f->in.size + RANGE_BYTES - 1) / RANGE_BYTES;
		if (nranges > RANGES_MAX)
			nranges = RANGES_MAX;
		/* whole MiBs, so that ranges meet at sector and compressed-extent-friendly boundaries */
		step = ((f->in.size / nranges + (1U << 20) - 1) >> 20) << 20;
		nranges = (f->in.size + step - 1) / step;
	}
	f->pending = (unsigned)nranges;
	for (uint64_t i = 0; i < nranges; i++) {
		struct rs_job j = { f, i * step, i + 1 == nranges ? f->in.size : (i + 1) * step };

		if (!p->nth) {
			copy_range(r, &j, p->own_buf); /* frees f after the last range */
			continue;
		}
		pthread_mutex_lock(&r->lock);
		/* a file still to be made holds its directory open: taken under the queue's lock, not a second time */
		if (!i && f->dir)
			f->dir->refs++;
		while (p->n == QUEUE_MAX)
			wait_room(r);
		p->q[(p->head + p->n) % QUEUE_MAX] = j;
		p->n++;
		if (p->n >= WAKE_BATCH || j.end - j.start >= DATA_CHUNK)
			pthread_cond_signal(&p->more);
		pthread_mutex_unlock(&r->lock);
	}
}

static struct rs_file *new_file(struct restorer *r, const char *rel, const struct ub_inode *in, unsigned have)
{
	struct rs_file *f = calloc(1, sizeof(*f));

	if (!f || !(f->rel = strdup(rel))) {
		free(f);
		return NULL;
	}
	f->fs = r->fs;
	f->fd = -1;
	f->in = *in;
	f->have = have;
	return f;
}

void rs_copy_file(struct restorer *r, int fd, const char *rel, const struct ub_inode *in, unsigned have)
{
	struct rs_file *f = new_file(r, rel, in, have);

	if (!f) {
		close(fd);
		rs_problem(r, rel, "out of memory");
		r->rc = EXIT_FATAL;
		return;
	}
	f->fd = fd;
	queue_file(r, f);
}

bool rs_copy_make(struct restorer *r, struct frame *dir, const char *rel, size_t name_off, const struct ub_inode *in,
		  mode_t make, unsigned have)
{
	struct rs_file *f;

	/*
	 * One range only: a file copied in ranges is made before any of them
	 * starts. An inode of several names is made at once: its later names
	 * are links to it.
	 */
	if (!r->defer_open || !r->pool->nth || in->size > 2 * RANGE_BYTES || in->nlink > 1)
		return false;
	if (dir->parent && !dir->shared) {
		dir->shared = calloc(1, sizeof(*dir->shared));
		if (!dir->shared)
			return false;
		dir->shared->fd = dir->fd;
		dir->shared->refs = 1;
	}
	f = new_file(r, rel, in, have);
	if (!f)
		return false;
	f->dir = dir->shared;
	f->dirfd = dir->fd;
	f->name_off = name_off;
	f->make = make;
	queue_file(r, f); /* takes the hold on f->dir */
	return true;
}

void rs_dir_leave(struct restorer *r, struct frame *f, bool set_meta)
{
	struct rs_dir *d = f->shared;
	char *rel = strdup(f->rel);
	bool last;

	pthread_mutex_lock(&r->lock);
	d->set_meta = set_meta && rel;
	d->fs = r->fs;
	d->rel = rel;
	d->in = f->in;
	last = --d->refs == 0;
	pthread_mutex_unlock(&r->lock);
	if (last)
		rs_dir_finish(r, d);
}

void rs_copy_drain(struct restorer *r)
{
	struct rs_pool *p = r->pool;

	if (!p || !p->nth)
		return;
	pthread_mutex_lock(&r->lock);
	/* the last few small files may not have woken anyone yet */
	pthread_cond_broadcast(&p->more);
	while (p->n || p->busy)
		wait_room(r);
	pthread_mutex_unlock(&r->lock);
}

void rs_copy_finish(struct restorer *r)
{
	struct rs_pool *p = r->pool;

	if (!p)
		return;
	rs_copy_drain(r);
	pthread_mutex_lock(&r->lock);
	p->stop = true;
	pthread_cond_broadcast(&p->more);
	pthread_mutex_unlock(&r->lock);
	for (int i = 0; i < p->nth; i++) {
		pthread_join(p->th[i], NULL);
		free(p->buf[i]);
	}
	pthread_cond_destroy(&p->more);
	pthread_cond_destroy(&p->room);
	free(p->own_buf);
	free(p);
	r->pool = NULL;
}
