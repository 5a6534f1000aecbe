/* SPDX-License-Identifier: MIT */
/*
 * restore's output side. Every entry is made relative to the descriptor of
 * the directory restore made (or opened with O_NOFOLLOW) for it, so nothing a
 * damaged or crafted image names can lead outside OUTDIR: no path string is
 * ever resolved through a symbolic link.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>
#include "json.h"
#include "restore.h"

#define DATA_CHUNK (4U << 20)

/* The start of a report line: {"path": "/REL" */
static void report_path(struct restorer *r, const char *rel)
{
	char *p = malloc(strlen(rel) + 2);

	fputs("{\"path\": ", r->report);
	if (p) {
		p[0] = '/';
		strcpy(p + 1, rel);
		json_str(r->report, p, strlen(p));
		free(p);
	} else {
		json_str(r->report, rel, strlen(rel));
	}
}

void rs_problem(struct restorer *r, const char *rel, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (r->tty)
		fputs("\r\033[K", stderr);
	fprintf(stderr, "ubtrfs: error: /%s: %s\n", rel, msg);
	/* a file's unreadable data is its verdict's line (file_verdict), not one more */
	if (r->report && !r->data_verdict) {
		report_path(r, rel);
		fputs(", \"status\": \"problem\", \"why\": ", r->report);
		json_str(r->report, msg, strlen(msg));
		fputs("}\n", r->report);
	}
	r->nproblems++;
	if (r->rc == EXIT_OK)
		r->rc = EXIT_PROBLEMS;
}

/* A range the reader could not give (ub_read_report's callback): kept, adjacent ones of one cause merged. */
static void note_bad(void *arg, uint64_t off, uint64_t len, const char *why)
{
	struct restorer *r = arg;
	struct rs_lost *l = r->nlost ? &r->lost[r->nlost - 1] : NULL;

	if (l && l->off + l->len == off && !strncmp(l->why, why, sizeof(l->why) - 1)) {
		l->len += len;
		return;
	}
	if (r->nlost == r->lost_cap) {
		size_t cap = r->lost_cap ? r->lost_cap * 2 : 16;
		struct rs_lost *v = realloc(r->lost, cap * sizeof(*v));

		if (!v) {
			r->lost_nomem = true;
			return;
		}
		r->lost = v;
		r->lost_cap = cap;
	}
	l = &r->lost[r->nlost++];
	l->off = off;
	l->len = len;
	snprintf(l->why, sizeof(l->why), "%s", why);
}

/* A file copied: complete, partial or lost, counted; the latter two get a report line with their ranges. */
static void file_verdict(struct restorer *r, const char *rel, const struct ub_inode *in)
{
	uint64_t lost = 0;

	for (size_t i = 0; i < r->nlost; i++)
		lost += r->lost[i].len;
	r->bytes_lost += lost;
	if (!r->nlost) {
		r->files_complete++;
		return;
	}
	if (lost >= in->size)
		r->files_lost++;
	else
		r->files_partial++;
	if (!r->report)
		return;
	report_path(r, rel);
	fprintf(r->report, ", \"subvol\": %llu, \"inode\": %llu, \"size\": %llu, \"status\": \"%s\", \"lost_bytes\": %llu, \"lost\": [",
		(unsigned long long)in->subvol, (unsigned long long)in->ino, (unsigned long long)in->size,
		lost >= in->size ? "lost" : "partial", (unsigned long long)lost);
	for (size_t i = 0; i < r->nlost; i++) {
		fprintf(r->report, "%s{\"offset\": %llu, \"length\": %llu, \"why\": ", i ? ", " : "",
			(unsigned long long)r->lost[i].off, (unsigned long long)r->lost[i].len);
		json_str(r->report, r->lost[i].why, strlen(r->lost[i].why));
		fputc('}', r->report);
	}
	fprintf(r->report, "]%s}\n", r->lost_nomem ? ", \"ranges_incomplete\": true" : "");
}

void rs_progress(struct restorer *r, bool final)
{
	struct timespec now;

	if (!r->tty)
		return;
	clock_gettime(CLOCK_MONOTONIC, &now);
	if (!final && (now.tv_sec - r->last_progress.tv_sec) * 1000000000L + (now.tv_nsec - r->last_progress.tv_nsec) <
			      250000000L)
		return;
	r->last_progress = now;
	fprintf(stderr, "\r\033[Krestore: %llu files, %llu directories, %.1f MiB%s",
		(unsigned long long)(r->nfiles + r->nsymlinks + r->nspecial + r->nhardlinks), (unsigned long long)r->ndirs,
		r->bytes / 1048576.0, final ? "\n" : "");
}

/* ---- metadata ---- */

struct xattr_ctx {
	struct restorer *r;
	const char *rel;
	int fd;          /* a descriptor of the entry itself (O_PATH for symlinks and special files) */
	bool via_proc;   /* set through /proc/self/fd (O_PATH descriptors take no fsetxattr) */
	unsigned failed;
};

static int set_xattr(void *arg, const struct ub_xattr *xa)
{
	struct xattr_ctx *x = arg;
	char name[256], proc[64];
	int ret;

	if (xa->name_len >= sizeof(name)) {
		x->failed++;
		return 0;
	}
	memcpy(name, xa->name, xa->name_len);
	name[xa->name_len] = 0;
	if (x->via_proc) {
		snprintf(proc, sizeof(proc), "/proc/self/fd/%d", x->fd);
		ret = setxattr(proc, name, xa->value, xa->value_len, 0);
	} else {
		ret = fsetxattr(x->fd, name, xa->value, xa->value_len, 0);
	}
	/* btrfs.* names are btrfs's own properties (compression): other filesystems have no such namespace */
	if (ret && errno == EOPNOTSUPP && !strncmp(name, "btrfs.", 6))
		return 0;
	if (ret) {
		rs_problem(x->r, x->rel, "extended attribute %s not restored: %s", name, strerror(errno));
		x->failed++;
	}
	return 0;
}

/*
 * Owner, extended attributes, mode and times, in that order: a change of
 * owner clears set-id bits and capabilities, so those come after it, and the
 * times last, after everything that changes ctime or mtime.
 */
static void set_meta(struct restorer *r, int fd, bool via_proc, const char *rel, const struct ub_inode *in)
{
	char proc[64];
	bool symlink = S_ISLNK(in->mode);

	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	if (r->owner && (via_proc ? fchownat(fd, "", in->uid, in->gid, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW)
				  : fchown(fd, in->uid, in->gid)))
		rs_problem(r, rel, "owner %u:%u not restored: %s", in->uid, in->gid, strerror(errno));
	if (r->xattrs) {
		struct xattr_ctx x = { r, rel, fd, via_proc, 0 };
		int ret = ub_xattr_iterate(r->fs, in->subvol, in->ino, set_xattr, &x);

		if (ret)
			rs_problem(r, rel, "extended attributes cannot be read: %s", strerror(-ret));
	}
	if (!symlink) {
		mode_t m = r->mode ? (in->mode & 07777) : ((S_ISDIR(in->mode) ? 0777 : 0666) & ~r->umask);
		int ret = via_proc ? chmod(proc, m) : fchmod(fd, m);

		if (ret)
			rs_problem(r, rel, "mode %o not restored: %s", m, strerror(errno));
	}
	if (r->times) {
		struct timespec ts[2] = { { in->atime.sec, in->atime.nsec }, { in->mtime.sec, in->mtime.nsec } };

		if (utimensat(fd, "", ts, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW))
			rs_problem(r, rel, "times not restored: %s", strerror(errno));
	}
}

/* ---- directories ---- */

int rs_dir_make(struct restorer *r, struct frame *f)
{
	int pfd;

	if (f->fd >= 0 || !f->parent)
		return 0;
	if (f->failed)
		return -EIO;
	if (rs_dir_make(r, f->parent)) {
		f->failed = true;
		return -EIO;
	}
	if (r->dry_run) {
		printf("/%s/\n", f->rel);
		f->fd = INT32_MAX; /* stands for "made" */
		f->made = true;
		r->ndirs++;
		return 0;
	}
	pfd = f->parent->fd;
	if (mkdirat(pfd, f->name, 0700) == 0) {
		f->made = true;
		r->ndirs++;
	} else if (errno != EEXIST) {
		rs_problem(r, f->rel, "cannot make the directory: %s", strerror(errno));
		f->failed = true;
		return -errno;
	}
	/* an existing directory is restored into; anything else by that name (a link included) is not followed */
	f->fd = openat(pfd, f->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (f->fd < 0) {
		rs_problem(r, f->rel, "%s; nothing is restored below it",
			   errno == ENOTDIR || errno == ELOOP ? "exists and is not a directory" : strerror(errno));
		f->failed = true;
		return -EIO;
	}
	return 0;
}

void rs_dir_done(struct restorer *r, struct frame *f)
{
	if (f->fd < 0 || !f->parent)
		return;
	if (!r->dry_run) {
		if ((f->made || r->overwrite) && f->have_inode)
			set_meta(r, f->fd, false, f->rel, &f->in);
		close(f->fd);
	}
	f->fd = -1;
}

/* ---- other entries ---- */

/* A name already in the directory: replaced with --overwrite (a directory never), else reported. 0 to go on. */
static int make_room(struct restorer *r, int dfd, const char *name, const char *rel)
{
	if (!r->overwrite) {
		rs_problem(r, rel, "exists; not overwritten (--overwrite replaces it)");
		r->nexisting++;
		return -EEXIST;
	}
	if (unlinkat(dfd, name, 0)) {
		rs_problem(r, rel, "exists and cannot be replaced: %s", strerror(errno));
		return -errno;
	}
	return 0;
}

/* Write the file's data; holes stay holes. 0, or <0 when the file is not whole (reported). */
/*
 * Copy the data of `in` from `fs`, from *offp on (left where it stopped).
 * Unreadable data is zeros, counted in `rep`; 0 at the end, -ECANCELED when
 * writing OUTDIR failed (said), or the reader's error that ended the data.
 */
static int copy_from(struct restorer *r, struct ub_fs *fs, int fd, const char *rel, const struct ub_inode *in,
		     uint64_t *offp, struct ub_read_report *rep)
{
	uint64_t off = *offp, start, end;
	int ret = 0;

	while (off < in->size) {
		ret = ub_file_next_data(fs, in->subvol, in->ino, off, &start, &end);
		if (ret)
			break;
		for (off = start; off < end;) {
			uint64_t want = end - off < DATA_CHUNK ? end - off : DATA_CHUNK, got = 0;

			ret = ub_file_read(fs, in->subvol, in->ino, off, want, r->buf, &got, rep);
			if (got && pwrite(fd, r->buf, got, (off_t)off) != (ssize_t)got) {
				rs_problem(r, rel, "write failed at offset %llu: %s", (unsigned long long)off,
					   strerror(errno));
				*offp = off;
				return -ECANCELED;
			}
			r->bytes += got;
			off += got;
			if (ret == -EIO) {
				ret = 0; /* zeros where no copy was good: reported by the reader, counted below */
			} else if (ret) {
				break;
			} else if (!got) {
				break;
			}
			rs_progress(r, false);
		}
		if (ret || off < end)
			break;
	}
	ub_read_report_flush(fs, rep);
	*offp = off;
	return ret == 1 ? 0 : ret;
}

/*
 * The file's extent items cannot be read from `off` on in the root in use:
 * the rest from an older root where the same inode (same generation, same
 * size) is whole. Only for a failure to find the data, never for data that
 * fails its checksum (an older root would give older bytes there).
 */
static int data_from_older(struct restorer *r, int fd, const char *rel, const struct ub_inode *in, uint64_t *offp,
			   int ret, struct ub_read_report *rep)
{
	struct ub_fs *fs;
	uint64_t gen;

	for (int i = 0; !rs_older(r, i, &fs, &gen); i++) {
		struct ub_inode old;
		uint64_t o = *offp;
		size_t nlost = r->nlost;
		int ret2;

		if (fs == r->fs || ub_inode_read(fs, in->subvol, in->ino, &old) || old.generation != in->generation ||
		    old.size != in->size)
			continue;
		ret2 = copy_from(r, fs, fd, rel, in, &o, rep);
		if (ret2 == -ECANCELED)
			return ret2;
		if (ret2) {
			r->nlost = nlost; /* what this root could not give is said by the next try or the caller */
			continue;
		}
		rs_problem(r, rel, "the file's extent items cannot be read from offset %llu on (%s): that data is from the older root of generation %llu",
			   (unsigned long long)*offp, strerror(-ret), (unsigned long long)gen);
		*offp = o;
		return 0;
	}
	return ret;
}

static int copy_data(struct restorer *r, int fd, const char *rel, const struct ub_inode *in)
{
	struct ub_read_report rep = { .bad_range = note_bad, .bad_arg = r };
	uint64_t off = 0;
	int ret;

	r->nlost = 0;
	r->lost_nomem = false;
	ret = copy_from(r, r->fs, fd, rel, in, &off, &rep);
	if (ret && ret != -ECANCELED && ret != -ENOMEM && off < in->size)
		ret = data_from_older(r, fd, rel, in, &off, ret, &rep);
	if (ret == -ECANCELED)
		return -EIO;
	if (ret == 1)
		ret = 0;
	if (ret && off < in->size)
		note_bad(r, off, in->size - off, ret == -EUCLEAN ? "a corrupt file extent item ends the file's data" : strerror(-ret));
	file_verdict(r, rel, in);
	r->bytes_zeroed += rep.bad_bytes;
	r->data_verdict = true;
	if (ret == -EUCLEAN) {
		rs_problem(r, rel, "a corrupt file extent at offset %llu ends the file's data there",
			   (unsigned long long)off);
	} else if (ret) {
		rs_problem(r, rel, "reading failed at offset %llu: %s", (unsigned long long)off, strerror(-ret));
	} else if (rep.bad_bytes) {
		rs_problem(r, rel, "%llu bytes could not be read (first at offset %llu); written as zeros",
			   (unsigned long long)rep.bad_bytes, (unsigned long long)rep.first_bad_offset);
		ret = -EIO;
	}
	r->data_verdict = false;
	if (ftruncate(fd, (off_t)in->size)) {
		rs_problem(r, rel, "cannot set the size: %s", strerror(errno));
		ret = -EIO;
	}
	return ret;
}

static void make_file(struct restorer *r, int dfd, const char *name, const char *rel, const struct ub_inode *in)
{
	int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);

	if (fd < 0 && errno == EEXIST && make_room(r, dfd, name, rel) == 0)
		fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		if (errno != EEXIST)
			rs_problem(r, rel, "cannot make the file: %s", strerror(errno));
		return;
	}
	r->nfiles++;
	copy_data(r, fd, rel, in);
	set_meta(r, fd, false, rel, in);
	if (close(fd))
		rs_problem(r, rel, "close failed: %s", strerror(errno));
}

/* A symlink or special file: made by name, its metadata set through an O_PATH descriptor. */
static void make_node(struct restorer *r, int dfd, const char *name, const char *rel, const struct ub_inode *in)
{
	size_t len = 0;
	int ret, fd;

	if (S_ISLNK(in->mode)) {
		ret = ub_readlink(r->fs, in->subvol, in->ino, r->target, 65536, &len);
		if (ret || len >= 65536) {
			rs_problem(r, rel, "symlink target cannot be read: %s", ret ? strerror(-ret) : "too long");
			return;
		}
	}
	for (int tries = 0; tries < 2; tries++) {
		if (S_ISLNK(in->mode))
			ret = symlinkat(r->target, dfd, name);
		else
			ret = mknodat(dfd, name, (in->mode & S_IFMT) | 0600,
				      makedev((unsigned)(in->rdev >> 20), (unsigned)(in->rdev & 0xfffff)));
		if (ret == 0 || errno != EEXIST || tries || make_room(r, dfd, name, rel))
			break;
	}
	if (ret) {
		if (errno != EEXIST)
			rs_problem(r, rel, "cannot make the %s: %s", S_ISLNK(in->mode) ? "symlink" : "special file",
				   strerror(errno));
		return;
	}
	if (S_ISLNK(in->mode))
		r->nsymlinks++;
	else
		r->nspecial++;
	fd = openat(dfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		rs_problem(r, rel, "cannot open what was made: %s", strerror(errno));
		return;
	}
	set_meta(r, fd, true, rel, in);
	close(fd);
}

/* A second name of an inode restored already: a hard link to the first, looked up below OUTDIR only. */
static bool make_link(struct restorer *r, int dfd, const char *name, const char *rel, const char *first)
{
	struct open_how how = { .flags = O_PATH | O_CLOEXEC,
				.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS };
	const char *slash = strrchr(first, '/');
	char *dir = slash ? strndup(first, (size_t)(slash - first)) : strdup(".");
	int pfd, ret = -1;

	if (!dir)
		return false;
	pfd = (int)syscall(SYS_openat2, r->rootfd, dir, &how, sizeof(how));
	free(dir);
	if (pfd >= 0) {
		ret = linkat(pfd, slash ? slash + 1 : first, dfd, name, 0);
		if (ret && errno == EEXIST && make_room(r, dfd, name, rel) == 0)
			ret = linkat(pfd, slash ? slash + 1 : first, dfd, name, 0);
		close(pfd);
	}
	if (ret == 0) {
		r->nhardlinks++;
		return true;
	}
	if (errno != EEXIST)
		rs_problem(r, rel, "cannot link to /%s: %s", first, strerror(errno));
	return errno == EEXIST;
}

void rs_entry(struct restorer *r, struct frame *dir, const char *name, const char *rel, const struct ub_inode *in)
{
	const char *first = NULL;
	int ret;

	if (!S_ISREG(in->mode) && !S_ISLNK(in->mode) && !S_ISCHR(in->mode) && !S_ISBLK(in->mode) &&
	    !S_ISFIFO(in->mode) && !S_ISSOCK(in->mode)) {
		rs_problem(r, rel, "inode %llu of subvolume %llu has mode %o, no file type: not restored",
			   (unsigned long long)in->ino, (unsigned long long)in->subvol, in->mode);
		return;
	}
	if (rs_dir_make(r, dir))
		return;
	if (r->scavenge && rmap_add(&r->reached, in->subvol, in->ino, NULL, NULL) < 0) {
		rs_problem(r, rel, "out of memory");
		r->rc = EXIT_FATAL;
		return;
	}
	if (r->dry_run) {
		printf("/%s%s\n", rel, S_ISLNK(in->mode) ? "@" : "");
		if (S_ISREG(in->mode))
			r->nfiles++;
		return;
	}
	if (in->nlink > 1) {
		ret = rmap_add(&r->links, in->subvol, in->ino, rel, &first);
		if (ret < 0) {
			rs_problem(r, rel, "out of memory");
			r->rc = EXIT_FATAL;
			return;
		}
		if (ret == 0 && first && make_link(r, dir->fd, name, rel, first))
			return;
	}
	if (S_ISREG(in->mode))
		make_file(r, dir->fd, name, rel, in);
	else
		make_node(r, dir->fd, name, rel, in);
	rs_progress(r, false);
}
