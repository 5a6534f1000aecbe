# SPDX-License-Identifier: MIT
"""ubtrfs ls / cat against the kernel's read-only view of the same image."""

import concurrent.futures
import os
import time

import pytest

import ubtrfs_testlib as T


def _ls(image, *args):
    cp = T.ubtrfs("ls", *args, *image.devices)
    return cp


def _fail(image, problems, what):
    return "%s differs from the kernel on %s\nrecipe: %s\n  %s" % (
        what, image.name, image.recipe, "\n  ".join(problems))


def _ls_timed(image, *args):
    t0 = time.time_ns()
    cp = _ls(image, *args)
    return cp, (t0, time.time_ns())


def placeholder_times(expected, got, window):
    """The kernel makes up mtime and ctime of a placeholder directory (a subvolume a
    snapshot did not take along) when it looks the entry up: both "now". ubtrfs does the
    same. So those two are checked against the time of each run, everything else of the
    entry is compared as usual; returns problems, and aligns got's times for the rest."""
    problems = []
    t0, t1 = window
    for p, e in expected.items():
        if e["type"] != "dir" or e["ino"] != T.EMPTY_SUBVOL_DIR_INO or p not in got:
            continue
        g = got[p]
        if e["mtime"] != e["ctime"]:
            problems.append("%r: kernel placeholder mtime %r != ctime %r" % (p, e["mtime"], e["ctime"]))
        ns = g["mtime"][0] * 10**9 + g["mtime"][1]
        if g["mtime"] != g["ctime"] or not t0 - 10**9 <= ns <= t1 + 10**9:
            problems.append("%r: placeholder times %r/%r are not the time of listing (%d..%d)"
                            % (p, g["mtime"], g["ctime"], t0, t1))
        got[p] = dict(g, mtime=e["mtime"], ctime=e["ctime"])
    return problems


def test_ls_recursive_matches_kernel(ubtrfs_bin, factory, read_image):
    view = factory.view(read_image)
    cp, window = _ls_timed(read_image, "-R", "--json")
    assert cp.returncode == 0, T.describe(cp)
    got, dups = T.index_entries(T.parse_ls_json(cp.stdout))
    assert not dups, "paths listed more than once: %r" % dups[:20]
    problems = placeholder_times(view.entries, got, window) + T.compare_entries(view.entries, got)
    assert not problems, _fail(read_image, problems, "ls -R --json")


# The quick run cats at most this many files per image (a process each, under the sanitizers: this
# test was the suite's largest share); restore and the mount compare every file's bytes with the
# kernel's too. UBTRFS_LONG_TESTS cats every file.
CAT_QUICK = 150


def _files_to_cat(view):
    files = sorted(view.hashes)
    if T.LONG_TESTS:
        return files
    # Huge directories: every file outside them, a deterministic tenth inside.
    crowded = {}
    for p in files:
        crowded.setdefault(os.path.dirname(p), []).append(p)
    out = []
    for d, ps in crowded.items():
        out.extend(ps if len(ps) <= 200 else ps[::10])
    out.sort()
    # then an even, deterministic spread over what is left: every directory's files keep a share
    step = -(-len(out) // CAT_QUICK)
    return out[::step]


def test_cat_matches_kernel(ubtrfs_bin, factory, read_image):
    view = factory.view(read_image)
    files = _files_to_cat(view)
    assert files, "no regular files in %s" % read_image.name

    def one(p):
        rc, size, digest, cp = T.cat_hash(read_image.devices, p)
        exp_size, exp_digest = view.hashes[p]
        if rc != 0:
            return "%r: exit %d (stderr %s)" % (p, rc, cp.stderr[-300:].decode("utf-8", "replace"))
        if size != exp_size:
            return "%r: %d bytes, kernel reads %d" % (p, size, exp_size)
        if digest != exp_digest:
            return "%r: content differs (sha256 %s, kernel %s)" % (p, digest, exp_digest)
        return None

    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as ex:
        problems = [r for r in ex.map(one, files) if r]
    assert not problems, _fail(read_image, problems[:40] + (["... %d more" % (len(problems) - 40)]
                                                           if len(problems) > 40 else []), "cat")


# Directories listed one level deep with --path: (image, directory)
DIR_CASES = [
    ("rootdir-crc32c-16384", "/"),
    ("rootdir-crc32c-16384", "/sizes"),
    ("rootdir-crc32c-16384", "/names"),
    ("rootdir-crc32c-16384", "/special"),
    ("rootdir-crc32c-4096", "/deep/level00/level01/level02"),
    ("kernel-subvol", "/"),
    ("kernel-subvol", "/subvol"),
    ("kernel-subvol", "/snap/links"),
    ("kernel-subvol", "/subvol/nested"),
    ("kernel-subvol", "/snap/holder"),
    ("kernel-subvol", "/snap_ro/holder"),
    ("kernel-many", "/many"),
]


def _children(view, d):
    prefix = d.rstrip("/") + "/"
    return {p: e for p, e in view.entries.items()
            if p.startswith(prefix) and "/" not in p[len(prefix):]}


@pytest.mark.parametrize("name,directory", DIR_CASES)
def test_ls_one_directory(ubtrfs_bin, factory, name, directory):
    image = factory.image(name)
    view = factory.view(image)
    args = ["--json"] + (["--path", directory] if directory != "/" else [])
    cp, window = _ls_timed(image, *args)
    assert cp.returncode == 0, T.describe(cp)
    got, dups = T.index_entries(T.parse_ls_json(cp.stdout))
    assert not dups, "paths listed more than once: %r" % dups[:20]
    expected = _children(view, directory)
    problems = placeholder_times(expected, got, window) + T.compare_entries(expected, got)
    assert not problems, _fail(image, problems, "ls --json --path %s" % directory)


@pytest.mark.parametrize("name,directory", [("kernel-subvol", "/snap"), ("kernel-plain", "/links")])
def test_ls_recursive_below_path(ubtrfs_bin, factory, name, directory):
    image = factory.image(name)
    view = factory.view(image)
    cp, window = _ls_timed(image, "-R", "--json", "--path", directory)
    assert cp.returncode == 0, T.describe(cp)
    got, dups = T.index_entries(T.parse_ls_json(cp.stdout))
    assert not dups
    prefix = directory + "/"
    expected = {p: e for p, e in view.entries.items() if p.startswith(prefix)}
    problems = placeholder_times(expected, got, window) + T.compare_entries(expected, got)
    assert not problems, _fail(image, problems, "ls -R --json --path %s" % directory)


@pytest.mark.parametrize("flags", [[], ["-l"], ["-R"], ["-l", "-R"]])
def test_ls_text_output_names_every_entry(ubtrfs_bin, factory, flags):
    image = factory.image("rootdir-crc32c-16384")
    view = factory.view(image)
    cp = _ls(image, *flags, "--path", "/names")
    assert cp.returncode == 0, T.describe(cp)
    expected = view.entries if "-R" in flags else _children(view, "/names")
    expected = [e["name"] for p, e in expected.items() if p.startswith("/names/")]
    # Names with control characters may legitimately be escaped in text output.
    plain = [n for n in expected if n.isprintable()]
    missing = [n for n in plain if os.fsencode(n) not in cp.stdout]
    assert not missing, "ls %s does not show %r" % (" ".join(flags), missing)


@pytest.mark.parametrize("where", ["/snap/holder/left_behind", "/snap_ro/holder/left_behind"])
def test_placeholder_dir_is_what_the_kernel_shows(ubtrfs_bin, factory, where):
    """A snapshot of a subvolume that holds another subvolume shows an empty
    directory there; the recipe puts it in a directory owned by 4321:8765 with
    its own times, so owner, group and atime must come from that directory."""
    image = factory.image("kernel-subvol")
    view = factory.view(image)
    exp = view.entries.get(where)
    assert exp is not None, "recipe did not make %s (kernel view)" % where
    holder = view.entries[os.path.dirname(where)]
    # the setup reached the state the test is about
    assert exp["ino"] == T.EMPTY_SUBVOL_DIR_INO and (holder["uid"], holder["gid"]) == (4321, 8765)
    assert holder["atime"] != holder["mtime"]
    assert not [p for p in view.entries if p.startswith(where + "/")]
    for args in (["--json", "--path", where], ["--json", "--path", os.path.dirname(where)]):
        cp, window = _ls_timed(image, *args)
        assert cp.returncode == 0, T.describe(cp)
        got = {o["path"]: o for o in T.parse_ls_json(cp.stdout)}
        if args[-1] == where:
            # listing the placeholder itself: it is empty, like the kernel's
            assert got == {}, got
            continue
        problems = placeholder_times({where: exp}, got, window)
        problems += T.compare_entries({where: exp}, {where: got[where]})
        assert not problems, _fail(image, problems, "ls %s" % " ".join(args))


def test_ls_missing_path_is_fatal(ubtrfs_bin, factory):
    image = factory.image("rootdir-crc32c-16384")
    cp = _ls(image, "--json", "--path", "/no/such/dir")
    assert cp.returncode == 2, T.describe(cp)
    assert cp.stderr.strip(), "no message on stderr"


@pytest.mark.parametrize("path,why", [
    ("/no/such/file", "missing"),
    ("/sizes", "directory"),
    ("/special/fifo", "fifo"),
    ("/special/null_like", "char device"),
    ("/sizes/f0000000_text/x", "below a file"),
])
def test_cat_refuses(ubtrfs_bin, factory, path, why):
    image = factory.image("rootdir-crc32c-16384")
    cp = T.ubtrfs("cat", "--path", path, *image.devices)
    assert cp.returncode == 2, "%s: %s" % (why, T.describe(cp))
    assert cp.stderr.strip(), "no message on stderr"
    assert cp.stdout == b"", "wrote data for a refused path"


def test_cat_through_every_hard_link_name(ubtrfs_bin, factory):
    image = factory.image("kernel-plain")
    view = factory.view(image)
    names = ["/links/a", "/links/b", "/links/c", "/links/sub/a_again"]
    inos = {view.entries[n]["ino"] for n in names}
    assert len(inos) == 1
    for n in names:
        rc, size, digest, cp = T.cat_hash(image.devices, n)
        assert rc == 0, T.describe(cp)
        assert (size, digest) == view.hashes[n], n


def test_cat_large_file_streams_exactly(ubtrfs_bin, factory):
    """The 40 MiB mostly-hole file: exact length, exact bytes, and fast enough."""
    image = factory.image("kernel-zstd")
    view = factory.view(image)
    rc, size, digest, cp = T.cat_hash(image.devices, "/sparse/far", timeout=60)
    assert rc == 0, T.describe(cp)
    assert (size, digest) == view.hashes["/sparse/far"]
