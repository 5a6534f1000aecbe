# SPDX-License-Identifier: MIT
"""Hostile metadata that still passes its checksum.

The corpus holds images someone else damaged; here the damage is ours and
random (fixed seeds): a kernel-made image with a pending fsync log gets a few
bytes changed in one to three of its tree blocks (fs, extent, csum, chunk,
root and log trees alike), the block checksum is recomputed so the block is
read rather than rejected, and every copy is written. Each command must then
finish in time, exit 0, 1 or 2, print a named error when it fails, and never
trip a sanitizer. UBTRFS_LONG_TESTS=1 runs ten times as many rounds.
"""
import os
import random
import re
import shutil

import pytest

import multidev_lib as M
import ubtrfs_testlib as T

ROUNDS = 400 if os.environ.get("UBTRFS_LONG_TESTS") == "1" else 40
SEEDS = [11, 12]
COMMANDS = [
    ["ls", "-R", "--json"],
    ["ls", "-R", "-l", "--no-log"],
    ["dump-tree"],
    ["cat", "--path", "/a/seq"],
    ["cat", "--path", "/a/new"],
    ["cat", "--path", "/a/b/rand"],
]

crc32c = T.crc32c


def fsync(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@pytest.fixture(scope="module")
def base(scratch, ubtrfs_bin):
    """A crash image (log tree pending) and where each tree block's copies live: built once
    per run and shared by the pytest-xdist workers (the seeds may run on different ones);
    the mutated copies go to this worker's `work`."""
    work = os.path.join(scratch, "mutation")
    os.makedirs(work, exist_ok=True)
    _, got = T.shared_build("mutation-base", lambda d: _build_base(str(d)), fallback_dir=work)
    got["blocks"] = {logical: phys for logical, phys in got["blocks"]}
    got["work"] = work
    return got


def _build_base(work):
    img = os.path.join(work, "live.img")
    crash = os.path.join(work, "crash.img")
    with open(img, "wb") as f:
        f.truncate(128 << 20)
    T.run(["mkfs.btrfs", "-q", "-f", img])
    rng = random.Random(7)
    with T.mounted([img], os.path.join(work, "mnt"), options="commit=300", readonly=False) as mnt:
        os.makedirs(os.path.join(mnt, "a", "b"))
        with open(os.path.join(mnt, "a", "seq"), "w") as f:
            f.write("".join("%d\n" % i for i in range(20000)))
        with open(os.path.join(mnt, "a", "b", "rand"), "wb") as f:
            f.write(rng.randbytes(200000))
        os.symlink("a/seq", os.path.join(mnt, "l"))
        os.setxattr(os.path.join(mnt, "a", "seq"), "user.k", b"v" * 100)
        for i in range(50):
            with open(os.path.join(mnt, "a", "b", "f%d" % i), "w") as f:
                f.write("x" * i)
        T.run(["sync"])
        with open(os.path.join(mnt, "a", "new"), "w") as f:
            f.write("fsynced after the last commit\n")
        fsync(os.path.join(mnt, "a", "new"))
        T.copy_sparse(img, crash)
    sup = T.parse_dump_super(T.run(["btrfs", "inspect-internal", "dump-super", crash]).stdout.decode())
    log_root = int(sup["log_root"])
    assert log_root, "test setup: the kernel committed instead of logging"
    nodesize = int(sup["nodesize"])
    dump = T.run(["btrfs", "inspect-internal", "dump-tree", crash]).stdout.decode()
    blocks = {int(b) for b in re.findall(r"^(?:leaf|node) (\d+) ", dump, re.M)}
    # the log root tree and the log trees it points at
    logdump = T.run(["btrfs", "inspect-internal", "dump-tree", "-b", str(log_root), crash]).stdout.decode()
    blocks.add(log_root)
    blocks |= {int(b) for b in re.findall(r"\bbytenr (\d+)", logdump)}
    chunks = M.parse_chunks(T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "chunk", crash]).stdout.decode())
    where = {b: [p for _, p in M.chunk_of(chunks, b).copies(b)] for b in sorted(blocks)}
    assert len(where) > 8, where
    return {"crash": crash, "nodesize": nodesize, "blocks": sorted(where.items()), "log_root": log_root}


def mutate(src, dst, base, rng):
    shutil.copyfile(src, dst)
    ns = base["nodesize"]
    picks = rng.sample(sorted(base["blocks"]), rng.randint(1, 3))
    with open(dst, "r+b") as f:
        for logical in picks:
            phys = base["blocks"][logical]
            f.seek(phys[0])
            blk = bytearray(f.read(ns))
            for _ in range(rng.randint(1, 6)):
                # mostly items and their data; sometimes the header past the checksum
                pos = rng.randrange(101, ns) if rng.random() < 0.85 else rng.randrange(32, 101)
                if rng.random() < 0.5:
                    blk[pos] = rng.randrange(256)
                else:
                    blk[pos] ^= 1 << rng.randrange(8)
            blk[0:4] = crc32c(bytes(blk[32:])).to_bytes(4, "little")
            for p in phys:
                f.seek(p)
                f.write(blk)
    return picks


@pytest.mark.parametrize("seed", SEEDS)
def test_mutated_metadata(base, seed):
    rng = random.Random(seed)
    img = os.path.join(base["work"], "m%d.img" % seed)
    failures = []
    codes = {0: 0, 1: 0, 2: 0}
    for rnd in range(ROUNDS):
        picks = mutate(base["crash"], img, base, rng)
        for cmd in COMMANDS:
            try:
                cp = T.ubtrfs(*cmd, img, timeout=30)
            except Exception as e:  # a hang is a failure like any other
                failures.append("round %d blocks %s: %s: %s" % (rnd, picks, " ".join(cmd), e))
                continue
            err = cp.stderr.decode("utf-8", "replace")
            codes[cp.returncode] = codes.get(cp.returncode, 0) + 1
            bad = None
            if cp.returncode not in (0, 1, 2):
                bad = "exit %d" % cp.returncode
            elif "Sanitizer" in err or "runtime error:" in err:
                bad = "sanitizer report"
            elif cp.returncode != 0 and not re.search(r"error: \S", err):
                bad = "exit %d without a named error" % cp.returncode
            if bad:
                failures.append("round %d blocks %s: %s: %s\n%s" % (rnd, picks, " ".join(cmd), bad, err[-1500:]))
        if len(failures) > 5:
            break
    os.unlink(img)
    assert not failures, "\n\n".join(failures)
    # the damage must actually reach the parsers: some runs fail, some succeed
    assert codes[0] and (codes[1] or codes[2]), codes
