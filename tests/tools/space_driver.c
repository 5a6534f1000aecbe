/* SPDX-License-Identifier: MIT */
/*
 * Test driver for allocation when space runs out (tests/integration/test_enospc.py):
 * grows and shrinks the metadata of a filesystem with xattrs on the top
 * directory (inode 256) of the FS tree, through transactions that add chunks
 * as lib/alloc/chunk_alloc.h says.
 *
 *   space_driver [opts] add PREFIX FROM TO EVERY VALSIZE DEV...
 *       xattrs user.PREFIXnnnnnnn for n in [FROM, TO), value VALSIZE bytes,
 *       committing every EVERY; stops at the first -ENOSPC ("enospc at N")
 *   space_driver [opts] del PREFIX FROM TO EVERY DEV...
 *       removes them (a name not there is skipped)
 *   space_driver [opts] files PREFIX FROM TO EVERY SIZE DEV...
 *       regular files PREFIXnnnnnnn of SIZE bytes in the top directory
 *       through the file API (data chunks added first as needed), committing
 *       every EVERY; stops at the first -ENOSPC
 *   space_driver [opts] unlink PREFIX FROM TO EVERY DEV...
 *       removes them (a name not there is skipped)
 *   space_driver [opts] chunk KIND COUNT DEV...
 *       COUNT chunks of KIND (data, metadata, system) in the profile the
 *       existing ones have, then a commit; "enospc at N" if the devices fill
 *   space_driver [opts] clean DEV...
 *       ub_engine_clean until nothing is left: dead roots dropped, then the
 *       empty block groups removed (system ones too), each step committed
 *   space_driver [opts] data LEN DEV...
 *       reserves LEN bytes of data in 1 MiB pieces (adding data chunks),
 *       then gives them back, and commits: data chunk creation only
 *   opts: --abort-on-enospc   after an -ENOSPC, abort the running transaction
 *                             instead of committing it
 *         --no-retry          an -ENOSPC refusal is final: one ub_txn_prepare
 *                             on the running transaction (-EAGAIN still
 *                             commits and asks once from a fresh one). By
 *                             default every operation enters through
 *                             ub_fsw_begin / ub_engine_begin_op, which commit
 *                             and ask again as chunk_alloc.h says
 *         --budget BYTES      the engine's dirty budget (ub_engine_set_dirty_budget)
 * An -ENOSPC from inside an operation (the allocator failed under it) always
 * aborts the transaction: it is half done.
 *
 * The value of user.NAME is NAME repeated to VALSIZE bytes. A name whose hash
 * collides with an earlier one is skipped ("skip NAME"). Last line:
 * "done added A deleted D enospc E chunks DATA META SYS generation G auto C"
 * (C: the commits the dirty budget made).
 * Exit: 0 done (also after an ENOSPC), 1 failure, 2 the engine refused to open.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "txn/txn.h"
#include "txn/cleaner.h"
#include "alloc/chunk_alloc.h"
#include "ubtrfs/fswrite.h"

#define TOP_DIR BTRFS_FIRST_FREE_OBJECTID

struct sctx {
	struct ub_engine *e;
	struct ub_eroot *fs, *dev;
	struct ub_txn *t;
	struct ub_chunk_ctx cc;
	unsigned long long added, deleted, enospc;
};

static void fill_cc(struct sctx *c)
{
	if (ub_txn_chunk_ctx(c->t, &c->cc))
		memset(&c->cc, 0, sizeof(c->cc));
}

static int start(struct sctx *c)
{
	int ret;

	if (c->t)
		return 0;
	ret = ub_txn_start(c->e, &c->t);
	if (!ret)
		fill_cc(c);
	return ret;
}

/* The engine's running transaction after ub_engine_begin_op (it may have committed and started another). */
static void follow(struct sctx *c)
{
	if (c->t != c->e->running) {
		c->t = c->e->running;
		if (c->t)
			fill_cc(c);
	}
}

static int commit(struct sctx *c, bool abort)
{
	int ret = 0;

	if (!c->t)
		return 0;
	/*
	 * A transaction that changed nothing is not committed (as the kernel
	 * skips it): the engine's commit of an empty transaction would write a
	 * superblock of a new generation over a root tree of the old one.
	 */
	if (!c->t->blocks_allocated && !c->t->blocks_cowed && !ub_dref_count(c->t->refs))
		abort = true;
	if (abort)
		ub_txn_abort(c->t);
	else
		ret = ub_txn_commit(c->t);
	c->t = NULL;
	return ret;
}

static uint64_t op_bytes(struct sctx *c)
{
	return (uint64_t)c->e->fs.vol->nodesize * ub_chunk_op_blocks(c->fs->root.level);
}

static int add_xattr(struct sctx *c, const char *name, size_t vlen)
{
	size_t nlen = strlen(name), isz = sizeof(struct btrfs_dir_item) + nlen + vlen;
	struct ub_key key = { TOP_DIR, BTRFS_XATTR_ITEM_KEY, ub_name_hash(name, nlen) };
	uint8_t *d = calloc(1, isz);
	int ret;

	if (!d)
		return -ENOMEM;
	/* location stays zero for an xattr */
	UB_SET(btrfs_dir_item, transid, d, c->t->transid);
	UB_SET(btrfs_dir_item, data_len, d, vlen);
	UB_SET(btrfs_dir_item, name_len, d, nlen);
	UB_SET(btrfs_dir_item, type, d, BTRFS_FT_XATTR);
	memcpy(d + sizeof(struct btrfs_dir_item), name, nlen);
	for (size_t i = 0; i < vlen; i++)
		d[sizeof(struct btrfs_dir_item) + nlen + i] = (uint8_t)name[i % nlen];
	ret = ub_tree_insert_item(&c->e->fs.tc, ub_txn_ta(c->t), &c->fs->root, &key, d, (uint32_t)isz);
	free(d);
	return ret;
}

/* 0 deleted, -ENOENT when no xattr of that name is there */
static int del_xattr(struct sctx *c, const char *name)
{
	size_t nlen = strlen(name);
	struct ub_key key = { TOP_DIR, BTRFS_XATTR_ITEM_KEY, ub_name_hash(name, nlen) };
	const uint8_t *d;
	uint32_t size;
	struct ub_path p;
	int ret;

	ub_path_init(&p);
	ret = ub_tree_lookup(&c->e->fs.tc, &c->fs->root, &key, &p, &d, &size);
	if (ret == 0 && (size < sizeof(struct btrfs_dir_item) + nlen ||
			 UB_GET(btrfs_dir_item, name_len, d) != nlen ||
			 memcmp(d + sizeof(struct btrfs_dir_item), name, nlen) != 0))
		ret = -ENOENT; /* another name with the same hash */
	ub_path_release(&p);
	if (ret)
		return ret;
	ub_path_init(&p);
	ret = ub_tree_search_slot(&c->e->fs.tc, ub_txn_ta(c->t), &c->fs->root, &key, &p, -1, true);
	if (ret == 0)
		ret = ub_tree_del_items(&c->e->fs.tc, ub_txn_ta(c->t), &c->fs->root, &p, p.slots[0], 1);
	ub_path_release(&p);
	return ret > 0 ? -ENOENT : ret;
}

/* SIZE bytes derived from the name, 8 bytes at a time (the test recomputes them) */
static void file_bytes(const char *name, uint8_t *buf, size_t size)
{
	uint64_t x = ub_name_hash(name, strlen(name)) | 1;

	for (size_t i = 0; i < size; i += 8) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		for (size_t j = 0; j < 8 && i + j < size; j++)
			buf[i + j] = (uint8_t)(x >> (8 * j));
	}
}

static int add_file(struct sctx *c, const char *name, uint8_t *buf, size_t size)
{
	uint64_t ino;
	int ret = ub_chunk_ensure_data(&c->cc, size);

	if (!ret)
		ret = ub_fsw_create(c->t, BTRFS_FS_TREE_OBJECTID, TOP_DIR, name, strlen(name), 0100644, 0, 0, 0, &ino);
	if (!ret) {
		file_bytes(name, buf, size);
		ret = ub_fsw_write(c->t, BTRFS_FS_TREE_OBJECTID, ino, 0, buf, size);
	}
	return ret;
}

static int data_cycle(struct sctx *c, uint64_t len)
{
	uint64_t piece = 1024 * 1024, got = 0;
	uint64_t *starts = calloc(len / piece + 1, sizeof(*starts));
	int ret = 0;
	size_t n = 0;

	if (!starts)
		return -ENOMEM;
	while (got < len) {
		ret = ub_chunk_prepare(&c->cc, op_bytes(c), UB_CHUNK_OP_ADD);
		if (ret == -EAGAIN)
			ret = -ENOSPC; /* nothing is freed here */
		if (!ret)
			ret = ub_chunk_reserve_data(&c->cc, piece, 0, &starts[n]);
		if (ret == -ENOSPC) {
			c->enospc++;
			printf("enospc at %llu\n", (unsigned long long)got);
			ret = 0;
			break;
		}
		if (ret)
			break;
		n++;
		got += piece;
	}
	/* nothing is written: the reservations go back before the commit */
	for (size_t i = 0; i < n; i++)
		ub_alloc_unreserve(c->e->alloc, starts[i], piece);
	free(starts);
	return ret;
}

static void usage(void)
{
	fprintf(stderr, "usage: space_driver [--abort-on-enospc] add PREFIX FROM TO EVERY VALSIZE DEV...\n"
			"       space_driver [--abort-on-enospc] del PREFIX FROM TO EVERY DEV...\n"
			"       space_driver [--abort-on-enospc] files PREFIX FROM TO EVERY SIZE DEV...\n"
			"       space_driver [--abort-on-enospc] unlink PREFIX FROM TO EVERY DEV...\n"
			"       space_driver chunk data|metadata|system COUNT DEV...\n"
			"       space_driver data LEN DEV...\n");
	exit(1);
}

int main(int argc, char **argv)
{
	struct sctx c = { 0 };
	bool abort_on_enospc = false, no_retry = false;
	const char *op, *prefix = "";
	long from = 0, to = 0, every = 1, vlen = 0, fsize = 0;
	uint8_t *fbuf = NULL;
	uint64_t dlen = 0, budget = 0;
	int i = 1, ret;

	while (i < argc && strncmp(argv[i], "--", 2) == 0) {
		if (strcmp(argv[i], "--abort-on-enospc") == 0)
			abort_on_enospc = true;
		else if (strcmp(argv[i], "--no-retry") == 0)
			no_retry = true;
		else if (strcmp(argv[i], "--budget") == 0 && i + 1 < argc)
			budget = strtoull(argv[++i], NULL, 0);
		else
			usage();
		i++;
	}
	if (i >= argc)
		usage();
	op = argv[i++];
	if (strcmp(op, "add") == 0 && argc - i >= 6) {
		prefix = argv[i];
		from = atol(argv[i + 1]);
		to = atol(argv[i + 2]);
		every = atol(argv[i + 3]);
		vlen = atol(argv[i + 4]);
		i += 5;
	} else if (strcmp(op, "del") == 0 && argc - i >= 5) {
		prefix = argv[i];
		from = atol(argv[i + 1]);
		to = atol(argv[i + 2]);
		every = atol(argv[i + 3]);
		i += 4;
	} else if (strcmp(op, "files") == 0 && argc - i >= 6) {
		prefix = argv[i];
		from = atol(argv[i + 1]);
		to = atol(argv[i + 2]);
		every = atol(argv[i + 3]);
		fsize = atol(argv[i + 4]);
		i += 5;
	} else if (strcmp(op, "unlink") == 0 && argc - i >= 5) {
		prefix = argv[i];
		from = atol(argv[i + 1]);
		to = atol(argv[i + 2]);
		every = atol(argv[i + 3]);
		i += 4;
	} else if (strcmp(op, "chunk") == 0 && argc - i >= 3) {
		prefix = argv[i];
		to = atol(argv[i + 1]);
		i += 2;
	} else if (strcmp(op, "clean") == 0 && argc - i >= 1) {
		/* no operands */
	} else if (strcmp(op, "data") == 0 && argc - i >= 2) {
		dlen = strtoull(argv[i], NULL, 0);
		i += 1;
	} else {
		usage();
	}
	if (every < 1 || vlen < 0 || vlen > 65536 || fsize < 0 || fsize > (1L << 30) || strlen(prefix) > 200)
		usage();
	fbuf = malloc((size_t)fsize + 1);
	if (!fbuf)
		return 1;
	ret = ub_engine_open((const char *const *)argv + i, argc - i, NULL, &c.e);
	if (ret) {
		fprintf(stderr, "space_driver: cannot open for writing: %s\n", strerror(-ret));
		return 2;
	}
	ub_engine_set_dirty_budget(c.e, budget);
	/* one xattr item must fit a leaf with its header (the kernel's BTRFS_MAX_XATTR_SIZE) */
	if ((uint64_t)vlen + strlen(prefix) + 12 + sizeof(struct btrfs_dir_item) + UB_ITEM_SIZE + UB_HEADER_SIZE >
	    c.e->fs.vol->nodesize) {
		fprintf(stderr, "space_driver: a value of %ld bytes does not fit a %u-byte leaf\n", vlen,
			c.e->fs.vol->nodesize);
		ub_engine_close(c.e);
		free(fbuf);
		return 1;
	}
	ret = ub_engine_root(c.e, BTRFS_FS_TREE_OBJECTID, &c.fs);
	if (!ret)
		ret = ub_engine_root(c.e, BTRFS_DEV_TREE_OBJECTID, &c.dev);
	if (!ret)
		ret = start(&c);
	if (!ret && strcmp(op, "data") == 0) {
		ret = data_cycle(&c, dlen);
	} else if (!ret && strcmp(op, "clean") == 0) {
		bool more = true;
		uint64_t before[3], after[3];

		ret = commit(&c, false);
		/* each call removes what it can; it is done when a call changes nothing */
		for (int n = 0; !ret && n < 64; n++) {
			ub_chunk_stats(c.e->alloc, before);
			ret = ub_engine_clean(c.e, 0, &more);
			ub_chunk_stats(c.e->alloc, after);
			if (!more && !memcmp(before, after, sizeof(before)))
				break;
		}
	} else if (!ret && strcmp(op, "chunk") == 0) {
		uint64_t kind = strcmp(prefix, "data") == 0       ? BTRFS_BLOCK_GROUP_DATA
				: strcmp(prefix, "metadata") == 0 ? BTRFS_BLOCK_GROUP_METADATA
				: strcmp(prefix, "system") == 0	  ? BTRFS_BLOCK_GROUP_SYSTEM
								  : 0;
		if (!kind)
			usage();
		for (long n = 0; n < to && !ret; n++) {
			ret = ub_chunk_alloc(&c.cc, kind | ub_chunk_profile_for(c.e->alloc, c.e->fs.vol, kind), NULL);
			if (ret == -ENOSPC) {
				c.enospc++;
				printf("enospc at %ld\n", n);
				ret = 0;
				break;
			}
		}
	} else if (!ret) {
		bool files = strcmp(op, "files") == 0 || strcmp(op, "unlink") == 0;
		bool add = strcmp(op, "add") == 0 || strcmp(op, "files") == 0;
		long ops = 0, committed_upto = from; /* names below it are in a committed transaction */

		for (long n = from; n < to && !ret; n++) {
			char name[256];

			if (files)
				snprintf(name, sizeof(name), "%s%07ld", prefix, n);
			else
				snprintf(name, sizeof(name), "user.%s%07ld", prefix, n);
			uint64_t gen = c.e->generation, bytes;
			struct ub_txn *t; /* the engine's running transaction: follow() takes it */
			int cop = add ? UB_CHUNK_OP_ADD : UB_CHUNK_OP_FREE;

			if (!files)
				bytes = op_bytes(&c);
			else if (add)
				bytes = ub_fsw_op_bytes(c.e, UB_FSW_OP_CREATE, 0) +
					ub_fsw_op_bytes(c.e, UB_FSW_OP_WRITE, (uint64_t)fsize);
			else
				bytes = ub_fsw_op_bytes(c.e, UB_FSW_OP_UNLINK, 0);
			if (no_retry) {
				ret = start(&c);
				if (!ret)
					ret = ub_txn_prepare(c.t, bytes, cop);
				if (ret == -EAGAIN && ops) {
					/* this transaction's share of the reserve ran short: commit, ask once more */
					ret = commit(&c, false);
					if (ret) {
						fprintf(stderr, "space_driver: commit before retrying %s: %s\n", name,
							strerror(-ret));
						break;
					}
					ret = ub_engine_begin_op(c.e, bytes, cop, &t);
				}
			} else if (files) {
				ret = add ? ub_engine_begin_op(c.e, bytes, cop, &t)
					  : ub_fsw_begin(c.e, UB_FSW_OP_UNLINK, 0, &t);
			} else {
				ret = ub_engine_begin_op(c.e, bytes, cop, &t);
			}
			follow(&c);
			if (c.e->generation != gen) {
				ops = 0; /* the engine committed (a refusal to lift, or the dirty budget) */
				committed_upto = n;
			}
			if (ret == -EAGAIN)
				ret = -ENOSPC;
			if (!ret && files)
				ret = add ? add_file(&c, name, fbuf, (size_t)fsize)
					  : ub_fsw_unlink(c.t, BTRFS_FS_TREE_OBJECTID, TOP_DIR, name, strlen(name));
			else if (!ret)
				ret = add ? add_xattr(&c, name, (size_t)vlen) : del_xattr(&c, name);
			if (ret == -ENOSPC && c.t) {
				/* refused before the change: the transaction is whole; failed inside it: abort */
				bool inside = c.t->error != 0;
				c.enospc++;
				printf("enospc at %ld committed %ld%s\n", n, committed_upto,
				       inside ? " (inside the operation)" : "");
				ret = commit(&c, abort_on_enospc || inside);
				if (ret)
					fprintf(stderr, "space_driver: %s after ENOSPC: %s\n",
						abort_on_enospc ? "abort" : "commit", strerror(-ret));
				break;
			}
			if ((ret == -EEXIST && add) || (ret == -ENOENT && !add)) {
				printf("skip %s\n", name);
				ret = 0;
				continue;
			}
			if (ret) {
				fprintf(stderr, "space_driver: %s %s: %s\n", op, name, strerror(-ret));
				break;
			}
			if (add)
				c.added++;
			else
				c.deleted++;
			if (++ops == every) {
				ops = 0;
				ret = commit(&c, false);
				committed_upto = n + 1;
			}
		}
	}
	if (!ret)
		ret = commit(&c, false);
	else if (c.t)
		commit(&c, true);
	{
		uint64_t ch[3];
		ub_chunk_stats(c.e->alloc, ch);
		printf("done added %llu deleted %llu enospc %llu chunks %llu %llu %llu generation %llu auto %llu\n",
		       c.added, c.deleted, c.enospc, (unsigned long long)ch[0], (unsigned long long)ch[1],
		       (unsigned long long)ch[2], (unsigned long long)c.e->generation,
		       (unsigned long long)c.e->auto_commits);
	}
	ub_engine_close(c.e);
	free(fbuf);
	if (ret) {
		fprintf(stderr, "space_driver: %s\n", strerror(-ret));
		return 1;
	}
	return 0;
}
