# SPDX-License-Identifier: MIT
"""The read-write mount, side by side with the kernel's btrfs (issue 30).

A seeded random workload (workload.py: creates, buffered and O_DIRECT writes past EOF and after
holes, truncates, hole punches, fallocate, renames plain, over existing names and exchanging, hard
links, symlinks, device nodes, fifos, xattrs, chmod/chown/utimes, mkdir/rmdir, nocow and
compression properties, reflinks, fsyncs) runs on a fresh mkfs.btrfs image mounted by the kernel and
on another mounted by ubtrfs. Every operation's result (its errno included) must be the same on
both, and so must the trees afterwards: every path, type, permission bits, owner, size, link count,
device numbers, symlink target, xattrs and the sha256 of every file. Then the ubtrfs image is
unmounted, btrfs check judges it, and the kernel's own mount of it must show the same tree again,
inode numbers included (the numbers the kernel would have given).

One difference is left out on purpose: the kernel replaces an xattr's value in place and refuses a
longer one (ENOSPC) when the leaf holding it is full, which depends on how its leaves were split;
ubtrfs moves the record instead. The workload here never grows an existing value.

Budget: a few seconds per seed; UBTRFS_LONG_TESTS runs more seeds and operations.
"""

import os
from pathlib import Path

import pytest

import ubtrfs_testlib as T
import workload as W
from test_mount import fuse_mounted

MiB = T.MiB
LONG = T.LONG_TESTS
SEEDS = list(range(1, 13)) if LONG else [1, 2, 3]
NOPS = 600 if LONG else 150

# what the mount does as the kernel does: not the btrfs command's subvolume operations and defrag
# (later), nor FICLONE / FICLONERANGE, which the kernel's FUSE answers itself (EOPNOTSUPP: it has no
# way to pass them on; copy_file_range is how a FUSE mount clones)
ALLOWED = ("create", "write", "small_after_hole", "truncate", "punch", "fallocate", "rename", "link", "link_storm",
           "unlink", "symlink", "mknod", "xattr", "attr", "mkdir", "rmdir", "fsync", "sync")

# what both mounts must agree on (times are the clock's, inode numbers are FUSE's node ids on the mount)
FIELDS = ("type", "mode", "uid", "gid", "size", "nlink", "rdev_major", "rdev_minor", "target", "xattrs")


def view(mnt):
    entries = T.walk_tree(mnt, btrfs=False)
    hashes = T.hash_files(mnt, entries)
    out = {}
    for p, e in entries.items():
        v = {k: e[k] for k in FIELDS if k in e}
        if e["type"] == "dir":
            v.pop("size", None)  # a directory's size is btrfs's sum of names on both; nlink is 1 on both
        if e["type"] == "file":
            v["sha256"] = hashes[p][1]
        out[p] = v
    return out, {p: e["ino"] for p, e in entries.items()}


def differences(want, got, limit=30):
    problems = ["missing %r" % p for p in sorted(set(want) - set(got))]
    problems += ["unexpected %r" % p for p in sorted(set(got) - set(want))]
    for p in sorted(set(want) & set(got)):
        if want[p] != got[p]:
            diff = {k: (want[p].get(k), got[p].get(k)) for k in set(want[p]) | set(got[p])
                    if want[p].get(k) != got[p].get(k)}
            problems.append("%r: kernel/ubtrfs %r" % (p, diff))
    return problems[:limit]


def progs_check(img):
    cp = T.run(["btrfs", "check", "--readonly", str(img)], check=False, timeout=600)
    text = (cp.stdout + cp.stderr).decode("utf-8", "replace")
    assert cp.returncode == 0 and "no error found" in text, "btrfs check:\n" + text[-4000:]


def make_image(path, size=768 * MiB):
    with open(path, "wb") as f:
        f.truncate(size)
    T.run(["mkfs.btrfs", "-f", "-q", str(path)])


@pytest.mark.parametrize("seed", SEEDS)
def test_random_workload_like_the_kernel(ubtrfs_bin, scratch, seed):
    d = Path(scratch) / ("rw-%d" % seed)
    d.mkdir()
    kimg, uimg = d / "kernel.img", d / "ubtrfs.img"
    make_image(kimg)
    make_image(uimg)

    with T.mounted([kimg], d / "kmnt", readonly=False) as km:
        wk = W.Workload(km, seed, nodesize=16384, max_bytes=24 * MiB, max_file=2 * MiB, salt="rw",
                        xattr_grow=False)
        wk.run(NOPS, allowed=ALLOWED)
        kview, kinos = view(km)
    log = []
    with fuse_mounted(ubtrfs_bin, [uimg], d / "umnt", "rw", log=log) as um:
        wu = W.Workload(um, seed, nodesize=16384, max_bytes=24 * MiB, max_file=2 * MiB, salt="rw",
                        xattr_grow=False)
        wu.run(NOPS, allowed=ALLOWED)
        uview, _ = view(um)
    # the same operations, with the same results, one after the other
    for i, (a, b) in enumerate(zip(wk.op_log, wu.op_log)):
        assert a == b, "seed %d: operation %d differs:\n kernel %s\n ubtrfs %s\nbefore: %s" % (
            seed, i, a, b, "\n".join(wk.op_log[max(0, i - 8):i]))
    assert len(wk.op_log) == len(wu.op_log)
    problems = differences(kview, uview)
    assert not problems, "seed %d: the trees differ:\n  %s" % (seed, "\n  ".join(problems))
    bad = [ln for ln in log[0].splitlines() if ": error:" in ln or "Sanitizer" in ln]
    assert not bad, log[0][-3000:]

    # what ubtrfs left on disk: btrfs check is clean, and the kernel reads the same tree, inode numbers too
    progs_check(uimg)
    with T.mounted([uimg], d / "kmnt2", readonly=True) as km2:
        kview2, kinos2 = view(km2)
    problems = differences(kview, kview2)
    assert not problems, "seed %d: the kernel's mount of the ubtrfs image differs:\n  %s" % (
        seed, "\n  ".join(problems))
    wrong = sorted(p for p in kinos if kinos2.get(p) != kinos[p])
    assert not wrong, "seed %d: inode numbers differ from the kernel's: %r" % (
        seed, [(p, kinos[p], kinos2.get(p)) for p in wrong[:10]])
    T.rmtree(d)


def _setid_after_write(mnt):
    """A set-user-ID, group-executable set-group-ID file written by its owner (no CAP_FSETID): the
    mode `stat -c %a` reports right after (statx asking the mode alone), then again in full."""
    f = os.path.join(mnt, "setid")
    os.chmod(mnt, 0o777)
    with open(f, "wb") as fh:
        fh.write(b"0123456789")
    os.chown(f, 1000, 1000)
    os.chmod(f, 0o6775)
    T.run(["setpriv", "--reuid=1000", "--regid=1000", "--clear-groups", "sh", "-c", "echo more >> '%s'" % f])
    quick = T.run(["stat", "-c", "%a", f]).stdout.decode().strip()
    return quick, oct(os.stat(f).st_mode & 0o7777)


def test_write_drops_setid_bits_like_the_kernel(ubtrfs_bin, scratch):
    """The mount asks the kernel for FUSE_HANDLE_KILLPRIV_V2 (no security.capability round trip
    before each write): the set-id bits a write drops are then the daemon's to drop, and the
    kernel's cached mode must not outlive the change (the daemon tells it)."""
    d = Path(scratch) / "setid-write"
    d.mkdir()
    # uid 1000 must reach the mounts below
    os.chmod(scratch, os.stat(scratch).st_mode | 0o011)
    os.chmod(d, 0o755)
    kimg, uimg = d / "k.img", d / "u.img"
    make_image(kimg, 256 * MiB)
    make_image(uimg, 256 * MiB)
    with T.mounted([kimg], d / "kmnt", readonly=False) as km:
        want = _setid_after_write(km)
    with fuse_mounted(ubtrfs_bin, [uimg], d / "umnt", "rw") as um:
        got = _setid_after_write(um)
    assert want == ("775", "0o775"), want
    assert got == want
    progs_check(uimg)
    T.rmtree(d)
