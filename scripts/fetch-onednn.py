#!/usr/bin/env python3
"""Puts oneDNN 3 (the CPU backend's library) into .deps/onednn-<version>/,
from PyPI's wheels, unless it is there already.

    scripts/fetch-onednn.py [--dest DIR] [--print-root]

Debian bookworm packages oneDNN 2.6 only; syncopt uses the v3 API (bf16 on
AMX and AVX512-BF16 is faster there, docs/development.md). A system oneDNN 3
(Spack, oneAPI, a module; `-DDNNL_ROOT=...` or $DNNL_ROOT) is found first by
CMake; this is the fallback that scripts/setup.sh runs. The wheels are
`onednn-cpu-gomp` (libdnnl.so.3, GNU OpenMP, as the rest of syncopt) and
`onednn-devel-cpu-gomp` (headers and the CMake config) of the same release;
PyPI's newer `onednn` wheels are a SYCL build that needs Intel's DPC++ and
OpenCL runtimes (about 2 GB) and threads through TBB, not OpenMP.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

RELEASE = "2023.2.0"  # oneDNN 3.2.0
VERSION = "3.2.0"
WHEELS = ("onednn-cpu-gomp", "onednn-devel-cpu-gomp")


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dest", default=os.path.join(root, ".deps", "onednn-" + VERSION))
    ap.add_argument("--print-root", action="store_true", help="print the prefix and exit")
    args = ap.parse_args()
    dest = os.path.abspath(args.dest)
    if args.print_root:
        print(dest)
        return 0
    config = os.path.join(dest, "lib", "cmake", "dnnl", "dnnl-config.cmake")
    if os.path.exists(config):
        return 0
    print(f"fetch-onednn: downloading oneDNN {VERSION} ({', '.join(WHEELS)} {RELEASE}) "
          f"from PyPI into {dest}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
               "--no-deps", "--only-binary=:all:", "-d", tmp] + [f"{w}=={RELEASE}" for w in WHEELS]
        rc = subprocess.call(cmd)
        if rc != 0:
            print("fetch-onednn: pip download failed (exit %d); with no access to PyPI, install "
                  "oneDNN 3 and pass -DDNNL_ROOT=<its prefix> to cmake" % rc, file=sys.stderr)
            return 1
        staging = dest + ".partial"
        shutil.rmtree(staging, ignore_errors=True)
        for name in sorted(os.listdir(tmp)):
            with zipfile.ZipFile(os.path.join(tmp, name)) as z:
                for info in z.infolist():
                    # <dist>.data/data/<lib|include|share>/...: the wheel's prefix.
                    parts = info.filename.split("/")
                    if len(parts) < 4 or not parts[0].endswith(".data") or parts[1] != "data":
                        continue
                    target = os.path.join(staging, *parts[2:])
                    if info.is_dir():
                        continue
                    os.makedirs(os.path.dirname(target), exist_ok=True)
                    with z.open(info) as src, open(target, "wb") as out:
                        shutil.copyfileobj(src, out)
                    mode = (info.external_attr >> 16) & 0o777
                    if mode:
                        os.chmod(target, mode)
        if not os.path.exists(os.path.join(staging, "lib", "cmake", "dnnl", "dnnl-config.cmake")):
            print("fetch-onednn: the wheels hold no lib/cmake/dnnl/dnnl-config.cmake",
                  file=sys.stderr)
            return 1
        # Wheels hold no symbolic links: libdnnl.so and libdnnl.so.3 come as
        # copies of libdnnl.so.3.<minor>; links, as an install has them.
        lib = os.path.join(staging, "lib")
        real = "libdnnl.so." + ".".join(VERSION.split(".")[:2])
        for alias in ("libdnnl.so", "libdnnl.so.3"):
            path = os.path.join(lib, alias)
            if os.path.exists(os.path.join(lib, real)) and os.path.isfile(path):
                os.remove(path)
                os.symlink(real, path)
        shutil.rmtree(dest, ignore_errors=True)
        os.rename(staging, dest)
    print(f"fetch-onednn: oneDNN {VERSION} in {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
