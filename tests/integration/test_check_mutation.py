# SPDX-License-Identifier: MIT
"""`ubtrfs check` against `btrfs check` on randomly damaged metadata.

The damaged images are test_mutation.py's (a kernel-made crash image with a
pending fsync log; a few bytes changed in one to three tree blocks, the block
checksums recomputed so the damage is read). On each, `btrfs check --readonly`
is the referee: whenever it reports an error, ubtrfs check must report one
too. The other way round is allowed where it is explained (docs/check.md):
btrfs check does not read the fsync log trees, ubtrfs check walks them; and a
block that breaks a rule of the kernel's tree checker (which the kernel refuses
to read: a location key with an offset, unknown root flags, an owner that
cannot be) is a problem for ubtrfs check, which applies those rules to every
block, while btrfs check 6.2 applies fewer; the uuid tree, which btrfs check
does not read, is compared with the root items' uuids; every copy of a tree block
is read (btrfs check reads one good copy), so a chunk item whose second stripe
was moved shows as bad copies. Any other disagreement fails with
both outputs. UBTRFS_LONG_TESTS=1 runs ten
times as many rounds.
"""
import os
import random

import pytest

import ubtrfs_testlib as T
from test_mutation import base, mutate  # noqa: F401 (the fixture is used by name)

ROUNDS = 300 if os.environ.get("UBTRFS_LONG_TESTS") == "1" else 30
SEEDS = [21]
SUMMARY = ("checked:", "checksums:", "file trees:", "parity:", "problems:")


def problem_lines(cp):
    return [l for l in cp.stdout.decode("utf-8", "replace").splitlines() if l and not l.startswith(SUMMARY)]


def about_the_log(line):
    return "TREE_LOG" in line or "log tree" in line or "fsync log" in line


def about_uuids(line):
    return "uuid tree" in line


def block_rule(line):
    """The tree layer's verdict on a block: a tree checker rule or what its parent says it must
    be; or a copy of a block btrfs check does not read."""
    return "no good copy among" in line or "the pointer is wrong" in line or "another copy is good" in line


@pytest.mark.parametrize("seed", SEEDS)
def test_check_agrees_with_btrfs_check(base, seed):  # noqa: F811
    rng = random.Random(seed)
    img = os.path.join(base["work"], "c%d.img" % seed)
    failures = []
    tally = {"both": 0, "neither": 0, "log only": 0, "block rules": 0, "uuid tree": 0}
    try:
        for rnd in range(ROUNDS):
            picks = mutate(base["crash"], img, base, rng)
            ref = T.run(["btrfs", "check", "--readonly", img], check=False, timeout=60)
            cp = T.ubtrfs("check", img, timeout=60)
            ours = problem_lines(cp)
            what = "round %d blocks %s: btrfs check exit %d, ubtrfs check exit %d" % (
                rnd, picks, ref.returncode, cp.returncode)
            if cp.returncode not in (0, 1, 2) or b"Sanitizer" in cp.stderr or b"runtime error:" in cp.stderr:
                failures.append("%s: crashed\n%s" % (what, cp.stderr.decode("utf-8", "replace")[-1500:]))
            elif ref.returncode != 0 and cp.returncode == 0:
                out = (ref.stdout + ref.stderr).decode("utf-8", "replace")
                failures.append("%s: missed what btrfs check found:\n%s" % (what, out[-1500:]))
            elif ref.returncode == 0 and cp.returncode != 0:
                if all(about_the_log(l) for l in ours):
                    tally["log only"] += 1
                elif any(block_rule(l) for l in ours):
                    tally["block rules"] += 1
                elif all(about_uuids(l) for l in ours):
                    tally["uuid tree"] += 1
                else:
                    failures.append("%s: found what btrfs check does not:\n%s" % (what, "\n".join(ours[:10])))
            else:
                tally["both" if ref.returncode else "neither"] += 1
            if len(failures) > 5:
                break
    finally:
        if os.path.exists(img):
            os.unlink(img)
    assert not failures, "\n\n".join(failures)
    # the damage must reach the checks: some rounds are broken for both
    assert tally["both"] > 0, tally
