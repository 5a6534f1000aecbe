# SPDX-License-Identifier: MIT
"""`ubtrfs rescue` (undo, super-recover, zero-log, fix-device-size) and the undo file.

Judged by btrfs-progs and the kernel: images made by mkfs.btrfs and a kernel mount are
damaged the way each command is for, the command runs, then `btrfs check` must be clean and
the matching `btrfs rescue` must find nothing left to do. Every change is made with
--undo-file and undone: the image must come back byte for byte. An undo file cut at every
record boundary restores exactly the records before the cut; garbage or another
filesystem's undo file is refused with nothing written. A few images of the btrfs-progs
corpus go through every command (no crash, and undo gives them back).
"""

import hashlib
import os
import re
import struct
from pathlib import Path

import pytest

import fsynclog_lib as L
import ubtrfs_testlib as T
import test_corpus as CORPUS

MiB = 1 << 20
HEADER = 64
HEAD = struct.Struct("<IIQII")  # type, dev, offset, len, crc
REC_DEV, REC_RANGE, REC_END = 1, 2, 3
SUPER0 = 64 << 10
SUPER1 = 64 << 20


# --------------------------------------------------------------------------
# helpers

def digest(path):
    """The contents of a (sparse) image: size and every non-zero 4 KiB block with its offset,
    read only where the file has data, so a 3 TB sparse image costs what it holds."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        fd = f.fileno()
        size = os.fstat(fd).st_size
        h.update(struct.pack("<Q", size))
        zero = bytes(4096)
        off = 0
        while off < size:
            try:
                start = os.lseek(fd, off, os.SEEK_DATA)
            except OSError:
                break
            end = os.lseek(fd, start, os.SEEK_HOLE)
            start -= start % 4096
            pos = start
            while pos < end:
                f.seek(pos)
                buf = f.read(min(8 * MiB, end - pos))
                for i in range(0, len(buf), 4096):
                    blk = buf[i:i + 4096]
                    if blk != zero[:len(blk)]:
                        h.update(struct.pack("<Q", pos + i))
                        h.update(blk)
                pos += len(buf)
                if not buf:
                    break
            off = end
    return h.hexdigest()


def rescue(*args, ok=(0,)):
    cp = T.ubtrfs("rescue", *[str(a) for a in args])
    assert cp.returncode in ok, T.describe(cp) + "\nstdout: " + cp.stdout.decode("utf-8", "replace")
    return cp


def out(cp):
    return cp.stdout.decode("utf-8", "replace") + cp.stderr.decode("utf-8", "replace")


def progs_check(img):
    cp = T.run(["btrfs", "check", str(img)], check=False)
    assert cp.returncode == 0, "btrfs check: %s" % out(cp)[-3000:]


def records(undo):
    """(end offset of each record, type, dev, offset, len, payload offset) in file order."""
    data = Path(undo).read_bytes()
    recs, pos = [], HEADER
    while pos + HEAD.size <= len(data):
        typ, dev, off, ln, _ = HEAD.unpack_from(data, pos)
        recs.append((pos + HEAD.size + ln, typ, dev, off, ln, pos + HEAD.size))
        pos += HEAD.size + ln
    assert pos == len(data), "undo file does not end on a record"
    return recs


def mkfs(path, size, *opts):
    with open(path, "wb") as f:
        f.truncate(size)
    T.run(["mkfs.btrfs", "-q", "-f", *opts, str(path)])


@pytest.fixture
def work(scratch, request):
    d = Path(scratch) / ("rescue-" + request.node.name.replace("[", "-").replace("]", ""))
    d.mkdir()
    yield d
    T.rmtree(d)


# --------------------------------------------------------------------------
# fix-device-size, and the undo file made by an engine commit

def oversized(work):
    """An image whose device item says 512 MiB on a 300 MiB file (every extent below 300 MiB)."""
    img = work / "big.img"
    mkfs(img, 512 * MiB)
    os.truncate(img, 300 * MiB)
    cp = T.run(["btrfs", "check", str(img)], check=False)
    assert cp.returncode != 0 and b"smaller than total_bytes" in cp.stderr, out(cp)
    return img


def test_fix_device_size_agrees_with_progs_and_undoes(ubtrfs_bin, work):
    img = oversized(work)
    before = digest(img)
    theirs = work / "theirs.img"
    T.copy_sparse(img, theirs)
    undo = work / "size.undo"
    cp = rescue("fix-device-size", "--undo-file", undo, img)
    text = out(cp)
    assert "Fixed device size for devid 1, old size: 536870912 new size: 314572800" in text, text
    assert "Fixed super total bytes, old size: 536870912 new size: 314572800" in text, text
    progs_check(img)
    cp = T.run(["btrfs", "rescue", "fix-device-size", str(img)])
    assert b"No device size related problem found" in cp.stdout, out(cp)
    # progs' own fix gives the same sizes (dump-super's total_bytes and dev_item.total_bytes)
    T.run(["btrfs", "rescue", "fix-device-size", str(theirs)])
    mine, progs = L.dump_super(img), L.dump_super(theirs)
    for k in ("total_bytes", "dev_item.total_bytes"):
        assert mine[k] == progs[k], (k, mine[k], progs[k])
    # a second run has nothing to do and writes nothing
    after = digest(img)
    cp = rescue("fix-device-size", img)
    assert "No device size related problem found" in out(cp)
    assert digest(img) == after
    # undo: byte for byte the image before the fix
    cp = rescue("undo", "--dry-run", undo, img)
    assert digest(img) == after and "would restore" in out(cp)
    cp = rescue("undo", undo, img)
    assert "complete" in out(cp)
    assert digest(img) == before
    # the undo file refuses to be overwritten
    cp = rescue("fix-device-size", "--undo-file", undo, img, ok=(2,))
    assert "exists" in out(cp) and digest(img) == before


def read_at(path, off, ln):
    with open(path, "rb") as f:
        f.seek(off)
        return f.read(ln)


def crash_points(mode, img, work, judge=None):
    """Run `mode` through undo_crash stopped at each of its writes in turn: the image holds
    the writes before, the undo file what was saved before them (no trailer); `judge` sees
    the stopped state; undo must give back the image before the run."""
    driver = T.test_tool("undo_crash")
    base = work / ("%s-base.img" % mode)
    T.copy_sparse(img, base)
    before = digest(base)
    undo = work / ("%s-crash.undo" % mode)
    cp = T.run([driver, mode, img, undo, 0])
    n = int(cp.stdout.split()[0])
    undo.unlink()
    assert n >= 1, cp.stdout
    for k in range(1, n + 1):
        T.copy_sparse(base, img)
        T.run([driver, mode, img, undo, k])
        if judge:
            judge(img, k)
        rescue("undo", undo, img)
        assert digest(img) == before, (mode, k)
        undo.unlink()
    base.unlink()
    return n


def test_fix_device_size_stopped_at_every_write(ubtrfs_bin, work):
    """Stopped anywhere, the filesystem is the old one or the fixed one (btrfs check finds
    nothing or only the old size), and undo from there gives back the image."""
    img = oversized(work)

    def judge(stopped, k):
        cp = T.run(["btrfs", "check", str(stopped)], check=False)
        errors = [l for l in cp.stderr.decode("utf-8", "replace").splitlines() if l.startswith("ERROR")]
        assert all("smaller than total_bytes" in l or "extent allocation tree or chunk allocation" in l
                   for l in errors), (k, errors)

    assert crash_points("size", img, work, judge) >= 3


def test_undo_cut_at_every_record(ubtrfs_bin, work):
    """A run cut short leaves a file whose records that verify are all applied: cut after
    each record (and inside the next, and with the next one's bytes damaged), the apply
    restores exactly the ranges recorded before the cut, and nothing else."""
    img = oversized(work)
    orig = work / "orig.img"
    T.copy_sparse(img, orig)
    undo = work / "size.undo"
    rescue("fix-device-size", "--undo-file", undo, img)
    changed = work / "changed.img"
    T.copy_sparse(img, changed)
    recs = records(undo)
    assert recs[0][1] == REC_DEV and recs[-1][1] == REC_END
    ranges = [r for r in recs if r[1] == REC_RANGE]
    assert len(ranges) >= 3, recs
    full = undo.read_bytes()
    # every saved range holds the old bytes, and the run changed something in each
    for end, _, _, off, ln, p in ranges:
        assert full[p:p + ln] == read_at(orig, off, ln)
    cuts = [(HEADER, HEADER, "header only")]
    for i, r in enumerate(recs[:-1]):
        cuts.append((r[0], r[0], "after record %d" % i))
        cuts.append((r[0] + 30, r[0], "inside record %d" % (i + 1)))
    cuts.append(("flip", recs[-3][0], "the last range damaged"))
    part = work / "cut.undo"
    expect = work / "expect.img"
    for cut, keep, why in cuts:
        if cut == "flip":
            data = bytearray(full[:recs[-2][0]])
            data[recs[-2][5] + 5] ^= 0xFF
        else:
            data = full[:cut]
        part.write_bytes(bytes(data))
        T.copy_sparse(changed, img)
        cp = T.ubtrfs("rescue", "undo", str(part), str(img))
        if keep < recs[0][0]:
            # not even the device record: nothing to match, nothing written
            assert cp.returncode == 2, (why, T.describe(cp))
            assert digest(img) == digest(changed), why
            continue
        assert cp.returncode == 0, (why, T.describe(cp))
        assert ("complete" if keep == len(full) else "cut short") in out(cp), (why, out(cp))
        T.copy_sparse(changed, expect)
        with open(expect, "r+b") as f:
            for end, _, _, off, ln, p in ranges:
                if end <= keep:
                    f.seek(off)
                    f.write(full[p:p + ln])
        assert digest(img) == digest(expect), why
    for p in (part, expect, changed, orig):
        p.unlink()


def test_undo_refuses_foreign_and_garbage(ubtrfs_bin, work):
    img = oversized(work)
    other = work / "other.img"
    mkfs(other, 300 * MiB)
    undo = work / "size.undo"
    rescue("fix-device-size", "--undo-file", undo, img)
    before_img, before_other = digest(img), digest(other)
    # another filesystem's device
    cp = rescue("undo", undo, other, ok=(2,))
    assert "matches no device" in out(cp), out(cp)
    # a device that does not belong beside the one that does
    cp = rescue("undo", undo, other, img, ok=(2,))
    assert digest(other) == before_other and digest(img) == before_img
    # garbage, an empty file, a damaged header, the undo file as its own device
    garbage = work / "garbage.undo"
    garbage.write_bytes(bytes(random_bytes(5000)))
    cp = rescue("undo", garbage, img, ok=(2,))
    assert "not an undo file" in out(cp), out(cp)
    empty = work / "empty.undo"
    empty.write_bytes(b"")
    rescue("undo", empty, img, ok=(2,))
    bad = work / "bad.undo"
    data = bytearray(undo.read_bytes())
    data[20] ^= 1
    bad.write_bytes(bytes(data))
    cp = rescue("undo", bad, img, ok=(2,))
    assert "checksum" in out(cp), out(cp)
    cp = rescue("undo", undo, undo, ok=(2,))
    assert digest(img) == before_img and digest(other) == before_other
    # a device that shrank below the bytes saved for it (the mirror at 64 MiB)
    small = work / "small.img"
    T.copy_sparse(img, small)
    os.truncate(small, 64 * MiB)
    cp = rescue("undo", undo, small, ok=(2,))
    assert "holds bytes up to" in out(cp), out(cp)
    assert os.path.getsize(small) == 64 * MiB
    small.unlink()
    # bytes flipped anywhere (fixed seed): a record that no longer verifies ends the list,
    # a header that does not refuses the file; never a crash, never a write past the records
    rng = __import__("random").Random(34)
    full = undo.read_bytes()
    flipped = work / "flipped.undo"
    for _ in range(24):
        data = bytearray(full)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        flipped.write_bytes(bytes(data))
        T.copy_sparse(img, small)
        cp = T.ubtrfs("rescue", "undo", str(flipped), str(small))
        assert cp.returncode in (0, 2), T.describe(cp)
        assert b"Sanitizer" not in cp.stderr, T.describe(cp)
        small.unlink()
    # usage
    rescue("undo", undo, ok=(2,))
    rescue("frobnicate", img, ok=(2,))


@pytest.mark.parametrize("threads,start,end,finish", [
    (8, 1 * MiB, 3 * MiB, True),     # many writers racing for the same pieces
    (4, 0, 60 * MiB, False),         # the primary superblock too, the run aborted (no trailer)
])
def test_undo_device_under_threads(ubtrfs_bin, work, threads, start, end, finish):
    driver = T.test_tool("undo_driver")
    img = work / "t.img"
    mkfs(img, 300 * MiB)
    before = digest(img)
    undo = work / "t.undo"
    T.run([driver, img, str(undo) if finish else "-:%s" % undo, threads, 200, 34, start, end])
    assert digest(img) != before
    cp = rescue("undo", undo, img)
    assert ("complete" if finish else "cut short") in out(cp), out(cp)
    assert digest(img) == before
    progs_check(img)


def random_bytes(n, seed=34):
    import random
    return random.Random(seed).randbytes(n)


# --------------------------------------------------------------------------
# super-recover

def test_super_recover_bad_and_stale_copies(ubtrfs_bin, work):
    img = work / "sb.img"
    mkfs(img, 300 * MiB)
    # a stale primary: copy 0 as mkfs left it, the filesystem committed since by the kernel
    old0 = read_at(img, SUPER0, 4096)
    with T.mounted([img], work / "mnt", readonly=False) as mnt:
        Path(mnt, "file").write_bytes(b"x" * 10000)
    gen = T.super_generations(img)[1]
    progs_check(img)
    steps = []
    for what, damage in (("stale", old0), ("bad", random_bytes(4096))):
        T.overwrite(img, SUPER0, damage)
        before = digest(img)
        # no terminal, no -y: refused, nothing written
        cp = rescue("super-recover", img, ok=(2,))
        assert "-y" in out(cp) and digest(img) == before
        undo = work / ("sb-%s.undo" % what)
        cp = rescue("super-recover", "-y", "--undo-file", undo, img)
        text = out(cp)
        assert re.search(r"copy 0 at 65536: %s" % what, text), text
        assert "1 copy rewritten" in text, text
        assert T.super_generations(img) == {0: gen, 1: gen}
        progs_check(img)
        cp = T.run(["btrfs", "rescue", "super-recover", "-y", str(img)])
        assert b"All supers are valid, no need to recover" in cp.stdout, out(cp)
        # nothing left: exit 0, nothing written
        after = digest(img)
        cp = rescue("super-recover", img)
        assert "All supers are valid" in out(cp) and digest(img) == after
        steps.append((undo, before))
    for undo, before in reversed(steps):
        rescue("undo", undo, img)
        assert digest(img) == before
    crash_points("super", img, work)


def test_two_devices_super_recover_and_chunk_recover(ubtrfs_bin, work):
    a, b = work / "a.img", work / "b.img"
    for img in (a, b):
        with open(img, "wb") as f:
            f.truncate(300 * MiB)
    T.run(["mkfs.btrfs", "-q", "-f", "-d", "raid1", "-m", "raid1", str(a), str(b)])
    gen = T.super_generations(a)[0]
    T.overwrite(b, SUPER1, random_bytes(4096, 2))
    before = (digest(a), digest(b))
    undo = work / "two.undo"
    cp = rescue("super-recover", "-y", "--undo-file", undo, a, b)
    assert "1 copy rewritten" in out(cp), out(cp)
    assert T.super_generations(a) == T.super_generations(b) == {0: gen, 1: gen}
    with T.mounted([a, b], work / "mnt"):
        pass
    # both devices, matched by devid, or nothing
    cp = rescue("undo", undo, a, ok=(2,))
    assert "was not given" in out(cp), out(cp)
    rescue("undo", undo, b, a)
    assert (digest(a), digest(b)) == before
    # the chunk tree's leaf lost on both devices (RAID1 system chunk: one copy on each)
    rescue("super-recover", "-y", a, b)
    want = T.ubtrfs("dump-tree", "-t", "chunk", a, b).stdout
    m = re.search(rb"length (\d+) owner \d+ stripe_len \d+ type SYSTEM\|RAID1\n.*\n.*\n"
                  rb"\s*stripe 0 devid (\d) offset (\d+)\n.*\n\s*stripe 1 devid (\d) offset (\d+)", want)
    logical = int(re.search(rb"CHUNK_ITEM (\d+)\) itemoff \d+ itemsize \d+\n\s*length %s owner \d+ stripe_len \d+ "
                            rb"type SYSTEM" % m.group(1), want).group(1))
    root = int(L.dump_super(a)["chunk_root"])
    for devid, off in ((m.group(2), m.group(3)), (m.group(4), m.group(5))):
        T.overwrite(a if devid == b"1" else b, int(off) + root - logical, random_bytes(16384))
    cp = rescue("chunk-recover", "-y", a, b)
    assert "Chunk tree recovered" in out(cp), out(cp)
    assert T.ubtrfs("dump-tree", "-t", "chunk", a, b).stdout == want
    with T.mounted([a, b], work / "mnt2"):
        pass
    cp = T.ubtrfs("check", a, b)
    assert cp.returncode == 0, T.describe(cp)


def test_super_recover_names_a_foreign_device(ubtrfs_bin, work):
    a, b = work / "a.img", work / "b.img"
    mkfs(a, 200 * MiB)
    mkfs(b, 200 * MiB)
    T.overwrite(a, SUPER0, random_bytes(4096, 3))
    cp = rescue("super-recover", "-y", a, b, ok=(1,))
    text = out(cp)
    assert "belongs to another filesystem" in text and "1 copy rewritten" in text, text
    progs_check(a)
    progs_check(b)


def test_super_recover_nothing_valid(ubtrfs_bin, work):
    img = work / "none.img"
    with open(img, "wb") as f:
        f.truncate(200 * MiB)
    T.overwrite(img, SUPER0, random_bytes(4096))
    cp = rescue("super-recover", "-y", img, ok=(2,))
    assert "no valid superblock" in out(cp), out(cp)


# --------------------------------------------------------------------------
# chunk-recover

@pytest.mark.parametrize("damage", ["leaf", "system-chunk"])
def test_chunk_recover_rebuilds_the_chunk_tree(ubtrfs_bin, work, damage):
    """leaf: the chunk tree's only leaf loses both copies (older copies of leaves remain in the
    system chunk); system-chunk: both copies of the whole system chunk zeroed, so the map comes
    from a raw scan of the device for block group items and device extents."""
    img = work / "chunk.img"
    mkfs(img, 300 * MiB)
    with T.mounted([img], work / "mnt", readonly=False) as mnt:
        L.write_file(Path(mnt) / "data", random_bytes(3 * MiB, 5))
    want_tree = T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "chunk", str(img)]).stdout
    want_file = T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "5", str(img)]).stdout
    # intact: nothing to do, nothing written
    before = digest(img)
    cp = rescue("chunk-recover", "-y", img)
    assert "nothing to recover" in out(cp) and digest(img) == before
    # both copies of the chunk tree's only leaf destroyed
    root = int(L.dump_super(img)["chunk_root"])
    copies = T.map_logical(img, root, 16384)
    assert len(copies) == 2, copies
    m = re.search(rb"CHUNK_ITEM (\d+)\) itemoff \d+ itemsize \d+\n\s*length (\d+) owner \d+ stripe_len \d+ "
                  rb"type SYSTEM", want_tree)
    sys_logical, sys_length = int(m.group(1)), int(m.group(2))
    sys_copies = T.map_logical(img, sys_logical, sys_length)
    for _, phys in copies:
        T.overwrite(img, phys, random_bytes(16384, phys))
    if damage == "system-chunk":
        for _, phys in sys_copies:
            T.overwrite(img, phys, bytes(sys_length))
    assert T.run(["btrfs", "check", str(img)], check=False).returncode != 0
    damaged = digest(img)
    cp = rescue("chunk-recover", img, ok=(2,))
    assert "-y" in out(cp) and digest(img) == damaged
    crash_points("chunk", img, work)
    undo = work / "chunk.undo"
    cp = rescue("chunk-recover", "-y", "--undo-file", undo, img)
    assert "Chunk tree recovered" in out(cp), out(cp)
    progs_check(img)
    # the same chunk tree as before the damage, item for item, and the file reads
    assert T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "chunk", str(img)]).stdout == want_tree
    assert T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "5", str(img)]).stdout == want_file
    cp = T.ubtrfs("cat", "--path", "/data", img)
    assert cp.returncode == 0 and cp.stdout == random_bytes(3 * MiB, 5), T.describe(cp)
    rescue("undo", undo, img)
    assert digest(img) == damaged


# --------------------------------------------------------------------------
# zero-log

def test_zero_log_on_a_kernel_log(ubtrfs_bin, work):
    def baseline(mnt):
        (mnt / "keep").write_bytes(b"k" * 5000)

    logged = []

    def action(mnt):
        (mnt / "d").mkdir()
        L.write_file(mnt / "d" / "new", random_bytes(70000, 7), fsync=True)
        logged[:] = [os.stat(mnt / "d").st_ino, os.stat(mnt / "d" / "new").st_ino]

    crash = L.make_crash(work / "crash", baseline, action)
    if not crash.log_root:
        pytest.skip("the kernel committed before the copy three times: no log to drop")
    img = crash.image
    before = digest(img)
    undo = work / "log.undo"
    cp = rescue("zero-log", "--undo-file", undo, img)
    text = out(cp)
    assert "log tree at logical %d" % crash.log_root in text, text
    inodes = re.search(r"subvolume 5: inode((?: \d+)+)", text)
    assert inodes and set(logged) <= set(map(int, inodes.group(1).split())), (logged, text)
    assert "previous log_root %d, level 0" % crash.log_root in text, text
    sup = L.dump_super(img)
    assert sup["log_root"] == "0" and sup["log_root_level"] == "0", sup
    progs_check(img)
    # the last commit is what stays: the fsynced file is gone, the committed one reads
    cp = T.ubtrfs("ls", "-R", img)
    assert b"keep" in cp.stdout and b"new" not in cp.stdout, T.describe(cp)
    after = digest(img)
    cp = rescue("zero-log", img)
    assert "nothing to clear" in out(cp) and digest(img) == after
    rescue("undo", undo, img)
    assert digest(img) == before
    assert L.dump_super(img)["log_root"] == str(crash.log_root)
    crash_points("zerolog", img, work)


def test_rescue_refuses_a_mounted_device(ubtrfs_bin, work):
    img = work / "m.img"
    mkfs(img, 200 * MiB)
    before = digest(img)
    with T.mounted([img], work / "mnt"):
        for sub in ("zero-log", "fix-device-size", "super-recover"):
            cp = rescue(sub, img, ok=(2,))
            assert "mounted" in out(cp), out(cp)
    assert digest(img) == before


# --------------------------------------------------------------------------
# hostile images: the corpus

def corpus_images(limit=4, max_size=1 << 30):
    images = CORPUS.list_images()
    picked = []
    if not images:
        return picked
    cache = CORPUS.cache_dir(images)
    for name, archive in images:
        if not name.startswith("fsck/"):
            continue
        raw = CORPUS.extract(name, archive, cache)
        if raw.stat().st_size <= max_size:
            picked.append((name, raw))
        if len(picked) == limit:
            break
    return picked


def test_rescue_on_corpus_images(ubtrfs_bin, work):
    if not CORPUS.corpus_dir().is_dir():
        pytest.skip("corpus not found at %s" % CORPUS.corpus_dir())
    picked = corpus_images()
    assert picked
    for name, raw in picked:
        img = work / "c.img"
        T.copy_sparse(raw, img)
        before = digest(img)
        for n, args in enumerate((("super-recover", "-y"), ("zero-log",), ("fix-device-size",),
                                  ("chunk-recover", "-y"))):
            undo = work / ("c%d.undo" % n)
            cp = T.ubtrfs("rescue", *args, "--undo-file", str(undo), str(img))
            assert cp.returncode in (0, 1, 2), (name, args, T.describe(cp))
            assert b"Sanitizer" not in cp.stderr, (name, args, T.describe(cp))
        # undone in the reverse order, each run's file gives back what it saw
        for n in (3, 2, 1, 0):
            undo = work / ("c%d.undo" % n)
            if undo.exists() and any(r[1] == REC_DEV for r in records(undo)):
                cp = T.ubtrfs("rescue", "undo", str(undo), str(img))
                assert cp.returncode == 0, (name, T.describe(cp))
            if undo.exists():
                undo.unlink()
        assert digest(img) == before, name
        img.unlink()
