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
#include <stddef.h>
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

/*
 * Whether the request this thread read asks the set-id bits dropped (the
 * kernel's FUSE_HANDLE_KILLPRIV_V2: a write, truncate or open(O_TRUNC) by a
 * caller without CAP_FSETID, a chown). libfuse 3.14 neither asks for
 * KILLPRIV_V2 nor passes these flags on; libfuse's loop hands a request to
 * its operation on the thread that read it, so the flag is read here.
 */
static __thread bool req_kills_setid;

bool mount_request_kills_setid(void)
{
	return req_kills_setid;
}

static void note_request(struct mount_ctx *mc, const uint8_t *req, size_t n)
{
	const struct fuse_in_header *in = (const void *)req;
	const uint8_t *arg = req + sizeof(*in);
	size_t alen = n - sizeof(*in);
	uint32_t v;

	req_kills_setid = false;
	switch (in->opcode) {
	case FUSE_INIT:
		if (alen >= offsetof(struct fuse_init_in, flags) + sizeof(v)) {
			memcpy(&v, arg + offsetof(struct fuse_init_in, flags), sizeof(v));
			mc->init_unique = in->unique;
			mc->init_killpriv = (v & FUSE_HANDLE_KILLPRIV_V2) != 0;
		}
		break;
	case FUSE_WRITE:
		if (alen >= offsetof(struct fuse_write_in, write_flags) + sizeof(v)) {
			memcpy(&v, arg + offsetof(struct fuse_write_in, write_flags), sizeof(v));
			req_kills_setid = (v & FUSE_WRITE_KILL_SUIDGID) != 0;
		}
		break;
	case FUSE_SETATTR:
		if (alen >= offsetof(struct fuse_setattr_in, valid) + sizeof(v)) {
			memcpy(&v, arg + offsetof(struct fuse_setattr_in, valid), sizeof(v));
			req_kills_setid = (v & FATTR_KILL_SUIDGID) != 0;
		}
		break;
	case FUSE_OPEN:
		if (alen >= offsetof(struct fuse_open_in, open_flags) + sizeof(v)) {
			memcpy(&v, arg + offsetof(struct fuse_open_in, open_flags), sizeof(v));
			req_kills_setid = (v & FUSE_OPEN_KILL_SUIDGID) != 0;
		}
		break;
	default:
		break;
	}
}

static ssize_t io_read(int fd, void *buf, size_t len, void *userdata)
{
	for (;;) {
		ssize_t n = read(fd, buf, len);
		const struct fuse_in_header *in = buf;

		if (n < (ssize_t)sizeof(*in))
			return n;
		if (in->opcode != FUSE_TMPFILE) {
			note_request(userdata, buf, (size_t)n);
			return n;
		}
		tmpfile(userdata, fd, buf, (size_t)n);
	}
}

/*
 * The reply to INIT asks FUSE_HANDLE_KILLPRIV_V2 where the kernel offers it:
 * the kernel then drops set-id bits by telling us (note_request) instead of
 * asking for security.capability before every write, a round trip per write
 * (mount_write.c keeps the rules).
 */
static ssize_t io_writev(int fd, struct iovec *iov, int count, void *userdata)
{
	struct mount_ctx *mc = userdata;

	if (mc->init_killpriv && mc->e && count >= 2 && iov[0].iov_len == sizeof(struct fuse_out_header) &&
	    ((const struct fuse_out_header *)iov[0].iov_base)->unique == mc->init_unique &&
	    ((const struct fuse_out_header *)iov[0].iov_base)->error == 0 &&
	    iov[1].iov_len >= offsetof(struct fuse_init_out, flags) + sizeof(uint32_t)) {
		uint32_t v;
		uint8_t *p = (uint8_t *)iov[1].iov_base + offsetof(struct fuse_init_out, flags);

		memcpy(&v, p, sizeof(v));
		v |= FUSE_HANDLE_KILLPRIV_V2;
		memcpy(p, &v, sizeof(v));
		mc->init_killpriv = false;
		mc->killpriv = true;
	}
	return writev(fd, iov, count);
}

/*
 * The kernel's attributes of node `id` are stale: a mode the mount changed
 * by itself (set-id bits dropped under KILLPRIV_V2, with no reply carrying
 * the new mode). Told before the reply, so a stat after the call sees it.
 */
void mount_notify_attrs(struct mount_ctx *mc, uint64_t id)
{
	if (mc->se)
		fuse_lowlevel_notify_inval_inode(mc->se, id, -1, 0);
}

int mount_session_io(struct fuse_session *se)
{
	static const struct fuse_custom_io io = { .read = io_read, .writev = io_writev };

	/* the device fuse_session_mount opened stays the session's (closed at its destroy, once) */
	return fuse_session_custom_io(se, &io, fuse_session_fd(se));
}
