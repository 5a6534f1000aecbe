/* SPDX-License-Identifier: MIT */
/*
 * mkfs --rootdir: fill a freshly made filesystem from a folder through the
 * write engine's file API (include/ubtrfs/fswrite.h), so that the items are
 * the ones the kernel would write for the same sequence of system calls.
 *
 * The walk is depth first with directory file descriptors (openat), so path
 * length never limits it; a directory's own times are set after its children
 * are in (adding names moves them). Hard links: every non-directory with
 * st_nlink > 1 is remembered by (st_dev, st_ino); its later names become
 * ub_fsw_link calls, and the times of such inodes are set once more at the end
 * (a link moves ctime). Regular files are copied by their data ranges
 * (SEEK_DATA / SEEK_HOLE, widened to whole sectors) and then truncated to
 * their size, so holes stay holes.
 *
 * Space: the file API allocates from the block groups that exist; this code
 * asks the chunk allocator first (ub_chunk_prepare before every operation,
 * ub_chunk_reserve_data before data), so chunks are added as the kernel would
 * add them. The engine keeps every dirty block in memory until the commit, so
 * a transaction is committed every UB_ROOTDIR_COMMIT_BYTES of data or
 * UB_ROOTDIR_COMMIT_OPS operations.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>
#include "alloc/chunk_alloc.h"
#include "txn/txn.h"
#include "ubtrfs/fswrite.h"
#include "ubtrfs/mkfs.h"

#define UB_ROOTDIR_COMMIT_BYTES (64ULL << 20)
#define UB_ROOTDIR_COMMIT_OPS 20000
#define UB_ROOTDIR_BUF (8U << 20)
#define FS_TREE 5ULL
#define ROOT_INO 256ULL

struct link_ent {
	dev_t dev;
	ino_t ino;
	uint64_t bino;   /* 0: slot empty */
	struct stat st;  /* times set again at the end */
};

struct rd {
	struct ub_engine *e;
	struct ub_txn *t;
	struct ub_eroot *dev_root;
	const struct ub_root *meta[64];
	struct ub_chunk_ctx cc;
	const struct ub_log *log;
	uint8_t *buf;
	uint64_t pending_bytes, pending_ops;
	struct link_ent *links;
	size_t nlinks, links_cap; /* cap a power of two */
	struct ub_rootdir_stats *stats;
	int compress, level;
	char path[8192];          /* the entry being copied, for messages */
};

static void fill_cc(struct rd *r)
{
	int n = 0;

	for (struct ub_eroot *er = ub_roots_first(r->e->fs.roots); er && n < 64; er = ub_roots_next(er))
		if (er != r->e->fs.chunk_tree && er->root.bytenr)
			r->meta[n++] = &er->root;
	r->cc = (struct ub_chunk_ctx){
		.tc = &r->e->fs.tc,
		.ta = ub_txn_ta(r->t),
		.vol = r->e->fs.vol,
		.alloc = r->e->alloc,
		.chunk_root = &r->e->fs.chunk_tree->root,
		.dev_root = &r->dev_root->root,
		.extent_root = &r->e->fs.extent_tree->root,
		.fst_root = r->e->fs.fst_tree ? &r->e->fs.fst_tree->root : NULL,
		.meta_roots = r->meta,
		.nmeta_roots = n,
	};
}

static int commit(struct rd *r)
{
	int ret;

	if (!r->t)
		return 0;
	/* an empty transaction is not committed (the kernel skips it too) */
	if (!r->t->blocks_allocated && !r->t->blocks_cowed && !ub_dref_count(r->t->refs)) {
		ub_txn_abort(r->t);
		r->t = NULL;
		return 0;
	}
	ret = ub_txn_commit(r->t);
	r->t = NULL;
	r->pending_bytes = r->pending_ops = 0;
	if (!ret && r->stats)
		r->stats->commits++;
	return ret;
}

static int start(struct rd *r)
{
	int ret;

	if (r->t)
		return 0;
	ret = ub_txn_start(r->e, &r->t);
	if (ret)
		return ret;
	/* trees loaded by the last transaction join the commit reserve's list */
	fill_cc(r);
	return 0;
}

/* Before one file API call that may add about `items` item changes: room for its metadata. */
static int prepare(struct rd *r, unsigned items)
{
	struct ub_eroot *fs;
	uint64_t bytes;
	int ret;

	if (r->t && (r->pending_bytes >= UB_ROOTDIR_COMMIT_BYTES || r->pending_ops >= UB_ROOTDIR_COMMIT_OPS)) {
		ret = commit(r);
		if (ret)
			return ret;
	}
	ret = start(r);
	if (ret)
		return ret;
	ret = ub_engine_root(r->e, FS_TREE, &fs);
	if (ret)
		return ret;
	bytes = (uint64_t)r->e->fs.vol->nodesize * ub_chunk_op_blocks(fs->root.level) * items;
	for (int tries = 0;; tries++) {
		fill_cc(r);
		ret = ub_chunk_prepare(&r->cc, bytes, UB_CHUNK_OP_ADD);
		if ((ret != -EAGAIN && ret != -ENOSPC) || tries > 0)
			break;
		/* space this transaction freed (pinned) or will free comes back with a commit */
		ret = commit(r);
		if (!ret)
			ret = start(r);
		if (ret)
			return ret;
	}
	r->pending_ops += items;
	return ret;
}

/* Data chunks for len more bytes: reserved (adding chunks as needed) and given back for the file API. */
static int prepare_data(struct rd *r, uint64_t len)
{
	const uint64_t piece = 64ULL << 20;
	uint64_t start_ = 0;
	int ret;

	while (len) {
		uint64_t n = len < piece ? len : piece;

		ret = ub_chunk_reserve_data(&r->cc, n, 0, &start_);
		if (ret)
			return ret;
		ub_alloc_unreserve(r->e->alloc, start_, n);
		len -= n;
	}
	return 0;
}

static void report(struct rd *r, const char *what, int err)
{
	ub_logf(r->log, UB_LOG_ERROR, "%s: %s: %s", r->path[0] ? r->path : ".", what, strerror(err < 0 ? -err : err));
}

static struct link_ent *link_slot(struct rd *r, dev_t dev, ino_t ino)
{
	size_t mask = r->links_cap - 1;
	size_t h = ((uint64_t)ino * 0x9e3779b97f4a7c15ULL ^ (uint64_t)dev) & mask;

	while (r->links[h].bino && !(r->links[h].dev == dev && r->links[h].ino == ino))
		h = (h + 1) & mask;
	return &r->links[h];
}

static int links_grow(struct rd *r)
{
	struct link_ent *old = r->links;
	size_t oldcap = r->links_cap, cap = oldcap ? oldcap * 2 : 1024;

	r->links = calloc(cap, sizeof(*r->links));
	if (!r->links) {
		r->links = old;
		return -ENOMEM;
	}
	r->links_cap = cap;
	for (size_t i = 0; i < oldcap; i++)
		if (old[i].bino)
			*link_slot(r, old[i].dev, old[i].ino) = old[i];
	free(old);
	return 0;
}

static int set_attrs(struct rd *r, uint64_t ino, const struct stat *st, bool mode)
{
	struct ub_fsw_attr a = {
		.valid = UB_FSW_ATTR_ATIME | UB_FSW_ATTR_MTIME | UB_FSW_ATTR_CTIME | (mode ? UB_FSW_ATTR_MODE : 0),
		.mode = st->st_mode & 07777,
		.atime_sec = st->st_atim.tv_sec, .atime_nsec = (uint32_t)st->st_atim.tv_nsec,
		.mtime_sec = st->st_mtim.tv_sec, .mtime_nsec = (uint32_t)st->st_mtim.tv_nsec,
		.ctime_sec = st->st_ctim.tv_sec, .ctime_nsec = (uint32_t)st->st_ctim.tv_nsec,
	};
	int ret = prepare(r, 1);

	if (!ret)
		ret = ub_fsw_setattr(r->t, FS_TREE, ino, &a);
	if (ret)
		report(r, "setting owner, mode and times", ret);
	return ret;
}

/* Every extended attribute we can read (user, trusted, security, system.posix_acl_*), as raw values. */
static int copy_xattrs(struct rd *r, int dfd, const char *name, uint64_t ino)
{
	char proc[64], *names = NULL, *val = NULL;
	const char *p;
	ssize_t len, vlen;
	int ret = 0;

	/* no l*xattr at a directory fd: go through /proc/self/fd with the name */
	if (dfd >= 0)
		snprintf(proc, sizeof(proc), "/proc/self/fd/%d/", dfd);
	else
		proc[0] = 0;
	{
		size_t need = strlen(proc) + strlen(name) + 1;
		char *full = malloc(need);

		if (!full)
			return -ENOMEM;
		snprintf(full, need, "%s%s", proc, name);
		for (;;) {
			len = llistxattr(full, NULL, 0);
			if (len < 0 && (errno == ENOTSUP || errno == ENOSYS)) {
				len = 0;
				break;
			}
			if (len <= 0)
				break;
			free(names);
			names = malloc((size_t)len);
			if (!names) {
				free(full);
				return -ENOMEM;
			}
			len = llistxattr(full, names, (size_t)len);
			if (len >= 0 || errno != ERANGE)
				break;
		}
		if (len < 0) {
			ret = -errno;
			report(r, "listing extended attributes", ret);
			goto out_full;
		}
		for (p = names; names && p < names + len; p += strlen(p) + 1) {
			for (;;) {
				vlen = lgetxattr(full, p, NULL, 0);
				if (vlen < 0)
					break;
				free(val);
				val = malloc(vlen ? (size_t)vlen : 1);
				if (!val) {
					ret = -ENOMEM;
					goto out_full;
				}
				vlen = lgetxattr(full, p, val, (size_t)vlen);
				if (vlen >= 0 || errno != ERANGE)
					break;
			}
			if (vlen < 0) {
				if (errno == ENODATA)
					continue; /* removed meanwhile */
				ret = -errno;
				ub_logf(r->log, UB_LOG_ERROR, "%s: reading extended attribute %s: %s", r->path, p,
					strerror(errno));
				goto out_full;
			}
			ret = prepare(r, 2);
			if (!ret)
				ret = ub_fsw_setxattr(r->t, FS_TREE, ino, p, strlen(p), val, (size_t)vlen, 0);
			if (ret) {
				ub_logf(r->log, UB_LOG_ERROR, "%s: extended attribute %s (%zd bytes): %s", r->path, p, vlen,
					strerror(-ret));
				goto out_full;
			}
			if (r->stats)
				r->stats->xattrs++;
		}
out_full:
		free(full);
	}
	free(names);
	free(val);
	return ret;
}

static int copy_data(struct rd *r, int dfd, const char *name, uint64_t ino, const struct stat *st)
{
	const uint64_t ss = 4096;
	uint64_t size = (uint64_t)st->st_size, pos = 0;
	int fd, ret = 0;

	fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NOATIME | O_CLOEXEC);
	if (fd < 0 && errno == EPERM)
		fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		ret = -errno;
		report(r, "cannot open", ret);
		return ret;
	}
	while (pos < size) {
		off_t d = lseek(fd, (off_t)pos, SEEK_DATA), h;
		uint64_t dstart, dend;

		if (d < 0) {
			if (errno == ENXIO)
				break; /* only a hole is left */
			if (errno != EINVAL) {
				ret = -errno;
				report(r, "seeking data", ret);
				goto out;
			}
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
		while (dstart < dend) {
			uint64_t want = dend - dstart < UB_ROOTDIR_BUF ? dend - dstart : UB_ROOTDIR_BUF;
			ssize_t got = pread(fd, r->buf, want, (off_t)dstart);

			if (got < 0) {
				if (errno == EINTR)
					continue;
				ret = -errno;
				report(r, "reading", ret);
				goto out;
			}
			if (got == 0) {
				/* shrunk while copying: what was read stays, the size is the one stat saw */
				dend = dstart;
				size = dstart;
				break;
			}
			/* a compressed extent holds at most 128 KiB: an item and a csum change each */
			ret = prepare(r, 4 + 2 * (unsigned)((uint64_t)got / (128 << 10)));
			if (!ret)
				ret = prepare_data(r, ((uint64_t)got + 2 * ss - 1) / ss * ss);
			if (!ret)
				ret = ub_fsw_write_ex(r->t, FS_TREE, ino, dstart, r->buf, (size_t)got, r->compress,
						      r->level);
			if (ret) {
				report(r, "writing data", ret);
				goto out;
			}
			r->pending_bytes += (uint64_t)got;
			if (r->stats)
				r->stats->data_bytes += (uint64_t)got;
			dstart += (uint64_t)got;
		}
		pos = dend;
	}
	ret = prepare(r, 2);
	if (!ret)
		ret = ub_fsw_truncate(r->t, FS_TREE, ino, (uint64_t)st->st_size);
	if (ret)
		report(r, "setting the size", ret);
out:
	close(fd);
	return ret;
}

static int copy_dir(struct rd *r, int dfd, uint64_t dino, size_t plen);

/* One entry `name` of directory dfd (btrfs inode dino). */
static int copy_entry(struct rd *r, int dfd, uint64_t dino, const char *name, size_t plen)
{
	size_t nlen = strlen(name);
	struct link_ent *le = NULL;
	struct stat st;
	uint64_t ino = 0;
	int ret;

	if (plen + 1 + nlen + 1 > sizeof(r->path)) {
		r->path[plen] = 0;
		ub_logf(r->log, UB_LOG_ERROR, "%s/%s: path too long", r->path, name);
		return -ENAMETOOLONG;
	}
	r->path[plen] = '/';
	memcpy(r->path + plen + 1, name, nlen + 1);
	if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW)) {
		ret = -errno;
		report(r, "cannot stat", ret);
		return ret;
	}
	if (!S_ISDIR(st.st_mode) && st.st_nlink > 1) {
		if (r->nlinks * 2 >= r->links_cap) {
			ret = links_grow(r);
			if (ret)
				return ret;
		}
		le = link_slot(r, st.st_dev, st.st_ino);
		if (le->bino) {
			ret = prepare(r, 4);
			if (!ret)
				ret = ub_fsw_link(r->t, FS_TREE, le->bino, dino, name, nlen);
			if (ret)
				report(r, "hard link", ret);
			if (!ret && r->stats)
				r->stats->links++;
			return ret;
		}
	}
	ret = prepare(r, 6);
	if (ret) {
		report(r, "making room", ret);
		return ret;
	}
	switch (st.st_mode & S_IFMT) {
	case S_IFDIR:
		ret = ub_fsw_mkdir(r->t, FS_TREE, dino, name, nlen, st.st_mode & 07777, st.st_uid, st.st_gid, &ino);
		break;
	case S_IFLNK: {
		char target[4096 + 1];
		ssize_t tl = readlinkat(dfd, name, target, sizeof(target));

		if (tl < 0) {
			ret = -errno;
			report(r, "reading the symlink", ret);
			return ret;
		}
		if ((size_t)tl >= sizeof(target)) {
			report(r, "symlink target longer than 4095 bytes", ENAMETOOLONG);
			return -ENAMETOOLONG;
		}
		ret = ub_fsw_symlink(r->t, FS_TREE, dino, name, nlen, target, (size_t)tl, st.st_uid, st.st_gid, &ino);
		break;
	}
	case S_IFREG:
	case S_IFIFO:
	case S_IFSOCK:
		ret = ub_fsw_create(r->t, FS_TREE, dino, name, nlen, st.st_mode & (S_IFMT | 07777), st.st_uid, st.st_gid,
				    0, &ino);
		break;
	case S_IFCHR:
	case S_IFBLK:
		ret = ub_fsw_create(r->t, FS_TREE, dino, name, nlen, st.st_mode & (S_IFMT | 07777), st.st_uid, st.st_gid,
				    UB_FSW_MKDEV(major(st.st_rdev), minor(st.st_rdev)), &ino);
		break;
	default:
		report(r, "unknown file type", EINVAL);
		return -EINVAL;
	}
	if (ret) {
		report(r, "creating", ret);
		return ret;
	}
	if (r->stats)
		r->stats->inodes++;
	if (le) {
		le->dev = st.st_dev;
		le->ino = st.st_ino;
		le->bino = ino;
		le->st = st;
		r->nlinks++;
	}
	if (S_ISREG(st.st_mode) && st.st_size > 0) {
		ret = copy_data(r, dfd, name, ino, &st);
		if (ret)
			return ret;
	}
	if (S_ISDIR(st.st_mode)) {
		int sub = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

		if (sub < 0) {
			ret = -errno;
			report(r, "cannot open the directory", ret);
			return ret;
		}
		ret = copy_xattrs(r, sub, ".", ino);
		if (!ret)
			ret = copy_dir(r, sub, ino, plen + 1 + nlen);
		close(sub);
		r->path[plen] = '/';
		memcpy(r->path + plen + 1, name, nlen + 1);
	} else {
		ret = copy_xattrs(r, dfd, name, ino);
	}
	if (ret)
		return ret;
	/* the kernel has no chmod of a symlink: its mode stays 0777 */
	return set_attrs(r, ino, &st, !S_ISLNK(st.st_mode));
}

static int copy_dir(struct rd *r, int dfd, uint64_t dino, size_t plen)
{
	int fd2 = dup(dfd), ret = 0;
	struct dirent *de;
	DIR *d;

	if (fd2 < 0) {
		ret = -errno;
		report(r, "cannot read the directory", ret);
		return ret;
	}
	d = fdopendir(fd2);
	if (!d) {
		ret = -errno;
		close(fd2);
		report(r, "cannot read the directory", ret);
		return ret;
	}
	for (;;) {
		errno = 0;
		de = readdir(d);
		if (!de) {
			if (errno) {
				ret = -errno;
				r->path[plen] = 0;
				report(r, "reading the directory", ret);
			}
			break;
		}
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		ret = copy_entry(r, dfd, dino, de->d_name, plen);
		if (ret)
			break;
	}
	closedir(d);
	r->path[plen] = 0;
	return ret;
}

int ub_mkfs_rootdir(const char *const *paths, int npaths, const char *dir, int compress, int level,
		    const struct ub_log *log, struct ub_rootdir_stats *stats)
{
	struct rd r;
	struct stat st;
	int dfd, ret;

	memset(&r, 0, sizeof(r));
	r.log = log;
	r.stats = stats;
	r.compress = compress;
	r.level = level;
	if (stats)
		memset(stats, 0, sizeof(*stats));
	snprintf(r.path, sizeof(r.path), "%s", dir);
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0 || fstat(dfd, &st)) {
		ret = -errno;
		report(&r, "cannot open the root directory", ret);
		if (dfd >= 0)
			close(dfd);
		return ret;
	}
	r.buf = malloc(UB_ROOTDIR_BUF);
	if (!r.buf) {
		close(dfd);
		return -ENOMEM;
	}
	ret = ub_engine_open(paths, npaths, log, &r.e);
	if (ret) {
		ub_logf(log, UB_LOG_ERROR, "cannot open the new filesystem for writing: %s", strerror(-ret));
		goto out;
	}
	ret = ub_engine_root(r.e, 4, &r.dev_root);
	if (ret) {
		ub_logf(log, UB_LOG_ERROR, "new filesystem: no device tree: %s", strerror(-ret));
		goto out;
	}
	ret = copy_xattrs(&r, dfd, ".", ROOT_INO);
	if (!ret) {
		struct ub_fsw_attr a = { .valid = UB_FSW_ATTR_UID | UB_FSW_ATTR_GID, .uid = st.st_uid, .gid = st.st_gid };

		ret = prepare(&r, 1);
		if (!ret)
			ret = ub_fsw_setattr(r.t, FS_TREE, ROOT_INO, &a);
	}
	if (!ret)
		ret = copy_dir(&r, dfd, ROOT_INO, strlen(r.path));
	if (!ret)
		ret = set_attrs(&r, ROOT_INO, &st, true);
	/* links moved the ctime of their inodes after it was set */
	for (size_t i = 0; !ret && i < r.links_cap; i++)
		if (r.links[i].bino && r.links[i].st.st_nlink > 1) {
			snprintf(r.path, sizeof(r.path), "%s (inode %" PRIu64 ")", dir, r.links[i].bino);
			ret = set_attrs(&r, r.links[i].bino, &r.links[i].st, !S_ISLNK(r.links[i].st.st_mode));
		}
	if (!ret) {
		ret = commit(&r);
		if (ret)
			ub_logf(log, UB_LOG_ERROR, "committing the copy: %s", strerror(-ret));
	}
out:
	if (r.t)
		ub_txn_abort(r.t);
	if (r.e)
		ub_engine_close(r.e);
	free(r.links);
	free(r.buf);
	close(dfd);
	return ret;
}
