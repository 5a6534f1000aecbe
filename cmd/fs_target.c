/* SPDX-License-Identifier: MIT */
/*
 * A mounted btrfs through its ioctls, or devices through the library: the
 * same questions and changes for `subvolume` and `filesystem` (fs_target.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>
#include <linux/fs.h>
#include <linux/magic.h>
#include "fs_target.h"
#include "ubtrfs_ioctl.h"
#include "ubtrfs/devinfo.h"
#include "ubtrfs/engine.h"
#include "ubtrfs/fsinfo.h"
#include "ubtrfs/fswrite.h"

#ifndef FUSE_SUPER_MAGIC
#define FUSE_SUPER_MAGIC 0x65735546
#endif

bool target_args_mounted(char **args, int n)
{
	struct stat st;

	return n == 1 && stat(args[0], &st) == 0 && S_ISDIR(st.st_mode);
}

int target_open_path(struct target *t, const char *path, const char *what)
{
	struct btrfs_ioctl_fs_info_args fi;
	struct statfs sf;
	int fd;

	memset(t, 0, sizeof(*t));
	t->online = true;
	t->path = path;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		fprintf(stderr, "ERROR: cannot access '%s': %s\n", path, strerror(e));
		return -e;
	}
	t->fd = fd;
	if (fstatfs(fd, &sf) < 0) {
		int e = errno;
		fprintf(stderr, "ERROR: cannot access '%s': %s\n", path, strerror(e));
		return -e;
	}
	if ((unsigned long)sf.f_type == BTRFS_SUPER_MAGIC)
		return 0;
	/* a FUSE filesystem that answers btrfs's FS_INFO is a ubtrfs mount */
	memset(&fi, 0, sizeof(fi));
	if ((unsigned long)sf.f_type == FUSE_SUPER_MAGIC && ioctl(fd, BTRFS_IOC_FS_INFO, &fi) == 0) {
		t->fuse = true;
		return 0;
	}
	fprintf(stderr, "ERROR: %s: not a btrfs filesystem (nor a ubtrfs mount): %s\n", what, path);
	return -ENOTTY;
}

int target_open_devs(struct target *t, struct open_args *oa, char **devs, int n, bool write)
{
	struct ub_log log = { .fn = NULL, .arg = NULL, .verbosity = oa->verbosity, .errors = &oa->errors };
	int ret;

	memset(t, 0, sizeof(*t));
	t->fd = -1;
	t->oa = oa;
	t->subvol = BTRFS_FS_TREE_OBJECTID;
	t->ino = BTRFS_FIRST_FREE_OBJECTID;
	if (write) {
		ret = open_engine_with(oa, devs, n, &log, &t->e);
		if (!ret)
			t->fs = ub_engine_fs(t->e);
	} else {
		ret = open_fs(oa, devs, n, &t->fs);
	}
	return ret;
}

void target_close(struct target *t)
{
	if (t->online) {
		if (t->fd >= 0)
			close(t->fd);
	} else if (t->e) {
		/* a change that failed is aborted here: the disk keeps the last commit */
		ub_engine_close(t->e);
	} else if (t->fs) {
		ub_fs_close(t->fs);
	}
	t->fd = -1;
	t->fs = NULL;
	t->e = NULL;
}

int target_set_path(struct target *t, const char *path)
{
	return ub_path_lookup(t->fs, path, &t->subvol, &t->ino);
}

/* ---- questions ---- */

static void key_next(struct btrfs_ioctl_search_key *k, const struct btrfs_ioctl_search_header *h)
{
	k->min_objectid = h->objectid;
	k->min_type = h->type;
	k->min_offset = h->offset;
	if (k->min_offset < UINT64_MAX) {
		k->min_offset++;
		return;
	}
	k->min_offset = 0;
	if (k->min_type < UINT8_MAX) {
		k->min_type++;
		return;
	}
	k->min_type = 0;
	k->min_objectid++;
}

static int search_online(struct target *t, const struct ub_search_key *sk, ub_search_fn fn, void *arg)
{
	struct btrfs_ioctl_search_args *a = calloc(1, sizeof(*a));
	int ret = 0;

	if (!a)
		return -ENOMEM;
	a->key.tree_id = sk->tree;
	a->key.min_objectid = sk->min.objectid;
	a->key.min_type = sk->min.type;
	a->key.min_offset = sk->min.offset;
	a->key.max_objectid = sk->max.objectid;
	a->key.max_type = sk->max.type;
	a->key.max_offset = sk->max.offset;
	a->key.min_transid = sk->min_transid;
	a->key.max_transid = sk->max_transid;
	for (;;) {
		struct btrfs_ioctl_search_header h;
		size_t off = 0;

		a->key.nr_items = 4096;
		if (ioctl(t->fd, BTRFS_IOC_TREE_SEARCH, a) < 0) {
			ret = -errno;
			break;
		}
		if (a->key.nr_items == 0)
			break;
		for (uint32_t i = 0; i < a->key.nr_items; i++) {
			struct ub_key key;

			if (off + sizeof(h) > sizeof(a->buf)) {
				ret = -EUCLEAN;
				break;
			}
			memcpy(&h, a->buf + off, sizeof(h));
			off += sizeof(h);
			if (h.len > sizeof(a->buf) - off) {
				ret = -EUCLEAN;
				break;
			}
			key = (struct ub_key){ h.objectid, (uint8_t)h.type, h.offset };
			ret = fn(arg, &key, h.transid, (const uint8_t *)a->buf + off, h.len);
			off += h.len;
			if (ret)
				break;
		}
		if (ret)
			break;
		/* the last one found: on from just after it, unless it was the end of the range */
		if (h.objectid == sk->max.objectid && h.type == sk->max.type && h.offset == sk->max.offset)
			break;
		key_next(&a->key, &h);
	}
	free(a);
	return ret;
}

int target_search(struct target *t, const struct ub_search_key *sk, ub_search_fn fn, void *arg)
{
	return t->online ? search_online(t, sk, fn, arg) : ub_fs_search(t->fs, sk, fn, arg);
}

int target_ino_lookup(struct target *t, uint64_t tree, uint64_t ino, char *buf, size_t size)
{
	if (t->online) {
		struct btrfs_ioctl_ino_lookup_args a;

		memset(&a, 0, sizeof(a));
		a.treeid = tree;
		a.objectid = ino;
		if (ioctl(t->fd, BTRFS_IOC_INO_LOOKUP, &a) < 0)
			return -errno;
		a.name[sizeof(a.name) - 1] = '\0';
		if (strlen(a.name) >= size)
			return -ENAMETOOLONG;
		strcpy(buf, a.name);
		return 0;
	}
	{
		char *p = malloc(PATH_MAX);
		size_t n;
		int ret;

		if (!p)
			return -ENOMEM;
		ret = ub_inode_path(t->fs, tree, ino, p, PATH_MAX);
		/* "/a/b" -> "a/b/", "/" -> "": the kernel's form */
		if (!ret) {
			n = strlen(p + 1);
			if (n + 2 > size)
				ret = -ENAMETOOLONG;
			else if (n == 0)
				buf[0] = '\0';
			else
				snprintf(buf, size, "%s/", p + 1);
		}
		free(p);
		return ret;
	}
}

int target_subvol_of(struct target *t, uint64_t *id, bool *is_top)
{
	if (t->online) {
		struct btrfs_ioctl_ino_lookup_args a;
		struct stat st;

		memset(&a, 0, sizeof(a));
		a.objectid = BTRFS_FIRST_FREE_OBJECTID;
		if (ioctl(t->fd, BTRFS_IOC_INO_LOOKUP, &a) < 0 || fstat(t->fd, &st) < 0)
			return -errno;
		*id = a.treeid;
		/* a ubtrfs mount numbers the inodes of other subvolumes with their id in the high bits */
		*is_top = t->fuse ? (st.st_ino & ((1ULL << 40) - 1)) == BTRFS_FIRST_FREE_OBJECTID
				  : st.st_ino == BTRFS_FIRST_FREE_OBJECTID;
		return 0;
	}
	*id = t->subvol;
	*is_top = t->ino == BTRFS_FIRST_FREE_OBJECTID;
	return 0;
}

int target_space_info(struct target *t, struct ub_space_entry **out, int *n)
{
	struct ub_space_entry *v = NULL;
	int ret = 0, count = 0;

	if (!t->online) {
		for (int max = 16;; max *= 2) {
			free(v);
			v = calloc((size_t)max, sizeof(*v));
			if (!v)
				return -ENOMEM;
			ret = ub_fs_space_info(t->fs, v, max, &count);
			if (ret || count <= max)
				break;
		}
	} else if (t->fuse) {
		struct ubtrfs_ioctl_space_args a;

		memset(&a, 0, sizeof(a));
		if (ioctl(t->fd, UBTRFS_IOC_SPACE_INFO, &a) < 0)
			return -errno;
		count = a.total_spaces > UBTRFS_SPACE_SLOTS ? UBTRFS_SPACE_SLOTS : (int)a.total_spaces;
		v = calloc((size_t)count + 1, sizeof(*v));
		if (!v)
			return -ENOMEM;
		for (int i = 0; i < count; i++)
			v[i] = (struct ub_space_entry){ a.spaces[i].flags, a.spaces[i].total_bytes, a.spaces[i].used_bytes };
	} else {
		struct btrfs_ioctl_space_args head = { 0 }, *a;

		if (ioctl(t->fd, BTRFS_IOC_SPACE_INFO, &head) < 0)
			return -errno;
		a = calloc(1, sizeof(*a) + head.total_spaces * sizeof(a->spaces[0]));
		if (!a)
			return -ENOMEM;
		a->space_slots = head.total_spaces;
		if (ioctl(t->fd, BTRFS_IOC_SPACE_INFO, a) < 0) {
			ret = -errno;
			free(a);
			return ret;
		}
		count = (int)a->total_spaces;
		v = calloc((size_t)count + 1, sizeof(*v));
		if (v)
			for (int i = 0; i < count; i++)
				v[i] = (struct ub_space_entry){ a->spaces[i].flags, a->spaces[i].total_bytes,
							       a->spaces[i].used_bytes };
		free(a);
		if (!v)
			return -ENOMEM;
	}
	if (ret) {
		free(v);
		return ret;
	}
	*out = v;
	*n = count;
	return 0;
}

int target_fs_info(struct target *t, struct target_fsinfo *out)
{
	memset(out, 0, sizeof(*out));
	if (t->online) {
		struct btrfs_ioctl_fs_info_args a;
		char label[BTRFS_LABEL_SIZE];

		memset(&a, 0, sizeof(a));
		a.flags = BTRFS_FS_INFO_FLAG_GENERATION;
		if (ioctl(t->fd, BTRFS_IOC_FS_INFO, &a) < 0)
			return -errno;
		memcpy(out->fsid, a.fsid, 16);
		out->num_devices = a.num_devices;
		out->max_id = a.max_id;
		out->nodesize = a.nodesize;
		out->sectorsize = a.sectorsize;
		out->generation = a.flags & BTRFS_FS_INFO_FLAG_GENERATION ? a.generation : 0;
		memset(label, 0, sizeof(label));
		if (ioctl(t->fd, BTRFS_IOC_GET_FSLABEL, label) < 0)
			return -errno;
		memcpy(out->label, label, sizeof(label));
		out->label[sizeof(label)] = '\0';
		return 0;
	}
	{
		struct ub_volume_info vi;
		struct ub_device_info *devs;
		int n, ret = ub_volume_get_info(ub_fs_volume(t->fs), &vi);

		if (!ret)
			ret = ub_volume_list_devices(ub_fs_volume(t->fs), &devs, &n);
		if (ret)
			return ret;
		memcpy(out->fsid, vi.fsid, 16);
		out->num_devices = vi.num_devices;
		for (int i = 0; i < n; i++)
			if (devs[i].devid > out->max_id)
				out->max_id = devs[i].devid;
		free(devs);
		out->generation = vi.generation;
		out->nodesize = vi.nodesize;
		out->sectorsize = vi.sectorsize;
		memcpy(out->label, vi.label, sizeof(out->label));
		return 0;
	}
}

/* the dev items' bytes_used (allocated to chunks), offline */
struct dev_used {
	struct target_devinfo *v;
	int n;
};

static int dev_item(void *arg, const struct ub_key *key, uint64_t transid, const uint8_t *d, uint32_t len)
{
	struct dev_used *du = arg;

	(void)transid;
	if (key->type != BTRFS_DEV_ITEM_KEY || len < sizeof(struct btrfs_dev_item))
		return 0;
	for (int i = 0; i < du->n; i++)
		if (du->v[i].devid == key->offset)
			du->v[i].bytes_used = UB_GET(btrfs_dev_item, bytes_used, d);
	return 0;
}

int target_devices(struct target *t, struct target_devinfo **out, int *n)
{
	struct target_devinfo *v;
	int count = 0, ret = 0;

	if (t->online) {
		struct target_fsinfo fi;
		struct btrfs_ioctl_dev_info_args *a = calloc(1, sizeof(*a));

		ret = a ? target_fs_info(t, &fi) : -ENOMEM;
		v = ret ? NULL : calloc((size_t)fi.max_id + 1, sizeof(*v));
		if (!ret && !v)
			ret = -ENOMEM;
		for (uint64_t id = 1; !ret && id <= fi.max_id; id++) {
			memset(a, 0, sizeof(*a));
			a->devid = id;
			if (ioctl(t->fd, BTRFS_IOC_DEV_INFO, a) < 0) {
				if (errno == ENODEV)
					continue;
				ret = -errno;
				break;
			}
			v[count].devid = a->devid;
			v[count].total_bytes = a->total_bytes;
			v[count].bytes_used = a->bytes_used;
			memcpy(v[count].uuid, a->uuid, 16);
			memcpy(v[count].path, a->path, sizeof(v[count].path) - 1);
			v[count].missing = !a->path[0];
			count++;
		}
		free(a);
		if (ret) {
			free(v);
			return ret;
		}
	} else {
		struct ub_device_info *devs;
		struct dev_used du;
		struct ub_search_key sk = { .tree = BTRFS_CHUNK_TREE_OBJECTID,
					    .min = { BTRFS_DEV_ITEMS_OBJECTID, BTRFS_DEV_ITEM_KEY, 0 },
					    .max = { BTRFS_DEV_ITEMS_OBJECTID, BTRFS_DEV_ITEM_KEY, UINT64_MAX },
					    .max_transid = UINT64_MAX };

		ret = ub_volume_list_devices(ub_fs_volume(t->fs), &devs, &count);
		if (ret)
			return ret;
		v = calloc((size_t)count + 1, sizeof(*v));
		if (!v) {
			free(devs);
			return -ENOMEM;
		}
		for (int i = 0; i < count; i++) {
			v[i].devid = devs[i].devid;
			v[i].total_bytes = devs[i].total_bytes;
			memcpy(v[i].uuid, devs[i].uuid, 16);
			v[i].missing = devs[i].missing;
			if (devs[i].path)
				snprintf(v[i].path, sizeof(v[i].path), "%s", devs[i].path);
		}
		free(devs);
		du = (struct dev_used){ v, count };
		ret = ub_fs_search(t->fs, &sk, dev_item, &du);
		if (ret) {
			free(v);
			return ret;
		}
	}
	*out = v;
	*n = count;
	return 0;
}

int target_statfs(struct target *t, struct statvfs *out)
{
	if (t->online)
		return fstatvfs(t->fd, out) < 0 ? -errno : 0;
	return ub_fs_statfs(t->fs, out);
}

/* ---- changes ---- */

int target_parent_of(struct target *t, const char *path, struct tloc *loc)
{
	char *copy = strdup(path), *copy2 = strdup(path), *dir, *base;
	size_t len;
	int ret = 0;

	memset(loc, 0, sizeof(*loc));
	loc->dirfd = -1;
	if (!copy || !copy2) {
		free(copy);
		free(copy2);
		return -ENOMEM;
	}
	/* a trailing slash names the same entry */
	len = strlen(copy);
	while (len > 1 && copy[len - 1] == '/') {
		len--;
		copy[len] = copy2[len] = '\0';
	}
	dir = dirname(copy);
	base = basename(copy2);
	len = strlen(base);
	if (len == 0 || len > UB_NAME_LEN || !strcmp(base, ".") || !strcmp(base, "..") || !strcmp(base, "/"))
		ret = len > UB_NAME_LEN ? -ENAMETOOLONG : -EINVAL;
	if (!ret) {
		memcpy(loc->name, base, len + 1);
		loc->shown = strdup(path);
		if (!loc->shown)
			ret = -ENOMEM;
	}
	if (!ret && t->online) {
		loc->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (loc->dirfd < 0)
			ret = -errno;
	} else if (!ret) {
		struct ub_inode in;

		ret = ub_path_lookup(t->fs, dir, &loc->subvol, &loc->dir);
		if (!ret)
			ret = ub_inode_read(t->fs, loc->subvol, loc->dir, &in);
		if (!ret && !S_ISDIR(in.mode))
			ret = -ENOTDIR;
	}
	free(copy);
	free(copy2);
	if (ret)
		tloc_free(loc);
	return ret;
}

void tloc_free(struct tloc *loc)
{
	if (loc->dirfd >= 0)
		close(loc->dirfd);
	loc->dirfd = -1;
	free(loc->shown);
	loc->shown = NULL;
}

/* One change offline: an operation of the write engine, then a commit (the kernel's ioctls commit too). */
typedef int (*change_fn)(struct ub_txn *tx, void *arg);

static int offline_change(struct target *t, change_fn fn, void *arg)
{
	struct ub_txn *tx;
	int ret;

	if (!t->e)
		return -EROFS;
	ret = ub_fsw_begin(t->e, UB_FSW_OP_SUBVOL, 0, &tx);
	if (ret)
		return ret;
	ret = fn(tx, arg);
	ub_fsw_end(t->e);
	/* a failed change is not committed: the engine's close aborts it */
	return ret ? ret : ub_engine_commit(t->e);
}

static int ioctl_vol(int fd, unsigned long cmd, const char *name, int64_t srcfd)
{
	struct btrfs_ioctl_vol_args a;

	memset(&a, 0, sizeof(a));
	a.fd = srcfd;
	snprintf(a.name, sizeof(a.name), "%s", name);
	return ioctl(fd, cmd, &a) < 0 ? -errno : 0;
}

struct named {
	const struct tloc *loc;
	uint64_t src;
	bool ro;
};

static int do_create(struct ub_txn *tx, void *arg)
{
	const struct named *n = arg;
	uint64_t id;

	return ub_fsw_subvol_create(tx, n->loc->subvol, n->loc->dir, n->loc->name, strlen(n->loc->name), &id);
}

int target_subvol_create(struct target *t, const struct tloc *loc)
{
	struct named n = { loc, 0, false };

	if (t->online)
		return ioctl_vol(loc->dirfd, BTRFS_IOC_SUBVOL_CREATE, loc->name, 0);
	return offline_change(t, do_create, &n);
}

static int do_snapshot(struct ub_txn *tx, void *arg)
{
	const struct named *n = arg;
	uint64_t id;

	return ub_fsw_snapshot(tx, n->src, n->loc->subvol, n->loc->dir, n->loc->name, strlen(n->loc->name), n->ro, &id);
}

int target_snapshot(struct target *t, const char *src, const struct tloc *loc, bool readonly)
{
	if (t->online) {
		struct btrfs_ioctl_vol_args_v2 a;
		int fd = open(src, O_RDONLY | O_CLOEXEC), ret;

		if (fd < 0)
			return -errno;
		memset(&a, 0, sizeof(a));
		a.fd = fd;
		a.flags = readonly ? BTRFS_SUBVOL_RDONLY : 0;
		snprintf(a.name, sizeof(a.name), "%s", loc->name);
		ret = ioctl(loc->dirfd, BTRFS_IOC_SNAP_CREATE_V2, &a) < 0 ? -errno : 0;
		close(fd);
		return ret;
	}
	{
		struct named n = { loc, 0, readonly };
		uint64_t ino;
		int ret = ub_path_lookup(t->fs, src, &n.src, &ino);

		if (ret)
			return ret;
		if (ino != BTRFS_FIRST_FREE_OBJECTID)
			return -EINVAL; /* not a subvolume's top directory, as the kernel answers */
		return offline_change(t, do_snapshot, &n);
	}
}

static int do_delete(struct ub_txn *tx, void *arg)
{
	const struct named *n = arg;

	if (n->loc)
		return ub_fsw_subvol_delete(tx, n->loc->subvol, n->loc->dir, n->loc->name, strlen(n->loc->name));
	return ub_fsw_subvol_delete_id(tx, n->src);
}

int target_subvol_delete(struct target *t, const struct tloc *loc)
{
	struct named n = { loc, 0, false };
	int ret;

	if (t->online)
		return ioctl_vol(loc->dirfd, BTRFS_IOC_SNAP_DESTROY, loc->name, 0);
	ret = offline_change(t, do_delete, &n);
	/* the library's word for "that name is no subvolume"; the kernel's is EINVAL */
	return ret == -ENOTDIR ? -EINVAL : ret;
}

int target_subvol_delete_id(struct target *t, uint64_t id)
{
	struct named n = { NULL, id, false };

	if (t->online) {
		struct btrfs_ioctl_vol_args_v2 a;

		memset(&a, 0, sizeof(a));
		a.flags = BTRFS_SUBVOL_SPEC_BY_ID;
		a.subvolid = id;
		return ioctl(t->fd, BTRFS_IOC_SNAP_DESTROY_V2, &a) < 0 ? -errno : 0;
	}
	return offline_change(t, do_delete, &n);
}

static int do_default(struct ub_txn *tx, void *arg)
{
	return ub_fsw_set_default_subvol(tx, *(const uint64_t *)arg);
}

int target_set_default(struct target *t, uint64_t id)
{
	if (t->online) {
		uint64_t v = id;

		return ioctl(t->fd, BTRFS_IOC_DEFAULT_SUBVOL, &v) < 0 ? -errno : 0;
	}
	return offline_change(t, do_default, &id);
}

static int do_label(struct ub_txn *tx, void *arg)
{
	const char *label = arg;

	return ub_fsw_set_label(tx, label, strlen(label));
}

int target_set_label(struct target *t, const char *label)
{
	if (t->online) {
		char buf[BTRFS_LABEL_SIZE];

		if (strlen(label) >= sizeof(buf))
			return -EINVAL;
		memset(buf, 0, sizeof(buf));
		memcpy(buf, label, strlen(label));
		return ioctl(t->fd, BTRFS_IOC_SET_FSLABEL, buf) < 0 ? -errno : 0;
	}
	return offline_change(t, do_label, (void *)label);
}

static int do_nothing(struct ub_txn *tx, void *arg)
{
	(void)tx;
	(void)arg;
	return 0;
}

int target_sync(struct target *t)
{
	if (t->online)
		return ioctl(t->fd, BTRFS_IOC_SYNC, NULL) < 0 ? -errno : 0;
	/* the open replayed and committed a pending fsync log; nothing else waits */
	return offline_change(t, do_nothing, NULL);
}

/* ---- sizes ---- */

int units_option(int opt, struct units *u)
{
	switch (opt) {
	case 'b': u->mode = UNITS_RAW; return 1;
	case 0x300: u->mode = UNITS_HUMAN; u->si = false; return 1;
	case 'H': u->mode = UNITS_HUMAN; u->si = true; return 1;
	case 0x301: u->si = false; return 1;
	case 0x302: u->si = true; return 1;
	case 'k': u->mode = UNITS_KBYTES; return 1;
	case 'm': u->mode = UNITS_MBYTES; return 1;
	case 'g': u->mode = UNITS_GBYTES; return 1;
	case 't': u->mode = UNITS_TBYTES; return 1;
	default: return 0;
	}
}

/*
 * As btrfs-progs' pretty_size_mode, digit for digit: a human size divides by
 * the base while it can, keeping the value before the last division, and
 * prints that divided once more as a float (single precision, as there).
 */
const char *pretty_size(uint64_t size, const struct units *u, char *buf, size_t len)
{
	static const char *const bin[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
	static const char *const dec[] = { "B", "kB", "MB", "GB", "TB", "PB", "EB" };
	const uint64_t mult = u->si ? 1000 : 1024;
	uint64_t base = mult, last = size;
	int divs = 0;
	float fraction;

	if (u->mode == UNITS_RAW) {
		snprintf(buf, len, "%llu", (unsigned long long)size);
		return buf;
	}
	switch (u->mode) {
	case UNITS_TBYTES: base *= mult; divs++; /* fallthrough */
	case UNITS_GBYTES: base *= mult; divs++; /* fallthrough */
	case UNITS_MBYTES: base *= mult; divs++; /* fallthrough */
	case UNITS_KBYTES: divs++; break;
	default:
		while (size >= mult) {
			last = size;
			size /= mult;
			divs++;
		}
		if (divs == 0)
			base = 1;
	}
	fraction = (float)last / (float)base;
	snprintf(buf, len, "%.2f%s", fraction, (u->si ? dec : bin)[divs]);
	return buf;
}

const char *profile_name(uint64_t flags)
{
	return ub_profile_name(flags);
}

const char *type_name(uint64_t flags)
{
	if (flags & BTRFS_SPACE_INFO_GLOBAL_RSV)
		return "GlobalReserve";
	switch (flags & (BTRFS_BLOCK_GROUP_DATA | BTRFS_BLOCK_GROUP_SYSTEM | BTRFS_BLOCK_GROUP_METADATA)) {
	case BTRFS_BLOCK_GROUP_DATA: return "Data";
	case BTRFS_BLOCK_GROUP_SYSTEM: return "System";
	case BTRFS_BLOCK_GROUP_METADATA: return "Metadata";
	case BTRFS_BLOCK_GROUP_DATA | BTRFS_BLOCK_GROUP_METADATA: return "Data+Metadata";
	default: return "unknown";
	}
}
