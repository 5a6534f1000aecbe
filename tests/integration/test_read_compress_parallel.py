# SPDX-License-Identifier: MIT
"""Compressed files read by several `ubtrfs cat` at once, each decoding on a worker pool.

The kernel-made zstd, zlib and lzo images (cp -a of the main source tree under
compress-force) are read concurrently, file by file, and compared with the
kernel's view. One copy of the zstd image has two compressed extents of one
file damaged, one early and one later: that file, read among the others, must
come back with exactly those two extents as zeros, the rest intact, and the two
errors reported in file order.
"""

import concurrent.futures
import os
import random

import pytest

import ubtrfs_testlib as T

SECTOR = 4096
IMAGES = ["kernel-zstd", "kernel-zlib", "kernel-lzo"]
# concurrent readers: more than the cores, so the decode pools of several processes overlap
READERS = 4


def _fs_tree(devices):
    return T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "5", *devices]).stdout.decode(
        "utf-8", "replace")


def _compressed_files(factory, image, limit):
    """Paths of the largest files of `image` with more than one compressed extent."""
    view = factory.view(image)
    dump = _fs_tree(image.devices)
    found = []
    for p in sorted(view.hashes, key=lambda q: (-view.entries[q]["size"], q)):
        comp = [e for e in T.file_extents(dump, view.entries[p]["ino"]) if e[5] != 0 and e[1] != 0]
        if len(comp) >= 2:
            found.append(p)
        if len(found) == limit:
            break
    return view, found


def _cat_all(jobs):
    """[(devices, path)] read READERS at a time; results in job order."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=READERS) as ex:
        return list(ex.map(lambda j: T.cat_hash(j[0], j[1]), jobs))


def test_parallel_reads_match_kernel(ubtrfs_bin, factory):
    jobs, want = [], []
    for name in IMAGES:
        image = factory.image(name)
        view, paths = _compressed_files(factory, image, 6)
        assert paths, "no file with several compressed extents in %s" % name
        for p in paths:
            jobs.append((image.devices, p))
            want.append((name, p, view.hashes[p]))
    for (name, p, (size, digest)), (rc, got_size, got, cp) in zip(want, _cat_all(jobs)):
        assert rc == 0, "%s %s: %s" % (name, p, T.describe(cp))
        assert (got_size, got) == (size, digest), "%s %s differs from the kernel's bytes" % (name, p)


def test_damaged_extents_in_order_among_parallel_reads(ubtrfs_bin, factory, tmp_path):
    image = factory.image("kernel-zstd")
    view, paths = _compressed_files(factory, image, 6)
    dump = _fs_tree(image.devices)
    victim, exts = None, []
    for p in paths:
        exts = [e for e in T.file_extents(dump, view.entries[p]["ino"])
                if e[5] != 0 and e[1] != 0 and e[3] == 0 and e[0] > 0]
        if len(exts) >= 4:
            victim = p
            break
    if victim is None:
        pytest.fail("no file with four compressed extents past offset 0 in kernel-zstd")
    devs = []
    for i, d in enumerate(image.devices):
        c = tmp_path / ("zstd-%d.img" % i)
        T.copy_sparse(d, c)
        devs.append(str(c))
    data = open(os.fsencode(str(factory.source("main"))) + os.fsencode(victim), "rb").read()
    rng = random.Random(23)
    bad = [exts[0], exts[-2]]
    for (foff, disk_bytenr, _, _, num, _) in bad:
        mirrors = T.map_logical(devs[0], disk_bytenr, SECTOR)
        assert len(mirrors) == 1, mirrors
        T.overwrite(devs[0], mirrors[0][1], rng.randbytes(SECTOR))

    others = [p for p in paths if p != victim]
    results = _cat_all([(devs, victim)] + [(devs, p) for p in others] + [(devs, victim)])
    for p, (rc, size, digest, cp) in zip(others, results[1:-1]):
        assert rc == 0 and (size, digest) == view.hashes[p], "%s: %s" % (p, T.describe(cp))
    for rc, _, _, cp in (results[0], results[-1]):
        out, err = cp.stdout, cp.stderr.decode("utf-8", "replace")
        assert rc == 1, T.describe(cp)
        assert len(out) == len(data), "output %d bytes, file %d" % (len(out), len(data))
        expect = bytearray(data)
        for (foff, _, _, _, num, _) in bad:
            end = min(foff + num, len(data))
            expect[foff:end] = bytes(end - foff)
        assert out == bytes(expect), "bytes outside the two damaged extents differ, or those are not zeros"
        at = []
        for (foff, disk_bytenr, _, _, _, _) in bad:
            line = next((i for i, l in enumerate(err.splitlines())
                         if T.mentions_number(l, foff) and T.mentions_number(l, disk_bytenr)), None)
            assert line is not None, "no error names file offset %d and logical %d: %s" % (
                foff, disk_bytenr, err)
            at.append(line)
        assert at == sorted(at), "errors out of file order: %s" % err
