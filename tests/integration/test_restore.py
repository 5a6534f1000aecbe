# SPDX-License-Identifier: MIT
"""`ubtrfs restore`: the files copied out must be what the kernel's mount of the image shows.

Oracle: the kernel's read-only mount of the same image (the factory's cached view: every
entry's type, mode, owner, size, times, symlink target, device numbers and xattrs, and
every file's sha256). The images are the shared kernel-made ones: subvolumes, snapshots
(one read-only), a placeholder for a subvolume a snapshot left behind, reflinks, zstd,
hard links, special files, xattrs on files, directories and symlinks; and one with
preallocated, punched and nodatacow files. A small image of this module adds a POSIX ACL
and the crafted escape: an entry `a` that is a symlink to a folder outside OUTDIR, and a
second entry `a` that is a directory holding `passwd`.

Also: the devices are only read (sha256 before and after), holes stay holes (allocated
blocks no more than the kernel's), --path, --path-regex, --dry-run, --no-snapshots,
existing files kept (exit 1) or replaced with --overwrite, and `btrfs restore` on the
same image restores no file that ubtrfs does not.
"""

import json
import os
import re
import stat
import struct
from pathlib import Path

import pytest

import craft as C
import ubtrfs_testlib as T

pytestmark = pytest.mark.xdist_group("restore")


@pytest.fixture(scope="module")
def outfs(tmp_path_factory):
    """Where restores go: a btrfs the kernel mounts read-write, so that every xattr fits
    (tmpfs and ext4 cap the xattrs of one inode below what btrfs holds)."""
    d = tmp_path_factory.mktemp("restore-out")
    img = d / "out.img"
    with open(img, "wb") as f:
        f.truncate(3 << 30)
    T.run(["mkfs.btrfs", "-f", "-q", str(img)])
    with T.mounted([img], d / "mnt", readonly=False) as mnt:
        yield Path(mnt)


def _image_hashes(devices):
    return [T.sha256_file(d) for d in devices]


def _restore(*args, rc=0):
    cp = T.ubtrfs("restore", *[str(a) for a in args])
    assert cp.returncode == rc, T.describe(cp)
    return cp


def _mkfs(tmp_path, mib, *opts):
    """tmp_path/img: a fresh single-device filesystem of `mib` MiB (mkfs.btrfs with `opts`)."""
    img = tmp_path / "img"
    with open(img, "wb") as f:
        f.truncate(mib * T.MiB)
    T.run(["mkfs.btrfs", "-f", "-q", *opts, str(img)])
    return img


def _mkfs_4k(tmp_path, mib):
    """The same with 4 KiB nodes (more leaves)."""
    return _mkfs(tmp_path, mib, "-n", "4096")


def _without_btrfs_props(xattrs):
    # btrfs.* (the compression property) has no namespace on other filesystems
    return {k: v for k, v in xattrs.items() if not k.startswith("btrfs.")}


def _shown(name):
    """A name (bytes) as ubtrfs prints names in messages and listings (check's pr_name):
    printable ASCII and well-formed UTF-8 (no C1 controls) as they are, a backslash doubled,
    every other byte as \\xNN."""
    out, i = [], 0
    while i < len(name):
        c = name[i]
        n = 2 if 0xc2 <= c <= 0xdf else 3 if 0xe0 <= c <= 0xef else 4 if 0xf0 <= c <= 0xf4 else 0
        if c == 0x5c:
            out.append("\\\\")
        elif 0x20 <= c < 0x7f:
            out.append(chr(c))
        elif n:
            try:
                ch = name[i:i + n].decode("utf-8", "strict") if i + n <= len(name) else None
            except UnicodeDecodeError:
                ch = None
            if ch is not None and not 0x80 <= ord(ch) <= 0x9f:
                out.append(ch)
                i += n
                continue
            out.append("\\x%02x" % c)
        else:
            out.append("\\x%02x" % c)
        i += 1
    return "".join(out)


def _compare(view, out, only=None, skip_prefixes=()):
    """Every entry of the kernel's view (below `only` if given) is in `out`, alike; nothing else is."""
    got = T.walk_tree(out, btrfs=False)
    want = {p: e for p, e in view.entries.items()
            if (only is None or p == only or p.startswith(only.rstrip("/") + "/"))
            and not any(p == s or p.startswith(s + "/") for s in skip_prefixes)}
    if only:
        # the directories down to --path's are made too (checked where their own entries are)
        for p in list(got):
            if only.startswith(p + "/"):
                del got[p]
    problems = []
    for p in sorted(set(want) - set(got))[:10]:
        problems.append("missing: %s" % p)
    for p in sorted(set(got) - set(want))[:10]:
        problems.append("not in the filesystem: %s" % p)
    groups_want, groups_got = {}, {}
    for p in sorted(set(want) & set(got)):
        w, g = want[p], got[p]
        for f in ("type", "mode", "uid", "gid"):
            if w[f] != g[f]:
                problems.append("%s: %s %r, restored %r" % (p, f, w[f], g[f]))
        if w["type"] != "dir" and w["size"] != g["size"]:
            problems.append("%s: size %r, restored %r" % (p, w["size"], g["size"]))
        # the kernel makes up a placeholder's times at lookup: they are "now", not on disk
        if not (w["type"] == "dir" and w["ino"] == T.EMPTY_SUBVOL_DIR_INO):
            # reading a restored symlink (the walk does) moves its atime; mtime says as much
            for f in ("mtime",) if w["type"] == "symlink" else ("mtime", "atime"):
                if w[f] != g[f]:
                    problems.append("%s: %s %r, restored %r" % (p, f, w[f], g[f]))
        for f in ("target", "rdev_major", "rdev_minor"):
            if w.get(f) != g.get(f):
                problems.append("%s: %s %r, restored %r" % (p, f, w.get(f), g.get(f)))
        if _without_btrfs_props(w["xattrs"]) != g["xattrs"]:
            problems.append("%s: xattrs %r, restored %r" % (p, sorted(w["xattrs"]), sorted(g["xattrs"])))
        if w["type"] == "file":
            groups_want.setdefault((w["subvol"], w["ino"]), set()).add(p)
            groups_got.setdefault(g["ino"], set()).add(p)
            if T.sha256_file(os.path.join(out, p.lstrip("/"))) != view.hashes[p]:
                problems.append("%s: content differs" % p)
        if len(problems) > 30:
            break
    # hard links: the same sets of names share an inode
    if sorted(map(sorted, groups_want.values())) != sorted(map(sorted, groups_got.values())):
        problems.append("hard link groups differ: %r" % [sorted(s) for s in groups_want.values() if len(s) > 1][:5])
    assert not problems, "\n".join(problems)
    return got


@pytest.mark.parametrize("name", ["kernel-subvol-zstd", "kernel-many", "kernel-noholes"])
def test_restore_equals_kernel_view(factory, outfs, name):
    tmp_path = outfs / name
    tmp_path.mkdir()
    image = factory.image(name)
    view = factory.view(image)
    before = _image_hashes(image.devices)
    out = tmp_path / "out"
    cp = _restore(*image.devices, out)
    assert b"0 problems" in cp.stderr, T.describe(cp)
    _compare(view, out)
    assert _image_hashes(image.devices) == before, "restore changed the image"
    # holes stay holes: no file takes more space than on the kernel's mount
    with T.mounted(image.devices, factory.mountpoint()) as mnt:
        fat = []
        for p, e in view.entries.items():
            if e["type"] == "file" and e["size"] > 65536:
                k = os.lstat(os.path.join(mnt, p.lstrip("/"))).st_blocks
                r = os.lstat(os.path.join(out, p.lstrip("/"))).st_blocks
                if r > k and r * 512 > e["size"] // 8:
                    fat.append("%s: %d blocks, kernel %d" % (p, r, k))
        assert not fat, fat[:10]


def test_restore_options(factory, outfs):
    tmp_path = outfs / "options"
    tmp_path.mkdir()
    image = factory.image("kernel-subvol-zstd")
    view = factory.view(image)
    devs = image.devices

    # --no-snapshots leaves out snap and snap_ro (and nothing else)
    out = tmp_path / "nosnap"
    _restore("--no-snapshots", *devs, out)
    _compare(view, out, skip_prefixes=("/snap", "/snap_ro"))

    # --path: a directory in a subvolume, under its own path
    out = tmp_path / "path"
    _restore("--path", "/subvol/links", *devs, out)
    _compare(view, out, only="/subvol/links", skip_prefixes=())
    assert sorted(os.listdir(out)) == ["subvol"]

    # --path of one file
    out = tmp_path / "one"
    _restore("--path", "/subvol/nested/inner.txt", *devs, out)
    assert T.sha256_file(out / "subvol/nested/inner.txt") == view.hashes["/subvol/nested/inner.txt"]

    # --path-regex: only the matching paths, their directories made as needed
    out = tmp_path / "re"
    _restore("--path-regex", r"^/snap_ro/xattrs(/x[0-3])?$", *devs, out)
    got = T.walk_tree(out, btrfs=False)
    assert set(got) == {"/snap_ro", "/snap_ro/xattrs", "/snap_ro/xattrs/x0", "/snap_ro/xattrs/x1",
                        "/snap_ro/xattrs/x2", "/snap_ro/xattrs/x3"}, sorted(got)

    # --dry-run lists what a restore makes, and makes nothing; names are escaped as check
    # escapes them, so every entry is one line of strict UTF-8
    out = tmp_path / "dry"
    cp = _restore("--dry-run", *devs, out)
    assert not out.exists()
    lines = cp.stdout.decode("utf-8", "strict").split("\n")
    assert lines[-1] == "" and len(lines) - 1 == len(view.entries), cp.stdout[-500:]
    listed = set(lines)
    absent = [p for p in view.entries if not any(_shown(os.fsencode(p)) + end in listed for end in ("", "/", "@"))]
    assert not absent, absent[:10]

    # existing files are kept and named (exit 1); --overwrite replaces them
    out = tmp_path / "again"
    _restore("--path", "/subvol/links", *devs, out)
    victim = out / "subvol/links/a"
    victim.chmod(0o644)
    victim.write_bytes(b"changed by the user")
    cp = _restore("--path", "/subvol/links", *devs, out, rc=1)
    assert b"exists; not overwritten" in cp.stderr and b"/subvol/links/a" in cp.stderr, T.describe(cp)
    assert victim.read_bytes() == b"changed by the user"
    _restore("--overwrite", "--path", "/subvol/links", *devs, out)
    _compare(view, out, only="/subvol/links")


def test_restore_no_metadata(factory, outfs):
    tmp_path = outfs / "nometa"
    tmp_path.mkdir()
    image = factory.image("kernel-subvol-zstd")
    view = factory.view(image)
    out = tmp_path / "plain"
    _restore("--no-owner", "--no-mode", "--no-times", "--no-xattrs", "--path", "/subvol/xattrs",
             *image.devices, out)
    for p, e in view.entries.items():
        if not p.startswith("/subvol/xattrs/") or e["type"] != "file":
            continue
        st = os.lstat(out / p.lstrip("/"))
        assert st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) == 0o666 & ~_umask(), p
        assert st.st_mtime_ns != e["mtime"][0] * 10**9 + e["mtime"][1], p
        assert os.listxattr(out / p.lstrip("/")) == [], p
        assert T.sha256_file(out / p.lstrip("/")) == view.hashes[p], p


def _umask():
    m = os.umask(0)
    os.umask(m)
    return m


def _acl(entries):
    """A system.posix_acl_access value: version 2, then (tag, perm, id) per entry."""
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", t, p, i) for t, p, i in entries)


@pytest.fixture(scope="module")
def crafted(tmp_path_factory, factory):
    """A small kernel-made image with an ACL, and the escape: `a` a symlink to a folder outside
    OUTDIR, `a` again a directory holding `passwd` (its INODE_REF says `a` too)."""
    d = tmp_path_factory.mktemp("restore-crafted")
    img = d / "img"
    with open(img, "wb") as f:
        f.truncate(256 * T.MiB)
    T.run(["mkfs.btrfs", "-f", "-q", "-n", "4096", str(img)])
    victim = d / "victim"
    victim.mkdir()
    (victim / "keep").write_bytes(b"outside OUTDIR\n")
    with T.mounted([img], d / "mnt", readonly=False) as mnt:
        acl = _acl([(1, 6, 0xFFFFFFFF), (2, 6, 1234), (4, 4, 0xFFFFFFFF), (0x10, 6, 0xFFFFFFFF),
                    (0x20, 4, 0xFFFFFFFF)])
        with open(os.path.join(mnt, "acl_file"), "wb") as f:
            f.write(b"with an access ACL\n")
        os.setxattr(os.path.join(mnt, "acl_file"), "system.posix_acl_access", acl)
        os.symlink(str(victim), os.path.join(mnt, "a"))
        os.mkdir(os.path.join(mnt, "b"))
        with open(os.path.join(mnt, "b", "passwd"), "wb") as f:
            f.write(b"root::0:0::/:/bin/sh\n")
        b_ino = os.lstat(os.path.join(mnt, "b")).st_ino
        T.run(["sync"])
    with C.Image(str(img)) as im:
        root = im.tree_root(C.FS_TREE)[0]
        body = C.dir_item(C.Key(b_ino, C.INODE_ITEM, 0), 7, b"a", C.FT_DIR)
        # the DIR_INDEX a listing reads; the DIR_ITEM of the name "a" stays the symlink's
        im.insert_item(root, (256, C.DIR_INDEX, 1000), body)
        blk, slot = im.find_item(im.tree_root(C.FS_TREE)[0], (b_ino, C.INODE_REF, 256))
        blk.set_item_data(slot, C.inode_ref(1000, b"a"))
        im.write_block(blk)
    return img, victim, acl


def test_restore_acl_and_escape(crafted, outfs):
    tmp_path = outfs / "escape"
    tmp_path.mkdir()
    img, victim, acl = crafted
    before = sorted(os.listdir(victim))
    for opts in ([], ["--overwrite"]):
        out = tmp_path / ("out%d" % len(opts))
        cp = _restore(*opts, img, out, rc=1)
        assert sorted(os.listdir(victim)) == before, "restore wrote outside OUTDIR"
        assert os.path.islink(out / "a") and not (out / "a" / "passwd").exists() or \
            not os.path.lexists(out / "a"), sorted(os.listdir(out))
        assert b"/a: exists and is not a directory" in cp.stderr, T.describe(cp)
        assert os.getxattr(out / "acl_file", "system.posix_acl_access") == acl


def test_restore_usage(tmp_path):
    cp = T.ubtrfs("restore", "--help")
    assert cp.returncode == 0 and b"--path-regex" in cp.stdout
    for args in ([], ["only-one"], ["--path", "relative", "img", "out"], ["--path-regex", "(", "img", "out"],
                 ["--bogus", "img", "out"]):
        cp = T.ubtrfs("restore", *args)
        assert cp.returncode == 2, (args, T.describe(cp))
    cp = T.ubtrfs("restore", str(tmp_path / "no-such-image"), str(tmp_path / "out"))
    assert cp.returncode == 2 and b"error" in cp.stderr, T.describe(cp)


def test_restore_against_btrfs_restore(factory, outfs):
    """btrfs-progs' restore (snapshots included, xattrs, symlinks) gets no file ubtrfs does not."""
    tmp_path = outfs / "progs"
    tmp_path.mkdir()
    image = factory.image("kernel-subvol-zstd")
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    _restore(*image.devices, ours)
    theirs.mkdir()
    # a private copy: another worker may have the shared image mounted (factory.view), and
    # btrfs restore refuses a mounted device and restores nothing
    private = tmp_path / "image.img"
    T.copy_sparse(image.devices[0], private)
    cp = T.run(["btrfs", "restore", "-s", "-x", "-S", "-i", str(private), str(theirs)], check=False)
    private.unlink()
    # btrfs restore also enters subvolumes that a snapshot did not take along (the kernel and
    # ubtrfs show an empty directory there): only what the kernel shows counts
    shown = factory.view(image).entries
    progs = {p: e for p, e in T.walk_tree(theirs, btrfs=False).items() if e["type"] == "file" and p in shown}
    assert progs, "btrfs restore restored nothing: the comparison would say nothing\n" + \
        cp.stderr.decode("utf-8", "replace")[-2000:]
    missing = []
    for p in progs:
        mine = ours / p.lstrip("/")
        if not mine.is_file():
            missing.append(p)
        elif T.sha256_file(mine) != T.sha256_file(theirs / p.lstrip("/")):
            missing.append(p + " (differs)")
    assert not missing, missing[:10]


def _destroy_and_restore(img, copies, out):
    """Overwrite both DUP copies of a tree block, restore (exit 1), and the older root said."""
    assert len(copies) == 2, copies
    for phys in copies:
        T.overwrite(img, phys + 64, os.urandom(512))
    cp = _restore(img, out, rc=1)
    assert b"older root of generation" in cp.stderr, T.describe(cp)
    return cp


def test_restore_from_older_root(tmp_path):
    """A leaf of the fs tree lost in both DUP copies: the names, inodes and file extents it held
    come from the older root of the commit before (the leaf changed since, so that root has its
    own copy); restore says so and exits 1. btrfs restore, on the same image, gets less."""
    img = _mkfs_4k(tmp_path, 256)
    files = {}
    with T.mounted([img], tmp_path / "mnt", readonly=False) as mnt:
        d = os.path.join(mnt, "d")
        os.mkdir(d)
        for i in range(60):
            data = (b"file %02d " % i) * 1024
            with open(os.path.join(d, "f%02d" % i), "wb") as f:
                f.write(data)
            files["/d/f%02d" % i] = data
        d_ino = os.lstat(d).st_ino
        T.run(["sync"])
        # a change to the directory: its leaf is copied, the older root keeps the old copy
        with open(os.path.join(d, "late"), "wb") as f:
            f.write(b"written after the first commit\n")
        T.run(["sync"])
    with C.Image(str(img)) as im:
        blk, _ = im.find_item(im.tree_root(C.FS_TREE)[0], lambda k: k.objectid == d_ino and k.type == C.DIR_INDEX)
        copies = im.physical(blk.logical)
    out = tmp_path / "out"
    cp = _destroy_and_restore(img, copies, out)
    got = {p: (out / p.lstrip("/")).read_bytes() for p in files if (out / p.lstrip("/")).is_file()}
    assert got == files, (sorted(set(files) - set(got))[:10], T.describe(cp))
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    T.run(["btrfs", "restore", "-i", str(img), str(theirs)], check=False)
    progs = {p for p in files if (theirs / p.lstrip("/")).is_file()}
    assert progs < set(got), (len(progs), len(got))


def test_restore_report_damaged_data(tmp_path):
    """A sector of a file's data overwritten on its only copy: the file is restored with every
    other byte as the kernel wrote it and zeros there, the summary counts it partial, and
    --report names it with the byte range lost and why (the test's record of where it wrote
    is the oracle; the kernel's read of the same file fails with EIO there too). btrfs
    restore, on the same image, gets no file byte-exact that ubtrfs does not."""
    img = _mkfs(tmp_path, 256)
    data = bytes((i * 7) % 251 for i in range(64 * 1024))
    with T.mounted([img], tmp_path / "mnt", readonly=False) as mnt:
        with open(os.path.join(mnt, "victim"), "wb") as f:
            f.write(data)
        with open(os.path.join(mnt, "intact"), "wb") as f:
            f.write(b"intact\n" * 1000)
        ino = os.lstat(os.path.join(mnt, "victim")).st_ino
        T.run(["sync"])
    dump = T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "5", str(img)]).stdout.decode()
    (foff, disk, _, eoff, _, comp), = T.file_extents(dump, ino)
    assert foff == 0 and comp == 0
    bad_off = 3 * 4096  # the fourth sector of the file
    (_, phys), = T.map_logical(img, disk + eoff + bad_off, 4096)
    T.overwrite(img, phys, b"\xee" * 4096)
    out, report = tmp_path / "out", tmp_path / "report.jsonl"
    cp = _restore("--report", report, img, out, rc=1)
    assert b"1 partial, 0 lost" in cp.stderr, T.describe(cp)
    got = (out / "victim").read_bytes()
    assert got == data[:bad_off] + bytes(4096) + data[bad_off + 4096:]
    assert (out / "intact").read_bytes() == b"intact\n" * 1000
    import json
    lines = [json.loads(line) for line in report.read_text().splitlines()]
    assert len(lines) == 1, lines
    rec = lines[0]
    assert rec["path"] == "/victim" and rec["status"] == "partial" and rec["inode"] == ino, rec
    assert rec["lost_bytes"] == 4096 and [(x["offset"], x["length"]) for x in rec["lost"]] == [(bad_off, 4096)], rec
    assert "checksum" in rec["lost"][0]["why"], rec
    # btrfs restore (no checksums checked) gets no file byte-exact that ubtrfs does not
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    T.run(["btrfs", "restore", "-i", str(img), str(theirs)], check=False)
    want = {"victim": data, "intact": b"intact\n" * 1000}
    progs = {n for n, b in want.items() if (theirs / n).is_file() and (theirs / n).read_bytes() == b}
    ours = {n for n, b in want.items() if (out / n).read_bytes() == b}
    assert progs <= ours, (progs, ours)


def test_restore_large_file_damaged_in_places(tmp_path):
    """A file large enough to be copied by several threads at once (81 MiB), with sectors
    overwritten on its only copy in several places (4096-byte runs and 8 KiB ones that may
    cross where the copiers' ranges meet): every other byte comes out as written, the
    damaged sectors as zeros, and --report lists exactly the damaged runs (the test's own
    record of where it wrote is the oracle), each merged whole however the copy was cut."""
    img = tmp_path / "img"
    with open(img, "wb") as f:
        f.truncate(512 * T.MiB)
    T.run(["mkfs.btrfs", "-f", "-q", str(img)])
    size = 81 * T.MiB
    data = bytearray(os.urandom(size))
    with T.mounted([img], tmp_path / "mnt", readonly=False) as mnt:
        with open(os.path.join(mnt, "big"), "wb") as f:
            f.write(data)
        ino = os.lstat(os.path.join(mnt, "big")).st_ino
        T.run(["sync"])
    dump = T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "5", str(img)]).stdout.decode()
    extents = T.file_extents(dump, ino)
    assert all(e[5] == 0 for e in extents), "test setup: compressed data"
    # (offset, length): sector runs at places no two copiers' cut can all avoid
    runs = [(3 * 4096, 4096)] + [(m * T.MiB - 4096, 8192) for m in (16, 27, 32, 40, 54, 64)] + [(size - 4096, 4096)]
    for off, length in runs:
        for sec in range(off, off + length, 4096):
            (foff, disk, _, eoff, num, _), = [e for e in extents if e[0] <= sec < e[0] + e[4]]
            (_, phys), = T.map_logical(img, disk + eoff + sec - foff, 4096)
            T.overwrite(img, phys, b"\xee" * 4096)
        data[off:off + length] = bytes(length)
    out, report = tmp_path / "out", tmp_path / "report.jsonl"
    cp = _restore("--report", report, img, out, rc=1)
    assert b"1 partial, 0 lost" in cp.stderr, T.describe(cp)
    assert (out / "big").read_bytes() == bytes(data)
    import json
    lines = [json.loads(line) for line in report.read_text().splitlines()]
    assert len(lines) == 1, lines
    rec = lines[0]
    assert rec["path"] == "/big" and rec["status"] == "partial" and rec["inode"] == ino, rec
    assert [(x["offset"], x["length"]) for x in rec["lost"]] == runs, rec
    assert rec["lost_bytes"] == sum(n for _, n in runs), rec
    want = "%d bytes could not be read (first at offset %d)" % (sum(n for _, n in runs), runs[0][0])
    assert want.encode() in cp.stderr, T.describe(cp)


def test_restore_file_data_from_older_root(tmp_path):
    """A file of many extents, whose extent items fill several leaves; one block rewritten
    with the same bytes after a commit (so the leaf holding its extent item is copied, and the
    older root keeps its own copy); that new leaf destroyed in both DUP copies. The inode item
    is intact: the data from that leaf on comes from the older root, byte-exact, and restore
    says so (exit 1)."""
    img = _mkfs_4k(tmp_path, 256)
    blocks = 400
    data = b"".join((b"%04d" % i) * 1024 for i in range(blocks))
    with T.mounted([img], tmp_path / "mnt", readonly=False) as mnt:
        path = os.path.join(mnt, "big")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            # every other block first, then the rest: one extent item per block
            for start in (0, 1):
                for i in range(start, blocks, 2):
                    os.pwrite(fd, data[i * 4096:(i + 1) * 4096], i * 4096)
                os.fsync(fd)
        finally:
            os.close(fd)
        ino = os.lstat(path).st_ino
        T.run(["sync"])
        victim = 300  # far from the inode item's leaf
        fd = os.open(path, os.O_WRONLY)
        try:
            os.pwrite(fd, data[victim * 4096:(victim + 1) * 4096], victim * 4096)
            os.fsync(fd)
        finally:
            os.close(fd)
        T.run(["sync"])
    with C.Image(str(img)) as im:
        root = im.tree_root(C.FS_TREE)[0]
        inode_leaf, _ = im.find_item(root, (ino, C.INODE_ITEM, 0))
        blk, _ = im.find_item(root, (ino, C.EXTENT_DATA, victim * 4096))
        assert blk.logical != inode_leaf.logical, "test setup: the extent item shares the inode's leaf"
        copies = im.physical(blk.logical)
    out = tmp_path / "out"
    cp = _destroy_and_restore(img, copies, out)
    assert b"extent items cannot be read from offset" in cp.stderr, T.describe(cp)
    assert (out / "big").read_bytes() == data, T.describe(cp)


def test_restore_scavenges_lost_inodes(tmp_path):
    """A directory's entries fill several leaves (4 KiB nodes); one of those leaves is destroyed
    in both DUP copies, and no older root has the files (they were made in the last commit).
    The files whose names were there are found by the scan of the metadata (their inode items
    live in other leaves) and restored under lost+found/5/<inode>, byte-exact; --no-scavenge
    leaves them out. btrfs restore, on the same image, gets none of them."""
    img = _mkfs_4k(tmp_path, 256)
    content = {}
    with T.mounted([img], tmp_path / "mnt", readonly=False) as mnt:
        d = os.path.join(mnt, "d")
        os.mkdir(d)
        for i in range(300):
            p = os.path.join(d, "some-long-file-name-%04d" % i)
            with open(p, "wb") as f:
                f.write(b"contents of %d\n" % i * 50)
            content[os.lstat(p).st_ino] = ("some-long-file-name-%04d" % i, b"contents of %d\n" % i * 50)
        d_ino = os.lstat(d).st_ino
        T.run(["sync"])
    with C.Image(str(img)) as im:
        root = im.tree_root(C.FS_TREE)[0]
        leaves = {}
        for b, s in im.walk(root):
            k = b.item_key(s)
            if k.objectid == d_ino and k.type == C.DIR_INDEX:
                leaves.setdefault(b.logical, []).append(b.get_item(s, 0, "<Q"))
        # a leaf of the directory's index entries that holds no inode item of a file
        victim, lost = next((lg, inos) for lg, inos in sorted(leaves.items())
                            if not any(im.find_item(root, (i, C.INODE_ITEM, 0))[0].logical == lg for i in inos))
        copies = im.physical(victim)
    assert len(copies) == 2 and len(lost) >= 3, (copies, lost)
    for phys in copies:
        T.overwrite(img, phys + 64, os.urandom(512))
    out = tmp_path / "out"
    cp = _restore(img, out, rc=1)
    for ino in lost:
        name, data = content[ino]
        got = out / "lost+found" / "5" / str(ino)
        assert got.read_bytes() == data, (ino, T.describe(cp))
        assert not (out / "d" / name).exists()
    assert b"lost+found" in cp.stderr
    bare = tmp_path / "bare"
    _restore("--no-scavenge", img, bare, rc=1)
    assert not (bare / "lost+found").exists()
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    T.run(["btrfs", "restore", "-i", str(img), str(theirs)], check=False)
    assert not any((theirs / "d" / content[ino][0]).exists() for ino in lost)


def test_restore_deleted(tmp_path):
    """Undelete: files removed in the last commit are gone from the live tree but an older
    root (the backup roots) still names them. `--deleted` restores each under
    deleted/5/<inode>, byte-exact against what the test wrote, and says the path it had;
    without it they stay deleted and are only counted. The test's own record of the deleted
    files is the oracle: no btrfs tool undeletes."""
    img = _mkfs(tmp_path, 256)
    gone, kept = {}, {}
    rng = __import__("random").Random(5)
    with T.mounted([img], tmp_path / "mnt", readonly=False) as mnt:
        d = os.path.join(mnt, "dir")
        os.mkdir(d)
        for i in range(8):
            p = os.path.join(d, "f%d" % i)
            data = rng.randbytes(rng.choice((60, 5000, 200000)))
            with open(p, "wb") as f:
                f.write(data)
            (gone if i % 3 == 0 else kept)[os.lstat(p).st_ino] = ("/dir/f%d" % i, data)
        T.run(["sync"])
        for path, _ in gone.values():
            os.unlink(mnt + path)
        T.run(["sync"])
    before = _image_hashes([img])
    out = tmp_path / "out"
    cp = _restore("--deleted", img, out)
    assert _image_hashes([img]) == before
    for ino, (path, data) in gone.items():
        assert (out / "deleted" / "5" / str(ino)).read_bytes() == data, T.describe(cp)
        assert not (out / path.lstrip("/")).exists()
        assert ("it was %s" % path).encode() in cp.stderr
    for ino, (path, data) in kept.items():
        assert (out / path.lstrip("/")).read_bytes() == data
        assert not (out / "deleted" / "5" / str(ino)).exists()
    assert b"undeleted: %d files" % len(gone) in cp.stderr
    plain = tmp_path / "plain"
    cp = _restore(img, plain)
    assert not (plain / "deleted").exists()
    assert b"%d deleted inodes left deleted" % len(gone) in cp.stderr, T.describe(cp)
    _restore("--deleted", "--no-scavenge", img, tmp_path / "no", rc=2)


def test_restore_deleted_from_loose_leaves(tmp_path):
    """Undelete when no root is left that has the files: they are deleted, then twelve more
    commits go by, so that the backup roots and the newest root trees on disk all postdate
    the deletion. The old leaves that held their items are still on disk, and so are old
    leaves of the checksum tree with their data's checksums: `--deleted` restores each from
    those leaves under deleted/5/<inode>, byte-exact (the test's own record is the oracle),
    with the path it had. One sector of one deleted file is then overwritten on the disk:
    the checksum from the old leaf catches it, so that file comes back partial and named in
    the report (exit 1), never with the wrong bytes."""
    import test_volume_write as VW
    img = _mkfs(tmp_path, 256)
    gone, where = {}, {}
    rng = __import__("random").Random(23)
    with T.mounted([img], tmp_path / "mnt", readonly=False) as mnt:
        d = os.path.join(mnt, "dir")
        os.mkdir(d)
        for i in range(6):
            p = os.path.join(d, "f%d" % i)
            data = rng.randbytes((20000, 200000, 70000)[i % 3])
            with open(p, "wb") as f:
                f.write(data)
            if i % 2 == 0:
                gone[os.lstat(p).st_ino] = ("/dir/f%d" % i, data)
        T.run(["sync"])
        for ino, (path, _) in gone.items():
            where[ino] = VW.fiemap(mnt + path)
            os.unlink(mnt + path)
        T.run(["sync"])
        for i in range(12):
            with open(os.path.join(mnt, "after%d" % i), "wb") as f:
                f.write(b"x" * 100)
            T.run(["sync"])
    out = tmp_path / "out"
    cp = _restore("--deleted", img, out)
    leaves = cp.stderr.count(b"restored from the items of leaves the scan found")
    if leaves != len(gone):
        pytest.skip("test setup: %d of %d deleted files were not only in loose leaves (an older root still "
                    "had them, or their leaves were written over): %s" % (len(gone) - leaves, len(gone), T.describe(cp)))
    for ino, (path, data) in gone.items():
        assert (out / "deleted" / "5" / str(ino)).read_bytes() == data, T.describe(cp)
        assert ("it was %s" % path).encode() in cp.stderr
    assert b"undeleted: %d files under deleted (0 as an older root has them, %d from the items" % (
        len(gone), len(gone)) in cp.stderr, T.describe(cp)
    # one sector of the largest deleted file written over: the old checksum catches it
    victim = max(gone, key=lambda i: len(gone[i][1]))
    _, logical, _ = where[victim][0]
    with C.Image(str(img)) as im:
        copies = im.physical(logical + 4096)
    assert len(copies) == 1, copies
    T.overwrite(img, copies[0], os.urandom(4096))
    out2 = tmp_path / "out2"
    report = tmp_path / "report"
    cp = _restore("--deleted", "--report", str(report), img, out2, rc=1)
    got = (out2 / "deleted" / "5" / str(victim)).read_bytes()
    want = gone[victim][1]
    assert got[:4096] == want[:4096] and got[8192:] == want[8192:] and got[4096:8192] == bytes(4096), T.describe(cp)
    lines = [json.loads(x) for x in report.read_text().splitlines()]
    assert any(x["path"] == "/deleted/5/%d" % victim and x["status"] == "partial" for x in lines), lines
    for ino, (path, data) in gone.items():
        if ino != victim:
            assert (out2 / "deleted" / "5" / str(ino)).read_bytes() == data


def test_restore_rebuilds_the_chunk_tree(tmp_path):
    """The chunk tree's only leaf is destroyed in both DUP copies: nothing but the system
    chunk is mapped, and `ubtrfs ls` (like `btrfs restore`) cannot open the filesystem.
    The kernel wrote the leaf again on each resize, so older copies of it survive in the
    system chunk; restore finds them by a scan and gets every file back byte-exact."""
    img = tmp_path / "img"
    with open(img, "wb") as f:
        f.truncate(1 << 30)
    T.run(["mkfs.btrfs", "-f", "-q", str(img)])
    rng = __import__("random").Random(9)
    content = {}
    with T.mounted([img], tmp_path / "mnt", readonly=False) as mnt:
        os.mkdir(os.path.join(mnt, "d"))
        for i in range(40):
            content["d/f%d" % i] = rng.randbytes(rng.choice((4000, 900000, 3000000)))
            with open(os.path.join(mnt, "d/f%d" % i), "wb") as f:
                f.write(content["d/f%d" % i])
        T.run(["sync"])
        T.run(["btrfs", "filesystem", "resize", "-4M", mnt])
        T.run(["sync"])
        T.run(["btrfs", "filesystem", "resize", "+4M", mnt])
    with C.Image(str(img)) as im:
        copies = im.physical(im.super("chunk_root"))
    assert len(copies) == 2
    for phys in copies:
        T.overwrite(img, phys + 64, os.urandom(256))
    assert T.ubtrfs("ls", img).returncode == 2
    out = tmp_path / "out"
    cp = _restore(img, out, rc=1)
    assert b"chunk rescue" in cp.stderr, T.describe(cp)
    for rel, data in content.items():
        assert (out / rel).read_bytes() == data, (rel, T.describe(cp))
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    T.run(["btrfs", "restore", str(img), str(theirs)], check=False)
    assert sum(1 for p in theirs.rglob("*") if p.is_file()) < len(content)


def _system_chunk_stripes(images):
    """[(image, physical, length)] of every stripe of every SYSTEM chunk, from btrfs-progs'
    dump of the superblock's system chunk array (devids in the order the images were
    made); length is what the chunk takes on each device."""
    dump = T.run(["btrfs", "inspect-internal", "dump-super", "-f", str(images[0])]).stdout.decode()
    out = []
    for m in re.finditer(r"CHUNK_ITEM \d+\).*\n\s+length (\d+) owner \d+ stripe_len \d+ type SYSTEM\|?(\S*)\n"
                         r".*\n\s+num_stripes (\d+) sub_stripes \d+\n((?:\s+stripe \d+ devid \d+ offset \d+\n\s+dev_uuid \S+\n)+)", dump):
        length, profile, n = int(m.group(1)), m.group(2), int(m.group(3))
        data = {"RAID0": n, "RAID10": n // 2, "RAID5": n - 1, "RAID6": n - 2}.get(profile, 1)
        for st in re.finditer(r"stripe \d+ devid (\d+) offset (\d+)", m.group(4)):
            out.append((images[int(st.group(1)) - 1], int(st.group(2)), length // data))
    return out


# profile: (devices, mkfs.btrfs profile options); the system chunk takes the metadata's profile
_REBUILD_PROFILES = {
    "dup": (1, []),
    "raid1": (2, ["-m", "raid1", "-d", "raid1"]),
    "raid0": (3, ["-m", "raid0", "-d", "raid0"]),
    "raid10": (4, ["-m", "raid10", "-d", "raid10"]),
    "raid5": (3, ["-m", "raid5", "-d", "raid5"]),
    "raid6": (4, ["-m", "raid6", "-d", "raid6"]),
    # six devices: rows of four data strips, so a row the metadata fills only in part has P
    # and Q equal to its one strip of tree blocks (copies in the wrong places, to be told apart)
    "raid6x6": (6, ["-m", "raid6", "-d", "raid6"]),
}


@pytest.mark.parametrize("profile", sorted(_REBUILD_PROFILES))
def test_restore_rebuilds_chunks_from_device_extents(tmp_path, profile):
    """Every copy of every block of the system chunk zeroed, old copies of the chunk tree's
    leaves included: no chunk item is left anywhere, and btrfs restore cannot open the
    filesystem. ubtrfs restore scans the devices for leaves of the device tree and of the
    extent tree, rebuilds each chunk from its block group item and its device extents, and
    gets every file back byte-exact (the files the test wrote are the oracle). For the
    striped profiles (RAID0, RAID10, RAID5, RAID6: metadata, system and data alike) the order
    of a chunk's stripes is only in its chunk item, and restore works it out from where the
    chunk's tree blocks lie and from the data checksums, so a wrong order would show as
    wrong bytes or unreadable trees."""
    ndev, opts = _REBUILD_PROFILES[profile]
    images = [tmp_path / ("img%d" % i) for i in range(ndev)]
    for img in images:
        with open(img, "wb") as f:
            f.truncate(512 * T.MiB)
    T.run(["mkfs.btrfs", "-f", "-q"] + opts + [str(i) for i in images])
    rng = __import__("random").Random(11)
    content = {}
    try:
        with T.mounted(images, tmp_path / "mnt", readonly=False) as mnt:
            os.mkdir(os.path.join(mnt, "d"))
            for i in range(30):
                content["d/f%d" % i] = rng.randbytes(rng.choice((3000, 70000, 1500000)))
                with open(os.path.join(mnt, "d/f%d" % i), "wb") as f:
                    f.write(content["d/f%d" % i])
        stripes = _system_chunk_stripes(images)
    finally:
        if ndev > 1:
            T.run(["btrfs", "device", "scan", "--forget"], check=False)
    assert len(stripes) == max(ndev, 2), "test setup: the system chunk's stripes: %r" % stripes
    for img, phys, length in stripes:
        T.overwrite(img, phys, bytes(length))
    assert T.ubtrfs("ls", *images).returncode == 2
    out = tmp_path / "out"
    cp = _restore(*images, out, rc=1)
    assert b"chunk rebuild" in cp.stderr, T.describe(cp)
    for rel, data in content.items():
        assert (out / rel).is_file() and (out / rel).read_bytes() == data, (rel, T.describe(cp))
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    T.run(["btrfs", "restore"] + [str(i) for i in images[:1]] + [str(theirs)], check=False)
    assert not any(p.is_file() for p in theirs.rglob("*"))


def test_restore_files_from_loose_leaves(tmp_path):
    """Every interior node of the fs tree zeroed, in every copy and in every older root
    (each block of the metadata chunks owned by the fs tree with a level above 0): no tree,
    live or older, leads to a single file, and `btrfs restore` gets none. The leaves are
    intact, so the scan finds every inode's items there, names included: each file comes
    back at its own path (in a directory that is itself only in the leaves, too),
    byte-exact (the files the test wrote are the oracle), owner and mode included, and a
    file with three names (two in one directory, one in another) at all three, as one
    file with hard links."""
    img = _mkfs_4k(tmp_path, 512)
    rng = __import__("random").Random(13)
    content, links = {}, []
    with T.mounted([img], tmp_path / "mnt", readonly=False) as mnt:
        os.mkdir(os.path.join(mnt, "sub"))
        os.chmod(os.path.join(mnt, "sub"), 0o750)
        for i in range(80):
            p = os.path.join(mnt, ("sub/f%02d" if i % 3 == 0 else "f%02d") % i)
            data = rng.randbytes(rng.choice((0, 500, 3000, 9000, 300000)))
            with open(p, "wb") as f:
                f.write(data)
            os.chmod(p, 0o600 + i % 64)
            os.chown(p, 1000 + i, 2000 + i)
            content[os.path.relpath(p, mnt)] = (data, 0o600 + i % 64, 1000 + i, 2000 + i)
            if i % 10 == 1:
                # two more names: one in the same directory (the same INODE_REF item), one in the other
                here = os.path.dirname(p)
                other = mnt if here != mnt else os.path.join(mnt, "sub")
                names = [os.path.join(here, "l%02d" % i), os.path.join(other, "x%02d" % i)]
                for q in names:
                    os.link(p, q)
                links.append([os.path.relpath(q, mnt) for q in [p] + names])
    zeroed = 0
    with C.Image(str(img)) as im:
        nodesize = im.nodesize
        for ch in [c for c in im.chunks if c.type & C.BLOCK_GROUP_METADATA]:
            for logical in range(ch.logical, ch.logical + ch.length, nodesize):
                try:
                    blk = im.read_block(logical)
                except ValueError:
                    continue
                if blk.owner() == C.FS_TREE and blk.level() > 0:
                    for phys in im.physical(logical):
                        T.overwrite(img, phys, bytes(nodesize))
                    zeroed += 1
    assert zeroed >= 1, "test setup: the fs tree has no interior node"
    assert T.ubtrfs("ls", img).returncode != 0
    out = tmp_path / "out"
    cp = _restore(img, out, rc=1)
    assert b"restored at its name from the items of leaves the scan found" in cp.stderr, T.describe(cp)
    for rel, (data, mode, uid, gid) in content.items():
        p = out / rel
        assert p.read_bytes() == data, (rel, T.describe(cp))
        st = os.lstat(p)
        assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (mode, uid, gid), rel
    assert stat.S_IMODE(os.lstat(out / "sub").st_mode) == 0o750
    # every name of a hard-linked file, as links to one restored file
    for names in links:
        sts = [os.lstat(out / n) for n in names]
        assert len({st.st_ino for st in sts}) == 1 and sts[0].st_nlink == 3, (names, T.describe(cp))
    assert not (out / "lost+found").exists() or not any((out / "lost+found").rglob("*")), T.describe(cp)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    T.run(["btrfs", "restore", str(img), str(theirs)], check=False)
    assert sum(1 for p in theirs.rglob("*") if p.is_file()) < len(content)


def test_restore_loose_files_keep_their_directory_times(tmp_path):
    """One leaf of the fs tree that holds only the inodes of some files of /d is cut off (its
    parent's slot bent to the neighbouring leaf, checksums recomputed): the walk restores /d
    but cannot read those inodes; the scan finds the leaf and puts each of them back at its
    name in /d, byte-exact. /d's times are then still its own (the kernel's stat before the
    damage is the oracle), not the time the scan's files were made in it."""
    import test_tree_integrity as TI
    img = _mkfs_4k(tmp_path, 256)
    rng = __import__("random").Random(17)
    content = {}
    with T.mounted([img], tmp_path / "mnt", readonly=False) as mnt:
        d = os.path.join(mnt, "d")
        os.mkdir(d)
        for i in range(200):
            content["d/f%03d" % i] = rng.randbytes(rng.choice((100, 300, 700)))
            with open(os.path.join(mnt, "d/f%03d" % i), "wb") as f:
                f.write(content["d/f%03d" % i])
        os.utime(d, ns=(1_000_000_000_123_456_789, 1_200_000_000_987_654_321))
        d_ino = os.stat(d).st_ino
        d_times = (os.stat(d).st_atime_ns, os.stat(d).st_mtime_ns)
    image = TI.Image("loose-times", img, tmp_path, 4096)
    blocks = image.tree("fs")

    def only_files_of_d(leaf):
        objs = {int(k.split()[0]) for k, _ in leaf.items}
        refs = [k for k, _ in leaf.items if k.split()[1] == "INODE_REF" and int(k.split()[2]) == d_ino]
        return len(refs) >= 2 and d_ino not in objs and 256 not in objs

    picked = None
    for node in sorted((b for b in blocks.values() if b.level == 1), key=lambda b: b.bytenr):
        for s in range(1, len(node.ptrs) - 1):
            if only_files_of_d(TI.leaf_under(blocks, node, s)):
                picked = (node, s)
                break
        if picked:
            break
    if not picked:
        pytest.skip("test setup: no leaf below a level-1 node holds only files of /d")
    node, s = picked
    cut = TI.leaf_under(blocks, node, s)
    _, target, gen = node.ptrs[s - 1]
    TI.patch_block(str(img), image, node.bytenr, lambda b: TI.set_ptr(b, s, target, gen))
    TI.check_bent(image, str(img), (node.bytenr, s, target))
    out = tmp_path / "out"
    cp = _restore(img, out, rc=1)
    assert b"restored at its name from the items of leaves the scan found" in cp.stderr, T.describe(cp)
    placed = sum(1 for k, _ in cut.items if k.split()[1] == "INODE_ITEM")
    assert cp.stderr.count(b"restored at its name from the items") == placed, T.describe(cp)
    for rel, data in content.items():
        assert (out / rel).read_bytes() == data, (rel, T.describe(cp))
    st = os.stat(out / "d")
    assert (st.st_atime_ns, st.st_mtime_ns) == d_times, T.describe(cp)
