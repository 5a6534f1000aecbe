/* SPDX-License-Identifier: MIT */
/* The faulty backend: an I/O error at the Nth operation, counted across every device of one plan. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include "ubtrfs/dev.h"
#include "dev/dev_priv.h"

struct ub_fault_plan {
	pthread_mutex_t lock;
	int refs;
	unsigned mask;
	uint64_t nth;        /* 0: never */
	bool from_then_on;
	uint64_t seen;       /* operations of the armed kinds since arming */
	uint64_t count[3];   /* per kind (read, write, flush) since arming */
	uint64_t injected;
};

int ub_fault_plan_new(struct ub_fault_plan **out)
{
	struct ub_fault_plan *p = calloc(1, sizeof(*p));

	if (!p)
		return -ENOMEM;
	pthread_mutex_init(&p->lock, NULL);
	p->refs = 1;
	*out = p;
	return 0;
}

void ub_fault_plan_put(struct ub_fault_plan *p)
{
	bool last;

	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	last = --p->refs == 0;
	pthread_mutex_unlock(&p->lock);
	if (!last)
		return;
	pthread_mutex_destroy(&p->lock);
	free(p);
}

void ub_fault_plan_arm(struct ub_fault_plan *p, unsigned mask, uint64_t nth, bool from_then_on)
{
	pthread_mutex_lock(&p->lock);
	p->mask = mask & UB_FAULT_ANY;
	p->nth = nth;
	p->from_then_on = from_then_on;
	p->seen = p->injected = 0;
	p->count[0] = p->count[1] = p->count[2] = 0;
	pthread_mutex_unlock(&p->lock);
}

uint64_t ub_fault_plan_count(struct ub_fault_plan *p, unsigned mask)
{
	uint64_t n = 0;

	pthread_mutex_lock(&p->lock);
	for (int k = 0; k < 3; k++)
		if (mask & (1u << k))
			n += p->count[k];
	pthread_mutex_unlock(&p->lock);
	return n;
}

uint64_t ub_fault_plan_injected(struct ub_fault_plan *p)
{
	uint64_t n;

	pthread_mutex_lock(&p->lock);
	n = p->injected;
	pthread_mutex_unlock(&p->lock);
	return n;
}

/* Count one operation of `kind` (a UB_FAULT_* bit); true if it is to fail. */
static bool fault_hit(struct ub_fault_plan *p, unsigned kind)
{
	bool fail = false;

	pthread_mutex_lock(&p->lock);
	p->count[kind == UB_FAULT_READ ? 0 : kind == UB_FAULT_WRITE ? 1 : 2]++;
	if (p->mask & kind) {
		p->seen++;
		fail = p->nth && (p->seen == p->nth || (p->from_then_on && p->seen > p->nth));
		p->injected += fail;
	}
	pthread_mutex_unlock(&p->lock);
	return fail;
}

struct faulty {
	struct ub_dev *inner;
	struct ub_fault_plan *plan;
};

static int f_read(struct ub_dev *dev, void *buf, size_t len, uint64_t off)
{
	struct faulty *f = dev->priv;

	return fault_hit(f->plan, UB_FAULT_READ) ? -EIO : ub_dev_read(f->inner, buf, len, off);
}

static int f_write(struct ub_dev *dev, const void *buf, size_t len, uint64_t off)
{
	struct faulty *f = dev->priv;

	return fault_hit(f->plan, UB_FAULT_WRITE) ? -EIO : ub_dev_write(f->inner, buf, len, off);
}

static int f_flush(struct ub_dev *dev)
{
	struct faulty *f = dev->priv;

	return fault_hit(f->plan, UB_FAULT_FLUSH) ? -EIO : ub_dev_flush(f->inner);
}

static void f_release(struct ub_dev *dev)
{
	struct faulty *f = dev->priv;

	if (!f)
		return;
	ub_dev_close(f->inner);
	ub_fault_plan_put(f->plan);
	free(f);
}

static const struct ub_dev_ops faulty_ops = {
	.kind = "faulty",
	.read = f_read,
	.write = f_write,
	.flush = f_flush,
	.release = f_release,
};

int ub_dev_open_faulty(struct ub_dev *inner, struct ub_fault_plan *plan, struct ub_dev **out)
{
	struct faulty *f;

	if (!inner)
		return -EINVAL;
	if (!plan) {
		ub_dev_close(inner);
		return -EINVAL;
	}
	f = calloc(1, sizeof(*f));
	if (!f) {
		ub_dev_close(inner);
		return -ENOMEM;
	}
	f->inner = inner;
	f->plan = plan;
	pthread_mutex_lock(&plan->lock);
	plan->refs++;
	pthread_mutex_unlock(&plan->lock);
	return ub_dev_create(inner->path, &faulty_ops, f, inner->size, inner->writable, out);
}
