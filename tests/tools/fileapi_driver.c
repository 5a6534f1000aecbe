/* SPDX-License-Identifier: MIT */
/*
 * Drives the file API (include/ubtrfs/fswrite.h) with a seeded random
 * sequence of operations on an existing filesystem's top directory tree,
 * committing every few operations, and writes the model of what the result
 * must be as JSON (one object per path: type, mode, size, sha256 of the
 * contents, link count, inode, symlink target, xattrs in hex).
 *
 *   fileapi_driver [--recipe NAME] SEED NOPS COMMIT_EVERY MODEL.json DEV...
 *   fileapi_driver --script FILE [--crash-dir DIR --crash-cuts K [--crash-supers S]] DEV...
 *
 * --script: one operation per line (script_line: mkdir, create, write, ..., commit,
 * fsync PATH, crash: the process ends without a commit); with --crash-dir the run is
 * recorded and crash images are made afterwards (crash_cuts.h).
 *
 * Every call's result is checked against what the model expects (success,
 * or the exact errno: -ENOTEMPTY, -EEXIST, ...); file contents are read back
 * through ub_fsw_read and compared after every write and truncate. The
 * verdict on the disk is the test's: btrfs check and the kernel's mount.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <openssl/evp.h>

#include "ubtrfs/format.h"
#include "ubtrfs/fswrite.h"
#include "txn/txn.h"
#include "txn/cleaner.h"
#include "crash_cuts.h"

#define SUBVOL BTRFS_FS_TREE_OBJECTID
#define TOP BTRFS_FIRST_FREE_OBJECTID
#define MAXX 6
#define MAX_FILE (384 * 1024)

struct xat {
	char name[64];
	uint8_t val[200];
	size_t vlen;
};

struct minode {
	uint64_t ino;
	uint32_t mode, uid, gid;
	uint64_t rdev;
	uint8_t *data;
	size_t size;
	unsigned nlink;
	char target[256];
	struct xat x[MAXX];
	int nx;
	bool live;
};

struct dent {
	uint64_t dir;
	char name[64];
	uint64_t ino;
	bool live;
};

static struct minode *g_in;
static size_t g_nin, g_capin;
static struct dent *g_de;
static size_t g_nde, g_capde;
static uint64_t g_rng;
static struct ub_engine *g_e;
static struct ub_txn *g_t;
static long g_ops_done, g_commits;
static bool g_dirty; /* the running transaction changed something */
static bool g_snapshots; /* --snapshots: the random sequence snapshots the FS tree and deletes snapshots */

static uint64_t rnd(void)
{
	g_rng ^= g_rng << 13;
	g_rng ^= g_rng >> 7;
	g_rng ^= g_rng << 17;
	return g_rng;
}
static uint64_t rn(uint64_t n) { return n ? rnd() % n : 0; }

#define FAIL(...) do { fprintf(stderr, "fileapi_driver: op %ld: ", g_ops_done); fprintf(stderr, __VA_ARGS__); \
	fprintf(stderr, "\n"); exit(1); } while (0)

static struct minode *inode_of(uint64_t ino)
{
	for (size_t i = 0; i < g_nin; i++)
		if (g_in[i].live && g_in[i].ino == ino)
			return &g_in[i];
	return NULL;
}

static struct minode *add_inode(uint64_t ino, uint32_t mode)
{
	if (g_nin == g_capin) {
		g_capin = g_capin ? g_capin * 2 : 64;
		g_in = realloc(g_in, g_capin * sizeof(*g_in));
		if (!g_in)
			FAIL("out of memory");
	}
	memset(&g_in[g_nin], 0, sizeof(*g_in));
	g_in[g_nin].ino = ino;
	g_in[g_nin].mode = mode;
	g_in[g_nin].nlink = 1;
	g_in[g_nin].live = true;
	return &g_in[g_nin++];
}

static struct dent *find_dent(uint64_t dir, const char *name)
{
	for (size_t i = 0; i < g_nde; i++)
		if (g_de[i].live && g_de[i].dir == dir && strcmp(g_de[i].name, name) == 0)
			return &g_de[i];
	return NULL;
}

static void add_dent(uint64_t dir, const char *name, uint64_t ino)
{
	if (g_nde == g_capde) {
		g_capde = g_capde ? g_capde * 2 : 64;
		g_de = realloc(g_de, g_capde * sizeof(*g_de));
		if (!g_de)
			FAIL("out of memory");
	}
	g_de[g_nde] = (struct dent){ dir, "", ino, true };
	snprintf(g_de[g_nde].name, sizeof(g_de[g_nde].name), "%s", name);
	g_nde++;
}

static bool dir_has_children(uint64_t dir)
{
	for (size_t i = 0; i < g_nde; i++)
		if (g_de[i].live && g_de[i].dir == dir)
			return true;
	return false;
}

static void drop_inode(struct minode *m)
{
	free(m->data);
	m->data = NULL;
	m->live = false;
}

/* a name gone: the inode loses a link */
static void model_unlink(struct dent *d)
{
	struct minode *m = inode_of(d->ino);

	d->live = false;
	if (S_ISDIR(m->mode) || --m->nlink == 0)
		drop_inode(m);
}

static bool is_dir(uint64_t ino)
{
	struct minode *m = inode_of(ino);
	return m && S_ISDIR(m->mode);
}

static uint64_t pick_dir(void)
{
	uint64_t dirs[512];
	size_t n = 0;

	dirs[n++] = TOP;
	for (size_t i = 0; i < g_nin && n < 512; i++)
		if (g_in[i].live && S_ISDIR(g_in[i].mode) && g_in[i].ino != TOP)
			dirs[n++] = g_in[i].ino;
	return dirs[rn(n)];
}

static struct dent *pick_dent(int want /* 0 any, 1 file, 2 dir, 3 non-dir */)
{
	size_t idx[1024], n = 0;

	for (size_t i = 0; i < g_nde && n < 1024; i++) {
		struct minode *m;
		if (!g_de[i].live)
			continue;
		m = inode_of(g_de[i].ino);
		if ((want == 1 && !S_ISREG(m->mode)) || (want == 2 && !S_ISDIR(m->mode)) ||
		    (want == 3 && S_ISDIR(m->mode)))
			continue;
		idx[n++] = i;
	}
	return n ? &g_de[idx[rn(n)]] : NULL;
}

static void rand_name(char *buf, size_t len)
{
	static const char *stems[] = { "a", "file", "dir", "x", "longer-name-with-more-bytes", "n" };
	snprintf(buf, len, "%s%u", stems[rn(6)], (unsigned)rn(40));
}

static void commit(void)
{
	int ret;

	if (!g_dirty)
		return; /* lib/txn's commit of an empty transaction writes a superblock whose generation the
			 * unchanged root tree block does not have (reported): keep to changed transactions */
	g_dirty = false;
	ret = ub_txn_commit(g_t);

	g_t = NULL;
	if (ret)
		FAIL("commit: %s", strerror(-ret));
	g_commits++;
	ret = ub_txn_start(g_e, &g_t);
	if (ret)
		FAIL("txn start: %s", strerror(-ret));
}

static void expect(int got, int want, const char *what)
{
	if (got != want)
		FAIL("%s: got %d (%s), expected %d", what, got, got ? strerror(-got) : "ok", want);
	if (got == 0)
		g_dirty = true;
}

static void check_content(struct minode *m)
{
	uint8_t *buf = malloc(m->size + 100);
	size_t got = 0;
	int ret;

	if (!buf)
		FAIL("oom");
	ret = ub_fsw_read(g_t, SUBVOL, m->ino, 0, buf, m->size + 100, &got);
	if (ret)
		FAIL("read ino %" PRIu64 ": %s", m->ino, strerror(-ret));
	if (got != m->size || (m->size && memcmp(buf, m->data, m->size)))
		FAIL("ino %" PRIu64 ": contents differ from the model (got %zu bytes, model %zu)", m->ino, got, m->size);
	free(buf);
}

/* ---- operations ---- */

static void op_create(uint32_t type)
{
	uint64_t dir = pick_dir(), ino = 0, rdev = 0;
	uint32_t mode;
	char name[64];
	int ret, want;

	rand_name(name, sizeof(name));
	want = find_dent(dir, name) ? -EEXIST : 0;
	if (type == S_IFCHR || type == S_IFBLK)
		rdev = UB_FSW_MKDEV(1 + rn(200), rn(1000));
	if (type == S_IFLNK) {
		char target[200];
		snprintf(target, sizeof(target), "target/%u/%.*s", (unsigned)rn(100000), (int)rn(150),
			 "................................................................................................................................................................");
		ret = ub_fsw_symlink(g_t, SUBVOL, dir, name, strlen(name), target, strlen(target), 0, 0, &ino);
		expect(ret, want, "symlink");
		if (!ret) {
			struct minode *m = add_inode(ino, S_IFLNK | 0777);
			snprintf(m->target, sizeof(m->target), "%s", target);
			add_dent(dir, name, ino);
		}
		return;
	}
	mode = type | (uint32_t)(0600 + rn(0177));
	uint32_t uid = (uint32_t)rn(3000), gid = (uint32_t)rn(3000);
	ret = ub_fsw_create(g_t, SUBVOL, dir, name, strlen(name), mode, uid, gid, rdev, &ino);
	expect(ret, want, "create");
	if (!ret) {
		struct minode *m = add_inode(ino, mode);
		m->uid = uid;
		m->gid = gid;

		m->rdev = rdev;
		add_dent(dir, name, ino);
	}
}

static void op_write(void)
{
	struct dent *d = pick_dent(1);
	struct minode *m;
	uint64_t off;
	size_t len;
	uint8_t *buf;
	int ret;

	if (!d)
		return;
	m = inode_of(d->ino);
	switch (rn(4)) {
	case 0: off = 0; len = 1 + rn(2100); break;                 /* small: inline or just past it */
	case 1: off = rn(m->size + 1); len = 1 + rn(9000); break;   /* around the end */
	case 2: off = rn(MAX_FILE / 2); len = 1 + rn(70000); break; /* anywhere, holes */
	default: off = m->size ? rn(m->size) : 0; len = 1 + rn(5000); break; /* overwrite inside */
	}
	if (off + len > MAX_FILE)
		len = MAX_FILE - off;
	if (!len)
		return;
	buf = malloc(len);
	int kind = (int)rn(2); /* 1: compressible text */
	for (size_t i = 0; i < len; i++)
		buf[i] = (uint8_t)(kind ? 0x41 + (i / 7) % 26 : rnd());
	if (rn(3) == 0)
		ret = ub_fsw_write_ex(g_t, SUBVOL, m->ino, off, buf, len, 1 + (int)rn(3), 0);
	else
		ret = ub_fsw_write(g_t, SUBVOL, m->ino, off, buf, len);
	expect(ret, 0, "write");
	if (off + len > m->size) {
		m->data = realloc(m->data, off + len);
		memset(m->data + m->size, 0, off + len - m->size);
		m->size = off + len;
	}
	memcpy(m->data + off, buf, len);
	free(buf);
	check_content(m);
}

static void op_truncate(void)
{
	struct dent *d = pick_dent(1);
	struct minode *m;
	uint64_t size;
	int ret;

	if (!d)
		return;
	m = inode_of(d->ino);
	size = rn(3) == 0 ? rn(3000) : rn(MAX_FILE / 2);
	ret = ub_fsw_truncate(g_t, SUBVOL, m->ino, size);
	expect(ret, 0, "truncate");
	if (size > m->size) {
		m->data = realloc(m->data, size);
		memset(m->data + m->size, 0, size - m->size);
	}
	m->size = size;
	check_content(m);
}

static void op_falloc(void)
{
	struct dent *d = pick_dent(1);
	struct minode *m;
	uint64_t off, len;
	bool keep = rn(2), punch = rn(2);
	int ret;

	if (!d)
		return;
	m = inode_of(d->ino);
	off = rn(m->size + 20000);
	len = 1 + rn(60000);
	if (off + len > MAX_FILE)
		return;
	if (punch) {
		ret = ub_fsw_punch_hole(g_t, SUBVOL, m->ino, off, len);
		expect(ret, 0, "punch hole");
		if (off < m->size)
			memset(m->data + off, 0, (off + len < m->size ? off + len : m->size) - off);
	} else {
		ret = ub_fsw_fallocate(g_t, SUBVOL, m->ino, off, len, keep ? UB_FSW_FALLOC_KEEP_SIZE : 0);
		expect(ret, 0, "fallocate");
		if (!keep && off + len > m->size) {
			m->data = realloc(m->data, off + len);
			memset(m->data + m->size, 0, off + len - m->size);
			m->size = off + len;
		}
	}
	check_content(m);
}

static void op_link(void)
{
	struct dent *d = pick_dent(3);
	uint64_t dir = pick_dir();
	char name[64];
	int ret, want;

	if (!d)
		return;
	rand_name(name, sizeof(name));
	want = find_dent(dir, name) ? -EEXIST : 0;
	ret = ub_fsw_link(g_t, SUBVOL, d->ino, dir, name, strlen(name));
	expect(ret, want, "link");
	if (!ret) {
		inode_of(d->ino)->nlink++;
		add_dent(dir, name, d->ino);
	}
}

static void op_unlink(void)
{
	struct dent *d = pick_dent(0);
	int ret;

	if (!d)
		return;
	if (is_dir(d->ino)) {
		bool full = dir_has_children(d->ino);
		ret = ub_fsw_rmdir(g_t, SUBVOL, d->dir, d->name, strlen(d->name));
		expect(ret, full ? -ENOTEMPTY : 0, "rmdir");
		if (!ret)
			model_unlink(d);
		ret = ub_fsw_unlink(g_t, SUBVOL, d->dir, d->name, strlen(d->name));
		expect(ret, full ? -EISDIR : -ENOENT, "unlink of a directory");
		return;
	}
	ret = ub_fsw_rmdir(g_t, SUBVOL, d->dir, d->name, strlen(d->name));
	expect(ret, -ENOTDIR, "rmdir of a non-directory");
	ret = ub_fsw_unlink(g_t, SUBVOL, d->dir, d->name, strlen(d->name));
	expect(ret, 0, "unlink");
	model_unlink(d);
}

static bool ancestor(uint64_t anc, uint64_t dir)
{
	while (dir != TOP) {
		struct dent *p = NULL;
		if (dir == anc)
			return true;
		for (size_t i = 0; i < g_nde; i++)
			if (g_de[i].live && g_de[i].ino == dir)
				p = &g_de[i];
		if (!p)
			return false;
		dir = p->dir;
	}
	return anc == TOP;
}

static void op_rename(void)
{
	struct dent *s = pick_dent(0), *t;
	uint64_t ndir;
	char name[64];
	unsigned flags = 0;
	int ret, want = 0;
	bool sdir, tdir;

	if (!s)
		return;
	/* half the time over an existing name */
	if (rn(2) && (t = pick_dent(0)) != NULL) {
		ndir = t->dir;
		snprintf(name, sizeof(name), "%s", t->name);
	} else {
		ndir = pick_dir();
		rand_name(name, sizeof(name));
	}
	t = find_dent(ndir, name);
	switch (rn(5)) {
	case 0: flags = UB_FSW_RENAME_NOREPLACE; break;
	case 1: flags = UB_FSW_RENAME_EXCHANGE; break;
	}
	sdir = is_dir(s->ino);
	tdir = t && is_dir(t->ino);
	if (t == s)
		want = flags & UB_FSW_RENAME_NOREPLACE ? -EEXIST : 0;
	else if ((flags & UB_FSW_RENAME_EXCHANGE) && !t)
		want = -ENOENT;
	else if ((flags & UB_FSW_RENAME_NOREPLACE) && t)
		want = -EEXIST;
	else if (t && t->ino == s->ino)
		want = 0;
	else if (sdir && ancestor(s->ino, ndir))
		want = -EINVAL;
	else if (tdir && ancestor(t->ino, s->dir))
		want = flags & UB_FSW_RENAME_EXCHANGE ? -EINVAL : -ENOTEMPTY;
	else if (!(flags & UB_FSW_RENAME_EXCHANGE) && t && sdir && !tdir)
		want = -ENOTDIR;
	else if (!(flags & UB_FSW_RENAME_EXCHANGE) && t && !sdir && tdir)
		want = -EISDIR;
	else if (!(flags & UB_FSW_RENAME_EXCHANGE) && t && tdir && dir_has_children(t->ino))
		want = -ENOTEMPTY;
	ret = ub_fsw_rename(g_t, SUBVOL, s->dir, s->name, strlen(s->name), ndir, name, strlen(name), flags);
	{
		bool was = g_dirty;
		expect(ret, want, "rename");
		if (ret || t == s || (t && t->ino == s->ino)) {
			g_dirty = was; /* nothing changed */
			return;
		}
	}
	if (flags & UB_FSW_RENAME_EXCHANGE) {
		uint64_t tmp = s->ino;
		s->ino = t->ino;
		t->ino = tmp;
		return;
	}
	if (t)
		model_unlink(t);
	s->live = false;
	add_dent(ndir, name, s->ino); /* s may have moved: realloc */
}

static void op_xattr(void)
{
	struct dent *d = pick_dent(0);
	struct minode *m;
	char name[64];
	int ret, k = -1;

	if (!d)
		return;
	m = inode_of(d->ino);
	snprintf(name, sizeof(name), "user.%s%u", rn(2) ? "attr" : "x", (unsigned)rn(8));
	for (int i = 0; i < m->nx; i++)
		if (strcmp(m->x[i].name, name) == 0)
			k = i;
	if (!S_ISREG(m->mode) && !S_ISDIR(m->mode))
		return; /* the kernel allows user.* xattrs on regular files and directories only */
	if (rn(3) == 0) {
		ret = ub_fsw_removexattr(g_t, SUBVOL, m->ino, name, strlen(name));
		expect(ret, k >= 0 ? 0 : -ENODATA, "removexattr");
		if (k >= 0)
			m->x[k] = m->x[--m->nx];
		return;
	}
	if (k < 0 && m->nx == MAXX)
		return;
	{
		struct xat x;
		snprintf(x.name, sizeof(x.name), "%s", name);
		x.vlen = rn(sizeof(x.val));
		for (size_t i = 0; i < x.vlen; i++)
			x.val[i] = (uint8_t)rnd();
		ret = ub_fsw_setxattr(g_t, SUBVOL, m->ino, name, strlen(name), x.val, x.vlen, 0);
		expect(ret, 0, "setxattr");
		if (k >= 0)
			m->x[k] = x;
		else
			m->x[m->nx++] = x;
	}
}

static void op_chmod(void)
{
	struct dent *d = pick_dent(0);
	struct minode *m;
	struct ub_fsw_attr a = { .valid = UB_FSW_ATTR_MODE | UB_FSW_ATTR_UID };

	if (!d)
		return;
	m = inode_of(d->ino);
	if (S_ISLNK(m->mode))
		return;
	a.mode = (uint32_t)(0400 + rn(0377));
	a.uid = (uint32_t)rn(5000);
	expect(ub_fsw_setattr(g_t, SUBVOL, m->ino, &a), 0, "setattr");
	m->mode = (m->mode & S_IFMT) | a.mode;
	m->uid = a.uid;
}

static void op_snapshot(void);

static void one_op(void)
{
	unsigned r = (unsigned)rn(100);

	if (r < 12) op_create(S_IFREG);
	else if (r < 18) op_create(S_IFDIR);
	else if (r < 21) op_create(rn(4) == 0 ? S_IFCHR : rn(3) == 0 ? S_IFBLK : rn(2) ? S_IFIFO : S_IFSOCK);
	else if (r < 25) op_create(S_IFLNK);
	else if (r < 47) op_write();
	else if (r < 51) op_truncate();
	else if (r < 54) op_falloc();
	else if (r < 60) op_link();
	else if (r < 70) op_unlink();
	else if (r < 82) op_rename();
	else if (r < 95) op_xattr();
	else if (r < 98 || !g_snapshots) op_chmod();
	else op_snapshot();
}

/* ---- the model as JSON ---- */

static void sha256_hex(const uint8_t *d, size_t n, char out[65])
{
	unsigned char h[32];
	unsigned hl = 0;

	EVP_Digest(d, n, h, &hl, EVP_sha256(), NULL);
	for (int i = 0; i < 32; i++)
		sprintf(out + 2 * i, "%02x", h[i]);
}

static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fputc('\\', f);
		fputc(*s, f);
	}
	fputc('"', f);
}

static bool first_entry;

/* snapshots of the FS tree in the top directory: their frozen model, as JSON entries */
struct snap {
	char name[32];
	char *json; /* ",\n  \"/snapN/...\": {...}" entries, or "" */
};
static struct snap g_snaps[64];
static int g_nsnaps, g_snapseq;

static void dump_dir(FILE *f, uint64_t dir, const char *path, int depth)
{
	for (size_t i = 0; i < g_nde; i++) {
		struct dent *d = &g_de[i];
		struct minode *m;
		char p[4096], hex[65];

		if (!d->live || d->dir != dir)
			continue;
		m = inode_of(d->ino);
		snprintf(p, sizeof(p), "%s/%s", path, d->name);
		fprintf(f, "%s\n  ", first_entry ? "" : ",");
		first_entry = false;
		json_str(f, p);
		fprintf(f, ": {\"ino\": %" PRIu64 ", \"uid\": %u, \"gid\": %u, \"mode\": %u, \"type\": \"%s\"", m->ino,
			m->uid, m->gid, m->mode & 07777,
			S_ISREG(m->mode) ? "file" : S_ISDIR(m->mode) ? "dir" : S_ISLNK(m->mode) ? "symlink" :
			S_ISCHR(m->mode) ? "chr" : S_ISBLK(m->mode) ? "blk" : S_ISFIFO(m->mode) ? "fifo" : "sock");
		if (!S_ISDIR(m->mode))
			fprintf(f, ", \"nlink\": %u", m->nlink);
		if (S_ISREG(m->mode)) {
			sha256_hex(m->data ? m->data : (const uint8_t *)"", m->size, hex);
			fprintf(f, ", \"size\": %zu, \"sha256\": \"%s\"", m->size, hex);
		}
		if (S_ISLNK(m->mode)) {
			fprintf(f, ", \"target\": ");
			json_str(f, m->target);
		}
		if (S_ISCHR(m->mode) || S_ISBLK(m->mode))
			fprintf(f, ", \"rdev_major\": %" PRIu64 ", \"rdev_minor\": %" PRIu64, m->rdev >> 20, m->rdev & 0xfffff);
		fprintf(f, ", \"xattrs\": {");
		for (int k = 0; k < m->nx; k++) {
			fprintf(f, "%s", k ? ", " : "");
			json_str(f, m->x[k].name);
			fprintf(f, ": \"");
			for (size_t b = 0; b < m->x[k].vlen; b++)
				fprintf(f, "%02x", m->x[k].val[b]);
			fprintf(f, "\"");
		}
		fprintf(f, "}}");
		if (S_ISDIR(m->mode) && depth < 64)
			dump_dir(f, m->ino, p, depth + 1);
	}
}


/* ---- script mode: one operation per line, paths from the top directory ---- */

static uint64_t g_sv; /* script mode: the subvolume the last resolve() ended in (its parent directory's) */

/* path -> parent directory (in subvolume g_sv) and last name; with ino, the name's inode too (g_isv) */
static uint64_t g_isv;
static int resolve(const char *path, uint64_t *dir, char *last, uint64_t *ino)
{
	char buf[4096], *save = NULL, *tok, *next;
	uint64_t cur = TOP, sv = SUBVOL;
	int ret = 0;

	snprintf(buf, sizeof(buf), "%s", path);
	tok = strtok_r(buf, "/", &save);
	if (!tok)
		return -EINVAL;
	for (;;) {
		next = strtok_r(NULL, "/", &save);
		if (!next) {
			*dir = cur;
			g_sv = sv;
			snprintf(last, 256, "%s", tok);
			if (ino)
				ret = ub_fsw_lookup_at(g_t, sv, cur, tok, strlen(tok), &g_isv, ino, NULL);
			return ret;
		}
		ret = ub_fsw_lookup_at(g_t, sv, cur, tok, strlen(tok), &sv, &cur, NULL);
		if (ret)
			return ret;
		tok = next;
	}
}

static int unhex(const char *h, uint8_t *out, size_t cap, size_t *n)
{
	size_t l = strlen(h);

	if (l % 2 || l / 2 > cap)
		return -EINVAL;
	for (size_t i = 0; i < l / 2; i++) {
		unsigned v;
		if (sscanf(h + 2 * i, "%2x", &v) != 1)
			return -EINVAL;
		out[i] = (uint8_t)v;
	}
	*n = l / 2;
	return 0;
}

/* names in scripts are hex when they start with "x:" (crafted hash collisions) */
static size_t name_arg(const char *in, char *out, size_t cap)
{
	size_t n = 0;

	if (strncmp(in, "hex:", 4) == 0 && unhex(in + 4, (uint8_t *)out, cap - 1, &n) == 0) {
		out[n] = 0;
		return n;
	}
	snprintf(out, cap, "%s", in);
	return strlen(out);
}

/*
 * The cleaner (lib/txn/cleaner.h), `calls` times (0: until no dead root is
 * left), each call its own transaction of at most `budget` blocks; the
 * running transaction is committed first and a fresh one started after.
 */
static long g_clean_calls;

static int run_clean(uint64_t budget, long calls, long *ran, bool *more)
{
	int ret = 0;

	if (g_dirty)
		commit();
	ub_txn_abort(g_t);
	g_t = NULL;
	*ran = 0;
	*more = true;
	while (*more && (calls <= 0 || *ran < calls)) {
		ret = ub_engine_clean(g_e, budget, more);
		if (ret)
			break;
		(*ran)++;
		g_clean_calls++;
	}
	if (ub_txn_start(g_e, &g_t))
		FAIL("txn start after clean");
	return ret;
}

/* clean BUDGET [CALLS]: run_clean, printing how many calls ran and whether work is left. */
static int script_clean(int argc, char **argv)
{
	long n;
	bool more;
	int ret = run_clean(strtoull(argv[1], NULL, 0), argc > 2 ? strtol(argv[2], NULL, 0) : 0, &n, &more);

	printf("clean: %ld calls, %s\n", n, more ? "more" : "done");
	fflush(stdout);
	return ret;
}

static int script_line(char *line)
{
	char *argv[8], *save = NULL, last[256], last2[256];
	uint64_t dir, dir2, ino;
	int argc = 0, ret;

	for (char *tok = strtok_r(line, " \t\n", &save); tok && argc < 8; tok = strtok_r(NULL, " \t\n", &save))
		argv[argc++] = tok;
	if (argc == 0 || argv[0][0] == '#')
		return 0;
#define NEED(n) do { if (argc < (n)) return -EINVAL; } while (0)
	if (strcmp(argv[0], "commit") == 0) {
		g_dirty = true;
		commit();
		return 0;
	}
	if (strcmp(argv[0], "crash") == 0) {
		/* the process dies here: the disk holds the last commit and what fsync logged */
		fflush(stdout);
		fflush(stderr);
		_exit(0);
	}
	NEED(2);
	if (strcmp(argv[0], "fsync") == 0) {
		/* says on stdout whether the fsync wrote the log or committed (the test's model needs it) */
		uint64_t before = g_e->sealed;

		ret = resolve(argv[1], &dir, last, &ino);
		if (!ret)
			ret = ub_fsw_fsync(g_t, g_isv, ino, false);
		if (!ret) {
			printf("fsync %s %s\n", argv[1], g_e->sealed != before ? "commit" : "log");
			fflush(stdout);
		}
		return ret;
	}
	if (strcmp(argv[0], "mkdir") == 0 || strcmp(argv[0], "create") == 0) {
		NEED(3);
		ret = resolve(argv[1], &dir, last, NULL);
		uint32_t mode = (uint32_t)strtoul(argv[2], NULL, 8);
		return ret ? ret : argv[0][0] == 'm' ? ub_fsw_mkdir(g_t, g_sv, dir, last, strlen(last), mode, 0, 0, &ino)
			: ub_fsw_create(g_t, g_sv, dir, last, strlen(last), S_IFREG | mode, 0, 0, 0, &ino);
	}
	if (strcmp(argv[0], "mknod") == 0) {
		NEED(5);
		uint32_t type = argv[2][0] == 'c' ? S_IFCHR : argv[2][0] == 'b' ? S_IFBLK : argv[2][0] == 'p' ? S_IFIFO : S_IFSOCK;
		ret = resolve(argv[1], &dir, last, NULL);
		return ret ? ret : ub_fsw_create(g_t, g_sv, dir, last, strlen(last), type | 0644, 0, 0,
						 UB_FSW_MKDEV(atoi(argv[3]), atoi(argv[4])), &ino);
	}
	if (strcmp(argv[0], "symlink") == 0) {
		NEED(3);
		ret = resolve(argv[1], &dir, last, NULL);
		return ret ? ret : ub_fsw_symlink(g_t, g_sv, dir, last, strlen(last), argv[2], strlen(argv[2]), 0, 0, &ino);
	}
	if (strcmp(argv[0], "link") == 0) {
		NEED(3);
		uint64_t isv;
		ret = resolve(argv[1], &dir, last, &ino);
		isv = g_isv;
		if (!ret)
			ret = resolve(argv[2], &dir2, last2, NULL);
		if (!ret && isv != g_sv)
			return -EXDEV;
		return ret ? ret : ub_fsw_link(g_t, g_sv, ino, dir2, last2, strlen(last2));
	}
	if (strcmp(argv[0], "unlink") == 0 || strcmp(argv[0], "rmdir") == 0) {
		char nm[300];
		size_t nl;
		char *slash = strrchr(argv[1], '/');
		ret = resolve(argv[1], &dir, last, NULL);
		nl = name_arg(slash ? slash + 1 : argv[1], nm, sizeof(nm));
		if (ret)
			return ret;
		return argv[0][0] == 'u' ? ub_fsw_unlink(g_t, g_sv, dir, nm, nl) : ub_fsw_rmdir(g_t, g_sv, dir, nm, nl);
	}
	if (strcmp(argv[0], "rename") == 0) {
		unsigned flags = 0;
		NEED(3);
		if (argc > 3)
			flags = strcmp(argv[3], "exchange") == 0 ? UB_FSW_RENAME_EXCHANGE : UB_FSW_RENAME_NOREPLACE;
		uint64_t sv1;
		ret = resolve(argv[1], &dir, last, NULL);
		sv1 = g_sv;
		if (!ret)
			ret = resolve(argv[2], &dir2, last2, NULL);
		if (!ret && sv1 != g_sv)
			return -EXDEV;
		return ret ? ret : ub_fsw_rename(g_t, g_sv, dir, last, strlen(last), dir2, last2, strlen(last2), flags);
	}
	if (strcmp(argv[0], "write") == 0) {
		/* write PATH OFF LEN SEED: bytes of a xorshift stream the test reproduces */
		uint64_t off, len, st;
		uint8_t *buf;
		NEED(5);
		ret = resolve(argv[1], &dir, last, &ino);
		if (ret)
			return ret;
		off = strtoull(argv[2], NULL, 0);
		len = strtoull(argv[3], NULL, 0);
		st = strtoull(argv[4], NULL, 0) | 1;
		buf = malloc(len ? len : 1);
		for (uint64_t i = 0; i < len; i++) {
			st ^= st << 13;
			st ^= st >> 7;
			st ^= st << 17;
			buf[i] = (uint8_t)(st >> 24);
		}
		ret = ub_fsw_write(g_t, g_isv, ino, off, buf, len);
		free(buf);
		return ret;
	}
	if (strcmp(argv[0], "writec") == 0) {
		/* writec PATH OFF LEN SEED ALGO(zlib|lzo|zstd): as write, compressed; the stream is compressible */
		uint64_t off, len, st;
		uint8_t *buf;
		int algo;
		NEED(6);
		ret = resolve(argv[1], &dir, last, &ino);
		if (ret)
			return ret;
		off = strtoull(argv[2], NULL, 0);
		len = strtoull(argv[3], NULL, 0);
		st = strtoull(argv[4], NULL, 0);
		algo = argv[5][1] == 'l' ? UB_COMPRESS_ZLIB : argv[5][1] == 'z' ? UB_COMPRESS_LZO : UB_COMPRESS_ZSTD;
		buf = malloc(len ? len : 1);
		for (uint64_t i = 0; i < len; i++)
			buf[i] = (uint8_t)('a' + (i / 11 + st) % 26);
		ret = ub_fsw_write_ex(g_t, g_isv, ino, off, buf, len, algo, 0);
		free(buf);
		return ret;
	}
	if (strcmp(argv[0], "fallocate") == 0 || strcmp(argv[0], "punch") == 0) {
		NEED(4);
		ret = resolve(argv[1], &dir, last, &ino);
		if (ret)
			return ret;
		if (argv[0][0] == 'p')
			return ub_fsw_punch_hole(g_t, g_isv, ino, strtoull(argv[2], NULL, 0), strtoull(argv[3], NULL, 0));
		return ub_fsw_fallocate(g_t, g_isv, ino, strtoull(argv[2], NULL, 0), strtoull(argv[3], NULL, 0),
					argc > 4 ? UB_FSW_FALLOC_KEEP_SIZE : 0);
	}
	if (strcmp(argv[0], "truncate") == 0) {
		NEED(3);
		ret = resolve(argv[1], &dir, last, &ino);
		return ret ? ret : ub_fsw_truncate(g_t, g_isv, ino, strtoull(argv[2], NULL, 0));
	}
	if (strcmp(argv[0], "chmod") == 0) {
		struct ub_fsw_attr a = { .valid = UB_FSW_ATTR_MODE };
		NEED(3);
		a.mode = (uint32_t)strtoul(argv[2], NULL, 8);
		ret = resolve(argv[1], &dir, last, &ino);
		return ret ? ret : ub_fsw_setattr(g_t, g_isv, ino, &a);
	}
	if (strcmp(argv[0], "setxattr") == 0 || strcmp(argv[0], "removexattr") == 0) {
		char nm[300];
		uint8_t val[4096];
		size_t nl, vl = 0;
		NEED(3);
		ret = resolve(argv[1], &dir, last, &ino);
		if (ret)
			return ret;
		nl = name_arg(argv[2], nm, sizeof(nm));
		if (argv[0][0] == 'r')
			return ub_fsw_removexattr(g_t, g_isv, ino, nm, nl);
		NEED(4);
		if (unhex(argv[3], val, sizeof(val), &vl))
			return -EINVAL;
		return ub_fsw_setxattr(g_t, g_isv, ino, nm, nl, val, vl, 0);
	}
	if (strcmp(argv[0], "subvol") == 0) {
		ret = resolve(argv[1], &dir, last, NULL);
		return ret ? ret : ub_fsw_subvol_create(g_t, g_sv, dir, last, strlen(last), &ino);
	}
	if (strcmp(argv[0], "snapshot") == 0) {
		/* snapshot SRC DST [ro]: SRC names a subvolume */
		uint64_t src;
		NEED(3);
		ret = resolve(argv[1], &dir, last, &ino);
		src = g_isv;
		if (!ret && ino != TOP)
			return -ENOTDIR;
		if (!ret)
			ret = resolve(argv[2], &dir2, last2, NULL);
		return ret ? ret : ub_fsw_snapshot(g_t, src, g_sv, dir2, last2, strlen(last2), argc > 3, &ino);
	}
	if (strcmp(argv[0], "clean") == 0)
		return script_clean(argc, argv);
	if (strcmp(argv[0], "autoclean") == 0) {
		/* autoclean BLOCKS: the cleaning step that follows each commit (0: only "clean" cleans) */
		ub_engine_set_clean_step(g_e, strtoull(argv[1], NULL, 0));
		return 0;
	}
	if (strcmp(argv[0], "subvoldel") == 0) {
		ret = resolve(argv[1], &dir, last, NULL);
		return ret ? ret : ub_fsw_subvol_delete(g_t, g_sv, dir, last, strlen(last));
	}
	if (strcmp(argv[0], "createhex") == 0) {
		char nm[300];
		size_t nl;
		char *slash = strrchr(argv[1], '/');
		ret = resolve(argv[1], &dir, last, NULL);
		nl = name_arg(slash ? slash + 1 : argv[1], nm, sizeof(nm));
		return ret ? ret : ub_fsw_create(g_t, g_sv, dir, nm, nl, S_IFREG | 0644, 0, 0, 0, &ino);
	}
	return -EINVAL;
#undef NEED
}

/* each line: [!ERRNO] OP ARGS...; "!17 mkdir /a 755" expects -EEXIST */
static int run_script(const char *path)
{
	char line[8192];
	long n = 0;
	FILE *f = fopen(path, "r");

	if (!f)
		FAIL("%s: %s", path, strerror(errno));
	while (fgets(line, sizeof(line), f)) {
		char *l = line;
		int want = 0, ret;

		n++;
		if (l[0] == '@')
			l++; /* a line for the file API only (the kernel's reference run skips it) */
		if (l[0] == '!') {
			want = -atoi(l + 1);
			l = strchr(l, ' ');
			if (!l)
				FAIL("script line %ld: no operation", n);
		}
		ret = script_line(l);
		if (ret != want)
			FAIL("script line %ld (%s): got %d (%s), expected %d", n, line, ret, strerror(-ret), want);
		if (!ret)
			g_dirty = true;
	}
	fclose(f);
	return 0;
}

static void op_snapshot(void)
{
	char *buf = NULL;
	size_t blen = 0;
	uint64_t id;
	FILE *f;
	int ret;

	if (g_nsnaps > 0 && rn(2)) {
		/* the newest goes (older ones are placeholders inside it) */
		struct snap *sn = &g_snaps[--g_nsnaps];
		ret = ub_fsw_subvol_delete(g_t, SUBVOL, TOP, sn->name, strlen(sn->name));
		expect(ret, 0, "subvolume delete");
		free(sn->json);
		/* sometimes the cleaner drops it now, in a few small steps or whole; else the kernel does */
		if (rn(2)) {
			long n;
			bool more;

			g_dirty = true;
			expect(run_clean(1 + rn(8), rn(3), &n, &more), 0, "clean");
		}
		return;
	}
	if (g_nsnaps == 64)
		return;
	struct snap *sn = &g_snaps[g_nsnaps];
	snprintf(sn->name, sizeof(sn->name), "snap%d", ++g_snapseq);
	/* the snapshot holds the tree as it is now, this transaction's changes included, and commits them */
	ret = ub_fsw_snapshot(g_t, SUBVOL, SUBVOL, TOP, sn->name, strlen(sn->name), false, &id);
	expect(ret, 0, "snapshot");
	f = open_memstream(&buf, &blen);
	if (!f)
		FAIL("oom");
	/* its top directory, the model as it is now, and the older snapshots as empty placeholders */
	fprintf(f, ",\n  \"/%s\": {\"ino\": 256, \"mode\": %u, \"type\": \"dir\", \"xattrs\": {}}", sn->name, 0755);
	for (int k = 0; k < g_nsnaps; k++)
		fprintf(f, ",\n  \"/%s/%s\": {\"ino\": 2, \"mode\": %u, \"type\": \"dir\", \"xattrs\": {}}", sn->name,
			g_snaps[k].name, 0755);
	{
		char prefix[64];
		snprintf(prefix, sizeof(prefix), "/%s", sn->name);
		first_entry = false;
		dump_dir(f, TOP, prefix, 0);
	}
	if (fclose(f))
		FAIL("oom");
	sn->json = buf;
	g_nsnaps++;
}

static void usage(void)
{
	fprintf(stderr, "usage: fileapi_driver SEED NOPS COMMIT_EVERY MODEL.json DEV...\n"
			"       fileapi_driver --script FILE [--crash-dir DIR --crash-cuts K [--crash-supers S]] DEV...\n");
	exit(2);
}

/* ---- crash images of a script run ---- */

static const char *g_crash_dir;
static long g_crash_cuts, g_crash_supers;
static int g_ndevs;

/*
 * The script's devices, after its crash options: recorded from the open on
 * when --crash-dir is given (the bases saved first), so that afterwards the
 * images of a crash at K points spread over the run, and at both sides of
 * every S-th superblock write, can be made.
 */
static int open_script_devs(int argc, char **argv, struct ub_rec_log **rlog)
{
	struct ub_dev *devs[16];
	int i = 0, ret = 0;

	for (; i + 1 < argc && strncmp(argv[i], "--crash-", 8) == 0; i += 2) {
		if (strcmp(argv[i], "--crash-dir") == 0)
			g_crash_dir = argv[i + 1];
		else if (strcmp(argv[i], "--crash-cuts") == 0)
			g_crash_cuts = atol(argv[i + 1]);
		else if (strcmp(argv[i], "--crash-supers") == 0)
			g_crash_supers = atol(argv[i + 1]);
		else
			usage();
	}
	g_ndevs = argc - i;
	if (g_ndevs < 1 || g_ndevs > 16 || (g_crash_dir && g_crash_cuts < 0) || (!g_crash_dir && g_crash_cuts))
		usage();
	if (!g_crash_dir)
		return ub_engine_open((const char *const *)argv + i, g_ndevs, NULL, &g_e);
	ret = crash_save_bases(g_crash_dir, argv + i, g_ndevs);
	if (!ret)
		ret = ub_rec_log_new(rlog);
	for (int d = 0; d < g_ndevs; d++) {
		struct ub_dev *inner = NULL;
		if (!ret)
			ret = ub_dev_open(argv[i + d], true, &inner);
		if (!ret)
			ret = ub_dev_open_recorder(inner, *rlog, d, &inner);
		devs[d] = ret ? NULL : inner;
	}
	if (ret) {
		for (int d = 0; d < g_ndevs; d++)
			ub_dev_close(devs[d]);
		return ret;
	}
	return ub_engine_open_devs(devs, g_ndevs, NULL, &g_e);
}

int main(int argc, char **argv)
{
	long nops, every;
	FILE *f;
	int ret;

	if (argc >= 4 && strcmp(argv[1], "--script") == 0) {
		struct ub_rec_log *rlog = NULL;
		ret = open_script_devs(argc - 3, argv + 3, &rlog);
		if (ret) {
			fprintf(stderr, "fileapi_driver: open: %s\n", strerror(-ret));
			return 1;
		}
		ret = ub_txn_start(g_e, &g_t);
		if (ret)
			FAIL("txn start: %s", strerror(-ret));
		run_script(argv[2]);
		if (g_dirty) {
			ret = ub_txn_commit(g_t);
			if (ret)
				FAIL("last commit: %s", strerror(-ret));
			g_commits++;
		} else {
			ub_txn_abort(g_t);
		}
		ub_engine_close(g_e);
		printf("script done commits %ld\n", g_commits);
		if (rlog) {
			ret = crash_make_cuts(rlog, g_crash_dir, g_ndevs, g_crash_cuts, g_crash_supers);
			ub_rec_log_put(rlog);
			if (ret)
				FAIL("crash images: %s", strerror(-ret));
		}
		return 0;
	}
	if (argc > 1 && strcmp(argv[1], "--snapshots") == 0) {
		g_snapshots = true;
		argv++;
		argc--;
	}
	if (argc < 6)
		usage();
	g_rng = strtoull(argv[1], NULL, 0) * 0x9e3779b97f4a7c15ULL + 0x1234567;
	if (!g_rng)
		g_rng = 1;
	nops = atol(argv[2]);
	every = atol(argv[3]);
	if (nops < 0 || every < 1)
		usage();
	ret = ub_engine_open((const char *const *)argv + 5, argc - 5, NULL, &g_e);
	if (ret) {
		fprintf(stderr, "fileapi_driver: open: %s\n", strerror(-ret));
		return 1;
	}
	add_inode(TOP, S_IFDIR | 0755);
	ret = ub_txn_start(g_e, &g_t);
	if (ret)
		FAIL("txn start: %s", strerror(-ret));
	for (g_ops_done = 0; g_ops_done < nops; g_ops_done++) {
		one_op();
		if ((g_ops_done + 1) % every == 0)
			commit();
	}
	/* every file read back once more through the transaction */
	for (size_t i = 0; i < g_nin; i++)
		if (g_in[i].live && S_ISREG(g_in[i].mode))
			check_content(&g_in[i]);
	if (g_dirty) {
		ret = ub_txn_commit(g_t);
		if (ret)
			FAIL("last commit: %s", strerror(-ret));
		g_commits++;
	} else {
		ub_txn_abort(g_t);
	}
	g_t = NULL;
	ub_engine_close(g_e);
	f = fopen(argv[4], "w");
	if (!f)
		FAIL("%s: %s", argv[4], strerror(errno));
	fprintf(f, "{");
	first_entry = true;
	dump_dir(f, TOP, "", 0);
	for (int k = 0; k < g_nsnaps; k++) {
		fputs(first_entry ? g_snaps[k].json + 1 : g_snaps[k].json, f);
		first_entry = false;
		free(g_snaps[k].json);
	}
	fprintf(f, "\n}\n");
	if (fclose(f))
		FAIL("%s: write failed", argv[4]);
	printf("ops %ld commits %ld cleaner calls %ld\n", nops, g_commits, g_clean_calls);
	for (size_t i = 0; i < g_nin; i++)
		free(g_in[i].data);
	free(g_in);
	free(g_de);
	return 0;
}
