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
 * their size, so holes stay holes. The data is read, compressed and
 * checksummed by reader threads ahead of this one (rootdir_pipe.h), which
 * owns the transaction; without them (UBTRFS_ROOTDIR_THREADS=-1) it reads
 * here, and both ways make the same calls' worth of items.
 *
 * Space and commits: every call is one operation of the public write API
 * (ub_fsw_begin / ub_fsw_end), which asks for its room first, adds chunks as
 * the kernel would, and commits once the transaction's dirty memory reaches
 * the engine's budget (lib/txn/txn.h "dirty budget"); a write asks for its
 * data room itself. Nothing here reaches below the public API.
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
#include "mkfs/rootdir_pipe.h"
#include "ubtrfs/devinfo.h"
#include "ubtrfs/fsinfo.h"
#include "ubtrfs/fswrite.h"
#include "ubtrfs/mkfs.h"

#define UB_ROOTDIR_BUF (8U << 20)
/* a reader's unit of a big file: copy_data's buffer, so both make the same writes; the bytes readers may hold */
#define UB_ROOTDIR_PIECE ((uint64_t)UB_ROOTDIR_BUF)
#define UB_ROOTDIR_INFLIGHT (16ULL << 20)
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
	struct ub_txn *t;         /* the running transaction of the operation in progress (held: in_op) */
	bool in_op;
	uint64_t gen;             /* the generation last seen committed */
	const struct ub_log *log;
	uint8_t *buf;
	struct link_ent *links;
	size_t nlinks, links_cap; /* cap a power of two */
	struct ub_rootdir_stats *stats;
	struct rd_pipe *pipe; /* NULL: data read on this thread */
	int compress, level;
	char path[8192];          /* the entry being copied, for messages */
};

/* A commit happened (the engine's, at its dirty budget, or ours): what a copy that fails from here on leaves. */
static void note_commits(struct rd *r)
{
	uint64_t gen = ub_fs_view_generation(ub_engine_fs(r->e));
	struct ub_rootdir_stats *st = r->stats;

	if (gen == r->gen)
		return;
	if (st) {
		st->commits += gen - r->gen;
		st->kept_inodes = st->inodes;
		st->kept_links = st->links;
		st->kept_xattrs = st->xattrs;
		st->kept_data_bytes = st->data_bytes;
		snprintf(st->kept_at, sizeof(st->kept_at), "%s", r->path);
	}
	r->gen = gen;
}

static void end_op(struct rd *r)
{
	if (r->in_op)
		ub_fsw_end(r->e);
	r->in_op = false;
	r->t = NULL;
}

/*
 * Before one file API call: the operation begins through the public write
 * API (ub_fsw_begin reserves its room, commits at the dirty budget, and
 * retries from a fresh transaction when a commit may give space back), the
 * last one ended. The counts note every commit that happened before it.
 */
static int begin_op(struct rd *r, int kind, uint64_t len)
{
	int ret;

	end_op(r);
	ret = ub_fsw_begin(r->e, kind, len, &r->t);
	if (ret)
		return ret;
	r->in_op = true;
	note_commits(r);
	return 0;
}

static int commit(struct rd *r)
{
	int ret;

	end_op(r);
	/* an empty transaction gets no new generation (as the kernel skips it) */
	ret = ub_engine_commit(r->e);
	if (!ret)
		note_commits(r);
	return ret;
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
	int ret = begin_op(r, UB_FSW_OP_SETATTR, 0);

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
			ret = begin_op(r, UB_FSW_OP_XATTR, 0);
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

/* Room for a data write of len bytes (the write itself asks for its data room before it changes anything). */
static int prepare_write(struct rd *r, uint64_t len)
{
	return begin_op(r, UB_FSW_OP_WRITE, len);
}

static void count_data(struct rd *r, uint64_t len)
{
	if (r->stats)
		r->stats->data_bytes += len;
}

struct copy_ctx {
	struct rd *r;
	uint64_t ino;
	int fd;
	bool reported;
};

/* one data range [dstart, dend) of the file, read on this thread (1 on a short read: the file shrank) */
static int copy_range(void *arg, uint64_t dstart, uint64_t dend)
{
	struct copy_ctx *c = arg;
	struct rd *r = c->r;
	int ret;

	while (dstart < dend) {
		uint64_t want = dend - dstart < UB_ROOTDIR_BUF ? dend - dstart : UB_ROOTDIR_BUF;
		ssize_t got = pread(c->fd, r->buf, want, (off_t)dstart);

		if (got < 0) {
			if (errno == EINTR)
				continue;
			ret = -errno;
			report(r, "reading", ret);
			c->reported = true;
			return ret;
		}
		if (got == 0)
			return 1; /* shrunk while copying: what was read stays, the size is the one stat saw */
		ret = prepare_write(r, (uint64_t)got);
		if (!ret)
			ret = ub_fsw_write_ex(r->t, FS_TREE, c->ino, dstart, r->buf, (size_t)got, r->compress, r->level);
		if (ret) {
			report(r, "writing data", ret);
			c->reported = true;
			return ret;
		}
		count_data(r, (uint64_t)got);
		dstart += (uint64_t)got;
	}
	return 0;
}

static int set_size(struct rd *r, uint64_t ino, uint64_t size)
{
	int ret = begin_op(r, UB_FSW_OP_TRUNCATE, 0);

	if (!ret)
		ret = ub_fsw_truncate(r->t, FS_TREE, ino, size);
	if (ret)
		report(r, "setting the size", ret);
	return ret;
}

static int copy_data(struct rd *r, int dfd, const char *name, uint64_t ino, const struct stat *st)
{
	struct copy_ctx c = { r, ino, -1, false };
	int ret;

	/* the buffer of the single-thread copy, also for what the readers were not given (a file that grew) */
	if (!r->buf && !(r->buf = malloc(UB_ROOTDIR_BUF)))
		return -ENOMEM;
	c.fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NOATIME | O_CLOEXEC);
	if (c.fd < 0 && errno == EPERM)
		c.fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (c.fd < 0) {
		ret = -errno;
		report(r, "cannot open", ret);
		return ret;
	}
	ret = rd_data_ranges(c.fd, 0, (uint64_t)st->st_size, copy_range, &c);
	close(c.fd);
	if (ret < 0) {
		if (!c.reported)
			report(r, "seeking data", ret);
		return ret;
	}
	return set_size(r, ino, (uint64_t)st->st_size);
}

/* The same from pieces the readers prepared (released here as they are written). */
static int copy_data_piped(struct rd *r, uint64_t ino, const struct stat *st, struct rd_piece **pcs, size_t npcs)
{
	int ret = 0;

	for (size_t i = 0; i < npcs && !ret; i++) {
		const struct rd_seg *segs;
		size_t nsegs;

		ret = rd_pipe_wait(r->pipe, pcs[i], &segs, &nsegs);
		if (ret)
			report(r, "reading", ret);
		for (size_t k = 0; k < nsegs && !ret; k++) {
			ret = prepare_write(r, segs[k].len);
			if (!ret && segs[k].nx)
				ret = ub_fsw_write_encoded(r->t, FS_TREE, ino, segs[k].off, segs[k].len, segs[k].x,
							   segs[k].nx);
			else if (!ret)
				ret = ub_fsw_write_ex(r->t, FS_TREE, ino, segs[k].off, segs[k].raw, (size_t)segs[k].len,
						      r->compress, r->level);
			if (ret)
				report(r, "writing data", ret);
			else
				count_data(r, segs[k].len);
		}
		rd_pipe_release(r->pipe, pcs[i]);
		pcs[i] = NULL;
	}
	return ret ? ret : set_size(r, ino, (uint64_t)st->st_size);
}

static int copy_dir(struct rd *r, int dfd, uint64_t dino, size_t plen);

/* One name of a directory being copied: its stat (taken before the readers are given its data) and pieces. */
struct dent {
	char *name;
	struct stat st;
	int stat_err;
	bool statted;
	struct rd_piece **pcs;
	size_t npcs, pcs_cap;
};

static void drop_pieces(struct rd *r, struct dent *de)
{
	for (size_t k = 0; k < de->npcs; k++)
		if (de->pcs[k]) {
			rd_pipe_release(r->pipe, de->pcs[k]);
			de->pcs[k] = NULL;
		}
}

/* One entry `de` of directory dfd (btrfs inode dino). */
static int copy_entry(struct rd *r, int dfd, uint64_t dino, struct dent *de, size_t plen)
{
	const char *name = de->name;
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
	if (de->stat_err) {
		report(r, "cannot stat", de->stat_err);
		return de->stat_err;
	}
	st = de->st;
	if (!S_ISDIR(st.st_mode) && st.st_nlink > 1) {
		if (r->nlinks * 2 >= r->links_cap) {
			ret = links_grow(r);
			if (ret)
				return ret;
		}
		le = link_slot(r, st.st_dev, st.st_ino);
		if (le->bino) {
			/* two names of one file in a directory: its data went with the first (held pieces
			 * would stop the readers) */
			drop_pieces(r, de);
			ret = begin_op(r, UB_FSW_OP_LINK, 0);
			if (!ret)
				ret = ub_fsw_link(r->t, FS_TREE, le->bino, dino, name, nlen);
			if (ret)
				report(r, "hard link", ret);
			if (!ret && r->stats)
				r->stats->links++;
			return ret;
		}
	}
	ret = begin_op(r, UB_FSW_OP_CREATE, 0);
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
		ret = de->npcs ? copy_data_piped(r, ino, &st, de->pcs, de->npcs) : copy_data(r, dfd, name, ino, &st);
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

static int add_piece(struct rd *r, struct dent *de, int dfd, uint64_t off, uint64_t len, bool holes)
{
	struct rd_piece *pc;
	int ret;

	ret = rd_grow(&de->pcs, &de->pcs_cap, de->npcs, sizeof(*de->pcs));
	if (!ret)
		ret = rd_pipe_submit(r->pipe, dfd, de->name, off, len, holes, &pc);
	if (!ret)
		de->pcs[de->npcs++] = pc;
	return ret;
}

struct split_ctx {
	struct rd *r;
	struct dent *de;
	int dfd;
};

/* a data range of a big file in pieces counted from its start, so extents are cut where copy_data cuts them */
static int split_range(void *arg, uint64_t start, uint64_t end)
{
	struct split_ctx *c = arg;
	int ret = 0;

	for (uint64_t o = start; o < end && !ret; o += UB_ROOTDIR_PIECE)
		ret = add_piece(c->r, c->de, c->dfd, o, end - o < UB_ROOTDIR_PIECE ? end - o : UB_ROOTDIR_PIECE, false);
	return ret;
}

/* Hand a regular file's data to the readers: small files whole (holes found there), big ones in pieces. */
static int submit_file(struct rd *r, int dfd, struct dent *de)
{
	uint64_t size = (uint64_t)de->st.st_size;
	struct split_ctx c = { r, de, dfd };
	int fd, ret;

	if (size <= UB_ROOTDIR_PIECE)
		return add_piece(r, de, dfd, 0, size, true);
	fd = openat(dfd, de->name, O_RDONLY | O_NOFOLLOW | O_NOATIME | O_CLOEXEC);
	if (fd < 0 && errno == EPERM)
		fd = openat(dfd, de->name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return 0; /* copy_data reports it */
	ret = rd_data_ranges(fd, 0, size, split_range, &c);
	close(fd);
	return ret;
}

/*
 * Stat the entries from `from` on and give the readers their data, up to and
 * including the next directory: the writer enters it before the files after
 * it, and the readers must start pieces in the order the writer takes them.
 */
static int look_ahead(struct rd *r, int dfd, struct dent *ents, size_t n, size_t from, size_t *upto)
{
	size_t i;
	int ret;

	for (i = from; i < n; i++) {
		struct dent *de = &ents[i];
		struct link_ent *le;

		de->statted = true;
		if (fstatat(dfd, de->name, &de->st, AT_SYMLINK_NOFOLLOW)) {
			de->stat_err = -errno;
			continue;
		}
		if (S_ISDIR(de->st.st_mode)) {
			i++;
			break;
		}
		if (!r->pipe || !S_ISREG(de->st.st_mode) || de->st.st_size <= 0)
			continue;
		le = de->st.st_nlink > 1 && r->links_cap ? link_slot(r, de->st.st_dev, de->st.st_ino) : NULL;
		if (le && le->bino)
			continue; /* another name of a file already copied */
		ret = submit_file(r, dfd, de);
		if (ret)
			return ret;
	}
	if (r->pipe)
		rd_pipe_kick(r->pipe);
	*upto = i;
	return 0;
}

static void free_dents(struct rd *r, struct dent *ents, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		drop_pieces(r, &ents[i]);
		free(ents[i].pcs);
		free(ents[i].name);
	}
	free(ents);
}

/* the names of a directory, in readdir order */
static int read_names(struct rd *r, int dfd, size_t plen, struct dent **out, size_t *nout)
{
	struct dent *ents = NULL;
	size_t n = 0, cap = 0;
	int fd2 = dup(dfd), ret = 0;
	struct dirent *d;
	DIR *dir;

	if (fd2 < 0 || !(dir = fdopendir(fd2))) {
		ret = -errno;
		if (fd2 >= 0)
			close(fd2);
		report(r, "cannot read the directory", ret);
		return ret;
	}
	for (;;) {
		errno = 0;
		d = readdir(dir);
		if (!d) {
			if (errno) {
				ret = -errno;
				r->path[plen] = 0;
				report(r, "reading the directory", ret);
			}
			break;
		}
		if (!strcmp(d->d_name, ".") || !strcmp(d->d_name, ".."))
			continue;
		if (n == cap) {
			struct dent *m = realloc(ents, (cap = cap ? cap * 2 : 64) * sizeof(*m));

			if (!m) {
				ret = -ENOMEM;
				break;
			}
			ents = m;
		}
		memset(&ents[n], 0, sizeof(ents[n]));
		ents[n].name = strdup(d->d_name);
		if (!ents[n++].name) {
			ret = -ENOMEM;
			break;
		}
	}
	closedir(dir);
	*out = ents;
	*nout = n;
	return ret;
}

static int copy_dir(struct rd *r, int dfd, uint64_t dino, size_t plen)
{
	struct dent *ents = NULL;
	size_t n = 0, ahead = 0;
	int ret;

	ret = read_names(r, dfd, plen, &ents, &n);
	for (size_t i = 0; !ret && i < n; i++) {
		if (i >= ahead)
			ret = look_ahead(r, dfd, ents, n, i, &ahead);
		if (ret) {
			report(r, "reading ahead", ret);
			break;
		}
		ret = copy_entry(r, dfd, dino, &ents[i], plen);
	}
	free_dents(r, ents, n);
	r->path[plen] = 0;
	return ret;
}

/* UBTRFS_ROOTDIR_THREADS: readers beside the writer (default: one per CPU, at most 8; -1 or 0: none) */
static int start_readers(struct rd *r)
{
	const char *env = getenv("UBTRFS_ROOTDIR_THREADS");
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	struct ub_volume_info vi;
	int ret;

	if (env && *env)
		n = strtol(env, NULL, 10);
	if (n > 8)
		n = 8;
	if (n <= 0)
		return 0;
	ret = ub_volume_get_info(ub_fs_volume(ub_engine_fs(r->e)), &vi);
	if (!ret)
		ret = rd_pipe_start((int)n, UB_ROOTDIR_INFLIGHT, vi.sectorsize, (int)vi.csum_type, r->compress, r->level,
				    &r->pipe);
	if (ret == -EAGAIN)
		return 0; /* no thread: the copy reads on this one */
	if (ret)
		ub_logf(r->log, UB_LOG_ERROR, "starting the readers: %s", strerror(-ret));
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
	ret = ub_engine_open(paths, npaths, log, &r.e);
	if (ret) {
		ub_logf(log, UB_LOG_ERROR, "cannot open the new filesystem for writing: %s", strerror(-ret));
		goto out;
	}
	r.gen = ub_fs_view_generation(ub_engine_fs(r.e));
	ret = start_readers(&r);
	if (ret)
		goto out;
	ret = copy_xattrs(&r, dfd, ".", ROOT_INO);
	if (!ret) {
		struct ub_fsw_attr a = { .valid = UB_FSW_ATTR_UID | UB_FSW_ATTR_GID, .uid = st.st_uid, .gid = st.st_gid };

		ret = begin_op(&r, UB_FSW_OP_SETATTR, 0);
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
	rd_pipe_stop(r.pipe);
	end_op(&r);
	/* closing forgets what a failed copy left uncommitted: the disk keeps the last commit */
	if (r.e)
		ub_engine_close(r.e);
	free(r.links);
	free(r.buf);
	close(dfd);
	return ret;
}
