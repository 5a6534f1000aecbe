# SPDX-License-Identifier: MIT
"""The scrub tests' filesystems and their damage.

A filesystem is made by the kernel (mkfs.btrfs, a mount, files written through
it: random and text files, a NODATACOW directory whose data has no checksums,
a zstd directory, a reflinked copy and a snapshot, so that a bad sector has
several owners). What lies where is read from btrfs-progs' dump of the chunk,
extent and checksum trees (never from ubtrfs), and the placement arithmetic is
multidev_lib's.

The damage generator picks places to damage with a seeded random generator
and keeps within the profile's redundancy when asked to: a tree block or data
sector loses at most copies - 1 of its copies; on RAID5 a sector row of a
full stripe loses at most one of its strips (data, P), on RAID6 two (data, P,
Q). Every change is recorded (image, devid, physical, length, what it hit,
the bytes before and after) and can be written to a JSON file, so that a
failing test says exactly what it did.
"""

import hashlib
import json
import os
import re
import stat

import multidev_lib as M
import ubtrfs_testlib as T

MiB = T.MiB
SECTOR = 4096
STRIPE = 65536


# --------------------------------------------------------------------------
# building


def populate(mnt, rng, scale=1):
    """Files with every kind of extent scrub meets; returns {path: sha256}."""
    mnt = str(mnt)
    os.makedirs(os.path.join(mnt, "d/e"))
    for i in range(12 * scale):
        n = rng.choice([3000, 4096, 20000, 70000, 200000, 600000])
        data = rng.randbytes(n) if i % 2 else T.text_bytes(rng, n)
        with open(os.path.join(mnt, "d" if i % 3 else "d/e", "f%02d" % i), "wb") as f:
            f.write(data)
    with open(os.path.join(mnt, "big"), "wb") as f:
        f.write(rng.randbytes(3 * MiB + 12345))
    T.run(["cp", "--reflink=always", os.path.join(mnt, "big"), os.path.join(mnt, "big.clone")])
    # no checksums: NODATACOW set on the empty directory, inherited by its files
    nocow = os.path.join(mnt, "nocow")
    os.mkdir(nocow)
    T.run(["chattr", "+C", nocow])
    for i in range(2):
        with open(os.path.join(nocow, "n%d" % i), "wb") as f:
            f.write(rng.randbytes(256 * 1024 + i * 4096))
    z = os.path.join(mnt, "zstd")
    os.mkdir(z)
    T.run(["btrfs", "property", "set", z, "compression", "zstd"])
    with open(os.path.join(z, "text"), "wb") as f:
        f.write(T.text_bytes(rng, 900000))
    T.run(["sync"])
    T.run(["btrfs", "subvolume", "snapshot", mnt, os.path.join(mnt, "snap")])
    T.run(["sync"])
    return hash_tree(mnt)


def hash_tree(top):
    out = {}
    top = str(top)
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames.sort()
        for name in sorted(filenames):
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                out[os.path.relpath(p, top)] = "-> " + os.readlink(p)
            elif stat.S_ISREG(st.st_mode):
                out[os.path.relpath(p, top)] = T.sha256_file(p)
            else:
                out[os.path.relpath(p, top)] = "mode %o" % st.st_mode
    return out


def make_fs(workdir, profile, ndev, seed, size=256 * MiB, mkfs_args=()):
    """Kernel-made images: (images, {path: sha256}). profile is (data, metadata)."""
    import random
    images = []
    for i in range(ndev):
        p = os.path.join(str(workdir), "dev%d.img" % i)
        with open(p, "wb") as f:
            f.truncate(size)
        images.append(p)
    rng = random.Random(seed)
    mnt = os.path.join(str(workdir), "mnt")
    with M.attached(images) as loops:
        T.run(["mkfs.btrfs", "-f", "-q", "-d", profile[0], "-m", profile[1], *mkfs_args, *loops])
        with M.mount_loops(loops, mnt):
            hashes = populate(mnt, rng)
    return images, hashes


# --------------------------------------------------------------------------
# what lies where (btrfs-progs' dumps)

class Layout:
    def __init__(self, images):
        self.images = list(images)
        supers = [M.super_info(i) for i in self.images]
        self.by_devid = {s["devid"]: img for s, img in zip(supers, self.images)}
        self.nodesize = supers[0]["nodesize"]
        self.chunks = M.parse_chunks(M.dump_tree(self.images, "chunk"))
        self.tree_blocks = []   # logical
        self.data = []          # (logical, length)
        self.gen = {}           # extent start -> the generation of its extent item
        for m in re.finditer(r"key \((\d+) (METADATA_ITEM|EXTENT_ITEM) (\d+)\).*\n\s+refs \d+ gen (\d+) flags (\S+)",
                             M.dump_tree(self.images, "extent")):
            bytenr, typ, off, gen, flags = int(m.group(1)), m.group(2), int(m.group(3)), int(m.group(4)), m.group(5)
            self.gen[bytenr] = gen
            if "TREE_BLOCK" in flags:
                self.tree_blocks.append(bytenr)
            elif "DATA" in flags:
                self.data.append((bytenr, off))
        self.csummed = set()
        for m in re.finditer(r"key \(EXTENT_CSUM EXTENT_CSUM (\d+)\) itemoff \d+ itemsize (\d+)",
                             M.dump_tree(self.images, "csum")):
            start, size = int(m.group(1)), int(m.group(2))
            for i in range(size // 4):
                self.csummed.add(start + i * SECTOR)

    def chunk(self, logical):
        return M.chunk_of(self.chunks, logical)

    def extent_of(self, logical):
        """(start, generation) of the extent holding `logical`, or None when nothing is allocated there."""
        for b in self.tree_blocks:
            if b <= logical < b + self.nodesize:
                return b, self.gen[b]
        for start, length in self.data:
            if start <= logical < start + length:
                return start, self.gen[start]
        return None

    def image(self, devid):
        return self.by_devid[devid]

    def sectors(self, csummed):
        """Data sectors with (csummed=True) or without checksums."""
        out = []
        for start, length in self.data:
            for s in range(start, start + length, SECTOR):
                if (s in self.csummed) == csummed:
                    out.append(s)
        return out

    def rows_of(self, logical, length):
        """RAID5/6: [(chunk logical, full stripe, row)] the range covers in its data strip."""
        c = self.chunk(logical)
        out = []
        for s in range(logical, logical + length, SECTOR):
            r = c.raid56_row(s)
            out.append((c.logical, r["full"], (s - c.logical) % STRIPE // SECTOR))
        return out

    def live_rows(self, proven=False):
        """RAID5/6 rows holding live data or metadata: {(chunk logical, full, row)}; with
        `proven`, only rows whose every live sector a checksum proves (no NODATASUM data)."""
        rows = set()
        for b in self.tree_blocks:
            if self.chunk(b).nparity:
                rows.update(self.rows_of(b, self.nodesize))
        for start, length in self.data:
            if self.chunk(start).nparity:
                rows.update(self.rows_of(start, length))
        if proven:
            for s in self.sectors(False):
                if self.chunk(s).nparity:
                    rows.difference_update(self.rows_of(s, SECTOR))
        return rows


# --------------------------------------------------------------------------
# damage

def _read(img, off, n):
    with open(img, "rb") as f:
        f.seek(off)
        return f.read(n)


class Damage:
    """What the generator changed, in order."""

    def __init__(self, layout, rng):
        self.lay = layout
        self.rng = rng
        self.records = []
        self.copies_hit = {}   # (unit kind, logical) -> set of copies
        self.rows_hit = {}     # (chunk, full, row) -> set of slots ('d<i>', 'P', 'Q')

    def _write(self, img, devid, phys, length, what):
        before = _read(img, phys, length)
        new = bytes(b ^ (self.rng.randrange(255) + 1) for b in before)
        with open(img, "r+b") as f:
            f.seek(phys)
            f.write(new)
        rec = dict(what, image=img, devid=devid, physical=phys, length=length,
                   before=hashlib.sha256(before).hexdigest(), after=hashlib.sha256(new).hexdigest(),
                   old=before.hex())
        self.records.append(rec)
        return rec

    def _part(self, length):
        """A random piece of a unit: (offset inside it, length), at least one byte, sector-bound."""
        off = self.rng.randrange(length)
        n = self.rng.randrange(1, 65)
        n = min(n, SECTOR - off % SECTOR)
        return off, n

    # ---- one copy of a tree block or data sector

    def hit_copy(self, kind, logical, length, copy_index, within=True):
        """Damage copy `copy_index` (0-based) of the unit; False when that breaks the limits."""
        c = self.lay.chunk(logical)
        key = (kind, logical)
        if c.nparity:
            row_keys = self.lay.rows_of(logical, length)
            slot = "d%d" % c.raid56_row(logical)["index"]
            if within and any(len(self.rows_hit.get(k, set()) | {slot}) > c.nparity for k in row_keys):
                return False
            for k in row_keys:
                self.rows_hit.setdefault(k, set()).add(slot)
            devid, phys = c.copies(logical)[0]
        else:
            copies = c.copies(logical)
            hit = self.copies_hit.setdefault(key, set())
            if copy_index in hit or (within and len(hit | {copy_index}) >= len(copies)):
                return False
            hit.add(copy_index)
            devid, phys = copies[copy_index]
        off, n = self._part(length)
        self._write(self.lay.image(devid), devid, phys + off, n,
                    {"kind": kind, "logical": logical, "unit_length": length, "copy": copy_index + 1,
                     "profile": c.profile, "offset_in_unit": off, "extent": self.lay.extent_of(logical)})
        return True

    # ---- RAID5/6 parity of a live row

    def hit_parity(self, row_key, which, within=True):
        chunk_logical, full, row = row_key
        c = self.lay.chunk(chunk_logical)
        slots = self.rows_hit.setdefault(row_key, set())
        if which in slots or (within and len(slots | {which}) > c.nparity):
            return False
        slots.add(which)
        logical = c.logical + (full * c.ndata) * STRIPE + row * SECTOR
        r = c.raid56_row(logical)
        devid, phys = r["p"] if which == "P" else r["q"]
        off, n = self._part(SECTOR)
        self._write(self.lay.image(devid), devid, phys + off, n,
                    {"kind": which, "logical": logical, "full": full, "row": row, "profile": c.profile,
                     "offset_in_unit": off})
        return True

    # ---- random damage

    def random_within(self, n_tree, n_data, n_parity=0, n_nocsum=0):
        lay, rng = self.lay, self.rng
        plan = [("tree", n_tree), ("data", n_data), ("nocsum", n_nocsum)]
        for kind, count in plan:
            pool = {"tree": lay.tree_blocks, "data": lay.sectors(True), "nocsum": lay.sectors(False)}[kind]
            pool = list(pool)
            rng.shuffle(pool)
            done = 0
            for logical in pool:
                if done == count:
                    break
                length = lay.nodesize if kind == "tree" else SECTOR
                c = lay.chunk(logical)
                ncopies = 1 if c.nparity else len(c.copies(logical))
                if not c.nparity and ncopies < 2:
                    continue
                if self.hit_copy(kind, logical, length, rng.randrange(ncopies)):
                    done += 1
            assert done == count, "test setup: only %d of %d %s units could be damaged" % (done, count, kind)
        rows = sorted(lay.live_rows(proven=True))
        rng.shuffle(rows)
        done = 0
        for key in rows:
            if done == n_parity:
                break
            c = lay.chunk(key[0])
            which = "P" if c.nparity == 1 or rng.randrange(2) else "Q"
            if self.hit_parity(key, which):
                done += 1
        assert done == n_parity, "test setup: only %d of %d parity rows could be damaged" % (done, n_parity)

    def all_copies(self, kind, logical, length):
        """Beyond redundancy: every copy of a mirrored unit, or (RAID5/6) its strip and P and Q."""
        c = self.lay.chunk(logical)
        if c.nparity:
            self.hit_copy(kind, logical, length, 0, within=False)
            for k in self.lay.rows_of(logical, length)[:1]:
                assert self.hit_parity(k, "P", within=False)
                if c.nparity == 2:
                    assert self.hit_parity(k, "Q", within=False)
        else:
            for i in range(len(c.copies(logical))):
                self.hit_copy(kind, logical, length, i, within=False)

    def save(self, path):
        with open(path, "w") as f:
            json.dump(self.records, f, indent=1)

    def current(self, rec):
        """The bytes at a record's place now, hashed (to tell repaired from left alone)."""
        return hashlib.sha256(_read(rec["image"], rec["physical"], rec["length"])).hexdigest()
