# SPDX-License-Identifier: MIT
"""`ubtrfs check --repair` against `btrfs check --repair` on random checksum-valid mutants.

The mutator is test_mutation.py's (a few bytes changed in one to three tree blocks, the
block checksums recomputed so the damage is read), here on a kernel-made image with no
fsync log (a pending log is refused by the repair). For each fixed-seed mutant, on copies:

  * the files readable before (repair_lib.readable_files, one reader for every state);
  * `ubtrfs check --repair`: no crash, hang or sanitizer report, exit 0, 1 or 2; every
    file readable before reads the same after (never worse); `rescue undo` gives the
    mutant back byte for byte;
  * `btrfs check --repair`: the files it keeps readable (of those readable before, the
    same bytes) must all be kept by ours too. A mutant where btrfs check --repair keeps
    a file ours loses fails.

The tally (how many mutants each repair made clean, by btrfs check's verdict; files
btrfs check --repair lost) is printed with -s. Default: 2 seeds of 10 mutants;
UBTRFS_LONG_TESTS=1: 2 seeds of 100.
"""

import os
import random
import re

import pytest

import multidev_lib as M
import repair_lib as RL
import ubtrfs_testlib as T
from test_mutation import mutate

ROUNDS = 100 if os.environ.get("UBTRFS_LONG_TESTS") == "1" else 10
SEEDS = [31, 32]
HANG = 4  # seconds: btrfs check --repair takes a tenth of one on these images when it ends


def _build_base(work):
    img = os.path.join(work, "base.img")
    with open(img, "wb") as f:
        f.truncate(128 << 20)
    T.run(["mkfs.btrfs", "-q", "-f", img])
    rng = random.Random(9)
    with T.mounted([img], os.path.join(work, "mnt"), readonly=False) as mnt:
        os.makedirs(os.path.join(mnt, "a", "b"))
        with open(os.path.join(mnt, "a", "seq"), "w") as f:
            f.write("".join("%d\n" % i for i in range(20000)))
        with open(os.path.join(mnt, "a", "b", "rand"), "wb") as f:
            f.write(rng.randbytes(200000))
        os.symlink("a/seq", os.path.join(mnt, "l"))
        os.link(os.path.join(mnt, "a", "seq"), os.path.join(mnt, "a", "b", "seq-link"))
        os.setxattr(os.path.join(mnt, "a", "seq"), "user.k", b"v" * 100)
        for i in range(60):
            with open(os.path.join(mnt, "a", "b", "f%d" % i), "w") as f:
                f.write("x" * (i * 37))
        T.run(["btrfs", "subvolume", "snapshot", mnt, os.path.join(mnt, "snap")])
    sup = T.parse_dump_super(T.run(["btrfs", "inspect-internal", "dump-super", img]).stdout.decode())
    assert int(sup["log_root"]) == 0
    dump = T.run(["btrfs", "inspect-internal", "dump-tree", img]).stdout.decode()
    blocks = {int(b) for b in re.findall(r"^(?:leaf|node) (\d+) ", dump, re.M)}
    chunks = M.parse_chunks(T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "chunk", img]).stdout.decode())
    where = {b: [p for _, p in M.chunk_of(chunks, b).copies(b)] for b in sorted(blocks)}
    assert len(where) > 8, where
    return {"img": img, "nodesize": int(sup["nodesize"]), "blocks": sorted(where.items())}


@pytest.fixture(scope="module")
def base(scratch, ubtrfs_bin):
    work = os.path.join(scratch, "repair-mutants")
    os.makedirs(work, exist_ok=True)
    _, got = T.shared_build("repair-mutants-base", lambda d: _build_base(str(d)), fallback_dir=work)
    got["blocks"] = {logical: phys for logical, phys in got["blocks"]}
    got["work"] = work
    return got


def kept(before, after):
    return {p for p, h in before.items() if after.get(p) == h}


@pytest.mark.parametrize("seed", SEEDS)
def test_repair_no_worse_than_btrfs_check(base, seed):
    rng = random.Random(seed)
    work = os.path.join(base["work"], "s%d" % seed)
    os.makedirs(work, exist_ok=True)
    full = os.path.join(work, "mutant-full.img")
    mut = os.path.join(work, "mutant.img")
    ours = os.path.join(work, "ours.img")
    theirs = os.path.join(work, "theirs.img")
    undo = os.path.join(work, "ours.undo")
    failures = []
    tally = {"damaged": 0, "ours clean": 0, "theirs clean": 0, "ours changed": 0, "theirs lost files": 0,
             "theirs hung": 0, "theirs crashed": 0}
    try:
        for rnd in range(ROUNDS):
            # the mutator writes a whole copy: made sparse again, the comparisons read less
            picks = mutate(base["img"], full, base, rng)
            RL.copy_sparse(full, mut)
            what = "seed %d round %d blocks %s" % (seed, rnd, picks)
            damaged = not RL.btrfs_check_clean(mut, timeout=30)
            tally["damaged"] += damaged
            before, _ = RL.readable_files(mut, work)
            # ours
            RL.copy_sparse(mut, ours)
            if os.path.exists(undo):
                os.unlink(undo)
            cp = RL.ubtrfs_repair(ours, undo)
            err = cp.stderr.decode(errors="replace")
            if cp.returncode not in (0, 1, 2) or RL.sanitizer_report(cp.stderr):
                failures.append("%s: ubtrfs check --repair exit %d\n%s" % (what, cp.returncode, err[-2000:]))
                continue
            after_ours, _ = RL.readable_files(ours, work)
            lost = sorted(set(before) - kept(before, after_ours))
            if lost:
                failures.append("%s: ubtrfs check --repair made files unreadable or different: %r" % (what, lost[:10]))
            if damaged and RL.btrfs_check_clean(ours, timeout=30):
                tally["ours clean"] += 1
            if os.path.exists(undo):
                tally["ours changed"] += b"committed as generation" in cp.stdout
                cp2 = T.ubtrfs("rescue", "undo", undo, ours)
                if cp2.returncode != 0 and b"wrote nothing" not in cp2.stderr:
                    failures.append("%s: rescue undo: %s" % (what, T.describe(cp2)))
            if not RL.same_bytes(ours, mut):
                failures.append("%s: the mutant is not as it was after rescue undo" % what)
            # theirs
            RL.copy_sparse(mut, theirs)
            # btrfs check --repair loops on some mutants: a hang is its own (tallied), the
            # image it leaves is still compared
            rc, _ = RL.btrfs_repair(theirs, timeout=HANG)
            if rc is None:
                tally["theirs hung"] += 1
            elif rc < 0:
                tally["theirs crashed"] += 1
            elif damaged and RL.btrfs_check_clean(theirs, timeout=30):
                tally["theirs clean"] += 1
            after_theirs, _ = RL.readable_files(theirs, work)
            theirs_kept = kept(before, after_theirs)
            tally["theirs lost files"] += len(theirs_kept) < len(before)
            worse = sorted(theirs_kept - kept(before, after_ours))
            if worse:
                failures.append("%s: btrfs check --repair keeps files ubtrfs check --repair loses: %r" % (
                    what, worse[:10]))
            if len(failures) > 5:
                break
    finally:
        for p in (full, mut, ours, theirs, undo):
            if os.path.exists(p):
                os.unlink(p)
    print("\nseed %d, %d mutants: %r" % (seed, ROUNDS, tally))
    assert not failures, "\n\n".join(failures)
    assert tally["damaged"] > 0, tally
