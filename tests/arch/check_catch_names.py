#!/usr/bin/env python3
"""Every Catch2 test name must be usable as the one filter that CTest runs it
by (catch_discover_tests registers one CTest entry per name and passes the
name back as a command-line filter). A name that CTest splits (';'), that
Catch2 reads as an option ('-...'), an exclusion ('~...') or a wildcard
('*' at either end), or that holds a quote, made an entry that ran nothing and still
passed. `-w NoTests` (tests/CMakeLists.txt) fails such an entry; this check
names the culprit before anything runs.

    python3 tests/arch/check_catch_names.py BINARY...
"""
import subprocess
import sys


def problems(name):
    out = []
    if ";" in name:
        out.append("contains ';' (CTest splits the entry at it)")
    if name[:1] in ("-", "~"):
        out.append(f"starts with '{name[0]}' (Catch2 reads it as an option or an exclusion)")
    if name[:1] == "*" or name[-1:] == "*":
        out.append("starts or ends with '*' (a Catch2 wildcard)")
    if '"' in name or "\\" in name:
        out.append("contains '\"' or '\\' (special in a Catch2 filter)")
    if name != name.strip():
        out.append("has leading or trailing blanks")
    return out


def main(binaries):
    bad = 0
    total = 0
    for exe in binaries:
        res = subprocess.run([exe, "--list-test-names-only"], capture_output=True, text=True)
        if res.returncode < 0:
            print(f"{exe}: --list-test-names-only failed ({res.returncode})")
            return 1
        names = [n for n in res.stdout.splitlines() if n.strip()]
        if not names:
            print(f"{exe}: lists no test case")
            bad += 1
        seen = set()
        for n in names:
            total += 1
            for p in problems(n):
                print(f"{exe}: test case \"{n}\" {p}; rename it")
                bad += 1
            if n in seen:
                print(f"{exe}: test case \"{n}\" is listed twice")
                bad += 1
            seen.add(n)
    print(f"catch_names: {total} test cases in {len(binaries)} binaries, {bad} problem(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1:]))
