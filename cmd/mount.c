/* SPDX-License-Identifier: MIT */
/* ubtrfs mount: open the filesystem, mount the FUSE session, then (unless -f) go to the background. */
#define FUSE_USE_VERSION 35
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include "cmd.h"
#include "mount.h"
#include "mount_subvol.h"
#include "mount_scrub.h"
#include "ubtrfs/devinfo.h"
#include "ubtrfs/engine.h"
#include "ubtrfs/fswrite.h"
#include "ubtrfs/format.h"
#include "ubtrfs/fsinfo.h"
#include "ubtrfs/fsquery.h"
#include "ubtrfs/log.h"

static const char mount_help[] =
	"usage: ubtrfs mount [-o OPTIONS] [-f] DEV... MOUNTPOINT\n\n"
	"Mount a btrfs filesystem through FUSE, read-write (as the kernel mounts it) or with -o ro\n"
	"read-only. Without -f the command returns once the filesystem is open and mounted (an open\n"
	"failure is reported here, exit 2); the daemon then logs to syslog. 'ubtrfs umount\n"
	"MOUNTPOINT' unmounts, after a last commit.\n\n"
	"  -f                 stay in the foreground, errors to stderr\n"
	"  -o OPTIONS         comma-separated:\n"
	"       ro, rw        read-only, or read-write (the default)\n"
	"       subvol=PATH   mount this subvolume (a path from the top level)\n"
	"       subvolid=N    mount subvolume N\n"
	"       commit=N      commit every N seconds (default 30); fsync, sync and the unmount commit\n"
	"       compress[=ALGO[:LEVEL]], compress-force[=ALGO[:LEVEL]]\n"
	"                     compress new data: zlib (1-9, the default), lzo, zstd (1-15), no\n"
	"       nodatacow, nodatasum\n"
	"                     new files without copy-on-write (and checksums) / without checksums\n"
	"       max_inline=SIZE  files up to SIZE live in their leaf (default 2048)\n"
	"       notreelog, treelog\n"
	"                     fsync commits / writes the fsync log (the default)\n"
	"       noatime, relatime, strictatime\n"
	"                     when a read updates the access time (relatime: the default)\n"
	"       acl, noacl    POSIX ACLs enforced (the default), or not\n"
	"       nosuid, nodev, noexec  as for any mount\n"
	"       suid, dev     set-id programs and device nodes work (a FUSE mount has neither\n"
	"                     unless asked; root only)\n"
	"       dirty=SIZE    dirty metadata a transaction may hold before it commits (default 64M)\n"
	"       nologreplay   ignore the fsync log tree (read-only only)\n"
	"       degraded      mount even with devices missing (writes leave them out)\n"
	"       skip_balance  leave a paused or interrupted balance paused (else the mount\n"
	"                     resumes it in the background, as the kernel does)\n"
	"       generation=N  mount the older root of generation N (a backup root; as --generation;\n"
	"                     read-only)\n"
	"       usebackuproot if the current root cannot be read, the newest backup root that can\n"
	"                     (as --backup; also rescue=usebackuproot; read-only)\n"
	"       root=BYTENR   mount the root tree at logical address BYTENR (as --root; read-only)\n"
	"       cache=SIZE    the memory budget, mostly tree blocks (default 256M, at least 16M;\n"
	"                     K, M, G suffixes)\n"
	"       readahead=SIZE\n"
	"                     the kernel's read-ahead window (default 4M, what btrfs gives its\n"
	"                     mounts; 0 keeps FUSE's 128K; only root can widen it)\n"
	"       space_cache=v2, ssd, nossd, ...: accepted, nothing to do; discard and space_cache=v1\n"
	"                     are refused with the reason\n"
	OPEN_ARGS_HELP;

/* Where serving errors go: stderr until the daemon has left the terminal, then syslog. */
static bool log_to_syslog;

static void mount_log(void *arg, enum ub_log_level lvl, const char *msg)
{
	static const char *const names[] = { "error", "warning", "info", "debug" };
	static const int prio[] = { LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG };
	const int *verbosity = arg;

	if ((int)lvl > *verbosity)
		return;
	if (log_to_syslog)
		syslog(prio[lvl], "%s: %s", names[lvl], msg);
	else
		fprintf(stderr, "ubtrfs: %s: %s\n", names[lvl], msg);
}

/* The kernel refuses a filesystem with devices missing unless told "degraded": so do we. */
static int check_devices(struct ub_fs *fs, bool degraded)
{
	struct ub_device_info *devs;
	int ndevs, missing = 0;
	int ret = ub_volume_list_devices(ub_fs_volume(fs), &devs, &ndevs);

	if (ret)
		return ret;
	for (int i = 0; i < ndevs; i++)
		if (devs[i].missing)
			missing++;
	if (!missing || degraded) {
		free(devs);
		return 0;
	}
	fprintf(stderr, "ubtrfs mount: error: %d device%s missing (devid", missing, missing > 1 ? "s" : "");
	for (int i = 0; i < ndevs; i++)
		if (devs[i].missing)
			fprintf(stderr, " %llu", (unsigned long long)devs[i].devid);
	fprintf(stderr, "); give the others, or -o degraded\n");
	free(devs);
	return -ENODEV;
}

/* The directory to show as the mount's root: the top level, or the subvolume asked for. */
static int find_root(struct ub_fs *fs, const struct mount_opts *mo, uint64_t *subvol, uint64_t *ino)
{
	struct ub_inode in;
	int ret;

	*subvol = BTRFS_FS_TREE_OBJECTID;
	*ino = BTRFS_FIRST_FREE_OBJECTID;
	if (mo->subvol) {
		ret = ub_path_lookup(fs, mo->subvol, subvol, ino);
		if (ret) {
			fprintf(stderr, "ubtrfs mount: error: subvol '%s': %s\n", mo->subvol, strerror(-ret));
			return ret;
		}
		if (*ino != BTRFS_FIRST_FREE_OBJECTID) {
			fprintf(stderr, "ubtrfs mount: error: '%s' is not a subvolume\n", mo->subvol);
			return -EINVAL;
		}
		if (mo->subvolid && mo->subvolid != *subvol) {
			fprintf(stderr, "ubtrfs mount: error: subvol '%s' is subvolume %llu, not subvolid %llu\n",
				mo->subvol, (unsigned long long)*subvol, (unsigned long long)mo->subvolid);
			return -EINVAL;
		}
	} else if (mo->subvolid) {
		*subvol = mo->subvolid;
	} else {
		/* as the kernel: without subvol= the default subvolume (set-default) */
		ret = ub_default_subvol(fs, subvol);
		if (ret) {
			fprintf(stderr, "ubtrfs mount: error: cannot find the default subvolume: %s\n", strerror(-ret));
			return ret;
		}
	}
	ret = ub_inode_read(fs, *subvol, *ino, &in);
	if (ret)
		fprintf(stderr, "ubtrfs mount: error: subvolume %llu: %s\n", (unsigned long long)*subvol,
			ret == -ENOENT ? "no such subvolume" : strerror(-ret));
	return ret;
}

struct readahead_job {
	char *mnt;
	uint64_t bytes;
	int verbosity;
};

/*
 * FUSE caps a mount's read-ahead at 128 KiB (its INIT reply can only lower the
 * window), so a large read reaches the daemon as 128 KiB requests, each a
 * round trip. The window lives in the mount's backing device info, which root
 * may widen once INIT is done; anyone else keeps the default. This runs beside
 * the session loop: the stat that finds the mount's device is answered by it.
 */
static void *set_readahead(void *arg)
{
	struct readahead_job *job = arg;
	char path[64], val[32];
	struct stat st;
	/* the kernel counts in KiB: a size that is not a multiple rounds up, so only 0 means none */
	int fd, ret, n = snprintf(val, sizeof(val), "%llu\n", (unsigned long long)((job->bytes + 1023) >> 10));

	ret = stat(job->mnt, &st) < 0 ? -errno : 0;
	if (ret == 0) {
		snprintf(path, sizeof(path), "/sys/class/bdi/%u:%u/read_ahead_kb", major(st.st_dev), minor(st.st_dev));
		fd = open(path, O_WRONLY | O_CLOEXEC);
		if (fd < 0) {
			ret = -errno;
		} else {
			ssize_t w = write(fd, val, (size_t)n);

			ret = w == n ? 0 : w < 0 ? -errno : -EIO;
			close(fd);
		}
	}
	if (ret) {
		char msg[PATH_MAX + 128];
		snprintf(msg, sizeof(msg), "read-ahead left at the kernel's default: cannot set it for %s: %s", job->mnt,
			 strerror(-ret));
		mount_log(&job->verbosity, UB_LOG_INFO, msg);
	}
	free(job->mnt);
	free(job);
	return NULL;
}

static void start_readahead(const char *mnt, uint64_t bytes, int verbosity)
{
	struct readahead_job *job = malloc(sizeof(*job));
	pthread_t tid;

	if (!job)
		return;
	*job = (struct readahead_job){ .mnt = strdup(mnt), .bytes = bytes, .verbosity = verbosity };
	if (!job->mnt || pthread_create(&tid, NULL, set_readahead, job)) {
		free(job->mnt);
		free(job);
		return;
	}
	pthread_detach(tid);
}

/*
 * The commit thread: every commit= seconds, what the running transaction
 * holds becomes durable; and while deleted subvolumes wait (a delete through
 * the ioctls, or left by the last session), it drops them in steps of
 * MOUNT_CLEAN_STEP tree blocks, each a committed transaction of its own, as
 * the kernel's cleaner thread does. Between steps the writer lock is free,
 * so the mount's operations go on; the pause lets them take it.
 */
#define MOUNT_CLEAN_STEP 1024
#define MOUNT_CLEAN_PAUSE_NS 1000000

struct committer {
	struct mount_ctx *mc;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool stop;
	bool clean;         /* dead roots may wait */
	uint64_t kicks;     /* deletes since start: a step that finds nothing left ends cleaning only if none came */
	pthread_t tid;
	bool started;
};

static bool ts_reached(const struct timespec *now, const struct timespec *when)
{
	return now->tv_sec > when->tv_sec || (now->tv_sec == when->tv_sec && now->tv_nsec >= when->tv_nsec);
}

static void *commit_loop(void *arg)
{
	struct committer *c = arg;
	struct timespec next, now;

	clock_gettime(CLOCK_REALTIME, &next);
	next.tv_sec += (time_t)c->mc->mo->commit_secs;
	pthread_mutex_lock(&c->lock);
	while (!c->stop) {
		uint64_t seen;
		bool due, clean, more = false;

		if (c->clean) {
			/* a short pause between cleaning steps, cut short by a stop */
			struct timespec pause;

			clock_gettime(CLOCK_REALTIME, &pause);
			pause.tv_nsec += MOUNT_CLEAN_PAUSE_NS;
			if (pause.tv_nsec >= 1000000000L) {
				pause.tv_sec++;
				pause.tv_nsec -= 1000000000L;
			}
			if (!c->stop)
				pthread_cond_timedwait(&c->cond, &c->lock, &pause);
		} else {
			while (!c->stop && !c->clean && pthread_cond_timedwait(&c->cond, &c->lock, &next) != ETIMEDOUT)
				;
		}
		if (c->stop)
			break;
		clock_gettime(CLOCK_REALTIME, &now);
		due = ts_reached(&now, &next);
		clean = c->clean;
		seen = c->kicks;
		pthread_mutex_unlock(&c->lock);
		if (due) {
			mount_sync(c->mc);
			clock_gettime(CLOCK_REALTIME, &next);
			next.tv_sec += (time_t)c->mc->mo->commit_secs;
		}
		if (clean) {
			int ret = __atomic_load_n(&c->mc->broken, __ATOMIC_ACQUIRE) ? -EROFS
				  : ub_engine_clean(c->mc->e, MOUNT_CLEAN_STEP, &more);

			if (ret && ret != -EROFS)
				ub_err(ub_fs_log(c->mc->fs), "dropping a deleted subvolume failed (%s): the rest waits for "
				       "the next mount", strerror(-ret));
			if (ret)
				more = false;
		}
		pthread_mutex_lock(&c->lock);
		if (clean && !more && c->kicks == seen)
			c->clean = false;
	}
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

static void wake_cleaner(struct mount_ctx *mc)
{
	struct committer *c = mc->committer;

	if (!c || !c->started)
		return;
	pthread_mutex_lock(&c->lock);
	c->clean = true;
	c->kicks++;
	pthread_cond_signal(&c->cond);
	pthread_mutex_unlock(&c->lock);
}

static void committer_start(struct committer *c, struct mount_ctx *mc)
{
	c->mc = mc;
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->cond, NULL);
	/* what the last session (or the kernel) left to drop */
	c->clean = mc->e && ub_engine_has_dead_roots(mc->e) > 0;
	mc->committer = c;
	c->started = mc->e && pthread_create(&c->tid, NULL, commit_loop, c) == 0;
	if (c->started)
		mc->wake_cleaner = wake_cleaner;
}

static void committer_stop(struct committer *c)
{
	if (!c->started)
		return;
	pthread_mutex_lock(&c->lock);
	c->stop = true;
	pthread_cond_signal(&c->cond);
	pthread_mutex_unlock(&c->lock);
	pthread_join(c->tid, NULL);
	c->mc->wake_cleaner = NULL;
	c->mc->committer = NULL;
}

static int serve(struct mount_ctx *mc, const struct mount_opts *mo, int verbosity, const char *dev, const char *mnt,
		 bool foreground)
{
	struct committer cm = { 0 };
	char fsopts[4200];
	char *fargv[] = { "ubtrfs", "-o", fsopts, NULL };
	struct fuse_args args = FUSE_ARGS_INIT(3, fargv);
	struct fuse_loop_config cfg = { .clone_fd = 0, .max_idle_threads = 10 };
	struct fuse_session *se;
	const uint64_t ra = mo->readahead_bytes;
	/* fuse_daemonize moves to "/": a relative mount point is resolved now, before the mount covers it */
	char *canon = realpath(mnt, NULL);
	int ret = EXIT_FATAL;

	/* commas in a device name would split the option list */
	/* FUSE mounts nosuid,nodev unless told suid / dev (which only root may ask for) */
	snprintf(fsopts, sizeof(fsopts), "%s,default_permissions,subtype=ubtrfs,fsname=%s%s%s%s%s%s%s",
		 mc->e ? "rw" : "ro", strchr(dev, ',') ? "ubtrfs" : dev, geteuid() == 0 ? ",allow_other" : "",
		 mo->nosuid ? ",nosuid" : "", mo->nodev ? ",nodev" : "", mo->noexec ? ",noexec" : "",
		 mo->suid ? ",suid" : "", mo->dev ? ",dev" : "");
	se = fuse_session_new(&args, &mount_ops, sizeof(mount_ops), mc);
	fuse_opt_free_args(&args);
	if (!se) {
		free(canon);
		return EXIT_FATAL;
	}
	mc->se = se;
	mc->notify_attrs = mount_notify_attrs;
	mc->mountpoint = canon;
	if (fuse_session_mount(se, mnt)) {
		fprintf(stderr, "ubtrfs mount: error: cannot mount on %s\n", mnt);
		goto out_destroy;
	}
	/* requests libfuse has no operation for (O_TMPFILE) are ours to read (mount_io.c) */
	if (mount_session_io(se)) {
		fprintf(stderr, "ubtrfs mount: error: cannot read the FUSE device of %s\n", mnt);
		goto out_unmount;
	}
	if (!foreground) {
		openlog("ubtrfs", LOG_PID, LOG_DAEMON);
		if (fuse_daemonize(0))
			goto out_unmount;
		log_to_syslog = true;
	}
	if (fuse_set_signal_handlers(se))
		goto out_unmount;
	/* after fuse_daemonize: threads do not cross its fork */
	if (ra)
		start_readahead(canon ? canon : mnt, ra, verbosity);
	committer_start(&cm, mc);
	/* a balance the last session (or the kernel) left paused goes on, as the kernel's mount resumes it */
	if (mc->e && !mo->skip_balance)
		mount_balance_resume_start(mc);
	ret = fuse_session_loop_mt(se, &cfg) ? EXIT_FATAL : EXIT_OK;
	/* and pauses at the unmount (its item stays for the next mount), as the kernel's does */
	mount_balance_resume_stop(mc);
	committer_stop(&cm);
	/*
	 * The session's destroy committed; a loop that ended otherwise (a signal)
	 * commits here. A mount that a device failed (read-only since, said in the
	 * log) lost what came after its last commit: problems, not a clean exit.
	 */
	if (mount_sync(mc) && ret == EXIT_OK)
		ret = EXIT_PROBLEMS;
	fuse_remove_signal_handlers(se);
out_unmount:
	fuse_session_unmount(se);
out_destroy:
	fuse_session_destroy(se);
	free(canon);
	return ret;
}

int cmd_mount(int argc, char **argv)
{
	static const struct option longopts[] = { { "help", no_argument, NULL, 'h' }, OPEN_ARGS_LONGOPTS,
						  { NULL, 0, NULL, 0 } };
	struct open_args oa;
	struct mount_opts mo = { .readahead_bytes = MOUNT_READAHEAD_DEFAULT, .max_inline = MOUNT_MAX_INLINE_UNSET };
	struct mount_ctx mc = { .dirs_lock = PTHREAD_MUTEX_INITIALIZER };
	bool foreground = false;
	uint64_t subvol = 0, ino = 0;
	int opt, ret;

	open_args_init(&oa);
	while ((opt = getopt_long(argc, argv, "+ho:fvq", longopts, NULL)) != -1) {
		ret = open_args_parse(&oa, opt, optarg);
		if (ret < 0)
			return usage_error("mount", "bad value '%s'", optarg);
		if (ret)
			continue;
		switch (opt) {
		case 'h':
			fputs(mount_help, stdout);
			return EXIT_OK;
		case 'o':
			if (mount_opts_parse(&mo, optarg))
				return EXIT_FATAL;
			break;
		case 'f':
			foreground = true;
			break;
		default:
			return usage_error("mount", "unknown option");
		}
	}
	if (argc - optind < 2)
		return usage_error("mount", "expected DEV... MOUNTPOINT");

	struct ub_fs_opts fo = { .writable = false, .super_mirror = oa.super_mirror,
				 .no_log = oa.no_log || mo.nologreplay,
				 .root_generation = mo.generation ? mo.generation : oa.generation,
				 .backup = mo.usebackuproot || oa.backup,
				 .root_bytenr = mo.root_bytenr ? mo.root_bytenr : oa.root_bytenr,
				 .cache_bytes = mo.cache_bytes };
	struct ub_log log = { .fn = mount_log, .arg = &oa.verbosity, .verbosity = oa.verbosity };
	char **devs = argv + optind;
	int ndevs = argc - optind - 1;
	char **absdevs = calloc((size_t)ndevs + 1, sizeof(*absdevs));
	/* what only a read-only open gives: an older root, the log left alone, devices missing */
	const char *ro_only = fo.root_generation ? "generation" : fo.root_bytenr ? "root" : fo.backup ? "usebackuproot"
			      : fo.no_log ? "nologreplay" : oa.super_mirror >= 0 ? "--super"
			      : NULL;

	if (!absdevs) {
		ret = -ENOMEM;
		goto out;
	}
	/* the daemon leaves its directory: devices by absolute path, as DEV_INFO reports them */
	for (int i = 0; i < ndevs; i++) {
		struct stat st;

		absdevs[i] = devs[i][0] != '/' && stat(devs[i], &st) == 0 ? realpath(devs[i], NULL) : NULL;
		if (absdevs[i])
			devs[i] = absdevs[i];
	}
	if (fo.root_generation && fo.root_bytenr) {
		usage_error("mount", "generation and root name two roots: give one");
		goto out;
	}
	if (ro_only && mo.rw) {
		usage_error("mount", "%s opens read-only only: give ro (or leave rw out)", ro_only);
		goto out;
	}
	if (ro_only)
		mo.ro = true;
	if (!mo.commit_secs)
		mo.commit_secs = MOUNT_COMMIT_DEFAULT;
	mc.mo = &mo;
	if (mo.ro) {
		ret = open_fs_with(&oa, devs, ndevs, &fo, &log, &mc.fs);
		if (!ret)
			ret = check_devices(mc.fs, mo.degraded);
	} else {
		/* devices missing: the engine writes around them (every chunk must still read), as the kernel's degraded */
		oa.degraded = mo.degraded;
		ret = open_engine_with(&oa, devs, ndevs, &log, &mc.e);
		if (!ret) {
			uint64_t gone = 0;

			/* unlinked files stay while the kernel holds them; what the last session left goes now */
			ub_engine_keep_orphans(mc.e, true);
			/* deleted subvolumes are the commit thread's to drop, not every fsync's */
			ub_engine_set_clean_step(mc.e, 0);
			if (mo.max_inline != MOUNT_MAX_INLINE_UNSET)
				ub_engine_set_max_inline(mc.e, mo.max_inline > UINT32_MAX ? UINT32_MAX : (uint32_t)mo.max_inline);
			if (mo.dirty_bytes)
				ub_engine_set_dirty_budget(mc.e, mo.dirty_bytes);
			ret = ub_fsw_orphan_cleanup(mc.e, &gone);
			if (ret)
				fprintf(stderr, "ubtrfs mount: error: removing the orphans the last session left: %s\n",
					strerror(-ret));
		}
		if (!ret)
			ret = ub_engine_view(mc.e, &mc.fs);
	}
	if (!ret)
		ret = find_root(mc.fs, &mo, &subvol, &ino);
	mc.root_subvol = subvol;
	if (!ret)
		ret = mount_map_new(&mc.map);
	if (!ret && mount_map_get(mc.map, subvol, ino, 0, 1, 0, NULL) != 1)
		ret = -ENOMEM;
	if (ret)
		goto out;
	const uint8_t *sb = ub_volume_super(ub_fs_volume(mc.fs));
	mc.sectorsize = (uint32_t)UB_GET(ub_disk_super, sectorsize, sb);
	mc.total_bytes = UB_GET(ub_disk_super, total_bytes, sb);
	mc.bytes_used = UB_GET(ub_disk_super, bytes_used, sb);
	if (mc.bytes_used > mc.total_bytes)
		mc.bytes_used = mc.total_bytes;
	ret = mount_scrub_init(&mc) ? EXIT_FATAL : serve(&mc, &mo, oa.verbosity, devs[0], argv[argc - 1], foreground);
	mount_scrub_stop(&mc);
	mount_map_free(mc.map);
	ub_fs_close(mc.fs);
	ub_engine_close(mc.e);
	free((char *)mo.subvol);
	for (int i = 0; i < ndevs; i++)
		free(absdevs[i]);
	free(absdevs);
	return ret;
out:
	mount_map_free(mc.map);
	if (mc.fs)
		ub_fs_close(mc.fs);
	ub_engine_close(mc.e);
	free((char *)mo.subvol);
	for (int i = 0; absdevs && i < ndevs; i++)
		free(absdevs[i]);
	free(absdevs);
	return EXIT_FATAL;
}
