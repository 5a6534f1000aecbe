# SPDX-License-Identifier: MIT
"""Compressed files longer than one `ubtrfs cat` read call (4 MiB).

A call that ends inside a run of compressed extents reads the next ones ahead
and has them decoded while its caller writes out what it got; the next call
takes them over. These files (6 MiB of text, written by the kernel under
compress-force=zstd and =lzo on an image with two copies of all data) make
every call after the first start on extents read ahead. Compared with what
the kernel wrote: intact, then with damage placed where the read-ahead reads,
just past the first call's end: one copy of one extent bad (the other copy
must be used, the output intact), both copies of a later one bad (exactly that
extent as zeros, named once with its file offset and logical address).
"""

import hashlib
import os
import random

import ubtrfs_testlib as T

SECTOR = 4096
CALL = 4 << 20  # cmd/cat.c's read size
SIZE = 6 << 20
FILES = {"zstd": 31, "lzo": 32}  # name (also the algorithm) -> seed of its bytes


def _text(seed):
    """SIZE bytes of lines drawn from a small text (text_bytes itself is slow at this size)."""
    rng = random.Random(seed)
    lines = T.text_bytes(rng, 128 << 10).split(b"\n")
    out = b"\n".join(rng.choices(lines, k=SIZE // 40))
    while len(out) < SIZE:
        out += out
    return out[:SIZE]


def _make(work):
    img = os.path.join(work, "ahead.img")
    with open(img, "wb") as f:
        f.truncate(256 << 20)
    T.run(["mkfs.btrfs", "-q", "-f", "-m", "dup", "-d", "dup", img])
    data = {}
    with T.mounted([img], os.path.join(work, "mnt"), options="compress-force=zstd", readonly=False) as mnt:
        for name, seed in FILES.items():
            data[name] = _text(seed)
            path = os.path.join(mnt, name)
            open(path, "wb").close()
            # the inode's property picks the algorithm; the mount option forces compression
            T.run(["btrfs", "property", "set", path, "compression", name])
            with open(path, "wb") as f:
                f.write(data[name])
    return img, data


def _extents(img, ino):
    dump = T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "5", img]).stdout.decode()
    return [e for e in T.file_extents(dump, ino) if e[5] != 0 and e[1] != 0]


def test_reads_across_calls_with_damage_ahead(ubtrfs_bin, tmp_path):
    work = str(tmp_path)
    img, data = _make(work)
    for name in FILES:
        rc, size, digest, cp = T.cat_hash([img], "/" + name)
        assert rc == 0, T.describe(cp)
        assert (size, digest) == (SIZE, hashlib.sha256(data[name]).hexdigest()), name

    # inodes 257 and 258: the files in the order made; btrfs numbers lzo 2, zstd 3
    assert {e[5] for e in _extents(img, 257)} == {3} and {e[5] for e in _extents(img, 258)} == {2}
    exts = [e for e in _extents(img, 257) if e[0] >= CALL]
    assert len(exts) >= 4 and exts[0][0] == CALL, exts[:4]
    rng = random.Random(7)
    one, both = exts[0], exts[2]
    mirrors = T.map_logical(img, one[1], SECTOR)
    assert len(mirrors) == 2, mirrors
    T.overwrite(img, sorted(mirrors)[0][1], rng.randbytes(SECTOR))
    for _, phys in T.map_logical(img, both[1], SECTOR):
        T.overwrite(img, phys, rng.randbytes(SECTOR))

    cp = T.ubtrfs("cat", "--path", "/zstd", img)
    err = cp.stderr.decode("utf-8", "replace")
    assert cp.returncode == 1, T.describe(cp)
    expect = bytearray(data["zstd"])
    expect[both[0]:both[0] + both[4]] = bytes(both[4])
    assert len(cp.stdout) == SIZE
    assert cp.stdout == bytes(expect), "bytes other than the extent bad on both copies differ"
    # the reports of lost data are errors; the warnings about each bad copy name the file too
    lost = [line for line in err.splitlines() if ": error:" in line]
    named = [line for line in lost if T.mentions_number(line, both[0]) and T.mentions_number(line, both[1])]
    assert len(named) == 1, "the extent bad on both copies is not named exactly once: %s" % err
    assert not any(T.mentions_number(line, one[0]) for line in lost), \
        "the extent with one good copy was reported as unreadable: %s" % err
