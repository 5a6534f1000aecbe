# SPDX-License-Identifier: MIT
"""Differential test: a seeded random workload on kernel mounts, then every
entry and every byte compared between the kernel's view and ubtrfs.

The workload and the harness are in workload.py.  Each configuration makes a
filesystem with its own mkfs options (node size, checksum, profiles,
no-holes off) and mount options (compression, compress-force, max_inline,
nodatasum, nodatacow), runs the workload through the kernel (snapshots and
nested subvolumes midway), and compares ubtrfs with the kernel's read-only
view of the same final images: `ls -R --json` field by field and the sha256
of `cat --path` for every regular file, also with a device left out where
the profile survives it.  Crash configurations also take a copy while
mounted after an fsync tail and compare ubtrfs' in-memory log replay with
the kernel's replay, and `--no-log` with the last commit.

Environment:
  UBTRFS_DIFF_SEED=N     run every selected configuration with workload seed N
  UBTRFS_DIFF_OPS=N      ... and N operations
  UBTRFS_DIFF_CONFIG=A,B only these configurations (names: scripts/differential --list)
  UBTRFS_LONG_TESTS=1    the sampled full matrix too, bigger workloads, every
                         single device (and pairs for RAID6) left out
scripts/differential runs any configuration, seed and length by hand.
"""

import os
import re
import tempfile

import pytest

import ubtrfs_testlib as T
import workload as W


def _selected():
    configs = W.ci_configs()
    if T.LONG_TESTS:
        configs += W.long_configs()
    names = os.environ.get("UBTRFS_DIFF_CONFIG")
    if names:
        every = W.all_configs()
        unknown = [n for n in names.split(",") if n not in every]
        if unknown:
            raise ValueError("UBTRFS_DIFF_CONFIG names unknown configurations %r" % unknown)
        configs = [every[n] for n in names.split(",")]
    return configs


def _env_int(name):
    v = os.environ.get(name)
    return int(v) if v else None


CONFIGS = _selected()


@pytest.mark.parametrize("cfg", CONFIGS, ids=[c.name for c in CONFIGS])
def test_workload_matches_kernel(ubtrfs_bin, scratch, cfg):
    seed = _env_int("UBTRFS_DIFF_SEED")
    ops = _env_int("UBTRFS_DIFF_OPS")
    if T.LONG_TESTS and ops is None:
        ops = cfg.ops * 2
    work = tempfile.mkdtemp(prefix=re.sub(r"[^A-Za-z0-9_.-]", "_", cfg.name)[:60] + "-", dir=scratch)
    try:
        res = W.run_config(cfg, work, seed=seed, ops=ops, long_mode=T.LONG_TESTS)
    finally:
        if os.environ.get("UBTRFS_KEEP_IMAGES") != "1":
            T.rmtree(work)
    if res.skip:
        pytest.skip(res.skip)
    if res.problems:
        pytest.fail(res.report(), pytrace=False)
    # The setup must have reached what the configuration is there for.
    assert res.nfiles > 0, "the workload left no regular file (%s)" % cfg.recipe(res.seed, res.ops)
    assert res.placeholders > 0, \
        "no snapshot stand-in directory for a nested subvolume in the final image (%s)" \
        % cfg.recipe(res.seed, res.ops)
    if cfg.crash and res.no_log:
        pytest.skip("; ".join(res.notes))
