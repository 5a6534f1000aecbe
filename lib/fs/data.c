/* SPDX-License-Identifier: MIT */
/* Reading data extents: every sector is checked against the csum tree; bad copies are skipped. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include "ubtrfs/fs.h"
#include "decomp_pool.h"
#include "fs_priv.h"
#include "items.h"

/* Fill csums for sectors of [logical, logical+len); have[i] says whether sector i has one. */
static int lookup_csums(struct ub_fs *fs, uint64_t logical, uint64_t nsec, uint8_t *csums, uint8_t *have)
{
	const uint32_t ss = fs->vol->sectorsize, cs = fs->vol->csum_size;
	struct ub_key key = { BTRFS_EXTENT_CSUM_OBJECTID, BTRFS_EXTENT_CSUM_KEY, logical };
	uint64_t end = logical + nsec * ss;
	struct ub_path p;
	struct ub_root csum;
	int ret;

	memset(have, 0, nsec);
	if (ub_fs_committed(fs, fs->csum_tree, &csum)) {
		if (fs->view != UB_VIEW_LIVE) {
			ub_replay_csums(fs, logical, nsec, csums, have);
			ub_loose_csums(fs, logical, nsec, csums, have);
		}
		return 0;
	}
	ub_path_init(&p);
	ret = ub_tree_search_le(&fs->tc, &csum, &key, &p);
	if (ret == 1) {
		ret = ub_tree_search(&fs->tc, &csum, &key, &p);
		ret = ret == 2 ? 1 : (ret < 0 ? ret : 0);
	}
	while (ret == 0) {
		const uint8_t *d;
		uint32_t size;
		uint64_t start, count;

		ub_path_key(&p, &key);
		if (key.objectid > BTRFS_EXTENT_CSUM_OBJECTID ||
		    (key.objectid == BTRFS_EXTENT_CSUM_OBJECTID && key.type > BTRFS_EXTENT_CSUM_KEY) ||
		    (key.objectid == BTRFS_EXTENT_CSUM_OBJECTID && key.type == BTRFS_EXTENT_CSUM_KEY && key.offset >= end))
			break;
		if (key.objectid == BTRFS_EXTENT_CSUM_OBJECTID && key.type == BTRFS_EXTENT_CSUM_KEY) {
			uint64_t last;

			d = ub_path_data(&p, &size);
			start = key.offset;
			count = size / cs;
			/* an item whose sectors would run past 2^64 cannot describe ours: ignore it, never wrap */
			if (count && __builtin_add_overflow(start, (count - 1) * ss, &last)) {
				ret = ub_tree_next(&p);
				continue;
			}
			for (uint64_t i = 0; i < count; i++) {
				uint64_t at = start + i * ss;
				if (at < logical)
					continue;
				if (at >= end)
					break;
				memcpy(csums + ((at - logical) / ss) * cs, d + i * cs, cs);
				have[(at - logical) / ss] = 1;
			}
		}
		ret = ub_tree_next(&p);
	}
	ub_path_release(&p);
	/* checksums of data written since the last commit live in the fsync log (the live view has them in its tree) */
	if (fs->view != UB_VIEW_LIVE) {
		ub_replay_csums(fs, logical, nsec, csums, have);
		ub_loose_csums(fs, logical, nsec, csums, have);
	}
	return ret < 0 ? ret : 0;
}

/* Verify sectors [i, j) read into tmp; good ones are copied to buf (unless tmp is buf). Returns how many failed. */
static uint64_t verify_run(struct ub_fs *fs, uint64_t i, uint64_t j, const uint8_t *tmp, const uint8_t *csums,
			   const uint8_t *have, uint8_t *good, uint8_t *buf)
{
	const uint32_t ss = fs->vol->sectorsize, cs = fs->vol->csum_size;
	uint64_t mism = 0;

	for (uint64_t k = i; k < j; k++) {
		uint8_t c[UB_CSUM_SIZE_MAX];
		if (have[k] == UB_CSUM_UNKNOWN) {
			mism++; /* no checksum where one is needed: not good */
			continue;
		}
		if (have[k]) {
			ub_csum(fs->vol->csum_type, tmp + k * ss, ss, c);
			if (memcmp(c, csums + k * cs, cs)) {
				mism++;
				continue;
			}
		}
		good[k] = 1;
		if (tmp != buf)
			memcpy(buf + k * ss, tmp + k * ss, ss);
	}
	return mism;
}

/*
 * Read sectors [i, j) as copy `m`; when the run as a whole cannot be read
 * (a missing device under part of it), fall back to sector by sector so the
 * parts that can be read still are.
 */
static int read_run(struct ub_fs *fs, uint64_t logical, uint64_t i, uint64_t j, int m, uint8_t *tmp, uint8_t *ok)
{
	const uint32_t ss = fs->vol->sectorsize;
	int r = ub_volume_read(fs->vol, logical + i * ss, (j - i) * ss, m, tmp + i * ss);

	if (r == 0 || j - i == 1) {
		memset(ok + i, r == 0, j - i);
		return r;
	}
	for (uint64_t k = i; k < j; k++) {
		int rk = ub_volume_read(fs->vol, logical + k * ss, ss, m, tmp + k * ss);
		ok[k] = rk == 0;
		if (rk)
			r = rk;
	}
	return r;
}

/* "; subvol S ino I file offset F" for the bytes at `at`, or nothing without an owner. */
static void owner_words(const struct ub_data_owner *who, uint64_t at, char *out, size_t len)
{
	if (!who)
		*out = '\0';
	else if (who->compressed)
		snprintf(out, len, "; subvol %llu ino %llu, the compressed extent at file offset %llu",
			 (unsigned long long)who->subvol, (unsigned long long)who->ino, (unsigned long long)who->foff);
	else
		snprintf(out, len, "; subvol %llu ino %llu file offset %llu", (unsigned long long)who->subvol,
			 (unsigned long long)who->ino, (unsigned long long)(who->foff + (at - who->logical)));
}

static int data_read_impl(struct ub_fs *fs, uint64_t logical, uint64_t len, uint8_t *buf, bool verify, uint8_t *bad,
		 const struct ub_data_owner *who)
{
	const uint32_t ss = fs->vol->sectorsize, cs = fs->vol->csum_size;
	uint64_t nsec = len / ss;
	uint8_t *csums = NULL, *have = NULL, *good = NULL, *tmp = NULL, *ok = NULL;
	int copies, ret = 0;
	uint64_t nbad = 0;

	if (logical % ss || len % ss)
		return -EINVAL;
	csums = malloc(nsec * cs + 1);
	have = calloc(nsec + 1, 1);
	good = calloc(nsec + 1, 1);
	ok = calloc(nsec + 1, 1);
	if (!csums || !have || !good || !ok) {
		ret = -ENOMEM;
		goto out;
	}
	if (verify) {
		ret = lookup_csums(fs, logical, nsec, csums, have);
		if (ret == -ENOMEM)
			goto out;
		if (ret) {
			/*
			 * The checksum tree cannot say what the data must be: no byte of it is
			 * verified, so none is given (a missing tree is not "no checksums").
			 */
			ub_err(&fs->log, "data at logical %llu+%llu: its checksums cannot be read: %s",
			       (unsigned long long)logical, (unsigned long long)len, strerror(-ret));
			ret = -EIO;
			memset(bad, 1, nsec);
			memset(buf, 0, len);
			goto out;
		}
	}
	copies = ub_volume_num_copies(fs->vol, logical);
	if (!copies) {
		ub_err(&fs->log, "data at logical %llu is not in any chunk", (unsigned long long)logical);
		ret = -EIO;
		memset(bad, 1, nsec);
		memset(buf, 0, len);
		goto out;
	}
	/* first whatever copy reads (degraded profiles rebuild here), straight into buf */
	if (nsec && read_run(fs, logical, 0, nsec, 0, buf, ok) == 0 &&
	    verify_run(fs, 0, nsec, buf, csums, have, good, buf) == 0)
		goto done;
	/* then each copy in turn for what is still missing */
	tmp = malloc(len);
	if (!tmp) {
		ret = -ENOMEM;
		goto out;
	}
	for (int m = 1; m <= copies; m++) {
		uint64_t i = 0;
		while (i < nsec) {
			uint64_t j, mism = 0, k;
			int r;

			if (good[i]) {
				i++;
				continue;
			}
			for (j = i; j < nsec && !good[j]; j++)
				;
			r = read_run(fs, logical, i, j, m, tmp, ok);
			for (k = i; k < j; k++) {
				uint64_t e = k;
				while (e < j && ok[e] == ok[k])
					e++;
				if (ok[k]) {
					uint64_t bad_here = verify_run(fs, k, e, tmp, csums, have, good, buf);
					mism += bad_here;
					if (bad_here < e - k) {
						char whose[128];

						owner_words(who, logical + k * ss, whose, sizeof(whose));
						ub_info(&fs->log, "data at logical %llu+%llu: good data from copy %d%s",
							(unsigned long long)(logical + k * ss),
							(unsigned long long)((e - k) * ss), m, whose);
					}
				}
				k = e - 1;
			}
			if (r || mism) {
				char where[256], whose[128];

				ub_volume_describe_copy(fs->vol, logical + i * ss, m, where, sizeof(where));
				owner_words(who, logical + i * ss, whose, sizeof(whose));
				/* a missing device was reported once at open; a bad copy is news */
				ub_logf(&fs->log, (mism || r != -ENXIO) ? UB_LOG_WARN : UB_LOG_INFO,
					"data at logical %llu+%llu: %s: %s%s", (unsigned long long)(logical + i * ss),
					(unsigned long long)((j - i) * ss), where, mism ? "checksum mismatch" : strerror(-r),
					whose);
			}
			i = j;
		}
	}
done:
	for (uint64_t i = 0; i < nsec; i++) {
		/* with no checksum a sector is "good" as read: the caller is told it was not verified */
		bad[i] = !good[i] ? 1 : verify && !have[i] ? 2 : 0;
		if (bad[i] == 1) {
			memset(buf + i * ss, 0, ss);
			nbad++;
		}
	}
	ret = nbad ? -EIO : 0;
out:
	free(csums);
	free(have);
	free(good);
	free(tmp);
	free(ok);
	return ret;
}

int ub_data_read(struct ub_fs *fs, uint64_t logical, uint64_t len, uint8_t *buf, bool verify, uint8_t *bad,
		 const struct ub_data_owner *who)
{
	int in = ub_view_enter(fs);
	int ret = data_read_impl(fs, logical, len, buf, verify, bad, who);

	ub_view_exit(fs, in);
	return ret;
}

int ub_data_csums(struct ub_fs *fs, uint64_t logical, uint64_t len, uint8_t *csums, uint8_t *have)
{
	const uint32_t ss = fs->vol->sectorsize;

	if (logical % ss || len % ss || !len)
		return -EINVAL;
	return lookup_csums(fs, logical, len / ss, csums, have);
}

int ub_data_read_checked(struct ub_fs *fs, uint64_t logical, uint64_t len, uint8_t *buf, bool verify,
			 const uint8_t *csums, const uint8_t *have)
{
	const uint32_t ss = fs->vol->sectorsize;
	uint64_t nsec = len / ss;
	uint8_t good_small[64], *good = good_small;
	int ret = -EIO;

	if (logical % ss || len % ss || !nsec)
		return -EINVAL;
	if (!ub_volume_num_copies(fs->vol, logical) || ub_volume_read(fs->vol, logical, len, 0, buf))
		return -EIO;
	if (!verify)
		return 0;
	if (nsec > sizeof(good_small) && !(good = malloc(nsec)))
		return -ENOMEM;
	if (verify_run(fs, 0, nsec, buf, csums, have, good, buf) == 0)
		ret = 0;
	/* a sector without a checksum is for ub_data_read to name */
	for (uint64_t i = 0; i < nsec && !ret; i++)
		if (!have[i])
			ret = -EIO;
	if (good != good_small)
		free(good);
	return ret;
}

int ub_data_read_ahead(struct ub_fs *fs, uint64_t logical, uint64_t len, uint8_t *buf, bool verify)
{
	const uint32_t ss = fs->vol->sectorsize, cs = fs->vol->csum_size;
	uint64_t nsec = len / ss;
	uint8_t *csums, *have;
	int ret = -EIO;

	if (logical % ss || len % ss || !nsec)
		return -EINVAL;
	csums = malloc(nsec * cs);
	have = calloc(nsec, 1);
	if (!csums || !have) {
		ret = -ENOMEM;
		goto out;
	}
	if (verify && lookup_csums(fs, logical, nsec, csums, have))
		goto out;
	ret = ub_data_read_checked(fs, logical, len, buf, verify, csums, have);
out:
	free(csums);
	free(have);
	return ret;
}
