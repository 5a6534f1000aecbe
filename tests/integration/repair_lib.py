# SPDX-License-Identifier: MIT
"""What the repair tests (test_repair_corpus.py, test_repair_crash.py, test_repair_vs_btrfs.py)
share: which files an image gives back, byte-for-byte comparison of sparse images, and the
two repairs run the same way every time.

"Readable files" are what `ubtrfs restore --no-scavenge` writes out whole: each regular
file's path with the sha256 of its bytes, each symlink's target, each directory, less the
files its --report names as damaged (a file whose data could not all be read). The same
reader judges before and after every repair, so "never worse" compares like with like.
"""

import hashlib
import json
import os
import shutil
import subprocess

import ubtrfs_testlib as T

SANITIZER_MARKERS = (b"ERROR: AddressSanitizer", b"runtime error:", b"LeakSanitizer",
                     b"ERROR: ThreadSanitizer")


def sanitizer_report(stderr):
    return any(m in stderr for m in SANITIZER_MARKERS)


def _sha_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def devices(img):
    """An image path, or a list of them (every device of the filesystem), as argv words."""
    return [str(i) for i in img] if isinstance(img, (list, tuple)) else [str(img)]


def readable_files(img, work, timeout=60):
    """{path: what it holds} of what restore gets out whole, and restore's exit code. `img`:
    an image, or the list of a filesystem's devices."""
    out = os.path.join(work, "restore-out")
    report = os.path.join(work, "restore-report.json")
    shutil.rmtree(out, ignore_errors=True)
    if os.path.exists(report):
        os.unlink(report)
    try:
        cp = subprocess.run([str(T.ubtrfs_binary()), "restore", "-q", "--no-scavenge", "--no-privileged",
                             "--report", report, *devices(img), out], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    except subprocess.TimeoutExpired:
        shutil.rmtree(out, ignore_errors=True)
        raise AssertionError("restore of %s: no exit within %d s" % (img, timeout))
    assert not sanitizer_report(cp.stderr), cp.stderr[-4000:].decode(errors="replace")
    damaged = set()
    if os.path.exists(report):
        with open(report, "rb") as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if isinstance(rec, dict) and isinstance(rec.get("path"), str):
                    damaged.add(rec["path"].lstrip("/"))
        os.unlink(report)
    files = {}
    if os.path.isdir(out):
        for root, dirs, names in os.walk(out):
            for n in dirs + names:
                p = os.path.join(root, n)
                rel = os.path.relpath(p, out)
                if rel in damaged:
                    continue
                if os.path.islink(p):
                    files[rel] = "link:" + os.readlink(p)
                elif os.path.isdir(p):
                    files[rel] = "dir"
                elif os.path.isfile(p):
                    files[rel] = _sha_file(p)
        # restore keeps what it made with the filesystem's modes: a directory without
        # write permission cannot be removed until it has it again
        for root, dirs, _ in os.walk(out):
            for n in dirs:
                p = os.path.join(root, n)
                if not os.path.islink(p):
                    os.chmod(p, 0o700)
        shutil.rmtree(out, ignore_errors=True)
    return files, cp.returncode


def _data_ranges(fd, size):
    """The [start, end) ranges of a sparse file that hold data (the rest reads as zeros)."""
    out, pos = [], 0
    while pos < size:
        try:
            start = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError:
            break
        end = os.lseek(fd, start, os.SEEK_HOLE)
        out.append((start, end))
        pos = end
    return out


def same_bytes(a, b):
    """Whether two (sparse, perhaps terabytes long) images hold the same bytes: only the
    ranges where either holds data are read, holes being zeros."""
    if os.path.getsize(a) != os.path.getsize(b):
        return False
    size = os.path.getsize(a)
    with open(a, "rb") as fa, open(b, "rb") as fb:
        ranges = sorted(_data_ranges(fa.fileno(), size) + _data_ranges(fb.fileno(), size))
        merged = []
        for s, e in ranges:
            if merged and s <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], e)
            else:
                merged.append([s, e])
        for s, e in merged:
            pos = s
            while pos < e:
                n = min(e - pos, 1 << 20)
                if os.pread(fa.fileno(), n, pos) != os.pread(fb.fileno(), n, pos):
                    return False
                pos += n
    return True


def copy_sparse(src, dst):
    T.run(["cp", "--sparse=always", str(src), str(dst)])


def ubtrfs_repair(img, undo, timeout=120):
    """`ubtrfs check --repair` with an undo file; the run (a hang fails the test)."""
    try:
        return subprocess.run([str(T.ubtrfs_binary()), "check", "--repair", "--undo-file", str(undo), str(img)],
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError("ubtrfs check --repair %s: no exit within %d s" % (img, timeout))


def btrfs_repair(img, timeout=120):
    """`btrfs check --repair --force`: on a filesystem nothing mounts, --force only skips
    the ten-second countdown btrfs-progs 6.2 gives a repair (its own tests run it so).
    Its exit code and output; (None, b"") when it did not finish in time."""
    try:
        cp = subprocess.run(["btrfs", "check", "--repair", "--force", str(img)], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, b""
    return cp.returncode, cp.stdout + cp.stderr


def btrfs_check_clean(img, timeout=120):
    try:
        cp = subprocess.run(["btrfs", "check", "--readonly", str(img)], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False
    return cp.returncode == 0


def ubtrfs_check(img, timeout=60):
    """Exit code and the problems (class and message of each JSON record) of `ubtrfs check`
    (`img`: an image or a list of devices)."""
    try:
        cp = subprocess.run([str(T.ubtrfs_binary()), "check", "--json", *devices(img)], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError("ubtrfs check %s: no exit within %d s" % (img, timeout))
    assert not sanitizer_report(cp.stderr), cp.stderr[-4000:].decode(errors="replace")
    probs = []
    for line in cp.stdout.decode(errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if "summary" not in rec:
            probs.append((rec.get("class"), rec.get("message") or rec.get("msg")))
    return cp.returncode, sorted(probs, key=repr)
