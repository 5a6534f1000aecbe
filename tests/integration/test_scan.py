# SPDX-License-Identifier: MIT
"""One device names the filesystem: the others are found among the block devices
(libblkid, then our own superblock checks); UUID= and LABEL=; `filesystem show`
without a device against `btrfs filesystem show`; forged and stale devices."""

import contextlib
import json
import os
import struct
import uuid

import pytest

import ubtrfs_testlib as T

MiB = 1024 * 1024


@pytest.fixture
def raid(tmp_path):
    """Two RAID1 and three RAID5 loop devices, each filesystem with a fresh label."""
    loops = []
    fss = []
    try:
        for profile, n in (("raid1", 2), ("raid5", 3)):
            devs = []
            for i in range(n):
                img = tmp_path / ("%s.%d.img" % (profile, i))
                with open(img, "wb") as f:
                    f.truncate(256 * MiB)
                devs.append(T.losetup_attach(str(img), False))
                loops.append(devs[-1])
            label = "scan-%s" % uuid.uuid4().hex[:12]
            T.run(["mkfs.btrfs", "-f", "-q", "-L", label, "-d", profile, "-m", profile, *devs])
            fsid = T.run(["blkid", "-s", "UUID", "-o", "value", devs[0]]).stdout.decode().strip()
            fss.append((profile, label, fsid, devs))
        yield fss
    finally:
        for d in loops:
            T.losetup_detach(d)


def ls(*args):
    cp = T.ubtrfs("ls", "-R", *args)
    assert cp.returncode == 0, T.describe(cp)
    return cp


def test_one_device_uuid_label(raid):
    for profile, label, fsid, devs in raid:
        whole = ls("--no-scan", *devs)
        for arg in ([devs[-1]], ["UUID=" + fsid], ["LABEL=" + label]):
            cp = ls(*arg)
            assert cp.stdout == whole.stdout, (profile, arg)
            assert b"missing" not in cp.stderr, T.describe(cp)
        cp = T.ubtrfs("ls", "-R", "--no-scan", devs[0])
        assert b"missing" in cp.stderr and b"--no-scan" in cp.stderr, T.describe(cp)


def test_filesystem_show_all(raid):
    cp = T.ubtrfs("filesystem", "show", "--json")
    assert cp.returncode in (0, 1), T.describe(cp)
    shown = {o["uuid"]: o for o in json.loads(cp.stdout)}
    ref = T.run(["btrfs", "filesystem", "show", "--raw"]).stdout.decode()
    for profile, label, fsid, devs in raid:
        o = shown[fsid]
        assert o["label"] == label and o["num_devices"] == len(devs)
        assert [(d["devid"], d["path"]) for d in o["devices"]] == [(i + 1, p) for i, p in enumerate(devs)]
        block = ref[ref.index(fsid):].split("Label:")[0]
        assert "FS bytes used %d\n" % o["bytes_used"] in block, block
        for d in o["devices"]:
            assert "devid %4d size %d used" % (d["devid"], d["size"]) in block
            assert "path %s\n" % d["path"] in block


def test_forged_and_stale(raid, tmp_path):
    profile, label, fsid, devs = raid[0]
    # a copy of devid 2 before more commits: stale
    stale = tmp_path / "stale.img"
    T.run(["dd", "if=" + devs[1], "of=%s" % stale, "bs=1M", "count=256", "status=none"])
    with _kmount(devs, tmp_path / "mnt") as m:
        with open(os.path.join(m, "after"), "wb") as f:
            f.write(b"new" * 1000)
    # a forged device: same fsid, a superblock whose checksum is right but whose content fails the checks
    forged = tmp_path / "forged.img"
    T.run(["dd", "if=" + devs[1], "of=%s" % forged, "bs=1M", "count=2", "status=none"])
    with open(forged, "r+b") as f:
        f.truncate(256 * MiB)
        f.seek(64 * 1024)
        sb = bytearray(f.read(4096))
        struct.pack_into("<Q", sb, 0x70, 3)   # total_bytes smaller than this device's dev item claims
        sb[0:4] = struct.pack("<I", T.crc32c(bytes(sb[32:])))
        f.seek(64 * 1024)
        f.write(sb)
    extra = []
    try:
        extra.append(T.losetup_attach(str(stale), True))
        extra.append(T.losetup_attach(str(forged), True))
        cp = ls(devs[0])
        assert b"/after" in cp.stdout, T.describe(cp)
        assert extra[1].encode() in cp.stderr and b"fails our checks" in cp.stderr, T.describe(cp)
        assert extra[0].encode() in cp.stderr and b"stale" in cp.stderr, T.describe(cp)
    finally:
        for d in extra:
            T.losetup_detach(d)


@contextlib.contextmanager
def _kmount(devs, mnt):
    """A read-write kernel mount of our own loop devices (they stay attached for the scan)."""
    os.makedirs(mnt, exist_ok=True)
    T.run(["mount", "-t", "btrfs", "-o", ",".join("device=%s" % d for d in devs), devs[0], str(mnt)])
    try:
        yield str(mnt)
    finally:
        T.umount(str(mnt))
        T.run(["btrfs", "device", "scan", "--forget"], check=False)
