# SPDX-License-Identifier: MIT
"""`ubtrfs restore` against `btrfs restore` on the same damaged images, case by case.

The kernel makes each filesystem and writes files of known bytes (the oracle); the test
then damages it: a zeroed primary superblock, one bad copy of a data sector on RAID1,
RAID5 with a device gone, RAID6 with two devices gone and one more bad data sector on a
device that is left; and, on a filesystem written in several commits, several leaves of
the fs tree zeroed, the fs tree's root zeroed, garbage in the root tree's root (every
copy of each). `btrfs restore` runs the way a skilled user would (`-i`, then with `-u 1`
and `-u 2`, and `-t` with the root tree of each backup root, on the devices attached to
loop devices and scanned, the best run kept); ubtrfs restore runs unaided on the image
files. Every file the best btrfs restore
run gets right, ubtrfs must get byte-exact; every file the damage does not touch must
come out byte-exact whatever btrfs restore does; a file the damage does touch must be
named in --report, with the bytes lost.
"""

import json
import os
import random
import re

import pytest

import craft as C
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


def _backup_tree_roots(image):
    """The root tree of each of the superblock's backup roots, as dump-super prints them."""
    out = T.run(["btrfs", "inspect-internal", "dump-super", "-f", str(image)], check=False).stdout.decode()
    roots = []
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 2 and f[0] == "backup_tree_root:" and f[1].isdigit() and int(f[1]) and f[1] not in roots:
            roots.append(f[1])
    return roots


def _btrfs_restore_best(tmp_path, images, content, backups=False):
    """The files the best single `btrfs restore` run gets byte-exact (-i; -i -u 1; -i -u 2;
    with `backups`, also -i -t for the root tree of each backup root)."""
    best = set()
    runs = [[], ["-u", "1"], ["-u", "2"]]
    if backups:
        runs += [["-t", b] for b in _backup_tree_roots(images[0])]
    try:
        with M.attached(images, readonly=True) as loops:
            T.run(["btrfs", "device", "scan", *loops], check=False)
            for n, extra in enumerate(runs):
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


def _both(tmp_path, images, content, backups=False):
    """btrfs restore's best run and ubtrfs restore on the same devices: (theirs, ours, cp, out, report lines)."""
    theirs = _btrfs_restore_best(tmp_path, images, content, backups)
    cp, out, lines = _ubtrfs_restore(tmp_path, images)
    ours = _got(out, content)
    print("ubtrfs restore: %d of %d files byte-exact" % (len(ours), len(content)))
    return theirs, ours, cp, out, lines


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


# ---- a filesystem written in several commits, its metadata damaged ----

def _make_commits(tmp_path, commits=4, per=40, seed=11):
    """One device, 4 KiB nodes (a tree of many leaves), DUP metadata; `commits` commits, each
    adding a directory of `per` files and rewriting one file of the one before (so older
    roots differ from the last). (image, {rel: bytes} as of the last commit, {rel: bytes the
    commit before} of the file the last commit rewrote)."""
    img = tmp_path / "dev0.img"
    with open(img, "wb") as f:
        f.truncate(256 * T.MiB)
    T.run(["mkfs.btrfs", "-f", "-q", "-n", "4096", "-m", "dup", "-d", "single", str(img)])
    rng = random.Random(seed)
    content, before = {}, {}
    with T.mounted([img], tmp_path / "mnt", readonly=False) as mnt:
        for c in range(commits):
            os.mkdir(os.path.join(mnt, "c%d" % c))
            for i in range(per):
                rel = "c%d/f%02d" % (c, i)
                content[rel] = rng.randbytes(rng.choice((300, 3000, 9000, 70000)))
                with open(os.path.join(mnt, rel), "wb") as f:
                    f.write(content[rel])
            if c:
                rel = "c%d/f00" % (c - 1)
                before = {rel: content[rel]}
                content[rel] = rng.randbytes(5000)
                with open(os.path.join(mnt, rel), "wb") as f:
                    f.write(content[rel])
            T.run(["sync"])
    return img, content, before


def _wipe(img, logical):
    """Every copy of the tree block at `logical` overwritten (its header and first items)."""
    with C.Image(str(img)) as im:
        copies = im.physical(logical)
    assert copies, logical
    for phys in copies:
        T.overwrite(img, phys, bytes(4096))


def _inodes(img):
    """{inode: rel} of the files of the last commit, by the names the fs tree holds."""
    with C.Image(str(img)) as im:
        root = im.tree_root(C.FS_TREE)[0]
        names, parents = {}, {}
        for blk, slot in im.walk(root):
            k = blk.item_key(slot)
            if k.type == C.INODE_REF:
                d = blk.item_data(slot)
                nlen = int.from_bytes(d[8:10], "little")
                names[k.objectid] = d[10:10 + nlen].decode()
                parents[k.objectid] = k.offset
    out = {}
    for ino, name in names.items():
        parent = parents[ino]
        if parent in names:
            out[ino] = names[parent] + "/" + name
    return out


def _check_damage_case(tmp_path, img, content, touched, before=None):
    """The issue's rules: ubtrfs gets every file btrfs restore's best run gets; every file
    the damage did not touch comes out byte-exact; each touched file that does not is named
    in --report. `before`: files expected as the commit before the last left them (their
    newer version cannot be verified), byte-exact so."""
    before = before or {}
    theirs, ours, cp, out, lines = _both(tmp_path, [img], content, backups=True)
    assert cp.returncode in (0, 1), T.describe(cp)
    assert theirs - set(before) <= ours, (sorted(theirs - ours)[:5], T.describe(cp))
    for rel, data in before.items():
        assert (out / rel).read_bytes() == data, (rel, T.describe(cp))
    untouched = set(content) - touched - set(before)
    assert untouched <= ours, (sorted(untouched - ours)[:5], T.describe(cp))
    named = {x.get("path") for x in lines}
    unnamed = sorted(r for r in touched - ours if "/" + r not in named)
    assert not unnamed, (unnamed[:5], T.describe(cp))
    return theirs, ours, cp


def test_restore_several_fs_leaves_zeroed(tmp_path):
    """Three leaves of the fs tree zeroed in both DUP copies, leaves that hold inode and file
    extent items of files (no directory entries: every name stays readable)."""
    img, content, _ = _make_commits(tmp_path)
    rels = _inodes(img)
    with C.Image(str(img)) as im:
        root = im.tree_root(C.FS_TREE)[0]
        leaves = {}
        for blk, slot in im.walk(root):
            leaves.setdefault(blk.logical, []).append(blk.item_key(slot))
    plain = [lg for lg, keys in leaves.items()
             if not any(k.type in (C.DIR_ITEM, C.DIR_INDEX) for k in keys)
             and any(k.type == C.INODE_ITEM and rels.get(k.objectid) in content for k in keys)]
    assert len(plain) >= 3, "test setup: %d leaves of file items only" % len(plain)
    victims = [plain[0], plain[len(plain) // 2], plain[-1]]
    touched = set()
    for lg in victims:
        touched |= {rels[k.objectid] for k in leaves[lg] if rels.get(k.objectid) in content}
        _wipe(img, lg)
    theirs, ours, _ = _check_damage_case(tmp_path, img, content, touched)
    print("several fs-tree leaves zeroed: %d files touched; ubtrfs %d, btrfs restore %d of %d"
          % (len(touched), len(ours), len(theirs), len(content)))


def test_restore_fs_tree_root_zeroed(tmp_path):
    """The fs tree's root node zeroed in both DUP copies; the older roots are intact. No
    leaf is damaged: every file comes out byte-exact, the one the last commit rewrote too
    (the walk reads the older root; the scan finds the leaves of the last commit)."""
    img, content, before = _make_commits(tmp_path)
    with C.Image(str(img)) as im:
        root, level = im.tree_root(C.FS_TREE)
    assert level > 0, "test setup: the fs tree is a single leaf"
    _wipe(img, root)
    theirs, ours, cp = _check_damage_case(tmp_path, img, content, set())
    (rel,) = before
    assert ("/%s: restored as the commit of generation" % rel).encode() in cp.stderr, T.describe(cp)
    print("fs tree root zeroed: ubtrfs %d, btrfs restore %d of %d" % (len(ours), len(theirs), len(content)))


def test_restore_fs_tree_root_zeroed_newer_data_bad(tmp_path):
    """The same, and a sector of the data the last commit wrote to the rewritten file
    overwritten: that newer version does not verify, so the file comes out as the commit
    before left it, byte-exact; every other file byte-exact."""
    img, content, before = _make_commits(tmp_path)
    (rel,) = before
    dump = T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "5", str(img)]).stdout.decode()
    ino = {v: k for k, v in _inodes(img).items()}[rel]
    (foff, disk, _, eoff, _, comp), = T.file_extents(dump, ino)
    assert foff == 0 and comp == 0 and disk, "test setup: not one plain extent"
    (_, phys), = T.map_logical(img, disk + eoff, 4096)
    T.overwrite(img, phys, b"\x5a" * 4096)
    with C.Image(str(img)) as im:
        root, level = im.tree_root(C.FS_TREE)
    assert level > 0, "test setup: the fs tree is a single leaf"
    _wipe(img, root)
    theirs, ours, _ = _check_damage_case(tmp_path, img, content, set(), before)
    print("fs tree root zeroed, newer data bad: ubtrfs %d, btrfs restore %d of %d"
          % (len(ours), len(theirs), len(content)))


def test_restore_root_tree_root_garbage(tmp_path):
    """Garbage in the root tree's root block, every copy: the superblock's backup roots and
    the scan give the trees back. No fs tree block is damaged: every file comes out
    byte-exact, the one the last commit rewrote too."""
    img, content, _ = _make_commits(tmp_path)
    with C.Image(str(img)) as im:
        copies = im.physical(im.super("root"))
    for phys in copies:
        T.overwrite(img, phys, random.Random(7).randbytes(4096))
    theirs, ours, _ = _check_damage_case(tmp_path, img, content, set())
    print("root tree root garbage: ubtrfs %d, btrfs restore %d of %d" % (len(ours), len(theirs), len(content)))


def test_restore_generation_asked_for_stays_older(tmp_path):
    """--generation names an older state: restore gives it as that root has it (btrfs restore
    -t with the same root tree is the oracle), and the scan's newer leaves do not replace
    anything, although nothing is damaged and the last commit rewrote a file."""
    img, content, before = _make_commits(tmp_path)
    (rel,) = before
    out = T.run(["btrfs", "inspect-internal", "dump-super", "-f", str(img)]).stdout.decode()
    backups = sorted((int(g), int(b)) for b, g in re.findall(r"backup_tree_root:\s+(\d+)\s+gen: (\d+)", out))
    # the newest backup root below the last that btrfs restore gives the older version from
    # (the kernel may have committed more than once per sync)
    for n, (gen, bytenr) in enumerate(reversed(backups[:-1])):
        theirs = tmp_path / ("theirs%d" % n)
        theirs.mkdir()
        T.run(["btrfs", "restore", "-t", str(bytenr), str(img), str(theirs)], check=False)
        if (theirs / rel).is_file() and (theirs / rel).read_bytes() == before[rel]:
            break
    else:
        pytest.skip("test setup: no backup root holds the older version of %s" % rel)
    ours = tmp_path / "ours"
    cp = T.ubtrfs("restore", "--generation", str(gen), str(img), str(ours))
    assert cp.returncode == 0, T.describe(cp)
    progs = {p.relative_to(theirs).as_posix() for p in theirs.rglob("*") if p.is_file()}
    mine = {p.relative_to(ours).as_posix() for p in ours.rglob("*") if p.is_file()}
    assert progs == mine, (sorted(progs ^ mine)[:5], T.describe(cp))
    for p in progs:
        assert (ours / p).read_bytes() == (theirs / p).read_bytes(), p
    assert (ours / rel).read_bytes() == before[rel]
