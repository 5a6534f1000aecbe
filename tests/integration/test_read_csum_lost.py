# SPDX-License-Identifier: MIT
"""File data when the checksum tree cannot be read: an I/O error, never unverified bytes.

A kernel-made image whose checksum tree root is broken on every copy (found by the write-hole
bench: a RAID6 crash image missing two devices, where the kernel refuses to mount and ubtrfs's
mount returned file bytes it could not verify, with no error). A filesystem always has a
checksum tree, so one that cannot be read is no licence to skip the checks: `ubtrfs mount`
answers a read with EIO, `ubtrfs cat` writes zeros, says so and exits 1. A file the kernel made
with NODATASUM (chattr +C) has no checksums to look up and still reads.
"""
import errno
import os
import tempfile

import pytest

import craft as C
import ubtrfs_testlib as T
from test_mount import fuse_mounted

MiB = T.MiB
CSUM_TREE = 7


@pytest.fixture
def own(scratch):
    """The test's own folder (the session scratch holds the image factory's img/ and mnt/)."""
    d = tempfile.mkdtemp(prefix="csum-lost-", dir=scratch)
    yield d
    T.rmtree(d)


@pytest.fixture
def image(own):
    img = os.path.join(own, "csum-lost.img")
    with open(img, "wb") as f:
        f.truncate(256 * MiB)
    T.run(["mkfs.btrfs", "-q", "-f", img])
    with T.mounted([img], os.path.join(own, "kmnt"), readonly=False) as m:
        with open(os.path.join(m, "data"), "wb") as f:
            f.write(bytes(range(256)) * 512)
        os.mkdir(os.path.join(m, "nocow"))
        T.run(["chattr", "+C", os.path.join(m, "nocow")])
        with open(os.path.join(m, "nocow", "raw"), "wb") as f:
            f.write(b"n" * 40000)
    with C.Image(img) as im:
        root = im.tree_root(CSUM_TREE)[0]
    copies = T.map_logical(img, root, 16384)
    assert len(copies) >= 2, copies  # DUP metadata: both copies go
    for _, phys in copies:
        T.overwrite(img, phys + 100, b"\x5a" * 64)
    yield img
    os.unlink(img)


def test_mount_read_is_an_io_error(ubtrfs_bin, image, own):
    log = []
    with fuse_mounted(ubtrfs_bin, [image], os.path.join(own, "m"), "ro", log=log) as m:
        with pytest.raises(OSError) as e:
            with open(os.path.join(m, "data"), "rb") as f:
                f.read()
        assert e.value.errno == errno.EIO
        with open(os.path.join(m, "nocow", "raw"), "rb") as f:
            assert f.read() == b"n" * 40000
    assert "its checksums cannot be read" in "".join(log), log


def test_cat_writes_zeros_and_fails(ubtrfs_bin, image):
    cp = T.ubtrfs("cat", "--path", "/data", image)
    assert cp.returncode == 1, T.describe(cp)
    assert cp.stdout == b"\0" * (256 * 512), cp.stdout[:64]
    assert b"its checksums cannot be read" in cp.stderr, T.describe(cp)
