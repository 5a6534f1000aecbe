# SPDX-License-Identifier: MIT
"""A seeded, bounded random file-system workload run through the kernel, and
the differential check of its result against ubtrfs.

The generator (class Workload) applies random operations to a mounted btrfs:
creates, writes (buffered and O_DIRECT, at random offsets, past EOF), small
writes after holes, truncates, hole punches, fallocate, renames (plain,
overwriting, exchanging), hard links (many per inode, long names so the names
spill into INODE_EXTREF items), symlinks (short and long), fifos/devices/
sockets, xattrs (set/replace/remove, large values), chmod/chown/utimes,
mkdir/rmdir, nocow and per-file compression properties, reflinks, subvolume
create/delete, snapshots (rw and ro) midway, fsyncs and syncs.  Every random
choice comes from one random.Random(seed), and every choice is made from a
sorted listing of the mount, so the same seed on the same configuration
repeats the same operations.  The operations done are logged (op_log) so a
failing seed can be read, not only rerun.

The harness (run_config) makes the filesystem with a configuration's mkfs
and mount options on loop devices over sparse files, runs the workload,
optionally takes a crash copy with a pending fsync log, unmounts, and then
compares what ubtrfs shows (`ls -R --json`, `cat --path` of every regular
file) with the kernel's read-only view of the very same final images, also
with devices left out where the profile allows, and for crash copies with
the kernel's replay (read-write mount of a copy) and its last commit.
"""

import concurrent.futures
import errno
import fcntl
import hashlib
import mmap
import os
import random
import shutil
import stat
import struct
import subprocess
import time
from pathlib import Path

import ubtrfs_testlib as T
import multidev_lib as M

MiB = T.MiB
KiB = 1024

# ioctls (numbers from the kernel's uapi headers)
FS_IOC_GETFLAGS = 0x80086601
FS_IOC_SETFLAGS = 0x40086602
FS_NOCOW_FL = 0x00800000
FICLONE = 0x40049409
FICLONERANGE = 0x4020940d
BTRFS_IOC_SUBVOL_GETFLAGS = 0x80089419
BTRFS_SUBVOL_RDONLY = 1 << 1
FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02
FALLOC_FL_ZERO_RANGE = 0x10
RENAME_EXCHANGE = 1 << 1
RENAME_NOREPLACE = 1 << 0
AT_FDCWD = -100

# The kernel answers these for operations a random workload may legitimately
# ask for (no room in a leaf for a big xattr, a rename into its own subtree,
# a reflink between nocow and cow files...).  Anything else is a surprise and
# stops the run.
EXPECTED_ERRNOS = {errno.EEXIST, errno.ENOENT, errno.ENOTEMPTY, errno.EXDEV, errno.EINVAL,
                   errno.ENAMETOOLONG, errno.E2BIG, errno.ERANGE, errno.ENOSPC, errno.EMLINK,
                   errno.EISDIR, errno.ENOTDIR, errno.EBUSY, errno.EPERM, errno.EOPNOTSUPP,
                   errno.EROFS, errno.ETXTBSY, errno.EFBIG, errno.EACCES}

UIDS = (0, 0, 1000, 1001, 65534, 123456)
GIDS = (0, 0, 1000, 100, 65534, 7)
NAME_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_-."


class Ent:
    """One entry of the mount as the generator sees it."""
    __slots__ = ("rel", "type", "dev", "pdev", "ino", "size", "ro", "subvol_root", "placeholder")

    def __init__(self, rel, typ, st, pdev, ro, subvol_root, placeholder):
        self.rel = rel
        self.type = typ
        self.dev = st.st_dev
        self.pdev = pdev
        self.ino = st.st_ino
        self.size = st.st_size
        self.ro = ro
        self.subvol_root = subvol_root
        self.placeholder = placeholder

    def __repr__(self):
        return "%s(%s)" % (self.type, self.rel or "/")


def _subvol_ro(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        buf = bytearray(8)
        fcntl.ioctl(fd, BTRFS_IOC_SUBVOL_GETFLAGS, buf, True)
        return bool(struct.unpack("<Q", buf)[0] & BTRFS_SUBVOL_RDONLY)
    finally:
        os.close(fd)


_libc = T._libc


def renameat2(src, dst, flags):
    r = _libc.renameat2(AT_FDCWD, os.fsencode(src), AT_FDCWD, os.fsencode(dst), flags)
    if r != 0:
        e = T.ctypes.get_errno()
        raise OSError(e, os.strerror(e), src)


class OpFailed(Exception):
    """A btrfs command the workload ran failed the way a random op may."""


class Workload:
    """Random operations on the btrfs mounted at `mnt`.

    `nodesize` bounds symlink and xattr sizes; `max_bytes` bounds the total
    amount of data written (so images stay small); `crash_safe` leaves out
    operations that commit a transaction (used for the fsync tail of a crash
    copy).
    """

    def __init__(self, mnt, seed, nodesize=16384, max_bytes=64 * MiB, max_file=4 * MiB, salt="",
                 xattr_grow=True):
        self.mnt = str(mnt)
        # the salt (the configuration's name) keeps one seed from replaying the
        # same operations on every configuration
        self.rng = random.Random("%s:%d" % (salt, seed) if salt else seed)
        self.seed = seed
        self.nodesize = nodesize
        self.max_bytes = max_bytes
        self.max_file = max_file
        # False: a value replacing an existing one is never longer than it (the
        # kernel refuses a longer one with ENOSPC when the leaf holding it is
        # full, which depends on how its leaves were split)
        self.xattr_grow = xattr_grow
        self.written = 0
        self.op_log = []
        self.counts = {}
        self.nops = 0
        # subvolumes (by st_dev) the nested-snapshot scenario made: kept, so
        # the final image always has a stand-in directory to compare
        self.protected_devs = set()

    # ------------------------------------------------------------------ listing

    def scan(self):
        """Every entry below the mount (the top-level directory as rel ''), sorted."""
        out = []
        st = os.lstat(self.mnt)
        out.append(Ent("", "dir", st, st.st_dev, _subvol_ro(self.mnt), True, False))

        def rec(rel, real, ro, dev):
            try:
                names = sorted(os.listdir(real))
            except OSError:
                return
            for name in names:
                crel = rel + "/" + name if rel else name
                creal = os.path.join(real, name)
                st = os.lstat(creal)
                typ = T.ftype(st.st_mode)
                root = typ == "dir" and st.st_ino == 256
                holder = typ == "dir" and st.st_ino == 2
                cro = ro
                if root:
                    cro = _subvol_ro(creal)
                out.append(Ent(crel, typ, st, dev, cro, root, holder))
                if typ == "dir" and not holder:
                    rec(crel, creal, cro, st.st_dev)
        rec("", self.mnt, out[0].ro, st.st_dev)
        return out

    def path(self, rel):
        return os.path.join(self.mnt, rel) if rel else self.mnt

    # ------------------------------------------------------------------ random helpers

    def name(self, long=False):
        rng = self.rng
        r = rng.random()
        if long or r < 0.02:
            n = rng.randint(200, 255)
            return "L" + "".join(rng.choice(NAME_CHARS) for _ in range(n - 1))
        if r < 0.1:
            return "u-" + rng.choice(["é", "日本", "ü", "ß", "😀"]) * rng.randint(1, 4)
        return "".join(rng.choice(NAME_CHARS) for _ in range(rng.randint(1, 12))) + str(rng.randint(0, 999))

    def size(self):
        rng = self.rng
        r = rng.random()
        if r < 0.3:
            n = rng.randint(0, 8 * KiB)
        elif r < 0.4:
            n = rng.choice((1, 4095, 4096, 4097, 2048, 2049, 131072, 131073, 128 * KiB - 1))
        elif r < 0.8:
            n = int(2 ** rng.uniform(13, 18))
        else:
            n = int(2 ** rng.uniform(18, 22))
        n = min(n, self.max_file)
        if self.written + n > self.max_bytes:
            n = min(n, rng.randint(0, 4096))
        return n

    def data(self, n):
        rng = self.rng
        kind = rng.choice(("text", "random", "zeroish", "mixed", "zeros", "byte"))
        self.written += n
        if kind == "zeros":
            return bytes(n)
        if kind == "byte":
            return bytes([rng.randint(0, 255)]) * n
        return T.file_bytes(rng, kind, n)

    def offset(self, size):
        rng = self.rng
        r = rng.random()
        if r < 0.15 or size == 0:
            return rng.choice((0, size))
        if r < 0.5:
            return rng.randint(0, size)
        if r < 0.7:
            return rng.randint(0, size // 4096 + 1) * 4096
        # beyond EOF: leaves a hole
        return size + int(2 ** rng.uniform(0, 21))

    def pick(self, ents, pred):
        c = [e for e in ents if pred(e)]
        return self.rng.choice(c) if c else None

    @staticmethod
    def writable_dir(e):
        return e.type == "dir" and not e.ro and not e.placeholder

    @staticmethod
    def writable_file(e):
        return e.type == "file" and not e.ro

    def new_child(self, ents, d, long=False):
        """A path below directory `d` not in use."""
        names = {e.rel for e in ents}
        for _ in range(20):
            rel = (d.rel + "/" if d.rel else "") + self.name(long)
            if rel not in names and not os.path.lexists(self.path(rel)):
                return rel
        return None

    def log(self, text):
        self.op_log.append("%d: %s" % (self.nops, text))

    # ------------------------------------------------------------------ running

    OPS = (
        ("create", 10), ("write", 18), ("small_after_hole", 5), ("truncate", 6), ("punch", 4),
        ("fallocate", 5), ("rename", 7), ("link", 5), ("link_storm", 1), ("unlink", 5),
        ("symlink", 4), ("mknod", 2), ("xattr", 7), ("attr", 6), ("mkdir", 6), ("rmdir", 2),
        ("reflink", 4), ("defrag", 1), ("subvol_create", 2), ("subvol_delete", 1),
        ("snapshot", 2), ("fsync", 5), ("sync", 2),
    )
    CRASH_SAFE = ("create", "write", "small_after_hole", "truncate", "punch", "fallocate",
                  "rename", "link", "unlink", "symlink", "mknod", "xattr", "attr", "mkdir",
                  "reflink", "fsync")

    def run(self, nops, allowed=None):
        ops = [(n, w) for n, w in self.OPS if allowed is None or n in allowed]
        names = [n for n, _ in ops]
        weights = [w for _, w in ops]
        # One nested-subvolume snapshot scenario per run (a third of the way
        # in), so every run has a snapshot that did not take a subvolume along.
        scenario_at = max(1, nops // 3) if allowed is None else -1
        # and one file whose zstd extents decode to less than they cover
        zstd_at = max(2, nops * 2 // 3) if allowed is None else -1
        # and one inode with more long names in one directory than an
        # INODE_REF item holds in a 4 KiB leaf (the rest go to INODE_EXTREF)
        storm_at = max(3, nops // 2) if allowed is None else -1
        for i in range(nops):
            self.nops += 1
            if i == scenario_at:
                self._do("nested_snapshot")
                continue
            if i == zstd_at:
                self._do("zstd_tail")
                continue
            if i == storm_at:
                self._do("link_storm")
                continue
            self._do(self.rng.choices(names, weights)[0])

    def _do(self, op):
        ents = self.scan()
        self.counts[op] = self.counts.get(op, 0) + 1
        try:
            getattr(self, "op_" + op)(ents)
        except OSError as e:
            if e.errno not in EXPECTED_ERRNOS:
                raise
            self.log("  %s -> %s" % (op, errno.errorcode.get(e.errno, e.errno)))
        except OpFailed as e:
            self.log("  %s -> failed: %s" % (op, str(e)[:200]))

    def btrfs(self, *args):
        cp = subprocess.run(["btrfs", *[str(a) for a in args]], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, timeout=300)
        if cp.returncode != 0:
            raise OpFailed("btrfs %s: %s" % (" ".join(str(a) for a in args),
                                             cp.stderr.decode("utf-8", "replace").strip()))

    # ------------------------------------------------------------------ data ops

    def _write_at(self, rel, off, data, direct=False, fsync=False):
        path = self.path(rel)
        if direct:
            # O_DIRECT needs sector-aligned offset, length and buffer.
            off -= off % 4096
            n = len(data) - len(data) % 4096
            if n == 0:
                direct = False
            else:
                data = data[:n]
        if direct:
            fd = os.open(path, os.O_WRONLY | os.O_DIRECT)
            try:
                buf = mmap.mmap(-1, len(data))
                try:
                    buf.write(data)
                    os.pwrite(fd, buf, off)
                finally:
                    buf.close()
                if fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
        else:
            fd = os.open(path, os.O_WRONLY)
            try:
                view = memoryview(data)
                pos = off
                while view:
                    k = os.pwrite(fd, view, pos)
                    view = view[k:]
                    pos += k
                if fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
        self.log("write %r off %d len %d%s%s" % (rel, off, len(data), " direct" if direct else "",
                                                " fsync" if fsync else ""))

    def op_create(self, ents):
        d = self.pick(ents, self.writable_dir)
        if d is None:
            return
        rel = self.new_child(ents, d)
        if rel is None:
            return
        rng = self.rng
        mode = rng.choice((0o644, 0o600, 0o755, 0o640, 0o4755, 0o666))
        fd = os.open(self.path(rel), os.O_CREAT | os.O_EXCL | os.O_WRONLY, mode)
        extra = ""
        try:
            r = rng.random()
            if r < 0.12:
                # nocow must be set while the file is empty
                buf = bytearray(8)
                fcntl.ioctl(fd, FS_IOC_GETFLAGS, buf, True)
                flags = struct.unpack_from("<i", buf)[0] | FS_NOCOW_FL
                struct.pack_into("<i", buf, 0, flags)
                try:
                    fcntl.ioctl(fd, FS_IOC_SETFLAGS, buf)
                    extra = " nocow"
                except OSError as e:
                    extra = " nocow:%s" % errno.errorcode.get(e.errno)
            elif r < 0.25:
                alg = rng.choice((b"zstd", b"zlib", b"lzo"))
                os.setxattr(fd, "btrfs.compression", alg)
                extra = " compression=%s" % alg.decode()
        finally:
            os.close(fd)
        os.chmod(self.path(rel), mode)
        self.log("create %r mode %o%s" % (rel, mode, extra))
        n = self.size()
        if n:
            self._write_at(rel, 0, self.data(n), direct=rng.random() < 0.1, fsync=rng.random() < 0.15)

    def op_write(self, ents):
        f = self.pick(ents, self.writable_file)
        if f is None:
            return self.op_create(ents)
        rng = self.rng
        off = self.offset(f.size)
        n = self.size()
        if rng.random() < 0.3:
            n = min(n, rng.randint(1, 20000))
        self._write_at(f.rel, off, self.data(n), direct=rng.random() < 0.12, fsync=rng.random() < 0.1)

    def op_small_after_hole(self, ents):
        f = self.pick(ents, self.writable_file)
        if f is None:
            return
        rng = self.rng
        off = f.size + rng.choice((1, 100, 4096, 4097, 65536, 131072 + 5, rng.randint(1, 3 * MiB)))
        n = rng.randint(1, 300)
        self._write_at(f.rel, off, self.data(n))

    def op_truncate(self, ents):
        f = self.pick(ents, self.writable_file)
        if f is None:
            return
        rng = self.rng
        if rng.random() < 0.5 and f.size:
            n = rng.choice((0, rng.randint(0, f.size), f.size - 1, f.size // 4096 * 4096 + 1))
        else:
            n = f.size + rng.randint(1, 2 * MiB)
        os.truncate(self.path(f.rel), n)
        self.log("truncate %r %d -> %d" % (f.rel, f.size, n))

    def _fallocate(self, rel, mode, off, length):
        fd = os.open(self.path(rel), os.O_WRONLY)
        try:
            T.fallocate(fd, mode, off, length)
        finally:
            os.close(fd)
        self.log("fallocate %r mode %#x off %d len %d" % (rel, mode, off, length))

    def op_punch(self, ents):
        f = self.pick(ents, lambda e: self.writable_file(e) and e.size > 0)
        if f is None:
            return
        rng = self.rng
        off = rng.randint(0, f.size)
        if rng.random() < 0.5:
            off -= off % 4096
        length = rng.randint(1, max(1, f.size - off + 8192))
        self._fallocate(f.rel, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, length)

    def op_fallocate(self, ents):
        f = self.pick(ents, self.writable_file)
        if f is None:
            return
        rng = self.rng
        mode = rng.choice((0, 0, FALLOC_FL_KEEP_SIZE, FALLOC_FL_ZERO_RANGE,
                           FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE))
        off = self.offset(f.size)
        length = rng.randint(1, 2 * MiB)
        self._fallocate(f.rel, mode, off, length)
        if rng.random() < 0.5:
            # writes into the preallocated range (compressed on compress mounts)
            n = min(length, self.size() or 1)
            self._write_at(f.rel, off + rng.randint(0, length // 2), self.data(n))

    def op_reflink(self, ents):
        src = self.pick(ents, lambda e: e.type == "file" and e.size > 0)
        dst = self.pick(ents, self.writable_file)
        if src is None or dst is None:
            return
        rng = self.rng
        sfd = os.open(self.path(src.rel), os.O_RDONLY)
        try:
            dfd = os.open(self.path(dst.rel), os.O_WRONLY)
            try:
                if rng.random() < 0.25 and src.rel != dst.rel:
                    fcntl.ioctl(dfd, FICLONE, sfd)
                    self.log("clone %r -> %r" % (src.rel, dst.rel))
                    return
                soff = rng.randint(0, src.size // 4096) * 4096
                if rng.random() < 0.5:
                    length = 0        # to the end of the source
                else:
                    length = rng.randint(1, 64) * 4096
                doff = rng.randint(0, (dst.size + MiB) // 4096) * 4096
                arg = struct.pack("<qQQQ", sfd, soff, length, doff)
                fcntl.ioctl(dfd, FICLONERANGE, arg)
                self.log("clonerange %r off %d len %d -> %r off %d" % (src.rel, soff, length, dst.rel, doff))
            finally:
                os.close(dfd)
        finally:
            os.close(sfd)

    def op_defrag(self, ents):
        f = self.pick(ents, self.writable_file)
        if f is None:
            return
        alg = self.rng.choice(("zstd", "zlib", "lzo"))
        self.log("defragment -c%s %r" % (alg, f.rel))
        self.btrfs("filesystem", "defragment", "-c" + alg, self.path(f.rel))

    # ------------------------------------------------------------------ namespace ops

    def op_rename(self, ents):
        rng = self.rng
        src = self.pick(ents, lambda e: e.rel and not e.ro and not e.placeholder
                        and (not e.subvol_root or rng.random() < 0.3)
                        and self._parent_writable(ents, e))
        if src is None:
            return
        # the target directory must be in the subvolume that holds src's name
        dirs = [e for e in ents if self.writable_dir(e) and e.dev == src.pdev]
        if not dirs:
            return
        d = rng.choice(dirs)
        r = rng.random()
        same_kind = [e for e in ents if e.rel and e.pdev == src.pdev and not e.ro and not e.subvol_root
                     and not e.placeholder
                     and e.rel != src.rel and self._parent_writable(ents, e)
                     and ((e.type == "dir") == (src.type == "dir"))]
        if r < 0.25 and same_kind:
            dst = rng.choice(same_kind).rel
            if rng.random() < 0.3:
                renameat2(self.path(src.rel), self.path(dst), RENAME_EXCHANGE)
                self.log("rename exchange %r <-> %r" % (src.rel, dst))
                return
            self.log("rename %r -> %r (overwrite)" % (src.rel, dst))
        else:
            dst = self.new_child(ents, d)
            if dst is None:
                return
            self.log("rename %r -> %r" % (src.rel, dst))
        os.rename(self.path(src.rel), self.path(dst))

    def _parent_writable(self, ents, e):
        parent = e.rel.rpartition("/")[0]
        for p in ents:
            if p.rel == parent:
                return self.writable_dir(p)
        return False

    def op_link(self, ents):
        src = self.pick(ents, lambda e: e.type not in ("dir",) and e.rel and not e.ro)
        if src is None:
            return
        d = self.pick(ents, lambda e: self.writable_dir(e) and e.dev == src.dev)
        if d is None:
            return
        rel = self.new_child(ents, d)
        if rel is None:
            return
        self.log("link %r -> %r" % (src.rel, rel))
        os.link(self.path(src.rel), self.path(rel), follow_symlinks=False)

    def op_link_storm(self, ents):
        """Many long names for one inode in one directory: with small nodes the
        INODE_REF item overflows into INODE_EXTREF items."""
        src = self.pick(ents, lambda e: e.type == "file" and not e.ro)
        if src is None:
            return
        d = self.pick(ents, lambda e: self.writable_dir(e) and e.dev == src.dev)
        if d is None:
            return
        # a 4 KiB leaf holds about 16 refs of 240-byte names
        k = self.rng.randint(18, 40) if self.rng.random() < 0.6 else self.rng.randint(2, 12)
        self.log("link storm %r x%d into %r" % (src.rel, k, d.rel))
        made = 0
        for _ in range(k):
            rel = self.new_child(ents, d, long=True)
            if rel is None:
                break
            try:
                os.link(self.path(src.rel), self.path(rel))
                made += 1
            except OSError as e:
                if e.errno not in (errno.EEXIST, errno.EMLINK):
                    raise
                break
        self.log("  made %d links" % made)
        if made and self.rng.random() < 0.5:
            # drop a few again, leaving gaps in the ref items
            names = sorted(os.listdir(self.path(d.rel)))
            st = os.lstat(self.path(src.rel))
            for n in names:
                p = os.path.join(self.path(d.rel), n)
                if os.lstat(p).st_ino == st.st_ino and os.lstat(p).st_dev == st.st_dev and \
                        self.rng.random() < 0.3 and os.lstat(p).st_nlink > 1:
                    os.unlink(p)
                    self.log("  unlink %r" % n[:20])

    def op_unlink(self, ents):
        f = self.pick(ents, lambda e: e.type not in ("dir",) and e.rel and not e.ro)
        if f is None:
            return
        self.log("unlink %r" % f.rel)
        os.unlink(self.path(f.rel))

    def op_symlink(self, ents):
        d = self.pick(ents, self.writable_dir)
        if d is None:
            return
        rel = self.new_child(ents, d)
        if rel is None:
            return
        rng = self.rng
        r = rng.random()
        if r < 0.6:
            target = rng.choice(("x", "../a", "/etc/passwd", self.name(), "dangling/" + self.name()))
        else:
            # long targets up to what one inline extent can hold in this node size
            limit = min(4000, self.nodesize - 200)
            n = rng.randint(256, limit)
            target = ("seg%d/" % n * (n // 4 + 1))[:n]
        try:
            os.symlink(target, self.path(rel))
        except OSError as e:
            if e.errno != errno.ENAMETOOLONG:
                raise
            target = target[:3000]
            os.symlink(target, self.path(rel))
        self.log("symlink %r -> len %d" % (rel, len(target)))

    def op_mknod(self, ents):
        d = self.pick(ents, self.writable_dir)
        if d is None:
            return
        rel = self.new_child(ents, d)
        if rel is None:
            return
        rng = self.rng
        kind = rng.choice(("fifo", "chr", "blk", "sock"))
        perm = rng.choice((0o644, 0o600, 0o666))
        if kind == "fifo":
            os.mkfifo(self.path(rel), perm)
        else:
            fmt = {"chr": stat.S_IFCHR, "blk": stat.S_IFBLK, "sock": stat.S_IFSOCK}[kind]
            dev = os.makedev(rng.randint(0, 4095), rng.randint(0, 1048575)) if kind != "sock" else 0
            os.mknod(self.path(rel), fmt | perm, dev)
        self.log("mknod %s %r" % (kind, rel))

    def op_mkdir(self, ents):
        d = self.pick(ents, self.writable_dir)
        if d is None:
            return
        rel = self.new_child(ents, d)
        if rel is None:
            return
        mode = self.rng.choice((0o755, 0o700, 0o1777, 0o2775, 0o750))
        os.mkdir(self.path(rel), mode)
        os.chmod(self.path(rel), mode)
        self.log("mkdir %r %o" % (rel, mode))

    def op_rmdir(self, ents):
        rng = self.rng
        d = self.pick(ents, lambda e: e.type == "dir" and e.rel and not e.subvol_root
                      and self._parent_writable(ents, e))
        if d is None:
            return
        if d.placeholder and d.pdev in self.protected_devs:
            return
        if d.placeholder or rng.random() < 0.6:
            self.log("rmdir %r" % d.rel)
            os.rmdir(self.path(d.rel))
            return
        # a whole subtree, when it holds no subvolume (those need subvolume delete)
        inner = [e for e in ents if e.rel.startswith(d.rel + "/")]
        if any(e.subvol_root or e.placeholder for e in inner) or len(inner) > 60:
            return
        self.log("rm -r %r (%d entries)" % (d.rel, len(inner)))
        shutil.rmtree(self.path(d.rel))

    # ------------------------------------------------------------------ attributes

    def op_xattr(self, ents):
        rng = self.rng
        e = self.pick(ents, lambda e: not e.ro and not e.placeholder and e.type != "sock")
        if e is None:
            return
        path = self.path(e.rel)
        # user.* is not allowed on symlinks and special files
        ns = "user." if e.type in ("file", "dir") and rng.random() < 0.8 else "trusted."
        existing = [n for n in os.listxattr(path, follow_symlinks=False) if not n.startswith("btrfs.")]
        r = rng.random()
        if r < 0.2 and existing:
            name = rng.choice(sorted(existing))
            os.removexattr(path, name, follow_symlinks=False)
            self.log("removexattr %r %s" % (e.rel, name))
            return
        if r < 0.45 and existing:
            name = rng.choice(sorted(existing))
        else:
            name = ns + rng.choice(("a", "b", "big", "x%d" % rng.randint(0, 30), "n" * rng.randint(1, 200)))
        q = rng.random()
        if q < 0.5:
            n = rng.randint(0, 100)
        elif q < 0.85:
            n = rng.randint(100, 2000)
        else:
            n = rng.randint(2000, min(16000, self.nodesize - 200))
        if not self.xattr_grow and name in existing:
            n = min(n, len(os.getxattr(path, name, follow_symlinks=False)))
        value = self.data(n)
        try:
            os.setxattr(path, name, value, follow_symlinks=False)
        except OSError as ex:
            if ex.errno not in (errno.ENOSPC, errno.E2BIG, errno.ERANGE):
                raise
            value = value[:self.nodesize // 4]
            os.setxattr(path, name, value, follow_symlinks=False)
        self.log("setxattr %r %s len %d" % (e.rel, name[:30], len(value)))

    def op_attr(self, ents):
        rng = self.rng
        e = self.pick(ents, lambda e: not e.ro and not e.placeholder)
        if e is None:
            return
        path = self.path(e.rel)
        r = rng.random()
        if r < 0.35 and e.type != "symlink":
            mode = rng.choice((0o755, 0o644, 0o600, 0o000, 0o4755, 0o2711, 0o1777, 0o777, 0o444))
            os.chmod(path, mode)
            self.log("chmod %r %o" % (e.rel, mode))
        elif r < 0.7:
            uid, gid = rng.choice(UIDS), rng.choice(GIDS)
            os.chown(path, uid, gid, follow_symlinks=False)
            self.log("chown %r %d:%d" % (e.rel, uid, gid))
        else:
            def t():
                return rng.choice((rng.randint(0, 2 ** 31) * 10 ** 9 + rng.randint(0, 10 ** 9 - 1),
                                   -rng.randint(1, 10 ** 9) * 10 ** 9 + rng.randint(0, 10 ** 9 - 1),
                                   4102444800 * 10 ** 9 + rng.randint(0, 10 ** 9 - 1)))
            a, m = t(), t()
            os.utime(path, ns=(a, m), follow_symlinks=False)
            self.log("utimes %r %d %d" % (e.rel, a, m))

    # ------------------------------------------------------------------ subvolumes

    def op_subvol_create(self, ents):
        d = self.pick(ents, self.writable_dir)
        if d is None:
            return
        rel = self.new_child(ents, d)
        if rel is None:
            return
        self.log("subvolume create %r" % rel)
        self.btrfs("subvolume", "create", self.path(rel))
        if self.rng.random() < 0.6:
            uid, gid = self.rng.choice(UIDS), self.rng.choice(GIDS)
            os.chown(self.path(rel), uid, gid)
            self.log("  chown %d:%d" % (uid, gid))
        for _ in range(self.rng.randint(0, 3)):
            self.op_create(self.scan_below(rel))

    def scan_below(self, rel):
        return [e for e in self.scan() if e.rel == rel or e.rel.startswith(rel + "/")]

    def op_subvol_delete(self, ents):
        s = self.pick(ents, lambda e: e.subvol_root and e.rel and self._parent_writable(ents, e)
                      and e.dev not in self.protected_devs)
        if s is None:
            return
        self.log("subvolume delete %r" % s.rel)
        self.btrfs("subvolume", "delete", self.path(s.rel))

    def op_snapshot(self, ents):
        src = self.pick(ents, lambda e: e.subvol_root)
        d = self.pick(ents, self.writable_dir)
        if src is None or d is None:
            return
        rel = self.new_child(ents, d)
        if rel is None:
            return
        ro = self.rng.random() < 0.3
        self.log("snapshot %s%r -> %r" % ("-r " if ro else "", src.rel or "/", rel))
        self.btrfs("subvolume", "snapshot", *(["-r"] if ro else []), self.path(src.rel), self.path(rel))

    def op_nested_snapshot(self, ents):
        """A subvolume with a non-root-owned directory holding another subvolume,
        snapshotted: the snapshot shows a stand-in directory for the nested one."""
        d = self.pick(ents, self.writable_dir)
        if d is None:
            return
        rel = self.new_child(ents, d)
        if rel is None:
            return
        rng = self.rng
        uid, gid = rng.choice(UIDS[2:]), rng.choice(GIDS[2:])
        self.log("nested: subvolume %r, dir owned %d:%d with a subvolume inside, snapshot" % (rel, uid, gid))
        self.btrfs("subvolume", "create", self.path(rel))
        inner_dir = os.path.join(self.path(rel), "owned")
        os.mkdir(inner_dir, 0o750)
        os.chown(inner_dir, uid, gid)
        self.btrfs("subvolume", "create", os.path.join(inner_dir, "inner"))
        self.btrfs("subvolume", "create", os.path.join(self.path(rel), "inner_top"))
        with open(os.path.join(inner_dir, "inner", "f"), "wb") as f:
            f.write(self.data(rng.randint(0, 9000)))
        snap = rel + "_snap"
        if not os.path.lexists(self.path(snap)):
            self.btrfs("subvolume", "snapshot", *(["-r"] if rng.random() < 0.3 else []),
                       self.path(rel), self.path(snap))
            self.protected_devs.add(os.lstat(self.path(snap)).st_dev)

    def op_zstd_tail(self, ents):
        """zstd extents covering more than their frame decodes: a file end inside
        a sector, a few bytes written past EOF in the next sector, then
        fallocate past EOF, all before writeback.  The kernel compresses up to
        the last written byte, rounds the extent up to the sector, and reads
        the rest of that sector as zeros once the file is longer."""
        d = self.pick(ents, self.writable_dir)
        if d is None:
            return
        rng = self.rng
        for _ in range(rng.randint(2, 4)):
            rel = self.new_child(ents, d)
            if rel is None:
                return
            fd = os.open(self.path(rel), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            try:
                os.setxattr(fd, "btrfs.compression", b"zstd")
                n = rng.choice((rng.randint(5000, 140000), rng.randint(140000, 1200000)))
                if n % 4096 == 0:
                    n += 1
                kind = rng.choice(("text", "mixed", "zeroish"))
                os.pwrite(fd, T.file_bytes(rng, kind, n), 0)
                tail = n + rng.randint(1, 4096)
                os.pwrite(fd, self.data(rng.randint(1, 100)), tail)
                grow = rng.randint(1, 300000)
                T.fallocate(fd, 0, 0, os.fstat(fd).st_size + grow)
                self.written += n
            finally:
                os.close(fd)
            self.log("zstd tail: %r %s %d bytes, bytes at %d, fallocate to +%d" % (rel, kind, n, tail, grow))

    # ------------------------------------------------------------------ durability

    def op_fsync(self, ents):
        e = self.pick(ents, lambda e: e.type in ("file", "dir") and not e.placeholder)
        if e is None:
            return
        flags = os.O_RDONLY | (os.O_DIRECTORY if e.type == "dir" else 0)
        fd = os.open(self.path(e.rel), flags)
        try:
            if self.rng.random() < 0.3 and e.type == "file":
                os.fdatasync(fd)
                self.log("fdatasync %r" % e.rel)
            else:
                os.fsync(fd)
                self.log("fsync %r" % e.rel)
        finally:
            os.close(fd)

    def op_sync(self, ents):
        if self.rng.random() < 0.5:
            os.sync()
            self.log("sync")
        else:
            self.btrfs("filesystem", "sync", self.mnt)
            self.log("filesystem sync")

    # ------------------------------------------------------------------ crash tail

    def crash_tail(self, nops):
        """Operations that do not commit, each followed by an fsync of what it
        touched (file or its directory), then one new file written and fsynced
        so the log is never empty."""
        for _ in range(nops):
            self.nops += 1
            op = self.rng.choice(self.CRASH_SAFE)
            self._do(op)
            ents = self.scan()
            # fsync something recently touched: a random file or directory
            self._do("fsync")
        ents = self.scan()
        # half the time in the top-level directory, whose own inode ref is its
        # ".." self-reference
        d = ents[0] if self.rng.random() < 0.5 and not ents[0].ro else self.pick(ents, self.writable_dir)
        rel = self.new_child(ents, d) or "crash-last-file"
        fd = os.open(self.path(rel), os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        try:
            os.write(fd, self.data(self.rng.randint(1, 200000)))
            os.fsync(fd)
        finally:
            os.close(fd)
        self.log("crash: final file %r written and fsynced" % rel)
        # then its directory and the top-level directory (a subvolume root,
        # whose inode ref is its ".." self-reference)
        for dr in dict.fromkeys((d.rel, "")):
            fd = os.open(self.path(dr), os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            self.log("crash: directory %r fsynced" % dr)


# ============================================================================
# configurations and the differential harness

class Config:
    """One mkfs + mount setup.  `profile` is (data, metadata, ndev)."""

    def __init__(self, name, mkfs=(), profile=("single", "single", 1), mount="", crash=False,
                 seed=1, ops=100, nodesize=16384, leave_out=None, max_bytes=48 * MiB):
        self.name = name
        self.mkfs = list(mkfs)
        self.data, self.meta, self.ndev = profile
        self.mount = mount
        self.crash = crash
        self.seed = seed
        self.ops = ops
        self.nodesize = nodesize
        self.leave_out = leave_out   # None: every single device the profile survives losing
        self.max_bytes = max_bytes

    def __repr__(self):
        return self.name

    def mkfs_args(self):
        args = ["-n", str(self.nodesize), *self.mkfs]
        if self.ndev > 1 or self.data != "single" or self.meta != "single":
            args += ["-d", self.data, "-m", self.meta]
        return args

    def recipe(self, seed, ops):
        return ("mkfs.btrfs %s on %d x sparse loop file(s); mount -o %s; workload seed %d, %d ops%s"
                % (" ".join(self.mkfs_args()), self.ndev, self.mount_opts() or "(defaults)", seed, ops,
                   "; crash copy after an fsync tail" if self.crash else ""))

    def mount_opts(self):
        opts = [o for o in self.mount.split(",") if o]
        if self.crash:
            opts.append("commit=%d" % 300)
        return ",".join(opts)

    def degraded_sets(self, long_mode):
        if self.ndev < 2:
            return []
        tol = min(M.TOLERANCE[self.data], M.TOLERANCE[self.meta])
        if self.leave_out is not None:
            return list(self.leave_out)
        sets = [(d,) for d in range(1, self.ndev + 1)] if tol >= 1 else []
        if not long_mode:
            # CI time: one device, a different one per seed
            return sets[self.seed % len(sets):][:1] if sets else []
        if tol >= 2:
            sets += M.combos(self.ndev, 2)
        return sets


PROFILE_NDEV = {"single": 1, "dup": 1, "raid0": 2, "raid1": 2, "raid1c3": 3, "raid1c4": 4,
                "raid10": 4, "raid5": 3, "raid6": 4}


def image_size(cfg):
    return 768 * MiB if cfg.ndev == 1 else 512 * MiB


class Result:
    def __init__(self, cfg, seed, ops, workdir):
        self.cfg, self.seed, self.ops, self.workdir = cfg, seed, ops, workdir
        self.problems = []
        self.notes = []
        self.op_log = []
        self.counts = {}
        self.times = {}
        self.coverage = None
        self.no_log = False
        self.skip = None  # why the run did not reach the state it is there for

    def report(self, limit=60):
        lines = ["differential mismatch on %s" % self.cfg.name,
                 "recipe: %s" % self.cfg.recipe(self.seed, self.ops),
                 "reproduce: scripts/differential --config %s --seed %d --ops %d --keep"
                 % (self.cfg.name, self.seed, self.ops)]
        lines += ["  " + p for p in self.problems[:limit]]
        if len(self.problems) > limit:
            lines.append("  ... %d more" % (len(self.problems) - limit))
        return "\n".join(lines)


def _check_run(cp):
    """A crash, a sanitizer report or an unknown exit code is a problem of its own."""
    if cp.returncode not in (0, 1, 2) or b"Sanitizer" in cp.stderr or b"runtime error:" in cp.stderr:
        return ["ubtrfs crashed or misbehaved: %s" % T.describe(cp)]
    return []


TIME_KEYS = ("atime", "mtime", "ctime")


def compare_views(expected, got, limit=80, unstable=()):
    """Every key of every entry, except what the kernel itself does not give
    the same way twice, which ubtrfs cannot match:
      * the stand-in directory (inode 2) of a subvolume a snapshot did not
        take along is made in memory with the current time as its times;
      * `unstable` (path, key) pairs: fields two kernel replays of the same
        crash copy disagree on (replay sets some ctimes to the time of the
        mount)."""
    drop = {}
    for p, e in expected.items():
        if e["type"] == "dir" and e["ino"] == 2:
            drop.setdefault(p, set()).update(TIME_KEYS)
    for p, k in unstable:
        drop.setdefault(p, set()).add(k)
    exp2, got2 = dict(expected), dict(got)
    for p, keys in drop.items():
        if p in exp2:
            exp2[p] = dict(exp2[p], **{k: None for k in keys})
        if p in got2:
            got2[p] = dict(got2[p], **{k: None for k in keys})
    return T.compare_entries(exp2, got2, limit=limit)


def unstable_fields(first, second):
    """(path, key) pairs two kernel views of the same image disagree on, and
    paths only one of them has."""
    out = set()
    only = sorted(set(first) ^ set(second))
    for p in set(first) & set(second):
        for k in T.LS_KEYS:
            if first[p].get(k) != second[p].get(k):
                out.add((p, k))
    return out, only


def ubtrfs_ls(devices, extra=()):
    cp = T.ubtrfs("ls", "-R", "--json", *extra, *devices)
    problems = _check_run(cp)
    if cp.returncode != 0:
        problems.append("ls -R --json exit %d: %s" % (cp.returncode,
                                                      cp.stderr[-1500:].decode("utf-8", "replace")))
    try:
        got, dups = T.index_entries(T.parse_ls_json(cp.stdout))
    except AssertionError as e:
        return {}, problems + [str(e)], cp
    problems += ["listed twice: %r" % d for d in dups[:10]]
    return got, problems, cp


def one_name_per_inode(entries, hashes):
    """The first path of every (subvolume, inode): hard links share their bytes,
    and ls already proves each name leads to the right inode."""
    seen = set()
    out = {}
    for p in sorted(hashes):
        k = (entries[p]["subvol"], entries[p]["ino"])
        if k not in seen:
            seen.add(k)
            out[p] = hashes[p]
    return out


def ubtrfs_cat_all(devices, hashes, extra=(), workers=2):
    def one(p):
        cp = T.ubtrfs("cat", *extra, "--path", p, *devices)
        exp_size, exp_digest = hashes[p]
        out = _check_run(cp)
        if cp.returncode != 0:
            out.append("cat %r: exit %d (%s)" % (p, cp.returncode,
                                                 cp.stderr[-400:].decode("utf-8", "replace").strip()))
        elif len(cp.stdout) != exp_size:
            out.append("cat %r: %d bytes, kernel reads %d" % (p, len(cp.stdout), exp_size))
        elif hashlib.sha256(cp.stdout).hexdigest() != exp_digest:
            out.append("cat %r: content differs from the kernel's (%s)" % (p, first_difference(cp.stdout, p)))
        return out
    problems = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as ex:
        for r in ex.map(one, sorted(hashes)):
            problems += r
    return problems


# Set by compare_image so first_difference can read the kernel's bytes.
_KERNEL_BYTES = {}


def first_difference(data, path):
    want = _KERNEL_BYTES.get(path)
    if want is None:
        return "kernel bytes not kept"
    for i in range(0, min(len(data), len(want)), 4096):
        if data[i:i + 4096] != want[i:i + 4096]:
            j = i + next(k for k in range(4096) if data[i + k:i + k + 1] != want[i + k:i + k + 1])
            zero = want[j:j + 4096].strip(b"\0") == b""
            return "first at byte %d: kernel %s, ubtrfs %r" % (
                j, "zeros" if zero else repr(want[j:j + 8]), data[j:j + 8])
    return "same prefix, lengths %d vs %d" % (len(data), len(want))


def kernel_bytes(mnt, hashes, budget=256 * MiB):
    """The kernel's bytes of every file (while they fit in memory), for reports."""
    out = {}
    total = 0
    for p, (size, _) in sorted(hashes.items()):
        if size > 64 * MiB or total + size > budget:
            continue
        with open(os.path.join(os.fsencode(str(mnt)), os.fsencode(p.lstrip("/"))), "rb") as f:
            out[p] = f.read()
        total += size
    return out


def walk_kernel(top):
    """Every entry below the mount in `ls --json` shape, like the testlib's
    walk_tree, except for the stand-in directory (inode 2) the kernel shows for
    a subvolume a snapshot did not take along: it answers no ioctl and has no
    xattr handler, and it belongs to the subvolume of the directory holding it
    (the kernel gives it that directory's root)."""
    top_b = os.fsencode(str(top))
    entries = {}
    dev_subvol = {}

    def subvol_of(real_dir, st):
        if st.st_dev not in dev_subvol:
            dev_subvol[st.st_dev] = T.subvol_id(real_dir)
        return dev_subvol[st.st_dev]

    def recurse(real_dir, fs_dir, dir_subvol):
        with os.scandir(real_dir) as it:
            children = sorted(it, key=lambda d: d.name)
        for de in children:
            real = de.path
            st = os.lstat(real)
            fspath = fs_dir.rstrip(b"/") + b"/" + de.name
            if stat.S_ISDIR(st.st_mode) and st.st_ino == 2:
                e = {"path": os.fsdecode(fspath), "name": os.fsdecode(de.name), "subvol": dir_subvol,
                     "ino": st.st_ino, "type": "dir", "mode": st.st_mode, "size": st.st_size,
                     "nlink": st.st_nlink, "uid": st.st_uid, "gid": st.st_gid,
                     "rdev_major": os.major(st.st_rdev), "rdev_minor": os.minor(st.st_rdev),
                     "atime": T._ts(st.st_atime_ns), "mtime": T._ts(st.st_mtime_ns),
                     "ctime": T._ts(st.st_ctime_ns), "xattrs": {}}
                assert not os.listdir(real), "the kernel's stand-in directory %r is not empty" % real
                entries[e["path"]] = e
                continue
            sv = subvol_of(real, st) if stat.S_ISDIR(st.st_mode) else dir_subvol
            entries[os.fsdecode(fspath)] = T.entry_from_stat(
                os.fsdecode(fspath), os.fsdecode(de.name), st, sv, real)
            if stat.S_ISDIR(st.st_mode):
                recurse(real, fspath, sv)

    recurse(top_b, b"/", T.subvol_id(top_b))
    return entries


def kernel_view_multi(images, mnt, readonly=True, options=""):
    """The kernel's view of `images`; read-only (no log replay) or read-write with
    noatime (the log is replayed at mount)."""
    _KERNEL_BYTES.clear()
    if readonly:
        with T.mounted(images, mnt, options=options, readonly=True) as m:
            entries = walk_kernel(m)
            hashes = T.hash_files(m, entries)
            _KERNEL_BYTES.update(kernel_bytes(m, hashes))
        return T.KernelView(entries, hashes)
    with M.attached(images) as loops:
        with M.mount_loops(loops, mnt, ["noatime"]) as m:
            entries = walk_kernel(m)
            hashes = T.hash_files(m, entries)
            _KERNEL_BYTES.update(kernel_bytes(m, hashes))
    return T.KernelView(entries, hashes)


def compare_image(res, what, devices, view, extra=(), missing=(), every_name=False, unstable=()):
    got, problems, cp = ubtrfs_ls(devices, extra)
    problems += compare_views(view.entries, got, unstable=unstable)
    for d in missing:
        if not _names_missing(cp.stderr, d):
            problems.append("ls: stderr does not name missing devid %d" % d)
    hashes = view.hashes if every_name else one_name_per_inode(view.entries, view.hashes)
    problems += ubtrfs_cat_all(devices, hashes, extra)
    res.problems += ["[%s] %s" % (what, p) for p in problems]


def check_image(res, what, devices, extra=()):
    """`ubtrfs check` on what the kernel wrote must find nothing; where it
    does, `btrfs check` on the same single-device image is the referee (the
    kernel could have written something wrong; it has not so far)."""
    cp = T.ubtrfs("check", *extra, *devices)
    problems = _check_run(cp)
    if cp.returncode == 0:
        return
    referee = ""
    if len(devices) == 1:
        ref = T.run(["btrfs", "check", "--readonly", devices[0]], check=False)
        referee = "; btrfs check exit %d" % ref.returncode
    lines = [l for l in cp.stdout.decode("utf-8", "replace").splitlines()
             if not l.startswith(("checked:", "checksums:", "file trees:", "parity:", "problems:"))]
    problems.append("check exit %d%s: %s" % (cp.returncode, referee, " | ".join(lines[:8])))
    res.problems += ["[%s] %s" % (what, p) for p in problems]


def _names_missing(stderr, devid):
    import re
    return re.search(r"devid %d\b[^\n]*missing" % devid, stderr.decode("utf-8", "replace")) is not None


def devids_of(images):
    return [M.super_info(i)["devid"] for i in images]


COVERAGE_PATTERNS = (
    ("inode extrefs", r"INODE_EXTREF"),
    ("inline extents", r"type 0 \(inline\)"),
    ("prealloc extents", r"type 2 \(prealloc\)"),
    ("zlib extents", r"compression 1 \(zlib\)"),
    ("lzo extents", r"compression 2 \(lzo\)"),
    ("zstd extents", r"compression 3 \(zstd\)"),
    ("holes (no-holes off)", r"extent data disk byte 0 nr 0"),
    ("xattr items", r"XATTR_ITEM"),
    ("subvolume trees", r"^file tree key \(\d+ ROOT_ITEM"),
    ("orphan items", r"ORPHAN_ITEM"),
)


def coverage(images):
    """How often the final image holds each interesting item kind (progs' dump)."""
    import re
    text = T.run(["btrfs", "inspect-internal", "dump-tree", "--noscan", *images]).stdout.decode(
        "utf-8", "replace")
    return {name: len(re.findall(pat, text, re.M)) for name, pat in COVERAGE_PATTERNS}


def run_config(cfg, workdir, seed=None, ops=None, long_mode=False, want_coverage=False):
    """Build, run the workload, compare; returns a Result (problems empty when equal)."""
    seed = cfg.seed if seed is None else seed
    ops = cfg.ops if ops is None else ops
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    res = Result(cfg, seed, ops, workdir)
    t0 = time.time()
    images = []
    for i in range(cfg.ndev):
        p = workdir / ("dev%d.img" % i)
        with open(p, "wb") as f:
            f.truncate(image_size(cfg))
        images.append(str(p))
    crash_images = []
    wl = Workload(workdir / "mnt", seed, nodesize=cfg.nodesize, max_bytes=cfg.max_bytes, salt=cfg.name)
    try:
        with M.attached(images) as loops:
            T.run(["mkfs.btrfs", "-f", "-q", *cfg.mkfs_args(), *loops])
            opts = [o for o in cfg.mount_opts().split(",") if o]
            with M.mount_loops(loops, workdir / "mnt", opts) as mnt:
                wl.mnt = mnt
                wl.run(ops)
                if cfg.crash:
                    # commit what came before, so the log holds only the tail
                    T.run(["btrfs", "filesystem", "sync", mnt])
                    wl.crash_tail(max(3, ops // 10))
                    dsts = [workdir / ("crash%d.img" % i) for i in range(len(loops))]
                    # from the image files, not the loop devices: the kernel's btrfs writes
                    # past the loop device's page cache, which may still hold what mkfs.btrfs
                    # wrote there, so a read of the device can mix two states
                    if T.copy_quiet(images, dsts) is None:
                        res.skip = ("test setup: the kernel committed while each of 5 copies of the crash "
                                    "image was taken (no crash leaves such a copy)")
                    crash_images.extend(map(str, dsts))
    finally:
        res.op_log = wl.op_log
        res.counts = wl.counts
        with open(workdir / "ops.log", "w") as f:
            f.write("\n".join(wl.op_log) + "\n")
    res.times["workload"] = time.time() - t0
    if res.skip:
        return res
    # Order the images by devid, so "left out" names a devid.
    order = devids_of(images)
    images = [img for _, img in sorted(zip(order, images))]

    if want_coverage:
        res.coverage = coverage(images)
    def count(view):
        res.nentries = len(view.entries)
        res.nfiles = len(view.hashes)
        res.placeholders = sum(1 for e in view.entries.values() if e["type"] == "dir" and e["ino"] == 2)

    if not cfg.crash:
        # (crash configurations compare the crash copy, twice, instead: time)
        t0 = time.time()
        view = kernel_view_multi(images, workdir / "mnt_ro")
        res.times["kernel"] = time.time() - t0
        count(view)
        t0 = time.time()
        compare_image(res, "final image, all devices", images, view, every_name=long_mode)
        check_image(res, "final image", images)
        for missing in cfg.degraded_sets(long_mode):
            devs = [img for d, img in enumerate(images, 1) if d not in missing]
            compare_image(res, "final image without devid %s" % ",".join(map(str, missing)), devs, view,
                          missing=missing, every_name=long_mode)
        res.times["ubtrfs"] = time.time() - t0

    if cfg.crash:
        t0 = time.time()
        order = devids_of(crash_images)
        crash_images = [img for _, img in sorted(zip(order, crash_images))]
        sup = T.parse_dump_super(T.run(["btrfs", "inspect-internal", "dump-super",
                                        crash_images[0]]).stdout.decode())
        if int(sup.get("log_root", "0")) == 0:
            res.no_log = True
            res.notes.append("crash copy has no pending log (log_root 0): the fsync tail fell back "
                             "to a full commit; only the committed state was compared")
        committed = kernel_view_multi(crash_images, workdir / "mnt_crash_ro")
        count(committed)
        compare_image(res, "crash copy, last commit (--no-log)", crash_images, committed,
                      extra=("--no-log",), every_name=long_mode)
        check_image(res, "crash copy", crash_images)
        if int(sup.get("log_root", "0")) != 0:
            copies = []
            for i, img in enumerate(crash_images):
                dst = workdir / ("replay%d.img" % i)
                T.copy_sparse(img, dst)
                copies.append(str(dst))
            replayed = kernel_view_multi(copies, workdir / "mnt_replay", readonly=False)
            after = T.parse_dump_super(T.run(["btrfs", "inspect-internal", "dump-super",
                                              copies[0]]).stdout.decode())
            if int(after.get("log_root", "0")) != 0:
                res.problems.append("test setup: the kernel's read-write mount left log_root %s"
                                    % after.get("log_root"))
            # A second replay, seconds later, shows which fields the kernel
            # sets from the clock while replaying.
            for c, img in zip(copies, crash_images):
                T.copy_sparse(img, c)
            time.sleep(1.1)
            again = kernel_view_multi(copies, workdir / "mnt_replay", readonly=False)
            unstable, only = unstable_fields(replayed.entries, again.entries)
            if only or replayed.hashes != again.hashes:
                res.problems.append("test setup: two kernel replays of the crash copy differ in entries %r "
                                    "or file contents" % only[:10])
            if unstable:
                res.notes.append("%d field(s) differ between two kernel replays, not compared: %s" % (
                    len(unstable), ", ".join("%s %s" % (p, k) for p, k in sorted(unstable)[:5])))
            compare_image(res, "crash copy, fsync log replayed", crash_images, replayed, every_name=long_mode,
                          unstable=unstable)
            for c in copies:
                os.unlink(c)
        res.times["crash"] = time.time() - t0
    T.run(["btrfs", "device", "scan", "--forget"], check=False)
    return res


# ============================================================================
# the configurations

def ci_configs():
    """About ten fixed configurations for CI: every knob appears at least once."""
    return [
        Config("n4k-crc32c-zstdforce", nodesize=4096, mount="compress-force=zstd", seed=101, ops=110),
        Config("n16k-xxhash-zlib-holes-inline0", mkfs=["--csum", "xxhash", "-O", "^no-holes"],
               mount="compress=zlib,max_inline=0", seed=202, ops=100),
        Config("n64k-sha256-lzo-inline2048", nodesize=65536, mkfs=["--csum", "sha256"],
               mount="compress=lzo,max_inline=2048", seed=303, ops=70),
        Config("n16k-blake2-dup-zstd", mkfs=["--csum", "blake2"], profile=("dup", "dup", 1),
               mount="compress=zstd:3", seed=404, ops=90),
        Config("raid1-zstdforce", profile=("raid1", "raid1", 2), mount="compress-force=zstd",
               seed=505, ops=70),
        Config("raid10-nodatasum", profile=("raid10", "raid10", 4), mount="nodatasum", seed=606, ops=60),
        Config("raid5-lzo", profile=("raid5", "raid5", 3), mount="compress=lzo", seed=707, ops=60),
        Config("raid6-raid1c3-xxhash", mkfs=["--csum", "xxhash"], profile=("raid6", "raid1c3", 4),
               seed=808, ops=60),
        Config("crash-n16k-zstd", mount="compress=zstd", crash=True, seed=909, ops=50),
        Config("crash-n4k-nodatacow", nodesize=4096, mount="nodatacow", crash=True, seed=1010, ops=40),
    ]


def long_configs(count=36, seed=7):
    """A seeded sample of the full matrix: every value of every knob several times."""
    rng = random.Random(seed)
    nodesizes = (4096, 16384, 65536)
    csums = ("crc32c", "xxhash", "sha256", "blake2")
    profiles = (("single", "single", 1), ("single", "dup", 1), ("dup", "dup", 1),
                ("raid1", "raid1", 2), ("raid10", "raid10", 4), ("raid5", "raid5", 3),
                ("raid6", "raid6", 4), ("raid5", "raid1", 3), ("raid0", "raid1", 2),
                ("raid1c3", "raid1c3", 3))
    mounts = ("", "compress=zlib", "compress=lzo", "compress=zstd", "compress-force=zlib",
              "compress-force=lzo", "compress-force=zstd", "compress-force=zstd:15", "compress=zlib:9")
    extras = ("", "max_inline=0", "max_inline=2048", "nodatasum", "nodatacow")
    out = []
    for i in range(count):
        ns = nodesizes[i % 3]
        cs = csums[(i // 3) % 4]
        prof = profiles[rng.randrange(len(profiles))]
        mnt = ",".join(o for o in (mounts[rng.randrange(len(mounts))],
                                   extras[rng.randrange(len(extras))]) if o)
        mkfs = ["--csum", cs]
        if rng.random() < 0.3:
            mkfs += ["-O", "^no-holes"]
        crash = prof[2] == 1 and rng.random() < 0.35
        name = "L%02d-n%dk-%s-%s-%s%s%s" % (i, ns // 1024, cs, prof[0], prof[1],
                                            ("-" + mnt.replace(",", "-").replace("=", "")) if mnt else "",
                                            "-crash" if crash else "")
        out.append(Config(name, nodesize=ns, mkfs=mkfs, profile=prof, mount=mnt, crash=crash,
                          seed=1000 + i, ops=300, max_bytes=128 * MiB))
    return out


def all_configs():
    return {c.name: c for c in ci_configs() + long_configs()}
