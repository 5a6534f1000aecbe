# SPDX-License-Identifier: MIT
"""`ubtrfs check`, class free-space: the v1 space cache against the extents.

The kernel writes a v1 cache only for block groups of 100 MiB and more and only when
mounted with space_cache=v1 on a filesystem without a free space tree, so the image is
a sparse 4 GiB file made with `mkfs.btrfs -R ^free-space-tree`. The cache file of a
data block group is edited in place (its page checksum rewritten, so the kernel would
load it) and `btrfs check --readonly` is the referee. A cache the kernel would not load
(a page checksum that does not match) is no problem for either checker: the kernel
rebuilds it.
"""

import os
import random
import struct

import pytest

import craft as C
import ubtrfs_testlib as T
from test_check import btrfs_check, check, problems

pytestmark = pytest.mark.xdist_group("check-v1cache")

FREE_SPACE_OBJECTID = (1 << 64) - 11
HDR_LOCATION, HDR_GENERATION, HDR_ENTRIES, HDR_BITMAPS = 0, 17, 25, 33
BLOCK_GROUP_ITEM, BG_FLAGS, BG_DATA = 192, 16, 1
PAGE, ENTRY = 4096, 17


@pytest.fixture(scope="module")
def v1_image(tmp_path_factory):
    base = tmp_path_factory.mktemp("v1cache")
    img = base / "v1.img"
    with open(img, "wb") as f:
        f.truncate(4 << 30)
    T.run(["mkfs.btrfs", "-q", "-f", "-R", "^free-space-tree", img])
    rng = random.Random(11)
    with T.mounted([img], base / "mnt", options="space_cache=v1,nodiscard", readonly=False) as m:
        for i in range(300):
            with open(os.path.join(m, "f%d" % i), "wb") as f:
                f.write(rng.randbytes(rng.choice((5000, 40000, 300000))))
        T.run(["sync"])
        for i in range(0, 300, 3):
            os.unlink(os.path.join(m, "f%d" % i))
        T.run(["sync"])
    if not _caches(img):
        pytest.skip("the kernel wrote no v1 space cache with entries (space_cache=v1 not honoured?)")
    return img


def _caches(img):
    """[(block group start, inode, entries)] of the v1 caches of data block groups."""
    out = []
    with C.Image(img) as im:
        data_bgs = {b.item_key(s).objectid for b, s in im.walk(im.tree_root(C.EXTENT_TREE)[0])
                    if b.item_key(s).type == BLOCK_GROUP_ITEM and b.get_item(s, BG_FLAGS, "<Q") & BG_DATA}
        for b, s in im.walk(im.super("root")):
            k = b.item_key(s)
            if k.objectid == FREE_SPACE_OBJECTID and k.type == 0 and k.offset in data_bgs:
                entries = b.get_item(s, HDR_ENTRIES, "<Q")
                if entries and not b.get_item(s, HDR_BITMAPS, "<Q"):
                    out.append((k.offset, b.get_item(s, HDR_LOCATION, "<Q"), entries))
    return out


def _edit_first_page(img, edit, fix_crc=True):
    """Apply edit(page, first_entry_offset) to page 0 of the first data cache file; returns the bg."""
    bg, ino, _ = _caches(img)[0]
    with C.Image(img) as im:
        root = im.super("root")
        blk, slot = im.find_item(root, (ino, C.INODE_ITEM, 0))
        npages = (blk.get_item(slot, C.INODE_SIZE, "<Q") + PAGE - 1) // PAGE
        blk, slot = im.find_item(root, lambda k: k.objectid == ino and k.type == C.EXTENT_DATA)
        assert blk.item_key(slot).offset == 0
        logical = blk.get_item(slot, C.FE_DISK_BYTENR, "<Q") + blk.get_item(slot, C.FE_OFFSET, "<Q")
        phys = im.physical(logical)
        page = bytearray(im._pread(phys[0], PAGE))
        edit(page, 4 * npages + 8)
        if fix_crc:
            page[0:4] = struct.pack("<I", C.crc32c(bytes(page[4 * npages:])))
        for p in phys:
            im._pwrite(p, bytes(page))
    return bg


def test_clean(ubtrfs_bin, v1_image):
    assert btrfs_check(v1_image).returncode == 0
    cp = check("--json", v1_image)
    recs, summary = problems(cp)
    assert cp.returncode == 0 and not recs, T.describe(cp) + cp.stdout.decode()[-3000:]
    assert summary["space_caches"] >= len(_caches(v1_image)) >= 1


@pytest.fixture
def img(v1_image, tmp_path):
    dst = tmp_path / "v1.img"
    T.copy_sparse(v1_image, dst)
    return dst


def _refereed(img, edit):
    bg = _edit_first_page(img, edit)
    ref = btrfs_check(img)
    assert ref.returncode != 0, "the referee calls the damage clean:\n" + ref.stdout.decode()[-2000:]
    cp = check("--json", img)
    recs, _ = problems(cp)
    assert cp.returncode == 1, T.describe(cp) + cp.stdout.decode()[-3000:]
    return bg, recs


def test_free_space_grown(ubtrfs_bin, img):
    """The first entry one sector longer: more free space than the block group item leaves."""
    def grow(page, at):
        size = struct.unpack_from("<Q", page, at + 8)[0]
        struct.pack_into("<Q", page, at + 8, size + 4096)
    bg, recs = _refereed(img, grow)
    assert any(r["class"] == "free-space" and r["key"] == [FREE_SPACE_OBJECTID, 0, bg] for r in recs), recs


def test_free_space_shifted_onto_an_extent(ubtrfs_bin, img):
    """The first entry one sector earlier, same length: the sum is right, a used sector is called free."""
    def shift(page, at):
        off = struct.unpack_from("<Q", page, at)[0]
        struct.pack_into("<Q", page, at, off - 4096)
    bg, recs = _refereed(img, shift)
    assert any(r["class"] == "free-space" and r["key"] == [FREE_SPACE_OBJECTID, 0, bg] and "holds it" in r["message"]
               for r in recs), recs


def test_bad_page_checksum_is_no_problem(ubtrfs_bin, img):
    """A cache the kernel would not load (page checksum mismatch) is rebuilt, not trusted: both call it clean."""
    def flip(page, at):
        page[at] ^= 0x10
    _edit_first_page(img, flip, fix_crc=False)
    assert btrfs_check(img).returncode == 0
    cp = check("--json", img)
    recs, summary = problems(cp)
    assert cp.returncode == 0 and not recs, recs
    cp = check("-vv", img)
    assert b"page checksum does not match" in cp.stderr, T.describe(cp)
