# SPDX-License-Identifier: MIT
"""Crash images with a pending fsync log, and the kernel's two views of them.

A crash image is a byte copy of a loop-mounted filesystem taken right after
an fsync returned, while the filesystem is still mounted with a long commit
interval: its superblock still names the last commit, and log_root points at
the fsync log tree written since.  Two kernel oracles judge ubtrfs:

  * replayed: a copy mounted read-write (the kernel replays the log at mount),
    with noatime so walking it does not change what we compare;
  * committed: a copy mounted read-only with rescue=nologreplay, i.e. the
    last commit, which is what `ubtrfs --no-log` must show.
"""

import hashlib
import os
import re
import shutil
import stat
from pathlib import Path

import ubtrfs_testlib as T

IMG_SIZE = 256 * T.MiB
# Long enough that no periodic commit lands between fsync and the copy.
COMMIT_INTERVAL = 300

TIME_KEYS = ("atime", "mtime", "ctime")
BASE_KEYS = tuple(k for k in T.LS_KEYS if k not in TIME_KEYS)

REPLAY_INFO = re.compile(rb"replayed the fsync log in memory: (\d+) log trees?, (\d+) inodes? changed")


class Crash:
    """A finished crash image and what the superblock says about its log."""

    def __init__(self, workdir, image, super_fields):
        self.workdir = Path(workdir)
        self.image = Path(image)
        self.super = super_fields
        self.log_root = int(super_fields.get("log_root", "0"))
        self.generation = int(super_fields.get("generation", "0"))

    def log_trees(self):
        """{subvolume id: root bytenr} of the log trees named by the log root tree."""
        text = self.dump_block(self.log_root)
        return {int(m.group(1)): int(m.group(2)) for m in re.finditer(
            r"key \(TREE_LOG ROOT_ITEM (\d+)\).*?\n\s*generation \d+ root_dirid \d+ bytenr (\d+)",
            text)}

    def dump_log(self):
        """progs' dump-tree of the log root tree and of every log tree it names
        (--follow does not cross from the log root tree into the log trees)."""
        parts = [self.dump_block(self.log_root)]
        for _, bytenr in sorted(self.log_trees().items()):
            parts.append(self.dump_block(bytenr))
        return "".join(parts)

    def dump_block(self, bytenr):
        cp = T.run(["btrfs", "inspect-internal", "dump-tree", "-b", str(bytenr), "--follow",
                    str(self.image)])
        return cp.stdout.decode("utf-8", "replace")

    def dump_fs_tree(self, tree="5"):
        cp = T.run(["btrfs", "inspect-internal", "dump-tree", "-t", str(tree), str(self.image)])
        return cp.stdout.decode("utf-8", "replace")


def single_data_physical(image, logical):
    """Physical offset of `logical` in a single-profile data chunk, read from
    progs' chunk tree dump (btrfs-map-logical wants a committed extent item,
    which data that only the log references does not have)."""
    cp = T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "chunk", str(image)])
    text = cp.stdout.decode("utf-8", "replace")
    chunk = re.compile(r"CHUNK_ITEM (\d+)\) itemoff \d+ itemsize \d+\n\s*length (\d+) owner \d+ "
                       r"stripe_len \d+ type (\S+)\n.*?num_stripes (\d+)[^\n]*\n\s*stripe 0 devid \d+ "
                       r"offset (\d+)", re.S)
    for m in chunk.finditer(text):
        start, length = int(m.group(1)), int(m.group(2))
        if start <= logical < start + length:
            assert m.group(3) in ("DATA", "DATA|single") and m.group(4) == "1", \
                "logical %d is in a %s chunk with %s stripes" % (logical, m.group(3), m.group(4))
            return int(m.group(5)) + logical - start
    raise AssertionError("no chunk holds logical %d" % logical)


def super_generations(image):
    """The generation of every superblock copy in the image (a copy taken while the kernel
    commits can hold an old primary and a newer mirror)."""
    gens = []
    with open(image, "rb") as f:
        for off in (64 << 10, 64 << 20, 256 << 30):
            f.seek(off)
            sb = f.read(80)
            if len(sb) == 80 and sb[64:72] == b"_BHRfS_M":
                gens.append(int.from_bytes(sb[72:80], "little"))
    return gens


def dump_super(image):
    cp = T.run(["btrfs", "inspect-internal", "dump-super", str(image)])
    return T.parse_dump_super(cp.stdout.decode("utf-8", "replace"))


def fs_sync(mnt):
    """Commit the transaction of this filesystem only."""
    T.run(["btrfs", "filesystem", "sync", str(mnt)])


def fsync_path(path):
    """fsync a file or directory by name (directories opened O_DIRECTORY)."""
    st = os.lstat(path)
    flags = os.O_RDONLY
    if stat.S_ISDIR(st.st_mode):
        flags |= os.O_DIRECTORY
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file(path, data, mode=0o644, fsync=False):
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, mode)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def make_crash(workdir, baseline, action, mount_options="", mkfs_options=(), tries=3):
    """Build crash.img in workdir: baseline, commit, action (which fsyncs), copy.

    `baseline(mnt)` and `action(mnt)` get the mount point as a Path.  The copy
    is taken while the filesystem is still mounted, before any commit.  On a
    loaded machine the kernel may still commit between the fsync and the copy
    (the copy then has no log): the image is made again, up to `tries` times,
    and the last one is returned as it is (the caller's own check on log_root
    says what it got).
    """
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    img = workdir / "live.img"
    crash = workdir / "crash.img"
    for attempt in range(tries):
        with open(img, "wb") as f:
            f.truncate(IMG_SIZE)
        T.run(["mkfs.btrfs", "-q", "-f", *mkfs_options, str(img)])
        opts = "commit=%d" % COMMIT_INTERVAL
        if mount_options:
            opts += "," + mount_options
        with T.mounted([img], workdir / "mnt_live", options=opts, readonly=False) as mnt:
            mnt = Path(mnt)
            baseline(mnt)
            fs_sync(mnt)
            action(mnt)
            # a copy taken while a commit ran is no crash state: made again
            quiet = T.copy_quiet([img], [crash]) is not None
        os.unlink(img)
        fields = dump_super(crash)
        if (quiet and int(fields.get("log_root", "0")) != 0) or attempt + 1 == tries:
            return Crash(workdir, crash, fields)
        os.unlink(crash)


def _copy(crash, name):
    dst = crash.workdir / name
    T.copy_sparse(crash.image, dst)
    return dst


def kernel_replayed_view(crash):
    """The kernel's view after its own mount-time log replay (on a copy)."""
    k = _copy(crash, "kernel-replay.img")
    try:
        with T.mounted([k], crash.workdir / "mnt_replay", options="noatime", readonly=False) as mnt:
            entries = T.walk_tree(mnt)
            hashes = T.hash_files(mnt, entries)
        after = dump_super(k)
    finally:
        os.unlink(k)
    # The replaying mount must have consumed the log, or it did not replay.
    assert int(after.get("log_root", "0")) == 0, \
        "the kernel left log_root %s after a read-write mount" % after.get("log_root")
    return T.KernelView(entries, hashes)


def kernel_committed_view(crash):
    """The kernel's view of the last commit (log ignored), on a read-only copy."""
    k = _copy(crash, "kernel-nolog.img")
    try:
        view = T.kernel_view([k], crash.workdir / "mnt_nolog")
    finally:
        os.unlink(k)
    return view


def image_digest(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(4 << 20)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


class UbView:
    def __init__(self, entries, cp):
        self.entries = entries
        self.cp = cp
        self.stderr = cp.stderr.decode("utf-8", "replace")

    def replay_info(self):
        """(log trees, inodes changed) from -v, or None when not reported."""
        m = REPLAY_INFO.search(self.cp.stderr)
        return (int(m.group(1)), int(m.group(2))) if m else None


def ubtrfs_view(image, no_log=False):
    args = ["ls", "-R", "--json", "-v"]
    if no_log:
        args.append("--no-log")
    cp = T.ubtrfs(*args, str(image))
    assert cp.returncode == 0, T.describe(cp)
    entries, dups = T.index_entries(T.parse_ls_json(cp.stdout))
    assert not dups, "paths listed more than once: %r" % dups[:20]
    return UbView(entries, cp)


def compare(expected, got, keys, limit=40):
    """Differences between two path -> attrs maps over `keys` (+ symlink targets)."""
    problems = []
    for p in sorted(set(expected) - set(got)):
        problems.append("missing entry %r (kernel: %r)" % (p, _brief(expected[p])))
    for p in sorted(set(got) - set(expected), key=str):
        problems.append("unexpected entry %r: %r" % (p, _brief(got[p])))
    for p in sorted(set(expected) & set(got)):
        exp, g = expected[p], got[p]
        ks = list(keys) + (["target"] if exp["type"] == "symlink" else [])
        for k in ks:
            if k not in g:
                problems.append("%r: key %r absent (kernel %r)" % (p, k, exp.get(k)))
            elif g[k] != exp[k]:
                problems.append("%r: %s kernel %r ubtrfs %r" % (p, k, _short(exp[k]), _short(g[k])))
        if exp["type"] != "symlink" and "target" in g:
            problems.append("%r: 'target' present on a %s" % (p, exp["type"]))
    if len(problems) > limit:
        problems = problems[:limit] + ["... %d more" % (len(problems) - limit)]
    return problems


def compare_times(expected, got, types):
    """Time differences, only for entries whose type is in `types`."""
    problems = []
    for p in sorted(set(expected) & set(got)):
        if expected[p]["type"] not in types:
            continue
        for k in TIME_KEYS:
            if got[p].get(k) != expected[p][k]:
                problems.append("%r (%s): %s kernel %r ubtrfs %r" % (
                    p, expected[p]["type"], k, expected[p][k], got[p].get(k)))
    return problems


def _brief(e):
    return {k: e.get(k) for k in ("type", "ino", "size", "nlink")}


def _short(v):
    s = repr(v)
    return v if len(s) < 200 else s[:200] + "..."


def compare_contents(image, hashes, no_log=False):
    """Every regular file read by `ubtrfs cat` must exit 0 with the kernel's bytes."""
    problems = []
    extra = ["--no-log"] if no_log else []
    for p in sorted(hashes):
        cp = T.ubtrfs("cat", *extra, "--path", p, str(image))
        exp_size, exp_digest = hashes[p]
        if cp.returncode != 0:
            problems.append("%r: cat exit %d (%s)" % (p, cp.returncode,
                                                      cp.stderr[-300:].decode("utf-8", "replace")))
        elif len(cp.stdout) != exp_size:
            problems.append("%r: %d bytes, kernel %d" % (p, len(cp.stdout), exp_size))
        elif hashlib.sha256(cp.stdout).hexdigest() != exp_digest:
            problems.append("%r: content differs from the kernel's" % p)
    return problems


def remove_workdir(workdir):
    if os.environ.get("UBTRFS_KEEP_IMAGES") != "1":
        shutil.rmtree(str(workdir), ignore_errors=True)
