# SPDX-License-Identifier: MIT
"""Image recipes for the integration tests, built lazily and cached per session.

Two families: `mkfs.btrfs --rootdir` images (btrfs-progs writes them) and
kernel-made images (mkfs, then loop-mount read-write and copy in / change
things through the kernel).  Either way the read oracle is the kernel's
read-only view of the finished image.
"""

import os
import pickle
import random
import threading
from pathlib import Path

import ubtrfs_testlib as T

MiB = T.MiB
MAIN_SEED = 20240501


class Image:
    def __init__(self, name, devices, recipe, info=None):
        self.name = name
        self.devices = [str(d) for d in devices]
        self.recipe = recipe      # human-readable, for reports
        self.info = info or {}

    def __repr__(self):
        return "Image(%s)" % self.name


def _mkfs(devices, *opts):
    T.run(["mkfs.btrfs", "-f", "-q", *opts, *[str(d) for d in devices]])


def _sparse_file(path, size):
    with open(path, "wb") as f:
        f.truncate(size)
    return path


def _cp_all(src, dst):
    T.run(["cp", "-a", "%s/." % src, str(dst)])


# ---- extra populations done through the kernel mount

def _fragmented_file(path, rng, blocks):
    """One 4 KiB extent per block: random write order, fsync after each."""
    order = list(range(blocks))
    rng.shuffle(order)
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
    try:
        for blk in order:
            os.pwrite(fd, rng.randbytes(4096), blk * 4096)
            os.fsync(fd)
    finally:
        os.close(fd)


def _prealloc_files(mnt, rng):
    # prealloc range with a few written blocks inside (mixed prealloc/regular extents)
    fd = os.open(os.path.join(mnt, "prealloc"), os.O_CREAT | os.O_RDWR, 0o644)
    try:
        os.posix_fallocate(fd, 0, 8 * MiB)
        os.fsync(fd)
        for off in (0, 4096 * 3, 1 * MiB + 4096, 5 * MiB - 4096, 8 * MiB - 4096):
            os.pwrite(fd, rng.randbytes(4096), off)
            os.fsync(fd)
        # preallocated beyond EOF: must not show up as file data
        T.fallocate(fd, T.FALLOC_FL_KEEP_SIZE, 8 * MiB, 2 * MiB)
    finally:
        os.close(fd)
    # an unwritten preallocated file, only zeros
    fd = os.open(os.path.join(mnt, "prealloc_only"), os.O_CREAT | os.O_RDWR, 0o600)
    try:
        os.posix_fallocate(fd, 0, 3 * MiB + 5)
    finally:
        os.close(fd)
    # punched holes in a written file
    fd = os.open(os.path.join(mnt, "punched"), os.O_CREAT | os.O_RDWR, 0o644)
    try:
        os.write(fd, rng.randbytes(4 * MiB))
        os.fsync(fd)
        for off, ln in ((0, 4096), (65536, 3 * 4096), (1 * MiB + 100, 200000), (4 * MiB - 8192, 8192)):
            T.fallocate(fd, T.FALLOC_FL_PUNCH_HOLE | T.FALLOC_FL_KEEP_SIZE, off, ln)
        os.fsync(fd)
    finally:
        os.close(fd)


def _nodatacow_file(mnt, rng):
    """Data without checksums (+C must be set while the file is empty)."""
    path = os.path.join(mnt, "nodatacow")
    open(path, "wb").close()
    T.run(["chattr", "+C", path])
    with open(path, "r+b") as f:
        f.write(rng.randbytes(3 * MiB + 1000))
        f.flush()
        os.fsync(f.fileno())
        f.seek(1 * MiB)
        f.write(b"overwritten in place" * 100)


def _subvol_population(mnt, src, rng):
    m = Path(mnt)
    T.run(["btrfs", "subvolume", "create", m / "subvol"])
    for d in ("sizes", "links", "xattrs", "sparse", "symlinks", "special", "modes"):
        T.run(["cp", "-a", Path(src) / d, m / "subvol" / d])
    T.run(["cp", "-a", Path(src) / "names", m / "top_names"])
    big = sorted((m / "subvol" / "sizes").glob("f3145851_*"))[0]
    T.run(["cp", "--reflink=always", big, m / "subvol" / "reflinked"])
    T.run(["cp", "--reflink=always", big, m / "reflink_at_top"])
    # a subvolume below a directory owned by someone else: the snapshots do not take it
    # along and show an empty placeholder directory, owned like the directory holding it
    held = m / "subvol" / "holder"
    held.mkdir()
    T.run(["btrfs", "subvolume", "create", held / "left_behind"])
    (held / "left_behind" / "inside").write_bytes(b"not in the snapshots\n")
    os.chown(held, 4321, 8765)
    os.chmod(held, 0o750)
    os.utime(held, ns=(1111111111 * 10**9 + 111, 1222222222 * 10**9 + 222))
    T.run(["sync"])
    T.run(["btrfs", "subvolume", "snapshot", m / "subvol", m / "snap"])
    T.run(["btrfs", "subvolume", "snapshot", "-r", m / "subvol", m / "snap_ro"])
    s = m / "subvol"
    # modify in place, in the middle of a shared extent
    with open(big, "r+b") as f:
        f.seek(1 * MiB + 3)
        f.write(b"CHANGED AFTER SNAPSHOT" * 50)
    # a compressible file: with compress-force this leaves partial references
    # (extent offset != 0) into compressed extents
    with open(sorted((s / "sizes").glob("f5242879_*"))[0], "r+b") as f:
        f.seek(2 * MiB + 5000)
        f.write(rng.randbytes(4096))
    with open(s / "reflinked", "r+b") as f:
        f.seek(12345)
        f.write(rng.randbytes(70000))
    # append
    with open(sorted((s / "sizes").glob("f0004097_*"))[0], "ab") as f:
        f.write(rng.randbytes(10000))
    # truncate
    victim = sorted((s / "sizes").glob("f1048583_*"))[0]
    os.truncate(victim, 5000)
    # delete files and a whole directory
    rnd = sorted((s / "sizes" / "random").iterdir())
    for p in rnd[::3]:
        p.unlink()
    T.run(["rm", "-rf", s / "symlinks"])
    os.unlink(s / "links" / "b")
    # new files, rename, attribute changes
    (s / "new_dir").mkdir()
    for i in range(20):
        (s / "new_dir" / ("new%02d" % i)).write_bytes(rng.randbytes(rng.randint(0, 200000)))
    os.rename(s / "sizes" / "random", s / "sizes" / "renamed_random")
    os.chmod(s / "modes" / "mode_0600", 0o640)
    os.chown(s / "links" / "a", 4242, 4343)
    os.setxattr(s / "xattrs" / "x3", "user.added_later", b"after snapshot")
    os.removexattr(s / "xattrs" / "x4", "user.large")
    os.link(s / "links" / "big", s / "new_dir" / "big_again")
    # a nested subvolume created after the snapshots
    T.run(["btrfs", "subvolume", "create", s / "nested"])
    (s / "nested" / "inner.txt").write_bytes(T.text_bytes(rng, 30000))
    (s / "nested" / "d").mkdir()
    (s / "nested" / "d" / "bin").write_bytes(rng.randbytes(100000))
    # the snapshot gets its own changes too
    (m / "snap" / "only_in_snap").write_bytes(b"snap-only\n")
    os.unlink(sorted((m / "snap" / "sizes").glob("f0065536_*"))[0])


class ImageFactory:
    """Source trees, images and kernel views by name.

    Each is made once per test run: under pytest-xdist the workers share them through
    the run's shared directory (ubtrfs_testlib.shared_build: a lock per recipe, the
    first worker to ask builds, the others wait and reuse), so a worker never rebuilds
    what another one made. Images are read-only to the tests: a test that damages one
    works on a copy (fresh_path, private to the worker).
    """

    def __init__(self, base):
        self.base = Path(base)
        self.lock = threading.RLock()
        self.sources = {}
        self.images = {}
        self.views = {}
        self.mnt_counter = 0

    def mountpoint(self):
        with self.lock:
            self.mnt_counter += 1
            return self.base / "mnt" / ("m%03d" % self.mnt_counter)

    def _shared(self, key, build):
        return T.shared_build(key, build, fallback_dir=self.base / "shared")

    # ---- source trees

    def source(self, name):
        with self.lock:
            if name not in self.sources:
                if name not in ("main", "many", "damage"):
                    raise KeyError(name)
                d, _ = self._shared("source-%s%s" % (name, "-long" if T.LONG_TESTS else ""),
                                    lambda d: self._make_source(name, d / "tree"))
                self.sources[name] = d / "tree"
            return self.sources[name]

    @staticmethod
    def _make_source(name, path):
        if name == "main":
            T.make_source_tree(path, MAIN_SEED, scale=3.0 if T.LONG_TESTS else 1.0)
        elif name == "many":
            T.make_source_tree(path, MAIN_SEED + 1, scale=0.2, many_small=3000)
        else:
            T.make_source_tree(path, MAIN_SEED + 2, scale=0.3, many_small=800)

    # ---- images

    def image(self, name):
        with self.lock:
            if name not in self.images:
                _, got = self._shared("image-%s%s" % (name, "-long" if T.LONG_TESTS else ""),
                                      lambda d: self._build_into(name, d))
                self.images[name] = Image(name, got["devices"], got["recipe"], got["info"])
            return self.images[name]

    def _build_into(self, name, directory):
        self._img_dir = Path(directory)
        try:
            im = self._build(name)
        finally:
            self._img_dir = None
        return {"devices": im.devices, "recipe": im.recipe, "info": im.info}

    def view(self, image):
        with self.lock:
            if image.name not in self.views:
                def build(d):
                    v = T.kernel_view(image.devices, self.mountpoint())
                    with open(d / "view.pickle", "wb") as f:
                        pickle.dump((v.entries, v.hashes), f)
                    return None
                d, _ = self._shared("view-%s%s" % (image.name, "-long" if T.LONG_TESTS else ""), build)
                with open(d / "view.pickle", "rb") as f:
                    entries, hashes = pickle.load(f)
                self.views[image.name] = T.KernelView(entries, hashes)
            return self.views[image.name]

    def fresh_path(self, name):
        """A path for a file of the calling test's own (a damaged copy...), private to this worker."""
        d = self.base / "img"
        d.mkdir(parents=True, exist_ok=True)
        return d / name

    def _image_path(self, name):
        return self._img_dir / name

    def _build(self, name):
        parts = name.split("-")
        if parts[0] == "rootdir" and len(parts) == 3:
            # rootdir-<csum>-<nodesize>
            csum, nodesize = parts[1], parts[2]
            img = _sparse_file(self._image_path(name + ".img"), 512 * MiB)
            opts = ["--csum", csum, "-n", nodesize, "-s", "4096", "-L", "ub-%s" % name[8:],
                    "--rootdir", str(self.source("main"))]
            _mkfs([img], *opts)
            return Image(name, [img], "mkfs.btrfs %s (512 MiB file)" % " ".join(opts))
        if name in ("kernel-plain", "kernel-zlib", "kernel-lzo", "kernel-zstd"):
            algo = parts[1]
            mount_opts = "" if algo == "plain" else "compress-force=%s" % algo
            return self._kernel_image(name, [], mount_opts, lambda m: _cp_all(self.source("main"), m),
                                      "mkfs.btrfs (defaults, 512 MiB); mount -o %s; cp -a SRC/. MNT/"
                                      % (mount_opts or "defaults"))
        if name in ("kernel-subvol", "kernel-subvol-zstd"):
            rng = random.Random(MAIN_SEED + 10)
            mount_opts = "compress-force=zstd" if name.endswith("zstd") else ""
            return self._kernel_image(
                name, [], mount_opts, lambda m: _subvol_population(m, self.source("main"), rng),
                "mkfs.btrfs; mount %s; subvolume 'subvol' + copies + reflinks; snapshot 'snap' and "
                "read-only 'snap_ro'; then modify/append/truncate/delete/rename/new files/nested "
                "subvolume in subvol, small change in snap" % (mount_opts or "(defaults)"))
        if name == "kernel-many":
            rng = random.Random(MAIN_SEED + 11)

            def pop(m):
                _cp_all(self.source("many"), m)
                _fragmented_file(os.path.join(m, "fragmented"), rng, 1500 if not T.LONG_TESTS else 6000)
                _prealloc_files(m, rng)
                _nodatacow_file(m, rng)
            return self._kernel_image(name, [], "", pop,
                                      "mkfs.btrfs; mount; cp -a (3000 small files in one dir); "
                                      "1500 x 4 KiB random-order writes with fsync; prealloc, "
                                      "punched-hole and chattr +C (no checksums) files")
        if name == "kernel-noholes":
            rng = random.Random(MAIN_SEED + 12)

            def pop(m):
                _cp_all(self.source("main"), m)
                _prealloc_files(m, rng)
            return self._kernel_image(name, ["-O", "^no-holes"], "", pop,
                                      "mkfs.btrfs -O ^no-holes; mount; cp -a SRC/.; prealloc and "
                                      "punched-hole files")
        if name in PROFILE_DEVICES:
            profile = parts[1]
            ndev = PROFILE_DEVICES[name]
            meta = {"raid0": "raid1", "raid5": "raid5", "raid6": "raid6"}.get(profile, profile)
            opts = ["-d", profile, "-m", meta]
            return self._kernel_image(name, opts, "", lambda m: _cp_all(self.source("main"), m),
                                      "mkfs.btrfs %s on %d x 384 MiB files; mount; cp -a SRC/. MNT/"
                                      % (" ".join(opts), ndev), ndev=ndev, size=384 * MiB)
        if name == "rootdir-mixed":
            img = _sparse_file(self._image_path(name + ".img"), 512 * MiB)
            opts = ["--mixed", "-n", "4096", "-s", "4096", "--rootdir", str(self.source("main"))]
            _mkfs([img], *opts)
            return Image(name, [img], "mkfs.btrfs %s (512 MiB file)" % " ".join(opts))
        if name == "damage-base":
            img = _sparse_file(self._image_path(name + ".img"), 256 * MiB)
            _mkfs([img], "--rootdir", str(self.source("damage")))
            return Image(name, [img], "mkfs.btrfs --rootdir SRC (defaults: DUP metadata, 16 KiB "
                         "nodes, single data) on a 256 MiB file")
        raise KeyError(name)

    def _kernel_image(self, name, mkfs_opts, mount_opts, populate, recipe, ndev=1, size=512 * MiB):
        devs = [_sparse_file(self._image_path("%s.%d.img" % (name, i)), size) for i in range(ndev)]
        _mkfs(devs, *mkfs_opts)
        with T.mounted(devs, self.mountpoint(), options=mount_opts, readonly=False) as m:
            populate(m)
            T.run(["sync"])
        return Image(name, devs, recipe)

    def cleanup(self):
        T.rmtree(self.base)


# Multi-device (and DUP data) images made by the kernel: name -> number of devices.
PROFILE_DEVICES = {"kernel-dup": 1, "kernel-raid1": 2, "kernel-raid0": 2, "kernel-raid10": 4,
                   "kernel-raid1c3": 3, "kernel-raid5": 3, "kernel-raid6": 4}
ROOTDIR_IMAGES = ["rootdir-crc32c-16384", "rootdir-xxhash-16384", "rootdir-sha256-16384",
                  "rootdir-blake2-16384", "rootdir-crc32c-4096", "rootdir-crc32c-65536",
                  "rootdir-mixed"]
KERNEL_IMAGES = ["kernel-plain", "kernel-zlib", "kernel-lzo", "kernel-zstd", "kernel-subvol",
                 "kernel-subvol-zstd", "kernel-many", "kernel-noholes"] + sorted(PROFILE_DEVICES)
READ_IMAGES = ROOTDIR_IMAGES + KERNEL_IMAGES
