# SPDX-License-Identifier: MIT
"""ubtrfs mkfs, refereed by btrfs-progs and the kernel.

For each configuration: `ubtrfs mkfs` on sparse image files, then
  - `btrfs check` reports no error, `btrfs inspect-internal dump-super` agrees
    with what was asked (devices, sizes, nodesize, checksum, features, label, uuid);
  - the trees and item types (`btrfs inspect-internal dump-tree`) are those
    mkfs.btrfs writes for the same options (structure, not bytes);
  - the kernel mounts it, writes files, a directory and a snapshot, unmounts;
    `btrfs check` is still clean and `ubtrfs ls`/`cat` read back what the
    kernel wrote (compared with the bytes the test wrote).
Refusals: exit 2, a message naming the reason, the images unchanged.

UBTRFS_LONG_TESTS=1 runs every data x metadata profile pair over four devices,
each with every nodesize, checksum and feature set (long_cases).
"""

import hashlib
import itertools
import os
import random
import re
import subprocess
import uuid

import pytest

import ubtrfs_testlib as T

LONG = os.environ.get("UBTRFS_LONG_TESTS") == "1"
MiB = 1 << 20


def _sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _images(base, name, n, size):
    paths = []
    for i in range(n):
        p = os.path.join(str(base), "%s-%d.img" % (name, i))
        if os.path.exists(p):
            os.unlink(p)
        with open(p, "wb") as f:
            f.truncate(size)
        paths.append(p)
    return paths


class Attached:
    """Loop devices for images, registered with the kernel's btrfs device list; always cleaned up."""

    def __init__(self, images, readonly=True):
        self.images = images
        self.readonly = readonly
        self.loops = []

    def __enter__(self):
        try:
            for img in self.images:
                self.loops.append(T.losetup_attach(img, self.readonly))
            for dev in self.loops:
                T.run(["btrfs", "device", "scan", dev])
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self.loops

    def __exit__(self, *exc):
        for dev in self.loops:
            T.losetup_detach(dev)
        self.loops = []
        return False


def check_clean(loops, what):
    """btrfs check on the (multi-device) filesystem whose loop devices are attached and scanned:
    exit 0 and no error line. btrfs check scans every block device; a scan failing on a loop
    device that is not ours (another test's, being torn down) says nothing about this one."""
    cp = T.run(["btrfs", "check", "--readonly", loops[0]], check=False, timeout=600)
    out = (cp.stdout + cp.stderr).decode("utf-8", "replace")
    bad = []
    for line in out.splitlines():
        m = re.match(r"^ERROR: cannot scan (/dev/\S+): ", line)
        if m and m.group(1) not in loops:
            continue
        if re.search(r"error|corrupt|mismatch|wrong|missing", line, re.I) and "no error found" not in line:
            bad.append(line)
    assert cp.returncode == 0 and not bad, "btrfs check (%s) not clean (exit %d):\n%s" % (
        what, cp.returncode, out[-4000:])
    assert "no error found" in out, out[-2000:]


def inspect(loops, args):
    return T.run(["btrfs", "inspect-internal"] + args + [loops[0]], timeout=300).stdout.decode("utf-8", "replace")


TREE_HDR = re.compile(r"^([a-z ]+ tree)(?: key \(.*\))?\s*$")
ITEM = re.compile(r"^\titem \d+ key \((\S+) (\S+) (\S+)\)")


def structure(dump_tree_text):
    """{(tree, objectid class, item type)}: what mkfs wrote, leaving out addresses and sizes."""
    out = set()
    tree = None
    for line in dump_tree_text.splitlines():
        m = TREE_HDR.match(line)
        if m:
            tree = m.group(1)
            continue
        m = ITEM.match(line)
        if m and tree:
            obj = m.group(1)
            if obj.isdigit() and int(obj) >= 1 << 20 or obj.startswith("0x"):
                obj = "#"  # a logical address or a uuid half
            out.add((tree, obj, m.group(2)))
    return out


def features_of(opts):
    off = set()
    for i, a in enumerate(opts):
        if a == "-O":
            off |= {f[1:] for f in opts[i + 1].split(",") if f.startswith("^")}
    return off


def check_super(loops, images, opts, profiles):
    text = inspect(loops, ["dump-super", "-f"])
    sb = T.parse_dump_super(text)
    assert "[match]" in sb["magic"] and "[match]" in sb["csum"], text[:1500]
    assert int(sb["num_devices"]) == len(images)
    assert int(sb["total_bytes"]) == sum(os.path.getsize(i) // 4096 * 4096 for i in images)
    assert int(sb["sectorsize"]) == 4096
    nodesize = int(opts[opts.index("-n") + 1]) if "-n" in opts else 16384
    assert int(sb["nodesize"]) == nodesize
    csum = opts[opts.index("--csum") + 1] if "--csum" in opts else "crc32c"
    assert "(%s)" % {"xxhash": "xxhash64", "blake2b": "blake2"}.get(csum, csum) in sb["csum_type"], sb["csum_type"]
    assert int(sb["generation"]) >= 1 and int(sb["root_dir"]) == 6
    off = features_of(opts)
    incompat = text[text.index("incompat_flags"):text.index("cache_generation")]
    for feat, name in (("no-holes", "NO_HOLES"), ("skinny-metadata", "SKINNY_METADATA"),
                       ("extref", "EXTENDED_IREF")):
        assert (name in incompat) == (feat not in off), (feat, incompat)
    assert ("RAID56" in incompat) == any(p in profiles for p in ("raid5", "raid6")), incompat
    assert ("RAID1C34" in incompat) == any(p in profiles for p in ("raid1c3", "raid1c4")), incompat
    compat_ro = text[text.index("compat_ro_flags"):text.index("incompat_flags")]
    assert ("FREE_SPACE_TREE_VALID" in compat_ro) == ("free-space-tree" not in off), compat_ro
    # every device got a superblock naming itself
    for i, img in enumerate(images):
        one = T.run(["btrfs", "inspect-internal", "dump-super", img]).stdout.decode()
        s = T.parse_dump_super(one)
        assert s["fsid"] == sb["fsid"] and int(s["dev_item.devid"]) == i + 1, one[:800]
        assert "[match]" in s["dev_item.fsid"]
    return sb


def chunk_profiles(loops):
    """{(DATA|METADATA|SYSTEM, profile)} of every chunk item in the chunk tree (progs' dump)."""
    out = set()
    for t in re.findall(r"^\s*length \d+ owner \d+ stripe_len \d+ type (\S+)$", inspect(loops, ["dump-tree", "-t", "chunk"]), re.M):
        kinds = t.split("|")
        out.add((kinds[0], kinds[1].lower() if len(kinds) > 1 else "single"))
    return out


def check_profiles(loops, opts, ndev, what):
    """Every chunk has the profile asked for its kind (system chunks follow metadata)."""
    d = opts[opts.index("-d") + 1] if "-d" in opts else "single"
    m = opts[opts.index("-m") + 1] if "-m" in opts else ("raid1" if ndev > 1 else "dup")
    want = {("DATA", d), ("METADATA", m), ("SYSTEM", m)}
    got = chunk_profiles(loops)
    assert got == want, "%s: chunk profiles %s, asked %s" % (what, sorted(got), sorted(want))


def mkfs_btrfs(images, opts):
    """The oracle: mkfs.btrfs with the same options (it calls the free space tree a runtime feature)."""
    args = ["mkfs.btrfs", "-f", "-q"]
    runtime = []
    i = 0
    while i < len(opts):
        if opts[i] == "-O":
            feats = opts[i + 1].split(",")
            runtime += [f for f in feats if f.lstrip("^") == "free-space-tree"]
            feats = [f for f in feats if f.lstrip("^") != "free-space-tree"]
            if feats:
                args += ["-O", ",".join(feats)]
            i += 2
            continue
        args.append(opts[i])
        i += 1
    if runtime:
        args += ["-R", ",".join(runtime)]
    T.run(args + images, timeout=300)


def kernel_round_trip(images, mnt, seed, fill_mib=0):
    """Mount read-write, write files, a directory and a snapshot, unmount; return {path: sha256}.
    fill_mib: one more file that large, to make the kernel add chunks next to ours."""
    rng = random.Random(seed)
    want = {}
    with T.mounted(images, mnt, readonly=False):
        if fill_mib:
            data = os.urandom(fill_mib * MiB)
            with open(os.path.join(mnt, "fill"), "wb") as f:
                f.write(data)
            want["/fill"] = hashlib.sha256(data).hexdigest()
        big = rng.randbytes(3 * MiB + 12345)
        with open(os.path.join(mnt, "big"), "wb") as f:
            f.write(big)
        want["/big"] = hashlib.sha256(big).hexdigest()
        os.mkdir(os.path.join(mnt, "dir"))
        # empty, inline (100, 3000), just past inline, several extents
        for i, size in enumerate([0, 100, 3000, 5000, 70000]):
            data = rng.randbytes(size)
            with open(os.path.join(mnt, "dir", "f%02d" % i), "wb") as f:
                f.write(data)
            want["/dir/f%02d" % i] = hashlib.sha256(data).hexdigest()
        os.symlink("dir/f00", os.path.join(mnt, "link"))
        T.run(["btrfs", "subvolume", "snapshot", mnt, os.path.join(mnt, "snap")])
        after = rng.randbytes(5000)
        with open(os.path.join(mnt, "big"), "r+b") as f:
            f.seek(1 * MiB)
            f.write(after)
        patched = bytearray(big)
        patched[1 * MiB:1 * MiB + len(after)] = after
        want["/snap/big"] = want["/big"]
        want["/big"] = hashlib.sha256(bytes(patched)).hexdigest()
        T.run(["sync"])
    return want


def read_back(images, want):
    cp = T.ubtrfs("ls", "-R", "--json", *images)
    assert cp.returncode == 0, T.describe(cp)
    paths = {o["path"] for o in T.parse_ls_json(cp.stdout)}
    for p in list(want) + ["/dir", "/link", "/snap", "/snap/dir/f04"]:
        assert p in paths, "ubtrfs ls -R misses %s (has %d entries)" % (p, len(paths))
    for p, h in sorted(want.items()):
        rc, _, got, cpc = T.cat_hash(images, p)
        assert rc == 0 and got == h, "ubtrfs cat %s: %s" % (p, T.describe(cpc))


# -U takes a fresh UUID at each run: a fixed one makes two concurrent runs (or ours and the oracle's image)
# one filesystem to the kernel's device scan; the test id stays fixed, so xdist workers collect alike
RANDOM_UUID = "RANDOM-UUID"


def with_fresh_uuid(opts):
    return [str(uuid.uuid4()) if o == RANDOM_UUID else o for o in opts]


# (name, devices, options): the CI slice; FILL: MiB written beyond the first data chunk
CASES = [
    ("one-default", 1, []),
    ("one-n4k-xxhash", 1, ["-n", "4096", "--csum", "xxhash"]),
    ("one-noholes-off", 1, ["-O", "^no-holes", "-L", "a label", "-U", RANDOM_UUID]),
    ("two-raid1", 2, ["-d", "raid1", "-m", "raid1"]),
    ("two-raid0-raid1", 2, ["-d", "raid0", "-m", "raid1"]),
    ("three-raid5-raid1c3", 3, ["-d", "raid5", "-m", "raid1c3"]),
    ("four-raid10-sha256", 4, ["-d", "raid10", "-m", "raid10", "--csum", "sha256"]),
    ("four-raid6-blake2-64k", 4, ["-d", "raid6", "-m", "raid1c4", "--csum", "blake2", "-n", "65536"]),
]

# small devices make small first chunks (10% of the total), so a little data needs another chunk
FILL = {"one-default": 24, "two-raid0-raid1": 40}
SIZE_MIB = {"one-default": 160, "two-raid0-raid1": 160}

PROFILES = ["single", "dup", "raid0", "raid1", "raid1c3", "raid1c4", "raid10", "raid5", "raid6"]


NODESIZES = ["4096", "16384", "65536"]
CSUMS = ["crc32c", "xxhash", "sha256", "blake2"]
FEATURES = [("", []), ("-noholes-off", ["-O", "^no-holes"]), ("-fst-off", ["-O", "^free-space-tree"])]


def long_cases():
    """Every data x metadata pair, four cases each: every checksum, every nodesize and every feature
    set meets every pair at least once (a rotation, not the full product). All cases on four
    devices, which every profile allows (mkfs.btrfs takes dup on several devices too). The first
    round covers every pair once, so a run cut short still saw each of them."""
    out = []
    pairs = list(itertools.product(PROFILES, PROFILES))
    for k in range(len(CSUMS)):
        for i, (d, m) in enumerate(pairs):
            c = CSUMS[k]
            n = NODESIZES[(i + k) % len(NODESIZES)]
            ftag, fopts = FEATURES[(i + 2 * k) % len(FEATURES)]
            out.append(("long-%s-%s-%s-%s%s" % (d, m, n, c, ftag), 4,
                        ["-d", d, "-m", m, "-n", n, "--csum", c] + fopts))
    return out


def profiles_in(opts, ndev):
    d = opts[opts.index("-d") + 1] if "-d" in opts else "single"
    m = opts[opts.index("-m") + 1] if "-m" in opts else ("raid1" if ndev > 1 else "dup")
    return {d, m}


def run_case(scratch, name, ndev, opts, oracle=True, seed=1):
    size = SIZE_MIB.get(name, 256) * MiB
    imgs = _images(scratch, name, ndev, size)
    case_opts, opts = opts, with_fresh_uuid(opts)
    cp = T.ubtrfs("mkfs", "-q", *opts, *imgs)
    assert cp.returncode == 0, T.describe(cp)
    assert cp.stdout == b"", "-q printed something: %r" % cp.stdout[:300]
    with Attached(imgs) as loops:
        check_clean(loops, "fresh")
        sb = check_super(loops, imgs, opts, profiles_in(opts, ndev))
        check_profiles(loops, opts, ndev, "fresh")
        ours = structure(inspect(loops, ["dump-tree"])) if oracle else None
    if "-L" in opts:
        assert sb["label"] == opts[opts.index("-L") + 1]
    if "-U" in opts:
        assert sb["fsid"] == opts[opts.index("-U") + 1]
    if oracle:
        ref_imgs = _images(scratch, name + "-ref", ndev, size)
        mkfs_btrfs(ref_imgs, with_fresh_uuid(case_opts))
        with Attached(ref_imgs) as loops:
            theirs = structure(inspect(loops, ["dump-tree"]))
        for p in ref_imgs:
            os.unlink(p)
        assert ours == theirs, "trees/items differ from mkfs.btrfs's:\n only ours: %s\n only theirs: %s" % (
            sorted(ours - theirs), sorted(theirs - ours))
        # and our own reader sees what btrfs-progs sees
        cp = T.ubtrfs("dump-tree", *imgs)
        assert cp.returncode == 0, T.describe(cp)
        mine = structure(cp.stdout.decode("utf-8", "replace"))
        assert mine == ours, "ubtrfs dump-tree differs from btrfs's on our image:\n %s\n %s" % (
            sorted(mine - ours), sorted(ours - mine))
    fill = FILL.get(name, 0)
    want = kernel_round_trip(imgs, os.path.join(str(scratch), name + "-mnt"), seed, fill)
    with Attached(imgs) as loops:
        check_clean(loops, "after the kernel wrote")
        check_profiles(loops, opts, ndev, "after the kernel wrote")
        if fill:
            chunks = inspect(loops, ["dump-tree", "-t", "chunk"]).count("CHUNK_ITEM")
            assert chunks > 3, "the kernel was to add a data chunk, chunk tree has %d chunks" % chunks
    read_back(imgs, want)
    for p in imgs:
        os.unlink(p)


@pytest.mark.parametrize("name,ndev,opts", CASES, ids=[c[0] for c in CASES])
def test_mkfs_config(scratch, ubtrfs_bin, name, ndev, opts):
    run_case(scratch, name, ndev, opts)


@pytest.mark.skipif(not LONG, reason="full profile x nodesize x checksum matrix: UBTRFS_LONG_TESTS=1")
@pytest.mark.parametrize("name,ndev,opts", long_cases() if LONG else [], ids=[c[0] for c in long_cases()] if LONG else [])
def test_mkfs_matrix(scratch, ubtrfs_bin, name, ndev, opts):
    run_case(scratch, name, ndev, opts, oracle=False)


def test_mkfs_summary_and_help(scratch, ubtrfs_bin):
    cp = T.ubtrfs("mkfs", "--help")
    assert cp.returncode == 0 and b"usage: ubtrfs mkfs" in cp.stdout
    imgs = _images(scratch, "summary", 1, 200 * MiB)
    cp = T.ubtrfs("mkfs", "-L", "lbl", *imgs)
    assert cp.returncode == 0, T.describe(cp)
    out = cp.stdout.decode()
    sb = T.parse_dump_super(T.run(["btrfs", "inspect-internal", "dump-super", imgs[0]]).stdout.decode())
    assert sb["fsid"] in out and "DUP" in out and "lbl" in out, out
    os.unlink(imgs[0])


# ---------------------------------------------------------------------------
# refusals: exit 2, a reason, nothing written

def refused(imgs, args, reason_re):
    before = [_sha(p) for p in imgs]
    cp = T.ubtrfs("mkfs", *args)
    err = cp.stderr.decode("utf-8", "replace")
    assert cp.returncode == 2, T.describe(cp)
    assert re.search(reason_re, err, re.I), "message does not say why (%r): %s" % (reason_re, err)
    assert [_sha(p) for p in imgs] == before, "a refused mkfs changed an image"


@pytest.mark.parametrize("prof,ndev,which", [
    ("raid1", 1, "-m"), ("raid1c3", 2, "-m"), ("raid1c4", 3, "-d"), ("raid10", 3, "-d"),
    ("raid5", 1, "-d"), ("raid6", 2, "-m"),
])
def test_refuse_too_few_devices(scratch, ubtrfs_bin, prof, ndev, which):
    # the profile is refused before the size is looked at: small images hash fast
    imgs = _images(scratch, "few-%s" % prof, ndev, 8 * MiB)
    refused(imgs, [which, prof, *imgs], r"%s.*needs at least \d devices, %d given" % (prof, ndev))


def test_refuse_existing_without_force(scratch, ubtrfs_bin):
    imgs = _images(scratch, "existing", 1, 130 * MiB)
    T.run(["mkfs.btrfs", "-f", "-q", imgs[0]])
    refused(imgs, imgs, r"already holds a btrfs filesystem.*-f")
    cp = T.ubtrfs("mkfs", "-q", "-f", *imgs)
    assert cp.returncode == 0, T.describe(cp)
    with Attached(imgs) as loops:
        check_clean(loops, "made over an old filesystem with -f")
    # the old filesystem is gone from every superblock copy
    out = T.run(["btrfs", "inspect-internal", "dump-super", "-a", imgs[0]]).stdout.decode()
    assert len(set(re.findall(r"^fsid\s+(\S+)", out, re.M))) == 1, out[:3000]


def test_refuse_mounted(scratch, ubtrfs_bin):
    imgs = _images(scratch, "mounted", 2, 130 * MiB)  # raid1 needs 125 MiB each
    T.run(["mkfs.btrfs", "-f", "-q", "-d", "raid1", "-m", "raid1"] + imgs)
    mnt = os.path.join(str(scratch), "mounted-mnt")
    with T.mounted(imgs, mnt):
        # the file behind the mounted loop device, and the second member (mountinfo names only the first)
        refused(imgs, ["-f", imgs[0]], r"mounted")
        refused(imgs, ["-f", imgs[1]], r"mounted")
        loops = [l.split()[0] for l in T.run(["losetup", "-j", imgs[0]]).stdout.decode().splitlines()]
        assert loops, "no loop device for the mounted image"
        refused(imgs, ["-f", loops[0].rstrip(":")], r"mounted")
        # a fresh image may not take the mounted filesystem's UUID
        fsid = T.parse_dump_super(T.run(["btrfs", "inspect-internal", "dump-super", imgs[0]]).stdout.decode())["fsid"]
        other = _images(scratch, "mounted-other", 1, 130 * MiB)
        refused(other, ["-U", fsid, other[0]], r"UUID %s belongs to a mounted filesystem" % fsid)
        os.unlink(other[0])


def test_refuse_too_small(scratch, ubtrfs_bin):
    imgs = _images(scratch, "small", 1, 100 * MiB)
    # mkfs.btrfs's own figure for DUP metadata: 109 MiB
    refused(imgs, imgs, r"too small")
    cp = T.run(["mkfs.btrfs", "-f", "-q", imgs[0]], check=False)
    assert cp.returncode != 0, "mkfs.btrfs accepted what we refuse"
    os.unlink(imgs[0])
    imgs = _images(scratch, "small2", 2, 120 * MiB)
    refused(imgs, ["-d", "raid1"] + imgs, r"too small")


def test_refuse_duplicates_and_bad_options(scratch, ubtrfs_bin):
    imgs = _images(scratch, "dup", 1, 8 * MiB)
    link = imgs[0] + ".link"
    if os.path.lexists(link):
        os.unlink(link)
    os.symlink(imgs[0], link)
    refused(imgs, [imgs[0], imgs[0]], r"given twice")
    refused(imgs, [imgs[0], link], r"given twice")
    refused(imgs, ["-O", "quota", imgs[0]], r"quota.*not supported")
    refused(imgs, ["-O", "block-group-tree", imgs[0]], r"block-group-tree.*not supported")
    refused(imgs, ["-O", "raid-stripe-tree", imgs[0]], r"raid-stripe-tree.*not supported")
    refused(imgs, ["-O", "frobnicate", imgs[0]], r"unknown feature")
    refused(imgs, ["-n", "12288", imgs[0]], r"nodesize")
    refused(imgs, ["-n", "131072", imgs[0]], r"nodesize")
    refused(imgs, ["-d", "raid7", imgs[0]], r"profile")
    refused(imgs, ["--csum", "md5", imgs[0]], r"checksum")
    refused(imgs, ["-s", "8192", imgs[0]], r"4096")
    refused(imgs, ["--rootdir", "/nonexistent-ubtrfs-dir", imgs[0]], r"--rootdir.*No such file")
    refused(imgs, ["--rootdir", imgs[0], imgs[0]], r"--rootdir.*not a directory")
    refused(imgs, ["--compress", "zstd", imgs[0]], r"--compress needs --rootdir")
    refused(imgs, ["--compress", "zstd:99", "--rootdir", "/tmp", imgs[0]], r"--compress")
    refused(imgs, ["-U", "not-a-uuid", imgs[0]], r"uuid")
    os.unlink(link)


def test_mkfs_block_devices_registered(scratch, ubtrfs_bin):
    """On block devices the new members are registered with the kernel: a two-device raid1 mounts
    without 'device=' or a scan, and btrfs check of the loop devices is clean."""
    imgs = _images(scratch, "blk", 2, 200 * MiB)
    loops = []
    mnt = os.path.join(str(scratch), "blk-mnt")
    os.makedirs(mnt, exist_ok=True)
    try:
        for img in imgs:
            loops.append(T.losetup_attach(img, False))
        for dev in loops:
            T.run(["btrfs", "device", "scan", "--forget", dev], check=False)
        cp = T.ubtrfs("mkfs", "-q", "-d", "raid1", *loops)
        assert cp.returncode == 0, T.describe(cp)
        check_clean(loops, "fresh, on loop devices")
        T.run(["mount", "-t", "btrfs", loops[0], mnt])
        with T.REGISTRY.lock:
            T.REGISTRY.mounts.add(mnt)
        T.umount(mnt)
    finally:
        for dev in loops:
            T.losetup_detach(dev)
