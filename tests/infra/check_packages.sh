#!/usr/bin/env bash
# scripts/check-packages.py can fail: on this build tree it passes with
# scripts/setup.sh as it is, and fails, naming ocl-icd-opencl-dev and
# libOpenCL.so, with a copy of setup.sh that lacks that package (a package
# the configure finds without anything asking for it by name: CMake's
# FindCUDAToolkit records libOpenCL; once, oneDNN 2.6's config needed it, a
# Recommends of libdnnl-dev only, and broke main on a fresh machine).
#   tests/infra/check_packages.sh BUILD_DIR      (exit 77: no dpkg, skipped)
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
build=$1
command -v dpkg-query >/dev/null || { echo "SKIP: no dpkg (not Debian)"; exit 77; }
check=$repo/scripts/check-packages.py
fail=0

out=$(python3 "$check" "$build" 2>&1); rc=$?
echo "$out"
if [ $rc -ne 0 ]; then echo "FAIL: the check does not pass with scripts/setup.sh as it is (exit $rc)"; fail=1; fi

tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
sed 's/\([ (]\)ocl-icd-opencl-dev\([ )]\)/\1\2/' "$repo/scripts/setup.sh" >"$tmp/setup.sh"
if bash "$tmp/setup.sh" --list-packages | grep -qx ocl-icd-opencl-dev; then
  echo "FAIL: could not remove ocl-icd-opencl-dev from a copy of setup.sh"; exit 1
fi
out=$(python3 "$check" --setup "$tmp/setup.sh" "$build" 2>&1); rc=$?
echo "--- without ocl-icd-opencl-dev in PACKAGES:"
echo "$out"
if [ $rc -ne 1 ]; then echo "FAIL: expected exit 1 without ocl-icd-opencl-dev, got $rc"; fail=1; fi
grep -q '^  ocl-icd-opencl-dev$' <<<"$out" || { echo "FAIL: ocl-icd-opencl-dev not named"; fail=1; }
grep -q 'libOpenCL\.so .*OpenCL_LIBRARY' <<<"$out" || { echo "FAIL: libOpenCL.so and OpenCL_LIBRARY not named"; fail=1; }
((fail)) && exit 1
echo "PASS"
