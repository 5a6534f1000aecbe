# SPDX-License-Identifier: MIT
"""df on the FUSE mount: size, free and available blocks as the kernel's read-only mount
of the same image counts them (per profile, its global reserve taken off)."""

import os

import pytest

import ubtrfs_testlib as T
from test_mount import fuse_mounted

# RAID1 and RAID6 are in test_mount_df_after_writes; single data beside DUP metadata in
# test_mount.py's test_mount_blocks_and_df (read-only loops count new chunks as single anyway)
PROFILES = ["kernel-dup", "kernel-raid10", "kernel-raid5", "rootdir-mixed"]


def _kernel_df(devices, mnt):
    # writable loop devices, read-only mount: the kernel counts new chunks in the data
    # profile only for devices it could write (read-only loops would count them as single)
    with T.mounted(devices, mnt, options="ro,rescue=nologreplay", readonly=False) as kmnt:
        return os.statvfs(kmnt)


def _figures(st):
    return {k: getattr(st, k) for k in ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files",
                                        "f_ffree", "f_namemax")}


def _check(ubtrfs_bin, factory, devices, what):
    kern = _figures(_kernel_df(devices, factory.mountpoint()))
    with fuse_mounted(ubtrfs_bin, devices, factory.mountpoint()) as mnt:
        got = _figures(os.statvfs(mnt))
    assert got == kern, "%s: kernel %r\n  ubtrfs %r" % (what, kern, got)


@pytest.mark.parametrize("name", PROFILES)
def test_mount_df_profiles(ubtrfs_bin, factory, name):
    image = factory.image(name)
    _check(ubtrfs_bin, factory, image.devices, "%s (%s)" % (name, image.recipe))


@pytest.mark.parametrize("profile,ndev", [("raid1", 3), ("raid6", 4)])
def test_mount_df_after_writes(ubtrfs_bin, factory, profile, ndev):
    """Devices of unequal sizes, some data written and some deleted by the kernel: the free
    space of old chunks and the unallocated space of each device both count."""
    devs = []
    for i in range(ndev):
        p = factory.fresh_path("df-%s.%d.img" % (profile, i))
        with open(p, "wb") as f:
            f.truncate((256 + 64 * i) * T.MiB)
        devs.append(str(p))
    try:
        T.run(["mkfs.btrfs", "-f", "-q", "-d", profile, "-m", profile] + devs)
        with T.mounted(devs, factory.mountpoint(), readonly=False) as m:
            for i in range(40):
                with open(os.path.join(m, "f%d" % i), "wb") as f:
                    f.write(bytes([i]) * (i * 37000 + 1))
            with open(os.path.join(m, "big"), "wb") as f:
                f.write(b"\xa5" * (90 * T.MiB))
            T.run(["sync"])
            for i in range(0, 40, 3):
                os.unlink(os.path.join(m, "f%d" % i))
        _check(ubtrfs_bin, factory, devs, "%s on %d unequal devices after writes" % (profile, ndev))
    finally:
        for p in devs:
            os.unlink(p)
