# SPDX-License-Identifier: MIT
"""The recovery API (include/ubtrfs/recover.h) called directly, through
tests/tools/recover_driver, on kernel-made images damaged the way restore's tests damage
them. The driver walks every name it can, then scavenges; each finding is one JSON line.
What it reports is checked against the test's own record of the files (inode numbers and
names, taken from the kernel's mount before the damage), not against restore."""

import json
import os

import pytest

import craft as C
import ubtrfs_testlib as T

pytestmark = pytest.mark.xdist_group("recover-api")


def _mkfs_4k(tmp_path, mib=256):
    img = tmp_path / "img"
    with open(img, "wb") as f:
        f.truncate(mib * T.MiB)
    T.run(["mkfs.btrfs", "-f", "-q", "-n", "4096", str(img)])
    return img


def _recover(img, *opts):
    driver = T.test_tool("recover_driver")
    cp = T.run([driver, *opts, img], check=False)
    assert cp.returncode == 0, T.describe(cp)
    return [json.loads(x) for x in cp.stdout.decode().splitlines()]


def test_recover_finds_inodes_whose_names_were_lost(tmp_path):
    """A leaf of a directory's index entries (4 KiB nodes, 300 files) destroyed in both DUP
    copies: the inodes whose names it held are reached by no name, and the scan finds each
    of them, from the live tree (generation 0); every inode it reports is one of the
    directory's files."""
    img = _mkfs_4k(tmp_path)
    files = {}
    with T.mounted([img], tmp_path / "mnt", readonly=False) as mnt:
        d = os.path.join(mnt, "d")
        os.mkdir(d)
        for i in range(300):
            p = os.path.join(d, "name-of-some-length-%04d" % i)
            with open(p, "wb") as f:
                f.write(b"%d\n" % i * 40)
            files[os.lstat(p).st_ino] = "name-of-some-length-%04d" % i
        d_ino = os.lstat(d).st_ino
        T.run(["sync"])
    with C.Image(str(img)) as im:
        root = im.tree_root(C.FS_TREE)[0]
        leaves = {}
        for b, s in im.walk(root):
            k = b.item_key(s)
            if k.objectid == d_ino and k.type == C.DIR_INDEX:
                leaves.setdefault(b.logical, []).append(b.get_item(s, 0, "<Q"))
        # a leaf of the index entries that holds no file's inode item
        victim, lost = next((lg, inos) for lg, inos in sorted(leaves.items())
                            if not any(im.find_item(root, (i, C.INODE_ITEM, 0))[0].logical == lg for i in inos))
        copies = im.physical(victim)
    assert len(copies) == 2 and len(lost) >= 3, (copies, lost)
    for phys in copies:
        T.overwrite(img, phys + 64, bytes(512))
    events = _recover(img)
    found = {e["ino"]: e for e in events if e["event"] == "found"}
    assert all(e["subvol"] == 5 for e in found.values()), events
    assert set(lost) <= set(found), (sorted(set(lost) - set(found)), events)
    assert set(found) <= set(files), sorted(set(found) - set(files))
    for ino in lost:
        assert found[ino]["kind"] == "found" and found[ino]["generation"] == 0, found[ino]
    assert not any(e["event"] in ("placed", "unplaced") for e in events), events


def test_recover_names_the_inodes_a_cut_off_leaf_held(tmp_path):
    """A leaf that holds only inodes of files of /d is cut off (its parent's slot bent to the
    neighbouring leaf, checksums recomputed): no tree gives those inodes any more. Without
    older roots each is lost, its items are gathered from the leaf the scan finds, and it is
    put back at its own name in /d: exactly the inodes whose INODE_ITEM the leaf holds, each
    at the name the kernel gave it."""
    import test_tree_integrity as TI
    img = _mkfs_4k(tmp_path)
    names = {}
    with T.mounted([img], tmp_path / "mnt", readonly=False) as mnt:
        d = os.path.join(mnt, "d")
        os.mkdir(d)
        for i in range(200):
            p = os.path.join(d, "f%03d" % i)
            with open(p, "wb") as f:
                f.write(b"x" * (100 + i))
            names[os.lstat(p).st_ino] = "f%03d" % i
        d_ino = os.stat(d).st_ino
    image = TI.Image("recover-api", img, tmp_path, 4096)
    blocks = image.tree("fs")

    def only_files_of_d(leaf):
        objs = {int(k.split()[0]) for k, _ in leaf.items}
        refs = [k for k, _ in leaf.items if k.split()[1] == "INODE_REF" and int(k.split()[2]) == d_ino]
        return len(refs) >= 2 and d_ino not in objs and 256 not in objs

    picked = None
    for node in sorted((b for b in blocks.values() if b.level == 1), key=lambda b: b.bytenr):
        for s in range(1, len(node.ptrs) - 1):
            if only_files_of_d(TI.leaf_under(blocks, node, s)):
                picked = (node, s)
                break
        if picked:
            break
    if not picked:
        pytest.skip("test setup: no leaf below a level-1 node holds only files of /d")
    node, s = picked
    cut = TI.leaf_under(blocks, node, s)
    held = {int(k.split()[0]) for k, _ in cut.items if k.split()[1] == "INODE_ITEM"}
    assert held and held <= set(names), (held, sorted(names)[:5])
    _, target, gen = node.ptrs[s - 1]
    TI.patch_block(str(img), image, node.bytenr, lambda b: TI.set_ptr(b, s, target, gen))
    TI.check_bent(image, str(img), (node.bytenr, s, target))
    events = _recover(img, "--no-older")
    found = {e["ino"]: e["kind"] for e in events if e["event"] == "found"}
    placed = {e["ino"]: (e["dir"], e["name"]) for e in events if e["event"] == "placed"}
    assert {i for i, k in found.items() if k == "lost"} == held, (sorted(held), events)
    assert placed == {i: (d_ino, names[i]) for i in held}, (placed, events)
    assert not [e for e in events if e["event"] == "unplaced"], events
