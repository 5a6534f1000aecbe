# SPDX-License-Identifier: MIT
"""Crashes of the read-write mount (issue 30): the next mount shows a commit, with every fsync in it.

A seeded single-threaded workload (CrashWorkload: files created, written, overwritten past their
end, truncated, renamed (also over other files), hard-linked, unlinked, unlinked while open and
written on (orphans), symlinks, directories made and removed, chmod, and fsync / fdatasync /
fsyncdir) runs on a fresh image through `ubtrfs mount` with commit=600,notreelog. A model of the
tree keeps the state after every change that reached the daemon (`states`) and which state each
fsync made durable (with notreelog each fsync is a full commit: these tests judge the engine's
commits whole; the fsync log's crashes are test_fsync_write.py's and test_fsync_crash.py's). A
commit holds one of these states: the fsyncs' and the unmount's, and any other the engine commits
by itself (to free pinned space when an operation's reservation does not fit).

(a) kill -9 of the daemon at a random moment of the workload (several seeds): the dead FUSE mount
    is taken away (fusermount3 -u -z), btrfs check is clean, the kernel's mount shows one state of
    the model, not older than the last fsync that returned (the one in flight at the kill may have
    reached the disk), and a new ubtrfs mount (read-write: it removes the orphans the dead session
    left) shows the same, after which btrfs check is clean again.

(b) Every device write and flush of a run is recorded (tests/tools/nbd_record.c, an nbdkit plugin
    the mount reaches as nbd+unix://), and images are built of what a crash could have left: the
    writes before the cut point that precede its last flush all on disk, the later (pending) ones
    each landed or not, in any order (a seeded variant: none, all, or a random subset shuffled).
    Cuts are spread over the run and put on both sides of superblock writes. Every state: btrfs
    check clean, the kernel's mount and a read-write ubtrfs mount show one state of the model, not
    older than the last fsync that returned before the cut, and btrfs check is clean after ubtrfs.
    The two may differ by one commit: where only a mirror copy of a commit's superblock landed,
    ubtrfs opens the newest valid copy (docs/damage.md), the kernel the primary.

Budget: about a minute under ASan; UBTRFS_LONG_TESTS runs more seeds, more operations and cuts.
"""

import errno
import hashlib
import os
import random
import shutil
import signal
import struct
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

import ubtrfs_testlib as T
from test_mount import fuse_mounted
from test_enospc import progs_check

MiB = T.MiB
KiB = 1024
LONG = T.LONG_TESTS

# (seed, profile): devices, data and metadata profile
KILL_PROFILES = {"single": (1, "single", "dup"), "raid1": (2, "raid1", "raid1"), "raid5": (3, "raid5", "raid1"),
                 "raid6": (4, "raid6", "raid1c3")}
KILL_CASES = [(s, list(KILL_PROFILES)[(s - 1) % 4]) for s in (range(1, 13) if LONG else range(1, 5))]
CUT_SEEDS = [1, 2, 3] if LONG else [1]
CUT_OPS = 400 if LONG else 160
CUT_SPREAD = 40 if LONG else 12        # cut points spread evenly over the recorded run
CUT_SUPER_EVERY = 1 if LONG else 2     # both sides of every n-th superblock write
CUT_VARIANTS = 4 if LONG else 3        # variants of the pending writes per cut point

RECORD_PLUGIN = T.REPO / "tests" / "tools" / "nbd_record.c"


def make_image(path, size=256 * MiB):
    with open(path, "wb") as f:
        f.truncate(size)
    T.run(["mkfs.btrfs", "-f", "-q", str(path)])


# ---------------------------------------------------------------------------------------------
# the workload and its model

class Gone(Exception):
    """The mount went away under the workload (the daemon was killed)."""


def write_all(fd, b, off):
    """pwrite until every byte is written, as a careful program does: a write the daemon's death cuts
    short returns a short count (the pages before it were written), and the rest then fails with
    ENOTCONN, which the workload takes as the end."""
    done = 0
    while done < len(b):
        n = os.pwrite(fd, b[done:], off + done)
        assert n > 0, "pwrite wrote nothing at %d of %d" % (done, len(b))
        done += n


class CrashWorkload:
    """Random changes on the mount at `mnt`, with a model of the tree.

    The model maps each path to ("dir", mode), ("symlink", target) or ("file", mode, inode id);
    file contents are per inode (immutable bytes, replaced on every change) so that a state (a
    shallow copy) holds what each file had at that moment."""

    OPS = (("create", 14), ("write", 20), ("truncate", 5), ("rename", 7), ("link", 4), ("unlink", 6),
           ("orphan", 3), ("close_orphan", 2), ("symlink", 3), ("mkdir", 5), ("rmdir", 2), ("chmod", 3),
           ("fsync", 12))

    def __init__(self, mnt, seed, max_bytes=24 * MiB, stop=None):
        self.mnt = str(mnt)
        self.rng = random.Random("crash:%d" % seed)
        self.paths = {"": ("dir", 0o755)}
        self.data = {}     # inode id -> bytes
        self.modes = {}    # inode id -> permission bits
        self.next_id = 1
        self.orphans = []  # open descriptors of unlinked files
        self.written = 0
        self.max_bytes = max_bytes
        self.stop = stop or threading.Event()
        # the tree after every change that reached the daemon: a commit holds one of them
        self.states = [self.state()]
        # where the recorder's log was (a callable giving its current position) when each state came
        # to be: no commit written before that holds it
        self.position = None
        self.born = [0]
        # per fsync that returned: the state it made durable and the log position at its return
        self.synced = [(0, 0)]
        self.log = []
        self.nops = 0

    def mark(self):
        """A change reached the daemon: the tree as it is now is a state a commit may hold."""
        self.states.append(self.state())
        self.born.append(self.position() if self.position else 0)

    def p(self, rel):
        return os.path.join(self.mnt, rel) if rel else self.mnt

    def state(self):
        out = {}
        for rel, v in self.paths.items():
            if v[0] == "file":
                out[rel] = ("file", self.modes[v[2]], self.data[v[2]])
            else:
                out[rel] = v
        return out

    # ---- choices
    def dirs(self):
        return sorted(r for r, v in self.paths.items() if v[0] == "dir")

    def files(self):
        return sorted(r for r, v in self.paths.items() if v[0] == "file")

    def new_name(self, parent):
        for _ in range(20):
            n = "".join(self.rng.choice("abcdefghijklmnop") for _ in range(self.rng.randint(1, 8)))
            rel = parent + "/" + n if parent else n
            if rel not in self.paths:
                return rel
        return None

    def bytes_(self, n):
        self.written += n
        r = self.rng.random()
        if r < 0.15:
            return bytes([self.rng.randint(0, 255)]) * n
        if r < 0.35:
            return T.text_bytes(self.rng, n)
        return self.rng.randbytes(n)

    def length(self):
        r = self.rng.random()
        n = self.rng.randint(0, 3000) if r < 0.4 else self.rng.randint(1, 64 * KiB) if r < 0.9 \
            else self.rng.randint(64 * KiB, 256 * KiB)
        return n if self.written + n <= self.max_bytes else min(n, 100)

    # ---- operations (each first chooses, then acts on the mount, then updates the model)
    def op_create(self):
        rel = self.new_name(self.rng.choice(self.dirs()))
        if rel is None:
            return
        mode = self.rng.choice((0o644, 0o600, 0o755))
        b = self.bytes_(self.length())
        fd = os.open(self.p(rel), os.O_CREAT | os.O_EXCL | os.O_WRONLY, mode)
        i = self.next_id
        self.next_id += 1
        self.paths[rel] = ("file", None, i)
        self.data[i] = b""
        self.modes[i] = mode
        self.mark()
        try:
            if b:
                assert os.write(fd, b) == len(b)
                self.data[i] = b
                self.mark()
        finally:
            os.close(fd)
        self.log.append("create %s %d" % (rel, len(b)))

    def op_write(self):
        fs = self.files()
        if not fs:
            return self.op_create()
        rel = self.rng.choice(fs)
        i = self.paths[rel][2]
        old = self.data[i]
        off = self.rng.choice((0, len(old), self.rng.randint(0, len(old)), len(old) + self.rng.randint(1, 70000)))
        b = self.bytes_(self.length())
        fd = os.open(self.p(rel), os.O_WRONLY)
        try:
            if b:
                write_all(fd, b, off)
        finally:
            os.close(fd)
        if b:
            new = bytearray(old)
            if off > len(new):
                new.extend(bytes(off - len(new)))
            new[off:off + len(b)] = b
            self.data[i] = bytes(new)
            self.mark()
        self.log.append("write %s off %d len %d" % (rel, off, len(b)))

    def op_truncate(self):
        fs = self.files()
        if not fs:
            return
        rel = self.rng.choice(fs)
        i = self.paths[rel][2]
        old = self.data[i]
        n = self.rng.choice((0, self.rng.randint(0, len(old)), len(old) + self.rng.randint(1, 200000)))
        os.truncate(self.p(rel), n)
        self.data[i] = old[:n] + bytes(max(0, n - len(old)))
        self.mark()
        self.log.append("truncate %s %d" % (rel, n))

    def op_rename(self):
        srcs = [r for r in self.paths if r]
        if not srcs:
            return
        src = self.rng.choice(sorted(srcs))
        kind = self.paths[src][0]
        if kind == "file" and self.rng.random() < 0.3 and len(self.files()) > 1:
            dst = self.rng.choice([f for f in self.files() if f != src])  # over another file
        else:
            parents = [d for d in self.dirs() if not (d == src or d.startswith(src + "/"))]
            dst = self.new_name(self.rng.choice(parents))
            if dst is None:
                return
        os.rename(self.p(src), self.p(dst))
        if dst in self.paths and self.paths[dst] == self.paths[src] and kind == "file":
            # two names of one inode: rename(2) does nothing
            self.log.append("rename %s %s (links of one inode)" % (src, dst))
            return
        moved = {r: v for r, v in self.paths.items() if r == src or r.startswith(src + "/")}
        for r in moved:
            del self.paths[r]
        self.paths.pop(dst, None)
        for r, v in moved.items():
            self.paths[dst + r[len(src):]] = v
        self.mark()
        self.log.append("rename %s %s" % (src, dst))

    def op_link(self):
        fs = self.files()
        if not fs:
            return
        src = self.rng.choice(fs)
        dst = self.new_name(self.rng.choice(self.dirs()))
        if dst is None:
            return
        os.link(self.p(src), self.p(dst))
        self.paths[dst] = self.paths[src]
        self.mark()
        self.log.append("link %s %s" % (src, dst))

    def op_unlink(self):
        cands = sorted(r for r, v in self.paths.items() if v[0] in ("file", "symlink"))
        if not cands:
            return
        rel = self.rng.choice(cands)
        os.unlink(self.p(rel))
        del self.paths[rel]
        self.mark()
        self.log.append("unlink %s" % rel)

    def op_orphan(self):
        """A file unlinked while open, written through its descriptor: an orphan until closed."""
        fs = self.files()
        if not fs or len(self.orphans) >= 3:
            return
        rel = self.rng.choice(fs)
        i = self.paths[rel][2]
        fd = os.open(self.p(rel), os.O_RDWR)
        os.unlink(self.p(rel))
        del self.paths[rel]
        self.mark()
        self.orphans.append(fd)
        b = self.bytes_(min(self.length(), 20000))
        if b:
            off = self.rng.randint(0, 10000)
            write_all(fd, b, off)
            # the inode may have other names still
            new = bytearray(self.data[i])
            if off > len(new):
                new.extend(bytes(off - len(new)))
            new[off:off + len(b)] = b
            self.data[i] = bytes(new)
            self.mark()
        self.log.append("orphan %s" % rel)

    def op_close_orphan(self):
        if self.orphans:
            os.close(self.orphans.pop(self.rng.randrange(len(self.orphans))))
            self.log.append("close orphan")

    def op_symlink(self):
        rel = self.new_name(self.rng.choice(self.dirs()))
        if rel is None:
            return
        target = "t" * self.rng.randint(1, 300) if self.rng.random() < 0.3 else "../some/where"
        os.symlink(target, self.p(rel))
        self.paths[rel] = ("symlink", target)
        self.mark()
        self.log.append("symlink %s" % rel)

    def op_mkdir(self):
        rel = self.new_name(self.rng.choice(self.dirs()))
        if rel is None:
            return
        os.mkdir(self.p(rel), 0o755)
        self.paths[rel] = ("dir", 0o755)
        self.mark()
        self.log.append("mkdir %s" % rel)

    def op_rmdir(self):
        empty = [d for d in self.dirs() if d and not any(r.startswith(d + "/") for r in self.paths)]
        if not empty:
            return
        rel = self.rng.choice(empty)
        os.rmdir(self.p(rel))
        del self.paths[rel]
        self.mark()
        self.log.append("rmdir %s" % rel)

    def op_chmod(self):
        cands = sorted(r for r, v in self.paths.items() if v[0] in ("file", "dir") and r)
        if not cands:
            return
        rel = self.rng.choice(cands)
        mode = self.rng.choice((0o700, 0o644, 0o640, 0o755, 0o600))
        os.chmod(self.p(rel), mode)
        v = self.paths[rel]
        if v[0] == "file":
            self.modes[v[2]] = mode
        else:
            self.paths[rel] = ("dir", mode)
        self.mark()
        self.log.append("chmod %s %o" % (rel, mode))

    def op_fsync(self):
        """A commit: what the filesystem holds now is a state a crash may leave from here on."""
        r = self.rng.random()
        cands = sorted(r for r, v in self.paths.items() if v[0] in ("file", "dir"))
        target = None
        if r < 0.15 and self.orphans:
            fd = self.rng.choice(self.orphans)
            close = False
        else:
            target = self.rng.choice(cands)
            fd = os.open(self.p(target), os.O_RDONLY | (os.O_DIRECTORY if self.paths[target][0] == "dir" else 0))
            close = True
        now = len(self.states) - 1
        try:
            if self.rng.random() < 0.3:
                os.fdatasync(fd)
            else:
                os.fsync(fd)
        finally:
            if close:
                os.close(fd)
        self.synced.append((now, self.position() if self.position else 0))
        self.log.append("fsync %s" % (target if target is not None else "orphan"))

    def run(self, nops):
        names = [n for n, _ in self.OPS]
        weights = [w for _, w in self.OPS]
        for _ in range(nops):
            if self.stop.is_set():
                raise Gone()
            op = self.rng.choices(names, weights)[0]
            self.nops += 1
            try:
                getattr(self, "op_" + op)()
            except OSError as e:
                if self.stop.is_set() or e.errno in (errno.ENOTCONN, errno.ECONNABORTED):
                    raise Gone()
                raise AssertionError("operation %d (%s) failed: %s\nbefore:\n  %s" % (
                    self.nops, op, e, "\n  ".join(self.log[-15:])))

    def close(self):
        for fd in self.orphans:
            try:
                os.close(fd)
            except OSError:
                pass
        self.orphans = []


def sha(b):
    return hashlib.sha256(b).hexdigest()


def seen(top):
    """path -> ("dir", mode) / ("symlink", target) / ("file", mode, sha256) of what a mount shows."""
    out = {"": ("dir", os.lstat(top).st_mode & 0o7777)}
    for root, dirs, files in os.walk(top):
        for n in dirs + files:
            real = os.path.join(root, n)
            rel = os.path.relpath(real, top)
            st = os.lstat(real)
            if os.path.islink(real):
                out[rel] = ("symlink", os.readlink(real))
            elif os.path.isdir(real):
                out[rel] = ("dir", st.st_mode & 0o7777)
            else:
                with open(real, "rb") as f:
                    out[rel] = ("file", st.st_mode & 0o7777, sha(f.read()))
    return out


_SHA = {}


def as_seen(state):
    out = {}
    for rel, v in state.items():
        if v[0] == "file":
            h = _SHA.get(id(v[2]))
            if h is None or h[0] is not v[2]:
                h = _SHA[id(v[2])] = (v[2], sha(v[2]))
            out[rel] = ("file", v[1], h[1])
        else:
            out[rel] = v
    return out


def differences(want, got, limit=12):
    out = ["missing %r" % p for p in sorted(set(want) - set(got))]
    out += ["unexpected %r" % p for p in sorted(set(got) - set(want))]
    out += ["%r: want %r got %r" % (p, want[p], got[p]) for p in sorted(set(want) & set(got)) if want[p] != got[p]]
    return out[:limit]


def matching_state(wl, got, candidates):
    """The index of the state among `candidates` that `got` is, or None."""
    for j in candidates:
        if as_seen(wl.states[j]) == got:
            return j
    return None


def history(wl, got, paths):
    """For each path: the last state that shows it as `got` does (where a wrong answer comes from)."""
    out = []
    for p in paths:
        last = None
        for i in range(len(wl.states) - 1, -1, -1):
            v = wl.states[i].get(p)
            mine = None if v is None else as_seen({p: v})[p]
            if mine == got.get(p):
                last = i
                break
        out.append("%r as in state %s" % (p, last))
    return out


def explain(wl, got, candidates, what):
    j = candidates[0]
    want = as_seen(wl.states[j])
    odd = sorted(p for p in set(want) | set(got) if want.get(p) != got.get(p))[:8]
    return "%s: the tree is none of the states %d..%d; against state %d (the last fsync that returned):\n  %s" \
        "\nthe last operations:\n  %s\nwhere the differing entries come from (the fsyncs returned at states %r):\n  %s" % (
            what, candidates[0], candidates[-1], j, "\n  ".join(differences(want, got)), "\n  ".join(wl.log[-12:]),
            [s for s, _ in wl.synced[-6:]], "\n  ".join(history(wl, got, odd)))


def kernel_seen(imgs, mnt):
    with T.mounted(imgs, mnt, readonly=True) as km:
        return seen(km)


def ubtrfs_seen(ubtrfs_bin, devices, mnt):
    """A read-write ubtrfs mount (the real mount after a crash: it removes the dead session's orphans)."""
    log = []
    with fuse_mounted(ubtrfs_bin, devices, mnt, "rw", log=log) as um:
        got = seen(um)
    bad = [ln for ln in log[0].splitlines() if ": error:" in ln]
    assert not bad, "the ubtrfs mount logged errors:\n" + log[0][-3000:]
    return got


# ---------------------------------------------------------------------------------------------
# (a) kill -9 of the daemon

def start_daemon(ubtrfs_bin, devices, mnt, options):
    os.makedirs(str(mnt), exist_ok=True)
    errf = tempfile.TemporaryFile()
    proc = subprocess.Popen([str(ubtrfs_bin), "mount", "-f", "-o", options, *[str(d) for d in devices], str(mnt)],
                            stdout=subprocess.DEVNULL, stderr=errf)
    deadline = time.monotonic() + 60
    while not os.path.ismount(str(mnt)):
        if proc.poll() is not None:
            errf.seek(0)
            raise AssertionError("mount exited %d: %s" % (proc.returncode, errf.read().decode(errors="replace")))
        assert time.monotonic() < deadline, "not mounted after 60 s"
        time.sleep(0.02)
    return proc, errf


def take_away(mnt):
    """A FUSE mount whose daemon is gone: lazily unmounted, so nothing waits on it."""
    T.run(["fusermount3", "-u", "-z", str(mnt)], check=False)
    if os.path.ismount(str(mnt)):
        T.run(["umount", "-l", str(mnt)], check=False)


@pytest.mark.parametrize("seed,profile", KILL_CASES)
def test_kill9_leaves_the_last_fsync(ubtrfs_bin, scratch, seed, profile):
    d = Path(scratch) / ("kill9-%d" % seed)
    d.mkdir()
    ndev, data, meta = KILL_PROFILES[profile]
    imgs = [d / ("dev%d.img" % i) for i in range(ndev)]
    for img in imgs:
        with open(img, "wb") as f:
            f.truncate(256 * MiB)
    T.run(["mkfs.btrfs", "-f", "-q", "-d", data, "-m", meta, *imgs])
    mnt = d / "mnt"
    rng = random.Random("kill:%d" % seed)
    stop = threading.Event()
    proc, errf = start_daemon(ubtrfs_bin, imgs, mnt, "rw,commit=600,notreelog")
    wl = CrashWorkload(mnt, seed, stop=stop)
    failure = []

    def work():
        try:
            wl.run(100000)
        except Gone:
            pass
        except BaseException as e:  # noqa: B902 - handed to the test's thread
            failure.append(e)

    th = threading.Thread(target=work)
    try:
        th.start()
        # a random moment, after some fsyncs have happened
        delay = rng.uniform(0.5, 3.0)
        deadline = time.monotonic() + delay
        while time.monotonic() < deadline and th.is_alive():
            time.sleep(0.01)
        stop.set()
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        th.join(60)
        assert not th.is_alive(), "the workload hangs on the dead mount"
    finally:
        stop.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        take_away(mnt)
        th.join(60)
        wl.close()
    if failure:
        raise failure[0]
    # the states the image may hold: that of the last fsync that returned, or any later one (a commit
    # in flight at the kill, or one the engine made by itself to free pinned space)
    candidates = list(range(wl.synced[-1][0], len(wl.states)))
    progs_check(imgs)
    got = kernel_seen(imgs, d / "kmnt")
    j = matching_state(wl, got, candidates)
    assert j is not None, "seed %d (%s), killed after %d operations: %s" % (
        seed, profile, wl.nops, explain(wl, got, candidates, "the kernel's mount"))
    got2 = ubtrfs_seen(ubtrfs_bin, imgs, d / "umnt")
    assert got2 == as_seen(wl.states[j]), "seed %d: the ubtrfs mount after the crash differs from state %d:\n  %s" % (
        seed, j, "\n  ".join(differences(as_seen(wl.states[j]), got2)))
    progs_check(imgs)
    print("seed %d (%s): killed after %d operations, %d fsyncs; the image holds state %d of %d..%d" % (
        seed, profile, wl.nops, len(wl.synced) - 1, j, candidates[0], candidates[-1]))
    T.run(["btrfs", "device", "scan", "--forget"], check=False)
    T.rmtree(d)


# ---------------------------------------------------------------------------------------------
# (b) prefixes of the recorded device writes

REC_WRITE, REC_FLUSH, REC_WRITE_FUA = 1, 2, 3
REC_HEADER = struct.Struct("<4sIQQ")


def parse_log(path):
    """[(kind, offset, length, position of the bytes in the log, log position after the entry)]"""
    entries = []
    with open(path, "rb") as f:
        raw = f.read()
    p = 0
    while p + REC_HEADER.size <= len(raw):
        magic, kind, off, length = REC_HEADER.unpack_from(raw, p)
        assert magic == b"UBRL", "recording damaged at byte %d" % p
        p += REC_HEADER.size
        data_at = p
        if kind != REC_FLUSH:
            p += length
        entries.append((kind, off, length, data_at, p))
    assert p == len(raw), "recording ends inside an entry"
    return entries, raw


def entry_index(entries, position):
    """How many entries were complete at log byte position `position`."""
    lo, hi = 0, len(entries)
    while lo < hi:
        mid = (lo + hi) // 2
        if entries[mid][4] <= position:
            lo = mid + 1
        else:
            hi = mid
    return lo


def is_super(off, length):
    return any(off < s + 4096 and s < off + length for s in (64 * KiB, 64 * MiB, 256 << 30))


def cut_points(entries, spread, super_every):
    cuts = {len(entries)}
    for i in range(1, spread + 1):
        cuts.add(len(entries) * i // (spread + 1))
    supers = [i for i, e in enumerate(entries) if e[0] != REC_FLUSH and is_super(e[1], e[2])]
    for i in supers[::super_every]:
        cuts.add(i)
        cuts.add(i + 1)
    return sorted(cuts)


def build_cut(base, target, entries, raw, k, variant):
    """The image a crash after the first k entries could leave: every write before the last flush
    among them (and every FUA write) on disk, of the later ones those the variant picks, in its
    order (0: none, 1: all in order, otherwise a seeded random subset shuffled)."""
    last_flush = max((i for i in range(k) if entries[i][0] == REC_FLUSH), default=-1)
    durable = [i for i in range(k) if entries[i][0] != REC_FLUSH and (i < last_flush or entries[i][0] == REC_WRITE_FUA)]
    pending = [i for i in range(last_flush + 1, k) if entries[i][0] == REC_WRITE]
    if variant == 0:
        landed = []
    elif variant == 1:
        landed = pending
    else:
        rng = random.Random("cut:%d:%d" % (k, variant))
        landed = [i for i in pending if rng.random() < 0.5]
        rng.shuffle(landed)
    T.copy_sparse(base, target)
    with open(target, "r+b") as f:
        for i in durable + landed:
            _, off, length, at, _ = entries[i]
            f.seek(off)
            f.write(raw[at:at + length])
    return len(pending), len(landed)


class Recorder:
    """nbdkit serving `image` through tests/tools/nbd_record.c, recording into `log`."""

    def __init__(self, image, log, work):
        self.sock = str(Path(work) / "rec.sock")
        self.log = str(log)
        argv = ["nbdkit", "-f", "--exit-with-parent", "-U", self.sock, "cc", str(RECORD_PLUGIN),
                "EXTRA_CFLAGS=-Wall -Wextra -Wno-unused-parameter -Werror", "file=%s" % image, "log=%s" % log]
        self.errf = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.errf)
        deadline = time.monotonic() + 60
        while not os.path.exists(self.sock):
            if self.proc.poll() is not None:
                self.errf.seek(0)
                raise AssertionError("nbdkit exited %d: %s" % (self.proc.returncode,
                                                              self.errf.read().decode(errors="replace")))
            assert time.monotonic() < deadline, "nbdkit did not start"
            time.sleep(0.05)
        self.uri = "nbd+unix:///?socket=%s" % self.sock

    def position(self):
        return os.stat(self.log).st_size

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def need_plugin_header():
    if shutil.which("nbdkit") is None:
        pytest.skip("nbdkit is not installed")
    if not os.path.exists("/usr/include/nbdkit-plugin.h"):
        pytest.skip("nbdkit-plugin-dev is not installed (scripts/install-deps installs it)")


@pytest.mark.parametrize("seed", CUT_SEEDS)
def test_cuts_of_recorded_writes(ubtrfs_bin, scratch, seed):
    need_plugin_header()
    d = Path(scratch) / ("cuts-%d" % seed)
    d.mkdir()
    img, base = d / "fs.img", d / "base.img"
    make_image(img)
    T.copy_sparse(img, base)
    rec = Recorder(img, d / "writes.log", d)
    try:
        with fuse_mounted(ubtrfs_bin, [rec.uri], d / "mnt", "rw,commit=600,notreelog") as mnt:
            wl = CrashWorkload(mnt, seed, max_bytes=6 * MiB)
            wl.position = rec.position
            try:
                wl.run(CUT_OPS)
            finally:
                wl.close()
        # the unmount's commit: the last state is durable
        wl.synced.append((len(wl.states) - 1, rec.position()))
    finally:
        rec.close()
    entries, raw = parse_log(d / "writes.log")
    assert any(e[0] == REC_FLUSH for e in entries), "the recording holds no flush"
    born = [entry_index(entries, p) for p in wl.born]
    synced = [(j, entry_index(entries, p)) for j, p in wl.synced]
    cuts = cut_points(entries, CUT_SPREAD, CUT_SUPER_EVERY)
    states_checked = newer_super = 0
    seen_states = set()
    for k in cuts:
        # the state of the last fsync that had returned by k must be there, or a later one that was
        # there before k (a commit that began before the cut)
        done = max(j for j, at in synced if at <= k)
        candidates = [j for j in range(done, len(wl.states)) if born[j] <= k]
        for variant in range(CUT_VARIANTS if k < len(entries) else 1):
            cut = d / "cut.img"
            npending, nlanded = build_cut(base, cut, entries, raw, k, variant)
            if variant > 0 and npending == 0:
                break
            what = "seed %d cut %d/%d variant %d (%d of %d pending writes landed)" % (
                seed, k, len(entries), variant, nlanded, npending)
            progs_check([cut])
            got = kernel_seen([cut], d / "kmnt")
            j = matching_state(wl, got, candidates)
            assert j is not None, what + ": " + explain(wl, got, candidates, "the kernel's mount")
            got2 = ubtrfs_seen(ubtrfs_bin, [cut], d / "umnt")
            j2 = matching_state(wl, got2, candidates)
            assert j2 is not None, what + ": " + explain(wl, got2, candidates, "the ubtrfs mount")
            # ubtrfs opens the newest valid superblock copy (docs/damage.md), the kernel the primary:
            # when only a mirror of a commit's superblock landed, ubtrfs shows that commit, the
            # kernel the one before; never an older one
            assert j2 >= j, what + ": the ubtrfs mount shows an older state (%d) than the kernel's (%d)" % (j2, j)
            if j2 != j:
                newer_super += 1
            progs_check([cut])
            states_checked += 1
            seen_states.add(j)
            os.unlink(cut)
    print("seed %d: %d operations, %d fsyncs, %d log entries, %d cut points, %d crash states checked, "
          "%d distinct states seen, %d where ubtrfs took a newer superblock mirror than the kernel's primary" % (
              seed, wl.nops, len(wl.synced) - 2, len(entries), len(cuts), states_checked, len(seen_states),
              newer_super))
    T.rmtree(d)
