# SPDX-License-Identifier: MIT
"""The tree checker against every tree block of real images.

tests/unit/test_tree_check.c holds a scan that runs the library's tree checker
over every tree block of the images named in UB_TREE_CHECK_IMAGES: a block the
kernel or mkfs.btrfs wrote must never be refused. The unit run has no images
of its own, so this module hands it the images the read tests build (mkfs.btrfs
with every checksum and node size, the kernel with compression, subvolumes,
snapshots, RAID profiles) and requires the scan to pass.
"""
import os
import subprocess
from pathlib import Path

import pytest

import ubtrfs_images as I
import ubtrfs_testlib as T


def _unit_binary():
    build = Path(os.environ.get("UBTRFS", str(T.REPO / "build" / "ubtrfs"))).parent
    return build / "tests" / "unit" / "test_tree_check"


# A representative slice: every checksum and node size, compression, snapshots, RAID5/6.
IMAGES = ["rootdir-crc32c-4096", "rootdir-xxhash-16384", "rootdir-sha256-16384", "rootdir-blake2-16384",
          "rootdir-crc32c-65536", "rootdir-mixed", "kernel-zstd", "kernel-subvol", "kernel-many",
          "kernel-raid5", "kernel-raid6"]
if T.LONG_TESTS:
    IMAGES = I.READ_IMAGES


@pytest.mark.parametrize("name", IMAGES)
def test_tree_checker_accepts_real_blocks(factory, name):
    unit = _unit_binary()
    if not unit.is_file():
        pytest.skip("unit test binary not built: %s (make unit)" % unit)
    image = factory.image(name)
    env = dict(os.environ, UB_TREE_CHECK_IMAGES=":".join(str(d) for d in image.devices))
    cp = subprocess.run([str(unit)], env=env, capture_output=True, text=True, timeout=600)
    out = cp.stdout + cp.stderr
    assert cp.returncode == 0, "tree checker refused real blocks of %s:\n%s" % (name, out[-4000:])
    assert "test_real_images" in out and "SKIPPED" not in out.split("test_real_images")[-1][:200], out[-2000:]
    assert "tree blocks checked" in out, out[-2000:]
