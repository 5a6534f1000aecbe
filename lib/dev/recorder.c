/* SPDX-License-Identifier: MIT */
/*
 * The recorder backend: every write and flush of the devices sharing a log,
 * in the order they happened, and the images a crash at any point of that
 * order could have left behind (see dev.h for the crash model).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "ubtrfs/dev.h"
#include "dev/dev_priv.h"

struct rec {
	enum ub_rec_kind kind;
	int dev;
	uint64_t off, len;
	uint8_t *data;
};

struct ub_rec_log {
	pthread_mutex_t lock;
	int refs;
	struct rec *e;
	uint64_t n, cap;
};

int ub_rec_log_new(struct ub_rec_log **out)
{
	struct ub_rec_log *log = calloc(1, sizeof(*log));

	if (!log)
		return -ENOMEM;
	pthread_mutex_init(&log->lock, NULL);
	log->refs = 1;
	*out = log;
	return 0;
}

static void log_clear_locked(struct ub_rec_log *log)
{
	for (uint64_t i = 0; i < log->n; i++)
		free(log->e[i].data);
	free(log->e);
	log->e = NULL;
	log->n = log->cap = 0;
}

void ub_rec_log_put(struct ub_rec_log *log)
{
	bool last;

	if (!log)
		return;
	pthread_mutex_lock(&log->lock);
	last = --log->refs == 0;
	pthread_mutex_unlock(&log->lock);
	if (!last)
		return;
	log_clear_locked(log);
	pthread_mutex_destroy(&log->lock);
	free(log);
}

void ub_rec_log_clear(struct ub_rec_log *log)
{
	pthread_mutex_lock(&log->lock);
	log_clear_locked(log);
	pthread_mutex_unlock(&log->lock);
}

uint64_t ub_rec_log_count(struct ub_rec_log *log)
{
	uint64_t n;

	pthread_mutex_lock(&log->lock);
	n = log->n;
	pthread_mutex_unlock(&log->lock);
	return n;
}

int ub_rec_log_entry(struct ub_rec_log *log, uint64_t i, struct ub_rec_entry *e)
{
	int ret = 0;

	pthread_mutex_lock(&log->lock);
	if (i >= log->n) {
		ret = -ERANGE;
	} else {
		e->kind = log->e[i].kind;
		e->dev = log->e[i].dev;
		e->off = log->e[i].off;
		e->len = log->e[i].len;
		e->data = log->e[i].data;
	}
	pthread_mutex_unlock(&log->lock);
	return ret;
}

/* `data` (may be NULL for a flush) is owned by the log from here, also on failure. */
static int log_append(struct ub_rec_log *log, enum ub_rec_kind kind, int dev, uint64_t off, uint64_t len,
		      uint8_t *data)
{
	int ret = 0;

	pthread_mutex_lock(&log->lock);
	if (log->n == log->cap) {
		uint64_t cap = log->cap ? log->cap * 2 : 256;
		struct rec *e = realloc(log->e, (size_t)cap * sizeof(*e));
		if (!e) {
			ret = -ENOMEM;
			goto out;
		}
		log->e = e;
		log->cap = cap;
	}
	log->e[log->n++] = (struct rec){ kind, dev, off, len, data };
	data = NULL;
out:
	pthread_mutex_unlock(&log->lock);
	free(data);
	return ret;
}

/*
 * Which of the first k entries are durable: a write is, when its device
 * flushes later (still before k). One backward pass: a flush of d makes every
 * earlier write of d durable.
 */
static bool *durable_map(struct ub_rec_log *log, uint64_t k)
{
	bool *dur = calloc(k ? (size_t)k : 1, sizeof(*dur));
	uint64_t flushed_words = 1;
	uint64_t *flushed;

	if (!dur)
		return NULL;
	for (uint64_t i = 0; i < k; i++)
		if ((uint64_t)log->e[i].dev / 64 + 1 > flushed_words)
			flushed_words = (uint64_t)log->e[i].dev / 64 + 1;
	flushed = calloc((size_t)flushed_words, sizeof(*flushed));
	if (!flushed) {
		free(dur);
		return NULL;
	}
	for (uint64_t i = k; i-- > 0;) {
		const struct rec *r = &log->e[i];
		uint64_t w = (uint64_t)r->dev / 64, bit = 1ULL << (r->dev % 64);
		if (r->kind == UB_REC_FLUSH)
			flushed[w] |= bit;
		else
			dur[i] = (flushed[w] & bit) != 0;
	}
	free(flushed);
	return dur;
}

int ub_rec_log_pending(struct ub_rec_log *log, uint64_t k, uint64_t **idx, size_t *n)
{
	uint64_t *out = NULL;
	size_t cnt = 0;
	bool *dur;
	int ret = 0;

	*idx = NULL;
	*n = 0;
	pthread_mutex_lock(&log->lock);
	if (k > log->n) {
		ret = -ERANGE;
		goto out;
	}
	dur = durable_map(log, k);
	if (!dur) {
		ret = -ENOMEM;
		goto out;
	}
	for (uint64_t i = 0; i < k; i++)
		cnt += log->e[i].kind == UB_REC_WRITE && !dur[i];
	if (cnt) {
		out = malloc(cnt * sizeof(*out));
		if (!out) {
			free(dur);
			ret = -ENOMEM;
			goto out;
		}
		cnt = 0;
		for (uint64_t i = 0; i < k; i++)
			if (log->e[i].kind == UB_REC_WRITE && !dur[i])
				out[cnt++] = i;
	}
	free(dur);
	*idx = out;
	*n = cnt;
out:
	pthread_mutex_unlock(&log->lock);
	return ret;
}

static int apply_one(const struct rec *r, struct ub_dev *const *targets, int ntargets)
{
	if (r->kind != UB_REC_WRITE || r->dev >= ntargets || !targets[r->dev])
		return 0;
	return ub_dev_write(targets[r->dev], r->data, r->len, r->off);
}

/*
 * The durable writes before k in log order; then `landed` (NULL: every
 * pending write in log order).
 */
static int apply(struct ub_rec_log *log, uint64_t k, const uint64_t *landed, size_t nlanded, bool all,
		 struct ub_dev *const *targets, int ntargets)
{
	bool *dur = NULL, *used = NULL;
	int ret = 0;

	pthread_mutex_lock(&log->lock);
	if (k > log->n) {
		ret = -ERANGE;
		goto out;
	}
	if (all) {
		for (uint64_t i = 0; i < k && !ret; i++)
			ret = apply_one(&log->e[i], targets, ntargets);
		goto out;
	}
	dur = durable_map(log, k);
	used = calloc(k ? (size_t)k : 1, sizeof(*used));
	if (!dur || !used) {
		ret = -ENOMEM;
		goto out;
	}
	/* check the list before writing anything */
	for (size_t j = 0; j < nlanded; j++) {
		uint64_t i = landed[j];
		if (i >= k || log->e[i].kind != UB_REC_WRITE || dur[i] || used[i]) {
			ret = -EINVAL;
			goto out;
		}
		used[i] = true;
	}
	for (uint64_t i = 0; i < k && !ret; i++)
		if (dur[i])
			ret = apply_one(&log->e[i], targets, ntargets);
	for (size_t j = 0; j < nlanded && !ret; j++)
		ret = apply_one(&log->e[landed[j]], targets, ntargets);
out:
	pthread_mutex_unlock(&log->lock);
	free(dur);
	free(used);
	return ret;
}

int ub_rec_log_apply(struct ub_rec_log *log, uint64_t k, struct ub_dev *const *targets, int ntargets)
{
	return apply(log, k, NULL, 0, true, targets, ntargets);
}

int ub_rec_log_apply_subset(struct ub_rec_log *log, uint64_t k, const uint64_t *landed, size_t nlanded,
			    struct ub_dev *const *targets, int ntargets)
{
	return apply(log, k, landed, nlanded, false, targets, ntargets);
}

static uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
	return z ^ (z >> 31);
}

int ub_rec_log_apply_variant(struct ub_rec_log *log, uint64_t k, uint64_t seed, struct ub_dev *const *targets,
			     int ntargets)
{
	uint64_t *idx, state = seed;
	size_t n, kept = 0;
	int ret = ub_rec_log_pending(log, k, &idx, &n);

	if (ret)
		return ret;
	if (seed != 0) {
		for (size_t i = 0; i < n; i++)
			if (splitmix(&state) & 1)
				idx[kept++] = idx[i];
		for (size_t i = kept; i > 1; i--) {
			size_t j = (size_t)(splitmix(&state) % i);
			uint64_t t = idx[i - 1];
			idx[i - 1] = idx[j];
			idx[j] = t;
		}
	}
	ret = ub_rec_log_apply_subset(log, k, idx, kept, targets, ntargets);
	free(idx);
	return ret;
}

/* ---- the device ---- */

struct recorder {
	struct ub_dev *inner;
	struct ub_rec_log *log;
	int index;
};

static int rec_read(struct ub_dev *dev, void *buf, size_t len, uint64_t off)
{
	struct recorder *r = dev->priv;

	return ub_dev_read(r->inner, buf, len, off);
}

static int rec_write(struct ub_dev *dev, const void *buf, size_t len, uint64_t off)
{
	struct recorder *r = dev->priv;
	uint8_t *copy = malloc(len);
	int ret;

	if (!copy)
		return -ENOMEM;
	memcpy(copy, buf, len);
	ret = ub_dev_write(r->inner, buf, len, off);
	if (ret) {
		free(copy);
		return ret;
	}
	return log_append(r->log, UB_REC_WRITE, r->index, off, len, copy);
}

static int rec_flush(struct ub_dev *dev)
{
	struct recorder *r = dev->priv;
	int ret = ub_dev_flush(r->inner);

	return ret ? ret : log_append(r->log, UB_REC_FLUSH, r->index, 0, 0, NULL);
}

static void rec_release(struct ub_dev *dev)
{
	struct recorder *r = dev->priv;

	if (!r)
		return;
	ub_dev_close(r->inner);
	ub_rec_log_put(r->log);
	free(r);
}

static const struct ub_dev_ops recorder_ops = {
	.kind = "recorder",
	.read = rec_read,
	.write = rec_write,
	.flush = rec_flush,
	.release = rec_release,
};

int ub_dev_open_recorder(struct ub_dev *inner, struct ub_rec_log *log, int index, struct ub_dev **out)
{
	struct recorder *r;

	if (!inner)
		return -EINVAL;
	if (!log || index < 0) {
		ub_dev_close(inner);
		return -EINVAL;
	}
	r = calloc(1, sizeof(*r));
	if (!r) {
		ub_dev_close(inner);
		return -ENOMEM;
	}
	r->inner = inner;
	r->log = log;
	r->index = index;
	pthread_mutex_lock(&log->lock);
	log->refs++;
	pthread_mutex_unlock(&log->lock);
	return ub_dev_create(inner->path, &recorder_ops, r, inner->size, inner->writable, out);
}
