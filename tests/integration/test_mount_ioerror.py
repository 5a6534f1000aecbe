# SPDX-License-Identifier: MIT
"""I/O errors while the read-write mount writes (issue 30): read-only from then on, the last commit kept.

The image is served by nbdkit with its error filter (every write fails with EIO while a trigger
file exists) and the mount reaches it as nbd+unix://. Files are written and fsynced (a commit),
more are changed without one, then the trigger is switched on at a chosen moment:

  * fsync: the fsync's log write fails, and the full commit it falls back to;
  * write: a write(2) whose data goes to the device fails;
  * commit: the commit thread's periodic commit (commit=1) fails, nobody calls.

Every case: the failing call gets EIO (the commit thread's has no caller), the daemon logs an
error naming the device (its URI) and that the mount is read-only now; every later change gets
EROFS; reads are still served (the committed files with their bytes). The trigger is then switched
off and the mount unmounted: the unmount writes nothing (the image is unchanged byte for byte). The
image passes btrfs check, and the kernel's mount and a new ubtrfs mount (both replaying the fsync
log) show the last commit and the directory fsync: the files with their data, nothing of what came
after.

Budget: a few seconds per case.
"""

import contextlib
import errno
import hashlib
import os
import random
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

import ubtrfs_testlib as T
from test_mount import fuse_mounted
from test_enospc import progs_check

pytestmark = pytest.mark.skipif(shutil.which("nbdkit") is None, reason="nbdkit is not installed")

MiB = T.MiB


def make_image(path, size=256 * MiB):
    with open(path, "wb") as f:
        f.truncate(size)
    T.run(["mkfs.btrfs", "-f", "-q", str(path)])


class FaultyServer:
    """nbdkit's file plugin behind its error filter: writes fail with EIO while `trigger` exists."""

    def __init__(self, image, work):
        self.sock = str(Path(work) / "faulty.sock")
        self.trigger = Path(work) / "fail-writes"
        argv = ["nbdkit", "-f", "--exit-with-parent", "-U", self.sock, "--filter=error", "file", str(image),
                "error=EIO", "error-pwrite-rate=100%", "error-pwrite-file=%s" % self.trigger,
                "error-zero-rate=100%", "error-zero-file=%s" % self.trigger]
        self.errf = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.errf)
        deadline = time.monotonic() + 30
        while not os.path.exists(self.sock):
            if self.proc.poll() is not None:
                self.errf.seek(0)
                raise AssertionError("nbdkit exited %d: %s" % (self.proc.returncode, self.errf.read().decode()))
            assert time.monotonic() < deadline, "nbdkit did not start"
            time.sleep(0.02)
        self.uri = "nbd+unix:///?socket=%s" % self.sock

    def fail(self, on):
        if on:
            self.trigger.touch()
        elif self.trigger.exists():
            self.trigger.unlink()

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@contextlib.contextmanager
def daemon(ubtrfs_bin, dev, mnt, options, log):
    """`ubtrfs mount -f`, always unmounted; it must exit 1 (a device failed: changes were lost), its
    stderr goes into `log`."""
    os.makedirs(str(mnt), exist_ok=True)
    errf = tempfile.TemporaryFile()
    proc = subprocess.Popen([str(ubtrfs_bin), "mount", "-f", "-o", options, dev, str(mnt)],
                            stdout=subprocess.DEVNULL, stderr=errf)
    try:
        deadline = time.monotonic() + 60
        while not os.path.ismount(str(mnt)):
            assert proc.poll() is None, "mount exited %d" % proc.returncode
            assert time.monotonic() < deadline, "not mounted after 60 s"
            time.sleep(0.02)
        yield str(mnt)
    finally:
        T.run(["fusermount3", "-u", "-z", str(mnt)], check=False)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        errf.seek(0)
        log.append(errf.read().decode(errors="replace"))
    assert proc.returncode == 1, "the daemon exited %d after a device failed (1 expected):\n%s" % (
        proc.returncode, log[-1][-3000:])


def sha_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def expect_errno(err, fn, *args):
    with pytest.raises(OSError) as ei:
        fn(*args)
    assert ei.value.errno == err, "%s%r: %s, expected %s" % (fn.__name__, args, os.strerror(ei.value.errno),
                                                         errno.errorcode[err])


def tree_of(top):
    out = {}
    for root, dirs, files in os.walk(top):
        for n in dirs:
            out[os.path.relpath(os.path.join(root, n), top)] = "dir"
        for n in files:
            with open(os.path.join(root, n), "rb") as f:
                out[os.path.relpath(os.path.join(root, n), top)] = hashlib.sha256(f.read()).hexdigest()
    return out


@pytest.mark.parametrize("moment", ["fsync", "write", "commit"])
def test_write_error_makes_the_mount_read_only(ubtrfs_bin, scratch, moment):
    d = Path(scratch) / ("ioerr-%s" % moment)
    d.mkdir()
    img = d / "fs.img"
    make_image(img)
    rng = random.Random(moment)
    committed = {"keep": "dir"}
    srv = FaultyServer(img, d)
    log = []
    try:
        opts = "rw,commit=%d" % (1 if moment == "commit" else 600)
        with daemon(ubtrfs_bin, srv.uri, d / "mnt", opts, log) as mnt:
            m = Path(mnt)
            (m / "keep").mkdir()
            for i in range(6):
                b = rng.randbytes(rng.choice((100, 5000, 70000, 300000)))
                (m / "keep" / ("f%d" % i)).write_bytes(b)
                committed["keep/f%d" % i] = hashlib.sha256(b).hexdigest()
            fd = os.open(m / "keep", os.O_RDONLY | os.O_DIRECTORY)
            os.fsync(fd)
            os.close(fd)
            if moment == "commit":
                # the commit thread has nothing to commit after the fsync; wait for one quiet round
                time.sleep(1.5)
            # changes after the commit, never committed
            (m / "later").write_bytes(rng.randbytes(20000))
            os.rename(m / "keep" / "f0", m / "keep" / "f0-renamed")
            with open(m / "keep" / "f1", "r+b") as f:
                f.write(b"changed")

            srv.fail(True)
            if moment == "fsync":
                fd = os.open(m / "later", os.O_RDONLY)
                try:
                    expect_errno(errno.EIO, os.fsync, fd)
                finally:
                    os.close(fd)
            elif moment == "write":
                fd = os.open(m / "later", os.O_WRONLY)
                try:
                    expect_errno(errno.EIO, os.pwrite, fd, rng.randbytes(256 * 1024), 0)
                finally:
                    os.close(fd)
            else:
                # the next periodic commit fails; a change after it gets EROFS (mkdir and rmdir
                # write nothing to the device themselves)
                deadline = time.monotonic() + 30
                while True:
                    assert time.monotonic() < deadline, "the commit thread's failed commit was not noticed"
                    try:
                        os.mkdir(m / "probe")
                        os.rmdir(m / "probe")
                    except OSError as e:
                        if e.errno == errno.EROFS:
                            break
                        raise
                    time.sleep(0.2)

            # read-only from now on, for every kind of change
            expect_errno(errno.EROFS, os.mkdir, m / "newdir")
            expect_errno(errno.EROFS, os.open, m / "newfile", os.O_CREAT | os.O_WRONLY, 0o644)
            expect_errno(errno.EROFS, os.unlink, m / "keep" / "f2")
            expect_errno(errno.EROFS, os.rename, m / "keep" / "f3", m / "keep" / "f3b")
            expect_errno(errno.EROFS, os.truncate, m / "keep" / "f3", 1)
            expect_errno(errno.EROFS, os.chmod, m / "keep" / "f3", 0o600)
            expect_errno(errno.EROFS, os.setxattr, m / "keep" / "f3", "user.x", b"1")
            fd = os.open(m / "keep" / "f4", os.O_WRONLY)
            try:
                expect_errno(errno.EROFS, os.pwrite, fd, b"x", 0)
                expect_errno(errno.EROFS, os.fsync, fd)
            finally:
                os.close(fd)
            # reads are served: the committed files that nothing changed afterwards
            for i in (2, 3, 4, 5):
                with open(m / "keep" / ("f%d" % i), "rb") as f:
                    # the kernel's cached pages go: the bytes come from the daemon
                    os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
                    got = hashlib.sha256(f.read()).hexdigest()
                assert got == committed["keep/f%d" % i], "keep/f%d reads wrong after the error" % i
            # the unmount must not write: the device works again, and the image stays as it is
            srv.fail(False)
            before = sha_file(img)
        after = sha_file(img)
    finally:
        srv.close()
    text = log[0] if log else ""
    assert before == after, "the unmount of a read-only (failed) mount wrote to the device"
    errors = [ln for ln in text.splitlines() if ": error:" in ln]
    assert any(srv.uri in ln or "faulty.sock" in ln for ln in errors), \
        "no error names the device:\n" + text[-3000:]
    assert any("EROFS" in ln or "read-only" in ln for ln in errors), \
        "no error says the mount is read-only now:\n" + text[-3000:]
    print("\n".join(errors))
    bad = [ln for ln in text.splitlines() if "Sanitizer" in ln or "runtime error" in ln]
    assert not bad, text[-3000:]

    progs_check([img])
    # the directory fsync went to the log tree (issue 31): the kernel replays it, so its mount is
    # read-write, on a copy, and the image stays as the daemon left it for the ubtrfs mount below
    kimg = d / "kernel-copy.img"
    T.run(["cp", "--sparse=always", str(img), str(kimg)])
    with T.mounted([kimg], d / "kmnt", readonly=False) as km:
        got = tree_of(km)
    os.unlink(kimg)
    assert got == committed, "the kernel's mount does not show the last commit and the fsync log: %r" % sorted(
        set(got.items()) ^ set(committed.items()))[:10]
    with fuse_mounted(ubtrfs_bin, [img], d / "umnt", "rw") as um:
        got2 = tree_of(um)
    assert got2 == committed, "a new ubtrfs mount does not show the last commit"
    progs_check([img])
    T.rmtree(d)

