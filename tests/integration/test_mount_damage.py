# SPDX-License-Identifier: MIT
"""What the mount does with a bad data sector while it serves reads: the reader gets the good
copy, or EIO for exactly the pages no copy holds (as on the kernel's mount), and the daemon's log
(stderr with -f) names what was wrong: the copy's device and physical address and the file's
inode and offset; for data no copy holds, the inode, offset and logical address."""

import errno
import os
import random

import ubtrfs_testlib as T
from test_damage import _random_file_victim, image_copy  # noqa: F401 (image_copy is a fixture)
from test_mount import fuse_mounted

SECTOR = 4096


def _pages(path, size):
    """Each 4 KiB page of the file read on its own: its bytes, or the errno of the read."""
    out = []
    fd = os.open(path, os.O_RDONLY)
    try:
        for off in range(0, size, SECTOR):
            try:
                out.append(os.pread(fd, SECTOR, off))
            except OSError as e:
                out.append(e.errno)
    finally:
        os.close(fd)
    return out


def test_mount_bad_data_sector(ubtrfs_bin, factory, image_copy):  # noqa: F811
    image, devs = image_copy("kernel-dup")
    path, data, (foff, disk_bytenr, _, ext_off, _, _) = _random_file_victim(factory, image, False)
    ino = factory.view(image).entries[path]["ino"]
    bad_off = 3 * SECTOR
    logical = disk_bytenr + ext_off + bad_off
    where = T.find_bytes(devs, data[bad_off:bad_off + SECTOR])
    assert len(where) == 2, "expected the sector in both DUP copies, found %r" % (where,)
    rng = random.Random(5)

    # one copy bad, the one read first (copy 1 as btrfs-map-logical numbers them): the file reads
    # whole from the other; the log names the bad copy
    first = dict(T.map_logical(devs[0], logical, SECTOR))[1]
    assert (devs[0], first) in where, (first, where)
    dev, phys = devs[0], first
    T.overwrite(dev, phys, rng.randbytes(SECTOR))
    log = []
    with fuse_mounted(ubtrfs_bin, devs, factory.mountpoint(), log=log) as mnt:
        with open(mnt + path, "rb") as f:
            assert f.read() == data, "the mount did not serve the good copy"
    err = log[0]
    bad = [ln for ln in err.splitlines() if "checksum mismatch" in ln]
    assert bad and dev in bad[0], err[-3000:]
    assert T.mentions_number(bad[0], phys), "the log does not name physical %d: %s" % (phys, bad[0])
    # and the file whose bytes they are
    assert "ino %d file offset %d" % (ino, bad_off) in bad[0], bad[0]

    # both copies bad: EIO for that page alone, every other page exact; the log names the file
    dev2, phys2 = next(w for w in where if w != (dev, phys))
    T.overwrite(dev2, phys2, rng.randbytes(SECTOR))
    log = []
    with fuse_mounted(ubtrfs_bin, devs, factory.mountpoint(), log=log) as mnt:
        pages = _pages(mnt + path, len(data))
    for i, got in enumerate(pages):
        if i * SECTOR == bad_off:
            assert got == errno.EIO, "the bad page read as %r, not EIO" % (got if isinstance(got, int) else "bytes")
        else:
            assert got == data[i * SECTOR:(i + 1) * SECTOR], "page %d (file offset %d) differs" % (i, i * SECTOR)
    err = log[0]
    assert "ino %d " % ino in err, "the log does not name inode %d: %s" % (ino, err[-3000:])
    assert T.mentions_number(err, bad_off), "the log does not name file offset %d: %s" % (bad_off, err[-3000:])
    assert T.mentions_number(err, logical), "the log does not name logical %d: %s" % (logical, err[-3000:])
