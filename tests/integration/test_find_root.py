# SPDX-License-Identifier: MIT
"""`ubtrfs find-root`: the root trees still on disk, against btrfs-progs' btrfs-find-root.

A kernel-made image with several commits (test_oldroot's recipe) keeps older root tree
blocks in its metadata; both tools must find the same (address, generation) pairs, before
and after the newest root tree block is damaged, and every candidate named usable must
open with `--root BYTENR`.
"""

import json
import re

import ubtrfs_testlib as T
from test_oldroot import _backup_roots, _damage_newest_root, _generation, _make


def _progs_roots(img):
    cp = T.run(["btrfs-find-root", "-a", img], check=False)
    text = cp.stdout.decode() + cp.stderr.decode()
    found = {(int(b), int(g)) for b, g in re.findall(r"Found tree root at (\d+) gen (\d+)", text)}
    found |= {(int(b), int(g)) for b, g in re.findall(r"Well block (\d+)\(gen: (\d+)", text)}
    return found


def _dup_copies(img, logical):
    """Physical offsets of `logical` on a one-device image, from the chunk tree (btrfs-map-logical
    wants an extent item, which a freed older root block no longer has)."""
    text = T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "chunk", img]).stdout.decode()
    for m in re.finditer(r"CHUNK_ITEM (\d+)\)[^\n]*\n\s*length (\d+)(.*?)(?=\n\s*item |\Z)", text, re.S):
        start, length = int(m.group(1)), int(m.group(2))
        if start <= logical < start + length:
            return [int(o) + logical - start for o in re.findall(r"stripe \d+ devid 1 offset (\d+)", m.group(3))]
    raise AssertionError("logical %d in no chunk" % logical)


def _ours(img, expect_rc):
    cp = T.ubtrfs("find-root", "--json", img)
    assert cp.returncode == expect_rc, T.describe(cp)
    return json.loads(cp.stdout)


def test_find_root(tmp_path, ubtrfs_bin):
    img, _ = _make(tmp_path)
    newest = _generation(img)
    cands = _ours(img, 0)
    assert cands[0]["current"] and cands[0]["usable"] and cands[0]["generation"] == newest, cands[0]
    gens = [c["generation"] for c in cands]
    assert gens == sorted(gens, reverse=True), gens
    scanned = {(c["bytenr"], c["generation"]) for c in cands if c["scanned"]}
    assert scanned == _progs_roots(img)
    assert sum(1 for c in cands if c["backup_slot"] >= 0) == 4, cands

    # where each backup root's copies are, while the chunk tree can still be dumped
    copies = {b: _dup_copies(img, b) for b in _backup_roots(img).values()}
    bad = _damage_newest_root(img)
    cands = _ours(img, 1)
    cur = [c for c in cands if c["current"]]
    assert len(cur) == 1 and cur[0]["bytenr"] == bad and not cur[0]["usable"] and not cur[0]["scanned"], cur
    scanned = {(c["bytenr"], c["generation"]) for c in cands if c["scanned"]}
    assert scanned == _progs_roots(img)
    usable = [c for c in cands if c["usable"]]
    assert usable and usable[0]["generation"] < newest, cands
    for c in usable:
        cp = T.ubtrfs("ls", "-R", "--root", str(c["bytenr"]), img)
        assert cp.returncode == 0, T.describe(cp)
    cp = T.ubtrfs("find-root", img)
    assert cp.returncode == 1, T.describe(cp)
    assert b"error" in cp.stderr and str(bad).encode() in cp.stderr, T.describe(cp)
    lines = cp.stdout.decode().splitlines()
    assert len(lines) == len(cands) and lines[0].startswith("generation %d " % cands[0]["generation"]), lines

    # the newest usable backup damaged too: --backup goes on to the next older one, saying why
    first = next(c for c in usable if c["backup_slot"] >= 0)
    assert len(copies[first["bytenr"]]) == 2, copies
    for physical in copies[first["bytenr"]]:
        T.overwrite(img, physical + 200, b"\x5a" * 64)
    nxt = [c for c in usable if c["backup_slot"] >= 0 and c["generation"] < first["generation"]]
    cp = T.ubtrfs("ls", "-R", "--backup", img)
    if nxt:
        assert cp.returncode == 0, T.describe(cp)
        assert ("backup root %d (generation %d) cannot be read either" % (first["backup_slot"], first["generation"])
                ).encode() in cp.stderr, T.describe(cp)
        assert ("using backup root %d: generation %d," % (nxt[0]["backup_slot"], nxt[0]["generation"])
                ).encode() in cp.stderr, T.describe(cp)
    else:
        assert cp.returncode == 2 and b"no backup root is readable" in cp.stderr, T.describe(cp)
    cands = _ours(img, 1)
    assert not [c for c in cands if c["bytenr"] == first["bytenr"] and c["usable"]], cands


def test_find_root_usage(tmp_path):
    cp = T.ubtrfs("find-root", "--help")
    assert cp.returncode == 0 and b"usage: ubtrfs find-root" in cp.stdout, T.describe(cp)
    assert T.ubtrfs("find-root").returncode == 2
    junk = tmp_path / "junk.img"
    junk.write_bytes(b"\0" * (1 << 20))
    cp = T.ubtrfs("find-root", str(junk))
    assert cp.returncode == 2 and b"error" in cp.stderr, T.describe(cp)
