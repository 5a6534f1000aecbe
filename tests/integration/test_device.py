# SPDX-License-Identifier: MIT
"""ubtrfs device add / remove and filesystem resize on devices nothing has mounted.

One sequence through the profiles, as the issue asks: a kernel-made RAID1 on
two devices gains two, is converted to RAID6, loses one by removal, one by
disappearing (replaced: rebuilt onto a new device), has a present one replaced,
loses another (removed as missing once a device was added), has a device shrunk
and another grown, and is converted back to RAID1. After every step the
kernel's read-only mount shows exactly what it showed first, btrfs check
(--check-data-csum) is clean, and `filesystem show` lists the devices
expected. Refusals (a profile's minimum device count, a device holding a
filesystem) change no byte.
"""
import hashlib
import os
import re
import subprocess

import ubtrfs_testlib as T
from test_balance import _make, _view, _same_view, _check_clean, _df, MiB


def _dev(d, name, size):
    p = os.path.join(d, name)
    with open(p, "wb") as f:
        f.truncate(size)
    return p


def _show(imgs):
    out = T.ubtrfs("filesystem", "show", *imgs).stdout.decode()
    return {int(m.group(1)): int(m.group(2)) for m in re.finditer(r"devid\s+(\d+) size (\d+)", out)}


def _ok(*args):
    cp = T.ubtrfs(*args)
    assert cp.returncode == 0, T.describe(cp)
    return cp.stdout.decode()


def _sha(paths):
    h = hashlib.sha256()
    for p in paths:
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def test_device_sequence(scratch):
    imgs = _make(scratch, 2, 400 * MiB, "raid1", "raid1", seed=7, options="compress=zstd")
    before = _view(imgs, scratch)

    def verify(devs, ids):
        _check_clean(devs)
        _same_view(before, _view(devs, scratch))
        assert sorted(_show(devs)) == ids

    d3, d4 = _dev(scratch, "dev2.img", 400 * MiB), _dev(scratch, "dev3.img", 400 * MiB)
    _ok("device", "add", d3, d4, "--", *imgs)
    devs = imgs + [d3, d4]
    verify(devs, [1, 2, 3, 4])

    _ok("balance", "start", "-dconvert=raid6", "-mconvert=raid1c3", *devs)
    assert {k[1] for k in _df(devs)} == {"raid6", "raid1c3"}
    verify(devs, [1, 2, 3, 4])

    _ok("device", "remove", "1", "--", *devs)
    devs = devs[1:]
    verify(devs, [2, 3, 4])
    # the removed device no longer holds this filesystem's superblock
    with open(imgs[0], "rb") as f:
        f.seek(65536 + 64)
        assert f.read(8) != b"_BHRfS_M"

    # device 2 disappears: a new device takes its place, rebuilt from parity and the mirrors
    d5 = _dev(scratch, "dev4.img", 450 * MiB)
    os.unlink(devs[0])
    _ok("replace", "start", "missing", d5, "--", *devs[1:])
    devs = [d5] + devs[1:]
    verify(devs, [2, 3, 4])
    # a present device replaced: read from itself
    d6 = _dev(scratch, "dev5.img", 400 * MiB)
    _ok("replace", "start", "3", d6, "--", *devs)
    with open(devs[1], "rb") as f:
        f.seek(65536 + 64)
        assert f.read(8) != b"_BHRfS_M"
    devs = [devs[0], d6, devs[2]]
    verify(devs, [2, 3, 4])

    # one more lost and removed as missing, once a fourth device gives RAID6 its minimum
    d7 = _dev(scratch, "dev6.img", 400 * MiB)
    _ok("device", "add", d7, "--", *devs)
    devs.append(d7)
    os.unlink(devs[2])
    devs = devs[:2] + devs[3:]
    _ok("device", "remove", "missing", "--", *devs)
    verify(devs, [2, 3, 5])

    _ok("filesystem", "resize", "3:-100m", *devs)
    assert _show(devs)[3] == 300 * MiB
    _ok("filesystem", "resize", "2:max", *devs)
    assert _show(devs)[2] == 450 * MiB
    verify(devs, [2, 3, 5])

    _ok("balance", "start", "-dconvert=raid1", "-mconvert=raid1", "-f", *devs)
    assert {k[1] for k in _df(devs)} == {"raid1"}
    verify(devs, [2, 3, 5])


def test_refusals_change_nothing(scratch):
    imgs = _make(scratch, 2, 300 * MiB, "raid1", "raid1", seed=8, options="", snapshots=False)
    other = _dev(scratch, "other.img", 300 * MiB)
    T.run(["mkfs.btrfs", "-q", "-f", other])
    digest = _sha(imgs + [other])
    for args, message, code in [
        (["device", "remove", "2", "--"] + imgs, "RAID1 needs at least 2 devices", 2),
        (["device", "add", other, "--"] + imgs, "holds a btrfs filesystem", 2),
        (["filesystem", "resize", "1:100m"] + imgs, "too small", 2),
        (["filesystem", "resize", "2:+1g"] + imgs, "cannot grow", 2),
        (["device", "remove", "missing", "--"] + imgs, "no device is missing", 2),
    ]:
        cp = subprocess.run([str(T.ubtrfs_binary())] + args, capture_output=True)
        text = (cp.stdout + cp.stderr).decode()
        assert cp.returncode == code and message in text, T.describe(cp)
        assert _sha(imgs + [other]) == digest, args


def test_online_devices_while_writing(scratch):
    """On a ubtrfs mount, while a thread writes and deletes files: a device added, the data
    converted to RAID1 across both, the first device removed (everything moves to the second).
    Every file reads back as written; after the unmount btrfs check is clean on the device left
    and the kernel shows the same bytes."""
    import random
    import threading
    from test_mount import fuse_mounted

    imgs = _make(scratch, 1, 600 * MiB, "single", "dup", seed=12, options="", snapshots=False)
    new = _dev(scratch, "new.img", 600 * MiB)
    mnt = os.path.join(scratch, "um")
    written, errors = {}, []
    stop = threading.Event()

    def writer():
        rng = random.Random(13)
        try:
            for i in range(600):
                if stop.is_set():
                    break
                data = rng.randbytes(rng.choice([10, 4096, 70000, 250000]))
                p = os.path.join(mnt, "w", "f%d" % i)
                with open(p, "wb") as f:
                    f.write(data)
                written[p] = hashlib.sha256(data).hexdigest()
                if i % 5 == 2:
                    gone = os.path.join(mnt, "w", "f%d" % (i - 2))
                    os.unlink(gone)
                    written.pop(gone, None)
        except Exception as e:
            errors.append(e)

    with fuse_mounted(T.ubtrfs_binary(), imgs, mnt, options="rw"):
        os.makedirs(os.path.join(mnt, "w"))
        th = threading.Thread(target=writer)
        th.start()
        try:
            _ok("device", "add", new, mnt)
            _ok("balance", "start", "-dconvert=raid1", "-mconvert=raid1", mnt)
            _ok("balance", "start", "-dconvert=single", "-mconvert=dup", "-f", mnt)
            _ok("device", "remove", "1", mnt)
        finally:
            stop.set()
            th.join()
        assert not errors, errors
        for p, h in written.items():
            with open(p, "rb") as f:
                assert hashlib.sha256(f.read()).hexdigest() == h, p
        expect = {os.path.relpath(p, mnt): h for p, h in written.items()}
    with open(imgs[0], "rb") as f:
        f.seek(65536 + 64)
        assert f.read(8) != b"_BHRfS_M"
    _check_clean([new])
    with T.mounted([new], os.path.join(scratch, "view")) as kmnt:
        for rel, h in expect.items():
            with open(os.path.join(kmnt, rel), "rb") as f:
                assert hashlib.sha256(f.read()).hexdigest() == h, rel


def test_mkfs_raid56_metadata_warns(scratch):
    """mkfs -m raid5/raid6 says what whole-stripe metadata costs and recommends raid1c3; -m raid1c3 says nothing."""
    devs = [_dev(scratch, "m%d.img" % i, 300 * MiB) for i in range(4)]
    cp = subprocess.run([str(T.ubtrfs_binary()), "mkfs", "-f", "-q", "-m", "raid6", "-d", "raid6"] + devs,
                        capture_output=True)
    text = cp.stderr.decode()
    assert cp.returncode == 0, T.describe(cp)
    assert "whole 128 KiB stripes" in text and "raid1c3" in text, text
    cp = subprocess.run([str(T.ubtrfs_binary()), "mkfs", "-f", "-q", "-m", "raid1c3", "-d", "raid6"] + devs,
                        capture_output=True)
    assert cp.returncode == 0 and b"WARNING" not in cp.stderr, T.describe(cp)


def test_online_replace_and_remove_missing(scratch):
    """A ubtrfs mount, read-write degraded with one of three RAID1 devices gone: `replace start
    missing NEWDEV MNT` rebuilds it onto a new device while the mount serves, `replace status`
    says Finished; mounted degraded again without another one, `device remove missing MNT`
    moves its groups to the two left. Each time btrfs check is clean and the kernel (mounting
    every device, not degraded) shows the same files and the ones written meanwhile."""
    from test_mount import fuse_mounted

    imgs = _make(scratch, 3, 400 * MiB, "raid1", "raid1", seed=41, options="", snapshots=False)
    before = _view(imgs, scratch)
    new = _dev(scratch, "new.img", 400 * MiB)
    um = os.path.join(scratch, "um")
    log = []  # the daemon warns of the missing device
    with fuse_mounted(T.ubtrfs_binary(), imgs[:2], um, options="rw,degraded", log=log):
        with open(os.path.join(um, "written-degraded"), "wb") as f:
            f.write(b"x" * 300000)
        cp = T.ubtrfs("replace", "start", "missing", new, um)
        assert cp.returncode == 0, T.describe(cp)
        assert T.ubtrfs("replace", "status", um).stdout.decode().strip() == "Finished"
        with open(os.path.join(um, "written-after"), "wb") as f:
            f.write(b"y" * 5000)
    assert not [ln for ln in "".join(log).splitlines() if ": error:" in ln], log
    now = [imgs[0], imgs[1], new]
    _check_clean(now)
    wrote = {"written-degraded": (300000, hashlib.sha256(b"x" * 300000).hexdigest()),
             "written-after": (5000, hashlib.sha256(b"y" * 5000).hexdigest())}

    def same_files(view):
        # the files from before byte for byte, and the two written through the degraded mount
        got = {k.lstrip("/"): v for k, v in view.hashes.items()}
        for k, v in before.hashes.items():
            assert got.get(k.lstrip("/")) == v, k
        for k, v in wrote.items():
            assert got.get(k) == v, (k, sorted(got)[:5])

    same_files(_view(now, scratch))

    # the new device goes missing in its turn: removed online, the two others left
    log = []
    with fuse_mounted(T.ubtrfs_binary(), [imgs[0], imgs[1]], um, options="rw,degraded", log=log):
        cp = T.ubtrfs("device", "remove", "missing", um)
        assert cp.returncode == 0, T.describe(cp)
    assert not [ln for ln in "".join(log).splitlines() if ": error:" in ln], log
    left = [imgs[0], imgs[1]]
    _check_clean(left)
    assert sorted(_show(left)) == [1, 2]
    same_files(_view(left, scratch))


def test_online_replace_cancel(scratch):
    """`replace cancel MNT` while a ubtrfs mount's replace copies: the source device's reads are
    stalled (tests/tools/slowdev) so the copy is caught halfway, `replace status` says how far,
    the cancel returns at once, the start then fails with "Operation canceled", status says
    canceled, and the filesystem is as it was: the old device still its member, btrfs check
    clean, every file readable, the new device without a btrfs superblock."""
    from test_mount import fuse_mounted
    from test_mount_parallel import slow_device
    import threading
    import time

    imgs = _make(scratch, 2, 400 * MiB, "raid1", "raid1", seed=43, options="", snapshots=False)
    new = _dev(scratch, "new.img", 400 * MiB)
    flag = os.path.join(scratch, "stall")
    um = os.path.join(scratch, "um")
    big = os.urandom(24 * MiB)
    result = {}
    with slow_device(T.test_tool("slowdev"), imgs[1], 1 * MiB, 400 * MiB, flag, os.path.join(scratch, "slow")) as dev:
        with fuse_mounted(T.ubtrfs_binary(), [imgs[0], dev], um, options="rw"):
            with open(os.path.join(um, "big"), "wb") as f:
                f.write(big)
            assert T.ubtrfs("filesystem", "sync", um).returncode == 0
            open(flag, "w").close()
            th = threading.Thread(target=lambda: result.update(cp=T.ubtrfs("replace", "start", "2", new, um,
                                                                            timeout=300)))
            th.start()
            deadline = time.monotonic() + 60
            while True:
                st = T.ubtrfs("replace", "status", um, timeout=30).stdout.decode().strip()
                if st.endswith("% done"):
                    break
                assert time.monotonic() < deadline and th.is_alive(), (st, result)
                time.sleep(0.05)
            cp = T.ubtrfs("replace", "cancel", um, timeout=30)
            assert cp.returncode == 0 and b"no replace" not in cp.stderr, T.describe(cp)
            os.unlink(flag)
            th.join(120)
            assert not th.is_alive()
            cp = result["cp"]
            assert cp.returncode != 0 and b"Operation canceled" in cp.stdout + cp.stderr, T.describe(cp)
            assert T.ubtrfs("replace", "status", um, timeout=30).stdout.decode().strip() == "Canceled or suspended"
            with open(os.path.join(um, "big"), "rb") as f:
                assert f.read() == big
            with open(os.path.join(um, "after"), "wb") as f:
                f.write(b"z" * 7000)
    _check_clean(imgs)
    with open(new, "rb") as f:
        f.seek(65536 + 64)
        assert f.read(8) != b"_BHRfS_M", "the canceled replace left a btrfs superblock on the new device"
