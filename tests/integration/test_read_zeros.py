# SPDX-License-Identifier: MIT
"""A read fills the caller's whole buffer: the extents' bytes, zeros everywhere else.

The file read path clears only what no extent fills (a compressed extent decoded
straight into the buffer is not cleared first), so every other range must still
come out as zeros: holes between extents, a preallocated range, a hole running
past the last extent and over whole read calls (`ubtrfs cat` reuses one 4 MiB
buffer, so a range left alone would show the previous call's bytes), in files
the kernel wrote under compress-force=zstd and without compression. The oracle
is the kernel's read of the same files.
"""

import hashlib
import os
import random

import ubtrfs_testlib as T

MiB = 1 << 20


def _text(rng, n):
    words = [bytes(rng.choice(b"abcdefghij") for _ in range(rng.randrange(2, 9))) for _ in range(300)]
    out = bytearray()
    while len(out) < n:
        out += b" ".join(rng.choices(words, k=12)) + b"\n"
    return bytes(out[:n])


def _write(mnt, rng):
    """name -> how the file is made; returns name -> the kernel's sha256 of it."""
    with open(os.path.join(mnt, "tail_hole"), "wb") as f:  # data, then a hole over several read calls
        f.write(_text(rng, 5 * MiB + 12345))
        f.truncate(40 * MiB)
    with open(os.path.join(mnt, "mid_holes"), "wb") as f:  # holes between compressed extents
        f.write(_text(rng, 6 * MiB))
        f.seek(13 * MiB + 4096)
        f.write(_text(rng, 3 * MiB))
        f.seek(21 * MiB)
        f.write(_text(rng, 4096))
        f.truncate(30 * MiB)
    with open(os.path.join(mnt, "prealloc"), "wb") as f:  # a preallocated range among compressed extents
        f.write(_text(rng, 3 * MiB))
        os.posix_fallocate(f.fileno(), 3 * MiB, 5 * MiB)
        f.seek(8 * MiB)
        f.write(_text(rng, 2 * MiB))
    with open(os.path.join(mnt, "random_tail"), "wb") as f:  # incompressible: plain extents, then a hole
        f.write(rng.randbytes(3 * MiB))
        f.truncate(19 * MiB)


def test_holes_and_prealloc_read_as_zeros(ubtrfs_bin, tmp_path):
    img = tmp_path / "zeros.img"
    with open(img, "wb") as f:
        f.truncate(256 * MiB)
    T.run(["mkfs.btrfs", "-q", "-f", str(img)])
    rng = random.Random(36)
    want = {}
    with T.mounted([img], tmp_path / "mnt", options="compress-force=zstd", readonly=False) as mnt:
        _write(mnt, rng)
    with T.mounted([img], tmp_path / "mnt") as mnt:
        for name in sorted(os.listdir(mnt)):
            with open(os.path.join(mnt, name), "rb") as f:
                data = f.read()
            want[name] = (len(data), hashlib.sha256(data).hexdigest())
    assert len(want) == 4, want
    for name, (size, digest) in want.items():
        rc, got_size, got, cp = T.cat_hash([img], "/" + name)
        assert rc == 0, T.describe(cp)
        assert (got_size, got) == (size, digest), "%s differs from the kernel's bytes" % name
