# SPDX-License-Identifier: MIT
"""ubtrfs balance pause / resume / cancel / status and the balance item, against the kernel.

The balance item (BALANCE TEMPORARY_ITEM 0 in the root tree) is how the kernel
keeps a paused or interrupted balance: ours must be one the kernel reads (its
`btrfs balance status` says paused, its resume finishes it), and the kernel's
one we read, resume and cancel, offline and through a ubtrfs mount. After each
step btrfs check is clean and the kernel shows the same files.
"""
import os
import re
import tempfile

import pytest

import ubtrfs_testlib as T
from test_balance import _make, _view, _same_view, _check_clean
from test_mount import fuse_mounted

MiB = 1 << 20


@pytest.fixture
def own(scratch, request):
    """The test's own folder (the session scratch holds the factory's img/ and mnt/), removed after."""
    d = tempfile.mkdtemp(prefix=request.node.name + "-", dir=scratch)
    yield d
    T.rmtree(d)


def _kernel_paused(imgs, mnt, tries=20):
    """A balance the kernel started and paused after its first group: its item is on the disk.
    On an idle machine the kernel's balance of this small filesystem may end before the pause
    reaches it, every time: then the state cannot be made here and the test is skipped, saying so."""
    with T.mounted(imgs, mnt, readonly=False) as m:
        for _ in range(tries):
            T.run(["btrfs", "balance", "start", "--bg", "--full-balance", m], check=False)
            T.run(["btrfs", "balance", "pause", m], check=False)
            st = T.run(["btrfs", "balance", "status", m], check=False)
            if "is paused" in st.stdout.decode():
                return
    pytest.skip("the kernel's balance ended before its pause in %d tries: no paused balance to start from" % tries)


def test_ubtrfs_pause_kernel_resumes(own):
    """A balance ubtrfs paused: its item says so offline, refuses a new start, and the kernel's
    own status sees it paused and its resume finishes it."""
    scratch = own
    imgs = _make(scratch, 1, 1024 * MiB, "single", "dup", seed=31, options="", snapshots=True)
    before = _view(imgs, scratch)
    cp = T.run([str(T.test_tool("balance_driver")), "--pause-after", "1", "balance"] + imgs, check=False)
    assert cp.returncode == 0 and b"Operation canceled" in cp.stdout, T.describe(cp)
    _check_clean(imgs)

    st = T.ubtrfs("balance", "status", "-v", *imgs)
    out = st.stdout.decode()
    assert st.returncode == 1 and "is paused" in out, T.describe(st)
    assert "flags 0x7" in out, out  # data, metadata and system, as btrfs-progs asks a full balance
    cp = T.ubtrfs("balance", "start", *imgs)
    assert cp.returncode == 1 and "paused balance exists" in cp.stderr.decode(), T.describe(cp)
    cp = T.ubtrfs("balance", "pause", *imgs)
    assert cp.returncode == 2 and "Not running" in cp.stderr.decode(), T.describe(cp)

    with T.mounted(imgs, os.path.join(scratch, "mnt"), options="skip_balance", readonly=False) as mnt:
        st = T.run(["btrfs", "balance", "status", mnt], check=False)
        assert st.returncode == 1 and "is paused" in st.stdout.decode(), T.describe(st)
        cp = T.run(["btrfs", "balance", "resume", mnt], check=False, timeout=300)
        assert cp.returncode == 0 and "Done" in cp.stdout.decode(), T.describe(cp)
        st = T.run(["btrfs", "balance", "status", mnt], check=False)
        assert st.returncode == 0 and "No balance" in st.stdout.decode(), T.describe(st)
    _check_clean(imgs)
    _same_view(before, _view(imgs, scratch))
    st = T.ubtrfs("balance", "status", *imgs)
    assert st.returncode == 0 and "No balance found" in st.stdout.decode(), T.describe(st)


def test_kernel_pause_ubtrfs_resumes_and_cancels(own):
    """A balance the kernel paused: a ubtrfs mount reports it paused and resumes it; offline,
    status reports one and cancel drops it (the kernel then finds none)."""
    scratch = own
    imgs = _make(scratch, 1, 1024 * MiB, "single", "dup", seed=32, options="", snapshots=True)
    before = _view(imgs, scratch)
    _kernel_paused(imgs, os.path.join(scratch, "kmnt"))
    _check_clean(imgs)

    um = os.path.join(scratch, "um")
    log = []  # the refused start is said in the daemon's log
    with fuse_mounted(T.ubtrfs_binary(), imgs, um, options="rw,skip_balance", log=log):
        st = T.ubtrfs("balance", "status", um)
        assert st.returncode == 1 and "Balance on '%s' is paused" % um in st.stdout.decode(), T.describe(st)
        cp = T.ubtrfs("balance", "start", um)
        assert cp.returncode == 1, T.describe(cp)
        cp = T.ubtrfs("balance", "resume", um)
        assert cp.returncode == 0, T.describe(cp)
        assert re.search(r"Done, had to relocate \d+ out of \d+ chunks", cp.stdout.decode()), T.describe(cp)
        st = T.ubtrfs("balance", "status", um)
        assert st.returncode == 0 and "No balance found" in st.stdout.decode(), T.describe(st)
        for verb, msg in (("pause", "Not running"), ("cancel", "Not in progress"), ("resume", "Not in progress")):
            cp = T.ubtrfs("balance", verb, um)
            assert cp.returncode == 2 and msg in cp.stderr.decode(), (verb, T.describe(cp))
    errors = [ln for ln in "".join(log).splitlines() if ": error:" in ln or "Sanitizer" in ln]
    assert errors == ["ubtrfs: error: balance: a paused balance exists; resume or cancel it first"], log
    _check_clean(imgs)
    _same_view(before, _view(imgs, scratch))

    # paused by the kernel again: a ubtrfs mount without skip_balance resumes it by itself, as the
    # kernel's mount does, and it ends (no item left)
    import time
    _kernel_paused(imgs, os.path.join(scratch, "kmnt"))
    with fuse_mounted(T.ubtrfs_binary(), imgs, um, options="rw"):
        deadline = time.monotonic() + 120
        while True:
            st = T.ubtrfs("balance", "status", um)
            if st.returncode == 0:
                break
            assert st.returncode == 1 and time.monotonic() < deadline, T.describe(st)
            time.sleep(0.05)
        assert "No balance found" in st.stdout.decode(), T.describe(st)
    _check_clean(imgs)
    _same_view(before, _view(imgs, scratch))
    st = T.ubtrfs("balance", "status", *imgs)
    assert st.returncode == 0, T.describe(st)

    # paused by the kernel once more; dropped offline
    _kernel_paused(imgs, os.path.join(scratch, "kmnt"))
    st = T.ubtrfs("balance", "status", *imgs)
    assert st.returncode == 1 and "is paused" in st.stdout.decode(), T.describe(st)
    cp = T.ubtrfs("balance", "cancel", *imgs)
    assert cp.returncode == 0, T.describe(cp)
    cp = T.ubtrfs("balance", "cancel", *imgs)
    assert cp.returncode == 2 and "Not in progress" in cp.stderr.decode(), T.describe(cp)
    _check_clean(imgs)
    with T.mounted(imgs, os.path.join(scratch, "mnt"), options="skip_balance", readonly=False) as mnt:
        st = T.run(["btrfs", "balance", "status", mnt], check=False)
        assert st.returncode == 0 and "No balance" in st.stdout.decode(), T.describe(st)
    _same_view(before, _view(imgs, scratch))


def test_offline_resume_of_kernel_pause(own):
    """Offline resume of the kernel's paused balance finishes it as the kernel would (no item left)."""
    scratch = own
    imgs = _make(scratch, 1, 1024 * MiB, "single", "dup", seed=33, options="", snapshots=False)
    before = _view(imgs, scratch)
    _kernel_paused(imgs, os.path.join(scratch, "kmnt"))
    cp = T.ubtrfs("balance", "resume", *imgs)
    assert cp.returncode == 0 and "Done" in cp.stdout.decode(), T.describe(cp)
    st = T.ubtrfs("balance", "status", *imgs)
    assert st.returncode == 0, T.describe(st)
    cp = T.ubtrfs("balance", "resume", *imgs)
    assert cp.returncode == 2 and "Not in progress" in cp.stderr.decode(), T.describe(cp)
    _check_clean(imgs)
    _same_view(before, _view(imgs, scratch))


def test_online_pause_while_running(own):
    """On a ubtrfs mount a running balance reports itself running, pauses on `balance pause`
    (the start answers "balance paused by user", exit 1), is then paused with its counts, and
    resumes to the end; btrfs check is clean and the kernel shows the files as written."""
    scratch = own
    import hashlib
    import random
    import subprocess
    import time

    src = os.path.join(scratch, "src")
    os.makedirs(src)
    rng = random.Random(34)
    files = {}
    for i in range(100):
        data = rng.randbytes(1000000)
        with open(os.path.join(src, "f%d" % i), "wb") as f:
            f.write(data)
        files["/f%d" % i] = (len(data), hashlib.sha256(data).hexdigest())
    img = os.path.join(scratch, "img")
    with open(img, "wb") as f:
        f.truncate(1024 * MiB)
    # mkfs --rootdir lays the data in small groups: a balance of ~15 groups, each a pause point
    T.run(["mkfs.btrfs", "-q", "-f", "--rootdir", src, img])
    T.rmtree(src)
    um = os.path.join(scratch, "um")
    with fuse_mounted(T.ubtrfs_binary(), [img], um, options="rw"):
        for attempt in range(3):
            start = subprocess.Popen([T.ubtrfs_binary(), "balance", "start", um],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            deadline = time.monotonic() + 60
            running = False
            while not running and start.poll() is None and time.monotonic() < deadline:
                st = T.ubtrfs("balance", "status", um)
                running = st.returncode == 1 and "is running" in st.stdout.decode()
            pause = T.ubtrfs("balance", "pause", um) if running else None
            out, err = start.communicate(timeout=120)
            if pause is not None and pause.returncode == 0 and b"paused by user" in err:
                break
            # the balance ended before the pause reached it: another one, as long
            assert start.returncode == 0, (out, err)
        else:
            raise AssertionError("no balance could be paused in three tries")
        assert start.returncode == 1, (out, err)
        st = T.ubtrfs("balance", "status", um)
        m = re.search(r"(\d+) out of about (\d+) chunks balanced", st.stdout.decode())
        assert st.returncode == 1 and "is paused" in st.stdout.decode() and m, T.describe(st)
        assert 0 < int(m.group(1)) < int(m.group(2)), st.stdout.decode()
        cp = T.ubtrfs("balance", "resume", um)
        assert cp.returncode == 0 and "Done" in cp.stdout.decode(), T.describe(cp)
        st = T.ubtrfs("balance", "status", um)
        assert st.returncode == 0, T.describe(st)
    _check_clean([img])
    view = _view([img], scratch)
    assert {p: tuple(h) for p, h in view.hashes.items()} == files
