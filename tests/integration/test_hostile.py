# SPDX-License-Identifier: MIT
"""Hostile images with valid checksums: every command must fail fast and say why.

Four base images are built once per module: mkfs.btrfs --rootdir with 4 KiB
nodes and DUP metadata, mkfs.btrfs --rootdir with 16 KiB nodes and single
metadata, a kernel-made image with 4 KiB nodes and no no-holes feature (deeper trees, a subvolume and
a snapshot, zstd files, symlinks, hard links) and a kernel crash image whose
fsync log is still pending.  Each case copies a base image and damages it
with craft.py (test-side parser and editor; every copy of a block rewritten
with its checksum recomputed), so that nothing but the meaning is wrong:

  blocks   a node that points at a block twice, at another tree's block, at
           itself, and chains of nodes whose slots all point at one child
           (2^n paths through a tree of n levels)
  dirs     a directory reachable by a second name (sibling, ancestor, root,
           and one alias per level of a 20-level chain)
  roots    ROOT_ITEMs, the superblock's root/chunk_root/log_root and log
           ROOT_ITEMs that point at a block of another tree
  names    DIR_ITEM / DIR_INDEX / INODE_REF / INODE_EXTREF names with '/' or
           NUL, ".", ".." or empty
  symlink  a symlink whose inode claims an impossible target length
  claims   2^40 devices, extents of 2^60 bytes, inode sizes of 2^60, absurd
           ram_bytes for compressed and inline extents, nritems beyond the
           block, impossible system chunks
  sums     disk_bytenr + offset and file offset + num_bytes that wrap,
           offset/num_bytes beyond ram_bytes

Every command (dump-super -f --all, dump-tree, dump-tree -t fs, dump-tree -t
log for the crash image, ls -R, ls -R -l --json, cat of a few files,
filesystem show, restore into a fresh folder) runs on every hostile image of its case,
and must:

  * end within 10 s;
  * exit 0, 1 or 2, and 1 or 2 for every command that must read the damage
    (the case's `must_fail` list, chosen per class: e.g. for a root that points
    at the wrong tree every command that reads that tree); a command that does
    not read the damaged structure (dump-super for a bad fs tree leaf) may exit 0;
    a names-only ls -R reads no file's inode, so it may exit 0 on such a list
    only when it prints exactly the undamaged image's names;
  * on a must-fail command, say "error:" and name the problem: the logical
    address of the bad block, the tree, the inode or the value (the case's
    `needles`, any one is enough);
  * print no NUL byte, and from ls no name containing '/' or NUL, no ".",
    ".." or empty name, no path twice; every ls --json line parses strictly;
  * leave no sanitizer report;
  * stay under 512 MiB peak RSS (measured with wait4 per run). Under ASan
    the bound is 1 GiB: shadow memory and redzones roughly double the heap,
    and the quarantine is capped at 64 MiB through ASAN_OPTIONS.

By default each case runs on one base image (rotating through them); with
UBTRFS_LONG_TESTS=1 every case runs on every base image it applies to.
UBTRFS_HOSTILE_CHECK=1 also runs `btrfs check --readonly` on every crafted
image and fails the case when btrfs-progs finds nothing wrong (verifies that
the crafted damage is real).
"""

import json
import os
import random
import re
import select
import shutil
import signal
import struct
import subprocess
import tempfile
import time

import pytest

import craft as C
import fsynclog_lib as FL
import ubtrfs_testlib as T

LONG = os.environ.get("UBTRFS_LONG_TESTS") == "1"
PROGS_CHECK = os.environ.get("UBTRFS_HOSTILE_CHECK") == "1"
TIME_LIMIT = 10.0
OUTPUT_CAP = 64 << 20        # more output than this from a few-MiB image is a blow-up
MiB = T.MiB

BASES = ["mkfs4k", "mkfs16k", "kernel4k", "crash"]

# ---------------------------------------------------------------- base images


def make_tree(root, rng, many=250):
    """The source tree every base image starts from."""
    os.makedirs(root)
    w = FL.write_file
    w(os.path.join(root, "small.txt"), b"a small inline file\n" * 5)
    w(os.path.join(root, "big.bin"), rng.randbytes(300000))
    w(os.path.join(root, "text.txt"), T.text_bytes(rng, 200000))
    os.symlink("small.txt", os.path.join(root, "sym"))
    os.symlink(("long/" * 400)[:2000], os.path.join(root, "symlong"))
    os.makedirs(os.path.join(root, "names", "dir_me"))
    w(os.path.join(root, "names", "name_me"), b"the file whose names get damaged\n")
    w(os.path.join(root, "names", "dir_me", "inside"), b"inside dir_me\n")
    os.makedirs(os.path.join(root, "links"))
    w(os.path.join(root, "links", "a"), T.text_bytes(rng, 20000))
    os.link(os.path.join(root, "links", "a"), os.path.join(root, "links", "b"))
    d = os.path.join(root, "deep")
    for i in range(20):
        d = os.path.join(d, "l%02d" % i)
        os.makedirs(d)
        w(os.path.join(d, "f"), b"level %d\n" % i)
    m = os.path.join(root, "many")
    os.makedirs(m)
    for i in range(many):
        w(os.path.join(m, "file_%04d" % i), T.text_bytes(rng, rng.randint(10, 120)))


def _mkfs_rootdir(work, name, opts):
    src = os.path.join(work, name + "-src")
    make_tree(src, random.Random(5))
    img = os.path.join(work, name + ".img")
    with open(img, "wb") as f:
        f.truncate(160 * MiB)
    T.run(["mkfs.btrfs", "-q", "-f", *opts, "--rootdir", src, img])
    shutil.rmtree(src)
    return img


def _kernel4k(work):
    img = os.path.join(work, "kernel4k.img")
    with open(img, "wb") as f:
        f.truncate(256 * MiB)
    # without no-holes: every hole is an explicit extent, so a size beyond the
    # extents contradicts the tree even by the letter of the format
    T.run(["mkfs.btrfs", "-q", "-f", "-n", "4096", "-O", "^no-holes", img])
    with T.mounted([img], os.path.join(work, "mnt-k4"), options="compress=zstd",
                   readonly=False) as mnt:
        make_tree(os.path.join(mnt, "t"), random.Random(6), many=450)
        # the tree's entries at the top, like the mkfs images
        for e in os.listdir(os.path.join(mnt, "t")):
            os.rename(os.path.join(mnt, "t", e), os.path.join(mnt, e))
        os.rmdir(os.path.join(mnt, "t"))
        T.run(["btrfs", "subvolume", "create", os.path.join(mnt, "sv")])
        FL.write_file(os.path.join(mnt, "sv", "in_sv"), T.text_bytes(random.Random(7), 50000))
        os.symlink("in_sv", os.path.join(mnt, "sv", "sym_in_sv"))
        T.run(["btrfs", "subvolume", "snapshot", os.path.join(mnt, "sv"), os.path.join(mnt, "snap")])
        FL.write_file(os.path.join(mnt, "snap", "only_in_snap"), b"snapshot only\n")
    return img


def _crash(work):
    def baseline(mnt):
        make_tree(str(mnt / "t"), random.Random(8), many=120)
        for e in os.listdir(str(mnt / "t")):
            os.rename(str(mnt / "t" / e), str(mnt / e))
        os.rmdir(str(mnt / "t"))

    def action(mnt):
        FL.write_file(str(mnt / "logged.txt"), T.text_bytes(random.Random(9), 30000), fsync=True)
        FL.write_file(str(mnt / "many" / "logged2"), b"fsynced too\n", fsync=True)

    crash = FL.make_crash(os.path.join(work, "crash-build"), baseline, action)
    assert crash.log_root, "test setup: the kernel committed instead of logging"
    img = os.path.join(work, "crash.img")
    shutil.move(str(crash.image), img)
    shutil.rmtree(os.path.join(work, "crash-build"), ignore_errors=True)
    return img


class Base:
    """A base image and what the tests need to know about it (from craft's parse)."""

    def __init__(self, name, image):
        self.name = name
        self.image = image
        with C.Image(image) as im:
            self.nodesize = im.nodesize
            self.dup = len(im.physical(im.super("root"))) > 1
            self.has_log = bool(im.super("log_root"))
            self.paths = fs_paths(im, 5)
        self._ls_names = None
        self.cats = [p for p in ("/small.txt", "/big.bin", "/text.txt", "/links/b",
                                 "/names/name_me", "/sv/in_sv", "/logged.txt") if p in self.paths]


    def ls_names(self, ubtrfs_bin):
        """`ls -R` of the undamaged image (test_bases_are_clean holds it to exit 0)."""
        if self._ls_names is None:
            cp = T.run([ubtrfs_bin, "ls", "-R", self.image])
            self._ls_names = cp.stdout
        return self._ls_names


_BUILDERS = {
    "mkfs4k": lambda w: _mkfs_rootdir(w, "mkfs4k", ["-n", "4096", "-m", "dup"]),
    "mkfs16k": lambda w: _mkfs_rootdir(w, "mkfs16k", ["-n", "16384", "-m", "single"]),
    "kernel4k": _kernel4k,
    "crash": _crash,
}


@pytest.fixture(scope="module")
def bases(scratch, ubtrfs_bin):
    work = os.path.join(scratch, "hostile")
    os.makedirs(work, exist_ok=True)
    cache = {}

    def get(name):
        if name not in cache:
            # built once per run, shared by the pytest-xdist workers; cases damage copies in `work`
            _, img = T.shared_build("hostile-" + name, lambda d: _BUILDERS[name](str(d)), fallback_dir=work)
            cache[name] = Base(name, img)
        return cache[name]
    get.work = work
    return get


def fs_paths(im, tree, top="/"):
    """{path: (ino, dir type, subvolume)} of every entry reachable through DIR_INDEX items,
    crossing into subvolumes (a ROOT_ITEM location)."""
    out = {}
    trees = {}

    def items_of(tid):
        if tid not in trees:
            root = im.tree_root(tid)[0]
            by_dir = {}
            for blk, slot in im.walk(root):
                k = blk.item_key(slot)
                if k.type == C.DIR_INDEX:
                    for loc, _, ft, name, _ in C.parse_dir_item(blk.item_data(slot)):
                        by_dir.setdefault(k.objectid, []).append((name, loc, ft))
            trees[tid] = by_dir
        return trees[tid]

    def rec(tid, dirino, path, depth):
        if depth > 64:
            return
        for name, loc, ft in items_of(tid).get(dirino, []):
            p = path.rstrip("/") + "/" + os.fsdecode(name)
            if loc.type == C.ROOT_ITEM:
                out[p] = (256, C.FT_DIR, loc.objectid)
                rec(loc.objectid, 256, p, depth + 1)
            else:
                out[p] = (loc.objectid, ft, tid)
                if ft == C.FT_DIR:
                    rec(tid, loc.objectid, p, depth + 1)
    rec(tree, 256, top, 0)
    return out


# ---------------------------------------------------------------- running commands

_ASAN = {}


def sanitized(binary):
    if binary not in _ASAN:
        with open(binary, "rb") as f:
            _ASAN[binary] = b"__asan_init" in f.read()
    return _ASAN[binary]


def mem_limit_kib(binary):
    return (1024 if sanitized(binary) else 512) * 1024


class Result:
    def __init__(self, args, rc, out, err, secs, maxrss_kib, timed_out, truncated):
        self.args, self.rc, self.out, self.err = args, rc, out, err
        self.secs, self.maxrss, self.timed_out, self.truncated = secs, maxrss_kib, timed_out, truncated

    def text(self):
        return self.err.decode("utf-8", "replace")

    def brief(self):
        return "exit %s in %.2f s, %d MiB, %d bytes out%s; stderr: %s" % (
            "TIMEOUT" if self.timed_out else self.rc, self.secs, self.maxrss // 1024, len(self.out),
            " (truncated)" if self.truncated else "", _tail(self.text()))


def _tail(s, n=700):
    s = s.strip()
    return s if len(s) <= n else "..." + s[-n:]


def run_limited(args, limit_s=TIME_LIMIT, rss_kill_kib=None):
    """Run with a wall-clock limit, capturing at most OUTPUT_CAP of each stream, and
    return the child's own peak RSS (wait4).  A child past `rss_kill_kib` is killed
    so a runaway cannot take the machine down (it fails the memory assertion anyway)."""
    env = dict(os.environ)
    asan = env.get("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=1")
    env["ASAN_OPTIONS"] = asan + ":quarantine_size_mb=64"
    env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")
    # GNU time forks the command from its own small process, so %M is the
    # command's peak RSS alone (wait4 from this Python process would also count
    # the Python interpreter's pages inherited across fork).
    fd, timefile = tempfile.mkstemp(prefix="hostile-time-")
    os.close(fd)
    args = ["/usr/bin/time", "-f", "%M", "-o", timefile] + [str(a) for a in args]
    t0 = time.monotonic()
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         stdin=subprocess.DEVNULL, env=env, start_new_session=True)
    out_fd, err_fd = p.stdout.fileno(), p.stderr.fileno()
    bufs = {out_fd: bytearray(), err_fd: bytearray()}
    open_fds = {out_fd, err_fd}
    truncated = timed_out = False
    status = rusage = None
    while status is None or open_fds:
        if open_fds:
            ready, _, _ = select.select(list(open_fds), [], [], 0.02)
            for fd in ready:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    open_fds.discard(fd)
                    continue
                b = bufs[fd]
                if len(b) < OUTPUT_CAP:
                    b += chunk[:OUTPUT_CAP - len(b)]
                if len(b) >= OUTPUT_CAP:
                    truncated = True
        else:
            time.sleep(0.01)
        if status is None:
            pid, st, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                status, rusage = st, ru
        if time.monotonic() - t0 > limit_s:
            timed_out = True
        kill = timed_out or truncated or (
            rss_kill_kib and status is None and _rss_kib(p.pid) > rss_kill_kib)
        if kill:
            if status is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                _, status, rusage = os.wait4(p.pid, 0)
            break
    secs = time.monotonic() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    p.stdout.close()
    p.stderr.close()
    with open(timefile) as f:
        lines = f.read().split()
    os.unlink(timefile)
    maxrss = int(lines[-1]) if lines and lines[-1].isdigit() else rusage.ru_maxrss
    return Result(args[5:], p.returncode, bytes(bufs[out_fd]), bytes(bufs[err_fd]), secs,
                  maxrss, timed_out, truncated)


def _rss_kib(pid):
    """RSS of pid and its children (the command under /usr/bin/time)."""
    total = 0
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            for child in f.read().split():
                total += _rss_kib(int(child))
    except (OSError, ValueError):
        pass
    return total


# ---------------------------------------------------------------- checks

SANITIZER = re.compile(rb"Sanitizer|runtime error:|AddressSanitizer|LeakSanitizer")


def commands(base, case):
    """[(key, argv)] to run on a hostile image of `case` made from `base`."""
    cmds = [("super", ["dump-super", "-f", "--all"]),
            ("dump", ["dump-tree"]),
            ("dumpfs", ["dump-tree", "-t", "fs"]),
            ("ls", ["ls", "-R"]),
            ("lsj", ["ls", "-R", "-l", "--json"]),
            ("show", ["filesystem", "show"]),
            ("restore", ["restore", "-q"])]
    if base.has_log:
        cmds.append(("dumplog", ["dump-tree", "-t", "log"]))
    # the quick run reads the damaged files and one other; the long run reads them all
    cats = list(base.cats) if LONG else [base.cats[C.crc32c(case.what.encode()) % len(base.cats)]]
    for p in case.cats:
        if p not in cats:
            cats.append(p)
    for p in cats:
        cmds.append(("cat:" + p, ["cat", "--path", p]))
    return cmds


def check_names_in_ls(res, key, problems):
    """ls output: no impossible names, no path twice, strict JSON lines."""
    out = res.out
    if key == "lsj":
        seen = set()
        for raw in out.split(b"\n"):
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw.decode("utf-8", "surrogateescape"))
            except ValueError as e:
                problems.append("%s: line is not JSON (%s): %r" % (key, e, raw[:200]))
                return
            if not isinstance(obj, dict):
                problems.append("%s: line is not an object: %r" % (key, raw[:200]))
                return
            name, path = obj.get("name"), obj.get("path")
            if not isinstance(name, str) or not isinstance(path, str):
                problems.append("%s: object without name/path: %r" % (key, raw[:200]))
                return
            if "/" in name or "\0" in name or name in ("", ".", ".."):
                problems.append("%s: impossible name %r (path %r)" % (key, name, path))
            comps = path.split("/")[1:]
            if "\0" in path or any(c in ("", ".", "..") for c in comps):
                problems.append("%s: impossible path %r" % (key, path))
            if path in seen:
                problems.append("%s: path listed twice: %r" % (key, path))
            seen.add(path)
            if len(problems) > 8:
                return
    else:
        # plain ls -R: "dir:" headers and one name per line; a name is a line
        for line in out.split(b"\n"):
            if line in (b".", b"..") or line.endswith(b"/.:") or line.endswith(b"/..:"):
                problems.append("%s: impossible name line %r" % (key, line[:200]))
                break


def run_case(base, case, image, ubtrfs_bin):
    """Run every command on `image`; [problem strings], {key: Result}."""
    problems = []
    results = {}
    limit = mem_limit_kib(ubtrfs_bin)
    for key, argv in commands(base, case):
        # restore writes into a folder of its own beside the image, removed after the run
        outdir = [image + ".restored"] if key == "restore" else []
        try:
            res = run_limited([ubtrfs_bin, *argv, image, *outdir], rss_kill_kib=4 * limit)
        finally:
            if outdir:
                shutil.rmtree(outdir[0], ignore_errors=True)
        results[key] = res
        where = "%s (%s)" % (key, " ".join(argv))
        err = res.err
        if res.timed_out:
            problems.append("%s: did not finish within %g s: %s" % (where, TIME_LIMIT, res.brief()))
            continue
        if res.truncated:
            problems.append("%s: printed more than %d MiB: %s" % (where, OUTPUT_CAP >> 20, res.brief()))
            continue
        if SANITIZER.search(err):
            problems.append("%s: sanitizer report: %s" % (where, _tail(res.text(), 2500)))
            continue
        if res.rc not in (0, 1, 2):
            problems.append("%s: exit %d: %s" % (where, res.rc, res.brief()))
            continue
        if res.maxrss > limit:
            problems.append("%s: peak RSS %d MiB > %d MiB: %s" % (
                where, res.maxrss // 1024, limit // 1024, res.brief()))
        if res.rc != 0 and not re.search(rb"error: \S", err):
            problems.append("%s: exit %d without a named error: %s" % (where, res.rc, res.brief()))
        if b"\0" in res.out and not key.startswith("cat:"):
            problems.append("%s: printed a NUL byte" % where)
        if key in ("ls", "lsj"):
            check_names_in_ls(res, key, problems)
        if case.must_fail_key(key, base):
            if key == "ls" and res.rc == 0:
                # names only: the files' inodes are not read (as readdir does for find on
                # the kernel); damage below no name may pass unseen, but then every name
                # must be the undamaged image's
                if res.out != base.ls_names(ubtrfs_bin):
                    problems.append("%s: exit 0 on damage it must read (%s), and the names differ from "
                                    "the undamaged image's: %s" % (where, case.what, res.brief()))
            elif res.rc == 0:
                problems.append("%s: exit 0 on damage it must read (%s): %s" % (
                    where, case.what, res.brief()))
            elif case.needles and not any(T.mentions_number(res.text(), n) if isinstance(n, int)
                                          else n in res.text() for n in case.needles):
                problems.append("%s: exit %d but the message names none of %r: %s" % (
                    where, res.rc, case.needles, res.brief()))
    for extra in case.checks:
        extra(results, problems)
    return problems, results


# ---------------------------------------------------------------- cases


class Case:
    """What was damaged, and which commands must notice."""

    def __init__(self, what, must_fail=(), needles=(), cats=(), checks=()):
        self.what = what
        self.must_fail = set(must_fail)
        self.needles = list(needles)
        self.cats = list(cats)
        self.checks = list(checks)

    def must_fail_key(self, key, base):
        if key in self.must_fail:
            return True
        # restore reads every name and every file: what ls or a cat must notice, it must too
        if key == "restore":
            return any(k in self.must_fail for k in ("ls", "lsj", "*", "cat:*")) or \
                any(k.startswith("cat:") for k in self.must_fail)
        if "cat:*" in self.must_fail and key.startswith("cat:"):
            return True
        if "*" in self.must_fail and key != "super":
            return True
        return False


ALL_FS = {"dump", "dumpfs", "ls", "lsj", "cat:*"}


def _edit(im, blk, fn):
    fn(blk)
    im.write_block(blk)


def fs_node(im, tree=5, need_leaf_children=True):
    """A node (level >= 1) of `tree` with at least 3 slots, its children leaves if asked."""
    root = im.tree_root(tree)[0]
    for blk, _, _ in im.tree_blocks(root):
        if not blk.is_leaf and blk.nritems() >= 3 and (blk.level() == 1 or not need_leaf_children):
            return blk
    pytest.skip("test setup: tree %d has no node with 3 slots (nodesize %d)" % (tree, im.nodesize))


def inode_of(base, path):
    ino, _, tree = base.paths[path]
    return ino, tree


def item_slot(im, tree, key):
    root = im.tree_root(tree)[0]
    hit = im.find_item(root, key)
    assert hit, "test setup: no item %r in tree %d" % (key, tree)
    return hit


def first_extent(im, tree, ino, want):
    """(Block, slot) of the first EXTENT_DATA of `ino` satisfying want(blk, slot)."""
    root = im.tree_root(tree)[0]
    for blk, slot in im.find_items(root, lambda k: k.objectid == ino and k.type == C.EXTENT_DATA):
        if want(blk, slot):
            return blk, slot
    return None


def is_reg(blk, slot):
    return blk.get_item(slot, C.FE_TYPE, "<B") == C.FILE_EXTENT_REG and \
        blk.get_item(slot, C.FE_DISK_BYTENR, "<Q") != 0


def is_inline(blk, slot):
    return blk.get_item(slot, C.FE_TYPE, "<B") == C.FILE_EXTENT_INLINE


# -- blocks accepted twice, exponential chains

def files_in_leaf(base, im, logical, tree=5):
    """Paths of regular files whose INODE_ITEM lives in the leaf at `logical`."""
    blk = im.read_block(logical)
    inos = {blk.item_key(i).objectid for i in range(blk.nritems())
            if blk.item_key(i).type == C.INODE_ITEM}
    return sorted(p for p, (ino, ft, t) in base.paths.items()
                  if t == tree and ft == C.FT_REG_FILE and ino in inos)


def c_ptr_dup_child(base, im, same_key=False):
    node = fs_node(im)
    k0, b0, g0 = node.ptr(0)
    k1, b1, g1 = node.ptr(1)
    # a file whose inode item was in the child that slot 1 loses: its lookup goes
    # through the bad slot and must report corruption, not "no such file"
    lost = files_in_leaf(base, im, b1)[:1]
    node.set_ptr(1, key=k0 if same_key else None, blockptr=b0, generation=g0)
    im.write_block(node)
    return Case("fs tree node %d slot 1 points at slot 0's child %d%s" % (
        node.logical, b0, " with the same key" if same_key else ""),
        must_fail={"dump", "dumpfs", "ls", "lsj"} | {"cat:" + p for p in lost},
        needles=[b0, node.logical], cats=lost)


def c_ptr_all_same(base, im):
    """Every slot of a level-1 node points at one leaf (keys untouched)."""
    node = fs_node(im)
    k0, b0, g0 = node.ptr(0)
    for i in range(1, node.nritems()):
        node.set_ptr(i, blockptr=b0, generation=g0)
    im.write_block(node)
    return Case("all %d slots of node %d point at leaf %d" % (node.nritems(), node.logical, b0),
                must_fail=ALL_FS - {"cat:*"}, needles=[b0, node.logical])


def _foreign(base, im, tree):
    node = fs_node(im)
    top = im.super("root") if tree == C.ROOT_TREE else im.tree_root(tree)[0]
    # a block of the other tree at the level the slot expects, so that only the
    # owner (and the keys) give it away
    want = node.level() - 1
    same_level = [b for b, _, _ in im.tree_blocks(top) if b.level() == want]
    oblk = same_level[0] if same_level else im.read_block(top)
    other = oblk.logical
    slot = node.nritems() // 2
    node.set_ptr(slot, blockptr=other, generation=oblk.generation())
    im.write_block(node)
    return Case("fs tree node %d slot %d points at tree %d's block %d (level %d)" % (
        node.logical, slot, tree, other, oblk.level()),
        must_fail={"dump", "dumpfs", "ls", "lsj"}, needles=[other, node.logical])


def c_ptr_root_tree(base, im):
    return _foreign(base, im, C.ROOT_TREE)


def c_ptr_extent_tree(base, im):
    return _foreign(base, im, C.EXTENT_TREE)


def c_ptr_self(base, im):
    node = fs_node(im)
    node.set_ptr(1, blockptr=node.logical, generation=node.generation())
    im.write_block(node)
    return Case("fs tree node %d slot 1 points at the node itself" % node.logical,
                must_fail={"dump", "dumpfs", "ls", "lsj"}, needles=[node.logical])


def _chain(base, im, slots, levels, same_keys):
    """Replace the fs tree's root by `levels` new nodes whose `slots` slots all point at
    the next one down; the bottom one's slots point at the old root."""
    root_blk, root_slot = im.root_items()[(5, 0)]
    old_root = root_blk.get_item(root_slot, C.ROOT_ITEM_BYTENR, "<Q")
    old = im.read_block(old_root)
    levels = min(levels, 7 - old.level())
    if levels < 1:
        pytest.skip("test setup: fs tree already at the maximum level")
    gen = root_blk.get_item(root_slot, C.ROOT_ITEM_GENERATION, "<Q")
    addrs = im.free_tree_blocks(levels)
    child, child_gen, key = old_root, old.generation(), old.first_key()
    for i, addr in enumerate(addrs):
        blk = im.new_block(addr, old.level() + 1 + i, 5, gen, template=old)
        ptrs = []
        for s in range(slots):
            k = key if same_keys else C.Key(key[0], key[1], key[2] + s)
            ptrs.append((k, child, child_gen))
        blk.set_ptrs(ptrs)
        im.write_block(blk)
        child, child_gen = addr, gen
    root_blk.patch_item(root_slot, C.ROOT_ITEM_BYTENR, "<Q", addrs[-1])
    root_blk.patch_item(root_slot, C.ROOT_ITEM_LEVEL, "<B", old.level() + levels)
    im.write_block(root_blk)
    return Case("fs tree root replaced by %d levels of %d slots each pointing at one child "
                "(%s keys; %d paths to the old root %d)" % (
                    levels, slots, "equal" if same_keys else "increasing", slots ** levels, old_root),
                must_fail=ALL_FS, needles=addrs)


def c_chain_2x3(base, im):
    # increasing keys: equal keys are already caught by the key order check
    return _chain(base, im, 2, 3, False)


def c_chain_wide_equal(base, im):
    return _chain(base, im, 16, 7, True)


def c_chain_wide_increasing(base, im):
    return _chain(base, im, 16, 7, False)


# -- a directory reachable by two names

def _add_entry(im, tree, dirino, name, target_ino, ftype, index):
    """Insert DIR_ITEM + DIR_INDEX (dirino: name -> target_ino) into tree."""
    root = im.tree_root(tree)[0]
    loc = C.Key(target_ino, C.INODE_ITEM, 0)
    body = C.dir_item(loc, 7, name, ftype)
    try:
        im.insert_item(root, (dirino, C.DIR_ITEM, C.name_hash(name)), body)
        im.insert_item(root, (dirino, C.DIR_INDEX, index), body)
    except ValueError as e:
        pytest.skip("test setup: no room for a new directory entry: %s" % e)


def _no_path_under(prefix):
    def check(results, problems):
        res = results.get("lsj")
        if res is None:
            return
        for raw in res.out.split(b"\n"):
            try:
                p = json.loads(raw.decode("utf-8", "surrogateescape")).get("path", "")
            except ValueError:
                continue
            if p.startswith(prefix):
                problems.append("lsj: descended through the second name: %r" % p)
                return
    return check


def _path_listed(path):
    def check(results, problems):
        res = results.get("lsj")
        if res is None or res.timed_out or res.truncated:
            return
        paths = set()
        for raw in res.out.split(b"\n"):
            try:
                paths.add(json.loads(raw.decode("utf-8", "surrogateescape")).get("path"))
            except ValueError:
                continue
        if path not in paths:
            problems.append("lsj: the real name %r is not listed" % path)
    return check


def c_dir_alias_sibling(base, im):
    d_ino, tree = inode_of(base, "/deep/l00/l01")
    _add_entry(im, tree, 256, b"alias", d_ino, C.FT_DIR, 90000)
    return Case("/alias is a second name of directory /deep/l00/l01 (ino %d)" % d_ino,
                must_fail={"ls", "lsj"}, needles=[d_ino, "alias"],
                checks=[_no_path_under("/alias/"), _path_listed("/deep/l00/l01/l02")])


def c_dir_alias_ancestor(base, im):
    top, tree = inode_of(base, "/deep")
    low, _ = inode_of(base, "/deep/l00/l01/l02/l03")
    _add_entry(im, tree, low, b"up", top, C.FT_DIR, 90001)
    return Case("/deep/l00/l01/l02/l03/up names /deep (ino %d): a cycle" % top,
                must_fail={"ls", "lsj"}, needles=[top, "up"],
                checks=[_no_path_under("/deep/l00/l01/l02/l03/up/")])


def c_dir_alias_root(base, im):
    low, tree = inode_of(base, "/names/dir_me")
    _add_entry(im, tree, low, b"rootagain", 256, C.FT_DIR, 90002)
    return Case("/names/dir_me/rootagain names the root directory 256",
                must_fail={"ls", "lsj"}, needles=[256, "rootagain"],
                checks=[_no_path_under("/names/dir_me/rootagain/")])


def c_dir_alias_chain(base, im):
    """In each /deep/l_i the entry "f" (a file) is turned into a second name of
    l_{i+1}, in place (same name, same hash): 2^19 paths to the bottom."""
    path = "/deep"
    for i in range(19):
        parent = path + "/l%02d" % i
        child = parent + "/l%02d" % (i + 1)
        p_ino, tree = inode_of(base, parent)
        c_ino, _ = inode_of(base, child)
        f_ino, _ = inode_of(base, parent + "/f")
        slots = _entry_slots(im, tree, p_ino, f_ino)
        for typ in (C.DIR_ITEM, C.DIR_INDEX):
            logical, slot, _ = slots[typ]
            blk = im.read_block(logical)
            (loc, transid, _, name, _), = C.parse_dir_item(blk.item_data(slot))
            blk.set_item_data(slot, C.dir_item(C.Key(c_ino, C.INODE_ITEM, 0), transid, name, C.FT_DIR))
            im.write_block(blk)
        path = parent
    return Case("in each of /deep/l00../deep/l18 the entry 'f' names the next level's directory "
                "(2^19 paths to /deep/l00/.../l19)", must_fail={"ls", "lsj"}, needles=["/f"],
                checks=[_path_listed("/deep/l00/l01/l02/l03/l04/l05/l06/l07/l08/l09/l10/l11/l12/l13/"
                                     "l14/l15/l16/l17/l18/l19/f")])


# -- roots pointing at the wrong tree

def _point_root_item(im, blk, slot, bytenr, level):
    """Aim a ROOT_ITEM at `bytenr`, its generation (and generation_v2) copied from
    the block, so that only the tree the block belongs to is wrong."""
    if level < 8:
        gen = im.read_block(bytenr).generation()
        blk.patch_item(slot, C.ROOT_ITEM_GENERATION, "<Q", gen)
        if blk.item_loc(slot)[1] >= C.ROOT_ITEM_GENERATION_V2 + 8:
            blk.patch_item(slot, C.ROOT_ITEM_GENERATION_V2, "<Q", gen)
    blk.patch_item(slot, C.ROOT_ITEM_BYTENR, "<Q", bytenr)
    blk.patch_item(slot, C.ROOT_ITEM_LEVEL, "<B", level)
    im.write_block(blk)


def _set_root_item(im, tree, bytenr, level):
    blk, slot = im.root_items()[(tree, 0)]
    _point_root_item(im, blk, slot, bytenr, level)


def c_root_fs_to_root_tree(base, im):
    r = im.super("root")
    _set_root_item(im, 5, r, im.super("root_level"))
    return Case("ROOT_ITEM of the fs tree points at the root tree's block %d" % r,
                must_fail=ALL_FS, needles=[r])


def c_root_fs_to_extent(base, im):
    r, lvl = im.tree_root(C.EXTENT_TREE)
    _set_root_item(im, 5, r, lvl)
    return Case("ROOT_ITEM of the fs tree points at the extent tree's root %d" % r,
                must_fail=ALL_FS, needles=[r])


def c_root_csum_to_fs(base, im):
    r, lvl = im.tree_root(5)
    _set_root_item(im, C.CSUM_TREE, r, lvl)
    return Case("ROOT_ITEM of the csum tree points at the fs tree's root %d" % r,
                must_fail={"dump", "cat:/big.bin"}, needles=[r])


def c_root_subvol_to_fs(base, im):
    if (256, 0) not in {k for k in im.root_items()}:
        pytest.skip("base image has no subvolume")
    r, lvl = im.tree_root(5)
    _set_root_item(im, 256, r, lvl)
    return Case("ROOT_ITEM of subvolume 256 points at the fs tree's root %d" % r,
                must_fail={"dump", "ls", "lsj", "cat:/sv/in_sv"}, needles=[r])


def c_super_root_to_chunk(base, im):
    cr = im.super("chunk_root")
    # the chunk root gets the superblock's generation, so only its owner is wrong
    gen = im.super("generation")
    blk = im.read_block(cr)
    blk.generation(gen)
    im.write_block(blk)
    im.set_super(root=cr, root_level=im.super("chunk_root_level"), chunk_root_generation=gen)
    return Case("superblock root points at the chunk tree's root %d" % cr,
                must_fail={"*"}, needles=[cr])


def c_super_chunk_root_to_root(base, im):
    r = im.super("root")
    im.set_super(chunk_root=r, chunk_root_level=im.super("root_level"))
    return Case("superblock chunk_root points at the root tree's block %d" % r,
                must_fail={"*"}, needles=[r])


LOG_FAIL = {"dumplog", "ls", "lsj"}
# docs/fsync-log.md: a log that cannot be replayed is reported, and the command
# goes on from the last commit, so ls still lists what was committed.
LOG_CHECKS = (lambda: [_path_listed("/small.txt"), _path_listed("/many/file_0000")])


def c_log_root_to_root_tree(base, im):
    r = im.super("root")
    im.set_super(log_root=r, log_root_level=im.super("root_level"))
    return Case("superblock log_root points at the root tree's block %d" % r,
                must_fail=LOG_FAIL, needles=[r], checks=LOG_CHECKS())


def c_log_root_to_fs(base, im):
    r, lvl = im.tree_root(5)
    im.set_super(log_root=r, log_root_level=lvl)
    return Case("superblock log_root points at the fs tree's root %d" % r,
                must_fail=LOG_FAIL, needles=[r], checks=LOG_CHECKS())


def _set_log_root_item(im, bytenr, level):
    logs = im.log_trees()
    assert 5 in logs, "test setup: no log tree for the fs tree"
    blk, slot = logs[5]
    _point_root_item(im, blk, slot, bytenr, level)


def c_log_item_to_log_root(base, im):
    lr = im.super("log_root")
    _set_log_root_item(im, lr, im.super("log_root_level"))
    return Case("the fs tree's log ROOT_ITEM points at the log root tree's own block %d" % lr,
                must_fail=LOG_FAIL, needles=[lr], checks=LOG_CHECKS())


def c_log_item_to_fs(base, im):
    r, lvl = im.tree_root(5)
    _set_log_root_item(im, r, lvl)
    return Case("the fs tree's log ROOT_ITEM points at the fs tree's root %d" % r,
                must_fail=LOG_FAIL, needles=[r], checks=LOG_CHECKS())


# -- names that cannot be

BAD_NAMES = {"slash": b"na/me", "nul": b"na\0me", "dot": b".", "dotdot": b"..", "empty": b""}


def _entry_slots(im, tree, dirino, ino):
    root = im.tree_root(tree)[0]
    out = {}
    for blk, slot in im.walk(root):
        k = blk.item_key(slot)
        if k.objectid == dirino and k.type in (C.DIR_ITEM, C.DIR_INDEX):
            for loc, _, _, name, _ in C.parse_dir_item(blk.item_data(slot)):
                if loc.objectid == ino:
                    out[k.type] = (blk.logical, slot, k)
        if k.objectid == ino and k.type == C.INODE_REF and k.offset == dirino:
            out[C.INODE_REF] = (blk.logical, slot, k)
    return out


def _rename_item(im, tree, where, bad, rehash):
    logical, slot, key = where
    blk = im.read_block(logical)
    data = blk.item_data(slot)
    if key.type == C.INODE_REF:
        (index, _), = C.parse_inode_refs(data)
        blk.set_item_data(slot, C.inode_ref(index, bad))
        im.write_block(blk)
        return
    (loc, transid, ftype, _, _), = C.parse_dir_item(data)
    body = C.dir_item(loc, transid, bad, ftype)
    if key.type == C.DIR_ITEM and rehash:
        blk.delete_item(slot)
        im.write_block(blk)
        im.insert_item(im.tree_root(tree)[0], (key.objectid, C.DIR_ITEM, C.name_hash(bad)), body)
    else:
        blk.set_item_data(slot, body)
        im.write_block(blk)


def make_name_case(where_kind, badname, target):
    def build(base, im):
        path = "/names/" + target
        ino, tree = inode_of(base, path)
        dirino, _ = inode_of(base, "/names")
        slots = _entry_slots(im, tree, dirino, ino)
        bad = BAD_NAMES[badname]
        kinds = {"both": [C.DIR_ITEM, C.DIR_INDEX], "index": [C.DIR_INDEX], "item": [C.DIR_ITEM],
                 "ref": [C.INODE_REF]}[where_kind]
        for k in kinds:
            _rename_item(im, tree, slots[k], bad, rehash=(where_kind == "both"))
            slots = _entry_slots(im, tree, dirino, ino)
        must = set()
        cats = []
        if where_kind in ("both", "index"):
            must |= {"ls", "lsj"}
        if where_kind == "item":
            # the lookup of the old name reaches the renamed DIR_ITEM (same hash)
            must |= {"cat:" + path}
            cats.append(path)
        if where_kind == "ref" and target == "dir_me":
            must |= {"ls", "lsj"}
        return Case("%s of %s (ino %d in dir %d) renamed to %r" % (
            where_kind, path, ino, dirino, bad), must_fail=must, needles=[ino, dirino], cats=cats)
    return build


def c_extref_bad_name(base, im):
    """A second link to /names/name_me as an INODE_EXTREF whose name has a '/'."""
    ino, tree = inode_of(base, "/names/name_me")
    dirino, _ = inode_of(base, "/names")
    name = b"ext/ref"
    try:
        im.insert_item(im.tree_root(tree)[0], (ino, C.INODE_EXTREF, C.extref_hash(dirino, name)),
                       C.inode_extref(dirino, 91000, name))
    except ValueError as e:
        pytest.skip("test setup: no room: %s" % e)
    return Case("INODE_EXTREF of ino %d named %r" % (ino, name), must_fail=set(),
                needles=[ino], cats=["/names/name_me"])


# -- silent failures: symlinks

def _symlink_inode(base, im, path="/sym"):
    ino, tree = inode_of(base, path)
    blk, slot = item_slot(im, tree, (ino, C.INODE_ITEM, 0))
    return ino, tree, blk, slot


def _target_not_silent(path):
    def check(results, problems):
        res = results.get("lsj")
        if res is None or res.timed_out or res.truncated:
            return
        for raw in res.out.split(b"\n"):
            try:
                o = json.loads(raw.decode("utf-8", "surrogateescape"))
            except ValueError:
                continue
            if o.get("path") == path and o.get("target", None) == "":
                problems.append("lsj: %s listed with an empty target" % path)
    return check


def make_symlink_size(size, path="/sym"):
    def build(base, im):
        ino, tree, blk, slot = _symlink_inode(base, im, path)
        blk.patch_item(slot, C.INODE_SIZE, "<Q", size)
        im.write_block(blk)
        return Case("symlink %s (ino %d) claims a %d-byte target" % (path, ino, size),
                    must_fail={"lsj"}, needles=[ino], checks=[_target_not_silent(path)])
    return build


def c_symlink_inline_ram(base, im):
    ino, tree = inode_of(base, "/sym")
    hit = first_extent(im, tree, ino, is_inline)
    blk, slot = hit
    blk.patch_item(slot, C.FE_RAM_BYTES, "<Q", 1 << 20)
    im.write_block(blk)
    return Case("symlink /sym (ino %d): inline extent claims ram_bytes 1 MiB" % ino,
                must_fail={"lsj"}, needles=[ino], checks=[_target_not_silent("/sym")])


def c_symlink_no_extent(base, im):
    ino, tree = inode_of(base, "/sym")
    blk, slot = first_extent(im, tree, ino, is_inline)
    blk.delete_item(slot)
    im.write_block(blk)
    return Case("symlink /sym (ino %d) has no extent (no target)" % ino,
                must_fail={"lsj"}, needles=[ino], checks=[_target_not_silent("/sym")])


# -- claims that contradict what is there

def c_super_num_devices(n):
    def build(base, im):
        im.set_super(num_devices=n)
        return Case("superblock claims %d devices (the chunk tree has one)" % n,
                    must_fail={"show"}, needles=[n, "num_devices", "devices"])
    return build


def _file_extent_case(path, want, field, fmt, value, what, reads_only=None):
    def build(base, im):
        if path not in base.paths:
            pytest.skip("base image has no %s" % path)
        ino, tree = inode_of(base, path)
        hit = first_extent(im, tree, ino, want)
        if hit is None:
            pytest.skip("test setup: %s has no extent of that kind in %s" % (path, base.name))
        blk, slot = hit
        k = blk.item_key(slot)
        if field == "key_offset":
            blk.set_item_key(slot, C.Key(k[0], k[1], value))
        else:
            blk.patch_item(slot, field, fmt, value(blk, slot) if callable(value) else value)
        im.write_block(blk)
        return Case("%s (ino %d) extent at file offset %d: %s" % (path, ino, k.offset, what),
                    must_fail={"cat:" + path}, needles=[ino], cats=[path])
    return build


def is_compressed_reg(blk, slot):
    return is_reg(blk, slot) and blk.get_item(slot, C.FE_COMPRESSION, "<B") != 0


def is_compressed_inline(blk, slot):
    return is_inline(blk, slot) and blk.get_item(slot, C.FE_COMPRESSION, "<B") != 0


def is_plain_inline(blk, slot):
    return is_inline(blk, slot) and blk.get_item(slot, C.FE_COMPRESSION, "<B") == 0


def c_inode_size_huge(base, im):
    ino, tree = inode_of(base, "/big.bin")
    blk, slot = item_slot(im, tree, (ino, C.INODE_ITEM, 0))
    blk.patch_item(slot, C.INODE_SIZE, "<Q", 1 << 60)
    im.write_block(blk)
    return Case("/big.bin (ino %d) claims size 2^60 with a few extents" % ino,
                must_fail={"cat:/big.bin"}, needles=[ino], cats=["/big.bin"])


def c_leaf_nritems_huge(base, im):
    ino, tree = inode_of(base, "/names/name_me")
    blk, slot = item_slot(im, tree, (ino, C.INODE_ITEM, 0))
    blk.nritems(0xFFFFFFFF)
    im.write_block(blk)
    return Case("fs tree leaf %d claims 2^32-1 items" % blk.logical,
                must_fail={"dump", "dumpfs", "ls", "lsj", "cat:/names/name_me"},
                needles=[blk.logical], cats=["/names/name_me"])


def c_node_nritems_huge(base, im):
    node = fs_node(im)
    node.nritems(0x7FFFFFFF)
    im.write_block(node)
    return Case("fs tree node %d claims 2^31-1 slots" % node.logical,
                must_fail=ALL_FS, needles=[node.logical])


def c_root_level_huge(base, im):
    r, _ = im.tree_root(5)
    _set_root_item(im, 5, r, 200)
    return Case("ROOT_ITEM of the fs tree claims level 200 for block %d" % r,
                must_fail=ALL_FS, needles=[r, "200"])


def _sys_chunk_edit(fn, what):
    def build(base, im):
        (key, off, chunk), = im.sys_chunk_array()[:1]

        def edit(buf):
            fn(buf, off)
        im.edit_super(edit)
        return Case("system chunk at %d: %s" % (key.offset, what), must_fail={"*"},
                    needles=[key.offset, "chunk"])
    return build


c_sys_num_stripes = _sys_chunk_edit(lambda buf, off: struct.pack_into("<H", buf, off + 44, 0xFFFF),
                                    "num_stripes 65535 in a 2048-byte array")
c_sys_length_huge = _sys_chunk_edit(lambda buf, off: struct.pack_into("<Q", buf, off, 1 << 60),
                                    "length 2^60")


# ---------------------------------------------------------------- the table

CASES = {
    # blocks accepted twice and exponential chains
    "ptr_dup_child": c_ptr_dup_child,
    "ptr_dup_child_same_key": lambda b, im: c_ptr_dup_child(b, im, same_key=True),
    "ptr_all_same_child": c_ptr_all_same,
    "ptr_root_tree_block": c_ptr_root_tree,
    "ptr_extent_tree_block": c_ptr_extent_tree,
    "ptr_self": c_ptr_self,
    "chain_2x3": c_chain_2x3,
    "chain_16_equal_keys": c_chain_wide_equal,
    "chain_16_increasing_keys": c_chain_wide_increasing,
    # directories with two names
    "dir_alias_sibling": c_dir_alias_sibling,
    "dir_alias_ancestor": c_dir_alias_ancestor,
    "dir_alias_root": c_dir_alias_root,
    "dir_alias_chain": c_dir_alias_chain,
    # roots at the wrong tree
    "root_fs_to_root_tree": c_root_fs_to_root_tree,
    "root_fs_to_extent_tree": c_root_fs_to_extent,
    "root_csum_to_fs_tree": c_root_csum_to_fs,
    "root_subvol_to_fs_tree": c_root_subvol_to_fs,
    "super_root_to_chunk_tree": c_super_root_to_chunk,
    "super_chunk_root_to_root_tree": c_super_chunk_root_to_root,
    "log_root_to_root_tree": c_log_root_to_root_tree,
    "log_root_to_fs_tree": c_log_root_to_fs,
    "log_item_to_log_root": c_log_item_to_log_root,
    "log_item_to_fs_tree": c_log_item_to_fs,
    # names
    "extref_slash": c_extref_bad_name,
    # silent symlink failures
    "symlink_size_5000": make_symlink_size(5000),
    "symlink_size_2p60": make_symlink_size(1 << 60),
    "symlink_long_size_2p32": make_symlink_size(1 << 32, "/symlong"),
    "symlink_inline_ram_1m": c_symlink_inline_ram,
    "symlink_no_extent": c_symlink_no_extent,
    # claims
    "super_num_devices_2p40": c_super_num_devices(1 << 40),
    "super_num_devices_0": c_super_num_devices(0),
    "extent_num_bytes_2p60": _file_extent_case("/big.bin", is_reg, C.FE_NUM_BYTES, "<Q", 1 << 60,
                                               "num_bytes 2^60"),
    "extent_disk_num_bytes_2p60": _file_extent_case("/big.bin", is_reg, C.FE_DISK_NUM_BYTES, "<Q",
                                                    1 << 60, "disk_num_bytes 2^60"),
    "inode_size_2p60": c_inode_size_huge,
    "compressed_ram_2p40": _file_extent_case("/text.txt", is_compressed_reg, C.FE_RAM_BYTES, "<Q",
                                             1 << 40, "compressed, ram_bytes 2^40"),
    "inline_ram_1m": _file_extent_case("/small.txt", is_plain_inline, C.FE_RAM_BYTES, "<Q", 1 << 20,
                                       "inline, ram_bytes 1 MiB"),
    "inline_compressed_ram_2p32": _file_extent_case("/small.txt", is_compressed_inline,
                                                    C.FE_RAM_BYTES, "<Q", 1 << 32,
                                                    "compressed inline, ram_bytes 2^32"),
    "leaf_nritems_huge": c_leaf_nritems_huge,
    "node_nritems_huge": c_node_nritems_huge,
    "root_level_200": c_root_level_huge,
    "sys_chunk_num_stripes": c_sys_num_stripes,
    "sys_chunk_length_2p60": c_sys_length_huge,
    # sums that wrap
    "extent_bytenr_wrap": _file_extent_case(
        "/big.bin", is_reg, C.FE_DISK_BYTENR, "<Q", C.U64 - 4095, "disk_bytenr 2^64-4096"),
    "extent_bytenr_plus_offset_wrap": _file_extent_case(
        "/big.bin", is_reg, C.FE_OFFSET, "<Q",
        lambda b, s: C.U64 - b.get_item(s, C.FE_DISK_BYTENR, "<Q") + 4097,
        "offset such that disk_bytenr + offset wraps"),
    "extent_offset_beyond_ram": _file_extent_case(
        "/big.bin", is_reg, C.FE_OFFSET, "<Q",
        lambda b, s: b.get_item(s, C.FE_RAM_BYTES, "<Q") + 4096, "offset beyond ram_bytes"),
    "extent_num_bytes_beyond_ram": _file_extent_case(
        "/big.bin", is_reg, C.FE_NUM_BYTES, "<Q",
        lambda b, s: b.get_item(s, C.FE_RAM_BYTES, "<Q") + 8192, "num_bytes beyond ram_bytes"),
    "extent_file_offset_wrap": _file_extent_case(
        "/big.bin", is_reg, "key_offset", None, C.U64 - 4095,
        "file offset 2^64-4096 (offset + num_bytes wraps)"),
}
for _kind in ("both", "index", "item", "ref"):
    for _bad in BAD_NAMES:
        CASES["name_%s_%s" % (_kind, _bad)] = make_name_case(_kind, _bad, "name_me")
    CASES["name_%s_slash_dir" % _kind] = make_name_case(_kind, "slash", "dir_me")

# which bases a case applies to (default: all but the crash image's log-only cases)
ONLY = {
    # a size past the last extent is damage only where every hole has its item (no-holes
    # off); with no-holes it is a sparse file, which the kernel reads as zeros too
    "inode_size_2p60": ["kernel4k"],
    "root_subvol_to_fs_tree": ["kernel4k"],
    "log_root_to_root_tree": ["crash"],
    "log_root_to_fs_tree": ["crash"],
    "log_item_to_log_root": ["crash"],
    "log_item_to_fs_tree": ["crash"],
    "compressed_ram_2p40": ["kernel4k"],
    "inline_compressed_ram_2p32": ["kernel4k"],
    "inline_ram_1m": ["mkfs4k", "mkfs16k", "crash"],
}

# The quick run: a representative case of each kind on one base image each,
# together covering 4k/16k nodes, DUP/single metadata, mkfs/kernel and the log.
QUICK = {
    "ptr_dup_child": "mkfs4k", "ptr_all_same_child": "kernel4k", "ptr_root_tree_block": "crash",
    "chain_2x3": "kernel4k", "chain_16_increasing_keys": "mkfs16k",
    "dir_alias_sibling": "mkfs16k", "dir_alias_ancestor": "kernel4k", "dir_alias_chain": "mkfs4k",
    "root_fs_to_root_tree": "mkfs16k", "root_subvol_to_fs_tree": "kernel4k",
    "super_chunk_root_to_root_tree": "mkfs4k", "log_root_to_root_tree": "crash",
    "log_item_to_log_root": "crash",
    "name_both_slash": "crash", "name_both_nul": "mkfs4k", "name_index_dot": "mkfs16k",
    "name_both_dotdot": "kernel4k", "name_ref_slash_dir": "crash",
    "symlink_size_5000": "mkfs4k", "symlink_long_size_2p32": "kernel4k",
    "super_num_devices_2p40": "mkfs16k", "extent_num_bytes_2p60": "crash",
    "inode_size_2p60": "kernel4k", "compressed_ram_2p40": "kernel4k", "inline_ram_1m": "mkfs4k",
    "sys_chunk_num_stripes": "mkfs4k", "extent_bytenr_plus_offset_wrap": "mkfs16k",
    "extent_offset_beyond_ram": "kernel4k", "extent_file_offset_wrap": "mkfs4k",
}


def _params():
    out = []
    for name in CASES:
        bases = ONLY.get(name, BASES)
        if LONG:
            chosen = bases
        elif name in QUICK:
            assert QUICK[name] in bases, name
            chosen = [QUICK[name]]
        else:
            continue
        for b in chosen:
            out.append(pytest.param(b, name, id="%s-%s" % (b, name)))
    return out


def progs_check(image):
    cp = T.run(["btrfs", "check", "--readonly", image], check=False, timeout=120)
    return cp.returncode, (cp.stdout + cp.stderr).decode("utf-8", "replace")


@pytest.mark.parametrize("base_name,case_name", _params())
def test_hostile(bases, ubtrfs_bin, base_name, case_name):
    base = bases(base_name)
    img = os.path.join(bases.work, "%s-%s.img" % (base_name, case_name))
    T.copy_sparse(base.image, img)
    try:
        with C.Image(img) as im:
            case = CASES[case_name](base, im)
        if PROGS_CHECK:
            rc, text = progs_check(img)
            assert rc != 0, "btrfs check finds nothing wrong with %s: %s" % (case.what, text[-1500:])
        problems, _ = run_case(base, case, img, ubtrfs_bin)
        assert not problems, "%s [%s]:\n  %s" % (case.what, base_name, "\n  ".join(problems))
    finally:
        if os.environ.get("UBTRFS_KEEP_IMAGES") != "1":
            os.unlink(img)


def test_bases_are_clean(bases, ubtrfs_bin):
    """The undamaged base images pass the same checks with exit 0 everywhere, and
    btrfs check finds them clean: the failures above come from the damage alone."""
    problems = []
    for name in BASES:
        base = bases(name)
        rc, text = progs_check(base.image)
        if rc != 0:
            problems.append("%s: btrfs check: %s" % (name, text[-800:]))
        p, results = run_case(base, Case("nothing"), base.image, ubtrfs_bin)
        problems += ["%s: %s" % (name, x) for x in p]
        for key, res in results.items():
            if res.rc != 0:
                problems.append("%s: %s exit %d on the clean image: %s" % (name, key, res.rc, res.brief()))
    assert not problems, "\n".join(problems)
