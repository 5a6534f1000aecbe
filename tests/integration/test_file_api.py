# SPDX-License-Identifier: MIT
"""The file API (include/ubtrfs/fswrite.h) end to end, judged by btrfs-progs and the kernel.

tests/tools/fileapi_driver.c applies a seeded random sequence of create, mkdir, mknod, symlink, link,
unlink, rmdir, rename (over existing names, RENAME_EXCHANGE, RENAME_NOREPLACE), write (inline and
regular extents, overwrites that split and trim extents), truncate, setxattr / removexattr and chmod to
an image made by mkfs.btrfs, committing every few operations, checks every call's result (and every
file's contents read back through the transaction) against its model, and writes the model as JSON.
Then:
  - `btrfs check --readonly` is clean (nlink, nbytes, isize, dir isize, dir index, refs, csums, extent
    back references, free space tree);
  - the kernel's read-only mount shows exactly the model: every path, type, permission bits, size,
    sha256 of contents, link count, inode number, symlink target, device numbers, xattrs;
  - `ubtrfs ls --json` lists the same paths and types.

Budget: about a minute under ASan for the CI slice; UBTRFS_LONG_TESTS=1 runs more seeds and longer
sequences. UBTRFS_FILEAPI_SEED / UBTRFS_FILEAPI_OPS / UBTRFS_FILEAPI_EVERY override the CI slice.
"""

import json
import os
import re
from pathlib import Path

import pytest

import ubtrfs_testlib as T

MiB = T.MiB
LONG = T.LONG_TESTS


def driver_path():
    ub = Path(os.environ.get("UBTRFS", str(T.REPO / "build" / "ubtrfs"))).resolve()
    return ub.parent / "tests" / "tools" / "fileapi_driver"


@pytest.fixture(scope="module")
def driver():
    path = driver_path()
    build = path.parents[2]
    if build.parent != T.REPO:
        pytest.skip("binary under test %s is not in a build directory of this tree" % build)
    san = "1" if build.name == "build-san" else "0"
    T.run(["make", "-C", T.REPO, "SAN=" + san, str(path.relative_to(T.REPO))], timeout=900)
    return path


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
    cp = T.run([str(driver), str(seed), str(nops), str(every), str(model), *[str(i) for i in imgs]],
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
    CASES += [
        ("dup-4k-long", "dup", "single", 1, 4096, 11, 5000, 37),
        ("raid5-16k-long", "raid5", "raid5", 3, 16384, 12, 3000, 50),
        ("raid6-4k-long", "raid6", "raid6", 4, 4096, 13, 3000, 23),
        ("raid1c3-64k-long", "raid1c3", "raid1c3", 3, 65536, 14, 3000, 100),
    ]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_random_sequence(driver, casedir, ubtrfs_bin, case):
    name, meta, data, ndev, nodesize, seed, nops, every = case
    seed = int(os.environ.get("UBTRFS_FILEAPI_SEED", seed))
    nops = int(os.environ.get("UBTRFS_FILEAPI_OPS", nops))
    every = int(os.environ.get("UBTRFS_FILEAPI_EVERY", every))
    imgs = make_images(casedir, ndev)
    try:
        T.run(["mkfs.btrfs", "-f", "-q", "-K", "-m", meta, "-d", data, "-n", str(nodesize), *map(str, imgs)])
        model = run_driver(driver, seed, nops, every, casedir / "model.json", imgs)
        assert len(model) > 5, "the sequence built almost nothing: %r" % model
        progs_check(imgs)
        kernel_matches(imgs, casedir / "mnt", model)
        ubtrfs_matches(imgs, model)
    finally:
        if ndev > 1:
            T.run(["btrfs", "device", "scan", "--forget"], check=False)
