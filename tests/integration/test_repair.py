# SPDX-License-Identifier: MIT
"""`ubtrfs check --repair` (issue 34): damage cured, nothing made worse, undo byte for byte.

The base image is made by the kernel (files of several sizes, a hard link, directories,
a snapshot), then damaged with craft.py (checksums rewritten, so the damage is read, not
rejected) in a class the repair has a cure for. For each: `btrfs check --readonly` calls
the image broken (the referee that it is damage); `ubtrfs check --repair` exits 0 (nothing
left); `btrfs check` and `ubtrfs check` find it clean; the kernel mounts it and every file
reads as before the damage; `ubtrfs rescue undo` with the undo file gives back the damaged
image byte for byte. Around that: a dry run writes nothing, a clean filesystem is left
untouched, an existing undo file is never overwritten, a pending fsync log is refused,
and a problem without a cure is left as it was (exit 1) with every file still intact.

Budget: about 30 s with -n 2.
"""

import hashlib
import os
import re
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

import pytest

import craft as C
import ubtrfs_testlib as T

MiB = T.MiB


def tree_of(top):
    out = {}
    for root, dirs, files in os.walk(top):
        for n in dirs:
            out[os.path.relpath(os.path.join(root, n), top)] = "dir"
        for n in files:
            p = os.path.join(root, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, top)] = (hashlib.sha256(f.read()).hexdigest(), os.lstat(p).st_nlink)
    return out


def sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@pytest.fixture
def tmp_path(scratch, request):
    """Images on the suite's scratch (tmpfs where there is room), not the disk's /tmp."""
    d = Path(tempfile.mkdtemp(prefix="repair-", dir=scratch))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def kernel_base(scratch):
    """A kernel-made image and what the kernel reads from it."""
    d = Path(tempfile.mkdtemp(prefix="repair-base-", dir=scratch))
    img = d / "base.img"
    with open(img, "wb") as f:
        f.truncate(256 * MiB)
    T.run(["mkfs.btrfs", "-f", "-q", str(img)])
    with T.mounted([img], d / "mnt", readonly=False) as m:
        os.makedirs(os.path.join(m, "dir", "sub"))
        for i, size in enumerate((0, 100, 3000, 5000, 70000, 300000, 1 << 20)):
            with open(os.path.join(m, "dir", "f%d" % i), "wb") as f:
                f.write(bytes((i * 7 + j) % 251 for j in range(size)))
        os.link(os.path.join(m, "dir", "f4"), os.path.join(m, "dir", "sub", "hard"))
        for i in range(40):
            with open(os.path.join(m, "dir", "sub", "n%02d" % i), "w") as f:
                f.write("x" * i)
        T.run(["btrfs", "subvolume", "snapshot", m, os.path.join(m, "snap")])
    with T.mounted([img], d / "mnt", readonly=True) as m:
        files = tree_of(m)
    assert T.run(["btrfs", "check", "--readonly", str(img)], check=False).returncode == 0
    yield img, files
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def base(kernel_base, tmp_path):
    img = tmp_path / "fs.img"
    T.copy_sparse(kernel_base[0], img)
    return img, kernel_base[1]


def btrfs_check(img):
    return T.run(["btrfs", "check", "--readonly", str(img)], check=False, timeout=120)


def damage(img, edit):
    with C.Image(img) as im:
        edit(im)
    ref = btrfs_check(img)
    assert ref.returncode != 0, "the referee calls the damage clean:\n" + ref.stdout.decode()[-2000:]


def repair(img, *args, undo=None):
    undo = undo or (img.parent / "repair.undo")
    return T.ubtrfs("check", "--repair", "--undo-file", str(undo), *[str(a) for a in args], str(img), timeout=120)


def assert_repaired(img, files, damaged_sha, undo):
    ref = btrfs_check(img)
    assert ref.returncode == 0, "btrfs check after the repair:\n" + ref.stdout.decode()[-3000:] + \
        ref.stderr.decode()[-3000:]
    cp = T.ubtrfs("check", str(img))
    assert cp.returncode == 0, T.describe(cp)
    with T.mounted([img], img.parent / "kmnt", readonly=True) as m:
        assert tree_of(m) == files, "a file reads differently after the repair"
    # and back: the undo file gives the damaged image byte for byte
    cp = T.ubtrfs("rescue", "undo", str(undo), str(img))
    assert cp.returncode == 0, T.describe(cp)
    assert sha(img) == damaged_sha, "rescue undo did not give back the image as it was before the repair"


def first_inode(im, tree, pred):
    root = im.tree_root(tree)[0]
    for b, s in im.walk(root):
        k = b.item_key(s)
        if k.type == C.INODE_ITEM and k.objectid >= 257 and pred(b, s):
            return b, s
    raise AssertionError("no such inode")


def is_reg(b, s):
    return (b.get_item(s, C.INODE_MODE, "<I") & 0o170000) == 0o100000


def is_dir(b, s):
    return (b.get_item(s, C.INODE_MODE, "<I") & 0o170000) == 0o040000


def edit_nlink(im):
    b, s = first_inode(im, C.FS_TREE, lambda b, s: is_reg(b, s) and b.get_item(s, C.INODE_NLINK, "<I") == 2)
    b.patch_item(s, C.INODE_NLINK, "<I", 7)
    im.write_block(b)


def edit_nlink_zero(im):
    b, s = first_inode(im, C.FS_TREE, lambda b, s: is_reg(b, s) and b.get_item(s, C.INODE_NBYTES, "<Q") > 0)
    b.patch_item(s, C.INODE_NLINK, "<I", 0)
    im.write_block(b)


def edit_nbytes(im):
    b, s = first_inode(im, C.FS_TREE, lambda b, s: is_reg(b, s) and b.get_item(s, C.INODE_NBYTES, "<Q") > 4096)
    b.patch_item(s, C.INODE_NBYTES, "<Q", b.get_item(s, C.INODE_NBYTES, "<Q") + 8192)
    im.write_block(b)


def edit_dir_size(im):
    b, s = first_inode(im, C.FS_TREE, lambda b, s: is_dir(b, s) and b.get_item(s, C.INODE_SIZE, "<Q") > 0)
    b.patch_item(s, C.INODE_SIZE, "<Q", b.get_item(s, C.INODE_SIZE, "<Q") + 6)
    im.write_block(b)


def edit_bg_used(im):
    first = min(c.logical for c in im.chunks)
    b, s = im.find_item(im.tree_root(C.EXTENT_TREE)[0],
                        lambda k: k.type == C.BLOCK_GROUP_ITEM and k.objectid >= first)
    b.patch_item(s, 0, "<Q", b.get_item(s, 0, "<Q") + 3 * 4096)
    im.write_block(b)


def edit_bytes_used(im):
    im.set_super(bytes_used=im.super("bytes_used") - 65536)


def edit_free_space(im):
    first = min(c.logical for c in im.chunks)
    b, s = im.find_item(im.tree_root(10)[0], lambda k: k.type == 199 and k.objectid >= first)
    k = b.item_key(s)
    b.set_item_key(s, C.Key(k.objectid, k.type, k.offset - im.sectorsize))
    im.write_block(b)


def edit_dev_used(im):
    b, s = im.find_item(im.super("chunk_root"), lambda k: k.type == C.DEV_ITEM)
    b.patch_item(s, 16, "<Q", b.get_item(s, 16, "<Q") + 8 * MiB)  # dev_item: devid, total_bytes, bytes_used
    im.write_block(b)


DIR_TYPE_OFF = 29  # btrfs_dir_item: location (17), transid (8), data_len (2), name_len (2), type


def fs_item(im, pred):
    root = im.tree_root(C.FS_TREE)[0]
    for b, s in im.walk(root):
        if pred(b.item_key(s), b, s):
            return b, s
    raise AssertionError("no such item")


def reg_child(b, s):
    return b.get_item(s, DIR_TYPE_OFF, "<B") == C.FT_REG_FILE


def edit_dir_index_dropped(im):
    b, s = fs_item(im, lambda k, b, s: k.type == C.DIR_INDEX and k.objectid >= 257 and reg_child(b, s))
    b.delete_item(s)
    im.write_block(b)


def edit_dir_item_dropped(im):
    b, s = fs_item(im, lambda k, b, s: k.type == C.DIR_ITEM and k.objectid >= 257 and reg_child(b, s)
                   and len(b.item_data(s)) < 300)
    b.delete_item(s)
    im.write_block(b)


def edit_inode_ref_dropped(im):
    b, s = first_inode(im, C.FS_TREE, lambda b, s: is_reg(b, s) and b.get_item(s, C.INODE_NLINK, "<I") == 1)
    ino = b.item_key(s).objectid
    rb, rs = im.find_item(im.tree_root(C.FS_TREE)[0], lambda k: k.objectid == ino and k.type == C.INODE_REF)
    rb.delete_item(rs)
    im.write_block(rb)


def edit_entry_type(im):
    b, s = fs_item(im, lambda k, b, s: k.type == C.DIR_INDEX and k.objectid >= 257 and reg_child(b, s))
    b.patch_item(s, DIR_TYPE_OFF, "<B", C.FT_SYMLINK)
    im.write_block(b)


def edit_no_name(im):
    """Every record of a file's one name gone: its data only reachable from lost+found."""
    b, s = first_inode(im, C.FS_TREE, lambda b, s: is_reg(b, s) and b.get_item(s, C.INODE_NLINK, "<I") == 1
                       and b.get_item(s, C.INODE_NBYTES, "<Q") > 0)
    ino = b.item_key(s).objectid
    root = im.tree_root(C.FS_TREE)[0]
    rb, rs = im.find_item(root, lambda k: k.objectid == ino and k.type == C.INODE_REF)
    d = rb.item_key(rs).offset
    rb.delete_item(rs)
    im.write_block(rb)
    for typ in (C.DIR_INDEX, C.DIR_ITEM):
        eb, es = fs_item(im, lambda k, b, s: k.objectid == d and k.type == typ and b.get_item(s, 0, "<Q") == ino)
        eb.delete_item(es)
        im.write_block(eb)


def edit_tree_block_refs(im):
    b, s = im.find_item(im.tree_root(C.EXTENT_TREE)[0], lambda k: k.type == C.METADATA_ITEM)
    b.patch_item(s, 0, "<Q", b.get_item(s, 0, "<Q") + 2)  # extent item: refs, generation, flags
    im.write_block(b)


def edit_data_refs(im):
    b, s = im.find_item(im.tree_root(C.EXTENT_TREE)[0],
                        lambda k: k.type == C.EXTENT_ITEM and k.offset > 16384)
    b.patch_item(s, 0, "<Q", b.get_item(s, 0, "<Q") + 1)
    im.write_block(b)


def edit_dir_index_name(im):
    """A DIR_INDEX's copy of the name damaged (the fsck/008 case): the ref and the DIR_ITEM keep the
    right one."""
    b, s = fs_item(im, lambda k, b, s: k.type == C.DIR_INDEX and k.objectid >= 257 and reg_child(b, s))
    b.patch_item(s, 30, "<B", ord("Z"))  # btrfs_dir_item is 30 bytes; the name follows
    im.write_block(b)


def second_dir_index(im, ref_too=False):
    """A regular file's DIR_INDEX copied to the directory's next free index: readdir lists the
    name twice (btrfs check: dup dir index). ref_too: the file's INODE_REF gives the new index, so
    the first DIR_INDEX is the one that disagrees."""
    root = im.tree_root(C.FS_TREE)[0]
    idx = [(b, s) for b, s in im.walk(root) if b.item_key(s).type == C.DIR_INDEX and b.item_key(s).objectid >= 257
           and b.get_item(s, 29, "<B") == 1]  # btrfs_dir_item's type byte: a regular file
    b, s = idx[0]
    d, dirid = b.item_data(s), b.item_key(s).objectid
    child = struct.unpack_from("<Q", d, 0)[0]  # location key's objectid
    lb, ls = max(((bb, ss) for bb, ss in idx if bb.item_key(ss).objectid == dirid),
                 key=lambda x: x[0].item_key(x[1]).offset)
    new = lb.item_key(ls).offset + 1
    lb.insert_item(C.Key(dirid, C.DIR_INDEX, new), d)
    im.write_block(lb)
    if ref_too:
        rb, rs = im.find_item(root, lambda k: k.objectid == child and k.type == C.INODE_REF and k.offset == dirid)
        rb.patch_item(rs, 0, "<Q", new)  # btrfs_inode_ref: index, name_len, name
        im.write_block(rb)


def name_twice(im, typ):
    """A regular file's DIR_ITEM (typ DIR_ITEM), or a subdirectory's INODE_REF (typ INODE_REF),
    holding its one entry twice (btrfs check: dup dir item; a second INODE_REF name)."""
    root = im.tree_root(C.FS_TREE)[0]
    if typ == C.DIR_ITEM:
        pred = lambda k, b, s: k.type == typ and k.objectid >= 257 and b.get_item(s, 29, "<B") == 1
    else:
        pred = lambda k, b, s: k.type == typ and k.objectid > 257 and k.offset >= 257
    b, s = next((b, s) for b, s in im.walk(root) if pred(b.item_key(s), b, s))
    b.set_item_data(s, b.item_data(s) * 2)
    im.write_block(b)


BLOCK_ITEM, BLOCK_REF = 169, 176  # METADATA_ITEM; TREE_BLOCK_REF (inline: type byte, root)


def block_item(im, pred):
    """The skinny extent item of a tree block whose inline references (root ids) pred accepts."""
    for b, s in im.walk(im.tree_root(C.EXTENT_TREE)[0]):
        k, d = b.item_key(s), b.item_data(s)
        refs = [d[at] == BLOCK_REF and struct.unpack_from("<Q", d, at + 1)[0] for at in range(24, len(d), 9)]
        if k.type == BLOCK_ITEM and (len(d) - 24) % 9 == 0 and all(refs) and pred(refs):
            return b, s
    raise AssertionError("test setup: no tree block item with such references")


def edit_block_ref_wrong(im):
    """The root tree's leaf: its one TREE_BLOCK_REF names the checksum tree instead (btrfs check:
    root 7 has no tree block found, root 1 has no backref item)."""
    b, s = block_item(im, lambda refs: refs == [C.ROOT_TREE])
    b.patch_item(s, 25, "<Q", C.CSUM_TREE)
    im.write_block(b)


def edit_block_ref_missing(im):
    """A leaf the top-level tree and its snapshot share: the top-level tree's reference dropped
    from its item, refs 1 (btrfs check: root 5 has no backref item, ref mismatch)."""
    b, s = block_item(im, lambda refs: len(refs) == 2 and C.FS_TREE in refs)
    d = bytearray(b.item_data(s))
    at = 24 + 9 * [struct.unpack_from("<Q", d, at + 1)[0] for at in range(24, len(d), 9)].index(C.FS_TREE)
    del d[at:at + 9]
    struct.pack_into("<Q", d, 0, 1)
    b.set_item_data(s, bytes(d))
    im.write_block(b)


def edit_block_ref_keyed(im):
    """A keyed TREE_BLOCK_REF of the checksum tree beside a top-level tree block's item (btrfs
    check: root 7 has no tree block found, backref count 2, wanted 1)."""
    b, s = block_item(im, lambda refs: refs == [C.FS_TREE])
    b.insert_item(C.Key(b.item_key(s).objectid, BLOCK_REF, C.CSUM_TREE), b"")
    im.write_block(b)


CURES = {
    "nlink": edit_nlink,
    "nlink-zero": edit_nlink_zero,
    "nbytes": edit_nbytes,
    "dir-size": edit_dir_size,
    "bg-used": edit_bg_used,
    "bytes-used": edit_bytes_used,
    "free-space-tree": edit_free_space,
    "dev-bytes-used": edit_dev_used,
    "dir-index-dropped": edit_dir_index_dropped,
    "dir-item-dropped": edit_dir_item_dropped,
    "inode-ref-dropped": edit_inode_ref_dropped,
    "entry-type": edit_entry_type,
    "dir-index-name": edit_dir_index_name,
    "tree-block-refs": edit_tree_block_refs,
    "dir-index-second": second_dir_index,
    "dir-index-second-ref": lambda im: second_dir_index(im, ref_too=True),
    "dir-item-name-twice": lambda im: name_twice(im, C.DIR_ITEM),
    "inode-ref-name-twice": lambda im: name_twice(im, C.INODE_REF),
    "tree-block-ref-wrong": edit_block_ref_wrong,
    "tree-block-ref-missing": edit_block_ref_missing,
    "tree-block-ref-keyed": edit_block_ref_keyed,
    "data-refs": edit_data_refs,
}


def test_no_name_to_lost_found(ubtrfs_bin, base):
    """A file no name reaches any more gets one in /lost+found, named by its inode number, with its data."""
    img, files = base
    damage(img, edit_no_name)
    damaged_sha = sha(img)
    undo = img.parent / "lf.undo"
    cp = repair(img, undo=undo)
    assert cp.returncode == 0, T.describe(cp) + cp.stdout.decode()[-3000:]
    assert "lost+found" in cp.stdout.decode()
    assert btrfs_check(img).returncode == 0
    with T.mounted([img], img.parent / "kmnt", readonly=True) as m:
        got = tree_of(m)
    lost = {k: v for k, v in got.items() if k.startswith("lost+found/")}
    gone = {k: v for k, v in files.items() if k not in got}
    assert len(gone) == 1 and len(lost) == 1, (gone, lost)
    assert list(gone.values())[0] == list(lost.values())[0], "the file in lost+found holds other bytes"
    cp = T.ubtrfs("rescue", "undo", str(undo), str(img))
    assert cp.returncode == 0 and sha(img) == damaged_sha, T.describe(cp)


@pytest.mark.parametrize("cls", sorted(CURES))
def test_repair_cures(ubtrfs_bin, base, cls):
    img, files = base
    damage(img, CURES[cls])
    damaged_sha = sha(img)
    undo = img.parent / "repair.undo"
    cp = repair(img, undo=undo)
    out = cp.stdout.decode()
    assert cp.returncode == 0, T.describe(cp)
    assert "repair: " in out and "after the repair:" in out, out
    assert_repaired(img, files, damaged_sha, undo)


def test_repair_all_at_once(ubtrfs_bin, base):
    img, files = base

    def edit(im):
        for e in (edit_nlink, edit_nbytes, edit_dir_size, edit_bg_used, edit_free_space, edit_dev_used,
                  edit_dir_index_dropped, edit_inode_ref_dropped, edit_tree_block_refs, edit_data_refs):
            e(im)
    damage(img, edit)
    damaged_sha = sha(img)
    undo = img.parent / "all.undo"
    cp = repair(img, "--json", undo=undo)
    assert cp.returncode == 0, T.describe(cp)
    changes = [ln for ln in cp.stdout.decode().splitlines() if ln.startswith('{"repair"')]
    assert len(changes) >= 5, cp.stdout.decode()
    assert_repaired(img, files, damaged_sha, undo)


def test_dry_run_writes_nothing(ubtrfs_bin, base):
    img, _ = base
    damage(img, lambda im: (edit_nlink(im), edit_bg_used(im)))
    before = sha(img)
    cp = T.ubtrfs("check", "--repair", "--dry-run", str(img))
    out = cp.stdout.decode()
    assert cp.returncode == 1, T.describe(cp)
    assert "would set inode" in out and "nlink to 2" in out and "would recount" in out, out
    assert "dry run: nothing written" in out, out
    assert sha(img) == before
    assert not list(img.parent.glob("*.undo")) and not list(img.parent.glob("ubtrfs-undo-*"))


def test_clean_filesystem_untouched(ubtrfs_bin, base, tmp_path):
    img, _ = base
    before = sha(img)
    cp = subprocess.run([str(ubtrfs_bin), "check", "--repair", str(img)], capture_output=True, cwd=str(tmp_path),
                        timeout=120)
    assert cp.returncode == 0 and b"nothing to repair" in cp.stdout, T.describe(cp)
    assert sha(img) == before
    assert not list(tmp_path.glob("ubtrfs-undo-*"))


def test_default_undo_file_named_after_the_filesystem(ubtrfs_bin, base, tmp_path):
    img, files = base
    damage(img, edit_nbytes)
    damaged_sha = sha(img)
    work = tmp_path / "cwd"
    work.mkdir()
    cp = subprocess.run([str(ubtrfs_bin), "check", "--repair", str(img)], capture_output=True, cwd=str(work),
                        timeout=120)
    assert cp.returncode == 0, T.describe(cp)
    fsid = T.run(["btrfs", "inspect-internal", "dump-super", str(img)]).stdout.decode().split("\nfsid")[1].split()[0]
    undos = list(work.glob("ubtrfs-undo-*.undo"))
    assert len(undos) == 1 and fsid in undos[0].name, (undos, fsid)
    assert_repaired(img, files, damaged_sha, undos[0])


def test_existing_undo_file_never_overwritten(ubtrfs_bin, base):
    img, _ = base
    damage(img, edit_nlink)
    before = sha(img)
    undo = img.parent / "taken.undo"
    undo.write_bytes(b"not yours")
    cp = repair(img, undo=undo)
    assert cp.returncode == 2 and b"exists" in cp.stderr, T.describe(cp)
    assert undo.read_bytes() == b"not yours" and sha(img) == before


def test_inode_generation_from_the_future(ubtrfs_bin, base, tmp_path):
    """An inode whose transid is newer than the filesystem (fsck/043's damage): both its
    generation and transid become the repair's transaction, as btrfs check --repair sets them;
    btrfs check clean, every file reads the same, undo gives the damaged image back."""
    img, files = base

    def edit(im):
        b, s = first_inode(im, C.FS_TREE, is_reg)
        b.patch_item(s, 8, "<Q", im.super("generation") + 100)  # inode item: generation, transid
        im.write_block(b)
    damage(img, edit)
    damaged_sha = sha(img)
    undo = tmp_path / "gen.undo"
    cp = repair(img, undo=undo)
    out = cp.stdout.decode()
    assert cp.returncode == 0, T.describe(cp) + out[-3000:]
    assert re.search(r"repair: inode \d+ of tree 5: generation \d+ -> (\d+), transid \d+ -> \1", out), out
    assert_repaired(img, files, damaged_sha, undo)


def test_no_cure_left_as_it_was(ubtrfs_bin, base):
    """A data extent's inline EXTENT_DATA_REF naming another inode than the file extent item that
    points at the extent (a data back reference no file extent item makes): no cure in this
    version; the repair changes nothing (the image byte for byte), says so, exits 1."""
    img, _ = base

    def edit(im):
        for b, s in im.walk(im.tree_root(C.EXTENT_TREE)[0]):
            # a data EXTENT_ITEM (flags DATA) whose first inline reference is an EXTENT_DATA_REF
            if b.item_key(s).type == 168 and b.get_item(s, 16, "<Q") & 1 and b.get_item(s, 24, "<B") == 178:
                b.patch_item(s, 24 + 1 + 8, "<Q", b.get_item(s, 24 + 1 + 8, "<Q") + 1000)  # its inode
                im.write_block(b)
                return
        raise AssertionError("no data extent item with an inline EXTENT_DATA_REF")
    damage(img, edit)
    before = sha(img)
    cp = repair(img)
    out = cp.stdout.decode()
    assert cp.returncode == 1, T.describe(cp)
    assert "0 with a cure" in out, out
    assert sha(img) == before, "a repair with no cure wrote to the image"
    assert not (img.parent / "repair.undo").exists()


def test_pending_log_refused(ubtrfs_bin, tmp_path):
    """A crash image with the kernel's fsync log: the repair refuses (replay it by a mount, or zero-log)."""
    img = tmp_path / "log.img"
    with open(img, "wb") as f:
        f.truncate(256 * MiB)
    T.run(["mkfs.btrfs", "-f", "-q", str(img)])
    crash = tmp_path / "crash.img"
    with T.mounted([img], tmp_path / "mnt", options="commit=300", readonly=False) as m:
        with open(os.path.join(m, "f"), "wb") as f:
            f.write(b"y" * 10000)
        os.sync()
        with open(os.path.join(m, "g"), "wb") as f:
            f.write(b"z" * 5000)
            f.flush()
            os.fsync(f.fileno())
        T.copy_sparse(img, crash)
    if not T.run(["btrfs", "inspect-internal", "dump-super", str(crash)]).stdout.decode().count("log_root\t\t0") == 0:
        pytest.skip("the kernel committed before the copy: no log tree in the crash image")

    def edit(im):
        im.set_super(bytes_used=im.super("bytes_used") + 65536)
    with C.Image(crash) as im:
        edit(im)
    before = sha(crash)
    cp = repair(crash)
    assert cp.returncode == 2 and b"log" in cp.stderr, T.describe(cp)
    assert sha(crash) == before


def test_usage(ubtrfs_bin, base):
    img, _ = base
    for args in (["--dry-run"], ["--undo-file", "x"], ["--repair", "--force"], ["--repair", "--generation", "5"]):
        cp = T.ubtrfs("check", *args, str(img))
        assert cp.returncode == 2, (args, T.describe(cp))


@pytest.mark.parametrize("which", [0, 1])
def test_bad_copy_rewritten_from_the_good_one(ubtrfs_bin, base, which):
    """One copy of a DUP tree block bad (btrfs check reads the good one and stays quiet: the test's
    record of what it broke is the oracle): the repair's scrub rewrites it from the other copy."""
    img, files = base
    with C.Image(img) as im:
        logical = im.tree_root(C.FS_TREE)[0]
        phys = im.physical(logical)
        nodesize = im.super("nodesize")
    assert len(phys) == 2, "the base image has DUP metadata"
    with open(img, "rb") as f:
        f.seek(phys[1 - which])
        good = f.read(nodesize)
    T.overwrite(img, phys[which] + 64, b"\xa5" * 64)
    damaged_sha = sha(img)
    undo = img.parent / "copy.undo"
    cp = repair(img, undo=undo)
    assert cp.returncode == 0, T.describe(cp) + cp.stdout.decode()[-3000:]
    assert "scrub: %d sectors of bad copies rewritten" % (nodesize // 4096) in cp.stdout.decode(), cp.stdout.decode()
    with open(img, "rb") as f:
        f.seek(phys[which])
        assert f.read(nodesize) == good, "the bad copy was not rewritten from the good one"
    assert_repaired(img, files, damaged_sha, undo)


@pytest.fixture(scope="module")
def holes_base(scratch):
    """A kernel-made image without NO_HOLES: every hole of a file is an item."""
    d = Path(tempfile.mkdtemp(prefix="repair-holes-", dir=scratch))
    img = d / "base.img"
    with open(img, "wb") as f:
        f.truncate(256 * MiB)
    T.run(["mkfs.btrfs", "-f", "-q", "-O", "^no-holes", str(img)])
    with T.mounted([img], d / "mnt", readonly=False) as m:
        with open(os.path.join(m, "middle"), "wb") as f:
            f.write(b"a" * 8192)
            f.seek(1 << 20)
            f.write(b"b" * 8192)
        with open(os.path.join(m, "tail"), "wb") as f:
            f.write(b"c" * 8192)
            f.truncate(3 << 20)
    with T.mounted([img], d / "mnt", readonly=True) as m:
        files = tree_of(m)
    yield img, files
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("which", ["middle", "tail"])
def test_missing_hole_item(ubtrfs_bin, holes_base, tmp_path, which):
    img = tmp_path / "fs.img"
    T.copy_sparse(holes_base[0], img)
    files = holes_base[1]

    def edit(im):
        root = im.tree_root(C.FS_TREE)[0]
        holes = [(b, s) for b, s in im.walk(root) if b.item_key(s).type == C.EXTENT_DATA
                 and b.get_item(s, C.FE_TYPE, "<B") == C.FILE_EXTENT_REG and b.get_item(s, C.FE_DISK_BYTENR, "<Q") == 0]
        # the files in creation order: inode 257 "middle", 258 "tail"
        b, s = [h for h in holes if h[0].item_key(h[1]).objectid == (257 if which == "middle" else 258)][0]
        b.delete_item(s)
        im.write_block(b)
    damage(img, edit)
    damaged_sha = sha(img)
    undo = tmp_path / "holes.undo"
    cp = repair(img, undo=undo)
    assert cp.returncode == 0, T.describe(cp) + cp.stdout.decode()[-3000:]
    assert "a hole item for" in cp.stdout.decode()
    assert_repaired(img, files, damaged_sha, undo)


@pytest.fixture(scope="module")
def extents_base(scratch):
    """A kernel-made image without NO_HOLES and a file of 400 data extents with holes between:
    its 800 file extent items span several leaves."""
    d = Path(tempfile.mkdtemp(prefix="repair-extents-", dir=scratch))
    img = d / "base.img"
    with open(img, "wb") as f:
        f.truncate(256 * MiB)
    T.run(["mkfs.btrfs", "-f", "-q", "-O", "^no-holes", str(img)])
    with T.mounted([img], d / "mnt", readonly=False) as m:
        with open(os.path.join(m, "many"), "wb") as f:
            for i in range(400):
                f.seek(i * 8192)
                f.write(bytes([i % 251 + 1]) * 4096)
    with T.mounted([img], d / "mnt", readonly=True) as m:
        files = tree_of(m)
    yield img, files
    shutil.rmtree(d, ignore_errors=True)


def test_file_extent_overlap(ubtrfs_bin, extents_base, tmp_path):
    """The last file extent item of a leaf made 4 KiB longer, over the first item of the next
    leaf (within one leaf the tree checks reject the block: the kernel's rule). A reader takes
    those bytes from the later item already; the repair cuts the earlier one to end where the
    later one starts, and the nbytes the longer item gave is counted again. btrfs check
    --repair (6.2) leaves the overlap."""
    img = tmp_path / "fs.img"
    T.copy_sparse(extents_base[0], img)
    files = extents_base[1]

    def edit(im):
        root = im.tree_root(C.FS_TREE)[0]
        b, s = next((b, s) for b, s in im.walk(root)
                    if b.item_key(s).type == C.EXTENT_DATA and s == b.nritems() - 1)
        n = b.get_item(s, C.FE_NUM_BYTES, "<Q")
        b.patch_item(s, C.FE_NUM_BYTES, "<Q", n + 4096)
        if b.get_item(s, C.FE_DISK_BYTENR, "<Q") == 0:  # a hole's ram_bytes is its length
            b.patch_item(s, C.FE_RAM_BYTES, "<Q", n + 4096)
        im.write_block(b)
    damage(img, edit)
    damaged_sha = sha(img)
    undo = tmp_path / "overlap.undo"
    cp = repair(img, undo=undo)
    assert cp.returncode == 0, T.describe(cp) + cp.stdout.decode()[-3000:]
    assert "cut to end at" in cp.stdout.decode(), cp.stdout.decode()
    assert_repaired(img, files, damaged_sha, undo)


UUID_KEY_SUBVOL = 251
UUID_TREE = 9


def test_uuid_tree_entries(ubtrfs_bin, base):
    """The snapshot's uuid tree entry names a subvolume that does not exist: that id goes, and
    the snapshot's own entry comes back."""
    img, files = base

    def edit(im):
        items = [(bb, ss) for bb, ss in im.walk(im.tree_root(UUID_TREE)[0])
                 if bb.item_key(ss).type == UUID_KEY_SUBVOL and bb.get_item(ss, 0, "<Q") >= 256]
        b, s = items[0]
        b.patch_item(s, 0, "<Q", 9999)
        im.write_block(b)
    with C.Image(img) as im:
        edit(im)
    cp = T.ubtrfs("check", str(img))
    assert cp.returncode == 1 and b"9999" in cp.stdout and b"no entry for its uuid" in cp.stdout, \
        cp.stdout.decode()
    damaged_sha = sha(img)
    undo = img.parent / "uuid.undo"
    cp = repair(img, undo=undo)
    out = cp.stdout.decode()
    assert cp.returncode == 0, T.describe(cp) + out[-3000:]
    assert "uuid tree: subvolume 9999 removed" in out and "added under its uuid" in out, out
    # btrfs-progs' own look at the uuid tree: the snapshot's uuid names it
    show = T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "9", str(img)]).stdout.decode()
    assert "9999" not in show and "subvol_id 256" in show, show
    assert_repaired(img, files, damaged_sha, undo)


def test_dead_subvolume_orphan_item(ubtrfs_bin, tmp_path):
    """A deleted subvolume whose drop the kernel's unmount cut short, its orphan item then lost:
    nothing would finish the drop. The repair puts the orphan item back, and the kernel's next
    read-write mount finishes the drop (the root item goes)."""
    img = tmp_path / "dead.img"
    with open(img, "wb") as f:
        f.truncate(512 * MiB)
    T.run(["mkfs.btrfs", "-f", "-q", str(img)])
    with T.mounted([img], tmp_path / "mnt", readonly=False) as m:
        sv = os.path.join(m, "sv")
        T.run(["btrfs", "subvolume", "create", sv])
        for i in range(12000):
            open(os.path.join(sv, "a-rather-long-file-name-to-fill-leaves-%06d" % i), "w").close()
        os.sync()
        T.run(["btrfs", "subvolume", "delete", sv])
    tree = T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "1", str(img)]).stdout.decode()
    if "ORPHAN ORPHAN_ITEM 256" not in tree:
        pytest.skip("the kernel finished dropping the subvolume before the unmount: no half-dropped subvolume")

    def edit(im):
        b, s = im.find_item(im.super("root"), lambda k: k.type == 48 and k.offset == 256)  # ORPHAN_ITEM
        b.delete_item(s)
        im.write_block(b)
    with C.Image(img) as im:
        edit(im)
    cp = T.ubtrfs("check", str(img))
    assert cp.returncode == 1 and b"deleted subvolume 256 has no orphan item" in cp.stdout, T.describe(cp)
    damaged_sha = sha(img)
    undo = tmp_path / "dead.undo"
    cp = repair(img, undo=undo)
    assert cp.returncode == 0, T.describe(cp) + cp.stdout.decode()[-3000:]
    tree = T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "1", str(img)]).stdout.decode()
    assert "ORPHAN ORPHAN_ITEM 256" in tree
    assert btrfs_check(img).returncode == 0
    kimg = tmp_path / "kernel.img"
    T.copy_sparse(img, kimg)
    # commit=1: the kernel's cleaner, which finishes the drop, is woken by a commit (30 s apart by default)
    with T.mounted([kimg], tmp_path / "mnt", options="commit=1", readonly=False) as m:
        T.run(["btrfs", "subvolume", "sync", m], timeout=120)
    tree = T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "1", str(kimg)]).stdout.decode()
    assert "256 ROOT_ITEM" not in tree, "the kernel did not finish the drop"
    cp = T.ubtrfs("rescue", "undo", str(undo), str(img))
    assert cp.returncode == 0 and sha(img) == damaged_sha, T.describe(cp)


METADATA_ITEM, TREE_BLOCK_REF, BG_METADATA = 169, 176, 4


def test_tree_block_extent_item_missing(ubtrfs_bin, base):
    """The extent item of the top-level tree's root block deleted: the block is live, the
    extent tree and the free space tree say its space is free (a later allocation would write
    over it). The repair gives the item back, and its space."""
    img, files = base
    where = {}

    def edit(im):
        root = im.tree_root(C.FS_TREE)[0]
        where["root"] = root
        b, s = im.find_item(im.tree_root(C.EXTENT_TREE)[0], lambda k: k.type == METADATA_ITEM and k.objectid == root)
        b.delete_item(s)
        im.write_block(b)
    damage(img, edit)
    damaged_sha = sha(img)
    undo = img.parent / "add.undo"
    cp = repair(img, undo=undo)
    out = cp.stdout.decode()
    assert cp.returncode == 0, T.describe(cp) + out[-3000:]
    assert "tree block %d (tree 5" % where["root"] in out and "extent item made again" in out, out
    tree = T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "2", str(img)]).stdout.decode()
    assert "key (%d METADATA_ITEM" % where["root"] in tree
    assert_repaired(img, files, damaged_sha, undo)


def test_stray_tree_block_extent_item(ubtrfs_bin, base):
    """An extent item for a tree block nothing reaches (free space counted used for ever):
    the repair removes it and its space is free again."""
    img, files = base
    where = {}

    def edit(im):
        ext = im.tree_root(C.EXTENT_TREE)[0]
        used = {b.item_key(s).objectid for b, s in im.walk(ext) if b.item_key(s).type == METADATA_ITEM}
        nodesize = im.super("nodesize")
        meta = [c for c in im.chunks if c.type & BG_METADATA]
        free = None
        for c in meta:
            for at in range(c.logical, c.logical + c.length, nodesize):
                if at not in used:
                    free = at
                    break
            if free:
                break
        where["at"] = free
        b, s = im.find_item(ext, lambda k: k.type == METADATA_ITEM and k.objectid > free)
        item = struct.pack("<QQQ", 1, im.super("generation"), 2) + struct.pack("<BQ", TREE_BLOCK_REF, 5)
        b.insert_item(C.Key(free, METADATA_ITEM, 0), item)
        im.write_block(b)
    damage(img, edit)
    damaged_sha = sha(img)
    undo = img.parent / "del.undo"
    cp = repair(img, undo=undo)
    out = cp.stdout.decode()
    assert cp.returncode == 0, T.describe(cp) + out[-3000:]
    assert "the extent item of tree block %d, which no tree reaches, removed" % where["at"] in out, out
    assert_repaired(img, files, damaged_sha, undo)


def delete_largest_data_extent_item(im, where):
    ext = im.tree_root(C.EXTENT_TREE)[0]
    items = [(b, s) for b, s in im.walk(ext) if b.item_key(s).type == C.EXTENT_ITEM]
    b, s = max(items, key=lambda bs: bs[0].item_key(bs[1]).offset)
    where["at"] = b.item_key(s).objectid
    b.delete_item(s)
    im.write_block(b)


def test_data_extent_item_missing(ubtrfs_bin, holes_base, tmp_path):
    """The extent item of a file's data deleted (one file's items point at it): the extent tree
    and the free space tree call live data free. The repair makes the item again from the file
    extent items and takes the space back first."""
    img = tmp_path / "fs.img"
    T.copy_sparse(holes_base[0], img)
    files = holes_base[1]
    where = {}
    damage(img, lambda im: delete_largest_data_extent_item(im, where))
    damaged_sha = sha(img)
    undo = tmp_path / "data.undo"
    cp = repair(img, undo=undo)
    out = cp.stdout.decode()
    assert cp.returncode == 0, T.describe(cp) + out[-3000:]
    assert "data at %d" % where["at"] in out and "extent item made again" in out, out
    assert_repaired(img, files, damaged_sha, undo)


def test_data_extent_item_missing_shared(ubtrfs_bin, base):
    """The extent item of data that two trees' leaves point at (the snapshot's copy of the leaf):
    made again with one reference per tree, found by walking every subvolume."""
    img, files = base
    where = {}
    damage(img, lambda im: delete_largest_data_extent_item(im, where))
    damaged_sha = sha(img)
    undo = img.parent / "shared.undo"
    cp = repair(img, undo=undo)
    out = cp.stdout.decode()
    assert cp.returncode == 0, T.describe(cp) + out[-3000:]
    assert "data at %d" % where["at"] in out and "extent item made again" in out, out
    assert_repaired(img, files, damaged_sha, undo)


def delete_shared_block_item(im, where):
    ext = im.tree_root(C.EXTENT_TREE)[0]
    shared = [(b, s) for b, s in im.walk(ext) if b.item_key(s).type == METADATA_ITEM and b.get_item(s, 0, "<Q") >= 2]
    assert shared, "the base image has no tree block two pointers reach"
    b, s = shared[0]
    where["at"] = b.item_key(s).objectid
    b.delete_item(s)
    im.write_block(b)


def test_shared_tree_block_extent_item_missing(ubtrfs_bin, base):
    """The extent item of a leaf the top-level tree and its snapshot share deleted: the item made
    again with both references (the owner's, and one for the snapshot's pointer), refs 2, as the
    kernel had it; the space accounting recounted after."""
    img, files = base
    where = {}
    damage(img, lambda im: delete_shared_block_item(im, where))
    damaged_sha = sha(img)
    undo = img.parent / "shared.undo"
    cp = repair(img, undo=undo)
    out = cp.stdout.decode()
    assert cp.returncode == 0, T.describe(cp) + out[-3000:]
    assert "tree block %d (tree 5" % where["at"] in out and "the other pointers' references follow" in out, out
    tree = T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "2", str(img)]).stdout.decode()
    item = tree[tree.index("key (%d METADATA_ITEM" % where["at"]):].split("\titem ", 1)[0]
    assert "refs 2 " in item and "backref root 256" in item and "backref root FS_TREE" in item, item
    assert_repaired(img, files, damaged_sha, undo)


def test_missing_extent_without_cure_keeps_the_space(ubtrfs_bin, base):
    """The extent item of a shared tree block deleted, and the block's header marked as written by
    relocation: no cure (relocation's blocks take full back references, whose parents this repair
    does not guess). Recounting the block groups or rewriting the free space tree from the extent
    tree would call that live block free (a later write would go over it), so the repair leaves
    the whole space accounting as it is: nothing written."""
    img, _ = base

    def edit(im):
        where = {}
        delete_shared_block_item(im, where)
        blk = im.read_block(where["at"])
        blk.flags(blk.flags() | 2)  # BTRFS_HEADER_FLAG_RELOC
        im.write_block(blk)
    damage(img, edit)
    before = sha(img)
    cp = repair(img)
    assert cp.returncode == 1, T.describe(cp) + cp.stdout.decode()[-3000:]
    assert b"misses 1 extents this repair cannot make again" in cp.stderr, T.describe(cp)
    assert sha(img) == before, "the repair wrote although the extent tree misses an extent"


# ---- tree blocks no copy of which passes the tree checks: salvaged (lib/repair/salvage.c) ----

def fs_leaf(im, pred):
    """The first top-level tree leaf with an item for which pred(block, slot) holds, and that slot."""
    for b, s in im.walk(im.tree_root(C.FS_TREE)[0]):
        if pred(b, s):
            return b, s
    raise AssertionError("no such item")


def salvage_item_offset(im):
    """An item's data offset garbled (btrfs-corrupt-block's number), on every copy."""
    b, _ = fs_leaf(im, lambda b, s: b.nritems() > 20)
    struct.pack_into("<I", b.data, C.HEADER_SIZE + C.ITEM_SIZE * (b.nritems() // 2) + 17, 755944791)
    im.write_block(b)


def salvage_transid(im):
    """A leaf's header generation far past the filesystem's (its parent says the right one)."""
    b, _ = fs_leaf(im, lambda b, s: b.item_key(s).type == C.INODE_ITEM and is_reg(b, s))
    b.generation(im.super("generation") + 1000)
    im.write_block(b)


def salvage_ram_bytes(im):
    """An uncompressed inline extent whose ram_bytes is one more than its data."""
    def inline(b, s):
        return (b.item_key(s).type == C.EXTENT_DATA and b.get_item(s, C.FE_TYPE, "<B") == C.FILE_EXTENT_INLINE
                and b.get_item(s, C.FE_COMPRESSION, "<B") == 0)
    b, s = fs_leaf(im, inline)
    b.patch_item(s, C.FE_RAM_BYTES, "<Q", b.get_item(s, C.FE_RAM_BYTES, "<Q") + 1)
    im.write_block(b)


def salvage_mode(im):
    """A regular file's mode with no file type and stray bits (a fuzzer's)."""
    b, s = first_inode(im, C.FS_TREE, is_reg)
    b.patch_item(s, C.INODE_MODE, "<I", 0o37027600000 & 0xffffffff)
    im.write_block(b)


def salvage_dir_name(im):
    """A DIR_ITEM's name changed by one bit: its hash is not its key's any more."""
    b, s = fs_leaf(im, lambda b, s: b.item_key(s).type == C.DIR_ITEM and b.item_data(s)[30:33] == b"n07")
    b.patch_item(s, 30, "<B", b.get_item(s, 30, "<B") ^ 1)
    im.write_block(b)


SALVAGE = {
    "item-offset": salvage_item_offset,
    "transid": salvage_transid,
    "inline-ram-bytes": salvage_ram_bytes,
    "inode-mode": salvage_mode,
    "dir-item-name": salvage_dir_name,
}


@pytest.mark.parametrize("cls", sorted(SALVAGE))
def test_block_with_no_good_copy_salvaged(ubtrfs_bin, base, cls):
    """A leaf of the top-level tree (shared with the snapshot) broken on every copy, its
    checksum good: the tree checks refuse it, so nothing under it reads (the kernel refuses it
    too). The repair reads it leniently, cures it, copies it on write in both trees; after it
    both checkers are clean and every file reads as before the damage; undo gives the damaged
    image back."""
    img, files = base
    damage(img, SALVAGE[cls])
    assert "no good copy" in T.ubtrfs("check", str(img)).stdout.decode()
    damaged_sha = sha(img)
    undo = img.parent / "salvage.undo"
    cp = repair(img, undo=undo)
    out = cp.stdout.decode()
    assert cp.returncode == 0, T.describe(cp) + out[-3000:]
    assert "salvaging tree block" in out, out
    assert_repaired(img, files, damaged_sha, undo)


def test_block_salvage_dry_run_writes_nothing(ubtrfs_bin, base):
    img, _ = base
    damage(img, salvage_item_offset)
    damaged_sha = sha(img)
    cp = T.ubtrfs("check", "--repair", "--dry-run", str(img))
    out = cp.stdout.decode()
    assert cp.returncode == 1, T.describe(cp)
    assert "would salvage tree block" in out and "laid out again" in out, out
    assert sha(img) == damaged_sha
