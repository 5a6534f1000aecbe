# SPDX-License-Identifier: MIT
"""The write engine's own reads are checked reads (issue 28, "the writer").

A write that covers part of a sector keeps the rest of that sector from the file, so the engine reads
it first. That read must be the readers' read: checked against the checksums, a bad copy skipped for a
good one, EIO when no copy is good. A read that trusts the first copy would copy damaged bytes into
the new sector under fresh, valid checksums, and the damage could never be seen again.

The kernel is the oracle: after the engine's write the kernel's mount must read the file as it was
with the new bytes in place, and btrfs check must pass.
"""

import os
import random
from pathlib import Path

import pytest

import ubtrfs_testlib as T

MiB = T.MiB
SECTOR = 4096
INO = 257


@pytest.fixture(scope="module")
def driver():
    return T.test_tool("fileapi_driver")


def stream(seed, n):
    """The bytes fileapi_driver's `write PATH OFF LEN SEED` writes (its xorshift stream)."""
    st = seed | 1
    out = bytearray()
    m = (1 << 64) - 1
    for _ in range(n):
        st ^= (st << 13) & m
        st ^= st >> 7
        st ^= (st << 17) & m
        out.append((st >> 24) & 0xFF)
    return bytes(out)


def make_dup_image(d, data):
    """A DUP/DUP image whose /f (inode 257) holds `data` in one regular extent, written by the kernel."""
    img = d / "dup.img"
    with open(img, "wb") as f:
        f.truncate(256 * MiB)
    T.run(["mkfs.btrfs", "-f", "-q", "-m", "dup", "-d", "dup", str(img)])
    with T.mounted([img], d / "mnt", readonly=False) as m:
        with open(os.path.join(m, "f"), "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    text = T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "5", str(img)]).stdout.decode()
    ext = T.file_extents(text, INO)
    assert len(ext) == 1 and ext[0][0] == 0 and ext[0][5] == 0, "expected one plain extent: %r" % (ext,)
    return img, ext[0][1] + ext[0][3]


def run_script(driver, img, lines):
    script = img.parent / "script.txt"
    script.write_text("\n".join(lines) + "\n")
    return T.run([str(driver), "--script", str(script), str(img)], check=False, timeout=300)


def kernel_read(img, mnt):
    with T.mounted([img], mnt, readonly=True) as m:
        with open(os.path.join(m, "f"), "rb") as f:
            return f.read()


def progs_check(img):
    cp = T.run(["btrfs", "check", "--readonly", str(img)], check=False, timeout=300)
    text = (cp.stdout + cp.stderr).decode("utf-8", "replace")
    assert cp.returncode == 0 and "no error found" in text, "btrfs check:\n" + text[-4000:]


@pytest.mark.parametrize("bad_mirror", [1, 2])
def test_partial_write_over_one_bad_copy(driver, scratch, bad_mirror):
    """One copy of the sector is bad: the 10-byte write keeps the good copy's bytes around it."""
    d = Path(scratch) / ("writer-onebad-%d" % bad_mirror)
    d.mkdir()
    data = random.Random(11).randbytes(4 * SECTOR)
    img, logical = make_dup_image(d, data)
    copies = dict(T.map_logical(img, logical, SECTOR))
    assert sorted(copies) == [1, 2], copies
    T.overwrite(img, copies[bad_mirror], random.Random(12).randbytes(SECTOR))

    cp = run_script(driver, img, ["write /f 100 10 7"])
    assert cp.returncode == 0, "the write failed:\n" + cp.stderr.decode("utf-8", "replace")[-3000:]
    err = cp.stderr.decode("utf-8", "replace")
    if bad_mirror == 1:
        # the first copy read is the bad one: the engine names it, as every reader does
        assert "checksum mismatch" in err and "ino %d" % INO in err, err[-3000:]

    want = bytearray(data)
    want[100:110] = stream(7, 10)
    got = kernel_read(img, d / "mnt")
    assert got == bytes(want), "the file differs from the good copy with the new bytes: first difference at %d" % (
        next(i for i in range(len(want)) if i >= len(got) or got[i] != want[i]))
    progs_check(img)
    T.rmtree(d)


def test_partial_write_over_no_good_copy(driver, scratch):
    """Both copies bad: the write fails with EIO and changes nothing."""
    d = Path(scratch) / "writer-bothbad"
    d.mkdir()
    data = random.Random(21).randbytes(4 * SECTOR)
    img, logical = make_dup_image(d, data)
    copies = dict(T.map_logical(img, logical + SECTOR, SECTOR))
    rng = random.Random(22)
    for phys in copies.values():
        T.overwrite(img, phys, rng.randbytes(SECTOR))

    # the sector at file offset 4096 has no good copy; the write into sector 0 still works
    cp = run_script(driver, img, ["!5 write /f 4200 10 7", "write /f 100 10 9"])
    assert cp.returncode == 0, "unexpected result:\n" + cp.stderr.decode("utf-8", "replace")[-3000:]
    want = bytearray(data)
    want[100:110] = stream(9, 10)
    with T.mounted([img], d / "mnt", readonly=True) as m:
        fd = os.open(os.path.join(m, "f"), os.O_RDONLY)
        try:
            for off in range(0, len(data), SECTOR):
                if off == SECTOR:
                    with pytest.raises(OSError):
                        os.pread(fd, SECTOR, off)
                else:
                    assert os.pread(fd, SECTOR, off) == bytes(want[off:off + SECTOR]), "page at %d" % off
        finally:
            os.close(fd)
    progs_check(img)
    T.rmtree(d)
