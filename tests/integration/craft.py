# SPDX-License-Identifier: MIT
"""A small btrfs image editor for building hostile test images.

Test-only and independent of libubtrfs: it reads the superblock, maps logical
addresses through the system chunk array and the chunk tree (single, DUP and
the RAID1 family: every stripe is a full copy), walks trees, finds items by
key and edits headers, key pointers and items (in place, resized, inserted or
deleted).  Every change is written back to *every* copy of the block with the
block checksum recomputed here (crc32c in Python, sha256/blake2b through
hashlib, xxhash64 in Python), so the damage is read rather than rejected as a
bad checksum.  Only single-device images are handled.

Layouts follow the on-disk format (include/ubtrfs/format.h documents the same
offsets); nothing here calls the library under test.
"""

import bisect
import hashlib
import struct

# ---------------------------------------------------------------- constants

SUPER_OFFSETS = (64 << 10, 64 << 20, 256 << 30)
SUPER_SIZE = 4096
MAGIC = b"_BHRfS_M"
HEADER_SIZE = 101
ITEM_SIZE = 25
KEY_PTR_SIZE = 33

INODE_ITEM, INODE_REF, INODE_EXTREF, XATTR_ITEM = 1, 12, 13, 24
DIR_ITEM, DIR_INDEX, EXTENT_DATA, EXTENT_CSUM = 84, 96, 108, 128
ROOT_ITEM, ROOT_BACKREF, ROOT_REF = 132, 144, 156
EXTENT_ITEM, METADATA_ITEM, BLOCK_GROUP_ITEM = 168, 169, 192
DEV_EXTENT, DEV_ITEM, CHUNK_ITEM = 204, 216, 228

ROOT_TREE, EXTENT_TREE, CHUNK_TREE, DEV_TREE, FS_TREE, CSUM_TREE = 1, 2, 3, 4, 5, 7
FIRST_FREE_OBJECTID = 256
U64 = (1 << 64) - 1
TREE_LOG = (1 << 64) - 6    # -6ULL
TREE_RELOC = (1 << 64) - 8  # -8ULL

BLOCK_GROUP_DATA, BLOCK_GROUP_SYSTEM, BLOCK_GROUP_METADATA = 1, 2, 4
FT_REG_FILE, FT_DIR, FT_SYMLINK = 1, 2, 7
FILE_EXTENT_INLINE, FILE_EXTENT_REG, FILE_EXTENT_PREALLOC = 0, 1, 2

# superblock field offsets
SB = dict(csum=0, fsid=32, bytenr=48, flags=56, magic=64, generation=72, root=80, chunk_root=88,
          log_root=96, total_bytes=112, bytes_used=120, root_dir_objectid=128, num_devices=136,
          sectorsize=144, nodesize=148, stripesize=156, sys_chunk_array_size=160,
          chunk_root_generation=164, compat_flags=172, compat_ro_flags=180, incompat_flags=188,
          csum_type=196, root_level=198, chunk_root_level=199, log_root_level=200, dev_item=201,
          label=299, metadata_uuid=571, sys_chunk_array=811)
SB_FMT = dict(bytenr="Q", flags="Q", generation="Q", root="Q", chunk_root="Q", log_root="Q",
              total_bytes="Q", bytes_used="Q", root_dir_objectid="Q", num_devices="Q",
              sectorsize="I", nodesize="I", stripesize="I", sys_chunk_array_size="I",
              chunk_root_generation="Q", compat_flags="Q", compat_ro_flags="Q",
              incompat_flags="Q", csum_type="H", root_level="B", chunk_root_level="B",
              log_root_level="B")
INCOMPAT_METADATA_UUID = 1 << 10

# ROOT_ITEM: an inode item (160 bytes) then these
ROOT_ITEM_GENERATION, ROOT_ITEM_BYTENR, ROOT_ITEM_LEVEL = 160, 176, 238
ROOT_ITEM_GENERATION_V2 = 239

# INODE_ITEM fields
INODE_SIZE, INODE_NBYTES, INODE_NLINK, INODE_MODE = 16, 24, 40, 52

# FILE_EXTENT_ITEM fields
FE_GENERATION, FE_RAM_BYTES, FE_COMPRESSION, FE_TYPE, FE_INLINE_DATA = 0, 8, 16, 20, 21
FE_DISK_BYTENR, FE_DISK_NUM_BYTES, FE_OFFSET, FE_NUM_BYTES = 21, 29, 37, 45


# ---------------------------------------------------------------- checksums

def _crc_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC = _crc_table()


def crc32c_raw(seed, data):
    """CRC-32C register update without the final inversion (the kernel's crc32c(seed, ...))."""
    c = seed
    tbl = _CRC
    for b in data:
        c = tbl[(c ^ b) & 0xFF] ^ (c >> 8)
    return c


def crc32c(data):
    return crc32c_raw(0xFFFFFFFF, data) ^ 0xFFFFFFFF


def name_hash(name):
    """btrfs_name_hash: DIR_ITEM and XATTR_ITEM key offsets."""
    return crc32c_raw(0xFFFFFFFE, name)


def extref_hash(parent, name):
    """btrfs_extref_hash: INODE_EXTREF key offsets (crc32c seeded with the parent's ino)."""
    return crc32c_raw(parent & 0xFFFFFFFF, name)


_P1, _P2, _P3, _P4, _P5 = (0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9,
                           0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5)
_M = U64


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & _M


def _round(acc, lane):
    acc = (acc + lane * _P2) & _M
    return (_rotl(acc, 31) * _P1) & _M


def xxhash64(data, seed=0):
    n = len(data)
    i = 0
    if n >= 32:
        v = [(seed + _P1 + _P2) & _M, (seed + _P2) & _M, seed, (seed - _P1) & _M]
        while i + 32 <= n:
            for j in range(4):
                v[j] = _round(v[j], struct.unpack_from("<Q", data, i + 8 * j)[0])
            i += 32
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M
        for j in range(4):
            h = ((h ^ _round(0, v[j])) * _P1 + _P4) & _M
    else:
        h = (seed + _P5) & _M
    h = (h + n) & _M
    while i + 8 <= n:
        h ^= _round(0, struct.unpack_from("<Q", data, i)[0])
        h = (_rotl(h, 27) * _P1 + _P4) & _M
        i += 8
    if i + 4 <= n:
        h ^= (struct.unpack_from("<I", data, i)[0] * _P1) & _M
        h = (_rotl(h, 23) * _P2 + _P3) & _M
        i += 4
    while i < n:
        h ^= (data[i] * _P5) & _M
        h = (_rotl(h, 11) * _P1) & _M
        i += 1
    h ^= h >> 33
    h = (h * _P2) & _M
    h ^= h >> 29
    h = (h * _P3) & _M
    h ^= h >> 32
    return h


def checksum(csum_type, data):
    """The 32-byte checksum field btrfs stores for `data` (zero padded)."""
    if csum_type == 0:
        out = struct.pack("<I", crc32c(data))
    elif csum_type == 1:
        out = struct.pack("<Q", xxhash64(data))
    elif csum_type == 2:
        out = hashlib.sha256(data).digest()
    elif csum_type == 3:
        out = hashlib.blake2b(data, digest_size=32).digest()
    else:
        raise ValueError("unknown checksum type %d" % csum_type)
    return out + bytes(32 - len(out))


# ---------------------------------------------------------------- keys

class Key(tuple):
    """(objectid, type, offset), ordered like btrfs keys."""

    def __new__(cls, objectid, typ, offset):
        return tuple.__new__(cls, (objectid, typ, offset))

    objectid = property(lambda s: s[0])
    type = property(lambda s: s[1])
    offset = property(lambda s: s[2])

    def pack(self):
        return struct.pack("<QBQ", *self)

    @classmethod
    def unpack(cls, buf, off):
        return cls(*struct.unpack_from("<QBQ", buf, off))

    def __repr__(self):
        return "(%d %d %d)" % self


# ---------------------------------------------------------------- chunks

class Chunk:
    def __init__(self, logical, length, typ, stripe_len, stripes):
        self.logical, self.length, self.type, self.stripe_len = logical, length, typ, stripe_len
        self.stripes = stripes      # [(devid, physical)]

    def contains(self, logical):
        return self.logical <= logical < self.logical + self.length

    def copies(self, logical):
        profile_bits = self.type & 0x7F8  # RAID0, RAID1, DUP, RAID10, RAID5, RAID6, RAID1C3/4
        if profile_bits & ~(0x10 | 0x20 | 0x200 | 0x400):  # only single/DUP/RAID1(c3,c4)
            raise NotImplementedError("chunk profile 0x%x is not handled" % self.type)
        return [p + logical - self.logical for _, p in self.stripes]

    def __repr__(self):
        return "Chunk(0x%x @%d+%d %r)" % (self.type, self.logical, self.length, self.stripes)


def parse_chunk_item(buf, off):
    length, owner, stripe_len, typ = struct.unpack_from("<QQQQ", buf, off)
    num_stripes, = struct.unpack_from("<H", buf, off + 44)
    stripes = []
    for i in range(num_stripes):
        devid, phys = struct.unpack_from("<QQ", buf, off + 48 + 32 * i)
        stripes.append((devid, phys))
    return Chunk(0, length, typ, stripe_len, stripes), 48 + 32 * num_stripes


# ---------------------------------------------------------------- blocks

class Block:
    """One tree block in memory; edit it, then Image.write_block() it."""

    def __init__(self, image, logical, data):
        self.image = image
        self.logical = logical
        self.data = bytearray(data)

    # header
    def _h(self, fmt, off, value=None):
        if value is None:
            return struct.unpack_from(fmt, self.data, off)[0]
        struct.pack_into(fmt, self.data, off, value)
        return value

    def bytenr(self, v=None):
        return self._h("<Q", 48, v)

    def flags(self, v=None):
        return self._h("<Q", 56, v)

    def generation(self, v=None):
        return self._h("<Q", 80, v)

    def owner(self, v=None):
        return self._h("<Q", 88, v)

    def nritems(self, v=None):
        return self._h("<I", 96, v)

    def level(self, v=None):
        return self._h("<B", 100, v)

    @property
    def is_leaf(self):
        return self.level() == 0

    # leaves
    def item_key(self, slot):
        return Key.unpack(self.data, HEADER_SIZE + ITEM_SIZE * slot)

    def set_item_key(self, slot, key):
        self.data[HEADER_SIZE + ITEM_SIZE * slot:HEADER_SIZE + ITEM_SIZE * slot + 17] = key.pack()

    def item_loc(self, slot):
        """(offset in self.data, size) of the item's data."""
        off, size = struct.unpack_from("<II", self.data, HEADER_SIZE + ITEM_SIZE * slot + 17)
        return HEADER_SIZE + off, size

    def item_data(self, slot):
        off, size = self.item_loc(slot)
        return bytes(self.data[off:off + size])

    def items(self):
        return [(self.item_key(i), self.item_data(i)) for i in range(self.nritems())]

    def patch_item(self, slot, offset, fmt, value):
        """Overwrite a field inside the item's data (bounds checked)."""
        off, size = self.item_loc(slot)
        assert offset + struct.calcsize(fmt) <= size, (slot, offset, fmt, size)
        struct.pack_into(fmt, self.data, off + offset, value)

    def get_item(self, slot, offset, fmt):
        off, size = self.item_loc(slot)
        assert offset + struct.calcsize(fmt) <= size
        return struct.unpack_from(fmt, self.data, off + offset)[0]

    def free_space(self):
        n = self.nritems()
        end = HEADER_SIZE + ITEM_SIZE * n
        data_start = len(self.data) if n == 0 else min(self.item_loc(i)[0] for i in range(n))
        return data_start - end

    def rebuild_leaf(self, items):
        """Lay `items` [(Key, bytes)] out as btrfs does: headers ascending, data packed
        from the end of the block downwards."""
        ns = len(self.data)
        need = sum(ITEM_SIZE + len(d) for _, d in items)
        if HEADER_SIZE + need > ns:
            raise ValueError("leaf %d: %d items need %d bytes" % (self.logical, len(items), need))
        body = bytearray(ns - HEADER_SIZE)
        end = ns - HEADER_SIZE
        for i, (k, d) in enumerate(items):
            end -= len(d)
            body[end:end + len(d)] = d
            struct.pack_into("<QBQII", body, ITEM_SIZE * i, k[0], k[1], k[2], end, len(d))
        self.data[HEADER_SIZE:] = body
        self.nritems(len(items))

    def set_item_data(self, slot, data):
        items = self.items()
        items[slot] = (items[slot][0], bytes(data))
        self.rebuild_leaf(items)

    def insert_item(self, key, data, sort=True):
        """Insert at the key's sorted position (or at the end when sort=False); returns the slot."""
        items = self.items()
        keys = [k for k, _ in items]
        slot = bisect.bisect_left(keys, key) if sort else len(items)
        items.insert(slot, (Key(*key), bytes(data)))
        self.rebuild_leaf(items)
        return slot

    def delete_item(self, slot):
        items = self.items()
        del items[slot]
        self.rebuild_leaf(items)

    def find(self, objectid=None, typ=None, offset=None):
        """Slots whose key matches every given field."""
        out = []
        for i in range(self.nritems()):
            k = self.item_key(i)
            if ((objectid is None or k[0] == objectid) and (typ is None or k[1] == typ)
                    and (offset is None or k[2] == offset)):
                out.append(i)
        return out

    # nodes
    def ptr(self, slot):
        """(Key, blockptr, generation) of a node slot."""
        o = HEADER_SIZE + KEY_PTR_SIZE * slot
        return Key.unpack(self.data, o), *struct.unpack_from("<QQ", self.data, o + 17)

    def ptrs(self):
        return [self.ptr(i) for i in range(self.nritems())]

    def set_ptr(self, slot, key=None, blockptr=None, generation=None):
        k, b, g = self.ptr(slot)
        o = HEADER_SIZE + KEY_PTR_SIZE * slot
        struct.pack_into("<QBQQQ", self.data, o, *(key if key is not None else k),
                         b if blockptr is None else blockptr, g if generation is None else generation)

    def set_ptrs(self, ptrs):
        cap = (len(self.data) - HEADER_SIZE) // KEY_PTR_SIZE
        assert len(ptrs) <= cap, (len(ptrs), cap)
        body = bytearray(len(self.data) - HEADER_SIZE)
        for i, (k, b, g) in enumerate(ptrs):
            struct.pack_into("<QBQQQ", body, KEY_PTR_SIZE * i, *k, b, g)
        self.data[HEADER_SIZE:] = body
        self.nritems(len(ptrs))

    def first_key(self):
        return self.item_key(0) if self.is_leaf else self.ptr(0)[0]

    def __repr__(self):
        return "Block(%d level %d owner %d items %d)" % (
            self.logical, self.level(), self.owner(), self.nritems())


# ---------------------------------------------------------------- image

class Image:
    """A single-device btrfs image file opened for editing."""

    def __init__(self, path):
        self.path = str(path)
        self.f = open(self.path, "r+b")
        self.f.seek(0, 2)
        self.file_size = self.f.tell()
        self.sb = bytearray(self._pread(SUPER_OFFSETS[0], SUPER_SIZE))
        if self.sb[SB["magic"]:SB["magic"] + 8] != MAGIC:
            raise ValueError("%s: no btrfs superblock" % self.path)
        self.csum_type = self.super("csum_type")
        self.nodesize = self.super("nodesize")
        self.sectorsize = self.super("sectorsize")
        if self.csum_type not in (0, 1, 2, 3):
            raise ValueError("checksum type %d" % self.csum_type)
        self.fsid = bytes(self.sb[SB["fsid"]:SB["fsid"] + 16])
        self.chunks = []
        self._load_sys_chunks()
        self._load_chunk_tree()

    def close(self):
        self.f.close()

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()

    def _pread(self, off, n):
        self.f.seek(off)
        return self.f.read(n)

    def _pwrite(self, off, data):
        self.f.seek(off)
        self.f.write(data)

    # superblock
    def super(self, field):
        return struct.unpack_from("<" + SB_FMT[field], self.sb, SB[field])[0]

    def super_copies(self):
        return [o for o in SUPER_OFFSETS if o + SUPER_SIZE <= self.file_size
                and self._pread(o + SB["magic"], 8) == MAGIC]

    def edit_super(self, fn, copies=None):
        """Apply fn(bytearray) to every valid superblock copy (or the given offsets),
        recompute each checksum and write it back."""
        for off in (copies if copies is not None else self.super_copies()):
            buf = bytearray(self._pread(off, SUPER_SIZE))
            fn(buf)
            buf[0:32] = checksum(self.csum_type, bytes(buf[32:]))
            self._pwrite(off, buf)
            if off == SUPER_OFFSETS[0]:
                self.sb = buf
        self.f.flush()

    def set_super(self, copies=None, **fields):
        def fn(buf):
            for name, value in fields.items():
                struct.pack_into("<" + SB_FMT[name], buf, SB[name], value)
        self.edit_super(fn, copies)

    def sys_chunk_array(self):
        """[(Key, chunk item offset in sb, Chunk)] of the superblock's system chunk array."""
        n = self.super("sys_chunk_array_size")
        base = SB["sys_chunk_array"]
        out = []
        pos = 0
        while pos < n:
            key = Key.unpack(self.sb, base + pos)
            pos += 17
            chunk, size = parse_chunk_item(self.sb, base + pos)
            chunk.logical = key.offset
            out.append((key, base + pos, chunk))
            pos += size
        return out

    # chunk map
    def _add_chunk(self, chunk):
        for c in self.chunks:
            if c.logical == chunk.logical:
                return
        self.chunks.append(chunk)
        self.chunks.sort(key=lambda c: c.logical)

    def _load_sys_chunks(self):
        for _, _, chunk in self.sys_chunk_array():
            self._add_chunk(chunk)

    def _load_chunk_tree(self):
        for blk, slot in self.walk(self.super("chunk_root")):
            k = blk.item_key(slot)
            if k.type == CHUNK_ITEM:
                off, _ = blk.item_loc(slot)
                chunk, _ = parse_chunk_item(blk.data, off)
                chunk.logical = k.offset
                self._add_chunk(chunk)

    def chunk(self, logical):
        for c in self.chunks:
            if c.contains(logical):
                return c
        raise KeyError("logical %d is in no chunk" % logical)

    def physical(self, logical):
        """Physical offsets of every copy of `logical`."""
        return self.chunk(logical).copies(logical)

    # blocks
    def read_block(self, logical, verify=True):
        phys = self.physical(logical)[0]
        data = self._pread(phys, self.nodesize)
        blk = Block(self, logical, data)
        if verify:
            want = checksum(self.csum_type, bytes(blk.data[32:]))
            if bytes(blk.data[0:32]) != want:
                raise ValueError("block %d: checksum mismatch" % logical)
            if blk.bytenr() != logical:
                raise ValueError("block %d: header says bytenr %d" % (logical, blk.bytenr()))
        return blk

    def write_block(self, blk, logical=None, copies=None):
        """Write `blk` (checksum recomputed) to every copy of its logical address.

        `copies` limits the write to those mirror indices (0-based), to make one
        copy differ from the others on purpose."""
        logical = blk.logical if logical is None else logical
        blk.data[0:32] = checksum(self.csum_type, bytes(blk.data[32:]))
        for i, p in enumerate(self.physical(logical)):
            if copies is None or i in copies:
                self._pwrite(p, blk.data)
        self.f.flush()

    def new_block(self, logical, level, owner, generation, template=None):
        """A blank block addressed at `logical`, with this filesystem's fsid and
        chunk tree uuid (taken from `template` or the chunk root)."""
        src = template or self.read_block(self.super("chunk_root"))
        blk = Block(self, logical, bytes(self.nodesize))
        blk.data[32:48] = src.data[32:48]
        blk.data[64:80] = src.data[64:80]
        blk.bytenr(logical)
        blk.flags(src.flags())  # WRITTEN and MIXED_BACKREF_REV, as in the template
        blk.generation(generation)
        blk.owner(owner)
        blk.level(level)
        blk.nritems(0)
        return blk

    # trees
    def walk(self, root, visited=None):
        """(leaf Block, slot) for every item under `root`, in key order.

        Every block is visited at most once, so hostile images cannot make the
        editor itself loop."""
        visited = set() if visited is None else visited
        stack = [root]
        while stack:
            logical = stack.pop()
            if logical in visited:
                continue
            visited.add(logical)
            blk = self.read_block(logical)
            if blk.is_leaf:
                for slot in range(blk.nritems()):
                    yield blk, slot
            else:
                for _, b, _ in reversed(blk.ptrs()):
                    stack.append(b)

    def tree_blocks(self, root):
        """Every block of the tree at `root`, [(Block, parent Block or None, slot)]."""
        out = []
        seen = set()
        stack = [(root, None, None)]
        while stack:
            logical, parent, slot = stack.pop()
            if logical in seen:
                continue
            seen.add(logical)
            blk = self.read_block(logical)
            out.append((blk, parent, slot))
            if not blk.is_leaf:
                for i, (_, b, _) in reversed(list(enumerate(blk.ptrs()))):
                    stack.append((b, blk, i))
        return out

    def find_item(self, root, key_or_pred):
        """First (Block, slot) under `root` whose key equals the key (or satisfies the predicate)."""
        for blk, slot in self.walk(root):
            k = blk.item_key(slot)
            if (key_or_pred(k) if callable(key_or_pred) else k == tuple(key_or_pred)):
                return blk, slot
        return None

    def find_items(self, root, pred):
        return [(b, s) for b, s in self.walk(root) if pred(b.item_key(s))]

    def root_items(self):
        """{(objectid, offset): (Block, slot)} of every ROOT_ITEM in the root tree."""
        out = {}
        for blk, slot in self.walk(self.super("root")):
            k = blk.item_key(slot)
            if k.type == ROOT_ITEM:
                out[(k.objectid, k.offset)] = (blk, slot)
        return out

    def tree_root(self, tree_id):
        """(bytenr, level) of a tree named by a ROOT_ITEM in the root tree."""
        for (oid, _), (blk, slot) in self.root_items().items():
            if oid == tree_id:
                return (blk.get_item(slot, ROOT_ITEM_BYTENR, "<Q"),
                        blk.get_item(slot, ROOT_ITEM_LEVEL, "<B"))
        raise KeyError("no ROOT_ITEM for tree %d" % tree_id)

    def log_trees(self):
        """{subvolume id: (log ROOT_ITEM Block, slot)} in the log root tree."""
        out = {}
        lr = self.super("log_root")
        if not lr:
            return out
        for blk, slot in self.walk(lr):
            k = blk.item_key(slot)
            if k.type == ROOT_ITEM and k.objectid == TREE_LOG:
                out[k.offset] = (blk, slot)
        return out

    def all_roots(self):
        """[(name, bytenr)] of every tree the filesystem names, log trees included."""
        roots = [("root", self.super("root")), ("chunk", self.super("chunk_root"))]
        for (oid, off), (blk, slot) in sorted(self.root_items().items()):
            roots.append(("tree %d" % oid, blk.get_item(slot, ROOT_ITEM_BYTENR, "<Q")))
        if self.super("log_root"):
            roots.append(("log root", self.super("log_root")))
            for sub, (blk, slot) in sorted(self.log_trees().items()):
                roots.append(("log %d" % sub, blk.get_item(slot, ROOT_ITEM_BYTENR, "<Q")))
        return roots

    def used_tree_blocks(self):
        used = set()
        for _, root in self.all_roots():
            for blk, _, _ in self.tree_blocks(root):
                used.add(blk.logical)
        # blocks the extent tree still accounts for (pinned, freed later) stay off limits
        ext = self.tree_root(EXTENT_TREE)[0]
        for blk, slot in self.walk(ext):
            k = blk.item_key(slot)
            if k.type == METADATA_ITEM:
                used.add(k.objectid)
            elif k.type == EXTENT_ITEM and k.offset == self.nodesize:
                used.add(k.objectid)
        return used

    def free_tree_blocks(self, count):
        """`count` node-aligned logical addresses in metadata chunks that no tree and
        no extent item uses and whose copies stay clear of the superblock mirrors."""
        used = self.used_tree_blocks()
        out = []
        ns = self.nodesize
        for c in self.chunks:
            if not (c.type & BLOCK_GROUP_METADATA):
                continue
            addr = c.logical
            while addr + ns <= c.logical + c.length and len(out) < count:
                if addr not in used and self._clear_of_supers(addr):
                    out.append(addr)
                addr += ns
        if len(out) < count:
            raise RuntimeError("only %d free metadata blocks" % len(out))
        return out

    def _clear_of_supers(self, logical):
        for p in self.physical(logical):
            if p + self.nodesize > self.file_size:
                return False
            for s in SUPER_OFFSETS:
                if p < s + SUPER_SIZE and s < p + self.nodesize:
                    return False
        return True

    def leaf_path(self, root, key):
        """[(Block, slot)] from `root` down to the leaf slot holding `key` (or where it would go)."""
        path = []
        blk = self.read_block(root)
        while True:
            if blk.is_leaf:
                keys = [blk.item_key(i) for i in range(blk.nritems())]
                path.append((blk, bisect.bisect_left(keys, tuple(key))))
                return path
            keys = [k for k, _, _ in blk.ptrs()]
            slot = max(0, bisect.bisect_right(keys, tuple(key)) - 1)
            path.append((blk, slot))
            blk = self.read_block(blk.ptr(slot)[1])

    def insert_item(self, root, key, data):
        """Insert an item into the tree at `root` without splitting leaves (fails if the
        leaf has no room).  A new first key is propagated to the parents."""
        path = self.leaf_path(root, key)
        leaf, _ = path[-1]
        slot = leaf.insert_item(Key(*key), data)
        self.write_block(leaf)
        if slot == 0:
            for parent, pslot in reversed(path[:-1]):
                parent.set_ptr(pslot, key=Key(*key))
                self.write_block(parent)
                if pslot != 0:
                    break
        return leaf, slot


# ---------------------------------------------------------------- item builders

def dir_item(location, transid, name, ftype, data=b""):
    """DIR_ITEM / DIR_INDEX body: location key, transid, data_len, name_len, type, name."""
    return (Key(*location).pack() + struct.pack("<QHHB", transid, len(data), len(name), ftype)
            + name + data)


def parse_dir_item(data):
    """[(location Key, transid, type, name, xattr data)] of every entry packed in a DIR_ITEM."""
    out = []
    pos = 0
    while pos + 30 <= len(data):
        loc = Key.unpack(data, pos)
        transid, dlen, nlen, ftype = struct.unpack_from("<QHHB", data, pos + 17)
        name = bytes(data[pos + 30:pos + 30 + nlen])
        out.append((loc, transid, ftype, name, bytes(data[pos + 30 + nlen:pos + 30 + nlen + dlen])))
        pos += 30 + nlen + dlen
    return out


def inode_ref(index, name):
    return struct.pack("<QH", index, len(name)) + name


def parse_inode_refs(data):
    out = []
    pos = 0
    while pos + 10 <= len(data):
        index, nlen = struct.unpack_from("<QH", data, pos)
        out.append((index, bytes(data[pos + 10:pos + 10 + nlen])))
        pos += 10 + nlen
    return out


def inode_extref(parent, index, name):
    return struct.pack("<QQH", parent, index, len(name)) + name
