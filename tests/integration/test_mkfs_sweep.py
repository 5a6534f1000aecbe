# SPDX-License-Identifier: MIT
"""mkfs on states found in the correctness sweep (issue 28):

  * a loop device and the image file behind it are one device: given both, mkfs refuses as for
    a file named twice, and writes nothing;
  * a --rootdir copy that fails says exactly what the filesystem holds (here: nothing of the
    source, the copy failed before its first commit), and ls agrees.

(An mkfs stopped before its superblocks land must leave no copy of an old filesystem's
superblock: tests/unit/test_mkfs.c remade_over_old_stopped_before_supers cuts a recorded run.)
"""

import os
import re

import ubtrfs_testlib as T
from test_mkfs import _images, refused

MiB = T.MiB


def test_loop_device_and_its_file_refused(scratch, ubtrfs_bin):
    # raid1 over one file through two names: large enough that only the refusal stops it
    imgs = _images(scratch, "sweep-loopdup", 2, 130 * MiB)
    loops = []
    try:
        loops.append(T.losetup_attach(imgs[0], False))
        loops.append(T.losetup_attach(imgs[0], False))
        for args in ([imgs[0], loops[0]], [loops[1], imgs[0]]):
            refused(imgs[:1], ["-f", "-d", "raid1", "-m", "raid1"] + args,
                    r"%s is given twice: %s is a loop device over it" % (re.escape(imgs[0]), re.escape(
                        args[0] if args[0] != imgs[0] else args[1])))
        refused(imgs[:1], ["-f", "-d", "raid1", "-m", "raid1"] + loops,
                r"%s and %s are loop devices over one file" % (re.escape(loops[0]), re.escape(loops[1])))
        # control: the loop device and another file are two devices
        cp = T.ubtrfs("mkfs", "-q", "-f", "-d", "raid1", "-m", "raid1", imgs[1], loops[0])
        assert cp.returncode == 0, T.describe(cp)
    finally:
        for dev in reversed(loops):
            T.losetup_detach(dev)
        for p in imgs:
            os.unlink(p)


def test_rootdir_failure_says_what_is_left(scratch, ubtrfs_bin):
    """A copy that fails before its first commit leaves the filesystem as mkfs made it: the
    message says so (not just "incomplete"), and ls finds nothing in it."""
    work = os.path.join(scratch, "sweep-rootdir-fail")
    src = os.path.join(work, "src")
    os.makedirs(os.path.join(src, "d"))
    for i in range(5):
        with open(os.path.join(src, "f%d" % i), "wb") as f:
            f.write(b"x" * 3000)
    secret = os.path.join(src, "d", "secret")
    with open(secret, "wb") as f:
        f.write(b"y" * 5000)
    img = _images(work, "img", 1, 256 * MiB)[0]
    try:
        # root without the DAC capabilities cannot open a mode 000 file of another user
        os.chown(secret, 4242, 4242)
        os.chmod(secret, 0)
        cp = T.run(["setpriv", "--bounding-set", "-dac_override,-dac_read_search", T.ubtrfs_binary(),
                    "mkfs", "-f", "-q", "--rootdir", src, img], check=False)
        err = cp.stderr.decode("utf-8", "replace")
        assert cp.returncode == 1, T.describe(cp)
        assert secret in err and "Permission denied" in err, T.describe(cp)
        assert re.search(r"--rootdir %s: the copy failed before its first commit: the new filesystem is empty"
                         % re.escape(src), err), T.describe(cp)
        ls = T.ubtrfs("ls", "-R", img)
        assert ls.returncode == 0 and ls.stdout == b"", T.describe(ls)
    finally:
        T.rmtree(work)
