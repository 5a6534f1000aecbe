/* SPDX-License-Identifier: MIT */
/*
 * The checker: verifies an open filesystem read-only and hands every problem
 * it finds, one structured record each, to the caller's sink.
 *
 * Use: ub_checker_new, open the filesystem with the log sink
 * ub_checker_log gives (so the reader's own verdicts on blocks become
 * problems of the check that asked for them), ub_checker_supers on the
 * device paths, ub_checker_run on the filesystem, ub_checker_summary.
 * docs/check.md lists every check and its message.
 */
#ifndef UBTRFS_CHECK_H
#define UBTRFS_CHECK_H

#include <stdbool.h>
#include <stdint.h>
#include "ubtrfs/fs.h"
#include "ubtrfs/log.h"
#include "ubtrfs/api.h"

UB_API_BEGIN

/* Classes of problems, in the order the checker runs them (new classes go before OTHER). */
enum ub_chk_class {
	UB_CHK_SUPER = 0, /* superblock copies, backup roots, device items against devices */
	UB_CHK_TREE,      /* tree blocks: reading, header, items, keys, reachability */
	UB_CHK_CHUNK,     /* chunks, block groups, device extents */
	UB_CHK_EXTENT,    /* the extent tree against what the trees reference */
	UB_CHK_FREE_SPACE, /* the free space tree against the block groups' unused bytes */
	UB_CHK_ROOT,      /* root items and root references */
	UB_CHK_CSUM,      /* the checksum tree: its items' layout */
	UB_CHK_FS,        /* file trees: inodes, names, directory entries, file extents */
	UB_CHK_QGROUP,    /* the quota tree's counts against what the subvolumes reach */
	UB_CHK_OTHER,     /* a library error no check asked for (logged while opening, ...) */
	UB_CHK_NCLASSES
};

/* "super", "tree", "chunk", "extent", "free-space", "root", "csum", "fs", "qgroup", "other". */
const char *ub_chk_class_name(enum ub_chk_class c);

/*
 * What a repair (ub_repair, include/ubtrfs/repair.h) does about a problem, when the checker knows
 * the cure: the field to set and the value `want` it must have. UB_CHK_FIX_NONE: no simple cure.
 */
enum ub_chk_fix {
	UB_CHK_FIX_NONE = 0,
	UB_CHK_FIX_NLINK,     /* the inode's nlink becomes `want`, the number of its names */
	UB_CHK_FIX_NBYTES,    /* the inode's nbytes becomes `want`, what its file extents hold */
	UB_CHK_FIX_DIR_SIZE,  /* the directory's size becomes `want`, its entries' name bytes */
	UB_CHK_FIX_SPACE,     /* block group used bytes, the superblock's bytes_used, the free space tree:
				 recounted from the extent tree */
	UB_CHK_FIX_DEV_USED,  /* devid `devid`'s DEV_ITEM bytes_used becomes `want`, its device extents' sum */
	UB_CHK_FIX_NAMES,     /* the names of `inode` in directory `want` made whole: INODE_REF, DIR_ITEM and
				 DIR_INDEX of each name, one index, the type of the inode's mode */
	UB_CHK_FIX_LOST,      /* `inode` has no name (and no orphan item): linked into /lost+found */
	UB_CHK_FIX_HOLES,     /* no NO_HOLES: the gaps of `inode`'s file extents up to its size get hole items */
	UB_CHK_FIX_UUID_ADD,  /* subvolume `tree` gets its entry in the uuid tree (`want`: the key type,
				 UUID_KEY_SUBVOL or UUID_KEY_RECEIVED_SUBVOL) */
	UB_CHK_FIX_UUID_DEL,  /* subvolume `want` leaves the uuid tree item at `key` */
	UB_CHK_FIX_DEAD_ORPHAN, /* deleted subvolume `want` gets the orphan item that has it dropped */
	UB_CHK_FIX_UNCOUNTED, /* no cure, and a warning to the repair: the extent tree misses an extent it
				 cannot make again, so nothing may be recounted from it (the space it
				 would call free is in use) */
	UB_CHK_FIX_COPY,      /* a bad copy of a tree block or of data: rewritten from a good one (a scrub) */
	UB_CHK_FIX_EXTENT_REFS, /* the extent item at `key` (extent tree) counts `want` references: the
				   pointers that reach a tree block, the file extent items that point at data */
	UB_CHK_FIX_EXTENT_ADD, /* tree block `logical` (reached by one pointer, from node `want2` or, 0, a
				  root item, of tree `want`) gets its extent item back */
	UB_CHK_FIX_DATA_ADD,  /* data at `logical` gets its extent item back: `want` file extent items point at
				 it (the first: inode `inode` of tree `tree`, in leaf `want2`) */
	UB_CHK_FIX_EXTENT_DEL, /* the extent item at `key`, of a tree block no tree reaches, goes (its space
				  becomes free) */
	UB_CHK_FIX_BLOCK_REF_ADD, /* tree block `logical` (its extent item at `key`) gets a reference for the
				     pointer from node `want2` (0: a root item), of tree `want` */
	UB_CHK_FIX_BLOCK_REF_DEL, /* the reference of tree block `logical` at `key` (its extent item's inline
				     one, or a keyed item) of type `want` naming `want2` (a tree or a parent
				     node) goes: no pointer it names reaches the block */
	UB_CHK_FIX_OVERLAP,   /* `inode`'s file extent items that run past `want` (the start of the next one)
				 end there; its nbytes counted again */
	UB_CHK_FIX_ROOT_NEWER, /* the root item of tree `tree` is one commit behind its tree: it points at the
				  newer root, tree block `logical` (generation `want`, level `want2`), whose
				  blocks all have their extent items (btrfs check's "outdated root item") */
	UB_CHK_FIX_QGROUP,    /* the QGROUP_INFO item at `key` (quota tree) gets referenced `want` and exclusive
				  `want2` bytes, what its subvolumes reach */
	UB_CHK_FIX_INODE_GEN, /* `inode`'s generation and transid, one newer than the filesystem, both become the
				  repair's transaction (as btrfs check --repair sets them) */
	UB_CHK_FIX_EXTENT_GEN, /* the extent item at `key` (extent tree) gets generation `want`: a tree block's
				  header generation, or for data the last commit's */
	UB_CHK_FIX_NUM_DEVICES, /* the superblocks' num_devices becomes `want`, the chunk tree's device items */
	UB_CHK_FIX_DATA_REF_DROP, /* the EXTENT_DATA_REF (root `tree`, inode `inode`, offset `want`) of the data
				  extent item at `key` counts `want2` more than the file extent items that make it:
				  its count (and the item's refs) lowered by that */
	UB_CHK_FIX_BEHIND,    /* no cure, and a warning to the repair: a tree's root item may be behind its
				  tree (newer blocks of it have extent items), so the references counted in the
				  tree the root item names are not the whole truth: no reference cure is safe */
	UB_CHK_FIX_ROOT_DIR,  /* subvolume `tree`'s root directory `inode` has items but no inode item: one is
				  made (a directory, 0755, owned by root, its size counted from its entries) */
	UB_CHK_FIX_SALVAGE,   /* tree block `logical` of tree `tree`, no copy of which passes the tree checks
				 (its pointer expects generation `want`, 0: any, and level `want2`): a
				 repair reads it leniently, cures its items and copies it on write */
	UB_CHK_FIX_COUNT
};

/* One problem. Fields not known are 0 (has_key false, path NULL). Valid during the callback only. */
struct ub_chk_problem {
	enum ub_chk_class cls;
	uint64_t tree;        /* tree objectid, 0: not in a tree */
	bool has_key;
	struct ub_key key;    /* the item or pointer key where the problem is */
	uint64_t logical;     /* logical address (a tree block, a chunk...), 0 if none */
	uint64_t devid;       /* device, 0 if none */
	uint64_t physical;    /* byte offset on that device, when devid is set */
	uint64_t inode;       /* 0 if none */
	const char *path;     /* the inode's path or the device's path, NULL if unknown */
	const char *msg;      /* what is wrong */
	enum ub_chk_fix fix;  /* what a repair does about it (UB_CHK_FIX_NONE: nothing simple) */
	uint64_t want;        /* the value the fix sets */
	uint64_t want2;       /* a second value, where the fix needs one */
};

struct ub_chk_sink {
	void (*problem)(void *arg, const struct ub_chk_problem *p);
	/* progress: `phase` names the pass, done/total in bytes of metadata (total may be 0); may be NULL */
	void (*progress)(void *arg, const char *phase, uint64_t done, uint64_t total);
	void *arg;
};

struct ub_chk_opts {
	int verbosity;        /* library messages that are no problem go to stderr up to this level */
	bool no_log;          /* leave the fsync log trees out (as the filesystem was opened with no_log) */
	/* ---- data checksums ---- */
	bool check_data_csum; /* read every sector the checksum tree covers, on every copy, and verify it */
};

struct ub_chk_summary {
	uint64_t problems[UB_CHK_NCLASSES];
	uint64_t superblocks;   /* copies read */
	uint64_t trees;         /* trees walked */
	uint64_t tree_blocks;   /* blocks verified */
	uint64_t meta_bytes;    /* their bytes */
	uint64_t shared_blocks; /* reached again from another subvolume tree (checked once) */
	uint64_t chunks, block_groups, dev_extents;
	uint64_t space_caches;  /* v1 space caches the kernel would load, compared with the extents */
	uint64_t extents;       /* extent items counted into block groups */
	uint64_t data_bytes;    /* bytes of data extents counted */
	/* ---- checksum tree ---- */
	uint64_t csum_items;    /* EXTENT_CSUM items */
	uint64_t csum_bytes;    /* data bytes they cover */
	/* ---- file trees ---- */
	uint64_t subvols;       /* subvolume trees checked */
	uint64_t inodes, names, file_extents;
	/* ---- RAID5/6 parity (--check-data-csum) ---- */
	uint64_t parity_stripes; /* full stripes whose P (and Q) were compared with their data */
	/* ---- quotas ---- */
	uint64_t qgroups;       /* qgroups whose counts were compared */
};

struct ub_checker;

int ub_checker_new(const struct ub_chk_opts *opts, const struct ub_chk_sink *sink, struct ub_checker **out);
void ub_checker_free(struct ub_checker *c);
/*
 * The log sink to open the filesystem with. An error logged while a check
 * reads becomes that check's problem (with its tree, key and address); one
 * logged elsewhere (the open) becomes a problem of class UB_CHK_OTHER.
 */
void ub_checker_log(struct ub_checker *c, struct ub_log *out);
/*
 * Every superblock copy of every device in `paths` (opened read-only),
 * read raw: works also when the filesystem cannot be opened. With `fs` set
 * (may be NULL) the copies are compared with the devices the filesystem
 * knows too. 0, or -errno when it could not be done at all.
 */
int ub_checker_supers(struct ub_checker *c, const char *const *paths, int npaths, struct ub_fs *fs);
/* The checks that need the open filesystem: tree blocks, chunks. 0, or -errno when a pass could not run. */
int ub_checker_run(struct ub_checker *c, struct ub_fs *fs);
void ub_checker_summary(const struct ub_checker *c, struct ub_chk_summary *out);

UB_API_END

#endif
