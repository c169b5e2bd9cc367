#!/usr/bin/env python3
"""Fails when a build used a Debian package that scripts/setup.sh does not
install, so a fresh machine would not have it.

    scripts/check-packages.py [--setup scripts/setup.sh] [--given-list FILE] BUILD_DIR...

main once failed on a fresh machine: oneDNN's CMake config looks for OpenCL,
which comes from ocl-icd-opencl-dev, only a Recommends of libdnnl-dev, and
CI passed because that package had been installed by hand. This check looks
at what a configured and built tree actually used, not at what we think it
uses:

- CMakeCache.txt: every entry whose value is an existing absolute path
  (*_LIBRARY, *_INCLUDE_DIR, <Pkg>_DIR of find_package, *_EXECUTABLE, the
  compilers and tools);
- every CMake file the configure read (CMAKE_MAKEFILE_DEPENDS, or build.ninja's
  re-run dependencies): find modules and packages' config files;
- every header the compilers included (their depfiles, or `ninja -t deps`);
- every absolute path on a link line (link.txt, or build.ninja);
- every absolute path in a test command (CTestTestfile.cmake);
- `ldd` of every ELF executable and shared library in the build tree.

Each file is mapped to the Debian package that ships it (dpkg's file lists;
a symlink through /etc/alternatives is followed hop by hop; merged /usr is
taken into account; a directory is covered when any package that owns it
is). A package is allowed when it is in setup.sh's PACKAGES or pulled in by
their Depends/Pre-Depends (apt installs with --no-install-recommends), or is
on every Debian machine (Essential, or Priority required/important, and
what those depend on). Dependencies are read from dpkg's own database, so
the check needs neither apt lists nor a network. --given-list adds the
packages of a known fresh machine (lines "apt<TAB>name<TAB>version", as in
the environment's installed-*.txt); without it the check asks setup.sh to
install everything beyond Debian's base.

Files that no Debian package ships are not failures (the CUDA toolkit under
/usr/local/cuda*, a Python from pyenv): they are listed as notes, and files
of the source and build trees are ignored.

Exit 0: every package used is covered; 1: some is not (each is named with
the files that need it and where the build used them); 2: the check could
not run (no build tree, no dpkg).
"""
import argparse
import glob
import os
import re
import shlex
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))


def say(msg):
    print(f"check-packages: {msg}", flush=True)


# ---------------------------------------------------------------- dpkg

def installed_packages():
    """name -> dict(priority, essential, deps: [[alternatives]], provides)."""
    fmt = ("${Package}\t${db:Status-Abbrev}\t${Priority}\t${Essential}\t"
           "${Pre-Depends}\t${Depends}\t${Provides}\n")
    out = subprocess.run(["dpkg-query", "-W", "-f", fmt], check=True,
                         capture_output=True, text=True).stdout
    pkgs = {}
    for line in out.splitlines():
        f = line.split("\t")
        if len(f) < 7 or not f[1].startswith("ii"):
            continue
        name, prio, ess, pre, dep, prov = f[0], f[2], f[3], f[4], f[5], f[6]
        groups = []
        for rel in (pre, dep):
            for group in filter(None, (g.strip() for g in rel.split(","))):
                groups.append([bare(a) for a in group.split("|") if bare(a)])
        p = pkgs.setdefault(name, {"priority": prio, "essential": ess == "yes",
                                   "deps": [], "provides": set()})
        p["deps"] += groups
        p["provides"] |= {bare(x) for x in prov.split(",") if bare(x)}
    return pkgs


def bare(relation):
    """'libfoo:any (>= 1.2)' -> 'libfoo'."""
    name = relation.strip().split(" ")[0].split("(")[0]
    return name.split(":")[0].strip()


def closure(start, pkgs):
    """start plus every installed package reachable by Depends/Pre-Depends
    (every installed alternative of a group, and the installed providers of
    a virtual package)."""
    providers = {}
    for name, p in pkgs.items():
        for v in p["provides"]:
            providers.setdefault(v, set()).add(name)
    seen, todo = set(), [n for n in start if n in pkgs]
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        for group in pkgs[n]["deps"]:
            for alt in group:
                for m in ({alt} if alt in pkgs else set()) | providers.get(alt, set()):
                    if m not in seen:
                        todo.append(m)
    return seen


def owners_index():
    """path -> set of packages, from dpkg's file lists."""
    index = {}
    info = "/var/lib/dpkg/info"
    for lst in glob.glob(os.path.join(info, "*.list")):
        pkg = os.path.basename(lst)[:-len(".list")].split(":")[0]
        with open(lst, encoding="utf-8", errors="surrogateescape") as fh:
            for line in fh:
                path = line.rstrip("\n")
                if path and path != "/.":
                    index.setdefault(path, set()).add(pkg)
    return index


def path_variants(path):
    """The path as used, each hop of its symlinks (/usr/bin/c++ ->
    /etc/alternatives/c++ -> /usr/bin/g++ -> g++-12), the real path; each
    also with /usr added or removed for merged /usr."""
    out = [os.path.normpath(path)]
    p = out[0]
    for _ in range(16):
        if not os.path.islink(p):
            break
        p = os.path.normpath(os.path.join(os.path.dirname(p), os.readlink(p)))
        out.append(p)
    out.append(os.path.realpath(path))
    more = []
    for p in out:
        more.append(p)
        for top in ("/lib", "/lib64", "/bin", "/sbin", "/libx32", "/lib32"):
            if p == top or p.startswith(top + "/"):
                more.append("/usr" + p)
            if p.startswith("/usr" + top + "/"):
                more.append(p[len("/usr"):])
    seen, uniq = set(), []
    for p in more:
        if p not in seen:
            seen.add(p)
            uniq.append(p)
    return uniq


# ---------------------------------------------------------------- the build

def is_under(path, dirs):
    real = os.path.realpath(path)
    return any(real == d or real.startswith(d + "/") for d in dirs)


class Used:
    """Files the build used, each with the first few places it was seen."""

    def __init__(self, ignore_dirs):
        self.files = {}
        self.ignore = [os.path.realpath(d) for d in ignore_dirs]

    def add(self, path, why):
        if not path.startswith("/") or not os.path.exists(path) or is_under(path, self.ignore):
            return
        path = os.path.normpath(path)
        whys = self.files.setdefault(path, [])
        if why not in whys and len(whys) < 3:
            whys.append(why)


CACHE_LINE = re.compile(r"^([A-Za-z0-9_.+-]+):([A-Z]+)=(.*)$")
CACHE_SKIP = re.compile(r"^(CMAKE_INSTALL_PREFIX|CMAKE_HOME_DIRECTORY|CMAKE_CACHEFILE_DIR|"
                        r".*_BINARY_DIR|.*_SOURCE_DIR|CMAKE_EXPORT_.*|FETCHCONTENT_.*)$")


def from_cache(build, used):
    path = os.path.join(build, "CMakeCache.txt")
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            m = CACHE_LINE.match(line.rstrip("\n"))
            if not m or CACHE_SKIP.match(m.group(1)) or m.group(2) in ("BOOL", "STATIC"):
                continue
            for part in m.group(3).split(";"):
                part = part.strip()
                if part.startswith("/"):
                    used.add(part, f"CMakeCache.txt {m.group(1)}")


# A package's version file alone is a candidate that find_package() looked
# at and passed over (Debian's oneDNN 2.6 when version 3 is asked for): not a
# use. Its config file beside it, read too, is one.
VERSION_FILE = re.compile(r"(.*/)([^/]*?)[-]?[cC]onfig[-]?[vV]ersion\.cmake$")


def configure_reads(paths):
    paths = list(paths)
    read = set(paths)
    for p in paths:
        m = VERSION_FILE.match(p)
        if m and not any(q.startswith(m.group(1)) and q != p for q in read):
            continue
        yield p


def from_configure(build, used):
    mk = os.path.join(build, "CMakeFiles", "Makefile.cmake")
    if os.path.exists(mk):
        text = open(mk, encoding="utf-8", errors="replace").read()
        m = re.search(r"set\(CMAKE_MAKEFILE_DEPENDS(.*?)\)", text, re.S)
        for p in configure_reads(re.findall(r'"(/[^"]+)"', m.group(1) if m else "")):
            used.add(p, "read by the configure")
    nj = os.path.join(build, "build.ninja")
    if os.path.exists(nj):
        text = open(nj, encoding="utf-8", errors="replace").read()
        m = re.search(r"^build build\.ninja.*?(?=^\S)", text, re.S | re.M)
        for p in configure_reads(re.findall(r"(/[^\s$|]+)", m.group(0) if m else "")):
            used.add(p, "read by the configure")


def depfile_paths(text):
    text = text.replace("\\\n", " ")
    for tok in text.split():
        tok = tok.rstrip(":")
        if tok.startswith("/"):
            yield tok


def from_compiles(build, used):
    found = 0
    for d in glob.glob(os.path.join(build, "**", "CMakeFiles", "**", "*.d"), recursive=True):
        found += 1
        with open(d, encoding="utf-8", errors="replace") as fh:
            for p in depfile_paths(fh.read()):
                used.add(p, "included by a compile")
    if os.path.exists(os.path.join(build, "build.ninja")):
        r = subprocess.run(["ninja", "-C", build, "-t", "deps"], capture_output=True, text=True)
        for line in r.stdout.splitlines():
            if line.startswith("    /"):
                found += 1
                used.add(line.strip(), "included by a compile")
    return found


def from_links(build, used):
    for lt in glob.glob(os.path.join(build, "**", "link.txt"), recursive=True):
        target = os.path.relpath(os.path.dirname(lt), build).replace("CMakeFiles/", "").replace(".dir", "")
        for tok in shlex.split(open(lt, encoding="utf-8", errors="replace").read()):
            for p in re.findall(r"(/[^\s,:]+\.(?:so(?:\.[0-9.]+)?|a|o))\b", tok):
                if not tok.startswith("-Wl,-rpath"):
                    used.add(p, f"linked into {target}")
    nj = os.path.join(build, "build.ninja")
    if os.path.exists(nj):
        for line in open(nj, encoding="utf-8", errors="replace"):
            if line.strip().startswith("LINK_LIBRARIES ="):
                for p in re.findall(r"(/[^\s,:]+\.(?:so(?:\.[0-9.]+)?|a))\b", line):
                    used.add(p, "linked")


def from_tests(build, used):
    for tt in glob.glob(os.path.join(build, "**", "CTestTestfile.cmake"), recursive=True):
        for line in open(tt, encoding="utf-8", errors="replace"):
            if line.startswith("add_test("):
                name = re.sub(r"^\[=*\[|\]=*\]$", "", line[len("add_test("):].split(" ")[0]).strip('"')
                for p in re.findall(r'"(/[^"]+)"', line):
                    used.add(p, f"test {name}")


def is_elf(path):
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == b"\x7fELF"
    except OSError:
        return False


def from_binaries(build, used, notes):
    n = 0
    for dirpath, dirnames, filenames in os.walk(build):
        dirnames[:] = [d for d in dirnames if d != "CMakeFiles"]
        for f in filenames:
            p = os.path.join(dirpath, f)
            if f.endswith((".o", ".a")) or os.path.islink(p) or not is_elf(p):
                continue
            if not (os.access(p, os.X_OK) or ".so" in f):
                continue
            n += 1
            rel = os.path.relpath(p, build)
            r = subprocess.run(["ldd", p], capture_output=True, text=True)
            for line in r.stdout.splitlines():
                m = re.match(r"\s*(\S+) => not found", line)
                if m:
                    notes.append(f"{m.group(1)}: not found by ldd for {rel}")
                    continue
                for q in re.findall(r"(/\S+) \(0x", line):
                    used.add(q, f"loaded by {rel} (ldd)")
    return n


# ---------------------------------------------------------------- setup.sh

def setup_packages(setup):
    r = subprocess.run(["bash", setup, "--list-packages"], capture_output=True, text=True)
    names = r.stdout.split()
    if r.returncode != 0 or not names:
        say(f"cannot list the packages of {setup} (`bash {setup} --list-packages`: "
            f"exit {r.returncode}) {r.stderr.strip()}")
        sys.exit(2)
    return names


def given_list(path):
    names = set()
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            f = line.rstrip("\n").split("\t")
            if len(f) >= 2 and f[0] == "apt":
                names.add(f[1].split(":")[0])
    return names


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("builds", nargs="+", metavar="BUILD_DIR")
    ap.add_argument("--setup", default=os.path.join(ROOT, "scripts", "setup.sh"))
    ap.add_argument("--given-list", help="packages of a fresh machine (apt<TAB>name lines)")
    ap.add_argument("-v", "--verbose", action="store_true", help="list every package used")
    args = ap.parse_args()

    for b in args.builds:
        if not os.path.exists(os.path.join(b, "CMakeCache.txt")):
            say(f"{b} is not a configured build tree (no CMakeCache.txt)")
            return 2
    if subprocess.run(["which", "dpkg-query"], capture_output=True).returncode != 0:
        say("no dpkg here: this check is for Debian machines")
        return 2

    pkgs = installed_packages()
    named = setup_packages(args.setup)
    not_installed = [n for n in named if n not in pkgs]
    from_setup = closure(named, pkgs)
    base = [n for n, p in pkgs.items() if p["essential"] or p["priority"] in ("required", "important")]
    given = closure(base, pkgs)
    if args.given_list:
        given |= closure(given_list(args.given_list), pkgs)
    allowed = from_setup | given
    index = owners_index()

    notes = []
    per_pkg = {}  # package -> {path: whys}
    unowned = {}
    total = 0
    cuda_roots = {os.path.realpath(p) for p in glob.glob("/usr/local/cuda*")}
    for build in args.builds:
        build = os.path.realpath(build)
        used = Used([ROOT, build])
        from_cache(build, used)
        from_configure(build, used)
        n_dep = from_compiles(build, used)
        from_links(build, used)
        from_tests(build, used)
        n_bin = from_binaries(build, used, notes)
        if n_dep == 0:
            notes.append(f"{build}: no compiler depfiles (not built yet?): headers not checked")
        if n_bin == 0:
            notes.append(f"{build}: no binaries (not built yet?): ldd not run")
        total += len(used.files)
        for path, whys in used.files.items():
            owners = set()
            for v in path_variants(path):
                owners = index.get(v, set())
                if owners:
                    break
            if not owners:
                if not any(is_under(path, [c]) for c in cuda_roots):
                    unowned.setdefault(path, whys)
                continue
            if os.path.isdir(path) and owners & allowed:
                continue  # a directory shared with a package we have
            if owners & allowed:
                continue
            for o in sorted(owners):
                per_pkg.setdefault(o, {}).setdefault(path, whys)

    bad = sorted(per_pkg)
    say(f"{total} files used by {' '.join(args.builds)}; setup.sh names {len(named)} packages "
        f"({len(from_setup)} with their dependencies); {len(given)} come with any Debian "
        f"machine{' or are on the given list' if args.given_list else ''}")
    if not_installed:
        say("note: named in setup.sh but not installed: " + " ".join(not_installed))
    for path, whys in sorted(unowned.items())[:12]:
        notes.append(f"{path}: from no Debian package, not checked ({'; '.join(whys)})")
    if len(unowned) > 12:
        notes.append(f"... and {len(unowned) - 12} more files from no Debian package")
    for n in notes:
        say("note: " + n)
    if not bad:
        say("PASS: every Debian package the build used is installed by scripts/setup.sh "
            "or comes with Debian's base")
        return 0
    say(f"FAIL: the build used {len(bad)} Debian package(s) that scripts/setup.sh does not "
        "install (not in PACKAGES nor a Depends of one) and a fresh machine need not have:")
    for pkg in bad:
        files = per_pkg[pkg]
        print(f"  {pkg}")
        # What CMake found or linked first: it says most about why.
        order = sorted(files.items(), key=lambda kv: (kv[1][0].startswith("included"), kv[0]))
        for path, whys in order[:5]:
            print(f"      {path}   ({'; '.join(whys)})")
        if len(files) > 5:
            print(f"      ... and {len(files) - 5} more files")
    say("add each to PACKAGES in scripts/setup.sh (or stop using it), then run this again")
    return 1


if __name__ == "__main__":
    sys.exit(main())
