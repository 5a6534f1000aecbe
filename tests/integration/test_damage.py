# SPDX-License-Identifier: MIT
"""Damaged images: DUP metadata copies, data sectors, superblocks, non-btrfs input.

The base image is `mkfs.btrfs --rootdir` with defaults on a 256 MiB file: DUP
metadata, single data, so the superblock mirror at 64 MiB exists.  Every test
damages its own sparse copy; the oracle is the kernel's view of the pristine
image (damaged copies are never mounted).
"""

import concurrent.futures
import itertools
import os
import random
import re

import pytest

import ubtrfs_testlib as T

_counter = itertools.count()


@pytest.fixture(scope="module")
def base(factory):
    image = factory.image("damage-base")
    view = factory.view(image)
    img = image.devices[0]
    dump = T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "5", img]).stdout.decode(
        "utf-8", "replace")
    sup = T.parse_dump_super(T.run(["btrfs", "inspect-internal", "dump-super", img]).stdout.decode())
    return {"image": image, "view": view, "img": img, "dump": dump,
            "nodesize": int(sup["nodesize"]), "sectorsize": int(sup["sectorsize"]),
            "source": factory.source("damage")}


@pytest.fixture
def copy(factory, base):
    path = factory.fresh_path("damaged-%d.img" % next(_counter))
    T.copy_sparse(base["img"], path)
    yield str(path)
    os.unlink(path)


def _ls_all(dev):
    cp = T.ubtrfs("ls", "-R", "--json", dev)
    return cp


def _assert_ls_exact(base, dev, allowed_rc=(0,)):
    cp = _ls_all(dev)
    assert cp.returncode in allowed_rc, T.describe(cp)
    got, dups = T.index_entries(T.parse_ls_json(cp.stdout))
    assert not dups
    problems = T.compare_entries(base["view"].entries, got)
    assert not problems, "\n".join(problems)
    return cp


def _assert_cat_exact(base, dev, paths, allowed_rc=(0,)):
    def one(p):
        rc, size, digest, cp = T.cat_hash([dev], p)
        if rc not in allowed_rc:
            return "%r: %s" % (p, T.describe(cp))
        if (size, digest) != base["view"].hashes[p]:
            return "%r: content differs" % p
        return None
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as ex:
        problems = [r for r in ex.map(one, paths) if r]
    assert not problems, "\n".join(problems[:20])


def _sample_files(base, n=150):
    files = sorted(base["view"].hashes)
    return files if T.LONG_TESTS or len(files) <= n else files[::max(1, len(files) // n)]


def _fs_blocks(base):
    """(root bytenr, [leaf bytenrs]) of the top-level fs tree."""
    m = re.search(r"^(?:node|leaf) (\d+) ", base["dump"], re.M)
    leaves = T.leaves_of(base["dump"])
    assert len(leaves) >= 3, "damage image should have a multi-leaf fs tree"
    return int(m.group(1)), leaves


def _garble(rng, kind, block):
    if kind == "random":
        return rng.randbytes(len(block))
    if kind == "zeros":
        return bytes(len(block))
    b = bytearray(block)
    pos = rng.randrange(64, len(b))  # past the checksum field: header or items
    b[pos] ^= 1 << rng.randrange(8)
    return bytes(b)


def _read_at(path, offset, n):
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(n)


@pytest.mark.parametrize("target", ["leaf", "root"])
@pytest.mark.parametrize("kind", ["random", "zeros", "bitflip"])
def test_one_dup_copy_bad_reads_exact(ubtrfs_bin, base, copy, target, kind):
    root, leaves = _fs_blocks(base)
    logical = root if target == "root" else leaves[len(leaves) // 2][0]
    mirrors = T.map_logical(copy, logical, base["nodesize"])
    assert len(mirrors) == 2, mirrors
    phys = dict(mirrors)[1]
    rng = random.Random(logical)
    T.overwrite(copy, phys, _garble(rng, kind, _read_at(copy, phys, base["nodesize"])))
    _assert_ls_exact(base, copy)
    _assert_cat_exact(base, copy, _sample_files(base))


def _inodes_in_leaf(leaf_keys):
    return {int(k.split()[0]) for k in leaf_keys if k.split()[1] == "INODE_ITEM"}


def test_both_dup_copies_bad_is_reported(ubtrfs_bin, base, copy):
    root, leaves = _fs_blocks(base)
    by_ino = {e["ino"]: p for p, e in base["view"].entries.items() if e["type"] == "file"}
    # a leaf in the middle holding at least one regular file's inode item
    order = sorted(range(len(leaves)), key=lambda i: abs(i - len(leaves) // 2))
    pick = next(i for i in order if _inodes_in_leaf(leaves[i][2]) & set(by_ino))
    logical = leaves[pick][0]
    victim = by_ino[sorted(_inodes_in_leaf(leaves[pick][2]) & set(by_ino))[0]]
    rng = random.Random(7)
    for _, phys in T.map_logical(copy, logical, base["nodesize"]):
        T.overwrite(copy, phys, rng.randbytes(base["nodesize"]))

    cp = _ls_all(copy)
    err = cp.stderr.decode("utf-8", "replace")
    assert cp.returncode != 0, "ls -R over an unreadable leaf succeeded: " + T.describe(cp)
    assert T.mentions_number(err, logical), "stderr does not name block %d: %s" % (logical, err)

    cp = T.ubtrfs("cat", "--path", victim, copy)
    err = cp.stderr.decode("utf-8", "replace")
    assert cp.returncode != 0, "cat of %s (inode in the bad leaf) succeeded" % victim
    assert T.mentions_number(err, logical), "stderr does not name block %d: %s" % (logical, err)


def _pick_data_victim(base):
    """A file of random bytes stored in one uncompressed extent from file offset 0."""
    view = base["view"]
    for p in sorted(view.hashes):
        e = view.entries[p]
        if not (p.startswith("/sizes/") and e["size"] >= 65536 and "random" in p):
            continue
        ext = T.file_extents(base["dump"], e["ino"])
        if ext and ext[0][0] == 0 and ext[0][5] == 0 and ext[0][1] != 0 and ext[0][4] >= 4 * 4096:
            return p, e, ext[0]
    pytest.fail("no suitable file for data damage in the damage image")


def test_bad_data_sector(ubtrfs_bin, base, copy):
    path, entry, (foff, disk_bytenr, _, ext_off, _, _) = _pick_data_victim(base)
    ss = base["sectorsize"]
    bad_off = 3 * ss
    logical = disk_bytenr + ext_off + bad_off
    mirrors = T.map_logical(copy, logical, ss)
    assert len(mirrors) == 1, mirrors
    T.overwrite(copy, mirrors[0][1], random.Random(3).randbytes(ss))

    original = open(os.fsencode(str(base["source"])) + os.fsencode(path), "rb").read()
    assert len(original) == entry["size"]
    cp = T.ubtrfs("cat", "--path", path, copy)
    err = cp.stderr.decode("utf-8", "replace")
    assert cp.returncode == 1, T.describe(cp)
    assert len(cp.stdout) == len(original), "output length %d, file size %d" % (len(cp.stdout), len(original))
    assert cp.stdout[bad_off:bad_off + ss] == bytes(ss), "unreadable sector not written as zeros"
    assert cp.stdout[:bad_off] == original[:bad_off], "bytes before the bad sector differ"
    assert cp.stdout[bad_off + ss:] == original[bad_off + ss:], "bytes after the bad sector differ"
    assert T.mentions_number(err, bad_off), "stderr does not name file offset %d: %s" % (bad_off, err)
    assert T.mentions_number(err, logical), "stderr does not name logical %d: %s" % (logical, err)

    # metadata is untouched: the listing is exact and every other file reads fine
    _assert_ls_exact(base, copy)
    _assert_cat_exact(base, copy, [p for p in _sample_files(base) if p != path])


SUPER = 65536


@pytest.mark.parametrize("how", ["zero-magic", "label-byte", "zero-all", "csum-field"])
def test_bad_primary_superblock_uses_backup(ubtrfs_bin, base, copy, how):
    assert os.path.getsize(copy) > (64 << 20) + 4096
    if how == "zero-magic":
        T.overwrite(copy, SUPER + 0x40, bytes(8))
    elif how == "label-byte":
        b = _read_at(copy, SUPER + 0x12b, 1)
        T.overwrite(copy, SUPER + 0x12b, bytes([b[0] ^ 0x5a]))
    elif how == "csum-field":
        b = _read_at(copy, SUPER, 1)
        T.overwrite(copy, SUPER, bytes([b[0] ^ 0xff]))
    else:
        T.overwrite(copy, SUPER, bytes(4096))
    # Exit 1 ("problem found") or 0 are both honest here; the data must be exact.
    cp = _assert_ls_exact(base, copy, allowed_rc=(0, 1))
    err = cp.stderr.decode("utf-8", "replace")
    assert re.search(r"super", err, re.I), "stderr does not say the primary superblock is bad: %r" % err
    _assert_cat_exact(base, copy, _sample_files(base, 30), allowed_rc=(0, 1))


def test_all_superblocks_bad_is_fatal(ubtrfs_bin, base, copy):
    for off in (SUPER, 64 << 20):
        T.overwrite(copy, off + 0x40, bytes(8))
    cp = _ls_all(copy)
    assert cp.returncode == 2, T.describe(cp)
    assert cp.stderr.strip()


def _not_btrfs(tmp_path, kind, size):
    p = tmp_path / ("%s-%d.img" % (kind, size))
    with open(p, "wb") as f:
        if kind == "zero":
            f.truncate(size)
        else:
            f.write(random.Random(size).randbytes(size))
    return str(p)


@pytest.mark.parametrize("kind,size", [("zero", 1 << 20), ("zero", 300 << 20), ("random", 1 << 20),
                                       ("random", 100), ("zero", 0)])
@pytest.mark.parametrize("cmd", ["ls", "cat", "dump-super", "dump-tree"])
def test_not_btrfs(ubtrfs_bin, tmp_path, kind, size, cmd):
    dev = _not_btrfs(tmp_path, kind, size)
    args = {"ls": ["-R", "--json"], "cat": ["--path", "/x"], "dump-super": [], "dump-tree": []}[cmd]
    cp = T.ubtrfs(cmd, *args, dev)
    err = cp.stderr.decode("utf-8", "replace")
    assert cp.returncode == 2, T.describe(cp)
    assert re.search(r"btrfs|superblock|magic", err, re.I), "unclear message: %r" % err
    assert "Traceback" not in err and "Sanitizer" not in err


# ---- data damage on redundant profiles and on compressed extents (kernel-made images)

@pytest.fixture
def image_copy(factory):
    made = []

    def make(name):
        image = factory.image(name)
        devs = []
        for i, d in enumerate(image.devices):
            p = factory.fresh_path("copy-%d-%s.%d.img" % (next(_counter), name, i))
            T.copy_sparse(d, p)
            devs.append(str(p))
            made.append(p)
        return image, devs
    yield make
    for p in made:
        os.unlink(p)


def _progs_fs_tree(devices):
    return T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "5", *devices]).stdout.decode(
        "utf-8", "replace")


def _random_file_victim(factory, image, compressed):
    """(path, bytes, extent) of a random-content file of the main tree in `image`.

    compressed=False: first extent uncompressed, from file offset 0, >= 4 sectors.
    compressed=True: a compressed extent that is not the file's first.
    """
    view = factory.view(image)
    dump = _progs_fs_tree(image.devices)
    src = os.fsencode(str(factory.source("main")))
    for p in sorted(view.hashes):
        e = view.entries[p]
        kind = os.path.basename(p).rsplit("_", 1)[-1]
        # unique random sectors to find on disk; compressible kinds to get compressed extents
        wanted = ("text", "text.bin", "mixed", "mixed.bin") if compressed else ("random", "random.bin")
        if not (p.startswith("/sizes/") and e["size"] >= 300000 and kind in wanted):
            continue
        for ext in T.file_extents(dump, e["ino"]):
            foff, disk_bytenr, disk_len, ext_off, num, comp = ext
            if disk_bytenr == 0:
                continue
            if not compressed and foff == 0 and comp == 0 and num >= 4 * 4096:
                return p, open(src + os.fsencode(p), "rb").read(), ext
            if compressed and foff > 0 and comp != 0 and ext_off == 0:
                return p, open(src + os.fsencode(p), "rb").read(), ext
    pytest.fail("no suitable victim file in %s" % image.name)


def _check_partial(cp, data, bad_start, bad_end, file_off, logical):
    err = cp.stderr.decode("utf-8", "replace")
    assert cp.returncode == 1, T.describe(cp)
    assert len(cp.stdout) == len(data), "output %d bytes, file %d" % (len(cp.stdout), len(data))
    assert cp.stdout[:bad_start] == data[:bad_start], "bytes before the bad range differ"
    assert cp.stdout[bad_end:] == data[bad_end:], "bytes after the bad range differ"
    assert cp.stdout[bad_start:bad_end] == bytes(bad_end - bad_start), "bad range not written as zeros"
    assert T.mentions_number(err, file_off), "stderr does not name file offset %d: %s" % (file_off, err)
    assert T.mentions_number(err, logical), "stderr does not name logical %d: %s" % (logical, err)


SECTOR = 4096


@pytest.mark.parametrize("name,copies", [("kernel-dup", 2), ("kernel-raid1", 2), ("kernel-raid1c3", 3),
                                         ("kernel-raid10", 2)])
def test_mirrored_data_sector(ubtrfs_bin, factory, image_copy, name, copies):
    image, devs = image_copy(name)
    path, data, (foff, disk_bytenr, _, ext_off, _, _) = _random_file_victim(factory, image, False)
    bad_off = 3 * SECTOR
    sector = data[bad_off:bad_off + SECTOR]
    where = T.find_bytes(devs, sector)
    assert len(where) == copies, "expected %d copies of the sector, found %r" % (copies, where)
    rng = random.Random(11)
    for dev, off in where[:-1]:
        T.overwrite(dev, off, rng.randbytes(SECTOR))
    rc, size, digest, cp = T.cat_hash(devs, path)
    assert rc == 0, "one good copy left: " + T.describe(cp)
    assert (size, digest) == factory.view(image).hashes[path], "content differs with one good copy left"

    dev, off = where[-1]
    T.overwrite(dev, off, rng.randbytes(SECTOR))
    cp = T.ubtrfs("cat", "--path", path, *devs)
    _check_partial(cp, data, bad_off, bad_off + SECTOR, bad_off, disk_bytenr + ext_off + bad_off)


@pytest.mark.parametrize("name", ["kernel-raid5", "kernel-raid6"])
def test_parity_rebuilds_data_sector(ubtrfs_bin, factory, image_copy, name):
    image, devs = image_copy(name)
    path, data, _ = _random_file_victim(factory, image, False)
    bad_off = 3 * SECTOR
    where = T.find_bytes(devs, data[bad_off:bad_off + SECTOR])
    assert len(where) == 1, where
    T.overwrite(where[0][0], where[0][1], random.Random(5).randbytes(SECTOR))
    rc, size, digest, cp = T.cat_hash(devs, path)
    assert rc == 0, "parity should rebuild the sector: " + T.describe(cp)
    assert (size, digest) == factory.view(image).hashes[path], "rebuilt content differs"


@pytest.mark.parametrize("name", ["kernel-zstd", "kernel-zlib", "kernel-lzo"])
def test_bad_compressed_extent(ubtrfs_bin, factory, image_copy, name):
    image, devs = image_copy(name)
    path, data, (foff, disk_bytenr, disk_len, _, num, _) = _random_file_victim(factory, image, True)
    mirrors = T.map_logical(devs[0], disk_bytenr, SECTOR)
    assert len(mirrors) == 1, mirrors
    T.overwrite(devs[0], mirrors[0][1], random.Random(9).randbytes(SECTOR))
    cp = T.ubtrfs("cat", "--path", path, *devs)
    # the whole extent decompresses from the damaged bytes: all of it is unreadable
    _check_partial(cp, data, foff, min(foff + num, len(data)), foff, disk_bytenr)
