# SPDX-License-Identifier: MIT
"""ubtrfs mkfs --rootdir, refereed by btrfs-progs, the kernel and the source folder.

One generated source tree (ubtrfs_testlib.make_source_tree: files of every size
class and content kind, sparse files, hard links, symlinks, special files,
xattrs, many small files, ns times) is copied with `ubtrfs mkfs --rootdir` in
several profiles and node sizes. For each:
  - `btrfs check` exits 0 with no error line;
  - the kernel's read-only mount shows exactly the source: every entry with
    type, mode, owner, size, link count, rdev, atime/mtime/ctime, xattrs and
    symlink target, and the sha256 of every file (inode numbers are the new
    filesystem's own; a directory's size and link count are btrfs's);
  - holes stay holes (the allocated bytes of the big sparse files);
  - `ubtrfs ls --json -R` agrees with the kernel and `ubtrfs cat` with the source.
With --compress, compressed extents of that algorithm are present (text
compresses) and the superblock has the algorithm's incompat bit.
Errors in the source (an unreadable file) exit 1 naming the path.

UBTRFS_LONG_TESTS=1: tens of thousands of small files and a bigger tree.
"""

import os
import re
import stat

import pytest

import ubtrfs_testlib as T

LONG = os.environ.get("UBTRFS_LONG_TESTS") == "1"
MiB = 1 << 20

# name, mkfs options, devices
CASES = [
    ("dup", [], 1),
    ("raid1-zstd", ["-d", "raid1", "-m", "raid1", "--compress", "zstd:5"], 2),
    ("raid5-lzo", ["-d", "raid5", "-m", "raid1", "--compress", "lzo"], 3),
    ("raid6-4k", ["-d", "raid6", "-m", "raid1c3", "-n", "4096"], 4),
]
if LONG:
    CASES += [
        ("single-4k", ["-d", "single", "-m", "single", "-n", "4096"], 1),
        ("raid10", ["-d", "raid10", "-m", "raid10"], 4),
        ("dup-64k-sha256", ["-n", "65536", "--csum", "sha256"], 1),
        ("single-zlib", ["-d", "single", "-m", "dup", "--compress", "zlib:9"], 1),
    ]


@pytest.fixture(scope="module")
def scratch():
    d = T.make_scratch_dir()
    yield d
    T.rmtree(d)


@pytest.fixture(scope="module")
def source(scratch):
    src = os.path.join(scratch, "src")
    if LONG:
        T.make_source_tree(src, seed=7, scale=2.0, many_small=30000)
    else:
        T.make_source_tree(src, seed=7, scale=0.3, many_small=2000)
    # big sparse files: data islands in holes, an unaligned tail, a file that is all hole
    big = os.path.join(src, "bigsparse")
    os.mkdir(big)
    gap = 64 * MiB if LONG else 16 * MiB
    with open(os.path.join(big, "islands"), "wb") as f:
        for i in range(6):
            f.seek(i * gap + 12345)
            f.write(os.urandom(300000))
        f.truncate(6 * gap + 77)
    with open(os.path.join(big, "allhole"), "wb") as f:
        f.truncate((1 << 30) if LONG else 256 * MiB)
    os.utime(big, ns=(1500000000 * 10**9 + 1, 1500000000 * 10**9 + 2))
    # reading the source moves its atimes once (relatime: atime older than mtime, or than a
    # day); walked and read once first, the second walk is what every later reader sees
    T.hash_files(src, T.walk_tree(src, btrfs=False))
    entries = T.walk_tree(src, btrfs=False)
    hashes = T.hash_files(src, entries)
    assert T.walk_tree(src, btrfs=False) == entries
    return src, entries, hashes


def _images(base, name, n, size):
    paths = []
    for i in range(n):
        p = os.path.join(base, "%s-%d.img" % (name, i))
        if os.path.exists(p):
            os.unlink(p)
        with open(p, "wb") as f:
            f.truncate(size)
        paths.append(p)
    return paths


def check_clean(images, what):
    """btrfs check over loop devices of the images: exit 0, no error line (a failing scan of a
    loop device that is not ours, another test's being torn down, says nothing about this one)."""
    loops = []
    try:
        for img in images:
            loops.append(T.losetup_attach(img, True))
        for dev in loops:
            T.run(["btrfs", "device", "scan", dev])
        cp = T.run(["btrfs", "check", "--readonly", loops[0]], check=False, timeout=900)
    finally:
        for dev in loops:
            T.run(["btrfs", "device", "scan", "--forget", dev], check=False)
            T.losetup_detach(dev)
    out = (cp.stdout + cp.stderr).decode("utf-8", "replace")
    bad = []
    for line in out.splitlines():
        m = re.match(r"^ERROR: cannot scan (/dev/\S+): ", line)
        if m and m.group(1) not in loops:
            continue
        if re.search(r"error|corrupt|mismatch|wrong|missing", line, re.I) and "no error found" not in line:
            bad.append(line)
    assert cp.returncode == 0 and not bad, "btrfs check (%s) not clean (exit %d):\n%s" % (
        what, cp.returncode, out[-4000:])
    assert "no error found" in out, out[-2000:]


def normalized(entries):
    """What must be equal between the source and the copy: inode numbers and subvolume ids
    are the filesystem's own, and a directory's size and link count follow btrfs's rules
    (sum of names, always 1), not the source filesystem's."""
    out = {}
    for p, e in entries.items():
        e = dict(e)
        e["ino"] = e["subvol"] = None
        if e["type"] == "dir":
            e["size"] = e["nlink"] = None
        out[p] = e
    return out


def allocated(path):
    return os.lstat(path).st_blocks * 512


@pytest.mark.parametrize("name,opts,ndev", CASES, ids=[c[0] for c in CASES])
def test_rootdir_copy(scratch, source, name, opts, ndev):
    src, expected, hashes = source
    work = os.path.join(scratch, name)
    os.makedirs(work, exist_ok=True)
    imgs = _images(work, "img", ndev, (3 << 30) if ndev == 1 else (2 << 30))
    try:
        cp = T.ubtrfs("mkfs", "-f", "-q", "--rootdir", src, *opts, *imgs, timeout=900)
        assert cp.returncode == 0, T.describe(cp)
        check_clean(imgs, name)
        if "--compress" in opts:
            alg = opts[opts.index("--compress") + 1].split(":")[0]
            code = {"zlib": 1, "lzo": 2, "zstd": 3}[alg]
            dump = T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "5", imgs[0]]).stdout.decode("utf-8", "replace")
            n = len(re.findall(r"extent compression %d " % code, dump))
            assert n > 0, "no %s extent written" % alg
            sup = T.run(["btrfs", "inspect-internal", "dump-super", imgs[0]]).stdout.decode("utf-8", "replace")
            if alg != "zlib":
                assert "COMPRESS_" + alg.upper() in sup, sup

        with T.mounted(imgs, os.path.join(work, "mnt")) as mnt:
            got = T.walk_tree(mnt)
            got_hashes = T.hash_files(mnt, got)
            # holes stayed holes: the sparse files take about their data, not their size
            isl = os.path.join(mnt, "bigsparse", "islands")
            assert allocated(isl) <= allocated(os.path.join(src, "bigsparse", "islands")) + 6 * 8192, \
                allocated(isl)
            assert allocated(os.path.join(mnt, "bigsparse", "allhole")) == 0
        problems = T.compare_entries(normalized(expected), normalized(got))
        assert not problems, "kernel view differs from the source:\n" + "\n".join(problems)
        assert got_hashes == hashes
        assert all(e["subvol"] == 5 for e in got.values())
        # hard links: one inode per source inode
        src_groups, got_groups = {}, {}
        for p, e in expected.items():
            if e["type"] != "dir":
                src_groups.setdefault(e["ino"], set()).add(p)
        for p, e in got.items():
            if e["type"] != "dir":
                got_groups.setdefault(e["ino"], set()).add(p)
        assert sorted(map(sorted, src_groups.values())) == sorted(map(sorted, got_groups.values()))

        # ubtrfs reads the same
        cp = T.ubtrfs("ls", "--json", "-R", *imgs)
        assert cp.returncode == 0, T.describe(cp)
        objs, dups = T.index_entries(T.parse_ls_json(cp.stdout))
        assert not dups, dups
        assert set(objs) == set(got), (sorted(set(objs) ^ set(got)))[:20]
        bad = []
        for p, e in got.items():
            o = objs[p]
            keys = ["type", "ino", "mode", "uid", "gid", "mtime", "xattrs"]
            keys += {"file": ["size", "nlink"], "symlink": ["target"], "chr": ["rdev_major", "rdev_minor"],
                     "blk": ["rdev_major", "rdev_minor"]}.get(e["type"], [])
            bad += ["%s: %s ls %r kernel %r" % (p, k, o.get(k), e[k]) for k in keys if o.get(k) != e[k]]
        assert not bad, "\n".join(bad[:30])
        files = sorted(p for p, e in got.items() if e["type"] == "file")
        for p in files[:: max(1, len(files) // 8)] + ["/bigsparse/islands"]:
            rc, size, digest, err = T.cat_hash(imgs, p)
            assert rc == 0 and (size, digest) == hashes[p], (p, rc, T.describe(err))
    finally:
        T.rmtree(work)


def fs_tree_shape(img):
    """The subvolume tree without what depends on timing: block addresses, generations, transids
    (commits fall elsewhere), data addresses and creation times."""
    dump = T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "5", img]).stdout.decode("utf-8", "replace")
    skip = re.compile(r"otime|generation|transid|bytenr|block \d+|^(node|leaf) \d+|checksum|owner|uuid")
    return [l for l in dump.splitlines() if not skip.search(l)]


@pytest.mark.parametrize("opts", [[], ["--compress", "zstd"]], ids=["plain", "zstd"])
def test_rootdir_threads_same(scratch, source, opts):
    """The readers on worker threads (the default) write exactly what the single-thread copy writes:
    the same items, extents cut at the same offsets, the same compression, checksums and sequence
    numbers. CI: about 15 s under SAN."""
    src = source[0]
    work = os.path.join(scratch, "threads" + "".join(opts))
    os.makedirs(work, exist_ok=True)
    shapes = []
    try:
        for threads in ("-1", "2"):
            img = _images(work, "img" + threads, 1, 3 << 30)[0]
            cp = T.run(["env", "UBTRFS_ROOTDIR_THREADS=" + threads, T.ubtrfs_binary(), "mkfs", "-f", "-q",
                        "--rootdir", src, *opts, img], check=False, timeout=900)
            assert cp.returncode == 0, T.describe(cp)
            shapes.append(fs_tree_shape(img))
            os.unlink(img)
        a, b = shapes
        diff = [x for x in zip(a, b) if x[0] != x[1]][:10]
        assert a == b, "threads -1 / 2 differ (%d / %d lines): %s" % (len(a), len(b), diff)
        assert any("extent data disk" in l for l in a)
    finally:
        T.rmtree(work)


def test_rootdir_errors(scratch):
    work = os.path.join(scratch, "errors")
    src = os.path.join(work, "src")
    os.makedirs(os.path.join(src, "d"))
    with open(os.path.join(src, "d", "secret"), "wb") as f:
        f.write(b"x" * 5000)
    img = _images(work, "img", 1, 512 * MiB)[0]
    try:
        # not a directory: refused before anything is written
        cp = T.ubtrfs("mkfs", "-f", "-q", "--rootdir", os.path.join(src, "d", "secret"), img)
        assert cp.returncode == 2 and b"not a directory" in cp.stderr, T.describe(cp)
        cp = T.ubtrfs("mkfs", "-f", "-q", "--compress", "zstd", img)
        assert cp.returncode == 2 and b"--compress needs --rootdir" in cp.stderr, T.describe(cp)
        for bad in ("zstd:16", "lzo:1", "zlib:0", "brotli", "zstd:"):
            cp = T.ubtrfs("mkfs", "-f", "-q", "--compress", bad, "--rootdir", src, img)
            assert cp.returncode == 2 and b"--compress" in cp.stderr, (bad, T.describe(cp))
        # an unreadable file: root without the DAC capabilities (setpriv) cannot open a
        # mode 000 file of another user; the copy stops with exit 1 naming the path
        secret = os.path.join(src, "d", "secret")
        os.chown(secret, 4242, 4242)
        os.chmod(secret, 0)
        cp = T.run(["setpriv", "--bounding-set", "-dac_override,-dac_read_search", T.ubtrfs_binary(),
                    "mkfs", "-f", "-q", "--rootdir", src, img], check=False)
        assert cp.returncode == 1, T.describe(cp)
        assert secret.encode() in cp.stderr and b"Permission denied" in cp.stderr, T.describe(cp)
        check_clean([img], "after a failed copy")
    finally:
        T.rmtree(work)
