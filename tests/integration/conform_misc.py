# SPDX-License-Identifier: MIT
"""Conformance cases: subvolume boundaries (EXDEV), directory streams, statfs, mmap, seeks."""

import ctypes
import mmap
import os
import stat

from conform import RENAME_EXCHANGE, case, libc, linkat, renameat2

G = "misc"
# the subvolume every image of the suite has at its top level (test_mount_conformance.py makes it)
SV = "../sv"


@case(group=G)
def exdev_across_subvolume(c):
    c.mkfile("f", b"x")
    os.mkdir("d")
    base = os.path.basename(os.getcwd())
    mine = os.path.join(SV, base)
    os.mkdir(mine)
    c.mkfile(os.path.join(mine, "g"), b"y")
    c.ok("rename file into subvolume", os.rename, "f", os.path.join(mine, "f"))
    c.ok("rename dir into subvolume", os.rename, "d", os.path.join(mine, "d"))
    c.ok("rename out of subvolume", os.rename, os.path.join(mine, "g"), "g")
    c.ok("link into subvolume", os.link, "f", os.path.join(mine, "l"))
    c.ok("exchange across", renameat2, "f", os.path.join(mine, "g"), RENAME_EXCHANGE)
    c.ok("rename over subvolume root", os.rename, "f", SV)
    c.ok("rmdir subvolume root", os.rmdir, SV)
    c.ok("unlink subvolume root", os.unlink, SV)
    c.val("listing", lambda: sorted(os.listdir(".")))
    c.val("subvolume listing", lambda: sorted(os.listdir(mine)))
    c.st("subvolume root", SV, fields=("mode", "uid", "gid"))


@case(group=G)
def rmdir_empty_subvolume(c):
    # the suite's images have an empty subvolume 'sv_empty' at the top: rmdir deletes it (btrfs_rmdir)
    c.ok("rmdir subvolume with entries", os.rmdir, SV)
    c.ok("unlink empty subvolume", os.unlink, "../sv_empty")
    c.ok("rmdir empty subvolume", os.rmdir, "../sv_empty")
    c.val("gone", os.path.lexists, "../sv_empty")
    c.ok("rmdir again", os.rmdir, "../sv_empty")


@case(group=G)
def copy_file_range_across_subvolume(c):
    c.mkfile("f", b"z" * 8192)
    base = os.path.basename(os.getcwd())
    mine = os.path.join(SV, base + "-cfr")
    os.mkdir(mine)
    c.mkfile(os.path.join(mine, "g"))
    fi = os.open("f", os.O_RDONLY)
    fo = os.open(os.path.join(mine, "g"), os.O_WRONLY)
    c.val("copy", os.copy_file_range, fi, fo, 8192, 0, 0)
    os.close(fi)
    os.close(fo)
    with open(os.path.join(mine, "g"), "rb") as f:
        c.rec("content", f.read() == b"z" * 8192)


class _Dirent(ctypes.Structure):
    _fields_ = [("ino", ctypes.c_ulong), ("off", ctypes.c_long), ("reclen", ctypes.c_ushort),
                ("type", ctypes.c_ubyte), ("name", ctypes.c_char * 256)]


libc.fdopendir.restype = ctypes.c_void_p
libc.readdir.restype = ctypes.c_void_p
libc.telldir.restype = ctypes.c_long


class DirStream:
    """opendir/readdir/rewinddir/seekdir through libc, as a C program walks a directory."""

    def __init__(self, path):
        self.dp = libc.fdopendir(os.open(path, os.O_RDONLY | os.O_DIRECTORY))

    def read_all(self):
        out = []
        while True:
            p = libc.readdir(ctypes.c_void_p(self.dp))
            if not p:
                return sorted(out)
            out.append(ctypes.cast(p, ctypes.POINTER(_Dirent)).contents.name.decode())

    def read_one(self):
        p = libc.readdir(ctypes.c_void_p(self.dp))
        return ctypes.cast(p, ctypes.POINTER(_Dirent)).contents.name.decode() if p else None

    def rewind(self):
        libc.rewinddir(ctypes.c_void_p(self.dp))

    def tell(self):
        return libc.telldir(ctypes.c_void_p(self.dp))

    def seek(self, pos):
        libc.seekdir(ctypes.c_void_p(self.dp), ctypes.c_long(pos))

    def close(self):
        libc.closedir(ctypes.c_void_p(self.dp))


@case(group=G)
def dir_stream_snapshot(c):
    os.mkdir("d")
    c.mkfile("d/a")
    ds = DirStream("d")
    c.mkfile("d/b")
    c.rec("first pass", ds.read_all())
    c.mkfile("d/c")
    c.rec("past the end", ds.read_all())
    ds.rewind()
    c.rec("after rewind", ds.read_all())
    os.unlink("d/a")
    ds.rewind()
    c.rec("after unlink", ds.read_all())
    ds.close()


@case(group=G)
def dir_stream_changes_midway(c):
    os.mkdir("d")
    for i in range(100):
        c.mkfile("d/f%03d" % i)
    ds = DirStream("d")
    seen = [ds.read_one() for _ in range(30)]
    for i in range(0, 100, 2):
        os.unlink("d/f%03d" % i)
    for i in range(100, 120):
        c.mkfile("d/f%03d" % i)
    rest = ds.read_all()
    c.rec("union", sorted(set(seen) | set(rest)))
    c.rec("count", len(seen) + len(rest))
    ds.close()


@case(group=G)
def dir_stream_seek(c):
    os.mkdir("d")
    for i in range(10):
        c.mkfile("d/f%d" % i)
    ds = DirStream("d")
    first = [ds.read_one() for _ in range(4)]
    pos = ds.tell()
    nxt = ds.read_one()
    ds.read_all()
    ds.seek(pos)
    c.rec("seek back", ds.read_one() == nxt)
    c.rec("order", first + [nxt])
    ds.close()


@case(group=G)
def readdir_types_and_inodes(c):
    c.mkfile("f")
    os.mkdir("d")
    os.symlink("f", "l")
    os.mkfifo("p")
    os.mknod("c", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    os.mknod("b", stat.S_IFBLK | 0o600, os.makedev(7, 1))
    os.mknod("s", stat.S_IFSOCK | 0o600)
    with os.scandir(".") as it:
        ents = sorted(it, key=lambda e: e.name)
    c.rec("types", [(e.name, e.is_file(follow_symlinks=False), e.is_dir(follow_symlinks=False),
                     e.is_symlink()) for e in ents])
    c.rec("inodes agree", all(e.inode() == os.lstat(e.name).st_ino for e in ents))


@case(group=G)
def statfs_fields(c):
    s = os.statvfs(".")
    c.rec("namemax", s.f_namemax)
    c.rec("bsize", s.f_bsize)
    c.rec("frsize", s.f_frsize)
    c.rec("flags ro", bool(s.f_flag & os.ST_RDONLY))


@case(group=G)
def mmap_shared_write_and_read(c):
    c.mkfile("f", b"\0" * 8192)
    fd = os.open("f", os.O_RDWR)
    m = mmap.mmap(fd, 8192)
    m[100:105] = b"hello"
    m[5000:5003] = b"abc"
    m.flush()
    m.close()
    c.val("pread", os.pread, fd, 5, 100)
    os.close(fd)
    with open("f", "rb") as f:
        data = f.read()
    c.rec("content", (data[100:105], data[5000:5003], len(data)))
    c.st_synced("f", "f")


@case(group=G)
def mmap_small_file(c):
    c.mkfile("f", b"short")
    fd = os.open("f", os.O_RDWR)
    m = mmap.mmap(fd, 5)
    c.rec("mapped", m[:])
    m[0:2] = b"XY"
    m.flush()
    m.close()
    os.close(fd)
    with open("f", "rb") as f:
        c.rec("content", f.read())
    c.st("f", "f")


@case(group=G)
def seek_data_hole(c):
    from conform import fallocate
    fd = os.open("f", os.O_CREAT | os.O_RDWR, 0o644)
    os.pwrite(fd, b"a" * 4096, 0)
    os.pwrite(fd, b"b" * 4096, 65536)
    fallocate(fd, 1, 131072, 4096)
    os.ftruncate(fd, 200000)
    for off in (0, 100, 4096, 5000, 65536, 70000, 131072, 199999, 200000, 300000):
        c.val("data %d" % off, os.lseek, fd, off, os.SEEK_DATA)
        c.val("hole %d" % off, os.lseek, fd, off, os.SEEK_HOLE)
    os.close(fd)


@case(group=G)
def direct_io_roundtrip(c):
    fd = os.open("f", os.O_CREAT | os.O_RDWR | os.O_DIRECT, 0o644)
    buf = mmap.mmap(-1, 8192)
    buf.write(b"d" * 8192)
    c.val("direct write", os.pwrite, fd, buf, 4096)
    c.ok("unaligned direct write", os.pwrite, fd, b"x" * 10, 3)
    rb = mmap.mmap(-1, 8192)
    c.val("direct read", os.preadv, fd, [rb], 4096)
    c.rec("same", rb[:] == buf[:])
    c.st_synced("f", fd=fd)
    os.close(fd)


@case(group=G)
def fsync_variants(c):
    c.mkfile("f", b"x")
    fd = os.open("f", os.O_RDONLY)
    c.ok("fsync rdonly", os.fsync, fd)
    c.ok("fdatasync", os.fdatasync, fd)
    os.close(fd)
    dfd = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
    c.ok("fsync dir", os.fsync, dfd)
    os.close(dfd)
    c.ok("sync", os.sync)
    c.ok("syncfs", lambda: libc.syncfs(os.open(".", os.O_RDONLY)) and None)


@case(group=G)
def linkat_tmp_dir_fd(c):
    os.mkdir("a")
    os.mkdir("b")
    c.mkfile("a/f")
    da = os.open("a", os.O_RDONLY)
    db = os.open("b", os.O_RDONLY)
    c.ok("linkat between dirfds", linkat, "f", "g", 0, da, db)
    c.ok("renameat2 between dirfds", renameat2, "f", "h", 0, da, db)
    os.close(da)
    os.close(db)
    c.val("a", lambda: sorted(os.listdir("a")))
    c.val("b", lambda: sorted(os.listdir("b")))
    c.st("b/g", "b/g")
