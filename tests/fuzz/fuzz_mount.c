/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the mount's operations: the inputs of fuzz_image (a
 * real image and mutations of it: fuzz_image.c, image_harness.h), and on
 * every one of them the calls the FUSE operations make (cmd/mount_core.c,
 * the same code `ubtrfs mount` serves with), in the order a walk of the
 * mount makes them: readdir and readdirplus of every directory (a listing
 * in several buffers, resumed at each entry's offset), lookup and getattr of
 * every entry, read of every file, readlink, listxattr and getxattr of each
 * name, statfs.
 *
 * Byte 1 of the input: bit 0 without the fsync log (-o nologreplay).
 *
 * At exit: executions, how many mounted, how many served some file bytes.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "ubtrfs/devinfo.h"
#include "ubtrfs/fsinfo.h"
#include "image_harness.h"
#include "mount.h"

/* Bounds on one execution: the walk stops there. */
#define MAX_NODES 2048          /* directories and files visited */
#define MAX_FILE (1U << 20)     /* bytes read from one file */
#define MAX_READ (16U << 20)    /* bytes read in all */
#define LIST_BUF 1024           /* a small readdir buffer: listings take several calls */

static unsigned long long st_execs, st_mounted, st_read;
static volatile size_t touched;

static void print_stats(void)
{
	if (!st_execs)
		return;
	fprintf(stderr, "fuzz_mount: %llu executions: %.1f%% mounted, %.1f%% read some file bytes\n", st_execs,
		100.0 * (double)st_mounted / (double)st_execs, 100.0 * (double)st_read / (double)st_execs);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fuzz_images_load("fuzz_mount");
	atexit(print_stats);
	return 0;
}

struct name {
	char s[UB_NAME_LEN + 1];
	off_t off;
	uint64_t node;
	mode_t mode;
};

/* One listing call's entries, as a FUSE buffer of LIST_BUF bytes would take them. */
struct listing {
	struct name *v;
	int n, cap;
	size_t used;
};

static void names_push(struct listing *l, const char *name, off_t off, uint64_t node, mode_t mode)
{
	if (l->n == l->cap) {
		int cap = l->cap ? l->cap * 2 : 32;
		struct name *v = realloc(l->v, sizeof(*v) * (size_t)cap);

		if (!v)
			abort();
		l->v = v;
		l->cap = cap;
	}
	snprintf(l->v[l->n].s, sizeof(l->v[l->n].s), "%s", name);
	l->v[l->n].off = off;
	l->v[l->n].node = node;
	l->v[l->n].mode = mode;
	l->n++;
}

static bool list_add(void *arg, const char *name, const struct stat *st, uint64_t node, off_t off)
{
	struct listing *l = arg;
	size_t len = strlen(name);
	/* what fuse_add_direntry takes: a 24-byte header and the name rounded up to 8 */
	size_t need = 24 + ((len + 7) & ~(size_t)7);

	if (len == 0 || len > UB_NAME_LEN || strchr(name, '/'))
		abort(); /* a name no directory may hold reached FUSE */
	if (l->used + need > LIST_BUF)
		return true;
	names_push(l, name, off, node, st->st_mode);
	l->used += need;
	return false;
}

struct walk_state {
	struct mount_ctx *mc;
	uint64_t queue[MAX_NODES];
	int nq, visited;
	uint64_t bytes;
	bool read_any;
};

static void file_ops(struct walk_state *ws, uint64_t id, const struct stat *st)
{
	static char buf[64 * 1024];
	char link[4096], names[4096], value[4096];
	size_t len = 0;

	if (S_ISREG(st->st_mode)) {
		uint64_t off = 0, limit = (uint64_t)st->st_size < MAX_FILE ? (uint64_t)st->st_size : MAX_FILE;

		while (off < limit && ws->bytes < MAX_READ) {
			uint64_t got = 0;
			size_t want = limit - off < sizeof(buf) ? (size_t)(limit - off) : sizeof(buf);

			if (mount_read(ws->mc, id, off, want, buf, &got) || got == 0)
				break;
			if (got > want)
				abort(); /* more than asked for: the buffer overflowed */
			ws->read_any = true;
			ws->bytes += got;
			off += got;
		}
	} else if (S_ISLNK(st->st_mode)) {
		if (mount_readlink(ws->mc, id, link, sizeof(link)) == 0)
			touched += strlen(link);
	}
	if (mount_listxattr(ws->mc, id, NULL, 0, &len) == 0 && len <= sizeof(names) &&
	    mount_listxattr(ws->mc, id, names, sizeof(names), &len) == 0) {
		for (size_t p = 0; p < len;) {
			size_t n = strnlen(names + p, len - p), vlen = 0;

			if (n == len - p)
				abort(); /* a name without its terminator */
			if (mount_getxattr(ws->mc, id, names + p, NULL, 0, &vlen) == 0 && vlen <= sizeof(value))
				mount_getxattr(ws->mc, id, names + p, value, sizeof(value), &vlen);
			p += n + 1;
		}
	}
}

/* A directory listed as the kernel lists it: calls of one small buffer each, resumed at the last offset. */
static void list_dir(struct walk_state *ws, uint64_t dir, bool plus)
{
	struct listing all = { 0 };
	off_t off = 0;

	for (int calls = 0; calls < 256; calls++) {
		struct listing l = { 0 };
		int ret = mount_readdir(ws->mc, dir, off, plus, UINT64_MAX, list_add, &l);

		for (int i = 0; i < l.n; i++) {
			if (l.v[i].off <= off)
				abort(); /* an offset that does not move on: the kernel would list forever */
			off = l.v[i].off;
			if (all.n < MAX_NODES)
				names_push(&all, l.v[i].s, l.v[i].off, l.v[i].node, l.v[i].mode);
		}
		free(l.v);
		if (ret || l.n == 0)
			break;
	}
	for (int i = 0; i < all.n && ws->visited < MAX_NODES; i++) {
		struct stat st;
		uint64_t id;
		const char *name = all.v[i].s;

		if (!strcmp(name, ".") || !strcmp(name, ".."))
			continue;
		ws->visited++;
		/* (a lookup goes by the name's hash item, a listing by the index: on damage they may disagree) */
		if (mount_lookup(ws->mc, dir, name, &id, &st))
			continue;
		mount_getattr(ws->mc, id, &st);
		if (S_ISDIR(st.st_mode)) {
			if (ws->nq < MAX_NODES)
				ws->queue[ws->nq++] = id;
		} else {
			file_ops(ws, id, &st);
		}
	}
	free(all.v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fimage *img = fuzz_apply(data, size);
	struct mount_ctx mc = { 0 };
	struct walk_state *ws;
	struct statvfs sv;
	struct stat st;
	uint64_t subvol, ino;

	if (!img)
		return 0;
	st_execs++;
	ws = calloc(1, sizeof(*ws));
	if (!ws)
		abort();
	if (fuzz_open_image(img, data[1] & 1, &fuzz_quiet_log, &mc.fs) == 0) {
		const uint8_t *sb = ub_volume_super(ub_fs_volume(mc.fs));

		mc.sectorsize = (uint32_t)UB_GET(ub_disk_super, sectorsize, sb);
		mc.total_bytes = UB_GET(ub_disk_super, total_bytes, sb);
		mc.bytes_used = UB_GET(ub_disk_super, bytes_used, sb);
		if (mc.bytes_used > mc.total_bytes)
			mc.bytes_used = mc.total_bytes;
		/* as cmd_mount: the top-level directory is node 1 */
		if (ub_path_lookup(mc.fs, "/", &subvol, &ino) == 0 && (mc.root_subvol = subvol) != 0 &&
		    mount_map_new(&mc.map) == 0 &&
		    mount_map_get(mc.map, subvol, ino, 0, 1, 0, NULL) == 1) {
			st_mounted++;
			ws->mc = &mc;
			mount_statfs(&mc, &sv);
			mount_getattr(&mc, 1, &st);
			ws->queue[ws->nq++] = 1;
			/* breadth first; plain readdir and readdirplus by turns, as the kernel may use either */
			for (int i = 0; i < ws->nq && ws->visited < MAX_NODES; i++)
				list_dir(ws, ws->queue[i], (i & 1) == 0);
			/* ids never handed out, and a name looked up twice */
			mount_getattr(&mc, UINT64_MAX, &st);
			mount_lookup(&mc, 1, "..", &subvol, &st);
			st_read += ws->read_any;
		}
		mount_map_free(mc.map);
		ub_fs_close(mc.fs);
	}
	free(ws);
	fuzz_undo(img);
	return 0;
}
