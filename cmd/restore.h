/* SPDX-License-Identifier: MIT */
/*
 * ubtrfs restore: what its parts share. restore.c parses the options and
 * walks the filesystem; restore_out.c makes each entry under OUTDIR, always
 * relative to a directory descriptor and never through a symbolic link;
 * restore_map.c remembers inodes (hard links, directories entered).
 */
#ifndef UBTRFS_CMD_RESTORE_H
#define UBTRFS_CMD_RESTORE_H

#include <pthread.h>
#include <regex.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include "cmd.h"
#include "ubtrfs/recover.h"

/* (subvolume, inode) -> a path under OUTDIR (or NULL: only "seen"). */
struct rmap {
	struct rmap_slot {
		uint64_t subvol, ino;
		char *path;
	} *v;
	size_t n, cap;
};

/* 1 added, 0 there already (*path: its value), <0 -ENOMEM. The value is copied. */
int rmap_add(struct rmap *m, uint64_t subvol, uint64_t ino, const char *path, const char **found);
void rmap_free(struct rmap *m);
bool rmap_has(const struct rmap *m, uint64_t subvol, uint64_t ino);
/* The path kept for (subvol, ino), NULL when none (or not there). */
const char *rmap_get(const struct rmap *m, uint64_t subvol, uint64_t ino);

struct restorer {
	struct ub_fs *fs;
	struct open_args oa;
	bool dry_run, overwrite, no_snapshots;
	/*
	 * --no-privileged: no device nodes, no set-id bits on what is not a
	 * directory, no security.capability (an untrusted image's /dev/mem, set-id
	 * root binaries, capabilities). Either way they are counted for the summary:
	 * nprivdev and nsetid by the walk, ncaps by whichever thread sets (or drops)
	 * a file's extended attributes, atomically.
	 */
	bool no_privileged;
	uint64_t nprivdev, nsetid, ncaps;
	bool owner, mode, times, xattrs; /* what metadata is restored */
	bool use_regex;
	regex_t regex;
	int rootfd;       /* OUTDIR */
	mode_t umask;     /* for --no-mode */
	uid_t euid;       /* who owns what restore makes */
	gid_t egid;
	int rc;           /* EXIT_FATAL as it happens; problems make it EXIT_PROBLEMS at the end */
	char *target;     /* symlink targets */
	struct rmap links;   /* inodes with several names: the path restored first */
	struct rmap entered; /* directories entered (against loops), each with its path under OUTDIR */
	int depth;
	/* counts for the summary */
	uint64_t ndirs, nfiles, nsymlinks, nhardlinks, nspecial, bytes, nproblems, nexisting;
	/*
	 * During the main walk, small files are made by the copiers: an open
	 * that creates a file costs as much as copying a small one, and the walk
	 * was the busier thread (restore_copy.c, rs_copy_make).
	 */
	bool defer_open;
	/* progress on a terminal */
	bool tty;
	struct timespec last_progress;
	/* ---- older roots (restore_older.c) ---- */
	char **devs;          /* the devices as given, to open older roots from */
	int ndevs;
	uint64_t generation;  /* of the root in use: only older ones are a second chance */
	struct ub_older_roots *older;
	/* ---- the report ---- */
	FILE *report;      /* --report: one JSON line per damaged or lost file */
	uint64_t files_complete, files_partial, files_lost, bytes_lost;
	uint64_t bytes_zeroed; /* of `bytes`: written as zeros where the data could not be read */
	/* ---- file data, copied beside the walk (restore_copy.c) ---- */
	struct rs_pool *pool;
	/*
	 * Taken by every thread for what they share: stderr and the report, the
	 * counts the data copies add to (bytes, files_*, bytes_lost, bytes_zeroed,
	 * nproblems), and opening an older root (which may print). The walk's own
	 * counts (ndirs, nsymlinks, ...) are the walking thread's alone; nfiles and
	 * nexisting are added to atomically (a copier makes most files: defer_open).
	 */
	pthread_mutex_t lock;
	/* ---- scavenging (restore_scavenge.c) ---- */
	bool scavenge;       /* on unless --no-scavenge, and only for a whole-filesystem restore */
	bool deleted;        /* --deleted: deleted inodes an older root still has, under OUTDIR/deleted */
	struct rmap reached; /* every inode the walk restored (not directories: `entered`) */
	uint64_t nscavenged, ndeleted, nundeleted, nundeleted_loose;
	uint64_t nplaced;    /* inodes no tree has, put back at their names from the scanned leaves */
	/*
	 * Files the walk read from a root older than the last commit (the root
	 * in use, or an older one it fell back to) wait for the scan: intact
	 * leaves of a later commit may hold a newer version of them (stale.c).
	 * The scan, and what is trusted, is the library's (ub_recover, lib/recover).
	 */
	struct ub_recover *recover;
	uint64_t fs_gen;      /* the generation of the root r->fs is: the walk keeps it with r->fs */
	uint64_t last_commit; /* the superblock's generation */
	bool defer_stale;     /* during the walk of a whole-filesystem restore that scavenges */
	struct rs_stale *stale; /* by the tag each has in r->recover: its index here */
	size_t nstale, stale_cap;
	uint64_t nfresh;      /* of those, restored newer from the leaves */
};

/* A directory on the walk; made under OUTDIR only when something goes into it (lazily). */
struct frame {
	struct frame *parent;
	const char *name; /* its entry's name (NUL-terminated), NULL for OUTDIR */
	char *rel;        /* path under OUTDIR, "" for OUTDIR itself */
	int fd;           /* -1 until made or opened */
	bool made;        /* restore made it (its metadata is restored when the walk leaves it) */
	bool failed;      /* it could not be made: nothing goes below it */
	bool have_inode;
	struct ub_inode in;
	bool plain;       /* new files in it get restore's group and the umask's mode (no default ACL); set when made */
	struct rs_dir *shared; /* set once a copier is to make a file in it (rs_copy_make) */
};

/*
 * A directory that copiers make files in after the walk handed them over:
 * its descriptor stays open, and its metadata unset (making a file changes
 * its mtime), until the walk has left it and the last of them is made.
 */
struct rs_dir {
	int fd;
	unsigned refs;  /* under r->lock: the walk's until it leaves, and one per file still to be made */
	bool set_meta;  /* what the walk found when it left: restore made it and read its inode */
	struct ub_fs *fs;
	char *rel;
	struct ub_inode in;
};

/* The older roots (r->fs and r->generation set) and the scavenging session: 0 or -ENOMEM. */
int rs_older_init(struct restorer *r);
int rs_recover_init(struct restorer *r);
/*
 * Older root i (0: the newest below the one in use), opened on the first call:
 * 0 and the filesystem and its generation, -ENOENT past the last.
 */
int rs_older(struct restorer *r, int i, struct ub_fs **fs, uint64_t *generation);
void rs_older_close(struct restorer *r);

/*
 * Names from the disk in every line restore prints (stderr, the -n listing)
 * are escaped as check escapes them (name_shown, dirlist.h): one entry, one line.
 */
/* A note about a path under OUTDIR, on stderr at `level` and above: "ubtrfs: note: /REL: ..." */
void rs_note(struct restorer *r, int level, const char *rel, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* The -n listing's line for a path under OUTDIR: "/REL" and `suffix` ("/" a directory, "@" a symlink). */
void rs_list(const char *rel, const char *suffix);
/* Report a problem with a path under OUTDIR ("" is OUTDIR): one line on stderr and in the report, exit code 1. */
void rs_problem(struct restorer *r, const char *rel, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The same for a file's data: the report has its line already (rs_verdict). */
void rs_data_problem(struct restorer *r, const char *rel, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The progress line on a terminal: from the walking thread only. */
void rs_progress(struct restorer *r, bool final);
/* The same during the raw device scan of a chunk rebuild and the metadata scans (arg: the restorer). */
void rs_progress_chunks(void *arg, uint64_t done, uint64_t total);
void rs_progress_scan(void *arg, uint64_t done, uint64_t total);

/* A range of a file that could not be read. */
struct rs_lost {
	uint64_t off, len;
	char why[128];
};
struct rs_lostv {
	struct rs_lost *v;
	size_t n, cap;
	bool nomem; /* some could not be kept */
};
/* A file copied (its lost ranges sorted): counted complete, partial or lost; the latter two get a report line. */
void rs_verdict(struct restorer *r, const char *rel, const struct ub_inode *in, const struct rs_lostv *lost);
/* Do files made in directory `fd` get restore's group and the umask's mode? (struct frame's `plain`) */
bool rs_plain_dir(const struct restorer *r, int fd);
/* The permission bits to give what `in` is (--no-mode, --no-privileged applied). */
mode_t rs_mode(const struct restorer *r, const struct ub_inode *in);
/* What making a file already got right, so rs_set_meta leaves it (a system call per file saved). */
#define RS_HAVE_OWNER 1u
#define RS_HAVE_MODE 2u
/* Owner, xattrs (from `fs`), mode and times of what `fd` opens (an O_PATH descriptor: via_proc), less `have`. */
void rs_set_meta(struct restorer *r, struct ub_fs *fs, int fd, bool via_proc, const char *rel,
		 const struct ub_inode *in, unsigned have);
/* Access and modification times of what `fd` opens, from `in`; a failure is a problem on `rel`. */
void rs_set_times(struct restorer *r, int fd, const char *rel, const struct ub_inode *in);

/*
 * File data (restore_copy.c). rs_copy_start starts the copying threads (none
 * on one CPU: the walk copies itself then); rs_copy_file hands over a file just
 * made (`fd` becomes the copier's: it sets the metadata and closes it), the
 * data read from the root the walk uses now (r->fs); rs_copy_finish waits for
 * every file and stops the threads.
 */
int rs_copy_start(struct restorer *r);
void rs_copy_file(struct restorer *r, int fd, const char *rel, const struct ub_inode *in, unsigned have);
/*
 * With r->defer_open, hand over a file still to be made: a copier makes it
 * as NAME (the end of `rel`) in `dir` with mode `make`, then copies it.
 * false when the caller is to make it (no copiers, a file copied in ranges, or
 * an inode of several names: its first is made before its links).
 */
bool rs_copy_make(struct restorer *r, struct frame *dir, const char *rel, size_t name_off, const struct ub_inode *in,
		  mode_t make, unsigned have);
/* The walk left a directory that has r->shared: the metadata is set (and the descriptor closed) by the last user. */
void rs_dir_leave(struct restorer *r, struct frame *f, bool set_meta);
/* Its metadata (when asked), then the descriptor closed and d freed. */
void rs_dir_finish(struct restorer *r, struct rs_dir *d);
/* A name already in the directory: replaced with --overwrite (a directory never), else reported. 0 to go on. */
int rs_make_room(struct restorer *r, int dfd, const char *name, const char *rel);
void rs_copy_finish(struct restorer *r);
/* Wait until every file handed over is copied (the copiers then leave the fs alone until the next). */
void rs_copy_drain(struct restorer *r);

/* Make (or open) the directory of frame f and its parents: 0, or <0 (reported, f->failed set). */
int rs_dir_make(struct restorer *r, struct frame *f);
/* Leave a directory: its metadata when restore made it, then its descriptor closed. */
void rs_dir_done(struct restorer *r, struct frame *f);
/*
 * After the walk: inodes that leaves of the metadata block groups hold but no
 * name reached, restored under OUTDIR/lost+found/<subvolume>/<inode>.
 */
void rs_scavenge(struct restorer *r, struct frame *root);
/*
 * Files that wait for the scan (restore_stale.c). rs_stale_defer takes a file
 * the walk read from an older root (false: restore it now) and holds it in
 * r->recover; rs_stale_restore, once the scan has run, restores each, newer
 * when the library says the leaves give it whole and verified, else as the
 * walk read it.
 */
struct rs_stale {
	uint64_t gen; /* of the root it was read from */
	struct ub_fs *fs;
	char *rel;
	struct ub_inode in;
};
bool rs_stale_defer(struct restorer *r, const char *rel, const struct ub_inode *in);
void rs_stale_restore(struct restorer *r, struct frame *root);
void rs_stale_free(struct restorer *r);
/* The directory at `path` under OUTDIR (made if it is not), with its chain of frames; rs_close_chain leaves them. */
struct frame *rs_open_chain(struct restorer *r, struct frame *root, const char *path, struct frame **all, char **copy,
			    int *n);
void rs_close_chain(struct restorer *r, struct frame *v, char *copy, int n);

/* Restore one entry that is not a directory into directory `dir` (made already). */
void rs_entry(struct restorer *r, struct frame *dir, const char *name, const char *rel, const struct ub_inode *in);

#endif
