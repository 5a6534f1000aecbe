# SPDX-License-Identifier: MIT
"""The round trip kernel writes / ubtrfs writes / kernel reads, on every profile (issue 30).

For data single, DUP, RAID0, RAID1, RAID1C3, RAID10, RAID5 and RAID6 (metadata paired as btrfs
pairs them: DUP on one device, RAID1, RAID1C3 beside RAID1C3 and RAID6), and with compression
(zstd and lzo on both mounts), on small images made by mkfs.btrfs:

  1. the kernel mounts the devices read-write and a seeded random workload (workload.py: creates,
     buffered and O_DIRECT writes, truncates, holes, fallocate, renames, links, symlinks, device
     nodes, xattrs, attributes, directories, fsyncs) builds a tree; btrfs check is clean;
  2. `ubtrfs mount` shows exactly that tree (every path, type, mode, owner, size, link count,
     device numbers, symlink target, xattrs and the bytes of every file), then another workload
     changes it through the mount; what the mount shows at the end is kept; btrfs check is clean
     after the unmount;
  3. the kernel mounts the devices again and shows exactly what the ubtrfs mount showed.

Budget: a few seconds per configuration under ASan; UBTRFS_LONG_TESTS runs more operations and a
second seed.
"""

import os
from pathlib import Path

import pytest

import ubtrfs_testlib as T
import workload as W
from test_mount import fuse_mounted
from test_enospc import progs_check

MiB = T.MiB
LONG = T.LONG_TESTS
NOPS = 300 if LONG else 120
SEEDS = [1, 2] if LONG else [1]

# name: (devices, data profile, metadata profile, mount options of both mounts)
CONFIGS = {
    "single": (1, "single", "dup", ""),
    "dup": (1, "dup", "dup", ""),
    "raid0": (2, "raid0", "raid1", ""),
    "raid1": (2, "raid1", "raid1", ""),
    "raid1c3": (3, "raid1c3", "raid1c3", ""),
    "raid10": (4, "raid10", "raid1", ""),
    "raid5": (3, "raid5", "raid1", ""),
    "raid6": (4, "raid6", "raid1c3", ""),
    "raid1-zstd": (2, "raid1", "raid1", "compress=zstd"),
    "raid5-lzo": (3, "raid5", "raid1", "compress-force=lzo"),
}

# what the FUSE mount does as the kernel's does (test_mount_rw.py says why the rest is left out)
ALLOWED = ("create", "write", "small_after_hole", "truncate", "punch", "fallocate", "rename", "link",
           "unlink", "symlink", "mknod", "xattr", "attr", "mkdir", "rmdir", "fsync")
FIELDS = ("type", "mode", "uid", "gid", "size", "nlink", "rdev_major", "rdev_minor", "target", "xattrs")


def view(mnt):
    entries = T.walk_tree(mnt, btrfs=False)
    hashes = T.hash_files(mnt, entries)
    out = {}
    for p, e in entries.items():
        v = {k: e[k] for k in FIELDS if k in e}
        if e["type"] == "dir":
            v.pop("size", None)
        if e["type"] == "file":
            v["sha256"] = hashes[p][1]
        out[p] = v
    return out


def differences(want, got, limit=20):
    problems = ["missing %r" % p for p in sorted(set(want) - set(got))]
    problems += ["unexpected %r" % p for p in sorted(set(got) - set(want))]
    for p in sorted(set(want) & set(got)):
        if want[p] != got[p]:
            problems.append("%r: %r" % (p, {k: (want[p].get(k), got[p].get(k)) for k in set(want[p]) | set(got[p])
                                            if want[p].get(k) != got[p].get(k)}))
    return problems[:limit]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", list(CONFIGS))
def test_round_trip(ubtrfs_bin, scratch, name, seed):
    ndev, data, meta, opts = CONFIGS[name]
    d = Path(scratch) / ("profiles-%s-%d" % (name, seed))
    d.mkdir()
    size = (256 if data == "dup" else 160) * MiB
    imgs = []
    for i in range(ndev):
        p = d / ("dev%d.img" % i)
        with open(p, "wb") as f:
            f.truncate(size)
        imgs.append(p)
    T.run(["mkfs.btrfs", "-f", "-q", "-d", data, "-m", meta, *imgs])

    # 1. the kernel writes
    with T.mounted(imgs, d / "kmnt", options=opts, readonly=False) as km:
        wk = W.Workload(km, seed, max_bytes=12 * MiB, max_file=2 * MiB, salt="kernel-" + name)
        wk.run(NOPS, allowed=ALLOWED)
        kview = view(km)
    progs_check(imgs)

    # 2. ubtrfs shows it, then changes it
    log = []
    with fuse_mounted(ubtrfs_bin, imgs, d / "umnt", ",".join(["rw"] + ([opts] if opts else [])), log=log) as um:
        first = view(um)
        problems = differences(kview, first)
        assert not problems, "%s: the ubtrfs mount does not show what the kernel wrote:\n  %s" % (
            name, "\n  ".join(problems))
        wu = W.Workload(um, seed, max_bytes=12 * MiB, max_file=2 * MiB, salt="ubtrfs-" + name)
        wu.run(NOPS, allowed=ALLOWED)
        uview = view(um)
    bad = [ln for ln in log[0].splitlines() if ": error:" in ln]
    assert not bad, "%s: the ubtrfs mount logged errors:\n%s" % (name, "\n".join(bad[:20]))
    progs_check(imgs)

    # 3. the kernel reads what ubtrfs left
    with T.mounted(imgs, d / "kmnt2", readonly=True) as km2:
        kview2 = view(km2)
    problems = differences(uview, kview2)
    assert not problems, "%s: the kernel's mount differs from what the ubtrfs mount showed:\n  %s" % (
        name, "\n  ".join(problems))
    print("%s seed %d: kernel %d ops, ubtrfs %d ops, %d entries" % (name, seed, wk.nops, wu.nops, len(uview)))
    T.run(["btrfs", "device", "scan", "--forget"], check=False)
    T.rmtree(d)
