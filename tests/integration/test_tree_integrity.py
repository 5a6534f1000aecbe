# SPDX-License-Identifier: MIT
"""Pointers that lead to the wrong block, in checksum-valid images.

Each image is made by the kernel or mkfs.btrfs; then one pointer is bent so
it leads somewhere a pointer must never lead, and the checksum of every copy
of the changed block is recomputed so the block itself reads as healthy:

  * a node slot pointing at another parent's child, at a block of another
    tree, at the child of its neighbour slot (one child twice), or every slot
    of every node at one child (a tree that prints one leaf exponentially
    often when blocks are accepted twice);
  * a ROOT_ITEM (the fs tree's, a subvolume's) pointing at the root tree's or
    the extent tree's root block;
  * the superblock's log_root pointing at the root tree's root block;
  * a log ROOT_ITEM pointing at the log root tree's own block.

btrfs-progs' dump-tree of the changed image confirms the pointer was bent
(the setup reached the state it wanted). Then every command (dump-tree of all
trees and of the affected one, ls -R -l, ls -R --json, cat of a file whose
lookup crosses the bent pointer) must finish within 10 s, exit 1 or 2, name
the bad block's logical address in an error, and say no identical error line
over and over. A names-only ls -R reads no file's inode, so it either fails
the same way or prints exactly the unchanged image's names. The unchanged
images must read with exit 0 (control).
"""
import collections
import os
import random
import re
import shutil
import struct

import pytest

import fsynclog_lib as L
import multidev_lib as M
import ubtrfs_testlib as T

TIMEOUT = 10
HEADER = 101          # struct btrfs_header
KEY_PTR = 33          # struct btrfs_key_ptr: key (17), blockptr, generation
ITEM = 25             # struct btrfs_item: key (17), offset, size
# struct btrfs_root_item: the 160-byte inode item, then these
RI_GENERATION, RI_BYTENR, RI_LEVEL, RI_GENERATION_V2 = 160, 176, 238, 239
# struct btrfs_super_block
SB_LOG_ROOT, SB_LOG_ROOT_LEVEL = 96, 200
SUPER_OFFSETS = (64 << 10, 64 << 20, 256 << 30)

crc32c = T.crc32c


# ----------------------------------------------------------------------------
# what btrfs-progs says is in the image

Block = collections.namedtuple("Block", "bytenr level gen owner ptrs items")


def progs_dump(image, *args):
    return T.run(["btrfs", "inspect-internal", "dump-tree", *args, str(image)]).stdout.decode("utf-8", "replace")


def parse_blocks(text):
    """{bytenr: Block} from a progs dump-tree; ptrs [(key, block, gen)], items [(key, body)]."""
    blocks = {}
    cur = None
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^(node|leaf) (\d+) (?:level (\d+) )?items \d+ free space -?\d+ generation (\d+) owner (\S+)",
                     line)
        if m:
            cur = Block(int(m.group(2)), int(m.group(3) or 0), int(m.group(4)), m.group(5), [], [])
            blocks.setdefault(cur.bytenr, cur)
            continue
        if cur is None:
            continue
        m = re.match(r"^\tkey \((.*?)\) block (\d+) gen (\d+)", line)
        if m:
            cur.ptrs.append((m.group(1), int(m.group(2)), int(m.group(3))))
            continue
        m = re.match(r"^\titem \d+ key \((.*?)\) itemoff", line)
        if m:
            body = []
            j = i + 1
            while j < len(lines) and lines[j].startswith("\t\t"):
                body.append(lines[j])
                j += 1
            cur.items.append((m.group(1), "\n".join(body)))
    return blocks


def root_of(blocks):
    """The block no other block of the dump points at."""
    children = {b for blk in blocks.values() for _, b, _ in blk.ptrs}
    roots = [b for b in blocks if b not in children]
    assert len(roots) == 1, roots
    return blocks[roots[0]]


class Image:
    """One base image and where every copy of a metadata block lives."""

    def __init__(self, name, path, work, nodesize, subvol=None, subvol_file=None):
        self.name, self.path, self.work, self.nodesize = name, str(path), str(work), nodesize
        self.subvol, self.subvol_file = subvol, subvol_file
        self.chunks = M.parse_chunks(progs_dump(self.path, "-t", "chunk"))
        self.sup = L.dump_super(self.path)
        self._trees = {}
        self.names = None  # `ls -R` of the unchanged image, set by the fixture

    def copies(self, logical):
        return [p for _, p in M.chunk_of(self.chunks, logical).copies(logical)]

    def tree(self, tree):
        if tree not in self._trees:
            self._trees[tree] = parse_blocks(progs_dump(self.path, "-t", str(tree)))
        return self._trees[tree]


def patch_block(img, image, logical, edit):
    """Apply edit(bytearray) to the block at `logical` in every copy, with a fresh checksum."""
    with open(img, "r+b") as f:
        phys = image.copies(logical)
        f.seek(phys[0])
        blk = bytearray(f.read(image.nodesize))
        edit(blk)
        blk[0:4] = crc32c(bytes(blk[32:])).to_bytes(4, "little")
        for p in phys:
            f.seek(p)
            f.write(blk)


def patch_super(img, edit):
    size = os.path.getsize(img)
    with open(img, "r+b") as f:
        for off in SUPER_OFFSETS:
            if off + 4096 > size:
                continue
            f.seek(off)
            sb = bytearray(f.read(4096))
            if sb[64:72] != b"_BHRfS_M":
                continue
            edit(sb)
            sb[0:4] = crc32c(bytes(sb[32:])).to_bytes(4, "little")
            f.seek(off)
            f.write(sb)


def set_ptr(blk, slot, bytenr, gen):
    struct.pack_into("<QQ", blk, HEADER + slot * KEY_PTR + 17, bytenr, gen)


def item_data_offset(blk, key_prefix):
    """Offset in the leaf of the data of the first item whose key starts with key_prefix (objectid, type)."""
    nritems = struct.unpack_from("<I", blk, 96)[0]
    for i in range(nritems):
        objectid, typ = struct.unpack_from("<QB", blk, HEADER + i * ITEM)
        if (objectid, typ) == key_prefix:
            off = struct.unpack_from("<I", blk, HEADER + i * ITEM + 17)[0]
            return HEADER + off
    raise AssertionError("no item %r in the leaf" % (key_prefix,))


def set_root_item(blk, key_prefix, bytenr, level, gen):
    d = item_data_offset(blk, key_prefix)
    struct.pack_into("<Q", blk, d + RI_BYTENR, bytenr)
    struct.pack_into("<Q", blk, d + RI_GENERATION, gen)
    struct.pack_into("<Q", blk, d + RI_GENERATION_V2, gen)
    blk[d + RI_LEVEL] = level


def file_in_leaf(leaf):
    """The name of a regular file in / whose INODE_ITEM is in this leaf (progs names it in the INODE_REF)."""
    inodes = {k.split()[0] for k, body in leaf.items
              if k.split()[1:2] == ["INODE_ITEM"] and re.search(r"\bmode 100\d{3}\b", body)}
    for k, body in leaf.items:
        parts = k.split()
        if len(parts) == 3 and parts[1] == "INODE_REF" and parts[0] in inodes and parts[2] == "256":
            m = re.search(r"name: (\S+)", body)
            if m:
                return "/" + m.group(1)
    return None


def leaf_under(blocks, node, slot):
    """The leftmost leaf below slot `slot` of `node`."""
    b = blocks[node.ptrs[slot][1]]
    while b.level > 0:
        b = blocks[b.ptrs[0][1]]
    return b


def slot_with_file(blocks, node, first=1):
    """(slot, file): the first slot >= first whose leaf holds a file of /, or (None, None)."""
    for s in range(first, len(node.ptrs)):
        f = file_in_leaf(leaf_under(blocks, node, s))
        if f:
            return s, f
    return None, None


def fs_node_with_file(blocks, first=1):
    """A level-1 node of the fs tree and a slot >= first whose leaf holds a file of /."""
    for node in sorted((b for b in blocks.values() if b.level == 1), key=lambda b: b.bytenr):
        s, f = slot_with_file(blocks, node, first)
        if s is not None:
            return node, s, f
    raise AssertionError("test setup: no level-1 fs tree node has a file of / below slot >= %d" % first)


# ----------------------------------------------------------------------------
# base images


def _names(rng, n):
    return ["f%05d_%s" % (i, "".join(rng.choice("abcdefghij") for _ in range(rng.randrange(1, 12))))
            for i in range(n)]


def kernel_image(work, nodesize, files):
    """Kernel-made, DUP metadata, a subvolume and its snapshot, a pending fsync log in / and in the subvolume."""
    rng = random.Random(nodesize)

    def baseline(mnt):
        for name in _names(rng, files):
            L.write_file(mnt / name, b"x" * rng.randrange(0, 300))
        T.run(["btrfs", "subvolume", "create", str(mnt / "sv")])
        for i in range(20):
            L.write_file(mnt / "sv" / ("g%d" % i), b"y" * i)
        T.run(["btrfs", "subvolume", "snapshot", str(mnt / "sv"), str(mnt / "snap")])

    def action(mnt):
        L.write_file(mnt / "new", b"fsynced after the last commit\n", fsync=True)
        L.write_file(mnt / "sv" / "new", b"fsynced in the subvolume\n", fsync=True)

    # the kernel now and then commits instead of logging (a busy machine): build it again
    for _ in range(3):
        crash = L.make_crash(work, baseline, action, mkfs_options=("-n", str(nodesize), "-m", "dup"))
        if crash.log_root:
            break
        rng.seed(nodesize)
    assert crash.log_root, "test setup: the kernel committed instead of logging, three times"
    return Image("kernel-%dk-dup-log" % (nodesize >> 10), crash.image, work, nodesize, subvol=256,
                 subvol_file="/sv/g5")


def mkfs_image(work, nodesize, meta, files):
    """mkfs.btrfs --rootdir: many files, so the fs tree has two levels of nodes at 4 KiB."""
    os.makedirs(work, exist_ok=True)
    src = os.path.join(work, "src")
    os.makedirs(src)
    rng = random.Random(files)
    for name in _names(rng, files):
        with open(os.path.join(src, name), "wb") as f:
            f.write(b"z" * rng.randrange(0, 200))
    img = os.path.join(work, "base.img")
    with open(img, "wb") as f:
        f.truncate(128 << 20)
    T.run(["mkfs.btrfs", "-q", "-f", "-n", str(nodesize), "-s", "4096", "-m", meta, "-d", "single",
           "--rootdir", src, img])
    shutil.rmtree(src)
    return Image("mkfs-%dk-%s" % (nodesize >> 10, meta), img, work, nodesize)


KERNEL, MKFS_SINGLE, MKFS_DUP = "kernel-16k-dup-log", "mkfs-4k-single", "mkfs-4k-dup"


@pytest.fixture(scope="module")
def image(request, scratch, ubtrfs_bin):
    work = os.path.join(scratch, "integrity-" + request.param)
    os.makedirs(work, exist_ok=True)

    def build(d):
        if request.param.startswith("kernel"):
            b = kernel_image(str(d), 16384, 700)
        elif request.param == "mkfs-4k-single":
            b = mkfs_image(str(d), 4096, "single", 2600)
        else:
            b = mkfs_image(str(d), 4096, "dup", 2600)
        return [b.name, b.path, b.nodesize, b.subvol, b.subvol_file]
    # the image is built once per run (shared by the pytest-xdist workers); the bent
    # copies go to this worker's `work`
    _, (name, path, nodesize, subvol, subvol_file) = T.shared_build(
        "integrity-" + request.param, build, fallback_dir=work)
    img = Image(name, path, work, nodesize, subvol=subvol, subvol_file=subvol_file)
    # control: the unchanged image reads cleanly, so every failure below is the bent pointer's
    for cmd in (["dump-tree"], ["ls", "-R", "--json"], ["ls", "-R"]):
        cp = T.ubtrfs(*cmd, img.path, timeout=60)
        assert cp.returncode == 0, "control %s on %s: %s" % (cmd, img.name, T.describe(cp))
    img.names = cp.stdout
    yield img
    shutil.rmtree(work, ignore_errors=True)


# ----------------------------------------------------------------------------
# the bent pointers: each returns (what the error must name, affected tree, file to cat)


def case_other_parent(image, img):
    blocks = image.tree("fs")
    nodes = [b for b in blocks.values() if b.level == 1]
    if len(nodes) < 2:
        pytest.skip("%s: the fs tree has one level-1 node, so no child has another parent" % image.name)
    n1, s, f = fs_node_with_file(blocks)
    n2 = [n for n in nodes if n.bytenr != n1.bytenr][0]
    _, target, gen = n2.ptrs[len(n2.ptrs) // 2]
    patch_block(img, image, n1.bytenr, lambda b: set_ptr(b, s, target, gen))
    return [target], "fs", f, (n1.bytenr, s, target)


def case_key_out_of_range(image, img):
    """The last slot of a node made to point at the next node's first child, its key rewritten to
    match that child: the node stays sorted and every first key fits, only its range is wrong."""
    blocks = image.tree("fs")
    root = root_of(blocks)
    if root.level < 2:
        pytest.skip("%s: the fs tree has one level-1 node" % image.name)
    order = [b for _, b, _ in root.ptrs]
    for i in range(len(order) - 1):
        n1 = blocks[order[i]]
        _, f = slot_with_file(blocks, n1, 0)
        if f:
            break
    else:
        pytest.skip("%s: only the last level-1 node has a file of / below it" % image.name)
    n2 = blocks[order[i + 1]]
    _, target, gen = n2.ptrs[0]
    with open(image.path, "rb") as fh:
        fh.seek(image.copies(n2.bytenr)[0])
        key = fh.read(HEADER + 17)[HEADER:]
    last = len(n1.ptrs) - 1

    def edit(b):
        b[HEADER + last * KEY_PTR:HEADER + last * KEY_PTR + 17] = key
        set_ptr(b, last, target, gen)
    patch_block(img, image, n1.bytenr, edit)
    return [n1.bytenr], "fs", f, (n1.bytenr, last, target)


def case_other_tree(image, img):
    blocks = image.tree("fs")
    node, s, f = fs_node_with_file(blocks)
    leaf = [b for b in image.tree("extent").values() if b.level == 0][0]
    patch_block(img, image, node.bytenr, lambda b: set_ptr(b, s, leaf.bytenr, leaf.gen))
    return [leaf.bytenr], "fs", f, (node.bytenr, s, leaf.bytenr)


def case_same_child(image, img):
    blocks = image.tree("fs")
    node, s, f = fs_node_with_file(blocks)
    _, target, gen = node.ptrs[s - 1]
    patch_block(img, image, node.bytenr, lambda b: set_ptr(b, s, target, gen))
    return [target], "fs", f, (node.bytenr, s, target)


def case_every_slot_one_child(image, img):
    """Every slot of every node at its first child: 'one leaf an exponential number of times'."""
    blocks = image.tree("fs")
    root = root_of(blocks)
    _, _, f = fs_node_with_file(blocks)
    targets = []
    for n in (b for b in blocks.values() if b.level > 0):
        _, child, gen = n.ptrs[0]
        targets.append(child)

        def edit(b, n=n, child=child, gen=gen):
            for slot in range(1, len(n.ptrs)):
                set_ptr(b, slot, child, gen)
        patch_block(img, image, n.bytenr, edit)
    return targets, "fs", f, (root.bytenr, 1, root.ptrs[0][1])


def _root_tree_leaf_with(image, key_prefix):
    blocks = image.tree("root")
    want = "%d ROOT_ITEM" % key_prefix[0] if key_prefix[0] != 5 else "FS_TREE ROOT_ITEM"
    for b in blocks.values():
        if b.level == 0 and any(k.startswith(want) for k, _ in b.items):
            return b, blocks
    raise AssertionError("no ROOT_ITEM %r in the root tree" % (key_prefix,))


def _tree_root(image, tree):
    b = root_of(image.tree(tree))
    return b.bytenr, b.level, b.gen


def case_rootitem(objectid, target_tree):
    def case(image, img):
        if objectid != 5 and not image.subvol:
            pytest.skip("%s has no subvolume" % image.name)
        leaf, _ = _root_tree_leaf_with(image, (objectid, 132))
        bytenr, level, gen = _tree_root(image, target_tree)
        patch_block(img, image, leaf.bytenr, lambda b: set_root_item(b, (objectid, 132), bytenr, level, gen))
        f = "/" + file_in_root(image) if objectid == 5 else image.subvol_file
        return [bytenr], str(objectid), f, None
    return case


def file_in_root(image):
    cp = T.ubtrfs("ls", image.path, timeout=60)
    names = [n for n in cp.stdout.decode().split() if n.startswith("f")]
    assert names, "test setup: no file in / of %s" % image.name
    return names[len(names) // 2].lstrip("/")


def case_super_log_root(image, img):
    bytenr, level, _ = _tree_root(image, "root")

    def edit(sb):
        struct.pack_into("<Q", sb, SB_LOG_ROOT, bytenr)
        sb[SB_LOG_ROOT_LEVEL] = level
    patch_super(img, edit)
    return [bytenr], "log", "/" + file_in_root(image), None


def case_log_rootitem_to_log_root(image, img):
    log_root = int(image.sup.get("log_root", "0"))
    if not log_root:
        pytest.skip("%s has no fsync log" % image.name)
    blk = parse_blocks(progs_dump(image.path, "-b", str(log_root)))[log_root]
    patch_block(img, image, log_root, lambda b: set_root_item(b, (2**64 - 6, 132), log_root, blk.level, blk.gen))
    return [log_root], "log", "/new", None


ALL = (KERNEL, MKFS_SINGLE, MKFS_DUP)
TWO_LEVELS = (MKFS_SINGLE, MKFS_DUP)  # fs trees with several level-1 nodes
CASES = {
    "slot-other-parent": (case_other_parent, TWO_LEVELS),
    "slot-other-tree": (case_other_tree, ALL),
    "slot-key-out-of-range": (case_key_out_of_range, TWO_LEVELS),
    "slot-same-child": (case_same_child, ALL),
    "every-slot-one-child": (case_every_slot_one_child, ALL),
    "rootitem-fs-to-root-tree": (case_rootitem(5, "root"), ALL),
    "rootitem-fs-to-extent-tree": (case_rootitem(5, "extent"), ALL),
    "rootitem-subvol-to-root-tree": (case_rootitem(256, "root"), (KERNEL,)),
    "super-log-root-to-root-tree": (case_super_log_root, ALL),
    "log-rootitem-to-log-root-tree": (case_log_rootitem_to_log_root, (KERNEL,)),
}
# grouped by image, so each module-scoped image is built once
PAIRS = [(img, case) for img in ALL for case in sorted(CASES) if img in CASES[case][1]]


def check_bent(image, img, ptr):
    """progs must see the pointer we bent: (node, slot, new child)."""
    if ptr is None:
        return
    node, slot, child = ptr
    b = parse_blocks(progs_dump(img, "-b", str(node)))[node]
    assert b.ptrs[slot][1] == child, "test setup: slot %d of node %d is %r, wanted %d" % (
        slot, node, b.ptrs[slot], child)


@pytest.mark.parametrize("image,case", PAIRS, indirect=["image"], ids=["%s-%s" % p for p in PAIRS])
def test_bent_pointer(image, case):
    img = os.path.join(image.work, "bent-%s.img" % case)
    T.copy_sparse(image.path, img)
    try:
        targets, tree, path, ptr = CASES[case][0](image, img)
        check_bent(image, img, ptr)
        failures = []
        for cmd in (["dump-tree"], ["dump-tree", "-t", tree], ["ls", "-R"], ["ls", "-R", "-l"],
                    ["ls", "-R", "--json"], ["cat", "--path", path]):
            try:
                cp = T.ubtrfs(*cmd, img, timeout=TIMEOUT)
            except Exception as e:  # a hang is a failure like any other
                failures.append("%s: %s" % (" ".join(cmd), e))
                continue
            err = cp.stderr.decode("utf-8", "replace")
            lines = collections.Counter(line for line in err.splitlines() if "error:" in line)
            bad = None
            if cmd == ["ls", "-R"] and cp.returncode == 0:
                # names only: the files' inodes are not read (as readdir does for find on the
                # kernel), so a bent pointer below them goes unseen; what it prints must then be
                # the unchanged image's names, exactly
                if cp.stdout != image.names:
                    bad = "exit 0 with a listing that differs from the unchanged image's"
            elif cp.returncode not in (1, 2):
                bad = "exit %d, wanted 1 or 2" % cp.returncode
            elif "Sanitizer" in err or "runtime error:" in err:
                bad = "sanitizer report"
            elif not any(T.mentions_number(line, t) for line in lines for t in targets):
                bad = "no error names the bad block (%s)" % targets
            elif lines and max(lines.values()) > 1:
                bad = "an error repeated: %r" % lines.most_common(1)[0][0]
            if bad:
                failures.append("%s: %s\n%s" % (" ".join(cmd), bad, err[-2500:]))
        assert not failures, "%s %s:\n" % (image.name, case) + "\n\n".join(failures)
    finally:
        os.unlink(img)
