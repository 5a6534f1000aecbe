# SPDX-License-Identifier: MIT
"""Crash cuts on RAID5/6 with devices then removed: no write hole.

A run of the file API (tests/tools/fileapi_driver.c --script: files written over whole and partial
full stripes, overwritten, truncated, renamed, deleted, four commits) on RAID5 (3 devices) and RAID6
(4 devices) data, metadata RAID1 / RAID1C3 or RAID5 / RAID6 too, is recorded (lib/dev's recorder) and
cut (tests/tools/crash_cuts.c): at points spread over the run and at both sides of superblock writes,
the pending writes of each cut kept, dropped and reordered by a seed. For every cut and every choice
of one (RAID5) or two (RAID6) devices then removed, the ubtrfs reader (tests/tools/tree_digest.c, the
library `ubtrfs ls` and `cat` use) opens what is left and shows exactly one commit: the newest one a
remaining superblock names, names and file bytes equal to the model of that commit. Committed data
must survive a cut plus lost devices: a stripe a commit is still writing never holds committed data
(docs/design.md, Space). For a few cuts `btrfs check` passes on the full set and the kernel mounts
what is left `-o degraded,ro` and shows the commit its superblocks name.

Also the I/O-error matrix on RAID5 and RAID6 (tests/tools/engine_driver.c --fault): one write or
flush fails at points over a run; the commit fails, the engine stops, the image passes btrfs check
and holds exactly one commit, also with a device removed.

Budget: under a minute under ASan; UBTRFS_LONG_TESTS=1 cuts at every superblock write, checks every
removal choice and every I/O error point, and runs every profile pair.
"""

import hashlib
import itertools
import os
import re

import pytest

import ubtrfs_testlib as T
from test_engine import casedir, make_images, mkfs, progs_check, super_generation  # noqa: F401

LONG = T.LONG_TESTS
STRIPE = 64 << 10
M64 = (1 << 64) - 1


@pytest.fixture(scope="module")
def fileapi():
    return T.test_tool("fileapi_driver")


@pytest.fixture(scope="module")
def digest_tool():
    return T.test_tool("tree_digest")


@pytest.fixture(scope="module")
def engine_driver():
    return T.test_tool("engine_driver")


def stream(n, seed):
    """The bytes fileapi_driver's `write PATH OFF LEN SEED` writes (its xorshift stream)."""
    st = (seed | 1) & M64
    out = bytearray(n)
    for i in range(n):
        st ^= (st << 13) & M64
        st ^= st >> 7
        st ^= (st << 17) & M64
        out[i] = (st >> 24) & 0xFF
    return bytes(out)


class Run:
    """A script for the driver and the model of every commit it makes (files in the top directory)."""

    def __init__(self):
        self.lines = []
        self.files = {}
        self.states = []
        self.seed = 100

    def create(self, name):
        self.lines.append("create /%s 644" % name)
        self.files[name] = bytearray()

    def write(self, name, off, n):
        self.seed += 1
        self.lines.append("write /%s %d %d %d" % (name, off, n, self.seed))
        data = self.files[name]
        if len(data) < off:
            data.extend(bytes(off - len(data)))
        data[off:off + n] = stream(n, self.seed)

    def truncate(self, name, size):
        self.lines.append("truncate /%s %d" % (name, size))
        data = self.files[name]
        if size < len(data):
            del data[size:]
        else:
            data.extend(bytes(size - len(data)))

    def unlink(self, name):
        self.lines.append("unlink /%s" % name)
        del self.files[name]

    def rename(self, a, b):
        self.lines.append("rename /%s /%s" % (a, b))
        self.files[b] = self.files.pop(a)

    def commit(self, last=False):
        # the driver commits what is left after the script's last line itself
        if not last:
            self.lines.append("commit")
        self.states.append({n: bytes(d) for n, d in self.files.items()})


def workload(full):
    """Writes over whole full stripes (`full` bytes of data each) and parts of them, overwrites that
    split extents inside a stripe an older commit holds, truncates, renames, deletes: four commits."""
    r = Run()
    r.states.append({})
    r.create("a")
    r.write("a", 0, 2 * full)               # two whole full stripes
    r.create("b")
    r.write("b", 0, 5000)                   # part of a stripe
    r.create("c")
    r.write("c", 0, full + 3 * 4096)        # one and a bit
    r.commit()
    r.write("a", 70000, 20000)              # inside committed stripes: copied elsewhere
    r.write("b", 5000, full)                # grows across a stripe boundary
    r.create("d")
    r.write("d", 4096, STRIPE)              # a hole, then one strip
    r.commit()
    r.unlink("c")
    r.truncate("a", 150000)
    r.rename("b", "e")
    r.write("d", 0, 8192)
    r.commit()
    r.create("f")
    r.write("f", 0, full // 2 + 1000)
    r.unlink("d")
    r.write("e", 1000, 4096)
    r.commit(last=True)
    return r


# name, data profile, metadata profile, devices, nodesize, parity devices
CASES = [
    ("raid5-data-raid1-meta", "raid5", "raid1", 3, 16384, 1),
    ("raid6-data-raid6-meta", "raid6", "raid6", 4, 4096, 2),
]
if LONG:
    CASES += [
        ("raid6-data-raid1c3-meta-long", "raid6", "raid1c3", 4, 16384, 2),
        ("raid5-data-raid5-meta-long", "raid5", "raid5", 3, 4096, 1),
    ]


def device_generation(img):
    """The newest valid superblock copy of an image (what the reader takes from it)."""
    gens = [super_generation(img, m) for m in range(3)]
    return max(g for g in gens if g is not None)


def read_digest(tool, devs):
    cp = T.run([tool, *devs], check=False, timeout=300)
    out = cp.stdout.decode("utf-8", "replace")
    err = cp.stderr.decode("utf-8", "replace")
    files = {}
    gen = None
    for ln in out.splitlines():
        m = re.match(r"generation (\d+) errors (\d+)$", ln)
        if m:
            gen = int(m.group(1))
            continue
        name, kind, size, sha = ln.split(" ")
        files[name] = (kind, None if size == "-" else int(size), sha)
    return cp.returncode, gen, files, err


def expected(state):
    return {n: ("file", len(d), hashlib.sha256(d).hexdigest()) for n, d in state.items()}


def kernel_files(devs, mnt):
    with T.mounted(devs, mnt, options="degraded") as m:
        got = {}
        for name in os.listdir(m):
            with open(os.path.join(m, name), "rb") as f:
                data = f.read()
            got[name] = data
    return got


def removal_choices(ndev, nparity, cut_index):
    """Every set of `nparity` devices to remove (LONG); a rotating one of them per cut otherwise."""
    every = list(itertools.combinations(range(ndev), nparity))
    if LONG:
        return [()] + every
    return [(), every[cut_index % len(every)]]


def reads_one_commit(tool, imgs, state, removals, label):
    """For each choice of devices removed, the reader shows exactly the newest commit a remaining
    superblock names: that generation's names and file bytes. The generations seen."""
    devgen = [device_generation(x) for x in imgs]
    assert set(devgen) <= set(state), (label, devgen)
    seen = set()
    for gone in removals:
        rest = [str(x) for d, x in enumerate(imgs) if d not in gone]
        want = max(devgen[d] for d in range(len(imgs)) if d not in gone)
        rc, gen, files, err = read_digest(tool, rest)
        what = "%s without devices %r (superblock generations %r)" % (label, gone, devgen)
        assert rc == 0, "%s: exit %d\n%s" % (what, rc, err[-3000:])
        assert gen == want, "%s: reader at generation %r, expected %d" % (what, gen, want)
        assert files == state[gen], "%s: not the state of commit %d:\n got %r\nwant %r" % (
            what, gen, files, state[gen])
        seen.add(gen)
    return seen


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_cuts_with_devices_removed(fileapi, digest_tool, engine_driver, casedir, ubtrfs_bin, case):  # noqa: F811
    name, data, meta, ndev, nodesize, nparity = case
    imgs = make_images(casedir, ndev)
    mkfs(imgs, meta, data, nodesize)
    gen0 = super_generation(imgs[0])
    run = workload((ndev - nparity) * STRIPE)
    script = casedir / "script.txt"
    script.write_text("\n".join(run.lines) + "\n")
    crash = casedir / "crash"
    crash.mkdir()
    spread, stride = (16, 1) if LONG else (16, 8)
    cp = T.run([fileapi, "--script", script, "--crash-dir", crash, "--crash-cuts", spread,
                "--crash-supers", stride, *imgs], check=False, timeout=900)
    out = cp.stdout.decode()
    assert cp.returncode == 0, out[-2000:] + cp.stderr.decode("utf-8", "replace")[-3000:]
    ncommits = len(run.states) - 1
    assert "script done commits %d" % ncommits in out, out[:500]
    cuts = [int(c) for c in re.findall(r"^cut (\d+) ", out, re.M)]
    assert len(cuts) > spread, out[-2000:]
    state = {gen0 + j: expected(s) for j, s in enumerate(run.states)}

    seen = set()
    checked_kernel = 0
    reopened = False
    for c in cuts:
        cut = [crash / ("cut%d_dev%d.img" % (c, d)) for d in range(ndev)]
        seen |= reads_one_commit(digest_tool, cut, state, removal_choices(ndev, nparity, c), "cut %d" % c)
        # a few cuts: btrfs check on the full set, the kernel on what is left of it
        if c in (cuts[len(cuts) // 2], cuts[-1]) or (LONG and c % 4 == 0):
            progs_check(cut)
            gone = removal_choices(ndev, nparity, c + 1)[-1] or tuple(range(nparity))
            rest = [x for d, x in enumerate(cut) if d not in gone]
            primary = max(super_generation(x) for x in rest)
            got = kernel_files(rest, casedir / "mnt")
            assert expected(got) == state[primary], "kernel, cut %d without %r: not commit %d" % (
                c, gone, primary)
            checked_kernel += 1
            # and the command: `ubtrfs ls` and `cat` on what is left, the commit its newest superblock names
            newest = max(device_generation(x) for x in rest)
            ls = T.ubtrfs("ls", "--json", *rest)
            assert ls.returncode == 0, T.describe(ls)
            names = {o["name"] for o in T.parse_ls_json(ls.stdout)}
            assert names == set(state[newest]), (c, gone, newest, names)
            for fname in sorted(names)[:2]:
                rc, size, sha, cat = T.cat_hash(rest, "/" + fname)
                assert rc == 0 and (size, sha) == state[newest][fname][1:], T.describe(cat)
        # the first cut between superblock writes: the engine opens it read-write (devices one commit
        # behind included, as the kernel does) and commits on top; btrfs check agrees
        if not reopened and len({device_generation(x) for x in cut}) > 1:
            cp = T.run([engine_driver, "--check-writes", "create", "g", 60, 30, *cut], check=False)
            assert cp.returncode == 0, cp.stderr.decode("utf-8", "replace")[-3000:]
            progs_check(cut)
            reopened = True
        for x in cut:
            x.unlink()
    assert checked_kernel >= 2 and reopened
    # the cuts saw the start, the end and every commit between
    assert set(range(gen0, gen0 + ncommits + 1)) <= seen, (seen, gen0)


# name, data profile, metadata profile, devices, parity devices
IO_CASES = [("raid5", "raid5", "raid1", 3, 1), ("raid6", "raid6", "raid6", 4, 2)]


@pytest.mark.parametrize("case", IO_CASES, ids=[c[0] for c in IO_CASES])
def test_io_errors_raid56(engine_driver, digest_tool, casedir, ubtrfs_bin, case):  # noqa: F811
    """One write or flush fails (lib/dev's faulty device, counted over every device) at points spread
    over a run of three commits (every point with UBTRFS_LONG_TESTS=1): the commit fails with the
    error, the engine stops, and what is on the devices holds exactly one commit, with every device
    and with one (RAID5) or two (RAID6) of them removed; btrfs check passes on a few."""
    name, data, meta, ndev, nparity = case
    base = make_images(casedir, ndev)
    mkfs(base, meta, data, 4096)
    gen0 = super_generation(base[0])
    n, every = 240, 80
    empty = hashlib.sha256(b"").hexdigest()
    state = {gen0 + j: {"f%06d" % i: ("file", 0, empty) for i in range(j * every)} for j in range(n // every + 1)}
    work = [casedir / ("work%d.img" % d) for d in range(ndev)]

    def fresh():
        for b, w in zip(base, work):
            T.run(["cp", "--sparse=always", b, w])

    fresh()
    cp = T.run([engine_driver, "--fault", 0, "create", "f", n, every, *work])
    writes, flushes = (int(x) for x in re.search(r"^io \d+ (\d+) (\d+) injected", cp.stdout.decode(), re.M).groups())
    total = writes + flushes
    points = range(1, total + 1) if LONG else sorted({1, total // 3, 2 * total // 3, total})
    seen = set()
    for k, nth in enumerate(points):
        fresh()
        cp = T.run([engine_driver, "--fault", nth, "create", "f", n, every, *work], check=False)
        err = cp.stderr.decode("utf-8", "replace")
        assert cp.returncode == 1, (nth, err[-2000:])
        assert "Input/output error" in err and "injected 1" in cp.stdout.decode(), (nth, err[-2000:])
        seen |= reads_one_commit(digest_tool, work, state, removal_choices(ndev, nparity, k),
                                 "I/O error at %d" % nth)
        if LONG or k == len(points) // 2:
            progs_check(work)
    assert len(seen) >= 2, seen
