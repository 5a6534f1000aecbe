# SPDX-License-Identifier: MIT
"""`ubtrfs check` after the correctness sweep (issue 28): states the kernel makes in normal
life that are no problem, damage that must not pass, and a bad superblock copy that must not
hide a good filesystem.

Oracles: the kernel and `btrfs check --readonly` for the states the kernel makes (each must
be clean for both checkers: btrfs check on the same image is asserted too); for crafted
damage (craft.py, block checksums rewritten so the damage is read) `btrfs check` where it
catches the damage, else the test's own record of what it broke. A setup that did not reach
the state a test is about skips with the reason.
"""

import os
import random
import re
import struct

import pytest

import craft as C
import multidev_lib as M
import ubtrfs_testlib as T
from test_check import check, problems, btrfs_check


def progs_check_devices(imgs, *opts):
    """btrfs check on a (multi-device) filesystem: its images attached and scanned. (exit code, text);
    a scan error about a loop device that is not ours (another test's) is dropped."""
    with M.attached(imgs, readonly=True) as loops:
        T.run(["btrfs", "device", "scan", *loops], check=False)
        cp = T.run(["btrfs", "check", "--readonly", *opts, loops[0]], check=False, timeout=300)
    text = (cp.stdout + cp.stderr).decode("utf-8", "replace")
    lines = []
    for ln in text.splitlines():
        m = re.match(r"ERROR: cannot (?:scan|open) (/dev/\S+?):", ln)
        if not (m and m.group(1) not in loops):
            lines.append(ln)
    return cp.returncode, "\n".join(lines)


def sparse(path, size):
    with open(path, "wb") as f:
        f.truncate(size)
    return str(path)


# ---------------------------------------------------------------- RAID5 after balances

def _extents(imgs):
    """[(start, length)] of every extent item (data and tree blocks), from ubtrfs' dump of the
    extent tree (its format is btrfs-progs')."""
    out = T.ubtrfs("dump-tree", "-t", "extent", *imgs).stdout.decode()
    nodesize = int(re.search(r"nodesize\s+(\d+)", T.ubtrfs("dump-super", imgs[0]).stdout.decode()).group(1))
    ext = []
    for obj, typ, off in re.findall(r"key \((\d+) (EXTENT_ITEM|METADATA_ITEM) (\d+)\)", out):
        ext.append((int(obj), nodesize if typ == "METADATA_ITEM" else int(off)))
    return ext


def _unwritten_parity_rows(imgs, sectorsize=4096):
    """Sector rows of RAID5 full stripes that hold an extent, where no extent lies in the row and
    P is not the XOR of the row's data: what a kernel balance leaves. [(logical of the full
    stripe, row)] and the same for rows that hold live data (which must be none)."""
    chunks = M.parse_chunks(T.ubtrfs("dump-tree", "-t", "chunk", *imgs).stdout.decode())
    extents = _extents(imgs)
    devs = {i + 1: open(p, "rb") for i, p in enumerate(imgs)}
    dead, live_bad = [], []
    try:
        for ch in chunks:
            if ch.profile != "raid5":
                continue
            sl, nd = ch.stripe_len, ch.ndata
            full_len = sl * nd
            rows = {}  # full stripe -> set of live rows
            for start, length in extents:
                s, e = max(start, ch.logical), min(start + length, ch.logical + ch.length)
                while s < e:
                    off = s - ch.logical
                    unit_end = (off // sl + 1) * sl
                    stop = min(e - ch.logical, unit_end)
                    full = off // full_len
                    for r in range((off % sl) // sectorsize, (stop - 1) % sl // sectorsize + 1):
                        rows.setdefault(full, set()).add(r)
                    s = ch.logical + stop
            for full, live in rows.items():
                row = ch.raid56_row(ch.logical + full * full_len)
                strips = []
                for devid, phys in row["data"] + [row["p"]]:
                    devs[devid].seek(phys)
                    strips.append(devs[devid].read(sl))
                for r in range(sl // sectorsize):
                    a = r * sectorsize
                    x = bytearray(sectorsize)
                    for strip in strips[:-1]:
                        x = bytearray(i ^ j for i, j in zip(x, strip[a:a + sectorsize]))
                    if bytes(x) != strips[-1][a:a + sectorsize]:
                        (live_bad if r in live else dead).append((row["full_start"], r))
    finally:
        for f in devs.values():
            f.close()
    return dead, live_bad


def test_raid5_unwritten_rows_clean(ubtrfs_bin, tmp_path):
    """A RAID5 filesystem made by mkfs.btrfs on devices that held other bytes (no discard), then
    written by the kernel: the kernel computes P only for the sector rows a write touches, so the
    rows of a full stripe no write touched keep the old bytes under a parity nobody computed (the
    state a balance leaves too, when a new chunk lands where an old one was). check
    --check-data-csum compares P only in rows that hold live data; btrfs check is clean too."""
    imgs = [sparse(tmp_path / ("r5.%d.img" % i), 256 * T.MiB) for i in range(3)]
    with M.attached(imgs) as loops:
        T.run(["mkfs.btrfs", "-q", "-f", "-K", "-d", "raid5", "-m", "raid5", *loops])
    rng = random.Random(28)
    with T.mounted(imgs, tmp_path / "mnt", readonly=False) as mnt:
        with open(os.path.join(mnt, "first"), "wb") as f:
            f.write(rng.randbytes(5000))
    # after the first file, 2 MiB of every device of the data chunk: what an older filesystem left
    # there (the kernel's next data goes right after the first file)
    chunks = M.parse_chunks(T.ubtrfs("dump-tree", "-t", "chunk", *imgs).stdout.decode())
    data = [c for c in chunks if c.kind == "data"]
    assert len(data) == 1 and data[0].profile == "raid5", chunks
    first, length = min((start, n) for start, n in _extents(imgs) if data[0].contains(start))
    sl = data[0].stripe_len
    full, in_full = divmod(first + length - data[0].logical, sl * data[0].ndata)
    assert in_full <= sl, "test setup: the first file spans two strips"
    # every strip of that full stripe (data and P), from the first row past the first file on
    for devid, phys in data[0].stripes:
        with open(imgs[devid - 1], "r+b") as f:
            f.seek(phys + full * sl + in_full)
            f.write(rng.randbytes(2 * T.MiB))
    with T.mounted(imgs, tmp_path / "mnt", readonly=False) as mnt:
        for i, size in enumerate((5000, 9000, 12000)):
            with open(os.path.join(mnt, "f%d" % i), "wb") as f:
                f.write(rng.randbytes(size))
            T.run(["sync"])
    dead, live_bad = _unwritten_parity_rows(imgs)
    assert not live_bad, "test setup: parity differs in rows with live data: %r" % live_bad[:5]
    if not dead:
        pytest.skip("test setup: no row of a full stripe with data kept bytes under a parity the kernel did not write")
    cp = check("--json", "--check-data-csum", *imgs)
    recs, summary = problems(cp)
    assert cp.returncode == 0 and not recs, "%d rows without live data differ from P\n%s" % (
        len(dead), "\n".join(r["message"] for r in recs[:10]))
    assert summary["parity_stripes"] > 0, summary
    rc, text = progs_check_devices(imgs, "--check-data-csum")
    assert rc == 0, text[-3000:]


# ---------------------------------------------------------------- superblocks one commit behind

SB_GEN = 72  # the superblock's generation field


def _supers(img):
    """{offset: the 4 KiB superblock copy} of every copy the image's size holds."""
    out = {}
    size = os.path.getsize(img)
    with open(img, "rb") as f:
        for off in C.SUPER_OFFSETS:
            if off + C.SUPER_SIZE <= size:
                f.seek(off)
                out[off] = f.read(C.SUPER_SIZE)
    return out


def _gen(sb):
    return struct.unpack_from("<Q", sb, SB_GEN)[0]


def _put(img, off, sb):
    with open(img, "r+b") as f:
        f.seek(off)
        f.write(sb)


def _commit(imgs, mnt, name):
    """One mount that changes a file: the kernel commits (at least) once."""
    with T.mounted(imgs, mnt, readonly=False) as m:
        with open(os.path.join(m, name), "wb") as f:
            f.write(name.encode() * 100)


def _kernel_reads(imgs, mnt):
    with T.mounted(imgs, mnt) as m:
        return sorted(os.listdir(m))


@pytest.fixture
def one_device(tmp_path):
    """A kernel-made filesystem on a 128 MiB image (room for the 64 MiB mirror copy)."""
    img = sparse(tmp_path / "sb.img", 128 * T.MiB)
    T.run(["mkfs.btrfs", "-q", "-f", img])
    _commit([img], tmp_path / "mnt", "a")
    return img


def test_super_mirror_one_commit_behind(ubtrfs_bin, one_device, tmp_path):
    """A crash between the superblock writes of one commit leaves the mirror copy one generation
    behind the primary: the kernel mounts it and btrfs check is clean; ubtrfs check says so at -v
    and exits 0. Two commits behind (copies the commits missed) stays a problem."""
    img = one_device
    old = _supers(img)[C.SUPER_OFFSETS[1]]
    _commit([img], tmp_path / "mnt", "b")
    gen = _gen(_supers(img)[C.SUPER_OFFSETS[0]])
    if gen != _gen(old) + 1:
        pytest.skip("test setup: the mount committed %d times" % (gen - _gen(old)))
    _put(img, C.SUPER_OFFSETS[1], old)
    assert btrfs_check(img).returncode == 0
    assert _kernel_reads([img], tmp_path / "ro") == ["a", "b"]
    cp = check("--json", img)
    recs, summary = problems(cp)
    assert cp.returncode == 0 and not recs, recs
    cp = check("-v", img)
    assert cp.returncode == 0 and b"one commit behind" in cp.stderr, T.describe(cp)
    # two commits behind: a copy the commits missed
    _commit([img], tmp_path / "mnt", "c")
    gen = _gen(_supers(img)[C.SUPER_OFFSETS[0]])
    _put(img, C.SUPER_OFFSETS[1], old)
    cp = check("--json", img)
    recs, _ = problems(cp)
    assert cp.returncode == 1, T.describe(cp)
    assert [(r["class"], r["physical"]) for r in recs] == [("super", C.SUPER_OFFSETS[1])], recs
    assert "generation %d" % _gen(old) in recs[0]["message"] and str(gen) in recs[0]["message"], recs


def test_super_device_one_commit_behind(ubtrfs_bin, tmp_path):
    """RAID1 on two devices, the second device's superblocks one commit behind (a crash between
    the devices' superblock writes): the kernel mounts it, btrfs check is clean, ubtrfs check
    exits 0 (-v says it). A device two commits behind stays a problem ("stale superblock")."""
    imgs = [sparse(tmp_path / ("m.%d.img" % i), 128 * T.MiB) for i in range(2)]
    with M.attached(imgs) as loops:
        T.run(["mkfs.btrfs", "-q", "-f", "-d", "raid1", "-m", "raid1", *loops])
    _commit(imgs, tmp_path / "mnt", "a")
    old = _supers(imgs[1])
    _commit(imgs, tmp_path / "mnt", "b")
    gen = _gen(_supers(imgs[0])[C.SUPER_OFFSETS[0]])
    if gen != _gen(old[C.SUPER_OFFSETS[0]]) + 1:
        pytest.skip("test setup: the mount committed %d times" % (gen - _gen(old[C.SUPER_OFFSETS[0]])))
    saved = {i: _supers(p) for i, p in enumerate(imgs)}
    for off, sb in old.items():
        _put(imgs[1], off, sb)
    rc, text = progs_check_devices(imgs)
    assert rc == 0, text[-3000:]
    assert _kernel_reads(imgs, tmp_path / "ro") == ["a", "b"]
    cp = check("--json", "--no-scan", *imgs)
    recs, _ = problems(cp)
    assert cp.returncode == 0 and not recs, recs
    cp = check("-v", "--no-scan", *imgs)
    assert cp.returncode == 0 and b"one commit behind" in cp.stderr, T.describe(cp)
    # the same device two commits behind: it missed a commit
    for i, p in enumerate(imgs):
        for off, sb in saved[i].items():
            _put(p, off, sb)
    _commit(imgs, tmp_path / "mnt", "c")
    for off, sb in old.items():
        _put(imgs[1], off, sb)
    cp = check("--json", "--no-scan", *imgs)
    recs, _ = problems(cp)
    assert cp.returncode == 1, T.describe(cp)
    assert any(r["class"] == "super" and "stale superblock" in r["message"] for r in recs), recs


# ---------------------------------------------------------------- a bad system chunk array

def _break_stripe_len(buf, item):
    struct.pack_into("<Q", buf, item + 16, 0)


def _break_num_stripes(buf, item):
    struct.pack_into("<H", buf, item + 44, 0xFFFF)


def _break_garbage(buf, item):
    n = struct.unpack_from("<I", buf, C.SB["sys_chunk_array_size"])[0]
    base = C.SB["sys_chunk_array"]
    buf[base:base + n] = random.Random(28).randbytes(n)


@pytest.mark.parametrize("how", [_break_stripe_len, _break_num_stripes, _break_garbage],
                         ids=["stripe_len_0", "num_stripes_ffff", "garbage"])
def test_bad_sys_chunk_array_primary(ubtrfs_bin, one_device, tmp_path, how):
    """The primary superblock's system chunk array holds a bad entry (checksum valid), the mirror
    copy is intact: the primary fails validation as a bad checksum would and every command reads
    through the mirror (as --super 1 does); check names the bad copy (class super) and exits 1.
    No referee: the kernel and btrfs check read the primary only; the mirror's own reading
    (--super 1) and the test's record of what it broke are the oracles."""
    img = one_device
    want = T.ubtrfs("ls", "-R", "--super", "1", img)
    assert want.returncode == 0 and b"a" in want.stdout, T.describe(want)
    with C.Image(img) as im:
        (_, item, _), = im.sys_chunk_array()
        im.edit_super(lambda buf: how(buf, item), copies=[C.SUPER_OFFSETS[0]])
    got = T.ubtrfs("ls", "-R", img)
    assert got.returncode == 0 and got.stdout == want.stdout, T.describe(got)
    assert b"system chunk array" in got.stderr and b"mirror 1" in got.stderr, T.describe(got)
    cp = check("--json", img)
    recs, summary = problems(cp)
    assert cp.returncode == 1 and summary["opened"], T.describe(cp)
    assert [(r["class"], r["physical"]) for r in recs] == [("super", C.SUPER_OFFSETS[0])], recs
    assert "system chunk array" in recs[0]["message"], recs


# ---------------------------------------------------------------- quotas and a deleted subvolume

def test_qgroup_deleted_subvolume_not_cleaned(ubtrfs_bin, tmp_path):
    """A subvolume deleted (its snapshot keeps the data), then quotas enabled and rescanned, then
    unmounted before the cleaner dropped it: the kernel made qgroups for the linked subvolumes
    only, so the dead one has none. btrfs check is clean; so is ubtrfs check (no "subvolume N has
    no qgroup"), and the counts are still compared."""
    img = sparse(tmp_path / "q.img", 128 * T.MiB)
    T.run(["mkfs.btrfs", "-q", "-f", img])
    rng = random.Random(28)
    with T.mounted([img], tmp_path / "mnt", readonly=False) as mnt:
        T.run(["btrfs", "subvolume", "create", os.path.join(mnt, "sv")])
        for i in range(30):
            with open(os.path.join(mnt, "sv", "f%d" % i), "wb") as f:
                f.write(rng.randbytes(20000))
        T.run(["btrfs", "subvolume", "snapshot", os.path.join(mnt, "sv"), os.path.join(mnt, "snap")])
        T.run(["sync"])
        T.run(["btrfs", "subvolume", "delete", os.path.join(mnt, "sv")])
        T.run(["btrfs", "quota", "enable", mnt])
        T.run(["btrfs", "quota", "rescan", "-w", mnt])
    roots = T.ubtrfs("dump-tree", "-t", "root", img).stdout.decode()
    m = re.search(r"key \(256 ROOT_ITEM 0\).*?refs (\d+)\s+drop_progress key \((\d+) ", roots, re.S)
    if not m or m.group(1) != "0" or m.group(2) != "0":
        pytest.skip("test setup: the cleaner dropped (or began to drop) the deleted subvolume")
    quota = T.ubtrfs("dump-tree", "-t", "quota", img).stdout.decode()
    if "QGROUP_INFO 0/256" in quota:
        pytest.skip("test setup: the deleted subvolume has a qgroup")
    assert btrfs_check(img).returncode == 0
    cp = check("--json", img)
    recs, summary = problems(cp)
    assert cp.returncode == 0 and not recs, recs
    assert summary["qgroups"] >= 2, summary


# ---------------------------------------------------------------- crafted damage

FREE_SPACE_TREE, FREE_SPACE_INFO, FREE_SPACE_EXTENT = 10, 198, 199


@pytest.fixture
def base(factory, tmp_path):
    """A private copy of a small mkfs.btrfs --rootdir image (DUP metadata, 16 KiB nodes)."""
    dst = tmp_path / "damaged.img"
    T.copy_sparse(factory.image("damage-base").devices[0], dst)
    return dst


def damaged(img, edit, refereed=True):
    """Apply `edit` (a craft.Image callback); btrfs check must call it damage when `refereed`;
    ubtrfs check must exit 1. Its records."""
    with C.Image(img) as im:
        edit(im)
    if refereed:
        ref = btrfs_check(img)
        assert ref.returncode != 0, "the referee calls the damage clean:\n" + ref.stdout.decode()[-2000:]
    cp = check("--json", img)
    recs, _ = problems(cp)
    assert cp.returncode == 1, T.describe(cp) + cp.stdout.decode()[-3000:]
    return recs


def unrefereed_check(img, edit):
    """Damage btrfs check does not look at: the test's own record of what it broke is the oracle."""
    return damaged(img, edit, refereed=False)


def test_free_space_info_says_bitmaps(ubtrfs_bin, base):
    """A block group's FREE_SPACE_INFO says "using bitmaps" while the group holds extent items
    (btrfs check catches it)."""
    where = {}

    def edit(im):
        root = im.tree_root(FREE_SPACE_TREE)[0]
        first = min(c.logical for c in im.chunks)
        items = im.find_items(root, lambda k: k.type in (FREE_SPACE_INFO, FREE_SPACE_EXTENT) and k.objectid >= first)
        groups = {}
        for blk, slot in items:
            k = blk.item_key(slot)
            if k.type == FREE_SPACE_INFO:
                groups[k.objectid] = (blk.logical, slot, k.offset)
        for blk, slot in items:
            k = blk.item_key(slot)
            owner = [g for g, (_, _, n) in groups.items() if g <= k.objectid < g + n]
            if k.type == FREE_SPACE_EXTENT and owner:
                where["bg"] = owner[0]
                break
        assert where, "no block group with free space extents"
        logical, slot, _ = groups[where["bg"]]
        blk = im.read_block(logical)
        blk.patch_item(slot, 4, "<I", blk.get_item(slot, 4, "<I") | 1)
        im.write_block(blk)
    recs = damaged(base, edit)
    assert any(r["class"] == "free-space" and "says it uses bitmaps" in r["message"]
               and str(where["bg"]) in r["message"] for r in recs), recs


TREE_BLOCK_REF, SHARED_BLOCK_REF = 176, 182
EXTENT_ITEM_FLAGS, FULL_BACKREF = 16, 0x100


def _metadata_item(im, bytenr):
    """(Block, slot, offset of the first inline reference) of the extent item of tree block `bytenr`."""
    for blk, slot in im.walk(im.tree_root(C.EXTENT_TREE)[0]):
        k = blk.item_key(slot)
        if k.objectid == bytenr and k.type == C.METADATA_ITEM:
            return blk, slot, 24
        if k.objectid == bytenr and k.type == C.EXTENT_ITEM:
            return blk, slot, 24 + 18  # after the tree block info
    raise AssertionError("no extent item for %d" % bytenr)


def _self_shared_ref(im, bytenr):
    """The block's only reference becomes a SHARED_BLOCK_REF naming the block itself (its extent
    item keeps no FULL_BACKREF flag)."""
    blk, slot, at = _metadata_item(im, bytenr)
    assert blk.get_item(slot, 0, "<Q") == 1, "the block has more than one reference"
    assert not blk.get_item(slot, EXTENT_ITEM_FLAGS, "<Q") & FULL_BACKREF
    assert blk.get_item(slot, at, "<B") == TREE_BLOCK_REF
    blk.patch_item(slot, at, "<B", SHARED_BLOCK_REF)
    blk.patch_item(slot, at + 1, "<Q", bytenr)
    im.write_block(blk)


@pytest.mark.parametrize("tree", ["chunk", "fs"])
def test_root_block_shared_ref_to_itself(ubtrfs_bin, base, tree):
    """A root block (the chunk tree's, the fs tree's) whose only back reference is a
    SHARED_BLOCK_REF naming itself, without the FULL_BACKREF flag: the counts add up, but nothing
    accounts for the tree that reaches it (btrfs check catches it)."""
    where = {}

    def edit(im):
        where["bytenr"] = im.super("chunk_root") if tree == "chunk" else im.tree_root(C.FS_TREE)[0]
        _self_shared_ref(im, where["bytenr"])
    recs = damaged(base, edit)
    mine = [r for r in recs if r["class"] == "extent" and r["logical"] == where["bytenr"]]
    assert any("names the block itself" in r["message"] for r in mine), recs
    assert any("no reference of the block accounts for it" in r["message"] for r in mine), recs


def test_tree_block_ref_of_another_tree(ubtrfs_bin, factory, tmp_path):
    """A tree block two trees reach (a snapshot shares it), its two TREE_BLOCK_REFs both naming
    one of them: each reference names a tree that reaches the block and the count is right, but
    the other tree's pointer has no reference."""
    img = tmp_path / "subvol.img"
    T.copy_sparse(factory.image("kernel-subvol-zstd").devices[0], img)
    where = {}

    def edit(im):
        for blk, slot in im.walk(im.tree_root(C.EXTENT_TREE)[0]):
            k = blk.item_key(slot)
            if k.type != C.METADATA_ITEM or blk.get_item(slot, 0, "<Q") != 2:
                continue
            refs = [(blk.get_item(slot, 24 + 9 * i, "<B"), blk.get_item(slot, 25 + 9 * i, "<Q")) for i in range(2)]
            if all(t == TREE_BLOCK_REF for t, _ in refs) and refs[0][1] != refs[1][1]:
                where.update(bytenr=k.objectid, kept=refs[0][1], lost=refs[1][1])
                blk.patch_item(slot, 25 + 9, "<Q", refs[0][1])
                im.write_block(blk)
                return
        pytest.skip("test setup: no tree block with two TREE_BLOCK_REFs of two trees")
    with C.Image(img) as im:
        edit(im)
    ref = btrfs_check(img)
    cp = check("--json", img)
    recs, _ = problems(cp)
    assert cp.returncode == 1, T.describe(cp) + cp.stdout.decode()[-3000:]
    assert ref.returncode != 0, "the referee calls the damage clean:\n" + ref.stdout.decode()[-2000:]
    assert any(r["class"] == "extent" and r["logical"] == where["bytenr"]
               and "no reference of the block accounts for it" in r["message"] for r in recs), recs


ROOT_ITEM_PARENT_UUID = 263


def test_snapshot_root_extent_generation(ubtrfs_bin, factory, tmp_path):
    """A snapshot's root block whose extent item says another generation than the block's
    header (the extent item is made with the block, in its transaction); btrfs check catches it."""
    img = tmp_path / "subvol.img"
    T.copy_sparse(factory.image("kernel-subvol-zstd").devices[0], img)
    where = {}

    def edit(im):
        snaps = [(oid, blk, slot) for (oid, _), (blk, slot) in sorted(im.root_items().items())
                 if oid >= C.FIRST_FREE_OBJECTID
                 and blk.item_data(slot)[ROOT_ITEM_PARENT_UUID:ROOT_ITEM_PARENT_UUID + 16] != bytes(16)]
        assert snaps, "no snapshot in the image"
        oid, blk, slot = snaps[0]
        bytenr = blk.get_item(slot, C.ROOT_ITEM_BYTENR, "<Q")
        gen = im.read_block(bytenr).generation()
        eblk, eslot, _ = _metadata_item(im, bytenr)
        assert eblk.get_item(eslot, 8, "<Q") == gen
        eblk.patch_item(eslot, 8, "<Q", gen - 1)
        im.write_block(eblk)
        where.update(bytenr=bytenr, gen=gen)
    recs = damaged(img, edit)
    assert any(r["class"] == "extent" and r["logical"] == where["bytenr"] and "generation %d" % (where["gen"] - 1)
               in r["message"] and "header says %d" % where["gen"] in r["message"] for r in recs), recs


def test_dir_item_location_type(ubtrfs_bin, base):
    """A DIR_ITEM whose location key has type 0 (the tree checker lets it through, a lookup of
    the name refuses it) while its DIR_INDEX is right: named as such, at the DIR_ITEM (btrfs
    check: "unknown location type 0")."""
    where = {}

    def edit(im):
        for blk, slot in im.walk(im.tree_root(C.FS_TREE)[0]):
            k = blk.item_key(slot)
            if k.type == C.DIR_ITEM and blk.get_item(slot, 8, "<B") == C.INODE_ITEM:
                where.update(key=[k.objectid, k.type, k.offset], ino=blk.get_item(slot, 0, "<Q"))
                blk.patch_item(slot, 8, "<B", 0)
                im.write_block(blk)
                return
        raise AssertionError("no DIR_ITEM")
    recs = damaged(base, edit)
    assert [(r["class"], r["key"], r["inode"]) for r in recs] == [("fs", where["key"], where["ino"])], recs
    assert "location key type 0" in recs[0]["message"], recs


def _rename_to(im, root, ino, dirino, old, new):
    """Give inode `ino`'s name `old` in directory `dirino` the name `new` (same length): its
    INODE_REF and DIR_INDEX renamed, its DIR_ITEM entry moved into the DIR_ITEM of `new`'s hash."""
    assert len(old) == len(new)
    for blk, slot in im.walk(root):
        k = blk.item_key(slot)
        if k.type == C.INODE_REF and k.objectid == ino and k.offset == dirino:
            (index, name), = C.parse_inode_refs(blk.item_data(slot))
            assert name == old
            blk.set_item_data(slot, C.inode_ref(index, new))
            im.write_block(blk)
            break
    for blk, slot in im.walk(root):
        k = blk.item_key(slot)
        if k.type == C.DIR_INDEX and k.objectid == dirino:
            (loc, transid, ftype, name, _), = C.parse_dir_item(blk.item_data(slot))
            if loc.objectid == ino:
                blk.set_item_data(slot, C.dir_item(loc, transid, new, ftype))
                im.write_block(blk)
                break
    entry = None
    for blk, slot in im.walk(root):
        k = blk.item_key(slot)
        if k == (dirino, C.DIR_ITEM, C.name_hash(old)):
            (loc, transid, ftype, name, _), = C.parse_dir_item(blk.item_data(slot))
            if slot == 0:
                pytest.skip("test setup: the DIR_ITEM to remove starts its leaf")
            entry = C.dir_item(loc, transid, new, ftype)
            blk.delete_item(slot)
            im.write_block(blk)
            break
    blk, slot = im.find_item(root, (dirino, C.DIR_ITEM, C.name_hash(new)))
    blk.set_item_data(slot, blk.item_data(slot) + entry)
    im.write_block(blk)


def test_two_entries_one_name(ubtrfs_bin, base):
    """Two files of one directory with the same name, every item consistent otherwise (each
    inode's INODE_REF, DIR_INDEX and DIR_ITEM entry agree): a directory lists a name once
    (btrfs check misses it: the test's record is the oracle)."""
    where = {}

    def edit(im):
        root = im.tree_root(C.FS_TREE)[0]
        files = {}
        for blk, slot in im.walk(root):
            k = blk.item_key(slot)
            if k.type == C.DIR_INDEX:
                (loc, _, ftype, name, _), = C.parse_dir_item(blk.item_data(slot))
                if ftype == C.FT_REG_FILE:
                    files.setdefault((k.objectid, len(name)), []).append((loc.objectid, name))
        for (dirino, _), v in sorted(files.items()):
            if len(v) >= 2:
                (a, aname), (b, bname) = v[0], v[1]
                _rename_to(im, root, b, dirino, bname, aname)
                where.update(dir=dirino, a=a, b=b, name=aname)
                return
        raise AssertionError("no directory with two files of one name length")
    recs = unrefereed_check(base, edit)
    assert any(r["class"] == "fs" and r["key"] == [where["dir"], C.DIR_ITEM, C.name_hash(where["name"])]
               and "two entries named" in r["message"] and str(where["a"]) in r["message"]
               and str(where["b"]) in r["message"] for r in recs), recs


DEV_TREE = 4


def test_chunk_in_first_mib(ubtrfs_bin, base):
    """A data chunk whose stripe (and device extent) starts in the device's first MiB, which holds
    the primary superblock and which no tool gives to a chunk; its bytes moved along, so the rest
    is consistent (btrfs check misses it: the test's record is the oracle)."""
    where = {}

    def edit(im):
        first = min((c for c in im.chunks if c.stripes[0][1] == T.MiB), key=lambda c: c.logical, default=None)
        if first is None or not first.type & C.BLOCK_GROUP_DATA or len(first.stripes) != 1:
            pytest.skip("test setup: no single data chunk at 1 MiB")
        dev_root = im.tree_root(DEV_TREE)[0]
        if not im.read_block(dev_root).is_leaf:
            pytest.skip("test setup: the device tree is more than one leaf")
        new = T.MiB - 64 * 1024
        # the chunk's bytes move down with it
        data = im._pread(T.MiB, first.length)
        im._pwrite(new, data)
        blk, slot = im.find_item(im.super("chunk_root"), (256, C.CHUNK_ITEM, first.logical))
        blk.patch_item(slot, 48 + 8, "<Q", new)
        im.write_block(blk)
        blk, slot = im.find_item(dev_root, (1, C.DEV_EXTENT, T.MiB))
        blk.set_item_key(slot, C.Key(1, C.DEV_EXTENT, new))
        im.write_block(blk)
        where.update(chunk=first.logical, physical=new)
    recs = unrefereed_check(base, edit)
    assert recs and all("first MiB" in r["message"] and r["physical"] == where["physical"] for r in recs), recs
    assert {r["class"] for r in recs} == {"chunk"} and len(recs) == 2, recs
    assert any(r["tree"] == DEV_TREE for r in recs) and any(r["tree"] == C.CHUNK_TREE for r in recs), recs


def test_tree_block_over_superblock_mirror(ubtrfs_bin, base):
    """A leaf moved (pointer, extent item and all) into the 64 KiB stripe that holds the
    superblock copy at 64 MiB, beside the copy: the kernel keeps that stripe out of every block
    group, since the next commit's superblock write lands there (the test's record is the
    oracle: btrfs check compares the free space tree's ranges, not this)."""
    where = {}

    def edit(im):
        mirror = C.SUPER_OFFSETS[1]
        if im.file_size < mirror + C.SUPER_SIZE:
            pytest.skip("test setup: the image holds no mirror copy")
        meta = [c for c in im.chunks if c.type & C.BLOCK_GROUP_METADATA and c.stripes[0][1] <= mirror
                < c.stripes[0][1] + c.length]
        if not meta:
            pytest.skip("test setup: no metadata chunk over the mirror copy")
        ch = meta[0]
        unit = (mirror - ch.stripes[0][1]) // ch.stripe_len * ch.stripe_len
        new = ch.logical + unit + 16384
        # a leaf of the fs tree below a node: its parent's pointer moves with it
        leaf = parent = None
        for blk, par, slot in im.tree_blocks(im.tree_root(C.FS_TREE)[0]):
            if blk.is_leaf and par is not None:
                leaf, parent, pslot = blk, par, slot
                break
        if leaf is None:
            pytest.skip("test setup: the fs tree is one leaf")
        old = leaf.logical
        eblk, eslot, _ = _metadata_item(im, old)
        ekey, edata = eblk.item_key(eslot), eblk.item_data(eslot)
        if eslot == 0:
            pytest.skip("test setup: the leaf's extent item starts its leaf")
        leaf.bytenr(new)
        im.write_block(leaf, logical=new)
        parent.set_ptr(pslot, blockptr=new)
        im.write_block(parent)
        eblk.delete_item(eslot)
        im.write_block(eblk)
        im.insert_item(im.tree_root(C.EXTENT_TREE)[0], (new, ekey.type, ekey.offset), edata)
        where.update(new=new, unit=ch.logical + unit)
    recs = unrefereed_check(base, edit)
    assert recs and all("the stripe of a superblock copy" in r["message"] for r in recs), recs
    assert [r["logical"] for r in recs] == [where["new"]], recs
    assert "[%d, +65536)" % where["unit"] in recs[0]["message"], recs


# ---------------------------------------------------------------- item rules: committed trees and the fsync log

def _first_inode(im, pred):
    for blk, slot in im.walk(im.tree_root(C.FS_TREE)[0]):
        k = blk.item_key(slot)
        if k.type == C.INODE_ITEM and pred(blk, slot):
            return blk, slot, k.objectid
    raise AssertionError("no such inode")


def _is_symlink(blk, slot):
    return blk.get_item(slot, C.INODE_MODE, "<I") & 0o170000 == 0o120000


def _is_nonempty_file(blk, slot):
    return blk.get_item(slot, C.INODE_MODE, "<I") & 0o170000 == 0o100000 and blk.get_item(slot, C.INODE_SIZE, "<Q") > 0


@pytest.mark.parametrize("case", ["symlink_size_5000", "inode_size_2p63"])
def test_inode_size_rules(ubtrfs_bin, base, case):
    """A symlink whose size exceeds what btrfs allows (its target is inline, under PATH_MAX), and
    an inode size above 2^63 - 1: ls reports both (the oracle: btrfs check misses them), and so
    does check."""
    where = {}

    def edit(im):
        pred, size = {"symlink_size_5000": (_is_symlink, 5000),
                      "inode_size_2p63": (_is_nonempty_file, (1 << 63) + 4096)}[case]
        blk, slot, ino = _first_inode(im, pred)
        blk.patch_item(slot, C.INODE_SIZE, "<Q", size)
        im.write_block(blk)
        where.update(ino=ino, size=size)
    recs = unrefereed_check(base, edit)
    want = [("fs", [where["ino"], C.INODE_ITEM, 0], where["ino"])]
    assert [(r["class"], r["key"], r["inode"]) for r in recs] == want, recs
    assert str(where["size"]) in recs[0]["message"], recs
    ls = T.ubtrfs("ls", "-R", "-l", base)
    assert ls.returncode == 1 and str(where["size"]).encode() in ls.stderr, T.describe(ls)


@pytest.fixture(scope="module")
def crash_log(tmp_path_factory):
    """A kernel crash image with a pending fsync log: a file with data, a symlink and an empty
    file in a directory that was fsynced (their inode items, names, extents and checksums)."""
    import fsynclog_lib as L

    def baseline(mnt):
        (mnt / "d").mkdir()
        L.write_file(mnt / "d" / "old", b"x" * 5000)

    def action(mnt):
        L.write_file(mnt / "d" / "new", bytes(range(256)) * 40, fsync=True)
        os.symlink("some/target", str(mnt / "d" / "sl"))
        L.write_file(mnt / "d" / "n2", b"y" * 100)
        L.fsync_path(mnt / "d")
    crash = L.make_crash(tmp_path_factory.mktemp("log"), baseline, action)
    if not crash.log_root:
        pytest.skip("test setup: the kernel committed instead of logging")
    return crash


def _log_rename(blk, slot, new):
    d, k = blk.item_data(slot), blk.item_key(slot)
    if k.type == C.INODE_REF:
        (index, _), = C.parse_inode_refs(d)
        blk.set_item_data(slot, C.inode_ref(index, new))
    else:
        (loc, transid, ftype, _, _), = C.parse_dir_item(d)
        blk.set_item_data(slot, C.dir_item(loc, transid, new, ftype))


# name: (the logged item (by the file it belongs to), the edit, what check says, the reader that reports it)
LOG_CASES = {
    "inode_size_2p63": (("new", C.INODE_ITEM), lambda b, s: b.patch_item(s, C.INODE_SIZE, "<Q", (1 << 63) + 4096),
                        "larger than any file can be", ["ls", "-R", "-l"]),
    "symlink_size_5000": (("sl", C.INODE_ITEM), lambda b, s: b.patch_item(s, C.INODE_SIZE, "<Q", 5000),
                          "more than btrfs allows", ["ls", "-R", "-l"]),
    "extent_offset_past_ram": (("new", C.EXTENT_DATA), lambda b, s: b.patch_item(s, C.FE_OFFSET, "<Q", 16384),
                               "run past its", ["cat", "--path", "/d/new"]),
    "extent_in_no_chunk": (("new", C.EXTENT_DATA), lambda b, s: b.patch_item(s, C.FE_DISK_BYTENR, "<Q", 10 << 40),
                           "not inside one data chunk", ["cat", "--path", "/d/new"]),
    "ref_name_slash": (("n2", C.INODE_REF), lambda b, s: _log_rename(b, s, b"a/"), "name contains '/'",
                       ["ls", "-R"]),
    "dir_index_name_dotdot": (("n2", C.DIR_INDEX), lambda b, s: _log_rename(b, s, b".."), "name is", None),
    "dir_index_location_type_0": (("sl", C.DIR_INDEX), lambda b, s: b.patch_item(s, 8, "<B", 0),
                                  "location key type 0", None),
}


@pytest.mark.parametrize("case", [pytest.param(n, id=n, marks=pytest.mark.xdist_group("check-sweep-log"))
                                  for n in sorted(LOG_CASES)])
def test_log_item_rules(ubtrfs_bin, crash_log, tmp_path, case):
    """Items inside the fsync log's trees get the rules of the subvolume trees' items and the
    replay's (checksum-valid damage in the log tree's leaf): each is one problem, said as the
    log's (tree TREE_LOG). btrfs check does not read the log: where a reader (ls, cat) reports
    the damage it is the oracle, else the test's own record."""
    (name, typ), fn, says, reader = LOG_CASES[case]
    img = tmp_path / "log.img"
    T.copy_sparse(crash_log.image, img)
    with C.Image(img) as im:
        (lblk, lslot), = im.log_trees().values()
        root = lblk.get_item(lslot, C.ROOT_ITEM_BYTENR, "<Q")
        items = [(b, s) for b, s in im.walk(root)]
        inos = {}
        for b, s in items:
            k = b.item_key(s)
            if k.type == C.INODE_REF:
                (_, n), = C.parse_inode_refs(b.item_data(s))
                inos[n.decode()] = (k.objectid, k.offset)
        if name not in inos:
            pytest.skip("test setup: the kernel logged no name of %s" % name)
        ino, dirino = inos[name]
        for b, s in items:
            k = b.item_key(s)
            hit = (k.objectid == ino and k.type == typ) or (
                typ == C.DIR_INDEX and k.type == typ and k.objectid == dirino
                and C.parse_dir_item(b.item_data(s))[0][0].objectid == ino)
            if hit:
                key = [k.objectid, k.type, k.offset]
                fn(b, s)
                im.write_block(b)
                break
        else:
            pytest.skip("test setup: the kernel logged no %r item of %s" % (typ, name))
    cp = check("--json", img)
    recs, _ = problems(cp)
    assert cp.returncode == 1, T.describe(cp) + cp.stdout.decode()[-3000:]
    assert [(r["tree"], r["key"]) for r in recs] == [(C.TREE_LOG, key)], recs
    assert "fsync log of subvolume 5" in recs[0]["message"] and says in recs[0]["message"], recs
    if reader:
        rd = T.ubtrfs(*reader, img)
        assert rd.returncode != 0 and b"error" in rd.stderr, T.describe(rd)
    # --no-log: the log is not read, so nothing is said
    cp = check("--json", "--no-log", img)
    assert cp.returncode == 0, T.describe(cp) + cp.stdout.decode()[-3000:]


def test_hard_links_of_one_hash(ubtrfs_bin, tmp_path):
    """One file hard-linked twice in one directory under two names of one length whose btrfs
    name hash is equal (one DIR_ITEM holds both entries): two links, not one link twice. The
    kernel makes it; both checkers are clean."""
    img = sparse(tmp_path / "coll.img", 128 * T.MiB)
    T.run(["mkfs.btrfs", "-q", "-f", img])
    with T.mounted([img], tmp_path / "mnt", readonly=False) as mnt:
        os.mkdir(os.path.join(mnt, "d"))
        with open(os.path.join(mnt, "d", "coll_1371838"), "wb") as f:
            f.write(b"one inode, two names of one hash\n")
        os.link(os.path.join(mnt, "d", "coll_1371838"), os.path.join(mnt, "d", "coll_2000402"))
    assert C.name_hash(b"coll_1371838") == C.name_hash(b"coll_2000402")
    assert btrfs_check(img).returncode == 0
    cp = check("--json", img)
    recs, summary = problems(cp)
    assert cp.returncode == 0 and not recs, recs
    assert summary["names"] >= 3, summary
