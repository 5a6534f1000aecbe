/* SPDX-License-Identifier: MIT */
/*
 * Is a held file newer in the leaves? A file the caller read from a root
 * older than the last commit would come out as it was then, although the
 * leaves the later commits wrote may be intact. Their version is trusted only
 * when it is the same file (same inode generation, one name) changed later
 * by a commit that happened, its extent items add up to what its inode item
 * counts (no missing or left-over ones: one version, not a mix), and every
 * byte reads and verifies; else the version the caller read stands.
 */
#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>
#include "recover_priv.h"

#define CHECK_CHUNK (1U << 20)

int ub_recover_held_newer(struct ub_recover *rc, size_t i, struct ub_inode *out)
{
	struct ub_read_report rep = { 0 };
	const struct rc_held *h;
	struct ub_inode in;
	uint64_t off = 0, bytes;

	if (i >= rc->nheld)
		return -ENOENT;
	h = &rc->held[i];
	if (!h->fresh || h->bad_csums)
		return -ESTALE;
	if (!rc->buf && !(rc->buf = malloc(CHECK_CHUNK)))
		return -ESTALE; /* the caller's version, rather than none */
	if (ub_inode_read(rc->fs, h->subvol, h->ino, &in) || !S_ISREG(in.mode) || in.nlink != 1 ||
	    in.generation != h->inode_gen || in.transid <= h->gen || in.transid > rc->o.last_commit)
		return -ESTALE;
	if (ub_fs_loose_extent_bytes(rc->fs, h->subvol, h->ino, &bytes) || bytes != in.nbytes)
		return -ESTALE;
	while (off < in.size) {
		uint64_t got = 0;
		int ret = ub_file_read_inode(rc->fs, &in, off, CHECK_CHUNK, rc->buf, &got, &rep);

		if (ret || !got || rep.bad_bytes || rep.unverified_bytes)
			break;
		off += got;
	}
	ub_read_report_flush(rc->fs, &rep);
	if (off < in.size || rep.bad_bytes || rep.unverified_bytes)
		return -ESTALE;
	*out = in;
	return 0;
}
