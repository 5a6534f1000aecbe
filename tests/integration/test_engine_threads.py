# SPDX-License-Identifier: MIT
"""The engine shared by many threads (issue 29), through the public API only.

tests/tools/threads_driver.c runs writers (files made, rewritten whole, renamed and removed, in
directories of their own and in one they share), readers (listing and reading through a live view,
pinned views and the filesystem's own handle) and a thread that commits at random moments, all at
once on one engine. Each reader checks that every file it gets is one whole version, never a mix or
a torn write, and that a pinned view can read every name it lists. At the end the filesystem is
opened again and must hold exactly the writers' models. Then the oracles:
  - btrfs check is clean;
  - the kernel's mount shows exactly the model (every path, size and sha256).

Budget: a few seconds per seed (more under the sanitizers); UBTRFS_LONG_TESTS runs more seeds and
operations. `make TSAN=1 integration-tsan` runs this file under ThreadSanitizer too.
"""

import hashlib
import json
import os
from pathlib import Path

import pytest

import ubtrfs_testlib as T

MiB = T.MiB
LONG = T.LONG_TESTS
SEEDS = [1, 2, 3, 4, 5, 6, 7, 8] if LONG else [1, 2]
OPS = 1500 if LONG else 250


@pytest.fixture(scope="module")
def driver():
    return T.test_tool("threads_driver")


def progs_check(img):
    cp = T.run(["btrfs", "check", "--readonly", str(img)], check=False, timeout=600)
    text = (cp.stdout + cp.stderr).decode("utf-8", "replace")
    assert cp.returncode == 0 and "no error found" in text, "btrfs check:\n" + text[-4000:]


def kernel_view(img, mnt):
    out = {}
    with T.mounted([img], mnt, readonly=True) as m:
        for top in sorted(os.listdir(m)):
            d = os.path.join(m, top)
            for name in sorted(os.listdir(d)):
                with open(os.path.join(d, name), "rb") as f:
                    data = f.read()
                out["/%s/%s" % (top, name)] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    return out


@pytest.mark.parametrize("seed", SEEDS)
def test_threads(driver, scratch, seed):
    d = Path(scratch) / ("threads-%d" % seed)
    d.mkdir()
    img = d / "img"
    with open(img, "wb") as f:
        f.truncate(512 * MiB)
    T.run(["mkfs.btrfs", "-f", "-q", str(img)])
    model = d / "model.json"
    cp = T.run([str(driver), str(seed), "4", str(OPS), "3", str(model), str(img)], check=False, timeout=1200)
    out = (cp.stdout + cp.stderr).decode("utf-8", "replace")
    assert cp.returncode == 0, "threads_driver failed:\n" + out[-4000:]
    # the run reached its state: readers read while writers wrote
    assert "files read whole" in out and " 0 files read whole" not in out, out
    progs_check(img)
    want = json.loads(model.read_text())
    got = kernel_view(img, d / "mnt")
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    differ = sorted(p for p in set(want) & set(got) if want[p] != got[p])
    assert not missing and not extra and not differ, \
        "kernel vs model: missing %r, unexpected %r, different %r" % (missing[:10], extra[:10], differ[:10])
    T.rmtree(d)


def progs_check_devs(imgs):
    """btrfs check of a filesystem on one or several image files (loop devices for several)."""
    if len(imgs) == 1:
        return progs_check(imgs[0])
    loops = []
    try:
        for img in imgs:
            loops.append(T.losetup_attach(img, True))
        T.run(["btrfs", "device", "scan", *loops], check=False)
        cp = T.run(["btrfs", "check", "--readonly", loops[0]], check=False, timeout=600)
    finally:
        for dev in loops:
            T.losetup_detach(dev)
        T.run(["btrfs", "device", "scan", "--forget"], check=False)
    text = (cp.stdout + cp.stderr).decode("utf-8", "replace")
    assert cp.returncode == 0 and "no error found" in text, "btrfs check:\n" + text[-4000:]


# (data profile, metadata profile, devices, rounds in CI)
FILL = [("single", "dup", 1, 10), ("raid1", "raid1", 2, 4), ("raid5", "raid1", 3, 10), ("raid6", "raid6", 4, 4)]


@pytest.mark.parametrize("data,meta,ndev,rounds", FILL, ids=[f[0] for f in FILL])
def test_fill_rounds(driver, scratch, data, meta, ndev, rounds):
    """Several threads fill the filesystem until every operation meets ENOSPC; the engine stays
    writable, the commit of the full filesystem succeeds, deleting everything gives the space back
    and the next round fits as much again (within 10%); btrfs check is clean at the end."""
    d = Path(scratch) / ("fill-%s" % data)
    d.mkdir()
    imgs = []
    for i in range(ndev):
        p = d / ("dev%d.img" % i)
        with open(p, "wb") as f:
            f.truncate(128 * MiB)
        imgs.append(p)
    T.run(["mkfs.btrfs", "-f", "-q", "-d", data, "-m", meta, *map(str, imgs)])
    cp = T.run([str(driver), "--fill", str(10 if LONG else rounds), "1", "4", *map(str, imgs)], check=False,
               timeout=1800)
    out = (cp.stdout + cp.stderr).decode("utf-8", "replace")
    assert cp.returncode == 0, "threads_driver --fill failed:\n" + out[-4000:]
    rounds_done = [ln for ln in out.splitlines() if ln.startswith("round ")]
    assert len(rounds_done) == (10 if LONG else rounds), out
    # every round met ENOSPC: it really filled the filesystem
    assert all(" 0 ENOSPC" not in ln for ln in rounds_done), out
    progs_check_devs(imgs)
    T.rmtree(d)


def test_crash_cuts(driver, scratch):
    """Crash points over the multithreaded workload: the device writes are recorded, and the
    images a crash at 16 points spread over the run could have left (the pending writes kept,
    dropped or reordered as a flush allows, crash_cuts.h) each open as one committed state whose
    every file is one whole version; btrfs check is clean on several of them and the kernel mounts
    the last; the generations only grow from cut to cut."""
    import re
    d = Path(scratch) / "threads-crash"
    d.mkdir()
    img = d / "img"
    with open(img, "wb") as f:
        f.truncate(256 * MiB)
    T.run(["mkfs.btrfs", "-f", "-q", str(img)])
    crash = d / "crash"
    crash.mkdir()
    cuts = 32 if LONG else 16
    cp = T.run([str(driver), "--crash-dir", str(crash), "--crash-cuts", str(cuts), "5", "3", str(OPS // 2), "2",
                str(d / "model.json"), str(img)], check=False, timeout=1200)
    out = (cp.stdout + cp.stderr).decode("utf-8", "replace")
    assert cp.returncode == 0, "threads_driver failed:\n" + out[-4000:]
    found = [int(c) for c in re.findall(r"^cut (\d+) ", out, re.M)]
    assert len(found) == cuts, out[-2000:]
    gens = []
    for c in found:
        cut = crash / ("cut%d_dev0.img" % c)
        v = T.run([str(driver), "--verify", str(cut)], check=False, timeout=300)
        text = (v.stdout + v.stderr).decode("utf-8", "replace")
        assert v.returncode == 0, "cut %d: %s" % (c, text[-3000:])
        m = re.search(r"generation (\d+) files (\d+)", text)
        gens.append(int(m.group(1)))
        if c in (found[len(found) // 3], found[2 * len(found) // 3], found[-1]):
            progs_check(cut)
    assert gens == sorted(gens), "generations went back between cuts: %r" % gens
    assert gens[-1] > gens[0], "the cuts saw no commit: %r" % gens
    with T.mounted([crash / ("cut%d_dev0.img" % found[-1])], d / "mnt", readonly=True) as m:
        assert os.path.isdir(os.path.join(m, "shared"))
    T.rmtree(d)
