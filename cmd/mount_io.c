/* SPDX-License-Identifier: MIT */
/*
 * The mount's reads of its FUSE device. libfuse's session loop reads and
 * answers every request, but it (3.14) has no operation for FUSE_TMPFILE,
 * which the kernel sends for open(O_TMPFILE) since Linux 6.1 and which
 * libfuse would answer ENOSYS (the caller then gets EOPNOTSUPP). So the
 * session reads through these functions (fuse_session_custom_io): a TMPFILE
 * request is answered here, on the device, with the same reply libfuse gives
 * a create (an entry and an open file), and the next request is read;
 * everything else goes to libfuse as it came.
 */
#define FUSE_USE_VERSION 35
#include <errno.h>
#include <fuse_lowlevel.h>
#include <linux/fuse.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
#include "mount.h"

/* what the mount's replies give the kernel to cache: as mount_ops.c's */
#define IO_TIMEOUT 86400

static void attr_of(const struct stat *st, struct fuse_attr *a)
{
	memset(a, 0, sizeof(*a));
	a->ino = st->st_ino;
	a->size = (uint64_t)st->st_size;
	a->blocks = (uint64_t)st->st_blocks;
	a->atime = (uint64_t)st->st_atim.tv_sec;
	a->mtime = (uint64_t)st->st_mtim.tv_sec;
	a->ctime = (uint64_t)st->st_ctim.tv_sec;
	a->atimensec = (uint32_t)st->st_atim.tv_nsec;
	a->mtimensec = (uint32_t)st->st_mtim.tv_nsec;
	a->ctimensec = (uint32_t)st->st_ctim.tv_nsec;
	a->mode = st->st_mode;
	a->nlink = (uint32_t)st->st_nlink;
	a->uid = st->st_uid;
	a->gid = st->st_gid;
	a->rdev = (uint32_t)st->st_rdev;
	a->blksize = (uint32_t)st->st_blksize;
}

/* The answer to one TMPFILE request, written to the device as libfuse writes its replies. */
static void tmpfile(struct mount_ctx *mc, int fd, const uint8_t *req, size_t n)
{
	const struct fuse_in_header *in = (const void *)req;
	struct fuse_create_in ci;
	struct fuse_out_header out = { .unique = in->unique };
	struct fuse_entry_out entry;
	struct fuse_open_out open;
	struct iovec iov[3] = { { &out, sizeof(out) }, { &entry, sizeof(entry) }, { &open, sizeof(open) } };
	struct mount_caller c;
	struct stat st;
	uint64_t id = 0;
	int ret = -EINVAL;

	memset(&entry, 0, sizeof(entry));
	memset(&open, 0, sizeof(open));
	if (n >= sizeof(*in) + sizeof(ci) && in->len == n) {
		memcpy(&ci, req + sizeof(*in), sizeof(ci));
		/* the owner as for any create; the umask as the kernel sends it (the mode comes unmasked: DONT_MASK) */
		c = (struct mount_caller){ .uid = in->uid, .gid = in->gid, .umask = ci.umask };
		ret = mount_tmpfile(mc, &c, in->nodeid, ci.mode, &id, &st);
	}
	if (ret) {
		out.error = ret;
		out.len = sizeof(out);
		/* refused only when the caller was interrupted meanwhile: then nobody waits for it */
		if (write(fd, &out, sizeof(out)) < 0)
			return;
		return;
	}
	entry.nodeid = id;
	entry.entry_valid = entry.attr_valid = IO_TIMEOUT;
	attr_of(&st, &entry.attr);
	/* the file changes only through this kernel's page cache, as any of the mount's */
	open.open_flags = FOPEN_KEEP_CACHE;
	out.len = sizeof(out) + sizeof(entry) + sizeof(open);
	/* a reply the kernel did not take (the caller was interrupted) hands out no lookup */
	if (writev(fd, iov, 3) < 0)
		mount_forget(mc, id, 1);
}

static ssize_t io_read(int fd, void *buf, size_t len, void *userdata)
{
	for (;;) {
		ssize_t n = read(fd, buf, len);
		const struct fuse_in_header *in = buf;

		if (n < (ssize_t)sizeof(*in) || in->opcode != FUSE_TMPFILE)
			return n;
		tmpfile(userdata, fd, buf, (size_t)n);
	}
}

static ssize_t io_writev(int fd, struct iovec *iov, int count, void *userdata)
{
	(void)userdata;
	return writev(fd, iov, count);
}

int mount_session_io(struct fuse_session *se)
{
	static const struct fuse_custom_io io = { .read = io_read, .writev = io_writev };

	/* the device fuse_session_mount opened stays the session's (closed at its destroy, once) */
	return fuse_session_custom_io(se, &io, fuse_session_fd(se));
}
