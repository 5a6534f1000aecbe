# SPDX-License-Identifier: MIT
"""A full filesystem through the read-write mount, on every profile (issue 30).

Small images made by mkfs.btrfs (data single, DUP, RAID0, RAID1, RAID1C3, RAID10, RAID5, RAID6,
metadata paired as btrfs pairs them) are mounted by ubtrfs; several threads write files of
incompressible data, 256 KiB per write(2), until every thread has met ENOSPC a few times. Every
failing call must fail with ENOSPC (never EIO or anything else, and the daemon neither crashes nor
logs an error); what a write that got ENOSPC did not write is not in the file. Then the mount must
still work: an fsync (a commit) succeeds, half of the files are deleted and their space comes back
(after a commit): the same threads write again until they have written a third of what was
deleted, without a single ENOSPC. After the unmount btrfs check is clean and the kernel's mount
shows every file with the bytes the test wrote.

Metadata fills too: threads create files with xattrs of a few KiB each (and now and then a small
file's bytes, inline in the leaf) until ENOSPC, on one-device DUP metadata and on RAID1: again
only ENOSPC, a commit works after it, deleting half of the files lets as many again be made, btrfs
check is clean and the kernel's mount shows every file's xattrs.

Budget: every profile, about half a minute under ASan;
UBTRFS_LONG_TESTS=1 runs more threads.
"""

import errno
import hashlib
import os
import random
import threading
from pathlib import Path

import pytest

import ubtrfs_testlib as T
from test_mount import fuse_mounted
from test_enospc import progs_check

MiB = T.MiB
LONG = T.LONG_TESTS
WRITE = 256 * 1024

# name: (devices, data profile, metadata profile); mkfs.btrfs wants 240 MiB for DUP data
PROFILES = {
    "single": (1, "single", "dup"),
    "dup": (1, "dup", "dup"),
    "raid0": (2, "raid0", "raid1"),
    "raid1": (2, "raid1", "raid1"),
    "raid1c3": (3, "raid1c3", "raid1c3"),
    "raid10": (4, "raid10", "raid1"),
    "raid5": (3, "raid5", "raid1"),
    "raid6": (4, "raid6", "raid1c3"),
}
THREADS = 4 if LONG else 3


def make_images(d, n, size):
    imgs = []
    for i in range(n):
        p = d / ("dev%d.img" % i)
        with open(p, "wb") as f:
            f.truncate(size)
        imgs.append(p)
    return imgs


class Writers:
    """Threads writing files until full; what each file holds is kept (by its hash)."""

    def __init__(self, top, nthreads, seed):
        self.top = Path(top)
        self.nthreads = nthreads
        self.seed = seed
        self.files = {}      # name -> sha256 of what it holds
        self.sizes = {}
        self.lock = threading.Lock()
        self.surprises = []
        self.enospc = 0
        self.written = 0
        self.round = 0

    def _thread(self, t, stop_after_enospc, budget):
        rng = random.Random("%d:%d:%d" % (self.seed, self.round, t))
        block = bytearray(rng.randbytes(WRITE))
        misses = 0
        written = 0
        n = 0
        while misses < stop_after_enospc and (budget is None or written < budget):
            name = "r%d-t%d-%d" % (self.round, t, n)
            n += 1
            h = hashlib.sha256()
            size = 0
            try:
                fd = os.open(self.top / name, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    self.surprises.append("create %s: %s" % (name, os.strerror(e.errno)))
                    return
                misses += 1
                with self.lock:
                    self.enospc += 1
                continue
            try:
                for _ in range(rng.randint(1, 12)):
                    # every block differs (its first bytes), so no two files hold the same bytes
                    block[0:16] = rng.randbytes(16)
                    try:
                        k = os.write(fd, block)
                    except OSError as e:
                        if e.errno != errno.ENOSPC:
                            self.surprises.append("write %s at %d: %s" % (name, size, os.strerror(e.errno)))
                            return
                        misses += 1
                        with self.lock:
                            self.enospc += 1
                        break
                    h.update(block[:k])
                    size += k
                    written += k
                    if k != len(block):
                        # a short write: as full as an ENOSPC (the kernel's btrfs answers so too)
                        misses += 1
                        break
            finally:
                os.close(fd)
                with self.lock:
                    self.files[name] = h.hexdigest()
                    self.sizes[name] = size
        with self.lock:
            self.written += written

    def run(self, stop_after_enospc=3, budget=None):
        ths = [threading.Thread(target=self._thread, args=(t, stop_after_enospc, budget))
               for t in range(self.nthreads)]
        for th in ths:
            th.start()
        for th in ths:
            th.join()
        self.round += 1
        assert not self.surprises, "calls failed otherwise than with ENOSPC:\n  " + "\n  ".join(self.surprises[:10])


def kernel_fill(d, imgs):
    """How many bytes the kernel's btrfs writes, the same way, into a copy of the new filesystem."""
    copies = []
    for img in imgs:
        c = d / ("kernel-" + img.name)
        T.copy_sparse(img, c)
        copies.append(c)
    with T.mounted(copies, d / "kfill", readonly=False) as km:
        w = Writers(km, 1, seed=0)
        w.run(stop_after_enospc=2)
    for c in copies:
        os.unlink(c)
    return w.written


def view(top):
    out = {}
    for name in os.listdir(top):
        with open(os.path.join(top, name), "rb") as f:
            out[name] = hashlib.sha256(f.read()).hexdigest()
    return out


@pytest.mark.parametrize("profile", list(PROFILES))
def test_enospc_through_the_mount(ubtrfs_bin, scratch, profile):
    ndev, data, meta = PROFILES[profile]
    d = Path(scratch) / ("mount-enospc-" + profile)
    d.mkdir()
    imgs = make_images(d, ndev, (256 if data == "dup" else 128) * MiB)
    T.run(["mkfs.btrfs", "-f", "-q", "-d", data, "-m", meta, *imgs])
    kernel_full = kernel_fill(d, imgs)
    log = []
    try:
        with fuse_mounted(ubtrfs_bin, imgs, d / "mnt", "rw,commit=600", log=log) as mnt:
            w = Writers(mnt, THREADS, seed=len(profile))
            w.run()
            assert w.enospc > 0, "the filesystem never filled"
            full = w.written
            # as much room as the kernel finds on the same filesystem, give or take a few writes
            assert full >= kernel_full - 8 * WRITE * THREADS, \
                "full after %d KiB; the kernel writes %d KiB into the same filesystem" % (full >> 10, kernel_full >> 10)
            # consistent and writable: a commit succeeds, and the mount shows what the writers wrote
            fd = os.open(mnt, os.O_RDONLY | os.O_DIRECTORY)
            os.fsync(fd)
            os.close(fd)
            assert view(mnt) == w.files, "after ENOSPC the mount shows other bytes than were written"
            # deleting gives the space back (after the commit that frees it)
            names = sorted(w.files)
            freed = 0
            for name in names[::2]:
                freed += w.sizes.pop(name)
                os.unlink(os.path.join(mnt, name))
                del w.files[name]
            fd = os.open(mnt, os.O_RDONLY | os.O_DIRECTORY)
            os.fsync(fd)
            os.close(fd)
            before = w.enospc
            w.run(stop_after_enospc=1, budget=freed // 3 // THREADS)
            assert w.enospc == before, "%d ENOSPC after %d of %d bytes were deleted (%d written again)" % (
                w.enospc - before, freed, full, w.written - full)
            # and it fills up again
            w.run()
            assert view(mnt) == w.files
    finally:
        text = log[0] if log else ""
    errors = [ln for ln in text.splitlines() if ": error:" in ln]
    assert not errors, "the daemon logged errors:\n" + "\n".join(errors[:20])
    progs_check(imgs)
    with T.mounted(imgs, d / "kmnt", readonly=True) as km:
        got = view(km)
    assert got == w.files, "the kernel's mount shows other files: %r" % sorted(set(got.items()) ^ set(w.files.items()))[:6]
    print("%s: filled with %d MiB (the kernel %d MiB), %d ENOSPC answers, %d files kept" % (
        profile, full >> 20, kernel_full >> 20, w.enospc, len(w.files)))
    T.run(["btrfs", "device", "scan", "--forget"], check=False)
    T.rmtree(d)


class MetaWriters:
    """Threads making files with xattrs (and small inline bytes) until the metadata is full."""

    def __init__(self, top, nthreads):
        self.top = Path(top)
        self.nthreads = nthreads
        self.files = {}  # name -> (xattr values, bytes)
        self.lock = threading.Lock()
        self.surprises = []
        self.enospc = 0
        self.round = 0

    def _thread(self, t, misses_max, budget):
        rng = random.Random("meta:%d:%d" % (self.round, t))
        misses = made = 0
        n = 0
        while misses < misses_max and (budget is None or made < budget):
            name = "m%d-t%d-%d" % (self.round, t, n)
            n += 1
            path = self.top / name
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    self.surprises.append("create %s: %s" % (name, os.strerror(e.errno)))
                    return
                misses += 1
                with self.lock:
                    self.enospc += 1
                continue
            xattrs = {}
            data = b""
            try:
                if rng.random() < 0.3:
                    data = rng.randbytes(rng.randint(1, 1500))
                    try:
                        os.write(fd, data)
                    except OSError as e:
                        if e.errno != errno.ENOSPC:
                            self.surprises.append("write %s: %s" % (name, os.strerror(e.errno)))
                            return
                        misses += 1
                        data = b""
                for i in range(rng.randint(2, 3)):
                    v = rng.randbytes(rng.randint(2500, 3800))
                    try:
                        os.setxattr(fd, "user.x%d" % i, v)
                    except OSError as e:
                        if e.errno != errno.ENOSPC:
                            self.surprises.append("setxattr %s: %s" % (name, os.strerror(e.errno)))
                            return
                        misses += 1
                        with self.lock:
                            self.enospc += 1
                        break
                    xattrs["user.x%d" % i] = v
            finally:
                os.close(fd)
            made += 1
            with self.lock:
                self.files[name] = (xattrs, data)

    def run(self, misses_max=3, budget=None):
        ths = [threading.Thread(target=self._thread, args=(t, misses_max, budget)) for t in range(self.nthreads)]
        for th in ths:
            th.start()
        for th in ths:
            th.join()
        self.round += 1
        assert not self.surprises, "calls failed otherwise than with ENOSPC:\n  " + "\n  ".join(self.surprises[:10])

    def check(self, top):
        names = sorted(os.listdir(top))
        assert names == sorted(self.files), "the files differ: %r" % sorted(set(names) ^ set(self.files))[:8]
        for name, (xattrs, data) in self.files.items():
            p = os.path.join(top, name)
            got = {x: os.getxattr(p, x) for x in os.listxattr(p)}
            assert got == xattrs, "%s: xattrs differ" % name
            with open(p, "rb") as f:
                assert f.read() == data, "%s: bytes differ" % name


@pytest.mark.parametrize("profile", ["single", "raid1"])
def test_metadata_enospc_through_the_mount(ubtrfs_bin, scratch, profile):
    ndev, data, meta = PROFILES[profile]
    d = Path(scratch) / ("mount-meta-enospc-" + profile)
    d.mkdir()
    imgs = make_images(d, ndev, 128 * MiB)
    # metadata and data chunks apart, metadata nodes of 4 KiB: the metadata fills first
    T.run(["mkfs.btrfs", "-f", "-q", "-n", "4096", "-d", data, "-m", meta, *imgs])
    log = []
    try:
        with fuse_mounted(ubtrfs_bin, imgs, d / "mnt", "rw,commit=600,max_inline=2048", log=log) as mnt:
            w = MetaWriters(mnt, THREADS)
            w.run()
            assert w.enospc > 0, "the metadata never filled"
            made = len(w.files)
            fd = os.open(mnt, os.O_RDONLY | os.O_DIRECTORY)
            os.fsync(fd)
            os.close(fd)
            gone = sorted(w.files)[::2]
            for name in gone:
                os.unlink(os.path.join(mnt, name))
                del w.files[name]
            fd = os.open(mnt, os.O_RDONLY | os.O_DIRECTORY)
            os.fsync(fd)
            os.close(fd)
            before = w.enospc
            # the freed room takes most of as many files again (the last ones of a fill vary, as in
            # test_enospc.refill_count)
            w.run(misses_max=1, budget=len(gone) * 9 // 10 // THREADS)
            assert w.enospc == before, "ENOSPC after %d of %d files were deleted" % (len(gone), made)
            w.check(mnt)
    finally:
        text = log[0] if log else ""
    errors = [ln for ln in text.splitlines() if ": error:" in ln]
    assert not errors, "the daemon logged errors:\n" + "\n".join(errors[:20])
    progs_check(imgs)
    with T.mounted(imgs, d / "kmnt", readonly=True) as km:
        w.check(km)
    print("%s: %d files made before ENOSPC, %d ENOSPC answers, %d files kept" % (profile, made, w.enospc, len(w.files)))
    T.run(["btrfs", "device", "scan", "--forget"], check=False)
    T.rmtree(d)
