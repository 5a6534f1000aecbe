# SPDX-License-Identifier: MIT
"""`ubtrfs check`: no false alarms on clean images, each injected damage found in its class.

Oracles: images made by mkfs.btrfs and the kernel, which `btrfs check` also
calls clean; damage injected with tests/integration/craft.py (block checksums
rewritten, so the damage is read, not rejected as a bad checksum), with
`btrfs check --readonly` on the same image as the referee that it is damage.
The btrfs-progs corpus sweep is test_check_corpus.py.
"""

import json
import struct

import pytest

import craft as C
import fsynclog_lib as L
import ubtrfs_testlib as T

# a slice of profiles, checksums, node sizes, snapshots and compression (docs/check.md)
CLEAN_IMAGES = ["rootdir-crc32c-4096", "rootdir-xxhash-16384", "rootdir-mixed", "kernel-subvol-zstd",
                "kernel-raid1", "kernel-raid5"]


def check(*args):
    return T.ubtrfs("check", *[str(a) for a in args], timeout=120)


def problems(cp):
    """The --json problem records and the summary."""
    recs = [json.loads(line) for line in cp.stdout.decode().splitlines() if line.strip()]
    assert recs and "summary" in recs[-1], T.describe(cp)
    return recs[:-1], recs[-1]["summary"]


def btrfs_check(image):
    return T.run(["btrfs", "check", "--readonly", str(image)], check=False, timeout=120)


@pytest.mark.parametrize("name", CLEAN_IMAGES)
def test_clean_image(ubtrfs_bin, factory, name):
    image = factory.image(name)
    cp = check("--json", *image.devices)
    recs, summary = problems(cp)
    assert cp.returncode == 0 and not recs, "%s\n%s" % (T.describe(cp), cp.stdout.decode()[-3000:])
    assert summary["tree_blocks"] > 0 and summary["chunks"] > 0 and summary["dev_extents"] >= summary["chunks"]
    if len(image.devices) == 1:
        # the referee agrees (a multi-device one would need its devices registered first)
        assert btrfs_check(image.devices[0]).returncode == 0


def test_clean_ubtrfs_mkfs(ubtrfs_bin, tmp_path):
    img = tmp_path / "own.img"
    with open(img, "wb") as f:
        f.truncate(200 * T.MiB)
    T.run([ubtrfs_bin, "mkfs", "-q", img])
    cp = check(img)
    assert cp.returncode == 0, T.describe(cp) + cp.stdout.decode()
    assert b"problems: 0" in cp.stdout
    assert btrfs_check(img).returncode == 0


def test_clean_pending_log(ubtrfs_bin, tmp_path):
    """A crash image whose superblock names an fsync log: its log trees are walked too."""
    def baseline(mnt):
        (mnt / "d").mkdir()
        L.write_file(mnt / "d" / "old", b"x" * 5000)

    def action(mnt):
        L.write_file(mnt / "d" / "new", bytes(range(256)) * 40, fsync=True)
    crash = L.make_crash(tmp_path / "log", baseline, action)
    assert crash.log_root != 0
    cp = check("--json", crash.image)
    recs, summary = problems(cp)
    assert cp.returncode == 0 and not recs, T.describe(cp) + cp.stdout.decode()[-3000:]
    cp_nolog = check("--json", "--no-log", crash.image)
    _, summary_nolog = problems(cp_nolog)
    # the log root tree and one log tree more than the committed trees
    assert summary["trees"] >= summary_nolog["trees"] + 2, (summary, summary_nolog)
    assert btrfs_check(crash.image).returncode == 0


def test_missing_device(ubtrfs_bin, factory):
    """RAID1 with one device left out still opens; the missing one is a problem of its own."""
    image = factory.image("kernel-raid1")
    cp = check("--json", "--no-scan", image.devices[0])
    recs, _ = problems(cp)
    assert cp.returncode == 1, T.describe(cp)
    assert any(r["class"] == "super" and r["devid"] == 2 and "missing" in r["message"] for r in recs), recs


def test_usage(ubtrfs_bin, tmp_path):
    cp = check("--help")
    assert cp.returncode == 0 and b"usage: ubtrfs check" in cp.stdout
    assert check().returncode == 2
    assert check("--bogus", "x").returncode == 2
    cp = check(tmp_path / "absent.img")
    assert cp.returncode == 2 and b"error" in cp.stderr


@pytest.fixture
def base(factory, tmp_path):
    """A private copy of a small mkfs.btrfs --rootdir image (DUP metadata, 16 KiB nodes)."""
    src = factory.image("damage-base").devices[0]
    dst = tmp_path / "damaged.img"
    T.copy_sparse(src, dst)
    return dst


def damaged(img, edit):
    with C.Image(img) as im:
        edit(im)
    ref = btrfs_check(img)
    assert ref.returncode != 0, "the referee calls the damage clean:\n" + ref.stdout.decode()[-2000:]
    cp = check("--json", img)
    recs, _ = problems(cp)
    assert cp.returncode == 1, T.describe(cp) + cp.stdout.decode()[-3000:]
    return recs


def unrefereed(img, edit):
    """Damage btrfs check does not look at: the test's own record of what it broke is the oracle."""
    with C.Image(img) as im:
        edit(im)
    cp = check("--json", img)
    recs, _ = problems(cp)
    assert cp.returncode == 1, T.describe(cp) + cp.stdout.decode()[-3000:]
    return recs


def _find(im, tree, pred):
    root = {C.CHUNK_TREE: im.super("chunk_root"), C.ROOT_TREE: im.super("root")}.get(tree) or im.tree_root(tree)[0]
    got = im.find_item(root, pred)
    assert got, "no such item"
    return got


def bump_first(img, tree, typ, delta):
    """Add `delta` to the u64 an item starts with (the first item of type `typ` in `tree`):
    the item's objectid and what ubtrfs check reports."""
    where = {}

    def edit(im):
        blk, slot = _find(im, tree, lambda k: k.type == typ)
        where["objectid"] = blk.item_key(slot).objectid
        blk.patch_item(slot, 0, "<Q", blk.get_item(slot, 0, "<Q") + delta)
        im.write_block(blk)
    recs = damaged(img, edit)
    return where["objectid"], recs


def test_block_group_used(ubtrfs_bin, base):
    bg, recs = bump_first(base, C.EXTENT_TREE, C.BLOCK_GROUP_ITEM, 4096)
    assert any(r["class"] == "chunk" and r["tree"] == C.EXTENT_TREE and r["logical"] == bg
               and "used" in r["message"] for r in recs), recs


def test_dev_extent_length(ubtrfs_bin, base):
    where = {}

    def edit(im):
        blk, slot = _find(im, C.DEV_TREE, lambda k: k.type == C.DEV_EXTENT)
        k = blk.item_key(slot)
        where.update(devid=k.objectid, physical=k.offset, chunk=blk.get_item(slot, 16, "<Q"))
        blk.patch_item(slot, 24, "<Q", blk.get_item(slot, 24, "<Q") + T.MiB)
        im.write_block(blk)
    recs = damaged(base, edit)
    assert any(r["class"] == "chunk" and r["tree"] == C.DEV_TREE and r["devid"] == where["devid"]
               and r["physical"] == where["physical"] and r["logical"] == where["chunk"]
               and "length" in r["message"] for r in recs), recs


def test_dev_extent_missing(ubtrfs_bin, base):
    where = {}

    def edit(im):
        # the last device extent: a chunk stripe left without one
        items = im.find_items(im.tree_root(C.DEV_TREE)[0], lambda k: k.type == C.DEV_EXTENT)
        blk, slot = items[-1]
        where.update(chunk=blk.get_item(slot, 16, "<Q"), physical=blk.item_key(slot).offset)
        blk.delete_item(slot)
        im.write_block(blk)
    recs = damaged(base, edit)
    assert any(r["class"] == "chunk" and r["logical"] == where["chunk"] and r["physical"] == where["physical"]
               and "no device extent" in r["message"] for r in recs), recs


def test_super_bytes_used(ubtrfs_bin, base):
    recs = damaged(base, lambda im: im.set_super(bytes_used=im.super("bytes_used") + 65536))
    assert any(r["class"] == "super" and "bytes_used" in r["message"] for r in recs), recs


def test_key_order(ubtrfs_bin, base):
    where = {}

    def edit(im):
        # two neighbouring DIR_INDEX items of one directory: the first one's offset past the second's
        def pred(k):
            return k.type == C.DIR_INDEX
        for blk, slot in im.find_items(im.tree_root(C.FS_TREE)[0], pred):
            if slot + 1 < blk.nritems() and blk.item_key(slot + 1).type == C.DIR_INDEX:
                k, k2 = blk.item_key(slot), blk.item_key(slot + 1)
                blk.set_item_key(slot, C.Key(k.objectid, k.type, k2.offset + 1))
                im.write_block(blk)
                where["block"] = blk.logical
                return
        raise AssertionError("no two neighbouring DIR_INDEX items")
    recs = damaged(base, edit)
    assert any(r["class"] == "tree" and r["tree"] == C.FS_TREE and r["logical"] == where["block"]
               for r in recs), recs


def test_tree_block_refs(ubtrfs_bin, base):
    block, recs = bump_first(base, C.EXTENT_TREE, C.METADATA_ITEM, 1)
    assert any(r["class"] == "extent" and r["logical"] == block and "references" in r["message"]
               for r in recs), recs


def test_tree_block_extent_item_missing(ubtrfs_bin, base):
    where = {}

    def edit(im):
        # the FS_TREE root's extent item removed: a block no extent item accounts for
        root = im.tree_root(C.FS_TREE)[0]
        where["block"] = root
        blk, slot = _find(im, C.EXTENT_TREE, lambda k: k.type == C.METADATA_ITEM and k.objectid == root)
        blk.delete_item(slot)
        im.write_block(blk)
    recs = damaged(base, edit)
    assert any(r["class"] == "extent" and r["tree"] == C.FS_TREE and r["logical"] == where["block"]
               and "no extent item" in r["message"] for r in recs), recs


def test_sys_chunk_array_differs(ubtrfs_bin, base):
    # no referee: btrfs check (and the kernel) map SYSTEM chunks by the array and skip the
    # tree's copy, so the two can disagree unseen until a balance moves the chunk
    where = {}

    def edit(im):
        # the chunk tree's SYSTEM chunk moves its second copy; the superblock's array keeps the old place
        blk, slot = _find(im, C.CHUNK_TREE,
                          lambda k: k.type == C.CHUNK_ITEM and k.objectid == 256 and
                          im.chunk(k.offset).type & C.BLOCK_GROUP_SYSTEM)
        where["chunk"] = blk.item_key(slot).offset
        blk.patch_item(slot, 48 + 32 + 8, "<Q", blk.get_item(slot, 48 + 32 + 8, "<Q") + T.MiB)
        im.write_block(blk)
    recs = unrefereed(base, edit)
    assert any(r["class"] == "super" and r["logical"] == where["chunk"] and "system chunk array" in r["message"]
               for r in recs), recs


def test_free_space_extent(ubtrfs_bin, base):
    where = {}

    def edit(im):
        # a free space extent of a real block group (those below the first chunk are mkfs leftovers) one sector short
        first = min(c.logical for c in im.chunks)
        blk, slot = _find(im, 10, lambda k: k.type == 199 and k.objectid >= first)
        k = blk.item_key(slot)
        where["bg"] = im.chunk(k.objectid).logical
        blk.set_item_key(slot, C.Key(k.objectid, k.type, k.offset - im.sectorsize))
        im.write_block(blk)
    recs = damaged(base, edit)
    assert any(r["class"] == "free-space" and r["logical"] == where["bg"] and "free bytes" in r["message"]
               for r in recs), recs


def test_super_total_bytes(ubtrfs_bin, base):
    """The kernel refuses a filesystem whose devices hold more than total_bytes; so does the
    library's open: the superblocks are still checked and the check is fatal."""
    with C.Image(base) as im:
        im.set_super(total_bytes=im.super("total_bytes") - T.MiB)
    assert btrfs_check(base).returncode != 0
    cp = check("--json", base)
    recs, summary = problems(cp)
    assert cp.returncode == 2 and not summary["opened"] and b"error" in cp.stderr, T.describe(cp)
    assert any(r["class"] == "super" and r["physical"] == C.SUPER_OFFSETS[0] and "total_bytes" in r["message"]
               for r in recs), recs


def test_root_backref_missing(ubtrfs_bin, factory, tmp_path):
    img = tmp_path / "subvol.img"
    T.copy_sparse(factory.image("kernel-subvol-zstd").devices[0], img)
    where = {}

    def edit(im):
        blk, slot = _find(im, C.ROOT_TREE, lambda k: k.type == C.ROOT_BACKREF)
        where["key"] = tuple(blk.item_key(slot))
        blk.delete_item(slot)
        im.write_block(blk)
    recs = damaged(img, edit)
    child, _, parent = where["key"]
    assert any(r["class"] == "root" and r["key"] == [parent, C.ROOT_REF, child] and "without" in r["message"]
               for r in recs), recs
    assert any(r["class"] == "root" and r["key"][0] == child and "linked nowhere" in r["message"]
               for r in recs), recs


def test_subvol_dir_index_missing(ubtrfs_bin, factory, tmp_path):
    """The top tree's DIR_INDEX naming a subvolume removed: its ROOT_REF has half a link."""
    img = tmp_path / "subvol.img"
    T.copy_sparse(factory.image("kernel-subvol-zstd").devices[0], img)
    where = {}

    def edit(im):
        # the entry's location key: objectid, then type ROOT_ITEM
        blk = slot = None
        for b, s in im.walk(im.tree_root(C.FS_TREE)[0]):
            if b.item_key(s).type == C.DIR_INDEX and b.get_item(s, 8, "<B") == C.ROOT_ITEM:
                blk, slot = b, s
                break
        assert blk, "no subvolume entry in the top tree"
        where["child"] = blk.get_item(slot, 0, "<Q")
        blk.delete_item(slot)
        im.write_block(blk)
    recs = damaged(img, edit)
    assert any(r["class"] == "root" and r["key"] == [C.FS_TREE, C.ROOT_REF, where["child"]] and
               "DIR_INDEX" in r["message"] for r in recs), recs


def test_super_copy_damaged(ubtrfs_bin, base):
    # btrfs check reads only the copy in use: the test's own record is the oracle here
    T.overwrite(base, C.SUPER_OFFSETS[1] + 0x1000 - 16, b"\xff" * 8)
    cp = check("--json", base)
    recs, _ = problems(cp)
    assert cp.returncode == 1
    assert any(r["class"] == "super" and r["physical"] == C.SUPER_OFFSETS[1] and "checksum" in r["message"]
               for r in recs), recs


def test_backup_root_newer(ubtrfs_bin, base):
    # no referee: btrfs check ignores backup roots it does not need
    def edit(im):
        gen = im.super("generation")

        def fn(buf):
            off = 0xb2b + 8  # backup root 0's tree_root_gen
            struct.pack_into("<Q", buf, off, gen + 5)
        im.edit_super(fn)
    recs = unrefereed(base, edit)
    assert any(r["class"] == "super" and "backup root 0" in r["message"] for r in recs), recs


def test_refuses_mounted(ubtrfs_bin, base, tmp_path):
    with T.mounted([base], tmp_path / "mnt"):
        cp = check(base)
        assert cp.returncode == 2 and b"--force" in cp.stderr, T.describe(cp)
        cp = check("--force", base)
        assert cp.returncode in (0, 1), T.describe(cp)


def test_refuses_ubtrfs_mount(ubtrfs_bin, base, tmp_path):
    mnt = tmp_path / "fuse"
    mnt.mkdir()
    try:
        T.run([ubtrfs_bin, "mount", base, mnt], timeout=60)
        cp = check(base)
        assert cp.returncode == 2 and b"ubtrfs mount" in cp.stderr, T.describe(cp)
    finally:
        T.run(["fusermount3", "-u", "-z", mnt], check=False)


def test_tree_block_copy_damaged(ubtrfs_bin, base):
    # a read takes the first good copy; the checker reads every copy. btrfs check reads one
    # good copy and stays quiet: the test's own record of what it broke is the oracle
    with C.Image(base) as im:
        logical = im.tree_root(C.FS_TREE)[0]
        phys = im.physical(logical)
    assert len(phys) == 2, "the base image has DUP metadata"
    T.overwrite(base, phys[1] + 64, b"\xa5" * 64)
    cp = check("--json", base)
    recs, _ = problems(cp)
    assert cp.returncode == 1, T.describe(cp) + cp.stdout.decode()[-3000:]
    bad = [r for r in recs if r["class"] == "tree" and r["logical"] == logical]
    assert len(bad) == 1 and "copy 2" in bad[0]["message"] and str(phys[1]) in bad[0]["message"], recs
    assert "checksum" in bad[0]["message"], recs


def test_tree_block_first_copy_damaged(ubtrfs_bin, base):
    # the first copy bad: the read takes the second, and the checker still names the first
    # (the copy the cache holds is not read again, the others are); no referee, as above
    with C.Image(base) as im:
        logical = im.tree_root(C.FS_TREE)[0]
        phys = im.physical(logical)
    assert len(phys) == 2, "the base image has DUP metadata"
    T.overwrite(base, phys[0] + 64, b"\xa5" * 64)
    cp = check("--json", base)
    recs, _ = problems(cp)
    assert cp.returncode == 1, T.describe(cp) + cp.stdout.decode()[-3000:]
    bad = [r for r in recs if r["class"] == "tree" and r["logical"] == logical]
    assert len(bad) == 1 and "copy 1" in bad[0]["message"] and str(phys[0]) in bad[0]["message"], recs
    assert "checksum" in bad[0]["message"], recs


def test_bad_block_named_by_every_pass(ubtrfs_bin, base):
    # the checksum tree's leaf with an item's key moved off its sector (the tree checker
    # refuses the leaf): the tree pass, the chunk pass and the file tree pass (on the second
    # thread) each meet it, and each names why it is bad, whichever of them read it first
    # (the tree layer remembers a failed block and fails it again at once, silently)
    where = {}

    def edit(im):
        blk, slot = _find(im, C.CSUM_TREE, lambda k: k.type == C.EXTENT_CSUM)
        k = blk.item_key(slot)
        blk.set_item_key(slot, C.Key(k.objectid, k.type, k.offset + 1))
        im.write_block(blk)
        where["block"] = blk.logical
    recs = damaged(base, edit)
    why = "tree block at logical %d" % where["block"]
    about = [r for r in recs if r["logical"] == where["block"] or "cannot be read to its end" in r["message"]]
    assert {r["class"] for r in about} >= {"tree", "chunk"}, recs
    for r in about:
        assert why in r["message"] and "key" in r["message"], r
