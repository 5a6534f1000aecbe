# SPDX-License-Identifier: MIT
"""Conformance cases: xattr namespaces on every kind of inode, flags, sizes; POSIX ACLs
(enforcement, the mask, default ACL inheritance, chmod keeping the ACL in step)."""

import ctypes
import os
import stat

from conform import ACL_ACCESS, ACL_DEFAULT, acl, acl_text, add, case, libc

G = "xattr"
U1 = (1000, 1000, [1000])
U1G = (1000, 1000, [1000, 2000])
U2 = (1001, 1001, [1001])


def _getxattr_raw(path, name, size):
    """getxattr(2) with a buffer of `size` bytes: the length (or -errno)."""
    buf = ctypes.create_string_buffer(max(size, 1))
    r = libc.lgetxattr(os.fsencode(path), name.encode(), buf if size else None, ctypes.c_size_t(size))
    return r if r >= 0 else -ctypes.get_errno()


def _listxattr_raw(path, size):
    buf = ctypes.create_string_buffer(max(size, 1))
    r = libc.llistxattr(os.fsencode(path), buf if size else None, ctypes.c_size_t(size))
    return r if r >= 0 else -ctypes.get_errno()


def _inodes(c):
    c.mkfile("file", b"x")
    os.mkdir("dir")
    os.symlink("file", "symlink")
    os.mkfifo("fifo")
    os.mknod("chr", stat.S_IFCHR | 0o644, os.makedev(1, 3))
    os.mknod("sock", stat.S_IFSOCK | 0o644)


INODES = ("file", "dir", "symlink", "fifo", "chr", "sock")
NAMES = ("user.k", "trusted.k", "security.k", "system.k", "k", "btrfs.k", "user.", "system.posix_acl_access",
         "btrfs.compression", "osx.k", "security.capability")


def _namespace_cases():
    for ino in INODES:
        for name in NAMES:
            for who in ("root", "u1"):
                def fn(c, ino=ino, name=name, who=who):
                    _inodes(c)
                    for n in INODES:
                        os.chown(n, 1000, 1000, follow_symlinks=False)

                    def op(s):
                        value = acl("u::rw-,g::r--,o::r--") if name.startswith("system.posix") else (
                            b"zstd" if name == "btrfs.compression" else b"value")
                        s.ok("set", os.setxattr, ino, name, value, follow_symlinks=False)
                        s.getx("get", ino, name)
                        s.listx("list", ino)
                        s.ok("remove", os.removexattr, ino, name, follow_symlinks=False)
                        s.getx("get after", ino, name)
                    if who == "root":
                        c.forked(op)
                    else:
                        c.user(*U1, op)
                    c.st("after", ino)
                add("%s.ns_%s_%s_%s" % (G, ino, name.replace(".", "_") or "empty", who), fn)


_namespace_cases()


@case(group=G)
def create_replace_flags(c):
    c.mkfile("f")
    c.ok("replace missing", os.setxattr, "f", "user.a", b"1", os.XATTR_REPLACE)
    c.ok("create", os.setxattr, "f", "user.a", b"1", os.XATTR_CREATE)
    c.ok("create again", os.setxattr, "f", "user.a", b"2", os.XATTR_CREATE)
    c.ok("replace", os.setxattr, "f", "user.a", b"33", os.XATTR_REPLACE)
    c.getx("value", "f", "user.a")
    c.ok("both flags", os.setxattr, "f", "user.a", b"4", os.XATTR_CREATE | os.XATTR_REPLACE)
    c.ok("bad flag", os.setxattr, "f", "user.a", b"4", 8)
    c.getx("value 2", "f", "user.a")
    c.ok("remove", os.removexattr, "f", "user.a")
    c.ok("remove again", os.removexattr, "f", "user.a")


@case(group=G)
def name_and_value_sizes(c):
    c.mkfile("f")
    c.ok("name 255", os.setxattr, "f", "user." + "n" * 250, b"v")
    c.ok("name 256", os.setxattr, "f", "user." + "n" * 251, b"v")
    c.ok("empty value", os.setxattr, "f", "user.empty", b"")
    c.getx("empty value back", "f", "user.empty")
    for n in (1000, 3900, 16000, 16200, 16300, 65536, 65537):
        c.ok("value %d" % n, os.setxattr, "f", "user.v%d" % n, b"v" * n)
    c.listx("names", "f")
    c.val("raw list order", lambda: os.listxattr("f"))


@case(group=G)
def buffer_sizes(c):
    c.mkfile("f")
    os.setxattr("f", "user.abc", b"0123456789")
    os.setxattr("f", "user.d", b"")
    for n in (0, 5, 9, 10, 11):
        c.rec("getxattr buf %d" % n, _getxattr_raw("f", "user.abc", n))
    c.rec("getxattr empty", _getxattr_raw("f", "user.d", 0))
    for n in (0, 3, 8, 9, 16, 17):
        c.rec("listxattr buf %d" % n, _listxattr_raw("f", n))


@case(group=G)
def many_xattrs(c):
    c.mkfile("f")
    for i in range(60):
        c.ok("set %d" % i, os.setxattr, "f", "user.attr%02d" % i, b"x" * (i * 37))
    c.listx("list", "f")
    c.val("raw order", lambda: os.listxattr("f"))
    for i in range(0, 60, 3):
        os.removexattr("f", "user.attr%02d" % i)
    c.listx("after removal", "f")
    c.getx("one", "f", "user.attr59")


@case(group=G)
def xattrs_on_hard_links_and_renames(c):
    c.mkfile("a")
    os.link("a", "b")
    os.setxattr("a", "user.shared", b"1")
    c.getx("via b", "b", "user.shared")
    os.rename("b", "c")
    c.getx("via c", "c", "user.shared")
    os.unlink("a")
    c.listx("c", "c")


@case(group=G)
def xattr_on_dir_perms(c):
    os.mkdir("d")
    os.chmod("d", 0o755)
    os.mkdir("w")
    os.chmod("w", 0o777)
    os.mkdir("sticky")
    os.chmod("sticky", 0o1777)

    def u(s):
        s.ok("set on ro dir", os.setxattr, "d", "user.x", b"1")
        s.ok("set on writable dir", os.setxattr, "w", "user.x", b"1")
        s.ok("set on sticky dir", os.setxattr, "sticky", "user.x", b"1")
        s.getx("get", "w", "user.x")
    c.user(*U1, u)


@case(group=G)
def btrfs_properties(c):
    c.mkfile("f")
    os.mkdir("d")
    for v in (b"zlib", b"lzo", b"zstd", b"zstd:3", b"zlib:9", b"", b"no", b"none", b"bogus", b"zstd:99", b"zlib:0"):
        c.ok("compression %r" % v, os.setxattr, "f", "btrfs.compression", v)
        c.getx("back %r" % v, "f", "btrfs.compression")
    c.ok("dir compression", os.setxattr, "d", "btrfs.compression", b"zstd")
    c.mkfile("d/new")
    c.getx("inherited", "d/new", "btrfs.compression")
    c.ok("unknown property", os.setxattr, "f", "btrfs.other", b"1")
    c.ok("remove compression", os.removexattr, "f", "btrfs.compression")
    c.listx("list", "f")


# ---------------------------------------------------------------------------- POSIX ACLs

@case(group=G)
def acl_set_updates_mode(c):
    c.mkfile("f")
    os.chmod("f", 0o644)
    c.ok("set", os.setxattr, "f", ACL_ACCESS, acl("u::rwx,u:1000:rw-,g::r--,m::r-x,o::---"))
    c.st("mode follows", "f")
    c.getx("back", "f", ACL_ACCESS, show=acl_text)
    c.listx("list", "f")
    c.ok("set equivalent", os.setxattr, "f", ACL_ACCESS, acl("u::rw-,g::r--,o::r--"))
    c.st("mode after equivalent", "f")
    c.getx("equivalent not kept", "f", ACL_ACCESS, show=acl_text)
    c.listx("list 2", "f")


@case(group=G)
def acl_minimal_variants(c):
    c.mkfile("f")
    for text in ("u::rwx,g::rwx,o::rwx", "u::---,g::---,o::---", "u::r--,g::-w-,o::--x",
                 "u::rw-,g::r--,m::rw-,o::r--", "u::rw-,u:5:r--,g::r--,o::r--"):
        c.ok("set " + text, os.setxattr, "f", ACL_ACCESS, acl(text))
        c.st("mode " + text, "f")
        c.getx("back " + text, "f", ACL_ACCESS, show=acl_text)


@case(group=G)
def acl_invalid(c):
    c.mkfile("f")
    os.mkdir("d")
    for label, value in (("no mask with named", acl("u::rw-,u:5:r--,g::r--,o::r--")[:-8]),
                         ("garbage", b"\x01\x02"), ("bad version", b"\x01\x00\x00\x00"),
                         ("empty", b""), ("missing other", acl("u::rw-,g::r--,o::r--")[:-8]),
                         ("duplicate user", acl("u::rw-,u:5:r--,u:5:rw-,g::r--,m::rw-,o::r--"))):
        c.ok("set " + label, os.setxattr, "f", ACL_ACCESS, value)
    c.ok("default on file", os.setxattr, "f", ACL_DEFAULT, acl("u::rw-,g::r--,o::r--"))
    c.ok("default on dir", os.setxattr, "d", ACL_DEFAULT, acl("u::rw-,g::r--,o::r--"))
    c.getx("default back", "d", ACL_DEFAULT, show=acl_text)
    c.ok("default empty removes", os.setxattr, "d", ACL_DEFAULT, b"\x02\x00\x00\x00")
    c.getx("default after empty", "d", ACL_DEFAULT, show=acl_text)
    c.st("f", "f")


def _enforce_cases():
    files = {
        "user_rw": ("u::rw-,u:1000:rw-,g::---,m::rw-,o::---", 0, 0),
        "user_masked": ("u::rw-,u:1000:rw-,g::---,m::r--,o::---", 0, 0),
        "group_r": ("u::rw-,g::---,g:2000:r--,m::r--,o::---", 0, 0),
        "owner_denied": ("u::---,u:1000:rwx,g::rwx,m::rwx,o::rwx", 1000, 0),
        "other_only": ("u::rw-,u:1001:rw-,g::---,m::rw-,o::r--", 0, 0),
        "group_obj": ("u::---,g::rw-,o::---", 0, 2000),
    }
    for name, (text, uid, gid) in files.items():
        for who_name, who in (("u1", U1G), ("u2", U2)):
            def fn(c, text=text, uid=uid, gid=gid, who=who):
                os.chmod(".", 0o777)
                c.mkfile("f", b"secret")
                os.chown("f", uid, gid)
                c.ok("setup acl", os.setxattr, "f", ACL_ACCESS, acl(text))
                os.mkdir("d")
                os.chown("d", uid, gid)
                c.ok("setup acl", os.setxattr, "d", ACL_ACCESS, acl(text.replace("rw-", "rwx").replace("r--", "r-x")))
                c.st("f", "f")

                def op(s):
                    s.ok("read", lambda: os.close(os.open("f", os.O_RDONLY)))
                    s.ok("write", lambda: os.close(os.open("f", os.O_WRONLY)))
                    s.val("access r", os.access, "f", os.R_OK)
                    s.val("access w", os.access, "f", os.W_OK)
                    s.ok("list dir", os.listdir, "d")
                    s.ok("create in dir", lambda: os.close(os.open("d/new", os.O_CREAT | os.O_WRONLY)))
                c.user(*who, op)
            add("%s.acl_enforce_%s_%s" % (G, name, who_name), fn)


_enforce_cases()


@case(group=G)
def acl_chmod_keeps_in_step(c):
    c.mkfile("f")
    c.ok("setup acl", os.setxattr, "f", ACL_ACCESS, acl("u::rw-,u:1000:rwx,g::r--,g:2000:rw-,m::rwx,o::r--"))
    c.st("mode", "f")
    for m in (0o640, 0o700, 0o000, 0o777, 0o2751):
        c.ok("chmod %o" % m, os.chmod, "f", m)
        c.st("mode %o" % m, "f")
        c.getx("acl %o" % m, "f", ACL_ACCESS, show=acl_text)


@case(group=G)
def acl_chmod_dir_default_untouched(c):
    os.mkdir("d")
    c.ok("setup acl", os.setxattr, "d", ACL_ACCESS, acl("u::rwx,u:1000:r-x,g::r-x,m::r-x,o::r-x"))
    c.ok("setup acl", os.setxattr, "d", ACL_DEFAULT, acl("u::rwx,u:1000:rwx,g::r-x,m::rwx,o::---"))
    c.ok("chmod", os.chmod, "d", 0o700)
    c.getx("access", "d", ACL_ACCESS, show=acl_text)
    c.getx("default", "d", ACL_DEFAULT, show=acl_text)
    c.st("d", "d")


@case(group=G)
def acl_remove_keeps_mode(c):
    c.mkfile("f")
    c.ok("setup acl", os.setxattr, "f", ACL_ACCESS, acl("u::rw-,u:1000:rwx,g::r--,m::rwx,o::r--"))
    c.st("with acl", "f")
    c.ok("remove", os.removexattr, "f", ACL_ACCESS)
    c.st("after remove", "f")
    c.getx("gone", "f", ACL_ACCESS, show=acl_text)


def _inherit_cases():
    defaults = {
        "named_user": "u::rwx,u:1000:rwx,g::r-x,m::rwx,o::r-x",
        "restrictive": "u::rw-,g::---,o::---",
        "mask_only": "u::rwx,g::rwx,m::r--,o::r--",
        "group_named": "u::rwx,g::r-x,g:2000:rwx,m::rwx,o::---",
    }
    makers = {
        "create": lambda n, m: os.close(os.open(n, os.O_CREAT | os.O_WRONLY, m)),
        "mkdir": lambda n, m: os.mkdir(n, m),
        "mknod": lambda n, m: os.mknod(n, stat.S_IFIFO | m),
        "symlink": lambda n, m: os.symlink("t", n),
    }
    for dname, text in defaults.items():
        for mname, mk in makers.items():
            for mode, umask in ((0o777, 0o022), (0o640, 0o077), (0o666, 0)):
                def fn(c, text=text, mk=mk, mode=mode, umask=umask, mname=mname):
                    os.mkdir("d")
                    c.ok("setup acl", os.setxattr, "d", ACL_DEFAULT, acl(text))
                    old = os.umask(umask)
                    try:
                        c.ok("make", mk, "d/n", mode)
                        c.ok("make in sub", lambda: (os.mkdir("d/sub") if not os.path.exists("d/sub") else None,
                                                     mk("d/sub/n", mode)))
                    finally:
                        os.umask(old)
                    for n in ("d/n", "d/sub/n", "d/sub"):
                        c.st(n, n)
                        c.getx("access " + n, n, ACL_ACCESS, show=acl_text)
                        c.getx("default " + n, n, ACL_DEFAULT, show=acl_text)
                add("%s.acl_inherit_%s_%s_%o_%03o" % (G, dname, mname, mode, umask), fn)


_inherit_cases()


@case(group=G)
def acl_umask_without_default(c):
    os.mkdir("d")
    c.ok("setup acl", os.setxattr, "d", ACL_ACCESS, acl("u::rwx,u:1000:rwx,g::r-x,m::rwx,o::r-x"))
    old = os.umask(0o027)
    try:
        c.ok("create", lambda: os.close(os.open("d/f", os.O_CREAT | os.O_WRONLY, 0o777)))
        c.ok("mkdir", os.mkdir, "d/s", 0o777)
    finally:
        os.umask(old)
    c.st("f", "d/f")
    c.st("s", "d/s")
    c.getx("no acl", "d/f", ACL_ACCESS, show=acl_text)


@case(group=G)
def acl_as_owner_and_other(c):
    os.chmod(".", 0o777)
    c.mkfile("f")
    os.chown("f", 1000, 1000)

    def owner(s):
        s.ok("set by owner", os.setxattr, "f", ACL_ACCESS, acl("u::rw-,u:1001:r--,g::r--,m::r--,o::---"))
        s.getx("read by owner", "f", ACL_ACCESS, show=acl_text)

    def other(s):
        s.ok("set by other", os.setxattr, "f", ACL_ACCESS, acl("u::rwx,g::rwx,o::rwx"))
        s.getx("read by other", "f", ACL_ACCESS, show=acl_text)
        s.ok("open by other", lambda: os.close(os.open("f", os.O_RDONLY)))
    c.user(*U1, owner)
    c.user(*U2, other)
    c.st("f", "f")


@case(group=G)
def acl_sgid_cleared_for_nonmember(c):
    os.chmod(".", 0o777)
    c.mkfile("f")
    os.chown("f", 1000, 3000)
    os.chmod("f", 0o2775)
    c.mkfile("g")
    os.chown("g", 1000, 1000)
    os.chmod("g", 0o2775)

    def owner(s):
        s.ok("set on nonmember file", os.setxattr, "f", ACL_ACCESS, acl("u::rwx,u:5:r--,g::rwx,m::rwx,o::r-x"))
        s.st("f", "f")
        s.ok("set on member file", os.setxattr, "g", ACL_ACCESS, acl("u::rwx,u:5:r--,g::rwx,m::rwx,o::r-x"))
        s.st("g", "g")
    c.user(*U1, owner)


@case(group=G)
def acl_default_on_subdir_chain(c):
    os.mkdir("a")
    c.ok("setup acl", os.setxattr, "a", ACL_DEFAULT, acl("u::rwx,u:1000:r-x,g::r-x,m::r-x,o::---"))
    os.makedirs("a/b/c")
    c.mkfile("a/b/c/f")
    for n in ("a/b", "a/b/c", "a/b/c/f"):
        c.st(n, n)
        c.getx("access " + n, n, ACL_ACCESS, show=acl_text)
        c.getx("default " + n, n, ACL_DEFAULT, show=acl_text)

    def u(s):
        s.ok("read f", lambda: os.close(os.open("a/b/c/f", os.O_RDONLY)))
        s.ok("write f", lambda: os.close(os.open("a/b/c/f", os.O_WRONLY)))
    c.user(*U1, u)
