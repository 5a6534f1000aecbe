# SPDX-License-Identifier: MIT
"""Conformance cases: names, paths, open flags, links, mknod, symlinks, O_TMPFILE."""

import os
import stat

from conform import (AT_EMPTY_PATH, AT_SYMLINK_FOLLOW, AT_SYMLINK_NOFOLLOW, O_TMPFILE, Ctx, add, case,
                     fchmodat, linkat, mknodat, readlinkat_empty)

G = "names"
N255 = "n" * 255
N256 = "n" * 256


def _rw(c, label, path, data=b"x"):
    fd = c.open(label + " open", path, os.O_RDWR)
    if fd is not None:
        c.val(label + " write", os.write, fd, data)
        os.close(fd)


# ---------------------------------------------------------------------------- name lengths

def _name_cases():
    """Every call that takes a name, with a 255-byte name (fine) and a 256-byte one."""
    calls = {
        "creat": lambda c, n: c.ok("creat", lambda: os.close(os.open(n, os.O_CREAT | os.O_WRONLY, 0o644))),
        "mkdir": lambda c, n: c.ok("mkdir", os.mkdir, n),
        "mknod": lambda c, n: c.ok("mknod", os.mknod, n, stat.S_IFIFO | 0o644),
        "symlink": lambda c, n: c.ok("symlink", os.symlink, "target", n),
        "link": lambda c, n: (c.mkfile("src"), c.ok("link", os.link, "src", n)),
        "rename_to": lambda c, n: (c.mkfile("src"), c.ok("rename", os.rename, "src", n)),
        "rename_from": lambda c, n: c.ok("rename", os.rename, n, "dst"),
        "unlink": lambda c, n: c.ok("unlink", os.unlink, n),
        "rmdir": lambda c, n: c.ok("rmdir", os.rmdir, n),
        "stat": lambda c, n: c.st("stat", n),
        "open": lambda c, n: c.ok("open", os.open, n, os.O_RDONLY),
        "chmod": lambda c, n: c.ok("chmod", os.chmod, n, 0o600),
        "truncate": lambda c, n: c.ok("truncate", os.truncate, n, 0),
        "setxattr": lambda c, n: c.ok("setxattr", os.setxattr, "f", "user." + n[5:], b"v"),
    }
    for cname, call in calls.items():
        for size, name in ((255, N255), (256, N256)):
            def fn(c, call=call, name=name, cname=cname):
                if cname in ("rename_from", "unlink", "stat", "open", "chmod", "truncate"):
                    if len(name) <= 255:
                        c.mkfile(name)
                if cname == "rmdir" and len(name) <= 255:
                    os.mkdir(name)
                if cname == "setxattr":
                    c.mkfile("f")
                call(c, name)
                c.val("listing", lambda: sorted(os.listdir(".")))
            add("%s.%s_%d" % (G, cname, size), fn)


_name_cases()


@case(group=G)
def component_too_long_in_path(c):
    os.mkdir("d")
    c.ok("stat", os.stat, N256 + "/x")
    c.ok("creat", os.open, "d/" + N256 + "/x", os.O_CREAT | os.O_WRONLY)


@case(group=G)
def path_max(c):
    # a path of 4096 bytes or more is refused by the system call itself
    c.ok("stat 4095", os.stat, "./" + "/" * 4093)
    c.ok("stat 4096", os.stat, "./" + "/" * 4094)


@case(group=G)
def long_path_by_openat(c):
    """A tree deeper than PATH_MAX, built and read through openat chains."""
    comp = "d" * 200
    fds = [os.open(".", os.O_RDONLY | os.O_DIRECTORY)]
    for i in range(25):  # 25 * 201 bytes: past 4096
        c.ok("mkdir %d" % i, os.mkdir, comp, 0o755, dir_fd=fds[-1])
        fds.append(os.open(comp, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fds[-1]))
    fd = c.open("create deep", "leaf", os.O_CREAT | os.O_RDWR, 0o640, dirfd=fds[-1])
    if fd is not None:
        c.val("write", os.write, fd, b"deep data")
        os.close(fd)
    c.rec("fstatat", Ctx.stat_tuple(os.stat("leaf", dir_fd=fds[-1]), ("mode", "nlink", "size")))
    c.ok("stat by the long path", os.stat, "/".join([comp] * 25) + "/leaf")
    c.ok("rename deep", os.rename, "leaf", "leaf2", src_dir_fd=fds[-1], dst_dir_fd=fds[-1])
    c.val("listdir deep", lambda: os.listdir(fds[-1]))
    c.ok("unlink deep", os.unlink, "leaf2", dir_fd=fds[-1])
    for i in range(25, 0, -1):
        os.close(fds[i])
        c.ok("rmdir %d" % i, os.rmdir, comp, dir_fd=fds[i - 1])
    os.close(fds[0])


# ---------------------------------------------------------------------------- EEXIST, ENOTDIR, EISDIR, ENOENT

@case(group=G)
def exists_for_every_create(c):
    c.mkfile("f")
    os.mkdir("d")
    os.symlink("nowhere", "dangling")
    for name in ("f", "d", "dangling"):
        c.ok("mkdir %s" % name, os.mkdir, name)
        c.ok("mknod %s" % name, os.mknod, name, stat.S_IFIFO | 0o600)
        c.ok("symlink %s" % name, os.symlink, "x", name)
        c.ok("link %s" % name, os.link, "f", name)
        c.ok("creat excl %s" % name, os.open, name, os.O_CREAT | os.O_EXCL | os.O_WRONLY)


@case(group=G)
def notdir_in_path(c):
    c.mkfile("f")
    for what, fn in (("stat", lambda: os.stat("f/x")), ("mkdir", lambda: os.mkdir("f/x")),
                     ("creat", lambda: os.open("f/x", os.O_CREAT | os.O_WRONLY)),
                     ("unlink", lambda: os.unlink("f/x")), ("rmdir", lambda: os.rmdir("f/x")),
                     ("rename", lambda: os.rename("f/x", "y")), ("rename to", lambda: os.rename("f", "f/y")),
                     ("symlink", lambda: os.symlink("t", "f/x")), ("link", lambda: os.link("f", "f/x")),
                     ("chmod", lambda: os.chmod("f/x", 0o600)), ("open dir slash", lambda: os.open("f/", os.O_RDONLY)),
                     ("opendir", lambda: os.open("f", os.O_RDONLY | os.O_DIRECTORY)),
                     ("rmdir file", lambda: os.rmdir("f")), ("chdir", lambda: os.listdir("f"))):
        c.ok(what, fn)


@case(group=G)
def isdir_cases(c):
    os.mkdir("d")
    c.ok("unlink dir", os.unlink, "d")
    c.ok("open dir wronly", os.open, "d", os.O_WRONLY)
    c.ok("open dir rdwr", os.open, "d", os.O_RDWR)
    c.ok("open dir creat", os.open, "d", os.O_CREAT | os.O_RDONLY)
    c.ok("open dir trunc", os.open, "d", os.O_RDONLY | os.O_TRUNC)
    c.ok("creat trailing slash", os.open, "newf/", os.O_CREAT | os.O_WRONLY)
    c.ok("truncate dir", os.truncate, "d", 0)
    fd = os.open("d", os.O_RDONLY)
    c.ok("read dir", os.read, fd, 10)
    c.ok("ftruncate dir", os.ftruncate, fd, 0)
    os.close(fd)
    c.ok("link dir", os.link, "d", "d2")
    c.val("listing", lambda: sorted(os.listdir(".")))


@case(group=G)
def enoent_cases(c):
    for what, fn in (("stat", lambda: os.stat("nope")), ("open", lambda: os.open("nope", os.O_RDONLY)),
                     ("unlink", lambda: os.unlink("nope")), ("rmdir", lambda: os.rmdir("nope")),
                     ("rename", lambda: os.rename("nope", "x")), ("link", lambda: os.link("nope", "x")),
                     ("chmod", lambda: os.chmod("nope", 0o600)), ("chown", lambda: os.chown("nope", 1, 1)),
                     ("truncate", lambda: os.truncate("nope", 0)), ("readlink", lambda: os.readlink("nope")),
                     ("mkdir deep", lambda: os.mkdir("nope/x")),
                     ("creat deep", lambda: os.open("nope/x", os.O_CREAT | os.O_WRONLY)),
                     ("getxattr", lambda: os.getxattr("nope", "user.x")),
                     ("setxattr", lambda: os.setxattr("nope", "user.x", b"1")),
                     ("creat empty", lambda: os.open("", os.O_CREAT | os.O_WRONLY))):
        c.ok(what, fn)


@case(group=G)
def dot_names(c):
    os.mkdir("d")
    c.ok("rmdir .", os.rmdir, "d/.")
    c.ok("rmdir ..", os.rmdir, "d/..")
    c.ok("unlink .", os.unlink, "d/.")
    c.ok("mkdir .", os.mkdir, "d/.")
    c.ok("mkdir ..", os.mkdir, "d/..")
    c.ok("rename .", os.rename, "d/.", "e")
    c.ok("rename to .", os.rename, "d", "d/..")
    c.ok("link to .", os.link, "d", "d/.")
    c.ok("symlink .", os.symlink, "x", "d/.")
    c.val("listing", lambda: sorted(os.listdir(".")))


# ---------------------------------------------------------------------------- rmdir / ENOTEMPTY

@case(group=G)
def rmdir_notempty(c):
    os.makedirs("d/e")
    os.mkdir("d2")
    c.mkfile("d2/f")
    os.mkdir("d3")
    os.symlink("x", "d3/l")
    c.ok("rmdir d", os.rmdir, "d")
    c.ok("rmdir d2", os.rmdir, "d2")
    c.ok("rmdir d3", os.rmdir, "d3")
    c.ok("rmdir d/e", os.rmdir, "d/e")
    c.st("d after", "d")
    c.ok("rmdir d", os.rmdir, "d")
    c.ok("rmdir symlink", os.rmdir, "d3/l")
    c.ok("rmdir cwd-like", os.rmdir, "d2/f/")


@case(group=G)
def rmdir_emptied(c):
    os.mkdir("d")
    for i in range(40):
        c.mkfile("d/f%d" % i)
    c.st("d full", "d")
    for i in range(40):
        os.unlink("d/f%d" % i)
    c.st("d emptied", "d")
    c.ok("rmdir", os.rmdir, "d")


@case(group=G)
def rmdir_open_dir(c):
    os.mkdir("d")
    fd = os.open("d", os.O_RDONLY)
    c.ok("rmdir", os.rmdir, "d")
    c.st("fstat after rmdir", None, fd=fd)
    c.ok("create in removed", os.open, "x", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd)
    c.val("listdir removed", lambda: os.listdir(fd))
    os.close(fd)


# ---------------------------------------------------------------------------- link counts

@case(group=G)
def link_counts_file(c):
    c.mkfile("f", b"abc")
    os.mkdir("d")
    c.st("f", "f")
    for i in range(5):
        c.ok("link %d" % i, os.link, "f", "d/l%d" % i)
    c.st("f 6 links", "f")
    c.ok("unlink f", os.unlink, "f")
    c.st("l0", "d/l0")
    for i in range(4):
        os.unlink("d/l%d" % i)
    c.st("l4 last", "d/l4")
    fd = os.open("d/l4", os.O_RDONLY)
    c.ok("unlink last", os.unlink, "d/l4")
    c.st("open orphan", None, fd=fd)
    c.val("read orphan", os.read, fd, 10)
    os.close(fd)


@case(group=G)
def link_counts_dir(c):
    os.mkdir("d")
    c.st("d empty", "d")
    for i in range(3):
        os.mkdir("d/s%d" % i)
    c.st("d 3 subdirs", "d")
    c.st("s0", "d/s0")
    os.rename("d/s0", "s0")
    c.st("d after move out", "d")
    c.st("top", ".")
    os.rmdir("d/s1")
    c.st("d after rmdir", "d")


@case(group=G)
def link_fill_ref_item(c):
    """Long names of one inode in one directory: without extended refs their INODE_REF item fills a
    leaf and the next link is EMLINK (with them, the names go on in INODE_EXTREF items)."""
    c.mkfile("f")
    os.mkdir("d")
    for where in (".", "d"):
        n, err = 0, "none"
        for i in range(60):
            try:
                os.link("f", os.path.join(where, "%03d" % i + "y" * 200))
                n += 1
            except OSError as e:
                err = e.errno
                break
        c.rec("links in " + where, (n, err if err == "none" else os.strerror(err)))
    c.st("f", "f")
    for i in range(0, 60, 7):
        name = "%03d" % i + "y" * 200
        if os.path.lexists(name):
            c.ok("unlink %d" % i, os.unlink, name)
    c.ok("link after unlinks", os.link, "f", "again" + "y" * 200)
    c.st("f after", "f")


@case(group=G)
def link_special_files(c):
    os.mkfifo("fifo")
    os.symlink("target", "sl")
    os.mknod("chr", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    c.ok("link fifo", os.link, "fifo", "fifo2")
    c.ok("link symlink", os.link, "sl", "sl2", follow_symlinks=False)
    c.ok("link dangling followed", os.link, "sl", "sl3", follow_symlinks=True)
    c.ok("link chr", os.link, "chr", "chr2")
    for n in ("fifo", "sl", "chr"):
        c.st(n, n)
    c.val("readlink sl2", os.readlink, "sl2")


@case(group=G)
def link_emptypath_and_follow(c):
    c.mkfile("f", b"data")
    os.symlink("f", "sl")
    fd = os.open("f", os.O_RDONLY)
    c.ok("linkat AT_EMPTY_PATH", linkat, "", "viafd", AT_EMPTY_PATH, fd, -100)
    os.close(fd)
    c.ok("linkat follow", linkat, "sl", "followed", AT_SYMLINK_FOLLOW)
    c.st("f", "f")
    c.st("followed", "followed")


# ---------------------------------------------------------------------------- mknod of every type

def _mknod_cases():
    kinds = {
        "fifo": (stat.S_IFIFO, 0), "chr": (stat.S_IFCHR, os.makedev(1, 7)), "blk": (stat.S_IFBLK, os.makedev(7, 200)),
        "sock": (stat.S_IFSOCK, 0), "reg": (stat.S_IFREG, 0), "zero": (0, 0), "dir": (stat.S_IFDIR, 0),
        "chr_big": (stat.S_IFCHR, os.makedev(4095, 1048575)), "whiteout": (stat.S_IFCHR, 0),
        "bad_type": (0o170000, 0),
    }
    for name, (typ, dev) in kinds.items():
        for perm in (0o644, 0o7777):
            def fn(c, typ=typ, dev=dev, perm=perm):
                c.ok("mknod", mknodat, "n", typ | perm, dev)
                c.st("stat", "n")
                c.val("listing", lambda: sorted(os.listdir(".")))
            add("%s.mknod_%s_%o" % (G, name, perm), fn)


_mknod_cases()


@case(group=G)
def mknod_as_user(c):
    os.chmod(".", 0o777)

    def u(s):
        s.ok("fifo", os.mknod, "fifo", stat.S_IFIFO | 0o666)
        s.ok("chr", os.mknod, "chr", stat.S_IFCHR | 0o666, os.makedev(1, 3))
        s.ok("blk", os.mknod, "blk", stat.S_IFBLK | 0o666, os.makedev(7, 0))
        s.ok("sock", os.mknod, "sock", stat.S_IFSOCK | 0o666)
        s.ok("whiteout", os.mknod, "wh", stat.S_IFCHR, 0)
        s.st("fifo", "fifo")
    c.user(1000, 1000, [1000], u)


@case(group=G)
def device_nodes_work(c):
    os.mknod("null", stat.S_IFCHR | 0o666, os.makedev(1, 3))
    os.mknod("zero", stat.S_IFCHR | 0o666, os.makedev(1, 5))
    fd = c.open("open null", "null", os.O_RDWR)
    if fd is not None:
        c.val("write null", os.write, fd, b"abc")
        c.val("read null", os.read, fd, 5)
        os.close(fd)
    fd = c.open("open zero", "zero", os.O_RDONLY)
    if fd is not None:
        c.val("read zero", os.read, fd, 5)
        os.close(fd)
    os.mkfifo("fifo")
    fd = c.open("open fifo nonblock", "fifo", os.O_RDONLY | os.O_NONBLOCK)
    if fd is not None:
        w = os.open("fifo", os.O_WRONLY | os.O_NONBLOCK)
        os.write(w, b"through the pipe")
        c.val("read fifo", os.read, fd, 100)
        os.close(w)
        os.close(fd)
    c.st("fifo after", "fifo", fields=("mode", "nlink", "size", "blocks"))


# ---------------------------------------------------------------------------- symlinks

@case(group=G)
def symlink_basics(c):
    for t in ("a", "dir/sub/file", "/absolute/path", "../up", "x" * 1000, "with space", "ümlaut"):
        name = "l%d" % len(t)
        c.ok("symlink %d" % len(t), os.symlink, t, name)
        c.val("readlink %d" % len(t), os.readlink, name)
        c.st("lstat %d" % len(t), name)


@case(group=G)
def symlink_target_lengths(c):
    for n in (4094, 4095, 4096, 5000):
        c.ok("symlink %d" % n, os.symlink, "t" * n, "l%d" % n)
        c.ok("lstat %d" % n, lambda: Ctx.stat_tuple(os.lstat("l%d" % n)))
    c.st("l4095", "l4095")


@case(group=G)
def symlink_empty_target(c):
    c.ok("symlink empty", os.symlink, "", "l")


@case(group=G)
def symlink_loops(c):
    os.symlink("loop1", "loop2")
    os.symlink("loop2", "loop1")
    os.symlink("self", "self")
    c.ok("stat loop", os.stat, "loop1")
    c.ok("open loop", os.open, "loop1", os.O_RDONLY)
    c.ok("creat through loop", os.open, "loop1", os.O_CREAT | os.O_WRONLY)
    c.ok("stat self", os.stat, "self")
    c.ok("lstat loop", lambda: Ctx.stat_tuple(os.lstat("loop1")))
    c.ok("chdir-like loop", os.listdir, "self/")
    c.ok("mkdir under loop", os.mkdir, "self/x")
    c.ok("unlink loop", os.unlink, "loop1")


@case(group=G)
def symlink_chain_40(c):
    c.mkfile("f0", b"end")
    for i in range(1, 42):
        os.symlink("f%d" % (i - 1), "f%d" % i)
    c.ok("open 40 deep", lambda: os.close(os.open("f40", os.O_RDONLY)))
    c.ok("open 41 deep", lambda: os.close(os.open("f41", os.O_RDONLY)))


@case(group=G)
def symlink_follow_rules(c):
    os.mkdir("d")
    c.mkfile("d/f", b"hello")
    os.symlink("d", "ld")
    os.symlink("d/f", "lf")
    os.symlink("nowhere", "dangling")
    c.ok("open nofollow", os.open, "lf", os.O_RDONLY | os.O_NOFOLLOW)
    c.ok("open nofollow dir path", lambda: os.close(os.open("ld/f", os.O_RDONLY | os.O_NOFOLLOW)))
    c.ok("open path nofollow", lambda: os.close(os.open("lf", os.O_PATH | os.O_NOFOLLOW)))
    c.ok("creat through dangling", lambda: os.close(os.open("dangling", os.O_CREAT | os.O_WRONLY, 0o600)))
    c.st("created target", "nowhere")
    c.ok("creat excl symlink", os.open, "lf", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    c.ok("mkdir through symlink", os.mkdir, "ld/sub")
    c.ok("rmdir symlink to dir", os.rmdir, "ld")
    c.ok("rmdir symlink slash", os.rmdir, "ld/")
    c.ok("unlink symlink slash", os.unlink, "ld/")
    c.ok("unlink symlink", os.unlink, "ld")
    c.st("d still", "d")
    c.ok("chmod through symlink", os.chmod, "lf", 0o600)
    c.st("target mode", "d/f")
    c.st("link mode", "lf")
    c.ok("lchmod", fchmodat, "lf", 0o600, AT_SYMLINK_NOFOLLOW)
    c.ok("lchown", os.chown, "lf", 1000, 1000, follow_symlinks=False)
    c.st("link owner", "lf")
    c.st("target owner", "d/f")
    c.ok("truncate via symlink", os.truncate, "lf", 2)
    c.st("target size", "d/f")


@case(group=G)
def symlink_readlink_errors(c):
    c.mkfile("f")
    c.ok("readlink file", os.readlink, "f")
    c.ok("readlink dir", os.readlink, ".")
    os.symlink("abcdef", "l")
    fd = os.open("l", os.O_PATH | os.O_NOFOLLOW)
    c.val("readlink of O_PATH fd", lambda: os.path.basename(os.readlink("/proc/self/fd/%d" % fd)))
    c.val("readlinkat empty", readlinkat_empty, fd)
    os.close(fd)


# ---------------------------------------------------------------------------- open flags

@case(group=G)
def open_creat_excl_trunc(c):
    c.ok("creat", lambda: os.close(os.open("f", os.O_CREAT | os.O_WRONLY, 0o640)))
    c.st("f", "f")
    c.ok("creat excl again", os.open, "f", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    c.ok("creat again mode ignored", lambda: os.close(os.open("f", os.O_CREAT | os.O_WRONLY, 0o777)))
    c.st("f again", "f")
    with open("f", "wb") as f:
        f.write(b"0123456789")
    c.ok("trunc", lambda: os.close(os.open("f", os.O_WRONLY | os.O_TRUNC)))
    c.st("f truncated", "f")
    with open("f", "wb") as f:
        f.write(b"0123456789")
    c.ok("rdonly trunc", lambda: os.close(os.open("f", os.O_RDONLY | os.O_TRUNC)))
    c.st("rdonly trunc size", "f")
    c.ok("excl without creat", lambda: os.close(os.open("f", os.O_EXCL | os.O_WRONLY)))
    c.ok("creat excl trunc new", lambda: os.close(os.open("g", os.O_CREAT | os.O_EXCL | os.O_TRUNC | os.O_RDWR, 0o600)))
    c.st("g", "g")
    c.ok("directory creat", os.open, "h", os.O_CREAT | os.O_DIRECTORY | os.O_RDONLY)
    c.val("listing", lambda: sorted(os.listdir(".")))


@case(group=G)
def open_append(c):
    c.mkfile("f", b"0123456789")
    fd = os.open("f", os.O_WRONLY | os.O_APPEND)
    c.val("pos", os.lseek, fd, 0, os.SEEK_CUR)
    c.val("write", os.write, fd, b"ab")
    c.val("pos after", os.lseek, fd, 0, os.SEEK_CUR)
    os.lseek(fd, 0, os.SEEK_SET)
    c.val("write after seek", os.write, fd, b"cd")
    c.val("pwrite", os.pwrite, fd, b"ef", 0)
    os.close(fd)
    with open("f", "rb") as f:
        c.rec("content", f.read())
    fd = os.open("f", os.O_RDWR | os.O_APPEND | os.O_TRUNC)
    c.val("write truncated", os.write, fd, b"new")
    os.close(fd)
    with open("f", "rb") as f:
        c.rec("content 2", f.read())
    c.st("f", "f")


@case(group=G)
def open_modes_and_access(c):
    c.mkfile("f", b"abc")
    fd = os.open("f", os.O_RDONLY)
    c.ok("write to rdonly", os.write, fd, b"x")
    c.ok("ftruncate rdonly", os.ftruncate, fd, 0)
    os.close(fd)
    fd = os.open("f", os.O_WRONLY)
    c.ok("read wronly", os.read, fd, 1)
    c.val("write", os.write, fd, b"Z")
    os.close(fd)
    fd = os.open("f", os.O_RDWR)
    c.val("read rdwr", os.read, fd, 10)
    c.val("pread", os.pread, fd, 2, 1)
    c.val("pread past eof", os.pread, fd, 2, 100)
    c.val("lseek end", os.lseek, fd, 0, os.SEEK_END)
    c.ok("lseek negative", os.lseek, fd, -10, os.SEEK_SET)
    os.close(fd)
    fd = os.open("f", os.O_PATH)
    c.ok("read O_PATH", os.read, fd, 1)
    c.st("fstat O_PATH", None, fd=fd)
    os.close(fd)


@case(group=G)
def open_write_past_eof_and_sparse(c):
    fd = os.open("f", os.O_CREAT | os.O_RDWR, 0o644)
    c.val("pwrite far", os.pwrite, fd, b"end", 1 << 20)
    c.st_synced("sparse", fd=fd)
    c.val("read hole", os.pread, fd, 4, 4096)
    c.val("seek data", os.lseek, fd, 0, os.SEEK_DATA)
    c.val("seek hole", os.lseek, fd, 0, os.SEEK_HOLE)
    c.ok("seek data past", os.lseek, fd, (1 << 20) + 10, os.SEEK_DATA)
    os.close(fd)


@case(group=G)
def write_huge_offsets(c):
    fd = os.open("f", os.O_CREAT | os.O_RDWR, 0o644)
    big = (1 << 63) - 1
    c.val("pwrite at max", os.pwrite, fd, b"x", big)
    c.val("pwrite ending at max", os.pwrite, fd, b"xy", big - 2)
    c.val("pwrite crossing max", os.pwrite, fd, b"abcd", big - 2)
    c.st("after", None, fd=fd)
    os.close(fd)


@case(group=G)
def truncate_sizes(c):
    c.mkfile("f", b"0123456789")
    for size in (5, 0, 4096, 1 << 30, 1 << 40, (1 << 62), (1 << 63) - 1, 3):
        c.ok("truncate %d" % size, os.truncate, "f", size)
        c.st_synced("after %d" % size, "f")
    c.ok("truncate negative", os.truncate, "f", -1)
    fd = os.open("f", os.O_RDWR)
    c.ok("ftruncate max", os.ftruncate, fd, (1 << 63) - 1)
    c.val("read after big truncate", os.pread, fd, 8, 1 << 40)
    c.ok("ftruncate back", os.ftruncate, fd, 2)
    c.val("content", os.pread, fd, 10, 0)
    os.close(fd)


@case(group=G)
def fallocate_limits(c):
    from conform import fallocate
    fd = os.open("f", os.O_CREAT | os.O_RDWR, 0o644)
    c.ok("fallocate past max", fallocate, fd, 0, (1 << 63) - 4096, 8192)
    c.ok("fallocate zero len", fallocate, fd, 0, 0, 0)
    c.ok("fallocate negative", fallocate, fd, 0, -1, 10)
    c.ok("fallocate collapse", fallocate, fd, 0x08, 0, 4096)
    c.ok("fallocate insert", fallocate, fd, 0x20, 0, 4096)
    c.ok("punch without keep", fallocate, fd, 0x02, 0, 4096)
    c.ok("fallocate keep", fallocate, fd, 0x01, 0, 8192)
    c.st_synced("after keep", fd=fd)
    c.ok("fallocate", fallocate, fd, 0, 0, 8192)
    c.st_synced("after", fd=fd)
    os.close(fd)
    fd = os.open("f", os.O_RDONLY)
    c.ok("fallocate rdonly", fallocate, fd, 0, 0, 4096)
    os.close(fd)


# ---------------------------------------------------------------------------- O_TMPFILE

@case(group=G)
def tmpfile_basic(c):
    fd = c.open("tmpfile", ".", O_TMPFILE | os.O_RDWR, 0o640)
    if fd is not None:
        c.val("write", os.write, fd, b"anonymous")
        c.st("fstat", None, fd=fd)
        c.val("listing", lambda: sorted(os.listdir(".")))
        c.ok("link it", linkat, "", "named", AT_EMPTY_PATH, fd, -100)
        c.st("named", "named")
        os.close(fd)
        with open("named", "rb") as f:
            c.rec("content", f.read())
    else:
        c.val("listing", lambda: sorted(os.listdir(".")))


@case(group=G)
def tmpfile_excl_and_errors(c):
    fd = c.open("tmpfile excl", ".", O_TMPFILE | os.O_EXCL | os.O_WRONLY, 0o600)
    if fd is not None:
        c.ok("link excl", linkat, "", "x", AT_EMPTY_PATH, fd, -100)
        os.close(fd)
    c.ok("tmpfile rdonly", os.open, ".", O_TMPFILE | os.O_RDONLY)
    c.mkfile("f")
    c.ok("tmpfile on file", os.open, "f", O_TMPFILE | os.O_RDWR)
    c.ok("tmpfile missing dir", os.open, "nope", O_TMPFILE | os.O_RDWR)
