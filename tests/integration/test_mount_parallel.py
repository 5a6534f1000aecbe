# SPDX-License-Identifier: MIT
"""ubtrfs mount serves FUSE calls on several threads: a read stalled on the device does not
hold up lookups, stats, directory listings and reads of other files."""

import concurrent.futures
import contextlib
import hashlib
import os
import random
import subprocess
import threading
import time

import ubtrfs_testlib as T
from test_mount import fuse_mounted

MiB = 1 << 20


def _source(root, rng):
    files = {}
    for d in range(8):
        os.makedirs(root / ("d%d" % d))
        for i in range(40):
            data = rng.randbytes(rng.choice([100, 3000, 9000, 70000]))
            p = "/d%d/f%02d" % (d, i)
            (root / p[1:]).write_bytes(data)
            files[p] = hashlib.sha256(data).hexdigest()
    big = rng.randbytes(16 * MiB)
    (root / "big").write_bytes(big)
    return files, big


@contextlib.contextmanager
def slow_device(tool, image, start, end, flag, mnt):
    os.makedirs(mnt, exist_ok=True)
    proc = subprocess.Popen([str(tool), str(image), str(start), str(end), str(flag), str(mnt)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not os.path.ismount(mnt):
            assert proc.poll() is None, "slowdev exited %d" % proc.returncode
            assert time.monotonic() < deadline, "slowdev did not mount"
            time.sleep(0.02)
        yield os.path.join(mnt, "img")
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(flag)
        T.run(["fusermount3", "-u", "-z", str(mnt)], check=False)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def test_stalled_read_does_not_block_others(ubtrfs_bin, scratch):
    tool = T.test_tool("slowdev")
    base = T.Path(scratch) / "parallel"
    src = base / "src"
    files, big = _source(src, random.Random(20261204))
    img = base / "img"
    with open(img, "wb") as f:
        f.truncate(256 * MiB)
    T.run(["mkfs.btrfs", "-q", "--rootdir", str(src), str(img)])
    # stall the device where the middle of the big file lives
    hits = T.find_bytes([img], big[8 * MiB:8 * MiB + 64])
    assert len(hits) == 1, hits
    phys = hits[0][1]
    flag = base / "stall"
    with slow_device(tool, img, phys, phys + 4096, flag, base / "dev") as dev, \
            fuse_mounted(ubtrfs_bin, [dev], base / "mnt") as mnt:
        flag.touch()
        result = {}

        def read_big():
            result["sha"] = _sha(mnt + "/big")

        reader = threading.Thread(target=read_big)
        reader.start()
        time.sleep(0.5)
        assert reader.is_alive(), "the read of the stalled range did not stall"
        t0 = time.monotonic()
        # everything else, from several threads, while that read hangs
        with concurrent.futures.ThreadPoolExecutor(4) as ex:
            listed = list(ex.map(lambda d: sorted(os.listdir(mnt + "/d%d" % d)), range(8)))
            got = dict(zip(files, ex.map(lambda p: (os.stat(mnt + p).st_size, _sha(mnt + p)), files)))
        took = time.monotonic() - t0
        assert reader.is_alive(), "the stalled read finished before the flag was removed"
        os.unlink(flag)
        reader.join(60)
        assert not reader.is_alive()
    assert all(lst == ["f%02d" % i for i in range(40)] for lst in listed)
    assert {p: h for p, (_, h) in got.items()} == files
    assert result.get("sha") == hashlib.sha256(big).hexdigest()
    assert took < 30, "other calls took %.1f s while one read was stalled" % took


def test_parallel_readers(ubtrfs_bin, factory):
    """Many threads reading and stat'ing the same and different files at once get what the kernel shows."""
    image = factory.image("kernel-zstd")
    view = factory.view(image)
    paths = sorted(p for p, e in view.entries.items() if e["type"] == "file")
    rng = random.Random(7)
    work = paths * 2
    rng.shuffle(work)
    with fuse_mounted(ubtrfs_bin, image.devices, factory.mountpoint()) as mnt:
        with concurrent.futures.ThreadPoolExecutor(8) as ex:
            got = list(ex.map(lambda p: (p, _sha(mnt + p), os.lstat(mnt + p).st_size), work))
    # the view keeps (size, sha256) per file
    bad = [p for p, h, size in got if (size, h) != tuple(view.hashes[p])]
    assert not bad, bad[:20]
