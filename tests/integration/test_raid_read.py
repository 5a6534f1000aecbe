# SPDX-License-Identifier: MIT
"""Large reads of striped and parity arrays, byte for byte against the source.

The kernel writes a file spanning many full stripes (its first 100 KiB
separately, so that the reads of the big extent after them start and end inside
full stripes), on RAID5 over 4, RAID6 over 6 and RAID10 over 4 loop devices. `ubtrfs cat` reads it with every
device, with one (RAID6: two) left out, and with a 64 KiB data unit in the
middle of the extent overwritten (also with a device left out on RAID6): the
bytes must be the source's, and the bad unit must be reported by device and
physical address. The chunk arithmetic comes from btrfs-progs' chunk tree dump
(multidev_lib), checked against the images before use.
"""

import os
import pickle
import random
from pathlib import Path

import pytest

import multidev_lib as M
import ubtrfs_testlib as T

SEED = 20261204
UNIT = 64 * 1024
BIG = "/big"
P = M.Profile
PROFILES = {p.name: p for p in (P("raid5x4", "raid5", "raid1", 4), P("raid6x6", "raid6", "raid1c3", 6),
                                P("raid10x4", "raid10", "raid1", 4))}


HEAD = 100 * 1024 + 1234
CAT_CHUNK = 4 * 1024 * 1024


def _make_source(d):
    rng = random.Random(SEED)
    src = d / "src"
    src.mkdir()
    (src / "big").write_bytes(rng.randbytes(6 * 1024 * 1024 + 12345))
    (src / "tail").write_bytes(rng.randbytes(3 * UNIT + 7))
    return src


def _build(d, prof, src):
    """The big file's first HEAD bytes reach the disk on their own, so that the
    rest, one extent allocated right after them, starts inside a full stripe."""
    images = M.sparse_images(d, prof.name, prof.ndev)
    mnt = str(d / "mnt")
    with M.attached(images) as loops:
        T.run(["mkfs.btrfs", "-f", "-q", "-d", prof.data, "-m", prof.meta, *loops])
        with M.mount_loops(loops, mnt):
            data = (src / "big").read_bytes()
            with open(os.path.join(mnt, "big"), "wb") as f:
                for part in (data[:HEAD], data[HEAD:]):
                    f.write(part)
                    f.flush()
                    os.fsync(f.fileno())
            (Path(mnt) / "tail").write_bytes((src / "tail").read_bytes())
            T.run(["sync"])
    return M.MultiFs(prof, images, src, T.kernel_view(images, mnt + "-ro"))


def _get(name):
    def make(d):
        src = _make_source(d)
        fs = _build(d, PROFILES[name], src)
        problems = M.self_check(fs)
        assert not problems, "test setup: chunk mapping disagrees with the images:\n" + "\n".join(problems[:20])
        with open(d / "value.pickle", "wb") as f:
            pickle.dump(fs, f)
    d, _ = T.shared_build("raidread-" + name, make)
    with open(d / "value.pickle", "rb") as f:
        return pickle.load(f)


@pytest.fixture(scope="module", autouse=True)
def _forget(scratch, ubtrfs_bin):
    yield
    T.run(["btrfs", "device", "scan", "--forget"], check=False)


def _cat(devs, path):
    cp = T.ubtrfs("cat", "--path", path, *devs)
    if cp.returncode not in (0, 1, 2) or b"Sanitizer" in cp.stderr or b"runtime error:" in cp.stderr:
        raise AssertionError("ubtrfs crashed or misbehaved: %s" % T.describe(cp))
    return cp


def _big_extent(fs):
    """(chunk, logical, length) of the big file's one data extent."""
    ext = [e for e in fs.extents[BIG] if e[1]]
    assert len(ext) >= 1 and not any(e[5] for e in ext), "test setup: %s extents %r" % (BIG, ext)
    foff, bytenr, disk_len, eoff, nbytes, comp = max(ext, key=lambda e: e[4])
    return M.chunk_of(fs.chunks, bytenr + eoff), bytenr + eoff, nbytes


def _check(fs, devs, what, expect_clean=True):
    problems = []
    for path in fs.files:
        cp = _cat(devs, path)
        want = fs.content(path)
        if cp.returncode != 0 or cp.stdout != want:
            problems.append("%s: cat %s: exit %d, %d bytes (want %d), bytes %s; stderr: %s"
                            % (what, path, cp.returncode, len(cp.stdout), len(want),
                               "right" if cp.stdout == want else "differ",
                               cp.stderr.decode("utf-8", "replace")[-1500:]))
        elif expect_clean and b"checksum" in cp.stderr:
            problems.append("%s: cat %s: a checksum complaint on intact images: %s"
                            % (what, path, cp.stderr.decode("utf-8", "replace")[-1500:]))
    return problems


@pytest.mark.parametrize("prof", sorted(PROFILES))
def test_spans_full_stripes(prof):
    fs = _get(prof)
    chunk, logical, n = _big_extent(fs)
    full = chunk.stripe_len * (chunk.ndata if chunk.nparity else len(chunk.stripes) // chunk.sub_stripes)
    # cat reads 4 MiB of the file at a time: the extent's pieces start and end inside full stripes
    cuts = [logical - chunk.logical + c for c in (CAT_CHUNK - HEAD, n)]
    assert all(c % full for c in cuts) and n > 16 * full, \
        "test setup: %s extent at chunk offset %d+%d: reads of it end on a %d-byte full stripe boundary" \
        % (BIG, logical - chunk.logical, n, full)
    devs = M.shuffled(fs.images, SEED)
    problems = _check(fs, devs, "%s, every device" % prof)
    for missing in {"raid5x4": [(1,), (4,)], "raid6x6": [(1, 2), (3, 6)], "raid10x4": [(2,)]}[prof]:
        left = [fs.image(d) for d in fs.devids if d not in missing]
        problems += _check(fs, left, "%s, devid %s left out" % (prof, "+".join(map(str, missing))), False)
    assert not problems, "\n".join(problems)


def _bad_unit(fs, chunk, logical, n):
    """(devid, physical, logical) of the 64 KiB data unit nearest the middle of the extent, whole inside it."""
    mid = logical + n // 2
    unit_start = mid - (mid - chunk.logical) % chunk.stripe_len
    assert logical <= unit_start and unit_start + chunk.stripe_len <= logical + n
    devid, phys = chunk.copies(unit_start)[0]
    return devid, phys, unit_start


@pytest.mark.parametrize("prof,leave_out", [("raid5x4", False), ("raid6x6", False), ("raid6x6", True),
                                            ("raid10x4", False)])
def test_bad_unit_in_a_large_span(prof, leave_out, tmp_path):
    fs = _get(prof)
    chunk, logical, n = _big_extent(fs)
    devid, phys, bad_logical = _bad_unit(fs, chunk, logical, n)
    imgs = M.copy_images(fs.images, str(tmp_path), prof)
    rng = random.Random("%s/%s" % (prof, leave_out))
    T.overwrite(imgs[devid - 1], phys, rng.randbytes(chunk.stripe_len))
    what = "%s: 64 KiB data unit at logical %d (devid %d physical %d) overwritten" % (prof, bad_logical, devid, phys)
    missing = ()
    if leave_out:
        # a device of the same full stripe that holds neither the bad unit nor P
        row = chunk.raid56_row(bad_logical)
        missing = (next(d for d, _ in row["data"] if d != devid),)
        what += "; devid %d left out" % missing[0]
    devs = [imgs[d - 1] for d in fs.devids if d not in missing]
    cp = _cat(devs, BIG)
    want = fs.content(BIG)
    assert cp.returncode == 0 and cp.stdout == want, "%s: cat %s: exit %d, %s; stderr: %s" % (
        what, BIG, cp.returncode, "bytes differ" if cp.stdout != want else "bytes right",
        cp.stderr.decode("utf-8", "replace")[-1500:])
    e = cp.stderr.decode("utf-8", "replace")
    named = any(("devid %d" % devid) in line and T.mentions_number(line, phys) for line in e.splitlines())
    assert named and "checksum" in e, "%s: stderr does not report the bad unit: %s" % (what, e[-1500:])
