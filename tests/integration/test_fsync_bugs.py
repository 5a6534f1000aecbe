# SPDX-License-Identifier: MIT
"""The known fsync bugs of btrfs, as named workloads run on the kernel and on ubtrfs (issue 31).

Each workload is one of the CrashMonkey/ACE "seq-1"/"seq-2" shapes (or an xfstests regression of
btrfs's log): a baseline that is committed, then a few changes and fsyncs, then a crash right after
the last fsync. It runs twice on a fresh mkfs.btrfs image:

  * on the kernel's btrfs (loop mount, commit=300 so no periodic commit lands in between), the
    image copied while still mounted right after the last fsync (a quiet copy, as
    fsynclog_lib.make_crash takes it): the oracle;
  * on `ubtrfs mount` (rw, commit=600, the log on), the daemon killed with SIGKILL right after
    the last fsync returned: the disk holds the last commit and the log ubtrfs wrote.

After each fsync the runner reads the image's primary superblock: a new generation means the fsync
committed instead of logging. Workloads marked `logs=True` must not commit on ubtrfs (what
docs/fsync-log.md says the log expresses). Where ubtrfs committed and the kernel logged, the kernel
is run again with `btrfs filesystem sync` after the same fsyncs, so that both results come from the
same commit points (ubtrfs then keeps more than the kernel's log would).

The ubtrfs crash image is then judged:
  * `btrfs check` is clean with the log pending, after the kernel's replay and after ubtrfs's;
  * every workload's promise holds on the kernel's replay of both crash images: what its fsyncs
    made durable, written next to the workload (the file with the bytes it had at the fsync, a name
    that must be gone, a link count; a file below a moved directory its bytes, not its path);
  * with the same commit points, the kernel's replay of ubtrfs's log shows exactly the tree its
    replay of its own log shows: names, types, modes, sizes, link counts, inode numbers, symlink
    targets, xattrs, file bytes and allocated blocks (times are not compared). An allowed
    difference is written next to its workload (`more`: ubtrfs's replay shows the path as the live
    filesystem had it, e.g. a new file a logged directory names is logged whole, where the kernel
    logs that it exists and its replay makes it empty; `ubtrfs_keeps`: what ubtrfs keeps where the
    kernel's replay loses it);
  * where the kernel committed and ubtrfs logged, ubtrfs's replay shows nothing that neither the
    last commit nor the live filesystem had;
  * ubtrfs's in-memory replay (`ubtrfs mount -o ro`) and its replay into the trees (the read-write
    mount of a copy, then the kernel's mount of the result) show the kernel's replay of its log.

Every workload runs on one device; those that write data also on RAID5 and RAID6 data (mirrored
metadata), two on RAID5 metadata (where ubtrfs commits).

Budget: about 45 s under ASan.
"""

import ctypes
import hashlib
import os
import re
import signal
import stat
from pathlib import Path

import pytest

import fsynclog_lib as L
import ubtrfs_testlib as T
from test_mount import fuse_mounted
from test_enospc import dump_tree as enospc_dump_tree, progs_check as enospc_check
from test_mount_crash import start_daemon, take_away
from test_volume_write import fiemap

MiB = T.MiB
IMG_SIZE = 256 * MiB

# the fields of an entry that a replay must give exactly as the kernel's replay gives them
KEYS = ("type", "mode", "size", "nlink", "uid", "gid", "ino", "rdev_major", "rdev_minor", "xattrs")


def super_state(image):
    """(generation, log_root) of the primary superblock of an image file."""
    with open(image, "rb") as f:
        f.seek(64 << 10)
        sb = f.read(4096)
    assert sb[64:72] == b"_BHRfS_M", "no btrfs superblock in %s" % image
    return int.from_bytes(sb[72:80], "little"), int.from_bytes(sb[96:104], "little")


def data_of(seed, n):
    """n deterministic bytes, the same on both runs."""
    out = bytearray()
    i = 0
    while len(out) < n:
        out += hashlib.sha256(b"%d:%d" % (seed, i)).digest()
        i += 1
    return bytes(out[:n])


def entry_of(top, rel):
    """What a path shows on a mount: the KEYS of its stat, its bytes' hash, its target."""
    p = os.path.join(top, rel)
    st = os.lstat(p)
    e = T.entry_from_stat(rel, os.path.basename(rel), st, None, p)
    e = {k: e[k] for k in KEYS + (("target",) if "target" in e else ())}
    e["blocks"] = st.st_blocks
    if stat.S_ISREG(st.st_mode):
        with open(p, "rb") as f:
            e["sha256"] = hashlib.sha256(f.read()).hexdigest()
    return e


def view_of(top, fuse=False):
    """rel path -> entry_of, for everything below top. The ubtrfs mount numbers an inode of
    subvolume S as S << 48 | inode (docs/mount.md): fuse=True gives back the inode number."""
    out = {}
    for root, dirs, files in os.walk(top):
        for n in dirs + files:
            rel = os.path.relpath(os.path.join(root, n), top)
            out[rel] = entry_of(top, rel)
            if fuse:
                out[rel]["ino"] &= (1 << 48) - 1
    return out


class Run:
    """The workload's view of one filesystem: its operations, its fsyncs and its promises.

    `force` is the set of fsync numbers after which a full commit is forced (btrfs filesystem
    sync), to line the run up with the other side's fallbacks."""

    def __init__(self, mnt, image, force=(), ubtrfs_bin=None):
        self.m = str(mnt)
        self.ubtrfs_bin = ubtrfs_bin  # None on the kernel's side
        self.image = image
        self.force = set(force)
        self.commits = []        # fsync numbers that committed (by themselves or forced)
        self.fallbacks = []      # fsync numbers that committed by themselves
        self.promises = []       # (rel, entry or None for "gone", keys)
        self.nfsync = 0
        self.gen = None
        self.fds = []

    def p(self, rel):
        return os.path.join(self.m, rel)

    # ---- operations
    def write(self, rel, data, off=0, create=True, trunc=False):
        flags = os.O_WRONLY | (os.O_CREAT if create else 0) | (os.O_TRUNC if trunc else 0)
        fd = os.open(self.p(rel), flags, 0o644)
        try:
            assert os.pwrite(fd, data, off) == len(data)
        finally:
            os.close(fd)

    def mkdir(self, rel, mode=0o755):
        os.mkdir(self.p(rel), mode)

    def rename(self, a, b):
        os.rename(self.p(a), self.p(b))

    def exchange(self, a, b):
        libc = ctypes.CDLL(None, use_errno=True)
        at_fdcwd, rename_exchange = -100, 2
        if libc.renameat2(at_fdcwd, os.fsencode(self.p(a)), at_fdcwd, os.fsencode(self.p(b)), rename_exchange):
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))

    def link(self, a, b):
        os.link(self.p(a), self.p(b))

    def unlink(self, rel):
        os.unlink(self.p(rel))

    def truncate(self, rel, n):
        os.truncate(self.p(rel), n)

    def fallocate(self, rel, off, n, mode=0):
        fd = os.open(self.p(rel), os.O_WRONLY)
        try:
            T.fallocate(fd, mode, off, n)
        finally:
            os.close(fd)

    def setxattr(self, rel, name, value):
        os.setxattr(self.p(rel), name, value, follow_symlinks=False)

    def removexattr(self, rel, name):
        os.removexattr(self.p(rel), name, follow_symlinks=False)

    def subvolume(self, rel):
        # btrfs-progs wants the kernel's statfs magic; ubtrfs's own command speaks the same ioctls
        cmd = [str(self.ubtrfs_bin)] if self.ubtrfs_bin else ["btrfs"]
        T.run(cmd + ["subvolume", "create", self.p(rel)])

    def linkat_fd(self, fd, rel):
        """linkat(fd, "", AT_FDCWD, rel, AT_EMPTY_PATH): an O_TMPFILE gets its name."""
        libc = ctypes.CDLL(None, use_errno=True)
        at_fdcwd, at_empty_path = -100, 0x1000
        if libc.linkat(fd, b"", at_fdcwd, os.fsencode(self.p(rel)), at_empty_path):
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))

    def sync(self):
        T.run(["btrfs", "filesystem", "sync", self.m])

    # ---- fsyncs: each checks whether it committed
    def _after_fsync(self):
        self.nfsync += 1
        n = self.nfsync
        if n in self.force:
            self.sync()
        gen, _ = super_state(self.image)
        if gen != self.gen:
            self.commits.append(n)
            if n not in self.force:
                self.fallbacks.append(n)
        self.gen = gen

    def _before_fsync(self):
        gen, _ = super_state(self.image)
        assert gen == self.gen, "a commit between fsyncs (generation %d, %d at the last fsync)" % (gen, self.gen)

    def fsync(self, rel, datasync=False):
        self._before_fsync()
        fd = os.open(self.p(rel), os.O_RDONLY | (os.O_DIRECTORY if os.path.isdir(self.p(rel)) else 0))
        try:
            (os.fdatasync if datasync else os.fsync)(fd)
        finally:
            os.close(fd)
        self._after_fsync()

    def fsync_fd(self, fd, datasync=False):
        self._before_fsync()
        (os.fdatasync if datasync else os.fsync)(fd)
        self._after_fsync()

    # ---- what the fsyncs promised, recorded as the live filesystem shows it now
    def promise(self, rel, keys=("type", "mode", "size", "sha256", "target", "xattrs")):
        e = entry_of(self.m, rel)
        self.promises.append((rel, e, tuple(k for k in keys if k in e)))

    def promise_data(self, rel):
        """The inode at rel keeps its bytes, under whatever name: fsync of a file does not promise
        the renames of its parents (POSIX; the kernel keeps the old path then)."""
        e = entry_of(self.m, rel)
        self.promises.append((None, e, ("ino", "size", "sha256")))

    def promise_gone(self, rel):
        assert not os.path.lexists(self.p(rel)), "%s still exists on the live filesystem" % rel
        self.promises.append((rel, None, ()))

    def close(self):
        for fd in self.fds:
            os.close(fd)
        self.fds = []


WORKLOADS = {}


def workload(name, logs=False):
    """Register a workload class: baseline(r) (then committed), action(r) (its last step an fsync).
    logs: ubtrfs must write the log for every fsync of it, no commit (what docs/fsync-log.md says the
    log expresses)."""
    def deco(cls):
        cls.name = name
        cls.ubtrfs_logs = logs
        WORKLOADS[name] = cls
        return cls
    return deco


def _two_dirs(r, files=2, size=20000):
    for d in ("d", "e"):
        r.mkdir(d)
        for i in range(files):
            r.write("%s/old%d" % (d, i), data_of({"d": 50, "e": 60}[d] + i, size + i * 1000))


# ---------------------------------------------------------------------------------------------
# the workloads (CrashMonkey seq-1 / seq-2 shapes and btrfs's xfstests regressions)

@workload("rename_fsync", logs=True)
class RenameFsync:
    """rename a committed file, fsync it under the new name: the new name, never the old."""
    @staticmethod
    def baseline(r):
        _two_dirs(r)
        r.write("d/a", data_of(1, 10000))

    @staticmethod
    def action(r):
        r.rename("d/a", "d/b")
        r.fsync("d/b")
        r.promise("d/b")
        r.promise_gone("d/a")


@workload("rename_other_dir_fsync")
class RenameOtherDirFsync:
    """rename into another directory, write, fsync (generic/ rename + fsync family)."""
    @staticmethod
    def baseline(r):
        _two_dirs(r)
        r.write("d/a", data_of(2, 30000))

    @staticmethod
    def action(r):
        r.rename("d/a", "e/b")
        r.write("e/b", data_of(3, 5000), off=40000, create=False)
        r.fsync("e/b")
        r.promise("e/b")
        r.promise_gone("d/a")


@workload("link_fsync", logs=True)
class LinkFsync:
    """a hard link added to a committed file, then fsync of the file (generic/039, generic/041)."""
    @staticmethod
    def baseline(r):
        _two_dirs(r)
        r.write("d/a", data_of(4, 7000))

    @staticmethod
    def action(r):
        r.link("d/a", "e/l")
        r.fsync("d/a")
        r.promise("d/a", keys=("type", "size", "sha256", "nlink"))
        r.promise("e/l", keys=("type", "size", "sha256", "nlink"))


@workload("link_fsync_new_name", logs=True)
class LinkFsyncNewName:
    """a hard link in the same directory, fsync through the new name."""
    @staticmethod
    def baseline(r):
        _two_dirs(r)
        r.write("d/a", data_of(5, 9000))

    @staticmethod
    def action(r):
        r.link("d/a", "d/l")
        r.write("d/l", data_of(6, 3000), off=9000, create=False)
        r.fsync("d/l")
        r.promise("d/l", keys=("type", "size", "sha256", "nlink"))
        r.promise("d/a", keys=("type", "size", "sha256", "nlink"))


@workload("unlink_one_of_two_names", logs=True)
class UnlinkOneOfTwo:
    """a file of two names loses one, fsync of the other: the lost name must stay lost, the count
    one (generic/039's "link count after log replay")."""
    @staticmethod
    def baseline(r):
        _two_dirs(r)
        r.write("d/a", data_of(7, 12000))
        r.link("d/a", "e/b")

    @staticmethod
    def action(r):
        r.unlink("e/b")
        r.fsync("d/a")
        r.promise("d/a", keys=("type", "size", "sha256", "nlink"))
        r.promise_gone("e/b")


@workload("new_file_fsync", logs=True)
class NewFileFsync:
    """a new file in a committed directory, fsync of the file: its name comes with it."""
    @staticmethod
    def baseline(r):
        _two_dirs(r)

    @staticmethod
    def action(r):
        r.write("d/f", data_of(8, 50000))
        r.fsync("d/f")
        r.promise("d/f")


@workload("new_entry_fsync_dir", logs=True)
class NewEntryFsyncDir:
    """a new file, a new symlink and a new fifo, then fsync of their directory: the names persist
    (generic/335-like), the file's data was not promised."""
    @staticmethod
    def baseline(r):
        _two_dirs(r)

    @staticmethod
    def action(r):
        r.write("d/f", data_of(9, 4000))
        os.symlink("../e/old0", r.p("d/s"))
        os.mkfifo(r.p("d/p"), 0o600)
        r.fsync("d")
        r.promise("d/f", keys=("type", "mode"))
        r.promise("d/s", keys=("type", "target"))
        r.promise("d/p", keys=("type", "mode"))

    # the kernel logs a new inode a logged entry names as existing only (its replay makes the file
    # empty); ubtrfs logs it whole, so the replay also has the bytes it had at the fsync
    more = {"d/f": "logged whole, the kernel logs that it exists (empty)"}


@workload("truncate_fsync", logs=True)
class TruncateFsync:
    """truncate a committed file down, fsync: the new size and nothing past it."""
    @staticmethod
    def baseline(r):
        _two_dirs(r)
        r.write("d/a", data_of(10, 200000))

    @staticmethod
    def action(r):
        r.truncate("d/a", 5000)
        r.fsync("d/a")
        r.promise("d/a")


@workload("truncate_up_fdatasync", logs=True)
class TruncateUpFdatasync:
    """grow a file by truncate (a hole), fdatasync: the size is data fdatasync keeps."""
    @staticmethod
    def baseline(r):
        _two_dirs(r)
        r.write("d/a", data_of(11, 6000))

    @staticmethod
    def action(r):
        r.truncate("d/a", 300000)
        r.fsync("d/a", datasync=True)
        r.promise("d/a")


@workload("punch_fsync", logs=True)
class PunchFsync:
    """a hole punched in committed data, fsync (generic/ punch + fsync, no-holes replay)."""
    @staticmethod
    def baseline(r):
        _two_dirs(r)
        r.write("d/a", data_of(12, 300000))

    @staticmethod
    def action(r):
        r.fallocate("d/a", 4096, 65536, T.FALLOC_FL_PUNCH_HOLE | T.FALLOC_FL_KEEP_SIZE)
        r.fallocate("d/a", 200000, 30000, T.FALLOC_FL_PUNCH_HOLE | T.FALLOC_FL_KEEP_SIZE)
        r.fsync("d/a")
        r.promise("d/a", keys=("type", "size", "sha256", "blocks"))


@workload("falloc_keep_size_fsync")
class FallocKeepSizeFsync:
    """preallocation past EOF with KEEP_SIZE, fsync: the size stays, the extents past it survive
    the replay (generic/483)."""
    @staticmethod
    def baseline(r):
        _two_dirs(r)
        r.write("d/a", data_of(13, 10000))

    @staticmethod
    def action(r):
        r.fallocate("d/a", 16384, 1 << 20, T.FALLOC_FL_KEEP_SIZE)
        r.fsync("d/a")
        r.promise("d/a", keys=("type", "size", "sha256", "blocks"))


@workload("append_fsync_twice", logs=True)
class AppendFsyncTwice:
    """append and fsync twice in one transaction: the second log replaces the first's items."""
    @staticmethod
    def baseline(r):
        _two_dirs(r)
        r.write("d/a", data_of(14, 3000))

    @staticmethod
    def action(r):
        r.write("d/a", data_of(15, 5000), off=3000, create=False)
        r.fsync("d/a")
        r.write("d/a", data_of(16, 70000), off=8000, create=False)
        r.fsync("d/a", datasync=True)
        r.promise("d/a")


@workload("xattr_fsync", logs=True)
class XattrFsync:
    """xattrs set, changed and removed, fsync (generic/ xattr + fsync)."""
    @staticmethod
    def baseline(r):
        _two_dirs(r)
        r.write("d/a", data_of(17, 2000))
        r.setxattr("d/a", "user.keep", b"old value")
        r.setxattr("d/a", "user.drop", b"goes")

    @staticmethod
    def action(r):
        r.setxattr("d/a", "user.keep", b"new value, longer than the old one")
        r.setxattr("d/a", "user.new", data_of(18, 300))
        r.removexattr("d/a", "user.drop")
        r.fsync("d/a")
        r.promise("d/a")


@workload("chmod_fsync", logs=True)
class ChmodFsync:
    """a change of the inode only, fsync."""
    @staticmethod
    def baseline(r):
        _two_dirs(r)
        r.write("d/a", data_of(19, 2000))

    @staticmethod
    def action(r):
        os.chmod(r.p("d/a"), 0o600)
        r.fsync("d/a")
        r.promise("d/a")


@workload("dir_move_fsync_file", logs=True)
class DirMoveFsyncFile:
    """a directory moved to another parent, then fsync of a file in it (btrfs: file lost after a
    parent's rename)."""
    @staticmethod
    def baseline(r):
        _two_dirs(r)
        r.mkdir("d/sub")
        r.write("d/sub/f", data_of(20, 8000))

    @staticmethod
    def action(r):
        r.rename("d/sub", "e/sub")
        r.write("e/sub/f", data_of(21, 1000), off=8000, create=False)
        r.fsync("e/sub/f")
        r.promise_data("e/sub/f")


@workload("dir_move_fsync_dir", logs=True)
class DirMoveFsyncDir:
    """a directory moved, then fsync of the directory itself (CrashMonkey: directory lost in both
    places)."""
    @staticmethod
    def baseline(r):
        _two_dirs(r)
        r.mkdir("d/sub")
        r.write("d/sub/f", data_of(22, 3000))

    @staticmethod
    def action(r):
        r.rename("d/sub", "e/moved")
        r.fsync("e/moved")
        r.promise("e/moved", keys=("type", "mode"))
        r.promise("e/moved/f")
        r.promise_gone("d/sub")


@workload("parent_renamed_fsync", logs=True)
class ParentRenamedFsync:
    """the parent directory renamed in place, a file in it written and fsynced."""
    @staticmethod
    def baseline(r):
        r.mkdir("d")
        r.write("d/f", data_of(23, 20000))

    @staticmethod
    def action(r):
        r.rename("d", "g")
        r.write("g/f", data_of(24, 4096), off=0, create=False)
        r.fsync("g/f")
        r.promise_data("g/f")


@workload("rename_over_fsync_dir", logs=True)
class RenameOverFsyncDir:
    """rename over an existing file, fsync of the directory: the survivor's bytes under the name,
    the source name gone, the replaced file gone."""
    @staticmethod
    def baseline(r):
        _two_dirs(r)
        r.write("d/x", data_of(25, 9000))
        r.write("d/y", data_of(26, 4000))

    @staticmethod
    def action(r):
        r.rename("d/x", "d/y")
        r.fsync("d")
        r.promise("d/y")
        r.promise_gone("d/x")


@workload("rename_over_fsync_source", logs=True)
class RenameOverFsyncSource:
    """rename over an existing file in another directory, fsync of the source directory."""
    @staticmethod
    def baseline(r):
        _two_dirs(r)
        r.write("d/x", data_of(27, 9000))
        r.write("e/y", data_of(28, 4000))

    @staticmethod
    def action(r):
        r.rename("d/x", "e/y")
        r.fsync("d")
        r.promise_gone("d/x")


@workload("mkdir_fsync", logs=True)
class MkdirFsync:
    """mkdir, fsync of the new directory (btrfs persists it with its name)."""
    @staticmethod
    def baseline(r):
        _two_dirs(r)

    @staticmethod
    def action(r):
        r.mkdir("d/new", 0o750)
        r.fsync("d/new")
        r.promise("d/new", keys=("type", "mode"))


@workload("mkdir_file_fsync", logs=True)
class MkdirFileFsync:
    """a file in a new directory, fsync of the file: the directory comes with it."""
    @staticmethod
    def baseline(r):
        _two_dirs(r)

    @staticmethod
    def action(r):
        r.mkdir("d/new")
        r.write("d/new/f", data_of(29, 6000))
        r.fsync("d/new/f")
        r.promise("d/new/f")


@workload("tmpfile_linkat_fsync", logs=True)
class TmpfileLinkat:
    """O_TMPFILE written, linked in with linkat, fsync (generic/ tmpfile + link)."""
    @staticmethod
    def baseline(r):
        _two_dirs(r)

    @staticmethod
    def action(r):
        fd = os.open(r.p("d"), os.O_TMPFILE | os.O_RDWR, 0o640)
        r.fds.append(fd)
        assert os.write(fd, data_of(30, 11000)) == 11000
        r.linkat_fd(fd, "d/t")
        r.fsync_fd(fd)
        r.promise("d/t")


@workload("rename_then_create_old_name", logs=True)
class RenameThenCreate:
    """rename a to b, a new file a, fsync a: the old inode must not be lost (seq-2; btrfs logs the
    inode that had the name)."""
    @staticmethod
    def baseline(r):
        _two_dirs(r)
        r.write("d/a", data_of(31, 5000))

    @staticmethod
    def action(r):
        r.rename("d/a", "d/b")
        r.write("d/a", data_of(32, 2000))
        r.fsync("d/a")
        r.promise("d/a")


@workload("unlink_then_create_same_name", logs=True)
class UnlinkThenCreate:
    """unlink a, a new file a, fsync it: the new inode under the name."""
    @staticmethod
    def baseline(r):
        _two_dirs(r)
        r.write("d/a", data_of(33, 5000))

    @staticmethod
    def action(r):
        r.unlink("d/a")
        r.write("d/a", data_of(34, 3000))
        r.fsync("d/a")
        r.promise("d/a")


@workload("exchange_fsync")
class ExchangeFsync:
    """renameat2 RENAME_EXCHANGE of two files, fsync of one of them."""
    @staticmethod
    def baseline(r):
        _two_dirs(r)
        r.write("d/x", data_of(35, 5000))
        r.write("e/y", data_of(36, 7000))

    @staticmethod
    def action(r):
        r.exchange("d/x", "e/y")
        r.fsync("d/x")
        r.promise("d/x")


@workload("move_out_fsync_dir", logs=True)
class MoveOutFsyncDir:
    """a file moved out of a directory, fsync of that directory: the file is not lost."""
    @staticmethod
    def baseline(r):
        _two_dirs(r)
        r.write("d/f", data_of(37, 5000))

    @staticmethod
    def action(r):
        r.rename("d/f", "e/f")
        r.fsync("d")
        r.promise_gone("d/f")


@workload("rename_then_mkdir_old_name", logs=True)
class RenameThenMkdir:
    """rename a file, a directory under its old name, fsync of the directory (a replay conflict the
    kernel once failed to mount)."""
    @staticmethod
    def baseline(r):
        _two_dirs(r)
        r.write("d/a", data_of(38, 5000))

    @staticmethod
    def action(r):
        r.rename("d/a", "d/b")
        r.mkdir("d/a")
        r.fsync("d/a")
        r.promise("d/a", keys=("type", "mode"))


@workload("hardlink_in_new_dir", logs=True)
class HardlinkInNewDir:
    """a hard link in a new directory, fsync of the file."""
    @staticmethod
    def baseline(r):
        _two_dirs(r)
        r.write("d/a", data_of(39, 5000))

    @staticmethod
    def action(r):
        r.mkdir("e/nd")
        r.link("d/a", "e/nd/l")
        r.fsync("d/a")
        r.promise("d/a", keys=("type", "size", "sha256"))


@workload("fsync_file_then_dir", logs=True)
class FsyncFileThenDir:
    """several new files, each fsynced, then their directory: one log, growing."""
    @staticmethod
    def baseline(r):
        _two_dirs(r)

    @staticmethod
    def action(r):
        for i in range(6):
            r.write("d/n%d" % i, data_of(40 + i, 1000 * (i + 1)))
            r.fsync("d/n%d" % i)
        r.unlink("d/old0")
        r.fsync("d")
        for i in range(6):
            r.promise("d/n%d" % i)
        r.promise_gone("d/old0")


@workload("subvolume_fsync", logs=True)
class SubvolumeFsync:
    """fsyncs in two subvolumes: a log tree for each."""
    @staticmethod
    def baseline(r):
        _two_dirs(r)
        r.subvolume("sv")
        r.write("sv/a", data_of(47, 8000))

    @staticmethod
    def action(r):
        r.write("sv/a", data_of(48, 3000), off=8000, create=False)
        r.write("sv/b", data_of(49, 2000))
        r.fsync("sv/b")
        r.fsync("sv/a")
        r.write("d/old1", data_of(50, 100), off=0, create=False)
        r.fsync("d/old1")
        r.promise("sv/a")
        r.promise("sv/b")
        r.promise("d/old1")


@workload("fsync_dir_then_entry_leaves", logs=True)
class FsyncDirThenEntryLeaves:
    """a directory fsynced with a new entry, the entry then moved out and fsynced there: the replay
    keeps the directory's committed size and counts the entries it adds and drops (the kernel's
    replay never takes a logged directory's size), so the size matches its entries."""
    @staticmethod
    def baseline(r):
        _two_dirs(r)

    @staticmethod
    def action(r):
        r.write("d/n", data_of(51, 3000))
        r.fsync("d/n")
        r.fsync("d")
        r.rename("d/n", "e/n")
        r.fsync("e/n")
        r.promise("e/n")
        r.promise_gone("d/n")
        r.promise("d", keys=("type", "mode", "size"))


@workload("nested_new_dirs_fsync_file", logs=True)
class NestedNewDirsFsyncFile:
    """a file two new directories deep, fsync of the file: both directories come with it (the
    kernel logs the new ancestors), their other entries do not."""
    @staticmethod
    def baseline(r):
        _two_dirs(r)

    @staticmethod
    def action(r):
        r.mkdir("d/a")
        r.mkdir("d/a/b")
        r.write("d/a/other", data_of(52, 100))
        r.write("d/a/b/f", data_of(53, 9000))
        r.fsync("d/a/b/f")
        r.promise("d/a/b/f")


@workload("new_dir_tree_fsync_dir", logs=True)
class NewDirTreeFsyncDir:
    """a new directory with files, a symlink and a new subdirectory with a file, fsync of the new
    directory: every entry comes back; the kernel logs the new files as existing only (empty), ubtrfs
    logs them whole."""
    @staticmethod
    def baseline(r):
        _two_dirs(r)

    @staticmethod
    def action(r):
        r.mkdir("d/new")
        r.write("d/new/f", data_of(54, 5000))
        r.write("d/new/g", data_of(55, 70))
        os.symlink("f", r.p("d/new/s"))
        r.mkdir("d/new/sub")
        r.write("d/new/sub/h", data_of(56, 3000))
        r.fsync("d/new")
        for p in ("d/new", "d/new/sub"):
            r.promise(p, keys=("type", "mode"))
        r.promise("d/new/s", keys=("type", "target"))
        r.promise("d/new/f", keys=("type", "mode"))

    more = {p: "logged whole, the kernel logs that it exists (empty)" for p in ("d/new/f", "d/new/g", "d/new/sub/h")}


@workload("new_dir_renamed_after_fsync", logs=True)
class NewDirRenamedAfterFsync:
    """a file in a new directory fsynced, the directory then renamed, another file fsynced: the
    directory's name in the log follows the rename (it is logged again)."""
    @staticmethod
    def baseline(r):
        _two_dirs(r)

    @staticmethod
    def action(r):
        r.mkdir("d/new")
        r.write("d/new/f", data_of(57, 4000))
        r.fsync("d/new/f")
        r.rename("d/new", "e/moved")
        r.write("d/old0", data_of(58, 10), off=0, create=False)
        r.fsync("d/old0")
        r.promise("d/old0")
        r.promise_data("e/moved/f")


@workload("rename_over_link_fsync_other_name", logs=True)
class RenameOverLinkFsyncOtherName:
    """a file of two names loses one to a rename over it, then fsync through its other name: the
    replay drops its lost name and must give the name to the renamed file (rename(2) replaces it
    atomically: the name never disappears)."""
    @staticmethod
    def baseline(r):
        _two_dirs(r)
        r.write("d/a", data_of(59, 6000))
        r.link("d/a", "d/b")
        r.write("e/c", data_of(60, 2500))

    @staticmethod
    def action(r):
        r.rename("e/c", "d/b")
        r.fsync("d/a")
        r.promise("d/a", keys=("type", "size", "sha256", "nlink"))

    # the kernel (6.18) logs d/a's lost name only: its replay has neither file under d/b, and c back
    # under e/c. ubtrfs logs the entry that replaced the name too, so c comes back as d/b, where
    # the live filesystem had it
    more = {"d/b": "the name replaced by a rename: the kernel's replay loses it",
            "e/c": "renamed to d/b, whose entry ubtrfs logs",
            "d": "the size of its entries as live", "e": "the size of its entries as live"}
    # rename atomicity, which ubtrfs keeps where the kernel does not: the name is there after the crash
    ubtrfs_keeps = ("d/b",)


@workload("new_file_in_moved_dir_fsync", logs=True)
class NewFileInMovedDirFsync:
    """a committed directory renamed, a new file in it fsynced: the file's name is promised in its
    directory, not the directory's new name (the kernel keeps the old path)."""
    @staticmethod
    def baseline(r):
        _two_dirs(r)
        r.mkdir("d/sub")

    @staticmethod
    def action(r):
        r.rename("d/sub", "e/sub2")
        r.write("e/sub2/f", data_of(61, 7000))
        r.fsync("e/sub2/f")
        r.promise_data("e/sub2/f")


@workload("rename_over_twice_fsync", logs=True)
class RenameOverTwiceFsync:
    """a name replaced twice by renames after one of its owners was logged, then fsync of something
    else: the name stays (it goes to the last file renamed over it)."""
    @staticmethod
    def baseline(r):
        _two_dirs(r)
        r.write("d/x", data_of(62, 1000))
        r.write("e/y", data_of(63, 2000))
        r.write("e/z", data_of(64, 3000))

    @staticmethod
    def action(r):
        r.rename("e/y", "d/x")
        r.fsync("d/x")
        r.rename("e/z", "d/x")
        r.write("d/old0", data_of(65, 10), off=0, create=False)
        r.fsync("d/old0")
        r.promise("d/old0")

    ubtrfs_keeps = ("d/x",)


@workload("new_dir_emptied_after_fsync", logs=True)
class NewDirEmptiedAfterFsync:
    """a new directory fsynced with a file in it, the file then moved out and fsynced: the replay
    makes the new directory empty, of size 0 (the kernel's replay starts a new directory at 0 and
    counts the entries it gives it, never the logged size)."""
    @staticmethod
    def baseline(r):
        _two_dirs(r)

    @staticmethod
    def action(r):
        r.mkdir("d/new")
        r.write("d/new/f", data_of(66, 3000))
        r.fsync("d/new")
        r.rename("d/new/f", "e/f")
        r.fsync("e/f")
        r.promise("e/f")
        r.promise("d/new", keys=("type", "mode", "size"))


@workload("fsync_unlinked_open_file", logs=True)
class FsyncUnlinkedOpenFile:
    """a committed file unlinked while open, written and fsynced through its descriptor (nothing to
    make durable: the crash takes it), then another file fsynced: no commit for the orphan."""
    @staticmethod
    def baseline(r):
        _two_dirs(r)
        r.write("d/gone", data_of(72, 5000))

    @staticmethod
    def action(r):
        fd = os.open(r.p("d/gone"), os.O_RDWR)
        r.fds.append(fd)
        r.unlink("d/gone")
        os.pwrite(fd, data_of(73, 3000), 1000)
        r.fsync_fd(fd)
        r.write("e/old0", data_of(74, 100), off=0, create=False)
        r.fsync("e/old0")
        r.promise("e/old0")
        r.promise_gone("d/gone")


@workload("link_unlink_original_fsync_link", logs=True)
class LinkUnlinkOriginalFsyncLink:
    """link foo bar; unlink foo; fsync bar (seq-2): bar alone, with foo's bytes and one link."""
    @staticmethod
    def baseline(r):
        _two_dirs(r)
        r.write("d/foo", data_of(75, 9000))

    @staticmethod
    def action(r):
        r.link("d/foo", "e/bar")
        r.unlink("d/foo")
        r.fsync("e/bar")
        r.promise("e/bar", keys=("type", "size", "sha256", "nlink"))
        r.promise_gone("d/foo")


@workload("rmdir_fsync_parent", logs=True)
class RmdirFsyncParent:
    """an empty committed directory removed, fsync of its parent: it stays removed."""
    @staticmethod
    def baseline(r):
        _two_dirs(r)
        r.mkdir("d/empty")

    @staticmethod
    def action(r):
        os.rmdir(r.p("d/empty"))
        r.fsync("d")
        r.promise_gone("d/empty")


@workload("rename_dir_over_empty_dir_fsync", logs=True)
class RenameDirOverEmptyDir:
    """a directory renamed over an empty one, fsync of the parent (seq-2)."""
    @staticmethod
    def baseline(r):
        _two_dirs(r)
        r.mkdir("d/src")
        r.write("d/src/f", data_of(76, 2000))
        r.mkdir("d/dst")

    @staticmethod
    def action(r):
        r.rename("d/src", "d/dst")
        r.fsync("d")
        r.promise("d/dst", keys=("type",))
        r.promise_gone("d/src")


@workload("truncate_zero_write_fdatasync", logs=True)
class TruncateZeroWriteFdatasync:
    """truncate to 0, write new bytes, fdatasync (the old extents must not come back)."""
    @staticmethod
    def baseline(r):
        _two_dirs(r)
        r.write("d/a", data_of(77, 100000))

    @staticmethod
    def action(r):
        r.truncate("d/a", 0)
        r.write("d/a", data_of(78, 20000), off=0, create=False)
        r.fsync("d/a", datasync=True)
        r.promise("d/a", keys=("type", "size", "sha256", "blocks"))


@workload("write_fsync_punch_fdatasync", logs=True)
class WriteFsyncPunchFdatasync:
    """write, fsync, punch, fdatasync in one transaction (seq-2)."""
    @staticmethod
    def baseline(r):
        _two_dirs(r)
        r.write("d/a", data_of(79, 50000))

    @staticmethod
    def action(r):
        r.write("d/a", data_of(80, 40000), off=60000, create=False)
        r.fsync("d/a")
        r.fallocate("d/a", 70000, 20000, T.FALLOC_FL_PUNCH_HOLE | T.FALLOC_FL_KEEP_SIZE)
        r.fsync("d/a", datasync=True)
        r.promise("d/a", keys=("type", "size", "sha256", "blocks"))


@workload("dir_xattr_fsync", logs=True)
class DirXattrFsync:
    """an xattr set on a directory, fsync of the directory."""
    @staticmethod
    def baseline(r):
        _two_dirs(r)

    @staticmethod
    def action(r):
        r.setxattr("d", "user.dirattr", b"on the directory")
        r.fsync("d")
        r.promise("d", keys=("type", "mode", "xattrs"))


@workload("new_dir_renamed_fsync", logs=True)
class NewDirRenamedFsync:
    """mkdir, rename the new directory, fsync it under its new name."""
    @staticmethod
    def baseline(r):
        _two_dirs(r)

    @staticmethod
    def action(r):
        r.mkdir("d/n1")
        r.write("d/n1/f", data_of(81, 500))
        r.rename("d/n1", "e/n2")
        r.fsync("e/n2")
        r.promise("e/n2", keys=("type", "mode"))
        r.promise_gone("d/n1")

    more = {"e/n2/f": "logged whole, the kernel logs that it exists (empty)"}


@workload("symlink_replaced_fsync_dir", logs=True)
class SymlinkReplacedFsyncDir:
    """a file renamed over a symlink, fsync of the directory."""
    @staticmethod
    def baseline(r):
        _two_dirs(r)
        os.symlink("old0", r.p("d/s"))
        r.write("d/f", data_of(82, 700))

    @staticmethod
    def action(r):
        r.rename("d/f", "d/s")
        r.fsync("d")
        r.promise("d/s", keys=("type", "size", "sha256"))
        r.promise_gone("d/f")


@workload("dir_swap_nesting_fsync")
class DirSwapNestingFsync:
    """a/x/b becomes b, then a moves into b (their nesting swapped), fsync of b/a: logged alone,
    a's move would put a into b while b is still a's grandchild at the last commit (a cycle the
    replay must never build: b's move is in x, which nothing logs). ubtrfs commits there."""
    @staticmethod
    def baseline(r):
        _two_dirs(r)
        r.mkdir("d/a")
        r.mkdir("d/a/x")
        r.mkdir("d/a/x/b")
        r.write("d/a/f", data_of(83, 900))

    @staticmethod
    def action(r):
        r.rename("d/a/x/b", "d/b")
        r.rename("d/a", "d/b/a")
        r.fsync("d/b/a")
        r.promise("d/b/a", keys=("type", "mode"))
        r.promise("d/b/a/f")


@workload("new_dir_in_moved_dir_fsync", logs=True)
class NewDirInMovedDirFsync:
    """a committed directory moved, a new directory made in it with a file, fsync of the file: the
    new directory goes in as its parent (it was nobody's ancestor at the last commit: no cycle)."""
    @staticmethod
    def baseline(r):
        _two_dirs(r)
        r.mkdir("d/m")

    @staticmethod
    def action(r):
        r.rename("d/m", "e/m")
        r.mkdir("e/m/n")
        r.write("e/m/n/f", data_of(84, 1200))
        r.fsync("e/m/n/f")
        r.promise_data("e/m/n/f")


# ---------------------------------------------------------------------------------------------
# running a workload on each side

class Side:
    """One side's crash image and what its run said (live: ubtrfs's view of the live filesystem
    right before the crash)."""

    def __init__(self, images, run, live=None):
        self.images = images
        self.run = run
        self.live = live
        self.base = None

    @property
    def commits(self):
        return self.run.commits


# devices and mkfs.btrfs options of each layout the workloads run on
LAYOUTS = {"single": (1, ()), "raid5": (3, ("-d", "raid5", "-m", "raid1")),
           "raid6": (4, ("-d", "raid6", "-m", "raid1c3")), "raid5-meta": (3, ("-d", "raid5", "-m", "raid5"))}
# metadata striped with parity: ubtrfs commits instead of logging (docs/fsync-log.md: the commit would
# write this transaction's tree blocks into stripes the log's blocks share)
PARITY_META = ("raid5-meta",)


def images(d, prefix, layout):
    return [d / ("%s%d.img" % (prefix, i)) for i in range(LAYOUTS[layout][0])]


def mkfs(imgs, layout):
    for img in imgs:
        with open(img, "wb") as f:
            f.truncate(IMG_SIZE)
    T.run(["mkfs.btrfs", "-q", "-f", *LAYOUTS[layout][1], *[str(i) for i in imgs]])


def copies(imgs, d, prefix):
    out = []
    for i, img in enumerate(imgs):
        out.append(d / ("%s%d.img" % (prefix, i)))
        T.copy_sparse(img, out[-1])
    return out


def unlink_all(imgs):
    for img in imgs:
        os.unlink(img)


def run_kernel(wl, d, layout, force=(), tries=3):
    """The workload on the kernel's btrfs; the crash image is a quiet copy taken while mounted."""
    imgs, crash = images(d, "k-live", layout), images(d, "k-crash", layout)
    for attempt in range(tries):
        mkfs(imgs, layout)
        with T.mounted(imgs, d / "kmnt", options="commit=300", readonly=False) as m:
            r = Run(m, imgs[0], force)
            wl.baseline(r)
            r.sync()
            r.gen, _ = super_state(imgs[0])
            try:
                wl.action(r)
            finally:
                r.close()
            quiet = T.copy_quiet(imgs, crash) is not None
        unlink_all(imgs)
        if quiet or attempt + 1 == tries:
            assert quiet, "%s: no quiet copy of the kernel's image in %d tries" % (wl.name, tries)
            return Side(crash, r)
        unlink_all(crash)


def run_ubtrfs(ubtrfs_bin, wl, d, layout, force=()):
    """The workload on `ubtrfs mount`; the daemon is killed right after the last fsync."""
    imgs = images(d, "u-crash", layout)
    mkfs(imgs, layout)
    mnt = d / "umnt"
    proc, errf = start_daemon(ubtrfs_bin, imgs, mnt, "rw,commit=600,noatime")
    try:
        r = Run(mnt, imgs[0], force, ubtrfs_bin)
        wl.baseline(r)
        r.sync()
        r.gen, _ = super_state(imgs[0])
        try:
            wl.action(r)
        finally:
            r.close()
        live = view_of(mnt, fuse=True)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        take_away(mnt)
    errf.seek(0)
    err = errf.read().decode("utf-8", "replace")
    bad = [ln for ln in err.splitlines() if "Sanitizer" in ln or "runtime error" in ln or ": error:" in ln]
    assert not bad, "%s: the ubtrfs mount logged errors:\n%s" % (wl.name, err[-3000:])
    return Side(imgs, r, live)


def replayed_by_kernel(imgs, d, name):
    """The kernel's replay of a copy: its view; the copy is kept (for btrfs check) as d/name*."""
    cp = copies(imgs, d, name)
    with T.mounted(cp, d / "rmnt", options="noatime", readonly=False) as m:
        v = view_of(m)
    gen, log_root = super_state(cp[0])
    assert log_root == 0, "the kernel's mount left log_root %d" % log_root
    return v, cp


def replayed_view(imgs, d, name):
    v, cp = replayed_by_kernel(imgs, d, name)
    unlink_all(cp)
    return v


def judge_ubtrfs(ubtrfs_bin, d, u, name):
    """ubtrfs's crash image: btrfs check with the log pending, the kernel's replay (its view,
    returned), the promise on it, ubtrfs's replays in memory and into the trees equal to it, btrfs
    check after each replay. u.base: the last commit as the kernel shows it (nologreplay)."""
    _, log_root = super_state(u.images[0])
    assert log_root != 0 or u.run.nfsync in u.commits, "%s: ubtrfs's last fsync neither logged nor committed" % name
    progs_check(u.images, "of ubtrfs's crash image with the log pending")
    u.base = kernel_ro_view(u.images, d)
    uview, ucopy = replayed_by_kernel(u.images, d, "u-kreplayed")
    progs_check(ucopy, "after the kernel's replay of ubtrfs's log")
    unlink_all(ucopy)
    problems = broken_promises(u.run, uview)
    assert not problems, "%s: after the kernel's replay of ubtrfs's log, fsync's promise is broken:\n  %s" % (
        name, "\n  ".join(problems))
    # ubtrfs's replays: in memory (read-only mount), into the trees (read-write mount, then the kernel)
    with fuse_mounted(ubtrfs_bin, u.images, d / "umem", "ro") as m:
        mview = view_of(m, fuse=True)
    problems = differences(uview, mview, keys=KEYS + ("sha256", "target"))
    assert not problems, "%s: ubtrfs's in-memory replay differs from the kernel's:\n  %s" % (
        name, "\n  ".join(problems))
    wimg = copies(u.images, d, "u-replayed")
    with fuse_mounted(ubtrfs_bin, wimg, d / "urw", "rw,noatime") as m:
        wview = view_of(m, fuse=True)
    problems = differences(uview, wview, keys=KEYS + ("sha256", "target"))
    assert not problems, "%s: ubtrfs's read-write mount after its replay differs from the kernel's replay:\n  %s" % (
        name, "\n  ".join(problems))
    assert super_state(wimg[0])[1] == 0, "%s: ubtrfs's read-write mount left the log pending" % name
    progs_check(wimg, "after ubtrfs's replay into the trees")
    problems = differences(uview, kernel_ro_view(wimg, d))
    assert not problems, "%s: the kernel's view after ubtrfs's replay differs:\n  %s" % (name, "\n  ".join(problems))
    unlink_all(wimg)
    return uview


def invented(view, base, live):
    """What a replay shows that neither the last commit (base) nor the live filesystem had: a path
    in neither, or a file whose bytes its inode had in neither (half-written)."""
    out = []
    for p, e in sorted(view.items()):
        if p not in base and p not in live:
            out.append("%r: in neither the last commit nor the live filesystem" % p)
        if e["type"] == "file":
            had = [v for v in list(base.values()) + list(live.values()) if v["ino"] == e["ino"]]
            if not any(v.get("sha256") == e["sha256"] and v["size"] == e["size"] for v in had):
                out.append("%r: inode %d holds bytes it never had (%d bytes)" % (p, e["ino"], e["size"]))
    return out


def kernel_ro_view(imgs, d):
    with T.mounted(imgs, d / "romnt", readonly=True) as m:
        return view_of(m)


def progs_check(imgs, what):
    try:
        enospc_check(imgs)
    except AssertionError as e:
        raise AssertionError("btrfs check %s: %s" % (what, e))


def differences(want, got, keys=None, limit=20):
    out = ["missing %r" % p for p in sorted(set(want) - set(got))]
    out += ["unexpected %r" % p for p in sorted(set(got) - set(want))]
    for p in sorted(set(want) & set(got)):
        for k in sorted(set(want[p]) | set(got[p])):
            if keys is not None and k not in keys:
                continue
            if want[p].get(k) != got[p].get(k):
                out.append("%r: %s want %r got %r" % (p, k, want[p].get(k), got[p].get(k)))
    return out[:limit]


def broken_promises(run, view):
    out = []
    for rel, e, keys in run.promises:
        if rel is None:
            if not any(all(v.get(k) == e[k] for k in keys) for v in view.values()):
                out.append("inode %d: fsynced with %d bytes, no name shows them after the replay" % (
                    e["ino"], e["size"]))
            continue
        got = view.get(rel)
        if e is None:
            if got is not None:
                out.append("%r: gone at the fsync, back after the replay" % rel)
        elif got is None:
            out.append("%r: fsynced, missing after the replay" % rel)
        else:
            out += ["%r: %s fsynced %r, replayed %r" % (rel, k, e.get(k), got.get(k)) for k in keys
                    if e.get(k) != got.get(k)]
    return out


@pytest.fixture
def wdir(scratch, request):
    d = Path(scratch) / ("fsyncbug-" + request.node.name.replace("[", "-").replace("]", ""))
    d.mkdir(parents=True, exist_ok=True)
    yield d
    L.remove_workdir(d)


# every workload on one device; on RAID5 and RAID6 data (metadata mirrored: the log's blocks are not
# striped with parity) those that write data, so the log's data stripes are closed at each sync
RAID_CASES = ("rename_fsync", "new_file_fsync", "punch_fsync", "append_fsync_twice", "link_fsync",
              "mkdir_file_fsync", "fsync_file_then_dir", "truncate_fsync", "subvolume_fsync")
CASES = [(n, "single") for n in WORKLOADS] + [(n, lay) for lay in ("raid5", "raid6") for n in RAID_CASES] + \
    [(n, "raid5-meta") for n in ("rename_fsync", "append_fsync_twice")]


@pytest.mark.parametrize("name,layout", CASES)
def test_fsync_bug_workload(ubtrfs_bin, wdir, name, layout):
    wl = WORKLOADS[name]
    u = run_ubtrfs(ubtrfs_bin, wl, wdir, layout)
    uview = judge_ubtrfs(ubtrfs_bin, wdir, u, name)
    for p in getattr(wl, "ubtrfs_keeps", ()):
        keys = ("type", "ino", "size", "sha256")
        assert p in uview and all(uview[p].get(k) == u.live[p].get(k) for k in keys), \
            "%s: %s is not as the live filesystem had it after the replay of ubtrfs's log" % (name, p)
    if layout in PARITY_META:
        assert u.run.fallbacks == list(range(1, u.run.nfsync + 1)), \
            "%s: fsyncs on RAID5 metadata must commit; committed: %r" % (name, u.run.fallbacks)
    elif wl.ubtrfs_logs:
        # docs/fsync-log.md: what the log says since it follows the kernel here
        assert not u.run.fallbacks, "%s: ubtrfs's fsyncs %r committed where the log can say it" % (
            name, u.run.fallbacks)
    k = run_kernel(wl, wdir, layout)
    note = ""
    if set(k.commits) - set(u.commits):
        # the kernel committed where ubtrfs logged: its result is the whole live tree at that fsync,
        # ubtrfs's may only be less; it must keep what fsync promised (judge_ubtrfs) and nothing
        # that was never there
        note = "; the kernel committed at fsyncs %r where ubtrfs logged" % sorted(set(k.commits) - set(u.commits))
        kview = replayed_view(k.images, wdir, "k-replayed")
        assert not broken_promises(k.run, kview), "%s: the kernel itself breaks the promise: %r" % (
            name, broken_promises(k.run, kview))
        problems = invented(uview, u.base, u.live)
        assert not problems, "%s: the kernel's replay of ubtrfs's log shows what neither the last commit nor " \
            "the live filesystem had:\n  %s" % (name, "\n  ".join(problems))
    else:
        if set(u.commits) - set(k.commits):
            # ubtrfs fell back to a commit where the kernel logged (docs/fsync-log.md says where): the
            # kernel's run with commits at the same fsyncs is the oracle, and ubtrfs keeps more than the
            # kernel's log would have
            note = "; ubtrfs committed at fsyncs %r where the kernel logged" % sorted(set(u.commits) - set(k.commits))
            unlink_all(k.images)
            k = run_kernel(wl, wdir, layout, force=set(u.commits) - set(k.commits))
            assert set(k.commits) == set(u.commits), "%s: commits differ: kernel %r ubtrfs %r" % (
                name, k.commits, u.commits)
        kview = replayed_view(k.images, wdir, "k-replayed")
        assert not broken_promises(k.run, kview), "%s: the kernel itself breaks the promise: %r" % (
            name, broken_promises(k.run, kview))
        want = dict(kview)
        for p, why in getattr(wl, "more", {}).items():
            # the allowed difference: ubtrfs's replay shows the path as it was live at the crash
            keys = ("type", "ino", "size", "sha256", "nlink")
            live = {k: u.live[p].get(k) for k in keys} if p in u.live else None
            mine = {k: uview[p].get(k) for k in keys} if p in uview else None
            if live == mine and kview.get(p) != uview.get(p):
                note += "; %s: %s" % (p, why)
                if p in uview:
                    want[p] = uview[p]
                else:
                    want.pop(p, None)
        problems = differences(want, uview)
        assert not problems, "%s: the kernel's replay of ubtrfs's log differs from its replay of its own " \
            "(commits at fsyncs %r):\n  %s" % (name, u.commits, "\n  ".join(problems))
    print("%s (%s): %d fsyncs, commits at %r%s" % (name, layout, u.run.nfsync, u.commits, note))


def test_raid5_log_closes_data_stripes(ubtrfs_bin, wdir):
    """RAID5 data, mirrored metadata: an fsync writes the log, and the data it made durable is in
    a stripe the running transaction opened. A later write of the same transaction must go to
    another full stripe: writing into the rest of that one would rewrite its parity, and a crash
    during that write with a device lost would take the fsynced data (the write hole)."""
    imgs = images(wdir, "r5-", "raid5")
    mkfs(imgs, "raid5")
    mnt = wdir / "umnt"
    proc, errf = start_daemon(ubtrfs_bin, imgs, mnt, "rw,commit=600,noatime")
    try:
        r = Run(mnt, imgs[0], (), ubtrfs_bin)
        r.mkdir("d")
        r.sync()
        r.gen, _ = super_state(imgs[0])
        r.write("d/a", data_of(70, 4096))
        r.fsync("d/a")
        r.write("d/b", data_of(71, 4096))
        r.fsync("d/b")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        take_away(mnt)
    assert not r.fallbacks, "the fsyncs %r committed: RAID5 data takes the log" % r.fallbacks
    cp = copies(imgs, wdir, "r5k")
    with T.mounted(cp, wdir / "rmnt", readonly=False) as m:
        where = {n: fiemap(os.path.join(m, "d", n)) for n in ("a", "b")}
    chunks = enospc_dump_tree(cp, "chunk")
    unlink_all(cp)
    start = [int(x.group(1)) for x in re.finditer(r"CHUNK_ITEM (\d+)\)[^\n]*\n\s*length \d+ owner \d+ stripe_len \d+ "
                                                  r"type DATA\|RAID5", chunks)]
    assert len(start) == 1, "one RAID5 data chunk expected: %r" % start
    full = (len(imgs) - 1) * 64 * 1024
    stripe = {n: (e[0][1] - start[0]) // full for n, e in where.items()}
    assert stripe["a"] != stripe["b"], "b written after a's fsync went into a's stripe %d (extents %r)" % (
        stripe["a"], where)
