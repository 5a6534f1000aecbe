# SPDX-License-Identifier: MIT
"""Hostile names and directories that still pass their checksums.

Small images made by the kernel (4 KiB nodes, DUP metadata) and by
mkfs.btrfs --rootdir (16 KiB nodes, single metadata) get one lie each, written
into the fs tree leaf (items repacked, checksum recomputed, every copy
written): a directory entry and its inode's INODE_REF renamed to contain '/',
a NUL, to ".", "..", or nothing; file entries turned towards a directory
that is linked elsewhere (a sibling, an ancestor, and a chain where every level
has two names for the next one, 2^23 paths); a symlink whose
inode claims a target longer than btrfs allows; a superblock claiming 2^40
devices. Every command must finish within 10 s, exit 1 or 2 with a message
naming the problem, list no name holding '/' or NUL, and print strict JSON.
"""
import json
import os
import re
import shutil
import struct

import pytest

import multidev_lib as M
import ubtrfs_testlib as T
from test_mutation import crc32c

TIMEOUT = 10
HDR = 101          # tree block header
ITEM = 25          # item header in a leaf
DIR_INDEX, DIR_ITEM, INODE_REF, INODE_ITEM = 96, 84, 12, 1
FT_DIR = 2
CHAIN = 24
VICTIM = b"renameme"
BAD_UTF8 = b"bad-\xff\xfe-utf8"


def populate(root):
    """The same small tree for both image kinds."""
    root = os.fsencode(str(root))
    j = lambda *p: os.path.join(root, *p)  # noqa: E731
    os.makedirs(j(b"d1", b"sub"))
    os.makedirs(j(b"d2"))
    with open(j(b"d1", VICTIM), "wb") as f:
        f.write(b"the victim\n")
    with open(j(b"d1", b"sub", b"deep"), "wb") as f:
        f.write(b"deep file\n")
    with open(j(b"d2", b"plain"), "wb") as f:
        f.write(b"plain\n" * 100)
    with open(j(BAD_UTF8), "wb") as f:
        f.write(b"a name that is not UTF-8\n")
    os.symlink(b"d1/renameme", j(b"lnk"))
    # entries whose location the tests turn towards a directory (no leaf needs room for that)
    for p in (j(b"d2", b"alias"), j(b"d1", b"sub", b"up")):
        with open(p, "wb") as f:
            f.write(b"retargeted later\n")
    d = j(b"chain")
    for i in range(CHAIN):
        d = os.path.join(d, b"c%02d" % i)
        os.makedirs(d)
        if i + 1 < CHAIN:
            with open(os.path.join(d, b"twin"), "wb") as f:
                f.write(b"retargeted later\n")
    with open(os.path.join(d, b"bottom"), "wb") as f:
        f.write(b"bottom\n")


class Base:
    """One clean image and where its fs tree leaves are."""

    def __init__(self, name, img):
        self.name = name
        self.img = img
        sup = T.parse_dump_super(T.run(["btrfs", "inspect-internal", "dump-super", img]).stdout.decode())
        assert sup["csum_type"].startswith("0"), "test setup: crc32c expected, got %s" % sup["csum_type"]
        self.nodesize = int(sup["nodesize"])
        dump = T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "5", img]).stdout.decode("utf-8", "replace")
        chunks = M.parse_chunks(T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "chunk", img]).stdout.decode())
        self.leaves = [int(b) for b in re.findall(r"^leaf (\d+) ", dump, re.M)]
        self.copies = {b: [p for _, p in M.chunk_of(chunks, b).copies(b)] for b in self.leaves}
        self._names = None
        with open(img, "rb") as f:
            self.items = {}
            for b in self.leaves:
                f.seek(self.copies[b][0])
                for key, data in parse_leaf(f.read(self.nodesize)):
                    self.items[key] = (b, data)

    def names(self):
        """`ls -R` of the undamaged image."""
        if self._names is None:
            cp = T.ubtrfs("ls", "-R", self.img, timeout=TIMEOUT)
            assert cp.returncode == 0 and cp.stdout, "control: " + T.describe(cp)
            self._names = cp.stdout
        return self._names

    def dir_entries(self):
        """[(dir ino, index, child ino, name)] from the DIR_INDEX items."""
        out = []
        for (obj, typ, off), (_, data) in self.items.items():
            if typ == DIR_INDEX:
                nlen = struct.unpack_from("<H", data, 27)[0]
                out.append((obj, off, struct.unpack_from("<Q", data, 0)[0], data[30:30 + nlen]))
        return out

    def entry(self, name, parent=None):
        hits = [e for e in self.dir_entries() if e[3] == name and (parent is None or e[0] == parent)]
        assert len(hits) == 1, "test setup: entry %r found %d times" % (name, len(hits))
        return hits[0]


def parse_leaf(blk):
    assert blk[100] == 0, "not a leaf"
    n = struct.unpack_from("<I", blk, 96)[0]
    out = []
    for i in range(n):
        obj, typ, off, doff, size = struct.unpack_from("<QBQII", blk, HDR + ITEM * i)
        out.append(((obj, typ, off), bytes(blk[HDR + doff:HDR + doff + size])))
    return out


def write_leaf(img, base, bytenr, items):
    """Repack `items` (sorted (key, data)) into the leaf at `bytenr` in every copy."""
    ns = base.nodesize
    items = sorted(items)
    need = sum(ITEM + len(d) for _, d in items)
    if need > ns - HDR:
        pytest.skip("%s: leaf %d has no room for the change" % (base.name, bytenr))
    with open(img, "r+b") as f:
        f.seek(base.copies[bytenr][0])
        blk = bytearray(f.read(ns))
        struct.pack_into("<I", blk, 96, len(items))
        blk[HDR:] = bytes(ns - HDR)
        end = ns - HDR
        for i, (key, data) in enumerate(items):
            end -= len(data)
            struct.pack_into("<QBQII", blk, HDR + ITEM * i, key[0], key[1], key[2], end, len(data))
            blk[HDR + end:HDR + end + len(data)] = data
        blk[0:4] = crc32c(bytes(blk[32:])).to_bytes(4, "little")
        for p in base.copies[bytenr]:
            f.seek(p)
            f.write(blk)


def leaf_items(img, base, bytenr):
    with open(img, "rb") as f:
        f.seek(base.copies[bytenr][0])
        return parse_leaf(f.read(base.nodesize))


def change_item(img, base, key, fn):
    """Replace the data of item `key` with fn(old data)."""
    bytenr = base.items[key][0]
    items = [(k, fn(d) if k == key else d) for k, d in leaf_items(img, base, bytenr)]
    write_leaf(img, base, bytenr, items)


# ---- the lies

def rename(new):
    def mutate(img, base):
        d, idx, child, _ = base.entry(VICTIM)
        change_item(img, base, (d, DIR_INDEX, idx),
                    lambda data: data[:27] + struct.pack("<H", len(new)) + data[29:30] + new)
        if new:
            # (the tree checker refuses an empty INODE_REF name outright, as the kernel does)
            change_item(img, base, (child, INODE_REF, d),
                        lambda data: data[:8] + struct.pack("<H", len(new)) + new)
        return {"what": [r"subvol 5 dir %d" % d, re.escape(PROBLEM[new])], "absent": new}
    return mutate


PROBLEM = {b"rena/eme": "name contains '/'", b"rena\0eme": "name contains a NUL byte",
           b".": 'name is "." or ".."', b"..": 'name is "." or ".."', b"": "empty name"}


def retarget(img, base, d, name, target):
    """Turn the entry `name` of directory `d` (a file's) towards directory `target`."""
    _, idx, _, _ = base.entry(name, parent=d)
    turn = lambda data: struct.pack("<Q", target) + data[8:29] + bytes([FT_DIR]) + data[30:]  # noqa: E731
    change_item(img, base, (d, DIR_INDEX, idx), turn)
    # the DIR_ITEM too (its key is the name's hash, which does not change), so lookups meet it
    hashed = [k for k, (_, data) in base.items.items()
              if k[0] == d and k[1] == DIR_ITEM and data[30:30 + struct.unpack_from("<H", data, 27)[0]] == name]
    assert len(hashed) == 1, "test setup: DIR_ITEM of %r" % name
    change_item(img, base, hashed[0], turn)


def alias(of, into, name):
    """The entry `name` in directory `into` leads to the directory at path `of`, linked elsewhere."""
    def mutate(img, base):
        target = resolve(base, of)
        retarget(img, base, resolve(base, into), name, target)
        return {"what": [r"directory ino %d" % target, "another name"], "alias": (into, name)}
    return mutate


def chain_twins(img, base):
    """Every chain level gets a second entry for the next level: 2^23 paths to the bottom."""
    d = resolve(base, b"chain/c00")
    for i in range(1, CHAIN):
        nxt = base.entry(b"c%02d" % i, parent=d)[2]
        retarget(img, base, d, b"twin", nxt)
        d = nxt
    return {"what": ["another name"], "alias": (b"chain/c00", b"twin")}


def long_symlink(img, base):
    ino = base.entry(b"lnk")[2]
    change_item(img, base, (ino, INODE_ITEM, 0), lambda data: data[:16] + struct.pack("<Q", 100000) + data[24:])
    return {"what": [r"ino %d" % ino, "symlink target"]}


def many_devices(img, base):
    with open(img, "r+b") as f:
        for off in (64 << 10, 64 << 20):
            f.seek(off)
            sb = bytearray(f.read(4096))
            if len(sb) < 4096 or sb[64:72] != b"_BHRfS_M":
                continue
            struct.pack_into("<Q", sb, 136, 1 << 40)
            sb[0:4] = crc32c(bytes(sb[32:])).to_bytes(4, "little")
            f.seek(off)
            f.write(sb)
    return {"what": [r"num_devices 1099511627776"], "fatal": True}


def resolve(base, path):
    d = 256
    for comp in path.split(b"/"):
        d = base.entry(comp, parent=d)[2]
    return d


CASES = {
    "name-slash": rename(b"rena/eme"),
    "name-nul": rename(b"rena\0eme"),
    "name-dot": rename(b"."),
    "name-dotdot": rename(b".."),
    "name-empty": rename(b""),
    "dir-alias-sibling": alias(b"d1", b"d2", b"alias"),
    "dir-alias-ancestor": alias(b"d1", b"d1/sub", b"up"),
    "dir-chain-twins": chain_twins,
    "symlink-too-long": long_symlink,
    "num-devices-2^40": many_devices,
}

LS_COMMANDS = [["ls", "-R"], ["ls", "-R", "-l"], ["ls", "-R", "--json"], ["ls", "-R", "-l", "--json"]]


@pytest.fixture(scope="module", params=["kernel-4k-dup", "rootdir-16k-single"])
def base(request, scratch):
    # test_silent_errors uses these images too: built once per run (shared between
    # modules and pytest-xdist workers), damaged only on copies in `work`
    work = os.path.join(scratch, "names-" + request.param)
    os.makedirs(work, exist_ok=True)

    def build(d):
        img = os.path.join(d, "base.img")
        with open(img, "wb") as f:
            f.truncate(256 << 20)
        if request.param == "kernel-4k-dup":
            T.run(["mkfs.btrfs", "-q", "-f", "-n", "4096", "-m", "dup", img])
            with T.mounted([img], os.path.join(work, "mnt"), readonly=False) as mnt:
                populate(mnt)
                T.run(["sync"])
        else:
            src = os.path.join(d, "src")
            populate(src)
            T.run(["mkfs.btrfs", "-q", "-f", "-n", "16384", "-m", "single", "--rootdir", src, img])
            shutil.rmtree(src)
        return img
    _, img = T.shared_build("names-dirs-" + request.param, build, fallback_dir=scratch)
    b = Base(request.param, img)
    b.work = work
    yield b
    shutil.rmtree(work, ignore_errors=True)


def hostile(base, case):
    img = os.path.join(base.work, "%s.img" % case.replace("^", "_"))
    T.copy_sparse(base.img, img)
    info = CASES[case](img, base)
    return img, info


def check_run(cp, info, allow_ok=False):
    """Common judgement: time, exit code, named error, sanitizer silence."""
    err = cp.stderr.decode("utf-8", "replace")
    assert "Sanitizer" not in err and "runtime error:" not in err, T.describe(cp)
    if allow_ok and cp.returncode == 0:
        return err
    assert cp.returncode in (1, 2), T.describe(cp)
    for pat in info["what"]:
        assert re.search(r"error: .*" + pat, err), "no error naming %r: %s" % (pat, T.describe(cp))
    return err


def check_listing(cp, args, info):
    out = cp.stdout
    if "--json" in args:
        objs = T.parse_ls_json(out)  # strict JSON and UTF-8, or it raises
        paths = [os.fsencode(o["path"]) for o in objs]
        for o, p in zip(objs, paths):
            name = os.fsencode(o["name"])
            assert name and b"/" not in name and b"\0" not in name and name not in (b".", b".."), o
            assert p.endswith(b"/" + name), o
    else:
        assert b"\0" not in out
        lines = [line for line in out.split(b"\n") if line]
        if "-l" in args:
            long_line = re.compile(rb"^\S{10} +\d+ +\d+ +\d+ +\d+ \S+ \S+ (.*?)(?: -> .*)?$", re.S)
            paths = [long_line.match(line).group(1) for line in lines]
        else:
            paths = lines
    assert len(paths) == len(set(paths)), "a path listed twice"
    for p in paths:
        comps = p.split(b"/")[1:]
        assert all(c and c not in (b".", b"..") for c in comps), "bad path component in %r" % p
    if "absent" in info:
        bad = info["absent"]
        assert not [p for p in paths if p.startswith(b"/d1/") and p[4:] not in (b"sub", b"sub/deep", b"sub/up")], \
            "the entry with the bad name %r was listed: %r" % (bad, paths)
    if "alias" in info:
        into, name = info["alias"]
        assert b"/%s/%s" % (into, name) not in paths, "entered a directory through its second name"
    return paths


@pytest.mark.parametrize("case", sorted(CASES))
def test_hostile_image(ubtrfs_bin, base, case):
    img, info = hostile(base, case)
    try:
        for args in LS_COMMANDS:
            cp = T.ubtrfs(*args, img, timeout=TIMEOUT)
            if args == ["ls", "-R"] and cp.returncode == 0:
                # names only: the files' inodes are not read (as readdir does for find on the
                # kernel); damage below no name may pass unseen, but then every name printed
                # must be the undamaged image's
                assert cp.stdout == base.names(), "exit 0 with other names than the undamaged image's: " + \
                    T.describe(cp)
                continue
            check_run(cp, info)
            if not info.get("fatal"):
                paths = check_listing(cp, args, info)
                # everything else is still listed
                assert b"/d2/plain" in paths and b"/chain/c00" in paths, paths[:50]
                if case != "dir-chain-twins":
                    assert os.fsencode("/" + os.fsdecode(BAD_UTF8)) in paths
        # lookups: the victim's DIR_ITEM still has its old, valid name and hash
        cp = T.ubtrfs("cat", "--path", "/d2/plain", img, timeout=TIMEOUT)
        if info.get("fatal"):
            check_run(cp, info)
        else:
            assert cp.returncode == 0 and cp.stdout == b"plain\n" * 100, T.describe(cp)
        if "alias" in info:
            # a path through the second name is not followed either
            where = "/%s/%s" % (os.fsdecode(info["alias"][0]), os.fsdecode(info["alias"][1]))
            for args in (["ls", "--json", "--path", where], ["cat", "--path", where + "/renameme"]):
                cp = T.ubtrfs(*args, img, timeout=TIMEOUT)
                check_run(cp, info)
                assert cp.stdout == b"", T.describe(cp)
        cp = T.ubtrfs("dump-tree", img, timeout=TIMEOUT)
        check_run(cp, info, allow_ok=not info.get("fatal"))
        cp = T.ubtrfs("dump-super", "-f", "--all", img, timeout=TIMEOUT)
        check_run(cp, info, allow_ok=not info.get("fatal"))
    finally:
        os.unlink(img)


def test_bad_utf8_name_round_trips(ubtrfs_bin, base):
    """The clean image: the name that is not UTF-8 comes back byte for byte from --json."""
    cp = T.ubtrfs("ls", "--json", base.img, timeout=TIMEOUT)
    assert cp.returncode == 0, T.describe(cp)
    raw = [json.loads(line) for line in cp.stdout.decode("utf-8").splitlines()]
    hit = [o for o in raw if "name_hex" in o]
    assert [bytes.fromhex(o["name_hex"]) for o in hit] == [BAD_UTF8]
    assert bytes.fromhex(hit[0]["path_hex"]) == b"/" + BAD_UTF8
    assert hit[0]["name"] == BAD_UTF8.decode("utf-8", "replace")
    assert all("name_hex" not in o for o in raw if o is not hit[0])


@pytest.mark.parametrize("path", ["/d1/..", "/d1/.", "/d1//sub/", "/d1/sub/../renameme"])
def test_path_syntax_is_not_an_entry(ubtrfs_bin, base, path):
    """'.' and '..' in a path are path syntax: they never match an entry by that name."""
    cp = T.ubtrfs("ls", "--json", "--path", path, base.img, timeout=TIMEOUT)
    assert cp.returncode == 0, T.describe(cp)
