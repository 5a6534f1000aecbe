# SPDX-License-Identifier: MIT
"""A transaction commits by itself when its dirty memory passes the engine's budget.

The space driver (tests/tools/space_driver.c) writes many files through
ub_engine_begin_op with a 1 MiB budget and never commits by hand until the
end: the engine commits on its own on the way. Judged by btrfs-progs (check
clean; the superblock's generation and its four backup roots moved one
commit at a time) and by the kernel, which must read back every file.

Budget: one run of a few seconds under ASan.
"""

import hashlib
import os
import re

import ubtrfs_testlib as T
# the space driver and its scratch folder, as test_enospc.py uses them
from test_enospc import casedir, driver, file_bytes, make_images, mkfs, progs_check, run_driver  # noqa: F401

MiB = T.MiB


def super_info(img):
    out = T.run(["btrfs", "inspect-internal", "dump-super", "-f", str(img)]).stdout.decode()
    gen = int(re.search(r"^generation\s+(\d+)", out, re.M).group(1))
    backups = [int(g) for g in re.findall(r"backup_tree_root:\s+\d+\s+gen:\s+(\d+)", out)]
    return gen, backups


def test_small_budget_commits_by_itself(driver, casedir):
    imgs = make_images(casedir, 1, 256 * MiB)
    mkfs("progs", imgs, "dup", "single", 16384)
    gen0, _ = super_info(imgs[0])
    count, size = 8000, 4096
    r = run_driver(driver, "--budget", MiB, "files", "w", 0, count, 10 ** 6, size, *imgs)
    assert r["enospc"] == 0 and r["added"] == count, r["out"][-800:]
    auto = int(re.search(r"generation \d+ auto (\d+)", r["out"]).group(1))
    # each commit of the budget is a generation; the driver's own commit at the end is one more
    assert auto >= 3, r["out"][-800:]
    gen, backups = super_info(imgs[0])
    assert gen == r["generation"] == gen0 + auto + 1
    # the four backup roots rotated through the last four commits
    assert sorted(backups) == [gen - 3, gen - 2, gen - 1, gen], backups
    progs_check(imgs)
    names = ["w%07d" % n for n in range(count)]
    with T.mounted(imgs, casedir / "mnt") as m:
        assert sorted(os.listdir(m)) == names
        for name in names:
            with open(os.path.join(m, name), "rb") as f:
                got = f.read()
            assert hashlib.sha256(got).digest() == hashlib.sha256(file_bytes(name, size)).digest(), \
                "kernel: %s reads back other bytes" % name
