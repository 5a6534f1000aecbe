# SPDX-License-Identifier: MIT
"""ubtrfs mount (FUSE, read-only) against the kernel's read-only mount of the same image."""

import contextlib
import errno
import os
import struct
import subprocess
import tempfile
import time

import pytest

import ubtrfs_testlib as T

# a representative slice: mkfs --rootdir, kernel-written compressed data, subvolumes and
# snapshots, a striped parity profile
IMAGES = ["rootdir-crc32c-16384", "kernel-zstd", "kernel-subvol", "kernel-raid5"]
# what the FUSE mount cannot show as the kernel does: one st_dev, so its own inode numbers
NOT_COMPARED = ("ino", "subvol")


@contextlib.contextmanager
def fuse_mounted(ubtrfs_bin, devices, mnt, options="", foreground=True, log=None):
    """ubtrfs mount, always unmounted afterwards, also when the test fails. In the foreground
    (the default) its stderr is kept: a sanitizer report or a logged error fails the test; given
    a list as `log`, logged errors are expected and the daemon's stderr is appended to it.
    Read-only unless `options` says rw: the tests of reading must leave their images as they were
    (a read-write mount updates access times and commits at the unmount)."""
    opts = options.split(",") if options else []
    if "rw" not in opts and "ro" not in opts:
        options = ",".join(["ro"] + opts)
    mnt = str(mnt)
    os.makedirs(mnt, exist_ok=True)
    args = [str(ubtrfs_bin), "mount"] + (["-o", options] if options else []) + [str(d) for d in devices] + [mnt]
    proc = None
    try:
        if foreground:
            # a file, not a pipe: a daemon logging more than a pipe holds would block on it
            errf = tempfile.TemporaryFile()
            proc = subprocess.Popen(args[:2] + ["-f"] + args[2:], stdout=subprocess.DEVNULL, stderr=errf)
            deadline = time.monotonic() + 60
            while not os.path.ismount(mnt):
                assert proc.poll() is None, "mount exited %d: %s" % (proc.returncode, _read(errf))
                assert time.monotonic() < deadline, "not mounted after 60 s"
                time.sleep(0.02)
        else:
            cp = T.run(args, check=False, timeout=60)
            assert cp.returncode == 0, T.describe(cp)
        yield mnt
    finally:
        T.run(["fusermount3", "-u", "-z", mnt], check=False)
        if proc:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    if proc:
        err = _read(errf)
        if log is not None:
            log.append(err)
        bad = [ln for ln in err.splitlines()
               if "Sanitizer" in ln or "runtime error" in ln or (": error:" in ln and log is None)]
        assert proc.returncode == 0 and not bad, "mount -f exited %d: %s" % (proc.returncode, err[-3000:])


def _read(f):
    f.seek(0)
    return f.read().decode(errors="replace")


def _compare(expected, got, hashes_exp, hashes_got):
    problems = []
    for p in sorted(set(expected) ^ set(got)):
        problems.append("%s entry %r" % ("missing" if p in expected else "unexpected", p))
    for p in sorted(set(expected) & set(got)):
        e, g = expected[p], got[p]
        for k in e:
            if k in NOT_COMPARED:
                continue
            # the kernel makes up a placeholder directory's mtime and ctime at lookup
            if e["type"] == "dir" and e["ino"] == T.EMPTY_SUBVOL_DIR_INO and k in ("mtime", "ctime"):
                continue
            if g.get(k) != e[k]:
                problems.append("%r: %s expected %r got %r" % (p, k, e[k], g.get(k)))
        if hashes_exp.get(p) != hashes_got.get(p):
            problems.append("%r: content differs" % p)
    # inode structure: hard links share one inode number, everything else has its own
    groups_e, groups_g = {}, {}
    for p in set(expected) & set(got):
        groups_e.setdefault((expected[p]["subvol"], expected[p]["ino"]), set()).add(p)
        groups_g.setdefault(got[p]["ino"], set()).add(p)
    if sorted(map(sorted, groups_e.values())) != sorted(map(sorted, groups_g.values())):
        problems.append("inode numbers do not group the entries as the kernel's do")
    return problems


def _fuse_view(mnt, prefix=""):
    entries = T.walk_tree(mnt, btrfs=False)
    hashes = T.hash_files(mnt, entries)
    for p, e in entries.items():
        e["path"] = prefix + p
    return ({prefix + p: e for p, e in entries.items()}, {prefix + p: h for p, h in hashes.items()})


@pytest.mark.parametrize("name", IMAGES)
def test_mount_matches_kernel(ubtrfs_bin, factory, name):
    image = factory.image(name)
    view = factory.view(image)
    with fuse_mounted(ubtrfs_bin, image.devices, factory.mountpoint()) as mnt:
        entries, hashes = _fuse_view(mnt)
        st = os.statvfs(mnt)
    problems = _compare(view.entries, entries, view.hashes, hashes)
    assert not problems, "%s (%s):\n  %s" % (name, image.recipe, "\n  ".join(problems[:40]))
    assert st.f_namemax == 255


def test_mount_subvol(ubtrfs_bin, factory):
    image = factory.image("kernel-subvol")
    view = factory.view(image)
    exp = {p: e for p, e in view.entries.items() if p.startswith("/snap_ro/")}
    exp_h = {p: h for p, h in view.hashes.items() if p in exp}
    sid = next(e["subvol"] for e in exp.values())
    # the smallest cache budget serves the same tree
    for opts in ("subvol=/snap_ro", "subvolid=%d" % sid, "subvol=snap_ro,subvolid=%d,cache=16M" % sid):
        with fuse_mounted(ubtrfs_bin, image.devices, factory.mountpoint(), opts) as mnt:
            entries, hashes = _fuse_view(mnt, "/snap_ro")
        problems = _compare(exp, entries, exp_h, hashes)
        assert not problems, "-o %s:\n  %s" % (opts, "\n  ".join(problems[:40]))
    for opts, why in (("subvolid=987654", "no such subvolume"), ("subvol=/snap_ro/d0", "not a subvolume|No such"),
                      ("rw,usebackuproot", "read-only only"), ("bogus", "unknown option"), ("cache=1M", "bad cache size"),
                      ("cache=lots", "bad cache size")):
        cp = T.run([str(ubtrfs_bin), "mount", "-o", opts, *map(str, image.devices), str(factory.mountpoint())],
                   check=False, timeout=60)
        assert cp.returncode == 2 and cp.stderr, (opts, T.describe(cp))
        assert any(w in cp.stderr.decode() for w in why.split("|")), (opts, T.describe(cp))


def _read_ahead_kb(mnt):
    st = os.stat(mnt)
    with open("/sys/class/bdi/%d:%d/read_ahead_kb" % (os.major(st.st_dev), os.minor(st.st_dev))) as f:
        return int(f.read())


def _wait_read_ahead(mnt, want):
    """The daemon widens the window just after the mount is up: give it a moment."""
    deadline = time.monotonic() + 10
    while _read_ahead_kb(mnt) != want and time.monotonic() < deadline:
        time.sleep(0.05)
    return _read_ahead_kb(mnt)


def test_mount_readahead(ubtrfs_bin, factory):
    """The read-ahead window of the mount's backing device: 4 MiB as the kernel's btrfs gives its own
    mounts, what -o readahead= says, FUSE's own 128 KiB with readahead=0; the bytes read the same."""
    if os.geteuid() != 0:
        pytest.skip("only root may widen a mount's read-ahead")
    image = factory.image("rootdir-crc32c-16384")
    view = factory.view(image)
    big = max((p for p, e in view.entries.items() if e["type"] == "file"), key=lambda p: view.entries[p]["size"])
    for opts, want in (("", 4096), ("readahead=1M", 1024), ("readahead=0", 128)):
        with fuse_mounted(ubtrfs_bin, image.devices, factory.mountpoint(), opts) as mnt:
            assert _wait_read_ahead(mnt, want) == want, opts
            assert T.sha256_file(mnt + big) == view.hashes[big], opts
    # in the background with a relative mount point: the daemon leaves for "/" and must still find it
    mnt = str(factory.mountpoint())
    os.makedirs(mnt, exist_ok=True)
    try:
        cp = subprocess.run([str(ubtrfs_bin), "mount", *map(str, image.devices), os.path.basename(mnt)],
                            cwd=os.path.dirname(mnt), stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
        assert cp.returncode == 0, cp.stderr
        assert _wait_read_ahead(mnt, 4096) == 4096
    finally:
        T.run(["fusermount3", "-u", "-z", mnt], check=False)
    for opts in ("readahead=lots", "readahead=2G", "readahead=-1"):
        cp = T.run([str(ubtrfs_bin), "mount", "-o", opts, *map(str, image.devices), str(factory.mountpoint())],
                   check=False, timeout=60)
        assert cp.returncode == 2 and b"bad readahead" in cp.stderr, (opts, T.describe(cp))


def test_mount_erofs(ubtrfs_bin, factory):
    image = factory.image("rootdir-crc32c-16384")
    with fuse_mounted(ubtrfs_bin, image.devices, factory.mountpoint()) as mnt:
        some_file = next(p for p, e in factory.view(image).entries.items() if e["type"] == "file")
        path = mnt + some_file
        with open(path, "rb") as f:
            assert f.read(1) is not None
        for what in (lambda: open(path, "r+b"), lambda: open(mnt + "/new", "wb"), lambda: os.mkdir(mnt + "/dir"),
                     lambda: os.unlink(path), lambda: os.chmod(path, 0o600),
                     lambda: os.setxattr(path, "user.z", b"1"), lambda: os.rename(path, mnt + "/moved"),
                     lambda: os.symlink("x", mnt + "/link"), lambda: os.truncate(path, 0)):
            with pytest.raises(OSError) as ei:
                what()
            assert ei.value.errno == errno.EROFS, ei.value


# image, the devices left out (indexes into its device list; the devid is the index + 1)
DF_DEGRADED = ("kernel-raid10", "kernel-raid6")
DEGRADED = [("kernel-raid1", [1]), ("kernel-raid10", [2]), ("kernel-raid5", [0]), ("kernel-raid6", [1, 3])]


@pytest.mark.parametrize("name,left_out", DEGRADED, ids=[n for n, _ in DEGRADED])
def test_mount_degraded(ubtrfs_bin, factory, name, left_out):
    """Devices left out: refused naming every missing devid, or with -o degraded the same tree
    and contents as the kernel's mount of the whole filesystem (rebuilt from mirrors or parity)."""
    image = factory.image(name)
    view = factory.view(image)
    devs = [d for i, d in enumerate(image.devices) if i not in left_out]
    cp = T.run([str(ubtrfs_bin), "mount", *map(str, devs), str(factory.mountpoint())], check=False, timeout=60)
    err = cp.stderr.decode(errors="replace")
    assert cp.returncode == 2, T.describe(cp)
    for i in left_out:
        assert "devid %d" % (i + 1) in err, T.describe(cp)
    with fuse_mounted(ubtrfs_bin, devs, factory.mountpoint(), "degraded") as mnt:
        entries, hashes = _fuse_view(mnt)
        df = os.statvfs(mnt)
    problems = _compare(view.entries, entries, view.hashes, hashes)
    assert not problems, "\n  ".join(problems[:40])
    if name in DF_DEGRADED:
        # df leaves the missing devices' unallocated space out, as the kernel's degraded mount
        # does (writable loop devices: see test_mount_df.py)
        with T.mounted(devs, factory.mountpoint(), options="ro,degraded,rescue=nologreplay",
                       readonly=False) as kmnt:
            kdf = os.statvfs(kmnt)
        fields = ("f_blocks", "f_bfree", "f_bavail")
        assert [getattr(df, f) for f in fields] == [getattr(kdf, f) for f in fields], (kdf, df)


def test_mount_degraded_too_few(ubtrfs_bin, factory):
    """More devices missing than the profile tolerates: refused even with -o degraded, naming the
    chunks that cannot be read, and nothing is mounted."""
    image = factory.image("kernel-raid5")
    mnt = factory.mountpoint()
    os.makedirs(str(mnt), exist_ok=True)
    cp = T.run([str(ubtrfs_bin), "mount", "-o", "degraded", image.devices[0], str(mnt)], check=False, timeout=60)
    assert cp.returncode == 2 and b"lost more devices than RAID5 tolerates" in cp.stderr, T.describe(cp)
    assert not os.path.ismount(str(mnt))


def test_mount_refuses_non_btrfs(ubtrfs_bin, factory):
    junk = factory.fresh_path("junk.img")
    with open(junk, "wb") as f:
        f.truncate(64 << 20)
    mnt = factory.mountpoint()
    cp = T.run([str(ubtrfs_bin), "mount", str(junk), str(mnt)], check=False, timeout=60)
    assert cp.returncode == 2 and b"no usable btrfs filesystem" in cp.stderr, T.describe(cp)
    assert not os.path.ismount(str(mnt))


def test_umount(ubtrfs_bin, factory):
    image = factory.image("rootdir-crc32c-16384")
    mnt = str(factory.mountpoint())
    with fuse_mounted(ubtrfs_bin, image.devices, mnt, foreground=False):
        assert os.path.ismount(mnt)
        cp = T.run([str(ubtrfs_bin), "umount", mnt], check=False, timeout=60)
        assert cp.returncode == 0, T.describe(cp)
        assert not os.path.ismount(mnt)


def test_mount_blocks_and_df(ubtrfs_bin, factory):
    """st_blocks (du) and st_blksize of every entry and the size df shows, beside the kernel's mount of the same image."""
    image = factory.image("kernel-zstd")
    with T.mounted(image.devices, factory.mountpoint()) as kmnt, \
            fuse_mounted(ubtrfs_bin, image.devices, factory.mountpoint()) as mnt:
        problems = []
        for p, e in T.walk_tree(kmnt, btrfs=False).items():
            k, u = os.lstat(kmnt + p), os.lstat(mnt + p)
            if (k.st_blocks, k.st_blksize) != (u.st_blocks, u.st_blksize):
                problems.append("%r: blocks/blksize kernel %d/%d, ubtrfs %d/%d"
                                % (p, k.st_blocks, k.st_blksize, u.st_blocks, u.st_blksize))
        ks, us = os.statvfs(kmnt), os.statvfs(mnt)
    # available space: test_mount_df.py, against writable devices (on read-only ones the kernel
    # makes every block group read-only and leaves their free space out)
    fields = ("f_bsize", "f_blocks", "f_bfree", "f_files", "f_namemax")
    assert [getattr(us, f) for f in fields] == [getattr(ks, f) for f in fields]
    assert not problems, "\n  ".join(problems[:40])


def _acl(entries):
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", t, p, i) for t, p, i in entries)


def test_mount_posix_acls(ubtrfs_bin, factory):
    """ACL xattrs come back raw, and the kernel enforces them on the FUSE mount as on its own."""
    img = factory.fresh_path("acl.img")
    with open(img, "wb") as f:
        f.truncate(128 << 20)
    T.run(["mkfs.btrfs", "-q", str(img)])
    nobody = 0xffffffff
    # user 1234 may read, everyone else (1235) nothing
    acl = _acl([(1, 6, nobody), (2, 4, 1234), (4, 0, nobody), (0x10, 4, nobody), (0x20, 0, nobody)])
    with T.mounted([img], factory.mountpoint(), readonly=False) as m:
        with open(m + "/f", "wb") as f:
            f.write(b"secret\n")
        os.mkdir(m + "/d")
        os.setxattr(m + "/f", "system.posix_acl_access", acl)
        os.setxattr(m + "/d", "system.posix_acl_default", acl)

    def who_reads(mnt):
        out = []
        for uid in (1234, 1235):
            # from inside the mount: the scratch directories above it are root's alone
            cp = subprocess.run(["setpriv", "--reuid", str(uid), "--regid", str(uid), "--clear-groups", "cat", "f"],
                                cwd=mnt, capture_output=True, timeout=60)
            out.append((uid, cp.returncode, cp.stdout))
        return out

    def xattrs(mnt):
        return {p: {n: os.getxattr(mnt + p, n) for n in os.listxattr(mnt + p)} for p in ("/f", "/d")}

    with T.mounted([img], factory.mountpoint()) as kmnt:
        expected = (xattrs(kmnt), who_reads(kmnt))
    with fuse_mounted(ubtrfs_bin, [img], factory.mountpoint()) as mnt:
        got = (xattrs(mnt), who_reads(mnt))
    assert got == expected
    assert expected[1][0][1] == 0 and expected[1][1][1] != 0, expected
