# SPDX-License-Identifier: MIT
"""ubtrfs filesystem df|usage|du|label|sync, offline and on mounts, against btrfs-progs (issue 30).

The oracle is btrfs-progs on the kernel's read-write mount of the same image: `btrfs filesystem df`
and `usage` (every unit mode tried), `du` over a tree with every kind of sharing btrfs reports
(reflinks to other files, clones inside one file, extents split by a write, a snapshot sharing
leaves, compressed, preallocated and inline data, holes, hard links). The same questions are asked
of the unmounted image (the library), of the kernel's mount through our command (its ioctls) and of
a ubtrfs mount (the daemon's). Device paths differ (loop devices, image files): they are mapped to
the image's name, and each section's device lines compared as a set (btrfs-progs sorts them by path).
"""

import fcntl
import os
import random
import re
import signal
import struct
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

import ubtrfs_testlib as T
from test_mount import fuse_mounted

MiB = T.MiB
FICLONERANGE = 0x4020940d


def make_image(paths, size=256 * MiB, opts=()):
    for p in paths:
        with open(p, "wb") as f:
            f.truncate(size)
    T.run(["mkfs.btrfs", "-f", "-q", *opts, *[str(p) for p in paths]])


def progs_check(img):
    cp = T.run(["btrfs", "check", "--readonly", str(img)], check=False, timeout=600)
    text = (cp.stdout + cp.stderr).decode("utf-8", "replace")
    assert cp.returncode == 0 and "no error found" in text, "btrfs check:\n" + text[-4000:]


def loop_files():
    """loop device -> its backing file (for mapping device paths in btrfs-progs' output)."""
    out = T.run(["losetup", "--list", "--noheadings", "--output", "NAME,BACK-FILE"]).stdout.decode()
    return {ln.split(None, 1)[0]: ln.split(None, 1)[1].strip() for ln in out.splitlines() if len(ln.split(None, 1)) == 2}


def canonical(text, devmap):
    """Device paths by image name; each usage section's device lines as a sorted set."""
    for dev, name in sorted(devmap.items(), key=lambda kv: -len(kv[0])):
        text = text.replace(dev, name)
    sections, cur = [], []
    for line in text.split("\n"):
        if line.startswith("   ") and "\t" in line:
            cur.append(line)
            continue
        if cur:
            sections.append("\n".join(sorted(cur)))
            cur = []
        sections.append(line)
    if cur:
        sections.append("\n".join(sorted(cur)))
    return "\n".join(sections)


def data(seed, n, kind="random"):
    return T.file_bytes(random.Random(seed), kind, n)


def populate(mnt):
    """Every kind of extent and sharing `du` tells apart, through the kernel (or a ubtrfs mount)."""
    m = str(mnt)
    os.makedirs(m + "/d/e")
    with open(m + "/a", "wb") as f:
        f.write(data(1, 200000))
    with open(m + "/plain", "wb") as f:
        f.write(data(2, 100000))
    with open(m + "/inline", "wb") as f:
        f.write(data(3, 700))
    with open(m + "/holes", "wb") as f:
        f.seek(65536)
        f.write(data(4, 8192))
        f.seek(300000)
        f.write(data(5, 5000))
    fd = os.open(m + "/self", os.O_RDWR | os.O_CREAT)
    os.write(fd, data(6, 131072))
    os.fsync(fd)
    fcntl.ioctl(fd, FICLONERANGE, struct.pack("<qQQQ", fd, 0, 65536, 65536))
    os.close(fd)
    fd = os.open(m + "/split", os.O_RDWR | os.O_CREAT)
    os.write(fd, data(7, 131072))
    os.fsync(fd)
    os.pwrite(fd, data(8, 4096), 32768)
    os.close(fd)
    fd = os.open(m + "/prealloc", os.O_RDWR | os.O_CREAT)
    T.fallocate(fd, 0, 0, 65536)
    os.close(fd)
    with open(m + "/d/e/zipped", "wb") as f:
        f.write(data(9, 300000, "text"))
    os.setxattr(m + "/d/e", "btrfs.compression", b"zstd")
    with open(m + "/d/e/zipped2", "wb") as f:
        f.write(data(10, 300000, "text"))
    os.link(m + "/a", m + "/d/hardlink")
    os.symlink("a", m + "/sym")
    os.mkfifo(m + "/fifo")
    os.sync()


def clone(src, dst):
    """A reflink copy: copy_file_range, which the kernel and a ubtrfs mount both make a clone."""
    with open(src, "rb") as fi, open(dst, "wb") as fo:
        n = os.fstat(fi.fileno()).st_size
        while n > 0:
            k = os.copy_file_range(fi.fileno(), fo.fileno(), n)
            assert k > 0
            n -= k


@pytest.fixture(scope="module")
def du_image(scratch):
    """An image the kernel filled, with a subvolume and a snapshot of it."""
    d = Path(scratch) / "fs-du"
    d.mkdir()
    img = d / "du.img"
    make_image([img])
    with T.mounted([img], d / "mnt", readonly=False) as km:
        T.run(["btrfs", "subvolume", "create", km + "/sv"])
        populate(km + "/sv")
        clone(km + "/sv/a", km + "/sv/a_ref")
        T.run(["btrfs", "subvolume", "snapshot", km + "/sv", km + "/snap"])
        # a write after the snapshot: the source's leaf is copied, its new extent its own
        with open(km + "/sv/plain", "r+b") as f:
            f.seek(8192)
            f.write(data(11, 4096))
        os.sync()
    return img


DU_ARGS = [[], ["-s"], ["--raw"], ["--kbytes", "--si"]]


@pytest.mark.parametrize("args", DU_ARGS)
def test_du_like_the_kernel(ubtrfs_bin, scratch, du_image, args):
    d = du_image.parent
    with T.mounted([du_image], d / "kmnt", readonly=True) as km:
        want = T.run(["btrfs", "filesystem", "du", *args, km, km + "/sv/a", km + "/snap"]).stdout.decode()
        # our command on the kernel's mount: through FIEMAP
        cp = T.ubtrfs("filesystem", "du", *args, km, km + "/sv/a", km + "/snap")
        assert cp.returncode == 0, T.describe(cp)
        assert cp.stdout.decode() == want
        want = want.replace(km, "")
    # offline: the same lines, paths inside the filesystem
    cp = T.ubtrfs("filesystem", "du", *args, "--path", "/", "--path", "/sv/a", "--path", "/snap", du_image)
    assert cp.returncode == 0, T.describe(cp)
    got = cp.stdout.decode()
    assert [ln.replace("  //", "  /") for ln in got.split("\n")] == \
        [ln if not ln.endswith("  ") else ln + "/" for ln in want.split("\n")], "\n" + want + "\n---\n" + got


def test_du_on_ubtrfs_mount(ubtrfs_bin, scratch, du_image):
    """The daemon's fiemap: the same sharing as the kernel's, for what the kernel wrote and for what
    the mount itself writes (a reflink, a snapshot)."""
    d = Path(scratch) / "fs-du-fuse"
    d.mkdir()
    img = d / "u.img"
    T.copy_sparse(du_image, img)
    with fuse_mounted(ubtrfs_bin, [img], d / "mnt", "rw") as um:
        cp = T.ubtrfs("filesystem", "du", um)
        assert cp.returncode == 0, T.describe(cp)
        got = cp.stdout.decode().replace(um, "M")
        with open(um + "/sv/new", "wb") as f:
            f.write(data(12, 90000))
        clone(um + "/sv/new", um + "/sv/new_ref")
        cp = T.ubtrfs("subvolume", "snapshot", "-r", um + "/sv", um + "/snap2")
        assert cp.returncode == 0, T.describe(cp)
        cp = T.ubtrfs("filesystem", "du", "--raw", um)
        assert cp.returncode == 0, T.describe(cp)
        got2 = cp.stdout.decode().replace(um, "M")
    with T.mounted([du_image], d / "kmnt", readonly=True) as km:
        want = T.run(["btrfs", "filesystem", "du", km]).stdout.decode().replace(km, "M")
    assert got == want
    progs_check(img)
    with T.mounted([img], d / "kmnt", readonly=True) as km:
        want2 = T.run(["btrfs", "filesystem", "du", "--raw", km]).stdout.decode().replace(km, "M")
    assert got2 == want2
    T.rmtree(d)


LAYOUTS = [
    ("single", 1, []),
    ("raid1", 2, ["-d", "raid1", "-m", "raid1"]),
    ("raid10-mixed", 4, ["-d", "raid10", "-m", "raid1c3"]),
    ("raid5", 3, ["-d", "raid5", "-m", "raid1"]),
]
UNITS = [[], ["-b"], ["-k"], ["-H"], ["-g", "--si"]]


@pytest.mark.parametrize("name,ndev,opts", LAYOUTS, ids=[x[0] for x in LAYOUTS])
def test_df_usage_like_the_kernel(ubtrfs_bin, scratch, name, ndev, opts):
    d = Path(scratch) / ("fs-df-" + name)
    d.mkdir()
    imgs = [d / ("dev%d.img" % i) for i in range(ndev)]
    make_image(imgs, opts=opts)
    with T.mounted(imgs, d / "mnt", readonly=False) as km:
        for i in range(6):
            with open("%s/f%d" % (km, i), "wb") as f:
                f.write(data(i, 3 * MiB if i % 2 else 20000))
        os.sync()
    outs = {}
    with T.mounted(imgs, d / "mnt", readonly=False) as km:
        devmap = {dev: Path(f).name for dev, f in loop_files().items() if f in [str(i) for i in imgs]}
        for u in UNITS:
            for cmd in ("df", "usage"):
                want = T.run(["btrfs", "filesystem", cmd, *u, km]).stdout.decode()
                cp = T.ubtrfs("filesystem", cmd, *u, km)
                assert cp.returncode == 0, T.describe(cp)
                outs[(cmd, tuple(u))] = canonical(want, devmap)
                assert canonical(cp.stdout.decode(), devmap) == outs[(cmd, tuple(u))], \
                    "%s %s on the kernel's mount:\n%s\n---\n%s" % (cmd, u, want, cp.stdout.decode())
    devmap = {str(i): i.name for i in imgs}
    for (cmd, u), want in outs.items():
        cp = T.ubtrfs("filesystem", cmd, *u, *imgs)
        assert cp.returncode == 0, T.describe(cp)
        assert canonical(cp.stdout.decode(), devmap) == want, "%s %s offline:\n%s\n---\n%s" % (
            cmd, u, want, cp.stdout.decode())
    # a ubtrfs mount answers the same (its global reserve included), its devices by absolute path
    with fuse_mounted(ubtrfs_bin, imgs, d / "umnt", "rw") as um:
        for (cmd, u), want in outs.items():
            cp = T.ubtrfs("filesystem", cmd, *u, um)
            assert cp.returncode == 0, T.describe(cp)
            assert canonical(cp.stdout.decode(), devmap) == want, "%s %s on the ubtrfs mount:\n%s\n---\n%s" % (
                cmd, u, want, cp.stdout.decode())
        cp = T.ubtrfs("filesystem", "df", "--json", um)
        assert cp.returncode == 0 and '"bg-type": "Data"' in cp.stdout.decode(), T.describe(cp)
    T.rmtree(d)


def test_label(ubtrfs_bin, scratch):
    d = Path(scratch) / "fs-label"
    d.mkdir()
    img = d / "l.img"
    make_image([img])
    cp = T.ubtrfs("filesystem", "label", img)
    assert cp.returncode == 0 and cp.stdout == b"\n", T.describe(cp)
    cp = T.ubtrfs("filesystem", "label", img, "offline label")
    assert cp.returncode == 0, T.describe(cp)
    assert T.run(["btrfs", "filesystem", "label", img]).stdout == b"offline label\n"
    cp = T.ubtrfs("filesystem", "label", img, "x" * 256)
    assert cp.returncode == 2 and b"too long" in cp.stderr, T.describe(cp)
    progs_check(img)
    with fuse_mounted(ubtrfs_bin, [img], d / "mnt", "rw") as um:
        cp = T.ubtrfs("filesystem", "label", um)
        assert cp.stdout == b"offline label\n", T.describe(cp)
        # the kernel's limit: 255 bytes (btrfs-progs itself cuts labels to 254)
        cp = T.ubtrfs("filesystem", "label", um, "x" * 255)
        assert cp.returncode == 0, T.describe(cp)
        assert T.ubtrfs("filesystem", "label", um).stdout == b"x" * 255 + b"\n"
        # btrfs-progs' label works on the mount too (it asks the ioctl without checking the filesystem type)
        T.run(["btrfs", "filesystem", "label", um, "y" * 200])
        assert T.run(["btrfs", "filesystem", "label", um]).stdout == b"y" * 200 + b"\n"
        T.run(["btrfs", "filesystem", "label", um, "mounted"])
        assert T.ubtrfs("filesystem", "label", um).stdout == b"mounted\n"
    progs_check(img)
    with T.mounted([img], d / "kmnt", readonly=True) as km:
        assert T.run(["btrfs", "filesystem", "label", km]).stdout == b"mounted\n"
    assert T.run(["blkid", "-o", "value", "-s", "LABEL", str(img)]).stdout == b"mounted\n"
    T.rmtree(d)


def test_sync_makes_durable(ubtrfs_bin, scratch):
    """What `filesystem sync` returned on survives a kill -9 of the daemon (commit= far away)."""
    d = Path(scratch) / "fs-sync"
    d.mkdir()
    img = d / "s.img"
    make_image([img])
    mnt = d / "mnt"
    mnt.mkdir()
    errf = tempfile.TemporaryFile()
    proc = subprocess.Popen([str(ubtrfs_bin), "mount", "-f", "-o", "rw,commit=3600", str(img), str(mnt)],
                            stdout=subprocess.DEVNULL, stderr=errf)
    try:
        deadline = time.monotonic() + 60
        while not os.path.ismount(mnt):
            assert proc.poll() is None and time.monotonic() < deadline, "not mounted"
            time.sleep(0.02)
        with open(mnt / "kept", "wb") as f:
            f.write(data(1, 50000))
        cp = T.ubtrfs("filesystem", "sync", mnt)
        assert cp.returncode == 0, T.describe(cp)
        with open(mnt / "lost", "wb") as f:
            f.write(data(2, 5000))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        T.run(["fusermount3", "-u", "-z", str(mnt)], check=False)
    progs_check(img)
    with T.mounted([img], d / "kmnt", readonly=True) as km:
        assert sorted(os.listdir(km)) == ["kept"]
        with open(km + "/kept", "rb") as f:
            assert f.read() == data(1, 50000)
    # offline: nothing pending, a commit all the same; the image stays clean
    cp = T.ubtrfs("filesystem", "sync", img)
    assert cp.returncode == 0, T.describe(cp)
    progs_check(img)
    T.rmtree(d)
