# SPDX-License-Identifier: MIT
"""Allocation when space runs out (lib/alloc/chunk_alloc.c), judged by btrfs-progs and the kernel.

The driver (tests/tools/space_driver.c) grows the metadata of small images
made by mkfs.btrfs with large xattrs on the top directory, through
transactions that add metadata (and system) chunks when the allocator's rule
says so, until the devices are full and an operation gets -ENOSPC. Then:
  - `btrfs check --readonly` is clean: it compares every chunk with its
    device extents and block group item, the dev items' bytes_used with the
    device extents, the free space tree with the extent tree;
  - independently, from btrfs-progs' dump-tree: per device the DEV_EXTENT
    lengths add up to the DEV_ITEM's bytes_used, and to the superblock's
    dev_item bytes_used of that device; every chunk has its block group;
  - the kernel mounts it and reads back xattrs (values included) from across
    the whole run;
  - committing or aborting the transaction that hit ENOSPC leaves a clean fs;
    deleting everything and committing gives the space back: refilling the
    same number of xattrs succeeds without ENOSPC, round after round.
Data chunks: the driver reserves data until ENOSPC (adding data chunks); the
kernel then mounts read-write and writes a file into them.

Data: files of 4 MiB through the file API (lib/fsw/) until ENOSPC,
with data chunks added before each write (ub_chunk_ensure_data); delete all,
refill the same amount without ENOSPC and without a new chunk, ten rounds
in every profile behind UBTRFS_LONG_TESTS. Metadata: the same with large
xattrs, where the last percent of a fill is not reproducible (refill_count).

Every operation of the driver enters through ub_engine_begin_op / ub_fsw_begin
(which commit and ask again by themselves), except with --no-retry.

Budget: the CI slice (DUP metadata, single data, RAID1 data, one round each,
the abort case) runs in about a minute under ASan; UBTRFS_LONG_TESTS=1 runs every
profile (single, DUP, RAID1, RAID10, RAID5, RAID6, also on `ubtrfs mkfs`
images), ten rounds each.
"""

import errno
import os
import re
from pathlib import Path

import pytest

import craft
import ubtrfs_testlib as T

MiB = T.MiB
LONG = T.LONG_TESTS


@pytest.fixture(scope="module")
def driver():
    return T.test_tool("space_driver")


@pytest.fixture
def casedir(scratch, request):
    d = Path(scratch) / ("enospc-" + re.sub(r"[^A-Za-z0-9_.-]", "_", request.node.name))
    d.mkdir(parents=True, exist_ok=True)
    yield d
    T.run(["btrfs", "device", "scan", "--forget"], check=False)
    if os.environ.get("UBTRFS_KEEP_IMAGES") != "1":
        T.rmtree(d)


def make_images(d, ndev, size):
    imgs = []
    for i in range(ndev):
        p = d / ("dev%d.img" % i)
        with open(p, "wb") as f:
            f.truncate(size)
        imgs.append(p)
    return imgs


def mkfs(tool, imgs, meta, data, nodesize, ubtrfs_bin=None):
    if tool == "progs":
        T.run(["mkfs.btrfs", "-f", "-q", "-K", "-m", meta, "-d", data, "-n", str(nodesize), *imgs])
    else:
        cp = T.run([ubtrfs_bin, "mkfs", "-f", "-m", meta, "-d", data, "-n", str(nodesize), *imgs], check=False)
        if cp.returncode != 0:
            pytest.skip("ubtrfs mkfs refused this case: %s" % T.describe(cp))


def run_driver(driver, *args):
    cp = T.run([driver, *[str(a) for a in args]], check=False, timeout=900)
    out = cp.stdout.decode("utf-8", "replace")
    err = cp.stderr.decode("utf-8", "replace")
    assert cp.returncode == 0, "space_driver %s failed (%d)\nstdout: %s\nstderr: %s" % (
        " ".join(str(a) for a in args), cp.returncode, out[-2000:], err[-4000:])
    m = re.search(r"done added (\d+) deleted (\d+) enospc (\d+) chunks (\d+) (\d+) (\d+) generation (\d+)", out)
    assert m, out[-2000:]
    added, deleted, enospc, cd, cm, cs, gen = (int(x) for x in m.groups())
    skipped = set(re.findall(r"^skip (\S+)$", out, re.M))
    return dict(added=added, deleted=deleted, enospc=enospc, chunks=(cd, cm, cs), generation=gen,
                skipped=skipped, out=out, err=err)


def progs_target_cm(imgs):
    import contextlib

    @contextlib.contextmanager
    def cm():
        loops = []
        try:
            if len(imgs) == 1:
                yield str(imgs[0])
                return
            for img in imgs:
                loops.append(T.losetup_attach(img, True))
            T.run(["btrfs", "device", "scan", *loops], check=False)
            yield loops[0]
        finally:
            for dev in loops:
                T.losetup_detach(dev)
    return cm()


def progs_check(imgs):
    with progs_target_cm(imgs) as target:
        cp = T.run(["btrfs", "check", "--readonly", target], check=False, timeout=600)
    text = (cp.stdout + cp.stderr).decode("utf-8", "replace")
    errors = [ln for ln in text.splitlines()
              if re.match(r"(ERROR|error)", ln) and not re.match(r"ERROR: cannot scan /dev/", ln)]
    assert cp.returncode == 0 and not errors and "no error found" in text, \
        "btrfs check found errors:\n" + text[-6000:]
    return text


def dump_tree(imgs, tree):
    with progs_target_cm(imgs) as target:
        return T.run(["btrfs", "inspect-internal", "dump-tree", "-t", tree, target]).stdout.decode()


def space_layout(imgs):
    """Chunks, dev extents and dev items as btrfs-progs reads them; asserts they agree."""
    chunk = dump_tree(imgs, "chunk")
    dev = dump_tree(imgs, "dev")
    extent = dump_tree(imgs, "extent")
    items = {int(m.group(1)): int(m.group(2)) for m in
             re.finditer(r"DEV_ITEM (\d+)\).*?\n\s+devid \d+ total_bytes \d+ bytes_used (\d+)", chunk)}
    extents = {}
    for m in re.finditer(r"key \((\d+) DEV_EXTENT (\d+)\).*?\n.*?\n\s*chunk_objectid \d+ chunk_offset (\d+) length (\d+)", dev):
        devid, length = int(m.group(1)), int(m.group(4))
        extents[devid] = extents.get(devid, 0) + length
    chunks = [(int(m.group(1)), int(m.group(2)), m.group(3)) for m in
              re.finditer(r"CHUNK_ITEM (\d+)\) itemoff \d+ itemsize \d+\s*\n\s*length (\d+) owner \d+ "
                          r"stripe_len \d+ type (\S+)", chunk)]
    groups = {(int(m.group(1)), int(m.group(2))) for m in
              re.finditer(r"key \((\d+) BLOCK_GROUP_ITEM (\d+)\)", extent)}
    assert items and chunks, chunk[:3000]
    for devid, used in items.items():
        assert extents.get(devid, 0) == used, \
            "device %d: dev extents add up to %d, its DEV_ITEM says bytes_used %d" % (devid, extents.get(devid, 0), used)
    for logical, length, _ in chunks:
        assert (logical, length) in groups, "chunk %d (+%d) has no BLOCK_GROUP_ITEM" % (logical, length)
    # each device's superblock carries its own dev item
    for img in imgs:
        out = T.run(["btrfs", "inspect-internal", "dump-super", str(img)]).stdout.decode()
        devid = int(re.search(r"^dev_item\.devid\s+(\d+)", out, re.M).group(1))
        sb_used = int(re.search(r"^dev_item\.bytes_used\s+(\d+)", out, re.M).group(1))
        assert sb_used == items[devid], "%s: superblock dev_item bytes_used %d, chunk tree %d" % (
            img, sb_used, items[devid])
    return chunks, items


def xattr_value(name, size):
    b = name.encode()
    return (b * (size // len(b) + 1))[:size]


def kernel_sees(imgs, mnt, present, absent, size, sample=400):
    """The kernel reads back a spread of the expected xattrs (values too) and none of the deleted ones."""
    present = sorted(present)
    absent = sorted(absent)
    step_p = max(1, len(present) // sample)
    step_a = max(1, len(absent) // sample)
    with T.mounted(imgs, mnt) as m:
        for name in present[::step_p] + present[-3:]:
            v = os.getxattr(m, name)
            assert v == xattr_value(name, size), "kernel: xattr %s has the wrong value" % name
        for name in absent[::step_a]:
            with pytest.raises(OSError) as ei:
                os.getxattr(m, name)
            assert ei.value.errno == errno.ENODATA, name


def refill_count(n):
    """What a refill of n freed names must take without ENOSPC: all but the last percent.

    The admission rule keeps a commit reserve that depends on the trees' heights and the free space
    tree's fragmentation at that moment, and near the end operations are admitted one commit at a
    time: the last percent of a metadata fill differs from run to run by a few items."""
    return n - max(2, n // 100)


def count_of(r, full):
    return full + len(r["skipped"])


def names(prefix, lo, hi):
    return {"user.%s%07d" % (prefix, n) for n in range(lo, hi)}


# name, mkfs tool, metadata profile, devices, device size, nodesize
CASES = [
    ("dup", "progs", "dup", 1, 128 * MiB, 16384),
]
LONG_CASES = [
    ("raid1-2", "progs", "raid1", 2, 128 * MiB, 16384),
    ("raid5-3", "progs", "raid5", 3, 128 * MiB, 16384),
    ("single", "progs", "single", 1, 160 * MiB, 16384),
    ("raid10-4", "progs", "raid10", 4, 128 * MiB, 16384),
    ("raid6-4", "progs", "raid6", 4, 128 * MiB, 16384),
    ("dup-4k", "progs", "dup", 1, 128 * MiB, 4096),
    ("raid1-2-ubtrfs", "ubtrfs", "raid1", 2, 160 * MiB, 16384),
    ("dup-ubtrfs", "ubtrfs", "dup", 1, 160 * MiB, 16384),
]
if LONG:
    CASES += LONG_CASES


def value_size(nodesize):
    # about one xattr per leaf: the metadata grows fast with few items
    return nodesize - 400


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_metadata_fills_then_refills(driver, casedir, ubtrfs_bin, case):
    """Grow metadata until ENOSPC (chunks added on the way), then delete and refill, round after round."""
    name, tool, meta, ndev, size, nodesize = case
    imgs = make_images(casedir, ndev, size)
    mkfs(tool, imgs, meta, "single" if ndev == 1 else meta, nodesize, ubtrfs_bin)
    chunks0, _ = space_layout(imgs)
    vs = value_size(nodesize)

    r = run_driver(driver, "add", "a", 0, 10 ** 6, 150, vs, *imgs)
    assert r["enospc"] == 1, "the devices never filled up:\n" + r["out"][-1000:]
    assert r["chunks"][1] >= 1, "no metadata chunk was added"
    full = r["added"]
    present = names("a", 0, full + len(r["skipped"])) - r["skipped"]
    assert len(present) == full
    progs_check(imgs)
    chunks1, items1 = space_layout(imgs)
    assert len(chunks1) >= len(chunks0) + r["chunks"][1]
    # the new chunks are of the metadata profile asked at mkfs
    for logical, _, typ in chunks1:
        if typ.startswith("METADATA") and meta != "single":
            assert typ.lower().endswith(meta), typ
    kernel_sees(imgs, casedir / "mnt", present, set(), vs)

    if meta in ("raid5", "raid6"):
        # freed metadata comes back on RAID5/6 only in whole free full stripes (no write hole), and a
        # delete frees blocks scattered over stripes the rest of the trees still use: refills of a
        # full RAID5/6 metadata space are not promised. A delete that is refused leaves it clean.
        d = run_driver(driver, "del", "a", 0, count_of(r, full), 200, *imgs)
        progs_check(imgs)
        space_layout(imgs)
        return
    # every round deletes everything and refills the same names (the same keys, so the same tree shapes)
    rounds = 10 if LONG else 1
    count = count_of(r, full)
    for k in range(rounds):
        d = run_driver(driver, "del", "a", 0, count, 200, *imgs)
        assert d["enospc"] == 0 and d["deleted"] == full, d["out"][-1000:]
        progs_check(imgs)
        if k == rounds - 1:
            kernel_sees(imgs, casedir / "mnt", set(), present, vs)
        r = run_driver(driver, "add", "a", 0, refill_count(count), 150, vs, *imgs)
        assert r["enospc"] == 0, "round %d: ENOSPC while refilling what was freed:\n%s" % (k, r["out"][-1000:])
        # a refill after a delete adds no chunk: the space came back
        assert r["chunks"] == (0, 0, 0), r["out"][-500:]
        progs_check(imgs)
        present = names("a", 0, refill_count(count)) - r["skipped"]
        full = len(present)
    chunks2, items2 = space_layout(imgs)
    assert items2 == items1 and len(chunks2) == len(chunks1)
    kernel_sees(imgs, casedir / "mnt", present, set(), vs)


@pytest.mark.parametrize("after", ["commit", "abort"] if LONG else ["abort"])
def test_enospc_then_commit_or_abort(driver, casedir, ubtrfs_bin, after):
    """The transaction that got ENOSPC commits (or aborts): clean either way, and usable afterwards."""
    imgs = make_images(casedir, 1, 128 * MiB)
    mkfs("progs", imgs, "dup", "single", 16384)
    vs = value_size(16384)
    opts = ["--no-retry"] + (["--abort-on-enospc"] if after == "abort" else [])
    # one commit for everything: the ENOSPC hits a transaction holding many changes
    r = run_driver(driver, *opts, "add", "a", 0, 10 ** 6, 10 ** 6, vs, *imgs)
    assert r["enospc"] == 1
    progs_check(imgs)
    space_layout(imgs)
    n = r["added"] + len(r["skipped"])
    m = re.search(r"^enospc at (\d+) committed (\d+)", r["out"], re.M)
    assert m and int(m.group(1)) == n, r["out"][-500:]
    # the driver committed when the engine said EAGAIN (this transaction's share of the reserve ran
    # short): names below `committed` are in a committed transaction, the rest in the last one
    committed = int(m.group(2))
    if after == "abort":
        # nothing of the aborted transaction reached the disk, and its chunks are gone with it
        assert committed < n, "the last transaction held nothing to abort"
        kernel_sees(imgs, casedir / "mnt", names("a", 0, committed) - r["skipped"], names("a", committed, n), vs)
        r2 = run_driver(driver, "add", "b", 0, 10 ** 6, 150, vs, *imgs)
        assert r2["enospc"] == 1 and r2["added"] > 0
        progs_check(imgs)
        space_layout(imgs)
        return
    present = names("a", 0, n) - r["skipped"]
    kernel_sees(imgs, casedir / "mnt", present, set(), vs)
    # full: one more operation is refused, the fs stays clean
    r2 = run_driver(driver, "--no-retry", "add", "b", 0, 100, 10, vs, *imgs)
    assert r2["enospc"] == 1 and r2["added"] < 100, r2["out"][-500:]
    progs_check(imgs)
    # half of it deleted and committed: the same names fit again
    d = run_driver(driver, "del", "a", 0, n // 2, 100, *imgs)
    assert d["enospc"] == 0 and d["deleted"] == len(names("a", 0, n // 2) - r["skipped"]), d["out"][-800:]
    r3 = run_driver(driver, "add", "a", 0, refill_count(n // 2), 100, vs, *imgs)
    assert r3["enospc"] == 0, r3["out"][-800:]
    progs_check(imgs)
    space_layout(imgs)


def file_bytes(name, size):
    """What space_driver writes into file NAME: a xorshift64 stream seeded with the name's hash."""
    x = (craft.name_hash(name.encode()) | 1) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    m = 0xFFFFFFFFFFFFFFFF
    while len(out) < size:
        x ^= (x << 13) & m
        x ^= x >> 7
        x ^= (x << 17) & m
        out += x.to_bytes(8, "little")
    return bytes(out[:size])


FILE_SIZE = 4 * MiB
CHECK_BYTES = 256 * 1024


def kernel_files(imgs, mnt, present, absent):
    """The kernel lists exactly `present` with the right sizes and reads back the start of a few."""
    with T.mounted(imgs, mnt) as m:
        got = set(os.listdir(m))
        assert got == set(present), "kernel sees %d names, expected %d (missing %s, extra %s)" % (
            len(got), len(present), sorted(set(present) - got)[:5], sorted(got - set(present))[:5])
        for name in present:
            assert os.stat(os.path.join(m, name)).st_size == FILE_SIZE, name
        for name in sorted(present)[:: max(1, len(present) // 3)]:
            with open(os.path.join(m, name), "rb") as f:
                assert f.read(CHECK_BYTES) == file_bytes(name, CHECK_BYTES), "kernel: %s has other bytes" % name
    for name in absent:
        assert name not in got


def file_names(prefix, lo, hi):
    return ["%s%07d" % (prefix, n) for n in range(lo, hi)]


# name, metadata profile, data profile, devices, device size
DATA_CASES = [
    ("single", "dup", "single", 1, 256 * MiB),
    ("raid1-2", "raid1", "raid1", 2, 192 * MiB),
]
DATA_LONG = [
    ("raid10-4", "raid10", "raid10", 4, 160 * MiB),
    ("raid5-3", "raid1", "raid5", 3, 160 * MiB),
    ("raid6-4", "raid1c3", "raid6", 4, 160 * MiB),
    ("dup-data", "dup", "dup", 1, 256 * MiB),
]
if LONG:
    DATA_CASES += DATA_LONG


@pytest.mark.parametrize("case", DATA_CASES, ids=[c[0] for c in DATA_CASES])
def test_data_fill_delete_refill(driver, casedir, ubtrfs_bin, case):
    """Files through the file API until ENOSPC (data chunks added on the way), delete all, refill, rounds."""
    name, meta, data, ndev, size = case
    imgs = make_images(casedir, ndev, size)
    mkfs("progs", imgs, meta, data, 16384)
    r = run_driver(driver, "files", "f", 0, 10 ** 6, 8, FILE_SIZE, *imgs)
    assert r["enospc"] == 1 and r["added"] > 0, r["out"][-800:]
    assert r["chunks"][0] >= 1, "no data chunk was added"
    full = r["added"]
    progs_check(imgs)
    chunks1, items1 = space_layout(imgs)
    for _, _, typ in chunks1:
        if typ.startswith("DATA") and data != "single":
            assert typ.lower().endswith(data), typ
    kernel_files(imgs, casedir / "mnt", file_names("f", 0, full), [])
    rounds = 10 if LONG else 1
    for k in range(rounds):
        d = run_driver(driver, "unlink", "f", 0, full, 8, *imgs)
        assert d["enospc"] == 0 and d["deleted"] == full, d["out"][-800:]
        progs_check(imgs)
        # the same amount again: it fits in what was freed, no chunk is added
        r = run_driver(driver, "files", "f", 0, full, 8, FILE_SIZE, *imgs)
        assert r["enospc"] == 0 and r["added"] == full, \
            "round %d: ENOSPC while refilling what was freed:\n%s" % (k, r["out"][-800:])
        assert r["chunks"] == (0, 0, 0), r["out"][-500:]
        progs_check(imgs)
    chunks2, items2 = space_layout(imgs)
    assert items2 == items1 and len(chunks2) == len(chunks1)
    kernel_files(imgs, casedir / "mnt", file_names("f", 0, full), [])
    # and one more file than that is still ENOSPC, cleanly
    r = run_driver(driver, "files", "g", 0, 10 ** 6, 8, FILE_SIZE, *imgs)
    assert r["enospc"] == 1
    progs_check(imgs)


def test_data_chunks(driver, casedir, ubtrfs_bin):
    """Data reservations add data chunks up to ENOSPC; the kernel then writes a file into that space."""
    imgs = make_images(casedir, 2, 256 * MiB)
    mkfs("progs", imgs, "raid1", "raid1", 16384)
    r = run_driver(driver, "data", 10 ** 12, *imgs)
    assert r["enospc"] == 1 and r["chunks"][0] >= 1, r["out"][-800:]
    progs_check(imgs)
    chunks, _ = space_layout(imgs)
    assert all(t.lower().endswith("raid1") for _, _, t in chunks if t.startswith("DATA")), chunks
    with T.mounted(imgs, casedir / "mnt", readonly=False) as m:
        with open(os.path.join(m, "big"), "wb") as f:
            f.write(os.urandom(1 << 20) * 60)
            os.fsync(f.fileno())
    progs_check(imgs)


@pytest.mark.parametrize("case", [("dup", 1), ("raid1", 2)] + ([("raid10", 4), ("raid6", 4)] if LONG else []),
                         ids=lambda c: c[0])
def test_system_chunks(driver, casedir, ubtrfs_bin, case):
    """New SYSTEM chunks go into the superblock's sys_chunk_array too: check and the kernel bootstrap from it."""
    meta, ndev = case
    imgs = make_images(casedir, ndev, 256 * MiB)
    mkfs("progs", imgs, meta, "single" if ndev == 1 else meta, 16384)
    chunks0, _ = space_layout(imgs)
    r = run_driver(driver, "chunk", "system", 2, *imgs)
    assert r["chunks"] == (0, 0, 2), r["out"]
    run_driver(driver, "chunk", "metadata", 1, *imgs)
    progs_check(imgs)
    chunks1, _ = space_layout(imgs)
    sys_chunks = [c for c in chunks1 if c[2].startswith("SYSTEM")]
    assert len(sys_chunks) == len([c for c in chunks0 if c[2].startswith("SYSTEM")]) + 2
    out = T.run(["btrfs", "inspect-internal", "dump-super", "-f", str(imgs[0])]).stdout.decode()
    array = {int(x) for x in re.findall(r"item \d+ key \(FIRST_CHUNK_TREE CHUNK_ITEM (\d+)\)", out)}
    assert {c[0] for c in sys_chunks} <= array, (sys_chunks, array)
    # the engine opens it again (bootstrapping from the new array) and keeps working; so does the kernel
    r = run_driver(driver, "add", "s", 0, 300, 100, 2000, *imgs)
    assert r["enospc"] == 0
    with T.mounted(imgs, casedir / "mnt", readonly=False) as m:
        assert os.getxattr(m, "user.s0000123") == xattr_value("user.s0000123", 2000)
        with open(os.path.join(m, "k"), "wb") as f:
            f.write(b"k" * 300000)
            os.fsync(f.fileno())
    progs_check(imgs)
    space_layout(imgs)
    # the cleaner removes the empty SYSTEM chunks again: items, device extents and the
    # superblock's sys_chunk_array; what is left bootstraps btrfs check and the kernel
    r = run_driver(driver, "clean", *imgs)
    chunks2, _ = space_layout(imgs)
    sys2 = [c for c in chunks2 if c[2].startswith("SYSTEM")]
    assert len(sys2) < len(sys_chunks), (sys_chunks, sys2, r["out"][-800:])
    out = T.run(["btrfs", "inspect-internal", "dump-super", "-f", str(imgs[0])]).stdout.decode()
    array = {int(x) for x in re.findall(r"item \d+ key \(FIRST_CHUNK_TREE CHUNK_ITEM (\d+)\)", out)}
    assert array == {c[0] for c in sys2}, (sys2, array)
    progs_check(imgs)
    with T.mounted(imgs, casedir / "mnt", readonly=True) as m:
        assert open(os.path.join(m, "k"), "rb").read() == b"k" * 300000
