# SPDX-License-Identifier: MIT
"""Command-line surface: --help, usage errors, exit codes."""

import pytest

import ubtrfs_testlib as T

COMMANDS = ["ls", "cat", "dump-super", "dump-tree", "find-root"]


@pytest.mark.parametrize("cmd", COMMANDS)
def test_command_help(ubtrfs_bin, cmd):
    cp = T.ubtrfs(cmd, "--help")
    assert cp.returncode == 0, T.describe(cp)
    assert (cp.stdout + cp.stderr).strip(), "--help printed nothing"


def test_top_level_help(ubtrfs_bin):
    cp = T.ubtrfs("--help")
    assert cp.returncode == 0, T.describe(cp)
    out = cp.stdout.decode("utf-8", "replace")
    missing = [c for c in COMMANDS if c not in out]
    assert not missing, "top-level --help does not mention %r" % missing


def test_no_arguments_is_usage_error(ubtrfs_bin):
    cp = T.ubtrfs()
    assert cp.returncode == 2, T.describe(cp)


def test_unknown_command(ubtrfs_bin):
    cp = T.ubtrfs("no-such-command")
    assert cp.returncode == 2, T.describe(cp)
    assert cp.stderr.strip()


@pytest.mark.parametrize("cmd", COMMANDS)
def test_missing_device_argument(ubtrfs_bin, cmd):
    args = ["--path", "/x"] if cmd == "cat" else []
    cp = T.ubtrfs(cmd, *args)
    assert cp.returncode == 2, T.describe(cp)
    assert cp.stderr.strip()


@pytest.mark.parametrize("cmd", COMMANDS)
def test_nonexistent_device(ubtrfs_bin, cmd, tmp_path):
    args = ["--path", "/x"] if cmd == "cat" else []
    cp = T.ubtrfs(cmd, *args, str(tmp_path / "nope.img"))
    assert cp.returncode == 2, T.describe(cp)
    assert cp.stderr.strip()


@pytest.mark.parametrize("cmd,args", [("ls", ["--bogus-option"]), ("cat", []),
                                      ("dump-tree", ["-t"]), ("dump-super", ["--bogus-option"])])
def test_bad_options(ubtrfs_bin, factory, cmd, args):
    image = factory.image("rootdir-crc32c-16384")
    cp = T.ubtrfs(cmd, *args, *image.devices)
    assert cp.returncode == 2, T.describe(cp)
    assert cp.stderr.strip()
