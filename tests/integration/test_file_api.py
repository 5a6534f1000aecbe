# SPDX-License-Identifier: MIT
"""The file API (include/ubtrfs/fswrite.h) end to end, judged by btrfs-progs and the kernel.

tests/tools/fileapi_driver.c applies a seeded random sequence of create, mkdir, mknod, symlink, link,
unlink, rmdir, rename (over existing names, RENAME_EXCHANGE, RENAME_NOREPLACE), write (inline and
regular extents, overwrites that split and trim extents), truncate, setxattr / removexattr, chmod and
snapshots of the FS tree (taken in the running transaction, which the snapshot commits) to an image made by
mkfs.btrfs, committing every few operations, checks every call's result (and every
file's contents read back through the transaction) against its model, and writes the model as JSON.
Then:
  - `btrfs check --readonly` is clean (nlink, nbytes, isize, dir isize, dir index, refs, csums, extent
    back references, free space tree);
  - the kernel's read-only mount shows exactly the model: every path, type, permission bits, size,
    sha256 of contents, link count, inode number, symlink target, device numbers, xattrs;
  - `ubtrfs ls --json` lists the same paths and types.
Recipes run a script through the file API and the same script through the kernel's VFS, and compare
the two images; the snapshot recipes (one seeded) snapshot, change both sides and delete in one
transaction, then let the kernel delete either side and check again.

Budget: about a minute under ASan for the CI slice; UBTRFS_LONG_TESTS=1 runs more seeds and longer
sequences. UBTRFS_FILEAPI_SEED / UBTRFS_FILEAPI_OPS / UBTRFS_FILEAPI_EVERY override the CI slice.
"""

import json
import os
import re
import stat
import time
from pathlib import Path

import pytest

import ubtrfs_testlib as T

MiB = T.MiB
LONG = T.LONG_TESTS


@pytest.fixture(scope="module")
def driver():
    return T.test_tool("fileapi_driver")


@pytest.fixture
def casedir(scratch, request):
    d = Path(scratch) / ("fileapi-" + re.sub(r"[^A-Za-z0-9_.-]", "_", request.node.name))
    d.mkdir(parents=True, exist_ok=True)
    yield d
    if os.environ.get("UBTRFS_KEEP_IMAGES") != "1":
        T.rmtree(d)


def make_images(d, ndev, size=256 * MiB):
    imgs = []
    for i in range(ndev):
        p = d / ("dev%d.img" % i)
        with open(p, "wb") as f:
            f.truncate(size)
        imgs.append(p)
    return imgs


def progs_check(imgs):
    loops = []
    try:
        if len(imgs) == 1:
            target = str(imgs[0])
        else:
            for img in imgs:
                loops.append(T.losetup_attach(img, True))
            T.run(["btrfs", "device", "scan", *loops], check=False)
            target = loops[0]
        cp = T.run(["btrfs", "check", "--readonly", target], check=False, timeout=600)
    finally:
        for dev in loops:
            T.losetup_detach(dev)
        if loops:
            T.run(["btrfs", "device", "scan", "--forget"], check=False)
    text = (cp.stdout + cp.stderr).decode("utf-8", "replace")
    errors = [ln for ln in text.splitlines()
              if re.match(r"(ERROR|error)", ln) and not re.match(r"ERROR: cannot scan /dev/", ln)]
    assert cp.returncode == 0 and not errors and "no error found" in text, \
        "btrfs check found errors:\n" + text[-6000:]


def run_driver(driver, seed, nops, every, model, imgs):
    cp = T.run([str(driver), "--snapshots", str(seed), str(nops), str(every), str(model), *[str(i) for i in imgs]],
               check=False, timeout=1200)
    assert cp.returncode == 0, "fileapi_driver %s %s %s failed (%d)\nstdout: %s\nstderr: %s" % (
        seed, nops, every, cp.returncode, cp.stdout.decode("utf-8", "replace")[-2000:],
        cp.stderr.decode("utf-8", "replace")[-4000:])
    with open(model) as f:
        return json.load(f)


def kernel_matches(imgs, mnt, model):
    with T.mounted(imgs, mnt, readonly=True) as m:
        got = T.walk_tree(m)
        hashes = T.hash_files(m, got)
    problems = []
    missing = sorted(set(model) - set(got))
    extra = sorted(set(got) - set(model))
    problems += ["missing %r" % p for p in missing[:20]]
    problems += ["unexpected %r" % p for p in extra[:20]]
    for p in sorted(set(model) & set(got)):
        exp, g = model[p], got[p]
        checks = [("type", g["type"]), ("mode", g["mode"] & 0o7777), ("ino", g["ino"]), ("xattrs", g["xattrs"])]
        if "uid" in exp:
            checks += [("uid", g["uid"]), ("gid", g["gid"])]
        if exp["type"] != "dir":
            checks.append(("nlink", g["nlink"]))
        if exp["type"] == "file":
            checks.append(("size", g["size"]))
            checks.append(("sha256", hashes[p][1]))
        if exp["type"] == "symlink":
            checks.append(("target", g["target"]))
        if exp["type"] in ("chr", "blk"):
            checks += [("rdev_major", g["rdev_major"]), ("rdev_minor", g["rdev_minor"])]
        for k, v in checks:
            if exp[k] != v:
                problems.append("%r: %s expected %r, kernel says %r" % (p, k, exp[k], v))
        if exp["type"] == "dir":
            # btrfs: a directory's nlink is 1 and its size twice the sum of its names' lengths
            names = [q for q in model if q.rsplit("/", 1)[0] == p]
            want = 2 * sum(len(os.fsencode(q.rsplit("/", 1)[1])) for q in names)
            if g["size"] != want:
                problems.append("%r: dir size %d, expected %d" % (p, g["size"], want))
    assert not problems, "\n".join(problems[:60])
    return got


def ubtrfs_matches(imgs, model):
    cp = T.ubtrfs("ls", "--json", "-R", *[str(i) for i in imgs])
    assert cp.returncode == 0, T.describe(cp)
    objs, dups = T.index_entries(T.parse_ls_json(cp.stdout))
    assert not dups, dups
    problems = ["missing %r" % p for p in sorted(set(model) - set(objs))[:20]]
    problems += ["unexpected %r" % p for p in sorted(set(objs) - set(model))[:20]]
    for p in sorted(set(model) & set(objs)):
        exp, g = model[p], objs[p]
        keys = ["type", "ino", "xattrs"] + (["nlink"] if exp["type"] != "dir" else [])
        keys += {"file": ["size"], "symlink": ["target"], "chr": ["rdev_major", "rdev_minor"],
                 "blk": ["rdev_major", "rdev_minor"]}.get(exp["type"], [])
        for k in keys:
            if exp[k] != g.get(k):
                problems.append("%r: %s expected %r, ubtrfs says %r" % (p, k, exp[k], g.get(k)))
        if exp["mode"] != g["mode"] & 0o7777:
            problems.append("%r: mode expected %o, ubtrfs says %o" % (p, exp["mode"], g["mode"]))
    assert not problems, "\n".join(problems[:60])
    # contents of a few files through ubtrfs cat
    files = sorted(p for p, e in model.items() if e["type"] == "file")
    for p in files[:: max(1, len(files) // 5)]:
        rc, size, digest, err = T.cat_hash([str(i) for i in imgs], p)
        assert rc == 0 and (size, digest) == (model[p]["size"], model[p]["sha256"]), (p, rc, err)


# name, metadata profile, data profile, devices, nodesize, seed, ops, commit every
CASES = [
    ("dup-4k", "dup", "single", 1, 4096, 1, 700, 9),
    ("single-16k", "single", "single", 1, 16384, 2, 500, 25),
    ("raid1-4k", "raid1", "raid1", 2, 4096, 3, 400, 15),
    ("raid10-16k", "raid10", "raid10", 4, 16384, 4, 300, 20),
    ("raid5-4k", "raid1", "raid5", 3, 4096, 5, 300, 12),
    ("raid6-16k", "raid1", "raid6", 4, 16384, 6, 300, 12),
]
if LONG:
    # the engine adds no chunks yet: mkfs.btrfs's 8 MiB data chunk is all it has, so the long runs
    # (snapshots keep old data, deleted ones until the kernel's cleaner) get bigger images whose data
    # space the kernel grows first (grow_data)
    CASES += [
        ("dup-4k-long", "dup", "single", 1, 4096, 11, 5000, 37),
        ("raid5-16k-long", "raid5", "raid5", 3, 16384, 12, 3000, 50),
        ("raid6-4k-long", "raid6", "raid6", 4, 4096, 13, 3000, 23),
        ("raid1c3-64k-long", "raid1c3", "raid1c3", 3, 65536, 14, 3000, 100),
    ]


def grow_data(imgs, mnt):
    """The kernel allocates data block groups (a big fallocated file, then deleted): room for long runs."""
    with T.mounted(imgs, mnt, readonly=False) as m:
        fd = os.open(os.path.join(m, "grow"), os.O_CREAT | os.O_WRONLY, 0o644)
        try:
            T.fallocate(fd, 0, 0, 160 * MiB)
        finally:
            os.close(fd)
        os.sync()
        os.unlink(os.path.join(m, "grow"))
        os.sync()


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_random_sequence(driver, casedir, ubtrfs_bin, case):
    name, meta, data, ndev, nodesize, seed, nops, every = case
    seed = int(os.environ.get("UBTRFS_FILEAPI_SEED", seed))
    nops = int(os.environ.get("UBTRFS_FILEAPI_OPS", nops))
    every = int(os.environ.get("UBTRFS_FILEAPI_EVERY", every))
    imgs = make_images(casedir, ndev, size=(1024 if name.endswith("-long") else 256) * MiB)
    try:
        T.run(["mkfs.btrfs", "-f", "-q", "-K", "-m", meta, "-d", data, "-n", str(nodesize), *map(str, imgs)])
        if name.endswith("-long"):
            grow_data(imgs, casedir / "mnt")
        model = run_driver(driver, seed, nops, every, casedir / "model.json", imgs)
        assert len(model) > 5, "the sequence built almost nothing: %r" % model
        progs_check(imgs)
        kernel_matches(imgs, casedir / "mnt", model)
        ubtrfs_matches(imgs, model)
    finally:
        if ndev > 1:
            T.run(["btrfs", "device", "scan", "--forget"], check=False)


# ---- recipes: one script applied by the file API and by the kernel; both results must look the same ----

CRC_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ (0x82F63B78 if _c & 1 else 0)
    CRC_TABLE.append(_c)
CRC_TOP = {v >> 24: i for i, v in enumerate(CRC_TABLE)}


def crc32c_raw(reg, data):
    for b in data:
        reg = (reg >> 8) ^ CRC_TABLE[(reg ^ b) & 0xff]
    return reg


def name_hash(name):
    """btrfs_name_hash: crc32c seeded with ~1, no final inversion (the DIR_ITEM / XATTR_ITEM key offset)."""
    return crc32c_raw(0xfffffffe, name)


def collide(target_name, prefix, forbidden=b"\0/"):
    """A name starting with `prefix` (plus 4 forged bytes, plus a counter if needed) hashing like target_name."""
    want = name_hash(target_name)
    for n in range(1000):
        head = prefix + (b"%d" % n if n else b"")
        idx, t = [], want
        for _ in range(4):
            i = CRC_TOP[t >> 24]
            idx.append(i)
            t = ((t ^ CRC_TABLE[i]) << 8) & 0xffffffff
        reg, tail = crc32c_raw(0xfffffffe, head), bytearray()
        for i in reversed(idx):
            b = (reg ^ i) & 0xff
            tail.append(b)
            reg = (reg >> 8) ^ CRC_TABLE[i]
        name = head + bytes(tail)
        if reg == want and not any(c in forbidden for c in tail) and name != target_name:
            assert name_hash(name) == want
            return name
    raise AssertionError("no collision found")


def stream(seed, n):
    st = (seed | 1) & 0xffffffffffffffff
    out = bytearray(n)
    for i in range(n):
        st ^= (st << 13) & 0xffffffffffffffff
        st ^= st >> 7
        st ^= (st << 17) & 0xffffffffffffffff
        out[i] = (st >> 24) & 0xff
    return bytes(out)


def arg_name(s):
    return bytes.fromhex(s[4:]) if s.startswith("hex:") else os.fsencode(s)


def kernel_apply(top, script):
    """The script through the kernel's VFS (the reference)."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    top = os.fsencode(str(top))

    def P(p):
        parts = p.split("/")
        return top + b"/".join([b""] + [os.fsencode(x) for x in parts[1:-1]] + [arg_name(parts[-1])])

    for n, line in enumerate(script, 1):
        if line.startswith("@"):
            continue  # the file API's own settings (the engine's cleaning step), not the VFS's
        want = 0
        if line.startswith("!"):
            w, line = line.split(" ", 1)
            want = int(w[1:])
        a = line.split()
        try:
            op = a[0]
            if op == "commit":
                os.sync()
            elif op == "mkdir":
                os.mkdir(P(a[1]), int(a[2], 8))
                os.chmod(P(a[1]), int(a[2], 8))
            elif op in ("create", "createhex"):
                fd = os.open(P(a[1]), os.O_CREAT | os.O_EXCL | os.O_WRONLY, int(a[2], 8) if len(a) > 2 else 0o644)
                os.close(fd)
                os.chmod(P(a[1]), int(a[2], 8) if len(a) > 2 else 0o644)
            elif op == "mknod":
                kind = {"c": stat.S_IFCHR, "b": stat.S_IFBLK, "p": stat.S_IFIFO, "s": stat.S_IFSOCK}[a[2]]
                os.mknod(P(a[1]), kind | 0o644, os.makedev(int(a[3]), int(a[4])) if a[2] in "cb" else 0)
                os.chmod(P(a[1]), 0o644)
            elif op == "symlink":
                os.symlink(a[2], P(a[1]))
            elif op == "link":
                os.link(P(a[1]), P(a[2]))
            elif op == "unlink":
                os.unlink(P(a[1]))
            elif op == "rmdir":
                os.rmdir(P(a[1]))
            elif op == "rename":
                flags = 0 if len(a) < 4 else (2 if a[3] == "exchange" else 1)
                r = libc.renameat2(-100, P(a[1]), -100, P(a[2]), flags)
                if r:
                    e = ctypes.get_errno()
                    raise OSError(e, os.strerror(e))
            elif op == "write":
                with open(P(a[1]), "r+b") as f:
                    f.seek(int(a[2], 0))
                    f.write(stream(int(a[4], 0), int(a[3], 0)))
            elif op == "writec":
                seed, n = int(a[4], 0), int(a[3], 0)
                with open(P(a[1]), "r+b") as f:
                    f.seek(int(a[2], 0))
                    f.write(bytes(0x61 + (i // 11 + seed) % 26 for i in range(n)))
            elif op in ("fallocate", "punch"):
                fd = os.open(P(a[1]), os.O_RDWR)
                try:
                    mode = 3 if op == "punch" else (1 if len(a) > 4 else 0)
                    T.fallocate(fd, mode, int(a[2], 0), int(a[3], 0))
                finally:
                    os.close(fd)
            elif op == "truncate":
                os.truncate(P(a[1]), int(a[2], 0))
            elif op in ("subvol", "snapshot", "subvoldel"):
                cmd = {"subvol": ["create"], "snapshot": ["snapshot"] + (["-r"] if len(a) > 3 else []),
                       "subvoldel": ["delete"]}[op]
                cp = T.run(["btrfs", "subvolume", *cmd, *[os.fsdecode(P(x)) for x in a[1:3]]], check=False)
                if cp.returncode:
                    raise OSError(1, cp.stderr.decode("utf-8", "replace"))
            elif op == "chmod":
                os.chmod(P(a[1]), int(a[2], 8))
            elif op == "setxattr":
                os.setxattr(P(a[1]), arg_name(a[2]), bytes.fromhex(a[3]), follow_symlinks=False)
            elif op == "removexattr":
                os.removexattr(P(a[1]), arg_name(a[2]), follow_symlinks=False)
            else:
                raise AssertionError("unknown op " + op)
            got, err = 0, ""
        except OSError as e:
            got, err = e.errno, str(e)
        assert got == want, "kernel: line %d %r: errno %d, script expects %d (%s)" % (n, line, got, want, err)


def view(imgs, mnt):
    with T.mounted(imgs, mnt, readonly=True) as m:
        entries = T.walk_tree(m)
        hashes = T.hash_files(m, entries)
    out = {}
    groups = {}
    for p, e in entries.items():
        v = {k: e[k] for k in ("type", "size", "xattrs", "ino") if k in e}
        v["mode"] = e["mode"] & 0o7777
        if e["type"] != "dir":
            v["nlink"] = e["nlink"]
        if e["type"] == "file":
            v["sha256"] = hashes[p][1]
        if e["type"] == "symlink":
            v["target"] = e["target"]
        if e["type"] in ("chr", "blk"):
            v["rdev"] = (e["rdev_major"], e["rdev_minor"])
        groups.setdefault((e["subvol"], e["ino"]), []).append(p)
        out[p] = v
    # hard links: which paths share an inode
    for paths in groups.values():
        for p in paths:
            out[p]["same_inode_as"] = sorted(paths)
    return out


def run_recipe(driver, casedir, script, nodesize=4096, meta="dup", data="single"):
    (casedir / "ours").mkdir()
    (casedir / "ref").mkdir()
    ours = make_images(casedir / "ours", 1)
    ref = make_images(casedir / "ref", 1)
    for imgs in (ours, ref):
        T.run(["mkfs.btrfs", "-f", "-q", "-K", "-m", meta, "-d", data, "-n", str(nodesize), *map(str, imgs)])
    sfile = casedir / "script.txt"
    sfile.write_text("\n".join(script) + "\n")
    cp = T.run([str(driver), "--script", str(sfile), *map(str, ours)], check=False, timeout=600)
    assert cp.returncode == 0, "fileapi_driver --script failed:\n" + cp.stderr.decode("utf-8", "replace")[-4000:]
    progs_check(ours)
    with T.mounted(ref, casedir / "mnt", readonly=False) as m:
        kernel_apply(m, script)
    got, want = view(ours, casedir / "mnt"), view(ref, casedir / "mnt")
    problems = ["missing %r" % p for p in sorted(set(want) - set(got))]
    problems += ["unexpected %r" % p for p in sorted(set(got) - set(want))]
    for p in sorted(set(want) & set(got)):
        if got[p] != want[p]:
            problems.append("%r: file API %r, kernel %r" % (p, got[p], want[p]))
    assert not problems, "\n".join(problems[:40])
    return ours


def _hex(b):
    return b.hex()


RECIPES = {
    "rename_over_existing": [
        "create /a 644", "write /a 0 5000 1", "create /b 600", "write /b 0 300 2", "rename /a /b",
        "mkdir /d1 755", "mkdir /d2 700", "create /d1/x 644", "mkdir /e 755", "mkdir /e2 755", "rename /e2 /e",
        "rename /e /d2/e",
        "!39 rename /d1 /d2", "create /d2/y 644", "!17 rename /d2/y /b noreplace",
        "rename /d2/y /d1 exchange", "commit", "!22 rename /d2 /d2/y/z", "rename /b /d2/y/b",
        "!2 rename /nothere /d2/n exchange", "!39 rename /d2/y/b /d2", "create /d3 644", "!21 rename /d3 /d2/e", "!22 rename /d2 /d2/y/b",
        "create /top 644", "mkdir /q 755", "!20 rename /q /top", "rename /top /q/top", "rename /q/top /q/top",
    ],
    "hardlink_across_dirs_then_unlink_original": [
        "mkdir /d1 755", "mkdir /d2 755", "create /d1/f 644", "write /d1/f 0 20000 3",
        "link /d1/f /d2/g", "link /d1/f /d2/h", "commit", "unlink /d1/f", "write /d2/g 10000 5 4",
        "unlink /d2/h", "!1 link /d1 /d2/dirlink", "!17 link /d2/g /d1", "commit",
        "rename /d2/g /d1/f2", "link /d1/f2 /d1/f3", "unlink /d1/f2",
    ],
    "overwrite_middle_and_truncate": [
        "create /f 644", "write /f 0 300000 5", "commit", "write /f 100000 4103 6",
        "write /f 5 9 7", "write /f 299990 20 8", "commit", "truncate /f 150001", "truncate /f 200000",
        "write /f 260000 1000 9", "write /f 100001 40000 10", "commit", "truncate /f 0", "write /f 8192 100 11",
    ],
    "inline_transitions": [
        "create /i 644", "write /i 0 100 12", "write /i 1000 1500 13", "truncate /i 10", "create /j 644",
        "write /j 0 2000 14", "truncate /j 4000", "create /k 644", "write /k 0 2048 15", "write /k 3 5 16",
        "create /l 644", "write /l 0 1000 17", "truncate /l 1500", "truncate /l 20", "create /m 644",
        "write /m 5000 10 18", "create /n 644", "write /n 0 4096 19", "truncate /n 100",
    ],
    "special_files_and_errors": [
        "mknod /c c 1 3", "mknod /b b 8 1", "mknod /p p 0 0", "mknod /s s 0 0",
        "symlink /l1 some/where/else", "symlink /l2 " + "t" * 3000, "mkdir /d 755", "create /d/f 644",
        "!39 rmdir /d", "!20 rmdir /c", "!21 unlink /d", "!17 mkdir /d 700", "!17 create /c 644",
        "!2 unlink /nothere", "chmod /d 711", "chmod /c 600",
    ],
}


def extref_script():
    # one inode with 60 names of 200 bytes in one directory: the INODE_REF item outgrows a 4K leaf
    # and the kernel (and the engine) continue in INODE_EXTREF items
    s = ["mkdir /d 755", "create /d/f 644", "write /d/f 0 100 20"]
    s += ["link /d/f /d/%s%03d" % ("L" * 196, i) for i in range(60)]
    s += ["commit"] + ["unlink /d/%s%03d" % ("L" * 196, i) for i in range(0, 60, 7)]
    s += ["unlink /d/f"]
    return s


def collision_script():
    base = b"user.collide"
    other = collide(base, b"user.x")
    third = collide(base, b"user.y")
    fname = b"plainname"
    fother = collide(fname, b"file")
    return [
        "create /f 644",
        "setxattr /f hex:%s %s" % (_hex(base), _hex(b"one")),
        "setxattr /f hex:%s %s" % (_hex(other), _hex(b"two" * 50)),
        "setxattr /f hex:%s %s" % (_hex(third), _hex(b"three")),
        "commit",
        "removexattr /f hex:%s" % _hex(other),
        "setxattr /f hex:%s %s" % (_hex(base), _hex(b"replaced value")),
        "!61 removexattr /f hex:%s" % _hex(other),
        "createhex /hex:%s 644" % _hex(fname),
        "createhex /hex:%s 644" % _hex(fother),
        "commit",
        "unlink /hex:%s" % _hex(fname),
    ]


RECIPES["extrefs_many_links_one_dir"] = extref_script()
RECIPES["compressed_and_shared_extents"] = [
    "create /z 644", "writec /z 0 400000 1 zlib", "create /l 644", "writec /l 0 300000 2 lzo",
    "create /s 644", "writec /s 4096 200000 3 zstd", "commit",
    # overwrite the middle of compressed extents: the old ones are split (offset into the extent)
    "write /z 70000 5000 4", "writec /l 130000 10 5 zstd", "truncate /s 100000", "punch /z 200000 70000",
    "commit", "subvol /v", "create /v/f 644", "writec /v/f 0 262144 6 zstd", "write /v/f 300000 7000 7",
    "commit", "snapshot /v /vs", "commit",
    # both sides of a snapshot overwrite the middle of shared (compressed) extents
    "write /v/f 100000 3 8", "writec /vs/f 50000 60000 9 lzo", "punch /vs/f 1 300000", "commit",
    "truncate /v/f 12345", "write /vs/f 0 10 10",
]
RECIPES["fallocate_and_punch"] = [
    "create /a 644", "fallocate /a 0 100000", "write /a 5000 3000 1", "fallocate /a 200000 50000 keep",
    "create /b 644", "write /b 0 1000 2", "fallocate /b 0 10000", "punch /b 10 20",
    "create /c 644", "write /c 0 300000 3", "commit", "punch /c 4095 8194", "punch /c 100000 50000",
    "punch /c 299000 5000", "fallocate /c 120000 10000", "truncate /c 130000", "commit", "write /a 99990 20 4",
    "punch /a 0 1000000",
]
RECIPES["subvolumes_snapshots_delete"] = [
    # the dead roots stay for the kernel's cleaner (asserted below): the engine's commits must not drop them
    "@autoclean 0",
    "subvol /sv", "create /sv/f 644", "write /sv/f 0 50000 30", "mkdir /sv/d 755", "create /sv/d/g 600",
    "write /sv/d/g 0 1000 31", "setxattr /sv/f user.a 6869", "snapshot /sv /snap1", "write /sv/f 0 1 1",
    "write /snap1/f 0 1 1", "commit", "write /sv/f 10000 5000 32",
    "unlink /sv/d/g", "commit", "write /snap1/f 40000 100 33", "truncate /snap1/d/g 10",
    "commit", "snapshot /sv /snap2 ro", "commit", "!30 create /snap2/new 644", "!30 write /snap2/f 0 10 1",
    "!30 unlink /snap2/f", "snapshot /snap2 /snap2rw", "commit", "write /snap2rw/f 0 10 1", "commit",
    "snapshot /snap1 /sv/nested", "commit", "subvol /sv2", "create /sv2/x 644",
    "write /sv2/x 0 9000 34", "commit", "subvoldel /sv2", "snapshot /sv /snap3", "commit", "write /snap3/f 0 100 35",
    "commit", "subvoldel /snap3", "mkdir /dd 755", "subvol /dd/inner", "create /dd/inner/y 644",
    "rename /sv/f /sv/f2", "link /sv/f2 /sv/d/f3", "commit", "rename /dd/inner /inner2", "rename /snap1 /dd/s1",
    "rename /inner2 /dd/inner3",
]
RECIPES["hash_collisions_xattr_and_names"] = collision_script()


def snapshots_in_one_transaction():
    """Snapshots of trees changed in the running transaction, of each other, changed on both sides and one
    deleted, with no commit of the script's own (each snapshot call commits, as the kernel's does); the trees
    have several levels (4K nodes), so shared nodes of the transaction are copied on both sides."""
    # the deleted trees stay (their uuids are the survivors' parent_uuid below; the kernel drops them)
    s = ["@autoclean 0", "subvol /sv", "mkdir /sv/m 755"]
    for i in range(150):
        s += ["create /sv/m/f%03d 644" % i, "write /sv/m/f%03d 0 %d %d" % (i, 300 if i % 10 else 9000, i + 1)]
    s += ["create /sv/f 644", "write /sv/f 0 50000 200", "mkdir /sv/d 755", "create /sv/d/g 600",
          "write /sv/d/g 0 1000 201", "setxattr /sv/f user.a 6869",
          "snapshot /sv /s1",
          "write /sv/f 10000 5000 202", "write /s1/f 20000 3000 203", "unlink /sv/d/g", "create /s1/d/new 644",
          "write /sv/m/f005 0 100 204", "write /s1/m/f006 0 100 205", "unlink /sv/m/f007", "unlink /s1/m/f008",
          "snapshot /s1 /s2",
          "write /s1/f 0 100 206", "write /s2/f 30000 10 207", "write /s2/m/f009 0 9000 208",
          "snapshot /sv /s3 ro",
          "write /sv/f 0 20000 209", "!30 write /s3/f 0 1 1",
          "snapshot /sv /s4", "write /s4/f 100 100 210", "write /s4/m/f011 0 9000 211", "subvoldel /s4",
          "truncate /s2/d/g 10", "write /sv/m/f012 0 9000 212",
          # a source deleted right after its snapshot changed both
          "subvol /w", "create /w/f 644", "write /w/f 0 20000 213", "snapshot /w /w2", "write /w/f 0 5000 214",
          "write /w2/f 5000 5000 215", "subvoldel /w",
          "commit"]
    return s


RECIPES["snapshots_in_one_transaction"] = snapshots_in_one_transaction()


def snapshots_random(seed=7, nops=400):
    """Seeded: writes, truncates, creates and unlinks in every subvolume, snapshots of any of them (some
    read-only) and deletes, commits now and then; the kernel runs the same script as the reference."""
    import random
    rnd = random.Random(seed)
    s = ["subvol /sv"]
    for i in range(120):
        s += ["create /sv/f%03d 644" % i, "write /sv/f%03d 0 %d %d" % (i, 200 if i % 8 else 9000, i + 1)]
    live = {"sv": {"f%03d" % i for i in range(120)}}
    ro, n = set(), 0
    for k in range(nops):
        r = rnd.random()
        sub = rnd.choice(sorted(live))
        files = live[sub]
        if r < 0.08 and len(live) < 12:
            n += 1
            new = "n%d" % n
            s.append("snapshot /%s /%s" % (sub, new) + (" ro" if rnd.random() < 0.2 else ""))
            if s[-1].endswith(" ro"):
                ro.add(new)
            live[new] = set(files)
        elif r < 0.11 and len(live) > 2:
            s.append("subvoldel /%s" % sub)
            del live[sub]
        elif r < 0.14:
            s.append("commit")
        elif sub in ro:
            if files:
                s.append("!30 write /%s/%s 0 1 1" % (sub, rnd.choice(sorted(files))))
        elif r < 0.25 or not files:
            name = "g%03d" % rnd.randrange(1000)
            if name not in files:
                s.append("create /%s/%s 644" % (sub, name))
                files.add(name)
        elif r < 0.32:
            name = rnd.choice(sorted(files))
            s.append("unlink /%s/%s" % (sub, name))
            files.discard(name)
        elif r < 0.40:
            s.append("truncate /%s/%s %d" % (sub, rnd.choice(sorted(files)), rnd.randrange(20000)))
        else:
            s.append("write /%s/%s %d %d %d" % (sub, rnd.choice(sorted(files)), rnd.randrange(30000),
                                                rnd.choice((1, 300, 4096, 9000)), k + 1000))
    return s + ["commit"]


RECIPES["snapshots_random"] = snapshots_random()


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_recipe(driver, casedir, ubtrfs_bin, name):
    ours = run_recipe(driver, casedir, RECIPES[name])
    if name == "extrefs_many_links_one_dir":
        dump = T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "fs", str(ours[0])]).stdout.decode()
        assert "INODE_EXTREF" in dump, "the ref item never overflowed into extrefs"
    if name == "compressed_and_shared_extents":
        dump = T.run(["btrfs", "inspect-internal", "dump-tree", str(ours[0])]).stdout.decode()
        for algo in (1, 2, 3):
            assert "compression %d" % algo in dump, "no extent compressed with type %d" % algo
        assert re.search(r"extent data offset [1-9]\d* nr \d+ ram \d+\n\s+extent compression [123]", dump), \
            "no item refers to the middle of a compressed extent"
    if name == "fallocate_and_punch":
        dump = T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "fs", str(ours[0])]).stdout.decode()
        assert "prealloc data disk byte" in dump
    if name == "subvolumes_snapshots_delete":
        # deleted subvolumes are dead roots (ORPHAN items): the kernel's cleaner drops them on its next
        # read-write mount, and what it leaves still passes btrfs check
        dump = T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "root", str(ours[0])]).stdout.decode()
        assert dump.count("ORPHAN_ITEM") >= 2, dump[-3000:]
        # as the kernel's delete, the dead roots carry BTRFS_ROOT_SUBVOL_DEAD (1 << 48)
        assert len(re.findall(r"flags 0x1000000000000\b", dump)) >= 2, dump[-3000:]
        with T.mounted(ours, casedir / "mnt", options="commit=1", readonly=False) as m:
            T.run(["btrfs", "subvolume", "sync", str(m)], timeout=120)
        progs_check(ours)
        dump = T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "root", str(ours[0])]).stdout.decode()
        assert "ORPHAN_ITEM" not in dump, dump[-3000:]
    if name == "snapshots_random":
        T.run(["btrfs", "check", "--readonly", "--check-data-csum", str(ours[0])], timeout=600)
    if name == "snapshots_in_one_transaction":
        T.run(["btrfs", "check", "--readonly", "--check-data-csum", str(ours[0])], timeout=600)
        dump = T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "root", str(ours[0])]).stdout.decode()
        # the root items as the kernel's snapshot writes them: key offset and otransid the snapshot's
        # transaction, last_snapshot that or a later one (a source of a later snapshot), generation_v2
        # current, parent_uuid the source's uuid
        items = {}
        for m in re.finditer(r"key \((\d+) ROOT_ITEM (\d+)\)[^\n]*\n((?:\t\t[^\n]*\n)+)", dump):
            f = dict(re.findall(r"(\w+) (\S+)", m.group(3)))
            items[int(m.group(1))] = (int(m.group(2)), f)
        uuids = {f["uuid"] for _, f in items.values()}
        snaps = [(off, f) for off, f in items.values() if off and f["refs"] == "1"]
        assert len(snaps) == 4, dump[-3000:]
        for off, f in snaps:
            assert int(f["otransid"]) == off and int(f["last_snapshot"]) >= off, f
            assert f["generation_v2"] == f["generation"] and f["parent_uuid"] in uuids, f
        # the kernel's cleaner drops the deleted one; deleting either side of a shared tree then frees
        # exactly what that side alone used
        for gone in (["/sv", "/s2"], ["/s1", "/s3"]):
            with T.mounted(ours, casedir / "mnt", options="commit=1", readonly=False) as m:
                for sub in gone:
                    T.run(["btrfs", "subvolume", "delete", str(m) + sub])
                T.run(["btrfs", "subvolume", "sync", str(m)], timeout=120)
            T.run(["btrfs", "check", "--readonly", "--check-data-csum", str(ours[0])], timeout=600)


def root_items(img):
    """{tree id: (generation, ctransid, ctime seconds)} from btrfs-progs' dump of the root tree."""
    dump = T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "root", str(img)]).stdout.decode()
    out = {}
    for m in re.finditer(r"key \((\S+) ROOT_ITEM \d+\) itemoff.*?\n\s+generation (\d+) root_dirid.*?"
                         r"ctransid (\d+) otransid.*?\n\s+ctime (\d+)\.", dump, re.S):
        tid = {"FS_TREE": 5}.get(m.group(1), None)
        if tid is None and m.group(1).isdigit():
            tid = int(m.group(1))
        if tid is not None:
            out[tid] = (int(m.group(2)), int(m.group(3)), int(m.group(4)))
    return out


def test_root_times(driver, casedir, ubtrfs_bin):
    """A commit sets ctransid and ctime of every subvolume whose inodes changed, as the kernel does (send and
    `subvolume show` rely on them); a subvolume left alone keeps its own. The same script through the kernel is
    the reference for which subvolumes move."""
    script = ["subvol /a", "subvol /b", "create /a/f 644", "commit", "write /a/f 0 5000 1", "mkdir /d 755", "commit"]
    ours = run_recipe(driver, casedir, script)
    ref = [casedir / "ref" / "dev0.img"]
    now = time.time()
    for imgs, who in ((ours, "ubtrfs"), (ref, "kernel")):
        r = root_items(imgs[0])
        a, b = sorted(k for k in r if k >= 256)
        # the top tree and /a changed in the last transaction that touched them: ctransid is that transaction
        for tid in (5, a):
            gen, ctransid, ctime = r[tid]
            assert ctransid == gen, "%s: tree %d ctransid %d, its root was last written in %d" % (who, tid, ctransid, gen)
            assert abs(ctime - now) < 600, "%s: tree %d ctime %d" % (who, tid, ctime)
        # /b was only created: its ctransid stays the creating transaction, older than /a's
        assert r[b][1] < r[a][1], "%s: untouched subvolume %d has ctransid %d, changed one %d" % (who, b, r[b][1], r[a][1])
