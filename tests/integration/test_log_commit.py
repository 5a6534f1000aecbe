# SPDX-License-Identifier: MIT
"""A read-write open replays the fsync log into the trees and commits it.

The crash images are test_fsync_log.py's scenarios (a baseline committed, a
change fsynced, the still-mounted image copied). On a copy of each, the write
engine's open (tests/tools/logcommit_driver) replays the log and commits;
then `btrfs check` must be clean, the superblock's log_root 0, and the
kernel's read-only view of the result must equal the kernel's view after its
own mount-time replay of another copy. A refused open (--no-replay, a corrupt
log) must leave the image byte for byte as it was. Item for item, the
inode items, file extents, data extents with their back references and the
checksums must be the kernel's. A crash anywhere in the replay's commit must
leave a disk that shows the fsynced state. Multi-device crash images (RAID1 over
2, RAID10 over 4, RAID5 over 3, mkfs.btrfs's) replay and commit alike, judged by
`btrfs check` and the kernel's view against its own replay.

CI: 8 representative scenarios, the refusals, test_hostile.py's four damaged
logs and the crash points of two replays: about 21 s with SAN=1, -n 2 on this
machine (allow 40 s loaded). Every scenario with UBTRFS_LONG_TESTS=1.
"""

import os
import random
import re
from pathlib import Path

import pytest

import fsynclog_lib as L
import test_fsync_log as F
import ubtrfs_testlib as T
# the crash images, built (and rebuilt until the log shows) as test_fsync_log.py builds them
from test_fsync_log import built  # noqa: F401 (a fixture)

CI_SCENARIOS = ("new_file", "overwrite_middle", "truncate_longer_then_write", "rename_over_existing",
                "unlink_fsync_parent", "hardlink_add", "xattrs", "subvolume")
LONG = os.environ.get("UBTRFS_LONG_TESTS") == "1"
NAMES = sorted(F.SCENARIOS) if LONG else list(CI_SCENARIOS)
COMMITTED = re.compile(rb"replayed the fsync log into the trees: (\d+) inodes?, (\d+) checksum runs?, "
                       rb"committed as transaction (\d+)")


def _group(name):
    return pytest.mark.xdist_group("logcommit-" + name)


PARAMS = [pytest.param(n, id=n, marks=_group(n)) for n in NAMES]


@pytest.fixture(scope="module")
def driver():
    return T.test_tool("logcommit_driver")


def _copy(b, name):
    dst = b.crash.workdir / name
    T.copy_sparse(b.crash.image, dst)
    return dst


def _check(image):
    cp = T.run(["btrfs", "check", "--readonly", str(image)], check=False, timeout=600)
    return cp.returncode, (cp.stdout + cp.stderr).decode("utf-8", "replace")


@pytest.mark.parametrize("name", PARAMS)
def test_rw_open_replays_and_commits(ubtrfs_bin, driver, built, name):
    b = built(name)
    before = L.image_digest(b.crash.image)
    img = _copy(b, "ub-replay.img")
    try:
        cp = T.run([driver, img], check=False)
        err = cp.stderr.decode("utf-8", "replace")
        assert cp.returncode == 0, "%s: the read-write open failed\n%s" % (name, err)
        m = COMMITTED.search(cp.stderr)
        assert m and int(m.group(1)) >= 1, "%s: no replay reported\n%s" % (name, err)
        assert int(m.group(3)) == b.crash.generation + 1, "%s: %s" % (name, m.group(0))
        sup = L.dump_super(img)
        assert int(sup.get("log_root", "-1")) == 0, "%s: log_root %s after the replay" % (name, sup.get("log_root"))
        assert int(sup.get("generation", "0")) == b.crash.generation + 1
        # the replay's commit wrote nowhere near the log: a crash during it would still find it whole
        blocks = _log_blocks(b.crash)
        assert blocks, "%s: no log tree blocks found in progs' dump" % name
        changed = [blk for blk in blocks for phys in _metadata_copies(img, blk)
                   if _read(img, phys, 4096) != _read(b.crash.image, phys, 4096)]
        assert not changed, "%s: the replay overwrote log tree blocks %r before giving them back" % (name, changed)
        rc, out = _check(img)
        assert rc == 0, "%s: btrfs check after the replay:\n%s" % (name, out[-3000:])
        got = T.kernel_view([img], b.crash.workdir / "mnt_ub")
        kv = b.replayed
        problems = L.compare(kv.entries, got.entries, L.BASE_KEYS)
        assert not problems, F._fail(b, "the kernel's view of ubtrfs' replay differs from its own replay", problems)
        problems = L.compare_times(kv.entries, got.entries, b.sc.timed)
        assert not problems, F._fail(b, "times differ from the kernel's replay", problems)
        assert got.hashes == kv.hashes, F._fail(b, "file contents differ from the kernel's replay", [
            "%r: kernel %r ubtrfs %r" % (p, kv.hashes.get(p), got.hashes.get(p))
            for p in sorted(set(kv.hashes) | set(got.hashes)) if kv.hashes.get(p) != got.hashes.get(p)][:20])
        # item for item: inode items, file extents, data extents with their back references, checksums
        problems = _compare_state(_tree_state(_kernel_replayed_copy(b)), _tree_state(img))
        assert not problems, F._fail(b, "the trees differ from the kernel's replay", problems)
        # a second open finds no log and writes nothing
        digest = L.image_digest(img)
        cp = T.run([driver, img], check=False)
        assert cp.returncode == 0 and not COMMITTED.search(cp.stderr), T.describe(cp)
        assert L.image_digest(img) == digest, "%s: an open without a log changed the image" % name
    finally:
        os.unlink(img)
    assert L.image_digest(b.crash.image) == before


ITEM = re.compile(r"^\titem \d+ key \((\S+) (\S+) (\S+)\) itemoff \d+ itemsize \d+$")
TREE = re.compile(r"^(?:fs|file|extent|checksum) tree key \((\S+) ROOT_ITEM")
INODE = re.compile(r"size (\d+) nbytes (\d+)\n\s*block group \d+ mode (\d+) links (\d+) uid (\d+) gid (\d+) "
                   r"rdev (\d+)\n\s*sequence \d+ flags (\S+)")


def _tree_state(image):
    """What a replay decides, from progs' dump of the subvolume, extent and csum trees:
    {("inode", tree, ino): fields, ("file extent", tree, ino, offset): item text,
     ("data extent", bytenr, len): refs and back references, ("csum", sector): checksum}."""
    text = T.run(["btrfs", "inspect-internal", "dump-tree", str(image)]).stdout.decode("utf-8", "replace")
    out, tree, key, body = {}, None, None, []

    def flush():
        if key is None or tree is None:
            return
        obj, typ, off = key
        b = "\n".join(body)
        if typ == "INODE_ITEM" and tree not in ("EXTENT_TREE", "CSUM_TREE"):
            m = INODE.search(b)
            out[("inode", tree, obj)] = m.groups() if m else b
        elif typ == "EXTENT_DATA":
            out[("file extent", tree, obj, off)] = b.strip()
        elif typ == "EXTENT_ITEM" and tree == "EXTENT_TREE" and "flags DATA" in b:
            # the generation an extent item was inserted in is each replay's own
            out[("data extent", obj, off)] = re.sub(r"gen \d+ ", "", b.strip())
        elif typ == "EXTENT_CSUM" and tree == "CSUM_TREE":
            for sector, csum in re.findall(r"\[(\d+)\] (0x[0-9a-f]+)", b):
                out[("csum", int(sector))] = csum

    for line in text.splitlines():
        m = TREE.match(line)
        if m:
            flush()
            tree, key, body = m.group(1), None, []
            continue
        m = ITEM.match(line)
        if m:
            flush()
            key, body = m.groups(), []
        elif line.startswith("\t\t"):
            body.append(line.strip())
        elif not line.startswith("\t"):
            flush()
            key, body = None, []
    flush()
    return out


def _compare_state(kernel, ours, limit=30):
    problems = ["%r: kernel %r, ubtrfs %r" % (k, kernel.get(k), ours.get(k))
                for k in sorted(set(kernel) | set(ours), key=repr) if kernel.get(k) != ours.get(k)]
    return problems[:limit] + (["... %d more" % (len(problems) - limit)] if len(problems) > limit else [])


def _kernel_replayed_copy(b):
    """A copy of the crash image after the kernel's own mount-time replay (mounted, unmounted)."""
    k = _copy(b, "kernel-replay-trees.img")
    with T.mounted([k], b.crash.workdir / "mnt_kreplay", options="noatime", readonly=False):
        pass
    return k


def _log_blocks(crash):
    """Every block of the log root tree and the log trees (progs' dump, nodes followed)."""
    return sorted({int(x) for x in re.findall(r"^(?:leaf|node) (\d+) ", crash.dump_log(), re.M)})


def _read(path, offset, length):
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(length)


def _metadata_copies(image, logical):
    """Physical offsets of every copy of the tree block at `logical` in a single-device
    SINGLE/DUP metadata chunk, from progs' chunk tree dump (btrfs-map-logical wants an
    extent item, which log tree blocks never have)."""
    cp = T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "chunk", str(image)])
    text = cp.stdout.decode("utf-8", "replace")
    for m in re.finditer(r"CHUNK_ITEM (\d+)\) itemoff \d+ itemsize \d+\n\s*length (\d+) .*?type (\S+)"
                         r"(.*?)(?=\n\s*item |\Z)", text, re.S):
        start, length = int(m.group(1)), int(m.group(2))
        if start <= logical < start + length:
            assert "RAID" not in m.group(3), m.group(3)
            return [int(o) + logical - start for o in re.findall(r"stripe \d+ devid \d+ offset (\d+)", m.group(4))]
    return []


@_group("overwrite_middle")
def test_refused_log_leaves_image_untouched(ubtrfs_bin, driver, built):
    b = built("overwrite_middle")
    img = _copy(b, "ub-refuse.img")
    try:
        digest = L.image_digest(img)
        cp = T.run([driver, "--no-replay", img], check=False)
        assert cp.returncode == 1 and b"pending fsync log" in cp.stderr, T.describe(cp)
        assert L.image_digest(img) == digest, "a refused open changed the image"
        # a log tree block that fails its checksum in every copy: refused, named, nothing written
        log_tree = sorted(b.crash.log_trees().values())[0]
        copies = _metadata_copies(img, log_tree)
        assert copies, "btrfs-map-logical found no copy of %d" % log_tree
        with open(img, "r+b") as f:
            for phys in copies:
                f.seek(phys + 200)
                byte = f.read(1)
                f.seek(phys + 200)
                f.write(bytes([byte[0] ^ 0xff]))
        digest = L.image_digest(img)
        cp = T.run([driver, img], check=False)
        err = cp.stderr.decode("utf-8", "replace")
        assert cp.returncode == 1, "%s: a corrupt log was accepted\n%s" % (img, err)
        assert "cannot be replayed" in err and "nothing written" in err, err
        assert L.image_digest(img) == digest, "a refused replay changed the image"
    finally:
        os.unlink(img)


# test_hostile.py's damaged logs (checksums valid, only the meaning wrong): the rw open refuses each
HOSTILE_LOGS = ("c_log_root_to_root_tree", "c_log_root_to_fs", "c_log_item_to_log_root", "c_log_item_to_fs")


@_group("overwrite_middle")
@pytest.mark.parametrize("case", HOSTILE_LOGS)
def test_hostile_log_refused(ubtrfs_bin, driver, built, case):
    import craft as C
    import test_hostile as H

    b = built("overwrite_middle")
    img = _copy(b, "ub-hostile.img")
    try:
        with C.Image(str(img)) as im:
            what = getattr(H, case)(None, im).what
        digest = L.image_digest(img)
        cp = T.run([driver, img], check=False)
        err = cp.stderr.decode("utf-8", "replace")
        assert cp.returncode == 1, "%s: the open accepted it\n%s" % (what, err)
        assert "cannot be replayed" in err and "nothing written" in err, "%s:\n%s" % (what, err)
        assert L.image_digest(img) == digest, "%s: a refused replay changed the image" % what
    finally:
        os.unlink(img)


@pytest.mark.parametrize("name", [pytest.param(n, id=n, marks=_group(n)) for n in ("overwrite_middle", "subvolume")])
def test_crash_during_replay(ubtrfs_bin, driver, built, name):
    """Every disk state a crash during the replay's commit can leave (at each flush, all or a
    random part of the unflushed writes landed) shows the fsynced state: the old superblock with
    its log still whole, or the new one without it."""
    b = built(name)
    work = _copy(b, "ub-crash-work.img")
    out = b.crash.workdir / "crashpt"
    made = []
    try:
        cp = T.run([driver, "crash", work, b.crash.image, out], check=False, timeout=600)
        assert cp.returncode == 0, T.describe(cp)
        points = [int(x) for x in cp.stdout.split()]
        assert len(points) >= 2, "%s: crash points %r" % (name, points)
        made = [Path("%s.%d%s.img" % (out, k, v)) for k in points for v in ("", ".v")]
        saw_old = saw_new = False
        for img in made:
            lr = int(L.dump_super(img).get("log_root", "-1"))
            assert lr in (0, b.crash.log_root), "%s: log_root %d" % (img.name, lr)
            saw_old |= lr != 0
            saw_new |= lr == 0
            ub = L.ubtrfs_view(img)
            problems = L.compare(b.replayed.entries, ub.entries, L.BASE_KEYS)
            assert not problems, F._fail(b, "crash point %s differs from the kernel's replay" % img.name, problems)
            problems = L.compare_contents(img, b.replayed.hashes)
            assert not problems, F._fail(b, "crash point %s: contents differ" % img.name, problems)
        assert saw_old and saw_new, "%s: crash points never/always had the new superblock" % name
    finally:
        for p in made + [work]:
            if os.path.exists(p):
                os.unlink(p)


# ---- multi-device crash images ----
# (profile, devices): the log's tree blocks and the fsynced data are mirrored, striped or carry parity
MULTI = (("raid1", 2), ("raid10", 4), ("raid5", 3))


def _multi_crash(work, profile, ndev):
    """mkfs.btrfs over ndev images, a committed baseline, then an fsynced change; every image is
    copied while the filesystem is still mounted (before the next commit). Returns the copies."""
    live = [work / ("live-%d.img" % i) for i in range(ndev)]
    for p in live:
        with open(p, "wb") as f:
            f.truncate(L.IMG_SIZE)
    T.run(["mkfs.btrfs", "-q", "-f", "-d", profile, "-m", profile] + [str(p) for p in live])
    crash = [work / ("crash-%d.img" % i) for i in range(ndev)]
    rng = random.Random(ndev)
    with T.mounted(live, work / "mnt_live", options="commit=%d" % L.COMMIT_INTERVAL, readonly=False) as mnt:
        mnt = Path(mnt)
        F._base_dirs(mnt, rng)
        L.write_file(mnt / "d" / "f", rng.randbytes(256 * 1024))
        L.fs_sync(mnt)
        # after the commit: a new file, an overwrite in the middle of a committed one, both fsynced
        L.write_file(mnt / "d" / "new", rng.randbytes(300 * 1024), fsync=True)
        fd = os.open(mnt / "d" / "f", os.O_WRONLY)
        try:
            os.pwrite(fd, rng.randbytes(10000), 100000)
            os.fsync(fd)
        finally:
            os.close(fd)
        for src, dst in zip(live, crash):
            T.copy_sparse(src, dst)
    for p in live:
        os.unlink(p)
    return crash


def _copies(work, crash, tag):
    out = [work / ("%s-%d.img" % (tag, i)) for i in range(len(crash))]
    for src, dst in zip(crash, out):
        T.copy_sparse(src, dst)
    return out


@pytest.mark.parametrize("profile,ndev", MULTI, ids=["%s-%d" % m for m in MULTI])
def test_rw_open_replays_multi_device(ubtrfs_bin, driver, tmp_path, profile, ndev):
    """The read-write open replays and commits a log written over several devices; then the
    kernel's view and `btrfs check` agree with the kernel's own replay of another copy."""
    from test_mkfs import Attached, check_clean

    # a commit between the fsync and the copy (a sync elsewhere on the machine) leaves no log: build again
    for attempt in range(F.BUILD_ATTEMPTS):
        crash = _multi_crash(tmp_path, profile, ndev)
        sup = L.dump_super(crash[0])
        if int(sup.get("log_root", "0")) != 0:
            break
        for p in crash:
            os.unlink(p)
    else:
        pytest.skip("%s: the kernel committed instead of logging (%d attempts)" % (profile, F.BUILD_ATTEMPTS))
    gen = int(sup.get("generation", "0"))
    kimg = _copies(tmp_path, crash, "kernel")
    with T.mounted(kimg, tmp_path / "mnt_kreplay", options="noatime", readonly=False) as mnt:
        entries = T.walk_tree(mnt)
        kv = T.KernelView(entries, T.hash_files(mnt, entries))
    assert int(L.dump_super(kimg[0]).get("log_root", "0")) == 0
    for p in kimg:
        os.unlink(p)
    img = _copies(tmp_path, crash, "ub")
    cp = T.run([driver] + [str(p) for p in img], check=False)
    err = cp.stderr.decode("utf-8", "replace")
    assert cp.returncode == 0, "%s: the read-write open failed\n%s" % (profile, err)
    m = COMMITTED.search(cp.stderr)
    assert m and int(m.group(1)) >= 1 and int(m.group(3)) == gen + 1, "%s: no replay reported\n%s" % (profile, err)
    for p in img:
        s = L.dump_super(p)
        assert int(s.get("log_root", "-1")) == 0 and int(s.get("generation", "0")) == gen + 1, (p.name, s)
    with Attached(img) as loops:
        check_clean(loops, "after ubtrfs replayed the %s log" % profile)
    got = T.kernel_view(img, tmp_path / "mnt_ub")
    problems = L.compare(kv.entries, got.entries, L.BASE_KEYS)
    assert not problems, "%s: the kernel's view of ubtrfs' replay differs from its own replay:\n%s" % (
        profile, "\n".join(problems))
    assert got.hashes == kv.hashes, "%s: contents differ: %r" % (profile, [
        p for p in sorted(set(kv.hashes) | set(got.hashes)) if kv.hashes.get(p) != got.hashes.get(p)])
    for p in img + crash:
        os.unlink(p)
