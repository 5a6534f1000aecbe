# SPDX-License-Identifier: MIT
"""Several processes at once on the read-write mount (issue 30).

Four processes each run a seeded random workload (workload.py, the calls test_mount_rw.py runs)
in a directory of their own, and now and then work in a directory they all share: files made
there, moved there from their own directory and back, renamed, hard-linked across, removed. Each
process touches only names of its own in the shared directory, so what each one does, and the
tree it leaves, does not depend on how the processes interleave; the calls themselves do
interleave on the daemon's threads, in every directory at once.

Then the ubtrfs image is unmounted, btrfs check judges it, and the kernel's mount of it must show
the tree the ubtrfs mount showed before the unmount, inode numbers included. The same processes
run on the kernel's own btrfs as the reference: every process's results must be the kernel's, and
so must the whole tree (but inode numbers, which depend on the interleaving).

Budget: about 10 s under ASan; a binary built with ThreadSanitizer (make TSAN=1 integration-tsan
runs this file) runs fewer operations.
"""

import os
import pickle
import signal
import time
from pathlib import Path

import pytest

import ubtrfs_testlib as T
import workload as W
from test_mount import fuse_mounted
from test_mount_rw import ALLOWED, FIELDS, differences, make_image, progs_check

MiB = T.MiB
NPROCS = 4
SEEDS = [1, 2] if T.LONG_TESTS else [1]


def _nops(ubtrfs_bin):
    # ThreadSanitizer makes the daemon ~10x slower: fewer operations keep the run short
    tsan = "build-tsan" in str(T.ubtrfs_binary().resolve()) or "build-tsan" in os.environ.get("UBTRFS", "")
    return 40 if tsan else (300 if T.LONG_TESTS else 100)


class SharedWorkload(W.Workload):
    """A workload rooted in its own directory that also works in `shared`, under names that begin
    with its own prefix: what it does there depends on its own random choices only."""

    OPS = W.Workload.OPS + (("shared", 12),)

    def __init__(self, mnt, shared, prefix, seed, **kw):
        super().__init__(mnt, seed, **kw)
        self.shared = shared
        self.prefix = prefix

    def _mine(self):
        return sorted(n for n in os.listdir(self.shared) if n.startswith(self.prefix))

    def op_shared(self, ents):
        rng = self.rng
        mine = self._mine()
        files = [e for e in ents if e.type == "file" and e.rel]
        r = rng.random()
        if r < 0.25 and files:
            # a file of one's own moves into the shared directory (a rename across directories)
            f = rng.choice(files)
            dst = "%s%d" % (self.prefix, rng.randint(0, 10 ** 6))
            self.log("shared: move in %r -> %s" % (f.rel, dst))
            os.rename(self.path(f.rel), os.path.join(self.shared, dst))
        elif r < 0.45 and mine:
            # and back, under a new name in one of one's own directories
            src = rng.choice(mine)
            d = self.pick(ents, self.writable_dir)
            rel = self.new_child(ents, d) if d else None
            if rel is None:
                return
            self.log("shared: move out %s -> %r" % (src, rel))
            os.rename(os.path.join(self.shared, src), self.path(rel))
        elif r < 0.6 and files:
            f = rng.choice(files)
            dst = "%slink%d" % (self.prefix, rng.randint(0, 10 ** 6))
            self.log("shared: link %r -> %s" % (f.rel, dst))
            os.link(self.path(f.rel), os.path.join(self.shared, dst))
        elif r < 0.75 and mine:
            src = rng.choice(mine)
            dst = "%sren%d" % (self.prefix, rng.randint(0, 10 ** 6))
            self.log("shared: rename %s -> %s" % (src, dst))
            os.rename(os.path.join(self.shared, src), os.path.join(self.shared, dst))
        elif r < 0.85 and mine:
            victim = rng.choice(mine)
            self.log("shared: remove %s" % victim)
            p = os.path.join(self.shared, victim)
            if os.path.isdir(p) and not os.path.islink(p):
                os.rmdir(p)
            else:
                os.unlink(p)
        else:
            name = "%snew%d" % (self.prefix, rng.randint(0, 10 ** 6))
            data = self.data(rng.randint(0, 20000))
            self.log("shared: create %s len %d" % (name, len(data)))
            with open(os.path.join(self.shared, name), "wb") as f:
                f.write(data)


def _run_procs(mnt, seed, nops):
    """NPROCS workloads at once on `mnt`: their op logs, in process order."""
    shared = os.path.join(mnt, "shared")
    os.mkdir(shared)
    children = []
    for i in range(NPROCS):
        own = os.path.join(mnt, "p%d" % i)
        os.mkdir(own)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                os.close(r)
                # the workloads make no subvolumes, and their tops are plain directories, of which
                # btrfs has no subvolume flags to tell (EINVAL): nothing is read-only
                W._subvol_ro = lambda path: False
                wk = SharedWorkload(own, shared, "p%d-" % i, seed * 100 + i, nodesize=16384, max_bytes=12 * MiB,
                                    max_file=2 * MiB, salt="multiproc", xattr_grow=False)
                try:
                    wk.run(nops, allowed=ALLOWED + ("shared",))
                    out = ("ok", wk.op_log)
                except BaseException as e:
                    out = ("error", wk.op_log, repr(e))
                data = pickle.dumps(out)
                view = memoryview(data)
                while view:
                    view = view[os.write(w, view):]
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        os.close(w)
        children.append((pid, r))
    logs = []
    deadline = time.monotonic() + 600
    for pid, r in children:
        chunks = []
        while True:
            b = os.read(r, 1 << 16)
            if not b:
                break
            chunks.append(b)
        os.close(r)
        while True:
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                break
            time.sleep(0.05)
        assert chunks, "workload process %d died" % pid
        out = pickle.loads(b"".join(chunks))
        assert out[0] == "ok", "workload process failed: %s after\n%s" % (out[2], "\n".join(out[1][-10:]))
        logs.append(out[1])
    return logs


def _view(mnt):
    entries = T.walk_tree(mnt, btrfs=False)
    hashes = T.hash_files(mnt, entries)
    out, inos = {}, {}
    for p, e in entries.items():
        v = {k: e[k] for k in FIELDS if k in e}
        if e["type"] == "file":
            v["sha256"] = hashes[p][1]
        out[p] = v
        inos[p] = e["ino"]
    return out, inos


@pytest.mark.parametrize("seed", SEEDS)
def test_processes_at_once(ubtrfs_bin, scratch, seed):
    nops = _nops(ubtrfs_bin)
    d = Path(scratch) / ("multiproc-%d" % seed)
    d.mkdir()
    kimg, uimg = d / "kernel.img", d / "ubtrfs.img"
    make_image(kimg, 512 * MiB)
    make_image(uimg, 512 * MiB)

    with T.mounted([kimg], d / "kmnt", readonly=False) as km:
        klogs = _run_procs(km, seed, nops)
        kview, _ = _view(km)
    log = []
    with fuse_mounted(ubtrfs_bin, [uimg], d / "umnt", "rw", log=log) as um:
        ulogs = _run_procs(um, seed, nops)
        uview, uinos = _view(um)
    bad = [ln for ln in log[0].splitlines() if ": error:" in ln or "Sanitizer" in ln or "runtime error" in ln]
    assert not bad, log[0][-3000:]

    # each process did what it did on the kernel, with the same results
    for i, (a, b) in enumerate(zip(klogs, ulogs)):
        for j, (x, y) in enumerate(zip(a, b)):
            assert x == y, "seed %d process %d operation %d differs:\n kernel %s\n ubtrfs %s\nbefore: %s" % (
                seed, i, j, x, y, "\n".join(a[max(0, j - 8):j]))
        assert len(a) == len(b)
    assert sum(1 for lg in ulogs for ln in lg if "shared:" in ln) > 0
    problems = differences(kview, uview)
    assert not problems, "seed %d: the trees differ from the kernel's:\n  %s" % (seed, "\n  ".join(problems))

    # what ubtrfs left: btrfs check, and the kernel's own mount shows the same tree, inode numbers too
    progs_check(uimg)
    with T.mounted([uimg], d / "kmnt2", readonly=True) as km2:
        kview2, kinos2 = _view(km2)
    problems = differences(uview, kview2)
    assert not problems, "seed %d: the kernel's mount of the ubtrfs image differs from what ubtrfs showed:\n  %s" % (
        seed, "\n  ".join(problems))
    wrong = sorted(p for p in uinos if kinos2.get(p) != uinos[p])
    assert not wrong, "seed %d: inode numbers differ: %r" % (seed, [(p, uinos[p], kinos2.get(p)) for p in wrong[:10]])
    T.rmtree(d)
