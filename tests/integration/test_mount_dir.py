# SPDX-License-Identifier: MIT
"""Directory listing on the FUSE mount (readdir and readdirplus, many FUSE calls per
directory) against the kernel's read-only mount of the same image."""

import ctypes
import os
import time

import ubtrfs_testlib as T
from test_mount import fuse_mounted

# entries in the big directory; a listing takes many FUSE calls, each resuming at an offset
BIG = 100000 if T.LONG_TESTS else 6000
SEED = 20261204


def _populate(root, n):
    """One directory of n entries of every type (hard links too), names in no sorted order."""
    big = os.path.join(root, "big")
    os.makedirs(big)
    for i in range(n):
        name = os.path.join(big, "e%07x" % ((i * 2654435761 + SEED) % (1 << 28)))
        kind = i % 10
        if kind < 6:
            with open(name, "wb") as f:
                f.write(b"x" * (i % 3000))
        elif kind == 6:
            os.symlink("target-%d" % i, name)
        elif kind == 7:
            os.mkdir(name)
        elif kind == 8:
            os.mkfifo(name)
        else:
            os.link(os.path.join(big, "e%07x" % (((i - 1) * 2654435761 + SEED) % (1 << 28))), name)
        if i % 97 == 0:
            os.utime(name, ns=(i * 1000003, i * 999983), follow_symlinks=False)


def _image(factory):
    def build(d):
        src = d / "src"
        _populate(str(src), BIG)
        img = d / "big.img"
        with open(img, "wb") as f:
            f.truncate(512 * T.MiB)
        T.run(["mkfs.btrfs", "-f", "-q", "--rootdir", str(src), str(img)], timeout=900)
        T.rmtree(src)
        return str(img)
    _, img = T.shared_build("image-bigdir-%d" % BIG, build, fallback_dir=factory.base / "shared")
    return img


def _listing(mnt, with_stat):
    """Names in readdir order, d_type as readdir gives it, and lstat of each when asked
    (stat after listing makes the kernel use readdirplus for the later calls too)."""
    out = []
    with os.scandir(os.path.join(mnt, "big")) as it:
        for de in it:
            t = ("dir" if de.is_dir(follow_symlinks=False) else "link" if de.is_symlink()
                 else "file" if de.is_file(follow_symlinks=False) else "other")
            row = [de.name, t]
            if with_stat:
                st = de.stat(follow_symlinks=False)
                row += [st.st_mode, st.st_nlink, st.st_uid, st.st_gid, st.st_size, st.st_blocks,
                        st.st_atime_ns, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
            out.append(row)
    return out


def _inode_groups(rows):
    groups = {}
    for r in rows:
        groups.setdefault(r[-1], []).append(r[0])
    return sorted(sorted(g) for g in groups.values())


def test_mount_big_directory(ubtrfs_bin, factory):
    img = _image(factory)
    ls = ["ls", "-l", "--full-time", "-U"]
    with T.mounted([img], factory.mountpoint()) as kmnt:
        kern_plain, kern = _listing(kmnt, False), _listing(kmnt, True)
        kls = T.run(ls + [os.path.join(kmnt, "big")], timeout=300).stdout
    with fuse_mounted(ubtrfs_bin, [img], factory.mountpoint()) as mnt:
        t0 = time.monotonic()
        plain = _listing(mnt, False)
        t_plain = time.monotonic() - t0
        full = _listing(mnt, True)
        uls = T.run(ls + [os.path.join(mnt, "big")], timeout=300).stdout
    assert len(kern_plain) == BIG
    assert plain == kern_plain, "readdir: names or types differ from the kernel's (%d vs %d entries)" % (
        len(plain), len(kern_plain))
    # st_ino is ubtrfs's own: compare everything else, and how inode numbers group the names
    assert [r[:-1] for r in full] == [r[:-1] for r in kern]
    assert _inode_groups(full) == _inode_groups(kern)
    assert uls == kls
    print("listing %d entries: %.2f s" % (BIG, t_plain))


def test_mount_readdir_seek(ubtrfs_bin, factory):
    """telldir/seekdir: a listing resumed from any offset the mount handed out goes on from there."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.opendir.restype = ctypes.c_void_p
    libc.opendir.argtypes = [ctypes.c_char_p]
    libc.readdir.restype = ctypes.c_void_p
    libc.readdir.argtypes = [ctypes.c_void_p]
    libc.telldir.restype = ctypes.c_long
    libc.telldir.argtypes = [ctypes.c_void_p]
    libc.seekdir.argtypes = [ctypes.c_void_p, ctypes.c_long]
    libc.closedir.argtypes = [ctypes.c_void_p]

    def name_of(ent):
        # struct dirent on x86-64: d_ino 8, d_off 8, d_reclen 2, d_type 1, then d_name
        return ctypes.string_at(ent + 19).decode()

    img = _image(factory)
    with fuse_mounted(ubtrfs_bin, [img], factory.mountpoint()) as mnt:
        dirp = libc.opendir(os.fsencode(os.path.join(mnt, "big")))
        assert dirp
        try:
            seen = []
            while True:
                off = libc.telldir(dirp)
                ent = libc.readdir(dirp)
                if not ent:
                    break
                seen.append((off, name_of(ent)))
            assert sorted(n for _, n in seen) == sorted([".", ".."] + os.listdir(os.path.join(mnt, "big")))
            for i in (len(seen) - 1, len(seen) // 2, 5, 1000, 0):
                libc.seekdir(dirp, seen[i][0])
                ent = libc.readdir(dirp)
                assert ent and name_of(ent) == seen[i][1], i
        finally:
            libc.closedir(dirp)
