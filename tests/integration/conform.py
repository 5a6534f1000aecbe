# SPDX-License-Identifier: MIT
"""The harness of the POSIX conformance suite (test_mount_conformance.py).

A case is a small function of one argument, a `Ctx`, registered with @case. It runs in a
directory of its own (its current directory) on a mount, as root with umask 022, in a process
of its own (forked), and calls the system through the context, which records what it observes:
every return value or errno, stat fields, which of atime/mtime/ctime an operation changed. A
step can run as another user (`c.user(uid, gid, groups, fn)`: a child process that drops to
those credentials with setgroups/setresgid/setresuid). The suite runs every case on the
kernel's btrfs mount and then on the ubtrfs mount, and the two lists of observations must be
equal, item for item.

A case whose difference cannot be fixed under FUSE says so: `known={label: value}` names the
observations that differ and the value ubtrfs gives for each (what docs/mount-conformance.md
documents); the rest of the case must still match, and ubtrfs must give exactly that value.

Times are compared as "changed or not" (and, where one operation sets two of them, whether they
are equal), never as clock values: the kernel stamps times with a coarse clock and ubtrfs with
a fine one. The kernel's btrfs has multigrain timestamps: a ctime somebody looked at (stat)
changes at the next change for certain, so a case looks at the times before the operation it
judges (`c.tsnap`).
"""

import ctypes
import errno
import os
import pickle
import select
import signal
import stat
import struct
import time
import traceback

CASES = []
_NAMES = set()


def case(fn=None, *, known=None, group=None):
    """Register a case; `known` maps the labels of documented differences to ubtrfs's value."""
    def reg(f):
        add((group + "." if group else "") + f.__name__, f, known)
        return f
    return reg(fn) if fn else reg


def add(name, fn, known=None):
    """Register a generated case under `name`."""
    assert name not in _NAMES, "two cases named %s" % name
    _NAMES.add(name)
    CASES.append(Case(name, fn, known or {}))


class Case:
    __slots__ = ("name", "fn", "known")

    def __init__(self, name, fn, known):
        self.name = name
        self.fn = fn
        self.known = known


# ---------------------------------------------------------------------------- libc calls Python lacks

libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD = -100
AT_SYMLINK_NOFOLLOW = 0x100
AT_EMPTY_PATH = 0x1000
AT_SYMLINK_FOLLOW = 0x400
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
RENAME_WHITEOUT = 4
UTIME_NOW = (1 << 30) - 1
UTIME_OMIT = (1 << 30) - 2
O_TMPFILE = getattr(os, "O_TMPFILE", 0o20200000)


def _check(r, what=""):
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), what)
    return r


def renameat2(old, new, flags=0, olddir=AT_FDCWD, newdir=AT_FDCWD):
    _check(libc.renameat2(olddir, os.fsencode(old), newdir, os.fsencode(new), ctypes.c_uint(flags)), old)


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def utimensat(path, atime, mtime, flags=0, dirfd=AT_FDCWD):
    """atime/mtime: (sec, nsec), or UTIME_NOW / UTIME_OMIT; None for both: NULL (now)."""
    def ts(v):
        return _Timespec(0, v) if isinstance(v, int) else _Timespec(*v)
    arr = None
    if atime is not None or mtime is not None:
        arr = (_Timespec * 2)(ts(atime), ts(mtime))
    p = os.fsencode(path) if path is not None else None
    _check(libc.utimensat(dirfd, p, arr, flags), path)


def futimens(fd, atime, mtime):
    utimensat(None, atime, mtime, 0, fd)


def linkat(old, new, flags=0, olddir=AT_FDCWD, newdir=AT_FDCWD):
    _check(libc.linkat(olddir, os.fsencode(old), newdir, os.fsencode(new), flags), old)


def fallocate(fd, mode, off, length):
    _check(libc.fallocate(ctypes.c_int(fd), ctypes.c_int(mode), ctypes.c_longlong(off), ctypes.c_longlong(length)))


def fchmodat(path, mode, flags=0, dirfd=AT_FDCWD):
    _check(libc.fchmodat(dirfd, os.fsencode(path), ctypes.c_uint(mode), flags), path)


def readlinkat_empty(fd):
    """readlinkat(fd, "") of an O_PATH descriptor of a symlink: its target."""
    buf = ctypes.create_string_buffer(8192)
    n = _check(libc.readlinkat(fd, b"", buf, 8192))
    return buf.raw[:n]


def mknodat(path, mode, dev=0):
    _check(libc.mknod(os.fsencode(path), ctypes.c_uint(mode), ctypes.c_ulong(dev)), path)


# ---------------------------------------------------------------------------- POSIX ACLs as xattrs

ACL_USER_OBJ, ACL_USER, ACL_GROUP_OBJ, ACL_GROUP, ACL_MASK, ACL_OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
ACL_UNDEFINED_ID = 0xFFFFFFFF
ACL_ACCESS = "system.posix_acl_access"
ACL_DEFAULT = "system.posix_acl_default"
_TAGS = {"u": ACL_USER, "g": ACL_GROUP, "m": ACL_MASK, "o": ACL_OTHER}


def acl(text):
    """The xattr of an ACL written as setfacl writes one: "u::rw-,u:1000:r--,g::r--,m::r--,o::---"."""
    ents = []
    for part in text.split(","):
        kind, who, perm = part.split(":")
        bits = (4 if "r" in perm else 0) | (2 if "w" in perm else 0) | (1 if "x" in perm else 0)
        if kind == "u" and who == "":
            tag = ACL_USER_OBJ
        elif kind == "g" and who == "":
            tag = ACL_GROUP_OBJ
        else:
            tag = _TAGS[kind]
        ident = int(who) if who else ACL_UNDEFINED_ID
        ents.append((tag, bits, ident))
    # the kernel keeps (and checks) entries in tag order, then id order
    ents.sort(key=lambda e: (e[0], e[2]))
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in ents)


def acl_text(value):
    """An ACL xattr back as text (what both mounts must agree on), or the raw bytes if odd."""
    if len(value) < 4 or (len(value) - 4) % 8 or struct.unpack_from("<I", value)[0] != 2:
        return "raw:" + value.hex()
    out = []
    names = {ACL_USER_OBJ: "u:", ACL_USER: "u", ACL_GROUP_OBJ: "g:", ACL_GROUP: "g", ACL_MASK: "m:",
             ACL_OTHER: "o:"}
    for off in range(4, len(value), 8):
        tag, perm, ident = struct.unpack_from("<HHI", value, off)
        p = ("r" if perm & 4 else "-") + ("w" if perm & 2 else "-") + ("x" if perm & 1 else "-")
        n = names.get(tag, "?%d" % tag)
        out.append("%s%s:%s" % (n, "" if n.endswith(":") else ":%d" % ident, p))
    return ",".join(out)


# ---------------------------------------------------------------------------- the context a case runs with

def _errname(e):
    return errno.errorcode.get(e, str(e))


# st_blocks is left out by default: the kernel's btrfs counts data waiting for writeback too, and for a
# moment both that and the extent written, so it is stable only once a file was synced (Ctx.st_synced)
STAT_FIELDS = ("mode", "nlink", "uid", "gid", "size", "rdev", "blksize")


class Ctx:
    def __init__(self):
        self.obs = []

    # ---- recording
    def rec(self, label, value):
        self.obs.append((label, value))

    def ok(self, label, fn, *args, **kw):
        """Run fn; record "ok" or the errno's name; return its result (None on error)."""
        try:
            r = fn(*args, **kw)
        except OSError as e:
            self.rec(label, _errname(e.errno))
            return None
        self.rec(label, "ok")
        return r

    def val(self, label, fn, *args, **kw):
        """Run fn; record its result (or the errno's name); return it."""
        try:
            r = fn(*args, **kw)
        except OSError as e:
            self.rec(label, _errname(e.errno))
            return None
        self.rec(label, r)
        return r

    def err(self, label, fn, *args, **kw):
        return self.ok(label, fn, *args, **kw)

    # ---- files
    def open(self, label, path, flags, mode=0o644, dirfd=None):
        try:
            fd = os.open(path, flags, mode, dir_fd=dirfd)
        except OSError as e:
            self.rec(label, _errname(e.errno))
            return None
        self.rec(label, "ok")
        return fd

    def mkfile(self, path, data=b"", mode=None):
        """Setup (not recorded): a regular file with `data`, chmod'ed to `mode` if given."""
        fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        try:
            if data:
                os.write(fd, data)
        finally:
            os.close(fd)
        if mode is not None:
            os.chmod(path, mode)

    def st(self, label, path, follow=False, fields=STAT_FIELDS, fd=None):
        try:
            s = os.fstat(fd) if fd is not None else os.stat(path, follow_symlinks=follow)
        except OSError as e:
            self.rec(label, _errname(e.errno))
            return None
        self.rec(label, self.stat_tuple(s, fields))
        return s

    def st_synced(self, label, path=None, fd=None):
        """The stat fields and st_blocks of a regular file, after fsync (what it holds on disk)."""
        own = fd is None
        if own:
            fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            return self.st(label, None, fields=STAT_FIELDS + ("blocks",), fd=fd)
        finally:
            if own:
                os.close(fd)

    @staticmethod
    def stat_tuple(s, fields=STAT_FIELDS):
        out = []
        for f in fields:
            if f == "mode":
                out.append("%o" % s.st_mode)
            elif f == "rdev":
                out.append("%d:%d" % (os.major(s.st_rdev), os.minor(s.st_rdev)))
            else:
                out.append(getattr(s, "st_" + f))
        return tuple(out)

    # ---- times
    def tsnap(self, path, follow=False, fd=None):
        s = os.fstat(fd) if fd is not None else os.stat(path, follow_symlinks=follow)
        return (s.st_atime_ns, s.st_mtime_ns, s.st_ctime_ns)

    def tchg(self, label, path, before, follow=False, fd=None, rel=False):
        """Which of atime, mtime, ctime changed since `before` (upper case: changed); with
        rel, also whether the new mtime equals the new ctime (and atime the new mtime)."""
        after = self.tsnap(path, follow, fd)
        v = "".join(ch.upper() if a != b else ch for ch, a, b in zip("amc", before, after))
        if rel:
            v += " a%sm m%sc" % ("=" if after[0] == after[1] else "!", "=" if after[1] == after[2] else "!")
        self.rec(label, v)
        return after

    def set_old_times(self, path, follow=False):
        """Setup: atime and mtime far in the past (ctime becomes now), so that any update shows."""
        utimensat(path, (1000000000, 0), (1000000000, 0), 0 if follow else AT_SYMLINK_NOFOLLOW)

    # ---- xattrs
    def getx(self, label, path, name, follow=False, show=None):
        try:
            v = os.getxattr(path, name, follow_symlinks=follow)
        except OSError as e:
            self.rec(label, _errname(e.errno))
            return None
        self.rec(label, show(v) if show else v)
        return v

    def listx(self, label, path, follow=False):
        try:
            v = sorted(os.listxattr(path, follow_symlinks=follow))
        except OSError as e:
            self.rec(label, _errname(e.errno))
            return None
        self.rec(label, tuple(v))
        return v

    # ---- another user
    def user(self, uid, gid, groups, fn):
        """Run fn(ctx) in a child process as uid/gid with the supplementary `groups`."""
        def body(sub):
            os.setgroups(list(groups))
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
            fn(sub)
        self.obs.extend(_in_child(body, timeout=30))

    def forked(self, fn):
        """Run fn(ctx) in a child process with the same credentials (for umask, cwd, signals)."""
        self.obs.extend(_in_child(fn, timeout=30))


class CaseError(Exception):
    """A case that raised (a bug of the case or a hang): the run reports it whole."""


def _in_child(fn, timeout):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(r)
            ctx = Ctx()
            try:
                fn(ctx)
                out = ("ok", ctx.obs)
            except BaseException:
                out = ("exception", ctx.obs, traceback.format_exc())
            data = pickle.dumps(out)
            view = memoryview(data)
            while view:
                view = view[os.write(w, view):]
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    chunks = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                raise CaseError("timed out after %d s (a hang?); observed so far unknown" % timeout)
            ready, _, _ = select.select([r], [], [], left)
            if not ready:
                continue
            b = os.read(r, 1 << 16)
            if not b:
                break
            chunks.append(b)
    finally:
        os.close(r)
    _, status = os.waitpid(pid, 0)
    if not chunks:
        raise CaseError("the case's process died (status %#x)" % status)
    out = pickle.loads(b"".join(chunks))
    if out[0] != "ok":
        raise CaseError("the case raised, after %r:\n%s" % (out[1][-5:], out[2]))
    return out[1]


def run_all(cases, top, progress_timeout=60):
    """{case name: observations, or the text of a CaseError}. One child process runs every case
    in turn, each in a new directory below `top` as its current directory, as root with umask
    022 (a step as another user forks again); a case that makes no progress for
    `progress_timeout` seconds (a hang) ends the run: it and the cases after it are errors."""
    names = [cs.name for cs in cases]
    for n in names:
        d = os.path.join(top, n)
        os.mkdir(d)
        os.chmod(d, 0o755)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(r)
            for cs in cases:
                os.chdir(os.path.join(top, cs.name))
                os.umask(0o022)
                ctx = Ctx()
                try:
                    cs.fn(ctx)
                    out = (cs.name, ctx.obs)
                except CaseError as e:
                    out = (cs.name, "case error: %s" % e)
                except BaseException:
                    out = (cs.name, "case error: the case raised, after %r:\n%s" % (ctx.obs[-5:],
                                                                                     traceback.format_exc()))
                data = pickle.dumps(out)
                data = struct.pack("<I", len(data)) + data
                view = memoryview(data)
                while view:
                    view = view[os.write(w, view):]
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    out, buf = {}, b""
    deadline = time.monotonic() + progress_timeout
    try:
        while len(out) < len(cases):
            left = deadline - time.monotonic()
            if left <= 0:
                os.kill(pid, signal.SIGKILL)
                break
            ready, _, _ = select.select([r], [], [], left)
            if not ready:
                continue
            b = os.read(r, 1 << 16)
            if not b:
                break
            buf += b
            while len(buf) >= 4 and len(buf) >= 4 + struct.unpack_from("<I", buf)[0]:
                n = struct.unpack_from("<I", buf)[0]
                name, obs = pickle.loads(buf[4:4 + n])
                buf = buf[4 + n:]
                out[name] = obs
                deadline = time.monotonic() + progress_timeout
    finally:
        os.close(r)
        os.waitpid(pid, 0)
    for n in names:
        if n not in out:
            out[n] = "case error: not run: the run stopped (a hang or a crash) at %s" % (
                next(m for m in names if m not in out))
    return out


def compare(cases, kernel, ubtrfs):
    """(matched names, [(name, why)] of differences, [(name, why)] of known differences that
    no longer hold as documented)."""
    matched, diffs, stale = [], [], []
    for cs in cases:
        k, u = kernel.get(cs.name), ubtrfs.get(cs.name)
        if isinstance(k, str) or isinstance(u, str):
            diffs.append((cs.name, "kernel: %s\nubtrfs: %s" % (k if isinstance(k, str) else "ran",
                                                              u if isinstance(u, str) else "ran")))
            continue
        why = _diff(cs, k, u)
        if why:
            (stale if cs.known and why[0] == "known" else diffs).append((cs.name, why[1]))
        else:
            matched.append(cs.name)
    return matched, diffs, stale


def _diff(cs, k, u):
    if len(k) != len(u) or [a[0] for a in k] != [b[0] for b in u]:
        return ("shape", "different observations:\n kernel %r\n ubtrfs %r" % (k, u))
    for (label, kv), (_, uv) in zip(k, u):
        if label in cs.known:
            want = cs.known[label]
            if uv != want:
                return ("known", "%s: documented as ubtrfs %r (kernel %r), got %r" % (label, want, kv, uv))
            if kv == uv:
                return ("known", "%s: documented as a difference, but both give %r now" % (label, uv))
            continue
        if kv != uv:
            return ("diff", "%s: kernel %r, ubtrfs %r" % (label, kv, uv))
    return None
