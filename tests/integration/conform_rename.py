# SPDX-License-Identifier: MIT
"""Conformance cases: every rename corner, renameat2's flags."""

import os
import stat

from conform import RENAME_EXCHANGE, RENAME_NOREPLACE, RENAME_WHITEOUT, add, case, renameat2

G = "rename"


def _show(c, *names):
    c.val("listing", lambda: sorted(os.listdir(".")))
    for n in names:
        c.st(n, n)


def _kinds(c):
    """One of each kind of entry, for the source x target matrix."""
    c.mkfile("file", b"file data")
    c.mkfile("file2", b"other data")
    os.mkdir("emptydir")
    os.mkdir("fulldir")
    c.mkfile("fulldir/inner", b"in")
    os.symlink("file", "symlink")
    os.mkfifo("fifo")
    os.link("file", "hardlink")


KINDS = ("file", "file2", "emptydir", "fulldir", "symlink", "fifo", "hardlink", "missing")


def _matrix():
    """rename(2) and each renameat2 flag, from every kind of entry onto every other."""
    flags_names = {0: "plain", RENAME_NOREPLACE: "noreplace", RENAME_EXCHANGE: "exchange"}
    for flags, fname in flags_names.items():
        for src in KINDS:
            for dst in KINDS:
                if src == "missing" and dst == "missing":
                    continue

                def fn(c, src=src, dst=dst, flags=flags):
                    _kinds(c)
                    before = {n: (os.lstat(n).st_ino, c.tsnap(n)) for n in ("file", "emptydir", "fulldir", ".")}
                    c.ok("rename", renameat2, src, dst, flags)
                    now = {os.lstat(n).st_ino: n for n in KINDS + (".",) if os.path.lexists(n)}
                    # each inode's times, under whatever name it has now
                    for n, (ino, t) in before.items():
                        if ino in now:
                            c.tchg("times of " + n, now[ino], t)
                        else:
                            c.rec("times of " + n, "gone")
                    _show(c, *[n for n in KINDS if os.path.lexists(n)])
                    if os.path.isdir("fulldir"):
                        c.val("fulldir", lambda: sorted(os.listdir("fulldir")))
                add("%s.%s_%s_to_%s" % (G, fname, src, dst), fn)


_matrix()


@case(group=G)
def over_itself(c):
    c.mkfile("f", b"x")
    os.mkdir("d")
    before = c.tsnap("f")
    bd = c.tsnap(".")
    c.ok("file onto itself", os.rename, "f", "f")
    c.ok("dir onto itself", os.rename, "d", "d")
    c.ok("noreplace onto itself", renameat2, "f", "f", RENAME_NOREPLACE)
    c.ok("exchange with itself", renameat2, "f", "f", RENAME_EXCHANGE)
    c.tchg("file times", "f", before)
    c.tchg("dir times", ".", bd)
    _show(c, "f", "d")


@case(group=G)
def hard_links_of_one_inode(c):
    c.mkfile("a", b"x")
    os.link("a", "b")
    os.mkdir("d")
    os.link("a", "d/c")
    before = c.tsnap("a")
    c.ok("a onto b", os.rename, "a", "b")
    c.tchg("times", "b", before)
    _show(c, "a", "b")
    c.ok("d/c onto b", os.rename, "d/c", "b")
    c.val("d", lambda: os.listdir("d"))
    c.ok("noreplace a onto b", renameat2, "a", "b", RENAME_NOREPLACE)
    c.ok("exchange a and b", renameat2, "a", "b", RENAME_EXCHANGE)
    _show(c, "a", "b")


@case(group=G)
def dir_into_own_subtree(c):
    os.makedirs("a/b/c")
    c.ok("a into a/b", os.rename, "a", "a/b/x")
    c.ok("a into a", os.rename, "a", "a/x")
    c.ok("a onto a/b", os.rename, "a", "a/b")
    c.ok("a/b onto a", os.rename, "a/b", "a")
    c.ok("exchange a and a/b", renameat2, "a", "a/b", RENAME_EXCHANGE)
    c.ok("exchange a/b and a", renameat2, "a/b", "a", RENAME_EXCHANGE)
    c.ok("noreplace into own", renameat2, "a", "a/b/c/x", RENAME_NOREPLACE)
    c.ok("a/b/c up to top", os.rename, "a/b/c", "c")
    _show(c, "a", "c")
    c.val("a/b", lambda: os.listdir("a/b"))


@case(group=G)
def dir_over_dirs(c):
    os.makedirs("src/inner")
    os.mkdir("empty")
    os.mkdir("full")
    c.mkfile("full/f")
    os.mkdir("other")
    c.ok("onto full", os.rename, "src", "full")
    c.ok("onto empty", os.rename, "src", "empty")
    _show(c, "empty", "full")
    c.val("empty now", lambda: os.listdir("empty"))
    c.ok("onto parent dotdot", os.rename, "empty/inner", "..")
    c.ok("trailing slash file", os.rename, "full/f", "g/")
    c.ok("trailing slash dirs", os.rename, "other/", "other2/")
    _show(c, "other2", "empty/inner")
    c.st("inner's parent count", "empty")


@case(group=G)
def dir_moves_update_parents(c):
    os.makedirs("p1/child")
    os.mkdir("p2")
    t1, t2, tc = c.tsnap("p1"), c.tsnap("p2"), c.tsnap("p1/child")
    c.ok("move", os.rename, "p1/child", "p2/child")
    c.tchg("p1", "p1", t1, rel=True)
    c.tchg("p2", "p2", t2, rel=True)
    c.tchg("child", "p2/child", tc)
    _show(c, "p1", "p2", "p2/child")
    c.val("dotdot", lambda: os.stat("p2/child/..").st_ino == os.stat("p2").st_ino)


@case(group=G)
def file_moves_update_parents(c):
    os.mkdir("p1")
    os.mkdir("p2")
    c.mkfile("p1/f")
    c.mkfile("p2/g")
    t1, t2, tf, tg = c.tsnap("p1"), c.tsnap("p2"), c.tsnap("p1/f"), c.tsnap("p2/g")
    c.ok("move over", os.rename, "p1/f", "p2/g")
    c.tchg("p1", "p1", t1, rel=True)
    c.tchg("p2", "p2", t2, rel=True)
    c.tchg("f", "p2/g", tf)
    _show(c, "p1", "p2", "p2/g")


@case(group=G)
def replaced_file_kept_open(c):
    c.mkfile("a", b"new")
    c.mkfile("b", b"old content")
    fd = os.open("b", os.O_RDONLY)
    c.ok("a over b", os.rename, "a", "b")
    c.st("open old", None, fd=fd)
    c.val("read old", os.read, fd, 100)
    os.close(fd)
    with open("b", "rb") as f:
        c.rec("new content", f.read())


@case(group=G)
def exchange_file_and_dir(c):
    c.mkfile("f", b"x")
    os.mkdir("d")
    c.mkfile("d/in")
    os.mkdir("e")
    tf, td, te = c.tsnap("f"), c.tsnap("d"), c.tsnap(".")
    c.ok("exchange", renameat2, "f", "d", RENAME_EXCHANGE)
    c.tchg("f", "d", tf)
    c.tchg("d", "f", td)
    c.tchg("parent", ".", te, rel=True)
    _show(c, "f", "d")
    c.val("f is the dir now", lambda: os.listdir("f"))
    c.ok("exchange across dirs", renameat2, "f/in", "e", RENAME_EXCHANGE)
    _show(c, "e", "f", "f/in")


@case(group=G)
def exchange_dirs_across_parents(c):
    os.makedirs("p1/a/x")
    os.makedirs("p2/b")
    c.ok("exchange", renameat2, "p1/a", "p2/b", RENAME_EXCHANGE)
    _show(c, "p1", "p2", "p1/a", "p2/b")
    c.val("p2/b holds x", lambda: os.listdir("p2/b"))


@case(group=G)
def bad_flags(c):
    c.mkfile("a")
    c.mkfile("b")
    c.ok("noreplace|exchange", renameat2, "a", "b", RENAME_NOREPLACE | RENAME_EXCHANGE)
    c.ok("whiteout|exchange", renameat2, "a", "b", RENAME_WHITEOUT | RENAME_EXCHANGE)
    c.ok("unknown flag", renameat2, "a", "b", 1 << 5)
    _show(c)


def _whiteouts():
    for name, flags in (("plain", RENAME_WHITEOUT), ("noreplace", RENAME_WHITEOUT | RENAME_NOREPLACE)):
        for dst in ("missing", "file2", "emptydir"):
            def fn(c, flags=flags, dst=dst):
                c.mkfile("file", b"x")
                c.mkfile("file2", b"y")
                os.mkdir("emptydir")
                c.ok("whiteout", renameat2, "file", dst, flags)
                _show(c, *[n for n in ("file", "file2", "emptydir", "missing") if os.path.lexists(n)])
            add("%s.whiteout_%s_to_%s" % (G, name, dst), fn)
    for src in ("emptydir", "symlink"):
        def fn(c, src=src):
            os.mkdir("emptydir")
            os.symlink("x", "symlink")
            c.ok("whiteout", renameat2, src, "new", RENAME_WHITEOUT)
            _show(c, *[n for n in ("emptydir", "symlink", "new") if os.path.lexists(n)])
        add("%s.whiteout_%s" % (G, src), fn)


_whiteouts()


@case(group=G)
def whiteout_as_user(c):
    os.chmod(".", 0o777)

    def u(s):
        s.mkfile("mine")
        s.ok("whiteout", renameat2, "mine", "moved", RENAME_WHITEOUT)
    c.user(1000, 1000, [1000], u)
    _show(c, *[n for n in ("mine", "moved") if os.path.lexists(n)])


@case(group=G)
def rename_long_names(c):
    c.mkfile("a")
    c.ok("to 255", os.rename, "a", "b" * 255)
    c.ok("to 256", os.rename, "b" * 255, "c" * 256)
    c.ok("from 256", os.rename, "c" * 256, "d")
    _show(c)


@case(group=G)
def rename_many_in_one_dir(c):
    for i in range(50):
        c.mkfile("f%d" % i, b"%d" % i)
    for i in range(50):
        os.rename("f%d" % i, "g%d" % (49 - i)) if not os.path.exists("g%d" % (49 - i)) else None
    c.val("listing", lambda: sorted(os.listdir(".")))
    c.st("dir", ".")
    for i in range(0, 50, 7):
        n = "g%d" % i
        if os.path.exists(n):
            with open(n, "rb") as f:
                c.rec(n, f.read())


@case(group=G)
def rename_device_and_socket(c):
    os.mknod("chr", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    os.mknod("sock", stat.S_IFSOCK | 0o600)
    os.mkdir("d")
    c.ok("chr", os.rename, "chr", "d/chr")
    c.ok("sock over chr", os.rename, "sock", "d/chr")
    _show(c, "d/chr")
