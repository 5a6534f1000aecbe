# SPDX-License-Identifier: MIT
"""Crash cuts of the read-write mount with the fsync log on (issue 31).

test_mount_crash.py cuts recorded device writes of a mount with notreelog, where every fsync is a
commit. Here the same seeded workload (CrashWorkload: creates, writes, truncates, renames of files
and directories, hard links, unlinks, orphans, symlinks, mkdir/rmdir, chmod, fsync / fdatasync /
fsyncdir) runs through `ubtrfs mount -o rw,commit=600` with the log on, so most fsyncs write the
log and a crash leaves the last commit plus the log. Every device write and flush is recorded
(tests/tools/nbd_record.c), and images are built of what a crash could have left:

  * right after each fsync returned (its last flush on disk: the log and the superblock that
    points at it);
  * just before each fsync's last flush, its superblock write landed or not;
  * at seeded random points, the writes since the last flush landed in any subset and order (the
    disk may reorder writes between two flushes).

Every state: `btrfs check` is clean with the log pending; the kernel's read-write mount replays it,
and `btrfs check` is clean after; ubtrfs's read-write mount (of another copy) replays it into the
trees, shows what the kernel showed, and `btrfs check` is clean after. The tree shown must keep
every fsync that returned before the cut (the fsynced file or directory as it was at its fsync, or
as a later change that reached the disk before the cut left it; a file below a directory moved
before its fsync may keep its old path, as POSIX allows and the kernel does, but not lose its
bytes), and hold nothing half-written: every name is one the filesystem had, every file's bytes
are bytes some file had. The counts are printed (-s).

Budget: about 40 s under ASan; UBTRFS_LONG_TESTS runs more seeds, operations and cuts.
"""

import os
import random
from pathlib import Path

import pytest

import ubtrfs_testlib as T
from test_mount import fuse_mounted
from test_mount_crash import (REC_FLUSH, CrashWorkload, Recorder, as_seen, build_cut, entry_index,
                              make_image, need_plugin_header, parse_log, seen, sha, start_daemon, take_away,
                              ubtrfs_seen)
from test_enospc import progs_check

MiB = T.MiB
LONG = T.LONG_TESTS
SEEDS = list(range(1, 9)) if LONG else [1, 2]
OPS = 600 if LONG else 240
RANDOM_CUTS = 40 if LONG else 10     # seeded cut points between the fsyncs
VARIANTS = 3                         # pending writes: none, all, a shuffled subset
BEFORE_FLUSH_EVERY = 1 if LONG else 3  # the cut before every n-th fsync's last flush


class LogWorkload(CrashWorkload):
    """CrashWorkload that notes when directories moved (an fsync below one need not keep its path)."""

    def __init__(self, *a, **kw):
        self.inodes = []     # per state: inode id -> its bytes (set before the first state is made)
        self.fsync_inode = []  # per fsync: the inode of its target (None: a directory or an orphan)
        super().__init__(*a, **kw)
        self.dir_moves = []  # (state index after the move, new path)

    def state(self):
        self.inodes.append(dict(self.data))
        return super().state()

    def op_fsync(self):
        super().op_fsync()
        v = self.paths.get(self.log[-1][len("fsync "):])
        self.fsync_inode.append(v[2] if v and v[0] == "file" and self.log[-1] != "fsync orphan" else None)

    def op_rename(self):
        before = dict(self.paths)
        n = len(self.states)
        super().op_rename()
        if len(self.states) > n:
            _, src, dst = self.log[-1].split()[:3]
            if before[src][0] == "dir":
                self.dir_moves.append((len(self.states) - 1, dst))


def fsync_targets(wl):
    """[(target path or None for an orphan, state it made durable, log position at its return)]"""
    targets = [ln[len("fsync "):] for ln in wl.log if ln.startswith("fsync ")]
    assert len(targets) == len(wl.synced) - 1, "fsyncs in the log %d, recorded %d" % (len(targets), len(wl.synced) - 1)
    inodes = wl.fsync_inode + [None] * (len(targets) - len(wl.fsync_inode))
    return [(None if t == "orphan" else t, j, pos, i) for t, (j, pos), i in zip(targets, wl.synced[1:], inodes)]


class Judge:
    """What a crash at entry k may show, from the model's states and when each came to be."""

    def __init__(self, wl, entries):
        self.wl = wl
        self.seen_states = [as_seen(s) for s in wl.states]
        self.born = [entry_index(entries, p) for p in wl.born]
        self.fsyncs = [(t, j, entry_index(entries, p), i) for t, j, p, i in fsync_targets(wl)]
        self.sha = {}
        # what states 0..j had, cumulatively: names with their kinds, file bytes
        self.names_upto, self.bytes_upto = [], []
        names, data = set(), set()
        for st in self.seen_states:
            for p, v in st.items():
                names.add((p, v[0]))
                if v[0] == "file":
                    data.add(v[2])
            self.names_upto.append(frozenset(names))
            self.bytes_upto.append(frozenset(data))

    def last_state(self, k):
        """The newest state that came to be before the cut (born is not decreasing)."""
        j = 0
        while j + 1 < len(self.born) and self.born[j + 1] <= k:
            j += 1
        return j

    def inode_bytes(self, inode, first, last):
        """The sha256 of every content the inode had in states first..last."""
        out = set()
        for i in range(first, last + 1):
            b = self.wl.inodes[i].get(inode)
            if b is not None:
                h = self.sha.get(id(b))
                if h is None or h[0] is not b:
                    h = self.sha[id(b)] = (b, sha(b))
                out.add(h[1])
        return out

    def moved_above(self, path, state):
        return any(j <= state and path.startswith(dst + "/") for j, dst in self.wl.dir_moves)

    def under_old_path(self, path, kind, last):
        """A name made below a directory after it moved, shown below the directory's old path: the
        entry was logged, the directory's move was not (POSIX; the kernel's log does the same)."""
        parent, _, base = path.rpartition("/")
        if parent and (parent, "dir") not in self.names_upto[last] and not self.under_old_path(parent, "dir", last):
            return False
        return any(q.rsplit("/", 1)[-1] == base and t == kind and self.moved_above(q, last)
                   for q, t in self.names_upto[last])

    def problems(self, got, k):
        """(problems, fsyncs checked, names and fsyncs kept below a moved directory's old path)"""
        last = self.last_state(k)
        out = []
        by_bytes = 0
        for p, v in sorted(got.items()):
            if not p:
                continue
            if (p, v[0]) not in self.names_upto[last]:
                if self.under_old_path(p, v[0], last):
                    by_bytes += 1
                    continue
                out.append("%r (%s): a name the filesystem never had" % (p, v[0]))
            if v[0] == "file" and v[2] not in self.bytes_upto[last]:
                out.append("%r: bytes no file ever had (half-written)" % p)
        checked = 0
        for target, j, at, inode in self.fsyncs:
            if at > k or target is None:
                continue
            checked += 1
            allowed = [self.seen_states[i].get(target) for i in range(j, last + 1)]
            if got.get(target) in allowed:
                continue
            g = got.get(target)
            if inode is not None and g and g[0] == "file" and g[2] in self.inode_bytes(inode, j, last):
                # the file under the same name with bytes it got later through another of its names
                continue
            want = self.seen_states[j].get(target)
            if want and self.moved_above(target, j):
                # POSIX: fsync of a file does not make its parents' renames durable (the kernel keeps
                # the old path then); its bytes must be somewhere
                if want[0] != "file" or any(v[0] == "file" and v[2] in {a[2] for a in allowed if a and a[0] == "file"}
                                            for v in got.values()):
                    by_bytes += 1
                    continue
            out.append("fsync of %r (state %d, returned at entry %d) lost: %r, want one of %r" % (
                target, j, at, _brief(got.get(target)), [_brief(a) for a in allowed[:3]]))
        return out, checked, by_bytes


def _brief(v):
    if v is None or v[0] != "file":
        return v
    return ("file", oct(v[1]), v[2][:12])


def cut_plan(entries, judge, rng):
    """[(k, variants)]: after each fsync's return, before some fsyncs' last flush, random points."""
    plan = {}
    flushes = [i for i, e in enumerate(entries) if e[0] == REC_FLUSH]
    for n, (_, _, at, _) in enumerate(judge.fsyncs):
        plan[at] = 1
        if n % BEFORE_FLUSH_EVERY == 0:
            # the fsync's last flush is the last flush before its return: cut right before it
            last = max((i for i in flushes if i < at), default=None)
            if last is not None and last > 0:
                plan[last] = max(plan.get(last, 0), 2)
    for _ in range(RANDOM_CUTS):
        plan[rng.randrange(1, len(entries))] = VARIANTS
    plan[len(entries)] = 1
    return sorted(plan.items())


@pytest.mark.parametrize("seed", SEEDS)
def test_log_crash_cuts(ubtrfs_bin, scratch, seed):
    need_plugin_header()
    d = Path(scratch) / ("logcuts-%d" % seed)
    d.mkdir()
    try:
        run_cuts(ubtrfs_bin, d, seed)
    finally:
        if os.environ.get("UBTRFS_KEEP_IMAGES") != "1":
            T.rmtree(d)


def run_cuts(ubtrfs_bin, d, seed):
    img, base = d / "fs.img", d / "base.img"
    make_image(img, 192 * MiB)
    T.copy_sparse(img, base)
    rec = Recorder(img, d / "writes.log", d)
    try:
        with fuse_mounted(ubtrfs_bin, [rec.uri], d / "mnt", "rw,commit=600") as mnt:
            wl = LogWorkload(mnt, seed, max_bytes=5 * MiB)
            wl.position = rec.position
            try:
                wl.run(OPS)
            finally:
                wl.close()
        # the unmount's commit: the last state is durable
        wl.synced.append((len(wl.states) - 1, rec.position()))
        wl.log.append("fsync orphan")  # (no target: the unmount)
    finally:
        rec.close()
    entries, raw = parse_log(d / "writes.log")
    (d / "ops.log").write_text("\n".join(wl.log) + "\n")  # for UBTRFS_KEEP_IMAGES=1
    judge = Judge(wl, entries)
    rng = random.Random("logcuts:%d" % seed)
    plan = cut_plan(entries, judge, rng)
    states = logs_pending = differ = checked = by_bytes = 0
    for k, nvar in plan:
        for variant in range(nvar):
            cut = d / "cut.img"
            npending, nlanded = build_cut(base, cut, entries, raw, k, variant)
            if variant > 0 and npending == 0:
                break
            what = "seed %d cut %d/%d variant %d (%d of %d pending writes landed)" % (
                seed, k, len(entries), variant, nlanded, npending)
            with open(cut, "rb") as f:
                f.seek((64 << 10) + 96)
                logs_pending += int.from_bytes(f.read(8), "little") != 0
            progs_check([cut])
            if os.environ.get("UBTRFS_KEEP_IMAGES") == "1":
                T.copy_sparse(cut, d / "pending.img")  # the state judged last, as the cut left it
            kimg, uimg = d / "k.img", d / "u.img"
            gens = set(T.super_generations(cut).values())
            T.copy_sparse(cut, kimg)
            os.replace(cut, uimg)
            with T.mounted([kimg], d / "kmnt", readonly=False) as km:
                got = seen(km)
            progs_check([kimg])
            os.unlink(kimg)
            probs, n, nb = judge.problems(got, k)
            if k == len(entries) and got != judge.seen_states[-1]:
                probs.append("after the unmount's commit the tree is not the last state")
            assert not probs, "%s, the kernel's replay:\n  %s\nthe last operations:\n  %s" % (
                what, "\n  ".join(probs[:12]), "\n  ".join(wl.log[-12:]))
            got2 = ubtrfs_seen(ubtrfs_bin, [uimg], d / "umnt")
            progs_check([uimg])
            os.unlink(uimg)
            if got2 != got:
                # ubtrfs opens the newest valid superblock copy, the kernel the primary
                # (docs/damage.md): only where the copies disagree may the two differ
                assert len(gens) > 1, "%s: ubtrfs's replay differs from the kernel's:\n  %s" % (
                    what, "\n  ".join(_differences(got, got2)))
                differ += 1
                probs, _, _ = judge.problems(got2, k)
                assert not probs, "%s, ubtrfs's replay:\n  %s" % (what, "\n  ".join(probs[:12]))
            states += 1
            checked += n
            by_bytes += nb
    print("seed %d: %d operations, %d fsyncs, %d device writes and flushes, %d cut points, %d crash states "
          "(%d with a log pending), %d fsync promises checked (%d names and files kept below a moved directory's "
          "old path), "
          "%d where ubtrfs took a newer superblock mirror" % (
              seed, wl.nops, len(judge.fsyncs) - 1, len(entries), len(plan), states, logs_pending, checked,
              by_bytes, differ))
    assert logs_pending >= len(judge.fsyncs) // 3, "only %d crash states had a log pending" % logs_pending


def _differences(want, got, limit=12):
    out = ["missing %r" % p for p in sorted(set(want) - set(got))]
    out += ["unexpected %r" % p for p in sorted(set(got) - set(want))]
    out += ["%r: kernel %r ubtrfs %r" % (p, _brief(want[p]), _brief(got[p]))
            for p in sorted(set(want) & set(got)) if want[p] != got[p]]
    return out[:limit]


def test_mount_frees_dir_handles_of_an_aborted_session(ubtrfs_bin, scratch):
    """The read-write mounts that judge every crash state end with a lazy unmount, and the kernel
    sends RELEASEDIR after close(2) returned: a session that ends first must still free its open
    directory handles (else LeakSanitizer fails the daemon, now and then, after the cuts' walks).
    Made certain here: a directory stays open while the FUSE connection is aborted."""
    d = Path(scratch) / "abort-dirs"
    d.mkdir()
    img = d / "fs.img"
    make_image(img, 128 * MiB)
    mnt = d / "mnt"
    proc, errf = start_daemon(ubtrfs_bin, [img], mnt, "rw")
    fd = None
    mounted_ctl = False
    try:
        os.mkdir(mnt / "sub")
        fd = os.open(mnt / "sub", os.O_RDONLY | os.O_DIRECTORY)
        os.listdir(mnt / "sub")
        conn = os.minor(os.stat(mnt).st_dev)
        ctl = "/sys/fs/fuse/connections"
        if not os.path.exists(os.path.join(ctl, str(conn))):
            # the FUSE control filesystem, for the abort file (mounted for this test if nobody had)
            mounted_ctl = T.run(["mount", "-t", "fusectl", "fusectl", ctl], check=False).returncode == 0
        if not os.path.exists(os.path.join(ctl, str(conn), "abort")):
            pytest.skip("no FUSE control filesystem (fusectl) to abort the connection with")
        with open(os.path.join(ctl, str(conn), "abort"), "w") as f:
            f.write("1")
        proc.wait(60)
    finally:
        if mounted_ctl:
            T.run(["umount", ctl], check=False)
        if fd is not None:
            os.close(fd)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        take_away(mnt)
    errf.seek(0)
    err = errf.read().decode("utf-8", "replace")
    assert "LeakSanitizer" not in err and "runtime error" not in err, err[-3000:]
    T.rmtree(d)
