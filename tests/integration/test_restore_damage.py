# SPDX-License-Identifier: MIT
"""`ubtrfs restore` against `btrfs restore` on the same damaged images, case by case.

The kernel makes each filesystem and writes files of known bytes (the oracle); the test
then damages it: a zeroed primary superblock, one bad copy of a data sector on RAID1,
RAID5 with a device gone, RAID6 with two devices gone and one more bad data sector on a
device that is left. `btrfs restore` runs the way a skilled user would (`-i`, then with
`-u 1` and `-u 2`, on the devices attached to loop devices and scanned, the best run
kept); ubtrfs restore runs unaided on the image files. Every file the best btrfs restore
run gets right, ubtrfs must get byte-exact; every file the damage does not touch must
come out byte-exact whatever btrfs restore does; a file the damage does touch must be
named in --report, with the bytes lost.
"""

import json
import os
import random

import pytest

import multidev_lib as M
import ubtrfs_testlib as T

pytestmark = pytest.mark.xdist_group("restore")


def _make(tmp_path, ndev, data, meta, nfiles=24, seed=3):
    images = []
    for i in range(ndev):
        img = tmp_path / ("dev%d.img" % i)
        with open(img, "wb") as f:
            f.truncate(320 * T.MiB)
        images.append(img)
    args = ["mkfs.btrfs", "-f", "-q", "-d", data, "-m", meta]
    T.run(args + [str(i) for i in images])
    rng = random.Random(seed)
    content = {}
    try:
        with M.attached(images) as loops, M.mount_loops(loops, tmp_path / "mnt") as mnt:
            os.mkdir(os.path.join(mnt, "d"))
            for i in range(nfiles):
                rel = "d/f%02d" % i
                content[rel] = rng.randbytes(rng.choice((700, 5000, 200000, 1500000)))
                with open(os.path.join(mnt, rel), "wb") as f:
                    f.write(content[rel])
            T.run(["sync"])
            inos = {rel: os.lstat(os.path.join(mnt, rel)).st_ino for rel in content}
    finally:
        T.run(["btrfs", "device", "scan", "--forget"], check=False)
    return images, content, inos


def _got(out, content):
    """The files of `content` that `out` holds byte-exact."""
    ok = set()
    for rel, data in content.items():
        p = out / rel
        if p.is_file() and not p.is_symlink() and p.read_bytes() == data:
            ok.add(rel)
    return ok


def _btrfs_restore_best(tmp_path, images, content):
    """The files the best single `btrfs restore` run gets byte-exact (-i; -i -u 1; -i -u 2)."""
    best = set()
    try:
        with M.attached(images, readonly=True) as loops:
            T.run(["btrfs", "device", "scan", *loops], check=False)
            for n, extra in enumerate(([], ["-u", "1"], ["-u", "2"])):
                out = tmp_path / ("theirs%d" % n)
                out.mkdir()
                T.run(["btrfs", "restore", "-i"] + extra + [loops[0], str(out)], check=False)
                got = _got(out, content)
                if len(got) > len(best):
                    best = got
    finally:
        T.run(["btrfs", "device", "scan", "--forget"], check=False)
    print("btrfs restore, best run: %d of %d files byte-exact" % (len(best), len(content)))
    return best


def _ubtrfs_restore(tmp_path, images):
    out, report = tmp_path / "ours", tmp_path / "report.jsonl"
    cp = T.ubtrfs("restore", "--report", str(report), *[str(i) for i in images], str(out))
    assert cp.returncode in (0, 1), T.describe(cp)
    lines = [json.loads(x) for x in report.read_text().splitlines()] if report.exists() else []
    return cp, out, lines


def _dumps(images):
    """btrfs-progs' dumps of the fs tree and of the chunk tree, with every device attached."""
    try:
        with M.attached(images, readonly=True) as loops:
            T.run(["btrfs", "device", "scan", *loops])
            fs = T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "5", loops[0]]).stdout.decode()
            chunk = T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "chunk", loops[0]]).stdout.decode()
    finally:
        T.run(["btrfs", "device", "scan", "--forget"], check=False)
    return fs, M.parse_chunks(chunk)


def _both(tmp_path, images, content):
    """btrfs restore's best run and ubtrfs restore on the same devices: (theirs, ours, cp, out, report lines)."""
    theirs = _btrfs_restore_best(tmp_path, images, content)
    cp, out, lines = _ubtrfs_restore(tmp_path, images)
    return theirs, _got(out, content), cp, out, lines


def _data_location(dumps, ino, file_offset):
    """(logical, chunk) of byte `file_offset` of inode `ino` of the fs tree."""
    fs, chunks = dumps
    for foff, disk, _, eoff, num, comp in T.file_extents(fs, ino):
        if foff <= file_offset < foff + num and comp == 0:
            logical = disk + eoff + file_offset - foff
            return logical, M.chunk_of(chunks, logical)
    raise AssertionError("test setup: no plain extent of inode %d covers offset %d" % (ino, file_offset))


def test_restore_zeroed_primary_superblock(tmp_path):
    """The primary superblock zeroed: ubtrfs reads a mirror copy, unaided; every file exact."""
    images, content, _ = _make(tmp_path, 1, "single", "dup")
    T.overwrite(images[0], 64 * 1024, bytes(4096))
    theirs, ours, cp, _, _ = _both(tmp_path, images, content)
    assert ours == set(content), (sorted(set(content) - ours)[:5], T.describe(cp))
    assert theirs <= ours


def test_restore_raid1_bad_data_copy(tmp_path):
    """One copy of a data sector overwritten on a two-device RAID1: the other copy gives it;
    every file exact, nothing reported lost."""
    images, content, inos = _make(tmp_path, 2, "raid1", "raid1")
    victim = max(content, key=lambda r: len(content[r]))
    logical, chunk = _data_location(_dumps(images), inos[victim], 8192)
    devid, phys = chunk.copies(logical)[0]
    T.overwrite(images[devid - 1], phys, b"\x5a" * 4096)
    theirs, ours, cp, _, lines = _both(tmp_path, images, content)
    assert ours == set(content), (sorted(set(content) - ours)[:5], T.describe(cp))
    assert theirs <= ours
    assert not [x for x in lines if x.get("status") in ("partial", "lost")], lines


def test_restore_raid5_device_missing(tmp_path):
    """RAID5 over three devices (metadata RAID1), the third gone: rebuilt from parity,
    every file exact."""
    images, content, _ = _make(tmp_path, 3, "raid5", "raid1")
    present = images[:2]
    theirs, ours, cp, _, _ = _both(tmp_path, present, content)
    assert ours == set(content), (sorted(set(content) - ours)[:5], T.describe(cp))
    assert theirs <= ours


def test_restore_raid6_two_missing_and_a_bad_sector(tmp_path):
    """RAID6 over four devices (metadata RAID1C3), two devices gone (in the row picked, the two
    that hold its P and Q), and one more data sector overwritten on a device that is left:
    that sector has no second source, so its file is partial with exactly those 4096 bytes
    lost (and reported); every other file, and the rest of that one, is exact."""
    images, content, inos = _make(tmp_path, 4, "raid6", "raid1c3")
    victim = max(content, key=lambda r: len(content[r]))
    off = 8192
    logical, chunk = _data_location(_dumps(images), inos[victim], off)
    row = chunk.raid56_row(logical)
    gone = {row["p"][0], row["q"][0]}
    present = [img for i, img in enumerate(images) if i + 1 not in gone]
    devid, phys = chunk.copies(logical)[0]
    assert devid not in gone
    T.overwrite(images[devid - 1], phys, b"\xa5" * 4096)
    theirs, ours, cp, out, lines = _both(tmp_path, present, content)
    assert ours == set(content) - {victim}, (sorted(set(content) - ours)[:5], T.describe(cp))
    assert theirs - {victim} <= ours
    got = (out / victim).read_bytes()
    want = content[victim]
    assert got == want[:off] + bytes(4096) + want[off + 4096:], T.describe(cp)
    recs = [x for x in lines if x.get("path") == "/" + victim]
    assert len(recs) == 1 and recs[0]["status"] == "partial", lines
    assert [(x["offset"], x["length"]) for x in recs[0]["lost"]] == [(off, 4096)], recs
