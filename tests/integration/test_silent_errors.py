# SPDX-License-Identifier: MIT
"""No command fails without saying why.

Every command (dump-super -f --all, dump-tree, ls -R, ls -R -l --json, cat of
a few files, filesystem show) runs on every hostile image of
test_names_dirs.py and on a few more made here for paths that used to fail in
silence; a non-zero exit must come with at least one stderr line that is an
error message naming something (test_corpus.names_something: "error", words,
and a number or a path; a usage line does not count). The damaged corpus gets
the same judgement, with the same commands, in test_corpus.py.
"""
import os
import struct

import pytest

import test_names_dirs as N
import ubtrfs_testlib as T
from test_corpus import names_something
from test_names_dirs import base  # noqa: F401  (the module-scoped images)

COMMANDS = [
    ["dump-super", "-f", "--all"],
    ["dump-tree"],
    ["ls", "-R"],
    ["ls", "-R", "-l", "--json"],
    ["cat", "--path", "/d2/plain"],
    ["cat", "--path", "/lnk"],
    ["cat", "--path", "/d1/renameme"],
    ["filesystem", "show"],
]


def dangling_entry(img, b):
    """The victim's entry leads to an inode that does not exist."""
    d, idx, _, _ = b.entry(N.VICTIM)
    N.change_item(img, b, (d, N.DIR_INDEX, idx), lambda data: struct.pack("<Q", 999999) + data[8:])
    return {}


def entry_to_nowhere(img, b):
    """The victim's entry has a location that is neither an inode nor a subvolume."""
    d, idx, _, _ = b.entry(N.VICTIM)
    N.change_item(img, b, (d, N.DIR_INDEX, idx), lambda data: data[:8] + bytes([N.DIR_INDEX]) + data[9:])
    return {}


def symlink_too_short(img, b):
    """A symlink whose inode claims more bytes than its inline extent holds."""
    ino = b.entry(b"lnk")[2]
    N.change_item(img, b, (ino, N.INODE_ITEM, 0), lambda data: data[:16] + struct.pack("<Q", 3000) + data[24:])
    return {}


EXTRA = {"dangling-entry": dangling_entry, "entry-to-nowhere": entry_to_nowhere,
         "symlink-too-short": symlink_too_short}
# what each listing that reads the inodes (-l, --json) must then say
# (entry-to-nowhere is the tree checker's to catch: its whole leaf is refused)
EXPECT = {"dangling-entry": "cannot read inode 999999", "symlink-too-short": "symlink target has a NUL byte"}
# A names-only `ls -R` takes a file's type from its entry and never reads its
# inode, as readdir does for find on the kernel: the names themselves are
# intact in these cases, so it must print exactly the undamaged image's names.
ALL = sorted(N.CASES) + sorted(EXTRA)


@pytest.mark.parametrize("case", ALL)
def test_every_failure_is_named(ubtrfs_bin, base, case):  # noqa: F811
    img = os.path.join(base.work, "silent-%s.img" % case.replace("^", "_"))
    T.copy_sparse(base.img, img)
    (N.CASES.get(case) or EXTRA[case])(img, base)
    silent = []
    try:
        for args in COMMANDS:
            cp = T.ubtrfs(*args, img, timeout=N.TIMEOUT)
            err = cp.stderr.decode("utf-8", "replace")
            assert "Sanitizer" not in err and "runtime error:" not in err, T.describe(cp)
            assert cp.returncode in (0, 1, 2), T.describe(cp)
            if cp.returncode and not any(names_something(line) for line in cp.stderr.splitlines()):
                silent.append(T.describe(cp))
            if "--json" in args:
                T.parse_ls_json(cp.stdout)
            if args == ["ls", "-R"] and case in EXPECT:
                assert cp.returncode == 0 and cp.stdout == base.names(), T.describe(cp)
            elif args[0] == "ls" and case in EXPECT:
                # a lie is never passed on as the truth: exit 1 and the problem named
                assert cp.returncode == 1 and EXPECT[case] in err, T.describe(cp)
    finally:
        os.unlink(img)
    assert not silent, "non-zero exit without a named error:\n" + "\n".join(silent)
