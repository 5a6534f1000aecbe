# SPDX-License-Identifier: MIT
"""dump-super / dump-tree against btrfs-progs' inspect-internal on the same image."""

import re

import pytest

import ubtrfs_images as I
import ubtrfs_testlib as T

SUPER_IMAGES = I.ROOTDIR_IMAGES + ["kernel-plain", "kernel-subvol", "kernel-raid1"]
KEY_FIELDS = ("generation", "fsid", "total_bytes", "bytes_used", "nodesize", "sectorsize", "root",
              "chunk_root", "csum_type", "num_devices", "label")
MORE_FIELDS = ("csum_size", "bytenr", "magic", "metadata_uuid", "sys_array_size", "chunk_root_generation",
               "root_level", "chunk_root_level", "log_root", "stripesize", "root_dir",
               "compat_flags", "compat_ro_flags", "incompat_flags", "cache_generation",
               "uuid_tree_generation", "dev_item.uuid", "dev_item.devid", "dev_item.total_bytes",
               "dev_item.bytes_used")


def _progs_super(dev, *flags):
    return T.run(["btrfs", "inspect-internal", "dump-super", *flags, dev]).stdout.decode()


def _devices(name, factory):
    return factory.image(name).devices


@pytest.mark.parametrize("flag", ["-f", "--full", None])
@pytest.mark.parametrize("name", SUPER_IMAGES)
def test_dump_super_key_fields(ubtrfs_bin, factory, name, flag):
    for dev in _devices(name, factory):
        want = T.parse_dump_super(_progs_super(dev, *([flag] if flag else [])))
        cp = T.ubtrfs("dump-super", *([flag] if flag else []), dev)
        assert cp.returncode == 0, T.describe(cp)
        got = T.parse_dump_super(cp.stdout.decode("utf-8", "replace"))
        diff = ["%s: progs %r, ubtrfs %r" % (k, want.get(k), got.get(k))
                for k in KEY_FIELDS if want.get(k) != got.get(k)]
        assert not diff, "%s (%s):\n  %s" % (name, dev, "\n  ".join(diff))


@pytest.mark.parametrize("name", ["rootdir-crc32c-16384", "rootdir-blake2-16384", "kernel-raid1"])
def test_dump_super_more_fields(ubtrfs_bin, factory, name):
    for dev in _devices(name, factory):
        want = T.parse_dump_super(_progs_super(dev, "-f"))
        cp = T.ubtrfs("dump-super", "--full", dev)
        assert cp.returncode == 0, T.describe(cp)
        got = T.parse_dump_super(cp.stdout.decode("utf-8", "replace"))
        diff = ["%s: progs %r, ubtrfs %r" % (k, want.get(k), got.get(k))
                for k in MORE_FIELDS if want.get(k) != got.get(k)]
        assert not diff, "%s (%s):\n  %s" % (name, dev, "\n  ".join(diff))


@pytest.mark.parametrize("name", ["rootdir-crc32c-16384", "kernel-raid1"])
def test_dump_super_all_mirrors(ubtrfs_bin, factory, name):
    for dev in _devices(name, factory):
        want = T.super_bytenrs(_progs_super(dev, "-a"))
        assert want == [65536, 64 << 20]
        cp = T.ubtrfs("dump-super", "--all", dev)
        assert cp.returncode == 0, T.describe(cp)
        assert T.super_bytenrs(cp.stdout.decode("utf-8", "replace")) == want


def _progs_tree(devices, *args):
    return T.run(["btrfs", "inspect-internal", "dump-tree", *args, *devices]).stdout.decode(
        "utf-8", "replace")


def _compare_keys(image, args):
    want = T.tree_keys(_progs_tree(image.devices, *args))
    assert want, "btrfs-progs printed no keys for %r" % (args,)
    cp = T.ubtrfs("dump-tree", *args, *image.devices)
    assert cp.returncode == 0, T.describe(cp)
    got = T.tree_keys(cp.stdout.decode("utf-8", "replace"))
    missing = sorted(want - got)
    extra = sorted(got - want)
    assert not missing and not extra, (
        "dump-tree %s on %s: %d keys missing, %d unexpected\n  missing: %r\n  unexpected: %r"
        % (" ".join(args), image.name, len(missing), len(extra), missing[:15], extra[:15]))


TREE_CASES = [(n, t) for n in ("rootdir-crc32c-16384", "rootdir-crc32c-4096", "kernel-zstd", "kernel-many")
              for t in ("5", "1")] + [
    ("kernel-subvol", "5"), ("kernel-subvol", "1"), ("kernel-subvol", "256"), ("kernel-subvol", "257"),
    ("kernel-subvol", "259"), ("rootdir-sha256-16384", "5"), ("rootdir-crc32c-65536", "5"),
    ("kernel-raid1", "5"), ("kernel-raid1", "1"),
]


@pytest.mark.parametrize("name,tree", TREE_CASES)
def test_dump_tree_keys(ubtrfs_bin, factory, name, tree):
    _compare_keys(factory.image(name), ["-t", tree])


@pytest.mark.parametrize("tree", ["2", "3", "4", "7", "9", "10"])
def test_dump_tree_other_trees_keys(ubtrfs_bin, factory, tree):
    """Extent, chunk, device, checksum, uuid and free-space trees."""
    _compare_keys(factory.image("kernel-subvol"), ["-t", tree])


HEADER = re.compile(r"^(leaf|node) (\d+) (?:level (\d+) )?items (\d+) free space (-?\d+) "
                    r"generation (\d+) owner (\S+)", re.M)


@pytest.mark.parametrize("name", ["kernel-many", "rootdir-crc32c-4096"])
def test_dump_tree_block_headers(ubtrfs_bin, factory, name):
    image = factory.image(name)
    want = set(HEADER.findall(_progs_tree(image.devices, "-t", "5")))
    cp = T.ubtrfs("dump-tree", "-t", "5", *image.devices)
    assert cp.returncode == 0, T.describe(cp)
    got = set(HEADER.findall(cp.stdout.decode("utf-8", "replace")))
    assert want == got, "missing %r\nunexpected %r" % (sorted(want - got)[:10], sorted(got - want)[:10])


@pytest.mark.parametrize("name", ["kernel-many", "rootdir-crc32c-16384"])
def test_dump_tree_one_block(ubtrfs_bin, factory, name):
    image = factory.image(name)
    leaves = T.leaves_of(_progs_tree(image.devices, "-t", "5"))
    bytenr = leaves[len(leaves) // 2][0]
    _compare_keys(image, ["-b", str(bytenr)])
    cp = T.ubtrfs("dump-tree", "-b", str(bytenr), *image.devices)
    assert re.search(r"^leaf %d items \d+ " % bytenr, cp.stdout.decode("utf-8", "replace"), re.M), \
        cp.stdout[:300]


@pytest.mark.parametrize("name", ["kernel-subvol", "rootdir-crc32c-16384", "kernel-raid5"])
def test_dump_tree_default_keys(ubtrfs_bin, factory, name):
    """Without -t/-b: every tree btrfs-progs prints by default."""
    _compare_keys(factory.image(name), [])
