# SPDX-License-Identifier: MIT
"""`ubtrfs check`, class qgroup: the quota tree's counts against what the subvolumes reach.

A kernel-made image with quotas on (subvolumes, a snapshot sharing with its source,
reflinks across subvolumes, zstd, a subvolume deleted and dropped, a level-1 and a
level-2 qgroup) is clean for both checkers; each damage is written into a private
copy with its block checksum rewritten, and `btrfs check --readonly` is the referee.
The corpus has the rest: 032-corrupted-qgroup (counts of zero) is found, and
022/036 (a rescan halfway, a rescan never started) and 023 (a consistent quota tree
over shared blocks) are clean, as btrfs check says (test_check_corpus.py).
"""

import os
import random
import struct

import pytest

import craft as C
import ubtrfs_testlib as T
from test_check import btrfs_check, check, damaged, problems

pytestmark = pytest.mark.xdist_group("check-qgroup")

QUOTA_TREE = 8
QGROUP_STATUS, QGROUP_INFO, QGROUP_RELATION = 240, 242, 246
STATUS_FLAGS = 16                 # btrfs_qgroup_status_item: version, generation, flags
FLAG_ON, FLAG_INCONSISTENT = 1, 4
INFO_RFER, INFO_EXCL = 8, 24      # btrfs_qgroup_info_item: generation, rfer, rfer_cmpr, excl


def _populate(m, rng):
    T.run(["btrfs", "quota", "enable", m])
    T.run(["btrfs", "qgroup", "create", "1/100", m])
    T.run(["btrfs", "qgroup", "create", "2/1", m])
    T.run(["btrfs", "qgroup", "assign", "1/100", "2/1", m])
    T.run(["btrfs", "subvolume", "create", "-i", "1/100", os.path.join(m, "sv")])
    sv = os.path.join(m, "sv")
    with open(os.path.join(sv, "big"), "wb") as f:
        f.write(rng.randbytes(3 * T.MiB))
    with open(os.path.join(sv, "text"), "wb") as f:
        f.write(b"compressible line of text\n" * 40000)
    os.mkdir(os.path.join(sv, "d"))
    for i in range(400):
        with open(os.path.join(sv, "d", "f%d" % i), "wb") as f:
            f.write(rng.randbytes(rng.choice((100, 3000, 9000))))
    T.run(["sync"])
    T.run(["btrfs", "subvolume", "snapshot", "-i", "1/100", sv, os.path.join(m, "snap")])
    with open(os.path.join(m, "snap", "big"), "r+b") as f:
        f.seek(T.MiB)
        f.write(rng.randbytes(300000))
    T.run(["cp", "--reflink=always", os.path.join(sv, "big"), os.path.join(m, "ref_at_top")])
    T.run(["btrfs", "subvolume", "create", os.path.join(m, "gone")])
    with open(os.path.join(m, "gone", "x"), "wb") as f:
        f.write(rng.randbytes(T.MiB))
    T.run(["sync"])
    T.run(["btrfs", "subvolume", "delete", os.path.join(m, "gone")])
    T.run(["btrfs", "subvolume", "sync", m])
    # anything that left the counts to a rescan: wait for it
    T.run(["btrfs", "quota", "rescan", "-W", m], check=False)


def _status_flags(img):
    with C.Image(img) as im:
        blk, slot = im.find_item(im.tree_root(QUOTA_TREE)[0], lambda k: k.type == QGROUP_STATUS)
        return blk.get_item(slot, STATUS_FLAGS, "<Q")


@pytest.fixture(scope="module")
def quota_image(tmp_path_factory):
    base = tmp_path_factory.mktemp("qgroup")
    img = base / "quota.img"
    with open(img, "wb") as f:
        f.truncate(512 * T.MiB)
    T.run(["mkfs.btrfs", "-q", "-f", img])
    # commit=1: the deleted subvolume is dropped by the kernel's cleaner, which a commit wakes
    # (the default 30 s was most of this setup)
    with T.mounted([img], base / "mnt", options="compress=zstd,commit=1", readonly=False) as m:
        _populate(m, random.Random(8))
        T.run(["sync"])
    flags = _status_flags(img)
    if flags & FLAG_INCONSISTENT or not flags & FLAG_ON:
        pytest.skip("the kernel left the quota counts inconsistent (status flags %#x): no clean base" % flags)
    return img


@pytest.fixture
def img(quota_image, tmp_path):
    dst = tmp_path / "q.img"
    T.copy_sparse(quota_image, dst)
    return dst


def test_clean(ubtrfs_bin, quota_image):
    assert btrfs_check(quota_image).returncode == 0
    cp = check("--json", quota_image)
    recs, summary = problems(cp)
    assert cp.returncode == 0 and not recs, T.describe(cp) + cp.stdout.decode()[-3000:]
    with C.Image(quota_image) as im:
        infos = im.find_items(im.tree_root(QUOTA_TREE)[0], lambda k: k.type == QGROUP_INFO)
    # 0/5, sv, snap, 1/100, 2/1 at least (the dropped subvolume's may be gone)
    assert summary["qgroups"] == len(infos) >= 5


def _info(im, qgroupid):
    return im.find_item(im.tree_root(QUOTA_TREE)[0], (0, QGROUP_INFO, qgroupid))


def _subvol_ids(im):
    return sorted(oid for (oid, _) in im.root_items() if C.FIRST_FREE_OBJECTID <= oid < (1 << 48))


def test_referenced_wrong(ubtrfs_bin, img):
    where = {}

    def edit(im):
        sv = _subvol_ids(im)[0]
        blk, slot = _info(im, sv)
        where["id"] = sv
        blk.patch_item(slot, INFO_RFER, "<Q", blk.get_item(slot, INFO_RFER, "<Q") + 4096)
        im.write_block(blk)
    recs = damaged(img, edit)
    key = [0, QGROUP_INFO, where["id"]]
    assert any(r["class"] == "qgroup" and r["key"] == key and "referenced" in r["message"]
               and "0/%d" % where["id"] in r["message"] for r in recs), recs
    # the exclusive count was left alone, and nothing else is reported
    assert all(r["class"] == "qgroup" and "referenced" in r["message"] for r in recs), recs


def test_exclusive_wrong_higher_level(ubtrfs_bin, img):
    qid = (1 << 48) | 100

    def edit(im):
        blk, slot = _info(im, qid)
        blk.patch_item(slot, INFO_EXCL, "<Q", blk.get_item(slot, INFO_EXCL, "<Q") + 16384)
        im.write_block(blk)
    recs = damaged(img, edit)
    assert any(r["class"] == "qgroup" and r["key"] == [0, QGROUP_INFO, qid] and "1/100: exclusive" in r["message"]
               for r in recs), recs


def test_relation_dropped(ubtrfs_bin, img):
    """Both relation items of snap in 1/100 removed: 1/100 and 2/1 no longer hold what snap alone holds."""
    def edit(im):
        snap = _subvol_ids(im)[1]
        for key in ((snap, QGROUP_RELATION, (1 << 48) | 100), ((1 << 48) | 100, QGROUP_RELATION, snap)):
            blk, slot = im.find_item(im.tree_root(QUOTA_TREE)[0], key)
            blk.delete_item(slot)
            im.write_block(blk)
    recs = damaged(img, edit)
    assert any(r["class"] == "qgroup" and "1/100" in r["message"] for r in recs), recs


def test_inconsistent_not_judged(ubtrfs_bin, img):
    """Counts marked inconsistent are the kernel's to rescan: neither checker judges them."""
    with C.Image(img) as im:
        blk, slot = im.find_item(im.tree_root(QUOTA_TREE)[0], lambda k: k.type == QGROUP_STATUS)
        blk.patch_item(slot, STATUS_FLAGS, "<Q", blk.get_item(slot, STATUS_FLAGS, "<Q") | FLAG_INCONSISTENT)
        im.write_block(blk)
        blk, slot = _info(im, C.FS_TREE)
        blk.patch_item(slot, INFO_RFER, "<Q", 0)
        im.write_block(blk)
    assert btrfs_check(img).returncode == 0
    cp = check("--json", img)
    recs, summary = problems(cp)
    assert cp.returncode == 0 and not recs and summary["qgroups"] == 0, recs
    cp = check("-v", img)
    assert b"qgroup counts not verified" in cp.stderr, T.describe(cp)


def _counts(img):
    """Every qgroup's (referenced, exclusive) as the quota tree holds them."""
    with C.Image(img) as im:
        out = {}
        for blk, slot in im.find_items(im.tree_root(QUOTA_TREE)[0], lambda k: k.type == QGROUP_INFO):
            out[blk.item_key(slot).offset] = (blk.get_item(slot, INFO_RFER, "<Q"), blk.get_item(slot, INFO_EXCL, "<Q"))
        return out


def _kernel_counts(img, mnt):
    """The counts the kernel shows after its own rescan (its mount writes nothing else here)."""
    with T.mounted([img], mnt, readonly=False) as m:
        T.run(["btrfs", "quota", "rescan", "-w", m])
        out = T.run(["btrfs", "qgroup", "show", "--raw", m]).stdout.decode()
    counts = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 3 and "/" in f[0] and f[1].isdigit():
            level, qid = f[0].split("/")
            counts[(int(level) << 48) | int(qid)] = (int(f[1]), int(f[2]))
    return counts


def test_repair_sets_the_counts(ubtrfs_bin, img, tmp_path):
    """Three qgroups' counts broken (a subvolume's referenced, a level-1 exclusive, the top level's
    zeroed, as fsck/032 has them): `check --repair` sets what the subvolumes reach, which is what
    the kernel counted when it made the image; btrfs check is clean; the kernel's mount trusts the
    counts (no generation mismatch) and its own rescan finds the same; the undo file gives the
    damaged image back byte for byte."""
    good = _counts(img)
    qid = (1 << 48) | 100

    def edit(im):
        sv = _subvol_ids(im)[0]
        blk, slot = _info(im, sv)
        blk.patch_item(slot, INFO_RFER, "<Q", blk.get_item(slot, INFO_RFER, "<Q") + 4096)
        im.write_block(blk)
        blk, slot = _info(im, qid)
        blk.patch_item(slot, INFO_EXCL, "<Q", blk.get_item(slot, INFO_EXCL, "<Q") + 16384)
        im.write_block(blk)
        blk, slot = _info(im, C.FS_TREE)
        blk.patch_item(slot, INFO_RFER, "<Q", 0)
        blk.patch_item(slot, INFO_EXCL, "<Q", 0)
        im.write_block(blk)
    damaged(img, edit)
    with open(img, "rb") as f:
        before = f.read()
    undo = tmp_path / "q.undo"
    cp = T.ubtrfs("check", "--repair", "--undo-file", str(undo), str(img), timeout=120)
    assert cp.returncode == 0, T.describe(cp) + cp.stdout.decode()[-3000:]
    assert cp.stdout.decode().count("repair: qgroup ") == 3, cp.stdout.decode()[-3000:]
    assert _counts(img) == good
    ref = btrfs_check(img)
    assert ref.returncode == 0, ref.stdout.decode()[-3000:] + ref.stderr.decode()[-2000:]
    with C.Image(img) as im:
        blk, slot = im.find_item(im.tree_root(QUOTA_TREE)[0], lambda k: k.type == QGROUP_STATUS)
        assert not blk.get_item(slot, STATUS_FLAGS, "<Q") & FLAG_INCONSISTENT
    kimg = tmp_path / "k.img"
    T.copy_sparse(img, kimg)
    assert _kernel_counts(kimg, tmp_path / "kmnt") == good
    cp = T.ubtrfs("rescue", "undo", str(undo), str(img))
    assert cp.returncode == 0, T.describe(cp)
    with open(img, "rb") as f:
        assert f.read() == before, "the undo file did not give the damaged image back"
