# SPDX-License-Identifier: MIT
"""RAID5/6 without a write hole: a crash, then the loss of devices.

The multithreaded workload of threads_driver (files rewritten, renamed and
removed, commits at random moments) runs on a RAID5 (3 devices) and a RAID6
(4 devices) filesystem, data and metadata alike, with every device write and
flush recorded. For each crash point (spread over the run, and both sides of
every superblock write) the image a crash would leave is taken, then one
device (RAID5) or two (RAID6) are dropped, every choice of them: what remains
must still open as one committed state whose every file is one whole version
(a stripe that mixed new and old strips would rebuild committed files wrong:
the write hole). btrfs check runs on the whole crash images too.

The kernel's btrfs updates partial stripes in place (read-modify-write), so a
crash between its strip writes and a device loss can lose committed data:
bench/write-hole counts it beside ubtrfs on one recorded workload (bench/README.md).
"""
import itertools
import os
import re

import pytest

import ubtrfs_testlib as T
from test_check_sweep import progs_check_devices

MiB = 1 << 20


SEEDS = [7, 8, 9, 10] if T.LONG_TESTS else [7]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("profile, ndevs, lose", [("raid5", 3, 1), ("raid6", 4, 2)])
def test_crash_then_device_loss(scratch, profile, ndevs, lose, seed):
    driver = T.test_tool("threads_driver")
    d = os.path.join(scratch, "%s-%d" % (profile, seed))
    os.makedirs(d)
    imgs = []
    for i in range(ndevs):
        p = os.path.join(d, "dev%d.img" % i)
        with open(p, "wb") as f:
            f.truncate(256 * MiB)
        imgs.append(p)
    T.run(["mkfs.btrfs", "-f", "-q", "-d", profile, "-m", profile] + imgs)
    crash = os.path.join(d, "crash")
    os.makedirs(crash)
    # the images of every cut are made at once: 64 at most keeps /dev/shm small; more seeds make hundreds
    cuts = 64 if T.LONG_TESTS else 16
    ops = 600 if T.LONG_TESTS else 160
    cp = T.run([str(driver), "--crash-dir", crash, "--crash-cuts", str(cuts), str(seed), "2", str(ops), "1",
                os.path.join(d, "model.json")] + imgs, check=False, timeout=1200)
    out = (cp.stdout + cp.stderr).decode("utf-8", "replace")
    assert cp.returncode == 0, out[-3000:]
    found = sorted({int(c) for c in re.findall(r"^cut (\d+) ", out, re.M)})
    assert len(found) >= cuts, out[-2000:]
    states = losses = 0
    gens = []
    for n, c in enumerate(found):
        state = [os.path.join(crash, "cut%d_dev%d.img" % (c, i)) for i in range(ndevs)]
        if n in (len(found) // 2, len(found) - 1):
            rc, text = progs_check_devices(state)
            assert rc == 0, "cut %d: btrfs check:\n%s" % (c, text[-3000:])
        for gone in itertools.combinations(range(ndevs), lose):
            left = [p for i, p in enumerate(state) if i not in gone]
            v = T.run([str(driver), "--verify"] + left, check=False, timeout=300)
            text = (v.stdout + v.stderr).decode("utf-8", "replace")
            assert v.returncode == 0, "cut %d without devices %s: %s" % (c, gone, text[-3000:])
            m = re.search(r"generation (\d+) files (\d+)", text)
            assert m, text[-2000:]
            gens.append(int(m.group(1)))
            losses += 1
        states += 1
        for p in state:
            os.unlink(p)
    assert states >= cuts and losses >= cuts
    assert max(gens) > min(gens), "the cuts saw no commit: %r" % gens
