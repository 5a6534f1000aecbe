# SPDX-License-Identifier: MIT
"""`ubtrfs check --repair` interrupted at every write: the old filesystem or the repaired
one, never a third; `rescue undo` from the undo file as the crash left it gives back the
image byte for byte.

A kernel-made image is damaged in every class the repair cures (test_repair.py's edits:
nlink, nbytes, a directory's size, a block group's used bytes, the free space tree, a
device's bytes_used); a second copy also in the nlink of every fourth of 300 files, so the
repair copies many leaves on write; a third on two devices (metadata DUP on one of them,
so craft.py can edit it), so the undo file and the recorder serve two devices at once.
tests/tools/repair_driver runs the checker and the repair library
on it with the devices stacked as `check --repair` stacks them, the undo device over a
recorder (include/ubtrfs/dev.h), so every undo record is durable before the write it
covers reaches the log. For every point k of the recorded writes and flushes (the second
image: 30 points spread over its longer log), and both sides of every superblock write, a
crash image keeps the writes before the last flush
and a seeded choice of the later ones (dropped, reordered). Each must be:

  * the old filesystem: `ubtrfs check` finds the same problems as before the repair, and
    `btrfs check` prints the same; or
  * the repaired one: `ubtrfs check` and `btrfs check` find nothing.

ubtrfs reads the newest valid superblock copy, btrfs check and the kernel the primary: a
crash between the writes of the two copies (the primary dropped, the mirror landed) leaves
a primary one commit behind, so the two readers may each see another of the two (counted
as "primary behind"); each on its own must be one of the two.

and in both, every file reads as before. The undo file cut to its length when the last
write before k was issued (what fdatasync had made durable) gives the image back byte for
byte through `ubtrfs rescue undo` (a crash before the first write leaves a file that
names no device: rescue undo says the run wrote nothing, and the image is as it was).

Budget: about 30 s with -n 2 (btrfs check of the two-device states runs on loop devices).
"""

import difflib
import os
import re
import shutil
from pathlib import Path

import pytest

import craft as C
import multidev_lib as M
import repair_lib as RL
import test_repair as R
import ubtrfs_testlib as T

MiB = T.MiB
EDITS = (R.edit_nlink, R.edit_nbytes, R.edit_dir_size, R.edit_bg_used, R.edit_free_space, R.edit_dev_used)


def edit_many_nlinks(im):
    """nlink raised in every fourth regular file: a cure in many leaves, so many blocks copied on write."""
    root = im.tree_root(C.FS_TREE)[0]
    n = 0
    for b, s in im.walk(root):
        k = b.item_key(s)
        if k.type == C.INODE_ITEM and k.objectid >= 257 and R.is_reg(b, s):
            n += 1
            if n % 4 == 0:
                b.patch_item(s, C.INODE_NLINK, "<I", b.get_item(s, C.INODE_NLINK, "<I") + 3)
                im.write_block(b)
    assert n > 200, n


# damage name: (the edits, the crash points: "all" of them or that many spread over the
# log, the devices)
CASES = {
    "every-class": (EDITS, "all", 1),
    "many-leaves": (EDITS + (edit_many_nlinks,), "30", 1),
    "two-devices": (EDITS, "all", 2),
}


def _build(d, case):
    """A kernel-made image damaged as `case` says; what it reads and what check says.
    Two devices: metadata DUP and data single, so every tree block lies on one device
    (devid 2, where mkfs.btrfs puts it), the one craft.py edits."""
    ndev = CASES[case][2]
    imgs = [os.path.join(str(d), "damaged%d.img" % i) for i in range(ndev)]
    for img in imgs:
        with open(img, "wb") as f:
            f.truncate(128 * MiB if ndev == 1 else 160 * MiB)
    T.run(["mkfs.btrfs", "-f", "-q"] + (["-m", "dup", "-d", "single"] if ndev > 1 else []) + imgs)
    img = imgs[-1]
    if ndev > 1:
        dump = T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "chunk"] + imgs).stdout.decode()
        meta = [c for c in M.parse_chunks(dump) if c.kind != "data"]
        assert meta and all(dev == ndev for c in meta for dev, _ in c.stripes), meta
    with T.mounted(imgs, os.path.join(str(d), "mnt"), readonly=False) as m:
        os.makedirs(os.path.join(m, "dir", "sub"))
        for i, size in enumerate((0, 100, 3000, 5000, 70000, 300000)):
            with open(os.path.join(m, "dir", "f%d" % i), "wb") as f:
                f.write(bytes((i * 7 + j) % 251 for j in range(size)))
        os.link(os.path.join(m, "dir", "f4"), os.path.join(m, "dir", "sub", "hard"))
        for i in range(300):
            with open(os.path.join(m, "dir", "sub", "n%03d" % i), "w") as f:
                f.write("x" * (i * 13 % 3000))
        os.symlink("dir/f3", os.path.join(m, "link"))
    with C.Image(img) as im:
        for e in CASES[case][0]:
            e(im)
    return {"imgs": imgs}


@pytest.fixture(params=sorted(CASES))
def damaged(request, scratch):
    case = request.param
    d, got = T.shared_build("repair-crash-" + case, lambda d: _build(d, case), fallback_dir=scratch)
    work = Path(scratch) / ("repair-crash-" + case)
    work.mkdir()
    files, _ = RL.readable_files(got["imgs"], str(work))
    rc, probs = RL.ubtrfs_check(got["imgs"])
    assert rc == 1 and len(probs) >= 6, probs
    assert any(k.startswith("dir/f") for k in files), files
    yield got["imgs"], files, probs, work, CASES[case][1]
    shutil.rmtree(str(work), ignore_errors=True)


def undo_length_at(lengths, k):
    """The undo file's length a crash after the first k log entries left at least: what
    was durable when the last write before k was issued."""
    best = lengths["start"]
    for idx, n in lengths["writes"]:
        if idx < k:
            best = n
    return best


def btrfs_view(imgs, scratch):
    """None when `btrfs check` calls the filesystem clean, else its output less the lines
    that name the devices (the same damage, the same lines). Several devices: on loop
    devices (btrfs check finds the others by a scan)."""
    loops = []
    try:
        if len(imgs) > 1:
            loops = [T.losetup_attach(str(i), readonly=True) for i in imgs]
            T.run(["btrfs", "device", "scan"] + loops)
        cp = T.run(["btrfs", "check", "--readonly", loops[0] if loops else str(imgs[0])], check=False, timeout=60)
    finally:
        for dev in loops:
            T.losetup_detach(dev)
    if cp.returncode == 0:
        return None
    names = [str(i) for i in imgs] + loops
    lines = (cp.stdout + cp.stderr).decode(errors="replace").splitlines()
    # its scan of every block device also meets other tests' loop devices (one being
    # detached: "cannot scan /dev/loopN")
    return [ln for ln in lines if not any(n in ln for n in names) and not ln.startswith("ERROR: cannot scan ")]


def undo_lengths_at(lengths, k):
    n = undo_length_at(lengths, k)
    later = [m for idx, m in lengths["writes"] if idx >= k and m > n] + [lengths["end"]]
    return [n, n + (later[0] - n) // 2] if later[0] > n else [n]


def undo_back(crash, cuts, bases, n, what, failures):
    """`rescue undo` with the first n bytes of the undo file gives back the devices as they
    were. On copies of the crash images: each length starts from the same ones."""
    undo = crash / "cut.undo"
    imgs = [crash / ("cut-undone%d.img" % d) for d in range(len(cuts))]
    with open(crash / "repair.undo", "rb") as f:
        data = f.read(n)
    with open(undo, "wb") as f:
        f.write(data)
    for cut, img in zip(cuts, imgs):
        RL.copy_sparse(cut, img)
    cp = T.ubtrfs("rescue", "undo", undo, *imgs)
    same = all(RL.same_bytes(img, base) for img, base in zip(imgs, bases))
    if cp.returncode == 2 and b"wrote nothing" in cp.stderr and same:
        pass  # a crash before the first write: the file names no device, the images are as they were
    elif cp.returncode != 0 or RL.sanitizer_report(cp.stderr):
        failures.append("%s: rescue undo with %d bytes of undo file: %s" % (what, n, T.describe(cp)))
    elif not same:
        failures.append("%s: rescue undo with %d bytes of undo file did not give back the devices" % (what, n))
    os.unlink(undo)
    for img in imgs:
        os.unlink(img)


def parse_lengths(path):
    out = {"writes": []}
    with open(path) as f:
        for line in f:
            w = line.split()
            if w[0] == "W":
                out["writes"].append((int(w[1]), int(w[2])))
            else:
                out[w[0]] = int(w[1])
    return out


def test_repair_interrupted_at_every_write(ubtrfs_bin, damaged):
    srcs, files, probs_before, work, cuts_arg = damaged
    ndev = len(srcs)
    driver = T.test_tool("repair_driver")
    crash = work / "crash"
    crash.mkdir()
    imgs = [work / ("fs%d.img" % d) for d in range(ndev)]
    for src, img in zip(srcs, imgs):
        RL.copy_sparse(src, img)
    cp = T.run([driver, "--crash-dir", crash, "--crash-cuts", cuts_arg] + imgs, check=False, timeout=120)
    out = cp.stdout.decode()
    assert cp.returncode == 0 and not RL.sanitizer_report(cp.stderr), cp.stderr.decode(errors="replace")[-4000:]
    assert re.search(r"^noted \d+ curable [1-9]\d* changes [1-9]\d* generation [1-9]", out, re.M), out
    # the repair itself: what a finished run leaves
    assert btrfs_view(imgs, work) is None, "btrfs check after the driver's repair"
    assert RL.ubtrfs_check(imgs)[0] == 0
    lengths = parse_lengths(crash / "undo_lengths")
    assert lengths["end"] > lengths["start"] and lengths["writes"], lengths
    cuts = [(int(c), int(k), int(n)) for c, k, n in re.findall(r"^cut (\d+) entries (\d+) of (\d+)$", out, re.M)]
    total = cuts[0][2]
    if cuts_arg == "all":
        # every point of the log, 0..total
        assert {k for _, k, _ in cuts} == set(range(total + 1)), (cuts, total)
    else:
        assert len({k for _, k, _ in cuts}) >= int(cuts_arg), (cuts, total)
    bases = [crash / ("base_dev%d.img" % d) for d in range(ndev)]
    assert all(RL.same_bytes(base, src) for base, src in zip(bases, srcs))
    ref_before = btrfs_view(srcs, work)
    assert ref_before, "btrfs check calls the damaged filesystem clean"
    seen = {"old": 0, "repaired": 0, "primary behind": 0}
    failures = []
    for c, k, _ in cuts:
        cut = [crash / ("cut%d_dev%d.img" % (c, d)) for d in range(ndev)]
        what = "cut %d (after %d of %d entries)" % (c, k, total)
        # ubtrfs reads the newest valid superblock copy, btrfs check (and the kernel) the
        # primary: a crash between the two copies' writes may show each another commit,
        # and each must be the old filesystem or the repaired one
        rc, probs = RL.ubtrfs_check(cut)
        ours = "old" if rc == 1 and probs == probs_before else "repaired" if rc == 0 else None
        ref = btrfs_view(cut, work)
        theirs = "repaired" if ref is None else "old" if ref == ref_before else None
        if ours is None or theirs is None:
            diff = difflib.unified_diff(ref_before, ref or [], lineterm="", n=1)
            failures.append("%s: neither the old filesystem nor the repaired one: ubtrfs check exit %d (%s), "
                            "btrfs check (%s)\n%s\nbtrfs check against before:\n%s" % (
                                what, rc, ours, theirs, "\n".join(repr(p) for p in probs[:10]), "\n".join(diff)))
        else:
            seen[ours] += 1
            seen["primary behind"] += ours != theirs
        got, _ = RL.readable_files(cut, str(work))
        if got != files:
            lost = sorted(set(files.items()) - set(got.items()))[:10]
            failures.append("%s (%s): files read differently: %r" % (what, ours, lost))
        # the undo file as the crash left it: what was durable, and that with half of the
        # record being written when the crash came (not yet durable, so torn)
        for n in undo_lengths_at(lengths, k):
            undo_back(crash, cut, bases, n, what, failures)
        for p in cut:
            os.unlink(p)
        if len(failures) > 6:
            break
    assert not failures, "\n\n".join(failures)
    # the log covers both: crash points before the commit and after it
    assert seen["old"] > 0 and seen["repaired"] > 0, seen
