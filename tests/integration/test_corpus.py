# SPDX-License-Identifier: MIT
"""Hostile-input corpus: every command on every btrfs-progs test image.

The images (fuzzed and deliberately corrupted filesystems from btrfs-progs'
fuzz-tests and fsck-tests, see <corpus>/README.md) are expected to be rejected
or reported on, never to crash or hang a command.  For each image and each
command the run must:

  * finish within COMMAND_TIMEOUT seconds (a timeout counts as a hang),
  * not be killed by a signal,
  * exit 0, 1 or 2,
  * leave no sanitizer report (ASan, UBSan, LeakSanitizer) on stderr,
  * when it exits non-zero, say why: a stderr line containing "error" with text
    naming what went wrong and where (a number or a path; see names_something),
  * for `ls --json`: every complete output line is a JSON object.

Adding a command is one line in COMMANDS (whole-image commands) or
FILE_COMMANDS (run on regular files that `ls -R --json` found).

Environment:
  UBTRFS                binary under test (default <repo>/build/ubtrfs)
  UBTRFS_CORPUS         corpus directory (default <repo>/../shared/corpus/btrfs-progs)
  UBTRFS_CORPUS_CACHE   where extracted images are kept between runs
                        (default /var/tmp/ubtrfs-corpus-<hash of the corpus>)
  UBTRFS_CORPUS_JOBS    commands run in parallel (default 2)
"""

import concurrent.futures
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

# the runner queues every selected image at once: one pytest-xdist worker runs them all
pytestmark = pytest.mark.xdist_group("corpus")

REPO = Path(__file__).resolve().parents[2]
COMMAND_TIMEOUT = 20
MAX_CAT_FILES = 20
JSON_CAP = 8 << 20      # bytes of `ls --json` output kept for parsing
STDERR_KEEP = 256 << 10  # bytes kept from each end of stderr

# name, argv ("{img}" is the image path); `writes` = the command may change the
# image, so it gets a private sparse copy instead of the shared cached one.
COMMANDS = [
    dict(name="dump-super", argv=["dump-super", "--all", "-f", "{img}"]),
    dict(name="dump-tree", argv=["dump-tree", "{img}"]),
    dict(name="dump-tree-fs", argv=["dump-tree", "-t", "fs", "{img}"]),
    dict(name="dump-tree-extent", argv=["dump-tree", "-t", "extent", "{img}"]),
    dict(name="dump-tree-csum", argv=["dump-tree", "-t", "csum", "{img}"]),
    dict(name="ls-long", argv=["ls", "-R", "-l", "{img}"]),
    dict(name="filesystem-show", argv=["filesystem", "show", "{img}"]),
    dict(name="find-root", argv=["find-root", "--backups-only", "{img}"]),
    # the root tree's items and paths, the space per profile and device, every file's extents and sharing
    dict(name="subvolume-list", argv=["subvolume", "list", "-a", "-pcguqR", "{img}"]),
    dict(name="filesystem-usage", argv=["filesystem", "usage", "{img}"]),
    dict(name="filesystem-du", argv=["filesystem", "du", "--path", "/", "{img}"]),
    # "{out}": a fresh folder for the command's output, removed after the run
    dict(name="restore", argv=["restore", "-q", "{img}", "{out}"]),
]
# (`ls -R -l --json` is not here: --json overrides -l (cmd/ls.c), so it is the same run
# as LIST_COMMAND below, whose output is also parsed)
# The listing whose output names the files FILE_COMMANDS run on.
LIST_COMMAND = dict(name="ls-json", argv=["ls", "-R", "--json", "{img}"], capture=True)
# "{path}" is a regular file's path inside the filesystem.
FILE_COMMANDS = [
    dict(name="cat", argv=["cat", "--path", "{path}", "{img}"]),
]

OK_EXIT = (0, 1, 2)
# Distinct exit codes for sanitizer deaths, so they never pass as "1".
ASAN_EXIT = 86
UBSAN_EXIT = 87
SANITIZER_MARKERS = (b"ERROR: AddressSanitizer", b"runtime error:", b"LeakSanitizer",
                     b"ERROR: UndefinedBehaviorSanitizer")
ERROR_LINE = re.compile(rb"error\b\W*(.*)", re.IGNORECASE)


# --------------------------------------------------------------------------
# locating and extracting the corpus

def corpus_dir():
    env = os.environ.get("UBTRFS_CORPUS")
    return Path(env) if env else REPO.parent / "shared" / "corpus" / "btrfs-progs"


def _image_name(archive):
    """'fuzz/bko-1.raw.xz' -> 'fuzz/bko-1' (the pytest id)."""
    rel = archive.relative_to(corpus_dir()).as_posix()
    for suffix in (".raw.tar.xz", ".raw.xz"):
        if rel.endswith(suffix):
            return rel[: -len(suffix)]
    return None


def list_images():
    """(name, archive path) of every image, sorted; empty when the corpus is absent."""
    base = corpus_dir()
    out = []
    for sub in ("fuzz", "fsck"):
        d = base / sub
        if not d.is_dir():
            continue
        for p in sorted(d.iterdir()):
            name = _image_name(p)
            if name and p.is_file():
                out.append((name, p))
    return out


def _corpus_hash(images):
    h = hashlib.sha256()
    for name, p in images:
        h.update(name.encode() + b"\0")
        h.update(hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()[:16]


def cache_dir(images):
    env = os.environ.get("UBTRFS_CORPUS_CACHE")
    return Path(env) if env else Path("/var/tmp") / ("ubtrfs-corpus-" + _corpus_hash(images))


def _run_tool(argv, cwd):
    cp = subprocess.run(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600)
    if cp.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (" ".join(map(str, argv)), cp.returncode,
                                                   cp.stderr.decode("utf-8", "replace")[-2000:]))


def extract(name, archive, cache):
    """The raw image for `name` in `cache`, extracting it first if needed.

    Extraction happens in a private temporary directory and the result is
    renamed into place, so an interrupted run never leaves a half image under
    the final name, and concurrent sessions do not trip over each other.
    """
    final = cache / (name + ".raw")
    if final.is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="tmp-", dir=cache))
    try:
        if archive.name.endswith(".raw.tar.xz"):
            # GNU tar restores the holes of a sparse member (-S).
            _run_tool(["tar", "-xSJf", str(archive), "-C", str(tmp)], tmp)
            raws = [p for p in tmp.rglob("*.raw") if p.is_file()]
            if len(raws) != 1:
                raise RuntimeError("%s: expected one .raw member, found %r" % (archive, raws))
            got = raws[0]
        else:
            # xz writes sparse output when it decompresses into a file of its own.
            local = tmp / archive.name
            shutil.copyfile(archive, local)
            _run_tool(["xz", "-d", str(local)], tmp)
            got = tmp / archive.name[: -len(".xz")]
        os.replace(got, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _clean_stale_tmp(cache, max_age=3600):
    """Leftovers of interrupted extractions (old enough not to be another session's)."""
    now = time.time()
    for p in cache.glob("tmp-*"):
        try:
            if now - p.stat().st_mtime > max_age:
                shutil.rmtree(p, ignore_errors=True)
        except OSError:
            pass


# --------------------------------------------------------------------------
# running one command

class Result:
    def __init__(self, label, argv):
        self.label = label
        self.argv = argv
        self.returncode = None
        self.timed_out = False
        self.stderr = b""
        self.sanitizer = False
        self.stdout = b""
        self.stdout_truncated = False
        self.seconds = 0.0
        self.problems = []

    def describe(self):
        lines = self.stderr.decode("utf-8", "replace").splitlines()
        # a sanitizer report matters more than the error lines before it
        start = next((i for i, line in enumerate(lines)
                      if any(m.decode() in line for m in SANITIZER_MARKERS)), None)
        if start is not None:
            shown = lines[max(0, start - 3): start + 60]
        else:
            shown = lines[-40:]
        if len(shown) < len(lines):
            shown = ["(%d of %d lines)" % (len(shown), len(lines))] + shown
        return "  [%s] %s\n    exit %s%s, %.1fs: %s\n    stderr:\n%s" % (
            self.label, " ".join(self.argv), self.returncode, " (TIMEOUT)" if self.timed_out else "",
            self.seconds, "; ".join(self.problems),
            "\n".join("      " + line for line in shown) or "      (empty)")


class _Sink(threading.Thread):
    """Reads a pipe to its end, keeping a bounded head (and optionally tail)."""

    def __init__(self, stream, head_cap, tail_cap=0):
        super().__init__(daemon=True)
        self.stream = stream
        self.head_cap = head_cap
        self.tail_cap = tail_cap
        self.head = bytearray()
        self.tail = bytearray()
        self.truncated = False
        self.marker = False
        self._carry = b""

    def run(self):
        longest = max(len(m) for m in SANITIZER_MARKERS)
        while True:
            chunk = self.stream.read(65536)
            if not chunk:
                break
            window = self._carry + chunk
            if any(m in window for m in SANITIZER_MARKERS):
                self.marker = True
            self._carry = window[-longest:]
            room = self.head_cap - len(self.head)
            if room > 0:
                self.head += chunk[:room]
                chunk = chunk[room:]
            if chunk:
                self.truncated = True
                if self.tail_cap:
                    self.tail += chunk
                    del self.tail[: max(0, len(self.tail) - self.tail_cap)]

    def data(self):
        if self.truncated and self.tail_cap:
            return bytes(self.head) + b"\n[... stderr cut ...]\n" + bytes(self.tail)
        return bytes(self.head)


def sanitizer_env():
    env = dict(os.environ)
    env["ASAN_OPTIONS"] = ":".join([
        "detect_leaks=1", "exitcode=%d" % ASAN_EXIT, "abort_on_error=0", "symbolize=1",
        "handle_abort=1", "detect_stack_use_after_return=0", env.get("ASAN_OPTIONS", "")]).rstrip(":")
    env["UBSAN_OPTIONS"] = ":".join([
        "print_stacktrace=1", "halt_on_error=1", "exitcode=%d" % UBSAN_EXIT,
        env.get("UBSAN_OPTIONS", "")]).rstrip(":")
    env["LSAN_OPTIONS"] = env.get("LSAN_OPTIONS", "exitcode=%d" % ASAN_EXIT)
    return env


def run_one(binary, label, argv, env, capture=False):
    full = [str(binary)] + argv
    res = Result(label, [os.fsdecode(a) if isinstance(a, bytes) else a for a in full])
    start = time.monotonic()
    proc = subprocess.Popen(full, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE if capture else subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env=env)
    err = _Sink(proc.stderr, STDERR_KEEP, STDERR_KEEP)
    err.start()
    out = None
    if capture:
        out = _Sink(proc.stdout, JSON_CAP)
        out.start()
    try:
        proc.wait(timeout=COMMAND_TIMEOUT)
    except subprocess.TimeoutExpired:
        res.timed_out = True
        proc.kill()
        proc.wait()
    err.join()
    if out:
        out.join()
        res.stdout = out.data()
        res.stdout_truncated = out.truncated
    res.seconds = time.monotonic() - start
    res.returncode = proc.returncode
    res.stderr = err.data()
    res.sanitizer = err.marker
    judge(res)
    return res


def judge(res):
    p = res.problems
    if res.timed_out:
        p.append("hang: no exit within %ds (killed)" % COMMAND_TIMEOUT)
    elif res.returncode < 0:
        p.append("killed by signal %d" % -res.returncode)
    elif res.returncode in (ASAN_EXIT, UBSAN_EXIT):
        p.append("sanitizer exit code %d" % res.returncode)
    elif res.returncode not in OK_EXIT:
        p.append("exit code %d not in %r" % (res.returncode, OK_EXIT))
    if res.sanitizer:
        p.append("sanitizer report on stderr")
    if not res.timed_out and res.returncode not in (0, None):
        if not any(names_something(line) for line in res.stderr.splitlines()):
            p.append("non-zero exit without an error line naming the problem")


def names_something(line):
    """Is `line` an error message that names what is wrong and where? It says "error",
    then at least a few words and a number (address, inode, devid, offset) or a path;
    a usage line ("Try 'ubtrfs ... --help'") is not one."""
    m = ERROR_LINE.search(line)
    if not m or b"--help" in line:
        return False
    text = m.group(1).strip()
    return len(text) >= 3 and re.search(rb"[0-9/]", line[m.start() + 5:]) is not None


def _regular_files(res):
    """Paths of regular files in `ls -R --json` output; complains into res about bad lines."""
    files = []
    lines = res.stdout.split(b"\n")
    last = len(lines) - 1
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        if i == last and (res.stdout_truncated or res.timed_out or res.returncode not in OK_EXIT):
            break  # cut short: the last line may be incomplete
        try:
            obj = json.loads(line.decode("utf-8"))  # strict: ls --json must be UTF-8 (docs/ls.md)
        except ValueError as e:
            res.problems.append("line %d of the JSON listing does not parse (%s): %r" % (i + 1, e, line[:200]))
            break
        if not isinstance(obj, dict):
            res.problems.append("line %d of the JSON listing is not an object" % (i + 1))
            break
        path = obj.get("path")
        if isinstance(obj.get("path_hex"), str):
            path = bytes.fromhex(obj["path_hex"])  # the raw bytes of a name that is not UTF-8
        elif isinstance(path, str):
            path = path.encode()
        if isinstance(path, bytes) and b"\0" in path:
            res.problems.append("line %d of the JSON listing has a path with a NUL: %r" % (i + 1, path[:200]))
            break
        if obj.get("type") == "file" and isinstance(path, bytes):
            files.append(path)
    return files


# --------------------------------------------------------------------------
# the session runner: commands for all selected images, 2 at a time

def _fill(argv, img, path=None, outdir=None):
    out = []
    for a in argv:
        if a == "{img}":
            out.append(str(img))
        elif a == "{out}":
            out.append(str(outdir))
        elif a == "{path}":
            out.append(os.fsencode(path))
        else:
            out.append(a)
    return out


class CorpusRunner:
    def __init__(self, binary, images, jobs):
        self.binary = binary
        self.archives = dict(images)
        self.cache = cache_dir(images)
        self.cache.mkdir(parents=True, exist_ok=True)
        _clean_stale_tmp(self.cache)
        self.env = sanitizer_env()
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=jobs)
        self.futures = {}
        self.lock = threading.Lock()
        self.started = time.monotonic()
        self.work_dir = Path(tempfile.mkdtemp(prefix="ubtrfs-corpus-work-"))

    def submit(self, names):
        with self.lock:
            for n in names:
                if n not in self.futures:
                    self.futures[n] = self.pool.submit(self._image, n)

    def results(self, name):
        self.submit([name])
        return self.futures[name].result()

    def _command(self, name, img, cmd, path=None):
        src = img
        copy = None
        if cmd.get("writes"):
            copy = self.work_dir / ("%s.%s.raw" % (name.replace("/", "_"), cmd["name"]))
            subprocess.run(["cp", "--sparse=always", str(img), str(copy)], check=True)
            src = copy
        outdir = self.work_dir / ("%s.%s.out" % (name.replace("/", "_"), cmd["name"]))
        try:
            label = cmd["name"] if path is None else "%s %s" % (cmd["name"], path)
            return run_one(self.binary, label, _fill(cmd["argv"], src, path, outdir), self.env,
                           capture=cmd.get("capture", False))
        finally:
            if copy:
                copy.unlink(missing_ok=True)
            shutil.rmtree(outdir, ignore_errors=True)

    def _image(self, name):
        """All commands for one image, in this worker thread."""
        img = extract(name, self.archives[name], self.cache)
        out = [self._command(name, img, c) for c in COMMANDS]
        listing = self._command(name, img, LIST_COMMAND)
        out.append(listing)
        files = _regular_files(listing)[:MAX_CAT_FILES]
        for c in FILE_COMMANDS:
            for i, path in enumerate(files):
                res = self._command(name, img, c, path)
                out.append(res)
                if res.timed_out and i + 1 < len(files):
                    # one hang is enough to fail the image; do not wait for each file in turn
                    res.problems.append("%d more files not tried with %s" % (len(files) - i - 1, c["name"]))
                    break
        return out

    def close(self):
        self.pool.shutdown(wait=True, cancel_futures=True)
        shutil.rmtree(self.work_dir, ignore_errors=True)


IMAGES = list_images()
if IMAGES:
    IMAGE_PARAMS = [pytest.param(n, id=n) for n, _ in IMAGES]
else:
    IMAGE_PARAMS = [pytest.param(None, id="no-corpus", marks=pytest.mark.skip(
        reason="corpus not found at %s (set UBTRFS_CORPUS)" % corpus_dir()))]


@pytest.fixture(scope="session")
def corpus_runner(request):
    binary = Path(os.environ.get("UBTRFS", str(REPO / "build" / "ubtrfs")))
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        pytest.skip("binary under test not built: %s (set UBTRFS=...)" % binary)
    jobs = int(os.environ.get("UBTRFS_CORPUS_JOBS", "2"))
    runner = CorpusRunner(binary, IMAGES, jobs)
    # Queue every selected image now so the pool stays busy while tests wait in order.
    selected = []
    for item in request.session.items:
        cs = getattr(item, "callspec", None)
        if cs and item.module.__name__ == __name__ and cs.params.get("image"):
            selected.append(cs.params["image"])
    runner.submit(selected)
    yield runner
    runner.close()
    done = [f.result() for f in runner.futures.values() if f.done() and not f.exception()]
    runs = sorted((r for rs in done for r in rs), key=lambda r: -r.seconds)
    print("\ncorpus: %d images, %d runs in %.1fs (cache %s); slowest: %s" % (
        len(runner.futures), len(runs), time.monotonic() - runner.started, runner.cache,
        ", ".join("%s %.1fs" % (r.label, r.seconds) for r in runs[:3])))


@pytest.mark.parametrize("image", IMAGE_PARAMS)
def test_corpus_image(corpus_runner, image):
    results = corpus_runner.results(image)
    bad = [r for r in results if r.problems]
    assert not bad, "%s: %d of %d runs failed:\n%s" % (
        image, len(bad), len(results), "\n".join(r.describe() for r in bad))
