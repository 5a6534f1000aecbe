# SPDX-License-Identifier: MIT
"""Every image of the btrfs-progs corpus mounts and can be walked and read, or is refused with a
message (exit 2); never a hang, a crash or a sanitizer report, and no mount point left behind."""

import os
import subprocess
import tempfile
import time

import pytest

import ubtrfs_testlib as T
from test_corpus import IMAGE_PARAMS, IMAGES, cache_dir, extract
from test_mount import _read

SANITIZER = ("Sanitizer", "runtime error")


@pytest.mark.parametrize("image", IMAGE_PARAMS)
def test_corpus_mount(ubtrfs_bin, scratch, image):
    archive = dict(IMAGES)[image]
    raw = extract(image, archive, cache_dir(IMAGES))
    mnt = os.path.join(scratch, "corpus-mnt", image.replace("/", "_"))
    os.makedirs(mnt, exist_ok=True)
    # a file, not a pipe: a damaged image makes the daemon log more than a pipe holds
    errf = tempfile.TemporaryFile()
    proc = subprocess.Popen([str(ubtrfs_bin), "mount", "-f", str(raw), mnt], stdout=subprocess.DEVNULL, stderr=errf)
    walked = None
    try:
        deadline = time.monotonic() + 60
        while not os.path.ismount(mnt) and proc.poll() is None:
            assert time.monotonic() < deadline, "neither mounted nor refused after 60 s"
            time.sleep(0.02)
        if os.path.ismount(mnt):
            # every entry stat'ed, every file read, symlinks and xattrs: errors are fine, hangs are not
            walked = subprocess.run(
                ["timeout", "120", "sh", "-c",
                 "find . -exec stat {} + >/dev/null; find . -type f -exec cat {} + >/dev/null; "
                 "find . -type l -exec readlink {} + >/dev/null; "
                 "find . -exec getfattr -d -m - {} + >/dev/null 2>&1 || true"],
                cwd=mnt, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    finally:
        T.run(["fusermount3", "-u", "-z", mnt], check=False)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    err = _read(errf)
    assert not any(s in err for s in SANITIZER), err[-4000:]
    assert walked is None or walked.returncode != 124, "walking the mount timed out"
    if walked is None:
        assert proc.returncode == 2 and err.strip(), "refused without a message (exit %d)" % proc.returncode
    else:
        assert proc.returncode == 0, "exit %d after unmounting: %s" % (proc.returncode, err[-4000:])
    assert not os.path.ismount(mnt)
