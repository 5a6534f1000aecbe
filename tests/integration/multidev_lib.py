# SPDX-License-Identifier: MIT
"""Multi-device filesystems made by the kernel on loop devices, and the chunk
arithmetic the degraded/damage tests need: which image holds which copy of a
logical address, where the parity of a RAID5/6 row lives.

The mapping is computed here from btrfs-progs' dump of the chunk tree (not
from ubtrfs), and every filesystem is checked once against itself: the bytes
at the computed physical addresses must be the file's bytes from the source
tree, so a wrong mapping fails loudly instead of corrupting the wrong spot.
"""

import contextlib
import itertools
import os
import random
import re
from pathlib import Path

import ubtrfs_testlib as T

MiB = T.MiB
IMAGE_SIZE = 256 * MiB


class Profile:
    def __init__(self, name, data, meta, ndev):
        self.name, self.data, self.meta, self.ndev = name, data, meta, ndev

    def __repr__(self):
        return self.name


# How many devices each profile can lose (RAID10: any one, some pairs).
TOLERANCE = {"single": 0, "dup": 0, "raid0": 0, "raid1": 1, "raid1c3": 2, "raid1c4": 3,
             "raid10": 1, "raid5": 1, "raid6": 2}


def tolerance(profile):
    return min(TOLERANCE[profile.data], TOLERANCE[profile.meta])


# --------------------------------------------------------------------------
# chunk tree

class Chunk:
    def __init__(self, logical, length, typ, stripe_len, sub_stripes, stripes):
        self.logical, self.length, self.stripe_len = logical, length, stripe_len
        self.sub_stripes = sub_stripes
        self.stripes = stripes          # [(devid, physical)]
        flags = typ.split("|")
        self.kind = flags[0].lower()    # data / metadata / system
        prof = [f.lower() for f in flags[1:] if f.lower() in TOLERANCE]
        self.profile = prof[0] if prof else "single"

    def __repr__(self):
        return "Chunk(%s %s @%d+%d %r)" % (self.kind, self.profile, self.logical, self.length, self.stripes)

    @property
    def nparity(self):
        return {"raid5": 1, "raid6": 2}.get(self.profile, 0)

    @property
    def ndata(self):
        return len(self.stripes) - self.nparity

    def contains(self, logical):
        return self.logical <= logical < self.logical + self.length

    def copies(self, logical):
        """[(devid, physical)] of every plain copy of the byte at `logical`, mirror 1 first.

        For RAID5/6 this is the one data stripe (parity is not a copy)."""
        off = logical - self.logical
        sl = self.stripe_len
        n = len(self.stripes)
        if self.profile in ("single", "dup", "raid1", "raid1c3", "raid1c4"):
            return [(d, p + off) for d, p in self.stripes]
        stripe_nr, in_stripe = divmod(off, sl)
        if self.profile == "raid0":
            d, p = self.stripes[stripe_nr % n]
            return [(d, p + (stripe_nr // n) * sl + in_stripe)]
        if self.profile == "raid10":
            sub = self.sub_stripes
            groups = n // sub
            first = (stripe_nr % groups) * sub
            row = stripe_nr // groups
            return [(d, p + row * sl + in_stripe) for d, p in self.stripes[first:first + sub]]
        row = self.raid56_row(logical)
        return [row["data"][row["index"]]]

    def raid56_row(self, logical):
        """The RAID5/6 row holding `logical`: every data stripe's (devid, physical) at the
        same offset, then P and Q.  Parity rotates by one device per full stripe."""
        assert self.nparity
        off = logical - self.logical
        sl = self.stripe_len
        n = len(self.stripes)
        stripe_nr, in_stripe = divmod(off, sl)
        full, index = divmod(stripe_nr, self.ndata)

        def at(i):
            d, p = self.stripes[(i + full) % n]
            return (d, p + full * sl + in_stripe)
        data = [at(i) for i in range(self.ndata)]
        row_logicals = [self.logical + (full * self.ndata + i) * sl + in_stripe for i in range(self.ndata)]
        return {"full": full, "index": index, "data": data, "logicals": row_logicals,
                "p": at(self.ndata), "q": at(self.ndata + 1) if self.nparity == 2 else None,
                "full_start": self.logical + full * self.ndata * sl,
                "full_len": self.ndata * sl}

    def readable(self, logical, missing):
        """Is the byte at `logical` recoverable with the devids in `missing` gone?"""
        if self.nparity:
            lost = sum(1 for d, _ in self.stripes if d in missing)
            return self.copies(logical)[0][0] not in missing or lost <= self.nparity
        return any(d not in missing for d, _ in self.copies(logical))


def parse_chunks(dump_text):
    chunks = []
    cur = None
    for line in dump_text.splitlines():
        m = re.match(r"^\titem \d+ key \(FIRST_CHUNK_TREE CHUNK_ITEM (\d+)\)", line)
        if m:
            cur = {"logical": int(m.group(1)), "stripes": []}
            chunks.append(cur)
            continue
        if re.match(r"^\titem \d+ key", line):
            cur = None
            continue
        if cur is None:
            continue
        m = re.search(r"length (\d+) owner \d+ stripe_len (\d+) type (\S+)", line)
        if m:
            cur.update(length=int(m.group(1)), stripe_len=int(m.group(2)), type=m.group(3))
        m = re.search(r"num_stripes (\d+) sub_stripes (\d+)", line)
        if m:
            cur["sub_stripes"] = int(m.group(2))
        m = re.search(r"stripe (\d+) devid (\d+) offset (\d+)", line)
        if m:
            cur["stripes"].append((int(m.group(2)), int(m.group(3))))
    return [Chunk(c["logical"], c["length"], c["type"], c["stripe_len"], c.get("sub_stripes", 1),
                  c["stripes"]) for c in chunks]


def chunk_of(chunks, logical):
    for c in chunks:
        if c.contains(logical):
            return c
    raise KeyError("logical %d is in no chunk" % logical)


# --------------------------------------------------------------------------
# loop devices and mounts (registered with the testlib so the session can
# prove nothing was left behind)

@contextlib.contextmanager
def attached(images, readonly=False):
    loops = []
    try:
        for img in images:
            loops.append(T.losetup_attach(str(img), readonly))
        yield loops
    finally:
        for dev in reversed(loops):
            T.losetup_detach(dev)


@contextlib.contextmanager
def mount_loops(loops, mnt, options=()):
    os.makedirs(str(mnt), exist_ok=True)
    T.run(["btrfs", "device", "scan", *loops])
    opts = list(options) + ["device=%s" % d for d in loops[1:]]
    T.run(["mount", "-t", "btrfs", "-o", ",".join(opts), loops[0], str(mnt)])
    with T.REGISTRY.lock:
        T.REGISTRY.mounts.add(str(mnt))
    try:
        yield str(mnt)
    finally:
        T.umount(str(mnt))


def sparse_images(workdir, stem, n):
    out = []
    for i in range(n):
        p = Path(workdir) / ("%s.%d.img" % (stem, i))
        with open(p, "wb") as f:
            f.truncate(IMAGE_SIZE)
        out.append(str(p))
    return out


# --------------------------------------------------------------------------
# the filesystems

ZSTD_DIR = "zstd"


def add_compressible(src, rng):
    """Files for a directory with `btrfs property set compression zstd`."""
    d = Path(src) / ZSTD_DIR
    d.mkdir()
    (d / "text_1m").write_bytes(T.text_bytes(rng, 1 * MiB + 333))
    (d / "mixed_600k").write_bytes(T.file_bytes(rng, "mixed", 600000))
    (d / "random_200k").write_bytes(rng.randbytes(200000))
    with open(d / "sparse_text", "wb") as f:
        f.write(T.text_bytes(rng, 70000))
        f.seek(2 * MiB)
        f.write(T.text_bytes(rng, 9000))


def populate(mnt, src):
    """cp -a the source tree in; the zstd directory gets its compression property first."""
    for name in sorted(os.listdir(src)):
        if name == ZSTD_DIR:
            continue
        T.run(["cp", "-a", os.path.join(src, name), mnt])
    zdst = os.path.join(mnt, ZSTD_DIR)
    os.mkdir(zdst)
    T.run(["btrfs", "property", "set", zdst, "compression", "zstd"])
    zsrc = os.path.join(src, ZSTD_DIR)
    for name in sorted(os.listdir(zsrc)):
        T.run(["cp", "-a", os.path.join(zsrc, name), zdst])
    T.run(["sync"])


def dump_tree(images, tree):
    return T.run(["btrfs", "inspect-internal", "dump-tree", "--noscan", "-t", tree, *images]).stdout.decode(
        "utf-8", "replace")


def super_info(image):
    text = T.run(["btrfs", "inspect-internal", "dump-super", image]).stdout.decode()
    s = T.parse_dump_super(text)
    return {"devid": int(s["dev_item.devid"]), "uuid": s["dev_item.uuid"], "fsid": s["fsid"],
            "generation": int(s["generation"]), "nodesize": int(s["nodesize"]),
            "sectorsize": int(s["sectorsize"])}


class MultiFs:
    """One kernel-made filesystem: images in devid order, the kernel's view, chunk map, extents."""

    def __init__(self, profile, images, source, view):
        self.profile = profile
        self.source = str(source)
        self.view = view
        supers = [super_info(i) for i in images]
        order = sorted(range(len(images)), key=lambda i: supers[i]["devid"])
        self.images = [images[i] for i in order]
        self.supers = [supers[i] for i in order]
        self.devids = [s["devid"] for s in self.supers]
        assert self.devids == list(range(1, len(images) + 1)), self.devids
        self.fsid = self.supers[0]["fsid"]
        self.generation = max(s["generation"] for s in self.supers)
        self.nodesize = self.supers[0]["nodesize"]
        self.sectorsize = self.supers[0]["sectorsize"]
        self.chunks = parse_chunks(dump_tree(self.images, "chunk"))
        self.fs_dump = dump_tree(self.images, "fs")
        self.files = sorted(view.hashes)
        self.extents = {p: T.file_extents(self.fs_dump, view.entries[p]["ino"]) for p in self.files}

    def __repr__(self):
        return "MultiFs(%s)" % self.profile.name

    def image(self, devid):
        return self.images[devid - 1]

    def recipe(self):
        p = self.profile
        return ("mkfs.btrfs -d %s -m %s on %d x 256 MiB loop devices; mount; cp -a SRC; "
                "zstd/ with compression property" % (p.data, p.meta, p.ndev))

    # ---- content

    def content(self, path):
        with open(os.path.join(os.fsencode(self.source), os.fsencode(path.lstrip("/"))), "rb") as f:
            return f.read()

    def data_ranges(self, path):
        """[(logical, length)] that reading `path` needs from the data chunks."""
        out = []
        for foff, bytenr, disk_len, eoff, nbytes, comp in self.extents[path]:
            if bytenr == 0:
                continue
            if comp:
                out.append((bytenr, disk_len))
            else:
                out.append((bytenr + eoff, nbytes))
        return out

    def sectors(self, path):
        for logical, length in self.data_ranges(path):
            start = logical - logical % self.sectorsize
            for s in range(start, logical + length, self.sectorsize):
                yield s

    def devids_of(self, path):
        out = set()
        for s in self.sectors(path):
            c = chunk_of(self.chunks, s)
            if c.nparity:
                out |= {d for d, _ in c.stripes}
            else:
                out |= {d for d, _ in c.copies(s)}
        return out

    def data_readable(self, path, missing):
        for s in self.sectors(path):
            if not chunk_of(self.chunks, s).readable(s, missing):
                return False
        return True

    def metadata_readable(self, missing):
        for c in self.chunks:
            if c.kind == "data":
                continue
            if c.nparity:
                if sum(1 for d, _ in c.stripes if d in missing) > c.nparity:
                    return False
            elif c.profile == "raid10":
                sub = c.sub_stripes
                for g in range(0, len(c.stripes), sub):
                    if all(d in missing for d, _ in c.stripes[g:g + sub]):
                        return False
            elif c.profile == "raid0":
                if any(d in missing for d, _ in c.stripes):
                    return False
            elif all(d in missing for d, _ in c.stripes):
                return False
        return True

    # ---- choosing places to damage

    def big_plain_extent(self, min_len):
        """(path, file_offset, logical, length) of an uncompressed extent of a random-content
        file at least `min_len` long, taken whole."""
        best = None
        for p in self.files:
            if "random" not in p or p.startswith("/" + ZSTD_DIR):
                continue
            for foff, bytenr, disk_len, eoff, nbytes, comp in self.extents[p]:
                if bytenr and not comp and nbytes >= min_len:
                    cand = (nbytes, p, foff, bytenr + eoff)
                    if best is None or cand > best:
                        best = cand
        assert best, "no uncompressed extent of %d bytes on %s" % (min_len, self)
        nbytes, p, foff, logical = best
        return p, foff, logical, nbytes

    def file_offset_of(self, path, logical):
        for foff, bytenr, disk_len, eoff, nbytes, comp in self.extents[path]:
            if bytenr and not comp and bytenr + eoff <= logical < bytenr + eoff + nbytes:
                return foff + logical - (bytenr + eoff)
        raise KeyError((path, logical))

    def fs_leaf(self):
        """Logical address of a leaf of the fs tree that a listing must read: one holding an
        inode item (`ls -R --json` reads every inode; a leaf of nothing but one file's extent
        items is read by `cat`, not by a listing). Multi-leaf trees: the middle such leaf."""
        leaves = T.leaves_of(self.fs_dump)
        assert leaves, "no fs tree leaves in the dump"
        with_inodes = [lf for lf in leaves if any(" INODE_ITEM " in k for k in lf[2])]
        assert with_inodes, "test setup: no fs tree leaf holds an inode item"
        return with_inodes[len(with_inodes) // 2][0]

    def block_copies(self, logical):
        """[(devid, physical)] of every copy of the tree block; for RAID5/6 the data stripe."""
        return chunk_of(self.chunks, logical).copies(logical)


def build_fs(workdir, profile, source, mnt):
    images = sparse_images(workdir, profile.name, profile.ndev)
    with attached(images) as loops:
        T.run(["mkfs.btrfs", "-f", "-q", "-d", profile.data, "-m", profile.meta, *loops])
        with mount_loops(loops, mnt):
            populate(str(mnt), str(source))
    view = T.kernel_view(images, str(mnt) + "-ro")
    return MultiFs(profile, images, source, view)


def self_check(fs):
    """The mapping must find each file's bytes where it says they are."""
    problems = []
    for p in fs.files:
        src = os.path.join(os.fsencode(fs.source), os.fsencode(p.lstrip("/")))
        if T.sha256_file(src) != fs.view.hashes[p]:
            problems.append("%s: %s: the kernel reads other bytes than the source holds" % (fs, p))
    for p in fs.files:
        for foff, bytenr, disk_len, eoff, nbytes, comp in fs.extents[p]:
            if not bytenr or comp:
                continue
            want = fs.content(p)
            for delta in (0, nbytes // 2, nbytes - 1):
                logical = bytenr + eoff + delta
                c = chunk_of(fs.chunks, logical)
                for devid, phys in c.copies(logical):
                    with open(fs.image(devid), "rb") as f:
                        f.seek(phys)
                        got = f.read(1)
                    if foff + delta < len(want) and got != want[foff + delta:foff + delta + 1]:
                        problems.append("%s: %s file offset %d logical %d -> devid %d physical %d"
                                        % (fs, p, foff + delta, logical, devid, phys))
    return problems


def build_foreign(workdir, name, mnt, commits):
    """A one-device filesystem of its own, pushed to a high generation when `commits` > 0."""
    img = sparse_images(workdir, name, 1)[0]
    T.run(["mkfs.btrfs", "-f", "-q", img])
    if commits:
        with T.mounted([img], mnt, readonly=False) as m:
            for i in range(commits):
                with open(os.path.join(m, "f%d" % (i % 4)), "wb") as f:
                    f.write(b"x" * (i + 1))
                T.run(["btrfs", "filesystem", "sync", m])
    return img, super_info(img)


def copy_images(images, dst_dir, stem):
    os.makedirs(dst_dir, exist_ok=True)
    out = []
    for i, img in enumerate(images):
        p = os.path.join(dst_dir, "%s.%d.img" % (stem, i))
        T.copy_sparse(img, p)
        out.append(p)
    return out


def combos(n, k):
    return list(itertools.combinations(range(1, n + 1), k))


def shuffled(seq, seed):
    out = list(seq)
    random.Random(seed).shuffle(out)
    return out
