# SPDX-License-Identifier: MIT
"""File data through the read-write mount against an in-memory model (issue 30).

One file on a fresh ubtrfs mount takes a seeded random sequence of operations: pwrite (buffered
and, in the O_DIRECT runs, sector-aligned O_DIRECT), pread of a random range (through the page
cache and, in the O_DIRECT runs, O_DIRECT, which always reaches the daemon), ftruncate, fallocate
(mode 0, KEEP_SIZE, PUNCH_HOLE, ZERO_RANGE with and without KEEP_SIZE), shared mmap writes followed
by msync, now and then fsync, and every so often a read-back of the whole file (O_DIRECT where the
run allows it, so the bytes come from the daemon, else after the page cache was dropped). A model (a
bytearray and the file size) says what every read must return; the first difference stops the run
naming the operation, the offset and the operations before it.

Then the mount is unmounted, btrfs check judges the image, and the kernel's own mount of the image
must show the model's bytes. The same with compress=zstd (data that compresses, so extents really
are compressed) and nodatacow (writes in place).

Budget: 100,000 operations in total in the default run (buffered, with O_DIRECT and nodatacow
30,000 each, compress=zstd 10,000), about a minute under ASan; UBTRFS_LONG_TESTS runs more seeds
and operations per run.
"""

import ctypes
import errno
import mmap
import os
import random
from pathlib import Path

import pytest

import ubtrfs_testlib as T
from test_mount import fuse_mounted
from test_enospc import progs_check

MiB = T.MiB
KiB = 1024
LONG = T.LONG_TESTS

FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02
FALLOC_FL_ZERO_RANGE = 0x10
POSIX_FADV_DONTNEED = 4

SECTOR = 4096
MAX_SIZE = 1 * MiB + 5000  # the file stays small: a whole read-back is cheap

# (name, mount options, O_DIRECT used, kind of data written)
RUNS = [
    ("buffered", "", False, "random"),
    ("direct", "", True, "random"),
    ("zstd", "compress=zstd", True, "text"),
    ("nodatacow", "nodatacow", True, "random"),
]
NOPS = int(os.environ.get("UBTRFS_FILEDATA_OPS", 60000 if LONG else 25000))
# The compressed run costs about three times as much per operation (a write into a compressed
# extent rewrites it whole): in the quick run it takes 10,000 and the other three 30,000 each,
# 100,000 in all as before, the compressed run no longer the suite's longest.
RUN_NOPS = {} if LONG or "UBTRFS_FILEDATA_OPS" in os.environ else \
    {"buffered": 30000, "direct": 30000, "zstd": 10000, "nodatacow": 30000}
SEEDS = [1, 2, 3] if LONG else [1]

OPS = (
    ("write", 30), ("read", 22), ("truncate", 5), ("falloc", 4), ("falloc_keep", 3), ("punch", 5),
    ("zero", 3), ("zero_keep", 2), ("mmap", 2.5), ("seek", 3), ("fsync", 0.3), ("verify", 0.6),
)


def _fallocate(fd, mode, off, length):
    T.fallocate(fd, mode, off, length)


class Model:
    """What the file must hold: its bytes up to its size."""

    def __init__(self):
        self.data = bytearray()

    @property
    def size(self):
        return len(self.data)

    def write(self, off, b):
        if off > self.size:
            self.data.extend(bytes(off - self.size))
        self.data[off:off + len(b)] = b

    def truncate(self, n):
        if n < self.size:
            del self.data[n:]
        else:
            self.data.extend(bytes(n - self.size))

    def zero(self, off, length, keep_size):
        end = off + length
        if not keep_size and end > self.size:
            self.truncate(end)
        end = min(end, self.size)
        if off < end:
            self.data[off:end] = bytes(end - off)


class FileRun:
    def __init__(self, path, name, seed, direct, kind, nops):
        self.path = path
        self.rng = random.Random("filedata:%s:%d" % (name, seed))
        self.direct = direct
        self.kind = kind
        self.nops = nops
        self.model = Model()
        self.log = []
        self.counts = {}
        self.fd = os.open(str(path), os.O_RDWR | os.O_CREAT, 0o644)
        self.dfd = os.open(str(path), os.O_RDWR | os.O_DIRECT) if direct else -1
        # an aligned buffer for O_DIRECT
        self.dbuf = mmap.mmap(-1, MAX_SIZE + 2 * SECTOR)

    def close(self):
        os.close(self.fd)
        if self.dfd >= 0:
            os.close(self.dfd)
        self.dbuf.close()

    def note(self, text):
        self.log.append(text)
        if len(self.log) > 40:
            del self.log[:20]

    def fail(self, what, off, got, want):
        i = next((k for k in range(min(len(got), len(want))) if got[k] != want[k]), min(len(got), len(want)))
        raise AssertionError("%s: %s differs at file offset %d (got %d bytes, model %d; byte %r, model %r); "
                             "file size %d\nlast operations:\n  %s" % (
                                 self.path.name, what, off + i, len(got), len(want), got[i:i + 1], want[i:i + 1],
                                 self.model.size, "\n  ".join(self.log[-25:])))

    # ---------------------------------------------------------------- random choices

    def data(self, n):
        rng = self.rng
        if self.kind == "text" and rng.random() < 0.8:
            return T.text_bytes(rng, n)
        r = rng.random()
        if r < 0.1:
            return bytes([rng.randint(0, 255)]) * n
        return rng.randbytes(n)

    def length(self):
        r = self.rng.random()
        if r < 0.5:
            return self.rng.randint(1, 8 * KiB)
        if r < 0.85:
            return self.rng.randint(1, 64 * KiB)
        return self.rng.randint(64 * KiB, 300 * KiB)

    def offset(self):
        rng = self.rng
        size = self.model.size
        r = rng.random()
        if r < 0.1 or size == 0:
            return rng.choice((0, size)) if size < MAX_SIZE else 0
        if r < 0.2:
            return min(size + rng.randint(1, 200 * KiB), MAX_SIZE - 1)
        if r < 0.45:
            return rng.randint(0, size // SECTOR) * SECTOR
        return rng.randint(0, size)

    def span(self):
        off = self.offset()
        n = min(self.length(), MAX_SIZE - off)
        return off, max(n, 1)

    # ---------------------------------------------------------------- operations

    def op_write(self):
        off, n = self.span()
        if self.direct and self.rng.random() < 0.4:
            off -= off % SECTOR
            n = max(SECTOR, n - n % SECTOR)
            if off + n > MAX_SIZE:
                n = (MAX_SIZE - off) // SECTOR * SECTOR
            if n <= 0:
                return
            b = self.data(n)
            self.dbuf[0:n] = b
            got = os.pwrite(self.dfd, memoryview(self.dbuf)[:n], off)
            assert got == n, "short O_DIRECT write %d of %d" % (got, n)
            self.note("dwrite off %d len %d" % (off, n))
        else:
            b = self.data(n)
            got = os.pwrite(self.fd, b, off)
            assert got == n, "short write %d of %d" % (got, n)
            self.note("write off %d len %d" % (off, n))
        self.model.write(off, b)

    def op_read(self):
        size = self.model.size
        off = self.rng.randint(0, size + 100)
        n = self.rng.randint(1, 128 * KiB)
        want = bytes(self.model.data[off:off + n])
        if self.direct and self.rng.random() < 0.5:
            aoff = off - off % SECTOR
            an = (off + n - aoff + SECTOR - 1) // SECTOR * SECTOR
            got = os.preadv(self.dfd, [memoryview(self.dbuf)[:an]], aoff)
            raw = bytes(self.dbuf[:got])
            want = bytes(self.model.data[aoff:aoff + an])
            self.note("dread off %d len %d" % (aoff, an))
            if raw != want:
                self.fail("O_DIRECT read", aoff, raw, want)
            return
        got = os.pread(self.fd, n, off)
        self.note("read off %d len %d" % (off, n))
        if got != want:
            self.fail("read", off, got, want)

    def op_truncate(self):
        rng = self.rng
        size = self.model.size
        r = rng.random()
        if r < 0.15:
            n = 0
        elif r < 0.6 and size:
            n = rng.randint(0, size)
        elif r < 0.75:
            n = rng.randint(0, MAX_SIZE // SECTOR) * SECTOR
        else:
            n = rng.randint(0, MAX_SIZE)
        os.ftruncate(self.fd, n)
        self.model.truncate(n)
        self.note("truncate %d" % n)

    def _falloc(self, mode, name):
        off, n = self.span()
        try:
            _fallocate(self.fd, mode, off, n)
        except OSError as e:
            raise AssertionError("fallocate %s off %d len %d: %s" % (name, off, n, os.strerror(e.errno)))
        self.note("fallocate %s off %d len %d" % (name, off, n))
        return off, n

    def op_falloc(self):
        off, n = self._falloc(0, "0")
        if off + n > self.model.size:
            self.model.truncate(off + n)

    def op_falloc_keep(self):
        self._falloc(FALLOC_FL_KEEP_SIZE, "KEEP_SIZE")

    def op_punch(self):
        off, n = self._falloc(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, "PUNCH_HOLE")
        self.model.zero(off, n, True)

    def op_zero(self):
        off, n = self._falloc(FALLOC_FL_ZERO_RANGE, "ZERO_RANGE")
        self.model.zero(off, n, False)

    def op_zero_keep(self):
        off, n = self._falloc(FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, "ZERO_RANGE|KEEP_SIZE")
        self.model.zero(off, n, True)

    def op_mmap(self):
        size = self.model.size
        if size == 0:
            return self.op_write()
        rng = self.rng
        # a window of whole pages inside the file, a few writes into it, msync
        first = rng.randint(0, (size - 1) // mmap.PAGESIZE)
        pages = rng.randint(1, min(16, (size - 1) // mmap.PAGESIZE - first + 1))
        off = first * mmap.PAGESIZE
        length = min(pages * mmap.PAGESIZE, size - off)
        m = mmap.mmap(self.fd, length, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=off)
        try:
            for _ in range(rng.randint(1, 4)):
                a = rng.randint(0, length - 1)
                n = rng.randint(1, min(length - a, 6000))
                b = self.data(n)
                m[a:a + n] = b
                self.model.write(off + a, b)
            if m[0:length] != bytes(self.model.data[off:off + length]):
                self.fail("mmap view", off, m[0:length], bytes(self.model.data[off:off + length]))
            m.flush()  # msync(MS_SYNC): the pages reach the daemon as writes, then an fsync
        finally:
            m.close()
        self.note("mmap off %d len %d msync" % (off, length))

    def op_seek(self):
        # SEEK_DATA / SEEK_HOLE: what they skip must read as zeros; both stay within the file
        size = self.model.size
        off = self.rng.randint(0, size + 10)
        whence = self.rng.choice((os.SEEK_DATA, os.SEEK_HOLE))
        name = "SEEK_DATA" if whence == os.SEEK_DATA else "SEEK_HOLE"
        self.note("lseek %s %d" % (name, off))
        try:
            p = os.lseek(self.fd, off, whence)
        except OSError as e:
            assert e.errno == errno.ENXIO, "lseek %s %d: %s" % (name, off, os.strerror(e.errno))
            assert off >= size or (whence == os.SEEK_DATA and not any(self.model.data[off:])), \
                "lseek %s %d: ENXIO, but the file (size %d) has data after it" % (name, off, size)
            return
        assert off < size and off <= p <= size, "lseek %s %d -> %d, file size %d" % (name, off, p, size)
        if whence == os.SEEK_DATA and any(self.model.data[off:p]):
            raise AssertionError("lseek SEEK_DATA %d -> %d skips data at %d\nlast operations:\n  %s" % (
                off, p, off + next(i for i, b in enumerate(self.model.data[off:p]) if b), "\n  ".join(self.log[-25:])))

    def op_fsync(self):
        os.fsync(self.fd)
        self.note("fsync")

    def op_verify(self):
        self.verify("read-back")

    def verify(self, what):
        size = self.model.size
        st = os.fstat(self.fd)
        assert st.st_size == size, "%s: %s: st_size %d, model %d\nlast operations:\n  %s" % (
            self.path.name, what, st.st_size, size, "\n  ".join(self.log[-25:]))
        if self.direct:
            an = (size + SECTOR - 1) // SECTOR * SECTOR
            got = os.preadv(self.dfd, [memoryview(self.dbuf)[:an]], 0) if an else 0
            raw = bytes(self.dbuf[:min(got, size)])
        else:
            # the clean pages go, so the bytes come from the daemon again
            os.posix_fadvise(self.fd, 0, 0, POSIX_FADV_DONTNEED)
            raw = os.pread(self.fd, size + 1, 0)
        if raw != bytes(self.model.data):
            self.fail(what, 0, raw, bytes(self.model.data))

    def run(self):
        names = [n for n, _ in OPS]
        weights = [w for _, w in OPS]
        for i in range(self.nops):
            op = self.rng.choices(names, weights)[0]
            self.counts[op] = self.counts.get(op, 0) + 1
            getattr(self, "op_" + op)()
        self.verify("final read-back")


def make_image(path, size=256 * MiB):
    with open(path, "wb") as f:
        f.truncate(size)
    T.run(["mkfs.btrfs", "-f", "-q", str(path)])


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name,options,direct,kind", RUNS, ids=[r[0] for r in RUNS])
def test_file_against_model(ubtrfs_bin, scratch, name, options, direct, kind, seed):
    d = Path(scratch) / ("filedata-%s-%d" % (name, seed))
    d.mkdir()
    img = d / "fs.img"
    make_image(img)
    opts = "rw,commit=600" + ("," + options if options else "")
    with fuse_mounted(ubtrfs_bin, [img], d / "mnt", opts) as mnt:
        run = FileRun(Path(mnt) / "model.bin", name, seed, direct, kind, RUN_NOPS.get(name, NOPS))
        try:
            run.run()
        finally:
            run.close()
    want = bytes(run.model.data)

    progs_check([img])
    with T.mounted([img], d / "kmnt", readonly=True) as km:
        with open(os.path.join(km, "model.bin"), "rb") as f:
            got = f.read()
    assert got == want, "%s: the kernel's mount of the image differs from the model at offset %d (size %d/%d)" % (
        name, next((i for i in range(min(len(got), len(want))) if got[i] != want[i]), min(len(got), len(want))),
        len(got), len(want))
    print("%s seed %d: %d operations %r" % (name, seed, RUN_NOPS.get(name, NOPS), sorted(run.counts.items())))
    T.rmtree(d)


# ---------------------------------------------------------------------------------------------
# growing a file whose last sector holds old bytes past its EOF

GROWS = {
    "write": lambda fd: os.pwrite(fd, b"new bytes", 3 * SECTOR + 100),
    "truncate": lambda fd: os.ftruncate(fd, 3 * SECTOR + 100),
    "fallocate": lambda fd: T.fallocate(fd, 0, 2 * SECTOR, 2 * SECTOR),
    "zero_range": lambda fd: T.fallocate(fd, FALLOC_FL_ZERO_RANGE, 2 * SECTOR + 10, 3 * SECTOR),
    # copy_file_range of whole sectors is a clone on both mounts
    "clone": lambda fd, src: os.copy_file_range(src, fd, SECTOR, 0, 3 * SECTOR),
}


@pytest.mark.parametrize("how", list(GROWS))
def test_grow_hides_old_bytes_past_eof(ubtrfs_bin, scratch, how):
    """A file the kernel wrote may hold old bytes past EOF in its last sector (an older kernel, a
    crash): here the kernel writes two sectors of random bytes and the inode's size is then set to
    5000 on disk (craft.py). Growing the file through the mount (a write further on, truncate up,
    fallocate, ZERO_RANGE, a clone past the end) must show zeros from 5000 to the end of that sector, as the kernel's own
    mount of the same image does (its btrfs_cont_expand zeroes them); so must the kernel's mount of
    what ubtrfs left, and btrfs check is clean."""
    import craft as C

    d = Path(scratch) / ("grow-" + how)
    d.mkdir()
    img = d / "fs.img"
    make_image(img, 160 * MiB)
    old = random.Random(how).randbytes(2 * SECTOR)
    with T.mounted([img], d / "k0", readonly=False) as km:
        with open(os.path.join(km, "f"), "wb") as f:
            f.write(old)
        ino = os.stat(os.path.join(km, "f")).st_ino
    with C.Image(str(img)) as im:
        root, _ = im.tree_root(C.FS_TREE)
        blk, slot = im.find_item(root, (ino, C.INODE_ITEM, 0))
        blk.patch_item(slot, 16, "<Q", 5000)
        im.write_block(blk)
    copy = d / "kernel.img"
    T.copy_sparse(img, copy)

    def grow_and_read(top):
        p = os.path.join(top, "f")
        fd = os.open(p, os.O_RDWR)
        try:
            if how == "clone":
                with open(os.path.join(top, "g"), "w+b") as g:
                    g.write(bytes(range(256)) * (SECTOR // 256))
                    g.flush()
                    assert GROWS[how](fd, g.fileno()) == SECTOR
            else:
                GROWS[how](fd)
        finally:
            os.close(fd)
        with open(p, "rb") as f:
            return f.read()

    with T.mounted([copy], d / "k1", readonly=False) as km:
        want = grow_and_read(km)
    assert want[:5000] == old[:5000] and want[5000:2 * SECTOR] == bytes(2 * SECTOR - 5000), \
        "the kernel itself shows old bytes past the old EOF: the test's premise is wrong"
    with fuse_mounted(ubtrfs_bin, [img], d / "mnt", "rw") as mnt:
        got = grow_and_read(mnt)
    assert got == want, "%s: the mount shows other bytes than the kernel's (first difference at %d)" % (
        how, next(i for i in range(min(len(got), len(want))) if got[i] != want[i]))
    progs_check([img])
    with T.mounted([img], d / "k2", readonly=True) as km:
        with open(os.path.join(km, "f"), "rb") as f:
            assert f.read() == want, "%s: the kernel reads other bytes from what ubtrfs left" % how
    T.rmtree(d)
