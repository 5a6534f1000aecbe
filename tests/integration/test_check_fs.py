# SPDX-License-Identifier: MIT
"""`ubtrfs check`, file trees (class fs) and checksum coverage (class csum).

Damage is injected with craft.py into a private copy of an image made by
mkfs.btrfs --rootdir or by the kernel (block checksums rewritten, so the damage
is read, not rejected), and `btrfs check --readonly` on the same image is the
referee that it is damage. Each case asserts the class, the key and the inode
ubtrfs check names. The clean images of test_check.py and the random kernel
workloads of test_differential.py (which run `ubtrfs check` on every final
image and crash copy) are the no-false-alarm side.
"""

import os

import pytest

import craft as C
import ubtrfs_testlib as T
from test_check import btrfs_check, check, damaged, problems, unrefereed

DIR_TYPE_OFF = 29  # btrfs_dir_item: location (17), transid (8), data_len (2), name_len (2), type
INODE_GENERATION, INODE_TRANSID, INODE_FLAGS = 0, 8, 64
EXTENT_ITEM_GENERATION = 8


def copy_of(factory, tmp_path, name):
    src = factory.image(name).devices[0]
    dst = tmp_path / (name + ".img")
    T.copy_sparse(src, dst)
    return dst


def inject(img, edit, refereed=True):
    """Apply `edit(im)`; the referee (when it looks there) must call the image broken.
    Returns ubtrfs check's problem records."""
    return damaged(img, edit) if refereed else unrefereed(img, edit)


def fs_items(im, pred):
    root = im.tree_root(C.FS_TREE)[0]
    return [(b, s) for b, s in im.walk(root) if pred(b.item_key(s), b, s)]


def mode_of(im, ino):
    blk, slot = im.find_item(im.tree_root(C.FS_TREE)[0], (ino, C.INODE_ITEM, 0))
    return blk.get_item(slot, C.INODE_MODE, "<I")


def regular_file(im, with_extent=True):
    """(Block, slot) of the INODE_ITEM of a regular file with one name (and a REG extent on disk)."""
    def is_reg(k, b, s):
        return k.type == C.INODE_ITEM and k.objectid >= 256 and \
            (b.get_item(s, C.INODE_MODE, "<I") & 0o170000) == 0o100000 and b.get_item(s, C.INODE_NLINK, "<I") == 1
    regs = fs_items(im, is_reg)
    if not with_extent:
        return regs[0]
    extents = {b.item_key(s).objectid for b, s in fs_items(
        im, lambda k, b, s: k.type == C.EXTENT_DATA and b.get_item(s, C.FE_TYPE, "<B") == C.FILE_EXTENT_REG
        and b.get_item(s, C.FE_DISK_BYTENR, "<Q") != 0)}
    for b, s in regs:
        if b.item_key(s).objectid in extents:
            return b, s
    raise AssertionError("no regular file with an extent on disk")


def has(recs, cls, key=None, inode=None, words=()):
    for r in recs:
        if r["class"] != cls or (key is not None and r["key"] != list(key)):
            continue
        if inode is not None and r["inode"] != inode:
            continue
        if all(w in r["message"] for w in words):
            return True
    return False


@pytest.fixture
def base(factory, tmp_path):
    return copy_of(factory, tmp_path, "damage-base")


def patch(im, blk, slot, off, fmt, value):
    blk.patch_item(slot, off, fmt, value)
    im.write_block(blk)


def set_nlink(img, nlink):
    """A regular file of one name gets `nlink`: its inode number and the records."""
    where = {}

    def edit(im):
        b, s = regular_file(im, with_extent=False)
        where["ino"] = b.item_key(s).objectid
        patch(im, b, s, C.INODE_NLINK, "<I", nlink)
    recs = inject(img, edit)
    return where["ino"], recs


def test_nlink_wrong(ubtrfs_bin, base):
    ino, recs = set_nlink(base, 3)
    assert has(recs, "fs", (ino, C.INODE_ITEM, 0), ino, ("nlink 3", "1 names")), recs


def test_unlinked_without_orphan(ubtrfs_bin, base):
    # nlink 0 with its name still there: both the count and the missing orphan item
    ino, recs = set_nlink(base, 0)
    assert has(recs, "fs", (ino, C.INODE_ITEM, 0), ino, ("nlink 0",)), recs
    assert has(recs, "fs", (ino, C.INODE_ITEM, 0), ino, ("orphan",)), recs


def test_dir_index_dropped(ubtrfs_bin, base):
    where = {}

    def edit(im):
        b, s = fs_items(im, lambda k, b, s: k.type == C.DIR_INDEX)[0]
        where["key"] = tuple(b.item_key(s))
        where["child"] = b.get_item(s, 0, "<Q")
        b.delete_item(s)
        im.write_block(b)
    recs = inject(base, edit)
    d, _, index = where["key"]
    child = where["child"]
    assert has(recs, "fs", (child, C.INODE_REF, d), child, ("has no DIR_INDEX", "index %d" % index)), recs
    # the directory's size counts the name twice (DIR_ITEM and DIR_INDEX)
    assert has(recs, "fs", (d, C.INODE_ITEM, 0), d, ("directory size",)), recs


def test_inode_ref_dropped(ubtrfs_bin, base):
    where = {}

    def edit(im):
        b, s = regular_file(im, with_extent=False)
        ino = b.item_key(s).objectid
        rb, rs = im.find_item(im.tree_root(C.FS_TREE)[0], lambda k: k.objectid == ino and k.type == C.INODE_REF)
        where["ino"], where["dir"] = ino, rb.item_key(rs).offset
        rb.delete_item(rs)
        im.write_block(rb)
    recs = inject(base, edit)
    ino, d = where["ino"], where["dir"]
    assert has(recs, "fs", (ino, C.INODE_ITEM, 0), ino, ("nlink 1", "0 names")), recs
    assert has(recs, "fs", None, ino, ("directory %d has an entry" % d, "no INODE_REF")), recs


def test_dir_entry_type_wrong(ubtrfs_bin, base):
    where = {}

    def edit(im):
        b, s = fs_items(im, lambda k, b, s: k.type == C.DIR_INDEX and
                        b.get_item(s, DIR_TYPE_OFF, "<B") == C.FT_REG_FILE)[0]
        where["key"] = tuple(b.item_key(s))
        where["child"] = b.get_item(s, 0, "<Q")
        patch(im, b, s, DIR_TYPE_OFF, "<B", C.FT_SYMLINK)
    recs = inject(base, edit)
    assert has(recs, "fs", where["key"], where["child"], ("DIR_INDEX type 7", "type 1")), recs


def test_nbytes_wrong(ubtrfs_bin, base):
    where = {}

    def edit(im):
        b, s = regular_file(im)
        where["ino"] = b.item_key(s).objectid
        where["nbytes"] = b.get_item(s, C.INODE_NBYTES, "<Q")
        patch(im, b, s, C.INODE_NBYTES, "<Q", where["nbytes"] + 4096)
    recs = inject(base, edit)
    ino = where["ino"]
    assert has(recs, "fs", (ino, C.INODE_ITEM, 0), ino,
               ("nbytes %d" % (where["nbytes"] + 4096), "hold %d" % where["nbytes"])), recs
    # the record's path is one of the inode's names, as the forward walk of ls finds them
    names = {o["path"] for o in T.parse_ls_json(T.ubtrfs("ls", "-R", "--json", base).stdout)
             if o.get("ino") == ino and o.get("subvol", 5) == 5}
    paths = {r["path"] for r in recs if r["class"] == "fs" and r["inode"] == ino}
    assert names and paths and paths <= names, (paths, names)


def test_inode_generation_future(ubtrfs_bin, base):
    where = {}

    def edit(im):
        b, s = regular_file(im, with_extent=False)
        where["ino"] = b.item_key(s).objectid
        patch(im, b, s, INODE_TRANSID, "<Q", im.super("generation") + 100)
    recs = inject(base, edit)
    ino = where["ino"]
    assert has(recs, "fs", (ino, C.INODE_ITEM, 0), ino, ("newer than the filesystem",)), recs


def test_symlink_immutable(ubtrfs_bin, base):
    where = {}

    def edit(im):
        b, s = fs_items(im, lambda k, b, s: k.type == C.INODE_ITEM and
                        (b.get_item(s, C.INODE_MODE, "<I") & 0o170000) == 0o120000)[0]
        where["ino"] = b.item_key(s).objectid
        patch(im, b, s, INODE_FLAGS, "<Q", b.get_item(s, INODE_FLAGS, "<Q") | 0x40)
    recs = inject(base, edit)
    ino = where["ino"]
    assert has(recs, "fs", (ino, C.INODE_ITEM, 0), ino, ("symlink", "immutable")), recs


def test_file_extent_missing_without_no_holes(ubtrfs_bin, factory, tmp_path):
    """Without NO_HOLES every byte below the size has an extent item: one dropped is a gap."""
    img = copy_of(factory, tmp_path, "kernel-noholes")
    where = {}

    def edit(im):
        # a file with at least two extent items: drop the first (offset 0)
        items = fs_items(im, lambda k, b, s: k.type == C.EXTENT_DATA)
        per = {}
        for b, s in items:
            per.setdefault(b.item_key(s).objectid, []).append((b, s))
        ino = next(i for i, v in sorted(per.items()) if len(v) >= 2
                   and v[0][0].get_item(v[0][1], C.FE_TYPE, "<B") != C.FILE_EXTENT_INLINE)
        b, s = per[ino][0]
        where["ino"] = ino
        b.delete_item(s)
        im.write_block(b)
    recs = inject(img, edit)
    ino = where["ino"]
    assert has(recs, "fs", (ino, C.INODE_ITEM, 0), ino, ("no file extent covers [0,", "NO_HOLES")), recs


def test_csum_missing(ubtrfs_bin, base):
    """The second half of a checksum item cut off: the file extents whose data it covered are named
    (class csum), at the first sector without a checksum."""
    where = {}

    def edit(im):
        root = im.tree_root(C.CSUM_TREE)[0]
        b, s = next((b, s) for b, s in im.walk(root)
                    if b.item_key(s).type == C.EXTENT_CSUM and len(b.item_data(s)) >= 8)
        k = b.item_key(s)
        data = b.item_data(s)
        keep = len(data) // 8 * 4  # crc32c: 4 bytes per 4 KiB sector
        where["range"] = (k.offset + keep // 4 * 4096, k.offset + len(data) // 4 * 4096)
        b.set_item_data(s, data[:keep])
        im.write_block(b)
    recs = inject(base, edit)
    start, end = where["range"]
    bad = [r for r in recs if r["class"] == "csum" and "no checksum" in r["message"]]
    assert bad and all(start <= r["logical"] < end for r in bad), recs
    assert any(r["logical"] == start for r in bad), (start, bad)
    assert all(r["key"][1] == C.EXTENT_DATA and r["inode"] >= 256 for r in bad), bad


def test_extent_item_generation_future(ubtrfs_bin, base):
    where = {}

    def edit(im):
        root = im.tree_root(C.EXTENT_TREE)[0]
        b, s = im.find_item(root, lambda k: k.type == C.EXTENT_ITEM)
        where["key"] = tuple(b.item_key(s))
        patch(im, b, s, EXTENT_ITEM_GENERATION, "<Q", im.super("generation") + 1000)
    recs = inject(base, edit)
    assert has(recs, "extent", where["key"], None, ("generation",)), recs


def test_clean_kernel_images(ubtrfs_bin, factory):
    """Hard links across directories, renames, xattrs, snapshots: no fs or csum problem."""
    for name in ("kernel-many", "kernel-noholes", "kernel-subvol"):
        image = factory.image(name)
        cp = check("--json", *image.devices)
        recs, summary = problems(cp)
        assert cp.returncode == 0 and not recs, "%s: %s" % (name, recs[:5])
        assert summary["inodes"] > 0 and summary["names"] > 0
        assert btrfs_check(image.devices[0]).returncode == 0


def test_data_refs_against_file_extents(ubtrfs_bin, base):
    """A data extent item whose refs and inline EXTENT_DATA_REF count agree with each other,
    both one more than the file extent items that point at it."""
    where = {}
    extent_data_ref, inline_at, count_at = 178, 24, 24 + 1 + 24

    def edit(im):
        root = im.tree_root(C.EXTENT_TREE)[0]
        b, s = next((b, s) for b, s in im.walk(root)
                    if b.item_key(s).type == C.EXTENT_ITEM and len(b.item_data(s)) >= count_at + 4
                    and b.get_item(s, 16, "<Q") & 1 and b.get_item(s, inline_at, "<B") == extent_data_ref
                    and b.get_item(s, 0, "<Q") == 1)
        where["key"] = tuple(b.item_key(s))
        b.patch_item(s, 0, "<Q", 2)
        b.patch_item(s, count_at, "<I", b.get_item(s, count_at, "<I") + 1)
        im.write_block(b)
    recs = inject(base, edit)
    assert has(recs, "extent", where["key"], None, ("EXTENT_DATA_REF", "counts 2, 1 file extent items make it")), recs


@pytest.fixture
def received(tmp_path):
    """A kernel-made image with a subvolume, its read-only snapshot and a copy of that received
    by `btrfs receive` (so the uuid tree holds a received uuid too)."""
    img = tmp_path / "recv.img"
    with open(img, "wb") as f:
        f.truncate(300 * T.MiB)
    T.run(["mkfs.btrfs", "-q", "-f", str(img)])
    with T.mounted([str(img)], tmp_path / "mnt", readonly=False) as m:
        m = str(m)
        T.run(["btrfs", "subvolume", "create", m + "/s1"])
        with open(m + "/s1/f", "wb") as f:
            f.write(b"received " * 5000)
        T.run(["btrfs", "subvolume", "snapshot", "-r", m + "/s1", m + "/snap"])
        os.mkdir(m + "/recv")
        send = T.run(["btrfs", "send", "-q", m + "/snap"])
        T.run(["btrfs", "receive", "-q", m + "/recv"], input=send.stdout)
        T.run(["sync"])
    return img


def assert_clean(img):
    """ubtrfs check and the referee both call the image clean."""
    cp = check("--json", img)
    recs, _ = problems(cp)
    assert cp.returncode == 0 and not recs, recs
    assert btrfs_check(img).returncode == 0


def test_root_items_and_uuid_tree_clean(ubtrfs_bin, received):
    assert_clean(received)


def test_uuid_tree_entry_dropped(ubtrfs_bin, received):
    # btrfs check does not read the uuid tree (the kernel rebuilds it when the superblock says
    # it is stale): the test's record of the entry it removed is the oracle
    where = {}

    def edit(im):
        root = im.tree_root(9)[0]
        b, s = next((b, s) for b, s in im.walk(root) if b.item_key(s).type == 252)  # UUID_KEY_RECEIVED_SUBVOL
        where["subvol"] = b.get_item(s, 0, "<Q")
        b.delete_item(s)
        im.write_block(b)
    recs = inject(received, edit, refereed=False)
    sub = where["subvol"]
    assert has(recs, "root", (sub, C.ROOT_ITEM, 0), None, ("no entry for its received uuid",)), recs


def test_root_item_generation_future(ubtrfs_bin, received):
    where = {}

    def edit(im):
        (b, s) = next(v for (oid, _), v in sorted(im.root_items().items()) if oid >= 256)
        where["key"] = tuple(b.item_key(s))
        patch(im, b, s, C.ROOT_ITEM_GENERATION, "<Q", im.super("generation") + 50)
    recs = inject(received, edit)
    assert has(recs, "root", where["key"], None, ("root item generation",)), recs


@pytest.fixture
def shared_blocks(tmp_path):
    """A kernel-made image whose subvolume (a level-2 tree: long names, 4 KiB nodes) was
    snapshotted and then changed, so that nodes the two share were copied with full back
    references: their children's extent items hold SHARED_BLOCK_REFs."""
    img = tmp_path / "shared.img"
    with open(img, "wb") as f:
        f.truncate(300 * T.MiB)
    T.run(["mkfs.btrfs", "-q", "-f", "-n", "4096", str(img)])
    with T.mounted([str(img)], tmp_path / "mnt", readonly=False) as m:
        m = str(m)
        T.run(["btrfs", "subvolume", "create", m + "/v"])
        for i in range(3000):
            with open(m + "/v/%s%05d" % ("n" * 180, i), "w") as f:
                f.write("file %d" % i)
        T.run(["sync"])
        T.run(["btrfs", "subvolume", "snapshot", m + "/v", m + "/snap"])
        T.run(["sync"])
        for i in range(0, 3000, 97):
            with open(m + "/v/%s%05d" % ("n" * 180, i), "a") as f:
                f.write("changed")
        T.run(["sync"])
    return img


def test_shared_block_refs(ubtrfs_bin, shared_blocks):
    assert_clean(shared_blocks)
    where = {}
    shared_block_ref = 182

    def edit(im):
        root = im.tree_root(C.EXTENT_TREE)[0]
        # a skinny METADATA_ITEM (24-byte extent item) whose one inline reference is a SHARED_BLOCK_REF
        b, s = next((b, s) for b, s in im.walk(root) if b.item_key(s).type == C.METADATA_ITEM
                    and len(b.item_data(s)) == 24 + 9 and b.get_item(s, 24, "<B") == shared_block_ref)
        where["key"] = tuple(b.item_key(s))
        where["parent"] = b.get_item(s, 25, "<Q")
        # another node of the filesystem: the root of the FS tree
        patch(im, b, s, 25, "<Q", im.tree_root(C.FS_TREE)[0])
    recs = inject(shared_blocks, edit)
    assert has(recs, "extent", where["key"], None, ("SHARED_BLOCK_REF names parent", "does not point at it")), recs
