/* SPDX-License-Identifier: MIT */
/*
 * Many threads on one engine, through the public API only (ubtrfs/engine.h,
 * fswrite.h, fs.h): writers make, rewrite, rename and remove files in
 * directories of their own and in one they share; readers list and read
 * them at once through the three kinds of handle (a live view, pinned
 * views, the filesystem's own); a thread commits at random moments.
 *
 *   threads_driver SEED WRITERS OPS READERS MODEL.json DEV...
 *   threads_driver --fill ROUNDS SEED WRITERS DEV...
 *   threads_driver --crash-dir DIR --crash-cuts K SEED WRITERS OPS READERS MODEL.json DEV...
 *   threads_driver --verify DEV...
 *
 * Every file holds one whole version: a header (magic, file id, version,
 * length) and bytes that follow from (id, version). A reader that gets a
 * file checks that it is one whole version of one file, never a mix of two
 * or a torn write, and that every name a pinned view lists it can read (a
 * pinned view is one commit). At the end the engine commits and closes, the
 * filesystem is opened again read-only, and what it holds must be exactly
 * what the writers' models say; the model is written as JSON (path: size and
 * sha256) for the kernel's mount to be compared with (test_engine_threads.py).
 * Exit 0 when all agree; 1 with a message on the first disagreement.
 *
 * --fill: ROUNDS times, the writers fill the filesystem with small and
 * large files until every one of them has met ENOSPC several times in a
 * row; every ENOSPC must come from an operation that changed nothing (the
 * engine stays writable and the next commit succeeds); then everything is
 * deleted and committed, and the next round must fit about as much again.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <openssl/evp.h>

#include "ubtrfs/engine.h"
#include "ubtrfs/format.h"
#include "ubtrfs/fs.h"
#include "ubtrfs/fswrite.h"
#include "crash_cuts.h"

#define FS BTRFS_FS_TREE_OBJECTID
#define TOP BTRFS_FIRST_FREE_OBJECTID
#define MAGIC 0x7562746872656164ULL /* "ubthread" */
#define HDR 32
#define MAX_LEN (96 * 1024)
#define MAX_FILES 64 /* per writer */
#define MAX_WRITERS 16

static struct ub_engine *g_e;
static atomic_int g_failed;
static atomic_int g_writers_left;
static uint64_t g_shared_dir;

#define FAIL(...)                                                   \
	do {                                                        \
		fprintf(stderr, "threads_driver: " __VA_ARGS__);    \
		fputc('\n', stderr);                                \
		atomic_store(&g_failed, 1);                         \
	} while (0)

static uint64_t xs(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

/* version `ver` of file `id`: len bytes (len >= HDR) */
static void content(uint8_t *buf, uint64_t id, uint64_t ver, size_t len)
{
	uint64_t s = (id * 0x9e3779b97f4a7c15ULL) ^ (ver * 0xbf58476d1ce4e5b9ULL) ^ 1;

	put64(buf, MAGIC);
	put64(buf + 8, id);
	put64(buf + 16, ver);
	put64(buf + 24, len);
	for (size_t i = HDR; i < len; i++)
		buf[i] = (uint8_t)(xs(&s) >> 24);
}

/* is buf[0, len) one whole version of some file: 0, else a reason */
static const char *whole_version(const uint8_t *buf, size_t len, uint64_t *id, uint64_t *ver)
{
	static __thread uint8_t want[MAX_LEN];

	if (len < HDR)
		return "shorter than a header";
	if (get64(buf) != MAGIC)
		return "no header";
	*id = get64(buf + 8);
	*ver = get64(buf + 16);
	if (get64(buf + 24) != len)
		return "size differs from the header's";
	if (len > MAX_LEN)
		return "longer than any version";
	content(want, *id, *ver, len);
	return memcmp(want, buf, len) ? "bytes of another version (a mix or a torn write)" : NULL;
}

/* ---- writers ---- */

struct wfile {
	char name[32];
	uint64_t dir, ino, id, ver;
	size_t len;
	bool live;
};

struct writer {
	int tid;
	uint64_t seed;
	long ops;
	uint64_t own_dir;
	struct wfile f[MAX_FILES];
	int nf;
	uint64_t next_id;
	long done, enospc;
};

static int op_begin(int kind, uint64_t len, struct ub_txn **t)
{
	return ub_fsw_begin(g_e, kind, len, t);
}

static void w_create(struct writer *w, uint64_t *s)
{
	static __thread uint8_t buf[MAX_LEN];
	struct wfile *f;
	struct ub_txn *t;
	int ret, slot = -1;

	for (int i = 0; i < w->nf; i++)
		if (!w->f[i].live)
			slot = i;
	if (slot < 0) {
		if (w->nf == MAX_FILES)
			return;
		slot = w->nf++;
	}
	f = &w->f[slot];
	f->id = (uint64_t)w->tid << 32 | w->next_id++;
	f->ver = 1;
	f->len = HDR + xs(s) % (MAX_LEN - HDR);
	f->dir = xs(s) % 2 ? g_shared_dir : w->own_dir;
	snprintf(f->name, sizeof(f->name), "w%d-%" PRIu64, w->tid, f->id & 0xffffffff);
	content(buf, f->id, f->ver, f->len);
	ret = op_begin(UB_FSW_OP_WRITE, f->len, &t);
	if (ret == -ENOSPC) {
		w->enospc++;
		return;
	}
	if (ret) {
		FAIL("writer %d: begin: %d", w->tid, ret);
		return;
	}
	ret = ub_fsw_create(t, FS, f->dir, f->name, strlen(f->name), S_IFREG | 0644, 0, 0, 0, &f->ino);
	if (!ret)
		ret = ub_fsw_write(t, FS, f->ino, 0, buf, f->len);
	ub_fsw_end(g_e);
	if (ret)
		FAIL("writer %d: create+write %s: %d", w->tid, f->name, ret);
	else
		f->live = true;
}

static struct wfile *w_pick(struct writer *w, uint64_t *s)
{
	int n = 0, k;

	for (int i = 0; i < w->nf; i++)
		n += w->f[i].live;
	if (!n)
		return NULL;
	k = (int)(xs(s) % (uint64_t)n);
	for (int i = 0; i < w->nf; i++)
		if (w->f[i].live && k-- == 0)
			return &w->f[i];
	return NULL;
}

static void w_rewrite(struct writer *w, uint64_t *s)
{
	static __thread uint8_t buf[MAX_LEN];
	struct wfile *f = w_pick(w, s);
	struct ub_txn *t;
	size_t len;
	int ret;

	if (!f)
		return;
	len = HDR + xs(s) % (MAX_LEN - HDR);
	content(buf, f->id, f->ver + 1, len);
	ret = op_begin(UB_FSW_OP_WRITE, len, &t);
	if (ret == -ENOSPC) {
		w->enospc++;
		return;
	}
	if (ret) {
		FAIL("writer %d: begin: %d", w->tid, ret);
		return;
	}
	/* one operation: a reader sees the old version or the new one, never the empty file between */
	ret = ub_fsw_truncate(t, FS, f->ino, 0);
	if (!ret)
		ret = ub_fsw_write(t, FS, f->ino, 0, buf, len);
	ub_fsw_end(g_e);
	if (ret) {
		FAIL("writer %d: rewrite %s: %d", w->tid, f->name, ret);
		return;
	}
	f->ver++;
	f->len = len;
}

static void w_rename(struct writer *w, uint64_t *s)
{
	struct wfile *f = w_pick(w, s);
	struct ub_txn *t;
	char nn[32];
	int ret;

	if (!f)
		return;
	snprintf(nn, sizeof(nn), "w%d-%" PRIu64 "-r%" PRIu64, w->tid, f->id & 0xffffffff, xs(s) % 1000);
	if (!strcmp(nn, f->name))
		return;
	ret = op_begin(UB_FSW_OP_RENAME, 0, &t);
	if (ret == -ENOSPC) {
		w->enospc++;
		return;
	}
	if (ret) {
		FAIL("writer %d: begin: %d", w->tid, ret);
		return;
	}
	ret = ub_fsw_rename(t, FS, f->dir, f->name, strlen(f->name), f->dir, nn, strlen(nn), 0);
	ub_fsw_end(g_e);
	if (ret)
		FAIL("writer %d: rename %s: %d", w->tid, f->name, ret);
	else
		snprintf(f->name, sizeof(f->name), "%s", nn);
}

static void w_unlink(struct writer *w, uint64_t *s)
{
	struct wfile *f = w_pick(w, s);
	struct ub_txn *t;
	int ret;

	if (!f)
		return;
	ret = op_begin(UB_FSW_OP_UNLINK, 0, &t);
	if (ret) {
		FAIL("writer %d: begin unlink: %d", w->tid, ret);
		return;
	}
	ret = ub_fsw_unlink(t, FS, f->dir, f->name, strlen(f->name));
	ub_fsw_end(g_e);
	if (ret)
		FAIL("writer %d: unlink %s: %d", w->tid, f->name, ret);
	else
		f->live = false;
}

static void *writer_main(void *arg)
{
	struct writer *w = arg;
	uint64_t s = w->seed;

	for (long i = 0; i < w->ops && !atomic_load(&g_failed); i++) {
		uint64_t r = xs(&s) % 10;

		if (r < 4)
			w_create(w, &s);
		else if (r < 7)
			w_rewrite(w, &s);
		else if (r < 8)
			w_rename(w, &s);
		else
			w_unlink(w, &s);
		w->done++;
	}
	atomic_fetch_sub(&g_writers_left, 1);
	return NULL;
}

/* ---- readers ---- */

struct reader {
	int tid;
	uint64_t seed;
	long files, lists, vanished;
};

struct rd_list {
	struct ub_fs *fs;
	struct reader *r;
	bool pinned;
	const char *what;
	char names[256][40];
	uint64_t inos[256];
	int n;
};

static int rd_collect(void *arg, const struct ub_dirent *de)
{
	struct rd_list *l = arg;

	if (l->n < 256 && de->name_len < 40) {
		memcpy(l->names[l->n], de->name, de->name_len);
		l->names[l->n][de->name_len] = 0;
		l->inos[l->n++] = de->ino;
	}
	return 0;
}

static void rd_check_dir(struct rd_list *l, uint64_t dir)
{
	static __thread uint8_t buf[MAX_LEN + 4096];
	int ret;

	l->n = 0;
	ret = ub_dir_iterate(l->fs, FS, dir, rd_collect, l);
	if (ret) {
		FAIL("reader %d (%s): listing directory %" PRIu64 ": %d", l->r->tid, l->what, dir, ret);
		return;
	}
	l->r->lists++;
	for (int i = 0; i < l->n && !atomic_load(&g_failed); i++) {
		struct ub_inode in;
		uint64_t got = 0, id, ver;
		const char *why;

		/*
		 * One call gives one state: a pinned view keeps it across calls (its
		 * inode, then its bytes); through the others, the inode's size and
		 * bytes must come from the same call.
		 */
		if (l->pinned) {
			ret = ub_inode_read(l->fs, FS, l->inos[i], &in);
			if (!ret && in.size > MAX_LEN) {
				FAIL("reader %d (%s): %s has %" PRIu64 " bytes", l->r->tid, l->what, l->names[i], in.size);
				return;
			}
			if (!ret)
				ret = ub_file_read_inode(l->fs, &in, 0, in.size, buf, &got, NULL);
		} else {
			ret = ub_file_read(l->fs, FS, l->inos[i], 0, sizeof(buf), buf, &got, NULL);
		}
		if (ret == -ENOENT && !l->pinned) {
			l->r->vanished++; /* removed between the listing and this read: fine outside one commit */
			continue;
		}
		if (ret) {
			FAIL("reader %d (%s): reading %s (inode %" PRIu64 "): %d (%" PRIu64 " bytes)", l->r->tid, l->what,
			     l->names[i], l->inos[i], ret, got);
			return;
		}
		why = whole_version(buf, got, &id, &ver);
		if (why) {
			FAIL("reader %d (%s): %s (inode %" PRIu64 ", %" PRIu64 " bytes): %s", l->r->tid, l->what,
			     l->names[i], l->inos[i], got, why);
			return;
		}
		l->r->files++;
	}
}

static void *reader_main(void *arg)
{
	struct reader *r = arg;
	uint64_t s = r->seed, dirs[MAX_WRITERS + 1];
	struct ub_fs *live = NULL, *base = ub_engine_fs(g_e);
	int ndirs = 0, ret;

	ret = ub_engine_view(g_e, &live);
	if (ret) {
		FAIL("reader %d: live view: %d", r->tid, ret);
		return NULL;
	}
	dirs[ndirs++] = g_shared_dir;
	while (atomic_load(&g_writers_left) > 0 && !atomic_load(&g_failed)) {
		static __thread struct rd_list l;
		uint64_t k = xs(&s) % 3;
		struct ub_fs *pin = NULL;
		uint64_t dir;

		/* the writers' own directories, found through the live view */
		if (ndirs == 1) {
			struct ub_dirent de;
			char nm[16];

			for (int i = 0; i < MAX_WRITERS; i++) {
				snprintf(nm, sizeof(nm), "own%d", i);
				if (ub_dir_lookup(live, FS, TOP, nm, strlen(nm), &de) == 0)
					dirs[ndirs++] = de.ino;
			}
		}
		dir = dirs[xs(&s) % (uint64_t)ndirs];
		memset(&l, 0, sizeof(l));
		l.r = r;
		if (k == 0) {
			l.fs = live;
			l.what = "live view";
		} else if (k == 1) {
			ret = ub_fs_view_open(base, &pin);
			if (ret) {
				FAIL("reader %d: pinned view: %d", r->tid, ret);
				break;
			}
			l.fs = pin;
			l.pinned = true;
			l.what = "pinned view";
		} else {
			l.fs = base;
			l.what = "last commit";
		}
		rd_check_dir(&l, dir);
		/* a pinned view reads its commit however long it is kept: once more, after the writers went on */
		if (pin && !atomic_load(&g_failed)) {
			usleep(200);
			rd_check_dir(&l, dir);
		}
		ub_fs_close(pin);
	}
	ub_fs_close(live);
	return NULL;
}

static void *committer_main(void *arg)
{
	uint64_t s = *(uint64_t *)arg;

	while (atomic_load(&g_writers_left) > 0 && !atomic_load(&g_failed)) {
		usleep((useconds_t)(500 + xs(&s) % 4000));
		int ret = ub_engine_commit(g_e);

		if (ret)
			FAIL("commit: %d", ret);
	}
	return NULL;
}

/* ---- the end: the filesystem opened again against the models ---- */

static void sha_hex(const uint8_t *buf, size_t len, char out[65])
{
	unsigned char md[32];
	unsigned int n = 0;

	EVP_Digest(buf, len, md, &n, EVP_sha256(), NULL);
	for (int i = 0; i < 32; i++)
		sprintf(out + 2 * i, "%02x", md[i]);
}

static int verify_end(struct writer *ws, int nw, const char *const *paths, int npaths, const char *model)
{
	static uint8_t buf[MAX_LEN], want[MAX_LEN];
	struct ub_fs_opts o = { .super_mirror = -1 };
	struct ub_fs *fs = NULL;
	FILE *out = fopen(model, "w");
	int ret, bad = 0, first = 1;

	if (!out) {
		perror(model);
		return 1;
	}
	ret = ub_fs_open(paths, npaths, &o, NULL, &fs);
	if (ret) {
		fprintf(stderr, "threads_driver: reopening: %d\n", ret);
		fclose(out);
		return 1;
	}
	fprintf(out, "{");
	for (int i = 0; i < nw; i++) {
		for (int j = 0; j < ws[i].nf; j++) {
			struct wfile *f = &ws[i].f[j];
			struct ub_dirent de;
			struct ub_inode in;
			uint64_t got = 0;
			char hex[65];

			if (!f->live)
				continue;
			ret = ub_dir_lookup(fs, FS, f->dir, f->name, strlen(f->name), &de);
			if (!ret)
				ret = ub_inode_read(fs, FS, de.ino, &in);
			if (!ret && in.size != f->len)
				ret = -EBADMSG;
			if (!ret)
				ret = ub_file_read_inode(fs, &in, 0, in.size, buf, &got, NULL);
			content(want, f->id, f->ver, f->len);
			if (ret || got != f->len || memcmp(buf, want, f->len)) {
				fprintf(stderr, "threads_driver: after reopening, %s (version %" PRIu64 ", %zu bytes): %d\n",
					f->name, f->ver, f->len, ret);
				bad = 1;
				continue;
			}
			sha_hex(want, f->len, hex);
			if (f->dir == g_shared_dir)
				fprintf(out, "%s\n \"/shared/%s\": ", first ? "" : ",", f->name);
			else
				fprintf(out, "%s\n \"/own%d/%s\": ", first ? "" : ",", ws[i].tid, f->name);
			fprintf(out, "{\"size\": %zu, \"sha256\": \"%s\"}", f->len, hex);
			first = 0;
		}
	}
	fprintf(out, "\n}\n");
	fclose(out);
	ub_fs_close(fs);
	return bad;
}

/* ---- --verify: a crash image holds whole versions only ---- */

static int verify_cb(void *arg, const struct ub_dirent *de)
{
	struct rd_list *l = arg;

	return rd_collect(l, de);
}

static int verify_image(const char *const *paths, int npaths)
{
	static uint8_t buf[MAX_LEN + 4096];
	static struct rd_list l, top;
	struct ub_fs_opts o = { .super_mirror = -1 };
	struct ub_fs *fs = NULL;
	long files = 0;
	int ret;

	ret = ub_fs_open(paths, npaths, &o, NULL, &fs);
	if (ret) {
		fprintf(stderr, "threads_driver: --verify: open: %d\n", ret);
		return 1;
	}
	top.fs = fs;
	ret = ub_dir_iterate(fs, FS, TOP, verify_cb, &top);
	for (int d = 0; !ret && d < top.n; d++) {
		memset(&l, 0, sizeof(l));
		ret = ub_dir_iterate(fs, FS, top.inos[d], verify_cb, &l);
		for (int i = 0; !ret && i < l.n; i++) {
			uint64_t got = 0, id, ver;
			const char *why;

			ret = ub_file_read(fs, FS, l.inos[i], 0, sizeof(buf), buf, &got, NULL);
			if (ret)
				break;
			why = whole_version(buf, got, &id, &ver);
			if (why) {
				fprintf(stderr, "threads_driver: --verify: /%s/%s: %s\n", top.names[d], l.names[i], why);
				ret = -EBADMSG;
			}
			files++;
		}
	}
	if (ret)
		fprintf(stderr, "threads_driver: --verify: %d\n", ret);
	else
		printf("generation %llu files %ld\n", (unsigned long long)ub_fs_view_generation(fs), files);
	ub_fs_close(fs);
	return ret ? 1 : 0;
}

/* ---- --fill ---- */

struct filler {
	int tid;
	uint64_t seed;
	uint64_t dir;
	long files, bytes, enospc;
	uint64_t *inos;
	char (*names)[24];
	long cap;
};

static void *filler_main(void *arg)
{
	static __thread uint8_t buf[MAX_LEN * 8];
	struct filler *f = arg;
	uint64_t s = f->seed;
	int misses = 0;

	while (misses < 8 && !atomic_load(&g_failed)) {
		/* mostly small files, some of up to 768 KiB */
		size_t len = xs(&s) % 4 ? HDR + xs(&s) % 8192 : HDR + xs(&s) % (MAX_LEN * 8 - HDR);
		struct ub_txn *t;
		uint64_t ino;
		int ret;

		if (f->files == f->cap) {
			long cap = f->cap ? 2 * f->cap : 256;

			f->inos = realloc(f->inos, (size_t)cap * sizeof(*f->inos));
			f->names = realloc(f->names, (size_t)cap * sizeof(*f->names));
			if (!f->inos || !f->names) {
				FAIL("filler %d: out of memory", f->tid);
				break;
			}
			f->cap = cap;
		}
		snprintf(f->names[f->files], sizeof(f->names[0]), "f%d-%ld", f->tid, f->files);
		memset(buf, 0, HDR);
		content(buf, (uint64_t)f->tid << 40 | (uint64_t)f->files, 1, len > MAX_LEN ? MAX_LEN : len);
		ret = ub_fsw_begin(g_e, UB_FSW_OP_WRITE, len, &t);
		if (ret == -ENOSPC) {
			misses++;
			f->enospc++;
			continue;
		}
		if (ret) {
			FAIL("filler %d: begin: %d", f->tid, ret);
			break;
		}
		ret = ub_fsw_create(t, FS, f->dir, f->names[f->files], strlen(f->names[f->files]), S_IFREG | 0644, 0, 0,
				    0, &ino);
		if (!ret) {
			ret = ub_fsw_write(t, FS, ino, 0, buf, len);
			if (ret == -ENOSPC) {
				/* the write changed nothing: the empty file stays, and is deleted with the rest */
				f->inos[f->files++] = ino;
				ub_fsw_end(g_e);
				misses++;
				f->enospc++;
				continue;
			}
		}
		ub_fsw_end(g_e);
		if (ret == -ENOSPC) {
			misses++;
			f->enospc++;
			continue;
		}
		if (ret) {
			FAIL("filler %d: create+write of %zu bytes: %d", f->tid, len, ret);
			break;
		}
		misses = 0;
		f->inos[f->files++] = ino;
		f->bytes += (long)len;
	}
	return NULL;
}

static int fill_rounds(int rounds, uint64_t seed, int nw, const char *const *paths, int npaths)
{
	struct filler fs[MAX_WRITERS];
	pthread_t th[MAX_WRITERS];
	long first = 0;
	struct ub_txn *t;
	int ret;

	memset(fs, 0, sizeof(fs));
	ret = ub_engine_open(paths, npaths, NULL, &g_e);
	if (ret) {
		fprintf(stderr, "threads_driver: open: %d\n", ret);
		return 1;
	}
	ret = ub_fsw_begin(g_e, UB_FSW_OP_CREATE, 0, &t);
	for (int i = 0; !ret && i < nw; i++) {
		char nm[16];

		snprintf(nm, sizeof(nm), "fill%d", i);
		ret = ub_fsw_mkdir(t, FS, TOP, nm, strlen(nm), 0755, 0, 0, &fs[i].dir);
	}
	if (!ret)
		ub_fsw_end(g_e);
	if (!ret)
		ret = ub_engine_commit(g_e);
	for (int r = 0; !ret && r < rounds && !atomic_load(&g_failed); r++) {
		long bytes = 0, files = 0, enospc = 0;

		for (int i = 0; i < nw; i++) {
			fs[i].tid = i;
			fs[i].seed = seed * 7 + (uint64_t)r * 1000 + (uint64_t)i + 1;
			fs[i].files = fs[i].bytes = fs[i].enospc = 0;
			pthread_create(&th[i], NULL, filler_main, &fs[i]);
		}
		for (int i = 0; i < nw; i++) {
			pthread_join(th[i], NULL);
			bytes += fs[i].bytes;
			files += fs[i].files;
			enospc += fs[i].enospc;
		}
		if (atomic_load(&g_failed))
			break;
		/* full: the engine is still writable, and a commit of all of it succeeds */
		ret = ub_engine_commit(g_e);
		if (ret) {
			fprintf(stderr, "threads_driver: round %d: the commit of a full filesystem failed: %d\n", r, ret);
			break;
		}
		printf("round %d: %ld files, %ld MiB, %ld ENOSPC\n", r, files, bytes >> 20, enospc);
		fflush(stdout);
		if (r == 0)
			first = bytes;
		else if (bytes < first / 10 * 9) {
			fprintf(stderr, "threads_driver: round %d filled %ld bytes, the first %ld: space did not come back\n",
				r, bytes, first);
			ret = 1;
			break;
		}
		/* everything goes, from every thread's directory at once */
		for (int i = 0; !ret && i < nw; i++) {
			for (long k = 0; !ret && k < fs[i].files; k++) {
				ret = ub_fsw_begin(g_e, UB_FSW_OP_UNLINK, 0, &t);
				if (ret)
					break;
				ret = ub_fsw_unlink(t, FS, fs[i].dir, fs[i].names[k], strlen(fs[i].names[k]));
				ub_fsw_end(g_e);
			}
		}
		if (!ret)
			ret = ub_engine_commit(g_e);
		if (ret)
			fprintf(stderr, "threads_driver: round %d: deleting: %d\n", r, ret);
	}
	for (int i = 0; i < nw; i++) {
		free(fs[i].inos);
		free(fs[i].names);
	}
	ub_engine_close(g_e);
	return ret || atomic_load(&g_failed) ? 1 : 0;
}

int main(int argc, char **argv)
{
	static struct writer ws[MAX_WRITERS];
	static struct reader rs[32];
	pthread_t wt[MAX_WRITERS], rt[32], ct;
	struct ub_txn *t;
	uint64_t seed, cseed;
	int nw, nr, ret;
	long ops, crash_cuts = 0;
	const char *crash_dir = NULL;
	struct ub_rec_log *rlog = NULL;

	if (argc >= 3 && !strcmp(argv[1], "--verify"))
		return verify_image((const char *const *)argv + 2, argc - 2);
	if (argc >= 6 && !strcmp(argv[1], "--crash-dir")) {
		crash_dir = argv[2];
		crash_cuts = atol(argv[4]);
		argv += 4;
		argc -= 4;
	}
	if (argc >= 6 && !strcmp(argv[1], "--fill"))
		return fill_rounds(atoi(argv[2]), strtoull(argv[3], NULL, 0), atoi(argv[4]) < 1 ? 1
					: atoi(argv[4]) > MAX_WRITERS ? MAX_WRITERS : atoi(argv[4]),
				   (const char *const *)argv + 5, argc - 5);
	if (argc < 7) {
		fprintf(stderr, "usage: threads_driver SEED WRITERS OPS READERS MODEL.json DEV...\n"
				"       threads_driver --fill ROUNDS SEED WRITERS DEV...\n");
		return 2;
	}
	seed = strtoull(argv[1], NULL, 0);
	nw = atoi(argv[2]);
	ops = atol(argv[3]);
	nr = atoi(argv[4]);
	if (nw < 1 || nw > MAX_WRITERS || nr < 0 || nr > 32) {
		fprintf(stderr, "threads_driver: 1..%d writers, 0..32 readers\n", MAX_WRITERS);
		return 2;
	}
	if (crash_dir) {
		/* every device write and flush recorded, for the crash images made at the end */
		struct ub_dev *devs[16];
		int ndevs = argc - 6;

		ret = ndevs < 1 || ndevs > 16 ? -EINVAL : crash_save_bases(crash_dir, argv + 6, ndevs);
		if (!ret)
			ret = ub_rec_log_new(&rlog);
		for (int d = 0; d < ndevs; d++) {
			struct ub_dev *inner = NULL;

			if (!ret)
				ret = ub_dev_open(argv[6 + d], true, &inner);
			if (!ret)
				ret = ub_dev_open_recorder(inner, rlog, d, &inner);
			devs[d] = ret ? NULL : inner;
		}
		if (!ret)
			ret = ub_engine_open_devs(devs, ndevs, NULL, &g_e);
		else
			for (int d = 0; d < ndevs; d++)
				ub_dev_close(devs[d]);
	} else {
		ret = ub_engine_open((const char *const *)argv + 6, argc - 6, NULL, &g_e);
	}
	if (ret) {
		fprintf(stderr, "threads_driver: open: %d\n", ret);
		return 1;
	}
	/* the shared directory and one of each writer's own (own<N>) */
	ret = ub_fsw_begin(g_e, UB_FSW_OP_CREATE, 0, &t);
	if (!ret)
		ret = ub_fsw_mkdir(t, FS, TOP, "shared", 6, 0755, 0, 0, &g_shared_dir);
	for (int i = 0; !ret && i < nw; i++) {
		char nm[16];

		snprintf(nm, sizeof(nm), "own%d", i);
		ret = ub_fsw_mkdir(t, FS, TOP, nm, strlen(nm), 0755, 0, 0, &ws[i].own_dir);
	}
	ub_fsw_end(g_e);
	if (!ret)
		ret = ub_engine_commit(g_e);
	if (ret) {
		fprintf(stderr, "threads_driver: directories: %d\n", ret);
		return 1;
	}
	atomic_store(&g_writers_left, nw);
	for (int i = 0; i < nw; i++) {
		ws[i].tid = i;
		ws[i].seed = seed * 1000003 + (uint64_t)i * 7919 + 1;
		ws[i].ops = ops;
		pthread_create(&wt[i], NULL, writer_main, &ws[i]);
	}
	for (int i = 0; i < nr; i++) {
		rs[i].tid = i;
		rs[i].seed = seed * 31 + (uint64_t)i * 104729 + 3;
		pthread_create(&rt[i], NULL, reader_main, &rs[i]);
	}
	cseed = seed + 17;
	pthread_create(&ct, NULL, committer_main, &cseed);
	for (int i = 0; i < nw; i++)
		pthread_join(wt[i], NULL);
	for (int i = 0; i < nr; i++)
		pthread_join(rt[i], NULL);
	pthread_join(ct, NULL);
	ret = ub_engine_commit(g_e);
	if (ret)
		FAIL("last commit: %d", ret);
	{
		long files = 0, lists = 0, vanished = 0, enospc = 0, done = 0;

		for (int i = 0; i < nr; i++) {
			files += rs[i].files;
			lists += rs[i].lists;
			vanished += rs[i].vanished;
		}
		for (int i = 0; i < nw; i++) {
			enospc += ws[i].enospc;
			done += ws[i].done;
		}
		printf("writers %d ops %ld (enospc %ld), readers %d: %ld listings, %ld files read whole, %ld gone "
		       "between listing and reading\n", nw, done, enospc, nr, lists, files, vanished);
	}
	ub_engine_close(g_e);
	if (rlog) {
		ret = crash_make_cuts(rlog, crash_dir, argc - 6, crash_cuts, 0);
		ub_rec_log_put(rlog);
		if (ret) {
			fprintf(stderr, "threads_driver: crash images: %d\n", ret);
			return 1;
		}
	}
	if (atomic_load(&g_failed))
		return 1;
	return verify_end(ws, nw, (const char *const *)argv + 6, argc - 6, argv[5]);
}
