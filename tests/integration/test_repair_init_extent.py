# SPDX-License-Identifier: MIT
"""`ubtrfs check --repair --init-extent-tree` (issue 34): the extent tree rebuilt from the trees.

One kernel-made image (DUP metadata, skinny metadata, no-holes, free space tree) holds a few
hundred files of several sizes, inline ones, zstd-compressed ones, reflinked copies (one extent
60 times: keyed references), a snapshot whose source changed after it (so shared blocks got
FULL_BACKREF and SHARED refs), and a snapshot of a subvolume deleted after it changed (blocks
owned by a tree that is gone).
Its extent tree is then damaged (craft.py) in several ways:

- items deleted: extent items of tree blocks and data, and a BLOCK_GROUP_ITEM;
- references and counts wrong: extent items' refs, an inline TREE_BLOCK_REF's root, an
  EXTENT_DATA_REF's count, a block group's used bytes;
- a leaf of the extent tree unreadable (both DUP copies overwritten, checksum left stale).

For each: the repair exits 0 (its check after is clean), `btrfs check` is clean, the
kernel mounts and reads every file with its original bytes, a write through the kernel
works and leaves `btrfs check` clean, and `rescue undo` gives back the damaged image byte
for byte. The undamaged image's rebuilt extent tree is item for item the kernel's (but the
blocks the repair's own commit moved aside), and btrfs check's lowmem mode finds it clean. A
dry run writes nothing. A filesystem without skinny metadata gets EXTENT_ITEMs with their
tree_block_info; an unreadable leaf of a subvolume tree stops the repair with nothing written.
Interrupted at several points of its writes (tests/tools/repair_driver), the rebuild leaves the
damaged filesystem or the rebuilt one, and the undo file gives the image back.

Budget: about 22 s with -n 2 under ASan.
"""

import hashlib
import os
import random
import re
import shutil
import struct
import subprocess

import pytest

import craft as C
import repair_lib as R
import ubtrfs_testlib as T

MiB = T.MiB


def read_tree(top):
    out = {}
    for root, dirs, files in os.walk(top):
        dirs.sort()
        for n in sorted(files):
            p = os.path.join(root, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, top)] = hashlib.sha256(f.read()).hexdigest()
    return out


def make_image(d, features="no-holes", nfiles=400):
    img = d / "fs.img"
    with open(img, "wb") as f:
        f.truncate(512 * MiB)
    T.run(["mkfs.btrfs", "-f", "-q", "-m", "dup", "-O", features, "-R", "free-space-tree", str(img)])
    rnd = random.Random(3434)
    with T.mounted([img], d / "mnt", readonly=False) as m:
        os.makedirs(os.path.join(m, "d"))
        for i in range(nfiles):
            size = rnd.choice((60, 900, 1800, 5000, 70000, 300000))
            with open(os.path.join(m, "d", "f%d" % i), "wb") as f:
                f.write(rnd.randbytes(size))
        z = os.path.join(m, "z")
        os.makedirs(z)
        T.run(["btrfs", "property", "set", z, "compression", "zstd"])
        for i in range(20):
            with open(os.path.join(z, "c%d" % i), "wb") as f:
                f.write((b"compressible words %d " % i) * (4000 + 500 * i))
        for i in range(0, 40, 4):
            T.run(["cp", "--reflink=always", os.path.join(m, "d", "f%d" % i), os.path.join(m, "d", "r%d" % i)])
        # one extent referenced by 60 inodes: more references than one extent item holds (keyed ones)
        os.makedirs(os.path.join(m, "many"))
        with open(os.path.join(m, "many", "src"), "wb") as f:
            f.write(rnd.randbytes(40000))
        os.sync()
        for i in range(60):
            T.run(["cp", "--reflink=always", os.path.join(m, "many", "src"), os.path.join(m, "many", "c%d" % i)])
        os.sync()
        T.run(["btrfs", "subvolume", "snapshot", m, os.path.join(m, "snap")])
        # the source changes after the snapshot: its shared blocks are copied (FULL_BACKREF)
        for i in range(0, nfiles, 7):
            with open(os.path.join(m, "d", "f%d" % i), "r+b") as f:
                f.seek(0, 2)
                f.write(rnd.randbytes(3000))
        with open(os.path.join(m, "d", "f1"), "r+b") as f:
            f.seek(4096)
            f.write(rnd.randbytes(4096))
        # a subvolume snapshotted, changed, then deleted: the blocks it owned that the snapshot
        # still reaches get FULL_BACKREF from the kernel's drop, their owner tree gone
        sv = os.path.join(m, "sv")
        T.run(["btrfs", "subvolume", "create", sv])
        for i in range(nfiles // 3):
            with open(os.path.join(sv, "g%d" % i), "wb") as f:
                f.write(rnd.randbytes(rnd.choice((700, 3000, 9000))))
        os.sync()
        T.run(["btrfs", "subvolume", "snapshot", sv, os.path.join(m, "svsnap")])
        for i in range(0, nfiles // 3, 5):
            with open(os.path.join(sv, "g%d" % i), "ab") as f:
                f.write(b"changed")
        os.sync()
        T.run(["btrfs", "subvolume", "delete", sv])
        # a commit wakes the kernel's cleaner now (else it waits for the 30 s commit interval)
        T.run(["btrfs", "filesystem", "sync", m])
        T.run(["btrfs", "subvolume", "sync", m])
    with T.mounted([img], d / "mnt", readonly=True) as m:
        files = read_tree(m)
    assert R.btrfs_check_clean(img)
    return img, files


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    d = tmp_path_factory.mktemp("init-extent")
    yield make_image(d)
    shutil.rmtree(d, ignore_errors=True)


def extent_leaves(im):
    root = im.tree_root(C.EXTENT_TREE)[0]
    return [b for b, _, _ in im.tree_blocks(root) if b.is_leaf]


def damage_deleted(img):
    """Every third extent item of two leaves gone (never slot 0: the parent's key stays
    right), and one BLOCK_GROUP_ITEM."""
    with C.Image(img) as im:
        leaves = sorted(extent_leaves(im), key=lambda b: -b.nritems())[:2]
        bg_done = False
        for leaf in leaves:
            items = leaf.items()
            keep = []
            for i, (k, data) in enumerate(items):
                gone = i and ((k.type in (C.EXTENT_ITEM, C.METADATA_ITEM) and i % 3 == 0) or
                              (k.type == C.BLOCK_GROUP_ITEM and not bg_done))
                if k.type == C.BLOCK_GROUP_ITEM and gone:
                    bg_done = True
                if not gone:
                    keep.append((k, data))
            leaf.rebuild_leaf(keep)
            im.write_block(leaf)


def damage_counts(img):
    """refs counts raised, a tree block's inline root and a data ref's count changed, a block
    group's used bytes wrong."""
    with C.Image(img) as im:
        meta = data = bg = 0
        for leaf in extent_leaves(im):
            changed = False
            for i in range(leaf.nritems()):
                k = leaf.item_key(i)
                if k.type == C.METADATA_ITEM and meta < 3:
                    leaf.patch_item(i, 0, "<Q", leaf.get_item(i, 0, "<Q") + 2)
                    if meta == 0 and leaf.get_item(i, 24, "<B") == 176:  # TREE_BLOCK_REF
                        leaf.patch_item(i, 25, "<Q", 4242)
                    meta += 1
                elif k.type == C.EXTENT_ITEM and data < 3:
                    if data == 0 and leaf.get_item(i, 24, "<B") == 178:  # EXTENT_DATA_REF: its count
                        leaf.patch_item(i, 49, "<I", leaf.get_item(i, 49, "<I") + 3)
                    else:
                        leaf.patch_item(i, 0, "<Q", leaf.get_item(i, 0, "<Q") + 1)
                    data += 1
                elif k.type == C.BLOCK_GROUP_ITEM and not bg:
                    leaf.patch_item(i, 0, "<Q", leaf.get_item(i, 0, "<Q") + 40960)
                    bg += 1
                else:
                    continue
                changed = True
            if changed:
                im.write_block(leaf)
        assert meta and data and bg, "the extent tree has no items to damage"


def damage_unreadable(img):
    """A leaf of the extent tree unreadable: both DUP copies overwritten, the checksum stale."""
    with C.Image(img) as im:
        leaves = extent_leaves(im)
        assert len(leaves) >= 2, "the extent tree has a single leaf"
        leaf = leaves[len(leaves) // 2]
        for p in im.physical(leaf.logical):
            im._pwrite(p + 200, b"\x5a" * 512)
        im.f.flush()


DAMAGE = {"deleted": damage_deleted, "counts": damage_counts, "unreadable": damage_unreadable}


def init_extent(img, *args):
    undo = img.parent / "ie.undo"
    if undo.exists():
        undo.unlink()
    try:
        cp = subprocess.run([str(T.ubtrfs_binary()), "check", "--repair", "--init-extent-tree", "--undo-file",
                             str(undo), *args, str(img)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, timeout=180)
    except subprocess.TimeoutExpired:
        raise AssertionError("ubtrfs check --init-extent-tree: no exit within 180 s")
    assert not R.sanitizer_report(cp.stderr), cp.stderr[-4000:].decode(errors="replace")
    return cp, undo


def btrfs_check(img):
    cp = T.run(["btrfs", "check", "--readonly", str(img)], check=False, timeout=120)
    return cp.returncode, (cp.stdout + cp.stderr).decode(errors="replace")[-3000:]


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_rebuild_after_damage(ubtrfs_bin, image, tmp_path, kind):
    src, files = image
    img = tmp_path / "fs.img"
    R.copy_sparse(src, img)
    DAMAGE[kind](img)
    assert btrfs_check(img)[0] != 0, "btrfs check calls the damage clean"
    damaged = tmp_path / "damaged.img"
    R.copy_sparse(img, damaged)
    cp, undo = init_extent(img)
    out = cp.stdout.decode(errors="replace")
    assert cp.returncode == 0, T.describe(cp) + out[-3000:] + cp.stderr.decode(errors="replace")[-3000:]
    assert "extent tree rebuilt from" in out, out[-3000:]
    rc, text = btrfs_check(img)
    assert rc == 0, text
    with T.mounted([img], tmp_path / "mnt", readonly=True) as m:
        assert read_tree(m) == files
    # the undo file gives the damaged image back, byte for byte
    back = tmp_path / "back.img"
    R.copy_sparse(img, back)
    cp2 = T.ubtrfs("rescue", "undo", str(undo), str(back))
    assert cp2.returncode == 0, T.describe(cp2)
    assert R.same_bytes(back, damaged)
    back.unlink()
    damaged.unlink()
    # the kernel writes to the rebuilt filesystem, and btrfs check still finds it clean
    with T.mounted([img], tmp_path / "mnt", readonly=False) as m:
        with open(os.path.join(m, "new"), "wb") as f:
            f.write(os.urandom(600000))
        with open(os.path.join(m, "d", "f5"), "ab") as f:
            f.write(b"appended" * 1000)
        os.unlink(os.path.join(m, "d", "f6"))
        T.run(["btrfs", "subvolume", "delete", os.path.join(m, "snap")])
    rc, text = btrfs_check(img)
    assert rc == 0, text


def extent_items(img):
    """The extent tree's items as btrfs prints them, without the layout (item numbers, offsets)."""
    out = T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "extent", str(img)]).stdout.decode()
    items, cur = {}, None
    for line in out.splitlines():
        m = re.match(r"\s+item \d+ key \((\d+) (\S+) (\d+)\) itemoff \d+ itemsize \d+", line)
        if m:
            cur = (int(m.group(1)), m.group(2), int(m.group(3)))
            items[cur] = []
        elif cur and line.startswith("\t\t"):
            items[cur].append(line.strip())
        elif not line.startswith("\t\t"):
            cur = None
    return items


def by_extent(items):
    """{address: sorted lines} of each extent's item and references, inline or keyed alike
    (which references go inline depends on the order the kernel added them)."""
    out = {}
    for (objectid, typ, _), lines in items.items():
        if typ != "BLOCK_GROUP_ITEM":
            out.setdefault(objectid, []).extend(lines)
    return {k: sorted(v) for k, v in out.items()}


def test_same_as_kernel(ubtrfs_bin, image, tmp_path):
    """On the undamaged image every item of a tree block or of data the repair's own commit
    left in place is the kernel's, references and flags included; a dry run writes nothing."""
    src, _ = image
    img = tmp_path / "fs.img"
    R.copy_sparse(src, img)
    before = extent_items(img)
    full = any("FULL_BACKREF" in " ".join(v) for v in before.values())
    keyed = any(k[1] == "EXTENT_DATA_REF" for k in before)
    before = by_extent(before)
    dry = tmp_path / "dry.img"
    R.copy_sparse(img, dry)
    cp = T.ubtrfs("check", "--repair", "--init-extent-tree", "--dry-run", str(dry))
    assert cp.returncode == 0, T.describe(cp)
    assert "extent tree would be rebuilt from" in cp.stdout.decode(), cp.stdout.decode()[-2000:]
    assert R.same_bytes(dry, img)
    dry.unlink()
    cp, _ = init_extent(img)
    assert cp.returncode == 0, T.describe(cp)
    after = by_extent(extent_items(img))
    gen = struct.unpack("<Q", open(img, "rb").read(65536 + 4096)[65536 + 72:65536 + 80])[0]
    moved = 0
    for key, lines in before.items():
        if key not in after:
            moved += 1  # a block the repair's commit copied away (the root, extent, free space trees)
            continue
        assert after[key] == lines, (key, lines, after[key])
    for key, lines in after.items():
        if key not in before:
            assert any(("gen %d " % gen) in x for x in lines), (key, lines)
    assert moved < 20
    assert full, "the image has no FULL_BACKREF block"
    assert keyed, "the image has no keyed data reference"
    assert R.btrfs_check_clean(img)
    # btrfs check's other mode judges the references (and FULL_BACKREF) its own way
    lowmem = T.run(["btrfs", "check", "--readonly", "--mode=lowmem", str(img)], check=False, timeout=120)
    assert lowmem.returncode == 0, (lowmem.stdout + lowmem.stderr).decode(errors="replace")[-3000:]


def test_not_skinny(ubtrfs_bin, tmp_path):
    """A filesystem without skinny metadata: tree blocks get EXTENT_ITEMs with their first key
    and level, as the kernel writes them there; an extent leaf's items deleted."""
    img, files = make_image(tmp_path, features="^skinny-metadata,no-holes", nfiles=120)
    damage_deleted(img)
    assert btrfs_check(img)[0] != 0, "btrfs check calls the damage clean"
    cp, undo = init_extent(img)
    assert cp.returncode == 0, T.describe(cp) + cp.stdout.decode(errors="replace")[-3000:]
    rc, text = btrfs_check(img)
    assert rc == 0, text
    items = extent_items(img)
    assert not any(k[1] == "METADATA_ITEM" for k in items)
    assert any(k[1] == "EXTENT_ITEM" and "tree block key" in " ".join(v) for k, v in items.items())
    with T.mounted([img], tmp_path / "mnt", readonly=True) as m:
        assert read_tree(m) == files
    img.unlink()
    undo.unlink()


def test_unreadable_subvolume_leaf_refused(ubtrfs_bin, image, tmp_path):
    """A leaf of the top-level subvolume's tree unreadable: the walk cannot see the data it
    points at, whose space would look free; the repair stops (exit 2) and writes nothing."""
    src, _ = image
    img = tmp_path / "fs.img"
    R.copy_sparse(src, img)
    with C.Image(img) as im:
        root = im.tree_root(C.FS_TREE)[0]
        leaves = [b for b, _, _ in im.tree_blocks(root) if b.is_leaf]
        assert len(leaves) >= 2
        for p in im.physical(leaves[1].logical):
            im._pwrite(p + 300, b"\xa5" * 256)
        im.f.flush()
    damaged = tmp_path / "damaged.img"
    R.copy_sparse(img, damaged)
    cp, _ = init_extent(img)
    assert cp.returncode == 2, T.describe(cp)
    assert b"cannot be read" in cp.stderr and b"repair it first" in cp.stderr, cp.stderr[-2000:]
    assert R.same_bytes(img, damaged)


def test_interrupted_rebuild(ubtrfs_bin, image, tmp_path):
    """The rebuild interrupted at 5 points of its writes (and both sides of each superblock write) (tests/tools/repair_driver, the
    recorder under the undo device, as test_repair_crash.py runs the other cures): every
    crash image is the damaged filesystem or the rebuilt one for both checkers, every file
    reads as before, and the undo file as the crash left it gives the image back."""
    import test_repair_crash as RC

    src, files = image
    img = tmp_path / "fs.img"
    R.copy_sparse(src, img)
    damage_deleted(img)
    _, probs_before = R.ubtrfs_check(img)
    restored_before, _ = R.readable_files(img, str(tmp_path))
    ref_before = RC.btrfs_view([img], tmp_path)
    assert ref_before
    crash = tmp_path / "crash"
    crash.mkdir()
    driver = T.test_tool("repair_driver")
    cp = T.run([driver, "--crash-dir", crash, "--crash-cuts", "5", "--init-extent-tree", img], check=False,
               timeout=180)
    out = cp.stdout.decode()
    assert cp.returncode == 0 and not R.sanitizer_report(cp.stderr), cp.stderr.decode(errors="replace")[-4000:]
    assert RC.btrfs_view([img], tmp_path) is None
    lengths = RC.parse_lengths(crash / "undo_lengths")
    base = crash / "base_dev0.img"
    seen, failures = {"old": 0, "repaired": 0}, []
    for c, k, total in re.findall(r"^cut (\d+) entries (\d+) of (\d+)$", out, re.M):
        cut = [crash / ("cut%s_dev0.img" % c)]
        what = "cut %s (after %s of %s entries)" % (c, k, total)
        rc, probs = R.ubtrfs_check(cut)
        ours = "old" if rc == 1 and probs == probs_before else "repaired" if rc == 0 else None
        ref = RC.btrfs_view(cut, tmp_path)
        theirs = "repaired" if ref is None else "old" if ref == ref_before else None
        if ours is None or theirs is None:
            failures.append("%s: neither the old filesystem nor the rebuilt one (ubtrfs %s, btrfs %s)" % (
                what, ours, theirs))
        else:
            seen[ours] += 1
        got, _ = R.readable_files(cut, str(tmp_path))
        if got != restored_before:
            failures.append("%s: files read differently" % what)
        for n in RC.undo_lengths_at(lengths, int(k)):
            RC.undo_back(crash, cut, [base], n, what, failures)
        os.unlink(cut[0])
        if len(failures) > 4:
            break
    assert not failures, "\n".join(failures)
    assert seen["old"] and seen["repaired"], seen
