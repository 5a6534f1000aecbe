# SPDX-License-Identifier: MIT
"""What a user installs: `make install`, the library's interface, the man pages, the package.

`make install DESTDIR=...` of the build directory under test is installed once per module
into a scratch folder, and everything a user or a developer meets is checked there:
  - the files (command, libubtrfs.so.MAJOR with its soname and the dev link, libubtrfs.a,
    the public headers, ubtrfs.pc, the man pages, the bash completion), one version
    everywhere (include/ubtrfs/version.h, `ubtrfs --version`, ub_version(), ubtrfs.pc,
    the file names, debian/changelog), and `make uninstall` taking them away again;
  - the shared library exports exactly the functions and objects the public headers
    declare, every name beginning with ub_ (`nm -D --defined-only`), and the command's own
    objects link against it alone;
  - every public header compiles alone as strict C11 and as C++11 (-Wall -Wextra -Werror
    -pedantic), and C++ reaches every public name with C linkage;
  - the examples (examples/) build through `pkg-config --cflags --libs ubtrfs` against
    the installed tree and run on an image mkfs.btrfs made;
  - every option (and mount option, and subcommand) each command's --help lists appears
    in its man page, and the bash completion offers the commands, subcommands and
    options --help lists.
With UBTRFS_LONG_TESTS=1 also (minutes each): `dpkg-buildpackage -us -uc -b` from a
clean clone builds the three packages and lintian finds no error or warning; scripts/abi-check
compares a release tag with itself through abidiff.
"""

import concurrent.futures
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import ubtrfs_testlib as T

REPO = T.REPO
VERSION_H = REPO / "include" / "ubtrfs" / "version.h"


def header_version():
    text = VERSION_H.read_text()
    parts = [re.search(r"^#define UBTRFS_VERSION_%s (\d+)" % p, text, re.M) for p in ("MAJOR", "MINOR", "PATCH")]
    assert all(parts), "version.h lacks a version number"
    return tuple(int(m.group(1)) for m in parts)


def build_dir():
    """The build directory of the binary under test (skip when it is not one of this tree)."""
    ub = Path(os.environ.get("UBTRFS", str(REPO / "build" / "ubtrfs"))).resolve()
    if ub.parent.parent != REPO:
        pytest.skip("binary under test %s is not in a build directory of this tree" % ub)
    return ub.parent


def sanitizer_flags(build):
    if build.name == "build-san":
        return ["-fsanitize=address,undefined", "-fno-omit-frame-pointer"]
    if build.name == "build-tsan":
        return ["-fsanitize=thread"]
    return []


def make_vars(build):
    """make's variables for `build`, with the compiler it was built with (its .flags file begins
    with it), so that installing does not rebuild it with another."""
    out = ["SAN=1"] if build.name == "build-san" else ["TSAN=1"] if build.name == "build-tsan" else \
        ["BUILD=" + build.name]
    flags = build / ".flags"
    if flags.is_file() and flags.read_text().split():
        out.append("CC=" + flags.read_text().split()[0])
    return out


def make(build, *targets, timeout=900):
    """make in the repository for `build`, one make at a time machine-wide (as test_tool builds)."""
    with T.file_lock("/run/lock/ubtrfs-test-build.lock"):
        return T.run(["make", "-C", REPO] + make_vars(build) + list(targets), timeout=timeout)


class Installed:
    def __init__(self, build, dest):
        self.build = build
        self.dest = dest
        self.usr = dest / "usr"
        self.lib = self.usr / "lib"
        self.include = self.usr / "include"
        self.man8 = self.usr / "share" / "man" / "man8"
        self.completion = self.usr / "share" / "bash-completion" / "completions" / "ubtrfs"
        major, minor, patch = header_version()
        self.version = "%d.%d.%d" % (major, minor, patch)
        self.soname = "libubtrfs.so.%d" % major
        self.sofile = "libubtrfs.so." + self.version

    def env(self):
        """pkg-config and the loader see the staged tree as a user's system would see /usr."""
        env = dict(os.environ)
        env["PKG_CONFIG_PATH"] = str(self.lib / "pkgconfig")
        env["PKG_CONFIG_SYSROOT_DIR"] = str(self.dest)
        env["LD_LIBRARY_PATH"] = str(self.lib)
        return env

    def pkg_config(self, *args):
        cp = subprocess.run(["pkg-config", *args, "ubtrfs"], env=self.env(), capture_output=True, text=True)
        assert cp.returncode == 0, cp.stderr
        return cp.stdout.split()


@pytest.fixture(scope="module")
def installed(scratch):
    build = build_dir()
    if not shutil.which("scdoc"):
        pytest.skip("scdoc not installed (scripts/install-deps installs it): no man pages to install")
    dest = Path(scratch) / "install-root"
    T.rmtree(dest)
    make(build, "install", "PREFIX=/usr", "DESTDIR=%s" % dest)
    yield Installed(build, dest)
    T.rmtree(dest)


def run_with(env, cmd, **kw):
    return subprocess.run([str(c) for c in cmd], env=env, capture_output=True, text=True, timeout=120, **kw)


# ---------------------------------------------------------------------------
# the installed tree, one version


def test_install_tree(installed):
    i = installed
    assert os.access(i.usr / "bin" / "ubtrfs", os.X_OK)
    assert (i.lib / i.sofile).is_file() and not (i.lib / i.sofile).is_symlink()
    assert os.readlink(i.lib / i.soname) == i.sofile
    assert (i.lib / "libubtrfs.so").resolve() == (i.lib / i.sofile).resolve()
    assert (i.lib / "libubtrfs.a").is_file()
    headers = sorted(p.name for p in (REPO / "include" / "ubtrfs").glob("*.h"))
    assert sorted(p.name for p in (i.include / "ubtrfs").iterdir()) == headers
    for h in headers:
        assert (i.include / "ubtrfs" / h).read_bytes() == (REPO / "include" / "ubtrfs" / h).read_bytes()
    assert (i.lib / "pkgconfig" / "ubtrfs.pc").is_file()
    assert i.completion.is_file()
    pages = sorted(p.name for p in i.man8.iterdir())
    assert "ubtrfs.8" in pages, pages
    # the shared library names its ABI: programs record libubtrfs.so.MAJOR
    dyn = T.run(["readelf", "-d", i.lib / i.sofile]).stdout.decode()
    assert re.search(r"\(SONAME\)\s+Library soname: \[%s\]" % re.escape(i.soname), dyn), dyn


def test_one_version_everywhere(installed, ubtrfs_bin):
    i = installed
    cp = T.ubtrfs("--version")
    assert cp.returncode == 0 and cp.stdout.decode().strip() == "ubtrfs " + i.version, T.describe(cp)
    assert i.pkg_config("--modversion") == [i.version]
    # the Debian package's version is the library's (a native package: no revision)
    first = (REPO / "debian" / "changelog").read_text().splitlines()[0]
    m = re.match(r"^ubtrfs \(([^)]+)\) ", first)
    assert m and m.group(1) == i.version, "debian/changelog %r, version.h %s" % (first, i.version)
    # the man pages carry it too
    assert ('"ubtrfs %s"' % i.version) in (i.man8 / "ubtrfs.8").read_text()


def test_uninstall_removes_everything(installed, scratch):
    dest = Path(scratch) / "install-uninstall"
    T.rmtree(dest)
    try:
        make(installed.build, "install", "PREFIX=/opt/ub", "DESTDIR=%s" % dest)
        files = [p for p in dest.rglob("*") if not p.is_dir()]
        assert any(p.name == "ubtrfs.pc" for p in files), files
        # the .pc file names the directories of this install
        pc = (dest / "opt/ub/lib/pkgconfig/ubtrfs.pc").read_text()
        assert "libdir=/opt/ub/lib" in pc and "includedir=/opt/ub/include" in pc, pc
        make(installed.build, "uninstall", "PREFIX=/opt/ub", "DESTDIR=%s" % dest)
        left = [str(p.relative_to(dest)) for p in dest.rglob("*") if not p.is_dir()]
        assert not left, "make uninstall left %r" % left
    finally:
        T.rmtree(dest)


# ---------------------------------------------------------------------------
# the library's interface


def public_declarations(include_dir):
    """(functions, objects) the public headers declare, by the compiler's account."""
    work = include_dir.parent / "decls"
    work.mkdir(exist_ok=True)
    src = work / "all.c"
    headers = sorted((include_dir / "ubtrfs").glob("*.h"))
    src.write_text("".join('#include "ubtrfs/%s"\n' % h.name for h in headers))
    aux = work / "aux.txt"
    T.run(["gcc", "-std=gnu11", "-fsyntax-only", "-I", include_dir, "-aux-info", aux, src])
    funcs = set()
    for line in aux.read_text().splitlines():
        if "/ubtrfs/" not in line.split("*/")[0] or " static " in line:
            continue
        m = re.search(r"\*/ extern [^(]*?\b(\w+) \(", line)
        assert m, line
        funcs.add(m.group(1))
    objects = set()
    for h in headers:
        objects.update(re.findall(r"^extern\s[^(;]*?\b(\w+)\s*(?:\[[^\]]*\])?\s*;", h.read_text(), re.M))
    return funcs, objects


def exported(sofile):
    out = T.run(["nm", "-D", "--defined-only", sofile]).stdout.decode()
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


def test_exports_exactly_the_public_api(installed):
    names = exported(installed.lib / installed.sofile)
    if installed.build.name == "build-san":
        # AddressSanitizer's one-definition-rule marker of each exported object (ASan builds only)
        names = {n for n in names if not n.startswith("__odr_asan.")}
    funcs, objects = public_declarations(installed.include)
    not_ub = sorted(n for n in names if not n.startswith("ub_"))
    assert not not_ub, "exported names without the ub_ prefix: %s" % not_ub
    # a declared function the library does not export fails every program that calls it
    missing = sorted((funcs | objects) - names)
    assert not missing, "declared in include/ubtrfs/ but not exported: %s" % missing
    extra = sorted(names - funcs - objects)
    assert not extra, "exported but declared in no public header: %s" % extra
    print("libubtrfs exports %d names (%d functions, %d objects)" % (len(names), len(funcs), len(objects)))


def test_command_links_against_shared_library_alone(installed, scratch):
    """The command is a library user: its objects need nothing the shared library hides."""
    b = installed.build
    objs = sorted((b / "cmd").glob("*.o"))
    if not objs:
        pytest.skip("no command objects in %s" % b)
    out = Path(scratch) / "ubtrfs-shared"
    # the command also calls libuuid and libblkid itself (Libs.private names them) and libfuse3
    fuse = T.run(["pkg-config", "--libs", "fuse3"]).stdout.decode().split()
    cp = run_with(installed.env(), ["cc"] + sanitizer_flags(b) + ["-o", out] + objs +
                  installed.pkg_config("--libs", "--static") + fuse)
    assert cp.returncode == 0, cp.stderr[-3000:]
    try:
        needed = T.run(["readelf", "-d", out]).stdout.decode()
        assert installed.soname in needed, needed
        cp = run_with(installed.env(), [out, "--version"])
        assert cp.returncode == 0 and cp.stdout.strip() == "ubtrfs " + installed.version, cp.stderr
    finally:
        out.unlink()


def test_libcrypto_loaded_only_for_sha256(ubtrfs_bin):
    """Neither the command nor the shared library links libcrypto: relocating it was a third of
    every command's start (bench/README.md, 15-ls-inline); lib/disk/csum.c loads it with dlopen
    at the first SHA-256 checksum (test_mkfs_rootdir's sha256 images read through it)."""
    b = build_dir()
    for f in (T.ubtrfs_binary(), b / "libubtrfs.so"):
        if not f.exists():
            continue
        needed = T.run(["readelf", "-d", str(f)]).stdout.decode()
        assert "NEEDED" in needed and "libcrypto" not in needed, (f, needed)


def compile_alone(args):
    cmd, src = args
    cp = subprocess.run(cmd, capture_output=True, text=True)
    return src, cp.returncode, cp.stderr


def test_headers_compile_alone_as_c_and_cpp(installed):
    work = installed.dest / "headers"
    work.mkdir(exist_ok=True)
    strict = ["-Wall", "-Wextra", "-Werror", "-pedantic", "-I", str(installed.include), "-c", "-o", "/dev/null"]
    jobs = []
    for h in sorted((installed.include / "ubtrfs").glob("*.h")):
        # one declaration of the user's own after the header: a translation unit is never empty
        body = '#include "ubtrfs/%s"\nint ub_test_after_%s;\n' % (h.name, h.stem)
        c = work / ("%s.c" % h.stem)
        c.write_text(body)
        cc = work / ("%s.cc" % h.stem)
        cc.write_text(body)
        jobs.append((["cc", "-std=c11"] + strict + [str(c)], "%s as C11" % h.name))
        jobs.append((["c++", "-std=c++11"] + strict + [str(cc)], "%s as C++11" % h.name))
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as ex:
        failed = [(src, err) for src, rc, err in ex.map(compile_alone, jobs) if rc != 0]
    assert not failed, "\n\n".join("%s:\n%s" % (src, err[-1500:]) for src, err in failed)


def test_cpp_reaches_every_public_name(installed):
    """C++ links against every exported name: each public declaration has C linkage."""
    funcs, objects = public_declarations(installed.include)
    work = installed.dest / "cpp"
    work.mkdir(exist_ok=True)
    headers = sorted((installed.include / "ubtrfs").glob("*.h"))
    src = work / "all.cc"
    src.write_text(
        "".join('#include "ubtrfs/%s"\n' % h.name for h in headers) +
        "#include <cstdio>\n"
        "typedef void (*any_fn)();\n"
        "static any_fn const fns[] = {\n" +
        "".join("\treinterpret_cast<any_fn>(&%s),\n" % f for f in sorted(funcs)) +
        "};\n"
        "static const void *const objs[] = {\n" +
        "".join("\t&%s,\n" % o for o in sorted(objects)) +
        "\tnullptr };\n"
        "int main() {\n"
        "\tstd::printf(\"%s %zu %zu\\n\", ub_version(), sizeof(fns) / sizeof(fns[0]), sizeof(objs) / sizeof(objs[0]) - 1);\n"
        "\treturn 0;\n"
        "}\n")
    out = work / "all"
    cp = run_with(installed.env(), ["c++", "-std=c++11", "-Wall", "-Wextra", "-Werror"] +
                  sanitizer_flags(installed.build) + installed.pkg_config("--cflags") +
                  ["-o", out, src] + installed.pkg_config("--libs"))
    assert cp.returncode == 0, cp.stderr[-3000:]
    cp = run_with(installed.env(), [out])
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.split() == [installed.version, str(len(funcs)), str(len(objects))]


# ---------------------------------------------------------------------------
# the examples, built as a user builds them


@pytest.fixture(scope="module")
def example_image(scratch):
    d = Path(scratch) / "example-image"
    T.rmtree(d)
    src = d / "src"
    (src / "docs").mkdir(parents=True)
    (src / "hello.txt").write_bytes(b"hello from an image\n")
    data = bytes((i * 7 + i // 4096) & 0xFF for i in range(3 * 1024 * 1024 + 1234))
    (src / "docs" / "big.bin").write_bytes(data)
    os.symlink("hello.txt", src / "link")
    img = d / "img"
    with open(img, "wb") as f:
        f.truncate(128 << 20)
    T.run(["mkfs.btrfs", "-q", "-f", "--rootdir", src, img])
    yield img, src
    T.rmtree(d)


@pytest.fixture(scope="module")
def examples(installed):
    work = installed.dest / "examples"
    T.rmtree(work)
    shutil.copytree(REPO / "examples", work)
    cflags = " ".join(["-O1", "-g", "-Wall", "-Wextra", "-Werror"] + sanitizer_flags(installed.build))
    cp = run_with(installed.env(), ["make", "-C", work, "CFLAGS=" + cflags, "LDFLAGS=" + cflags])
    assert cp.returncode == 0, cp.stdout[-2000:] + cp.stderr[-2000:]
    # built against the shared library of the installed tree
    needed = T.run(["readelf", "-d", work / "ls_image"]).stdout.decode()
    assert installed.soname in needed, needed
    return work


def test_example_ls_image(installed, examples, example_image):
    img, src = example_image
    cp = run_with(installed.env(), [examples / "ls_image", img])
    assert cp.returncode == 0, cp.stderr
    rows = {line.split()[-1]: line.split() for line in cp.stdout.splitlines()}
    assert sorted(rows) == sorted(os.listdir(src)), cp.stdout
    assert rows["docs"][0] == "d" and rows["link"][0] == "l" and rows["hello.txt"][0] == "-"
    assert int(rows["hello.txt"][2]) == (src / "hello.txt").stat().st_size
    cp = run_with(installed.env(), [examples / "ls_image", img, "/docs"])
    assert cp.returncode == 0 and cp.stdout.split()[-1] == "big.bin", cp.stdout + cp.stderr
    # a path that is not there: the library's answer, exit 2
    cp = run_with(installed.env(), [examples / "ls_image", img, "/nope"])
    assert cp.returncode == 2 and "No such file" in cp.stderr, cp.stderr


def test_example_copy_file(installed, examples, example_image, scratch):
    img, src = example_image
    out = Path(scratch) / "example-copy.bin"
    try:
        cp = run_with(installed.env(), [examples / "copy_file", img, "/docs/big.bin", out])
        assert cp.returncode == 0, cp.stderr
        assert out.read_bytes() == (src / "docs" / "big.bin").read_bytes()
        cp = run_with(installed.env(), [examples / "copy_file", img, "/docs", out])
        assert cp.returncode == 2 and "not a regular file" in cp.stderr, cp.stderr
    finally:
        if out.exists():
            out.unlink()


# ---------------------------------------------------------------------------
# the man pages and the completion against --help

OPTION_RE = re.compile(r"(?<![\w-])--?[A-Za-z0-9][\w-]*")


def help_text(*words):
    cp = T.ubtrfs(*words, "--help")
    assert cp.returncode == 0, T.describe(cp)
    return cp.stdout.decode()


def usage_lines(text):
    out, inside = [], False
    for line in text.splitlines():
        if line.startswith("usage:"):
            inside = True
            out.append(line[len("usage:"):])
        elif inside and re.match(r"^\s+ubtrfs ", line):
            out.append(line)
        else:
            inside = False
    return out


def help_options(text):
    """Every option a --help text lists: its usage lines and its option lines (an indented
    dash; the option part ends where two spaces start the description)."""
    opts = set()
    for line in usage_lines(text):
        opts.update(OPTION_RE.findall(line))
    for line in text.splitlines():
        m = re.match(r"^ {1,8}(-\S.*)$", line)
        if m:
            opts.update(OPTION_RE.findall(re.split(r"\s{2,}", m.group(1))[0]))
    return opts


def mount_suboptions(text):
    """The -o names `mount --help` lists (lines indented by 7 below `-o OPTIONS`)."""
    names, inside = set(), False
    for line in text.splitlines():
        if re.match(r"^\s+-o OPTIONS", line):
            inside = True
            continue
        if inside and re.match(r"^ {1,6}-", line):
            break
        m = re.match(r"^ {7}([a-z][\w-]*)(.*)$", line) if inside else None
        if m:
            names.add(m.group(1))
            more = re.match(r"(?:[=\[][^\s,]*)?(?:, [a-z][\w-]*(?:[=\[][^\s,]*)?)*", m.group(2)).group(0)
            names.update(re.findall(r", ([a-z][\w-]*)", more))
    return names


def commands():
    text = help_text()
    body = text.split("Commands:", 1)[1]
    return re.findall(r"^  ([a-z][a-z-]+) ", body, re.M)


def subcommands(cmd, text):
    """The subcommands a command's --help names: lower-case words after `ubtrfs CMD` in its
    usage (show|df|...), and, when the usage says COMMAND, the indented list below."""
    subs = []
    for line in usage_lines(text):
        m = re.search(r"ubtrfs %s (\S+)" % re.escape(cmd), line)
        if m and re.fullmatch(r"[a-z][a-z|-]*", m.group(1)):
            subs += m.group(1).split("|")
    if any(re.search(r"ubtrfs %s COMMAND" % re.escape(cmd), l) for l in usage_lines(text)):
        subs += re.findall(r"^  ([a-z][a-z-]+) ", text, re.M)
    return sorted(set(subs))


def man_terms(path):
    """What a rendered page defines: the bold words of its term lines (the line before each
    indented block, scdoc's `.RS`), so that an option named only in an example or in
    passing does not count as documented."""
    lines = path.read_text().splitlines()
    terms = set()
    for line, following in zip(lines, lines[1:]):
        if not following.startswith(".RS"):
            continue
        for bold in re.findall(r"\\fB(.*?)\\fR", line.replace("\\-", "-").replace("\\&", "")):
            terms.update(OPTION_RE.findall(bold))
            m = re.match(r"[a-z][\w-]*", bold)
            if m:
                terms.add(m.group(0))
    return terms


def test_man_pages_list_every_option_of_help(installed, ubtrfs_bin):
    problems = []
    cmds = commands()
    assert "mkfs" in cmds and "restore" in cmds, cmds
    pages = {p.name for p in installed.man8.iterdir()}
    expected_pages = {"ubtrfs.8"} | {"ubtrfs-%s.8" % c for c in cmds}
    assert pages == expected_pages, "man pages %s, commands %s" % (sorted(pages), cmds)
    top = man_terms(installed.man8 / "ubtrfs.8")
    assert {"--version", "--help", "--no-scan", "--verbose"} <= top, sorted(top)
    for c in cmds:
        if c not in top:
            problems.append("ubtrfs(8) does not describe the command %s" % c)
        page = man_terms(installed.man8 / ("ubtrfs-%s.8" % c))
        text = help_text(c)
        helps = [((c,), text)]
        for s in subcommands(c, text):
            if s not in page:
                problems.append("ubtrfs-%s(8) does not describe the subcommand %s" % (c, s))
            helps.append(((c, s), help_text(c, s)))
        for words, t in helps:
            for opt in sorted(help_options(t) - page):
                problems.append("ubtrfs-%s(8) does not describe %s (in `ubtrfs %s --help`)" % (c, opt, " ".join(words)))
        if c == "mount":
            subs = mount_suboptions(text)
            assert {"subvol", "compress-force", "usebackuproot", "nossd"} <= subs, subs
            for name in sorted(subs - page):
                problems.append("ubtrfs-mount(8) does not describe the mount option %s" % name)
    assert not problems, "\n".join(problems)


def complete(installed, *words):
    """What the installed bash completion offers for the last of `words`."""
    script = (
        'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 )); _ubtrfs; '
        'printf "%s\\n" "${COMPREPLY[@]}"')
    cp = subprocess.run(["bash", "-c", script, "bash", str(installed.completion), str(T.ubtrfs_binary()), *words],
                        capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0, cp.stderr
    return set(cp.stdout.split())


def test_bash_completion_follows_help(installed, ubtrfs_bin):
    cmds = commands()
    assert complete(installed, "") == set(cmds) | {"--help", "--version"}
    for c in cmds:
        text = help_text(c)
        subs = subcommands(c, text)
        if subs:
            assert complete(installed, c, "") == set(subs) | {"--help"}, c
            for s in subs:
                want = help_options(help_text(c, s))
                got = complete(installed, c, s, "-")
                assert want <= got, "ubtrfs %s %s -: missing %s" % (c, s, sorted(want - got))
        else:
            want = help_options(text)
            got = complete(installed, c, "-")
            assert want <= got, "ubtrfs %s -: missing %s" % (c, sorted(want - got))
    assert complete(installed, "mkfs", "-d", "raid1") == {"raid1", "raid10", "raid1c3", "raid1c4"}
    assert complete(installed, "mount", "-o", "ro,subvol") == {"ro,subvol=", "ro,subvolid="}


# ---------------------------------------------------------------------------
# long: the Debian package, the ABI report


@pytest.fixture
def clean_clone(scratch):
    if not T.LONG_TESTS:
        pytest.skip("minutes of building: UBTRFS_LONG_TESTS=1")
    head = T.run(["git", "-C", REPO, "rev-parse", "HEAD"]).stdout.decode().strip()
    d = Path(scratch) / "clone"
    T.rmtree(d)
    d.mkdir()
    T.run(["git", "clone", "-q", "--no-hardlinks", REPO, d / "ubtrfs"])
    T.run(["git", "-C", d / "ubtrfs", "checkout", "-q", head])
    yield d / "ubtrfs"
    T.rmtree(d)


def test_debian_package_builds_and_passes_lintian(clean_clone):
    src = clean_clone
    cp = subprocess.run(["dpkg-checkbuilddeps"], cwd=src, capture_output=True, text=True)
    if cp.returncode != 0:
        pytest.skip("build dependencies missing (docs/install.md lists them): %s" % cp.stderr.strip())
    if not shutil.which("lintian"):
        pytest.skip("lintian not installed (docs/install.md)")
    cp = subprocess.run(["dpkg-buildpackage", "-us", "-uc", "-b"], cwd=src, capture_output=True, text=True,
                        timeout=3600)
    assert cp.returncode == 0, cp.stdout[-4000:] + cp.stderr[-4000:]
    version = "%d.%d.%d" % header_version()
    # (and the -dbgsym packages debhelper makes of the debug information)
    debs = sorted(p.name for p in src.parent.glob("*.deb") if "-dbgsym_" not in p.name)
    names = sorted({d.split("_")[0] for d in debs})
    assert names == ["libubtrfs-dev", "libubtrfs0", "ubtrfs"], debs
    assert all("_%s_" % version in d for d in debs), debs

    def contents(name):
        deb = next(src.parent.glob("%s_*.deb" % name))
        return T.run(["dpkg-deb", "-c", deb]).stdout.decode()

    tool, lib, dev = contents("ubtrfs"), contents("libubtrfs0"), contents("libubtrfs-dev")
    assert "./usr/bin/ubtrfs" in tool and "ubtrfs-restore.8.gz" in tool and "completions/ubtrfs" in tool, tool
    assert re.search(r"libubtrfs\.so\.%s\b" % re.escape(version), lib), lib
    for want in ("include/ubtrfs/fs.h", "libubtrfs.a", "libubtrfs.so ->", "pkgconfig/ubtrfs.pc", "ls_image.c"):
        assert want in dev, (want, dev)
    changes = next(src.parent.glob("*.changes"))
    cp = subprocess.run(["lintian", "--fail-on", "error,warning", str(changes)], capture_output=True, text=True,
                        timeout=1200)
    tags = [l for l in cp.stdout.splitlines() if l[:2] in ("E:", "W:")]
    assert cp.returncode == 0 and not tags, cp.stdout[-4000:] + cp.stderr[-2000:]


def test_abi_report_of_a_release_against_itself(clean_clone):
    src = clean_clone
    if not shutil.which("abidiff"):
        pytest.skip("abigail-tools not installed (scripts/install-deps installs it)")
    # no tag yet: the script says so and succeeds
    cp = subprocess.run(["scripts/abi-check", "build"], cwd=src, capture_output=True, text=True)
    assert cp.returncode == 0 and "no release tag" in cp.stdout, cp.stdout + cp.stderr
    T.run(["make", "-C", src, "-j2", "all"], timeout=3600)
    T.run(["git", "-C", src, "tag", "v%d.%d.%d" % header_version()])
    cp = subprocess.run(["scripts/abi-check", "build"], cwd=src, capture_output=True, text=True, timeout=3600)
    assert cp.returncode == 0 and "no ABI change" in cp.stdout, cp.stdout[-4000:] + cp.stderr[-4000:]
