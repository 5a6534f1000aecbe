# SPDX-License-Identifier: MIT
"""A balance keeps the tree blocks snapshots share shared.

The kernel writes a subvolume of many small files (4 KiB nodes, so its tree
has three levels), snapshots it four times with changes in between (so the
subvolume's own blocks get full back references when it changes after a
snapshot), and ubtrfs adds a snapshot of a snapshot and changes through it.
ubtrfs then relocates every group (data too: the leaves whose file extent
items change are shared as well): btrfs check must be clean, the
kernel must read every file of every snapshot exactly as before, and the
metadata used must stay close to what it was. Before, each tree got its own
copy of every shared block (2.9 times the metadata on this image without the
ubtrfs-made snapshot), and with the snapshot of a snapshot the balance stopped
at a block that no copy-on-write through its trees could take away.
Then the copies are changed as any shared block is, by ubtrfs and the kernel.
"""
import os
import re

import ubtrfs_testlib as T
from test_check_sweep import progs_check_devices

MiB = 1 << 20


def _meta_used(imgs):
    out = T.ubtrfs("filesystem", "df", "-b", *imgs).stdout.decode()
    m = re.search(r"^Metadata, \w+: total=\d+, used=(\d+)", out, re.M)
    assert m, out
    return int(m.group(1))


def _populate(mnt, nfiles=1500):
    sv = os.path.join(mnt, "sv")
    T.run(["btrfs", "subvolume", "create", sv])
    for i in range(nfiles):
        d = os.path.join(sv, "d%d" % (i % 8))
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "f%d" % i), "wb") as f:
            # most inline in the leaves, every fifth a data extent of its own
            f.write(b"%d " % i * (20 + i % 90 if i % 5 else 1500 + i % 900))
    for s in range(4):
        T.run(["btrfs", "subvolume", "snapshot", sv, os.path.join(mnt, "s%d" % s)])
        # the source changes after each snapshot: its shared blocks get full back references
        for i in range(s, nfiles, 37):
            with open(os.path.join(sv, "d%d" % (i % 8), "f%d" % i), "ab") as f:
                f.write(b"after snapshot %d" % s)
    T.run(["sync"])


def test_metadata_balance_keeps_snapshots_shared(scratch):
    img = os.path.join(scratch, "dev0.img")
    with open(img, "wb") as f:
        f.truncate(512 * MiB)
    imgs = [img]
    T.run(["mkfs.btrfs", "-q", "-f", "-n", "4096", "-m", "dup", "-d", "single", img])
    with T.mounted(imgs, os.path.join(scratch, "mnt"), readonly=False) as mnt:
        _populate(mnt)
    # a snapshot ubtrfs makes, of a snapshot, changed through ubtrfs (offline)
    T.ubtrfs("subvolume", "snapshot", "--path", "s1", "--dest", "s1b", img)
    before = T.kernel_view(imgs, os.path.join(scratch, "view"))
    used_before = _meta_used(imgs)
    # the kernel's figure for the same balance, on a copy
    kimg = os.path.join(scratch, "kernel.img")
    T.copy_sparse(img, kimg)
    with T.mounted([kimg], os.path.join(scratch, "mnt"), readonly=False) as mnt:
        T.run(["btrfs", "balance", "start", "--full-balance", mnt], timeout=600)
    used_kernel = _meta_used([kimg])
    os.unlink(kimg)
    cp = T.ubtrfs("balance", "start", img)
    assert cp.returncode == 0, T.describe(cp)
    used_after = _meta_used(imgs)
    print("metadata used before %d, after ubtrfs's balance %d (%.2fx), after the kernel's %d (%.2fx)" % (
        used_before, used_after, used_after / used_before, used_kernel, used_kernel / used_before))
    # both modes: lowmem also compares each tree block's extent item generation with its header's
    for mode in ("original", "lowmem"):
        rc, text = progs_check_devices(imgs, "--mode=" + mode)
        assert rc == 0, text
    cp = T.ubtrfs("check", img)
    assert cp.returncode == 0, T.describe(cp)
    after = T.kernel_view(imgs, os.path.join(scratch, "view"))
    diffs = T.compare_entries(before.entries, after.entries)
    assert not diffs, "\n".join(diffs)
    assert before.hashes == after.hashes
    assert used_after <= used_before * 1.15 + 2 * MiB, (used_before, used_after)
    # the copies are changed later as any shared block is: by ubtrfs (a snapshot deleted, a balance
    # again) and by the kernel (changes in the source and a snapshot, a snapshot deleted and cleaned)
    T.ubtrfs("subvolume", "delete", "--path", "s3", img)
    cp = T.ubtrfs("balance", "start", "-m", img)
    assert cp.returncode == 0, T.describe(cp)
    rc, text = progs_check_devices(imgs)
    assert rc == 0, text
    with T.mounted(imgs, os.path.join(scratch, "mnt"), readonly=False) as mnt:
        for i in range(0, 1500, 53):
            for sv in ("sv", "s0", "s1b"):
                with open(os.path.join(mnt, sv, "d%d" % (i % 8), "f%d" % i), "ab") as f:
                    f.write(b"after the balance")
        T.run(["btrfs", "subvolume", "delete", "-c", os.path.join(mnt, "s2")])
        T.run(["btrfs", "subvolume", "sync", mnt])
    rc, text = progs_check_devices(imgs)
    assert rc == 0, text
