/* SPDX-License-Identifier: MIT */
/*
 * The whole-image fuzz targets' shared part (image_harness.c): the small real
 * images of tests/fuzz/images held in memory, the inputs that describe
 * mutations of them (the format is in fuzz_image.c), their structure-aware
 * mutator (LLVMFuzzerCustomMutator, so a target that includes this harness
 * mutates images), and a walk of every tree block (for the block index the
 * mutations address, the dump-tree printers and the seed export).
 *
 * Each target (fuzz_image: dump-tree, ls, cat; fuzz_check: check and
 * find-root's scan; fuzz_mount: the mount's operations; fuzz_restore:
 * restore) runs its command on every input over the same corpus.
 */
#ifndef UBTRFS_FUZZ_IMAGE_HARNESS_H
#define UBTRFS_FUZZ_IMAGE_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "ubtrfs/fs.h"
#include "ubtrfs/log.h"

#define FUZZ_MAX_IMAGES 8
#define FUZZ_MAX_MUT 16
#define FUZZ_ENTRY 16
#define FUZZ_HDR 2
/* Bounds on one execution: exceeding them is not an error, the walk just stops there. */
#define FUZZ_MAX_BLOCKS 4096      /* printed per execution */
#define FUZZ_PRINT_BUDGET (256U << 20)

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed);
size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);

struct fblock {
	uint64_t logical;
	uint64_t phys[4];
	int ncopies;
	uint8_t level;
	uint64_t owner;
};

struct fimage {
	char name[64];
	uint8_t *mem; /* the pristine image, restored after every execution */
	uint64_t size;
	uint32_t nodesize;
	unsigned csum_type;
	struct fblock *blocks;
	int nblocks;
};

extern struct fimage fuzz_images[FUZZ_MAX_IMAGES];
extern int fuzz_nimages;

/* A walk over tree blocks (and, for fuzz_image, over the files). */
struct walk {
	struct ub_fs *fs;
	struct fimage *index; /* indexing: collect blocks here */
	FILE *out;            /* printing: the dump-tree printers write here */
	unsigned blocks;
	unsigned entries;
	uint64_t bytes_read;
	bool read_regular;    /* a file with an on-disk extent gave its bytes */
	bool read_any;
	const char *export;   /* seed export: write seeds of the other targets under this directory */
};

/*
 * Load every image of $UBTRFS_FUZZ_IMAGES (or the source tree's
 * tests/fuzz/images) and index its tree blocks; with $UBTRFS_FUZZ_EXPORT set,
 * write the other targets' seeds there and exit. `target` names the caller
 * in messages. Exits on failure.
 */
void fuzz_images_load(const char *target);
/* The image an input names, with the input's mutations applied (NULL: the input is too short). */
struct fimage *fuzz_apply(const uint8_t *data, size_t size);
/* Put the image back as it was (after the target's run), its file too after fuzz_file_sync. */
void fuzz_undo(struct fimage *img);
/*
 * For what opens devices by name (check's superblock pass, restore): every
 * image also as a sparse file in a new folder under $TMPDIR (or /tmp),
 * removed at exit (and by the next run, when a crash left it); the folder's
 * path is returned. fuzz_file_sync writes the
 * input's changes into the image's file and returns its path.
 */
const char *fuzz_files_init(const char *target);
const char *fuzz_file_sync(struct fimage *img);
/* Remove a folder and everything in it (symlinks not followed). */
void fuzz_rm_tree(const char *path);
/* A quiet log sink that still checks every message is a terminated string. */
extern const struct ub_log fuzz_quiet_log;
/* Open the (mutated) image read-only through a memory device. */
int fuzz_open_image(struct fimage *img, bool no_log, const struct ub_log *log, struct ub_fs **fs);
/* The same with the caller's open options (older roots, a rebuilt chunk map...). */
int fuzz_open_with(struct fimage *img, const struct ub_fs_opts *opts, const struct ub_log *log, struct ub_fs **fs);
/* Walk every tree the superblock and the root tree name (and the log trees): subvolume ids into subvols[max]. */
void fuzz_walk_all_trees(struct walk *w, uint64_t *subvols, int *nsubvols, int max);
/* A stream for the printers that counts bytes and aborts past FUZZ_PRINT_BUDGET (a printer that ran away). */
FILE *fuzz_print_open(void);

#endif
