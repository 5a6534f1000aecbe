/* SPDX-License-Identifier: MIT */
/* The FUSE mount: what its files (options, inode map, operations, command) share. */
#ifndef UBTRFS_CMD_MOUNT_H
#define UBTRFS_CMD_MOUNT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include "ubtrfs/fs.h"

struct fuse_session;

struct mount_opts {
	const char *subvol;  /* -o subvol=PATH */
	uint64_t subvolid;   /* -o subvolid=N, 0 if not given */
	bool nologreplay;
	bool degraded;
	bool skip_balance;    /* -o skip_balance: a paused balance stays paused (else the mount resumes it) */
	uint64_t cache_bytes; /* -o cache=SIZE, 0 if not given */
	uint64_t generation;  /* -o generation=N: the older root of a backup slot (as --generation), 0 if not given */
	bool usebackuproot;   /* -o usebackuproot (or rescue=usebackuproot): as --backup */
	uint64_t root_bytenr; /* -o root=BYTENR: as --root, 0 if not given */
	uint64_t readahead_bytes; /* -o readahead=SIZE; 0 leaves FUSE's own; MOUNT_READAHEAD_DEFAULT if not given */
	/* ---- writing ---- */
	bool ro;              /* -o ro (an older root implies it) */
	bool rw;              /* -o rw given */
	uint64_t commit_secs; /* -o commit=N: seconds between commits (30) */
	int compress;         /* -o compress[-force]=ALGO[:LEVEL]: UB_COMPRESS_*, 0 none */
	int compress_level;
	bool compress_force;  /* compress-force: also what does not shrink by the first bytes (btrfs's heuristic) */
	bool nodatacow, nodatasum;
	bool notreelog;       /* -o notreelog: fsync commits instead of writing the fsync log */
	uint64_t max_inline;  /* -o max_inline=SIZE, MOUNT_MAX_INLINE_UNSET if not given */
	int atime;            /* MOUNT_RELATIME (default), MOUNT_NOATIME, MOUNT_STRICTATIME */
	bool noacl;           /* -o noacl: POSIX ACLs not enforced (acl is the default, as btrfs's) */
	bool nosuid, nodev, noexec;
	bool suid, dev;       /* -o suid / dev: asked for (FUSE mounts nosuid,nodev unless told) */
	uint64_t dirty_bytes; /* -o dirty=SIZE: the dirty memory a transaction may hold, 0 the engine's default */
};

enum { MOUNT_RELATIME, MOUNT_NOATIME, MOUNT_STRICTATIME };
#define MOUNT_MAX_INLINE_UNSET UINT64_MAX
#define MOUNT_COMMIT_DEFAULT 30

/* what the kernel's btrfs gives its own mounts at least (4 MiB), so that large reads come in large requests */
#define MOUNT_READAHEAD_DEFAULT (4ULL << 20)

/* Parse one -o list into `mo`; prints what is wrong and returns -EINVAL. */
int mount_opts_parse(struct mount_opts *mo, const char *list);

/*
 * FUSE node ids. btrfs inode numbers repeat across subvolumes, the kernel's
 * st_dev tells them apart; one FUSE mount has one st_dev, so every (subvolume,
 * inode) pair met gets its own node id, handed out in order of first lookup and
 * shown as st_ino. Hard links are one pair, hence one id. A node counts the
 * lookups the kernel holds on it (mount_map_ref for every reply that hands it
 * out: lookup, readdirplus, create, link...) and goes when the kernel forgets
 * them all; its id is never handed out again. Node 1, the mount's root, stays.
 * Thread rule: every call takes the map's mutex.
 */
struct mount_node {
	uint64_t subvol, ino;
	uint64_t dir_ino;  /* the directory holding a placeholder (ino 2), else 0 */
	uint64_t parent;   /* node id of the directory it was first found in */
	uint64_t name;     /* the name hash it was first found under */
};

struct mount_map;
int mount_map_new(struct mount_map **out);
void mount_map_free(struct mount_map *m);
/*
 * The id of (subvol, ino), made on first sight with `dir_ino`, `parent` and
 * `name` (the hash of the name it was met under). 0 on out of memory. If
 * `first` is not NULL, it says whether (parent, name) is where the node was
 * first met: a directory is served under that one name only.
 */
uint64_t mount_map_get(struct mount_map *m, uint64_t subvol, uint64_t ino, uint64_t dir_ino, uint64_t parent,
		       uint64_t name, bool *first);
/* The node of `id`: 0, or -ENOENT if no such id was handed out (or it was forgotten). */
int mount_map_node(struct mount_map *m, uint64_t id, struct mount_node *out);
/* One more lookup the kernel holds on `id`. */
void mount_map_ref(struct mount_map *m, uint64_t id);
/* The kernel forgets n lookups of `id`: 1 and the node in *gone when that was its last, else 0. */
int mount_map_forget(struct mount_map *m, uint64_t id, uint64_t n, struct mount_node *gone);
/* (subvol, ino) now lives under `parent` as the name of hash `name` (a rename). */
void mount_map_moved(struct mount_map *m, uint64_t subvol, uint64_t ino, uint64_t parent, uint64_t name);
/* The id of (subvol, ino) if the map has a node for it, else 0. */
uint64_t mount_map_find(struct mount_map *m, uint64_t subvol, uint64_t ino);

struct ub_engine;

struct mount_ctx {
	struct ub_fs *fs;      /* what reads see: the engine's live view (read-write), or the filesystem (ro) */
	struct ub_engine *e;   /* the write engine; NULL on a read-only mount */
	struct mount_map *map;
	uint32_t sectorsize;
	uint64_t total_bytes, bytes_used;
	const struct mount_opts *mo;
	uint64_t root_subvol;  /* the subvolume mounted: its inodes show their own numbers (mount_st_ino) */
	/* set when a write failed for good: the engine is read-only, the mount answers EROFS to changes */
	int broken;
	/* ---- for the btrfs ioctls (mount_ioctl.c) ---- */
	struct fuse_session *se; /* to tell the kernel of changes it did not make itself (a subvolume deleted) */
	const char *mountpoint;  /* absolute: a snapshot's source is one of ours when it has our st_dev */
	/* a subvolume was deleted: mount.c's commit thread drops it in the background (NULL: nobody does) */
	void (*wake_cleaner)(struct mount_ctx *mc);
	void *committer;
	/* POSIX ACLs are ours to keep (the kernel took FUSE_CAP_POSIX_ACL): inheritance, mode sync (mount_acl.c) */
	bool acl;
	/*
	 * Directory handles still open (mount_ops.c), freed when the session
	 * ends: the kernel sends RELEASEDIR after the close returned, and a lazy
	 * unmount can end the session before it arrives.
	 */
	pthread_mutex_t dirs_lock;
	struct mount_dir_handle *dirs;
	/* the scrubs the scrub ioctls run, and what they found (mount_scrub.c) */
	struct mount_scrubs *scrubs;
	/*
	 * FUSE_HANDLE_KILLPRIV_V2 asked at INIT (mount_io.c): the kernel tells
	 * which write, truncate, open(O_TRUNC) and chown drop set-id bits
	 * (mount_request_kills_setid) and sends no mode for them itself.
	 */
	uint64_t init_unique;
	bool init_killpriv, killpriv;
	/* the kernel's cached attributes of a node are stale (mount_notify_attrs; NULL: no session) */
	void (*notify_attrs)(struct mount_ctx *mc, uint64_t id);
};


/*
 * The operations, without FUSE (mount_core.c): each returns 0 or a negative
 * errno as FUSE replies it (a damaged filesystem is -EIO, said in the log).
 * Node ids are those of the map; 1 is the mount's root.
 */
int mount_lookup(struct mount_ctx *mc, uint64_t parent, const char *name, uint64_t *id, struct stat *st);
int mount_getattr(struct mount_ctx *mc, uint64_t id, struct stat *st);
/* What stat shows as st_ino for (subvol, ino). */
uint64_t mount_st_ino(const struct mount_ctx *mc, uint64_t subvol, uint64_t ino);
/*
 * One directory entry for readdir: `st` holds at least st_ino and the type in
 * st_mode; `node` is its node id with full attributes in `st`, or 0 where the
 * entry goes out without attributes ("." and "..", an inode that cannot be
 * read, a plain readdir). `off` is the offset to resume after it. Returns true
 * when the caller's buffer is full (the entry did not go in).
 */
typedef bool (*mount_dir_fn)(void *arg, const char *name, const struct stat *st, uint64_t node, off_t off);
/*
 * The entries of directory `id` after offset `off` whose index is at most
 * `last` (UINT64_MAX: all), with their attributes if `plus`; an entry that
 * cannot be shown is skipped (said in the log).
 */
int mount_readdir(struct mount_ctx *mc, uint64_t id, off_t off, bool plus, uint64_t last, mount_dir_fn fn, void *arg);
/*
 * The highest index among the entries of directory `id` now (1 when it has
 * none). The kernel's btrfs notes it at opendir and at rewinddir and lists no
 * entry above it: a name made while a directory is being read is not listed.
 */
int mount_dir_last_index(struct mount_ctx *mc, uint64_t id, uint64_t *last);
int mount_read(struct mount_ctx *mc, uint64_t id, uint64_t off, size_t size, void *buf, uint64_t *got);
/* The target, NUL-terminated, into buf[size]. */
int mount_readlink(struct mount_ctx *mc, uint64_t id, char *buf, size_t size);
/* size 0: only *len, the bytes needed; -ERANGE if they do not fit; -ENODATA if there is no such attribute. */
int mount_getxattr(struct mount_ctx *mc, uint64_t id, const char *name, char *buf, size_t size, size_t *len);
int mount_listxattr(struct mount_ctx *mc, uint64_t id, char *buf, size_t size, size_t *len);
void mount_statfs(struct mount_ctx *mc, struct statvfs *sv);
/* lseek's SEEK_DATA / SEEK_HOLE from `off`: *out, or -ENXIO past the data (or the end) */
int mount_lseek(struct mount_ctx *mc, uint64_t id, uint64_t off, int whence, uint64_t *out);
/* BTRFS_IOC_SUBVOL_GETFLAGS of the subvolume `id` is in (its read-only bit). */
int mount_subvol_flags(struct mount_ctx *mc, uint64_t id, uint64_t *flags);
/* The inode's flags (UB_INODE_*), for FS_IOC_GETFLAGS. */
int mount_get_flags(struct mount_ctx *mc, uint64_t id, uint64_t *flags);

/* ---- changes (mount_write.c): each one engine operation, or an errno having changed nothing ---- */

/* Who asks (the FUSE request's caller): the owner of what it makes, and whose rights some rules weigh. */
struct mount_caller {
	uint32_t uid, gid;
	uint32_t umask;  /* what creation masks out where the directory has no default ACL */
	/*
	 * The caller's supplementary groups, asked for only where a rule needs
	 * them (reading them costs a look into /proc): how many there are (at
	 * most `max` go into `list`), or -errno. NULL: none but gid.
	 */
	int (*groups)(void *arg, uint32_t *list, int max);
	void *arg;
	/* KILLPRIV_V2: the request asks the set-id bits dropped (mount_request_kills_setid, mount_io.c) */
	bool kill_setid;
};
/* The kernel's in_group_or_capable: root, or gid among the caller's groups. */
bool mount_caller_in_group(const struct mount_caller *c, uint32_t gid);

/* what mount_setattr changes: FUSE_SET_ATTR_*'s values */
#define MOUNT_SET_MODE (1U << 0)
#define MOUNT_SET_UID (1U << 1)
#define MOUNT_SET_GID (1U << 2)
#define MOUNT_SET_SIZE (1U << 3)
#define MOUNT_SET_ATIME (1U << 4)
#define MOUNT_SET_MTIME (1U << 5)
#define MOUNT_SET_ATIME_NOW (1U << 7)
#define MOUNT_SET_MTIME_NOW (1U << 8)
#define MOUNT_SET_CTIME (1U << 10)
/* ours: the change came through an open file (ftruncate), not a path (truncate) */
#define MOUNT_SET_THROUGH_FILE (1U << 31)

/* A new inode named `name` in directory `parent` (mode with its type): its node (one lookup held) and attributes. */
int mount_mknod(struct mount_ctx *mc, const struct mount_caller *c, uint64_t parent, const char *name, uint32_t mode,
		dev_t rdev, uint64_t *id, struct stat *st);
/* O_TMPFILE: a regular file of `mode` with no name, in directory `parent`'s subvolume: its node (one lookup held). */
int mount_tmpfile(struct mount_ctx *mc, const struct mount_caller *c, uint64_t parent, uint32_t mode, uint64_t *id,
		  struct stat *st);
int mount_symlink(struct mount_ctx *mc, const struct mount_caller *c, uint64_t parent, const char *name,
		  const char *target, uint64_t *id, struct stat *st);
/* A new name for node `id`: its attributes (one more lookup held). */
int mount_link(struct mount_ctx *mc, uint64_t id, uint64_t newparent, const char *newname, struct stat *st);
/* unlink (dir false) or rmdir */
int mount_remove(struct mount_ctx *mc, uint64_t parent, const char *name, bool dir);
/* renameat2's flags: UB_FSW_RENAME_NOREPLACE / EXCHANGE / WHITEOUT */
int mount_rename(struct mount_ctx *mc, const struct mount_caller *c, uint64_t parent, const char *name,
		 uint64_t newparent, const char *newname, unsigned flags);
int mount_setattr(struct mount_ctx *mc, const struct mount_caller *c, uint64_t id, const struct stat *attr,
		  unsigned to_set, struct stat *st);
/* open(2)'s O_TRUNC of a regular file: emptied, mtime and ctime moved, set-id bits dropped as the VFS drops them */
int mount_open_trunc(struct mount_ctx *mc, const struct mount_caller *c, uint64_t id);
int mount_write(struct mount_ctx *mc, const struct mount_caller *c, uint64_t id, uint64_t off, const void *buf,
		size_t size);
int mount_fallocate(struct mount_ctx *mc, const struct mount_caller *c, uint64_t id, int mode, uint64_t off,
		    uint64_t len);
int mount_setxattr(struct mount_ctx *mc, const struct mount_caller *c, uint64_t id, const char *name,
		   const void *value, size_t size, int flags);
int mount_removexattr(struct mount_ctx *mc, uint64_t id, const char *name);
/*
 * Whether reads through an open of `id` may come from the kernel's page cache:
 * false when the next read has to move the atime (the mount's atime rule), so
 * that it reaches the daemon (FUSE inodes never update their atime themselves).
 */
bool mount_open_keep_cache(struct mount_ctx *mc, uint64_t id);
/* Everything so far durable: a commit (fsyncdir, sync, the unmount). */
int mount_sync(struct mount_ctx *mc);
/* File `id` durable as it is now: through the fsync log where it can say it, else a commit (ub_fsw_fsync). */
int mount_fsync(struct mount_ctx *mc, uint64_t id, bool datasync);
/* The kernel forgets nlookup lookups of `id`; an inode without names goes with its node. */
void mount_forget(struct mount_ctx *mc, uint64_t id, uint64_t nlookup);
/* copy_file_range as a clone; -EOPNOTSUPP where it cannot share (the kernel then copies). */
int mount_copy_range(struct mount_ctx *mc, const struct mount_caller *c, uint64_t in_id, uint64_t off_in,
		     uint64_t out_id, uint64_t off_out, uint64_t len);
/* chattr's flags (UB_INODE_*) */
int mount_set_flags(struct mount_ctx *mc, uint64_t id, uint64_t set, uint64_t clear);
/* A read of `id` happened: its atime moves as the mount's atime option says. */
void mount_read_atime(struct mount_ctx *mc, uint64_t id);

/* ---- POSIX ACLs (mount_acl.c): the system.posix_acl_* values and the kernel's rules on them ---- */

#define MOUNT_ACL_ACCESS "system.posix_acl_access"
#define MOUNT_ACL_DEFAULT "system.posix_acl_default"
#define MOUNT_ACL_MAX 1024
struct mount_acl_entry {
	uint16_t tag, perm;
	uint32_t id;
};
struct mount_acl {
	size_t count; /* 0: no ACL (a value with no entries removes one) */
	struct mount_acl_entry e[MOUNT_ACL_MAX];
};
/* An xattr value as the kernel checks one (posix_acl_valid): 0, -EINVAL, -E2BIG. */
int mount_acl_parse(const void *value, size_t len, struct mount_acl *out);
/* The xattr value into buf (4 + 8 * count bytes); its length. */
size_t mount_acl_encode(const struct mount_acl *acl, void *buf);
/* The permission bits the ACL gives into *mode (the rest kept): true if the ACL says no more than they do. */
bool mount_acl_equiv_mode(const struct mount_acl *acl, uint32_t *mode);
/* chmod's new permission bits into the ACL (owner, group or mask, other); -EINVAL if it has no group entry. */
int mount_acl_chmod(struct mount_acl *acl, uint32_t mode);
/*
 * A default ACL made the access ACL of a new inode of *mode: both masked by
 * each other; 1 if the ACL says more than the mode (it is kept), 0 if not,
 * -EINVAL for an ACL without a group entry.
 */
int mount_acl_create_masq(struct mount_acl *acl, uint32_t *mode);

/* What kind of xattr a name is, as the kernel's btrfs sorts names by its handlers. */
enum {
	MOUNT_XA_PLAIN,       /* user., trusted., security.: kept as they are */
	MOUNT_XA_ACL_ACCESS,  /* system.posix_acl_access (when ACLs are on) */
	MOUNT_XA_ACL_DEFAULT, /* system.posix_acl_default */
	MOUNT_XA_PROP,        /* btrfs.compression */
	MOUNT_XA_PROP_OTHER,  /* another btrfs. name: no such property (reads find nothing, changes are refused) */
};
/* A MOUNT_XA_*, or -EOPNOTSUPP (a namespace btrfs has not; ACLs under noacl), -EINVAL (a prefix alone). */
int mount_xattr_kind(const struct mount_ctx *mc, const char *name);

/* The low-level operations table (mount_ops.c). */
struct fuse_lowlevel_ops;
extern const struct fuse_lowlevel_ops mount_ops;
/* Requests read from the session's device by us (mount_io.c), for the ones libfuse has no operation for. */
struct fuse_session;
int mount_session_io(struct fuse_session *se);
/* The request the calling thread serves asks the set-id bits dropped (KILLPRIV_V2; mount_io.c). */
bool mount_request_kills_setid(void);
/* The kernel's cached attributes of node `id` are stale (mount_io.c). */
void mount_notify_attrs(struct mount_ctx *mc, uint64_t id);

#endif
