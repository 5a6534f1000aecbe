# SPDX-License-Identifier: MIT
"""NODATACOW writes through the file API go in place where the kernel's would.

tests/tools/nocow_driver.c runs short scripts (create, chattr +C through
ub_fsw_set_flags, writes of one byte value, snapshot, commit) on images made by
`ubtrfs mkfs`. Checked, with btrfs-progs and the kernel as referees:
  - a NODATACOW file's overwrites (aligned and partial sectors) land at the
    physical address its extent already has: one extent item, same disk
    bytenr; a normal file's overwrite in the same run moves (COW);
  - after a snapshot the extent is shared: the next write is COW and the
    snapshot keeps the old bytes;
  - a write into a PREALLOC extent (any file) lands in it: the item is split
    around the written range, which becomes a regular item of the same extent;
  - on RAID5 data the write stays COW (no partial-stripe rewrite: write hole);
  - btrfs check is clean after every run and the kernel's read-only mount
    shows exactly the model.
CI: about 5 s under SAN.
"""

import os
import re

import pytest

import ubtrfs_testlib as T

MiB = 1 << 20


@pytest.fixture(scope="module")
def driver():
    return T.test_tool("nocow_driver")


@pytest.fixture
def work():
    d = T.make_scratch_dir("ubtrfs-nocow-")
    yield d
    T.rmtree(d)


def images(work, n, size=1 << 30):
    out = []
    for i in range(n):
        p = os.path.join(work, "img%d" % i)
        with open(p, "wb") as f:
            f.truncate(size)
        out.append(p)
    return out


def script(driver, work, imgs, lines):
    path = os.path.join(work, "script")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    cp = T.run([str(driver), path, *imgs], check=False)
    assert cp.returncode == 0, cp.stderr.decode("utf-8", "replace")[-3000:]


def extents(imgs, tree="5", types=False):
    """(inode, file offset) -> disk bytenr (with types: (type, disk bytenr, extent offset, length))
    of every regular and prealloc extent item."""
    out = T.run(["btrfs", "inspect-internal", "dump-tree", "-t", tree, imgs[0]]).stdout.decode()
    got, key, typ, pending = {}, None, None, None
    for line in out.splitlines():
        m = re.search(r"key \((\d+) EXTENT_DATA (\d+)\)", line)
        if m:
            key = (int(m.group(1)), int(m.group(2)))
        m = re.search(r"generation \d+ type (\d+)", line)
        if m and key:
            typ = int(m.group(1))
        m = re.search(r"(?:extent|prealloc) data disk byte (\d+) nr \d+", line)
        if m and key:
            got[key] = int(m.group(1))
            pending = key
            key = None
        m = re.search(r"(?:extent|prealloc) data offset (\d+) nr (\d+)", line)
        if m and types and pending in got:
            got[pending] = (typ, got[pending], int(m.group(1)), int(m.group(2)))
    return got


def check_clean(imgs):
    cp = T.run(["btrfs", "check", "--readonly", imgs[0]], check=False, timeout=300)
    out = (cp.stdout + cp.stderr).decode("utf-8", "replace")
    assert cp.returncode == 0 and "no error found" in out, out[-3000:]


def kernel_view(work, imgs, names):
    with T.mounted(imgs, os.path.join(work, "mnt")) as mnt:
        return {n: open(os.path.join(mnt, n), "rb").read() for n in names}


class Model:
    def __init__(self):
        self.files = {}

    def write(self, name, off, length, byte):
        b = self.files.setdefault(name, bytearray())
        if len(b) < off + length:
            b.extend(b"\0" * (off + length - len(b)))
        b[off:off + length] = bytes([byte]) * length
        return "write %s %d %d %d" % (name, off, length, byte)


def test_nocow_in_place(driver, work):
    imgs = images(work, 1)
    T.run([T.ubtrfs_binary(), "mkfs", "-q", "-f", *imgs])
    m = Model()
    script(driver, work, imgs, ["create f", "nocow f", "create g",
                                m.write("f", 0, MiB, 17), m.write("g", 0, MiB, 17), "commit"])
    first = extents(imgs)
    f_ino, g_ino = sorted({k[0] for k in first})
    # aligned, partial-sector and last-sector overwrites
    script(driver, work, imgs, [m.write("f", 4096, 8192, 34), m.write("f", 100000, 5000, 51),
                                m.write("f", MiB - 10, 10, 68), m.write("g", 4096, 8192, 34), "commit"])
    second = extents(imgs)
    assert [k for k in second if k[0] == f_ino] == [(f_ino, 0)], second
    assert second[(f_ino, 0)] == first[(f_ino, 0)], "the nocow write moved the extent"
    assert (g_ino, 4096) in second and second[(g_ino, 4096)] != first[(g_ino, 0)], "the cow write stayed"
    check_clean(imgs)
    assert kernel_view(work, imgs, ["f", "g"]) == {k: bytes(v) for k, v in m.files.items()}

    # a snapshot shares the extent: the next write copies, the snapshot keeps the old bytes
    old_f = bytes(m.files["f"])
    script(driver, work, imgs, ["snapshot s", "commit", m.write("f", 0, 4096, 85), "commit"])
    third = extents(imgs)
    assert third.get((f_ino, 0)) != first[(f_ino, 0)], "a shared extent was written in place"
    check_clean(imgs)
    view = kernel_view(work, imgs, ["f", "s/f"])
    assert view["f"] == bytes(m.files["f"]) and view["s/f"] == old_f

    # a snapshot in the transaction that wrote f holds f as the call found it
    first_write = m.write("f", 0, 4096, 102)
    mid_f = bytes(m.files["f"])
    script(driver, work, imgs, [first_write, "snapshot s2", m.write("f", 0, 4096, 119), "commit"])
    check_clean(imgs)
    view = kernel_view(work, imgs, ["f", "s2/f"])
    assert view["f"] == bytes(m.files["f"]) and view["s2/f"] == mid_f


def test_prealloc_written_in_place(driver, work):
    imgs = images(work, 1)
    T.run([T.ubtrfs_binary(), "mkfs", "-q", "-f", *imgs])
    m = Model()
    m.files["p"] = bytearray(MiB)
    script(driver, work, imgs, ["create p", "fallocate p 0 %d" % MiB, "commit",
                                m.write("p", 8192, 12288, 17), m.write("p", 100000, 3000, 34), "commit"])
    got = extents(imgs, types=True)
    (ino,) = {k[0] for k in got}
    items = sorted((k[1],) + v for k, v in got.items())
    bytenr = items[0][2]
    # prealloc [0, 8K), written [8K, 20K), prealloc, written sector(s) around 100000, prealloc to the end
    assert all(i[2] == bytenr and i[3] == i[0] for i in items), items
    assert [(i[0], i[1]) for i in items] == [(0, 2), (8192, 1), (20480, 2), (98304, 1), (106496, 2)], items
    assert items[-1][0] + items[-1][4] == MiB
    check_clean(imgs)
    assert kernel_view(work, imgs, ["p"]) == {"p": bytes(m.files["p"])}


def test_nocow_raid5_stays_cow(driver, work):
    imgs = images(work, 3, 256 * MiB)
    T.run([T.ubtrfs_binary(), "mkfs", "-q", "-f", "-d", "raid5", "-m", "raid1", *imgs])
    m = Model()
    script(driver, work, imgs, ["create f", "nocow f", m.write("f", 0, MiB, 17), "commit"])
    first = extents(imgs)
    script(driver, work, imgs, [m.write("f", 8192, 4096, 34), "commit"])
    second = extents(imgs)
    (ino,) = {k[0] for k in first}
    assert second.get((ino, 8192)) not in (None, first[(ino, 0)]), second
    check_clean(imgs)
    assert kernel_view(work, imgs, ["f"]) == {"f": bytes(m.files["f"])}
