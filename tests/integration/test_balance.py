# SPDX-License-Identifier: MIT
"""ubtrfs balance on devices nothing has mounted, against the kernel as oracle.

The kernel writes a tree (files of every size, compressed and not, a reflink,
snapshots that share and that diverged); ubtrfs balances or converts it; then
the kernel's read-only mount must show exactly the same entries and bytes,
btrfs check must be clean, the profiles must be what was asked, and shared
data must stay shared (the data space used does not grow). Refusals change
nothing (the image bytes are compared).
"""
import hashlib
import os
import random
import re
import subprocess

import pytest

import ubtrfs_testlib as T
from test_check_sweep import progs_check_devices

MiB = 1 << 20


def _populate(mnt, seed, nfiles=120, snapshots=True):
    rng = random.Random(seed)
    top = os.path.join(mnt, "sv") if snapshots else mnt
    if snapshots:
        T.run(["btrfs", "subvolume", "create", top])
    for i in range(nfiles):
        d = os.path.join(top, "d%d" % (i % 6))
        os.makedirs(d, exist_ok=True)
        n = rng.choice([7, 3000, 9000, 70000, 260000])
        data = rng.randbytes(n) if i % 3 else bytes([i % 251]) * n
        with open(os.path.join(d, "f%d" % i), "wb") as f:
            f.write(data)
    T.run(["cp", "--reflink=always", os.path.join(top, "d1", "f1"), os.path.join(top, "d1", "f1.reflink")])
    if snapshots:
        T.run(["btrfs", "subvolume", "snapshot", top, os.path.join(mnt, "snap")])
        for i in range(0, nfiles, 4):
            with open(os.path.join(top, "d%d" % (i % 6), "f%d" % i), "r+b") as f:
                f.seek(1)
                f.write(b"changed after the snapshot")
        T.run(["btrfs", "subvolume", "snapshot", "-r", top, os.path.join(mnt, "snap-ro")])
    T.run(["sync"])


def _images(d, n, size):
    imgs = []
    for i in range(n):
        p = os.path.join(d, "dev%d.img" % i)
        with open(p, "wb") as f:
            f.truncate(size)
        imgs.append(p)
    return imgs


def _make(d, n, size, data, meta, seed, options="compress=zstd", snapshots=True):
    imgs = _images(d, n, size)
    T.run(["mkfs.btrfs", "-q", "-f", "-d", data, "-m", meta] + imgs)
    with T.mounted(imgs, os.path.join(d, "mnt"), options=options, readonly=False) as mnt:
        _populate(mnt, seed, snapshots=snapshots)
    return imgs


def _df(imgs):
    """{(type, profile): used bytes} from ubtrfs filesystem df --raw."""
    out = T.ubtrfs("filesystem", "df", "-b", *imgs).stdout.decode()
    got = {}
    for line in out.splitlines():
        m = re.match(r"(\w+), (\w+): total=(\d+), used=(\d+)", line)
        if m and m.group(1) != "GlobalReserve":
            got[(m.group(1), m.group(2).lower())] = int(m.group(4))
    return got


def _check_clean(imgs):
    rc, text = progs_check_devices(imgs, "--check-data-csum")
    assert rc == 0, text


def _view(imgs, d):
    return T.kernel_view(imgs, os.path.join(d, "view"))


def _same_view(before, after):
    diffs = T.compare_entries(before.entries, after.entries)
    assert not diffs, "\n".join(diffs)
    assert before.hashes == after.hashes


def _sha(paths):
    h = hashlib.sha256()
    for p in paths:
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def test_full_balance_single_device(scratch):
    """Every group moved: the kernel sees the same tree, check is clean, shared data stays shared."""
    imgs = _make(scratch, 1, 1024 * MiB, "single", "dup", seed=1)
    before = _view(imgs, scratch)
    used_before = _df(imgs)
    cp = T.ubtrfs("balance", "start", "-v", *imgs)
    out = cp.stdout.decode()
    m = re.search(r"had to relocate (\d+) out of (\d+) chunks", out)
    assert m and int(m.group(1)) >= 3, T.describe(cp)
    _check_clean(imgs)
    _same_view(before, _view(imgs, scratch))
    used_after = _df(imgs)
    # data extents keep their sharing: not a byte more of data
    assert used_after[("Data", "single")] == used_before[("Data", "single")], (used_before, used_after)
    # the kernel mounts it read-write and balances it again, as its own
    with T.mounted(imgs, os.path.join(scratch, "mnt"), readonly=False) as mnt:
        T.run(["btrfs", "balance", "start", "--full-balance", mnt], timeout=600)
    _check_clean(imgs)


@pytest.mark.parametrize("case", [
    ("raid1", "raid1", "raid5", "raid1c3"),
    ("raid1", "raid1", "raid6", "raid6"),
    ("raid5", "raid1c3", "raid1", "raid1"),
])
def test_convert_four_devices(scratch, case):
    data0, meta0, data1, meta1 = case
    imgs = _make(scratch, 4, 400 * MiB, data0, meta0, seed=2, options="", snapshots=False)
    before = _view(imgs, scratch)
    args = ["-dconvert=" + data1, "-mconvert=" + meta1]
    if meta1 == "raid1" and meta0 == "raid1c3":
        args.append("-f")
    T.ubtrfs("balance", "start", *args, *imgs)
    _check_clean(imgs)
    _same_view(before, _view(imgs, scratch))
    profiles = {k for k, v in _df(imgs).items()}
    assert profiles == {("Data", data1), ("Metadata", meta1), ("System", meta1)}, profiles


def test_filters_and_soft(scratch):
    """usage=0 moves only empty groups; convert with soft leaves what is converted already."""
    imgs = _make(scratch, 2, 400 * MiB, "single", "raid1", seed=3, options="", snapshots=False)
    before = _view(imgs, scratch)
    T.ubtrfs("balance", "start", "-dconvert=raid1", *imgs)
    out = T.ubtrfs("balance", "start", "-dconvert=raid1,soft", *imgs).stdout.decode()
    assert "had to relocate 0 out of" in out, out
    out = T.ubtrfs("balance", "start", "-dusage=0", "-musage=0", *imgs).stdout.decode()
    assert "had to relocate 0 out of" in out, out
    out = T.ubtrfs("balance", "start", "-dlimit=1", *imgs).stdout.decode()
    assert "had to relocate 1 out of" in out, out
    _check_clean(imgs)
    _same_view(before, _view(imgs, scratch))


@pytest.mark.parametrize("args, message", [
    (["-dconvert=raid6"], "needs at least 3 devices"),
    (["-mconvert=single"], "reduces its redundancy"),
    (["-dconvert=raid7"], "bad value"),
    (["-s"], "needs --force"),
])
def test_refusals_change_nothing(scratch, args, message):
    imgs = _make(scratch, 2, 300 * MiB, "raid1", "raid1", seed=4, options="", snapshots=False)
    digest = _sha(imgs)
    cp = subprocess.run([str(T.ubtrfs_binary()), "balance", "start"] + args + imgs, capture_output=True)
    assert cp.returncode == 2, T.describe(cp)
    assert message in (cp.stdout + cp.stderr).decode(), T.describe(cp)
    assert _sha(imgs) == digest


def test_online_balance_while_writing(scratch):
    """On a ubtrfs mount: a balance and a shrink through the daemon while a thread writes files;
    every file reads back as written, and after the unmount btrfs check is clean and the
    kernel shows the same bytes."""
    import threading
    from contextlib import contextmanager  # noqa: F401
    from test_mount import fuse_mounted

    imgs = _make(scratch, 1, 1024 * MiB, "single", "dup", seed=9, options="", snapshots=True)
    written = {}
    stop = threading.Event()
    errors = []
    mnt = os.path.join(scratch, "um")

    def writer():
        rng = random.Random(10)
        i = 0
        try:
            while not stop.is_set() and i < 400:
                data = rng.randbytes(rng.choice([10, 4096, 70000, 300000]))
                p = os.path.join(mnt, "w", "f%d" % i)
                with open(p, "wb") as f:
                    f.write(data)
                written[p] = hashlib.sha256(data).hexdigest()
                if i % 7 == 3:
                    os.unlink(os.path.join(mnt, "w", "f%d" % (i - 3)))
                    written.pop(os.path.join(mnt, "w", "f%d" % (i - 3)), None)
                i += 1
        except Exception as e:  # reported by the test below
            errors.append(e)

    with fuse_mounted(T.ubtrfs_binary(), imgs, mnt, options="rw"):
        os.makedirs(os.path.join(mnt, "w"))
        th = threading.Thread(target=writer)
        th.start()
        try:
            out = T.ubtrfs("balance", "start", mnt)
            assert out.returncode == 0, T.describe(out)
            assert "had to relocate" in out.stdout.decode()
            out = T.ubtrfs("filesystem", "resize", "-200m", mnt)
            assert out.returncode == 0, T.describe(out)
            out = T.ubtrfs("balance", "start", "-dusage=90", mnt)
            assert out.returncode == 0, T.describe(out)
        finally:
            stop.set()
            th.join()
        assert not errors, errors
        for p, h in written.items():
            with open(p, "rb") as f:
                assert hashlib.sha256(f.read()).hexdigest() == h, p
        expect = {os.path.relpath(p, mnt): h for p, h in written.items()}
    _check_clean(imgs)
    with T.mounted(imgs, os.path.join(scratch, "view")) as kmnt:
        for rel, h in expect.items():
            with open(os.path.join(kmnt, rel), "rb") as f:
                assert hashlib.sha256(f.read()).hexdigest() == h, rel


def test_crash_during_balance(scratch):
    """Crash points through a convert of two devices (every device write and flush recorded):
    each image a crash could leave is a consistent filesystem (btrfs check clean) whose files
    the kernel shows exactly as before, whatever groups had moved."""
    imgs = _make(scratch, 2, 300 * MiB, "raid1", "raid1", seed=11, options="", snapshots=True)
    before = _view(imgs, scratch)
    crash = os.path.join(scratch, "crash")
    os.makedirs(crash)
    driver = T.test_tool("balance_driver")
    cuts = 24 if T.LONG_TESTS else 6
    cp = T.run([str(driver), "--crash-dir", crash, "--crash-cuts", str(cuts), "convert=raid0,dup"] + imgs,
               check=False, timeout=600)
    out = (cp.stdout + cp.stderr).decode("utf-8", "replace")
    assert cp.returncode == 0, out[-3000:]
    found = sorted({int(c) for c in re.findall(r"^cut (\d+) ", out, re.M)})
    assert len(found) >= cuts, out[-2000:]
    step = 1 if T.LONG_TESTS else max(1, len(found) // 10)
    checked = resumed = 0
    for c in found[::step] + ([found[-1]] if (len(found) - 1) % step else []):
        state = [os.path.join(crash, "cut%d_dev%d.img" % (c, d)) for d in range(len(imgs))]
        _check_clean(state)
        _same_view(before, _view(state, scratch))
        checked += 1
        # an interrupted balance leaves its item (from its first commit to its last): status
        # finds it and resume finishes the convert, as the kernel's would at mount
        st = T.ubtrfs("balance", "status", *state)
        assert st.returncode in (0, 1), T.describe(st)
        if st.returncode == 1 and c != found[-1]:
            assert "is paused" in st.stdout.decode(), T.describe(st)
            cp = T.ubtrfs("balance", "resume", *state)
            assert cp.returncode == 0, T.describe(cp)
            st = T.ubtrfs("balance", "status", *state)
            assert st.returncode == 0, T.describe(st)
            _check_clean(state)
            _same_view(before, _view(state, scratch))
            resumed += 1
        for p in state:
            os.unlink(p)
    assert checked >= 6
    assert resumed >= 1
