# SPDX-License-Identifier: MIT
"""File data at the edges of the format: what a compressed stream does not
cover, sizes and sums the format forbids, and files far larger than their
extents.

One kernel-made image holds the files; each test copies it, changes a few
fields of one leaf (the block checksum recomputed so the kernel and ubtrfs both
read it), and compares ubtrfs with the kernel's read-only mount of the same
copy where the kernel can read it, or checks the named error where the image
contradicts the format.
"""
import os
import re
import subprocess
import time

import pytest

import multidev_lib as M
import ubtrfs_testlib as T

# one pytest-xdist worker runs the module: its base image is built once
pytestmark = pytest.mark.xdist_group("data_limits")

MiB = T.MiB
IMG_SIZE = 256 * MiB
BIG_SIZE = 16 * MiB
SPARSE_SIZE = 1 << 60

# struct btrfs_file_extent_item / btrfs_inode_item field offsets
FE_RAM, FE_COMP, FE_TYPE, FE_DISK, FE_DISK_LEN, FE_OFF, FE_NUM = 8, 16, 20, 21, 29, 37, 45
INODE_SIZE = 16
HEADER = 101
ITEM = 25

crc32c = T.crc32c


def text_and_noise(n, seed):
    """Text with random stretches: zstd blocks with literals as well as matches."""
    import random
    rng = random.Random(seed)
    out = bytearray(T.text_bytes(rng, n))
    for i in range(0, n - 64, 997):
        out[i:i + 64] = rng.randbytes(64)
    return bytes(out[:n])


class Base:
    def __init__(self, work, image, inos, nodesize, chunks):
        self.work, self.image, self.inos, self.nodesize, self.chunks = work, image, inos, nodesize, chunks
        self.cache = {}

    def fs_dump(self, image=None):
        return T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "5",
                      str(image or self.image)]).stdout.decode("utf-8", "replace")

    def extents(self, name):
        return sorted(T.file_extents(self.fs_dump(), self.inos[name]))

    def kernel_bytes(self, name):
        """The kernel's read of the untouched image (cached: a mount costs seconds)."""
        if name not in self.cache:
            data, err = kernel_read(self, self.image, name)
            assert err is None, "the kernel cannot read /%s of the untouched image" % name
            self.cache[name] = data
        return self.cache[name]


@pytest.fixture(scope="module")
def base(scratch, ubtrfs_bin):
    work = os.path.join(scratch, "data_limits")
    os.makedirs(work, exist_ok=True)
    img = os.path.join(work, "base.img")
    with open(img, "wb") as f:
        f.truncate(IMG_SIZE)
    T.run(["mkfs.btrfs", "-q", "-f", img])
    import random
    rng = random.Random(61)
    # uncompressed files first, then the zstd ones under compress-force
    with T.mounted([img], os.path.join(work, "mnt"), readonly=False) as mnt:
        T._write(os.path.join(mnt, "big"), rng.randbytes(BIG_SIZE))
        T._write(os.path.join(mnt, "sparse"), rng.randbytes(5000))
        os.truncate(os.path.join(mnt, "sparse"), SPARSE_SIZE)
    with T.mounted([img], os.path.join(work, "mnt"), options="compress-force=zstd", readonly=False) as mnt:
        # ram_bytes is the length rounded up to a sector; the frame holds the length
        T._write(os.path.join(mnt, "zreg"), text_and_noise(40000, 1))
        T._write(os.path.join(mnt, "zbig"), text_and_noise(70000, 2))
        T._write(os.path.join(mnt, "zinl"), text_and_noise(1000, 3))
        inos = {n: os.stat(os.path.join(mnt, n)).st_ino for n in ("big", "sparse", "zreg", "zbig", "zinl")}
    sup = T.parse_dump_super(T.run(["btrfs", "inspect-internal", "dump-super", img]).stdout.decode())
    chunks = M.parse_chunks(T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "chunk", img]).stdout.decode())
    b = Base(work, img, inos, int(sup["nodesize"]), chunks)
    # the premises: zstd extents, one of them inline
    dump = b.fs_dump()
    for n in ("zreg", "zbig"):
        ext = b.extents(n)
        assert len(ext) == 1 and ext[0][5] == 3, "%s: extents %r" % (n, ext)
    assert re.search(r"key \(%d EXTENT_DATA 0\)[^\n]*\n[^\n]*\n\s*inline extent data size \d+ ram_bytes 1000 "
                     r"compression 3" % inos["zinl"], dump), "zinl is not a zstd inline extent"
    yield b
    T.run(["btrfs", "device", "scan", "--forget"], check=False)
    T.rmtree(work)


def patch_leaf(base, image, changes):
    """Apply changes {(ino, type, offset): [(field offset, size, value)]} to the items
    of the fs tree leaves holding those keys, recompute each block's checksum and
    write every copy of it."""
    dump = base.fs_dump(image)
    leaves = T.leaves_of(dump)
    todo = dict(changes)
    with open(image, "r+b") as f:
        for bytenr, _, keys in leaves:
            mine = {k: v for k, v in todo.items() if "%d %s %d" % k in keys}
            if not mine:
                continue
            copies = [p for _, p in M.chunk_of(base.chunks, bytenr).copies(bytenr)]
            f.seek(copies[0])
            blk = bytearray(f.read(base.nodesize))
            nritems = int.from_bytes(blk[96:100], "little")
            for i in range(nritems):
                at = HEADER + i * ITEM
                objectid = int.from_bytes(blk[at:at + 8], "little")
                typ = {1: "INODE_ITEM", 108: "EXTENT_DATA"}.get(blk[at + 8])
                off = int.from_bytes(blk[at + 9:at + 17], "little")
                key = (objectid, typ, off)
                if key not in mine:
                    continue
                data = HEADER + int.from_bytes(blk[at + 17:at + 21], "little")
                for field, size, value in mine.pop(key):
                    blk[data + field:data + field + size] = value.to_bytes(size, "little")
                del todo[key]
            assert not mine, "keys %r not found in leaf %d" % (mine, bytenr)
            blk[0:4] = crc32c(bytes(blk[32:])).to_bytes(4, "little")
            for p in copies:
                f.seek(p)
                f.write(blk)
    assert not todo, "keys %r not in any leaf" % todo


def crafted(base, name, changes):
    img = os.path.join(base.work, name + ".img")
    T.copy_sparse(base.image, img)
    patch_leaf(base, img, changes)
    return img


def kernel_read(base, image, name, length=None):
    """(bytes, None) as the kernel reads /name on a read-only mount, or (None, errno)."""
    T.run(["btrfs", "device", "scan", "--forget"], check=False)
    with T.mounted([image], os.path.join(base.work, "mnt_k")) as mnt:
        try:
            with open(os.path.join(mnt, name), "rb") as f:
                return (f.read() if length is None else f.read(length)), None
        except OSError as e:
            return None, e.errno


def ub_cat(image, name, timeout=120):
    return T.ubtrfs("cat", "--path", "/" + name, str(image), timeout=timeout)


def inode_key(base, name):
    return (base.inos[name], "INODE_ITEM", 0)


def extent_key(base, name, off=0):
    return (base.inos[name], "EXTENT_DATA", off)


# ---------------------------------------------------------------------------
# 1. bytes of the decompressed range past the end of the stream


ZSTD_CASES = {
    # the file grows to its extent's ram_bytes: 960 bytes past the 40000 the frame holds
    "regular_to_ram_bytes": ("zreg", lambda b: {inode_key(b, "zreg"): [(INODE_SIZE, 8, 40960)]}),
    # the extent claims the largest compressed size, the frame covers 70000 bytes of it
    "regular_to_128k": ("zbig", lambda b: {
        inode_key(b, "zbig"): [(INODE_SIZE, 8, 131072)],
        extent_key(b, "zbig"): [(FE_RAM, 8, 131072), (FE_NUM, 8, 131072)]}),
    # an inline extent whose ram_bytes exceeds its 1000-byte frame
    "inline_to_3000": ("zinl", lambda b: {
        inode_key(b, "zinl"): [(INODE_SIZE, 8, 3000)],
        extent_key(b, "zinl"): [(FE_RAM, 8, 3000)]}),
}


@pytest.mark.parametrize("case", sorted(ZSTD_CASES))
def test_zstd_tail_reads_like_kernel(base, case):
    name, changes = ZSTD_CASES[case]
    img = crafted(base, "zstd_" + case, changes(base))
    try:
        kdata, kerr = kernel_read(base, img, name)
        cp = ub_cat(img, name)
        err = cp.stderr.decode("utf-8", "replace")
        if kerr is not None:
            assert cp.returncode == 1 and "error:" in err, \
                "the kernel cannot read /%s (errno %d); ubtrfs: %s" % (name, kerr, T.describe(cp))
            return
        assert cp.returncode == 0, T.describe(cp)
        assert len(cp.stdout) == len(kdata), "%d bytes, kernel %d" % (len(cp.stdout), len(kdata))
        if cp.stdout != kdata:
            first = next(i for i in range(len(kdata)) if cp.stdout[i] != kdata[i])
            pytest.fail("/%s differs from the kernel's read from byte %d: kernel %r ubtrfs %r" % (
                name, first, kdata[first:first + 16], cp.stdout[first:first + 16]))
    finally:
        os.unlink(img)


# ---------------------------------------------------------------------------
# 2./3. sizes and sums the format does not allow: one named error, then stop


def _last_extent(base, name):
    return base.extents(name)[-1]


def absurd_cases(b):
    big_last, big_disk = _last_extent(b, "big")[:2]
    return {
        # 2^60 bytes of file from an extent of a few MiB, and a size to match
        "num_bytes_2p60": ("big", big_last, {
            inode_key(b, "big"): [(INODE_SIZE, 8, 1 << 60)],
            extent_key(b, "big", big_last): [(FE_NUM, 8, 1 << 60)]}),
        # a disk extent larger than every device
        "disk_num_bytes_2p60": ("big", big_last, {
            extent_key(b, "big", big_last): [(FE_DISK_LEN, 8, 1 << 60), (FE_RAM, 8, 1 << 60)]}),
        # disk_bytenr + offset wraps around 2^64 to the start of the address space
        # (offset + num_bytes does not: the tree checker's own overflow test passes)
        "bytenr_plus_offset_wraps": ("big", big_last, {
            extent_key(b, "big", big_last): [(FE_OFF, 8, (1 << 64) - big_disk + 4096)]}),
        # a compressed extent decompressing to 2^60 bytes
        "compressed_ram_2p60": ("zbig", 0, {
            extent_key(b, "zbig"): [(FE_RAM, 8, 1 << 60), (FE_NUM, 8, 1 << 60)],
            inode_key(b, "zbig"): [(INODE_SIZE, 8, 1 << 60)]}),
        # a compressed inline extent decompressing to 2^40 bytes
        "inline_ram_2p40": ("zinl", 0, {
            extent_key(b, "zinl"): [(FE_RAM, 8, 1 << 40)],
            inode_key(b, "zinl"): [(INODE_SIZE, 8, 1 << 40)]}),
    }


ABSURD = ["num_bytes_2p60", "disk_num_bytes_2p60", "bytenr_plus_offset_wraps", "compressed_ram_2p60",
          "inline_ram_2p40"]


@pytest.mark.parametrize("case", ABSURD)
def test_absurd_extent_is_one_named_error(base, case):
    name, key_off, changes = absurd_cases(base)[case]
    img = crafted(base, "absurd_" + case, changes)
    try:
        t0 = time.monotonic()
        cp = ub_cat(img, name, timeout=60)
        took = time.monotonic() - t0
        err = cp.stderr.decode("utf-8", "replace")
        assert cp.returncode == 1, T.describe(cp)
        assert "Sanitizer" not in err and "runtime error" not in err, err
        named = [l for l in err.splitlines() if "corrupt file extent item" in l]
        assert len(named) == 1, "expected the extent named once:\n%s" % err[-3000:]
        assert "ino %d " % base.inos[name] in named[0] and \
            "EXTENT_DATA %d)" % key_off in named[0], named[0]
        assert len(err.splitlines()) <= 3, "the error repeats:\n%s" % err[-3000:]
        assert took < 30, "cat took %.1f s" % took
        # everything before the corrupt extent is the file's own bytes
        good = base.kernel_bytes(name)
        assert cp.stdout == good[:key_off], \
            "%d bytes out, expected the %d before the extent" % (len(cp.stdout), key_off)
    finally:
        os.unlink(img)


# ---------------------------------------------------------------------------
# huge files that are mostly hole, and one error over a large bad range


def test_huge_sparse_file_streams(base, ubtrfs_bin):
    """i_size 2^60 with one small extent: reading it is a hole at the speed of
    the pipe, and the first bytes equal the kernel's."""
    want = 128 * MiB
    kdata, kerr = kernel_read(base, base.image, "sparse", want)
    assert kerr is None and len(kdata) == want
    t0 = time.monotonic()
    p = subprocess.Popen([str(ubtrfs_bin), "cat", "--path", "/sparse", str(base.image)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        got = bytearray()
        while len(got) < want:
            chunk = p.stdout.read(min(8 * MiB, want - len(got)))
            if not chunk:
                break
            got += chunk
        took = time.monotonic() - t0
        p.stdout.close()
        rc = p.wait(timeout=30)
        err = p.stderr.read().decode("utf-8", "replace")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert bytes(got) == kdata, "the first %d MiB differ from the kernel's (%d bytes read)" % (
        want // MiB, len(got))
    assert took < 40, "%d MiB of a sparse file took %.1f s" % (want // MiB, took)
    # it ends on the closed pipe, not on an error of its own
    assert rc in (-13, 2), "exit %d: %s" % (rc, err)
    assert "Sanitizer" not in err and "runtime error" not in err, err


def test_bad_data_over_many_chunks_reported_once(base):
    """Garbled data over 12 MiB of one file: cat reads in 4 MiB pieces, and each
    bad range is reported once, its continuations counted."""
    ext = [e for e in base.extents("big") if e[1]]
    lo, hi = 2 * MiB, 14 * MiB
    img = os.path.join(base.work, "garbled.img")
    T.copy_sparse(base.image, img)
    try:
        with open(img, "r+b") as f:
            for foff, disk, _, eoff, num, _ in ext:
                s, e = max(foff, lo), min(foff + num, hi)
                if s >= e:
                    continue
                logical = disk + eoff + (s - foff)
                phys = M.chunk_of(base.chunks, logical).copies(logical)[0][1]
                f.seek(phys)
                old = f.read(e - s)
                f.seek(phys)
                f.write(bytes(x ^ 0x5A for x in old))
        good = base.kernel_bytes("big")
        cp = ub_cat(img, "big")
        err = cp.stderr.decode("utf-8", "replace")
        assert cp.returncode == 1, T.describe(cp)
        assert cp.stdout == good[:lo] + bytes(hi - lo) + good[hi:], "output besides the bad range differs"
        overlapped = sum(1 for foff, _, _, _, num, _ in ext if foff < hi and foff + num > lo)
        # the reports of lost data (errors); the warnings about each bad copy name the file too
        per_file = [l for l in err.splitlines() if ": error:" in l and "ino %d " % base.inos["big"] in l]
        assert 1 <= len(per_file) <= overlapped, \
            "%d extents overlap the bad range, %d messages:\n%s" % (overlapped, len(per_file), err[-3000:])
        assert T.mentions_number(err, lo), err[-3000:]
        # an extent whose bad part crosses a 4 MiB read boundary is met by two reads
        crossing = [foff for foff, _, _, _, num, _ in ext
                    if max(foff, lo) < min(foff + num, hi) and
                    max(foff, lo) // (4 * MiB) != (min(foff + num, hi) - 1) // (4 * MiB)]
        if crossing:
            assert "more like this" in err, err[-3000:]
    finally:
        os.unlink(img)
