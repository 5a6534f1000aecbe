# SPDX-License-Identifier: MIT
"""Session fixtures: scratch space, the image factory, the binary under test.

Environment:
  UBTRFS              binary under test (default: <repo>/build/ubtrfs)
  UBTRFS_LONG_TESTS=1 larger trees and exhaustive reads
  UBTRFS_KEEP_IMAGES=1 leave the scratch directory behind for debugging

Under pytest-xdist (`make integration` runs `-n 2 --dist loadgroup`) every worker
has its own session: its own scratch directory, mount points and leftovers check.
What is expensive to make and only read afterwards (source trees, images, kernel
views) lives in one directory shared by the whole run (ubtrfs_testlib.shared_build),
created here by the controlling process before the workers start and removed, after
its own leftovers check, when the run ends.

A module stays correct on several workers when it
  * attaches and mounts only through ubtrfs_testlib (losetup_attach, mounted: a
    machine-wide lock makes `losetup --find` race-free, and a device-less `btrfs device
    scan --forget` never overlaps a mount), and works below `scratch` or `tmp_path`;
  * builds what several tests read through T.shared_build (or the factory), keyed by
    everything the recipe depends on, and damages only copies of it;
  * or, when a module-scoped fixture builds something that cannot be shared (a crash
    image whose state depends on timing), marks those tests
    `pytest.mark.xdist_group(NAME)` so that one worker runs them all.
"""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import ubtrfs_images as I  # noqa: E402
import ubtrfs_testlib as T  # noqa: E402


def _is_worker(config):
    return hasattr(config, "workerinput")


def pytest_configure(config):
    # without pytest-xdist the group marks are plain (registered) marks
    config.addinivalue_line("markers", "xdist_group(name): tests pytest-xdist runs on one worker")
    if _is_worker(config) or os.environ.get(T.SHARED_ENV):
        return
    T.sweep_stale_scratch()
    d = T.make_scratch_dir(prefix="ubtrfs-it-shared-")
    # workers are started after this hook and inherit the environment
    os.environ[T.SHARED_ENV] = d
    config._ubtrfs_shared = d


def pytest_sessionfinish(session, exitstatus):
    d = getattr(session.config, "_ubtrfs_shared", None)
    if not d:
        return
    # every worker has finished: what is still attached or mounted from the shared
    # images is a leak (each worker also checks its own registry)
    loops, mounts = T.leftovers(d)
    for mp in reversed(mounts):
        T.run(["umount", "-l", mp], check=False)
    for line in loops:
        T.run(["losetup", "-d", line.split()[0]], check=False)
    if loops or mounts:
        print("\nleft behind from the shared images: loops %r mounts %r" % (loops, mounts))
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_unconfigure(config):
    d = getattr(config, "_ubtrfs_shared", None)
    if not d:
        return
    os.environ.pop(T.SHARED_ENV, None)
    if os.environ.get("UBTRFS_KEEP_IMAGES") == "1":
        print("\nshared images kept in %s" % d)
    else:
        T.rmtree(d)


def pytest_collection_modifyitems(config, items):
    if os.geteuid() != 0:
        skip = pytest.mark.skip(reason="integration tests need root (loop devices, mount)")
        for item in items:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def scratch():
    base = T.make_scratch_dir()
    yield base
    loops, mounts = T.leftovers(base)
    # Leave nothing behind even when a test leaked, then fail loudly about it.
    for mp in reversed(mounts):
        T.run(["umount", "-l", mp], check=False)
    for line in loops:
        T.run(["losetup", "-d", line.split()[0]], check=False)
    if os.environ.get("UBTRFS_KEEP_IMAGES") != "1":
        T.rmtree(base)
    assert not loops and not mounts, "left behind: loops %r mounts %r" % (loops, mounts)
    assert not T.REGISTRY.loops and not T.REGISTRY.mounts, \
        "registry not empty: %r %r" % (T.REGISTRY.loops, T.REGISTRY.mounts)


@pytest.fixture(scope="session")
def factory(scratch):
    return I.ImageFactory(scratch)


@pytest.fixture(scope="session")
def ubtrfs_bin(scratch):
    b = T.ubtrfs_binary()
    if not (b.is_file() and os.access(b, os.X_OK)):
        pytest.skip("binary under test not built: %s (set UBTRFS=...)" % b)
    return T.snapshot_binary(scratch)


@pytest.fixture(scope="session", params=I.READ_IMAGES)
def read_image(request, factory):
    return factory.image(request.param)


# Modules that run the same read paths hundreds of times (every file of every image,
# every damage variant, every differential configuration) skip LeakSanitizer's exit
# scan, which is most of the cost of a short ASan run. Leaks are still caught by the
# unit tests, the fuzzers and every other module, which run the same commands with
# leak detection on.
NO_LEAK_SCAN_MODULES = {"test_multidev", "test_damage", "test_differential", "test_mutation"}


@pytest.fixture(autouse=True)
def _leak_scan_policy(request):
    name = request.module.__name__.rsplit(".", 1)[-1]
    old = os.environ.get("ASAN_OPTIONS")
    if name in NO_LEAK_SCAN_MODULES:
        os.environ["ASAN_OPTIONS"] = (old + ":" if old else "") + "detect_leaks=0"
    yield
    if old is None:
        os.environ.pop("ASAN_OPTIONS", None)
    else:
        os.environ["ASAN_OPTIONS"] = old
