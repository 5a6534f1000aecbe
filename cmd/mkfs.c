/* SPDX-License-Identifier: MIT */
/* ubtrfs mkfs: a new btrfs on one or more devices or image files, with mkfs.btrfs's meaning and defaults. */
#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uuid/uuid.h>
#include "cmd.h"
#include "ubtrfs/mkfs.h"

static const char help[] =
	"usage: ubtrfs mkfs [OPTIONS] DEV...\n\n"
	"Make a new btrfs filesystem over the devices or image files DEV (device IDs 1, 2, ...\n"
	"in the order given). Sector size 4096; the kernel mounts it as it is.\n\n"
	"  -d, --data PROFILE       data profile: single (default), dup, raid0, raid1, raid1c3,\n"
	"                           raid1c4, raid10, raid5, raid6\n"
	"  -m, --metadata PROFILE   metadata (and system) profile: default dup on one device,\n"
	"                           raid1 on several\n"
	"  -n, --nodesize SIZE      tree block size, a power of two from 4096 to 65536\n"
	"                           (default 16384; a k suffix is allowed: 16k)\n"
	"  -s, --sectorsize SIZE    4096 only (the kernel's page size here)\n"
	"      --csum ALGO          checksum: crc32c (default), xxhash, sha256, blake2\n"
	"  -L, --label LABEL        filesystem label (at most 255 bytes)\n"
	"  -U, --uuid UUID          filesystem UUID instead of a random one\n"
	"  -O, --features LIST      comma-separated: no-holes, free-space-tree, skinny-metadata,\n"
	"                           extref are on by default; ^NAME turns one off\n"
	"  -f, --force              overwrite a device that holds a filesystem already\n"
	"  -r, --rootdir DIR        copy the contents of DIR into the new filesystem (files with\n"
	"                           their holes, hard links, symlinks, special files, xattrs,\n"
	"                           owner, mode and times)\n"
	"      --compress ALGO[:LEVEL]  with --rootdir: compress the data copied: zlib (1-9),\n"
	"                           lzo, zstd (1-15); data that does not shrink stays plain\n"
	"  -q, --quiet              print nothing on success\n"
	"  -h, --help               this text\n"
	"\nRefused (nothing is written): a profile needing more devices than given\n"
	"(raid1/raid5: 2, raid1c3/raid6: 3, raid1c4/raid10: 4), a device given twice\n"
	"(also as a loop device and the file behind it),\n"
	"a device holding a mounted filesystem, a device holding a filesystem or partition\n"
	"table without -f, a device smaller than the profiles need.\n"
	"\nExit codes: 0 the filesystem was made (and filled), 1 the filesystem was made but\n"
	"--rootdir could not copy everything (the messages name the path, and what the\n"
	"filesystem holds: the copy's last commit, or nothing of DIR), 2 usage error, refusal\n"
	"or write failure.\n";

static int parse_size(const char *s, uint32_t *out)
{
	char *end;
	unsigned long long v;

	if (!s || !*s || *s == '-')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno)
		return -EINVAL;
	if (*end == 'k' || *end == 'K') {
		v *= 1024;
		end++;
	}
	if (*end || v > UINT32_MAX)
		return -EINVAL;
	*out = (uint32_t)v;
	return 0;
}

static const char *human(uint64_t v, char *buf, size_t len)
{
	static const char *const unit[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
	double d = (double)v;
	int u = 0;

	while (d >= 1024 && u < 5) {
		d /= 1024;
		u++;
	}
	snprintf(buf, len, u ? "%.2f%s" : "%.0f%s", d, unit[u]);
	return buf;
}

/*
 * Tell the kernel about new block device members, as mkfs.btrfs does, so a
 * multi-device filesystem mounts without a 'btrfs device scan' first. Image
 * files need a loop device (and a scan) anyway. Failures only warn.
 */
static void register_devices(char **paths, int n, bool quiet)
{
	int ctl = -1;

	for (int i = 0; i < n; i++) {
		struct btrfs_ioctl_vol_args args;
		struct stat st;

		if (stat(paths[i], &st) || !S_ISBLK(st.st_mode))
			continue;
		if (ctl < 0)
			ctl = open("/dev/btrfs-control", O_RDWR | O_CLOEXEC);
		if (ctl < 0)
			break;
		memset(&args, 0, sizeof(args));
		strncpy(args.name, paths[i], sizeof(args.name) - 1);
		if (ioctl(ctl, BTRFS_IOC_SCAN_DEV, &args) && !quiet)
			fprintf(stderr, "ubtrfs mkfs: warning: the kernel did not register %s: %s\n", paths[i],
				strerror(errno));
	}
	if (ctl >= 0)
		close(ctl);
}

/* After a failed --rootdir copy: exactly what the filesystem holds, which is its last commit. */
static void rootdir_left(const char *rootdir, const struct ub_rootdir_stats *st)
{
	char buf[64];

	if (!st->commits) {
		fprintf(stderr, "ubtrfs mkfs: error: --rootdir %s: the copy failed before its first commit: the new "
			"filesystem is empty, as mkfs made it (nothing of %s is in it)\n", rootdir, rootdir);
		return;
	}
	fprintf(stderr, "ubtrfs mkfs: error: --rootdir %s: the copy failed; the filesystem holds what its last "
		"commit (%" PRIu64 " of the copy) held: %" PRIu64 " inodes, %" PRIu64 " extra hard links, %" PRIu64
		" xattrs, %s of data, that is every entry the copy took before %s (depth first, in each directory's "
		"readdir order); that one may be missing or partial, and the directories it is in may lack their "
		"times\n", rootdir, st->commits, st->kept_inodes, st->kept_links, st->kept_xattrs,
		human(st->kept_data_bytes, buf, sizeof(buf)), st->kept_at);
}

int cmd_mkfs(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "data", required_argument, NULL, 'd' },     { "metadata", required_argument, NULL, 'm' },
		{ "nodesize", required_argument, NULL, 'n' }, { "sectorsize", required_argument, NULL, 's' },
		{ "csum", required_argument, NULL, 0x200 },   { "checksum", required_argument, NULL, 0x200 },
		{ "label", required_argument, NULL, 'L' },    { "uuid", required_argument, NULL, 'U' },
		{ "features", required_argument, NULL, 'O' }, { "force", no_argument, NULL, 'f' },
		{ "quiet", no_argument, NULL, 'q' },          { "help", no_argument, NULL, 'h' },
		{ "rootdir", required_argument, NULL, 'r' }, { "compress", required_argument, NULL, 0x202 },
		{ NULL, 0, NULL, 0 },
	};
	struct ub_mkfs_opts o;
	struct ub_mkfs_result res;
	struct ub_log log = { .fn = NULL, .arg = NULL, .verbosity = UB_LOG_WARN, .errors = NULL };
	struct ub_dev **devs = NULL;
	bool force = false, quiet = false;
	const char *rootdir = NULL;
	int clevel = 0;
	struct ub_rootdir_stats rst;
	char why[512], buf[64], ubuf[UB_UUID_STR_LEN];
	uint32_t sectorsize = 4096;
	int opt, ndevs, ret;

	ub_mkfs_opts_init(&o);
	while ((opt = getopt_long(argc, argv, "d:m:n:s:L:U:O:r:fqh", longopts, NULL)) != -1) {
		switch (opt) {
		case 'd':
			if (ub_mkfs_parse_profile(optarg, &o.data_profile))
				return usage_error("mkfs", "unknown data profile '%s'", optarg);
			break;
		case 'm':
			if (ub_mkfs_parse_profile(optarg, &o.meta_profile))
				return usage_error("mkfs", "unknown metadata profile '%s'", optarg);
			break;
		case 'n':
			if (parse_size(optarg, &o.nodesize))
				return usage_error("mkfs", "invalid nodesize '%s'", optarg);
			break;
		case 's':
			if (parse_size(optarg, &sectorsize) || sectorsize != 4096)
				return usage_error("mkfs", "sectorsize '%s': only 4096 is supported", optarg);
			break;
		case 0x200:
			if (ub_mkfs_parse_csum(optarg, &o.csum_type))
				return usage_error("mkfs", "unknown checksum '%s' (crc32c, xxhash, sha256, blake2)",
						   optarg);
			break;
		case 'L':
			if (strlen(optarg) >= UB_LABEL_SIZE)
				return usage_error("mkfs", "label longer than %u bytes", UB_LABEL_SIZE - 1);
			strcpy(o.label, optarg);
			break;
		case 'U':
			if (uuid_parse(optarg, o.fsid))
				return usage_error("mkfs", "invalid UUID '%s'", optarg);
			o.fsid_given = true;
			break;
		case 'O':
			if (ub_mkfs_parse_features(optarg, &o.features, why, sizeof(why)))
				return usage_error("mkfs", "%s", why);
			break;
		case 'f': force = true; break;
		case 'q': quiet = true; break;
		case 'h': fputs(help, stdout); return EXIT_OK;
		case 'r': rootdir = optarg; break;
		case 0x202:
			if (ub_mkfs_parse_compress(optarg, &o.compress, &clevel))
				return usage_error("mkfs", "--compress '%s': zlib[:1-9], lzo or zstd[:1-15]", optarg);
			break;
		default: return usage_error("mkfs", "invalid option");
		}
	}
	if (optind >= argc)
		return usage_error("mkfs", "no device given");
	if (o.compress && !rootdir)
		return usage_error("mkfs", "--compress needs --rootdir");
	if (rootdir) {
		struct stat rs;

		/* refused before anything is written */
		int sr = stat(rootdir, &rs);

		if (sr || !S_ISDIR(rs.st_mode)) {
			fprintf(stderr, "ubtrfs mkfs: error: --rootdir %s: %s\n", rootdir,
				sr ? strerror(errno) : "not a directory");
			return EXIT_FATAL;
		}
	}
	ndevs = argc - optind;

	if (o.fsid_given) {
		char sys[64];
		struct stat st;

		/* the kernel keys filesystems by fsid: a second one with a mounted one's cannot be mounted */
		ub_uuid_str(o.fsid, ubuf);
		snprintf(sys, sizeof(sys), "/sys/fs/btrfs/%s", ubuf);
		if (!stat(sys, &st)) {
			fprintf(stderr, "ubtrfs mkfs: error: UUID %s belongs to a mounted filesystem\n", ubuf);
			return EXIT_FATAL;
		}
	}
	ret = ub_mkfs_check_paths((const char *const *)argv + optind, ndevs, force, why, sizeof(why));
	if (ret) {
		fprintf(stderr, "ubtrfs mkfs: error: %s\n", why);
		return EXIT_FATAL;
	}
	devs = calloc((size_t)ndevs, sizeof(*devs));
	if (!devs) {
		fprintf(stderr, "ubtrfs mkfs: error: out of memory\n");
		return EXIT_FATAL;
	}
	for (int i = 0; i < ndevs; i++) {
		ret = ub_dev_open(argv[optind + i], true, &devs[i]);
		if (ret) {
			fprintf(stderr, "ubtrfs mkfs: error: cannot open %s for writing: %s\n", argv[optind + i],
				strerror(-ret));
			for (int j = 0; j < i; j++)
				ub_dev_close(devs[j]);
			free(devs);
			return EXIT_FATAL;
		}
	}
	/* ub_mkfs closes the devices */
	ret = ub_mkfs(devs, ndevs, &o, &log, &res);
	free(devs);
	if (ret)
		return EXIT_FATAL;
	if (rootdir) {
		ret = ub_mkfs_rootdir((const char *const *)argv + optind, ndevs, rootdir, o.compress, clevel, &log,
				      &rst);
		if (ret) {
			rootdir_left(rootdir, &rst);
			register_devices(argv + optind, ndevs, true);
			return EXIT_PROBLEMS;
		}
	}
	register_devices(argv + optind, ndevs, quiet);
	if (res.meta_profile & (BTRFS_BLOCK_GROUP_RAID5 | BTRFS_BLOCK_GROUP_RAID6)) {
		int parity = res.meta_profile & BTRFS_BLOCK_GROUP_RAID6 ? 2 : 1;
		int data = ndevs - parity > 0 ? ndevs - parity : 1;

		/* the seed's cost: no stripe holding committed data is ever written again, so metadata takes whole stripes */
		fprintf(stderr,
			"WARNING: metadata on %s: ubtrfs writes RAID5/6 only into whole free stripes (no write hole), so\n"
			"         a commit that changes a few %u KiB tree blocks still takes whole %d KiB stripes (%d data\n"
			"         strips of 64 KiB); -m raid1c3 survives two lost devices as RAID6 does, for three copies\n"
			"         of the metadata instead: it is the recommended metadata profile beside RAID5/6 data.\n",
			ub_profile_name(res.meta_profile), o.nodesize / 1024, data * 64, data);
	}
	if (!quiet) {
		ub_uuid_str(res.fsid, ubuf);
		printf("Label:              %s\n", o.label[0] ? o.label : "(none)");
		printf("UUID:               %s\n", ubuf);
		printf("Node size:          %u\n", o.nodesize);
		printf("Sector size:        4096\n");
		printf("Filesystem size:    %s\n", human(res.total_bytes, buf, sizeof(buf)));
		printf("Block group profiles:\n");
		printf("  Data:             %-8s %12s\n", ub_profile_name(res.data_profile), human(res.data_len, buf, sizeof(buf)));
		printf("  Metadata:         %-8s %12s\n", ub_profile_name(res.meta_profile), human(res.meta_len, buf, sizeof(buf)));
		printf("  System:           %-8s %12s\n", ub_profile_name(res.meta_profile), human(res.sys_len, buf, sizeof(buf)));
		printf("Checksum:           %s\n", ub_csum_name(o.csum_type));
		printf("Number of devices:  %d\n", ndevs);
		for (int i = 0; i < ndevs; i++)
			printf("   %4d  %s\n", i + 1, argv[optind + i]);
		if (rootdir)
			printf("Rootdir:            %s: %" PRIu64 " inodes, %" PRIu64 " extra hard links, %" PRIu64
			       " xattrs, %s of data, %" PRIu64 " commits\n",
			       rootdir, rst.inodes, rst.links, rst.xattrs, human(rst.data_bytes, buf, sizeof(buf)),
			       rst.commits);
	}
	return EXIT_OK;
}
