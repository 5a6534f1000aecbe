# SPDX-License-Identifier: MIT
"""The mount's memory under a stream of fsyncs (issue 31).

Each fsync copies the log tree's blocks that the previous log sync wrote. Those
old blocks are read by nobody again (a log is read only by a replay, from the
disk), so they must leave the block cache at once: kept there until the cache's
budget evicts them, every fsync took fresh memory for its new blocks (page faults and
zeroing for every new block), and the daemon grew towards its cache
budget however small the work. The daemon's resident memory is sampled after a
warm-up and after many more fsyncs of 4 KiB writes to one file: it must stay
flat. ASan's quarantine (memory freed but kept back to catch use after free)
would hide reuse, so the daemon runs with a small one.

Budget: a few seconds.
"""
import os
import random
import subprocess
import tempfile

import ubtrfs_testlib as T
from test_mount import fuse_mounted

MiB = T.MiB


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS for %d" % pid)


def daemon_pid(mnt):
    cp = subprocess.run(["pgrep", "-f", r"mount -f .* %s$" % mnt], capture_output=True, text=True)
    pids = [int(p) for p in cp.stdout.split()]
    assert len(pids) == 1, "daemon of %s: %r" % (mnt, pids)
    return pids[0]


def fsyncs(path, n, rng):
    fd = os.open(path, os.O_WRONLY)
    try:
        for _ in range(n):
            os.pwrite(fd, rng.randbytes(4096), rng.randrange(4096) * 4096)
            os.fsync(fd)
    finally:
        os.close(fd)


def test_fsync_stream_does_not_grow_the_daemon(scratch, ubtrfs_bin, monkeypatch):
    # the test's own folder: the session scratch holds the image factory's img/ and mnt/
    d = tempfile.mkdtemp(prefix="fsync-memory-", dir=scratch)
    img = os.path.join(d, "fs.img")
    with open(img, "wb") as f:
        f.truncate(512 * MiB)
    T.run(["mkfs.btrfs", "-q", "-f", str(img)])
    old = os.environ.get("ASAN_OPTIONS")
    monkeypatch.setenv("ASAN_OPTIONS", (old + ":" if old else "") + "quarantine_size_mb=1")
    mnt = os.path.join(d, "m")
    rng = random.Random(31)
    with fuse_mounted(ubtrfs_bin, [img], mnt, "rw,commit=600,noatime") as m:
        path = os.path.join(m, "f")
        with open(path, "wb") as f:
            f.truncate(16 * MiB)
        pid = daemon_pid(m)
        fsyncs(path, 300, rng)
        before = rss_kib(pid)
        fsyncs(path, 3000, rng)
        after = rss_kib(pid)
    # the old blocks kept in the cache grew it by 15 MiB here (from 22 MiB after the warm-up);
    # reused buffers by under 1 MiB (from 5)
    assert after - before < 8 * 1024, "the daemon grew by %d KiB over 3000 fsyncs (from %d KiB)" % (
        after - before, before)
    T.rmtree(d)
