# SPDX-License-Identifier: MIT
"""The oracle itself: generator, image recipes and the kernel walk agree with the source tree.

These run without the binary under test; they keep the fixtures honest.
"""

import os
import re

import pytest

import ubtrfs_testlib as T

# What survives the trip into an image, per recipe family.
# mkfs.btrfs 6.2 --rootdir drops sub-second timestamps and device numbers.
COMMON = ("type", "mode", "uid", "gid", "target", "xattrs")


def _source_view(factory):
    src = factory.source("main")
    return src, T.walk_tree(src, btrfs=False)


@pytest.mark.parametrize("name", ["kernel-plain", "kernel-zstd", "rootdir-crc32c-4096"])
def test_kernel_view_matches_source(factory, name):
    src, source = _source_view(factory)
    view = factory.view(factory.image(name))
    assert set(view.entries) == set(source)
    rootdir = name.startswith("rootdir")
    problems = []
    for p, s in source.items():
        k = view.entries[p]
        for f in COMMON:
            if s.get(f) != k.get(f):
                problems.append("%r %s: source %r image %r" % (p, f, s.get(f), k.get(f)))
        if s["type"] != "dir":
            for f in ("size", "nlink"):
                if s[f] != k[f]:
                    problems.append("%r %s: source %r image %r" % (p, f, s[f], k[f]))
        if rootdir:
            if s["mtime"][0] != k["mtime"][0]:
                problems.append("%r mtime: %r vs %r" % (p, s["mtime"], k["mtime"]))
        else:
            if s["mtime"] != k["mtime"]:
                problems.append("%r mtime: %r vs %r" % (p, s["mtime"], k["mtime"]))
            if (s["rdev_major"], s["rdev_minor"]) != (k["rdev_major"], k["rdev_minor"]):
                problems.append("%r rdev differs" % p)
    assert not problems, "\n".join(problems[:30])
    for p, (size, digest) in view.hashes.items():
        assert T.sha256_file(os.fsencode(str(src)) + os.fsencode(p)) == (size, digest), p


def test_source_tree_has_every_kind(factory):
    _, source = _source_view(factory)
    types = {e["type"] for e in source.values()}
    assert types == {"file", "dir", "symlink", "chr", "blk", "fifo", "sock"}
    assert any(len(os.fsencode(e["name"])) == 255 for e in source.values())
    assert any(e["nlink"] >= 4 and e["type"] == "file" for e in source.values())
    assert any(e["mode"] & 0o4000 for e in source.values())
    assert any(e["mode"] & 0o1000 and e["type"] == "dir" for e in source.values())
    assert any(e["xattrs"] and e["type"] == "symlink" for e in source.values())
    assert any(e["mtime"][0] < 0 for e in source.values())
    assert max(p.count("/") for p in source) >= 30
    assert max(len(e.get("target", "")) for e in source.values()) >= 3900


def test_subvolumes_seen_by_kernel(factory):
    view = factory.view(factory.image("kernel-subvol"))
    e = view.entries
    assert e["/subvol"]["subvol"] != 5 and e["/subvol"]["ino"] == 256
    assert e["/snap"]["subvol"] not in (5, e["/subvol"]["subvol"])
    assert e["/subvol/nested"]["subvol"] not in (5, e["/subvol"]["subvol"], e["/snap"]["subvol"])
    assert "/snap/symlinks/short" in e and "/subvol/symlinks" not in e
    assert "/snap/only_in_snap" in e and "/subvol/only_in_snap" not in e
    assert view.hashes["/snap/reflinked"] != view.hashes["/subvol/reflinked"]
    assert e["/top_names"]["subvol"] == 5


def test_many_extents_image_shape(factory):
    image = factory.image("kernel-many")
    dump = T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "5", *image.devices]).stdout.decode(
        "utf-8", "replace")
    assert len(T.leaves_of(dump)) > 50
    assert "(prealloc)" in dump
    assert "NODATASUM" in dump
    assert dump.count("EXTENT_DATA") > 3000


def test_mount_cleanup_on_error(factory, tmp_path):
    """A failing body inside `mounted` still unmounts and detaches."""
    image = factory.image("rootdir-crc32c-16384")
    mnt = tmp_path / "m"
    with pytest.raises(ZeroDivisionError):
        with T.mounted(image.devices, mnt):
            1 / 0
    assert not T.REGISTRY.loops and not T.REGISTRY.mounts
    assert not os.path.ismount(mnt)


def test_partial_compressed_references_exist(factory):
    image = factory.image("kernel-subvol-zstd")
    dump = T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "256", *image.devices]).stdout.decode(
        "utf-8", "replace")
    partial = [m for m in re.finditer(r"extent data offset (\d+) nr \d+ ram \d+\n\s+extent compression (\d+)",
                                      dump) if m.group(1) != "0" and m.group(2) != "0"]
    assert partial, "no extent referencing the middle of a compressed extent"
