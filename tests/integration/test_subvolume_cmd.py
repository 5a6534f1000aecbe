# SPDX-License-Identifier: MIT
"""ubtrfs subvolume: offline, on a ubtrfs mount and on the kernel's mount, against btrfs-progs (issue 30).

One scripted sequence of subvolume operations and file writes (creates, nested subvolumes, rw and
read-only snapshots taken right after writes, refused operations: a name that exists, a directory
that is no subvolume, a subvolume that holds another, the default subvolume, a read-only snapshot,
set-default / get-default, deletes by path and by id) runs three ways on fresh images of the same
mkfs:
  * `ubtrfs subvolume` on the kernel's mount (our command over the kernel's ioctls): the oracle
    run, its listings also compared with btrfs-progs' own on the same mount;
  * `ubtrfs subvolume` on a ubtrfs mount (the daemon answers the same ioctls);
  * `ubtrfs subvolume --path ... DEV` on the unmounted image (the write engine).
Every step's exit code, output and error must be the same (modulo the mount path, generations,
uuids and times); afterwards the trees (file contents included), btrfs check of the ubtrfs images,
and the kernel's mount of them (its subvolume list, its default subvolume, snapshot contents).
"""

import errno
import os
import re
import time
from pathlib import Path

import pytest

import ubtrfs_testlib as T
from test_mount import fuse_mounted

MiB = T.MiB


def make_image(path, size=256 * MiB):
    with open(path, "wb") as f:
        f.truncate(size)
    T.run(["mkfs.btrfs", "-f", "-q", str(path)])


def progs_check(img):
    cp = T.run(["btrfs", "check", "--readonly", str(img)], check=False, timeout=600)
    text = (cp.stdout + cp.stderr).decode("utf-8", "replace")
    assert cp.returncode == 0 and "no error found" in text, "btrfs check:\n" + text[-4000:]


UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


def normalize(text, mnt=None):
    """Generations, uuids and times differ between runs; ids, paths, flags and errors must not."""
    if mnt:
        text = text.replace(str(mnt), "MNT")
    text = re.sub(UUID, "UUID", text)
    text = re.sub(r"\b(gen|cgen) \d+", r"\1 N", text)
    text = re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d( [+-]\d{4})?", "TIME", text)
    text = re.sub(r"(Generation|Gen at creation|Send transid|Receive transid):(\s+)\d+", r"\1:\2N", text)
    # the table layout: ID, gen, cgen columns by position
    text = re.sub(r"^(\d+)\t\d+\t", r"\1\tN\t", text, flags=re.M)
    return text


def data(seed, n):
    return T.file_bytes(__import__("random").Random(seed), "random", n)


# (kind, args...): "sv" runs `ubtrfs subvolume ARGS` with paths inside the filesystem written as
# "@/rel"; "write" writes a file; "write_errno" tries one and records the errno.
SCRIPT = [
    ("mkdir", "d"),
    ("write", "top", 1, 100000),
    ("sv", "create", "@/s1"),
    ("sv", "create", "@/d/s2"),
    ("write", "s1/x", 2, 200000),
    ("write", "s1/y", 3, 300),
    ("mkdir", "s1/dd"),
    ("sv", "create", "@/s1/dd/n1"),
    ("write", "s1/dd/n1/deep", 4, 5000),
    # written right before the snapshot: the snapshot holds it
    ("write", "s1/late", 5, 50000),
    ("sv", "snapshot", "@/s1", "@/snap1"),
    ("write", "s1/after", 6, 1000),
    ("sv", "snapshot", "-r", "@/s1", "@/d/rsnap"),
    # a snapshot into an existing directory takes the source's name
    ("sv", "snapshot", "@/d/s2", "@/s1/dd"),
    ("write_errno", "d/rsnap/new", 7, 10),
    ("sv", "create", "@/d/rsnap/x"),
    ("sv", "create", "@/s1"),
    ("sv", "delete", "@/s1"),
    ("sv", "delete", "@/d"),
    ("sv", "snapshot", "@/d", "@/snapbad"),
    ("sv", "show", "@/nonexistent"),
    ("sv", "show", "@/d"),
    ("sv", "set-default", "@/snap1"),
    ("sv", "get-default", "@/"),
    ("sv", "delete", "@/snap1"),
    ("sv", "set-default", "5", "@/"),
    ("sv", "get-default", "@/"),
    ("sv", "snapshot", "@/snap1", "@/snap2"),
    ("sv", "delete", "@/snap1"),
    ("sv", "delete", "--subvolid", "258", "@/"),
    ("sv", "delete", "--subvolid", "5", "@/"),
    ("sv", "delete", "--subvolid", "9999", "@/"),
    ("sv", "create", "@/s3"),
    ("sv", "set-default", "@/s3"),
    ("sv", "list", "@/"),
    ("sv", "list", "-pcguqR", "@/"),
    ("sv", "list", "-s", "@/"),
    ("sv", "list", "-r", "@/"),
    ("sv", "list", "-t", "@/"),
    ("sv", "list", "-a", "@/s1"),
    ("sv", "list", "-o", "@/s1"),
    ("sv", "list", "--sort=-rootid,path", "@/"),
    ("sv", "show", "@/s1"),
    ("sv", "show", "-r", "260", "@/"),
    ("sv", "show", "@/"),
    ("sv", "get-default", "@/"),
]

# what an offline run cannot do the way a mount does: writing files (done through a mount first)
OFFLINE_SUBCOMMANDS_WITH_PATH = {"create", "delete", "show", "snapshot", "set-default", "list", "get-default"}


class MountRunner:
    """The script on a mounted filesystem (the kernel's or ubtrfs's), through `ubtrfs subvolume`."""

    def __init__(self, mnt):
        self.mnt = str(mnt)

    def path(self, rel):
        return os.path.join(self.mnt, rel) if rel else self.mnt

    def sv(self, args):
        real = [self.path(a[2:]) if a.startswith("@/") else a for a in args]
        cp = T.ubtrfs("subvolume", *real)
        return "exit %d\n%s%s" % (cp.returncode, cp.stdout.decode("utf-8", "replace"),
                                  cp.stderr.decode("utf-8", "replace"))


def run_script(runner, mnt):
    out = []
    for step in SCRIPT:
        kind = step[0]
        if kind == "mkdir":
            os.mkdir(runner.path(step[1]))
            continue
        if kind == "write":
            with open(runner.path(step[1]), "wb") as f:
                f.write(data(step[2], step[3]))
            continue
        if kind == "write_errno":
            try:
                with open(runner.path(step[1]), "wb") as f:
                    f.write(data(step[2], step[3]))
                out.append("%s: written" % step[1])
            except OSError as e:
                out.append("%s: %s" % (step[1], errno.errorcode.get(e.errno, e.errno)))
            continue
        res = runner.sv(list(step[1:]))
        out.append("$ subvolume %s\n%s" % (" ".join(step[1:]), normalize(res, mnt)))
    return out


def tree_view(mnt):
    entries = T.walk_tree(mnt, btrfs=False)
    hashes = T.hash_files(mnt, entries)
    view = {}
    for p, e in entries.items():
        v = {k: e[k] for k in ("type", "mode", "uid", "gid", "nlink")}
        if e["type"] == "file":
            v["sha256"] = hashes[p][1]
            v["size"] = e["size"]
        view[p] = v
    return view


def progs_list(mnt):
    """btrfs-progs' own listing of the kernel's mount, normalized."""
    cp = T.run(["btrfs", "subvolume", "list", "-pcqRa", str(mnt)])
    return normalize(cp.stdout.decode(), mnt)


def compare_steps(want, got, what):
    for i, (a, b) in enumerate(zip(want, got)):
        assert a == b, "%s: step %d differs:\n--- kernel\n%s\n--- %s\n%s" % (what, i, a, what, b)
    assert len(want) == len(got)


def final_state(img, d):
    """What the kernel's mount of an image shows afterwards: the default subvolume's top (s3, empty),
    the subvolume list from there, the whole tree from the top level."""
    with T.mounted([img], d / "kmnt", readonly=True) as km:
        top = sorted(os.listdir(km))
        listing = progs_list(km)
    with T.mounted([img], d / "kmnt", options="subvolid=5", readonly=True) as km:
        view = tree_view(km)
    return {"top": top, "list": listing, "view": view}


def compare_state(want, got, what):
    assert got["top"] == want["top"] == [], (what, got["top"])
    assert got["list"] == want["list"], "%s:\n--- kernel\n%s\n--- %s\n%s" % (what, want["list"], what, got["list"])
    compare_views(want["view"], got["view"], what)


def compare_views(w, g, what):
    problems = ["missing %s" % p for p in sorted(set(w) - set(g))] + \
        ["unexpected %s" % p for p in sorted(set(g) - set(w))] + \
        ["%s: %r / %r" % (p, w[p], g[p]) for p in sorted(set(w) & set(g)) if w[p] != g[p]]
    assert not problems, "%s: the trees differ:\n  %s" % (what, "\n  ".join(problems[:30]))


@pytest.fixture(scope="module")
def kernel_run(ubtrfs_bin, scratch):
    """The oracle: the script on the kernel's mount; its results and what the image holds then."""
    d = Path(scratch) / "subvol-kernel"
    d.mkdir()
    img = d / "k.img"
    make_image(img)
    with T.mounted([img], d / "mnt", readonly=False) as km:
        steps = run_script(MountRunner(km), km)
        # btrfs-progs on the same mount agrees with our command
        for args in (["list", "-pcqRa", km], ["list", "-pcguqR", km], ["show", km + "/s1"], ["show", km],
                     ["get-default", km], ["list", "-s", km], ["list", "-o", km + "/s1"], ["list", "-t", km]):
            theirs = T.run(["btrfs", "subvolume", *args])
            ours = T.ubtrfs("subvolume", *args)
            assert ours.returncode == 0, T.describe(ours)
            assert ours.stdout.decode() == theirs.stdout.decode(), (args, ours.stdout, theirs.stdout)
    state = final_state(img, d)
    return {"steps": steps, "state": state}


def test_on_ubtrfs_mount_like_the_kernel(ubtrfs_bin, scratch, kernel_run):
    d = Path(scratch) / "subvol-fuse"
    d.mkdir()
    img = d / "u.img"
    make_image(img)
    log = []
    with fuse_mounted(ubtrfs_bin, [img], d / "mnt", "rw", log=log) as um:
        steps = run_script(MountRunner(um), um)
        view = tree_view(um)
    compare_steps(kernel_run["steps"], steps, "ubtrfs mount")
    # what the mount served is what the kernel's mount shows afterwards
    compare_views(kernel_run["state"]["view"], view, "ubtrfs mount, while mounted")
    bad = [ln for ln in log[0].splitlines() if ": error:" in ln or "Sanitizer" in ln]
    assert not bad, log[0][-3000:]
    progs_check(img)
    compare_state(kernel_run["state"], final_state(img, d), "ubtrfs mount")
    # a ubtrfs mount without subvol= shows the default subvolume too, as the kernel's
    with fuse_mounted(ubtrfs_bin, [img], d / "mnt") as um:
        assert os.listdir(um) == []
        cp = T.ubtrfs("subvolume", "show", um)
        assert cp.returncode == 0 and cp.stdout.decode().startswith("s3\n"), T.describe(cp)
    with fuse_mounted(ubtrfs_bin, [img], d / "mnt", "subvolid=5") as um:
        assert "s3" in os.listdir(um)
    T.rmtree(d)


def test_offline_like_the_kernel(ubtrfs_bin, scratch, kernel_run):
    """The same subvolume operations on an image nothing has mounted (files written through a mount)."""
    d = Path(scratch) / "subvol-offline"
    d.mkdir()
    img = d / "o.img"
    make_image(img)

    class Offline(MountRunner):
        def sv(self, args):
            sub, rest = args[0], args[1:]
            paths = [a[1:] or "/" for a in rest if a.startswith("@/")]
            plain = [a for a in rest if not a.startswith("@/")]
            if sub == "snapshot":
                opts = plain + ["--path", paths[0], "--dest", paths[1]]
            elif sub in ("list", "get-default") or (sub == "delete" and "--subvolid" in plain):
                opts = plain + (["--path", paths[0]] if sub == "list" else [])
            elif sub == "set-default" and plain:
                opts = plain
            elif sub == "show" and "-r" in plain:
                opts = plain
            else:
                opts = plain + sum((["--path", p] for p in paths), [])
            cp = T.ubtrfs("subvolume", sub, *opts, img)
            text = "exit %d\n%s%s" % (cp.returncode, cp.stdout.decode("utf-8", "replace"),
                                      cp.stderr.decode("utf-8", "replace"))
            return text

    # the file writes need a mount; between them the subvolume steps run offline
    steps = []
    i = 0
    while i < len(SCRIPT):
        j = i
        while j < len(SCRIPT) and SCRIPT[j][0] != "sv":
            j += 1
        if j > i:
            with T.mounted([img], d / "mnt", readonly=False) as km:
                for step in SCRIPT[i:j]:
                    r = MountRunner(km)
                    if step[0] == "mkdir":
                        os.mkdir(r.path(step[1]))
                    elif step[0] == "write":
                        with open(r.path(step[1]), "wb") as f:
                            f.write(data(step[2], step[3]))
                    else:
                        try:
                            with open(r.path(step[1]), "wb") as f:
                                f.write(data(step[2], step[3]))
                            steps.append("%s: written" % step[1])
                        except OSError as e:
                            steps.append("%s: %s" % (step[1], errno.errorcode.get(e.errno, e.errno)))
        while j < len(SCRIPT) and SCRIPT[j][0] == "sv":
            steps.append(("offline", SCRIPT[j], Offline(None).sv(list(SCRIPT[j][1:]))))
            j += 1
        i = j
    # the offline messages name paths inside the filesystem: compare what they must share
    failures = []
    k = iter(kernel_run["steps"])
    for s in steps:
        want = next(k)
        if isinstance(s, str):
            assert s == want
            continue
        _, step, text = s
        want_exit = want.split("\n")[1]
        got_exit = text.split("\n")[0]
        if want_exit != got_exit:
            failures.append("%s: kernel %s, offline %s\n%s" % (" ".join(step[1:]), want_exit, got_exit, text))
        elif step[1] in ("list", "get-default"):
            # listings print the same lines
            if normalize(text) != "\n".join(want.split("\n")[1:]):
                failures.append("%s:\n--- kernel\n%s\n--- offline\n%s" % (" ".join(step[1:]), want, text))
    assert not failures, "\n\n".join(failures)
    progs_check(img)
    compare_state(kernel_run["state"], final_state(img, d), "offline")
    T.rmtree(d)


def test_cleaner_drops_deleted_subvolume_in_background(ubtrfs_bin, scratch):
    """A deleted subvolume's blocks go while the mount runs (the commit thread's steps)."""
    d = Path(scratch) / "subvol-clean"
    d.mkdir()
    img = d / "c.img"
    make_image(img)
    with fuse_mounted(ubtrfs_bin, [img], d / "mnt", "rw") as um:
        cp = T.ubtrfs("subvolume", "create", um + "/big")
        assert cp.returncode == 0, T.describe(cp)
        # enough files for a tree of two levels
        for i in range(600):
            with open("%s/big/f%04d" % (um, i), "wb") as f:
                f.write(data(i, 3000))
        cp = T.ubtrfs("subvolume", "snapshot", um + "/big", um + "/snap")
        assert cp.returncode == 0, T.describe(cp)
        before = T.ubtrfs("filesystem", "df", "-b", um).stdout.decode()
        for name in ("big", "snap"):
            cp = T.ubtrfs("subvolume", "delete", um + "/" + name)
            assert cp.returncode == 0, T.describe(cp)
        # the mount serves while its commit thread drops them; nothing waits for the unmount
        deadline = time.monotonic() + 60
        while True:
            cp = T.ubtrfs("subvolume", "list", "-d", um)
            assert cp.returncode == 0, T.describe(cp)
            if not cp.stdout.strip():
                break
            assert time.monotonic() < deadline, "deleted subvolumes not dropped:\n" + cp.stdout.decode()
            os.listdir(um)
            time.sleep(0.2)
        after = T.ubtrfs("filesystem", "df", "-b", um).stdout.decode()
        meta = lambda t: int(re.search(r"Metadata, \w+: total=\d+, used=(\d+)", t).group(1))
        assert meta(after) < meta(before), (before, after)
        # the dropped ids are not handed out again while mounted, as the kernel's counter
        cp = T.ubtrfs("subvolume", "create", um + "/again")
        assert cp.returncode == 0, T.describe(cp)
        cp = T.ubtrfs("subvolume", "list", um)
        assert cp.stdout.decode() == "ID 258 gen %s top level 5 path again\n" % (
            re.search(r"gen (\d+)", cp.stdout.decode()).group(1)), T.describe(cp)
    progs_check(img)
    T.rmtree(d)


def test_mounted_subvolume_and_rights(ubtrfs_bin, scratch):
    """The mount's own subvolume is not deleted under it (EBUSY: the kernel defers; this mount
    cannot); only root deletes subvolumes, sets the default or searches trees (EPERM)."""
    d = Path(scratch) / "subvol-busy"
    d.mkdir()
    img = d / "b.img"
    make_image(img)
    # another user reaches the mount and the binary under test
    mode = os.stat(scratch).st_mode & 0o7777
    os.chmod(scratch, mode | 0o111)
    os.chmod(d, 0o755)
    try:
        rights(ubtrfs_bin, d, img)
    finally:
        os.chmod(scratch, mode)
    progs_check(img)
    T.rmtree(d)


def rights(ubtrfs_bin, d, img):
    with fuse_mounted(ubtrfs_bin, [img], d / "mnt", "rw") as um:
        assert T.ubtrfs("subvolume", "create", um + "/inner").returncode == 0
    with fuse_mounted(ubtrfs_bin, [img], d / "mnt", "rw,subvol=inner") as um:
        cp = T.ubtrfs("subvolume", "delete", "--subvolid", "256", um)
        assert cp.returncode == 1 and b"Device or resource busy" in cp.stderr, T.describe(cp)
        assert T.ubtrfs("subvolume", "create", um + "/sub").returncode == 0
        os.chmod(um, 0o777)
        nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        cp = T.run(nobody + [str(T.ubtrfs_binary()), "subvolume", "delete", um + "/sub"], check=False)
        assert cp.returncode == 1 and b"Operation not permitted" in cp.stderr, T.describe(cp)
        cp = T.run(nobody + [str(T.ubtrfs_binary()), "subvolume", "set-default", "256", um], check=False)
        assert cp.returncode == 1 and b"Operation not permitted" in cp.stderr, T.describe(cp)
        # anyone may create a subvolume where they may write; it is theirs
        cp = T.run(nobody + [str(T.ubtrfs_binary()), "subvolume", "create", um + "/mine"], check=False)
        assert cp.returncode == 0, T.describe(cp)
        st = os.stat(um + "/mine")
        assert (st.st_uid, st.st_gid) == (65534, 65534)


def _ioc(direction, nr, size):
    return (direction << 30) | (size << 16) | (0x94 << 8) | nr


SUBVOL_GETFLAGS = _ioc(2, 25, 8)
SUBVOL_SETFLAGS = _ioc(1, 26, 8)
GET_SUBVOL_INFO = _ioc(2, 60, 504)
INO_LOOKUP = _ioc(3, 18, 4096)


def ioctl_steps(mnt):
    """SUBVOL_GETFLAGS/SETFLAGS, GET_SUBVOL_INFO and INO_LOOKUP, as a script of results."""
    import fcntl
    import struct

    out = []

    def call(path, req, buf, who=None):
        fd = os.open(path, os.O_RDONLY)
        try:
            if who:
                pid = os.fork()
                if pid == 0:
                    code = 0
                    try:
                        os.setgroups([])
                        os.setresgid(who, who, who)
                        os.setresuid(who, who, who)
                        fcntl.ioctl(fd, req, buf, True)
                    except OSError as e:
                        code = e.errno
                    os._exit(code)
                _, status = os.waitpid(pid, 0)
                code = os.waitstatus_to_exitcode(status)
                return errno.errorcode.get(code, code) if code else "ok"
            fcntl.ioctl(fd, req, buf, True)
            return "ok"
        except OSError as e:
            return errno.errorcode.get(e.errno, e.errno)
        finally:
            os.close(fd)

    m = str(mnt)
    assert T.ubtrfs("subvolume", "create", m + "/sv").returncode == 0
    os.mkdir(m + "/sv/dir")
    with open(m + "/sv/f", "wb") as f:
        f.write(b"x" * 5000)
    ro = struct.pack("<Q", 2)
    rw = struct.pack("<Q", 0)
    flags = bytearray(8)
    out.append(("getflags", call(m + "/sv", SUBVOL_GETFLAGS, flags), bytes(flags)))
    out.append(("setflags ro", call(m + "/sv", SUBVOL_SETFLAGS, bytearray(ro))))
    out.append(("getflags", call(m + "/sv", SUBVOL_GETFLAGS, flags), bytes(flags)))
    try:
        with open(m + "/sv/g", "wb") as f:
            f.write(b"y")
        out.append(("write in ro", "written"))
    except OSError as e:
        out.append(("write in ro", errno.errorcode[e.errno]))
    out.append(("setflags on a directory", call(m + "/sv/dir", SUBVOL_SETFLAGS, bytearray(rw))))
    out.append(("setflags unknown flag", call(m + "/sv", SUBVOL_SETFLAGS, bytearray(struct.pack("<Q", 8)))))
    out.append(("setflags by another user", call(m + "/sv", SUBVOL_SETFLAGS, bytearray(rw), who=65534)))
    out.append(("setflags rw", call(m + "/sv", SUBVOL_SETFLAGS, bytearray(rw))))
    with open(m + "/sv/g", "wb") as f:
        f.write(b"y")
    info = bytearray(504)
    out.append(("subvol info", call(m + "/sv/dir", GET_SUBVOL_INFO, info)))
    treeid, = struct.unpack_from("<Q", info, 0)
    name = bytes(info[8:8 + 256]).split(b"\0")[0]
    parent, dirid, _gen, fl = struct.unpack_from("<QQQQ", info, 264)
    out.append(("subvol info fields", treeid, name, parent, dirid, fl))
    look = bytearray(4096)
    struct.pack_into("<QQ", look, 0, 0, 257)
    out.append(("ino lookup", call(m + "/sv", INO_LOOKUP, look), struct.unpack_from("<Q", look)[0],
                bytes(look[16:80]).split(b"\0")[0]))
    out.append(("ino lookup by another user", call(m + "/sv", INO_LOOKUP, look, who=65534)))
    return out


def test_ioctls_like_the_kernel(ubtrfs_bin, scratch):
    """The subvolume ioctls btrfs-progs' property and show use, answered as the kernel answers them."""
    d = Path(scratch) / "subvol-ioctl"
    d.mkdir()
    kimg, uimg = d / "k.img", d / "u.img"
    make_image(kimg)
    make_image(uimg)
    with T.mounted([kimg], d / "kmnt", readonly=False) as km:
        os.chmod(km, 0o755)
        want = ioctl_steps(km)
    with fuse_mounted(ubtrfs_bin, [uimg], d / "umnt", "rw") as um:
        got = ioctl_steps(um)
    assert got == want
    progs_check(uimg)
    T.rmtree(d)
