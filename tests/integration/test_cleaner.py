# SPDX-License-Identifier: MIT
"""The cleaner (lib/txn/cleaner.h): dead roots of deleted subvolumes dropped as the kernel drops them.

A subvolume full of files is snapshotted, both sides diverge (overwrites in each), one side is deleted
through the file API (tests/tools/fileapi_driver.c --script), then the script's `clean BUDGET CALLS`
command runs the cleaner. The referee is btrfs check, and the kernel doing the same drop on a copy of
the image before cleaning (read-write mount, `btrfs subvolume sync`, umount): the same data bytes and
subvolume tree bytes must remain. With a budget of a few blocks per transaction the half-dropped image
(drop_progress / drop_level in the ROOT_ITEM) must pass btrfs check, and the kernel must finish it, as
must we in further small steps. A chain of snapshots checks the full back references a drop leaves
for the survivors; a chain of snapshots written right after they are taken (the snapshot call commits
first, as the kernel's) and deleted along the chain is dropped by us and by the kernel alike, and so
are new subvolumes written (and snapshotted) in the transaction that made them. Filling, deleting and cleaning on single, RAID1 and RAID5 checks that the empty
block groups go (the last data group stays), that every device's dev extents add up to its DEV_ITEM
bytes_used, and that the space is written again. UBTRFS_LONG_TESTS=1 adds a drop the kernel's cleaner
left half done (umount stops it), which we finish.

Budget: about 58 s under ASan (the RAID5 fill is most of it).
"""

import os
import re
import shutil
from pathlib import Path

import pytest

import ubtrfs_testlib as T

MiB = T.MiB


@pytest.fixture(scope="module")
def driver():
    return T.test_tool("fileapi_driver")


@pytest.fixture
def casedir(scratch, request):
    d = Path(scratch) / ("cleaner-" + re.sub(r"[^A-Za-z0-9_.-]", "_", request.node.name))
    d.mkdir(parents=True, exist_ok=True)
    yield d
    if os.environ.get("UBTRFS_KEEP_IMAGES") != "1":
        T.rmtree(d)


def subvol_of_files(nfiles):
    """/sv with nfiles files of 3000 to 23000 bytes, committed every 50."""
    lines = ["subvol /sv"]
    for i in range(nfiles):
        lines += ["create /sv/f%d 644" % i, "write /sv/f%d 0 %d %d" % (i, 3000 + (i * 977) % 20000, i + 1)]
        if i % 50 == 49:
            lines.append("commit")
    return lines + ["commit"]


def diverged_script(nfiles, delete):
    """/sv with nfiles files, snapshot /snap, overwrites on both sides, then `delete` goes."""
    lines = subvol_of_files(nfiles) + ["snapshot /sv /snap", "commit"]
    lines += ["write /sv/f%d 0 5000 %d" % (i, i + 7) for i in range(0, nfiles, 3)]
    lines += ["write /snap/f%d 100 2000 %d" % (i, i + 9) for i in range(1, nfiles, 7)]
    lines += ["commit", "subvoldel %s" % delete, "commit"]
    return lines


def run_script(driver, casedir, img, lines, name="script.txt", autoclean=False):
    sfile = casedir / name
    # these tests pace the cleaner themselves ("clean" lines), unless asked for the commits' own cleaning
    sfile.write_text("\n".join(([] if autoclean else ["autoclean 0"]) + lines) + "\n")
    cp = T.run([str(driver), "--script", str(sfile), str(img)], check=False, timeout=600)
    assert cp.returncode == 0, "fileapi_driver --script failed:\n" + cp.stderr.decode("utf-8", "replace")[-4000:]
    return cp.stdout.decode()


def check(img):
    cp = T.run(["btrfs", "check", "--readonly", str(img)], check=False, timeout=600)
    text = (cp.stdout + cp.stderr).decode("utf-8", "replace")
    errors = [ln for ln in text.splitlines() if re.match(r"(ERROR|error)", ln)]
    assert cp.returncode == 0 and not errors and "no error found" in text, "btrfs check:\n" + text[-6000:]
    figures = {}
    for key in ("total fs tree bytes", "file data blocks allocated", "total tree bytes"):
        m = re.search(re.escape(key) + r":\s*(\d+)", text)
        figures[key] = int(m.group(1))
    m = re.search(r"found (\d+) bytes used", text)
    figures["bytes used"] = int(m.group(1))
    return figures


def dead_root_items(img, subvol_id):
    """The ROOT_ITEM / ORPHAN item lines of subvol_id left in the root tree, and its drop progress."""
    text = T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "root", str(img)]).stdout.decode()
    items = re.findall(r"key \((%d ROOT_ITEM \d+|ORPHAN ORPHAN_ITEM %d)\)" % (subvol_id, subvol_id), text)
    m = re.search(r"key \(%d ROOT_ITEM \d+\).*?\n(?:.*\n)*?\s*drop_progress key \((.*?)\) drop_level (\d+)"
                  % subvol_id, text)
    return items, (m.group(1), int(m.group(2))) if m else None


def kernel_drop(img, casedir):
    with T.mounted([img], casedir / "mnt", readonly=False) as m:
        # a commit wakes the kernel's cleaner now rather than at the next 30 s commit
        T.run(["btrfs", "filesystem", "sync", m])
        T.run(["btrfs", "subvolume", "sync", m])


def prepared(driver, casedir, nfiles, delete):
    img = casedir / "dev0.img"
    with open(img, "wb") as f:
        f.truncate(256 * MiB)
    T.run(["mkfs.btrfs", "-f", "-q", "-n", "4096", str(img)])
    run_script(driver, casedir, img, diverged_script(nfiles, delete))
    return img


# 257 is the snapshot, 256 the subvolume it was taken of
@pytest.mark.parametrize("delete,dead_id", [("/snap", 257), ("/sv", 256)], ids=["snapshot", "source"])
def test_drop_matches_kernel(driver, casedir, delete, dead_id):
    img = prepared(driver, casedir, 300, delete)
    ref = casedir / "kernel.img"
    shutil.copyfile(img, ref)
    assert dead_root_items(img, dead_id)[0], "the delete left no dead root to drop"
    out = run_script(driver, casedir, img, ["clean 0"], "clean.txt")
    assert "clean: 1 calls, done" in out, out
    ours = check(img)
    assert dead_root_items(img, dead_id)[0] == [], "ROOT_ITEM or ORPHAN item left behind"
    kernel_drop(ref, casedir)
    theirs = check(ref)
    assert dead_root_items(ref, dead_id)[0] == []
    # what survives is the same; the extent tree's own shape may differ by a block or two
    assert ours["file data blocks allocated"] == theirs["file data blocks allocated"], (ours, theirs)
    assert ours["total fs tree bytes"] == theirs["total fs tree bytes"], (ours, theirs)
    assert abs(ours["bytes used"] - theirs["bytes used"]) <= 4 * 4096, (ours, theirs)


@pytest.mark.parametrize("delete,dead_id", [("/snap", 257), ("/sv", 256)], ids=["snapshot", "source"])
def test_half_dropped_resumes(driver, casedir, delete, dead_id):
    """1500 files: a three-level tree; 3 blocks per transaction, 5 transactions, then either side finishes."""
    img = prepared(driver, casedir, 1500, delete)
    out = run_script(driver, casedir, img, ["clean 3 5"], "clean.txt")
    assert "clean: 5 calls, more" in out, out
    check(img)
    items, progress = dead_root_items(img, dead_id)
    assert items and progress and progress[1] >= 1 and not progress[0].startswith("0 "), (items, progress)
    half = casedir / "half.img"
    shutil.copyfile(img, half)
    kernel_drop(half, casedir)
    theirs = check(half)
    assert dead_root_items(half, dead_id)[0] == []
    out = run_script(driver, casedir, img, ["clean 4 0"], "finish.txt")
    assert re.search(r"clean: \d+ calls, done", out), out
    ours = check(img)
    assert dead_root_items(img, dead_id)[0] == []
    assert ours["file data blocks allocated"] == theirs["file data blocks allocated"], (ours, theirs)
    assert ours["total fs tree bytes"] == theirs["total fs tree bytes"], (ours, theirs)


def test_snapshot_chain(driver, casedir):
    """/sv -> /s1 (diverged) -> /s2: /s1's own blocks are shared with /s2 and must hand their children over
    to full back references before /s1 goes; then everything goes and no data is left."""
    n = 600
    lines = subvol_of_files(n) + ["snapshot /sv /s1", "commit"]
    lines += ["write /s1/f%d 0 5000 %d" % (i, i + 7) for i in range(0, n, 2)]
    lines += ["commit", "snapshot /s1 /s2", "commit"]
    lines += ["write /s2/f%d 0 3000 %d" % (i, i + 11) for i in range(0, n, 9)]
    lines += ["write /sv/f%d 0 3000 %d" % (i, i + 13) for i in range(0, n, 5)]
    lines += ["commit", "subvoldel /s1", "commit"]
    img = drop_both(driver, casedir, lines, 1, "clean 5 0")
    # the survivors still change after the drop (copies of blocks that now have full back references)
    run_script(driver, casedir, img, ["write /s2/f3 0 100 3", "write /sv/f4 0 100 4", "commit",
                                      "subvoldel /sv", "subvoldel /s2", "clean 0"], "rest.txt")
    left = check(img)
    assert left["file data blocks allocated"] == 0, left
    assert dead_root_items(img, 256)[0] == [] and dead_root_items(img, 258)[0] == []


def multi_check(imgs):
    """btrfs check over every device; then the block groups and, per device, dev extents vs bytes_used."""
    loops = []
    try:
        for img in imgs:
            loops.append(T.losetup_attach(img, True))
        T.run(["btrfs", "device", "scan", *loops], check=False)
        cp = T.run(["btrfs", "check", "--readonly", loops[0]], check=False, timeout=600)
        text = (cp.stdout + cp.stderr).decode("utf-8", "replace")
        errors = [ln for ln in text.splitlines()
                  if re.match(r"(ERROR|error)", ln) and not re.match(r"ERROR: cannot scan /dev/", ln)]
        assert cp.returncode == 0 and not errors and "no error found" in text, "btrfs check:\n" + text[-6000:]
        ext = T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "extent", loops[0]]).stdout.decode()
        dev = T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "dev", loops[0]]).stdout.decode()
        chunk = T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "chunk", loops[0]]).stdout.decode()
    finally:
        for d in loops:
            T.losetup_detach(d)
        T.run(["btrfs", "device", "scan", "--forget"], check=False)
    groups = re.findall(r"BLOCK_GROUP_ITEM \d+\).*\n\s*block group used (\d+) chunk_objectid \d+ flags (\S+)", ext)
    sums = {}
    for devid, length in re.findall(r"key \((\d+) DEV_EXTENT \d+\).*\n.*\n.*chunk_offset \d+ length (\d+)", dev):
        sums[int(devid)] = sums.get(int(devid), 0) + int(length)
    used = {int(a): int(b) for a, b in re.findall(r"devid (\d+) total_bytes \d+ bytes_used (\d+)", chunk)}
    assert sums == used, "dev extents %r, DEV_ITEM bytes_used %r" % (sums, used)
    return [(int(u), f) for u, f in groups]


# enough MiB for a second data chunk (RAID5's first, from mkfs, holds 128 MiB)
@pytest.mark.parametrize("data,meta,ndev,mib", [("single", "dup", 1, 60), ("raid1", "raid1", 2, 100),
                                                ("raid5", "raid1", 3, 150)])
def test_empty_block_groups_removed(driver, casedir, data, meta, ndev, mib):
    """Fill (several data chunks), delete, clean: the empty data groups go but the last; refill works."""
    imgs = []
    for i in range(ndev):
        p = casedir / ("dev%d.img" % i)
        with open(p, "wb") as f:
            f.truncate(256 * MiB)
        imgs.append(p)
    T.run(["mkfs.btrfs", "-f", "-q", "-d", data, "-m", meta, *map(str, imgs)])
    fill = ["subvol /sv"]
    for i in range(mib):
        fill += ["create /sv/f%d 644" % i, "write /sv/f%d 0 1048576 %d" % (i, i + 1)]
        if i % 10 == 9:
            fill.append("commit")
    fill += ["commit", "subvoldel /sv", "commit"]
    sfile = casedir / "fill.txt"
    sfile.write_text("\n".join(["autoclean 0"] + fill) + "\n")
    T.run([str(driver), "--script", str(sfile), *map(str, imgs)], timeout=600)
    before = [g for g in multi_check(imgs) if g[1].startswith("DATA")]
    assert len(before) > 1, before
    sfile.write_text("clean 0\n")
    T.run([str(driver), "--script", str(sfile), *map(str, imgs)], timeout=600)
    after = multi_check(imgs)
    assert [g for g in after if g[1].startswith("DATA")] == [(0, before[0][1])], after
    refill = ["subvol /sv2"] + sum((["create /sv2/g%d 644" % i, "write /sv2/g%d 0 1048576 %d" % (i, i + 3)]
                                    for i in range(30)), [])
    sfile.write_text("\n".join(refill) + "\n")
    T.run([str(driver), "--script", str(sfile), *map(str, imgs)], timeout=600)
    groups = multi_check(imgs)
    assert sum(u for u, f in groups if f.startswith("DATA")) == 30 * MiB, groups


@pytest.mark.skipif(not T.LONG_TESTS, reason="UBTRFS_LONG_TESTS=1: the kernel needs a big tree to stop mid-drop")
def test_resume_kernels_half_drop(driver, casedir):
    """The kernel's cleaner interrupted by umount leaves drop_progress in the ROOT_ITEM; we finish the drop."""
    img = casedir / "dev0.img"
    with open(img, "wb") as f:
        f.truncate(512 * MiB)
    T.run(["mkfs.btrfs", "-f", "-q", "-n", "4096", str(img)])
    with T.mounted([img], casedir / "mnt", readonly=False) as m:
        T.run(["btrfs", "subvolume", "create", m + "/sv"])
        for i in range(30000):
            with open("%s/sv/f%d" % (m, i), "wb") as f:
                f.write(b"y" * 3000 if i % 3 == 0 else b"x" * 100)
        T.run(["btrfs", "subvolume", "snapshot", m + "/sv", m + "/snap"])
        T.run(["sync"])
        T.run(["btrfs", "subvolume", "delete", m + "/sv"])
    with T.mounted([img], casedir / "mnt", readonly=False) as m:
        T.run(["btrfs", "filesystem", "sync", m])  # wakes the cleaner; the umount right after stops it
    items, progress = dead_root_items(img, 256)
    if not items or not progress or progress[0].startswith("0 "):
        pytest.skip("the kernel's cleaner did not stop mid-drop this time (%r)" % (progress,))
    ref = casedir / "kernel.img"
    shutil.copyfile(img, ref)
    out = run_script(driver, casedir, img, ["clean 0"], "clean.txt")
    assert "clean: 1 calls, done" in out, out
    ours = check(img)
    assert dead_root_items(img, 256)[0] == []
    kernel_drop(ref, casedir)
    theirs = check(ref)
    assert ours["file data blocks allocated"] == theirs["file data blocks allocated"], (ours, theirs)
    assert ours["total fs tree bytes"] == theirs["total fs tree bytes"], (ours, theirs)


def test_commits_clean_by_themselves(driver, casedir):
    """No "clean" call: with the engine's cleaning step on (ub_engine_set_clean_step; on by default, see
    txn/cleaner.h), the commits after a delete drop the dead root, including one the previous open left
    behind, and btrfs check and the kernel find nothing left to do."""
    img = casedir / "dev0.img"
    with open(img, "wb") as f:
        f.truncate(256 * MiB)
    T.run(["mkfs.btrfs", "-f", "-q", "-n", "4096", str(img)])
    # /snap is deleted while the cleaner is held back: a dead root the next open must find
    run_script(driver, casedir, img, diverged_script(300, "/snap"), "prepare.txt")
    assert dead_root_items(img, 257)[0], "the delete left no dead root"
    out = run_script(driver, casedir, img, ["autoclean 4096", "subvoldel /sv", "commit"], "auto.txt", autoclean=True)
    for dead_id in (256, 257):
        assert dead_root_items(img, dead_id)[0] == [], (dead_id, out)
    check(img)
    with T.mounted([img], casedir / "mnt", readonly=True) as m:
        assert sorted(os.listdir(m)) == [], sorted(os.listdir(m))


def surviving(img, casedir):
    """What the kernel shows of an image: every path with its type, mode, size and content hash."""
    view = T.kernel_view([img], casedir / "mnt")
    return {p: (e["type"], e["mode"], e.get("size"), view.hashes.get(p)) for p, e in view.entries.items()}


def drop_both(driver, casedir, lines, dead, clean="clean 0"):
    """The script (dead roots left: `dead` ORPHAN items at least), then our drop (the `clean` line) and the
    kernel's on a copy: both clean for btrfs check, no dead root left, the same files and the same tree and
    data bytes. Returns our image."""
    img = casedir / "dev0.img"
    with open(img, "wb") as f:
        f.truncate(256 * MiB)
    T.run(["mkfs.btrfs", "-f", "-q", "-K", "-m", "dup", "-d", "single", "-n", "4096", str(img)])
    run_script(driver, casedir, img, lines)
    root = T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "root", str(img)]).stdout.decode()
    assert root.count("ORPHAN_ITEM") >= dead, root[-3000:]
    ref = casedir / "kernel.img"
    shutil.copyfile(img, ref)
    out = run_script(driver, casedir, img, [clean], "clean.txt")
    assert re.search(r"clean: \d+ calls, done", out), out
    ours = check(img)
    kernel_drop(ref, casedir)
    theirs = check(ref)
    for i in (img, ref):
        root = T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "root", str(i)]).stdout.decode()
        assert "ORPHAN_ITEM" not in root, (i, root[-3000:])
    assert ours["file data blocks allocated"] == theirs["file data blocks allocated"], (ours, theirs)
    assert ours["total fs tree bytes"] == theirs["total fs tree bytes"], (ours, theirs)
    assert surviving(img, casedir) == surviving(ref, casedir)
    return img


def test_written_snapshot_chain(driver, casedir):
    """Snapshots of snapshots, each written right after it is taken, deleted along the chain
    (tests/data/snapshot_chain_drop.txt): a snapshot call commits, so no snapshot holds blocks of its own
    creation transaction, which a drop (ours and the kernel's) would take for its source's and leave
    without full back references."""
    script = Path(__file__).resolve().parent.parent / "data" / "snapshot_chain_drop.txt"
    drop_both(driver, casedir, script.read_text().splitlines(), 5)


def test_new_subvolume_written(driver, casedir):
    """A new subvolume stays in the caller's transaction (its ROOT_ITEM offset 0 makes every block its own):
    one written and deleted in the transaction that made it, and one written, snapshotted and deleted
    there, drop as the kernel drops them."""
    lines = ["subvol /a"]
    for i in range(300):
        lines += ["create /a/f%03d 644" % i, "write /a/f%03d 0 %d %d" % (i, 300 if i % 9 else 9000, i + 1)]
    lines += ["subvol /c"] + ["create /c/g%03d 644" % i for i in range(200)]
    lines += ["write /c/g%03d 0 9000 %d" % (i, i) for i in range(0, 200, 7)]
    lines += ["subvoldel /c", "snapshot /a /b"]
    lines += ["write /b/f%03d 0 5000 %d" % (i, i + 50) for i in range(0, 300, 4)]
    lines += ["write /a/f%03d 0 5000 %d" % (i, i + 70) for i in range(1, 300, 5)]
    lines += ["snapshot /b /d", "write /d/f007 0 100 1", "subvoldel /b", "commit", "subvoldel /a", "commit"]
    drop_both(driver, casedir, lines, 3)
