# SPDX-License-Identifier: MIT
"""Filesystems in older on-disk forms, mounted read-write.

Without skinny-metadata (mkfs.btrfs before 3.18, or -O ^skinny-metadata), a tree block's extent
item is an EXTENT_ITEM of the block's length holding a tree_block_info (first key, level) before
its references; the engine writes new ones in that form and changes old ones in either form, as
the kernel does. The referee: btrfs check after files, snapshots (shared blocks, full back
references) and deletions, dump-tree (no skinny METADATA_ITEM appears), the kernel's mount.

A filesystem without a free space tree, mounted read-write: it gets one.

Filesystems made before btrfs-progs 5.15 keep the v1 space cache (a file per block group of
100 MiB and more in the root tree) or, mounted with nospace_cache, nothing. The write engine keeps
only the free space tree, so a read-write open makes one, as the kernel's `mount -o
space_cache=v2` does: the tree built from the extent tree, the v1 cache files removed with their
extents, cache_generation 0, FREE_SPACE_TREE and FREE_SPACE_TREE_VALID set, all in one commit
before anything else. The referees: btrfs check (it checks the new tree against the extents and
finds no stray cache file or extent), the kernel's mount of the result (the files written through
ubtrfs read back, and the kernel writes on it), and dump-tree for what is gone.

Images: sparse 4 GiB (the kernel writes a v1 cache only for block groups of 100 MiB and more).
Budget: a few seconds.
"""

import os
import random

import pytest

import ubtrfs_testlib as T
from test_mount import fuse_mounted

pytestmark = pytest.mark.xdist_group("mount-older-forms")


def progs_check(img):
    cp = T.run(["btrfs", "check", "--readonly", str(img)], check=False, timeout=600)
    text = (cp.stdout + cp.stderr).decode("utf-8", "replace")
    assert cp.returncode == 0 and "no error found" in text, "btrfs check:\n" + text[-4000:]
    return text


def super_fields(img):
    return T.parse_dump_super(T.run(["btrfs", "inspect-internal", "dump-super", str(img)]).stdout.decode())


def root_tree(img):
    return T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "root", str(img)]).stdout.decode()


def kernel_image(base, options, seed):
    """A kernel-made filesystem without a free space tree, written under `options`."""
    img = base / "v1.img"
    with open(img, "wb") as f:
        f.truncate(4 << 30)
    T.run(["mkfs.btrfs", "-q", "-f", "-R", "^free-space-tree", str(img)])
    rng = random.Random(seed)
    files = {}
    with T.mounted([img], base / "kmnt", options=options, readonly=False) as m:
        for i in range(60):
            data = rng.randbytes(rng.choice((3000, 40000, 300000)))
            with open(os.path.join(m, "k%d" % i), "wb") as f:
                f.write(data)
            files["k%d" % i] = data
        T.run(["sync"])
        for i in range(0, 60, 4):
            os.unlink(os.path.join(m, "k%d" % i))
            del files["k%d" % i]
        T.run(["sync"])
    return img, files


@pytest.mark.parametrize("options,v1", [("space_cache=v1,nodiscard", True), ("nospace_cache,nodiscard", False)])
def test_rw_mount_creates_the_free_space_tree(ubtrfs_bin, tmp_path, options, v1):
    img, files = kernel_image(tmp_path, options, 5)
    sb = super_fields(img)
    assert int(sb["compat_ro_flags"], 0) & 1 == 0, sb["compat_ro_flags"]
    if v1:
        if "FREE_SPACE UNTYPED" not in root_tree(img) and "(FREE_SPACE " not in root_tree(img):
            pytest.skip("the kernel wrote no v1 space cache (space_cache=v1 not honoured?)")
        assert int(sb["cache_generation"]) != 0
    rng = random.Random(9)
    with fuse_mounted(ubtrfs_bin, [img], tmp_path / "mnt", options="rw") as m:
        # what the kernel wrote reads back, and new files go where the new tree says space is free
        for name, data in files.items():
            with open(os.path.join(m, name), "rb") as f:
                assert f.read() == data, name
        for i in range(40):
            data = rng.randbytes(rng.choice((2000, 70000, 500000)))
            with open(os.path.join(m, "u%d" % i), "wb") as f:
                f.write(data)
            files["u%d" % i] = data
        os.unlink(os.path.join(m, "k1"))
        del files["k1"]
    sb = super_fields(img)
    assert int(sb["compat_ro_flags"], 0) & 3 == 3, sb["compat_ro_flags"]  # FREE_SPACE_TREE and its VALID bit
    assert int(sb["cache_generation"]) == 0
    roots = root_tree(img)
    assert "FREE_SPACE_TREE ROOT_ITEM" in roots
    # no v1 cache header is left (their key objectid prints as FREE_SPACE)
    assert "key (FREE_SPACE " not in roots, roots[-3000:]
    assert "checking free space tree" in progs_check(img)
    # the kernel reads it all, and writes on it
    with T.mounted([img], tmp_path / "kmnt", readonly=False) as m:
        assert sorted(os.listdir(m)) == sorted(files)
        for name, data in files.items():
            with open(os.path.join(m, name), "rb") as f:
                assert f.read() == data, name
        with open(os.path.join(m, "after"), "wb") as f:
            f.write(b"x" * 100000)
    progs_check(img)
    os.unlink(img)


def test_read_only_mount_converts_nothing(ubtrfs_bin, tmp_path):
    img, _ = kernel_image(tmp_path, "space_cache=v1,nodiscard", 6)
    with open(img, "rb") as f:
        before = f.read(1 << 20)
    with fuse_mounted(ubtrfs_bin, [img], tmp_path / "mnt", options="ro") as m:
        assert len(os.listdir(m)) == 45
    with open(img, "rb") as f:
        assert f.read(1 << 20) == before
    os.unlink(img)


def test_repair_writes_v1_filesystem_as_it_is(ubtrfs_bin, tmp_path):
    """The repair (the engine without the conversion) commits to a v1-cache filesystem: the cache is
    left behind the superblock's generation, so the kernel rebuilds it instead of trusting free space
    the repair's new blocks took. The kernel then fills the filesystem and btrfs check stays clean."""
    import craft as C
    from test_repair import edit_nbytes

    img, files = kernel_image(tmp_path, "space_cache=v1,nodiscard", 7)
    if "key (FREE_SPACE " not in root_tree(img):
        pytest.skip("the kernel wrote no v1 space cache (space_cache=v1 not honoured?)")
    with C.Image(img) as im:
        edit_nbytes(im)
    cp = T.ubtrfs("check", "--repair", "--undo-file", str(tmp_path / "u.undo"), str(img), timeout=120)
    assert cp.returncode == 0, T.describe(cp)
    progs_check(img)
    sb = super_fields(img)
    assert int(sb["compat_ro_flags"], 0) & 1 == 0, "the repair converted the filesystem"
    assert int(sb["cache_generation"]) not in (0, int(sb["generation"])), sb
    rng = random.Random(3)
    with T.mounted([img], tmp_path / "kmnt", options="space_cache=v1,nodiscard", readonly=False) as m:
        for i in range(200):
            data = rng.randbytes(rng.choice((4096, 65536, 262144)))
            with open(os.path.join(m, "n%d" % i), "wb") as f:
                f.write(data)
            files["n%d" % i] = data
        T.run(["sync"])
        for name, data in files.items():
            with open(os.path.join(m, name), "rb") as f:
                assert f.read() == data, name
    progs_check(img)
    os.unlink(img)


def test_without_skinny_metadata(ubtrfs_bin, tmp_path):
    img = tmp_path / "noskinny.img"
    with open(img, "wb") as f:
        f.truncate(2 << 30)
    T.run(["mkfs.btrfs", "-q", "-f", "-O", "^skinny-metadata", str(img)])
    rng = random.Random(4)
    files = {}
    with T.mounted([img], tmp_path / "kmnt", readonly=False) as m:
        os.mkdir(os.path.join(m, "k"))
        for i in range(40):
            data = rng.randbytes(rng.choice((3000, 40000, 200000)))
            with open(os.path.join(m, "k", "f%d" % i), "wb") as f:
                f.write(data)
            files["k/f%d" % i] = data
    with fuse_mounted(ubtrfs_bin, [img], tmp_path / "mnt", options="rw") as m:
        # enough names for the trees to grow several levels (new blocks, splits, merges)
        os.mkdir(os.path.join(m, "u"))
        for i in range(3000):
            with open(os.path.join(m, "u", "n%04d" % i), "wb") as f:
                f.write(b"%d" % i)
            files["u/n%04d" % i] = b"%d" % i
        cp = T.ubtrfs("subvolume", "snapshot", m, os.path.join(m, "snap"))
        assert cp.returncode == 0, T.describe(cp)
        # changes after the snapshot: shared blocks copied, their references moved
        for i in range(0, 3000, 3):
            os.unlink(os.path.join(m, "u", "n%04d" % i))
            del files["u/n%04d" % i]
        with open(os.path.join(m, "k", "f1"), "r+b") as f:
            f.write(b"changed")
        files["k/f1"] = b"changed" + files["k/f1"][7:]
    progs_check(img)
    extents = T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "extent", str(img)]).stdout.decode()
    assert "METADATA_ITEM" not in extents
    assert "tree block key" in extents
    with T.mounted([img], tmp_path / "kmnt", readonly=False) as m:
        for name, data in files.items():
            with open(os.path.join(m, name), "rb") as f:
                assert f.read() == data, name
        assert len(os.listdir(os.path.join(m, "snap", "u"))) == 3000
        T.run(["btrfs", "subvolume", "delete", os.path.join(m, "snap")])
        T.run(["btrfs", "filesystem", "sync", m])
    progs_check(img)
    # and the snapshot's drop, done by ubtrfs this time
    with fuse_mounted(ubtrfs_bin, [img], tmp_path / "mnt", options="rw") as m:
        cp = T.ubtrfs("subvolume", "snapshot", m, os.path.join(m, "snap2"))
        assert cp.returncode == 0, T.describe(cp)
        os.unlink(os.path.join(m, "u", "n0001"))
        cp = T.ubtrfs("subvolume", "delete", "-c", os.path.join(m, "snap2"))
        assert cp.returncode == 0, T.describe(cp)
    progs_check(img)
    os.unlink(img)
