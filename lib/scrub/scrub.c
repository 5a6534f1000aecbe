/* SPDX-License-Identifier: MIT */
/*
 * Scrub's frame: the devices and their threads, the pinned commit read, the
 * counts, the sink, cancelling, the rate limit, the repair lock and the
 * closing commit of the device error counters (scrub_priv.h says how the
 * work is split).
 *
 * Why repairs are safe beside writers: every read of the trees is of one
 * commit, pinned for the whole scrub (a reader epoch), so nothing that commit
 * holds is handed out again while the scrub runs; tree blocks and checksummed
 * data are never rewritten in place, so what the commit holds stays as it was
 * written. What may still change under the scrub is data written in place
 * (NODATACOW files, PREALLOC extents), and that only under the engine's
 * writer lock. A repair therefore takes that lock, reads the copies again,
 * judges them again, checks in the running transaction's extent tree that
 * the extent is still allocated with the generation the commit gave it, and
 * only then writes (docs/scrub.md).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "scrub/scrub_priv.h"
#include "txn/txn.h"

static const char *const kind_names[UB_SCRUB_NKINDS] = {
	[UB_SCRUB_READ_ERROR] = "read error",
	[UB_SCRUB_CSUM] = "checksum",
	[UB_SCRUB_META_CSUM] = "tree block checksum",
	[UB_SCRUB_META_HEADER] = "tree block header",
	[UB_SCRUB_META_GENERATION] = "tree block generation",
	[UB_SCRUB_NOCSUM_MISMATCH] = "copies differ",
	[UB_SCRUB_PARITY] = "parity",
	[UB_SCRUB_SUPER] = "superblock",
};

const char *ub_scrub_kind_name(enum ub_scrub_kind k)
{
	return k < UB_SCRUB_NKINDS ? kind_names[k] : "unknown";
}

const char *ub_scrub_outcome_name(enum ub_scrub_outcome o)
{
	switch (o) {
	case UB_SCRUB_REPAIRED:
		return "repaired";
	case UB_SCRUB_UNREPAIRABLE:
		return "unrepairable";
	case UB_SCRUB_NOT_REPAIRED:
		return "not repaired (read-only)";
	case UB_SCRUB_SKIPPED:
		return "skipped (changed since read)";
	}
	return "unknown";
}

struct sx_dev *sx_dev_of(struct ub_scrub *s, uint64_t devid)
{
	for (int i = 0; i < s->ndevs; i++)
		if (s->devs[i].devid == devid)
			return &s->devs[i];
	return NULL;
}

bool sx_cancelled(const struct ub_scrub *s)
{
	return atomic_load(&s->cancel);
}

int sx_dev_read(struct sx_thread *t, struct ub_vdev *vd, void *buf, size_t len, uint64_t phys)
{
	if (!vd || !vd->dev)
		return -ENXIO;
	t->bytes_read += len;
	return ub_dev_read(vd->dev, buf, len, phys);
}

static double elapsed(const struct timespec *t0)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (double)(now.tv_sec - t0->tv_sec) + (double)(now.tv_nsec - t0->tv_nsec) / 1e9;
}

void sx_throttle(struct sx_thread *t)
{
	const uint64_t limit = t->s->opts.limit;
	double ahead;

	if (!limit)
		return;
	ahead = (double)t->bytes_read / (double)limit - elapsed(&t->t0);
	/* in short sleeps, so a cancel is heard */
	while (ahead > 0 && !sx_cancelled(t->s)) {
		double step = ahead < 0.1 ? ahead : 0.1;
		struct timespec ts = { (time_t)step, (long)((step - (double)(time_t)step) * 1e9) };

		nanosleep(&ts, NULL);
		ahead -= step;
	}
}

static void prog_add(struct ub_scrub_dev_progress *to, const struct ub_scrub_dev_progress *a)
{
#define ADD(f) to->f += a->f
	ADD(data_extents_scrubbed);
	ADD(tree_extents_scrubbed);
	ADD(data_bytes_scrubbed);
	ADD(tree_bytes_scrubbed);
	ADD(read_errors);
	ADD(csum_errors);
	ADD(verify_errors);
	ADD(super_errors);
	ADD(no_csum);
	ADD(generation_errors);
	ADD(corrected_errors);
	ADD(uncorrectable_errors);
	ADD(unverified_errors);
	ADD(parity_rows_checked);
	ADD(parity_errors);
	ADD(parity_fixed);
	ADD(malloc_errors);
#undef ADD
}

void sx_progress_at(struct sx_thread *t, uint64_t physical)
{
	struct ub_scrub *s = t->s;

	pthread_mutex_lock(&s->lock);
	prog_add(&t->d->prog, &t->acc);
	if (physical > t->d->prog.last_physical)
		t->d->prog.last_physical = physical;
	pthread_mutex_unlock(&s->lock);
	memset(&t->acc, 0, sizeof(t->acc));
}

int sx_repair_lock(struct ub_scrub *s)
{
	return s->e ? ub_fs_live_write_lock(&s->e->fs) : 0;
}

void sx_repair_unlock(struct ub_scrub *s)
{
	if (s->e)
		ub_fs_live_write_unlock(&s->e->fs);
}

bool sx_extent_unchanged(struct sx_thread *t, const struct sx_extent *x)
{
	struct ub_scrub *s = t->s;
	struct ub_key key = { x->bytenr, x->key_type, x->key_offset };
	struct ub_path p;
	bool same = false;
	int ret;

	if (!s->e)
		return true; /* nothing writes beside an offline scrub */
	if (!s->e->fs.extent_tree)
		return false;
	/* the running transaction's extent tree, under the writer lock the caller holds */
	ub_path_init(&p);
	ret = ub_tree_search_slot(s->tc, NULL, &s->e->fs.extent_tree->root, &key, &p, 0, false);
	if (ret == 0) {
		uint32_t size;
		const uint8_t *d = ub_path_data(&p, &size);

		same = size >= sizeof(struct btrfs_extent_item) && UB_GET(btrfs_extent_item, generation, d) == x->gen;
	}
	ub_path_release(&p);
	return same;
}

int sx_rewrite(struct sx_thread *t, const struct ub_chunk *c, int stripe, uint64_t phys, uint64_t len, const void *buf)
{
	struct ub_scrub *s = t->s;
	int ret = ub_volume_rewrite(s->vol, c, stripe, phys, len, buf);

	pthread_mutex_lock(&s->lock);
	if (ret && !s->fatal)
		s->fatal = ret;
	s->wrote |= ret == 0;
	pthread_mutex_unlock(&s->lock);
	return ret;
}

void sx_report(struct sx_thread *t, struct sx_dev *d, struct ub_scrub_problem *p, const struct sx_unit *u)
{
	struct ub_scrub *s = t->s;
	struct ub_scrub_dev_progress *pr = &d->prog;
	const uint64_t sectors = (p->length + s->ss - 1) / s->ss;
	struct ub_scrub_owner *own = NULL;
	int nown = 0;
	bool more = false;

	if (u && u->kind != SX_META && p->kind != UB_SCRUB_PARITY) {
		if (sx_owners(t, &t->ext[u->ext], u->logical, &own, &nown, &more) == -ENOMEM)
			SX_COUNT(t, malloc_errors, 1);
		/* copies of never-written (PREALLOC) or unreferenced bytes may differ: no file reads them */
		if (p->kind == UB_SCRUB_NOCSUM_MISMATCH && !nown && !more && own) {
			sx_owners_free(own, nown);
			return;
		}
		p->owners = own;
		p->nowners = nown;
		p->more_owners = more;
	}
	pthread_mutex_lock(&s->lock);
	switch (p->kind) {
	case UB_SCRUB_READ_ERROR:
		pr->read_errors += sectors;
		sx_stat_add(s, d, BTRFS_DEV_STAT_READ_ERRS, sectors);
		break;
	case UB_SCRUB_CSUM:
		pr->csum_errors += sectors;
		sx_stat_add(s, d, BTRFS_DEV_STAT_CORRUPTION_ERRS, sectors);
		break;
	case UB_SCRUB_META_CSUM:
	case UB_SCRUB_META_HEADER:
		pr->verify_errors += sectors;
		sx_stat_add(s, d, BTRFS_DEV_STAT_CORRUPTION_ERRS, sectors);
		break;
	case UB_SCRUB_META_GENERATION:
		pr->verify_errors += sectors;
		pr->generation_errors++;
		sx_stat_add(s, d, BTRFS_DEV_STAT_GENERATION_ERRS, 1);
		break;
	case UB_SCRUB_NOCSUM_MISMATCH:
		pr->unverified_errors += sectors;
		break;
	case UB_SCRUB_PARITY:
		pr->parity_errors += sectors;
		pr->parity_fixed += p->outcome == UB_SCRUB_REPAIRED ? sectors : 0;
		sx_stat_add(s, d, BTRFS_DEV_STAT_CORRUPTION_ERRS, sectors);
		break;
	case UB_SCRUB_SUPER:
	case UB_SCRUB_NKINDS:
		pr->super_errors++;
		break;
	}
	if (p->kind != UB_SCRUB_PARITY && p->kind != UB_SCRUB_SUPER) {
		if (p->outcome == UB_SCRUB_REPAIRED)
			pr->corrected_errors += sectors;
		else if (p->outcome == UB_SCRUB_UNREPAIRABLE)
			pr->uncorrectable_errors += sectors;
	}
	pthread_mutex_unlock(&s->lock);
	/*
	 * The sink is called without the counts' lock (a caller's sink may take its own lock,
	 * under which it asks for the progress), one problem at a time.
	 */
	if (s->sink.problem) {
		pthread_mutex_lock(&s->sink_lock);
		s->sink.problem(s->sink.arg, p);
		pthread_mutex_unlock(&s->sink_lock);
	}
	sx_owners_free(own, nown);
	p->owners = NULL;
	p->nowners = 0;
}

/* ---- the device threads ---- */

struct work {
	const struct ub_chunk *c;
	int stripe;
	uint64_t phys, size;
};

static int work_cmp(const void *a, const void *b)
{
	const struct work *x = a, *y = b;

	return x->phys < y->phys ? -1 : x->phys > y->phys;
}

static int scrub_device(struct sx_thread *t)
{
	struct ub_scrub *s = t->s;
	struct sx_dev *d = t->d;
	struct work *w = NULL;
	int nw = 0, ret;

	ret = sx_scrub_supers(t);
	if (ret)
		return ret;
	for (int i = 0; i < s->nchunks; i++)
		for (int k = 0; k < s->chunks[i]->num_stripes; k++)
			nw += s->chunks[i]->stripes[k].devid == d->devid;
	w = calloc((size_t)nw + 1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	nw = 0;
	for (int i = 0; i < s->nchunks; i++)
		for (int k = 0; k < s->chunks[i]->num_stripes; k++)
			if (s->chunks[i]->stripes[k].devid == d->devid)
				w[nw++] = (struct work){ s->chunks[i], k, s->chunks[i]->stripes[k].physical,
							 ub_chunk_stripe_size(s->chunks[i]) };
	qsort(w, (size_t)nw, sizeof(*w), work_cmp);
	for (int i = 0; i < nw && !ret; i++) {
		if (w[i].phys + w[i].size <= d->start || !w[i].c->profile)
			continue;
		if (sx_cancelled(s)) {
			ret = -ECANCELED;
			break;
		}
		ret = w[i].c->profile->nparity ? sx_scrub_parity(t, w[i].c, w[i].stripe)
					       : sx_scrub_copies(t, w[i].c, w[i].stripe);
		if (!ret)
			sx_progress_at(t, w[i].phys + w[i].size);
	}
	free(w);
	return ret;
}

static void *dev_main(void *arg)
{
	struct sx_dev *d = arg;
	struct sx_thread t = { .s = d->s, .d = d };
	struct ub_scrub *s = d->s;
	int ret;

	ub_path_init(&t.path);
	clock_gettime(CLOCK_MONOTONIC, &t.t0);
	ret = scrub_device(&t);
	sx_progress_at(&t, 0);
	if (ret && ret != -ECANCELED)
		ub_err(&s->log, "scrub of devid %llu (%s) stopped at physical %llu: %s", (unsigned long long)d->devid,
		       d->path, (unsigned long long)d->prog.last_physical, strerror(-ret));
	pthread_mutex_lock(&s->lock);
	d->prog.running = false;
	d->prog.finished = ret == 0;
	d->prog.canceled = ret == -ECANCELED;
	d->error = ret;
	pthread_mutex_unlock(&s->lock);
	ub_path_release(&t.path);
	free(t.ext);
	free(t.csum);
	free(t.have);
	free(t.units);
	free(t.buf);
	free(t.tmp);
	return NULL;
}

int ub_scrub_new(struct ub_fs *fs, struct ub_engine *e, const struct ub_scrub_opts *opts,
		 const struct ub_scrub_sink *sink, struct ub_scrub **out)
{
	struct ub_scrub *s;
	struct ub_volume *vol;
	int ret;

	*out = NULL;
	if (!fs && !e)
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	pthread_mutex_init(&s->lock, NULL);
	pthread_mutex_init(&s->sink_lock, NULL);
	s->e = e;
	s->fs = e ? ub_engine_fs(e) : ub_fs_base(fs);
	s->opts = *opts;
	s->opts.devids = NULL;
	s->opts.start = NULL;
	if (sink)
		s->sink = *sink;
	vol = s->vol = s->fs->vol;
	s->tc = &s->fs->tc;
	s->log = s->fs->log;
	s->ss = vol->sectorsize;
	s->ns = vol->nodesize;
	s->csum_type = vol->csum_type;
	s->csum_size = vol->csum_size;
	ret = -EROFS;
	if (!e && !opts->readonly && !vol->writable)
		goto fail;
	if (e) {
		ret = ub_fs_view_open(s->fs, &s->view);
		if (ret)
			goto fail;
		s->own_view = true;
	} else {
		s->view = fs;
	}
	ret = ub_fs_tree_root(s->view, BTRFS_ROOT_TREE_OBJECTID, &s->root_root);
	if (!ret)
		ret = ub_fs_tree_root(s->view, BTRFS_EXTENT_TREE_OBJECTID, &s->extent_root);
	if (ret) {
		ub_err(&s->log, "scrub: the extent tree cannot be found: %s", strerror(-ret));
		goto fail;
	}
	s->have_csum_root = ub_fs_tree_root(s->view, BTRFS_CSUM_TREE_OBJECTID, &s->csum_root) == 0;
	/* the devices */
	ret = -ENOMEM;
	s->devs = calloc((size_t)vol->nvdevs + 1, sizeof(*s->devs));
	if (!s->devs)
		goto fail;
	for (int i = 0; i < vol->nvdevs; i++) {
		struct ub_vdev *vd = &vol->vdevs[i];
		int want = -1;

		for (int k = 0; opts->devids && k < opts->ndevids; k++)
			if (opts->devids[k] == vd->devid)
				want = k;
		if (opts->devids && want < 0)
			continue;
		if (vd->missing || !vd->dev) {
			ub_warn(&s->log, "scrub: devid %llu is missing: not scrubbed", (unsigned long long)vd->devid);
			continue;
		}
		s->devs[s->ndevs] = (struct sx_dev){ .devid = vd->devid, .vd = vd, .path = ub_dev_path(vd->dev), .s = s };
		if (opts->start)
			s->devs[s->ndevs].start = opts->start[opts->devids ? want : i];
		s->devs[s->ndevs].prog.devid = vd->devid;
		s->devs[s->ndevs].prog.last_physical = s->devs[s->ndevs].start;
		s->ndevs++;
	}
	for (int k = 0; opts->devids && k < opts->ndevids; k++)
		if (!ub_volume_vdev(vol, opts->devids[k]))
			ub_warn(&s->log, "scrub: the filesystem has no devid %llu", (unsigned long long)opts->devids[k]);
	ret = -ENODEV;
	if (!s->ndevs)
		goto fail;
	/* the chunks: copied under the map's lock (chunks themselves live until close) */
	ret = -ENOMEM;
	if (vol->chunk_lock_ready)
		pthread_rwlock_rdlock(&vol->chunk_lock);
	s->chunks = calloc((size_t)vol->nchunks + 1, sizeof(*s->chunks));
	if (s->chunks) {
		for (int i = 0; i < vol->nchunks; i++)
			s->chunks[i] = vol->chunks[i];
		s->nchunks = vol->nchunks;
	}
	if (vol->chunk_lock_ready)
		pthread_rwlock_unlock(&vol->chunk_lock);
	if (!s->chunks)
		goto fail;
	for (int i = 0; i < s->nchunks; i++)
		for (int k = 0; k < s->chunks[i]->num_stripes; k++) {
			struct sx_dev *d = sx_dev_of(s, s->chunks[i]->stripes[k].devid);

			if (d)
				d->prog.bytes_to_scrub += ub_chunk_stripe_size(s->chunks[i]);
		}
	*out = s;
	return 0;
fail:
	ub_scrub_free(s);
	return ret;
}

/* A repairing scrub with an engine ends as the kernel's does: the counted errors into DEV_STATS, committed. */
static int closing_commit(struct ub_scrub *s)
{
	bool any = s->supers_bad;
	int ret = 0;

	for (int i = 0; i < s->ndevs && !any; i++)
		for (int k = 0; k < UB_DEV_STAT_COUNT; k++)
			any |= s->devs[i].stats[k] != 0;
	if (!any)
		return 0;
	for (int i = 0; i < s->ndevs && !ret; i++) {
		bool counted = false;

		for (int k = 0; k < UB_DEV_STAT_COUNT; k++)
			counted |= s->devs[i].stats[k] != 0;
		/* a bad superblock alone still needs a commit that changes a tree, or it writes nothing */
		if (counted || (s->supers_bad && i == 0))
			ret = ub_dev_stats_update(s->e, s->devs[i].devid, s->devs[i].stats, false);
	}
	if (!ret)
		ret = ub_engine_commit(s->e);
	if (ret)
		ub_err(&s->log, "scrub: the device error counters could not be committed: %s", strerror(-ret));
	return ret;
}

int ub_scrub_run(struct ub_scrub *s)
{
	int ret = 0;

	/* the counts are read from other threads (ub_scrub_progress): changed under the lock */
	pthread_mutex_lock(&s->lock);
	for (int i = 0; i < s->ndevs; i++)
		s->devs[i].prog.running = true;
	pthread_mutex_unlock(&s->lock);
	for (int i = 0; i < s->ndevs; i++) {
		if (pthread_create(&s->devs[i].thread, NULL, dev_main, &s->devs[i]) == 0)
			s->devs[i].started = true;
		else
			dev_main(&s->devs[i]);
	}
	for (int i = 0; i < s->ndevs; i++)
		if (s->devs[i].started) {
			pthread_join(s->devs[i].thread, NULL);
			s->devs[i].started = false;
		}
	for (int i = 0; i < s->ndevs; i++)
		if (s->devs[i].error && (!ret || ret == -ECANCELED))
			ret = s->devs[i].error;
	if (s->fatal && (!ret || ret == -ECANCELED))
		ret = s->fatal;
	if (s->wrote) {
		int fl = ub_volume_flush(s->vol);

		if (fl && !ret)
			ret = fl;
	}
	if (s->e && !s->opts.readonly && (!ret || ret == -ECANCELED)) {
		int cc = closing_commit(s);

		if (cc && !ret)
			ret = cc;
	}
	return ret;
}

void ub_scrub_cancel(struct ub_scrub *s)
{
	atomic_store(&s->cancel, true);
}

int ub_scrub_progress(struct ub_scrub *s, uint64_t devid, struct ub_scrub_dev_progress *out)
{
	struct sx_dev *d = sx_dev_of(s, devid);

	if (!d)
		return -ENOENT;
	pthread_mutex_lock(&s->lock);
	*out = d->prog;
	pthread_mutex_unlock(&s->lock);
	return 0;
}

int ub_scrub_devids(struct ub_scrub *s, uint64_t *devids, int max)
{
	for (int i = 0; i < s->ndevs && i < max; i++)
		devids[i] = s->devs[i].devid;
	return s->ndevs;
}

void ub_scrub_free(struct ub_scrub *s)
{
	if (!s)
		return;
	for (int i = 0; i < s->ndevs; i++)
		if (s->devs[i].started)
			pthread_join(s->devs[i].thread, NULL);
	if (s->own_view)
		ub_fs_close(s->view);
	free(s->devs);
	free(s->chunks);
	free(s->subvols);
	pthread_mutex_destroy(&s->lock);
	pthread_mutex_destroy(&s->sink_lock);
	free(s);
}
