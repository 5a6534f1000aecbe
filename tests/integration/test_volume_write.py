# SPDX-License-Identifier: MIT
"""The kernel agrees with ub_volume_write on RAID5 and RAID6.

mkfs.btrfs makes a RAID5 (3 devices) and a RAID6 (4 devices) data profile;
the kernel writes a nodatacow (so nodatasum) file; then a test tool
(tests/tools/ub_volwrite.c, built by make against the library under test)
rewrites ranges of the file's extent through ub_volume_write, ranges that
start and end inside full stripes so that the data strips they do not cover
are read back and P/Q recomputed. The referees:
  - the kernel's mount reads the new bytes;
  - the kernel's degraded mounts, with every device (RAID5) or every pair of
    devices (RAID6) left out in turn, read the same bytes, which it can only
    do by rebuilding the missing strips from the parity ubtrfs wrote;
  - btrfs check finds the metadata untouched, and btrfs scrub on the mounted
    filesystem reports no error.
"""

import array
import fcntl
import itertools
import os
import random
import struct
from pathlib import Path

import pytest

import ubtrfs_testlib as T

REPO = Path(__file__).resolve().parents[2]
IMAGE_SIZE = 256 << 20
FILE_SIZE = 1 << 20
FS_IOC_FIEMAP = 0xC020660B


def fiemap(path):
    """[(file offset, btrfs logical, length)] of a file's extents."""
    count = 32
    hdr = struct.pack("=QQIIII", 0, 0xFFFFFFFFFFFFFFFF, 1, 0, count, 0)  # FIEMAP_FLAG_SYNC
    buf = array.array("B", hdr + bytes(56 * count))
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.ioctl(fd, FS_IOC_FIEMAP, buf)
    finally:
        os.close(fd)
    raw = buf.tobytes()
    mapped = struct.unpack_from("=I", raw, 20)[0]
    out = []
    for i in range(mapped):
        fe_logical, fe_physical, fe_length = struct.unpack_from("=QQQ", raw, 32 + 56 * i)
        out.append((fe_logical, fe_physical, fe_length))
    return out


def logical_of(extents, off, length):
    for fl, phys, ln in extents:
        if fl <= off and off + length <= fl + ln:
            return phys + (off - fl)
    return None


@pytest.mark.parametrize("profile,ndevs", [("raid5", 3), ("raid6", 4)])
def test_kernel_reads_what_volume_write_wrote(scratch, profile, ndevs):
    work = Path(scratch) / ("volwrite-%s" % profile)
    work.mkdir()
    tool = str(T.test_tool("ub_volwrite"))
    images = []
    for i in range(ndevs):
        p = work / ("d%d.img" % i)
        with open(p, "wb") as f:
            f.truncate(IMAGE_SIZE)
        images.append(str(p))
    # metadata survives as many missing devices as the data profile does
    meta = "raid1" if profile == "raid5" else "raid1c3"
    T.run(["mkfs.btrfs", "-q", "-f", "-d", profile, "-m", meta] + images)
    rng = random.Random(profile)
    original = rng.randbytes(FILE_SIZE)
    mnt = work / "mnt"

    # the kernel writes the file: nodatacow, so no data checksums to contradict the rewrite
    with T.mounted(images, mnt, readonly=False) as m:
        path = os.path.join(m, "f")
        open(path, "wb").close()
        T.run(["chattr", "+C", path])
        with open(path, "r+b") as f:
            f.write(original)
            f.flush()
            os.fsync(f.fileno())
        extents = fiemap(path)
    assert extents, "no extents mapped for the test file"

    # ranges that begin and end inside full stripes (RAID5/3: 128 KiB, RAID6/4: 128 KiB)
    expected = bytearray(original)
    ranges = [(8192, 200 * 1024), (300 * 1024 + 4096, 64 * 1024), (600 * 1024, FILE_SIZE - 600 * 1024 - 12288)]
    for off, length in ranges:
        logical = logical_of(extents, off, length)
        if logical is None:
            pytest.skip("file range %d+%d is not one extent: %r" % (off, length, extents))
        data = rng.randbytes(length)
        src = work / "data.bin"
        src.write_bytes(data)
        cp = T.run([tool, str(logical), str(src)] + images)
        assert cp.stdout.decode().strip() == "skipped 0", T.describe(cp)
        expected[off:off + length] = data
    expected = bytes(expected)

    # the metadata is as the kernel left it
    loops = []
    try:
        for img in images:
            loops.append(T.losetup_attach(img, True))
        T.run(["btrfs", "device", "scan"] + loops)
        cp = T.run(["btrfs", "check", "--readonly", loops[0]], check=False)
    finally:
        for dev in reversed(loops):
            T.losetup_detach(dev)
    assert cp.returncode == 0, T.describe(cp)

    with T.mounted(images, mnt) as m:
        with open(os.path.join(m, "f"), "rb") as f:
            assert f.read() == expected, "the kernel reads other bytes than ub_volume_write wrote"

    # degraded: the missing strips come from the parity ubtrfs computed
    nparity = 1 if profile == "raid5" else 2
    for gone in itertools.combinations(range(ndevs), nparity):
        rest = [img for i, img in enumerate(images) if i not in gone]
        with T.mounted(rest, mnt, options="degraded") as m:
            with open(os.path.join(m, "f"), "rb") as f:
                got = f.read()
        assert got == expected, "degraded without devices %r: rebuilt bytes differ" % (gone,)

    # scrub: every copy and parity consistent (it would also repair silently, so it runs last)
    with T.mounted(images, mnt, readonly=False) as m:
        cp = T.run(["btrfs", "scrub", "start", "-B", m], check=False)
        out = cp.stdout.decode() + cp.stderr.decode()
        assert cp.returncode == 0, T.describe(cp)
        assert "no errors found" in out, out
