# SPDX-License-Identifier: MIT
"""Helpers for the ubtrfs integration tests.

The oracle for every read test is the Linux kernel: each image is mounted
read-only (on a read-only loop device, so nothing can be written back) and
walked; ubtrfs must report exactly what the kernel reports.  This module holds
the seeded source-tree generator, the loop/mount plumbing (with a registry so
the session can prove it left nothing behind), the kernel-side walker and the
parsers for ubtrfs' and btrfs-progs' output.
"""

import contextlib
import ctypes
import errno
import fcntl
import hashlib
import json
import os
import random
import re
import shutil
import socket
import stat
import struct
import subprocess
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LONG_TESTS = os.environ.get("UBTRFS_LONG_TESTS") == "1"
MiB = 1 << 20

# Keys every `ubtrfs ls --json` object must carry ("target" only for symlinks).
LS_KEYS = ("path", "name", "subvol", "ino", "type", "mode", "size", "nlink", "uid", "gid",
           "rdev_major", "rdev_minor", "atime", "mtime", "ctime", "xattrs")


# Set once per session to a private copy of the binary, so that a rebuild in the
# middle of a run (make replaces build/ubtrfs) cannot make tests fail at exec.
_BINARY_SNAPSHOT = []


def ubtrfs_binary():
    if _BINARY_SNAPSHOT:
        return _BINARY_SNAPSHOT[0]
    return Path(os.environ.get("UBTRFS", str(REPO / "build" / "ubtrfs")))


def snapshot_binary(directory):
    """Copy the binary under test into `directory` and run that copy from now on."""
    if not _BINARY_SNAPSHOT:
        src = ubtrfs_binary()
        dst = Path(directory) / "ubtrfs-under-test"
        shutil.copy2(src, dst)
        _BINARY_SNAPSHOT.append(dst)
    return _BINARY_SNAPSHOT[0]


# --------------------------------------------------------------------------
# checksums, computed test-side

_CRC_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _CRC_TABLE.append(_c)


def crc32c(data):
    """CRC-32C as btrfs stores it (test-side oracle, independent of the library)."""
    c = 0xFFFFFFFF
    for b in data:
        c = _CRC_TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


# --------------------------------------------------------------------------
# running commands

# `btrfs device scan --forget` without a device drops every registered device that is not
# part of a mounted filesystem, also one that a concurrent mount (another pytest-xdist
# worker) has just registered from its device= options and is about to open. Every mount
# run through here holds this lock shared and such a forget holds it exclusively, so the
# two never overlap (a forget of one named device needs no lock: it is the caller's own).
MOUNT_SCAN_LOCK = "/run/lock/ubtrfs-tests-mount-scan.lock"


def _lock_for(cmd):
    if cmd[:1] == ["mount"]:
        return file_lock(MOUNT_SCAN_LOCK, shared=True)
    if cmd == ["btrfs", "device", "scan", "--forget"]:
        return file_lock(MOUNT_SCAN_LOCK)
    return contextlib.nullcontext()


def run(cmd, check=True, timeout=300, input=None):
    """Run a command, capturing bytes; raise with both streams on failure."""
    cmd = [str(c) for c in cmd]
    with _lock_for(cmd):
        cp = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            timeout=timeout, input=input)
    if check and cp.returncode != 0:
        raise RuntimeError("command failed (%d): %s\nstdout: %s\nstderr: %s" % (
            cp.returncode, " ".join(str(c) for c in cmd),
            cp.stdout[-2000:].decode("utf-8", "replace"), cp.stderr[-2000:].decode("utf-8", "replace")))
    return cp


def ubtrfs(*args, timeout=300):
    """Run the binary under test; never raises on a non-zero exit."""
    return run([ubtrfs_binary(), *args], check=False, timeout=timeout)


def describe(cp):
    """Short text for assertion messages about a finished ubtrfs run."""
    return "exit %d, cmd %s\nstderr: %s" % (
        cp.returncode, " ".join(str(a) for a in cp.args),
        cp.stderr[-3000:].decode("utf-8", "replace"))


# --------------------------------------------------------------------------
# loop devices and mounts, with a registry checked at session end

class _Registry:
    def __init__(self):
        self.lock = threading.Lock()
        self.loops = set()
        self.mounts = set()


REGISTRY = _Registry()


# `losetup --find` picks the first free device and then claims it: two processes
# (pytest-xdist workers, or colleagues' sessions on the same machine) can pick the
# same one and the loser fails with EBUSY. A machine-wide lock around the pair
# makes the pick and the claim one step; a failure is retried a few times in case
# a process that does not take the lock got there first.
LOSETUP_LOCK = "/run/lock/ubtrfs-tests-losetup.lock"


def losetup_attach(image, readonly):
    args = ["losetup", "--find", "--show"]
    if readonly:
        args.append("--read-only")
    for attempt in range(5):
        with file_lock(LOSETUP_LOCK):
            cp = run(args + [image], check=attempt == 4)
        if cp.returncode == 0:
            break
        time.sleep(0.2 * (attempt + 1))
    dev = cp.stdout.decode().strip()
    with REGISTRY.lock:
        REGISTRY.loops.add(dev)
    return dev


def losetup_detach(dev):
    # A stale btrfs device registration on a recycled loop name confuses later
    # mounts of other images; drop it while the device still exists.
    run(["btrfs", "device", "scan", "--forget", dev], check=False)
    run(["losetup", "-d", dev])
    with REGISTRY.lock:
        REGISTRY.loops.discard(dev)


def umount(mnt):
    cp = run(["umount", mnt], check=False)
    if cp.returncode != 0:
        # Something (a leaked fd in a failing test) may still hold it; sync
        # and retry once before giving up loudly.
        run(["sync"], check=False)
        run(["umount", mnt])
    with REGISTRY.lock:
        REGISTRY.mounts.discard(str(mnt))


@contextlib.contextmanager
def mounted(images, mountpoint, options="", readonly=True):
    """Attach every image to a loop device, mount the filesystem, clean up always.

    Read-only mounts use a read-only loop device and skip log replay, so the
    image cannot change under the oracle.
    """
    images = [str(i) for i in images]
    loops = []
    mnt = str(mountpoint)
    os.makedirs(mnt, exist_ok=True)
    is_mounted = False
    try:
        for img in images:
            loops.append(losetup_attach(img, readonly))
        opts = []
        if readonly:
            opts += ["ro", "rescue=nologreplay"]
        if options:
            opts.append(options)
        opts += ["device=%s" % d for d in loops[1:]]
        cmd = ["mount", "-t", "btrfs"]
        if opts:
            cmd += ["-o", ",".join(opts)]
        run(cmd + [loops[0], mnt])
        is_mounted = True
        with REGISTRY.lock:
            REGISTRY.mounts.add(mnt)
        yield mnt
    finally:
        try:
            if is_mounted:
                umount(mnt)
        finally:
            for dev in loops:
                losetup_detach(dev)


def leftovers(base_dir):
    """Loop devices backed by files under base_dir and mounts below it (should be none)."""
    base = os.path.realpath(str(base_dir)).rstrip("/") + "/"
    out = run(["losetup", "--list", "--noheadings", "--output", "NAME,BACK-FILE"], check=False)
    loops = []
    for line in out.stdout.decode("utf-8", "replace").splitlines():
        parts = line.split(None, 1)
        if len(parts) == 2 and parts[1].strip().startswith(base):
            loops.append(line.strip())
    mounts = []
    with open("/proc/self/mounts") as f:
        for line in f:
            mp = line.split()[1].encode().decode("unicode_escape")
            if (mp + "/").startswith(base):
                mounts.append(mp)
    return loops, mounts


# --------------------------------------------------------------------------
# seeded source tree generator

def _words(rng):
    # The vocabulary hangs off the generator so it is part of the seeded sequence.
    words = getattr(rng, "_ubtrfs_words", None)
    if words is None:
        letters = "etaoinshrdlcumwfgypbvkjxqz"
        words = ["".join(rng.choice(letters[:rng.randint(6, 26)]) for _ in range(rng.randint(1, 11)))
                 for _ in range(700)]
        rng._ubtrfs_words = words
    return words


def text_bytes(rng, n):
    """Compressible text: words from a small vocabulary, in lines."""
    words = _words(rng)
    out = []
    total = 0
    while total < n:
        line = " ".join(rng.choices(words, k=rng.randint(3, 16))) + "\n"
        out.append(line)
        total += len(line)
    return "".join(out).encode()[:n]


def file_bytes(rng, kind, n):
    if kind == "text":
        return text_bytes(rng, n)
    if kind == "random":
        return rng.randbytes(n)
    if kind == "zeroish":
        # Mostly zero blocks with a few marked ones: compresses to almost nothing.
        buf = bytearray(n)
        for off in range(0, n, 4096):
            if rng.random() < 0.1:
                buf[off:off + 16] = rng.randbytes(min(16, n - off))
        return bytes(buf)
    # mixed: alternating 64 KiB runs of text and random bytes
    parts = []
    left = n
    flip = rng.random() < 0.5
    while left > 0:
        k = min(left, 65536)
        parts.append(text_bytes(rng, k) if flip else rng.randbytes(k))
        flip = not flip
        left -= k
    return b"".join(parts)


KINDS = ("text", "random", "mixed", "zeroish")
FIXED_SIZES = (0, 1, 2, 511, 512, 2047, 2048, 2049, 3000, 4095, 4096, 4097, 8191, 8192, 12289,
               65535, 65536, 65537, 131075, 1 * MiB, 1 * MiB + 7, 3 * MiB + 123, 5 * MiB - 1)


def _write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def _set_xattr(path, name, value, follow=True):
    try:
        os.setxattr(path, name, value, follow_symlinks=follow)
        return True
    except OSError as e:
        if e.errno in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP):
            return False
        raise


def make_source_tree(root, seed, scale=1.0, long_symlink=3940, max_xattr=3000, many_small=0):
    """Create a deterministic tree of every kind of entry btrfs stores.

    `scale` multiplies the number of randomly sized files (about 25 MiB total
    at 1.0). `long_symlink` and `max_xattr` must fit a 4 KiB node. `many_small`
    adds a directory with that many small files.
    """
    rng = random.Random(seed)
    root = Path(root)
    root.mkdir(parents=True)
    B = os.fsencode

    # sizes/: boundary sizes around sectors, inline limits and extents
    sizes = root / "sizes"
    sizes.mkdir()
    for i, size in enumerate(FIXED_SIZES):
        kind = KINDS[i % len(KINDS)]
        _write(sizes / ("f%07d_%s" % (size, kind)), file_bytes(rng, kind, size))
    rnd = sizes / "random"
    rnd.mkdir()
    for i in range(int(50 * scale)):
        size = int(2 ** rng.uniform(0, 22))  # log-uniform up to 4 MiB
        kind = rng.choice(KINDS)
        _write(rnd / ("r%03d_%d_%s.bin" % (i, size, kind)), file_bytes(rng, kind, size))

    # sparse/: holes at the start, middle and end, unaligned boundaries
    sp = root / "sparse"
    sp.mkdir()
    with open(sp / "hole_start", "wb") as f:
        f.seek(1 * MiB)
        f.write(file_bytes(rng, "random", 10000))
    with open(sp / "data_hole_data", "wb") as f:
        f.write(file_bytes(rng, "text", 5000))
        f.seek(3 * MiB + 17)
        f.write(file_bytes(rng, "random", 4096))
    with open(sp / "hole_end", "wb") as f:
        f.write(file_bytes(rng, "random", 8192))
        f.truncate(2 * MiB)
    with open(sp / "all_hole", "wb") as f:
        f.truncate(10 * MiB)
    with open(sp / "checker", "wb") as f:
        for blk in range(0, 128, 2):
            f.seek(blk * 4096)
            f.write(file_bytes(rng, "random", 4096))
    with open(sp / "unaligned", "wb") as f:
        for off in (100, 70003, 200000 + 4095, 1 * MiB - 1):
            f.seek(off)
            f.write(file_bytes(rng, "mixed", 3001))
    with open(sp / "far", "wb") as f:
        f.seek(40 * MiB + 123)
        f.write(b"the end\n")

    # links/: several names for one inode, also across directories
    ln = root / "links"
    (ln / "sub").mkdir(parents=True)
    _write(ln / "a", file_bytes(rng, "text", 20000))
    os.link(ln / "a", ln / "b")
    os.link(ln / "a", ln / "c")
    os.link(ln / "a", ln / "sub" / "a_again")
    _write(ln / "big", file_bytes(rng, "random", 300000))
    os.link(ln / "big", root / "big_link_at_top")
    _write(ln / "empty", b"")
    os.link(ln / "empty", ln / "sub" / "empty_too")
    os.symlink("a", ln / "sym")
    os.link(ln / "sym", ln / "sym_hardlink", follow_symlinks=False)

    # symlinks/: short, absolute, dangling, long, non-ASCII targets
    sl = root / "symlinks"
    sl.mkdir()
    os.symlink("x", sl / "short")
    os.symlink("/etc/passwd", sl / "absolute")
    os.symlink("does/not/exist", sl / "dangling")
    os.symlink("../sizes", sl / "to_dir")
    os.symlink("cible-é-日本", sl / "utf8_target")
    for n in (255, 1000, 2048, 2049, long_symlink):
        target = ("seg%04d/" % n) * (n // 8 + 1)
        os.symlink(target[:n], sl / ("long_%d" % n))

    # names/: maximum length, UTF-8, bytes that are not UTF-8, JSON specials
    nm = root / "names"
    nm.mkdir()
    names = [
        "n" * 255,
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(255)),
        "ü" * 127 + "x",            # 255 bytes of 2-byte characters
        "日本語" * 28 + "xxx",       # 255 bytes of 3-byte characters
        "emoji-😀-🎉",
        "spaces in name",
        'quote"and\\backslash',
        "tab\tand\nnewline",
        "ctrl\x01\x1f",
        "-leading-dash",
        ".hidden",
        "..dots",
    ]
    for i, name in enumerate(names):
        _write(nm / name, file_bytes(rng, "text", 10 + i * 37))
    _write(os.path.join(B(str(nm)), b"not-utf8-\xff\xfe\x80"), b"raw bytes name\n")
    os.mkdir(os.path.join(B(str(nm)), b"dir-\xc3\x28-invalid"))
    (nm / ("d" * 255)).mkdir()
    _write(nm / ("d" * 255) / ("f" * 255), b"deep long names\n")

    # deep/: 30 levels
    d = root / "deep"
    for lvl in range(30):
        d = d / ("level%02d" % lvl)
        d.mkdir(parents=True)
        if lvl % 7 == 0:
            _write(d / "mid.txt", file_bytes(rng, "text", 100 + lvl))
    _write(d / "bottom.bin", file_bytes(rng, "random", 5000))
    d = root / "deep_long"
    for lvl in range(30):
        d = d / (("L%02d-" % lvl) + "x" * 120)
        d.mkdir(parents=True)
    _write(d / "f", b"long path\n")

    # empty directories
    (root / "empty" / "nested_empty").mkdir(parents=True)

    # special/: fifo, devices, socket
    spc = root / "special"
    spc.mkdir()
    os.mkfifo(spc / "fifo")
    os.mknod(spc / "null_like", 0o644 | stat.S_IFCHR, os.makedev(1, 3))
    os.mknod(spc / "blockdev", 0o600 | stat.S_IFBLK, os.makedev(7, 200))
    os.mknod(spc / "chr_big", 0o640 | stat.S_IFCHR, os.makedev(4095, 1048575))
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.bind(str(spc / "socket"))
    finally:
        s.close()

    # modes/ and owners
    md = root / "modes"
    md.mkdir()
    for mode in (0o600, 0o755, 0o4755, 0o2755, 0o6711, 0o000, 0o444, 0o777):
        p = md / ("mode_%04o" % mode)
        _write(p, b"mode %o\n" % mode)
        os.chown(p, 1000, 1000)
        os.chmod(p, mode)
    for mode in (0o1777, 0o700, 0o2775, 0o555):
        p = md / ("dir_%04o" % mode)
        p.mkdir()
        _write(p / "inside", b"x")
        os.chmod(p, mode)
    own = root / "owners"
    own.mkdir()
    for uid, gid in ((1000, 1000), (0, 1000), (65534, 65534), (123456, 7)):
        p = own / ("o_%d_%d" % (uid, gid))
        _write(p, b"owned\n")
        os.chown(p, uid, gid)
    os.symlink("o_0_1000", own / "sym_owned")
    os.chown(own / "sym_owned", 1000, 1001, follow_symlinks=False)
    (own / "dir_owned").mkdir()
    os.chown(own / "dir_owned", 1000, 1000)

    # xattrs on files, directories and symlinks
    xa = root / "xattrs"
    xa.mkdir()
    for i in range(6):
        p = xa / ("x%d" % i)
        _write(p, file_bytes(rng, "text", 100 * i))
        _set_xattr(p, "user.small", b"v%d" % i)
        _set_xattr(p, "user.empty", b"")
        _set_xattr(p, "user.binary", rng.randbytes(64))
        _set_xattr(p, "user.large", rng.randbytes(max_xattr - 200 * i))
    many = xa / "many"
    _write(many, b"many xattrs\n")
    for i in range(40):
        _set_xattr(many, "user.attr%02d" % i, file_bytes(rng, "text", rng.randint(1, 300)))
    _set_xattr(xa, "user.on_dir", b"directory value")
    _set_xattr(root / "empty", "user.empty_dir", rng.randbytes(500))
    os.symlink("x0", xa / "sym")
    # user.* is refused on symlinks; trusted.* is allowed for root
    _set_xattr(xa / "sym", "trusted.on_symlink", b"symlink value", follow=False)
    _set_xattr(xa / "x1", "trusted.secret", b"root only")
    _set_xattr(xa / "x2", "security.test", b"sec")

    # collisions/: names whose btrfs name hash (crc32c seeded with ~1) is equal, so
    # one DIR_ITEM / XATTR_ITEM holds several entries (found by brute force)
    co = root / "collisions"
    co.mkdir()
    _write(co / "coll_1371838", b"first of a hash pair\n")
    _write(co / "coll_2000402", b"second of a hash pair\n")
    _write(co / "coll_1371839", b"a file colliding with a directory\n")
    (co / "coll_2000403").mkdir()
    _write(co / "coll_2000403" / "inside", b"x\n")
    _set_xattr(co / "coll_1371838", "user.c1371838", b"xattr one")
    _set_xattr(co / "coll_1371838", "user.c2000402", b"xattr two, same name hash")

    if many_small:
        mdir = root / "many"
        mdir.mkdir()
        for i in range(many_small):
            name = "file_%05d_%s" % (i, "z" * rng.randint(0, 80))
            _write(mdir / name, file_bytes(rng, rng.choice(KINDS), rng.randint(0, 3000)))

    _set_times(root, rng)
    return root


def _set_times(root, rng):
    """Give every entry its own ns-precision times, children before parents."""
    special = [-300000000 * 10**9 - 123456789,       # 1960
               0,
               4102444800 * 10**9 + 999999999,       # 2100, needs 64-bit seconds
               1234567890 * 10**9 + 1]
    k = 0
    for dirpath, dirnames, filenames in os.walk(root, topdown=False):
        for name in filenames + dirnames:
            p = os.path.join(dirpath, name)
            if k < len(special):
                mt = special[k]
            else:
                mt = rng.randint(946684800, 1900000000) * 10**9 + rng.randint(0, 999999999)
            at = mt + rng.randint(0, 10**9 * 86400 * 30)
            k += 1
            os.utime(p, ns=(at, mt), follow_symlinks=False)
    os.utime(root, ns=(1600000000 * 10**9 + 5, 1600000000 * 10**9 + 7))


# --------------------------------------------------------------------------
# walking a mounted filesystem (or the source tree) into ls --json shape

# _IOWR(0x94, 18, struct btrfs_ioctl_ino_lookup_args), 4096 bytes
BTRFS_IOC_INO_LOOKUP = (3 << 30) | (4096 << 16) | (0x94 << 8) | 18


def subvol_id(path):
    """Tree id of the subvolume holding the directory `path` (kernel ioctl)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        buf = bytearray(4096)
        struct.pack_into("<QQ", buf, 0, 0, 256)
        fcntl.ioctl(fd, BTRFS_IOC_INO_LOOKUP, buf, True)
        return struct.unpack_from("<Q", buf, 0)[0]
    finally:
        os.close(fd)


def ftype(mode):
    for test, name in ((stat.S_ISREG, "file"), (stat.S_ISDIR, "dir"), (stat.S_ISLNK, "symlink"),
                       (stat.S_ISCHR, "chr"), (stat.S_ISBLK, "blk"), (stat.S_ISFIFO, "fifo"),
                       (stat.S_ISSOCK, "sock")):
        if test(mode):
            return name
    return "unknown"


def _ts(ns):
    return list(divmod(ns, 10**9))


def entry_from_stat(fspath, name, st, subvol, real):
    e = {
        "path": fspath, "name": name, "subvol": subvol, "ino": st.st_ino,
        "type": ftype(st.st_mode), "mode": st.st_mode, "size": st.st_size,
        "nlink": st.st_nlink, "uid": st.st_uid, "gid": st.st_gid,
        "rdev_major": os.major(st.st_rdev), "rdev_minor": os.minor(st.st_rdev),
        "atime": _ts(st.st_atime_ns), "mtime": _ts(st.st_mtime_ns), "ctime": _ts(st.st_ctime_ns),
    }
    if stat.S_ISLNK(st.st_mode):
        e["target"] = os.fsdecode(os.readlink(real))
    xattrs = {}
    for xname in os.listxattr(real, follow_symlinks=False):
        xattrs[xname] = os.getxattr(real, xname, follow_symlinks=False).hex()
    e["xattrs"] = xattrs
    return e


# The inode number the kernel gives the empty directory that stands in for a
# subvolume a snapshot did not take along.
EMPTY_SUBVOL_DIR_INO = 2


def walk_tree(top, btrfs=True, start="/"):
    """Every entry below `top` (not `top` itself) keyed by its path inside the filesystem.

    With btrfs=True the subvolume id comes from the kernel (one ioctl per st_dev),
    otherwise it is None.
    """
    top_b = os.fsencode(str(top))
    entries = {}
    dev_subvol = {}

    def subvol_of(real_dir, st):
        if not btrfs:
            return None
        if st.st_dev not in dev_subvol:
            dev_subvol[st.st_dev] = subvol_id(real_dir)
        return dev_subvol[st.st_dev]

    def recurse(real_dir, fs_dir):
        with os.scandir(real_dir) as it:
            children = sorted(it, key=lambda d: d.name)
        for de in children:
            real = de.path
            st = os.lstat(real)
            fspath = (fs_dir.rstrip(b"/") + b"/" + de.name)
            if stat.S_ISDIR(st.st_mode) and st.st_ino == EMPTY_SUBVOL_DIR_INO:
                # a placeholder takes no btrfs ioctl and shares its device number with
                # other subvolumes: it belongs to the subvolume of the directory holding it
                sv = subvol_of(real_dir, os.lstat(real_dir))
            elif stat.S_ISDIR(st.st_mode):
                sv = subvol_of(real, st)
            else:
                sv = subvol_of(real_dir, os.lstat(real_dir))
            entries[os.fsdecode(fspath)] = entry_from_stat(
                os.fsdecode(fspath), os.fsdecode(de.name), st, sv, real)
            if stat.S_ISDIR(st.st_mode):
                recurse(real, fspath)

    start_b = os.fsencode(start)
    real_top = top_b + (start_b if start_b != b"/" else b"")
    recurse(real_top, start_b)
    return entries


def sha256_file(path):
    h = hashlib.sha256()
    n = 0
    with open(path, "rb") as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                break
            h.update(b)
            n += len(b)
    return n, h.hexdigest()


def hash_files(top, entries):
    """(size, sha256) of every regular file in `entries`, read through `top`."""
    top_b = os.fsencode(str(top))
    out = {}
    for p, e in entries.items():
        if e["type"] == "file":
            out[p] = sha256_file(top_b + os.fsencode(p))
    return out


class KernelView:
    """What the kernel shows for an image: entries plus file content hashes."""

    def __init__(self, entries, hashes):
        self.entries = entries
        self.hashes = hashes


def kernel_view(images, mountpoint, options=""):
    with mounted(images, mountpoint, options=options, readonly=True) as mnt:
        entries = walk_tree(mnt)
        hashes = hash_files(mnt, entries)
    return KernelView(entries, hashes)


# --------------------------------------------------------------------------
# ubtrfs output parsing and comparison

def _recover_bytes(obj):
    """Undo ls --json's escaping (docs/ls.md): "<key>_hex" holds the raw bytes of a
    string that is not UTF-8; the string comes back as os.fsdecode() of them."""
    for key in ("path", "name", "target"):
        h = obj.pop(key + "_hex", None)
        if h is not None:
            obj[key] = os.fsdecode(bytes.fromhex(h))
    xh = obj.pop("xattrs_hex", None)
    if xh:
        xattrs = obj.setdefault("xattrs", {})
        for name, value in xh.items():
            xattrs[os.fsdecode(bytes.fromhex(name))] = value
    return obj


def parse_ls_json(stdout):
    """List of objects from `ls --json` output, parsed strictly (UTF-8, JSON); raises with
    the bad line. Names that are not UTF-8 are recovered from their *_hex fields."""
    objs = []
    for raw in stdout.split(b"\n"):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw.decode("utf-8"))
        except ValueError as e:
            raise AssertionError("ls --json printed a line that is not strict JSON (%s): %r" % (e, raw[:300]))
        if not isinstance(obj, dict):
            raise AssertionError("ls --json printed a line that is not an object: %r" % raw[:300])
        objs.append(_recover_bytes(obj))
    return objs


def index_entries(objs):
    """path -> object; duplicate paths are reported as problems."""
    out = {}
    dups = []
    for o in objs:
        p = o.get("path")
        if p in out:
            dups.append(p)
        out[p] = o
    return out, dups


def compare_entries(expected, got, limit=40):
    """Human-readable differences between two path -> attrs maps (empty if equal)."""
    problems = []
    missing = sorted(set(expected) - set(got))
    extra = sorted(set(got) - set(expected), key=str)
    for p in missing[:limit]:
        problems.append("missing entry %r" % p)
    for p in extra[:limit]:
        problems.append("unexpected entry %r: %r" % (p, got[p]))
    for p in sorted(set(expected) & set(got)):
        exp, g = expected[p], got[p]
        keys = list(LS_KEYS) + (["target"] if exp["type"] == "symlink" else [])
        for k in keys:
            if k not in g:
                problems.append("%r: key %r absent (expected %r)" % (p, k, exp.get(k)))
            elif g[k] != exp[k]:
                problems.append("%r: %s expected %r got %r" % (p, k, _short(exp[k]), _short(g[k])))
        if exp["type"] != "symlink" and "target" in g:
            problems.append("%r: 'target' present on a %s" % (p, exp["type"]))
        if len(problems) > limit:
            break
    if len(problems) > limit:
        problems = problems[:limit] + ["... more"]
    return problems


def _short(v):
    s = repr(v)
    return v if len(s) < 200 else s[:200] + "..."


def cat_hash(devices, path, timeout=300):
    """(returncode, size, sha256, stderr) of `ubtrfs cat --path`."""
    cp = ubtrfs("cat", "--path", path, *devices, timeout=timeout)
    return cp.returncode, len(cp.stdout), hashlib.sha256(cp.stdout).hexdigest(), cp


# --------------------------------------------------------------------------
# btrfs-progs output parsing

def parse_dump_super(text):
    """field -> value for the top-level "name<TAB>value" lines of dump-super."""
    out = {}
    for line in text.splitlines():
        if not line or line[0] in " \t":
            continue
        m = re.match(r"^([A-Za-z_.][A-Za-z0-9_.]*(?: \(deprecated\))?)\t+(.*)$", line)
        if m:
            out.setdefault(m.group(1), m.group(2).strip())
        else:
            m = re.match(r"^([a-z_]+)\t*$", line)  # "label" with an empty value
            if m:
                out.setdefault(m.group(1), "")
    return out


def super_bytenrs(text):
    return sorted(int(m) for m in re.findall(r"^bytenr\t+(\d+)\s*$", text, re.M))


KEY_LINE = re.compile(r"^\s*(?:item \d+ )?key \(([^)]*)\) (?:itemoff|block)\b", re.M)


def tree_keys(text):
    """Set of item and node-pointer keys in dump-tree output."""
    return set(KEY_LINE.findall(text))


def leaves_of(dump_tree_text):
    """[(bytenr, owner, [item keys])] for each leaf in progs' dump-tree output."""
    leaves = []
    cur = None
    for line in dump_tree_text.splitlines():
        m = re.match(r"^leaf (\d+) items (\d+) free space (-?\d+) generation (\d+) owner (\S+)", line)
        if m:
            cur = (int(m.group(1)), m.group(5), [])
            leaves.append(cur)
            continue
        if re.match(r"^node \d+", line):
            cur = None
            continue
        m = re.match(r"^\titem \d+ key \(([^)]*)\)", line)
        if m and cur is not None:
            cur[2].append(m.group(1))
    return leaves


def file_extents(dump_tree_text, ino):
    """[(file_offset, disk_bytenr, disk_num_bytes, extent_offset, num_bytes, compression)]
    for the regular extents of inode `ino` in progs' dump-tree output."""
    out = []
    lines = dump_tree_text.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^\titem \d+ key \((\d+) EXTENT_DATA (\d+)\)", line)
        if not m or int(m.group(1)) != ino:
            continue
        body = "\n".join(lines[i + 1:i + 5])
        d = re.search(r"extent data disk byte (\d+) nr (\d+)", body)
        o = re.search(r"extent data offset (\d+) nr (\d+) ram (\d+)", body)
        c = re.search(r"extent compression (\d+)", body)
        if d and o and c:
            out.append((int(m.group(2)), int(d.group(1)), int(d.group(2)), int(o.group(1)),
                        int(o.group(2)), int(c.group(1))))
    return out


def map_logical(image, logical, length):
    """[(mirror, physical)] from btrfs-map-logical."""
    cp = run(["btrfs-map-logical", "-l", str(logical), "-b", str(length), str(image)])
    out = []
    for m in re.finditer(r"mirror (\d+) logical (\d+) physical (\d+) device", cp.stdout.decode()):
        if int(m.group(2)) == logical:
            out.append((int(m.group(1)), int(m.group(3))))
    return out


def overwrite(image, offset, data):
    with open(image, "r+b") as f:
        f.seek(offset)
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def copy_sparse(src, dst):
    run(["cp", "--sparse=always", str(src), str(dst)])


SUPER_OFFSETS = (64 << 10, 64 << 20, 256 << 30)


def super_generations(path):
    """The generation of every superblock copy of a device or image that has one (the field at
    byte 72 of the superblock), by copy; a copy past the end or without the magic is left out."""
    gens = {}
    with open(path, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        for i, off in enumerate(SUPER_OFFSETS):
            if off + 4096 > size:
                break
            f.seek(off)
            sb = f.read(4096)
            if len(sb) == 4096 and sb[64:72] == b"_BHRfS_M":
                gens[i] = int.from_bytes(sb[72:80], "little")
    return gens


def copy_quiet(srcs, dsts, tries=5):
    """Copies of the live devices `srcs` of one mounted filesystem, taken while no commit ran: the
    superblock generations of every device are the same before and after the copies, and every
    copy's superblocks all show that generation. A copy taken while the kernel was committing
    holds a state no crash leaves (its superblock copies from two commits, cp reading the primary
    before the commit wrote it and the mirror after). Returns the number of tries it took, or
    None when every try saw a commit."""
    for attempt in range(1, tries + 1):
        before = [super_generations(s) for s in srcs]
        for s, d in zip(srcs, dsts):
            copy_sparse(s, d)
        after = [super_generations(s) for s in srcs]
        copies = [super_generations(d) for d in dsts]
        gens = {g for m in before + after + copies for g in m.values()}
        if before == after and len(gens) == 1:
            return attempt
        time.sleep(0.2 * attempt)
    return None


def mentions_number(text, n):
    """Does `text` name the number n (decimal, or 0x hex)?"""
    return (re.search(r"(?<![0-9])%d(?![0-9])" % n, text) is not None
            or re.search(r"0x0*%x(?![0-9a-f])" % n, text, re.I) is not None)


SCRATCH_OWNER = ".owner-pid"


def make_scratch_dir(prefix="ubtrfs-it-"):
    """Images live on tmpfs when it has room: it is much faster than disk. The
    folder names the process that made it, so that a later run can remove it
    when that process was killed before it could (sweep_stale_scratch)."""
    d = None
    for base in ("/dev/shm", None):
        if base and os.path.isdir(base):
            st = os.statvfs(base)
            if st.f_bavail * st.f_frsize < 6 << 30:
                continue
        d = tempfile.mkdtemp(prefix=prefix, dir=base)
        break
    with open(os.path.join(d, SCRATCH_OWNER), "w") as f:
        f.write("%d\n" % os.getpid())
    return d


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale_scratch():
    """Remove the scratch folders of earlier runs whose process is gone (a run
    killed by a timeout leaves gigabytes on tmpfs) and that nothing is mounted
    from or attached to. Folders without an owner file are left alone."""
    removed = []
    for base in ("/dev/shm", tempfile.gettempdir()):
        try:
            names = os.listdir(base)
        except OSError:
            continue
        for name in names:
            d = os.path.join(base, name)
            if not name.startswith("ubtrfs-it-") or not os.path.isdir(d):
                continue
            try:
                with open(os.path.join(d, SCRATCH_OWNER)) as f:
                    pid = int(f.read().strip())
            except (OSError, ValueError):
                continue
            if _pid_alive(pid):
                continue
            loops, mounts = leftovers(d)
            if not loops and not mounts:
                rmtree(d)
                removed.append(d)
    return removed


def rmtree(path):
    shutil.rmtree(path, ignore_errors=True)


# os.posix_fallocate has no mode flags; KEEP_SIZE and PUNCH_HOLE need the libc call.
_libc = ctypes.CDLL(None, use_errno=True)
FALLOC_FL_KEEP_SIZE = 1
FALLOC_FL_PUNCH_HOLE = 2


def fallocate(fd, mode, offset, length):
    r = _libc.fallocate(ctypes.c_int(fd), ctypes.c_int(mode), ctypes.c_longlong(offset),
                        ctypes.c_longlong(length))
    if r != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def find_bytes(devices, pattern):
    """[(device, offset)] of every occurrence of `pattern` in the device files."""
    import mmap
    out = []
    for dev in devices:
        with open(dev, "rb") as f:
            if os.fstat(f.fileno()).st_size == 0:
                continue
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                pos = mm.find(pattern)
                while pos != -1:
                    out.append((str(dev), pos))
                    pos = mm.find(pattern, pos + 1)
    return out


# --------------------------------------------------------------------------
# things built once per test run and shared by every pytest-xdist worker

SHARED_ENV = "UBTRFS_SHARED_SCRATCH"


@contextlib.contextmanager
def file_lock(path, shared=False):
    """flock on `path` (created if needed), exclusive unless `shared`: between processes
    and, since each call opens its own file description, between threads of one process."""
    os.makedirs(os.path.dirname(str(path)), exist_ok=True)
    fd = os.open(str(path), os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def shared_dir():
    """The directory every worker of this run shares (conftest creates it in the
    controlling process and removes it at the end); None outside a configured run."""
    d = os.environ.get(SHARED_ENV)
    return Path(d) if d and os.path.isdir(d) else None


def shared_build(key, build, fallback_dir=None):
    """Run `build(directory)` once per test run for `key`, whichever worker asks first;
    the others wait on the key's lock and get the same result.

    `build` fills the (new, empty) directory and returns something JSON can hold; that
    value is returned to every caller. A build that raised leaves nothing behind, so the
    next caller tries again (and fails the same way, with its own traceback). Without a
    shared directory (a helper run outside conftest) `fallback_dir` is used the same way.
    """
    base = shared_dir() or (Path(fallback_dir) if fallback_dir else None)
    if base is None:
        raise RuntimeError("no shared scratch directory (%s unset) and no fallback" % SHARED_ENV)
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", key)
    d = base / "built" / safe
    done = base / "built" / (safe + ".done.json")
    with file_lock(base / "built" / (safe + ".lock")):
        if done.is_file():
            with open(done) as f:
                return d, json.load(f)
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
        try:
            value = build(d)
        except BaseException:
            shutil.rmtree(d, ignore_errors=True)
            raise
        tmp = done.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump(value, f)
        os.replace(tmp, done)
        return d, value


def build_tool(san, path):
    """Build a test driver with make, one build at a time machine-wide: pytest-xdist
    workers build the same driver, and a link replacing the binary while another
    worker runs it fails that run with ETXTBSY (`make integration` builds them
    first, so this is normally a no-op)."""
    with file_lock("/run/lock/ubtrfs-test-build.lock"):
        run(["make", "-C", REPO, "SAN=" + san, str(path.relative_to(REPO))], timeout=900)


def test_tool(name):
    """tests/tools/NAME from the build directory of the binary under test, built (or
    skipped with the reason when that binary is not in a build directory of this tree)."""
    import pytest
    # the build directory itself, not the per-run snapshot of the binary
    ub = Path(os.environ.get("UBTRFS", str(REPO / "build" / "ubtrfs"))).resolve()
    path = ub.parent / "tests" / "tools" / name
    build = path.parents[2]
    if build.parent != REPO:
        pytest.skip("binary under test %s is not in a build directory of this tree" % build)
    build_tool("1" if build.name == "build-san" else "0", path)
    return path
