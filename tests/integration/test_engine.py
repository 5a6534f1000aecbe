# SPDX-License-Identifier: MIT
"""The write engine end to end: transactions and commits on images made by
mkfs.btrfs, judged by btrfs-progs and the kernel.

The driver (tests/tools/engine_driver.c, built against the library) creates
N empty files in the top directory of the FS tree through transactions,
committing every M files, then deletes some (leaves merge, the tree shrinks)
and commits again, in two more runs of the driver (so each run reopens what
the previous one committed). Afterwards:
  - `btrfs check --readonly` reports no error;
  - the kernel mounts it and lists exactly the expected names; it mounts it
    read-write too, writes a file, and the result still passes btrfs check
    (the kernel allocates from our free space tree and extent tree);
  - `ubtrfs ls` lists exactly the expected names;
  - the four backup roots hold the last four generations (btrfs-progs'
    dump-super is the reader);
  - crash safety: the driver records every device write and checks that no
    commit wrote over a block the previous superblock reaches (every tree
    walked from it, every copy), outside the superblock mirrors.

Also: snapshots (ub_tree_copy_root) sharing tree blocks and data extents
while both sides change (full back references, inline then keyed refs),
files with data deleted (data refs to zero, checksums out), aborted
transactions, crash cuts of recorded runs, one I/O error at points over a
run, a free space tree in bitmaps, and the read-write refusals.

Budget: about a minute under ASan; UBTRFS_LONG_TESTS=1 runs more files,
profiles, crash cuts and every I/O error point.
"""

import contextlib
import json
import os
import re
from pathlib import Path

import struct

import pytest

import ubtrfs_testlib as T

MiB = T.MiB
LONG = T.LONG_TESTS


@pytest.fixture(scope="module")
def driver():
    return T.test_tool("engine_driver")


@pytest.fixture
def casedir(scratch, request):
    d = Path(scratch) / ("engine-" + re.sub(r"[^A-Za-z0-9_.-]", "_", request.node.name))
    d.mkdir(parents=True, exist_ok=True)
    yield d
    if os.environ.get("UBTRFS_KEEP_IMAGES") != "1":
        T.rmtree(d)


def head_bytes(img, n=2 * MiB):
    with open(img, "rb") as f:
        return f.read(n)


def make_images(d, ndev, size=256 * MiB):
    imgs = []
    for i in range(ndev):
        p = d / ("dev%d.img" % i)
        with open(p, "wb") as f:
            f.truncate(size)
        imgs.append(p)
    return imgs


def mkfs(imgs, meta, data, nodesize, extra=()):
    T.run(["mkfs.btrfs", "-f", "-q", "-K", "-m", meta, "-d", data, "-n", str(nodesize), *extra, *imgs])


def run_driver(driver, *args):
    cp = T.run([driver, *[str(a) for a in args]], check=False, timeout=900)
    out = cp.stdout.decode("utf-8", "replace")
    err = cp.stderr.decode("utf-8", "replace")
    assert cp.returncode == 0, "engine_driver %s failed (%d)\nstdout: %s\nstderr: %s" % (
        " ".join(str(a) for a in args), cp.returncode, out[-2000:], err[-4000:])
    m = re.search(r"generation (\d+) commits (\d+) writes_checked (\d+) violations (\d+) aborts \d+", out)
    assert m, out
    gen, commits, checked, violations = (int(x) for x in m.groups())
    assert violations == 0, err
    return gen, commits, checked


@contextlib.contextmanager
def progs_devices(imgs):
    """What to hand btrfs-progs: [the image], or read-only loop devices it found by scan (first is the target)."""
    loops = []
    try:
        if len(imgs) == 1:
            yield [str(imgs[0])]
            return
        for img in imgs:
            loops.append(T.losetup_attach(img, True))
        T.run(["btrfs", "device", "scan", *loops], check=False)
        yield loops
    finally:
        for dev in loops:
            T.losetup_detach(dev)


@contextlib.contextmanager
def progs_target(imgs):
    with progs_devices(imgs) as devs:
        yield devs[0]


def progs_check(imgs, data=False):
    with progs_devices(imgs) as devs:
        cp = T.run(["btrfs", "check", "--readonly", *(["--check-data-csum"] if data else []), devs[0]],
                   check=False, timeout=600)
    text = (cp.stdout + cp.stderr).decode("utf-8", "replace")
    # other tests attach and detach loop devices all the time: check's scan of every block device may
    # trip over one of theirs, which says nothing about ours
    errors = []
    for ln in text.splitlines():
        m = re.match(r"ERROR: cannot (?:scan|open) (/dev/\S+?):", ln)
        if m and m.group(1) not in devs:
            continue
        if re.match(r"(ERROR|error)", ln):
            errors.append(ln)
    assert cp.returncode == 0 and not errors and "no error found" in text, \
        "btrfs check found errors:\n" + text[-6000:]
    return text


def fs_tree_level(imgs):
    with progs_target(imgs) as target:
        out = T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "root", target]).stdout.decode()
    m = re.search(r"\(FS_TREE ROOT_ITEM 0\).*?\blevel (\d+) generation_v2", out, re.S)
    assert m, out[:3000]
    return int(m.group(1))


def backup_generations(img):
    out = T.run(["btrfs", "inspect-internal", "dump-super", "-f", img]).stdout.decode()
    gen = int(re.search(r"^generation\s+(\d+)", out, re.M).group(1))
    backups = [int(x) for x in re.findall(r"backup_tree_root:\s+\d+\s+gen:\s+(\d+)", out)]
    return gen, backups


def kernel_names(imgs, mnt, readonly=True):
    with T.mounted(imgs, mnt, readonly=readonly) as m:
        names = set(os.listdir(m))
        if not readonly:
            with open(os.path.join(m, "kernel-wrote-this"), "wb") as f:
                f.write(b"x" * 10000)
                os.fsync(f.fileno())
    return names


def ubtrfs_names(imgs):
    cp = T.ubtrfs("ls", "--json", *imgs)
    assert cp.returncode == 0, T.describe(cp)
    names = set()
    for line in cp.stdout.decode("utf-8").splitlines():
        if line.strip():
            names.add(json.loads(line)["name"])
    return names


# name, metadata profile, data profile, devices, nodesize, files, commit every
CASES = [
    ("dup-4k", "dup", "single", 1, 4096, 5000, 700),
    ("raid1-16k", "raid1", "raid1", 2, 16384, 3000, 600),
    ("raid10-4k", "raid10", "raid10", 4, 4096, 3000, 800),
    ("raid5-16k", "raid5", "raid5", 3, 16384, 2000, 500),
    ("raid6-4k", "raid6", "raid6", 4, 4096, 2000, 500),
]
# (no chunk is added in this round: the runs fit the metadata block group mkfs makes)
if LONG:
    CASES += [
        ("single-16k-long", "single", "single", 1, 16384, 3000, 1000),
        ("raid1c3-4k-long", "raid1c3", "raid1c3", 3, 4096, 30000, 3000),
        ("dup-64k-long", "dup", "single", 1, 65536, 20000, 2000),
        ("dup-4k-long", "dup", "single", 1, 4096, 30000, 997),
    ]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_create_delete_commit(driver, casedir, ubtrfs_bin, case):
    name, meta, data, ndev, nodesize, nfiles, every = case
    imgs = make_images(casedir, ndev)
    mkfs(imgs, meta, data, nodesize)
    gen0, _ = backup_generations(imgs[0])

    gen1, commits1, checked1 = run_driver(driver, "--check-writes", "create", "f", nfiles, every, *imgs)
    assert commits1 == -(-nfiles // every)
    assert gen1 == gen0 + commits1
    assert checked1 > 0
    expect = {"f%06d" % i for i in range(nfiles)}
    if nodesize == 4096 and nfiles >= 5000:
        assert fs_tree_level(imgs) >= 2, "the FS tree did not grow to three levels"
    elif nodesize == 4096:
        assert fs_tree_level(imgs) >= 1

    # every third name, then a contiguous run: leaves empty out and merge
    gen2, commits2, _ = run_driver(driver, "--check-writes", "delete", "f", 0, nfiles, 3, every // 2, *imgs)
    expect -= {"f%06d" % i for i in range(0, nfiles, 3)}
    # then what is left of a contiguous run (the names that are not multiples of 3)
    lo, hi = nfiles // 4, nfiles // 2
    commits3 = 0
    for first in (lo + (1 - lo) % 3, lo + (2 - lo) % 3):
        gen3, c, _ = run_driver(driver, "--check-writes", "delete", "f", first, hi, 3, every // 3, *imgs)
        commits3 += c
    expect -= {"f%06d" % i for i in range(lo, hi)}
    assert gen3 == gen1 + commits2 + commits3

    # the superblock's four backup slots: the last four commits
    gen, backups = backup_generations(imgs[0])
    assert gen == gen3
    assert sorted(backups) == list(range(gen - 3, gen + 1)), backups

    progs_check(imgs)
    assert kernel_names(imgs, casedir / "mnt") == expect
    assert ubtrfs_names(imgs) == expect
    # the kernel writes through our extent tree and free space tree, and check still agrees
    assert kernel_names(imgs, casedir / "mnt", readonly=False) == expect
    progs_check(imgs)


def tree_bytes(imgs):
    text = progs_check(imgs)
    return int(re.search(r"total fs tree bytes: (\d+)", text).group(1))


SNAP_CASES = [("dup", 1, 4096)] + ([("raid1", 2, 16384)] if LONG else [])


@pytest.mark.parametrize("case", SNAP_CASES, ids=["dup-4k", "raid1-16k"][:len(SNAP_CASES)])
def test_snapshot_shares_then_diverges(driver, casedir, ubtrfs_bin, case):
    """A snapshot (ub_tree_copy_root) shares the FS tree; changing either side copies the shared blocks
    with full back references (update_ref_for_cow), and btrfs check verifies every reference count."""
    meta, ndev, nodesize = case
    imgs = make_images(casedir, ndev)
    mkfs(imgs, meta, meta if ndev > 1 else "single", nodesize)
    n = 3000 if nodesize == 4096 else 6000
    run_driver(driver, "create", "f", n, 1000, *imgs)
    before = tree_bytes(imgs)
    assert fs_tree_level(imgs) >= 1
    _, commits, written = run_driver(driver, "--check-writes", "snapshot", "snap", *imgs)
    assert commits == 1
    # a handful of blocks (root copy, root tree, extent tree, free space tree, uuid tree path), every copy:
    # not a copy of the tree
    copies = 2
    assert written <= copies * 24 < before // nodesize, (written, before)
    progs_check(imgs)
    top = {"f%06d" % i for i in range(n)}
    snap = set(top)
    # the source changes: shared blocks are copied with full back references
    run_driver(driver, "--check-writes", "delete", "f", 0, n, 2, 400, *imgs)
    run_driver(driver, "--check-writes", "create", "h", 500, 250, *imgs)
    top = (top - {"f%06d" % i for i in range(0, n, 2)}) | {"h%06d" % i for i in range(500)}
    progs_check(imgs)
    # then the snapshot (tree 256) changes too: blocks shared only through full back refs are handed over
    run_driver(driver, "--check-writes", "--subvol", "256", "delete", "f", 1, n, 2, 400, *imgs)
    run_driver(driver, "--check-writes", "--subvol", "256", "create", "s", 700, 350, *imgs)
    snap = (snap - {"f%06d" % i for i in range(1, n, 2)}) | {"s%06d" % i for i in range(700)}
    progs_check(imgs)
    with T.mounted(imgs, casedir / "mnt") as m:
        assert set(os.listdir(m)) == top | {"snap"}
        assert set(os.listdir(os.path.join(m, "snap"))) == snap
    assert ubtrfs_names(imgs) == top | {"snap"}
    with T.mounted(imgs, casedir / "mnt", readonly=False) as m:
        with open(os.path.join(m, "snap", "kernel-wrote-this"), "wb") as f:
            f.write(b"y" * 20000)
        os.unlink(os.path.join(m, "h000001"))
    progs_check(imgs)


def test_abort_leaves_last_commit(driver, casedir, ubtrfs_bin):
    """Every third transaction aborted: none of its changes reach the disk, the next one starts from the
    last commit (tree roots, allocator, reference queue all back), and the result is consistent."""
    imgs = make_images(casedir, 1)
    mkfs(imgs, "dup", "single", 4096)
    n, every = 3000, 250
    gen0, _ = backup_generations(imgs[0])
    gen, commits, _ = run_driver(driver, "--check-writes", "--abort-every", 3, "create", "f", n, every, *imgs)
    ntxn = -(-n // every)
    assert commits == ntxn - ntxn // 3 and gen == gen0 + commits
    expect = {"f%06d" % i for i in range(n) if (i // every + 1) % 3}
    # deletes: one transaction per 100 names that exist, every third aborted
    run_driver(driver, "--check-writes", "--abort-every", 3, "--missing-ok", "delete", "f", 1, n, 3, 100, *imgs)
    ops = 0
    for i in range(1, n, 3):
        if "f%06d" % i in expect:
            ops += 1
            if ((ops - 1) // 100 + 1) % 3:
                expect.discard("f%06d" % i)
    progs_check(imgs)
    assert kernel_names(imgs, casedir / "mnt") == expect
    assert ubtrfs_names(imgs) == expect


def test_snapshots_share_data_extents(driver, casedir, ubtrfs_bin):
    """Data extents written by mkfs --rootdir, then snapshot after snapshot with the source changing in
    between: leaves holding file extents are copied with full back references (SHARED_DATA_REF inline,
    then keyed once the extent item is full), then every snapshot changes too and the references are
    handed back (EXTENT_DATA_REF per tree, keyed past the inline limit). btrfs check counts them all; the
    kernel reads every file back in the top directory and in snapshots."""
    src = casedir / "src"
    src.mkdir()
    rnd = __import__("random").Random(7)
    nsrc = 120
    content = {}
    for i in range(nsrc):
        data = bytes(rnd.getrandbits(8) for _ in range(8192 + (i % 4) * 4096))
        (src / ("d%06d" % i)).write_bytes(data)
        content["d%06d" % i] = data
    imgs = make_images(casedir, 1)
    mkfs(imgs, "dup", "single", 4096, extra=["--rootdir", str(src)])
    rounds = 24 if LONG else 15
    run_driver(driver, "--check-writes", "snapcycle", "s", rounds, 150, *imgs)
    text = progs_check(imgs)
    with progs_target(imgs) as target:
        dump = T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "extent", target]).stdout.decode()
    assert "shared data backref" in dump or " SHARED_DATA_REF " in dump, "no leaf was copied with full back refs"
    assert re.search(r"key \(\d+ SHARED_DATA_REF \d+\)", dump), "no extent item filled up to keyed refs"
    # every snapshot changes: the full back references go, one EXTENT_DATA_REF per tree comes
    run_driver(driver, "--check-writes", "subvols-create", "x", 256, 255 + rounds, 200, *imgs)
    text = progs_check(imgs)
    with progs_target(imgs) as target:
        dump = T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "extent", target]).stdout.decode()
    assert re.search(r"key \(\d+ EXTENT_DATA_REF \d+\)", dump), "no keyed EXTENT_DATA_REF"
    # files with data go: from the top directory (the snapshots keep the extents) and, in one snapshot,
    # the others too; extents no tree uses any more are freed with their checksums
    run_driver(driver, "--check-writes", "delete", "d", 0, nsrc, 2, 40, *imgs)
    run_driver(driver, "--check-writes", "--subvol", 256, "delete", "d", 1, nsrc, 2, 40, *imgs)
    progs_check(imgs, data=True)
    gone_top = {"d%06d" % i for i in range(0, nsrc, 2)}
    gone_s1 = {"d%06d" % i for i in range(1, nsrc, 2)}
    with T.mounted(imgs, casedir / "mnt") as m:
        for where, gone in [("", gone_top), ("s1", gone_s1), ("s%d" % (rounds // 2), set()),
                            ("s%d" % rounds, set())]:
            d = os.path.join(m, where)
            names = set(os.listdir(d))
            assert set(content) - gone <= names and not gone & names, where
            assert {"x%06d" % i for i in range(200)} <= names or where == ""
            for name, data in content.items():
                if name not in gone:
                    with open(os.path.join(d, name), "rb") as f:
                        assert f.read() == data, (where, name)
    del text


def test_delete_files_with_data(driver, casedir, ubtrfs_bin):
    """Files written by mkfs --rootdir deleted through the engine: file extent items go, the data
    references drop to zero, extent items and checksums (cut out of items shared with other extents)
    go, the space comes back to the free space tree. btrfs check verifies data checksums too."""
    src = casedir / "src"
    src.mkdir()
    rnd = __import__("random").Random(11)
    content = {}
    for i in range(160):
        data = bytes(rnd.getrandbits(8) for _ in range(4096 * (1 + i % 5) + (i % 3) * 100))
        (src / ("d%06d" % i)).write_bytes(data)
        content["d%06d" % i] = data
    imgs = make_images(casedir, 1)
    mkfs(imgs, "dup", "single", 4096, extra=["--rootdir", str(src)])
    run_driver(driver, "--check-writes", "delete", "d", 0, 160, 3, 25, *imgs)
    run_driver(driver, "--check-writes", "delete", "d", 1, 160, 3, 25, *imgs)
    progs_check(imgs, data=True)
    left = {"d%06d" % i for i in range(2, 160, 3)}
    with T.mounted(imgs, casedir / "mnt", readonly=False) as m:
        assert set(os.listdir(m)) == left
        for name in left:
            with open(os.path.join(m, name), "rb") as f:
                assert f.read() == content[name], name
        # the kernel reuses the freed space and check still agrees
        with open(os.path.join(m, "new"), "wb") as f:
            f.write(b"n" * (3 << 20))
    progs_check(imgs, data=True)


def super_generation(img, mirror=0):
    """Generation of superblock copy `mirror` (None when the image is too small or it is no superblock)."""
    off = (64 << 10, 64 << 20, 256 << 30)[mirror]
    with open(img, "rb") as f:
        f.seek(off)
        sb = f.read(4096)
    if len(sb) < 4096 or sb[0x40:0x48] != b"_BHRfS_M":
        return None
    return struct.unpack_from("<Q", sb, 0x48)[0]


CRASH_CASES = [("dup", "single", 1, 4096)] + ([("raid1", "raid1", 2, 16384)] if LONG else [])


@pytest.mark.parametrize("case", CRASH_CASES, ids=["dup-4k", "raid1-16k"][:len(CRASH_CASES)])
def test_crash_points(driver, casedir, ubtrfs_bin, case):
    """Writes and flushes recorded (lib/dev's recorder); images cut at points spread over the run, with
    the pending writes of each cut kept, dropped and reordered by a seed. Each must pass btrfs check
    and hold exactly one commit's names: the generation its superblock names."""
    meta, data, ndev, nodesize = case
    imgs = make_images(casedir, ndev)
    mkfs(imgs, meta, data, nodesize)
    gen0 = super_generation(imgs[0])
    n, every = (1200, 150) if nodesize == 4096 else (1600, 200)
    cuts = 120 if LONG else (12 if ndev == 1 else 8)
    crash = casedir / "crash"
    crash.mkdir()
    cp = T.run([driver, "--crash-dir", crash, "--crash-cuts", cuts, "create", "f", n, every, *imgs],
               check=False, timeout=900)
    assert cp.returncode == 0, cp.stderr.decode()[-3000:]
    assert len(re.findall(r"^cut \d+ ", cp.stdout.decode(), re.M)) == cuts
    ncommits = n // every
    state = {gen0 + j: {"f%06d" % i for i in range(j * every)} for j in range(ncommits + 1)}
    seen = set()
    for c in range(cuts):
        cut = [crash / ("cut%d_dev%d.img" % (c, d)) for d in range(ndev)]
        # the kernel and btrfs-progs read the primary copies; ubtrfs the newest valid copy of any
        # mirror: a cut between mirror writes is either commit, each whole
        primary = {super_generation(x) for x in cut}
        gens = {super_generation(x, m) for x in cut for m in range(3)} - {None}
        assert gens <= set(state), gens
        progs_check(cut)
        names = ubtrfs_names(cut)
        assert any(names == state[g] for g in gens), (c, gens, len(names))
        seen |= gens
        if c in (cuts // 3, cuts - 1):
            assert any(kernel_names(cut, casedir / "mnt") == state[g] for g in primary), (c, primary)
        for x in cut:
            x.unlink()
    # the cuts saw the start, the end and commits in between
    assert {gen0, gen0 + ncommits} <= seen and len(seen) >= 3, seen


def test_io_errors(driver, casedir, ubtrfs_bin):
    """One write or flush fails (lib/dev's faulty device), at points spread over a run of three commits
    (every one of them with UBTRFS_LONG_TESTS=1): the commit fails with the error, the engine stops, and
    the image passes btrfs check holding exactly one commit's names."""
    base = make_images(casedir, 1)[0]
    mkfs([base], "dup", "single", 4096)
    gen0 = super_generation(base)
    n, every = 300, 100
    state = {gen0 + j: {"f%06d" % i for i in range(j * every)} for j in range(n // every + 1)}
    work = casedir / "work.img"
    T.run(["cp", "--sparse=always", base, work])
    cp = T.run([driver, "--fault", 0, "create", "f", n, every, work])
    reads, writes, flushes, _ = (int(x) for x in re.search(r"^io (\d+) (\d+) (\d+) injected (\d+)",
                                                            cp.stdout.decode(), re.M).groups())
    total = writes + flushes
    points = range(1, total + 1) if LONG else sorted({1, 2, total // 2, total - 1, total} |
                                                     set(range(3, total, max(1, total // 5))))
    seen = set()
    for nth in points:
        T.run(["cp", "--sparse=always", base, work])
        cp = T.run([driver, "--fault", nth, "create", "f", n, every, work], check=False)
        err = cp.stderr.decode("utf-8", "replace")
        assert cp.returncode == 1, (nth, err[-2000:])
        assert "Input/output error" in err and "injected 1" in cp.stdout.decode(), (nth, err[-2000:])
        gen = super_generation(work)
        assert gen in state, (nth, gen)
        progs_check([work])
        assert ubtrfs_names([work]) == state[gen], (nth, gen)
        seen.add(gen)
    assert len(seen) >= 2, seen


def fst_infos(imgs):
    with progs_target(imgs) as target:
        out = T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "10", target]).stdout.decode()
    return {int(m.group(1)): (int(m.group(2)), int(m.group(3))) for m in re.finditer(
        r"key \((\d+) FREE_SPACE_INFO \d+\).*?\n\s*free space info extent count (\d+) flags (\d+)", out)}


def test_free_space_bitmaps(driver, casedir, ubtrfs_bin):
    """The kernel fragments the metadata block group until its free space tree uses bitmaps; the engine's
    next changes there rewrite it as extents (both forms are valid; check and the kernel judge)."""
    imgs = make_images(casedir, 1)
    mkfs(imgs, "dup", "single", 4096)
    with T.mounted(imgs, casedir / "mnt", readonly=False) as m:
        for i in range(4000):
            with open(os.path.join(m, "k%06d" % i), "wb") as f:
                f.write(b"z" * 1500)
        os.sync()
        for i in range(0, 4000, 2):
            os.unlink(os.path.join(m, "k%06d" % i))
    bitmapped = {bg for bg, (_, flags) in fst_infos(imgs).items() if flags & 1}
    if not bitmapped:
        pytest.skip("the kernel did not switch any block group to bitmaps")
    run_driver(driver, "--check-writes", "create", "f", 1500, 300, *imgs)
    after = fst_infos(imgs)
    converted = {bg for bg in bitmapped if not after[bg][1] & 1}
    assert converted, "no bitmap block group was touched (engine metadata went elsewhere)"
    progs_check(imgs)
    expect = {"k%06d" % i for i in range(1, 4000, 2)} | {"f%06d" % i for i in range(1500)}
    assert kernel_names(imgs, casedir / "mnt", readonly=False) == expect
    progs_check(imgs)


def test_everything_deleted_shrinks_back(driver, casedir, ubtrfs_bin):
    """All files created, then all deleted: the tree shrinks back to one leaf; check and kernel agree."""
    imgs = make_images(casedir, 1)
    mkfs(imgs, "dup", "single", 4096)
    run_driver(driver, "--check-writes", "create", "g", 1500, 400, *imgs)
    assert fs_tree_level(imgs) >= 1
    run_driver(driver, "--check-writes", "delete", "g", 0, 1500, 1, 300, *imgs)
    assert fs_tree_level(imgs) == 0
    progs_check(imgs)
    assert kernel_names(imgs, casedir / "mnt") == set()
    assert ubtrfs_names(imgs) == set()


@pytest.mark.parametrize("feature,needle", [
    (["-O", "block-group-tree"], "block group tree"),
    (["-R", "quota"], "quotas"),
    (["-O", "mixed-bg", "-m", "single", "-d", "single", "-n", "4096"], "mixed"),
])
def test_refuses_unsupported_features(driver, casedir, feature, needle):
    imgs = make_images(casedir, 1)
    cp = T.run(["mkfs.btrfs", "-f", "-q", *feature, *imgs], check=False)
    if cp.returncode != 0:
        pytest.skip("mkfs.btrfs cannot make %s: %s" % (feature, cp.stderr.decode()[-300:]))
    before = head_bytes(imgs[0])
    cp = T.run([driver, "open", *imgs], check=False)
    err = cp.stderr.decode("utf-8", "replace")
    assert cp.returncode == 2, err
    assert needle in err, err
    # nothing written
    assert head_bytes(imgs[0]) == before


# superblock field offsets (struct btrfs_super_block)
SB_FLAGS, SB_LOG_ROOT, SB_COMPAT_RO, SB_INCOMPAT = 0x38, 0x60, 0xB4, 0xBC


def patch_super(img, offset, value):
    """Set a u64 of every superblock copy in the image, checksum (crc32c) recomputed."""
    with open(img, "r+b") as f:
        size = os.fstat(f.fileno()).st_size
        for mirror in (64 << 10, 64 << 20, 256 << 30):
            if mirror + 4096 > size:
                break
            f.seek(mirror)
            sb = bytearray(f.read(4096))
            struct.pack_into("<Q", sb, offset, value)
            struct.pack_into("<I", sb, 0, T.crc32c(bytes(sb[32:])))
            sb[4:32] = bytes(28)
            f.seek(mirror)
            f.write(sb)


@pytest.mark.parametrize("what,offset,bits,needle", [
    ("block-group-tree", SB_COMPAT_RO, 1 << 3, "block group tree"),
    ("unknown-compat-ro", SB_COMPAT_RO, 1 << 40, "0x10000000000"),
    ("unknown-incompat", SB_INCOMPAT, 1 << 50, "0x4000000000000"),
    ("raid-stripe-tree", SB_INCOMPAT, 1 << 14, "raid-stripe"),
    ("extent-tree-v2", SB_INCOMPAT, 1 << 13, "extent-tree-v2"),
    ("seed", SB_FLAGS, 1 << 32, "seed"),
    ("log", SB_LOG_ROOT, 0, "fsync log"),
])
def test_refuses_patched_superblock(driver, casedir, what, offset, bits, needle):
    """Bits mkfs.btrfs 6.2 cannot set: patched into every superblock copy (checksum fixed)."""
    imgs = make_images(casedir, 1)
    mkfs(imgs, "dup", "single", 4096)
    with open(imgs[0], "rb") as f:
        f.seek(64 << 10)
        sb = f.read(4096)
    if what == "log":
        # a log root pointing at the root tree's block: any nonzero value is a pending log
        value = struct.unpack_from("<Q", sb, 0x50)[0]
    else:
        value = struct.unpack_from("<Q", sb, offset)[0] | bits
    patch_super(imgs[0], offset, value)
    # our own reader still takes the patched superblock: the refusal is the engine's, not a checksum error
    before = head_bytes(imgs[0])
    cp = T.run([driver, "open", *imgs], check=False)
    err = cp.stderr.decode("utf-8", "replace")
    assert cp.returncode == 2, err
    assert needle in err, err
    assert "checksum" not in err, err
    assert head_bytes(imgs[0]) == before
