# SPDX-License-Identifier: MIT
"""fsync through the log tree (issue 31): ubtrfs writes the fsync log, the kernel replays it.

tests/tools/fileapi_driver.c runs a script through the file API on an image made by `ubtrfs
mkfs`: files written (plain and compressed), punched, truncated, preallocated, committed now and
then, fsynced through ub_fsw_fsync (which logs a regular file changed since the last commit,
range by range, without a commit), and then `crash`: the process ends without a commit, so the
disk holds the last commit plus the log. The model (Python) knows each file's bytes at the last
commit and at each fsync. Then:
  - the superblock points at a log (log_root) when the last fsync logged;
  - `btrfs check` and `ubtrfs check` are clean with the log pending, btrfs check again after
    each replay;
  - the kernel's read-write mount of a copy replays the log and shows every fsynced file with the
    bytes it had at its fsync, every other file as the last commit had it;
  - ubtrfs shows the same, replaying the log in memory (`mount -o ro`) and into the trees (the
    read-write mount).
Seeded random scripts (several files, ranges that split, merge and punch extents, holes, truncates
across logged ranges, fsync after fsync in one transaction, commits in between) and named recipes.

Budget: about 40 s under ASan; UBTRFS_LONG_TESTS runs more seeds and longer scripts,
UBTRFS_FSYNC_SEEDS=A-B the seeds A to B.
"""

import hashlib
import os
import random
from pathlib import Path

import pytest

import ubtrfs_testlib as T
from test_mount import fuse_mounted

MiB = T.MiB
M64 = (1 << 64) - 1
LONG = T.LONG_TESTS
SEEDS = list(range(1, 25)) if LONG else list(range(1, 7))
if os.environ.get("UBTRFS_FSYNC_SEEDS"):  # "A-B": seeds A to B, for long hunts
    _a, _b = os.environ["UBTRFS_FSYNC_SEEDS"].split("-")
    SEEDS = list(range(int(_a), int(_b) + 1))
NOPS = 160 if LONG else 60


@pytest.fixture(scope="module")
def driver():
    return T.test_tool("fileapi_driver")


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


def cstream(n, seed):
    """The bytes of `writec PATH OFF LEN SEED ALGO` (compressible)."""
    return bytes(ord("a") + (i // 11 + seed) % 26 for i in range(n))


class Script:
    """A driver script and the model: every file's bytes now, at the last commit, and as durable."""

    def __init__(self):
        self.lines = []
        self.now = {}        # path -> bytearray
        self.durable = {}    # path -> bytes: what must be there after the crash
        self.seed = 1000

    def op(self, line):
        self.lines.append(line)

    def mkdir(self, path):
        self.op("mkdir %s 755" % path)

    def create(self, path):
        self.op("create %s 644" % path)
        self.now[path] = bytearray()

    def _put(self, path, off, data):
        b = self.now[path]
        if len(b) < off:
            b.extend(bytes(off - len(b)))
        b[off:off + len(data)] = data

    def write(self, path, off, n, compressed=False):
        self.seed += 1
        if compressed:
            self.op("writec %s %d %d %d zstd" % (path, off, n, self.seed))
            self._put(path, off, cstream(n, self.seed))
        else:
            self.op("write %s %d %d %d" % (path, off, n, self.seed))
            self._put(path, off, stream(n, self.seed))

    def punch(self, path, off, n):
        self.op("punch %s %d %d" % (path, off, n))
        b = self.now[path]
        end = min(off + n, len(b))
        if off < end:
            b[off:end] = bytes(end - off)

    def truncate(self, path, size):
        self.op("truncate %s %d" % (path, size))
        b = self.now[path]
        if size < len(b):
            del b[size:]
        else:
            b.extend(bytes(size - len(b)))

    def fallocate(self, path, off, n, keep=False):
        self.op("fallocate %s %d %d%s" % (path, off, n, " keep" if keep else ""))
        b = self.now[path]
        if not keep and off + n > len(b):
            b.extend(bytes(off + n - len(b)))

    def commit(self):
        self.op("commit")
        self.durable = {p: bytes(b) for p, b in self.now.items()}

    def fsync(self, path):
        self.op("fsync %s" % path)
        self.durable[path] = bytes(self.now[path])

    def crash(self):
        self.op("crash")


def random_script(seed, nops):
    rng = random.Random(seed)
    s = Script()
    s.mkdir("/d")
    s.mkdir("/e")
    files = ["/d/a", "/d/b", "/e/c"]
    for f in files:
        s.create(f)
        s.write(f, 0, rng.choice((0, 3000, 40000, 200000)) or 1)
    s.commit()
    # a file born after the commit, in a directory the commit has
    s.create("/e/new")
    files.append("/e/new")
    for _ in range(nops):
        f = rng.choice(files)
        size = len(s.now[f])
        r = rng.random()
        if r < 0.40:
            off = rng.randrange(0, size + 65536) if rng.random() < 0.6 else rng.randrange(0, 1 << 20)
            off -= off % rng.choice((1, 512, 4096))
            s.write(f, off, rng.choice((1, 100, 4096, 5000, 65536, 150000)), compressed=rng.random() < 0.15)
        elif r < 0.50 and size:
            off = rng.randrange(0, size)
            s.punch(f, off, rng.choice((1, 4096, 12288, 100000)))
        elif r < 0.58:
            s.truncate(f, rng.choice((0, size // 2, size + 5000, rng.randrange(0, 300000))))
        elif r < 0.64:
            s.fallocate(f, rng.randrange(0, size + 8192), rng.choice((4096, 20000, 70000)), keep=rng.random() < 0.5)
        elif r < 0.90:
            s.fsync(f)
        elif r < 0.95:
            s.commit()
    # the last step logs for sure: a change, then its fsync
    f = rng.choice(files)
    s.write(f, rng.randrange(0, len(s.now[f]) + 4096), 3000)
    s.fsync(f)
    s.crash()
    return s


def run_script(driver, ubtrfs_bin, d, s, out=None):
    img = d / "ub.img"
    with open(img, "wb") as fh:
        fh.truncate(512 * MiB)
    T.run([str(ubtrfs_bin), "mkfs", "-q", str(img)])
    script = d / "script"
    script.write_text("\n".join(s.lines) + "\n")
    cp = T.run([driver, "--script", str(script), str(img)], check=False, timeout=600)
    assert cp.returncode == 0, "fileapi_driver --script failed:\n" + cp.stderr.decode("utf-8", "replace")[-4000:]
    if out is not None:
        out.append(cp.stdout.decode())
    return img


def progs_check(img, what):
    cp = T.run(["btrfs", "check", "--readonly", str(img)], check=False, timeout=600)
    assert cp.returncode == 0, "btrfs check %s:\n%s" % (what, T.describe(cp))


def tree_of(mnt, dirs=False):
    """path -> sha256 of every regular file under mnt (relative paths); dirs: every directory too
    (as "dir")."""
    out = {}
    for root, subdirs, files in os.walk(mnt):
        if dirs:
            for n in subdirs:
                out["/" + os.path.relpath(os.path.join(root, n), mnt)] = "dir"
        for n in files:
            p = os.path.join(root, n)
            with open(p, "rb") as f:
                out["/" + os.path.relpath(p, mnt)] = hashlib.sha256(f.read()).hexdigest()
    return out


def expect_tree(s):
    return {p: hashlib.sha256(b).hexdigest() for p, b in s.durable.items()}


def judge(ubtrfs_bin, d, img, s):
    """The log on disk, then every replay against the model."""
    sup = T.parse_dump_super(T.run(["btrfs", "inspect-internal", "dump-super", str(img)]).stdout.decode())
    assert int(sup.get("log_root", "0")) != 0, "the last fsync logged nothing (log_root 0)"
    progs_check(img, "with the log pending")
    cp = T.run([str(ubtrfs_bin), "check", str(img)], check=False, timeout=600)
    assert cp.returncode == 0, "ubtrfs check with the log pending:\n" + T.describe(cp)
    want = expect_tree(s)
    # the kernel replays a copy
    kimg = d / "kernel.img"
    T.copy_sparse(img, kimg)
    with T.mounted([kimg], d / "kmnt", readonly=False) as m:
        got = tree_of(m)
    assert got == want, "kernel replay: %s" % diff(want, got)
    progs_check(kimg, "after the kernel's replay")
    # ubtrfs in memory (read-only mount replays the log without writing)
    with fuse_mounted(ubtrfs_bin, [img], d / "umnt", "ro") as m:
        got = tree_of(m)
    assert got == want, "ubtrfs in-memory replay: %s" % diff(want, got)
    # ubtrfs into the trees (the read-write mount's open replays and commits)
    wimg = d / "ubtrfs.img"
    T.copy_sparse(img, wimg)
    with fuse_mounted(ubtrfs_bin, [wimg], d / "wmnt", "rw") as m:
        got = tree_of(m)
    assert got == want, "ubtrfs replay into the trees: %s" % diff(want, got)
    progs_check(wimg, "after ubtrfs's replay")


def diff(want, got):
    lines = []
    for p in sorted(set(want) | set(got)):
        if want.get(p) != got.get(p):
            lines.append("%s: want %s got %s" % (p, (want.get(p) or "-")[:12], (got.get(p) or "-")[:12]))
    return "; ".join(lines[:10])


class Obj:
    """One inode of the names model: its bytes, and what an fsync made durable of it."""
    _n = 0

    def __init__(self):
        Obj._n += 1
        self.id = Obj._n
        self.data = bytearray()
        self.synced = None      # (path, bytes) at its last fsync, None after any later change


class NamesScript(Script):
    """Files that are created, renamed (over others too), unlinked and fsynced with their
    directories; the model keeps what must survive a crash exactly (see judge_names)."""

    def __init__(self):
        super().__init__()
        self.objs = {}          # path -> Obj
        self.committed = {}     # path -> (Obj, bytes) at the last commit
        self.untouched = set()  # committed paths nothing changed since
        self.seen = set()       # every content any file ever had (sha256)
        self.moved = set()      # directories moved since the last commit (their paths now)

    def _seen(self, o):
        self.seen.add(hashlib.sha256(bytes(o.data)).hexdigest())

    def create(self, path):
        self.op("create %s 644" % path)
        o = Obj()
        self._replace(path, o)
        self._seen(o)

    def _replace(self, path, o):
        old = self.objs.get(path)
        if old is not None:
            old.synced = None
        self.untouched.discard(path)
        self.objs[path] = o

    def _touch(self, path):
        """The inode at path changes: every name of it is no longer as the commit had it."""
        o = self.objs[path]
        o.synced = None
        self.untouched -= {q for q, x in self.objs.items() if x is o}
        return o

    def write(self, path, off, n, compressed=False):
        o = self._touch(path)
        self.seed += 1
        data = cstream(n, self.seed) if compressed else stream(n, self.seed)
        self.op(("writec %s %d %d %d zstd" if compressed else "write %s %d %d %d") % (path, off, n, self.seed))
        if len(o.data) < off:
            o.data.extend(bytes(off - len(o.data)))
        o.data[off:off + n] = data
        self._seen(o)

    def truncate(self, path, size):
        o = self._touch(path)
        self.op("truncate %s %d" % (path, size))
        if size < len(o.data):
            del o.data[size:]
        else:
            o.data.extend(bytes(size - len(o.data)))
        self._seen(o)

    def rename(self, src, dst):
        self.op("rename %s %s" % (src, dst))
        if self.objs.get(dst) is self.objs[src]:
            return  # two names of one inode: rename(2) does nothing
        o = self._touch(src)
        del self.objs[src]
        self._replace(dst, o)

    def link(self, src, dst):
        self.op("link %s %s" % (src, dst))
        o = self._touch(src)
        self._replace(dst, o)

    def rename_dir(self, src, dst):
        """A directory moves with everything below it (no fsync promise follows a path that moved)."""
        self.op("rename %s %s" % (src, dst))
        moved = {p: o for p, o in self.objs.items() if p.startswith(src + "/")}
        for p, o in moved.items():
            del self.objs[p]
            self.untouched.discard(p)
            self.objs[dst + p[len(src):]] = o
        self.dirs = [dst + x[len(src):] if x == src or x.startswith(src + "/") else x for x in self.dirs]
        self.moved = {dst + m[len(src):] if m.startswith(src + "/") else m for m in self.moved} | {dst}

    def unlink(self, path):
        self.op("unlink %s" % path)
        self._touch(path)
        del self.objs[path]

    def fsync(self, path):
        self.op("fsync %s" % path)
        o = self.objs[path]
        # a parent moved since the last commit: fsync promises the bytes, not the path (POSIX; the
        # kernel keeps the file under the parent's old path then)
        moved = any(path.startswith(m + "/") for m in self.moved)
        o.synced = (None if moved else path, bytes(o.data))
        self.fsyncs.append((path, o, o.synced[1]))

    def fsync_dir(self, path):
        self.op("fsync %s" % path)
        self.fsyncs.append((path, None, None))

    def commit(self):
        self.op("commit")
        self.commit_point()

    def commit_point(self):
        self.moved = set()
        self.committed = {p: (o, bytes(o.data)) for p, o in self.objs.items()}
        self.untouched = set(self.objs)
        for o in self.objs.values():
            o.synced = None


def names_script(seed, nops):
    rng = random.Random(seed)
    s = NamesScript()
    s.fsyncs = []
    s.dirs = ["/d", "/e", "/f"]
    for dname in s.dirs:
        s.mkdir(dname)
    n = 0
    for dname in s.dirs:
        for _ in range(4):
            n += 1
            p = "%s/c%d" % (dname, n)
            s.create(p)
            s.write(p, 0, rng.choice((1, 3000, 40000)))
    s.commit()
    for _ in range(nops):
        paths = sorted(s.objs)
        dirs = s.dirs
        r = rng.random()
        if r < 0.04:
            # a new directory (logged whole when fsynced, as a parent when a name in it is)
            n += 1
            p = "%s/m%d" % (rng.choice(dirs), n)
            s.mkdir(p)
            s.dirs.append(p)
        elif r < 0.06 and len(dirs) > 3:
            # a directory below the first three moves (not into itself)
            src = rng.choice(dirs[3:])
            n += 1
            dst = "%s/v%d" % (rng.choice([x for x in dirs if x != src and not x.startswith(src + "/")]), n)
            s.rename_dir(src, dst)
        elif r < 0.15 or not paths:
            n += 1
            p = "%s/n%d" % (rng.choice(dirs), n)
            s.create(p)
            s.write(p, 0, rng.choice((1, 2000, 30000)))
        elif r < 0.40:
            p = rng.choice(paths)
            s.write(p, rng.randrange(0, len(s.objs[p].data) + 8192), rng.choice((100, 4096, 20000)))
        elif r < 0.45:
            p = rng.choice(paths)
            s.truncate(p, rng.randrange(0, len(s.objs[p].data) + 1))
        elif r < 0.55:
            src = rng.choice(paths)
            if rng.random() < 0.4 and len(paths) > 1:
                dst = rng.choice([q for q in paths if q != src])  # over another file
            else:
                n += 1
                dst = "%s/r%d" % (rng.choice(dirs), n)
            s.rename(src, dst)
        elif r < 0.60:
            # a hard link (the log follows up to 16 names of an inode)
            n += 1
            s.link(rng.choice(paths), "%s/l%d" % (rng.choice(dirs), n))
        elif r < 0.65 and len(paths) > 3:
            s.unlink(rng.choice(paths))
        elif r < 0.85:
            s.fsync(rng.choice(paths))
        elif r < 0.96:
            s.fsync_dir(rng.choice(dirs))
        else:
            s.commit()
    p = rng.choice(sorted(s.objs))
    s.write(p, 0, 3000)
    s.fsync(p)
    s.crash()
    return s


def judge_names(ubtrfs_bin, d, img, s, fsync_out):
    """The crash image against what must hold whatever each fsync chose (log or commit):
    the three replays agree, btrfs check is clean, every file's bytes are ones some file had,
    a file fsynced and not changed after keeps its name and bytes, a file the last commit had
    and nothing touched since is still there as it was."""
    # replay the driver's answers: a fsync that committed made everything durable then
    kinds = [ln.split()[-1] for ln in fsync_out.splitlines() if ln.startswith("fsync ")]
    assert len(kinds) == len(s.fsyncs), "the driver answered %d fsyncs of %d" % (len(kinds), len(s.fsyncs))
    # (the model's commit points by fsync are not replayed into `untouched`: a commit only adds
    # durability, and the exact expectations below hold either way)
    progs_check(img, "with the log pending")
    kimg = d / "kernel.img"
    T.copy_sparse(img, kimg)
    with T.mounted([kimg], d / "kmnt", readonly=False) as m:
        kernel = tree_of(m, dirs=True)
    progs_check(kimg, "after the kernel's replay")
    with fuse_mounted(ubtrfs_bin, [img], d / "umnt", "ro") as m:
        mem = tree_of(m, dirs=True)
    wimg = d / "ubtrfs.img"
    T.copy_sparse(img, wimg)
    with fuse_mounted(ubtrfs_bin, [wimg], d / "wmnt", "rw") as m:
        rw = tree_of(m, dirs=True)
    progs_check(wimg, "after ubtrfs's replay")
    assert mem == kernel, "ubtrfs in-memory replay vs the kernel's: %s" % diff(kernel, mem)
    assert rw == kernel, "ubtrfs replay into the trees vs the kernel's: %s" % diff(kernel, rw)
    for p, h in kernel.items():
        assert h == "dir" or h in s.seen, "%s holds bytes no file ever had" % p
    for p, o in s.objs.items():
        if o.synced is not None and o.synced[0] == p:
            want = hashlib.sha256(o.synced[1]).hexdigest()
            assert kernel.get(p) == want, "%s: fsynced and unchanged since, but %s" % (p, (kernel.get(p) or "missing")[:12])
        elif o.synced is not None and o.synced[0] is None:
            want = hashlib.sha256(o.synced[1]).hexdigest()
            assert want in kernel.values(), "%s: fsynced (in a moved directory) and unchanged since, but no file " \
                "holds its bytes" % p
    for p in s.untouched:
        o, data = s.committed[p]
        assert kernel.get(p) == hashlib.sha256(data).hexdigest(), "%s: untouched since the commit, but %s" % (
            p, (kernel.get(p) or "missing")[:12])
    return kinds


@pytest.fixture
def casedir(scratch, request):
    d = Path(scratch) / ("fsyncw-" + request.node.name.replace("/", "_").replace("[", "-").replace("]", ""))
    d.mkdir(parents=True, exist_ok=True)
    yield d
    if os.environ.get("UBTRFS_KEEP_IMAGES") != "1":
        T.rmtree(d)


@pytest.mark.parametrize("seed", SEEDS)
def test_random_fsyncs_replayed(driver, ubtrfs_bin, casedir, seed):
    s = random_script(seed, NOPS)
    img = run_script(driver, ubtrfs_bin, casedir, s)
    judge(ubtrfs_bin, casedir, img, s)


@pytest.mark.parametrize("seed", SEEDS)
def test_random_names_fsyncs(driver, ubtrfs_bin, casedir, seed):
    """Creates, renames (over other files too), hard links, unlinks, writes, truncates, fsyncs of files
    and of their directories, commits: see judge_names. Most fsyncs must have used the log."""
    s = names_script(seed, NOPS)
    out = []
    img = run_script(driver, ubtrfs_bin, casedir, s, out)
    kinds = judge_names(ubtrfs_bin, casedir, img, s, out[0])
    assert kinds.count("log") * 2 >= len(kinds), "fsyncs: %d logged, %d committed" % (
        kinds.count("log"), kinds.count("commit"))


def test_new_file_and_append(driver, ubtrfs_bin, casedir):
    """A file made after the commit in an old directory, and an append to an old file: both logged."""
    s = Script()
    s.mkdir("/d")
    s.create("/d/old")
    s.write("/d/old", 0, 20000)
    s.commit()
    s.create("/d/f")
    s.write("/d/f", 0, 30000)
    s.write("/d/old", 20000, 5000)
    s.fsync("/d/f")
    s.fsync("/d/old")
    s.crash()
    img = run_script(driver, ubtrfs_bin, casedir, s)
    judge(ubtrfs_bin, casedir, img, s)


def test_punch_truncate_and_relog(driver, ubtrfs_bin, casedir):
    """A hole punched in committed data, a truncate below logged data, fsync after fsync of one file."""
    s = Script()
    s.mkdir("/d")
    s.create("/d/a")
    s.write("/d/a", 0, 200000)
    s.create("/d/b")
    s.write("/d/b", 0, 100000)
    s.commit()
    s.punch("/d/a", 8192, 65536)
    s.write("/d/a", 150000, 4000)
    s.truncate("/d/b", 50000)
    s.fsync("/d/a")
    s.fsync("/d/b")
    s.write("/d/a", 190000, 30000)
    s.truncate("/d/a", 100000)
    s.write("/d/a", 300000, 1000)
    s.fsync("/d/a")
    s.crash()
    img = run_script(driver, ubtrfs_bin, casedir, s)
    judge(ubtrfs_bin, casedir, img, s)


def test_not_fsynced_stays_committed(driver, ubtrfs_bin, casedir):
    """Changes after the commit that nobody fsynced are not in the log: the commit's bytes come back."""
    s = Script()
    s.mkdir("/d")
    for n in ("x", "y"):
        s.create("/d/" + n)
        s.write("/d/" + n, 0, 50000)
    s.commit()
    s.write("/d/x", 1000, 2000)
    s.write("/d/y", 1000, 2000)
    s.fsync("/d/x")
    s.write("/d/x", 40000, 20000)  # after its fsync: not durable
    s.crash()
    img = run_script(driver, ubtrfs_bin, casedir, s)
    judge(ubtrfs_bin, casedir, img, s)


def test_many_files_one_log(driver, ubtrfs_bin, casedir):
    """Hundreds of fsyncs in one transaction: the log tree grows past one leaf and its blocks are
    copied, written and given back as it changes; a commit in the middle forgets the first log."""
    s = Script()
    s.mkdir("/d")
    s.create("/d/keep")
    s.write("/d/keep", 0, 10000)
    s.commit()
    for i in range(200):
        p = "/d/f%03d" % i
        s.create(p)
        s.write(p, 0, 3000 + i * 37)
        s.fsync(p)
        if i == 100:
            s.commit()
    for i in range(0, 200, 7):
        p = "/d/f%03d" % i
        s.write(p, 100, 5000)
        s.fsync(p)
    s.crash()
    img = run_script(driver, ubtrfs_bin, casedir, s)
    judge(ubtrfs_bin, casedir, img, s)
