# SPDX-License-Identifier: MIT
"""The fsync log: ubtrfs replays it in memory, the kernel replays it at mount.

Each scenario commits a baseline, changes something and fsyncs it, and copies
the still-mounted image (the "crash").  ubtrfs' view of the crash image must
equal the kernel's view after its mount-time replay, and `--no-log` must equal
the kernel's view of the last commit (rescue=nologreplay).  Every scenario
asserts log_root != 0, so none of them silently degrades into a full commit.
"""

import os
import random
import re
from pathlib import Path

import pytest

import fsynclog_lib as L
import ubtrfs_testlib as T

MiB = T.MiB


class Scenario:
    def __init__(self, name, seed, baseline, action, mount_options="", log_trees=1, mkfs_options=(),
                 require=None, timed=("file", "symlink", "dir")):
        self.name = name
        self.seed = seed
        self.baseline = baseline
        self.action = action
        self.mount_options = mount_options
        self.log_trees = log_trees
        self.mkfs_options = tuple(mkfs_options)
        # require(crash) -> None, or why the crash image lacks the state the
        # scenario is about (beyond log_root != 0, which every scenario needs)
        self.require = require
        # entry types whose times are compared with the kernel's replay
        self.timed = timed


SCENARIOS = {}


def scenario(name, seed, **kw):
    def deco(fn):
        rng_holder = {}

        def baseline(mnt):
            rng_holder["rng"] = random.Random(seed)
            fn.baseline(mnt, rng_holder["rng"])

        def action(mnt):
            fn.action(mnt, rng_holder["rng"])

        SCENARIOS[name] = Scenario(name, seed, baseline, action, **kw)
        return fn
    return deco


def _base_dirs(mnt, rng, files=3):
    """d/ and e/ with a few committed files, so fsyncs land in old directories."""
    for d in ("d", "e"):
        (mnt / d).mkdir()
        for i in range(files):
            L.write_file(mnt / d / ("old%d" % i), T.file_bytes(rng, "mixed", rng.randint(0, 20000)))


def _fsync_new_file(path, data, mode=0o644):
    L.write_file(path, data, mode=mode, fsync=True)


# ---------------------------------------------------------------------------
# scenarios

@scenario("new_file", 101)
class NewFile:
    @staticmethod
    def baseline(m, rng):
        _base_dirs(m, rng)

    @staticmethod
    def action(m, rng):
        _fsync_new_file(m / "d" / "new", rng.randbytes(10000))
        _fsync_new_file(m / "e" / "inline_new", T.text_bytes(rng, 700), mode=0o600)


def _append(initial, add, seed):
    class Append:
        @staticmethod
        def baseline(m, rng):
            _base_dirs(m, rng)
            L.write_file(m / "d" / "f", rng.randbytes(initial))

        @staticmethod
        def action(m, rng):
            fd = os.open(m / "d" / "f", os.O_WRONLY | os.O_APPEND)
            try:
                os.write(fd, rng.randbytes(add))
                os.fsync(fd)
            finally:
                os.close(fd)
    scenario("append_%d_%d" % (initial, add), seed)(Append)


_append(100, 300, 111)            # inline stays inline
_append(1000, 9000, 112)          # inline grows into a regular extent
_append(7000, 5000, 113)          # unaligned tail of a regular extent
_append(65536, 70000, 114)


@scenario("overwrite_middle", 121)
class OverwriteMiddle:
    @staticmethod
    def baseline(m, rng):
        _base_dirs(m, rng)
        L.write_file(m / "d" / "f", rng.randbytes(256 * 1024))

    @staticmethod
    def action(m, rng):
        fd = os.open(m / "d" / "f", os.O_WRONLY)
        try:
            os.pwrite(fd, rng.randbytes(10000), 100000)
            os.pwrite(fd, rng.randbytes(4096), 8192)
            os.fsync(fd)
        finally:
            os.close(fd)


def _truncate(initial, new, seed):
    class Truncate:
        @staticmethod
        def baseline(m, rng):
            _base_dirs(m, rng)
            L.write_file(m / "d" / "f", rng.randbytes(initial))

        @staticmethod
        def action(m, rng):
            fd = os.open(m / "d" / "f", os.O_WRONLY)
            try:
                os.ftruncate(fd, new)
                os.fsync(fd)
            finally:
                os.close(fd)
    kind = "shorter" if new < initial else "longer"
    scenario("truncate_%s_%d_%d" % (kind, initial, new), seed)(Truncate)


_truncate(300000, 5000, 131)
_truncate(300000, 0, 132)
_truncate(300000, 131072 + 3, 133)
_truncate(10000, 3 * MiB + 17, 134)    # a hole up to the new size
_truncate(100, 70000, 135)             # inline file grows by a hole


@scenario("truncate_longer_then_write", 136)
class TruncateLongerWrite:
    @staticmethod
    def baseline(m, rng):
        _base_dirs(m, rng)
        L.write_file(m / "d" / "f", rng.randbytes(10000))

    @staticmethod
    def action(m, rng):
        fd = os.open(m / "d" / "f", os.O_WRONLY)
        try:
            os.ftruncate(fd, 2 * MiB)
            os.pwrite(fd, rng.randbytes(5000), 1 * MiB + 3)
            os.fsync(fd)
        finally:
            os.close(fd)


@scenario("rename_within_dir", 141)
class RenameWithin:
    @staticmethod
    def baseline(m, rng):
        _base_dirs(m, rng)
        L.write_file(m / "d" / "a", rng.randbytes(9000))

    @staticmethod
    def action(m, rng):
        os.rename(m / "d" / "a", m / "d" / "a_renamed")
        L.fsync_path(m / "d" / "a_renamed")


@scenario("rename_over_existing", 142)
class RenameOver:
    @staticmethod
    def baseline(m, rng):
        _base_dirs(m, rng)
        L.write_file(m / "d" / "a", rng.randbytes(9000))
        L.write_file(m / "d" / "victim", rng.randbytes(3000))

    @staticmethod
    def action(m, rng):
        os.rename(m / "d" / "a", m / "d" / "victim")
        L.fsync_path(m / "d" / "victim")


# fsync of the file itself after a cross-directory rename of a committed file
# makes the kernel commit instead of logging; fsync of the new parent is logged
# and its replay keeps both names (nlink 2), which is what ubtrfs must show too.
@scenario("rename_across_dirs_fsync_new_parent", 143)
class RenameAcross:
    @staticmethod
    def baseline(m, rng):
        _base_dirs(m, rng)
        L.write_file(m / "d" / "a", rng.randbytes(9000))

    @staticmethod
    def action(m, rng):
        os.rename(m / "d" / "a", m / "e" / "a_moved")
        L.fsync_path(m / "e")


# The same, but the inode also changed (mode, owner) before the rename: the log
# holds an "exists only" inode item (generation 0) for it, which replay must not
# apply over the committed inode.
@scenario("chmod_rename_across_dirs_fsync_new_parent", 145)
class ChmodRenameAcross:
    @staticmethod
    def baseline(m, rng):
        _base_dirs(m, rng)
        L.write_file(m / "d" / "a", rng.randbytes(9000))
        os.setxattr(m / "d" / "a", "user.kept", b"value")

    @staticmethod
    def action(m, rng):
        os.chmod(m / "d" / "a", 0o600)
        os.chown(m / "d" / "a", 1234, 5678)
        os.rename(m / "d" / "a", m / "e" / "a_moved")
        L.fsync_path(m / "e")


@scenario("rename_across_dirs_new_file", 144)
class RenameAcrossNew:
    @staticmethod
    def baseline(m, rng):
        _base_dirs(m, rng)

    @staticmethod
    def action(m, rng):
        _fsync_new_file(m / "d" / "n", rng.randbytes(5000))
        os.rename(m / "d" / "n", m / "e" / "n_moved")
        L.fsync_path(m / "e" / "n_moved")


@scenario("unlink_fsync_parent", 151)
class UnlinkParent:
    @staticmethod
    def baseline(m, rng):
        _base_dirs(m, rng, files=6)

    @staticmethod
    def action(m, rng):
        os.unlink(m / "d" / "old1")
        os.unlink(m / "d" / "old4")
        L.fsync_path(m / "d")


@scenario("hardlink_add", 161)
class HardlinkAdd:
    @staticmethod
    def baseline(m, rng):
        _base_dirs(m, rng)
        L.write_file(m / "d" / "a", rng.randbytes(5000))

    @staticmethod
    def action(m, rng):
        os.link(m / "d" / "a", m / "d" / "a_link")
        os.link(m / "d" / "a", m / "e" / "a_elsewhere")
        L.fsync_path(m / "d" / "a")


# Long names, 4 KiB nodes: an inode's INODE_REF item for one directory fills a
# leaf after a dozen names, and the kernel keeps the rest in INODE_EXTREF items,
# each of which may pack several (parent, index, name) entries. This kernel
# commits instead of logging an fsync after new links that went to extrefs
# (it does not follow extrefs to log new ancestors), so the links are
# committed first and the fsync logs the inode with all its refs.
EXTREF_LINKS = 40
EXTREF_MKFS = ("-n", "4096")


def _long_name(i, rng):
    return ("link%03d_" % i) + "".join(rng.choice("abcdefghij") for _ in range(230))


# Equal-length names with equal crc32c (any seed, so any parent; the suffixes
# of the collisions/ pair in ubtrfs_testlib): long enough not to fit what is
# left of the INODE_REF item, both land in one INODE_EXTREF item, which then
# packs two entries.
EXTREF_PAIR = ("pair_" + "p" * 230 + "_1371838", "pair_" + "p" * 230 + "_2000402")


def _extref_entries(dump):
    """Entry counts of the INODE_EXTREF items in a progs dump."""
    counts = []
    for block in re.split(r"\n\titem \d+ ", dump):
        if re.match(r"key \(\d+ INODE_EXTREF \d+\)", block):
            counts.append(len(re.findall(r"\bparent \d+ namelen \d+", block)))
    return counts


def _needs_log_extref(crash):
    if not _extref_entries(crash.dump_log()):
        return "the log carries no INODE_EXTREF item"
    return None


def _needs_packed_extref(crash):
    if max(_extref_entries(crash.dump_fs_tree()) or [0]) < 2:
        return "no committed INODE_EXTREF item packs two names"
    return None


def _extref_baseline(m, rng, pair=False):
    _base_dirs(m, rng)
    L.write_file(m / "d" / "a", rng.randbytes(5000))
    names = [_long_name(i, rng) for i in range(EXTREF_LINKS)]
    for n in names + (list(EXTREF_PAIR) if pair else []):
        os.link(m / "d" / "a", m / "d" / n)


def _append_fsync(path, data):
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


@scenario("hardlinks_extref_append", 163, mkfs_options=EXTREF_MKFS, require=_needs_log_extref)
class HardlinksExtrefAppend:
    @staticmethod
    def baseline(m, rng):
        _extref_baseline(m, rng)

    @staticmethod
    def action(m, rng):
        _append_fsync(m / "d" / "a", rng.randbytes(3000))


# Unlinking committed names and fsyncing the file makes this kernel commit;
# fsyncing the directory logs its deletions, and replay drops the names from
# the inode's INODE_REF and INODE_EXTREF items and recounts its links, two of
# them in one packed extref item. (With that packed item, this kernel commits
# at an fsync of the file itself, hence no packed item in the append case.)
# The kernel's replay unlinks the names itself and stamps the surviving inode's
# ctime with the time of the replaying mount, which no reader of the crash
# image can know: file times are not compared here.
@scenario("hardlinks_extref_remove", 164, mkfs_options=EXTREF_MKFS, timed=("symlink", "dir"),
          require=_needs_packed_extref)
class HardlinksExtrefRemove:
    @staticmethod
    def baseline(m, rng):
        _extref_baseline(m, rng, pair=True)

    @staticmethod
    def action(m, rng):
        names = sorted(n for n in os.listdir(m / "d") if n.startswith("link"))
        # names from the INODE_REF item and from the extrefs alike
        for n in names[::3]:
            os.unlink(m / "d" / n)
        L.fsync_path(m / "d")


# One link in each of many directories: one INODE_REF item per parent.
@scenario("hardlinks_many_dirs", 165, mkfs_options=EXTREF_MKFS)
class HardlinksManyDirs:
    @staticmethod
    def baseline(m, rng):
        _base_dirs(m, rng)
        L.write_file(m / "d" / "a", rng.randbytes(5000))
        for i in range(30):
            (m / ("dir%02d" % i)).mkdir()

    @staticmethod
    def action(m, rng):
        for i in range(30):
            os.link(m / "d" / "a", m / ("dir%02d" % i) / _long_name(i, rng))
        L.fsync_path(m / "d" / "a")


@scenario("hardlink_remove", 162)
class HardlinkRemove:
    @staticmethod
    def baseline(m, rng):
        _base_dirs(m, rng)
        L.write_file(m / "d" / "a", rng.randbytes(5000))
        os.link(m / "d" / "a", m / "d" / "b")

    @staticmethod
    def action(m, rng):
        os.unlink(m / "d" / "b")
        L.fsync_path(m / "d" / "a")


@scenario("xattrs", 171)
class Xattrs:
    @staticmethod
    def baseline(m, rng):
        _base_dirs(m, rng)
        f = m / "d" / "f"
        L.write_file(f, rng.randbytes(3000))
        os.setxattr(f, "user.keep", b"kept")
        os.setxattr(f, "user.change", b"old value")
        os.setxattr(f, "user.remove", rng.randbytes(200))
        os.setxattr(f, "user.big_remove", rng.randbytes(2000))

    @staticmethod
    def action(m, rng):
        f = m / "d" / "f"
        os.setxattr(f, "user.change", b"new value, longer than before")
        os.removexattr(f, "user.remove")
        os.removexattr(f, "user.big_remove")
        os.setxattr(f, "user.added", rng.randbytes(1500))
        os.setxattr(f, "user.empty", b"")
        os.setxattr(f, "trusted.root_only", b"t")
        L.fsync_path(f)


@scenario("symlink_fsync_parent", 181)
class SymlinkParent:
    @staticmethod
    def baseline(m, rng):
        _base_dirs(m, rng)

    @staticmethod
    def action(m, rng):
        os.symlink("old0", m / "d" / "short_link")
        os.symlink("/" + "x/" * 700 + "end", m / "d" / "long_link")
        L.fsync_path(m / "d")


@scenario("new_dir_with_files", 191)
class NewDir:
    @staticmethod
    def baseline(m, rng):
        _base_dirs(m, rng)

    @staticmethod
    def action(m, rng):
        nd = m / "d" / "newdir"
        nd.mkdir()
        os.chmod(nd, 0o750)
        for i in range(5):
            _fsync_new_file(nd / ("f%d" % i), rng.randbytes(rng.randint(0, 30000)))
        L.fsync_path(nd)


@scenario("prealloc", 201)
class Prealloc:
    @staticmethod
    def baseline(m, rng):
        _base_dirs(m, rng)
        L.write_file(m / "d" / "p_old", rng.randbytes(8192))

    @staticmethod
    def action(m, rng):
        fd = os.open(m / "d" / "p", os.O_CREAT | os.O_RDWR, 0o644)
        try:
            os.posix_fallocate(fd, 0, 1 * MiB)
            os.pwrite(fd, rng.randbytes(4096), 4096 * 5)
            os.pwrite(fd, rng.randbytes(100), 512 * 1024 + 7)
            # preallocated past EOF must stay invisible
            T.fallocate(fd, T.FALLOC_FL_KEEP_SIZE, 1 * MiB, 512 * 1024)
            os.fsync(fd)
        finally:
            os.close(fd)
        fd = os.open(m / "d" / "p_old", os.O_RDWR)
        try:
            os.posix_fallocate(fd, 0, 300000)
            os.fsync(fd)
        finally:
            os.close(fd)


@scenario("compressed_zstd", 211, mount_options="compress=zstd")
class Compressed:
    @staticmethod
    def baseline(m, rng):
        _base_dirs(m, rng)
        L.write_file(m / "d" / "c_old", T.text_bytes(rng, 200000))

    @staticmethod
    def action(m, rng):
        _fsync_new_file(m / "d" / "c_new", T.text_bytes(rng, 400000))
        fd = os.open(m / "d" / "c_old", os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, T.text_bytes(rng, 150000))
            os.fsync(fd)
        finally:
            os.close(fd)


@scenario("subvolume", 221, log_trees=2)
class Subvolume:
    @staticmethod
    def baseline(m, rng):
        _base_dirs(m, rng)
        T.run(["btrfs", "subvolume", "create", str(m / "sv")])
        (m / "sv" / "inner").mkdir()
        L.write_file(m / "sv" / "inner" / "old", rng.randbytes(4000))

    @staticmethod
    def action(m, rng):
        _fsync_new_file(m / "sv" / "inner" / "new", rng.randbytes(20000))
        fd = os.open(m / "sv" / "inner" / "old", os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, rng.randbytes(3000))
            os.fsync(fd)
        finally:
            os.close(fd)
        _fsync_new_file(m / "d" / "top_new", rng.randbytes(7000))


def _needs_log_levels(crash):
    trees = crash.log_trees()
    if list(trees) != [5]:
        return "log trees %r, expected only the top subvolume's" % trees
    if not re.search(r"^node \d+ level [1-9]", crash.dump_block(trees[5]), re.M):
        return "the many-files log fits one leaf"
    return None


@scenario("many_files", 231, require=_needs_log_levels)
class ManyFiles:
    @staticmethod
    def baseline(m, rng):
        _base_dirs(m, rng)

    @staticmethod
    def action(m, rng):
        for i in range(200):
            name = "many_%03d_%s" % (i, "q" * rng.randint(0, 120))
            _fsync_new_file(m / "d" / name, rng.randbytes(rng.randint(0, 6000)))
        L.fsync_path(m / "d")


BIG_SIZE = 6 * MiB + 1234


def _needs_big_only_in_log(crash):
    if "EXTENT_CSUM" not in crash.dump_log():
        return "the log carries no data checksums"
    # the big file is the newest inode: committed, it would be in the fs tree
    dump = crash.dump_fs_tree()
    logged = set(re.findall(r"key \((\d+) INODE_ITEM 0\)", crash.dump_log()))
    committed = set(re.findall(r"key \((\d+) INODE_ITEM 0\)", dump))
    if not logged - committed:
        return "the kernel committed the big file; its checksums would not come from the log"
    return None


@scenario("big_random", 241, require=_needs_big_only_in_log)
class BigRandom:
    @staticmethod
    def baseline(m, rng):
        _base_dirs(m, rng)

    @staticmethod
    def action(m, rng):
        # Written 64 KiB at a time with an fsync every 128 KiB: fsync of more
        # dirty data than that at once makes this kernel commit the transaction
        # instead of logging, and the point here is a file that only the log holds.
        fd = os.open(m / "d" / "big", os.O_CREAT | os.O_WRONLY, 0o644)
        try:
            for i, off in enumerate(range(0, BIG_SIZE, 65536)):
                os.pwrite(fd, rng.randbytes(min(65536, BIG_SIZE - off)), off)
                if i % 2:
                    os.fsync(fd)
            os.fsync(fd)
        finally:
            os.close(fd)


# ---------------------------------------------------------------------------
# fixtures: one crash image (and its two kernel views) per scenario

class Built:
    def __init__(self, sc, crash):
        self.sc = sc
        self.crash = crash
        self._replayed = None
        self._committed = None

    @property
    def replayed(self):
        if self._replayed is None:
            self._replayed = L.kernel_replayed_view(self.crash)
        return self._replayed

    @property
    def committed(self):
        if self._committed is None:
            self._committed = L.kernel_committed_view(self.crash)
        return self._committed


# Whether the kernel logs or commits at an fsync, and how much it logs, also
# depends on timing (a background commit, a flush under memory pressure). A
# crash image without the state its scenario needs is built again; if it still
# lacks it after this many tries the scenario is skipped with the reason,
# never failed.
BUILD_ATTEMPTS = 4


def _unmet(b):
    if b.crash.log_root == 0:
        return "the kernel committed instead of logging"
    gens = L.super_generations(b.crash.image)
    if len(set(gens)) > 1:
        return "the copy caught a commit half way (superblock copies of generations %s)" % gens
    why = b.sc.require(b.crash) if b.sc.require else None
    if why is None and b.replayed.entries == b.committed.entries and b.replayed.hashes == b.committed.hashes:
        why = "the log changes nothing the kernel can see"
    return why


@pytest.fixture(scope="module")
def built(scratch):
    cache = {}
    base = Path(scratch) / "fsync_log"

    def get(name):
        if name not in cache:
            sc = SCENARIOS[name]
            why = None
            for attempt in range(BUILD_ATTEMPTS):
                work = base / name
                T.rmtree(work)
                crash = L.make_crash(work, sc.baseline, sc.action, mount_options=sc.mount_options,
                                     mkfs_options=sc.mkfs_options)
                b = Built(sc, crash)
                why = _unmet(b)
                if why is None:
                    break
                why = "%s (%d attempts)" % (why, attempt + 1)
            cache[name] = why if why else b
        if isinstance(cache[name], str):
            pytest.skip("%s: setup did not reach its state: %s" % (name, cache[name]))
        return cache[name]

    yield get
    L.remove_workdir(base)


def _fail(b, what, problems):
    return "%s: %s (log_root %d, image %s)\n  %s" % (
        b.sc.name, what, b.crash.log_root, b.crash.image, "\n  ".join(problems))


NAMES = sorted(SCENARIOS)


def _group(name):
    """Under pytest-xdist every test of one scenario runs on one worker, so each crash
    image is built once (the build is timing dependent: it is not shared between workers)."""
    return pytest.mark.xdist_group("fsync-" + name)


# each scenario's tests in the group of its crash image
PARAMS = [pytest.param(n, id=n, marks=_group(n)) for n in NAMES]


@pytest.mark.parametrize("name", PARAMS)
def test_log_replay_matches_kernel(ubtrfs_bin, built, name):
    b = built(name)
    assert b.crash.log_root != 0, "%s: the kernel committed instead of logging" % name
    before = L.image_digest(b.crash.image)
    ub = L.ubtrfs_view(b.crash.image)
    kv = b.replayed
    # the fixture rebuilt the image until the log made a difference (or skipped)
    assert kv.entries != b.committed.entries or kv.hashes != b.committed.hashes, \
        "%s: the log changes nothing the kernel can see; the scenario is vacuous" % name

    info = ub.replay_info()
    assert info is not None, "%s: -v did not report a replay\nstderr: %s" % (name, ub.stderr)
    assert info[0] == b.sc.log_trees and info[1] >= 1, \
        "%s: replay reported %r, expected %d log trees" % (name, info, b.sc.log_trees)

    problems = L.compare(kv.entries, ub.entries, L.BASE_KEYS)
    assert not problems, _fail(b, "ls -R --json differs from the kernel's replay", problems)
    # This kernel's mount-time replay leaves directory times as the log has
    # them (checked in every scenario here), so times are compared for all types.
    problems = L.compare_times(kv.entries, ub.entries, b.sc.timed)
    assert not problems, _fail(b, "times differ from the kernel's replay", problems)
    problems = L.compare_contents(b.crash.image, kv.hashes)
    assert not problems, _fail(b, "cat differs from the kernel's replay", problems)
    assert L.image_digest(b.crash.image) == before, "%s: reading changed the image" % name


@pytest.mark.parametrize("name", PARAMS)
def test_no_log_matches_last_commit(ubtrfs_bin, built, name):
    b = built(name)
    assert b.crash.log_root != 0, "%s: the kernel committed instead of logging" % name
    ub = L.ubtrfs_view(b.crash.image, no_log=True)
    assert ub.replay_info() is None, "%s: --no-log still replayed: %s" % (name, ub.stderr)
    kv = b.committed
    problems = L.compare(kv.entries, ub.entries, T.LS_KEYS)
    assert not problems, _fail(b, "ls -R --json --no-log differs from the last commit", problems)
    problems = L.compare_contents(b.crash.image, kv.hashes, no_log=True)
    assert not problems, _fail(b, "cat --no-log differs from the last commit", problems)


@_group("subvolume")
def test_subvolume_scenario_has_two_log_trees(ubtrfs_bin, built):
    b = built("subvolume")
    roots = b.crash.log_trees()
    assert sorted(roots) == [5, 256], "log root tree names %r" % roots


@_group("many_files")
def test_many_files_log_has_several_levels(ubtrfs_bin, built):
    b = built("many_files")
    trees = b.crash.log_trees()
    assert list(trees) == [5], "log trees %r" % trees
    text = b.crash.dump_block(trees[5])
    assert re.search(r"^node \d+ level [1-9]", text, re.M), \
        "the many-files log fits one leaf; the scenario does not cover log tree nodes"


@_group("big_random")
def test_big_file_uses_log_checksums(ubtrfs_bin, built):
    """A new multi-MiB file exists only in the log: its data checksums are the
    log's EXTENT_CSUM items. cat must read it cleanly, and a corrupt sector in a
    copy of the image must be reported with its file offset."""
    b = built("big_random")
    crash = b.crash
    path = "/d/big"
    exp_size, exp_digest = b.replayed.hashes[path]
    assert exp_size == BIG_SIZE
    rc, size, digest, cp = T.cat_hash([str(crash.image)], path)
    assert (rc, size, digest) == (0, exp_size, exp_digest), T.describe(cp)

    ino = b.replayed.entries[path]["ino"]
    dump = crash.dump_log()
    # the fixture rebuilt the image until these held (or skipped)
    assert "EXTENT_CSUM" in dump, "the log carries no data checksums"
    assert "(%d INODE_ITEM 0)" % ino not in crash.dump_fs_tree(), \
        "the big file was committed; its checksums would not come from the log"
    extents = [e for e in T.file_extents(dump, ino) if e[1] != 0 and e[5] == 0]
    assert extents, "no regular extents of inode %d in the log:\n%s" % (ino, dump[:3000])
    # a sector in the middle of the extent in the middle of the file
    file_off, disk, disk_len, ext_off, num, _ = sorted(extents)[len(extents) // 2]
    sector = (num // 4096 // 2) * 4096
    logical = disk + ext_off + sector
    bad_file_off = file_off + sector
    phys = L.single_data_physical(crash.image, logical)
    good = cp.stdout

    bad = crash.workdir / "bad-sector.img"
    T.copy_sparse(crash.image, bad)
    try:
        with open(bad, "rb") as f:
            f.seek(phys)
            old = f.read(4096)
        assert old == good[bad_file_off:bad_file_off + 4096], \
            "the mapped sector does not hold the file's bytes (logical %d physical %d)" % (logical, phys)
        T.overwrite(bad, phys, bytes(x ^ 0x5A for x in old))
        cp = T.ubtrfs("cat", "--path", path, str(bad))
        err = cp.stderr.decode("utf-8", "replace")
        assert cp.returncode == 1, T.describe(cp)
        assert T.mentions_number(err, bad_file_off), \
            "stderr does not name file offset %d (logical %d):\n%s" % (bad_file_off, logical, err)
        # everything else intact, the bad sector as zeros
        expected = good[:bad_file_off] + bytes(4096) + good[bad_file_off + 4096:]
        assert len(cp.stdout) == len(expected) and cp.stdout == expected, \
            "output besides the bad sector differs from the clean read"
    finally:
        os.unlink(bad)
