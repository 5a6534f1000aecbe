/* SPDX-License-Identifier: MIT */
/*
 * The btrfs ioctls of the mount, without FUSE (mount_ioctl.c decodes them
 * and replies): subvolumes and snapshots, the default subvolume, the label,
 * and the questions btrfs-progs asks (TREE_SEARCH, INO_LOOKUP, FS_INFO,
 * DEV_INFO, SPACE_INFO, GET_SUBVOL_INFO), each answered as the kernel's btrfs
 * answers it, with its permission rules and errno. Every change is one
 * operation of the write engine, committed before the reply as the kernel's
 * ioctls commit (a snapshot commits inside the library).
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include "mount.h"
#include "mount_subvol.h"
#include "ubtrfs/balance.h"
#include "ubtrfs_ioctl.h"
#include "ubtrfs/devinfo.h"
#include "ubtrfs/engine.h"
#include "ubtrfs/fsinfo.h"
#include "ubtrfs/fsquery.h"
#include "ubtrfs/fswrite.h"
#include "ubtrfs/log.h"

#define INO_MASK ((1ULL << 40) - 1)

/* As mount_write.c: a broken engine answers EROFS, damage EIO, the argument errors as they are. */
static int sv_errno(int ret)
{
	if (ret >= 0)
		return ret;
	switch (ret) {
	case -ENOENT: case -EEXIST: case -ENOTDIR: case -EISDIR: case -ENOTEMPTY: case -EINVAL: case -ENAMETOOLONG:
	case -EMLINK: case -ENOSPC: case -EPERM: case -EXDEV: case -EOPNOTSUPP: case -ENOMEM: case -EROFS:
	case -EACCES: case -EBUSY: case -ENODEV: case -EOVERFLOW:
		return ret;
	default:
		return -EIO;
	}
}

static int writable(struct mount_ctx *mc)
{
	if (!mc->e)
		return -EROFS;
	return __atomic_load_n(&mc->broken, __ATOMIC_ACQUIRE) ? -EROFS : 0;
}

/* A failure the library did not refuse before changing anything (damage, a failed write) breaks the mount. */
static int failed(struct mount_ctx *mc, int ret)
{
	ret = sv_errno(ret);
	/* EROFS from a whole engine is a refusal (a read-only subvolume), not a failure */
	if (ret == -EIO || (ret == -EROFS && mc->e && ub_engine_error(mc->e))) {
		int none = 0;

		if (__atomic_compare_exchange_n(&mc->broken, &none, ret, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
			ub_err(ub_fs_log(mc->fs), "a change failed (%s): the filesystem keeps its last commit and the "
			       "mount answers EROFS to every change from now on", strerror(-ret));
	}
	return ret;
}

/* ---- the kernel's permission rules ---- */

static bool in_group(const struct mount_ioctl_caller *c, uint32_t gid)
{
	if (c->gid == gid)
		return true;
	for (int i = 0; i < c->ngroups; i++)
		if (c->groups[i] == gid)
			return true;
	return false;
}

enum { MAY_X = 1, MAY_W = 2, MAY_R = 4 };
#define ACL_USER_OBJ 0x01
#define ACL_USER 0x02
#define ACL_GROUP_OBJ 0x04
#define ACL_GROUP 0x08
#define ACL_MASK 0x10
#define ACL_OTHER 0x20

/*
 * The kernel's posix_acl_permission over the xattr's entries (version 2:
 * a 4-byte header, then tag, perm (16 bits each), id (32 bits)): 0, -EACCES,
 * or 1 when the ACL is not one to judge by (then the mode bits do).
 */
static int acl_permission(const struct mount_ioctl_caller *c, const struct ub_inode *in, const uint8_t *acl,
			  size_t len, int want)
{
	size_t n = len >= 4 ? (len - 4) / 8 : 0;
	bool found = false;

	if (len < 4 || ub_le32(acl) != 2 || (len - 4) % 8)
		return 1;
	for (size_t i = 0; i < n; i++) {
		const uint8_t *e = acl + 4 + i * 8;
		unsigned tag = ub_le16(e), perm = ub_le16(e + 2);
		uint32_t id = ub_le32(e + 4);

		switch (tag) {
		case ACL_USER_OBJ:
			if (c->uid == in->uid)
				return (perm & want) == (unsigned)want ? 0 : -EACCES;
			break;
		case ACL_USER:
			if (c->uid == id)
				goto mask;
			break;
		case ACL_GROUP_OBJ:
			if (in_group(c, in->gid)) {
				found = true;
				if ((perm & want) == (unsigned)want)
					goto mask;
			}
			break;
		case ACL_GROUP:
			if (in_group(c, id)) {
				found = true;
				if ((perm & want) == (unsigned)want)
					goto mask;
			}
			break;
		case ACL_MASK:
			break;
		case ACL_OTHER:
			if (found)
				return -EACCES;
			return (perm & want) == (unsigned)want ? 0 : -EACCES;
		default:
			return 1;
		}
		continue;
mask:
		for (size_t j = i + 1; j < n; j++) {
			const uint8_t *m = acl + 4 + j * 8;

			if (ub_le16(m) == ACL_MASK)
				return (ub_le16(m + 2) & ub_le16(e + 2) & want) == (unsigned)want ? 0 : -EACCES;
		}
		return 0;
	}
	return -EACCES;
}

/* inode_permission(dir, MAY_WRITE | MAY_EXEC) for the caller: ACL, mode bits, then CAP_DAC_OVERRIDE. */
static int may_write_dir(struct mount_ctx *mc, const struct mount_ioctl_caller *c, uint64_t node,
			 const struct ub_inode *in)
{
	const int want = MAY_W | MAY_X;
	uint8_t acl[4 + 8 * 64];
	size_t len = 0;
	unsigned bits;
	int ret = 1;

	if (!mc->mo->noacl && mount_getxattr(mc, node, "system.posix_acl_access", (char *)acl, sizeof(acl), &len) == 0)
		ret = acl_permission(c, in, acl, len, want);
	if (ret == 1) {
		bits = c->uid == in->uid ? (in->mode >> 6) & 7 : in_group(c, in->gid) ? (in->mode >> 3) & 7 : in->mode & 7;
		ret = (bits & want) == want ? 0 : -EACCES;
	}
	return ret && c->dac_override ? 0 : ret;
}

/* The directory node `dir` of this mount, its inode. */
static int dir_of(struct mount_ctx *mc, uint64_t dir, struct mount_node *n, struct ub_inode *in)
{
	int ret = mount_map_node(mc->map, dir, n);

	if (!ret)
		ret = ub_inode_read(mc->fs, n->subvol, n->ino, in);
	if (ret)
		return sv_errno(ret);
	return S_ISDIR(in->mode) ? 0 : -ENOTDIR;
}

/*
 * The kernel's order for a new name in `dir`: the name exists (EEXIST), the
 * subvolume is read-only (EROFS, btrfs_permission), the caller may not write
 * there (EACCES).
 */
static int may_create_in(struct mount_ctx *mc, const struct mount_ioctl_caller *c, uint64_t dir,
			 const struct mount_node *n, const struct ub_inode *din, const char *name)
{
	struct ub_subvol_info si;
	struct ub_dirent de;
	int ret = ub_dir_lookup(mc->fs, n->subvol, n->ino, name, strlen(name), &de);

	if (ret == 0)
		return -EEXIST;
	if (ret != -ENOENT)
		return sv_errno(ret);
	ret = ub_subvol_info(mc->fs, n->subvol, &si);
	if (ret)
		return sv_errno(ret);
	if (si.readonly)
		return -EROFS;
	return may_write_dir(mc, c, dir, din);
}

/* The kernel's name rules of the snapshot and subvolume ioctls (__btrfs_ioctl_snap_create, lookup_one_len). */
static int new_name_check(const char *name)
{
	size_t len = strlen(name);

	if (len == 0)
		return -EACCES;
	if (strchr(name, '/'))
		return -EINVAL;
	if (name[0] == '.' && (len == 1 || (len == 2 && name[1] == '.')))
		return -EEXIST;
	return len > UB_NAME_LEN ? -ENAMETOOLONG : 0;
}

/* ---- changes ---- */

int mount_subvol_create(struct mount_ctx *mc, const struct mount_ioctl_caller *c, uint64_t dir, const char *name,
			uint64_t *new_id)
{
	struct mount_node n;
	struct ub_inode din;
	struct ub_txn *t;
	int ret = writable(mc);

	if (!ret)
		ret = new_name_check(name);
	if (!ret)
		ret = dir_of(mc, dir, &n, &din);
	if (!ret)
		ret = may_create_in(mc, c, dir, &n, &din, name);
	if (ret)
		return ret;
	ret = ub_fsw_begin(mc->e, UB_FSW_OP_SUBVOL, 0, &t);
	if (ret)
		return failed(mc, ret);
	ret = ub_fsw_subvol_create(t, n.subvol, n.ino, name, strlen(name), new_id);
	/* its top directory belongs to whoever made it, as the kernel's inode_init_owner */
	if (!ret && (c->uid || c->gid || (din.mode & S_ISGID))) {
		struct ub_fsw_attr a = { .valid = UB_FSW_ATTR_UID | UB_FSW_ATTR_GID, .uid = c->uid, .gid = c->gid };

		if (din.mode & S_ISGID) {
			a.gid = din.gid;
			a.valid |= UB_FSW_ATTR_MODE;
			a.mode = 0755 | S_ISGID;
		}
		ret = ub_fsw_setattr(t, *new_id, BTRFS_FIRST_FREE_OBJECTID, &a);
	}
	ub_fsw_end(mc->e);
	if (!ret)
		ret = ub_engine_commit(mc->e);
	return ret ? failed(mc, ret) : 0;
}

/* The (subvolume, inode) behind stat's st_ino on this mount (mount_st_ino's inverse). */
void mount_ino_of(const struct mount_ctx *mc, uint64_t st_ino, uint64_t *subvol, uint64_t *ino)
{
	if (st_ino <= INO_MASK) {
		*subvol = mc->root_subvol;
		*ino = st_ino;
	} else {
		*subvol = st_ino >> 40;
		*ino = st_ino & INO_MASK;
	}
}

int mount_snapshot(struct mount_ctx *mc, const struct mount_ioctl_caller *c, uint64_t src_subvol, uint64_t src_ino,
		   uint64_t dir, const char *name, bool readonly, uint64_t *new_id)
{
	struct mount_node n;
	struct ub_inode din, sin;
	struct ub_txn *t;
	int ret = writable(mc);

	if (!ret)
		ret = new_name_check(name);
	if (!ret)
		ret = dir_of(mc, dir, &n, &din);
	if (!ret)
		ret = may_create_in(mc, c, dir, &n, &din, name);
	if (!ret)
		ret = sv_errno(ub_inode_read(mc->fs, src_subvol, src_ino, &sin));
	/* snapshots of one's own subvolumes only, and by their top directory */
	if (!ret && c->uid != sin.uid && !c->fowner)
		ret = -EPERM;
	if (!ret && src_ino != BTRFS_FIRST_FREE_OBJECTID)
		ret = -EINVAL;
	if (ret)
		return ret;
	ret = ub_fsw_begin(mc->e, UB_FSW_OP_SUBVOL, 0, &t);
	if (ret)
		return failed(mc, ret);
	/* the running transaction holds every write that returned: the snapshot takes them all */
	ret = ub_fsw_snapshot(t, src_subvol, n.subvol, n.ino, name, strlen(name), readonly, new_id);
	ub_fsw_end(mc->e);
	if (!ret)
		ret = ub_engine_commit(mc->e);
	return ret ? failed(mc, ret) : 0;
}

int mount_subvol_destroy(struct mount_ctx *mc, const struct mount_ioctl_caller *c, uint64_t dir, const char *name,
			 uint64_t *gone)
{
	struct mount_node n;
	struct ub_inode din;
	struct ub_dirent de;
	struct ub_txn *t;
	size_t len = strlen(name);
	int ret = writable(mc);

	if (!ret && !c->sys_admin)
		ret = -EPERM; /* the kernel's rule without user_subvol_rm_allowed */
	if (!ret && (len == 0 || strchr(name, '/') || (name[0] == '.' && (len == 1 || (len == 2 && name[1] == '.')))))
		ret = -EINVAL;
	if (!ret && len > UB_NAME_LEN)
		ret = -ENAMETOOLONG;
	if (!ret)
		ret = dir_of(mc, dir, &n, &din);
	if (!ret) {
		ret = ub_dir_lookup(mc->fs, n.subvol, n.ino, name, len, &de);
		ret = ret == -EINVAL ? -ENOENT : sv_errno(ret);
	}
	/* only a subvolume's name; the top directory of the mount goes nowhere while mounted */
	if (!ret && de.subvol == n.subvol)
		ret = -EINVAL;
	if (!ret && de.subvol == mc->root_subvol)
		ret = -EBUSY;
	if (ret)
		return ret;
	ret = ub_fsw_begin(mc->e, UB_FSW_OP_SUBVOL, 0, &t);
	if (ret)
		return failed(mc, ret);
	ret = ub_fsw_subvol_delete(t, n.subvol, n.ino, name, len);
	ub_fsw_end(mc->e);
	if (ret == -ENOTDIR)
		return -EINVAL;
	if (!ret)
		ret = ub_engine_commit(mc->e);
	if (ret)
		return failed(mc, ret);
	*gone = de.subvol;
	return 0;
}

/* The name of subvolume `id`: its parent, the directory there and the name (from the ROOT_BACKREF). */
struct backref {
	uint64_t parent, dirid;
	char name[UB_NAME_LEN + 1];
	bool found;
};

static int backref_cb(void *arg, const struct ub_key *key, uint64_t transid, const uint8_t *d, uint32_t len)
{
	struct backref *b = arg;
	uint32_t nlen;

	(void)transid;
	if (len < sizeof(struct btrfs_root_ref))
		return -EUCLEAN;
	nlen = (uint32_t)UB_GET(btrfs_root_ref, name_len, d);
	if (nlen == 0 || nlen > UB_NAME_LEN || sizeof(struct btrfs_root_ref) + nlen > len)
		return -EUCLEAN;
	b->parent = key->offset;
	b->dirid = UB_GET(btrfs_root_ref, dirid, d);
	memcpy(b->name, d + sizeof(struct btrfs_root_ref), nlen);
	b->name[nlen] = '\0';
	b->found = true;
	return 1;
}

static int subvol_backref(struct mount_ctx *mc, uint64_t id, struct backref *b)
{
	struct ub_search_key sk = { .tree = BTRFS_ROOT_TREE_OBJECTID,
				    .min = { id, BTRFS_ROOT_BACKREF_KEY, 0 },
				    .max = { id, BTRFS_ROOT_BACKREF_KEY, UINT64_MAX },
				    .max_transid = UINT64_MAX };
	int ret;

	memset(b, 0, sizeof(*b));
	ret = ub_fs_search(mc->fs, &sk, backref_cb, b);
	if (ret < 0)
		return ret;
	return b->found ? 0 : -ENOENT;
}

int mount_subvol_destroy_id(struct mount_ctx *mc, const struct mount_ioctl_caller *c, uint64_t id,
			    uint64_t *parent, uint64_t *dirid, char *name)
{
	struct backref b;
	struct ub_txn *t;
	int ret = writable(mc);

	if (!ret && !c->sys_admin)
		ret = -EPERM;
	if (!ret && id == BTRFS_FS_TREE_OBJECTID)
		ret = -EINVAL;
	if (!ret && (id < BTRFS_FIRST_FREE_OBJECTID || id > BTRFS_LAST_FREE_OBJECTID))
		ret = -ENOENT;
	if (!ret)
		ret = sv_errno(subvol_backref(mc, id, &b));
	if (!ret && id == mc->root_subvol)
		ret = -EBUSY;
	if (ret)
		return ret;
	ret = ub_fsw_begin(mc->e, UB_FSW_OP_SUBVOL, 0, &t);
	if (ret)
		return failed(mc, ret);
	ret = ub_fsw_subvol_delete_id(t, id);
	ub_fsw_end(mc->e);
	if (!ret)
		ret = ub_engine_commit(mc->e);
	if (ret)
		return failed(mc, ret);
	*parent = b.parent;
	*dirid = b.dirid;
	strcpy(name, b.name);
	return 0;
}

/* one change of its own, committed at once (the kernel's ioctls commit) */
static int simple_change(struct mount_ctx *mc, int (*fn)(struct ub_txn *t, const void *arg), const void *arg)
{
	struct ub_txn *t;
	int ret = writable(mc);

	if (ret)
		return ret;
	ret = ub_fsw_begin(mc->e, UB_FSW_OP_SUBVOL, 0, &t);
	if (ret)
		return failed(mc, ret);
	ret = fn(t, arg);
	ub_fsw_end(mc->e);
	if (!ret)
		ret = ub_engine_commit(mc->e);
	return ret ? failed(mc, ret) : 0;
}

static int set_default_fn(struct ub_txn *t, const void *arg)
{
	return ub_fsw_set_default_subvol(t, *(const uint64_t *)arg);
}

int mount_set_default_subvol(struct mount_ctx *mc, const struct mount_ioctl_caller *c, uint64_t id)
{
	if (!c->sys_admin)
		return -EPERM;
	if (id == 0)
		id = BTRFS_FS_TREE_OBJECTID;
	return simple_change(mc, set_default_fn, &id);
}

struct setflags_arg {
	uint64_t id;
	bool ro;
};

static int setflags_fn(struct ub_txn *t, const void *arg)
{
	const struct setflags_arg *a = arg;

	return ub_fsw_subvol_set_readonly(t, a->id, a->ro);
}

int mount_subvol_setflags(struct mount_ctx *mc, const struct mount_ioctl_caller *c, uint64_t node, uint64_t flags)
{
	struct mount_node n;
	struct ub_inode in;
	struct setflags_arg a;
	int ret = mount_map_node(mc->map, node, &n);

	if (!ret)
		ret = sv_errno(ub_inode_read(mc->fs, n.subvol, n.ino, &in));
	if (ret)
		return ret;
	if (c->uid != in.uid && !c->fowner)
		return -EPERM;
	if (n.ino != BTRFS_FIRST_FREE_OBJECTID)
		return -EINVAL;
	if (flags & ~(uint64_t)BTRFS_SUBVOL_RDONLY)
		return -EOPNOTSUPP;
	ret = writable(mc);
	if (ret)
		return ret;
	a = (struct setflags_arg){ n.subvol, !!(flags & BTRFS_SUBVOL_RDONLY) };
	return simple_change(mc, setflags_fn, &a);
}

struct label_arg {
	const char *label;
	size_t len;
};

static int label_fn(struct ub_txn *t, const void *arg)
{
	const struct label_arg *a = arg;

	return ub_fsw_set_label(t, a->label, a->len);
}

int mount_set_label(struct mount_ctx *mc, const struct mount_ioctl_caller *c, const char *label, size_t size)
{
	struct label_arg a = { label, strnlen(label, size) };

	if (!c->sys_admin)
		return -EPERM;
	if (a.len >= BTRFS_LABEL_SIZE)
		return -EINVAL;
	return simple_change(mc, label_fn, &a);
}

/* ---- balance and resize (docs/balance.md) ---- */

/*
 * The balance this mount runs, for BALANCE_PROGRESS and BALANCE_CTL, which
 * come on other FUSE threads while BALANCE_V2 waits for it. One daemon serves
 * one mount, so the state is the process's.
 */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t stopped;
	bool running, pause_req, cancel_req;
	bool closing;                   /* the unmount: the running balance pauses, none starts */
	struct ub_balance asked;        /* the running balance's flags and filters (a resume: zero) */
	struct ub_balance_progress pr;  /* the running balance's counts, or the last one's */
} bal = { .lock = PTHREAD_MUTEX_INITIALIZER, .stopped = PTHREAD_COND_INITIALIZER };

static int bal_progress(void *arg, const struct ub_balance_progress *p)
{
	int stop;

	pthread_mutex_lock(&bal.lock);
	bal.pr = *p;
	stop = bal.pause_req || bal.cancel_req || bal.closing;
	pthread_mutex_unlock(&bal.lock);
	return stop;
}

static void bal_args_out(struct btrfs_ioctl_balance_args *a, const struct ub_balance *b)
{
	a->flags = b->flags;
	a->data = b->data;
	a->meta = b->meta;
	a->sys = b->sys;
}

int mount_balance(struct mount_ctx *mc, const struct mount_ioctl_caller *c, struct btrfs_ioctl_balance_args *a)
{
	struct ub_balance b;
	struct ub_balance_progress p = { 0 };
	bool resume = a->flags & BTRFS_BALANCE_RESUME, pause, cancel;
	int ret;

	if (!c->sys_admin)
		return -EPERM;
	ret = writable(mc);
	if (ret)
		return ret;
	memset(&b, 0, sizeof(b));
	b.flags = a->flags & ~(uint64_t)BTRFS_BALANCE_RESUME;
	b.data = a->data;
	b.meta = a->meta;
	b.sys = a->sys;
	pthread_mutex_lock(&bal.lock);
	if (bal.closing) {
		pthread_mutex_unlock(&bal.lock);
		return -ESHUTDOWN;
	}
	if (bal.running) {
		pthread_mutex_unlock(&bal.lock);
		return -EINPROGRESS; /* the kernel's answer while a balance runs */
	}
	bal.running = true;
	bal.pause_req = bal.cancel_req = false;
	bal.asked = resume ? (struct ub_balance){ 0 } : b;
	memset(&bal.pr, 0, sizeof(bal.pr));
	pthread_mutex_unlock(&bal.lock);
	if (resume) {
		if (ub_engine_balance_item(mc->e, &b) == 0) {
			pthread_mutex_lock(&bal.lock);
			bal.asked = b;
			pthread_mutex_unlock(&bal.lock);
		}
		ret = ub_engine_balance_resume(mc->e, bal_progress, NULL, &p);
	} else {
		ret = ub_engine_balance(mc->e, &b, bal_progress, NULL, &p);
	}
	pthread_mutex_lock(&bal.lock);
	pause = (bal.pause_req || bal.closing) && ret == -ECANCELED;
	cancel = bal.cancel_req && ret == -ECANCELED;
	pthread_mutex_unlock(&bal.lock);
	/* a cancel stops the balance as a pause does, then drops its item */
	if (cancel) {
		int cret = ub_engine_balance_cancel(mc->e);

		if (cret && cret != -ENOTCONN)
			ret = cret;
	}
	pthread_mutex_lock(&bal.lock);
	bal.running = false;
	bal.pr = p;
	pthread_cond_broadcast(&bal.stopped);
	pthread_mutex_unlock(&bal.lock);
	bal_args_out(a, &b);
	a->stat.expected = p.expected;
	a->stat.considered = p.considered;
	a->stat.completed = p.completed;
	/*
	 * The kernel answers a paused or cancelled balance with ECANCELED and the
	 * counts; a FUSE reply carries data or an error, not both, so it is 0
	 * with the request's bit in state (ubtrfs balance reads it).
	 */
	a->state = (pause ? BTRFS_BALANCE_STATE_PAUSE_REQ : 0) | (cancel ? BTRFS_BALANCE_STATE_CANCEL_REQ : 0);
	if (ret == -ECANCELED && (pause || cancel))
		return 0;
	/* refusals before a change, and no room, leave the mount as it was */
	if (ret == -EINVAL || ret == -ENOSPC || ret == -ECANCELED || ret == -ENOENT || ret == -ENOTCONN ||
	    ret == -EINPROGRESS)
		return ret;
	return ret ? failed(mc, ret) : 0;
}

/* The mount's own resume of a paused balance (the kernel's btrfs_resume_balance_async). */
static pthread_t resumer;
static bool resumer_started;

static void *resume_thread(void *arg)
{
	struct mount_ctx *mc = arg;
	struct mount_ioctl_caller root = { .sys_admin = true };
	struct btrfs_ioctl_balance_args a;
	int ret;

	memset(&a, 0, sizeof(a));
	a.flags = BTRFS_BALANCE_RESUME;
	ub_logf(ub_fs_log(mc->fs), UB_LOG_INFO, "balance: resuming the paused balance (skip_balance leaves it paused)");
	ret = mount_balance(mc, &root, &a);
	if (ret && ret != -ENOTCONN && ret != -ESHUTDOWN)
		ub_err(ub_fs_log(mc->fs), "balance: the resumed balance stopped: %s", strerror(-ret));
	else if (!ret && !(a.state & BTRFS_BALANCE_STATE_PAUSE_REQ))
		ub_logf(ub_fs_log(mc->fs), UB_LOG_INFO, "balance: done, %llu of %llu chunks relocated",
			(unsigned long long)a.stat.completed, (unsigned long long)a.stat.considered);
	return NULL;
}

void mount_balance_resume_start(struct mount_ctx *mc)
{
	if (!mc->e || writable(mc) || ub_engine_balance_item(mc->e, NULL) != 0)
		return;
	resumer_started = pthread_create(&resumer, NULL, resume_thread, mc) == 0;
}

void mount_balance_resume_stop(struct mount_ctx *mc)
{
	pthread_mutex_lock(&bal.lock);
	bal.closing = true;
	pthread_mutex_unlock(&bal.lock);
	if (resumer_started)
		pthread_join(resumer, NULL);
	resumer_started = false;
}

int mount_balance_ctl(struct mount_ctx *mc, const struct mount_ioctl_caller *c, int cmd)
{
	int ret;

	if (!c->sys_admin)
		return -EPERM;
	if (cmd != BTRFS_BALANCE_CTL_PAUSE && cmd != BTRFS_BALANCE_CTL_CANCEL)
		return -EINVAL;
	pthread_mutex_lock(&bal.lock);
	if (bal.running) {
		/* as the kernel: the request is seen between two groups, and the answer waits for the stop */
		if (cmd == BTRFS_BALANCE_CTL_PAUSE)
			bal.pause_req = true;
		else
			bal.cancel_req = true;
		while (bal.running)
			pthread_cond_wait(&bal.stopped, &bal.lock);
		pthread_mutex_unlock(&bal.lock);
		return 0;
	}
	pthread_mutex_unlock(&bal.lock);
	if (cmd == BTRFS_BALANCE_CTL_PAUSE || !mc->e)
		return -ENOTCONN;
	/* a paused balance (this mount's, or found on the disk): its item dropped */
	ret = writable(mc);
	if (ret)
		return ret;
	ret = ub_engine_balance_cancel(mc->e);
	return ret == -ENOTCONN || ret == -EUCLEAN ? ret : ret ? failed(mc, ret) : 0;
}

int mount_balance_progress(struct mount_ctx *mc, struct btrfs_ioctl_balance_args *a)
{
	struct ub_balance_progress pr;
	struct ub_balance b;
	int ret;

	memset(a, 0, sizeof(*a));
	pthread_mutex_lock(&bal.lock);
	if (bal.running) {
		a->state = BTRFS_BALANCE_STATE_RUNNING | (bal.pause_req ? BTRFS_BALANCE_STATE_PAUSE_REQ : 0) |
			   (bal.cancel_req ? BTRFS_BALANCE_STATE_CANCEL_REQ : 0);
		bal_args_out(a, &bal.asked);
		a->stat.expected = bal.pr.expected;
		a->stat.considered = bal.pr.considered;
		a->stat.completed = bal.pr.completed;
		pthread_mutex_unlock(&bal.lock);
		return 0;
	}
	pr = bal.pr;
	pthread_mutex_unlock(&bal.lock);
	/* not running: paused when the balance item is there (a pause here, or one the mount found) */
	if (!mc->e)
		return -ENOTCONN;
	ret = ub_engine_balance_item(mc->e, &b);
	if (ret == -ENOENT)
		return -ENOTCONN;
	if (ret)
		return ret;
	bal_args_out(a, &b);
	a->stat.expected = pr.expected;
	a->stat.considered = pr.considered;
	a->stat.completed = pr.completed;
	return 0;
}

int mount_resize(struct mount_ctx *mc, const struct mount_ioctl_caller *c, const char *spec)
{
	struct ub_device_info *devs = NULL;
	uint64_t devid = 1, bytes = 0, cur = 0, want;
	const char *colon = strchr(spec, ':'), *s = spec;
	int n = 0, sign = 0, ret;
	bool found = false;
	char *end;

	if (!c->sys_admin)
		return -EPERM;
	ret = writable(mc);
	if (ret)
		return ret;
	if (colon) {
		devid = strtoull(spec, &end, 10);
		if (end != colon)
			return -EINVAL;
		s = colon + 1;
	}
	if (!strcmp(s, "cancel"))
		return -ENOTCONN;
	if (strcmp(s, "max")) {
		if (*s == '+' || *s == '-')
			sign = *s++ == '+' ? 1 : -1;
		bytes = strtoull(s, &end, 10);
		switch (*end) {
		case 'e': case 'E': bytes <<= 10; /* fall through */
		case 'p': case 'P': bytes <<= 10; /* fall through */
		case 't': case 'T': bytes <<= 10; /* fall through */
		case 'g': case 'G': bytes <<= 10; /* fall through */
		case 'm': case 'M': bytes <<= 10; /* fall through */
		case 'k': case 'K': bytes <<= 10; end++; break;
		default: break;
		}
		if (*end || end == s)
			return -EINVAL;
	}
	ret = ub_volume_list_devices(ub_fs_volume(mc->fs), &devs, &n);
	for (int i = 0; !ret && i < n; i++) {
		if (devs[i].devid == devid && !devs[i].missing) {
			cur = devs[i].total_bytes;
			found = true;
		}
	}
	free(devs);
	if (ret)
		return sv_errno(ret);
	if (!found)
		return -ENODEV;
	want = !strcmp(s, "max") ? UINT64_MAX : sign > 0 ? cur + bytes : sign < 0 ? (bytes > cur ? 0 : cur - bytes) : bytes;
	ret = ub_engine_device_resize(mc->e, devid, want);
	if (ret == -EINVAL || ret == -ENOSPC || ret == -ENOENT)
		return ret;
	return ret ? failed(mc, ret) : 0;
}

int mount_device_add(struct mount_ctx *mc, const struct mount_ioctl_caller *c, const char *path)
{
	int ret;

	if (!c->sys_admin)
		return -EPERM;
	ret = writable(mc);
	if (ret)
		return ret;
	/* the kernel overwrites whatever the device held; so does its ioctl here */
	ret = ub_engine_device_add(mc->e, path, true, NULL);
	if (ret == -EINVAL || ret == -ENOSPC || ret == -EEXIST || ret == -ENOENT || ret == -EBUSY || ret == -EACCES)
		return ret;
	return ret ? failed(mc, ret) : 0;
}

/* A device of this filesystem by path ("missing": 0, the one not there): -ENODEV when none is. */
static int devid_of(struct mount_ctx *mc, const char *name, uint64_t *devid)
{
	struct ub_device_info *devs = NULL;
	char *want;
	int n = 0, ret;

	if (!strcmp(name, "missing")) {
		*devid = 0;
		return 0;
	}
	want = realpath(name, NULL);
	ret = ub_volume_list_devices(ub_fs_volume(mc->fs), &devs, &n);
	*devid = UINT64_MAX;
	for (int i = 0; !ret && want && i < n; i++) {
		char *have = devs[i].path ? realpath(devs[i].path, NULL) : NULL;

		if (have && !strcmp(have, want))
			*devid = devs[i].devid;
		free(have);
	}
	free(devs);
	free(want);
	if (ret)
		return sv_errno(ret);
	return *devid == UINT64_MAX ? -ENODEV : 0;
}

int mount_device_remove(struct mount_ctx *mc, const struct mount_ioctl_caller *c, uint64_t devid, const char *name)
{
	int ret;

	if (!c->sys_admin)
		return -EPERM;
	ret = writable(mc);
	if (ret)
		return ret;
	if (name) {
		ret = devid_of(mc, name, &devid);
		if (ret)
			return ret;
	}
	ret = ub_engine_device_remove(mc->e, devid, NULL, NULL, NULL);
	if (ret == -EINVAL || ret == -ENOSPC || ret == -ENOENT)
		return ret == -ENOENT ? -ENODEV : ret;
	return ret ? failed(mc, ret) : 0;
}

/* The replace this mount ran or runs, for DEV_REPLACE's status from other threads. */
static struct {
	pthread_mutex_t lock;
	bool running;
	uint64_t state, started, stopped;
} rep = { .lock = PTHREAD_MUTEX_INITIALIZER, .state = BTRFS_IOCTL_DEV_REPLACE_STATE_NEVER_STARTED };

int mount_dev_replace(struct mount_ctx *mc, const struct mount_ioctl_caller *c, struct btrfs_ioctl_dev_replace_args *a)
{
	uint64_t devid;
	int ret;

	switch (a->cmd) {
	case BTRFS_IOCTL_DEV_REPLACE_CMD_STATUS:
		pthread_mutex_lock(&rep.lock);
		memset(&a->status, 0, sizeof(a->status));
		a->status.replace_state = rep.state;
		a->status.progress_1000 = rep.state == BTRFS_IOCTL_DEV_REPLACE_STATE_FINISHED ? 1000 : 0;
		if (rep.running) {
			uint64_t done, total;

			ub_engine_device_replace_progress(mc->e, &done, &total);
			a->status.progress_1000 = total ? (done >= total ? 1000 : done * 1000 / total) : 0;
		}
		a->status.time_started = rep.started;
		a->status.time_stopped = rep.stopped;
		pthread_mutex_unlock(&rep.lock);
		a->result = BTRFS_IOCTL_DEV_REPLACE_RESULT_NO_ERROR;
		return 0;
	case BTRFS_IOCTL_DEV_REPLACE_CMD_CANCEL:
		if (!c->sys_admin)
			return -EPERM;
		pthread_mutex_lock(&rep.lock);
		/* the copy stops at its next step (the engine's flag: it holds the writer lock meanwhile) */
		ret = rep.running && ub_engine_device_replace_cancel(mc->e) == 0;
		pthread_mutex_unlock(&rep.lock);
		a->result = ret ? BTRFS_IOCTL_DEV_REPLACE_RESULT_NO_ERROR : BTRFS_IOCTL_DEV_REPLACE_RESULT_NOT_STARTED;
		return 0;
	case BTRFS_IOCTL_DEV_REPLACE_CMD_START:
		break;
	default:
		return -EINVAL;
	}
	if (!c->sys_admin)
		return -EPERM;
	ret = writable(mc);
	if (ret)
		return ret;
	a->start.srcdev_name[sizeof(a->start.srcdev_name) - 1] = 0;
	a->start.tgtdev_name[sizeof(a->start.tgtdev_name) - 1] = 0;
	if (a->start.srcdevid) {
		devid = a->start.srcdevid;
	} else {
		ret = devid_of(mc, (const char *)a->start.srcdev_name, &devid);
		if (ret)
			return ret;
	}
	pthread_mutex_lock(&rep.lock);
	if (rep.running) {
		pthread_mutex_unlock(&rep.lock);
		a->result = BTRFS_IOCTL_DEV_REPLACE_RESULT_ALREADY_STARTED;
		return 0;
	}
	rep.running = true;
	rep.state = BTRFS_IOCTL_DEV_REPLACE_STATE_STARTED;
	rep.started = (uint64_t)time(NULL);
	rep.stopped = 0;
	pthread_mutex_unlock(&rep.lock);
	/* the kernel's ioctl overwrites the target; btrfs-progs (and ubtrfs replace) ask for -f before */
	ret = ub_engine_device_replace(mc->e, devid, (const char *)a->start.tgtdev_name, true);
	pthread_mutex_lock(&rep.lock);
	rep.running = false;
	rep.state = ret ? BTRFS_IOCTL_DEV_REPLACE_STATE_CANCELED : BTRFS_IOCTL_DEV_REPLACE_STATE_FINISHED;
	rep.stopped = (uint64_t)time(NULL);
	pthread_mutex_unlock(&rep.lock);
	a->result = BTRFS_IOCTL_DEV_REPLACE_RESULT_NO_ERROR;
	if (ret == -EINVAL || ret == -ENOSPC || ret == -EEXIST || ret == -ENOENT || ret == -EBUSY || ret == -EACCES ||
	    ret == -ECANCELED)
		return ret == -ENOENT ? -ENODEV : ret;
	return ret ? failed(mc, ret) : 0;
}

/* ---- questions ---- */

int mount_get_label(struct mount_ctx *mc, char *label, size_t size)
{
	struct ub_volume_info vi;
	int ret = ub_volume_get_info(ub_fs_volume(mc->fs), &vi);

	if (ret)
		return sv_errno(ret);
	memset(label, 0, size);
	memcpy(label, vi.label, size - 1 < UB_LABEL_SIZE ? size - 1 : UB_LABEL_SIZE);
	return 0;
}

int mount_subvol_of(struct mount_ctx *mc, uint64_t node, uint64_t *subvol, uint64_t *ino)
{
	struct mount_node n;
	int ret = mount_map_node(mc->map, node, &n);

	if (ret)
		return ret;
	*subvol = n.subvol;
	*ino = n.ino;
	return 0;
}

int mount_ino_lookup(struct mount_ctx *mc, const struct mount_ioctl_caller *c, uint64_t node, uint64_t *treeid,
		     uint64_t objectid, char *out, size_t size)
{
	uint64_t subvol, ino;
	char *p;
	size_t len;
	int ret;

	if (*treeid == 0) {
		ret = mount_subvol_of(mc, node, &subvol, &ino);
		if (ret)
			return ret;
		*treeid = subvol;
	}
	if (objectid == BTRFS_FIRST_FREE_OBJECTID) {
		out[0] = '\0';
		return 0;
	}
	if (!c->sys_admin)
		return -EPERM;
	p = malloc(4096 + UB_NAME_LEN);
	if (!p)
		return -ENOMEM;
	ret = ub_inode_path(mc->fs, *treeid, objectid, p, 4096 + UB_NAME_LEN);
	/* "/a/b" -> "a/b/", as btrfs_search_path_in_tree */
	if (!ret) {
		len = strlen(p + 1);
		if (len + 2 > size)
			ret = -ENAMETOOLONG;
		else
			snprintf(out, size, "%s%s", p + 1, len ? "/" : "");
	}
	free(p);
	return ret == -ENAMETOOLONG || ret == -ENOENT ? ret : sv_errno(ret);
}

/* the search buffer BTRFS_IOC_TREE_SEARCH fills: search headers, each followed by its item */
struct search_fill {
	uint8_t *buf;
	size_t size, used;
	uint32_t n, max;
	bool overflow;
};

static int search_fill_cb(void *arg, const struct ub_key *key, uint64_t transid, const uint8_t *d, uint32_t len)
{
	struct search_fill *f = arg;
	struct btrfs_ioctl_search_header h;

	if (f->n >= f->max)
		return 1;
	if (sizeof(h) + len > f->size - f->used) {
		/* the kernel: an item that fits no buffer is EOVERFLOW, one that does not fit what is left waits */
		f->overflow = f->n == 0;
		return 1;
	}
	h.transid = transid;
	h.objectid = key->objectid;
	h.offset = key->offset;
	h.type = key->type;
	h.len = len;
	memcpy(f->buf + f->used, &h, sizeof(h));
	memcpy(f->buf + f->used + sizeof(h), d, len);
	f->used += sizeof(h) + len;
	f->n++;
	return 0;
}

int mount_tree_search(struct mount_ctx *mc, const struct mount_ioctl_caller *c, uint64_t node,
		      struct btrfs_ioctl_search_args *a)
{
	struct ub_search_key sk;
	struct search_fill f = { (uint8_t *)a->buf, sizeof(a->buf), 0, 0, a->key.nr_items, false };
	uint64_t subvol, ino;
	int ret;

	if (!c->sys_admin)
		return -EPERM;
	if (a->key.tree_id == 0) {
		ret = mount_subvol_of(mc, node, &subvol, &ino);
		if (ret)
			return ret;
		a->key.tree_id = subvol;
	}
	sk.tree = a->key.tree_id;
	sk.min = (struct ub_key){ a->key.min_objectid, (uint8_t)(a->key.min_type > 255 ? 255 : a->key.min_type),
				  a->key.min_offset };
	sk.max = (struct ub_key){ a->key.max_objectid, (uint8_t)(a->key.max_type > 255 ? 255 : a->key.max_type),
				  a->key.max_offset };
	sk.min_transid = a->key.min_transid;
	sk.max_transid = a->key.max_transid;
	ret = ub_fs_search(mc->fs, &sk, search_fill_cb, &f);
	if (ret == 1)
		ret = 0;
	if (ret)
		return ret == -ENOENT ? -ENOENT : sv_errno(ret);
	if (f.overflow)
		return -EOVERFLOW;
	a->key.nr_items = f.n;
	return 0;
}

static void put_ts(struct btrfs_ioctl_timespec *ts, const uint8_t *p)
{
	ts->sec = UB_GET(btrfs_timespec, sec, p);
	ts->nsec = (uint32_t)UB_GET(btrfs_timespec, nsec, p);
}

struct root_item_copy {
	uint8_t ri[sizeof(struct btrfs_root_item)];
	uint32_t len;
	bool found;
};

static int root_item_cb(void *arg, const struct ub_key *key, uint64_t transid, const uint8_t *d, uint32_t len)
{
	struct root_item_copy *r = arg;

	(void)key;
	(void)transid;
	memset(r->ri, 0, sizeof(r->ri));
	r->len = len < sizeof(r->ri) ? len : (uint32_t)sizeof(r->ri);
	memcpy(r->ri, d, r->len);
	r->found = true;
	return 1;
}

int mount_get_subvol_info(struct mount_ctx *mc, uint64_t node, struct btrfs_ioctl_get_subvol_info_args *a)
{
	struct root_item_copy r = { .found = false };
	struct ub_search_key sk = { .tree = BTRFS_ROOT_TREE_OBJECTID, .max_transid = UINT64_MAX };
	struct backref b;
	uint64_t subvol, ino;
	const uint8_t *ri = r.ri;
	int ret = mount_subvol_of(mc, node, &subvol, &ino);

	if (ret)
		return ret;
	memset(a, 0, sizeof(*a));
	sk.min = (struct ub_key){ subvol, BTRFS_ROOT_ITEM_KEY, 0 };
	sk.max = (struct ub_key){ subvol, BTRFS_ROOT_ITEM_KEY, UINT64_MAX };
	ret = ub_fs_search(mc->fs, &sk, root_item_cb, &r);
	if (ret < 0)
		return sv_errno(ret);
	if (!r.found || r.len < offsetof(struct btrfs_root_item, generation_v2))
		return -ENOENT;
	a->treeid = subvol;
	a->generation = UB_GET(btrfs_root_item, generation, ri);
	a->flags = UB_GET(btrfs_root_item, flags, ri);
	if (r.len >= sizeof(struct btrfs_root_item)) {
		memcpy(a->uuid, UB_PTR(btrfs_root_item, uuid, ri), 16);
		memcpy(a->parent_uuid, UB_PTR(btrfs_root_item, parent_uuid, ri), 16);
		memcpy(a->received_uuid, UB_PTR(btrfs_root_item, received_uuid, ri), 16);
		a->ctransid = UB_GET(btrfs_root_item, ctransid, ri);
		a->otransid = UB_GET(btrfs_root_item, otransid, ri);
		a->stransid = UB_GET(btrfs_root_item, stransid, ri);
		a->rtransid = UB_GET(btrfs_root_item, rtransid, ri);
		put_ts(&a->ctime, UB_PTR(btrfs_root_item, ctime, ri));
		put_ts(&a->otime, UB_PTR(btrfs_root_item, otime, ri));
		put_ts(&a->stime, UB_PTR(btrfs_root_item, stime, ri));
		put_ts(&a->rtime, UB_PTR(btrfs_root_item, rtime, ri));
	}
	if (subvol != BTRFS_FS_TREE_OBJECTID) {
		ret = subvol_backref(mc, subvol, &b);
		if (ret == 0) {
			a->parent_id = b.parent;
			a->dirid = b.dirid;
			memcpy(a->name, b.name, strlen(b.name) + 1);
		} else if (ret != -ENOENT) {
			return sv_errno(ret);
		}
	}
	return 0;
}

int mount_fs_info(struct mount_ctx *mc, struct btrfs_ioctl_fs_info_args *a)
{
	const uint8_t *sb = ub_volume_super(ub_fs_volume(mc->fs));
	struct ub_volume_info vi;
	struct ub_device_info *devs;
	uint64_t want = a->flags;
	int n, ret = ub_volume_get_info(ub_fs_volume(mc->fs), &vi);

	if (!ret)
		ret = ub_volume_list_devices(ub_fs_volume(mc->fs), &devs, &n);
	if (ret)
		return sv_errno(ret);
	memset(a, 0, sizeof(*a));
	for (int i = 0; i < n; i++) {
		if (devs[i].devid > a->max_id)
			a->max_id = devs[i].devid;
		a->num_devices += !devs[i].missing;
	}
	free(devs);
	memcpy(a->fsid, vi.fsid, 16);
	a->nodesize = vi.nodesize;
	a->sectorsize = vi.sectorsize;
	a->clone_alignment = vi.sectorsize;
	if (want & BTRFS_FS_INFO_FLAG_CSUM_INFO) {
		a->csum_type = (uint16_t)vi.csum_type;
		a->csum_size = (uint16_t)vi.csum_size;
		a->flags |= BTRFS_FS_INFO_FLAG_CSUM_INFO;
	}
	if (want & BTRFS_FS_INFO_FLAG_GENERATION) {
		a->generation = ub_fs_view_generation(mc->fs);
		a->flags |= BTRFS_FS_INFO_FLAG_GENERATION;
	}
	if (want & BTRFS_FS_INFO_FLAG_METADATA_UUID) {
		/* the uuid the metadata carries: the fsid unless METADATA_UUID says otherwise */
		if (UB_GET(ub_disk_super, incompat_flags, sb) & BTRFS_FEATURE_INCOMPAT_METADATA_UUID)
			memcpy(a->metadata_uuid, UB_PTR(ub_disk_super, metadata_uuid, sb), 16);
		else
			memcpy(a->metadata_uuid, vi.fsid, 16);
		a->flags |= BTRFS_FS_INFO_FLAG_METADATA_UUID;
	}
	return 0;
}

struct dev_used {
	uint64_t devid, used;
	bool found;
};

static int dev_used_cb(void *arg, const struct ub_key *key, uint64_t transid, const uint8_t *d, uint32_t len)
{
	struct dev_used *u = arg;

	(void)key;
	(void)transid;
	if (len < sizeof(struct btrfs_dev_item))
		return -EUCLEAN;
	u->used = UB_GET(btrfs_dev_item, bytes_used, d);
	u->found = true;
	return 1;
}

int mount_dev_info(struct mount_ctx *mc, struct btrfs_ioctl_dev_info_args *a)
{
	static const uint8_t zero[16];
	struct ub_device_info *devs;
	struct dev_used u = { a->devid, 0, false };
	struct ub_search_key sk = { .tree = BTRFS_CHUNK_TREE_OBJECTID,
				    .min = { BTRFS_DEV_ITEMS_OBJECTID, BTRFS_DEV_ITEM_KEY, a->devid },
				    .max = { BTRFS_DEV_ITEMS_OBJECTID, BTRFS_DEV_ITEM_KEY, a->devid },
				    .max_transid = UINT64_MAX };
	int n, ret = ub_volume_list_devices(ub_fs_volume(mc->fs), &devs, &n);
	int at = -1;

	if (ret)
		return sv_errno(ret);
	/* by devid, and by uuid too when one is given (the kernel's btrfs_find_device) */
	for (int i = 0; i < n && at < 0; i++)
		if (devs[i].devid == a->devid && (!memcmp(a->uuid, zero, 16) || !memcmp(a->uuid, devs[i].uuid, 16)))
			at = i;
	if (at < 0) {
		free(devs);
		return -ENODEV;
	}
	ret = ub_fs_search(mc->fs, &sk, dev_used_cb, &u);
	if (ret < 0) {
		free(devs);
		return sv_errno(ret);
	}
	memcpy(a->uuid, devs[at].uuid, 16);
	a->total_bytes = devs[at].total_bytes;
	a->bytes_used = u.used;
	memset(a->path, 0, sizeof(a->path));
	if (devs[at].path)
		snprintf((char *)a->path, sizeof(a->path), "%s", devs[at].path);
	free(devs);
	return 0;
}

int mount_space_info(struct mount_ctx *mc, struct btrfs_ioctl_space_info *out, int max, int *n)
{
	struct ub_space_entry v[64];
	int count = 0, ret = ub_fs_space_info(mc->fs, v, 64, &count);

	if (ret)
		return sv_errno(ret);
	if (count > 64)
		count = 64;
	for (int i = 0; i < count && i < max; i++) {
		out[i].flags = v[i].flags;
		out[i].total_bytes = v[i].total_bytes;
		out[i].used_bytes = v[i].used_bytes;
	}
	*n = count;
	return 0;
}

struct fiemap_fill {
	struct ubtrfs_fiemap_extent *out;
	uint32_t n, max;
};

static int fiemap_fill_cb(void *arg, const struct ub_fiemap_extent *x)
{
	struct fiemap_fill *f = arg;

	if (f->n == f->max)
		return 1;
	f->out[f->n++] = (struct ubtrfs_fiemap_extent){ x->logical, x->physical, x->length, x->flags, 0 };
	return 0;
}

int mount_fiemap(struct mount_ctx *mc, uint64_t node, uint64_t start, struct ubtrfs_fiemap_extent *out, uint32_t max,
		 uint32_t *count)
{
	struct fiemap_fill f = { out, 0, max };
	uint64_t subvol, ino;
	int ret = mount_subvol_of(mc, node, &subvol, &ino);

	if (ret)
		return ret;
	/*
	 * Sharing is read from the extent items and back references, which the
	 * running transaction keeps queued until its commit (an atime moved by a
	 * read copies a leaf, a write makes extents): commit first, as the kernel's
	 * fiemap sees its delayed references. Nothing changed: nothing written.
	 */
	if (mc->e) {
		ret = ub_engine_commit(mc->e);
		if (ret)
			return sv_errno(ret);
	}
	ret = ub_file_fiemap(mc->fs, subvol, ino, start, fiemap_fill_cb, &f);
	if (ret < 0)
		return sv_errno(ret);
	*count = f.n;
	return 0;
}
