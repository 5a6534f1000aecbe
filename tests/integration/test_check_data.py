# SPDX-License-Identifier: MIT
"""`ubtrfs check`: the checksum tree, data extents' references, --check-data-csum.

Oracle: `btrfs check --readonly` on the same image calls the damage an error;
damage injected with craft.py (block checksums rewritten, so the leaf is read).
Clean images of every profile are test_check.py's (class csum included).
"""

import re
import random

import pytest

import craft as C
import ubtrfs_testlib as T
from test_check import check, problems

CSUM_KEY = 128


@pytest.fixture
def base(factory, tmp_path):
    dst = tmp_path / "damaged.img"
    T.copy_sparse(factory.image("damage-base").devices[0], dst)
    return dst


def damaged(img, edit, refereed=True):
    """btrfs check must call the edit damage (unless not `refereed`: then the test's own record
    of what it broke is the oracle); ubtrfs check's records and summary."""
    with C.Image(img) as im:
        edit(im)
    if refereed:
        ref = T.run(["btrfs", "check", "--readonly", str(img)], check=False, timeout=120)
        assert ref.returncode != 0, "the referee calls the damage clean:\n" + ref.stdout.decode()[-2000:]
    cp = check("--json", img)
    recs, summary = problems(cp)
    assert cp.returncode == 1, T.describe(cp) + cp.stdout.decode()[-3000:]
    return recs, summary


def test_clean_counts_csum(ubtrfs_bin, base):
    cp = check("--json", base)
    recs, summary = problems(cp)
    assert cp.returncode == 0 and not recs, [r["message"] for r in recs]
    assert summary["by_class"]["csum"] == 0
    assert summary["csum_items"] > 0 and summary["csum_bytes"] > 0


def test_csum_outside_data_chunk(ubtrfs_bin, base):
    where = {}

    def edit(im):
        # the tree's last item moved past every chunk (keys stay in order): checksums of space no chunk holds
        root = im.tree_root(C.CSUM_TREE)[0]
        blk, slot = im.find_items(root, lambda k: k.type == CSUM_KEY)[-1]
        where["at"] = max(c.logical + c.length for c in im.chunks) + (1 << 20)
        new = C.Key(blk.item_key(slot).objectid, CSUM_KEY, where["at"])
        path = im.leaf_path(root, blk.item_key(slot))
        leaf, slot = path[-1]
        leaf.set_item_key(slot, new)
        im.write_block(leaf)
        # a leaf's first key is also its parent's pointer key
        for node, pslot in reversed(path[:-1]):
            if slot:
                break
            node.set_ptr(pslot, key=new)
            im.write_block(node)
            slot = pslot
    recs, summary = damaged(base, edit)
    assert any(r["class"] == "csum" and r["logical"] == where["at"] and "which no data chunk holds" in r["message"]
               for r in recs), [r["message"] for r in recs]
    assert summary["by_class"]["csum"] >= 1


def test_csum_items_overlap(ubtrfs_bin, base):
    def edit(im):
        blk, slot = im.find_item(im.tree_root(C.CSUM_TREE)[0], lambda k: k.type == CSUM_KEY)
        # split the item in two whose ranges share sectors (inside one leaf: the leaf check sees it)
        k, d = blk.items()[slot]
        cs = {0: 4, 1: 8}.get(im.super("csum_type"), 32)
        n = len(d) // cs
        assert n >= 4, "the first checksum item is too short to split"
        half = n // 2
        items = blk.items()
        items[slot:slot + 1] = [(k, d[:(half + 1) * cs]),
                                (C.Key(k.objectid, CSUM_KEY, k.offset + half * im.sectorsize), d[half * cs:])]
        blk.rebuild_leaf(items)
        im.write_block(blk)
    recs, _ = damaged(base, edit)
    assert any(r["tree"] == C.CSUM_TREE and "previous one" in r["message"] for r in recs), \
        [(r["tree"], r["message"]) for r in recs]


def test_csum_without_extent(ubtrfs_bin, base):
    where = {}

    def edit(im):
        # one checksum more, after the last item, for a free sector of a data chunk
        exts = sorted((b.item_key(s).objectid, b.item_key(s).offset)
                      for b, s in im.find_items(im.tree_root(C.EXTENT_TREE)[0], lambda k: k.type == 168)
                      if b.get_item(s, 16, "<Q") & 1)  # BTRFS_EXTENT_FLAG_DATA
        blk, slot = im.find_items(im.tree_root(C.CSUM_TREE)[0], lambda k: k.type == CSUM_KEY)[-1]
        k, d = blk.items()[slot]
        cs = {0: 4, 1: 8}.get(im.super("csum_type"), 32)
        at = k.offset + len(d) // cs * im.sectorsize
        for start, length in exts:
            if start <= at < start + length:
                at = start + length
        c = im.chunk(at)
        assert c and c.type & 1 and not any(s <= at < s + n for s, n in exts), "no free data sector after the last checksum"
        where["at"] = at
        blk.insert_item(C.Key(k.objectid, CSUM_KEY, at), bytes(cs))
        im.write_block(blk)
    # btrfs check 6.2 looks at such checksums only with --check-data-csum (they do not match the free sector)
    recs, _ = damaged(base, edit, refereed=False)
    assert any(r["class"] == "csum" and r["logical"] == where["at"] and "which no data extent holds" in r["message"]
               for r in recs), [r["message"] for r in recs]


def first_data_extent(im):
    """(Block, slot) of the first data extent item (EXTENT_ITEM with flags DATA) with one inline reference."""
    for blk, slot in im.find_items(im.tree_root(C.EXTENT_TREE)[0], lambda k: k.type == 168):
        if blk.get_item(slot, 16, "<Q") & 1 and len(blk.item_data(slot)) == 24 + 29:
            return blk, slot
    raise AssertionError("no data extent item with one inline reference")


@pytest.mark.parametrize("damage", ["refs", "inline-ref"])
def test_data_extent_refs_count(ubtrfs_bin, base, damage):
    where = {}

    def edit(im):
        blk, slot = first_data_extent(im)
        where["at"] = blk.item_key(slot).objectid
        if damage == "refs":
            # one reference more than its references hold
            blk.patch_item(slot, 0, "<Q", blk.get_item(slot, 0, "<Q") + 1)
        else:
            # its only EXTENT_DATA_REF removed
            blk.set_item_data(slot, blk.item_data(slot)[:24])
        im.write_block(blk)
    recs, _ = damaged(base, edit)
    assert any(r["class"] == "extent" and r["logical"] == where["at"] and "its references count" in r["message"]
               for r in recs), [r["message"] for r in recs]


def test_tree_block_ref_root(ubtrfs_bin, base):
    where = {}

    def edit(im):
        # the FS tree's root leaf: its skinny METADATA_ITEM's inline TREE_BLOCK_REF names the extent tree instead
        leaf = im.tree_root(C.FS_TREE)[0]
        blk, slot = im.find_item(im.tree_root(C.EXTENT_TREE)[0], lambda k: k.type == 169 and k.objectid == leaf)
        assert len(blk.item_data(slot)) == 24 + 9 and blk.item_data(slot)[24] == 176, "not one inline TREE_BLOCK_REF"
        where["at"] = leaf
        blk.patch_item(slot, 25, "<Q", C.EXTENT_TREE)
        im.write_block(blk)
    recs, _ = damaged(base, edit)
    assert any(r["class"] == "extent" and r["logical"] == where["at"] and "TREE_BLOCK_REF names tree EXTENT_TREE" in r["message"]
               for r in recs), [r["message"] for r in recs]


def test_clean_kernel_data_kinds(ubtrfs_bin, factory, tmp_path):
    """Reflinks, a snapshot whose copy of a file was then changed, zstd compression, a NOCOW
    (nodatasum) file and a preallocated one, written by the kernel: clean, as btrfs check says."""
    img = tmp_path / "kinds.img"
    with open(img, "wb") as f:
        f.truncate(256 << 20)
    T.run(["mkfs.btrfs", "-f", "-q", img])
    rnd = random.Random(10)
    with T.mounted([img], factory.mountpoint(), options="compress=zstd", readonly=False) as m:
        T.run(["btrfs", "subvolume", "create", "%s/sv" % m])
        with open("%s/sv/data" % m, "wb") as f:
            f.write(rnd.randbytes(3 << 20))
        with open("%s/sv/text" % m, "wb") as f:
            f.write(b"compressible line\n" * 100000)
        T.run(["cp", "--reflink=always", "%s/sv/data" % m, "%s/sv/data.ref" % m])
        open("%s/sv/nocow" % m, "wb").close()
        T.run(["chattr", "+C", "%s/sv/nocow" % m])
        with open("%s/sv/nocow" % m, "wb") as f:
            f.write(rnd.randbytes(1 << 20))
        T.run(["fallocate", "-l", "2M", "%s/sv/prealloc" % m])
        T.run(["sync"])
        T.run(["btrfs", "subvolume", "snapshot", "%s/sv" % m, "%s/snap" % m])
        with open("%s/snap/data" % m, "r+b") as f:
            f.seek(1 << 20)
            f.write(rnd.randbytes(8192))
        T.run(["sync"])
    ref = T.run(["btrfs", "check", "--readonly", str(img)], check=False, timeout=120)
    assert ref.returncode == 0, ref.stdout.decode()[-2000:]
    cp = check("--json", img)
    recs, summary = problems(cp)
    assert cp.returncode == 0 and not recs, [r["message"] for r in recs]
    assert summary["csum_items"] > 0


@pytest.mark.parametrize("name", ["kernel-raid1", "kernel-raid5", "kernel-raid6", "kernel-subvol-zstd"])
def test_check_data_csum_clean(ubtrfs_bin, factory, name):
    devs = factory.image(name).devices
    cp = check("--json", "--check-data-csum", *devs)
    recs, summary = problems(cp)
    assert cp.returncode == 0 and not recs, [r["message"] for r in recs]
    assert summary["csum_bytes"] > 0
    # every full stripe with extents had its parity compared with its data
    assert (summary["parity_stripes"] > 0) == (name in ("kernel-raid5", "kernel-raid6")), summary


def test_check_data_csum_bad_mirror(ubtrfs_bin, factory, tmp_path):
    img = tmp_path / "dup.img"
    with open(img, "wb") as f:
        f.truncate(256 << 20)
    T.run(["mkfs.btrfs", "-f", "-q", "-d", "dup", "--rootdir", factory.source("damage"), img])
    where = {}
    with C.Image(img) as im:
        blk, slot = im.find_item(im.tree_root(C.CSUM_TREE)[0], lambda k: k.type == CSUM_KEY)
        at = blk.item_key(slot).offset + 3 * im.sectorsize
        phys = im.chunk(at).copies(at)[1]
        where.update(sector=at, physical=phys)
        b = im._pread(phys + 5, 1)
        im._pwrite(phys + 5, bytes([b[0] ^ 0xff]))
    ref = T.run(["btrfs", "check", "--readonly", "--check-data-csum", img], check=False, timeout=120)
    assert ref.returncode != 0 and b"mirror 2 bytenr %d" % at in ref.stdout + ref.stderr
    assert check(img).returncode == 0, "without --check-data-csum the data is not read"
    cp = check("--json", "--check-data-csum", img)
    recs, _ = problems(cp)
    assert cp.returncode == 1
    assert [(r["class"], r["logical"], r["devid"], r["physical"]) for r in recs] == \
        [("csum", where["sector"], 1, where["physical"])], [r["message"] for r in recs]


def _data_chunk(devs):
    """(logical, stripe_len, [(devid, physical)]) of the first data chunk, from btrfs's own dump."""
    out = T.ubtrfs("dump-tree", "-t", "chunk", *[str(d) for d in devs]).stdout.decode()
    for m in re.finditer(r"key \(FIRST_CHUNK_TREE CHUNK_ITEM (\d+)\).*?\n(.*?)(?=\n\titem|\Z)", out, re.S):
        body = m.group(2)
        if "type DATA" in body:
            stripe_len = int(re.search(r"stripe_len (\d+)", body).group(1))
            stripes = [(int(a), int(b)) for a, b in re.findall(r"devid (\d+) offset (\d+)", body)]
            return int(m.group(1)), stripe_len, stripes
    raise AssertionError("no data chunk")


def _parity_copy(factory, tmp_path, name):
    """Private copies of a kernel-made RAID5/6 image's devices, the first checksummed sector
    and the first data chunk (logical, stripe_len, stripes)."""
    devs = []
    for i, src in enumerate(factory.image(name).devices):
        devs.append(tmp_path / ("%s.%d.img" % (name, i)))
        T.copy_sparse(src, devs[-1])
    out = T.ubtrfs("dump-tree", "-t", "csum", *[str(d) for d in devs]).stdout.decode()
    sector = int(re.search(r"key \(EXTENT_CSUM EXTENT_CSUM (\d+)\)", out).group(1))
    return devs, sector, _data_chunk(devs)


def test_check_data_csum_bad_parity(ubtrfs_bin, factory, tmp_path):
    """A byte of P flipped on RAID5: the copy rebuilt from P of the data sector beside it is bad,
    and the full stripe's P does not match its data (no referee: btrfs check does not read parity,
    the test's record of where P lies, from the chunk item, is the oracle)."""
    devs, sector, (logical, stripe_len, stripes) = _parity_copy(factory, tmp_path, "kernel-raid5")
    n = len(stripes)
    off = sector - logical
    row, in_row = divmod(off, stripe_len * (n - 1))
    devid, phys = stripes[(n - 1 + row) % n]  # P of this row: data stripes rotate by the row number
    at = phys + row * stripe_len + in_row % stripe_len + 7
    with open(devs[devid - 1], "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0xff]))
    assert check(*devs).returncode == 0
    cp = check("--json", "--check-data-csum", *devs)
    recs, _ = problems(cp)
    assert cp.returncode == 1
    # P covers the same sector of every data stripe of its row: each one's copy rebuilt from P is bad
    row_start = logical + row * stripe_len * (n - 1)
    want = sorted(row_start + k * stripe_len + in_row % stripe_len // 4096 * 4096 for k in range(n - 1))
    assert sector in want
    # the full stripe's P is named once, with its device and place
    parity = [r for r in recs if "does not match its data strips" in r["message"]]
    recs = [r for r in recs if r not in parity]
    assert [(r["class"], r["devid"], r["physical"], r["logical"]) for r in parity] == \
        [("csum", devid, phys + row * stripe_len, row_start)], parity
    assert ": P (devid" in parity[0]["message"], parity
    # one record per read names its first bad sector and how many there are
    msgs = [r["message"] for r in recs]
    assert recs and all(r["logical"] in want and "on copy 2" in r["message"] for r in recs), msgs
    assert sum(int(re.search(r"\((\d+) of the sectors", m).group(1)) for m in msgs) == len(want), msgs
    assert all(r["class"] == "csum" and "mismatch" in r["message"] for r in recs), [r["message"] for r in recs]


def test_check_data_csum_bad_q(ubtrfs_bin, factory, tmp_path):
    """A byte of Q flipped on RAID6: the full stripe's Q is named (no referee: btrfs check does not
    read parity; the test's record of where Q lies, from the chunk item, is the oracle)."""
    devs, sector, (logical, stripe_len, stripes) = _parity_copy(factory, tmp_path, "kernel-raid6")
    n = len(stripes)
    row = (sector - logical) // (stripe_len * (n - 2))
    devid, phys = stripes[(n - 1 + row) % n]  # Q: the slot after P, rotating with the row
    at = phys + row * stripe_len + 100
    with open(devs[devid - 1], "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x5a]))
    cp = check("--json", "--check-data-csum", *devs)
    recs, _ = problems(cp)
    assert cp.returncode == 1, T.describe(cp)
    parity = [r for r in recs if "does not match its data strips" in r["message"]]
    assert [(r["devid"], r["physical"]) for r in parity] == [(devid, phys + row * stripe_len)], recs
    assert ": Q (devid" in parity[0]["message"], parity
