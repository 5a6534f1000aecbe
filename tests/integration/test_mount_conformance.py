# SPDX-License-Identifier: MIT
"""POSIX conformance of the read-write mount, side by side with the kernel's btrfs (issue 30).

The cases (conform_*.py, the harness in conform.py) cover what pjdfstest covers: permissions
and ownership of every call as root and as other users, sticky directories, set-id bits,
ENAMETOOLONG / ELOOP / EEXIST / ENOTEMPTY / EXDEV / EMLINK / EISDIR / ENOTDIR / EINVAL, link
counts, which times each call changes, UTIME_NOW / UTIME_OMIT, huge sizes, every rename corner,
O_TMPFILE, open flags, mknod of every type, symlink loops, paths past PATH_MAX, xattr namespaces
and POSIX ACLs. Every case runs on a fresh mkfs.btrfs image mounted by the kernel and on another
mounted by ubtrfs (-o dev,suid, as the kernel's mount has them), in the same run; every return
value, errno and stat field must be the same. A difference FUSE cannot avoid is listed in
docs/mount-conformance.md and its case asserts ubtrfs's documented answer (`known=`). Afterwards
btrfs check judges the ubtrfs image.

test_mount_options_like_the_kernel runs the cases the mount options change (atime, ACLs, link
limits) with noatime / strictatime / noacl, each against the kernel's mount with the same option.
"""

import errno
import importlib
import os
from pathlib import Path

import pytest

import conform as C
import ubtrfs_testlib as T
from test_mount import fuse_mounted

MiB = T.MiB
MODULES = ("conform_names", "conform_perm", "conform_rename", "conform_times", "conform_xattr", "conform_misc")
for _m in MODULES:
    importlib.import_module(_m)


def _image(path, size=256 * MiB, mkfs_args=()):
    with open(path, "wb") as f:
        f.truncate(size)
    T.run(["mkfs.btrfs", "-f", "-q", *mkfs_args, str(path)])


def _prepare(img, mnt, links=0):
    """What every case may rely on, made by the kernel: a subvolume 'sv' (open to all), an empty one
    'sv_empty', and, with `links`, a file 'many' with that many names in directory 'links'."""
    with T.mounted([img], mnt, readonly=False) as m:
        T.run(["btrfs", "subvolume", "create", os.path.join(m, "sv")])
        os.chmod(os.path.join(m, "sv"), 0o777)
        T.run(["btrfs", "subvolume", "create", os.path.join(m, "sv_empty")])
        if links:
            d = os.path.join(m, "links")
            os.mkdir(d)
            first = os.path.join(d, "many")
            with open(first, "wb"):
                pass
            for i in range(1, links):
                os.link(first, os.path.join(d, "l%05d" % i))


def _report(title, cases, matched, diffs, stale):
    known = sum(1 for cs in cases if cs.known)
    lines = ["%s: %d cases, %d match the kernel (%d of them documented differences)" % (
        title, len(cases), len(matched), known)]
    for name, why in diffs:
        lines.append("DIFFERS %s: %s" % (name, why))
    for name, why in stale:
        lines.append("KNOWN DIFFERENCE NOT AS DOCUMENTED %s: %s" % (name, why))
    return "\n".join(lines)


def _side_by_side(ubtrfs_bin, d, cases, kopts="", uopts="", mkfs_args=(), links=0):
    kimg, uimg = d / "kernel.img", d / "ubtrfs.img"
    _image(kimg, mkfs_args=mkfs_args)
    _image(uimg, mkfs_args=mkfs_args)
    _prepare(kimg, d / "prep", links)
    _prepare(uimg, d / "prep", links)
    with T.mounted([kimg], d / "kmnt", options=kopts, readonly=False) as km:
        kres = C.run_all(cases, km)
    log = []
    with fuse_mounted(ubtrfs_bin, [uimg], d / "umnt", ",".join(["rw", "dev", "suid"] + ([uopts] if uopts else [])),
                      log=log) as um:
        ures = C.run_all(cases, um)
    bad = [ln for ln in log[0].splitlines() if ": error:" in ln or "Sanitizer" in ln or "runtime error" in ln]
    assert not bad, "the daemon logged errors:\n" + "\n".join(bad[:20])
    return uimg, C.compare(cases, kres, ures), kres


def progs_check(img):
    cp = T.run(["btrfs", "check", "--readonly", str(img)], check=False, timeout=600)
    text = (cp.stdout + cp.stderr).decode("utf-8", "replace")
    assert cp.returncode == 0 and "no error found" in text, "btrfs check:\n" + text[-4000:]


def test_conformance_like_the_kernel(ubtrfs_bin, scratch):
    d = Path(scratch) / "conform"
    d.mkdir()
    cases = list(C.CASES)
    uimg, (matched, diffs, stale), _ = _side_by_side(ubtrfs_bin, d, cases)
    report = _report("conformance", cases, matched, diffs, stale)
    print("\n" + report.splitlines()[0])
    assert not diffs and not stale, report
    progs_check(uimg)
    T.rmtree(d)


# the cases each mount option changes, run again with the option on both mounts ("noextref": the
# cases a filesystem of 4 KiB nodes without extended inode refs limits otherwise: the names of one
# inode in one directory, symlink targets, xattr sizes)
OPTION_CASES = {
    "noatime": ("times.",),
    "strictatime": ("times.",),
    "noacl": ("xattr.acl_", "xattr.ns_file_system_posix", "xattr.ns_dir_system_posix", "perm.dir_root775g"),
    "noextref": ("names.link", "names.symlink", "rename.hard_links", "xattr.name_and_value_sizes",
                 "xattr.many_xattrs"),
}
# what is a mkfs option, not a mount option
MKFS_ARGS = {"noextref": ("-O", "^extref", "-n", "4096")}
# what differs with the option (docs/mount-conformance.md): under noacl the kernel's FUSE checks an ACL
# value and its owner before asking us, where btrfs refuses the name first; noatime moves no atime on
# either side, so reads at the end of a file are no difference there
OPTION_KNOWN = {
    "noatime": {"times.read_empty_file": {}, "times.read_past_eof": {}},
    "noacl": {
        "xattr.acl_minimal_variants": {"set u::rw-,u:5:r--,g::r--,o::r--": "EINVAL"},
        "xattr.acl_invalid": {"set no mask with named": "EINVAL", "set missing other": "EINVAL",
                              "default on file": "EACCES"},
        "xattr.acl_as_owner_and_other": {"set by other": "EPERM"},
    },
}


@pytest.mark.parametrize("opt", sorted(OPTION_CASES))
def test_mount_options_like_the_kernel(ubtrfs_bin, scratch, opt):
    d = Path(scratch) / ("conform-" + opt)
    d.mkdir()
    known = OPTION_KNOWN.get(opt, {})
    cases = [C.Case(cs.name, cs.fn, known.get(cs.name, cs.known)) for cs in C.CASES
             if cs.name.startswith(OPTION_CASES[opt])]
    assert cases
    mkfs_args = MKFS_ARGS.get(opt)
    uimg, (matched, diffs, stale), kres = _side_by_side(ubtrfs_bin, d, cases, kopts="" if mkfs_args else opt,
                                                        uopts="" if mkfs_args else opt, mkfs_args=mkfs_args or ())
    if opt == "noextref":
        # the kernel must have run out of room in the ref item, or the case says nothing of EMLINK
        got = dict(kres["names.link_fill_ref_item"])["links in ."]
        assert got[1] == os.strerror(errno.EMLINK), got
    report = _report("-o " + opt, cases, matched, diffs, stale)
    print("\n" + report.splitlines()[0])
    assert not diffs and not stale, report
    T.rmtree(d)


def _link_limit(c):
    """A file with 65535 names (btrfs's BTRFS_LINK_MAX): one more is EMLINK, on both."""
    many = "../links/many"
    c.st("many", many)
    c.ok("link 65536th", os.link, many, "over")
    c.ok("unlink one", os.unlink, "../links/l00001")
    c.ok("link again", os.link, many, "again")
    c.st("many after", many)
    c.ok("link over again", os.link, many, "over2")


@pytest.mark.skipif(not T.LONG_TESTS, reason="65535 links take the kernel ~10 s per image: UBTRFS_LONG_TESTS")
def test_link_count_limit_like_the_kernel(ubtrfs_bin, scratch):
    d = Path(scratch) / "conform-links"
    d.mkdir()
    cases = [C.Case("limits.link_count", _link_limit, {})]
    uimg, (matched, diffs, stale), kres = _side_by_side(ubtrfs_bin, d, cases, links=65535)
    # the kernel must have reached the limit, or the case says nothing
    assert ("link 65536th", "EMLINK") in kres["limits.link_count"], kres["limits.link_count"]
    assert not diffs and not stale, _report("link count", cases, matched, diffs, stale)
    progs_check(uimg)
    T.rmtree(d)
