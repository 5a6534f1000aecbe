# SPDX-License-Identifier: MIT
"""ubtrfs scrub on devices nothing has mounted, against the kernel and btrfs-progs.

Filesystems are made by the kernel (scrub_damage.make_fs: random and text
files, NODATACOW files, zstd, a reflink and a snapshot), damaged by the seeded
generator of scrub_damage.py, which records every change. Then:

  - within redundancy, every profile that has some (DUP, RAID1, RAID1C3,
    RAID10, RAID5, RAID6): tree blocks, checksummed data, and on RAID5/6 P and
    Q of live rows. Scrub reports each damaged place once and nothing else,
    rewrites it to exactly the bytes it had, a second scrub finds nothing, the
    kernel's scrub finds nothing, btrfs check --check-data-csum is clean, every
    file reads as it was written, and the device error counters scrub wrote
    are what the kernel then shows;
  - beyond redundancy (RAID1, RAID5): those places unrepairable, named with
    every file that owns them (the reflink and the snapshot too), not written;
    the rest repaired;
  - P/Q only (RAID5, RAID6): `-r` reports each without writing, the repair
    puts back the parity's bytes; the kernel's scrub of a copy of the same
    damage is run beside it and what it says is printed;
  - data without checksums (RAID1): copies that differ are reported with their
    owner and left alone; a damaged copy of never-written PREALLOC space is no
    one's data and is not reported;
  - cancel, kill -9 and resume; --limit;
  - online: the daemon of a ubtrfs mount scrubs while a random workload writes;
  - a crash during a repair (recorded writes, cut);
  - headers that name another block or generation, a bad superblock copy, read
    errors, an extent tree leaf that cannot be read.

Budget: about a minute under ASan on two cores.
"""

import json
import os
import random
import re
import shutil

import pytest

import multidev_lib as M
import scrub_damage as D
import ubtrfs_testlib as T
from test_engine import casedir, progs_check  # noqa: F401

MiB = T.MiB

# (name, devices, data profile, metadata profile, seed)
WITHIN = [
    ("dup", 1, "dup", "dup", 11),
    ("raid1", 2, "raid1", "raid1", 12),
    ("raid1c3", 3, "raid1c3", "raid1c3", 13),
    ("raid10", 4, "raid10", "raid10", 14),
    ("raid5", 4, "raid5", "raid5", 15),
    ("raid6", 6, "raid6", "raid6", 16),
]


@pytest.fixture(autouse=True)
def state_dir(tmp_path, monkeypatch):
    d = tmp_path / "state"
    monkeypatch.setenv("UBTRFS_STATE_DIR", str(d))
    return d


def scrub(*args, expect=None):
    """`ubtrfs scrub ... --json`: (exit code, [problem objects], summary object)."""
    cp = T.ubtrfs("scrub", *args, "--json")
    problems, summary = [], None
    for line in cp.stdout.decode().splitlines():
        if not line.startswith("{"):
            continue
        obj = json.loads(line)
        if "summary" in obj:
            summary = obj["summary"]
        else:
            problems.append(obj)
    assert cp.returncode != 2 and summary is not None, T.describe(cp)
    if expect is not None:
        assert cp.returncode == expect, T.describe(cp) + "\n" + "\n".join(map(str, problems[:20]))
    return cp.returncode, problems, summary


def overlaps(problem, rec):
    return (problem["devid"] == rec["devid"] and problem["physical"] < rec["physical"] + rec["length"]
            and rec["physical"] < problem["physical"] + problem["length"])


def describe_damage(records):
    return "\n".join("%s %s devid %d physical %d+%d copy %s" % (
        r["kind"], r.get("profile"), r["devid"], r["physical"], r["length"], r.get("copy")) for r in records)


@pytest.fixture
def loops_of():
    """Attach images (read-write) for the kernel's checks; detached whatever happens."""
    stack = []

    def attach(images):
        cm = M.attached(images)
        stack.append(cm)
        return cm.__enter__()
    yield attach
    while stack:
        stack.pop().__exit__(None, None, None)


def kernel_checks(images, hashes, mnt, stats=None):
    """btrfs check --check-data-csum, then the kernel mounts it: its scrub (-r) finds nothing, every
    file reads as written, its device counters are `stats` (devid order) when given."""
    progs_check(images, data=True)
    with M.attached(images) as loops:
        with M.mount_loops(loops, mnt):
            cp = T.run(["btrfs", "scrub", "start", "-B", "-r", mnt], check=False)
            out = (cp.stdout + cp.stderr).decode()
            assert cp.returncode == 0 and "no errors found" in out, "the kernel's scrub:\n" + out
            got = D.hash_tree(mnt)
            assert got == hashes, "files read differently: %r" % sorted(
                k for k in set(got) | set(hashes) if got.get(k) != hashes.get(k))
            if stats is not None:
                text = T.run(["btrfs", "device", "stats", mnt]).stdout.decode()
                kern = {}
                for dev, name, val in re.findall(r"^\[(.*)\]\.(\w+)\s+(\d+)$", text, re.M):
                    kern.setdefault(loops.index(dev) if dev in loops else dev, {})[name] = int(val)
                assert [kern[i] for i in range(len(loops))] == stats, text


def ub_stats(images):
    cp = T.ubtrfs("device", "stats", "--json", *images)
    assert cp.returncode == 0, T.describe(cp)
    devs = json.loads(cp.stdout)["devices"]
    return [{k: v for k, v in d.items() if k.endswith("errs")} for d in devs]


@pytest.mark.parametrize("name,ndev,data,meta,seed", WITHIN, ids=[w[0] for w in WITHIN])
def test_repairs_within_redundancy(casedir, ubtrfs_bin, name, ndev, data, meta, seed):  # noqa: F811
    images, hashes = D.make_fs(casedir, (data, meta), ndev, seed)
    lay = D.Layout(images)
    dmg = D.Damage(lay, random.Random(seed))
    parity = 6 if data in ("raid5", "raid6") else 0
    dmg.random_within(n_tree=5, n_data=10, n_parity=parity)
    dmg.save(str(casedir / "damage.json"))
    what = describe_damage(dmg.records)

    rc, problems, summary = scrub("start", "-B", *images, expect=1)
    for rec in dmg.records:
        hits = [p for p in problems if overlaps(p, rec)]
        assert hits, "damage not reported: %r\nreported:\n%s" % (rec, "\n".join(map(str, problems)))
        assert all(p["outcome"] == "repaired" for p in hits), (rec, hits)
        assert dmg.current(rec) == rec["before"], "not rewritten to its bytes: %r" % rec
    for p in problems:
        assert any(overlaps(p, r) for r in dmg.records), "reported, not damaged: %r\ndamage:\n%s" % (p, what)
    for p in problems:
        if p["kind"] == "checksum":
            assert p["files"], "no owner named: %r" % p
    # the counters scrub committed: each device's corruption errors, nothing else
    stats = ub_stats(images)
    assert sum(s["corruption_errs"] for s in stats) == sum(
        p["length"] // 4096 for p in problems if p["kind"] != "tree block generation")
    assert all(s["read_io_errs"] == s["write_io_errs"] == 0 for s in stats)

    rc, again, _ = scrub("start", "-B", *images, expect=0)
    assert not again
    kernel_checks(images, hashes, str(casedir / "mnt"), stats=stats)


@pytest.mark.parametrize("data", ["raid1", "raid5"])
def test_beyond_redundancy(casedir, ubtrfs_bin, data):  # noqa: F811
    ndev = {"raid1": 2, "raid5": 3}[data]
    images, hashes = D.make_fs(casedir, (data, "raid1"), ndev, 21)
    lay = D.Layout(images)
    dmg = D.Damage(lay, random.Random(21))
    # two sectors of the reflinked, snapshotted file lose every copy
    out = M.dump_tree(images, "5")
    ino = int(re.search(r"item \d+ key \((\d+) INODE_REF \d+\).*\n\s+index \d+ namelen 3 name: big\n", out).group(1))
    ext = T.file_extents(out, ino)
    foff, bytenr, _, eoff, nbytes, comp = ext[0]
    assert not comp and nbytes >= 3 * 4096
    lost = [(bytenr + eoff + 4096, foff + 4096), (bytenr + eoff + 2 * 4096, foff + 2 * 4096)]
    for logical, _ in lost:
        dmg.all_copies("data", logical, 4096)
    n_lost = len(dmg.records)
    dmg.random_within(n_tree=2, n_data=4)
    dmg.save(str(casedir / "damage.json"))

    rc, problems, _ = scrub("start", "-B", *images, expect=1)
    for rec in dmg.records[:n_lost]:
        if rec["kind"] in ("P", "Q"):
            continue
        hits = [p for p in problems if overlaps(p, rec)]
        assert hits and all(p["outcome"] == "unrepairable" for p in hits), "%r\n%r" % (rec, hits)
        assert dmg.current(rec) == rec["after"], "an unrepairable place was written: %r" % rec
        logical = rec["logical"]
        want_off = dict(lost)[logical]
        files = {(f["subvol"], f["path"], f["offset"]) for p in hits for f in p["files"]}
        assert files == {(5, "/big", want_off), (5, "/big.clone", want_off),
                         (256, "/big", want_off), (256, "/big.clone", want_off)}, hits
    for rec in dmg.records[n_lost:]:
        hits = [p for p in problems if overlaps(p, rec)]
        assert hits and all(p["outcome"] == "repaired" for p in hits), (rec, hits)
        assert dmg.current(rec) == rec["before"]
    # the second scrub: the unrepairable ones again, nothing else
    rc, again, _ = scrub("start", "-B", "-r", *images, expect=1)
    assert again and all(p["outcome"] == "unrepairable" and any(
        overlaps(p, r) for r in dmg.records[:n_lost]) for p in again), again


@pytest.mark.parametrize("data,ndev", [("raid5", 3), ("raid6", 4)])
def test_parity(casedir, ubtrfs_bin, data, ndev):  # noqa: F811
    images, hashes = D.make_fs(casedir, (data, "raid1"), ndev, 31)
    lay = D.Layout(images)
    dmg = D.Damage(lay, random.Random(31))
    dmg.random_within(n_tree=0, n_data=0, n_parity=8)
    dmg.save(str(casedir / "damage.json"))
    # the kernel's scrub of the same damage, on a copy
    kdir = casedir / "kernel"
    kimgs = M.copy_images(images, str(kdir), "k")
    with M.attached(kimgs) as loops:
        with M.mount_loops(loops, str(casedir / "kmnt")):
            cp = T.run(["btrfs", "scrub", "start", "-B", str(casedir / "kmnt")], check=False)
    kernel_said = (cp.stdout + cp.stderr).decode()
    rewritten = sum(1 for r in dmg.records
                    if D.hashlib.sha256(D._read(kimgs[images.index(r["image"])], r["physical"], r["length"])
                                        ).hexdigest() == r["before"])
    print("the kernel's scrub of %d damaged %s P/Q rows (it rewrote %d of them):\n%s"
          % (len(dmg.records), data, rewritten, kernel_said))

    rc, problems, summary = scrub("start", "-B", "-r", *images, expect=1)
    for rec in dmg.records:
        hits = [p for p in problems if overlaps(p, rec)]
        assert hits and all(p["kind"] == "parity" and p["outcome"] == "not repaired (read-only)"
                            and p["parity"] == rec["kind"] for p in hits), (rec, problems)
        assert dmg.current(rec) == rec["after"]
    assert len(problems) <= len(dmg.records)
    assert all(any(overlaps(p, r) for r in dmg.records) for p in problems)
    rc, problems, summary = scrub("start", "-B", *images, expect=1)
    for rec in dmg.records:
        assert dmg.current(rec) == rec["before"], "parity not recomputed to its bytes: %r" % rec
    assert sum(d["parity_fixed"] for d in summary["devices"]) >= len(dmg.records)
    scrub("start", "-B", *images, expect=0)
    shutil.rmtree(str(kdir), ignore_errors=True)


def test_nocsum_copies(casedir, ubtrfs_bin):  # noqa: F811
    images, hashes = D.make_fs(casedir, ("raid1", "raid1"), 2, 41)
    # a preallocated NODATACOW file, written in its first sector only
    with M.attached(images) as loops:
        with M.mount_loops(loops, str(casedir / "mnt")) as mnt:
            p = os.path.join(mnt, "nocow", "pre")
            with open(p, "wb") as f:
                os.posix_fallocate(f.fileno(), 0, 256 * 1024)
                f.write(b"w" * 4096)
            T.run(["sync"])
    lay = D.Layout(images)
    dmg = D.Damage(lay, random.Random(41))
    out = M.dump_tree(images, "5")
    owned, unwritten = [], []
    for m in re.finditer(r"key \((\d+) EXTENT_DATA (\d+)\).*\n\s+generation \d+ type (\d+) \((\w+)\)\n"
                         r"\s+(?:extent|prealloc) data disk byte (\d+) nr (\d+)\n"
                         r"\s+(?:extent|prealloc) data offset (\d+) nr (\d+)", out):
        ino, foff, typ, bytenr, eoff, nbytes = (int(m.group(1)), int(m.group(2)), m.group(4), int(m.group(5)),
                                                int(m.group(7)), int(m.group(8)))
        start = bytenr + eoff
        if start in lay.csummed or not bytenr:
            continue
        (unwritten if typ == "prealloc" else owned).append((start, nbytes, ino, foff))
    assert owned and unwritten, "test setup: no NODATACOW data or no PREALLOC extent\n" + out[-3000:]
    start, nbytes, ino, foff = owned[0]
    dmg.hit_copy("nocsum", start + 4096, 4096, 1)
    pstart, pbytes, _, _ = unwritten[0]
    dmg.hit_copy("nocsum", pstart + 8192, 4096, 1)
    dmg.save(str(casedir / "damage.json"))
    rc, problems, _ = scrub("start", "-B", *images, expect=1)
    assert len(problems) == 1, problems
    p = problems[0]
    # which copy is wrong is not known: the line names the place by its logical address and the copies
    assert p["kind"] == "copies differ" and p["outcome"] == "unrepairable", p
    assert p["logical"] == dmg.records[0]["logical"] and "copy 2" in p["detail"], p
    assert p["files"] and all(f["offset"] == foff + 4096 for f in p["files"]), p
    for rec in dmg.records:
        assert dmg.current(rec) == rec["after"], "data without checksums was rewritten: %r" % rec


def status(*images):
    cp = T.ubtrfs("scrub", "status", "--json", *images)
    assert cp.returncode == 0, T.describe(cp)
    return json.loads(cp.stdout)


def verified(summary):
    return sum(d["data_bytes_scrubbed"] + d["tree_bytes_scrubbed"] for d in summary["devices"])


def background(*args):
    """`scrub start|resume` without -B: the pid of the scrub it left running."""
    cp = T.ubtrfs("scrub", *args)
    assert cp.returncode == 0, T.describe(cp)
    m = re.search(r"\(pid=(\d+)\)", cp.stdout.decode())
    assert m, T.describe(cp)
    return int(m.group(1))


def wait_progress(images, pid):
    """Until the state shows bytes verified (the scrub saves it every second)."""
    for _ in range(150):
        st = status(*images)
        if st["status"] == "running" and verified(st) > 0:
            return st
        assert os.path.exists("/proc/%d" % pid), "the scrub ended before it showed progress: %r" % st
        T.time.sleep(0.1)
    pytest.fail("no progress in the state: %r" % st)


def wait_gone(pid):
    for _ in range(300):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        # reap it if it is our child (it is the ubtrfs's, normally)
        T.time.sleep(0.1)
    pytest.fail("scrub %d did not end" % pid)


def test_cancel_resume(casedir, ubtrfs_bin):  # noqa: F811
    images, hashes = D.make_fs(casedir, ("raid1", "raid1"), 2, 51)
    _, _, whole = scrub("start", "-B", "-r", *images, expect=0)
    total = verified(whole)
    # nothing running, nothing to resume: refused
    cp = T.ubtrfs("scrub", "resume", "-B", *images)
    assert cp.returncode == 2 and b"nothing to resume" in cp.stderr, T.describe(cp)
    cp = T.ubtrfs("scrub", "cancel", *images)
    assert cp.returncode == 2 and b"not running" in cp.stderr, T.describe(cp)

    # cancelled: aborted, where it got to kept; the resume verifies the rest and no more
    pid = background("start", "--limit", "512K", *images)
    wait_progress(images, pid)
    cp = T.ubtrfs("scrub", "cancel", *images)
    assert cp.returncode == 0, T.describe(cp)
    wait_gone(pid)
    st = status(*images)
    assert st["status"] == "aborted" and not any(d["finished"] for d in st["devices"]), st
    assert 0 < verified(st) < total, (verified(st), total)
    assert all(d["canceled"] for d in st["devices"]), st
    _, problems, summary = scrub("resume", "-B", *images, expect=0)
    assert summary["status"] == "finished" and verified(summary) == total, (summary, total)

    # killed: interrupted, then resumed the same way
    pid = background("start", "--limit", "512K", *images)
    wait_progress(images, pid)
    os.kill(pid, 9)
    wait_gone(pid)
    st = status(*images)
    assert st["status"] == "interrupted", st
    _, problems, summary = scrub("resume", "-B", *images, expect=0)
    assert summary["status"] == "finished" and verified(summary) == total, (summary, total)
    # a rate limit is kept: 4 MiB/s over each device's share takes its time
    t0 = T.time.time()
    scrub("start", "-B", "-r", "--limit", "4M", *images, expect=0)
    per_dev = max(d["data_bytes_scrubbed"] + d["tree_bytes_scrubbed"] for d in whole["devices"])
    assert T.time.time() - t0 >= per_dev / (4 * MiB) * 0.8


ONLINE_OPS = ("create", "write", "small_after_hole", "truncate", "punch", "fallocate", "rename", "link",
              "unlink", "symlink", "xattr", "attr", "mkdir", "rmdir", "fsync", "sync")


@pytest.mark.parametrize("data,ndev", [("raid1", 2), ("raid5", 3)])
def test_online_while_writing(casedir, ubtrfs_bin, data, ndev):  # noqa: F811
    """The mount's daemon scrubs while a random workload writes through it: the damage is found
    (repaired, or skipped where the workload replaced it meanwhile), nothing else is reported,
    what the mount shows at its end is what the kernel reads afterwards, btrfs check is clean."""
    import threading
    import workload as W
    from test_mount import fuse_mounted

    images, hashes = D.make_fs(casedir, (data, "raid1"), ndev, 61)
    lay = D.Layout(images)
    dmg = D.Damage(lay, random.Random(61))
    dmg.random_within(n_tree=3, n_data=6)
    dmg.save(str(casedir / "damage.json"))
    log = []
    with fuse_mounted(ubtrfs_bin, images, casedir / "um", "rw", log=log) as um:
        wl = W.Workload(os.path.join(um, "d"), 61, max_bytes=12 * MiB, max_file=1 * MiB, salt="scrub")
        err = []

        def work():
            try:
                wl.run(300, allowed=ONLINE_OPS)
            except Exception as e:  # noqa: BLE001 (reported by the test)
                err.append(e)
        th = threading.Thread(target=work)
        th.start()
        clean_runs = 0
        try:
            rc, problems, summary = scrub("start", "-B", um)
            # then read-only scrubs for as long as the workload writes: each finds nothing
            while th.is_alive():
                rc2, again, _ = scrub("start", "-B", "-r", um)
                assert rc2 == 0 and not again, "reported beside the workload: %r" % again
                clean_runs += 1
        finally:
            th.join()
        print("%d read-only scrubs ran beside the workload" % clean_runs)
        assert not err, "the workload failed beside the scrub: %r\n%s" % (err, "\n".join(wl.op_log[-20:]))
        assert rc == 1, (rc, problems)
        for p in problems:
            assert any(overlaps(p, r) for r in dmg.records), "reported, not damaged: %r\n%s" % (
                p, describe_damage(dmg.records))
            assert p["outcome"] in ("repaired", "skipped (changed since read)"), p
        missed = [rec for rec in dmg.records if not any(overlaps(p, rec) for p in problems)]
        shown = D.hash_tree(um)
        # the counters on the mount are the scrub's
        cp = T.ubtrfs("device", "stats", "--json", um)
        assert cp.returncode == 0, T.describe(cp)
        online_stats = [{k: v for k, v in d.items() if k.endswith("errs")} for d in json.loads(cp.stdout)["devices"]]
        assert sum(s["corruption_errs"] for s in online_stats) > 0, online_stats
    daemon_log = "\n".join(log)
    assert "Sanitizer" not in daemon_log and "runtime error" not in daemon_log, daemon_log[-4000:]
    # a damaged place not reported was no longer allocated when the scrub began: the mount's own
    # commits had replaced it (still allocated at the end as it was: it should have been reported)
    final = D.Layout(images)
    for rec in missed:
        assert final.extent_of(rec["logical"]) != tuple(rec["extent"]), "damage not reported: %r" % rec
    assert len(missed) < len(dmg.records), "test setup: the workload replaced every damaged place"
    # after the unmount: a second scrub is clean, the kernel reads what the mount showed
    scrub("start", "-B", "-r", *images, expect=0)
    kernel_checks(images, shown, str(casedir / "mnt"), stats=online_stats)


def test_crash_during_repair(casedir, ubtrfs_bin):  # noqa: F811
    """A repairing scrub recorded and cut (tests/tools/scrub_crash.c): at every cut each damaged place
    holds its damaged or its repaired bytes, never a third, and a read-only scrub of the cut reports
    exactly the places still damaged."""
    tool = T.test_tool("scrub_crash")
    images, hashes = D.make_fs(casedir, ("raid1", "raid1"), 2, 71, size=160 * MiB)
    lay = D.Layout(images)
    dmg = D.Damage(lay, random.Random(71))
    dmg.random_within(n_tree=3, n_data=6)
    dmg.save(str(casedir / "damage.json"))
    cdir = casedir / "cuts"
    cdir.mkdir()
    out = T.run([tool, cdir, 8, *images]).stdout.decode()
    repaired = re.findall(r"^problem .* repaired devid", out, re.M)
    assert len(repaired) == len(re.findall(r"^problem ", out, re.M)) >= len(dmg.records), out
    cuts = [int(c) for c in re.findall(r"^cut (\d+) entries", out, re.M)]
    assert len(cuts) == 8, out
    states = []
    for c in cuts:
        cut = [str(cdir / ("cut%d_dev%d.img" % (c, i))) for i in range(len(images))]
        fixed = []
        for rec in dmg.records:
            i = images.index(rec["image"])
            now = D.hashlib.sha256(D._read(cut[i], rec["physical"], rec["length"])).hexdigest()
            assert now in (rec["before"], rec["after"]), "cut %d: a third state at %r" % (c, rec)
            fixed.append(now == rec["before"])
        states.append(sum(fixed))
        if c in (cuts[0], cuts[len(cuts) // 2], cuts[-1]):
            _, problems, _ = scrub("start", "-B", "-r", *cut)
            for rec, ok in zip(dmg.records, fixed):
                hit = any(overlaps(p, rec) for p in problems)
                assert hit != ok, "cut %d: %s %r" % (c, "repaired yet reported" if ok else "not reported", rec)
            assert all(any(overlaps(p, r) for r in dmg.records) for p in problems), problems
    assert states[0] == 0 and states[-1] == len(dmg.records), states
    assert any(0 < s < len(dmg.records) for s in states), "no cut fell among the repairs: %r" % states


def _fix_csum(block):
    """A tree block's crc32c over everything after its checksum field, put in place."""
    c = T.crc32c(block[32:])
    return c.to_bytes(4, "little") + block[4:]


def test_headers_and_superblocks(casedir, ubtrfs_bin):  # noqa: F811
    """Copies whose checksum matches but whose header names another block or generation, and a bad
    superblock copy: each found and said for what it is; -r writes nothing; the repair rewrites the
    copies from the good ones, its closing commit every superblock copy; the generation error is
    counted as the kernel counts it."""
    images, hashes = D.make_fs(casedir, ("raid1", "raid1"), 2, 81)
    lay = D.Layout(images)
    blocks = sorted(lay.tree_blocks)
    a, b = blocks[len(blocks) // 3], blocks[2 * len(blocks) // 3]
    recs = []
    for logical, what in ((a, "generation"), (b, "bytenr")):
        devid, phys = lay.chunk(logical).copies(logical)[1]
        img = lay.image(devid)
        blk = bytearray(D._read(img, phys, lay.nodesize))
        field = 80 if what == "generation" else 48  # header: csum 32, fsid 16, bytenr 8, flags 8, uuid 16, gen
        val = int.from_bytes(blk[field:field + 8], "little") + (1 if what == "generation" else 4096)
        blk[field:field + 8] = val.to_bytes(8, "little")
        blk = _fix_csum(bytes(blk))
        with open(img, "r+b") as f:
            f.seek(phys)
            f.write(blk)
        recs.append({"devid": devid, "physical": phys, "length": lay.nodesize, "what": what})
    # superblock copy 1 (at 64 MiB) of the first device: its checksum broken
    with open(images[0], "r+b") as f:
        f.seek(64 * MiB + 100)
        f.write(b"\xff" * 8)
    sb_rec = {"devid": M.super_info(images[0])["devid"], "physical": 64 * MiB, "length": 4096}

    rc, problems, _ = scrub("start", "-B", "-r", *images, expect=1)
    kinds = sorted(p["kind"] for p in problems)
    assert kinds == ["superblock", "tree block generation", "tree block header"], problems
    for p in problems:
        assert p["outcome"] == "not repaired (read-only)", p
    assert any(overlaps(p, sb_rec) and p["kind"] == "superblock" for p in problems), problems
    for rec in recs:
        want = "tree block generation" if rec["what"] == "generation" else "tree block header"
        assert any(overlaps(p, rec) and p["kind"] == want for p in problems), (rec, problems)

    rc, problems, _ = scrub("start", "-B", *images, expect=1)
    assert all(p["outcome"] == "repaired" for p in problems), problems
    rc, again, _ = scrub("start", "-B", *images, expect=0)
    cp = T.run(["btrfs", "inspect-internal", "dump-super", "-s", "1", images[0]], check=False)
    assert cp.returncode == 0 and re.search(rb"^csum\s+0x[0-9a-f]+ \[match\]", cp.stdout, re.M), T.describe(cp)
    stats = ub_stats(images)
    assert sum(s["generation_errs"] for s in stats) == 1, stats
    kernel_checks(images, hashes, str(casedir / "mnt"), stats=stats)


def test_unreadable_extent_leaf(casedir, ubtrfs_bin):  # noqa: F811
    """Every copy of an extent tree leaf bad: what it holds cannot be scrubbed, which is said (and
    the exit code says it); the rest of the filesystem is scrubbed; nothing crashes."""
    images, hashes = D.make_fs(casedir, ("raid1", "raid1"), 2, 91, mkfs_args=("-n", "4096"))
    # many extents: an extent tree of several leaves
    with M.attached(images) as loops:
        with M.mount_loops(loops, str(casedir / "mnt")) as mnt:
            os.mkdir(os.path.join(mnt, "many"))
            for i in range(400):
                with open(os.path.join(mnt, "many", "m%03d" % i), "wb") as f:
                    f.write(bytes([i % 251]) * 5000)
            T.run(["sync"])
    out = M.dump_tree(images, "extent")
    leaves = [int(b) for b in re.findall(r"^leaf (\d+) items \d+ free space -?\d+ generation \d+ owner EXTENT_TREE",
                                         out, re.M)]
    if len(leaves) < 2:
        pytest.skip("test setup: the extent tree has a single leaf (its root): the filesystem would not open")
    lay = D.Layout(images)
    dmg = D.Damage(lay, random.Random(91))
    dmg.all_copies("tree", leaves[-1], lay.nodesize)
    _, _, whole = scrub("start", "-B", "-r", *images)
    cp = T.ubtrfs("scrub", "start", "-B", "-r", *images)
    assert cp.returncode == 1, T.describe(cp)
    assert b"cannot be read: not scrubbed" in cp.stderr, T.describe(cp)
    assert verified(whole) > 0


def test_read_errors(casedir, ubtrfs_bin):  # noqa: F811
    """Copies a device fails to read (tests/tools/scrub_crash.c's failing ranges): each is a read
    error on its line, rewritten from the other copy, and counted in the device's read errors."""
    tool = T.test_tool("scrub_crash")
    images, hashes = D.make_fs(casedir, ("raid1", "raid1"), 2, 95)
    lay = D.Layout(images)
    blk = sorted(lay.tree_blocks)[len(lay.tree_blocks) // 2]
    sec = lay.sectors(True)[len(lay.sectors(True)) // 2]
    places = [(blk, lay.nodesize, 0), (sec, 4096, 1)]
    args = []
    want = []
    for logical, length, copy in places:
        devid, phys = lay.chunk(logical).copies(logical)[copy]
        args += ["--bad-read", "%d:%d:%d" % (images.index(lay.image(devid)), phys + 512, 512)]
        want.append((devid, phys, length))
    out = T.run([tool, *args, casedir, 0, *images]).stdout.decode()
    got = sorted((int(d), int(p), int(n)) for d, p, n in re.findall(
        r"^problem read error repaired devid (\d+) physical (\d+) length (\d+)$", out, re.M))
    assert got == sorted(want), out
    assert len(re.findall(r"^problem ", out, re.M)) == len(want), out
    stats = ub_stats(images)
    assert sum(s["read_io_errs"] for s in stats) == sum(n // 4096 for _, _, n in want), stats
    scrub("start", "-B", "-r", *images, expect=0)
    kernel_checks(images, hashes, str(casedir / "mnt"), stats=stats)
