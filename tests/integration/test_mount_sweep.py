# SPDX-License-Identifier: MIT
"""The mount against what the kernel and the other commands do, on states found in the
correctness sweep (issue 28):

  * st_blocks of inodes the in-memory fsync log replay changed: the log's inode items carry a
    stale nbytes; the kernel's replay keeps the committed one and counts the extents it drops and
    adds. Oracle: the kernel's own replay of a copy of the same crash image.
  * a directory entry whose inode cannot be read: readdirplus lists the entries after it too.
  * directory loops and second names of directories: refused as ls -R and restore refuse them.
  * names in the mount's log are escaped as check escapes them.
"""

import errno
import os
import random
import re
import struct
import time
from pathlib import Path

import pytest

import fsynclog_lib as L
import test_names_dirs as N
import ubtrfs_testlib as T
from test_mount import fuse_mounted
from test_names_dirs import base  # noqa: F401 (a fixture: the small images with their leaves mapped)

SECTOR = 4096
BLOCKS_ATTEMPTS = 3


# ---------------------------------------------------------------- st_blocks after the log replay

def _blocks_baseline(m):
    rng = random.Random(28)
    L.write_file(m / "old", rng.randbytes(300000))
    L.write_file(m / "trunc", rng.randbytes(200000))
    L.write_file(m / "punch", rng.randbytes(200000))
    L.write_file(m / "same", rng.randbytes(50000))


def _blocks_action(m):
    rng = random.Random(29)
    # a new file, and a new inline one
    L.write_file(m / "new", rng.randbytes(100000), fsync=True)
    L.write_file(m / "inline", b"q" * 300, fsync=True)
    # an old file rewritten in the middle and extended past a hole
    with open(m / "old", "r+b") as f:
        f.seek(50000)
        f.write(rng.randbytes(20000))
        f.seek(400000)
        f.write(b"y" * 5000)
        f.flush()
        os.fsync(f.fileno())
    # truncated, a hole punched, preallocated space partly written
    os.truncate(m / "trunc", 50000)
    L.fsync_path(m / "trunc")
    fd = os.open(m / "punch", os.O_RDWR)
    try:
        T.fallocate(fd, 3, 2 * SECTOR, 10 * SECTOR)  # FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE
        os.fsync(fd)
    finally:
        os.close(fd)
    fd = os.open(m / "prealloc", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        T.fallocate(fd, 0, 0, 16 * SECTOR)
        os.write(fd, b"z" * 1000)
        os.fsync(fd)
    finally:
        os.close(fd)
    # an old file only touched (its extents logged unchanged), and a new symlink
    os.utime(m / "same", ns=(10**18, 10**18))
    L.fsync_path(m / "same")
    os.symlink("target" * 10, m / "sym")
    L.fsync_path(m)


LOG_INODE = re.compile(r"key \((\d+) INODE_ITEM 0\) itemoff \d+ itemsize \d+\n\s*generation \d+ transid \d+ "
                       r"size \d+ nbytes (\d+)")


def _log_nbytes(crash):
    """{inode: nbytes} of the inode items in the fsync log."""
    return {int(i): int(n) for i, n in LOG_INODE.findall(crash.dump_log())}


def _kernel_blocks(crash):
    """{name: (ino, st_blocks)} of the top directory after the kernel's replay of a copy."""
    k = crash.workdir / "kernel-replay.img"
    T.copy_sparse(crash.image, k)
    try:
        with T.mounted([k], crash.workdir / "mnt_replay", options="noatime", readonly=False) as mnt:
            return {n: (os.lstat(os.path.join(mnt, n)).st_ino, os.lstat(os.path.join(mnt, n)).st_blocks)
                    for n in os.listdir(mnt)}
    finally:
        os.unlink(k)


@pytest.fixture(scope="module")
def blocks_crash(scratch):
    """A crash image whose log holds inode items with an nbytes the kernel's replay does not keep."""
    base = Path(scratch) / "mount_sweep_blocks"
    why = None
    for attempt in range(BLOCKS_ATTEMPTS):
        T.rmtree(base)
        crash = L.make_crash(base, _blocks_baseline, _blocks_action)
        if crash.log_root == 0:
            why = "the kernel committed instead of logging"
            continue
        if len(set(L.super_generations(crash.image))) > 1:
            why = "the copy caught a commit half way"
            continue
        kernel = _kernel_blocks(crash)
        logged = _log_nbytes(crash)
        stale = [n for n, (ino, blocks) in kernel.items()
                 if ino in logged and (logged[ino] + SECTOR - 1) // SECTOR * SECTOR // 512 != blocks]
        if not stale:
            why = "every logged inode item carries the nbytes the kernel's replay ends with"
            continue
        yield crash, kernel, stale
        break
    else:
        pytest.skip("setup did not reach its state: %s (%d attempts)" % (why, BLOCKS_ATTEMPTS))
    L.remove_workdir(base)


def test_st_blocks_after_log_replay(ubtrfs_bin, factory, blocks_crash):
    crash, kernel, stale = blocks_crash
    with fuse_mounted(ubtrfs_bin, [crash.image], factory.mountpoint()) as mnt:
        got = {n: os.lstat(os.path.join(mnt, n)).st_blocks for n in os.listdir(mnt)}
    assert sorted(got) == sorted(kernel), "entries differ: kernel %r mount %r" % (sorted(kernel), sorted(got))
    diff = ["%s: kernel %d mount %d" % (n, kernel[n][1], got[n]) for n in sorted(kernel) if got[n] != kernel[n][1]]
    assert not diff, "st_blocks differ from the kernel's replay (stale in the log: %s):\n  %s" % (
        ", ".join(sorted(stale)), "\n  ".join(diff))


# ---------------------------------------------------------------- damaged directories

WALK_LIMIT = 20000   # entries: the clean tree has fewer than 100
WALK_SECONDS = 60


def _walk(mnt):
    """Every path under the mount (bytes, "/"-rooted) and the errors met, depth first as find
    goes; a walk that meets more than WALK_LIMIT entries or runs past WALK_SECONDS is cut."""
    paths, errors, stack = [], [], [b""]
    deadline = time.monotonic() + WALK_SECONDS
    top = os.fsencode(str(mnt))
    while stack:
        rel = stack.pop()
        try:
            with os.scandir(top + rel) as it:
                for de in it:
                    p = rel + b"/" + de.name
                    paths.append(p)
                    assert len(paths) <= WALK_LIMIT and time.monotonic() < deadline, \
                        "the walk does not end: %d entries, e.g. %r" % (len(paths), paths[-3:])
                    try:
                        if de.is_dir(follow_symlinks=False):
                            stack.append(p)
                    except OSError as e:
                        errors.append((p, e.errno))
        except OSError as e:
            errors.append((rel, e.errno))
    return paths, errors


def _ls_paths(img):
    """The paths `ubtrfs ls -R` lists (bytes), and its stderr."""
    cp = T.ubtrfs("ls", "-R", img, timeout=N.TIMEOUT)
    assert cp.returncode in (0, 1), T.describe(cp)
    return set(p for p in cp.stdout.split(b"\n") if p), cp.stderr.decode("utf-8", "replace")


def _no_raw_names(log):
    """Names in the log come escaped: no byte outside printable ASCII (but the line ends)."""
    raw = sorted(set(c for c in log.encode("utf-8", "surrogateescape") if (c < 0x20 and c != 0x0a) or c >= 0x7f))
    assert not raw, "the mount's log holds raw bytes %r" % raw


@pytest.mark.parametrize("case", ["dir-alias-sibling", "dir-alias-ancestor", "dir-chain-twins"])
def test_directory_second_names_refused(ubtrfs_bin, factory, base, case):
    """A directory reached through a second name (a sibling's, one inside itself, a chain of
    twins) is not served: the mount shows the tree ls -R shows, a walk ends, the log says why."""
    img, info = N.hostile(base, case)
    try:
        expected, ls_err = _ls_paths(img)
        into, name = info["alias"]
        alias = b"/%s/%s" % (into, name)
        assert alias not in expected and "another name" in ls_err, "test setup: ls -R " + ls_err
        log = []
        with fuse_mounted(ubtrfs_bin, [img], factory.mountpoint(), log=log) as mnt:
            paths, errors = _walk(mnt)
            with pytest.raises(OSError) as e:
                os.lstat(os.fsencode(mnt) + alias)
            assert e.value.errno == errno.EIO, "a lookup through the second name: %r" % e.value
        assert len(paths) == len(set(paths)), "a path served twice"
        assert set(paths) == expected, "the mount serves other paths than ls -R: more %r, fewer %r" % (
            sorted(set(paths) - expected)[:10], sorted(expected - set(paths))[:10])
        assert not errors, errors
        err = log[0]
        for pat in info["what"]:
            assert re.search(r"error: .*" + pat, err), "the log does not say %r: %s" % (pat, err[-3000:])
        _no_raw_names(err)
    finally:
        os.unlink(img)


def test_unreadable_inode_keeps_its_siblings(ubtrfs_bin, factory, base):
    """readdirplus meets an entry whose inode cannot be read (its size above 2^63, which no file can
    have): the entry is listed without attributes and every later entry is listed too; a stat
    of it fails with EIO; the log names it, its name escaped."""
    img = os.path.join(base.work, "bad-inode.img")
    T.copy_sparse(base.img, img)
    try:
        root = sorted((idx, child, name) for d, idx, child, name in base.dir_entries() if d == 256)
        names = [name for _, _, name in root]
        # the entry that is not UTF-8, so that the log line shows how it escapes names
        pos = names.index(N.BAD_UTF8)
        victim = root[pos][1]
        assert pos + 1 < len(root) or pos > 0, "test setup: the root holds one entry"
        N.change_item(img, base, (victim, N.INODE_ITEM, 0),
                      lambda data: data[:16] + struct.pack("<Q", (1 << 63) + 4096) + data[24:])
        log = []
        with fuse_mounted(ubtrfs_bin, [img], factory.mountpoint(), log=log) as mnt:
            top = os.fsencode(mnt)
            with os.scandir(top) as it:
                listed = [de.name for de in it]
            stats = {}
            for n in names:
                try:
                    stats[n] = os.lstat(top + b"/" + n)
                except OSError as e:
                    stats[n] = e.errno
        assert listed == names, "readdir lists %r, the directory holds %r" % (listed, names)
        assert stats[N.BAD_UTF8] == errno.EIO, "stat of the bad inode: %r" % stats[N.BAD_UTF8]
        assert all(not isinstance(v, int) for n, v in stats.items() if n != N.BAD_UTF8), stats
        err = log[0]
        line = [ln for ln in err.splitlines() if "ino %d " % victim in ln or "inode %d " % victim in ln]
        # (the two bytes that are not UTF-8 escaped, however ub_name_escape writes valid UTF-8)
        assert line and any(re.search(r"bad-(\\x[0-9a-f]{2}){2}-utf8", ln, re.I) for ln in line), \
            "the log does not name the entry: %s" % err[-3000:]
        _no_raw_names(err)
    finally:
        os.unlink(img)


def test_entry_index_outside_offsets(ubtrfs_bin, factory, base):
    """DIR_INDEX items whose index cannot be a readdir offset after "." and ".." (1, which the
    kernel's readdir skips too, and 2^63): not listed, so a listing ends; the log names them; a
    lookup by name (the DIR_ITEM) still finds them."""
    img = os.path.join(base.work, "bad-index.img")
    T.copy_sparse(base.img, img)
    try:
        d2 = N.resolve(base, b"d2")
        moved = {}
        for name, new in ((b"plain", 1), (b"alias", 1 << 63)):
            _, idx, child, _ = base.entry(name, parent=d2)
            moved[name] = (idx, new)
        bytenrs = {base.items[(d2, N.DIR_INDEX, idx)][0] for idx, _ in moved.values()}
        if len(bytenrs) != 1:
            pytest.skip("test setup: the two DIR_INDEX items are in different leaves")
        bytenr = bytenrs.pop()
        rekey = {(d2, N.DIR_INDEX, idx): (d2, N.DIR_INDEX, new) for idx, new in moved.values()}
        N.write_leaf(img, base, bytenr, [(rekey.get(k, k), d) for k, d in N.leaf_items(img, base, bytenr)])
        log = []
        with fuse_mounted(ubtrfs_bin, [img], factory.mountpoint(), log=log) as mnt:
            paths, errors = _walk(mnt)
            looked = {n: os.path.exists(os.path.join(mnt, "d2", n.decode())) for n in moved}
        assert not errors, errors
        listed = [p for p in paths if p.startswith(b"/d2/")]
        assert listed == [], "entries listed at offsets the kernel would not resume after: %r" % listed
        assert looked == {n: True for n in moved}, "lookups by name: %r" % looked
        err = log[0]
        for name, (_, new) in moved.items():
            assert re.search(r'dir %d: entry "%s" has index %d, outside' % (d2, name.decode(), new), err), err[-3000:]
    finally:
        os.unlink(img)
