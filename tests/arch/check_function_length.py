#!/usr/bin/env python3
"""No function of lib/, apps/ or cuda/ longer than 100 lines (CTest
`function_length`, label arch): a long function is split into named steps,
so the bound an issue set cannot grow back unnoticed.

    python3 tests/arch/check_function_length.py [--stats] [SOURCE_DIR]

A function's length is lizard's "length", its first line to its last,
comments and blank lines included. A table of data is exempt by name (TABLES,
each with why). Without lizard the check fails: scripts/setup.sh
installs it. --stats also prints the functions over 50 and over 100 lines
and the largest files.
"""
import os
import sys

LIMIT = 100
FOLDERS = ("lib", "apps", "cuda")
SUFFIXES = (".cpp", ".hpp", ".h", ".cu", ".cuh")

# Long because the data is: one row per line, no logic between the rows.
TABLES = {
    "syncopt::config::detail::make_key_specs":
        "the config key table, one row per key (docs/design.md §8): parsing, --set, "
        "validation, --help and configs/README.md all read it",
}

def load_lizard():
    try:
        import lizard  # noqa: PLC0415 (a missing module is reported, not raised)
    except ImportError:
        print(f"FAIL: the Python module lizard is not installed for {sys.executable}, and this "
              "check needs it to measure functions. Run scripts/setup.sh (it installs lizard "
              f"from PyPI), or: {sys.executable} -m pip install lizard", flush=True)
        sys.exit(1)
    return lizard


def sources(root):
    for folder in FOLDERS:
        for base, dirs, files in os.walk(os.path.join(root, folder)):
            dirs.sort()
            for name in sorted(files):
                if name.endswith(SUFFIXES):
                    yield os.path.join(base, name)


def measure(root):
    """(relative path, line count, [(name, start line, length)]) per file."""
    lizard = load_lizard()
    out = []
    for path in sources(root):
        with open(path, encoding="utf-8") as f:
            code = f.read()
        info = lizard.analyze_file.analyze_source_code(path, code)
        functions = [(fn.name, fn.start_line, fn.length) for fn in info.function_list]
        out.append((os.path.relpath(path, root), code.count("\n"), functions))
    return out


def print_stats(files):
    functions = [(length, f"{path}:{line}", name)
                 for path, _, fns in files for name, line, length in fns]
    over_50 = sorted((f for f in functions if f[0] > 50), reverse=True)
    print(f"{len(functions)} functions; {len(over_50)} over 50 lines, "
          f"{sum(1 for f in functions if f[0] > LIMIT)} over {LIMIT}")
    for length, where, name in over_50:
        print(f"  {length:4d}  {name}  ({where})")
    print("largest files (lines):")
    for path, lines, _ in sorted(files, key=lambda f: -f[1])[:10]:
        print(f"  {lines:5d}  {path}")


def main(argv):
    stats = "--stats" in argv
    args = [a for a in argv if a != "--stats"]
    root = os.path.abspath(args[0] if args else os.path.join(os.path.dirname(__file__), "..", ".."))
    files = measure(root)
    if stats:
        print_stats(files)
    failures, seen = [], {}
    for path, _, functions in files:
        for name, line, length in functions:
            seen[name] = max(seen.get(name, 0), length)
            if length <= LIMIT or name in TABLES:
                continue
            failures.append(f"{path}:{line}: {name} is {length} lines, over the limit of "
                            f"{LIMIT}: split it into named steps (a table of data goes into "
                            "TABLES in tests/arch/check_function_length.py, with why)")
    for name in TABLES:
        if seen.get(name, 0) <= LIMIT:
            failures.append(f"TABLES names {name}, which is no longer over {LIMIT} lines "
                            f"(or gone): remove it from tests/arch/check_function_length.py")
    for f in failures:
        print("FAIL", f, flush=True)
    if failures:
        return 1
    print(f"ok: every function of {', '.join(FOLDERS)} is at most {LIMIT} lines "
          f"({len(TABLES)} table(s) excepted)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
