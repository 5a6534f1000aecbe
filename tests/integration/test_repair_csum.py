# SPDX-License-Identifier: MIT
"""`ubtrfs check --init-csum-tree` (issue 34): the checksum tree rebuilt from every copy of the data.

Kernel-made images (single and DUP data, RAID1 on two devices) hold files of several sizes,
one compressed (zstd), a NOCOW file (no checksums), and a snapshot sharing every extent
with its source, whose source was changed after it (partly referenced extents). Then:

- checksum items removed and cut short (craft.py): after the rebuild `btrfs check
  --check-data-csum` and `ubtrfs check --check-data-csum` are clean, the kernel reads every
  file with its original bytes and `rescue undo` gives back the damaged image byte for byte;
  `btrfs check --repair --init-csum-tree` on a copy of the damaged image leaves no more files
  reading their original bytes than ours does;
- one DUP copy of a sector damaged: its checksum is kept (a good copy proves it), so the
  kernel, finding the damaged copy bad, reads the good one;
- both copies damaged: the old checksum is kept and the file named; the kernel's read fails
  (EIO) instead of returning the damaged bytes, which btrfs check's rebuild blesses;
- a RAID1 mirror damaged: every copy is read, the bad one named at -v, the checksum kept;
- a RAID5 data strip damaged: the copy rebuilt from parity proves the old checksum;
- the old tree's root node unreadable: a new tree, the blocks below the node freed;
- no old checksum and DUP copies that differ: no checksum, the file named, exit 1;
- a dry run writes nothing and says per subvolume what it would rebuild.

Budget: about 40 s with -n 2.
"""

import errno
import hashlib
import os
import random
import re
import shutil

import pytest

import craft as C
import ubtrfs_testlib as T

MiB = T.MiB
SECTOR = 4096


def read_tree(top):
    """Every file's sha256, or 'EIO' when the kernel refuses to read it."""
    out = {}
    for root, dirs, files in os.walk(top):
        dirs.sort()
        for n in sorted(files):
            p = os.path.join(root, n)
            try:
                with open(p, "rb") as f:
                    out[os.path.relpath(p, top)] = hashlib.sha256(f.read()).hexdigest()
            except OSError as e:
                out[os.path.relpath(p, top)] = "EIO" if e.errno == errno.EIO else "error %d" % e.errno
    return out


def sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def first_extent(path):
    """The logical address (btrfs's) of the first extent of a file, from the kernel's FIEMAP."""
    out = T.run(["filefrag", "-v", "-b%d" % SECTOR, path]).stdout.decode()
    m = re.search(r"^\s*0:\s+\d+\.\.\s*\d+:\s+(\d+)\.\.", out, re.M)
    assert m, out
    return int(m.group(1)) * SECTOR


def copies_of(dev, logical):
    """[(devid, physical)] of every copy of `logical`, from btrfs's own dump of the chunk tree."""
    out = T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "chunk", str(dev)]).stdout.decode()
    for m in re.finditer(r"CHUNK_ITEM (\d+)\).*?\n\s+length (\d+) .*?type (\S+)\n(.*?)(?=\n\titem|\Z)", out, re.S):
        start, length = int(m.group(1)), int(m.group(2))
        if start <= logical < start + length and "DATA" in m.group(3):
            return [(int(d), int(o) + logical - start)
                    for d, o in re.findall(r"stripe \d+ devid (\d+) offset (\d+)", m.group(4))]
    raise AssertionError("logical %d in no data chunk" % logical)


def damage_copy(devs, logical, which):
    """Overwrite the first bytes of the sector at `logical` on the copies `which` (indices)."""
    for i, (devid, phys) in enumerate(copies_of(devs[0], logical)):
        if i in which:
            with open(devs[devid - 1], "r+b") as f:
                f.seek(phys)
                f.write(b"\xa5" * 64)


def make_image(d, profile, ndev=1):
    devs = [d / ("dev%d.img" % i) for i in range(ndev)]
    for p in devs:
        with open(p, "wb") as f:
            f.truncate(256 * MiB)
    meta = "raid1" if ndev > 1 else "dup"
    T.run(["mkfs.btrfs", "-f", "-q", "-d", profile, "-m", meta, *map(str, devs)])
    rnd = random.Random(34)
    where = {}
    with T.mounted(devs, d / "mnt", readonly=False) as m:
        os.makedirs(os.path.join(m, "d"))
        for i, size in enumerate((100, 5000, 70000, 300000, 1 << 20)):
            with open(os.path.join(m, "d", "f%d" % i), "wb") as f:
                f.write(rnd.randbytes(size))
        z = os.path.join(m, "d", "z")
        open(z, "wb").close()
        T.run(["btrfs", "property", "set", z, "compression", "zstd"])
        with open(z, "wb") as f:
            f.write(b"the same words again and again " * 20000)
        nocow = os.path.join(m, "nocow")
        open(nocow, "wb").close()
        T.run(["chattr", "+C", nocow])
        with open(nocow, "wb") as f:
            f.write(rnd.randbytes(256 * 1024))
        T.run(["btrfs", "subvolume", "snapshot", m, os.path.join(m, "snap")])
        # the source changes after the snapshot: its extents partly referenced, new ones
        with open(os.path.join(m, "d", "f3"), "r+b") as f:
            f.seek(8192)
            f.write(rnd.randbytes(4096))
            f.seek(0, 2)
            f.write(rnd.randbytes(3000))
        os.sync()
        for name in ("f2", "f4"):
            where[name] = first_extent(os.path.join(m, "d", name))
    with T.mounted(devs, d / "mnt", readonly=True) as m:
        files = read_tree(m)
    assert T.run(["btrfs", "check", "--readonly", str(devs[0])], check=False).returncode == 0
    return devs, files, where


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    made = {}
    dirs = []

    def get(profile):
        if profile not in made:
            d = tmp_path_factory.mktemp("csum-" + profile)
            dirs.append(d)
            made[profile] = make_image(d, profile, 2 if profile == "raid1" else 1)
        return made[profile]
    yield get
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)


def private(images, profile, tmp_path, name="fs"):
    devs, files, where = images(profile)
    mine = []
    for i, p in enumerate(devs):
        q = tmp_path / ("%s%d.img" % (name, i))
        T.copy_sparse(p, q)
        mine.append(q)
    return mine, files, where


def kernel_read(devs, mnt):
    with T.mounted(devs, mnt, readonly=True) as m:
        return read_tree(m)


def cut_csum_items(img):
    """The first checksum leaf loses its last item and half of its first one."""
    with C.Image(img) as im:
        root = im.tree_root(C.CSUM_TREE)[0]
        leaf = next(b for b, s in im.walk(root))
        assert leaf.nritems() >= 2, "the checksum tree's first leaf has too few items"
        data = leaf.item_data(0)
        leaf.set_item_data(0, data[:max(4, len(data) // 8 * 4)])
        leaf.delete_item(leaf.nritems() - 1)
        im.write_block(leaf)
    ref = T.run(["btrfs", "check", "--readonly", str(img)], check=False)
    assert ref.returncode != 0, "btrfs check calls the damage clean"


def init_csum(devs, *args):
    undo = devs[0].parent / "csum.undo"
    cp = T.ubtrfs("check", "--init-csum-tree", "--undo-file", str(undo), *args, *map(str, devs), timeout=120)
    return cp, undo


def correct(read, files):
    return {p for p, h in read.items() if files.get(p) == h}


@pytest.mark.parametrize("profile", ["single", "dup"])
def test_rebuild_after_damage(ubtrfs_bin, images, tmp_path, profile):
    devs, files, _ = private(images, profile, tmp_path)
    cut_csum_items(devs[0])
    damaged = sha(devs[0])
    cp, undo = init_csum(devs)
    out = cp.stdout.decode()
    assert cp.returncode == 0, T.describe(cp) + out[-3000:]
    assert "checksum tree rebuilt: tree 5:" in out and "checksum tree rebuilt: tree 256:" in out, out
    assert " 0 without a checksum" in out and " 0 old checksums no copy matches" in out, out
    ref = T.run(["btrfs", "check", "--readonly", "--check-data-csum", str(devs[0])], check=False)
    assert ref.returncode == 0, ref.stdout.decode()[-3000:] + ref.stderr.decode()[-3000:]
    cp2 = T.ubtrfs("check", "--check-data-csum", str(devs[0]))
    assert cp2.returncode == 0, T.describe(cp2) + cp2.stdout.decode()[-3000:]
    ours = kernel_read(devs, tmp_path / "mnt")
    assert ours == files
    cp3 = T.ubtrfs("rescue", "undo", str(undo), str(devs[0]))
    assert cp3.returncode == 0, T.describe(cp3)
    assert sha(devs[0]) == damaged
    # btrfs check's own rebuild, on the damaged image given back
    theirs_cp = T.run(["btrfs", "check", "--repair", "--force", "--init-csum-tree", str(devs[0])], check=False,
                      timeout=120)
    assert theirs_cp.returncode == 0, theirs_cp.stderr.decode()[-2000:]
    assert correct(ours, files) >= correct(kernel_read(devs, tmp_path / "mnt"), files)


def test_one_dup_copy_bad(ubtrfs_bin, images, tmp_path):
    """The first copy (the one read first) of a sector damaged: its checksum stays, the good copy is read."""
    devs, files, where = private(images, "dup", tmp_path)
    damage_copy(devs, where["f2"], {0})
    cp, _ = init_csum(devs, "-v")
    out, err = cp.stdout.decode(), cp.stderr.decode()
    assert cp.returncode == 0, T.describe(cp) + out[-3000:]
    assert "1 bad copies of good sectors" in out, out
    assert "/d/f2" in err and "copy 1 (devid 1" in err and "is bad in 1 sectors from logical %d" % where["f2"] in err, err
    assert kernel_read(devs, tmp_path / "mnt") == files


def test_both_dup_copies_bad(ubtrfs_bin, images, tmp_path):
    """No copy verifies the sector: the old checksum is kept, the file named, the read fails (EIO)."""
    devs, files, where = private(images, "dup", tmp_path)
    bad = where["f4"] + SECTOR
    damage_copy(devs, bad, {0, 1})
    damaged = tmp_path / "theirs.img"
    T.copy_sparse(devs[0], damaged)
    cp, _ = init_csum(devs)
    out = cp.stdout.decode()
    assert cp.returncode == 1, T.describe(cp) + out[-3000:]  # a sector left unreadable is a problem left
    assert "repair: 1 data sectors left that no copy verifies" in out, out
    assert re.search(r"inode \d+ \(/d/f4\) of tree 5, file offset 4096: 1 sectors from logical %d match their "
                     r"checksum on no copy; the checksum is kept" % bad, out), out
    assert "1 old checksums no copy matches (kept)" in out, out
    ours = kernel_read(devs, tmp_path / "mnt")
    assert ours["d/f4"] == "EIO" and ours["snap/d/f4"] == "EIO", ours
    assert {p: h for p, h in ours.items() if "f4" not in p} == {p: h for p, h in files.items() if "f4" not in p}
    # btrfs check's rebuild blesses the damaged bytes: the file reads, wrong
    theirs_cp = T.run(["btrfs", "check", "--repair", "--force", "--init-csum-tree", str(damaged)], check=False,
                      timeout=120)
    assert theirs_cp.returncode == 0, theirs_cp.stderr.decode()[-2000:]
    theirs = kernel_read([damaged], tmp_path / "mnt")
    assert theirs["d/f4"] not in ("EIO", files["d/f4"]), theirs
    assert correct(ours, files) >= correct(theirs, files)


def test_raid1_mirror_bad(ubtrfs_bin, images, tmp_path):
    devs, files, where = private(images, "raid1", tmp_path)
    damage_copy(devs, where["f2"], {1})
    cp, undo = init_csum(devs, "-v")
    out, err = cp.stdout.decode(), cp.stderr.decode()
    assert cp.returncode == 0, T.describe(cp) + out[-3000:]
    assert "1 bad copies of good sectors" in out, out
    assert "/d/f2" in err and "copy 2 (devid" in err, err
    assert kernel_read(devs, tmp_path / "mnt") == files
    cp2 = T.ubtrfs("check", *map(str, devs))
    assert cp2.returncode == 0, T.describe(cp2) + cp2.stdout.decode()[-3000:]


def test_dry_run_writes_nothing(ubtrfs_bin, images, tmp_path):
    devs, _, _ = private(images, "dup", tmp_path)
    cut_csum_items(devs[0])
    before = sha(devs[0])
    cp = T.ubtrfs("check", "--init-csum-tree", "--dry-run", str(devs[0]))
    out = cp.stdout.decode()
    assert cp.returncode == 1, T.describe(cp)
    assert "would rebuild the checksum tree: tree 5:" in out and "would rebuild the checksum tree: tree 256:" in out
    assert "checksum tree would hold" in out and "dry run: nothing written" in out, out
    assert sha(devs[0]) == before
    assert not list(tmp_path.glob("*.undo")) and not list(tmp_path.glob("ubtrfs-undo-*"))


def test_old_tree_unreadable(ubtrfs_bin, tmp_path):
    """The old tree's root node fails its checksum on both copies: a new tree from the data, and the
    blocks below the node (found through the extent tree) freed, so both checkers are clean."""
    img = tmp_path / "big.img"
    with open(img, "wb") as f:
        f.truncate(256 * MiB)
    T.run(["mkfs.btrfs", "-f", "-q", str(img)])
    with T.mounted([img], tmp_path / "mnt", readonly=False) as m:
        with open(os.path.join(m, "big"), "wb") as f:
            f.write(random.Random(7).randbytes(40 * MiB))  # checksums for several leaves: a two-level tree
        with open(os.path.join(m, "small"), "wb") as f:
            f.write(b"x" * 9000)
    files = kernel_read([img], tmp_path / "mnt")
    with C.Image(img) as im:
        root, level = im.tree_root(C.CSUM_TREE)
        assert level == 1
        for p in im.physical(root):
            im._pwrite(p + 200, b"\x13" * 32)
    damaged = sha(img)
    cp, undo = init_csum([img])
    out = cp.stdout.decode()
    assert cp.returncode == 0, T.describe(cp) + out[-3000:]
    assert re.search(r"1 nodes of the old checksum tree cannot be read: [1-9]\d* blocks below them found", out), out
    assert "the old checksum tree could not be read everywhere" in out, out
    ref = T.run(["btrfs", "check", "--readonly", "--check-data-csum", str(img)], check=False)
    assert ref.returncode == 0, ref.stdout.decode()[-3000:] + ref.stderr.decode()[-3000:]
    assert kernel_read([img], tmp_path / "mnt") == files
    cp = T.ubtrfs("rescue", "undo", str(undo), str(img))
    assert cp.returncode == 0 and sha(img) == damaged, T.describe(cp)


def raid5_data_copy(devs, logical):
    """(device path, physical) of the data strip holding `logical` in a RAID5 chunk (stripe rotation as the
    kernel's: the data strips of full stripe k start at device stripe k mod n)."""
    out = T.ubtrfs("dump-tree", "-t", "chunk", *map(str, devs)).stdout.decode()
    for m in re.finditer(r"CHUNK_ITEM (\d+)\).*?\n\s+length (\d+) .*?type (\S+)\n(.*?)(?=\n\titem|\Z)", out, re.S):
        start, length = int(m.group(1)), int(m.group(2))
        if start <= logical < start + length and "RAID5" in m.group(3):
            stripes = [(int(d), int(o)) for d, o in re.findall(r"stripe \d+ devid (\d+) offset (\d+)", m.group(4))]
            unit, ndata = 65536, len(stripes) - 1
            off = logical - start
            k, j = off // (unit * ndata), off % (unit * ndata) // unit
            devid, base = stripes[(k + j) % len(stripes)]
            return devs[devid - 1], base + k * unit + off % unit
    raise AssertionError("logical %d in no RAID5 chunk" % logical)


def test_raid5_copy_rebuilt_from_parity(ubtrfs_bin, tmp_path):
    """RAID5: a data strip's sector damaged; the copy rebuilt from P proves the old checksum, which stays,
    so the kernel rebuilds the sector from parity and reads the original bytes."""
    devs = [tmp_path / ("r%d.img" % i) for i in range(3)]
    for p in devs:
        with open(p, "wb") as f:
            f.truncate(256 * MiB)
    T.run(["mkfs.btrfs", "-f", "-q", "-d", "raid5", "-m", "raid1", *map(str, devs)])
    with T.mounted(devs, tmp_path / "mnt", readonly=False) as m:
        with open(os.path.join(m, "f"), "wb") as f:
            f.write(random.Random(5).randbytes(MiB))
        os.sync()
        at = first_extent(os.path.join(m, "f"))
    files = kernel_read(devs, tmp_path / "mnt")
    path, phys = raid5_data_copy(devs, at)
    with open(path, "r+b") as f:
        f.seek(phys)
        f.write(b"\x5a" * 64)
    cp, _ = init_csum(devs, "-v")
    out, err = cp.stdout.decode(), cp.stderr.decode()
    assert cp.returncode == 0, T.describe(cp) + out[-3000:]
    # the damaged sector's own copy, and the copy of the sector beside it in the row rebuilt through it
    assert "2 bad copies of good sectors" in out and " 0 old checksums no copy matches" in out, out
    assert "(/f) of tree 5, file offset 0: copy 1 (devid" in err, err
    assert kernel_read(devs, tmp_path / "mnt") == files


def test_copies_differ_without_old_checksum(ubtrfs_bin, images, tmp_path):
    """The old tree unreadable and the two DUP copies of a sector different: nothing tells which is
    right, so the sector gets no checksum, the file is named and the exit code says a problem is left."""
    devs, files, where = private(images, "dup", tmp_path)
    with C.Image(devs[0]) as im:
        root, _ = im.tree_root(C.CSUM_TREE)
        for p in im.physical(root):
            im._pwrite(p + 200, b"\x13" * 32)
    damage_copy(devs, where["f2"], {0})
    cp, _ = init_csum(devs)
    out = cp.stdout.decode()
    assert cp.returncode == 1, T.describe(cp) + out[-3000:]
    assert re.search(r"inode \d+ \(/d/f2\) of tree 5, file offset 0: 1 sectors from logical %d have no checksum "
                     r"and copies that differ: none is written" % where["f2"], out), out
    assert "(copies differ: 1, unreadable: 0)" in out and "1 data sectors left that no copy verifies" in out, out
    # every other file reads as it did
    ours = kernel_read(devs, tmp_path / "mnt")
    assert {p: h for p, h in ours.items() if "f2" not in p} == {p: h for p, h in files.items() if "f2" not in p}
