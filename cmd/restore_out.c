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
#include <sys/xattr.h>
#include <unistd.h>
#include "dirlist.h"
#include "json.h"
#include "restore.h"

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

static void vproblem(struct restorer *r, const char *rel, bool report, const char *fmt, va_list ap)
{
	char msg[1024], *shown = name_shown(rel, strlen(rel));

	vsnprintf(msg, sizeof(msg), fmt, ap);
	pthread_mutex_lock(&r->lock);
	if (r->tty)
		fputs("\r\033[K", stderr);
	fprintf(stderr, "ubtrfs: error: /%s: %s\n", shown ? shown : "(out of memory)", msg);
	free(shown);
	if (r->report && report) {
		report_path(r, rel);
		fputs(", \"status\": \"problem\", \"why\": ", r->report);
		json_str(r->report, msg, strlen(msg));
		fputs("}\n", r->report);
	}
	r->nproblems++;
	pthread_mutex_unlock(&r->lock);
}

void rs_note(struct restorer *r, int level, const char *rel, const char *fmt, ...)
{
	char msg[1024], *shown;
	va_list ap;

	if (r->oa.verbosity < level)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	shown = name_shown(rel, strlen(rel));
	pthread_mutex_lock(&r->lock);
	if (r->tty)
		fputs("\r\033[K", stderr);
	fprintf(stderr, "ubtrfs: note: /%s: %s\n", shown ? shown : "(out of memory)", msg);
	pthread_mutex_unlock(&r->lock);
	free(shown);
}

void rs_list(const char *rel, const char *suffix)
{
	char *shown = name_shown(rel, strlen(rel));

	printf("/%s%s\n", shown ? shown : "(out of memory)", suffix);
	free(shown);
}

void rs_problem(struct restorer *r, const char *rel, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vproblem(r, rel, true, fmt, ap);
	va_end(ap);
}

void rs_data_problem(struct restorer *r, const char *rel, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vproblem(r, rel, false, fmt, ap);
	va_end(ap);
}

void rs_verdict(struct restorer *r, const char *rel, const struct ub_inode *in, const struct rs_lostv *lost)
{
	uint64_t bytes = 0;

	for (size_t i = 0; i < lost->n; i++)
		bytes += lost->v[i].len;
	pthread_mutex_lock(&r->lock);
	r->bytes_lost += bytes;
	if (!lost->n) {
		r->files_complete++;
		goto out;
	}
	if (bytes >= in->size)
		r->files_lost++;
	else
		r->files_partial++;
	if (!r->report)
		goto out;
	report_path(r, rel);
	fprintf(r->report, ", \"subvol\": %llu, \"inode\": %llu, \"size\": %llu, \"status\": \"%s\", \"lost_bytes\": %llu, \"lost\": [",
		(unsigned long long)in->subvol, (unsigned long long)in->ino, (unsigned long long)in->size,
		bytes >= in->size ? "lost" : "partial", (unsigned long long)bytes);
	for (size_t i = 0; i < lost->n; i++) {
		fprintf(r->report, "%s{\"offset\": %llu, \"length\": %llu, \"why\": ", i ? ", " : "",
			(unsigned long long)lost->v[i].off, (unsigned long long)lost->v[i].len);
		json_str(r->report, lost->v[i].why, strlen(lost->v[i].why));
		fputc('}', r->report);
	}
	fprintf(r->report, "]%s}\n", lost->nomem ? ", \"ranges_incomplete\": true" : "");
out:
	pthread_mutex_unlock(&r->lock);
}

void rs_progress(struct restorer *r, bool final)
{
	struct timespec now;
	uint64_t files;

	if (!r->tty)
		return;
	clock_gettime(CLOCK_MONOTONIC, &now);
	if (!final && (now.tv_sec - r->last_progress.tv_sec) * 1000000000L + (now.tv_nsec - r->last_progress.tv_nsec) <
			      250000000L)
		return;
	r->last_progress = now;
	files = __atomic_load_n(&r->nfiles, __ATOMIC_RELAXED) + r->nsymlinks + r->nspecial + r->nhardlinks;
	pthread_mutex_lock(&r->lock);
	fprintf(stderr, "\r\033[Krestore: %llu files, %llu directories, %.1f MiB%s", (unsigned long long)files,
		(unsigned long long)r->ndirs, r->bytes / 1048576.0, final ? "\n" : "");
	pthread_mutex_unlock(&r->lock);
}

static void scan_progress(struct restorer *r, const char *what, uint64_t done, uint64_t total)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	if (done < total && (now.tv_sec - r->last_progress.tv_sec) * 1000000000L +
				    (now.tv_nsec - r->last_progress.tv_nsec) < 250000000L)
		return;
	r->last_progress = now;
	pthread_mutex_lock(&r->lock);
	/* the end of a scan clears the line, for whatever is said next */
	if (done >= total)
		fputs("\r\033[K", stderr);
	else
		fprintf(stderr, "\r\033[Krestore: %s: %.1f of %.1f GiB", what, done / 1073741824.0,
			total / 1073741824.0);
	pthread_mutex_unlock(&r->lock);
}

void rs_progress_chunks(void *arg, uint64_t done, uint64_t total)
{
	scan_progress(arg, "reading the devices for the chunks", done, total);
}

void rs_progress_scan(void *arg, uint64_t done, uint64_t total)
{
	scan_progress(arg, "scanning the metadata", done, total);
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
	/* file capabilities: privileges an untrusted image would hand out */
	if (!strcmp(name, "security.capability")) {
		__atomic_add_fetch(&x->r->ncaps, 1, __ATOMIC_RELAXED);
		if (x->r->no_privileged)
			return 0;
	}
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
		int err = errno;
		char *shown = name_shown(name, strlen(name));

		rs_problem(x->r, x->rel, "extended attribute %s not restored: %s", shown ? shown : "?", strerror(err));
		free(shown);
		x->failed++;
	}
	return 0;
}

/*
 * Owner, extended attributes, mode and times, in that order: a change of
 * owner clears set-id bits and capabilities, so those come after it, and the
 * times last, after everything that changes ctime or mtime.
 */
void rs_set_meta(struct restorer *r, struct ub_fs *fs, int fd, bool via_proc, const char *rel, const struct ub_inode *in,
		 unsigned have)
{
	char proc[64];
	bool symlink = S_ISLNK(in->mode);

	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	if (r->owner && !(have & RS_HAVE_OWNER) && (via_proc ? fchownat(fd, "", in->uid, in->gid, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW)
				  : fchown(fd, in->uid, in->gid)))
		rs_problem(r, rel, "owner %u:%u not restored: %s", in->uid, in->gid, strerror(errno));
	if (r->xattrs && !in->no_xattrs) {
		struct xattr_ctx x = { r, rel, fd, via_proc, 0 };
		int ret = ub_xattr_iterate(fs, in->subvol, in->ino, set_xattr, &x);

		if (ret)
			rs_problem(r, rel, "extended attributes cannot be read: %s", strerror(-ret));
	}
	if (!symlink && !(have & RS_HAVE_MODE)) {
		mode_t m = rs_mode(r, in);
		int ret = via_proc ? chmod(proc, m) : fchmod(fd, m);

		if (ret)
			rs_problem(r, rel, "mode %o not restored: %s", m, strerror(errno));
	}
	if (r->times)
		rs_set_times(r, fd, rel, in);
}

mode_t rs_mode(const struct restorer *r, const struct ub_inode *in)
{
	mode_t m = r->mode ? (in->mode & 07777) : ((S_ISDIR(in->mode) ? 0777 : 0666) & ~r->umask);

	/* a set-group-ID directory only hands its group on: no privilege to take away */
	if (r->no_privileged && !S_ISDIR(in->mode))
		m &= ~(mode_t)(S_ISUID | S_ISGID);
	return m;
}

void rs_set_times(struct restorer *r, int fd, const char *rel, const struct ub_inode *in)
{
	struct timespec ts[2] = { { in->atime.sec, in->atime.nsec }, { in->mtime.sec, in->mtime.nsec } };

	if (utimensat(fd, "", ts, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW))
		rs_problem(r, rel, "times not restored: %s", strerror(errno));
}

/* ---- directories ---- */

/*
 * Do files made in `fd` get restore's own group and exactly the mode asked
 * for less the umask? Not under a default ACL, nor where the directory's group
 * is another (a set-group-ID directory, or a filesystem mounted grpid).
 */
bool rs_plain_dir(const struct restorer *r, int fd)
{
	struct stat st;

	if (fstat(fd, &st) || st.st_gid != r->egid)
		return false;
	return fgetxattr(fd, "system.posix_acl_default", NULL, 0) < 0 && (errno == ENODATA || errno == ENOTSUP);
}

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
		rs_list(f->rel, "/");
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
	f->plain = rs_plain_dir(r, f->fd);
	return 0;
}

void rs_dir_done(struct restorer *r, struct frame *f)
{
	if (f->fd < 0 || !f->parent)
		return;
	if (!r->dry_run) {
		bool meta = (f->made || r->overwrite) && f->have_inode;

		if (f->shared) {
			rs_dir_leave(r, f, meta);
		} else {
			if (meta)
				rs_set_meta(r, r->fs, f->fd, false, f->rel, &f->in, 0);
			close(f->fd);
		}
	}
	f->fd = -1;
	f->shared = NULL;
}

void rs_dir_finish(struct restorer *r, struct rs_dir *d)
{
	if (d->set_meta)
		rs_set_meta(r, d->fs, d->fd, false, d->rel ? d->rel : "", &d->in, 0);
	close(d->fd);
	free(d->rel);
	free(d);
}

/* ---- other entries ---- */

int rs_make_room(struct restorer *r, int dfd, const char *name, const char *rel)
{
	if (!r->overwrite) {
		rs_problem(r, rel, "exists; not overwritten (--overwrite replaces it)");
		__atomic_add_fetch(&r->nexisting, 1, __ATOMIC_RELAXED);
		return -EEXIST;
	}
	if (unlinkat(dfd, name, 0)) {
		rs_problem(r, rel, "exists and cannot be replaced: %s", strerror(errno));
		return -errno;
	}
	return 0;
}

/*
 * A new file is made with its permission bits (the descriptor writes it
 * whatever they say), so that most files need no chmod; set-id bits come after
 * the owner, which clears them. In a plain directory it belongs to restore's
 * user and group, so a file that had them needs no chown either.
 */
static void make_file(struct restorer *r, struct frame *dir, const char *name, const char *rel,
		      const struct ub_inode *in)
{
	mode_t make = r->mode ? (in->mode & 0777) : 0666;
	mode_t want = rs_mode(r, in);
	unsigned have = 0;
	int dfd = dir->fd, fd;

	if (r->mode && (in->mode & (S_ISUID | S_ISGID)))
		r->nsetid++;

	if (dir->plain && (make & ~r->umask) == want)
		have |= RS_HAVE_MODE;
	if (dir->plain && in->uid == r->euid && in->gid == r->egid)
		have |= RS_HAVE_OWNER;
	if (rs_copy_make(r, dir, rel, strlen(rel) - strlen(name), in, make, have))
		return;
	fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, make);
	if (fd < 0 && errno == EEXIST && rs_make_room(r, dfd, name, rel) == 0)
		fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, make);
	if (fd < 0) {
		if (errno != EEXIST)
			rs_problem(r, rel, "cannot make the file: %s", strerror(errno));
		return;
	}
	__atomic_add_fetch(&r->nfiles, 1, __ATOMIC_RELAXED);
	rs_copy_file(r, fd, rel, in, have);
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
		if (ret == 0 || errno != EEXIST || tries || rs_make_room(r, dfd, name, rel))
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
	if (S_ISCHR(in->mode) || S_ISBLK(in->mode))
		r->nprivdev++;
	fd = openat(dfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		rs_problem(r, rel, "cannot open what was made: %s", strerror(errno));
		return;
	}
	rs_set_meta(r, r->fs, fd, true, rel, in, 0);
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
		if (ret && errno == EEXIST && rs_make_room(r, dfd, name, rel) == 0)
			ret = linkat(pfd, slash ? slash + 1 : first, dfd, name, 0);
		close(pfd);
	}
	if (ret == 0) {
		r->nhardlinks++;
		return true;
	}
	if (errno != EEXIST) {
		int err = errno;
		char *shown = name_shown(first, strlen(first));

		rs_problem(r, rel, "cannot link to /%s: %s", shown ? shown : "?", strerror(err));
		free(shown);
		return false;
	}
	return true;
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
	if (S_ISCHR(in->mode) || S_ISBLK(in->mode)) {
		/* a device node gives whoever may open it the device: /dev/mem made 0666 by an image is root */
		if (r->no_privileged) {
			r->nprivdev++;
			rs_note(r, UB_LOG_INFO, rel, "device node %u:%u left out (--no-privileged)",
				(unsigned)(in->rdev >> 20), (unsigned)(in->rdev & 0xfffff));
			if (r->scavenge && rmap_add(&r->reached, in->subvol, in->ino, NULL, NULL) < 0) {
				rs_problem(r, rel, "out of memory");
				r->rc = EXIT_FATAL;
			}
			return;
		}
	}
	if (rs_dir_make(r, dir))
		return;
	if (r->scavenge && rmap_add(&r->reached, in->subvol, in->ino, NULL, NULL) < 0) {
		rs_problem(r, rel, "out of memory");
		r->rc = EXIT_FATAL;
		return;
	}
	if (r->dry_run) {
		rs_list(rel, S_ISLNK(in->mode) ? "@" : "");
		if (S_ISREG(in->mode))
			r->nfiles++;
		return;
	}
	/* read from an older root: it waits for the scan, which may find it newer */
	if (S_ISREG(in->mode) && in->nlink == 1 && rs_stale_defer(r, rel, in))
		return;
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
		make_file(r, dir, name, rel, in);
	else
		make_node(r, dir->fd, name, rel, in);
	rs_progress(r, false);
}
