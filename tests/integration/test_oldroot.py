# SPDX-License-Identifier: MIT
"""Older roots: `--generation N` reads the backup root of generation N.

The kernel writes a small filesystem in three rounds (change, sync) on one mount;
after each round's sync the test notes the superblock generation, the root
directory's listing and the bytes of every file, as the kernel shows them.
Every later `ubtrfs ls/cat --generation N` must show exactly those.
"""

import os
import re

import pytest

import ubtrfs_testlib as T
from test_mount import fuse_mounted

ROUNDS = [
    {"add": {"a": b"first\n" * 100, "b": b"bee\n"}, "remove": []},
    {"add": {"c": bytes(range(256)) * 64}, "remove": ["a"]},
    {"add": {"a": b"again\n"}, "remove": ["b", "c"]},
]


def _generation(img):
    text = T.run(["btrfs", "inspect-internal", "dump-super", img]).stdout.decode()
    return int(T.parse_dump_super(text)["generation"])


def _backup_gens(img):
    text = T.run(["btrfs", "inspect-internal", "dump-super", "-f", img]).stdout.decode()
    return [int(line.split()[3]) for line in text.splitlines() if "backup_tree_root:" in line]


def _make(tmp_path):
    img = str(tmp_path / "old.img")
    with open(img, "wb") as f:
        f.truncate(256 << 20)
    T.run(["mkfs.btrfs", "-q", "-f", img])
    states = []
    # one mount: each round ends with a sync, whose commit is the generation noted
    with T.mounted([img], tmp_path / "mnt", readonly=False) as mnt:
        for rnd in ROUNDS:
            for name in rnd["remove"]:
                os.unlink(os.path.join(mnt, name))
            for name, data in rnd["add"].items():
                with open(os.path.join(mnt, name), "wb") as f:
                    f.write(data)
            T.run(["sync"])
            files = {}
            for name in sorted(os.listdir(mnt)):
                with open(os.path.join(mnt, name), "rb") as f:
                    files[name] = f.read()
            states.append((_generation(img), files))
    return img, states


def test_older_generations(tmp_path, ubtrfs_bin):
    img, states = _make(tmp_path)
    backups = _backup_gens(img)
    gens = [g for g, _ in states]
    assert len(set(gens)) == len(gens), "every round must commit: %s" % gens
    for gen, files in states:
        # the kernel keeps the four newest roots; the rounds are few enough for all to be there
        assert gen in backups, "generation %d not among the backup roots %s" % (gen, backups)
        cp = T.ubtrfs("ls", "--generation", str(gen), img)
        # an older tree whose blocks were reused would fail here loudly, never be skipped
        assert cp.returncode == 0, T.describe(cp)
        assert cp.stdout.decode().split() == sorted(files), (gen, cp.stdout)
        for name, data in files.items():
            cp = T.ubtrfs("cat", "--generation", str(gen), "--path", "/" + name, img)
            assert cp.returncode == 0, T.describe(cp)
            assert cp.stdout == data, "generation %d, /%s: other bytes" % (gen, name)
    # the mount serves the same older state (-o generation=N)
    gen, files = states[0]
    with fuse_mounted(ubtrfs_bin, [img], tmp_path / "mnt",
                      "generation=%d" % gen) as mnt:
        assert sorted(os.listdir(mnt)) == sorted(files), (gen, os.listdir(mnt))
        for name, data in files.items():
            with open(os.path.join(mnt, name), "rb") as f:
                assert f.read() == data, "mount -o generation=%d, /%s: other bytes" % (gen, name)
    # no such generation: a clear error naming it, exit 2
    missing = max(gens) + 1000
    cp = T.ubtrfs("ls", "--generation", str(missing), img)
    assert cp.returncode == 2, T.describe(cp)
    assert ("generation %d" % missing).encode() in cp.stderr, T.describe(cp)


def _backup_roots(img):
    """{generation: root tree bytenr} of the superblock's backup slots."""
    text = T.run(["btrfs", "inspect-internal", "dump-super", "-f", img]).stdout.decode()
    out = {}
    for line in text.splitlines():
        if "backup_tree_root:" in line:
            w = line.split()
            out[int(w[3])] = int(w[1])
    return out


def _extent_root(img):
    text = T.run(["btrfs", "inspect-internal", "dump-tree", "-t", "root", img]).stdout.decode()
    m = re.search(r"key \(EXTENT_TREE ROOT_ITEM 0\).*\n.*bytenr (\d+)", text)
    assert m, text
    return int(m.group(1))


def _damage_newest_root(img, tree="root"):
    """Overwrite every copy of the newest root block of `tree` (the root tree, or the extent
    tree it names) past its checksum: the kernel and ubtrfs both find the checksum wrong.
    Returns the block's address."""
    sup = T.parse_dump_super(T.run(["btrfs", "inspect-internal", "dump-super", img]).stdout.decode())
    root = int(sup["root"]) if tree == "root" else _extent_root(img)
    copies = T.map_logical(img, root, 4096)
    assert copies, "no copy of the root tree block found"
    for _, physical in copies:
        T.overwrite(img, physical + 200, b"\xa5" * 64)
    return root


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def _paths(top):
    out = []
    for d, dirs, files in os.walk(top):
        for name in dirs + files:
            out.append("/" + os.path.relpath(os.path.join(d, name), top))
    return sorted(out)


@pytest.mark.parametrize("tree", ["root", "extent"])
def test_backup_and_root(tmp_path, ubtrfs_bin, tree):
    img, states = _make(tmp_path)
    roots = _backup_roots(img)
    newest = _generation(img)
    bad = _damage_newest_root(img, tree)
    if tree == "extent":
        # the extent tree's root is not read by ls: only the open's check sees it
        cp = T.ubtrfs("ls", "-R", "--backup", img)
        assert cp.returncode == 0 and str(bad).encode() in cp.stderr, T.describe(cp)
        with T.mounted([img], tmp_path / "kmnt", options="rescue=usebackuproot") as mnt:
            want = _paths(mnt)
        assert sorted(cp.stdout.decode().split()) == want, (cp.stdout, want)
        return
    # without --backup: a clear error naming the block, exit 2
    cp = T.ubtrfs("ls", "-R", img)
    assert cp.returncode == 2, T.describe(cp)
    assert str(bad).encode() in cp.stderr, T.describe(cp)
    # --backup shows what the kernel's rescue=usebackuproot shows of the same image
    with T.mounted([img], tmp_path / "kmnt", options="rescue=usebackuproot") as mnt:
        want = _paths(mnt)
        contents = {p: _read(mnt + p) for p in want if os.path.isfile(mnt + p)}
    cp = T.ubtrfs("ls", "-R", "--backup", img)
    assert cp.returncode == 0, T.describe(cp)
    assert sorted(cp.stdout.decode().split()) == want, (cp.stdout, want)
    for path, data in contents.items():
        cp = T.ubtrfs("cat", "--backup", "--path", path, img)
        assert cp.returncode == 0 and cp.stdout == data, T.describe(cp)
    used = max(g for g in roots if g < newest)
    assert ("generation %d" % used).encode() in cp.stderr, T.describe(cp)
    with fuse_mounted(ubtrfs_bin, [img], tmp_path / "mnt", "usebackuproot") as mnt:
        assert _paths(mnt) == want
        for path, data in contents.items():
            with open(mnt + path, "rb") as f:
                assert f.read() == data, path
    # --root: the oldest round still in a backup slot (a busy machine may commit more often), by address
    kept = [(g, f) for g, f in states if g in roots]
    assert kept, (states, roots)
    gen, files = kept[0]
    cp = T.ubtrfs("ls", "--root", str(roots[gen]), img)
    assert cp.returncode == 0, T.describe(cp)
    assert cp.stdout.decode().split() == sorted(files), (gen, cp.stdout)
    for name, data in files.items():
        cp = T.ubtrfs("cat", "--root", str(roots[gen]), "--path", "/" + name, img)
        assert cp.returncode == 0 and cp.stdout == data, T.describe(cp)
    with fuse_mounted(ubtrfs_bin, [img], tmp_path / "mnt", "root=%d" % roots[gen]) as mnt:
        assert sorted(os.listdir(mnt)) == sorted(files)
    # an address that holds no root tree block: exit 2, named
    cp = T.ubtrfs("ls", "--root", str(roots[gen] + 4096), img)
    assert cp.returncode == 2, T.describe(cp)
    assert str(roots[gen] + 4096).encode() in cp.stderr, T.describe(cp)


def test_older_root_options(tmp_path, ubtrfs_bin):
    img = str(tmp_path / "small.img")
    with open(img, "wb") as f:
        f.truncate(128 << 20)
    T.run(["mkfs.btrfs", "-q", "-f", img])
    root = int(T.parse_dump_super(T.run(["btrfs", "inspect-internal", "dump-super", img]).stdout.decode())["root"])
    # two roots named at once: refused, for commands and for the mount
    cp = T.ubtrfs("ls", "--generation", "1", "--root", str(root), img)
    assert cp.returncode == 2 and b"--root" in cp.stderr, T.describe(cp)
    cp = T.run([str(ubtrfs_bin), "mount", "-f", "-o", "generation=1,root=%d" % root, img,
                str(tmp_path / "mnt")], check=False)
    assert cp.returncode == 2 and not os.path.ismount(str(tmp_path / "mnt")), T.describe(cp)
    # an intact filesystem: --backup changes nothing and says nothing; --root of the current root is the same
    cp = T.ubtrfs("ls", "-R", "--backup", img)
    assert cp.returncode == 0 and cp.stderr == b"", T.describe(cp)
    cp2 = T.ubtrfs("ls", "-R", "--root", str(root), img)
    assert cp2.returncode == 0 and cp2.stdout == cp.stdout, T.describe(cp2)
    for bad in ("root=x", "root=0", "usebackuproot=1", "rescue=nologreplay2"):
        cp = T.run([str(ubtrfs_bin), "mount", "-f", "-o", bad, img, str(tmp_path / "mnt")], check=False)
        assert cp.returncode == 2, (bad, T.describe(cp))


def test_older_root_skips_the_log(tmp_path):
    """The fsync log continues the superblock's root: an older root is shown without it."""
    import fsynclog_lib as L

    def baseline(mnt):
        L.write_file(mnt / "a", b"committed\n")

    def action(mnt):
        L.write_file(mnt / "b", b"logged\n" * 100, fsync=True)

    crash = L.make_crash(tmp_path / "crash", baseline, action)
    if not crash.log_root:
        pytest.skip("the kernel committed instead of logging")
    img = str(crash.image)
    newest = _generation(img)
    older = sorted(g for g in _backup_roots(img) if g < newest)
    assert older, _backup_roots(img)
    cp = T.ubtrfs("ls", "-v", img)
    assert cp.returncode == 0 and "b" in cp.stdout.decode().split(), T.describe(cp)
    cp = T.ubtrfs("ls", "-v", "--generation", str(older[-1]), img)
    assert cp.returncode == 0, T.describe(cp)
    assert "b" not in cp.stdout.decode().split(), T.describe(cp)
    assert b"not replayed on an older root" in cp.stderr and not L.REPLAY_INFO.search(cp.stderr), T.describe(cp)
