# SPDX-License-Identifier: MIT
"""Filesystems spanning 2-6 devices, made by the kernel on loop devices.

For every data/metadata profile pair: reading with all devices (given in a
shuffled order), degraded reads with devices left out, damaged data / parity /
tree-block copies, and device assembly (foreign, duplicate and stale images).
The oracle is the kernel's read-only view of the pristine filesystem; damaged
and degraded sets are never mounted.  Damage goes to sparse copies in tmp.
"""

import concurrent.futures
import hashlib
import itertools
import json
import os
import pickle
import random
import re
import shutil
from pathlib import Path

import pytest

import multidev_lib as M
import ubtrfs_testlib as T

SEED = 20240611
P = M.Profile
PROFILES = [
    P("raid0-raid1", "raid0", "raid1", 2),
    P("raid1-raid1", "raid1", "raid1", 2),
    P("raid1c3", "raid1c3", "raid1c3", 3),
    P("raid1c4", "raid1c4", "raid1c4", 4),
    P("raid10", "raid10", "raid10", 4),
    P("raid5-raid1", "raid5", "raid1", 3),
    P("raid5", "raid5", "raid5", 4),
    P("raid6-raid1c3", "raid6", "raid1c3", 4),
    P("raid6", "raid6", "raid6", 5),
    P("single-dup", "single", "dup", 2),
    P("raid6-raid1c4", "raid6", "raid1c4", 6),
]
BY_NAME = {p.name: p for p in PROFILES}
WORKERS = 4
_counter = itertools.count()


# --------------------------------------------------------------------------
# fixtures

def _shared_pickle(key, build):
    """build(directory) -> picklable value, made once per run and shared by every
    pytest-xdist worker (ubtrfs_testlib.shared_build); the images it makes stay in
    `directory`, read-only to the tests (damage goes to copies under Ctx.work)."""
    def make(d):
        with open(d / "value.pickle", "wb") as f:
            pickle.dump(build(d), f)
    d, _ = T.shared_build("multidev-" + key, make)
    with open(d / "value.pickle", "rb") as f:
        return pickle.load(f)


class Ctx:
    def __init__(self, work):
        self.work = Path(work)
        self.work.mkdir(parents=True, exist_ok=True)

        def make_src(d):
            T.make_source_tree(d / "src", SEED, scale=0.3)
            M.add_compressible(d / "src", random.Random(SEED + 1))
            return d / "src"
        self.src = _shared_pickle("src", make_src)
        self.fs = {}
        self.foreign = {}
        self.stale = {}

    def tmpdir(self, what):
        d = self.work / "case" / ("%s-%d" % (what, next(_counter)))
        d.mkdir(parents=True)
        return d

    def mountpoint(self):
        return str(self.work / "mnt" / ("m%d" % next(_counter)))

    def get(self, name):
        if name not in self.fs:
            prof = BY_NAME[name]

            def build(d):
                fs = M.build_fs(d, prof, self.src, self.mountpoint())
                problems = M.self_check(fs)
                assert not problems, "test setup: chunk mapping disagrees with the images:\n" + \
                    "\n".join(problems[:20])
                zstd = [e for p in fs.files if p.startswith("/" + M.ZSTD_DIR + "/") for e in fs.extents[p]
                        if e[5] == 3]
                assert zstd, "test setup: nothing under /%s was stored zstd-compressed" % M.ZSTD_DIR
                return fs
            self.fs[name] = _shared_pickle("fs-" + name, build)
        return self.fs[name]

    def foreign_image(self, kind):
        if kind not in self.foreign:
            commits = 0 if kind == "low" else 60
            self.foreign[kind] = _shared_pickle(
                "foreign-" + kind, lambda d: M.build_foreign(d, "foreign-" + kind, self.mountpoint(), commits))
        return self.foreign[kind]


@pytest.fixture(scope="module")
def md(scratch, ubtrfs_bin):
    ctx = Ctx(Path(scratch) / "multidev")
    try:
        yield ctx
    finally:
        # Every loop device was detached with its own --forget; this drops
        # whatever registration of these images is left in the kernel.
        T.run(["btrfs", "device", "scan", "--forget"], check=False)
        if os.environ.get("UBTRFS_KEEP_IMAGES") != "1":
            T.rmtree(ctx.work)


@pytest.fixture
def casedir(md, request):
    d = md.tmpdir(re.sub(r"[^A-Za-z0-9_.-]", "_", request.node.name)[:80])
    try:
        yield d
    finally:
        if os.environ.get("UBTRFS_KEEP_IMAGES") != "1":
            shutil.rmtree(d, ignore_errors=True)


# --------------------------------------------------------------------------
# running ubtrfs

def ub(*args):
    """Run ubtrfs; a crash, an exit code outside 0/1/2 or a sanitizer report fails the test."""
    cp = T.ubtrfs(*args)
    if cp.returncode not in (0, 1, 2) or b"Sanitizer" in cp.stderr or b"runtime error:" in cp.stderr:
        raise AssertionError("ubtrfs crashed or misbehaved: %s" % T.describe(cp))
    return cp


def ls_all(devs):
    return ub("ls", "-R", "--json", *devs)


def cat(devs, path):
    return ub("cat", "--path", path, *devs)


def cat_many(devs, paths):
    with concurrent.futures.ThreadPoolExecutor(max_workers=WORKERS) as ex:
        return dict(zip(paths, ex.map(lambda p: cat(devs, p), paths)))


def err(cp):
    return cp.stderr.decode("utf-8", "replace")


def short(cp, n=1500):
    return "exit %d; stderr: %s" % (cp.returncode, err(cp)[-n:].strip() or "(empty)")


def names_missing(stderr, devid):
    return re.search(r"devid %d\b[^\n]*missing" % devid, stderr) is not None


def names_copy(stderr, devid, phys):
    """A line naming both the device and the physical address of a bad copy."""
    for line in stderr.splitlines():
        if re.search(r"devid %d\b" % devid, line) and T.mentions_number(line, phys):
            return True
    return False


def digest(data):
    return (len(data), hashlib.sha256(data).hexdigest())


def ls_problems(view, cp, partial_ok=False):
    """Differences between ls output and the kernel; with partial_ok, missing entries are fine
    (a failed listing) but every entry printed must be right."""
    try:
        got, dups = T.index_entries(T.parse_ls_json(cp.stdout))
    except AssertionError as e:
        return [str(e)]
    problems = ["listed twice: %r" % d for d in dups[:10]]
    expected = view.entries
    if partial_ok:
        expected = {p: e for p, e in expected.items() if p in got}
        problems += ["unexpected entry %r" % p for p in sorted(set(got) - set(view.entries), key=str)][:20]
    problems += T.compare_entries(expected, got)
    return problems


def check_exact(fs, devs, what, missing=(), view=None, files=None, ls=True, expect_quiet=False):
    """ls -R and cat of every file equal the kernel, exit 0, missing devids named."""
    view = view or fs.view
    files = files if files is not None else sorted(view.hashes)
    problems = []
    if ls:
        cp = ls_all(devs)
        if cp.returncode != 0:
            problems.append("ls -R --json: %s" % short(cp))
        problems += ["ls: " + p for p in ls_problems(view, cp)]
        for d in missing:
            if not names_missing(err(cp), d):
                problems.append("ls: stderr does not name missing devid %d: %s" % (d, short(cp)))
        if expect_quiet and cp.stderr.strip():
            problems.append("ls: warnings with every device present and intact: %s" % short(cp))
    results = cat_many(devs, files)
    for p, cp in results.items():
        if cp.returncode != 0:
            problems.append("cat %r: %s" % (p, short(cp)))
        elif digest(cp.stdout) != view.hashes[p]:
            problems.append("cat %r: exit 0 but %d bytes differing from the kernel's %d (sha256 %s vs %s)"
                            % (p, len(cp.stdout), view.hashes[p][0], digest(cp.stdout)[1][:16],
                               view.hashes[p][1][:16]))
    for d in missing:
        bad = [p for p, cp in results.items() if not names_missing(err(cp), d)]
        if bad:
            problems.append("cat: stderr does not name missing devid %d (e.g. %r)" % (d, bad[0]))
    fail(fs, what, devs, problems)
    return results


def fail(fs, what, devs, problems):
    if problems:
        raise AssertionError("%s on %s (%s)\ndevices: %s\n  %s" % (
            what, fs.profile.name, fs.recipe(), " ".join(devs),
            "\n  ".join(problems[:40] + (["... %d more" % (len(problems) - 40)] if len(problems) > 40 else []))))


def zero_or_right(fs, path, data):
    """With exit 1 the unreadable sectors come out as zeros; everything else must be right."""
    want = fs.content(path)
    if len(data) != len(want):
        return "%d bytes written, file has %d" % (len(data), len(want))
    ss = fs.sectorsize
    for off in range(0, len(want), ss):
        g, w = data[off:off + ss], want[off:off + ss]
        if g != w and g != bytes(len(g)):
            return "bytes at file offset %d are neither the file's nor zeros" % off
    return None


def check_partial(fs, devs, missing, what):
    """Devices gone beyond what some chunks survive: files that lost data fail with exit != 0
    and a message; everything that comes back with exit 0 is exact."""
    meta_ok = fs.metadata_readable(set(missing))
    problems = []
    cp = ls_all(devs)
    # ls only needs metadata: with all of it there the listing must be whole; exit 1 is
    # acceptable for "the filesystem has problems" (some data chunks are gone).
    if meta_ok and cp.returncode not in (0, 1):
        problems.append("ls: metadata is complete, yet %s" % short(cp))
    if cp.returncode == 0 or meta_ok:
        problems += ["ls: " + p for p in ls_problems(fs.view, cp)]
    else:
        problems += ["ls (failed listing): " + p for p in ls_problems(fs.view, cp, partial_ok=True)]
        if not any(names_missing(err(cp), d) for d in missing):
            problems.append("ls failed without naming the missing devid(s) %r: %s" % (missing, short(cp)))
    results = cat_many(devs, fs.files)
    nlost = 0
    for p, cp in results.items():
        readable = fs.data_readable(p, set(missing))
        nlost += not readable
        if cp.returncode == 0:
            if digest(cp.stdout) != fs.view.hashes[p]:
                problems.append("cat %r: exit 0 with wrong bytes (data on devids %s)"
                                % (p, sorted(fs.devids_of(p))))
            if not readable:
                problems.append("cat %r: exit 0 though its data lies on missing devid(s) %r"
                                % (p, missing))
            continue
        if meta_ok and readable:
            problems.append("cat %r: its data and all metadata are present, yet %s" % (p, short(cp, 300)))
        if not any(names_missing(err(cp), d) for d in missing) or "error" not in err(cp):
            problems.append("cat %r: failure without a clear error naming the missing devid: %s"
                            % (p, short(cp, 300)))
        if meta_ok and cp.returncode == 1:
            why = zero_or_right(fs, p, cp.stdout)
            if why:
                problems.append("cat %r (exit 1): %s" % (p, why))
    assert nlost, "test setup: leaving out %r should cost some file its data on %s" % (missing, fs)
    fail(fs, what, devs, problems)


# --------------------------------------------------------------------------
# (1) every device present, in shuffled order

@pytest.mark.parametrize("prof", [p.name for p in PROFILES])
def test_all_devices_shuffled(md, prof):
    fs = md.get(prof)
    devs = M.shuffled(fs.images, SEED + len(prof))
    if devs == fs.images:
        devs = devs[::-1]
    check_exact(fs, devs, "all devices, shuffled", expect_quiet=True)


# --------------------------------------------------------------------------
# (2) degraded

def _degraded_cases():
    out = []
    for p in PROFILES:
        n = p.ndev
        tol = M.tolerance(p)
        if tol == 0:
            sets = M.combos(n, 1)
        elif p.data == "raid6":
            sets = M.combos(n, 1) + M.combos(n, 2)
        elif p.data == "raid1c3":
            sets = M.combos(n, 1) + M.combos(n, 2)
        elif p.data == "raid1c4":
            sets = M.combos(n, 1) + [(1, 3), (2, 3, 4)]
        else:
            sets = M.combos(n, 1)
        out += [pytest.param(p.name, s, id="%s-without-%s" % (p.name, "-".join(map(str, s))))
                for s in sets]
    return out


@pytest.mark.parametrize("prof,missing", _degraded_cases())
def test_degraded(md, prof, missing):
    fs = md.get(prof)
    devs = M.shuffled([fs.image(d) for d in fs.devids if d not in missing], SEED + sum(missing))
    what = "degraded read without devid(s) %s" % (missing,)
    if len(missing) <= M.tolerance(fs.profile) or (fs.profile.data == "raid10" and len(missing) == 1):
        check_exact(fs, devs, what, missing=missing)
    else:
        check_partial(fs, devs, missing, what)


def _beyond_cases():
    out = []
    for p in PROFILES:
        if p.data in ("raid5", "raid6", "raid10"):
            out.append(pytest.param(p.name, id=p.name))
    return out


@pytest.mark.parametrize("prof", _beyond_cases())
def test_chunk_without_enough_devices(md, prof):
    """More devices gone than some chunk survives: a clear error naming the missing devids."""
    fs = md.get(prof)
    data = [c for c in fs.chunks if c.kind == "data"][0]
    if data.profile == "raid10":
        missing = tuple(sorted(d for d, _ in data.stripes[:data.sub_stripes]))
    else:
        missing = tuple(range(1, data.nparity + 2))
    devs = [fs.image(d) for d in fs.devids if d not in missing]
    check_partial(fs, devs, missing, "read without devids %s (beyond what %s survives)"
                  % (missing, data.profile))


# --------------------------------------------------------------------------
# (3) damage on copies of the images

def _damage_cases():
    out = []
    for p in PROFILES:
        kinds = ["data", "tree"]
        if p.data in ("raid5", "raid6"):
            kinds.append("p")
        if p.data == "raid6":
            kinds += ["q", "data+data", "data+p", "data+q", "missing-p+data", "missing-data+p",
                      "missing-data+q", "missing+tree"]
        out += [pytest.param(p.name, k, id="%s-%s" % (p.name, k)) for k in kinds]
    return out


def _garbage(rng, path, phys, n):
    with open(path, "rb") as f:
        f.seek(phys)
        old = f.read(n)
    while True:
        new = rng.randbytes(n)
        if new != old:
            return new


def _target(fs):
    """(path, chunk, logical) of a 4 KiB block of file data to damage; on RAID5/6 it lies in
    a full stripe whose every data stripe holds this same file."""
    c0 = [c for c in fs.chunks if c.kind == "data"][0]
    full_len = c0.ndata * c0.stripe_len
    path, foff, logical, nbytes = fs.big_plain_extent(3 * full_len if c0.nparity else 256 * 1024)
    c = M.chunk_of(fs.chunks, logical)
    if c.nparity:
        full_len = c.ndata * c.stripe_len
        rel = logical - c.logical
        start = c.logical + -(-rel // full_len) * full_len
        assert start + full_len <= logical + nbytes, "test setup: no whole full stripe in the extent"
        return path, c, start + 8192
    mid = logical + nbytes // 2
    return path, c, mid - mid % 4096


@pytest.mark.parametrize("prof,kind", _damage_cases())
def test_damage(md, casedir, prof, kind):
    fs = md.get(prof)
    imgs = M.copy_images(fs.images, str(casedir), prof)
    rng = random.Random("%s/%s" % (prof, kind))
    writes = []        # (devid, physical, length, why)
    missing = ()
    path, chunk, logical = _target(fs)
    row = chunk.raid56_row(logical) if chunk.nparity else None

    if kind in ("tree", "missing+tree"):
        leaf = fs.fs_leaf()
        devid, phys = fs.block_copies(leaf)[0]
        writes.append((devid, phys, fs.nodesize, "copy 1 of fs tree leaf %d" % leaf))
    if kind == "missing+tree":
        mchunk = M.chunk_of(fs.chunks, leaf)
        if mchunk.nparity:
            missing = (mchunk.raid56_row(leaf)["p"][0],)
        else:
            missing = (fs.block_copies(leaf)[1][0],)
    if kind in ("data", "data+data", "data+p", "data+q", "missing-p+data"):
        devid, phys = chunk.copies(logical)[0]
        writes.append((devid, phys, 4096, "data copy 1 of logical %d (%s)" % (logical, path)))
    if kind == "data+data":
        d2, ph2 = row["data"][1]
        writes.append((d2, ph2, 4096, "data stripe 1 of the same row, logical %d" % row["logicals"][1]))
    if kind in ("p", "data+p"):
        writes.append((row["p"][0], row["p"][1], 4096, "P of the row of logical %d" % logical))
    if kind in ("q", "data+q"):
        writes.append((row["q"][0], row["q"][1], 4096, "Q of the row of logical %d" % logical))
    if kind == "missing-p+data":
        missing = (row["p"][0],)
    if kind in ("missing-data+p", "missing-data+q"):
        missing = (row["data"][row["index"]][0],)
        pq = row["p"] if kind == "missing-data+p" else row["q"]
        writes.append((pq[0], pq[1], 4096, "%s of the row of logical %d" % (kind[-1].upper(), logical)))
    assert len({w[0] for w in writes} | set(missing)) == len(writes) + len(missing), \
        "test setup: two damages on one device %r %r" % (writes, missing)
    for devid, phys, n, _ in writes:
        T.overwrite(imgs[devid - 1], phys, _garbage(rng, imgs[devid - 1], phys, n))
    devs = M.shuffled([imgs[d - 1] for d in fs.devids if d not in missing], SEED + len(kind))
    what = "damage %s: %s" % (kind, "; ".join("%s on devid %d at physical %d" % (w, d, ph)
                                                for d, ph, n, w in writes))
    if missing:
        what += "; devid %d left out" % missing[0]

    if kind == "data" and chunk.profile in ("single", "raid0"):
        # No other copy: the damaged block is reported, the rest of the file is right.
        _check_lost_block(fs, devs, imgs, what, path, logical)
        return
    results = check_exact(fs, devs, what, missing=missing)
    problems = []
    if kind in ("data", "data+data", "data+p", "data+q"):
        e = err(results[path])
        for devid, phys, n, why in writes:
            if why.startswith("data") and not names_copy(e, devid, phys):
                problems.append("cat %r: stderr does not name the bad copy (devid %d physical %d): %s"
                                % (path, devid, phys, short(results[path])))
    if kind in ("tree", "missing+tree"):
        cp = ls_all(devs)
        devid, phys, _, _ = writes[0]
        if not names_copy(err(cp), devid, phys) or not T.mentions_number(err(cp), fs.fs_leaf()):
            problems.append("ls: stderr does not name the bad tree block copy (logical %d devid %d "
                            "physical %d): %s" % (fs.fs_leaf(), devid, phys, short(cp)))
    fail(fs, what, devs, problems)


def _check_lost_block(fs, devs, imgs, what, path, logical):
    files = [p for p in fs.files if p != path]
    check_exact(fs, devs, what + " (other files)", files=files)
    cp = cat(devs, path)
    foff = fs.file_offset_of(path, logical)
    problems = []
    if cp.returncode != 1:
        problems.append("cat %r: expected exit 1 for an unrecoverable block, %s" % (path, short(cp)))
    if not (T.mentions_number(err(cp), foff) and T.mentions_number(err(cp), logical)):
        problems.append("cat %r: stderr should name file offset %d and logical %d: %s"
                        % (path, foff, logical, short(cp)))
    want = bytearray(fs.content(path))
    want[foff:foff + 4096] = bytes(4096)
    if cp.stdout != bytes(want):
        problems.append("cat %r: output is not the file with the lost block zeroed (%s)"
                        % (path, zero_or_right(fs, path, cp.stdout) or "other bytes zeroed/wrong"))
    fail(fs, what, devs, problems)


# --------------------------------------------------------------------------
# (4) device assembly

def _sample(files, extra=()):
    by_size = sorted(files, key=lambda p: -len(p))
    out = set(files[::4]) | set(extra)
    return sorted(out | set(by_size[:3]))


def _assembly_cases():
    kinds = ["foreign-last", "foreign-newer-first", "twice", "stale-instead", "stale-and-current"]
    return [pytest.param(p.name, k, id="%s-%s" % (p.name, k)) for p in PROFILES for k in kinds]


def _stale_setup(md, fs):
    """Copies of the images where devid 1's image is kept from before a later commit."""
    if fs.profile.name in md.stale:
        return md.stale[fs.profile.name]

    def build(d):
        imgs = M.copy_images(fs.images, str(d), "cur")
        stale = str(d / "stale.0.img")
        T.copy_sparse(imgs[0], stale)
        rng = random.Random(SEED + 7)
        with T.mounted(imgs, md.mountpoint(), readonly=False) as m:
            with open(os.path.join(m, "after_stale.bin"), "wb") as f:
                f.write(rng.randbytes(300000))
            with open(os.path.join(m, "links", "a"), "ab") as f:
                f.write(b"appended after the copy was taken\n" * 100)
            os.unlink(os.path.join(m, "big_link_at_top"))
            T.run(["sync"])
        view = T.kernel_view(imgs, md.mountpoint())
        gen_new = M.super_info(imgs[0])["generation"]
        gen_old = M.super_info(stale)["generation"]
        assert gen_new > gen_old, "test setup: generation did not move (%d, %d)" % (gen_old, gen_new)
        return (imgs, stale, view)
    md.stale[fs.profile.name] = _shared_pickle("stale-" + fs.profile.name, build)
    return md.stale[fs.profile.name]


@pytest.mark.parametrize("prof,kind", _assembly_cases())
def test_assembly(md, prof, kind):
    fs = md.get(prof)
    devs = M.shuffled(fs.images, SEED + 3)
    view = fs.view
    files = _sample(fs.files)
    problems = []
    if kind.startswith("foreign"):
        img, sup = md.foreign_image("low" if kind == "foreign-last" else "high")
        if kind == "foreign-last":
            assert sup["generation"] < fs.generation, "test setup: foreign fs should be older here"
            devs = devs + [img]
        else:
            assert sup["generation"] > fs.generation, "test setup: foreign fs not newer"
            devs = [img] + devs
        what = "device list with %s (fsid %s, generation %d) of another filesystem" % (
            img, sup["fsid"], sup["generation"])
        named = img
    elif kind == "twice":
        devs = devs + [fs.images[0]]
        what = "device list naming %s twice" % fs.images[0]
        named = fs.images[0]
    else:
        imgs, stale, view = _stale_setup(md, fs)
        files = _sample(sorted(view.hashes), extra=["/after_stale.bin", "/links/a", "/links/c"])
        if kind == "stale-instead":
            devs = [stale] + [i for i in M.shuffled(imgs, SEED) if i != imgs[0]]
        else:
            devs = [stale] + M.shuffled(imgs, SEED)
        what = "device list with stale copy %s of devid 1 (%s)" % (
            stale, "instead of the current one" if kind == "stale-instead" else "besides the current one")
        named = stale
        if kind == "stale-instead" and M.tolerance(fs.profile) == 0:
            _check_stale_unusable(fs, devs, view, files, what, stale)
            return
    # a copy one commit behind is what a crash between a commit's superblock writes leaves: the reader
    # uses it (its blocks fail the generation and checksum checks, the other copies serve); older is stale
    behind = not kind.startswith("foreign") and kind != "twice" and \
        M.super_info(stale)["generation"] + 1 == M.super_info(imgs[1])["generation"]
    missing = (1,) if kind == "stale-instead" and not behind else ()
    results = check_exact(fs, devs, what, missing=missing, view=view, files=files)
    cp = ls_all(devs)
    if kind == "stale-instead" and behind and "devid 1 is one commit behind" not in err(cp):
        problems.append("ls: stderr does not call devid 1 one commit behind: %s" % short(cp))
    if named not in err(cp):
        problems.append("ls: stderr does not name %s: %s" % (named, short(cp)))
    if kind == "stale-instead" or kind == "stale-and-current":
        if "stale" not in err(cp):
            problems.append("ls: stderr does not call %s stale: %s" % (named, short(cp)))
    some = results[files[0]]
    if named not in err(some):
        problems.append("cat %r: stderr does not name %s: %s" % (files[0], named, short(some)))
    fail(fs, what, devs, problems)


def _check_stale_unusable(fs, devs, view, files, what, stale):
    """No redundancy: with the stale image refused the filesystem is missing devid 1."""
    problems = []
    cp = ls_all(devs)
    if stale not in err(cp):
        problems.append("ls: stderr does not name %s: %s" % (stale, short(cp)))
    if cp.returncode == 0:
        problems += ["ls: " + p for p in ls_problems(view, cp)]
    else:
        problems += ["ls (failed listing): " + p for p in ls_problems(view, cp, partial_ok=True)]
    for p, c in cat_many(devs, files).items():
        if c.returncode == 0 and digest(c.stdout) != view.hashes[p]:
            problems.append("cat %r: exit 0 with bytes other than the current filesystem's" % p)
        if c.returncode != 0 and "error" not in err(c):
            problems.append("cat %r: failed without an error message: %s" % (p, short(c)))
    fail(fs, what, devs, problems)


# --------------------------------------------------------------------------
# dump-tree / dump-super across the devices

@pytest.mark.parametrize("prof", [p.name for p in PROFILES])
@pytest.mark.parametrize("tree", ["3", "4", "5"])
def test_dump_tree_keys(md, prof, tree):
    """Chunk, device and fs tree keys equal btrfs-progs', with all devices and with the last
    one left out where the profile allows it."""
    fs = md.get(prof)
    want = T.tree_keys(M.dump_tree(fs.images, tree))
    sets = [()]
    if M.tolerance(fs.profile) >= 1:
        sets.append((fs.devids[-1],))
    problems = []
    for missing in sets:
        devs = M.shuffled([fs.image(d) for d in fs.devids if d not in missing], SEED + int(tree))
        cp = ub("dump-tree", "-t", tree, *devs)
        got = T.tree_keys(cp.stdout.decode("utf-8", "replace"))
        label = "dump-tree -t %s without %r" % (tree, missing) if missing else "dump-tree -t %s" % tree
        if cp.returncode != 0:
            problems.append("%s: %s" % (label, short(cp)))
        if got != want:
            problems.append("%s: %d keys missing, %d unexpected (e.g. %r / %r)" % (
                label, len(want - got), len(got - want), sorted(want - got)[:3], sorted(got - want)[:3]))
        for d in missing:
            if not names_missing(err(cp), d):
                problems.append("%s: stderr does not name missing devid %d: %s" % (label, d, short(cp)))
    fail(fs, "dump-tree keys against btrfs-progs", fs.images, problems)


@pytest.mark.parametrize("prof", [p.name for p in PROFILES])
def test_dump_super_each_device(md, prof):
    fs = md.get(prof)
    problems = []
    for img, sup in zip(fs.images, fs.supers):
        cp = ub("dump-super", img)
        got = T.parse_dump_super(cp.stdout.decode("utf-8", "replace"))
        if cp.returncode != 0:
            problems.append("dump-super %s: %s" % (img, short(cp)))
        for key, want in (("dev_item.devid", str(sup["devid"])), ("fsid", sup["fsid"]),
                          ("num_devices", str(len(fs.images)))):
            if got.get(key) != want:
                problems.append("dump-super %s: %s is %r, btrfs-progs says %r" % (img, key, got.get(key), want))
    fail(fs, "dump-super of each device", fs.images, problems)


# --------------------------------------------------------------------------
# filesystem show: the devices by devid, against what each image's superblock says (btrfs-progs)

@pytest.mark.parametrize("prof", ["raid1c3", "raid6-raid1c3"])
def test_filesystem_show(md, prof):
    fs = md.get(prof)
    supers = [M.super_info(i) for i in fs.images]
    cp = ub("filesystem", "show", "--json", *M.shuffled(fs.images, 3))
    assert cp.returncode == 0, short(cp)
    out = json.loads(cp.stdout)
    assert out["uuid"] == fs.fsid
    assert out["num_devices"] == len(fs.images)
    assert [d["devid"] for d in out["devices"]] == [s["devid"] for s in supers]
    for d, img in zip(out["devices"], fs.images):
        assert not d["missing"] and d["path"] == img
    # one device left out: named missing, exit 1, the rest still listed with their paths
    gone = fs.devids[-1]
    rest = [i for i in fs.images if i != fs.image(gone)]
    cp = ub("filesystem", "show", "--json", *rest)
    assert cp.returncode == 1, short(cp)
    out = json.loads(cp.stdout)
    by = {d["devid"]: d for d in out["devices"]}
    assert sorted(by) == fs.devids
    assert by[gone]["missing"] and by[gone]["path"] is None
    assert all(not by[i]["missing"] for i in fs.devids if i != gone)
    assert names_missing(cp.stderr.decode(), gone), short(cp)
