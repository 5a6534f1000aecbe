# SPDX-License-Identifier: MIT
"""The mount against what the kernel and the other commands do, on states found in the
correctness sweep (issue 28):

  * st_blocks of inodes the in-memory fsync log replay changed: the log's inode items carry a
    stale nbytes; the kernel's replay keeps the committed one and counts the extents it drops and
    adds. Oracle: the kernel's own replay of a copy of the same crash image.
  * a directory entry whose inode cannot be read: readdirplus lists the entries after it too.
  * directory loops and second names of directories: refused as ls -R and restore refuse them.
  * names in the mount's log are escaped as check escapes them.
"""

import os
import random
import re
from pathlib import Path

import pytest

import fsynclog_lib as L
import ubtrfs_testlib as T
from test_mount import fuse_mounted

SECTOR = 4096
BLOCKS_ATTEMPTS = 3


# ---------------------------------------------------------------- st_blocks after the log replay

def _blocks_baseline(m):
    rng = random.Random(28)
    L.write_file(m / "old", rng.randbytes(300000))
    L.write_file(m / "trunc", rng.randbytes(200000))
    L.write_file(m / "punch", rng.randbytes(200000))
    L.write_file(m / "same", rng.randbytes(50000))


def _blocks_action(m):
    rng = random.Random(29)
    # a new file, and a new inline one
    L.write_file(m / "new", rng.randbytes(100000), fsync=True)
    L.write_file(m / "inline", b"q" * 300, fsync=True)
    # an old file rewritten in the middle and extended past a hole
    with open(m / "old", "r+b") as f:
        f.seek(50000)
        f.write(rng.randbytes(20000))
        f.seek(400000)
        f.write(b"y" * 5000)
        f.flush()
        os.fsync(f.fileno())
    # truncated, a hole punched, preallocated space partly written
    os.truncate(m / "trunc", 50000)
    L.fsync_path(m / "trunc")
    fd = os.open(m / "punch", os.O_RDWR)
    try:
        T.fallocate(fd, 3, 2 * SECTOR, 10 * SECTOR)  # FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE
        os.fsync(fd)
    finally:
        os.close(fd)
    fd = os.open(m / "prealloc", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        T.fallocate(fd, 0, 0, 16 * SECTOR)
        os.write(fd, b"z" * 1000)
        os.fsync(fd)
    finally:
        os.close(fd)
    # an old file only touched (its extents logged unchanged), and a new symlink
    os.utime(m / "same", ns=(10**18, 10**18))
    L.fsync_path(m / "same")
    os.symlink("target" * 10, m / "sym")
    L.fsync_path(m)


LOG_INODE = re.compile(r"key \((\d+) INODE_ITEM 0\) itemoff \d+ itemsize \d+\n\s*generation \d+ transid \d+ "
                       r"size \d+ nbytes (\d+)")


def _log_nbytes(crash):
    """{inode: nbytes} of the inode items in the fsync log."""
    return {int(i): int(n) for i, n in LOG_INODE.findall(crash.dump_log())}


def _kernel_blocks(crash):
    """{name: (ino, st_blocks)} of the top directory after the kernel's replay of a copy."""
    k = crash.workdir / "kernel-replay.img"
    T.copy_sparse(crash.image, k)
    try:
        with T.mounted([k], crash.workdir / "mnt_replay", options="noatime", readonly=False) as mnt:
            return {n: (os.lstat(os.path.join(mnt, n)).st_ino, os.lstat(os.path.join(mnt, n)).st_blocks)
                    for n in os.listdir(mnt)}
    finally:
        os.unlink(k)


@pytest.fixture(scope="module")
def blocks_crash(scratch):
    """A crash image whose log holds inode items with an nbytes the kernel's replay does not keep."""
    base = Path(scratch) / "mount_sweep_blocks"
    why = None
    for attempt in range(BLOCKS_ATTEMPTS):
        T.rmtree(base)
        crash = L.make_crash(base, _blocks_baseline, _blocks_action)
        if crash.log_root == 0:
            why = "the kernel committed instead of logging"
            continue
        if len(set(L.super_generations(crash.image))) > 1:
            why = "the copy caught a commit half way"
            continue
        kernel = _kernel_blocks(crash)
        logged = _log_nbytes(crash)
        stale = [n for n, (ino, blocks) in kernel.items()
                 if ino in logged and (logged[ino] + SECTOR - 1) // SECTOR * SECTOR // 512 != blocks]
        if not stale:
            why = "every logged inode item carries the nbytes the kernel's replay ends with"
            continue
        yield crash, kernel, stale
        break
    else:
        pytest.skip("setup did not reach its state: %s (%d attempts)" % (why, BLOCKS_ATTEMPTS))
    L.remove_workdir(base)


def test_st_blocks_after_log_replay(ubtrfs_bin, factory, blocks_crash):
    crash, kernel, stale = blocks_crash
    with fuse_mounted(ubtrfs_bin, [crash.image], factory.mountpoint()) as mnt:
        got = {n: os.lstat(os.path.join(mnt, n)).st_blocks for n in os.listdir(mnt)}
    assert sorted(got) == sorted(kernel), "entries differ: kernel %r mount %r" % (sorted(kernel), sorted(got))
    diff = ["%s: kernel %d mount %d" % (n, kernel[n][1], got[n]) for n in sorted(kernel) if got[n] != kernel[n][1]]
    assert not diff, "st_blocks differ from the kernel's replay (stale in the log: %s):\n  %s" % (
        ", ".join(sorted(stale)), "\n  ".join(diff))
