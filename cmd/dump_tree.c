/* SPDX-License-Identifier: MIT */
/* ubtrfs dump-tree: every tree block and item, decoded. Damage is reported and walked past. */
#include <ctype.h>
#include <errno.h>
#include <string.h>
#include <strings.h>
#include "cmd.h"
#include "print.h"
#include "ubtrfs/devinfo.h"
#include "ubtrfs/fsinfo.h"

/* dump-tree's block cache: room for the interior nodes a walk passes again (see cmd_dump_tree) */
#define DUMP_CACHE_BYTES (2ULL << 20)

static const char help[] =
	"usage: ubtrfs dump-tree [OPTIONS] DEV...\n\n"
	"Print tree blocks and their items, like 'btrfs inspect-internal dump-tree'.\n"
	"Without -t or -b: the root tree, the chunk tree and every tree the root tree lists.\n\n"
	"  -t, --tree TREE    only this tree: root, chunk, extent, dev, fs, csum, quota, uuid,\n"
	"                     free-space, block-group, raid-stripe, data-reloc, log, or a number\n"
	"  -b, --block BYTENR print the tree block at this logical address (repeatable)\n"
	"      --follow       with -b: also print the blocks below it\n"
	"  -r, --roots        print only the root tree's list of trees (no tree contents)\n"
	"  -h, --help         this text\n"
	OPEN_ARGS_HELP
	"(dump-tree never replays the fsync log: it prints the trees as stored, the log trees with -t log)\n"
	"\nExit codes: 0 everything printed, 1 some blocks could not be read, 2 usage or fatal error.\n";

static const struct {
	const char *name;
	uint64_t id;
} tree_names[] = {
	{ "root", BTRFS_ROOT_TREE_OBJECTID }, { "extent", BTRFS_EXTENT_TREE_OBJECTID },
	{ "chunk", BTRFS_CHUNK_TREE_OBJECTID }, { "dev", BTRFS_DEV_TREE_OBJECTID },
	{ "device", BTRFS_DEV_TREE_OBJECTID }, { "fs", BTRFS_FS_TREE_OBJECTID },
	{ "csum", BTRFS_CSUM_TREE_OBJECTID }, { "checksum", BTRFS_CSUM_TREE_OBJECTID },
	{ "quota", BTRFS_QUOTA_TREE_OBJECTID }, { "uuid", BTRFS_UUID_TREE_OBJECTID },
	{ "free-space", BTRFS_FREE_SPACE_TREE_OBJECTID }, { "free_space", BTRFS_FREE_SPACE_TREE_OBJECTID },
	{ "block-group", BTRFS_BLOCK_GROUP_TREE_OBJECTID }, { "block_group", BTRFS_BLOCK_GROUP_TREE_OBJECTID },
	{ "raid-stripe", BTRFS_RAID_STRIPE_TREE_OBJECTID }, { "data-reloc", BTRFS_DATA_RELOC_TREE_OBJECTID },
	{ "log", BTRFS_TREE_LOG_OBJECTID }, { "tree_log", BTRFS_TREE_LOG_OBJECTID },
};

static int parse_tree(const char *s, uint64_t *id)
{
	char buf[64];
	size_t n = strlen(s);

	if (parse_u64(s, id) == 0)
		return 0;
	/* accept "fs", "FS_TREE", "fs-tree" alike */
	if (n >= sizeof(buf))
		return -EINVAL;
	for (size_t i = 0; i <= n; i++)
		buf[i] = (char)tolower((unsigned char)s[i]);
	if (n > 5 && (!strcmp(buf + n - 5, "_tree") || !strcmp(buf + n - 5, "-tree")))
		buf[n - 5] = 0;
	for (size_t i = 0; i < sizeof(tree_names) / sizeof(tree_names[0]); i++)
		if (!strcasecmp(buf, tree_names[i].name)) {
			*id = tree_names[i].id;
			return 0;
		}
	return -EINVAL;
}

struct dumper {
	struct ub_fs *fs;
	bool follow;
	int rc;
	/* blocks entered in the tree being printed: a block met twice is printed once and named */
	struct ub_block_set seen;
	uint64_t tag; /* who is walking: a tree id, or for log trees the subvolume id */
	/* the open filesystem's handles, taken once through the accessors */
	struct ub_tree_ctx *tc;
	const struct ub_log *log;
	const uint8_t *super;
	struct ub_volume_info vi;
};

static void print_block(struct dumper *d, const struct ub_eb *eb)
{
	uint32_t n = ub_eb_nritems(eb);
	struct ub_print_ctx pctx = { d->vi.csum_size, d->vi.sectorsize, ub_eb_owner(eb) };

	ub_print_block_header(stdout, ub_eb_data(eb), ub_eb_len(eb));
	for (uint32_t i = 0; i < n; i++) {
		struct ub_key key;
		ub_eb_item_key(eb, (int)i, &key);
		if (ub_eb_level(eb)) {
			ub_print_key_ptr(stdout, &key, ub_eb_node_blockptr(eb, (int)i), ub_eb_node_gen(eb, (int)i));
		} else {
			uint32_t size;
			const uint8_t *data = ub_eb_item_data(eb, (int)i, &size);
			uint32_t itemoff = (uint32_t)(data - ub_eb_data(eb) - UB_HEADER_SIZE);
			ub_print_item(stdout, (int)i, &key, itemoff, data, size, &pctx);
		}
	}
}

/* Depth-first, children after their parent, as btrfs-progs prints them. */
static const char *tag_name(uint64_t owner, uint64_t tag, char *buf, size_t len)
{
	if (owner == BTRFS_TREE_LOG_OBJECTID && tag == BTRFS_TREE_LOG_OBJECTID)
		snprintf(buf, len, "the log root tree");
	else if (owner == BTRFS_TREE_LOG_OBJECTID)
		snprintf(buf, len, "the log tree of subvolume %llu", (unsigned long long)tag);
	else {
		char t[48];
		snprintf(buf, len, "tree %s", ub_tree_name(tag, t, sizeof(t)));
	}
	return buf;
}

static void walk(struct dumper *d, uint64_t bytenr, const struct ub_expect *exp, int depth)
{
	struct ub_eb *eb;
	uint64_t first_tag = 0;
	/* the pointer's own expectations first: they say best what is wrong */
	int ret = ub_tree_read_block(d->tc, bytenr, exp, &eb);

	if (ret) {
		d->rc = EXIT_PROBLEMS;
		fflush(stdout);
		return;
	}
	ret = ub_block_set_add(&d->seen, bytenr, d->tag, &first_tag);
	if (ret == 1) {
		char a[64], b[64], where[64] = "";
		uint64_t owner = exp ? exp->owner : 0;
		if (exp && exp->parent)
			snprintf(where, sizeof(where), ", slot %d of node %llu", exp->slot, (unsigned long long)exp->parent);
		fflush(stdout);
		ub_err(d->log, "%s: tree block at logical %llu (level %d%s) was already entered in %s: "
		       "a block is part of one tree once; not printed again", tag_name(owner, d->tag, a, sizeof(a)),
		       (unsigned long long)bytenr, ub_eb_level(eb), where, tag_name(owner, first_tag, b, sizeof(b)));
		d->rc = EXIT_PROBLEMS;
		ub_eb_put(d->tc, eb);
		return;
	}
	print_block(d, eb);
	if (ub_eb_level(eb) > 0 && d->follow && depth < UB_MAX_LEVEL) {
		uint32_t n = ub_eb_nritems(eb);
		for (uint32_t i = 0; i < n; i++) {
			struct ub_key first, end;
			if (ub_eb_level(eb) == 1 && i % (UB_TREE_READAHEAD_LEAVES / 2) == 0)
				ub_tree_readahead(d->tc, eb, (int)i, UB_TREE_READAHEAD_LEAVES);
			/* with -b nothing is known above the block: its own owner is what its children must have */
			struct ub_expect cexp = { exp && exp->owner ? exp->owner : ub_eb_owner(eb), ub_eb_level(eb) - 1,
						  ub_eb_node_gen(eb, (int)i),
						  &first, exp ? exp->end_key : NULL, bytenr, (int)i };
			ub_eb_item_key(eb, (int)i, &first);
			if (i + 1 < n) {
				ub_eb_item_key(eb, (int)i + 1, &end);
				cexp.end_key = &end;
			}
			walk(d, ub_eb_node_blockptr(eb, (int)i), &cexp, depth + 1);
		}
	}
	ub_eb_put(d->tc, eb);
}

/* One whole tree; a fresh set of entered blocks unless the caller keeps one across trees (the log). */
static void dump_root_tagged(struct dumper *d, const struct ub_root *r, uint64_t tag, bool fresh)
{
	struct ub_expect exp = { r->objectid, r->level, r->generation, NULL, NULL, 0, -1, true };

	if (fresh)
		ub_block_set_free(&d->seen);
	d->tag = tag;
	walk(d, r->bytenr, &exp, 0);
}

static void dump_root(struct dumper *d, const struct ub_root *r)
{
	dump_root_tagged(d, r, r->objectid, true);
}

static const char *tree_title(uint64_t id)
{
	switch (id) {
	case BTRFS_EXTENT_TREE_OBJECTID: return "extent tree";
	case BTRFS_DEV_TREE_OBJECTID: return "device tree";
	case BTRFS_FS_TREE_OBJECTID: return "fs tree";
	case BTRFS_CSUM_TREE_OBJECTID: return "checksum tree";
	case BTRFS_QUOTA_TREE_OBJECTID: return "quota tree";
	case BTRFS_UUID_TREE_OBJECTID: return "uuid tree";
	case BTRFS_FREE_SPACE_TREE_OBJECTID: return "free space tree";
	case BTRFS_BLOCK_GROUP_TREE_OBJECTID: return "block group tree";
	case BTRFS_RAID_STRIPE_TREE_OBJECTID: return "raid stripe tree";
	case BTRFS_DATA_RELOC_TREE_OBJECTID: return "data reloc tree";
	case BTRFS_TREE_RELOC_OBJECTID: return "tree reloc tree";
	default: return "file tree";
	}
}

/* Every ROOT_ITEM in the root tree, with (or without) its contents. */
static void dump_all_roots(struct dumper *d, bool contents)
{
	struct ub_key key = { 0, 0, 0 };
	struct ub_root rt;
	struct ub_path *p;
	int ret;

	ret = ub_path_new(&p);
	if (!ret)
		ret = ub_fs_tree_root(d->fs, BTRFS_ROOT_TREE_OBJECTID, &rt);
	if (!ret)
		ret = ub_tree_search(d->tc, &rt, &key, p);
	ret = ret == 2 ? 1 : (ret < 0 ? ret : 0);
	while (ret == 0) {
		const uint8_t *data;
		uint32_t size;
		struct ub_root r;

		ub_path_key(p, &key);
		data = ub_path_data(p, &size);
		if (key.type == BTRFS_ROOT_ITEM_KEY && size >= offsetof(struct btrfs_root_item, generation_v2)) {
			r.objectid = key.objectid;
			r.bytenr = UB_GET(btrfs_root_item, bytenr, data);
			r.generation = UB_GET(btrfs_root_item, generation, data);
			r.level = (uint8_t)UB_GET(btrfs_root_item, level, data);
			printf("%s key ", tree_title(key.objectid));
			ub_print_key(stdout, &key);
			if (contents) {
				printf(" \n");
				dump_root(d, &r);
			} else {
				printf(" %llu level %u\n", (unsigned long long)r.bytenr, r.level);
			}
		}
		ret = ub_tree_next(p);
	}
	ub_path_free(p);
	if (ret < 0)
		d->rc = EXIT_PROBLEMS;
}

/* The log root tree, then each subvolume's log tree it points at. */
static int dump_log(struct dumper *d)
{
	const uint8_t *sb = d->super;
	/* the kernel writes the log in the transaction after the superblock's */
	struct ub_root lr = { BTRFS_TREE_LOG_OBJECTID, UB_GET(ub_disk_super, log_root, sb),
			      UB_GET(ub_disk_super, generation, sb) + 1,
			      (uint8_t)UB_GET(ub_disk_super, log_root_level, sb) };
	struct ub_key key = { 0, 0, 0 };
	struct ub_path *p;
	int ret;

	if (!lr.bytenr) {
		printf("no log tree (the superblock's log_root is 0)\n");
		return 0;
	}
	printf("log root tree\n");
	/* every log block carries owner TREE_LOG: only entering each once across all of them tells the trees apart */
	dump_root_tagged(d, &lr, BTRFS_TREE_LOG_OBJECTID, true);
	ret = ub_path_new(&p);
	if (!ret)
		ret = ub_tree_search(d->tc, &lr, &key, p);
	/* 2: nothing at or after key 0, so the tree is empty */
	ret = ret == 2 ? 1 : (ret < 0 ? ret : 0);
	while (ret == 0) {
		uint32_t size;
		const uint8_t *data = ub_path_data(p, &size);

		ub_path_key(p, &key);
		if (key.type == BTRFS_ROOT_ITEM_KEY && size >= offsetof(struct btrfs_root_item, generation_v2)) {
			struct ub_root r = { BTRFS_TREE_LOG_OBJECTID, UB_GET(btrfs_root_item, bytenr, data),
					     UB_GET(btrfs_root_item, generation, data),
					     (uint8_t)UB_GET(btrfs_root_item, level, data) };
			printf("log tree key ");
			ub_print_key(stdout, &key);
			printf(" \n");
			dump_root_tagged(d, &r, key.offset, false);
		}
		ret = ub_tree_next(p);
	}
	ub_path_free(p);
	if (ret < 0)
		d->rc = EXIT_PROBLEMS;
	return 0;
}

static int dump_tree_id(struct dumper *d, uint64_t id)
{
	struct ub_root r;
	int ret;

	if (id == BTRFS_TREE_LOG_OBJECTID)
		return dump_log(d);
	ret = ub_fs_tree_root(d->fs, id, &r);
	if (ret) {
		fprintf(stderr, "ubtrfs: error: tree %llu: %s\n", (unsigned long long)id,
			ret == -ENOENT ? "no such tree in the root tree" : strerror(-ret));
		return ret;
	}
	dump_root(d, &r);
	return 0;
}

int cmd_dump_tree(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "tree", required_argument, NULL, 't' }, { "block", required_argument, NULL, 'b' },
		{ "follow", no_argument, NULL, 0x200 }, { "roots", no_argument, NULL, 'r' },
		{ "help", no_argument, NULL, 'h' }, OPEN_ARGS_LONGOPTS, { NULL, 0, NULL, 0 },
	};
	struct open_args oa;
	struct dumper d = { NULL, true, EXIT_OK };
	uint64_t tree = 0, blocks[64];
	bool have_tree = false, roots_only = false, follow = false;
	int nblocks = 0, opt, r;

	open_args_init(&oa);
	while ((opt = getopt_long(argc, argv, "t:b:rhvq", longopts, NULL)) != -1) {
		if ((r = open_args_parse(&oa, opt, optarg)) != 0) {
			if (r < 0)
				return usage_error("dump-tree", "invalid value '%s'", optarg);
			continue;
		}
		switch (opt) {
		case 't':
			if (parse_tree(optarg, &tree))
				return usage_error("dump-tree", "unknown tree '%s'", optarg);
			have_tree = true;
			break;
		case 'b':
			if (nblocks == 64 || parse_u64(optarg, &blocks[nblocks]))
				return usage_error("dump-tree", "invalid block '%s'", optarg);
			nblocks++;
			break;
		case 0x200: follow = true; break;
		case 'r': roots_only = true; break;
		case 'h': fputs(help, stdout); return EXIT_OK;
		default: return usage_error("dump-tree", "invalid option");
		}
	}
	if (optind >= argc)
		return usage_error("dump-tree", "no device given");
	/* dump-tree shows the trees as they are on disk; the log trees are printed, not replayed */
	oa.no_log = true;
	if (open_fs(&oa, argv + optind, argc - optind, &d.fs))
		return EXIT_FATAL;
	d.tc = ub_fs_trees(d.fs);
	/*
	 * Each block is printed once and the walk holds its own path: a cache
	 * beyond the interior nodes only costs memory.
	 */
	ub_tree_set_cache_limit(d.tc, DUMP_CACHE_BYTES);
	d.log = ub_fs_log(d.fs);
	d.super = ub_volume_super(ub_fs_volume(d.fs));
	ub_volume_get_info(ub_fs_volume(d.fs), &d.vi);
	if (nblocks) {
		d.follow = follow;
		for (int i = 0; i < nblocks; i++) {
			ub_block_set_free(&d.seen);
			walk(&d, blocks[i], NULL, 0);
		}
	} else if (have_tree) {
		if (dump_tree_id(&d, tree))
			d.rc = EXIT_FATAL;
	} else if (roots_only) {
		struct ub_root rt = { 0 }, ct = { 0 };

		ub_fs_tree_root(d.fs, BTRFS_ROOT_TREE_OBJECTID, &rt);
		ub_fs_tree_root(d.fs, BTRFS_CHUNK_TREE_OBJECTID, &ct);
		printf("root tree: %llu level %u\n", (unsigned long long)rt.bytenr, rt.level);
		printf("chunk tree: %llu level %u\n", (unsigned long long)ct.bytenr, ct.level);
		dump_all_roots(&d, false);
	} else {
		char uuid[40];
		const uint8_t *u = d.vi.fsid;
		struct ub_root rt = { 0 }, ct = { 0 };

		ub_fs_tree_root(d.fs, BTRFS_ROOT_TREE_OBJECTID, &rt);
		ub_fs_tree_root(d.fs, BTRFS_CHUNK_TREE_OBJECTID, &ct);
		printf("root tree\n");
		dump_root(&d, &rt);
		printf("chunk tree\n");
		dump_root(&d, &ct);
		dump_all_roots(&d, true);
		if (UB_GET(ub_disk_super, log_root, d.super))
			dump_log(&d);
		ub_uuid_str(u, uuid);
		printf("total bytes %llu\nbytes used %llu\nuuid %s\n",
		       (unsigned long long)UB_GET(ub_disk_super, total_bytes, d.super),
		       (unsigned long long)UB_GET(ub_disk_super, bytes_used, d.super), uuid);
	}
	fflush(stdout);
	ub_block_set_free(&d.seen);
	ub_fs_close(d.fs);
	return final_rc(&oa, d.rc);
}
